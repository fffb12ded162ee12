//! `rtloop lab doctor`: the system's real-time readiness, one check per setting that changes
//! latency, each with the value found and the fix (kernel command line, sysctl or file) — and,
//! on a robot's computer, what the robot's buses and service need: the pi3hat's SPI devices
//! and their clock, each CAN interface's bit timing and state against moteus's, where
//! interrupts land, the systemd service's limits and the running loop's threads
//! (docs/robot.md walks through each fix).
//!
//! It reads a [`Machine`]: this one ([`Machine::this`]), or a tree standing for another
//! ([`Machine::at`]: the tests' Raspberry Pi 4 and 5), so every verdict is tested on the
//! machines it is written for. [`kernel`] holds the kernel's checks, [`robot`] the robot's.
//!
//! Verdicts: [`Status::Fail`] means something rtloop asks for will be *refused* (no way to get
//! a real-time priority at all). [`Status::Warn`] means it runs, but with latency tails worse
//! than this hardware can do — a kernel without PREEMPT_RT is a Warn, not a Fail, because
//! rtloop still runs on it (soft real time, tails in the hundreds of µs to ms under load)
//! and the fix is named; the lab's figures then tell how far that kernel can be trusted.
//! [`Status::Info`] is something worth knowing that has no right or wrong here (no cpufreq in a
//! VM). [`Status::Pass`] is as good as it gets.
//!
//! What it must never do: change anything (it only reads), need privileges, or panic because a
//! file is absent or unreadable — an absent file is reported as such in the check's value.

pub mod kernel;
pub mod machine;
pub mod robot;

pub use machine::{BitTiming, CanLink, Machine, DEFAULT_SERVICE};

use serde::Serialize;
use std::fmt::Write as _;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// As good as this system can be for real time.
    Pass,
    /// Works, but costs latency; the fix says what to change.
    Warn,
    /// Something rtloop asks for will be refused.
    Fail,
    /// Worth knowing, nothing to fix.
    Info,
}

impl Status {
    /// "pass", "warn", "fail" or "info".
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Info => "info",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One check: what was looked at, how it came out, what was found and what to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Stable name, one of [`CHECK_NAMES`].
    pub name: String,
    /// The verdict.
    pub status: Status,
    /// What was found (never empty; "absent: …" when the file does not exist).
    pub value: String,
    /// What to change, when there is something to change.
    pub fix: Option<String>,
}

/// The names of the checks [`checks`] returns, in order.
pub const CHECK_NAMES: &[&str] = &[
    "preempt-rt",
    "preemption-model",
    "isolcpus",
    "nohz_full",
    "rcu_nocbs",
    "cpufreq-governor",
    "cpuidle",
    "cpu_dma_latency",
    "irq-affinity",
    "sched_rt_runtime_us",
    "rlimit-rtprio",
    "rlimit-memlock",
    "swap",
    "transparent-hugepages",
    "timer_migration",
    "clocksource",
    "kernel",
    "machine",
    "spi",
    "can",
    "irq-landing",
    "service",
    "service-process",
];

/// Every check of `machine`, in the order of [`CHECK_NAMES`]. Reads files (and, on this
/// machine, the CAN interfaces over netlink) only.
pub fn checks(machine: &Machine) -> Vec<Check> {
    let mut out = kernel::checks(machine);
    out.extend(robot::checks(machine));
    out
}

/// A check; an empty value becomes "(empty)" so the value column is never blank.
pub(crate) fn check(name: &str, status: Status, value: impl Into<String>, fix: Option<String>) -> Check {
    let mut value = value.into();
    if value.is_empty() {
        value = "(empty)".into();
    }
    Check { name: name.to_string(), status, value, fix }
}

/// Counts per status, for the JSON summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Checks that passed.
    pub pass: usize,
    /// Checks that warn.
    pub warn: usize,
    /// Checks that fail.
    pub fail: usize,
    /// Informational checks.
    pub info: usize,
}

impl Summary {
    /// Count the statuses of `checks`.
    pub fn of(checks: &[Check]) -> Summary {
        let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
        Summary {
            pass: count(Status::Pass),
            warn: count(Status::Warn),
            fail: count(Status::Fail),
            info: count(Status::Info),
        }
    }
}

/// Run every check of `machine` and render them as a table (status, name, value, fix); with
/// `json`, the last line is one object `{"checks": [...], "summary": {pass, warn, fail, info}}`.
pub fn run(machine: &Machine, json: bool) -> String {
    let checks = checks(machine);
    let summary = Summary::of(&checks);
    let name_width = checks.iter().map(|c| c.name.len()).max().unwrap_or(4);
    let mut out = String::new();
    writeln!(out, "{:<6} {:<name_width$} value / fix", "status", "check").ok();
    for c in &checks {
        writeln!(out, "{:<6} {:<name_width$} {}", c.status.as_str().to_uppercase(), c.name, c.value).ok();
        if let Some(fix) = &c.fix {
            writeln!(out, "{:<6} {:<name_width$}   fix: {fix}", "", "").ok();
        }
    }
    writeln!(out, "{} pass, {} warn, {} fail, {} info", summary.pass, summary.warn, summary.fail, summary.info).ok();
    if json {
        let object = serde_json::json!({ "checks": checks, "summary": summary });
        writeln!(out, "{object}").ok();
    }
    out
}
