//! One simulated bus served over UDP (`rtloop sim --udp`): the device side of rtloop-io's
//! [`rtloop_io::udp::UdpTransport`], in the framing of [`rtloop_proto::udp`]
//! (`docs/udp-framing.md`). Frames from the client go onto the simulated bus, frames the bus
//! delivers go back to the last client, one datagram each; the bus number inside the records
//! is checked, so a misrouted datagram is counted instead of obeyed.
//!
//! Must never: serve on an address other hosts can reach unless the user asked for it; let a
//! malformed datagram through or stop because of one (each is counted and dropped whole).

use super::{Endpoint, EndpointCounters, EndpointError};
use rtloop_io::udp::{classify, resolve, SocketFault, MAX_DATAGRAMS_PER_CALL, RX_BUFFER};
use rtloop_io::OpenError;
use rtloop_proto::udp::{decode_datagram, DatagramWriter, MAX_DATAGRAM};
use rtloop_proto::CanFdFrame;
use rtloop_sim::SimBus;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

/// The device side of one simulated bus served over UDP: frames from the client go onto
/// the simulated bus, frames the bus delivers go back to the last client, one datagram each.
pub struct UdpEndpoint {
    socket: UdpSocket,
    name: String,
    bus: u8,
    /// Where replies go: the sender of the last well-formed datagram.
    client: Option<SocketAddr>,
    tx: DatagramWriter<[u8; MAX_DATAGRAM]>,
    rx_buf: [u8; RX_BUFFER],
    counters: EndpointCounters,
}

impl UdpEndpoint {
    /// Serve bus `bus` at `addr` (`HOST:PORT`). An address other hosts can reach is refused
    /// unless `allow_remote`: a simulator answers anyone who writes to it.
    pub fn bind(addr: &str, bus: u8, allow_remote: bool) -> Result<Self, OpenError> {
        let uri = format!("udp:{addr}");
        let err = |message: String| OpenError { uri: uri.clone(), message };
        let addrs = resolve(addr, &format!("'{addr}'"), &uri)?;
        if !allow_remote {
            if let Some(a) = addrs.iter().find(|a| !a.ip().is_loopback()) {
                return Err(err(format!(
                    "refusing to serve on {a}, which is reachable from other hosts: use 127.0.0.1 or pass --allow-remote"
                )));
            }
        }
        let mut last_error = None;
        for a in &addrs {
            match UdpSocket::bind(a).and_then(|s| s.set_nonblocking(true).map(|()| s)) {
                Ok(socket) => {
                    let local = socket.local_addr().map_err(|e| err(format!("cannot read the bound address: {e}")))?;
                    let tx = DatagramWriter::new([0u8; MAX_DATAGRAM], 0)
                        .map_err(|e| err(format!("internal error building the datagram buffer: {e}")))?;
                    return Ok(UdpEndpoint {
                        socket,
                        name: format!("udp:{local}"),
                        bus,
                        client: None,
                        tx,
                        rx_buf: [0; RX_BUFFER],
                        counters: EndpointCounters::default(),
                    });
                }
                Err(e) => last_error = Some((a, e)),
            }
        }
        Err(match last_error {
            Some((a, e)) => err(format!("cannot bind UDP {a}: {e}")),
            None => err(format!("'{addr}' resolves to no address")),
        })
    }

    /// The bound address (useful after binding port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Where replies currently go.
    pub fn client(&self) -> Option<SocketAddr> {
        self.client
    }
}

impl Endpoint for UdpEndpoint {
    fn name(&self) -> &str {
        &self.name
    }

    fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    fn service(&mut self, bus: &mut SimBus, now_ns: u64) -> Result<(), EndpointError> {
        for _ in 0..MAX_DATAGRAMS_PER_CALL {
            let (n, from) = match self.socket.recv_from(&mut self.rx_buf) {
                Ok(got) => got,
                Err(e) => match classify(&e) {
                    SocketFault::WouldBlock => break,
                    // A refusal reports an earlier reply to a client that has gone: not ours
                    // to worry about, the next client will be answered.
                    SocketFault::Interrupted | SocketFault::PeerGone => continue,
                    SocketFault::Other(_) => return Err(EndpointError::Io(e)),
                },
            };
            let bytes = self.rx_buf.get(..n.min(RX_BUFFER)).unwrap_or(&[]);
            // Garbage is counted, never fatal, and never answered: like the pty endpoint, a
            // protocol problem is not an endpoint error (the server would back off for it).
            let records = match decode_datagram(bytes).and_then(|records| records.validate().map(|_| records)) {
                Ok(records) if n <= MAX_DATAGRAM => records,
                _ => {
                    self.counters.protocol_errors = self.counters.protocol_errors.saturating_add(1);
                    continue;
                }
            };
            // Only a well-formed datagram makes its sender our client: stray garbage must
            // not steal the replies.
            self.client = Some(from);
            for (frame_bus, frame) in records.flatten() {
                if frame_bus != self.bus {
                    self.counters.protocol_errors = self.counters.protocol_errors.saturating_add(1);
                    continue;
                }
                match bus.submit(&frame, now_ns) {
                    Ok(()) => self.counters.frames_in = self.counters.frames_in.saturating_add(1),
                    Err(_) => self.counters.dropped = self.counters.dropped.saturating_add(1),
                }
            }
        }
        Ok(())
    }

    fn deliver(&mut self, frame: &CanFdFrame, _now_ns: u64) -> Result<(), EndpointError> {
        let Some(client) = self.client else {
            self.counters.dropped = self.counters.dropped.saturating_add(1);
            return Ok(());
        };
        let next = self.tx.sequence().wrapping_add(1);
        self.tx.reset(next);
        if let Err(e) = self.tx.push(self.bus, frame) {
            self.counters.dropped = self.counters.dropped.saturating_add(1);
            return Err(EndpointError::Protocol(format!("the bus delivered a frame that cannot be framed: {e}")));
        }
        match self.socket.send_to(self.tx.as_bytes(), client) {
            Ok(_) => {
                self.counters.frames_out = self.counters.frames_out.saturating_add(1);
                Ok(())
            }
            Err(e) => {
                self.counters.dropped = self.counters.dropped.saturating_add(1);
                match classify(&e) {
                    // Client not reading, gone, or unreachable: drop and wait for the next one.
                    SocketFault::WouldBlock | SocketFault::Interrupted | SocketFault::PeerGone => Ok(()),
                    SocketFault::Other(_) => Err(EndpointError::Io(e)),
                }
            }
        }
    }

    fn counters(&self) -> EndpointCounters {
        self.counters
    }
}
