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
    /// The loop's period, ns (0: 1 ms): the body's time step is made to divide it.
    pub period_ns: u64,
}

/// A robot [`build`] built, with what is simulated behind it.
pub struct Built<C: Clock> {
    /// The robot.
    pub robot: Robot<C>,
    /// The simulated robot behind its simulated buses (`None` when none is simulated).
    pub sim: Option<SimRobot>,
    /// The body under the simulated servos, when there is one.
    pub physics: Option<crate::physics::PhysicsInfo>,
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
/// says; the simulated robot behind them and its body come back beside it.
pub fn build<C: Clock + Clone + Send + 'static>(
    spec: &RobotSpec,
    clock: C,
    config: RobotConfig,
    options: rtloop_io::open::OpenOptions,
    setup: &SimSetup,
) -> Result<Built<C>, BuildError> {
    let opened = spec.open(clock.clone(), options, setup.options).map_err(BuildError::Open)?;
    let sim = opened.sim;
    let mut imu = opened.imu;
    if let (Some(p), Some(sim)) = (setup.start_position_rev, &sim) {
        for s in spec.servo_specs() {
            sim.with_bus(s.bus, |b| b.servo_mut(s.id).map(|servo| servo.set_position(p)));
        }
    }
    // After the start position: with a body, the model's pose is where the joints are.
    let mut info = None;
    if let Some(physics) = &setup.physics {
        let sim = sim.clone().unwrap_or_default();
        let period_ns = if setup.period_ns == 0 { 1_000_000 } else { setup.period_ns };
        info = Some(crate::physics::attach(&sim, physics, &spec.buses, period_ns).map_err(BuildError::Physics)?);
        if sim.world_body().is_some() {
            imu = Some(sim.imu_source());
        }
    }
    let robot = Robot::new(opened.transports, spec.servo_specs(), imu, clock, config)
        .map_err(|e| BuildError::Setup(e.into()))?;
    Ok(Built { robot, sim, physics: info })
}
