//! Shared by the property tests: proof that `PROPTEST_CASES` sets their case counts.
//!
//! proptest (since 1.2; the workspace locks 1.12) lets every `PROPTEST_*` environment
//! variable override a test's own `ProptestConfig`, so `with_cases(2000)` is the count only
//! while `PROPTEST_CASES` is unset. [`cases_run`] checks that from the outside, so a move to a
//! hand-built runner or an old proptest cannot silently pin the counts again.

use std::process::Command;

/// How many cases the property test `test` of this test binary runs with `PROPTEST_CASES`
/// set to `cases` (`None`: unset), counted from proptest's own per-case trace.
pub fn cases_run(test: &str, cases: Option<u32>) -> usize {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads", "1"]).env("PROPTEST_VERBOSE", "2");
    match cases {
        Some(n) => cmd.env("PROPTEST_CASES", n.to_string()),
        None => cmd.env_remove("PROPTEST_CASES"),
    };
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{test}: {}", String::from_utf8_lossy(&out.stderr));
    let trace = String::from_utf8_lossy(&out.stderr);
    trace.lines().filter(|l| l.contains("Test case passed") || l.contains("Test case rejected")).count()
}
