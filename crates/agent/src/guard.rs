//! The guard against a segment that shrinks under its mapping.
//!
//! What it is for: any process of the spine's user can truncate `/dev/shm/rtloop-NAME`
//! while a spine or an agent has it mapped — `truncate -s 0`, or any `open(path, "w")`. The
//! kernel then drops the pages past the new end of the file from every mapping, and the
//! next access to one of them raises SIGBUS, whose default action kills the process: a
//! spine died that way without commanding its servos safe, without a summary, and left its
//! (now empty) file behind.
//!
//! Why a guard, not sealing: `F_ADD_SEALS` (which would forbid the shrink) works only on a
//! memfd, never on a `/dev/shm` file opened by name; handing every agent a sealed memfd over
//! a Unix socket (`SCM_RIGHTS`, checked with `SO_PEERCRED`) would change how every agent in
//! every language attaches, for an accident of the spine's own user, who can also kill or
//! ptrace it. The guard keeps the protocol a named file and makes the shrink survivable.
//!
//! How: one process-wide SIGBUS handler (installed on the first mapping, `SA_SIGINFO |
//! SA_ONSTACK`) and a fixed table of guarded ranges, one per mapping this crate makes. For a
//! fault inside a registered range the handler maps private zero pages over the whole range
//! (one `mmap` with `MAP_FIXED`: a single system call, async-signal-safe on Linux), raises
//! the range's `lost` flag and returns, so the faulting access runs again and reads zeros.
//! A fault anywhere else goes to the handler that was installed before this one (Rust's
//! stack-overflow handler, Python's faulthandler, …), or, when there was none, gets the
//! default action, exactly as if there were no guard. The owner of a mapping looks at its
//! flag with one atomic load ([`Mapping::probe`](crate::shm::Mapping::probe)): no system
//! call, no lock, no allocation — fit for the spine's cycle.
//!
//! Must never: do anything in the handler that is not async-signal-safe (it only loads and
//! stores atomics, calls `mmap`, `sigaction` and `raise`, and the previous handler), touch a
//! range that is not registered, or outlive a mapping's registration (the owner clears its
//! slot before it unmaps).

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::io;
use std::sync::Once;

/// Mappings one process can guard at once (a spine has one; a test process many).
pub(crate) const MAX_GUARDED: usize = 256;

/// A slot's `start` while nobody uses it.
const FREE: usize = 0;
/// A slot's `start` while a registration fills it in.
const CLAIMED: usize = usize::MAX;

/// One guarded range: `[start, start + len)`, and whether the handler replaced it.
struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    lost: AtomicBool,
}

static SLOTS: [Slot; MAX_GUARDED] =
    [const { Slot { start: AtomicUsize::new(FREE), len: AtomicUsize::new(0), lost: AtomicBool::new(false) } };
        MAX_GUARDED];

/// The SIGBUS action that was in place before the guard's (written once, before the guard's
/// handler is installed; read only by the handler).
struct Previous(UnsafeCell<Option<libc::sigaction>>);

// SAFETY: written once inside `INSTALL` before the handler that reads it exists; never
// written again.
unsafe impl Sync for Previous {}

static PREVIOUS: Previous = Previous(UnsafeCell::new(None));
static INSTALL: Once = Once::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Install the handler (once per process). `Err` when `sigaction` refused it.
fn install() -> io::Result<()> {
    INSTALL.call_once(|| {
        // SAFETY: an all-zero `sigaction` is a valid value to overwrite.
        let mut previous: libc::sigaction = unsafe { core::mem::zeroed() };
        // SAFETY: queries the current action into a valid out-pointer.
        if unsafe { libc::sigaction(libc::SIGBUS, core::ptr::null(), &mut previous) } != 0 {
            return;
        }
        // SAFETY: no handler of ours is installed yet, so nothing reads PREVIOUS concurrently.
        unsafe { *PREVIOUS.0.get() = Some(previous) };
        // SAFETY: as above, a zeroed `sigaction` is valid; every field is set below.
        let mut action: libc::sigaction = unsafe { core::mem::zeroed() };
        action.sa_sigaction = on_sigbus as extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: `sa_mask` is a valid sigset_t to initialize; the action points to a
        // handler that lives for the whole program.
        let ok = unsafe {
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGBUS, &action, core::ptr::null_mut()) == 0
        };
        INSTALLED.store(ok, Ordering::Release);
    });
    if INSTALLED.load(Ordering::Acquire) {
        Ok(())
    } else {
        Err(io::Error::other("cannot install the SIGBUS guard of the segment (sigaction failed)"))
    }
}

/// Guard `[start, start + len)`: install the handler if needed and take a slot. Returns the
/// slot, for [`lost`] and [`release`].
pub(crate) fn register(start: *mut u8, len: usize) -> io::Result<usize> {
    install()?;
    for (i, slot) in SLOTS.iter().enumerate() {
        if slot.start.compare_exchange(FREE, CLAIMED, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            slot.len.store(len, Ordering::Relaxed);
            slot.lost.store(false, Ordering::Relaxed);
            // Release: the handler that sees `start` sees `len` too.
            slot.start.store(start as usize, Ordering::Release);
            return Ok(i);
        }
    }
    Err(io::Error::other(format!(
        "this process already has {MAX_GUARDED} agent segments mapped, the most it can guard; drop some first"
    )))
}

/// Whether the handler replaced the range of `slot` with zero pages: the file shrank under
/// it. One atomic load.
pub(crate) fn lost(slot: usize) -> bool {
    SLOTS.get(slot).is_some_and(|s| s.lost.load(Ordering::Acquire))
}

/// Stop guarding `slot` (before its range is unmapped).
pub(crate) fn release(slot: usize) {
    if let Some(s) = SLOTS.get(slot) {
        s.start.store(FREE, Ordering::Release);
    }
}

/// The SIGBUS handler: replace a registered range that faulted, else chain.
extern "C" fn on_sigbus(sig: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; for SIGBUS its
    // address field is the faulting address.
    let addr = unsafe { (*info).si_addr() } as usize;
    for slot in &SLOTS {
        let start = slot.start.load(Ordering::Acquire);
        if start == FREE || start == CLAIMED {
            continue;
        }
        let len = slot.len.load(Ordering::Relaxed);
        if addr < start || addr - start >= len {
            continue;
        }
        // SAFETY: errno is this thread's; it is restored below, so the interrupted code
        // never sees the handler's.
        let errno = unsafe { *libc::__errno_location() };
        // SAFETY: `[start, start + len)` is a mapping this crate made and still owns (its
        // owner releases the slot before it unmaps); its pages past the file's end are gone
        // already. Replacing the whole range with private zero pages of the same size keeps
        // every address the owner may touch mapped and readable and writable.
        let p = unsafe {
            libc::mmap(
                start as *mut c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        if p != libc::MAP_FAILED {
            slot.lost.store(true, Ordering::Release);
            return;
        }
        // The range could not be replaced: as if there were no guard.
        break;
    }
    // SAFETY: called from the handler, with the arguments it was given.
    unsafe { chain(sig, info, context) };
}

/// Hand a fault that is not ours to the previous handler, or take the default action.
///
/// # Safety
/// Called from the SIGBUS handler with its own arguments.
unsafe fn chain(sig: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: PREVIOUS was written before this handler was installed and never changes.
    let previous = unsafe { *PREVIOUS.0.get() };
    let handler = previous.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: the kernel passed a valid siginfo.
        let sent = unsafe { (*info).si_code } <= 0;
        if handler == libc::SIG_IGN && sent {
            // A SIGBUS someone sent (kill), ignored as it was before the guard.
            return;
        }
        // The default action, as without the guard: the process ends with SIGBUS.
        // SAFETY: sigaction and raise are async-signal-safe; SIGBUS is blocked while this
        // handler runs, so the raised one is delivered, with the default action, on return.
        unsafe {
            let mut default: libc::sigaction = core::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGBUS, &default, core::ptr::null_mut());
            libc::raise(sig);
        }
        return;
    }
    let flags = previous.map_or(0, |p| p.sa_flags);
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: with SA_SIGINFO the previous action's handler has this signature.
        let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) = unsafe { core::mem::transmute(handler) };
        f(sig, info, context);
    } else {
        // SAFETY: without SA_SIGINFO the previous action's handler takes the signal only.
        let f: extern "C" fn(c_int) = unsafe { core::mem::transmute(handler) };
        f(sig);
    }
}
