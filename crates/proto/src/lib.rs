//! # rtloop-proto — the moteus CAN-FD register protocol, as pure data
//!
//! What it is for: turning commands into the exact bytes a moteus controller (or the
//! official moteus clients) put on the wire, and turning any byte string back into typed
//! values — on the host side (commands out, replies in) and on the servo side (requests in,
//! replies and error subframes out) — plus the fdcanusb text-line protocol.
//!
//! What it must never do: allocate, perform I/O, read a clock, or panic. Every decoder
//! returns a typed error for bad input; every encoder returns an error instead of writing
//! past a 64-byte CAN-FD payload. The crate is `no_std` so it can run on a servo too.
//!
//! Layout:
//! * [`frame`] — the CAN-FD frame, DLC rounding, 0x50 padding, arbitration ids.
//! * [`value`] — resolutions, scale classes and the integer mapping rules.
//! * [`register`] — the register map: addresses, names and scale classes.
//! * [`writer`] / [`subframe`] — building and parsing the subframe stream.
//! * [`host`] — position / query / stop / zero-velocity commands, reply decoding.
//! * [`servo`] — the servo side: serve a request frame against a register server.
//! * [`fdcanusb`] — `can send`, `OK`, `ERR`, `rcv` lines with the optional CRC suffix.
//! * [`pi3hat`] — the mjbots pi3hat's SPI register map (the real driver and the simulated
//!   board both read it).
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Mechanical backing for "never panics": outside tests, clippy rejects indexing, unwrap,
// expect, explicit panics and overflowing arithmetic anywhere in the crate.
#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::unreachable,
        clippy::todo
    )
)]

#[cfg(test)]
extern crate std;

pub mod fdcanusb;
pub mod frame;
pub mod host;
pub mod pi3hat;
pub mod register;
pub mod servo;
pub mod subframe;
pub mod udp;
pub mod value;
pub mod varuint;
pub mod writer;

pub use frame::{ArbitrationId, CanFdFrame, CanFdFrameError};
pub use subframe::{DecodeError, Subframe, SubframeIter};
pub use value::{Resolution, ScaleClass, Value};
pub use writer::{EncodeError, FrameWriter};

#[cfg(test)]
mod error_tests {
    use core::error::Error;

    /// Every error the codec returns is a `core::error::Error`, so a caller can put it in a
    /// `Box<dyn Error>` or wrap it as the `source` of its own error, even without `std`.
    #[test]
    fn every_error_is_a_core_error_with_its_sentence() {
        let errors: [&dyn Error; 7] = [
            &crate::frame::CanFdFrameError::TooLong(65),
            &crate::writer::EncodeError::TooManyRegisters,
            &crate::subframe::DecodeError::ZeroCount { offset: 3 },
            &crate::varuint::VaruintError::Truncated,
            &crate::fdcanusb::LineError::BadHex,
            &crate::udp::UdpFrameError::BadMagic,
            &crate::servo::NotUnderstood::UnknownChannel { channel: 9 },
        ];
        let text: std::vec::Vec<std::string::String> = errors.iter().map(std::string::ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "payload of 65 bytes exceeds the CAN-FD maximum of 64",
                "too many registers",
                "zero register count at byte 3",
                "varuint truncated",
                "non-hex character in data",
                "not an rtloop UDP datagram (no \"RTLU\" magic)",
                "no stream channel 9",
            ]
        );
        assert!(errors.iter().all(|e| e.source().is_none()));
    }
}
