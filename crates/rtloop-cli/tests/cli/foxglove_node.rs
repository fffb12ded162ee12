//! The official Foxglove TypeScript client, `@foxglove/ws-protocol` 0.8.0 from npm (with `ws`
//! and `ajv`, pinned in `tests/node/package-lock.json`), against `rtloop run --foxglove`: it
//! connects as its README shows (offering `foxglove.websocket.v1` alone) and as a client
//! that offers both names, subscribes to every channel, validates every payload against the
//! advertised JSON schema, and finds that each `rtloop.*` schema refuses a payload missing a
//! field (`tests/node/client.js`). The Python client of `python/tests/test_foxglove.py`
//! offers `foxglove.sdk.v1`.
//!
//! The packages are installed once (`npm ci`) into a directory under cargo's target tmp dir
//! named after the lock file; without node or npm the tests skip, visibly.
#![cfg(feature = "foxglove")]

use crate::support;

use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;
use support::*;

const FILES: [&str; 3] = ["package.json", "package-lock.json", "client.js"];

fn has(tool: &str) -> bool {
    Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// The directory with the client and its packages installed; None (skipped) without node.
fn node_client() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        if !has("node") || !has("npm") {
            return None;
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node");
        let mut digest = 0xcbf2_9ce4_8422_2325u64;
        for f in FILES {
            let bytes = std::fs::read(src.join(f)).unwrap_or_else(|e| panic!("tests/node/{f}: {e}"));
            digest = bytes.iter().fold(digest, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        }
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("foxglove-node-{digest:016x}"));
        let ready = dir.join(".ready");
        if !ready.exists() {
            std::fs::create_dir_all(&dir).unwrap();
            for f in FILES {
                std::fs::copy(src.join(f), dir.join(f)).unwrap();
            }
            let ran = run_limited(
                Command::new("npm")
                    .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"])
                    .current_dir(&dir),
                b"",
                Duration::from_secs(600),
            );
            assert!(
                ran.success(),
                "npm ci in {} failed (these tests need the npm registry): {}",
                dir.display(),
                ran.describe()
            );
            std::fs::write(&ready, b"").unwrap();
        }
        Some(dir)
    })
    .as_deref()
}

/// Run the client against a lockstep run serving Foxglove; (the client's report, whether it
/// passed its checks, the run's foxglove counts).
fn client_against_a_run(offer: &str) -> Option<(Json, bool, Json)> {
    let Some(dir) = node_client() else {
        rtloop_testkit::skip("node and npm are needed for the official Foxglove TypeScript client");
        return None;
    };
    let port = free_tcp_port();
    // Long enough in simulated time for the client to start (node takes a second or two on
    // a busy machine); stopped with SIGINT once the client is done.
    let run = Session::spawn(Command::new(rtloop_bin()).args([
        "run",
        "--lockstep",
        "--duration",
        "600",
        "--foxglove",
        &format!("127.0.0.1:{port}"),
        "--foxglove-every",
        "10",
        "--json",
        "--quiet",
    ]));
    let client = run_limited(
        Command::new("node")
            .arg("client.js")
            .arg(format!("ws://127.0.0.1:{port}"))
            .arg(offer)
            .arg("30")
            .current_dir(dir),
        b"",
        Duration::from_secs(120),
    );
    run.interrupt();
    let ran = run.finish(Duration::from_secs(120));
    let report: Json = client
        .stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("the client printed its report: {}", client.describe()));
    let summary: Json = ran
        .stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("the run printed its summary: {}", ran.describe()));
    let fox = summary["live"]["publishers"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["sink"] == "foxglove"))
        .cloned()
        .expect("foxglove counts");
    Some((report, client.success(), fox))
}

fn check(report: &Json, passed: bool) {
    assert!(passed, "the client's checks: {report:#}");
    for t in ["/cycle", "/bus/1/servo/1/state", "/bus/4/servo/12/command", "/imu", "/imu/transform", "/events"] {
        assert!(report["channels"].get(t).is_some(), "{t} advertised: {report}");
    }
    assert!(report["counts"]["/cycle"].as_u64().unwrap() >= 30, "{report}");
    assert!(report["counts"]["/bus/1/servo/1/state"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["invalid"], serde_json::json!([]), "every payload validates: {report}");
    // Each rtloop.* schema refused the payloads with a field left out.
    let checked: Vec<&str> =
        report["missingFieldChecked"].as_array().unwrap().iter().filter_map(Json::as_str).collect();
    for s in ["rtloop.CycleTiming", "rtloop.ServoState", "rtloop.ServoCommand", "rtloop.Imu"] {
        assert!(checked.contains(&s), "{s} checked: {report}");
    }
    assert_eq!(report["missingFieldAccepted"], serde_json::json!([]), "{report}");
}

#[test]
fn the_official_typescript_client_connects_as_its_readme_shows() {
    let Some((report, passed, fox)) = client_against_a_run("readme") else { return };
    assert_eq!(report["offered"], serde_json::json!(["foxglove.websocket.v1"]), "{report}");
    assert_eq!(report["negotiated"], "foxglove.websocket.v1", "{report}");
    check(&report, passed);
    assert_eq!(fox["detail"]["clients_legacy_subprotocol"], 1, "{fox}");
    assert_eq!(fox["refused"], 0, "{fox}");
}

#[test]
fn the_official_typescript_client_offering_both_names_gets_the_sdks() {
    let Some((report, passed, fox)) = client_against_a_run("foxglove.websocket.v1,foxglove.sdk.v1") else { return };
    assert_eq!(report["negotiated"], "foxglove.sdk.v1", "{report}");
    check(&report, passed);
    assert_eq!(fox["detail"]["clients_legacy_subprotocol"], 0, "{fox}");
    assert_eq!(fox["refused"], 0, "{fox}");
}
