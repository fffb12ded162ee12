//! An error as the one line a user reads: what failed, then why, down its `source()` chain.
//!
//! What it must never do: repeat a cause's words, or leave one out.

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
