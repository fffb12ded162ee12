//! The cycle experiment: how long one full rtloop robot cycle takes on this machine.
//!
//! A measuring thread with the requested real-time settings builds an [`rtloop_io::Robot`] over the
//! chosen transport (the built-in simulated quadruped for `sim`, or one bus at an address
//! such as `fdcanusb:PATH` or `udp:HOST:PORT`) and runs query-only cycles at the requested
//! rate on a [`rtloop_rt::periodic::PeriodicLoop`] (spinning the last `--busy-wait-us` before each
//! deadline); each sample is the duration of one cycle (send every query, collect every reply
//! or time out). Query commands only, so no servo moves — and the report says so: the label
//! ends in "query-only" and the conditions carry `commands: query-only`, because a cycle that
//! also sends position commands has longer frames and takes longer.
//!
//! A cycle whose replies did not all come times the wait for them, not a cycle: an
//! experiment in which any reply was missing is a failed measurement ([`Outcome::failure`]).
//! Its figures still print (they show what the waits cost), under a `FAILED:` line, with the
//! counts (`expected_replies`, `missing_replies`, `timed_out_cycles`, `bus_failures`) in the
//! JSON conditions, and `rtloop lab cycle` exits 1.
//!
//! What it must never do: command motion or torque, allocate or print between cycles, report
//! a cycle experiment with missing replies as a result, or let a figure pass for a full
//! command cycle.

use crate::options::{apply_rt, CommonOptions};
use crate::report::{measure_on_thread, Measured, Outcome, Run};
use crate::wording::count;
use rtloop_io::{MonotonicClock, Robot, RobotConfig, ServoCommand, ServoReply, ServoSpec};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::check::CheckError;
use crate::Error;

/// Servo ids of the built-in simulated quadruped.
const QUADRUPED_IDS: std::ops::RangeInclusive<u8> = 1..=12;

/// What every cycle sends: a query to each servo, no command.
pub const COMMANDS: &str = "query-only";

/// Parse a servo id list such as "1-12" or "1,2,5-7" (ids 1..=127), as given to `--servos`.
pub fn parse_servo_ids(text: &str) -> Result<Vec<u8>, CheckError> {
    let mut ids = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let parse = |s: &str| match s.parse::<u8>() {
            Ok(id) if (1..=127).contains(&id) => Ok(id),
            _ => Err(CheckError::ServoId { text: text.to_string(), id: s.to_string() }),
        };
        let (lo, hi) = (parse(lo)?, parse(hi)?);
        if lo > hi {
            return Err(CheckError::ServoRangeBackwards { text: text.to_string(), range: part.to_string() });
        }
        ids.extend(lo..=hi);
    }
    if ids.is_empty() {
        return Err(CheckError::NoServos { text: text.to_string() });
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// Build the robot: the simulated quadruped when `transport` is "sim" with ids 1-12, a single
/// bus with exactly `ids` otherwise.
fn build_robot(transport: &str, ids: &[u8]) -> Result<Robot<MonotonicClock>, Error> {
    let config = RobotConfig::default();
    if transport == "sim" && ids.iter().copied().eq(QUADRUPED_IDS) {
        // The errors' Display is the one sentence for the user (never their Debug form).
        return rtloop_simrobot::quadruped(MonotonicClock::default(), config)
            .map(|(robot, _)| robot)
            .map_err(Error::Quadruped);
    }
    let uri = rtloop_io::uri::parse(transport).map_err(CheckError::Transport)?;
    // OpenError's Display already says "cannot open URI: what is wrong and what to do".
    let bus = rtloop_simrobot::open_bus(&uri, ids, Default::default(), Default::default())?;
    let servos = ids.iter().map(|&id| ServoSpec { bus: 0, id }).collect();
    Robot::new(vec![bus], servos, None, MonotonicClock::default(), config)
        .map_err(|source| Error::Robot { transport: transport.to_string(), source })
}

/// The cycle period for `rate_hz` (already checked to be in [`crate::check::RATE_HZ`]), ns.
pub fn period_ns(rate_hz: f64) -> u64 {
    (1e9 / rate_hz).round().max(1.0) as u64
}

/// Run `common.samples` query cycles over `transport` to `servos` at `rate_hz`.
pub fn cycle(common: &CommonOptions, transport: &str, servos: &str, rate_hz: f64) -> Result<Outcome, Error> {
    crate::check::samples("--samples", common.samples)?;
    crate::check::rate_hz("--rate", rate_hz)?;
    let period_ns = period_ns(rate_hz);
    let busy_wait_us = crate::check::busy_wait_us(common.busy_wait_us, period_ns / 1000)?;
    let ids = parse_servo_ids(servos)?;
    rtloop_io::uri::parse(transport).map_err(CheckError::Transport)?;
    let (settings, transport_owned, ids_owned) = (common.clone(), transport.to_string(), ids.clone());
    let tally = Arc::new(Tally::default());
    let tally_in_thread = Arc::clone(&tally);
    let (samples_ns, warnings) = measure_on_thread(common, "cycle", move |done| {
        measure(&settings, &transport_owned, &ids_owned, period_ns, done, &tally_in_thread)
    })?;
    let busy = if busy_wait_us > 0 { format!(", busy-wait {busy_wait_us} us") } else { String::new() };
    let servos = count(ids.len() as u64, "servo", "servos");
    let label = format!("cycle {transport}, {servos}, {rate_hz} Hz{busy}, {COMMANDS}");
    let cycles = samples_ns.len() as u64;
    let expected = cycles * ids.len() as u64;
    let [missing, timed_out, bus_failures] =
        [&tally.missing, &tally.timed_out, &tally.bus_failures].map(|n| n.load(Ordering::Relaxed));
    let failure = (missing > 0).then(|| {
        let what = if missing == expected {
            format!("none of the {} came", count(expected, "expected reply", "expected replies"))
        } else {
            format!("{missing} of {expected} expected replies did not come")
        };
        let who = match ids.len() {
            1 => format!("servo {} answers", id_list(&ids)),
            _ => format!("servos {} answer", id_list(&ids)),
        };
        format!(
            "{what} ({}: {} timed out, {}), so the figures time waits for replies, not complete cycles; check that \
             {who} on {transport}",
            count(cycles, "cycle", "cycles"),
            timed_out,
            count(bus_failures, "bus failure", "bus failures"),
        )
    });
    Ok(Outcome {
        experiment: "cycle".into(),
        runs: vec![Run { label, size: None, method: None, samples_ns }],
        warnings,
        setup: vec![("commands".into(), COMMANDS.into())],
        counts: vec![
            ("expected_replies".into(), expected),
            ("missing_replies".into(), missing),
            ("timed_out_cycles".into(), timed_out),
            ("bus_failures".into(), bus_failures),
        ],
        failure,
    })
}

/// The ids as the user would write them: "1", "1,2,5" or "1-12".
fn id_list(ids: &[u8]) -> String {
    match (ids.first(), ids.last()) {
        (Some(first), Some(last)) if ids.len() > 2 && usize::from(last - first) + 1 == ids.len() => {
            format!("{first}-{last}")
        }
        _ => ids.iter().map(u8::to_string).collect::<Vec<_>>().join(","),
    }
}

/// What the measuring thread counted, stored once after its last cycle.
#[derive(Default)]
struct Tally {
    /// Replies that did not come (or came late), over all cycles.
    missing: AtomicU64,
    /// Cycles whose deadline passed before every reply was in.
    timed_out: AtomicU64,
    /// Bus failures: one per bus per cycle in which that bus failed.
    bus_failures: AtomicU64,
}

fn measure(
    common: &CommonOptions,
    transport: &str,
    ids: &[u8],
    period_ns: u64,
    done: &AtomicUsize,
    tally: &Tally,
) -> Measured {
    let mut warnings = apply_rt(common)?;
    let mut robot = build_robot(transport, ids)?;
    let n = robot.servos().len();
    let commands = vec![ServoCommand::Query; n];
    let mut replies = vec![ServoReply::default(); n];
    let mut imu = Default::default();
    let mut samples_ns = Vec::with_capacity(common.samples);
    let (mut missing, mut timed_out, mut failed_buses) = (0u64, 0u64, 0u64);
    let options = rtloop_rt::periodic::PeriodicOptions {
        busy_wait_ns: common.busy_wait_us * 1000,
        overrun: rtloop_rt::periodic::OverrunPolicy::Skip,
        start_ns: None,
    };
    let mut periodic = rtloop_rt::periodic::PeriodicLoop::new(period_ns, options);
    for i in 0..common.samples {
        periodic.wait_next();
        let report = robot.cycle(&commands, &mut replies, &mut imu);
        periodic.end_cycle();
        samples_ns.push(report.stats.duration_ns());
        missing += report.missing as u64;
        timed_out += report.stats.timed_out as u64;
        // A bitmask of the buses that failed: each one counts.
        failed_buses += u64::from(report.stats.failed_buses.count_ones());
        done.store(i + 1, Ordering::Relaxed);
    }
    tally.missing.store(missing, Ordering::Relaxed);
    tally.timed_out.store(timed_out, Ordering::Relaxed);
    tally.bus_failures.store(failed_buses, Ordering::Relaxed);
    let stats = periodic.stats();
    if missing > 0 || timed_out > 0 || failed_buses > 0 {
        warnings.push(format!(
            "{}, {}, {} over {}",
            count(missing, "missing reply", "missing replies"),
            count(timed_out, "timed-out cycle", "timed-out cycles"),
            count(failed_buses, "bus failure", "bus failures"),
            count(common.samples as u64, "cycle", "cycles"),
        ));
    }
    if stats.overruns > 0 {
        warnings.push(format!(
            "{} overran the {} us period ({} skipped)",
            count(stats.overruns, "cycle", "cycles"),
            period_ns / 1000,
            count(stats.skipped_periods, "period", "periods"),
        ));
    }
    Ok((samples_ns, warnings))
}
