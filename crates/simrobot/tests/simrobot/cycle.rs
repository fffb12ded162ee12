//! Behaviour of the multi-bus cycle over simulated buses in virtual time: every reply
//! collected, round-robin writes, IMU read, per-servo missing replies, failing buses.

use rtloop_io::{
    Clock, CycleOptions, Cycler, Robot, RobotConfig, ServoCommand, ServoReply, ServoSpec, Transport, TransportError,
    TxFrame, VirtualClock,
};
use rtloop_proto::CanFdFrame;
use rtloop_sim::{BusConfig, Servo, ServoConfig, SimBus};
use rtloop_simrobot::SimTransport;

fn bus_with(ids: &[u8]) -> SimBus {
    let mut bus = SimBus::new(BusConfig::default());
    for &id in ids {
        bus.add_servo(Servo::new(ServoConfig::new(id)));
    }
    bus
}

#[test]
fn quadruped_cycle_collects_all_twelve_replies_and_the_imu() {
    let clock = VirtualClock::new(0);
    let mut robot = rtloop_simrobot::quadruped(clock.clone(), RobotConfig::default()).unwrap().0;
    assert_eq!(robot.servos().len(), 12);
    let commands = [ServoCommand::Query; 12];
    let mut replies = [ServoReply::default(); 12];
    let mut imu = Default::default();
    let report = robot.cycle(&commands, &mut replies, &mut imu);
    assert_eq!(report.missing, 0);
    assert_eq!(report.stats.received, 12);
    assert_eq!(report.stats.expected, 12);
    assert!(!report.stats.timed_out);
    assert!(report.stats.imu_present);
    for (spec, r) in robot.servos().iter().zip(&replies) {
        assert!(r.fresh, "servo {} missing", spec.id);
        assert_eq!(r.state.mode, Some(0));
        assert!(r.state.voltage > 20.0);
    }
    // Four buses in parallel: the cycle takes about one bus's worth of wire time (three
    // commands and three replies), far less than four buses' worth in series.
    let d = report.stats.duration_ns();
    assert!(d > 0 && d < report.stats.deadline_ns - report.stats.started_ns, "cycle took {d} ns");
    let one_frame = rtloop_sim::frame_time_ns(&robot_frame(&robot), 1_000_000, 5_000_000);
    assert!(d < 12 * one_frame, "cycle {d} ns vs frame {one_frame} ns");
}

fn robot_frame(robot: &Robot<VirtualClock>) -> CanFdFrame {
    let mut f = CanFdFrame::default();
    robot.encode_command(robot.servos()[0], &ServoCommand::Query, &mut f).unwrap();
    f
}

#[test]
fn an_absent_servo_is_reported_missing_and_the_rest_still_answer() {
    let clock = VirtualClock::new(0);
    let buses: Vec<Box<dyn Transport>> =
        vec![Box::new(SimTransport::new(bus_with(&[1, 2]), "a")), Box::new(SimTransport::new(bus_with(&[1]), "b"))];
    // Servo 3 on bus 0 does not exist; servo id 1 lives on both buses.
    let servos = vec![
        ServoSpec { bus: 0, id: 1 },
        ServoSpec { bus: 0, id: 2 },
        ServoSpec { bus: 0, id: 3 },
        ServoSpec { bus: 1, id: 1 },
    ];
    let mut robot = Robot::new(buses, servos, None, clock.clone(), RobotConfig::default()).unwrap();
    let commands = [ServoCommand::Query; 4];
    let mut replies = [ServoReply::default(); 4];
    let mut imu = Default::default();
    for round in 1..=3u32 {
        let report = robot.cycle(&commands, &mut replies, &mut imu);
        assert_eq!(report.missing, 1);
        assert!(report.stats.timed_out);
        assert!(!report.stats.imu_present);
        assert!(replies[0].fresh && replies[1].fresh && replies[3].fresh);
        assert!(!replies[2].fresh);
        assert_eq!(replies[2].missing_streak, round);
        // Gave up at the deadline, not before.
        assert!(report.stats.finished_ns >= report.stats.deadline_ns);
        clock.advance_ns(1_000_000);
    }
}

/// A bus whose device has gone away.
struct DeadBus;
impl Transport for DeadBus {
    fn name(&self) -> &str {
        "dead"
    }
    fn send(&mut self, _: &CanFdFrame, _: u64) -> Result<(), TransportError> {
        Err(TransportError::Disconnected)
    }
    fn recv(&mut self, _: u64) -> Result<Option<CanFdFrame>, TransportError> {
        Err(TransportError::Disconnected)
    }
}

#[test]
fn a_failed_bus_does_not_stop_the_others() {
    let clock = VirtualClock::new(0);
    let buses: Vec<Box<dyn Transport>> = vec![Box::new(DeadBus), Box::new(SimTransport::new(bus_with(&[5]), "ok"))];
    let servos = vec![ServoSpec { bus: 0, id: 4 }, ServoSpec { bus: 1, id: 5 }];
    let mut robot = Robot::new(buses, servos, None, clock, RobotConfig::default()).unwrap();
    let mut replies = [ServoReply::default(); 2];
    let report = robot.cycle(&[ServoCommand::Stop; 2], &mut replies, &mut Default::default());
    assert_eq!(report.stats.failed_buses, 0b01);
    assert_eq!(report.stats.bus_errors[0], Some(TransportError::Disconnected));
    assert!(!replies[0].fresh);
    assert!(replies[1].fresh);
    assert_eq!(replies[1].state.mode, Some(0));
    // A dead bus is not waited for: no timeout is charged to it.
    assert!(!report.stats.timed_out);
}

/// Records the order frames reach each bus.
struct Recorder {
    log: std::sync::Arc<std::sync::Mutex<Vec<(usize, u32)>>>,
    bus: usize,
}
impl Transport for Recorder {
    fn name(&self) -> &str {
        "rec"
    }
    fn send(&mut self, f: &CanFdFrame, _: u64) -> Result<(), TransportError> {
        self.log.lock().unwrap().push((self.bus, f.id));
        Ok(())
    }
    fn recv(&mut self, _: u64) -> Result<Option<CanFdFrame>, TransportError> {
        Ok(None)
    }
}

#[test]
fn writes_go_round_robin_across_buses() {
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let buses: Vec<Box<dyn Transport>> =
        (0..3).map(|bus| Box::new(Recorder { log: log.clone(), bus }) as Box<dyn Transport>).collect();
    let clock = VirtualClock::new(0);
    let mut cycler = Cycler::new(buses, None, clock, CycleOptions::default()).unwrap();
    // Caller order: all of bus 0, then bus 1, then bus 2.
    let tx: Vec<TxFrame> = [(0, 1), (0, 2), (0, 3), (1, 4), (1, 5), (2, 6)]
        .iter()
        .map(|&(bus, id)| TxFrame { bus, frame: CanFdFrame::new(id, &[0x50]).unwrap(), expect_reply: false })
        .collect();
    let st = cycler.cycle(&tx, &mut [], &mut Default::default());
    assert_eq!(st.sent, 6);
    let order: Vec<u32> = log.lock().unwrap().iter().map(|&(_, id)| id).collect();
    assert_eq!(order, vec![1, 4, 6, 2, 5, 3]);
    // Nothing expected and nothing forced: the cycle returns without waiting.
    assert_eq!(st.duration_ns(), 0);
}

#[test]
fn forced_listening_waits_the_minimum_and_collects_unsolicited_frames() {
    let clock = VirtualClock::new(0);
    let buses: Vec<Box<dyn Transport>> = vec![Box::new(SimTransport::new(bus_with(&[1]), "a"))];
    let opts = CycleOptions { force_check: 1, ..Default::default() };
    let mut cycler = Cycler::new(buses, None, clock.clone(), opts).unwrap();
    let st = cycler.cycle(&[], &mut [], &mut Default::default());
    assert!(st.duration_ns() >= opts.min_tx_wait_ns);
    assert_eq!(st.received, 0);
    assert!(clock.now_ns() >= opts.min_tx_wait_ns);
}

#[test]
fn setup_mistakes_are_errors() {
    let clock = VirtualClock::new(0);
    let mk = || -> Vec<Box<dyn Transport>> { vec![Box::new(SimTransport::new(bus_with(&[1]), "a"))] };
    let cfg = RobotConfig::default;
    assert!(Robot::new(mk(), vec![ServoSpec { bus: 1, id: 1 }], None, clock.clone(), cfg()).is_err());
    assert!(Robot::new(mk(), vec![ServoSpec { bus: 0, id: 0 }], None, clock.clone(), cfg()).is_err());
    assert!(Robot::new(mk(), vec![ServoSpec { bus: 0, id: 128 }], None, clock.clone(), cfg()).is_err());
    let dup = vec![ServoSpec { bus: 0, id: 1 }, ServoSpec { bus: 0, id: 1 }];
    assert!(Robot::new(mk(), dup, None, clock, cfg()).is_err());
}

#[test]
fn the_deadline_estimate_bounds_the_exact_wire_time() {
    for len in [0usize, 1, 8, 12, 20, 32, 48, 64] {
        for fill in [0x00u8, 0x55, 0xff, 0x50] {
            for id in [0x1u32, 0x8001, 0x1FFF_FFFF] {
                let mut f = CanFdFrame::new(id, &vec![fill; len]).unwrap();
                f.pad_to_dlc();
                let exact = rtloop_sim::frame_time_ns(&f, 1_000_000, 5_000_000);
                let bound = rtloop_io::cycle::estimate_frame_time_ns(&f, 1_000_000, 5_000_000);
                assert!(bound >= exact, "len {len} fill {fill:#x} id {id:#x}: {bound} < {exact}");
                // … and not wildly above it.
                assert!(bound <= exact * 3 / 2, "len {len} fill {fill:#x} id {id:#x}: {bound} vs {exact}");
            }
        }
    }
}
