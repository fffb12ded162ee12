//! Standard output for the `rtloop` commands.
//!
//! What it is for: printing results so that a reader that went away (`rtloop … | head`, a
//! closed pipe, a supervisor that stopped reading) ends nothing: the rest of the output is
//! dropped and the command carries on — a simulator keeps serving, a run still sends its
//! shutdown cycle. `println!` would panic there instead.
//! What it must never do: hide any other write error (a full disk behind a redirection is
//! returned as one sentence).

use std::fmt::Display;
use std::io::Write;

/// Print `text` and a newline.
pub fn line(text: impl Display) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    tolerate_closed_reader(writeln!(out, "{text}").and_then(|()| out.flush()))
}

/// Print `text` as it is.
pub fn text(text: impl Display) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    tolerate_closed_reader(write!(out, "{text}").and_then(|()| out.flush()))
}

/// `Ok` when the write worked or only found that nobody reads any more; any other error as
/// one sentence.
pub fn tolerate_closed_reader(result: std::io::Result<()>) -> Result<(), String> {
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("cannot write the output: {e}")),
        _ => Ok(()),
    }
}
