//! The kernel's checks: preemption model, isolated and tickless CPUs, frequency and idle
//! states, interrupt affinity, real-time throttling, the limits of the doctor's own process,
//! swap, huge pages, timer migration, clocksource.

use super::{check, Check, Machine, Status};
use rtloop_rt::setup::{format_cpu_list, parse_cpu_list, PreemptionModel};
use std::fmt::Write as _;

const CPU_DIR: &str = "/sys/devices/system/cpu";

/// What several kernel checks read: `uname -r` and `-v` (as /proc/sys/kernel gives them), the
/// preemption model, the command line, the online and isolated CPUs.
pub(crate) struct Kernel {
    pub release: Option<String>,
    pub version: Option<String>,
    pub realtime_sysfs: Option<bool>,
    pub preemption: PreemptionModel,
    pub dynamic_mode: Option<String>,
    pub cmdline: String,
    pub online: Vec<usize>,
    pub isolated: Vec<usize>,
}

impl Kernel {
    pub(crate) fn read(m: &Machine) -> Kernel {
        let release = m.read("/proc/sys/kernel/osrelease").ok();
        let version = m.read("/proc/sys/kernel/version").ok();
        let realtime_sysfs = m.read("/sys/kernel/realtime").ok().map(|s| s == "1");
        Kernel {
            preemption: rtloop_rt::setup::preemption_model(version.as_deref(), realtime_sysfs),
            release,
            version,
            realtime_sysfs,
            dynamic_mode: m.read("/sys/kernel/debug/sched/preempt").ok(),
            cmdline: m.read("/proc/cmdline").unwrap_or_default(),
            online: m.cpu_list(&format!("{CPU_DIR}/online")).unwrap_or_default(),
            isolated: m.cpu_list(&format!("{CPU_DIR}/isolated")).unwrap_or_default(),
        }
    }
}

/// The value of `key=` on the kernel command line, the last one winning as in the kernel.
fn cmdline_param(cmdline: &str, key: &str) -> Option<String> {
    // Everything after a lone "--" goes to init, not to the kernel.
    let kernel_part = cmdline.split(" -- ").next().unwrap_or(cmdline);
    kernel_part
        .split_whitespace()
        .filter_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .next_back()
        .map(str::to_string)
}

/// The CPUs that can take real-time work: all online ones but the first, which keeps the
/// housekeeping (the usual isolcpus advice; "1" on a 2-CPU machine).
fn suggested_isolated(online: &[usize]) -> String {
    match online {
        [] | [_] => "N".into(),
        [_, rest @ ..] => format_cpu_list(rest),
    }
}

/// The CPUs left for everything else: the online ones that are not isolated ("0" when that
/// leaves none, or nothing is known).
pub(crate) fn housekeeping(online: &[usize], isolated: &[usize]) -> String {
    let rest: Vec<usize> = online.iter().copied().filter(|c| !isolated.contains(c)).collect();
    if rest.is_empty() {
        "0".into()
    } else {
        format_cpu_list(&rest)
    }
}

/// The kernel's checks, in the order of [`super::CHECK_NAMES`].
pub fn checks(m: &Machine) -> Vec<Check> {
    let k = Kernel::read(m);
    let (online, isolated) = (&k.online, &k.isolated);
    let mut out = vec![
        preempt_rt(m, &k),
        preemption_model(&k),
        isolcpus(m, online, isolated),
        nohz_full(m, online, isolated),
        rcu_nocbs(online, &k.cmdline),
        cpufreq(m, online),
        cpuidle(m),
        cpu_dma_latency(m),
        irq_affinity(m, online, isolated),
        rt_throttling(m),
    ];
    out.extend(rlimits(m));
    out.extend([swap(m), transparent_hugepages(m), timer_migration(m), clocksource(m), kernel(&k)]);
    out
}

fn preempt_rt(m: &Machine, k: &Kernel) -> Check {
    let sysfs = match k.realtime_sysfs {
        Some(true) => "/sys/kernel/realtime = 1",
        Some(false) => "/sys/kernel/realtime = 0",
        None => "/sys/kernel/realtime absent",
    };
    let version = k.version.as_deref().unwrap_or("uname -v unreadable");
    let value = format!("{sysfs}; uname -v: {version}");
    if k.preemption == PreemptionModel::PreemptRt {
        return check("preempt-rt", Status::Pass, value, None);
    }
    let how = if m.device_model().is_some_and(|model| model.starts_with("Raspberry Pi")) {
        "on a Raspberry Pi, the Raspberry Pi kernel built with CONFIG_PREEMPT_RT (docs/robot.md, \"A PREEMPT_RT \
         kernel\")"
    } else {
        "Debian: apt install linux-image-rt-amd64, or linux-image-rt-arm64"
    };
    check(
        "preempt-rt",
        Status::Warn,
        format!("not PREEMPT_RT ({value})"),
        Some(format!("boot a PREEMPT_RT kernel ({how}) for bounded latency; this one gives soft real time only")),
    )
}

/// The active PREEMPT_DYNAMIC mode: the parenthesised word of debugfs' "none voluntary (full) lazy".
fn active_dynamic_mode(debugfs: &str) -> Option<&str> {
    debugfs.split_whitespace().find_map(|w| w.strip_prefix('(')?.strip_suffix(')'))
}

fn preemption_model(k: &Kernel) -> Check {
    use PreemptionModel as M;
    const FIX: &str = "add preempt=full to the kernel command line (or, as root with debugfs mounted: echo full > \
                       /sys/kernel/debug/sched/preempt); better, a PREEMPT_RT kernel";
    match k.preemption {
        M::PreemptRt => check("preemption-model", Status::Pass, "PREEMPT_RT (fully preemptible)", None),
        M::Full => check("preemption-model", Status::Pass, "PREEMPT (full, built in)", None),
        M::VoluntaryOrNone => check(
            "preemption-model",
            Status::Warn,
            "voluntary or none (built in): kernel code runs to its next preemption point",
            Some(
                "a kernel built with CONFIG_PREEMPT or PREEMPT_DYNAMIC booted with preempt=full, or PREEMPT_RT".into(),
            ),
        ),
        M::Unknown => check("preemption-model", Status::Warn, "unknown: uname -v unreadable", None),
        M::Dynamic => {
            let (mode, source) = match k.dynamic_mode.as_deref().and_then(active_dynamic_mode) {
                Some(m) => (Some(m.to_string()), "from /sys/kernel/debug/sched/preempt"),
                None => match cmdline_param(&k.cmdline, "preempt") {
                    Some(m) => (Some(m), "from preempt= on the kernel command line"),
                    None => (None, ""),
                },
            };
            match mode {
                Some(m) if m == "full" => {
                    check("preemption-model", Status::Pass, format!("PREEMPT_DYNAMIC, mode full ({source})"), None)
                }
                Some(m) => check(
                    "preemption-model",
                    Status::Warn,
                    format!("PREEMPT_DYNAMIC, mode {m} ({source})"),
                    Some(FIX.into()),
                ),
                None => check(
                    "preemption-model",
                    Status::Warn,
                    "PREEMPT_DYNAMIC, mode unknown: /sys/kernel/debug/sched/preempt unreadable (debugfs not \
                     mounted or not root) and no preempt= on the kernel command line, so the build default \
                     (often voluntary)",
                    Some(FIX.into()),
                ),
            }
        }
    }
}

fn isolcpus(m: &Machine, online: &[usize], isolated: &[usize]) -> Check {
    let n = suggested_isolated(online);
    let fix = format!("kernel command line: isolcpus={n} nohz_full={n} rcu_nocbs={n}, then pin the loop there (--cpu)");
    if online.len() < 2 {
        return check("isolcpus", Status::Info, "one CPU online: nothing to isolate", None);
    }
    match m.read(&format!("{CPU_DIR}/isolated")) {
        Err(why) => check("isolcpus", Status::Warn, why, Some(fix)),
        Ok(_) if isolated.is_empty() => {
            check("isolcpus", Status::Warn, format!("no CPU isolated (online {})", format_cpu_list(online)), Some(fix))
        }
        Ok(_) => check("isolcpus", Status::Pass, format!("isolated {}", format_cpu_list(isolated)), None),
    }
}

fn nohz_full(m: &Machine, online: &[usize], isolated: &[usize]) -> Check {
    let target = if isolated.is_empty() { suggested_isolated(online) } else { format_cpu_list(isolated) };
    let fix = Some(format!("kernel command line: nohz_full={target} (with isolcpus= and rcu_nocbs= on the same CPUs)"));
    match m.read(&format!("{CPU_DIR}/nohz_full")) {
        Err(why) => check(
            "nohz_full",
            Status::Warn,
            format!("{why} (kernel built without CONFIG_NO_HZ_FULL: the tick interrupts every CPU)"),
            fix,
        ),
        Ok(text) => match parse_cpu_list(&text).filter(|c| !c.is_empty()) {
            None => check("nohz_full", Status::Warn, "no CPU runs tickless", fix),
            Some(cpus) if !isolated.iter().all(|c| cpus.contains(c)) => check(
                "nohz_full",
                Status::Warn,
                format!("tickless {} does not cover the isolated CPUs", format_cpu_list(&cpus)),
                fix,
            ),
            Some(cpus) => check("nohz_full", Status::Pass, format!("tickless {}", format_cpu_list(&cpus)), None),
        },
    }
}

fn rcu_nocbs(online: &[usize], cmdline: &str) -> Check {
    let fix = Some(format!(
        "kernel command line: rcu_nocbs={} (RCU callbacks then run elsewhere)",
        suggested_isolated(online)
    ));
    match cmdline_param(cmdline, "rcu_nocbs") {
        Some(v) => check("rcu_nocbs", Status::Pass, format!("rcu_nocbs={v} on the kernel command line"), None),
        None if cmdline.is_empty() => check("rcu_nocbs", Status::Warn, "/proc/cmdline unreadable", fix),
        None => check("rcu_nocbs", Status::Warn, "not on the kernel command line: RCU callbacks run on every CPU", fix),
    }
}

fn cpufreq(m: &Machine, online: &[usize]) -> Check {
    let governors: Vec<(usize, String)> = online
        .iter()
        .filter_map(|&cpu| Some((cpu, m.read(&format!("{CPU_DIR}/cpu{cpu}/cpufreq/scaling_governor")).ok()?)))
        .collect();
    if governors.is_empty() {
        return check(
            "cpufreq-governor",
            Status::Info,
            format!("no cpufreq ({CPU_DIR}/cpu*/cpufreq absent): the hypervisor or firmware controls frequency"),
            None,
        );
    }
    let value = governors.iter().map(|(cpu, g)| format!("cpu{cpu} {g}")).collect::<Vec<_>>().join(", ");
    if governors.iter().all(|(_, g)| g == "performance") {
        check("cpufreq-governor", Status::Pass, value, None)
    } else {
        check(
            "cpufreq-governor",
            Status::Warn,
            value,
            Some("cpupower frequency-set -g performance (or echo performance > /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)".into()),
        )
    }
}

fn cpuidle(m: &Machine) -> Check {
    let fix = "cpupower idle-set -D 0 (disable states with exit latency > 0), or kernel idle=poll or \
               processor.max_cstate=1, or hold /dev/cpu_dma_latency at 0 while the loop runs (as cyclictest does)";
    let driver = match m.read(&format!("{CPU_DIR}/cpuidle/current_driver")) {
        Ok(d) => d,
        Err(why) => {
            return check("cpuidle", Status::Info, format!("no cpuidle driver ({why}): the default idle loop"), None)
        }
    };
    // cpu0's states stand for all: drivers register the same table on every CPU.
    let mut states = Vec::new();
    let mut deep = false;
    for i in 0.. {
        let dir = format!("{CPU_DIR}/cpu0/cpuidle/state{i}");
        let Ok(name) = m.read(&format!("{dir}/name")) else { break };
        let latency: u64 = m.read(&format!("{dir}/latency")).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
        let disabled = m.read(&format!("{dir}/disable")).is_ok_and(|s| s == "1");
        deep |= !disabled && latency > 0;
        states.push(format!("{name} {latency} µs{}", if disabled { " (disabled)" } else { "" }));
    }
    let mut value =
        format!("driver {driver}; states: {}", if states.is_empty() { "none".into() } else { states.join(", ") });
    if driver.contains("haltpoll") {
        if let Ok(ns) = m.read("/sys/module/haltpoll/parameters/guest_halt_poll_ns") {
            write!(value, "; guest_halt_poll_ns {ns}").ok();
        }
        value.push_str(" (a halted vCPU is woken through the hypervisor)");
    }
    if driver.contains("haltpoll") || deep {
        check("cpuidle", Status::Warn, value, Some(fix.into()))
    } else {
        check("cpuidle", Status::Pass, value, None)
    }
}

fn cpu_dma_latency(m: &Machine) -> Check {
    const PATH: &str = "/dev/cpu_dma_latency";
    match std::fs::metadata(m.path(PATH)) {
        Err(_) => check(
            "cpu_dma_latency",
            Status::Warn,
            format!("absent: {PATH}"),
            Some("a kernel with CONFIG_CPU_IDLE / PM QoS, or kernel idle=poll".into()),
        ),
        Ok(_) => {
            // Reading returns the current system-wide limit; opening adds a request with the
            // default value (no constraint) for as long as the file is open, changing nothing.
            let current = m.read_bytes(PATH).and_then(|b| Some(i32::from_ne_bytes(b.get(..4)?.try_into().ok()?)));
            let value = match current {
                Some(us) => format!("present; current limit {us} µs (0 keeps CPUs out of deep idle)"),
                None => "present (its current limit is readable by root only)".to_string(),
            };
            check("cpu_dma_latency", Status::Pass, value, None)
        }
    }
}

/// A hex CPU mask as in /proc/irq/default_smp_affinity ("3", "ff,ffffffff").
fn parse_cpu_mask(text: &str) -> Option<Vec<usize>> {
    let hex: String = text.trim().chars().filter(|&c| c != ',').collect();
    let mut cpus = Vec::new();
    for (i, digit) in hex.chars().rev().enumerate() {
        let nibble = digit.to_digit(16)? as usize;
        cpus.extend((0..4).filter(|b| nibble & (1 << b) != 0).map(|b| i * 4 + b));
    }
    Some(cpus)
}

fn irq_affinity(m: &Machine, online: &[usize], isolated: &[usize]) -> Check {
    let default = match m.read("/proc/irq/default_smp_affinity") {
        Ok(mask) => {
            let cpus = parse_cpu_mask(&mask).map(|c| format_cpu_list(&c)).unwrap_or_else(|| "?".into());
            format!("default_smp_affinity {mask} (CPUs {cpus})")
        }
        Err(why) => why,
    };
    if isolated.is_empty() {
        return check(
            "irq-affinity",
            Status::Info,
            format!("{default}; no isolated CPU, so every IRQ may land on the loop's CPU"),
            None,
        );
    }
    let mut landing = Vec::new();
    for irq in m.list("/proc/irq") {
        let Ok(list) = m.read(&format!("/proc/irq/{irq}/smp_affinity_list")) else { continue };
        if parse_cpu_list(&list).is_some_and(|cpus| cpus.iter().any(|c| isolated.contains(c))) {
            landing.push(irq);
        }
    }
    landing.sort_by_key(|s| s.parse::<u32>().unwrap_or(u32::MAX));
    let housekeeping = housekeeping(online, isolated);
    if landing.is_empty() {
        check("irq-affinity", Status::Pass, format!("{default}; no IRQ may land on the isolated CPUs"), None)
    } else {
        check(
            "irq-affinity",
            Status::Warn,
            format!("{default}; IRQs {} may land on isolated CPUs", landing.join(",")),
            Some(format!(
                "kernel command line irqaffinity={housekeeping} (the housekeeping CPUs), or echo {housekeeping} \
                 into /proc/irq/*/smp_affinity_list; stop irqbalance or ban the isolated CPUs from it \
                 (IRQBALANCE_BANNED_CPULIST={})",
                format_cpu_list(isolated)
            )),
        )
    }
}

fn rt_throttling(m: &Machine) -> Check {
    let period = m.number("/proc/sys/kernel/sched_rt_period_us").unwrap_or(1_000_000);
    match m.number("/proc/sys/kernel/sched_rt_runtime_us") {
        None => check("sched_rt_runtime_us", Status::Warn, "unreadable: /proc/sys/kernel/sched_rt_runtime_us", None),
        Some(r) if r < 0 => check("sched_rt_runtime_us", Status::Pass, "-1 (RT throttling off)", None),
        Some(r) => check(
            "sched_rt_runtime_us",
            Status::Warn,
            format!(
                "{r} of sched_rt_period_us {period}: a busy-polling SCHED_FIFO thread is stopped for {} ms every {} s",
                (period - r).max(0) / 1000,
                period as f64 / 1e6
            ),
            Some("echo -1 > /proc/sys/kernel/sched_rt_runtime_us (sysctl kernel.sched_rt_runtime_us=-1)".into()),
        ),
    }
}

fn rlimits(m: &Machine) -> [Check; 2] {
    let Some(c) = m.process("self") else {
        let why = "unreadable: /proc/self/status";
        return [check("rlimit-rtprio", Status::Warn, why, None), check("rlimit-memlock", Status::Warn, why, None)];
    };
    let root = c.euid == Some(0);
    let shown = |l: Option<rtloop_rt::setup::ResourceLimit>, unit: &str, div: u64| match l {
        None => "unreadable".to_string(),
        Some(l) => {
            let one = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| format!("{}{unit}", v / div));
            format!("soft {} hard {}", one(l.soft), one(l.hard))
        }
    };
    let rtprio_value = shown(c.rlimit_rtprio, "", 1);
    let memlock_value = shown(c.rlimit_memlock, " KiB", 1024);
    let rtprio = if root || c.cap_sys_nice == Some(true) {
        check(
            "rlimit-rtprio",
            Status::Pass,
            format!("{rtprio_value}; {} bypasses it (CAP_SYS_NICE)", if root { "root" } else { "this process" }),
            None,
        )
    } else {
        let soft = c.rlimit_rtprio.and_then(|l| l.soft.map_or(Some(99), Some)).unwrap_or(0);
        let fix =
            Some("/etc/security/limits.conf: `USER - rtprio 99` (then log in again), or grant CAP_SYS_NICE".into());
        match soft {
            0 => check("rlimit-rtprio", Status::Fail, format!("{rtprio_value}: SCHED_FIFO/RR will be refused"), fix),
            p if p < 99 => check("rlimit-rtprio", Status::Warn, format!("{rtprio_value}: priorities up to {p}"), fix),
            _ => check("rlimit-rtprio", Status::Pass, rtprio_value, None),
        }
    };
    let memlock = if root || c.cap_ipc_lock == Some(true) {
        check(
            "rlimit-memlock",
            Status::Pass,
            format!("{memlock_value}; {} bypasses it (CAP_IPC_LOCK)", if root { "root" } else { "this process" }),
            None,
        )
    } else if c.rlimit_memlock.is_some_and(|l| l.soft.is_none()) {
        check("rlimit-memlock", Status::Pass, memlock_value, None)
    } else {
        check(
            "rlimit-memlock",
            Status::Warn,
            format!("{memlock_value}: mlockall (--mlock) fails once the process outgrows it"),
            Some(
                "/etc/security/limits.conf: `USER - memlock unlimited` (then log in again), or grant CAP_IPC_LOCK"
                    .into(),
            ),
        )
    };
    [rtprio, memlock]
}

fn swap(m: &Machine) -> Check {
    match m.read("/proc/swaps") {
        Err(why) => check("swap", Status::Info, why, None),
        Ok(text) => {
            let devices: Vec<(String, u64)> = text
                .lines()
                .skip(1)
                .filter_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    Some((f.first()?.to_string(), f.get(2)?.parse().ok()?))
                })
                .collect();
            if devices.is_empty() {
                check("swap", Status::Pass, "no active swap", None)
            } else {
                let total_kib: u64 = devices.iter().map(|d| d.1).sum();
                let names = devices.iter().map(|d| d.0.as_str()).collect::<Vec<_>>().join(", ");
                check(
                    "swap",
                    Status::Warn,
                    format!("{} active ({names}), {} MiB", devices.len(), total_kib / 1024),
                    Some("swapoff -a, or run the loop with --mlock (mlockall) so its pages never swap out".into()),
                )
            }
        }
    }
}

fn transparent_hugepages(m: &Machine) -> Check {
    const PATH: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
    match m.read(PATH) {
        Err(why) => check("transparent-hugepages", Status::Info, why, None),
        Ok(text) => {
            let mode = active_bracketed(&text).unwrap_or("unknown").to_string();
            if mode == "always" {
                check(
                    "transparent-hugepages",
                    Status::Warn,
                    format!("always ({text}): page faults may stall on compaction"),
                    Some(format!("echo madvise > {PATH} (or kernel transparent_hugepage=madvise)")),
                )
            } else {
                check("transparent-hugepages", Status::Pass, format!("{mode} ({text})"), None)
            }
        }
    }
}

/// The bracketed word of a sysfs choice list, e.g. "madvise" in "always [madvise] never".
fn active_bracketed(text: &str) -> Option<&str> {
    text.split_whitespace().find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
}

fn timer_migration(m: &Machine) -> Check {
    const PATH: &str = "/proc/sys/kernel/timer_migration";
    match m.read(PATH) {
        Err(why) => check("timer_migration", Status::Info, why, None),
        Ok(v) if v == "0" => check("timer_migration", Status::Pass, "0", None),
        Ok(v) => check(
            "timer_migration",
            Status::Warn,
            format!("{v}: timers may move to (and wake) other CPUs"),
            Some(format!("echo 0 > {PATH} (sysctl kernel.timer_migration=0)")),
        ),
    }
}

fn clocksource(m: &Machine) -> Check {
    let dir = "/sys/devices/system/clocksource/clocksource0";
    let available = m.read(&format!("{dir}/available_clocksource")).unwrap_or_default();
    match m.read(&format!("{dir}/current_clocksource")) {
        Err(why) => check("clocksource", Status::Warn, why, None),
        // The counters clock_gettime reads in user space (the vDSO): x86's TSC, Arm's generic timer.
        Ok(cs) if cs == "tsc" || cs == "arch_sys_counter" => {
            check("clocksource", Status::Pass, format!("{cs} (available: {available})"), None)
        }
        Ok(cs) => {
            let note = if cs == "kvm-clock" {
                "kvm-clock is fine in a VM (read in user space through the vDSO), but costs more per read than tsc"
            } else {
                "clock_gettime may become a system call with this clocksource"
            };
            let fix = available
                .split_whitespace()
                .any(|a| a == "tsc")
                .then(|| format!("echo tsc > {dir}/current_clocksource (or kernel clocksource=tsc)"));
            check("clocksource", Status::Warn, format!("{cs}: {note} (available: {available})"), fix)
        }
    }
}

fn kernel(k: &Kernel) -> Check {
    let value = match (&k.release, &k.version) {
        (Some(r), Some(v)) => format!("{r} {v}"),
        _ => "uname unreadable".to_string(),
    };
    check("kernel", Status::Info, value, None)
}
