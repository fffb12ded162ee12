//! The hand-off from the real-time thread to a log-writer thread.
//!
//! The hot-path rule: the real-time thread must never wait on logging. [`RtLogger::log`]
//! pushes a message into a fixed-size wait-free ring (`rtrb`): no allocation, no lock, no
//! system call, bounded time. When the ring is full the message is dropped and counted —
//! never waited for. The writer thread polls the ring with a short sleep (so the real-time
//! side never has to wake it with a syscall), turns messages into records with the caller's
//! handler, and keeps draining even when writes fail (disk full): failures are counted, not
//! fatal. On [`LogThread::finish`] it drains what is left, writes a final
//! `rtloop_log_stats` record (so drops are in the log itself), writes the index and closes.
//! The stats record is stamped with the latest timestamp of the data, not the time of
//! closing, so it never stretches the log's time span.
//!
//! **Honest counts.** A message counts as [`LogStats::written`] only once every byte its
//! handler wrote has reached the file ([`FileWriter::landed_bytes`]), not when it entered the
//! writer's buffer: on a full disk, blocks accepted into the buffer may never get out of it.
//! Every message handed over ends up in exactly one of `written`, `dropped` (the ring was
//! full) and `lost` (its handler failed, or its bytes never left the buffer); `write_errors`
//! counts the failed operations, and `complete` says whether the log got its stats record,
//! index and final flush. So `written + dropped + lost` is every message logged.
//!
//! **What a crash loses.** The writer thread flushes the file at least every
//! [`FLUSH_INTERVAL`] while data is waiting, and a handler can flush at once after a message
//! that must not be lost (rtloop's events do). So a process killed with SIGKILL leaves
//! every message handed over up to about 100 ms (plus what was still in the ring) before the
//! kill, every event that was flushed, and a file that ends on a complete block or inside
//! the one being written; [`RtLogger::flushed`] says how many messages have reached the OS.
//! A power loss can also lose what the OS had not yet written to disk (no fsync is made).
//!
//! **Runs without a deadline.** A simulated-time (lockstep) run has no real-time deadline:
//! its clock stands still while the loop waits, and a dropped message would only make the
//! log depend on how fast the host was. [`RtLogger::log_waiting`] hands a message over like
//! [`RtLogger::log`], but waits for room in a full ring (sleeping [`WAIT_SLICE`] at a time)
//! instead of dropping — unless the writer thread is gone or stopping, or has freed no slot
//! for [`WAIT_STALL_LIMIT`]: then it drops and counts as `log` does, so it never hangs.
//!
//! Must never: block, allocate or make a system call in anything the real-time side calls
//! ([`RtLogger::log`], [`RtLogger::dropped`]); stop draining because a write failed.
//! ([`RtLogger::log_waiting`] sleeps, by design: it is for runs without a deadline only.)

use crate::format::TlogError;
use crate::writer::{FileWriter, RecordHandle};
use serde::Serialize;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long the writer thread sleeps when the ring is empty. Short enough that a ring of a
/// few hundred messages at kHz rates never fills while it sleeps.
pub const POLL_INTERVAL: Duration = Duration::from_millis(1);

/// The longest a handed-over message waits in the writer's buffer before it is flushed to
/// the file (the bound on what a crash of the process loses, besides the ring).
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// How long [`RtLogger::log_waiting`] sleeps between looks at a full ring.
pub const WAIT_SLICE: Duration = Duration::from_micros(20);

/// How long [`RtLogger::log_waiting`] waits for a writer that frees no slot at all before it
/// drops the message (and counts it) rather than hang behind a stuck disk. Once it has given
/// up, later calls drop at once while the ring stays full, and wait again as soon as the
/// writer takes a message.
pub const WAIT_STALL_LIMIT: Duration = Duration::from_secs(2);

/// Name of the record written last with the final counts.
pub const STATS_RECORD: &str = "rtloop_log_stats";

/// Counts shared by both sides.
#[derive(Debug, Default)]
struct Shared {
    dropped: AtomicU64,
    /// Messages in the file ([`LogStats::written`] so far).
    flushed: AtomicU64,
    stop: AtomicBool,
}

/// The real-time side: owns the ring's producer end.
pub struct RtLogger<M> {
    ring: rtrb::Producer<M>,
    shared: Arc<Shared>,
    /// [`log_waiting`](Self::log_waiting) gave up on a writer that freed no slot; it waits
    /// again once the ring has room.
    stalled: bool,
}

impl<M> RtLogger<M> {
    /// Queue `msg` for the writer thread. Wait-free; returns false (and counts a drop) when
    /// the ring is full. A dropped message is dropped here, on the caller's thread, so real-
    /// time callers should log plain `Copy` data (nothing whose `Drop` frees memory).
    #[inline]
    pub fn log(&mut self, msg: M) -> bool {
        match self.ring.push(msg) {
            Ok(()) => true,
            Err(_) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Queue `msg` for the writer thread, waiting for room when the ring is full: for runs
    /// without a real-time deadline (simulated time, which stands still while the caller
    /// waits), where every message should reach the log whatever the host's speed. Returns
    /// true once the message is in the ring.
    ///
    /// The wait is a loop of [`WAIT_SLICE`] sleeps. It does not wait, and drops the message
    /// and counts it as [`log`](Self::log) does (returning false), when the writer thread
    /// has ended (panicked) or is stopping ([`LogThread::finish`] or dropping the
    /// [`LogThread`]: it would never take the message), or when it has freed no slot for
    /// [`WAIT_STALL_LIMIT`] (a stuck disk); after such a stall, calls drop at once until the
    /// writer takes a message again. Failing writes do not stop it waiting: the writer keeps
    /// draining them (they count as `lost`).
    ///
    /// Never call it where a deadline must be kept: it sleeps (a system call) and may wait
    /// for the writer.
    pub fn log_waiting(&mut self, msg: M) -> bool {
        let mut msg = match self.ring.push(msg) {
            Ok(()) => {
                self.stalled = false;
                return true;
            }
            Err(rtrb::PushError::Full(msg)) => msg,
        };
        // Every failed push means the writer has freed no slot since the wait began.
        let waiting_since = Instant::now();
        while !self.stalled && !self.ring.is_abandoned() && !self.shared.stop.load(Ordering::Acquire) {
            std::thread::sleep(WAIT_SLICE);
            msg = match self.ring.push(msg) {
                Ok(()) => return true,
                Err(rtrb::PushError::Full(msg)) => msg,
            };
            self.stalled = waiting_since.elapsed() >= WAIT_STALL_LIMIT;
        }
        drop(msg);
        self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Messages dropped so far because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Messages in the file so far (every byte of them taken by the file, not waiting in a
    /// buffer): a crash of this process from now on leaves at least this many in the log.
    /// Wait-free.
    pub fn flushed(&self) -> u64 {
        self.shared.flushed.load(Ordering::Acquire)
    }

    /// Free slots in the ring right now.
    pub fn free_slots(&self) -> usize {
        self.ring.slots()
    }
}

/// Final counts of a logging session: `written + dropped + lost` is every message logged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LogStats {
    /// Messages in the file: their handler succeeded and every byte it wrote reached the
    /// file.
    pub written: u64,
    /// Messages dropped on the real-time side because the ring was full.
    pub dropped: u64,
    /// Messages taken from the ring that are not in the file: their handler failed, or what
    /// it wrote never got out of the buffer (the file kept refusing it).
    pub lost: u64,
    /// Failed write operations: messages whose handler failed, flushes, and the closing
    /// stats record, index and flush. Not a message count (see `lost`).
    pub write_errors: u64,
    /// Size of the file in bytes: what reached it.
    pub bytes: u64,
    /// The stats record, the index (when enabled) and the final flush reached the file: the
    /// log is closed and complete (`lost` can still be non-zero: see there).
    pub complete: bool,
    /// What the first failed write operation said (e.g. "No space left on device"), to tell
    /// the user why the counts above are not all `written`.
    pub first_error: Option<String>,
}

impl LogStats {
    fn count_write_error(&mut self, error: &TlogError) {
        self.write_errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(error.to_string());
        }
    }
}

/// The `rtloop_log_stats` record: the counts as of the end of the log.
#[derive(Debug, Clone, Copy, Default, Serialize)]
struct StatsRecord {
    written: u64,
    dropped: u64,
    write_errors: u64,
}

/// The writer thread; [`finish`](Self::finish) it to get the counts. Dropping it without
/// finishing still stops, drains and closes the file (the counts are then lost).
pub struct LogThread {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<LogStats>>,
}

/// Start the writer thread. `capacity` is the ring size in messages; `handler` turns one
/// message into records on the writer (it runs on the writer thread, so it may allocate,
/// and it may call [`FileWriter::flush`] after a message that must reach the file at once).
///
/// Registers the `rtloop_log_stats` record on `writer` before starting.
pub fn spawn<M, W, H>(
    capacity: usize,
    mut writer: FileWriter<W>,
    handler: H,
) -> Result<(RtLogger<M>, LogThread), TlogError>
where
    M: Send + 'static,
    W: Write + Send + 'static,
    H: FnMut(&mut FileWriter<W>, M) -> Result<(), TlogError> + Send + 'static,
{
    let stats_handle = writer.register::<StatsRecord>(STATS_RECORD)?;
    let (producer, consumer) = rtrb::RingBuffer::new(capacity.max(1));
    let shared = Arc::new(Shared::default());
    let thread_shared = Arc::clone(&shared);
    let thread = std::thread::Builder::new()
        .name("tlog-writer".into())
        .spawn(move || run_writer(consumer, writer, handler, stats_handle, &thread_shared))?;
    Ok((
        RtLogger { ring: producer, shared: Arc::clone(&shared), stalled: false },
        LogThread { shared, thread: Some(thread) },
    ))
}

impl LogThread {
    /// Stop the writer thread after it has drained the ring, written the stats record and
    /// closed the file. Messages logged after this call are not in the file.
    pub fn finish(mut self) -> Result<LogStats, TlogError> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<LogStats, TlogError> {
        self.shared.stop.store(true, Ordering::Release);
        let Some(thread) = self.thread.take() else {
            return Err(TlogError::Unsupported("log thread already finished".into()));
        };
        thread.join().map_err(|_| TlogError::Io(std::io::Error::other("the log writer thread panicked")))
    }
}

impl Drop for LogThread {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.stop_and_join();
        }
    }
}

fn run_writer<M, W, H>(
    mut ring: rtrb::Consumer<M>,
    mut writer: FileWriter<W>,
    mut handler: H,
    stats_handle: RecordHandle<StatsRecord>,
    shared: &Shared,
) -> LogStats
where
    W: Write,
    H: FnMut(&mut FileWriter<W>, M) -> Result<(), TlogError>,
{
    let mut stats = LogStats::default();
    let mut landing = Landing::default();
    // When the oldest unflushed byte was written (None: everything is in the file).
    let mut unflushed_since: Option<Instant> = None;
    // Bound what a crash loses: nothing waits in the buffer longer than FLUSH_INTERVAL, even
    // while the ring never runs empty.
    let mut flush_if_due = |writer: &mut FileWriter<W>, stats: &mut LogStats| {
        if writer.unflushed_bytes() == 0 {
            unflushed_since = None;
            return;
        }
        let since = *unflushed_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= FLUSH_INTERVAL {
            match writer.flush() {
                Ok(()) => unflushed_since = None,
                Err(e) => {
                    // Counted; the next attempt waits another interval.
                    stats.count_write_error(&e);
                    unflushed_since = Some(Instant::now());
                }
            }
        }
    };
    loop {
        // Read the flag before draining: everything pushed before `finish` is then drained
        // by this pass or an earlier one.
        let stopping = shared.stop.load(Ordering::Acquire);
        let mut handled_any = false;
        while let Ok(msg) = ring.pop() {
            handled_any = true;
            // A failed write loses this message only; keep draining so the real-time side
            // never backs up behind a broken disk.
            match handler(&mut writer, msg) {
                Ok(()) => landing.accepted(writer.bytes_written()),
                Err(e) => {
                    stats.count_write_error(&e);
                    stats.lost += 1;
                }
            }
            flush_if_due(&mut writer, &mut stats);
            landing.settle(&writer, &mut stats, shared);
        }
        if stopping {
            break;
        }
        flush_if_due(&mut writer, &mut stats);
        landing.settle(&writer, &mut stats, shared);
        if !handled_any {
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    stats.dropped = shared.dropped.load(Ordering::Relaxed);
    // What the record says is true if the record itself is in the file: every block before
    // it then is too (the buffer keeps order and drops nothing).
    let record = StatsRecord {
        written: stats.written + landing.waiting(),
        dropped: stats.dropped,
        write_errors: stats.write_errors,
    };
    // Stamped with the data's latest time: the time of closing would stretch the log's span.
    let stamp = writer.latest_timestamp_us().unwrap_or_else(now_us);
    let mut complete = true;
    if let Err(e) = writer.write(&stats_handle, stamp, &record) {
        stats.count_write_error(&e);
        complete = false;
    }
    if let Err(e) = writer.finish() {
        stats.count_write_error(&e);
        complete = false;
    }
    landing.settle(&writer, &mut stats, shared);
    // That was the last attempt: what is still buffered is lost, and is not written behind
    // the counts' back when the writer is dropped.
    stats.lost += landing.waiting();
    stats.bytes = writer.landed_bytes();
    stats.complete = complete;
    drop(writer.into_parts());
    stats
}

/// Messages whose bytes were accepted by the writer but may still wait in its buffer: the
/// end offset of each, oldest first. A message is written once the file has taken its end.
#[derive(Default)]
struct Landing {
    ends: std::collections::VecDeque<u64>,
}

impl Landing {
    /// A message's handler succeeded; its last byte is at `end` (exclusive).
    fn accepted(&mut self, end: u64) {
        self.ends.push_back(end);
    }

    /// Count every message now in the file as written, and publish the count.
    fn settle<W: Write>(&mut self, writer: &FileWriter<W>, stats: &mut LogStats, shared: &Shared) {
        let landed = writer.landed_bytes();
        let before = stats.written;
        while self.ends.front().is_some_and(|&end| end <= landed) {
            self.ends.pop_front();
            stats.written += 1;
        }
        if stats.written != before {
            shared.flushed.store(stats.written, Ordering::Release);
        }
    }

    /// Messages accepted but not (yet) in the file.
    fn waiting(&self) -> u64 {
        self.ends.len() as u64
    }
}

/// Wall-clock time as TLOG0003 stamps it: µs since the UNIX epoch (0 for a clock before it).
pub fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}
