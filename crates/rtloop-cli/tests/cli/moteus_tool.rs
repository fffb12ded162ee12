//! moteus_tool (the official moteus 1.1.1 Python package, unmodified, from PyPI) against
//! `rtloop sim` over its fdcanusb pseudo-terminal: every action that makes sense for a
//! simulated servo works (`--info`, `--dump-config`, `--write-config`, `--restore-config`,
//! `--stop`, `--zero-offset`, `--set-offset`, `--console`, and `moteus.Stream` from a
//! script); `--calibrate` is refused quickly with the reason.
//!
//! Every invocation has a hard time limit: a tool that hangs fails its test with what it
//! printed so far instead of hanging the run.

use crate::support;

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use support::*;

/// The most any single moteus_tool invocation may take.
const LIMIT: Duration = Duration::from_secs(60);

/// `python -m moteus.moteus_tool --fdcanusb PATH -t 1 ARGS…`, bounded by [`LIMIT`].
fn moteus_tool(pty: &Path, args: &[&str]) -> Ran {
    run_limited(moteus_tool_command(pty).args(args), b"", LIMIT)
}

fn moteus_tool_command(pty: &Path) -> Command {
    let mut cmd = Command::new(moteus_python());
    cmd.args(["-m", "moteus.moteus_tool", "--fdcanusb"]).arg(pty).args(["-t", "1"]);
    cmd
}

/// moteus_tool ran `args` and exited 0; its stdout.
fn moteus_tool_ok(pty: &Path, args: &[&str]) -> String {
    let ran = moteus_tool(pty, args);
    assert!(ran.success(), "moteus_tool {args:?}: {}", ran.describe());
    ran.stdout
}

/// A simulated servo 1 behind a fresh pty.
fn sim() -> (SimProcess, std::path::PathBuf) {
    let path = unique_path("moteus-tool");
    let sim = SimProcess::start(&["--fdcanusb", path.to_str().unwrap(), "--servos", "1"]);
    (sim, path)
}

/// `key value` lines of a `conf enumerate` / `--dump-config` listing.
fn config_value(dump: &str, key: &str) -> Option<String> {
    dump.lines().find_map(|l| {
        let (k, v) = l.trim().split_once(' ')?;
        (k == key).then(|| v.trim().to_string())
    })
}

fn number(dump: &str, key: &str) -> f64 {
    let v = config_value(dump, key).unwrap_or_else(|| panic!("no {key} in\n{dump}"));
    v.parse().unwrap_or_else(|_| panic!("{key} = {v:?} is not a number"))
}

/// `rtloop servo --transport fdcanusb:PATH --id 1 query --json`.
fn query(pty: &Path) -> Value {
    let transport = format!("fdcanusb:{}", pty.display());
    let ran = run_limited(
        Command::new(rtloop_bin()).args(["servo", "--transport", &transport, "--id", "1", "query", "--json"]),
        b"",
        LIMIT,
    );
    assert!(ran.success(), "rtloop servo query: {}", ran.describe());
    serde_json::from_str(ran.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", ran.stdout))
}

#[test]
fn info_reports_serial_model_git_hash_and_uuid() {
    let (_sim, pty) = sim();
    let out = moteus_tool_ok(&pty, &["--info"]);
    let j: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("--info is not JSON ({e}): {out}"));
    for key in ["serial_number", "model", "git_hash", "uuid"] {
        let v = j[key].as_str().unwrap_or_else(|| panic!("--info has no {key}: {j}"));
        assert!(!v.is_empty(), "--info {key} is empty: {j}");
    }
    // A uuid in its canonical text form (16 bytes from `conf enumerate uuid`).
    assert_eq!(j["uuid"].as_str().unwrap().len(), 36, "{j}");
    assert_eq!(j["git_hash"].as_str().unwrap().len(), 40, "{j}");
}

#[test]
fn dump_config_lists_the_firmware_keys() {
    let (_sim, pty) = sim();
    let dump = moteus_tool_ok(&pty, &["--dump-config"]);
    assert_eq!(config_value(&dump, "id.id").as_deref(), Some("1"), "{dump}");
    assert!(number(&dump, "servo.default_timeout_s") > 0.0, "{dump}");
    for key in ["servo.pid_position.kp", "servo.max_current_A", "servopos.position_min", "motor_position.output.offset"]
    {
        assert!(config_value(&dump, key).is_some(), "--dump-config has no {key}:\n{dump}");
    }
    // Nothing but `key value` lines.
    for line in dump.lines().filter(|l| !l.trim().is_empty()) {
        assert!(line.trim().split_once(' ').is_some(), "not a `key value` line: {line:?}");
    }
}

#[test]
fn write_config_sets_what_dump_config_then_shows() {
    let (_sim, pty) = sim();
    let scratch = Scratch::new("write-config");
    let file = scratch.path("settings.cfg");
    std::fs::write(&file, "conf set servo.pid_position.kp 7.5\nconf set servo.default_timeout_s 0.35\n\n").unwrap();
    let out = moteus_tool_ok(&pty, &["--write-config", file.to_str().unwrap()]);
    assert!(!out.contains("could not be set"), "{out}");
    let dump = moteus_tool_ok(&pty, &["--dump-config"]);
    assert_eq!(number(&dump, "servo.pid_position.kp"), 7.5, "{dump}");
    assert_eq!(number(&dump, "servo.default_timeout_s"), 0.35, "{dump}");
    // A line the servo refuses is reported by moteus_tool, and the rest still applies.
    std::fs::write(&file, "conf set servo.no_such_key 1\nconf set servo.pid_position.kp 6\n").unwrap();
    let out = moteus_tool_ok(&pty, &["--write-config", file.to_str().unwrap()]);
    assert!(out.contains("could not be set") && out.contains("servo.no_such_key"), "{out}");
    let dump = moteus_tool_ok(&pty, &["--dump-config"]);
    assert_eq!(number(&dump, "servo.pid_position.kp"), 6.0, "{dump}");
}

#[test]
fn restore_config_round_trips_an_edited_dump() {
    let (_sim, pty) = sim();
    let scratch = Scratch::new("restore-config");
    let dump = moteus_tool_ok(&pty, &["--dump-config"]);
    let before = number(&dump, "servo.pid_position.kp");
    let edited: String = dump
        .lines()
        .map(|l| {
            if l.starts_with("servo.pid_position.kp ") {
                "servo.pid_position.kp 12.25".to_string()
            } else {
                l.to_string()
            }
        })
        .map(|l| l + "\n")
        .collect();
    assert_ne!(before, 12.25);
    let file = scratch.path("backup.cfg");
    std::fs::write(&file, &edited).unwrap();
    let out = moteus_tool_ok(&pty, &["--restore-config", file.to_str().unwrap()]);
    // Every key the servo dumped, it takes back.
    assert!(!out.contains("could not be set"), "{out}");
    let after = moteus_tool_ok(&pty, &["--dump-config"]);
    assert_eq!(number(&after, "servo.pid_position.kp"), 12.25, "{after}");
    // And nothing else changed.
    let strip = |d: &str| -> Vec<String> {
        d.lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with("servo.pid_position.kp "))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(strip(&dump), strip(&after));
}

#[test]
fn what_moteus_tool_stores_survives_a_restart_with_config_dir() {
    let dir = Scratch::new("config-dir");
    let path = unique_path("persist");
    let args = ["--fdcanusb", path.to_str().unwrap(), "--servos", "1", "--config-dir", dir.dir().to_str().unwrap()];
    let mut sim = SimProcess::start(&args);
    // --restore-config ends with `conf write`; --set-offset stores the output offset too.
    let dump = moteus_tool_ok(&path, &["--dump-config"]);
    let edited: String = dump
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| if l.starts_with("servo.pid_position.kp ") { "servo.pid_position.kp 12.25" } else { l })
        .map(|l| format!("{l}\n"))
        .collect();
    let file = dir.path("backup.txt");
    std::fs::write(&file, edited).unwrap();
    let out = moteus_tool_ok(&path, &["--restore-config", file.to_str().unwrap()]);
    assert!(!out.contains("could not be set"), "{out}");
    moteus_tool_ok(&path, &["--set-offset", "0.25"]);
    let report = sim.stop_and_output();
    assert!(report.contains("configurations stored"), "{report}");
    assert!(!report.contains("answered ERR"), "{report}");

    // A new simulator on the same directory powers up with what was stored.
    let _sim = SimProcess::start(&args);
    let after = moteus_tool_ok(&path, &["--dump-config"]);
    assert_eq!(number(&after, "servo.pid_position.kp"), 12.25, "{after}");
    let p = query(&path)["position"].as_f64().unwrap();
    assert!((p - 0.25).abs() < 0.01, "the stored output offset did not come back: position {p}");
}

#[test]
fn read_prints_a_telemetry_record_as_json() {
    let (_sim, pty) = sim();
    let out = moteus_tool_ok(&pty, &["--read", "servo_stats"]);
    let j: Value = serde_json::from_str(&out.replace("NaN", "null")).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(j["mode"], 0, "{j}");
    assert_eq!(j["fault"], 0, "{j}");
    assert!(j["bus_V"].as_f64().unwrap() > 20.0, "{j}");
}

#[test]
fn stop_puts_a_moving_servo_in_stopped_mode() {
    let (_sim, pty) = sim();
    let transport = format!("fdcanusb:{}", pty.display());
    // A 10 s watchdog: the servo is still in position mode when moteus_tool comes.
    let o = rtloop(&[
        "servo",
        "--transport",
        &transport,
        "--id",
        "1",
        "position",
        "--position",
        "0.1",
        "--watchdog-timeout",
        "10",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(query(&pty)["mode"], 10);
    moteus_tool_ok(&pty, &["--stop"]);
    assert_eq!(query(&pty)["mode"], 0);
}

#[test]
fn set_offset_and_zero_offset_move_the_reported_position() {
    let (_sim, pty) = sim();
    let p = |j: &Value| j["position"].as_f64().unwrap_or_else(|| panic!("no position: {j}"));
    // The joint rests at 0 (a stopped pendulum); the offsets change what it reads.
    moteus_tool_ok(&pty, &["--set-offset", "0.25"]);
    let j = query(&pty);
    assert!((p(&j) - 0.25).abs() < 0.01, "after --set-offset 0.25: {j}");
    // It went through `d cfg-set-output`: the output offset in the configuration (stored
    // with `conf write`) now makes the output read 0.25.
    let dump = moteus_tool_ok(&pty, &["--dump-config"]);
    let offset = number(&dump, "motor_position.output.offset");
    assert!((offset - 0.25).abs() < 0.01, "motor_position.output.offset {offset}");
    moteus_tool_ok(&pty, &["--zero-offset"]);
    let j = query(&pty);
    assert!(p(&j).abs() < 0.01, "after --zero-offset: {j}");
    let dump = moteus_tool_ok(&pty, &["--dump-config"]);
    assert!(number(&dump, "motor_position.output.offset").abs() < 0.01, "{dump}");
}

#[test]
fn console_answers_a_conf_get_typed_on_stdin() {
    let (_sim, pty) = sim();
    // moteus_tool's console writes to sys.stdout.buffer.raw, which does not exist when
    // Python runs unbuffered (PYTHONUNBUFFERED or -u: AttributeError, exit 1).
    let mut console = Session::spawn(moteus_tool_command(&pty).arg("--console").env_remove("PYTHONUNBUFFERED"));
    console.write(b"conf get servo.default_timeout_s\n");
    let answered = console.wait_for_stdout(LIMIT, |out| out.lines().any(|l| l.trim().parse::<f64>().is_ok()));
    // moteus_tool's console copies stdin to the servo until stdin ends, then exits 0.
    let ran = console.finish(Duration::from_secs(20));
    assert!(answered, "no number came back: {}", ran.describe());
    assert!(ran.success(), "the console did not end with its stdin: {}", ran.describe());
    let value: f64 = ran.stdout.lines().find_map(|l| l.trim().parse().ok()).unwrap();
    assert!(value > 0.0, "{}", ran.describe());
}

#[test]
fn calibrate_is_refused_quickly_with_the_reason() {
    let (_sim, pty) = sim();
    let ran = moteus_tool(&pty, &["--calibrate"]);
    assert!(ran.exited(), "--calibrate hung: {}", ran.describe());
    assert!(!ran.success(), "--calibrate claimed success on a simulator: {}", ran.describe());
    // moteus_tool waits 2 s ("ensure it can spin freely") before the first phase command;
    // the refusal comes right after it (about 3 s in all here), not from a timeout. The bound
    // is loose on purpose: a loaded machine must not fail it.
    assert!(ran.elapsed < Duration::from_secs(30), "--calibrate took long to fail: {}", ran.describe());
    let all = format!("{}{}", ran.stdout, ran.stderr);
    assert!(all.contains("does not model"), "the refusal does not say why: {}", ran.describe());
    assert!(all.contains("phases"), "{}", ran.describe());
    // The servo is still usable afterwards.
    assert_eq!(query(&pty)["fault"], 0);
}

#[test]
fn the_moteus_stream_api_reads_a_config_value() {
    let (_sim, pty) = sim();
    let script = r#"
import asyncio, sys, moteus
async def main():
    c = moteus.Controller(id=1, transport=moteus.Fdcanusb(sys.argv[1]))
    s = moteus.Stream(c)
    await s.write_message(b"tel stop")
    await s.flush_read()
    kp = await s.command(b"conf get servo.pid_position.kp", allow_any_response=True)
    await s.command(b"conf set servo.pid_position.kp 3.5")
    kp2 = await s.command(b"conf get servo.pid_position.kp", allow_any_response=True)
    print(kp.decode(), kp2.decode())
asyncio.run(main())
"#;
    let ran = run_limited(Command::new(moteus_python()).args(["-c", script]).arg(&pty), b"", LIMIT);
    assert!(ran.success(), "{}", ran.describe());
    let values: Vec<f64> = ran.stdout.split_whitespace().map(|v| v.parse().unwrap()).collect();
    assert_eq!(values.len(), 2, "{}", ran.describe());
    assert!(values[0] > 0.0, "{}", ran.describe());
    assert_eq!(values[1], 3.5, "{}", ran.describe());
}
