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
mod spec;

pub use spec::{
    non_finite_attribute, BuiltInPose, ModelSource, PhysicsError, PhysicsSpec, ServoJoint, MAX_GROUND_TILT_DEG,
    MAX_SETTLE_S,
};

use rtloop_sim::{JointLink, Plant};

/// The built-in quadruped (MJCF), written for rtloop: see the file's header for its sizes.
pub const QUADRUPED_MJCF: &str = include_str!("../models/quadruped.xml");

/// The MuJoCo version rtloop builds against (the `mujoco` wheel's, the `mujoco-rs` crate's).
pub const MUJOCO_VERSION: &str = "3.17.0";

/// A loaded model, ready for [`rtloop_sim::World::new`].
pub struct Loaded {
    /// The plant.
    pub plant: Box<dyn Plant>,
    /// Which servo turns which plant joint, by bus index.
    pub links: Vec<JointLink>,
    /// The plant's joint names, in plant joint order.
    pub joint_names: Vec<String>,
}

impl core::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Loaded").field("links", &self.links).field("joint_names", &self.joint_names).finish()
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
