//! A simulated mjbots pi3hat at the register level: three SPI slave processors, the CAN-FD
//! buses behind them, the IMU's attitude registers, and the time every SPI transaction takes.
//!
//! What it is for: letting rtloop's pi3hat transport (and `rtloop can --transport pi3hat:sim`)
//! run the exact register traffic it would run on a Raspberry Pi, so that a cycle's time is
//! built as on the board: SPI transactions (hold times + bits at the SPI clock) + CAN-FD wire
//! time + servo turnaround. The facts come from `shared/spec/pi3hat-spi.md`.
//!
//! What it must never do: read a clock (every call is given `now_ns`), allocate after
//! construction on the register paths ([`SimPi3hat::read`], [`SimPi3hat::write`]), or panic on
//! any transaction: an unknown register, a register read that can only be written (or the
//! reverse), a short or oversized frame, a processor that does not exist — each is answered
//! as the board would (zeros, nothing sent) and counted in [`Pi3hatStats`], with a
//! [`RegisterError`] in the [`Transfer`] so the caller can see it.
//!
//! # The board
//! | processor | chip select | serves |
//! |---|---|---|
//! | 1 | SPI1 CS0 | JC1 (port 0, bus 1), JC2 (port 1, bus 2) |
//! | 2 | SPI1 CS1 | JC3 (port 0, bus 3), JC4 (port 1, bus 4) |
//! | 3 | SPI0 CS0 | JC5 (port 0, bus 5, 125 kbit/s classic CAN), the IMU |
//!
//! # Timing
//! One transaction of `n` data bytes starts when both the host asks (`now_ns`) and the SPI
//! bus is free, and takes, as the official library drives it, `cs_hold` (the gap since the
//! previous CS high) + `cs_hold` (after CS low) + 8 bits of address + `address_hold` +
//! `n × 8` bits, CS rising as soon as the last byte is clocked
//! ([`Pi3hatConfig::transaction_ns`]). Registers are sampled when the address byte and its
//! hold are done; a frame written to a transmit register reaches its CAN controller when its
//! last byte has.
//!
//! # Receive queues
//! Each processor keeps one receive queue for its ports (frames in arrival order, at most
//! [`Pi3hatConfig::rx_queue_capacity`]; beyond that a frame is lost and counted in
//! [`Pi3hatStats::rx_overflow`]); register 2 shows the sizes of the first
//! [`RX_STATUS_SLOTS`] of them, register 3 pops the oldest.

use crate::bus::SimBus;
use crate::imu::{Imu, ImuSample};
use proto::frame::{CanFdFrame, FrameFlags, MAX_DATA};

/// Protocol version the CAN processors report in register 0.
pub const CAN_PROTOCOL_VERSION: u8 = 0x04;
/// Interface type in register 1.
pub const CAN_INTERFACE_TYPE: u8 = 0x01;
/// Protocol version of the IMU registers (register 32, processor 3).
pub const IMU_PROTOCOL_VERSION: u8 = 0x20;
/// Protocol version of the RF receiver registers (register 48, processor 3).
pub const RF_PROTOCOL_VERSION: u8 = 0x11;
/// Frame sizes register 2 shows.
pub const RX_STATUS_SLOTS: usize = 6;
/// Bytes of the attitude register (34) in full: present, update time, 20 floats, 2 u32.
pub const ATTITUDE_LEN: usize = 2 + 20 * 4 + 8;
/// The attitude's short read (present, update time, quaternion, rates, accelerations).
pub const ATTITUDE_SHORT_LEN: usize = 2 + 10 * 4;
/// Bytes of a CAN port configuration (registers 7-10) at protocol version 4: the 21 bytes of
/// earlier versions, then the u32 "cancel all" time.
pub const CAN_CONFIG_LEN: usize = 25;
/// Bytes of the error status register (6): six per port.
pub const ERROR_STATUS_LEN: usize = 12;
/// Bytes of the IMU configuration (registers 35/36).
pub const IMU_CONFIG_LEN: usize = 16;
/// Bytes of register 97: a 20-byte git hash, a "dirty" byte (the firmware was built from a
/// modified tree when non-zero), then a 12-byte serial number (the firmware's `device_info.h`).
pub const IDENT_LEN: usize = 33;
/// Bytes of a received frame's header in register 3 (flags/size, 4-byte id).
pub const RX_HEADER_LEN: usize = 5;

/// Register addresses.
pub mod reg {
    /// CAN protocol version (r).
    pub const CAN_VERSION: u8 = 0;
    /// Interface type (r).
    pub const INTERFACE_TYPE: u8 = 1;
    /// Receive status: sizes of up to 6 queued frames (r).
    pub const RX_STATUS: u8 = 2;
    /// Pop one received frame (r).
    pub const RX_FRAME: u8 = 3;
    /// Send a frame with a 4-byte id (w).
    pub const TX_ID4: u8 = 4;
    /// Send a frame with a 2-byte id (w).
    pub const TX_ID2: u8 = 5;
    /// Error status of both ports (r).
    pub const ERROR_STATUS: u8 = 6;
    /// Configuration of port 0 (r).
    pub const CONFIG_PORT0: u8 = 7;
    /// Configuration of port 1 (r).
    pub const CONFIG_PORT1: u8 = 8;
    /// Write the configuration of port 0 (w).
    pub const SET_CONFIG_PORT0: u8 = 9;
    /// Write the configuration of port 1 (w).
    pub const SET_CONFIG_PORT1: u8 = 10;
    /// IMU protocol version (r, processor 3).
    pub const IMU_VERSION: u8 = 32;
    /// Raw IMU data (r, processor 3).
    pub const IMU_RAW: u8 = 33;
    /// Attitude (r, processor 3).
    pub const ATTITUDE: u8 = 34;
    /// IMU configuration (r, processor 3).
    pub const IMU_CONFIG: u8 = 35;
    /// Write the IMU configuration (w, processor 3).
    pub const SET_IMU_CONFIG: u8 = 36;
    /// RF receiver protocol version (r, processor 3).
    pub const RF_VERSION: u8 = 48;
    /// The "ready" mux: byte 0 bit 0 = CAN frames queued, byte 1 = a new attitude (r).
    pub const READY: u8 = 96;
    /// Git hash and serial number (r).
    pub const IDENT: u8 = 97;
}

/// Timing and capacities of the simulated board.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pi3hatConfig {
    /// SPI clock, Hz (10 MHz, the processors' maximum).
    pub spi_hz: u32,
    /// Hold before CS low (the gap since the previous transaction) and after it, ns (3 µs each).
    pub cs_hold_ns: u64,
    /// Hold after the address byte, ns (3 µs).
    pub address_hold_ns: u64,
    /// Frames a processor's receive queue holds.
    pub rx_queue_capacity: usize,
}

impl Default for Pi3hatConfig {
    fn default() -> Self {
        Pi3hatConfig { spi_hz: 10_000_000, cs_hold_ns: 3_000, address_hold_ns: 3_000, rx_queue_capacity: 32 }
    }
}

impl Pi3hatConfig {
    /// Time `bits` take at the SPI clock, ns.
    pub fn bits_ns(&self, bits: u64) -> u64 {
        bits * 1_000_000_000 / u64::from(self.spi_hz.max(1))
    }

    /// Time one transaction of `data_bytes` occupies the SPI bus: the gap before CS low, the
    /// hold after it, the address hold, and the address and data bits.
    pub fn transaction_ns(&self, data_bytes: usize) -> u64 {
        2 * self.cs_hold_ns + self.address_hold_ns + self.bits_ns((1 + data_bytes as u64) * 8)
    }
}

/// One CAN port's configuration, as registers 7-10 carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CanPortConfig {
    /// Nominal (arbitration) bit rate, bit/s.
    pub nominal_bitrate: i32,
    /// Data-phase bit rate, bit/s.
    pub data_bitrate: i32,
    /// Send CAN-FD frames.
    pub fd: bool,
    /// Switch to the data bit rate in FD frames.
    pub bitrate_switch: bool,
    /// Retransmit automatically.
    pub automatic_retransmission: bool,
    /// Restricted operation mode.
    pub restricted: bool,
    /// Bus monitoring mode (listen only).
    pub bus_monitor: bool,
    /// Bit timing overrides, each an i8 (-1: computed from the bit rate; any value ≥ 0 is
    /// used as given): nominal prescaler, sync jump width, time segment 1 and 2, then the
    /// same for the data phase (of an 85 MHz clock).
    pub timing: [i8; 8],
    /// After this long without a frame from the host, queued transmissions are cancelled, ms.
    pub cancel_all_ms: u32,
}

impl CanPortConfig {
    /// The high-speed ports' defaults: 1 Mbit/s, 5 Mbit/s, FD with bit rate switch.
    pub const FD_DEFAULT: CanPortConfig = CanPortConfig {
        nominal_bitrate: 1_000_000,
        data_bitrate: 5_000_000,
        fd: true,
        bitrate_switch: true,
        automatic_retransmission: true,
        restricted: false,
        bus_monitor: false,
        timing: [-1; 8],
        cancel_all_ms: 50,
    };

    /// JC5's defaults: classic CAN at 125 kbit/s.
    pub const SLOW_DEFAULT: CanPortConfig = CanPortConfig {
        nominal_bitrate: 125_000,
        data_bitrate: 125_000,
        fd: false,
        bitrate_switch: false,
        automatic_retransmission: true,
        restricted: false,
        bus_monitor: false,
        timing: [-1; 8],
        cancel_all_ms: 50,
    };

    /// The register bytes.
    pub fn encode(&self) -> [u8; CAN_CONFIG_LEN] {
        let mut out = [0u8; CAN_CONFIG_LEN];
        out[0..4].copy_from_slice(&self.nominal_bitrate.to_le_bytes());
        out[4..8].copy_from_slice(&self.data_bitrate.to_le_bytes());
        out[8] = u8::from(self.fd);
        out[9] = u8::from(self.bitrate_switch);
        out[10] = u8::from(self.automatic_retransmission);
        out[11] = u8::from(self.restricted);
        out[12] = u8::from(self.bus_monitor);
        for (slot, t) in out[13..21].iter_mut().zip(self.timing) {
            *slot = t as u8;
        }
        out[21..25].copy_from_slice(&self.cancel_all_ms.to_le_bytes());
        out
    }

    /// Parse register bytes; `None` when too short or a bit rate is not positive.
    pub fn decode(bytes: &[u8]) -> Option<CanPortConfig> {
        let b = bytes.get(..CAN_CONFIG_LEN)?;
        let i32_at = |i: usize| Some(i32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?));
        let cfg = CanPortConfig {
            nominal_bitrate: i32_at(0)?,
            data_bitrate: i32_at(4)?,
            fd: b[8] != 0,
            bitrate_switch: b[9] != 0,
            automatic_retransmission: b[10] != 0,
            restricted: b[11] != 0,
            bus_monitor: b[12] != 0,
            timing: core::array::from_fn(|i| b[13 + i] as i8),
            cancel_all_ms: u32::from_le_bytes([b[21], b[22], b[23], b[24]]),
        };
        (cfg.nominal_bitrate > 0 && cfg.data_bitrate > 0).then_some(cfg)
    }
}

/// The IMU configuration (registers 35/36).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImuMounting {
    /// Mounting roll, pitch, yaw, degrees.
    pub rpy_deg: [f32; 3],
    /// Attitude update rate, Hz: 100, 200, 400 or 1000.
    pub rate_hz: u32,
}

impl Default for ImuMounting {
    fn default() -> Self {
        ImuMounting { rpy_deg: [0.0; 3], rate_hz: 1000 }
    }
}

/// Why a transaction was not what the register expects. The transaction still took its SPI
/// time; a bad read returns zeros, a bad write changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegisterError {
    /// Processors are numbered 1 to 3.
    NoSuchProcessor(u8),
    /// Nothing answers at this address on this processor.
    UnknownRegister {
        /// Processor 1-3.
        processor: u8,
        /// The address.
        address: u8,
    },
    /// A read of a register that can only be written, or a write of one that can only be read.
    WrongDirection {
        /// Processor 1-3.
        processor: u8,
        /// The address.
        address: u8,
    },
    /// A write whose bytes do not form what the register takes.
    Malformed(&'static str),
    /// The port's transmit queue was full: the frame was not sent.
    TxQueueFull,
}

impl core::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RegisterError::NoSuchProcessor(p) => write!(f, "there is no processor {p} (the pi3hat has 1 to 3)"),
            RegisterError::UnknownRegister { processor, address } => {
                write!(f, "processor {processor} has no register {address}")
            }
            RegisterError::WrongDirection { processor, address } => {
                write!(f, "register {address} of processor {processor} cannot be accessed that way")
            }
            RegisterError::Malformed(what) => write!(f, "malformed register write: {what}"),
            RegisterError::TxQueueFull => write!(f, "CAN transmit queue full"),
        }
    }
}

impl std::error::Error for RegisterError {}

/// When a transaction ran, and whether the register took it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// CS low.
    pub start_ns: u64,
    /// When the next transaction may start (after CS high and the turnaround).
    pub end_ns: u64,
    /// What the register made of it.
    pub result: Result<(), RegisterError>,
}

/// Counters of the register traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pi3hatStats {
    /// SPI transactions.
    pub transactions: u64,
    /// Time the SPI bus was busy, ns.
    pub spi_busy_ns: u64,
    /// Frames handed to a CAN controller.
    pub frames_sent: u64,
    /// Frames popped by the host through register 3.
    pub frames_popped: u64,
    /// Frames lost because a processor's receive queue was full.
    pub rx_overflow: u64,
    /// Frames not sent because the port's transmit queue was full.
    pub tx_overflow: u64,
    /// Transactions to a register that does not exist (or a processor that does not).
    pub unknown_register: u64,
    /// Reads of write-only registers and writes of read-only ones.
    pub wrong_direction: u64,
    /// Writes whose bytes did not form what the register takes.
    pub malformed: u64,
    /// Attitude reads (register 34).
    pub attitude_reads: u64,
}

#[derive(Debug, Clone, Copy)]
struct QueuedFrame {
    frame: CanFdFrame,
    port: u8,
    arrived_ns: u64,
}

/// A fixed-capacity FIFO of received frames (allocated once).
#[derive(Debug, Clone)]
struct RxQueue {
    slots: Vec<QueuedFrame>,
    head: usize,
    len: usize,
}

impl RxQueue {
    fn new(capacity: usize) -> Self {
        let empty = QueuedFrame { frame: CanFdFrame::default(), port: 0, arrived_ns: 0 };
        RxQueue { slots: vec![empty; capacity.max(1)], head: 0, len: 0 }
    }

    fn get(&self, i: usize) -> Option<&QueuedFrame> {
        (i < self.len).then(|| &self.slots[(self.head + i) % self.slots.len()])
    }

    /// Insert keeping arrival order (frames of two ports may be collected out of order).
    fn push(&mut self, q: QueuedFrame) -> bool {
        let cap = self.slots.len();
        if self.len == cap {
            return false;
        }
        let mut i = self.len;
        while i > 0 {
            let prev = self.slots[(self.head + i - 1) % cap];
            if prev.arrived_ns <= q.arrived_ns {
                break;
            }
            self.slots[(self.head + i) % cap] = prev;
            i -= 1;
        }
        self.slots[(self.head + i) % cap] = q;
        self.len += 1;
        true
    }

    fn pop(&mut self) -> Option<QueuedFrame> {
        if self.len == 0 {
            return None;
        }
        let q = self.slots[self.head];
        self.head = (self.head + 1) % self.slots.len();
        self.len -= 1;
        Some(q)
    }
}

/// One simulated pi3hat.
#[derive(Debug, Clone)]
pub struct SimPi3hat {
    cfg: Pi3hatConfig,
    /// JC1..JC5.
    buses: [Option<SimBus>; 5],
    port_config: [CanPortConfig; 5],
    rx: [RxQueue; 3],
    imu: Option<Imu>,
    mounting: ImuMounting,
    /// Index of the attitude update last read through register 34.
    attitude_read_index: u64,
    spi_free_ns: u64,
    stats: Pi3hatStats,
    serial: [u8; 12],
}

/// The bus (connector JC1-JC5) behind port 0-1 of processor 1-3: the inverse of
/// [`processor_port`].
pub fn bus_of_port(processor: u8, port: u8) -> Option<u8> {
    match (processor, port) {
        (1, 0) => Some(1),
        (1, 1) => Some(2),
        (2, 0) => Some(3),
        (2, 1) => Some(4),
        (3, 0) => Some(5),
        _ => None,
    }
}

/// The index (0-4) of the bus behind a processor's port.
fn bus_of(processor: u8, port: u8) -> Option<usize> {
    bus_of_port(processor, port).map(|n| usize::from(n - 1))
}

/// The processor (1-3) and port (0-1) of bus 1-5.
pub fn processor_port(bus: u8) -> Option<(u8, u8)> {
    match bus {
        1 => Some((1, 0)),
        2 => Some((1, 1)),
        3 => Some((2, 0)),
        4 => Some((2, 1)),
        5 => Some((3, 0)),
        _ => None,
    }
}

impl SimPi3hat {
    /// A board with nothing cabled and no IMU answer yet (attach them with
    /// [`attach_bus`](Self::attach_bus) and [`attach_imu`](Self::attach_imu)).
    pub fn new(cfg: Pi3hatConfig) -> Self {
        let cap = cfg.rx_queue_capacity.max(1);
        let mut port_config = [CanPortConfig::FD_DEFAULT; 5];
        port_config[4] = CanPortConfig::SLOW_DEFAULT;
        SimPi3hat {
            cfg: Pi3hatConfig { rx_queue_capacity: cap, ..cfg },
            buses: [None, None, None, None, None],
            port_config,
            rx: [RxQueue::new(cap), RxQueue::new(cap), RxQueue::new(cap)],
            imu: None,
            mounting: ImuMounting::default(),
            attitude_read_index: 0,
            spi_free_ns: 0,
            stats: Pi3hatStats::default(),
            serial: *b"SIM-PI3HAT-1",
        }
    }

    /// Cable `bus` to connector JC`number` (1-5). A configuration written to its port later
    /// sets its bit rates (unless the bus was built without wire time, which it keeps).
    /// False (and nothing changes) for another number.
    pub fn attach_bus(&mut self, number: u8, bus: SimBus) -> bool {
        let Some(slot) = usize::from(number).checked_sub(1).filter(|&i| i < 5) else {
            return false;
        };
        self.buses[slot] = Some(bus);
        true
    }

    /// Give the board its IMU (processor 3).
    pub fn attach_imu(&mut self, imu: Imu) {
        self.imu = Some(imu);
    }

    /// The configuration.
    pub fn config(&self) -> &Pi3hatConfig {
        &self.cfg
    }

    /// The bus on connector JC`number`.
    pub fn bus(&self, number: u8) -> Option<&SimBus> {
        self.buses.get(usize::from(number).checked_sub(1)?)?.as_ref()
    }

    /// The bus on connector JC`number`, mutably (fault injection, servos).
    pub fn bus_mut(&mut self, number: u8) -> Option<&mut SimBus> {
        self.buses.get_mut(usize::from(number).checked_sub(1)?)?.as_mut()
    }

    /// The configuration of bus `number`'s port.
    pub fn port_config(&self, number: u8) -> Option<CanPortConfig> {
        self.port_config.get(usize::from(number).checked_sub(1)?).copied()
    }

    /// Counters so far.
    pub fn stats(&self) -> Pi3hatStats {
        self.stats
    }

    /// When the SPI bus is next free.
    pub fn spi_free_ns(&self) -> u64 {
        self.spi_free_ns
    }

    /// The earliest instant at which a read could find something new: a bus event, or now
    /// when a processor already holds frames.
    pub fn next_event_ns(&self) -> Option<u64> {
        if self.rx.iter().any(|q| q.len > 0) {
            return Some(self.spi_free_ns);
        }
        self.buses.iter().flatten().filter_map(|b| b.next_event_ns()).min()
    }

    /// Read `out.len()` bytes of register `address` of `processor` (1-3) at `now_ns`.
    /// Bytes past what the register holds read as zero.
    pub fn read(&mut self, processor: u8, address: u8, out: &mut [u8], now_ns: u64) -> Transfer {
        out.fill(0);
        let (start_ns, sample_ns, end_ns) = self.occupy(out.len(), now_ns);
        let result = self.read_register(processor, address, out, sample_ns);
        self.count(result);
        Transfer { start_ns, end_ns, result }
    }

    /// Write `data` to register `address` of `processor` (1-3) at `now_ns`.
    pub fn write(&mut self, processor: u8, address: u8, data: &[u8], now_ns: u64) -> Transfer {
        let (start_ns, sample_ns, end_ns) = self.occupy(data.len(), now_ns);
        let data_done_ns = sample_ns + self.cfg.bits_ns(data.len() as u64 * 8);
        let result = self.write_register(processor, address, data, data_done_ns);
        self.count(result);
        Transfer { start_ns, end_ns, result }
    }

    /// Reserve the SPI bus: (CS low, address clocked in, free again).
    fn occupy(&mut self, bytes: usize, now_ns: u64) -> (u64, u64, u64) {
        let start = now_ns.max(self.spi_free_ns);
        let took = self.cfg.transaction_ns(bytes);
        let end = start.saturating_add(took);
        self.spi_free_ns = end;
        self.stats.transactions += 1;
        self.stats.spi_busy_ns += took;
        let sampled = start + 2 * self.cfg.cs_hold_ns + self.cfg.bits_ns(8) + self.cfg.address_hold_ns;
        (start, sampled, end)
    }

    fn count(&mut self, result: Result<(), RegisterError>) {
        match result {
            Ok(()) => {}
            Err(RegisterError::NoSuchProcessor(_) | RegisterError::UnknownRegister { .. }) => {
                self.stats.unknown_register += 1
            }
            Err(RegisterError::WrongDirection { .. }) => self.stats.wrong_direction += 1,
            Err(RegisterError::Malformed(_)) => self.stats.malformed += 1,
            Err(RegisterError::TxQueueFull) => self.stats.tx_overflow += 1,
        }
    }

    fn read_register(&mut self, processor: u8, address: u8, out: &mut [u8], now_ns: u64) -> Result<(), RegisterError> {
        if !(1..=3).contains(&processor) {
            return Err(RegisterError::NoSuchProcessor(processor));
        }
        let imu_side = processor == 3;
        match address {
            reg::CAN_VERSION => put(out, &[CAN_PROTOCOL_VERSION]),
            reg::INTERFACE_TYPE => put(out, &[CAN_INTERFACE_TYPE]),
            reg::RX_STATUS => {
                self.collect(processor, now_ns);
                let q = &self.rx[usize::from(processor - 1)];
                for (i, slot) in out.iter_mut().take(RX_STATUS_SLOTS).enumerate() {
                    *slot = q.get(i).map_or(0, |f| (RX_HEADER_LEN + usize::from(f.frame.len)) as u8);
                }
            }
            reg::RX_FRAME => {
                self.collect(processor, now_ns);
                if let Some(q) = self.rx[usize::from(processor - 1)].pop() {
                    self.stats.frames_popped += 1;
                    let mut header = [0u8; RX_HEADER_LEN];
                    header[0] = (q.port << 7) | (q.frame.len + 1);
                    header[1..5].copy_from_slice(&q.frame.id.to_be_bytes());
                    put(out, &header);
                    if let Some(rest) = out.get_mut(RX_HEADER_LEN..) {
                        put(rest, q.frame.payload());
                    }
                }
            }
            reg::ERROR_STATUS => {
                for port in 0..2u8 {
                    let Some(b) = bus_of(processor, port).and_then(|i| self.buses[i].as_ref()) else {
                        continue;
                    };
                    let s = b.stats();
                    // Activity 1 = idle; last error codes 0 = none; the receive error count
                    // is what the CRC rejected, capped as the controller's is.
                    let rx_errors = s.frames_corrupted_injected.min(127) as u8;
                    let flags = if rx_errors >= 96 { 0b10 } else { 0 };
                    put(out.get_mut(usize::from(port) * 6..).unwrap_or(&mut []), &[0x40, flags, rx_errors, 0, 0, 0]);
                }
            }
            reg::CONFIG_PORT0 | reg::CONFIG_PORT1 => {
                let port = address - reg::CONFIG_PORT0;
                match bus_of(processor, port) {
                    Some(i) => put(out, &self.port_config[i].encode()),
                    None => return Err(RegisterError::UnknownRegister { processor, address }),
                }
            }
            reg::TX_ID4 | reg::TX_ID2 | reg::SET_CONFIG_PORT0 | reg::SET_CONFIG_PORT1 => {
                return Err(RegisterError::WrongDirection { processor, address })
            }
            reg::IMU_VERSION if imu_side => put(out, &[IMU_PROTOCOL_VERSION]),
            reg::IMU_RAW if imu_side => {
                if let Some(s) = self.attitude_at(now_ns).map(|(_, s)| s) {
                    let mut raw = [0u8; 26];
                    raw[0] = 1;
                    for (i, v) in s.rate_dps.iter().chain(s.accel_mps2.iter()).enumerate() {
                        raw[2 + 4 * i..6 + 4 * i].copy_from_slice(&(*v as f32).to_le_bytes());
                    }
                    put(out, &raw);
                }
            }
            reg::ATTITUDE if imu_side => {
                self.stats.attitude_reads += 1;
                if let Some((index, s)) = self.attitude_at(now_ns) {
                    self.attitude_read_index = index;
                    put(out, &encode_attitude(&s, index));
                }
            }
            reg::IMU_CONFIG if imu_side => {
                let mut b = [0u8; IMU_CONFIG_LEN];
                for (i, v) in self.mounting.rpy_deg.iter().enumerate() {
                    b[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
                }
                b[12..16].copy_from_slice(&self.mounting.rate_hz.to_le_bytes());
                put(out, &b);
            }
            reg::SET_IMU_CONFIG if imu_side => return Err(RegisterError::WrongDirection { processor, address }),
            reg::RF_VERSION if imu_side => put(out, &[RF_PROTOCOL_VERSION]),
            // The RF receiver's other registers: no module fitted, all zeros.
            49..=52 | 64..=79 if imu_side => {}
            reg::READY => {
                self.collect(processor, now_ns);
                let can = u8::from(self.rx[usize::from(processor - 1)].len > 0);
                let fresh = imu_side && self.attitude_at(now_ns).is_some_and(|(i, _)| i > self.attitude_read_index);
                put(out, &[can, u8::from(fresh)]);
            }
            reg::IDENT => {
                let mut b = [0u8; IDENT_LEN];
                // A stable made-up "git hash": the processor number repeated; built clean.
                b[..20].fill(0x50 + processor);
                b[20] = 0;
                b[21..].copy_from_slice(&self.serial);
                b[32] = b'0' + processor;
                put(out, &b);
            }
            _ => return Err(RegisterError::UnknownRegister { processor, address }),
        }
        Ok(())
    }

    fn write_register(&mut self, processor: u8, address: u8, data: &[u8], now_ns: u64) -> Result<(), RegisterError> {
        if !(1..=3).contains(&processor) {
            return Err(RegisterError::NoSuchProcessor(processor));
        }
        let imu_side = processor == 3;
        match address {
            reg::TX_ID4 | reg::TX_ID2 => {
                let id_len = if address == reg::TX_ID4 { 4 } else { 2 };
                let Some((&head, rest)) = data.split_first() else {
                    return Err(RegisterError::Malformed("empty frame write"));
                };
                let port = head >> 7;
                let size = usize::from(head & 0x7f);
                if size > MAX_DATA {
                    return Err(RegisterError::Malformed("payload size over 64 bytes"));
                }
                let (Some(id_bytes), Some(payload)) = (rest.get(..id_len), rest.get(id_len..id_len + size)) else {
                    return Err(RegisterError::Malformed("fewer bytes than the header's size"));
                };
                let id = id_bytes.iter().fold(0u32, |acc, &b| (acc << 8) | u32::from(b));
                if id > 0x1FFF_FFFF {
                    return Err(RegisterError::Malformed("CAN id wider than 29 bits"));
                }
                let Some(bus_index) = bus_of(processor, port) else {
                    return Err(RegisterError::Malformed("no such port on this processor"));
                };
                let cfg = self.port_config[bus_index];
                if !cfg.fd && size > 8 {
                    return Err(RegisterError::Malformed("more than 8 bytes on a classic CAN port"));
                }
                let flags =
                    FrameFlags { extended: id > 0x7FF, fd: cfg.fd, brs: cfg.fd && cfg.bitrate_switch, remote: false };
                let mut frame = CanFdFrame { id, flags, len: size as u8, ..Default::default() };
                frame.data[..size].copy_from_slice(payload);
                // Nothing cabled: the frame leaves the controller and nobody acknowledges it.
                let Some(bus) = self.buses[bus_index].as_mut() else {
                    self.stats.frames_sent += 1;
                    return Ok(());
                };
                bus.submit(&frame, now_ns).map_err(|_| RegisterError::TxQueueFull)?;
                self.stats.frames_sent += 1;
            }
            reg::SET_CONFIG_PORT0 | reg::SET_CONFIG_PORT1 => {
                let port = address - reg::SET_CONFIG_PORT0;
                let Some(i) = bus_of(processor, port) else {
                    return Err(RegisterError::UnknownRegister { processor, address });
                };
                let cfg = CanPortConfig::decode(data).ok_or(RegisterError::Malformed(
                    "CAN configuration short or with a bit rate that is not positive",
                ))?;
                self.port_config[i] = cfg;
                if let Some(b) = self.buses[i].as_mut().filter(|b| b.config().nominal_bitrate != u32::MAX) {
                    b.set_bitrates(cfg.nominal_bitrate as u32, cfg.data_bitrate as u32);
                }
            }
            reg::SET_IMU_CONFIG if imu_side => {
                let b = data.get(..IMU_CONFIG_LEN).ok_or(RegisterError::Malformed("IMU configuration short"))?;
                let f = |i: usize| f32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
                let rate = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
                let rpy = [f(0), f(4), f(8)];
                if !matches!(rate, 100 | 200 | 400 | 1000) || rpy.iter().any(|v| !v.is_finite()) {
                    return Err(RegisterError::Malformed("IMU rate not 100/200/400/1000 Hz or angle not finite"));
                }
                self.mounting = ImuMounting { rpy_deg: rpy, rate_hz: rate };
            }
            reg::CAN_VERSION
            | reg::INTERFACE_TYPE
            | reg::RX_STATUS
            | reg::RX_FRAME
            | reg::ERROR_STATUS
            | reg::CONFIG_PORT0
            | reg::CONFIG_PORT1
            | reg::READY
            | reg::IDENT => return Err(RegisterError::WrongDirection { processor, address }),
            reg::IMU_VERSION | reg::IMU_RAW | reg::ATTITUDE | reg::IMU_CONFIG | reg::RF_VERSION if imu_side => {
                return Err(RegisterError::WrongDirection { processor, address })
            }
            // RF registers that take writes: no module fitted, ignored.
            50 | 51 if imu_side => {}
            _ => return Err(RegisterError::UnknownRegister { processor, address }),
        }
        Ok(())
    }

    /// Move the frames the processor's ports received by `now_ns` into its queue.
    fn collect(&mut self, processor: u8, now_ns: u64) {
        let p = usize::from(processor - 1);
        for port in 0..2u8 {
            let Some(i) = bus_of(processor, port) else { continue };
            let Some(bus) = self.buses[i].as_mut() else { continue };
            while let Some((frame, arrived_ns)) = bus.poll_rx_stamped(now_ns) {
                if !self.rx[p].push(QueuedFrame { frame, port, arrived_ns }) {
                    self.stats.rx_overflow += 1;
                }
            }
        }
    }

    /// The latest attitude update by `now_ns`: its index (updates since time 0 at the
    /// configured rate) and the sample taken then.
    fn attitude_at(&mut self, now_ns: u64) -> Option<(u64, ImuSample)> {
        let period = 1_000_000_000 / u64::from(self.mounting.rate_hz.max(1));
        let index = now_ns / period;
        let imu = self.imu.as_mut()?;
        Some((index, imu.sample(index * period)))
    }
}

fn put(out: &mut [u8], bytes: &[u8]) {
    let n = out.len().min(bytes.len());
    out[..n].copy_from_slice(&bytes[..n]);
}

/// Register 34's bytes for a sample (`update` is the update counter; its low byte is sent).
pub fn encode_attitude(s: &ImuSample, update: u64) -> [u8; ATTITUDE_LEN] {
    let mut b = [0u8; ATTITUDE_LEN];
    b[0] = 1;
    b[1] = update as u8;
    let floats = s.quaternion.iter().chain(s.rate_dps.iter()).chain(s.accel_mps2.iter());
    for (i, v) in floats.enumerate() {
        b[2 + 4 * i..6 + 4 * i].copy_from_slice(&(*v as f32).to_le_bytes());
    }
    // Bias, uncertainties, error count and last error stay zero: a settled filter.
    b
}

/// Parse the start of register 34 (at least [`ATTITUDE_SHORT_LEN`] bytes); `None` when short
/// or when the present bit is clear.
pub fn decode_attitude(bytes: &[u8]) -> Option<ImuSample> {
    let b = bytes.get(..ATTITUDE_SHORT_LEN)?;
    if b[0] & 1 == 0 {
        return None;
    }
    let f = |i: usize| f64::from(f32::from_le_bytes([b[2 + 4 * i], b[3 + 4 * i], b[4 + 4 * i], b[5 + 4 * i]]));
    Some(ImuSample {
        quaternion: [f(0), f(1), f(2), f(3)],
        rate_dps: [f(4), f(5), f(6)],
        accel_mps2: [f(7), f(8), f(9)],
    })
}
