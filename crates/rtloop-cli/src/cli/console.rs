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

/// `error` and its causes (`source()`, down the chain) as the one line the user reads:
/// `what failed: why: …`. A cause whose words the line already holds is not repeated: some
/// errors keep their cause's words in their own sentence, because a caller that prints only
/// `Display` must still give the whole line (and a wrapper that adds nothing displays its
/// source's sentence as its own).
pub fn sentence(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let words = e.to_string();
        if !line.contains(&words) {
            line.push_str(": ");
            line.push_str(&words);
        }
        cause = e.source();
    }
    line
}

/// Write one message line on stderr. Unlike `eprintln!`, never panics: a stderr that is
/// closed or full (`2>/dev/full`) loses the message and nothing else.
pub fn note(text: impl Display) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

#[cfg(test)]
mod tests {
    use super::sentence;
    use std::fmt;

    /// An error saying `words`, caused by `cause`.
    #[derive(Debug)]
    struct Failed {
        words: &'static str,
        cause: Option<Box<Failed>>,
    }

    impl fmt::Display for Failed {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.words)
        }
    }

    impl std::error::Error for Failed {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.cause.as_deref().map(|c| c as &dyn std::error::Error)
        }
    }

    fn chain(words: &[&'static str]) -> Failed {
        let (last, above) = words.split_last().unwrap();
        above
            .iter()
            .rev()
            .fold(Failed { words: last, cause: None }, |cause, words| Failed { words, cause: Some(Box::new(cause)) })
    }

    #[test]
    fn causes_follow_the_sentence_once_each() {
        assert_eq!(sentence(&chain(&["cannot write out.csv"])), "cannot write out.csv");
        let three = chain(&["cannot export run.tlog", "cannot write out.csv", "No space left on device"]);
        assert_eq!(sentence(&three), "cannot export run.tlog: cannot write out.csv: No space left on device");
        // A wrapper showing its source's sentence, and a sentence that already holds its
        // cause's words: the line the user read before causes were exposed.
        let kept =
            chain(&["cannot create x: Permission denied", "cannot create x: Permission denied", "Permission denied"]);
        assert_eq!(sentence(&kept), "cannot create x: Permission denied");
    }
}
