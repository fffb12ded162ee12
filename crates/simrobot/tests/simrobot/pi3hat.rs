//! The pi3hat transport end to end on the simulated pi3hat: the quadruped's twelve servos on
//! connectors JC1-JC4 of one shared board, full command and query with the attitude, cycles
//! on a virtual clock (so the simulated SPI and wire times are exact and repeatable).

use rtloop_io::open::{BusRequest, OpenOptions};
use rtloop_io::{BusUri, Clock, Pi3hatCarrier, Robot, RobotConfig, ServoCommand, ServoReply, ServoSpec, VirtualClock};
use rtloop_proto::host::PositionCommand;
use rtloop_simrobot::{open_buses, SimOptions, SimRobot};

const SIM: BusUri = BusUri::Pi3hat { carrier: Pi3hatCarrier::Sim };

fn quadruped(clock: &VirtualClock, options: SimOptions) -> (Robot<VirtualClock>, SimRobot) {
    let ids: Vec<Vec<u8>> = (0..4u8).map(|b| (1..=3).map(|k| 3 * b + k).collect()).collect();
    let requests: Vec<BusRequest<'_>> =
        (0..4).map(|b| BusRequest { number: b as u8 + 1, uri: &SIM, servo_ids: &ids[b] }).collect();
    let (opened, sim) = open_buses(&requests, clock.clone(), OpenOptions::default(), options).unwrap();
    assert!(opened.imu.is_some(), "the board's IMU comes with its buses");
    let servos: Vec<ServoSpec> = (0..4).flat_map(|b| ids[b].iter().map(move |&id| ServoSpec { bus: b, id })).collect();
    let config = RobotConfig { query: rtloop_proto::host::QueryFormat::compact(), ..RobotConfig::default() };
    (Robot::new(opened.transports, servos, opened.imu, clock.clone(), config).unwrap(), sim.expect("simulated"))
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
    let (mut robot, _sim) = quadruped(&clock, SimOptions::default());
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

#[test]
fn pi3hat_cycles_never_allocate() {
    let clock = VirtualClock::new(1_000_000_000);
    let (mut robot, _sim) = quadruped(&clock, SimOptions::default());
    let mut replies = [ServoReply::default(); 12];
    let mut imu = Default::default();
    for k in 0..10 {
        robot.cycle(&[full_command(k); 12], &mut replies, &mut imu);
        clock.advance_ns(1_000_000);
    }
    let commands: Vec<[ServoCommand; 12]> = (0..500).map(|k| [full_command(k); 12]).collect();
    rtloop_testkit::start_counting();
    let mut missing = 0;
    for c in &commands {
        missing += robot.cycle(c, &mut replies, &mut imu).missing;
        clock.advance_ns(1_000_000);
    }
    let allocations = rtloop_testkit::stop_counting();
    assert_eq!(allocations, 0, "{allocations} allocations in 500 cycles through the pi3hat");
    assert_eq!(missing, 0);
}

#[test]
fn buses_are_written_in_the_library_order_one_three_two_four() {
    let clock = VirtualClock::new(1_000_000_000);
    let (mut robot, sim) = quadruped(&clock, SimOptions::default());
    for b in 0..4 {
        sim.with_bus(b, |bus| bus.enable_trace(64)).expect("a simulated bus inside the board");
    }
    let mut replies = [ServoReply::default(); 12];
    robot.cycle(&[full_command(0); 12], &mut replies, &mut Default::default());
    let first_ready: Vec<u64> = (0..4)
        .map(|b| sim.with_bus(b, |bus| bus.trace().filter(|r| r.from_host).map(|r| r.ready_ns).min().unwrap()).unwrap())
        .collect();
    // JC1's first frame, then JC3's, then JC2's, then JC4's.
    assert!(first_ready[0] < first_ready[2], "{first_ready:?}");
    assert!(first_ready[2] < first_ready[1], "{first_ready:?}");
    assert!(first_ready[1] < first_ready[3], "{first_ready:?}");
}

#[test]
fn the_buses_of_one_carrier_share_one_board() {
    let uri_sim = BusUri::Pi3hat { carrier: Pi3hatCarrier::Sim };
    let ids = [1u8];
    let requests: Vec<BusRequest<'_>> =
        [2u8, 5].iter().map(|&n| BusRequest { number: n, uri: &uri_sim, servo_ids: &ids }).collect();
    let (opened, _) =
        open_buses(&requests, VirtualClock::new(0), OpenOptions::default(), SimOptions::default()).unwrap();
    let names: Vec<&str> = opened.transports.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["pi3hat:sim:JC2", "pi3hat:sim:JC5"]);
    // One board: its SPI traffic (the bring-up of both ports) is counted in one place.
    let spi = rtloop_simrobot::SimSpi::new(rtloop_sim::SimPi3hat::new(Default::default()), VirtualClock::new(0));
    let (ports, imu) =
        rtloop_io::pi3hat::open_shared(Box::new(spi), &[1, 2], Default::default(), "pi3hat:sim").unwrap();
    assert!(std::sync::Arc::ptr_eq(ports[0].device(), ports[1].device()));
    assert!(imu.is_some());
}

#[test]
fn a_bus_beyond_jc5_is_refused_in_one_sentence() {
    let ids = [1u8];
    let requests = [BusRequest { number: 6, uri: &SIM, servo_ids: &ids }];
    let e = open_buses(&requests, VirtualClock::new(0), OpenOptions::default(), SimOptions::default())
        .err()
        .expect("refused");
    assert!(e.message.contains("bus 6") && e.message.contains("1 to 5"), "{e}");
    assert!(!e.message.contains('\n'));
}

#[test]
fn a_servo_that_is_not_there_is_missing_not_stale() {
    let clock = VirtualClock::new(1_000_000_000);
    let ids = [1u8];
    let requests = [BusRequest { number: 1, uri: &SIM, servo_ids: &ids }];
    let (opened, _) = open_buses(&requests, clock.clone(), OpenOptions::default(), SimOptions::default()).unwrap();
    let servos = [ServoSpec { bus: 0, id: 1 }, ServoSpec { bus: 0, id: 2 }];
    let mut robot =
        Robot::new(opened.transports, servos.to_vec(), opened.imu, clock.clone(), RobotConfig::default()).unwrap();
    let mut replies = [ServoReply::default(); 2];
    for _ in 0..3 {
        let report = robot.cycle(&[ServoCommand::Query; 2], &mut replies, &mut Default::default());
        assert_eq!(report.missing, 1);
        assert!(replies[0].fresh && !replies[1].fresh);
        assert_eq!(replies[1].request_cycle, None, "never answered, never attributed");
        clock.advance_ns(1_000_000);
    }
}

#[test]
fn injected_faults_reach_the_buses_inside_the_board() {
    let clock = VirtualClock::new(1_000_000_000);
    let options = SimOptions { bus: rtloop_sim::BusConfig { drop_rate: 0.2, fault_seed: 3, ..Default::default() } };
    let (mut robot, sim) = quadruped(&clock, options);
    let mut replies = [ServoReply::default(); 12];
    let mut missing = 0;
    for k in 0..200 {
        missing += robot.cycle(&[full_command(k); 12], &mut replies, &mut Default::default()).missing;
        clock.advance_ns(1_000_000);
    }
    let dropped: u64 = (0..4).map(|b| sim.with_bus(b, |bus| bus.stats().frames_dropped_injected).unwrap()).sum();
    assert!(dropped > 0 && missing > 0, "dropped {dropped}, missing {missing}");
}

/// The calling thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a writable timespec; CLOCK_THREAD_CPUTIME_ID needs nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[test]
fn the_simulated_board_on_the_real_clock_sleeps_through_its_transactions_instead_of_spinning() {
    // 20 ms of SPI traffic on the real clock. The board has no hardware to wait for, so the
    // thread driving it must not spin through it (a SCHED_FIFO cycle thread would hold a
    // core): far less CPU time than SPI time. And it never runs away from the clock: once
    // settled, the clock has reached the end of the board's last transaction. (A busy
    // machine only lowers the CPU time of either version; the bound is a factor 2 away.)
    use rtloop_io::spi::{ChipSelect, Pi3hatSpi};
    let clock = rtloop_io::MonotonicClock::default();
    let mut spi = rtloop_simrobot::SimSpi::new(rtloop_sim::SimPi3hat::new(Default::default()), clock);
    let mut ident = [0u8; rtloop_sim::pi3hat::IDENT_LEN];
    let busy =
        |spi: &rtloop_simrobot::SimSpi<rtloop_io::MonotonicClock>| spi.with_board(|b| b.stats().spi_busy_ns).unwrap();
    let free = |spi: &rtloop_simrobot::SimSpi<rtloop_io::MonotonicClock>| spi.with_board(|b| b.spi_free_ns()).unwrap();
    let cpu_start = thread_cpu_ns();
    while busy(&spi) < 20_000_000 {
        spi.read(ChipSelect::Spi1Cs0, rtloop_sim::pi3hat::reg::IDENT, &mut ident).unwrap();
        assert!(free(&spi) <= clock.now_ns() + rtloop_simrobot::SIM_SPI_LEAD_NS, "ran away");
    }
    spi.settle();
    assert!(clock.now_ns() >= free(&spi), "settle returned before the board was done");
    let cpu = thread_cpu_ns() - cpu_start;
    assert!(cpu < busy(&spi) / 2, "{cpu} ns of CPU for {} ns of simulated SPI", busy(&spi));
}
