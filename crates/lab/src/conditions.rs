//! The conditions a latency figure depends on, recorded beside it.
//!
//! [`Conditions::gather`] combines the system (kernel and preemption model, cpufreq
//! governor, cpuidle driver, RT throttling, isolated CPUs) with the settings the measuring
//! thread was given (policy, priority, affinity, timer slack, mlock, load). Everything is read
//! unprivileged; a file that is missing or unreadable becomes `None` (printed as "absent"),
//! because a VM without cpufreq is a condition worth reporting, not an error.
//!
//! What it must never do: panic, require root, or change anything it reads.

use crate::options::CommonOptions;
use serde::Serialize;

const GOVERNOR_PATH: &str = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor";
const IDLE_DRIVER_PATH: &str = "/sys/devices/system/cpu/cpuidle/current_driver";

/// What was in force while an experiment measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Conditions {
    /// `uname -r` and `uname -v`, e.g. "6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian …".
    pub kernel: String,
    /// The preemption model: PREEMPT_RT, PREEMPT_DYNAMIC, PREEMPT, voluntary or none, unknown.
    pub preemption: String,
    /// The active PREEMPT_DYNAMIC mode list when readable (debugfs), e.g. "none voluntary (full)".
    pub preempt_dynamic_mode: Option<String>,
    /// The measuring thread's requested policy: other, fifo, rr or deadline.
    pub policy: String,
    /// The measuring thread's requested sched_priority.
    pub priority: i32,
    /// The CPUs the measuring thread was pinned to; empty: not pinned (inherited).
    pub affinity: Vec<usize>,
    /// The CPUs the process may run on (what "not pinned" means).
    pub process_affinity: Option<Vec<usize>>,
    /// Whether mlockall was requested.
    pub mlock: bool,
    /// Background load workers running during the measurement.
    pub load: usize,
    /// Timer slack requested for the measuring thread, ns (normal threads default to 50 µs).
    pub timer_slack_ns: u64,
    /// The cpufreq governor of CPU 0; `None` when there is no cpufreq (common in VMs).
    pub governor: Option<String>,
    /// The cpuidle driver, e.g. "intel_idle", "acpi_idle", "haltpoll".
    pub idle_driver: Option<String>,
    /// /proc/sys/kernel/sched_rt_runtime_us (-1: RT throttling off).
    pub rt_runtime_us: Option<i64>,
    /// CPUs isolated with isolcpus=.
    pub isolated_cpus: Option<Vec<usize>>,
    /// Online CPUs.
    pub online_cpus: Option<Vec<usize>>,
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

impl Conditions {
    /// The system's conditions plus the settings in `common`, for the measuring thread.
    /// Never panics.
    pub fn gather(common: &CommonOptions) -> Conditions {
        let system = rtloop_rt::setup::current_conditions();
        let kernel = match (&system.kernel_release, &system.kernel_version) {
            (Some(r), Some(v)) => format!("{r} {v}"),
            (Some(r), None) => r.clone(),
            (None, Some(v)) => v.clone(),
            (None, None) => "unknown".to_string(),
        };
        Conditions {
            kernel,
            preemption: system.preemption.to_string(),
            preempt_dynamic_mode: system.preempt_dynamic_mode.clone(),
            policy: common.rt.policy.as_str().to_string(),
            priority: common.rt.priority,
            affinity: common.rt.cpus.clone(),
            process_affinity: system.affinity.clone(),
            mlock: common.rt.mlock,
            load: common.load,
            timer_slack_ns: common.rt.timer_slack_ns,
            governor: read_trimmed(GOVERNOR_PATH),
            idle_driver: read_trimmed(IDLE_DRIVER_PATH),
            rt_runtime_us: system.sched_rt_runtime_us,
            isolated_cpus: system.isolated_cpus.clone(),
            online_cpus: system.online_cpus.clone(),
        }
    }

    /// The conditions with default settings (SCHED_OTHER, no load): for reports about the
    /// system alone.
    pub fn system() -> Conditions {
        Conditions::gather(&CommonOptions::default())
    }

    /// The conditions on one line, for the head of a text report.
    pub fn one_line(&self) -> String {
        let affinity = if self.affinity.is_empty() { "any".to_string() } else { cpu_list(&self.affinity) };
        let rt_runtime = match self.rt_runtime_us {
            Some(-1) => "off".to_string(),
            Some(us) => format!("{us} us/s"),
            None => "absent".to_string(),
        };
        format!(
            "policy {} prio {}, cpus {}, load {}, slack {} ns{}, preemption {}, governor {}, idle {}, rt throttling {}",
            self.policy,
            self.priority,
            affinity,
            self.load,
            self.timer_slack_ns,
            if self.mlock { ", mlock" } else { "" },
            self.preemption,
            self.governor.as_deref().unwrap_or("absent"),
            self.idle_driver.as_deref().unwrap_or("absent"),
            rt_runtime
        )
    }
}

/// "0,2-3" style list.
fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
}
