//! `rtloop log export --parquet` and `--dataset`, as a user runs them: the layouts (one
//! `.parquet` file, a directory of one table per record, a dataset of
//! `<record>/<run>.parquet` with `robot` and `run` columns), `--json`, the exit statuses, and
//! the safety rules every export keeps — never onto the log, an existing output only with
//! `--force` (a directory only when it holds an earlier export alone), never onto a device,
//! a FIFO or `-`, nothing left behind when the export fails, no file named after a record
//! outside the output. Tables are read back with the Parquet crate.

use crate::support;

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rtloop_tlog::writer::{FileWriter, WriterOptions};
use serde::Serialize;
use std::path::Path;
use support::*;

const T0_US: i64 = 1_700_000_000_000_000;

#[derive(Serialize, Default)]
struct Cycle {
    index: u64,
    cycle_us: f64,
    #[serde(serialize_with = "rtloop_tlog::schema::typed_vec")]
    servo: Vec<Servo>,
}

#[derive(Serialize, Default, Clone)]
struct Servo {
    id: u8,
    velocity: f64,
}

#[derive(Serialize, Default)]
struct Event {
    kind: String,
}

/// A log like `rtloop run`'s: `cycles` items of `cycle` (two servos), one `event`, and a
/// record named `name` with one item.
fn write_log(path: &Path, cycles: u64, name: &str) {
    let mut writer = FileWriter::new(Vec::new(), WriterOptions::default()).unwrap();
    let cycle = writer.register::<Cycle>("cycle").unwrap();
    let event = writer.register::<Event>("event").unwrap();
    let other = writer.register::<Event>(name).unwrap();
    for i in 0..cycles {
        let servo = vec![Servo { id: 1, velocity: i as f64 }, Servo { id: 2, velocity: -(i as f64) }];
        writer.write(&cycle, T0_US + i as i64 * 1000, &Cycle { index: i, cycle_us: 200.0 + i as f64, servo }).unwrap();
    }
    writer.write(&event, T0_US, &Event { kind: "started".into() }).unwrap();
    writer.write(&other, T0_US, &Event { kind: "x".into() }).unwrap();
    std::fs::write(path, writer.close().unwrap()).unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The batches of a Parquet file.
fn batches(path: &Path) -> Vec<RecordBatch> {
    let file = std::fs::File::open(path).unwrap();
    ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap().map(Result::unwrap).collect()
}

fn rows(path: &Path) -> usize {
    batches(path).iter().map(RecordBatch::num_rows).sum()
}

/// Every value of a string column.
fn strings(path: &Path, column: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for batch in batches(path) {
        let array = batch.column_by_name(column).unwrap().as_string::<i32>().clone();
        out.extend((0..array.len()).map(|i| (!array.is_null(i)).then(|| array.value(i).to_string())));
    }
    out
}

fn describe(o: &std::process::Output) -> String {
    format!("status {:?}\nstdout {}\nstderr {}", o.status.code(), stdout(o), stderr(o))
}

#[test]
fn a_directory_holds_one_table_per_record() {
    let dir = Scratch::new("pq-dir");
    let log = dir.path("run.tlog");
    write_log(&log, 30, "../evil name");
    let out = dir.path("tables");
    let o = rtloop(&["log", "export", s(&log), "--parquet", s(&out), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let j = last_json(&o);
    assert_eq!(j["format"], "parquet");
    assert_eq!(j["rows"], 32);
    assert_eq!(j["records"]["cycle"]["rows"], 30);
    assert_eq!(j["records"]["cycle"]["file"], "cycle.parquet");
    assert_eq!(j["records"]["cycle"]["columns"], 6);
    assert_eq!(j["records"]["event"]["rows"], 1);
    // A record name is never a path: `../evil name` is a plain file inside the output.
    assert_eq!(j["records"]["../evil name"]["file"], "_.._evil_name.parquet");
    let mut names: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["_.._evil_name.parquet", "cycle.parquet", "event.parquet"]);
    assert_eq!(dir.names(), ["run.tlog", "tables"], "nothing else left beside the output");
    assert_eq!(rows(&out.join("cycle.parquet")), 30);
    assert_eq!(strings(&out.join("event.parquet"), "kind"), [Some("started".to_string())]);
    // One record asked for: only its table.
    let one = dir.path("one");
    let o = rtloop(&["log", "export", s(&log), "--parquet", s(&one), "--record", "event"]);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert_eq!(std::fs::read_dir(&one).unwrap().count(), 1);
}

#[test]
fn a_parquet_path_is_one_record_in_one_file() {
    let dir = Scratch::new("pq-file");
    let log = dir.path("run.tlog");
    write_log(&log, 12, "other");
    let out = dir.path("run.parquet");
    let o = rtloop(&["log", "export", s(&log), "--parquet", s(&out), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let j = last_json(&o);
    assert_eq!(
        (j["record"].as_str(), j["rows"].as_u64(), j["row_groups"].as_u64()),
        (Some("cycle"), Some(12), Some(1))
    );
    assert_eq!(j["bytes"].as_u64(), Some(std::fs::metadata(&out).unwrap().len()));
    assert!(stdout(&o).starts_with(&format!("{}: 12 rows of record 'cycle'", out.display())), "{}", stdout(&o));
    let batch = &batches(&out)[0];
    let schema = batch.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        ["timestamp", "index", "cycle_us", "servo.0.id", "servo.0.velocity", "servo.1.id", "servo.1.velocity"]
    );
    // A record without items writes nothing and says why.
    let empty = dir.path("none.parquet");
    let o = rtloop(&["log", "export", s(&log), "--parquet", s(&empty), "--record", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no record named 'nope'"), "{}", describe(&o));
    assert!(!empty.exists());
}

#[test]
fn outputs_are_replaced_only_with_force_and_never_the_log() {
    let dir = Scratch::new("pq-safety");
    let log = dir.path("run.tlog");
    write_log(&log, 5, "other");
    let before = std::fs::read(&log).unwrap();
    // The log itself, by its name: a directory export refuses it, with --force too.
    for force in [false, true] {
        let mut args = vec!["log", "export", s(&log), "--parquet", s(&log)];
        if force {
            args.push("--force");
        }
        let o = rtloop(&args);
        assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
        assert!(stderr(&o).contains("--parquet"), "{}", describe(&o));
    }
    // A log named like a Parquet file, exported onto itself.
    let pq_log = dir.path("log.parquet");
    std::fs::copy(&log, &pq_log).unwrap();
    let o = rtloop(&["log", "export", s(&pq_log), "--parquet", s(&pq_log), "--force"]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(stderr(&o).contains("is the log being read"), "{}", describe(&o));
    assert_eq!(std::fs::read(&pq_log).unwrap(), before);
    // `-` and a device are not outputs.
    for bad in ["-", "/dev/null"] {
        let o = rtloop(&["log", "export", s(&log), "--parquet", bad, "--force"]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", describe(&o));
    }
    // A directory of other files is never replaced, even with --force.
    let mine = dir.path("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "keep me").unwrap();
    let o = rtloop(&["log", "export", s(&log), "--parquet", s(&mine), "--force"]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(stderr(&o).contains("notes.txt") && stderr(&o).contains("earlier export"), "{}", describe(&o));
    assert_eq!(std::fs::read_to_string(mine.join("notes.txt")).unwrap(), "keep me");
    // An earlier export: refused without --force, replaced with it (a table it no longer
    // has is gone).
    let out = dir.path("tables");
    assert_eq!(rtloop(&["log", "export", s(&log), "--parquet", s(&out)]).status.code(), Some(0));
    let o = rtloop(&["log", "export", s(&log), "--parquet", s(&out), "--record", "event"]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(stderr(&o).contains("already exists") && stderr(&o).contains("--force"), "{}", describe(&o));
    let o = rtloop(&["log", "export", s(&log), "--parquet", s(&out), "--record", "event", "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let names: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["event.parquet"]);
    assert_eq!(dir.names(), ["log.parquet", "mine", "run.tlog", "tables"], "nothing left behind");
    assert_eq!(std::fs::read(&log).unwrap(), before);
}

#[test]
fn a_dataset_spans_robots_and_runs_and_skips_what_is_not_a_log() {
    let dir = Scratch::new("pq-dataset");
    let logs = dir.path("logs");
    for (robot, run, cycles) in [("alpha", "run1", 10), ("alpha", "run2", 20), ("beta", "run1", 7)] {
        std::fs::create_dir_all(logs.join(robot)).unwrap();
        write_log(&logs.join(robot).join(format!("{run}.tlog")), cycles, "other");
    }
    std::fs::write(logs.join("beta").join("README"), "not a log").unwrap();
    let out = dir.path("ds");
    let o = rtloop(&["log", "export", "--dataset", s(&logs), "--parquet", s(&out), "--record", "cycle", "--json"]);
    assert_eq!(o.status.code(), Some(1), "a skipped file makes the exit status 1: {}", describe(&o));
    assert!(stderr(&o).contains("README"), "{}", describe(&o));
    let j = last_json(&o);
    assert_eq!((j["logs"].as_u64(), j["exported"].as_u64(), j["skipped"].as_u64()), (Some(4), Some(3), Some(1)));
    assert_eq!(j["records"]["cycle"]["rows"], 37);
    // Two logs called run1: the second file is run1~2, both runs are "run1", robots differ.
    let files: Vec<String> = j["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["records"]["cycle"]["file"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(files, ["cycle/run1.parquet", "cycle/run2.parquet", "cycle/run1~2.parquet"]);
    let beta = out.join("cycle/run1~2.parquet");
    assert_eq!(rows(&beta), 7);
    assert_eq!(strings(&beta, "robot"), vec![Some("beta".to_string()); 7]);
    assert_eq!(strings(&beta, "run"), vec![Some("run1".to_string()); 7]);
    let names: Vec<String> = batches(&beta)[0].schema().fields().iter().take(4).map(|f| f.name().clone()).collect();
    assert_eq!(names, ["robot", "run", "timestamp", "index"]);
    // Clean logs, every record, --robot: exit 0, one directory per record.
    let clean = dir.path("clean");
    let o = rtloop(&[
        "log",
        "export",
        "--dataset",
        s(&logs.join("alpha/run1.tlog")),
        s(&logs.join("alpha/run2.tlog")),
        "--parquet",
        s(&clean),
        "--robot",
        "quad",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    for record in ["cycle", "event", "other"] {
        assert_eq!(std::fs::read_dir(clean.join(record)).unwrap().count(), 2, "{record}");
    }
    assert_eq!(strings(&clean.join("event/run2.parquet"), "robot"), [Some("quad".to_string())]);
    // A dataset inside the directory it reads, made again with --force: the earlier dataset
    // is not read as logs (by any spelling of its path).
    let alpha = logs.join("alpha");
    let inside = alpha.join("ds");
    for (force, spelled) in [(false, inside.clone()), (true, alpha.join(".").join("ds"))] {
        let mut args = vec!["log", "export", "--dataset", s(&alpha), "--parquet", s(&spelled), "--json"];
        if force {
            args.push("--force");
        }
        let o = rtloop(&args);
        assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
        assert_eq!(last_json(&o)["exported"], 2);
    }
}

#[test]
fn a_dataset_of_nothing_readable_writes_nothing() {
    let dir = Scratch::new("pq-nothing");
    let junk = dir.path("junk");
    std::fs::create_dir(&junk).unwrap();
    std::fs::write(junk.join("a.tlog"), "TLOG0003 but not really").unwrap();
    std::fs::write(junk.join("b.tlog"), "").unwrap();
    let out = dir.path("ds");
    let o = rtloop(&["log", "export", "--dataset", s(&junk), "--parquet", s(&out), "--json"]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    let j = last_json(&o);
    assert_eq!((j["exported"].as_u64(), j["skipped"].as_u64()), (Some(0), Some(2)));
    assert!(j["error"].as_str().unwrap().starts_with("nothing written"), "{j}");
    assert!(!out.exists());
    assert_eq!(dir.names(), ["junk"]);
}

#[test]
fn mistakes_are_one_sentence() {
    let dir = Scratch::new("pq-usage");
    let log = dir.path("run.tlog");
    write_log(&log, 2, "other");
    let out = dir.path("out");
    for (args, want) in [
        (vec!["log", "export", s(&log), s(&log), "--parquet", s(&out)], "give one log to export (2 given)"),
        (vec!["log", "export", s(&log), "--parquet", s(&out), "--robot", "r"], "--robot names the robot column"),
        (vec!["log", "export", "--dataset", s(&log)], "--dataset needs --parquet OUT_DIR"),
        (vec!["log", "export", "--dataset", s(&log), "--csv", s(&out)], "--dataset writes Parquet only"),
        (vec!["log", "export", "--dataset", s(&log), "--parquet", s(&out), "--robot", ""], "is not a robot name"),
        (vec!["log", "export", s(&log), "--csv", s(&out), "--parquet", s(&out)], "give exactly one of --csv OUT"),
        (vec!["log", "export", "--dataset", s(&dir.path("missing")), "--parquet", s(&out)], "cannot read"),
    ] {
        let o = rtloop(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", describe(&o));
        let err = stderr(&o);
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
    assert!(!out.exists());
}
