//! Fault injection is seeded per bus: the buses of one robot lose different frames, and the
//! same run seed repeats a run loss for loss. Deterministic: virtual clock, simulated buses.

use rtloop::robot_spec::{BusSpec, RobotSpec};
use rtloop_io::{ServoCommand, ServoReply, VirtualClock};

/// Which cycles lost servo 1's reply, per bus, over 300 query cycles of a robot with servo 1
/// on each of buses 1 and 2, 30 % of frames dropped, fault seed `seed`.
fn losses(seed: u64) -> [Vec<bool>; 2] {
    let clock = VirtualClock::new(1_000_000_000);
    let spec =
        RobotSpec { buses: (1..=2).map(|bus| BusSpec { bus, uri: rtloop_io::BusUri::Sim, servos: vec![1] }).collect() };
    let sim_bus = rtloop_sim::BusConfig { drop_rate: 0.3, fault_seed: seed, ..rtloop_sim::BusConfig::default() };
    let sim = rtloop_simrobot::SimOptions { bus: sim_bus };
    let (mut robot, _sim) =
        spec.build(clock.clone(), rtloop_io::RobotConfig::default(), Default::default(), sim).unwrap();
    let commands = [ServoCommand::Query; 2];
    let mut replies = [ServoReply::default(); 2];
    let mut imu = Default::default();
    let mut lost = [Vec::new(), Vec::new()];
    for _ in 0..300 {
        robot.cycle(&commands, &mut replies, &mut imu);
        for (bus, r) in replies.iter().enumerate() {
            lost[bus].push(!r.fresh);
        }
        clock.advance_ns(1_000_000);
    }
    lost
}

#[test]
fn buses_lose_different_frames_and_a_seed_repeats_a_run() {
    let [bus1, bus2] = losses(7);
    let count = |v: &[bool]| v.iter().filter(|&&l| l).count();
    // About half of the query/reply pairs lose a frame at 30 % per frame.
    assert!(count(&bus1) > 50 && count(&bus2) > 50, "{} {}", count(&bus1), count(&bus2));
    let same = bus1.iter().zip(&bus2).filter(|(a, b)| a == b).count();
    assert!(same < 280, "the two buses lost the same frames in {same} of 300 cycles");
    assert_eq!(losses(7), [bus1.clone(), bus2], "the same seed repeats the run");
    assert_ne!(losses(8)[0], bus1, "another seed, another run");
}
