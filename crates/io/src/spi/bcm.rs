//! The pi3hat through the BCM283x registers in `/dev/mem`. (Being written: see the issue.)

use super::{ChipSelect, Pi3hatSpi, SpiError, SpiTiming};
use crate::transport::OpenError;

/// The BCM283x SPI0 and AUX SPI1 peripherals.
pub struct BcmSpi {
    timing: SpiTiming,
}

impl BcmSpi {
    /// Map the peripherals through `/dev/mem`.
    pub fn open(timing: SpiTiming) -> Result<Self, OpenError> {
        let _ = timing;
        Err(OpenError { uri: "pi3hat:mem".into(), message: "not written yet".into() })
    }
}

impl Pi3hatSpi for BcmSpi {
    fn name(&self) -> &str {
        "mem"
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
