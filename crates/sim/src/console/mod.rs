//! The diagnostic console of a simulated servo (stream channel 1).

pub mod config;
