//! The real-time hand-off: every message is either written or counted as dropped, the
//! counts end up in the log itself, write failures are counted without stopping the drain,
//! and the real-time side of the API is allocation-free (checked with a counting allocator
//! that only counts on threads that switch it on).

use rtloop_tlog::format::{block_type, data_flags, read_i64, read_string, read_varuint, TlogError};
use rtloop_tlog::realtime::{spawn, STATS_RECORD, WAIT_STALL_LIMIT};
use rtloop_tlog::writer::{FileWriter, WriterOptions};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

// ----------------------------------------------------------------------------------------
/// Run `f` with counting on; returns its result and the allocator calls it made.
fn counting<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let (n, r) = rtloop_testkit::count_allocations(f);
    (r, n)
}

// ----------------------------------------------------------------------------------------
// Helpers

/// A `Write` whose bytes stay reachable after the writer thread consumed it.
#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A disk that fills up: accepts `capacity` bytes, then fails every write.
struct FillingDisk {
    inner: SharedBuf,
    capacity: usize,
}

impl Write for FillingDisk {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let used = self.inner.0.lock().unwrap().len();
        if used >= self.capacity {
            return Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "disk full"));
        }
        let n = buf.len().min(self.capacity - used);
        self.inner.write(&buf[..n])
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
struct Sample {
    seq: u64,
    value: f64,
}

/// The payloads of every data block of the record named `name`.
fn record_payloads(file: &[u8], name: &str) -> Vec<Vec<u8>> {
    assert!(file.starts_with(b"TLOG0003"));
    let mut pos = 9;
    let mut id = None;
    let mut out = Vec::new();
    while pos < file.len() {
        let kind = read_varuint(file, &mut pos).unwrap();
        let size = read_varuint(file, &mut pos).unwrap() as usize;
        let body = &file[pos..pos + size];
        pos += size;
        let mut p = 0;
        match kind {
            block_type::SCHEMA => {
                let this_id = read_varuint(body, &mut p).unwrap();
                read_varuint(body, &mut p).unwrap();
                if read_string(body, &mut p).unwrap() == name {
                    id = Some(this_id);
                }
            }
            block_type::DATA => {
                if Some(read_varuint(body, &mut p).unwrap()) != id {
                    continue;
                }
                let flags = read_varuint(body, &mut p).unwrap();
                if flags & data_flags::PREVIOUS_OFFSET != 0 {
                    read_varuint(body, &mut p).unwrap();
                }
                if flags & data_flags::TIMESTAMP != 0 {
                    read_i64(body, &mut p).unwrap();
                }
                if flags & data_flags::CHECKSUM != 0 {
                    p += 4;
                }
                let payload = if flags & data_flags::SNAPPY != 0 {
                    snap::raw::Decoder::new().decompress_vec(&body[p..]).unwrap()
                } else {
                    body[p..].to_vec()
                };
                out.push(payload);
            }
            _ => {}
        }
    }
    out
}

fn stats_in_file(file: &[u8]) -> (u64, u64, u64) {
    let payloads = record_payloads(file, STATS_RECORD);
    assert_eq!(payloads.len(), 1, "exactly one stats record");
    let p = &payloads[0];
    assert_eq!(p.len(), 24);
    let field = |i: usize| u64::from_le_bytes(p[i * 8..i * 8 + 8].try_into().unwrap());
    (field(0), field(1), field(2))
}

// ----------------------------------------------------------------------------------------
// Tests

#[test]
fn slow_writer_every_message_is_written_or_counted() {
    const TOTAL: u64 = 10_000;
    let sink = SharedBuf::default();
    let mut writer = FileWriter::new(sink.clone(), WriterOptions::default()).unwrap();
    let handle = writer.register::<Sample>("sample").unwrap();
    let (mut logger, thread) = spawn(64, writer, move |w: &mut FileWriter<SharedBuf>, seq: u64| {
        // A slow disk: far slower than the producer.
        std::thread::sleep(std::time::Duration::from_micros(20));
        w.write(&handle, 1_700_000_000_000_000 + seq as i64 * 100, &Sample { seq, value: seq as f64 * 0.5 })?;
        Ok(())
    })
    .unwrap();

    let mut accepted = 0;
    for seq in 0..TOTAL {
        if logger.log(seq) {
            accepted += 1;
        }
        if seq % 64 == 0 {
            std::thread::yield_now();
        }
    }
    let dropped_on_rt_side = logger.dropped();
    let stats = thread.finish().unwrap();
    assert_eq!(stats.written + stats.dropped, TOTAL, "{stats:?}");
    assert_eq!(stats.written, accepted);
    assert_eq!(stats.dropped, dropped_on_rt_side);
    assert!(stats.dropped > 0, "the slow writer should have forced drops: {stats:?}");
    assert_eq!(stats.write_errors, 0);

    let file = sink.0.lock().unwrap().clone();
    assert_eq!(stats.bytes, file.len() as u64);
    assert!(file.ends_with(b"TLOGIDEX"));
    assert_eq!(stats_in_file(&file), (stats.written, stats.dropped, 0));
    let samples = record_payloads(&file, "sample");
    assert_eq!(samples.len() as u64, stats.written);
    // Order is preserved.
    let seqs: Vec<u64> = samples.iter().map(|p| u64::from_le_bytes(p[..8].try_into().unwrap())).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn write_errors_are_counted_and_draining_continues() {
    const TOTAL: u64 = 2_000;
    let disk = SharedBuf::default();
    let full_at = 4_000;
    let writer =
        FileWriter::new(FillingDisk { inner: disk.clone(), capacity: full_at }, WriterOptions::default()).unwrap();
    let mut writer = writer;
    let handle = writer.register::<Sample>("sample").unwrap();
    let (mut logger, thread) = spawn(4096, writer, move |w: &mut FileWriter<FillingDisk>, seq: u64| {
        w.write(&handle, seq as i64, &Sample { seq, value: 0.0 }).map(|_| ())
    })
    .unwrap();
    for seq in 0..TOTAL {
        logger.log(seq);
        if seq % 256 == 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    let stats = thread.finish().unwrap();
    // Every message is accounted for; the stats record and index also failed (+2).
    assert_eq!(stats.written + stats.dropped + stats.lost, TOTAL, "{stats:?}");
    // Each lost message is a failed write; so are the stats record and the index.
    assert_eq!(stats.write_errors, stats.lost + 2, "{stats:?}");
    assert!(stats.written > 0 && stats.write_errors > 0, "{stats:?}");
    assert_eq!(stats.bytes, full_at as u64);
    assert_eq!(disk.0.lock().unwrap().len(), full_at);
}

#[test]
fn real_time_side_does_not_allocate() {
    let sink = SharedBuf::default();
    let writer = FileWriter::new(sink.clone(), WriterOptions::default()).unwrap();
    let written = Arc::new(AtomicU64::new(0));
    let handler_count = Arc::clone(&written);
    let (mut logger, thread) = spawn(16, writer, move |_w: &mut FileWriter<SharedBuf>, _msg: [u64; 8]| {
        handler_count.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(std::time::Duration::from_micros(50));
        Ok::<(), TlogError>(())
    })
    .unwrap();

    let rt = std::thread::spawn(move || {
        let ((accepted, dropped, seen_dropped), allocations) = counting(|| {
            let mut accepted = 0u64;
            let mut dropped = 0u64;
            // Many more messages than slots: exercises both the push and the full-ring path.
            for i in 0..5_000u64 {
                if logger.log([i; 8]) {
                    accepted += 1;
                } else {
                    dropped += 1;
                }
            }
            (accepted, dropped, logger.dropped())
        });
        assert_eq!(allocations, 0, "RtLogger::log/dropped allocated");
        assert!(dropped > 0);
        assert_eq!(seen_dropped, dropped);
        (accepted, dropped, logger)
    });
    let (accepted, dropped, logger) = rt.join().unwrap();

    let stats = thread.finish().unwrap();
    drop(logger);
    assert_eq!(stats.written, accepted);
    assert_eq!(stats.dropped, dropped);
    assert_eq!(written.load(Ordering::Relaxed), accepted);
}

#[test]
fn counting_allocator_does_count() {
    // Guards the test above against a counter that never counts.
    let (len, allocations) = counting(|| std::hint::black_box(vec![1u8; 100]).len());
    assert_eq!(len, 100);
    assert_eq!(allocations, 2, "one alloc, one dealloc");
}

#[test]
fn dropping_the_thread_handle_still_closes_the_file() {
    let sink = SharedBuf::default();
    let writer = FileWriter::new(sink.clone(), WriterOptions::default()).unwrap();
    let (mut logger, thread) =
        spawn(8, writer, |_w: &mut FileWriter<SharedBuf>, _msg: u8| Ok::<(), TlogError>(())).unwrap();
    assert!(logger.log(1));
    drop(thread);
    let file = sink.0.lock().unwrap().clone();
    assert!(file.ends_with(b"TLOGIDEX"));
    assert_eq!(stats_in_file(&file).0, 1);
}

// ----------------------------------------------------------------------------------------
// log_waiting: runs without a deadline wait for room instead of dropping

/// A handler that holds the writer thread inside its first message until `gate` opens.
fn gated_writer(
    capacity: usize,
    gate: &Arc<AtomicBool>,
) -> (SharedBuf, rtloop_tlog::realtime::RtLogger<u64>, rtloop_tlog::realtime::LogThread) {
    let sink = SharedBuf::default();
    let mut writer = FileWriter::new(sink.clone(), WriterOptions::default()).unwrap();
    let handle = writer.register::<Sample>("sample").unwrap();
    let gate = Arc::clone(gate);
    let (logger, thread) = spawn(capacity, writer, move |w: &mut FileWriter<SharedBuf>, seq: u64| {
        while !gate.load(Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        w.write(&handle, seq as i64, &Sample { seq, value: 0.0 }).map(|_| ())
    })
    .unwrap();
    (sink, logger, thread)
}

/// Log with the wait-free call until the ring is full (the writer is held inside a
/// message); returns how many were logged. None is dropped: `log` is only called on room.
fn fill_ring(logger: &mut rtloop_tlog::realtime::RtLogger<u64>) -> u64 {
    // The writer takes the first message and holds it: wait until it has, so the ring
    // stays full afterwards.
    assert!(logger.log(0));
    let capacity = logger.free_slots() + 1;
    while logger.free_slots() < capacity {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let mut seq = 1;
    while logger.free_slots() > 0 {
        assert!(logger.log(seq));
        seq += 1;
    }
    seq
}

#[test]
fn log_waiting_on_a_full_ring_waits_until_the_writer_drains() {
    let gate = Arc::new(AtomicBool::new(false));
    let (sink, mut logger, thread) = gated_writer(4, &gate);
    let filled = fill_ring(&mut logger);
    assert_eq!(logger.free_slots(), 0);
    let hold = std::time::Duration::from_millis(100);
    let opener = {
        let gate = Arc::clone(&gate);
        std::thread::spawn(move || {
            std::thread::sleep(hold);
            gate.store(true, Ordering::Release);
        })
    };
    let started = std::time::Instant::now();
    assert!(logger.log_waiting(filled), "the message waited for room and went in");
    let waited = started.elapsed();
    assert!(waited >= hold / 2, "it waited for the writer: {waited:?}");
    assert!(waited < WAIT_STALL_LIMIT, "and not for the stall limit: {waited:?}");
    // Many more than the ring holds: every one waits its turn, none is dropped.
    for seq in filled + 1..filled + 1_000 {
        assert!(logger.log_waiting(seq));
    }
    opener.join().unwrap();
    assert_eq!(logger.dropped(), 0);
    let stats = thread.finish().unwrap();
    assert_eq!((stats.written, stats.dropped, stats.lost), (filled + 1_000, 0, 0), "{stats:?}");
    let file = sink.0.lock().unwrap().clone();
    let seqs: Vec<u64> =
        record_payloads(&file, "sample").iter().map(|p| u64::from_le_bytes(p[..8].try_into().unwrap())).collect();
    assert_eq!(seqs, (0..filled + 1_000).collect::<Vec<_>>(), "every message, in order");
}

#[test]
fn log_waiting_drops_instead_of_hanging_when_the_writer_is_stopping() {
    let gate = Arc::new(AtomicBool::new(false));
    let (_sink, mut logger, thread) = gated_writer(4, &gate);
    let filled = fill_ring(&mut logger);
    // `finish` sets the stop flag, then waits for the (held) writer thread.
    let finisher = std::thread::spawn(move || thread.finish().unwrap());
    let started = std::time::Instant::now();
    assert!(!logger.log_waiting(filled), "a stopping writer never takes the message");
    assert!(started.elapsed() < WAIT_STALL_LIMIT / 2, "{:?}", started.elapsed());
    assert_eq!(logger.dropped(), 1);
    gate.store(true, Ordering::Release);
    let stats = finisher.join().unwrap();
    assert_eq!((stats.written, stats.dropped), (filled, 1), "{stats:?}");
}

#[test]
fn log_waiting_drops_instead_of_hanging_when_the_writer_thread_died() {
    let (mut logger, thread) = spawn(2, FileWriter::new(SharedBuf::default(), WriterOptions::default()).unwrap(), {
        |_w: &mut FileWriter<SharedBuf>, _seq: u64| -> Result<(), TlogError> {
            panic!("deliberate panic in the writer thread (log_waiting test)")
        }
    })
    .unwrap();
    // The writer takes the first message and dies; the rest fill the ring nobody drains.
    assert!(logger.log(0));
    std::thread::sleep(std::time::Duration::from_millis(50));
    while logger.free_slots() > 0 {
        assert!(logger.log(1));
    }
    let started = std::time::Instant::now();
    assert!(!logger.log_waiting(2));
    assert!(started.elapsed() < WAIT_STALL_LIMIT / 2, "{:?}", started.elapsed());
    assert_eq!(logger.dropped(), 1);
    assert!(thread.finish().is_err(), "the writer thread panicked");
}

#[test]
fn log_waiting_gives_up_on_a_stuck_writer_and_waits_again_once_it_moves() {
    let gate = Arc::new(AtomicBool::new(false));
    let (_sink, mut logger, thread) = gated_writer(4, &gate);
    let filled = fill_ring(&mut logger);
    let started = std::time::Instant::now();
    assert!(!logger.log_waiting(filled), "a writer that frees no slot is not waited for forever");
    let waited = started.elapsed();
    assert!(waited >= WAIT_STALL_LIMIT && waited < WAIT_STALL_LIMIT * 2, "{waited:?}");
    // Still stuck: the next call drops at once rather than stall the loop again.
    let started = std::time::Instant::now();
    assert!(!logger.log_waiting(filled + 1));
    assert!(started.elapsed() < WAIT_STALL_LIMIT / 4, "{:?}", started.elapsed());
    assert_eq!(logger.dropped(), 2);
    // The writer moves again: calls wait for room again, and nothing more is dropped.
    gate.store(true, Ordering::Release);
    while logger.free_slots() == 0 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    for seq in filled + 2..filled + 102 {
        assert!(logger.log_waiting(seq));
    }
    let stats = thread.finish().unwrap();
    assert_eq!((stats.written, stats.dropped), (filled + 100, 2), "{stats:?}");
}
