//! Background load for experiments: the disturbance a robot computer sees from logging,
//! a browser or a compile while its control loop runs.
//!
//! [`Load::start`] spawns `n` worker threads at normal priority (SCHED_OTHER, nice 10). Each
//! alternates three kinds of work, each of which hurts latency differently: a CPU burn
//! (competes for the core), touching a 64 MiB buffer page by page and then handing the pages
//! back to the kernel (page faults, cache and TLB pressure, memory bandwidth), and writing and
//! fsyncing a small temporary file (block I/O, interrupts, kernel work). [`Load::stop`] (or
//! dropping the [`Load`]) stops and joins them and removes their files.
//!
//! Limits: the request is checked against the machine before any worker starts
//! ([`Capacity::check`]): at most [`WORKERS_PER_CPU`] workers per CPU this process may use, and
//! [`MEMORY_PER_WORKER`] each within half of the memory available (MemAvailable, or what the
//! cgroup's limit leaves when that is less). More is refused, not clamped: a smaller load than
//! asked for would be a different experiment.
//!
//! Temporary files: one private directory per [`Load`], `$TMPDIR/rtloop-lab-load-<pid>-<random>`,
//! created exclusively (mkdir, never through an existing name) with mode 0700; inside it each
//! worker's file is created exclusively by the `tempfile` crate, unnamed (O_TMPFILE) where the
//! file system allows, so there is no name to plant a symlink on and the kernel frees the file
//! however the process ends. The directory goes on stop and drop (normal end, error, panic
//! unwinding); on SIGINT, SIGTERM or SIGHUP a handler removes it before the signal takes its
//! usual course (or the handler that was there before ours runs); after a SIGKILL, where nothing
//! can run, the next [`Load::start`] removes every `rtloop-lab-load-<pid>-*` directory — and the
//! named files older versions left there — that belongs to this user and whose pid is no longer
//! alive ([`remove_leftovers`]), and says so.
//!
//! What it must never do: run at real-time priority, keep running after the experiment, leave
//! its temporary files behind, write through a name it did not create, start more workers than
//! the machine can carry, or grow memory beyond [`MEMORY_PER_WORKER`] per worker.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Memory each worker sweeps.
const BUFFER_BYTES: usize = 64 * 1024 * 1024;
/// Memory touched per round, so the stop flag is checked often.
const TOUCH_SLICE_BYTES: usize = 8 * 1024 * 1024;
/// CPU burn per round.
const BURN: Duration = Duration::from_millis(2);
/// Bytes written and fsynced per round.
const FILE_CHUNK_BYTES: usize = 4096;
/// The temporary file is rewound once it reaches this size.
const FILE_MAX_BYTES: u64 = 1024 * 1024;
/// Page size used for touching (a smaller guess than the real one only touches more often).
const PAGE_BYTES: usize = 4096;
/// Nice value of the workers: below normal tasks, so the load is what an unimportant
/// background job would be.
const WORKER_NICE: libc::c_int = 10;

/// Workers allowed per CPU: beyond a few per CPU, more workers only lengthen the run queue
/// (no new kind of disturbance) while each still costs its memory and a thread.
pub const WORKERS_PER_CPU: usize = 4;
/// Memory one worker can hold at once: its buffer, fully touched (or locked by `--mlock`), and
/// its file, which lives in memory when TMPDIR is a tmpfs.
pub const MEMORY_PER_WORKER: u64 = BUFFER_BYTES as u64 + FILE_MAX_BYTES;
/// The names of the private directories (and of the files older versions wrote) start with
/// this, followed by the owner's pid and `-`.
pub const NAME_PREFIX: &str = "rtloop-lab-load-";

/// What this machine can give the load: CPUs and memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// CPUs this process may run on.
    pub cpus: usize,
    /// Memory available to this process, bytes; `None` when unknown (then only CPUs limit).
    pub available_bytes: Option<u64>,
}

impl Capacity {
    /// This machine, now: the CPUs of this process's affinity (and cgroup CPU quota), and
    /// MemAvailable or the room left under the cgroup's memory limit, whichever is less.
    pub fn of_this_machine() -> Capacity {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let available_bytes = match (mem_available_bytes(), cgroup_room_bytes()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Capacity { cpus, available_bytes }
    }

    fn max_by_cpus(&self) -> usize {
        self.cpus.max(1).saturating_mul(WORKERS_PER_CPU)
    }

    fn max_by_memory(&self) -> usize {
        // Half of what is available: the experiment, the rest of the system and the page cache
        // need the other half.
        self.available_bytes.map_or(usize::MAX, |b| usize::try_from(b / 2 / MEMORY_PER_WORKER).unwrap_or(usize::MAX))
    }

    /// The most workers this machine can carry.
    pub fn max_workers(&self) -> usize {
        self.max_by_cpus().min(self.max_by_memory())
    }

    /// `Ok` when `workers` fit; else one sentence naming `--load`, the valid range and why.
    pub fn check(&self, workers: usize) -> Result<(), crate::check::CheckError> {
        let max = self.max_workers();
        if workers <= max {
            return Ok(());
        }
        let why = if self.max_by_cpus() <= self.max_by_memory() {
            let cpus = self.cpus.max(1);
            format!(
                "at most {WORKERS_PER_CPU} workers per CPU, and this process may use {}",
                crate::wording::count(cpus as u64, "CPU", "CPUs")
            )
        } else {
            format!(
                "each worker holds up to {} MiB of memory and the load may take half of the {} available",
                MEMORY_PER_WORKER >> 20,
                human_bytes(self.available_bytes.unwrap_or(0))
            )
        };
        Err(crate::check::CheckError::TooMuchLoad { workers, max, why })
    }
}

/// "21.8 GiB", "512 MiB".
fn human_bytes(bytes: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / GIB)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

/// MemAvailable from /proc/meminfo, bytes.
fn mem_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// What this cgroup's memory limit still leaves (limit − usage), bytes; `None` without a
/// limit. Usage includes page cache, so this errs on the small side — the safe side here.
fn cgroup_room_bytes() -> Option<u64> {
    let number = |path: &str| std::fs::read_to_string(path).ok()?.trim().parse::<u64>().ok();
    // cgroup v2 ("max" when unlimited, which does not parse: no limit).
    if std::path::Path::new("/sys/fs/cgroup/memory.max").exists() {
        let limit = number("/sys/fs/cgroup/memory.max")?;
        return Some(limit.saturating_sub(number("/sys/fs/cgroup/memory.current").unwrap_or(0)));
    }
    // cgroup v1: an "unlimited" limit is a huge number.
    let limit = number("/sys/fs/cgroup/memory/memory.limit_in_bytes").filter(|&l| l < 1 << 60)?;
    Some(limit.saturating_sub(number("/sys/fs/cgroup/memory/memory.usage_in_bytes").unwrap_or(0)))
}

/// What [`remove_leftovers`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leftovers {
    /// Directories and files removed.
    pub removed: Vec<PathBuf>,
    /// The dead processes they belonged to.
    pub pids: BTreeSet<u32>,
    /// Leftovers that could not be removed, one sentence each.
    pub failures: Vec<String>,
}

impl Leftovers {
    /// One sentence per thing the report must say: what was removed, what could not be.
    fn summary(&self, base: &Path) -> Vec<String> {
        let mut out = Vec::new();
        if !self.removed.is_empty() {
            let pids: Vec<String> = self.pids.iter().map(u32::to_string).collect();
            let runs = if pids.len() == 1 { "a killed lab run (pid" } else { "killed lab runs (pids" };
            out.push(format!(
                "removed {} left by {runs} {}) from {}",
                crate::wording::count(self.removed.len() as u64, "temporary load item", "temporary load items"),
                pids.join(", "),
                base.display()
            ));
        }
        out.extend(self.failures.iter().cloned());
        out
    }
}

/// The pid in a name `rtloop-lab-load-<pid>-<suffix>`, or `None` when the name is not ours.
fn owner_pid(name: &str) -> Option<u32> {
    let (pid, suffix) = name.strip_prefix(NAME_PREFIX)?.split_once('-')?;
    if suffix.is_empty() || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok().filter(|&p| p > 0)
}

/// Whether a process with this pid exists (EPERM: it exists but is not ours to signal).
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        // Not a pid this system hands out: not ours, leave it alone.
        return true;
    };
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Remove what killed lab runs left in `base`: entries named `rtloop-lab-load-<pid>-*` that
/// belong to this user, whose pid is not alive, and that are a directory (ours) or a regular
/// file (older versions). Symlinks and anything else are never followed or removed; a live
/// pid's entries are left alone (its run is still going, or the pid was reused — then the
/// entry is removed by a later start).
pub fn remove_leftovers(base: &Path) -> Leftovers {
    let mut found = Leftovers::default();
    let Ok(entries) = std::fs::read_dir(base) else { return found };
    let me = std::process::id();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name.to_str().and_then(owner_pid) else { continue };
        if pid == me || process_alive(pid) {
            continue;
        }
        let path = entry.path();
        // lstat: a symlink is seen as a symlink, never as what it points to.
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if meta.uid() != uid {
            continue;
        }
        let removed = if meta.file_type().is_dir() {
            // Does not follow symlinks inside the directory either.
            std::fs::remove_dir_all(&path)
        } else if meta.file_type().is_file() {
            std::fs::remove_file(&path)
        } else {
            continue;
        };
        match removed {
            Ok(()) => {
                found.removed.push(path);
                found.pids.insert(pid);
            }
            Err(e) => found.failures.push(format!("cannot remove {}, left by a killed lab run: {e}", path.display())),
        }
    }
    found
}

/// A new private directory for one load's files: created exclusively, mode 0700, named for
/// this process so a later run can tell whose it is.
fn private_dir(base: &Path) -> std::io::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix(&format!("{NAME_PREFIX}{}-", std::process::id()))
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(base)
}

/// Counters the workers share with the [`Load`] handle.
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    /// Workers currently inside their loop.
    running: AtomicUsize,
    /// Rounds (burn + touch + write) completed by all workers.
    rounds: AtomicU64,
}

/// Running background load; stopped on [`stop`](Self::stop) or drop.
pub struct Load {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Problems the workers' setup reported (e.g. nice refused); collected at stop.
    problems: Arc<std::sync::Mutex<Vec<String>>>,
    /// The private directory of the workers' files.
    dir: Option<tempfile::TempDir>,
    /// Removes `dir` if a signal ends the process; dropped after `dir` is gone.
    signal_cleanup: Option<signal_cleanup::Registration>,
}

impl Load {
    /// Start `n` workers (0: nothing runs, nothing is created). Fails when `n` is more than
    /// this machine can carry ([`Capacity::check`]) or a thread cannot be spawned; the workers
    /// already started are stopped then.
    pub fn start(n: usize) -> Result<Load, crate::Error> {
        Capacity::of_this_machine().check(n)?;
        let mut load = Load {
            shared: Arc::new(Shared::default()),
            workers: Vec::with_capacity(n),
            problems: Arc::new(std::sync::Mutex::new(Vec::new())),
            dir: None,
            signal_cleanup: None,
        };
        if n == 0 {
            return Ok(load);
        }
        let base = std::env::temp_dir();
        for note in remove_leftovers(&base).summary(&base) {
            report(&load.problems, note);
        }
        match private_dir(&base) {
            Ok(dir) => {
                load.signal_cleanup = signal_cleanup::register(dir.path());
                if load.signal_cleanup.is_none() {
                    report(
                        &load.problems,
                        format!(
                            "too many loads at once: {} is removed at the end, but not if a signal ends the process",
                            dir.path().display()
                        ),
                    );
                }
                load.dir = Some(dir);
            }
            Err(e) => report(
                &load.problems,
                format!("no file I/O load: cannot create a private directory in {}: {e}", base.display()),
            ),
        }
        let dir: Option<Arc<Path>> = load.dir.as_ref().map(|d| Arc::from(d.path()));
        for index in 0..n {
            let shared = Arc::clone(&load.shared);
            let problems = Arc::clone(&load.problems);
            let dir = dir.clone();
            let handle = std::thread::Builder::new()
                .name(format!("lab-load-{index}"))
                .spawn(move || worker(index, &shared, &problems, dir.as_deref()))
                .map_err(|e| crate::Error::os(format!("cannot start load worker {index}"), e))?;
            load.workers.push(handle);
        }
        Ok(load)
    }

    /// Workers currently running their loop.
    pub fn running_workers(&self) -> usize {
        self.shared.running.load(Ordering::Relaxed)
    }

    /// Rounds of work completed so far by all workers.
    pub fn rounds(&self) -> u64 {
        self.shared.rounds.load(Ordering::Relaxed)
    }

    /// Workers started.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Stop and join every worker and remove their directory; returns the problems they
    /// reported (nice refused, temp file not writable, leftovers of killed runs removed).
    /// Calling it twice is harmless.
    pub fn stop(&mut self) -> Vec<String> {
        self.shared.stop.store(true, Ordering::Relaxed);
        for handle in self.workers.drain(..) {
            let _ = handle.join();
        }
        if let Some(dir) = self.dir.take() {
            let path = dir.path().to_path_buf();
            match dir.close() {
                // A signal handler may already have removed it.
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    report(&self.problems, format!("cannot remove the load's directory {}: {e}", path.display()))
                }
                _ => {}
            }
        }
        // Only now: until the directory is gone, a signal must still remove it.
        self.signal_cleanup = None;
        self.problems.lock().map(|mut p| std::mem::take(&mut *p)).unwrap_or_default()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop();
    }
}

fn report(problems: &std::sync::Mutex<Vec<String>>, message: String) {
    if let Ok(mut p) = problems.lock() {
        p.push(message);
    }
}

/// Make the calling thread an ordinary, low-priority thread whatever it inherited.
fn become_background_thread() -> Result<(), String> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) } != 0 {
        return Err(format!("load worker could not select SCHED_OTHER: {}", std::io::Error::last_os_error()));
    }
    // On Linux, nice applies per thread when given the thread id.
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: plain syscall on our own thread id.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, WORKER_NICE) } != 0 {
        return Err(format!("load worker could not set nice {WORKER_NICE}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn worker(index: usize, shared: &Shared, problems: &std::sync::Mutex<Vec<String>>, dir: Option<&Path>) {
    if let Err(m) = become_background_thread() {
        report(problems, m);
    }
    shared.running.fetch_add(1, Ordering::Relaxed);
    // calloc'd: pages are only committed when touched below.
    let mut buffer = vec![0u8; BUFFER_BYTES];
    // Created exclusively inside our private directory, unnamed where the file system allows:
    // closing it (or the process dying) frees it.
    let mut file = dir.and_then(|dir| match tempfile::tempfile_in(dir) {
        Ok(f) => Some(f),
        Err(e) => {
            report(
                problems,
                format!("load worker {index}: no file I/O load, cannot create a file in {}: {e}", dir.display()),
            );
            None
        }
    });
    let chunk = [0x5au8; FILE_CHUNK_BYTES];
    let mut written: u64 = 0;
    let mut offset = 0usize;
    let mut spin_state: u64 = index as u64 + 1;
    while !shared.stop.load(Ordering::Relaxed) {
        // CPU burn: arithmetic the optimiser cannot drop (its result feeds the buffer).
        let start = Instant::now();
        while start.elapsed() < BURN {
            for _ in 0..1000 {
                spin_state = spin_state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            }
        }
        // Memory: one write per page, so every page is faulted in.
        let end = (offset + TOUCH_SLICE_BYTES).min(BUFFER_BYTES);
        for page in (offset..end).step_by(PAGE_BYTES) {
            buffer[page] = buffer[page].wrapping_add(spin_state as u8);
        }
        offset = end;
        if offset >= BUFFER_BYTES {
            offset = 0;
            release_pages(&mut buffer);
        }
        // File I/O: a write the disk must see before we go on.
        if let Some(f) = file.as_mut() {
            if written >= FILE_MAX_BYTES {
                let _ = f.set_len(0);
                let _ = std::io::Seek::rewind(f);
                written = 0;
            }
            if f.write_all(&chunk).is_ok() && f.sync_data().is_ok() {
                written += FILE_CHUNK_BYTES as u64;
            }
        }
        shared.rounds.fetch_add(1, Ordering::Relaxed);
    }
    drop(file);
    shared.running.fetch_sub(1, Ordering::Relaxed);
}

/// Give the buffer's pages back to the kernel so the next sweep faults them in again (the
/// expensive part of memory load). Fails harmlessly when the memory is mlocked.
fn release_pages(buffer: &mut [u8]) {
    // SAFETY: the range is exactly our own live allocation; MADV_DONTNEED on private anonymous
    // memory only makes later reads see zeros, which the worker does not care about.
    unsafe {
        libc::madvise(buffer.as_mut_ptr().cast(), buffer.len(), libc::MADV_DONTNEED);
    }
}

/// Removal of the loads' private directories when SIGINT, SIGTERM or SIGHUP ends the process.
///
/// While at least one directory is registered, a handler is installed for each of these
/// signals that was not ignored. It removes every registered directory with rmdir(2) — they
/// are empty, their files being unnamed — and then lets the signal have the effect it would
/// have had without us: the handler that was installed before ours is called, or, when that
/// was the default action, the default is restored and the signal raised again (so the process
/// still ends "killed by SIGINT", with the shell's status 130). The last registration to go
/// puts the previous handlers back (unless someone replaced ours meanwhile).
///
/// Only async-signal-safe calls run in the handler (rmdir, sigaction, raise, errno); the
/// registered paths are C strings in a fixed table of atomic pointers, freed only once no
/// handler can still be reading them.
mod signal_cleanup {
    use std::ffi::{c_char, c_int, c_void, CString};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::ptr::null_mut;
    use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::SeqCst};
    use std::sync::Mutex;

    const SIGNALS: [c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
    /// Loads that can run at once with signal cleanup (more still clean up on a normal end).
    const SLOTS: usize = 64;

    static DIRS: [AtomicPtr<c_char>; SLOTS] = [const { AtomicPtr::new(null_mut()) }; SLOTS];
    /// Handlers currently between reading a path and being done with it.
    static HANDLERS_RUNNING: AtomicUsize = AtomicUsize::new(0);
    /// Per signal, the action before ours: its handler and flags, for the handler to chain to.
    static PREVIOUS_HANDLER: [AtomicUsize; 3] = [const { AtomicUsize::new(libc::SIG_DFL) }; 3];
    static PREVIOUS_FLAGS: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

    struct Installed {
        registrations: usize,
        /// The full previous action of each signal we replaced, to restore.
        previous: [Option<libc::sigaction>; 3],
    }

    static INSTALLED: Mutex<Installed> = Mutex::new(Installed { registrations: 0, previous: [None; 3] });

    type SigactionFn = extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void);

    fn our_handler() -> libc::sighandler_t {
        let f: SigactionFn = remove_dirs_then_continue;
        f as libc::sighandler_t
    }

    /// A directory removed by the handler while this lives.
    pub struct Registration {
        slot: usize,
    }

    /// Register `dir`; `None` when the table is full or the path has a NUL byte.
    pub fn register(dir: &Path) -> Option<Registration> {
        let raw = CString::new(dir.as_os_str().as_bytes()).ok()?.into_raw();
        let Some(slot) = DIRS.iter().position(|s| s.compare_exchange(null_mut(), raw, SeqCst, SeqCst).is_ok()) else {
            // SAFETY: `raw` comes from into_raw above and was never published.
            drop(unsafe { CString::from_raw(raw) });
            return None;
        };
        let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        if installed.registrations == 0 {
            install(&mut installed);
        }
        installed.registrations += 1;
        Some(Registration { slot })
    }

    impl Drop for Registration {
        fn drop(&mut self) {
            let raw = DIRS[self.slot].swap(null_mut(), SeqCst);
            // A handler may have read the pointer just before the swap; it is done with it
            // once no handler is running (new ones see null).
            while HANDLERS_RUNNING.load(SeqCst) != 0 {
                std::hint::spin_loop();
            }
            if !raw.is_null() {
                // SAFETY: `raw` came from CString::into_raw in register and is unpublished now.
                drop(unsafe { CString::from_raw(raw) });
            }
            let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
            installed.registrations -= 1;
            if installed.registrations == 0 {
                uninstall(&mut installed);
            }
        }
    }

    fn install(installed: &mut Installed) {
        for (i, &signal) in SIGNALS.iter().enumerate() {
            installed.previous[i] = None;
            // SAFETY: an all-zero sigaction is a valid value to be overwritten; with a null new
            // action, sigaction only reports the current one into `old`.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: see above; `old` is a valid, writable sigaction.
            if unsafe { libc::sigaction(signal, std::ptr::null(), &mut old) } != 0 || old.sa_sigaction == libc::SIG_IGN
            {
                // An ignored signal does not end the process: nothing to clean up for it.
                continue;
            }
            PREVIOUS_HANDLER[i].store(old.sa_sigaction, SeqCst);
            PREVIOUS_FLAGS[i].store(old.sa_flags as usize, SeqCst);
            // SAFETY: as above, an all-zero sigaction is valid before the fields are set.
            let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
            ours.sa_sigaction = our_handler();
            // Keep the previous handler's restart behaviour: a handler that relies on EINTR
            // (udp-echo's) must still get it when we chain to it.
            ours.sa_flags = libc::SA_SIGINFO | (old.sa_flags & libc::SA_RESTART);
            // SAFETY: `ours.sa_mask` is a valid sigset_t to initialise; the new action is fully
            // initialised and its handler only makes async-signal-safe calls.
            let installed_ok = unsafe {
                libc::sigemptyset(&mut ours.sa_mask);
                libc::sigaction(signal, &ours, null_mut()) == 0
            };
            if installed_ok {
                installed.previous[i] = Some(old);
            }
        }
    }

    fn uninstall(installed: &mut Installed) {
        for (i, &signal) in SIGNALS.iter().enumerate() {
            let Some(old) = installed.previous[i].take() else { continue };
            // SAFETY: as in install: query the current action into a valid sigaction.
            let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: see above.
            let queried = unsafe { libc::sigaction(signal, std::ptr::null(), &mut current) } == 0;
            if queried && current.sa_sigaction == our_handler() {
                // SAFETY: `old` is the action the kernel gave us for this signal.
                unsafe { libc::sigaction(signal, &old, null_mut()) };
            }
        }
    }

    extern "C" fn remove_dirs_then_continue(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
        // SAFETY: __errno_location returns this thread's errno, valid for the thread's life.
        let errno = unsafe { *libc::__errno_location() };
        HANDLERS_RUNNING.fetch_add(1, SeqCst);
        for slot in &DIRS {
            let path = slot.load(SeqCst);
            if !path.is_null() {
                // SAFETY: a published path stays allocated until its Registration saw
                // HANDLERS_RUNNING at 0 after unpublishing it; rmdir is async-signal-safe.
                unsafe { libc::rmdir(path) };
            }
        }
        HANDLERS_RUNNING.fetch_sub(1, SeqCst);
        // SAFETY: as above; the interrupted code must see its own errno again.
        unsafe { *libc::__errno_location() = errno };
        let Some(i) = SIGNALS.iter().position(|&s| s == signal) else { return };
        let previous = PREVIOUS_HANDLER[i].load(SeqCst);
        let flags = PREVIOUS_FLAGS[i].load(SeqCst) as c_int;
        if previous == libc::SIG_DFL {
            // The default action, as if we had never been here: it is delivered as soon as
            // this handler returns (the signal is blocked while its handler runs).
            // SAFETY: an all-zero sigaction with SIG_DFL is a valid action; sigaction and
            // raise are async-signal-safe.
            unsafe {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, null_mut());
                libc::raise(signal);
            }
        } else if previous != libc::SIG_IGN {
            if flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the kernel held this address as an SA_SIGINFO handler for `signal`.
                let chained: SigactionFn = unsafe { std::mem::transmute::<libc::sighandler_t, SigactionFn>(previous) };
                chained(signal, info, context);
            } else {
                // SAFETY: the kernel held this address as a plain handler for `signal`.
                let chained: extern "C" fn(c_int) =
                    unsafe { std::mem::transmute::<libc::sighandler_t, extern "C" fn(c_int)>(previous) };
                chained(signal);
            }
        }
    }
}
