//! Proof of the hot-path rule: thousands of full robot cycles (encode 12 commands, four
//! simulated buses with wire timing, IMU read, collect and decode 12 replies) perform no
//! heap allocation at all.

use io::{default_quadruped, RobotConfig, ServoCommand, ServoReply, VirtualClock};
use proto::host::PositionCommand;

#[global_allocator]
static ALLOCATOR: testkit::CountingAllocator = testkit::CountingAllocator;

/// The harness itself must be able to see an allocation, or the test below proves nothing.
#[test]
fn the_counting_allocator_sees_allocations() {
    let (calls, v) = testkit::count_allocations(|| std::hint::black_box(Vec::<u64>::with_capacity(16)));
    drop(v);
    assert!(calls >= 1);
}

#[test]
fn robot_cycles_never_allocate() {
    let clock = VirtualClock::new(1_000_000_000);
    let mut robot = default_quadruped(clock.clone(), RobotConfig::default()).unwrap();
    let mut commands = [ServoCommand::Query; 12];
    let mut replies = [ServoReply::default(); 12];
    let mut imu = Default::default();
    // Warm-up outside the counted region (first-touch of lazily sized internals, if any).
    for _ in 0..10 {
        robot.cycle(&commands, &mut replies, &mut imu);
        clock.advance_ns(1_000_000);
    }

    testkit::start_counting();
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
    let allocations = testkit::stop_counting();

    assert_eq!(allocations, 0, "the cycle allocated");
    assert_eq!(missing, 0);
}
