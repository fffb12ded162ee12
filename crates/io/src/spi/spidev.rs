//! The pi3hat over Linux's `spidev` driver: `/dev/spidev1.0` (processor 1), `/dev/spidev1.1`
//! (processor 2) and `/dev/spidev0.0` (processor 3), one `SPI_IOC_MESSAGE` ioctl per register
//! read or write. No root and no `/dev/mem`, only the kernel's SPI drivers (enabled with
//! `dtparam=spi=on` and `dtoverlay=spi1-3cs`).
//!
//! The hold times map onto the message: the address byte is one transfer whose delay is the
//! address hold, the data a second transfer whose delay is the hold before chip select goes
//! high; the gap before the next chip select low is kept by spinning from the end of the
//! previous transaction on that chip select. The hold between chip select low and the first
//! clock cannot be asked for from user space (the kernel takes it from the device tree's
//! `spi-cs-setup-delay-ns` where the controller driver honours it): the kernel's own work
//! between the two usually takes microseconds, but nothing here guarantees the 3 µs.
//!
//! Must never: allocate, format or block beyond the ioctl itself in `read` / `write`; pass
//! the kernel a buffer shorter than the length it is told; panic on any length or input.

use super::{ChipSelect, Data, Pi3hatSpi, SpiError, SpiTiming};
use crate::clock::monotonic_now_ns;
use crate::transport::OpenError;
use std::fs::File;
use std::os::fd::AsRawFd;

/// The address as it appears in [`OpenError::uri`].
const URI: &str = "pi3hat:spidev";

/// The longest data part of one transaction (frames need 5 + 64 bytes, the attitude 90).
const MAX_TRANSFER: usize = 256;

/// What the device tree must say for the pi3hat's buses to appear as spidev devices.
pub const ENABLE_SPI: &str = "enable SPI0 and SPI1, which the pi3hat needs, with dtparam=spi=on and \
                          dtoverlay=spi1-3cs in /boot/config.txt (/boot/firmware/config.txt since Bookworm), then reboot";

/// Zeros clocked out while reading (the kernel copies from it; it is never written).
static ZEROS: [u8; MAX_TRANSFER] = [0; MAX_TRANSFER];

/// One transfer of an `SPI_IOC_MESSAGE` ioctl: Linux's `struct spi_ioc_transfer`
/// (`include/uapi/linux/spi/spidev.h`), 32 bytes on every architecture.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpiIocTransfer {
    /// User address of the bytes to send, or 0 to send zeros.
    pub tx_buf: u64,
    /// User address where the received bytes go, or 0 to drop them.
    pub rx_buf: u64,
    /// Bytes in this transfer.
    pub len: u32,
    /// Clock for this transfer, Hz (0: the device's maximum).
    pub speed_hz: u32,
    /// Wait after this transfer, before the next one or before chip select changes, µs.
    pub delay_usecs: u16,
    /// Word size (0: the device's).
    pub bits_per_word: u8,
    /// Non-zero: let chip select go high after this transfer (0 keeps it low within a message).
    pub cs_change: u8,
    /// Data lines for sending (0: one).
    pub tx_nbits: u8,
    /// Data lines for receiving (0: one).
    pub rx_nbits: u8,
    /// Wait between words, µs.
    pub word_delay_usecs: u8,
    /// Padding, zero.
    pub pad: u8,
}

const _: () = assert!(std::mem::size_of::<SpiIocTransfer>() == 32);
const _: () = assert!(std::mem::align_of::<SpiIocTransfer>() == 8);

/// `SPI_IOC_MAGIC`.
const SPI_IOC_MAGIC: u8 = b'k';
/// `SPI_IOC_WR_MODE`: `_IOW('k', 1, __u8)`.
const SPI_IOC_WR_MODE: nix::sys::ioctl::ioctl_num_type = nix::request_code_write!(SPI_IOC_MAGIC, 1, 1);
/// `SPI_IOC_WR_BITS_PER_WORD`: `_IOW('k', 3, __u8)`.
const SPI_IOC_WR_BITS_PER_WORD: nix::sys::ioctl::ioctl_num_type = nix::request_code_write!(SPI_IOC_MAGIC, 3, 1);
/// `SPI_IOC_WR_MAX_SPEED_HZ`: `_IOW('k', 4, __u32)`.
const SPI_IOC_WR_MAX_SPEED_HZ: nix::sys::ioctl::ioctl_num_type = nix::request_code_write!(SPI_IOC_MAGIC, 4, 4);

/// `SPI_IOC_MESSAGE(n)`: `_IOW('k', 0, char[n * sizeof(struct spi_ioc_transfer)])`.
const fn spi_ioc_message(n: usize) -> nix::sys::ioctl::ioctl_num_type {
    nix::request_code_write!(SPI_IOC_MAGIC, 0, n * std::mem::size_of::<SpiIocTransfer>())
}
const SPI_IOC_MESSAGE_1: nix::sys::ioctl::ioctl_num_type = spi_ioc_message(1);
const SPI_IOC_MESSAGE_2: nix::sys::ioctl::ioctl_num_type = spi_ioc_message(2);

/// A hold in nanoseconds as spidev's microsecond delay, rounded up (a hold is a minimum) and
/// capped at what the field holds.
fn delay_usecs(hold_ns: u32) -> u16 {
    let us = hold_ns.div_ceil(1000);
    u16::try_from(us).unwrap_or(u16::MAX)
}

/// The transfers of one transaction: the address byte at `address` (held `address_hold_ns`
/// after), then, when `data_len` is not zero, `data_len` bytes sent from `tx` (0: zeros) and
/// received into `rx` (0: dropped), held `cs_hold_ns` before chip select goes high. Returns
/// the transfers and how many of them to send.
fn transaction(timing: &SpiTiming, address: u64, tx: u64, rx: u64, data_len: u32) -> ([SpiIocTransfer; 2], usize) {
    let common = SpiIocTransfer { speed_hz: timing.speed_hz, bits_per_word: 8, ..SpiIocTransfer::default() };
    let first = SpiIocTransfer { tx_buf: address, len: 1, ..common };
    if data_len == 0 {
        let only = SpiIocTransfer { delay_usecs: delay_usecs(timing.cs_hold_ns), ..first };
        return ([only, SpiIocTransfer::default()], 1);
    }
    let first = SpiIocTransfer { delay_usecs: delay_usecs(timing.address_hold_ns), ..first };
    let second =
        SpiIocTransfer { tx_buf: tx, rx_buf: rx, len: data_len, delay_usecs: delay_usecs(timing.cs_hold_ns), ..common };
    ([first, second], 2)
}

/// The three spidev devices of a pi3hat.
pub struct SpidevSpi {
    timing: SpiTiming,
    /// Indexed by [`slot`].
    devices: [File; 3],
    /// When the last transaction on each chip select ended (chip select high), monotonic ns.
    last_end_ns: [u64; 3],
}

/// The index of a chip select in [`SpidevSpi`]'s arrays.
fn slot(cs: ChipSelect) -> usize {
    match cs {
        ChipSelect::Spi1Cs0 => 0,
        ChipSelect::Spi1Cs1 => 1,
        ChipSelect::Spi0Cs0 => 2,
    }
}

/// One sentence for a device that would not open.
fn describe_open_failure(path: &str, e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOENT) => format!("{path} does not exist: {ENABLE_SPI}"),
        Some(libc::EACCES | libc::EPERM) => format!(
            "permission denied on {path}: add the user to the spi group (sudo usermod -aG spi $USER, then log in \
             again) or run as root"
        ),
        _ => format!("{path} cannot be used: {e}"),
    }
}

/// Set one spidev parameter through a pointer-to-value ioctl.
fn set<T>(file: &File, request: nix::sys::ioctl::ioctl_num_type, value: &T) -> std::io::Result<()> {
    // SAFETY: `file` is an open descriptor; `request` is an `_IOW` spidev request whose size
    // is `size_of::<T>()` (u8 or u32 at the call sites), so the kernel reads exactly the `T`
    // that `value` points to, which lives for the whole call.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), request, value as *const T) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Open one device and set mode 0, 8-bit words and the clock.
fn open_device(path: &str, timing: &SpiTiming) -> Result<File, String> {
    let file =
        std::fs::OpenOptions::new().read(true).write(true).open(path).map_err(|e| describe_open_failure(path, &e))?;
    let mode: u8 = 0;
    set(&file, SPI_IOC_WR_MODE, &mode).map_err(|e| format!("{path} refused SPI mode 0: {e}"))?;
    let bits: u8 = 8;
    set(&file, SPI_IOC_WR_BITS_PER_WORD, &bits).map_err(|e| format!("{path} refused 8-bit words: {e}"))?;
    set(&file, SPI_IOC_WR_MAX_SPEED_HZ, &timing.speed_hz)
        .map_err(|e| format!("{path} refused a {} Hz SPI clock: {e}", timing.speed_hz))?;
    Ok(file)
}

impl SpidevSpi {
    /// Open `/dev/spidev1.0`, `/dev/spidev1.1` and `/dev/spidev0.0` in SPI mode 0, 8-bit
    /// words, at most `timing.speed_hz`. The error names the device and the fix.
    pub fn open(timing: SpiTiming) -> Result<Self, OpenError> {
        let fail = |message: String| OpenError { uri: URI.into(), message };
        timing.validate().map_err(|e| fail(e.to_string()))?;
        let open = |cs: ChipSelect| open_device(cs.spidev_path(), &timing).map_err(fail);
        let devices = [open(ChipSelect::Spi1Cs0)?, open(ChipSelect::Spi1Cs1)?, open(ChipSelect::Spi0Cs0)?];
        Ok(SpidevSpi { timing, devices, last_end_ns: [0; 3] })
    }

    /// One transaction on `cs`: the address, then the data.
    fn transfer(&mut self, cs: ChipSelect, address: u8, data: Data<'_>) -> Result<(), SpiError> {
        let (tx, rx, len) = match data {
            // Zeros go out while reading: ZEROS holds MAX_TRANSFER bytes, checked below.
            Data::Read(out) => (ZEROS.as_ptr() as u64, out.as_mut_ptr() as u64, out.len()),
            Data::Write(bytes) => (bytes.as_ptr() as u64, 0, bytes.len()),
        };
        if len > MAX_TRANSFER {
            return Err(SpiError::TooLong(len));
        }
        let i = slot(cs);
        // The gap before chip select goes low again on this processor.
        let ready_ns = self.last_end_ns[i].saturating_add(u64::from(self.timing.cs_hold_ns));
        while monotonic_now_ns() < ready_ns {
            std::hint::spin_loop();
        }
        let address_byte = [address];
        // `len` ≤ MAX_TRANSFER, so it fits a u32.
        let (transfers, n) = transaction(&self.timing, address_byte.as_ptr() as u64, tx, rx, len as u32);
        let request = if n == 1 { SPI_IOC_MESSAGE_1 } else { SPI_IOC_MESSAGE_2 };
        // SAFETY: the descriptor is an open spidev device. `request` is SPI_IOC_MESSAGE(n) and
        // `transfers` holds at least `n` initialised `spi_ioc_transfer`s of the kernel's
        // layout (asserted at compile time). Every buffer address in them is valid for its
        // `len` for the whole call: `address_byte` (1 byte, this stack frame); `tx`, the
        // caller's `data` slice of `len` bytes or ZEROS of MAX_TRANSFER ≥ `len` bytes; `rx`,
        // 0 (nothing kept) or the caller's `&mut` slice of `len` bytes, the only memory the
        // kernel writes.
        let r = unsafe { libc::ioctl(self.devices[i].as_raw_fd(), request, transfers.as_ptr()) };
        self.last_end_ns[i] = monotonic_now_ns();
        if r < 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
            return Err(SpiError::Os(errno));
        }
        Ok(())
    }
}

impl Pi3hatSpi for SpidevSpi {
    fn name(&self) -> &str {
        "spidev"
    }

    fn read(&mut self, cs: ChipSelect, address: u8, out: &mut [u8]) -> Result<(), SpiError> {
        self.transfer(cs, address, Data::Read(out))
    }

    fn write(&mut self, cs: ChipSelect, address: u8, data: &[u8]) -> Result<(), SpiError> {
        self.transfer(cs, address, Data::Write(data))
    }

    fn timing(&self) -> SpiTiming {
        self.timing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn the_transfer_struct_has_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<SpiIocTransfer>(), 32);
        assert_eq!(offset_of!(SpiIocTransfer, tx_buf), 0);
        assert_eq!(offset_of!(SpiIocTransfer, rx_buf), 8);
        assert_eq!(offset_of!(SpiIocTransfer, len), 16);
        assert_eq!(offset_of!(SpiIocTransfer, speed_hz), 20);
        assert_eq!(offset_of!(SpiIocTransfer, delay_usecs), 24);
        assert_eq!(offset_of!(SpiIocTransfer, bits_per_word), 26);
        assert_eq!(offset_of!(SpiIocTransfer, cs_change), 27);
        assert_eq!(offset_of!(SpiIocTransfer, tx_nbits), 28);
        assert_eq!(offset_of!(SpiIocTransfer, rx_nbits), 29);
        assert_eq!(offset_of!(SpiIocTransfer, word_delay_usecs), 30);
        assert_eq!(offset_of!(SpiIocTransfer, pad), 31);
    }

    /// The request numbers as the generic `_IOC` layout gives them (direction in bits 30-31,
    /// size in 16-29, type in 8-15, number in 0-7), the one x86, ARM and AArch64 use.
    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "x86", target_arch = "aarch64", target_arch = "arm"))]
    fn the_request_numbers_are_the_kernels() {
        let numbers: [nix::sys::ioctl::ioctl_num_type; 5] =
            [SPI_IOC_WR_MODE, SPI_IOC_WR_BITS_PER_WORD, SPI_IOC_WR_MAX_SPEED_HZ, SPI_IOC_MESSAGE_1, SPI_IOC_MESSAGE_2];
        assert_eq!(numbers, [0x4001_6b01, 0x4001_6b03, 0x4004_6b04, 0x4020_6b00, 0x4040_6b00]);
    }

    #[test]
    fn holds_round_up_to_whole_microseconds() {
        assert_eq!(delay_usecs(0), 0);
        assert_eq!(delay_usecs(1), 1);
        assert_eq!(delay_usecs(3_000), 3);
        assert_eq!(delay_usecs(3_001), 4);
        assert_eq!(delay_usecs(u32::MAX), u16::MAX);
    }

    #[test]
    fn a_transaction_is_the_address_then_the_data() {
        let timing = SpiTiming { speed_hz: 8_000_000, cs_hold_ns: 5_000, address_hold_ns: 3_500 };
        let address = [34u8];
        let ([a, d], n) = transaction(&timing, address.as_ptr() as u64, 0x1000, 0x2000, 42);
        assert_eq!(n, 2);
        assert_eq!(a.tx_buf, address.as_ptr() as u64);
        assert_eq!((a.rx_buf, a.len, a.delay_usecs, a.cs_change), (0, 1, 4, 0));
        assert_eq!((d.tx_buf, d.rx_buf, d.len, d.delay_usecs, d.cs_change), (0x1000, 0x2000, 42, 5, 0));
        for t in [a, d] {
            assert_eq!((t.speed_hz, t.bits_per_word), (8_000_000, 8));
        }
        let ([only, _], n) = transaction(&timing, address.as_ptr() as u64, 0, 0, 0);
        assert_eq!(n, 1);
        assert_eq!((only.len, only.delay_usecs), (1, 5), "no data: the chip-select hold follows the address");
    }

    #[test]
    fn open_failures_name_the_device_and_the_fix() {
        let missing = describe_open_failure("/dev/spidev1.1", &std::io::Error::from_raw_os_error(libc::ENOENT));
        assert!(missing.starts_with("/dev/spidev1.1 does not exist: "), "{missing}");
        assert!(missing.contains("dtoverlay=spi1-3cs"), "{missing}");
        let denied = describe_open_failure("/dev/spidev0.0", &std::io::Error::from_raw_os_error(libc::EACCES));
        assert!(denied.contains("/dev/spidev0.0") && denied.contains("spi group") && denied.contains("root"));
        let other = describe_open_failure("/dev/spidev0.0", &std::io::Error::from_raw_os_error(libc::ENXIO));
        assert!(other.starts_with("/dev/spidev0.0 cannot be used: "), "{other}");
        for m in [missing, denied, other] {
            assert!(!m.contains('\n') && !m.ends_with('.'), "{m}");
        }
    }
}
