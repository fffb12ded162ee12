//! Fault injection: frames dropped and corrupted on the wire, delayed replies, a scheduled
//! servo overheat, the counters and the event log. Everything runs in virtual time.

use crate::common::*;
use rtloop_proto::frame::CanFdFrame;
use rtloop_proto::host::{decode_reply, PositionCommand, ServoState};
use rtloop_proto::register::fault;
use rtloop_sim::{
    BusConfig, FrameLoss, InjectedEvent, InjectedKind, OverheatState, Servo, ServoConfig, SimBus, OVERHEAT_RAMP_NS,
};

fn bus_with(cfg: BusConfig, ids: &[u8]) -> SimBus {
    let mut bus = SimBus::new(cfg);
    for &id in ids {
        bus.add_servo(Servo::new(ServoConfig::new(id)));
    }
    bus
}

fn events(bus: &mut SimBus) -> Vec<InjectedEvent> {
    let mut out = Vec::new();
    let n = bus.drain_events(|e| out.push(e));
    assert_eq!(n, out.len());
    out
}

/// `n` query round trips to servo 1, one per millisecond; the end time of each reply
/// that arrived (None for a failed round trip), and the bus.
fn round_trips(cfg: BusConfig, n: u64) -> (Vec<Option<u64>>, SimBus) {
    let mut bus = bus_with(cfg, &[1]);
    bus.enable_trace(4);
    let q = query(1);
    let mut out = Vec::new();
    for k in 0..n {
        let t0 = k * MS;
        bus.submit(&q, t0).unwrap();
        let mut got = None;
        while let Some(t) = bus.next_event_ns() {
            if t > t0 + 900_000 {
                break;
            }
            if let Some((_, at)) = bus.poll_rx_stamped(t) {
                assert!(got.is_none(), "one reply per query");
                got = Some(at);
            }
        }
        assert!(bus.is_idle(), "round trip {k} left the bus busy");
        out.push(got);
    }
    (out, bus)
}

#[test]
fn drop_rate_one_loses_every_command_and_no_reply_is_made() {
    let cfg = BusConfig { drop_rate: 1.0, fault_seed: 3, ..BusConfig::default() };
    let mut bus = bus_with(cfg, &[1, 2, 3]);
    bus.enable_trace(64);
    for k in 0..10u64 {
        for id in 1..=3 {
            bus.submit(&query(id), k * MS).unwrap();
        }
    }
    assert!(run_to_idle(&mut bus).is_empty(), "no reply ever arrives");
    let st = bus.stats();
    assert_eq!((st.host_frames, st.servo_frames), (30, 0), "the commands still took the wire");
    assert_eq!(st.frames_dropped_injected, 30);
    assert_eq!((st.frames_corrupted_injected, st.replies_lost_injected, st.rx_dropped), (0, 0, 0));
    assert!(st.busy_ns > 0 && st.bits > 0);
    for s in bus.servos() {
        assert_eq!(s.telemetry().frames_received, 0, "a dropped command reaches nobody");
    }
    assert!(bus.trace().all(|r| r.from_host && r.lost == Some(FrameLoss::Dropped)));
    // Thirty losses, one coalesced log entry covering several servos.
    let ev = events(&mut bus);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].servo, None);
    let first_end = bus.trace().next().map(|r| r.end_ns);
    assert!(matches!(ev[0].kind, InjectedKind::FrameDropped { count: 30, .. }), "{ev:?}");
    assert!(Some(ev[0].at_ns) <= first_end || first_end.is_none());
    // Read: the next loss opens a new entry.
    bus.submit(&query(2), 20 * MS).unwrap();
    run_to_idle(&mut bus);
    let ev = events(&mut bus);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].servo, Some(2));
    assert!(matches!(ev[0].kind, InjectedKind::FrameDropped { count: 1, last_ns } if last_ns == ev[0].at_ns));
    assert!(ev[0].at_ns > 20 * MS);
}

#[test]
fn drop_rate_half_loses_about_three_quarters_of_round_trips_deterministically() {
    let cfg = BusConfig { drop_rate: 0.5, fault_seed: 12345, ..BusConfig::default() };
    let (a, bus_a) = round_trips(cfg, 1000);
    let failed = a.iter().filter(|r| r.is_none()).count();
    // A round trip fails if either frame is lost: expected 1 − 0.5² = 0.75, σ ≈ 0.014.
    assert!((650..=850).contains(&failed), "{failed} of 1000 failed");

    // Counters: both directions count; a lost command makes no reply.
    let st = bus_a.stats();
    let reached = bus_a.servos()[0].telemetry().frames_received;
    let arrived = a.iter().filter(|r| r.is_some()).count() as u64;
    assert_eq!(st.host_frames, 1000);
    assert_eq!(st.servo_frames, reached, "every command that arrived was answered");
    assert_eq!(st.replies_lost_injected, reached - arrived);
    assert_eq!(st.frames_dropped_injected, (1000 - reached) + (reached - arrived));
    assert!(st.replies_lost_injected > 0 && st.frames_dropped_injected > st.replies_lost_injected);
    assert_eq!(st.frames_corrupted_injected, 0);

    // Same seed, same run; another seed, another run.
    let (b, bus_b) = round_trips(cfg, 1000);
    assert_eq!(a, b);
    assert_eq!(bus_a.stats(), bus_b.stats());
    let (c, _) = round_trips(BusConfig { fault_seed: 54321, ..cfg }, 1000);
    assert_ne!(a, c);
}

#[test]
fn the_log_does_not_flood_on_a_lossy_bus() {
    let cfg = BusConfig { drop_rate: 0.3, corrupt_rate: 0.3, fault_seed: 9, ..BusConfig::default() };
    let (_, mut bus) = round_trips(cfg, 1000);
    let st = bus.stats();
    let ev = events(&mut bus);
    assert_eq!(ev.len(), 2, "one coalesced entry per kind: {ev:?}");
    let mut dropped = 0;
    let mut corrupted = 0;
    for e in &ev {
        assert_eq!(e.servo, Some(1));
        match e.kind {
            InjectedKind::FrameDropped { count, last_ns } => {
                dropped += u64::from(count);
                assert!(last_ns > e.at_ns);
            }
            InjectedKind::FrameCorrupted { count, .. } => corrupted += u64::from(count),
            k => panic!("unexpected {k:?}"),
        }
    }
    assert_eq!((dropped, corrupted), (st.frames_dropped_injected, st.frames_corrupted_injected));
    assert_eq!(st.events_discarded, 0);
    assert!(bus.pop_event().is_none());
}

#[test]
fn corrupt_rate_loses_frames_like_drops_but_counts_them_as_corrupted() {
    let cfg = BusConfig { corrupt_rate: 1.0, ..BusConfig::default() };
    let (r, mut bus) = round_trips(cfg, 50);
    assert!(r.iter().all(Option::is_none));
    let st = bus.stats();
    assert_eq!((st.frames_corrupted_injected, st.frames_dropped_injected, st.servo_frames), (50, 0, 0));
    assert_eq!(bus.servos()[0].telemetry().frames_received, 0, "a corrupted command is not acted on");
    assert!(bus.trace().all(|w| w.lost == Some(FrameLoss::Corrupted)));
    let ev = events(&mut bus);
    assert!(matches!(
        ev[..],
        [InjectedEvent { servo: Some(1), kind: InjectedKind::FrameCorrupted { count: 50, .. }, .. }]
    ));

    let cfg = BusConfig { corrupt_rate: 0.5, fault_seed: 77, ..BusConfig::default() };
    let (r, bus) = round_trips(cfg, 1000);
    let failed = r.iter().filter(|r| r.is_none()).count();
    assert!((650..=850).contains(&failed), "{failed} of 1000 failed");
    let st = bus.stats();
    assert_eq!(st.frames_dropped_injected, 0);
    let reached = bus.servos()[0].telemetry().frames_received;
    assert_eq!(st.frames_corrupted_injected, (1000 - reached) + st.replies_lost_injected);
    // Replies that arrive are intact: they decode.
    assert_eq!(round_trips(cfg, 1000).0, r);
}

#[test]
fn delivered_replies_are_intact_under_corruption() {
    let cfg = BusConfig { corrupt_rate: 0.5, fault_seed: 5, ..BusConfig::default() };
    let mut bus = bus_with(cfg, &[1]);
    let mut n = 0;
    for k in 0..200 {
        bus.submit(&query_comprehensive(1), k * MS).unwrap();
        bus.advance_to(k * MS + 900_000);
        while let Some(f) = bus.poll_rx(k * MS + 900_000) {
            let mut st = ServoState::default();
            decode_reply(f.payload(), &mut st).unwrap();
            assert_eq!((st.mode, st.fault, st.voltage), (Some(0), Some(0), 24.0));
            n += 1;
        }
    }
    assert!(n > 20);
}

#[test]
fn reply_delay_shifts_every_reply_by_exactly_that_much() {
    let base = BusConfig::default();
    let delayed = BusConfig { reply_delay_ns: 123_456, ..base };
    let (a, bus_a) = round_trips(base, 50);
    let (b, bus_b) = round_trips(delayed, 50);
    assert!(a.iter().all(Option::is_some));
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(y.unwrap(), x.unwrap() + 123_456);
    }
    // The reply became ready a turnaround plus the delay after its command ended.
    let ta: Vec<_> = bus_a.trace().copied().collect();
    let tb: Vec<_> = bus_b.trace().copied().collect();
    assert_eq!(tb[3].ready_ns, tb[2].end_ns + base.turnaround_ns + 123_456);
    assert_eq!(tb[3].ready_ns - ta[3].ready_ns, 123_456);
    assert_eq!(bus_a.stats().busy_ns, bus_b.stats().busy_ns);
}

#[test]
fn rates_are_validated_and_clamped() {
    assert_eq!(BusConfig::default().validate(), Ok(()));
    assert_eq!(BusConfig::without_wire_time().validate(), Ok(()));
    assert_eq!((BusConfig::default().drop_rate, BusConfig::default().corrupt_rate), (0.0, 0.0));
    let bad = BusConfig { drop_rate: 1.5, ..BusConfig::default() };
    let e = bad.validate().unwrap_err();
    assert_eq!((e.option, e.rate), ("--drop-rate", 1.5));
    assert_eq!(e.to_string(), "--drop-rate 1.5 is not a probability: give a number from 0 to 1");
    let bad = BusConfig { corrupt_rate: -0.25, ..BusConfig::default() };
    let e = bad.validate().unwrap_err();
    assert_eq!((e.option, e.rate), ("--corrupt-rate", -0.25));
    assert_eq!(e.to_string(), "--corrupt-rate -0.25 is not a probability: give a number from 0 to 1");
    assert!(BusConfig { drop_rate: f64::NAN, ..BusConfig::default() }.validate().is_err());
    assert!(BusConfig { drop_rate: 1.0, corrupt_rate: 0.0, ..BusConfig::default() }.validate().is_ok());

    let bus = SimBus::new(BusConfig { drop_rate: 1.5, corrupt_rate: f64::NAN, ..BusConfig::default() });
    assert_eq!((bus.config().drop_rate, bus.config().corrupt_rate), (1.0, 0.0));
    assert_eq!(bus.config().validate(), Ok(()));
    let bus = SimBus::new(BusConfig { drop_rate: -3.0, corrupt_rate: f64::INFINITY, ..BusConfig::default() });
    assert_eq!((bus.config().drop_rate, bus.config().corrupt_rate), (0.0, 1.0));
}

#[test]
fn faults_off_change_nothing() {
    // Default rates draw nothing: a seed has no effect and nothing is logged.
    let (a, mut bus_a) = round_trips(BusConfig::default(), 100);
    let (b, _) = round_trips(BusConfig { fault_seed: 99, ..BusConfig::default() }, 100);
    assert_eq!(a, b);
    assert!(a.iter().all(Option::is_some));
    assert!(events(&mut bus_a).is_empty());
    let st = bus_a.stats();
    assert_eq!((st.frames_dropped_injected, st.frames_corrupted_injected, st.faults_latched), (0, 0, 0));
}

fn hold(pos: f64) -> PositionCommand {
    PositionCommand { position: Some(pos), ..Default::default() }
}

/// Send `frame` at `t` and run the bus until the reply arrives; decoded (None if lost).
fn ask(bus: &mut SimBus, frame: &CanFdFrame, t: u64) -> Option<ServoState> {
    bus.submit(frame, t).unwrap();
    let mut out = None;
    while let Some(e) = bus.next_event_ns() {
        if let Some(f) = bus.poll_rx(e) {
            let mut st = ServoState::default();
            decode_reply(f.payload(), &mut st).unwrap();
            out = Some(st);
        }
    }
    out
}

#[test]
fn a_scheduled_overheat_faults_a_driving_servo_within_the_bound() {
    let at = 1_000 * MS;
    let mut bus = bus_with(BusConfig::default(), &[1, 2]);
    assert!(bus.schedule_overheat(1, at));
    assert!(!bus.schedule_overheat(9, at), "no servo 9 on this bus");
    assert!(bus.servos()[0].telemetry().overheat.is_armed());
    assert_eq!(bus.servos()[0].overheat_state(), OverheatState::Armed { at_ns: at });

    // A 10 ms control loop holding both servos in position mode (default watchdog).
    let mut t = 0;
    let mut first_fault_reply = None;
    while t < at + 600 * MS {
        for id in [1, 2] {
            let st = ask(&mut bus, &position(id, &hold(0.05), true), t).expect("no loss injected");
            if id == 2 || t <= at {
                assert_eq!((st.mode, st.fault), (Some(if t == 0 { 0 } else { 10 }), Some(0)), "servo {id} at {t}");
            } else if st.mode == Some(1) && first_fault_reply.is_none() {
                assert_eq!(st.fault, Some(fault::OVER_TEMPERATURE));
                first_fault_reply = Some(t);
            }
        }
        if t < at {
            let tel = bus.servos()[0].telemetry();
            assert_eq!(tel.mode, 10);
            assert!(tel.motor_temperature < 30.0, "no heating before the scheduled time: {tel:?}");
            assert!(tel.overheat.is_armed() && !tel.overheat.is_triggered());
        }
        t += 10 * MS;
    }
    let step = ServoConfig::new(1).step_ns;
    let latched = first_fault_reply.expect("never faulted");
    assert!(latched > at && latched <= at + OVERHEAT_RAMP_NS + 2 * step + 10 * MS, "fault seen at {latched}");
    let tel = bus.servos()[0].telemetry();
    assert_eq!((tel.mode, tel.fault, tel.faults_latched), (1, fault::OVER_TEMPERATURE, 1));
    assert!(tel.overheat.is_triggered() && !tel.overheat.is_armed());
    assert!(matches!(tel.overheat, OverheatState::Done { .. }), "heating over after the ramp: {:?}", tel.overheat);
    assert!(tel.motor_temperature > 80.0 && tel.motor_temperature < 95.0, "{tel:?}");

    // Logged: the overheat start, then the fault, once (the later position commands are
    // ignored while faulted and latch nothing).
    let ev = events(&mut bus);
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!((ev[0].servo, ev[0].kind), (Some(1), InjectedKind::OverheatStarted));
    assert!(ev[0].at_ns >= at && ev[0].at_ns <= at + step);
    assert_eq!((ev[1].servo, ev[1].kind), (Some(1), InjectedKind::FaultLatched { code: fault::OVER_TEMPERATURE }));
    assert!(ev[1].at_ns > at && ev[1].at_ns <= at + OVERHEAT_RAMP_NS + 2 * step, "latched at {}", ev[1].at_ns);
    assert!(ev[1].at_ns <= latched);
    let st = bus.stats();
    assert_eq!((st.overheats_started, st.faults_latched), (1, 1));

    // Stop clears the fault register at once (moteus behaviour), even while hot; driving
    // again while still above the limit faults again at the next physics step.
    let st = ask(&mut bus, &stop(1), t).unwrap();
    assert_eq!(st.mode, Some(1), "the reply shows the state before the stop");
    let st = ask(&mut bus, &query(1), t + MS).unwrap();
    assert_eq!((st.mode, st.fault), (Some(0), Some(0)));
    let _ = ask(&mut bus, &position(1, &hold(0.05), true), t + 2 * MS);
    let st = ask(&mut bus, &query(1), t + 3 * MS).unwrap();
    assert_eq!((st.mode, st.fault), (Some(1), Some(fault::OVER_TEMPERATURE)));
    let ev = events(&mut bus);
    assert!(matches!(ev[..], [InjectedEvent { servo: Some(1), kind: InjectedKind::FaultLatched { code: 38 }, .. }]));

    // Stopped, it cools on its own (40 s time constant: from ≤ 90 °C under 80 °C in ≤ 7 s).
    let _ = ask(&mut bus, &stop(1), t + 4 * MS);
    let cool_from = t + 4 * MS;
    let mut t = cool_from;
    while bus.servos()[0].telemetry().motor_temperature >= 80.0 {
        t += 100 * MS;
        bus.advance_to(t);
        assert!(t < cool_from + 10_000 * MS, "never cooled");
    }
    assert!(t > cool_from + 1_000 * MS, "cooled too fast: {}", t - cool_from);
    let t = t + 100 * MS;
    let _ = ask(&mut bus, &position(1, &hold(0.05), true), t);
    for k in 1..=20 {
        let st = ask(&mut bus, &position(1, &hold(0.05), true), t + k * 10 * MS).unwrap();
        assert_eq!((st.mode, st.fault), (Some(10), Some(0)), "cooled: runs again");
    }
    assert!(events(&mut bus).is_empty());
    assert_eq!(bus.stats().faults_latched, 2);
}

#[test]
fn an_overheat_from_the_config_heats_a_stopped_servo_without_faulting_it() {
    let at = 200 * MS;
    let mut s = Servo::new(ServoConfig { overheat_at_ns: Some(at), ..ServoConfig::new(1) });
    assert!(s.telemetry().overheat.is_armed());
    s.advance_to(0);
    s.advance_to(at - MS);
    assert!(s.telemetry().motor_temperature < 25.1);
    s.advance_to(at + OVERHEAT_RAMP_NS);
    let tel = s.telemetry();
    assert!(tel.motor_temperature >= 80.0, "{tel:?}");
    assert_eq!((tel.mode, tel.fault, tel.faults_latched), (0, 0, 0), "stopped: no fault");
    assert!(tel.overheat.is_triggered());
    // Driving it while hot faults it at once.
    let _ = exchange(&mut s, &position(1, &hold(0.0), true), at + OVERHEAT_RAMP_NS + MS);
    let st = exchange(&mut s, &query(1), at + OVERHEAT_RAMP_NS + 2 * MS);
    assert_eq!((st.mode, st.fault), (Some(1), Some(38)));
    // Rescheduling re-arms; cancelling stops it.
    s.schedule_overheat(10_000 * MS);
    assert!(s.overheat_state().is_armed());
    s.cancel_overheat();
    assert_eq!(s.overheat_state(), OverheatState::Off);
}

#[test]
fn fault_latches_are_logged_even_when_not_injected() {
    let mut bus = bus_with(BusConfig::default(), &[1, 2]);
    let _ = ask(&mut bus, &position(2, &hold(0.0), true), 0);
    bus.servo_mut(2).unwrap().inject_heat(5_000.0);
    let mut t = 0;
    while bus.servos()[1].mode() != 1 {
        t += 10 * MS;
        let _ = ask(&mut bus, &position(2, &hold(0.0), true), t);
        assert!(t < 2_000 * MS);
    }
    let ev: Vec<_> = bus.drain_events_vec();
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].servo, ev[0].kind), (Some(2), InjectedKind::FaultLatched { code: 38 }));
    assert_eq!(bus.stats().overheats_started, 0);
}

trait DrainVec {
    fn drain_events_vec(&mut self) -> Vec<InjectedEvent>;
}

impl DrainVec for SimBus {
    fn drain_events_vec(&mut self) -> Vec<InjectedEvent> {
        let mut v = Vec::new();
        let mut push = |e| v.push(e);
        self.drain_events(&mut push);
        v
    }
}
