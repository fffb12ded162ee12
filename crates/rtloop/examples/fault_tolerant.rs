//! # fault_tolerant — the controller, not the supervisor, decides what a fault means
//!
//! What it shows: with `safety.on_fault = "ignore"` the runtime's supervisor records a
//! fault but leaves the commands to the controller. Servo 5 (leg 2's hip) is made to
//! overheat one second in; it faults once its motor is hot enough, about 0.2 s later. The
//! controller watches [`State::events`] for [`EventKind::Fault`] and every servo's
//! [`rtloop::ServoStatus::faulted`], and then, in the same cycle:
//! * the faulted servo is only queried from then on — never stopped, which would clear its
//!   fault and hide it;
//! * the other joints of its leg are parked (zero velocity: they hold with damping);
//! * every other joint stops swaying and lowers the body to a crouch over one second.
//!
//! A fault on a second leg is more than it can handle (two legs do not hold the body): its
//! `cycle` then returns a [`Failure`](rtloop::Failure), and the runtime commands the safe
//! mode in that very cycle, ends the run, and reports `second_leg_faulted` (an event, the
//! summary's first problem, and `failure` in the summary).
//!
//! Run it: `cargo run --release --example fault_tolerant` (`-- --duration SECONDS`, 3 by
//! default).
//!
//! What to look for: `servo 5 faulted at 1.2 s …: leg 2 parked, …` and `fault handled`. The
//! run's status is `degraded` — a servo faulted, and the runtime never hides that — so this
//! example exits 0 when the controller handled the fault as planned, and 1 when the fault
//! never came (a run shorter than about 1.3 s) or was not handled.

use rtloop::config::{FaultsConfig, SafetyToml};
use rtloop::controller::EventKind;
use rtloop::motion::Motion;
use rtloop::{Controller, Failure, Flow, Output, PositionCommand, Runtime, ServoCommand, State};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

/// The most joints this controller drives (the runtime drives at most 32 servos).
const MAX_JOINTS: usize = 32;
/// The body lowered, per leg (abduction, hip, knee), rev, reached in `LOWER_S` seconds.
pub const CROUCH_POSE: [f64; 3] = [0.0, -0.15, 0.3];
pub const LOWER_S: f64 = 1.0;

/// What the controller did about the first fault it saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultReport {
    pub servo_id: u8,
    pub code: u8,
    pub at_s: f64,
    pub leg: usize,
    /// Fault events seen in `state.events`, and cycles run since the fault.
    pub events: u32,
    pub cycles_after: u64,
    /// Servos parked (the rest of the leg) and lowering the body.
    pub parked: usize,
    pub lowering: usize,
    /// The faulted servo still reports its fault at the end: it was never cleared.
    pub still_faulted: bool,
}

/// Stand and sway; on a fault, park the leg and lower the body on the other three.
pub struct FaultTolerant {
    motion: Motion,
    /// Servos seen faulted (latched: a faulted servo is never commanded again).
    faulted: [bool; MAX_JOINTS],
    /// The first fault, and where each joint's target was then (to lower the body from).
    first: Option<FaultReport>,
    lower_from: [f64; MAX_JOINTS],
    /// Filled in by `stop`, read by `main` once the run is over.
    pub report: Arc<Mutex<Option<FaultReport>>>,
}

impl Default for FaultTolerant {
    fn default() -> Self {
        let mut motion = Motion::default(); // stand up, then sway
        motion.watchdog_timeout = Some(0.1);
        FaultTolerant {
            motion,
            faulted: [false; MAX_JOINTS],
            first: None,
            lower_from: [f64::NAN; MAX_JOINTS],
            report: Arc::default(),
        }
    }
}

impl Controller for FaultTolerant {
    type Telemetry = ();

    fn start(&mut self, state: &State<'_>) -> Result<(), Failure> {
        self.motion.start(state)
    }

    fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, ()>) -> Result<Flow, Failure> {
        let n = state.servos.len().min(MAX_JOINTS);
        let fault_events = state.events.iter().filter(|e| matches!(e.kind, EventKind::Fault { .. })).count();
        for (i, servo) in state.servos.iter().enumerate().take(n) {
            if servo.faulted() && !self.faulted[i] {
                self.faulted[i] = true;
                match self.first.map(|first| first.leg) {
                    None => {
                        self.first = Some(self.react(i, servo.id, servo.state.fault.unwrap_or(0), state.time_s, out))
                    }
                    // A second leg: more than this controller can stand on. The safe stop.
                    Some(leg) if leg != i / 3 + 1 => {
                        let what = "a servo of a second leg faulted, and two legs cannot hold the body";
                        let fix = "let the servos cool down, and check their cooling and load";
                        return Err(Failure::new("second_leg_faulted", what, fix).servo(i));
                    }
                    Some(_) => {}
                }
            }
        }
        let Some(first) = self.first.as_mut() else { return self.motion.cycle(state, out) };
        first.events += fault_events as u32;
        first.cycles_after += 1;
        let x = ((state.time_s - first.at_s) / LOWER_S).clamp(0.0, 1.0);
        let s = x * x * (3.0 - 2.0 * x); // smoothstep; its slope is 6x(1 − x)
        let leg_faulted = |leg: usize| self.faulted[3 * leg..(3 * leg + 3).min(n)].iter().any(|&f| f);
        for i in 0..n {
            let command = if self.faulted[i] {
                ServoCommand::Query // report the fault, never clear it
            } else if leg_faulted(i / 3) || self.lower_from[i].is_nan() {
                ServoCommand::ZeroVelocity // park
            } else {
                let (from, to) = (self.lower_from[i], CROUCH_POSE[i % 3]);
                let position = from + (to - from) * s;
                ServoCommand::Position(PositionCommand {
                    position: Some(position),
                    velocity: Some((to - from) * 6.0 * x * (1.0 - x) / LOWER_S),
                    maximum_torque: Some(self.motion.maximum_torque),
                    watchdog_timeout: Some(0.1),
                    ..Default::default()
                })
            };
            out.set(i, command);
        }
        Ok(Flow::Continue)
    }

    fn stop(&mut self, state: &State<'_>) {
        if let Some(first) = self.first.as_mut() {
            let index = state.servos.iter().position(|s| s.id == first.servo_id);
            first.still_faulted = index.is_some_and(|i| state.servos[i].faulted());
        }
        *self.report.lock().unwrap_or_else(|e| e.into_inner()) = self.first;
    }
}

impl FaultTolerant {
    /// The first fault: remember where every joint was aimed, and count who does what.
    fn react(&mut self, index: usize, id: u8, code: u8, at_s: f64, out: &mut Output<'_, ()>) -> FaultReport {
        let leg = index / 3;
        for (i, command) in out.commands().iter().enumerate().take(MAX_JOINTS) {
            self.lower_from[i] = match command {
                ServoCommand::Position(p) => p.position.unwrap_or(f64::NAN),
                _ => f64::NAN, // never commanded: parked rather than moved to a guess
            };
        }
        let n = out.commands().len().min(MAX_JOINTS);
        let parked = (0..n).filter(|&i| i != index && (i / 3 == leg || self.lower_from[i].is_nan())).count();
        FaultReport { servo_id: id, code, at_s, leg: leg + 1, parked, lowering: n - 1 - parked, ..Default::default() }
    }
}

fn main() -> ExitCode {
    let duration_s = match duration_from_args(3.0) {
        Ok(d) => d,
        Err(e) => return usage_error(&e),
    };
    let safety = SafetyToml { on_fault: "ignore".into(), ..SafetyToml::default() };
    let faults = FaultsConfig { overheat: vec!["5@1".into()], seed: Some(1), ..FaultsConfig::default() };
    let controller = FaultTolerant::default();
    let report = Arc::clone(&controller.report);
    let summary = match Runtime::new().duration_s(duration_s).safety(safety).faults(faults).run(controller) {
        Ok(summary) => summary,
        Err(e) => return usage_error(&e.to_string()),
    };
    println!("run: {} cycles at {:.1} Hz on {} servos", summary.cycles, summary.rate_hz, summary.servos);
    let report = *report.lock().unwrap_or_else(|e| e.into_inner());
    let handled = match report {
        Some(r) => {
            println!(
                "servo {} faulted at {:.2} s (code {}): leg {} parked, {} servos lowering the body, {} holding",
                r.servo_id,
                r.at_s,
                r.code,
                r.leg,
                r.lowering,
                r.parked + r.lowering
            );
            println!(
                "servo {} only queried for {} cycles and still faulted at the end: {}",
                r.servo_id, r.cycles_after, r.still_faulted
            );
            r.still_faulted && r.events >= 1
        }
        None => false,
    };
    println!("status: {} ({})", summary.status, summary.problems.join("; "));
    if handled {
        println!("fault handled: the run is degraded because a servo faulted, as planned");
        ExitCode::SUCCESS
    } else {
        println!("fault not handled: no fault came (is the run longer than 1.3 s?) or it was not seen");
        ExitCode::from(1)
    }
}

/// `--duration SECONDS` (finite, above 0, at most 3600), or `default_s`.
fn duration_from_args(default_s: f64) -> Result<f64, String> {
    let mut args = std::env::args().skip(1);
    let mut duration = default_s;
    while let Some(arg) = args.next() {
        if arg != "--duration" {
            return Err(format!("unexpected argument {arg:?}: the only option is --duration SECONDS"));
        }
        let value = args.next().ok_or("--duration needs a number of seconds: try --duration 5")?;
        duration = value.parse().ok().filter(|s: &f64| s.is_finite() && *s > 0.0 && *s <= 3600.0).ok_or_else(|| {
            format!("--duration {value:?} is not a number of seconds above 0 and at most 3600: try --duration 5")
        })?;
    }
    Ok(duration)
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("fault_tolerant: {message}");
    ExitCode::from(2)
}
