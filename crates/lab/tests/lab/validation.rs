//! Every option of every lab experiment is checked before anything is measured (issue 9, §3
//! and §4): zero, negative, NaN, infinite and huge values are refused with one sentence that
//! names the flag and the valid range, and `--load` is capped by this machine's CPUs and
//! available memory.

use crate::common::parse;
use rtloop_lab::cli::{run, LabCommand};
use rtloop_lab::load::{Capacity, Load};

/// The refusal of `args`: one sentence, naming `flag`, with no Rust Debug output in it.
fn refusal(args: &[&str], flag: &str) -> String {
    let err = match run(parse(args)) {
        Ok(out) => panic!("{args:?} was accepted and measured:\n{}", out.text),
        Err(e) => e.to_string(),
    };
    assert!(err.contains(flag), "{args:?}: the refusal does not name {flag}: {err}");
    assert!(!err.contains('\n'), "{args:?}: not one sentence: {err}");
    assert!(!err.contains(" {") && !err.contains("Some(") && !err.contains("\"\""), "{args:?}: Debug output: {err}");
    err
}

#[test]
fn bad_numbers_are_refused_with_the_flag_and_its_range() {
    // Each of these used to be accepted, to crash (overflow), or to fail only after measuring.
    let cases: &[(&[&str], &str, &str)] = &[
        (&["compare", "--sizes", "0", "--samples", "2000"], "--sizes", "1..=65507"),
        (&["compare", "--sizes", "64,70000", "--samples", "2000"], "--sizes", "1..=65507"),
        (&["compare", "--samples", "0"], "--samples", "1..="),
        (&["wakeup", "--samples", "0"], "--samples", "1..="),
        (&["wakeup", "--samples", "100000000000"], "--samples", "1..="),
        (&["wakeup", "--period-us", "0"], "--period-us", "10..=1000000"),
        (&["wakeup", "--period-us", "18446744073709551615"], "--period-us", "10..=1000000"),
        (&["wakeup", "--samples", "50", "--busy-wait-us", "2000"], "--busy-wait-us", "0..=1000"),
        (&["wakeup", "--policy", "fifo", "--priority", "100"], "--priority", "1..=99"),
        (&["wakeup", "--samples", "50", "--priority", "5"], "--priority", "fifo or rr"),
        (
            &["wakeup", "--policy", "deadline", "--deadline-runtime-us", "18446744073709551615"],
            "--deadline-runtime-us",
            "",
        ),
        (&["wakeup", "--policy", "deadline", "--deadline-period-us", "0"], "--deadline-period-us", ""),
        (&["wakeup", "--samples", "50", "--deadline-period-us", "2000"], "--deadline-period-us", "--policy deadline"),
        (&["wakeup", "--samples", "50", "--cpu", "4096"], "--cpu", ""),
        (&["udp-echo", "--sizes", "0"], "--sizes", "1..=65507"),
        (&["udp-echo", "--samples", "50", "--sizes", "64,64"], "--sizes", "twice"),
        (&["udp-echo", "--samples", "50", "--methods", "epoll,epoll"], "--methods", "twice"),
        (&["udp-echo", "--samples", "50", "--busy-wait-us", "5"], "--busy-wait-us", "wakeup and cycle"),
        (&["event", "--samples", "50", "--busy-wait-us", "5"], "--busy-wait-us", "wakeup and cycle"),
        (&["serial", "--size", "0"], "--size", "1..=4096"),
        (&["serial", "--size", "5000"], "--size", "1..=4096"),
        (&["cycle", "--rate", "0"], "--rate", "0.1..=100000"),
        (&["cycle", "--rate", "NaN"], "--rate", "0.1..=100000"),
        (&["cycle", "--rate", "inf"], "--rate", "0.1..=100000"),
        (&["cycle", "--rate=-5"], "--rate", "0.1..=100000"),
        (&["cycle", "--rate", "1e300"], "--rate", "0.1..=100000"),
        (&["cycle", "--servos", "0"], "--servos", "1..=127"),
        (&["cycle", "--transport", "carrier-pigeon:1"], "--transport", ""),
        (&["cycle", "--samples", "50", "--busy-wait-us", "20000", "--rate", "1000"], "--busy-wait-us", "0..=1000"),
        (&["wakeup", "--samples", "100", "--csv", "/nonexistent/rtloop-lab/x.csv"], "--csv", ""),
        (&["wakeup", "--samples", "100", "--plot", "/nonexistent/rtloop-lab/x.png"], "--plot", ""),
        (&["wakeup", "--samples", "100", "--plot", "histogram.jpg"], "--plot", ".png"),
        (&["udp-echo-server", "--bind", "127.0.0.1:0", "--seconds", "NaN"], "--seconds", ""),
        (&["udp-echo-server", "--bind", "127.0.0.1:0", "--seconds", "inf"], "--seconds", ""),
        (&["udp-echo-server", "--bind", "127.0.0.1:0", "--seconds", "0"], "--seconds", ""),
    ];
    for (args, flag, range) in cases {
        let err = refusal(args, flag);
        assert!(err.contains(range), "{args:?}: the refusal does not give the range {range}: {err}");
    }
}

#[test]
fn load_is_capped_by_cpus_and_available_memory() {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    // The CPUs bind: 4 workers per CPU.
    assert_eq!(Capacity { cpus: 2, available_bytes: Some(24 * GIB) }.max_workers(), 8);
    assert_eq!(Capacity { cpus: 2, available_bytes: None }.max_workers(), 8);
    // The memory binds: each worker needs 65 MiB, and the load may take half of what is available.
    assert_eq!(Capacity { cpus: 64, available_bytes: Some(GIB) }.max_workers(), 7);
    assert_eq!(Capacity { cpus: 64, available_bytes: Some(100 * MIB) }.max_workers(), 0);
    // What the issue saw: 100 000 workers asked on a machine with 24 GB.
    let machine = Capacity { cpus: 2, available_bytes: Some(24 * GIB) };
    let err = machine.check(100_000).unwrap_err().to_string();
    assert!(err.contains("--load 100000") && err.contains("0..=8"), "{err}");
    assert!(machine.check(8).is_ok() && machine.check(0).is_ok());
    let tiny = Capacity { cpus: 2, available_bytes: Some(100 * MIB) };
    let err = tiny.check(1).unwrap_err().to_string();
    assert!(err.contains("--load 1") && err.contains("memory"), "{err}");
}

#[test]
fn a_huge_load_is_refused_before_any_worker_starts() {
    let LabCommand::Wakeup { common, .. } = parse(&["wakeup", "--load", "100000"]) else { panic!() };
    let err = common.options().expect_err("--load 100000 accepted").to_string();
    assert!(err.contains("--load 100000") && err.contains("0..="), "{err}");
    // The library refuses too, without allocating anything for the workers.
    assert!(Load::start(usize::MAX).is_err());
    // What this machine can carry is accepted.
    let max = Capacity::of_this_machine().max_workers();
    let LabCommand::Wakeup { common, .. } = parse(&["wakeup", "--load", &max.to_string()]) else { panic!() };
    assert!(common.options().is_ok(), "--load {max} refused");
}

#[test]
fn udp_echo_defaults_to_an_ephemeral_port() {
    let LabCommand::UdpEcho { port, .. } = parse(&["udp-echo"]) else { panic!() };
    assert_eq!(port, 0, "a fixed default port collides with whatever else uses it");
    // Behaviour: with the old fixed port taken, the default still measures.
    let _taken = std::net::UdpSocket::bind("127.0.0.1:7777");
    let out = run(parse(&["udp-echo", "--samples", "20", "--sizes", "16", "--methods", "blocking", "--no-progress"]))
        .expect("udp-echo with the default port")
        .text;
    assert!(out.contains("udp-echo 16 B blocking"), "{out}");
    // An explicit port is still honoured.
    let LabCommand::UdpEcho { port, .. } = parse(&["udp-echo", "--port", "9123"]) else { panic!() };
    assert_eq!(port, 9123);
}

/// An echo server's lifetime of a moment.
fn brief() -> rtloop_lab::udp::ServerLifetime {
    rtloop_lab::udp::ServerLifetime { seconds: 0.2, idle_seconds: 10.0, parent_pid: None }
}

#[test]
fn the_echo_server_serves_loopback_unless_told_otherwise() {
    // Loopback, for a moment: fine.
    rtloop_lab::udp::serve_echo("127.0.0.1:0", "blocking", brief(), false).expect("loopback echo server");
    // Every interface: refused unless asked for explicitly.
    let err = rtloop_lab::udp::serve_echo("0.0.0.0:0", "blocking", brief(), false).unwrap_err().to_string();
    assert!(err.contains("--allow-remote"), "{err}");
    assert!(!err.contains('\n'), "{err}");
    rtloop_lab::udp::serve_echo("0.0.0.0:0", "blocking", brief(), true).expect("explicitly allowed");
    // The same through the command line.
    let err = refusal(&["udp-echo-server", "--bind", "0.0.0.0:0", "--seconds", "0.2"], "--allow-remote");
    assert!(err.contains("0.0.0.0"), "{err}");
    run(parse(&["udp-echo-server", "--bind", "127.0.0.1:0", "--seconds", "0.2"])).expect("loopback via the CLI");
}

#[test]
fn csv_and_plot_may_not_share_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let both = dir.path().join("both.png");
    let both = both.to_str().unwrap();
    let err = refusal(&["wakeup", "--samples", "10", "--csv", both, "--plot", both, "--no-progress"], "--csv");
    assert!(err.contains("--plot both name") && err.contains("give each its own file"), "{err}");
    assert!(!std::path::Path::new(both).exists());
}

#[test]
fn the_doctor_refuses_a_root_that_is_no_directory_and_a_service_that_is_no_name() {
    let err = refusal(&["doctor", "--root", "/nonexistent/robot"], "--root");
    assert!(err.contains("not a directory") && err.contains("proc/ and sys/"), "{err}");
    let err = refusal(&["doctor", "--service", "../etc/passwd"], "--service");
    assert!(err.contains("not a service name"), "{err}");
    // A unit's name with its suffix, an instance, are names.
    for name in ["rtloop.service", "robot@left", "walker"] {
        assert!(run(parse(&["doctor", "--service", name])).is_ok(), "{name}");
    }
}
