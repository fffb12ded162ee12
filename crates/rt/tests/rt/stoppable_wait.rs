//! A loop that can be stopped while it waits: a stop request is seen within one period or
//! `STOP_CHECK_NS`, whichever is less, however slow the loop — and a fast loop still makes
//! exactly one sleep per period. Deterministic: the clock is a `ManualClock`.

use rtloop_rt::periodic::{ManualClock, OverrunPolicy, PeriodicLoop, PeriodicOptions, STOP_CHECK_NS};
use std::cell::Cell;

const SECOND: u64 = 1_000_000_000;

fn manual(period_ns: u64, busy_wait_ns: u64) -> PeriodicLoop<ManualClock> {
    let options = PeriodicOptions { busy_wait_ns, overrun: OverrunPolicy::Skip, start_ns: Some(period_ns) };
    PeriodicLoop::with_time_source(period_ns, options, ManualClock::new(0))
}

/// A stop condition that turns true on its `n`-th question.
fn stop_on_question(n: u32) -> (Cell<u32>, impl Fn(&Cell<u32>) -> bool) {
    (Cell::new(0), move |asked: &Cell<u32>| {
        asked.set(asked.get() + 1);
        asked.get() >= n
    })
}

#[test]
fn a_stop_during_a_ten_second_period_is_seen_within_one_slice() {
    // 0.1 Hz: the first deadline is 10 s away.
    let mut l = manual(10 * SECOND, 0);
    let (asked, stop) = stop_on_question(3);
    assert_eq!(l.wait_next_unless(|| stop(&asked)), None);
    // Two slices slept before the third question said stop: 100 ms, not 10 s.
    assert_eq!(l.clock().time_ns(), 2 * STOP_CHECK_NS);
    assert_eq!(l.stats().cycles, 0, "no cycle was started");
    // The deadline did not move: the next wait still ends on the grid.
    let t = l.wait_next_unless(|| false).unwrap();
    assert_eq!((t.index, t.deadline_ns, t.woke_ns), (0, 10 * SECOND, 10 * SECOND));
    assert_eq!(l.clock().sleeps(), 2 + 200 - 2, "the rest of the period in 50 ms slices");
}

#[test]
fn a_stop_during_the_busy_wait_is_seen_too() {
    // A busy-wait covering the whole 1 ms period: the loop spins (1 ns per turn here) and
    // must still hear the stop.
    let mut l = manual(1_000_000, 1_000_000);
    l.clock_mut().set_spin_step_ns(1);
    let (asked, stop) = stop_on_question(1_000);
    assert_eq!(l.wait_next_unless(|| stop(&asked)), None);
    assert!(l.clock().time_ns() < 1_000_000, "stopped before the deadline");
}

#[test]
fn a_fast_loop_sleeps_once_per_period_as_without_a_stop_condition() {
    let mut l = manual(1_000_000, 0);
    for i in 0..100 {
        let t = l.wait_next_unless(|| false).unwrap();
        assert_eq!(t.deadline_ns, (i + 1) * 1_000_000);
        assert_eq!(t.late_ns(), 0);
        l.clock_mut().advance(300_000);
        l.end_cycle();
    }
    assert_eq!(l.clock().sleeps(), 100);
    assert_eq!(l.clock().last_sleep_target_ns(), Some(100_000_000));
}

#[test]
fn sleep_until_unless_reaches_its_time_or_stops() {
    let mut l = manual(SECOND, 0);
    assert!(l.sleep_until_unless(3 * SECOND, || false));
    assert_eq!(l.clock().time_ns(), 3 * SECOND);
    let (asked, stop) = stop_on_question(2);
    assert!(!l.sleep_until_unless(60 * SECOND, || stop(&asked)));
    assert_eq!(l.clock().time_ns(), 3 * SECOND + STOP_CHECK_NS);
    // A time already passed returns at once without sleeping.
    let sleeps = l.clock().sleeps();
    assert!(l.sleep_until_unless(SECOND, || false));
    assert_eq!(l.clock().sleeps(), sleeps);
}

#[test]
fn the_real_clock_hears_a_stop_from_another_thread() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    // A 10 s period on the real clock, stopped from another thread after 20 ms. Only the
    // outcome is asserted (stopped, not ticked), never how long it took.
    let stop = Arc::new(AtomicBool::new(false));
    let setter = Arc::clone(&stop);
    let h = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(20));
        setter.store(true, Ordering::SeqCst);
    });
    let mut l = PeriodicLoop::new(10 * SECOND, PeriodicOptions::default());
    let deadline = l.next_deadline_ns();
    assert_eq!(l.wait_next_unless(|| stop.load(Ordering::SeqCst)), None);
    assert!(rtloop_rt::periodic::now_ns() < deadline, "stopped before the 10 s deadline");
    h.join().unwrap();
}
