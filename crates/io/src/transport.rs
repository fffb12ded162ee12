//! The interface every CAN-FD bus implements, whatever carries it: an fdcanusb, SocketCAN,
//! UDP, a pi3hat's port — or a simulated bus, which implements it outside this crate
//! (rtloop-simrobot), as any other device would.
//!
//! One `Transport` is one bus. The cycle talks to every bus through this trait, so a
//! transport must never block past the instant it is given, never allocate in `send`,
//! `recv` or `drain`, and report failures as a [`TransportError`] value (no strings built
//! on the hot path) so one failing bus never stops the others.

pub use rtloop_proto::pi3hat::ImuSample;
use rtloop_proto::CanFdFrame;
use std::fmt;
use std::os::fd::RawFd;

/// Running counts a transport keeps about itself (never reset by a cycle).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportCounters {
    /// Frames handed to the device.
    pub sent: u64,
    /// Frames received from the device.
    pub received: u64,
    /// Lines, datagrams or frames that were not the protocol (garbage, bad CRC, `ERR`).
    pub protocol_errors: u64,
    /// Of those, the device's refusals of our own lines (fdcanusb `ERR …` answers): the
    /// frame did not reach the bus.
    pub device_errors: u64,
    /// What the device said in its latest refusal (empty if none), for the user to read.
    pub last_device_error: DeviceMessage,
    /// Times the device went away.
    pub disconnects: u64,
    /// Times it was opened again after going away.
    pub reconnects: u64,
    /// The CAN controller's own health, for transports that can read it (a pi3hat's error
    /// status register); `None` for the others.
    pub can_status: Option<rtloop_proto::pi3hat::CanErrorStatus>,
}

/// A short text a device sent (e.g. the `unknown command` of an fdcanusb `ERR unknown command`),
/// kept inline so that recording it on the hot path never allocates. Longer texts are cut at
/// [`DeviceMessage::CAPACITY`] bytes; bytes that are not printable ASCII become `?`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DeviceMessage {
    len: u8,
    bytes: [u8; DeviceMessage::CAPACITY],
}

impl DeviceMessage {
    /// The most bytes kept.
    pub const CAPACITY: usize = 64;

    /// Keep (the start of) `text`.
    pub fn new(text: &[u8]) -> Self {
        let mut m = DeviceMessage::default();
        for (slot, &b) in m.bytes.iter_mut().zip(text) {
            *slot = if b.is_ascii_graphic() || b == b' ' { b } else { b'?' };
            m.len += 1;
        }
        m
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // Only printable ASCII is ever stored.
        self.bytes.get(..usize::from(self.len)).and_then(|b| std::str::from_utf8(b).ok()).unwrap_or("")
    }

    /// Nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Default for DeviceMessage {
    fn default() -> Self {
        DeviceMessage { len: 0, bytes: [0; DeviceMessage::CAPACITY] }
    }
}

impl fmt::Debug for DeviceMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for DeviceMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a transport could not move a frame. Small and `Copy`: it is created on the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportError {
    /// The transmit queue is full; the frame was not sent.
    QueueFull,
    /// The device or peer is gone (unplugged, closed, unreachable).
    Disconnected,
    /// An operating-system error, as errno.
    Os(i32),
    /// The device answered something that is not the protocol.
    Protocol(&'static str),
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::QueueFull => write!(f, "transmit queue full"),
            TransportError::Disconnected => write!(f, "device disconnected"),
            TransportError::Os(e) => write!(f, "{}", std::io::Error::from_raw_os_error(*e)),
            TransportError::Protocol(what) => write!(f, "protocol error: {what}"),
        }
    }
}

impl std::error::Error for TransportError {}

/// One CAN-FD bus.
pub trait Transport: Send {
    /// A short human name, e.g. `sim` or `fdcanusb:/dev/ttyACM0`.
    fn name(&self) -> &str;

    /// Hand one frame to the bus at `now_ns`. Does not wait for it to reach the wire.
    fn send(&mut self, frame: &CanFdFrame, now_ns: u64) -> Result<(), TransportError>;

    /// The next frame received by `now_ns`, if any. Never blocks.
    fn recv(&mut self, now_ns: u64) -> Result<Option<CanFdFrame>, TransportError>;

    /// The earliest instant at which `recv` could return something it cannot return now,
    /// when the transport can know it (a simulator can; a device cannot and returns `None`,
    /// and the cycle then polls).
    fn ready_hint_ns(&self) -> Option<u64> {
        None
    }

    /// Push out anything `send` buffered (e.g. several frames in one datagram). The cycle
    /// calls it once after its write phase. Must not block.
    fn flush(&mut self, _now_ns: u64) -> Result<(), TransportError> {
        Ok(())
    }

    /// A file descriptor that becomes readable when `recv` may have something, so the cycle
    /// can sleep in `ppoll` instead of spinning. `None` for in-process transports.
    fn poll_fd(&self) -> Option<RawFd> {
        None
    }

    /// Running counters (protocol errors, disconnects, …).
    fn counters(&self) -> TransportCounters {
        TransportCounters::default()
    }

    /// Where this bus comes in each round-robin pass of the cycle's writes (lowest first;
    /// equal ranks keep the order of the bus list). A pi3hat's ports rank themselves in the
    /// official library's order, 1, 3, 5, 2, 4.
    fn write_rank(&self) -> u32 {
        0
    }

    /// Each `recv` that finds nothing still costs bus time (a pi3hat's SPI transactions),
    /// so the cycle stops reading this bus once its expected replies are all in, and drains
    /// it at a cycle's start only when replies to earlier requests are still owed (or it is
    /// force-checked); frames arriving in between are read by the next cycle's collection,
    /// where the caller's matcher keeps them from counting as its answers. False for
    /// transports whose empty reads cost nothing.
    fn reads_cost_time(&self) -> bool {
        false
    }

    /// Throw away frames that arrived before a cycle starts (late replies of an earlier
    /// cycle) so they are not mistaken for this cycle's answers. Returns how many.
    fn drain(&mut self, now_ns: u64) -> Result<usize, TransportError> {
        let mut n = 0;
        while self.recv(now_ns)?.is_some() {
            n += 1;
        }
        Ok(n)
    }
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn send(&mut self, frame: &CanFdFrame, now_ns: u64) -> Result<(), TransportError> {
        (**self).send(frame, now_ns)
    }
    fn recv(&mut self, now_ns: u64) -> Result<Option<CanFdFrame>, TransportError> {
        (**self).recv(now_ns)
    }
    fn ready_hint_ns(&self) -> Option<u64> {
        (**self).ready_hint_ns()
    }
    fn drain(&mut self, now_ns: u64) -> Result<usize, TransportError> {
        (**self).drain(now_ns)
    }
    fn flush(&mut self, now_ns: u64) -> Result<(), TransportError> {
        (**self).flush(now_ns)
    }
    fn poll_fd(&self) -> Option<RawFd> {
        (**self).poll_fd()
    }
    fn counters(&self) -> TransportCounters {
        (**self).counters()
    }
    fn write_rank(&self) -> u32 {
        (**self).write_rank()
    }
    fn reads_cost_time(&self) -> bool {
        (**self).reads_cost_time()
    }
}

/// Where the cycle gets the robot's attitude from (a pi3hat's, or a simulated robot's).
pub trait ImuSource: Send {
    /// Read the latest attitude into `out` at `now_ns`; `Ok(false)` when none is available.
    fn read(&mut self, now_ns: u64, out: &mut ImuSample) -> Result<bool, TransportError>;
}

/// A transport that could not be opened: which address, and one sentence saying what is
/// wrong and how to fix it (e.g. "No such file or directory: is the adapter plugged in?").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenError {
    /// The address as the user wrote it, e.g. `fdcanusb:/dev/ttyACM0`.
    pub uri: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot open {}: {}", self.uri, self.message)
    }
}

impl std::error::Error for OpenError {}
