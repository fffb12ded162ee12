//! How the lab words a number in its sentences.
//!
//! What it must never do: import anything of the lab — every part of it words counts, the
//! refusals of [`crate::check`] included.

/// `n` with the noun that agrees with it: `count(1, "servo", "servos")` is "1 servo",
/// `count(0, …)` "0 servos".
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
