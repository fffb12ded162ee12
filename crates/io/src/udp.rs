//! CAN-FD frames over UDP (`udp:HOST:PORT[?bus=N]`), in the framing of
//! [`rtloop_proto::udp`] (`docs/udp-framing.md`): the host side ([`UdpTransport`], one bus of the
//! cycle). The device side (a simulated bus served by `rtloop sim --udp`) is rtloop-simrobot's,
//! and shares this module's socket helpers ([`classify`], [`resolve`]).
//!
//! The host batches every frame a cycle sends to one bus into as few datagrams as fit in
//! 1472 bytes (one, for any moteus cycle), sent at `flush`; the device answers with one
//! datagram per reply. Each bus is its own UDP port; the bus number inside the records is
//! checked on both sides so a misrouted datagram is counted instead of obeyed.
//!
//! Must never: allocate, block or build strings in `send`/`recv`/`flush` (buffers are
//! fixed and sized when the socket is opened); hang when the peer is gone (a closed port
//! comes back as [`TransportError::Disconnected`]); let a malformed or misrouted datagram
//! through, or stop because of one (each is counted and dropped whole); serve a simulator
//! on an address other hosts can reach unless the user asked for it.

use crate::transport::{OpenError, Transport, TransportCounters, TransportError};
use crate::uri::BusUri;
use rtloop_proto::udp::{decode_datagram, DatagramWriter, UdpFrameError, MAX_DATAGRAM, MAX_FRAMES_PER_MAX_DATAGRAM};
use rtloop_proto::CanFdFrame;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

/// Receive buffer size: one byte more than any valid datagram, so an oversized one is
/// recognised (the kernel silently truncates a datagram to the buffer) instead of being
/// misread as a truncated one.
pub const RX_BUFFER: usize = MAX_DATAGRAM + 1;

/// At most this many datagrams are read per `recv`/`service` call, so a peer flooding
/// garbage cannot keep a caller in the read loop forever.
pub const MAX_DATAGRAMS_PER_CALL: usize = 64;

/// How a socket error is handled (by both sides: also rtloop-simrobot's UDP endpoint).
pub enum SocketFault {
    /// Nothing to read / no room to write right now.
    WouldBlock,
    /// A signal interrupted the call; try again.
    Interrupted,
    /// The peer (or the way to it) is gone: its port is closed, or it is unreachable.
    PeerGone,
    /// Anything else, as errno.
    Other(i32),
}

/// What a socket error means for the caller.
pub fn classify(e: &io::Error) -> SocketFault {
    match e.raw_os_error() {
        Some(libc::EAGAIN) => SocketFault::WouldBlock,
        Some(libc::EINTR) => SocketFault::Interrupted,
        Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EHOSTDOWN | libc::ENETDOWN) => {
            SocketFault::PeerGone
        }
        Some(errno) => SocketFault::Other(errno),
        None if e.kind() == io::ErrorKind::WouldBlock => SocketFault::WouldBlock,
        None => SocketFault::Other(libc::EIO),
    }
}

/// Resolve `HOST:PORT` (or `(host, port)`), with a message that says what to fix.
pub fn resolve(target: impl ToSocketAddrs, shown: &str, uri: &str) -> Result<Vec<SocketAddr>, OpenError> {
    let addrs: Vec<SocketAddr> = target
        .to_socket_addrs()
        .map_err(|e| OpenError { uri: uri.to_string(), message: format!("cannot resolve {shown}: {e}") })?
        .collect();
    if addrs.is_empty() {
        return Err(OpenError { uri: uri.to_string(), message: format!("{shown} resolves to no address") });
    }
    Ok(addrs)
}

/// The unspecified address of `addr`'s family, port 0: where a client socket binds so the
/// kernel picks an ephemeral port on the family it will talk on.
fn any_address_like(addr: &SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    }
}

/// One CAN-FD bus reached over UDP: the host side of the `udp:` transport.
pub struct UdpTransport {
    /// Connected to the peer, so the kernel drops datagrams from anyone else and reports
    /// the peer's closed port (ICMP port unreachable) as `ECONNREFUSED`.
    socket: UdpSocket,
    name: String,
    bus: u8,
    /// The datagram `send` is filling and `flush` sends.
    tx: DatagramWriter<[u8; MAX_DATAGRAM]>,
    rx_buf: [u8; RX_BUFFER],
    /// Frames for our bus from the last datagram, handed out one per `recv`.
    /// Capacity [`MAX_FRAMES_PER_MAX_DATAGRAM`] is reserved at open and never exceeded,
    /// because a datagram is only decoded once the previous one is used up.
    pending: Vec<CanFdFrame>,
    pending_next: usize,
    /// The last socket error said the peer was gone and nothing has come back since.
    peer_gone: bool,
    counters: TransportCounters,
}

impl UdpTransport {
    /// Open the bus `bus` of the peer at `host:port`: resolve it, bind an ephemeral
    /// non-blocking socket of the same address family, and connect it to the peer.
    /// UDP has no handshake, so a missing peer shows only later, as `Disconnected`.
    pub fn open(host: &str, port: u16, bus: u8) -> Result<Self, OpenError> {
        let uri = BusUri::Udp { host: host.to_string(), port, bus }.to_string();
        let err = |message: String| OpenError { uri: uri.clone(), message };
        let addrs = resolve((host, port), &format!("host '{host}'"), &uri)?;
        let mut last_error = None;
        for peer in &addrs {
            let attempt = UdpSocket::bind(any_address_like(peer)).and_then(|s| {
                s.connect(peer)?;
                s.set_nonblocking(true)?;
                Ok(s)
            });
            match attempt {
                Ok(socket) => {
                    let tx = DatagramWriter::new([0u8; MAX_DATAGRAM], 0)
                        .map_err(|e| err(format!("internal error building the datagram buffer: {e}")))?;
                    return Ok(UdpTransport {
                        socket,
                        name: uri.clone(),
                        bus,
                        tx,
                        rx_buf: [0; RX_BUFFER],
                        pending: Vec::with_capacity(MAX_FRAMES_PER_MAX_DATAGRAM),
                        pending_next: 0,
                        peer_gone: false,
                        counters: TransportCounters::default(),
                    });
                }
                Err(e) => last_error = Some((peer, e)),
            }
        }
        Err(match last_error {
            Some((peer, e)) => err(format!("cannot open a UDP socket towards {peer}: {e}")),
            None => err(format!("host '{host}' resolves to no address")),
        })
    }

    /// The bus number this transport sends and accepts.
    pub fn bus(&self) -> u8 {
        self.bus
    }

    /// Our local address (the ephemeral port the peer answers to).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.socket.peer_addr()
    }

    fn mark_gone(&mut self) -> TransportError {
        if !self.peer_gone {
            self.peer_gone = true;
            self.counters.disconnects = self.counters.disconnects.saturating_add(1);
        }
        TransportError::Disconnected
    }

    fn mark_alive(&mut self) {
        if self.peer_gone {
            self.peer_gone = false;
            self.counters.reconnects = self.counters.reconnects.saturating_add(1);
        }
    }

    /// Send the datagram being built (if it holds anything) and start the next one.
    fn send_datagram(&mut self) -> Result<(), TransportError> {
        if self.tx.is_empty() {
            return Ok(());
        }
        let frames = self.tx.count() as u64;
        let mut result = self.socket.send(self.tx.as_bytes());
        if let Err(e) = &result {
            if matches!(classify(e), SocketFault::PeerGone | SocketFault::Interrupted) {
                // A refusal here reports an earlier datagram (the error the kernel kept from
                // the peer's ICMP answer); this one was not sent. Note the outage, then try
                // once more: if the peer is back, these frames reach it.
                if matches!(classify(e), SocketFault::PeerGone) {
                    let _ = self.mark_gone();
                }
                result = self.socket.send(self.tx.as_bytes());
            }
        }
        // Whatever happened, this datagram is finished: a later flush must not resend it.
        let next = self.tx.sequence().wrapping_add(1);
        self.tx.reset(next);
        match result {
            Ok(_) => {
                self.counters.sent = self.counters.sent.saturating_add(frames);
                Ok(())
            }
            Err(e) => Err(match classify(&e) {
                SocketFault::WouldBlock => TransportError::QueueFull,
                SocketFault::PeerGone => self.mark_gone(),
                SocketFault::Interrupted => TransportError::Os(libc::EINTR),
                SocketFault::Other(errno) => TransportError::Os(errno),
            }),
        }
    }
}

/// Decode one received datagram into `pending`: frames for `bus`, in order. A malformed
/// datagram is dropped whole (nothing of it is delivered) and counted once; each frame
/// for another bus is counted and dropped.
fn accept_datagram(bytes: &[u8], bus: u8, pending: &mut Vec<CanFdFrame>, counters: &mut TransportCounters) {
    let valid = bytes.len() <= MAX_DATAGRAM
        && match decode_datagram(bytes) {
            Ok(records) => records.validate().is_ok(),
            Err(_) => false,
        };
    if !valid {
        counters.protocol_errors = counters.protocol_errors.saturating_add(1);
        return;
    }
    let Ok(records) = decode_datagram(bytes) else { return };
    for (frame_bus, frame) in records.flatten() {
        if frame_bus != bus {
            counters.protocol_errors = counters.protocol_errors.saturating_add(1);
        } else if pending.len() < pending.capacity() {
            pending.push(frame);
        } else {
            // Unreachable for a datagram within MAX_DATAGRAM; never grow on the hot path.
            counters.protocol_errors = counters.protocol_errors.saturating_add(1);
        }
    }
}

impl Transport for UdpTransport {
    fn name(&self) -> &str {
        &self.name
    }

    fn send(&mut self, frame: &CanFdFrame, _now_ns: u64) -> Result<(), TransportError> {
        match self.tx.push(self.bus, frame) {
            Ok(()) => Ok(()),
            Err(UdpFrameError::DatagramFull) => {
                self.send_datagram()?;
                self.tx
                    .push(self.bus, frame)
                    .map_err(|_| TransportError::Protocol("frame does not fit in an empty UDP datagram"))
            }
            Err(UdpFrameError::IdTooWide { .. }) => Err(TransportError::Protocol("CAN id wider than 29 bits")),
            Err(_) => Err(TransportError::Protocol("CAN-FD payload longer than 64 bytes")),
        }
    }

    fn flush(&mut self, _now_ns: u64) -> Result<(), TransportError> {
        self.send_datagram()
    }

    fn recv(&mut self, _now_ns: u64) -> Result<Option<CanFdFrame>, TransportError> {
        let mut datagrams_read = 0;
        loop {
            if let Some(frame) = self.pending.get(self.pending_next) {
                self.pending_next = self.pending_next.saturating_add(1);
                self.counters.received = self.counters.received.saturating_add(1);
                return Ok(Some(*frame));
            }
            self.pending.clear();
            self.pending_next = 0;
            if datagrams_read >= MAX_DATAGRAMS_PER_CALL {
                return Ok(None);
            }
            match self.socket.recv(&mut self.rx_buf) {
                Ok(n) => {
                    datagrams_read += 1;
                    self.mark_alive();
                    let bytes = self.rx_buf.get(..n).unwrap_or(&[]);
                    accept_datagram(bytes, self.bus, &mut self.pending, &mut self.counters);
                }
                Err(e) => match classify(&e) {
                    SocketFault::WouldBlock => return Ok(None),
                    SocketFault::Interrupted => continue,
                    SocketFault::PeerGone => return Err(self.mark_gone()),
                    SocketFault::Other(errno) => return Err(TransportError::Os(errno)),
                },
            }
        }
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.socket.as_raw_fd())
    }

    fn counters(&self) -> TransportCounters {
        self.counters
    }
}
