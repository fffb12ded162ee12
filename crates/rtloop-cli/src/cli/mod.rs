//! The `rtloop` command's modules: one per subcommand, and the terminal ([`console`]).
//!
//! Each turns the parsed flags into a call of the `rtloop` library and its result into text;
//! the library itself never prints.

pub mod budget;
pub mod can;
pub mod demo;
pub mod diag;
pub mod log;
pub mod run;
pub mod servo;
pub mod sim;

pub mod console;
