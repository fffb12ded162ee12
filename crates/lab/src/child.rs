//! The lab's child processes, tied to the lab so that they end when it ends, however it ends.
//!
//! The lab starts other programs — cyclictest and sockperf ([`crate::compare`]), `ip` and the
//! echo server inside a network namespace ([`crate::udp`]) — and forks the responder of
//! `event --processes` ([`crate::event`]). Some of them run at SCHED_FIFO 90 or spin a CPU, so
//! one left behind costs the machine its real-time behaviour until someone notices. Two
//! mechanisms, because one does not cover every way the lab ends:
//! * in the child, before it runs anything, `PR_SET_PDEATHSIG(SIGKILL)`: the kernel kills it
//!   when the lab dies, SIGKILL and a crash included, where no code of ours runs
//!   ([`die_with_parent`]; a check of `getppid()` covers a lab that died before the request);
//! * on every path where our code does run (return, error, panic unwinding), a [`Tied`] guard
//!   kills and reaps the child.
//!
//! The kernel sends the parent-death signal when the *thread* that started the child ends,
//! not the process, so a child must be started from a thread that outlives it (the thread
//! that also reaps it: the command's own thread, or the thread that forked the responder).
//! The request survives `execve` (the programs are not set-user-ID), and `ip netns exec` and
//! `chrt` exec the command in place, so it reaches cyclictest, sockperf and the echo server.
//!
//! What it must never do: start a child without the parent-death request, leave a started
//! child unreaped, or kill a process it did not start.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output};

/// Ask the kernel to SIGKILL the calling process when the thread that started it ends, and
/// end at once if `parent` (the starter's process id) is already gone. Async-signal-safe (two
/// system calls), so it may run in a child between `fork` and `exec`.
pub fn die_with_parent(parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and no pointers.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // The parent may have died between fork and prctl: the request then never fires, but the
    // child has already been given to another parent. ESRCH ("no such process"): an error
    // built without allocating.
    // SAFETY: getppid has no preconditions and cannot fail.
    if unsafe { libc::getppid() } != parent {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// Make `command` die with the calling thread (see the module doc); returns it for chaining.
pub fn tie(command: &mut Command) -> &mut Command {
    // SAFETY: getpid has no preconditions and cannot fail.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the child between fork and exec and only makes the
    // async-signal-safe system calls of `die_with_parent`; it allocates nothing (its errors
    // are raw OS error codes).
    unsafe { command.pre_exec(move || die_with_parent(parent)) }
}

/// Run `command` tied to the lab and collect its output (it is waited for, so nothing is
/// left on any path that returns).
pub fn output(command: &mut Command) -> io::Result<Output> {
    tie(command).output()
}

/// A child started tied to the lab; dropping the guard kills and reaps it.
pub struct Tied {
    child: Option<Child>,
}

impl Tied {
    /// Start `command` tied to the lab.
    pub fn spawn(command: &mut Command) -> io::Result<Tied> {
        Ok(Tied { child: Some(tie(command).spawn()?) })
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The child's exit status if it has ended (it is reaped then), else `None`.
    pub fn try_wait(&mut self) -> io::Result<Option<std::process::ExitStatus>> {
        match self.child.as_mut() {
            Some(child) => child.try_wait(),
            None => Ok(None),
        }
    }
}

impl Drop for Tied {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // An error only means it already ended; wait reaps it either way.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
