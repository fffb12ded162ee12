//! # rtloop-lab — the latency lab
//!
//! (being written)

pub mod cli;
pub mod doctor;
pub mod event;
pub mod serial;
pub mod udp;
pub mod compare;
