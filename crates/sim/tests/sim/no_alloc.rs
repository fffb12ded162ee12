//! The per-frame paths never allocate: counted with a global allocator that tallies the
//! allocations made on the test's own thread while counting is switched on.

use crate::common::*;
use rtloop_proto::frame::CanFdFrame;
use rtloop_proto::host::PositionCommand;

#[test]
fn cycles_on_the_default_quadruped_do_not_allocate() {
    let (mut buses, mut imu) = rtloop_sim::default_quadruped();
    for bus in &mut buses {
        bus.enable_trace(8);
    }
    let cmd = PositionCommand { position: Some(0.1), velocity: Some(0.0), ..Default::default() };
    let frames: Vec<Vec<CanFdFrame>> =
        (0..4u8).map(|b| (1..=3u8).map(|k| position_comprehensive(b * 3 + k, &cmd)).collect()).collect();
    let junk = raw(1, &[0x1f, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x0d, 0x00, 0x05]);

    rtloop_testkit::start_counting();
    let mut received = 0;
    for cycle in 0..200u64 {
        let t0 = cycle * MS;
        for (bus, fs) in buses.iter_mut().zip(&frames) {
            for f in fs {
                bus.submit(f, t0).unwrap();
            }
        }
        bus_submit_junk(&mut buses[0], &junk, t0);
        let _ = imu.sample(t0);
        for bus in &mut buses {
            while let Some(t) = bus.next_event_ns() {
                if t > t0 + 950_000 {
                    break;
                }
                while bus.poll_rx(t).is_some() {
                    received += 1;
                }
            }
        }
    }
    let mut servo = rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(1));
    let mut reply = CanFdFrame::default();
    for k in 0..100u64 {
        let _ = servo.handle_frame(&frames[0][0], k * MS, &mut reply);
        let _ = servo.handle_frame(&junk, k * MS, &mut reply);
        let _ = servo.telemetry();
    }
    let allocations = rtloop_testkit::stop_counting();

    assert_eq!(allocations, 0);
    assert!(received >= 200 * 12, "{received}");
}

#[test]
fn cycles_with_injected_faults_do_not_allocate() {
    let cfg = rtloop_sim::BusConfig {
        drop_rate: 0.2,
        corrupt_rate: 0.1,
        reply_delay_ns: 20_000,
        fault_seed: 7,
        ..rtloop_sim::BusConfig::default()
    };
    let mut buses: Vec<rtloop_sim::SimBus> = (0..4u8)
        .map(|b| {
            let mut bus = rtloop_sim::SimBus::new(cfg);
            for k in 1..=3u8 {
                bus.add_servo(rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(b * 3 + k)));
            }
            bus.enable_trace(8);
            bus
        })
        .collect();
    // Servo 1 overheats and faults while the loop runs; its events go through the log.
    assert!(buses[0].schedule_overheat(1, 20 * MS));
    let cmd = PositionCommand { position: Some(0.1), velocity: Some(0.0), ..Default::default() };
    let frames: Vec<Vec<CanFdFrame>> =
        (0..4u8).map(|b| (1..=3u8).map(|k| position_comprehensive(b * 3 + k, &cmd)).collect()).collect();
    let junk = raw(1, &[0x1f, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x0d, 0x00, 0x05]);

    rtloop_testkit::start_counting();
    let mut received = 0u64;
    let mut events = 0usize;
    let mut latched = 0usize;
    for cycle in 0..400u64 {
        let t0 = cycle * MS;
        for (bus, fs) in buses.iter_mut().zip(&frames) {
            for f in fs {
                bus.submit(f, t0).unwrap();
            }
        }
        bus_submit_junk(&mut buses[0], &junk, t0);
        for bus in &mut buses {
            while let Some(t) = bus.next_event_ns() {
                if t > t0 + 950_000 {
                    break;
                }
                while bus.poll_rx(t).is_some() {
                    received += 1;
                }
            }
            events += bus.drain_events(|e| {
                if matches!(e.kind, rtloop_sim::InjectedKind::FaultLatched { .. }) {
                    latched += 1;
                }
            });
            let _ = bus.pop_event();
            let _ = bus.stats();
        }
    }
    let allocations = rtloop_testkit::stop_counting();

    assert_eq!(allocations, 0);
    let lost: u64 = buses.iter().map(|b| b.stats().frames_dropped_injected + b.stats().frames_corrupted_injected).sum();
    assert!(lost > 400, "{lost}");
    assert!(received > 400 * 12 / 3 && received < 400 * 12, "{received}");
    assert!(events > 0);
    assert_eq!(latched, 1);
    assert_eq!(buses[0].servos()[0].mode(), 1);
}

fn bus_submit_junk(bus: &mut rtloop_sim::SimBus, junk: &CanFdFrame, t: u64) {
    bus.submit(junk, t).unwrap();
}
