//! What the examples `stand`, `imu_level` and `push_recover` share: their command line, the
//! runtime it asks for, and their last lines. (A folder without a `main.rs`, so cargo does not
//! take it for an example of its own.)
//!
//! The options, each example taking those it names:
//! * `--duration SECONDS` (finite, above 0, at most 3600);
//! * `--physics`: a body under the simulated servos (MuJoCo, the built-in quadruped lying on
//!   the ground; a build with `--features physics`);
//! * `--lockstep`: simulated time, one period per cycle as fast as the controller allows, the
//!   same results on every run;
//! * `--tilt DEGREES` (with `--physics`): the ground slopes nose up by that much (-30 … 30);
//! * `--push SECONDS:FX,FY,FZ[:DURATION]` (with `--physics`): push the body with that force,
//!   N, world frame (+x forward, +y left, +z up), as `rtloop run --push`;
//! * `--gain G`, `--damping D` (finite, 0 … 100): the levelling's integral and rate gains
//!   (`imu_level`'s `Level`); 0 switches that term off;
//! * `--robot FILE` (`stand`): the robot of a run file — its buses, and under `[physics]` a
//!   MuJoCo model of your own with its servo ↔ joint map (`examples/robots/go2.toml`) — in
//!   place of the built-in quadruped; `--physics` is implied when the file has `[physics]`.

use rtloop::physics::{parse_push, PhysicsConfig, PushSpec};
use rtloop::{RunSummary, Runtime};
use std::process::ExitCode;

/// What the command line asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    pub duration_s: f64,
    pub physics: bool,
    pub lockstep: bool,
    /// Ground pitch, degrees (nose up positive).
    pub tilt_deg: f64,
    pub push: Option<PushSpec>,
    pub gain: Option<f64>,
    pub damping: Option<f64>,
    /// A run file naming the robot (`--robot`).
    pub robot: Option<std::path::PathBuf>,
}

impl Args {
    /// No options given: `duration_s`, no physics, real time.
    pub fn new(duration_s: f64) -> Self {
        Args {
            duration_s,
            physics: false,
            lockstep: false,
            tilt_deg: 0.0,
            push: None,
            gain: None,
            damping: None,
            robot: None,
        }
    }

    /// The options in `args` (without the program's name) on top of `self`; `extra` names the
    /// options beyond `--duration`, `--physics` and `--lockstep` this example takes (`--tilt`,
    /// `--push`, `--gain`). Any mistake is one sentence.
    pub fn parse(mut self, args: impl IntoIterator<Item = String>, extra: &[&str]) -> Result<Self, String> {
        let mut args = args.into_iter();
        let mut options = String::from("--duration SECONDS, --physics, --lockstep");
        for e in extra {
            options.push_str(match *e {
                "--tilt" => ", --tilt DEGREES",
                "--push" => ", --push SECONDS:FX,FY,FZ[:DURATION]",
                "--damping" => ", --damping D",
                "--robot" => ", --robot FILE",
                _ => ", --gain G",
            });
        }
        let mut tilt = false;
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--physics" => self.physics = true,
                "--lockstep" => self.lockstep = true,
                "--duration" => {
                    let value = args.next().ok_or("--duration needs a number of seconds: try --duration 5")?;
                    self.duration_s = number(&value, 0.0, 3600.0).filter(|s| *s > 0.0).ok_or_else(|| {
                        format!("--duration {value:?} is not a number of seconds above 0 and at most 3600: try --duration 5")
                    })?;
                }
                "--tilt" if extra.contains(&"--tilt") => {
                    let value = args.next().ok_or("--tilt needs the ground's pitch in degrees: try --tilt 8")?;
                    self.tilt_deg = number(&value, -30.0, 30.0).ok_or_else(|| {
                        format!("--tilt {value:?} is not a slope from -30 to 30 degrees: try --tilt 8")
                    })?;
                    tilt = true;
                }
                "--push" if extra.contains(&"--push") => {
                    let value =
                        args.next().ok_or("--push needs SECONDS:FX,FY,FZ[:DURATION]: try --push 2:0,40,0:0.1")?;
                    self.push = Some(parse_push(&value).map_err(|e| e.to_string())?);
                }
                "--gain" if extra.contains(&"--gain") => {
                    let value = args.next().ok_or("--gain needs a number: try --gain 0 (no feedback)")?;
                    self.gain = Some(
                        number(&value, 0.0, 100.0)
                            .ok_or_else(|| format!("--gain {value:?} is not a number from 0 to 100: try --gain 0"))?,
                    );
                }
                "--damping" if extra.contains(&"--damping") => {
                    let value = args.next().ok_or("--damping needs a number: try --damping 0")?;
                    self.damping = Some(number(&value, 0.0, 100.0).ok_or_else(|| {
                        format!("--damping {value:?} is not a number from 0 to 100: try --damping 0")
                    })?);
                }
                "--robot" if extra.contains(&"--robot") => {
                    let value = args.next().ok_or("--robot needs a run file: try --robot examples/robots/go2.toml")?;
                    self.robot = Some(value.into());
                }
                _ => return Err(format!("unexpected argument {arg:?}: the options are {options}")),
            }
        }
        if tilt && !self.physics {
            return Err("--tilt slopes the ground under a body: add --physics".into());
        }
        Ok(self)
    }

    /// The runtime these options ask for: the built-in robot, or the run file's (`--robot`;
    /// its mistakes are one sentence).
    pub fn runtime(&self) -> Result<Runtime, String> {
        let mut runtime = match &self.robot {
            Some(file) => Runtime::from_toml_file(file).map_err(|e| e.to_string())?,
            None => Runtime::new(),
        };
        runtime = runtime.duration_s(self.duration_s).lockstep(self.lockstep);
        if self.physics && runtime.config().physics.is_none() {
            runtime = runtime.physics(PhysicsConfig { ground_pitch_deg: self.tilt_deg, ..PhysicsConfig::default() });
        }
        if let Some(push) = self.push {
            runtime = runtime.push(push);
        }
        Ok(runtime)
    }
}

/// `text` as a finite number from `lo` to `hi`.
fn number(text: &str, lo: f64, hi: f64) -> Option<f64> {
    text.parse().ok().filter(|v: &f64| v.is_finite() && (lo..=hi).contains(v))
}

/// The command line of this process, or the usage error (exit 2) to return.
pub fn args(name: &str, defaults: Args, extra: &[&str]) -> Result<Args, ExitCode> {
    defaults.parse(std::env::args().skip(1), extra).map_err(|e| usage_error(name, &e))
}

/// Say what is wrong in one line on stderr; exit 2.
pub fn usage_error(name: &str, message: &str) -> ExitCode {
    eprintln!("{name}: {message}");
    ExitCode::from(2)
}

/// Print a short summary, the body with physics, and the run's status; exit 0 when "ok", 1
/// when "degraded".
pub fn finish(summary: &RunSummary) -> ExitCode {
    println!(
        "run: {} cycles at {:.1} Hz on {} servos, {} IMU samples, {} missing replies, cycle p99 {:.0} µs",
        summary.cycles,
        summary.rate_hz,
        summary.servos,
        summary.imu_samples,
        summary.missing_replies,
        summary.cycle_us.p99
    );
    if let Some(body) = &summary.body {
        println!(
            "body: height {:.4} m, roll {:+.3}°, pitch {:+.3}° at the end ({} physics steps; {}; falls {})",
            body.height_m, body.roll_deg, body.pitch_deg, body.steps, body.model, body.falls
        );
    }
    for problem in &summary.problems {
        println!("problem: {problem}");
    }
    println!("status: {}", summary.status);
    ExitCode::from(summary.exit_code())
}
