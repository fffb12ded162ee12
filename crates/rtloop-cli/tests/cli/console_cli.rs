//! The diagnostic console from the command line: `rtloop servo --console | --dump-config |
//! --restore-config FILE` against `rtloop sim --config-dir DIR`, as a user meets them —
//! configurations that survive a restart, a stored id that moves a servo, the servo's ERR
//! text where it refused something, and one sentence for every mistake.
//!
//! Every wait is bounded; nothing here asserts on speed.

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use support::*;

/// `rtloop ARGS` with `input` on its standard input.
fn rtloop_with_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(rtloop_bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rtloop runs");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // A separate thread, so a child that stops reading early cannot block the test.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("rtloop ends");
    writer.join().unwrap();
    out
}

/// `rtloop servo --transport fdcanusb:LINK --id ID ARGS`.
fn servo(link: &Path, id: &str, args: &[&str]) -> Output {
    let transport = format!("fdcanusb:{}", link.display());
    let mut all = vec!["servo", "--transport", transport.as_str(), "--id", id];
    all.extend_from_slice(args);
    rtloop(&all)
}

/// `… --console` with `input` piped in.
fn console(link: &Path, id: &str, input: &str) -> Output {
    let transport = format!("fdcanusb:{}", link.display());
    rtloop_with_stdin(&["servo", "--transport", &transport, "--id", id, "--console"], input.as_bytes())
}

/// The simulator with servos `servos` behind `link`, configurations in `dir`.
fn sim(link: &Path, servos: &str, dir: &Path) -> SimProcess {
    SimProcess::start(&[
        "--fdcanusb",
        link.to_str().unwrap(),
        "--servos",
        servos,
        "--config-dir",
        dir.to_str().unwrap(),
    ])
}

/// A command that ran but did not get what it expected: exit 1, one line on stderr with
/// `want`, no panic.
fn assert_device_failure(o: &Output, want: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(1), "stdout: {}\nstderr: {e}", stdout(o));
    assert!(e.contains(want), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn a_restored_configuration_is_stored_and_survives_a_restart() {
    let scratch = Scratch::new("restore");
    let cfg = scratch.path("cfg");
    std::fs::create_dir(&cfg).unwrap();
    let link = scratch.path("bus");
    let mut first = sim(&link, "1", &cfg);

    let dump = servo(&link, "1", &["--dump-config"]);
    assert!(dump.status.success(), "{}", stderr(&dump));
    let text = stdout(&dump);
    assert!(text.lines().any(|l| l.starts_with("servo.default_timeout_s ")), "{text}");
    assert!(text.lines().all(|l| l.split(' ').count() == 2), "every line is `key value`: {text}");
    assert!(!text.lines().any(|l| l == "OK"), "the terminating OK is not part of the file");

    // Edit the gain, restore the whole file: it is set and stored.
    let edited: String = text
        .lines()
        .map(|l| if l.starts_with("servo.pid_position.kp ") { "servo.pid_position.kp 7.25" } else { l })
        .map(|l| format!("{l}\n"))
        .collect();
    let file = scratch.path("edited.cfg");
    std::fs::write(&file, format!("# edited by hand\n\n{edited}")).unwrap();
    let o = servo(&link, "1", &["--restore-config", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let n = text.lines().count();
    assert!(stdout(&o).starts_with(&format!("set {n} of {n} settings")), "{}", stdout(&o));
    assert!(stdout(&o).contains("stored them (conf write)"), "{}", stdout(&o));
    let stored = cfg.join("bus1-servo1.cfg");
    wait_for("the stored configuration", Duration::from_secs(10), || {
        std::fs::read_to_string(&stored).is_ok_and(|t| t.lines().any(|l| l == "servo.pid_position.kp 7.25"))
    });
    assert_eq!(scratch.names(), ["bus", "cfg", "edited.cfg"]);
    let in_cfg: Vec<_> = std::fs::read_dir(&cfg).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(in_cfg, ["bus1-servo1.cfg"], "no temporary file is left behind");
    first.stop();

    // The next simulator on the same directory powers up with it.
    let _second = sim(&link, "1", &cfg);
    let o = console(&link, "1", "conf get servo.pid_position.kp\n");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "7.25");
}

#[test]
fn a_stored_id_moves_the_servo_after_a_restart() {
    let scratch = Scratch::new("newid");
    let cfg = scratch.path("cfg");
    std::fs::create_dir(&cfg).unwrap();
    let link = scratch.path("bus");
    let mut first = sim(&link, "1", &cfg);
    let o = console(&link, "1", "conf set id.id 5\nconf write\n");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "OK\nOK\n");
    let stored = cfg.join("bus1-servo1.cfg");
    wait_for("the stored id", Duration::from_secs(10), || {
        std::fs::read_to_string(&stored).is_ok_and(|t| t.lines().any(|l| l == "id.id 5"))
    });
    first.stop();

    let _second = sim(&link, "1", &cfg);
    let o = servo(&link, "5", &["query"]);
    assert!(o.status.success(), "servo 1's slot answers as 5: {}", stderr(&o));
    assert!(stdout(&o).starts_with("servo 5 @ "), "{}", stdout(&o));
    let o = servo(&link, "1", &["query"]);
    assert_device_failure(&o, "no reply from servo 1");
    // Its file keeps the slot's name.
    assert_eq!(std::fs::read_dir(&cfg).unwrap().count(), 1);
    assert!(stored.exists());
}

#[test]
fn piped_console_lines_get_their_answers_and_refusals_their_err_text() {
    let scratch = Scratch::new("console");
    let cfg = scratch.path("cfg");
    std::fs::create_dir(&cfg).unwrap();
    let link = scratch.path("bus");
    let _sim = sim(&link, "1,2", &cfg);
    let long = "x".repeat(300);
    let input = format!("conf get id.id\n\ntel list\nbogus\n{long}\ntel get servo_stats\r\n");
    let o = console(&link, "2", &input);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "2", "{out}");
    assert!(lines.contains(&"servo_stats") && lines.contains(&"OK"), "{out}");
    assert!(lines.iter().any(|l| l.starts_with("ERR unknown command 'bogus'")), "{out}");
    assert!(lines.iter().any(|l| l.starts_with("ERR line too long")), "{out}");
    // The binary block of the last command: its header line, then the bytes.
    let emit = lines.iter().position(|l| *l == "emit servo_stats").expect("the block's header");
    assert!(lines[emit + 1].contains(" bytes: "), "{out}");
    assert_device_failure(&o, "servo 2 refused 2 of");
    assert!(stderr(&o).contains("ERR unknown command 'bogus'"), "the first refusal is quoted");

    // Every line accepted: exit 0.
    let o = console(&link, "1", "conf get servo.default_timeout_s\nd stop\n");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().nth(1), Some("OK"));
    // An empty input is nothing to do, not an error.
    let o = console(&link, "1", "");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "");
}

#[test]
fn refused_settings_are_listed_with_the_servos_words_and_exit_1() {
    let scratch = Scratch::new("refused");
    let cfg = scratch.path("cfg");
    std::fs::create_dir(&cfg).unwrap();
    let link = scratch.path("bus");
    let _sim = sim(&link, "1", &cfg);
    let file = scratch.path("bad.cfg");
    std::fs::write(&file, "servo.pid_position.kp 3\nno.such.key 1\nservo.pid_position.kd abc\n").unwrap();
    let o = servo(&link, "1", &["--restore-config", file.to_str().unwrap()]);
    let out = stdout(&o);
    assert!(out.starts_with("set 1 of 3 settings"), "{out}");
    assert!(out.contains("bad.cfg:2: no.such.key 1: ERR "), "{out}");
    assert!(out.contains("bad.cfg:3: servo.pid_position.kd abc: ERR error setting"), "{out}");
    assert_device_failure(&o, "servo 1 refused 2 of the 3 settings");
    // The accepted line was stored all the same.
    wait_for("the stored gain", Duration::from_secs(10), || {
        std::fs::read_to_string(cfg.join("bus1-servo1.cfg"))
            .is_ok_and(|t| t.lines().any(|l| l == "servo.pid_position.kp 3"))
    });
}

#[test]
fn configurations_are_kept_behind_udp_too() {
    let scratch = Scratch::new("udp");
    let cfg = scratch.path("cfg");
    std::fs::create_dir(&cfg).unwrap();
    let addr = format!("127.0.0.1:{}", free_udp_port());
    let _sim = SimProcess::start(&["--udp", &addr, "--servos", "1,2", "--config-dir", cfg.to_str().unwrap()]);
    let transport = format!("udp:{addr}");
    let o = rtloop_with_stdin(
        &["servo", "--transport", &transport, "--id", "2", "--console"],
        b"conf set servo.pid_position.kp 3.5\nconf write\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    wait_for("the stored gain", Duration::from_secs(10), || {
        std::fs::read_to_string(cfg.join("bus1-servo2.cfg"))
            .is_ok_and(|t| t.lines().any(|l| l == "servo.pid_position.kp 3.5"))
    });
}

#[test]
fn a_servo_that_never_answers_is_named_with_its_bus() {
    let scratch = Scratch::new("silent");
    let link = scratch.path("bus");
    let _sim = SimProcess::start(&["--fdcanusb", link.to_str().unwrap(), "--servos", "1"]);
    let o = servo(&link, "9", &["--dump-config"]);
    assert_device_failure(&o, "servo 9 on fdcanusb:");
    assert!(stderr(&o).contains("did not answer the diagnostic channel"), "{}", stderr(&o));
}

#[test]
fn the_console_works_on_an_in_process_simulated_bus_too() {
    let o = rtloop_with_stdin(&["servo", "--transport", "sim", "--id", "3", "--console"], b"conf get id.id\n");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "3\n");
}

#[test]
fn mistakes_are_one_sentence_before_anything_starts() {
    let scratch = Scratch::new("mistakes");
    let link = scratch.path("bus");
    let link_s = link.to_str().unwrap();
    let missing = scratch.path("no-such-dir");
    assert_one_clear_message(
        &["sim", "--fdcanusb", link_s, "--config-dir", missing.to_str().unwrap(), "--duration", "5"],
        "does not exist",
    );
    let file = scratch.path("a-file");
    std::fs::write(&file, "").unwrap();
    assert_one_clear_message(
        &["sim", "--fdcanusb", link_s, "--config-dir", file.to_str().unwrap(), "--duration", "5"],
        "is not a directory",
    );
    assert!(std::fs::symlink_metadata(&link).is_err(), "a refused start made no link");
    // A stored configuration that is a link (to anything) is never read: the start is refused.
    let cfg = scratch.path("cfg");
    std::fs::create_dir(&cfg).unwrap();
    std::fs::write(scratch.path("victim"), "id.id 9\n").unwrap();
    std::os::unix::fs::symlink(scratch.path("victim"), cfg.join("bus1-servo1.cfg")).unwrap();
    assert_one_clear_message(
        &["sim", "--fdcanusb", link_s, "--config-dir", cfg.to_str().unwrap(), "--duration", "5"],
        "is a symbolic link",
    );
    assert!(std::fs::symlink_metadata(&link).is_err(), "a refused start made no link");
    assert_eq!(std::fs::read_to_string(scratch.path("victim")).unwrap(), "id.id 9\n");

    for (args, want) in [
        (&["servo", "-t", "sim", "--id", "1", "query", "--console"][..], "give one action"),
        (&["servo", "-t", "sim", "--id", "1", "--console", "--dump-config"][..], "give one action"),
        (&["servo", "-t", "sim", "--id", "1"][..], "nothing to do"),
        (&["servo", "-t", "sim", "--id", "1", "--dump-config", "--json"][..], "not to the console actions"),
        (&["servo", "-t", "sim", "--id", "1", "--dump-config", "--position", "1"][..], "only apply to `position`"),
        (&["servo", "-t", "sim", "--id", "1", "--dump-config", "--timeout-ms", "nan"][..], "--timeout-ms"),
        (&["servo", "-t", "sim", "--id", "127", "--console"][..], "broadcast"),
    ] {
        assert_one_clear_message(args, want);
    }
    let dir = scratch.dir().to_str().unwrap();
    assert_one_clear_message(&["servo", "-t", "sim", "--id", "1", "--restore-config", dir], "not a regular file");
    let gone = scratch.path("gone.cfg");
    assert_one_clear_message(
        &["servo", "-t", "sim", "--id", "1", "--restore-config", gone.to_str().unwrap()],
        "cannot open it",
    );
}

#[test]
fn the_closing_report_counts_console_work_and_memory_only_writes() {
    let scratch = Scratch::new("report");
    let link = scratch.path("bus");
    let mut child = Command::new(rtloop_bin())
        .args(["sim", "--fdcanusb", link.to_str().unwrap(), "--servos", "1", "--duration", "120"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rtloop sim starts");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("serving") {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "the simulator ended early: {seen}");
        seen.push_str(&line);
    }
    assert!(seen.contains("conf write keeps a configuration in memory only"), "{seen}");
    let o = console(&link, "1", "conf write\nbogus\n");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(rest.contains("servo 1: console 2 lines, 1 answered ERR"), "{rest}");
    assert!(rest.contains("1 conf write kept in memory only"), "{rest}");
}

#[test]
fn sim_help_says_where_configurations_go() {
    let o = rtloop(&["sim", "--help"]);
    let help = stdout(&o);
    assert!(help.contains("--config-dir"), "{help}");
    assert!(help.contains("in memory only"), "{help}");
    let o = rtloop(&["servo", "--help"]);
    let help = stdout(&o);
    for flag in ["--console", "--dump-config", "--restore-config"] {
        assert!(help.contains(flag), "{flag}: {help}");
    }
}
