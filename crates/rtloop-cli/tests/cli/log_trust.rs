//! `rtloop log …` on the logs that hurt: an export pointed back at its own input, outputs that
//! already exist, damaged schemas, duplicate field names, logs without an index, empty files.
//! Every case asserts what the user sees (exit status, the one-line message, the files left
//! behind), not how the code gets there.

use crate::support;

use rtloop_tlog::writer::{FileWriter, WriterOptions};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;
use support::*;

/// 2023-11-14T22:13:20Z in µs since the UNIX epoch.
const T0_US: i64 = 1_700_000_000_000_000;

#[derive(Serialize, Default)]
struct Cycle {
    index: u64,
    position: f64,
}

#[derive(Serialize, Default)]
struct Stats {
    written: u64,
}

/// `cycles` items of record `cycle` 1 ms apart from [`T0_US`] (position = -0.0 for the first,
/// then index / 1000), then one `rtloop_log_stats` item stamped `stats_at_us`.
fn write_log(path: &Path, cycles: u64, stats_at_us: Option<i64>, options: WriterOptions) {
    let mut writer = FileWriter::new(Vec::new(), options).unwrap();
    let cycle = writer.register::<Cycle>("cycle").unwrap();
    let stats = writer.register::<Stats>("rtloop_log_stats").unwrap();
    for i in 0..cycles {
        let position = if i == 0 { -0.0 } else { i as f64 / 1000.0 };
        writer.write(&cycle, T0_US + i as i64 * 1000, &Cycle { index: i, position }).unwrap();
    }
    if let Some(at) = stats_at_us {
        writer.write(&stats, at, &Stats { written: cycles }).unwrap();
    }
    std::fs::write(path, writer.close().unwrap()).unwrap();
}

fn good_log(path: &Path) {
    write_log(path, 200, Some(T0_US + 199_000), WriterOptions::default());
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json_last(o: &std::process::Output) -> Value {
    let text = stdout(o);
    serde_json::from_str(text.lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// One line on stderr, no Debug structs, no panic, exit status 2.
fn assert_one_sentence(o: &std::process::Output, args: &[&str]) -> String {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
    assert_eq!(e.trim().lines().count(), 1, "{args:?}: {e}");
    for bad in ["panicked", "Os {", "Error(", "Error {", "tlog I/O error"] {
        assert!(!e.contains(bad), "{args:?}: {e}");
    }
    e
}

#[test]
fn export_never_writes_onto_its_input_through_any_path() {
    let dir = Scratch::new("export-self");
    let log = dir.path("run.tlog");
    good_log(&log);
    let original = std::fs::read(&log).unwrap();
    std::os::unix::fs::symlink(&log, dir.path("b-link.csv")).unwrap();
    std::fs::hard_link(&log, dir.path("hard.mcap")).unwrap();
    let dotted = dir.dir().join(".").join("run.tlog");
    let cases: Vec<Vec<String>> = vec![
        vec!["--csv".into(), s(&log).into()],
        vec!["--mcap".into(), s(&log).into()],
        vec!["--csv".into(), s(&dotted).into()],
        vec!["--mcap".into(), s(&dir.path("b-link.csv")).into()],
        vec!["--csv".into(), s(&dir.path("hard.mcap")).into()],
        vec!["--csv".into(), s(&log).into(), "--force".into()],
        vec!["--mcap".into(), s(&dir.path("b-link.csv")).into(), "--force".into()],
        vec!["--csv".into(), s(&dir.path("hard.mcap")).into(), "--force".into()],
    ];
    for case in cases {
        let mut args = vec!["log", "export", s(&log)];
        args.extend(case.iter().map(String::as_str));
        let o = rtloop(&args);
        let e = assert_one_sentence(&o, &args);
        assert!(e.contains("is the log being read"), "{args:?}: {e}");
        assert_eq!(std::fs::read(&log).unwrap(), original, "{args:?} changed the log");
        assert!(std::fs::symlink_metadata(dir.path("b-link.csv")).unwrap().file_type().is_symlink(), "{args:?}");
        assert_eq!(std::fs::read(dir.path("hard.mcap")).unwrap(), original, "{args:?}");
    }
    assert_eq!(dir.names(), ["b-link.csv", "hard.mcap", "run.tlog"], "no output or temporary file is left behind");
}

#[test]
fn export_replaces_an_existing_output_only_when_forced_and_never_follows_its_link() {
    let dir = Scratch::new("export-force");
    let log = dir.path("run.tlog");
    good_log(&log);
    let existing = dir.path("old.csv");
    std::fs::write(&existing, "keep me\n").unwrap();
    let args = ["log", "export", s(&log), "--csv", s(&existing)];
    let e = assert_one_sentence(&rtloop(&args), &args);
    assert!(e.contains("--force"), "{e}");
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me\n");

    let o = rtloop(&["log", "export", s(&log), "--csv", s(&existing), "--force"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&existing).unwrap().starts_with("timestamp,index,position\n"));

    // A link at the output path is replaced by the export; what it pointed at is untouched.
    let victim = dir.path("victim.txt");
    std::fs::write(&victim, "outside file\n").unwrap();
    let link = dir.path("link.mcap");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let args = ["log", "export", s(&log), "--mcap", s(&link)];
    assert_one_sentence(&rtloop(&args), &args);
    let o = rtloop(&["log", "export", s(&log), "--mcap", s(&link), "--force"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "outside file\n");
    assert!(!std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(&std::fs::read(&link).unwrap()[..8], b"\x89MCAP0\r\n");
    assert_eq!(dir.names(), ["link.mcap", "old.csv", "run.tlog", "victim.txt"]);
}

#[test]
fn a_flipped_schema_id_is_reported_with_counts_and_offsets_and_export_fails() {
    let dir = Scratch::new("schema-flip");
    let log = dir.path("flip.tlog");
    good_log(&log);
    let mut bytes = std::fs::read(&log).unwrap();
    // The id of the first schema block follows the header (9 bytes), the block type and the
    // size varuint (byte 12 of a `rtloop run` log, whose cycle schema needs a 2-byte size).
    let id_at = if bytes[10] & 0x80 != 0 { 12 } else { 11 };
    assert_eq!(bytes[id_at], 1);
    bytes[id_at] = 7;
    std::fs::write(&log, &bytes).unwrap();

    let o = rtloop(&["log", "info", s(&log)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("200 data blocks of record id 1 have no schema"), "{text}");
    assert!(text.contains("first at byte"), "{text}");
    let o = rtloop(&["log", "info", s(&log), "--json"]);
    let info = json_last(&o);
    let problems = info["problems"].as_array().expect("problems in --json");
    let orphan = problems.iter().find(|p| p["kind"] == "no_schema").unwrap_or_else(|| panic!("{info}"));
    assert_eq!(orphan["count"], 200);
    assert_eq!(orphan["record_id"], 1);
    assert!(orphan["first_offset"].as_u64().unwrap() > 9);

    let o = rtloop(&["log", "dump", s(&log)]);
    assert!(stderr(&o).contains("200 data blocks of record id 1 have no schema"), "{}", stderr(&o));

    let csv = dir.path("flip.csv");
    let args = ["log", "export", s(&log), "--csv", s(&csv)];
    let e = assert_one_sentence(&rtloop(&args), &args);
    assert!(
        e.contains("no items that could be read") && e.contains("200 data blocks of record id 1 have no schema"),
        "{e}"
    );
    assert!(!csv.exists(), "a failed export leaves no file");
    assert_eq!(dir.names(), ["flip.tlog"]);
}

#[test]
fn a_record_without_items_exports_nothing_and_says_so() {
    let dir = Scratch::new("no-items");
    let log = dir.path("run.tlog");
    good_log(&log);
    let csv = dir.path("stats.csv");
    let args = ["log", "export", s(&log), "--csv", s(&csv), "--record", "rtloop_log_stats"];
    assert!(rtloop(&args).status.success());
    let log2 = dir.path("nostats.tlog");
    write_log(&log2, 10, None, WriterOptions::default());
    let csv2 = dir.path("nostats.csv");
    let args = ["log", "export", s(&log2), "--csv", s(&csv2), "--record", "rtloop_log_stats"];
    let e = assert_one_sentence(&rtloop(&args), &args);
    // No data is not damage: nothing suggests a decoding problem.
    assert!(e.contains("record 'rtloop_log_stats' has no items"), "{e}");
    assert!(!e.contains("decode"), "{e}");
    assert!(!csv2.exists());
}

#[test]
fn info_tells_a_log_written_without_an_index_from_a_cut_one() {
    let dir = Scratch::new("no-index");
    let log = dir.path("plain.tlog");
    write_log(&log, 50, Some(T0_US + 49_000), WriterOptions { index: false, ..WriterOptions::default() });
    let text = stdout(&rtloop(&["log", "info", s(&log)]));
    assert!(text.contains("written without an index"), "{text}");
    assert!(!text.contains("did not close"), "{text}");

    let cut = dir.path("cut.tlog");
    let bytes = std::fs::read(&log).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    let text = stdout(&rtloop(&["log", "info", s(&cut)]));
    assert!(text.contains("cut at byte"), "{text}");
    assert!(!text.contains("written without an index"), "{text}");
}

#[test]
fn dump_prints_microsecond_times_exactly() {
    let dir = Scratch::new("dump-time");
    let log = dir.path("t.tlog");
    let mut writer = FileWriter::new(Vec::new(), WriterOptions::default()).unwrap();
    let cycle = writer.register::<Cycle>("cycle").unwrap();
    writer.write(&cycle, 1_700_000_001_502_000, &Cycle::default()).unwrap();
    writer.write(&cycle, 1_700_000_001_000_001, &Cycle::default()).unwrap();
    std::fs::write(&log, writer.close().unwrap()).unwrap();
    let o = rtloop(&["log", "dump", s(&log)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("\"time\":1700000001.502,"), "{text}");
    assert!(text.contains("\"time\":1700000001.000001,"), "{text}");
}

#[test]
fn the_stats_record_does_not_stretch_the_time_span() {
    let dir = Scratch::new("span");
    let log = dir.path("span.tlog");
    // 5 s of cycles; the stats record stamped 1 s after the last one (an older writer did).
    write_log(&log, 5001, Some(T0_US + 6_000_000), WriterOptions::default());
    let text = stdout(&rtloop(&["log", "info", s(&log)]));
    assert!(text.contains("(5.000 s)"), "{text}");
    let info = json_last(&rtloop(&["log", "info", s(&log), "--json"]));
    assert_eq!(info["span_s"], 5.0, "{info}");
}

/// The 50-byte log from issue 9: record `r` with fields a, a, b (u8 each), one item 01 02 03.
const DUPLICATE_FIELDS: &str =
    "544c4f4730303033000120010001721000000161000401000001610004010000016200040100000000000002050100010203";

#[test]
fn duplicate_field_names_keep_both_columns_and_never_panic() {
    let dir = Scratch::new("dup");
    let log = dir.path("dup.tlog");
    let bytes: Vec<u8> = (0..DUPLICATE_FIELDS.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&DUPLICATE_FIELDS[i..i + 2], 16).unwrap())
        .collect();
    std::fs::write(&log, bytes).unwrap();
    let csv = dir.path("dup.csv");
    let o = rtloop(&["log", "export", s(&log), "--csv", s(&csv)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text, "timestamp,a,a#2,b\n,1,2,3\n");
    let o = rtloop(&["log", "dump", s(&log)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let line: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(line["value"], serde_json::json!({"a": 1, "a#2": 2, "b": 3}));
    let mcap = dir.path("dup.mcap");
    assert!(rtloop(&["log", "export", s(&log), "--mcap", s(&mcap)]).status.success());
    // Both columns are found, but the one item has no timestamp to draw it at: nothing is
    // drawn, which is an error (as an export with no row), and says why for each field.
    let png = dir.path("dup.png");
    let args = ["log", "plot", s(&log), "--fields", "r.a,r.a#2", "--out", s(&png)];
    let e = assert_one_sentence(&rtloop(&args), &args);
    assert!(e.contains("field 'r.a' has 1 value but no timestamp") && e.contains("field 'r.a#2'"), "{e}");
    assert!(!png.exists());
}

#[test]
fn csv_never_prints_negative_zero() {
    let dir = Scratch::new("negzero");
    let log = dir.path("z.tlog");
    good_log(&log);
    let csv = dir.path("z.csv");
    assert!(rtloop(&["log", "export", s(&log), "--csv", s(&csv)]).status.success());
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().nth(1), Some("1700000000.000000,0,0"), "{}", &text[..200]);
    assert!(!text.contains(",-0,") && !text.contains(",-0\n"));
}

#[test]
fn export_reports_skipped_blocks_on_stderr_and_in_json() {
    let dir = Scratch::new("corrupt");
    let log = dir.path("c.tlog");
    good_log(&log);
    let mut bytes = std::fs::read(&log).unwrap();
    // The last payload byte of the 11th data block (found by a clean reader) gets flipped.
    let reader = rtloop_tlog::reader::FileReader::from_bytes(bytes.clone()).unwrap();
    let items: Vec<_> = reader.items(Default::default()).map(Result::unwrap).collect();
    let victim = items[10].offset;
    let end = items[11].offset as usize;
    bytes[end - 1] ^= 0x55;
    std::fs::write(&log, &bytes).unwrap();

    let csv = dir.path("c.csv");
    let o = rtloop(&["log", "export", s(&log), "--csv", s(&csv), "--json"]);
    assert!(o.status.success(), "rows were written: {}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("1 corrupt block skipped") && e.contains(&format!("byte {victim}")), "{e}");
    let j = json_last(&o);
    assert_eq!(j["rows"], 199, "{j}");
    assert_eq!(j["skipped"], 1, "{j}");
    assert_eq!(j["problems"][0]["kind"], "corrupt_block", "{j}");
    assert_eq!(j["problems"][0]["first_offset"], victim, "{j}");

    let mcap = dir.path("c.mcap");
    let o = rtloop(&["log", "export", s(&log), "--mcap", s(&mcap), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("1 corrupt block skipped"), "{}", stderr(&o));
    assert_eq!(json_last(&o)["skipped"], 1);
}

#[test]
fn log_messages_are_one_sentence_that_says_what_to_do() {
    let dir = Scratch::new("messages");
    let log = dir.path("run.tlog");
    good_log(&log);
    let empty = dir.path("empty.tlog");
    std::fs::write(&empty, b"").unwrap();
    let header_only = dir.path("header.tlog");
    std::fs::write(&header_only, b"TLOG0003\0").unwrap();

    let args = ["log", "plot", s(&log), "--fields", "cycle.position", "--out", "/nonexistent/p.png"];
    let e = assert_one_sentence(&rtloop(&args), &args);
    assert!(e.contains("/nonexistent") && e.contains("does not exist"), "{e}");

    let args = ["log", "info", s(&empty)];
    let e = assert_one_sentence(&rtloop(&args), &args);
    assert!(e.contains("empty") && !e.contains("truncated data at offset 0"), "{e}");

    let (h_csv, n_csv, p_png) = (dir.path("h.csv"), dir.path("n.csv"), dir.path("p.png"));
    let args = ["log", "export", s(&header_only), "--csv", s(&h_csv)];
    let e = assert_one_sentence(&rtloop(&args), &args);
    assert!(e.contains("no records"), "{e}");
    assert!(!e.trim_end().ends_with("has"), "{e}");

    let args = ["log", "export", s(&log), "--csv", s(&n_csv), "--record", "nope"];
    let e = assert_one_sentence(&rtloop(&args), &args);
    assert!(e.contains("'nope'") && e.contains("cycle"), "{e}");

    let text = stdout(&rtloop(&["log", "info", s(&header_only)]));
    assert!(text.ends_with("records: none (no schema block could be read)\n"), "{text}");

    let args = ["log", "dump", s(&header_only), "--record", "cycle"];
    let e = assert_one_sentence(&rtloop(&args), &args);
    assert!(e.contains("no records"), "{e}");

    let args = ["log", "plot", s(&header_only), "--fields", "cycle.position", "--out", s(&p_png)];
    let e = assert_one_sentence(&rtloop(&args), &args);
    assert!(e.contains("no records"), "{e}");

    for bad in ["nan", "inf", "-1"] {
        let args = ["log", "dump", s(&log), "--from", bad];
        let e = assert_one_sentence(&rtloop(&args), &args);
        assert!(e.contains("--from"), "{e}");
    }
    assert_eq!(dir.names(), ["empty.tlog", "header.tlog", "run.tlog"]);
}

/// Kills the child on drop, so a failing test leaves no run behind.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cycle_items(path: &Path) -> usize {
    let Ok(bytes) = std::fs::read(path) else { return 0 };
    let Ok(reader) = rtloop_tlog::reader::FileReader::from_bytes(bytes) else { return 0 };
    let filter = rtloop_tlog::reader::ItemFilter { record: Some("cycle".into()), ..Default::default() };
    reader.items(filter).filter(Result::is_ok).count()
}

#[test]
fn a_running_log_reaches_the_file_long_before_the_write_buffer_fills() {
    let dir = Scratch::new("durable");
    let log = dir.path("slow.tlog");
    // At 2 Hz a cycle record of ~500 bytes would need a minute to fill the writer's 64 KiB
    // buffer; the flush interval must put cycles in the file within a few hundred ms.
    let child = std::process::Command::new(rtloop_bin())
        .args(["run", "--rate", "2", "--duration", "600", "--log", s(&log), "--quiet"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    // A guard against a hang only; the cycles normally show up within 2 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    let mut seen = 0;
    while seen < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        seen = cycle_items(&log);
    }
    assert!(seen >= 3, "after 40 s of a 2 Hz run the log file holds {seen} cycles: they sit in the buffer");
    child.0.kill().unwrap(); // SIGKILL
    child.0.wait().unwrap();
    let len = std::fs::metadata(&log).unwrap().len();
    // rtloop_tlog::writer::FILE_BUFFER_BYTES: the file grew although the buffer never filled.
    assert!(len < 64 * 1024, "{len} bytes");
    assert!(cycle_items(&log) >= seen, "what was in the file before the kill is still there");
    let text = stdout(&rtloop(&["log", "info", s(&log)]));
    assert!(!text.contains("corrupt"), "{text}");
}

#[test]
fn run_never_overwrites_an_existing_log() {
    let dir = Scratch::new("run-excl");
    let log = dir.path("earlier.tlog");
    std::fs::write(&log, b"an earlier log").unwrap();
    let args = ["run", "--duration", "0.1", "--log", s(&log), "--quiet"];
    let e = assert_one_sentence(&rtloop(&args), &args);
    assert!(e.contains("already exists"), "{e}");
    assert_eq!(std::fs::read(&log).unwrap(), b"an earlier log");
}

#[test]
fn output_into_a_closed_pipe_is_not_a_crash() {
    let dir = Scratch::new("pipe");
    let log = dir.path("run.tlog");
    good_log(&log);
    for args in [vec!["log", "info", s(&log)], vec!["log", "dump", s(&log)]] {
        // Like `| head -0`: the reader is gone before anything is written.
        let (reader, writer) = std::os::unix::net::UnixStream::pair().unwrap();
        drop(reader);
        let o = std::process::Command::new(rtloop_bin())
            .args(&args)
            .stdout(std::os::fd::OwnedFd::from(writer))
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let e = stderr(&o);
        assert!(!e.contains("panicked"), "{args:?}: {e}");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {e}");
    }
}
