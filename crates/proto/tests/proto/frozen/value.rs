// FROZEN copy of crates/proto/src/value.rs as of commit 57a042a (before the codec speed-up):
// the reference the optimised codec must match byte for byte. Do not edit.
//! Resolutions, scale classes and the mapping between physical values and register bytes.
//!
//! The rules are those of the official moteus clients: `raw = trunc(value / scale)` toward
//! zero, clamped to ±max of the type (never to the minimum); NaN and ±inf are sent as the
//! minimum integer, which means "unset / no limit"; on decode the minimum integer is NaN.
//! The arithmetic is done in f64, as the Python client does, so that a value typed by a
//! user truncates to the same integer on both sides.
//!
//! What it must never do: clamp to the minimum integer (that would turn a real value into
//! "unset"), round instead of truncating, or panic on any input (NaN, ±inf, huge values).

// Frozen: the resolutions, the scale classes and their scales are the crate's own (unchanged).
pub use rtloop_proto::{Resolution, ScaleClass};

/// A register value exactly as it travels in a subframe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// int8 on the wire.
    I8(i8),
    /// int16 on the wire.
    I16(i16),
    /// int32 on the wire.
    I32(i32),
    /// float on the wire.
    F32(f32),
}

/// `trunc(x / scale)` clamped to ±`max`; non-finite `x` gives `None` ("unset").
fn scaled_raw(x: f64, scale: f64, max: i32) -> Option<i32> {
    if !x.is_finite() {
        return None;
    }
    let raw = x / scale;
    let max_f = f64::from(max);
    // `raw` can still be ±inf (finite x, tiny scale) or NaN (scale 0 is impossible here,
    // but be defensive): comparisons route both to a clamp, and `as` saturates anyway.
    if raw >= max_f {
        Some(max)
    } else if raw <= -max_f {
        Some(max.saturating_neg())
    } else if raw.is_nan() {
        None
    } else {
        // `as` truncates toward zero, which is exactly the rule (|raw| < max here).
        Some(raw as i32)
    }
}

impl Value {
    /// Encode a physical value the way the moteus Python client does: in f64,
    /// `trunc(x / scale)`, clamped to ±max of the type; NaN and ±inf become the minimum
    /// integer ("unset"). Float resolution sends `x as f32`.
    pub fn encode(x: f64, class: ScaleClass, res: Resolution) -> Value {
        let scale = class.scale(res);
        match res {
            Resolution::Int8 => {
                Value::I8(scaled_raw(x, scale, i8::MAX.into()).and_then(|r| i8::try_from(r).ok()).unwrap_or(i8::MIN))
            }
            Resolution::Int16 => Value::I16(
                scaled_raw(x, scale, i16::MAX.into()).and_then(|r| i16::try_from(r).ok()).unwrap_or(i16::MIN),
            ),
            Resolution::Int32 => Value::I32(scaled_raw(x, scale, i32::MAX).unwrap_or(i32::MIN)),
            Resolution::Float => Value::F32(x as f32),
        }
    }

    /// The physical value: the minimum integer decodes to NaN, others to `raw * scale`;
    /// a float is returned as is.
    pub fn decode(self, class: ScaleClass) -> f64 {
        let scale = class.scale(self.resolution());
        match self {
            Value::I8(i8::MIN) | Value::I16(i16::MIN) | Value::I32(i32::MIN) => f64::NAN,
            Value::I8(v) => f64::from(v) * scale,
            Value::I16(v) => f64::from(v) * scale,
            Value::I32(v) => f64::from(v) * scale,
            Value::F32(v) => f64::from(v),
        }
    }

    /// A plain integer (mode, fault, flags) at `res`, clamped to ±max of the type so it
    /// can never turn into the "unset" minimum by accident.
    pub fn encode_int(x: i32, res: Resolution) -> Value {
        match res {
            Resolution::Int8 => Value::I8(x.clamp(i32::from(i8::MAX).saturating_neg(), i8::MAX.into()) as i8),
            Resolution::Int16 => Value::I16(x.clamp(i32::from(i16::MAX).saturating_neg(), i16::MAX.into()) as i16),
            Resolution::Int32 => Value::I32(x.max(-i32::MAX)),
            Resolution::Float => Value::F32(x as f32),
        }
    }

    /// The raw integer, for integer registers. `None` for the "unset" minimum and for a
    /// float that is NaN, not integral or outside the i32 range.
    pub fn as_i32(self) -> Option<i32> {
        match self {
            Value::I8(i8::MIN) | Value::I16(i16::MIN) | Value::I32(i32::MIN) => None,
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v),
            Value::F32(v) => {
                let v = f64::from(v);
                let in_range = v >= f64::from(i32::MIN) && v <= f64::from(i32::MAX);
                if in_range && f64::from(v as i32) == v {
                    Some(v as i32)
                } else {
                    None
                }
            }
        }
    }

    /// Which resolution this value travels at.
    pub const fn resolution(self) -> Resolution {
        match self {
            Value::I8(_) => Resolution::Int8,
            Value::I16(_) => Resolution::Int16,
            Value::I32(_) => Resolution::Int32,
            Value::F32(_) => Resolution::Float,
        }
    }

    /// Bytes on the wire.
    pub const fn size(self) -> usize {
        self.resolution().size()
    }

    /// Little-endian wire bytes; only the first [`Value::size`] are meaningful.
    pub fn to_le_bytes(self) -> [u8; 4] {
        match self {
            Value::I8(v) => [v.to_le_bytes()[0], 0, 0, 0],
            Value::I16(v) => {
                let b = v.to_le_bytes();
                [b[0], b[1], 0, 0]
            }
            Value::I32(v) => v.to_le_bytes(),
            Value::F32(v) => v.to_le_bytes(),
        }
    }

    /// Read one value of resolution `res` from the start of `bytes` (`None` if too short).
    pub fn from_le_bytes(res: Resolution, bytes: &[u8]) -> Option<Value> {
        match res {
            Resolution::Int8 => bytes.first().map(|&b| Value::I8(i8::from_le_bytes([b]))),
            Resolution::Int16 => match bytes {
                [a, b, ..] => Some(Value::I16(i16::from_le_bytes([*a, *b]))),
                _ => None,
            },
            Resolution::Int32 => match bytes {
                [a, b, c, d, ..] => Some(Value::I32(i32::from_le_bytes([*a, *b, *c, *d]))),
                _ => None,
            },
            Resolution::Float => match bytes {
                [a, b, c, d, ..] => Some(Value::F32(f32::from_le_bytes([*a, *b, *c, *d]))),
                _ => None,
            },
        }
    }
}
