//! # stand — from wherever the joints are to a standing pose, then hold
//!
//! What it shows: the smallest useful [`Controller`]. `start` learns where every joint is
//! (the simulated joints start at 0.05 rev here, as a real robot never starts at zero);
//! `cycle` ramps each joint to [`STAND_POSE`] over one second with a smoothstep — position
//! *and* velocity feed-forward, so the servos track without lag — then holds. Every command
//! carries its gains, torque limit and watchdog.
//!
//! Run it: `cargo run --release --example stand` (add `-- --duration 10` to hold longer).
//!
//! What to look for: `holding within … rev`, the worst tracking error once standing: about
//! 0.015 rev, because the simulated joints carry a gravity-like load and a position loop
//! droops under load (`feedforward_torque` is where a gravity model would go). Then
//! `status: ok` (exit 0; 1 if degraded).

use rtloop::config::SimConfig;
use rtloop::motion::STAND_POSE;
use rtloop::{Controller, Flow, Output, PositionCommand, RunSummary, Runtime, ServoCommand, State};
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
            maximum_torque: 4.0,
            watchdog_s: 0.1,
            from: [f64::NAN; MAX_JOINTS],
            from_t: [0.0; MAX_JOINTS],
            worst_hold_error: 0.0,
        }
    }
}

impl Stand {
    /// Joint `i`'s target at `t`: (position rev, velocity rev/s); `None` until it is measured.
    fn target(&self, i: usize, t: f64) -> Option<(f64, f64)> {
        let (from, stand) = (self.from[i], STAND_POSE[i % 3]);
        if from.is_nan() {
            return None;
        }
        let x = ((t - self.from_t[i]) / self.ramp_s).clamp(0.0, 1.0);
        let (s, ds) = (x * x * (3.0 - 2.0 * x), 6.0 * x * (1.0 - x)); // smoothstep and its slope
        Some((from + (stand - from) * s, (stand - from) * ds / self.ramp_s))
    }
}

impl Controller for Stand {
    type Telemetry = ();

    fn start(&mut self, state: &State<'_>) {
        for (i, servo) in state.servos.iter().enumerate().take(MAX_JOINTS) {
            if servo.age_cycles.is_some() && servo.state.position.is_finite() {
                self.from[i] = servo.state.position;
            }
        }
    }

    fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, ()>) -> Flow {
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
        Flow::Continue
    }

    fn stop(&mut self, state: &State<'_>) {
        let joints = state.servos.len().min(MAX_JOINTS);
        let measured = self.from[..joints].iter().filter(|p| !p.is_nan()).count();
        println!("stand: {measured} of {joints} joints ramped from their measured pose in {:.1} s", self.ramp_s);
        println!("stand: holding within {:.4} rev of the stand pose", self.worst_hold_error);
    }
}

fn main() -> ExitCode {
    let duration_s = match duration_from_args(3.0) {
        Ok(d) => d,
        Err(e) => return usage_error(&e),
    };
    let runtime =
        Runtime::new().duration_s(duration_s).sim(SimConfig { start_position_rev: 0.05, ..Default::default() });
    match runtime.run(Stand::default()) {
        Ok(summary) => finish(&summary),
        Err(e) => usage_error(&e.to_string()),
    }
}

/// `--duration SECONDS` (finite, above 0, at most 3600), or `default_s`.
fn duration_from_args(default_s: f64) -> Result<f64, String> {
    let mut args = std::env::args().skip(1);
    let mut duration = default_s;
    while let Some(arg) = args.next() {
        if arg != "--duration" {
            return Err(format!("unexpected argument {arg:?}: the only option is --duration SECONDS"));
        }
        let value = args.next().ok_or("--duration needs a number of seconds: try --duration 5")?;
        duration = value.parse().ok().filter(|s: &f64| s.is_finite() && *s > 0.0 && *s <= 3600.0).ok_or_else(|| {
            format!("--duration {value:?} is not a number of seconds above 0 and at most 3600: try --duration 5")
        })?;
    }
    Ok(duration)
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("stand: {message}");
    ExitCode::from(2)
}

/// Print a short summary and the run's status; exit 0 when "ok", 1 when "degraded".
fn finish(summary: &RunSummary) -> ExitCode {
    println!(
        "run: {} cycles at {:.1} Hz on {} servos, {} missing replies, cycle p99 {:.0} µs",
        summary.cycles, summary.rate_hz, summary.servos, summary.missing_replies, summary.cycle_us.p99
    );
    for problem in &summary.problems {
        println!("problem: {problem}");
    }
    println!("status: {}", summary.status);
    ExitCode::from(summary.exit_code())
}
