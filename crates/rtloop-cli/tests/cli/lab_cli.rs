//! `rtloop lab` as a user runs it (issue 9): the load's temporary files are gone after
//! Ctrl-C/SIGTERM and after a SIGKILLed run's successor starts; a load the machine cannot
//! carry and every other bad flag are refused in one line with an honest exit code; udp-echo
//! across namespaces says so; the bench scripts find the binary cargo built wherever the
//! target directory is.

use crate::support;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{rtloop_bin, stderr, stdout, Scratch};

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
fn wait_for_load_files(dir: &Scratch, child: &mut Child) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while dir.names().iter().all(|e| !e.starts_with("rtloop-lab-load-")) {
        if Instant::now() > give_up || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the load never created its files in {}: {:?}", dir.dir().display(), dir.names());
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
        let dir = Scratch::new(&format!("signal-{sig}"));
        let mut child = start_loaded_wakeup(dir.dir());
        wait_for_load_files(&dir, &mut child);
        signal(&child, sig);
        let status = child.wait().unwrap();
        // The process still ends the way that signal ends it (the shell's 128 + n).
        assert_eq!(status.signal(), Some(sig), "signal {sig}: {status:?}");
        assert_eq!(dir.names(), Vec::<String>::new(), "signal {sig} left load files behind");
    }
}

#[test]
fn the_next_run_removes_what_a_sigkilled_run_left() {
    let dir = Scratch::new("sigkill");
    let mut child = start_loaded_wakeup(dir.dir());
    wait_for_load_files(&dir, &mut child);
    signal(&child, libc::SIGKILL);
    child.wait().unwrap();
    // Nothing can run on SIGKILL: the private directory stays until the next start.
    let left = dir.names();
    assert!(!left.is_empty());
    let o = Command::new(rtloop_bin())
        .args(["lab", "wakeup", "--load", "1", "--samples", "20", "--no-progress"])
        .env("TMPDIR", dir.dir())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(dir.names(), Vec::<String>::new(), "{left:?} survived the next run");
    // Never silent: the cleanup is reported.
    assert!(stdout(&o).contains("left by"), "{}", stdout(&o));
}

#[test]
fn a_huge_load_is_refused_at_once() {
    // What the issue ran: 100 000 workers of 64 MiB. Refused before anything starts.
    let dir = Scratch::new("huge-load");
    let o = Command::new(rtloop_bin())
        .args(["lab", "wakeup", "--load", "100000", "--samples", "10"])
        .env("TMPDIR", dir.dir())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--load 100000"), "{}", stderr(&o));
    assert_eq!(dir.names(), Vec::<String>::new());
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
        rtloop_testkit::skip("needs root to create network namespaces (sudo)");
        return false;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        rtloop_testkit::skip("needs the ip command (apt-get install iproute2)");
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

/// A stand-in for `cargo` on PATH: `cargo build` "builds" by linking the rtloop under test into
/// `$CARGO_TARGET_DIR/release` and prints what cargo prints with `--message-format=json`.
/// A real release build into a fresh target directory takes minutes; what the scripts must get
/// right is where they look for the result.
const FAKE_CARGO: &str = r#"#!/usr/bin/env bash
set -eu
echo "cargo $*" >> "$FAKE_CARGO_LOG"
[ "$1" = build ] || { echo "fake cargo: only build is supported" >&2; exit 1; }
out="${CARGO_TARGET_DIR:?the test sets CARGO_TARGET_DIR}/release"
mkdir -p "$out"
ln -sf "$RTLOOP_UNDER_TEST" "$out/rtloop"
for a in "$@"; do
  if [[ "$a" == --message-format=json* ]]; then
    printf '{"reason":"compiler-artifact","package_id":"path+file:///rtloop#0.1.0","manifest_path":"/rtloop/crates/rtloop/Cargo.toml","target":{"kind":["bin"],"crate_types":["bin"],"name":"rtloop","src_path":"/rtloop/crates/rtloop/src/main.rs","edition":"2021","doc":true,"doctest":false,"test":true},"profile":{"opt_level":"3","debuginfo":1,"debug_assertions":false,"overflow_checks":false,"test":false},"features":[],"filenames":["%s"],"executable":"%s","fresh":true}\n' "$out/rtloop" "$out/rtloop"
    printf '{"reason":"build-finished","success":true}\n'
  fi
done
"#;

/// A stand-in for cyclictest when rt-tests is not installed: a histogram of 1000 wakeups.
const FAKE_CYCLICTEST: &str = r##"#!/usr/bin/env bash
echo "# /dev/cpu_dma_latency set to 0us"
echo "# Histogram"
echo "000003 000500"
echo "000004 000490"
echo "000012 000010"
echo "# Total: 000001000"
"##;

fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

#[test]
fn bench_scripts_find_the_binary_in_any_target_dir() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let scratch = Scratch::new("bench-scripts");
    let bin = scratch.path("bin");
    std::fs::create_dir(&bin).unwrap();
    write_executable(&bin.join("cargo"), FAKE_CARGO);
    if !on_path("cyclictest") {
        rtloop_testkit::skip("the cyclictest side of wakeup_vs_cyclictest.sh ran against a stand-in: needs rt-tests (apt-get install rt-tests)");
        write_executable(&bin.join("cyclictest"), FAKE_CYCLICTEST);
    }
    let path = std::env::join_paths(
        std::iter::once(bin.clone()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let target = scratch.path("elsewhere-target");
    let log = scratch.path("cargo.log");
    let run = |script: &str, env: &[(&str, &str)]| {
        let mut c = Command::new("bash");
        c.arg(repo.join("benches").join(script))
            .env("PATH", &path)
            .env("CARGO_TARGET_DIR", &target)
            .env("FAKE_CARGO_LOG", &log)
            .env("RTLOOP_UNDER_TEST", rtloop_bin());
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };

    let o = run("lab_matrix.sh", &[("SAMPLES", "20")]);
    assert!(o.status.success(), "lab_matrix.sh: {}\n{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    for experiment in ["wakeup", "udp-echo 64 B busy-poll", "event", "serial", "cycle"] {
        assert!(out.lines().any(|l| l.starts_with(experiment)), "lab_matrix.sh: no {experiment} row:\n{out}");
    }
    // 12 runs per (policy, load): 1 wakeup + 3 udp-echo + 4 event + 3 serial + 1 cycle.
    assert_eq!(out.lines().count(), 1 + 4 * 12, "{out}");

    let o = run("wakeup_vs_cyclictest.sh", &[("LOOPS", "300")]);
    assert!(o.status.success(), "wakeup_vs_cyclictest.sh: {}\n{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    // Per policy: the quadruped, one servo asleep like cyclictest, and the ratio of means.
    assert_eq!(out.lines().filter(|l| l.starts_with("rtloop run")).count(), 4, "{out}");
    assert_eq!(out.lines().filter(|l| l.trim_start().starts_with("mean ratio")).count(), 2, "{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("cyclictest")).count(), 2, "{out}");

    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(calls.lines().all(|l| l.contains("--release")), "{calls}");
}
