//! The periodic loop: wake at absolute deadlines on a fixed grid and account for every miss.
//!
//! Deadlines are `start + index × period` on CLOCK_MONOTONIC. Sleeping to an *absolute*
//! deadline (clock_nanosleep with TIMER_ABSTIME) instead of "sleep one period" keeps the rate
//! exact: the time spent working and the wakeup latency never accumulate into drift. An
//! optional busy-wait covers the last stretch before each deadline, trading CPU for a smaller
//! wakeup latency. When a cycle runs past the next deadline, [`OverrunPolicy`] decides whether
//! the missed periods are skipped or run back to back; either way every one is counted.
//!
//! The clock is a [`TimeSource`] so the same loop runs on the real monotonic clock
//! ([`Monotonic`]) or on a [`ManualClock`] that tests and simulations move by hand.
//!
//! A loop can be asked to stop while it waits ([`PeriodicLoop::wait_next_unless`],
//! [`PeriodicLoop::sleep_until_unless`]): a wait longer than [`STOP_CHECK_NS`] is cut into
//! slices of at most that length, and the stop condition is asked before each slice and
//! during the busy-wait, so a stop request is seen within one period or [`STOP_CHECK_NS`],
//! whichever is less, however slow the loop. A wait that fits in one slice is one
//! `clock_nanosleep` to the deadline, exactly as without a stop condition, so fast loops
//! pay nothing for it.
//!
//! What it must never do: allocate, lock or print after [`PeriodicLoop::new`] returns, or
//! return a tick from [`PeriodicLoop::wait_next`] before the deadline it reports.

use crate::stats::{Latency, Percentiles};
use crate::UnknownName;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// The current CLOCK_MONOTONIC time in nanoseconds (the clock every deadline is on).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux, so
    // the call cannot fail and only writes `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// The longest single sleep of a loop that can be stopped
/// ([`PeriodicLoop::wait_next_unless`]): a stop request waits at most this long, plus the
/// kernel's wakeup latency, to be seen. 50 ms keeps Ctrl-C prompt at any rate while a slow
/// loop wakes only 20 times a second to look.
pub const STOP_CHECK_NS: u64 = 50_000_000;

/// Where the loop reads the time and how it sleeps.
pub trait TimeSource {
    /// The current time in nanoseconds.
    fn now_ns(&mut self) -> u64;
    /// Sleep until `deadline_ns` (return at once if it has passed). May return a little
    /// early or late; the loop busy-waits to the deadline either way.
    fn sleep_until_ns(&mut self, deadline_ns: u64);
    /// One iteration of the busy-wait, between two reads of the clock.
    fn spin(&mut self) {
        std::hint::spin_loop();
    }
}

/// The real clock: CLOCK_MONOTONIC read with clock_gettime, slept on with clock_nanosleep
/// (TIMER_ABSTIME).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Monotonic;

impl TimeSource for Monotonic {
    fn now_ns(&mut self) -> u64 {
        now_ns()
    }

    fn sleep_until_ns(&mut self, deadline_ns: u64) {
        sleep_until_ns(deadline_ns)
    }
}

/// Sleep until the absolute CLOCK_MONOTONIC instant `deadline_ns` (clock_nanosleep with
/// TIMER_ABSTIME): a late wakeup never shifts the next deadline. Returns at once when the
/// deadline has passed.
pub fn sleep_until_ns(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: `ts` is a valid timespec and the remaining-time pointer may be null with
        // TIMER_ABSTIME (it is never written for absolute sleeps).
        let rc =
            unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
        // A signal interrupts the sleep (EINTR); the deadline is absolute, so sleeping again
        // to the same time is exact. Any other error cannot happen with these arguments.
        if rc != libc::EINTR {
            return;
        }
    }
}

/// A clock moved by hand, for tests and simulations: sleeping jumps straight to the target.
///
/// `sleep_offset_ns` shifts where a sleep ends (positive: late, like a real wakeup latency;
/// negative: early, to exercise the busy-wait), and every [`TimeSource::spin`] advances the
/// time by `spin_step_ns` (at least 1 ns) so a busy-wait on this clock always terminates.
/// Time never goes backwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManualClock {
    now_ns: u64,
    sleep_offset_ns: i64,
    spin_step_ns: u64,
    sleeps: u64,
    last_sleep_target_ns: Option<u64>,
}

impl ManualClock {
    /// A clock reading `start_ns`, whose sleeps end exactly at their target.
    pub fn new(start_ns: u64) -> Self {
        ManualClock { now_ns: start_ns, sleep_offset_ns: 0, spin_step_ns: 1, sleeps: 0, last_sleep_target_ns: None }
    }

    /// Make every sleep end `offset_ns` after (positive) or before (negative) its target.
    pub fn set_sleep_offset_ns(&mut self, offset_ns: i64) {
        self.sleep_offset_ns = offset_ns;
    }

    /// How far each busy-wait iteration moves the time (clamped to at least 1 ns).
    pub fn set_spin_step_ns(&mut self, step_ns: u64) {
        self.spin_step_ns = step_ns.max(1);
    }

    /// Move the time forward, e.g. by the duration of the simulated work.
    pub fn advance(&mut self, ns: u64) {
        self.now_ns = self.now_ns.saturating_add(ns);
    }

    /// The current time, without going through [`TimeSource::now_ns`] (which may have side
    /// effects in other time sources).
    pub fn time_ns(&self) -> u64 {
        self.now_ns
    }

    /// How many times the loop asked to sleep.
    pub fn sleeps(&self) -> u64 {
        self.sleeps
    }

    /// The time the latest sleep was asked to end at.
    pub fn last_sleep_target_ns(&self) -> Option<u64> {
        self.last_sleep_target_ns
    }
}

impl TimeSource for ManualClock {
    fn now_ns(&mut self) -> u64 {
        self.now_ns
    }

    fn sleep_until_ns(&mut self, deadline_ns: u64) {
        self.sleeps += 1;
        self.last_sleep_target_ns = Some(deadline_ns);
        let end = if self.sleep_offset_ns >= 0 {
            deadline_ns.saturating_add(self.sleep_offset_ns as u64)
        } else {
            deadline_ns.saturating_sub(self.sleep_offset_ns.unsigned_abs())
        };
        self.now_ns = self.now_ns.max(end);
    }

    fn spin(&mut self) {
        self.now_ns = self.now_ns.saturating_add(self.spin_step_ns);
    }
}

/// What to do when a cycle ends after the next deadline has already passed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OverrunPolicy {
    /// Run the period that has already begun at once (its lateness shows as wakeup latency)
    /// and skip every period that passed entirely; skipped periods are counted. The loop
    /// never falls further behind than one period.
    #[default]
    Skip,
    /// Run every missed period, back to back, until the loop is back on time. Deadlines stay
    /// on the grid and no period is lost, at the price of a burst of late cycles.
    CatchUp,
}

impl OverrunPolicy {
    /// The command-line spelling: `skip` or `catch-up`.
    pub fn as_str(self) -> &'static str {
        match self {
            OverrunPolicy::Skip => "skip",
            OverrunPolicy::CatchUp => "catch-up",
        }
    }
}

impl fmt::Display for OverrunPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OverrunPolicy {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "skip" => Ok(OverrunPolicy::Skip),
            "catch-up" => Ok(OverrunPolicy::CatchUp),
            _ => Err(UnknownName { kind: "overrun policy", input: s.to_string(), expected: "skip or catch-up" }),
        }
    }
}

/// How the loop waits and what it does after an overrun.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PeriodicOptions {
    /// Stop sleeping this long before each deadline and spin on the clock for the rest
    /// (0: sleep all the way). Spinning hides the kernel's wakeup latency at the cost of a
    /// busy CPU; under SCHED_FIFO with RT throttling on, a loop that spins most of its
    /// period can be stopped by the kernel for the throttled share of each second.
    pub busy_wait_ns: u64,
    /// What to do when a cycle runs past the next deadline.
    pub overrun: OverrunPolicy,
    /// The deadline of tick 0 on the time source's clock. `None`: one period after the loop
    /// is built, so the first wait is a real sleep.
    pub start_ns: Option<u64>,
}

/// One wakeup of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Tick {
    /// The period number since the start (periods skipped by [`OverrunPolicy::Skip`] never
    /// appear, so consecutive ticks may jump).
    pub index: u64,
    /// When this period began: `start + index × period`.
    pub deadline_ns: u64,
    /// When the loop returned to the caller; never before `deadline_ns`.
    pub woke_ns: u64,
}

impl Tick {
    /// The wakeup latency: how late the cycle started.
    pub fn late_ns(&self) -> u64 {
        self.woke_ns - self.deadline_ns
    }
}

/// The loop's counters and latency summaries.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LoopStats {
    /// Cycles run (ended with [`PeriodicLoop::end_cycle`]).
    pub cycles: u64,
    /// Cycles that ended after the next deadline had passed.
    pub overruns: u64,
    /// Periods never run because [`OverrunPolicy::Skip`] jumped over them.
    pub skipped_periods: u64,
    /// Wakeup latency (woke − deadline), µs.
    pub wakeup: Percentiles,
    /// Cycle time (end of cycle − woke), µs.
    pub cycle: Percentiles,
    /// When the first cycle started, ns on the loop's clock (0 before the first cycle).
    pub first_wake_ns: u64,
    /// When the latest cycle started, ns on the loop's clock (0 before the first cycle).
    pub last_wake_ns: u64,
}

/// A fixed-rate loop on absolute deadlines. Call [`wait_next`](Self::wait_next) at the top of
/// each cycle and [`end_cycle`](Self::end_cycle) when the cycle's work is done.
///
/// Everything it needs is allocated in the constructor; the two hot-path methods never
/// allocate, lock or print.
pub struct PeriodicLoop<T: TimeSource = Monotonic> {
    clock: T,
    period_ns: u64,
    busy_wait_ns: u64,
    overrun: OverrunPolicy,
    next_index: u64,
    next_deadline_ns: u64,
    /// The cycle between `wait_next` and `end_cycle`, if one is running.
    open_cycle: Option<Tick>,
    cycles: u64,
    overruns: u64,
    skipped_periods: u64,
    first_wake_ns: Option<u64>,
    last_wake_ns: Option<u64>,
    wakeup: Latency,
    cycle_time: Latency,
}

impl PeriodicLoop<Monotonic> {
    /// A loop on the real monotonic clock.
    ///
    /// # Panics
    /// If `period_ns` is 0 (a programming error, caught at construction rather than in the
    /// hot path).
    pub fn new(period_ns: u64, options: PeriodicOptions) -> Self {
        Self::with_time_source(period_ns, options, Monotonic)
    }
}

impl<T: TimeSource> PeriodicLoop<T> {
    /// A loop on any clock, e.g. a [`ManualClock`] in tests.
    ///
    /// # Panics
    /// If `period_ns` is 0.
    pub fn with_time_source(period_ns: u64, options: PeriodicOptions, mut clock: T) -> Self {
        assert!(period_ns > 0, "PeriodicLoop needs a period of at least 1 ns");
        let start = options.start_ns.unwrap_or_else(|| clock.now_ns().saturating_add(period_ns));
        PeriodicLoop {
            clock,
            period_ns,
            busy_wait_ns: options.busy_wait_ns,
            overrun: options.overrun,
            next_index: 0,
            next_deadline_ns: start,
            open_cycle: None,
            cycles: 0,
            overruns: 0,
            skipped_periods: 0,
            first_wake_ns: None,
            last_wake_ns: None,
            wakeup: Latency::new(),
            cycle_time: Latency::new(),
        }
    }

    /// Wait for the next deadline and start a cycle. Sleeps until `busy_wait_ns` before the
    /// deadline, then spins on the clock until it is reached; never returns early. If the
    /// previous cycle was not ended, it is ended here first. Never allocates.
    pub fn wait_next(&mut self) -> Tick {
        loop {
            // Nothing can stop this wait, so it always ends in a tick.
            if let Some(tick) = self.wait_next_unless(|| false) {
                return tick;
            }
        }
    }

    /// [`wait_next`](Self::wait_next), unless `stop` returns true while waiting: `stop` is
    /// asked before every sleep slice (at most [`STOP_CHECK_NS`] long) and in every turn of
    /// the busy-wait. `None` when stopped: no cycle was started and the deadline stays
    /// where it was. Never allocates (as long as `stop` does not).
    pub fn wait_next_unless(&mut self, mut stop: impl FnMut() -> bool) -> Option<Tick> {
        if self.open_cycle.is_some() {
            self.end_cycle();
        }
        let deadline = self.next_deadline_ns;
        if !self.sleep_until_unless(deadline.saturating_sub(self.busy_wait_ns), &mut stop) {
            return None;
        }
        let mut now = self.clock.now_ns();
        // Also the guard against a sleep that ended early: the deadline is a promise.
        while now < deadline {
            if stop() {
                return None;
            }
            self.clock.spin();
            now = self.clock.now_ns();
        }
        self.wakeup.record(now - deadline);
        let tick = Tick { index: self.next_index, deadline_ns: deadline, woke_ns: now };
        self.open_cycle = Some(tick);
        if self.first_wake_ns.is_none() {
            self.first_wake_ns = Some(now);
        }
        self.last_wake_ns = Some(now);
        Some(tick)
    }

    /// Sleep until `t_ns` on the loop's clock in slices of at most [`STOP_CHECK_NS`], asking
    /// `stop` before each. Returns false when `stop` said so (possibly before `t_ns`), true
    /// once the last slice has ended (a sleep may end a little early or late; the caller
    /// decides whether that matters). Does not start a cycle. Never allocates.
    pub fn sleep_until_unless(&mut self, t_ns: u64, mut stop: impl FnMut() -> bool) -> bool {
        loop {
            if stop() {
                return false;
            }
            let now = self.clock.now_ns();
            if now >= t_ns {
                return true;
            }
            if t_ns - now <= STOP_CHECK_NS {
                self.clock.sleep_until_ns(t_ns);
                return true;
            }
            self.clock.sleep_until_ns(now + STOP_CHECK_NS);
        }
    }

    /// End the running cycle: record its duration and choose the next deadline, applying the
    /// overrun policy if the cycle ended after it. Does nothing if no cycle is running.
    /// Never allocates.
    pub fn end_cycle(&mut self) {
        let Some(tick) = self.open_cycle.take() else {
            return;
        };
        let now = self.clock.now_ns();
        self.cycle_time.record(now.saturating_sub(tick.woke_ns));
        self.cycles += 1;
        let next_deadline = tick.deadline_ns.saturating_add(self.period_ns);
        let mut next_index = tick.index + 1;
        let mut next_deadline_ns = next_deadline;
        if now > next_deadline {
            self.overruns += 1;
            if self.overrun == OverrunPolicy::Skip {
                // Periods that began and ended while this cycle ran; the one in progress at
                // `now` is run at once.
                let passed = (now - next_deadline) / self.period_ns;
                self.skipped_periods += passed;
                next_index += passed;
                next_deadline_ns = next_deadline.saturating_add(passed.saturating_mul(self.period_ns));
            }
        }
        self.next_index = next_index;
        self.next_deadline_ns = next_deadline_ns;
    }

    /// Cycles that ended after the next deadline had passed, so far: a plain counter, cheap
    /// enough to read every cycle (unlike [`PeriodicLoop::stats`]).
    pub fn overruns(&self) -> u64 {
        self.overruns
    }

    /// Counters and latency summaries so far. Does not allocate, but computes percentiles over
    /// two histograms (tens of µs): for reporting, never for every cycle — read
    /// [`PeriodicLoop::overruns`] there.
    pub fn stats(&self) -> LoopStats {
        LoopStats {
            cycles: self.cycles,
            overruns: self.overruns,
            skipped_periods: self.skipped_periods,
            wakeup: self.wakeup.percentiles_us(),
            cycle: self.cycle_time.percentiles_us(),
            first_wake_ns: self.first_wake_ns.unwrap_or(0),
            last_wake_ns: self.last_wake_ns.unwrap_or(0),
        }
    }

    /// Forget counters and histograms (e.g. after warm-up) without moving the deadline grid.
    pub fn reset_stats(&mut self) {
        self.cycles = 0;
        self.overruns = 0;
        self.skipped_periods = 0;
        self.first_wake_ns = None;
        self.last_wake_ns = None;
        self.wakeup.reset();
        self.cycle_time.reset();
    }

    /// The raw wakeup-latency histogram (ns).
    pub fn wakeup_latency(&self) -> &Latency {
        &self.wakeup
    }

    /// The raw cycle-time histogram (ns).
    pub fn cycle_time(&self) -> &Latency {
        &self.cycle_time
    }

    /// The period, ns.
    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// The deadline the next [`wait_next`](Self::wait_next) will wait for.
    pub fn next_deadline_ns(&self) -> u64 {
        self.next_deadline_ns
    }

    /// The period number the next [`wait_next`](Self::wait_next) will return.
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// The overrun policy in force.
    pub fn overrun_policy(&self) -> OverrunPolicy {
        self.overrun
    }

    /// The clock.
    pub fn clock(&self) -> &T {
        &self.clock
    }

    /// The clock, mutably: how tests move a [`ManualClock`] through a cycle's work.
    pub fn clock_mut(&mut self) -> &mut T {
        &mut self.clock
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manual(period: u64, overrun: OverrunPolicy) -> PeriodicLoop<ManualClock> {
        let options = PeriodicOptions { busy_wait_ns: 0, overrun, start_ns: Some(1_000) };
        PeriodicLoop::with_time_source(period, options, ManualClock::new(0))
    }

    #[test]
    fn on_time_cycles_follow_the_grid() {
        let mut l = manual(1_000, OverrunPolicy::Skip);
        for i in 0..10 {
            let t = l.wait_next();
            assert_eq!(t, Tick { index: i, deadline_ns: 1_000 + i * 1_000, woke_ns: 1_000 + i * 1_000 });
            l.clock_mut().advance(300);
            l.end_cycle();
        }
        let s = l.stats();
        assert_eq!((s.cycles, s.overruns, s.skipped_periods), (10, 0, 0));
    }

    #[test]
    fn the_overrun_counter_matches_the_statistics() {
        let mut l = manual(1_000, OverrunPolicy::Skip);
        for late in [300, 1_500, 200, 2_700] {
            l.wait_next();
            l.clock_mut().advance(late);
            l.end_cycle();
            assert_eq!(l.overruns(), l.stats().overruns);
        }
        assert_eq!(l.overruns(), 2);
    }

    #[test]
    fn default_start_is_one_period_after_construction() {
        let l = PeriodicLoop::with_time_source(500, PeriodicOptions::default(), ManualClock::new(7));
        assert_eq!(l.next_deadline_ns(), 507);
        assert_eq!(l.next_index(), 0);
    }

    #[test]
    fn ending_twice_or_waiting_twice_is_harmless() {
        let mut l = manual(1_000, OverrunPolicy::Skip);
        l.end_cycle(); // nothing running yet
        assert_eq!(l.stats().cycles, 0);
        l.wait_next();
        l.wait_next(); // ends cycle 0 implicitly
        l.end_cycle();
        l.end_cycle();
        assert_eq!(l.stats().cycles, 2);
        assert_eq!(l.next_index(), 2);
    }

    #[test]
    fn parse_overrun_policy() {
        assert_eq!("skip".parse::<OverrunPolicy>().unwrap(), OverrunPolicy::Skip);
        assert_eq!("catch-up".parse::<OverrunPolicy>().unwrap(), OverrunPolicy::CatchUp);
        let e = "catchup".parse::<OverrunPolicy>().unwrap_err();
        assert!(e.to_string().contains("skip or catch-up"), "{e}");
        for p in [OverrunPolicy::Skip, OverrunPolicy::CatchUp] {
            assert_eq!(p.to_string().parse::<OverrunPolicy>().unwrap(), p);
        }
    }

    #[test]
    fn now_ns_is_monotonic() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a);
    }
}
