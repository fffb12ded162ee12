//! The hot-path rule for the whole run loop: thousands of real-time iterations — periodic
//! wakeup, control law (inline or through the wait-free rings), safety supervisor, the
//! four-bus cycle, statistics — allocate nothing on the cycle thread.

use rtloop::config::RunConfig;
use rtloop::run::{run_with_hooks, Hooks, RunOptions};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

struct CountingAllocator;

thread_local! {
    /// Only the cycle thread is counted; the harness and the control thread may allocate.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

fn counting() -> bool {
    COUNTING.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is a
// relaxed atomic and the flag a const-initialised thread-local, neither of which allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counting() {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counting() {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

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
        enter_rt: Box::new(|| COUNTING.with(|c| c.set(true))),
        leave_rt: Box::new(|| COUNTING.with(|c| c.set(false))),
    };
    let summary = run_with_hooks(&RunOptions { config, progress: false, log }, hooks).unwrap();
    (ALLOCATIONS.load(Ordering::SeqCst), summary.cycles)
}

#[test]
fn the_harness_sees_an_allocation() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ALLOCATIONS.store(0, Ordering::SeqCst);
    COUNTING.with(|c| c.set(true));
    let v: Vec<u8> = std::hint::black_box(Vec::with_capacity(8));
    COUNTING.with(|c| c.set(false));
    drop(v);
    assert!(ALLOCATIONS.load(Ordering::SeqCst) >= 1);
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
    let path = std::env::temp_dir().join(format!("rtloop-noalloc-{}.tlog", std::process::id()));
    let (allocations, cycles) = run_counted_with(false, Some(path.clone()));
    let _ = std::fs::remove_file(&path);
    assert!(cycles > 1000, "{cycles} cycles");
    assert_eq!(allocations, 0, "the real-time section allocated while logging");
}
