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

/// How a register's value is carried on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resolution {
    /// 1 byte, scaled.
    Int8,
    /// 2 bytes, scaled.
    Int16,
    /// 4 bytes, scaled.
    Int32,
    /// IEEE-754 binary32, unscaled.
    Float,
}

/// What kind of quantity a register holds; selects the scale per least-significant bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScaleClass {
    /// Revolutions.
    Position,
    /// Revolutions per second.
    Velocity,
    /// Revolutions per second squared.
    Acceleration,
    /// Newton-metres.
    Torque,
    /// Amperes.
    Current,
    /// Volts.
    Voltage,
    /// Degrees Celsius.
    Temperature,
    /// Seconds.
    Time,
    /// Watts.
    Power,
    /// kp/kd scale, PWM, ilimit scale: ±1 spread over the integer range.
    Ratio,
    /// Mode, fault and plain integers: scale 1.
    Int,
}

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

impl Resolution {
    /// The name the moteus clients use for it: `int8`, `int16`, `int32` or `float`.
    pub const fn name(self) -> &'static str {
        match self {
            Resolution::Int8 => "int8",
            Resolution::Int16 => "int16",
            Resolution::Int32 => "int32",
            Resolution::Float => "float",
        }
    }

    /// Bytes one value of this resolution occupies on the wire.
    pub const fn size(self) -> usize {
        match self {
            Resolution::Int8 => 1,
            Resolution::Int16 => 2,
            Resolution::Int32 | Resolution::Float => 4,
        }
    }

    /// The 2-bit type code that sits in bits 2..3 of a register opcode
    /// (int8 = 0, int16 = 1, int32 = 2, float = 3).
    pub const fn type_code(self) -> u8 {
        match self {
            Resolution::Int8 => 0,
            Resolution::Int16 => 1,
            Resolution::Int32 => 2,
            Resolution::Float => 3,
        }
    }

    /// The inverse of [`Resolution::type_code`]; only the low two bits are looked at.
    pub const fn from_type_code(code: u8) -> Resolution {
        match code & 0x03 {
            0 => Resolution::Int8,
            1 => Resolution::Int16,
            2 => Resolution::Int32,
            _ => Resolution::Float,
        }
    }

    /// The largest raw integer a scaled value may be clamped to (`None` for Float).
    /// The minimum integer is never a clamp target: it means "unset".
    pub const fn int_max(self) -> Option<i32> {
        match self {
            Resolution::Int8 => Some(i8::MAX as i32),
            Resolution::Int16 => Some(i16::MAX as i32),
            Resolution::Int32 => Some(i32::MAX),
            Resolution::Float => None,
        }
    }
}

impl ScaleClass {
    /// The largest magnitude a value of this class keeps at `res`: an integer resolution
    /// clamps at its largest integer times the scale (int16 positions end at ±3.2767 rev),
    /// a float at the largest f32.
    pub fn carried_max(self, res: Resolution) -> f64 {
        match res.int_max() {
            Some(max) => self.scale(res) * f64::from(max),
            None => f64::from(f32::MAX),
        }
    }

    /// Physical units per least-significant bit at `res` (Float → 1.0: floats travel
    /// unscaled). The literals are those of the moteus clients so that truncation agrees.
    pub fn scale(self, res: Resolution) -> f64 {
        let (i8s, i16s, i32s) = match self {
            ScaleClass::Position => (0.01, 0.0001, 0.00001),
            ScaleClass::Velocity => (0.1, 0.00025, 0.00001),
            ScaleClass::Acceleration => (0.05, 0.001, 0.00001),
            ScaleClass::Torque => (0.5, 0.01, 0.001),
            ScaleClass::Current => (1.0, 0.1, 0.001),
            ScaleClass::Voltage => (0.5, 0.1, 0.001),
            ScaleClass::Temperature => (1.0, 0.1, 0.001),
            ScaleClass::Time => (0.01, 0.001, 0.000001),
            ScaleClass::Power => (10.0, 0.05, 0.0001),
            ScaleClass::Ratio => (1.0 / 127.0, 1.0 / 32767.0, 1.0 / 2147483647.0),
            ScaleClass::Int => (1.0, 1.0, 1.0),
        };
        match res {
            Resolution::Int8 => i8s,
            Resolution::Int16 => i16s,
            Resolution::Int32 => i32s,
            Resolution::Float => 1.0,
        }
    }
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
    #[inline]
    pub fn encode(x: f64, class: ScaleClass, res: Resolution) -> Value {
        // The scale is looked up only for the integer resolutions: a float travels unscaled,
        // and this is the hot path of every command.
        match res {
            Resolution::Float => Value::F32(x as f32),
            Resolution::Int8 => Value::I8(
                scaled_raw(x, class.scale(res), i8::MAX.into()).and_then(|r| i8::try_from(r).ok()).unwrap_or(i8::MIN),
            ),
            Resolution::Int16 => Value::I16(
                scaled_raw(x, class.scale(res), i16::MAX.into())
                    .and_then(|r| i16::try_from(r).ok())
                    .unwrap_or(i16::MIN),
            ),
            Resolution::Int32 => Value::I32(scaled_raw(x, class.scale(res), i32::MAX).unwrap_or(i32::MIN)),
        }
    }

    /// The physical value: the minimum integer decodes to NaN, others to `raw * scale`;
    /// a float is returned as is.
    pub fn decode(self, class: ScaleClass) -> f64 {
        match self {
            Value::I8(i8::MIN) | Value::I16(i16::MIN) | Value::I32(i32::MIN) => f64::NAN,
            Value::I8(v) => f64::from(v) * class.scale(Resolution::Int8),
            Value::I16(v) => f64::from(v) * class.scale(Resolution::Int16),
            Value::I32(v) => f64::from(v) * class.scale(Resolution::Int32),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_toward_zero_and_clamps_to_plus_minus_max() {
        assert_eq!(Value::encode(0.5, ScaleClass::Position, Resolution::Int8), Value::I8(50));
        assert_eq!(Value::encode(-0.019, ScaleClass::Position, Resolution::Int8), Value::I8(-1));
        assert_eq!(Value::encode(2.0, ScaleClass::Position, Resolution::Int8), Value::I8(127));
        assert_eq!(Value::encode(-2.0, ScaleClass::Position, Resolution::Int8), Value::I8(-127));
        assert_eq!(Value::encode(1e300, ScaleClass::Ratio, Resolution::Int32), Value::I32(i32::MAX));
        assert_eq!(Value::encode(-1e300, ScaleClass::Ratio, Resolution::Int32), Value::I32(-i32::MAX));
        assert_eq!(Value::encode(1.0, ScaleClass::Ratio, Resolution::Int16), Value::I16(32767));
    }

    #[test]
    fn non_finite_is_the_unset_minimum_and_decodes_to_nan() {
        for x in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(Value::encode(x, ScaleClass::Torque, Resolution::Int8), Value::I8(i8::MIN));
            assert_eq!(Value::encode(x, ScaleClass::Torque, Resolution::Int16), Value::I16(i16::MIN));
            assert_eq!(Value::encode(x, ScaleClass::Torque, Resolution::Int32), Value::I32(i32::MIN));
        }
        assert!(Value::I16(i16::MIN).decode(ScaleClass::Voltage).is_nan());
        assert_eq!(Value::I8(48).decode(ScaleClass::Voltage), 24.0);
        assert_eq!(Value::encode_int(-1000, Resolution::Int8), Value::I8(-127));
        assert_eq!(Value::encode_int(i32::MIN, Resolution::Int32), Value::I32(-i32::MAX));
        assert_eq!(Value::I8(i8::MIN).as_i32(), None);
        assert_eq!(Value::F32(10.0).as_i32(), Some(10));
        assert_eq!(Value::F32(10.5).as_i32(), None);
        assert_eq!(Value::F32(3e9).as_i32(), None);
    }
}
