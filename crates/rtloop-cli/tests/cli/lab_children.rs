//! Every process `rtloop lab` starts dies with it, however it ends (issue 9, second round):
//! cyclictest and the `sockperf sr` server of `lab compare` after SIGTERM and SIGKILL of
//! rtloop, the responder of `lab event --processes` after SIGKILL, the echo server of
//! `lab udp-echo --netns` after SIGKILL — and the next `--netns` run removes the namespace a
//! killed run left, with its veth and any process still inside. The echo server also ends by
//! itself when its parent is gone or nobody writes to it.
//!
//! This test process makes itself a child subreaper, so the children of a killed rtloop
//! become its own and it can see how they ended: killed by SIGKILL (the parent-death signal
//! the lab asks for), not by finishing their work or by a broken pipe later. The waits below
//! are bounds for something that must happen, generous for a loaded two-CPU machine; nothing
//! here measures time.

use crate::support;

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};
use support::{rtloop_bin, stderr, stdout};

/// How long a process may take to appear or to end.
const LIMIT: Duration = Duration::from_secs(60);

/// Make this process the new parent of the orphans of its descendants (instead of init).
fn adopt_orphans() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag and no pointers.
        assert_eq!(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }, 0);
    });
}

/// From /proc/PID/stat: the parent pid, the state letter and the start time (clock ticks
/// after boot; with the pid it names one process for good), or `None` when it is gone.
fn stat(pid: u32) -> Option<(u32, char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid …": comm may hold spaces and parentheses, so split after the last ')'.
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    // After the comm: state is field 3 of the line, ppid 4, starttime 22.
    Some((fields.get(1)?.parse().ok()?, fields.first()?.chars().next()?, fields.get(19)?.parse().ok()?))
}

/// Running (not gone, not a zombie waiting to be reaped).
fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(_, state, _)| state != 'Z' && state != 'X')
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " ").trim().to_string())
        .unwrap_or_default()
}

/// The live children of `parent` whose command line contains `pattern`.
fn children_of(parent: u32, pattern: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| stat(pid).is_some_and(|(ppid, _, _)| ppid == parent) && alive(pid))
        .filter(|&pid| cmdline(pid).contains(pattern))
        .collect()
}

/// SIGKILLs and reaps, on drop, the processes a failed test would otherwise leave running
/// (only while the pid still names the process this test saw).
struct Reaper(Vec<(u32, u64)>);

impl Reaper {
    fn watch(&mut self, pid: u32) {
        if let Some((_, _, started)) = stat(pid) {
            self.0.push((pid, started));
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        for &(pid, started) in &self.0 {
            if stat(pid).is_some_and(|(_, _, s)| s == started) {
                // SAFETY: kill and waitpid take no pointers we own; the pid still names the
                // process this test saw (same start time), which is ours or adopted.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGKILL);
                    libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG);
                }
            }
        }
    }
}

/// How an adopted process ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// Killed by this signal.
    Signal(i32),
    /// Exited with this code.
    Exit(i32),
}

/// Wait (up to [`LIMIT`]) for `pid`, a child of ours or an orphan we adopted, to end; how
/// it ended, or `None` when it still runs.
fn wait_adopted(pid: u32) -> Option<Ended> {
    let give_up = Instant::now() + LIMIT;
    loop {
        let mut status = 0;
        // SAFETY: `status` is writable; WNOHANG never blocks.
        let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
        if rc == pid as libc::pid_t {
            return Some(if libc::WIFSIGNALED(status) {
                Ended::Signal(libc::WTERMSIG(status))
            } else {
                Ended::Exit(libc::WEXITSTATUS(status))
            });
        }
        assert!(rc == 0, "{pid} is not ours to wait for: {}", std::io::Error::last_os_error());
        if Instant::now() > give_up {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill takes no pointers; the pid is our own unreaped child.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0);
}

fn start(args: &[&str]) -> Child {
    adopt_orphans();
    Command::new(rtloop_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("rtloop runs")
}

/// Wait until `lab` has a child whose command line contains `pattern`; its pid (which stays
/// the same through `chrt` and `ip netns exec`, which exec the command in place).
fn wait_for_child(lab: &mut Child, pattern: &str) -> u32 {
    let give_up = Instant::now() + LIMIT;
    loop {
        if let Some(&pid) = children_of(lab.id(), pattern).first() {
            return pid;
        }
        if let Some(status) = lab.try_wait().unwrap() {
            panic!("rtloop ended ({status}) before it started {pattern}");
        }
        if Instant::now() > give_up {
            let _ = lab.kill();
            let _ = lab.wait();
            panic!("rtloop did not start {pattern} within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kill `lab` with `sig` while its child matching `pattern` runs; assert the lab ended by that
/// signal and the child was killed with it (SIGKILL, the parent-death signal), at once.
fn kill_lab_and_expect_child_killed(mut lab: Child, pattern: &str, sig: libc::c_int) {
    let mut reaper = Reaper(Vec::new());
    let child = wait_for_child(&mut lab, pattern);
    reaper.watch(child);
    let line = cmdline(child);
    signal(lab.id(), sig);
    let status = lab.wait().unwrap();
    assert_eq!(status.signal(), Some(sig), "{pattern}: rtloop did not end by signal {sig}: {status}");
    // Orphaned when rtloop ended, so it is ours now.
    let ended = wait_adopted(child);
    assert_eq!(
        ended,
        Some(Ended::Signal(libc::SIGKILL)),
        "signal {sig} ended rtloop, but its child {child} ({line}) was not killed with it (None: still runs)"
    );
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn compare_takes_cyclictest_with_it_on_sigterm_and_sigkill() {
    if !on_path("cyclictest") {
        rtloop_testkit::skip("needs cyclictest (apt-get install rt-tests)");
        return;
    }
    if !is_root() {
        // Without root, cyclictest -p 90 fails at once and there is nothing to outlive rtloop.
        rtloop_testkit::skip("needs root: cyclictest -p 90 (what lab compare runs) refuses to start otherwise");
        return;
    }
    for sig in [libc::SIGTERM, libc::SIGKILL] {
        // Ours and cyclictest take turns, 200 wakeups of 1 ms each per round, for 10 rounds.
        let lab = start(&["lab", "compare", "--samples", "2000", "--sizes", "64"]);
        kill_lab_and_expect_child_killed(lab, "cyclictest", sig);
    }
}

#[test]
fn compare_takes_the_sockperf_server_with_it_on_sigterm_and_sigkill() {
    if !on_path("sockperf") {
        rtloop_testkit::skip("needs sockperf (apt-get install sockperf)");
        return;
    }
    if !on_path("cyclictest") || !is_root() {
        // The sockperf half still runs; it only starts sooner.
        rtloop_testkit::skip("cyclictest's half of lab compare did not run: needs rt-tests and root");
    }
    for sig in [libc::SIGTERM, libc::SIGKILL] {
        let lab = start(&["lab", "compare", "--samples", "1000", "--sizes", "64"]);
        kill_lab_and_expect_child_killed(lab, "sockperf sr", sig);
    }
}

#[test]
fn the_event_responder_process_dies_with_a_sigkilled_lab() {
    // Long enough to be killed in the middle; the responder is a fork of rtloop itself.
    let lab = start(&["lab", "event", "--processes", "--methods", "eventfd", "--samples", "1000000", "--no-progress"]);
    kill_lab_and_expect_child_killed(lab, "lab event --processes", libc::SIGKILL);
}

#[test]
fn an_orphaned_echo_server_ends_by_itself() {
    adopt_orphans();
    // The server's parent is a shell that waits until the test has seen the server echo, then
    // exits: only the server's own bounds can end it then (it was asked to serve for a day),
    // so it does not rely on the parent-death signal alone.
    let port = support::free_udp_port();
    let script = format!(
        "'{}' lab udp-echo-server --bind 127.0.0.1:{port} --seconds 86400 </dev/null >/dev/null 2>&1 & echo $!; read _",
        rtloop_bin()
    );
    let mut shell =
        Command::new("sh").args(["-c", &script]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(shell.stdout.take().unwrap()), &mut line).unwrap();
    let server: u32 = line.trim().parse().expect("the shell prints the server's pid");
    let mut reaper = Reaper(Vec::new());
    reaper.watch(server);
    let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    probe.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let give_up = Instant::now() + LIMIT;
    let mut echo = [0u8; 16];
    while !(probe.send_to(b"ping", ("127.0.0.1", port)).is_ok()
        && probe.recv(&mut echo).is_ok_and(|n| &echo[..n] == b"ping"))
    {
        assert!(Instant::now() < give_up, "the echo server never answered");
    }
    drop(shell.stdin.take());
    shell.wait().unwrap();
    assert_eq!(
        wait_adopted(server),
        Some(Ended::Exit(0)),
        "the echo server did not end after its parent (None: still runs)"
    );
}

#[test]
fn the_echo_server_ends_when_idle_or_when_the_lab_is_gone() {
    let o = Command::new(rtloop_bin())
        .args(["lab", "udp-echo-server", "--bind", "127.0.0.1:0", "--seconds", "86400", "--idle-seconds", "0.3"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // A lab that is already gone: nobody to serve.
    let mut gone = Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let o = Command::new(rtloop_bin())
        .args(["lab", "udp-echo-server", "--bind", "127.0.0.1:0", "--seconds", "86400"])
        .args(["--parent-pid", &gone.id().to_string()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = Command::new(rtloop_bin())
        .args(["lab", "udp-echo-server", "--bind", "127.0.0.1:0", "--idle-seconds", "nan"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--idle-seconds NaN is out of range"), "{}", stderr(&o));
}

fn netns_ready() -> bool {
    if !is_root() {
        rtloop_testkit::skip("needs root to create network namespaces (sudo)");
        return false;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        rtloop_testkit::skip("needs the ip command (apt-get install iproute2)");
        return false;
    }
    true
}

fn ip(args: &[&str]) -> String {
    stdout(&Command::new("ip").args(args).output().unwrap())
}

fn namespaces() -> Vec<String> {
    ip(&["netns", "list"]).lines().filter_map(|l| l.split_whitespace().next()).map(str::to_string).collect()
}

#[test]
fn a_sigkilled_netns_run_leaves_no_server_and_the_next_run_removes_its_namespace() {
    if !netns_ready() {
        return;
    }
    // busy-poll: the server the audit found spinning at 15–42 % CPU.
    let mut lab = start(&[
        "lab",
        "udp-echo",
        "--netns",
        "--samples",
        "10000000",
        "--sizes",
        "16",
        "--methods",
        "busy-poll",
        "--no-progress",
    ]);
    let lab_pid = lab.id();
    let name = format!("rtloop-lab-{lab_pid}");
    let mut reaper = Reaper(Vec::new());
    let server = wait_for_child(&mut lab, "udp-echo-server");
    reaper.watch(server);
    let line = cmdline(server);
    signal(lab_pid, libc::SIGKILL);
    lab.wait().unwrap();
    assert_eq!(
        wait_adopted(server),
        Some(Ended::Signal(libc::SIGKILL)),
        "the echo server {server} ({line}) was not killed with the lab (None: still runs)"
    );

    // Nothing of the lab runs on SIGKILL: the namespace is still there for the next run. Put
    // a process in it, as an older rtloop's server would be.
    assert!(namespaces().contains(&name), "{:?}", namespaces());
    let mut squatter = Command::new("ip")
        .args(["netns", "exec", &name, "sleep", "600"])
        .stdin(Stdio::null())
        .spawn()
        .expect("ip netns exec runs");
    reaper.watch(squatter.id());
    let give_up = Instant::now() + LIMIT;
    while !ip(&["netns", "pids", &name]).contains(&squatter.id().to_string()) && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(10));
    }

    let o = Command::new(rtloop_bin())
        .args(["lab", "udp-echo", "--netns", "--samples", "20", "--sizes", "16", "--methods", "blocking"])
        .args(["--no-progress"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!namespaces().contains(&name), "{name} survived the next run: {:?}", namespaces());
    assert!(!ip(&["-o", "link"]).contains(&format!("rtlab{lab_pid}h")), "its veth survived the next run");
    let status = squatter.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the process in {name} was not killed: {status}");
    // Never silent: the cleanup is reported.
    let out = stdout(&o);
    assert!(
        out.contains(&format!("removed network namespace {name} left by a killed lab run"))
            && out.contains("killed 1 process still in it"),
        "{out}"
    );
}
