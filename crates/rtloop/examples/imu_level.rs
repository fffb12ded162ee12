//! # imu_level — read the attitude from the IMU and lengthen or shorten legs to level the body
//!
//! What it shows: a controller that reads [`State::imu`] every cycle, turns the quaternion
//! into roll and pitch, and feeds them back as a clamped height offset per leg on top of
//! another controller (the library's [`Motion`] with no sway: stand up, then hold). A leg is
//! lengthened by opening its knee and moving its hip by half as much the other way, which
//! keeps the foot under the hip. Two terms, both from the IMU: the tilt integrated
//! ([`Level::gain`]: the offsets grow for as long as the body is tilted, so they end where it
//! is level, whatever the slope within the clamp) and the tilt rate ([`Level::damping`]:
//! the body rocks on its springy legs, and lengthening the legs on the side going down damps
//! that). On a robot without an IMU it refuses to start: `start` returns a
//! [`Failure`](rtloop::Failure), so no servo is commanded and the summary says why.
//!
//! Assumed layout (change [`LEGS`] for your robot): legs in servo order front-left,
//! front-right, rear-left, rear-right, three joints each (abduction, hip, knee), joint zero
//! the leg straight down, a positive hip or knee angle swinging the foot backward; IMU in the
//! pi3hat frame (+x forward, +y right, +z down), so positive roll is the right side down and
//! positive pitch is the nose up.
//!
//! Run it: `cargo run --release --example imu_level` (add `-- --duration 10` for longer), or
//! on ground that slopes 8° nose up under a robot with a body:
//! `cargo run --release -p rtloop --features physics --example imu_level -- --physics --lockstep --tilt 8`
//! (`--gain 0` for the same run without levelling; `--damping D` sets the rate term).
//!
//! What to look for: the roll and pitch it saw, the attitude at the end and the leg offsets
//! it commanded.
//! * With `--physics` the IMU reads the body of the built-in quadruped (MuJoCo): on the 8°
//!   slope it stands up pitched about 8.3° nose up; from 1.3 s the rear legs lengthen and the
//!   front legs shorten (by 0.035 knee rev) until the IMU reads level: the `body:` line ends
//!   within a tenth of a degree of level, against 8.3° with `--gain 0`. Nose down
//!   (`--tilt -8`) it levels as well (-9.1° without levelling: the front legs give a little
//!   under the load); it levels -12° too, and nose up the clamp (0.08 rev) reaches about 15°.
//! * Without it, the simulated IMU sways by a few degrees on its own and does not respond
//!   to the legs: the offsets follow the sway, within their clamp.
//!
//! `status: ok` exits 0, `degraded` exits 1.

// Its command line, shared with `stand` and `push_recover` (the latter through this module).
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "common/mod.rs"]
pub mod common;

use rtloop::motion::Motion;
use rtloop::{Controller, Failure, Flow, Output, ServoCommand, State};
use std::process::ExitCode;

/// Per leg (in servo order): +1 for a front leg, −1 for a rear one; +1 right, −1 left.
pub const LEGS: [(f64, f64); 4] = [(1.0, -1.0), (1.0, 1.0), (-1.0, -1.0), (-1.0, 1.0)];

/// Stand, then level the body with the legs.
pub struct Level {
    /// Leg lengthening rate (knee revolutions per second) per radian of tilt; 0: no levelling.
    pub gain: f64,
    /// Leg lengthening (knee revolutions) per rad/s of tilt rate: damps the body's rocking
    /// on its legs; 0: none.
    pub damping: f64,
    /// Largest offset, knee revolutions.
    pub max_offset_rev: f64,
    /// Beyond this roll or pitch (degrees) the body has fallen, or is falling: the offsets
    /// are held rather than grown, since no leg length would level it.
    pub max_tilt_deg: f64,
    /// Seconds after the stand-up before the levelling starts (the body settles first).
    pub settle_s: f64,
    /// The pose to level around.
    base: Motion,
    /// The integrated offsets, knee rev: right legs lengthened for roll, rear legs for pitch.
    roll_offset: f64,
    pitch_offset: f64,
    /// The previous cycle's time, s (NaN before the first).
    last_t: f64,
    /// Roll and pitch seen (degrees): min, max, sum, samples; and the last of each.
    roll: Stats,
    pitch: Stats,
    last: (f64, f64),
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
        Level {
            gain: 1.0,
            damping: 0.02,
            max_offset_rev: 0.08,
            max_tilt_deg: 20.0,
            settle_s: 0.3,
            base,
            roll_offset: 0.0,
            pitch_offset: 0.0,
            last_t: f64::NAN,
            roll: Stats::EMPTY,
            pitch: Stats::EMPTY,
            last: (f64::NAN, f64::NAN),
            max_offset_seen: 0.0,
        }
    }
}

impl Level {
    /// Seconds the stand-up takes.
    pub fn stand_s(&self) -> f64 {
        self.base.stand_s
    }
}

/// Roll and pitch (radians) of a `[w, x, y, z]` quaternion, z-y-x order; `None` when there
/// is no IMU (all zeros).
pub fn roll_pitch(q: [f64; 4]) -> Option<(f64, f64)> {
    if q.iter().map(|c| c * c).sum::<f64>() < 0.5 {
        return None;
    }
    Some(rtloop::controller::roll_pitch(q))
}

impl Controller for Level {
    type Telemetry = ();

    fn start(&mut self, state: &State<'_>) -> Result<(), Failure> {
        // Levelling reads the IMU: on a robot without one, refuse to start (nothing moves).
        if roll_pitch(state.imu.quaternion).is_none() {
            let fix = "give the robot an IMU (a pi3hat's, or the simulated robot's)";
            return Err(Failure::new("no_imu", "the robot has no IMU to level the body with", fix));
        }
        self.base.start(state)
    }

    fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, ()>) -> Result<Flow, Failure> {
        self.base.cycle(state, out)?; // stand-up ramp, then hold
                                      // The time since the previous cycle (0 on the first).
        let dt = if self.last_t.is_nan() { 0.0 } else { (state.time_s - self.last_t).clamp(0.0, 0.1) };
        self.last_t = state.time_s;
        let Some((roll, pitch)) = roll_pitch(state.imu.quaternion) else { return Ok(Flow::Continue) };
        self.roll.add(roll.to_degrees());
        self.pitch.add(pitch.to_degrees());
        self.last = (roll.to_degrees(), pitch.to_degrees());
        if state.time_s < self.base.stand_s + self.settle_s {
            return Ok(Flow::Continue); // standing up: the offsets start from 0 once it stands, so the legs never step
        }
        // Integral feedback: the offsets grow while the body is tilted and stop where it is level.
        // Rate feedback: lengthen the legs on the side going down, which damps the rocking.
        let [mut roll_rate, mut pitch_rate, _] = state.imu.rate_dps.map(f64::to_radians);
        let limit = self.max_offset_rev;
        if roll.abs().max(pitch.abs()) <= self.max_tilt_deg.to_radians() {
            self.roll_offset = (self.roll_offset + self.gain * roll * dt).clamp(-limit, limit);
            self.pitch_offset = (self.pitch_offset + self.gain * pitch * dt).clamp(-limit, limit);
        } else {
            (roll_rate, pitch_rate) = (0.0, 0.0); // fallen: hold the legs where they are
        }
        let (roll_term, pitch_term) =
            (self.roll_offset + self.damping * roll_rate, self.pitch_offset + self.damping * pitch_rate);
        for (leg, (front, right)) in LEGS.iter().enumerate() {
            // Right side down: lengthen the right legs; nose up: lengthen the rear legs.
            let offset = (right * roll_term - front * pitch_term).clamp(-self.max_offset_rev, self.max_offset_rev);
            self.max_offset_seen = self.max_offset_seen.max(offset.abs());
            // Lengthen: open the knee (toward 0) and swing the hip back by half as much.
            for (joint, share) in [(1, 0.5), (2, -1.0)] {
                if let Some(ServoCommand::Position(p)) = out.commands().get_mut(3 * leg + joint) {
                    p.position = p.position.map(|q| q + share * offset);
                }
            }
        }
        Ok(Flow::Continue)
    }

    fn stop(&mut self, _state: &State<'_>) {
        for (name, s) in [("roll", self.roll), ("pitch", self.pitch)] {
            let mean = s.sum / s.n.max(1) as f64;
            println!("imu_level: {name} min {:+.2}° max {:+.2}° mean {mean:+.2}° ({} samples)", s.min, s.max, s.n);
        }
        let (roll, pitch) = self.last;
        println!("imu_level: at the end the IMU read roll {roll:+.2}° pitch {pitch:+.2}° (gain {})", self.gain);
        println!(
            "imu_level: largest leg offset {:.4} rev (limit {} rev); at the end, for roll {:+.4} rev, for pitch {:+.4} rev",
            self.max_offset_seen, self.max_offset_rev, self.roll_offset, self.pitch_offset
        );
    }
}

fn main() -> ExitCode {
    let args = match common::args("imu_level", common::Args::new(4.0), &["--tilt", "--gain", "--damping"]) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let mut level = Level::default();
    level.gain = args.gain.unwrap_or(level.gain);
    level.damping = args.damping.unwrap_or(level.damping);
    let runtime = match args.runtime() {
        Ok(runtime) => runtime,
        Err(e) => return common::usage_error("imu_level", &e),
    };
    match runtime.run(level) {
        Ok(summary) => common::finish(&summary),
        Err(e) => common::usage_error("imu_level", &e.to_string()),
    }
}
