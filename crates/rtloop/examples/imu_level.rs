//! # imu_level — read the attitude from the IMU and lengthen or shorten legs to level the body
//!
//! What it shows: a controller that reads [`State::imu`] every cycle, turns the quaternion
//! into roll and pitch, and adds a proportional, clamped height offset per leg on top of
//! another controller (the library's [`Motion`] with no sway: stand up, then hold). A leg
//! is lengthened by opening its knee and moving its hip by half as much the other way.
//!
//! Assumed layout (change [`LEGS`] for your robot): legs in servo order front-left,
//! front-right, rear-left, rear-right, three joints each (abduction, hip, knee); IMU in the
//! pi3hat frame (+x forward, +y right, +z down), so positive roll is the right side down and
//! positive pitch is the nose up.
//!
//! Run it: `cargo run --release --example imu_level` (add `-- --duration 10` for longer).
//!
//! What to look for: the roll and pitch it saw (the simulated body sways by a few degrees
//! on its own) and the largest leg offset it commanded. The simulated IMU does not respond
//! to the legs, so here the legs follow the sway rather than cancel it: on a real robot,
//! tune [`Level::gain`] from small values up. `status: ok` exits 0, `degraded` exits 1.

use rtloop::motion::Motion;
use rtloop::{Controller, Flow, Output, RunSummary, Runtime, ServoCommand, State};
use std::process::ExitCode;

/// Per leg (in servo order): +1 for a front leg, −1 for a rear one; +1 right, −1 left.
pub const LEGS: [(f64, f64); 4] = [(1.0, -1.0), (1.0, 1.0), (-1.0, -1.0), (-1.0, 1.0)];

/// Stand, then level the body with the legs.
pub struct Level {
    /// Leg lengthening (knee revolutions) per radian of tilt.
    pub gain: f64,
    /// Largest offset, knee revolutions.
    pub max_offset_rev: f64,
    /// The pose to level around.
    base: Motion,
    /// Roll and pitch seen (degrees): min, max, sum, samples.
    roll: Stats,
    pitch: Stats,
    max_offset_seen: f64,
}

#[derive(Clone, Copy)]
struct Stats {
    min: f64,
    max: f64,
    sum: f64,
    n: u64,
}

impl Stats {
    const EMPTY: Stats = Stats { min: f64::INFINITY, max: f64::NEG_INFINITY, sum: 0.0, n: 0 };
    fn add(&mut self, x: f64) {
        (self.min, self.max, self.sum, self.n) = (self.min.min(x), self.max.max(x), self.sum + x, self.n + 1);
    }
}

impl Default for Level {
    fn default() -> Self {
        let mut base = Motion::default();
        (base.amplitude_rev, base.watchdog_timeout) = (0.0, Some(0.1)); // stand up, then hold
        Level { gain: 0.5, max_offset_rev: 0.04, base, roll: Stats::EMPTY, pitch: Stats::EMPTY, max_offset_seen: 0.0 }
    }
}

/// Roll and pitch (radians) of a `[w, x, y, z]` quaternion, z-y-x order; `None` when there
/// is no IMU (all zeros).
pub fn roll_pitch([w, x, y, z]: [f64; 4]) -> Option<(f64, f64)> {
    if w * w + x * x + y * y + z * z < 0.5 {
        return None;
    }
    let roll = (2.0 * (w * x + y * z)).atan2(1.0 - 2.0 * (x * x + y * y));
    let pitch = (2.0 * (w * y - z * x)).clamp(-1.0, 1.0).asin();
    Some((roll, pitch))
}

impl Controller for Level {
    type Telemetry = ();

    fn start(&mut self, state: &State<'_>) {
        self.base.start(state);
    }

    fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, ()>) -> Flow {
        self.base.cycle(state, out); // stand-up ramp, then hold
        let Some((roll, pitch)) = roll_pitch(state.imu.quaternion) else { return Flow::Continue };
        self.roll.add(roll.to_degrees());
        self.pitch.add(pitch.to_degrees());
        // Fade the levelling in once standing, so it never steps.
        let x = ((state.time_s - self.base.stand_s) / 0.5).clamp(0.0, 1.0);
        let fade = x * x * (3.0 - 2.0 * x);
        for (leg, (front, right)) in LEGS.iter().enumerate() {
            // Right side down: lengthen the right legs; nose up: lengthen the rear legs.
            let offset = (self.gain * (right * roll - front * pitch)).clamp(-self.max_offset_rev, self.max_offset_rev);
            self.max_offset_seen = self.max_offset_seen.max((offset * fade).abs());
            for (joint, share) in [(1, 0.5), (2, -1.0)] {
                if let Some(ServoCommand::Position(p)) = out.commands().get_mut(3 * leg + joint) {
                    p.position = p.position.map(|q| q + share * offset * fade);
                }
            }
        }
        Flow::Continue
    }

    fn stop(&mut self, _state: &State<'_>) {
        for (name, s) in [("roll", self.roll), ("pitch", self.pitch)] {
            let mean = s.sum / s.n.max(1) as f64;
            println!("imu_level: {name} min {:+.2}° max {:+.2}° mean {mean:+.2}° ({} samples)", s.min, s.max, s.n);
        }
        println!("imu_level: largest leg offset {:.4} rev (limit {} rev)", self.max_offset_seen, self.max_offset_rev);
    }
}

fn main() -> ExitCode {
    let duration_s = match duration_from_args(4.0) {
        Ok(d) => d,
        Err(e) => return usage_error(&e),
    };
    match Runtime::new().duration_s(duration_s).run(Level::default()) {
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
    eprintln!("imu_level: {message}");
    ExitCode::from(2)
}

/// Print a short summary and the run's status; exit 0 when "ok", 1 when "degraded".
fn finish(summary: &RunSummary) -> ExitCode {
    println!(
        "run: {} cycles at {:.1} Hz on {} servos, {} IMU samples, {} missing replies",
        summary.cycles, summary.rate_hz, summary.servos, summary.imu_samples, summary.missing_replies
    );
    for problem in &summary.problems {
        println!("problem: {problem}");
    }
    println!("status: {}", summary.status);
    ExitCode::from(summary.exit_code())
}
