//! Physics under the simulated servos: the run file's `[physics]` section, `--physics`, and
//! pushes on the body (`--push`, `[faults] push`).
//!
//! What it is for: turning what a user wrote into an [`rtloop_physics::PhysicsSpec`] (bus
//! numbers into bus indices, every number range-checked), and coupling the simulated robot's
//! servos to the model it names ([`attach`]). The model itself, MuJoCo, and the built-in
//! quadruped live in rtloop-physics; the servo ↔ plant coupling in `rtloop_sim::World`.
//! What it must never do: couple anything but simulated buses, or accept a number it has not
//! checked.

use std::path::PathBuf;

use rtloop_physics::{
    BuiltInPose, ModelActuators, ModelFacts, ModelSource, PhysicsError, PhysicsNotice, PhysicsSpec, ServoJoint,
    ServoOverrides,
};
use serde::{Deserialize, Serialize};

use crate::robot_spec::BusSpec;

/// `[physics]`: a body under the simulated servos. Its presence (or `--physics`) turns it on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PhysicsConfig {
    /// A model file (MJCF `.xml`, or URDF as MuJoCo compiles it); absent: the built-in
    /// quadruped.
    pub model: Option<PathBuf>,
    /// Which servo turns which joint; required with `model`, absent for the built-in
    /// quadruped (buses 1-4, ids 1-12: abduction, hip, knee of the front-left, front-right,
    /// rear-left and rear-right legs).
    pub joints: Vec<JointEntry>,
    /// Slope of the ground, degrees: the roll (right side down positive) a robot standing
    /// level on it would read (-30 to 30).
    pub ground_roll_deg: f64,
    /// Slope of the ground, degrees: the pitch (nose up positive) a robot standing level on
    /// it would read (-30 to 30).
    pub ground_pitch_deg: f64,
    /// The model keyframe the run starts from (`lying` for the built-in quadruped); absent:
    /// the built-in's `lying`, or a user model's reference pose.
    pub pose: Option<String>,
    /// Seconds the body settles with the joints limp before the run starts (0 to 10).
    pub settle_s: f64,
    /// The body the IMU is on; absent: the free-floating body that carries the mapped joints
    /// (a fixed-base model: the body at the root of their chain).
    pub body: Option<String>,
    /// What becomes of the model's own actuators on mapped joints: `adopt` (switched off,
    /// their force limits and a position actuator's gains become their servos' where this
    /// file gives none) or `off` (switched off, nothing taken).
    pub actuators: ActuatorsChoice,
    /// The model keyframe the demonstration motion stands the robot in; absent: its `home`,
    /// `stand` or `standing` keyframe (the built-in quadruped has its own stand).
    pub stand_pose: Option<String>,
    /// Position gain of every coupled servo, N·m/rev (its `servo.pid_position.kp`; 0 to
    /// 100000); absent: the model actuator's, else 300.
    pub kp: Option<f64>,
    /// Velocity gain of every coupled servo, N·m·s/rev (0 to 100000); absent: the model
    /// actuator's, else 5.
    pub kd: Option<f64>,
    /// Torque limit of every coupled servo, N·m; absent: the model actuator's force range,
    /// else 16.
    pub max_torque: Option<f64>,
    /// Gear ratio (rotor turns per output turn, 1 to 1000) of every coupled servo; absent: 6.
    pub gear_ratio: Option<f64>,
}

/// `[physics] actuators`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActuatorsChoice {
    /// See [`ModelActuators::Adopt`].
    #[default]
    Adopt,
    /// See [`ModelActuators::Off`].
    Off,
}

/// One `joints` entry: servo `id` on bus `bus` turns the model's joint `joint`, set up as
/// the entry says (over `[physics]`'s settings for every servo).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JointEntry {
    /// Bus number, as in `[[bus]]`.
    pub bus: u8,
    /// Servo id.
    pub id: u8,
    /// Joint name in the model.
    pub joint: String,
    /// This servo's position gain, N·m/rev (N/m on a slide joint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kp: Option<f64>,
    /// This servo's velocity gain, N·m·s/rev (N·s/m on a slide joint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kd: Option<f64>,
    /// This servo's torque limit, N·m (N on a slide joint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_torque: Option<f64>,
    /// This servo's gear ratio (rotor turns per output turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gear_ratio: Option<f64>,
    /// `motor_position.output.sign` of this servo: -1 when it counts the other way from the
    /// model's joint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sign: Option<f64>,
}

impl JointEntry {
    /// Servo `id` on bus `bus` turning `joint`, set up as every other servo.
    pub fn new(bus: u8, id: u8, joint: impl Into<String>) -> Self {
        JointEntry { bus, id, joint: joint.into(), kp: None, kd: None, max_torque: None, gear_ratio: None, sign: None }
    }

    fn overrides(&self) -> ServoOverrides {
        ServoOverrides {
            kp_nm_per_rev: self.kp,
            kd_nms_per_rev: self.kd,
            max_torque_nm: self.max_torque,
            gear_ratio: self.gear_ratio,
            output_sign: self.sign,
        }
    }
}

impl Default for PhysicsConfig {
    fn default() -> Self {
        PhysicsConfig {
            model: None,
            joints: Vec::new(),
            ground_roll_deg: 0.0,
            ground_pitch_deg: 0.0,
            pose: None,
            settle_s: 1.0,
            body: None,
            actuators: ActuatorsChoice::Adopt,
            stand_pose: None,
            kp: None,
            kd: None,
            max_torque: None,
            gear_ratio: None,
        }
    }
}

/// Why `[physics]` or a push was refused. One sentence each.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PhysicsConfigError {
    /// A number outside its range.
    #[error("physics.{key} = {value} is out of range: give {give}")]
    OutOfRange {
        /// The key under `[physics]`.
        key: &'static str,
        /// The value.
        value: f64,
        /// What to give.
        give: &'static str,
    },
    /// Physics on buses that are not simulated.
    #[error(
        "physics drives simulated servos only: bus {bus} is {uri}; use `sim` or `pi3hat:sim` buses with --physics"
    )]
    NotSimulated {
        /// The bus number.
        bus: u8,
        /// Its address.
        uri: String,
    },
    /// A joint entry names a servo the robot does not have.
    #[error("physics.joints maps servo {id} on bus {bus}, which the robot does not have: name a servo of a [[bus]]")]
    NoSuchServo {
        /// Bus number.
        bus: u8,
        /// Servo id.
        id: u8,
    },
    /// The spec or the model was refused.
    #[error(transparent)]
    Model(#[from] PhysicsError),
    /// A push that does not parse.
    #[error("push {text:?} (--push or [faults] push): expected SECONDS:FX,FY,FZ[:DURATION], forces in N (world frame: +x forward, +y left, +z up), e.g. 2:0,60,0:0.1")]
    Push {
        /// The push as given.
        text: String,
    },
    /// A push without physics.
    #[error("a push needs a body: add --physics (or a [physics] section)")]
    PushWithoutPhysics,
    /// More pushes than a run holds.
    #[error("{given} pushes given; a run takes at most {max}: combine pushes that happen together", max = rtloop_sim::world::MAX_PUSHES)]
    TooManyPushes {
        /// How many were given.
        given: usize,
    },
}

/// One push on the body: `force_n` for `duration_s` from `at_s` after the start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PushSpec {
    /// Seconds after the start of the run.
    pub at_s: f64,
    /// Force, N, world frame (+x forward, +y left, +z up).
    pub force_n: [f64; 3],
    /// Seconds it lasts (0.1 when not given).
    pub duration_s: f64,
}

/// Largest push force per axis, N.
pub const MAX_PUSH_N: f64 = 1000.0;

/// Longest push, s.
pub const MAX_PUSH_S: f64 = 10.0;

/// The push given when `SECONDS:FX,FY,FZ` names no duration, s.
pub const DEFAULT_PUSH_S: f64 = 0.1;

impl PushSpec {
    /// Whether every number is one a run can use: a start from 0 to
    /// [`MAX_DURATION_S`](crate::numbers::MAX_DURATION_S), forces within ±[`MAX_PUSH_N`] per
    /// axis, a duration above 0 and at most [`MAX_PUSH_S`] (NaN and infinities refused). The
    /// one place the ranges live: `--push`, a run file's `[faults] push` and
    /// [`crate::Runtime::push`] all come through it.
    pub fn is_valid(&self) -> bool {
        (0.0..=crate::numbers::MAX_DURATION_S).contains(&self.at_s)
            && self.force_n.iter().all(|f| f.is_finite() && f.abs() <= MAX_PUSH_N)
            && self.duration_s > 0.0
            && self.duration_s <= MAX_PUSH_S
    }
}

/// Parse `SECONDS:FX,FY,FZ[:DURATION]` and check it ([`PushSpec::is_valid`]).
pub fn parse_push(text: &str) -> Result<PushSpec, PhysicsConfigError> {
    let refused = || PhysicsConfigError::Push { text: text.to_string() };
    let mut parts = text.split(':');
    let number = |s: &str| s.trim().parse::<f64>().ok();
    let at_s = parts.next().and_then(number);
    let force: Option<Vec<f64>> = parts.next().and_then(|f| f.split(',').map(number).collect::<Option<Vec<f64>>>());
    let duration_s = match parts.next() {
        None => Some(DEFAULT_PUSH_S),
        Some(d) => number(d),
    };
    if parts.next().is_some() {
        return Err(refused());
    }
    match (at_s, force, duration_s) {
        (Some(at_s), Some(f), Some(duration_s)) if f.len() == 3 => {
            let push = PushSpec { at_s, force_n: [f[0], f[1], f[2]], duration_s };
            if push.is_valid() {
                Ok(push)
            } else {
                Err(refused())
            }
        }
        _ => Err(refused()),
    }
}

impl PhysicsConfig {
    /// The same, with a relative `model` path taken from `dir` (the run file's folder).
    pub fn relative_to(mut self, dir: &std::path::Path) -> Self {
        if let Some(m) = &self.model {
            if m.is_relative() {
                self.model = Some(dir.join(m));
            }
        }
        self
    }

    /// The settings every coupled servo gets unless its joint entry says otherwise.
    fn overrides(&self) -> ServoOverrides {
        ServoOverrides {
            kp_nm_per_rev: self.kp,
            kd_nms_per_rev: self.kd,
            max_torque_nm: self.max_torque,
            gear_ratio: self.gear_ratio,
            output_sign: None,
        }
    }

    /// Check every number and the map against the robot's buses, and make the spec
    /// rtloop-physics loads (bus numbers become bus indices) for a loop of period `period_ns`.
    pub fn spec(&self, buses: &[BusSpec], period_ns: u64) -> Result<PhysicsSpec, PhysicsConfigError> {
        let range = |key: &'static str, value: f64, lo: f64, hi: f64, give: &'static str| {
            if value.is_finite() && (lo..=hi).contains(&value) {
                Ok(())
            } else {
                Err(PhysicsConfigError::OutOfRange { key, value, give })
            }
        };
        // The spec's own limits (PhysicsSpec::validate checks them again for users of
        // rtloop-physics alone), named here by their keys.
        let tilt = rtloop_physics::MAX_GROUND_TILT_DEG;
        range("ground_roll_deg", self.ground_roll_deg, -tilt, tilt, "-30 to 30 degrees")?;
        range("ground_pitch_deg", self.ground_pitch_deg, -tilt, tilt, "-30 to 30 degrees")?;
        range("settle_s", self.settle_s, 0.0, rtloop_physics::MAX_SETTLE_S, "0 to 10 s")?;
        let gain = rtloop_sim::servo::MAX_GAIN;
        let (ratio_lo, ratio_hi) = rtloop_sim::servo::GEAR_RATIO_RANGE;
        let optional = |key: &'static str, value: Option<f64>, lo: f64, hi: f64, give: &'static str| match value {
            Some(v) => range(key, v, lo, hi, give),
            None => Ok(()),
        };
        optional("kp", self.kp, 0.0, gain, "0 to 100000 N·m/rev")?;
        optional("kd", self.kd, 0.0, gain, "0 to 100000 N·m·s/rev")?;
        optional("gear_ratio", self.gear_ratio, ratio_lo, ratio_hi, "1 to 1000 rotor turns per output turn")?;
        if let Some(t) = self.max_torque {
            if !(t > 0.0 && t.is_finite()) {
                return Err(PhysicsConfigError::OutOfRange {
                    key: "max_torque",
                    value: t,
                    give: "a torque above 0 N·m",
                });
            }
        }
        for b in buses {
            if !matches!(
                b.uri,
                rtloop_io::BusUri::Sim | rtloop_io::BusUri::Pi3hat { carrier: rtloop_io::Pi3hatCarrier::Sim }
            ) {
                return Err(PhysicsConfigError::NotSimulated { bus: b.bus, uri: b.uri.to_string() });
            }
        }
        let mut joints = Vec::new();
        for j in &self.joints {
            let index = buses.iter().position(|b| b.bus == j.bus && b.servos.contains(&j.id));
            let Some(bus) = index else {
                return Err(PhysicsConfigError::NoSuchServo { bus: j.bus, id: j.id });
            };
            joints.push(ServoJoint { bus, id: j.id, joint: j.joint.clone(), servo: j.overrides() });
        }
        let spec = PhysicsSpec {
            model: self.model.clone().map_or(ModelSource::BuiltIn, ModelSource::File),
            joints,
            ground_tilt_deg: (self.ground_roll_deg, self.ground_pitch_deg),
            pose: match (&self.pose, &self.model) {
                (Some(name), _) => BuiltInPose::Keyframe(name.clone()),
                (None, None) => PhysicsSpec::quadruped().pose,
                (None, Some(_)) => BuiltInPose::Reference,
            },
            settle_s: self.settle_s,
            body: self.body.clone(),
            period_ns,
            actuators: match self.actuators {
                ActuatorsChoice::Adopt => ModelActuators::Adopt,
                ActuatorsChoice::Off => ModelActuators::Off,
            },
            servo: self.overrides(),
            stand_pose: self.stand_pose.clone(),
        };
        spec.validate()?;
        // The built-in map names buses 1-4 with ids 1-12: they must be this robot's.
        if self.joints.is_empty() {
            for j in spec.joint_map() {
                let ok = buses.get(j.bus).is_some_and(|b| b.servos.contains(&j.id));
                if !ok {
                    return Err(PhysicsConfigError::NoSuchServo { bus: j.bus as u8 + 1, id: j.id });
                }
            }
        }
        Ok(spec)
    }
}

/// Why a run's physics could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PhysicsStartError {
    /// The configuration or the model.
    #[error(transparent)]
    Config(#[from] PhysicsConfigError),
    /// The servos and the model do not fit together.
    #[error(transparent)]
    Coupling(#[from] rtloop_sim::WorldError),
}

/// What a run's physics is: the loaded model's facts and what loading decided.
#[derive(Debug, Clone)]
pub struct PhysicsInfo {
    /// The model.
    pub model: ModelFacts,
    /// What loading changed or decided, to be said once.
    pub notices: Vec<PhysicsNotice>,
    /// The servo ↔ joint map in force: (bus number, servo id, joint name), in map order.
    pub joints: Vec<(u8, u8, String)>,
    /// Each mapped servo's position in the model's standing pose, servo units, in map order;
    /// `None` without such a pose.
    pub stand_rev: Option<Vec<f64>>,
    /// Each mapped servo's setup as coupled, in map order.
    pub setups: Vec<rtloop_sim::ServoSetup>,
}

impl PhysicsInfo {
    /// The sentence a run says when the torque limit its commands carry (`[gains]
    /// maximum_torque`, N·m) is above what every coupled servo gives: each caps at its own
    /// `max_torque`, so the commands' limit would be a promise no joint keeps. (A limit that
    /// covers the strongest joint and caps the weaker ones is the usual one-limit-for-all, and
    /// said nothing about.) `None` when some servo gives at least `command_limit_nm`.
    pub fn torque_cap_notice(&self, command_limit_nm: f64) -> Option<String> {
        let strongest = self.setups.iter().map(|s| s.max_torque_nm).fold(f64::NAN, f64::max);
        // No servo (NaN) or one strong enough: nothing to say.
        if strongest.is_nan() || strongest >= command_limit_nm {
            return None;
        }
        Some(format!(
            "[gains] maximum_torque {command_limit_nm} N·m is above what any of the simulated servos gives (at most \
             {strongest} N·m): they cap there; raise max_torque under [physics] (for all, or per joint) or lower \
             [gains] maximum_torque"
        ))
    }

    /// The standing pose of every servo of `servos` (bus number, id) in that order: the
    /// model's, NaN for a servo the map leaves out; `None` when the model names no standing
    /// pose.
    pub fn stand_for(&self, servos: &[(u8, u8)]) -> Option<Vec<f64>> {
        let stand = self.stand_rev.as_ref()?;
        Some(
            servos
                .iter()
                .map(|&(bus, id)| {
                    self.joints.iter().position(|(b, i, _)| (*b, *i) == (bus, id)).map_or(f64::NAN, |k| stand[k])
                })
                .collect(),
        )
    }
}

/// Load the model `config` names and couple the servos of the simulated robot `sim` to it,
/// for a loop of period `period_ns`.
pub fn attach(
    sim: &rtloop_simrobot::SimRobot,
    config: &PhysicsConfig,
    buses: &[BusSpec],
    period_ns: u64,
) -> Result<PhysicsInfo, PhysicsStartError> {
    let spec = config.spec(buses, period_ns)?;
    let loaded = rtloop_physics::load(&spec).map_err(PhysicsConfigError::Model)?;
    let joints = spec.joint_map().into_iter().map(|j| (buses.get(j.bus).map_or(0, |b| b.bus), j.id, j.joint)).collect();
    let info = PhysicsInfo {
        model: loaded.model,
        notices: loaded.notices,
        joints,
        stand_rev: loaded.stand_rev,
        setups: loaded.setups.clone(),
    };
    let world = rtloop_sim::World::new(loaded.plant, loaded.links)?.with_setups(&loaded.setups);
    sim.attach_world(world)?;
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushes_parse_and_bad_ones_say_the_form() {
        assert_eq!(parse_push("2:0,60,0").unwrap(), PushSpec { at_s: 2.0, force_n: [0.0, 60.0, 0.0], duration_s: 0.1 });
        assert_eq!(parse_push("1.5:-10,0,5:0.3").unwrap().duration_s, 0.3);
        for bad in ["", "2", "2:0,60", "2:0,60,0:0", "2:nan,0,0", "x:0,0,0", "2:0,0,1e9", "2:0,0,0:1:2", "-1:0,0,0"] {
            let e = parse_push(bad).unwrap_err();
            assert!(e.to_string().contains("expected SECONDS:FX,FY,FZ"), "{bad}: {e}");
        }
    }

    #[test]
    fn numbers_and_the_map_are_checked_against_the_robot() {
        let buses = crate::robot_spec::RobotSpec::default_quadruped().buses;
        let ms = 1_000_000;
        assert!(PhysicsConfig::default().spec(&buses, ms).is_ok());
        let tilt = PhysicsConfig { ground_pitch_deg: f64::NAN, ..Default::default() };
        assert!(matches!(tilt.spec(&buses, ms), Err(PhysicsConfigError::OutOfRange { key: "ground_pitch_deg", .. })));
        let kp = PhysicsConfig { kp: Some(f64::INFINITY), ..Default::default() };
        assert!(kp.spec(&buses, ms).unwrap_err().to_string().starts_with("physics.kp = inf is out of range"));
        let stray = PhysicsConfig {
            model: Some("robot.xml".into()),
            joints: vec![JointEntry::new(2, 1, "hip")],
            ..Default::default()
        };
        assert_eq!(stray.spec(&buses, ms).unwrap_err(), PhysicsConfigError::NoSuchServo { bus: 2, id: 1 });
        let twice = PhysicsConfig {
            model: Some("robot.xml".into()),
            joints: vec![JointEntry::new(1, 1, "hip"), JointEntry::new(1, 2, "hip")],
            ..Default::default()
        };
        let e = twice.spec(&buses, ms).unwrap_err();
        assert!(e.to_string().contains("are both mapped to joint `hip`"), "{e}");
        let unmapped = PhysicsConfig { model: Some("robot.xml".into()), ..Default::default() };
        assert!(matches!(unmapped.spec(&buses, ms), Err(PhysicsConfigError::Model(PhysicsError::NoMap))));
        let mut small = buses.clone();
        small.truncate(2);
        assert_eq!(
            PhysicsConfig::default().spec(&small, ms).unwrap_err(),
            PhysicsConfigError::NoSuchServo { bus: 3, id: 7 }
        );
    }
}
