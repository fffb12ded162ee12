//! The pi3hat transport end to end on the simulated pi3hat: the quadruped's twelve servos on
//! connectors JC1-JC4 of one shared board, full command and query with the attitude, cycles
//! on a virtual clock (so the simulated SPI and wire times are exact and repeatable).

use io::open::{open_buses, BusRequest, OpenOptions};
use io::{BusUri, Clock, Pi3hatCarrier, Robot, RobotConfig, ServoCommand, ServoReply, ServoSpec, VirtualClock};
use proto::host::PositionCommand;

#[global_allocator]
static ALLOCATOR: testkit::CountingAllocator = testkit::CountingAllocator;

const SIM: BusUri = BusUri::Pi3hat { carrier: Pi3hatCarrier::Sim };

fn quadruped(clock: &VirtualClock, options: OpenOptions) -> Robot<VirtualClock> {
    let ids: Vec<Vec<u8>> = (0..4u8).map(|b| (1..=3).map(|k| 3 * b + k).collect()).collect();
    let requests: Vec<BusRequest<'_>> =
        (0..4).map(|b| BusRequest { number: b as u8 + 1, uri: &SIM, sim_servo_ids: &ids[b] }).collect();
    let opened = open_buses(&requests, clock.clone(), options).unwrap();
    assert!(opened.imu.is_some(), "the board's IMU comes with its buses");
    let servos: Vec<ServoSpec> = (0..4).flat_map(|b| ids[b].iter().map(move |&id| ServoSpec { bus: b, id })).collect();
    let config = RobotConfig { query: proto::host::QueryFormat::compact(), ..RobotConfig::default() };
    Robot::new(opened.transports, servos, opened.imu, clock.clone(), config).unwrap()
}

fn full_command(k: u32) -> ServoCommand {
    let t = f64::from(k) * 1e-3;
    ServoCommand::Position(PositionCommand {
        position: Some(0.1 * t.sin()),
        velocity: Some(0.1 * t.cos()),
        maximum_torque: Some(2.0),
        watchdog_timeout: Some(0.1),
        ..Default::default()
    })
}

#[test]
fn the_quadruped_cycles_through_the_simulated_pi3hat_with_every_reply() {
    let clock = VirtualClock::new(1_000_000_000);
    let mut robot = quadruped(&clock, OpenOptions::default());
    let mut replies = [ServoReply::default(); 12];
    let mut imu = Default::default();
    let mut longest = 0;
    for k in 0..1000u32 {
        let commands = [full_command(k); 12];
        let start = clock.now_ns();
        let report = robot.cycle(&commands, &mut replies, &mut imu);
        assert_eq!(report.missing, 0, "cycle {k}: {report:?}");
        assert!(report.stats.imu_present, "cycle {k}: no attitude");
        assert!(replies.iter().all(|r| r.fresh));
        longest = longest.max(clock.now_ns() - start);
        clock.wait_until_ns(start + 1_000_000);
    }
    eprintln!("longest simulated cycle: {} µs", longest / 1000);
    // Virtual time: deterministic. The board's SPI time plus the wires fit a 1 kHz period.
    assert!(longest < 1_000_000, "a cycle took {longest} ns");
    let unit: f64 = imu.quaternion.iter().map(|q| q * q).sum();
    assert!((unit - 1.0).abs() < 1e-3, "attitude quaternion {:?}", imu.quaternion);
}
