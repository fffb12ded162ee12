//! The `rtloop lab` flags reach the experiments: defaults, the common flags, and a full
//! wakeup run through `cli::run` with JSON, CSV and plot output.

use crate::common::parse;
use rtloop_lab::cli::{run, LabCommand};
use rtloop_rt::setup::Policy;

#[test]
fn defaults_of_every_experiment() {
    match parse(&["wakeup"]) {
        LabCommand::Wakeup { common, period_us } => {
            assert_eq!(period_us, 1000);
            let o = common.options().unwrap();
            assert_eq!((o.rt.policy, o.rt.priority, o.load, o.samples), (Policy::Other, 0, 0, 10_000));
        }
        other => panic!("{other:?}"),
    }
    match parse(&["udp-echo"]) {
        LabCommand::UdpEcho { sizes, methods, netns, .. } => {
            assert_eq!(sizes, vec![16, 64, 256, 1024]);
            assert_eq!(methods, vec!["blocking", "epoll", "busy-poll"]);
            assert!(!netns);
        }
        other => panic!("{other:?}"),
    }
    match parse(&["event"]) {
        LabCommand::Event { methods, processes, .. } => {
            assert_eq!(methods, vec!["eventfd", "pipe", "futex", "busy-poll"]);
            assert!(!processes);
        }
        other => panic!("{other:?}"),
    }
    match parse(&["serial", "--size", "32"]) {
        LabCommand::Serial { methods, size, .. } => {
            assert_eq!(methods, vec!["blocking", "epoll", "busy-poll"]);
            assert_eq!(size, 32);
        }
        other => panic!("{other:?}"),
    }
    match parse(&["cycle"]) {
        LabCommand::Cycle { transport, servos, rate, .. } => {
            assert_eq!((transport.as_str(), servos.as_str(), rate), ("sim", "1-12", 1000.0));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(parse(&["compare", "--samples", "100", "--sizes", "16,64"]),
        LabCommand::Compare { samples: 100, ref sizes, json: false } if sizes == &[16, 64]));
    assert!(matches!(parse(&["doctor", "--json"]), LabCommand::Doctor { json: true, .. }));
    assert!(matches!(parse(&["udp-echo-server", "--bind", "10.0.0.1:7777"]), LabCommand::UdpEchoServer { .. }));
}

#[test]
fn common_flags_become_rt_settings() {
    let LabCommand::Wakeup { common, .. } = parse(&[
        "wakeup",
        "--policy",
        "fifo",
        "--cpu",
        "0-1",
        "--mlock",
        "--busy-wait-us",
        "20",
        "--load",
        "3",
        "--samples",
        "42",
    ]) else {
        panic!()
    };
    let o = common.options().unwrap();
    assert_eq!(o.rt.policy, Policy::Fifo);
    assert_eq!(o.rt.priority, 80, "fifo without --priority gets the default");
    assert_eq!(o.rt.cpus, vec![0, 1]);
    assert!(o.rt.mlock);
    assert_eq!((o.load, o.samples, common.busy_wait_us), (3, 42, 20));

    let LabCommand::Wakeup { common, .. } = parse(&["wakeup", "--policy", "deadline"]) else { panic!() };
    assert!(common.options().unwrap().rt.deadline.is_some());

    for bad in [&["wakeup", "--policy", "batch"][..], &["wakeup", "--priority", "5"], &["wakeup", "--cpu", "x"]] {
        let LabCommand::Wakeup { common, .. } = parse(bad) else { panic!() };
        assert!(common.options().is_err(), "{bad:?} accepted");
    }
}

#[test]
fn wakeup_through_the_cli_writes_json_csv_and_plot() {
    let dir = std::env::temp_dir();
    let csv = dir.join(format!("rtloop-lab-cli-{}.csv", std::process::id()));
    let png = dir.join(format!("rtloop-lab-cli-{}.png", std::process::id()));
    let cmd = parse(&[
        "wakeup",
        "--samples",
        "200",
        "--period-us",
        "500",
        "--json",
        "--no-progress",
        "--csv",
        csv.to_str().unwrap(),
        "--plot",
        png.to_str().unwrap(),
    ]);
    let out = run(cmd).unwrap().text;
    let v: serde_json::Value = serde_json::from_str(out.lines().next_back().unwrap()).unwrap();
    assert_eq!(v["samples"], 200);
    assert_eq!(v["experiment"], "wakeup");
    assert_eq!(v["conditions"]["policy"], "other");
    assert_eq!(std::fs::read_to_string(&csv).unwrap().lines().count(), 201);
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    std::fs::remove_file(&csv).unwrap();
    if std::env::var_os("KEEP_PLOT").is_none() {
        std::fs::remove_file(&png).unwrap();
    }
}

#[test]
fn cycle_against_the_simulator_through_the_cli() {
    let out = run(parse(&["cycle", "--samples", "50", "--rate", "500", "--json", "--no-progress"])).unwrap().text;
    let v: serde_json::Value = serde_json::from_str(out.lines().next_back().unwrap()).unwrap();
    assert_eq!(v["samples"], 50);
    assert_eq!(v["experiment"], "cycle");
    assert!(v["max_us"].as_f64().unwrap() > 0.0);
}
