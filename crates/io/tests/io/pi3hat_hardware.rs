//! The hardware SPI carriers of the pi3hat where there is no pi3hat: `SpidevSpi::open` and
//! `BcmSpi::open` must refuse with one sentence naming the device and the fix, and the
//! `/dev/mem` carrier must refuse before it opens or maps anything. On a machine that does
//! have the devices these refusals cannot be seen; such tests say so with `rtloop_testkit::skip`
//! (and never reconfigure a real Pi's pins from a test).

use rtloop_io::spi::bcm::BcmSpi;
use rtloop_io::spi::spidev::SpidevSpi;
use rtloop_io::spi::{ChipSelect, SpiTiming};
use std::path::Path;

const PATHS: [ChipSelect; 3] = [ChipSelect::Spi1Cs0, ChipSelect::Spi1Cs1, ChipSelect::Spi0Cs0];

/// What a user mistake or a missing device gets: one line, one sentence, "what: how".
fn one_sentence(message: &str) {
    assert!(!message.is_empty() && !message.contains('\n'), "{message:?}");
    assert!(!message.contains(". ") && !message.ends_with('.'), "one sentence: {message}");
    assert!(message.contains(": "), "what is wrong, then how to fix it: {message}");
}

/// Whether this process has `/dev/mem` open or mapped.
fn touches_dev_mem() -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let open = std::fs::read_dir("/proc/self/fd")
        .map(|dir| {
            dir.flatten().any(|e| std::fs::read_link(e.path()).is_ok_and(|target| target == Path::new("/dev/mem")))
        })
        .unwrap_or(false);
    maps.contains("/dev/mem") || open
}

#[test]
fn spidev_without_the_devices_names_the_first_missing_one_and_the_fix() {
    let present: Vec<&str> = PATHS.iter().map(|cs| cs.spidev_path()).filter(|p| Path::new(p).exists()).collect();
    match SpidevSpi::open(SpiTiming::default()) {
        Ok(_) => {
            rtloop_testkit::skip("this machine has the pi3hat's spidev devices and they opened: no refusal to check")
        }
        Err(e) => {
            assert_eq!(e.uri, "pi3hat:spidev");
            one_sentence(&e.message);
            assert!(e.to_string().starts_with("cannot open pi3hat:spidev: /dev/spidev"), "{e}");
            if present.is_empty() {
                assert!(e.message.starts_with("/dev/spidev1.0 does not exist: "), "{e}");
                assert!(e.message.contains("dtparam=spi=on") && e.message.contains("dtoverlay=spi1-3cs"), "{e}");
                assert!(e.message.ends_with("then reboot"), "{e}");
            } else {
                rtloop_testkit::skip("some spidev devices exist here: only the form of the refusal is checked");
            }
        }
    }
}

#[test]
fn spidev_refuses_a_timing_the_pi3hat_cannot_take() {
    let fast = SpiTiming { speed_hz: 20_000_000, ..SpiTiming::default() };
    let e = SpidevSpi::open(fast).err().expect("20 MHz is refused");
    assert_eq!(e.uri, "pi3hat:spidev");
    assert!(e.message.contains("20000000 Hz") && e.message.contains("10000000"), "{e}");
    one_sentence(&e.message);
}

#[test]
fn mem_off_a_raspberry_pi_refuses_before_touching_dev_mem() {
    if Path::new("/proc/device-tree").exists() {
        rtloop_testkit::skip(
            "this machine has a device tree: BcmSpi::open could take it for a Pi and reconfigure its GPIO pins, \
             which a test must not do",
        );
        return;
    }
    assert!(!touches_dev_mem(), "nothing else in this test process uses /dev/mem");
    let e = BcmSpi::open(SpiTiming::default()).err().expect("no Raspberry Pi here");
    assert_eq!(e.uri, "pi3hat:mem");
    one_sentence(&e.message);
    assert!(e.message.starts_with("this machine is not a Raspberry Pi 3 or 4 ("), "{e}");
    assert!(e.message.contains("/proc/device-tree/model"), "says what was looked at: {e}");
    assert!(e.message.contains("use pi3hat:spidev"), "{e}");
    assert!(!touches_dev_mem(), "the refusal came before /dev/mem was opened or mapped");
}

#[test]
fn mem_refuses_a_timing_the_pi3hat_cannot_take() {
    let short = SpiTiming { cs_hold_ns: 1_000, ..SpiTiming::default() };
    let e = BcmSpi::open(short).err().expect("a 1 µs hold is refused");
    assert_eq!(e.uri, "pi3hat:mem");
    assert!(e.message.contains("chip-select hold 1000 ns"), "{e}");
    one_sentence(&e.message);
}
