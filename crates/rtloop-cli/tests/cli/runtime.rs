//! The real-time runtime as a user meets it: graceful failure when a servo faults, servos
//! left to their watchdog when the host dies, a safe last cycle on Ctrl-C, refused
//! privileges warned about (or fatal with --strict), the configuration file.

use crate::support;

use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;

#[test]
fn a_faulted_servo_puts_the_other_eleven_in_zero_velocity() {
    let o = rtloop(&["run", "--fault", "5@1", "--duration", "3", "--json", "--quiet"]);
    // The run completed, but lost a servo and engaged its safety policy: exit status 1.
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let j = last_json(&o);
    let fin = &j["final"];
    assert_eq!(fin["5"]["mode"], 1, "{j}");
    assert_eq!(fin["5"]["fault"], 38, "over-temperature: {j}");
    for id in (1..=12).filter(|&i| i != 5) {
        assert_eq!(fin[id.to_string()]["mode"], 12, "servo {id} should hold zero velocity: {j}");
    }
    let events = j["events"].as_array().unwrap();
    let fault = events.iter().find(|e| e["kind"] == "fault").expect("fault event");
    assert_eq!(fault["servo"], 5);
    assert_eq!(fault["bus"], 2, "servo 5 lives on bus 2: {fault}");
    assert!(fault["time"].as_f64().unwrap() >= 1.0, "{fault}");
    assert!(events.iter().any(|e| e["kind"] == "safe_mode_engaged"), "{j}");
    assert!(events.iter().any(|e| e["kind"] == "injected_overheat" && e["servo"] == 5), "{j}");
    assert_eq!(j["injected"]["overheat"]["5"], 1.0);
}

#[test]
fn the_stop_policy_and_the_ignore_policy_do_what_they_say() {
    let o = rtloop(&["run", "--fault", "2@0.5", "--on-fault", "stop", "--duration", "2", "--json", "--quiet"]);
    assert_eq!(o.status.code(), Some(1), "a faulted servo: {}", String::from_utf8_lossy(&o.stderr));
    let j = last_json(&o);
    assert_eq!(j["final"]["2"]["mode"], 1, "{j}");
    assert_eq!(j["final"]["1"]["mode"], 0, "{j}");
    let o = rtloop(&["run", "--fault", "2@0.5", "--on-fault", "ignore", "--duration", "2", "--json", "--quiet"]);
    // Ignored by the policy, still a lost servo: exit status 1 too.
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let j = last_json(&o);
    assert_eq!(j["final"]["2"]["mode"], 1, "{j}");
    // The others kept following the motion (no safe mode) until the end of the run, whose
    // shutdown cycle put them in zero velocity.
    assert!(j["events"].as_array().unwrap().iter().all(|e| e["kind"] != "safe_mode_engaged"), "{j}");
    assert_eq!(j["final"]["1"]["mode"], 12, "{j}");
}

#[test]
fn wire_faults_are_injected_and_reported() {
    let o = rtloop(&["run", "--drop-rate", "0.01", "--corrupt-rate", "0.01", "--duration", "1", "--json", "--quiet"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j = last_json(&o);
    assert!(j["injected"]["frames_dropped"].as_u64().unwrap() > 0, "{j}");
    assert!(j["injected"]["frames_corrupted"].as_u64().unwrap() > 0, "{j}");
    // A lost command or reply is a missing reply: counted, never silent.
    assert!(j["missing_replies"].as_u64().unwrap() > 0, "{j}");
    let bad = rtloop(&["run", "--drop-rate", "1.5", "--quiet"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--drop-rate"), "{}", String::from_utf8_lossy(&bad.stderr));
}

#[test]
fn ctrl_c_commands_the_safe_mode_in_one_last_cycle_and_exits_zero() {
    let child = Command::new(rtloop_bin())
        .args(["run", "--duration", "30", "--json", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j = last_json(&out);
    assert_eq!(j["interrupted"], true, "{j}");
    assert!(j["events"].as_array().unwrap().iter().any(|e| e["kind"] == "shutdown"), "{j}");
    for id in 1..=12 {
        // A query after the shutdown cycle reads back what the servos did with it.
        assert_eq!(j["final"][id.to_string()]["mode"], 12, "{j}");
        assert_eq!(j["final"][id.to_string()]["commanded"], "zero-velocity", "{j}");
    }
}

#[test]
fn ctrl_c_leaves_servos_on_a_device_in_the_configured_safe_mode() {
    let path = unique_path("sigint");
    let path_s = path.to_str().unwrap().to_string();
    let _sim = SimProcess::start(&["--fdcanusb", &path_s, "--servos", "1,2"]);
    let child = Command::new(rtloop_bin())
        .args(["run", "--bus", &format!("1=fdcanusb:{path_s}"), "--ids", "1=1,2", "--duration", "30"])
        // 200 Hz: a pty round trip on a loaded test machine has time to answer, so the run is
        // not cut short by its safety policy (20 missing cycles) before the signal.
        .args(["--shutdown", "stop", "--rate", "200", "--json", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(last_json(&out)["interrupted"], true);
    // Stop is not covered by the watchdog: the servos stay stopped, as commanded last.
    std::thread::sleep(Duration::from_millis(300));
    for id in ["1", "2"] {
        let o = rtloop(&["servo", "--transport", &format!("fdcanusb:{path_s}"), "--id", id, "query", "--json"]);
        assert_eq!(last_json(&o)["mode"], 0, "servo {id}");
    }
}

#[test]
fn a_killed_host_leaves_the_servos_to_their_watchdog() {
    let path = unique_path("sigkill");
    let path_s = path.to_str().unwrap().to_string();
    let _sim = SimProcess::start(&["--fdcanusb", &path_s, "--servos", "1,2,3"]);
    let mut host = Command::new(rtloop_bin())
        .args(["run", "--bus", &format!("1=fdcanusb:{path_s}"), "--ids", "1=1-3", "--duration", "30", "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Let it stand the robot up (position mode), then kill it without warning.
    std::thread::sleep(Duration::from_millis(1500));
    host.kill().unwrap(); // SIGKILL
    host.wait().unwrap();
    // Past the 0.1 s default watchdog every servo has latched mode 11 on its own.
    std::thread::sleep(Duration::from_millis(300));
    for id in ["1", "2", "3"] {
        let o = rtloop(&["servo", "--transport", &format!("fdcanusb:{path_s}"), "--id", id, "query", "--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let j = last_json(&o);
        assert_eq!(j["mode"], 11, "servo {id}: {j}");
    }
}

#[test]
fn refused_real_time_requests_are_warnings_and_strict_makes_them_errors() {
    let o = rtloop(&["run", "--cpu", "4000", "--duration", "0.2", "--json", "--quiet"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("warning") && e.contains("4000"), "{e}");
    assert_eq!(last_json(&o)["realtime"]["warnings"].as_array().unwrap().len(), 1);
    let o = rtloop(&["run", "--cpu", "4000", "--strict", "--duration", "0.2", "--quiet"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("4000"));
    for (args, want) in
        [(&["--policy", "turbo"][..], "--policy"), (&["--policy", "fifo", "--priority", "0"][..], "priority")]
    {
        let mut full = vec!["run", "--duration", "0.2", "--quiet"];
        full.extend_from_slice(args);
        let o = rtloop(&full);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(want), "{args:?}: {e}");
    }
}

#[test]
fn an_unprivileged_user_asking_for_fifo_gets_a_warning_and_the_loop_runs() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || Command::new("setpriv").arg("--version").output().is_err() {
        rtloop_testkit::skip("needs root and setpriv to run rtloop as an unprivileged user");
        return;
    }
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(rtloop_bin())
        .args(["run", "--policy", "fifo", "--priority", "80", "--mlock", "--duration", "0.3", "--json", "--quiet"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("SCHED_FIFO"), "{e}");
    let j = last_json(&o);
    assert_eq!(j["realtime"]["policy"], "other", "{j}");
    assert!(j["cycles"].as_u64().unwrap() > 0);
}

#[test]
fn run_on_fifo_with_a_control_thread_and_busy_wait() {
    let o = rtloop(&[
        "run",
        "--policy",
        "fifo",
        "--priority",
        "50",
        "--busy-wait-us",
        "50",
        "--control-thread",
        "--duration",
        "1",
        "--json",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j = last_json(&o);
    // (How many replies miss their deadline depends on what else this machine is doing, so
    // it is not asserted; that every servo follows the control thread's commands is.)
    assert_eq!(j["realtime"]["control_thread"], true);
    assert!(j["cycles"].as_u64().unwrap() > 0);
    for id in 1..=12 {
        // Every servo answered to the end, and took the run's last command (the shutdown).
        assert_eq!(j["final"][id.to_string()]["fresh"], true, "{j}");
        assert_eq!(j["final"][id.to_string()]["mode"], 12, "{j}");
    }
}

#[test]
fn print_config_round_trips_through_config() {
    let o = rtloop(&["run", "--print-config", "--rate", "500", "--on-fault", "stop"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(text.contains("rate_hz = 500.0") && text.contains("on_fault = \"stop\""), "{text}");
    let path = unique_path("config.toml");
    std::fs::write(&path, &text).unwrap();
    let again = rtloop(&["run", "--print-config", "--config", path.to_str().unwrap()]);
    assert_eq!(String::from_utf8_lossy(&again.stdout), text);
    std::fs::write(&path, "rate_hz = \"fast\"\n").unwrap();
    let bad = rtloop(&["run", "--config", path.to_str().unwrap(), "--quiet"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--config"));
    let _ = std::fs::remove_file(&path);
    let missing = rtloop(&["run", "--config", "/nonexistent/rtloop.toml"]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read --config"));
}
