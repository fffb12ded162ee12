//! # rtloop — real-time control of moteus servos, measured
//!
//! The public facade of the workspace: the protocol codec ([`proto`]), the simulator
//! ([`sim`]), the transports and multi-bus cycle ([`io`]), and the pieces of the `rtloop`
//! command that other programs may want to reuse: the periodic run loop ([`run`]), the demo
//! motion ([`motion`]) and latency statistics ([`stats`]).
//!
//! What it must never do: hide a failure. Every command prints one clear message for a user
//! mistake and exits non-zero; the run loop counts every overrun and every missing reply.

pub use io;
pub use lab;
pub use proto;
pub use sim;

#[doc(hidden)]
pub mod cli;
pub mod config;
pub mod controller;
pub mod motion;
mod numbers;
pub mod robot_spec;
pub mod run;
mod signals;
mod stats;
mod telemetry;
