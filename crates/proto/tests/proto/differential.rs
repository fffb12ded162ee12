//! Differential tests against the official `moteus-protocol` crate 0.5.5: what we encode
//! means what it encodes (the same bytes for commands; for queries the same register reads,
//! since the two group far-apart extras differently — byte for byte, rtloop follows the
//! Python client 1.1.1, checked by `crates/rtloop/tests/rtloop/python_encoder.rs`), what it encodes parses the same in our parser, and it reads the
//! replies our `serve` builds to the same values.
//!
//! The official Rust crate scales in f32 (`value as f32 / scale as f32`), while the Python
//! client — our reference — divides in f64. On values that are not exactly representable
//! the two can truncate to different integers, so the integer cases below use values half a
//! step away from any boundary (`(k ± 0.5) · scale` with a modest `k`), where f32 and f64
//! rounding cannot disagree. Floats are compared for f32 values, which both send unchanged.

use moteus_protocol as official;
use official::command::{BrakeCommand, PositionFormat, StopCommand};
use proptest::prelude::*;
use rtloop_proto::host::{
    decode_reply, encode_brake, encode_position, encode_query, encode_stop, read_int_register, IntReading,
    PositionCommand, PositionResolution, QueryFormat, ServoState,
};
use rtloop_proto::register::{class_of, integer_range, reg};
use rtloop_proto::servo::{serve, RegisterServer, ERROR_UNKNOWN_REGISTER};
use rtloop_proto::subframe::{subframes, Subframe};
use rtloop_proto::{FrameWriter, Resolution, Value};

fn theirs(res: Resolution) -> official::Resolution {
    match res {
        Resolution::Int8 => official::Resolution::Int8,
        Resolution::Int16 => official::Resolution::Int16,
        Resolution::Int32 => official::Resolution::Int32,
        Resolution::Float => official::Resolution::Float,
    }
}

fn their_res(res: Option<Resolution>) -> official::Resolution {
    res.map_or(official::Resolution::Ignore, theirs)
}

fn ours(f: impl FnOnce(&mut FrameWriter) -> Result<(), rtloop_proto::EncodeError>) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    f(&mut w).unwrap();
    w.as_slice().to_vec()
}

fn their_query(q: &QueryFormat) -> official::query::QueryFormat {
    let mut t = official::query::QueryFormat::default();
    t.mode = their_res(q.mode);
    t.position = their_res(q.position);
    t.velocity = their_res(q.velocity);
    t.torque = their_res(q.torque);
    t.q_current = their_res(q.q_current);
    t.d_current = their_res(q.d_current);
    t.abs_position = their_res(q.abs_position);
    t.power = their_res(q.power);
    t.motor_temperature = their_res(q.motor_temperature);
    t.trajectory_complete = their_res(q.trajectory_complete);
    t.home_state = their_res(q.home_state);
    t.voltage = their_res(q.voltage);
    t.temperature = their_res(q.temperature);
    t.fault = their_res(q.fault);
    for &(r, res) in q.extras() {
        t.add_extra(r, theirs(res));
    }
    t
}

#[test]
fn fixed_commands_match() {
    let mut f = official::CanFdFrame::new();
    official::query::QueryFormat::default().serialize(&mut f);
    assert_eq!(f.payload(), ours(|w| encode_query(w, &QueryFormat::default())).as_slice());

    let mut f = official::CanFdFrame::new();
    StopCommand::serialize(&mut f);
    assert_eq!(f.payload(), ours(|w| encode_stop(w, None)).as_slice());

    let mut f = official::CanFdFrame::new();
    BrakeCommand::serialize(&mut f);
    assert_eq!(f.payload(), ours(|w| encode_brake(w, None)).as_slice());

    // The spec vector: position 0.5, velocity 0, default query.
    let mut f = official::CanFdFrame::new();
    official::command::PositionCommand::new().position(0.5).velocity(0.0).serialize(&mut f, &PositionFormat::default());
    official::query::QueryFormat::default().serialize(&mut f);
    let cmd = PositionCommand { position: Some(0.5), velocity: Some(0.0), ..Default::default() };
    let mine = ours(|w| encode_position(w, &cmd, &PositionResolution::default(), Some(&QueryFormat::default())));
    assert_eq!(f.payload(), mine.as_slice());
}

/// What a request payload asks for: every register read, in order, with its resolution.
/// Two encoders may group the same reads into different subframes (see
/// `extras_far_apart_are_grouped_differently_but_read_the_same`); this is what must agree.
fn reads(payload: &[u8]) -> Vec<(u16, Resolution)> {
    let mut out = Vec::new();
    for s in subframes(payload) {
        match s.unwrap() {
            Subframe::Read { start, res, count } => out.extend((start..start + count).map(|r| (r, res))),
            Subframe::Nop => {}
            other => panic!("a query holds only reads, not {other:?}"),
        }
    }
    out
}

#[test]
fn extras_far_apart_are_grouped_differently_but_read_the_same() {
    // The official crate groups extras in spans of 64 registers from the first, so 0x5b
    // starts a new span: `11 1b 15 5a 15 5b`. The Python client (and rtloop) group every
    // extra from the lowest to the highest in one run: `11 1b 16 5a`. Same reads.
    let mut q = QueryFormat::empty();
    for (r, res) in [(0x1b, Resolution::Int8), (0x5a, Resolution::Int16), (0x5b, Resolution::Int16)] {
        q.add_extra(r, res).unwrap();
    }
    let mut f = official::CanFdFrame::new();
    their_query(&q).serialize(&mut f);
    assert_eq!(f.payload(), [0x11, 0x1b, 0x15, 0x5a, 0x15, 0x5b]);
    let mine = ours(|w| encode_query(w, &q));
    assert_eq!(mine, [0x11, 0x1b, 0x16, 0x5a]);
    assert_eq!(reads(f.payload()), reads(&mine));
    assert_eq!(reads(&mine), [(0x1b, Resolution::Int8), (0x5a, Resolution::Int16), (0x5b, Resolution::Int16)]);
}

const RESOLUTIONS: [Resolution; 4] = [Resolution::Int8, Resolution::Int16, Resolution::Int32, Resolution::Float];

/// A value both implementations encode identically at `res` for register `r`.
fn safe_value(r: u16, res: Resolution) -> BoxedStrategy<f64> {
    let class = class_of(r);
    let scale = class.scale(res);
    match res.int_max() {
        // Integer registers (0x02D): the official crate sends `value as i32` there (as an
        // f32 at Float resolution), with no NaN → minimum mapping, so only plain
        // integers are comparable.
        _ if class == rtloop_proto::ScaleClass::Int => (-100_000i64..100_000).prop_map(|k| k as f64).boxed(),
        None => proptest::num::f32::NORMAL.prop_map(f64::from).boxed(),
        Some(max) => {
            let k_max = i64::from(max).min(100_000);
            prop_oneof![
                8 => (-k_max..k_max).prop_map(move |k| {
                    // Half a step inside, rounded to f32 so both sides start from one number.
                    let half = if k < 0 { -0.5 } else { 0.5 };
                    f64::from(((k as f64 + half) * scale) as f32)
                }),
                1 => Just(f64::NAN),
                1 => Just(f64::INFINITY),
                1 => Just(-1.0e30),
            ]
            .boxed()
        }
    }
}

fn position_case() -> impl Strategy<Value = (PositionCommand, PositionResolution)> {
    let fields: Vec<_> = (0x020u16..=0x02D)
        .map(|r| {
            proptest::sample::select(&RESOLUTIONS[..])
                .prop_flat_map(move |res| (Just(res), proptest::option::weighted(0.6, safe_value(r, res))))
        })
        .collect();
    fields.prop_map(|f| {
        let v: Vec<Option<f64>> = f.iter().map(|x| x.1).collect();
        let r: Vec<Resolution> = f.iter().map(|x| x.0).collect();
        (
            PositionCommand::from_registers(v.try_into().unwrap()),
            PositionResolution::from_registers(r.try_into().unwrap()),
        )
    })
}

fn their_position(cmd: &PositionCommand, res: &PositionResolution) -> official::CanFdFrame {
    let f32o = |x: Option<f64>| x.map(|x| x as f32);
    let mut c = official::command::PositionCommand::new();
    c.position = f32o(cmd.position);
    c.velocity = f32o(cmd.velocity);
    c.feedforward_torque = f32o(cmd.feedforward_torque);
    c.kp_scale = f32o(cmd.kp_scale);
    c.kd_scale = f32o(cmd.kd_scale);
    c.maximum_torque = f32o(cmd.maximum_torque);
    c.stop_position = f32o(cmd.stop_position);
    c.watchdog_timeout = f32o(cmd.watchdog_timeout);
    c.velocity_limit = f32o(cmd.velocity_limit);
    c.accel_limit = f32o(cmd.accel_limit);
    c.fixed_voltage_override = f32o(cmd.fixed_voltage_override);
    c.ilimit_scale = f32o(cmd.ilimit_scale);
    c.fixed_current_override = f32o(cmd.fixed_current_override);
    c.ignore_position_bounds = f32o(cmd.ignore_position_bounds);
    let mut fmt = PositionFormat::default();
    fmt.position = theirs(res.position);
    fmt.velocity = theirs(res.velocity);
    fmt.feedforward_torque = theirs(res.feedforward_torque);
    fmt.kp_scale = theirs(res.kp_scale);
    fmt.kd_scale = theirs(res.kd_scale);
    fmt.maximum_torque = theirs(res.maximum_torque);
    fmt.stop_position = theirs(res.stop_position);
    fmt.watchdog_timeout = theirs(res.watchdog_timeout);
    fmt.velocity_limit = theirs(res.velocity_limit);
    fmt.accel_limit = theirs(res.accel_limit);
    fmt.fixed_voltage_override = theirs(res.fixed_voltage_override);
    fmt.ilimit_scale = theirs(res.ilimit_scale);
    fmt.fixed_current_override = theirs(res.fixed_current_override);
    fmt.ignore_position_bounds = theirs(res.ignore_position_bounds);
    let mut f = official::CanFdFrame::new();
    c.serialize(&mut f, &fmt);
    f
}

fn query_format() -> impl Strategy<Value = QueryFormat> {
    let res = || proptest::option::weighted(0.5, proptest::sample::select(&RESOLUTIONS[..]));
    (
        proptest::collection::vec(res(), 14),
        // Extras away from the registers the official QueryFormat names itself
        // (0x05e/0x05f GPIO, 0x072..=0x075 PWM input).
        proptest::collection::vec(
            (prop_oneof![0x010u16..0x05e, 0x100u16..0x140], proptest::sample::select(&RESOLUTIONS[..])),
            0..=4,
        ),
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

/// Registers hold physical values chosen so both sides agree (see the module comment).
#[derive(Debug)]
struct Servo {
    mode: u8,
    fault: u8,
    home: u8,
    traj: bool,
    /// k for register r: the value is (k ± 0.5)·int8 scale, which every resolution
    /// represents within one of its own steps and f32 scales without crossing a boundary.
    k: Vec<i8>,
}

impl Servo {
    fn physical(&self, r: u16, res: Resolution) -> f64 {
        match r {
            reg::MODE => f64::from(self.mode),
            reg::FAULT => f64::from(self.fault),
            reg::HOME_STATE => f64::from(self.home),
            reg::TRAJECTORY_COMPLETE => f64::from(u8::from(self.traj)),
            _ => {
                let k = f64::from(self.k[usize::from(r) % self.k.len()]);
                let class = class_of(r);
                // Half a step of the requested resolution so truncation is unambiguous.
                let scale = class.scale(res);
                let half = if k < 0.0 { -0.5 } else { 0.5 };
                f64::from(((k + half) * scale) as f32)
            }
        }
    }
}

impl RegisterServer for Servo {
    fn write(&mut self, _r: u16, _v: Value) -> Result<(), u32> {
        Err(ERROR_UNKNOWN_REGISTER)
    }
    fn read(&mut self, r: u16, res: Resolution) -> Result<Value, u32> {
        if r >= 0x130 {
            return Err(ERROR_UNKNOWN_REGISTER);
        }
        Ok(Value::encode(self.physical(r, res), class_of(r), res))
    }
}

fn servo() -> impl Strategy<Value = Servo> {
    (0u8..=15, 0u8..=100, 0u8..=2, proptest::bool::ANY, proptest::collection::vec(-100i8..=100, 37))
        .prop_map(|(mode, fault, home, traj, k)| Servo { mode, fault, home, traj, k })
}

fn close(a: f64, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || (a - f64::from(b)).abs() <= 1e-6 * a.abs().max(1.0)
}

proptest! {
    #[test]
    fn queries_match(q in query_format()) {
        let mut f = official::CanFdFrame::new();
        their_query(&q).serialize(&mut f);
        let mut buf = [0u8; 64];
        let mut w = FrameWriter::new(&mut buf);
        // Theirs silently truncates at 64 bytes; compare only what fits.
        prop_assume!(encode_query(&mut w, &q).is_ok());
        prop_assert_eq!(reads(f.payload()), reads(w.as_slice()), "theirs {:02x?} ours {:02x?}", f.payload(), w.as_slice());
        // Grouping extras like the Python client never costs bytes over theirs.
        prop_assert!(w.len() <= f.payload().len());
    }

    #[test]
    fn position_commands_match((cmd, res) in position_case()) {
        let f = their_position(&cmd, &res);
        let mut buf = [0u8; 64];
        let mut w = FrameWriter::new(&mut buf);
        prop_assume!(encode_position(&mut w, &cmd, &res, None).is_ok());
        prop_assert_eq!(f.payload(), w.as_slice(), "{:?}", cmd);

        // And their parser reads our command register by register to the same raw values.
        let mut theirs_seen = Vec::new();
        for s in official::parse_frame(w.as_slice()) {
            if let official::Subframe::Register { register, value: Some(v), .. } = s {
                theirs_seen.push((register, v));
            }
        }
        let mut ours_seen = Vec::new();
        for s in subframes(w.as_slice()) {
            if let Ok(Subframe::Write { start, values, .. }) = s {
                for (i, v) in values.iter().enumerate() {
                    ours_seen.push((start + i as u16, v));
                }
            }
        }
        prop_assert_eq!(theirs_seen.len(), ours_seen.len());
        for ((tr, tv), (or, ov)) in theirs_seen.iter().zip(&ours_seen) {
            prop_assert_eq!(tr, or);
            let same = match (*tv, *ov) {
                (official::Value::Int8(a), Value::I8(b)) => a == b,
                (official::Value::Int16(a), Value::I16(b)) => a == b,
                (official::Value::Int32(a), Value::I32(b)) => a == b,
                (official::Value::Float(a), Value::F32(b)) => a.to_bits() == b.to_bits(),
                _ => false,
            };
            prop_assert!(same, "{:?} vs {:?}", tv, ov);
        }
    }

    #[test]
    fn official_parser_reads_our_replies(q in query_format(), mut servo in servo()) {
        // Their query bytes, our servo.
        let mut request = official::CanFdFrame::new();
        their_query(&q).serialize(&mut request);
        prop_assume!(request.size < 64);
        let mut buf = [0u8; 64];
        let mut reply = FrameWriter::new(&mut buf);
        prop_assume!(serve(request.payload(), &mut servo, &mut reply).is_ok());

        let t = official::query::QueryResult::parse_data(reply.as_slice());
        let mut s = ServoState::default();
        decode_reply(reply.as_slice(), &mut s).unwrap();
        let checks = [
            (q.position, s.position, t.position),
            (q.velocity, s.velocity, t.velocity),
            (q.torque, s.torque, t.torque),
            (q.q_current, s.q_current, t.q_current),
            (q.d_current, s.d_current, t.d_current),
            (q.abs_position, s.abs_position, t.abs_position),
            (q.power, s.power, t.power),
            (q.motor_temperature, s.motor_temperature, t.motor_temperature),
            (q.voltage, s.voltage, t.voltage),
            (q.temperature, s.temperature, t.temperature),
        ];
        for (i, (asked, mine, their)) in checks.into_iter().enumerate() {
            prop_assert!(close(mine, their), "field {}: ours {} theirs {}", i, mine, their);
            prop_assert_eq!(asked.is_some(), !mine.is_nan());
        }
        if q.mode.is_some() {
            prop_assert_eq!(s.mode, Some(servo.mode));
            prop_assert_eq!(u8::from(t.mode), servo.mode);
        }
        if q.fault.is_some() {
            prop_assert_eq!(s.fault, Some(servo.fault));
            prop_assert_eq!(t.fault as u8, servo.fault);
        }
        if q.trajectory_complete.is_some() {
            prop_assert_eq!(s.trajectory_complete, Some(servo.traj));
            prop_assert_eq!(t.trajectory_complete, servo.traj);
        }
        if q.home_state.is_some() {
            prop_assert_eq!(s.home_state, Some(servo.home));
            prop_assert_eq!(u8::from(t.home_state), servo.home);
        }
        for &(r, res) in q.extras() {
            let mine = s.get(r);
            let their = t.get_extra(r);
            if r >= 0x130 {
                prop_assert_eq!(mine, None);
                continue;
            }
            let sent = Value::encode(servo.physical(r, res), class_of(r), res);
            // Integer registers are read as moteus (firmware, Python) reads them: a float is
            // truncated toward zero. The official Rust crate keeps the float as sent, so
            // compare with its value truncated.
            let integer = integer_range(r).is_some();
            let expected = match (integer, read_int_register(r, sent)) {
                (true, IntReading::Int(i)) => f64::from(i),
                (true, _) => f64::NAN,
                (false, _) => sent.decode(class_of(r)),
            };
            let their = if integer { their.map(f32::trunc) } else { their };
            prop_assert_eq!(mine, Some(expected).filter(|x| !x.is_nan()));
            // Their generic extras scale by their own, larger register map (0x010 is a PWM
            // phase there, an unknown integer here) and treat the stay-within shadows of
            // torque and the scales as plain integers; compare the registers both map alike.
            let shadow = [0x042, 0x043, 0x044, 0x045, 0x047].contains(&r);
            if rtloop_proto::register::name_of(r).is_some() && !shadow {
                prop_assert!(close(expected, their.unwrap_or(f32::NAN)), "reg {:#x}: {} vs {:?}", r, expected, their);
            }
        }
    }
}
