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
            if !value.is_finite() || value.abs() > 30.0 {
                return Err(PhysicsError::BadNumber { what, value, range: "-30 to 30 degrees" });
            }
        }
        if !self.settle_s.is_finite() || !(0.0..=10.0).contains(&self.settle_s) {
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
    /// The model has no free-floating body for the IMU.
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
    /// A number in the model is NaN or infinite.
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
            PhysicsError::NoBody => write!(
                f,
                "the model has no free-floating body for the IMU: give its base a <freejoint/>, or name the IMU's body \
                 with `body = \"...\"` under [physics]"
            ),
            PhysicsError::NoSuchBody { body } => {
                write!(f, "the model has no body named `{body}`: name one of its bodies as `body` under [physics]")
            }
            PhysicsError::NoSuchPose { pose } => write!(
                f,
                "the model has no keyframe named `{pose}`: add <key name=\"{pose}\" .../> to it or leave `pose` out"
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
