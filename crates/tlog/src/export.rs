//! Exports of a log for other tools: one record as CSV, or the whole log as MCAP with JSON
//! messages (opens in Foxglove and PlotJuggler).
//!
//! Exports are best effort over damaged files: blocks the reader reports as bad, data
//! blocks without a schema, and items that do not decode, are skipped and counted (as
//! [`Problem`]s with offsets) rather than aborting the export; the caller reports them. Both
//! exporters read from any [`FileReader`] (a file or bytes in memory) and write into any
//! `Write`. This module must never write anywhere but the output it is handed, never change
//! the log, and never panic on a hostile log.
//!
//! CSV cells: `timestamp` is seconds since the UNIX epoch with exactly six decimals (µs are
//! kept exactly); floats use Rust's shortest round-trip formatting (`NaN`, `inf`; −0 as `0`); bools are
//! `0`/`1`; enums their name when known; bytes lowercase hex; timestamps and durations inside
//! the payload seconds like the first column; strings are quoted when they need it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, BufWriter, Write};

use indicatif::ProgressBar;
use serde_json::json;

use crate::format::TlogError;
use crate::reader::{FileReader, Item, ItemFilter, RecordInfo, SurvivingItems};
use crate::schema::Schema;
use crate::survey::{Problem, ProblemKind, Problems};
use crate::value::{unique_names, Value};

/// What [`to_csv`] wrote, and what it could not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CsvStats {
    /// Rows written, the header excluded.
    pub rows: u64,
    /// Items of the record met, whether they decoded or not: 0 with no rows means the
    /// record simply has no data (nothing is damaged), more means it did not decode.
    pub items: u64,
    /// Value columns (after `timestamp`).
    pub columns: usize,
    /// Damage met on the way: corrupt blocks, a cut, data without a schema anywhere in the
    /// log, items of this record that did not decode or did not fit the header.
    pub problems: Vec<Problem>,
}

impl CsvStats {
    /// Blocks and items left out entirely.
    pub fn skipped(&self) -> u64 {
        self.problems.iter().filter(|p| p.skips_items()).map(|p| p.count).sum()
    }
}

/// What [`to_mcap`] wrote, and what it could not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McapStats {
    /// One per record with a usable schema.
    pub channels: usize,
    pub messages: u64,
    /// Data items met (of any record, decoded or not): 0 means the log has no data at all.
    pub items: u64,
    /// Blocks and items left out: the sum of the `problems` counts.
    pub skipped: u64,
    pub problems: Vec<Problem>,
}

/// Note a reader error (a corrupt block, or the cut at the end) as a problem.
pub(crate) fn note_read_error(problems: &mut Problems, error: &TlogError) {
    problems.note_read_error(error);
}

/// Note a data block whose record id has no schema block.
pub fn note_no_schema(problems: &mut Problems, item: &Item) {
    problems.note(ProblemKind::NoSchema, Some(item.record_id), None, item.offset, || {
        "no schema block for this record id".into()
    });
}

/// The item decoded, or `None` with the failure noted (the item is skipped, never fatal).
pub(crate) fn decode_or_note(
    reader: &FileReader,
    item: &Item,
    name: Option<&str>,
    problems: &mut Problems,
) -> Option<Value> {
    match reader.decode_item(item) {
        Ok(value) => Some(value),
        Err(error) => {
            problems.note(ProblemKind::Undecodable, Some(item.record_id), name, item.offset, || error.to_string());
            None
        }
    }
}

/// Write every item of `record` as one CSV row: `timestamp` then the flattened columns of
/// the record's first item, in order (repeated names suffixed `#2`, … as by
/// [`Value::flatten`]). Later items with another shape (a longer array, say) fill the
/// columns they share with the first and leave the rest empty; the values left out are
/// counted in the problems. Writes only into `out`; works on any [`FileReader`] (a file or
/// bytes in memory) and any `Write`.
pub fn to_csv(
    reader: &FileReader,
    record: &str,
    out: impl Write,
    progress: Option<&ProgressBar>,
) -> Result<CsvStats, TlogError> {
    let info = find_record(reader, record)?;
    if info.schema.is_none() {
        return Err(unusable_schema(&info));
    }
    let records = reader.records();
    let wanted: HashSet<u64> = records.iter().filter(|r| r.name == record).map(|r| r.id).collect();
    let known: HashSet<u64> = records.iter().map(|r| r.id).collect();
    let mut out = BufWriter::new(out);
    if let Some(bar) = progress {
        bar.set_length(reader.len());
    }
    let mut columns: Option<HashMap<String, usize>> = None;
    let mut stats = CsvStats::default();
    let mut leaves = Vec::new();
    let mut cells: Vec<String> = Vec::new();
    // Bad blocks are skipped and counted: the point of an export of a damaged log is what
    // survived.
    let mut items = reader.surviving_items(ItemFilter::default());
    while let Some(item) = items.next() {
        let problems = &mut items.problems;
        if let Some(bar) = progress {
            bar.set_position(item.offset);
        }
        if !wanted.contains(&item.record_id) {
            if !known.contains(&item.record_id) {
                note_no_schema(problems, &item);
            }
            continue;
        }
        stats.items += 1;
        let Some(value) = decode_or_note(reader, &item, Some(record), problems) else { continue };
        leaves.clear();
        value.flatten("", &mut leaves);
        let columns = columns.get_or_insert_with(|| {
            let names: Vec<&str> = leaves.iter().map(|(name, _)| name.as_str()).collect();
            // flatten() makes names unique, so every column gets its own index.
            names.iter().enumerate().map(|(i, name)| (name.to_string(), i)).collect()
        });
        if stats.rows == 0 {
            let mut names: Vec<(&str, usize)> = columns.iter().map(|(name, &i)| (name.as_str(), i)).collect();
            names.sort_by_key(|&(_, i)| i);
            write_header(&mut out, names.iter().map(|&(name, _)| name))?;
            stats.columns = columns.len();
        }
        cells.clear();
        cells.resize(columns.len(), String::new());
        let mut without_column: Option<&str> = None;
        for (name, leaf) in &leaves {
            match columns.get(name).and_then(|&i| cells.get_mut(i)) {
                Some(cell) => *cell = csv_cell(leaf),
                None => without_column = without_column.or(Some(name.as_str())),
            }
        }
        if let Some(name) = without_column {
            problems.note(ProblemKind::ValuesWithoutColumn, Some(item.record_id), Some(record), item.offset, || {
                format!("no column '{name}'")
            });
        }
        let timestamp = item.timestamp_us.map(format_seconds).unwrap_or_default();
        write!(out, "{timestamp}")?;
        for cell in &cells {
            write!(out, ",{cell}")?;
        }
        writeln!(out)?;
        stats.rows += 1;
    }
    if stats.rows == 0 {
        write_header(&mut out, std::iter::empty())?;
    }
    out.flush()?;
    if let Some(bar) = progress {
        bar.set_position(reader.len());
    }
    stats.problems = items.problems.into_vec();
    Ok(stats)
}

fn write_header<'a>(out: &mut impl Write, names: impl Iterator<Item = &'a str>) -> io::Result<()> {
    write!(out, "timestamp")?;
    for name in names {
        write!(out, ",{}", csv_quote(name))?;
    }
    writeln!(out)
}

/// Write the whole log as MCAP: one channel per record (topic = record name, message
/// encoding `json`, a JSON Schema derived from the record's schema), one message per item
/// with log and publish time = the item's timestamp in ns (0 when it has none). Writes
/// into any `Write` (the MCAP writer is told not to seek back); blocks and items that could
/// not be exported are counted in the problems.
pub fn to_mcap<W: Write>(reader: &FileReader, out: W, progress: Option<&ProgressBar>) -> Result<McapStats, TlogError> {
    to_mcap_with(reader, out, progress, None)
}

/// One channel [`Derived`] adds to an MCAP export.
#[derive(Debug, Clone, PartialEq)]
pub struct DerivedChannel {
    /// Its topic.
    pub topic: String,
    /// Its schema's name (e.g. `foxglove.SceneUpdate`).
    pub schema_name: String,
    /// Its JSON Schema.
    pub schema: serde_json::Value,
}

/// Messages computed from a log's items (rtloop's 3D view: the scene and every body's pose
/// from the `model` and `body` records), written beside the records' own channels.
pub trait Derived {
    /// The channels it writes on (asked once, before the first item).
    fn channels(&self) -> Vec<DerivedChannel>;
    /// One decoded item of record `record`, stamped `time_ns`: `emit(channel index, JSON
    /// payload)` for every message it makes of it.
    fn item(&mut self, record: &str, time_ns: u64, value: &serde_json::Value, emit: &mut dyn FnMut(usize, &[u8]));
}

/// [`to_mcap`], with the channels and messages of `derived` too (counted in the stats).
pub fn to_mcap_with<W: Write>(
    reader: &FileReader,
    out: W,
    progress: Option<&ProgressBar>,
    mut derived: Option<&mut dyn Derived>,
) -> Result<McapStats, TlogError> {
    let mut writer = mcap::WriteOptions::new()
        .disable_seeking(true)
        .create(mcap::write::NoSeek::new(BufWriter::new(out)))
        .map_err(mcap_error)?;
    let mut stats = McapStats::default();
    let mut problems = Problems::default();
    let mut channels: HashMap<u64, (u16, u32)> = HashMap::new();
    let records = reader.records();
    for record in &records {
        let Some(schema) = &record.schema else {
            let what = record.schema_error.as_deref().unwrap_or("unknown error");
            problems.schema_unreadable(record.id, &record.name, record.schema_offset, what);
            continue;
        };
        if channels.contains_key(&record.id) {
            continue;
        }
        let json_schema = record_json_schema(&record.name, schema);
        let schema_bytes = serde_json::to_vec(&json_schema).map_err(TlogError::McapJson)?;
        let schema_id = writer.add_schema(&record.name, "jsonschema", &schema_bytes).map_err(mcap_error)?;
        let channel_id = writer.add_channel(schema_id, &record.name, "json", &BTreeMap::new()).map_err(mcap_error)?;
        channels.insert(record.id, (channel_id, 0));
    }
    let names: HashMap<u64, &str> = records.iter().map(|r| (r.id, r.name.as_str())).collect();
    // (channel id, sequence) of each derived channel.
    let mut extra: Vec<(u16, u32)> = Vec::new();
    if let Some(d) = derived.as_deref() {
        for c in d.channels() {
            let schema_bytes = serde_json::to_vec(&c.schema).map_err(TlogError::McapJson)?;
            let schema_id = writer.add_schema(&c.schema_name, "jsonschema", &schema_bytes).map_err(mcap_error)?;
            let channel_id = writer.add_channel(schema_id, &c.topic, "json", &BTreeMap::new()).map_err(mcap_error)?;
            extra.push((channel_id, 0));
        }
    }
    stats.channels = channels.len() + extra.len();
    if let Some(bar) = progress {
        bar.set_length(reader.len());
    }
    let mut items = SurvivingItems::new(reader.items(ItemFilter::default()), problems);
    while let Some(item) = items.next() {
        let problems = &mut items.problems;
        if let Some(bar) = progress {
            bar.set_position(item.offset);
        }
        stats.items += 1;
        let Some((channel_id, sequence)) = channels.get_mut(&item.record_id) else {
            match names.get(&item.record_id) {
                Some(_) => problems.data_without_readable_schema(item.record_id),
                None => note_no_schema(problems, &item),
            }
            continue;
        };
        let name = names.get(&item.record_id).copied();
        let Some(value) = decode_or_note(reader, &item, name, problems) else { continue };
        let json_value = value.to_json();
        let payload = serde_json::to_vec(&json_value).map_err(TlogError::McapJson)?;
        let time_ns = item.timestamp_us.map_or(0, |us| u64::try_from(us).unwrap_or(0).saturating_mul(1000));
        let header = mcap::records::MessageHeader {
            channel_id: *channel_id,
            sequence: *sequence,
            log_time: time_ns,
            publish_time: time_ns,
        };
        *sequence = sequence.wrapping_add(1);
        writer.write_to_known_channel(&header, &payload).map_err(mcap_error)?;
        stats.messages += 1;
        if let (Some(d), Some(name)) = (derived.as_deref_mut(), name) {
            let mut failed = None;
            d.item(name, time_ns, &json_value, &mut |k, payload| {
                let Some((channel_id, sequence)) = extra.get_mut(k) else { return };
                let header = mcap::records::MessageHeader {
                    channel_id: *channel_id,
                    sequence: *sequence,
                    log_time: time_ns,
                    publish_time: time_ns,
                };
                *sequence = sequence.wrapping_add(1);
                match writer.write_to_known_channel(&header, payload) {
                    Ok(()) => stats.messages += 1,
                    Err(e) => failed = Some(e),
                }
            });
            if let Some(e) = failed {
                return Err(mcap_error(e));
            }
        }
    }
    writer.finish().map_err(mcap_error)?;
    let mut inner = writer.into_inner().into_inner();
    inner.flush()?;
    if let Some(bar) = progress {
        bar.set_position(reader.len());
    }
    stats.skipped = items.problems.skipped();
    stats.problems = items.problems.into_vec();
    Ok(stats)
}

/// The JSON Schema (draft 2020-12 vocabulary) describing what [`Value::to_json`] produces
/// for a record of this schema.
pub fn record_json_schema(name: &str, schema: &Schema) -> serde_json::Value {
    let mut root = json_schema(schema);
    if let Some(object) = root.as_object_mut() {
        object.insert("title".to_string(), json!(name));
    }
    root
}

fn json_schema(schema: &Schema) -> serde_json::Value {
    match schema {
        Schema::Null => json!({ "type": "null" }),
        Schema::Bool => json!({ "type": "boolean" }),
        Schema::FixedInt(_) | Schema::FixedUInt(_) | Schema::VarInt | Schema::VarUInt => json!({ "type": "integer" }),
        // NaN and infinities are written as null.
        Schema::Float32 | Schema::Float64 => json!({ "type": "number" }),
        Schema::Bytes => json!({ "type": "array", "items": { "type": "integer" } }),
        Schema::String => json!({ "type": "string" }),
        Schema::Timestamp => json!({ "type": "number", "description": "seconds since the UNIX epoch" }),
        Schema::Duration => json!({ "type": "number", "description": "seconds" }),
        Schema::Object(fields) => {
            // The same names Value::to_json gives repeated fields.
            let names = unique_names(fields.iter().map(|f| f.name.as_str()));
            let properties: serde_json::Map<String, serde_json::Value> =
                names.into_iter().zip(fields).map(|(name, f)| (name, json_schema(&f.schema))).collect();
            json!({ "type": "object", "properties": properties })
        }
        Schema::Enum { items, .. } => {
            let names: Vec<&str> = items.iter().map(|(_, name)| name.as_str()).collect();
            json!({ "type": "string", "enum": names })
        }
        Schema::Array(item) => json!({ "type": "array", "items": json_schema(item) }),
        Schema::FixedArray(n, item) => {
            json!({ "type": "array", "items": json_schema(item), "minItems": n, "maxItems": n })
        }
        Schema::Map(item) => json!({ "type": "object", "additionalProperties": json_schema(item) }),
        Schema::Union(alternatives) => {
            // The common case is an optional (null | T): describe T, since to_json is transparent.
            let non_null: Vec<&Schema> = alternatives.iter().filter(|s| **s != Schema::Null).collect();
            match non_null.as_slice() {
                [only] => json_schema(only),
                _ => json!({ "anyOf": alternatives.iter().map(json_schema).collect::<Vec<_>>() }),
            }
        }
    }
}

/// The record called `name`, or an error listing the ones that exist.
pub(crate) fn find_record(reader: &FileReader, name: &str) -> Result<RecordInfo, TlogError> {
    reader.record(name).ok_or_else(|| {
        let names: Vec<String> = reader.records().into_iter().map(|r| r.name).collect();
        TlogError::NoRecord { name: name.to_string(), records: names }
    })
}

pub use crate::format::describe_records;

pub(crate) fn unusable_schema(info: &RecordInfo) -> TlogError {
    TlogError::UnusableSchema {
        record: info.name.clone(),
        offset: info.schema_offset,
        reason: info.schema_error.as_deref().unwrap_or("unknown error").to_string(),
    }
}

fn mcap_error(e: mcap::McapError) -> TlogError {
    match e {
        mcap::McapError::Io(e) => TlogError::Io(e),
        other => TlogError::Mcap(other),
    }
}

/// µs as seconds with exactly six decimals (no float rounding).
fn format_seconds(us: i64) -> String {
    let sign = if us < 0 { "-" } else { "" };
    let magnitude = us.unsigned_abs();
    format!("{sign}{}.{:06}", magnitude / 1_000_000, magnitude % 1_000_000)
}

fn csv_cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::Bool(b) => u8::from(*b).to_string(),
        Value::Int(v) => v.to_string(),
        Value::UInt(v) => v.to_string(),
        // Negative zero is printed as 0: "-0" in a spreadsheet reads as a defect.
        Value::F32(v) if *v == 0.0 => "0".to_string(),
        Value::F64(v) if *v == 0.0 => "0".to_string(),
        Value::F32(v) => v.to_string(),
        Value::F64(v) => v.to_string(),
        Value::Bytes(bytes) => bytes.iter().map(|b| format!("{b:02x}")).collect(),
        Value::String(s) => csv_quote(s),
        Value::Enum(raw, name) => name.as_deref().map_or_else(|| raw.to_string(), csv_quote),
        Value::Timestamp(us) | Value::Duration(us) => format_seconds(*us),
        Value::Union(_, inner) => csv_cell(inner),
        // flatten() never yields containers, but an empty one is a leaf of nothing.
        Value::Object(_) | Value::Array(_) | Value::Map(_) => String::new(),
    }
}

fn csv_quote(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_exact() {
        assert_eq!(format_seconds(1_583_798_400_000_001), "1583798400.000001");
        assert_eq!(format_seconds(-1_500_000), "-1.500000");
    }

    #[test]
    fn cells_quote_when_needed() {
        assert_eq!(csv_cell(&Value::String("a,b".into())), "\"a,b\"");
        assert_eq!(csv_cell(&Value::String("say \"hi\"".into())), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_cell(&Value::Bool(true)), "1");
        assert_eq!(csv_cell(&Value::Bytes(vec![0xab, 1])), "ab01");
    }
}
