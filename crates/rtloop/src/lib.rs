//! # rtloop — your control law, real-time, on moteus servos
//!
//! Write a [`Controller`]; [`Runtime`] runs it once per cycle on a real-time thread that
//! commands and queries every servo on every bus, with a safety supervisor, a watchdog on
//! every servo, a telemetry log and honest figures. The same controller runs on the built-in
//! simulated robot and on real buses: only the [`RobotSpec`] changes.
//!
//! ```
//! use rtloop::{Controller, Failure, Flow, Output, PositionCommand, Runtime, ServoCommand, State};
//!
//! /// Ramp every joint from where it was measured to 0.1 rev over one second, then hold.
//! struct Raise { from: [f64; 32] }
//!
//! impl Controller for Raise {
//!     type Telemetry = ();
//!     fn start(&mut self, state: &State<'_>) -> Result<(), Failure> {
//!         for (i, (from, servo)) in self.from.iter_mut().zip(state.servos).enumerate() {
//!             if servo.age_cycles.is_none() {
//!                 // Refuse to start: no servo is commanded, and the summary says why.
//!                 return Err(Failure::new("not_measured", "a servo never answered", "check its bus").servo(i));
//!             }
//!             *from = servo.state.position;
//!         }
//!         Ok(())
//!     }
//!     fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, ()>) -> Result<Flow, Failure> {
//!         let k = state.time_s.min(1.0);
//!         for (i, from) in self.from.iter().enumerate().take(state.servos.len()) {
//!             let position = Some(from + (0.1 - from) * k);
//!             out.set(i, ServoCommand::Position(PositionCommand { position, velocity: Some(0.0), ..Default::default() }));
//!         }
//!         Ok(Flow::Continue)
//!     }
//! }
//!
//! fn main() -> Result<(), rtloop::RunError> {
//!     let summary = Runtime::new().rate_hz(500.0).duration_s(0.2).run(Raise { from: [0.0; 32] })?;
//!     assert_eq!(summary.status, rtloop::summary::Status::Ok, "{:?}", summary.problems);
//!     Ok(())
//! }
//! ```
//!
//! (README.md shows the same program: a test keeps the two equal.)
//!
//! ## Where things are
//! * [`controller`]: the [`Controller`] trait, its lifecycle table, [`State`], [`Output`]
//!   and [`Failure`] (how a control law refuses to start or asks for the safe stop).
//! * [`runtime`]: [`Runtime`], the builder that runs a controller; [`summary`] holds what a
//!   run reports ([`RunSummary`]; `rtloop run --json` prints it).
//! * [`config`] and [`robot_spec`]: a run's settings and robots, from TOML too (with a table
//!   of your control law's own beside them, if you like).
//! * [`motion`]: a demonstration controller (stand up, then sway): what `rtloop run` drives,
//!   and what the examples build on.
//! * [`live`]: live telemetry: your own publishers ([`Runtime::publish`]), the operator's
//!   commands, and with the features `foxglove` and `zenoh` (off by default) their servers.
//! * [`cycle_model`]: what one cycle of a robot costs, from the frames a run really sends.
//! * [`frame`]: for the `rtloop frame` command, the Python package's `rtloop.frame` and
//!   fuzzing — one moteus frame built from registers, or taken apart into JSON.
//! * [`sim_buses`]: simulated servos served behind real devices (a pty, a UDP port).
//! * [`physics`]: a body under the simulated servos (MuJoCo, feature `physics`): `[physics]`,
//!   pushes, and coupling a robot's simulated servos to the model (docs/physics.md).
//! * [`scene`]: the simulated robot in 3D for Foxglove (the model's geometry, every body's
//!   pose from the logged `qpos`), live, played back and exported.
//! * [`devices`]: what a bus failure or a device's refusal means, in one sentence.
//! * [`numbers`]: range checks for numbers users give; [`signals`]: Ctrl-C as a flag.
//! * The layers below, for those who want them: the protocol codec ([`proto`]), the
//!   simulator ([`sim`]) and the transports and multi-bus cycle ([`io`]).
//!
//! What it must never do: hide a failure. A stale reply is never handed over as fresh, every
//! missing reply and overrun is counted, a log with gaps says so, and a run that lost servos
//! ends with [`Status::Degraded`](summary::Status::Degraded) (`"status": "degraded"` in JSON).

#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

/// The transports and the cycle (the `rtloop-io` crate), as `rtloop::io`.
pub use rtloop_io as io;
/// The moteus protocol (the `rtloop-proto` crate), as `rtloop::proto`.
pub use rtloop_proto as proto;
/// The simulator (the `rtloop-sim` crate), as `rtloop::sim`.
pub use rtloop_sim as sim;

pub mod agent;
pub mod config;
pub mod controller;
pub mod cycle_model;
pub mod devices;
pub mod frame;
pub mod live;
pub mod motion;
pub mod numbers;
pub mod physics;
pub mod robot;
pub mod robot_spec;
mod run;
pub mod runtime;
pub mod scene;
pub mod signals;
pub mod sim_buses;

mod stats;
pub mod summary;
pub mod telemetry;
mod toml_text;

pub use controller::{Controller, Failure, Flow, ModelPose, Output, PositionCommand, ServoCommand, ServoStatus, State};
pub use robot_spec::RobotSpec;
pub use runtime::{RunError, Runtime};
pub use summary::RunSummary;

#[cfg(test)]
mod front_door {
    /// The lines of the first code block of `text` that opens with `fence`, each with
    /// `prefix` taken off.
    fn first_block(text: &str, prefix: &str, fence: &str) -> String {
        let lines: Vec<&str> = text
            .lines()
            .map(|l| l.strip_prefix(prefix).or_else(|| l.strip_prefix(prefix.trim_end())).unwrap_or(l))
            .collect();
        let start = lines.iter().position(|l| *l == fence).expect("a rust block") + 1;
        let len = lines[start..].iter().position(|l| l.starts_with("```")).expect("the block ends");
        lines[start..start + len].join("\n")
    }

    #[test]
    fn the_readme_shows_the_crate_docs_controller_which_the_doc_test_compiles_and_runs() {
        let crate_doc: String =
            include_str!("lib.rs").lines().take_while(|l| l.starts_with("//!")).collect::<Vec<_>>().join("\n");
        let readme = include_str!("../../../README.md");
        let doc_example = first_block(&crate_doc, "//! ", "```");
        let readme_example = first_block(readme, "", "```rust");
        assert!(doc_example.lines().count() > 15, "the crate doc's example: {doc_example}");
        assert!(
            !doc_example.lines().any(|l| l.trim_start().starts_with("# ")),
            "the crate doc's example hides no line, so that README.md can show it whole:\n{doc_example}"
        );
        assert_eq!(
            readme_example, doc_example,
            "README.md's ```rust block must be the crate doc's example (crates/rtloop/src/lib.rs), which \
             `cargo test --doc` compiles and runs: copy it over"
        );
    }
}
