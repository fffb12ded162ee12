//! Hostile bytes through every reader entry point and every exporter, from memory: arbitrary
//! bytes after a valid header, a rich valid log with random byte flips, cuts and splices,
//! and crafted schemas (repeated field names, dotted names that collide). Nothing may panic;
//! the exporters' outputs stay well formed. Runs `PROPTEST_CASES` cases (proptest's default
//! when unset).
//!
//! These are the entry points a fuzz target drives: `FileReader::from_bytes`, `records`,
//! `record`, `has_index`, `items`, `seek`, `backwards`, `decode_item`, `scan_report`,
//! `seek_markers`, `survey`, `export::to_csv`, `export::to_mcap`, `plot::plot`.

use proptest::prelude::*;
use rtloop_tlog::export::{to_csv, to_mcap};
use rtloop_tlog::plot::{plot, PlotOptions};
use rtloop_tlog::reader::{FileReader, ItemFilter};
use rtloop_tlog::schema::{self, Duration, Field, Schema, Timestamp};
use rtloop_tlog::writer::{FileWriter, WriterOptions};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

const START_US: i64 = 1_700_000_000_000_000;

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
enum Mode {
    #[default]
    Stopped,
    Position,
    Brake,
}

#[derive(Debug, Clone, Default, Serialize)]
struct Joint {
    id: u8,
    position: f32,
    #[serde(serialize_with = "schema::typed_option")]
    fault: Option<u16>,
}

#[derive(Debug, Clone, Serialize)]
struct Rich {
    time: Timestamp,
    took: Duration,
    name: String,
    #[serde(serialize_with = "schema::typed_enum")]
    mode: Mode,
    joints: Vec<Joint>,
    gains: [f64; 2],
    #[serde(serialize_with = "schema::typed_map")]
    named: BTreeMap<String, i16>,
    pair: (u8, String),
}

impl Default for Rich {
    fn default() -> Self {
        Rich {
            time: Timestamp(0),
            took: Duration(0),
            name: String::new(),
            mode: Mode::Stopped,
            joints: vec![Joint::default()],
            gains: [0.0; 2],
            named: BTreeMap::new(),
            pair: (0, String::new()),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
struct Small {
    value: f64,
    count: u32,
}

/// A valid log with everything a reader must handle: nested objects, arrays, maps, unions,
/// enums, strings, timestamps, Snappy blocks, seek markers, the index, and a hand-written
/// record whose field names repeat and collide once flattened.
fn rich_log() -> Vec<u8> {
    let options = WriterOptions { seek_marker_interval_us: Some(20_000), ..WriterOptions::default() };
    let mut writer = FileWriter::new(Vec::new(), options).unwrap();
    let rich = writer.register::<Rich>("rich").unwrap();
    let small = writer.register::<Small>("small").unwrap();
    let odd = writer.allocate_id("odd");
    let odd_schema = Schema::Object(vec![
        Field::new("a", Schema::FixedUInt(1)),
        Field::new("a", Schema::FixedUInt(1)),
        Field::new("a.b", Schema::Float32),
        Field::new("a", Schema::Object(vec![Field::new("b", Schema::VarInt)])),
    ]);
    writer.write_schema(odd, &odd_schema.to_binary()).unwrap();
    for i in 0..60i64 {
        let t = START_US + i * 5_000;
        let value = Rich {
            time: Timestamp(t),
            took: Duration(i - 30),
            name: format!("n{i}, \"quoted\""),
            mode: [Mode::Stopped, Mode::Position, Mode::Brake][i as usize % 3],
            joints: (0..(i % 4) as u8)
                .map(|id| Joint { id, position: -0.0, fault: (id % 2 == 0).then_some(7) })
                .collect(),
            gains: [i as f64, f64::NAN],
            named: (0..(i % 3)).map(|k| (format!("k{k}"), k as i16 - 1)).collect(),
            pair: (i as u8, "x".repeat(i as usize % 50)),
        };
        writer.write(&rich, t, &value).unwrap();
        writer.write(&small, t + 1, &Small { value: i as f64 * 0.25, count: i as u32 }).unwrap();
        if i % 10 == 0 {
            let mut payload = vec![i as u8, 2];
            payload.extend_from_slice(&(i as f32).to_le_bytes());
            payload.push(0x7f);
            writer.write_data(odd, Some(t + 2), &payload).unwrap();
        }
    }
    writer.close().unwrap()
}

/// Drive every entry point; return nothing, the point is that nothing panics and the
/// exporters' results are consistent.
fn exercise(bytes: &[u8]) {
    let Ok(reader) = FileReader::from_bytes(bytes) else { return };
    let _ = (reader.len(), reader.is_empty(), reader.has_index());
    let records = reader.records();
    let mut item_count = 0usize;
    for item in reader.items(ItemFilter::default()).take(10_000).flatten() {
        item_count += 1;
        if let Ok(value) = reader.decode_item(&item) {
            let _ = value.to_json();
            let mut leaves = Vec::new();
            value.flatten("", &mut leaves);
            let names: std::collections::HashSet<&str> = leaves.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names.len(), leaves.len(), "flattened names are unique");
        }
    }
    let report = reader.scan_report();
    let survey = reader.survey();
    assert_eq!(survey.scan, report, "survey and scan_report walk the same blocks");
    let _ = reader.seek_markers();
    let _ = reader.seek(START_US + 100_000);
    let _ = reader.seek(i64::MIN);
    let _ = reader.seek(i64::MAX);
    for record in records.iter().take(8) {
        let _ = reader.record(&record.name);
        for _ in reader.backwards(record.id).take(10_000) {}
        let filter = ItemFilter {
            record: Some(record.name.clone()),
            from_us: Some(START_US + 50_000),
            to_us: Some(START_US + 150_000),
        };
        for _ in reader.items(filter).take(10_000) {}
        let mut csv = Vec::new();
        if let Ok(stats) = to_csv(&reader, &record.name, &mut csv, None) {
            let text = String::from_utf8(csv).expect("CSV is UTF-8");
            assert!(text.starts_with("timestamp"), "{text}");
            // Quoted cells may hold newlines; without quotes, one line per row plus the header.
            if !text.contains('"') {
                assert_eq!(text.lines().count() as u64, stats.rows + 1);
            }
        }
        // Plot the first columns of the record, as panels and on one axis.
        if let Some(Schema::Object(fields)) = &record.schema {
            let names = rtloop_tlog::value::unique_names(fields.iter().map(|f| f.name.as_str()));
            let wanted: Vec<String> = names.iter().take(2).map(|n| format!("{}.{n}", record.name)).collect();
            let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
            for one_axis in [false, true] {
                let options = PlotOptions { size: (96, 96), one_axis };
                let mut png = Vec::new();
                if plot(&reader, &wanted, &options, &mut png).is_ok() {
                    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
                }
            }
        }
    }
    let mut mcap = Vec::new();
    if let Ok(stats) = to_mcap(&reader, &mut mcap, None) {
        assert!(stats.messages <= item_count as u64 || item_count >= 10_000);
        let read_back = mcap::MessageStream::new(&mcap).expect("MCAP opens").count();
        assert_eq!(read_back as u64, stats.messages);
    }
}

fn cases() -> ProptestConfig {
    // ProptestConfig::default() honours PROPTEST_CASES.
    ProptestConfig::default()
}

#[test]
fn the_valid_rich_log_exercises_every_path() {
    let bytes = rich_log();
    exercise(&bytes);
    let reader = FileReader::from_bytes(bytes.as_slice()).unwrap();
    let mut csv = Vec::new();
    let stats = to_csv(&reader, "odd", &mut csv, None).unwrap();
    assert_eq!(stats.rows, 6);
    let text = String::from_utf8(csv).unwrap();
    assert_eq!(text.lines().next(), Some("timestamp,a,a#2,a.b,a.b#2"));
    assert_eq!(text.lines().nth(1), Some("1700000000.000002,0,2,0,-64"));
    let mut mcap = Vec::new();
    let stats = to_mcap(&reader, &mut mcap, None).unwrap();
    assert_eq!((stats.channels, stats.messages, stats.skipped), (3, 126, 0));
}

#[test]
fn the_issue_reproducer_exports_both_duplicate_columns() {
    let hex = "544c4f4730303033000120010001721000000161000401000001610004010000016200040100000000000002050100010203";
    let bytes: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
    exercise(&bytes);
    let reader = FileReader::from_bytes(bytes).unwrap();
    let mut csv = Vec::new();
    to_csv(&reader, "r", &mut csv, None).unwrap();
    assert_eq!(String::from_utf8(csv).unwrap(), "timestamp,a,a#2,b\n,1,2,3\n");
    let items: Vec<_> = reader.items(ItemFilter::default()).map(Result::unwrap).collect();
    assert_eq!(reader.decode_item(&items[0]).unwrap().to_json(), serde_json::json!({"a": 1, "a#2": 2, "b": 3}));
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn arbitrary_bytes_after_a_header_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..1024)) {
        let mut bytes = b"TLOG0003\0".to_vec();
        bytes.extend_from_slice(&tail);
        exercise(&bytes);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        exercise(&bytes);
    }

    #[test]
    fn a_mutated_rich_log_never_panics(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..8),
        cut in proptest::option::of(any::<prop::sample::Index>()),
        splice in proptest::option::of((any::<prop::sample::Index>(), proptest::collection::vec(any::<u8>(), 1..32))),
    ) {
        let mut bytes = rich_log();
        for (at, xor) in flips {
            let at = at.index(bytes.len());
            bytes[at] ^= xor;
        }
        if let Some((at, junk)) = splice {
            let at = at.index(bytes.len());
            bytes.splice(at..at, junk);
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        exercise(&bytes);
    }

    #[test]
    fn crafted_schemas_with_any_field_names_never_panic(
        names in proptest::collection::vec("[ab.#2]{0,4}", 1..12),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut writer = FileWriter::new(Vec::new(), WriterOptions::default()).unwrap();
        let id = writer.allocate_id("x");
        let fields = names.iter().enumerate().map(|(i, name)| {
            let schema = if i % 3 == 2 { Schema::Object(vec![Field::new(name.clone(), Schema::FixedUInt(1))]) } else { Schema::FixedUInt(1) };
            Field::new(name.clone(), schema)
        }).collect();
        writer.write_schema(id, &Schema::Object(fields).to_binary()).unwrap();
        writer.write_data(id, Some(START_US), &payload).unwrap();
        writer.write_data(id, Some(START_US + 1), &payload[..payload.len() / 2]).unwrap();
        exercise(&writer.close().unwrap());
    }
}
