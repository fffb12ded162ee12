//! Transactions per second over the fdcanusb pseudo-terminal against `rtloop sim`: rtloop's
//! own client (sleeping in ppoll, and busy-polling) beside the official moteus Python
//! package, for one servo and for three on one bus. A transaction is one query to every
//! servo and every reply back. A transaction a client gives up on (moteus 1.1.1 treats the
//! pty as a UART and gives up after 0.2 s without `OK`: "transaction failed after 1
//! retries") or that misses a reply is counted and reported, never fatal: a peer's failure
//! is a figure of the benchmark, not a crash of it.
//!
//! `cargo bench -p rtloop-cli --bench fdcanusb` (creates the Python venv on first use; needs PyPI).

#[path = "../tests/cli/support/mod.rs"]
mod support;

use rtloop::robot_spec::{BusSpec, RobotSpec};
use rtloop_io::{Clock, MonotonicClock, RobotConfig, ServoCommand, ServoReply};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

const SECONDS: f64 = 2.0;

/// One timed run: transactions per second with every reply in, and the transactions that
/// did not make it — the client gave up on them or some replies were missing — or a run
/// that produced no figure at all (the client could not start, crashed, or overran).
#[derive(Debug, Default, Clone)]
struct Run {
    rate_hz: Option<f64>,
    failed: u64,
    /// What went wrong first, for the report.
    first_error: Option<String>,
}

/// The median rate of three runs (of those that produced one: on a 2-core machine shared
/// by client, server and the kernel's pty worker, single runs vary by tens of percent),
/// and the failures of all three.
fn median3(mut f: impl FnMut() -> Run) -> Run {
    let runs = [f(), f(), f()];
    let mut rates: Vec<f64> = runs.iter().filter_map(|r| r.rate_hz).collect();
    rates.sort_by(f64::total_cmp);
    Run {
        rate_hz: rates.get(rates.len() / 2).copied(),
        failed: runs.iter().map(|r| r.failed).sum(),
        first_error: runs.iter().find_map(|r| r.first_error.clone()),
    }
}

fn ours(path: &str, ids: &[u8], busy_poll: bool) -> Run {
    let spec = RobotSpec {
        buses: vec![BusSpec {
            bus: 1,
            uri: rtloop_io::uri::parse(&format!("fdcanusb:{path}")).expect("a valid fdcanusb URI"),
            servos: ids.to_vec(),
        }],
    };
    let mut config = RobotConfig::default();
    config.cycle.busy_poll = busy_poll;
    config.cycle.timeout_ns = 100_000_000;
    let clock = MonotonicClock::default();
    let mut robot = match spec.build(clock, config, Default::default(), Default::default()) {
        Ok((robot, _)) => robot,
        Err(e) => return Run { rate_hz: None, failed: 1, first_error: Some(format!("opening {path}: {e}")) },
    };
    let commands = vec![ServoCommand::Query; ids.len()];
    let mut replies = vec![ServoReply::default(); ids.len()];
    let mut imu = Default::default();
    let start = clock.now_ns();
    let end = start + (SECONDS * 1e9) as u64;
    let (mut n, mut failed) = (0u64, 0u64);
    let mut first_error = None;
    while clock.now_ns() < end {
        let r = robot.cycle(&commands, &mut replies, &mut imu);
        if r.missing == 0 {
            n += 1;
        } else {
            failed += 1;
            first_error.get_or_insert_with(|| format!("{} of {} replies missing", r.missing, ids.len()));
        }
    }
    Run { rate_hz: Some(n as f64 / ((clock.now_ns() - start) as f64 * 1e-9)), failed, first_error }
}

/// The moteus Python client's run. Bounded: a client that has not finished
/// [`SECONDS`] + 30 s after it started (an older moteus waits forever for a lost reply)
/// is killed and its run counted as failed.
fn python(path: &str, ids: &[u8]) -> Run {
    let list: Vec<String> = ids.iter().map(u8::to_string).collect();
    let failed = |why: String| Run { rate_hz: None, failed: 1, first_error: Some(why) };
    let child = Command::new(moteus_python())
        .arg(python_client())
        .args([path, "bench", &list.join(","), &SECONDS.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return failed(format!("python did not start: {e}")),
    };
    let deadline = Instant::now() + Duration::from_secs_f64(SECONDS + 30.0);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return failed(format!("the moteus client did not finish within {SECONDS} s + 30 s; killed"));
            }
        }
    }
    let out = match child.wait_with_output() {
        Ok(out) => out,
        Err(e) => return failed(format!("reading the moteus client's output: {e}")),
    };
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return failed(format!(
            "the moteus client failed ({}): {}",
            out.status,
            err.trim().lines().last().unwrap_or("")
        ));
    }
    let j: serde_json::Value = match serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()) {
        Ok(j) => j,
        Err(e) => return failed(format!("the moteus client printed no JSON report: {e}")),
    };
    Run {
        rate_hz: j["rate_hz"].as_f64(),
        failed: j["failed"].as_u64().unwrap_or(0) + j["incomplete"].as_u64().unwrap_or(0),
        first_error: j["first_error"].as_str().map(str::to_string),
    }
}

fn rate(r: &Run) -> String {
    r.rate_hz.map_or_else(|| "-".to_string(), |x| format!("{x:.1}"))
}

fn main() {
    let path = unique_path("bench");
    let path_s = path.to_str().expect("a UTF-8 scratch path").to_string();
    let mut problems: Vec<String> = Vec::new();
    for (label, extra) in [
        ("CAN-FD wire timing (1/5 Mbit/s, 50 µs turnaround)", &[][..]),
        ("no wire time: the clients and the pty path alone", &["--no-wire-time"][..]),
    ] {
        let mut args = vec!["--fdcanusb", path_s.as_str(), "--servos", "1,2,3"];
        args.extend_from_slice(extra);
        let mut sim = SimProcess::start(&args);
        println!(
            "fdcanusb pty against rtloop sim, {label}; median of 3 × {SECONDS} s, transactions/s (all replies in), \
             failed transactions in brackets:"
        );
        println!(
            "  {:<8} {:>20} {:>20} {:>20} {:>12}",
            "servos", "rtloop ppoll", "rtloop busy", "moteus py", "ppoll/py"
        );
        for ids in [&[1u8][..], &[1, 2, 3][..]] {
            let runs = [
                ("rtloop ppoll", median3(|| ours(&path_s, ids, false))),
                ("rtloop busy", median3(|| ours(&path_s, ids, true))),
                ("moteus py", median3(|| python(&path_s, ids))),
            ];
            let [a, b, p] = [&runs[0].1, &runs[1].1, &runs[2].1];
            let ratio = match (a.rate_hz, p.rate_hz) {
                (Some(a), Some(p)) if p > 0.0 => format!("{:.1}x", a / p),
                _ => "-".to_string(),
            };
            let cell = |r: &Run| format!("{} [{}]", rate(r), r.failed);
            println!("  {:<8} {:>20} {:>20} {:>20} {:>12}", ids.len(), cell(a), cell(b), cell(p), ratio);
            for (who, r) in &runs {
                if r.failed > 0 {
                    problems.push(format!(
                        "{label}, {} servo(s), {who}: {} failed; first: {}",
                        ids.len(),
                        r.failed,
                        r.first_error.as_deref().unwrap_or("?")
                    ));
                }
            }
        }
        sim.stop();
    }
    if !problems.is_empty() {
        println!("failed transactions (counted above, not fatal):");
        for p in &problems {
            println!("  {p}");
        }
    }
}
