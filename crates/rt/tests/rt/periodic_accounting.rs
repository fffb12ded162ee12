//! Overrun accounting and deadline keeping of the periodic loop, driven by a hand-moved clock
//! so every count is exact; plus a short run on the real clock checking only orderings.

use proptest::prelude::*;
use rtloop_rt::periodic::{ManualClock, OverrunPolicy, PeriodicLoop, PeriodicOptions, Tick};

const PERIOD: u64 = 1_000;
const START: u64 = 1_000;

fn manual_loop(overrun: OverrunPolicy, busy_wait_ns: u64) -> PeriodicLoop<ManualClock> {
    let options = PeriodicOptions { busy_wait_ns, overrun, start_ns: Some(START) };
    PeriodicLoop::with_time_source(PERIOD, options, ManualClock::new(0))
}

/// Run one cycle whose work takes `work_ns` on the manual clock.
fn cycle(l: &mut PeriodicLoop<ManualClock>, work_ns: u64) -> Tick {
    let tick = l.wait_next();
    l.clock_mut().advance(work_ns);
    l.end_cycle();
    tick
}

#[test]
fn skip_runs_the_begun_period_at_once_and_skips_the_passed_one() {
    let mut l = manual_loop(OverrunPolicy::Skip, 0);

    // Cycle 0 starts on time and runs 2.5 periods: 1000 → 3500.
    assert_eq!(cycle(&mut l, 2_500), Tick { index: 0, deadline_ns: 1_000, woke_ns: 1_000 });
    let s = l.stats();
    assert_eq!((s.cycles, s.overruns, s.skipped_periods), (1, 1, 1));
    // Period 1 (2000..3000) passed entirely; period 2 began at 3000 and runs now.
    assert_eq!((l.next_index(), l.next_deadline_ns()), (2, 3_000));
    assert_eq!(s.cycles + s.skipped_periods, 2, "periods whose deadline has passed before the next tick: 0 and 1");

    // Period 2 runs at once, 500 ns late, and ends in time.
    assert_eq!(cycle(&mut l, 100), Tick { index: 2, deadline_ns: 3_000, woke_ns: 3_500 });
    assert_eq!((l.next_index(), l.next_deadline_ns()), (3, 4_000));

    // Back on the grid.
    assert_eq!(cycle(&mut l, 100), Tick { index: 3, deadline_ns: 4_000, woke_ns: 4_000 });
    let s = l.stats();
    assert_eq!((s.cycles, s.overruns, s.skipped_periods), (3, 1, 1));
    assert_eq!(s.cycles + s.skipped_periods, 4, "periods 0..=3 elapsed");
    assert_eq!(l.next_deadline_ns(), START + l.next_index() * PERIOD);
    assert_eq!(l.wakeup_latency().len(), 3);
    assert_eq!(l.cycle_time().len(), 3);
    assert_eq!(s.first_wake_ns, 1_000);
    assert_eq!(s.last_wake_ns, 4_000);
    // The 500 ns of lateness is in the wakeup histogram (hdrhistogram keeps 3 digits).
    assert!((l.wakeup_latency().percentiles_us().max - 0.5).abs() < 0.005);
    assert!((l.cycle_time().percentiles_us().max - 2.5).abs() < 0.005);
}

#[test]
fn catch_up_runs_every_missed_period_back_to_back() {
    let mut l = manual_loop(OverrunPolicy::CatchUp, 0);

    // 1000 → 3500: ends after period 1's deadline (2000).
    assert_eq!(cycle(&mut l, 2_500), Tick { index: 0, deadline_ns: 1_000, woke_ns: 1_000 });
    assert_eq!((l.next_index(), l.next_deadline_ns()), (1, 2_000));
    // Period 1 runs at once (1500 late) and ends at 3600, after period 2's deadline (3000).
    assert_eq!(cycle(&mut l, 100), Tick { index: 1, deadline_ns: 2_000, woke_ns: 3_500 });
    assert_eq!((l.next_index(), l.next_deadline_ns()), (2, 3_000));
    // Period 2 runs at once (600 late) and ends at 3700, before period 3's deadline.
    assert_eq!(cycle(&mut l, 100), Tick { index: 2, deadline_ns: 3_000, woke_ns: 3_600 });
    assert_eq!((l.next_index(), l.next_deadline_ns()), (3, 4_000));
    // On time again.
    assert_eq!(cycle(&mut l, 100), Tick { index: 3, deadline_ns: 4_000, woke_ns: 4_000 });

    let s = l.stats();
    assert_eq!((s.cycles, s.overruns, s.skipped_periods), (4, 2, 0));
    assert_eq!(s.cycles + s.skipped_periods, 4, "periods 0..=3 elapsed, all of them run");
    assert!((l.wakeup_latency().percentiles_us().max - 1.5).abs() < 0.005);
}

#[test]
fn busy_wait_sleeps_short_of_the_deadline_and_never_returns_early() {
    let mut l = manual_loop(OverrunPolicy::Skip, 300);
    // Sleeps end 50 ns before their target, like an early or interrupted sleep would.
    l.clock_mut().set_sleep_offset_ns(-50);
    l.clock_mut().set_spin_step_ns(7);
    for _ in 0..20 {
        let t = l.wait_next();
        assert_eq!(l.clock().last_sleep_target_ns(), Some(t.deadline_ns - 300));
        assert!(t.woke_ns >= t.deadline_ns, "{t:?}");
        // The spin stops at the first clock read at or past the deadline.
        assert!(t.woke_ns < t.deadline_ns + 7, "{t:?}");
        l.clock_mut().advance(200);
        l.end_cycle();
    }
    assert_eq!(l.stats().overruns, 0);
}

#[test]
fn a_sleep_that_ends_early_is_covered_even_without_busy_wait() {
    let mut l = manual_loop(OverrunPolicy::CatchUp, 0);
    l.clock_mut().set_sleep_offset_ns(-400);
    for _ in 0..5 {
        let t = l.wait_next();
        assert_eq!(t.woke_ns, t.deadline_ns);
        l.end_cycle();
    }
}

#[test]
fn real_clock_ticks_stay_on_the_grid_and_never_wake_early() {
    let period = 200_000;
    let options = PeriodicOptions { busy_wait_ns: 50_000, overrun: OverrunPolicy::Skip, start_ns: None };
    let mut l = PeriodicLoop::new(period, options);
    let start = l.next_deadline_ns();
    let mut previous: Option<Tick> = None;
    for _ in 0..200 {
        let t = l.wait_next();
        assert!(t.woke_ns >= t.deadline_ns, "{t:?}");
        assert_eq!(t.deadline_ns, start + t.index * period);
        if let Some(p) = previous {
            assert!(t.index > p.index);
            assert!(t.woke_ns >= p.woke_ns);
        }
        previous = Some(t);
        l.end_cycle();
    }
    let s = l.stats();
    assert_eq!(s.cycles, 200);
    assert_eq!(s.cycles + s.skipped_periods, l.next_index());
    assert!(s.first_wake_ns <= s.last_wake_ns);
    assert!(rtloop_rt::now_ns() >= s.last_wake_ns);
}

/// What a run of cycles should count, computed independently of the loop.
fn expected_overruns(ticks: &[(Tick, u64)]) -> u64 {
    ticks.iter().filter(|(t, end)| *end > t.deadline_ns + PERIOD).count() as u64
}

proptest! {
    #[test]
    fn accounting_invariants_hold_for_any_cycle_lengths(
        work in proptest::collection::vec(0u64..5_000, 1..60),
        late in 0i64..800,
        catch_up in any::<bool>(),
    ) {
        let policy = if catch_up { OverrunPolicy::CatchUp } else { OverrunPolicy::Skip };
        let mut l = manual_loop(policy, 0);
        l.clock_mut().set_sleep_offset_ns(late);
        let mut ticks = Vec::new();
        let mut previous: Option<Tick> = None;
        for &w in &work {
            let t = l.wait_next();
            prop_assert!(t.woke_ns >= t.deadline_ns);
            prop_assert_eq!(t.deadline_ns, START + t.index * PERIOD);
            if let Some(p) = previous {
                if catch_up {
                    prop_assert_eq!(t.index, p.index + 1);
                } else {
                    prop_assert!(t.index > p.index);
                }
            }
            l.clock_mut().advance(w);
            l.end_cycle();
            let end = l.clock().time_ns();
            ticks.push((t, end));
            let s = l.stats();
            prop_assert_eq!(s.cycles + s.skipped_periods, l.next_index());
            prop_assert_eq!(l.next_deadline_ns(), START + l.next_index() * PERIOD);
            if catch_up {
                prop_assert_eq!(s.skipped_periods, 0);
            } else {
                // Never more than one period behind: the next deadline is the period in
                // progress or a later one.
                prop_assert!(end < l.next_deadline_ns() + PERIOD);
            }
            previous = Some(t);
        }
        let s = l.stats();
        prop_assert_eq!(s.cycles, work.len() as u64);
        prop_assert_eq!(s.overruns, expected_overruns(&ticks));
    }
}
