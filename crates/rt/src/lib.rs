//! # rtloop-rt — real-time thread setup and the periodic loop
//!
//! What the servo cycle needs to run at a solid rate on Linux, in three parts:
//!
//! * [`setup`] turns the calling thread into a real-time thread (CPU affinity, locked memory,
//!   a prefaulted stack, 1 ns timer slack, SCHED_FIFO / SCHED_RR / SCHED_DEADLINE) and reports
//!   what the system actually granted, with one actionable warning per refusal;
//!   [`setup::current_conditions`] reads the scheduling conditions a measurement depends on;
//!   [`setup::CpuDmaLatency`] keeps the CPUs out of deep idle states while it lives.
//! * [`periodic`] is the loop itself: sleep to absolute deadlines on CLOCK_MONOTONIC, optional
//!   busy-wait for the last stretch, overrun accounting (skip or catch up), waits that hear a
//!   stop request within one period or 50 ms, and wakeup-latency and cycle-time histograms —
//!   without allocating, locking or printing after construction.
//! * [`stats`] holds the allocation-free latency histogram both of them record into.
//!
//! What it must never do: allocate, lock or print on the hot path ([`periodic::PeriodicLoop::wait_next`],
//! [`periodic::PeriodicLoop::wait_next_unless`], [`periodic::PeriodicLoop::sleep_until_unless`],
//! [`periodic::PeriodicLoop::end_cycle`], [`stats::Latency::record`]), or panic because the
//! system refused a real-time request — a refusal is a warning and the loop runs on with what
//! it got (unless the caller asked for `strict`).

#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod periodic;
pub mod setup;
pub mod stats;

pub use periodic::{
    now_ns, LoopStats, ManualClock, Monotonic, OverrunPolicy, PeriodicLoop, PeriodicOptions, Tick, TimeSource,
    STOP_CHECK_NS,
};
pub use setup::{
    apply_to_current_thread, current_conditions, Applied, Conditions, DeadlineParams, Policy, RtError, RtSettings,
    Warning,
};

/// A name that [`std::str::FromStr`] did not recognise (a scheduling or overrun policy).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} '{input}': expected {expected}")]
pub struct UnknownName {
    /// What was being parsed, e.g. "scheduling policy".
    pub kind: &'static str,
    /// The text given.
    pub input: String,
    /// The accepted spellings, for the message.
    pub expected: &'static str,
}
