//! Shared by the end-to-end tests and benchmarks: a virtual environment with the official
//! moteus Python package, `rtloop sim` as a child process, unique temporary paths.
//!
//! Temporary paths ([`unique_path`]) all live in one private directory per test process,
//! `$TMPDIR/rtloop-test-<pid>-XXXXXX`, which is removed when the process exits — after
//! failed tests too, since the harness catches their panics and exits normally — and, for a
//! process that was killed, by the next test process that starts (the directory of a pid that
//! no longer runs). A test run leaves nothing in the temporary directory.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Prefix of the per-process scratch directories in `$TMPDIR`.
const SCRATCH_PREFIX: &str = "rtloop-test-";

/// This process's scratch directory, created on first use.
static SCRATCH: OnceLock<PathBuf> = OnceLock::new();

/// Runs at process exit (registered with `atexit`): remove the scratch directory. Must not
/// panic (it runs inside the C library's `exit`).
extern "C" fn remove_scratch_dir() {
    if let Some(dir) = SCRATCH.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn scratch_dir() -> &'static Path {
    SCRATCH.get_or_init(|| {
        remove_scratch_dirs_of_dead_processes();
        let dir = tempfile::Builder::new()
            .prefix(&format!("{SCRATCH_PREFIX}{}-", std::process::id()))
            .tempdir()
            .expect("create the test scratch directory")
            .keep();
        // SAFETY: `remove_scratch_dir` is a plain `extern "C" fn()` that never unwinds; it
        // only reads a static that is initialised before it can run.
        let registered = unsafe { libc::atexit(remove_scratch_dir) };
        assert_eq!(registered, 0, "atexit refused the scratch-directory cleanup");
        dir
    })
}

/// Scratch directories left by test processes that were killed before they could clean up.
fn remove_scratch_dirs_of_dead_processes() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SCRATCH_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The moteus package version the protocol notes were checked against.
pub const MOTEUS_VERSION: &str = "1.1.1";

pub fn rtloop_bin() -> &'static str {
    env!("CARGO_BIN_EXE_rtloop")
}

pub fn rtloop(args: &[&str]) -> Output {
    Command::new(rtloop_bin()).args(args).output().expect("rtloop runs")
}

/// A path no other test uses, inside this process's scratch directory (removed at exit).
pub fn unique_path(stem: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    scratch_dir().join(format!("{stem}-{n}"))
}

/// A free UDP port on loopback (bound and released; good enough for tests).
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Python inside a virtual environment that has the official moteus package, created once
/// per test binary under cargo's target tmp dir.
pub fn moteus_python() -> &'static Path {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("moteus-venv-{MOTEUS_VERSION}"));
        let python = dir.join("bin/python");
        let ready = dir.join(".ready");
        if !ready.exists() {
            let st = Command::new("python3").args(["-m", "venv"]).arg(&dir).status().expect("python3 runs");
            assert!(st.success(), "python3 -m venv {} failed", dir.display());
            let out = Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    &format!("moteus=={MOTEUS_VERSION}"),
                ])
                .output()
                .expect("pip runs");
            assert!(
                out.status.success(),
                "could not install moteus=={MOTEUS_VERSION} into {} (these tests need PyPI): {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::write(&ready, b"").unwrap();
        }
        python
    })
}

pub fn python_client() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/moteus_client.py")
}

/// `rtloop sim …` as a child process, killed when dropped.
pub struct SimProcess {
    child: Child,
}

impl SimProcess {
    /// Start `rtloop sim` with `args` and wait until it prints that it is serving.
    pub fn start(args: &[&str]) -> SimProcess {
        let mut child = Command::new(rtloop_bin())
            .arg("sim")
            .args(args)
            // Never outlive a crashed test.
            .args(["--duration", "120"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rtloop sim starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("serving") {
                    let _ = tx.send(());
                }
            }
        });
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("rtloop sim {args:?} did not start: {}", String::from_utf8_lossy(&out.stderr));
        }
        SimProcess { child }
    }

    /// Stop it the way a user does (SIGTERM, as Ctrl-C): it closes its devices and removes
    /// its links.
    pub fn stop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }

    /// Kill it without warning (SIGKILL): its link stays behind, stale. Only for links inside
    /// the scratch directory, which is removed at exit.
    pub fn sigkill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill(&mut self) {
        self.stop();
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Wait (bounded) until `cond` holds.
pub fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A user mistake: exit code 2, one line on stderr that contains `want`, no panic.
pub fn assert_one_clear_message(args: &[&str], want: &str) {
    let o = rtloop(args);
    assert_eq!(o.status.code(), Some(2), "{args:?}");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains(want), "{args:?}: {e}");
    assert_eq!(e.trim().lines().count(), 1, "{args:?}: {e}");
    assert!(!e.contains("panicked"), "{args:?}: {e}");
}

/// What a command printed on stdout, as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What a command printed on stderr, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A private directory for one test (inside this process's temporary directory), removed on
/// drop.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(stem: &str) -> Scratch {
        let dir = unique_path(stem);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.0
    }

    /// A path inside it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The names of its entries, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An agent written with the `agent` crate, on a thread of its own: it attaches (waiting
/// for the spine), arms, and for every new state holds every servo at 0 rev (position and
/// velocity 0) after `shape(servo index, command, cycle)` has had its say — a test's way to
/// send bad commands. It ends when the spine goes away.
pub fn hold_agent(name: String, shape: fn(usize, &mut agent::RawServoCommand, u64)) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut a = loop {
            match agent::Agent::attach(&name) {
                Ok(a) => break a,
                Err(e) if e.is_retryable() => std::thread::sleep(Duration::from_millis(2)),
                Err(e) => panic!("{e}"),
            }
        };
        let mut last = u64::MAX;
        while a.spine_gone().is_none() {
            let Ok(state) = a.read_state() else { continue };
            let (cycle, count) = (state.cycle, state.servo_count as usize);
            if cycle == last {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            last = cycle;
            a.rearm_if_needed();
            let c = a.command_mut();
            c.for_cycle = cycle;
            for (i, s) in c.servos[..count].iter_mut().enumerate() {
                *s = agent::RawServoCommand::QUERY;
                s.kind = agent::layout::kind::POSITION;
                s.present = agent::layout::field::POSITION | agent::layout::field::VELOCITY;
                s.position = 0.0;
                s.velocity = 0.0;
                shape(i, s, cycle);
            }
            a.send();
        }
    })
}
