//! # rtloop-physics — MuJoCo under the simulated servos
//!
//! What it is for: giving rtloop's simulated robot a body. [`load`] compiles a MuJoCo model
//! (the built-in quadruped, [`QUADRUPED_MJCF`], or a user's MJCF or URDF), checks it and the
//! servo ↔ joint map against each other, and returns a [`rtloop_sim::Plant`] that
//! [`rtloop_sim::World`] couples to the simulated servos: each servo's position controller
//! (in rtloop-sim) turns its joint's state into a torque, MuJoCo integrates the rigid bodies,
//! contacts and gravity, and the servos and the IMU report what it computed.
//!
//! ```no_run
//! use rtloop_physics::{load, PhysicsSpec};
//! let loaded = load(&PhysicsSpec::quadruped()).expect("the built-in model loads");
//! assert_eq!(loaded.links.len(), 12);
//! ```
//!
//! What it must never do: download anything (MuJoCo comes from PyPI's wheel through
//! `tools/mujoco`), allocate or panic while stepping, or hand on a NaN: a model that goes
//! unstable stops with a [`rtloop_sim::PlantError`].
//!
//! MuJoCo is the `mujoco` feature; without it [`load`] answers
//! [`PhysicsError::NotBuilt`] with how to build it, and everything else here (the spec, its
//! checks, the built-in map) still works. docs/physics.md says what is modelled and what is not.
#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(feature = "mujoco")]
mod mujoco_plant;
#[cfg(feature = "render")]
pub mod render;
mod spec;
#[cfg(feature = "mujoco")]
pub mod view;

pub use spec::{
    non_finite_attribute, BuiltInPose, ModelActuators, ModelSource, PhysicsError, PhysicsSpec, ServoJoint,
    ServoOverrides, MAX_GROUND_TILT_DEG, MAX_SETTLE_S, PERIOD_RANGE_NS, STAND_KEYFRAMES,
};

use rtloop_sim::{JointLink, Plant, ServoSetup};

/// The built-in quadruped (MJCF), written for rtloop: see the file's header for its sizes.
pub const QUADRUPED_MJCF: &str = include_str!("../models/quadruped.xml");

/// The MuJoCo version rtloop builds against (the `mujoco` wheel's, the `mujoco-rs` crate's).
pub const MUJOCO_VERSION: &str = "3.17.0";

/// A loaded model, ready for [`rtloop_sim::World::new`] and [`rtloop_sim::World::with_setups`].
pub struct Loaded {
    /// The plant.
    pub plant: Box<dyn Plant>,
    /// Which servo turns which plant joint, by bus index.
    pub links: Vec<JointLink>,
    /// The plant's joint names, in plant joint order (the map's order).
    pub joint_names: Vec<String>,
    /// Each link's servo setup: the run file's, else the model actuator's, else the default.
    pub setups: Vec<ServoSetup>,
    /// Each link's servo position in the model's standing pose (servo units: rev, or m on a
    /// slide; the output sign applied); `None` when there is no such pose (the built-in
    /// quadruped: its stand is the demonstration's own).
    pub stand_rev: Option<Vec<f64>>,
    /// What loading changed or decided that the user should hear once.
    pub notices: Vec<PhysicsNotice>,
    /// What the model is, for the summary and the log.
    pub model: ModelFacts,
}

impl core::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Loaded")
            .field("links", &self.links)
            .field("joint_names", &self.joint_names)
            .field("setups", &self.setups)
            .field("notices", &self.notices)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// What a loaded model is: enough to name it and to know a replay uses the same one.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelFacts {
    /// "the built-in quadruped", or the model's own name (`<mujoco model="…">`; the file as
    /// given when it has none).
    pub name: String,
    /// The model file, absolute (`None`: built in).
    pub path: Option<std::path::PathBuf>,
    /// SHA-256 of the model file's bytes, hex (`sha256sum` gives the same; `None`: built in).
    pub file_sha256: Option<String>,
    /// SHA-256 of the compiled model (MuJoCo's MJB), hex: covers included files and meshes.
    /// The same files compiled by the same MuJoCo give the same value.
    pub compiled_sha256: String,
    /// The body the IMU is on.
    pub body: String,
    /// Whether that body floats (a free joint) or is fixed to the world (an arm's base).
    pub floating: bool,
    /// The time step MuJoCo is stepped with, s.
    pub timestep_s: f64,
    /// Generalised positions (MuJoCo's `nq`): the length of [`rtloop_sim::Plant::qpos`].
    pub nq: usize,
    /// The keyframe taken as the standing pose, if any.
    pub stand_pose: Option<String>,
}

/// Something loading a model changed or decided, said once (the run prints it with its
/// notices). Never a refusal: those are [`PhysicsError`]s.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PhysicsNotice {
    /// The model's time step did not divide the loop's period.
    TimeStepAdapted {
        /// The model's step, s.
        model_s: f64,
        /// The step used, s.
        used_s: f64,
        /// The loop's period, s.
        period_s: f64,
    },
    /// A servo's gains are too stiff for its joint's inertia at the time step: its simulated
    /// loop rings or spins (a real moteus runs its loop far faster).
    StiffServo {
        /// "servo 6 on bus 2".
        servo: String,
        /// The joint it drives.
        joint: String,
        /// The joint's inertia at the model's reference pose, kg·m² (kg for a slide).
        inertia: f64,
        /// The stiffest kp the step carries, N·m/rev (N/m for a slide).
        max_kp: f64,
        /// The stiffest kd the step carries, N·m·s/rev (N·s/m).
        max_kd: f64,
        /// The time step, s.
        step_s: f64,
    },
    /// The model's own actuators on mapped joints were switched off.
    ActuatorsSwitchedOff {
        /// How many.
        count: usize,
        /// Whether their figures became the servos'.
        adopted: bool,
    },
}

/// `x` to two significant figures, rounded down (a limit to stay under): 121.397 → "120",
/// 0.8302 → "0.83".
fn two_figures_down(x: f64) -> String {
    if !(x.is_finite() && x > 0.0) {
        return "0".into();
    }
    let digits = x.log10().floor() as i32 - 1;
    let unit = 10f64.powi(digits);
    let v = (x / unit).floor() * unit;
    if digits >= 0 {
        format!("{v:.0}")
    } else {
        format!("{v:.*}", (-digits) as usize)
    }
}

impl core::fmt::Display for PhysicsNotice {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PhysicsNotice::TimeStepAdapted { model_s, used_s, period_s } => write!(
                f,
                "the model's {} ms time step does not divide the loop's {} ms period: MuJoCo steps every {} ms",
                model_s * 1e3,
                period_s * 1e3,
                used_s * 1e3
            ),
            PhysicsNotice::StiffServo { servo, joint, inertia, max_kp, max_kd, step_s } => write!(
                f,
                "{servo}'s gains are too stiff for joint `{joint}` ({inertia:.3e} kg·m² of inertia) at a {} ms step: \
                 its simulated loop will ring or spin; give that joint kp at most {} and kd at most {} under \
                 [physics] joints, or armature (the motor's inertia through its gearbox) in the model",
                step_s * 1e3,
                two_figures_down(*max_kp),
                two_figures_down(*max_kd)
            ),
            PhysicsNotice::ActuatorsSwitchedOff { count, adopted: true } => write!(
                f,
                "the model's {count} actuator(s) on servo-driven joints are switched off, the servos drive those \
                 joints: each servo takes its actuator's force limit (and a position actuator's gains) where the run \
                 file gives none (`actuators = \"off\"` under [physics] takes nothing from them)"
            ),
            PhysicsNotice::ActuatorsSwitchedOff { count, adopted: false } => write!(
                f,
                "the model's {count} actuator(s) on servo-driven joints are switched off, the servos drive those joints"
            ),
        }
    }
}

/// Compile and check the model `spec` names, and map its joints to servos.
pub fn load(spec: &PhysicsSpec) -> Result<Loaded, PhysicsError> {
    spec.validate()?;
    #[cfg(feature = "mujoco")]
    {
        mujoco_plant::load(spec)
    }
    #[cfg(not(feature = "mujoco"))]
    {
        Err(PhysicsError::NotBuilt)
    }
}

/// MuJoCo's warnings in this process so far (MuJoCo's own messages are not printed).
pub fn mujoco_warnings() -> u64 {
    #[cfg(feature = "mujoco")]
    {
        mujoco_plant::warnings()
    }
    #[cfg(not(feature = "mujoco"))]
    {
        0
    }
}

/// Whether this build has MuJoCo (the `mujoco` feature).
pub const fn available() -> bool {
    cfg!(feature = "mujoco")
}

#[cfg(test)]
mod tests {
    use super::two_figures_down;

    #[test]
    fn a_limit_is_said_in_two_figures_rounded_down() {
        assert_eq!(two_figures_down(121.397), "120");
        assert_eq!(two_figures_down(21439.6), "21000");
        assert_eq!(two_figures_down(0.8302), "0.83");
        assert_eq!(two_figures_down(0.0519), "0.051");
        assert_eq!(two_figures_down(f64::NAN), "0");
    }
}
