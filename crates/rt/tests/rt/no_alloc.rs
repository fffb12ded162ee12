//! Proof that the hot path of the periodic loop never touches the allocator: a counting global
//! allocator counts allocations made by this test's own thread only (the harness allocates on
//! its other threads), and 5 000 real 100 µs periods must count zero.

use rtloop_rt::periodic::{OverrunPolicy, PeriodicLoop, PeriodicOptions};

/// Allocator calls made by this thread while `f` runs.
fn allocations_during(f: impl FnOnce()) -> u64 {
    rtloop_testkit::count_allocations(f).0
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

#[test]
fn the_stoppable_wait_never_allocates() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    // A period longer than one stop-check slice, so the sliced sleep runs too.
    let period = rtloop_rt::periodic::STOP_CHECK_NS + 1_000_000;
    let options = PeriodicOptions { busy_wait_ns: 20_000, overrun: OverrunPolicy::Skip, start_ns: None };
    let mut l = PeriodicLoop::new(period, options);
    let mut ticks = 0;
    let n = allocations_during(|| {
        for _ in 0..2 {
            if l.wait_next_unless(|| stop.load(Ordering::Relaxed)).is_some() {
                ticks += 1;
            }
            l.end_cycle();
        }
        let now = rtloop_rt::periodic::now_ns();
        l.sleep_until_unless(now + 1_000_000, || stop.load(Ordering::Relaxed));
        stop.store(true, Ordering::Relaxed);
        assert!(l.wait_next_unless(|| stop.load(Ordering::Relaxed)).is_none());
    });
    assert_eq!(n, 0, "{n} allocator calls in the stoppable wait");
    assert_eq!(ticks, 2);
}
