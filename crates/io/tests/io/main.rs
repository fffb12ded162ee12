//! The integration tests of `rtloop-io`, one module per area, in one test binary: one link
//! for all of them instead of one per file. One area: `cargo test -p rtloop-io --test io <module>::`.
//! (The cycle, the pi3hat driver and the diagnostic client against the simulated robot are
//! rtloop-simrobot's tests: the simulator is a device this crate does not know.)

#![warn(clippy::undocumented_unsafe_blocks)]

mod fdcanusb;
mod pi3hat_hardware;
mod socketcan;
