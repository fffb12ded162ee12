//! Lockstep runs: simulated time, one period per cycle, as fast as the control law allows.
//! The same inputs give the same log, byte for byte; real buses are refused.

mod support;

use serde_json::Value;
use support::{rtloop, stderr, stdout, Scratch};

fn summary(o: &std::process::Output) -> Value {
    serde_json::from_str(stdout(o).lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

#[test]
fn the_same_lockstep_run_twice_writes_the_same_log_byte_for_byte() {
    let dir = Scratch::new("lockstep");
    let (a, b) = (dir.path("a.tlog"), dir.path("b.tlog"));
    for log in [&a, &b] {
        let o = rtloop(&["run", "--lockstep", "--duration", "2", "--quiet", "--json", "--log", log.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let j = summary(&o);
        assert_eq!(j["lockstep"], true, "{j}");
        assert_eq!(j["cycles"], 2000, "every simulated period runs: {j}");
        assert_eq!(j["overruns"], 0, "{j}");
        assert_eq!(j["injected"]["seed"], 0, "lockstep's default seed is fixed: {j}");
    }
    let (x, y) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert!(x.len() > 100_000, "{} bytes", x.len());
    assert!(x == y, "the two lockstep logs differ ({} vs {} bytes)", x.len(), y.len());
}

#[test]
fn lockstep_with_fault_injection_is_repeatable_too() {
    let dir = Scratch::new("lockstep-faults");
    let mut logs = Vec::new();
    for name in ["a.tlog", "b.tlog"] {
        let log = dir.path(name);
        let o = rtloop(&[
            "run",
            "--lockstep",
            "--duration",
            "1",
            "--quiet",
            "--json",
            "--drop-rate",
            "0.05",
            "--seed",
            "7",
            "--log",
            log.to_str().unwrap(),
        ]);
        let j = summary(&o);
        assert!(j["injected"]["frames_dropped"].as_u64().unwrap() > 0, "{j}");
        logs.push((std::fs::read(&log).unwrap(), j["injected"]["frames_dropped"].clone()));
    }
    assert_eq!(logs[0].1, logs[1].1, "same seed, same drops");
    assert!(logs[0].0 == logs[1].0, "same seed, same log");
}

#[test]
fn lockstep_on_a_real_bus_is_refused_in_one_sentence() {
    let o = rtloop(&["run", "--lockstep", "--bus", "1=udp:127.0.0.1:9", "--ids", "1=1", "--duration", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("lockstep runs only on simulated buses"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
}
