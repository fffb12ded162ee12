//! TLOG0003 performance: the real-time hand-off, writer throughput (beside the `mcap`
//! crate's writer on the same payloads), and seeking by time in a 1 GiB log.
//!
//! `cargo bench -p rtloop-tlog --bench tlog` (set TLOG_BENCH_GIB=0 to skip the 1 GiB part).

use rtloop_tlog::reader::FileReader;
use rtloop_tlog::writer::{FileWriter, WriterOptions};
use std::io::Write;
use std::time::Instant;

fn now_ns() -> u64 {
    rt_now()
}

fn rt_now() -> u64 {
    let t = Instant::now();
    // Instant has no absolute value; measure against a process-wide origin.
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    t.duration_since(*ORIGIN.get_or_init(Instant::now)).as_nanos() as u64
}

/// Telemetry-like bytes: slowly varying little-endian f64s, so compression sees what a
/// robot's log gives it (neither random noise nor constant zeros).
fn payload(len: usize, k: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut i = 0u64;
    while out.len() < len {
        let x = ((k as f64) * 0.001 + i as f64).sin() * 10.0;
        out.extend_from_slice(&x.to_le_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

fn pct(v: &mut [u64], q: f64) -> f64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q) as usize] as f64 / 1000.0
}

fn handoff() {
    let path = std::env::temp_dir().join(format!("tlog-bench-handoff-{}.tlog", std::process::id()));
    let mut writer = FileWriter::create(&path).unwrap();
    let id = writer.allocate_id("blob");
    // An object with no fields: the payload is opaque bytes to this benchmark.
    writer.write_schema(id, b"\x10\x00\x00\x00\x00\x00\x00").unwrap();
    let (mut logger, thread) =
        rtloop_tlog::realtime::spawn(4096, writer, move |w, m: [u8; 1024]| w.write_data(id, Some(0), &m).map(|_| ()))
            .unwrap();
    let msg: [u8; 1024] = payload(1024, 1).try_into().unwrap();
    let mut samples = Vec::with_capacity(100_000);
    for k in 0..100_000u64 {
        let t0 = now_ns();
        logger.log(msg);
        samples.push(now_ns() - t0);
        if k % 1000 == 999 {
            // About 1 kHz worth of records per millisecond burst, like a fast control loop.
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
    }
    let st = thread.finish().unwrap();
    println!(
        "hand-off of one 1 KiB record on the caller's thread: p50 {:.3} µs  p99 {:.3} µs  max {:.3} µs  ({} written, {} dropped)",
        pct(&mut samples, 0.5),
        pct(&mut samples, 0.99),
        pct(&mut samples, 1.0),
        st.written,
        st.dropped
    );
    let _ = std::fs::remove_file(path);
}

fn throughput(size: usize, snappy: bool) {
    let n = (64 << 20) / size; // 64 MiB of records
    let records: Vec<Vec<u8>> = (0..256).map(|k| payload(size, k)).collect();
    let path = std::env::temp_dir().join(format!("tlog-bench-{size}-{snappy}-{}.tlog", std::process::id()));
    let opts = WriterOptions { snappy, ..WriterOptions::default() };
    let mut w = FileWriter::create_with(&path, opts).unwrap();
    let id = w.allocate_id("blob");
    w.write_schema(id, b"\x10\x00\x00\x00\x00\x00\x00").unwrap();
    let t0 = Instant::now();
    for k in 0..n {
        w.write_data(id, Some(1_700_000_000_000_000 + k as i64 * 1000), &records[k % 256]).unwrap();
    }
    let bytes = w.bytes_written();
    w.close().unwrap();
    let dt = t0.elapsed().as_secs_f64();
    println!(
        "tlog writer, {size:>4} B records, snappy {:<3}: {:>9.0} records/s  {:>7.1} MB/s of payload  (file {:.1} MB)",
        if snappy { "on" } else { "off" },
        n as f64 / dt,
        (n * size) as f64 / dt / 1e6,
        bytes as f64 / 1e6
    );
    let _ = std::fs::remove_file(path);

    // The same payloads through the mcap crate's writer (no compression, one channel).
    let path = std::env::temp_dir().join(format!("mcap-bench-{size}-{}.mcap", std::process::id()));
    let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut m = mcap::WriteOptions::new().compression(None).create(file).unwrap();
    let schema = m.add_schema("blob", "jsonschema", b"{}").unwrap();
    let channel = m.add_channel(schema, "blob", "json", &Default::default()).unwrap();
    let t0 = Instant::now();
    for k in 0..n {
        let header = mcap::records::MessageHeader {
            channel_id: channel,
            sequence: k as u32,
            log_time: k as u64 * 1_000_000,
            publish_time: k as u64 * 1_000_000,
        };
        m.write_to_known_channel(&header, &records[k % 256]).unwrap();
    }
    m.finish().unwrap();
    drop(m);
    let dt = t0.elapsed().as_secs_f64();
    println!(
        "mcap writer, {size:>4} B records, no compression: {:>9.0} records/s  {:>7.1} MB/s of payload",
        n as f64 / dt,
        (n * size) as f64 / dt / 1e6
    );
    let _ = std::fs::remove_file(path);
}

fn seek_in_a_big_log(gib: f64) {
    let size = 4096usize;
    let total = (gib * (1u64 << 30) as f64) as usize;
    let n = total / size;
    let path = std::env::temp_dir().join(format!("tlog-bench-big-{}.tlog", std::process::id()));
    let records: Vec<Vec<u8>> = (0..64).map(|k| payload(size, k)).collect();
    let opts = WriterOptions { snappy: false, ..WriterOptions::default() };
    let mut w = FileWriter::create_with(&path, opts).unwrap();
    let id = w.allocate_id("blob");
    w.write_schema(id, b"\x10\x00\x00\x00\x00\x00\x00").unwrap();
    let start_us = 1_700_000_000_000_000i64;
    // 1 kHz of 4 KiB records: a 1 GiB log spans about 262 s.
    for k in 0..n {
        w.write_data(id, Some(start_us + k as i64 * 1000), &records[k % 64]).unwrap();
    }
    w.close().unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    let reader = FileReader::open(&path).unwrap();
    let span_us = n as i64 * 1000;
    let mut times = Vec::new();
    for i in 0..50 {
        let target = start_us + (span_us * (i * 37 % 50)) / 50 + 123;
        let t0 = Instant::now();
        let offset = reader.seek(target).unwrap();
        times.push(t0.elapsed().as_nanos() as u64);
        std::hint::black_box(offset);
    }
    println!(
        "seek by time in a {:.2} GiB log: p50 {:.2} ms  max {:.2} ms (50 seeks)",
        len as f64 / (1u64 << 30) as f64,
        pct(&mut times, 0.5) / 1000.0,
        pct(&mut times, 1.0) / 1000.0
    );
    let _ = std::fs::remove_file(path);
}

fn main() {
    let _ = std::io::stdout().flush();
    handoff();
    for size in [256, 4096] {
        for snappy in [false, true] {
            throughput(size, snappy);
        }
    }
    let gib: f64 = std::env::var("TLOG_BENCH_GIB").ok().and_then(|v| v.parse().ok()).unwrap_or(1.0);
    if gib > 0.0 {
        seek_in_a_big_log(gib);
    }
}
