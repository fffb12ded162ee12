//! Dynamic values: a record's payload decoded against its schema without knowing its Rust type.
//!
//! This is what the reader side (dumps, CSV/MCAP export, plotting) uses to look inside data
//! blocks written by any program, including mjlib's C++ writer. [`decode`] works on untrusted
//! bytes: it must never panic and never allocate based on a count read from the payload
//! (counts are checked against the bytes that remain before anything is reserved). It never
//! touches files; framing, CRCs and decompression belong to the reader.
//!
//! JSON mapping ([`Value::to_json`]): timestamps and durations become **seconds as f64**
//! (µs / 1e6; seconds since the UNIX epoch for timestamps), because plotting tools want
//! numbers; NaN and ±inf become `null` (JSON has no spelling for them), −0 becomes 0; bytes become an
//! array of numbers; unions are transparent (an optional that is absent is `null`); enums
//! become their item name when the schema names the value, else the integer; a repeated
//! field name (legal in a foreign log) keeps every value, the repeats named `name#2`, ….

use crate::format::{read_array, read_bytes, read_i64, read_string, read_varint, read_varuint, TlogError};
use crate::schema::Schema;

/// One decoded value of any schema type.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    /// fixedint of any size and varint.
    Int(i64),
    /// fixeduint of any size and varuint.
    UInt(u64),
    F32(f32),
    F64(f64),
    Bytes(Vec<u8>),
    String(String),
    /// Fields in schema order.
    Object(Vec<(String, Value)>),
    /// Both variable-length arrays and fixed arrays.
    Array(Vec<Value>),
    /// Entries in payload order (keys are always strings in this format).
    Map(Vec<(String, Value)>),
    /// Index of the alternative that was written, and its value.
    Union(u64, Box<Value>),
    /// The integer, and the item name when the schema lists it.
    Enum(u64, Option<String>),
    /// Microseconds since the UNIX epoch.
    Timestamp(i64),
    /// Microseconds.
    Duration(i64),
}

/// Decode one payload (already decompressed) as `schema`.
///
/// Trailing bytes after the value are ignored, so a reader can decode data written with a
/// schema that grew fields at the end. Errors carry offsets relative to the payload start.
pub fn decode(schema: &Schema, bytes: &[u8]) -> Result<Value, TlogError> {
    let mut decoder = Decoder {
        bytes,
        pos: 0,
        // Every value with a non-empty encoding consumes at least one byte, so `bytes.len()`
        // bounds the number of those; the extra allowance covers zero-width values (nulls,
        // empty objects) without letting a schema like fixedarray(2^40, null) loop forever.
        value_budget: bytes.len().saturating_add(ZERO_WIDTH_VALUE_ALLOWANCE),
        depth: 0,
    };
    decoder.value(schema)
}

/// How many values with a zero-byte encoding one payload may contain.
const ZERO_WIDTH_VALUE_ALLOWANCE: usize = 1 << 16;

/// Nesting limit: schemas parsed from files are finite, but recursion depth still costs stack.
const MAX_DEPTH: usize = 256;

struct Decoder<'a> {
    bytes: &'a [u8],
    pos: usize,
    value_budget: usize,
    depth: usize,
}

impl Decoder<'_> {
    fn malformed(&self, what: impl Into<String>) -> TlogError {
        TlogError::Malformed { offset: self.pos as u64, what: what.into() }
    }

    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// Check a decoded element count before reserving memory for it.
    fn check_count(&self, count: u64) -> Result<usize, TlogError> {
        let count = usize::try_from(count).map_err(|_| self.malformed("count does not fit in memory"))?;
        if count > self.remaining().saturating_add(ZERO_WIDTH_VALUE_ALLOWANCE).min(self.value_budget) {
            return Err(TlogError::Truncated { offset: self.pos as u64 });
        }
        Ok(count)
    }

    fn value(&mut self, schema: &Schema) -> Result<Value, TlogError> {
        if self.value_budget == 0 {
            return Err(self.malformed("too many values for the payload size"));
        }
        self.value_budget -= 1;
        if self.depth >= MAX_DEPTH {
            return Err(self.malformed("schema nesting too deep"));
        }
        self.depth += 1;
        let result = self.value_inner(schema);
        self.depth -= 1;
        result
    }

    fn value_inner(&mut self, schema: &Schema) -> Result<Value, TlogError> {
        let buf = self.bytes;
        Ok(match schema {
            Schema::Null => Value::Null,
            Schema::Bool => Value::Bool(read_array::<1>(buf, &mut self.pos)?[0] != 0),
            Schema::FixedInt(size) => Value::Int(match size {
                1 => i64::from(i8::from_le_bytes(read_array(buf, &mut self.pos)?)),
                2 => i64::from(i16::from_le_bytes(read_array(buf, &mut self.pos)?)),
                4 => i64::from(i32::from_le_bytes(read_array(buf, &mut self.pos)?)),
                8 => i64::from_le_bytes(read_array(buf, &mut self.pos)?),
                other => return Err(self.malformed(format!("fixedint of size {other}"))),
            }),
            Schema::FixedUInt(size) => Value::UInt(match size {
                1 => u64::from(read_array::<1>(buf, &mut self.pos)?[0]),
                2 => u64::from(u16::from_le_bytes(read_array(buf, &mut self.pos)?)),
                4 => u64::from(u32::from_le_bytes(read_array(buf, &mut self.pos)?)),
                8 => u64::from_le_bytes(read_array(buf, &mut self.pos)?),
                other => return Err(self.malformed(format!("fixeduint of size {other}"))),
            }),
            Schema::VarInt => Value::Int(read_varint(buf, &mut self.pos)?),
            Schema::VarUInt => Value::UInt(read_varuint(buf, &mut self.pos)?),
            Schema::Float32 => Value::F32(f32::from_le_bytes(read_array(buf, &mut self.pos)?)),
            Schema::Float64 => Value::F64(f64::from_le_bytes(read_array(buf, &mut self.pos)?)),
            Schema::Bytes => Value::Bytes(read_bytes(buf, &mut self.pos)?.to_vec()),
            Schema::String => Value::String(read_string(buf, &mut self.pos)?.to_string()),
            Schema::Timestamp => Value::Timestamp(read_i64(buf, &mut self.pos)?),
            Schema::Duration => Value::Duration(read_i64(buf, &mut self.pos)?),
            Schema::Object(fields) => {
                let mut out = Vec::with_capacity(fields.len().min(self.remaining().saturating_add(16)));
                for field in fields {
                    out.push((field.name.clone(), self.value(&field.schema)?));
                }
                Value::Object(out)
            }
            Schema::Enum { underlying, items } => {
                let raw = match self.value(underlying)? {
                    Value::UInt(v) => v,
                    // Signed underlying types are unusual; keep the bit pattern.
                    Value::Int(v) => v as u64,
                    other => return Err(self.malformed(format!("enum underlying value is not an integer: {other:?}"))),
                };
                let name = items.iter().find(|(v, _)| *v == raw).map(|(_, name)| name.clone());
                Value::Enum(raw, name)
            }
            Schema::Array(item) => {
                let count = read_varuint(buf, &mut self.pos)?;
                let count = self.check_count(count)?;
                let mut out = Vec::with_capacity(count.min(self.remaining()));
                for _ in 0..count {
                    out.push(self.value(item)?);
                }
                Value::Array(out)
            }
            Schema::FixedArray(count, item) => {
                let count = self.check_count(*count)?;
                let mut out = Vec::with_capacity(count.min(self.remaining()));
                for _ in 0..count {
                    out.push(self.value(item)?);
                }
                Value::Array(out)
            }
            Schema::Map(item) => {
                let count = read_varuint(buf, &mut self.pos)?;
                let count = self.check_count(count)?;
                let mut out = Vec::with_capacity(count.min(self.remaining()));
                for _ in 0..count {
                    let key = read_string(self.bytes, &mut self.pos)?.to_string();
                    out.push((key, self.value(item)?));
                }
                Value::Map(out)
            }
            Schema::Union(alternatives) => {
                let index = read_varuint(buf, &mut self.pos)?;
                let Some(alternative) = usize::try_from(index).ok().and_then(|i| alternatives.get(i)) else {
                    return Err(self.malformed(format!("union index {index} of {}", alternatives.len())));
                };
                Value::Union(index, Box::new(self.value(alternative)?))
            }
        })
    }
}

impl Value {
    /// A JSON rendering (see the module docs for the mapping of timestamps, NaN, bytes).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(v) => J::from(*v),
            Value::UInt(v) => J::from(*v),
            Value::F32(v) => float_json(f64::from(*v)),
            Value::F64(v) => float_json(*v),
            Value::Bytes(b) => J::Array(b.iter().map(|&x| J::from(x)).collect()),
            Value::String(s) => J::String(s.clone()),
            Value::Object(fields) | Value::Map(fields) if all_unique(fields.iter().map(|(k, _)| k.as_str())) => {
                J::Object(fields.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
            }
            Value::Object(fields) | Value::Map(fields) => {
                let names = unique_names(fields.iter().map(|(k, _)| k.as_str()));
                J::Object(names.into_iter().zip(fields).map(|(k, (_, v))| (k, v.to_json())).collect())
            }
            Value::Array(items) => J::Array(items.iter().map(Value::to_json).collect()),
            Value::Union(_, inner) => inner.to_json(),
            Value::Enum(raw, name) => match name {
                Some(name) => J::String(name.clone()),
                None => J::from(*raw),
            },
            Value::Timestamp(us) | Value::Duration(us) => float_json(micros_to_seconds(*us)),
        }
    }

    /// Append the leaves of this value as `(dotted.name, leaf)` pairs, depth first in schema
    /// order: object fields by name, array items by index, map entries by key
    /// (`servo.0.position`). Unions are transparent. A leaf at the top level is named `prefix`.
    ///
    /// The names appended are unique among themselves: a foreign schema may repeat a field
    /// name, and dotted names can collide (a field `a.b` beside an object `a` with a field
    /// `b`), so a repeated name gets the suffix `#2`, `#3`, … (see [`unique_names`]).
    pub fn flatten(&self, prefix: &str, out: &mut Vec<(String, Value)>) {
        let start = out.len();
        self.flatten_into(prefix, out);
        let appended = &mut out[start..];
        if all_unique(appended.iter().map(|(name, _)| name.as_str())) {
            return;
        }
        let names = unique_names(appended.iter().map(|(name, _)| name.as_str()));
        for ((name, _), unique) in appended.iter_mut().zip(names) {
            *name = unique;
        }
    }

    fn flatten_into(&self, prefix: &str, out: &mut Vec<(String, Value)>) {
        fn join(prefix: &str, name: &str) -> String {
            if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}.{name}")
            }
        }
        match self {
            Value::Object(fields) | Value::Map(fields) => {
                for (name, value) in fields {
                    value.flatten_into(&join(prefix, name), out);
                }
            }
            Value::Array(items) => {
                for (i, value) in items.iter().enumerate() {
                    value.flatten_into(&join(prefix, &i.to_string()), out);
                }
            }
            Value::Union(_, inner) => inner.flatten_into(prefix, out),
            leaf => out.push((prefix.to_string(), leaf.clone())),
        }
    }

    /// The value as a number for plotting: numbers, bools (0/1), enums (their integer),
    /// timestamps and durations (seconds); `None` for anything else.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Bool(b) => Some(f64::from(u8::from(*b))),
            Value::Int(v) => Some(*v as f64),
            Value::UInt(v) => Some(*v as f64),
            Value::F32(v) => Some(f64::from(*v)),
            Value::F64(v) => Some(*v),
            Value::Enum(v, _) => Some(*v as f64),
            Value::Timestamp(us) | Value::Duration(us) => Some(micros_to_seconds(*us)),
            Value::Union(_, inner) => inner.as_f64(),
            _ => None,
        }
    }
}

/// Microseconds to seconds as f64 (exact to the µs for any time within ±142 years of 1970).
pub fn micros_to_seconds(us: i64) -> f64 {
    us as f64 / 1e6
}

/// True when no name repeats (the common case, checked without copying a name).
fn all_unique<'a>(names: impl Iterator<Item = &'a str>) -> bool {
    let mut seen = std::collections::HashSet::new();
    names.into_iter().all(|name| seen.insert(name))
}

/// Names made unique in order: the first of each name is kept, a repeat becomes `name#2`,
/// `name#3`, … (skipping any name already taken). Duplicate field names are legal in a
/// foreign log; both values must survive into JSON objects and CSV columns.
pub fn unique_names<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut taken = std::collections::HashSet::new();
    // The next suffix to try per name, so n repeats of one name cost O(n), not O(n²).
    let mut next_suffix: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for name in names {
        let mut unique = name.to_string();
        if taken.contains(&unique) {
            let n = next_suffix.entry(name).or_insert(2);
            loop {
                unique = format!("{name}#{n}");
                *n += 1;
                if !taken.contains(&unique) {
                    break;
                }
            }
        }
        taken.insert(unique.clone());
        out.push(unique);
    }
    out
}

/// A JSON number; NaN and infinities become null, and negative zero is written as 0.
fn float_json(v: f64) -> serde_json::Value {
    let v = if v == 0.0 { 0.0 } else { v };
    serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Field;

    fn field(name: &str, schema: Schema) -> Field {
        Field { name: name.to_string(), aliases: Vec::new(), schema, default: None }
    }

    #[test]
    fn decodes_nested_object_and_flattens() {
        let schema = Schema::Object(vec![
            field("a", Schema::FixedInt(2)),
            field("servo", Schema::Array(Box::new(Schema::Object(vec![field("position", Schema::Float32)])))),
            field("opt", Schema::Union(vec![Schema::Null, Schema::VarUInt])),
        ]);
        let mut bytes = vec![0xfe, 0xff, 2];
        bytes.extend_from_slice(&1.5f32.to_le_bytes());
        bytes.extend_from_slice(&(-2.0f32).to_le_bytes());
        bytes.extend_from_slice(&[1, 0x80, 0x01]);
        let value = decode(&schema, &bytes).unwrap();
        let mut flat = Vec::new();
        value.flatten("", &mut flat);
        let names: Vec<&str> = flat.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "servo.0.position", "servo.1.position", "opt"]);
        assert_eq!(flat[0].1, Value::Int(-2));
        assert_eq!(flat[3].1, Value::UInt(128));
        assert_eq!(value.to_json()["servo"][1]["position"], serde_json::json!(-2.0));
    }

    #[test]
    fn huge_counts_fail_without_allocating() {
        let schema = Schema::Array(Box::new(Schema::Null));
        let bytes = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert!(decode(&schema, &bytes).is_err());
        let schema = Schema::FixedArray(1 << 40, Box::new(Schema::Null));
        assert!(decode(&schema, &[]).is_err());
        let schema = Schema::Array(Box::new(Schema::Float64));
        assert!(decode(&schema, &[200, 1, 0, 0]).is_err());
    }

    #[test]
    fn nan_becomes_null() {
        assert_eq!(Value::F64(f64::NAN).to_json(), serde_json::Value::Null);
        assert_eq!(Value::Timestamp(1_500_000).to_json(), serde_json::json!(1.5));
    }
}
