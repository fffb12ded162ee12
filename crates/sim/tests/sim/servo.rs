//! The simulated servo as a host sees it: replies, modes, the watchdog, faults, physics.

use crate::common::*;
use proptest::prelude::*;
use rtloop_proto::frame::{ArbitrationId, CanFdFrame, BROADCAST};
use rtloop_proto::host::{decode_reply, PositionCommand, ServoState};
use rtloop_proto::register::{fault, reg};
use rtloop_proto::value::Resolution;
use rtloop_proto::writer::FrameWriter;
use rtloop_sim::{Servo, ServoConfig};

fn unloaded(id: u8) -> ServoConfig {
    ServoConfig { load_torque_nm: 0.0, ..ServoConfig::new(id) }
}

/// Position command with no watchdog, so a test need not keep feeding it.
fn hold(pos: f64) -> PositionCommand {
    PositionCommand { position: Some(pos), watchdog_timeout: Some(f64::NAN), ..Default::default() }
}

#[test]
fn default_query_reply_decodes_to_the_resting_state() {
    let mut s = Servo::new(ServoConfig::new(1));
    let reply = reply_of(&mut s, &query(1), 5 * MS);
    assert_eq!(reply.id, 0x0100);
    assert!(reply.flags.fd && reply.flags.brs && reply.flags.extended);
    // 21 00 00 | 2f 01 <3 floats> | 23 0d <3 int8> = 3 + 14 + 5 = 22 → padded to 24.
    assert_eq!(reply.len, 24);
    assert_eq!(&reply.payload()[22..], &[0x50, 0x50]);
    let mut st = ServoState::default();
    decode_reply(reply.payload(), &mut st).unwrap();
    assert_eq!(st.mode, Some(0));
    assert_eq!((st.position, st.velocity, st.torque), (0.0, 0.0, 0.0));
    assert_eq!((st.voltage, st.temperature, st.fault), (24.0, 25.0, Some(0)));
    assert_eq!(st.errors, 0);
}

#[test]
fn reply_bytes_match_the_captured_moteus_reply() {
    // spec §7: `rcv 100 2404000A00881300000000230D301900` — int16 mode/position/velocity/
    // torque, int8 voltage/temperature/fault, from a servo holding 0.5 rev in position mode.
    let mut s = Servo::new(unloaded(1));
    s.advance_to(0);
    s.set_position(0.5);
    let _ = exchange(&mut s, &position(1, &hold(0.5), true), MS);
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    w.read_registers(reg::MODE, 4, Resolution::Int16).unwrap();
    w.read_registers(reg::VOLTAGE, 3, Resolution::Int8).unwrap();
    let req = raw(1, w.as_slice());
    let reply = reply_of(&mut s, &req, 2 * MS);
    let expected = [0x24, 0x04, 0x00, 0x0A, 0x00, 0x88, 0x13, 0x00, 0x00, 0x00, 0x00, 0x23, 0x0D, 0x30, 0x19, 0x00];
    assert_eq!(&reply.payload()[..16], &expected);
    assert_eq!(reply.len, 16);
}

#[test]
fn identity_and_counter_registers() {
    let mut s = Servo::new(ServoConfig::new(7));
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    w.read_registers(reg::REGISTER_MAP_VERSION, 1, Resolution::Int32).unwrap();
    w.read_registers(reg::MULTIPLEX_ID, 1, Resolution::Int8).unwrap();
    w.read_registers(reg::MILLISECOND_COUNTER, 1, Resolution::Int32).unwrap();
    w.read_registers(reg::MODEL_NUMBER, 2, Resolution::Int32).unwrap();
    w.read_registers(reg::SERIAL_NUMBER1, 3, Resolution::Int32).unwrap();
    let st = exchange(&mut s, &raw(7, w.as_slice()), 1234 * MS);
    assert_eq!(st.get(reg::REGISTER_MAP_VERSION), Some(5.0));
    assert_eq!(st.get(reg::MULTIPLEX_ID), Some(7.0));
    assert_eq!(st.get(reg::MILLISECOND_COUNTER), Some(1234.0));
    assert_eq!(st.get(reg::MODEL_NUMBER), Some(f64::from(rtloop_sim::servo::MODEL_NUMBER)));
    assert_eq!(st.get(reg::FIRMWARE_VERSION), Some(f64::from(rtloop_sim::servo::FIRMWARE_VERSION)));
    assert!(st.get(reg::SERIAL_NUMBER1).is_some() && st.get(reg::SERIAL_NUMBER3).is_some());
    assert_eq!(st.errors, 0);
}

#[test]
fn other_destinations_are_ignored_and_broadcast_is_answered() {
    let mut s = Servo::new(ServoConfig::new(3));
    let mut reply = CanFdFrame::default();
    assert!(!s.handle_frame(&query(4), MS, &mut reply));
    assert_eq!(s.telemetry().frames_received, 0);
    let mut other_prefix = query(3);
    other_prefix.id |= 5 << 16;
    assert!(!s.handle_frame(&other_prefix, MS, &mut reply));
    let bcast = query(BROADCAST);
    assert!(s.handle_frame(&bcast, MS, &mut reply));
    assert_eq!(
        ArbitrationId::parse(reply.id),
        ArbitrationId { prefix: 0, source: 3, destination: 0, reply_required: false }
    );
    // No reply bit: handled, not answered.
    let mut quiet = stop(3);
    quiet.id &= !0x8000;
    assert!(!s.handle_frame(&quiet, 2 * MS, &mut reply));
    assert_eq!(s.telemetry().frames_received, 2);
}

#[test]
fn unknown_register_gets_an_error_subframe() {
    let mut s = Servo::new(ServoConfig::new(1));
    // Read 0x200 (int8), then mode.
    let reply = reply_of(&mut s, &raw(1, &[0x11, 0x80, 0x04, 0x11, 0x00]), MS);
    assert_eq!(&reply.payload()[..4], &[0x31, 0x80, 0x04, 0x01], "read error: reg 0x200, code 1");
    let mut st = ServoState::default();
    decode_reply(reply.payload(), &mut st).unwrap();
    assert_eq!(st.errors, 1);
    assert_eq!(st.mode, Some(0));
    // Writing a telemetry register (position, int8) is refused with a write error.
    let reply = reply_of(&mut s, &raw(1, &[0x01, 0x01, 0x05]), 2 * MS);
    assert_eq!(&reply.payload()[..3], &[0x30, 0x01, 0x01]);
}

#[test]
fn position_mode_moves_the_joint_to_the_target_and_holds_it() {
    for (cfg, tol) in [(unloaded(1), 1e-3), (ServoConfig::new(1), 0.02)] {
        let mut s = Servo::new(cfg);
        // Keep commanding every 10 ms (default watchdog), like a control loop.
        let cmd = PositionCommand { position: Some(0.25), ..Default::default() };
        let mut st = ServoState::default();
        for k in 0..300u64 {
            st = exchange(&mut s, &position(1, &cmd, true), k * 10 * MS);
        }
        assert_eq!(st.mode, Some(10));
        assert!((st.position - 0.25).abs() < tol, "{}", st.position);
        assert!(st.velocity.abs() < 0.01, "{}", st.velocity);
        // Hold for another second.
        for k in 300..400u64 {
            st = exchange(&mut s, &position(1, &cmd, true), k * 10 * MS);
            assert!((st.position - 0.25).abs() < tol);
        }
        let t = s.telemetry();
        assert_eq!(t.commands_received, 400);
        assert_eq!(t.watchdog_expiries, 0);
    }
}

#[test]
fn velocity_and_accel_limits_profile_the_motion_and_complete() {
    let mut s = Servo::new(unloaded(1));
    let cmd = PositionCommand {
        position: Some(1.0),
        velocity_limit: Some(2.0),
        accel_limit: Some(10.0),
        watchdog_timeout: Some(f64::NAN),
        ..Default::default()
    };
    let _ = exchange(&mut s, &position(1, &cmd, true), 0);
    let mut last = s.telemetry().control_position;
    let mut peak_speed: f64 = 0.0;
    let mut completed_at = None;
    for k in 1..=1500u64 {
        let st = exchange(&mut s, &query_comprehensive(1), k * MS);
        let c = s.telemetry().control_position;
        peak_speed = peak_speed.max((c - last) / 1e-3);
        last = c;
        if st.trajectory_complete == Some(true) && completed_at.is_none() {
            completed_at = Some(k);
        }
    }
    // 0.2 s accelerating to 2 rev/s (0.2 rev), 0.3 s cruising, 0.2 s braking: 0.7 s.
    let done = completed_at.expect("trajectory never completed");
    assert!((650..=760).contains(&done), "completed at {done} ms");
    assert!(peak_speed <= 2.0 + 1e-6 && peak_speed > 1.9, "peak control speed {peak_speed}");
    assert_eq!(s.telemetry().control_position, 1.0);
    assert!((s.telemetry().position - 1.0).abs() < 0.01);
}

#[test]
fn watchdog_latches_timeout_and_only_stop_leaves() {
    let mut s = Servo::new(ServoConfig::new(1));
    let cmd = PositionCommand { position: Some(0.0), ..Default::default() };
    let st = exchange(&mut s, &position(1, &cmd, true), 0);
    assert_eq!(st.mode, Some(0), "the reply to a command shows the state before it");
    let st = exchange(&mut s, &query(1), 99 * MS);
    assert_eq!(st.mode, Some(10), "queries do not feed the watchdog but 99 ms is within 100 ms");
    let st = exchange(&mut s, &query(1), 101 * MS);
    assert_eq!(st.mode, Some(11));
    assert_eq!(s.telemetry().watchdog_expiries, 1);
    // Another position command is answered but ignored.
    let st = exchange(&mut s, &position(1, &cmd, true), 110 * MS);
    assert_eq!(st.mode, Some(11));
    let st = exchange(&mut s, &query(1), 400 * MS);
    assert_eq!(st.mode, Some(11));
    // Stop leaves.
    let _ = exchange(&mut s, &stop(1), 500 * MS);
    assert_eq!(exchange(&mut s, &query(1), 501 * MS).mode, Some(0));
    let _ = exchange(&mut s, &position(1, &cmd, true), 600 * MS);
    assert_eq!(exchange(&mut s, &query(1), 601 * MS).mode, Some(10));
}

#[test]
fn timeout_mode_damps_motion() {
    let mut s = Servo::new(unloaded(1));
    let cmd = PositionCommand { position: Some(f64::NAN), velocity: Some(1.0), ..Default::default() };
    for k in 0..50u64 {
        let _ = exchange(&mut s, &position(1, &cmd, true), k * 10 * MS);
    }
    assert!(s.telemetry().velocity > 0.9);
    s.advance_to(490 * MS + 101 * MS);
    assert_eq!(s.mode(), 11);
    assert!(s.telemetry().torque < 0.0, "damping opposes the motion");
    s.advance_to(3_000 * MS);
    assert!(s.telemetry().velocity.abs() < 0.05);
}

#[test]
fn explicit_watchdog_timeouts() {
    // NaN disables it.
    let mut s = Servo::new(ServoConfig::new(1));
    let _ = exchange(&mut s, &position(1, &hold(0.0), true), 0);
    let st = exchange(&mut s, &query(1), 5_000 * MS);
    assert_eq!(st.mode, Some(10));
    // An explicit 0.5 s.
    let mut s = Servo::new(ServoConfig::new(1));
    let cmd = PositionCommand { position: Some(0.0), watchdog_timeout: Some(0.5), ..Default::default() };
    let _ = exchange(&mut s, &position(1, &cmd, true), 0);
    assert_eq!(exchange(&mut s, &query(1), 450 * MS).mode, Some(10));
    assert_eq!(exchange(&mut s, &query(1), 550 * MS).mode, Some(11));
    // 0 means the configured default.
    let mut s = Servo::new(ServoConfig { watchdog_default_s: 0.2, ..ServoConfig::new(1) });
    let cmd = PositionCommand { position: Some(0.0), watchdog_timeout: Some(0.0), ..Default::default() };
    let _ = exchange(&mut s, &position(1, &cmd, true), 0);
    assert_eq!(exchange(&mut s, &query(1), 150 * MS).mode, Some(10));
    assert_eq!(exchange(&mut s, &query(1), 250 * MS).mode, Some(11));
}

#[test]
fn over_temperature_faults_and_stop_clears() {
    let mut s = Servo::new(ServoConfig::new(1));
    let _ = exchange(&mut s, &position(1, &hold(0.1), true), 0);
    s.inject_heat(500.0);
    let mut t = 0;
    let mut st = ServoState::default();
    while t < 30_000 * MS {
        t += 100 * MS;
        st = exchange(&mut s, &query(1), t);
        if st.mode == Some(1) {
            break;
        }
    }
    assert_eq!(st.mode, Some(1), "never faulted");
    assert_eq!(st.fault, Some(fault::OVER_TEMPERATURE));
    assert!(st.temperature >= 25.0);
    assert!(s.telemetry().motor_temperature >= 80.0);
    assert!((2_000 * MS..4_000 * MS).contains(&t), "500 W into 20 J/K: ~2.2 s, got {t}");
    s.advance_to(t + MS);
    assert_eq!(s.telemetry().torque, 0.0);
    // A position command is ignored while faulted.
    let _ = exchange(&mut s, &position(1, &hold(0.1), true), t + 2 * MS);
    assert_eq!(exchange(&mut s, &query(1), t + 2 * MS).mode, Some(1));
    // Stop clears the fault, even while hot (a stopped servo does not re-fault).
    let _ = exchange(&mut s, &stop(1), t + 3 * MS);
    let st = exchange(&mut s, &query(1), t + 3 * MS);
    assert_eq!((st.mode, st.fault), (Some(0), Some(0)));
    assert!(s.telemetry().motor_temperature > 80.0);
    // Still hot: driving again faults again at the next physics step; cooled down it runs.
    let _ = exchange(&mut s, &position(1, &hold(0.1), true), t + 4 * MS);
    assert_eq!(exchange(&mut s, &query(1), t + 5 * MS).mode, Some(1));
    s.inject_heat(0.0);
    s.set_temperature(25.0);
    let _ = exchange(&mut s, &stop(1), t + 6 * MS);
    let _ = exchange(&mut s, &position(1, &hold(0.1), true), t + 7 * MS);
    assert_eq!(exchange(&mut s, &query(1), t + 50 * MS).mode, Some(10));
}

#[test]
fn command_registers_read_back_and_reset_per_frame() {
    let mut s = Servo::new(ServoConfig::new(1));
    let cmd = PositionCommand { position: Some(0.5), kp_scale: Some(0.5), ..Default::default() };
    let _ = exchange(&mut s, &position(1, &cmd, false).with_reply(), 0);
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    w.read_registers(reg::COMMAND_POSITION, 4, Resolution::Float).unwrap();
    let st = exchange(&mut s, &raw(1, w.as_slice()), MS);
    assert_eq!(st.get(reg::COMMAND_POSITION), Some(0.5));
    assert_eq!(st.get(reg::COMMAND_KP_SCALE), Some(0.5));
    assert_eq!(st.get(reg::COMMAND_VELOCITY), None, "unset reads back as NaN");
    // The next command without kp_scale resets it.
    let cmd = PositionCommand { position: Some(0.4), ..Default::default() };
    let _ = exchange(&mut s, &position(1, &cmd, true), 2 * MS);
    let st = exchange(&mut s, &raw(1, w.as_slice()), 3 * MS);
    assert_eq!(st.get(reg::COMMAND_POSITION), Some(0.4000000059604645));
    assert_eq!(st.get(reg::COMMAND_KP_SCALE), None);
}

#[test]
fn zero_velocity_brake_and_unsupported_modes() {
    let mut s = Servo::new(unloaded(1));
    s.advance_to(0);
    // Spin it up with a velocity command, then zero-velocity mode stops it.
    let spin = PositionCommand {
        position: Some(f64::NAN),
        velocity: Some(2.0),
        watchdog_timeout: Some(f64::NAN),
        ..Default::default()
    };
    let _ = exchange(&mut s, &position(1, &spin, true), 0);
    s.advance_to(500 * MS);
    assert!(s.telemetry().velocity > 1.5);
    let zero = raw(1, &[0x01, 0x00, 0x0c, 0x11, 0x00]);
    let _ = exchange(&mut s, &zero, 500 * MS);
    assert_eq!(exchange(&mut s, &query(1), 500 * MS).mode, Some(12));
    for k in 1..=30u64 {
        let _ = exchange(&mut s, &zero, 500 * MS + k * 50 * MS);
    }
    assert!(s.telemetry().velocity.abs() < 0.05);
    let brake = raw(1, &[0x01, 0x00, 0x0f, 0x11, 0x00]);
    let _ = exchange(&mut s, &brake, 2_050 * MS);
    assert_eq!(exchange(&mut s, &query(1), 3_000 * MS).mode, Some(15), "brake has no watchdog");
    // PWM mode (5) is not simulated: treated as a stop.
    let _ = exchange(&mut s, &raw(1, &[0x01, 0x00, 0x05, 0x11, 0x00]), 3_001 * MS);
    assert_eq!(exchange(&mut s, &query(1), 3_001 * MS).mode, Some(0));
}

#[test]
fn set_output_shifts_the_reported_position() {
    let mut s = Servo::new(unloaded(1));
    s.advance_to(0);
    s.set_position(0.3);
    // write float 0x131 (exact) = 2.0
    let mut p = vec![0x0d, 0xb1, 0x02];
    p.extend_from_slice(&2.0f32.to_le_bytes());
    p.extend_from_slice(&[0x11, 0x00]);
    let _ = exchange(&mut s, &raw(1, &p), MS);
    assert!((s.telemetry().position - 2.0).abs() < 1e-9);
}

/// A frame rebuilt with the reply bit set.
trait WithReply {
    fn with_reply(self) -> Self;
}
impl WithReply for CanFdFrame {
    fn with_reply(mut self) -> Self {
        self.id |= 0x8000;
        self
    }
}

proptest! {
    #[test]
    fn random_payloads_never_panic(
        frames in proptest::collection::vec(
            (any::<u32>(), proptest::collection::vec(any::<u8>(), 0..=64), 0u64..50_000_000, any::<bool>()),
            1..20,
        )
    ) {
        let mut s = Servo::new(ServoConfig::new(1));
        let mut t = 0;
        for (id, payload, dt, to_me) in frames {
            t += dt;
            let mut f = CanFdFrame::new(id & 0x1FFF_FFFF, &payload).unwrap();
            if to_me {
                f.id = (f.id & !0x7F) | 1;
            }
            let mut reply = CanFdFrame::default();
            if s.handle_frame(&f, t, &mut reply) {
                prop_assert!(reply.len <= 64);
                let mut st = ServoState::default();
                let _ = decode_reply(reply.payload(), &mut st);
            }
            let tel = s.telemetry();
            prop_assert!(tel.position.is_finite() && tel.velocity.is_finite() && tel.torque.is_finite());
        }
        s.advance_to(t + 2_000_000_000);
        prop_assert!(s.telemetry().position.is_finite());
    }
}

#[test]
fn a_mode_written_as_a_float_is_truncated_as_the_firmware_does() {
    let mut s = Servo::new(unloaded(1));
    s.advance_to(0);
    // Write float mode 12.7 (0x0c = write float, count 1, register 0x000): zero velocity.
    let mut payload = vec![0x0d, 0x00];
    payload.extend_from_slice(&12.7f32.to_le_bytes());
    payload.extend_from_slice(&[0x11, 0x00]);
    let _ = exchange(&mut s, &raw(1, &payload), 0);
    assert_eq!(exchange(&mut s, &query(1), MS).mode, Some(12));
    // NaN is no mode at all: handled as a stop.
    let mut payload = vec![0x0d, 0x00];
    payload.extend_from_slice(&f32::NAN.to_le_bytes());
    let _ = exchange(&mut s, &raw(1, &payload), 2 * MS);
    assert_eq!(exchange(&mut s, &query(1), 3 * MS).mode, Some(0));
}

#[test]
fn a_command_register_read_in_the_frame_that_wrote_it_echoes_the_written_value() {
    let mut s = Servo::new(unloaded(1));
    s.advance_to(0);
    for (k, target) in [0.25, -0.5, 0.125].into_iter().enumerate() {
        let mut buf = [0u8; 64];
        let mut w = FrameWriter::new(&mut buf);
        w.write_registers(reg::MODE, &[rtloop_proto::Value::I8(10)]).unwrap();
        w.write_registers(reg::COMMAND_POSITION, &[rtloop_proto::Value::F32(target as f32)]).unwrap();
        w.read_registers(reg::COMMAND_POSITION, 1, Resolution::Float).unwrap();
        let reply = reply_of(&mut s, &raw(1, w.as_slice()), k as u64 * MS);
        let mut st = ServoState::default();
        decode_reply(reply.payload(), &mut st).unwrap();
        assert_eq!(st.get(reg::COMMAND_POSITION), Some(target), "request {k}");
    }
    // A frame that only reads sees the command in force.
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    w.read_registers(reg::COMMAND_POSITION, 1, Resolution::Float).unwrap();
    let reply = reply_of(&mut s, &raw(1, w.as_slice()), 10 * MS);
    let mut st = ServoState::default();
    decode_reply(reply.payload(), &mut st).unwrap();
    assert_eq!(st.get(reg::COMMAND_POSITION), Some(0.125));
}
