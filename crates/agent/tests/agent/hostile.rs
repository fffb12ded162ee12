//! A hostile agent writes whatever it likes into the command block through a raw mapping:
//! the spine's validation returns typed errors and never panics, and whatever it accepts
//! is within the limits.

use crate::common;

use proptest::prelude::*;
use rtloop_agent::layout::{
    bytes_of, field, from_bytes, kind, CommandBlock, RawServoCommand, COMMAND_OFFSET, FIELD_NAMES,
};
use rtloop_agent::{validate, Agent, Limits, Poll, ServoCommandError, Spine, SpineConfig, ValidCommand};

/// A spine armed by an agent, the agent dropped: the test writes the block itself.
fn armed_spine(servos: u32) -> Spine {
    let name = common::unique_name("hostile");
    let (mut spine, _) = Spine::create(&SpineConfig::new(&name, &common::servos(servos), 1000.0)).unwrap();
    let mut agent = Agent::attach(&name).unwrap();
    agent.read_state().unwrap();
    agent.rearm_if_needed();
    agent.send();
    assert_eq!(spine.poll_command(0), Poll::Armed);
    spine
}

/// A block that passes the seqlock and the heartbeat check, with `servos` filled in.
fn block(spine: &Spine, heartbeat: u64, servos: &[RawServoCommand]) -> CommandBlock {
    let mut b = CommandBlock::empty();
    // A new even sequence per block, as any writer's: the spine only reads a block whose
    // sequence moved since its last read.
    b.seq = 1000 + 2 * heartbeat;
    b.heartbeat = heartbeat;
    b.arm_token = spine.arm_token();
    b.servo_count = spine.header().servo_count;
    b.servos[..servos.len()].copy_from_slice(servos);
    b
}

fn position(fields: &[(u32, f64)]) -> RawServoCommand {
    let mut c = RawServoCommand { kind: kind::POSITION, ..RawServoCommand::QUERY };
    for &(bit, v) in fields {
        c.set(bit.trailing_zeros() as usize, v);
    }
    c
}

/// Every accepted field is finite (NaN only for position) and within its limits.
fn check_accepted(v: &ValidCommand, l: &Limits) {
    let ValidCommand::Position(p) = v else { return };
    for (i, f) in p.to_registers().iter().enumerate() {
        let Some(x) = *f else { continue };
        if i == 0 && x.is_nan() {
            continue;
        }
        assert!(x.is_finite(), "{} = {x}", FIELD_NAMES[i]);
    }
    let within = |x: Option<f64>, lo: f64, hi: f64| x.is_none_or(|x| x >= lo && x <= hi);
    assert!(p.position.is_none_or(|x| x.is_nan() || (x >= l.position_min && x <= l.position_max)));
    assert!(within(p.velocity, -l.max_velocity, l.max_velocity));
    assert!(within(p.feedforward_torque, -l.max_torque, l.max_torque));
    assert!(within(p.maximum_torque, 0.0, l.max_torque));
    assert!(within(p.kp_scale, 0.0, l.max_kp_scale) && within(p.kd_scale, 0.0, l.max_kd_scale));
    assert!(within(p.watchdog_timeout, l.watchdog_min_s, l.watchdog_max_s));
    assert!(within(p.ilimit_scale, 0.0, l.max_ilimit_scale));
    if !l.allow_overrides {
        assert!(p.fixed_voltage_override.is_none() && p.fixed_current_override.is_none());
        assert!(p.ignore_position_bounds.is_none());
    }
}

#[test]
fn every_bad_field_is_a_typed_error() {
    let l = Limits::default();
    let cases: Vec<(RawServoCommand, ServoCommandError)> = vec![
        (RawServoCommand { kind: 5, ..RawServoCommand::QUERY }, ServoCommandError::UnknownKind(5)),
        (RawServoCommand { kind: u32::MAX, ..RawServoCommand::QUERY }, ServoCommandError::UnknownKind(u32::MAX)),
        (
            RawServoCommand { kind: kind::POSITION, present: 1 << 14 | 1, ..RawServoCommand::QUERY },
            ServoCommandError::UnknownFieldBits(1 << 14),
        ),
        (
            RawServoCommand { kind: kind::STOP, present: field::VELOCITY, ..RawServoCommand::QUERY },
            ServoCommandError::FieldsWithoutPosition { kind: kind::STOP, present: field::VELOCITY },
        ),
        (
            position(&[(field::POSITION, f64::INFINITY)]),
            ServoCommandError::NonFinite { field: "position", value: f64::INFINITY },
        ),
        (
            position(&[(field::VELOCITY, f64::NEG_INFINITY)]),
            ServoCommandError::NonFinite { field: "velocity", value: f64::NEG_INFINITY },
        ),
        (
            position(&[(field::POSITION, 11.0)]),
            ServoCommandError::OutOfRange { field: "position", value: 11.0, min: -10.0, max: 10.0 },
        ),
        (
            position(&[(field::KP_SCALE, -0.5)]),
            ServoCommandError::OutOfRange { field: "kp_scale", value: -0.5, min: 0.0, max: 1.0 },
        ),
        (
            position(&[(field::MAXIMUM_TORQUE, 10.5)]),
            ServoCommandError::OutOfRange { field: "maximum_torque", value: 10.5, min: 0.0, max: 10.0 },
        ),
        (
            position(&[(field::WATCHDOG_TIMEOUT, 0.0)]),
            ServoCommandError::OutOfRange { field: "watchdog_timeout", value: 0.0, min: 0.001, max: 10.0 },
        ),
        (
            position(&[(field::WATCHDOG_TIMEOUT, 11.0)]),
            ServoCommandError::OutOfRange { field: "watchdog_timeout", value: 11.0, min: 0.001, max: 10.0 },
        ),
        (
            position(&[(field::FIXED_VOLTAGE_OVERRIDE, 1.0)]),
            ServoCommandError::OverrideNotAllowed { field: "fixed_voltage_override" },
        ),
        (
            position(&[(field::IGNORE_POSITION_BOUNDS, 1.0)]),
            ServoCommandError::OverrideNotAllowed { field: "ignore_position_bounds" },
        ),
    ];
    for (raw, want) in cases {
        let got = validate(&raw, &l);
        match (got, want) {
            (
                Err(ServoCommandError::NonFinite { field: a, value: x }),
                ServoCommandError::NonFinite { field: b, value: y },
            ) => {
                assert_eq!((a, x.to_bits()), (b, y.to_bits()))
            }
            (got, want) => assert_eq!(got, Err(want), "{raw:?}"),
        }
        let msg = want.to_string();
        assert!(!msg.contains('\n') && msg.matches("; ").count() == 1, "{msg}");
    }
    // NaN velocity is refused; NaN position means "hold" and is accepted.
    assert!(matches!(
        validate(&position(&[(field::VELOCITY, f64::NAN)]), &l),
        Err(ServoCommandError::NonFinite { field: "velocity", .. })
    ));
    let Ok(ValidCommand::Position(p)) = validate(&position(&[(field::POSITION, f64::NAN)]), &l) else { panic!() };
    assert!(p.position.unwrap().is_nan());
    // Overrides when allowed.
    let allow = Limits { allow_overrides: true, ..l };
    assert!(validate(&position(&[(field::FIXED_CURRENT_OVERRIDE, 2.0)]), &allow).is_ok());
    assert!(validate(&position(&[(field::FIXED_CURRENT_OVERRIDE, 6.0)]), &allow).is_err());
    assert_eq!(validate(&RawServoCommand::QUERY, &l), Ok(ValidCommand::Query));
    // A NaN limit refuses rather than accepts.
    let nan_limits = Limits { max_velocity: f64::NAN, ..l };
    assert!(validate(&position(&[(field::VELOCITY, 0.0)]), &nan_limits).is_err());
}

#[test]
fn hostile_blocks_are_refused_per_servo_never_followed_blindly() {
    let mut spine = armed_spine(4);
    let name = spine.name().to_string();
    let l = Limits::default();
    let bad = [
        RawServoCommand { kind: 77, ..RawServoCommand::QUERY },
        position(&[(field::VELOCITY, f64::INFINITY)]),
        position(&[(field::POSITION, 1e300)]),
        position(&[(field::POSITION, 0.5), (field::KP_SCALE, 0.5)]),
    ];
    common::write_command_raw(&name, &block(&spine, 100, &bad));
    assert_eq!(spine.poll_command(1), Poll::Command);
    assert_eq!(spine.command_for(0, &l), Some(Err(ServoCommandError::UnknownKind(77))));
    assert!(matches!(spine.command_for(1, &l), Some(Err(ServoCommandError::NonFinite { .. }))));
    assert!(matches!(spine.command_for(2, &l), Some(Err(ServoCommandError::OutOfRange { field: "position", .. }))));
    assert!(matches!(spine.command_for(3, &l), Some(Ok(ValidCommand::Position(_)))));

    // A servo count that is not the header's: every servo refused.
    let mut b = block(&spine, 101, &bad[3..]);
    b.servo_count = 1000;
    common::write_command_raw(&name, &b);
    assert_eq!(spine.poll_command(2), Poll::Command);
    assert_eq!(spine.command_for(0, &l), Some(Err(ServoCommandError::ServoCount { got: 1000, expected: 4 })));
    assert_eq!(spine.command_for(40, &l), Some(Err(ServoCommandError::NoSuchServo { index: 40, count: 4 })));

    // Garbage in the header words of the block: seq odd → torn; same heartbeat → unchanged.
    let mut b = block(&spine, 101, &[]);
    b.seq = 7;
    common::write_command_raw(&name, &b);
    assert_eq!(spine.poll_command(3), Poll::Torn);
    b.seq = 8;
    common::write_command_raw(&name, &b);
    assert_eq!(spine.poll_command(4), Poll::Unchanged);
    // All-0xFF bytes.
    common::write_raw(&name, COMMAND_OFFSET, &[0xFF; size_of::<CommandBlock>()]);
    assert_eq!(spine.poll_command(5), Poll::Torn, "seq all ones is odd");
    let mut ff = [0xFFu8; size_of::<CommandBlock>()];
    ff[0] = 0xFE;
    common::write_raw(&name, COMMAND_OFFSET, &ff);
    assert_eq!(spine.poll_command(6), Poll::Command);
    for i in 0..4 {
        assert!(spine.command_for(i, &l).unwrap().is_err());
    }
    // Scribbling over the state block or the header's immutable fields changes nothing the
    // spine uses.
    common::write_raw(&name, 0, &[0xAA; 80]);
    common::write_raw(&name, rtloop_agent::layout::STATE_OFFSET, &[0x55; 200]);
    assert_eq!(spine.header().servo_count, 4);
    spine.publish(7);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_servo_commands_never_panic_and_accepted_ones_are_in_limits(
        bytes in proptest::collection::vec(any::<u8>(), 120),
        kind in 0u32..6,
        present in any::<u32>(),
        allow in any::<bool>(),
    ) {
        let mut raw: RawServoCommand = from_bytes(&bytes).unwrap();
        // Half the time, a plausible kind and field mask so validation gets past the first checks.
        if bytes[0] & 1 == 0 {
            raw.kind = kind;
            raw.present = present & 0x3FFF;
        }
        let l = Limits { allow_overrides: allow, ..Limits::default() };
        if let Ok(v) = validate(&raw, &l) {
            check_accepted(&v, &l);
        }
    }

    #[test]
    fn arbitrary_command_blocks_never_panic_the_spine(
        bytes in proptest::collection::vec(any::<u8>(), size_of::<CommandBlock>()),
        make_consistent in any::<bool>(),
    ) {
        thread_local! {
            static SPINE: std::cell::RefCell<Option<Spine>> = const { std::cell::RefCell::new(None) };
        }
        SPINE.with(|cell| {
            let mut cell = cell.borrow_mut();
            let spine = cell.get_or_insert_with(|| armed_spine(32));
            let mut b: CommandBlock = from_bytes(&bytes).unwrap();
            if make_consistent {
                b.seq &= !1;
                b.heartbeat = spine.counters().commands + 1_000_000;
                b.arm_token = spine.arm_token();
                b.servo_count = 32;
            }
            common::write_raw(spine.name(), COMMAND_OFFSET, bytes_of(&b));
            let _ = spine.poll_command(0);
            let l = Limits::default();
            for i in 0..40 {
                if let Some(Ok(v)) = spine.command_for(i, &l) {
                    check_accepted(&v, &l);
                }
            }
            spine.publish(0);
        });
    }
}

#[test]
fn property_case_counts_follow_proptest_cases() {
    let test = rtloop_testkit::test_path(
        module_path!(),
        "arbitrary_servo_commands_never_panic_and_accepted_ones_are_in_limits",
    );
    assert_eq!(common::cases_run(&test, Some(7)), 7);
    if std::env::var_os("PROPTEST_CASES").is_none() {
        assert_eq!(common::cases_run(&test, None), 256, "the default when PROPTEST_CASES is unset");
    }
}
