//! `rtloop lab` as a user runs it (issue 9): the load's temporary files are gone after
//! Ctrl-C/SIGTERM and after a SIGKILLed run's successor starts; a load the machine cannot
//! carry and every other bad flag are refused in one line with an honest exit code; udp-echo
//! across namespaces says so.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn rtloop_bin() -> &'static str {
    env!("CARGO_BIN_EXE_rtloop")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A directory of this test's own under the system temporary directory, removed on drop.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new(name: &str) -> ScratchDir {
        let path = std::env::temp_dir().join(format!("rtloop-lab-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).unwrap();
        ScratchDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn entries(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A long `lab wakeup` with background load whose temporary files go under `tmpdir`.
fn start_loaded_wakeup(tmpdir: &Path) -> Child {
    Command::new(rtloop_bin())
        .args(["lab", "wakeup", "--load", "2", "--samples", "1000000", "--no-progress"])
        .env("TMPDIR", tmpdir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rtloop runs")
}

/// Wait until the load has put something under `dir` (or give up, killing `child`).
fn wait_for_load_files(dir: &ScratchDir, child: &mut Child) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while dir.entries().iter().all(|e| !e.starts_with("rtloop-lab-load-")) {
        if Instant::now() > give_up || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the load never created its files in {}: {:?}", dir.path().display(), dir.entries());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let the workers get into their loop (their files are created as they start).
    std::thread::sleep(Duration::from_millis(200));
}

fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions; the pid is our own unreaped child.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
}

#[test]
fn sigterm_and_ctrl_c_leave_no_load_files() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let dir = ScratchDir::new(&format!("signal-{sig}"));
        let mut child = start_loaded_wakeup(dir.path());
        wait_for_load_files(&dir, &mut child);
        signal(&child, sig);
        let status = child.wait().unwrap();
        // The process still ends the way that signal ends it (the shell's 128 + n).
        assert_eq!(status.signal(), Some(sig), "signal {sig}: {status:?}");
        assert_eq!(dir.entries(), Vec::<String>::new(), "signal {sig} left load files behind");
    }
}

#[test]
fn the_next_run_removes_what_a_sigkilled_run_left() {
    let dir = ScratchDir::new("sigkill");
    let mut child = start_loaded_wakeup(dir.path());
    wait_for_load_files(&dir, &mut child);
    signal(&child, libc::SIGKILL);
    child.wait().unwrap();
    // Nothing can run on SIGKILL: the private directory stays until the next start.
    let left = dir.entries();
    assert!(!left.is_empty());
    let o = Command::new(rtloop_bin())
        .args(["lab", "wakeup", "--load", "1", "--samples", "20", "--no-progress"])
        .env("TMPDIR", dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(dir.entries(), Vec::<String>::new(), "{left:?} survived the next run");
    // Never silent: the cleanup is reported.
    assert!(stdout(&o).contains("left by"), "{}", stdout(&o));
}

#[test]
fn a_huge_load_is_refused_at_once() {
    // What the issue ran: 100 000 workers of 64 MiB. Refused before anything starts.
    let dir = ScratchDir::new("huge-load");
    let o = Command::new(rtloop_bin())
        .args(["lab", "wakeup", "--load", "100000", "--samples", "10"])
        .env("TMPDIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--load 100000"), "{}", stderr(&o));
    assert_eq!(dir.entries(), Vec::<String>::new());
}

#[test]
fn refusals_are_one_line_with_exit_code_2() {
    for (args, must_contain) in [
        (
            &["lab", "cycle", "--transport", "fdcanusb:/nonexistent", "--samples", "10"][..],
            "cannot open fdcanusb:/nonexistent",
        ),
        (&["lab", "compare", "--sizes", "0"], "--sizes"),
        (&["lab", "cycle", "--rate", "nan"], "--rate"),
        (&["lab", "wakeup", "--samples", "50", "--csv", "/nonexistent/dir/x.csv"], "--csv"),
        (&["lab", "udp-echo-server", "--bind", "0.0.0.0:0", "--seconds", "1"], "--allow-remote"),
    ] {
        let o = Command::new(rtloop_bin()).args(args).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: not one line: {err}");
        assert!(err.contains(must_contain), "{args:?}: {err}");
        for debug in ["OpenError", " { ", "Some(", "Os {"] {
            assert!(!err.contains(debug), "{args:?}: Debug output reached the user: {err}");
        }
    }
}

fn netns_ready() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        testkit::skip("needs root to create network namespaces (sudo)");
        return false;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        testkit::skip("needs the ip command (apt-get install iproute2)");
        return false;
    }
    true
}

#[test]
fn udp_echo_across_a_namespace_says_so() {
    if !netns_ready() {
        return;
    }
    let o = Command::new(rtloop_bin())
        .args(["lab", "udp-echo", "--netns", "--samples", "50", "--sizes", "16", "--methods", "blocking,epoll"])
        .args(["--json", "--no-progress"])
        .output()
        .unwrap();
    // The echo server runs as `rtloop lab udp-echo-server` inside the namespace, bound to the
    // namespace's own address: allowed there without --allow-remote.
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let json: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(json["conditions"]["network"], "netns", "{json}");
    for r in json["results"].as_array().unwrap() {
        assert!(r["label"].as_str().unwrap().contains("netns"), "{r}");
    }
    assert!(out.lines().next().unwrap().contains("network netns"), "{out}");
    let o = Command::new(rtloop_bin())
        .args(["lab", "udp-echo", "--samples", "20", "--sizes", "16", "--methods", "blocking", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
    assert_eq!(json["conditions"]["network"], "loopback", "{json}");
}
