//! A Linux SocketCAN interface as one bus (`socketcan:IFACE`), through the `socketcan`
//! crate's raw CAN-FD socket: moteus frames go out as FD frames with bitrate switch, with
//! a 29-bit id whenever the id needs it (or the frame says so).
//!
//! Opening explains every way it can fail in terms of what to do next: a kernel without
//! SocketCAN (load `can_raw`, or use another transport), a missing interface, an
//! interface that is not CAN, a classic-only interface that cannot carry FD frames.
//!
//! Must never: allocate or block in `send`/`recv` (the socket is non-blocking and frames
//! are converted on the stack), or take down the cycle when the interface goes away
//! (`ENETDOWN`/`ENODEV` come back as [`TransportError::Disconnected`]).

use crate::transport::{OpenError, Transport, TransportCounters, TransportError};
use rtloop_proto::frame::{FrameFlags, MAX_DATA};
use rtloop_proto::CanFdFrame;
use socketcan::id::FdFlags;
use socketcan::{CanAnyFrame, CanDataFrame, CanRemoteFrame, EmbeddedFrame, ExtendedId, Id, Socket, StandardId};
use std::io;
use std::os::fd::{AsRawFd, RawFd};

/// The bit timing moteus controllers need, as `ip link set IFACE up type can` takes it: 1 Mbit/s
/// arbitration and 5 Mbit/s data, both sampled at 66.6 % of the bit, the widest jump widths
/// (moteus works best with them as large as the adapter allows; lower `sjw` / `dsjw` where one
/// refuses these), a bus-off controller restarted after a second, CAN FD. (moteus's documentation,
/// "socketcan": the bitrate, the sample point and the jump widths must all be set.)
pub const MOTEUS_CAN_TIMING: &str =
    "bitrate 1000000 dbitrate 5000000 sjw 10 dsjw 5 sample-point 0.666 dsample-point 0.666 restart-ms 1000 fd on";

/// The commands that give `iface` moteus's bit timing ([`MOTEUS_CAN_TIMING`]); the interface
/// has to be down for its timing to change, and comes back up.
pub fn moteus_ip_link(iface: &str) -> String {
    format!("ip link set {iface} down; ip link set {iface} up type can {MOTEUS_CAN_TIMING}")
}

/// Largest classic CAN payload.
const CLASSIC_MAX_DATA: usize = 8;

/// Largest 11-bit identifier; anything above needs the extended format.
const MAX_STANDARD_ID: u32 = 0x7FF;

/// The kernel's MTU of a classic-only CAN interface (`sizeof(struct can_frame)`); an FD
/// interface reports `sizeof(struct canfd_frame)` (72).
const CLASSIC_CAN_MTU: i32 = 16;

/// The `socketcan` crate's frame for `frame`: FD (padded with the moteus NOP byte up to a
/// valid CAN-FD length, BRS as flagged), classic, or remote. Extended format when
/// `flags.extended` or the id does not fit in 11 bits. Never allocates.
pub fn to_socketcan(frame: &CanFdFrame) -> Result<CanAnyFrame, TransportError> {
    let id = if frame.flags.extended || frame.id > MAX_STANDARD_ID {
        Id::Extended(ExtendedId::new(frame.id).ok_or(TransportError::Protocol("CAN id wider than 29 bits"))?)
    } else {
        // Cannot fail: the id is at most 0x7FF here.
        Id::Standard(StandardId::new(frame.id as u16).ok_or(TransportError::Protocol("CAN id wider than 11 bits"))?)
    };
    let len = usize::from(frame.len);
    if len > MAX_DATA {
        return Err(TransportError::Protocol("CAN-FD payload longer than 64 bytes"));
    }
    if frame.flags.remote {
        if len > CLASSIC_MAX_DATA {
            return Err(TransportError::Protocol("remote frame asks for more than 8 bytes"));
        }
        return CanRemoteFrame::new_remote(id, len)
            .map(CanAnyFrame::Remote)
            .ok_or(TransportError::Protocol("remote frame rejected by socketcan"));
    }
    if frame.flags.fd {
        // The kernel rounds a length between two CAN-FD sizes up with zero bytes; moteus
        // parsers expect the NOP byte there, so round up ourselves.
        let mut padded = *frame;
        padded.pad_to_dlc();
        let flags = if frame.flags.brs { FdFlags::BRS } else { FdFlags::empty() };
        return socketcan::CanFdFrame::with_flags(id, padded.payload(), flags)
            .map(CanAnyFrame::Fd)
            .ok_or(TransportError::Protocol("CAN-FD frame rejected by socketcan"));
    }
    if len > CLASSIC_MAX_DATA {
        return Err(TransportError::Protocol("classic CAN frame longer than 8 bytes (set the FD flag)"));
    }
    CanDataFrame::new(id, frame.payload())
        .map(CanAnyFrame::Normal)
        .ok_or(TransportError::Protocol("classic CAN frame rejected by socketcan"))
}

/// Our frame for a received `socketcan` frame; `None` for an error frame (bus state
/// reports, not traffic).
pub fn from_socketcan(frame: &CanAnyFrame) -> Option<CanFdFrame> {
    let (flags, data, remote_len): (FrameFlags, &[u8], usize) = match frame {
        CanAnyFrame::Fd(f) => {
            (FrameFlags { extended: f.is_extended(), fd: true, brs: f.is_brs(), remote: false }, f.data(), 0)
        }
        CanAnyFrame::Normal(f) => (FrameFlags { extended: f.is_extended(), ..FrameFlags::default() }, f.data(), 0),
        CanAnyFrame::Remote(f) => {
            (FrameFlags { extended: f.is_extended(), remote: true, ..FrameFlags::default() }, &[], f.dlc())
        }
        CanAnyFrame::Error(_) => return None,
    };
    let id = match frame.id() {
        Id::Standard(s) => u32::from(s.as_raw()),
        Id::Extended(e) => e.as_raw(),
    };
    let mut out = CanFdFrame { id, flags, ..CanFdFrame::default() };
    out.set_payload(data).ok()?;
    if flags.remote {
        // A remote frame carries no data; its length field is the length it asks for.
        out.len = remote_len.min(CLASSIC_MAX_DATA) as u8;
    }
    Some(out)
}

/// Whether the kernel can make CAN sockets at all: `Err(why)` with the OS error when
/// `socket(PF_CAN, SOCK_RAW, CAN_RAW)` fails.
pub fn kernel_supports_socketcan() -> Result<(), io::Error> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockProtocol, SockType};
    // The probe socket is closed when the OwnedFd drops.
    socket(AddressFamily::Can, SockType::Raw, SockFlag::SOCK_CLOEXEC, SockProtocol::CanRaw)
        .map(drop)
        .map_err(|errno| io::Error::from_raw_os_error(errno as i32))
}

/// The MTU of `iface` as seen through `fd` (any socket works for `SIOCGIFMTU`).
fn interface_mtu(fd: RawFd, iface: &str) -> Result<i32, io::Error> {
    let name = iface.as_bytes();
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    // SAFETY: `ifreq` is plain old data (a name array and a union of integers, addresses
    // and a pointer) for which all-zero bytes are a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in request.ifr_name.iter_mut().zip(name) {
        *dst = src as libc::c_char;
    }
    // SAFETY: `fd` is an open socket owned by our caller for the duration of the call;
    // `request` is a valid, NUL-terminated (zeroed tail, name shorter than IFNAMSIZ) ifreq
    // that SIOCGIFMTU reads the name from and writes the MTU into, nothing else.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFMTU as _, &mut request) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFMTU succeeded, so the kernel stored the MTU in the `ifru_mtu` member.
    Ok(unsafe { request.ifr_ifru.ifru_mtu })
}

/// One SocketCAN interface as a [`Transport`].
pub struct SocketCanTransport {
    socket: socketcan::CanFdSocket,
    name: String,
    /// The last error said the interface was down or gone and nothing has worked since.
    down: bool,
    counters: TransportCounters,
}

impl SocketCanTransport {
    /// Open `iface` (e.g. `can0`) for CAN-FD frames, non-blocking.
    pub fn open(iface: &str) -> Result<Self, OpenError> {
        let uri = format!("socketcan:{iface}");
        let err = |message: String| OpenError { uri: uri.clone(), message };
        if let Err(e) = kernel_supports_socketcan() {
            return Err(err(match e.raw_os_error() {
                Some(libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT) => format!(
                    "this kernel has no SocketCAN support (socket(PF_CAN) fails: {e}): load the can and can_raw \
                     modules (modprobe can_raw), or use an fdcanusb: or udp: bus"
                ),
                _ => format!("cannot create a CAN socket: {e}"),
            }));
        }
        let index = nix::net::if_::if_nametoindex(iface)
            .map_err(|_| err(format!("no CAN interface named {iface} (ip link show)")))?;
        let socket = socketcan::CanFdSocket::open_iface(index).map_err(|e| {
            err(match e.raw_os_error() {
                Some(libc::ENODEV) => {
                    format!("{iface} is not a CAN interface (ip -details link show {iface})")
                }
                _ => format!("cannot open a CAN-FD socket on {iface}: {e}"),
            })
        })?;
        // Any MTU but the classic one (72 for CAN-FD), or no answer: the writes will tell.
        if let Ok(CLASSIC_CAN_MTU) = interface_mtu(socket.as_raw_fd(), iface) {
            return Err(err(format!(
                "{iface} is a classic CAN interface and cannot carry CAN-FD frames: reconfigure it with moteus's \
                 timing: {}",
                moteus_ip_link(iface)
            )));
        }
        socket.set_nonblocking(true).map_err(|e| err(format!("cannot make the CAN socket non-blocking: {e}")))?;
        Ok(SocketCanTransport { socket, name: uri.clone(), down: false, counters: TransportCounters::default() })
    }

    fn fault(&mut self, e: &io::Error) -> TransportError {
        match e.raw_os_error() {
            // ENOBUFS: the interface's transmit queue is full (the bus is busy or off).
            Some(libc::EAGAIN | libc::ENOBUFS) => TransportError::QueueFull,
            Some(libc::ENETDOWN | libc::ENODEV | libc::ENXIO) => {
                if !self.down {
                    self.down = true;
                    self.counters.disconnects = self.counters.disconnects.saturating_add(1);
                }
                TransportError::Disconnected
            }
            Some(errno) => TransportError::Os(errno),
            None => TransportError::Protocol("the CAN socket returned a frame of unexpected size"),
        }
    }

    fn working(&mut self) {
        if self.down {
            self.down = false;
            self.counters.reconnects = self.counters.reconnects.saturating_add(1);
        }
    }
}

impl Transport for SocketCanTransport {
    fn name(&self) -> &str {
        &self.name
    }

    fn send(&mut self, frame: &CanFdFrame, _now_ns: u64) -> Result<(), TransportError> {
        let out = to_socketcan(frame)?;
        loop {
            match self.socket.write_frame(&out) {
                Ok(()) => {
                    self.working();
                    self.counters.sent = self.counters.sent.saturating_add(1);
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(self.fault(&e)),
            }
        }
    }

    fn recv(&mut self, _now_ns: u64) -> Result<Option<CanFdFrame>, TransportError> {
        loop {
            match self.socket.read_frame() {
                Ok(any) => {
                    self.working();
                    match from_socketcan(&any) {
                        Some(frame) => {
                            self.counters.received = self.counters.received.saturating_add(1);
                            return Ok(Some(frame));
                        }
                        // Error frames only arrive when an error mask is set; not traffic.
                        None => self.counters.protocol_errors = self.counters.protocol_errors.saturating_add(1),
                    }
                }
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) => return Ok(None),
                    Some(libc::EINTR) => continue,
                    None if e.kind() == io::ErrorKind::InvalidData => {
                        // A read of neither CAN nor CAN-FD size: count it, keep reading.
                        self.counters.protocol_errors = self.counters.protocol_errors.saturating_add(1);
                    }
                    _ => return Err(self.fault(&e)),
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
