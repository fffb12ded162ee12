//! The robot a spec describes, built with its simulated parts set up: the faults of the
//! simulated buses, where their joints start, and a body (physics) under their servos whose
//! attitude becomes the robot's IMU. What `rtloop run` and the Python package's `Robot` build;
//! a control law's own program gets the same from [`crate::Runtime`].
//!
//! Must never: put a body under servos that are not simulated (the coupling refuses, naming
//! the servo), or open anything the spec does not name.

use crate::robot_spec::{RobotSpec, RobotSpecError};
use rtloop_io::{Clock, Robot, RobotConfig};
use rtloop_simrobot::SimRobot;

/// How the simulated parts of a robot start ([`build`]).
#[derive(Debug, Clone, Default)]
pub struct SimSetup {
    /// The simulated buses' wire timing and faults (`options.bus.fault_seed`: the run's seed).
    pub options: rtloop_simrobot::SimOptions,
    /// Where the simulated joints start, rev (`None`: where their configuration says).
    pub start_position_rev: Option<f64>,
    /// A body under the simulated servos.
    pub physics: Option<crate::physics::PhysicsConfig>,
}

/// Why a robot could not be built ([`build`]). The Display is the one sentence
/// the user sees.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A bus could not be opened.
    #[error(transparent)]
    Open(RobotSpecError),
    /// The buses and servos do not make a robot.
    #[error(transparent)]
    Setup(RobotSpecError),
    /// The body could not be put under the servos.
    #[error(transparent)]
    Physics(crate::physics::PhysicsStartError),
}

/// Open every bus of `spec` and build the robot, with the simulated parts set up as `setup`
/// says; the simulated robot behind them comes back beside it (`None` when no bus is
/// simulated).
pub fn build<C: Clock + Clone + Send + 'static>(
    spec: &RobotSpec,
    clock: C,
    config: RobotConfig,
    options: rtloop_io::open::OpenOptions,
    setup: &SimSetup,
) -> Result<(Robot<C>, Option<SimRobot>), BuildError> {
    let opened = spec.open(clock.clone(), options, setup.options).map_err(BuildError::Open)?;
    let sim = opened.sim;
    let mut imu = opened.imu;
    if let (Some(p), Some(sim)) = (setup.start_position_rev, &sim) {
        for s in spec.servo_specs() {
            sim.with_bus(s.bus, |b| b.servo_mut(s.id).map(|servo| servo.set_position(p)));
        }
    }
    // After the start position: with a body, the model's pose is where the joints are.
    if let Some(physics) = &setup.physics {
        let sim = sim.clone().unwrap_or_default();
        crate::physics::attach(&sim, physics, &spec.buses).map_err(BuildError::Physics)?;
        if sim.world_body().is_some() {
            imu = Some(sim.imu_source());
        }
    }
    let robot = Robot::new(opened.transports, spec.servo_specs(), imu, clock, config)
        .map_err(|e| BuildError::Setup(e.into()))?;
    Ok((robot, sim))
}
