//! `rtloop budget`: the cycle-time model of the built-in robot, term by term — the
//! "spreadsheet" of the source posts, fed with the frames `rtloop run` really sends.
//!
//! The frame sizes are not assumed: the command is encoded exactly as the run loop encodes
//! it, and the reply is what a simulated servo answers to it. Host costs are those of the
//! in-process simulator (no SPI or USB hop between host and bus), and the IMU read costs
//! nothing extra because the cycle reads it while the replies are on the wires.

use io::{RobotConfig, ServoCommand, ServoSpec};
use proto::CanFdFrame;
use serde_json::json;
use sim::model::{predict, CycleModel, Prediction};

/// Host cost to encode one command, hand it to an in-process bus and decode its reply, ns.
/// `cargo bench -p rtloop-io --bench cycle` measures encode + decode at about 0.33 µs (p50)
/// on the development machine; 1 µs leaves room for the hand-over and a cold cache.
pub const IN_PROCESS_HOST_PER_FRAME_NS: u64 = 1_000;

/// The command frame `rtloop run` sends servo `id` on bus index 0 (a position command of
/// the default motion with the robot's query), padded as on the wire.
pub fn run_command_frame(id: u8) -> Option<CanFdFrame> {
    let config = RobotConfig::default();
    let mut commands = [ServoCommand::Query; 1];
    let mut motion = crate::motion::Motion::from_config(&crate::config::RunConfig::default());
    motion.set_start([0.0].into_iter());
    motion.fill(2.0, &mut commands);
    let mut command = CanFdFrame::default();
    let spec = ServoSpec { bus: 0, id };
    io::robot::encode_command(&config, spec, &commands[0], &mut command).ok()?;
    Some(command)
}

/// Payload sizes (before padding) of the run loop's command and of the servo's reply.
pub fn default_frame_sizes() -> (usize, usize) {
    let Some(command) = run_command_frame(1) else {
        return (0, 0);
    };
    let unpadded = unpadded_len(&command);
    let mut servo = sim::Servo::new(sim::ServoConfig::new(1));
    let mut reply = CanFdFrame::default();
    let reply_len = if servo.handle_frame(&command, 0, &mut reply) { unpadded_len(&reply) } else { 0 };
    (unpadded, reply_len)
}

/// Length without the trailing 0x50 padding (a NOP can only be padding at the very end).
fn unpadded_len(f: &CanFdFrame) -> usize {
    let p = f.payload();
    p.len() - p.iter().rev().take_while(|&&b| b == proto::frame::PAD_BYTE).count()
}

/// The model of the built-in robot as `rtloop run` drives it.
pub fn default_model() -> CycleModel {
    model_for(&crate::robot_spec::RobotSpec::default_quadruped())
}

/// The model of `robot` as `rtloop run` drives it: its servos per bus, the real frame
/// sizes, and the in-process host costs (for buses behind a device, the wire terms still
/// hold; the device's own latency is not in the model).
pub fn model_for(robot: &crate::robot_spec::RobotSpec) -> CycleModel {
    let (command_bytes, reply_bytes) = default_frame_sizes();
    CycleModel {
        servos_per_bus: robot.buses.iter().map(|b| b.servos.len()).collect(),
        command_bytes,
        reply_bytes,
        host_per_frame_ns: IN_PROCESS_HOST_PER_FRAME_NS,
        host_fixed_ns: 0,
        imu_read_ns: 0,
        ..CycleModel::default_quadruped()
    }
}

/// The prediction for the built-in robot.
pub fn default_prediction() -> Prediction {
    predict(&default_model())
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The table `rtloop budget` prints.
pub fn render_table() -> String {
    let m = default_model();
    let p = predict(&m);
    let mut s = String::new();
    s += &format!(
        "cycle-time model: {} servos on {} buses, {}/{} Mbit/s, turnaround {:.0} µs\n",
        m.servos_per_bus.iter().sum::<usize>(),
        m.servos_per_bus.len(),
        m.nominal_bitrate as f64 / 1e6,
        m.data_bitrate as f64 / 1e6,
        us(m.turnaround_ns)
    );
    s += &format!("command {} B, reply {} B (before padding)\n\n", m.command_bytes, m.reply_bytes);
    for b in &p.buses {
        s += &format!(
            "bus {} ({} servos){}\n",
            b.bus,
            b.servos,
            if b.bus == p.critical_bus + 1 { "  ← slowest" } else { "" }
        );
        for t in &b.terms {
            s += &format!("  {:<16} {:>8.1} µs  {}\n", t.name, us(t.ns), t.explanation);
        }
        s += &format!("  {:<16} {:>8.1} µs\n", "bus total", us(b.total_ns));
    }
    s += "\ncycle\n";
    for t in &p.terms {
        s += &format!("  {:<16} {:>8.1} µs  {}\n", t.name, us(t.ns), t.explanation);
    }
    s += &format!("  {:<16} {:>8.1} µs  → at most {:.0} Hz\n", "total", us(p.total_ns), 1e9 / p.total_ns.max(1) as f64);
    s
}

/// The same as one JSON object.
pub fn render_json() -> String {
    let m = default_model();
    let p = predict(&m);
    let terms: Vec<_> =
        p.terms.iter().map(|t| json!({"name": t.name, "us": us(t.ns), "explanation": t.explanation})).collect();
    let buses: Vec<_> = p
        .buses
        .iter()
        .map(|b| {
            json!({"bus": b.bus, "servos": b.servos, "total_us": us(b.total_ns),
                   "terms": b.terms.iter().map(|t| json!({"name": t.name, "us": us(t.ns), "explanation": t.explanation})).collect::<Vec<_>>()})
        })
        .collect();
    json!({
        "command_bytes": m.command_bytes, "reply_bytes": m.reply_bytes,
        "nominal_bitrate": m.nominal_bitrate, "data_bitrate": m.data_bitrate,
        "turnaround_us": us(m.turnaround_ns), "host_per_frame_us": us(m.host_per_frame_ns),
        "buses": buses, "terms": terms, "total_us": us(p.total_ns),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::robot_spec::{BusSpec, RobotSpec};

    /// When the last reply of `n` servos (ids 1..=n) on one simulated bus ends, all commands
    /// handed over at once — the frames `rtloop run` sends, on the bus `rtloop run` uses.
    fn simulated_bus_ns(n: u8) -> u64 {
        let mut bus = sim::SimBus::new(sim::BusConfig::default());
        for id in 1..=n {
            bus.add_servo(sim::Servo::new(sim::ServoConfig::new(id)));
            bus.submit(&run_command_frame(id).unwrap(), 0).unwrap();
        }
        let mut last = 0;
        let mut replies = 0;
        while let Some(t) = bus.next_event_ns() {
            while let Some((_, end)) = bus.poll_rx_stamped(t) {
                last = end;
                replies += 1;
            }
        }
        assert_eq!(replies, n);
        last
    }

    #[test]
    fn the_model_rtloop_run_reports_matches_the_simulated_bus_for_1_to_6_servos() {
        for n in 1..=6u8 {
            let robot = RobotSpec { buses: vec![BusSpec { bus: 1, uri: io::BusUri::Sim, servos: (1..=n).collect() }] };
            let predicted = predict(&model_for(&robot).wire_only()).bus_total_ns();
            let actual = simulated_bus_ns(n);
            // Only the frames' content stuffing is estimated (see sim::model): within 1 %.
            let err = predicted as f64 / actual as f64 - 1.0;
            assert!(
                err.abs() < 0.01,
                "{n} servos: model {predicted} ns, simulated {actual} ns ({:+.2} %)",
                err * 100.0
            );
        }
    }
}
