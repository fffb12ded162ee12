//! # rtloop-lab — the latency lab
//!
//! `rtloop lab` measures what a computer can promise a real-time control loop before anyone
//! trusts it: the wakeup latency of a periodic thread ([`wakeup`]), UDP round trips
//! ([`udp`]), event response between threads and processes ([`event`]), serial turnaround
//! over a pseudo-terminal ([`serial`]) and the full rtloop cycle ([`cycle`]), each under the
//! same real-time settings `rtloop run` takes and optionally under background [`load`].
//! Results are summarised, printed, exported and plotted by [`report`] and [`plot`] with the
//! [`conditions`] that shaped them; [`compare`] runs cyclictest and sockperf beside our
//! figures, and [`doctor`] checks the system's real-time readiness. [`cli`] is the command
//! line that ties them together; [`check`] holds the ranges every flag is checked against
//! before anything is measured; [`child`] ties the programs the lab starts to its life.
//!
//! The modules stand in layers, none importing one above it: the vocabulary at the bottom —
//! [`wording`], [`check`] (limits and refusals), [`methods`], [`error`], [`options`] (what
//! every experiment takes) — then [`conditions`], [`load`] and [`report`], then the
//! experiments, then [`plot`], [`compare`] and [`cli`] on top.
//!
//! What it must never do: measure on a thread whose real-time settings it did not apply (or
//! report as applied), hide a refused setting, measure before every option was checked, or
//! leave load threads, child processes, network namespaces or temporary files behind.

#![warn(clippy::undocumented_unsafe_blocks)]

pub mod check;
pub mod child;
pub mod cli;
pub mod compare;
pub mod conditions;
pub mod cycle;
pub mod doctor;
pub mod error;
pub mod event;
pub mod load;
pub mod methods;
pub mod options;
pub mod plot;
pub mod report;
pub mod serial;
pub mod udp;
pub mod wakeup;
pub mod wording;

pub use error::Error;
