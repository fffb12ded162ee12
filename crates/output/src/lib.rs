//! # rtloop-output — what the tools write, written safely
//!
//! What it is for: the two things every report-writing part of rtloop (the log tools in
//! `tlog`/`rtloop log`, the latency lab) needs and must do the same way:
//! * [`file`]: output files (CSV, MCAP, PNG) that go to a temporary file beside the
//!   destination and are renamed into place only when complete — never onto the input, never
//!   through a link at the destination, never over an existing file unless asked;
//! * [`dir`]: output directories (a Parquet export, a dataset) that appear complete or not
//!   at all, and replace only an earlier export;
//! * [`png`]: the font plots use and the encoding of a rendered image into any `Write`;
//! * [`sentence()`]: an error and its causes as the one line the user reads.
//!
//! What it must never do: open a destination itself for writing, follow a link it did not
//! create, or fail a plot for want of a font (it is then drawn without text).

#![warn(clippy::undocumented_unsafe_blocks)]

pub mod dir;
pub mod file;
pub mod png;
mod sentence;

pub use dir::OutputDir;
pub use file::{FileIdentity, OutputError, OutputFile};
pub use sentence::sentence;
