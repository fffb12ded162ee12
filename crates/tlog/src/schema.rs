//! The mjlib binary schema: the model ([`Schema`], [`Field`]), its binary encoding (as
//! stored in schema blocks) and [`schema_of`], which derives a schema from any serde type.
//!
//! A schema is what makes a log self-describing: readers decode every data block with it,
//! so a schema that disagrees with the bytes [`crate::ser`] writes corrupts every record.
//! Parsing works on untrusted bytes and must never panic, recurse without bound or allocate
//! from a length read off the file.
//!
//! # How [`schema_of`] maps Rust types
//!
//! It serializes `T::default()` with a schema-building serde `Serializer`:
//!
//! | Rust | schema |
//! |---|---|
//! | `bool` | bool |
//! | `i8` `i16` `i32` `i64` | fixedint 1/2/4/8 |
//! | `u8` `u16` `u32` `u64` | fixeduint 1/2/4/8 |
//! | `f32` / `f64` | float32 / float64 |
//! | `String`, `&str`, `char` | string |
//! | bytes (`serde_bytes`-style `serialize_bytes`) | bytes (a plain `Vec<u8>` is an array of u8) |
//! | `Vec<T>`, slices, sets | array of T |
//! | `[T; N]`, tuples of one type | fixedarray N of T |
//! | tuples / tuple structs of mixed types | object with fields `_0`, `_1`, … (same bytes) |
//! | `Option<T>` | union (null, T) |
//! | unit enum variants | enum (underlying varuint, value = declaration index) |
//! | structs | object, fields in declaration order |
//! | maps with string keys | map of V |
//! | [`Timestamp`] / [`Duration`] | timestamp / duration |
//! | `()` / unit structs | null |
//!
//! # Limits (a default value does not carry every type)
//!
//! * **Empty `Vec`/map or `None` in the default**: the item type is unknown. Either put one
//!   element / `Some` in the default, or annotate the field with
//!   `#[serde(serialize_with = "rtloop_tlog::schema::typed_vec")]`,
//!   [`typed_option`] or [`typed_map`], which take the item type from `T::default()`.
//!   Without either, `schema_of` returns an error rather than guess.
//! * **Sequence elements must agree**: every element of the default's sequences must give
//!   the same schema (e.g. not one `None` and one `Some`), or it is an error.
//! * **Enums**: only unit variants (mjlib enums are integers); data/tuple/struct variants are
//!   an error. Serde only shows the variant being serialized, so by default the enum's item
//!   list holds just the default's variant (other values still decode, as numbers). Annotate
//!   with `#[serde(serialize_with = "rtloop_tlog::schema::typed_enum")]` (the enum must also derive
//!   `Deserialize`) to list every variant. Values are declaration indices, not discriminants.
//! * **Shape must not depend on the value**: `skip_serializing_if`, untagged enums, flattened
//!   maps and the like make the bytes disagree with the schema; don't use them in records.
//! * `i128`/`u128` and non-string map keys are errors. The top level must be a struct.

use crate::format::{self, read_string, read_varuint, write_string, write_varuint, TlogError};
use serde::ser::{self, Serialize};
use std::cell::Cell;

/// Schema type codes (varuint) of the binary schema.
pub mod type_code {
    pub const FINAL: u64 = 0;
    pub const NULL: u64 = 1;
    pub const BOOL: u64 = 2;
    pub const FIXEDINT: u64 = 3;
    pub const FIXEDUINT: u64 = 4;
    pub const VARINT: u64 = 5;
    pub const VARUINT: u64 = 6;
    pub const FLOAT32: u64 = 7;
    pub const FLOAT64: u64 = 8;
    pub const BYTES: u64 = 9;
    pub const STRING: u64 = 10;
    pub const OBJECT: u64 = 16;
    pub const ENUM: u64 = 17;
    pub const ARRAY: u64 = 18;
    pub const FIXEDARRAY: u64 = 19;
    pub const MAP: u64 = 20;
    pub const UNION: u64 = 21;
    pub const TIMESTAMP: u64 = 22;
    pub const DURATION: u64 = 23;
}

/// Object flag: a varuint version number follows the flags (mjlib README "Object Flags").
pub const OBJECT_FLAG_VERSION: u64 = 1;

/// Deepest nesting [`Schema::parse_binary`] accepts; real records are a handful deep, and the
/// limit keeps hostile input from exhausting the stack.
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// One type of the mjlib schema language.
#[derive(Debug, Clone, PartialEq)]
pub enum Schema {
    Null,
    Bool,
    /// Signed little-endian integer of 1, 2, 4 or 8 bytes.
    FixedInt(u8),
    /// Unsigned little-endian integer of 1, 2, 4 or 8 bytes.
    FixedUInt(u8),
    VarInt,
    VarUInt,
    Float32,
    Float64,
    Bytes,
    String,
    /// Fields in data order.
    Object(Vec<Field>),
    /// An integer of type `underlying` with names for known values.
    Enum {
        underlying: Box<Schema>,
        items: Vec<(u64, String)>,
    },
    /// Variable-length list: varuint count + items.
    Array(Box<Schema>),
    /// Fixed-length list: items only.
    FixedArray(u64, Box<Schema>),
    /// String-keyed map of this value type.
    Map(Box<Schema>),
    /// One of these types, chosen by a varuint index.
    Union(Vec<Schema>),
    /// int64 µs since the UNIX epoch.
    Timestamp,
    /// int64 µs.
    Duration,
}

/// A field of an object.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    /// Former names, so readers can match renamed fields.
    pub aliases: Vec<String>,
    pub schema: Schema,
    /// Default value in data encoding, used by readers when an older schema lacks the field.
    pub default: Option<Vec<u8>>,
}

impl Field {
    /// A field as mjlib's own writer emits it: no aliases, no default.
    pub fn new(name: impl Into<String>, schema: Schema) -> Self {
        Field { name: name.into(), aliases: Vec::new(), schema, default: None }
    }
}

impl Schema {
    /// The type code this schema starts with.
    pub fn type_code(&self) -> u64 {
        use type_code::*;
        match self {
            Schema::Null => NULL,
            Schema::Bool => BOOL,
            Schema::FixedInt(_) => FIXEDINT,
            Schema::FixedUInt(_) => FIXEDUINT,
            Schema::VarInt => VARINT,
            Schema::VarUInt => VARUINT,
            Schema::Float32 => FLOAT32,
            Schema::Float64 => FLOAT64,
            Schema::Bytes => BYTES,
            Schema::String => STRING,
            Schema::Object(_) => OBJECT,
            Schema::Enum { .. } => ENUM,
            Schema::Array(_) => ARRAY,
            Schema::FixedArray(..) => FIXEDARRAY,
            Schema::Map(_) => MAP,
            Schema::Union(_) => UNION,
            Schema::Timestamp => TIMESTAMP,
            Schema::Duration => DURATION,
        }
    }

    /// Append the binary encoding (type code, then the type's extra data).
    pub fn write_binary(&self, out: &mut Vec<u8>) {
        write_varuint(out, self.type_code());
        match self {
            Schema::FixedInt(size) | Schema::FixedUInt(size) => out.push(*size),
            Schema::Object(fields) => {
                write_varuint(out, 0); // object flags
                for field in fields {
                    write_varuint(out, 0); // field flags
                    write_string(out, &field.name);
                    write_varuint(out, field.aliases.len() as u64);
                    for alias in &field.aliases {
                        write_string(out, alias);
                    }
                    field.schema.write_binary(out);
                    match &field.default {
                        None => out.push(0),
                        Some(value) => {
                            out.push(1);
                            out.extend_from_slice(value);
                        }
                    }
                }
                // The terminator is an empty field of type "final": flags, name length,
                // alias count, type, default marker — five zeros.
                out.extend_from_slice(&[0, 0, 0, 0, 0]);
            }
            Schema::Enum { underlying, items } => {
                underlying.write_binary(out);
                write_varuint(out, items.len() as u64);
                for (value, name) in items {
                    write_enum_value(out, underlying, *value);
                    write_string(out, name);
                }
            }
            Schema::Array(item) | Schema::Map(item) => item.write_binary(out),
            Schema::FixedArray(size, item) => {
                write_varuint(out, *size);
                item.write_binary(out);
            }
            Schema::Union(alternatives) => {
                for alternative in alternatives {
                    alternative.write_binary(out);
                }
                write_varuint(out, type_code::FINAL);
            }
            _ => {}
        }
    }

    /// The binary encoding as a new vector.
    pub fn to_binary(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_binary(&mut out);
        out
    }

    /// Parse a record schema (the rest of a schema block). The top level must be an object;
    /// bytes after it are ignored, as mjlib's readers do.
    pub fn parse_binary(bytes: &[u8]) -> Result<Schema, TlogError> {
        let mut pos = 0;
        let schema = Schema::parse_at(bytes, &mut pos)?;
        if !matches!(schema, Schema::Object(_)) {
            return Err(malformed(0, "top-level schema is not an object"));
        }
        Ok(schema)
    }

    /// Parse one schema of any type at `*pos`, advancing past it.
    pub fn parse_at(bytes: &[u8], pos: &mut usize) -> Result<Schema, TlogError> {
        parse_type(bytes, pos, 0)
    }

    /// Fewest bytes one value of this schema can take in data encoding (saturating).
    /// Zero only for types that always take zero bytes (null, empty objects, ...).
    pub fn min_encoded_size(&self) -> u64 {
        match self {
            Schema::Null => 0,
            Schema::Bool => 1,
            Schema::FixedInt(n) | Schema::FixedUInt(n) => u64::from(*n),
            Schema::VarInt | Schema::VarUInt => 1,
            Schema::Float32 => 4,
            Schema::Float64 | Schema::Timestamp | Schema::Duration => 8,
            Schema::Bytes | Schema::String | Schema::Array(_) | Schema::Map(_) | Schema::Union(_) => 1,
            Schema::Object(fields) => {
                fields.iter().fold(0u64, |acc, f| acc.saturating_add(f.schema.min_encoded_size()))
            }
            Schema::Enum { underlying, .. } => underlying.min_encoded_size(),
            Schema::FixedArray(n, item) => n.saturating_mul(item.min_encoded_size()),
        }
    }

    /// Step over one value of this schema in `buf` at `*pos` without decoding it.
    /// Takes time proportional to the bytes consumed (counts are checked against what is left).
    pub fn skip_value(&self, buf: &[u8], pos: &mut usize) -> Result<(), TlogError> {
        let start = *pos;
        let mut p = start;
        self.skip_inner(buf, &mut p)?;
        *pos = p;
        Ok(())
    }

    fn skip_inner(&self, buf: &[u8], pos: &mut usize) -> Result<(), TlogError> {
        let advance = |pos: &mut usize, n: u64| -> Result<(), TlogError> {
            let end = usize::try_from(n).ok().and_then(|n| pos.checked_add(n)).filter(|&e| e <= buf.len());
            *pos = end.ok_or(TlogError::Truncated { offset: *pos as u64 })?;
            Ok(())
        };
        match self {
            Schema::Null => Ok(()),
            Schema::VarInt | Schema::VarUInt => read_varuint(buf, pos).map(|_| ()),
            Schema::Bytes | Schema::String => format::read_bytes(buf, pos).map(|_| ()),
            Schema::Bool
            | Schema::FixedInt(_)
            | Schema::FixedUInt(_)
            | Schema::Float32
            | Schema::Float64
            | Schema::Timestamp
            | Schema::Duration => advance(pos, self.min_encoded_size()),
            Schema::Enum { underlying, .. } => underlying.skip_inner(buf, pos),
            Schema::Object(fields) => fields.iter().try_for_each(|f| f.schema.skip_inner(buf, pos)),
            Schema::Array(item) => {
                let at = *pos;
                let count = read_varuint(buf, pos)?;
                skip_items(item, count, buf, pos, at)
            }
            Schema::FixedArray(count, item) => skip_items(item, *count, buf, pos, *pos),
            Schema::Map(value) => {
                let at = *pos;
                let count = read_varuint(buf, pos)?;
                // Each entry takes at least a key length byte.
                if count > (buf.len() - *pos) as u64 {
                    return Err(TlogError::Truncated { offset: at as u64 });
                }
                for _ in 0..count {
                    format::read_bytes(buf, pos)?;
                    value.skip_inner(buf, pos)?;
                }
                Ok(())
            }
            Schema::Union(alternatives) => {
                let at = *pos;
                let index = read_varuint(buf, pos)?;
                let alternative = usize::try_from(index)
                    .ok()
                    .and_then(|i| alternatives.get(i))
                    .ok_or_else(|| malformed(at, "union index out of range"))?;
                alternative.skip_inner(buf, pos)
            }
        }
    }
}

fn skip_items(item: &Schema, count: u64, buf: &[u8], pos: &mut usize, at: usize) -> Result<(), TlogError> {
    let min = item.min_encoded_size();
    if min == 0 {
        // Zero-size items occupy nothing, however many there are.
        return Ok(());
    }
    if count > ((buf.len() - *pos) as u64) / min {
        return Err(TlogError::Truncated { offset: at as u64 });
    }
    for _ in 0..count {
        item.skip_inner(buf, pos)?;
    }
    Ok(())
}

fn write_enum_value(out: &mut Vec<u8>, underlying: &Schema, value: u64) {
    match underlying {
        Schema::FixedUInt(n) | Schema::FixedInt(n) => {
            out.extend_from_slice(&value.to_le_bytes()[..usize::from(*n).min(8)]);
        }
        Schema::VarInt => format::write_varint(out, value as i64),
        // mjlib only writes varuint-based enums; anything else is written the same way.
        _ => write_varuint(out, value),
    }
}

fn read_enum_value(bytes: &[u8], pos: &mut usize, underlying: &Schema) -> Result<u64, TlogError> {
    match underlying {
        Schema::VarUInt => read_varuint(bytes, pos),
        Schema::VarInt => format::read_varint(bytes, pos).map(|v| v as u64),
        Schema::FixedUInt(n) | Schema::FixedInt(n) => {
            let n = usize::from(*n);
            let start = *pos;
            let slice = start
                .checked_add(n)
                .and_then(|end| bytes.get(start..end))
                .ok_or(TlogError::Truncated { offset: start as u64 })?;
            let mut le = [0u8; 8];
            le[..n].copy_from_slice(slice);
            *pos = start + n;
            Ok(u64::from_le_bytes(le))
        }
        _ => Err(malformed(*pos, "enum underlying type is not an integer")),
    }
}

fn parse_type(bytes: &[u8], pos: &mut usize, depth: usize) -> Result<Schema, TlogError> {
    if depth > MAX_SCHEMA_DEPTH {
        return Err(malformed(*pos, "schema nested too deeply"));
    }
    let at = *pos;
    let code = read_varuint(bytes, pos)?;
    parse_after_code(code, at, bytes, pos, depth)
}

fn parse_after_code(code: u64, at: usize, bytes: &[u8], pos: &mut usize, depth: usize) -> Result<Schema, TlogError> {
    use type_code::*;
    Ok(match code {
        NULL => Schema::Null,
        BOOL => Schema::Bool,
        FIXEDINT | FIXEDUINT => {
            let size = *bytes.get(*pos).ok_or(TlogError::Truncated { offset: *pos as u64 })?;
            if !matches!(size, 1 | 2 | 4 | 8) {
                return Err(malformed(*pos, "fixed integer size is not 1, 2, 4 or 8"));
            }
            *pos += 1;
            if code == FIXEDINT {
                Schema::FixedInt(size)
            } else {
                Schema::FixedUInt(size)
            }
        }
        VARINT => Schema::VarInt,
        VARUINT => Schema::VarUInt,
        FLOAT32 => Schema::Float32,
        FLOAT64 => Schema::Float64,
        BYTES => Schema::Bytes,
        STRING => Schema::String,
        OBJECT => Schema::Object(parse_fields(bytes, pos, depth)?),
        ENUM => {
            let underlying = parse_type(bytes, pos, depth + 1)?;
            let count = read_varuint(bytes, pos)?;
            // No pre-allocation from `count`: every item consumes input, which bounds the loop.
            let mut items = Vec::new();
            for _ in 0..count {
                let value = read_enum_value(bytes, pos, &underlying)?;
                let name = read_string(bytes, pos)?.to_string();
                items.push((value, name));
            }
            Schema::Enum { underlying: Box::new(underlying), items }
        }
        ARRAY => Schema::Array(Box::new(parse_type(bytes, pos, depth + 1)?)),
        FIXEDARRAY => {
            let size = read_varuint(bytes, pos)?;
            Schema::FixedArray(size, Box::new(parse_type(bytes, pos, depth + 1)?))
        }
        MAP => Schema::Map(Box::new(parse_type(bytes, pos, depth + 1)?)),
        UNION => {
            let mut alternatives = Vec::new();
            loop {
                let alt_at = *pos;
                let alt_code = read_varuint(bytes, pos)?;
                if alt_code == FINAL {
                    break;
                }
                alternatives.push(parse_after_code(alt_code, alt_at, bytes, pos, depth + 1)?);
            }
            Schema::Union(alternatives)
        }
        TIMESTAMP => Schema::Timestamp,
        DURATION => Schema::Duration,
        FINAL => return Err(malformed(at, "unexpected end-of-list type code")),
        other => return Err(malformed(at, &format!("unknown schema type code {other}"))),
    })
}

fn parse_fields(bytes: &[u8], pos: &mut usize, depth: usize) -> Result<Vec<Field>, TlogError> {
    let flags_at = *pos;
    let object_flags = read_varuint(bytes, pos)?;
    if object_flags & !OBJECT_FLAG_VERSION != 0 {
        return Err(TlogError::UnknownFlags { offset: flags_at as u64, flags: object_flags });
    }
    if object_flags & OBJECT_FLAG_VERSION != 0 {
        // mjlib's schema-evolution version number; the model does not keep it (we never
        // write it), but a schema carrying it must still parse.
        read_varuint(bytes, pos)?;
    }
    let mut fields = Vec::new();
    loop {
        let field_at = *pos;
        let field_flags = read_varuint(bytes, pos)?;
        if field_flags != 0 {
            return Err(TlogError::UnknownFlags { offset: field_at as u64, flags: field_flags });
        }
        let name = read_string(bytes, pos)?.to_string();
        let alias_count = read_varuint(bytes, pos)?;
        let mut aliases = Vec::new();
        for _ in 0..alias_count {
            aliases.push(read_string(bytes, pos)?.to_string());
        }
        let type_at = *pos;
        let code = read_varuint(bytes, pos)?;
        let schema =
            if code == type_code::FINAL { None } else { Some(parse_after_code(code, type_at, bytes, pos, depth + 1)?) };
        let marker_at = *pos;
        let marker = *bytes.get(marker_at).ok_or(TlogError::Truncated { offset: marker_at as u64 })?;
        *pos += 1;
        let Some(schema) = schema else {
            // The terminator: a field of type "final". Its default marker must be empty.
            if marker != 0 {
                return Err(malformed(marker_at, "object terminator has a default value"));
            }
            return Ok(fields);
        };
        let default = match marker {
            0 => None,
            1 => {
                let value_start = *pos;
                schema.skip_value(bytes, pos)?;
                Some(bytes[value_start..*pos].to_vec())
            }
            _ => return Err(malformed(marker_at, "field default marker is not 0 or 1")),
        };
        fields.push(Field { name, aliases, schema, default });
    }
}

fn malformed(offset: usize, what: &str) -> TlogError {
    TlogError::Malformed { offset: offset as u64, what: what.to_string() }
}

/// Microseconds since the UNIX epoch; serializes as the schema type `timestamp`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

/// Microseconds; serializes as the schema type `duration`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(pub i64);

/// Newtype-struct names [`schema_of`] maps to the timestamp / duration schema types.
pub const TIMESTAMP_NAME: &str = "Timestamp";
pub const DURATION_NAME: &str = "Duration";

impl Serialize for Timestamp {
    fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_struct(TIMESTAMP_NAME, &self.0)
    }
}

impl Serialize for Duration {
    fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_struct(DURATION_NAME, &self.0)
    }
}

// ---------------------------------------------------------------------------------------
// Type hints: how a field tells `schema_of` what its default value cannot show.
//
// The `typed_*` functions below are `serialize_with` adapters. They park a hint in a
// thread-local right before calling the serializer and clear it right after; the schema
// builder consumes it in the very next `serialize_*` call, every other serializer (the data
// encoder, serde_json, ...) ignores it, so the field's bytes are unchanged everywhere. A
// thread-local `Cell` of plain fn pointers never allocates, so the adapters are safe on any
// thread.

#[derive(Clone, Copy)]
enum Hint {
    None,
    /// Item (array), value (map) or inner (option) schema.
    Item(fn() -> Result<Schema, TlogError>),
    /// Every variant name of an enum, in declaration order.
    Variants(fn() -> Result<&'static [&'static str], TlogError>),
}

thread_local! {
    static HINT: Cell<Hint> = const { Cell::new(Hint::None) };
}

fn with_hint<R>(hint: Hint, f: impl FnOnce() -> R) -> R {
    let previous = HINT.with(|h| h.replace(hint));
    let result = f();
    HINT.with(|h| h.set(previous));
    result
}

fn take_hint() -> Hint {
    HINT.with(|h| h.replace(Hint::None))
}

/// `serialize_with` adapter for `Vec<T>` fields: the array's item type comes from
/// `T::default()`, so the default may be empty.
#[allow(clippy::ptr_arg)] // serde hands `serialize_with` a `&FieldType`.
pub fn typed_vec<T: Serialize + Default, S: ser::Serializer>(v: &Vec<T>, s: S) -> Result<S::Ok, S::Error> {
    with_hint(Hint::Item(schema_of_any::<T>), || v.serialize(s))
}

/// `serialize_with` adapter for `Option<T>` fields: the union's type comes from
/// `T::default()`, so the default may be `None`.
pub fn typed_option<T: Serialize + Default, S: ser::Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    with_hint(Hint::Item(schema_of_any::<T>), || v.serialize(s))
}

/// `serialize_with` adapter for string-keyed map fields: the value type comes from
/// `V::default()`, so the default may be empty.
pub fn typed_map<M, V, S>(v: &M, s: S) -> Result<S::Ok, S::Error>
where
    M: Serialize + HasMapValue<Value = V>,
    V: Serialize + Default,
    S: ser::Serializer,
{
    with_hint(Hint::Item(schema_of_any::<V>), || v.serialize(s))
}

/// Names a map type's value type for [`typed_map`].
pub trait HasMapValue {
    type Value;
}
impl<K, V, H> HasMapValue for std::collections::HashMap<K, V, H> {
    type Value = V;
}
impl<K, V> HasMapValue for std::collections::BTreeMap<K, V> {
    type Value = V;
}

/// `serialize_with` adapter for unit-only enum fields that also derive `Deserialize`: the
/// schema lists every variant (taken from the derived `Deserialize`), not just the default.
pub fn typed_enum<E, S>(v: &E, s: S) -> Result<S::Ok, S::Error>
where
    E: Serialize + serde::de::DeserializeOwned,
    S: ser::Serializer,
{
    with_hint(Hint::Variants(variants_of::<E>), || v.serialize(s))
}

/// The variant names a derived `Deserialize` declares, found by asking it to deserialize
/// from a probe that records the list and then stops.
fn variants_of<E: serde::de::DeserializeOwned>() -> Result<&'static [&'static str], TlogError> {
    let probe = VariantProbe { found: Cell::new(None) };
    let _ = E::deserialize(&probe);
    probe.found.get().ok_or_else(|| TlogError::Unsupported("typed_enum: type does not deserialize as an enum".into()))
}

struct VariantProbe {
    found: Cell<Option<&'static [&'static str]>>,
}

#[derive(Debug)]
struct ProbeDone;
impl std::fmt::Display for ProbeDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("variant probe finished")
    }
}
impl std::error::Error for ProbeDone {}
impl serde::de::Error for ProbeDone {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        ProbeDone
    }
}

impl<'de> serde::de::Deserializer<'de> for &VariantProbe {
    type Error = ProbeDone;
    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, ProbeDone> {
        Err(ProbeDone)
    }
    fn deserialize_enum<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, ProbeDone> {
        self.found.set(Some(variants));
        Err(ProbeDone)
    }
    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

// ---------------------------------------------------------------------------------------
// schema_of

/// The schema of a record type, from its default value. The top level must be a struct.
/// See the module docs for the mapping and its limits.
pub fn schema_of<T: Serialize + Default>() -> Result<Schema, TlogError> {
    let schema = schema_of_any::<T>()?;
    if !matches!(schema, Schema::Object(_)) {
        return Err(TlogError::Unsupported(format!(
            "a record's top level must be a struct, {} is not",
            std::any::type_name::<T>()
        )));
    }
    Ok(schema)
}

/// The schema of any value (not only structs).
pub fn schema_of_value<T: Serialize + ?Sized>(value: &T) -> Result<Schema, TlogError> {
    // A hint left by a caller's adapter belongs to the value being serialized there, not
    // to this nested walk.
    with_hint(Hint::None, || value.serialize(SchemaBuilder))
}

fn schema_of_any<T: Serialize + Default>() -> Result<Schema, TlogError> {
    schema_of_value(&T::default())
}

fn unsupported(what: impl Into<String>) -> TlogError {
    TlogError::Unsupported(what.into())
}

/// Serializer whose output is the schema of the value, not its bytes.
struct SchemaBuilder;

/// Gathers element schemas of a sequence, tuple or map.
struct Elements {
    kind: ElementsKind,
    hint: Hint,
    items: Vec<Schema>,
}

enum ElementsKind {
    Seq,
    Tuple(usize),
    Map,
}

/// Gathers fields of a struct.
struct Fields {
    fields: Vec<Field>,
}

impl Elements {
    fn new(kind: ElementsKind, hint: Hint) -> Self {
        Elements { kind, hint, items: Vec::new() }
    }

    /// The one schema all elements share (or the hinted one).
    fn common_item(&self, what: &str) -> Result<Schema, TlogError> {
        let hinted = match self.hint {
            Hint::Item(f) => Some(f()?),
            _ => None,
        };
        let first = hinted.as_ref().or(self.items.first());
        let Some(first) = first else {
            return Err(unsupported(format!(
                "empty {what} in the default value: its item type is unknown (put one element in the \
                 default, or use #[serde(serialize_with = \"rtloop_tlog::schema::typed_vec\")] / typed_map)"
            )));
        };
        if let Some(other) = self.items.iter().find(|s| *s != first) {
            return Err(unsupported(format!(
                "elements of a {what} have different schemas ({first:?} vs {other:?}); mjlib arrays are homogeneous"
            )));
        }
        Ok(first.clone())
    }
}

impl ser::SerializeSeq for Elements {
    type Ok = Schema;
    type Error = TlogError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), TlogError> {
        self.items.push(schema_of_value(value)?);
        Ok(())
    }
    fn end(self) -> Result<Schema, TlogError> {
        Ok(Schema::Array(Box::new(self.common_item("sequence")?)))
    }
}

impl ser::SerializeTuple for Elements {
    type Ok = Schema;
    type Error = TlogError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), TlogError> {
        self.items.push(schema_of_value(value)?);
        Ok(())
    }
    fn end(self) -> Result<Schema, TlogError> {
        let ElementsKind::Tuple(len) = self.kind else { unreachable!("tuple elements are built as tuples") };
        if len == 0 {
            return Err(unsupported("zero-length array or tuple: its item type is unknown"));
        }
        let Some(first) = self.items.first() else {
            return Err(unsupported("tuple serialized no elements"));
        };
        if self.items.iter().all(|s| s == first) {
            return Ok(Schema::FixedArray(len as u64, Box::new(first.clone())));
        }
        // Mixed types: an object of positional fields has exactly the tuple's bytes.
        let fields = self.items.into_iter().enumerate().map(|(i, s)| Field::new(format!("_{i}"), s)).collect();
        Ok(Schema::Object(fields))
    }
}

impl ser::SerializeTupleStruct for Elements {
    type Ok = Schema;
    type Error = TlogError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), TlogError> {
        ser::SerializeTuple::serialize_element(self, value)
    }
    fn end(self) -> Result<Schema, TlogError> {
        ser::SerializeTuple::end(self)
    }
}

impl ser::SerializeMap for Elements {
    type Ok = Schema;
    type Error = TlogError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), TlogError> {
        match schema_of_value(key)? {
            Schema::String => Ok(()),
            other => Err(unsupported(format!("map keys must be strings, not {other:?}"))),
        }
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), TlogError> {
        self.items.push(schema_of_value(value)?);
        Ok(())
    }
    fn end(self) -> Result<Schema, TlogError> {
        debug_assert!(matches!(self.kind, ElementsKind::Map));
        Ok(Schema::Map(Box::new(self.common_item("map")?)))
    }
}

impl ser::SerializeStruct for Fields {
    type Ok = Schema;
    type Error = TlogError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), TlogError> {
        self.fields.push(Field::new(key, schema_of_value(value)?));
        Ok(())
    }
    fn end(self) -> Result<Schema, TlogError> {
        Ok(Schema::Object(self.fields))
    }
}

type Rejected = ser::Impossible<Schema, TlogError>;

impl ser::Serializer for SchemaBuilder {
    type Ok = Schema;
    type Error = TlogError;
    type SerializeSeq = Elements;
    type SerializeTuple = Elements;
    type SerializeTupleStruct = Elements;
    type SerializeTupleVariant = Rejected;
    type SerializeMap = Elements;
    type SerializeStruct = Fields;
    type SerializeStructVariant = Rejected;

    fn serialize_bool(self, _: bool) -> Result<Schema, TlogError> {
        Ok(Schema::Bool)
    }
    fn serialize_i8(self, _: i8) -> Result<Schema, TlogError> {
        Ok(Schema::FixedInt(1))
    }
    fn serialize_i16(self, _: i16) -> Result<Schema, TlogError> {
        Ok(Schema::FixedInt(2))
    }
    fn serialize_i32(self, _: i32) -> Result<Schema, TlogError> {
        Ok(Schema::FixedInt(4))
    }
    fn serialize_i64(self, _: i64) -> Result<Schema, TlogError> {
        Ok(Schema::FixedInt(8))
    }
    fn serialize_i128(self, _: i128) -> Result<Schema, TlogError> {
        Err(unsupported("128-bit integers have no mjlib type"))
    }
    fn serialize_u8(self, _: u8) -> Result<Schema, TlogError> {
        Ok(Schema::FixedUInt(1))
    }
    fn serialize_u16(self, _: u16) -> Result<Schema, TlogError> {
        Ok(Schema::FixedUInt(2))
    }
    fn serialize_u32(self, _: u32) -> Result<Schema, TlogError> {
        Ok(Schema::FixedUInt(4))
    }
    fn serialize_u64(self, _: u64) -> Result<Schema, TlogError> {
        Ok(Schema::FixedUInt(8))
    }
    fn serialize_u128(self, _: u128) -> Result<Schema, TlogError> {
        Err(unsupported("128-bit integers have no mjlib type"))
    }
    fn serialize_f32(self, _: f32) -> Result<Schema, TlogError> {
        Ok(Schema::Float32)
    }
    fn serialize_f64(self, _: f64) -> Result<Schema, TlogError> {
        Ok(Schema::Float64)
    }
    fn serialize_char(self, _: char) -> Result<Schema, TlogError> {
        Ok(Schema::String)
    }
    fn serialize_str(self, _: &str) -> Result<Schema, TlogError> {
        Ok(Schema::String)
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<Schema, TlogError> {
        Ok(Schema::Bytes)
    }
    fn serialize_none(self) -> Result<Schema, TlogError> {
        match take_hint() {
            Hint::Item(f) => Ok(Schema::Union(vec![Schema::Null, f()?])),
            _ => Err(unsupported(
                "None in the default value: the option's type is unknown (use Some in the default, or \
                 #[serde(serialize_with = \"rtloop_tlog::schema::typed_option\")])",
            )),
        }
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Schema, TlogError> {
        let inner = match take_hint() {
            Hint::Item(f) => f()?,
            _ => schema_of_value(value)?,
        };
        Ok(Schema::Union(vec![Schema::Null, inner]))
    }
    fn serialize_unit(self) -> Result<Schema, TlogError> {
        Ok(Schema::Null)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Schema, TlogError> {
        Ok(Schema::Null)
    }
    fn serialize_unit_variant(self, _: &'static str, index: u32, variant: &'static str) -> Result<Schema, TlogError> {
        let items = match take_hint() {
            Hint::Variants(f) => f()?.iter().enumerate().map(|(i, name)| (i as u64, (*name).to_string())).collect(),
            _ => vec![(u64::from(index), variant.to_string())],
        };
        Ok(Schema::Enum { underlying: Box::new(Schema::VarUInt), items })
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<Schema, TlogError> {
        let inner = schema_of_value(value)?;
        let special = match name {
            TIMESTAMP_NAME => Schema::Timestamp,
            DURATION_NAME => Schema::Duration,
            _ => return Ok(inner),
        };
        // The data encoder writes the inner value, so it must be the int64 the type promises.
        if inner != Schema::FixedInt(8) {
            return Err(unsupported(format!("newtype `{name}` must wrap an i64 to be a {special:?}")));
        }
        Ok(special)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        _: u32,
        variant: &'static str,
        _: &T,
    ) -> Result<Schema, TlogError> {
        Err(unsupported(format!("enum {name}::{variant} carries data; only unit variants map to mjlib enums")))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Elements, TlogError> {
        Ok(Elements::new(ElementsKind::Seq, take_hint()))
    }
    fn serialize_tuple(self, len: usize) -> Result<Elements, TlogError> {
        take_hint();
        Ok(Elements::new(ElementsKind::Tuple(len), Hint::None))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Elements, TlogError> {
        self.serialize_tuple(len)
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Rejected, TlogError> {
        Err(unsupported(format!("enum {name}::{variant} carries data; only unit variants map to mjlib enums")))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Elements, TlogError> {
        Ok(Elements::new(ElementsKind::Map, take_hint()))
    }
    fn serialize_struct(self, _: &'static str, len: usize) -> Result<Fields, TlogError> {
        take_hint();
        Ok(Fields { fields: Vec::with_capacity(len) })
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Rejected, TlogError> {
        Err(unsupported(format!("enum {name}::{variant} carries data; only unit variants map to mjlib enums")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_double_is_the_documented_union() {
        let s = Schema::Union(vec![Schema::Null, Schema::Float64]);
        assert_eq!(s.to_binary(), [0x15, 0x01, 0x08, 0x00]);
    }

    #[test]
    fn object_version_flag_is_accepted() {
        let bytes = [0x10, 0x01, 0x05, 0x00, 0x01, b'a', 0x00, 0x02, 0x00, 0, 0, 0, 0, 0];
        assert_eq!(Schema::parse_binary(&bytes).unwrap(), Schema::Object(vec![Field::new("a", Schema::Bool)]));
    }

    #[test]
    fn empty_object_terminator() {
        assert_eq!(Schema::Object(vec![]).to_binary(), [0x10, 0x00, 0, 0, 0, 0, 0]);
        assert_eq!(Schema::parse_binary(&[0x10, 0x00, 0, 0, 0, 0, 0]).unwrap(), Schema::Object(vec![]));
    }

    #[test]
    fn deep_nesting_is_rejected_not_a_stack_overflow() {
        let mut bytes = vec![0x10, 0x00, 0x00, 0x01, b'a', 0x00];
        bytes.extend(std::iter::repeat_n(0x12u8, 100_000));
        bytes.push(0x01);
        assert!(Schema::parse_binary(&bytes).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        let mut state = 0x1234_5678u32;
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 17;
                    state ^= state << 5;
                    (state % 30) as u8
                })
                .collect();
            let _ = Schema::parse_binary(&bytes);
            let mut with_prefix = vec![0x10, 0x00];
            with_prefix.extend_from_slice(&bytes);
            let _ = Schema::parse_binary(&with_prefix);
        }
    }
}
