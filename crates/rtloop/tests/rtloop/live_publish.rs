//! Live publishing through the public API: a publisher of one's own gets the cycles of its
//! decimation and every event, and the operator's remote commands (hold at zero velocity,
//! re-arm, stop) reach the servos — checked in lockstep, where cycle indices are exact.

use rtloop::live::{EventMsg, LiveCycle, LiveRobot, LiveSink, LiveStats, RemoteCommand, RemoteControl};
use rtloop::{Controller, Failure, Flow, Output, PositionCommand, Runtime, ServoCommand, State};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Seen {
    robot: Option<LiveRobot>,
    /// (index, command mode of every servo)
    cycles: Vec<(u64, Vec<u8>)>,
    events: Vec<String>,
}

struct Recorder(Arc<Mutex<Seen>>);

impl LiveSink for Recorder {
    fn start(&mut self, robot: &LiveRobot) {
        self.0.lock().unwrap().robot = Some(robot.clone());
    }
    fn cycle(&mut self, cycle: &LiveCycle<'_>) {
        let modes = cycle.servos.iter().map(|s| s.command_mode).collect();
        self.0.lock().unwrap().cycles.push((cycle.timing.index, modes));
    }
    fn event(&mut self, _stamp_us: i64, event: &EventMsg<'_>) {
        self.0.lock().unwrap().events.push(event.kind.to_string());
    }
    fn stats(&self) -> LiveStats {
        let seen = self.0.lock().unwrap();
        LiveStats { sink: "recorder".into(), cycles: seen.cycles.len() as u64, ..Default::default() }
    }
}

/// Holds every joint where it is, and plays the operator at given cycles.
struct Operator {
    remote: Arc<RemoteControl>,
    script: Vec<(u64, RemoteCommand)>,
}

impl Controller for Operator {
    type Telemetry = ();
    fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, ()>) -> Result<Flow, Failure> {
        for (at, command) in &self.script {
            if *at == state.cycle {
                self.remote.request(*command);
            }
        }
        for i in 0..state.servos.len() {
            out.set(
                i,
                ServoCommand::Position(PositionCommand { position: None, velocity: Some(0.0), ..Default::default() }),
            );
        }
        Ok(Flow::Continue)
    }
}

fn lockstep(duration_s: f64) -> Runtime {
    let mut runtime = Runtime::new().duration_s(duration_s);
    runtime.config_mut().sim.lockstep = true;
    runtime
}

#[test]
fn a_publisher_gets_the_cycles_of_its_decimation_and_every_event() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let runtime = lockstep(0.2).publish(Recorder(Arc::clone(&seen)), 10);
    let remote = runtime.remote_control();
    let summary = runtime.run(Operator { remote, script: vec![] }).unwrap();
    assert_eq!(summary.cycles, 200);
    let seen = seen.lock().unwrap();
    let robot = seen.robot.as_ref().expect("started");
    assert_eq!(robot.servos.len(), 12);
    assert_eq!(robot.rate_hz, 1000.0);
    let indices: Vec<u64> = seen.cycles.iter().map(|c| c.0).filter(|&i| i < 200).collect();
    assert_eq!(indices, (0..200).step_by(10).collect::<Vec<_>>(), "every 10th cycle, by index");
    assert!(seen.cycles.iter().all(|c| c.0 % 10 == 0 && c.1.len() == 12));
    assert!(seen.events.iter().any(|e| e == "shutdown"), "{:?}", seen.events);
    let live = summary.live.as_ref().expect("a live summary");
    assert_eq!(live.publishers.len(), 1);
    assert_eq!(live.publishers[0].cycles, seen.cycles.len() as u64);
    assert_eq!(live.handoff_dropped, 0);
}

#[test]
fn remote_zero_velocity_holds_every_servo_until_rearm_and_stop_ends_the_run() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let runtime = lockstep(1.0).publish(Recorder(Arc::clone(&seen)), 1);
    let remote = runtime.remote_control();
    let script = vec![(50, RemoteCommand::ZeroVelocity), (100, RemoteCommand::Rearm), (150, RemoteCommand::Stop)];
    let summary = runtime.run(Operator { remote, script }).unwrap();
    assert!(summary.interrupted, "the remote stop ends the run early");
    assert!((150..160).contains(&summary.cycles), "{} cycles", summary.cycles);
    let seen = seen.lock().unwrap();
    let modes_at = |i: u64| seen.cycles.iter().find(|c| c.0 == i).map(|c| c.1.clone()).unwrap();
    assert!(modes_at(49).iter().all(|&m| m == 10), "{:?}", modes_at(49));
    for i in 50..100 {
        assert!(modes_at(i).iter().all(|&m| m == 12), "cycle {i}: {:?}", modes_at(i));
    }
    assert!(modes_at(100).iter().all(|&m| m == 10), "re-armed: {:?}", modes_at(100));
    let kinds: Vec<&str> = summary.events.iter().map(|e| e.kind.as_str()).collect();
    for k in ["remote_zero_velocity", "remote_rearm", "remote_stop", "shutdown"] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
        assert!(seen.events.iter().any(|e| e == k), "the publisher did not get {k}: {:?}", seen.events);
    }
    assert_eq!(summary.live.as_ref().unwrap().remote_commands, 3);
}

#[test]
fn without_publishers_there_is_no_live_summary() {
    let summary = lockstep(0.05).run(Operator { remote: Arc::new(RemoteControl::new()), script: vec![] }).unwrap();
    assert!(summary.live.is_none());
}
