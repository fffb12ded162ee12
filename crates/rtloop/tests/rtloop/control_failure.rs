//! A control law that fails: `start` refusing to start, `cycle` asking for the safe stop. One
//! typed path (`rtloop::Failure`) whose reason reaches the summary (its first problem,
//! `failure`, an event) and the log (an `event` record), the servos put in the safe mode at
//! once, and nothing allocated on the cycle thread on the way — inline and on a control thread.

use rtloop::controller::{Failure, Words};
use rtloop::summary::{ControlFailure, Hook};
use rtloop::{Controller, Flow, Output, PositionCommand, RunSummary, Runtime, ServoCommand, State};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Allocator calls the cycle thread made inside the real-time section.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds every joint at 0 rev; fails in `start`, or in `cycle` at `fail_at`.
struct Failing {
    refuse_start: bool,
    fail_at: u64,
    /// Words made before the run, shared with the failure.
    fix: Arc<str>,
    cycled: Arc<AtomicBool>,
    stopped: Arc<AtomicBool>,
}

impl Failing {
    fn new(refuse_start: bool, fail_at: u64) -> Self {
        Failing {
            refuse_start,
            fail_at,
            fix: Arc::from(format!("check the IMU (gain {})", 2)),
            cycled: Arc::default(),
            stopped: Arc::default(),
        }
    }
}

impl Controller for Failing {
    type Telemetry = ();

    fn start(&mut self, _: &State<'_>) -> Result<(), Failure> {
        if self.refuse_start {
            return Err(Failure::new("not_calibrated", "the joints are not calibrated", "calibrate them first"));
        }
        Ok(())
    }

    fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, ()>) -> Result<Flow, Failure> {
        self.cycled.store(true, Ordering::SeqCst);
        for i in 0..state.servos.len() {
            let hold = PositionCommand { position: Some(0.0), velocity: Some(0.0), ..Default::default() };
            out.set(i, ServoCommand::Position(hold));
        }
        // At or after: a control thread in lockstep may never see the very cycle (states it
        // falls behind on are dropped, counted as control_late).
        if state.cycle >= self.fail_at {
            out.event(None, "about_to_fail");
            return Err(Failure::new("estimate_diverged", "the estimate diverged", &self.fix).servo(4).value(7));
        }
        Ok(Flow::Continue)
    }

    fn stop(&mut self, _: &State<'_>) {
        self.stopped.store(true, Ordering::SeqCst);
    }
}

/// A lockstep run of `controller` for 1 s at 1 kHz (10 s with a control thread: in lockstep
/// the cycle thread does not wait for it, and on a loaded machine it may lag a few hundred
/// simulated milliseconds behind before its failure arrives) with a log, counting the cycle thread's
/// allocations in its real-time section; the summary, the count and the log's items as JSON
/// (record name, item).
fn run(controller: Failing, control_thread: bool) -> (RunSummary, u64, Vec<(String, Value)>) {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("failure.tlog");
    ALLOCATIONS.store(u64::MAX, Ordering::SeqCst);
    let runtime = Runtime::new()
        .lockstep(true)
        .control_thread(control_thread)
        .duration_s(if control_thread { 10.0 } else { 1.0 })
        .log(&log)
        .on_realtime_section(rtloop_testkit::start_counting, || {
            ALLOCATIONS.store(rtloop_testkit::stop_counting(), Ordering::SeqCst)
        });
    let summary = runtime.run(controller).expect("the run starts");
    let reader = rtloop_tlog::reader::FileReader::open(&log).unwrap();
    let mut items = Vec::new();
    for name in ["cycle", "event"] {
        let only = rtloop_tlog::reader::ItemFilter { record: Some(name.into()), ..Default::default() };
        for item in reader.items(only) {
            items.push((name.to_string(), reader.decode_item(&item.unwrap()).unwrap().to_json()));
        }
    }
    (summary, ALLOCATIONS.load(Ordering::SeqCst), items)
}

/// The command modes of the logged cycle `index`.
fn command_modes(items: &[(String, Value)], index: u64) -> Vec<u64> {
    let (_, cycle) = items.iter().find(|(n, c)| n == "cycle" && c["index"] == index).expect("the cycle is logged");
    cycle["servo"].as_array().unwrap().iter().map(|s| s["command_mode"].as_u64().unwrap()).collect()
}

#[test]
fn a_control_law_asking_for_the_safe_stop_ends_the_run_with_its_reason_in_the_summary_and_the_log() {
    for control_thread in [false, true] {
        let law = Failing::new(false, 300);
        let stopped = Arc::clone(&law.stopped);
        let (s, allocations, items) = run(law, control_thread);
        let on = if control_thread { "on a control thread" } else { "inline" };
        assert_eq!(allocations, 0, "{on}: failing allocated nothing on the cycle thread");
        // The failing cycle ran (with the safe mode), then the shutdown cycle; inline, at once.
        if control_thread {
            assert!((301..10_000).contains(&s.cycles), "{on}: {}", s.cycles);
        } else {
            assert_eq!(s.cycles, 301, "{on}: cycles 0 to 300");
        }
        assert!(s.ended_by_controller && !s.interrupted, "{on}");
        assert!(stopped.load(Ordering::SeqCst), "{on}: `stop` is called after a failure too");
        assert_eq!(s.exit_code(), 1, "{on}");
        let failure = s.failure.clone().expect("the failure");
        let at = failure.time;
        assert_eq!(
            failure,
            ControlFailure {
                name: "estimate_diverged",
                hook: Hook::Cycle,
                time: at,
                bus: Some(2),
                servo: Some(5),
                value: Some(7),
                what: "the estimate diverged".into(),
                fix: "check the IMU (gain 2)".into(),
            },
            "{on}"
        );
        let problem = format!("the estimate diverged at {at:.3} s (servo 5 on bus 2): check the IMU (gain 2)");
        assert_eq!(s.problems, [problem], "{on}");
        if !control_thread {
            assert!((at - 0.3).abs() < 1e-9, "{on}: the deadline of cycle 300, in simulated time: {at}");
        }
        // The event, after the law's own of the same cycle, before the shutdown.
        let kinds: Vec<&str> = s.events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["about_to_fail", "estimate_diverged", "shutdown"], "{on}");
        let event = &s.events[1];
        assert_eq!((event.bus, event.servo, event.value, event.time), (Some(2), Some(5), Some(7), at), "{on}");
        // The log has the event; the failing cycle commanded the safe mode (zero velocity,
        // mode 12), not the law's position commands (mode 10) of the cycle before.
        let logged: Vec<&Value> = items.iter().filter(|(n, _)| n == "event").map(|(_, e)| e).collect();
        assert!(
            logged.iter().any(|e| e["kind"] == "estimate_diverged" && e["bus"] == 2 && e["servo"] == 5),
            "{on}: {logged:?}"
        );
        let last = s.cycles - 1;
        assert_eq!(command_modes(&items, last), [12; 12], "{on}: the failing cycle {last}");
        assert_eq!(command_modes(&items, last - 1), [10; 12], "{on}: the cycle before it");
        for (id, f) in &s.final_state {
            assert_eq!((f.commanded, f.mode), ("zero-velocity", Some(12)), "{on}: servo {id}");
        }
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["failure"]["hook"], "cycle", "{on}: {json}");
        assert_eq!(json["failure"]["name"], "estimate_diverged", "{on}: {json}");
    }
}

#[test]
fn a_control_law_refusing_to_start_commands_nothing_and_says_why() {
    for control_thread in [false, true] {
        let law = Failing::new(true, u64::MAX);
        let (cycled, stopped) = (Arc::clone(&law.cycled), Arc::clone(&law.stopped));
        let (s, allocations, items) = run(law, control_thread);
        let on = if control_thread { "on a control thread" } else { "inline" };
        assert_eq!(allocations, 0, "{on}");
        assert!(!cycled.load(Ordering::SeqCst), "{on}: `cycle` is never called after a refusal");
        assert!(stopped.load(Ordering::SeqCst), "{on}: `stop` is");
        // Inline, no period runs; on a control thread the first one learns of it, and commands
        // the safe mode.
        assert_eq!(s.cycles, u64::from(control_thread), "{on}");
        assert!(s.ended_by_controller, "{on}");
        let failure = s.failure.clone().expect("the failure");
        assert_eq!((failure.name, failure.hook, failure.servo), ("not_calibrated", Hook::Start, None), "{on}");
        assert_eq!(s.problems, ["the joints are not calibrated at the start: calibrate them first"], "{on}");
        assert_eq!(s.exit_code(), 1, "{on}");
        let logged: Vec<&Value> = items.iter().filter(|(n, _)| n == "event").map(|(_, e)| e).collect();
        assert!(logged.iter().any(|e| e["kind"] == "not_calibrated" && e["servo"] == 0), "{on}: {logged:?}");
        // No servo was ever given a position: queries, then the shutdown's safe mode.
        for (_, cycle) in items.iter().filter(|(n, _)| n == "cycle") {
            for servo in cycle["servo"].as_array().unwrap() {
                assert_ne!(servo["command_mode"], 10, "{on}: {cycle}");
            }
        }
    }
}

#[test]
fn a_failure_reads_as_one_sentence_with_its_words_shared_or_static() {
    let shared: Arc<str> = Arc::from("made before the run");
    let f = Failure::new("x", "what", &shared).servo(1).value(2);
    assert_eq!((f.name, &*f.what, &*f.fix, f.servo, f.value), ("x", "what", "made before the run", Some(1), Some(2)));
    assert!(matches!(f.fix, Words::Shared(_)) && matches!(f.what, Words::Static(_)));
    // Cloning on the real-time thread only counts a holder.
    let (calls, _clone) = rtloop_testkit::count_allocations(|| f.clone());
    assert_eq!(calls, 0);
}
