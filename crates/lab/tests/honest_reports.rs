//! Reports say what was measured (issue 9, §6): `lab cycle` measures query-only cycles and
//! says so in its label, its head line and its JSON conditions; `lab udp-echo` says whether
//! the path was loopback or a network namespace (the netns run needs root and is checked on
//! the real command in `crates/rtloop/tests/lab_cli.rs`).

use clap::Parser;
use lab::cli::{run, LabCommand};

#[derive(Parser, Debug)]
struct Lab {
    #[command(subcommand)]
    cmd: LabCommand,
}

/// The text of `rtloop lab ARGS --json --no-progress`, and its last line as JSON.
fn lab_json(args: &[&str]) -> (String, serde_json::Value) {
    let argv = std::iter::once("lab").chain(args.iter().copied()).chain(["--json", "--no-progress"]);
    let cmd = Lab::try_parse_from(argv).unwrap_or_else(|e| panic!("{args:?}: {e}")).cmd;
    let out = run(cmd).unwrap_or_else(|e| panic!("{args:?}: {e}"));
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
