//! The test vectors of spec §7 (moteus Python package 1.1.1), byte for byte, plus the
//! grouping rules of the write combiner.

use rtloop_proto::frame::{ArbitrationId, CanFdFrame};
use rtloop_proto::host::{
    decode_reply, encode_brake, encode_position, encode_query, encode_reads, encode_stop, encode_writes,
    encode_zero_velocity, PositionCommand, PositionResolution, QueryFormat, ServoState,
};
use rtloop_proto::register::{reg, Mode};
use rtloop_proto::servo::{serve, RegisterServer, ERROR_UNKNOWN_REGISTER};
use rtloop_proto::subframe::{subframes, Subframe};
use rtloop_proto::{EncodeError, FrameWriter, Resolution, Value};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn build(f: impl FnOnce(&mut FrameWriter) -> Result<(), EncodeError>) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    f(&mut w).unwrap();
    w.as_slice().to_vec()
}

#[test]
fn position_with_query() {
    let cmd = PositionCommand { position: Some(0.5), velocity: Some(0.0), ..Default::default() };
    let q = QueryFormat::default();
    let data = build(|w| encode_position(w, &cmd, &PositionResolution::default(), Some(&q)));
    assert_eq!(data, hex("01000a0e200000003f0000000011001f01130d"));
    assert_eq!(ArbitrationId::command(1, true).build(), 0x8001);

    let mut frame = CanFdFrame::new(0x8001, &data).unwrap();
    frame.pad_to_dlc();
    assert_eq!(frame.payload(), hex("01000a0e200000003f0000000011001f01130d50").as_slice());
}

#[test]
fn query_only() {
    assert_eq!(build(|w| encode_query(w, &QueryFormat::default())), hex("11001f01130d"));
}

#[test]
fn stop_and_other_modes() {
    assert_eq!(build(|w| encode_stop(w, None)), hex("010000"));
    assert_eq!(ArbitrationId::command(1, false).build(), 0x0001);
    assert_eq!(build(|w| encode_zero_velocity(w, None)), hex("01000c"));
    assert_eq!(build(|w| encode_brake(w, None)), hex("01000f"));
}

#[test]
fn stop_with_query_padded_to_12() {
    let data = build(|w| encode_stop(w, Some(&QueryFormat::default())));
    assert_eq!(data, hex("01000011001f01130d"));
    let mut frame = CanFdFrame::new(ArbitrationId::command(1, true).build(), &data).unwrap();
    frame.pad_to_dlc();
    assert_eq!(frame.id, 0x8001);
    assert_eq!(frame.payload(), hex("01000011001f01130d505050").as_slice());
}

#[test]
fn reply_vector_decodes() {
    let payload = hex("2404000A00881300000000230D301900");
    assert_eq!(payload.len(), 16);
    let mut s = ServoState::default();
    decode_reply(&payload, &mut s).unwrap();
    assert_eq!(s.mode, Some(10));
    assert_eq!(s.mode_enum(), Some(Mode::Position));
    assert_eq!(s.position, 0.5);
    assert_eq!(s.velocity, 0.0);
    assert_eq!(s.torque, 0.0);
    assert_eq!(s.voltage, 24.0);
    assert_eq!(s.temperature, 25.0);
    assert_eq!(s.fault, Some(0));
    assert!(s.q_current.is_nan());
    assert_eq!(s.extra_len, 0);
    assert_eq!(s.errors, 0);
    // The reply id of servo 1 to host 0.
    assert_eq!(ArbitrationId::command(1, true).reply().build(), 0x100);

    // Padding NOPs after the subframes are fine.
    let mut padded = payload.clone();
    padded.extend_from_slice(&[0x50; 4]);
    let mut s2 = ServoState::default();
    decode_reply(&padded, &mut s2).unwrap();
    assert_eq!(s2.get(reg::VOLTAGE), Some(24.0));
}

/// A servo with the state of the reply vector that answers every read at int16 for
/// registers 0..=3 and int8 above, as the controller that produced the vector did.
struct VectorServo;

impl RegisterServer for VectorServo {
    fn write(&mut self, _reg: u16, _value: Value) -> Result<(), u32> {
        Err(ERROR_UNKNOWN_REGISTER)
    }
    fn read(&mut self, r: u16, res: Resolution) -> Result<Value, u32> {
        let x = match r {
            reg::MODE => 10.0,
            reg::POSITION => 0.5,
            reg::VELOCITY | reg::TORQUE | reg::FAULT => 0.0,
            reg::VOLTAGE => 24.0,
            reg::TEMPERATURE => 25.0,
            _ => return Err(ERROR_UNKNOWN_REGISTER),
        };
        Ok(Value::encode(x, rtloop_proto::register::class_of(r), res))
    }
}

#[test]
fn serve_reproduces_the_reply_vector() {
    let request = build(|w| {
        encode_reads(
            w,
            &[
                (0, Resolution::Int16),
                (1, Resolution::Int16),
                (2, Resolution::Int16),
                (3, Resolution::Int16),
                (0x0d, Resolution::Int8),
                (0x0e, Resolution::Int8),
                (0x0f, Resolution::Int8),
            ],
        )
    });
    assert_eq!(request, hex("140400130d"));
    let mut buf = [0u8; 64];
    let mut reply = FrameWriter::new(&mut buf);
    let n = serve(&request, &mut VectorServo, &mut reply).unwrap();
    assert_eq!(n, 16);
    assert_eq!(reply.as_slice(), hex("2404000A00881300000000230D301900").as_slice());
}

#[test]
fn serve_reports_errors_per_register() {
    // Write 0x070 (refused), read 0x00E..=0x011 (0x010, 0x011 unknown).
    let request = build(|w| {
        w.write_registers(0x70, &[Value::I8(1)])?;
        w.read_registers(0x0e, 4, Resolution::Int8)
    });
    let mut buf = [0u8; 64];
    let mut reply = FrameWriter::new(&mut buf);
    serve(&request, &mut VectorServo, &mut reply).unwrap();
    assert_eq!(reply.as_slice(), hex("307001220e1900311001311101").as_slice());
    let mut s = ServoState::default();
    decode_reply(reply.as_slice(), &mut s).unwrap();
    assert_eq!(s.errors, 3);
    assert_eq!(s.temperature, 25.0);
    assert_eq!(s.fault, Some(0));
}

#[test]
fn combiner_grouping() {
    // Gap (0x022 unset) and resolution change (0x025 int16) each start a new subframe;
    // four consecutive floats use the long form with an explicit count.
    let cmd = PositionCommand {
        position: Some(1.0),
        velocity: Some(0.0),
        kp_scale: Some(1.0),
        kd_scale: Some(1.0),
        maximum_torque: Some(2.0),
        watchdog_timeout: Some(0.5),
        velocity_limit: Some(1.0),
        accel_limit: Some(1.0),
        fixed_voltage_override: Some(1.0),
        ..Default::default()
    };
    let res = PositionResolution { maximum_torque: Resolution::Int16, ..Default::default() };
    let data = build(|w| encode_position(w, &cmd, &res, None));
    let subs: Vec<_> = subframes(&data).map(Result::unwrap).collect();
    let heads: Vec<_> = subs
        .iter()
        .map(|s| match *s {
            Subframe::Write { start, res, count, .. } => (start, res, count),
            _ => panic!("unexpected {s:?}"),
        })
        .collect();
    assert_eq!(
        heads,
        [
            (0x000, Resolution::Int8, 1),
            (0x020, Resolution::Float, 2),
            (0x023, Resolution::Float, 2),
            (0x025, Resolution::Int16, 1),
            (0x027, Resolution::Float, 4),
        ]
    );
    assert_eq!(&data[..3], &[0x01, 0x00, 0x0a]);
    // 0x025 at int16: 2.0 N·m / 0.01 = 200.
    assert!(data.windows(5).any(|w| w == [0x05, 0x25, 200, 0, 0x0c]));
}

#[test]
fn comprehensive_query_and_extras() {
    let q = QueryFormat::comprehensive();
    assert_eq!(build(|w| encode_query(w, &q)), hex("110014050110060a"));
    let mut q = QueryFormat::empty();
    q.add_extra(0x131, Resolution::Float).unwrap();
    q.add_extra(0x130, Resolution::Float).unwrap();
    q.add_extra(0x070, Resolution::Int32).unwrap();
    q.add_extra(reg::FAULT, Resolution::Int8).unwrap(); // a telemetry field, not an extra
    q.add_extra(0x070, Resolution::Int16).unwrap(); // replaces
    assert_eq!(q.fault, Some(Resolution::Int8));
    assert_eq!(q.extras(), &[(0x070, Resolution::Int16), (0x130, Resolution::Float), (0x131, Resolution::Float)]);
    assert_eq!(build(|w| encode_query(w, &q)), hex("110f15701eb002"));
    for r in 0x200..0x205 {
        q.add_extra(r, Resolution::Int8).unwrap();
    }
    assert_eq!(q.add_extra(0x300, Resolution::Int8), Err(EncodeError::TooManyRegisters));
}

#[test]
fn mode_must_be_first_and_overflow_is_reported() {
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    encode_writes(&mut w, &[(0x20, Some(1.0), Resolution::Float)]).unwrap();
    assert_eq!(encode_writes(&mut w, &[(reg::MODE, Some(10.0), Resolution::Int8)]), Err(EncodeError::ModeNotFirst));
    // Every field at float + default query does not fit in 64 bytes.
    let all = PositionCommand {
        position: Some(0.0),
        velocity: Some(0.0),
        feedforward_torque: Some(0.0),
        kp_scale: Some(0.0),
        kd_scale: Some(0.0),
        maximum_torque: Some(0.0),
        stop_position: Some(0.0),
        watchdog_timeout: Some(0.0),
        velocity_limit: Some(0.0),
        accel_limit: Some(0.0),
        fixed_voltage_override: Some(0.0),
        ilimit_scale: Some(0.0),
        fixed_current_override: Some(0.0),
        ignore_position_bounds: Some(0.0),
    };
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    encode_position(&mut w, &all, &PositionResolution::default(), None).unwrap();
    assert_eq!(w.len(), 3 + 3 + 14 * 4);
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    let err = encode_position(&mut w, &all, &PositionResolution::default(), Some(&QueryFormat::default()));
    // 62 bytes of command leave 2; the first read subframe `11 00` fits, `1f 01` does not.
    assert_eq!(err, Err(EncodeError::Overflow { needed: 2, available: 0 }));
    // All or nothing: the writer is left as it was.
    assert_eq!(w.len(), 0);
    // A partial command can still be built by hand with the writer, subframe by subframe.
    assert!(subframes(w.as_slice()).all(|s| s.is_ok()));
}

#[test]
fn extras_never_join_the_telemetry_runs() {
    // Like the Python client, the extras are their own combiner: 0x010 right after the
    // fault register still gets its own read subframe.
    let mut q = QueryFormat::default();
    q.add_extra(0x010, Resolution::Int8).unwrap();
    assert_eq!(build(|w| encode_query(w, &q)), hex("11001f01130d1110"));
}
