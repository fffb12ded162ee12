//! The `rtloop` command as a user runs it: exit codes, output formats, error messages.

use crate::support;

use serde_json::Value;
use support::{rtloop, stderr, stdout};

#[test]
fn run_json_reports_every_servo_and_every_period() {
    let o = rtloop(&["run", "--duration", "2", "--json"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    let last = out.lines().last().expect("some output");
    let j: Value = serde_json::from_str(last).expect("last line is JSON");
    assert_eq!(j["servos"], 12);
    assert_eq!(j["buses"], 4);
    // Whether a reply misses its cycle's deadline depends on what else the machine does (a
    // preempted cycle can pass its deadline before the simulated wire delivers); that every
    // missing reply belongs to a cycle that timed out, or to a servo left unqueried while its
    // late answer was outstanding, holds anywhere.
    let unqueried = j["reply_accounting"]["unqueried"].as_u64().unwrap();
    assert!(j["missing_replies"].as_u64().unwrap() <= 12 * j["timeouts"].as_u64().unwrap() + unqueried, "{j}");
    // Replies that answer no outstanding request would mean the late-reply window is too
    // short for these buses.
    assert_eq!(j["reply_accounting"]["unattributed"], 0, "{j}");
    assert_eq!(j["transport_errors"], 0);
    // Every period is either run or counted as skipped — none silently lost.
    let cycles = j["cycles"].as_u64().unwrap();
    let skipped = j["skipped_periods"].as_u64().unwrap();
    assert_eq!(cycles + skipped, 2000, "{j}");
    assert_eq!(j["imu_samples"].as_u64().unwrap(), cycles);
    for key in ["cycle_us", "wakeup_us"] {
        for p in ["p50", "p99", "max"] {
            assert!(j[key][p].as_f64().unwrap() >= 0.0, "{key}.{p}");
        }
        assert!(j[key]["p50"].as_f64() <= j[key]["max"].as_f64());
    }
    assert!(j["model_cycle_us"].as_f64().unwrap() > 0.0);
    assert!(j["rate_hz"].as_f64().unwrap() > 0.0);
    let fin = j["final"].as_object().unwrap();
    assert_eq!(fin.len(), 12);
    for id in 1..=12 {
        let s = &fin[&id.to_string()];
        // The run ends with the shutdown cycle (zero velocity by default) and reads it back.
        assert_eq!(s["commanded"], "zero-velocity", "servo {id}: {s}");
        assert_eq!(s["mode"], 12, "servo {id}: {s}");
        assert_eq!(s["fault"], 0, "servo {id}: {s}");
        assert!(s["position"].as_f64().unwrap().abs() < 0.5, "servo {id}: {s}");
    }
}

#[test]
fn run_rejects_bad_numbers_with_one_clear_message() {
    for (flag, val) in [("--rate", "0"), ("--rate", "-5"), ("--duration", "0"), ("--duration", "nan")] {
        let o = rtloop(&["run", flag, val, "--quiet"]);
        assert_eq!(o.status.code(), Some(2), "{flag} {val}");
        let e = stderr(&o);
        assert!(e.contains(flag), "{flag} {val}: {e}");
        assert_eq!(e.trim().lines().count(), 1, "{e}");
    }
}

#[test]
fn frame_encode_matches_the_python_package() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["position", "--id", "1", "--position", "0.5", "--velocity", "0", "--query"],
            "8001 01000a0e200000003f0000000011001f01130d",
        ),
        (&["query", "--id", "1"], "8001 11001f01130d"),
        (&["stop", "--id", "1"], "0001 010000"),
        (&["stop", "--id", "1", "--query"], "8001 01000011001f01130d"),
        (&["zero-velocity", "--id", "2"], "0002 01000c"),
        // int16: position 0.5 → 5000 (0x1388), velocity -1 → -4000 (0xf060)
        (
            &["position", "--id", "3", "--position", "0.5", "--velocity", "-1", "--resolution", "int16"],
            "0003 01000a0620881360f0",
        ),
    ];
    for (args, want) in cases {
        let mut full = vec!["frame", "encode"];
        full.extend_from_slice(args);
        let o = rtloop(&full);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert_eq!(stdout(&o).trim(), *want, "{args:?}");
    }
}

#[test]
fn frame_decode_prints_subframes_and_registers() {
    let o = rtloop(&["frame", "decode", "2404000A00881300000000230D301900"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(j["registers"]["0x000"], 10);
    assert_eq!(j["registers"]["0x001"], 0.5);
    assert_eq!(j["registers"]["0x00d"], 24.0);
    assert_eq!(j["subframes"][0]["kind"], "reply");
    assert_eq!(j["subframes"][1]["start"], "0x00d");

    // The minimum integer means "unset" and decodes to null.
    let o = rtloop(&["frame", "decode", "05200080"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(j["registers"]["0x020"], Value::Null);
}

#[test]
fn frame_decode_rejects_malformed_input_without_panicking() {
    for bad in ["zz", "123", "1f", "ff00", "2404"] {
        let o = rtloop(&["frame", "decode", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let e = stderr(&o);
        assert!(e.starts_with("rtloop: "), "{bad}: {e}");
        assert!(!e.contains("panicked"), "{bad}: {e}");
    }
}

#[test]
fn budget_prints_the_model_term_by_term() {
    let o = rtloop(&["budget", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let total = j["total_us"].as_f64().unwrap();
    assert!(total > 0.0 && total < 1000.0, "{j}");
    assert!(j["terms"].as_array().unwrap().len() >= 3, "{j}");
    let buses = j["buses"].as_array().unwrap();
    assert_eq!(buses.len(), 4);
    for b in buses {
        let names: Vec<&str> = b["terms"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        for want in ["command frames", "reply frames", "turnaround"] {
            assert!(names.contains(&want), "{names:?}");
        }
        // The bus total is the sum of its terms.
        let sum: f64 = b["terms"].as_array().unwrap().iter().map(|t| t["us"].as_f64().unwrap()).sum();
        assert!((sum - b["total_us"].as_f64().unwrap()).abs() < 0.01);
    }
    let o = rtloop(&["budget"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("total"));
}

#[test]
fn lab_experiments_print_one_json_object_last() {
    for (args, key) in [
        (&["lab", "wakeup", "--samples", "300", "--json"][..], "p99_us"),
        (&["lab", "udp-echo", "--samples", "100", "--sizes", "16", "--methods", "blocking", "--json"][..], "p50_us"),
        (&["lab", "serial", "--samples", "100", "--json"][..], "results"),
        (&["lab", "event", "--samples", "100", "--methods", "eventfd,busy-poll", "--json"][..], "results"),
        (&["lab", "cycle", "--samples", "100", "--json"][..], "samples"),
    ] {
        let o = rtloop(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        let j: Value =
            serde_json::from_str(out.lines().last().unwrap()).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"));
        assert!(j.get(key).is_some(), "{args:?}: {j}");
        assert!(j["conditions"]["kernel"].is_string(), "{args:?}: {j}");
    }
}

#[test]
fn lab_doctor_reports_every_check_honestly() {
    let o = rtloop(&["lab", "doctor", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: Value = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
    let checks = j["checks"].as_array().unwrap();
    assert!(checks.len() >= 15, "{j}");
    let s = &j["summary"];
    let total: u64 = ["pass", "warn", "fail", "info"].iter().map(|k| s[k].as_u64().unwrap()).sum();
    assert_eq!(total as usize, checks.len());
    if std::path::Path::new("/sys/kernel/realtime").exists() {
        return;
    }
    let rt = checks.iter().find(|c| c["name"] == "preempt-rt").unwrap();
    assert!(rt["status"] == "warn" || rt["status"] == "fail", "{rt}");
}

#[test]
fn a_reader_that_goes_away_ends_nothing() {
    // The simulator's stdout is a pipe whose reader is gone before it prints: it must serve
    // its duration and stop cleanly (removing its link), not die on the first line.
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("bus");
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = std::process::Command::new(support::rtloop_bin())
        .args(["sim", "--fdcanusb", link.to_str().unwrap(), "--duration", "0.5"])
        .stdout(writer)
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert!(!link.exists(), "the link goes with the simulator");
    // One-shot commands too.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = std::process::Command::new(support::rtloop_bin()).args(["budget"]).stdout(writer).output().unwrap();
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
    // A full stderr loses the message, not the exit status (no panic, exit 101).
    if let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") {
        let status = std::process::Command::new(support::rtloop_bin())
            .args(["servo", "--transport", "udp:127.0.0.1:1", "--id", "1", "query"])
            .stderr(full)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(1), "nothing listens: exit 1, even with nowhere to say so");
    }
}

#[test]
fn budget_on_a_pi3hat_prints_the_spi_terms_and_the_measurement() {
    let o = rtloop(&["budget", "--pi3hat", "--cycles", "100"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for want in [
        "on a pi3hat (JC1-JC4)",
        "spi drain",
        "spi writes",
        "spi attitude",
        "spi status",
        "spi pops",
        "spi waits",
        "critical path: SPI",
        "virtual clock",
        "real clock",
    ] {
        assert!(out.contains(want), "{want}:\n{out}");
    }

    let o = rtloop(&["budget", "--pi3hat", "--json", "--cycles", "100"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let hat = &j["pi3hat"];
    // rtloop run's pi3hat frames: 23-byte command (register 5: header + 2-byte id + payload),
    // 16-byte compact reply (pop: 5-byte header + 16).
    assert_eq!(hat["write_bytes"], 26, "{j}");
    assert_eq!(hat["pop_bytes"], 21, "{j}");
    assert_eq!(hat["critical_path"], "spi", "{j}");
    let total = j["total_us"].as_f64().unwrap();
    let sum: f64 = j["terms"].as_array().unwrap().iter().map(|t| t["us"].as_f64().unwrap()).sum();
    assert!((sum - total).abs() < 0.01, "{j}");
    // Virtual time is exact: the SPI-bound quadruped measures what the model says.
    let v = &j["measured"]["virtual"];
    assert_eq!(v["cycles"], 100);
    assert_eq!(v["missing"], 0);
    assert!((v["p50_us"].as_f64().unwrap() - total).abs() < 0.05, "{j}");
    // The real clock is whatever this machine does; it is reported, never asserted.
    assert!(j["measured"]["real"]["p50_us"].as_f64().unwrap() > 0.0, "{j}");
}

#[test]
fn budget_takes_the_robot_as_rtloop_run_does() {
    // Flags: two servos on JC3 only.
    let o = rtloop(&["budget", "--bus", "3=pi3hat:sim", "--ids", "3=1,2", "--json", "--cycles", "20"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(j["buses"].as_array().unwrap().len(), 1);
    assert_eq!(j["buses"][0]["bus"], 3);
    assert_eq!(
        j["pi3hat"]["transactions"].as_u64().unwrap(),
        2 + 1 + 2 + 2,
        "writes, attitude, reads (no drain: nothing owed): {j}"
    );
    assert_eq!(j["measured"]["virtual"]["missing"], 0);
    // A robot file in the servo_bus_map shape.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("robot.toml");
    std::fs::write(&file, "transport = \"pi3hat:sim\"\n[servo_bus_map]\n1 = [1, 2, 3]\n3 = [4, 5, 6]\n").unwrap();
    let o = rtloop(&["budget", "--config", file.to_str().unwrap(), "--cycles", "0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("6 servos on a pi3hat (JC1, JC3)") && !out.contains("virtual clock"), "{out}");
    // Hardware is modelled, never measured.
    let o = rtloop(&["budget", "--bus", "1=pi3hat:spidev", "--ids", "1=1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("not measured: bus 1 is pi3hat:spidev"), "{}", stdout(&o));
    // Mistakes: one sentence, exit 2.
    for (args, want) in [
        (&["budget", "--pi3hat", "--bus", "1=sim", "--ids", "1=1"][..], "--pi3hat is the built-in quadruped"),
        (&["budget", "--pi3hat", "--cycles", "100001"][..], "--cycles 100001"),
        (&["budget", "--seed-case", "--pi3hat"][..], "cannot be used with"),
        (&["budget", "--bus", "6=pi3hat:sim", "--ids", "6=1"][..], "bus 6 cannot be on a pi3hat"),
    ] {
        let o = rtloop(args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(want) && !e.contains("panicked"), "{args:?}: {e}");
    }
}

#[test]
fn budget_seed_case_sets_the_model_and_the_simulation_beside_740_us() {
    let o = rtloop(&["budget", "--seed-case", "--cycles", "20"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for want in ["740", "seed frames", "run frames", "writes", "pops", "slowest bus on the wire", "what explains"] {
        assert!(out.contains(want), "{want}:\n{out}");
    }
    let o = rtloop(&["budget", "--seed-case", "--json", "--cycles", "20"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(j["seed_us"], 740.0);
    for case in ["seed", "run"] {
        let c = &j[case];
        let model = c["model_us"].as_f64().unwrap();
        let sum: f64 = c["terms"].as_array().unwrap().iter().map(|t| t["us"].as_f64().unwrap()).sum();
        assert!((sum - model).abs() < 0.01, "{case}: {c}");
        // Twelve servos on four buses: SPI-bound, and then model and virtual time agree exactly.
        assert_eq!(c["critical_path"], "spi", "{case}: {c}");
        assert!((c["measured"]["virtual"]["p50_us"].as_f64().unwrap() - model).abs() < 0.05, "{case}: {c}");
    }
    // The seed's comprehensive query answers with more than the run's compact one.
    assert!(j["seed"]["reply_bytes"].as_u64() > j["run"]["reply_bytes"].as_u64(), "{j}");
    assert!(j["explanation"].as_array().unwrap().len() >= 3, "{j}");
}

#[test]
fn run_drives_a_servo_bus_map_robot_file_on_the_simulated_pi3hat() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("robot.toml");
    std::fs::write(
        &file,
        "duration_s = 5.0\ntransport = \"pi3hat:sim\"\n\n[servo_bus_map]\n1 = [11, 12, 13]\n2 = [21, 22, 23]\n",
    )
    .unwrap();
    let o = rtloop(&["run", "--config", file.to_str().unwrap(), "--lockstep", "--duration", "0.2", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: Value = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
    assert_eq!(j["servos"], 6);
    assert_eq!(j["buses"], 2);
    assert_eq!(j["missing_replies"], 0, "{j}");
    assert_eq!(j["cycles"], 200);
    // The summary's model is the pi3hat's: the same figure `rtloop budget` gives that robot.
    let o = rtloop(&["budget", "--config", file.to_str().unwrap(), "--json", "--cycles", "0"]);
    let b: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(j["model_cycle_us"], b["total_us"], "{j}\n{b}");
    assert!(b["pi3hat"].is_object(), "{b}");
}
