//! The wakeup experiment: how late a periodic thread wakes, the measurement cyclictest makes.
//!
//! A measuring thread gets the requested real-time settings, then runs a
//! [`rtloop_rt::periodic::PeriodicLoop`] on absolute CLOCK_MONOTONIC deadlines and records, for each
//! wakeup, `woke − deadline`. With a busy-wait the loop sleeps until shortly before each
//! deadline and spins the rest, which shows how much of the latency the spin hides. Background
//! [`crate::load`] runs during the measurement when asked.
//!
//! What it must never do: allocate, print or lock on the measuring thread between wakeups
//! (the sample buffer is sized before the first one), or report the latency of a sleep that
//! ended early as negative (the loop never returns before its deadline).

use crate::options::{apply_rt, CommonOptions};
use crate::report::{measure_on_thread, Measured, Outcome, Run};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Measure `common.samples` wakeups of a thread with a period of `period_us`, spinning the last
/// `common.busy_wait_us` before each deadline.
pub fn wakeup(common: &CommonOptions, period_us: u64) -> Result<Outcome, crate::Error> {
    crate::check::samples("--samples", common.samples)?;
    crate::check::period_us("--period-us", period_us)?;
    let busy_wait_us = crate::check::busy_wait_us(common.busy_wait_us, period_us)?;
    let settings = common.clone();
    let (samples_ns, warnings) =
        measure_on_thread(common, "wakeup", move |done| measure(&settings, period_us, busy_wait_us, done))?;
    let label = if busy_wait_us > 0 {
        format!("wakeup {period_us} us period, busy-wait {busy_wait_us} us")
    } else {
        format!("wakeup {period_us} us period")
    };
    Ok(Outcome {
        experiment: "wakeup".into(),
        runs: vec![Run { label, size: None, method: None, samples_ns }],
        warnings,
        ..Outcome::default()
    })
}

fn measure(common: &CommonOptions, period_us: u64, busy_wait_us: u64, done: &AtomicUsize) -> Measured {
    let warnings = apply_rt(common)?;
    let mut samples_ns = Vec::with_capacity(common.samples);
    let options = rtloop_rt::periodic::PeriodicOptions {
        busy_wait_ns: busy_wait_us * 1000,
        // A wakeup later than a whole period starts the next one at once, like cyclictest.
        overrun: rtloop_rt::periodic::OverrunPolicy::Skip,
        start_ns: None,
    };
    let mut periodic = rtloop_rt::periodic::PeriodicLoop::new(period_us * 1000, options);
    for i in 0..common.samples {
        let tick = periodic.wait_next();
        samples_ns.push(tick.late_ns());
        periodic.end_cycle();
        done.store(i + 1, Ordering::Relaxed);
    }
    Ok((samples_ns, warnings))
}
