//! The official Foxglove TypeScript client, `@foxglove/ws-protocol` 0.8.0 from npm (with `ws`,
//! `ajv` and Foxglove's own JSON schemas, `@foxglove/schemas` 2.1.0, pinned in
//! `tests/node/package-lock.json`), against `rtloop run --foxglove` and `rtloop log serve`: it
//! connects as its README shows (offering `foxglove.websocket.v1` alone) and as a client
//! that offers both names, subscribes to every channel, validates every payload against the
//! advertised JSON schema and every `foxglove.*` payload against Foxglove's schema of that
//! name, and finds that each `rtloop.*` schema refuses a payload missing a field
//! (`tests/node/client.js`). With physics it sees the robot in 3D: the scene, every body's
//! pose, and the body's position on `/imu/transform` — from a log, exactly the logged one. The Python client of `python/tests/test_foxglove.py`
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

const FILES: [&str; 4] = ["package.json", "package-lock.json", "client.js", "validate.js"];

fn has(tool: &str) -> bool {
    Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// The directory with the client and its packages installed; None (skipped) without node.
pub(crate) fn node_client() -> Option<&'static Path> {
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
    client_against(&[], offer)
}

/// The same, the run given `extra` arguments (`--physics`).
fn client_against(extra: &[&str], offer: &str) -> Option<(Json, bool, Json)> {
    let port = free_tcp_port();
    // Long enough in simulated time for the client to start (node takes a second or two on
    // a busy machine); stopped with SIGINT once the client is done.
    let address = format!("127.0.0.1:{port}");
    let mut args = vec!["run", "--lockstep", "--duration", "600", "--foxglove", &address, "--foxglove-every", "10"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--json", "--quiet"]);
    let (report, passed, ran) = client_against_server(Command::new(rtloop_bin()).args(&args), port, offer, 30)?;
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
    Some((report, passed, fox))
}

/// The client against the server `server` starts on `port`, until `cycles` /cycle messages:
/// (its report, whether it passed its checks, the server's output).
fn client_against_server(server: &mut Command, port: u16, offer: &str, cycles: u32) -> Option<(Json, bool, Ran)> {
    let Some(dir) = node_client() else {
        rtloop_testkit::skip("node and npm are needed for the official Foxglove TypeScript client");
        return None;
    };
    let run = Session::spawn(server);
    let client = run_limited(
        Command::new("node")
            .arg("client.js")
            .arg(format!("ws://127.0.0.1:{port}"))
            .arg(offer)
            .arg(cycles.to_string())
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
    Some((report, client.success(), ran))
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
    // The well-known messages validate against Foxglove's own schemas too.
    assert_eq!(report["officialInvalid"], serde_json::json!([]), "{report}");
    let official: Vec<&str> = report["officialChecked"].as_array().unwrap().iter().filter_map(Json::as_str).collect();
    assert!(official.contains(&"foxglove.FrameTransform"), "{report}");
}

/// The 3D view of the built-in quadruped: the scene's primitives, every body's frame, and
/// the body's pose on /imu/transform agreeing with the bodies' (a position, not only an
/// attitude).
#[cfg(feature = "physics")]
fn check_3d(report: &Json) {
    assert_eq!(report["channels"]["/model/scene"], "foxglove.SceneUpdate", "{report}");
    assert_eq!(report["channels"]["/model/transforms"], "foxglove.FrameTransforms", "{report}");
    let official: Vec<&str> = report["officialChecked"].as_array().unwrap().iter().filter_map(Json::as_str).collect();
    for s in ["foxglove.SceneUpdate", "foxglove.FrameTransforms"] {
        assert!(official.contains(&s), "{s} judged by Foxglove's schema: {report}");
    }
    let scene = &report["samples"]["scene"];
    // The ground and the torso; four abduction cylinders and eight capsules; the feet and the
    // capsules' ends.
    assert_eq!(
        (&scene["cubes"], &scene["cylinders"], &scene["spheres"]),
        (&Json::from(2), &Json::from(12), &Json::from(20))
    );
    let tf = &report["samples"]["modelTransforms"];
    let frames: Vec<&str> =
        tf["transforms"].as_array().unwrap().iter().map(|t| t["child_frame_id"].as_str().unwrap()).collect();
    assert_eq!(frames.len(), 13, "{frames:?}");
    assert!(frames.contains(&"model/body") && frames.contains(&"model/rr_shank"), "{frames:?}");
    let base = tf["transforms"].as_array().unwrap().iter().find(|t| t["child_frame_id"] == "model/body").unwrap();
    let same_time =
        report["samples"]["bodyTransforms"].as_array().unwrap().iter().find(|b| b["logTime"] == tf["logTime"]);
    let body = same_time
        .unwrap_or_else(|| panic!("an /imu/transform of the same cycle as the last /model/transforms: {report}"));
    assert_eq!(body["translation"], base["translation"], "{report}");
    let z = body["translation"]["z"].as_f64().unwrap();
    assert!((0.03..0.6).contains(&z), "the body's height is in its transform: {z}");
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

#[cfg(feature = "physics")]
#[test]
fn the_official_typescript_client_sees_a_run_with_physics_in_3d() {
    let Some((report, passed, fox)) = client_against(&["--physics"], "foxglove.websocket.v1,foxglove.sdk.v1") else {
        return;
    };
    check(&report, passed);
    check_3d(&report);
    assert_eq!(fox["errors"], 0, "{fox}");
}

/// A robot of meshes: Menagerie's Go2, whose scene (23 MB of JSON) is far larger than a
/// client's queue and the socket's write buffer.
#[cfg(feature = "physics")]
#[test]
fn the_official_typescript_client_sees_menageries_go2_in_3d() {
    let Some(models) = crate::robots::models() else { return };
    let scratch = Scratch::new("foxglove-go2");
    let config = crate::robots::run_file(&scratch, &models, "go2", |t| t);
    let Some((report, passed, fox)) =
        client_against(&["--config", config.to_str().unwrap(), "--physics"], "foxglove.sdk.v1")
    else {
        return;
    };
    check(&report, passed);
    let scene = &report["samples"]["scene"];
    assert_eq!(scene["triangles"], 33, "the Go2's visual meshes: {report}");
    assert_eq!(report["samples"]["modelTransforms"]["transforms"].as_array().unwrap().len(), 17, "{report}");
    assert_eq!(fox["errors"], 0, "{fox}");
}

#[cfg(feature = "physics")]
#[test]
fn the_official_typescript_client_plays_a_logged_run_with_physics_in_3d() {
    let scratch = Scratch::new("foxglove-serve-3d");
    let log = scratch.path("run.tlog");
    crate::physics::logged_pushed_run(&log, "6", "1:0,40,0:0.2");
    let port = free_tcp_port();
    let address = format!("127.0.0.1:{port}");
    let Some((report, passed, ran)) = client_against_server(
        Command::new(rtloop_bin()).args([
            "log",
            "serve",
            log.to_str().unwrap(),
            "--foxglove",
            &address,
            "--speed",
            "2",
        ]),
        port,
        "foxglove.sdk.v1",
        100,
    ) else {
        return;
    };
    check(&report, passed);
    check_3d(&report);
    assert!(!ran.stderr.contains("warning"), "{}", ran.describe());
    // Every body pose played is the log's, at its log time.
    let o = rtloop(&["log", "dump", log.to_str().unwrap(), "--record", "body"]);
    let logged: std::collections::BTreeMap<i64, Json> = stdout(&o)
        .lines()
        .map(|l| {
            let v: Json = serde_json::from_str(l).unwrap();
            ((v["time"].as_f64().unwrap() * 1e6).round() as i64, v["value"]["position_m"].clone())
        })
        .collect();
    let played = report["samples"]["bodyTransforms"].as_array().unwrap();
    assert!(played.len() >= 50, "{report}");
    for b in played {
        let us = b["logTime"].as_str().unwrap().parse::<i64>().unwrap() / 1000;
        let p = &logged[&us];
        assert_eq!(b["translation"], serde_json::json!({"x": p[0], "y": p[1], "z": p[2]}), "at {us} µs");
    }
}

#[test]
fn the_official_typescript_client_offering_both_names_gets_the_sdks() {
    let Some((report, passed, fox)) = client_against_a_run("foxglove.websocket.v1,foxglove.sdk.v1") else { return };
    assert_eq!(report["negotiated"], "foxglove.sdk.v1", "{report}");
    check(&report, passed);
    assert_eq!(fox["detail"]["clients_legacy_subprotocol"], 0, "{fox}");
    assert_eq!(fox["refused"], 0, "{fox}");
}
