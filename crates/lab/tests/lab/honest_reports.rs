//! Reports say what was measured (issue 9, §6): `lab cycle` measures query-only cycles and
//! says so in its label, its head line and its JSON conditions; `lab udp-echo` says whether
//! the path was loopback or a network namespace (the netns run needs root and is checked on
//! the real command in `crates/rtloop-cli/tests/cli/lab_cli.rs`). Second round: a cycle experiment in
//! which replies were missing is a failure, not a result; labels agree with their numbers.

use clap::Parser;
use rtloop_lab::cli::{run, LabCommand};

#[derive(Parser, Debug)]
struct Lab {
    #[command(subcommand)]
    cmd: LabCommand,
}

/// The text of `rtloop lab ARGS --json --no-progress`, and its last line as JSON.
fn lab_json(args: &[&str]) -> (String, serde_json::Value) {
    let argv = std::iter::once("lab").chain(args.iter().copied()).chain(["--json", "--no-progress"]);
    let cmd = Lab::try_parse_from(argv).unwrap_or_else(|e| panic!("{args:?}: {e}")).cmd;
    let out = run(cmd).unwrap_or_else(|e| panic!("{args:?}: {e}")).text;
    let json = serde_json::from_str(out.lines().next_back().unwrap()).unwrap();
    (out, json)
}

#[test]
fn cycle_says_it_measured_query_only_cycles() {
    let (out, json) = lab_json(&["cycle", "--samples", "20", "--rate", "500"]);
    let head = out.lines().next().unwrap();
    assert!(head.contains("commands query-only"), "{head}");
    assert_eq!(json["conditions"]["commands"], "query-only", "{json}");
    assert!(json["label"].as_str().unwrap().ends_with("query-only"), "{json}");
}

#[test]
fn udp_echo_says_the_path_was_loopback() {
    let (out, json) = lab_json(&["udp-echo", "--samples", "20", "--sizes", "16", "--methods", "blocking"]);
    let head = out.lines().next().unwrap();
    assert!(head.contains("network loopback"), "{head}");
    assert_eq!(json["conditions"]["network"], "loopback", "{json}");
    assert!(!json["label"].as_str().unwrap().contains("netns"), "{json}");
}

#[test]
fn a_cycle_whose_replies_never_came_is_a_failure() {
    // A peer that listens but never answers.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let transport = format!("udp:{}", silent.local_addr().unwrap());
    let argv = ["lab", "cycle", "--transport", &transport, "--servos", "3", "--samples", "5", "--rate", "100"];
    let cmd = Lab::try_parse_from(argv.iter().chain(&["--json", "--no-progress"])).unwrap().cmd;
    let report = run(cmd).expect("the cycles ran");
    let failure = report.failure.expect("missing replies make a failed measurement");
    assert!(
        failure.starts_with("none of the 5 expected replies came (5 cycles: 5 timed out, 0 bus failures)"),
        "{failure}"
    );
    assert!(failure.contains(&format!("check that servo 3 answers on {transport}")), "{failure}");
    assert!(!failure.contains('\n'), "{failure}");
    // Said before the figures, and in the JSON with the counts.
    assert_eq!(report.text.lines().nth(1), Some(format!("FAILED: {failure}").as_str()), "{}", report.text);
    let json: serde_json::Value = serde_json::from_str(report.text.lines().next_back().unwrap()).unwrap();
    assert_eq!(json["failure"], failure.as_str());
    for (key, value) in [("expected_replies", 5), ("missing_replies", 5), ("timed_out_cycles", 5), ("bus_failures", 0)]
    {
        assert_eq!(json["conditions"][key], value, "{key}: {json}");
    }
    assert!(
        json["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w == "5 missing replies, 5 timed-out cycles, 0 bus failures over 5 cycles"),
        "{json}"
    );
}

#[test]
fn a_cycle_where_every_reply_came_is_no_failure() {
    let (out, json) = lab_json(&["cycle", "--servos", "1", "--samples", "1"]);
    assert_eq!(json["failure"], serde_json::Value::Null, "{json}");
    assert_eq!(json["conditions"]["missing_replies"], 0, "{json}");
    assert!(!out.contains("FAILED"), "{out}");
}

#[test]
fn labels_agree_with_their_numbers() {
    let (out, json) = lab_json(&["cycle", "--servos", "1", "--samples", "1"]);
    assert_eq!(json["label"], "cycle sim, 1 servo, 1000 Hz, query-only", "{json}");
    assert!(out.contains("query-only (1 sample)\n"), "{out}");
    let (out, _) = lab_json(&["cycle", "--servos", "1-2", "--samples", "2"]);
    assert!(out.contains("cycle sim, 2 servos, 1000 Hz, query-only (2 samples)\n"), "{out}");
    assert_eq!(rtloop_lab::report::count(1, "missing reply", "missing replies"), "1 missing reply");
    assert_eq!(rtloop_lab::report::count(0, "cycle", "cycles"), "0 cycles");
    assert_eq!(rtloop_lab::report::count(2, "period", "periods"), "2 periods");
    let err = rtloop_lab::check::samples_in_all(10_000_000, 5, "x").unwrap_err().to_string();
    assert!(err.contains("for 5 runs") && err.contains("50000000 samples in all"), "{err}");
}
