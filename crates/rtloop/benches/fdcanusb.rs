//! Transactions per second over the fdcanusb pseudo-terminal against `rtloop sim`: rtloop's
//! own client (sleeping in ppoll, and busy-polling) beside the official moteus Python
//! package, for one servo and for three on one bus. A transaction is one query to every
//! servo and every reply back.
//!
//! `cargo bench -p rtloop --bench fdcanusb` (creates the Python venv on first use; needs PyPI).

#[path = "../tests/support/mod.rs"]
mod support;

use io::{Clock, MonotonicClock, RobotConfig, ServoCommand, ServoReply};
use rtloop::robot_spec::{BusSpec, RobotSpec};
use std::process::Command;
use support::*;

const SECONDS: f64 = 2.0;

/// The median of three runs: on a 2-core machine shared by client, server and the kernel's
/// pty worker, single runs vary by tens of percent.
fn median3(mut f: impl FnMut() -> f64) -> f64 {
    let mut v = [f(), f(), f()];
    v.sort_by(f64::total_cmp);
    v[1]
}

fn ours(path: &str, ids: &[u8], busy_poll: bool) -> f64 {
    let spec = RobotSpec {
        buses: vec![BusSpec {
            bus: 1,
            uri: io::uri::parse(&format!("fdcanusb:{path}")).unwrap(),
            servos: ids.to_vec(),
        }],
    };
    let mut config = RobotConfig::default();
    config.cycle.busy_poll = busy_poll;
    config.cycle.timeout_ns = 100_000_000;
    let clock = MonotonicClock::default();
    let mut robot = spec.build(clock, config, Default::default()).expect("open the pty");
    let commands = vec![ServoCommand::Query; ids.len()];
    let mut replies = vec![ServoReply::default(); ids.len()];
    let mut imu = Default::default();
    let start = clock.now_ns();
    let end = start + (SECONDS * 1e9) as u64;
    let mut n = 0u64;
    while clock.now_ns() < end {
        let r = robot.cycle(&commands, &mut replies, &mut imu);
        if r.missing == 0 {
            n += 1;
        }
    }
    n as f64 / ((clock.now_ns() - start) as f64 * 1e-9)
}

fn python(path: &str, ids: &[u8]) -> f64 {
    let list: Vec<String> = ids.iter().map(u8::to_string).collect();
    let out = Command::new(moteus_python())
        .arg(python_client())
        .args([path, "bench", &list.join(","), &SECONDS.to_string()])
        .output()
        .expect("python runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    j["rate_hz"].as_f64().unwrap()
}

fn main() {
    let path = unique_path("bench");
    let path_s = path.to_str().unwrap().to_string();
    for (label, extra) in [
        ("CAN-FD wire timing (1/5 Mbit/s, 50 µs turnaround)", &[][..]),
        ("no wire time: the clients and the pty path alone", &["--no-wire-time"][..]),
    ] {
        let mut args = vec!["--fdcanusb", path_s.as_str(), "--servos", "1,2,3"];
        args.extend_from_slice(extra);
        let mut sim = SimProcess::start(&args);
        println!(
            "fdcanusb pty against rtloop sim, {label}; median of 3 × {SECONDS} s, transactions/s (all replies in):"
        );
        println!(
            "  {:<8} {:>14} {:>14} {:>14} {:>12}",
            "servos", "rtloop ppoll", "rtloop busy", "moteus py", "ppoll/py"
        );
        for ids in [&[1u8][..], &[1, 2, 3][..]] {
            let a = median3(|| ours(&path_s, ids, false));
            let b = median3(|| ours(&path_s, ids, true));
            let p = median3(|| python(&path_s, ids));
            println!("  {:<8} {:>14.1} {:>14.1} {:>14.1} {:>11.1}x", ids.len(), a, b, p, a / p);
        }
        sim.stop();
    }
}
