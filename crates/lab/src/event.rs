//! `rtloop lab event`: how fast one thread (or process) responds to an event another raises —
//! the user-space analogue of the interrupt-response measurement (a GPIO edge in, an answer
//! out), with eventfd, pipe, futex or busy polling as the wake-up mechanism.
//!
//! A *raiser* and a *responder* play ping-pong through the same mechanism in both directions.
//! Each sample is the **one-way response**: the raiser reads CLOCK_MONOTONIC, writes it into
//! shared memory, and raises the event; the responder reads the clock as soon as it is awake
//! and records `wake − raise` into shared memory before answering. The raiser waits for that
//! answer (so events never overlap) and then pauses [`GAP_BETWEEN_EVENTS_NS`] before the next
//! one, so the responder is back asleep — or spinning, for busy-poll — when the event comes,
//! as with an interrupt from outside. Both sides run with `common.rt` applied; the calling
//! thread is left untouched (both sides are threads of their own, or the responder a forked
//! child with `processes`).
//!
//! What it must never do: measure a side whose real-time settings were not applied (or hide
//! a refusal), hang when the other side is gone (every wait of the raiser has a timeout, and
//! a child is killed and reaped on every path; the kernel kills it when the lab dies, see
//! [`crate::child`]), or leave file descriptors or mappings behind.

use crate::options::{apply_rt, progress_bar, CommonOptions};
use crate::report::{Outcome, Run};
// Defined with the other methods, below the errors that name them; found here too.
pub use crate::methods::EventMethod;
use crate::Error;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The pause between two events: long enough for the responder to be back in its wait (and
/// for an idle CPU to enter its idle state), short enough that 10 000 samples take seconds.
pub const GAP_BETWEEN_EVENTS_NS: u64 = 200_000;

/// Round trips made before recording, so first-touch page faults and cold caches are not
/// counted as response time.
const WARMUP_EVENTS: usize = 50;

/// How long the raiser waits for an answer before it declares the responder gone.
const ANSWER_TIMEOUT_MS: i32 = 2_000;

/// What `rtloop lab event` measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventOptions {
    /// One run per method, in this order.
    pub methods: Vec<EventMethod>,
    /// Raiser and responder in two processes (fork) instead of two threads.
    pub processes: bool,
}

impl Default for EventOptions {
    fn default() -> Self {
        EventOptions { methods: EventMethod::ALL.to_vec(), processes: false }
    }
}

/// The words both sides share. It lives in a MAP_SHARED anonymous mapping, so after fork both
/// processes see the same memory (and the futex, which is not FUTEX_PRIVATE, works across them).
#[repr(C)]
struct Shared {
    /// CLOCK_MONOTONIC at the raise, written by the raiser before raising.
    raise_ns: AtomicU64,
    /// wake − raise, written by the responder before answering.
    response_ns: AtomicU64,
    /// Raiser → responder: the number of the event raised (futex word / polled word).
    ping: AtomicU32,
    /// Responder → raiser: the number of the event answered.
    pong: AtomicU32,
    /// Set by the raiser before a last raise to make the responder return.
    stop: AtomicU32,
    /// Set by the responder when its real-time setup was refused under `strict`.
    setup_failed: AtomicU32,
}

/// The MAP_SHARED page holding [`Shared`]; unmapped on drop.
struct SharedPage {
    ptr: *mut Shared,
}

// SAFETY: the page holds only atomics, which are safe to use from any thread.
unsafe impl Sync for SharedPage {}
// SAFETY: as above; the pointer stays valid until drop, wherever that runs.
unsafe impl Send for SharedPage {}

impl SharedPage {
    fn new() -> Result<SharedPage, Error> {
        // SAFETY: an anonymous mapping with no address hint touches no existing memory.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                std::mem::size_of::<Shared>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::last_os("mmap of the shared page failed"));
        }
        // Anonymous mappings are zero-filled, and all-zero bytes are valid atomics.
        Ok(SharedPage { ptr: ptr.cast() })
    }

    fn get(&self) -> &Shared {
        // SAFETY: `ptr` is a live, page-aligned mapping of at least size_of::<Shared>() bytes
        // until drop, initialised (zeroed) and only accessed through atomics.
        unsafe { &*self.ptr }
    }
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no reference outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), std::mem::size_of::<Shared>()) };
    }
}

/// The kernel objects of one direction (raiser → responder, or back).
enum Channel {
    /// An eventfd: both ends are the same descriptor.
    Eventfd(OwnedFd),
    /// A pipe: read end, write end.
    Pipe(OwnedFd, OwnedFd),
    /// Futex and busy-poll need no descriptor: they use the shared words.
    Memory,
}

impl Channel {
    fn new(method: EventMethod) -> Result<Channel, Error> {
        match method {
            EventMethod::Eventfd => {
                // SAFETY: eventfd has no memory arguments; a valid result is a new descriptor we own.
                let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
                if fd < 0 {
                    return Err(Error::last_os("eventfd failed"));
                }
                // SAFETY: `fd` was just created and is owned by nothing else.
                Ok(Channel::Eventfd(unsafe { OwnedFd::from_raw_fd(fd) }))
            }
            EventMethod::Pipe => {
                let (r, w) =
                    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| Error::sys("pipe failed", e))?;
                Ok(Channel::Pipe(r, w))
            }
            EventMethod::Futex | EventMethod::BusyPoll => Ok(Channel::Memory),
        }
    }

    fn read_fd(&self) -> Option<i32> {
        match self {
            Channel::Eventfd(fd) => Some(fd.as_raw_fd()),
            Channel::Pipe(r, _) => Some(r.as_raw_fd()),
            Channel::Memory => None,
        }
    }

    fn write_fd(&self) -> Option<i32> {
        match self {
            Channel::Eventfd(fd) => Some(fd.as_raw_fd()),
            Channel::Pipe(_, w) => Some(w.as_raw_fd()),
            Channel::Memory => None,
        }
    }
}

/// One side's view: the method, its word in shared memory and its descriptors.
struct Endpoint<'a> {
    method: EventMethod,
    channel: &'a Channel,
    word: &'a AtomicU32,
    /// Busy-poll with this side alone on its CPU under a real-time policy would starve the
    /// other side forever; then the spin loop yields (see `spin_wait`).
    yield_in_spin: bool,
}

impl Endpoint<'_> {
    /// Raise event number `seq`.
    fn raise(&self, seq: u32) -> Result<(), Error> {
        self.word.store(seq, Ordering::Release);
        match self.method {
            EventMethod::Eventfd => write_all(self.channel.write_fd(), &1u64.to_ne_bytes()),
            EventMethod::Pipe => write_all(self.channel.write_fd(), &[1u8]),
            EventMethod::Futex => {
                futex(self.word, libc::FUTEX_WAKE, 1, None);
                Ok(())
            }
            EventMethod::BusyPoll => Ok(()),
        }
    }

    /// Wait until event `seq` has been raised, or `timeout_ms` passed (`None`: forever).
    /// Returns false on timeout.
    fn wait(&self, seq: u32, timeout_ms: Option<i32>) -> Result<bool, Error> {
        match self.method {
            EventMethod::Eventfd | EventMethod::Pipe => {
                let fd = self.channel.read_fd().ok_or(Error::NoDescriptor)?;
                if let Some(ms) = timeout_ms {
                    if !poll_readable(fd, ms)? {
                        return Ok(false);
                    }
                }
                let mut buf = [0u8; 8];
                let len = if self.method == EventMethod::Eventfd { 8 } else { 1 };
                read_exact(fd, &mut buf[..len])?;
                Ok(true)
            }
            EventMethod::Futex => {
                let deadline = timeout_ms.map(|ms| rtloop_rt::now_ns() + ms as u64 * 1_000_000);
                loop {
                    let seen = self.word.load(Ordering::Acquire);
                    if seen == seq {
                        return Ok(true);
                    }
                    let left = match deadline {
                        Some(d) => match d.checked_sub(rtloop_rt::now_ns()) {
                            Some(left) if left > 0 => Some(left),
                            _ => return Ok(false),
                        },
                        None => None,
                    };
                    // Sleeps only while the word still holds `seen`, so a raise between the
                    // load and the call is never missed.
                    futex(self.word, libc::FUTEX_WAIT, seen, left);
                }
            }
            EventMethod::BusyPoll => Ok(self.spin_wait(seq, timeout_ms)),
        }
    }

    fn spin_wait(&self, seq: u32, timeout_ms: Option<i32>) -> bool {
        let deadline = timeout_ms.map(|ms| rtloop_rt::now_ns() + ms as u64 * 1_000_000);
        let mut spins: u32 = 0;
        while self.word.load(Ordering::Acquire) != seq {
            if self.yield_in_spin {
                // SAFETY: sched_yield has no arguments and cannot fail on Linux.
                unsafe { libc::sched_yield() };
            } else {
                std::hint::spin_loop();
            }
            spins = spins.wrapping_add(1);
            // Reading the clock every spin would slow the poll; every 1024 is plenty for a
            // timeout of seconds.
            if spins & 1023 == 0 && deadline.is_some_and(|d| rtloop_rt::now_ns() > d) {
                return false;
            }
        }
        true
    }
}

fn futex(word: &AtomicU32, op: libc::c_int, value: u32, timeout_ns: Option<u64>) {
    let ts = timeout_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned u32 (in the shared page) for the whole call; `ts_ptr`
    // is null or points to a timespec on this stack frame. Not FUTEX_PRIVATE_FLAG, so the
    // futex works between processes sharing the page. EINTR/EAGAIN/ETIMEDOUT are handled
    // by the caller re-reading the word.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), op, value, ts_ptr, std::ptr::null::<u32>(), 0u32) };
}

fn write_all(fd: Option<i32>, bytes: &[u8]) -> Result<(), Error> {
    let fd = fd.ok_or(Error::NoDescriptor)?;
    loop {
        // SAFETY: `bytes` is a valid buffer of `bytes.len()` bytes for the call.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n == bytes.len() as isize {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if n < 0 && e.kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        // eventfd and one-byte pipe writes are atomic: anything but all is an error.
        return Err(Error::os("raising the event failed", e));
    }
}

fn read_exact(fd: i32, buf: &mut [u8]) -> Result<(), Error> {
    loop {
        // SAFETY: `buf` is a valid, writable buffer of `buf.len()` bytes for the call.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n == buf.len() as isize {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if n < 0 && e.kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return Err(if n == 0 { Error::ChannelClosed } else { Error::os("waiting failed", e) });
    }
}

fn poll_readable(fd: i32, timeout_ms: i32) -> Result<bool, Error> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    loop {
        // SAFETY: `pfd` is one valid pollfd for the call.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if n >= 0 {
            return Ok(n > 0);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(Error::os("poll failed", e));
        }
    }
}

/// Whether the calling thread may run on one CPU only.
fn pinned_to_one_cpu() -> bool {
    // SAFETY: all-zero bytes are a valid (empty) cpu_set_t.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is writable and its size is passed; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    // SAFETY: `set` was filled by the kernel (or is still empty on failure).
    rc == 0 && unsafe { libc::CPU_COUNT(&set) } == 1
}

/// Measure every method of `opts` and return one run per method.
pub fn event(common: &CommonOptions, opts: &EventOptions) -> Result<Outcome, Error> {
    crate::check::samples("--samples", common.samples)?;
    crate::check::no_busy_wait(common.busy_wait_us, "event")?;
    if opts.methods.is_empty() {
        return Err(crate::check::CheckError::EmptyList {
            flag: "--methods".into(),
            give: "at least one of eventfd, pipe, futex, busy-poll".into(),
        }
        .into());
    }
    crate::check::each_once("--methods", &opts.methods)?;
    crate::check::samples_in_all(common.samples, opts.methods.len(), "--methods")?;
    let mode = if opts.processes { "processes" } else { "threads" };
    let mut outcome = Outcome { experiment: "event".into(), ..Outcome::default() };
    let mut load = crate::load::Load::start(common.load)?;
    for &method in &opts.methods {
        let (samples_ns, warnings) = measure(common, method, opts.processes)?;
        for w in warnings {
            // Both sides report the same refusals; say each once.
            if !outcome.warnings.contains(&w) {
                outcome.warnings.push(w);
            }
        }
        outcome.runs.push(Run {
            label: format!("event {method} ({mode})"),
            size: None,
            method: Some(method.as_str().to_string()),
            samples_ns,
        });
    }
    outcome.warnings.extend(load.stop());
    Ok(outcome)
}

/// One method: returns the samples and the warnings of both sides.
fn measure(common: &CommonOptions, method: EventMethod, processes: bool) -> Result<(Vec<u64>, Vec<String>), Error> {
    let page = SharedPage::new()?;
    let forward = Channel::new(method)?;
    let back = Channel::new(method)?;
    let total = WARMUP_EVENTS + common.samples;
    let mode = if processes { "processes" } else { "threads" };
    let bar = progress_bar(common, common.samples as u64, &format!("event {method} ({mode})"));

    let (page, forward, back, bar_ref) = (&page, &forward, &back, &bar);
    let result = std::thread::scope(|scope| {
        // The raiser gets a thread of its own so the caller's scheduling is never changed.
        let raiser = scope.spawn(move || -> Result<(Vec<u64>, Vec<String>), Error> {
            let shared = page.get();
            let mut warnings = Vec::new();
            let child_or_thread = if processes {
                Responder::Process(fork_responder(common, method, shared, forward, back, total)?)
            } else {
                Responder::Thread(scope.spawn(move || {
                    let shared = page.get();
                    let applied = apply_rt(common);
                    let applied_ok = applied.as_ref().is_ok();
                    if !applied_ok {
                        shared.setup_failed.store(1, Ordering::Release);
                    }
                    respond(method, shared, forward, back, total, applied_ok);
                    applied.map_err(Error::from)
                }))
            };
            let outcome = (|| {
                warnings.extend(apply_rt(common)?);
                let yield_in_spin =
                    method == EventMethod::BusyPoll && common.rt.policy.is_realtime() && pinned_to_one_cpu();
                if yield_in_spin {
                    warnings.push(
                        "busy-poll: this side may run on one CPU only under a real-time policy, so its spin loop \
                         yields (a pure spin would starve the other side); give it two CPUs for a true spin"
                            .into(),
                    );
                }
                let to_responder = Endpoint { method, channel: forward, word: &shared.ping, yield_in_spin };
                let from_responder = Endpoint { method, channel: back, word: &shared.pong, yield_in_spin };
                let mut samples = Vec::with_capacity(common.samples);
                for i in 0..total {
                    let seq = i as u32 + 1;
                    rtloop_rt::periodic::sleep_until_ns(rtloop_rt::now_ns() + GAP_BETWEEN_EVENTS_NS);
                    shared.raise_ns.store(rtloop_rt::now_ns(), Ordering::Release);
                    to_responder.raise(seq)?;
                    if !from_responder.wait(seq, Some(ANSWER_TIMEOUT_MS))? {
                        return Err(if shared.setup_failed.load(Ordering::Acquire) != 0 {
                            Error::ResponderRtRefused { process: false }
                        } else {
                            Error::NoAnswer { method, ms: ANSWER_TIMEOUT_MS }
                        });
                    }
                    if i >= WARMUP_EVENTS {
                        samples.push(shared.response_ns.load(Ordering::Acquire));
                        if let Some(bar) = bar_ref {
                            bar.inc(1);
                        }
                    }
                }
                Ok(samples)
            })();
            // On failure, wake the responder once more with the stop flag so it returns.
            if outcome.is_err() {
                shared.stop.store(1, Ordering::Release);
                let to_responder = Endpoint { method, channel: forward, word: &shared.ping, yield_in_spin: false };
                to_responder.raise(u32::MAX).ok();
            }
            let responder_result = child_or_thread.finish(outcome.is_err());
            let samples = outcome?;
            warnings.extend(responder_result?);
            Ok((samples, warnings))
        });
        raiser.join().unwrap_or_else(|_| Err(Error::panicked("raiser thread")))
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    result
}

/// The responder loop: wait for each event, stamp the wake time, answer.
fn respond(method: EventMethod, shared: &Shared, forward: &Channel, back: &Channel, total: usize, proceed: bool) {
    if !proceed {
        return;
    }
    let yield_in_spin = method == EventMethod::BusyPoll && pinned_to_one_cpu() && is_realtime_thread();
    let from_raiser = Endpoint { method, channel: forward, word: &shared.ping, yield_in_spin };
    let to_raiser = Endpoint { method, channel: back, word: &shared.pong, yield_in_spin };
    for i in 0..total {
        let seq = i as u32 + 1;
        // Wait for this event or the stop raise (u32::MAX), whichever comes.
        loop {
            let woke = if method == EventMethod::Eventfd || method == EventMethod::Pipe {
                from_raiser.wait(seq, None)
            } else {
                from_raiser.wait_either(seq, u32::MAX)
            };
            let now = rtloop_rt::now_ns();
            if shared.stop.load(Ordering::Acquire) != 0 || woke.is_err() {
                return;
            }
            if matches!(woke, Ok(true)) {
                let raised = shared.raise_ns.load(Ordering::Acquire);
                shared.response_ns.store(now.saturating_sub(raised), Ordering::Release);
                break;
            }
        }
        if to_raiser.raise(seq).is_err() {
            return;
        }
    }
}

impl Endpoint<'_> {
    /// Futex / busy-poll wait that also returns on the stop value.
    fn wait_either(&self, seq: u32, stop: u32) -> Result<bool, Error> {
        loop {
            let seen = self.word.load(Ordering::Acquire);
            if seen == seq || seen == stop {
                return Ok(true);
            }
            match self.method {
                EventMethod::Futex => futex(self.word, libc::FUTEX_WAIT, seen, None),
                _ if self.yield_in_spin => {
                    // SAFETY: sched_yield has no arguments and cannot fail on Linux.
                    unsafe { libc::sched_yield() };
                }
                _ => std::hint::spin_loop(),
            }
        }
    }
}

fn is_realtime_thread() -> bool {
    // SAFETY: pid 0 is the calling thread; no memory is passed.
    let policy = unsafe { libc::sched_getscheduler(0) };
    policy == libc::SCHED_FIFO || policy == libc::SCHED_RR || policy == libc::SCHED_DEADLINE
}

/// The other side, to be joined or reaped.
enum Responder<'scope> {
    Thread(std::thread::ScopedJoinHandle<'scope, Result<Vec<String>, Error>>),
    Process(libc::pid_t),
}

impl Responder<'_> {
    /// Wait for the responder to finish (killing a child first if the run failed) and return
    /// its real-time warnings.
    fn finish(self, failed: bool) -> Result<Vec<String>, Error> {
        match self {
            Responder::Thread(handle) => handle.join().unwrap_or_else(|_| Err(Error::panicked("responder thread"))),
            Responder::Process(pid) => {
                if failed {
                    // SAFETY: `pid` is our own child, not yet reaped, so the id cannot be reused.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                let mut status = 0;
                // SAFETY: `status` is writable; `pid` is our child.
                while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
                    if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                        return Err(Error::ResponderWaitFailed);
                    }
                }
                match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
                    (true, 0) => Ok(Vec::new()),
                    _ if failed => Ok(Vec::new()),
                    (true, 2) => Err(Error::ResponderRtRefused { process: true }),
                    _ => Err(Error::ResponderAbnormal { status }),
                }
            }
        }
    }
}

/// Fork the responder process; it applies `common.rt` to itself, answers `total` events and
/// exits. Its real-time warnings are the same as the raiser's (same settings, same system),
/// so only a refusal under `strict` is reported back (exit status 2).
fn fork_responder(
    common: &CommonOptions,
    method: EventMethod,
    shared: &Shared,
    forward: &Channel,
    back: &Channel,
    total: usize,
) -> Result<libc::pid_t, Error> {
    // SAFETY: getpid has no preconditions and cannot fail.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the child only runs code that is safe after fork in practice: glibc's malloc
    // resets its locks in the child, and the child never touches stdout/stderr locks, other
    // threads' state or the Rust runtime's exit path (it leaves with _exit).
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(Error::last_os("fork failed")),
        0 => {
            // Die with the lab (this thread, which reaps the child, ends only after it): a
            // responder of a SIGKILLed lab would otherwise wait for its next event forever.
            if crate::child::die_with_parent(parent).is_err() {
                // SAFETY: as below; the parent is gone, so nobody waits for this child.
                unsafe { libc::_exit(3) }
            }
            let ok = apply_rt(common).is_ok();
            if !ok {
                shared.setup_failed.store(1, Ordering::Release);
            }
            respond(method, shared, forward, back, total, ok);
            // SAFETY: _exit ends the child at once without running the parent's atexit
            // handlers or destructors, which belong to the parent.
            unsafe { libc::_exit(if ok { 0 } else { 2 }) }
        }
        child => Ok(child),
    }
}
