//! # stand — from wherever the joints are to a standing pose, then hold
//!
//! What it shows: the smallest useful [`Controller`]. `start` learns where every joint is;
//! `cycle` ramps each joint to [`STAND_POSE`] over one second with a smoothstep — position
//! *and* velocity feed-forward, so the servos track without lag — then holds. Every command
//! carries its gains, torque limit and watchdog.
//!
//! Run it: `cargo run --release --example stand` (add `-- --duration 10` to hold longer), or
//! on a robot with a body:
//! `cargo run --release -p rtloop --features physics --example stand -- --physics --lockstep`,
//! or on a robot model of someone else's (`tools/models` fetches Unitree's Go2 and Universal
//! Robots' UR5e, as MuJoCo Menagerie ships them):
//! `cargo run --release -p rtloop --features physics --example stand -- --robot examples/robots/go2.toml --lockstep`.
//!
//! The pose it stands in: the model's own (its `home`/`stand` keyframe, or `stand_pose` under
//! `[physics]`: [`State::model_pose`]) when the robot's model names one, else the built-in
//! quadruped's [`STAND_POSE`]; a model of the user's that names none is refused in `start`
//! (the joints of someone else's robot are not the built-in one's). The gains and torque
//! limit of each command are the run's `[gains]` (`--robot`'s file may raise them: a Go2's
//! knees need 45 N·m where the built-in quadruped's need 8).
//!
//! * Without `--physics` the simulated joints start at 0.05 rev (a real robot never starts at
//!   zero) and carry a gravity-like load of their own.
//! * With `--physics` they are the joints of the built-in quadruped (7.4 kg, MuJoCo), which
//!   starts lying on the ground, legs folded, its body 0.05 m up: the ramp lifts the body
//!   to about 0.32 m and the legs then carry it. That takes torque: each command allows
//!   8 N·m (4 N·m does not carry the robot). `--lockstep` runs in simulated time, as fast as
//!   the machine allows, with the same result every time.
//!
//! What to look for: `holding within … rev`, the worst tracking error once standing: about
//! 0.015 rev (0.010 rev with `--physics`), because a position loop droops under load
//! (`feedforward_torque` is where a gravity model would go). With `--physics`, the `body:`
//! line: the height (0.335 m), roll (0°) and pitch (-0.3°: the legs droop a little more at
//! the front) the body ended at. Then `status: ok` (exit 0; 1 if degraded).

// Its command line, shared with `imu_level` and `push_recover`.
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "common/mod.rs"]
mod common;

use rtloop::motion::STAND_POSE;
use rtloop::{Controller, Failure, Flow, ModelPose, Output, PositionCommand, ServoCommand, State};
use std::process::ExitCode;

/// The most joints this controller drives (the runtime drives at most 32 servos).
const MAX_JOINTS: usize = 32;

/// Stand up, then hold.
pub struct Stand {
    /// Seconds from the measured pose to the stand pose.
    pub ramp_s: f64,
    /// Every command carries these: gain scales, torque limit (N·m), watchdog (s).
    pub kp_scale: f64,
    pub kd_scale: f64,
    pub maximum_torque: f64,
    pub watchdog_s: f64,
    /// Where each joint goes (set in `start`: the model's pose or [`STAND_POSE`]).
    stand: [f64; MAX_JOINTS],
    /// Where each joint was first measured (NaN: not yet) and when (s).
    from: [f64; MAX_JOINTS],
    from_t: [f64; MAX_JOINTS],
    /// Worst |target − measured| once standing, rev.
    worst_hold_error: f64,
}

impl Default for Stand {
    fn default() -> Self {
        Stand {
            ramp_s: 1.0,
            kp_scale: 1.0,
            kd_scale: 1.0,
            maximum_torque: 8.0,
            watchdog_s: 0.1,
            stand: [f64::NAN; MAX_JOINTS],
            from: [f64::NAN; MAX_JOINTS],
            from_t: [0.0; MAX_JOINTS],
            worst_hold_error: 0.0,
        }
    }
}

impl Stand {
    /// Joint `i`'s target at `t`: (position rev, velocity rev/s); `None` until it is measured.
    fn target(&self, i: usize, t: f64) -> Option<(f64, f64)> {
        let (from, stand) = (self.from[i], self.stand[i]);
        if from.is_nan() || stand.is_nan() {
            return None;
        }
        let x = ((t - self.from_t[i]) / self.ramp_s).clamp(0.0, 1.0);
        let (s, ds) = (x * x * (3.0 - 2.0 * x), 6.0 * x * (1.0 - x)); // smoothstep and its slope
        Some((from + (stand - from) * s, (stand - from) * ds / self.ramp_s))
    }
}

impl Controller for Stand {
    type Telemetry = ();

    fn start(&mut self, state: &State<'_>) -> Result<(), Failure> {
        for i in 0..state.servos.len().min(MAX_JOINTS) {
            self.stand[i] = match state.model_pose {
                ModelPose::NotGiven => STAND_POSE[i % 3],
                // NaN for a servo the model does not drive: that one is only queried.
                ModelPose::Stand(pose) => pose.get(i).copied().unwrap_or(f64::NAN),
                ModelPose::Missing => {
                    return Err(Failure::new(
                        "no_stand_pose",
                        "this model names no pose to stand in, and the built-in quadruped's is not its",
                        "give the model a `home` or `stand` keyframe, or name one as stand_pose under [physics]",
                    ))
                }
            };
        }
        for (i, servo) in state.servos.iter().enumerate().take(MAX_JOINTS) {
            if servo.age_cycles.is_some() && servo.state.position.is_finite() {
                self.from[i] = servo.state.position;
            }
        }
        Ok(())
    }

    fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, ()>) -> Result<Flow, Failure> {
        for (i, servo) in state.servos.iter().enumerate().take(MAX_JOINTS) {
            // A joint that had not answered by `start` begins its own ramp when it does.
            if self.from[i].is_nan() && servo.age_cycles.is_some() && servo.state.position.is_finite() {
                (self.from[i], self.from_t[i]) = (servo.state.position, state.time_s);
            }
            let Some((position, velocity)) = self.target(i, state.time_s) else { continue }; // only queried
            out.set(
                i,
                ServoCommand::Position(PositionCommand {
                    position: Some(position),
                    velocity: Some(velocity),
                    kp_scale: Some(self.kp_scale),
                    kd_scale: Some(self.kd_scale),
                    maximum_torque: Some(self.maximum_torque),
                    watchdog_timeout: Some(self.watchdog_s),
                    ..Default::default()
                }),
            );
            if servo.fresh && state.time_s > self.from_t[i] + self.ramp_s + 0.2 {
                self.worst_hold_error = self.worst_hold_error.max((servo.state.position - position).abs());
            }
        }
        Ok(Flow::Continue)
    }

    fn stop(&mut self, state: &State<'_>) {
        let joints = state.servos.len().min(MAX_JOINTS);
        let measured = self.from[..joints].iter().filter(|p| !p.is_nan()).count();
        println!("stand: {measured} of {joints} joints ramped from their measured pose in {:.1} s", self.ramp_s);
        println!("stand: holding within {:.4} rev of the stand pose", self.worst_hold_error);
    }
}

fn main() -> ExitCode {
    let args = match common::args("stand", common::Args::new(3.0), &["--robot"]) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let mut runtime = match args.runtime() {
        Ok(runtime) => runtime,
        Err(e) => return common::usage_error("stand", &e),
    };
    // Without a body: where the simulated joints start (with one, the model's pose says).
    runtime.config_mut().sim.start_position_rev = 0.05;
    let gains = &runtime.config().gains;
    let stand = Stand {
        kp_scale: gains.kp_scale,
        kd_scale: gains.kd_scale,
        maximum_torque: gains.maximum_torque,
        watchdog_s: gains.watchdog_timeout_s,
        ..Stand::default()
    };
    match runtime.run(stand) {
        Ok(summary) => common::finish(&summary),
        Err(e) => common::usage_error("stand", &e.to_string()),
    }
}
