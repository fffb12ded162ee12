//! The cycle-time model against the simulated bus, servo count by servo count.
//!
//! Both run on a virtual time line, so this is arithmetic, not a timed assertion: the same
//! real frames (the default robot's position command with the comprehensive query, and a
//! servo's reply to it) go through [`SimBus`], and the model is told their sizes. The only
//! thing the model cannot know is how the frames' contents stuff (it assumes 13 % of the
//! content bits), so the two agree within a stated bound instead of to the nanosecond.

use crate::common::*;
use rtloop_proto::frame::CanFdFrame;
use rtloop_proto::host::PositionCommand;
use rtloop_sim::model::{predict, CycleModel};
use rtloop_sim::{BusConfig, Servo, ServoConfig, SimBus};

/// How far the model may be from the simulated bus: the content's stuff bits differ from
/// the assumed 13 % by at most a few bits per frame (0.2 µs each at 5 Mbit/s), i.e. well
/// under 1 % of a bus time; a misplaced turnaround (50 µs) is about 10 % for two servos.
const BOUND: f64 = 0.01;

fn cmd() -> PositionCommand {
    PositionCommand { position: Some(0.0), velocity: Some(0.0), feedforward_torque: Some(0.0), ..Default::default() }
}

fn unpadded_len(f: &CanFdFrame) -> usize {
    let p = f.payload();
    p.len() - p.iter().rev().take_while(|&&b| b == 0x50).count()
}

/// The bus `index` (0-based) of `buses` with `n` servos: host frame `j` is handed over at
/// `(j · buses + index + 1) · host_ns`, as the model assumes. Returns when its last reply ends.
fn simulated(n: u8, buses: u64, index: u64, turnaround_ns: u64, host_ns: u64) -> u64 {
    let first_id = index as u8 * n + 1;
    let ids: Vec<u8> = (first_id..first_id + n).collect();
    let mut bus = SimBus::new(BusConfig { turnaround_ns, ..BusConfig::default() });
    for &id in &ids {
        bus.add_servo(Servo::new(ServoConfig::new(id)));
    }
    for (j, &id) in ids.iter().enumerate() {
        bus.submit(&position_comprehensive(id, &cmd()), (j as u64 * buses + index + 1) * host_ns).unwrap();
    }
    let replies = run_to_idle(&mut bus);
    assert_eq!(replies.len(), usize::from(n));
    replies.iter().map(|r| r.1).max().unwrap()
}

fn model(servos_per_bus: Vec<usize>, turnaround_ns: u64, host_ns: u64) -> CycleModel {
    let sample = position_comprehensive(1, &cmd());
    let reply = reply_of(&mut Servo::new(ServoConfig::new(1)), &sample, 0);
    CycleModel {
        servos_per_bus,
        command_bytes: unpadded_len(&sample),
        reply_bytes: unpadded_len(&reply),
        turnaround_ns,
        host_per_frame_ns: host_ns,
        ..CycleModel::default_quadruped().wire_only()
    }
}

fn check(n: usize, buses: usize, turnaround_ns: u64, host_ns: u64) {
    let prediction = predict(&model(vec![n; buses], turnaround_ns, host_ns));
    for index in 0..buses {
        let predicted = prediction.buses[index].total_ns;
        let actual = simulated(n as u8, buses as u64, index as u64, turnaround_ns, host_ns);
        let err = predicted as f64 / actual as f64 - 1.0;
        assert!(
            err.abs() < BOUND,
            "{n} servos on bus {} of {buses}, turnaround {turnaround_ns} ns, host {host_ns} ns/frame: \
             model {predicted} ns, simulated bus {actual} ns ({:+.2} %)\n{prediction}",
            index + 1,
            err * 100.0
        );
    }
}

#[test]
fn the_model_matches_the_simulated_bus_for_1_to_6_servos() {
    for n in 1..=6 {
        check(n, 1, BusConfig::default().turnaround_ns, 0);
    }
}

#[test]
fn the_model_matches_the_simulated_bus_for_other_turnarounds() {
    // Shorter than nothing, shorter than a reply, between a reply and a command, longer
    // than two commands.
    for turnaround_ns in [0, 20_000, 100_000, 300_000] {
        for n in 1..=6 {
            check(n, 1, turnaround_ns, 0);
        }
    }
}

#[test]
fn the_model_matches_the_simulated_bus_with_round_robin_host_writes() {
    // A fast host (pi3hat-like 10 µs a frame) and one that starves the wire (100 µs a frame
    // over four buses is a pass of 400 µs, longer than a command).
    for host_ns in [10_000, 100_000] {
        for n in 1..=6 {
            check(n, 4, BusConfig::default().turnaround_ns, host_ns);
        }
    }
}
