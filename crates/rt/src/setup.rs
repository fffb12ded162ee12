//! Making the calling thread a real-time thread, and reading back what it got.
//!
//! [`apply_to_current_thread`] applies, in this order: CPU affinity, locked memory
//! (mlockall), a prefaulted stack, the timer slack, and last the scheduling policy — last
//! because once the thread is real-time, the page faults and syscalls of the other steps would
//! run at real-time priority, and because SCHED_DEADLINE must see the final affinity. Every
//! request the system refuses becomes one [`Warning`] that names the failure and what to
//! change; the thread runs on with what it got. [`RtSettings::strict`] turns the refusals into
//! one error instead, listing every one of them (each step is still tried, so the user learns
//! everything to fix at once). Mistakes in the settings themselves (a priority out of range,
//! bad deadline parameters) are always errors.
//!
//! [`CpuDmaLatency`] holds a PM QoS request on `/dev/cpu_dma_latency` (what cyclictest does
//! while it measures), keeping the CPUs out of deep idle states for as long as it lives.
//!
//! [`current_conditions`] reads, without privileges, the conditions a latency measurement
//! depends on (policy, affinity, limits, RT throttling, preemption model).
//!
//! What it must never do: panic because the system refused something or a file is missing,
//! or be called from the hot path (it allocates and makes syscalls).

use crate::UnknownName;
use serde::{Serialize, Serializer};
use std::fmt;
use std::io;
use std::str::FromStr;

/// Stack touched by default so its page faults happen during setup, not in the first cycles.
pub const DEFAULT_PREFAULT_STACK_BYTES: usize = 256 * 1024;

/// Stack left untouched below the prefaulted region, so prefaulting never reaches the guard
/// page even counting the frames of whatever runs next.
const PREFAULT_STACK_RESERVE: usize = 64 * 1024;

/// Highest priority of SCHED_FIFO and SCHED_RR on Linux (the range is fixed at 1..=99).
const MAX_RT_PRIORITY: i32 = 99;

/// SCHED_DEADLINE runtimes below 2^10 ns are rejected by the kernel (its bandwidth arithmetic
/// works in units of 1024 ns).
const MIN_DEADLINE_RUNTIME_NS: u64 = 1 << 10;

/// A Linux scheduling policy a thread can ask for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// SCHED_OTHER, the default time-sharing scheduler. Applying it actively selects
    /// SCHED_OTHER, so a thread started under `chrt` is put back to time sharing.
    #[default]
    Other,
    /// SCHED_FIFO: fixed priority 1..=99, runs until it blocks or a higher priority wakes.
    Fifo,
    /// SCHED_RR: like FIFO, but equal priorities take turns in time slices.
    RoundRobin,
    /// SCHED_DEADLINE: earliest-deadline-first with a runtime budget per period.
    Deadline,
}

impl Policy {
    /// The kernel's name, e.g. "SCHED_FIFO".
    pub fn kernel_name(self) -> &'static str {
        match self {
            Policy::Other => "SCHED_OTHER",
            Policy::Fifo => "SCHED_FIFO",
            Policy::RoundRobin => "SCHED_RR",
            Policy::Deadline => "SCHED_DEADLINE",
        }
    }

    /// The command-line spelling: other, fifo, rr or deadline.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Other => "other",
            Policy::Fifo => "fifo",
            Policy::RoundRobin => "rr",
            Policy::Deadline => "deadline",
        }
    }

    /// The policy for a value returned by sched_getscheduler (SCHED_RESET_ON_FORK ignored);
    /// `None` for SCHED_BATCH, SCHED_IDLE and anything newer.
    pub fn from_kernel(code: i32) -> Option<Policy> {
        match code & !libc::SCHED_RESET_ON_FORK {
            libc::SCHED_OTHER => Some(Policy::Other),
            libc::SCHED_FIFO => Some(Policy::Fifo),
            libc::SCHED_RR => Some(Policy::RoundRobin),
            libc::SCHED_DEADLINE => Some(Policy::Deadline),
            _ => None,
        }
    }

    /// The accepted `sched_priority` values: 1..=99 for FIFO/RR, only 0 otherwise.
    pub fn priority_range(self) -> std::ops::RangeInclusive<i32> {
        match self {
            Policy::Fifo | Policy::RoundRobin => 1..=MAX_RT_PRIORITY,
            Policy::Other | Policy::Deadline => 0..=0,
        }
    }

    /// Real-time policies (FIFO, RR, DEADLINE).
    pub fn is_realtime(self) -> bool {
        self != Policy::Other
    }

    fn kernel_value(self) -> libc::c_int {
        match self {
            Policy::Other => libc::SCHED_OTHER,
            Policy::Fifo => libc::SCHED_FIFO,
            Policy::RoundRobin => libc::SCHED_RR,
            Policy::Deadline => libc::SCHED_DEADLINE,
        }
    }
}

/// The kernel name for any sched_getscheduler value, including the policies [`Policy`] does
/// not request.
pub fn kernel_policy_name(code: i32) -> &'static str {
    match code & !libc::SCHED_RESET_ON_FORK {
        libc::SCHED_OTHER => "SCHED_OTHER",
        libc::SCHED_FIFO => "SCHED_FIFO",
        libc::SCHED_RR => "SCHED_RR",
        libc::SCHED_BATCH => "SCHED_BATCH",
        libc::SCHED_IDLE => "SCHED_IDLE",
        libc::SCHED_DEADLINE => "SCHED_DEADLINE",
        _ => "unknown policy",
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Policy {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "other" => Ok(Policy::Other),
            "fifo" => Ok(Policy::Fifo),
            "rr" => Ok(Policy::RoundRobin),
            "deadline" => Ok(Policy::Deadline),
            _ => Err(UnknownName {
                kind: "scheduling policy",
                input: s.to_string(),
                expected: "other, fifo, rr or deadline",
            }),
        }
    }
}

impl Serialize for Policy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// SCHED_DEADLINE parameters: the thread gets `runtime_ns` of CPU every `period_ns`, finished
/// within `deadline_ns` of the period's start. Must satisfy runtime ≤ deadline ≤ period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeadlineParams {
    /// CPU time per period, ns (at least 1024).
    pub runtime_ns: u64,
    /// Relative deadline, ns.
    pub deadline_ns: u64,
    /// Period, ns.
    pub period_ns: u64,
}

/// What to ask of the system for the calling thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtSettings {
    /// Scheduling policy.
    pub policy: Policy,
    /// 1..=99 for FIFO/RR; 0 for OTHER and DEADLINE.
    pub priority: i32,
    /// Required for (and only allowed with) [`Policy::Deadline`].
    pub deadline: Option<DeadlineParams>,
    /// CPUs the thread may run on; empty leaves the affinity as inherited.
    pub cpus: Vec<usize>,
    /// Lock all current and future memory of the *whole process* (mlockall(MCL_CURRENT |
    /// MCL_FUTURE)) so no page is ever faulted in or swapped out in the loop. Unprivileged,
    /// every later mapping counts against RLIMIT_MEMLOCK, so raise that limit too.
    pub mlock: bool,
    /// With `mlock`: lock memory only where that cannot make later allocations fail — the
    /// process has CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK — and otherwise leave it
    /// unlocked, with a refusal saying what to grant (rtloop's `--policy auto`). Without it,
    /// mlockall is tried whatever the limit.
    pub mlock_if_unbounded: bool,
    /// Touch this much of the thread's stack now so its page faults happen during setup
    /// (capped to what the stack holds, with a warning).
    pub prefault_stack_bytes: usize,
    /// Timer slack for this thread (PR_SET_TIMERSLACK): how much later than asked the kernel
    /// may end a sleep to batch wakeups. 0 is stored as 1 ns, because PR_SET_TIMERSLACK treats
    /// 0 as "reset to the default" (usually 50 µs). Real-time threads have no slack on recent
    /// kernels whatever is set, so the value read back for them may be 0.
    pub timer_slack_ns: u64,
    /// Return the refusals as one error instead of warnings.
    pub strict: bool,
}

impl Default for RtSettings {
    fn default() -> Self {
        RtSettings {
            policy: Policy::Other,
            priority: 0,
            deadline: None,
            cpus: Vec::new(),
            mlock: false,
            mlock_if_unbounded: false,
            prefault_stack_bytes: DEFAULT_PREFAULT_STACK_BYTES,
            timer_slack_ns: 1,
            strict: false,
        }
    }
}

/// Which part of the setup a [`Warning`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Setting {
    /// CPU affinity.
    Affinity,
    /// mlockall.
    MemoryLock,
    /// Stack prefaulting.
    StackPrefault,
    /// PR_SET_TIMERSLACK.
    TimerSlack,
    /// The scheduling policy and priority.
    Scheduler,
    /// RT throttling (informational).
    RtThrottling,
}

impl Setting {
    /// A short name, e.g. "affinity".
    pub fn as_str(self) -> &'static str {
        match self {
            Setting::Affinity => "affinity",
            Setting::MemoryLock => "mlock",
            Setting::StackPrefault => "stack-prefault",
            Setting::TimerSlack => "timer-slack",
            Setting::Scheduler => "scheduler",
            Setting::RtThrottling => "rt-throttling",
        }
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Setting {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A request the system refused (or a condition worth knowing), with what to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// What it is about.
    pub what: Setting,
    /// What failed and what to change, in one sentence.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Why [`validate`] refused settings: a user mistake, found before the thread is touched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidSettings {
    /// A priority outside the policy's range.
    #[error("{}", priority_message(.policy, .priority))]
    Priority {
        /// The policy asked for.
        policy: Policy,
        /// The priority given.
        priority: i32,
    },
    /// SCHED_DEADLINE without its parameters.
    #[error("SCHED_DEADLINE needs runtime, deadline and period (runtime <= deadline <= period)")]
    DeadlineMissing,
    /// Deadline parameters with another policy.
    #[error("deadline parameters given but the policy is {}: they only apply to SCHED_DEADLINE", .policy.kernel_name())]
    DeadlineWithoutPolicy {
        /// The policy asked for.
        policy: Policy,
    },
    /// A runtime below the kernel's 1024 ns.
    #[error("SCHED_DEADLINE runtime must be at least 1024 ns ({})", shown(.0))]
    RuntimeTooShort(DeadlineParams),
    /// Not runtime <= deadline <= period.
    #[error("SCHED_DEADLINE needs runtime <= deadline <= period ({})", shown(.0))]
    DeadlineOrder(DeadlineParams),
    /// A period with the top bit set (the kernel's arithmetic would overflow).
    #[error("SCHED_DEADLINE period is too large ({})", shown(.0))]
    PeriodTooLarge(DeadlineParams),
}

fn priority_message(policy: &Policy, priority: &i32) -> String {
    match policy {
        Policy::Fifo | Policy::RoundRobin => {
            format!("{} priority must be 1..=99, got {priority}", policy.kernel_name())
        }
        Policy::Other => {
            format!("SCHED_OTHER takes priority 0, got {priority}: choose policy fifo or rr for a real-time priority")
        }
        Policy::Deadline => {
            format!("SCHED_DEADLINE takes no priority (got {priority}): it is scheduled by runtime/deadline/period")
        }
    }
}

fn shown(d: &DeadlineParams) -> String {
    format!("runtime {} ns, deadline {} ns, period {} ns", d.runtime_ns, d.deadline_ns, d.period_ns)
}

/// Why [`apply_to_current_thread`] returned no [`Applied`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RtError {
    /// The settings themselves are wrong (always an error). The setting's sentence, also the
    /// `source`, stays after the colon: `rtloop run` and the lab print this one line.
    #[error("invalid real-time settings: {0}")]
    Invalid(#[source] InvalidSettings),
    /// The system refused requests and the settings were `strict`: every refusal, in the
    /// order the steps ran (never empty).
    #[error(
        "the system refused {} real-time request{} (strict): {}",
        .0.len(),
        if .0.len() == 1 { "" } else { "s" },
        refusals(.0)
    )]
    Refused(Vec<Warning>),
}

impl RtError {
    /// The refusals, as one clause: `affinity: …; mlock: …` (empty for [`RtError::Invalid`]).
    pub fn refusals(&self) -> String {
        match self {
            RtError::Invalid(_) => String::new(),
            RtError::Refused(ws) => refusals(ws),
        }
    }
}

/// `affinity: …; mlock: …`.
fn refusals(warnings: &[Warning]) -> String {
    warnings.iter().map(|w| format!("{}: {}", w.what, w.message)).collect::<Vec<_>>().join("; ")
}

/// What is in effect for the thread after [`apply_to_current_thread`], read back from the
/// kernel, plus everything that was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Applied {
    /// The policy in effect. SCHED_BATCH and SCHED_IDLE (which cannot be requested here) show
    /// as [`Policy::Other`]; `kernel_policy` has the exact name.
    pub policy: Policy,
    /// The kernel's name for the policy in effect.
    pub kernel_policy: &'static str,
    /// sched_priority in effect.
    pub priority: i32,
    /// The SCHED_DEADLINE parameters in effect, when the policy is SCHED_DEADLINE.
    pub deadline: Option<DeadlineParams>,
    /// The CPUs the thread may run on (empty only if they could not be read).
    pub cpus: Vec<usize>,
    /// mlockall succeeded in this call.
    pub mlocked: bool,
    /// Locked memory of the process (VmLck), KiB.
    pub locked_kib: Option<u64>,
    /// Bytes of stack touched.
    pub stack_prefaulted_bytes: usize,
    /// Timer slack read back (PR_GET_TIMERSLACK), ns. Real-time threads read 0 on kernels that
    /// ignore slack for them (Linux 6.11 and later); 0 also if it could not be read.
    pub timer_slack_ns: u64,
    /// One entry per refused request.
    pub warnings: Vec<Warning>,
    /// Things worth knowing that refused nothing (e.g. RT throttling is on).
    pub notes: Vec<Warning>,
}

/// Check the settings for user mistakes, without touching the thread.
pub fn validate(settings: &RtSettings) -> Result<(), RtError> {
    let policy = settings.policy;
    if !policy.priority_range().contains(&settings.priority) {
        return Err(RtError::Invalid(InvalidSettings::Priority { policy, priority: settings.priority }));
    }
    match (policy, settings.deadline) {
        (Policy::Deadline, None) => Err(RtError::Invalid(InvalidSettings::DeadlineMissing)),
        (Policy::Deadline, Some(d)) => validate_deadline(&d),
        (_, Some(_)) => Err(RtError::Invalid(InvalidSettings::DeadlineWithoutPolicy { policy })),
        (_, None) => Ok(()),
    }
}

fn validate_deadline(d: &DeadlineParams) -> Result<(), RtError> {
    if d.runtime_ns < MIN_DEADLINE_RUNTIME_NS {
        return Err(RtError::Invalid(InvalidSettings::RuntimeTooShort(*d)));
    }
    if !(d.runtime_ns <= d.deadline_ns && d.deadline_ns <= d.period_ns) {
        return Err(RtError::Invalid(InvalidSettings::DeadlineOrder(*d)));
    }
    // The kernel rejects values with the top bit set (they would overflow its arithmetic).
    if d.period_ns >= 1 << 63 {
        return Err(RtError::Invalid(InvalidSettings::PeriodTooLarge(*d)));
    }
    Ok(())
}

/// Apply `settings` to the calling thread (see the module docs for the order) and report what
/// is in effect afterwards. Refusals are warnings unless `settings.strict`; invalid settings
/// are always [`RtError::Invalid`], checked before anything is changed.
pub fn apply_to_current_thread(settings: &RtSettings) -> Result<Applied, RtError> {
    validate(settings)?;
    let mut refusals = Refusals { strict: settings.strict, warnings: Vec::new() };
    let mut notes = Vec::new();

    if !settings.cpus.is_empty() {
        refusals.check(Setting::Affinity, set_affinity(&settings.cpus));
    }

    let mut mlocked = false;
    let unbounded = || {
        read_capability(CAP_IPC_LOCK) == Some(true)
            || read_rlimit(libc::RLIMIT_MEMLOCK).is_some_and(|l| l.soft.is_none())
    };
    if settings.mlock && settings.mlock_if_unbounded && !unbounded() {
        let limit = describe_limit(read_rlimit(libc::RLIMIT_MEMLOCK).map(|l| l.soft), 1024, " KiB");
        let cap = match read_capability(CAP_IPC_LOCK) {
            Some(_) => "no CAP_IPC_LOCK",
            None => "CAP_IPC_LOCK unknown: capget failed",
        };
        refusals.check(
            Setting::MemoryLock,
            Err(format!(
                "mlockall not tried ({cap}, RLIMIT_MEMLOCK {limit}): every later allocation would have to fit \
                 under the limit; grant CAP_IPC_LOCK or raise it (ulimit -l unlimited)"
            )),
        );
    } else if settings.mlock {
        match lock_memory() {
            Ok(()) => {
                mlocked = true;
                if let Some(note) = memlock_limit_note() {
                    notes.push(Warning { what: Setting::MemoryLock, message: note });
                }
            }
            Err(m) => refusals.check(Setting::MemoryLock, Err(m)),
        }
    }

    let mut stack_prefaulted_bytes = 0;
    if settings.prefault_stack_bytes > 0 {
        let (touched, problem) = prefault_stack(settings.prefault_stack_bytes);
        stack_prefaulted_bytes = touched;
        if let Some(m) = problem {
            refusals.check(Setting::StackPrefault, Err(m));
        }
    }

    refusals.check(Setting::TimerSlack, set_timer_slack(settings.timer_slack_ns));

    refusals.check(Setting::Scheduler, set_policy(settings));

    let (code, priority) = read_scheduler().unwrap_or((libc::SCHED_OTHER, 0));
    let policy = Policy::from_kernel(code).unwrap_or(Policy::Other);
    if matches!(policy, Policy::Fifo | Policy::RoundRobin) {
        if let Some(note) = throttling_note() {
            notes.push(Warning { what: Setting::RtThrottling, message: note });
        }
    }
    if refusals.strict && !refusals.warnings.is_empty() {
        return Err(RtError::Refused(refusals.warnings));
    }
    Ok(Applied {
        policy,
        kernel_policy: kernel_policy_name(code),
        priority,
        deadline: if policy == Policy::Deadline { read_deadline_params() } else { None },
        cpus: read_affinity().unwrap_or_default(),
        mlocked,
        locked_kib: status_kib("VmLck:"),
        stack_prefaulted_bytes,
        timer_slack_ns: read_timer_slack().unwrap_or(0),
        warnings: refusals.warnings,
        notes,
    })
}

/// Collects refusals; under `strict` the caller turns them into one error once every step
/// has been tried.
struct Refusals {
    strict: bool,
    warnings: Vec<Warning>,
}

impl Refusals {
    /// Record the refusal, if `result` is one.
    fn check(&mut self, what: Setting, result: Result<(), String>) {
        if let Err(message) = result {
            self.warnings.push(Warning { what, message });
        }
    }
}

/// "EPERM" for an errno value, as the man pages spell it.
fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::EINVAL => "EINVAL",
        libc::EBUSY => "EBUSY",
        libc::ENOMEM => "ENOMEM",
        libc::EAGAIN => "EAGAIN",
        libc::ESRCH => "ESRCH",
        libc::ENOSYS => "ENOSYS",
        libc::EFAULT => "EFAULT",
        libc::E2BIG => "E2BIG",
        _ => return format!("errno {errno}"),
    };
    name.to_string()
}

fn last_errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

// ---------------------------------------------------------------------------------------
// Affinity

fn set_affinity(cpus: &[usize]) -> Result<(), String> {
    let possible = read_cpu_list_file("/sys/devices/system/cpu/possible");
    let online = online_cpus().or_else(|| possible.clone());
    let setsize = libc::CPU_SETSIZE as usize;
    let exists = |c: usize| c < setsize && possible.as_ref().is_none_or(|p| p.contains(&c));
    let missing: Vec<usize> = cpus.iter().copied().filter(|&c| !exists(c)).collect();
    let online_text = online.as_deref().map(format_cpu_list).unwrap_or_else(|| "unknown".into());
    if !missing.is_empty() {
        let (subject, many) = plural("CPU", &missing);
        return Err(format!(
            "{subject} {} {} not exist: this machine has CPUs {online_text}; affinity left unchanged",
            join(&missing),
            if many { "do" } else { "does" }
        ));
    }
    if let Some(online) = &online {
        let offline: Vec<usize> = cpus.iter().copied().filter(|c| !online.contains(c)).collect();
        if !offline.is_empty() {
            let (subject, many) = plural("CPU", &offline);
            return Err(format!(
                "{subject} {} {} offline: online CPUs are {online_text} (echo 1 > \
                    /sys/devices/system/cpu/cpuN/online); affinity left unchanged",
                join(&offline),
                if many { "are" } else { "is" }
            ));
        }
    }
    // SAFETY: cpu_set_t is a plain bit array for which all-zero bytes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: `c < CPU_SETSIZE` was checked above, so CPU_SET stays inside `set`.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        return Ok(());
    }
    let errno = last_errno();
    let current = read_affinity().map(|c| format_cpu_list(&c)).unwrap_or_else(|| "unknown".into());
    let why = match errno {
        libc::EINVAL => {
            format!("those CPUs are outside this process's cpuset (cgroup or container); it may use CPUs {current}")
        }
        libc::EPERM => "the thread's current scheduling policy (SCHED_DEADLINE) or a security policy forbids \
            changing it"
            .into(),
        libc::EBUSY => "the thread is SCHED_DEADLINE and the new CPUs would break its admission; set the \
            affinity before the policy"
            .into(),
        _ => io::Error::from_raw_os_error(errno).to_string(),
    };
    Err(format!(
        "CPU affinity {} refused ({}): {why}; affinity left at {current}",
        format_cpu_list(cpus),
        errno_name(errno)
    ))
}

fn plural(word: &str, items: &[usize]) -> (String, bool) {
    if items.len() == 1 {
        (word.to_string(), false)
    } else {
        (format!("{word}s"), true)
    }
}

fn join(items: &[usize]) -> String {
    items.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", ")
}

/// The CPUs the calling thread may run on.
fn read_affinity() -> Option<Vec<usize>> {
    // SAFETY: all-zero bytes is a valid (empty) cpu_set_t.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is writable and of the size passed; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return None;
    }
    // SAFETY: every index is below CPU_SETSIZE, the size of `set`.
    Some((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// Parse the kernel's CPU list format ("0-3,8,10-11").
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let text = text.trim();
    let mut cpus = Vec::new();
    if text.is_empty() {
        return Some(cpus);
    }
    for part in text.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b || b - a > 1 << 16 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// Format CPUs the way the kernel lists them ("0-3,8"); "none" when empty.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(",")
    }
}

/// The CPUs the kernel lists as online (`/sys/devices/system/cpu/online`), `None` when that
/// cannot be read.
pub fn online_cpus() -> Option<Vec<usize>> {
    read_cpu_list_file("/sys/devices/system/cpu/online")
}

fn read_cpu_list_file(path: &str) -> Option<Vec<usize>> {
    parse_cpu_list(&std::fs::read_to_string(path).ok()?)
}

// ---------------------------------------------------------------------------------------
// Memory

fn lock_memory() -> Result<(), String> {
    // SAFETY: mlockall takes flags only and touches no caller memory.
    let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
    if rc == 0 {
        return Ok(());
    }
    let errno = last_errno();
    let limit = describe_limit(read_rlimit(libc::RLIMIT_MEMLOCK).map(|l| l.soft), 1024, " KiB");
    let why = match errno {
        libc::ENOMEM => format!(
            "the process maps more than RLIMIT_MEMLOCK ({limit}): raise it (ulimit -l unlimited, or memlock in \
                /etc/security/limits.conf) or grant CAP_IPC_LOCK"
        ),
        libc::EPERM => format!(
            "RLIMIT_MEMLOCK is {limit} and the process lacks CAP_IPC_LOCK: raise the limit (ulimit -l \
                unlimited) or grant CAP_IPC_LOCK"
        ),
        libc::EAGAIN => "some memory could not be locked (EAGAIN): retry, or raise RLIMIT_MEMLOCK".into(),
        _ => io::Error::from_raw_os_error(errno).to_string(),
    };
    Err(format!("mlockall refused ({}): {why}", errno_name(errno)))
}

/// With MCL_FUTURE, every later mapping counts against RLIMIT_MEMLOCK unless the process has
/// CAP_IPC_LOCK: allocations and new thread stacks beyond the limit then fail.
fn memlock_limit_note() -> Option<String> {
    let limit = read_rlimit(libc::RLIMIT_MEMLOCK)?.soft?;
    if read_capability(CAP_IPC_LOCK) == Some(true) {
        return None;
    }
    Some(format!(
        "memory is locked, but RLIMIT_MEMLOCK is {} KiB and every later allocation must fit under it \
            (MCL_FUTURE): raise it (ulimit -l unlimited) if the program grows",
        limit / 1024
    ))
}

/// Touch up to `bytes` of stack below the caller. Returns the bytes touched and, if fewer than
/// asked, why.
fn prefault_stack(bytes: usize) -> (usize, Option<String>) {
    let Some(available) = stack_available() else {
        return (0, Some("stack not prefaulted: its bounds could not be read (pthread_getattr_np failed)".into()));
    };
    let usable = available.saturating_sub(PREFAULT_STACK_RESERVE);
    let touched = bytes.min(usable);
    if touched > 0 {
        touch_stack(touched);
    }
    if touched < bytes {
        let m = format!(
            "stack prefault capped at {} KiB of the {} KiB asked: the thread has only {} KiB of stack left; \
                spawn it with a larger stack (std::thread::Builder::stack_size)",
            touched / 1024,
            bytes / 1024,
            available / 1024
        );
        return (touched, Some(m));
    }
    (touched, None)
}

const STACK_CHUNK: usize = 4096;

/// Touch `bytes` of stack, one page-sized frame per call. Recursion is the way to reach below
/// the current frame without `alloca`; the black boxes keep the optimiser from dropping the
/// arrays or turning the recursion into a loop that reuses one frame.
#[inline(never)]
fn touch_stack(bytes: usize) {
    let mut chunk = [0u8; STACK_CHUNK];
    std::hint::black_box(&mut chunk);
    if bytes > STACK_CHUNK {
        touch_stack(bytes - STACK_CHUNK);
    }
    std::hint::black_box(&chunk);
}

/// Bytes of stack between the current frame and the lowest usable address of this thread's
/// stack.
fn stack_available() -> Option<usize> {
    let marker = 0u8;
    let here = std::hint::black_box(&marker) as *const u8 as usize;
    // SAFETY: all-zero bytes is valid storage for pthread_attr_t; it is initialised by
    // pthread_getattr_np before use and destroyed after.
    let mut attr: libc::pthread_attr_t = unsafe { std::mem::zeroed() };
    // SAFETY: `attr` is writable; pthread_self() is always a valid thread handle.
    if unsafe { libc::pthread_getattr_np(libc::pthread_self(), &mut attr) } != 0 {
        return None;
    }
    let mut addr: *mut libc::c_void = std::ptr::null_mut();
    let mut size: libc::size_t = 0;
    // SAFETY: `attr` was initialised above; `addr` and `size` are writable.
    let rc = unsafe { libc::pthread_attr_getstack(&attr, &mut addr, &mut size) };
    // SAFETY: `attr` was initialised by pthread_getattr_np and is not used afterwards.
    unsafe { libc::pthread_attr_destroy(&mut attr) };
    if rc != 0 {
        return None;
    }
    // The stack grows down from addr + size; `addr` is its lowest usable address (for the
    // main thread this range follows RLIMIT_STACK and is grown on demand).
    let low = addr as usize;
    (here > low && here <= low + size).then(|| here - low)
}

// ---------------------------------------------------------------------------------------
// Timer slack

fn set_timer_slack(ns: u64) -> Result<(), String> {
    // 0 would mean "reset to the default slack" (usually 50 µs), the opposite of asking for none.
    let ns = ns.max(1);
    // SAFETY: PR_SET_TIMERSLACK takes the slack as an integer argument; no memory is passed.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if rc == 0 {
        return Ok(());
    }
    let errno = last_errno();
    Err(format!(
        "timer slack {ns} ns refused ({}): {}; sleeps may end up to the default 50 µs late",
        errno_name(errno),
        io::Error::from_raw_os_error(errno)
    ))
}

fn read_timer_slack() -> Option<u64> {
    // SAFETY: PR_GET_TIMERSLACK takes no arguments and returns the slack (or -1).
    let rc = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    (rc >= 0).then_some(rc as u64)
}

// ---------------------------------------------------------------------------------------
// Scheduling policy

/// The kernel's `struct sched_attr` (the first version, 48 bytes), as documented in
/// sched_setattr(2).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

fn set_policy(settings: &RtSettings) -> Result<(), String> {
    let policy = settings.policy;
    if let (Policy::Deadline, Some(d)) = (policy, settings.deadline) {
        return set_deadline(&d, !settings.cpus.is_empty());
    }
    let param = libc::sched_param { sched_priority: settings.priority };
    // SAFETY: `param` is a valid sched_param; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, policy.kernel_value(), &param) };
    if rc == 0 {
        return Ok(());
    }
    let errno = last_errno();
    let what = if policy.is_realtime() {
        format!("{} priority {}", policy.kernel_name(), settings.priority)
    } else {
        policy.kernel_name().to_string()
    };
    let why = match errno {
        libc::EPERM if euid() == 0 => "refused even to root: the cgroup may have no real-time budget \
            (CONFIG_RT_GROUP_SCHED: cpu.rt_runtime_us), or a container/seccomp policy forbids real-time \
            scheduling"
            .to_string(),
        libc::EPERM => {
            let limit = describe_limit(read_rlimit(libc::RLIMIT_RTPRIO).map(|l| l.soft), 1, "");
            format!(
                "run as root, or give this user an rtprio limit (ulimit -r 99 / /etc/security/limits.conf; now \
                    {limit}), or grant CAP_SYS_NICE"
            )
        }
        _ => io::Error::from_raw_os_error(errno).to_string(),
    };
    Err(format!("{what} refused ({}): {why}", errno_name(errno)))
}

fn set_deadline(d: &DeadlineParams, affinity_requested: bool) -> Result<(), String> {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_DEADLINE as u32,
        sched_runtime: d.runtime_ns,
        sched_deadline: d.deadline_ns,
        sched_period: d.period_ns,
        ..SchedAttr::default()
    };
    // SAFETY: `attr` is a valid sched_attr whose `size` field matches its layout; pid 0 is the
    // calling thread and flags 0 is required.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0 as libc::pid_t, &attr as *const SchedAttr, 0u32) };
    if rc == 0 {
        return Ok(());
    }
    let errno = last_errno();
    let shown = format!(
        "SCHED_DEADLINE runtime {} µs / deadline {} µs / period {} µs",
        d.runtime_ns as f64 / 1e3,
        d.deadline_ns as f64 / 1e3,
        d.period_ns as f64 / 1e3
    );
    let why = match errno {
        libc::EBUSY => "the admission test failed — runtime/period too large for the free deadline bandwidth (other \
                deadline tasks, or sched_rt_runtime_us/sched_rt_period_us); lower runtime or lengthen \
                period"
            .to_string(),
        libc::EPERM if euid() != 0 => {
            "needs root or CAP_SYS_NICE (RLIMIT_RTPRIO does not allow SCHED_DEADLINE)".to_string()
        }
        libc::EPERM => {
            let allowed = read_affinity().map(|c| format_cpu_list(&c)).unwrap_or_else(|| "unknown".into());
            let online = online_cpus().map(|c| format_cpu_list(&c)).unwrap_or_else(|| "unknown".into());
            if affinity_requested || allowed != online {
                format!(
                    "the thread's CPU affinity ({allowed}) is narrower than its root domain ({online}); \
                        SCHED_DEADLINE threads must be allowed on every CPU of their root domain — leave cpus \
                        empty, or isolate the CPUs in an exclusive cpuset"
                )
            } else {
                "refused even to root: a container/seccomp policy forbids it, or deadline bandwidth is disabled \
                    for this root domain"
                    .to_string()
            }
        }
        libc::EINVAL => {
            let bound = |name: &str| {
                std::fs::read_to_string(format!("/proc/sys/kernel/{name}")).ok().map(|s| s.trim().to_string())
            };
            format!(
                "the kernel rejected the parameters: period must lie in sched_deadline_period_min_us..max_us \
                    ({}..{} µs) and the thread must not be in a group with real-time limits",
                bound("sched_deadline_period_min_us").unwrap_or_else(|| "?".into()),
                bound("sched_deadline_period_max_us").unwrap_or_else(|| "?".into())
            )
        }
        libc::ENOSYS => "this kernel has no sched_setattr (SCHED_DEADLINE needs Linux 3.14 or later)".to_string(),
        _ => io::Error::from_raw_os_error(errno).to_string(),
    };
    Err(format!("{shown} refused ({}): {why}", errno_name(errno)))
}

/// The calling thread's policy code and priority.
fn read_scheduler() -> Option<(i32, i32)> {
    // SAFETY: pid 0 is the calling thread; no memory is passed.
    let code = unsafe { libc::sched_getscheduler(0) };
    if code < 0 {
        return None;
    }
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a writable sched_param; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_getparam(0, &mut param) };
    Some((code, if rc == 0 { param.sched_priority } else { 0 }))
}

fn read_deadline_params() -> Option<DeadlineParams> {
    let mut attr = SchedAttr::default();
    let size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: `attr` is writable and `size` bytes long; the kernel writes at most `size` bytes.
    let rc =
        unsafe { libc::syscall(libc::SYS_sched_getattr, 0 as libc::pid_t, &mut attr as *mut SchedAttr, size, 0u32) };
    (rc == 0 && attr.sched_policy == libc::SCHED_DEADLINE as u32).then_some(DeadlineParams {
        runtime_ns: attr.sched_runtime,
        deadline_ns: attr.sched_deadline,
        period_ns: attr.sched_period,
    })
}

/// The informational note for a FIFO/RR thread when RT throttling is on.
fn throttling_note() -> Option<String> {
    let runtime = read_i64("/proc/sys/kernel/sched_rt_runtime_us")?;
    if runtime < 0 {
        return None;
    }
    let period = read_i64("/proc/sys/kernel/sched_rt_period_us").unwrap_or(1_000_000);
    let stopped_ms = (period - runtime).max(0) as f64 / 1000.0;
    let period_s = period as f64 / 1e6;
    Some(format!(
        "RT throttling is on (sched_rt_runtime_us {runtime} of sched_rt_period_us {period}): a real-time thread \
            that never sleeps is stopped for {stopped_ms} ms every {period_s} s; sleep in every cycle, or write \
            -1 to /proc/sys/kernel/sched_rt_runtime_us"
    ))
}

// ---------------------------------------------------------------------------------------
// CPU idle latency (PM QoS)

/// Why [`CpuDmaLatency::hold`] holds nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DmaLatencyError {
    /// A negative bound.
    #[error("{}: a latency bound of {max_latency_us} µs is negative; give 0 or more", CpuDmaLatency::PATH)]
    Negative {
        /// The bound given.
        max_latency_us: i32,
    },
    /// The device could not be opened or written (`source`), or is not a character device
    /// (`source` is `None`). The operating system's words stay inside the sentence, which
    /// `rtloop run` prints as one warning line.
    #[error(
        "cannot hold {} at {max_latency_us} µs ({}): it needs root or write access to the device, and without it the CPUs may enter deep idle states and wake the loop later",
        CpuDmaLatency::PATH,
        why(.source)
    )]
    CannotHold {
        /// The bound asked for.
        max_latency_us: i32,
        /// The operating system's error; `None` when the path is not a character device.
        #[source]
        source: Option<std::io::Error>,
    },
}

fn why(source: &Option<std::io::Error>) -> String {
    source.as_ref().map_or_else(|| "not a character device".to_string(), |e| e.to_string())
}

/// A held PM QoS request on `/dev/cpu_dma_latency`: while it lives, the kernel keeps every CPU
/// out of idle states whose exit latency is above the requested bound, so a sleeping real-time
/// thread is not woken late by a CPU climbing out of a deep C-state. cyclictest holds 0 µs
/// while it measures; `rtloop run` and `rtloop lab compare` do the same. Dropping the value
/// closes the file, which ends the request.
#[derive(Debug)]
pub struct CpuDmaLatency {
    /// The open device; the request lasts as long as the descriptor.
    _file: std::fs::File,
    max_latency_us: i32,
}

impl CpuDmaLatency {
    /// The PM QoS device.
    pub const PATH: &'static str = "/dev/cpu_dma_latency";

    /// Hold the CPUs' wakeup latency at 0 µs (no idle state deeper than polling).
    pub fn hold_zero() -> Result<CpuDmaLatency, DmaLatencyError> {
        Self::hold(0)
    }

    /// Hold the CPUs' wakeup latency at `max_latency_us` or less. The error is one sentence
    /// saying what failed and what to do. Opens the existing device only (never creates a
    /// file, never follows a symlink) and refuses anything that is not a character device.
    pub fn hold(max_latency_us: i32) -> Result<CpuDmaLatency, DmaLatencyError> {
        use std::io::Write;
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        if max_latency_us < 0 {
            return Err(DmaLatencyError::Negative { max_latency_us });
        }
        let cannot = |source| DmaLatencyError::CannotHold { max_latency_us, source: Some(source) };
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(Self::PATH)
            .map_err(cannot)?;
        let is_device = file.metadata().map(|m| m.file_type().is_char_device()).unwrap_or(false);
        if !is_device {
            return Err(DmaLatencyError::CannotHold { max_latency_us, source: None });
        }
        file.write_all(&max_latency_us.to_ne_bytes()).map_err(cannot)?;
        Ok(CpuDmaLatency { _file: file, max_latency_us })
    }

    /// The bound held, µs.
    pub fn max_latency_us(&self) -> i32 {
        self.max_latency_us
    }
}

// ---------------------------------------------------------------------------------------
// Conditions

/// A resource limit: `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ResourceLimit {
    /// The limit in force.
    pub soft: Option<u64>,
    /// The most an unprivileged process may raise it to.
    pub hard: Option<u64>,
}

/// The process may open fewer files (file descriptors) than a command needs, even with its
/// soft limit raised to the hard one. The Display is the sentence the user reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} needs up to {needed} open files (file descriptors) but the process may open only {limit} (ulimit -n); \
     raise the limit, e.g. `ulimit -n 1024`"
)]
pub struct OpenFilesError {
    /// What needs them ("this run").
    pub what: &'static str,
    /// Descriptors the command needs.
    pub needed: u64,
    /// The hard limit (`ulimit -Hn`).
    pub limit: u64,
}

/// Make sure the process may open `needed` files (for `what`, as the error says it): the soft RLIMIT_NOFILE is raised to
/// `needed` when below it (up to the hard limit; no privilege needed, and never lowered).
/// Returns the soft limit now in force; `Err` when even the hard limit is below `needed`.
/// A command calls this before it opens anything, so that running out of descriptors is one
/// sentence at start rather than a failure (or a library's panic) half-way through.
pub fn ensure_open_files(what: &'static str, needed: u64) -> Result<u64, OpenFilesError> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `r` is a writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        // Unknown: nothing to check against; whatever fails later says so itself.
        return Ok(needed);
    }
    let soft = r.rlim_cur;
    if soft == libc::RLIM_INFINITY || soft >= needed {
        return Ok(soft);
    }
    if r.rlim_max != libc::RLIM_INFINITY && r.rlim_max < needed {
        return Err(OpenFilesError { what, needed, limit: r.rlim_max });
    }
    let raised = libc::rlimit { rlim_cur: needed, rlim_max: r.rlim_max };
    // SAFETY: `raised` is a valid rlimit (soft at most hard).
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(OpenFilesError { what, needed, limit: soft });
    }
    Ok(needed)
}

fn read_rlimit(resource: libc::__rlimit_resource_t) -> Option<ResourceLimit> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `r` is a writable rlimit.
    if unsafe { libc::getrlimit(resource, &mut r) } != 0 {
        return None;
    }
    let value = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    Some(ResourceLimit { soft: value(r.rlim_cur), hard: value(r.rlim_max) })
}

fn describe_limit(limit: Option<Option<u64>>, divisor: u64, unit: &str) -> String {
    match limit {
        None => "unknown".into(),
        Some(None) => "unlimited".into(),
        Some(Some(v)) => format!("{}{unit}", v / divisor),
    }
}

/// The kernel's preemption model, as far as it can be read unprivileged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PreemptionModel {
    /// PREEMPT_RT: fully preemptible, the kernel for hard real time.
    PreemptRt,
    /// PREEMPT_DYNAMIC: chosen at boot (preempt=); the mode in use is in `preempt_dynamic_mode`
    /// when readable.
    Dynamic,
    /// CONFIG_PREEMPT: preemptible kernel (low-latency desktop).
    Full,
    /// Neither PREEMPT nor PREEMPT_RT in the version string: voluntary or no preemption.
    VoluntaryOrNone,
    /// The version string could not be read.
    Unknown,
}

impl fmt::Display for PreemptionModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PreemptionModel::PreemptRt => "PREEMPT_RT",
            PreemptionModel::Dynamic => "PREEMPT_DYNAMIC",
            PreemptionModel::Full => "PREEMPT",
            PreemptionModel::VoluntaryOrNone => "voluntary or none",
            PreemptionModel::Unknown => "unknown",
        })
    }
}

/// Classify a kernel version string (`uname -v`) and the content of /sys/kernel/realtime.
pub fn preemption_model(version: Option<&str>, realtime_sysfs: Option<bool>) -> PreemptionModel {
    if realtime_sysfs == Some(true) {
        return PreemptionModel::PreemptRt;
    }
    let Some(v) = version else {
        return PreemptionModel::Unknown;
    };
    let words: Vec<&str> = v.split_whitespace().collect();
    if words.contains(&"PREEMPT_RT") {
        PreemptionModel::PreemptRt
    } else if words.contains(&"PREEMPT_DYNAMIC") {
        PreemptionModel::Dynamic
    } else if words.contains(&"PREEMPT") {
        PreemptionModel::Full
    } else {
        PreemptionModel::VoluntaryOrNone
    }
}

/// The conditions a real-time measurement depends on, for the calling thread and the system.
/// Everything is read unprivileged; `None` means it could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Conditions {
    /// The calling thread's policy (`None` also for SCHED_BATCH / SCHED_IDLE).
    pub policy: Option<Policy>,
    /// The kernel's name for the calling thread's policy.
    pub kernel_policy: Option<&'static str>,
    /// The calling thread's sched_priority.
    pub priority: Option<i32>,
    /// CPUs the calling thread may run on.
    pub affinity: Option<Vec<usize>>,
    /// Online CPUs.
    pub online_cpus: Option<Vec<usize>>,
    /// CPUs isolated from the scheduler (isolcpus=).
    pub isolated_cpus: Option<Vec<usize>>,
    /// The calling thread's timer slack, ns.
    pub timer_slack_ns: Option<u64>,
    /// RLIMIT_RTPRIO: the highest FIFO/RR priority allowed without CAP_SYS_NICE.
    pub rlimit_rtprio: Option<ResourceLimit>,
    /// RLIMIT_MEMLOCK, bytes.
    pub rlimit_memlock: Option<ResourceLimit>,
    /// Locked memory of this process (VmLck), KiB.
    pub locked_kib: Option<u64>,
    /// Effective user id.
    pub euid: u32,
    /// CAP_SYS_NICE in the effective set (real-time policies without limits).
    pub cap_sys_nice: Option<bool>,
    /// CAP_IPC_LOCK in the effective set (mlock without limits).
    pub cap_ipc_lock: Option<bool>,
    /// /proc/sys/kernel/sched_rt_runtime_us (-1: RT throttling off).
    pub sched_rt_runtime_us: Option<i64>,
    /// /proc/sys/kernel/sched_rt_period_us.
    pub sched_rt_period_us: Option<i64>,
    /// `uname -r`.
    pub kernel_release: Option<String>,
    /// `uname -v`, where the preemption model is named.
    pub kernel_version: Option<String>,
    /// /sys/kernel/realtime is "1" (present on PREEMPT_RT kernels only).
    pub realtime_sysfs: Option<bool>,
    /// The preemption model.
    pub preemption: PreemptionModel,
    /// The PREEMPT_DYNAMIC mode list with the active one in parentheses (debugfs; usually
    /// readable only by root).
    pub preempt_dynamic_mode: Option<String>,
}

/// Read the [`Conditions`] of the calling thread and the system. Never panics.
pub fn current_conditions() -> Conditions {
    let sched = read_scheduler();
    let (release, version) = uname_strings();
    let realtime_sysfs = std::fs::read_to_string("/sys/kernel/realtime").ok().map(|s| s.trim() == "1");
    Conditions {
        policy: sched.and_then(|(code, _)| Policy::from_kernel(code)),
        kernel_policy: sched.map(|(code, _)| kernel_policy_name(code)),
        priority: sched.map(|(_, p)| p),
        affinity: read_affinity(),
        online_cpus: online_cpus(),
        isolated_cpus: read_cpu_list_file("/sys/devices/system/cpu/isolated"),
        timer_slack_ns: read_timer_slack(),
        rlimit_rtprio: read_rlimit(libc::RLIMIT_RTPRIO),
        rlimit_memlock: read_rlimit(libc::RLIMIT_MEMLOCK),
        locked_kib: status_kib("VmLck:"),
        euid: euid(),
        cap_sys_nice: read_capability(CAP_SYS_NICE),
        cap_ipc_lock: read_capability(CAP_IPC_LOCK),
        sched_rt_runtime_us: read_i64("/proc/sys/kernel/sched_rt_runtime_us"),
        sched_rt_period_us: read_i64("/proc/sys/kernel/sched_rt_period_us"),
        preemption: preemption_model(version.as_deref(), realtime_sysfs),
        kernel_release: release,
        kernel_version: version,
        realtime_sysfs,
        preempt_dynamic_mode: std::fs::read_to_string("/sys/kernel/debug/sched/preempt")
            .ok()
            .map(|s| s.trim().to_string()),
    }
}

/// Capability bit numbers from linux/capability.h.
const CAP_IPC_LOCK: u32 = 14;
const CAP_SYS_NICE: u32 = 23;

/// Whether the calling thread has `cap` in its effective set: `capget(2)`, which needs no
/// file descriptor (reading /proc/thread-self/status failed when the process had none left,
/// and a capability it held was then reported missing). `None` only if the call fails.
fn read_capability(cap: u32) -> Option<bool> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set.
    let mut header = Header { version: 0x2008_0522, pid: 0 };
    let mut data = [Data::default(); 2];
    // SAFETY: capget reads the header and writes two `Data` (version 3's layout) into
    // memory we own for the duration of the call.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut Header, data.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    let word = data.get((cap / 32) as usize)?;
    Some(word.effective & (1 << (cap % 32)) != 0)
}

/// A "Name:   123 kB" field of /proc/self/status.
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let rest = status.lines().find_map(|l| l.strip_prefix(field))?;
    rest.split_whitespace().next()?.parse().ok()
}

fn read_i64(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn uname_strings() -> (Option<String>, Option<String>) {
    // SAFETY: all-zero bytes is a valid utsname (arrays of c_char).
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is writable; uname fills its fixed-size, NUL-terminated fields.
    if unsafe { libc::uname(&mut u) } != 0 {
        return (None, None);
    }
    let field = |chars: &[libc::c_char]| {
        let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (Some(field(&u.release)), Some(field(&u.version)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_invalid_setting_says_which_and_keeps_its_sentence() {
        let fifo = RtSettings { policy: Policy::Fifo, priority: 0, ..RtSettings::default() };
        let e = validate(&fifo).unwrap_err();
        assert_eq!(e, RtError::Invalid(InvalidSettings::Priority { policy: Policy::Fifo, priority: 0 }));
        assert_eq!(e.to_string(), "invalid real-time settings: SCHED_FIFO priority must be 1..=99, got 0");
        let source = std::error::Error::source(&e).expect("the invalid setting is the source");
        assert_eq!(source.to_string(), "SCHED_FIFO priority must be 1..=99, got 0");

        let d = DeadlineParams { runtime_ns: 500, deadline_ns: 1_000_000, period_ns: 1_000_000 };
        let short = RtSettings { policy: Policy::Deadline, deadline: Some(d), ..RtSettings::default() };
        assert_eq!(validate(&short), Err(RtError::Invalid(InvalidSettings::RuntimeTooShort(d))));

        let e = CpuDmaLatency::hold(-1).unwrap_err();
        assert!(matches!(e, DmaLatencyError::Negative { max_latency_us: -1 }));
        assert_eq!(e.to_string(), "/dev/cpu_dma_latency: a latency bound of -1 µs is negative; give 0 or more");
    }

    /// Each error that wraps another returns it from `source()`, as the type it is.
    #[test]
    fn an_error_with_a_cause_returns_it_as_its_source() {
        use std::error::Error as _;
        let invalid = RtError::Invalid(InvalidSettings::DeadlineMissing);
        let source = invalid.source().and_then(|s| s.downcast_ref::<InvalidSettings>());
        assert_eq!(source, Some(&InvalidSettings::DeadlineMissing));
        assert!(RtError::Refused(Vec::new()).source().is_none(), "refusals are warnings, not errors");

        let denied =
            DmaLatencyError::CannotHold { max_latency_us: 0, source: Some(io::Error::from_raw_os_error(libc::EACCES)) };
        let source = denied.source().and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(source.map(io::Error::kind), Some(io::ErrorKind::PermissionDenied));
        let not_a_device = DmaLatencyError::CannotHold { max_latency_us: 0, source: None };
        assert!(not_a_device.source().is_none(), "no operating-system error to return");
    }

    /// The sentences the derive writes are the ones written by hand before it.
    #[test]
    fn derived_sentences_are_the_users() {
        let limit = OpenFilesError { what: "this run", needed: 100, limit: 64 };
        assert_eq!(
            limit.to_string(),
            "this run needs up to 100 open files (file descriptors) but the process may open only 64 (ulimit -n); \
             raise the limit, e.g. `ulimit -n 1024`"
        );
        let name = UnknownName { kind: "scheduling policy", input: "fast".into(), expected: "other, fifo or rr" };
        assert_eq!(name.to_string(), "unknown scheduling policy 'fast': expected other, fifo or rr");
        let one = Warning { what: Setting::Affinity, message: "CPU 9 does not exist".into() };
        let text = RtError::Refused(vec![one.clone()]).to_string();
        assert_eq!(text, "the system refused 1 real-time request (strict): affinity: CPU 9 does not exist");
        let text = RtError::Refused(vec![one.clone(), one]).to_string();
        assert!(text.starts_with("the system refused 2 real-time requests (strict): affinity: CPU 9"), "{text}");
    }

    #[test]
    fn cpu_lists_parse_and_format() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0-3,8,10-11"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_cpu_list(&[5]), "5");
        assert_eq!(format_cpu_list(&[]), "none");
    }

    proptest! {
        #[test]
        fn cpu_list_round_trips(cpus in proptest::collection::btree_set(0usize..300, 1..40)) {
            let cpus: Vec<usize> = cpus.into_iter().collect();
            prop_assert_eq!(parse_cpu_list(&format_cpu_list(&cpus)), Some(cpus));
        }
    }

    #[test]
    fn preemption_models_are_classified() {
        let m = |v: &str| preemption_model(Some(v), None);
        assert_eq!(m("#1 SMP PREEMPT_DYNAMIC @0"), PreemptionModel::Dynamic);
        assert_eq!(m("#1 SMP PREEMPT_RT Debian 6.1.0-rt"), PreemptionModel::PreemptRt);
        assert_eq!(m("#1 SMP PREEMPT Tue Jan 1"), PreemptionModel::Full);
        assert_eq!(m("#1 SMP Debian 6.1.0"), PreemptionModel::VoluntaryOrNone);
        assert_eq!(preemption_model(None, None), PreemptionModel::Unknown);
        assert_eq!(preemption_model(Some("#1 SMP"), Some(true)), PreemptionModel::PreemptRt);
    }

    #[test]
    fn sched_attr_has_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<SchedAttr>(), 48);
    }

    #[test]
    fn conditions_read_without_panicking() {
        let c = current_conditions();
        assert!(c.affinity.as_ref().is_some_and(|a| !a.is_empty()));
        assert!(c.timer_slack_ns.is_some());
    }

    #[test]
    fn prefault_touches_what_was_asked_on_a_big_stack() {
        let (touched, problem) = std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(|| prefault_stack(128 * 1024))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!((touched, problem), (128 * 1024, None));
    }

    #[test]
    fn prefault_is_capped_on_a_small_stack() {
        let (touched, problem) = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| prefault_stack(4 << 20))
            .unwrap()
            .join()
            .unwrap();
        assert!(touched < 256 * 1024);
        assert!(problem.unwrap().contains("stack_size"));
    }
}
