//! The integration tests of `rtloop-proto`, one module per area, in one test binary: one link
//! for all of them instead of one per file. One area: `cargo test -p rtloop-proto --test proto <module>::`.

#![forbid(unsafe_code)]

mod common;

mod differential;
mod fdcanusb;
mod frozen_codec;
mod int_registers;
mod robustness;
mod roundtrip;
mod streams;
mod udp;
mod vectors;
