//! What a log keeps when its writer dies: a real child process logging through the real-time
//! hand-off is killed with SIGKILL, and everything it had been told was flushed must read
//! back. No timing is asserted: the child says when the writer acknowledged a flush, and the
//! parent only waits for that (with a generous guard against a hang).
//!
//! Also: the closing stats record is stamped with the data's time, not the closing time.

use rtloop_tlog::reader::{FileReader, ItemFilter};
use rtloop_tlog::realtime::{spawn, STATS_RECORD};
use rtloop_tlog::writer::{FileWriter, WriterOptions, FILE_BUFFER_BYTES};
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Set in the child process: the path of the log it writes.
const CHILD_ENV: &str = "TLOG_DURABILITY_CHILD_LOG";

const START_US: i64 = 1_600_000_000_000_000;

#[derive(Serialize, Default, Clone, Copy)]
struct Sample {
    n: u64,
    value: f64,
}

#[derive(Serialize, Default)]
struct Event {
    n: u64,
}

#[derive(Clone, Copy)]
enum Msg {
    Sample(u64),
    Event(u64),
}

/// The child: log samples and one event, report each flush acknowledgement on stdout, then
/// wait to be killed.
fn child(path: &Path) -> ! {
    let mut writer = FileWriter::create(path).unwrap();
    let sample = writer.register::<Sample>("sample").unwrap();
    let event = writer.register::<Event>("event").unwrap();
    let (mut logger, _thread) = spawn(1024, writer, move |w, msg: Msg| {
        match msg {
            Msg::Sample(n) => {
                w.write(&sample, START_US + n as i64 * 1000, &Sample { n, value: n as f64 * 0.5 })?;
            }
            Msg::Event(n) => {
                w.write(&event, START_US + n as i64 * 1000, &Event { n })?;
                // Events reach the file at once (what rtloop's telemetry does).
                w.flush()?;
            }
        }
        Ok(())
    })
    .unwrap();
    let wait_for = |logger: &rtloop_tlog::realtime::RtLogger<Msg>, n: u64| {
        while logger.flushed() < n {
            std::thread::sleep(Duration::from_millis(1));
        }
        println!("ACK {n}");
    };
    // 100 samples and an event: the event's own flush takes everything before it along.
    for n in 0..100 {
        assert!(logger.log(Msg::Sample(n)));
    }
    assert!(logger.log(Msg::Event(100)));
    wait_for(&logger, 101);
    // 50 more samples and no event: the flush interval must put them in the file.
    for n in 101..151 {
        assert!(logger.log(Msg::Sample(n)));
    }
    wait_for(&logger, 151);
    println!("KILL ME");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn a_sigkilled_writer_leaves_everything_it_acknowledged_as_flushed() {
    if let Some(path) = std::env::var_os(CHILD_ENV) {
        child(Path::new(&path));
    }
    let path: PathBuf = std::env::temp_dir().join(format!("tlog-durability-{}.tlog", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &rtloop_testkit::test_path(
                module_path!(),
                "a_sigkilled_writer_leaves_everything_it_acknowledged_as_flushed",
            ),
            "--nocapture",
        ])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut acks = Vec::new();
    // A guard against a hang only (the child needs a few hundred ms): never a timing check.
    let outcome = loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line == "KILL ME" => break Ok(()),
            Ok(line) => {
                if let Some(n) = line.strip_prefix("ACK ") {
                    acks.push(n.parse::<u64>().unwrap());
                }
            }
            Err(e) => break Err(e),
        }
    };
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    outcome.unwrap_or_else(|e| panic!("the child never acknowledged its flushes ({e}); acknowledged: {acks:?}"));
    assert_eq!(acks, [101, 151]);

    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(
        (bytes.len() as u64) < FILE_BUFFER_BYTES as u64,
        "the data reached the file without the write buffer ever filling ({} bytes)",
        bytes.len()
    );
    let reader = FileReader::from_bytes(bytes).unwrap();
    let mut samples = Vec::new();
    let mut events = 0;
    for item in reader.items(ItemFilter::default()) {
        let item = item.expect("a killed writer leaves only complete blocks after a flush");
        let value = reader.decode_item(&item).unwrap().to_json();
        match reader.records().iter().find(|r| r.id == item.record_id).map(|r| r.name.clone()).as_deref() {
            Some("sample") => samples.push(value["n"].as_u64().unwrap()),
            Some("event") => events += 1,
            other => panic!("unexpected record {other:?}"),
        }
    }
    assert_eq!(events, 1);
    assert_eq!(samples, (0..100).chain(101..151).collect::<Vec<u64>>());
}

#[derive(Serialize, Default)]
struct Tick {
    n: u32,
}

/// A `Write` whose bytes outlive the writer thread that owns it.
#[derive(Clone, Default)]
struct SharedBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_stats_record_is_stamped_with_the_data_time_not_the_closing_time() {
    let buffer = SharedBuffer::default();
    let mut writer = FileWriter::new(buffer.clone(), WriterOptions::default()).unwrap();
    let tick = writer.register::<Tick>("tick").unwrap();
    // Data from 2020, long before this test runs; the last item is stamped 4 s after the first.
    let (mut logger, thread) = spawn(64, writer, move |w, n: u32| {
        w.write(&tick, START_US + i64::from(n) * 1_000_000, &Tick { n })?;
        Ok(())
    })
    .unwrap();
    for n in 0..5 {
        assert!(logger.log(n));
    }
    let stats = thread.finish().unwrap();
    assert_eq!(stats.written, 5);
    let reader = FileReader::from_bytes(buffer.0.lock().unwrap().clone()).unwrap();
    let stamps: Vec<(String, i64)> = reader
        .items(ItemFilter::default())
        .map(|item| {
            let item = item.unwrap();
            let name = reader.records().into_iter().find(|r| r.id == item.record_id).unwrap().name;
            (name, item.timestamp_us.unwrap())
        })
        .collect();
    assert_eq!(stamps.last(), Some(&(STATS_RECORD.to_string(), START_US + 4_000_000)), "{stamps:?}");
    assert_eq!(logger.flushed(), 5, "a closed log has everything flushed");
}
