//! The mjbots pi3hat as a set of buses for the cycle: five CAN connectors (JC1-JC5) on three
//! SPI processors, and the IMU's attitude, all through one [`Pi3hat`] device.
//!
//! Every bus of a robot that names the same pi3hat is a [`Pi3hatPort`] sharing one device (and
//! the cycle's attitude comes from its [`Pi3hatImu`]), so one cycle drives the board as the
//! official library's `Cycle` does (`shared/spec/pi3hat-spi.md`):
//! * frames go out through register 5 (2-byte id, whenever the id fits) or 4 (4-byte id), one
//!   per bus per pass in the library's bus order 1, 3, 5, 2, 4 ([`Transport::write_rank`]), so
//!   both CAN processors start transmitting after the first two transactions;
//! * the attitude (register 34, the 42-byte short read) is read while replies are on the
//!   wires, after polling the "ready" register 96 when a fresh one is asked for;
//! * replies are read through the receive status (register 2) and one pop (register 3) per
//!   frame it shows, once per processor per polling round, and sorted to their ports;
//! * at start the protocol versions are checked (0x04 for CAN, 0x20 for the IMU) and each used
//!   port's CAN configuration is read (registers 7/8), written when it differs (9/10) and read back;
//! * every [`ERROR_STATUS_PERIOD_NS`] each used processor's error status (register 6) is read
//!   and surfaces in [`TransportCounters::can_status`].
//!
//! Must never: allocate in `send`/`recv`/`read` (queues are fixed arrays), hand a frame to the
//! wrong bus (the port bit of each popped frame decides), or panic on what a processor sends
//! (a size byte that does not fit is a counted protocol error and the rest of that poll is
//! skipped). The device sits behind a mutex only so that its ports can be separate
//! transports; only the cycle's thread ever takes it.

use crate::spi::{ChipSelect, Pi3hatSpi, SpiError, SpiTiming};
use crate::transport::{ImuSource, OpenError, Transport, TransportCounters, TransportError};
pub use rtloop_proto::pi3hat::CanErrorStatus;
use rtloop_proto::pi3hat::{self as board, reg, CanPortConfig, ImuSample};
use rtloop_proto::CanFdFrame;
use std::sync::{Arc, Mutex, MutexGuard};

const EMPTY_FRAME: CanFdFrame = CanFdFrame {
    id: 0,
    len: 0,
    data: [0; 64],
    flags: rtloop_proto::frame::FrameFlags { extended: false, fd: false, brs: false, remote: false },
};

/// How often each processor's error status is read, ns (10 Hz).
pub const ERROR_STATUS_PERIOD_NS: u64 = 100_000_000;

/// Frames kept per port between polls.
const PORT_QUEUE: usize = 16;

/// Reads of the "ready" register before giving up on a fresh attitude (each takes an SPI
/// transaction, ~16 µs at 10 MHz: about 3 ms in all, three updates of a 1 kHz IMU).
const ATTITUDE_READY_TRIES: usize = 200;

/// The order the official library writes buses in: both CAN processors start early.
const WRITE_ORDER: [u8; 5] = [1, 3, 5, 2, 4];

/// How to bring the board up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pi3hatOptions {
    /// SPI clock and holds.
    pub timing: SpiTiming,
    /// The configuration written to each used high-speed port (JC1-JC4) at start.
    pub can: CanPortConfig,
    /// The configuration written to JC5 when it is used.
    pub slow_can: CanPortConfig,
    /// Per bus (index bus - 1): a configuration that replaces `can` / `slow_can` for that
    /// port (`rtloop can --can-config`).
    pub bus_can: [Option<CanPortConfig>; 5],
    /// Read the attitude every cycle.
    pub attitude: bool,
    /// Poll the "ready" register until a fresh attitude is there before reading it.
    pub wait_for_attitude: bool,
    /// The shortest servo turnaround assumed when deciding a reply cannot be back yet, ns
    /// (20 µs; a moteus takes 30-50 µs). Larger saves SPI polls, too large delays replies.
    pub min_turnaround_ns: u64,
}

impl Default for Pi3hatOptions {
    fn default() -> Self {
        Pi3hatOptions {
            timing: SpiTiming::default(),
            can: CanPortConfig::FD_DEFAULT,
            slow_can: CanPortConfig::SLOW_DEFAULT,
            bus_can: [None; 5],
            attitude: true,
            wait_for_attitude: false,
            min_turnaround_ns: 20_000,
        }
    }
}

impl Pi3hatOptions {
    /// The configuration bus `bus` (1-5) is given at start: its `bus_can` entry, else
    /// `slow_can` for JC5 and `can` for the others.
    pub fn port_config(&self, bus: u8) -> CanPortConfig {
        let fallback = if bus == 5 { self.slow_can } else { self.can };
        usize::from(bus).checked_sub(1).and_then(|i| self.bus_can.get(i).copied().flatten()).unwrap_or(fallback)
    }
}

/// One processor's identity, from registers 0, 1, 32 and 97.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessorInfo {
    /// 1-3.
    pub processor: u8,
    /// CAN protocol version (0x04 expected).
    pub can_version: u8,
    /// Interface type (0x01).
    pub interface_type: u8,
    /// IMU protocol version (processor 3 only; 0x20 expected).
    pub imu_version: Option<u8>,
    /// Git hash of the firmware.
    pub git_hash: [u8; 20],
    /// The firmware was built from a modified tree.
    pub dirty: bool,
    /// Serial number.
    pub serial: [u8; 12],
}

#[derive(Clone, Copy)]
struct PortQueue {
    frames: [CanFdFrame; PORT_QUEUE],
    head: usize,
    len: usize,
}

impl PortQueue {
    const EMPTY: PortQueue = PortQueue { frames: [EMPTY_FRAME; PORT_QUEUE], head: 0, len: 0 };

    fn push(&mut self, f: CanFdFrame) -> bool {
        if self.len == PORT_QUEUE {
            return false;
        }
        self.frames[(self.head + self.len) % PORT_QUEUE] = f;
        self.len += 1;
        true
    }

    fn pop(&mut self) -> Option<CanFdFrame> {
        if self.len == 0 {
            return None;
        }
        let f = self.frames[self.head];
        self.head = (self.head + 1) % PORT_QUEUE;
        self.len -= 1;
        Some(f)
    }
}

/// One pi3hat: the SPI carrier and what the ports share.
pub struct Pi3hat {
    spi: Box<dyn Pi3hatSpi>,
    options: Pi3hatOptions,
    /// Received frames per bus (index bus - 1), sorted from the processors' queues.
    ports: [PortQueue; 5],
    /// The `now_ns` of each processor's latest poll: one poll per processor per round.
    polled_at: [Option<u64>; 3],
    /// Per bus: when its CAN wire is free at the earliest (commands written so far).
    wire_free_ns: [u64; 5],
    /// Per bus: the earliest instants the replies still owed can be back, oldest first.
    due: [DueQueue; 5],
    status_at: [Option<u64>; 3],
    counters: [TransportCounters; 5],
}

/// Why [`Pi3hat::open`] brought no board up. `name` is the SPI device's name.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Pi3hatOpenError {
    /// A bus number outside the board's connectors JC1-JC5.
    #[error("bus {bus} cannot be on a pi3hat: its connectors are JC1-JC5, so give bus numbers 1 to 5")]
    NoSuchBus {
        /// The bus given.
        bus: u8,
    },
    /// A transfer to `part` (a processor, the IMU, a bus's configuration) failed.
    #[error("pi3hat:{name} {part}: {source}")]
    Spi {
        /// The SPI device.
        name: String,
        /// What was being read or written: `processor 1`, `IMU`, `bus 2`.
        part: String,
        /// Why.
        source: SpiError,
    },
    /// A CAN processor speaks another protocol version.
    #[error(
        "pi3hat:{name} processor {processor} speaks CAN protocol version {version:#04x}, not {:#04x}: update the pi3hat's firmware (or check the SPI wiring if it reads 0x00 or 0xff)",
        board::CAN_PROTOCOL_VERSION
    )]
    CanVersion {
        /// The SPI device.
        name: String,
        /// The processor (1-3).
        processor: u8,
        /// The version it reports.
        version: u8,
    },
    /// The IMU speaks another protocol version.
    #[error(
        "pi3hat:{name} IMU protocol version is {version:#04x}, not {:#04x}: update the pi3hat's firmware",
        board::IMU_PROTOCOL_VERSION
    )]
    ImuVersion {
        /// The SPI device.
        name: String,
        /// The version it reports.
        version: u8,
    },
    /// A bus read back another CAN configuration than was written.
    #[error(
        "pi3hat:{name} bus {bus} did not take its CAN configuration (read back {read_back}): check the firmware version and the bit rates"
    )]
    ConfigNotTaken {
        /// The SPI device.
        name: String,
        /// The bus.
        bus: u8,
        /// What was read back (its Debug form, as before).
        read_back: String,
    },
}

impl Pi3hat {
    /// Bring up a board on `spi` for `buses` (1-5): check the versions, write and read back
    /// each used port's configuration, and check the IMU when the options read it.
    pub fn open(spi: Box<dyn Pi3hatSpi>, buses: &[u8], options: Pi3hatOptions) -> Result<Self, Pi3hatOpenError> {
        let mut used = 0u8;
        for &b in buses {
            if !(1..=5).contains(&b) {
                return Err(Pi3hatOpenError::NoSuchBus { bus: b });
            }
            used |= 1 << (b - 1);
        }
        let mut hat = Pi3hat {
            spi,
            options,
            ports: [PortQueue::EMPTY; 5],
            polled_at: [None; 3],
            wire_free_ns: [0; 5],
            due: [DueQueue::EMPTY; 5],
            status_at: [None; 3],
            counters: [TransportCounters::default(); 5],
        };
        let name = hat.spi.name().to_string();
        let mut processors = 0u8;
        for b in 1..=5u8 {
            if used & (1 << (b - 1)) != 0 {
                processors |= 1 << (board::processor_port(b).map_or(1, |(p, _)| p) - 1);
            }
        }
        if options.attitude {
            processors |= 1 << 2;
        }
        for p in 1..=3u8 {
            if processors & (1 << (p - 1)) == 0 {
                continue;
            }
            let spi_error =
                |source| Pi3hatOpenError::Spi { name: name.clone(), part: format!("processor {p}"), source };
            let v = hat.read_byte(p, reg::CAN_VERSION).map_err(spi_error)?;
            if v != board::CAN_PROTOCOL_VERSION {
                return Err(Pi3hatOpenError::CanVersion { name, processor: p, version: v });
            }
        }
        if options.attitude {
            let v = hat.read_byte(3, reg::IMU_VERSION).map_err(|source| Pi3hatOpenError::Spi {
                name: name.clone(),
                part: "IMU".into(),
                source,
            })?;
            if v != board::IMU_PROTOCOL_VERSION {
                return Err(Pi3hatOpenError::ImuVersion { name, version: v });
            }
        }
        for b in 1..=5u8 {
            if used & (1 << (b - 1)) == 0 {
                continue;
            }
            let want = options.port_config(b);
            // As the official library does: write only what differs (a rewrite resets the
            // controller), then read it back.
            let spi_error = |source| Pi3hatOpenError::Spi { name: name.clone(), part: format!("bus {b}"), source };
            let before = hat.can_config(b).map_err(spi_error)?;
            if before == Some(want) {
                continue;
            }
            hat.write_can_config(b, &want).map_err(spi_error)?;
            let got = hat.can_config(b).map_err(spi_error)?;
            if got != Some(want) {
                return Err(Pi3hatOpenError::ConfigNotTaken { name, bus: b, read_back: format!("{got:?}") });
            }
        }
        Ok(hat)
    }

    fn read_byte(&mut self, processor: u8, address: u8) -> Result<u8, SpiError> {
        let mut b = [0u8; 1];
        self.read(processor, address, &mut b)?;
        Ok(b[0])
    }

    fn read(&mut self, processor: u8, address: u8, out: &mut [u8]) -> Result<(), SpiError> {
        let cs = ChipSelect::of_processor(processor).ok_or(SpiError::NoSuchProcessor(processor))?;
        self.spi.read(cs, address, out)
    }

    fn write(&mut self, processor: u8, address: u8, data: &[u8]) -> Result<(), SpiError> {
        let cs = ChipSelect::of_processor(processor).ok_or(SpiError::NoSuchProcessor(processor))?;
        self.spi.write(cs, address, data)
    }

    /// The SPI carrier's name (`spidev`, `mem`, `sim`).
    pub fn carrier(&self) -> &str {
        self.spi.name()
    }

    /// The SPI clock and holds.
    pub fn timing(&self) -> SpiTiming {
        self.spi.timing()
    }

    /// Write bus `bus`'s CAN configuration (registers 9/10).
    pub fn write_can_config(&mut self, bus: u8, cfg: &CanPortConfig) -> Result<(), SpiError> {
        let (p, port) = board::processor_port(bus).ok_or(SpiError::NoSuchBus(bus))?;
        self.write(p, reg::SET_CONFIG_PORT0 + port, &cfg.encode())
    }

    /// Read bus `bus`'s CAN configuration (registers 7/8); `None` when the bytes make no sense.
    pub fn can_config(&mut self, bus: u8) -> Result<Option<CanPortConfig>, SpiError> {
        let (p, port) = board::processor_port(bus).ok_or(SpiError::NoSuchBus(bus))?;
        let mut b = [0u8; board::CAN_CONFIG_LEN];
        self.read(p, reg::CONFIG_PORT0 + port, &mut b)?;
        Ok(CanPortConfig::decode(&b))
    }

    /// Read the identity of processor 1-3.
    pub fn processor_info(&mut self, processor: u8) -> Result<ProcessorInfo, SpiError> {
        let can_version = self.read_byte(processor, reg::CAN_VERSION)?;
        let interface_type = self.read_byte(processor, reg::INTERFACE_TYPE)?;
        let imu_version = if processor == 3 { Some(self.read_byte(3, reg::IMU_VERSION)?) } else { None };
        let mut ident = [0u8; board::IDENT_LEN];
        self.read(processor, reg::IDENT, &mut ident)?;
        let mut git_hash = [0u8; 20];
        git_hash.copy_from_slice(&ident[..20]);
        let dirty = ident[20] != 0;
        let mut serial = [0u8; 12];
        serial.copy_from_slice(&ident[21..]);
        Ok(ProcessorInfo { processor, can_version, interface_type, imu_version, git_hash, dirty, serial })
    }

    /// Read the error status of bus `bus`'s port (register 6 of its processor).
    pub fn error_status(&mut self, bus: u8) -> Result<CanErrorStatus, SpiError> {
        let (p, _) = board::processor_port(bus).ok_or(SpiError::NoSuchBus(bus))?;
        self.refresh_status(p)?;
        Ok(self.counters[usize::from(bus - 1)].can_status.unwrap_or_default())
    }

    fn refresh_status(&mut self, processor: u8) -> Result<(), SpiError> {
        let mut b = [0u8; board::ERROR_STATUS_LEN];
        self.read(processor, reg::ERROR_STATUS, &mut b)?;
        for port in 0..2u8 {
            let Some(bus) = board::bus_of_port(processor, port) else { continue };
            let mut six = [0u8; 6];
            six.copy_from_slice(&b[usize::from(port) * 6..usize::from(port) * 6 + 6]);
            self.counters[usize::from(bus - 1)].can_status = Some(CanErrorStatus::decode(&six));
        }
        Ok(())
    }

    /// Send `frame` on bus 1-5: register 5 when the id fits in two bytes, else 4. Padding
    /// the board would add back itself (trailing 0x50 bytes that leave the frame's CAN-FD
    /// length unchanged) is not clocked over SPI: the wire sees the same bytes, sooner.
    pub fn send(&mut self, bus: u8, frame: &CanFdFrame) -> Result<(), TransportError> {
        self.send_at(bus, frame, None)
    }

    /// [`send`](Self::send), noting at `now_ns` when the reply (if the frame asks for one,
    /// by the moteus reply bit) can be back at the earliest, so that polling waits for it.
    fn send_at(&mut self, bus: u8, frame: &CanFdFrame, now_ns: Option<u64>) -> Result<(), TransportError> {
        let (p, port) = board::processor_port(bus).ok_or(TransportError::Protocol("no such pi3hat bus"))?;
        let len = unpadded_len(frame);
        let mut buf = [0u8; 5 + 64];
        buf[0] = (port << 7) | len;
        let (address, id_len) = if frame.id <= 0xffff { (reg::TX_ID2, 2) } else { (reg::TX_ID4, 4) };
        buf[1..1 + id_len].copy_from_slice(&frame.id.to_be_bytes()[4 - id_len..]);
        let n = 1 + id_len + usize::from(len);
        buf[1 + id_len..n].copy_from_slice(&frame.data[..usize::from(len)]);
        let slot = usize::from(bus - 1);
        match self.write(p, address, &buf[..n]) {
            Ok(()) => {
                self.counters[slot].sent += 1;
                if let Some(now) = now_ns {
                    // A simulated board running ahead of the clock started the write later
                    // than `now`: it says when the frame reached the board.
                    let written =
                        (now + self.spi.timing().transaction_ns(n)).max(self.spi.busy_until_ns().unwrap_or(0));
                    self.note_due(slot, frame, written);
                }
                Ok(())
            }
            Err(SpiError::Register(board::RegisterError::TxQueueFull)) => Err(TransportError::QueueFull),
            Err(e) => Err(self.fail(slot, e)),
        }
    }

    /// A command reached bus `slot`'s controller at `at_ns` (at the earliest): its wire time
    /// and, when it asks for a reply, the shortest reply's, at the configured bit rates
    /// without stuffing and with the options' minimum turnaround, give when the reply can
    /// be back at the earliest. A lower bound: polling never starts after a reply arrived.
    fn note_due(&mut self, slot: usize, frame: &CanFdFrame, at_ns: u64) {
        let cfg = self.options.port_config(slot as u8 + 1);
        let start = at_ns.max(self.wire_free_ns[slot]);
        let end = start + min_frame_time_ns(frame, &cfg);
        self.wire_free_ns[slot] = end;
        if rtloop_proto::frame::ArbitrationId::parse(frame.id).reply_required {
            let reply = CanFdFrame { id: 0x100, len: 8, flags: frame.flags, ..EMPTY_FRAME };
            self.due[slot].push(end + self.options.min_turnaround_ns + min_frame_time_ns(&reply, &cfg));
        }
    }

    /// The earliest instant a poll of processor `p` can find a reply owed to it; `None`
    /// when nothing is owed.
    fn processor_due_ns(&self, p: u8) -> Option<u64> {
        (1..=5u8)
            .filter(|&b| board::processor_port(b).is_some_and(|(q, _)| q == p))
            .filter_map(|b| self.due[usize::from(b - 1)].first())
            .min()
    }

    fn fail(&mut self, slot: usize, e: SpiError) -> TransportError {
        match e {
            SpiError::Os(errno) => TransportError::Os(errno),
            SpiError::TooLong(_) => TransportError::Protocol("SPI transfer too long"),
            SpiError::NoSuchBus(_) | SpiError::NoSuchProcessor(_) => TransportError::Protocol("no such pi3hat bus"),
            SpiError::Register(_) => {
                self.counters[slot].protocol_errors += 1;
                TransportError::Protocol("the pi3hat refused a register transaction")
            }
        }
    }

    /// The next frame received on bus 1-5. Polls the bus's processor (register 2, then
    /// register 3 once per frame shown) when nothing is queued for the bus and the processor
    /// was not polled yet at this `now_ns`.
    pub fn recv(&mut self, bus: u8, now_ns: u64) -> Result<Option<CanFdFrame>, TransportError> {
        let slot = usize::from(bus.clamp(1, 5) - 1);
        if let Some(f) = self.ports[slot].pop() {
            return Ok(Some(f));
        }
        let (p, _) = board::processor_port(bus).ok_or(TransportError::Protocol("no such pi3hat bus"))?;
        let pi = usize::from(p - 1);
        if self.polled_at[pi] == Some(now_ns) {
            return Ok(None);
        }
        // Nothing can be back yet: a poll would only cost SPI time.
        if self.processor_due_ns(p).is_some_and(|due| now_ns < due) {
            return Ok(None);
        }
        self.polled_at[pi] = Some(now_ns);
        self.poll(p).map_err(|e| self.fail(slot, e))?;
        if self.due.iter().all(|d| d.len == 0) {
            // Every reply owed is in, so the cycle is about to end: a simulated board that
            // ran ahead of a real clock is caught up with, so the cycle ends when its SPI does.
            self.spi.settle();
        }
        Ok(self.ports[slot].pop())
    }

    /// Move every frame processor `p` shows into the port queues.
    fn poll(&mut self, p: u8) -> Result<(), SpiError> {
        // A queue deeper than the status shows takes more rounds; bound them.
        for _ in 0..4 {
            let mut sizes = [0u8; board::RX_STATUS_SLOTS];
            self.read(p, reg::RX_STATUS, &mut sizes)?;
            let shown = sizes.iter().take_while(|&&s| s != 0).count();
            for &size in &sizes[..shown] {
                let size = usize::from(size);
                let mut buf = [0u8; board::RX_HEADER_LEN + 64];
                let Some(dst) = buf.get_mut(..size).filter(|_| size >= board::RX_HEADER_LEN) else {
                    self.counters[self.first_bus_of(p)].protocol_errors += 1;
                    return Ok(());
                };
                self.read(p, reg::RX_FRAME, dst)?;
                self.take_frame(p, &buf[..size]);
            }
            if shown < board::RX_STATUS_SLOTS {
                break;
            }
        }
        Ok(())
    }

    fn first_bus_of(&self, p: u8) -> usize {
        usize::from((p - 1) * 2).min(4)
    }

    /// File one popped frame (header + payload) under its port's bus.
    fn take_frame(&mut self, p: u8, bytes: &[u8]) {
        let head = bytes[0];
        if head == 0 {
            return; // the queue emptied between the status and the pop
        }
        let port = head >> 7;
        let payload_len = usize::from(head & 0x7f).saturating_sub(1);
        let bus = board::bus_of_port(p, port);
        let (Some(bus), Some(payload)) = (bus, bytes.get(board::RX_HEADER_LEN..board::RX_HEADER_LEN + payload_len))
        else {
            self.counters[self.first_bus_of(p)].protocol_errors += 1;
            return;
        };
        let id = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
        let slot = usize::from(bus - 1);
        match CanFdFrame::new(id & 0x1FFF_FFFF, payload) {
            Ok(frame) => {
                self.counters[slot].received += 1;
                self.due[slot].pop();
                if !self.ports[slot].push(frame) {
                    self.counters[slot].protocol_errors += 1;
                }
            }
            Err(_) => self.counters[slot].protocol_errors += 1,
        }
    }

    /// Read the attitude into `out` (after waiting for a fresh one when the options ask).
    /// `Ok(false)` when the IMU reports none.
    pub fn read_attitude(&mut self, out: &mut ImuSample) -> Result<bool, SpiError> {
        if self.options.wait_for_attitude {
            let mut ready = [0u8; 2];
            for _ in 0..ATTITUDE_READY_TRIES {
                self.read(3, reg::READY, &mut ready)?;
                if ready[1] == 1 {
                    break;
                }
            }
        }
        let mut b = [0u8; board::ATTITUDE_SHORT_LEN];
        self.read(3, reg::ATTITUDE, &mut b)?;
        match board::decode_attitude(&b) {
            Some(s) => {
                *out = s;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Once per cycle per bus (after the writes): read the error status of the bus's
    /// processor when it is due.
    fn maybe_refresh_status(&mut self, bus: u8, now_ns: u64) -> Result<(), SpiError> {
        let Some((p, _)) = board::processor_port(bus) else { return Ok(()) };
        let pi = usize::from(p - 1);
        let due = self.status_at[pi].is_none_or(|t| now_ns.saturating_sub(t) >= ERROR_STATUS_PERIOD_NS);
        if due {
            self.status_at[pi] = Some(now_ns);
            self.refresh_status(p)?;
        }
        Ok(())
    }
}

/// The payload length to send over SPI: `frame.len` without trailing padding bytes that the
/// board's own padding to the same CAN-FD length restores.
pub fn unpadded_len(frame: &CanFdFrame) -> u8 {
    let len = usize::from(frame.len.min(64));
    let Some(dlc_len) = rtloop_proto::frame::round_up_dlc(len) else { return len as u8 };
    let payload = frame.payload();
    let mut n = len;
    while n > 0
        && payload[n - 1] == rtloop_proto::frame::PAD_BYTE
        && rtloop_proto::frame::round_up_dlc(n - 1) == Some(dlc_len)
    {
        n -= 1;
    }
    n as u8
}

/// A frame's wire time without stuffing (a lower bound), at a port's bit rates.
fn min_frame_time_ns(frame: &CanFdFrame, cfg: &CanPortConfig) -> u64 {
    let len = u64::from(frame.len.min(64));
    let header: u64 = if frame.id > 0x7ff { 38 } else { 19 };
    // Arbitration, control, CRC delimiter, ACK, EOF and intermission at the nominal rate.
    let nominal_bits = header + 2 + 10;
    let crc: u64 = if len > 16 { 21 } else { 17 };
    let data_bits = 5 + len * 8 + crc;
    let nominal = u64::from(cfg.nominal_bitrate.max(1) as u32);
    let data = if cfg.fd && cfg.bitrate_switch { u64::from(cfg.data_bitrate.max(1) as u32) } else { nominal };
    nominal_bits * 1_000_000_000 / nominal + data_bits * 1_000_000_000 / data
}

/// Reply deadlines owed on one bus, oldest first (fixed capacity; beyond it the newest are
/// forgotten, which only makes polling start sooner).
#[derive(Clone, Copy)]
struct DueQueue {
    at: [u64; PORT_QUEUE],
    head: usize,
    len: usize,
}

impl DueQueue {
    const EMPTY: DueQueue = DueQueue { at: [0; PORT_QUEUE], head: 0, len: 0 };

    fn push(&mut self, t: u64) {
        if self.len < PORT_QUEUE {
            self.at[(self.head + self.len) % PORT_QUEUE] = t;
            self.len += 1;
        }
    }

    fn pop(&mut self) {
        if self.len > 0 {
            self.head = (self.head + 1) % PORT_QUEUE;
            self.len -= 1;
        }
    }

    fn first(&self) -> Option<u64> {
        (self.len > 0).then(|| self.at[self.head])
    }
}

/// A pi3hat shared by its ports and its IMU.
pub type SharedPi3hat = Arc<Mutex<Pi3hat>>;

fn lock(dev: &SharedPi3hat) -> MutexGuard<'_, Pi3hat> {
    // A panic while holding it cannot leave the queues inconsistent (plain data): keep going.
    dev.lock().unwrap_or_else(|p| p.into_inner())
}

/// One connector of a shared pi3hat as a [`Transport`].
pub struct Pi3hatPort {
    dev: SharedPi3hat,
    bus: u8,
    name: String,
}

impl Pi3hatPort {
    /// Bus `bus` (1-5) of `dev`.
    pub fn new(dev: SharedPi3hat, bus: u8) -> Self {
        let name = format!("pi3hat:{}:JC{bus}", lock(&dev).carrier());
        Pi3hatPort { dev, bus, name }
    }

    /// The shared device.
    pub fn device(&self) -> &SharedPi3hat {
        &self.dev
    }

    /// Its bus number (connector JC N).
    pub fn bus(&self) -> u8 {
        self.bus
    }
}

impl Transport for Pi3hatPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn send(&mut self, frame: &CanFdFrame, now_ns: u64) -> Result<(), TransportError> {
        lock(&self.dev).send_at(self.bus, frame, Some(now_ns))
    }

    fn recv(&mut self, now_ns: u64) -> Result<Option<CanFdFrame>, TransportError> {
        lock(&self.dev).recv(self.bus, now_ns)
    }

    /// When the next reply owed to this bus's processor can be back (at once when frames
    /// wait in the port's queue or a reply is overdue: every poll is an SPI transaction that
    /// takes its own time, so polling back to back is the busy polling of the official
    /// library).
    fn ready_hint_ns(&self) -> Option<u64> {
        let dev = lock(&self.dev);
        let slot = usize::from(self.bus - 1);
        if dev.ports[slot].len > 0 {
            return Some(0);
        }
        let p = board::processor_port(self.bus).map_or(1, |(p, _)| p);
        Some(dev.processor_due_ns(p).unwrap_or(0))
    }

    fn flush(&mut self, now_ns: u64) -> Result<(), TransportError> {
        let mut dev = lock(&self.dev);
        let slot = usize::from(self.bus - 1);
        dev.maybe_refresh_status(self.bus, now_ns).map_err(|e| dev.fail(slot, e))
    }

    fn counters(&self) -> TransportCounters {
        lock(&self.dev).counters[usize::from(self.bus - 1)]
    }

    fn reads_cost_time(&self) -> bool {
        true
    }

    fn write_rank(&self) -> u32 {
        WRITE_ORDER.iter().position(|&b| b == self.bus).unwrap_or(5) as u32
    }
}

/// The attitude of a shared pi3hat as the cycle's [`ImuSource`].
pub struct Pi3hatImu {
    dev: SharedPi3hat,
}

impl Pi3hatImu {
    /// The IMU of `dev`.
    pub fn new(dev: SharedPi3hat) -> Self {
        Pi3hatImu { dev }
    }
}

impl ImuSource for Pi3hatImu {
    fn read(&mut self, _now_ns: u64, out: &mut ImuSample) -> Result<bool, TransportError> {
        let mut dev = lock(&self.dev);
        dev.read_attitude(out).map_err(|e| dev.fail(4, e))
    }
}

/// Open a pi3hat on `spi` for `buses` and split it into its ports (in the order of `buses`)
/// and its IMU (when `options.attitude`).
pub fn open_shared(
    spi: Box<dyn Pi3hatSpi>,
    buses: &[u8],
    options: Pi3hatOptions,
    uri: &str,
) -> Result<(Vec<Pi3hatPort>, Option<Pi3hatImu>), OpenError> {
    let hat =
        Pi3hat::open(spi, buses, options).map_err(|e| OpenError { uri: uri.to_string(), message: e.to_string() })?;
    let dev = Arc::new(Mutex::new(hat));
    let ports = buses.iter().map(|&b| Pi3hatPort::new(dev.clone(), b)).collect();
    let imu = options.attitude.then(|| Pi3hatImu::new(dev));
    Ok((ports, imu))
}
