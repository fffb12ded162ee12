//! Shared by the lab's tests: `rtloop lab …` arguments parsed as the command line would.
#![allow(dead_code)]

use clap::Parser;
use rtloop_lab::cli::LabCommand;

#[derive(Parser, Debug)]
struct Lab {
    #[command(subcommand)]
    cmd: LabCommand,
}

/// The lab command these arguments (after `rtloop lab`) make; panics on a parse error.
pub fn parse(args: &[&str]) -> LabCommand {
    let argv = std::iter::once("lab").chain(args.iter().copied());
    Lab::try_parse_from(argv).unwrap_or_else(|e| panic!("{args:?}: {e}")).cmd
}
