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
//!
//! The register map itself (addresses, sizes, layouts) is `rtloop_proto::pi3hat`, which the real
//! driver reads too; this module is the board's behaviour.

use crate::bus::SimBus;
use crate::imu::{Imu, ImuSample};
use rtloop_proto::frame::{CanFdFrame, FrameFlags, MAX_DATA};
// The register map is the board's, shared with the real driver: `rtloop_proto::pi3hat`.
pub use rtloop_proto::pi3hat::{
    bus_of_port, decode_attitude, encode_attitude, processor_port, reg, CanPortConfig, RegisterError, ATTITUDE_LEN,
    ATTITUDE_SHORT_LEN, CAN_CONFIG_LEN, CAN_INTERFACE_TYPE, CAN_PROTOCOL_VERSION, ERROR_STATUS_LEN, IDENT_LEN,
    IMU_CONFIG_LEN, IMU_PROTOCOL_VERSION, RF_PROTOCOL_VERSION, RX_HEADER_LEN, RX_STATUS_SLOTS,
};

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

/// The index (0-4) of the bus behind a processor's port.
fn bus_of(processor: u8, port: u8) -> Option<usize> {
    bus_of_port(processor, port).map(|n| usize::from(n - 1))
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
