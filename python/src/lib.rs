//! # rtloop-python — the native core of the `rtloop` Python package
//!
//! What it is for: `import rtloop` gives Python rtloop's speed and tools. This crate is the
//! PyO3 extension `rtloop._rtloop` behind the pure-Python package in `python/rtloop/`:
//! * [`robot`]: `Robot` — one call that commands and queries every servo of a robot (the
//!   simulated quadruped, fdcanusb, SocketCAN, UDP buses), states out as numpy arrays;
//! * [`agent`]: `Agent` — a client of the spine's shared-memory protocol (`rtloop run
//!   --agent NAME`);
//! * [`tlog`]: TLOG0003 logs (ours and mjlib's) read into numpy columns;
//! * [`sim`]: the simulator served behind a pseudo-terminal or UDP, from Python;
//! * [`frame`]: `rtloop frame encode/decode` as functions;
//! * [`transport`]: frames through rtloop's transports for the official moteus package
//!   (`rtloop.moteus_transport`);
//! * [`render`] (feature `render`): `Renderer` — the simulated robot drawn by MuJoCo's
//!   offscreen renderer, headless, from a state's `body.qpos` (`rtloop.gym`'s `render()`);
//! * [`values`]: the position-mode fields, and reading "a scalar or one value per servo"
//!   arguments (shared by `Robot` and `Agent`).
//!
//! What it must never do: crash the interpreter or hold the GIL while it waits. Bad input —
//! arrays of the wrong shape or dtype, NaN where a number is needed, a missing device, a
//! spine that is not there, a file that is not a TLOG — raises a Python exception whose
//! message is one sentence saying what is wrong and how to fix it; every wait on a bus, a
//! spine or a file runs with the GIL released.

#![warn(clippy::undocumented_unsafe_blocks)]

use pyo3::prelude::*;

pub mod agent;
pub mod frame;
#[cfg(feature = "render")]
pub mod render;
pub mod robot;
pub mod sim;
pub mod tlog;
pub mod transport;
pub mod values;

/// The extension module `rtloop._rtloop`. The Python package re-exports what users need;
/// this module's names are an implementation detail.
#[pymodule]
fn _rtloop(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("POSITION_FIELDS", values::position_fields())?;
    robot::register(m)?;
    agent::register(m)?;
    tlog::register(m)?;
    sim::register(m)?;
    frame::register(m)?;
    transport::register(m)?;
    #[cfg(feature = "render")]
    render::register(m)?;
    Ok(())
}
