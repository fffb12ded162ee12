//! A log on a disk that fills up: the writer thread's counts must say what is in the file,
//! not what entered the writer's buffer. The destination here takes `capacity` bytes and then
//! refuses every write (like ENOSPC), behind the same 64 KiB buffer `FileWriter::create` uses.
//! The file it leaves is read back and its items counted: that is the truth the counts must
//! match.

use rtloop_tlog::reader::{FileReader, ItemFilter};
use rtloop_tlog::realtime::spawn;
use rtloop_tlog::writer::{FileWriter, WriterOptions, FILE_BUFFER_BYTES};
use std::io::Write;
use std::sync::{Arc, Mutex};

/// A disk that holds `capacity` bytes: a write that does not fit is cut short, and once it
/// is full every write fails with "no space left".
#[derive(Clone)]
struct FillingDisk {
    bytes: Arc<Mutex<Vec<u8>>>,
    capacity: usize,
}

impl FillingDisk {
    fn new(capacity: usize) -> Self {
        FillingDisk { bytes: Arc::default(), capacity }
    }

    fn contents(&self) -> Vec<u8> {
        self.bytes.lock().unwrap().clone()
    }
}

impl Write for FillingDisk {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut bytes = self.bytes.lock().unwrap();
        let room = self.capacity - bytes.len();
        if room == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left on device"));
        }
        let n = buf.len().min(room);
        bytes.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
struct Sample {
    seq: u64,
    values: [f64; 16],
}

/// The `sample` items that read back from `file`, in order.
fn samples_in(file: Vec<u8>) -> Vec<u64> {
    let reader = FileReader::from_bytes(file).unwrap();
    let filter = ItemFilter { record: Some("sample".into()), ..ItemFilter::default() };
    reader
        .items(filter)
        .filter_map(Result::ok)
        .map(|item| reader.decode_item(&item).unwrap().to_json()["seq"].as_u64().unwrap())
        .collect()
}

/// Log `total` samples through the real-time hand-off onto a disk of `capacity` bytes.
fn log_onto(capacity: usize, total: u64) -> (rtloop_tlog::realtime::LogStats, FillingDisk) {
    let disk = FillingDisk::new(capacity);
    let mut writer = FileWriter::with_buffer(disk.clone(), WriterOptions::default(), FILE_BUFFER_BYTES).unwrap();
    let handle = writer.register::<Sample>("sample").unwrap();
    let (mut logger, thread) = spawn(1 << 14, writer, move |w: &mut FileWriter<FillingDisk>, seq: u64| {
        // Distinct values so Snappy cannot shrink the blocks to nothing.
        let values = std::array::from_fn(|i| (seq * 16 + i as u64) as f64 * 0.37);
        w.write(&handle, 1_700_000_000_000_000 + seq as i64 * 1000, &Sample { seq, values })?;
        Ok(())
    })
    .unwrap();
    for seq in 0..total {
        // The ring holds every message: nothing is dropped, so every loss is a write loss.
        assert!(logger.log(seq), "the ring was sized to hold every message");
    }
    let stats = thread.finish().unwrap();
    (stats, disk)
}

#[test]
fn on_a_full_disk_written_counts_only_what_reached_the_file() {
    const TOTAL: u64 = 3_000;
    // Far less than the ~450 KB the samples need, and not a multiple of the buffer size.
    let capacity = 200 * 1024 + 123;
    let (stats, disk) = log_onto(capacity, TOTAL);
    let file = disk.contents();
    assert_eq!(file.len(), capacity, "the disk filled up");
    let in_file = samples_in(file);
    assert!(!in_file.is_empty() && (in_file.len() as u64) < TOTAL, "{} samples in the file", in_file.len());
    assert_eq!(in_file, (0..in_file.len() as u64).collect::<Vec<_>>(), "the file holds a prefix, in order");

    assert_eq!(stats.written, in_file.len() as u64, "written counts what is in the file: {stats:?}");
    assert_eq!(stats.dropped, 0, "{stats:?}");
    assert_eq!(stats.written + stats.dropped + stats.lost, TOTAL, "every message is accounted for: {stats:?}");
    assert!(stats.lost > 0 && stats.write_errors > 0, "{stats:?}");
    assert_eq!(stats.bytes, capacity as u64, "bytes counts what is in the file: {stats:?}");
    assert!(!stats.complete, "the stats record and the index never reached the file: {stats:?}");
}

#[test]
fn on_a_disk_with_room_every_count_is_exact_and_the_log_is_complete() {
    const TOTAL: u64 = 2_000;
    let (stats, disk) = log_onto(64 << 20, TOTAL);
    let file = disk.contents();
    assert_eq!(stats.bytes, file.len() as u64);
    assert_eq!(samples_in(file).len() as u64, TOTAL);
    assert_eq!((stats.written, stats.dropped, stats.lost, stats.write_errors), (TOTAL, 0, 0, 0), "{stats:?}");
    assert!(stats.complete, "{stats:?}");
}

#[test]
fn a_buffered_writer_says_which_bytes_reached_the_destination() {
    let disk = FillingDisk::new(20);
    let mut writer = FileWriter::with_buffer(disk.clone(), WriterOptions::default(), 1024).unwrap();
    let handle = writer.register::<Sample>("sample").unwrap();
    writer.write(&handle, 1, &Sample::default()).unwrap();
    assert_eq!(writer.landed_bytes(), 0, "everything is still in the buffer");
    assert_eq!(writer.unflushed_bytes(), writer.bytes_written());
    assert!(writer.bytes_written() > 20);
    assert!(writer.flush().is_err(), "the disk holds only 20 bytes");
    assert_eq!(writer.landed_bytes(), 20);
    assert_eq!(disk.contents().len(), 20);
    assert_eq!(writer.unflushed_bytes(), writer.bytes_written() - 20, "the rest waits, in order");
    let accepted = writer.bytes_written();
    let (_, unwritten) = writer.into_parts();
    assert_eq!(20 + unwritten.len() as u64, accepted, "into_parts hands back exactly what never landed");
}
