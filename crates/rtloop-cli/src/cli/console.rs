//! The terminal side of the `rtloop` commands: results on standard output, messages on standard error.
//!
//! What it is for: printing results so that a reader that went away (`rtloop … | head`, a
//! closed pipe, a supervisor that stopped reading) ends nothing: the rest of the output is
//! dropped and the command carries on — a simulator keeps serving, a run still sends its
//! shutdown cycle. `println!` would panic there instead.
//! Messages for the user go to standard error through [`note`], which never fails the
//! command: a closed or full stderr loses the message, not the run.
//!
//! What it must never do: hide any other write error on stdout (a full disk behind a
//! redirection is returned as one sentence).

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

/// Write one message line on stderr. Unlike `eprintln!`, never panics: a stderr that is
/// closed or full (`2>/dev/full`) loses the message and nothing else.
pub fn note(text: impl Display) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}
