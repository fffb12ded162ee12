//! Proof of the hot-path rule: thousands of full robot cycles (encode 12 commands, four
//! simulated buses with wire timing, IMU read, collect and decode 12 replies) perform no
//! heap allocation at all.

use io::{default_quadruped, RobotConfig, ServoCommand, ServoReply, VirtualClock};
use proto::host::PositionCommand;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

struct CountingAllocator;

thread_local! {
    /// Count only the allocations of the thread under test: the test harness allocates on
    /// its own threads (printing results) at any time, which is not the cycle's doing.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

fn counting() -> bool {
    COUNTING.try_with(Cell::get).unwrap_or(false)
}

fn set_counting(on: bool) {
    COUNTING.with(|c| c.set(on));
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

/// The harness itself must be able to see an allocation, or the test below proves nothing.
#[test]
fn the_counting_allocator_sees_allocations() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ALLOCATIONS.store(0, Ordering::SeqCst);
    set_counting(true);
    let v: Vec<u64> = std::hint::black_box(Vec::with_capacity(16));
    set_counting(false);
    drop(v);
    assert!(ALLOCATIONS.load(Ordering::SeqCst) >= 1);
}

/// The two tests share the global counter: run them one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn robot_cycles_never_allocate() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let clock = VirtualClock::new(1_000_000_000);
    let mut robot = default_quadruped(clock.clone(), RobotConfig::default()).unwrap();
    let mut commands = [ServoCommand::Query; 12];
    let mut replies = [ServoReply::default(); 12];
    let mut imu = Default::default();
    // Warm-up outside the counted region (first-touch of lazily sized internals, if any).
    for _ in 0..10 {
        robot.cycle(&commands, &mut replies, &mut imu);
        clock.advance_ns(1_000_000);
    }

    ALLOCATIONS.store(0, Ordering::SeqCst);
    set_counting(true);
    let mut missing = 0;
    for k in 0..5000u32 {
        let t = k as f64 * 1e-3;
        for (i, c) in commands.iter_mut().enumerate() {
            *c = match k % 100 {
                0 => ServoCommand::Stop,
                50 => ServoCommand::ZeroVelocity,
                _ => ServoCommand::Position(PositionCommand {
                    position: Some(0.05 * (t + i as f64).sin()),
                    velocity: Some(0.0),
                    maximum_torque: Some(2.0),
                    ..Default::default()
                }),
            };
        }
        let report = robot.cycle(&commands, &mut replies, &mut imu);
        missing += report.missing;
        clock.advance_ns(1_000_000);
    }
    set_counting(false);

    assert_eq!(ALLOCATIONS.load(Ordering::SeqCst), 0, "the cycle allocated");
    assert_eq!(missing, 0);
}
