//! What to simulate: the model, the servo ↔ joint map with each servo's setup, the ground,
//! the starting pose and the loop period the model's time step must divide.

use std::path::PathBuf;

use rtloop_sim::servo::{ServoSetup, GEAR_RATIO_RANGE, MAX_CURRENT_A, MAX_GAIN, MOTOR_KT_NM_PER_A};

/// Where the model comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// The built-in quadruped ([`crate::QUADRUPED_MJCF`]).
    BuiltIn,
    /// A model file: MJCF (`.xml`) or URDF (`.urdf`), as MuJoCo compiles them.
    File(PathBuf),
}

/// One servo's joint: the servo with CAN id `id` on bus index `bus` turns the model's joint
/// named `joint` (a hinge or a slide), set up as `servo` says where it says anything.
#[derive(Debug, Clone, PartialEq)]
pub struct ServoJoint {
    /// Bus index (position in the robot's bus list, from 0).
    pub bus: usize,
    /// CAN id.
    pub id: u8,
    /// The model's joint name.
    pub joint: String,
    /// This servo's own setup (over [`PhysicsSpec::servo`] and the model's actuator).
    pub servo: ServoOverrides,
}

impl ServoJoint {
    /// Servo `id` on bus index `bus` turning `joint`, set up as every other servo.
    pub fn new(bus: usize, id: u8, joint: impl Into<String>) -> Self {
        ServoJoint { bus, id, joint: joint.into(), servo: ServoOverrides::default() }
    }
}

/// Parts of a coupled servo's setup ([`ServoSetup`]) given by the user; `None` leaves each to
/// the next source: a joint's own entry, then [`PhysicsSpec::servo`], then the model's
/// actuator on that joint ([`ModelActuators::Adopt`]), then [`ServoSetup::PHYSICAL`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ServoOverrides {
    /// Position gain, N·m/rev (N/m on a slide joint).
    pub kp_nm_per_rev: Option<f64>,
    /// Velocity gain, N·m·s/rev (N·s/m on a slide joint).
    pub kd_nms_per_rev: Option<f64>,
    /// Torque limit at the output, N·m (N on a slide joint).
    pub max_torque_nm: Option<f64>,
    /// Rotor turns per output turn.
    pub gear_ratio: Option<f64>,
    /// `motor_position.output.sign`: 1 or -1.
    pub output_sign: Option<f64>,
}

impl ServoOverrides {
    /// Each part from `self`, else from `fallback`.
    pub fn or(self, fallback: ServoOverrides) -> ServoOverrides {
        ServoOverrides {
            kp_nm_per_rev: self.kp_nm_per_rev.or(fallback.kp_nm_per_rev),
            kd_nms_per_rev: self.kd_nms_per_rev.or(fallback.kd_nms_per_rev),
            max_torque_nm: self.max_torque_nm.or(fallback.max_torque_nm),
            gear_ratio: self.gear_ratio.or(fallback.gear_ratio),
            output_sign: self.output_sign.or(fallback.output_sign),
        }
    }

    /// The setup: each part given, the rest [`ServoSetup::PHYSICAL`]'s.
    pub fn resolve(self) -> ServoSetup {
        let d = ServoSetup::PHYSICAL;
        ServoSetup {
            kp_nm_per_rev: self.kp_nm_per_rev.unwrap_or(d.kp_nm_per_rev),
            kd_nms_per_rev: self.kd_nms_per_rev.unwrap_or(d.kd_nms_per_rev),
            max_torque_nm: self.max_torque_nm.unwrap_or(d.max_torque_nm),
            gear_ratio: self.gear_ratio.unwrap_or(d.gear_ratio),
            output_sign: self.output_sign.unwrap_or(d.output_sign),
        }
    }

    /// Check every part given; `whose` names the servo in the sentence ("servo 3 on bus 1",
    /// or "every servo").
    pub fn validate(&self, whose: &str) -> Result<(), PhysicsError> {
        let bad = |what: &'static str, value: f64, range: String| {
            Err(PhysicsError::BadSetup { servo: whose.to_string(), what, value, range })
        };
        for (what, v) in [("kp", self.kp_nm_per_rev), ("kd", self.kd_nms_per_rev)] {
            if let Some(v) = v.filter(|v| !(v.is_finite() && (0.0..=MAX_GAIN).contains(v))) {
                return bad(what, v, format!("0 to {MAX_GAIN}"));
            }
        }
        if let Some(v) = self.gear_ratio.filter(|v| !(GEAR_RATIO_RANGE.0..=GEAR_RATIO_RANGE.1).contains(v)) {
            return bad(
                "gear_ratio",
                v,
                format!("{} to {} (rotor turns per output turn)", GEAR_RATIO_RANGE.0, GEAR_RATIO_RANGE.1),
            );
        }
        if let Some(v) = self.output_sign.filter(|v| *v != 1.0 && *v != -1.0) {
            return bad("sign", v, "1 or -1".into());
        }
        if let Some(v) = self.max_torque_nm {
            let ratio = self.gear_ratio.unwrap_or(ServoSetup::PHYSICAL.gear_ratio);
            let ceiling = MAX_CURRENT_A * MOTOR_KT_NM_PER_A * ratio;
            if !(v > 0.0 && v <= ceiling) {
                return bad(
                    "max_torque",
                    v,
                    format!(
                        "a torque above 0 and at most {ceiling:.0} N·m (what {MAX_CURRENT_A:.0} A gives at gear ratio \
                         {ratio}; raise gear_ratio for more)"
                    ),
                );
            }
        }
        Ok(())
    }
}

/// What becomes of a model's own actuators on the joints servos drive: never two
/// controllers on one joint. Actuators on joints no servo drives stay as the model has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModelActuators {
    /// Switched off, and their figures become their servos' where the run file gives none: a
    /// force or control range becomes the torque limit, a position actuator's `kp` and `kv`
    /// the position gains.
    #[default]
    Adopt,
    /// Switched off; the servos take nothing from them.
    Off,
}

/// Where a run starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuiltInPose {
    /// The model's keyframe of this name (the built-in quadruped's `lying`), then the body
    /// settles under gravity with the joints limp.
    Keyframe(String),
    /// The model's reference pose (`qpos0`), then the body settles.
    Reference,
}

/// Steepest ground slope, degrees, either way about either axis.
pub const MAX_GROUND_TILT_DEG: f64 = 30.0;

/// Longest settle before a run, s.
pub const MAX_SETTLE_S: f64 = 10.0;

/// Everything [`crate::load`] needs.
#[derive(Debug, Clone, PartialEq)]
pub struct PhysicsSpec {
    /// The model.
    pub model: ModelSource,
    /// The servo ↔ joint map; empty means the built-in quadruped's (buses 1-4, ids 1-12).
    pub joints: Vec<ServoJoint>,
    /// Slope of the ground under the robot, degrees, as the IMU of a robot standing level on
    /// it would read its roll and pitch (positive roll: right side down; positive pitch: nose
    /// up). Within ±30°.
    pub ground_tilt_deg: (f64, f64),
    /// The starting pose.
    pub pose: BuiltInPose,
    /// Seconds the body settles with the joints limp before the run starts (0 to 10).
    pub settle_s: f64,
    /// The body whose attitude the IMU reports: `None` for the free-floating body that
    /// carries the mapped joints (a fixed-base model: the body at the root of their chain).
    pub body: Option<String>,
    /// The control loop's period, ns: a model time step that does not divide it is made to
    /// (never longer than the model's), so every cycle sees the physics move.
    pub period_ns: u64,
    /// What becomes of the model's actuators on mapped joints.
    pub actuators: ModelActuators,
    /// Setup every coupled servo gets where its joint entry gives none.
    pub servo: ServoOverrides,
    /// The keyframe a demonstration stands the robot in; `None`: the model's `home`, `stand`
    /// or `standing` keyframe, if it has one (the built-in quadruped has its own stand).
    pub stand_pose: Option<String>,
}

/// Shortest and longest loop period a model is stepped under, ns (100 kHz to 0.1 Hz, the run's
/// rates).
pub const PERIOD_RANGE_NS: (u64, u64) = (10_000, 10_000_000_000);

/// The keyframes taken as a user model's standing pose when none is named, in this order.
pub const STAND_KEYFRAMES: [&str; 3] = ["home", "stand", "standing"];

impl PhysicsSpec {
    /// The built-in quadruped on flat ground, starting lying down.
    pub fn quadruped() -> Self {
        PhysicsSpec {
            model: ModelSource::BuiltIn,
            joints: Vec::new(),
            ground_tilt_deg: (0.0, 0.0),
            pose: BuiltInPose::Keyframe("lying".into()),
            settle_s: 1.0,
            body: None,
            period_ns: 1_000_000,
            actuators: ModelActuators::Adopt,
            servo: ServoOverrides::default(),
            stand_pose: None,
        }
    }

    /// A model file with its servo map, everything else as [`PhysicsSpec::quadruped`] (the
    /// model's reference pose to start from).
    pub fn model_file(path: impl Into<PathBuf>, joints: Vec<ServoJoint>) -> Self {
        PhysicsSpec {
            model: ModelSource::File(path.into()),
            joints,
            pose: BuiltInPose::Reference,
            ..PhysicsSpec::quadruped()
        }
    }

    /// The servo ↔ joint map in force: [`PhysicsSpec::joints`], or the built-in one.
    pub fn joint_map(&self) -> Vec<ServoJoint> {
        if !self.joints.is_empty() {
            return self.joints.clone();
        }
        let legs = ["fl", "fr", "rl", "rr"];
        let parts = ["abduction", "hip", "knee"];
        (0..12u8)
            .map(|k| {
                ServoJoint::new(
                    usize::from(k / 3),
                    k + 1,
                    format!("{}_{}", legs[usize::from(k / 3)], parts[usize::from(k % 3)]),
                )
            })
            .collect()
    }

    /// Check the numbers and the map's shape (the model checks come with loading it).
    pub fn validate(&self) -> Result<(), PhysicsError> {
        let (roll, pitch) = self.ground_tilt_deg;
        for (what, value) in [("ground roll", roll), ("ground pitch", pitch)] {
            if !value.is_finite() || value.abs() > MAX_GROUND_TILT_DEG {
                return Err(PhysicsError::BadNumber { what, value, range: "-30 to 30 degrees" });
            }
        }
        if !self.settle_s.is_finite() || !(0.0..=MAX_SETTLE_S).contains(&self.settle_s) {
            return Err(PhysicsError::BadNumber { what: "settle time", value: self.settle_s, range: "0 to 10 s" });
        }
        if !(PERIOD_RANGE_NS.0..=PERIOD_RANGE_NS.1).contains(&self.period_ns) {
            return Err(PhysicsError::BadNumber {
                what: "loop period (ns)",
                value: self.period_ns as f64,
                range: "10 µs to 10 s",
            });
        }
        if self.joints.is_empty() && self.model != ModelSource::BuiltIn {
            return Err(PhysicsError::NoMap);
        }
        self.servo.validate("every servo")?;
        let map = self.joint_map();
        for j in &map {
            j.servo.validate(&format!("servo {} on bus {}", j.id, j.bus + 1))?;
            j.servo.or(self.servo).validate(&format!("servo {} on bus {}", j.id, j.bus + 1))?;
        }
        for (i, a) in map.iter().enumerate() {
            for b in &map[..i] {
                if a.joint == b.joint {
                    return Err(PhysicsError::SharedJoint {
                        joint: a.joint.clone(),
                        first: (b.bus, b.id),
                        second: (a.bus, a.id),
                    });
                }
                if (a.bus, a.id) == (b.bus, b.id) {
                    return Err(PhysicsError::ServoTwice { bus: a.bus, id: a.id });
                }
            }
        }
        Ok(())
    }
}

/// Why a model could not be used. Each message is one sentence saying what is wrong and
/// what to do.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PhysicsError {
    /// This build has no MuJoCo.
    NotBuilt,
    /// MuJoCo could not read or compile the model.
    Model {
        /// The file (or "the built-in quadruped").
        model: String,
        /// MuJoCo's reason.
        reason: String,
    },
    /// A mapped joint is not in the model.
    NoSuchJoint {
        /// The joint name.
        joint: String,
        /// The model's hinge and slide joints.
        known: Vec<String>,
    },
    /// A mapped joint is not a hinge or a slide.
    NotAServoJoint {
        /// The joint name.
        joint: String,
    },
    /// Two servos map to one joint.
    SharedJoint {
        /// The joint.
        joint: String,
        /// First servo (bus index, id).
        first: (usize, u8),
        /// Second servo.
        second: (usize, u8),
    },
    /// One servo maps to two joints.
    ServoTwice {
        /// Bus index.
        bus: usize,
        /// CAN id.
        id: u8,
    },
    /// A user model without a map.
    NoMap,
    /// The model has no body for the IMU (nothing but the world).
    NoBody,
    /// A named body is not in the model.
    NoSuchBody {
        /// The name.
        body: String,
    },
    /// The named keyframe is not in the model.
    NoSuchPose {
        /// The keyframe name.
        pose: String,
    },
    /// A number written in the model file is NaN or infinite.
    NotFiniteAttribute {
        /// The element, e.g. `geom`.
        element: String,
        /// The attribute, e.g. `mass`.
        attribute: String,
        /// The value as written.
        value: String,
    },
    /// A number in the compiled model is NaN or infinite.
    NotFinite {
        /// Which model field.
        field: &'static str,
    },
    /// A number outside its range.
    BadNumber {
        /// What it is.
        what: &'static str,
        /// The value given.
        value: f64,
        /// What is allowed.
        range: &'static str,
    },
    /// The model went unstable while settling.
    Unstable {
        /// Why.
        reason: String,
    },
    /// A servo setup number outside its range.
    BadSetup {
        /// Whose: "servo 3 on bus 1" or "every servo".
        servo: String,
        /// The key (`kp`, `kd`, `max_torque`, `gear_ratio`, `sign`).
        what: &'static str,
        /// The value given.
        value: f64,
        /// What is allowed.
        range: String,
    },
    /// A free-floating robot with nothing under it to stand on.
    NoGround {
        /// The model.
        model: String,
        /// The floating body.
        body: String,
    },
    /// The mapped joints hang from more than one free-floating body: which is the robot's
    /// base is not clear.
    AmbiguousBody {
        /// The candidates, as the sentence names them: `` `name` ``, or "body N" unnamed.
        candidates: Vec<String>,
    },
    /// The named stand pose is not a keyframe of the model.
    NoSuchStandPose {
        /// The name given.
        pose: String,
        /// The model's keyframes.
        known: Vec<String>,
    },
}

impl core::fmt::Display for PhysicsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PhysicsError::NotBuilt => write!(
                f,
                "this rtloop was built without physics: run tools/mujoco once, then build with `--features physics` \
                 (see docs/physics.md)"
            ),
            PhysicsError::Model { model, reason } => {
                write!(f, "MuJoCo could not load {model}: {reason}; fix the model file")
            }
            PhysicsError::NoSuchJoint { joint, known } => write!(
                f,
                "the model has no hinge or slide joint named `{joint}`: map each servo to one of {}",
                if known.is_empty() { "its joints (it has none)".to_string() } else { known.join(", ") }
            ),
            PhysicsError::NotAServoJoint { joint } => write!(
                f,
                "joint `{joint}` is a ball or free joint, which one servo cannot drive: map servos to hinge or slide joints"
            ),
            PhysicsError::SharedJoint { joint, first, second } => write!(
                f,
                "servos {} (bus {}) and {} (bus {}) are both mapped to joint `{joint}`: give each servo its own joint",
                first.1,
                first.0 + 1,
                second.1,
                second.0 + 1
            ),
            PhysicsError::ServoTwice { bus, id } => {
                write!(f, "servo {id} on bus {} is mapped to two joints: map each servo once", bus + 1)
            }
            PhysicsError::NoMap => write!(
                f,
                "a model of your own needs its servo map: list `joints = [{{ bus = 1, id = 1, joint = \"name\" }}, ...]` \
                 under [physics]"
            ),
            PhysicsError::NoBody => {
                write!(f, "the model has no body besides the world: give the robot a body (its base with a <freejoint/>)")
            }
            PhysicsError::NoSuchBody { body } => {
                write!(f, "the model has no body named `{body}`: name one of its bodies as `body` under [physics]")
            }
            PhysicsError::NoSuchPose { pose } => write!(
                f,
                "the model has no keyframe named `{pose}`: add <key name=\"{pose}\" .../> to it or leave `pose` out"
            ),
            PhysicsError::NotFiniteAttribute { element, attribute, value } => write!(
                f,
                "the model's <{element} {attribute}=\"{value}\"> is not a finite number: give it one (MuJoCo would \
                 silently use a default instead)"
            ),
            PhysicsError::NotFinite { field } => {
                write!(f, "the model's {field} holds a NaN or an infinity: give it finite numbers")
            }
            PhysicsError::BadNumber { what, value, range } => {
                write!(f, "{what} {value} is out of range: give {range}")
            }
            PhysicsError::Unstable { reason } => write!(f, "the model is unstable at rest ({reason}): fix its masses, \
                 inertias, joint ranges or time step"),
            PhysicsError::BadSetup { servo, what, value, range } => {
                write!(f, "{what} {value} for {servo} is out of range: give {range}")
            }
            PhysicsError::NoGround { model, body } => write!(
                f,
                "{model} has no ground: nothing fixed to the world lies under its free-floating body `{body}` for it to \
                 stand on, so it would fall for ever; load a scene that includes the robot and adds a floor, as MuJoCo \
                 Menagerie's scene.xml does (`<include file=\"robot.xml\"/>` and, in its <worldbody>, \
                 `<geom name=\"floor\" type=\"plane\" size=\"0 0 0.05\"/>`)"
            ),
            PhysicsError::AmbiguousBody { candidates } => write!(
                f,
                "the mapped joints hang from {} free-floating bodies ({}): name the robot's base as `body` under [physics]",
                candidates.len(),
                candidates.join(", ")
            ),
            PhysicsError::NoSuchStandPose { pose, known } => write!(
                f,
                "the model has no keyframe named `{pose}` to stand in: name one of {} as `stand_pose` under [physics]",
                if known.is_empty() { "its keyframes (it has none; add a <keyframe>)".to_string() } else { known.join(", ") }
            ),
        }
    }
}

impl std::error::Error for PhysicsError {}

/// Attributes that hold names or words, never numbers (a body may be called `inf`).
const WORD_ATTRIBUTES: &[&str] = &[
    "name",
    "class",
    "childclass",
    "joint",
    "joint1",
    "joint2",
    "body",
    "body1",
    "body2",
    "site",
    "mesh",
    "material",
    "texture",
    "file",
    "type",
    "model",
    "link",
    "parent",
    "child",
    "filename",
    "prefix",
    "target",
    "objname",
    "objtype",
    "tendon",
    "actuator",
    "geom",
    "geom1",
    "geom2",
    "camera",
    "light",
    "hfield",
    "plugin",
    "instance",
    "mode",
    "integrator",
    "cone",
    "jacobian",
    "solver",
    "angle",
    "coordinate",
    "eulerseq",
    "meshdir",
    "texturedir",
    "assetdir",
    "content_type",
    "builtin",
    "mark",
    "key",
    "user",
    "dyntype",
    "gaintype",
    "biastype",
    "trntype",
    "inheritrange",
];

/// The first number written as NaN or infinity in an MJCF or URDF text: MuJoCo's parser reads
/// `nan` as "not given" and quietly uses a default, so such a model has to be refused before
/// MuJoCo sees it. A light scan of `attribute="value"` pairs (comments skipped), not an XML
/// parser: MuJoCo parses the file; this only looks at numbers.
pub fn non_finite_attribute(text: &str) -> Option<PhysicsError> {
    let mut rest = text;
    let mut element = String::new();
    while let Some(i) = rest.find(['<', '=']) {
        let (head, tail) = rest.split_at(i);
        if tail.starts_with("<!--") {
            rest = tail.find("-->").map_or("", |e| &tail[e + 3..]);
            continue;
        }
        if let Some(after) = tail.strip_prefix('<') {
            element = after.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            rest = after;
            continue;
        }
        let attribute: String = head
            .chars()
            .rev()
            .skip_while(|c| c.is_whitespace())
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let after = tail[1..].trim_start();
        let Some(quote) = after.chars().next().filter(|c| *c == '"' || *c == '\'') else {
            rest = &tail[1..];
            continue;
        };
        let body = &after[1..];
        let end = body.find(quote).unwrap_or(body.len());
        let value = &body[..end];
        if !WORD_ATTRIBUTES.contains(&attribute.as_str()) {
            for token in value.split(|c: char| c.is_whitespace() || c == ',') {
                if token.parse::<f64>().is_ok_and(|v| !v.is_finite()) {
                    // On one line, and short: a keyframe's value can be hundreds of numbers.
                    let mut shown = value.split_whitespace().collect::<Vec<_>>().join(" ");
                    if shown.chars().count() > 48 {
                        shown = shown.chars().take(47).collect::<String>() + "…";
                    }
                    return Some(PhysicsError::NotFiniteAttribute {
                        element: element.clone(),
                        attribute,
                        value: shown,
                    });
                }
            }
        }
        rest = body.get(end + 1..).unwrap_or("");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_numbers_are_found_and_names_and_comments_are_not() {
        let found = |t: &str| non_finite_attribute(t).map(|e| e.to_string());
        assert_eq!(found(r#"<geom name="inf" size="0.1 0.2"/>"#), None);
        assert_eq!(found(r#"<!-- mass="nan" --><geom mass='1'/>"#), None);
        let e = non_finite_attribute(r#"<body pos="0 0 1"><geom size="0.1 NaN"/></body>"#).unwrap();
        assert_eq!(
            e,
            PhysicsError::NotFiniteAttribute {
                element: "geom".into(),
                attribute: "size".into(),
                value: "0.1 NaN".into()
            }
        );
        assert!(found(r#"<origin xyz="0,0,-inf"/>"#).is_some());
        assert_eq!(found("no attributes at all < = \" '"), None);
        let long = format!("<key qpos=\"0 0\n  {}inf\"/>", "1 ".repeat(40));
        let e = found(&long).unwrap();
        assert!(!e.contains('\n') && e.contains("qpos=\"0 0 1 1") && e.contains('…'), "{e}");
    }
}
