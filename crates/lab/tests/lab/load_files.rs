//! The load generator's temporary files (issue 9, §3 and §7): they live only inside a private
//! directory of their own, a planted symlink is never followed, nothing is left after a normal
//! end, an error or a panic, and what a killed run left behind is removed by the next start.
//! (Signals are tested on the real command, in `crates/rtloop-cli/tests/cli/lab_cli.rs`.)
//!
//! Each test runs in a child process of this test binary whose TMPDIR is a fresh directory
//! of its own (the load generator creates its files under `std::env::temp_dir()`). Changing
//! TMPDIR in this process instead would move the files of the crate's other tests, which share
//! the binary and run alongside, into the directory a test inspects.

use rtloop_lab::load::Load;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Set in a test's child process: the directory its TMPDIR names.
const CHILD_ENV: &str = "RTLOOP_LAB_LOAD_FILES_TMPDIR";
/// Set in a test's child process: the temporary directory its parent had.
const ORIGINAL_ENV: &str = "RTLOOP_LAB_LOAD_FILES_ORIGINAL_TMPDIR";

/// The temporary directory of the test process (the parent's, in a child).
fn original_tmpdir() -> PathBuf {
    std::env::var_os(ORIGINAL_ENV).map_or_else(std::env::temp_dir, PathBuf::from)
}

/// The fresh, empty directory TMPDIR names in a test's child process.
struct TestTmpdir {
    path: PathBuf,
}

impl TestTmpdir {
    /// In the child process of test `name`: its directory, to run the test's body in. In the
    /// test process: `None`, after running test `name` in a child process with TMPDIR
    /// pointing at a fresh directory (removed afterwards) and checking that it ran and passed.
    fn for_test(name: &str) -> Option<TestTmpdir> {
        if let Some(path) = std::env::var_os(CHILD_ENV) {
            return Some(TestTmpdir { path: PathBuf::from(path) });
        }
        let dir = tempfile::Builder::new().prefix("rtloop-lab-tmpdir-test-").tempdir().unwrap();
        let test = rtloop_testkit::test_path(module_path!(), name);
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &test, "--nocapture", "--test-threads=1"])
            .env("TMPDIR", dir.path())
            .env(CHILD_ENV, dir.path())
            .env(ORIGINAL_ENV, std::env::temp_dir())
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{test} failed in its child process:\n{text}");
        assert!(text.contains(" 1 passed"), "{test} did not run in its child process:\n{text}");
        None
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// The names in the directory, sorted.
    fn entries(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

/// Run `workers` load workers until each has done a few rounds (file writes included), then
/// stop them; returns what they reported.
fn run_load(workers: usize) -> Vec<String> {
    let mut load = Load::start(workers).expect("load starts");
    // A bound so a broken worker fails the test instead of hanging it; not a timing check.
    let give_up = Instant::now() + Duration::from_secs(60);
    while load.rounds() < 3 * workers as u64 && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(load.rounds() >= 3 * workers as u64, "the workers did no work");
    load.stop()
}

/// A process id that no process has any more: a child that already exited and was reaped.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().expect("true runs");
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn a_planted_symlink_is_never_followed() {
    let Some(tmp) = TestTmpdir::for_test("a_planted_symlink_is_never_followed") else { return };
    let outside = tempfile::tempdir_in(original_tmpdir()).unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    // The names the load generator used to write to, each a link to the victim.
    let pid = std::process::id();
    for i in 0..4 {
        std::os::unix::fs::symlink(&victim, tmp.path().join(format!("rtloop-lab-load-{pid}-{i}"))).unwrap();
    }
    run_load(2);
    let after = std::fs::read(&victim).unwrap();
    assert!(after == b"precious", "a load worker wrote {} bytes through a planted symlink", after.len());
    for i in 0..4 {
        let link = tmp.path().join(format!("rtloop-lab-load-{pid}-{i}"));
        assert_eq!(std::fs::read_link(&link).unwrap(), victim, "the planted link was touched");
    }
}

#[test]
fn the_files_live_in_a_private_directory_and_go_with_it() {
    let Some(tmp) = TestTmpdir::for_test("the_files_live_in_a_private_directory_and_go_with_it") else { return };
    let mut load = Load::start(2).unwrap();
    let give_up = Instant::now() + Duration::from_secs(60);
    while load.rounds() < 6 && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(10));
    }
    let entries = tmp.entries();
    assert_eq!(entries.len(), 1, "one private directory, nothing else: {entries:?}");
    let prefix = format!("rtloop-lab-load-{}-", std::process::id());
    assert!(entries[0].starts_with(&prefix), "{entries:?} is not named for its owner");
    let meta = std::fs::symlink_metadata(tmp.path().join(&entries[0])).unwrap();
    assert!(meta.is_dir(), "{entries:?} is not a directory");
    assert_eq!(meta.permissions().mode() & 0o777, 0o700, "the directory is not private");
    // SAFETY: geteuid has no preconditions and cannot fail.
    assert_eq!(meta.uid(), unsafe { libc::geteuid() });
    let problems = load.stop();
    assert!(problems.iter().all(|p| !p.contains("file")), "file I/O load did not run: {problems:?}");
    assert_eq!(tmp.entries(), Vec::<String>::new(), "left behind after a normal end");
}

#[test]
fn what_killed_runs_left_is_removed_at_start() {
    let Some(tmp) = TestTmpdir::for_test("what_killed_runs_left_is_removed_at_start") else { return };
    let dead = dead_pid();
    // A private directory of a run killed with SIGKILL, and a file of an older rtloop version.
    let stale_dir = tmp.path().join(format!("rtloop-lab-load-{dead}-Xk3j9q"));
    std::fs::create_dir(&stale_dir).unwrap();
    std::fs::write(stale_dir.join(".tmpAbCdEf"), vec![0x5a; 4096]).unwrap();
    let stale_file = tmp.path().join(format!("rtloop-lab-load-{dead}-0"));
    std::fs::write(&stale_file, vec![0x5a; 4096]).unwrap();
    // A run that is still alive keeps its directory.
    let mut alive = std::process::Command::new("sleep").arg("600").spawn().unwrap();
    let live_dir = tmp.path().join(format!("rtloop-lab-load-{}-Qw8e7r", alive.id()));
    std::fs::create_dir(&live_dir).unwrap();
    // A symlink named like ours was not made by us: neither it nor its target is touched.
    let outside = tempfile::tempdir_in(original_tmpdir()).unwrap();
    std::fs::write(outside.path().join("keep"), b"keep").unwrap();
    let link = tmp.path().join(format!("rtloop-lab-load-{dead}-link"));
    std::os::unix::fs::symlink(outside.path(), &link).unwrap();

    let problems = run_load(1);
    let _ = alive.kill();
    let _ = alive.wait();

    assert!(!stale_dir.exists(), "the stale directory of pid {dead} is still there");
    assert!(!stale_file.exists(), "the stale file of pid {dead} is still there");
    assert!(live_dir.exists(), "the directory of a live process was removed");
    assert_eq!(std::fs::read(outside.path().join("keep")).unwrap(), b"keep");
    assert!(std::fs::symlink_metadata(&link).is_ok(), "a symlink we did not make was removed");
    // Never silent: the cleanup is reported.
    assert!(problems.iter().any(|p| p.contains("left by") && p.contains("2")), "{problems:?}");
}

#[test]
fn a_panic_leaves_no_files() {
    let Some(tmp) = TestTmpdir::for_test("a_panic_leaves_no_files") else { return };
    let result = std::thread::spawn(|| {
        let load = Load::start(1).unwrap();
        let give_up = Instant::now() + Duration::from_secs(60);
        while load.rounds() < 2 && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("an experiment failed unexpectedly");
    })
    .join();
    assert!(result.is_err());
    assert_eq!(tmp.entries(), Vec::<String>::new(), "left behind after a panic");
}

#[test]
fn an_experiment_that_fails_leaves_no_files_and_says_why_in_one_sentence() {
    let Some(tmp) = TestTmpdir::for_test("an_experiment_that_fails_leaves_no_files_and_says_why_in_one_sentence")
    else {
        return;
    };
    let common = rtloop_lab::report::CommonOptions { load: 1, samples: 10, ..Default::default() };
    let err =
        rtloop_lab::cycle::cycle(&common, "fdcanusb:/nonexistent/rtloop-lab-test", "1", 100.0).unwrap_err().to_string();
    assert!(!err.contains("OpenError") && !err.contains(" {"), "a Debug struct reached the user: {err}");
    assert!(err.contains("/nonexistent/rtloop-lab-test"), "{err}");
    assert_eq!(tmp.entries(), Vec::<String>::new(), "left behind after an error");
}
