//! `rtloop lab serial`: request/reply turnaround over a pseudo-terminal, waiting for the reply
//! by blocking read, epoll or busy polling — the host-side ladder of the moteus posts (asio /
//! epoll ≈ 80 µs, a blocking read thread ≈ 30 µs, busy polling ≈ 4 µs on a Raspberry Pi).
//!
//! For each method a fresh pty pair is opened and both sides are put in raw mode (cfmakeraw:
//! no echo, no line editing, no CR/LF translation). An *echo peer* thread on the master side
//! stands in for the device: it reads each `size`-byte message and writes it straight back.
//! The *measuring* thread, with `common.rt` applied, writes a message to the slave side and
//! waits for the whole echo; each sample is that round trip (CLOCK_MONOTONIC before the write
//! to after the last byte is read). Messages follow each other back to back, as in a loop
//! that queries one servo after another. The echo peer runs with the caller's settings: it
//! is the "device", not the code under test. Echoes are checked byte for byte.
//!
//! What it must never do: measure on a thread whose settings were not applied (or hide a
//! refusal), hang when the peer is gone (epoll and busy polling time out, a blocking read
//! sees the closed master), or leave a pty or thread behind.

use crate::options::{apply_rt, progress_bar, CommonOptions};
use crate::report::{Outcome, Run};
// Defined with the other methods, below the errors that name them; found here too.
pub use crate::methods::SerialMethod;
use crate::Error;
use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg, SpecialCharacterIndices};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Round trips made before recording (first-touch faults, cold caches, the peer waking up).
const WARMUP_MESSAGES: usize = 20;

/// How long the measuring side waits for an echo before it declares the peer gone.
const ECHO_TIMEOUT_NS: u64 = 2_000_000_000;

/// What `rtloop lab serial` measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SerialOptions {
    /// One run per method, in this order.
    pub methods: Vec<SerialMethod>,
    /// Bytes per message (1..=[`crate::check::MAX_SERIAL_SIZE`]).
    pub size: usize,
}

impl Default for SerialOptions {
    fn default() -> Self {
        SerialOptions { methods: SerialMethod::ALL.to_vec(), size: 16 }
    }
}

/// Measure every method of `opts` and return one run per method.
pub fn serial(common: &CommonOptions, opts: &SerialOptions) -> Result<Outcome, Error> {
    crate::check::samples("--samples", common.samples)?;
    crate::check::no_busy_wait(common.busy_wait_us, "serial")?;
    if opts.methods.is_empty() {
        return Err(crate::check::CheckError::EmptyList {
            flag: "--methods".into(),
            give: "at least one of blocking, epoll, busy-poll".into(),
        }
        .into());
    }
    crate::check::each_once("--methods", &opts.methods)?;
    crate::check::serial_size("--size", opts.size)?;
    crate::check::samples_in_all(common.samples, opts.methods.len(), "--methods")?;
    let mut outcome = Outcome { experiment: "serial".into(), ..Outcome::default() };
    let mut load = crate::load::Load::start(common.load)?;
    for &method in &opts.methods {
        let (samples_ns, warnings) = measure(common, method, opts.size)?;
        for w in warnings {
            if !outcome.warnings.contains(&w) {
                outcome.warnings.push(w);
            }
        }
        outcome.runs.push(Run {
            label: format!("serial {} B {method}", opts.size),
            size: Some(opts.size),
            method: Some(method.as_str().to_string()),
            samples_ns,
        });
    }
    outcome.warnings.extend(load.stop());
    Ok(outcome)
}

/// Open a pty pair with both sides raw.
fn open_raw_pty() -> Result<(OwnedFd, OwnedFd), Error> {
    let pty = nix::pty::openpty(None, None).map_err(|e| Error::sys("openpty failed", e))?;
    for fd in [&pty.master, &pty.slave] {
        let mut t = tcgetattr(fd).map_err(|e| Error::sys("tcgetattr on the pty failed", e))?;
        cfmakeraw(&mut t);
        tcsetattr(fd, SetArg::TCSANOW, &t).map_err(|e| Error::sys("tcsetattr on the pty failed", e))?;
    }
    Ok((pty.master, pty.slave))
}

fn set_nonblocking(fd: RawFd) -> Result<(), Error> {
    // SAFETY: F_GETFL/F_SETFL on a descriptor we own; no memory is passed.
    let ok = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    ok.then_some(()).ok_or_else(|| Error::last_os("setting O_NONBLOCK failed"))
}

/// VMIN = min(size, 255) (the field is one byte), VTIME = 0: a blocking read returns once that
/// many bytes are in, with no inter-byte timer.
fn set_vmin(fd: &OwnedFd, size: usize) -> Result<(), Error> {
    let mut t = tcgetattr(fd).map_err(|e| Error::sys("tcgetattr failed", e))?;
    t.control_chars[SpecialCharacterIndices::VMIN as usize] = size.min(255) as libc::cc_t;
    t.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
    tcsetattr(fd, SetArg::TCSANOW, &t).map_err(|e| Error::sys("tcsetattr (VMIN) failed", e))
}

/// read(2) once: Ok(bytes), Ok(0) for "nothing yet" on a non-blocking descriptor, Err when the
/// other side is gone or the read failed.
fn read_some(fd: RawFd, buf: &mut [u8]) -> Result<usize, Error> {
    loop {
        // SAFETY: `buf` is a valid, writable buffer of `buf.len()` bytes for the call.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            return Ok(n as usize);
        }
        if n == 0 {
            return Err(Error::PtyClosed);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Ok(0),
            // EIO: the last holder of the other side closed it.
            _ => return Err(Error::os("read from the pty failed", e)),
        }
    }
}

fn write_all(fd: RawFd, mut bytes: &[u8]) -> Result<(), Error> {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid buffer of `bytes.len()` bytes for the call.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n > 0 {
            bytes = &bytes[n as usize..];
            continue;
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            // A full pty buffer on a non-blocking descriptor: the peer drains it shortly.
            Some(libc::EAGAIN) => std::hint::spin_loop(),
            _ => return Err(Error::os("write to the pty failed", e)),
        }
    }
    Ok(())
}

/// The device stand-in: read `size` bytes, write them back, until the slave side closes.
fn echo_peer(master: OwnedFd, size: usize) {
    let fd = master.as_raw_fd();
    let mut buf = vec![0u8; size];
    loop {
        let mut filled = 0;
        while filled < size {
            match read_some(fd, &mut buf[filled..]) {
                Ok(n) => filled += n,
                Err(_) => return,
            }
        }
        if write_all(fd, &buf).is_err() {
            return;
        }
    }
}

/// A wait strategy for the echo.
enum Waiter {
    Blocking,
    Epoll(OwnedFd),
    BusyPoll,
}

impl Waiter {
    fn new(method: SerialMethod, slave: &OwnedFd, size: usize) -> Result<Waiter, Error> {
        match method {
            SerialMethod::Blocking => {
                set_vmin(slave, size)?;
                Ok(Waiter::Blocking)
            }
            SerialMethod::Epoll => {
                set_nonblocking(slave.as_raw_fd())?;
                // SAFETY: epoll_create1 has no memory arguments.
                let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
                if ep < 0 {
                    return Err(Error::last_os("epoll_create1 failed"));
                }
                // SAFETY: `ep` was just created and is owned by nothing else.
                let ep = unsafe { OwnedFd::from_raw_fd(ep) };
                let mut interest = libc::epoll_event { events: libc::EPOLLIN as u32, u64: 0 };
                // SAFETY: `interest` is a valid epoll_event; both descriptors are open.
                let rc =
                    unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, slave.as_raw_fd(), &mut interest) };
                if rc != 0 {
                    return Err(Error::last_os("epoll_ctl failed"));
                }
                Ok(Waiter::Epoll(ep))
            }
            SerialMethod::BusyPoll => {
                set_nonblocking(slave.as_raw_fd())?;
                Ok(Waiter::BusyPoll)
            }
        }
    }

    /// Fill `buf` from `fd`, waiting this waiter's way.
    fn receive(&self, fd: RawFd, buf: &mut [u8]) -> Result<(), Error> {
        let deadline = rtloop_rt::now_ns() + ECHO_TIMEOUT_NS;
        let mut filled = 0;
        let mut spins: u32 = 0;
        while filled < buf.len() {
            match self {
                Waiter::Blocking => filled += read_some(fd, &mut buf[filled..])?,
                Waiter::Epoll(ep) => {
                    let mut ready = libc::epoll_event { events: 0, u64: 0 };
                    // SAFETY: `ready` has room for the one event asked for.
                    let n = unsafe {
                        libc::epoll_wait(ep.as_raw_fd(), &mut ready, 1, (ECHO_TIMEOUT_NS / 1_000_000) as i32)
                    };
                    if n == 0 {
                        return Err(Error::NoEcho { method: "epoll", ms: ECHO_TIMEOUT_NS / 1_000_000 });
                    }
                    if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                        return Err(Error::last_os("epoll_wait failed"));
                    }
                    // Drain what is there; the next epoll_wait covers the rest.
                    loop {
                        let got = read_some(fd, &mut buf[filled..])?;
                        filled += got;
                        if got == 0 || filled == buf.len() {
                            break;
                        }
                    }
                }
                Waiter::BusyPoll => {
                    let got = read_some(fd, &mut buf[filled..])?;
                    filled += got;
                    if got == 0 {
                        std::hint::spin_loop();
                        spins = spins.wrapping_add(1);
                        // Reading the clock on every spin would slow the poll down.
                        if spins & 1023 == 0 && rtloop_rt::now_ns() > deadline {
                            return Err(Error::NoEcho { method: "busy-poll", ms: ECHO_TIMEOUT_NS / 1_000_000 });
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// One method on a fresh pty: returns the round trips and the measuring thread's warnings.
fn measure(common: &CommonOptions, method: SerialMethod, size: usize) -> Result<(Vec<u64>, Vec<String>), Error> {
    let (master, slave) = open_raw_pty()?;
    let waiter = Waiter::new(method, &slave, size)?;
    let bar = progress_bar(common, common.samples as u64, &format!("serial {size} B {method}"));
    let peer = std::thread::Builder::new()
        .name("lab-serial-echo".into())
        .spawn(move || echo_peer(master, size))
        .map_err(|e| Error::os("cannot start the echo peer", e))?;
    let bar_ref = &bar;
    let result = std::thread::scope(|scope| {
        // A thread of its own so the caller's scheduling is never changed.
        let measuring = scope.spawn(move || -> Result<(Vec<u64>, Vec<String>), Error> {
            let warnings = apply_rt(common)?;
            let fd = slave.as_raw_fd();
            let mut message = vec![0u8; size];
            let mut echo = vec![0u8; size];
            let mut samples = Vec::with_capacity(common.samples);
            for i in 0..WARMUP_MESSAGES + common.samples {
                for (k, b) in message.iter_mut().enumerate() {
                    *b = (i + k) as u8;
                }
                let start = rtloop_rt::now_ns();
                write_all(fd, &message)?;
                waiter.receive(fd, &mut echo)?;
                let end = rtloop_rt::now_ns();
                if echo != message {
                    return Err(Error::EchoDiffers { method, index: i });
                }
                if i >= WARMUP_MESSAGES {
                    samples.push(end - start);
                    if let Some(bar) = bar_ref {
                        bar.inc(1);
                    }
                }
            }
            // `slave` drops here, closing the pty's slave side: the peer's read fails and it ends.
            Ok((samples, warnings))
        });
        measuring.join().unwrap_or_else(|_| Err(Error::panicked("measuring thread")))
    });
    // The slave side was closed when the measuring thread ended (even by panic), so the peer
    // has returned or is about to.
    peer.join().map_err(|_| Error::panicked("echo peer"))?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    result
}
