//! POSIX shared memory: names, opening, mapping, liveness of a pid.

use core::sync::atomic::{AtomicU64, Ordering};
use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

/// Longest agent name.
pub const MAX_NAME: usize = 64;

/// The agent name is not 1 to [`MAX_NAME`] characters of `[A-Za-z0-9_-]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameError {
    /// The refused name.
    pub name: String,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "agent name {:?} is invalid: use 1 to {MAX_NAME} characters from A-Z, a-z, 0-9, '_' and '-'",
            self.name
        )
    }
}

impl std::error::Error for NameError {}

/// Check an agent name: 1 to 64 characters of `[A-Za-z0-9_-]`.
pub fn validate_name(name: &str) -> Result<(), NameError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(NameError { name: name.to_string() })
    }
}

/// The shm name of agent `name` (`/rtloop-NAME`), for `shm_open`.
pub fn shm_name(name: &str) -> String {
    format!("/rtloop-{name}")
}

/// Where Linux shows the segment of agent `name`: `/dev/shm/rtloop-NAME`.
pub fn segment_path(name: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/rtloop-{name}"))
}

pub(crate) fn c_name(name: &str) -> CString {
    // A validated name has no NUL byte.
    CString::new(shm_name(name)).unwrap_or_default()
}

/// `shm_open` with `flags` (O_NOFOLLOW, O_NONBLOCK and O_CLOEXEC added) and `mode`.
///
/// `/dev/shm` is world-writable: anyone may plant a FIFO under an agent's name, and opening
/// a FIFO read-only without O_NONBLOCK waits for a writer that may never come. With
/// O_NONBLOCK the open returns at once; for a regular file it changes nothing. Callers then
/// refuse anything but a regular file ([`not_regular`]).
pub(crate) fn open(name: &str, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    let c = c_name(name);
    let flags = flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::shm_open(c.as_ptr(), flags, mode as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by shm_open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `shm_unlink` of agent `name`.
pub(crate) fn unlink(name: &str) -> io::Result<()> {
    let c = c_name(name);
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    if unsafe { libc::shm_unlink(c.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `fstat` of an open descriptor.
pub(crate) fn fstat(fd: &impl AsRawFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value to overwrite.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: `fd` is open, `st` is a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// What an opened segment is when it is not a regular file (`None`: it is one), worded to
/// follow "exists but" / "is".
pub(crate) fn not_regular(st: &libc::stat) -> Option<&'static str> {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => None,
        libc::S_IFIFO => Some("is a FIFO (named pipe), not a regular file"),
        libc::S_IFDIR => Some("is a directory, not a regular file"),
        libc::S_IFSOCK => Some("is a socket, not a regular file"),
        libc::S_IFCHR => Some("is a character device, not a regular file"),
        libc::S_IFBLK => Some("is a block device, not a regular file"),
        _ => Some("is not a regular file"),
    }
}

/// Whether process `pid` is known to be gone: `kill(pid, 0)` fails with ESRCH, or the
/// process is a zombie (it exited, and its parent has not reaped it yet). A pid we may not
/// signal (EPERM) is alive; pid 0 or negative is "no process" and not reported dead (nobody
/// to blame).
pub fn pid_dead(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 performs the permission and existence checks only.
    let r = unsafe { libc::kill(pid, 0) };
    if r != 0 {
        return io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    // kill(pid, 0) succeeds for a zombie too: a process that has exited but that its parent
    // has not waited for yet — a spine started by the agent itself, for one. It is dead all
    // the same.
    zombie(pid)
}

/// Whether process `pid` has exited and waits to be reaped (state `Z` or `X` in
/// `/proc/PID/stat`). Reads into a fixed buffer: no allocation.
fn zombie(pid: i32) -> bool {
    let mut path = [0u8; 32];
    let mut len = 0;
    let mut put = |bytes: &[u8]| {
        for &b in bytes {
            if len < path.len() - 1 {
                path[len] = b;
                len += 1;
            }
        }
    };
    put(b"/proc/");
    let mut digits = [0u8; 12];
    let mut n = pid.unsigned_abs();
    let mut d = digits.len();
    loop {
        d -= 1;
        digits[d] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    put(&digits[d..]);
    put(b"/stat");
    // SAFETY: `path` is NUL-terminated (zeroed, at most 31 bytes written).
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        // No /proc entry: the process is gone (or /proc is not mounted: then kill's answer
        // is all there is).
        return io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT);
    }
    let mut buf = [0u8; 512];
    // SAFETY: `fd` is open; `buf` is a valid buffer of its length.
    let got = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: `fd` is ours and open.
    unsafe { libc::close(fd) };
    let Ok(got) = usize::try_from(got) else { return false };
    // "PID (COMM) STATE ...": the name may hold spaces and parentheses, so the state is the
    // first field after the last ')'.
    let text = &buf[..got.min(buf.len())];
    let Some(close) = text.iter().rposition(|&b| b == b')') else { return false };
    matches!(text.get(close + 2), Some(b'Z' | b'X'))
}

/// This process's id.
pub(crate) fn my_pid() -> i32 {
    // SAFETY: getpid has no preconditions and cannot fail.
    unsafe { libc::getpid() }
}

/// CLOCK_MONOTONIC, ns: the clock `stamp_ns` and the lockstep wait use.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// This process's effective user id: the only owner an agent or a spine accepts for a
/// segment.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The name of user `uid` from the user database, if it has one. Not for a hot path (it may
/// read /etc/passwd or ask NSS).
pub fn user_name(uid: u32) -> Option<String> {
    // SAFETY: an all-zero `passwd` is a valid value to overwrite.
    let mut pw: libc::passwd = unsafe { core::mem::zeroed() };
    let mut result: *mut libc::passwd = core::ptr::null_mut();
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: every pointer is valid for the call; `buf` outlives the use of `pw`'s strings.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded: `pw_name` is a NUL-terminated string inside `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// Who owns a segment, as the refusals name them: "user nobody (uid 65534)", or "uid 4242"
/// when the user database has no name for it.
pub fn describe_owner(uid: u32) -> String {
    match user_name(uid) {
        Some(user) => format!("user {user} (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

/// A shared mapping of a segment, guarded against the file shrinking under it
/// ([`crate::guard`]), unmapped on drop.
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
    /// Its slot in the guard's table.
    slot: usize,
}

impl Mapping {
    /// Map `len` bytes of `fd` shared, read-write or read-only, and guard them.
    pub(crate) fn new(fd: &OwnedFd, len: usize, writable: bool) -> io::Result<Mapping> {
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: a fresh mapping at an address of the kernel's choosing; nothing aliases it yet.
        let p = unsafe { libc::mmap(core::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        match crate::guard::register(p.cast(), len) {
            Ok(slot) => Ok(Mapping { ptr: p.cast(), len, slot }),
            Err(e) => {
                // SAFETY: just mapped, unused.
                unsafe { libc::munmap(p, len) };
                Err(e)
            }
        }
    }

    /// The first byte (page-aligned).
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Whether the file shrank under the mapping: the guard replaced it with zero pages
    /// after an access past the file's end. One atomic load.
    pub(crate) fn lost(&self) -> bool {
        crate::guard::lost(self.slot)
    }

    /// Touch the mapping's last word (a file that shrank below it faults here, and the
    /// guard takes the fault), then [`Mapping::lost`]. Two atomic loads, no system call.
    pub(crate) fn probe(&self) -> bool {
        let last = (self.len / 8).saturating_sub(1) * 8;
        // SAFETY: `last` is an 8-aligned offset inside the mapping (page-aligned, at least
        // 8 bytes long); shared words are only accessed atomically.
        unsafe { (*self.ptr.add(last).cast::<AtomicU64>()).load(Ordering::Relaxed) };
        self.lost()
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Unguard before unmapping: the range may be reused by another mapping at once.
        crate::guard::release(self.slot);
        // SAFETY: `ptr`/`len` are exactly what mmap returned (the guard maps over the same
        // range only); nothing uses the mapping after its owner drops it.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
