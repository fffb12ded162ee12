//! Exports of a log for other tools: one record as CSV, or the whole log as MCAP with JSON
//! messages (opens in Foxglove and PlotJuggler).
//!
//! Exports are best effort over damaged files: blocks the reader reports as bad, and items
//! that do not decode, are skipped and counted rather than aborting the export. This module
//! must never write anywhere but the output it is handed, and never change the log.
//!
//! CSV cells: `timestamp` is seconds since the UNIX epoch with exactly six decimals (µs are
//! kept exactly); floats use Rust's shortest round-trip formatting (`NaN`, `inf`); bools are
//! `0`/`1`; enums their name when known; bytes lowercase hex; timestamps and durations inside
//! the payload seconds like the first column; strings are quoted when they need it.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufWriter, Seek, Write};

use indicatif::ProgressBar;
use serde_json::json;

use crate::format::TlogError;
use crate::reader::{FileReader, ItemFilter, RecordInfo};
use crate::schema::Schema;
use crate::value::Value;

/// What [`to_mcap`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McapStats {
    /// One per record with a usable schema.
    pub channels: usize,
    pub messages: u64,
    /// Blocks the reader reported as bad plus items that did not decode or had no channel.
    pub skipped: u64,
}

/// Write every item of `record` as one CSV row: `timestamp` then the flattened columns of
/// the record's first item, in order. Later items with another shape (a longer array, say)
/// fill the columns they share with the first and leave the rest empty. Returns the number
/// of rows written (the header excluded).
pub fn to_csv(
    reader: &FileReader,
    record: &str,
    out: impl Write,
    progress: Option<&ProgressBar>,
) -> Result<u64, TlogError> {
    let info = find_record(reader, record)?;
    if info.schema.is_none() {
        return Err(unusable_schema(&info));
    }
    let mut out = BufWriter::new(out);
    if let Some(bar) = progress {
        bar.set_length(reader.len());
    }
    let mut columns: Option<HashMap<String, usize>> = None;
    let mut rows = 0u64;
    let mut leaves = Vec::new();
    let mut cells: Vec<String> = Vec::new();
    let filter = ItemFilter { record: Some(record.to_string()), ..ItemFilter::default() };
    for item in reader.items(filter) {
        // Bad blocks are skipped: the point of an export of a damaged log is what survived.
        let Ok(item) = item else { continue };
        if let Some(bar) = progress {
            bar.set_position(item.offset);
        }
        let Ok(value) = reader.decode_item(&item) else { continue };
        leaves.clear();
        value.flatten("", &mut leaves);
        if columns.is_none() {
            let names: Vec<&str> = leaves.iter().map(|(name, _)| name.as_str()).collect();
            write_header(&mut out, &names)?;
            columns = Some(names.iter().enumerate().map(|(i, name)| (name.to_string(), i)).collect());
        }
        let Some(columns) = &columns else { continue };
        cells.clear();
        cells.resize(columns.len(), String::new());
        for (name, leaf) in &leaves {
            if let Some(&i) = columns.get(name) {
                cells[i] = csv_cell(leaf);
            }
        }
        let timestamp = item.timestamp_us.map(format_seconds).unwrap_or_default();
        write!(out, "{timestamp}")?;
        for cell in &cells {
            write!(out, ",{cell}")?;
        }
        writeln!(out)?;
        rows += 1;
    }
    if columns.is_none() {
        write_header(&mut out, &[])?;
    }
    out.flush()?;
    if let Some(bar) = progress {
        bar.set_position(reader.len());
    }
    Ok(rows)
}

fn write_header(out: &mut impl Write, names: &[&str]) -> io::Result<()> {
    write!(out, "timestamp")?;
    for name in names {
        write!(out, ",{}", csv_quote(name))?;
    }
    writeln!(out)
}

/// Write the whole log as MCAP: one channel per record (topic = record name, message
/// encoding `json`, a JSON Schema derived from the record's schema), one message per item
/// with log and publish time = the item's timestamp in ns (0 when it has none).
pub fn to_mcap<W: Write + Seek>(
    reader: &FileReader,
    out: W,
    progress: Option<&ProgressBar>,
) -> Result<McapStats, TlogError> {
    let mut writer = mcap::Writer::new(out).map_err(mcap_error)?;
    let mut stats = McapStats::default();
    let mut channels: HashMap<u64, (u16, u32)> = HashMap::new();
    for record in reader.records() {
        let Some(schema) = &record.schema else { continue };
        let json_schema = record_json_schema(&record.name, schema);
        let schema_bytes = serde_json::to_vec(&json_schema).map_err(|e| io::Error::other(e.to_string()))?;
        let schema_id = writer.add_schema(&record.name, "jsonschema", &schema_bytes).map_err(mcap_error)?;
        let channel_id = writer.add_channel(schema_id, &record.name, "json", &BTreeMap::new()).map_err(mcap_error)?;
        channels.insert(record.id, (channel_id, 0));
    }
    stats.channels = channels.len();
    if let Some(bar) = progress {
        bar.set_length(reader.len());
    }
    for item in reader.items(ItemFilter::default()) {
        let Ok(item) = item else {
            stats.skipped += 1;
            continue;
        };
        if let Some(bar) = progress {
            bar.set_position(item.offset);
        }
        let (Some((channel_id, sequence)), Ok(value)) = (channels.get_mut(&item.record_id), reader.decode_item(&item))
        else {
            stats.skipped += 1;
            continue;
        };
        let payload = serde_json::to_vec(&value.to_json()).map_err(|e| io::Error::other(e.to_string()))?;
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
    }
    writer.finish().map_err(mcap_error)?;
    if let Some(bar) = progress {
        bar.set_position(reader.len());
    }
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
            let properties: serde_json::Map<String, serde_json::Value> =
                fields.iter().map(|f| (f.name.clone(), json_schema(&f.schema))).collect();
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
        not_found(format!("no record '{name}' in the log; it has: {}", names.join(", ")))
    })
}

pub(crate) fn unusable_schema(info: &RecordInfo) -> TlogError {
    TlogError::Malformed {
        offset: info.schema_offset,
        what: format!(
            "schema of record '{}' does not parse: {}",
            info.name,
            info.schema_error.as_deref().unwrap_or("unknown error")
        ),
    }
}

pub(crate) fn not_found(message: String) -> TlogError {
    TlogError::Io(io::Error::new(io::ErrorKind::NotFound, message))
}

fn mcap_error(e: mcap::McapError) -> TlogError {
    TlogError::Io(io::Error::other(format!("mcap: {e}")))
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
