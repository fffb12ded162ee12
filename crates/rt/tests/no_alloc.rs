//! Proof that the hot path of the periodic loop never touches the allocator: a counting global
//! allocator counts allocations made by this test's own thread only (the harness allocates on
//! its other threads), and 5 000 real 100 µs periods must count zero.

use rt::periodic::{OverrunPolicy, PeriodicLoop, PeriodicOptions};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

struct CountingAllocator;

thread_local! {
    // A const initialiser without a destructor: reading it never allocates or registers
    // anything, so it is safe to use from inside the allocator.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

static CALLS: AtomicU64 = AtomicU64::new(0);

fn note() {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        CALLS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to the system allocator with the caller's arguments unchanged;
// counting has no effect on the memory returned.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Allocator calls made by this thread while `f` runs.
fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = CALLS.load(Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    CALLS.load(Ordering::Relaxed) - before
}

#[test]
fn the_counter_sees_this_threads_allocations() {
    let n = allocations_during(|| {
        std::hint::black_box(vec![1u8; 64]);
    });
    assert!(n >= 2, "alloc + dealloc, counted {n}");
}

#[test]
fn wait_next_and_end_cycle_never_allocate() {
    for (overrun, busy_wait_ns) in [(OverrunPolicy::Skip, 0), (OverrunPolicy::CatchUp, 20_000)] {
        let options = PeriodicOptions { busy_wait_ns, overrun, start_ns: None };
        let mut l = PeriodicLoop::new(100_000, options);
        let mut late = 0u64;
        let n = allocations_during(|| {
            for _ in 0..5_000 {
                let t = l.wait_next();
                late = late.max(t.late_ns());
                l.end_cycle();
            }
            l.reset_stats();
            l.wait_next();
            l.end_cycle();
        });
        assert_eq!(n, 0, "{overrun}: {n} allocator calls in the hot path");
        assert_eq!(l.stats().cycles, 1);
        std::hint::black_box(late);
    }
}
