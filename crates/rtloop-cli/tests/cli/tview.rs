//! tview (moteus-gui from PyPI, unmodified) against `rtloop sim` over its fdcanusb
//! pseudo-terminal, in a real X window under Xvfb: it reads the configuration and the
//! telemetry schemas, streams `servo_stats` while a position command typed into its console
//! runs, plots the position, and a screenshot is taken.
//!
//! The GUI is driven by tests/python/tview_driver.py, which builds tview's own main window
//! and does what a person clicks (see there). The heavy install (PySide6, matplotlib,
//! scipy) is a virtual environment cached under cargo's target tmp dir; Xvfb and the X
//! libraries PySide6 needs come from Debian when missing.

use crate::support;

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use support::*;

/// The moteus-gui release these tests were written against.
const MOTEUS_GUI_VERSION: &str = "1.1.1";

/// Debian packages PySide6's xcb (and offscreen) platform plugins load, an X server, and a
/// font for the text.
const X_PACKAGES: &[&str] = &[
    "xvfb",
    "libegl1",
    "libgl1",
    "libx11-xcb1",
    "libdbus-1-3",
    "libfontconfig1",
    "libfreetype6",
    "libglib2.0-0",
    "libxcb-cursor0",
    "libxcb-icccm4",
    "libxcb-image0",
    "libxcb-keysyms1",
    "libxcb-randr0",
    "libxcb-render-util0",
    "libxcb-shape0",
    "libxcb-xkb1",
    "libxkbcommon-x11-0",
    "fonts-dejavu-core",
];

fn tview_python() -> PathBuf {
    python_venv(
        &format!("moteus-gui-venv-{MOTEUS_GUI_VERSION}"),
        &[&format!("moteus-gui=={MOTEUS_GUI_VERSION}"), &format!("moteus=={MOTEUS_VERSION}")],
    )
}

fn driver() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/tview_driver.py")
}

/// Libraries PySide6's xcb plugin in the venv of `python` cannot find (ldd's "not found").
fn xcb_plugin_missing_libraries(python: &std::path::Path) -> Result<Vec<String>, String> {
    let venv = python.parent().and_then(|p| p.parent()).ok_or("no venv")?;
    let lib = std::fs::read_dir(venv.join("lib"))
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path().join("site-packages/PySide6/Qt/plugins/platforms/libqxcb.so"))
        .find(|p| p.exists())
        .ok_or("PySide6 has no xcb plugin")?;
    let o = Command::new("ldd").arg(&lib).output().map_err(|e| format!("ldd: {e}"))?;
    Ok(String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains("not found"))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect())
}

/// An X server tview can open a window on, or why there is none.
fn x_display(python: &std::path::Path) -> Result<Xvfb, String> {
    apt_packages(X_PACKAGES)?;
    let missing = xcb_plugin_missing_libraries(python)?;
    if !missing.is_empty() {
        return Err(format!("PySide6's xcb plugin cannot load {}", missing.join(", ")));
    }
    Xvfb::start()
}

#[test]
fn tview_reads_the_config_and_plots_servo_stats_from_the_simulator() {
    let python = tview_python();
    let x = x_display(&python);
    let path = unique_path("tview");
    let mut sim = SimProcess::start(&["--fdcanusb", path.to_str().unwrap(), "--servos", "1"]);
    let scratch = Scratch::new("tview");
    let shot = scratch.path("tview.png");
    let mut cmd = Command::new(&python);
    cmd.arg(driver())
        .arg("--fdcanusb")
        .arg(&path)
        .args(["-t", "1", "--screenshot"])
        .arg(&shot)
        // A move to 1 rev from the console: 1 N·m at most, a trajectory limited to 0.5 rev/s
        // and 1 rev/s², a 10 s watchdog (the default one, servo.default_timeout_s, is 0.1 s).
        .args(["--command", "d pos 1 0 1 v0.5 a1 t10", "--emissions", "30", "--limit", "60"])
        .args(["--config-key", "id.id", "--config-key", "servo.default_timeout_s"])
        .args(["--config-key", "servopos.position_min", "--config-key", "motor_position.output.sign"]);
    match &x {
        Ok(x) => {
            cmd.env("DISPLAY", &x.display).env("QT_QPA_PLATFORM", "xcb");
        }
        Err(why) => {
            rtloop_testkit::skip(&format!("tview ran with QT_QPA_PLATFORM=offscreen, not in an X window: {why}"));
            cmd.env_remove("DISPLAY").env("QT_QPA_PLATFORM", "offscreen");
        }
    }
    let ran = run_limited(&mut cmd, b"", Duration::from_secs(90));
    let report: Value = ran
        .stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("the tview driver printed no report: {}", ran.describe()));
    assert!(ran.success(), "{}\n{report:#}", ran.describe());
    // The simulator's side of the conversation: its closing report counts the console lines
    // tview sent (tel stop, conf list, conf schema/data per group, tel list, tel schema per
    // record, tel fmt, tel rate, the typed command) and no refusal.
    let closing = sim.stop_and_output();
    let lines: u64 = closing
        .split("console ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no console figures in the simulator's report: {closing}"));
    assert!(lines >= 20, "{closing}");
    assert!(!closing.contains("answered ERR"), "{closing}");
    if x.is_ok() {
        assert_eq!(report["platform"], "xcb", "{report:#}");
    }

    // It read the configuration (`conf list` + `conf schema`/`conf data` per group, or
    // `conf enumerate`) into its tree.
    let groups: Vec<&str> = report["config_groups"].as_array().unwrap().iter().map(|g| g.as_str().unwrap()).collect();
    for g in ["id", "servo", "servopos", "motor_position"] {
        assert!(groups.contains(&g), "config group {g} missing: {groups:?}");
    }
    assert!(report["config_leaves"].as_u64().unwrap() > 50, "{report:#}");
    // The schema form (not the `conf enumerate` fallback for old firmware), decoded right.
    assert_eq!(report["config_schema_form"], true, "{report:#}");
    let shown = |key: &str| report["config_values"][key].as_str().unwrap_or_else(|| panic!("{key}: {report:#}"));
    assert_eq!(shown("id.id"), "1");
    assert!((shown("servo.default_timeout_s").parse::<f64>().unwrap() - 0.1).abs() < 1e-6, "{report:#}");
    assert_eq!(shown("servopos.position_min"), "nan");
    assert_eq!(shown("motor_position.output.sign"), "1");
    // And every telemetry record's schema.
    let records: Vec<&str> =
        report["telemetry_records"].as_array().unwrap().iter().map(|g| g.as_str().unwrap()).collect();
    for r in ["servo_stats", "firmware", "git"] {
        assert!(records.contains(&r), "record {r} missing: {records:?}");
    }

    // servo_stats streamed (tview asked with `tel rate servo_stats 100`), and showed the
    // command typed into the console taking effect: position mode, the joint moving.
    assert!(report["servo_stats_emissions"].as_u64().unwrap() >= 33, "{report:#}");
    assert!(report["modes_after_command"].as_array().unwrap().contains(&Value::from(10)), "{report:#}");
    let (p0, p1) = (report["position_at_command"].as_f64().unwrap(), report["position_last"].as_f64().unwrap());
    assert!(p1 > p0 + 0.3, "the joint did not move towards 1 rev: {p0} -> {p1}");
    let console = report["console_tail"].as_str().unwrap();
    assert!(console.contains("tel rate servo_stats 100"), "{console}");
    assert!(!console.contains("ERR"), "an ERR reached tview's console: {console}");

    // The screenshot: a PNG of the whole window.
    assert_eq!(report["screenshot_saved"], true, "{report:#}");
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert_eq!(report["screenshot_size"], serde_json::json!([1280, 800]), "{report:#}");
    // RTLOOP_TVIEW_SCREENSHOT=FILE keeps it (how docs/images/tview-sim.png is made).
    if let Some(keep) = std::env::var_os("RTLOOP_TVIEW_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
}
