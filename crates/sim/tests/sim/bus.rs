//! The simulated bus: arbitration order, wire timing, queues, events, and the model.

use crate::common::*;
use rtloop_proto::frame::CanFdFrame;
use rtloop_proto::host::{decode_reply, PositionCommand, ServoState};
use rtloop_sim::model::{predict, CycleModel};
use rtloop_sim::{frame_time_ns, BusConfig, BusFull, Servo, ServoConfig, SimBus};

fn bus_with(cfg: BusConfig, ids: &[u8]) -> SimBus {
    let mut bus = SimBus::new(cfg);
    for &id in ids {
        bus.add_servo(Servo::new(ServoConfig::new(id)));
    }
    bus.enable_trace(32);
    bus
}

fn cmd() -> PositionCommand {
    PositionCommand { position: Some(0.0), velocity: Some(0.0), feedforward_torque: Some(0.0), ..Default::default() }
}

#[test]
fn replies_overtake_queued_commands() {
    // Turnaround (50 µs) shorter than any frame: c1 c2 r1 r2 c3 r3, wire never idle but
    // for the last turnaround.
    let cfg = BusConfig::default();
    let mut bus = bus_with(cfg, &[1, 2, 3]);
    let frames: Vec<CanFdFrame> = (1..=3).map(|id| position_comprehensive(id, &cmd())).collect();
    for f in &frames {
        bus.submit(f, 0).unwrap();
    }
    let replies = run_to_idle(&mut bus);
    let order: Vec<u32> = bus.trace().map(|r| r.id).collect();
    assert_eq!(order, vec![0x8001, 0x8002, 0x0100, 0x0200, 0x8003, 0x0300]);
    assert_eq!(replies.iter().map(|(f, _)| f.id).collect::<Vec<_>>(), vec![0x100, 0x200, 0x300]);

    let wire: u64 = bus.trace().map(|r| r.end_ns - r.start_ns).sum();
    let sum_of_frames: u64 = frames.iter().map(|f| frame_time_ns(f, 1_000_000, 5_000_000)).sum::<u64>()
        + replies.iter().map(|(f, _)| frame_time_ns(f, 1_000_000, 5_000_000)).sum::<u64>();
    assert_eq!(wire, sum_of_frames);
    let done = replies.last().unwrap().1;
    assert_eq!(done, sum_of_frames + cfg.turnaround_ns, "one exposed turnaround");
    assert_eq!(bus.stats().busy_ns, sum_of_frames);
    assert_eq!((bus.stats().host_frames, bus.stats().servo_frames), (3, 3));
    // Each reply is ready exactly a turnaround after its command ended.
    let trace: Vec<_> = bus.trace().copied().collect();
    for (c, r) in [(0, 2), (1, 3), (4, 5)] {
        assert_eq!(trace[r].ready_ns, trace[c].end_ns + cfg.turnaround_ns);
    }
    // The wire is busy back to back except before the last reply.
    for w in trace.windows(2).take(4) {
        assert_eq!(w[1].start_ns, w[0].end_ns);
    }
}

#[test]
fn a_turnaround_between_reply_and_command_time_lets_a_command_through() {
    // Long commands (64-byte payload), short replies, turnaround in between:
    // r2 is not ready when r1 ends, so c3 goes first: c1 c2 r1 c3 r2 r3.
    let cfg = BusConfig { turnaround_ns: 100_000, ..BusConfig::default() };
    let mut bus = bus_with(cfg, &[1, 2, 3]);
    let mut payload = vec![0x11, 0x00]; // read mode (int8)
    payload.resize(64, 0x50);
    for id in 1..=3 {
        bus.submit(&raw(id, &payload), 0).unwrap();
    }
    let c = frame_time_ns(&raw(1, &payload), 1_000_000, 5_000_000);
    let replies = run_to_idle(&mut bus);
    let r = frame_time_ns(&replies[0].0, 1_000_000, 5_000_000);
    assert!(r < cfg.turnaround_ns && cfg.turnaround_ns < c, "r {r} c {c}");
    let order: Vec<u32> = bus.trace().map(|r| r.id).collect();
    assert_eq!(order, vec![0x8001, 0x8002, 0x0100, 0x8003, 0x0200, 0x0300]);
}

#[test]
fn replies_decode_and_servos_act_on_commands() {
    let mut bus = bus_with(BusConfig::default(), &[1, 2, 3]);
    let hold = PositionCommand { position: Some(0.1), watchdog_timeout: Some(f64::NAN), ..Default::default() };
    bus.submit(&position(2, &hold, true), 1_000).unwrap();
    let replies = run_to_idle(&mut bus);
    assert_eq!(replies.len(), 1);
    let mut st = ServoState::default();
    decode_reply(replies[0].0.payload(), &mut st).unwrap();
    assert_eq!(st.mode, Some(0), "reply shows the state before the command");
    bus.advance_to(2_000 * MS);
    let s2 = &bus.servos()[1];
    assert_eq!((s2.id(), s2.mode()), (2, 10));
    assert!((s2.position() - 0.1).abs() < 0.02);
    assert_eq!(bus.servos()[0].mode(), 0);
    assert_eq!(bus.servo_mut(3).unwrap().telemetry().frames_received, 0);
    assert!(bus.servo_mut(4).is_none());
}

#[test]
fn broadcast_reaches_every_servo_and_all_answer() {
    let mut bus = bus_with(BusConfig::default(), &[1, 2, 3]);
    bus.submit(&query(0x7F), 0).unwrap();
    let replies = run_to_idle(&mut bus);
    assert_eq!(replies.iter().map(|(f, _)| f.id).collect::<Vec<_>>(), vec![0x100, 0x200, 0x300]);
}

#[test]
fn absent_servo_never_answers() {
    let mut bus = bus_with(BusConfig::default(), &[1, 2, 3]);
    bus.submit(&query(9), 0).unwrap();
    assert!(run_to_idle(&mut bus).is_empty());
    assert_eq!(bus.poll_rx(10 * MS), None);
    assert_eq!(bus.stats().host_frames, 1);
    assert_eq!(bus.next_event_ns(), None);
    assert!(bus.is_idle());
}

#[test]
fn submit_on_a_full_queue_is_refused() {
    let cfg = BusConfig { queue_capacity: 2, ..BusConfig::default() };
    let mut bus = bus_with(cfg, &[1]);
    // The first frame goes on the wire at the second submit, so three fit.
    assert_eq!(bus.submit(&query(1), 0), Ok(()));
    assert_eq!(bus.submit(&query(1), 0), Ok(()));
    assert_eq!(bus.submit(&query(1), 0), Ok(()));
    assert_eq!(bus.submit(&query(1), 0), Err(BusFull));
    let replies = run_to_idle(&mut bus);
    assert_eq!(replies.len(), 3);
}

#[test]
fn rx_overflow_is_counted() {
    let cfg = BusConfig { queue_capacity: 2, ..BusConfig::default() };
    let mut bus = bus_with(cfg, &[1, 2, 3]);
    for id in 1..=3 {
        bus.submit(&query(id), 0).unwrap();
    }
    bus.advance_to(10 * MS);
    assert_eq!(bus.stats().rx_dropped, 1);
    assert_eq!(bus.rx_len(), 2);
    assert_eq!(bus.drain_rx(), 2);
    assert!(bus.is_idle());
}

#[test]
fn adapter_latency_delays_the_start_and_poll_respects_now() {
    let cfg = BusConfig { adapter_latency_ns: 30_000, ..BusConfig::default() };
    let mut bus = bus_with(cfg, &[1]);
    let q = query(1);
    bus.submit(&q, 1_000_000).unwrap();
    assert_eq!(bus.next_event_ns(), Some(1_030_000));
    let c = frame_time_ns(&q, 1_000_000, 5_000_000);
    bus.advance_to(1_030_000);
    assert_eq!(bus.next_event_ns(), Some(1_030_000 + c));
    let end_of_reply = {
        let mut probe = bus.clone();
        run_to_idle(&mut probe)[0].1
    };
    assert_eq!(bus.poll_rx(end_of_reply - 1), None);
    assert!(bus.poll_rx(end_of_reply).is_some());
    // Time going backwards does nothing.
    bus.advance_to(0);
    assert!(bus.is_idle());
}

#[test]
fn the_same_scenario_is_deterministic() {
    let run = || {
        let mut bus = bus_with(BusConfig::default(), &[1, 2, 3]);
        let mut log = Vec::new();
        for cycle in 0..50u64 {
            let t = cycle * MS;
            for id in 1..=3 {
                bus.submit(&position_comprehensive(id, &cmd()), t).unwrap();
            }
            while let Some((f, end)) = bus.poll_rx_stamped(t + 900_000) {
                log.push((f.id, end, f.payload().to_vec()));
            }
        }
        (log, bus.stats())
    };
    assert_eq!(run(), run());
}

#[test]
fn model_predicts_the_default_quadruped_within_ten_percent() {
    let (mut buses, _imu) = rtloop_sim::default_quadruped();
    let sample = position_comprehensive(1, &cmd());
    let mut probe = Servo::new(ServoConfig::new(1));
    let reply = reply_of(&mut probe, &sample, 0);
    let unpadded_reply = {
        // Strip the 0x50 padding to get the reply's content length.
        let p = reply.payload();
        p.len() - p.iter().rev().take_while(|&&b| b == 0x50).count()
    };
    let mut model = CycleModel::default_quadruped().wire_only();
    model.command_bytes = sample.len as usize;
    model.reply_bytes = unpadded_reply;
    assert!((24..=28).contains(&model.command_bytes), "{}", model.command_bytes);
    assert!((23..=27).contains(&model.reply_bytes), "{}", model.reply_bytes);

    let mut actual = 0;
    for (b, bus) in buses.iter_mut().enumerate() {
        for k in 1..=3u8 {
            bus.submit(&position_comprehensive(b as u8 * 3 + k, &cmd()), 0).unwrap();
        }
        let replies = run_to_idle(bus);
        assert_eq!(replies.len(), 3);
        actual = actual.max(replies.last().unwrap().1);
    }
    let predicted = predict(&model).bus_total_ns();
    let err = (predicted as f64 - actual as f64).abs() / actual as f64;
    println!(
        "predicted {predicted} ns, simulated {actual} ns ({:+.2}%)",
        (predicted as f64 / actual as f64 - 1.0) * 100.0
    );
    assert!(err < 0.10, "predicted {predicted} ns, simulated {actual} ns ({:.1}%)", err * 100.0);
    // And with the exact stuffing of real frames it is much closer than that.
    assert!(err < 0.03, "predicted {predicted} ns, simulated {actual} ns ({:.1}%)", err * 100.0);
}

#[test]
fn real_frames_stuff_about_as_the_model_assumes() {
    let assumed = CycleModel::default_quadruped().stuff_fraction;
    let mut total = 0.0;
    let mut n = 0.0;
    for pos in [0.0, 0.123, -0.77, 3.3, 12.5, -0.001] {
        let c = position_comprehensive(1, &PositionCommand { position: Some(pos), ..cmd() });
        let mut s = Servo::new(ServoConfig::new(1));
        s.advance_to(0);
        s.set_position(pos);
        let _ = reply_of(&mut s, &c, MS);
        let r = reply_of(&mut s, &c, 2 * MS);
        for (f, content) in [(c, c.len as usize), (r, 25)] {
            // The model's representative frame: same id and length, content of 0x55.
            let mut neutral = f;
            neutral.data[..content].fill(0x55);
            let extra = rtloop_sim::frame_bits(&f).dynamic_stuff_bits as f64
                - rtloop_sim::frame_bits(&neutral).dynamic_stuff_bits as f64;
            let fraction = extra / (8.0 * content as f64);
            assert!((0.08..0.20).contains(&fraction), "pos {pos}: {fraction}");
            total += fraction;
            n += 1.0;
        }
    }
    assert!((total / n - assumed).abs() < 0.02, "mean {} vs assumed {assumed}", total / n);
}

#[test]
fn default_quadruped_layout() {
    let (buses, mut imu) = rtloop_sim::default_quadruped();
    let ids: Vec<Vec<u8>> = buses.iter().map(|b| b.servos().iter().map(|s| s.id()).collect()).collect();
    assert_eq!(ids, vec![vec![1, 2, 3], vec![4, 5, 6], vec![7, 8, 9], vec![10, 11, 12]]);
    assert_eq!(*buses[0].config(), BusConfig::default());
    let q = imu.sample(0).quaternion;
    assert!((q.iter().map(|c| c * c).sum::<f64>() - 1.0).abs() < 1e-12);
}

proptest::proptest! {
    #[test]
    fn random_traffic_never_panics_and_always_drains(
        frames in proptest::collection::vec(
            (proptest::prelude::any::<u32>(), proptest::collection::vec(proptest::prelude::any::<u8>(), 0..=64),
             0u64..300_000, proptest::prelude::any::<bool>()),
            1..40,
        )
    ) {
        let cfg = BusConfig { queue_capacity: 8, ..BusConfig::default() };
        let mut bus = bus_with(cfg, &[1, 2, 3]);
        let mut t = 0;
        for (id, payload, dt, fd) in frames {
            t += dt;
            let mut f = CanFdFrame::new(id & 0x1FFF_FFFF, &payload).unwrap();
            f.flags.fd = fd || payload.len() > 8;
            let _ = bus.submit(&f, t);
            let _ = bus.poll_rx(t);
        }
        let _ = run_to_idle(&mut bus);
        proptest::prop_assert!(bus.is_idle());
        let s = bus.stats();
        proptest::prop_assert!(s.busy_ns > 0 && s.bits > 0);
    }
}
