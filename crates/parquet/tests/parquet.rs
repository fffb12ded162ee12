//! `rtloop-parquet`: tables read back with the Parquet crate's own
//! Arrow reader and compared with the CSV export of the same log.
//!
//! * Names: the CSV header's, in its order, after `timestamp`; constant columns first, a
//!   record field of the same name renamed `name#2`.
//! * Types kept (DOUBLE, FLOAT, INT64, UINT64, BOOLEAN, UTF8, BINARY, enums as names,
//!   `TIMESTAMP(MICROS, UTC)`), NULL where a row lacks the value, NaN kept as NaN; every
//!   cell as the CSV writes it.
//! * Row groups bounded by rows and by values; an array that grows after the first row
//!   group, a union that changes type: converted where the value fits, else counted.
//! * A cut or corrupt log: what remains, the damage counted, as the CSV export has it; a
//!   record without items: an empty table; several records in one walk.
//! * Hostile logs: never a panic.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int64Type, TimestampMicrosecondType, UInt64Type};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use proptest::prelude::*;
use rtloop_parquet::{records_to_parquet, to_parquet, ParquetOptions, ParquetStats};
use rtloop_tlog::format::{write_string, write_varint, write_varuint};
use rtloop_tlog::reader::FileReader;
use rtloop_tlog::schema::{self, Field, Schema};
use rtloop_tlog::survey::ProblemKind;
use rtloop_tlog::writer::{FileWriter, WriterOptions};
use serde::{Deserialize, Serialize, Serializer};
use std::io::{Seek, Write};

const START_US: i64 = 1_700_000_000_000_000;

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
enum Mode {
    #[default]
    Stopped,
    Position,
}

#[derive(Debug, Clone, Default)]
struct Blob(Vec<u8>);

impl Serialize for Blob {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

#[derive(Debug, Clone, Default, Serialize)]
struct Servo {
    id: u8,
    position: f64,
    #[serde(serialize_with = "schema::typed_option")]
    age: Option<u32>,
}

#[derive(Debug, Clone, Default, Serialize)]
struct Cycle {
    index: u64,
    cycle_us: f64,
    torque: f32,
    delta: i16,
    ok: bool,
    label: String,
    #[serde(serialize_with = "schema::typed_enum")]
    mode: Mode,
    #[serde(serialize_with = "schema::typed_vec")]
    servo: Vec<Servo>,
    quaternion: [f64; 4],
    blob: Blob,
}

/// Field names that collide with the columns a table adds.
#[derive(Debug, Clone, Default, Serialize)]
struct Clash {
    robot: u8,
    timestamp: u16,
    run: String,
}

#[derive(Debug, Clone, Default, Serialize)]
struct Quiet {
    level: f32,
}

/// Item `i` of the test log: servo arrays of 1 to 3, a missing age, a NaN position.
fn cycle(i: u64, servos: usize) -> Cycle {
    Cycle {
        index: i,
        cycle_us: 250.0 + i as f64 / 8.0,
        torque: -(i as f32) / 4.0,
        delta: (i as i16).wrapping_mul(-300),
        ok: i.is_multiple_of(3),
        label: format!("l{i}"),
        mode: if i.is_multiple_of(2) { Mode::Stopped } else { Mode::Position },
        servo: (0..servos)
            .map(|s| Servo {
                id: s as u8 + 1,
                position: if i == 2 && s == 0 { f64::NAN } else { i as f64 * 0.01 + s as f64 },
                age: (i % 4 != 1).then_some(i as u32),
            })
            .collect(),
        quaternion: [1.0, 0.0, -0.0, i as f64],
        blob: Blob(vec![0xab, i as u8]),
    }
}

/// A log of `n` cycles (the servo count from `servos`), a `clash` item after each of the
/// first two, and a `quiet` record without items.
fn log(n: u64, servos: impl Fn(u64) -> usize) -> Vec<u8> {
    let mut writer = FileWriter::new(Vec::new(), WriterOptions::default()).unwrap();
    let handle = writer.register::<Cycle>("cycle").unwrap();
    let clash = writer.register::<Clash>("clash").unwrap();
    writer.register::<Quiet>("quiet").unwrap();
    for i in 0..n {
        let t = START_US + i as i64 * 1_000;
        writer.write(&handle, t, &cycle(i, servos(i))).unwrap();
        if i < 2 {
            writer.write(&clash, t + 1, &Clash { robot: 7, timestamp: 9, run: "r".into() }).unwrap();
        }
    }
    writer.close().unwrap()
}

/// A Parquet file read back: its schema's batches, row groups and footer metadata.
struct Table {
    batches: Vec<RecordBatch>,
    row_groups: Vec<i64>,
    metadata: Vec<(String, String)>,
    schema: arrow_schema::SchemaRef,
}

fn read_table(bytes: &[u8]) -> Table {
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(bytes).unwrap();
    file.rewind().unwrap();
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    let row_groups = builder.metadata().row_groups().iter().map(|g| g.num_rows()).collect();
    let metadata = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .map(|kv| kv.iter().map(|k| (k.key.clone(), k.value.clone().unwrap_or_default())).collect())
        .unwrap_or_default();
    let schema = builder.schema().clone();
    let batches = builder.build().unwrap().collect::<Result<Vec<_>, _>>().unwrap();
    Table { batches, row_groups, metadata, schema }
}

impl Table {
    fn names(&self) -> Vec<String> {
        self.schema.fields().iter().map(|f| f.name().clone()).collect()
    }

    fn data_type(&self, name: &str) -> DataType {
        self.schema.field_with_name(name).unwrap().data_type().clone()
    }

    fn rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    /// Column `name` as the CSV writes its cells (`""` for NULL).
    fn csv_cells(&self, name: &str) -> Vec<String> {
        let mut cells = Vec::new();
        for batch in &self.batches {
            let array = batch.column_by_name(name).unwrap();
            for row in 0..array.len() {
                cells.push(if array.is_null(row) { String::new() } else { csv_cell(array.as_ref(), row) });
            }
        }
        cells
    }
}

fn float_text(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else {
        x.to_string()
    }
}

/// One non-null value as `rtloop_tlog::export::to_csv` writes it.
fn csv_cell(array: &dyn Array, row: usize) -> String {
    match array.data_type() {
        DataType::Float64 => float_text(array.as_primitive::<Float64Type>().value(row)),
        DataType::Float32 => {
            let x = array.as_primitive::<Float32Type>().value(row);
            if x == 0.0 {
                "0".into()
            } else {
                x.to_string()
            }
        }
        DataType::Int64 => array.as_primitive::<Int64Type>().value(row).to_string(),
        DataType::UInt64 => array.as_primitive::<UInt64Type>().value(row).to_string(),
        DataType::Boolean => u8::from(array.as_boolean().value(row)).to_string(),
        DataType::Utf8 => array.as_string::<i32>().value(row).to_string(),
        DataType::Binary => array.as_binary::<i32>().value(row).iter().map(|b| format!("{b:02x}")).collect(),
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            let us = array.as_primitive::<TimestampMicrosecondType>().value(row);
            format!("{}.{:06}", us.div_euclid(1_000_000), us.rem_euclid(1_000_000))
        }
        other => panic!("unexpected type {other}"),
    }
}

/// `record` of `bytes` as Parquet, with `options`.
fn export(bytes: &[u8], record: &str, options: &ParquetOptions) -> (ParquetStats, Table) {
    let reader = FileReader::from_bytes(bytes.to_vec()).unwrap();
    let mut out = Vec::new();
    let stats = to_parquet(&reader, record, &mut out, options, None).unwrap();
    assert_eq!(stats.bytes, out.len() as u64);
    (stats, read_table(&out))
}

/// `record` of `bytes` as CSV: the header and the rows, split at commas (the test data has
/// none inside a cell).
fn csv(bytes: &[u8], record: &str) -> (Vec<String>, Vec<Vec<String>>, rtloop_tlog::export::CsvStats) {
    let reader = FileReader::from_bytes(bytes.to_vec()).unwrap();
    let mut out = Vec::new();
    let stats = rtloop_tlog::export::to_csv(&reader, record, &mut out, None).unwrap();
    let text = String::from_utf8(out).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap().split(',').map(str::to_string).collect();
    let rows = lines.map(|l| l.split(',').map(str::to_string).collect()).collect();
    (header, rows, stats)
}

#[test]
fn columns_are_the_csv_columns_with_their_types() {
    // The first item has the longest servo array, so the CSV header has every column.
    let bytes = log(6, |i| if i == 0 { 3 } else { 1 + i as usize % 3 });
    let (stats, table) = export(&bytes, "cycle", &ParquetOptions::default());
    let (header, _, _) = csv(&bytes, "cycle");
    assert_eq!(table.names(), header);
    assert_eq!(stats.columns, header.len() - 1);
    assert_eq!((stats.rows, stats.row_groups, table.rows()), (6, 1, 6));
    let utc = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    for (name, want) in [
        ("timestamp", utc),
        ("index", DataType::UInt64),
        ("cycle_us", DataType::Float64),
        ("torque", DataType::Float32),
        ("delta", DataType::Int64),
        ("ok", DataType::Boolean),
        ("label", DataType::Utf8),
        ("mode", DataType::Utf8),
        ("servo.2.id", DataType::UInt64),
        ("servo.2.position", DataType::Float64),
        ("servo.0.age", DataType::UInt64),
        ("quaternion.3", DataType::Float64),
        ("blob", DataType::Binary),
    ] {
        assert_eq!(table.data_type(name), want, "{name}");
    }
    assert!(table.schema.fields().iter().all(|f| f.is_nullable()));
    assert!(table.metadata.iter().any(|(k, v)| k == "rtloop.record" && v == "cycle"));
}

#[test]
fn every_cell_is_the_csv_cell_nulls_where_a_row_lacks_the_value() {
    let bytes = log(9, |i| if i == 0 { 3 } else { 1 + i as usize % 3 });
    let (_, table) = export(&bytes, "cycle", &ParquetOptions { row_group_rows: 4, ..ParquetOptions::default() });
    let (header, rows, _) = csv(&bytes, "cycle");
    assert_eq!(table.row_groups, vec![4, 4, 1]);
    for (i, name) in header.iter().enumerate() {
        let want: Vec<String> = rows.iter().map(|r| r[i].clone()).collect();
        assert_eq!(table.csv_cells(name), want, "column {name}");
    }
    // Spelled out: a NaN the log holds stays NaN; a servo the row lacks, or an age it
    // lacks, is NULL; enums are their names.
    assert_eq!(table.csv_cells("servo.0.position")[2], "NaN");
    assert_eq!(table.csv_cells("servo.2.position")[1], "");
    assert_eq!(table.csv_cells("servo.0.age")[1], "");
    assert_eq!(table.csv_cells("mode")[..2], ["Stopped".to_string(), "Position".to_string()]);
}

#[test]
fn long_tables_over_many_row_groups_are_the_csv() {
    // Row groups across the column reader's staging blocks (64 rows), not on their edges.
    let bytes = log(400, |i| if i == 0 { 3 } else { 1 + i as usize % 3 });
    let (stats, table) = export(&bytes, "cycle", &ParquetOptions { row_group_rows: 70, ..ParquetOptions::default() });
    assert_eq!(table.row_groups, vec![70, 70, 70, 70, 70, 50]);
    assert!(stats.problems.is_empty(), "{:?}", stats.problems);
    let (header, rows, _) = csv(&bytes, "cycle");
    for (i, name) in header.iter().enumerate() {
        let want: Vec<String> = rows.iter().map(|r| r[i].clone()).collect();
        assert_eq!(table.csv_cells(name), want, "column {name}");
    }
}

#[test]
fn row_groups_are_bounded_by_values_too() {
    let bytes = log(50, |_| 2);
    let (stats, table) = export(&bytes, "cycle", &ParquetOptions { row_group_values: 10 * 18, ..Default::default() });
    // 18 value columns: 10 rows a group.
    assert_eq!(stats.columns, 18);
    assert_eq!(table.row_groups, vec![10; 5]);
    assert_eq!(stats.row_groups, 5);
}

#[test]
fn constant_columns_come_first_and_fields_of_their_names_are_renamed() {
    let bytes = log(3, |_| 1);
    let options = ParquetOptions {
        constants: vec![("robot".into(), Some("quad".into())), ("run".into(), None)],
        metadata: vec![("rtloop.source".into(), "x.tlog".into())],
        ..Default::default()
    };
    let (stats, table) = export(&bytes, "clash", &options);
    assert_eq!(table.names(), ["robot", "run", "timestamp", "robot#2", "timestamp#2", "run#2"]);
    assert_eq!(stats.rows, 2);
    assert_eq!(table.csv_cells("robot"), ["quad", "quad"]);
    assert_eq!(table.csv_cells("run"), ["", ""]);
    assert_eq!(table.csv_cells("robot#2"), ["7", "7"]);
    assert_eq!(table.csv_cells("timestamp#2"), ["9", "9"]);
    assert!(table.metadata.contains(&("rtloop.source".into(), "x.tlog".into())));
}

#[test]
fn an_array_that_grows_after_the_first_row_group_is_counted() {
    let bytes = log(10, |i| if i < 5 { 1 } else { 2 });
    let (stats, table) = export(&bytes, "cycle", &ParquetOptions { row_group_rows: 5, ..Default::default() });
    assert!(!table.names().contains(&"servo.1.id".to_string()));
    let dropped: Vec<_> = stats.problems.iter().filter(|p| p.kind == ProblemKind::ValuesWithoutColumn).collect();
    assert_eq!(dropped.len(), 1, "{:?}", stats.problems);
    assert_eq!(dropped[0].count, 5);
    assert!(dropped[0].what.contains("servo.1."), "{}", dropped[0].what);
    assert_eq!(stats.rows, 10);
    // In one row group the column is there, NULL before the array grew.
    let (stats, table) = export(&bytes, "cycle", &ParquetOptions::default());
    assert!(stats.problems.is_empty(), "{:?}", stats.problems);
    assert_eq!(table.csv_cells("servo.1.id"), ["", "", "", "", "", "2", "2", "2", "2", "2"]);
}

/// Record "x" of a union of an int, a string and a double, one item per value.
fn union_log(values: &[Result<i64, Result<String, f64>>]) -> Vec<u8> {
    let schema =
        Schema::Object(vec![Field::new("u", Schema::Union(vec![Schema::VarInt, Schema::String, Schema::Float64]))]);
    let mut writer = FileWriter::new(Vec::new(), WriterOptions::default()).unwrap();
    let id = writer.allocate_id("x");
    writer.write_schema(id, &schema.to_binary()).unwrap();
    for (i, value) in values.iter().enumerate() {
        let mut payload = Vec::new();
        match value {
            Ok(v) => {
                write_varuint(&mut payload, 0);
                write_varint(&mut payload, *v);
            }
            Err(Ok(s)) => {
                write_varuint(&mut payload, 1);
                write_string(&mut payload, s);
            }
            Err(Err(x)) => {
                write_varuint(&mut payload, 2);
                payload.extend_from_slice(&x.to_le_bytes());
            }
        }
        writer.write_data(id, Some(START_US + i as i64), &payload).unwrap();
    }
    writer.close().unwrap()
}

#[test]
fn a_value_that_does_not_fit_its_column_is_null_and_counted() {
    let values = [Ok(1), Ok(-2), Err(Err(3.0)), Err(Err(3.5)), Err(Ok("s".to_string())), Ok(4)];
    let bytes = union_log(&values);
    let (stats, table) = export(&bytes, "x", &ParquetOptions { row_group_rows: 2, ..Default::default() });
    assert_eq!(table.data_type("u"), DataType::Int64);
    assert_eq!(table.csv_cells("u"), ["1", "-2", "3", "", "", "4"]);
    let dropped = stats.problems.iter().find(|p| p.kind == ProblemKind::ValuesWithoutColumn).unwrap();
    assert_eq!(dropped.count, 2);
    // A first row group of strings makes a string column: everything fits as text.
    let bytes = union_log(&[Err(Ok("a".into())), Ok(5), Err(Err(0.5))]);
    let (stats, table) = export(&bytes, "x", &ParquetOptions::default());
    assert_eq!(table.data_type("u"), DataType::Utf8);
    assert_eq!(table.csv_cells("u"), ["a", "5", "0.5"]);
    assert!(stats.problems.is_empty());
}

#[test]
fn a_damaged_log_exports_as_far_as_the_csv_does() {
    let whole = log(40, |_| 2);
    // Cut a third of the way from the end.
    let cut = &whole[..whole.len() * 2 / 3];
    let (stats, table) = export(cut, "cycle", &ParquetOptions::default());
    let (_, rows, csv_stats) = csv(cut, "cycle");
    assert!(stats.rows > 0 && stats.rows < 40);
    assert_eq!(stats.rows, csv_stats.rows);
    assert_eq!(table.rows(), rows.len());
    assert!(stats.problems.iter().any(|p| p.kind == ProblemKind::Truncated), "{:?}", stats.problems);
    // A flipped byte in the middle: a corrupt block skipped, the rest exported.
    let mut flipped = whole.clone();
    let at = flipped.len() / 2;
    flipped[at] ^= 0x5a;
    let (stats, _) = export(&flipped, "cycle", &ParquetOptions::default());
    let (_, _, csv_stats) = csv(&flipped, "cycle");
    assert_eq!(stats.rows, csv_stats.rows);
    let kinds: Vec<ProblemKind> = stats.problems.iter().map(|p| p.kind).collect();
    let csv_kinds: Vec<ProblemKind> = csv_stats.problems.iter().map(|p| p.kind).collect();
    assert_eq!(kinds, csv_kinds);
}

#[test]
fn a_record_without_items_is_an_empty_table_with_its_columns() {
    let (stats, table) = export(&log(3, |_| 1), "quiet", &ParquetOptions::default());
    assert_eq!((stats.rows, stats.row_groups, table.rows()), (0, 0, 0));
    assert_eq!(table.names(), ["timestamp", "level"]);
    assert_eq!(table.data_type("level"), DataType::Float32);
}

#[test]
fn several_records_in_one_walk() {
    let bytes = log(12, |_| 2);
    let reader = FileReader::from_bytes(bytes.clone()).unwrap();
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    let outputs = vec![("cycle".to_string(), &mut a), ("clash".to_string(), &mut b), ("quiet".to_string(), &mut c)];
    let stats = records_to_parquet(&reader, outputs, &ParquetOptions::default(), None).unwrap();
    let rows: Vec<u64> = stats.records.iter().map(|r| r.rows).collect();
    assert_eq!(rows, [12, 2, 0]);
    assert_eq!(stats.items, 14);
    assert!(stats.all_problems().is_empty());
    assert_eq!(read_table(&a).rows(), 12);
    assert_eq!(read_table(&b).names(), ["timestamp", "robot", "timestamp#2", "run"]);
    assert_eq!(read_table(&c).rows(), 0);
    // The same tables as one record at a time.
    let (_, alone) = export(&bytes, "cycle", &ParquetOptions::default());
    assert_eq!(read_table(&a).batches, alone.batches);
}

#[test]
fn an_unknown_record_is_a_typed_error() {
    let reader = FileReader::from_bytes(log(1, |_| 1)).unwrap();
    let error = to_parquet(&reader, "nope", Vec::new(), &ParquetOptions::default(), None).unwrap_err();
    assert!(matches!(
        error,
        rtloop_parquet::ParquetError::Columns(rtloop_tlog::columns::ColumnsError::NoRecord { .. })
    ));
    assert_eq!(error.to_string(), "the log has no record 'nope'");
}

/// Refuses every write, as a full disk does.
struct FullDisk;

impl Write for FullDisk {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::Error::from(std::io::ErrorKind::StorageFull))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The chain of an export onto a full disk, from the top down to the `io::Error`: the
/// encoder's own error in between is unwrapped, so the chain says what the disk said.
#[test]
fn an_export_onto_a_full_disk_leads_to_the_io_error() {
    use std::error::Error;
    let reader = FileReader::from_bytes(log(3, |_| 1)).unwrap();
    let top = to_parquet(&reader, "cycle", FullDisk, &ParquetOptions::default(), None).unwrap_err();
    assert!(matches!(top, rtloop_parquet::ParquetError::Io(_)), "{top:?}");
    assert_eq!(top.to_string(), "cannot write the Parquet file");
    let bottom = top.source().expect("the disk's error is the source");
    let io = bottom.downcast_ref::<std::io::Error>().expect("an io::Error");
    assert_eq!(io.kind(), std::io::ErrorKind::StorageFull);
    assert!(bottom.source().is_none());
}

/// Each variant returns the error it wraps, as the type it is.
#[test]
fn every_wrapped_cause_is_the_source() {
    use rtloop_parquet::ParquetError;
    use rtloop_tlog::columns::ColumnsError;
    use std::error::Error;
    let columns = ParquetError::Columns(ColumnsError::NoRecord { record: "nope".into() });
    let source = columns.source().and_then(|s| s.downcast_ref::<ColumnsError>());
    assert_eq!(source, Some(&ColumnsError::NoRecord { record: "nope".into() }));
    let io = ParquetError::Io(std::io::Error::from(std::io::ErrorKind::StorageFull));
    let kind = io.source().and_then(|s| s.downcast_ref::<std::io::Error>()).map(std::io::Error::kind);
    assert_eq!(kind, Some(std::io::ErrorKind::StorageFull));
    let encoder = parquet::errors::ParquetError::General("no room for the footer".into());
    let encode = ParquetError::Encode { record: "cycle".into(), source: Box::new(encoder) };
    let source = encode.source().and_then(|s| s.downcast_ref::<parquet::errors::ParquetError>());
    assert!(matches!(source, Some(parquet::errors::ParquetError::General(why)) if why == "no room for the footer"));
    assert_eq!(encode.to_string(), "the Parquet writer failed on record 'cycle'");
}

proptest! {
    #[test]
    fn a_mutated_log_never_panics_and_keeps_the_column_reader_rows(
        n in 1u64..12,
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..6),
        cut in prop::option::of(any::<prop::sample::Index>()),
        rows in 1usize..5,
    ) {
        let mut bytes = log(n, |i| 1 + i as usize % 3);
        for (at, xor) in flips {
            let at = at.index(bytes.len());
            bytes[at] ^= xor;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        let Ok(reader) = FileReader::from_bytes(bytes) else { return Ok(()) };
        for record in ["cycle", "clash", "quiet"] {
            let mut out = Vec::new();
            let options = ParquetOptions { row_group_rows: rows, ..Default::default() };
            match to_parquet(&reader, record, &mut out, &options, None) {
                Ok(stats) => {
                    let whole = rtloop_tlog::columns::read(&reader, record, &rtloop_tlog::columns::ColumnOptions::default()).unwrap();
                    prop_assert_eq!(stats.rows, whole.rows() as u64);
                    prop_assert_eq!(read_table(&out).rows(), whole.rows());
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }
}
