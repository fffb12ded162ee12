//! # rtloop-testkit — proof that hot paths never touch the allocator, and visible skips
//!
//! A global allocator that counts the allocator calls (alloc, alloc_zeroed, realloc and
//! dealloc) made by the *calling thread* while counting is switched on. Both the switch and
//! the count are per thread: the test harness allocates on its own threads at any time, and
//! tests run in parallel, so a shared counter would blame one test for another's work.
//!
//! Use it from a test binary:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: rtloop_testkit::CountingAllocator = rtloop_testkit::CountingAllocator;
//!
//! let (calls, ()) = rtloop_testkit::count_allocations(|| hot_path());
//! assert_eq!(calls, 0);
//! ```
//!
//! It also records skipped tests ([`skip`]) so the test command can list them at the end.
//!
//! Must never: allocate itself, or change what the system allocator returns.

#![warn(clippy::undocumented_unsafe_blocks)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The counting allocator; install it with `#[global_allocator]` in a test binary.
pub struct CountingAllocator;

thread_local! {
    // Const initialisers without destructors: reading them from inside the allocator never
    // allocates or registers anything.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = CALLS.try_with(|c| c.set(c.get() + 1));
    }
}

// SAFETY: every method forwards to the system allocator with the caller's arguments
// unchanged; counting touches only const thread-locals and has no effect on the memory.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Start counting this thread's allocator calls (from zero).
pub fn start_counting() {
    CALLS.with(|c| c.set(0));
    COUNTING.with(|c| c.set(true));
}

/// Stop counting; returns this thread's calls since [`start_counting`].
pub fn stop_counting() -> u64 {
    COUNTING.with(|c| c.set(false));
    CALLS.with(Cell::get)
}

/// Run `f` and return the allocator calls it made on this thread, with its result.
pub fn count_allocations<R>(f: impl FnOnce() -> R) -> (u64, R) {
    start_counting();
    let r = f();
    (stop_counting(), r)
}

/// Environment variable naming the file where [`skip`] records skipped tests. `tools/test`
/// (the README's test command, and CI) sets it and prints the file when the run ends, so a
/// skipped test is visible in the normal output instead of hiding in captured stderr.
pub const SKIP_LOG_ENV: &str = "RTLOOP_SKIP_LOG";

/// Record that the calling test skipped some or all of its checks, and why (what the machine
/// lacks and how to provide it, e.g. "needs root to create network namespaces").
///
/// The line goes to stderr and, when [`SKIP_LOG_ENV`] names a file, is appended to it. The
/// test's name comes from the harness's thread name. A test that calls this must still
/// assert whatever it can check without the missing piece.
pub fn skip(reason: &str) {
    let test = std::thread::current().name().unwrap_or("(unnamed test)").to_string();
    // The test binary is `<target>-<hash>`: name the target without the hash.
    let exe = std::env::current_exe().ok().and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()));
    let binary = exe.as_deref().map_or("", |s| s.rsplit_once('-').map_or(s, |(name, _)| name)).to_string();
    let line = format!("SKIPPED {binary}::{test}: {reason}");
    eprintln!("{line}");
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV) {
        use std::io::Write;
        // O_APPEND: one short write per line, so lines from parallel test processes never
        // interleave.
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// The name the test harness gives the test function `name` of the module whose
/// `module_path!()` is `module`: that path without the test binary's crate name
/// (`"io::serve_pty"`, `"leaves_nothing"` → `"serve_pty::leaves_nothing"`). For a test that
/// runs tests of its own binary again in a child process (`--exact`, a filter), so the name
/// stays right whichever module of the one test binary per crate the test lives in.
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}

/// Where [`this_test_binary`] finds the emulator the tests run under, if any: the program and
/// its arguments, split at whitespace (`qemu-aarch64 -L /usr/aarch64-linux-gnu`, as
/// `tools/cross test` sets it).
pub const EXEC_WRAPPER_ENV: &str = "RTLOOP_TEST_EXEC_WRAPPER";

/// This test binary, to run again as a child process: the binary itself, or, when the tests
/// run under an emulator ([`EXEC_WRAPPER_ENV`]), the emulator running it — a binary built for
/// another architecture cannot be executed directly (without binfmt_misc).
pub fn this_test_binary() -> std::process::Command {
    let exe = std::env::current_exe().expect("the test binary's path");
    let wrapper = std::env::var(EXEC_WRAPPER_ENV).unwrap_or_default();
    let mut words = wrapper.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut cmd = std::process::Command::new(program);
            cmd.args(words).arg(exe);
            cmd
        }
        None => std::process::Command::new(exe),
    }
}
