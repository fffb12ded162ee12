//! `rtloop run`: drive the robot from a periodic loop on its own thread and report honest
//! figures — achieved rate, cycle time and wakeup latency percentiles, overruns, missing
//! replies — beside the cycle-time model's prediction.
//!
//! The loop sleeps to absolute deadlines (`clock_nanosleep` with `TIMER_ABSTIME`), so a late
//! wakeup never shifts later periods. An overrun (a cycle still running at the next
//! deadline) is counted; the period already begun runs late at once, and periods that have
//! passed entirely are skipped and counted rather than run back to back.
//!
//! Must never: allocate, lock or print on the loop thread. Progress reaches the main thread
//! through atomics; the histograms are handed back when the loop ends.

use crate::motion::Motion;
use crate::stats::{Latency, Percentiles};
use io::{Clock, MonotonicClock, Robot, RobotConfig, ServoCommand, ServoReply};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The robot (the built-in simulated quadruped by default).
    pub robot: crate::robot_spec::RobotSpec,
    /// Seconds of motion.
    pub duration_s: f64,
    /// Loop rate.
    pub rate_hz: f64,
    /// Print progress on stderr.
    pub progress: bool,
}

/// Live counters shared with the main thread (atomics only: no lock on the loop thread).
#[derive(Default)]
pub struct Progress {
    /// Cycles completed.
    pub cycles: AtomicU64,
    /// Overruns so far.
    pub overruns: AtomicU64,
    /// Missing replies so far.
    pub missing: AtomicU64,
    /// Duration of the last cycle.
    pub last_cycle_ns: AtomicU64,
    /// Longest cycle so far.
    pub max_cycle_ns: AtomicU64,
    /// The loop has finished.
    pub done: AtomicBool,
}

/// The final state of one servo as the host last saw it.
#[derive(Debug, Clone, Serialize)]
pub struct FinalServo {
    /// Bus number (1-based).
    pub bus: usize,
    /// Mode register.
    pub mode: Option<u8>,
    /// Position, rev.
    pub position: Option<f64>,
    /// Velocity, rev/s.
    pub velocity: Option<f64>,
    /// Torque, N·m.
    pub torque: Option<f64>,
    /// Fault code.
    pub fault: Option<u8>,
    /// Board temperature, °C.
    pub temperature: Option<f64>,
}

/// Everything `rtloop run` reports; `--json` prints it as one line.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// Cycles run.
    pub cycles: u64,
    /// Achieved loop rate.
    pub rate_hz: f64,
    /// Requested loop rate.
    pub target_rate_hz: f64,
    /// Time between the first and the last wakeup, s (covers `cycles − 1` periods).
    pub elapsed_s: f64,
    /// Servos driven.
    pub servos: usize,
    /// Buses driven.
    pub buses: usize,
    /// Cycles that ran past the next deadline.
    pub overruns: u64,
    /// Periods skipped because of overruns.
    pub skipped_periods: u64,
    /// Servo replies that did not arrive in their cycle.
    pub missing_replies: u64,
    /// Cycles that hit their deadline with replies missing.
    pub timeouts: u64,
    /// Frames that failed to send, plus bus errors.
    pub transport_errors: u64,
    /// Cycles with an IMU sample.
    pub imu_samples: u64,
    /// Cycle duration percentiles, µs.
    pub cycle_us: Percentiles,
    /// Wakeup latency percentiles (actual minus scheduled wakeup), µs.
    pub wakeup_us: Percentiles,
    /// The cycle-time model's prediction for this robot, µs.
    pub model_cycle_us: f64,
    /// Final state per servo id.
    #[serde(rename = "final")]
    pub final_state: BTreeMap<u8, FinalServo>,
}

fn opt(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

struct LoopResult {
    cycles: u64,
    overruns: u64,
    skipped: u64,
    missing: u64,
    timeouts: u64,
    transport_errors: u64,
    imu_samples: u64,
    elapsed_ns: u64,
    cycle: Latency,
    wakeup: Latency,
    replies: Vec<ServoReply>,
}

/// Reduce timer slack to 1 ns for this thread so absolute sleeps are not rounded up by
/// the default 50 µs slack of normal tasks. Unprivileged; failure only costs precision.
fn minimise_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

fn run_loop(mut robot: Robot<MonotonicClock>, opts: &RunOptions, progress: &Progress) -> LoopResult {
    minimise_timer_slack();
    let n = robot.servos().len();
    let clock = *robot.cycler().clock();
    let period_ns = (1e9 / opts.rate_hz).round().max(1.0) as u64;
    let total_periods = (opts.duration_s * opts.rate_hz).round().max(1.0) as u64;

    let mut commands = vec![ServoCommand::Query; n];
    let mut replies = vec![ServoReply::default(); n];
    let mut imu = sim::ImuSample::default();
    let mut motion = Motion::default();
    let mut cycle = Latency::new();
    let mut wakeup = Latency::new();
    let (mut overruns, mut skipped, mut missing, mut timeouts, mut terr, mut imu_samples) = (0, 0, 0, 0, 0, 0);

    // Learn where the joints are before moving them.
    robot.cycle(&commands, &mut replies, &mut imu);
    motion.set_start(replies.iter().map(|r| r.state.position));

    let start = clock.now_ns() + period_ns;
    let end = start + total_periods * period_ns;
    let mut next = start;
    let mut cycles = 0u64;
    let (mut first_woke, mut last_woke) = (0u64, 0u64);
    // --- real-time section: no allocation, no locks, no I/O below this line ---
    while next < end {
        io::clock::sleep_until_monotonic_ns(next);
        let woke = clock.now_ns();
        wakeup.record(woke.saturating_sub(next));
        if cycles == 0 {
            first_woke = woke;
        }
        last_woke = woke;
        let t = (next - start) as f64 * 1e-9;
        motion.fill(t, &mut commands);
        let report = robot.cycle(&commands, &mut replies, &mut imu);
        let dt = report.stats.duration_ns();
        cycle.record(dt);
        cycles += 1;
        missing += report.missing as u64;
        timeouts += report.stats.timed_out as u64;
        terr += report.stats.send_errors as u64 + report.stats.failed_buses.count_ones() as u64;
        imu_samples += report.stats.imu_present as u64;
        progress.cycles.store(cycles, Ordering::Relaxed);
        progress.missing.store(missing, Ordering::Relaxed);
        progress.last_cycle_ns.store(dt, Ordering::Relaxed);
        progress.max_cycle_ns.fetch_max(dt, Ordering::Relaxed);

        next += period_ns;
        let now = clock.now_ns();
        if now > next {
            // Overrun: the next period has already begun. Run it at once (its lateness is
            // recorded as wakeup latency) but skip every period that has passed entirely,
            // so deadlines stay on the grid and cycles never bunch up.
            overruns += 1;
            let missed = (now - next) / period_ns;
            skipped += missed;
            next += missed * period_ns;
            progress.overruns.store(overruns, Ordering::Relaxed);
        }
    }
    // --- end of real-time section ---
    // Measured, not assumed: the span between the first and the last actual wakeup covers
    // cycles − 1 periods.
    let elapsed_ns = last_woke.saturating_sub(first_woke);
    LoopResult {
        cycles,
        overruns,
        skipped,
        missing,
        timeouts,
        transport_errors: terr,
        imu_samples,
        elapsed_ns,
        cycle,
        wakeup,
        replies,
    }
}

/// Run the built-in simulated quadruped and return the summary.
pub fn run(opts: &RunOptions) -> Result<RunSummary, String> {
    if !(opts.rate_hz.is_finite() && opts.rate_hz > 0.0 && opts.rate_hz <= 100_000.0) {
        return Err(format!("--rate {} is out of range: give a rate in Hz between 0 and 100000", opts.rate_hz));
    }
    if !(opts.duration_s.is_finite() && opts.duration_s > 0.0 && opts.duration_s <= 1.0e6) {
        return Err(format!("--duration {} is out of range: give a number of seconds above 0", opts.duration_s));
    }
    let mut config = RobotConfig::default();
    // Never let one cycle run into the next period.
    config.cycle.timeout_ns = ((0.9e9 / opts.rate_hz) as u64).max(50_000);
    let robot = opts.robot.build(MonotonicClock::default(), config, Default::default())?;
    let servos: Vec<_> = robot.servos().to_vec();
    let buses = robot.cycler().bus_count();

    let progress = Arc::new(Progress::default());
    let thread_progress = Arc::clone(&progress);
    let thread_opts = opts.clone();
    let handle = std::thread::Builder::new()
        .name("rtloop-cycle".into())
        .spawn(move || {
            let r = run_loop(robot, &thread_opts, &thread_progress);
            thread_progress.done.store(true, Ordering::Release);
            r
        })
        .map_err(|e| format!("cannot start the cycle thread: {e}"))?;

    let total = (opts.duration_s * opts.rate_hz).round() as u64;
    if opts.progress {
        print_progress(&progress, opts, total);
    }
    let result = handle.join().map_err(|_| "the cycle thread panicked".to_string())?;

    let mut final_state = BTreeMap::new();
    for (spec, reply) in servos.iter().zip(&result.replies) {
        let s = &reply.state;
        final_state.insert(
            spec.id,
            FinalServo {
                bus: spec.bus + 1,
                mode: s.mode,
                position: opt(s.position),
                velocity: opt(s.velocity),
                torque: opt(s.torque),
                fault: s.fault,
                temperature: opt(s.temperature),
            },
        );
    }
    let elapsed_s = result.elapsed_ns as f64 * 1e-9;
    Ok(RunSummary {
        cycles: result.cycles,
        rate_hz: if elapsed_s > 0.0 { result.cycles.saturating_sub(1) as f64 / elapsed_s } else { 0.0 },
        target_rate_hz: opts.rate_hz,
        elapsed_s,
        servos: servos.len(),
        buses,
        overruns: result.overruns,
        skipped_periods: result.skipped,
        missing_replies: result.missing,
        timeouts: result.timeouts,
        transport_errors: result.transport_errors,
        imu_samples: result.imu_samples,
        cycle_us: result.cycle.percentiles_us(),
        wakeup_us: result.wakeup.percentiles_us(),
        model_cycle_us: sim::model::predict(&crate::budget::model_for(&opts.robot)).total_ns as f64 / 1000.0,
        final_state,
    })
}

fn print_progress(progress: &Progress, opts: &RunOptions, total: u64) {
    let tty = std::io::stderr().is_terminal();
    let tick = if tty { Duration::from_millis(100) } else { Duration::from_secs(1) };
    let mut err = std::io::stderr();
    while !progress.done.load(Ordering::Acquire) {
        std::thread::sleep(tick);
        let cycles = progress.cycles.load(Ordering::Relaxed);
        let t = cycles as f64 / opts.rate_hz;
        let line = format!(
            "  {:>6.1}/{:.1} s  {:>8}/{} cycles  last {:>5.0} µs  max {:>5.0} µs  overruns {}  missing {}",
            t,
            opts.duration_s,
            cycles,
            total,
            progress.last_cycle_ns.load(Ordering::Relaxed) as f64 / 1000.0,
            progress.max_cycle_ns.load(Ordering::Relaxed) as f64 / 1000.0,
            progress.overruns.load(Ordering::Relaxed),
            progress.missing.load(Ordering::Relaxed),
        );
        let _ = if tty { write!(err, "\r{line}") } else { writeln!(err, "{line}") };
        let _ = err.flush();
    }
    if tty {
        let _ = writeln!(err);
    }
}

/// The human-readable summary.
pub fn print_summary(s: &RunSummary, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "rtloop run: {} servos on {} CAN-FD buses", s.servos, s.buses)?;
    writeln!(
        out,
        "  cycles {}  in {:.3} s  achieved {:.2} Hz (target {:.2})",
        s.cycles, s.elapsed_s, s.rate_hz, s.target_rate_hz
    )?;
    writeln!(
        out,
        "  overruns {} (skipped periods {})  missing replies {}  timeouts {}  transport errors {}",
        s.overruns, s.skipped_periods, s.missing_replies, s.timeouts, s.transport_errors
    )?;
    let p = |x: &Percentiles| format!("p50 {:7.1}  p99 {:7.1}  max {:7.1} µs", x.p50, x.p99, x.max);
    writeln!(out, "  cycle time   {}   (model predicts {:.1} µs)", p(&s.cycle_us), s.model_cycle_us)?;
    writeln!(out, "  wakeup       {}", p(&s.wakeup_us))?;
    writeln!(out, "  final state:")?;
    writeln!(out, "    {:>3} {:>3} {:>4} {:>9} {:>9} {:>5}", "id", "bus", "mode", "pos rev", "vel rev/s", "fault")?;
    for (id, f) in &s.final_state {
        let num = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.4}"));
        writeln!(
            out,
            "    {:>3} {:>3} {:>4} {:>9} {:>9} {:>5}",
            id,
            f.bus,
            f.mode.map_or("-".into(), |m| m.to_string()),
            num(f.position),
            num(f.velocity),
            f.fault.map_or("-".into(), |m| m.to_string())
        )?;
    }
    Ok(())
}
