//! The cycle-time model of a robot as a run drives it: the protocol settings a run uses
//! ([`robot_config_for`], positions at [`command_resolution`]), the frames it really sends
//! ([`run_command_frame`]) and the [`rtloop_sim::model::CycleModel`] built from them
//! ([`model_for`]). `rtloop budget` prints this model term by term; a run compares its
//! period with it before it starts.
//!
//! The frame sizes are not assumed: the command is encoded exactly as the run loop encodes
//! it for that robot (on a pi3hat: the compact query), and the reply is what a simulated
//! servo answers to it. Without a pi3hat, host costs are those of the in-process simulator
//! (no SPI or USB hop between host and bus). On a pi3hat every frame crosses the board's
//! SPI, and the model plays its transactions one by one ([`rtloop_sim::model`]).
//!
//! Must never: change the model to match a measurement.

use crate::motion::Motion;
use crate::robot_spec::RobotSpec;
use rtloop_io::{BusUri, Pi3hatCarrier, RobotConfig, ServoCommand, ServoSpec};
use rtloop_proto::CanFdFrame;
use rtloop_sim::model::{predict, CycleModel, Prediction};

/// Host cost to encode one command, hand it to an in-process bus and decode its reply, ns.
/// `cargo bench -p rtloop-io --bench cycle` measures encode + decode at about 0.33 µs (p50)
/// on the development machine; 1 µs leaves room for the hand-over and a cold cache.
pub const IN_PROCESS_HOST_PER_FRAME_NS: u64 = 1_000;

/// What each cycle sends every servo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// What `rtloop run` sends: the demonstration motion's position commands (position,
    /// velocity, maximum torque, watchdog) with the robot's query.
    Run,
    /// The source post's case: every register of the 2020 position mode (0x020-0x027:
    /// position, velocity, feedforward torque, kp and kd scales, maximum torque, stop
    /// position, watchdog), at rtloop's int16 resolution, with the comprehensive query.
    SeedCase,
}

impl Workload {
    /// The protocol settings on `robot`.
    pub fn robot_config(self, robot: &RobotSpec) -> RobotConfig {
        let mut config = robot_config_for(robot);
        if self == Workload::SeedCase {
            config.query = rtloop_proto::host::QueryFormat::comprehensive();
        }
        config
    }

    /// The commands of the cycle `t` seconds into the motion.
    pub fn fill(self, motion: &Motion, t: f64, out: &mut [ServoCommand]) {
        motion.fill(t, out);
        if self == Workload::SeedCase {
            for c in out.iter_mut() {
                if let ServoCommand::Position(p) = c {
                    p.feedforward_torque = Some(0.0);
                    p.kp_scale = Some(1.0);
                    p.kd_scale = Some(1.0);
                    // NaN: no stop position — still a register the frame carries.
                    p.stop_position = Some(f64::NAN);
                }
            }
        }
    }

    /// A short description for the tables.
    pub fn describe(self, robot: &RobotSpec) -> &'static str {
        match (self, robot.has_pi3hat()) {
            (Workload::SeedCase, _) => "full position command (0x020-0x027, int16) + comprehensive query",
            (Workload::Run, true) => "rtloop run's position command + compact query",
            (Workload::Run, false) => "rtloop run's position command + comprehensive query",
        }
    }
}

/// The demonstration motion as `rtloop run` starts it, every joint of `servos` measured at 0.
pub fn run_motion(servos: usize) -> Motion {
    let mut motion = Motion::from_config(&crate::config::RunConfig::default());
    motion.set_start(std::iter::repeat_n(0.0, servos));
    motion
}

/// The command frame `rtloop run` sends servo `id` of `robot` on its first bus (a position
/// command of the default motion with the robot's query), padded as on the wire.
pub fn run_command_frame(robot: &RobotSpec, id: u8) -> Option<CanFdFrame> {
    command_frame(robot, Workload::Run, id)
}

/// The command frame `workload` sends servo `id` of `robot`, padded as on the wire.
pub fn command_frame(robot: &RobotSpec, workload: Workload, id: u8) -> Option<CanFdFrame> {
    let config = workload.robot_config(robot);
    let mut commands = [ServoCommand::Query; 1];
    workload.fill(&run_motion(1), 2.0, &mut commands);
    let mut command = CanFdFrame::default();
    rtloop_io::robot::encode_command(&config, ServoSpec { bus: 0, id }, &commands[0], &mut command).ok()?;
    Some(command)
}

/// Payload sizes (before padding) of `workload`'s command on `robot` and of the servo's
/// reply. On a pi3hat the command's size is what its SPI write carries
/// ([`rtloop_io::pi3hat::unpadded_len`]).
pub fn frame_sizes(robot: &RobotSpec, workload: Workload) -> (usize, usize) {
    let Some(command) = command_frame(robot, workload, 1) else {
        return (0, 0);
    };
    let unpadded =
        if on_pi3hat(robot) { usize::from(rtloop_io::pi3hat::unpadded_len(&command)) } else { unpadded_len(&command) };
    let mut servo = rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(1));
    let mut reply = CanFdFrame::default();
    let reply_len = if servo.handle_frame(&command, 0, &mut reply) { unpadded_len(&reply) } else { 0 };
    (unpadded, reply_len)
}

/// Length without the trailing 0x50 padding (a NOP can only be padding at the very end).
fn unpadded_len(f: &CanFdFrame) -> usize {
    let p = f.payload();
    p.len() - p.iter().rev().take_while(|&&b| b == rtloop_proto::frame::PAD_BYTE).count()
}

/// Whether the pi3hat model applies: every bus is a connector (1-5) of a pi3hat. (A robot
/// that mixes a pi3hat with other buses gets the in-process model.)
pub fn on_pi3hat(robot: &RobotSpec) -> bool {
    !robot.buses.is_empty()
        && robot.buses.iter().all(|b| matches!(b.uri, BusUri::Pi3hat { .. }) && (1..=5).contains(&b.bus))
}

/// The built-in quadruped on the simulated pi3hat: ids 1-12, three per connector JC1-JC4.
pub fn pi3hat_quadruped() -> RobotSpec {
    let mut robot = RobotSpec::default_quadruped();
    for b in &mut robot.buses {
        b.uri = BusUri::Pi3hat { carrier: Pi3hatCarrier::Sim };
    }
    robot
}

/// The model of the built-in robot as `rtloop run` drives it.
pub fn default_model() -> CycleModel {
    model_for(&RobotSpec::default_quadruped())
}

/// The model of `robot` as `rtloop run` drives it: its servos per bus, the real frame
/// sizes, and either the pi3hat's SPI (when every bus is on one) or the in-process host
/// costs (for buses behind another device, the wire terms still hold; the device's own
/// latency is not in the model).
pub fn model_for(robot: &RobotSpec) -> CycleModel {
    model_of(robot, Workload::Run)
}

/// The model of `robot` sending `workload`.
pub fn model_of(robot: &RobotSpec, workload: Workload) -> CycleModel {
    let (command_bytes, reply_bytes) = frame_sizes(robot, workload);
    let model = CycleModel {
        servos_per_bus: robot.buses.iter().map(|b| b.servos.len()).collect(),
        command_bytes,
        reply_bytes,
        host_per_frame_ns: IN_PROCESS_HOST_PER_FRAME_NS,
        host_fixed_ns: 0,
        imu_read_ns: 0,
        ..CycleModel::default_quadruped()
    };
    if on_pi3hat(robot) {
        // The run opens the board at its SPI defaults (`rtloop_io::spi::SpiTiming::default`), which
        // the model's defaults equal (a test checks it).
        model.on_pi3hat(robot.buses.iter().map(|b| b.bus).collect())
    } else {
        model
    }
}

/// The prediction for the built-in robot.
pub fn default_prediction() -> Prediction {
    predict(&default_model())
}

/// The resolution of the position commands a run sends: int16 (compact frames; positions to
/// ±3.2767 rev, velocities to ±8.19 rev/s). The agent spine's limits never exceed it.
pub fn command_resolution() -> rtloop_proto::host::PositionResolution {
    RobotConfig::default().position_resolution
}

/// The protocol settings a run uses on `robot` (before its timing is set): position commands
/// at [`command_resolution`], and the comprehensive query — or, on a pi3hat, the compact one.
/// `rtloop budget` builds its frames with the same settings.
pub fn robot_config_for(robot: &RobotSpec) -> RobotConfig {
    RobotConfig { position_resolution: command_resolution(), query: robot.query_format(), ..RobotConfig::default() }
}
