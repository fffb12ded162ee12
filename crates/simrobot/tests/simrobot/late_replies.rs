//! A late reply is never taken for the answer to a newer request (issue 9, §1).
//!
//! Every cycle commands each servo to a position that names the cycle, and the query reads
//! the command-position register back: the simulated servo answers a command register that
//! the same frame wrote with the written value, so each reply says which request it answers.
//! Reply delays are swept across the cycle's deadline — in virtual time over the in-process
//! simulator, and in real time over the simulator behind a pty speaking fdcanusb — and every
//! state the robot hands out must answer exactly the request it claims to, never a later one,
//! with the missing, late and lost counts adding up.

use rtloop_io::fdcanusb::{FdcanusbOptions, FdcanusbTransport};
use rtloop_io::{
    Clock, CycleReport, MonotonicClock, Robot, RobotConfig, ServoCommand, ServoReply, ServoSpec, Transport,
    VirtualClock,
};
use rtloop_proto::host::{PositionCommand, PositionResolution, QueryFormat, ServoState};
use rtloop_proto::register::reg;
use rtloop_proto::Resolution;
use rtloop_sim::{BusConfig, Servo, ServoConfig, SimBus};
use rtloop_simrobot::serve::{PtyFdcanusbEndpoint, ServeHandle, ServedBus};
use rtloop_simrobot::SimTransport;

/// Commanded position per cycle index: the echo of it names the request.
const REV_PER_CYCLE: f64 = 0.001;

fn command_for(cycle: u64) -> ServoCommand {
    ServoCommand::Position(PositionCommand {
        position: Some(cycle as f64 * REV_PER_CYCLE),
        velocity: Some(0.0),
        ..Default::default()
    })
}

/// The cycle whose request `state` answers, read from the echoed command position.
fn echoed_cycle(state: &ServoState) -> u64 {
    let p = state.get(reg::COMMAND_POSITION).expect("the reply carries the command position");
    (p / REV_PER_CYCLE).round() as u64
}

fn config(period_ns: u64) -> RobotConfig {
    let mut query = QueryFormat::comprehensive();
    query.add_extra(reg::COMMAND_POSITION, Resolution::Float).unwrap();
    let mut c =
        RobotConfig { query, position_resolution: PositionResolution::all(Resolution::Float), ..Default::default() };
    // As `rtloop run` does: a cycle never runs into the next period.
    c.cycle.timeout_ns = period_ns * 9 / 10;
    c
}

fn sim_bus(ids: &[u8], reply_delay_ns: u64) -> SimBus {
    lossy_sim_bus(ids, reply_delay_ns, 0.0)
}

fn lossy_sim_bus(ids: &[u8], reply_delay_ns: u64, drop_rate: f64) -> SimBus {
    let mut bus = SimBus::new(BusConfig { reply_delay_ns, drop_rate, fault_seed: 7, ..BusConfig::default() });
    for &id in ids {
        bus.add_servo(Servo::new(ServoConfig::new(id)));
    }
    bus
}

/// What a run of cycles added up to.
#[derive(Debug, Default)]
struct Ledger {
    cycles: u64,
    fresh: u64,
    missing: u64,
    queried: u64,
    unqueried: u64,
    late: u64,
    lost: u64,
    expired: u64,
    decode_errors: u64,
    unattributed: u64,
}

impl Ledger {
    /// Check one cycle's replies and counts; add them up.
    fn check(&mut self, report: &CycleReport, replies: &[ServoReply], context: &str) {
        let mut fresh = 0;
        for (i, r) in replies.iter().enumerate() {
            if let Some(k) = r.request_cycle {
                assert!(
                    k <= report.cycle,
                    "{context}: servo {i} holds an answer to future cycle {k} in {}",
                    report.cycle
                );
                assert_eq!(
                    echoed_cycle(&r.state),
                    k,
                    "{context}: cycle {}: servo {i}'s state is said to answer cycle {k}",
                    report.cycle
                );
            }
            if r.fresh {
                assert_eq!(r.request_cycle, Some(report.cycle), "{context}: a fresh reply answers this cycle");
                assert_eq!(r.missing_streak, 0);
                fresh += 1;
            } else {
                assert!(r.missing_streak > 0, "{context}: a servo without a fresh reply has a missing streak");
            }
        }
        let n = replies.len() as u32;
        assert_eq!(report.missing, n - fresh, "{context}: {report:?}");
        assert_eq!(
            report.missing,
            report.unqueried + report.encode_errors + (report.queried - fresh),
            "{context}: every servo is fresh, unqueried, unencodable or queried without a fresh reply: {report:?}"
        );
        self.cycles += 1;
        self.fresh += u64::from(fresh);
        self.missing += u64::from(report.missing);
        self.queried += u64::from(report.queried);
        self.unqueried += u64::from(report.unqueried);
        self.late += u64::from(report.late);
        self.lost += u64::from(report.lost);
        self.expired += u64::from(report.expired);
        self.decode_errors += u64::from(report.decode_errors);
        self.unattributed += u64::from(report.unattributed);
    }

    /// Every request was answered in time, answered late, undecodable, presumed lost, or is
    /// still outstanding.
    fn balances<C: Clock>(&self, robot: &Robot<C>, context: &str) {
        assert_eq!(
            self.queried,
            self.fresh + self.late + self.decode_errors + self.lost + self.expired + robot.outstanding() as u64,
            "{context}: {self:?}, outstanding {}",
            robot.outstanding()
        );
    }
}

/// How the next cycle starts after one returns.
#[derive(Debug, Clone, Copy)]
enum Pace {
    /// At the next period boundary, like `rtloop run`.
    Periodic,
    /// At once, like a client looping as fast as it can.
    BackToBack,
}

fn run_in_virtual_time(reply_delay_ns: u64, pace: Pace, reply_tags: u8, cycles: u64) -> Ledger {
    run_bus_in_virtual_time(Bus { servos: 3, reply_delay_ns, drop_rate: 0.0 }, pace, reply_tags, cycles)
}

/// One simulated bus of a robot.
#[derive(Debug, Clone, Copy)]
struct Bus {
    servos: u8,
    reply_delay_ns: u64,
    drop_rate: f64,
}

fn run_bus_in_virtual_time(bus: Bus, pace: Pace, reply_tags: u8, cycles: u64) -> Ledger {
    run_with_window(bus, pace, reply_tags, RobotConfig::default().late_reply_window_ns, cycles)
}

fn run_with_window(bus: Bus, pace: Pace, reply_tags: u8, late_reply_window_ns: u64, cycles: u64) -> Ledger {
    const PERIOD_NS: u64 = 1_000_000;
    let clock = VirtualClock::new(0);
    let ids: Vec<u8> = (1..=bus.servos).collect();
    let sim = lossy_sim_bus(&ids, bus.reply_delay_ns, bus.drop_rate);
    let buses: Vec<Box<dyn Transport>> = vec![Box::new(SimTransport::new(sim, "a"))];
    let servos = ids.iter().map(|&id| ServoSpec { bus: 0, id }).collect();
    let config = RobotConfig { reply_tags, late_reply_window_ns, ..config(PERIOD_NS) };
    let mut robot = Robot::new(buses, servos, None, clock.clone(), config).unwrap();
    let mut replies = vec![ServoReply::default(); ids.len()];
    let mut imu = Default::default();
    let mut ledger = Ledger::default();
    let context = format!("{bus:?}, {pace:?}, {reply_tags} tags, window {late_reply_window_ns} ns");
    for k in 0..cycles {
        let commands = vec![command_for(robot.cycle_index() + 1); ids.len()];
        let report = robot.cycle(&commands, &mut replies, &mut imu);
        ledger.check(&report, &replies, &context);
        if let Pace::Periodic = pace {
            clock.wait_until_ns((k + 1) * PERIOD_NS);
        }
    }
    ledger.balances(&robot, &context);
    ledger
}

#[test]
fn replies_are_attributed_to_their_own_request_across_the_deadline_in_virtual_time() {
    // 3 servos on one bus: the last reply is back about 0.76 ms after the cycle starts and the
    // cycle gives up at 0.9 ms, so delays from 0 to 3 ms put replies before the deadline, just
    // after it, inside the next cycle and several cycles late.
    let mut late_seen = 0;
    for tags in [1, 4] {
        for pace in [Pace::Periodic, Pace::BackToBack] {
            for delay_us in (0..=3000).step_by(50) {
                let ledger = run_in_virtual_time(delay_us * 1000, pace, tags, 200);
                assert_eq!(ledger.unattributed, 0, "delays stay inside the late-reply window: {ledger:?}");
                if delay_us == 0 {
                    assert_eq!(ledger.missing, 0, "{pace:?}: without delay every reply is fresh: {ledger:?}");
                }
                late_seen += ledger.late;
            }
        }
    }
    assert!(late_seen > 0, "the sweep must produce late replies");
}

#[test]
fn replies_many_cycles_late_crowded_buses_and_lossy_wires_are_attributed_exactly() {
    // Replies later than any cycle (up to 30 ms at 1 kHz), a bus with more servos than a
    // period can carry (six at 1 kHz need 1.4 ms), and wires that lose frames: every state
    // handed out answers exactly the request it claims to, and every request is accounted for.
    let mut runs = Vec::new();
    for delay_ms in [0u64, 1, 2, 5, 9, 10, 11, 15, 20, 30] {
        runs.push(Bus { servos: 3, reply_delay_ns: delay_ms * 1_000_000, drop_rate: 0.0 });
    }
    for servos in [4u8, 5, 6] {
        runs.push(Bus { servos, reply_delay_ns: 0, drop_rate: 0.0 });
        runs.push(Bus { servos, reply_delay_ns: 11_000_000, drop_rate: 0.0 });
    }
    for drop_rate in [0.01, 0.1, 0.3] {
        runs.push(Bus { servos: 3, reply_delay_ns: 0, drop_rate });
        runs.push(Bus { servos: 3, reply_delay_ns: 2_000_000, drop_rate });
    }
    let (mut lost, mut late, mut fresh) = (0, 0, 0);
    for bus in runs {
        for tags in [1, 8] {
            for pace in [Pace::Periodic, Pace::BackToBack] {
                if bus.servos > 4 && matches!(pace, Pace::BackToBack) {
                    // Back to back, five or six servos ask more of the bus than it carries,
                    // for ever: the lowest-priority servo's replies can then be starved by the
                    // others' for longer than the late-reply window (100 ms), the one case the
                    // scheme cannot settle (see rtloop_io::robot). `rtloop run` warns before it starts
                    // when the model says a cycle does not fit its period.
                    continue;
                }
                let ledger = run_bus_in_virtual_time(bus, pace, tags, 400);
                assert_eq!(ledger.unattributed, 0, "{bus:?} {pace:?} {tags} tags: {ledger:?}");
                (lost, late, fresh) = (lost + ledger.lost, late + ledger.late, fresh + ledger.fresh);
            }
        }
    }
    assert!(lost > 0 && late > 0 && fresh > 0, "every path ran: lost {lost}, late {late}, fresh {fresh}");
}

#[test]
fn an_answer_later_than_the_late_reply_window_is_never_taken_for_a_newer_requests_answer() {
    // Issue 21 §4, in virtual time. With a 3 ms window and replies 4 ms late, one tag: the
    // request of cycle 1 (t = 0) expires at 3 ms, cycle 5 (t = 4 ms) asks again with the same
    // tag, and cycle 1's answer lands (at 4.3 ms) inside cycle 5, after its writes. Taken for
    // cycle 5's answer, it was handed over fresh with cycle 1's data: a "complete" cycle
    // faster than the wire allows.
    let ledger =
        run_with_window(Bus { servos: 1, reply_delay_ns: 4_000_000, drop_rate: 0.0 }, Pace::Periodic, 1, 3_000_000, 60);
    assert!(ledger.unattributed > 0, "answers to expired requests come in and are set aside: {ledger:?}");
    assert_eq!(ledger.fresh, 0, "no reply is back within its cycle: {ledger:?}");
}

#[test]
fn replies_across_the_late_reply_window_are_attributed_to_their_own_request_in_virtual_time() {
    // The never-stale sweep, with delays across a small late-reply window (5 ms): replies in
    // time, late but inside the window, and later than it, where every request expires before
    // its answer arrives (up to 9 ms: an answer must be in within two windows of its request
    // when the servo answers nothing else meanwhile, see rtloop_io::robot), for one, two and eight tags, on a clean wire and one
    // losing a tenth of the frames. Every state handed out answers exactly the request it
    // claims to, and every request is accounted for.
    const WINDOW_NS: u64 = 5_000_000;
    let (mut expired, mut unattributed, mut late, mut fresh) = (0, 0, 0, 0);
    for drop_rate in [0.0, 0.1] {
        for tags in [1, 2, 8] {
            for pace in [Pace::Periodic, Pace::BackToBack] {
                for delay_us in (0..=9_000).step_by(250) {
                    let bus = Bus { servos: 3, reply_delay_ns: delay_us * 1000, drop_rate };
                    let ledger = run_with_window(bus, pace, tags, WINDOW_NS, 150);
                    (expired, unattributed) = (expired + ledger.expired, unattributed + ledger.unattributed);
                    (late, fresh) = (late + ledger.late, fresh + ledger.fresh);
                }
            }
        }
    }
    assert!(
        expired > 0 && unattributed > 0 && late > 0 && fresh > 0,
        "every path ran: expired {expired}, answers to expired requests {unattributed}, late {late}, fresh {fresh}"
    );
}

#[test]
fn a_reply_just_past_the_deadline_comes_back_fresh_in_the_next_cycle_with_tags() {
    // With 0.5 ms of extra turnaround the last replies miss their cycle's 0.9 ms deadline and
    // land early in the next cycle. With reply tags each late answer is set aside as late and
    // the next cycle still waits for, and gets, its own.
    let ledger = run_in_virtual_time(500_000, Pace::BackToBack, 8, 100);
    assert!(ledger.late > 0, "{ledger:?}");
    assert!(ledger.fresh > 0, "{ledger:?}");
    // Tags rise while a reply is outstanding and start again only when none is: a servo
    // late every cycle climbs through its 8 tags and waits one cycle unqueried, at most.
    assert!(ledger.unqueried <= 3 * (100 / 8 + 1), "{ledger:?}");
}

#[test]
fn with_one_tag_a_servo_with_a_late_reply_is_commanded_but_not_queried() {
    let ledger = run_in_virtual_time(1_500_000, Pace::Periodic, 1, 100);
    assert!(ledger.unqueried > 0, "{ledger:?}");
    assert!(ledger.late > 0, "{ledger:?}");
}

#[test]
fn a_servo_that_never_answers_is_queried_again_after_the_window() {
    let clock = VirtualClock::new(0);
    let buses: Vec<Box<dyn Transport>> = vec![Box::new(SimTransport::new(sim_bus(&[1], 0), "a"))];
    // Servo 2 is not on the bus.
    let servos = vec![ServoSpec { bus: 0, id: 1 }, ServoSpec { bus: 0, id: 2 }];
    let config = RobotConfig { reply_tags: 2, late_reply_window_ns: 5_000_000, ..config(1_000_000) };
    let mut robot = Robot::new(buses, servos, None, clock.clone(), config).unwrap();
    let mut replies = [ServoReply::default(); 2];
    let mut ledger = Ledger::default();
    let mut queried_absent = Vec::new();
    for k in 0..26u64 {
        let commands = [command_for(robot.cycle_index() + 1); 2];
        let report = robot.cycle(&commands, &mut replies, &mut Default::default());
        ledger.check(&report, &replies, "absent servo");
        assert!(replies[0].fresh);
        queried_absent.push(report.queried == 2);
        clock.wait_until_ns((k + 1) * 1_000_000);
    }
    ledger.balances(&robot, "absent servo");
    // Two tags: asked in cycles 1 and 2 (at 0 and 1 ms) with tags 0 and 1; the servo answers
    // nothing, so later cycles only command it. The request of cycle 1 is given up at the end
    // of cycle 6 (5 ms: a reply read during that cycle would still have counted), the one of
    // cycle 2 at the end of cycle 7. Their answers could still come, so their tags are
    // quarantined for another window of silence: tag 0 until the end of cycle 11 (10.9 ms),
    // tag 1 until the end of cycle 12 — and tag 0 may not be reused while tag 1 is reserved
    // (a lower tag would overtake its reply on the bus). Cycles 13 and 14 ask again, and so on.
    let asked = |k: usize| k % 12 < 2;
    let expected: Vec<bool> = (0..26).map(asked).collect();
    assert_eq!(queried_absent, expected);
    assert_eq!(robot.quarantined(), 0, "{ledger:?}");
    assert!(ledger.expired >= 2, "{ledger:?}");
}

#[test]
fn fdcanusb_pty_replies_are_attributed_to_their_own_request_across_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    for (i, delay_us) in [0u64, 300, 600, 900, 1500].into_iter().enumerate() {
        for busy_poll in [false, true] {
            let link = dir.path().join(format!("bus-{i}-{busy_poll}"));
            let endpoint = PtyFdcanusbEndpoint::create(&link).expect("pty endpoint");
            let server =
                ServeHandle::start(vec![ServedBus::new(sim_bus(&[1, 2], delay_us * 1000), Box::new(endpoint))])
                    .expect("server");
            let transport = FdcanusbTransport::open(link.to_str().unwrap(), FdcanusbOptions::default()).unwrap();
            let mut config = config(1_000_000);
            // Back to back, giving up early: replies cross into the next cycle. The window is
            // generous so that a host stalled by other work cannot push a reply past it.
            config.cycle.timeout_ns = 700_000;
            config.cycle.rx_baseline_wait_ns = 200_000;
            config.cycle.busy_poll = busy_poll;
            config.late_reply_window_ns = 500_000_000;
            let servos = vec![ServoSpec { bus: 0, id: 1 }, ServoSpec { bus: 0, id: 2 }];
            let mut robot =
                Robot::new(vec![Box::new(transport)], servos, None, MonotonicClock::default(), config).unwrap();
            let mut replies = [ServoReply::default(); 2];
            let mut ledger = Ledger::default();
            let context = format!("fdcanusb pty, reply delay {delay_us} µs, busy poll {busy_poll}");
            for _ in 0..300 {
                let commands = [command_for(robot.cycle_index() + 1); 2];
                let report = robot.cycle(&commands, &mut replies, &mut Default::default());
                ledger.check(&report, &replies, &context);
            }
            // Let the last replies come in; the next cycle takes them as late answers.
            std::thread::sleep(std::time::Duration::from_millis(20));
            let commands = [command_for(robot.cycle_index() + 1); 2];
            let report = robot.cycle(&commands, &mut replies, &mut Default::default());
            ledger.check(&report, &replies, &context);
            assert_eq!(report.stats.failed_buses, 0, "{context}: {report:?}");
            ledger.balances(&robot, &context);
            assert_eq!(ledger.unattributed, 0, "{context}: {ledger:?}");
            // How many replies make their own cycle depends on how busy this machine is; that
            // replies came back and each was attributed to its own request does not.
            assert!(ledger.fresh + ledger.late > 0, "{context}: {ledger:?}");
            drop(robot);
            server.stop();
        }
    }
}
