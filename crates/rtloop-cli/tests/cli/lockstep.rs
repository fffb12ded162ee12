//! Lockstep runs: simulated time, one period per cycle, as fast as the control law allows.
//! The same inputs give the same log, byte for byte, with every cycle in it (the loop waits
//! for a log writer that falls behind rather than drop); real buses are refused.

use crate::support;

use rtloop::{Controller, Failure, Flow, Output, Runtime, State};
use serde_json::Value;
use support::{rtloop, stderr, stdout, Scratch};

fn summary(o: &std::process::Output) -> Value {
    serde_json::from_str(stdout(o).lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

#[test]
fn the_same_lockstep_run_twice_writes_the_same_log_byte_for_byte() {
    let dir = Scratch::new("lockstep");
    let (a, b) = (dir.path("a.tlog"), dir.path("b.tlog"));
    for log in [&a, &b] {
        let o = rtloop(&["run", "--lockstep", "--duration", "2", "--quiet", "--json", "--log", log.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let j = summary(&o);
        assert_eq!(j["lockstep"], true, "{j}");
        assert_eq!(j["cycles"], 2000, "every simulated period runs: {j}");
        assert_eq!(j["overruns"], 0, "{j}");
        assert_eq!(j["injected"]["seed"], 0, "lockstep's default seed is fixed: {j}");
    }
    let (x, y) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert!(x.len() > 100_000, "{} bytes", x.len());
    assert!(x == y, "the two lockstep logs differ ({} vs {} bytes)", x.len(), y.len());
}

#[test]
fn lockstep_with_fault_injection_is_repeatable_too() {
    let dir = Scratch::new("lockstep-faults");
    let mut logs = Vec::new();
    for name in ["a.tlog", "b.tlog"] {
        let log = dir.path(name);
        let o = rtloop(&[
            "run",
            "--lockstep",
            "--duration",
            "1",
            "--quiet",
            "--json",
            "--drop-rate",
            "0.05",
            "--seed",
            "7",
            "--log",
            log.to_str().unwrap(),
        ]);
        let j = summary(&o);
        assert!(j["injected"]["frames_dropped"].as_u64().unwrap() > 0, "{j}");
        logs.push((std::fs::read(&log).unwrap(), j["injected"]["frames_dropped"].clone()));
    }
    assert_eq!(logs[0].1, logs[1].1, "same seed, same drops");
    assert!(logs[0].0 == logs[1].0, "same seed, same log");
}

/// Every record's name and item count, as `rtloop log info --json` counts them.
fn record_items(log: &std::path::Path) -> Vec<(String, u64)> {
    let o = rtloop(&["log", "info", "--json", log.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let info: Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    let records = info["records"].as_array().unwrap_or_else(|| panic!("no records: {info}"));
    records.iter().map(|r| (r["name"].as_str().unwrap().to_string(), r["items"].as_u64().unwrap())).collect()
}

/// The counts the writer put in the log itself (`rtloop_log_stats`).
fn stats_in_log(log: &std::path::Path) -> Value {
    let o = rtloop(&["log", "dump", log.to_str().unwrap(), "--record", "rtloop_log_stats"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "one stats record: {}", stdout(&o));
    serde_json::from_str::<Value>(lines[0]).unwrap()["value"].clone()
}

#[test]
fn a_lockstep_log_has_every_cycle_however_fast_the_loop_runs() {
    // Lockstep runs as fast as the host computes: the loop can outrun the log writer. It has
    // no deadline to keep, so it waits for room in the ring rather than drop a cycle. Two
    // runs at once (on a small machine, the loops and writers compete for the cores), and
    // the same seed: the same log, byte for byte.
    let dir = Scratch::new("lockstep-every-cycle");
    let (a, b) = (dir.path("a.tlog"), dir.path("b.tlog"));
    let runs: Vec<_> = [&a, &b]
        .into_iter()
        .map(|log| {
            let log = log.to_str().unwrap().to_string();
            std::thread::spawn(move || {
                rtloop(&["run", "--lockstep", "--duration", "20", "--seed", "3", "--quiet", "--json", "--log", &log])
            })
        })
        .collect();
    for (o, log) in runs.into_iter().map(|h| h.join().unwrap()).zip([&a, &b]) {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let j = summary(&o);
        assert_eq!(j["cycles"], 20_000, "{j}");
        let cycles = j["cycles"].as_u64().unwrap() + j["shutdown_cycles"].as_u64().unwrap();
        assert_eq!(j["log"]["dropped"], 0, "{j}");
        assert_eq!(j["status"], "ok", "{j}");
        let items = record_items(log);
        let count = |name: &str| items.iter().find(|(n, _)| n == name).map_or(0, |(_, n)| *n);
        assert_eq!(count("cycle"), cycles, "one cycle record per cycle, shutdown cycles included: {items:?} {j}");
        let stats = stats_in_log(log);
        assert_eq!(stats["dropped"], 0, "{stats}");
        assert_eq!(stats["written"], j["log"]["written"], "{stats} {j}");
        // Every message handed over is in the file (the stats record itself is not one).
        let messages: u64 = items.iter().filter(|(n, _)| n != "rtloop_log_stats").map(|(_, n)| n).sum();
        assert_eq!(stats["written"].as_u64().unwrap(), messages, "{stats} {items:?}");
    }
    let (x, y) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert!(x == y, "the two lockstep logs differ ({} vs {} bytes)", x.len(), y.len());
}

/// A controller whose telemetry is far more work to write (32 KB of floats to encode and
/// compress, every cycle) than to record: the log writer cannot keep up with a lockstep loop.
struct HeavyTelemetry(rtloop::motion::Motion);

#[derive(serde::Serialize, Default, Clone, Copy)]
struct Heavy {
    blocks: [[[f64; 32]; 32]; 4],
}

impl Controller for HeavyTelemetry {
    type Telemetry = Heavy;
    const TELEMETRY_RECORD: &'static str = "heavy";

    fn start(&mut self, state: &State<'_>) -> Result<(), Failure> {
        self.0.start(state)
    }

    fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, Heavy>) -> Result<Flow, Failure> {
        let mut nothing = None;
        self.0.cycle(state, &mut Output::new(out.commands(), &mut nothing))?;
        let mut heavy = Heavy::default();
        let mut x = state.cycle.wrapping_add(1);
        for v in heavy.blocks.iter_mut().flatten().flatten() {
            // Cheap to make, hard to compress.
            x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
            *v = (x >> 11) as f64;
        }
        out.record(heavy);
        Ok(Flow::Continue)
    }
}

#[test]
fn a_lockstep_log_waits_for_a_writer_that_falls_behind() {
    // A wait-free hand-off drops thousands of these messages (the ring holds 512); in
    // lockstep the loop waits for the writer instead, so the log is complete, and the same
    // as the next run's, byte for byte.
    let dir = Scratch::new("lockstep-heavy");
    let mut logs = Vec::new();
    for name in ["a.tlog", "b.tlog"] {
        let log = dir.path(name);
        let mut runtime = Runtime::new().duration_s(5.0).log(&log);
        runtime.config_mut().sim.lockstep = true;
        runtime.config_mut().sim.wire_time = false;
        let summary = runtime.run(HeavyTelemetry(rtloop::motion::Motion::default())).expect("the run starts");
        let log_summary = summary.log.as_ref().expect("a log");
        assert_eq!((summary.cycles, log_summary.dropped), (5_000, 0), "{log_summary:?}");
        assert_eq!(summary.status, rtloop::summary::Status::Ok, "{:?}", summary.problems);
        let items = record_items(&log);
        let count = |name: &str| items.iter().find(|(n, _)| n == name).map_or(0, |(_, n)| *n);
        assert_eq!(count("cycle"), summary.cycles + summary.shutdown_cycles, "{items:?}");
        assert_eq!(count("heavy"), summary.cycles, "{items:?}");
        assert_eq!(stats_in_log(&log)["dropped"], 0);
        logs.push(std::fs::read(&log).unwrap());
    }
    assert!(logs[0] == logs[1], "the two lockstep logs differ ({} vs {} bytes)", logs[0].len(), logs[1].len());
}

#[test]
fn lockstep_on_a_real_bus_is_refused_in_one_sentence() {
    let o = rtloop(&["run", "--lockstep", "--bus", "1=udp:127.0.0.1:9", "--ids", "1=1", "--duration", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("lockstep runs only on simulated buses"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
}

/// The quadruped through the simulated pi3hat (connectors JC1-JC4 of one board, attitude
/// from its IMU), in simulated time: every cycle of a 1 kHz run completes with every reply,
/// and the cycle's simulated time is the board's SPI time plus the wires.
#[test]
fn the_quadruped_runs_through_the_simulated_pi3hat_at_1khz_with_every_reply() {
    let mut args = vec!["run", "--lockstep", "--duration", "1", "--quiet", "--json"];
    let flags: Vec<String> = (1..=4)
        .flat_map(|b| {
            [
                "--bus".to_string(),
                format!("{b}=pi3hat:sim"),
                "--ids".to_string(),
                format!("{b}={}-{}", 3 * b - 2, 3 * b),
            ]
        })
        .collect();
    args.extend(flags.iter().map(String::as_str));
    let o = rtloop(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j = summary(&o);
    assert_eq!(j["cycles"], 1000, "{j}");
    assert_eq!(j["missing_replies"], 0, "{j}");
    assert_eq!(j["overruns"], 0, "{j}");
    assert_eq!(j["imu_samples"], 1000, "the board's attitude every cycle: {j}");
    let p50 = j["cycle_us"]["p50"].as_f64().unwrap();
    assert!(p50 > 500.0 && p50 < 1000.0, "SPI and wire time, under the period: {p50} µs");
}

/// What `Controller::start` saw of each servo: (fresh, age_cycles, from_cycle).
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(bool, Option<u64>, Option<u64>)>>>;

struct SeeStart(Seen);

impl Controller for SeeStart {
    type Telemetry = ();

    fn start(&mut self, state: &State<'_>) -> Result<(), Failure> {
        *self.0.lock().unwrap() = state.servos.iter().map(|s| (s.fresh, s.age_cycles, s.from_cycle)).collect();
        Ok(())
    }

    fn cycle(&mut self, _: &State<'_>, _: &mut Output<'_, ()>) -> Result<Flow, Failure> {
        Ok(Flow::Continue)
    }
}

/// What `start` sees of two servos that answer (drop rate 0) or stay silent (every frame
/// lost), inline and on a control thread.
fn start_state(drop_rate: f64, control_thread: bool) -> Vec<(bool, Option<u64>, Option<u64>)> {
    let robot = rtloop::RobotSpec::from_flags(&["1=sim".into()], &["1=1,2".into()]).unwrap();
    let mut runtime = Runtime::new().robot(robot).duration_s(0.01).control_thread(control_thread);
    runtime.config_mut().sim.lockstep = true;
    runtime.config_mut().faults.drop_rate = drop_rate;
    let seen = Seen::default();
    runtime.run(SeeStart(seen.clone())).expect("the run starts");
    let seen = seen.lock().unwrap().clone();
    seen
}

#[test]
fn start_tells_a_servo_that_answered_from_one_that_did_not() {
    for control_thread in [false, true] {
        // Answered the queries before the run: fresh, age 0; those queries belong to no
        // cycle, so `from_cycle` is None for every servo here.
        assert_eq!(start_state(0.0, control_thread), [(true, Some(0), None); 2], "control thread: {control_thread}");
        // Never answered: not fresh, no age.
        assert_eq!(start_state(1.0, control_thread), [(false, None, None); 2], "control thread: {control_thread}");
    }
}
