//! Host cost of one robot cycle: 12 position commands encoded, handed to four in-process
//! simulated buses, every servo's physics and reply computed, 12 replies decoded, the IMU
//! read. Runs on the virtual clock, so no time is spent waiting for simulated wires: what
//! is measured is CPU work only (host side plus the simulator's own work, an upper bound on
//! the host's share).
//!
//! `cargo bench -p rtloop-io --bench cycle`; `cycle host-only N` runs only the host
//! overhead for N cycles (for callgrind: instructions per cycle are the difference of two
//! runs over the difference of their N).
//!
//! Host overhead, 12 servos / 4 instant buses, this 2-core VM under load (p50, three
//! interleaved runs each; callgrind instructions per cycle):
//! * before reply tags (abe2446): 4.23–4.39 µs, 69.3 k instructions;
//! * with reply tags and late-reply bookkeeping (57a042a): 4.47–4.74 µs, 77.3 k — the bench
//!   is unchanged (it measures the same command and reply), the cycle grew: the codec's
//!   share stayed put (`encode_position` 34.6 k → 34.9 k per cycle) and ~8 k more
//!   instructions went into `Robot::cycle`'s per-servo tag and late-reply accounting (its
//!   own body alone 0.75 k → 2.7 k);
//! * with the faster codec: 2.83–2.87 µs, 52.8 k — 21 k in `encode_position`, 15 k in
//!   `decode_reply` (its 0x50 padding included), 16 k in the cycle and tag bookkeeping.

use rtloop_io::{Clock, MonotonicClock, RobotConfig, ServoCommand, ServoReply, VirtualClock};
use rtloop_proto::host::PositionCommand;

fn main() {
    // `cycle host-only N`: only the host overhead, N cycles (for callgrind).
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    if let [mode, n] = args.as_slice() {
        assert_eq!(mode, "host-only", "usage: cycle [host-only N]");
        host_overhead(&MonotonicClock::default(), n.parse().expect("N is a count of cycles"));
        return;
    }
    let clock = VirtualClock::new(0);
    let mut robot = rtloop_simrobot::quadruped(clock.clone(), RobotConfig::default()).expect("robot").0;
    let mut replies = [ServoReply::default(); 12];
    let mut imu = Default::default();
    let wall = MonotonicClock::default();
    let mut samples = Vec::with_capacity(20_000);
    for k in 0..20_000u64 {
        let commands = [position_command(0.01 * (k % 100) as f64); 12];
        let t0 = wall.now_ns();
        let report = robot.cycle(&commands, &mut replies, &mut imu);
        samples.push(wall.now_ns() - t0);
        assert_eq!(report.missing, 0);
        clock.advance_ns(1_000_000);
    }
    report("robot cycle incl. simulator physics, 12 servos / 4 buses", &mut samples);

    // The host's own share per frame: encode one command (padded) and decode one reply.
    let config = RobotConfig::default();
    let spec = robot.servos()[0];
    let cmd =
        ServoCommand::Position(PositionCommand { position: Some(0.1), velocity: Some(0.0), ..Default::default() });
    let mut frame = rtloop_proto::CanFdFrame::default();
    let mut servo = rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(1));
    let mut reply = rtloop_proto::CanFdFrame::default();
    rtloop_io::robot::encode_command(&config, spec, &cmd, &mut frame).expect("encode");
    assert!(servo.handle_frame(&frame, 0, &mut reply));
    let mut per_frame = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let t0 = wall.now_ns();
        for _ in 0..100 {
            rtloop_io::robot::encode_command(&config, spec, std::hint::black_box(&cmd), &mut frame).expect("encode");
            let mut state = rtloop_proto::host::ServoState::default();
            rtloop_proto::host::decode_reply(std::hint::black_box(reply.payload()), &mut state).expect("decode");
            std::hint::black_box(&state);
        }
        per_frame.push((wall.now_ns() - t0) / 100);
    }
    report("host encode + decode of one servo's frames", &mut per_frame);
    host_overhead(&wall, 50_000);
}

/// A bus that answers every command at once with a reply recorded beforehand from a real
/// simulated servo: no wire, no physics — what remains is the host's own work.
struct InstantBus {
    replies: [Option<rtloop_proto::CanFdFrame>; 128],
    pending: [rtloop_proto::CanFdFrame; 8],
    len: usize,
}

impl rtloop_io::Transport for InstantBus {
    fn name(&self) -> &str {
        "instant"
    }
    fn send(&mut self, frame: &rtloop_proto::CanFdFrame, _: u64) -> Result<(), rtloop_io::TransportError> {
        let id = (frame.id & 0x7f) as usize;
        if let Some(r) = self.replies[id] {
            if self.len < self.pending.len() {
                self.pending[self.len] = r;
                self.len += 1;
            }
        }
        Ok(())
    }
    fn recv(&mut self, _: u64) -> Result<Option<rtloop_proto::CanFdFrame>, rtloop_io::TransportError> {
        if self.len == 0 {
            return Ok(None);
        }
        self.len -= 1;
        Ok(Some(self.pending[self.len]))
    }
}

/// Host overhead of one robot cycle: 12 servos on 4 instant buses.
fn host_overhead(wall: &MonotonicClock, cycles: usize) {
    let config = RobotConfig::default();
    let cmd = position_command(0.1);
    let mut buses: Vec<Box<dyn rtloop_io::Transport>> = Vec::new();
    let mut servos = Vec::new();
    for b in 0..4usize {
        let mut bus = InstantBus { replies: [None; 128], pending: [rtloop_proto::CanFdFrame::default(); 8], len: 0 };
        for k in 1..=3u8 {
            let id = b as u8 * 3 + k;
            let spec = rtloop_io::ServoSpec { bus: b, id };
            let mut frame = rtloop_proto::CanFdFrame::default();
            rtloop_io::robot::encode_command(&config, spec, &cmd, &mut frame).expect("encode");
            let mut servo = rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(id));
            let mut reply = rtloop_proto::CanFdFrame::default();
            assert!(servo.handle_frame(&frame, 0, &mut reply));
            bus.replies[id as usize] = Some(reply);
            servos.push(spec);
        }
        buses.push(Box::new(bus));
    }
    let clock = VirtualClock::new(0);
    let mut robot = rtloop_io::Robot::new(buses, servos, None, clock, config).expect("robot");
    let commands = [cmd; 12];
    let mut replies = [ServoReply::default(); 12];
    let mut imu = Default::default();
    let mut samples = Vec::with_capacity(cycles);
    for _ in 0..cycles {
        let t0 = wall.now_ns();
        let r = robot.cycle(&commands, &mut replies, &mut imu);
        samples.push(wall.now_ns() - t0);
        assert_eq!(r.missing, 0);
    }
    report("host overhead of one cycle, 12 servos / 4 instant buses (target < 10 µs)", &mut samples);
}

/// The command `rtloop run` sends every cycle, at `position`.
fn position_command(position: f64) -> ServoCommand {
    ServoCommand::Position(PositionCommand {
        position: Some(position),
        velocity: Some(0.0),
        kp_scale: Some(1.0),
        kd_scale: Some(1.0),
        feedforward_torque: Some(0.0),
        maximum_torque: Some(4.0),
        ..Default::default()
    })
}

fn report(what: &str, samples: &mut [u64]) {
    samples.sort_unstable();
    let pct = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    let mean = samples.iter().sum::<u64>() as f64 / samples.len() as f64 / 1000.0;
    println!("{what}: mean {mean:.3} µs  p50 {:.3}  p99 {:.3}  max {:.3} µs", pct(0.5), pct(0.99), pct(1.0));
}
