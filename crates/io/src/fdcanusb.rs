//! The fdcanusb transport: one CAN-FD bus behind a USB fdcanusb adapter (a CDC serial device
//! such as `/dev/ttyACM0`), a moteus UART link, or our simulator behind a pseudo-terminal —
//! anything that speaks the fdcanusb text-line protocol (`can send …` / `OK` / `rcv …`).
//!
//! What it is for: turning frames into `can send` lines and `rcv` lines back into frames,
//! through the line codec of [`rtloop_proto::fdcanusb`], on a non-blocking descriptor the cycle can
//! sleep on ([`Transport::poll_fd`]); and surviving the device going away: when it is unplugged
//! (or a pty's master closes) the bus reports [`TransportError::Disconnected`] and comes back
//! by itself once the path can be opened again — always by path, because a udev or simulator
//! symlink may by then point at a new device.
//!
//! A fresh descriptor starts with a lone newline. Whatever an earlier client left half-written
//! in the device's line buffer would otherwise be glued to the front of our first `can send`
//! and the device would refuse the whole line; the fdcanusb protocol ignores empty lines, so
//! the newline ends the junk (which the device may answer with an `ERR`) and costs nothing
//! when there is none. [`FdcanusbTransport::open`] then reads and drops the device's answers
//! for a short, bounded settle time ([`JUNK_SETTLE_QUIET_NS`] of silence, at most
//! [`JUNK_SETTLE_MAX_NS`]) so that an `ERR` about the junk is not taken for an answer to our
//! lines; dropped lines other than `rcv` frames are counted in
//! [`TransportCounters::protocol_errors`]. A reconnect on the hot path sends the newline too,
//! but does not wait.
//!
//! What it must never do: allocate, block or panic in `send`, `recv`, `flush` or `drain`.
//! Every buffer (a 16 KiB receive buffer split into lines in place, a 4 KiB transmit backlog
//! for partial writes, the path as a C string) is allocated in [`FdcanusbTransport::open`].
//! The hot path makes only `read` and `write` calls on the non-blocking descriptor, plus:
//! a zero-timeout `poll` after a read returns 0 bytes (which only a hung-up device does: the
//! descriptor keeps termios VMIN=1, so an idle one answers EAGAIN), and, while disconnected,
//! one non-blocking `open()` of the path at most once per
//! [`FdcanusbOptions::reconnect_interval_ns`] (twice a second by default) — followed, only
//! when it succeeds, by the handful of termios calls that make the new descriptor raw and one
//! `write` of the junk-clearing newline. It never reads a clock: the reconnect rate limit runs
//! on the `now_ns` it is given.
//!
//! Whatever the device sends — garbage, bad CRCs, `ERR`, endless lines — is counted in
//! [`TransportCounters::protocol_errors`] and skipped. An `ERR` is the device refusing one of
//! our lines (the frame never reached the bus): it is also counted in
//! [`TransportCounters::device_errors`] and its text kept in
//! [`TransportCounters::last_device_error`], so that a missing reply can be explained with
//! what the device said.

use crate::transport::{DeviceMessage, OpenError, Transport, TransportCounters, TransportError};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::stat::Mode;
use nix::sys::termios::{self, BaudRate, ControlFlags, FlushArg, SetArg};
use rtloop_proto::fdcanusb::{self as lines, Line};
use rtloop_proto::CanFdFrame;
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// Size of the receive buffer. Device lines are at most ~155 bytes, so this holds about a
/// hundred of them: far more than the replies of one cycle.
const RX_CAPACITY: usize = 16 * 1024;

/// Size of the transmit backlog that keeps the unwritten part of lines the kernel did not
/// take at once (about 60 full-length `can send` lines).
const TX_BACKLOG_CAPACITY: usize = 4 * 1024;

/// Room for the longest line [`lines::write_can_send`] produces, newline and CRC included.
const TX_LINE_CAPACITY: usize = lines::MAX_LINE + 8;

// `send` relies on an empty backlog always having room for the unwritten rest of one line.
const _: () = assert!(TX_BACKLOG_CAPACITY >= TX_LINE_CAPACITY);

/// Reads one `recv` call makes at most before saying "nothing yet", so that a device
/// streaming garbage cannot keep a call from returning.
const MAX_READS_PER_RECV: usize = 8;

/// Frames one `drain` call throws away at most, for the same reason.
const MAX_DRAIN_FRAMES: usize = 1024;

/// Default pause between two attempts to reopen a vanished device.
pub const DEFAULT_RECONNECT_INTERVAL_NS: u64 = 500_000_000;

/// At open, after the junk-clearing newline: the device's answers are dropped until it has
/// been silent this long. A USB fdcanusb or our simulator answers within a millisecond or two;
/// a device that has nothing to say costs each open this much.
pub const JUNK_SETTLE_QUIET_NS: u64 = 5_000_000;

/// At open: the junk-clearing settle never takes longer than this, however much a device says.
pub const JUNK_SETTLE_MAX_NS: u64 = 100_000_000;

/// Ends whatever partial line an earlier client left in the device's buffer.
const JUNK_CLEAR: &[u8] = b"\n";

/// The prefix of [`Transport::name`] and of [`OpenError::uri`].
const SCHEME: &str = "fdcanusb:";

/// `ASYNC_LOW_LATENCY` of `serial_struct.flags` (Linux `ASYNCB_LOW_LATENCY` = bit 13): asks
/// a serial driver to push received bytes to the reader at once instead of batching them.
const ASYNC_LOW_LATENCY: libc::c_int = 1 << 13;

/// How an fdcanusb bus talks to its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdcanusbOptions {
    /// Append the ` *XX` CRC-8 suffix to our lines. A USB fdcanusb does not need it; a UART
    /// link does. Answers are accepted with or without it either way.
    pub crc: bool,
    /// While disconnected, try to reopen the path at most once per this many nanoseconds.
    pub reconnect_interval_ns: u64,
    /// Send every frame without bitrate switch (for buses whose data phase cannot run fast).
    pub disable_brs: bool,
}

impl Default for FdcanusbOptions {
    fn default() -> Self {
        FdcanusbOptions { crc: false, reconnect_interval_ns: DEFAULT_RECONNECT_INTERVAL_NS, disable_brs: false }
    }
}

/// One CAN-FD bus behind an fdcanusb-protocol serial device.
pub struct FdcanusbTransport {
    /// `fdcanusb:PATH`.
    name: String,
    /// The path as given, kept as a C string so reopening does not allocate.
    path: CString,
    options: FdcanusbOptions,
    /// `None` while disconnected.
    fd: Option<OwnedFd>,
    /// Bytes read but not yet consumed are `rx[rx_start..rx_end]`; `rx[rx_start..rx_scanned]`
    /// is known to hold no newline.
    rx: Box<[u8]>,
    rx_start: usize,
    rx_scanned: usize,
    rx_end: usize,
    /// Inside a line longer than the receive buffer: drop bytes up to the next newline.
    rx_discarding: bool,
    /// Bytes accepted by `send` but not yet taken by the kernel are `tx[tx_start..tx_end]`.
    tx: Box<[u8]>,
    tx_start: usize,
    tx_end: usize,
    /// Lines sent that the device has not answered with `OK` or `ERR` yet.
    outstanding: u64,
    counters: TransportCounters,
    /// When the device was last lost or last tried again (the `now_ns` of that call).
    last_reopen_attempt_ns: u64,
}

impl FdcanusbTransport {
    /// Open the serial device at `path` (e.g. `/dev/ttyACM0`, `/dev/serial/by-id/…`, or a
    /// simulator's pty link): non-blocking, raw, low-latency where the driver allows, with
    /// anything already received thrown away.
    pub fn open(path: &str, options: FdcanusbOptions) -> Result<Self, OpenError> {
        let name = format!("{SCHEME}{path}");
        let fail = |message: String| OpenError { uri: name.clone(), message };
        let c_path = CString::new(path).map_err(|_| fail("the path contains a NUL byte".to_string()))?;
        let fd = open_device(&c_path).map_err(|e| fail(describe_open_failure(e, path)))?;
        let dropped_at_open = clear_junk_and_settle(fd.as_fd()).map_err(|e| fail(describe_open_failure(e, path)))?;
        let counters = TransportCounters { protocol_errors: dropped_at_open, ..TransportCounters::default() };
        Ok(FdcanusbTransport {
            path: c_path,
            options,
            fd: Some(fd),
            rx: vec![0; RX_CAPACITY].into_boxed_slice(),
            rx_start: 0,
            rx_scanned: 0,
            rx_end: 0,
            rx_discarding: false,
            tx: vec![0; TX_BACKLOG_CAPACITY].into_boxed_slice(),
            tx_start: 0,
            tx_end: 0,
            outstanding: 0,
            counters,
            last_reopen_attempt_ns: 0,
            name,
        })
    }

    /// The device path this bus (re)opens.
    pub fn path(&self) -> &str {
        self.name.strip_prefix(SCHEME).unwrap_or(&self.name)
    }

    /// The options it was opened with.
    pub fn options(&self) -> FdcanusbOptions {
        self.options
    }

    /// Whether the device is open right now.
    pub fn is_connected(&self) -> bool {
        self.fd.is_some()
    }

    /// Lines sent that the device has not yet answered with `OK` or `ERR`.
    pub fn outstanding(&self) -> u64 {
        self.outstanding
    }

    /// Bytes of sent lines still waiting in the transmit backlog for the kernel to take them.
    pub fn backlog_len(&self) -> usize {
        self.tx_end.saturating_sub(self.tx_start)
    }

    /// Make sure the device is open: when it is not, try to reopen it if the last attempt is
    /// at least `reconnect_interval_ns` old (a clock that went backwards counts as due).
    fn ensure_connected(&mut self, now_ns: u64) -> Result<(), TransportError> {
        if self.fd.is_some() {
            return Ok(());
        }
        let last = self.last_reopen_attempt_ns;
        let due = now_ns < last || now_ns - last >= self.options.reconnect_interval_ns;
        if !due {
            return Err(TransportError::Disconnected);
        }
        self.last_reopen_attempt_ns = now_ns;
        match open_device(&self.path) {
            Ok(fd) => {
                // End any junk left in the device's line buffer (see the module doc); no
                // settling here, this is the hot path. A full tty takes it later or never.
                let _ = nix::unistd::write(&fd, JUNK_CLEAR);
                self.reset_buffers();
                self.fd = Some(fd);
                self.counters.reconnects += 1;
                Ok(())
            }
            Err(_) => Err(TransportError::Disconnected),
        }
    }

    /// The device is gone: close it and start the reconnect clock.
    fn disconnect(&mut self, now_ns: u64) -> TransportError {
        self.fd = None;
        self.reset_buffers();
        self.counters.disconnects += 1;
        self.last_reopen_attempt_ns = now_ns;
        TransportError::Disconnected
    }

    /// Map a read/write error: the ones a vanished device produces disconnect the bus.
    fn fail(&mut self, errno: Errno, now_ns: u64) -> TransportError {
        if device_gone(errno) {
            self.disconnect(now_ns)
        } else {
            TransportError::Os(errno as i32)
        }
    }

    /// Forget everything buffered for the old descriptor: a new one starts a new stream.
    fn reset_buffers(&mut self) {
        self.rx_start = 0;
        self.rx_scanned = 0;
        self.rx_end = 0;
        self.rx_discarding = false;
        self.tx_start = 0;
        self.tx_end = 0;
        self.outstanding = 0;
    }

    /// Write as much of the backlog as the kernel takes now.
    fn write_backlog(&mut self, now_ns: u64) -> Result<(), TransportError> {
        while self.tx_start < self.tx_end {
            let Some(fd) = self.fd.as_ref() else {
                return Err(TransportError::Disconnected);
            };
            let pending = self.tx.get(self.tx_start..self.tx_end).unwrap_or(&[]);
            match nix::unistd::write(fd, pending) {
                Ok(0) | Err(Errno::EAGAIN) | Err(Errno::EINTR) => break,
                Ok(n) => self.tx_start = self.tx_start.saturating_add(n).min(self.tx_end),
                Err(e) => return Err(self.fail(e, now_ns)),
            }
        }
        if self.tx_start == self.tx_end {
            self.tx_start = 0;
            self.tx_end = 0;
        }
        Ok(())
    }

    /// Queue `bytes` behind the backlog; false when they do not fit.
    fn append_backlog(&mut self, bytes: &[u8]) -> bool {
        let capacity = self.tx.len();
        if capacity.saturating_sub(self.tx_end) < bytes.len() && self.tx_start > 0 {
            self.tx.copy_within(self.tx_start..self.tx_end, 0);
            self.tx_end -= self.tx_start;
            self.tx_start = 0;
        }
        let end = self.tx_end.saturating_add(bytes.len());
        match self.tx.get_mut(self.tx_end..end) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                self.tx_end = end;
                true
            }
            None => false,
        }
    }

    /// The next complete line in the receive buffer, as a range of `rx` without its newline,
    /// consumed. Drops the tail of an over-long line on the way.
    fn take_line(&mut self) -> Option<(usize, usize)> {
        loop {
            let unscanned = self.rx.get(self.rx_scanned..self.rx_end)?;
            let Some(offset) = unscanned.iter().position(|&b| b == b'\n') else {
                self.rx_scanned = self.rx_end;
                if self.rx_discarding {
                    // Nothing of this line is worth keeping.
                    self.rx_start = self.rx_end;
                }
                return None;
            };
            let newline = self.rx_scanned + offset;
            let start = self.rx_start;
            self.rx_start = newline + 1;
            self.rx_scanned = newline + 1;
            if self.rx_discarding {
                // The end of a line already counted as too long.
                self.rx_discarding = false;
                continue;
            }
            return Some((start, newline));
        }
    }

    /// Read whatever the device has into the receive buffer. Returns the byte count, 0 when
    /// nothing is available.
    fn fill(&mut self, now_ns: u64) -> Result<usize, TransportError> {
        let capacity = self.rx.len();
        if self.rx_start == self.rx_end {
            self.rx_start = 0;
            self.rx_scanned = 0;
            self.rx_end = 0;
        } else if self.rx_end == capacity && self.rx_start > 0 {
            self.rx.copy_within(self.rx_start..self.rx_end, 0);
            self.rx_scanned -= self.rx_start;
            self.rx_end -= self.rx_start;
            self.rx_start = 0;
        }
        if self.rx_end == capacity {
            // A whole buffer without a newline is no line a device sends: count it once and
            // skip everything up to the next newline.
            if !self.rx_discarding {
                self.counters.protocol_errors += 1;
                self.rx_discarding = true;
            }
            self.rx_start = 0;
            self.rx_scanned = 0;
            self.rx_end = 0;
        }
        let Some(fd) = self.fd.as_ref() else {
            return Err(TransportError::Disconnected);
        };
        let space = self.rx.get_mut(self.rx_end..).unwrap_or(&mut []);
        match nix::unistd::read(fd, space) {
            // With VMIN=1 and O_NONBLOCK an idle tty says EAGAIN; 0 bytes is what a hung-up
            // one returns. Confirm with the poll flags before giving the device up.
            Ok(0) => {
                if hung_up(fd.as_fd()) {
                    Err(self.disconnect(now_ns))
                } else {
                    Ok(0)
                }
            }
            Ok(n) => {
                self.rx_end = self.rx_end.saturating_add(n).min(capacity);
                Ok(n)
            }
            Err(Errno::EAGAIN) | Err(Errno::EINTR) => Ok(0),
            Err(e) => Err(self.fail(e, now_ns)),
        }
    }
}

impl Transport for FdcanusbTransport {
    fn name(&self) -> &str {
        &self.name
    }

    fn send(&mut self, frame: &CanFdFrame, now_ns: u64) -> Result<(), TransportError> {
        self.ensure_connected(now_ns)?;
        // The device pads short frames with 0x00, which a moteus would parse as subframes;
        // 0x50 is its no-op.
        let mut padded = *frame;
        padded.pad_to_dlc();
        if self.options.disable_brs {
            padded.flags.brs = false;
        }
        let mut line_buf = [0u8; TX_LINE_CAPACITY];
        let len = lines::write_can_send(&padded, self.options.crc, &mut line_buf)
            .map_err(|_| TransportError::Protocol("frame cannot be written as an fdcanusb line"))?;
        let line = line_buf.get(..len).unwrap_or(&[]);
        // Older bytes go first, or lines would interleave.
        self.write_backlog(now_ns)?;
        if self.tx_start == self.tx_end {
            let Some(fd) = self.fd.as_ref() else {
                return Err(TransportError::Disconnected);
            };
            let written = match nix::unistd::write(fd, line) {
                Ok(n) => n,
                Err(Errno::EAGAIN) | Err(Errno::EINTR) => 0,
                Err(e) => return Err(self.fail(e, now_ns)),
            };
            let rest = line.get(written..).unwrap_or(&[]);
            // An empty backlog always has room for one line.
            if !rest.is_empty() && !self.append_backlog(rest) {
                return Err(TransportError::QueueFull);
            }
        } else if !self.append_backlog(line) {
            return Err(TransportError::QueueFull);
        }
        self.outstanding += 1;
        self.counters.sent += 1;
        Ok(())
    }

    fn recv(&mut self, now_ns: u64) -> Result<Option<CanFdFrame>, TransportError> {
        self.ensure_connected(now_ns)?;
        // The cycle keeps calling recv while it waits, so a backlog left by a slow device
        // keeps moving even though the cycle only wakes for incoming data.
        self.write_backlog(now_ns)?;
        let mut reads = 0;
        loop {
            while let Some((start, end)) = self.take_line() {
                match classify(self.rx.get(start..end).unwrap_or(&[])) {
                    Answer::Frame(frame) => {
                        self.counters.received += 1;
                        return Ok(Some(frame));
                    }
                    Answer::Ok => self.outstanding = self.outstanding.saturating_sub(1),
                    Answer::DeviceError(message) => {
                        // The device answered (and refused) one of our lines.
                        self.outstanding = self.outstanding.saturating_sub(1);
                        self.counters.protocol_errors += 1;
                        self.counters.device_errors += 1;
                        self.counters.last_device_error = message;
                    }
                    Answer::Invalid => self.counters.protocol_errors += 1,
                    Answer::Blank => {}
                }
            }
            if reads == MAX_READS_PER_RECV {
                return Ok(None);
            }
            reads += 1;
            if self.fill(now_ns)? == 0 {
                return Ok(None);
            }
        }
    }

    fn flush(&mut self, now_ns: u64) -> Result<(), TransportError> {
        if self.fd.is_none() {
            return Err(TransportError::Disconnected);
        }
        self.write_backlog(now_ns)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|fd| fd.as_raw_fd())
    }

    fn counters(&self) -> TransportCounters {
        self.counters
    }

    fn drain(&mut self, now_ns: u64) -> Result<usize, TransportError> {
        let mut drained = 0;
        while drained < MAX_DRAIN_FRAMES {
            match self.recv(now_ns)? {
                Some(_) => drained += 1,
                None => break,
            }
        }
        Ok(drained)
    }
}

/// What one device line means to the host.
enum Answer {
    Frame(CanFdFrame),
    Ok,
    /// `ERR <text>`: the device refused a line; its text.
    DeviceError(DeviceMessage),
    /// Garbage, a bad CRC, an over-long or unknown line, or a host-side line echoed back.
    Invalid,
    /// Nothing but a line ending (e.g. the `\n` of a `\r\n` split elsewhere).
    Blank,
}

fn classify(line: &[u8]) -> Answer {
    match lines::parse_line(line) {
        Ok(parsed) => match parsed.line {
            Line::Rcv(frame) => Answer::Frame(frame),
            Line::Ok => Answer::Ok,
            Line::Err(text) => Answer::DeviceError(DeviceMessage::new(text)),
            Line::CanSend(_) | Line::Other(_) => Answer::Invalid,
        },
        Err(lines::LineError::Empty) => Answer::Blank,
        Err(_) => Answer::Invalid,
    }
}

/// Errors a read or write gets once the device is gone: EIO (pty slave whose master
/// closed, USB device unplugged), ENXIO/ENODEV (device removed), EBADF (descriptor revoked).
fn device_gone(errno: Errno) -> bool {
    matches!(errno, Errno::EIO | Errno::ENXIO | Errno::ENODEV | Errno::EBADF)
}

/// Whether the tty reports a hangup right now (zero-timeout poll).
fn hung_up(fd: BorrowedFd<'_>) -> bool {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match nix::poll::poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => fds
            .first()
            .and_then(PollFd::revents)
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL)),
        Err(_) => false,
    }
}

/// Why opening the device failed, without allocating (it also runs on reconnect).
#[derive(Debug, Clone, Copy)]
enum OpenFailure {
    /// `open()` failed.
    Open(Errno),
    /// It opened, but is not a terminal.
    NotATty,
    /// It opened, but could not be configured.
    Configure(Errno),
}

fn describe_open_failure(failure: OpenFailure, path: &str) -> String {
    match failure {
        OpenFailure::Open(Errno::ENOENT) => {
            "no such device: is the adapter plugged in and is the path right? (ls /dev/ttyACM* /dev/serial/by-id/)"
                .to_string()
        }
        OpenFailure::Open(Errno::EACCES) => {
            "permission denied: add your user to the dialout group or run as root".to_string()
        }
        OpenFailure::NotATty => format!("{path} is not a serial device"),
        OpenFailure::Open(e) | OpenFailure::Configure(e) => std::io::Error::from_raw_os_error(e as i32).to_string(),
    }
}

/// Send the junk-clearing newline on a freshly opened device and drop whatever it answers
/// until it has been quiet for [`JUNK_SETTLE_QUIET_NS`] (at most [`JUNK_SETTLE_MAX_NS`]).
/// Returns the number of dropped lines that were not bus traffic (`ERR` about the junk,
/// garbage): protocol errors. `rcv` lines are frames from before we asked anything, dropped
/// like the input `configure` flushes. Runs at open only: it blocks, briefly.
fn clear_junk_and_settle(fd: BorrowedFd<'_>) -> Result<u64, OpenFailure> {
    match nix::unistd::write(fd, JUNK_CLEAR) {
        Ok(_) | Err(Errno::EAGAIN) | Err(Errno::EINTR) => {}
        Err(e) => return Err(OpenFailure::Configure(e)),
    }
    let start = crate::clock::monotonic_now_ns();
    let mut quiet_since = start;
    let mut not_frames = 0u64;
    // The first bytes of the line being read, enough to recognise `rcv `.
    let mut head = [0u8; 4];
    let mut head_len = 0usize;
    let mut buf = [0u8; 512];
    loop {
        let now = crate::clock::monotonic_now_ns();
        let quiet_left = (quiet_since + JUNK_SETTLE_QUIET_NS).saturating_sub(now);
        let total_left = (start + JUNK_SETTLE_MAX_NS).saturating_sub(now);
        let wait_ns = quiet_left.min(total_left);
        if wait_ns == 0 {
            return Ok(not_frames);
        }
        let wait_ms = u16::try_from(wait_ns.div_ceil(1_000_000)).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, PollTimeout::from(wait_ms)) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(OpenFailure::Configure(e)),
        }
        match nix::unistd::read(fd, &mut buf) {
            Ok(0) => return Ok(not_frames),
            Ok(n) => {
                for &b in buf.get(..n).unwrap_or(&[]) {
                    if b == b'\n' || b == b'\r' {
                        let line = head.get(..head_len).unwrap_or(&[]);
                        if !line.is_empty() && line != b"rcv " {
                            not_frames += 1;
                        }
                        head_len = 0;
                    } else if let Some(slot) = head.get_mut(head_len) {
                        *slot = b;
                        head_len += 1;
                    }
                }
                quiet_since = crate::clock::monotonic_now_ns();
            }
            Err(Errno::EAGAIN) | Err(Errno::EINTR) => {}
            Err(e) => return Err(OpenFailure::Configure(e)),
        }
    }
}

/// Open and configure the device at `path`.
fn open_device(path: &CStr) -> Result<OwnedFd, OpenFailure> {
    let flags = OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = nix::fcntl::open(path, flags, Mode::empty()).map_err(OpenFailure::Open)?;
    configure(fd.as_fd())?;
    Ok(fd)
}

/// Make the tty raw and non-blocking-friendly, ask for low latency, drop stale input.
///
/// `cfmakeraw` leaves VMIN=1, VTIME=0, which we keep on purpose: together with O_NONBLOCK
/// an idle tty then answers a read with EAGAIN, so a read of 0 bytes means the device hung
/// up (with VMIN=0 an idle read also returns 0, and telling the two apart would cost a
/// `poll` after every empty read).
fn configure(fd: BorrowedFd<'_>) -> Result<(), OpenFailure> {
    let mut tio = termios::tcgetattr(fd).map_err(|e| match e {
        Errno::ENOTTY | Errno::EINVAL => OpenFailure::NotATty,
        e => OpenFailure::Configure(e),
    })?;
    termios::cfmakeraw(&mut tio);
    tio.control_chars[libc::VMIN] = 1;
    tio.control_chars[libc::VTIME] = 0;
    // Ignore modem-control lines (a CDC device has none worth waiting for); enable receiving.
    tio.control_flags |= ControlFlags::CLOCAL | ControlFlags::CREAD;
    // A USB CDC device ignores the baud rate; a UART link to a moteus runs at this one.
    let _ = termios::cfsetspeed(&mut tio, BaudRate::B115200);
    termios::tcsetattr(fd, SetArg::TCSANOW, &tio).map_err(OpenFailure::Configure)?;
    request_low_latency(fd);
    termios::tcflush(fd, FlushArg::TCIFLUSH).map_err(OpenFailure::Configure)?;
    Ok(())
}

/// Linux `struct serial_struct` (include/uapi/linux/serial.h), the argument of
/// TIOCGSERIAL/TIOCSSERIAL.
#[repr(C)]
#[derive(Clone, Copy)]
struct SerialStruct {
    kind: libc::c_int,
    line: libc::c_int,
    port: libc::c_uint,
    irq: libc::c_int,
    flags: libc::c_int,
    xmit_fifo_size: libc::c_int,
    custom_divisor: libc::c_int,
    baud_base: libc::c_int,
    close_delay: libc::c_ushort,
    io_type: libc::c_char,
    reserved_char: [libc::c_char; 1],
    hub6: libc::c_int,
    closing_wait: libc::c_ushort,
    closing_wait2: libc::c_ushort,
    iomem_base: *mut libc::c_uchar,
    iomem_reg_shift: libc::c_ushort,
    port_high: libc::c_uint,
    iomap_base: libc::c_ulong,
}

/// `SerialStruct` with spare room after it, so that a kernel whose struct grew could never
/// write past our memory.
#[repr(C)]
struct SerialStructWithSlack {
    serial: SerialStruct,
    slack: [u8; 64],
}

/// Set ASYNC_LOW_LATENCY where the driver supports it. Best effort: ptys answer ENOTTY,
/// some USB drivers EINVAL or EPERM, and a bus works without it, only with more latency.
fn request_low_latency(fd: BorrowedFd<'_>) {
    // SAFETY: every field of the struct is an integer, an integer array or a raw pointer, for
    // which all-zero bytes is a valid value.
    let mut arg: SerialStructWithSlack = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is an open descriptor for the duration of the call; TIOCGSERIAL writes at
    // most one `serial_struct` through the pointer, and `arg` is a live, writable,
    // correctly laid out serial_struct with 64 spare bytes behind it.
    let got = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGSERIAL, &mut arg as *mut SerialStructWithSlack) };
    if got != 0 {
        return;
    }
    if arg.serial.flags & ASYNC_LOW_LATENCY != 0 {
        return;
    }
    arg.serial.flags |= ASYNC_LOW_LATENCY;
    // SAFETY: as above; TIOCSSERIAL only reads the struct the kernel itself just filled in.
    let _ = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSSERIAL, &arg as *const SerialStructWithSlack) };
}
