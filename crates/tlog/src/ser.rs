//! The mjlib data encoding of serde values — the bytes of a data block's payload.
//!
//! It mirrors [`crate::schema::schema_of`] type for type (see that module's table): fixed
//! integers little-endian of their size, floats little-endian, bool one byte, strings and
//! bytes as varuint length + bytes, arrays as varuint count + items, fixed arrays and tuples
//! as items, options as union index (None 0, Some 1) + value, unit enum variants as their
//! varuint index, structs as fields in order, maps as count + (key, value).
//!
//! Must never disagree with `schema_of` (every reader would mis-decode the record), and
//! never allocate beyond growing the caller's output buffer, so a reused buffer makes
//! encoding allocation-free in steady state.

use crate::format::{write_bytes, write_varuint, TlogError};
use serde::ser::{self, Serialize};

/// Append the data encoding of `value` to `out`.
///
/// On error `out` may hold a partial encoding; callers truncate it back.
pub fn to_bytes<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), TlogError> {
    value.serialize(DataEncoder { out })
}

fn unsupported(what: impl Into<String>) -> TlogError {
    TlogError::Unsupported(what.into())
}

/// Serializer writing the data encoding into `out`.
struct DataEncoder<'a> {
    out: &'a mut Vec<u8>,
}

/// A sequence or map in progress. When serde does not know the length up front, the count
/// is inserted in front of the items at the end.
struct Counted<'a> {
    out: &'a mut Vec<u8>,
    /// `Some(start of the items)` when the count still has to be inserted.
    deferred_from: Option<usize>,
    count: u64,
}

impl<'a> Counted<'a> {
    fn begin(out: &'a mut Vec<u8>, len: Option<usize>) -> Self {
        match len {
            Some(n) => {
                write_varuint(out, n as u64);
                Counted { out, deferred_from: None, count: 0 }
            }
            None => {
                let start = out.len();
                Counted { out, deferred_from: Some(start), count: 0 }
            }
        }
    }

    fn finish(self) -> Result<(), TlogError> {
        if let Some(start) = self.deferred_from {
            let mut count = Vec::with_capacity(crate::format::MAX_VARUINT_LEN);
            write_varuint(&mut count, self.count);
            self.out.splice(start..start, count);
        }
        Ok(())
    }
}

/// Tuples, structs: items back to back, no framing.
struct Plain<'a> {
    out: &'a mut Vec<u8>,
}

impl ser::SerializeSeq for Counted<'_> {
    type Ok = ();
    type Error = TlogError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), TlogError> {
        self.count += 1;
        value.serialize(DataEncoder { out: self.out })
    }
    fn end(self) -> Result<(), TlogError> {
        self.finish()
    }
}

impl ser::SerializeMap for Counted<'_> {
    type Ok = ();
    type Error = TlogError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), TlogError> {
        self.count += 1;
        key.serialize(KeyEncoder { out: self.out })
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), TlogError> {
        value.serialize(DataEncoder { out: self.out })
    }
    fn end(self) -> Result<(), TlogError> {
        self.finish()
    }
}

impl ser::SerializeTuple for Plain<'_> {
    type Ok = ();
    type Error = TlogError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), TlogError> {
        value.serialize(DataEncoder { out: self.out })
    }
    fn end(self) -> Result<(), TlogError> {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Plain<'_> {
    type Ok = ();
    type Error = TlogError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), TlogError> {
        value.serialize(DataEncoder { out: self.out })
    }
    fn end(self) -> Result<(), TlogError> {
        Ok(())
    }
}

impl ser::SerializeStruct for Plain<'_> {
    type Ok = ();
    type Error = TlogError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, _: &'static str, value: &T) -> Result<(), TlogError> {
        value.serialize(DataEncoder { out: self.out })
    }
    fn end(self) -> Result<(), TlogError> {
        Ok(())
    }
}

type Rejected = ser::Impossible<(), TlogError>;

fn data_variant(name: &str, variant: &str) -> TlogError {
    unsupported(format!("enum {name}::{variant} carries data; only unit variants map to mjlib enums"))
}

impl<'a> ser::Serializer for DataEncoder<'a> {
    type Ok = ();
    type Error = TlogError;
    type SerializeSeq = Counted<'a>;
    type SerializeTuple = Plain<'a>;
    type SerializeTupleStruct = Plain<'a>;
    type SerializeTupleVariant = Rejected;
    type SerializeMap = Counted<'a>;
    type SerializeStruct = Plain<'a>;
    type SerializeStructVariant = Rejected;

    fn serialize_bool(self, v: bool) -> Result<(), TlogError> {
        self.out.push(u8::from(v));
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), TlogError> {
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_i16(self, v: i16) -> Result<(), TlogError> {
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_i32(self, v: i32) -> Result<(), TlogError> {
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_i64(self, v: i64) -> Result<(), TlogError> {
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_i128(self, _: i128) -> Result<(), TlogError> {
        Err(unsupported("128-bit integers have no mjlib type"))
    }
    fn serialize_u8(self, v: u8) -> Result<(), TlogError> {
        self.out.push(v);
        Ok(())
    }
    fn serialize_u16(self, v: u16) -> Result<(), TlogError> {
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_u32(self, v: u32) -> Result<(), TlogError> {
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> Result<(), TlogError> {
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_u128(self, _: u128) -> Result<(), TlogError> {
        Err(unsupported("128-bit integers have no mjlib type"))
    }
    fn serialize_f32(self, v: f32) -> Result<(), TlogError> {
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Result<(), TlogError> {
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), TlogError> {
        let mut utf8 = [0u8; 4];
        write_bytes(self.out, v.encode_utf8(&mut utf8).as_bytes());
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), TlogError> {
        write_bytes(self.out, v.as_bytes());
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), TlogError> {
        write_bytes(self.out, v);
        Ok(())
    }
    fn serialize_none(self) -> Result<(), TlogError> {
        write_varuint(self.out, 0); // union alternative 0: null
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), TlogError> {
        write_varuint(self.out, 1); // union alternative 1: the value
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), TlogError> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), TlogError> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, index: u32, _: &'static str) -> Result<(), TlogError> {
        write_varuint(self.out, u64::from(index));
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), TlogError> {
        // Timestamp / Duration wrap an i64, whose 8 little-endian bytes are their encoding.
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        _: u32,
        variant: &'static str,
        _: &T,
    ) -> Result<(), TlogError> {
        Err(data_variant(name, variant))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Counted<'a>, TlogError> {
        Ok(Counted::begin(self.out, len))
    }
    fn serialize_tuple(self, _: usize) -> Result<Plain<'a>, TlogError> {
        Ok(Plain { out: self.out })
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Plain<'a>, TlogError> {
        Ok(Plain { out: self.out })
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Rejected, TlogError> {
        Err(data_variant(name, variant))
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Counted<'a>, TlogError> {
        Ok(Counted::begin(self.out, len))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Plain<'a>, TlogError> {
        Ok(Plain { out: self.out })
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Rejected, TlogError> {
        Err(data_variant(name, variant))
    }
}

/// Map keys: the format only has string keys, so anything else is an error rather than
/// bytes a reader would mis-parse.
struct KeyEncoder<'a> {
    out: &'a mut Vec<u8>,
}

fn non_string_key() -> TlogError {
    unsupported("map keys must be strings")
}

macro_rules! reject_key {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(fn $method(self, _: $ty) -> Result<(), TlogError> { Err(non_string_key()) })*
    };
}

impl ser::Serializer for KeyEncoder<'_> {
    type Ok = ();
    type Error = TlogError;
    type SerializeSeq = Rejected;
    type SerializeTuple = Rejected;
    type SerializeTupleStruct = Rejected;
    type SerializeTupleVariant = Rejected;
    type SerializeMap = Rejected;
    type SerializeStruct = Rejected;
    type SerializeStructVariant = Rejected;

    fn serialize_str(self, v: &str) -> Result<(), TlogError> {
        write_bytes(self.out, v.as_bytes());
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), TlogError> {
        let mut utf8 = [0u8; 4];
        write_bytes(self.out, v.encode_utf8(&mut utf8).as_bytes());
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), TlogError> {
        value.serialize(self)
    }
    reject_key!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_bytes(&[u8]),
        serialize_unit_struct(&'static str),
    );
    fn serialize_none(self) -> Result<(), TlogError> {
        Err(non_string_key())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<(), TlogError> {
        Err(non_string_key())
    }
    fn serialize_unit(self) -> Result<(), TlogError> {
        Err(non_string_key())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), TlogError> {
        Err(non_string_key())
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), TlogError> {
        Err(non_string_key())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Rejected, TlogError> {
        Err(non_string_key())
    }
    fn serialize_tuple(self, _: usize) -> Result<Rejected, TlogError> {
        Err(non_string_key())
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Rejected, TlogError> {
        Err(non_string_key())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Rejected, TlogError> {
        Err(non_string_key())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Rejected, TlogError> {
        Err(non_string_key())
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Rejected, TlogError> {
        Err(non_string_key())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Rejected, TlogError> {
        Err(non_string_key())
    }
}
