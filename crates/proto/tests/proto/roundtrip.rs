//! Property tests: values survive encode → decode within their resolution, host commands
//! and queries parse back to exactly what was asked for, and a query served by a fake
//! servo decodes back to the servo's values.

use std::collections::BTreeMap;

use proptest::prelude::*;
use rtloop_proto::host::{
    decode_reply, encode_position, encode_query, PositionCommand, PositionResolution, QueryFormat, ServoState,
};
use rtloop_proto::register::{class_of, reg};
use rtloop_proto::servo::{serve, RegisterServer, ERROR_UNKNOWN_REGISTER};
use rtloop_proto::subframe::{subframes, DecodeError, Subframe};
use rtloop_proto::{EncodeError, FrameWriter, Resolution, ScaleClass, Value};

const CLASSES: [ScaleClass; 11] = [
    ScaleClass::Position,
    ScaleClass::Velocity,
    ScaleClass::Acceleration,
    ScaleClass::Torque,
    ScaleClass::Current,
    ScaleClass::Voltage,
    ScaleClass::Temperature,
    ScaleClass::Time,
    ScaleClass::Power,
    ScaleClass::Ratio,
    ScaleClass::Int,
];
const RESOLUTIONS: [Resolution; 4] = [Resolution::Int8, Resolution::Int16, Resolution::Int32, Resolution::Float];

fn class() -> impl Strategy<Value = ScaleClass> {
    proptest::sample::select(&CLASSES[..])
}

fn resolution() -> impl Strategy<Value = Resolution> {
    proptest::sample::select(&RESOLUTIONS[..])
}

/// Bit-exact comparison (so that NaN floats compare equal to themselves).
fn same(a: Value, b: Value) -> bool {
    a.resolution() == b.resolution() && a.to_le_bytes() == b.to_le_bytes()
}

proptest! {
    #[test]
    fn value_round_trips_within_resolution(
        class in class(),
        res in resolution(),
        // Mostly the interesting range around ±max·scale, sometimes anything at all.
        unit in -1.5f64..1.5,
        any in proptest::num::f64::ANY,
        pick_any in proptest::bool::weighted(0.2),
    ) {
        let scale = class.scale(res);
        let max = res.int_max().map_or(f64::from(f32::MAX), f64::from);
        let x = if pick_any { any } else { unit * max * scale };
        let v = Value::encode(x, class, res);
        prop_assert_eq!(v.resolution(), res);
        let d = v.decode(class);
        if x.is_nan() {
            prop_assert!(d.is_nan());
        } else if res == Resolution::Float {
            prop_assert_eq!(d, f64::from(x as f32));
        } else if !x.is_finite() {
            prop_assert!(d.is_nan(), "non-finite must be the unset minimum, got {:?}", v);
        } else if (x / scale).abs() < max {
            prop_assert!((x - d).abs() <= scale * (1.0 + 1e-9), "x={} d={} scale={}", x, d, scale);
            // Truncation toward zero never grows the magnitude.
            prop_assert!(d.abs() <= x.abs() * (1.0 + 1e-12) + 1e-300);
        } else {
            prop_assert_eq!(d, max.copysign(x) * scale, "clamped to ±max·scale");
        }
    }

    #[test]
    fn value_wire_bytes_round_trip(class in class(), res in resolution(), x in proptest::num::f64::ANY) {
        let v = Value::encode(x, class, res);
        let bytes = v.to_le_bytes();
        let back = Value::from_le_bytes(res, &bytes[..v.size()]).unwrap();
        prop_assert!(same(v, back));
        prop_assert!(Value::from_le_bytes(res, &bytes[..v.size() - 1]).is_none());
    }
}

fn opt_value() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![
        3 => Just(None),
        3 => (-10.0f64..10.0).prop_map(Some),
        1 => Just(Some(f64::NAN)),
        1 => proptest::num::f64::ANY.prop_map(Some),
    ]
}

fn position_command() -> impl Strategy<Value = (PositionCommand, PositionResolution)> {
    (proptest::collection::vec(opt_value(), 14), proptest::collection::vec(resolution(), 14)).prop_map(|(v, r)| {
        let cmd = PositionCommand::from_registers(v.try_into().unwrap());
        let res = PositionResolution::from_registers(r.try_into().unwrap());
        (cmd, res)
    })
}

fn query_format() -> impl Strategy<Value = QueryFormat> {
    (
        proptest::collection::vec(proptest::option::weighted(0.5, resolution()), 14),
        proptest::collection::vec((0x10u16..0x200, resolution()), 0..=8),
    )
        .prop_map(|(f, extras)| {
            let fields: [Option<Resolution>; 14] = f.try_into().unwrap();
            let mut q = QueryFormat::from_telemetry(fields);
            for (r, res) in extras {
                q.add_extra(r, res).unwrap();
            }
            q
        })
}

/// Per-register writes, per-register reads and the number of write subframes.
type Expanded = (Vec<(u16, Value)>, Vec<(u16, Resolution)>, usize);

/// Expand every register subframe into per-register entries.
fn expand(payload: &[u8]) -> Expanded {
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    let mut write_subframes = 0;
    for s in subframes(payload) {
        match s.unwrap() {
            Subframe::Write { start, count, values, .. } => {
                write_subframes += 1;
                assert_eq!(values.len(), usize::from(count));
                for (i, v) in values.iter().enumerate() {
                    writes.push((start + i as u16, v));
                }
            }
            Subframe::Read { start, res, count } => {
                for i in 0..count {
                    reads.push((start + i, res));
                }
            }
            other => panic!("unexpected subframe {other:?}"),
        }
    }
    (writes, reads, write_subframes)
}

proptest! {
    #[test]
    fn position_command_parses_back((cmd, res) in position_command(), q in proptest::option::of(query_format())) {
        let mut buf = [0u8; 64];
        let mut w = FrameWriter::new(&mut buf);
        let result = encode_position(&mut w, &cmd, &res, q.as_ref());
        // Mixed resolutions cost a header per run, so even the command alone can
        // overflow; then nothing at all is written.
        let (writes, reads, write_subframes) = expand(w.as_slice());
        let entries = cmd.entries(&res);
        let mut expected = vec![(reg::MODE, Value::I8(10))];
        let mut runs = 1;
        let mut prev: Option<(u16, Resolution)> = None;
        for &(r, x, rs) in &entries {
            if let Some(x) = x {
                expected.push((r, rtloop_proto::host::encode_register(r, x, rs)));
                if prev != Some((r.wrapping_sub(1), rs)) {
                    runs += 1;
                }
                prev = Some((r, rs));
            }
        }
        prop_assert!(writes.len() <= expected.len());
        for (a, b) in writes.iter().zip(&expected) {
            prop_assert_eq!(a.0, b.0);
            prop_assert!(same(a.1, b.1), "{:?} vs {:?}", a, b);
        }
        match (result, q) {
            (Ok(()), q) => {
                prop_assert_eq!(writes.len(), expected.len());
                prop_assert_eq!(write_subframes, runs);
                let expected_reads = q.map(|q| q.reads().as_slice().to_vec()).unwrap_or_default();
                prop_assert_eq!(reads, expected_reads);
            }
            (Err(EncodeError::Overflow { needed, available }), _) => {
                prop_assert!(needed > available);
                prop_assert_eq!(w.len(), 0, "a command is all or nothing");
            }
            (Err(e), _) => prop_assert!(false, "unexpected error {:?}", e),
        }
    }

    #[test]
    fn query_parses_back_ascending(q in query_format()) {
        let mut buf = [0u8; 64];
        let mut w = FrameWriter::new(&mut buf);
        match encode_query(&mut w, &q) {
            Ok(()) => {
                let (_, reads, _) = expand(w.as_slice());
                let expected = q.reads();
                prop_assert_eq!(reads.as_slice(), expected.as_slice());
                prop_assert!(reads.windows(2).all(|p| p[0].0 < p[1].0));
            }
            Err(EncodeError::Overflow { needed, available }) => {
                prop_assert!(needed > available);
                prop_assert_eq!(w.len(), 0, "a query is all or nothing");
                // It really does not fit: a register costs at most 3 bytes (opcode + a
                // start of up to 2 bytes; a long form's count byte covers ≥ 4 registers).
                prop_assert!(3 * q.reads().as_slice().len() > 64);
            }
            Err(e) => prop_assert!(false, "unexpected error {:?}", e),
        }
    }
}

/// A servo whose registers hold fixed physical values; registers ≥ 0x180 are unknown.
#[derive(Debug)]
struct FakeServo {
    regs: BTreeMap<u16, f64>,
    writes: Vec<(u16, Value)>,
    frames: usize,
}

impl RegisterServer for FakeServo {
    fn write(&mut self, r: u16, value: Value) -> Result<(), u32> {
        self.writes.push((r, value));
        if r >= 0x180 {
            Err(ERROR_UNKNOWN_REGISTER)
        } else {
            Ok(())
        }
    }
    fn read(&mut self, r: u16, res: Resolution) -> Result<Value, u32> {
        match self.regs.get(&r) {
            Some(&x) if r < 0x180 => Ok(Value::encode(x, class_of(r), res)),
            _ => Err(ERROR_UNKNOWN_REGISTER),
        }
    }
    fn end_of_frame(&mut self) {
        self.frames += 1;
    }
}

fn fake_servo() -> impl Strategy<Value = FakeServo> {
    (
        0u8..=15,
        proptest::collection::vec(-50.0f64..50.0, 10),
        proptest::bool::ANY,
        0u8..=3,
        0u8..=103,
        proptest::collection::vec(-1.0e3f64..1.0e3, 0x200),
    )
        .prop_map(|(mode, phys, traj, home, fault, other)| {
            let mut regs = BTreeMap::new();
            for (r, x) in (0u16..0x200).zip(other) {
                regs.insert(r, x);
            }
            regs.insert(reg::MODE, f64::from(mode));
            for (r, x) in [
                reg::POSITION,
                reg::VELOCITY,
                reg::TORQUE,
                reg::Q_CURRENT,
                reg::D_CURRENT,
                reg::ABS_POSITION,
                reg::POWER,
                reg::MOTOR_TEMPERATURE,
                reg::VOLTAGE,
                reg::TEMPERATURE,
            ]
            .into_iter()
            .zip(phys)
            {
                regs.insert(r, x);
            }
            regs.insert(reg::TRAJECTORY_COMPLETE, if traj { 1.0 } else { 0.0 });
            regs.insert(reg::HOME_STATE, f64::from(home));
            regs.insert(reg::FAULT, f64::from(fault));
            FakeServo { regs, writes: Vec::new(), frames: 0 }
        })
}

fn assert_within(x: f64, got: f64, r: u16, res: Resolution) {
    let class = class_of(r);
    if rtloop_proto::register::integer_range(r).is_some() {
        // Integer registers are read as moteus reads them: truncated, invalid → absent.
        let expected = match rtloop_proto::host::read_int_register(r, Value::encode(x, class, res)) {
            rtloop_proto::host::IntReading::Int(i) => f64::from(i),
            _ => f64::NAN,
        };
        assert!(got == expected || (got.is_nan() && expected.is_nan()), "reg {r:#x}: {got} != {expected}");
        return;
    }
    let expected = Value::encode(x, class, res).decode(class);
    assert!(got == expected || (got.is_nan() && expected.is_nan()), "reg {r:#x}: {got} != {expected}");
    let scale = class.scale(res);
    if let Some(max) = res.int_max() {
        if (x / scale).abs() < f64::from(max) {
            assert!((x - got).abs() <= scale * (1.0 + 1e-9), "reg {r:#x}: {x} vs {got}");
        }
    } else {
        assert_eq!(got, f64::from(x as f32));
    }
}

proptest! {
    #[test]
    fn served_query_decodes_to_the_servo_values(q in query_format(), mut servo in fake_servo()) {
        let mut req_buf = [0u8; 64];
        let mut req = FrameWriter::new(&mut req_buf);
        prop_assume!(encode_query(&mut req, &q).is_ok());
        let mut reply_buf = [0u8; 64];
        let mut reply = FrameWriter::new(&mut reply_buf);
        let served = serve(req.as_slice(), &mut servo, &mut reply);
        prop_assert_eq!(servo.frames, 1);
        prop_assert!(servo.writes.is_empty());
        let mut state = ServoState::default();
        // A reply never holds a malformed subframe, even when the request asked for more
        // than fits.
        decode_reply(reply.as_slice(), &mut state).unwrap();
        match served {
            Ok(n) => prop_assert_eq!(n, reply.len()),
            Err(DecodeError::ReplyTooLong { .. }) => return Ok(()),
            Err(e) => prop_assert!(false, "unexpected {:?}", e),
        }
        let reads = q.reads();
        let unknown = reads.as_slice().iter().filter(|e| e.0 >= 0x180).count();
        prop_assert_eq!(usize::from(state.errors), unknown);
        for &(r, res) in reads.as_slice() {
            if r >= 0x180 {
                prop_assert_eq!(state.get(r), None);
                continue;
            }
            let x = servo.regs[&r];
            match r {
                reg::MODE | reg::HOME_STATE | reg::FAULT => prop_assert_eq!(state.get(r), Some(x)),
                reg::TRAJECTORY_COMPLETE => prop_assert_eq!(state.trajectory_complete, Some(x != 0.0)),
                _ => assert_within(x, state.get(r).unwrap_or(f64::NAN), r, res),
            }
        }
        let extra_regs: Vec<u16> = state.extras().iter().map(|e| e.0).collect();
        let expected: Vec<u16> = reads.as_slice().iter().map(|e| e.0).filter(|&r| (0x10..0x180).contains(&r)).collect();
        prop_assert_eq!(extra_regs, expected);
    }

    #[test]
    fn served_writes_reach_the_server((cmd, res) in position_command(), mut servo in fake_servo()) {
        let mut req_buf = [0u8; 64];
        let mut req = FrameWriter::new(&mut req_buf);
        // One resolution for every field: then the command always fits (at most 62 bytes).
        let res = PositionResolution::all(res.position);
        encode_position(&mut req, &cmd, &res, None).unwrap();
        let mut reply_buf = [0u8; 64];
        let mut reply = FrameWriter::new(&mut reply_buf);
        prop_assert_eq!(serve(req.as_slice(), &mut servo, &mut reply), Ok(0));
        let (writes, _, _) = expand(req.as_slice());
        prop_assert_eq!(servo.writes.len(), writes.len());
        for (a, b) in servo.writes.iter().zip(&writes) {
            prop_assert_eq!(a.0, b.0);
            prop_assert!(same(a.1, b.1));
        }
    }
}
