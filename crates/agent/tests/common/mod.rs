//! Shared by the tests: unique segment names, servo lists, raw access to a segment.
#![allow(dead_code)]

use agent::layout::{bytes_of, Plain, COMMAND_OFFSET};
use agent::ServoInfo;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU32, Ordering};

/// A segment name no other test (or test process) uses.
pub fn unique_name(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("t{}-{tag}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// `n` servos: ids 1..=n on buses 1..=4 in turn.
pub fn servos(n: u32) -> Vec<ServoInfo> {
    (0..n).map(|i| ServoInfo { id: i + 1, bus: i % 4 + 1 }).collect()
}

/// Write `bytes` at `offset` into the segment of `name`, as a hostile process would.
pub fn write_raw(name: &str, offset: usize, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(agent::segment_path(name)).unwrap();
    f.write_all_at(bytes, offset as u64).unwrap();
}

/// Write a whole command block (its `seq` word included) over the segment's.
pub fn write_command_raw<T: Plain>(name: &str, block: &T) {
    write_raw(name, COMMAND_OFFSET, bytes_of(block));
}

/// Read `len` bytes at `offset` from the segment of `name`.
pub fn read_raw(name: &str, offset: usize, len: usize) -> Vec<u8> {
    let f = std::fs::File::open(agent::segment_path(name)).unwrap();
    let mut v = vec![0; len];
    f.read_exact_at(&mut v, offset as u64).unwrap();
    v
}

/// How many cases the property test `test` of this test binary runs with `PROPTEST_CASES`
/// set to `cases` (`None`: unset), counted from proptest's per-case trace.
pub fn cases_run(test: &str, cases: Option<u32>) -> usize {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
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
