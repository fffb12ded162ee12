//! The `rtloop` command end to end: every test here runs the binary (or a peer against it),
//! one module per subject. One test binary, so the workspace links it once.

mod support;

mod agent;
mod can_pi3hat;
mod cli;
mod console_cli;
mod devices;
mod foxglove_node;
mod hostile_peers;
mod lab_children;
mod lab_cli;
mod lab_results;
mod lockstep;
mod log_audit;
mod log_parquet;
mod log_trust;
mod moteus_cpp;
mod moteus_python;
mod moteus_rs;
mod moteus_tool;
#[cfg(feature = "physics")]
mod physics;
mod python;
mod readme_tour;
#[cfg(feature = "render")]
mod render;
#[cfg(feature = "physics")]
mod robots;
mod run_trust;
mod runtime;
#[cfg(feature = "physics")]
mod scene;
mod telemetry;
mod tview;
mod watchdog_always_on;
