//! What to simulate: the model, the servo ↔ joint map, the ground and the starting pose.

use std::path::PathBuf;

/// Where the model comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// The built-in quadruped ([`crate::QUADRUPED_MJCF`]).
    BuiltIn,
    /// A model file: MJCF (`.xml`) or URDF (`.urdf`), as MuJoCo compiles them.
    File(PathBuf),
}

/// One servo's joint: the servo with CAN id `id` on bus index `bus` turns the model's joint
/// named `joint` (a hinge or a slide).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServoJoint {
    /// Bus index (position in the robot's bus list, from 0).
    pub bus: usize,
    /// CAN id.
    pub id: u8,
    /// The model's joint name.
    pub joint: String,
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
    /// The body whose attitude the IMU reports (its site `imu` when it has one): `None` for
    /// the body of the model's first free joint.
    pub body: Option<String>,
}

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
            .map(|k| ServoJoint {
                bus: usize::from(k / 3),
                id: k + 1,
                joint: format!("{}_{}", legs[usize::from(k / 3)], parts[usize::from(k % 3)]),
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
        if self.joints.is_empty() && self.model != ModelSource::BuiltIn {
            return Err(PhysicsError::NoMap);
        }
        let map = self.joint_map();
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
