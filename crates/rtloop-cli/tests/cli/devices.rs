//! `rtloop sim`, `servo` and `can` as a user meets them: whose link `sim` may replace,
//! numbers that are refused before anything starts, exit codes that say whether every reply
//! came, messages that say what the device said, and docs that name only what exists.
//!
//! Every wait is bounded; nothing here asserts on speed.

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use support::*;

/// `rtloop servo … query` over `transport` to servo `id`.
fn query(transport: &str, id: &str) -> Output {
    rtloop(&["servo", "--transport", transport, "--id", id, "query", "--json"])
}

/// A command that ran but did not get what it expected: exit 1, one line on stderr
/// containing `want`, no panic.
fn assert_device_failure(o: &Output, want: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains(want), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn a_second_sim_on_a_running_sims_path_is_refused_and_the_first_stays_reachable() {
    let path = unique_path("second");
    let path_s = path.to_str().unwrap();
    let _first = SimProcess::start(&["--fdcanusb", path_s, "--servos", "1"]);
    let link = std::fs::read_link(&path).unwrap();
    let o = rtloop(&["sim", "--fdcanusb", path_s, "--servos", "1", "--duration", "5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("already links to") && e.contains("choose another path"), "{e}");
    assert!(e.contains("rtloop (pid"), "the running simulator is named: {e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert_eq!(std::fs::read_link(&path).unwrap(), link, "the first simulator's link is untouched");
    let o = query(&format!("fdcanusb:{path_s}"), "1");
    assert!(o.status.success(), "the first simulator is still reachable: {}", stderr(&o));
}

#[test]
fn a_users_symlink_is_refused_and_left_as_it_was() {
    let victim = unique_path("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let link = unique_path("userlink");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let o = rtloop(&["sim", "--fdcanusb", link.to_str().unwrap(), "--duration", "5"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("that rtloop sim did not make") && e.contains("left alone"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert_eq!(std::fs::read_link(&link).unwrap(), victim);
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
}

#[test]
fn the_stale_link_of_a_killed_sim_is_taken_over() {
    let path = unique_path("killed");
    let path_s = path.to_str().unwrap();
    let mut killed = SimProcess::start(&["--fdcanusb", path_s, "--servos", "1"]);
    killed.sigkill();
    assert!(std::fs::symlink_metadata(&path).is_ok(), "a SIGKILLed simulator leaves its link behind");
    let _next = SimProcess::start(&["--fdcanusb", path_s, "--servos", "2"]);
    let o = query(&format!("fdcanusb:{path_s}"), "2");
    assert!(o.status.success(), "the new simulator serves at the old path: {}", stderr(&o));
}

#[test]
fn numbers_out_of_range_are_refused_with_the_flag_and_the_range() {
    let cases: &[(&[&str], &str)] = &[
        (&["sim", "--udp", "127.0.0.1:9", "--duration", "inf"], "--duration inf"),
        (&["sim", "--udp", "127.0.0.1:9", "--duration", "1e20"], "at most 31536000"),
        (&["sim", "--udp", "127.0.0.1:9", "--duration", "nan"], "--duration NaN"),
        (&["sim", "--udp", "127.0.0.1:9", "--duration", "-1"], "--duration -1"),
        (&["sim", "--udp", "127.0.0.1:9", "--servos", "1,1"], "given twice"),
        (&["servo", "--transport", "sim", "query", "--run", "--duration", "1e11"], "--duration"),
        (&["servo", "--transport", "sim", "query", "--run", "--duration", "nan"], "--duration"),
        (&["servo", "--transport", "sim", "query", "--duration", "1"], "only with --run"),
        (&["servo", "--transport", "sim", "query", "--timeout-ms", "nan"], "--timeout-ms"),
        (&["servo", "--transport", "sim", "query", "--timeout-ms", "0"], "--timeout-ms"),
        (&["servo", "--transport", "sim", "query", "--timeout-ms", "-3"], "--timeout-ms"),
        (&["servo", "--transport", "sim", "query", "--timeout-ms", "1e300"], "at most 60000"),
        (&["servo", "--transport", "sim", "position", "--position", "inf"], "--position inf"),
        (&["servo", "--transport", "sim", "position", "--velocity", "nan"], "--velocity"),
        (&["servo", "--transport", "sim", "position", "--kp-scale", "-1"], "--kp-scale"),
        (&["servo", "--transport", "sim", "position", "--watchdog-timeout=-inf"], "--watchdog-timeout"),
        (&["servo", "--transport", "sim", "position", "--watchdog-timeout", "nan"], "without a working watchdog"),
        (&["servo", "--transport", "sim", "position", "--watchdog-timeout", "1e9"], "without a working watchdog"),
        (
            &["frame", "encode", "position", "--position", "1e39"],
            "--position 1000000000000000000000000000000000000000 is out of range",
        ),
        (&["servo", "--transport", "sim", "position", "--maximum-torque", "1e39"], "--maximum-torque"),
        (&["servo", "--transport", "sim", "--id", "0", "query"], "--id 0"),
        (&["can", "--transport", "sim", "--write-can", "1,8001,1300,r", "--timeout-ms", "inf"], "--timeout-ms"),
        (&["can", "--transport", "sim", "--write-can", "1,8001,1300,r", "--run", "--duration", "inf"], "--duration"),
        (&["can", "--transport", "sim", "--write-can", "1,8001,1300,r", "--duration", "1"], "only with --run"),
        (&["can", "--transport", "sim", "--read-can", "0"], "--read-can 0"),
        (&["can", "--transport", "sim", "--write-can", "1,8001,1300,r", "--sim-servos", "0"], "--sim-servos"),
    ];
    for (args, want) in cases {
        assert_one_clear_message(args, want);
    }
}

#[test]
fn can_and_servo_exit_1_when_an_expected_reply_is_missing() {
    // No servo 5 on the simulated bus: the reply never comes.
    let o = rtloop(&["can", "--transport", "sim", "--write-can", "1,8005,1300,r", "--sim-servos", "1"]);
    assert_device_failure(&o, "timeout: 0 of 1 expected replies arrived");
    let path = unique_path("absent");
    let _sim = SimProcess::start(&["--fdcanusb", path.to_str().unwrap(), "--servos", "1"]);
    let transport = format!("fdcanusb:{}", path.display());
    let o = rtloop(&["servo", "--transport", &transport, "--id", "9", "query", "--timeout-ms", "50"]);
    assert_device_failure(&o, "no reply from servo 9");
    let o = rtloop(&["can", "--transport", &transport, "--write-can", "1,8009,1300,r", "--timeout-ms", "50"]);
    assert_device_failure(&o, "timeout: 0 of 1 expected replies arrived");
    // Everything answered: 0.
    let o = rtloop(&["can", "--transport", &transport, "--write-can", "1,8001,1300,r"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "CAN 1,100,2300000000");
    // A run with missing replies is no success either.
    let o = rtloop(&[
        "can",
        "--transport",
        &transport,
        "--write-can",
        "1,8009,1300,r",
        "--timeout-ms",
        "5",
        "--run",
        "--duration",
        "0.2",
    ]);
    assert_device_failure(&o, "cycles timed out");
    assert!(stdout(&o).contains(" timeouts"), "the summary is still printed: {}", stdout(&o));
}

#[test]
fn nothing_listening_at_a_udp_address_is_said_in_words() {
    // A port that was just free: nothing listens there, so its datagrams are refused.
    let port = free_udp_port();
    let transport = format!("udp:127.0.0.1:{port}");
    let o = rtloop(&["servo", "--transport", &transport, "query"]);
    assert_device_failure(&o, &format!("nothing is listening at {transport}"));
    assert!(stderr(&o).contains(&format!("rtloop sim --udp 127.0.0.1:{port}")), "{}", stderr(&o));
    assert!(!stderr(&o).contains("device disconnected"), "{}", stderr(&o));
    let o = rtloop(&["can", "--transport", &transport, "--write-can", "1,8001,1300,r"]);
    assert_device_failure(&o, "nothing is listening");
}

#[test]
fn junk_left_on_the_pty_does_not_spoil_the_first_query() {
    let path = unique_path("junk");
    let _sim = SimProcess::start(&["--fdcanusb", path.to_str().unwrap(), "--servos", "1"]);
    // An earlier client wrote half a line and went away.
    let mut pty = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    pty.write_all(b"garbage").unwrap();
    drop(pty);
    let o = query(&format!("fdcanusb:{}", path.display()), "1");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("\"mode\":0"), "{}", stdout(&o));
}

/// A device on a pty that refuses every line with `ERR unknown command` (a serial port that
/// is not an fdcanusb, say), linked at `link`.
struct RefusingDevice {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RefusingDevice {
    fn start(link: &std::path::Path) -> Self {
        let pty = nix::pty::openpty(None, None).unwrap();
        let mut modes = nix::sys::termios::tcgetattr(&pty.slave).unwrap();
        nix::sys::termios::cfmakeraw(&mut modes);
        nix::sys::termios::tcsetattr(&pty.slave, nix::sys::termios::SetArg::TCSANOW, &modes).unwrap();
        let name = std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd())).unwrap();
        std::os::unix::fs::symlink(name, link).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let _slave = pty.slave;
            let master = std::fs::File::from(pty.master);
            let mut writer = master.try_clone().unwrap();
            let mut reader = BufReader::new(master);
            while !flag.load(Ordering::SeqCst) {
                // Wait on the descriptor only when no line is buffered already.
                if reader.buffer().is_empty() {
                    let fd = std::os::fd::AsFd::as_fd(reader.get_ref());
                    let mut fds = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
                    if !matches!(nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(20u16)), Ok(n) if n > 0) {
                        continue;
                    }
                }
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                if !line.trim().is_empty() && writer.write_all(b"ERR unknown command\n").is_err() {
                    break;
                }
            }
        });
        RefusingDevice { stop, thread: Some(thread) }
    }
}

impl Drop for RefusingDevice {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn a_device_that_refuses_the_command_is_quoted_not_called_unpowered() {
    let link = unique_path("refusing");
    let _device = RefusingDevice::start(&link);
    let transport = format!("fdcanusb:{}", link.display());
    let o = rtloop(&["servo", "--transport", &transport, "--id", "1", "query", "--timeout-ms", "200"]);
    assert_device_failure(&o, "`ERR unknown command`");
    assert!(!stderr(&o).contains("powered"), "{}", stderr(&o));
    let o = rtloop(&["can", "--transport", &transport, "--write-can", "1,8001,1300,r", "--timeout-ms", "200"]);
    assert_device_failure(&o, "`ERR unknown command`");
}

#[test]
fn servo_text_prints_each_unit_at_a_fixed_precision() {
    let o = rtloop(&["servo", "--transport", "sim", "position", "--position", "0.3", "--velocity", "0.1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let line = stdout(&o);
    for (key, places) in [
        ("position", 4),
        ("velocity", 4),
        ("torque", 3),
        ("q_current", 3),
        ("d_current", 3),
        ("voltage", 2),
        ("temperature", 1),
    ] {
        let value = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {line}"));
        let decimals = value.split_once('.').map_or(0, |(_, d)| d.len());
        assert_eq!(decimals, places, "{key}={value} in {line}");
        let negative_zero = value.starts_with('-') && value[1..].chars().all(|c| c == '0' || c == '.');
        assert!(!negative_zero, "{key}={value} in {line}");
    }
}

#[test]
fn servo_and_can_help_document_the_exit_status() {
    for cmd in ["servo", "can"] {
        let o = rtloop(&[cmd, "--help"]);
        assert!(o.status.success());
        let help = stdout(&o);
        assert!(help.contains("Exit status: 0 when every expected reply arrived; 1 when"), "{cmd}: {help}");
    }
}

/// Each `rtloop WORD` written in backticks in `text`.
fn commands_named(text: &str) -> Vec<String> {
    text.match_indices("`rtloop ")
        .filter_map(|(i, m)| {
            let word: String =
                text[i + m.len()..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            (!word.is_empty() && !word.starts_with('-')).then_some(word)
        })
        .collect()
}

#[test]
fn the_device_docs_name_only_commands_and_clients_that_work() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let files = [
        "README.md",
        "docs/tour.md",
        "docs/cli.md",
        "docs/moteus-tools.md",
        "docs/udp-framing.md",
        "crates/io/src/udp.rs",
        "crates/io/src/fdcanusb.rs",
        "crates/simrobot/src/serve/mod.rs",
        "crates/simrobot/src/serve/pty.rs",
        "crates/simrobot/src/serve/runner.rs",
        "crates/rtloop-cli/src/cli/sim.rs",
        "crates/rtloop/src/sim_buses.rs",
        "crates/rtloop/src/devices.rs",
        "crates/rtloop-cli/src/cli/servo.rs",
        "crates/rtloop-cli/src/cli/can.rs",
    ];
    let mut checked = std::collections::BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        for word in commands_named(&text) {
            if checked.insert(word.clone()) {
                let o = rtloop(&[&word, "--help"]);
                assert!(o.status.success(), "{file} names `rtloop {word}`, which does not exist");
            }
        }
        // The simulator serves the diagnostic channel, and moteus_tool works against it
        // (tests/moteus_tool.rs): no document may still say otherwise.
        let prose = text.replace("\n//! ", " ").replace("\n/// ", " ").replace('\n', " ");
        for (i, _) in prose.match_indices("moteus_tool") {
            let after: String = prose[i..].chars().take(40).collect();
            assert!(!after.contains("does not work"), "{file} says moteus_tool does not work: {after}");
        }
        assert!(
            !prose.contains("does not serve the diagnostic")
                && !prose.contains("which the simulated servos do not serve"),
            "{file} says the simulator does not serve the diagnostic channel"
        );
    }
    assert!(checked.contains("sim") && checked.contains("servo"), "{checked:?}");
}

/// Set in the child process of the hygiene test.
const HYGIENE_CHILD: &str = "RTLOOP_HYGIENE_CHILD";

#[test]
#[ignore = "a helper: run (in a child process) by a_failing_test_leaves_nothing_in_the_temp_dir"]
fn helper_makes_temp_paths_and_a_sim_link_then_fails() {
    if std::env::var_os(HYGIENE_CHILD).is_none() {
        return;
    }
    std::fs::write(unique_path("file"), b"x").unwrap();
    let link = unique_path("link");
    let mut sim = SimProcess::start(&["--fdcanusb", link.to_str().unwrap()]);
    // The worst case: a killed simulator's stale link.
    sim.sigkill();
    panic!("this helper fails on purpose");
}

#[test]
fn a_failing_test_leaves_nothing_in_the_temp_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "devices::helper_makes_temp_paths_and_a_sim_link_then_fails", "--ignored"])
        .env("TMPDIR", tmp.path())
        .env(HYGIENE_CHILD, "1")
        .output()
        .unwrap();
    assert!(!out.status.success(), "the helper must have failed: {}", String::from_utf8_lossy(&out.stdout));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("fails on purpose"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let left: Vec<String> =
        std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");
}
