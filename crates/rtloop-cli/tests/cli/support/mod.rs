//! Shared by the end-to-end tests (rtloop-cli's and the library's) and the benchmarks: a virtual environment with the official
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

/// The `rtloop` binary under test: the one cargo built for these tests, or the program
/// `RTLOOP_TEST_BIN` names (tools/cross-test runs the tour against the aarch64 build under
/// qemu-user that way). (The library's test binary shares this file but has no binary: it
/// never calls this.)
pub fn rtloop_bin() -> &'static str {
    static GIVEN: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if let Some(given) = GIVEN.get_or_init(|| std::env::var("RTLOOP_TEST_BIN").ok().filter(|b| !b.is_empty())) {
        return given;
    }
    match option_env!("CARGO_BIN_EXE_rtloop") {
        Some(bin) => bin,
        None => panic!("only rtloop-cli's tests have the rtloop binary"),
    }
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
    PY.get_or_init(|| python_venv(&format!("moteus-venv-{MOTEUS_VERSION}"), &[&format!("moteus=={MOTEUS_VERSION}")]))
}

/// The Python of a virtual environment `name` under cargo's target tmp dir holding the
/// (pinned) `packages` from PyPI; made on first use and kept (a `.ready` file marks a
/// finished install). Panics with pip's message when PyPI cannot be reached.
pub fn python_venv(name: &str, packages: &[&str]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let python = dir.join("bin/python");
    let ready = dir.join(".ready");
    if !ready.exists() {
        let st = Command::new("python3").args(["-m", "venv"]).arg(&dir).status().expect("python3 runs");
        assert!(st.success(), "python3 -m venv {} failed", dir.display());
        let out = Command::new(&python)
            // --no-compile: Python compiles what a test imports when it imports it; byte-
            // compiling every module of Qt's and SciPy's packages up front cost time and disk.
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"])
            .args(packages)
            .output()
            .expect("pip runs");
        assert!(
            out.status.success(),
            "could not install {packages:?} into {} (these tests need PyPI): {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(&ready, b"").unwrap();
    }
    python
}

/// What a child process did before it exited or was killed at its time limit.
pub struct Ran {
    /// None: still running at the limit, so killed (with its whole process group).
    pub status: Option<std::process::ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Ran {
    /// Exited on its own with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Exited on its own (any status) rather than being killed at the limit.
    pub fn exited(&self) -> bool {
        self.status.is_some()
    }

    /// For assertion messages: how it ended, and all it printed.
    pub fn describe(&self) -> String {
        let how = match self.status {
            Some(s) => format!("exited with {s} after {:.1} s", self.elapsed.as_secs_f64()),
            None => format!("killed at its time limit after {:.1} s", self.elapsed.as_secs_f64()),
        };
        format!("{how}\n--- stdout ---\n{}\n--- stderr ---\n{}", self.stdout, self.stderr)
    }
}

/// A child process in a process group of its own, its output collected as it comes, its
/// stdin open until [`Session::close_stdin`]. Killed (the whole group) when dropped.
pub struct Session {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    stderr: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    start: Instant,
}

impl Session {
    pub fn spawn(cmd: &mut Command) -> Session {
        use std::os::unix::process::CommandExt;
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let start = Instant::now();
        let stdin = child.stdin.take();
        let stdout = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        for (pipe, sink) in [
            (Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>, stdout.clone()),
            (Box::new(child.stderr.take().unwrap()) as Box<dyn std::io::Read + Send>, stderr.clone()),
        ] {
            readers.push(std::thread::spawn(move || {
                let mut pipe = pipe;
                let mut buf = [0u8; 4096];
                loop {
                    match pipe.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => sink.lock().unwrap().extend_from_slice(&buf[..n]),
                    }
                }
            }));
        }
        Session { child, stdin, stdout, stderr, readers, start }
    }

    /// Write to its stdin (ignored once closed).
    pub fn write(&mut self, bytes: &[u8]) {
        use std::io::Write;
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = stdin.write_all(bytes);
            let _ = stdin.flush();
        }
    }

    /// Close its stdin (end of input).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Its stdout so far, as text.
    pub fn stdout_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    /// Wait until its stdout satisfies `cond`, it exits, or `limit` passes. True when
    /// `cond` held.
    pub fn wait_for_stdout(&mut self, limit: Duration, cond: impl Fn(&str) -> bool) -> bool {
        let start = Instant::now();
        loop {
            if cond(&self.stdout_so_far()) {
                return true;
            }
            if start.elapsed() > limit || self.child.try_wait().ok().flatten().is_some() {
                return cond(&self.stdout_so_far());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Send it SIGINT (Ctrl-C): `rtloop run` ends its run as the user's Ctrl-C does.
    pub fn interrupt(&self) {
        self.signal(nix::sys::signal::Signal::SIGINT);
    }

    /// Send it `sig`.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(self.pid(), sig);
    }

    /// Its process id.
    pub fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.child.id() as i32)
    }

    /// Its stderr so far, as text.
    pub fn stderr_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Wait for it to exit, at most `limit` more; kill its process group at the limit.
    pub fn finish(mut self, limit: Duration) -> Ran {
        self.close_stdin();
        let deadline = Instant::now() + limit;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    self.kill_group();
                    break None;
                }
            }
        };
        let elapsed = self.start.elapsed();
        // The group is gone (exited or killed): its pipes close, the readers end. A
        // grandchild that left the group could keep a pipe open; kill it too.
        self.kill_group();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let text =
            |b: &std::sync::Arc<std::sync::Mutex<Vec<u8>>>| String::from_utf8_lossy(&b.lock().unwrap()).into_owned();
        Ran { status, stdout: text(&self.stdout), stderr: text(&self.stderr), elapsed }
    }

    fn kill_group(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.kill_group();
        }
    }
}

/// Run `cmd` with `stdin` as its whole input; kill it (and its process group) if it is
/// still running after `limit`. Never hangs the test.
pub fn run_limited(cmd: &mut Command, stdin: &[u8], limit: Duration) -> Ran {
    let mut s = Session::spawn(cmd);
    s.write(stdin);
    s.finish(limit)
}

/// Make sure the Debian packages `packages` are installed: the missing ones are installed
/// with apt-get (as root; `apt-get update` first if the package lists are stale). Err says
/// why not (not root, no apt-get, apt-get failed).
pub fn apt_packages(packages: &[&str]) -> Result<(), String> {
    let installed = |p: &&str| {
        Command::new("dpkg-query")
            .args(["-W", "-f=${Status}", p])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
    };
    let missing: Vec<&str> = packages.iter().filter(|p| !installed(p)).copied().collect();
    if missing.is_empty() {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(format!("needs root to apt-get install {}", missing.join(" ")));
    }
    let install = || {
        run_limited(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive"),
            b"",
            Duration::from_secs(600),
        )
    };
    let first = install();
    if first.success() {
        return Ok(());
    }
    let _ = run_limited(Command::new("apt-get").args(["update", "-q"]), b"", Duration::from_secs(300));
    let second = install();
    if second.success() {
        Ok(())
    } else {
        Err(format!("apt-get install {} failed: {}", missing.join(" "), second.describe()))
    }
}

/// A virtual X server (Xvfb) on a display it picked itself; stopped when dropped.
pub struct Xvfb {
    session: Option<Session>,
    /// The DISPLAY value, e.g. ":1".
    pub display: String,
}

impl Xvfb {
    /// Start one (1280x800, 24 bit, no TCP). Err when Xvfb is not installed or does not
    /// come up.
    pub fn start() -> Result<Xvfb, String> {
        let mut cmd = Command::new("Xvfb");
        // -displayfd 1: it picks a free display and prints its number on stdout when ready.
        cmd.args(["-displayfd", "1", "-screen", "0", "1280x800x24", "-nolisten", "tcp"]);
        if Command::new("Xvfb").arg("-help").stderr(Stdio::null()).stdout(Stdio::null()).status().is_err() {
            return Err("Xvfb is not installed (apt-get install xvfb)".into());
        }
        let mut session = Session::spawn(&mut cmd);
        if !session.wait_for_stdout(Duration::from_secs(20), |s| s.ends_with('\n')) {
            let ran = session.finish(Duration::ZERO);
            return Err(format!("Xvfb did not start: {}", ran.describe()));
        }
        let display = format!(":{}", session.stdout_so_far().trim());
        Ok(Xvfb { session: Some(session), display })
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let pid = nix::unistd::Pid::from_raw(s.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = s.finish(Duration::from_secs(5));
        }
    }
}

pub fn python_client() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/moteus_client.py")
}

/// `rtloop sim …` as a child process, killed when dropped.
pub struct SimProcess {
    child: Child,
    /// What it printed (stdout, stderr), collected as it comes.
    output: [std::sync::Arc<std::sync::Mutex<String>>; 2],
    readers: Vec<std::thread::JoinHandle<()>>,
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
        let output: [std::sync::Arc<std::sync::Mutex<String>>; 2] = Default::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let pipes: [Box<dyn std::io::Read + Send>; 2] =
            [Box::new(child.stdout.take().unwrap()), Box::new(child.stderr.take().unwrap())];
        let readers = pipes
            .into_iter()
            .zip(output.clone())
            .map(|(pipe, sink)| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    use std::io::BufRead;
                    for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                        if line.contains("serving") {
                            let _ = tx.send(());
                        }
                        let mut text = sink.lock().unwrap();
                        text.push_str(&line);
                        text.push('\n');
                    }
                })
            })
            .collect();
        let mut sim = SimProcess { child, output, readers };
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            sim.sigkill();
            panic!("rtloop sim {args:?} did not start: {}", sim.output_so_far());
        }
        sim
    }

    /// Stop it the way a user does (SIGTERM, as Ctrl-C): it closes its devices and removes
    /// its links.
    pub fn stop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }

    /// Stop it (SIGTERM) and return everything it printed, its closing report included.
    pub fn stop_and_output(&mut self) -> String {
        self.stop();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        self.output_so_far()
    }

    /// What it printed so far: stdout, then stderr.
    pub fn output_so_far(&self) -> String {
        format!("{}{}", self.output[0].lock().unwrap(), self.output[1].lock().unwrap())
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

/// A TCP port free on loopback now.
pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
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

/// The last line of a command's stdout as JSON: the summary of `--json` (a run, a lab
/// experiment, a log command). Panics with both streams when it is not JSON.
pub fn last_json(o: &Output) -> serde_json::Value {
    let out = stdout(o);
    let last = out.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("the last line is not JSON ({e}): {out}\n{}", stderr(o)))
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
pub fn hold_agent(
    name: String,
    shape: fn(usize, &mut rtloop_agent::RawServoCommand, u64),
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut a = loop {
            match rtloop_agent::Agent::attach(&name) {
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
                *s = rtloop_agent::RawServoCommand::QUERY;
                s.kind = rtloop_agent::layout::kind::POSITION;
                s.present = rtloop_agent::layout::field::POSITION | rtloop_agent::layout::field::VELOCITY;
                s.position = 0.0;
                s.velocity = 0.0;
                shape(i, s, cycle);
            }
            a.send();
        }
    })
}
