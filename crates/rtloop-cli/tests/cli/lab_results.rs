//! What `rtloop lab` hands the user is honest (issue 9, second round): a cycle experiment in
//! which replies were missing is a failure (exit 1, one sentence on stderr, the figures still
//! printed under a FAILED line, the counts in the JSON conditions); `--csv` and `--plot` never
//! overwrite an existing file without `--force`, and never replace anything but a regular
//! file even with it; labels agree with their numbers ("1 servo", "1 sample").

use crate::support;

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Command, Output};
use support::{last_json, rtloop_bin, stderr, stdout, Scratch};

fn lab(args: &[&str]) -> Output {
    Command::new(rtloop_bin()).arg("lab").args(args).arg("--no-progress").output().expect("rtloop runs")
}

/// A user-facing refusal or failure: one line on stderr, no Debug output, no panic.
fn assert_one_sentence(o: &Output) {
    let err = stderr(o);
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    for debug in [" { ", "Some(", "Os {", "panicked"] {
        assert!(!err.contains(debug), "{err}");
    }
}

#[test]
fn a_cycle_with_no_reply_is_a_failure_not_a_result() {
    // The audit's command: nothing listens on port 1.
    let o = lab(&["cycle", "--transport", "udp:127.0.0.1:1", "--servos", "1", "--samples", "20", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", stdout(&o), stderr(&o));
    assert_one_sentence(&o);
    assert!(stderr(&o).contains("none of the 20 expected replies came"), "{}", stderr(&o));
    assert!(stderr(&o).contains("check that servo 1 answers on udp:127.0.0.1:1"), "{}", stderr(&o));
    // The figures still print, under a line nobody can miss.
    let out = stdout(&o);
    assert!(out.lines().nth(1).is_some_and(|l| l.starts_with("FAILED: none of the 20")), "{out}");
    let json = last_json(&o);
    assert_eq!(json["conditions"]["expected_replies"], 20, "{json}");
    assert_eq!(json["conditions"]["missing_replies"], 20, "{json}");
    assert!(json["failure"].as_str().is_some_and(|f| f.contains("none of the 20")), "{json}");
    assert_eq!(json["samples"], 20, "{json}");
}

#[test]
fn a_cycle_against_a_silent_peer_fails_too() {
    // Something listens but never answers: every cycle times out instead of failing the bus.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let uri = format!("udp:{}", silent.local_addr().unwrap());
    let o = lab(&["cycle", "--transport", &uri, "--servos", "1-2", "--samples", "10", "--rate", "100", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", stdout(&o), stderr(&o));
    assert_one_sentence(&o);
    assert!(stderr(&o).contains("check that servos 1,2 answer"), "{}", stderr(&o));
    let json = last_json(&o);
    assert_eq!(json["conditions"]["missing_replies"], 20, "{json}");
    assert_eq!(json["conditions"]["timed_out_cycles"], 10, "{json}");
}

#[test]
fn a_cycle_where_every_reply_came_succeeds_and_says_so() {
    let o = lab(&["cycle", "--servos", "1", "--samples", "1", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let json = last_json(&o);
    assert_eq!(json["failure"], serde_json::Value::Null, "{json}");
    assert_eq!(json["conditions"]["missing_replies"], 0, "{json}");
    assert_eq!(json["conditions"]["expected_replies"], 1, "{json}");
    // Singular where the number is one.
    assert_eq!(json["label"], "cycle sim, 1 servo, 1000 Hz, query-only", "{json}");
    assert!(stdout(&o).contains("query-only (1 sample)\n"), "{}", stdout(&o));
    assert!(!stdout(&o).contains("FAILED"), "{}", stdout(&o));
}

#[test]
fn an_existing_output_is_kept_without_force_and_replaced_with_it() {
    let dir = Scratch::new("lab-force");
    for (flag, name) in [("--csv", "keep.tlog"), ("--plot", "keep.png")] {
        let path = dir.path(name);
        std::fs::write(&path, b"TLOG0003 precious").unwrap();
        let p = path.to_str().unwrap();
        let o = lab(&["wakeup", "--samples", "100", flag, p]);
        assert_eq!(o.status.code(), Some(2), "{flag}: {}", stdout(&o));
        assert_one_sentence(&o);
        assert!(stderr(&o).contains(&format!("{flag} {p} already exists")), "{}", stderr(&o));
        assert!(stderr(&o).contains("--force"), "{}", stderr(&o));
        // Refused before measuring: no report at all.
        assert_eq!(stdout(&o), "", "{flag}: measured before refusing");
        assert_eq!(std::fs::read(&path).unwrap(), b"TLOG0003 precious", "{flag}: overwritten");

        let o = lab(&["wakeup", "--samples", "100", flag, p, "--force"]);
        assert!(o.status.success(), "{flag}: {}", stderr(&o));
        assert_ne!(std::fs::read(&path).unwrap(), b"TLOG0003 precious", "{flag}: --force did not replace it");
    }
    assert_eq!(dir.names(), ["keep.png", "keep.tlog"], "temporary files left behind");
}

/// `lab wakeup --csv PATH --force` (and `--plot`) must refuse PATH and leave it as it was.
fn assert_never_replaced(path: &Path, what: &str, still: impl Fn(&std::fs::Metadata) -> bool) {
    let p = path.to_str().unwrap();
    for flag in ["--csv", "--plot"] {
        for force in [false, true] {
            let mut args = vec!["wakeup", "--samples", "20", flag, p];
            if force {
                args.push("--force");
            }
            let o = lab(&args);
            assert_eq!(o.status.code(), Some(2), "{args:?} on {what}: {}", stdout(&o));
            assert_one_sentence(&o);
            assert!(stderr(&o).contains(what), "{args:?}: {}", stderr(&o));
            let meta = std::fs::symlink_metadata(path).unwrap();
            assert!(still(&meta), "{args:?}: the {what} was replaced");
        }
    }
}

#[test]
fn nothing_but_a_regular_file_is_ever_replaced() {
    // Named .png so --plot's extension check passes and the kind of file is what is refused.
    let dir = Scratch::new("lab-not-regular");
    let fifo = dir.path("fifo.png");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert_never_replaced(&fifo, "a FIFO", |m| m.file_type().is_fifo());

    let victim = dir.path("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let link = dir.path("link.png");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    assert_never_replaced(&link, "a symbolic link", |m| m.file_type().is_symlink());
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");

    let sub = dir.path("dir.png");
    std::fs::create_dir(&sub).unwrap();
    assert_never_replaced(&sub, "is a directory", |m| m.is_dir());

    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        rtloop_testkit::skip("the device-node case needs root to mknod (sudo)");
    } else {
        // A device node like /dev/null, made here so nothing of the system is at stake.
        let dev = dir.path("null.png");
        let c = std::ffi::CString::new(dev.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path; makedev(1, 3) is /dev/null's number.
        assert_eq!(unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) }, 0);
        assert_never_replaced(&dev, "a device node", |m| m.file_type().is_char_device());
    }
    let mut names = dir.names();
    names.retain(|n| n != "null.png");
    assert_eq!(names, ["dir.png", "fifo.png", "link.png", "victim"], "temporary files left behind");
}
