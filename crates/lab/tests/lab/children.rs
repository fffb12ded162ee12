//! The programs the lab starts die with it (issue 9, second round): a child started through
//! `rtloop_lab::child` is SIGKILLed by the kernel when the thread that started it ends without
//! reaping it (what happens to every thread when the lab is killed), and its guard kills and
//! reaps it on every path that returns. `crates/rtloop-cli/tests/cli/lab_children.rs` kills the real
//! command.

use rtloop_lab::child::Tied;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

/// Wait for our child `pid` and return how it ended (the signal that killed it, if any).
fn reap(pid: u32) -> Option<i32> {
    let mut status = 0;
    // SAFETY: `status` is writable; `pid` is a child of this process not yet reaped.
    assert_eq!(unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) }, pid as libc::pid_t);
    libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status))
}

#[test]
fn a_tied_child_dies_when_the_thread_that_started_it_ends() {
    let pid = std::thread::spawn(|| {
        let tied = Tied::spawn(Command::new("sleep").arg("600")).expect("sleep runs");
        let pid = tied.id();
        // No guard: as if this thread (the lab) were killed, so only the kernel can end it.
        std::mem::forget(tied);
        pid
    })
    .join()
    .unwrap();
    assert_eq!(reap(pid), Some(libc::SIGKILL), "the child outlived the thread that started it");
}

#[test]
fn the_guard_kills_and_reaps_its_child() {
    let tied = Tied::spawn(Command::new("sleep").arg("600")).expect("sleep runs");
    let pid = tied.id();
    drop(tied);
    // Reaped by the guard: the pid is no child of ours any more.
    // SAFETY: a null status pointer is allowed; WNOHANG never blocks.
    let rc = unsafe { libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG) };
    assert_eq!(rc, -1, "the guard left its child unreaped");
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "the guard left its child running");
}

#[test]
fn output_runs_a_tied_child_to_completion() {
    let out = rtloop_lab::child::output(Command::new("sh").args(["-c", "echo tied; exit 3"])).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "tied\n");
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(out.status.signal(), None);
}
