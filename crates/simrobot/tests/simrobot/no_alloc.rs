//! Proof of the hot-path rule: thousands of full robot cycles (encode 12 commands, four
//! simulated buses with wire timing, IMU read, collect and decode 12 replies) perform no
//! heap allocation at all.

use rtloop_io::{RobotConfig, ServoCommand, ServoReply, VirtualClock};
use rtloop_proto::host::PositionCommand;
use rtloop_simrobot::SimTransport;

/// The harness itself must be able to see an allocation, or the test below proves nothing.
#[test]
fn the_counting_allocator_sees_allocations() {
    let (calls, v) = rtloop_testkit::count_allocations(|| std::hint::black_box(Vec::<u64>::with_capacity(16)));
    drop(v);
    assert!(calls >= 1);
}

#[test]
fn robot_cycles_never_allocate() {
    let clock = VirtualClock::new(1_000_000_000);
    let mut robot = rtloop_simrobot::quadruped(clock.clone(), RobotConfig::default()).unwrap().0;
    let mut commands = [ServoCommand::Query; 12];
    let mut replies = [ServoReply::default(); 12];
    let mut imu = Default::default();
    // Warm-up outside the counted region (first-touch of lazily sized internals, if any).
    for _ in 0..10 {
        robot.cycle(&commands, &mut replies, &mut imu);
        clock.advance_ns(1_000_000);
    }

    rtloop_testkit::start_counting();
    let mut missing = 0;
    for k in 0..5000u32 {
        let t = k as f64 * 1e-3;
        for (i, c) in commands.iter_mut().enumerate() {
            *c = match k % 100 {
                0 => ServoCommand::Stop,
                50 => ServoCommand::ZeroVelocity,
                _ => ServoCommand::Position(PositionCommand {
                    position: Some(0.05 * (t + i as f64).sin()),
                    velocity: Some(0.0),
                    maximum_torque: Some(2.0),
                    ..Default::default()
                }),
            };
        }
        let report = robot.cycle(&commands, &mut replies, &mut imu);
        missing += report.missing;
        clock.advance_ns(1_000_000);
    }
    let allocations = rtloop_testkit::stop_counting();

    assert_eq!(allocations, 0, "the cycle allocated");
    assert_eq!(missing, 0);
}

/// The late-reply bookkeeping (tags held and freed, replies set aside as late, servos left
/// unqueried while waiting for a late answer, requests presumed lost) is on the hot path too.
#[test]
fn cycles_with_late_lost_and_unqueried_servos_never_allocate() {
    use rtloop_io::{Robot, ServoSpec, Transport};
    use rtloop_sim::{BusConfig, Servo, ServoConfig, SimBus};
    let (mut late, mut lost, mut unqueried) = (0, 0, 0);
    for (reply_tags, reply_delay_ns) in [(1u8, 1_500_000u64), (4, 500_000), (4, 2_500_000)] {
        let clock = VirtualClock::new(1_000_000_000);
        let mut bus = SimBus::new(BusConfig { reply_delay_ns, drop_rate: 0.05, ..BusConfig::default() });
        for id in 1..=3 {
            bus.add_servo(Servo::new(ServoConfig::new(id)));
        }
        let buses: Vec<Box<dyn Transport>> = vec![Box::new(SimTransport::new(bus, "late"))];
        // Servo 4 is absent: its requests are presumed lost, again and again.
        let servos = (1..=4).map(|id| ServoSpec { bus: 0, id }).collect();
        let mut config = RobotConfig { reply_tags, late_reply_window_ns: 4_000_000, ..RobotConfig::default() };
        config.cycle.timeout_ns = 900_000;
        let mut robot = Robot::new(buses, servos, None, clock.clone(), config).unwrap();
        let commands = [ServoCommand::ZeroVelocity; 4];
        let mut replies = [ServoReply::default(); 4];
        let mut imu = Default::default();
        for _ in 0..10 {
            robot.cycle(&commands, &mut replies, &mut imu);
            clock.advance_ns(1_000_000);
        }
        rtloop_testkit::start_counting();
        for _ in 0..3000 {
            let r = robot.cycle(&commands, &mut replies, &mut imu);
            (late, lost, unqueried) = (late + r.late, lost + r.lost + r.expired, unqueried + r.unqueried);
            clock.advance_ns(1_000_000);
        }
        let allocations = rtloop_testkit::stop_counting();
        assert_eq!(allocations, 0, "{reply_tags} tags, delay {reply_delay_ns} ns: the cycle allocated");
    }
    assert!(late > 0 && lost > 0 && unqueried > 0, "every path ran: late {late}, lost {lost}, unqueried {unqueried}");
}
