//! Ctrl-C, SIGTERM and SIGHUP (a closed terminal or ssh session) as a flag the loops poll,
//! so every command can stop cleanly (finish its cycle, command the safe mode, print its
//! summary, remove its links) instead of dying mid-frame.
//!
//! Must never: do anything in the handler but store to an atomic (async-signal-safe).

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Install the handler for SIGINT, SIGTERM and SIGHUP. Safe to call more than once.
pub fn install() {
    let action = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(on_signal),
        nix::sys::signal::SaFlags::SA_RESTART,
        nix::sys::signal::SigSet::empty(),
    );
    for sig in [nix::sys::signal::Signal::SIGINT, nix::sys::signal::Signal::SIGTERM, nix::sys::signal::Signal::SIGHUP] {
        // SAFETY: the handler only stores to a static atomic, which is async-signal-safe,
        // and replacing the default disposition of these two signals affects nothing else.
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
