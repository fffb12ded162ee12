//! Real-time setup against the real kernel. Every check holds both as root (where the
//! requests are granted) and unprivileged (where each refused request must give exactly one
//! warning): as root, the unprivileged half runs in a child process that drops to `nobody`.
//! Requests are made on spawned threads, and mlockall (process-wide) only in child processes,
//! so the rest of the test binary keeps its normal scheduling.

use rtloop_rt::setup::{
    apply_to_current_thread, current_conditions, format_cpu_list, parse_cpu_list, validate, Applied, DeadlineParams,
    Policy, RtError, RtSettings, Setting,
};
use std::os::unix::process::CommandExt;

/// Run `f` on a fresh thread (with room for the default 256 KiB stack prefault).
fn on_new_thread<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    std::thread::Builder::new().stack_size(2 << 20).spawn(f).unwrap().join().unwrap()
}

fn apply_on_new_thread(settings: RtSettings) -> Result<Applied, RtError> {
    on_new_thread(move || apply_to_current_thread(&settings))
}

fn fifo(priority: i32) -> RtSettings {
    RtSettings { policy: Policy::Fifo, priority, ..RtSettings::default() }
}

fn deadline(runtime_ns: u64, deadline_ns: u64, period_ns: u64) -> RtSettings {
    RtSettings {
        policy: Policy::Deadline,
        deadline: Some(DeadlineParams { runtime_ns, deadline_ns, period_ns }),
        ..RtSettings::default()
    }
}

fn is_invalid(r: Result<(), RtError>) -> bool {
    matches!(r, Err(RtError::Invalid(_)))
}

#[test]
fn user_mistakes_are_errors() {
    assert!(is_invalid(validate(&fifo(0))));
    assert!(is_invalid(validate(&fifo(100))));
    assert!(is_invalid(validate(&RtSettings { policy: Policy::RoundRobin, priority: 0, ..RtSettings::default() })));
    assert!(is_invalid(validate(&RtSettings { policy: Policy::Other, priority: 5, ..RtSettings::default() })));
    assert!(is_invalid(validate(&RtSettings { policy: Policy::Deadline, ..RtSettings::default() })));
    assert!(is_invalid(validate(&deadline(2_000_000, 1_000_000, 1_000_000))), "runtime > period");
    assert!(is_invalid(validate(&deadline(500_000, 400_000, 1_000_000))), "runtime > deadline");
    assert!(is_invalid(validate(&deadline(100_000, 2_000_000, 1_000_000))), "deadline > period");
    assert!(is_invalid(validate(&deadline(100, 1_000_000, 1_000_000))), "runtime below 1024 ns");
    let mut fifo_with_params = fifo(10);
    fifo_with_params.deadline = Some(DeadlineParams { runtime_ns: 1, deadline_ns: 2, period_ns: 3 });
    assert!(is_invalid(validate(&fifo_with_params)));

    assert!(validate(&fifo(1)).is_ok());
    assert!(validate(&fifo(99)).is_ok());
    assert!(validate(&deadline(100_000, 1_000_000, 1_000_000)).is_ok());
    assert!(validate(&RtSettings::default()).is_ok());

    // Invalid settings are errors even when not strict, and change nothing.
    let e = apply_on_new_thread(fifo(100)).unwrap_err();
    assert!(e.to_string().contains("1..=99"), "{e}");
}

#[test]
fn policies_parse_and_print() {
    for (text, policy) in
        [("other", Policy::Other), ("fifo", Policy::Fifo), ("rr", Policy::RoundRobin), ("deadline", Policy::Deadline)]
    {
        assert_eq!(text.parse::<Policy>().unwrap(), policy);
        assert_eq!(policy.to_string(), text);
    }
    let e = "FIFO".parse::<Policy>().unwrap_err();
    assert!(e.to_string().contains("other, fifo, rr or deadline"), "{e}");
    assert!("round-robin".parse::<Policy>().is_err());
}

#[test]
fn default_settings_with_one_ns_slack_apply_cleanly() {
    let a = apply_on_new_thread(RtSettings { timer_slack_ns: 1, ..RtSettings::default() }).unwrap();
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    assert_eq!(a.policy, Policy::Other);
    assert_eq!(a.priority, 0);
    assert_eq!(a.timer_slack_ns, 1);
    assert_eq!(a.stack_prefaulted_bytes, 256 * 1024);
    assert!(!a.mlocked);
}

#[test]
fn zero_slack_means_one_ns_not_the_default() {
    let a = apply_on_new_thread(RtSettings { timer_slack_ns: 0, ..RtSettings::default() }).unwrap();
    assert_eq!(a.timer_slack_ns, 1);
}

/// Whether this process may use real-time priorities at all (root, CAP_SYS_NICE or an rtprio
/// limit); only then is a refusal unexpected — and it still is not asserted against, because
/// containers and cgroups can refuse even root.
fn granted_or_one_scheduler_warning(a: &Applied, wanted: Policy) {
    if a.warnings.is_empty() {
        assert_eq!(a.policy, wanted, "{a:?}");
    } else {
        assert_eq!(a.warnings.len(), 1, "{:?}", a.warnings);
        assert_eq!(a.warnings[0].what, Setting::Scheduler);
        assert!(a.warnings[0].message.contains(wanted.kernel_name()), "{}", a.warnings[0]);
        assert_ne!(a.policy, wanted);
    }
}

#[test]
fn fifo_is_granted_or_warned_once() {
    let a = apply_on_new_thread(fifo(10)).unwrap();
    granted_or_one_scheduler_warning(&a, Policy::Fifo);
    if a.warnings.is_empty() {
        assert_eq!(a.priority, 10);
        eprintln!("SCHED_FIFO 10 granted; notes: {:?}", a.notes);
    } else {
        eprintln!("SCHED_FIFO refused: {}", a.warnings[0]);
    }
}

#[test]
fn round_robin_is_granted_or_warned_once() {
    let a =
        apply_on_new_thread(RtSettings { policy: Policy::RoundRobin, priority: 5, ..RtSettings::default() }).unwrap();
    granted_or_one_scheduler_warning(&a, Policy::RoundRobin);
    if a.warnings.is_empty() {
        assert_eq!(a.priority, 5);
    }
}

#[test]
fn deadline_is_granted_or_warned_once() {
    let params = DeadlineParams { runtime_ns: 100_000, deadline_ns: 1_000_000, period_ns: 1_000_000 };
    let a =
        apply_on_new_thread(RtSettings { policy: Policy::Deadline, deadline: Some(params), ..RtSettings::default() })
            .unwrap();
    granted_or_one_scheduler_warning(&a, Policy::Deadline);
    if a.warnings.is_empty() {
        assert_eq!(a.deadline, Some(params));
        eprintln!("SCHED_DEADLINE granted: {:?}", a.deadline);
    } else {
        eprintln!("SCHED_DEADLINE refused: {}", a.warnings[0]);
    }
}

#[test]
fn deadline_with_narrow_affinity_is_granted_or_explained() {
    let params = DeadlineParams { runtime_ns: 100_000, deadline_ns: 1_000_000, period_ns: 1_000_000 };
    let a = apply_on_new_thread(RtSettings {
        policy: Policy::Deadline,
        deadline: Some(params),
        cpus: vec![0],
        ..RtSettings::default()
    })
    .unwrap();
    granted_or_one_scheduler_warning(&a, Policy::Deadline);
    if let Some(w) = a.warnings.first() {
        eprintln!("SCHED_DEADLINE on CPU 0 refused: {w}");
    }
}

#[test]
fn an_impossible_cpu_gives_one_warning_naming_the_cpus_that_exist() {
    let before = on_new_thread(|| current_conditions().affinity.unwrap());
    let a = apply_on_new_thread(RtSettings { cpus: vec![4096], ..RtSettings::default() }).unwrap();
    assert_eq!(a.warnings.len(), 1, "{:?}", a.warnings);
    let w = &a.warnings[0];
    assert_eq!(w.what, Setting::Affinity);
    assert!(w.message.contains("CPU 4096 does not exist"), "{w}");
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").ok().and_then(|s| parse_cpu_list(&s));
    if let Some(online) = online {
        assert!(w.message.contains(&format!("this machine has CPUs {}", format_cpu_list(&online))), "{w}");
    }
    assert_eq!(a.cpus, before, "affinity left unchanged");
    // The rest of the request still applied.
    assert_eq!(a.timer_slack_ns, 1);

    let strict = apply_on_new_thread(RtSettings { cpus: vec![4096], strict: true, ..RtSettings::default() });
    match strict {
        Err(RtError::Refused(ws)) => assert_eq!(ws.iter().map(|w| w.what).collect::<Vec<_>>(), [Setting::Affinity]),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn strict_names_every_refusal_in_one_sentence() {
    // Two requests this machine refuses whatever the privileges: a CPU that does not exist,
    // and a stack prefault larger than the thread's stack.
    let settings =
        RtSettings { cpus: vec![4096], prefault_stack_bytes: 64 << 20, strict: true, ..RtSettings::default() };
    let e = apply_on_new_thread(settings).unwrap_err();
    let RtError::Refused(ws) = &e else { panic!("expected refusals, got {e:?}") };
    assert_eq!(ws.iter().map(|w| w.what).collect::<Vec<_>>(), [Setting::Affinity, Setting::StackPrefault]);
    let text = e.to_string();
    assert!(text.starts_with("the system refused 2 real-time requests (strict): affinity: CPU 4096"), "{text}");
    assert!(text.contains("; stack-prefault: "), "{text}");
    assert_eq!(text.matches("refused 2").count(), 1, "said once: {text}");
    assert_eq!(text.lines().count(), 1, "{text}");
}

#[test]
fn a_real_cpu_is_pinned() {
    let a = apply_on_new_thread(RtSettings { cpus: vec![0], ..RtSettings::default() }).unwrap();
    // A cpuset may exclude CPU 0; then the one warning says so.
    if a.warnings.is_empty() {
        assert_eq!(a.cpus, vec![0]);
    } else {
        assert_eq!(a.warnings.len(), 1);
        assert_eq!(a.warnings[0].what, Setting::Affinity);
    }
}

#[test]
fn conditions_are_readable() {
    let c = current_conditions();
    assert!(c.affinity.is_some());
    assert!(c.kernel_version.is_some());
    assert!(c.rlimit_rtprio.is_some() && c.rlimit_memlock.is_some());
    eprintln!("{c:#?}");
}

// ---------------------------------------------------------------------------------------
// Checks that need their own process: mlockall locks the whole process, and the
// unprivileged checks need a process without root.

const CHILD_ENV: &str = "RTLOOP_RT_SETUP_CHILD";

/// Re-run this test binary with only `child_entry`, as `uid` if given.
fn run_child(role: &str, uid: Option<u32>) -> String {
    let mut cmd = rtloop_testkit::this_test_binary();
    cmd.args(["--exact", &rtloop_testkit::test_path(module_path!(), "child_entry"), "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, role);
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let out = cmd.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "child '{role}' failed:\n{text}");
    assert!(text.contains(&format!("child {role} done")), "child '{role}' did not run:\n{text}");
    text
}

#[test]
fn child_entry() {
    match std::env::var(CHILD_ENV).as_deref() {
        Ok("mlock") => child_mlock(),
        Ok("unprivileged") => child_unprivileged(),
        _ => return, // an ordinary run: nothing to do here
    }
    println!("child {} done", std::env::var(CHILD_ENV).unwrap());
}

fn child_mlock() {
    let a = apply_on_new_thread(RtSettings { mlock: true, ..RtSettings::default() }).unwrap();
    if a.warnings.is_empty() {
        assert!(a.mlocked);
        assert!(a.locked_kib.is_some_and(|k| k > 0), "{a:?}");
        println!("mlockall granted, {:?} KiB locked, notes {:?}", a.locked_kib, a.notes);
    } else {
        assert_eq!(a.warnings.len(), 1, "{:?}", a.warnings);
        assert_eq!(a.warnings[0].what, Setting::MemoryLock);
        assert!(a.warnings[0].message.contains("mlockall refused"), "{}", a.warnings[0]);
        assert!(!a.mlocked);
        println!("mlockall refused: {}", a.warnings[0]);
    }
}

#[test]
fn mlock_works_or_warns() {
    let out = run_child("mlock", None);
    eprintln!("{out}");
}

/// Runs without privileges: real-time requests must each give one clear warning (unless this
/// user has an rtprio limit or CAP_SYS_NICE), and strict must turn it into an error.
fn child_unprivileged() {
    let c = current_conditions();
    let may_rt = c.cap_sys_nice == Some(true) || c.rlimit_rtprio.is_some_and(|l| l.soft.is_none_or(|s| s >= 10));
    println!("euid {} cap_sys_nice {:?} rtprio {:?}", c.euid, c.cap_sys_nice, c.rlimit_rtprio);

    let a = apply_on_new_thread(RtSettings { timer_slack_ns: 1, ..RtSettings::default() }).unwrap();
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    assert_eq!(a.timer_slack_ns, 1);

    let a = apply_on_new_thread(fifo(10)).unwrap();
    granted_or_one_scheduler_warning(&a, Policy::Fifo);
    if !may_rt {
        let m = &a.warnings[0].message;
        assert!(m.starts_with("SCHED_FIFO priority 10 refused (EPERM)"), "{m}");
        assert!(m.contains("ulimit -r") && m.contains("CAP_SYS_NICE"), "{m}");
        println!("unprivileged FIFO: {m}");
        match apply_on_new_thread(RtSettings { strict: true, ..fifo(10) }) {
            Err(RtError::Refused(ws)) => {
                assert_eq!(ws.iter().map(|w| w.what).collect::<Vec<_>>(), [Setting::Scheduler])
            }
            other => panic!("strict should refuse: {other:?}"),
        }
    }

    let a = apply_on_new_thread(deadline(100_000, 1_000_000, 1_000_000)).unwrap();
    granted_or_one_scheduler_warning(&a, Policy::Deadline);
    if c.cap_sys_nice != Some(true) {
        let m = &a.warnings[0].message;
        assert!(m.contains("refused (EPERM)") && m.contains("CAP_SYS_NICE"), "{m}");
        println!("unprivileged DEADLINE: {m}");
    }

    // Last, because if it succeeds every later allocation counts against RLIMIT_MEMLOCK.
    let a = apply_on_new_thread(RtSettings { mlock: true, ..RtSettings::default() }).unwrap();
    if let Some(w) = a.warnings.first() {
        assert_eq!(a.warnings.len(), 1, "{:?}", a.warnings);
        assert_eq!(w.what, Setting::MemoryLock);
        println!("unprivileged mlock: {w}");
    } else {
        assert!(a.mlocked);
        println!("unprivileged mlock granted; notes {:?}", a.notes);
    }
}

#[test]
fn unprivileged_requests_warn_once_each() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    // As root, drop to nobody (65534) in the child; otherwise the child is already unprivileged.
    let out = run_child("unprivileged", root.then_some(65534));
    eprintln!("{out}");
}
