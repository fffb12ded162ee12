//! The integration tests of `rtloop-lab`, one module per area, in one test binary: one link
//! for all of them instead of one per file. One area: `cargo test -p rtloop-lab --test lab <module>::`.

#![warn(clippy::undocumented_unsafe_blocks)]

mod common;

mod causes;
mod children;
mod cli_wiring;
mod compare;
mod core;
mod doctor;
mod doctor_trees;
mod event;
mod honest_reports;
mod load_files;
mod outputs;
mod serial;
mod udp;
mod validation;
