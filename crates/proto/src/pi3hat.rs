//! The mjbots pi3hat's SPI register map: addresses, protocol versions, register sizes, the
//! CAN port configuration and attitude layouts, and which processor serves which bus.
//!
//! What it is for: one statement of the board's wire facts (from
//! `shared/spec/pi3hat-spi.md`) that the real driver (`rtloop_io::pi3hat`) and the simulated board
//! (`rtloop_sim::pi3hat`) both read. What it must never do: allocate, perform I/O or panic on any
//! bytes (a short or malformed register reads as `None`).
//!
//! # The board
//! | processor | chip select | serves |
//! |---|---|---|
//! | 1 | SPI1 CS0 | JC1 (port 0, bus 1), JC2 (port 1, bus 2) |
//! | 2 | SPI1 CS1 | JC3 (port 0, bus 3), JC4 (port 1, bus 4) |
//! | 3 | SPI0 CS0 | JC5 (port 0, bus 5, 125 kbit/s classic CAN), the IMU |

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
        let flags = [self.fd, self.bitrate_switch, self.automatic_retransmission, self.restricted, self.bus_monitor];
        let mut out = [0u8; CAN_CONFIG_LEN];
        let bytes = self
            .nominal_bitrate
            .to_le_bytes()
            .into_iter()
            .chain(self.data_bitrate.to_le_bytes())
            .chain(flags.map(u8::from))
            // Each timing value is an i8 sent as its byte.
            .chain(self.timing.map(|t| t.to_le_bytes()[0]))
            .chain(self.cancel_all_ms.to_le_bytes());
        for (slot, b) in out.iter_mut().zip(bytes) {
            *slot = b;
        }
        out
    }

    /// Parse register bytes; `None` when too short or a bit rate is not positive.
    pub fn decode(bytes: &[u8]) -> Option<CanPortConfig> {
        let b: &[u8; CAN_CONFIG_LEN] = bytes.get(..CAN_CONFIG_LEN)?.try_into().ok()?;
        let [n0, n1, n2, n3, d0, d1, d2, d3, fd, brs, retransmit, restricted, monitor, t0, t1, t2, t3, t4, t5, t6, t7, c0, c1, c2, c3] =
            *b;
        let cfg = CanPortConfig {
            nominal_bitrate: i32::from_le_bytes([n0, n1, n2, n3]),
            data_bitrate: i32::from_le_bytes([d0, d1, d2, d3]),
            fd: fd != 0,
            bitrate_switch: brs != 0,
            automatic_retransmission: retransmit != 0,
            restricted: restricted != 0,
            bus_monitor: monitor != 0,
            timing: [t0, t1, t2, t3, t4, t5, t6, t7].map(|t| i8::from_le_bytes([t])),
            cancel_all_ms: u32::from_le_bytes([c0, c1, c2, c3]),
        };
        (cfg.nominal_bitrate > 0 && cfg.data_bitrate > 0).then_some(cfg)
    }
}

/// The health of one CAN port, from register 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CanErrorStatus {
    /// Activity: 0 synchronizing, 1 idle, 2 receiving, 3 transmitting.
    pub activity: u8,
    /// Last error code of the data phase (0 none, 7 unchanged).
    pub data_last_error: u8,
    /// Last error code (0 none, 7 unchanged).
    pub last_error: u8,
    /// A protocol exception happened.
    pub protocol_exception: bool,
    /// The controller is bus-off.
    pub bus_off: bool,
    /// An error counter reached the warning limit (96).
    pub warning: bool,
    /// The controller is error-passive.
    pub error_passive: bool,
    /// Receive error counter.
    pub rx_errors: u8,
    /// Transmit error counter.
    pub tx_errors: u8,
    /// Times the controller was reset.
    pub resets: u8,
}

impl CanErrorStatus {
    /// Parse one port's six bytes.
    pub fn decode(b: &[u8; 6]) -> Self {
        CanErrorStatus {
            activity: b[0] >> 6,
            data_last_error: (b[0] >> 3) & 7,
            last_error: b[0] & 7,
            protocol_exception: b[1] & 0b1000 != 0,
            bus_off: b[1] & 0b100 != 0,
            warning: b[1] & 0b10 != 0,
            error_passive: b[1] & 1 != 0,
            rx_errors: b[2],
            tx_errors: b[3],
            resets: b[4],
        }
    }

    /// Nothing wrong: not bus-off, passive or warning.
    pub fn is_healthy(&self) -> bool {
        !(self.bus_off || self.error_passive || self.warning)
    }
}

/// One attitude report (register 34).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ImuSample {
    /// Attitude quaternion `[w, x, y, z]`, unit norm.
    pub quaternion: [f64; 4],
    /// Body rates about x, y, z, degrees per second (bias and noise included).
    pub rate_dps: [f64; 3],
    /// Linear acceleration with gravity removed, m/s² (bias and noise included).
    pub accel_mps2: [f64; 3],
}

/// Register 34's bytes for a sample (`update` is the update counter; its low byte is sent).
pub fn encode_attitude(s: &ImuSample, update: u64) -> [u8; ATTITUDE_LEN] {
    let mut b = [0u8; ATTITUDE_LEN];
    let floats = s.quaternion.iter().chain(s.rate_dps.iter()).chain(s.accel_mps2.iter());
    // Bias, uncertainties, error count and last error stay zero: a settled filter.
    let bytes = [1u8, update.to_le_bytes()[0]].into_iter().chain(floats.flat_map(|v| (*v as f32).to_le_bytes()));
    for (slot, byte) in b.iter_mut().zip(bytes) {
        *slot = byte;
    }
    b
}

/// Parse the start of register 34 (at least [`ATTITUDE_SHORT_LEN`] bytes); `None` when short
/// or when the present bit is clear.
pub fn decode_attitude(bytes: &[u8]) -> Option<ImuSample> {
    let b = bytes.get(..ATTITUDE_SHORT_LEN)?;
    let (&present, rest) = b.split_first()?;
    if present & 1 == 0 {
        return None;
    }
    let mut f = [0.0f64; 10];
    for (slot, c) in f.iter_mut().zip(rest.get(1..)?.chunks_exact(4)) {
        *slot = f64::from(f32::from_le_bytes(c.try_into().ok()?));
    }
    let [w, x, y, z, p, q, r, ax, ay, az] = f;
    Some(ImuSample { quaternion: [w, x, y, z], rate_dps: [p, q, r], accel_mps2: [ax, ay, az] })
}

/// Why a transaction was not what the register expects. The transaction still took its SPI
/// time; a bad read returns zeros, a bad write changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

impl core::error::Error for RegisterError {}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn can_config_and_attitude_round_trip() {
        for cfg in [CanPortConfig::FD_DEFAULT, CanPortConfig::SLOW_DEFAULT] {
            let cfg = CanPortConfig { timing: [-1, 0, 1, 2, 3, 4, 5, 127], cancel_all_ms: 0x0102_0304, ..cfg };
            let bytes = cfg.encode();
            assert_eq!(&bytes[0..4], &cfg.nominal_bitrate.to_le_bytes());
            assert_eq!(bytes[13], 0xff);
            assert_eq!(&bytes[21..25], &[4, 3, 2, 1]);
            assert_eq!(CanPortConfig::decode(&bytes), Some(cfg));
            assert_eq!(CanPortConfig::decode(&bytes[..24]), None);
        }
        let s =
            ImuSample { quaternion: [1.0, 0.0, 0.5, -0.5], rate_dps: [1.0, 2.0, 3.0], accel_mps2: [-1.0, 0.25, 9.5] };
        let bytes = encode_attitude(&s, 0x1ff);
        assert_eq!((bytes[0], bytes[1]), (1, 0xff));
        assert_eq!(decode_attitude(&bytes), Some(s));
        assert_eq!(decode_attitude(&bytes[..ATTITUDE_SHORT_LEN - 1]), None);
        for bus in 1..=5 {
            let (p, port) = processor_port(bus).unwrap();
            assert_eq!(bus_of_port(p, port), Some(bus));
        }
        assert_eq!(processor_port(6), None);
    }
}
