//! # push_recover — stand, take a push, see it in the IMU, and stand level again
//!
//! What it shows: a controller built on another: the `imu_level` example's [`Level`] (stand
//! up, hold, and keep the body level from the IMU), plus a watch on [`State::imu`] for a
//! disturbance. Once standing and level it tracks the peak acceleration (gravity removed),
//! the peak tilt from level and the peak angular rate. An acceleration above
//! [`PushRecover::threshold_mps2`] is a push; the body has recovered once it is back within
//! [`PushRecover::level_deg`] of level and still (rates under [`PushRecover::still_dps`],
//! no acceleration above the threshold) for [`PushRecover::hold_s`]. The legs' position loops
//! catch the push (springs and dampers around the stand pose); the levelling's rate term
//! damps the rocking that follows, and its integral brings the body back level, though the
//! feet now stand loaded differently than before.
//!
//! Run it: `cargo run --release -p rtloop --features physics --example push_recover -- --physics --lockstep`
//! pushes the built-in quadruped (MuJoCo, 7.4 kg) to its left with 60 N for 0.1 s, 2.5 s
//! after the start (`--push SECONDS:FX,FY,FZ[:DURATION]` for another push: world frame, +x
//! forward, +y left, +z up; `--gain G` and `--damping D` set the levelling's terms, 0 for
//! none). Without `--physics` it runs on the simulated IMU, which only sways: it sees no
//! push, and says so.
//!
//! What to look for: `push seen at 2.50 s: peak acceleration 18.4 m/s², peak tilt 3.3°`,
//! then `recovered 0.78 s after the push`, and the `body:` line: back at standing height
//! (0.34 m) and level. With `--damping 0` the body still rocks at the end: `not recovered`;
//! the legs' own stiffness (`--gain 0 --damping 0`) brings it back more slowly (1.02 s). Exit 0 when the run's
//! status is `ok` and the push it was given was seen and recovered from; 1 otherwise; 2 for
//! a usage mistake.

// The levelling controller this one builds on, and its command line (its `main` goes
// unused here).
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "imu_level.rs"]
mod imu_level;

use imu_level::{common, roll_pitch, Level};
use rtloop::physics::PushSpec;
use rtloop::{Controller, Failure, Flow, Output, State};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

/// The push with `--physics` unless `--push` gives another: 60 N to the robot's left for
/// 0.1 s, 2.5 s after the start (a second after it stands).
pub const DEFAULT_PUSH: PushSpec = PushSpec { at_s: 2.5, force_n: [0.0, 60.0, 0.0], duration_s: 0.1 };

/// What the IMU saw. Times in s from the start.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PushReport {
    /// When the acceleration first crossed the threshold, once standing.
    pub seen_at_s: Option<f64>,
    /// Peak |acceleration| (gravity removed), m/s², once standing.
    pub peak_accel_mps2: f64,
    /// Peak tilt from the reference attitude, degrees, and its roll and pitch parts then.
    pub peak_tilt_deg: f64,
    pub peak_roll_deg: f64,
    pub peak_pitch_deg: f64,
    /// Peak |angular rate|, °/s, once standing.
    pub peak_rate_dps: f64,
    /// When the body was back within `level_deg` of level and still (the start of the
    /// `hold_s` it stayed there).
    pub recovered_at_s: Option<f64>,
    /// The attitude (roll, pitch), degrees, when the watch began and the last one read.
    pub before_deg: (f64, f64),
    pub last_deg: (f64, f64),
}

/// Stand, hold level, and watch the IMU for a push.
pub struct PushRecover {
    /// Acceleration (m/s², gravity removed) that counts as a push.
    pub threshold_mps2: f64,
    /// Recovered: within this many degrees of the reference attitude …
    pub level_deg: f64,
    /// … turning slower than this (°/s) …
    pub still_dps: f64,
    /// … for this long (s).
    pub hold_s: f64,
    /// Seconds after the stand-up before watching (the body settles and levels first).
    pub settle_s: f64,
    /// Stand up, hold, level.
    pub level: Level,
    report: PushReport,
    /// Since when the body has been level and still after the push (NaN: it is not).
    calm_since: f64,
    /// Filled in by `stop`, read by `main` (and tests) once the run is over.
    pub result: Arc<Mutex<Option<PushReport>>>,
}

impl Default for PushRecover {
    fn default() -> Self {
        PushRecover {
            threshold_mps2: 2.0,
            level_deg: 1.0,
            still_dps: 5.0,
            hold_s: 0.2,
            settle_s: 1.0,
            level: Level::default(),
            report: PushReport::default(),
            calm_since: f64::NAN,
            result: Arc::new(Mutex::new(None)),
        }
    }
}

fn norm(v: [f64; 3]) -> f64 {
    (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt()
}

impl Controller for PushRecover {
    type Telemetry = ();

    fn start(&mut self, state: &State<'_>) -> Result<(), Failure> {
        self.level.start(state) // refuses a robot without an IMU
    }

    fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, ()>) -> Result<Flow, Failure> {
        self.level.cycle(state, out)?; // stand up, hold, level
        let Some((roll, pitch)) = roll_pitch(state.imu.quaternion) else { return Ok(Flow::Continue) };
        let (roll, pitch, t) = (roll.to_degrees(), pitch.to_degrees(), state.time_s);
        let r = &mut self.report;
        r.last_deg = (roll, pitch);
        if t < self.level.stand_s() + self.settle_s {
            r.before_deg = (roll, pitch);
            return Ok(Flow::Continue);
        }
        let tilt = roll.hypot(pitch);
        let (accel, rate) = (norm(state.imu.accel_mps2), norm(state.imu.rate_dps));
        r.peak_accel_mps2 = r.peak_accel_mps2.max(accel);
        r.peak_rate_dps = r.peak_rate_dps.max(rate);
        if tilt > r.peak_tilt_deg {
            (r.peak_tilt_deg, r.peak_roll_deg, r.peak_pitch_deg) = (tilt, roll, pitch);
        }
        if r.seen_at_s.is_none() && accel > self.threshold_mps2 {
            r.seen_at_s = Some(t);
        }
        if r.seen_at_s.is_some() && r.recovered_at_s.is_none() {
            let calm = tilt < self.level_deg && rate < self.still_dps && accel < self.threshold_mps2;
            if !calm {
                self.calm_since = f64::NAN;
            } else if self.calm_since.is_nan() {
                self.calm_since = t;
            } else if t - self.calm_since >= self.hold_s {
                r.recovered_at_s = Some(self.calm_since);
            }
        }
        Ok(Flow::Continue)
    }

    fn stop(&mut self, state: &State<'_>) {
        self.level.stop(state);
        let r = self.report;
        match r.seen_at_s {
            Some(at) => println!(
                "push_recover: push seen at {at:.2} s: peak acceleration {:.1} m/s², peak tilt {:.1}° (roll {:+.1}°, \
                 pitch {:+.1}°), peak rate {:.0} °/s",
                r.peak_accel_mps2, r.peak_tilt_deg, r.peak_roll_deg, r.peak_pitch_deg, r.peak_rate_dps
            ),
            None => println!(
                "push_recover: no push seen: peak acceleration {:.2} m/s² (threshold {} m/s²), peak tilt {:.1}°",
                r.peak_accel_mps2, self.threshold_mps2, r.peak_tilt_deg
            ),
        }
        if let (Some(seen), Some(back)) = (r.seen_at_s, r.recovered_at_s) {
            println!(
                "push_recover: recovered {:.2} s after the push: within {}° of level and still",
                back - seen,
                self.level_deg
            );
        } else if r.seen_at_s.is_some() {
            println!("push_recover: not recovered by the end");
        }
        let ((r0, p0), (r1, p1)) = (r.before_deg, r.last_deg);
        println!(
            "push_recover: attitude before roll {r0:+.2}° pitch {p0:+.2}°, at the end roll {r1:+.2}° pitch {p1:+.2}°"
        );
        *self.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
    }
}

fn main() -> ExitCode {
    let args = match common::args("push_recover", common::Args::new(4.0), &["--push", "--gain", "--damping"]) {
        Ok(mut args) => {
            if args.physics && args.push.is_none() {
                args.push = Some(DEFAULT_PUSH);
            }
            args
        }
        Err(code) => return code,
    };
    let mut controller = PushRecover::default();
    controller.level.gain = args.gain.unwrap_or(controller.level.gain);
    controller.level.damping = args.damping.unwrap_or(controller.level.damping);
    let result = Arc::clone(&controller.result);
    let runtime = match args.runtime() {
        Ok(runtime) => runtime,
        Err(e) => return common::usage_error("push_recover", &e),
    };
    let summary = match runtime.run(controller) {
        Ok(summary) => summary,
        Err(e) => return common::usage_error("push_recover", &e.to_string()),
    };
    let code = common::finish(&summary);
    let report = *result.lock().unwrap_or_else(|e| e.into_inner());
    let recovered = report.is_some_and(|r| r.recovered_at_s.is_some());
    if args.push.is_some() && !recovered {
        println!("push not recovered from: it was not seen, or the body was not back level and still by the end");
        return ExitCode::from(1);
    }
    code
}
