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
//! **What a crash loses.** The writer thread flushes the file at least every
//! [`FLUSH_INTERVAL`] while data is waiting, and a handler can flush at once after a message
//! that must not be lost (rtloop's events do). So a process killed with SIGKILL leaves
//! every message handed over up to about 100 ms (plus what was still in the ring) before the
//! kill, every event that was flushed, and a file that ends on a complete block or inside
//! the one being written; [`RtLogger::flushed`] says how many messages have reached the OS.
//! A power loss can also lose what the OS had not yet written to disk (no fsync is made).
//!
//! Must never: block, allocate or make a system call in anything the real-time side calls
//! ([`RtLogger::log`], [`RtLogger::dropped`]); stop draining because a write failed.

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

/// Name of the record written last with the final counts.
pub const STATS_RECORD: &str = "rtloop_log_stats";

/// Counts shared by both sides.
#[derive(Debug, Default)]
struct Shared {
    dropped: AtomicU64,
    /// Messages written and flushed to the file.
    flushed: AtomicU64,
    stop: AtomicBool,
}

/// The real-time side: owns the ring's producer end.
pub struct RtLogger<M> {
    ring: rtrb::Producer<M>,
    shared: Arc<Shared>,
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

    /// Messages dropped so far because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Messages written and flushed to the file so far: a crash of this process from now on
    /// leaves at least this many in the log. Wait-free.
    pub fn flushed(&self) -> u64 {
        self.shared.flushed.load(Ordering::Acquire)
    }

    /// Free slots in the ring right now.
    pub fn free_slots(&self) -> usize {
        self.ring.slots()
    }
}

/// Final counts of a logging session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LogStats {
    /// Messages the handler wrote successfully.
    pub written: u64,
    /// Messages dropped on the real-time side because the ring was full.
    pub dropped: u64,
    /// Messages (and final stats/index writes) that failed to write; their data is lost.
    pub write_errors: u64,
    /// Size of the file in bytes (as accepted by the underlying writer).
    pub bytes: u64,
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
    Ok((RtLogger { ring: producer, shared: Arc::clone(&shared) }, LogThread { shared, thread: Some(thread) }))
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
    // Everything handled so far is in the file once nothing is left unflushed.
    let publish_flushed = |writer: &FileWriter<W>, stats: &LogStats| {
        if writer.unflushed_bytes() == 0 {
            shared.flushed.store(stats.written, Ordering::Release);
        }
    };
    // When the oldest unflushed byte was written (None: everything is in the file).
    let mut unflushed_since: Option<Instant> = None;
    // Bound what a crash loses: nothing waits in the buffer longer than FLUSH_INTERVAL, even
    // while the ring never runs empty.
    let mut flush_if_due = |writer: &mut FileWriter<W>, stats: &mut LogStats| {
        if writer.unflushed_bytes() == 0 {
            unflushed_since = None;
            publish_flushed(writer, stats);
            return;
        }
        let since = *unflushed_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= FLUSH_INTERVAL {
            match writer.flush() {
                Ok(()) => {
                    unflushed_since = None;
                    publish_flushed(writer, stats);
                }
                Err(_) => {
                    // Counted; the next attempt waits another interval.
                    stats.write_errors += 1;
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
                Ok(()) => stats.written += 1,
                Err(_) => stats.write_errors += 1,
            }
            flush_if_due(&mut writer, &mut stats);
        }
        if stopping {
            break;
        }
        flush_if_due(&mut writer, &mut stats);
        if !handled_any {
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    stats.dropped = shared.dropped.load(Ordering::Relaxed);
    let record = StatsRecord { written: stats.written, dropped: stats.dropped, write_errors: stats.write_errors };
    // Stamped with the data's latest time: the time of closing would stretch the log's span.
    let stamp = writer.latest_timestamp_us().unwrap_or_else(now_us);
    if writer.write(&stats_handle, stamp, &record).is_err() {
        stats.write_errors += 1;
    }
    match writer.finish() {
        Ok(bytes) => {
            stats.bytes = bytes;
            shared.flushed.store(stats.written, Ordering::Release);
        }
        Err(_) => {
            stats.write_errors += 1;
            stats.bytes = writer.bytes_written();
        }
    }
    stats
}

fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}
