//! Shared by the tests: unique segment names, servo lists, raw access to a segment.
#![allow(dead_code)]

use rtloop_agent::layout::{bytes_of, Plain, COMMAND_OFFSET};
use rtloop_agent::ServoInfo;
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
    let f = std::fs::OpenOptions::new().write(true).open(rtloop_agent::segment_path(name)).unwrap();
    f.write_all_at(bytes, offset as u64).unwrap();
}

/// Write a whole command block (its `seq` word included) over the segment's.
pub fn write_command_raw<T: Plain>(name: &str, block: &T) {
    write_raw(name, COMMAND_OFFSET, bytes_of(block));
}

/// Read `len` bytes at `offset` from the segment of `name`.
pub fn read_raw(name: &str, offset: usize, len: usize) -> Vec<u8> {
    let f = std::fs::File::open(rtloop_agent::segment_path(name)).unwrap();
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

/// A FIFO planted at `/dev/shm/rtloop-NAME`, as any local user can (`/dev/shm` is
/// world-writable). Dropping it releases whoever is blocked opening it for reading (a
/// writer comes and goes) and removes it.
pub struct PlantedFifo {
    pub path: std::path::PathBuf,
}

impl PlantedFifo {
    pub fn new(name: &str) -> PlantedFifo {
        let path = rtloop_agent::segment_path(name);
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0, "mkfifo: {}", std::io::Error::last_os_error());
        PlantedFifo { path }
    }
}

impl Drop for PlantedFifo {
    fn drop(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        // A blocked reader's open returns once a writer opens (ENXIO here: nobody reads).
        let _ = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Run `f` on a thread and return its result, or fail the test if it has none within
/// `limit` (a call that blocks for ever fails instead of hanging the suite). The limit is a
/// bound on a hang, not a timing assertion: the calls checked return without waiting.
pub fn within<T: Send + 'static>(limit: std::time::Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(_) => panic!("still blocked after {limit:?}"),
    }
}

/// The uid and gid of user `nobody` (65534 when the user database has no such user).
pub fn nobody() -> (u32, u32) {
    let name = std::ffi::CString::new("nobody").unwrap();
    // SAFETY: `name` is NUL-terminated; the result is read at once, before any other
    // getpw* call of this thread.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return (65534, 65534);
    }
    // SAFETY: getpwnam returned a valid entry.
    unsafe { ((*pw).pw_uid, (*pw).pw_gid) }
}

/// Whether this process may give files away (`chown` to another user): root. Tests of
/// another user's segment skip visibly otherwise.
pub fn can_chown() -> bool {
    rtloop_agent::euid() == 0
}

/// Give the file at `path` to user `nobody`, as if that user had made it.
pub fn give_to_nobody(path: &std::path::Path) {
    let (uid, gid) = nobody();
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}
