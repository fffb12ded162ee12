//! The pi3hat through the BCM283x registers in `/dev/mem`, the official library's way: SPI0
//! (processor 3) and the auxiliary SPI1 (processors 1 and 2) driven register by register,
//! chip select by GPIO, busy-waits for the hold times. Faster than spidev (no system call,
//! microsecond gaps) but needs root, and only a Raspberry Pi 3 or 4 has these registers at
//! the addresses used here.
//!
//! What this module assumes, as the official library does (its figures, not measured here):
//! the SPI0 clock divides a 400 MHz core clock and the AUX SPI1 clock a 250 MHz one, on the
//! Pi 3 and the Pi 4 alike. Where the core clock differs (`core_freq` in `config.txt`), both
//! SPI clocks scale with it; the dividers are rounded so that, at the assumed clocks, the bus
//! never runs faster than asked. The kernel's SPI drivers may be loaded, but nothing may use
//! them while this runs.
//!
//! Must never: touch `/dev/mem` on a machine it has not recognised as a Raspberry Pi 3 or 4
//! (the machine check comes first and maps nothing); allocate, format or sleep in `read` /
//! `write`; spin without a bound (a missing board ends a transaction with `ETIMEDOUT` after
//! [`TIMEOUT_NS`]); access memory outside the mapped pages; leave a chip select low.

use super::{ChipSelect, Data, Pi3hatSpi, SpiError, SpiTiming};
use crate::clock::monotonic_now_ns;
use crate::transport::OpenError;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

/// The address as it appears in [`OpenError::uri`].
const URI: &str = "pi3hat:mem";

/// The longest data part of one transaction (frames need 5 + 64 bytes, the attitude 90).
const MAX_TRANSFER: usize = 256;

/// How long one transaction may wait on the hardware before giving up with `ETIMEDOUT`, ns.
pub const TIMEOUT_NS: u64 = 10_000_000;

/// Peripheral base (ARM physical address) of the BCM2837 (Pi 3, Zero 2, CM3).
const PI3_BASE: u64 = 0x3f00_0000;
/// Peripheral base of the BCM2711 (Pi 4, 400, CM4) in its default low-peripheral mode.
const PI4_BASE: u64 = 0xfe00_0000;

/// The GPIO block, from the peripheral base.
const GPIO_OFFSET: u64 = 0x20_0000;
/// The SPI0 block, from the peripheral base.
const SPI0_OFFSET: u64 = 0x20_4000;
/// The AUX block (mini UART, SPI1, SPI2), from the peripheral base.
const AUX_OFFSET: u64 = 0x21_5000;

/// The word index of the register at byte `offset` in its block.
const fn word(offset: usize) -> usize {
    offset / 4
}

/// Bytes of each register block mapped.
const BLOCK: usize = 4096;
/// 32-bit registers in a block.
const WORDS: usize = BLOCK / 4;

// GPIO registers, as word indices in the block.
/// GPSET0: a 1 drives that pin high.
const GPSET0: usize = word(0x1c);
/// GPCLR0: a 1 drives that pin low.
const GPCLR0: usize = word(0x28);
/// Highest GPIO pin number of the BCM283x.
const MAX_PIN: u32 = 53;
/// GPIO function-select codes.
const FSEL_OUTPUT: u32 = 0b001;
const FSEL_ALT0: u32 = 0b100;
const FSEL_ALT4: u32 = 0b011;

/// SPI0 pins (ALT0): MISO, MOSI, SCLK.
const SPI0_PINS: [u32; 3] = [9, 10, 11];
/// SPI1 pins (ALT4): MISO, MOSI, SCLK.
const SPI1_PINS: [u32; 3] = [19, 20, 21];

// SPI0 registers (word indices) and CS-register bits.
const SPI0_CS: usize = word(0x00);
const SPI0_FIFO: usize = word(0x04);
const SPI0_CLK: usize = word(0x08);
/// CLEAR: empty both FIFOs (bits 4 and 5).
const SPI0_CS_CLEAR: u32 = 0b11 << 4;
/// TA: transfer active.
const SPI0_CS_TA: u32 = 1 << 7;
/// DONE: the transfer is complete (TX FIFO empty, nothing shifting).
const SPI0_CS_DONE: u32 = 1 << 16;
/// RXD: the RX FIFO holds at least one byte.
const SPI0_CS_RXD: u32 = 1 << 17;
/// TXD: the TX FIFO has room for at least one byte.
const SPI0_CS_TXD: u32 = 1 << 18;
/// Bytes SPI0 may be asked to send ahead of what was read back (its RX FIFO's depth).
const SPI0_AHEAD: usize = 16;
/// The core clock SPI0's divider divides, as the official library assumes for Pi 3 and 4.
const SPI0_CORE_HZ: u64 = 400_000_000;

// AUX registers (word indices in the AUX block).
/// AUXENB: bit 1 enables SPI1.
const AUX_ENB: usize = word(0x04);
const AUX_ENB_SPI1: u32 = 1 << 1;
const AUX_SPI1_CNTL0: usize = word(0x80);
const AUX_SPI1_CNTL1: usize = word(0x84);
const AUX_SPI1_STAT: usize = word(0x88);
/// IO: a TX entry written here ends the hardware chip-select period; reads pop the RX FIFO.
const AUX_SPI1_IO: usize = word(0xa0);
/// TXHOLD: a TX entry written here keeps the hardware chip select for the next one.
const AUX_SPI1_TXHOLD: usize = word(0xb0);
// CNTL0 fields.
const AUX_CNTL0_SPEED_SHIFT: u32 = 20;
const AUX_CNTL0_VARIABLE_WIDTH: u32 = 1 << 14;
const AUX_CNTL0_DOUT_HOLD_SHIFT: u32 = 12;
const AUX_CNTL0_ENABLE: u32 = 1 << 11;
const AUX_CNTL0_IN_RISING: u32 = 1 << 10;
const AUX_CNTL0_CLEAR_FIFOS: u32 = 1 << 9;
const AUX_CNTL0_MSB_FIRST: u32 = 1 << 6;
// CNTL1 fields.
const AUX_CNTL1_MSB_FIRST_IN: u32 = 1 << 1;
// STAT bits.
const AUX_STAT_BUSY: u32 = 1 << 6;
const AUX_STAT_RX_EMPTY: u32 = 1 << 7;
const AUX_STAT_TX_EMPTY: u32 = 1 << 9;
const AUX_STAT_TX_FULL: u32 = 1 << 10;
/// Bytes in one variable-width TX/RX entry.
const AUX_PACK: usize = 3;
/// Bytes SPI1 may be asked to send ahead of what was read back (three entries of its
/// four-entry FIFOs).
const AUX_AHEAD: usize = 3 * AUX_PACK;
/// The clock SPI1's divider divides, as the official library assumes.
const AUX_CORE_HZ: u64 = 250_000_000;
/// Largest value of CNTL0's 12-bit speed field.
const AUX_SPEED_MAX: u64 = 0xfff;

/// What to tell someone who is not root.
const NEEDS_ROOT: &str =
    "/dev/mem needs root (the official library's way): run as root, or use pi3hat:spidev which needs no root";

/// The Raspberry Pi families with a known peripheral base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// BCM2837 / BCM2710: Pi 3, Zero 2, Compute Module 3.
    Pi3,
    /// BCM2711: Pi 4, Pi 400, Compute Module 4.
    Pi4,
}

impl Family {
    fn base(self) -> u64 {
        match self {
            Family::Pi3 => PI3_BASE,
            Family::Pi4 => PI4_BASE,
        }
    }
}

/// The family named by `/proc/device-tree/model` ("Raspberry Pi 3 Model B Plus Rev 1.3",
/// "Raspberry Pi Compute Module 4 Rev 1.0", "Raspberry Pi 400 Rev 1.0", …).
fn family_from_model(model: &str) -> Option<Family> {
    let rest = model.strip_prefix("Raspberry Pi ")?;
    if rest.starts_with("Zero 2") {
        return Some(Family::Pi3);
    }
    let rest = rest.strip_prefix("Compute Module ").unwrap_or(rest);
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next().unwrap_or("");
    match digits {
        "3" => Some(Family::Pi3),
        "4" | "400" => Some(Family::Pi4),
        _ => None,
    }
}

/// The family named by `/proc/device-tree/compatible` (NUL-separated strings).
fn family_from_compatible(compatible: &[u8]) -> Option<Family> {
    compatible.split(|&b| b == 0).find_map(|s| match s {
        b"brcm,bcm2711" => Some(Family::Pi4),
        b"brcm,bcm2837" | b"brcm,bcm2710" => Some(Family::Pi3),
        _ => None,
    })
}

/// The peripheral base from `/proc/device-tree/soc/ranges`: big-endian 32-bit cells, each
/// entry the child (bus) address in one cell, the parent (ARM physical) address in the
/// root's `#address-cells` cells (1 on the Pi 3, 2 on the Pi 4), then the size. The first
/// entry maps the peripherals. `root_address_cells` is `/proc/device-tree/#address-cells`
/// when readable; without it, a zero second cell means two parent cells. `None` for anything
/// too short or nonsensical.
fn parse_soc_ranges(ranges: &[u8], root_address_cells: Option<u32>) -> Option<u64> {
    let cell = |i: usize| -> Option<u32> {
        let bytes = ranges.get(4 * i..4 * i + 4)?;
        Some(u32::from_be_bytes(<[u8; 4]>::try_from(bytes).ok()?))
    };
    let first = cell(1)?;
    let cells = root_address_cells.unwrap_or(if first == 0 { 2 } else { 1 });
    let base = match cells {
        1 => u64::from(first),
        2 => (u64::from(first) << 32) | u64::from(cell(2)?),
        _ => return None,
    };
    (base != 0).then_some(base)
}

/// `#address-cells`: one big-endian u32.
fn parse_cell_count(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(<[u8; 4]>::try_from(bytes).ok()?))
}

/// The model text for a message: printable, without the device tree's trailing NUL, short.
fn model_text(model: &[u8]) -> String {
    let text = String::from_utf8_lossy(model);
    let text = text.trim_end_matches('\0').trim();
    text.chars().take(80).map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// One sentence for a machine that is not a Raspberry Pi 3 or 4.
fn not_a_pi(what: &str) -> String {
    format!(
        "this machine is not a Raspberry Pi 3 or 4 ({what}): pi3hat:mem drives the BCM283x registers directly; use \
         pi3hat:spidev elsewhere"
    )
}

/// The peripheral base of this machine from the device tree's files (each `None` when
/// missing): the model (or, without one, the compatible list) must name a Pi 3 or 4, and
/// `soc/ranges`, when it parses, must agree with it.
fn detect_base(
    model: Option<&[u8]>,
    compatible: Option<&[u8]>,
    ranges: Option<&[u8]>,
    root_address_cells: Option<&[u8]>,
) -> Result<u64, String> {
    let family = match (model, compatible) {
        (Some(m), _) => {
            let text = model_text(m);
            family_from_model(&text).ok_or_else(|| not_a_pi(&text))?
        }
        (None, Some(c)) => {
            family_from_compatible(c).ok_or_else(|| not_a_pi("its device tree names no BCM2837 or BCM2711"))?
        }
        (None, None) => return Err(not_a_pi("it has no /proc/device-tree/model")),
    };
    let cells = root_address_cells.and_then(parse_cell_count);
    match ranges.and_then(|r| parse_soc_ranges(r, cells)) {
        Some(base) if base != family.base() => {
            let name = model.map_or_else(|| "its device tree".to_string(), model_text);
            Err(not_a_pi(&format!("{name}, with its peripherals at {base:#x}")))
        }
        _ => Ok(family.base()),
    }
}

/// SPI0's CDIV for `speed_hz` from the assumed 400 MHz core clock: the smallest even
/// divider (the hardware ignores the lowest bit) that does not clock faster than asked,
/// within 2..=65534. `None` for a zero speed.
fn spi0_divider(speed_hz: u32) -> Option<u32> {
    if speed_hz == 0 {
        return None;
    }
    let d = SPI0_CORE_HZ.div_ceil(u64::from(speed_hz));
    let even = d.saturating_add(d & 1);
    Some(even.clamp(2, 65_534) as u32)
}

/// AUX SPI1's CNTL0 speed field for `speed_hz`: the clock is 250 MHz / (2 × (field + 1)),
/// so the smallest field that does not clock faster than asked, within 12 bits. `None` for
/// a zero speed.
fn aux_speed_field(speed_hz: u32) -> Option<u32> {
    if speed_hz == 0 {
        return None;
    }
    let halves = AUX_CORE_HZ.div_ceil(2 * u64::from(speed_hz));
    Some(halves.saturating_sub(1).min(AUX_SPEED_MAX) as u32)
}

/// AUX SPI1's CNTL0 for a speed field: variable width, data held 2 cycles, enabled, data in
/// on the rising edge and out on the falling edge (mode 0), MSB first.
fn aux_cntl0(speed_field: u32) -> u32 {
    ((speed_field & 0xfff) << AUX_CNTL0_SPEED_SHIFT)
        | AUX_CNTL0_VARIABLE_WIDTH
        | (2 << AUX_CNTL0_DOUT_HOLD_SHIFT)
        | AUX_CNTL0_ENABLE
        | AUX_CNTL0_IN_RISING
        | AUX_CNTL0_MSB_FIRST
}

/// Where pin `pin`'s function is selected: the GPFSEL register's word index and the bit
/// shift of its 3-bit field. `None` past the last pin.
fn fsel_location(pin: u32) -> Option<(usize, u32)> {
    (pin <= MAX_PIN).then(|| ((pin / 10) as usize, (pin % 10) * 3))
}

/// A GPFSEL value with the field at `shift` set to `function`, the other pins' kept.
fn with_function(old: u32, shift: u32, function: u32) -> u32 {
    (old & !(0b111 << shift)) | ((function & 0b111) << shift)
}

/// Where pin `pin` is driven: the GPSET word index, the GPCLR word index and the pin's bit.
/// `None` past the last pin.
fn level_location(pin: u32) -> Option<(usize, usize, u32)> {
    let bank = (pin / 32) as usize;
    (pin <= MAX_PIN).then(|| (GPSET0 + bank, GPCLR0 + bank, 1 << (pin % 32)))
}

/// A variable-width AUX TX entry carrying `bytes` (the first three; MSB first from bit 23),
/// chip-select field zero.
fn aux_tx_entry(bytes: &[u8]) -> u32 {
    let n = bytes.len().min(AUX_PACK);
    let mut data = 0u32;
    for (k, &b) in bytes.iter().take(n).enumerate() {
        data |= u32::from(b) << (16 - 8 * k);
    }
    ((8 * n as u32) << 24) | data
}

/// The bytes of a variable-width AUX RX entry of `out.len()` (at most three) bytes: received
/// MSB first, so right-aligned with the first byte highest.
fn aux_rx_unpack(value: u32, out: &mut [u8]) {
    let n = out.len().min(AUX_PACK);
    for (k, b) in out.iter_mut().take(n).enumerate() {
        *b = (value >> (8 * (n - 1 - k))) as u8;
    }
}

/// The GPIO pin each chip select is driven on (by software).
fn cs_pin(cs: ChipSelect) -> u32 {
    match cs {
        ChipSelect::Spi1Cs0 => 18,
        ChipSelect::Spi1Cs1 => 17,
        ChipSelect::Spi0Cs0 => 8,
    }
}

/// The index of a chip select in [`BcmSpi`]'s arrays.
fn slot(cs: ChipSelect) -> usize {
    match cs {
        ChipSelect::Spi1Cs0 => 0,
        ChipSelect::Spi1Cs1 => 1,
        ChipSelect::Spi0Cs0 => 2,
    }
}

/// Wait for outstanding memory accesses (peripheral writes included) to complete: the
/// official library puts a `dsb` on either side of its busy-waits so that register accesses
/// cannot drift across a hold time. On AArch64 this is `dsb sy`; elsewhere a sequentially
/// consistent fence (`dmb` on 32-bit ARM, where stable Rust cannot tell ARMv7, which has
/// `dsb`, from ARMv6, which has not) orders the accesses at least.
#[inline(always)]
fn barrier() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dsb sy` only waits for earlier memory accesses to complete; it reads and
    // writes no register or memory, and (not being `nomem`) also keeps the compiler from
    // moving memory accesses across it.
    unsafe {
        core::arch::asm!("dsb sy", options(nostack, preserves_flags))
    };
    #[cfg(not(target_arch = "aarch64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// Spin until `t_ns` (monotonic), with barriers on both sides.
fn spin_until(t_ns: u64) {
    barrier();
    while monotonic_now_ns() < t_ns {
        std::hint::spin_loop();
    }
    barrier();
}

/// Spin for `ns`.
fn hold(ns: u32) {
    spin_until(monotonic_now_ns().saturating_add(u64::from(ns)));
}

/// The end of a transaction's patience.
struct Deadline(u64);

impl Deadline {
    fn start() -> Self {
        Deadline(monotonic_now_ns().saturating_add(TIMEOUT_NS))
    }

    fn check(&self) -> Result<(), SpiError> {
        if monotonic_now_ns() > self.0 {
            Err(SpiError::Os(libc::ETIMEDOUT))
        } else {
            Ok(())
        }
    }

    /// Poll `done` until it says so, or time out.
    fn wait(&self, mut done: impl FnMut() -> bool) -> Result<(), SpiError> {
        while !done() {
            self.check()?;
            std::hint::spin_loop();
        }
        Ok(())
    }
}

/// One register block of `/dev/mem`, mapped shared and uncached (O_SYNC).
struct Mapping {
    /// What mmap returned (page-aligned).
    base: *mut libc::c_void,
    /// Bytes mapped.
    len: usize,
    /// The block's first register, within the mapping, followed by [`WORDS`] registers.
    regs: *mut u32,
}

// SAFETY: the mapping belongs to one `BcmSpi`, which reaches it only through `&self` /
// `&mut self`; the registers it points at may be accessed from any thread.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Map the [`BLOCK`] bytes at physical address `address` (4 KiB-aligned) of `/dev/mem`,
    /// from the enclosing page whatever the kernel's page size.
    fn new(mem: &OwnedFd, address: u64) -> std::io::Result<Mapping> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = u64::try_from(page).ok().filter(|p| p.is_power_of_two()).unwrap_or(4096);
        let start = address & !(page - 1);
        let delta = (address - start) as usize;
        let len = delta + BLOCK;
        let invalid = || std::io::Error::from_raw_os_error(libc::EINVAL);
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: a fresh shared mapping chosen by the kernel (null hint) of `len` bytes of
        // the open /dev/mem descriptor; it aliases no Rust object.
        let base = unsafe {
            libc::mmap64(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                mem.as_raw_fd(),
                libc::off64_t::try_from(start).map_err(|_| invalid())?,
            )
        };
        #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
        // SAFETY: as above.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                mem.as_raw_fd(),
                libc::off_t::try_from(start).map_err(|_| invalid())?,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // `delta` is a multiple of 4 (the address is 4 KiB-aligned) and `delta + BLOCK` bytes
        // are mapped, so the registers lie inside the mapping.
        let regs = base.cast::<u8>().wrapping_add(delta).cast::<u32>();
        Ok(Mapping { base, len, regs })
    }

    /// Register `word`. Every index used is one of this module's constants, all below
    /// [`WORDS`]; anything else reads 0 rather than leaving the block.
    #[inline(always)]
    fn read(&self, word: usize) -> u32 {
        if word >= WORDS {
            return 0;
        }
        // SAFETY: `regs` starts BLOCK mapped, readable bytes (see `new`), `word < WORDS` keeps
        // the access inside them, and the address is 4-byte aligned (page-aligned mapping
        // plus a multiple of 4). The mapping lives as long as `self`.
        unsafe { core::ptr::read_volatile(self.regs.add(word)) }
    }

    /// Write register `word` (out-of-range indices are ignored, as in [`read`](Self::read)).
    #[inline(always)]
    fn write(&self, word: usize, value: u32) {
        if word >= WORDS {
            return;
        }
        // SAFETY: as in `read`; the mapping is writable (PROT_WRITE) and is device memory no
        // Rust reference points into.
        unsafe { core::ptr::write_volatile(self.regs.add(word), value) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base` and `len` are exactly what mmap returned and was given; nothing
        // uses the mapping after this.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

/// The BCM283x SPI0 and AUX SPI1 peripherals, and the GPIO pins of the chip selects.
pub struct BcmSpi {
    timing: SpiTiming,
    gpio: Mapping,
    spi0: Mapping,
    aux: Mapping,
    /// AUX SPI1's CNTL0 in use (written again to clear its FIFOs after a failure).
    aux_cntl0: u32,
    /// When the last transaction on each chip select ended (chip select high), monotonic ns.
    last_end_ns: [u64; 3],
}

/// Read a device-tree file, `None` when it cannot be read.
fn device_tree(name: &str) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/device-tree/{name}")).ok()
}

/// One sentence for a failure to open `/dev/mem`.
fn describe_mem_failure(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => NEEDS_ROOT.to_string(),
        Some(libc::ENOENT) => "/dev/mem does not exist on this system: use a kernel with CONFIG_DEVMEM, or use \
                               pi3hat:spidev which needs no /dev/mem"
            .to_string(),
        _ => format!("/dev/mem cannot be used: {e}"),
    }
}

impl BcmSpi {
    /// Check that this is a Raspberry Pi 3 or 4 (before touching anything), map its GPIO,
    /// SPI0 and AUX registers from `/dev/mem`, and set up the pins and both SPI controllers
    /// for `timing`. The error names what is missing and the fix.
    pub fn open(timing: SpiTiming) -> Result<Self, OpenError> {
        let fail = |message: String| OpenError { uri: URI.into(), message };
        timing.validate().map_err(|e| fail(e.to_string()))?;
        let base = detect_base(
            device_tree("model").as_deref(),
            device_tree("compatible").as_deref(),
            device_tree("soc/ranges").as_deref(),
            device_tree("#address-cells").as_deref(),
        )
        .map_err(fail)?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err(fail(NEEDS_ROOT.to_string()));
        }
        let (Some(cdiv), Some(speed_field)) = (spi0_divider(timing.speed_hz), aux_speed_field(timing.speed_hz)) else {
            return Err(fail(format!(
                "an SPI clock of {} Hz cannot be set: give 100000 to 10000000 Hz",
                timing.speed_hz
            )));
        };
        let mem: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_SYNC)
            .open("/dev/mem")
            .map_err(|e| fail(describe_mem_failure(&e)))?
            .into();
        let map = |offset: u64, what: &str| {
            Mapping::new(&mem, base + offset).map_err(|e| {
                fail(format!(
                    "cannot map the {what} registers at {:#x} from /dev/mem ({e}): boot without a strict /dev/mem \
                     (iomem=relaxed), or use pi3hat:spidev",
                    base + offset
                ))
            })
        };
        let gpio = map(GPIO_OFFSET, "GPIO")?;
        let spi0 = map(SPI0_OFFSET, "SPI0")?;
        let aux = map(AUX_OFFSET, "AUX SPI1")?;
        let mut spi = BcmSpi { timing, gpio, spi0, aux, aux_cntl0: aux_cntl0(speed_field), last_end_ns: [0; 3] };
        spi.configure(cdiv);
        Ok(spi)
    }

    /// Pins, SPI0 and SPI1 as the transactions need them.
    fn configure(&mut self, cdiv: u32) {
        // Chip selects: driven high first, then made outputs, so they never glitch low.
        for cs in [ChipSelect::Spi1Cs0, ChipSelect::Spi1Cs1, ChipSelect::Spi0Cs0] {
            self.set_level(cs_pin(cs), true);
            self.set_function(cs_pin(cs), FSEL_OUTPUT);
        }
        for pin in SPI0_PINS {
            self.set_function(pin, FSEL_ALT0);
        }
        for pin in SPI1_PINS {
            self.set_function(pin, FSEL_ALT4);
        }

        // SPI0: mode 0, transfer inactive, FIFOs emptied; the clock divider.
        self.spi0.write(SPI0_CS, 0);
        self.spi0.write(SPI0_CS, SPI0_CS_CLEAR);
        self.spi0.write(SPI0_CLK, cdiv);

        // SPI1: disabled then enabled again (a known state), FIFOs emptied, configured.
        let enabled = self.aux.read(AUX_ENB);
        self.aux.write(AUX_ENB, enabled & !AUX_ENB_SPI1);
        hold(10_000);
        self.aux.write(AUX_ENB, enabled | AUX_ENB_SPI1);
        self.aux.write(AUX_SPI1_CNTL1, 0);
        self.aux.write(AUX_SPI1_CNTL0, AUX_CNTL0_CLEAR_FIFOS);
        self.aux.write(AUX_SPI1_CNTL0, self.aux_cntl0);
        self.aux.write(AUX_SPI1_CNTL1, AUX_CNTL1_MSB_FIRST_IN);
        barrier();
    }

    fn set_function(&self, pin: u32, function: u32) {
        if let Some((word, shift)) = fsel_location(pin) {
            let old = self.gpio.read(word);
            self.gpio.write(word, with_function(old, shift, function));
        }
    }

    fn set_level(&self, pin: u32, high: bool) {
        if let Some((set, clear, bit)) = level_location(pin) {
            self.gpio.write(if high { set } else { clear }, bit);
        }
    }

    /// One transaction on `cs`: the gap since the last one, chip select low, the hold, the
    /// exchange, chip select high. The board's reference also lists a hold before chip select
    /// rises; the official library does not wait one (chip select rises once the controller
    /// is done), and neither does this: a transaction takes what `SpiTiming::transaction_ns`
    /// (and the simulated board) say.
    fn transaction(&mut self, cs: ChipSelect, address: u8, data: Data<'_>) -> Result<(), SpiError> {
        if data.len() > MAX_TRANSFER {
            return Err(SpiError::TooLong(data.len()));
        }
        let i = slot(cs);
        let pin = cs_pin(cs);
        spin_until(self.last_end_ns[i].saturating_add(u64::from(self.timing.cs_hold_ns)));
        self.set_level(pin, false);
        hold(self.timing.cs_hold_ns);
        let deadline = Deadline::start();
        let result = match cs {
            ChipSelect::Spi0Cs0 => self.spi0_exchange(address, data, &deadline),
            ChipSelect::Spi1Cs0 | ChipSelect::Spi1Cs1 => self.aux_exchange(address, data, &deadline),
        };
        match cs {
            ChipSelect::Spi0Cs0 => {
                let state = self.spi0.read(SPI0_CS);
                self.spi0.write(SPI0_CS, state & !SPI0_CS_TA);
            }
            ChipSelect::Spi1Cs0 | ChipSelect::Spi1Cs1 => {
                if result.is_err() {
                    // Whatever is left in the FIFOs must not leak into the next transaction.
                    self.aux.write(AUX_SPI1_CNTL0, self.aux_cntl0 | AUX_CNTL0_CLEAR_FIFOS);
                    self.aux.write(AUX_SPI1_CNTL0, self.aux_cntl0);
                }
            }
        }
        self.set_level(pin, true);
        barrier();
        self.last_end_ns[i] = monotonic_now_ns();
        result
    }

    /// SPI0: the address byte (its echo dropped), the address hold, then the data.
    fn spi0_exchange(&self, address: u8, data: Data<'_>, deadline: &Deadline) -> Result<(), SpiError> {
        let spi = &self.spi0;
        let state = spi.read(SPI0_CS);
        spi.write(SPI0_CS, state | SPI0_CS_TA | SPI0_CS_CLEAR);
        spi.write(SPI0_FIFO, u32::from(address));
        deadline.wait(|| spi.read(SPI0_CS) & SPI0_CS_RXD != 0)?;
        let _ = spi.read(SPI0_FIFO);
        if data.len() == 0 {
            return Ok(());
        }
        hold(self.timing.address_hold_ns);
        match data {
            Data::Write(bytes) => {
                for &b in bytes {
                    deadline.wait(|| {
                        let state = spi.read(SPI0_CS);
                        if state & SPI0_CS_RXD != 0 {
                            let _ = spi.read(SPI0_FIFO);
                        }
                        state & SPI0_CS_TXD != 0
                    })?;
                    spi.write(SPI0_FIFO, u32::from(b));
                }
                deadline.wait(|| {
                    let state = spi.read(SPI0_CS);
                    if state & SPI0_CS_RXD != 0 {
                        let _ = spi.read(SPI0_FIFO);
                    }
                    state & SPI0_CS_DONE != 0
                })
            }
            Data::Read(out) => {
                let (mut sent, mut got) = (0, 0);
                while got < out.len() {
                    deadline.check()?;
                    let state = spi.read(SPI0_CS);
                    if sent < out.len() && sent.saturating_sub(got) < SPI0_AHEAD && state & SPI0_CS_TXD != 0 {
                        spi.write(SPI0_FIFO, 0);
                        sent += 1;
                    }
                    if state & SPI0_CS_RXD != 0 {
                        out[got] = spi.read(SPI0_FIFO) as u8;
                        got += 1;
                    }
                }
                Ok(())
            }
        }
    }

    /// AUX SPI1: the address byte, the address hold, the RX FIFO emptied, then the data in
    /// entries of up to three bytes (the controller pauses between entries, so fewer is
    /// slower).
    fn aux_exchange(&self, address: u8, data: Data<'_>, deadline: &Deadline) -> Result<(), SpiError> {
        let spi = &self.aux;
        let len = data.len();
        spi.write(if len == 0 { AUX_SPI1_IO } else { AUX_SPI1_TXHOLD }, aux_tx_entry(&[address]));
        deadline.wait(|| {
            let stat = spi.read(AUX_SPI1_STAT);
            stat & AUX_STAT_BUSY == 0 && stat & AUX_STAT_TX_EMPTY != 0
        })?;
        let drain = || {
            deadline.wait(|| {
                if spi.read(AUX_SPI1_STAT) & AUX_STAT_RX_EMPTY != 0 {
                    return true;
                }
                let _ = spi.read(AUX_SPI1_IO);
                false
            })
        };
        if len == 0 {
            return drain();
        }
        hold(self.timing.address_hold_ns);
        drain()?;
        match data {
            Data::Write(bytes) => {
                let mut sent = 0;
                for chunk in bytes.chunks(AUX_PACK) {
                    deadline.wait(|| {
                        let stat = spi.read(AUX_SPI1_STAT);
                        if stat & AUX_STAT_RX_EMPTY == 0 {
                            let _ = spi.read(AUX_SPI1_IO);
                        }
                        stat & AUX_STAT_TX_FULL == 0
                    })?;
                    sent += chunk.len();
                    spi.write(if sent == len { AUX_SPI1_IO } else { AUX_SPI1_TXHOLD }, aux_tx_entry(chunk));
                }
                deadline.wait(|| {
                    let stat = spi.read(AUX_SPI1_STAT);
                    if stat & AUX_STAT_RX_EMPTY == 0 {
                        let _ = spi.read(AUX_SPI1_IO);
                        return false;
                    }
                    stat & AUX_STAT_BUSY == 0 && stat & AUX_STAT_TX_EMPTY != 0
                })
            }
            Data::Read(out) => {
                const ZEROS: [u8; AUX_PACK] = [0; AUX_PACK];
                let (mut sent, mut got) = (0, 0);
                while got < len {
                    deadline.check()?;
                    let stat = spi.read(AUX_SPI1_STAT);
                    if sent < len && sent.saturating_sub(got) < AUX_AHEAD && stat & AUX_STAT_TX_FULL == 0 {
                        let n = (len - sent).min(AUX_PACK);
                        sent += n;
                        let register = if sent == len { AUX_SPI1_IO } else { AUX_SPI1_TXHOLD };
                        spi.write(register, aux_tx_entry(&ZEROS[..n]));
                    }
                    if spi.read(AUX_SPI1_STAT) & AUX_STAT_RX_EMPTY == 0 {
                        let value = spi.read(AUX_SPI1_IO);
                        // Entries come back as they were sent: the same sizes in order.
                        let n = (len - got).min(AUX_PACK);
                        aux_rx_unpack(value, &mut out[got..got + n]);
                        got += n;
                    }
                }
                Ok(())
            }
        }
    }
}

impl Pi3hatSpi for BcmSpi {
    fn name(&self) -> &str {
        "mem"
    }

    fn read(&mut self, cs: ChipSelect, address: u8, out: &mut [u8]) -> Result<(), SpiError> {
        self.transaction(cs, address, Data::Read(out))
    }

    fn write(&mut self, cs: ChipSelect, address: u8, data: &[u8]) -> Result<(), SpiError> {
        self.transaction(cs, address, Data::Write(data))
    }

    fn timing(&self) -> SpiTiming {
        self.timing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `soc/ranges` as a Pi 3 and a Pi 4 (and a Pi 5) give it.
    fn cells(values: &[u32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_be_bytes()).collect()
    }

    #[test]
    fn soc_ranges_give_the_peripheral_base() {
        let pi3 = cells(&[0x7e00_0000, 0x3f00_0000, 0x0100_0000, 0x4000_0000, 0x4000_0000, 0x1000]);
        assert_eq!(parse_soc_ranges(&pi3, Some(1)), Some(PI3_BASE));
        assert_eq!(parse_soc_ranges(&pi3, None), Some(PI3_BASE));
        let pi4 = cells(&[0x7e00_0000, 0, 0xfe00_0000, 0x0180_0000, 0x7c00_0000, 0, 0xfc00_0000, 0x0200_0000]);
        assert_eq!(parse_soc_ranges(&pi4, Some(2)), Some(PI4_BASE));
        assert_eq!(parse_soc_ranges(&pi4, None), Some(PI4_BASE));
        // A Pi 4 with its peripherals high (arm_peri_high=1): a base, but not a known one.
        let high = cells(&[0x7e00_0000, 4, 0x7e00_0000, 0x0180_0000]);
        assert_eq!(parse_soc_ranges(&high, Some(2)), Some(0x4_7e00_0000));
    }

    #[test]
    fn garbage_soc_ranges_give_nothing() {
        for bad in [&[][..], &[1, 2, 3], &[0x7e, 0, 0, 0, 0x3f, 0], &[0; 8], &[0; 12], &[0xff; 7]] {
            assert_eq!(parse_soc_ranges(bad, None), None, "{bad:?}");
        }
        let pi3 = cells(&[0x7e00_0000, 0x3f00_0000, 0x0100_0000]);
        assert_eq!(parse_soc_ranges(&pi3, Some(0)), None);
        assert_eq!(parse_soc_ranges(&pi3, Some(3)), None);
        assert_eq!(parse_soc_ranges(&pi3, Some(u32::MAX)), None);
        // Two parent cells but too short for the second.
        assert_eq!(parse_soc_ranges(&cells(&[0x7e00_0000, 0]), Some(2)), None);
        assert_eq!(parse_cell_count(&[0, 0, 0]), None);
        assert_eq!(parse_cell_count(&[0, 0, 0, 2]), Some(2));
    }

    #[test]
    fn models_name_the_family() {
        for (model, family) in [
            ("Raspberry Pi 3 Model B Rev 1.2", Some(Family::Pi3)),
            ("Raspberry Pi 3 Model B Plus Rev 1.3", Some(Family::Pi3)),
            ("Raspberry Pi Compute Module 3 Plus Rev 1.0", Some(Family::Pi3)),
            ("Raspberry Pi Zero 2 W Rev 1.0", Some(Family::Pi3)),
            ("Raspberry Pi 4 Model B Rev 1.4", Some(Family::Pi4)),
            ("Raspberry Pi 400 Rev 1.0", Some(Family::Pi4)),
            ("Raspberry Pi Compute Module 4 Rev 1.0", Some(Family::Pi4)),
            ("Raspberry Pi 5 Model B Rev 1.0", None),
            ("Raspberry Pi 2 Model B Rev 1.1", None),
            ("Raspberry Pi Model B Rev 2", None),
            ("Raspberry Pi 30", None),
            ("NVIDIA Jetson Nano Developer Kit", None),
            ("", None),
        ] {
            assert_eq!(family_from_model(model), family, "{model}");
        }
        assert_eq!(family_from_compatible(b"raspberrypi,4-model-b\0brcm,bcm2711\0"), Some(Family::Pi4));
        assert_eq!(family_from_compatible(b"raspberrypi,3-model-b\0brcm,bcm2837\0"), Some(Family::Pi3));
        assert_eq!(family_from_compatible(b"brcm,bcm2712\0"), None);
        assert_eq!(family_from_compatible(b"\xff\0\0"), None);
    }

    #[test]
    fn the_base_comes_from_a_recognised_pi_only() {
        let pi3_ranges = cells(&[0x7e00_0000, 0x3f00_0000, 0x0100_0000]);
        let pi4_ranges = cells(&[0x7e00_0000, 0, 0xfe00_0000, 0x0180_0000]);
        let two = 2u32.to_be_bytes();
        let model3 = b"Raspberry Pi 3 Model B Plus Rev 1.3\0";
        let model4 = b"Raspberry Pi 4 Model B Rev 1.4\0";
        assert_eq!(detect_base(Some(model3), None, Some(&pi3_ranges), None), Ok(PI3_BASE));
        assert_eq!(detect_base(Some(model4), None, Some(&pi4_ranges), Some(&two)), Ok(PI4_BASE));
        assert_eq!(detect_base(Some(model4), None, None, None), Ok(PI4_BASE), "the model alone");
        assert_eq!(detect_base(Some(model4), None, Some(b"junk"), None), Ok(PI4_BASE), "unparsable ranges");
        assert_eq!(detect_base(None, Some(b"brcm,bcm2837\0"), None, None), Ok(PI3_BASE));

        let refusals = [
            detect_base(None, None, None, None),
            detect_base(None, None, Some(&pi3_ranges), None),
            detect_base(Some(b"Raspberry Pi 5 Model B Rev 1.0\0"), None, None, None),
            detect_base(Some(b"\xff\xfe\0\n\x07"), None, None, None),
            detect_base(None, Some(b"brcm,bcm2712\0"), None, None),
            detect_base(Some(model4), None, Some(&pi3_ranges), None),
            detect_base(Some(model3), None, Some(&cells(&[0x7e00_0000, 4, 0x7e00_0000])), Some(&two)),
        ];
        for r in refusals {
            let message = r.unwrap_err();
            assert!(message.starts_with("this machine is not a Raspberry Pi 3 or 4 ("), "{message}");
            assert!(message.ends_with("use pi3hat:spidev elsewhere"), "{message}");
            assert!(!message.contains('\n') && !message.contains(". "), "{message}");
        }
        let none = detect_base(None, None, None, None).unwrap_err();
        assert!(none.contains("/proc/device-tree/model"), "{none}");
        let pi5 = detect_base(Some(b"Raspberry Pi 5 Model B Rev 1.0\0"), None, None, None).unwrap_err();
        assert!(pi5.contains("(Raspberry Pi 5 Model B Rev 1.0)"), "{pi5}");
        let moved = detect_base(Some(model4), None, Some(&pi3_ranges), None).unwrap_err();
        assert!(moved.contains("0x3f000000"), "{moved}");
        let long = detect_base(Some(&[b'x'; 10_000]), None, None, None).unwrap_err();
        assert!(long.len() < 300, "the model text is cut short: {long}");
    }

    #[test]
    fn dividers_never_clock_faster_than_asked() {
        assert_eq!(spi0_divider(10_000_000), Some(40));
        assert_eq!(spi0_divider(100_000), Some(4000));
        // 400 MHz / 7 MHz = 57.1: 58 (6.9 MHz), even.
        assert_eq!(spi0_divider(7_000_000), Some(58));
        assert_eq!(spi0_divider(3_000_000), Some(134));
        assert_eq!(spi0_divider(u32::MAX), Some(2));
        assert_eq!(spi0_divider(1), Some(65_534));
        assert_eq!(spi0_divider(0), None);
        for hz in [100_000u32, 1_000_000, 3_333_333, 7_000_000, 9_999_999, 10_000_000] {
            let d = spi0_divider(hz).unwrap();
            assert!(d.is_multiple_of(2) && SPI0_CORE_HZ / u64::from(d) <= u64::from(hz), "{hz} Hz: {d}");
            let f = aux_speed_field(hz).unwrap();
            assert!(AUX_CORE_HZ / (2 * (u64::from(f) + 1)) <= u64::from(hz), "{hz} Hz: {f}");
            assert!(f == 0 || AUX_CORE_HZ / (2 * u64::from(f)) > u64::from(hz), "{hz} Hz: {f} is not the fastest");
        }
        // 250 MHz / (2 × 13) = 9.6 MHz (12 would give 10.4 MHz, over the processors' 10 MHz).
        assert_eq!(aux_speed_field(10_000_000), Some(12));
        assert_eq!(aux_speed_field(125_000_000), Some(0));
        assert_eq!(aux_speed_field(u32::MAX), Some(0));
        assert_eq!(aux_speed_field(1), Some(0xfff));
        assert_eq!(aux_speed_field(0), None);
        assert_eq!(aux_cntl0(12) >> AUX_CNTL0_SPEED_SHIFT, 12);
        assert_eq!(aux_cntl0(0x1fff) >> AUX_CNTL0_SPEED_SHIFT, 0xfff, "the field stays 12 bits");
        assert_eq!(aux_cntl0(0) & AUX_CNTL0_CLEAR_FIFOS, 0);
    }

    #[test]
    fn gpio_function_select_and_levels() {
        assert_eq!(fsel_location(0), Some((0, 0)));
        assert_eq!(fsel_location(8), Some((0, 24)));
        assert_eq!(fsel_location(9), Some((0, 27)));
        assert_eq!(fsel_location(10), Some((1, 0)));
        assert_eq!(fsel_location(17), Some((1, 21)));
        assert_eq!(fsel_location(18), Some((1, 24)));
        assert_eq!(fsel_location(21), Some((2, 3)));
        assert_eq!(fsel_location(53), Some((5, 9)));
        assert_eq!(fsel_location(54), None);
        assert_eq!(fsel_location(u32::MAX), None);
        assert_eq!(with_function(0xffff_ffff, 24, FSEL_OUTPUT), 0xf9ff_ffff);
        assert_eq!(with_function(0, 27, FSEL_ALT0), 0x2000_0000);
        assert_eq!(with_function(0, 3, 0xff), 0b111 << 3, "the function stays 3 bits");
        assert_eq!(level_location(8), Some((GPSET0, GPCLR0, 1 << 8)));
        assert_eq!(level_location(18), Some((GPSET0, GPCLR0, 1 << 18)));
        assert_eq!(level_location(40), Some((GPSET0 + 1, GPCLR0 + 1, 1 << 8)));
        assert_eq!(level_location(54), None);
        assert_eq!(level_location(u32::MAX), None);
        for cs in [ChipSelect::Spi1Cs0, ChipSelect::Spi1Cs1, ChipSelect::Spi0Cs0] {
            assert!(fsel_location(cs_pin(cs)).is_some() && level_location(cs_pin(cs)).is_some());
        }
    }

    #[test]
    fn every_register_index_is_inside_its_block() {
        for word in [
            GPSET0 + 1,
            GPCLR0 + 1,
            SPI0_CS,
            SPI0_FIFO,
            SPI0_CLK,
            AUX_ENB,
            AUX_SPI1_CNTL0,
            AUX_SPI1_CNTL1,
            AUX_SPI1_STAT,
            AUX_SPI1_IO,
            AUX_SPI1_TXHOLD,
        ] {
            assert!(word < WORDS, "{word}");
        }
        assert_eq!((AUX_SPI1_IO, AUX_SPI1_TXHOLD), (40, 44));
        for offset in [GPIO_OFFSET, SPI0_OFFSET, AUX_OFFSET] {
            assert_eq!(offset % BLOCK as u64, 0);
        }
    }

    #[test]
    fn aux_entries_pack_and_unpack_up_to_three_bytes() {
        assert_eq!(aux_tx_entry(&[0x22]), (8 << 24) | (0x22 << 16));
        assert_eq!(aux_tx_entry(&[1, 2]), (16 << 24) | 0x01_0200);
        assert_eq!(aux_tx_entry(&[1, 2, 3]), (24 << 24) | 0x01_0203);
        assert_eq!(aux_tx_entry(&[1, 2, 3, 4]), aux_tx_entry(&[1, 2, 3]), "three at most");
        assert_eq!(aux_tx_entry(&[]), 0);
        let mut three = [0; 3];
        aux_rx_unpack(0xaa01_0203, &mut three);
        assert_eq!(three, [1, 2, 3]);
        let mut two = [0; 2];
        aux_rx_unpack(0x0000_0405, &mut two);
        assert_eq!(two, [4, 5]);
        let mut one = [0; 1];
        aux_rx_unpack(0xffff_ff06, &mut one);
        assert_eq!(one, [6]);
        let mut four = [9; 4];
        aux_rx_unpack(0x0007_0809, &mut four);
        assert_eq!(four, [7, 8, 9, 9], "three at most");
        aux_rx_unpack(0x1234_5678, &mut []);
    }

    #[test]
    fn mem_failures_are_one_sentence() {
        let denied = describe_mem_failure(&std::io::Error::from_raw_os_error(libc::EACCES));
        assert!(denied.contains("needs root") && denied.contains("pi3hat:spidev"), "{denied}");
        let missing = describe_mem_failure(&std::io::Error::from_raw_os_error(libc::ENOENT));
        assert!(missing.starts_with("/dev/mem does not exist"), "{missing}");
        let other = describe_mem_failure(&std::io::Error::from_raw_os_error(libc::EIO));
        assert!(other.starts_with("/dev/mem cannot be used: "), "{other}");
        for m in [denied, missing, other] {
            assert!(!m.contains('\n') && !m.contains(". ") && !m.ends_with('.'), "{m}");
        }
    }
}
