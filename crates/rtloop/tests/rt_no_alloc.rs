//! The hot-path rule for the whole run loop: thousands of real-time iterations — periodic
//! wakeup, control law (inline or through the wait-free rings), safety supervisor, the
//! four-bus cycle, statistics — allocate nothing on the cycle thread.

use rtloop::config::RunConfig;
use rtloop::run::{run_with_hooks, Hooks, RunOptions};
use std::sync::atomic::{AtomicU64, Ordering};

#[global_allocator]
static ALLOCATOR: testkit::CountingAllocator = testkit::CountingAllocator;

/// Allocator calls the cycle thread made inside the real-time section (set by the hooks).
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run_counted(control_thread: bool) -> (u64, u64) {
    run_counted_with(control_thread, None)
}

fn run_counted_with(control_thread: bool, log: Option<std::path::PathBuf>) -> (u64, u64) {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ALLOCATIONS.store(0, Ordering::SeqCst);
    let mut config = RunConfig { rate_hz: 2000.0, duration_s: 1.5, ..RunConfig::default() };
    config.realtime.control_thread = control_thread;
    // A servo faults midway, so the supervisor's override and event paths run too.
    config.faults.overheat = vec!["3@0.3".into()];
    let hooks = Hooks {
        enter_rt: Box::new(testkit::start_counting),
        leave_rt: Box::new(|| ALLOCATIONS.store(testkit::stop_counting(), Ordering::SeqCst)),
    };
    let summary = run_with_hooks(&RunOptions { config, progress: false, log }, hooks).unwrap();
    (ALLOCATIONS.load(Ordering::SeqCst), summary.cycles)
}

#[test]
fn the_harness_sees_an_allocation() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (calls, v) = testkit::count_allocations(|| std::hint::black_box(Vec::<u8>::with_capacity(8)));
    drop(v);
    assert!(calls >= 1);
}

#[test]
fn the_real_time_loop_never_allocates() {
    let (allocations, cycles) = run_counted(false);
    assert!(cycles > 1000, "{cycles} cycles");
    assert_eq!(allocations, 0, "the real-time section allocated");
}

#[test]
fn the_real_time_loop_with_a_control_thread_never_allocates() {
    let (allocations, cycles) = run_counted(true);
    assert!(cycles > 1000, "{cycles} cycles");
    assert_eq!(allocations, 0, "the real-time section allocated");
}

#[test]
fn the_real_time_loop_with_telemetry_logging_never_allocates() {
    // Removed with its directory when the guard drops, also if the run panics.
    let dir = tempfile::tempdir().unwrap();
    let (allocations, cycles) = run_counted_with(false, Some(dir.path().join("noalloc.tlog")));
    assert!(cycles > 1000, "{cycles} cycles");
    assert_eq!(allocations, 0, "the real-time section allocated while logging");
}
