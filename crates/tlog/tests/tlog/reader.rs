//! Reader tests: mjlib's golden bytes, and round trips through this crate's writer
//! (typed values, seeking by time, walking a record backwards).

use rtloop_tlog::reader::{FileReader, ItemFilter};
use rtloop_tlog::value::Value;

/// mjlib's golden test file: schema "test" with the opaque schema bytes "testschema", and
/// one data block "testdata" stamped 2020-03-10T00:00:00Z.
const GOLDEN: &[u8] = &[
    0x54, 0x4C, 0x4F, 0x47, 0x30, 0x30, 0x30, 0x33, 0x00, // file header
    0x01, 0x11, 0x01, 0x00, 0x04, 0x74, 0x65, 0x73, 0x74, 0x74, 0x65, 0x73, 0x74, 0x73, 0x63, 0x68, 0x65, 0x6D,
    0x61, // schema block
    0x02, 0x17, 0x01, 0x07, 0x00, 0x00, 0x20, 0x07, 0xcd, 0x74, 0xa0, 0x05, 0x00, 0x93, 0x73, 0xdf, 0x4e, 0x74, 0x65,
    0x73, 0x74, 0x64, 0x61, 0x74, 0x61, // data block
];

/// 2020-03-10T00:00:00Z in µs since the epoch.
const GOLDEN_TIME_US: i64 = 1_583_798_400_000_000;

#[test]
fn golden_records_list_the_opaque_schema() {
    let reader = FileReader::from_bytes(GOLDEN.to_vec()).unwrap();
    let records = reader.records();
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert_eq!((record.id, record.name.as_str()), (1, "test"));
    assert_eq!(record.schema_bytes, b"testschema");
    assert!(record.schema.is_none() && record.schema_error.is_some(), "'testschema' is not a valid schema");
    assert_eq!(record.schema_offset, 9);
    assert_eq!(record.last_data_offset, Some(28));
    assert!(!reader.has_index());
}

#[test]
fn golden_item_comes_back_with_time_and_data() {
    let reader = FileReader::from_bytes(GOLDEN.to_vec()).unwrap();
    let items: Vec<_> = reader.items(ItemFilter::default()).collect::<Result<_, _>>().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].record_id, 1);
    assert_eq!(items[0].offset, 28);
    assert_eq!(items[0].timestamp_us, Some(GOLDEN_TIME_US));
    assert_eq!(items[0].data, b"testdata");
    // Undecodable (no usable schema), but reported as an error, not a panic.
    assert!(reader.decode_item(&items[0]).is_err());

    let by_name: Vec<_> = reader.items(ItemFilter { record: Some("test".into()), ..Default::default() }).collect();
    assert_eq!(by_name.len(), 1);
    let none: Vec<_> = reader.items(ItemFilter { record: Some("other".into()), ..Default::default() }).collect();
    assert!(none.is_empty());

    let backwards: Vec<_> = reader.backwards(1).collect::<Result<Vec<_>, _>>().unwrap();
    assert_eq!(backwards, items);

    let report = reader.scan_report();
    assert_eq!((report.blocks, report.data_blocks, report.schemas), (2, 1, 1));
    assert!(report.corrupt.is_empty() && report.truncated_at.is_none() && !report.has_index);
}

#[test]
fn golden_time_filters_and_seek() {
    let reader = FileReader::from_bytes(GOLDEN.to_vec()).unwrap();
    assert_eq!(reader.seek(0).unwrap(), 28);
    assert_eq!(reader.seek(GOLDEN_TIME_US).unwrap(), 28);
    assert_eq!(reader.seek(GOLDEN_TIME_US + 1).unwrap(), GOLDEN.len() as u64);
    let from = |from_us| reader.items(ItemFilter { from_us: Some(from_us), ..Default::default() }).count();
    assert_eq!(from(GOLDEN_TIME_US), 1);
    assert_eq!(from(GOLDEN_TIME_US + 1), 0);
    let to = |to_us| reader.items(ItemFilter { to_us: Some(to_us), ..Default::default() }).count();
    assert_eq!(to(GOLDEN_TIME_US), 1);
    assert_eq!(to(GOLDEN_TIME_US - 1), 0);
}

#[test]
fn golden_from_a_file_matches_memory() {
    let dir = std::env::temp_dir().join(format!("tlog-reader-golden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("golden.tlog");
    std::fs::write(&path, GOLDEN).unwrap();
    let reader = FileReader::open(&path).unwrap();
    let items: Vec<_> = reader.items(ItemFilter::default()).collect::<Result<_, _>>().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].data, b"testdata");
    assert_eq!(reader.records()[0].name, "test");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn not_a_log_is_bad_magic() {
    assert!(matches!(FileReader::from_bytes(b"TLOG0002\0".to_vec()), Err(rtloop_tlog::format::TlogError::BadMagic)));
    assert!(FileReader::from_bytes(b"TLOG".to_vec()).is_err());
    assert!(FileReader::from_bytes(Vec::new()).is_err());
    let empty = FileReader::from_bytes(b"TLOG0003\0".to_vec()).unwrap();
    assert!(empty.is_empty() && empty.records().is_empty() && empty.items(ItemFilter::default()).next().is_none());
}

#[test]
fn value_decodes_nothing_past_the_payload() {
    // A tiny sanity check that the public decode API is reachable from outside the crate.
    let schema = rtloop_tlog::schema::Schema::Object(vec![rtloop_tlog::schema::Field::new(
        "x",
        rtloop_tlog::schema::Schema::Bool,
    )]);
    assert_eq!(
        rtloop_tlog::value::decode(&schema, &[1]).unwrap(),
        Value::Object(vec![("x".into(), Value::Bool(true))])
    );
    assert!(rtloop_tlog::value::decode(&schema, &[]).is_err());
}

// ---- round trips through this crate's writer ----

use rtloop_tlog::schema::Timestamp;
use rtloop_tlog::writer::{FileWriter, WriterOptions};
use serde::Serialize;

#[derive(Serialize, Default, Clone, Copy)]
enum Mode {
    #[default]
    Stopped,
}

#[derive(Serialize, Default, Clone)]
struct Servo {
    position: f32,
    velocity: f64,
    fault: u8,
}

#[derive(Serialize, Default, Clone)]
struct Status {
    count: u32,
    delta: i16,
    name: String,
    servo: [Servo; 2],
    #[serde(serialize_with = "rtloop_tlog::schema::typed_vec")]
    torques: Vec<f32>,
    #[serde(serialize_with = "rtloop_tlog::schema::typed_option")]
    limit: Option<f64>,
    stamp: Timestamp,
    mode: Mode,
    enabled: bool,
}

#[derive(Serialize, Default, Clone)]
struct Command {
    target: f64,
}

const START_US: i64 = 1_700_000_000_000_000;

fn status(i: u32) -> Status {
    Status {
        count: i,
        delta: -(i as i16),
        name: format!("s{i}"),
        servo: [
            Servo { position: i as f32 * 0.5, velocity: -(i as f64), fault: (i % 3) as u8 },
            Servo { position: 1.0, velocity: 2.0, fault: 0 },
        ],
        torques: (0..(i % 4)).map(|k| k as f32).collect(),
        limit: i.is_multiple_of(2).then_some(i as f64),
        stamp: Timestamp(START_US + i64::from(i)),
        mode: Mode::Stopped,
        enabled: i % 2 == 1,
    }
}

/// A log of `seconds` at 100 Hz of "status" plus 10 Hz of "command".
/// Returns the bytes and every `(offset, record name, timestamp)` in file order.
fn build_log(seconds: i64, options: WriterOptions) -> (Vec<u8>, Vec<(u64, &'static str, i64)>) {
    let mut writer = FileWriter::new(Vec::new(), options).unwrap();
    let status_handle = writer.register::<Status>("status").unwrap();
    let command_handle = writer.register::<Command>("command").unwrap();
    let mut written = Vec::new();
    for i in 0..(seconds * 100) as u32 {
        let t = START_US + i64::from(i) * 10_000;
        written.push((writer.write(&status_handle, t, &status(i)).unwrap(), "status", t));
        if i % 10 == 0 {
            let offset = writer.write(&command_handle, t, &Command { target: f64::from(i) }).unwrap();
            written.push((offset, "command", t));
        }
    }
    (writer.close().unwrap(), written)
}

#[test]
fn typed_values_round_trip() {
    let (bytes, written) = build_log(1, WriterOptions::default());
    let reader = FileReader::from_bytes(bytes).unwrap();
    assert!(reader.has_index());
    let names: Vec<String> = reader.records().into_iter().map(|r| r.name).collect();
    assert_eq!(names, ["status", "command"]);
    assert!(reader.records().iter().all(|r| r.schema.is_some()));

    let items: Vec<_> = reader.items(ItemFilter::default()).collect::<Result<_, _>>().unwrap();
    assert_eq!(items.len(), written.len());
    for (item, (offset, _, t)) in items.iter().zip(&written) {
        assert_eq!((item.offset, item.timestamp_us), (*offset, Some(*t)));
    }
    let statuses: Vec<_> = reader
        .items(ItemFilter { record: Some("status".into()), ..Default::default() })
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    assert_eq!(statuses.len(), 100);
    for (i, item) in statuses.iter().enumerate() {
        let expected = status(i as u32);
        let value = reader.decode_item(item).unwrap();
        let mut flat = Vec::new();
        value.flatten("", &mut flat);
        let get = |name: &str| flat.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        assert_eq!(get("count"), Some(Value::UInt(u64::from(expected.count))));
        assert_eq!(get("delta"), Some(Value::Int(i64::from(expected.delta))));
        assert_eq!(get("name"), Some(Value::String(expected.name.clone())));
        assert_eq!(get("servo.0.position"), Some(Value::F32(expected.servo[0].position)));
        assert_eq!(get("servo.0.velocity"), Some(Value::F64(expected.servo[0].velocity)));
        assert_eq!(get("servo.1.fault"), Some(Value::UInt(0)));
        assert_eq!(flat.iter().filter(|(n, _)| n.starts_with("torques.")).count(), expected.torques.len());
        match expected.limit {
            Some(limit) => assert_eq!(get("limit"), Some(Value::F64(limit))),
            None => assert_eq!(get("limit"), Some(Value::Null)),
        }
        assert_eq!(get("stamp"), Some(Value::Timestamp(expected.stamp.0)));
        assert_eq!(get("mode"), Some(Value::Enum(0, Some("Stopped".into()))));
        assert_eq!(get("enabled"), Some(Value::Bool(expected.enabled)));
        let json = value.to_json();
        assert_eq!(json["servo"][1]["velocity"], serde_json::json!(2.0));
        assert_eq!(json["mode"], serde_json::json!("Stopped"));
    }
}

#[test]
fn zstd_and_uncompressed_blocks_read_back() {
    for options in [
        WriterOptions { zstd_level: Some(3), ..WriterOptions::default() },
        WriterOptions { snappy: false, checksum: false, previous_offset: false, ..WriterOptions::default() },
    ] {
        let (bytes, written) = build_log(1, options);
        let reader = FileReader::from_bytes(bytes).unwrap();
        let items: Vec<_> = reader.items(ItemFilter::default()).collect::<Result<_, _>>().unwrap();
        assert_eq!(items.len(), written.len());
        for item in &items {
            reader.decode_item(item).unwrap();
        }
        // Without previous offsets the backward walk falls back to a forward scan.
        let back: Vec<_> = reader.backwards(1).collect::<Result<Vec<_>, _>>().unwrap();
        assert_eq!(back.len(), 100);
        assert!(back.windows(2).all(|w| w[0].offset > w[1].offset));
    }
}

/// Check `seek(target)` against the full item list.
fn check_seek(reader: &FileReader, written: &[(u64, &str, i64)], target: i64, marker_interval_us: i64) {
    let offset = reader.seek(target).unwrap();
    // Nothing at or after the target is skipped...
    assert!(
        written.iter().all(|&(o, _, t)| o >= offset || t < target),
        "seek({target}) = {offset} skips an item at or after the target"
    );
    // ...and the walk does not start much more than one marker interval early.
    if let Some(&(_, _, t)) = written.iter().find(|&&(o, _, _)| o >= offset) {
        assert!(t >= target - marker_interval_us, "seek({target}) lands at an item of {t}");
    }
    let first = reader.items(ItemFilter { from_us: Some(target), ..Default::default() }).next();
    let expected = written.iter().find(|&&(_, _, t)| t >= target).map(|&(o, _, _)| o);
    assert_eq!(first.map(|item| item.unwrap().offset), expected);
}

#[test]
fn seek_lands_at_or_before_the_first_item_at_that_time() {
    let (bytes, written) = build_log(30, WriterOptions { snappy: false, ..WriterOptions::default() });
    assert!(bytes.len() > 3 * 64 * 1024, "big enough for the binary search to engage: {}", bytes.len());
    let dir = std::env::temp_dir().join(format!("tlog-reader-seek-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("seek.tlog");
    std::fs::write(&path, &bytes).unwrap();
    for reader in [FileReader::from_bytes(bytes.clone()).unwrap(), FileReader::open(&path).unwrap()] {
        assert!(reader.seek_markers().len() >= 25);
        for target in [
            0,
            START_US - 1,
            START_US,
            START_US + 1,
            START_US + 3_333_333,
            START_US + 5_000_000,
            START_US + 5_000_001,
            START_US + 29_990_000,
            START_US + 29_990_001,
            START_US + 60_000_000,
        ] {
            check_seek(&reader, &written, target, 1_000_000);
        }
        for k in 0..120 {
            check_seek(&reader, &written, START_US + k * 249_999, 1_000_000);
        }
        let window: Vec<_> = reader
            .items(ItemFilter {
                record: Some("command".into()),
                from_us: Some(START_US + 2_000_000),
                to_us: Some(START_US + 3_000_000),
            })
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let expected: Vec<u64> = written
            .iter()
            .filter(|&&(_, name, t)| name == "command" && (START_US + 2_000_000..=START_US + 3_000_000).contains(&t))
            .map(|&(o, _, _)| o)
            .collect();
        assert_eq!(window.iter().map(|item| item.offset).collect::<Vec<_>>(), expected);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn backwards_walk_is_the_forward_walk_reversed() {
    let (bytes, written) = build_log(3, WriterOptions::default());
    let with_index = FileReader::from_bytes(bytes.clone()).unwrap();
    // Cut off the index: the reader must find the last blocks by scanning instead.
    let index_start = written.last().unwrap().0 as usize + 64;
    let without_index = FileReader::from_bytes(bytes[..index_start.min(bytes.len() - 20)].to_vec()).unwrap();
    assert!(!without_index.has_index());
    for reader in [&with_index, &without_index] {
        for record in reader.records() {
            let forward: Vec<_> = reader
                .items(ItemFilter { record: Some(record.name.clone()), ..Default::default() })
                .filter_map(Result::ok)
                .collect();
            let mut backward: Vec<_> = reader.backwards(record.id).collect::<Result<Vec<_>, _>>().unwrap();
            backward.reverse();
            assert_eq!(backward, forward, "record {}", record.name);
        }
    }
    assert!(with_index.backwards(99).next().is_none());
}

#[test]
fn surviving_items_skip_and_count_a_corrupt_block_and_a_cut() {
    // Golden, twice more: a data block with a flipped byte (CRC mismatch), then the good
    // one, then a block cut short.
    let data = &GOLDEN[28..];
    let mut bytes = GOLDEN.to_vec();
    let mut bad = data.to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    bytes.extend_from_slice(&bad);
    bytes.extend_from_slice(data);
    bytes.extend_from_slice(&data[..data.len() - 3]);
    let reader = FileReader::from_bytes(bytes).unwrap();
    let raw: Vec<_> = reader.items(ItemFilter::default()).collect();
    assert_eq!(raw.iter().filter(|i| i.is_err()).count(), 2, "{raw:?}");
    let mut items = reader.surviving_items(ItemFilter::default());
    let offsets: Vec<u64> = items.by_ref().map(|i| i.offset).collect();
    assert_eq!(offsets, [28, 28 + 2 * data.len() as u64]);
    let problems = items.problems.into_vec();
    let kinds: Vec<_> = problems.iter().map(|p| (p.kind, p.count)).collect();
    use rtloop_tlog::survey::ProblemKind;
    assert_eq!(kinds, [(ProblemKind::CorruptBlock, 1), (ProblemKind::Truncated, 1)], "{problems:?}");
}
