//! `rtloop_tlog::columns::read` against the reference it must agree with, and on hostile input.
//!
//! * Random serde records written to a log (every schema type the serde side produces:
//!   fixed and variable integers, floats, bools, strings, bytes, timestamps, durations,
//!   enums, options, vectors of structs, fixed arrays, maps, tuples, a unit), random writer
//!   options, items with and without timestamps beside another record, read with random
//!   time windows and enum names: the columns hold exactly what `FileReader::items` +
//!   `decode_item` + `Value::flatten` give — the same rows and timestamps, a column for every
//!   leaf name, each cell the leaf's value, every other cell missing.
//! * A hand-written schema whose union alternatives share a name with different types (the
//!   columns widen) and whose enum names only some values: the same agreement.
//! * `fields` keeps exactly the matching columns of the full read.
//! * Arbitrary bytes as a log, arbitrary schema bytes, arbitrary and mutated payloads: `Ok`
//!   or a typed error, never a panic; what comes back is a consistent table; payloads under
//!   a known schema still agree with the reference item by item.
//!
//! Runs `PROPTEST_CASES` cases (proptest's default when unset).

use proptest::prelude::*;
use rtloop_tlog::columns::{self, Cell, Column, ColumnData, ColumnOptions, Columns, ColumnsError, NO_TIMESTAMP};
use rtloop_tlog::format::{write_string, write_varint, write_varuint};
use rtloop_tlog::reader::{FileReader, ItemFilter};
use rtloop_tlog::schema::{self, Duration, Field, Schema, Timestamp};
use rtloop_tlog::value::{micros_to_seconds, Value};
use rtloop_tlog::writer::{FileWriter, WriterOptions};
use serde::{Deserialize, Serialize, Serializer};
use std::collections::{BTreeMap, HashMap, HashSet};

const START_US: i64 = 1_700_000_000_000_000;

// ---------------------------------------------------------------------------------------
// The reference and the comparison

/// True when a payload gives two leaves one name: a map with a repeated key, or a key with a
/// dot or `#` that may collide with another leaf's name. `Value::flatten` keeps both values
/// (`name#2`); a column keeps one and counts the other in `collisions`.
fn ambiguous(value: &Value) -> bool {
    match value {
        Value::Map(entries) => {
            let mut keys = HashSet::new();
            entries.iter().any(|(k, v)| !keys.insert(k) || k.contains(['.', '#']) || ambiguous(v))
        }
        Value::Object(fields) => fields.iter().any(|(_, v)| ambiguous(v)),
        Value::Array(items) => items.iter().any(ambiguous),
        Value::Union(_, inner) => ambiguous(inner),
        _ => false,
    }
}

/// One item of the reference: its timestamp and its flattened leaves.
type Row = (i64, Vec<(String, Value)>);

/// What the reader and the value decoder give for `record` in the options' window: the
/// timestamp and flattened leaves of every item that decodes; `None` when some item is
/// [`ambiguous`].
fn reference(reader: &FileReader, record: &str, options: &ColumnOptions) -> Option<Vec<Row>> {
    let filter = ItemFilter { record: Some(record.to_string()), from_us: options.from_us, to_us: options.to_us };
    let mut rows = Vec::new();
    for item in reader.items(filter).flatten() {
        let Ok(value) = reader.decode_item(&item) else { continue };
        if ambiguous(&value) {
            return None;
        }
        let mut leaves = Vec::new();
        value.flatten("", &mut leaves);
        // The timestamps are apart; a field called `timestamp` is `timestamp#2` in columns.
        for (name, _) in &mut leaves {
            if name == columns::TIMESTAMP {
                *name = format!("{}#2", columns::TIMESTAMP);
            }
        }
        rows.push((item.timestamp_us.unwrap_or(NO_TIMESTAMP), leaves));
    }
    Some(rows)
}

/// The cell a leaf becomes (before any widening of its column).
fn expected(leaf: &Value, enum_names: bool) -> Cell {
    match leaf {
        Value::Null => Cell::None,
        Value::Bool(b) => Cell::Bool(*b),
        Value::Int(v) => Cell::I64(*v),
        Value::UInt(v) => Cell::U64(*v),
        Value::F32(v) => Cell::F64(f64::from(*v)),
        Value::F64(v) => Cell::F64(*v),
        Value::Bytes(b) => Cell::Bytes(b.clone()),
        Value::String(s) => Cell::Str(s.clone()),
        Value::Enum(_, Some(name)) if enum_names => Cell::Str(name.clone()),
        Value::Enum(raw, _) => Cell::U64(*raw),
        Value::Timestamp(us) | Value::Duration(us) => Cell::F64(micros_to_seconds(*us)),
        Value::Object(_) | Value::Array(_) | Value::Map(_) | Value::Union(..) => {
            panic!("flatten gives leaves only: {leaf:?}")
        }
    }
}

/// Floats equal bit for bit, or both NaN.
fn same_float(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

/// A row without a value: no cell, or the NaN a float column (or a float widened into an
/// object column) holds for it.
fn is_missing(cell: &Cell) -> bool {
    matches!(cell, Cell::None) || matches!(cell, Cell::F64(x) if x.is_nan())
}

/// Whether `cell`, read from `column`, holds the value `want`: exactly, or as a float when
/// the column widened to floats (and maybe on to objects, where its floats stay floats).
fn holds(column: &Column, cell: &Cell, want: &Cell) -> bool {
    match (cell, want) {
        (Cell::F64(a), Cell::F64(b)) => same_float(*a, *b),
        (Cell::F64(a), want) if matches!(column.data, ColumnData::F64(_) | ColumnData::Obj(_)) => {
            want.as_f64().is_some_and(|b| same_float(*a, b))
        }
        (cell, want) => cell == want,
    }
}

/// Assert that `got` is a consistent table: unique names, every column one value per row.
fn assert_consistent(got: &Columns) {
    let rows = got.rows();
    let mut names = HashSet::new();
    for column in &got.columns {
        assert!(names.insert(column.name.as_str()), "column {} twice", column.name);
        assert_eq!(column.len(), rows, "column {} has {} rows of {rows}", column.name, column.len());
        if let Some(missing) = &column.missing {
            assert_eq!(missing.len(), rows, "mask of {}", column.name);
            assert!(matches!(column.data, ColumnData::Bool(_) | ColumnData::I64(_) | ColumnData::U64(_)));
        }
        assert_eq!(column.cell(rows), None);
    }
}

/// Assert that `columns::read` gives exactly the reference for `record` (only that it reads
/// when an item is [`ambiguous`]).
fn assert_agrees(reader: &FileReader, record: &str, options: &ColumnOptions) -> Result<Columns, TestCaseError> {
    let got = columns::read(reader, record, options).map_err(|e| TestCaseError::fail(format!("read failed: {e}")))?;
    assert_consistent(&got);
    let Some(want) = reference(reader, record, options) else { return Ok(got) };
    prop_assert_eq!(got.collisions, 0);
    prop_assert_eq!(got.rows(), want.len(), "rows");
    let times: Vec<i64> = want.iter().map(|(t, _)| *t).collect();
    prop_assert_eq!(&got.timestamps_us, &times);
    let by_name: HashMap<&str, &Column> = got.columns.iter().map(|c| (c.name.as_str(), c)).collect();
    let position: HashMap<&str, usize> = got.columns.iter().enumerate().map(|(i, c)| (c.name.as_str(), i)).collect();
    for (row, (_, leaves)) in want.iter().enumerate() {
        let mut named = HashSet::new();
        for (name, leaf) in leaves {
            named.insert(name.as_str());
            let Some(column) = by_name.get(name.as_str()) else {
                prop_assert!(matches!(leaf, Value::Null), "no column {name} for {leaf:?} (row {row})");
                continue;
            };
            let cell = column.cell(row).expect("row in range");
            let want_cell = expected(leaf, options.enum_names);
            if matches!(want_cell, Cell::None) {
                prop_assert!(is_missing(&cell), "{name} row {row}: {cell:?} for a null");
            } else {
                prop_assert!(holds(column, &cell, &want_cell), "{name} row {row}: {cell:?}, want {want_cell:?}");
            }
        }
        for column in &got.columns {
            if !named.contains(column.name.as_str()) {
                let cell = column.cell(row).expect("row in range");
                prop_assert!(is_missing(&cell), "{} row {row} holds {cell:?}: the item has no such leaf", column.name);
            }
        }
        if row == 0 {
            // Schema order: the first item's leaves come in the columns' order.
            let order: Vec<usize> =
                leaves.iter().filter_map(|(name, _)| position.get(name.as_str()).copied()).collect();
            prop_assert!(order.windows(2).all(|w| w[0] < w[1]), "column order {order:?}");
        }
    }
    Ok(got)
}

/// Shell-style `*` wildcards, as the tests' patterns use them.
fn glob(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            name.starts_with(head)
                && (head.len()..=name.len()).any(|i| name.is_char_boundary(i) && glob(tail, &name[i..]))
        }
    }
}

/// Whether `fields` keeps column `name`: a pattern matches it or one of its dotted prefixes.
fn kept(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| glob(p, name) || name.match_indices('.').any(|(i, _)| glob(p, &name[..i])))
}

// ---------------------------------------------------------------------------------------
// Records written through serde

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
enum Mode {
    #[default]
    Stopped,
    Position,
    Brake,
}

/// Bytes, as the `bytes` schema type.
#[derive(Debug, Clone, Default)]
struct Blob(Vec<u8>);

impl Serialize for Blob {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

#[derive(Debug, Clone, Default, Serialize)]
struct Joint {
    id: u8,
    position: f32,
    #[serde(serialize_with = "schema::typed_option")]
    fault: Option<u16>,
}

#[derive(Debug, Clone, Serialize)]
struct Sample {
    small: i8,
    medium: i16,
    wide: i32,
    big: i64,
    byte: u8,
    count: u32,
    unsigned: u64,
    ratio: f32,
    value: f64,
    flag: bool,
    name: String,
    blob: Blob,
    at: Timestamp,
    took: Duration,
    #[serde(serialize_with = "schema::typed_enum")]
    mode: Mode,
    #[serde(serialize_with = "schema::typed_option")]
    maybe: Option<f64>,
    #[serde(serialize_with = "schema::typed_option")]
    spare: Option<Joint>,
    #[serde(serialize_with = "schema::typed_vec")]
    joints: Vec<Joint>,
    gains: [f64; 3],
    #[serde(serialize_with = "schema::typed_map")]
    named: BTreeMap<String, i16>,
    pair: (u8, String),
    /// Collides with the timestamps' name: `timestamp#2`.
    timestamp: u16,
    nothing: (),
}

impl Default for Sample {
    fn default() -> Self {
        Sample {
            small: 0,
            medium: 0,
            wide: 0,
            big: 0,
            byte: 0,
            count: 0,
            unsigned: 0,
            ratio: 0.0,
            value: 0.0,
            flag: false,
            name: String::new(),
            blob: Blob::default(),
            at: Timestamp(0),
            took: Duration(0),
            mode: Mode::Stopped,
            maybe: None,
            spare: None,
            joints: Vec::new(),
            gains: [0.0; 3],
            named: BTreeMap::new(),
            pair: (0, String::new()),
            timestamp: 0,
            nothing: (),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
struct Other {
    value: f64,
}

fn joint() -> impl Strategy<Value = Joint> {
    (any::<u8>(), any::<f32>(), any::<Option<u16>>()).prop_map(|(id, position, fault)| Joint { id, position, fault })
}

fn sample() -> impl Strategy<Value = Sample> {
    let ints = (any::<i8>(), any::<i16>(), any::<i32>(), any::<i64>(), any::<u8>(), any::<u32>(), any::<u64>());
    let floats =
        (any::<f32>(), any::<f64>(), any::<bool>(), "[a-z0-9 é\"]{0,8}", prop::collection::vec(any::<u8>(), 0..6));
    let times = (any::<i64>(), any::<i64>(), 0u8..3, any::<Option<f64>>(), prop::option::of(joint()));
    let nested = (
        prop::collection::vec(joint(), 0..4),
        any::<[f64; 3]>(),
        prop::collection::btree_map("[a-d]{1,2}", any::<i16>(), 0..4),
        (any::<u8>(), "[xy]{0,3}"),
        any::<u16>(),
    );
    (ints, floats, times, nested).prop_map(|(i, f, t, n)| Sample {
        small: i.0,
        medium: i.1,
        wide: i.2,
        big: i.3,
        byte: i.4,
        count: i.5,
        unsigned: i.6,
        ratio: f.0,
        value: f.1,
        flag: f.2,
        name: f.3,
        blob: Blob(f.4),
        at: Timestamp(t.0),
        took: Duration(t.1),
        mode: [Mode::Stopped, Mode::Position, Mode::Brake][usize::from(t.2)],
        maybe: t.3,
        spare: t.4,
        joints: n.0,
        gains: n.1,
        named: n.2,
        pair: n.3,
        timestamp: n.4,
        nothing: (),
    })
}

fn writer_options() -> impl Strategy<Value = WriterOptions> {
    (
        any::<bool>(),
        prop::option::of(1i32..4),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(1i64..20_000),
        any::<bool>(),
    )
        .prop_map(|(snappy, zstd_level, checksum, previous_offset, seek_marker_interval_us, index)| {
            WriterOptions { snappy, zstd_level, checksum, previous_offset, seek_marker_interval_us, index }
        })
}

/// A log of `samples` (one every 1 ms; `untimed[i]` writes item i without a timestamp)
/// interleaved with another record.
fn sample_log(samples: &[Sample], untimed: &[bool], options: WriterOptions) -> Vec<u8> {
    let mut writer = FileWriter::new(Vec::new(), options).unwrap();
    let handle = writer.register::<Sample>("sample").unwrap();
    let other = writer.register::<Other>("other").unwrap();
    for (i, s) in samples.iter().enumerate() {
        let t = START_US + i as i64 * 1_000;
        if untimed.get(i).copied().unwrap_or(false) {
            let mut payload = Vec::new();
            rtloop_tlog::ser::to_bytes(s, &mut payload).unwrap();
            writer.write_data(handle.id(), None, &payload).unwrap();
        } else {
            writer.write(&handle, t, s).unwrap();
        }
        writer.write(&other, t + 1, &Other { value: i as f64 }).unwrap();
    }
    writer.close().unwrap()
}

#[test]
fn a_fixed_sample_reads_as_documented() {
    let joints = vec![Joint { id: 1, position: 0.5, fault: None }, Joint { id: 2, position: -1.0, fault: Some(7) }];
    let samples = [
        Sample { count: 3, mode: Mode::Brake, joints, maybe: Some(2.5), ..Sample::default() },
        Sample { count: 4, name: "b".into(), unsigned: u64::MAX, ..Sample::default() },
    ];
    let bytes = sample_log(&samples, &[false, true], WriterOptions::default());
    let reader = FileReader::from_bytes(bytes).unwrap();
    let got = columns::read(&reader, "sample", &ColumnOptions::default()).unwrap();
    assert_eq!(got.timestamps_us, vec![START_US, NO_TIMESTAMP]);
    assert_eq!(got.get("count").unwrap().data, ColumnData::U64(vec![3, 4]));
    assert_eq!(got.get("unsigned").unwrap().data, ColumnData::U64(vec![0, u64::MAX]));
    assert_eq!(got.get("mode").unwrap().data, ColumnData::U64(vec![2, 0]));
    assert_eq!(got.get("name").unwrap().data, ColumnData::Obj(vec![Cell::Str(String::new()), Cell::Str("b".into())]));
    assert!(got.get("timestamp").is_none() && got.get("timestamp#2").is_some());
    // The second item has no joints: its cells are missing, marked for integers.
    let id = got.get("joints.1.id").unwrap();
    assert_eq!((&id.data, &id.missing), (&ColumnData::U64(vec![2, 0]), &Some(vec![false, true])));
    assert_eq!(id.clone().into_f64()[0], 2.0);
    assert!(id.clone().into_f64()[1].is_nan());
    let maybe = got.get("maybe").unwrap();
    assert!(matches!(&maybe.data, ColumnData::F64(v) if v[0] == 2.5 && v[1].is_nan()));
    // `spare` was never set: its columns exist (from the schema), all missing.
    let spare = got.get("spare.id").unwrap();
    assert_eq!(spare.missing, Some(vec![true, true]));
    // Schema order.
    let names: Vec<&str> = got.columns.iter().map(|c| c.name.as_str()).collect();
    let at = |n: &str| names.iter().position(|x| *x == n).unwrap();
    assert!(
        at("small") < at("joints.0.id")
            && at("joints.0.fault") < at("joints.1.id")
            && at("joints.1.id") < at("gains.0")
    );
    let with_names = ColumnOptions { enum_names: true, ..ColumnOptions::default() };
    let got = columns::read(&reader, "sample", &with_names).unwrap();
    assert_eq!(
        got.get("mode").unwrap().data,
        ColumnData::Obj(vec![Cell::Str("Brake".into()), Cell::Str("Stopped".into())])
    );
    assert!(got.problems.is_empty());
}

#[test]
fn errors_are_typed() {
    let bytes = sample_log(&[Sample::default()], &[], WriterOptions::default());
    let reader = FileReader::from_bytes(bytes).unwrap();
    let none = columns::read(&reader, "nope", &ColumnOptions::default());
    assert_eq!(none, Err(ColumnsError::NoRecord { record: "nope".into() }));
    let fields = ColumnOptions { fields: Some(vec!["count".into(), "no.such*".into()]), ..ColumnOptions::default() };
    match columns::read(&reader, "sample", &fields) {
        Err(ColumnsError::NoMatch { patterns, sample, columns, .. }) => {
            assert_eq!(patterns, vec!["no.such*".to_string()]);
            assert!(columns > sample.len() && sample.contains(&"small".to_string()), "{sample:?} of {columns}");
        }
        other => panic!("{other:?}"),
    }
    // mjlib's golden file: its schema is the opaque bytes "testschema".
    let mut writer = FileWriter::new(Vec::new(), WriterOptions::default()).unwrap();
    let id = writer.allocate_id("test");
    writer.write_schema(id, b"testschema").unwrap();
    writer.write_data(id, Some(START_US), b"testdata").unwrap();
    let reader = FileReader::from_bytes(writer.close().unwrap()).unwrap();
    let error = columns::read(&reader, "test", &ColumnOptions::default()).unwrap_err();
    assert!(matches!(&error, ColumnsError::SchemaUnreadable { record, .. } if record == "test"), "{error:?}");
    assert!(error.to_string().contains("does not parse"), "{error}");
    // fixedarray(2^40, float64): refused before anything is set up.
    let huge = Schema::Object(vec![Field::new("a", Schema::FixedArray(1 << 40, Box::new(Schema::Float64)))]);
    let error = read_one(&huge, &[&[]]).unwrap_err();
    assert_eq!(error, ColumnsError::TooLarge { record: "x".into(), limit: columns::MAX_NODES });
    // An enum over a string cannot be a column of integers.
    let odd =
        Schema::Object(vec![Field::new("e", Schema::Enum { underlying: Box::new(Schema::String), items: vec![] })]);
    let error = read_one(&odd, &[&[0]]).unwrap_err();
    assert!(matches!(error, ColumnsError::Unsupported { .. }), "{error:?}");
}

#[test]
fn an_array_claiming_2_to_the_60_items_is_an_undecodable_item() {
    let schema = Schema::Object(vec![Field::new("a", Schema::Array(Box::new(Schema::Null)))]);
    let mut payload = Vec::new();
    write_varuint(&mut payload, 1 << 60);
    let got = read_one(&schema, &[&payload, &[1]]).unwrap();
    assert_eq!(got.rows(), 1);
    assert_eq!(got.problems.skipped(), 1);
}

#[test]
fn a_record_wider_than_the_staging_block_reads_as_the_reference() {
    // 5000 columns (more than are staged) of varying presence, over more than one block of
    // rows, one column widening from integers to floats half way.
    let schema = Schema::Object(vec![
        Field::new("a", Schema::Array(Box::new(Schema::FixedUInt(1)))),
        Field::new("u", Schema::Union(vec![Schema::VarUInt, Schema::Float64])),
    ]);
    let payloads: Vec<Vec<u8>> = (0..150u32)
        .map(|i| {
            let mut p = Vec::new();
            let n = 4000 + (i * 37) % 1000;
            write_varuint(&mut p, u64::from(n));
            p.extend((0..n).map(|k| (k ^ i) as u8));
            if i < 100 {
                p.extend([0, i as u8]);
            } else {
                p.push(1);
                p.extend_from_slice(&f64::from(i).to_le_bytes());
            }
            p
        })
        .collect();
    let payloads: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    let reader = raw_log(&schema.to_binary(), &payloads);
    let got = assert_agrees(&reader, "x", &ColumnOptions::default()).unwrap();
    assert_eq!((got.rows(), got.columns.len()), (150, 4999 + 1));
    assert!(matches!(got.get("u").unwrap().data, ColumnData::F64(_)));
    // In chunks too: across staging blocks, past the staged columns, widening mid-chunk.
    for rows in [7, 63, 64, 65, 149] {
        for mask_floats in [false, true] {
            assert_chunks_agree(&reader, "x", &ColumnOptions { mask_floats, ..ColumnOptions::default() }, rows)
                .unwrap();
        }
    }
}

#[test]
fn long_reads_in_chunks_across_staging_blocks_are_the_whole_read() {
    // More rows than several staging blocks (64 rows), chunk sizes on and off their edges,
    // arrays that grow and shrink, optional values, untimed items.
    let samples: Vec<Sample> = (0..700u32)
        .map(|i| Sample {
            count: i,
            value: f64::from(i) / 3.0,
            flag: i % 3 == 0,
            maybe: (i % 5 != 0).then_some(f64::from(i)),
            name: format!("n{}", i % 7),
            joints: (0..(i % 4) as u8).map(|id| Joint { id, position: f32::from(id), fault: None }).collect(),
            named: (0..(i % 3)).map(|k| (format!("k{k}"), k as i16)).collect(),
            ..Sample::default()
        })
        .collect();
    let untimed: Vec<bool> = (0..700).map(|i| i % 97 == 0).collect();
    let reader = FileReader::from_bytes(sample_log(&samples, &untimed, WriterOptions::default())).unwrap();
    for rows in [1, 63, 64, 65, 128, 200, 699, 700, 10_000] {
        for mask_floats in [false, true] {
            let options = ColumnOptions { mask_floats, enum_names: rows % 2 == 0, ..ColumnOptions::default() };
            assert_chunks_agree(&reader, "sample", &options, rows).unwrap();
        }
    }
}

/// Record "x" of `schema` with one item per payload, read with the default options.
fn read_one(schema: &Schema, payloads: &[&[u8]]) -> Result<Columns, ColumnsError> {
    read_raw(&schema.to_binary(), payloads, &ColumnOptions::default())
}

/// Record "x" with the schema bytes `schema` and one item per payload.
fn raw_log(schema: &[u8], payloads: &[&[u8]]) -> FileReader {
    let mut writer = FileWriter::new(Vec::new(), WriterOptions::default()).unwrap();
    let id = writer.allocate_id("x");
    writer.write_schema(id, schema).unwrap();
    for (i, payload) in payloads.iter().enumerate() {
        writer.write_data(id, Some(START_US + i as i64), payload).unwrap();
    }
    FileReader::from_bytes(writer.close().unwrap()).unwrap()
}

fn read_raw(schema: &[u8], payloads: &[&[u8]], options: &ColumnOptions) -> Result<Columns, ColumnsError> {
    columns::read(&raw_log(schema, payloads), "x", options)
}

// ---------------------------------------------------------------------------------------
// A hand-written schema with unions that widen

/// `u`: a union whose alternatives all land in column `u`; `e`: an enum naming 0 and 1;
/// `s.x`: a float32 or a string under one name; `m`: a map of unions.
fn mixed_schema() -> Schema {
    let union = Schema::Union(vec![
        Schema::Null,
        Schema::VarInt,
        Schema::String,
        Schema::Float64,
        Schema::Bool,
        Schema::FixedUInt(8),
    ]);
    Schema::Object(vec![
        Field::new("u", union.clone()),
        Field::new(
            "e",
            Schema::Enum { underlying: Box::new(Schema::VarUInt), items: vec![(0, "zero".into()), (1, "one".into())] },
        ),
        Field::new(
            "s",
            Schema::Union(vec![
                Schema::Object(vec![Field::new("x", Schema::Float32)]),
                Schema::Object(vec![Field::new("x", Schema::String)]),
                Schema::Null,
            ]),
        ),
        Field::new("m", Schema::Map(Box::new(union))),
    ])
}

/// One value of the union of [`mixed_schema`].
#[derive(Debug, Clone)]
enum Mixed {
    Null,
    Int(i64),
    Text(String),
    Float(f64),
    Flag(bool),
    Big(u64),
}

fn mixed() -> impl Strategy<Value = Mixed> {
    prop_oneof![
        Just(Mixed::Null),
        any::<i64>().prop_map(Mixed::Int),
        "[a-z]{0,3}".prop_map(Mixed::Text),
        any::<f64>().prop_map(Mixed::Float),
        any::<bool>().prop_map(Mixed::Flag),
        any::<u64>().prop_map(Mixed::Big),
    ]
}

fn encode_mixed(value: &Mixed, out: &mut Vec<u8>) {
    match value {
        Mixed::Null => write_varuint(out, 0),
        Mixed::Int(v) => {
            write_varuint(out, 1);
            write_varint(out, *v);
        }
        Mixed::Text(s) => {
            write_varuint(out, 2);
            write_string(out, s);
        }
        Mixed::Float(v) => {
            write_varuint(out, 3);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Mixed::Flag(b) => {
            write_varuint(out, 4);
            out.push(u8::from(*b));
        }
        Mixed::Big(v) => {
            write_varuint(out, 5);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// One item of [`mixed_schema`]: `u`, the enum's integer, `s` (float, text or none), `m`.
type MixedItem = (Mixed, u64, Option<Result<f32, String>>, Vec<(String, Mixed)>);

fn mixed_item() -> impl Strategy<Value = MixedItem> {
    (
        mixed(),
        0u64..4,
        prop::option::of(prop_oneof![any::<f32>().prop_map(Ok), "[a-z]{0,2}".prop_map(Err)]),
        prop::collection::btree_map("[pq]{1,2}", mixed(), 0..3).prop_map(|m| m.into_iter().collect()),
    )
}

fn encode_item(item: &MixedItem) -> Vec<u8> {
    let mut out = Vec::new();
    encode_mixed(&item.0, &mut out);
    write_varuint(&mut out, item.1);
    match &item.2 {
        Some(Ok(x)) => {
            write_varuint(&mut out, 0);
            out.extend_from_slice(&x.to_le_bytes());
        }
        Some(Err(s)) => {
            write_varuint(&mut out, 1);
            write_string(&mut out, s);
        }
        None => write_varuint(&mut out, 2),
    }
    write_varuint(&mut out, item.3.len() as u64);
    for (key, value) in &item.3 {
        write_string(&mut out, key);
        encode_mixed(value, &mut out);
    }
    out
}

#[test]
fn a_union_of_an_int_and_a_string_widens_to_objects() {
    let items = [
        (Mixed::Int(-3), 0, Some(Ok(1.5)), vec![]),
        (Mixed::Text("hi".into()), 1, Some(Err("s".into())), vec![("p".into(), Mixed::Flag(true))]),
        (Mixed::Null, 7, None, vec![("p".into(), Mixed::Float(0.25))]),
    ];
    let payloads: Vec<Vec<u8>> = items.iter().map(encode_item).collect();
    let payloads: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    let got = read_one(&mixed_schema(), &payloads).unwrap();
    assert_eq!(got.get("u").unwrap().data, ColumnData::Obj(vec![Cell::I64(-3), Cell::Str("hi".into()), Cell::None]));
    assert_eq!(got.get("e").unwrap().data, ColumnData::U64(vec![0, 1, 7]));
    let sx = got.get("s.x").unwrap();
    assert!(matches!(&sx.data, ColumnData::Obj(v) if v[0] == Cell::F64(1.5) && v[1] == Cell::Str("s".into())));
    let mp = got.get("m.p").unwrap();
    assert!(matches!(&mp.data, ColumnData::F64(v) if v[0].is_nan() && v[1] == 1.0 && v[2] == 0.25), "{mp:?}");
}

// ---------------------------------------------------------------------------------------
// Properties

fn cases() -> ProptestConfig {
    // ProptestConfig::default() honours PROPTEST_CASES.
    ProptestConfig::default()
}

/// A time window over the sample log's 1 ms grid: none, from, to or both.
fn window() -> impl Strategy<Value = (Option<i64>, Option<i64>)> {
    (prop::option::of(-2i64..12), prop::option::of(-2i64..12))
        .prop_map(|(a, b)| (a.map(|ms| START_US + ms * 1_000), b.map(|ms| START_US + ms * 1_000)))
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn serde_records_read_as_the_reference(
        samples in prop::collection::vec(sample(), 0..10),
        untimed in prop::collection::vec(prop::bool::weighted(0.2), 0..10),
        options in writer_options(),
        (from_us, to_us) in window(),
        enum_names in any::<bool>(),
    ) {
        let bytes = sample_log(&samples, &untimed, options);
        let reader = FileReader::from_bytes(bytes).unwrap();
        let options = ColumnOptions { from_us, to_us, fields: None, enum_names, ..ColumnOptions::default() };
        let got = assert_agrees(&reader, "sample", &options)?;
        prop_assert!(got.problems.is_empty(), "{:?}", got.problems);
        if samples.is_empty() {
            // No item: the schema's fixed columns, empty.
            prop_assert!(got.get("small").is_some_and(|c| c.data == ColumnData::I64(vec![])));
        }
        let other = assert_agrees(&reader, "other", &ColumnOptions { from_us, to_us, ..ColumnOptions::default() })?;
        prop_assert_eq!(other.columns.len(), 1);
    }

    #[test]
    fn mixed_unions_read_as_the_reference(
        items in prop::collection::vec(mixed_item(), 0..12),
        enum_names in any::<bool>(),
    ) {
        let payloads: Vec<Vec<u8>> = items.iter().map(encode_item).collect();
        let payloads: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let reader = raw_log(&mixed_schema().to_binary(), &payloads);
        assert_agrees(&reader, "x", &ColumnOptions { enum_names, ..ColumnOptions::default() })?;
    }

    #[test]
    fn fields_keep_exactly_the_matching_columns(
        samples in prop::collection::vec(sample(), 1..5),
        picks in prop::collection::vec(0usize..9, 1..4),
    ) {
        let patterns = ["small", "joints", "joints.*.position", "named.*", "gains.1", "*.id", "spare", "na*", "pair"];
        let fields: Vec<String> = picks.iter().map(|&i| patterns[i].to_string()).collect();
        let reader = FileReader::from_bytes(sample_log(&samples, &[], WriterOptions::default())).unwrap();
        let full = columns::read(&reader, "sample", &ColumnOptions::default()).unwrap();
        let options = ColumnOptions { fields: Some(fields.clone()), ..ColumnOptions::default() };
        let want: Vec<Column> = full.columns.iter().filter(|c| kept(&fields, &c.name)).cloned().collect();
        let unmatched: Vec<String> =
            fields.iter().filter(|p| !full.columns.iter().any(|c| kept(std::slice::from_ref(p), &c.name))).cloned().collect();
        match columns::read(&reader, "sample", &options) {
            Ok(got) => {
                prop_assert!(unmatched.is_empty(), "{unmatched:?} matched nothing, yet no error");
                // Compared as text: NaN cells are equal there.
                prop_assert_eq!(format!("{:?}", got.columns), format!("{want:?}"));
                prop_assert_eq!(&got.timestamps_us, &full.timestamps_us);
            }
            Err(ColumnsError::NoMatch { patterns, .. }) => prop_assert_eq!(patterns, unmatched),
            Err(e) => prop_assert!(false, "{e}"),
        }
    }

    #[test]
    fn arbitrary_payloads_under_a_known_schema_read_as_the_reference(
        payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..48), 0..8),
        mixed_schema_too in any::<bool>(),
    ) {
        let payloads: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let schema = if mixed_schema_too { mixed_schema() } else { rtloop_tlog::schema::schema_of::<Sample>().unwrap() };
        let reader = raw_log(&schema.to_binary(), &payloads);
        let got = assert_agrees(&reader, "x", &ColumnOptions::default())?;
        prop_assert_eq!(got.rows() as u64 + got.problems.skipped(), payloads.len() as u64);
    }

    #[test]
    fn mutated_sample_payloads_read_as_the_reference(
        sample in sample(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let mut payload = Vec::new();
        rtloop_tlog::ser::to_bytes(&sample, &mut payload).unwrap();
        for (at, xor) in flips {
            let at = at.index(payload.len());
            payload[at] ^= xor;
        }
        if let Some(cut) = cut {
            payload.truncate(cut.index(payload.len() + 1));
        }
        let reader = raw_log(&rtloop_tlog::schema::schema_of::<Sample>().unwrap().to_binary(), &[&payload, &payload]);
        assert_agrees(&reader, "x", &ColumnOptions::default())?;
        assert_agrees(&reader, "x", &ColumnOptions { enum_names: true, ..ColumnOptions::default() })?;
    }

    #[test]
    fn arbitrary_schema_bytes_never_panic(
        schema in prop::collection::vec(any::<u8>(), 0..48),
        payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..32), 0..4),
        enum_names in any::<bool>(),
    ) {
        let payloads: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let options = ColumnOptions { enum_names, ..ColumnOptions::default() };
        if let Ok(got) = read_raw(&schema, &payloads, &options) {
            assert_consistent(&got);
            prop_assert_eq!(got.rows() as u64 + got.problems.skipped(), payloads.len() as u64);
        }
    }

    #[test]
    fn arbitrary_bytes_as_a_log_never_panic(tail in prop::collection::vec(any::<u8>(), 0..1024), header in any::<bool>()) {
        let mut bytes = if header { b"TLOG0003\0".to_vec() } else { Vec::new() };
        bytes.extend_from_slice(&tail);
        let Ok(reader) = FileReader::from_bytes(bytes) else { return Ok(()) };
        let mut names: Vec<String> = reader.records().into_iter().map(|r| r.name).take(8).collect();
        names.push("no such record".into());
        for name in &names {
            for options in [
                ColumnOptions::default(),
                ColumnOptions { enum_names: true, fields: Some(vec!["*".into()]), ..ColumnOptions::default() },
                ColumnOptions { from_us: Some(0), to_us: Some(i64::MAX), ..ColumnOptions::default() },
            ] {
                if let Ok(got) = columns::read(&reader, name, &options) {
                    assert_consistent(&got);
                }
            }
        }
    }

    #[test]
    fn a_mutated_sample_log_never_panics(
        samples in prop::collection::vec(sample(), 1..4),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..6),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let mut bytes = sample_log(&samples, &[], WriterOptions { seek_marker_interval_us: Some(1), ..WriterOptions::default() });
        for (at, xor) in flips {
            let at = at.index(bytes.len());
            bytes[at] ^= xor;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        let Ok(reader) = FileReader::from_bytes(bytes) else { return Ok(()) };
        for name in ["sample", "other"] {
            if let Ok(got) = columns::read(&reader, name, &ColumnOptions::default()) {
                assert_consistent(&got);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Chunks: `read_chunks` concatenated is `read`

/// Two cells hold the same value: both missing (or a NaN float), equal, or equal as floats
/// (a column that widened to floats later in the read).
fn same_cell(a: &Cell, b: &Cell) -> bool {
    if is_missing(a) || is_missing(b) {
        return is_missing(a) && is_missing(b);
    }
    match (a, b) {
        (Cell::F64(_), _) | (_, Cell::F64(_)) => a.as_f64().zip(b.as_f64()).is_some_and(|(x, y)| same_float(x, y)),
        _ => a == b,
    }
}

/// Assert that the chunks of `read_chunks(…, rows)` concatenated are what `read` gives: the
/// same rows (every chunk full but the last), timestamps and offsets, every column's cells
/// (a column missing from a chunk has no value in its rows), the problems merged and the
/// collisions summed, the last chunk's columns the whole read's, in order; or the same error.
fn assert_chunks_agree(
    reader: &FileReader,
    record: &str,
    options: &ColumnOptions,
    rows: usize,
) -> Result<(), TestCaseError> {
    let whole = columns::read(reader, record, options);
    let chunks: Result<Vec<Columns>, ColumnsError> =
        columns::read_chunks(reader, record, options, rows).and_then(|chunks| chunks.collect());
    let (whole, chunks) = match (whole, chunks) {
        (Ok(whole), Ok(chunks)) => (whole, chunks),
        (Err(a), Err(b)) => {
            prop_assert_eq!(a, b);
            return Ok(());
        }
        (whole, chunks) => {
            return Err(TestCaseError::fail(format!("read {:?}, chunks {:?}", whole.err(), chunks.err())));
        }
    };
    prop_assert!(!chunks.is_empty(), "no chunk at all");
    for (i, chunk) in chunks.iter().enumerate() {
        assert_consistent_masked(chunk, options.mask_floats);
        if i + 1 < chunks.len() {
            prop_assert_eq!(chunk.rows(), rows, "chunk {} of {} is not full", i, chunks.len());
        } else {
            prop_assert!(chunk.rows() <= rows);
        }
    }
    let timestamps: Vec<i64> = chunks.iter().flat_map(|c| c.timestamps_us.iter().copied()).collect();
    prop_assert_eq!(&timestamps, &whole.timestamps_us);
    let offsets: Vec<u64> = chunks.iter().flat_map(|c| c.item_offsets.iter().copied()).collect();
    prop_assert_eq!(&offsets, &whole.item_offsets);
    let last = chunks.last().unwrap();
    let names = |c: &Columns| c.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    prop_assert_eq!(names(last), names(&whole));
    for column in &whole.columns {
        let mut row = 0;
        for chunk in &chunks {
            let part = chunk.get(&column.name);
            for r in 0..chunk.rows() {
                let got = part.and_then(|p| p.cell(r)).unwrap_or(Cell::None);
                let want = column.cell(row).unwrap();
                prop_assert!(
                    same_cell(&got, &want),
                    "{} row {}: {:?} in chunks, {:?} whole",
                    column.name,
                    row,
                    got,
                    want
                );
                row += 1;
            }
        }
    }
    let mut problems = rtloop_tlog::survey::Problems::default();
    for chunk in &chunks {
        problems.merge(chunk.problems.clone());
    }
    prop_assert_eq!(problems.list(), whole.problems.list());
    prop_assert_eq!(chunks.iter().map(|c| c.collisions).sum::<u64>(), whole.collisions);
    Ok(())
}

/// [`assert_consistent`], where float columns may keep a mask too (`mask_floats`).
fn assert_consistent_masked(got: &Columns, mask_floats: bool) {
    if !mask_floats {
        return assert_consistent(got);
    }
    let rows = got.rows();
    assert_eq!(got.item_offsets.len(), rows);
    for column in &got.columns {
        assert_eq!(column.len(), rows, "column {} has {} rows of {rows}", column.name, column.len());
        if let Some(missing) = &column.missing {
            assert_eq!(missing.len(), rows, "mask of {}", column.name);
            assert!(!matches!(column.data, ColumnData::Obj(_) | ColumnData::Null(_)));
        }
    }
}

#[test]
fn masked_floats_tell_a_nan_from_no_value() {
    let samples = [
        Sample { maybe: Some(f64::NAN), ..Sample::default() },
        Sample { maybe: None, ..Sample::default() },
        Sample { maybe: Some(2.5), ..Sample::default() },
    ];
    let reader = FileReader::from_bytes(sample_log(&samples, &[], WriterOptions::default())).unwrap();
    let plain = columns::read(&reader, "sample", &ColumnOptions::default()).unwrap();
    assert_eq!(plain.get("maybe").unwrap().missing, None);
    let masked =
        columns::read(&reader, "sample", &ColumnOptions { mask_floats: true, ..ColumnOptions::default() }).unwrap();
    let maybe = masked.get("maybe").unwrap();
    assert_eq!(maybe.missing, Some(vec![false, true, false]));
    assert!(matches!(maybe.cell(0), Some(Cell::F64(x)) if x.is_nan()));
    assert_eq!(maybe.cell(1), Some(Cell::None));
    assert_eq!(maybe.cell(2), Some(Cell::F64(2.5)));
    // The same values otherwise, and floats never missing in a column every row fills.
    assert_eq!(masked.get("value").unwrap().missing, None);
    assert_eq!(format!("{:?}", plain.get("maybe").unwrap().data), format!("{:?}", maybe.data));
}

#[test]
fn chunks_of_a_damaged_log_carry_its_damage() {
    let samples: Vec<Sample> = (0..20).map(|i| Sample { count: i, ..Sample::default() }).collect();
    let mut bytes = sample_log(&samples, &[], WriterOptions::default());
    bytes.truncate(bytes.len() * 2 / 3);
    let reader = FileReader::from_bytes(bytes).unwrap();
    let chunks: Vec<Columns> =
        columns::read_chunks(&reader, "sample", &ColumnOptions::default(), 4).unwrap().map(Result::unwrap).collect();
    let whole = columns::read(&reader, "sample", &ColumnOptions::default()).unwrap();
    assert!(whole.rows() > 4 && whole.rows() < 20, "{}", whole.rows());
    assert!(whole.problems.list().iter().any(|p| p.kind == rtloop_tlog::survey::ProblemKind::Truncated));
    // The cut is met after the last item: its chunk may have no rows, but it comes.
    assert!(chunks
        .last()
        .unwrap()
        .problems
        .list()
        .iter()
        .any(|p| p.kind == rtloop_tlog::survey::ProblemKind::Truncated));
    assert_eq!(chunks.iter().map(Columns::rows).sum::<usize>(), whole.rows());
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn serde_records_in_chunks_are_the_whole_read(
        samples in prop::collection::vec(sample(), 0..12),
        untimed in prop::collection::vec(prop::bool::weighted(0.2), 0..12),
        options in writer_options(),
        (from_us, to_us) in window(),
        enum_names in any::<bool>(),
        mask_floats in any::<bool>(),
        rows in 1usize..6,
    ) {
        let reader = FileReader::from_bytes(sample_log(&samples, &untimed, options)).unwrap();
        let options = ColumnOptions { from_us, to_us, fields: None, enum_names, mask_floats };
        assert_chunks_agree(&reader, "sample", &options, rows)?;
        assert_chunks_agree(&reader, "other", &options, rows)?;
    }

    #[test]
    fn widening_unions_in_chunks_are_the_whole_read(
        items in prop::collection::vec(mixed_item(), 0..14),
        enum_names in any::<bool>(),
        mask_floats in any::<bool>(),
        rows in 1usize..6,
    ) {
        let payloads: Vec<Vec<u8>> = items.iter().map(encode_item).collect();
        let payloads: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let reader = raw_log(&mixed_schema().to_binary(), &payloads);
        let options = ColumnOptions { enum_names, mask_floats, ..ColumnOptions::default() };
        assert_chunks_agree(&reader, "x", &options, rows)?;
    }

    #[test]
    fn fields_in_chunks_are_the_whole_read(
        samples in prop::collection::vec(sample(), 0..6),
        picks in prop::collection::vec(0usize..5, 1..3),
        rows in 1usize..4,
    ) {
        let patterns = ["small", "joints.*.position", "named.*", "nope", "*.id"];
        let fields: Vec<String> = picks.iter().map(|&i| patterns[i].to_string()).collect();
        let reader = FileReader::from_bytes(sample_log(&samples, &[], WriterOptions::default())).unwrap();
        assert_chunks_agree(&reader, "sample", &ColumnOptions { fields: Some(fields), ..ColumnOptions::default() }, rows)?;
    }

    #[test]
    fn damaged_logs_in_chunks_are_the_whole_read(
        samples in prop::collection::vec(sample(), 1..8),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..6),
        cut in prop::option::of(any::<prop::sample::Index>()),
        payload_bytes in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..6),
        rows in 1usize..5,
    ) {
        let mut bytes = sample_log(&samples, &[], WriterOptions { seek_marker_interval_us: Some(1), ..WriterOptions::default() });
        for (at, xor) in flips {
            let at = at.index(bytes.len());
            bytes[at] ^= xor;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        if let Ok(reader) = FileReader::from_bytes(bytes) {
            for name in ["sample", "other"] {
                assert_chunks_agree(&reader, name, &ColumnOptions::default(), rows)?;
                assert_chunks_agree(&reader, name, &ColumnOptions { mask_floats: true, ..ColumnOptions::default() }, rows)?;
            }
        }
        // Payloads that do not decode, between ones that do.
        let payloads: Vec<&[u8]> = payload_bytes.iter().map(Vec::as_slice).collect();
        let reader = raw_log(&rtloop_tlog::schema::schema_of::<Sample>().unwrap().to_binary(), &payloads);
        assert_chunks_agree(&reader, "x", &ColumnOptions::default(), rows)?;
    }
}
