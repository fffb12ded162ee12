//! The `rtloop` command's own modules: one per subcommand that is not the run loop.
//!
//! Not part of the library's API (hidden from its docs, free to change): they exist in the
//! library only so that the fuzzing crate can drive the same parsers the command uses.
//! Robot builders use [`crate::Runtime`] and [`crate::Controller`].

pub mod budget;
pub mod can;
pub mod diag;
pub mod frame;
pub mod log;
pub mod servo;
pub mod sim;

pub mod console;
