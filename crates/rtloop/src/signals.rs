//! Ctrl-C, SIGTERM and SIGHUP (a closed terminal or ssh session) as a flag the loops poll,
//! so every command can stop cleanly (finish its cycle, command the safe mode, print its
//! summary, remove its links) instead of dying mid-frame.
//!
//! A second signal ends the process at once (exit status 128 + the signal), saying so on
//! stderr: every wait of a stopping run is bounded, but the person pressing Ctrl-C twice
//! should not have to trust that. The servos' watchdogs then stop them (every position
//! command carries one), and the next run removes what this one left (a stale agent
//! segment).
//!
//! Must never: do anything in the handler but atomics, `write(2)` of a constant and
//! `_exit(2)` (all async-signal-safe).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
/// Signals received; the second one ends the process.
static RECEIVED: AtomicU32 = AtomicU32::new(0);

/// What a second signal says before the process ends.
const SECOND: &[u8] = b"\nrtloop: second signal: exiting at once (the servos' watchdogs stop them)\n";

extern "C" fn on_signal(sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    if RECEIVED.fetch_add(1, Ordering::SeqCst) >= 1 {
        // SAFETY: write(2) and _exit(2) are async-signal-safe; the buffer is a static
        // constant of the length given.
        unsafe {
            libc::write(libc::STDERR_FILENO, SECOND.as_ptr().cast(), SECOND.len());
            libc::_exit(128 + sig);
        }
    }
}

/// Install the handler for SIGINT, SIGTERM and SIGHUP. Safe to call more than once.
pub fn install() {
    let action = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(on_signal),
        nix::sys::signal::SaFlags::SA_RESTART,
        nix::sys::signal::SigSet::empty(),
    );
    for sig in [nix::sys::signal::Signal::SIGINT, nix::sys::signal::Signal::SIGTERM, nix::sys::signal::Signal::SIGHUP] {
        // SAFETY: the handler does only async-signal-safe things (see the module doc), and
        // replacing the default disposition of these signals affects nothing else.
        let _ = unsafe { nix::sys::signal::sigaction(sig, &action) };
    }
}

/// A stop was requested.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// The flag itself, for code that takes an `&AtomicBool`.
pub fn stop_flag() -> &'static AtomicBool {
    &STOP
}
