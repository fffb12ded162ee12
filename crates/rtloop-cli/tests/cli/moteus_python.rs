//! The simulator behind real devices, driven by unmodified clients: the official moteus
//! Python package over the fdcanusb pty, and rtloop's own `servo` over fdcanusb and UDP;
//! a pty that closes mid-run; bad addresses and missing devices.

use crate::support;

use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;

#[test]
fn the_moteus_python_package_drives_rtloop_sim_over_an_fdcanusb_pty() {
    let python = moteus_python();
    let path = unique_path("py");
    let path_s = path.to_str().unwrap();
    let _sim = SimProcess::start(&["--fdcanusb", path_s, "--servos", "1,2"]);
    let out = Command::new(python).arg(python_client()).args([path_s, "check"]).output().unwrap();
    assert!(out.status.success(), "python client failed: {}", String::from_utf8_lossy(&out.stderr));
    let j: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    // A fresh servo is stopped, powered, without fault.
    assert_eq!(j["query"]["mode"], 0, "{j}");
    assert_eq!(j["query"]["fault"], 0, "{j}");
    assert!(j["query"]["voltage"].as_f64().unwrap() > 20.0, "{j}");
    // Position commands moved the joint to 0.2 rev.
    assert_eq!(j["position"]["mode"], 10, "{j}");
    let p = j["position"]["position"].as_f64().unwrap();
    assert!((p - 0.2).abs() < 0.02, "joint at {p}, commanded 0.2: {j}");
    // Stop took effect.
    assert_eq!(j["stop_after"]["mode"], 0, "{j}");
    // An id nobody answers to times out.
    assert_eq!(j["absent"], "timeout", "{j}");
}

#[test]
fn rtloop_servo_works_over_fdcanusb_and_udp() {
    let path = unique_path("servo");
    let path_s = path.to_str().unwrap().to_string();
    let port = free_udp_port();
    let _pty = SimProcess::start(&["--fdcanusb", &path_s, "--servos", "3"]);
    let _udp = SimProcess::start(&["--udp", &format!("127.0.0.1:{port}"), "--servos", "3"]);
    for transport in [format!("fdcanusb:{path_s}"), format!("udp:127.0.0.1:{port}")] {
        let o = rtloop(&["servo", "--transport", &transport, "--id", "3", "query", "--json"]);
        assert!(o.status.success(), "{transport}: {}", String::from_utf8_lossy(&o.stderr));
        let j: Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
        assert_eq!(j["id"], 3);
        assert_eq!(j["mode"], 0, "{transport}: {j}");
        // A position command is accepted; the next query shows position mode.
        let o = rtloop(&["servo", "--transport", &transport, "--id", "3", "position", "--position", "0.1", "--json"]);
        assert!(o.status.success(), "{transport}: {}", String::from_utf8_lossy(&o.stderr));
        let o = rtloop(&["servo", "--transport", &transport, "--id", "3", "query", "--json"]);
        let j: Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
        assert_eq!(j["mode"], 10, "{transport}: {j}");
        // --run repeats and reports a rate.
        let o =
            rtloop(&["servo", "--transport", &transport, "--id", "3", "stop", "--run", "--duration", "0.5", "--json"]);
        assert!(o.status.success(), "{transport}: {}", String::from_utf8_lossy(&o.stderr));
        let j: Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().last().unwrap()).unwrap();
        assert!(j["transactions"].as_u64().unwrap() > 10, "{transport}: {j}");
        assert_eq!(j["missing"], 0, "{transport}: {j}");
        // A servo that is not there: one clear message, exit code 1 (the command ran, the
        // reply did not come).
        let o = rtloop(&["servo", "--transport", &transport, "--id", "9", "query", "--timeout-ms", "50"]);
        assert_eq!(o.status.code(), Some(1));
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains("no reply from servo 9"), "{e}");
    }
}

#[test]
fn rtloop_can_prints_raw_replies_over_fdcanusb() {
    let path = unique_path("can");
    let path_s = path.to_str().unwrap().to_string();
    let _sim = SimProcess::start(&["--fdcanusb", &path_s, "--servos", "1"]);
    let o = rtloop(&["can", "--transport", &format!("fdcanusb:{path_s}"), "--write-can", "1,8001,1300,r"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    // `13 00` reads three int8 registers from 0 (mode, position, velocity); a stopped servo
    // at rest answers `23 00` (reply, int8, three registers from 0) and three zeros.
    assert_eq!(out.trim(), "CAN 1,100,2300000000", "{out}");
}

#[test]
fn a_pty_closed_mid_run_is_reported_and_survived() {
    let path = unique_path("vanish");
    let path_s = path.to_str().unwrap().to_string();
    let mut first = SimProcess::start(&["--fdcanusb", &path_s, "--servos", "1"]);
    let client = Command::new(rtloop_bin())
        .args(["servo", "--transport", &format!("fdcanusb:{path_s}"), "--id", "1", "query", "--run", "--duration", "4"])
        .args(["--json", "--timeout-ms", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    first.stop();
    assert!(std::fs::symlink_metadata(&path).is_err(), "a stopped simulator removes its link");
    std::thread::sleep(Duration::from_millis(700));
    let _second = SimProcess::start(&["--fdcanusb", &path_s, "--servos", "1"]);
    let out = client.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Survived, and honest about what was lost: the summary is printed, the exit status is 1.
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("replies from servo 1 were missing"), "{stderr}");
    let j: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert!(j["disconnects"].as_u64().unwrap() >= 1, "{j}");
    assert!(j["reconnects"].as_u64().unwrap() >= 1, "{j}");
    assert!(j["missing"].as_u64().unwrap() >= 1, "{j}");
    assert_eq!(j["state"]["mode"], 0, "{j}");
    // The drop and the return were each reported once, in words.
    assert!(stderr.contains("disconnected"), "{stderr}");
    assert!(stderr.contains("back"), "{stderr}");
}

#[test]
fn bad_addresses_and_missing_devices_get_one_clear_message() {
    let missing = format!("fdcanusb:{}", unique_path("nothing-here").display());
    let cases = [
        (vec!["servo", "--transport", "serial:/dev/x", "query"], "unknown transport"),
        (vec!["servo", "--transport", "udp:localhost", "query"], "UDP address"),
        (vec!["servo", "--transport", &missing, "query"], "no such device"),
        (vec!["servo", "--transport", "socketcan:nosuchcan0", "query"], "socketcan:nosuchcan0"),
        (vec!["run", "--bus", "1=fdcanusb:/nonexistent/tty", "--ids", "1=1", "--quiet"], "no such device"),
        (vec!["run", "--bus", "1=sim", "--quiet"], "no servo ids"),
        (vec!["sim", "--udp", "0.0.0.0:9", "--duration", "1"], "--allow-remote"),
        (vec!["can", "--transport", "sim"], "nothing to do"),
        (vec!["can", "--transport", "sim", "--write-can", "2,8001,1300,r"], "--bus 2"),
    ];
    for (args, want) in cases {
        assert_one_clear_message(&args, want);
    }
}

/// A peer that never answers: moteus 1.1.1 gives up on the transaction ("transaction failed
/// after N retries", a RuntimeError). The client's bench mode, which `cargo bench --bench
/// fdcanusb` runs, counts it and still prints its report, so the benchmark reports a peer's
/// failures instead of panicking on them (issue 22 §5).
#[test]
fn the_moteus_client_bench_counts_what_a_silent_peer_fails() {
    let python = moteus_python();
    // Only the master end is kept open, and nobody reads or answers on it.
    let pty = nix::pty::openpty(None, None).unwrap();
    let path = nix::unistd::ttyname(&pty.slave).unwrap();
    drop(pty.slave);
    let mut child = Command::new(python)
        .arg(python_client())
        .arg(&path)
        .args(["bench", "1", "1.0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded: the client's own run is 1 s plus one give-up (under 2 s on an idle machine).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the moteus client did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "bench mode failed: {}", String::from_utf8_lossy(&out.stderr));
    let j: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(j["transactions"], 0, "{j}");
    assert!(j["failed"].as_u64().unwrap() >= 1, "{j}");
    let first = j["first_error"].as_str().unwrap();
    assert!(first.contains("transaction failed"), "{j}");
    drop(pty.master);
}
