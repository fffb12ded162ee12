//! Reaching the pi3hat's processors over SPI: one register read or write on one chip select,
//! with the hold times the processors need, whatever carries it.
//!
//! Two hardware carriers implement [`Pi3hatSpi`] here:
//! * [`spidev::SpidevSpi`] — Linux's `spidev` driver (`/dev/spidev0.0`, `/dev/spidev1.0`,
//!   `/dev/spidev1.1`, `SPI_IOC_MESSAGE`); no root needed;
//! * [`bcm::BcmSpi`] — the BCM283x SPI0 / AUX-SPI1 and GPIO registers through `/dev/mem`, chip
//!   select by GPIO and busy-waits between phases, the way the official library reaches
//!   10 MHz with microsecond gaps (root; Pi 3 and Pi 4);
//!
//! and the simulated pi3hat implements it too, outside this crate (rtloop-simrobot's
//! `SimSpi`): the driver above it ([`crate::pi3hat`]) cannot tell.
//!
//! Must never: allocate in `read`/`write`, or hide a failed transfer (every failure is a
//! [`SpiError`]); the hardware carriers open nothing until asked and say in one sentence why
//! a device cannot be used.

pub mod bcm;
pub mod spidev;

use std::fmt;

/// The data part of one transaction, for the hardware carriers.
pub(crate) enum Data<'a> {
    /// Clock out zeros, keep what comes back.
    Read(&'a mut [u8]),
    /// Clock out these bytes.
    Write(&'a [u8]),
}

impl Data<'_> {
    /// Bytes clocked after the address.
    pub(crate) fn len(&self) -> usize {
        match self {
            Data::Read(out) => out.len(),
            Data::Write(bytes) => bytes.len(),
        }
    }
}

/// The three chip selects the pi3hat's processors sit on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChipSelect {
    /// SPI1 (AUX) CS0: processor 1, CAN JC1 / JC2.
    Spi1Cs0,
    /// SPI1 (AUX) CS1: processor 2, CAN JC3 / JC4.
    Spi1Cs1,
    /// SPI0 CS0: processor 3, CAN JC5, the IMU, the RF receiver.
    Spi0Cs0,
}

impl ChipSelect {
    /// The chip select of processor 1-3.
    pub fn of_processor(processor: u8) -> Option<ChipSelect> {
        match processor {
            1 => Some(ChipSelect::Spi1Cs0),
            2 => Some(ChipSelect::Spi1Cs1),
            3 => Some(ChipSelect::Spi0Cs0),
            _ => None,
        }
    }

    /// The processor (1-3) behind this chip select.
    pub fn processor(self) -> u8 {
        match self {
            ChipSelect::Spi1Cs0 => 1,
            ChipSelect::Spi1Cs1 => 2,
            ChipSelect::Spi0Cs0 => 3,
        }
    }

    /// The spidev device Linux names it with.
    pub fn spidev_path(self) -> &'static str {
        match self {
            ChipSelect::Spi1Cs0 => "/dev/spidev1.0",
            ChipSelect::Spi1Cs1 => "/dev/spidev1.1",
            ChipSelect::Spi0Cs0 => "/dev/spidev0.0",
        }
    }
}

/// SPI clock and hold times (the pi3hat's: at most 10 MHz, at least 3 µs around the address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpiTiming {
    /// SPI clock, Hz.
    pub speed_hz: u32,
    /// Gap before CS low (since the previous transaction) and hold after it, ns.
    pub cs_hold_ns: u32,
    /// Hold after the address byte, ns.
    pub address_hold_ns: u32,
}

impl Default for SpiTiming {
    fn default() -> Self {
        SpiTiming { speed_hz: 10_000_000, cs_hold_ns: 3_000, address_hold_ns: 3_000 }
    }
}

impl SpiTiming {
    /// Check user-given values: a clock from 100 kHz to the processors' 10 MHz, holds of at
    /// least the 3 µs they need and at most a millisecond.
    pub fn validate(&self) -> Result<(), SpiTimingError> {
        if !(100_000..=10_000_000).contains(&self.speed_hz) {
            return Err(SpiTimingError::Speed { speed_hz: self.speed_hz });
        }
        for (what, ns) in [("chip-select hold", self.cs_hold_ns), ("address hold", self.address_hold_ns)] {
            if !(3_000..=1_000_000).contains(&ns) {
                return Err(SpiTimingError::Hold { what, ns });
            }
        }
        Ok(())
    }

    /// The time one transaction of `data_bytes` occupies the SPI bus, ns: the gap before CS
    /// low, the hold after it, the address hold, the address and data bits (CS rises as soon
    /// as the last byte is clocked, as the official library does it). The model `rtloop
    /// budget` uses, and the simulated board's.
    pub fn transaction_ns(&self, data_bytes: usize) -> u64 {
        let bits = (1 + data_bytes as u64) * 8;
        2 * u64::from(self.cs_hold_ns)
            + u64::from(self.address_hold_ns)
            + bits * 1_000_000_000 / u64::from(self.speed_hz.max(1))
    }
}

/// Why [`SpiTiming::validate`] refused a timing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpiTimingError {
    /// A clock outside 100 kHz..=10 MHz.
    #[error("SPI clock {speed_hz} Hz is outside what the pi3hat takes: give 100000 to 10000000 Hz")]
    Speed {
        /// The clock given, Hz.
        speed_hz: u32,
    },
    /// A hold outside 3 µs..=1 ms.
    #[error("SPI {what} {ns} ns is outside 3000-1000000 ns: the processors need at least 3 µs")]
    Hold {
        /// Which hold: `chip-select hold` or `address hold`.
        what: &'static str,
        /// The hold given, ns.
        ns: u32,
    },
}

/// Why a transfer failed. Small and `Copy`: created on the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpiError {
    /// An operating-system error, as errno.
    Os(i32),
    /// The transfer is longer than the carrier can move in one transaction.
    TooLong(usize),
    /// No such bus on a pi3hat (its connectors are JC1-JC5).
    NoSuchBus(u8),
    /// No such processor on a pi3hat (it has 1 to 3).
    NoSuchProcessor(u8),
    /// The board refused the transaction (unknown register, malformed write, …): what a
    /// simulated board says; real processors do not answer.
    Register(rtloop_proto::pi3hat::RegisterError),
}

impl fmt::Display for SpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpiError::Os(e) => write!(f, "SPI transfer failed: {}", std::io::Error::from_raw_os_error(*e)),
            SpiError::TooLong(n) => write!(f, "SPI transfer of {n} bytes is longer than one transaction can move"),
            SpiError::NoSuchBus(b) => write!(f, "bus {b} is not on a pi3hat: its connectors are JC1-JC5"),
            SpiError::NoSuchProcessor(p) => write!(f, "the pi3hat has no processor {p}: give 1 to 3"),
            SpiError::Register(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SpiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SpiError::Register(e) => Some(e),
            _ => None,
        }
    }
}

/// One pi3hat register at a time, on one of its three chip selects.
pub trait Pi3hatSpi: Send {
    /// A short name: `spidev`, `mem`, `sim`.
    fn name(&self) -> &str;

    /// Read `out.len()` bytes of register `address` behind `cs` (clocking out zeros).
    fn read(&mut self, cs: ChipSelect, address: u8, out: &mut [u8]) -> Result<(), SpiError>;

    /// Write `data` to register `address` behind `cs`.
    fn write(&mut self, cs: ChipSelect, address: u8, data: &[u8]) -> Result<(), SpiError>;

    /// The clock and holds in use.
    fn timing(&self) -> SpiTiming;

    /// The earliest instant a read could find something new, when the carrier can know it
    /// (the simulated board can); `None` for hardware, which is polled.
    fn ready_hint_ns(&self) -> Option<u64> {
        None
    }

    /// When the last transaction handed to the carrier ends, when that can be later than the
    /// call returned (a simulated board running ahead of a real clock);
    /// `None` for hardware, whose transactions are over when the call returns.
    fn busy_until_ns(&self) -> Option<u64> {
        None
    }

    /// Return once every transaction handed over so far has ended (a simulated board that ran
    /// ahead of a real clock: sleep until it is done). Hardware: nothing to do.
    fn settle(&mut self) {}
}
