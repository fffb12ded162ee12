//! TOML parse errors as the one sentence a user reads: shared by the run configuration
//! ([`crate::config`]) and the robot files ([`crate::robot_spec`]), which both parse TOML, so
//! that neither has to import the other for it.

/// A TOML error as one sentence: the line, what is wrong, and (with `hint`, for a run
/// configuration) for a key that landed in the wrong table (a top-level key written after a
/// `[[bus]]` block) how to fix it.
pub(crate) fn toml_error(text: &str, e: &toml::de::Error, hint: bool) -> String {
    let message = e.message().trim().trim_end_matches('.').replace('\n', " ");
    let start = e.span().map(|span| span.start).filter(|&i| text.is_char_boundary(i));
    let line = start.map(|i| text[..i].matches('\n').count() + 1);
    // The offending line itself names the key, which a type error's message does not.
    let source = start
        .and_then(|i| text[..i].rfind('\n').map_or(Some(0), |nl| Some(nl + 1)))
        .and_then(|from| text[from..].lines().next())
        .map(str::trim)
        .filter(|l| !l.is_empty() && l.len() <= 80);
    let top_level = ["rate_hz", "duration_s", "gains", "safety", "realtime", "faults", "sim"];
    let misplaced = hint
        && message.starts_with("unknown field")
        && top_level.iter().any(|k| message.starts_with(&format!("unknown field `{k}`")));
    let hint = if misplaced {
        "; a key after a [[bus]] (or other) table belongs to that table: move top-level keys above the first table"
    } else {
        ""
    };
    match (line, source) {
        (Some(l), Some(src)) => format!("line {l} ({src}): {message}{hint}"),
        (Some(l), None) => format!("line {l}: {message}{hint}"),
        _ => format!("{message}{hint}"),
    }
}
