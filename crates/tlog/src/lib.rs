//! # rtloop-tlog — mjlib TLOG0003 telemetry logs
//!
//! (being written: see the module docs)

pub mod format;
pub mod schema;
