//! # custom_telemetry — log your controller's own figures beside every cycle, then read them back
//!
//! What it shows: a controller with its own telemetry type — a plain `Copy` struct with a
//! fixed array of per-joint targets, an estimator value and the gains — recorded every cycle
//! with [`Output::record`] as the log record `stand_targets`, next to the runtime's `cycle`
//! record. Recording never allocates and never makes the real-time thread wait: a value the
//! log writer cannot take in time is dropped and counted, and the run says so (a lockstep
//! run, which has no deadline, waits for the writer instead). After the
//! run, the example opens the log with the `tlog` reader and counts its items.
//!
//! Run it: `cargo run --release --example custom_telemetry -- --log stand.tlog`
//! (`--log` defaults to a new `custom_telemetry-<unix time>.tlog` here; the file must not
//! exist; `--duration SECONDS`, 3 by default).
//!
//! What to look for: as many `stand_targets` items as cycles (the shutdown cycles after
//! the last one are in `cycle` only: the controller is not called for them). Then:
//!
//! ```text
//! cargo run --release -p rtloop-cli -- log info stand.tlog
//! cargo run --release -p rtloop-cli -- log export stand.tlog --csv targets.csv --record stand_targets
//! ```

use rtloop::motion::Motion;
use rtloop::{Controller, Failure, Flow, Output, RunSummary, Runtime, ServoCommand, State};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

/// Joints recorded (the default robot's twelve).
pub const JOINTS: usize = 12;

/// What the controller records each cycle: `Copy`, fixed size, so recording never allocates.
#[derive(Serialize, Default, Clone, Copy)]
pub struct StandTargets {
    /// Commanded position per joint, rev (NaN: only queried this cycle).
    pub target_rev: [f64; JOINTS],
    /// Low-pass filtered RMS of target − measured over the joints, rev.
    pub tracking_error_rev: f64,
    pub kp_scale: f64,
    pub kd_scale: f64,
}

/// The demo motion (stand up, then sway), recording its targets and how well they are met.
pub struct Recorded {
    pub motion: Motion,
    tracking_error: f64,
}

impl Default for Recorded {
    fn default() -> Self {
        let mut motion = Motion::default(); // stand up, then sway
        motion.watchdog_timeout = Some(0.1);
        Recorded { motion, tracking_error: 0.0 }
    }
}

impl Controller for Recorded {
    type Telemetry = StandTargets;
    const TELEMETRY_RECORD: &'static str = "stand_targets";

    fn start(&mut self, state: &State<'_>) -> Result<(), Failure> {
        self.motion.start(state)
    }

    fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, StandTargets>) -> Result<Flow, Failure> {
        // `Motion` records nothing (its telemetry is `()`): run it on the same commands.
        let mut nothing = None;
        self.motion.cycle(state, &mut Output::new(out.commands(), &mut nothing))?;
        let mut t =
            StandTargets { kp_scale: self.motion.kp_scale, kd_scale: self.motion.kd_scale, ..Default::default() };
        let (mut squares, mut joints) = (0.0, 0);
        for (i, (command, servo)) in out.commands().iter().zip(state.servos).take(JOINTS).enumerate() {
            t.target_rev[i] = match command {
                ServoCommand::Position(p) => p.position.unwrap_or(f64::NAN),
                _ => f64::NAN,
            };
            let error = t.target_rev[i] - servo.state.position;
            if error.is_finite() {
                (squares, joints) = (squares + error * error, joints + 1);
            }
        }
        if joints > 0 {
            let rms = (squares / joints as f64).sqrt();
            self.tracking_error += 0.02 * (rms - self.tracking_error); // ~50-cycle time constant
        }
        t.tracking_error_rev = self.tracking_error;
        out.record(t);
        Ok(Flow::Continue)
    }
}

fn main() -> ExitCode {
    let (duration_s, log) = match args() {
        Ok(a) => a,
        Err(e) => return usage_error(&e),
    };
    if log.exists() {
        return usage_error(&format!("{} already exists: remove it or pass --log NEW_FILE", log.display()));
    }
    let summary = match Runtime::new().duration_s(duration_s).log(&log).run(Recorded::default()) {
        Ok(summary) => summary,
        Err(e) => return usage_error(&e.to_string()),
    };
    // Read the log back: every item of our record, decoded with the schema it carries.
    let reader = match rtloop_tlog::reader::FileReader::open(&log) {
        Ok(r) => r,
        Err(e) => return usage_error(&format!("cannot read back the log {}: {e}", log.display())),
    };
    let filter = |name: &str| rtloop_tlog::reader::ItemFilter { record: Some(name.into()), ..Default::default() };
    let items: Vec<_> = reader.items(filter(Recorded::TELEMETRY_RECORD)).filter_map(Result::ok).collect();
    let cycle_items = reader.items(filter("cycle")).filter_map(Result::ok).count();
    let last = items.last().and_then(|it| reader.decode_item(it).ok()).map(|v| v.to_json());
    println!(
        "log {}: {} {} items for {} cycles ({} `cycle` items: {} shutdown cycles record no telemetry)",
        log.display(),
        items.len(),
        Recorded::TELEMETRY_RECORD,
        summary.cycles,
        cycle_items,
        summary.shutdown_cycles
    );
    if let Some(last) = last {
        let (error, knee) = (last["tracking_error_rev"].as_f64(), last["target_rev"][2].as_f64());
        let (error, knee) = (error.unwrap_or(f64::NAN), knee.unwrap_or(f64::NAN));
        println!("last item: tracking error {error:.4} rev, knee 1 target {knee:.4} rev");
    }
    let all_there = items.len() as u64 == summary.cycles;
    if !all_there {
        println!("problem: the log has {} telemetry items for {} cycles", items.len(), summary.cycles);
    }
    finish(&summary, all_there)
}

/// `--duration SECONDS` (finite, above 0, at most 3600; 3 by default) and `--log PATH`.
fn args() -> Result<(f64, PathBuf), String> {
    let mut args = std::env::args().skip(1);
    let unix_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (mut duration, mut log) = (3.0, PathBuf::from(format!("custom_telemetry-{unix_s}.tlog")));
    while let Some(arg) = args.next() {
        let value = match arg.as_str() {
            "--duration" => args.next().ok_or("--duration needs a number of seconds: try --duration 5")?,
            "--log" => args.next().ok_or("--log needs a file name that does not exist yet: try --log run.tlog")?,
            _ => return Err(format!("unexpected argument {arg:?}: the options are --duration SECONDS and --log PATH")),
        };
        if arg == "--log" {
            log = PathBuf::from(value);
            continue;
        }
        duration = value.parse().ok().filter(|s: &f64| s.is_finite() && *s > 0.0 && *s <= 3600.0).ok_or_else(|| {
            format!("--duration {value:?} is not a number of seconds above 0 and at most 3600: try --duration 5")
        })?;
    }
    Ok((duration, log))
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("custom_telemetry: {message}");
    ExitCode::from(2)
}

/// Print a short summary and the run's status; exit 0 when "ok" (and the log is complete).
fn finish(summary: &RunSummary, log_complete: bool) -> ExitCode {
    println!("run: {} cycles at {:.1} Hz on {} servos", summary.cycles, summary.rate_hz, summary.servos);
    for problem in &summary.problems {
        println!("problem: {problem}");
    }
    println!("status: {}", summary.status);
    ExitCode::from(if log_complete { summary.exit_code() } else { 1 })
}
