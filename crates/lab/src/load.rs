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
//! What it must never do: run at real-time priority, keep running after the experiment, leave
//! its temporary files behind, or grow memory beyond 64 MiB per worker.

use std::io::Write as _;
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
}

impl Load {
    /// Start `n` workers (0: nothing runs). Fails only if a thread cannot be spawned; the
    /// workers already started are stopped then.
    pub fn start(n: usize) -> Result<Load, String> {
        let mut load = Load {
            shared: Arc::new(Shared::default()),
            workers: Vec::with_capacity(n),
            problems: Arc::new(std::sync::Mutex::new(Vec::new())),
        };
        for index in 0..n {
            let shared = Arc::clone(&load.shared);
            let problems = Arc::clone(&load.problems);
            let handle = std::thread::Builder::new()
                .name(format!("lab-load-{index}"))
                .spawn(move || worker(index, &shared, &problems))
                .map_err(|e| format!("cannot start load worker {index}: {e}"))?;
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

    /// Stop and join every worker; returns the problems they reported (nice refused, temp
    /// file not writable). Calling it twice is harmless.
    pub fn stop(&mut self) -> Vec<String> {
        self.shared.stop.store(true, Ordering::Relaxed);
        for handle in self.workers.drain(..) {
            let _ = handle.join();
        }
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

fn worker(index: usize, shared: &Shared, problems: &std::sync::Mutex<Vec<String>>) {
    if let Err(m) = become_background_thread() {
        report(problems, m);
    }
    shared.running.fetch_add(1, Ordering::Relaxed);
    // calloc'd: pages are only committed when touched below.
    let mut buffer = vec![0u8; BUFFER_BYTES];
    let path = std::env::temp_dir().join(format!("rtloop-lab-load-{}-{index}", std::process::id()));
    let mut file = match std::fs::File::create(&path) {
        Ok(f) => Some(f),
        Err(e) => {
            report(problems, format!("load worker {index}: no file I/O load, cannot create {}: {e}", path.display()));
            None
        }
    };
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
    let _ = std::fs::remove_file(&path);
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
