//! Integer registers in replies are read as the moteus firmware and clients read them: a
//! float is truncated toward zero (Python's `int(x)`), and a value the register cannot hold
//! is absent and counted — never wrapped, never a fraction.

use proptest::prelude::*;
use rtloop_proto::host::{decode_reply, read_int_register, IntReading, ServoState};
use rtloop_proto::register::{integer_range, reg, ALL};
use rtloop_proto::{FrameWriter, Resolution, Value};

/// A reply of one subframe per `(start, values)`, decoded.
fn decoded_many(subframes: &[(u16, &[Value])]) -> ServoState {
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    for (start, values) in subframes {
        w.reply_registers(*start, values).unwrap();
    }
    let mut s = ServoState::default();
    decode_reply(w.as_slice(), &mut s).unwrap();
    s
}

/// A reply of `values` starting at `start`, decoded.
fn decoded(start: u16, values: &[Value]) -> ServoState {
    decoded_many(&[(start, values)])
}

#[test]
fn floats_in_integer_registers_are_truncated_toward_zero() {
    let s = decoded(reg::MODE, &[Value::F32(10.7), Value::F32(0.25)]);
    assert_eq!(s.mode, Some(10));
    assert_eq!(s.position, 0.25);
    assert_eq!(s.invalid_integers, 0);
    let s = decoded(reg::TRAJECTORY_COMPLETE, &[Value::F32(0.5), Value::F32(2.9)]);
    assert_eq!(s.trajectory_complete, Some(false), "int(0.5) is 0");
    assert_eq!(s.home_state, Some(2));
    let s = decoded(reg::FAULT, &[Value::F32(38.9)]);
    assert_eq!(s.fault, Some(38));
    let s = decoded(reg::MODE, &[Value::F32(-0.9)]);
    assert_eq!(s.mode, Some(0), "int(-0.9) is 0");
    // Identity registers come back through the extras, truncated too.
    let s = decoded(reg::MODEL_NUMBER, &[Value::F32(4.75), Value::F32(-3.5)]);
    assert_eq!(s.get(reg::MODEL_NUMBER), Some(4.0));
    assert_eq!(s.get(reg::FIRMWARE_VERSION), Some(-3.0));
}

#[test]
fn values_an_integer_register_cannot_hold_are_absent_and_counted() {
    for bad in [Value::F32(-7.246), Value::F32(300.0), Value::F32(f32::NAN), Value::F32(f32::INFINITY), Value::I8(-7)] {
        let s = decoded(reg::MODE, &[bad]);
        assert_eq!(s.mode, None, "{bad:?}");
        assert_eq!(s.invalid_integers, 1, "{bad:?}");
    }
    let s = decoded_many(&[(reg::VOLTAGE, &[Value::I8(48), Value::I8(25)]), (reg::FAULT, &[Value::F32(1e10)])]);
    assert_eq!((s.voltage, s.temperature), (24.0, 25.0));
    assert_eq!(s.fault, None);
    assert_eq!(s.invalid_integers, 1);
    let s = decoded(reg::MILLISECOND_COUNTER, &[Value::F32(f32::NEG_INFINITY)]);
    assert_eq!(s.get(reg::MILLISECOND_COUNTER), None);
    assert_eq!(s.invalid_integers, 1);
    // The "unset" minimum is no value, not an invalid one.
    let s = decoded(reg::MODE, &[Value::I8(i8::MIN)]);
    assert_eq!((s.mode, s.invalid_integers), (None, 0));
}

#[test]
fn registers_of_unknown_meaning_keep_what_was_sent() {
    // 0x010 is not in rtloop's map: a float reply there may well be a real float.
    let s = decoded(0x010, &[Value::F32(1.5)]);
    assert_eq!(s.get(0x010), Some(1.5));
    assert_eq!(s.invalid_integers, 0);
    assert_eq!(integer_range(0x010), None);
}

proptest! {
    #[test]
    fn every_integer_register_reads_any_float_like_python_int(r in proptest::sample::select(&ALL[..]), f in any::<f32>()) {
        let Some((lo, hi)) = integer_range(r) else { return Ok(()) };
        let x = f64::from(f);
        let expected = if x.is_finite() && x.trunc() >= f64::from(lo) && x.trunc() <= f64::from(hi) {
            IntReading::Int(x.trunc() as i32)
        } else {
            IntReading::Invalid
        };
        prop_assert_eq!(read_int_register(r, Value::F32(f)), expected);
    }
}

#[test]
fn integer_registers_written_at_float_resolution_are_truncated_like_python_int() {
    use rtloop_proto::host::encode_register;
    assert_eq!(encode_register(reg::COMMAND_IGNORE_POSITION_BOUNDS, 0.7, Resolution::Float), Value::F32(0.0));
    assert_eq!(encode_register(reg::COMMAND_IGNORE_POSITION_BOUNDS, -1.81, Resolution::Float), Value::F32(-1.0));
    let zero = encode_register(reg::COMMAND_IGNORE_POSITION_BOUNDS, -0.0, Resolution::Float);
    assert_eq!(zero.to_le_bytes(), [0, 0, 0, 0], "int(-0.0) is 0, a positive zero");
    assert_eq!(encode_register(reg::COMMAND_IGNORE_POSITION_BOUNDS, 2.9, Resolution::Int8), Value::I8(2));
    // Scaled registers keep their fraction; registers of unknown meaning are sent as given.
    assert_eq!(encode_register(reg::COMMAND_POSITION, 0.7, Resolution::Float), Value::F32(0.7));
    assert_eq!(encode_register(0x010, 0.7, Resolution::Float), Value::F32(0.7));
}
