//! The doctor: every listed check comes back with a value, it never needs privileges, and its
//! JSON line agrees with the table. No verdict is asserted that depends on the machine, except
//! the two that this VM's files decide (no /sys/kernel/realtime, no cpufreq).

use rtloop_lab::doctor::{Machine, Status, CHECK_NAMES};
use std::path::Path;
use std::process::Command;

/// Set in the child that runs the doctor as `nobody`.
const CHILD_ENV: &str = "RTLOOP_DOCTOR_CHILD";

#[test]
fn every_listed_check_is_returned_with_a_value() {
    let found = rtloop_lab::doctor::checks(&Machine::this());
    let names: Vec<&str> = found.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, CHECK_NAMES);
    for c in &found {
        assert!(!c.value.trim().is_empty(), "{} has an empty value", c.name);
        if c.status == Status::Pass {
            assert!(c.fix.is_none(), "{} passes but names a fix", c.name);
        }
    }
}

#[test]
fn json_summary_counts_the_statuses() {
    let out = rtloop_lab::doctor::run(&Machine::this(), true);
    let last = out.lines().last().expect("output");
    let v: serde_json::Value = serde_json::from_str(last).expect("last line is JSON");
    let list = v["checks"].as_array().expect("checks list");
    assert_eq!(list.len(), CHECK_NAMES.len());
    for status in ["pass", "warn", "fail", "info"] {
        let counted = list.iter().filter(|c| c["status"] == status).count() as u64;
        assert_eq!(v["summary"][status].as_u64(), Some(counted), "summary.{status}");
    }
    // The table names every check too.
    for name in CHECK_NAMES {
        assert!(out.contains(name), "table lacks {name}");
    }
}

#[test]
fn without_json_there_is_no_json_line() {
    assert!(!rtloop_lab::doctor::run(&Machine::this(), false).lines().any(|l| l.starts_with('{')));
}

#[test]
fn this_vm_is_reported_honestly() {
    let found = rtloop_lab::doctor::checks(&Machine::this());
    let get = |name: &str| found.iter().find(|c| c.name == name).unwrap().clone();
    if !Path::new("/sys/kernel/realtime").exists() {
        let c = get("preempt-rt");
        assert_ne!(c.status, Status::Pass);
        assert!(c.fix.as_deref().unwrap_or("").contains("PREEMPT_RT"));
    }
    if !Path::new("/sys/devices/system/cpu/cpu0/cpufreq").exists() {
        assert_eq!(get("cpufreq-governor").status, Status::Info);
    }
}

/// The child half of `runs_unprivileged`: prints the doctor's output when asked to.
#[test]
fn doctor_child() {
    if std::env::var_os(CHILD_ENV).is_some() {
        print!("{}", rtloop_lab::doctor::run(&Machine::this(), true));
    }
}

#[test]
fn runs_unprivileged() {
    // SAFETY: geteuid has no arguments and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].into_iter().find(|p| Path::new(p).exists());
    let (true, Some(setpriv)) = (root, setpriv) else {
        // Already unprivileged (or no way to drop privileges): calling it is the test.
        let out = rtloop_lab::doctor::run(&Machine::this(), true);
        assert!(out.lines().last().unwrap().starts_with('{'));
        return;
    };
    // `nobody` may not be able to reach the build directory, so run a copy from /tmp.
    let exe = std::env::current_exe().unwrap();
    let copy = std::env::temp_dir().join(format!("rtloop-doctor-test-{}", std::process::id()));
    std::fs::copy(&exe, &copy).unwrap();
    let out = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
        .arg(&copy)
        .args([
            "--exact",
            &rtloop_testkit::test_path(module_path!(), "doctor_child"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    std::fs::remove_file(&copy).ok();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let json = stdout.lines().find(|l| l.starts_with("{\"checks\"")).expect("JSON line from the unprivileged child");
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["checks"].as_array().unwrap().len(), CHECK_NAMES.len());
    let rtprio = v["checks"].as_array().unwrap().iter().find(|c| c["name"] == "rlimit-rtprio").unwrap();
    assert!(!rtprio["value"].as_str().unwrap().contains("root bypasses"), "the child still ran as root");
}
