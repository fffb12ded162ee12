//! The pi3hat over Linux's `spidev` driver. (Being written: see the issue.)

use super::{ChipSelect, Pi3hatSpi, SpiError, SpiTiming};
use crate::transport::OpenError;

/// The three spidev devices of a pi3hat.
pub struct SpidevSpi {
    timing: SpiTiming,
}

impl SpidevSpi {
    /// Open `/dev/spidev1.0`, `/dev/spidev1.1` and `/dev/spidev0.0`.
    pub fn open(timing: SpiTiming) -> Result<Self, OpenError> {
        let _ = timing;
        Err(OpenError { uri: "pi3hat:spidev".into(), message: "not written yet".into() })
    }
}

impl Pi3hatSpi for SpidevSpi {
    fn name(&self) -> &str {
        "spidev"
    }
    fn read(&mut self, _cs: ChipSelect, _address: u8, _out: &mut [u8]) -> Result<(), SpiError> {
        Err(SpiError::Os(libc::ENODEV))
    }
    fn write(&mut self, _cs: ChipSelect, _address: u8, _data: &[u8]) -> Result<(), SpiError> {
        Err(SpiError::Os(libc::ENODEV))
    }
    fn timing(&self) -> SpiTiming {
        self.timing
    }
}
