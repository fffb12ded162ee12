//! Your control law: the [`Controller`] trait, what it sees each cycle ([`State`]) and what it
//! writes ([`Output`]).
//!
//! The runtime ([`crate::Runtime`]) owns the real-time thread, the clock, the buses, the
//! safety supervisor and the log; a controller only turns state into commands.
//!
//! # Lifecycle
//!
//! | method | when | thread | may allocate, block, print? |
//! |---|---|---|---|
//! | your constructor | before [`crate::Runtime::run`] | yours | yes |
//! | [`Controller::start`] | once, after the servos were first queried, before the first command | the cycle thread, before its real-time section | yes |
//! | [`Controller::cycle`] | once per period, with this cycle's state; its commands go out in the same cycle | the cycle thread, real-time | **no**: no allocation, no lock, no I/O, no formatting |
//! | [`Controller::stop`] | once, after the last cycle and the shutdown cycle (also after a failure) | the cycle thread, after its real-time section | yes |
//! | [`Controller::summarizer`] | once, before the run; what it returns, once after the run | yours | yes |
//!
//! Arming is explicit: before `start` no servo is commanded; a servo the controller leaves
//! at [`ServoCommand::Query`] (the default each cycle starts from its previous command) is
//! only queried.
//!
//! # When the control law fails
//!
//! One path, typed: `start` and `cycle` return a [`Failure`] as their error — `start` to
//! refuse to start (no servo is ever commanded by the law), `cycle` to ask for the safe stop
//! (`?` carries one up from your own helpers). The runtime then ends the run as at any end,
//! at once: the failing cycle's commands are replaced by the shutdown's safe mode
//! (`safety.shutdown`), the shutdown cycle and its read-back follow, then `stop`. The failure
//! is an event named by [`Failure::name`] (in the summary's `events`, the log's `event`
//! record, the live publishers), the summary's first problem — "WHAT at TIME: FIX", one
//! sentence — and [`RunSummary::failure`](crate::RunSummary::failure); the run is degraded
//! (`rtloop run` exits 1) and [`RunSummary::ended_by_controller`](crate::RunSummary::ended_by_controller)
//! is set. A failure is made without allocating: its words are `&'static str`, or an
//! `Arc<str>` made before the run ([`Words`]). [`Flow::Stop`] stays the way to end a run
//! that went well.
//!
//! # Guarantees
//!
//! * A state is never stale while claiming to be fresh: each [`ServoStatus`] says whether it
//!   answers this cycle's request (`fresh`) and, if not, how many cycles old it is.
//! * The safety supervisor overrides the controller's commands after `cycle` returns (a
//!   faulted or silent servo, the configured safe mode); [`State::safe_mode`] says when.
//! * Custom telemetry ([`Output::record`]) reaches the log or is counted as dropped; it never
//!   makes the real-time thread wait (a lockstep run, which has no deadline, waits for the
//!   log writer rather than drop it).
//!
//! Must never: allocate or block on behalf of the controller inside the real-time section.

pub use rtloop_io::safety::{Event, EventKind};
pub use rtloop_io::ServoCommand;
pub use rtloop_proto::host::{PositionCommand, ServoState};
pub use rtloop_sim::imu::roll_pitch;
pub use rtloop_sim::{BodyState, ImuSample};

use serde::Serialize;
use std::sync::Arc;

/// Most servos one run drives: every per-cycle message (the control thread's, the telemetry
/// log's, the live publishers') is fixed-size, so no cycle ever allocates.
pub const MAX_SERVOS: usize = 32;

/// One servo as the controller sees it in one cycle.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServoStatus {
    /// CAN id.
    pub id: u8,
    /// Bus number (as configured: `[[bus]] bus = N`).
    pub bus: u8,
    /// Where its bus is in the robot's list of buses (0 for the first): what an
    /// [`Event`]'s `servo.bus` names. [`State::servo_of`] does the matching.
    pub bus_index: usize,
    /// The newest state the servo reported: mode, position (rev), velocity (rev/s), torque
    /// (N·m), currents (A), voltage (V), temperatures (°C), fault, … (NaN / `None`: not
    /// reported). Kept from an earlier cycle when this cycle's reply is missing.
    pub state: ServoState,
    /// `state` answers the newest request: the previous cycle's (for [`Controller::start`],
    /// the last query before the run).
    pub fresh: bool,
    /// How many requests older than the newest one `state` answers: 0 when fresh; `None`
    /// until the servo first answered.
    pub age_cycles: Option<u64>,
    /// The cycle ([`State::cycle`]) whose request `state` answers; `None` until the servo
    /// first answered, or while it answers a query sent before the first cycle.
    pub from_cycle: Option<u64>,
    /// Consecutive requests this servo has not answered (0 when fresh).
    pub missing_streak: u32,
}

impl ServoStatus {
    /// The servo reports a fault (mode 1, or a non-zero fault code).
    pub fn faulted(&self) -> bool {
        self.state.mode == Some(1) || self.state.fault.is_some_and(|f| f != 0)
    }
}

/// Figures of the previous cycle (zero before the first).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CycleFigures {
    /// How late the previous cycle woke, ns.
    pub wakeup_ns: u64,
    /// How long its bus exchange took, ns.
    pub duration_ns: u64,
    /// Servos that did not answer it.
    pub missing: u32,
    /// Late replies (to earlier requests) that arrived in it.
    pub late: u32,
    /// It gave up waiting for replies at its deadline.
    pub timed_out: bool,
}

/// What a controller sees at the start of one cycle.
#[derive(Debug, Clone, Copy)]
pub struct State<'a> {
    /// Seconds since the first period of the run (the period's deadline, not when the
    /// thread happened to wake).
    pub time_s: f64,
    /// The period index (0 for the first command).
    pub cycle: u64,
    /// Every servo, in the robot's order (bus by bus, as configured).
    pub servos: &'a [ServoStatus],
    /// The newest IMU sample (pi3hat frame: +x forward, +y right, +z down); all zeros on a
    /// robot without one.
    pub imu: &'a ImuSample,
    /// The previous cycle's figures.
    pub last_cycle: &'a CycleFigures,
    /// The safety supervisor has taken over: the commands written now are replaced by the
    /// configured safe mode until it recovers (see `safety.recovery`).
    pub safe_mode: bool,
    /// Events recorded since the previous call (faults, servos that stopped answering, the
    /// safe mode engaging or recovering, …), oldest first.
    pub events: &'a [Event],
    /// The simulated body's ground truth (height, attitude, rates) at the start of this
    /// cycle, in a run with physics (`rtloop run --physics`); `None` otherwise. What the
    /// physics computed, not a sensor: for rewards, tests and checks, not for control (a
    /// real robot has only its IMU).
    pub body: Option<BodyState>,
    /// The simulated body's generalised positions (MuJoCo's `qpos`, the model's `nq` of them)
    /// read with [`State::body`]: with the model, every body's pose (what a renderer draws).
    /// Empty without physics, or for a model with more than [`crate::telemetry::MAX_QPOS`].
    pub qpos: &'a [f64],
    /// The simulated body has fallen (`[safety] fall_tilt_deg`, `fall_height_m`: the run's
    /// `fall` event) and is not upright again yet; always false without a free-based body.
    pub fallen: bool,
    /// The standing pose the simulated body's model names, if any: what a demonstration or a
    /// policy stands a model of the user's in. Not a sensor either.
    pub model_pose: ModelPose<'a>,
}

/// The standing pose a simulated body's model names ([`State::model_pose`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum ModelPose<'a> {
    /// Nothing to say: a real robot, a robot without a body, or the built-in quadruped (whose
    /// stand is the demonstration's own, [`crate::motion::STAND_POSE`]).
    #[default]
    NotGiven,
    /// Each servo's position (in [`State::servos`] order, servo units) in the model's standing
    /// keyframe; NaN for a servo the model does not drive.
    Stand(&'a [f64]),
    /// A model of the user's that names no standing pose (no `home`, `stand` or `standing`
    /// keyframe, and no `stand_pose` under `[physics]`).
    Missing,
}

impl State<'_> {
    /// The index in [`servos`](Self::servos) of the servo an event is about (`None` for a
    /// robot-wide event).
    pub fn servo_of(&self, event: &Event) -> Option<usize> {
        let spec = event.servo?;
        self.servos.iter().position(|s| s.id == spec.id && s.bus_index == spec.bus)
    }
}

/// Where a controller writes this cycle's commands and, optionally, its telemetry.
pub struct Output<'a, T> {
    commands: &'a mut [ServoCommand],
    telemetry: &'a mut Option<T>,
    rearm: bool,
    reset_world: Option<WorldReset>,
    events: [Reported; MAX_EVENTS_PER_CYCLE],
    events_len: usize,
}

/// A reset of the simulated world a controller asked for ([`Output::reset_world`],
/// [`Output::reset_world_with`]): the seed of the start pose's perturbation and the
/// episode's physical parameters. Fixed size: no allocation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorldReset {
    /// Perturbs the start pose (0: exactly the model's).
    pub seed: u64,
    /// The episode's physics, servo gains, joint start and pushes.
    pub episode: rtloop_sim::Episode,
}

/// Events a controller can report in one cycle ([`Output::event`]); more are ignored.
pub const MAX_EVENTS_PER_CYCLE: usize = 4;

/// An event a controller reported ([`Output::event`], [`Output::event_value`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reported {
    /// The servo it is about (an index into [`State::servos`]), `None` for the robot.
    pub servo: Option<usize>,
    /// Its name, like `"agent_timeout"`.
    pub name: &'static str,
    /// A number that details it (a protocol version, …), if any.
    pub value: Option<u64>,
}

impl<'a, T> Output<'a, T> {
    /// Build an output over `commands` (one per servo) and a telemetry slot; the runtime does
    /// this for you, tests of a controller may too.
    pub fn new(commands: &'a mut [ServoCommand], telemetry: &'a mut Option<T>) -> Self {
        Output {
            commands,
            telemetry,
            rearm: false,
            reset_world: None,
            events: [Reported::default(); MAX_EVENTS_PER_CYCLE],
            events_len: 0,
        }
    }

    /// The commands, one per servo in [`State::servos`] order. They hold the previous
    /// cycle's commands when `cycle` is called (a position command stays in force until
    /// replaced); [`ServoCommand::Query`] commands nothing this cycle.
    pub fn commands(&mut self) -> &mut [ServoCommand] {
        self.commands
    }

    /// Set servo `index`'s command; an index past the last servo is ignored.
    pub fn set(&mut self, index: usize, command: ServoCommand) {
        if let Some(c) = self.commands.get_mut(index) {
            *c = command;
        }
    }

    /// Record `value` in the log as this cycle's item of the controller's record
    /// ([`Controller::TELEMETRY_RECORD`]). At most one per cycle (the last one wins);
    /// without a log, or when the writer has fallen behind, it is dropped and counted (in a
    /// lockstep run, the loop waits for the writer instead).
    pub fn record(&mut self, value: T) {
        *self.telemetry = Some(value);
    }

    /// End the safe mode now (when [`State::safe_mode`] is set): the controller has dealt
    /// with what tripped it. With `safety.recovery = "latched"` (the default) this is the
    /// only way motion resumes; recorded as a `rearmed` event. A servo still faulted stays
    /// only queried.
    pub fn rearm_safety(&mut self) {
        self.rearm = true;
    }

    /// Whether [`rearm_safety`](Self::rearm_safety) was called.
    pub fn rearm_requested(&self) -> bool {
        self.rearm
    }

    /// Put the simulated world back at its starting pose (the joints perturbed as `seed`
    /// says; 0: exactly) before this cycle's commands go out, and stop every servo (mode 0,
    /// as `d stop` does) — this cycle sends every servo a stop, whatever was written. The
    /// next state shows the reset body and servos. Without physics it does nothing
    /// ([`State::body`] is `None`); a plant that cannot reset ends the run with a
    /// `physics_reset_failed` event. Meant for simulated episodes (lockstep): a real robot
    /// cannot be reset.
    pub fn reset_world(&mut self, seed: u64) {
        self.reset_world_with(seed, &rtloop_sim::Episode::NOMINAL);
    }

    /// [`reset_world`](Self::reset_world) into an episode with `episode`'s physical
    /// parameters (friction, masses, payload), servo gains, joint start and pushes (domain
    /// randomisation; [`rtloop_sim::World::reset_with`]).
    pub fn reset_world_with(&mut self, seed: u64, episode: &rtloop_sim::Episode) {
        self.reset_world = Some(WorldReset { seed, episode: *episode });
    }

    /// The seed of the reset [`reset_world`](Self::reset_world) asked for this cycle.
    pub fn reset_requested(&self) -> Option<u64> {
        self.reset_world.map(|r| r.seed)
    }

    /// The whole reset asked for this cycle, its episode included.
    pub fn world_reset(&self) -> Option<&WorldReset> {
        self.reset_world.as_ref()
    }

    /// Report an event (`name` like `"agent_timeout"`), about servo `servo` (an index into
    /// [`State::servos`]) or the whole robot (`None`): it goes into the run's events, the
    /// summary and the log like the supervisor's own. At most
    /// [`MAX_EVENTS_PER_CYCLE`] per cycle; returns false when it was one too many.
    pub fn event(&mut self, servo: Option<usize>, name: &'static str) -> bool {
        self.push_event(Reported { servo, name, value: None })
    }

    /// Report an event as [`event`](Self::event) does, with a number that details it (in the
    /// summary's `value`, e.g. the protocol version an agent spoke).
    pub fn event_value(&mut self, servo: Option<usize>, name: &'static str, value: u64) -> bool {
        self.push_event(Reported { servo, name, value: Some(value) })
    }

    fn push_event(&mut self, event: Reported) -> bool {
        match self.events.get_mut(self.events_len) {
            Some(slot) => {
                *slot = event;
                self.events_len += 1;
                true
            }
            None => false,
        }
    }

    /// The events reported this cycle.
    pub fn events(&self) -> &[Reported] {
        &self.events[..self.events_len]
    }
}

/// The words of a [`Failure`]: text fixed when the program was built, or made before the
/// run and shared (an `Arc<str>`: cloning it on the real-time thread allocates nothing, it
/// only counts one more holder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Words {
    /// Words known when the program was built.
    Static(&'static str),
    /// Words made before the run (a path, a limit given at start-up).
    Shared(Arc<str>),
}

impl std::ops::Deref for Words {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            Words::Static(s) => s,
            Words::Shared(s) => s,
        }
    }
}

impl std::fmt::Display for Words {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

impl From<&'static str> for Words {
    fn from(s: &'static str) -> Self {
        Words::Static(s)
    }
}

impl From<Arc<str>> for Words {
    fn from(s: Arc<str>) -> Self {
        Words::Shared(s)
    }
}

impl From<&Arc<str>> for Words {
    fn from(s: &Arc<str>) -> Self {
        Words::Shared(Arc::clone(s))
    }
}

/// Why a control law refused to start, or asked for the safe stop: the error of
/// [`Controller::start`] and [`Controller::cycle`] (see [the module docs](self#when-the-control-law-fails)).
///
/// ```
/// use rtloop::controller::Failure;
///
/// let diverged = Failure::new("estimator_diverged", "the attitude estimate diverged", "check the IMU's mounting")
///     .servo(3)
///     .value(42);
/// assert_eq!(diverged.name, "estimator_diverged");
/// ```
///
/// In the summary it reads "the attitude estimate diverged at 1.234 s (servo 4 on bus 2): check
/// the IMU's mounting" (at the start: "… at the start …").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// A short stable name, like `"estimator_diverged"`: the event's name in the summary,
    /// the log and the live publishers.
    pub name: &'static str,
    /// What went wrong, the first half of the summary's sentence.
    pub what: Words,
    /// What to do about it, the second half.
    pub fix: Words,
    /// The servo it is about (an index into [`State::servos`]), `None` for the robot.
    pub servo: Option<usize>,
    /// A number that details it, in the event's `value`.
    pub value: Option<u64>,
}

impl Failure {
    /// A failure named `name` (the event's name): `what` went wrong, and `fix` says what to
    /// do about it.
    pub fn new(name: &'static str, what: impl Into<Words>, fix: impl Into<Words>) -> Self {
        Failure { name, what: what.into(), fix: fix.into(), servo: None, value: None }
    }

    /// About servo `index` (an index into [`State::servos`]).
    pub fn servo(mut self, index: usize) -> Self {
        self.servo = Some(index);
        self
    }

    /// With a number that details it (the event's `value`).
    pub fn value(mut self, value: u64) -> Self {
        self.value = Some(value);
        self
    }
}

/// Continue the run, or end it now (with the shutdown cycle, as at the end of the duration):
/// what a [`Controller::cycle`] that went well returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flow {
    /// Run the next cycle.
    #[default]
    Continue,
    /// End the run after this cycle.
    Stop,
}

/// A control law run by [`crate::Runtime`] once per cycle on the real-time thread.
///
/// See the [module docs](self) for the lifecycle. A controller is `Send`: it is built on
/// your thread and moved to the cycle thread.
///
/// ```
/// use rtloop::controller::{Controller, Failure, Flow, Output, PositionCommand, ServoCommand, State};
///
/// /// Hold every joint where it started.
/// struct Hold {
///     start: [f64; 32],
/// }
///
/// impl Controller for Hold {
///     type Telemetry = ();
///
///     fn start(&mut self, state: &State<'_>) -> Result<(), Failure> {
///         for (i, (p, s)) in self.start.iter_mut().zip(state.servos).enumerate() {
///             if s.age_cycles.is_none() {
///                 return Err(Failure::new("not_measured", "a servo never answered", "check its bus and power").servo(i));
///             }
///             *p = s.state.position;
///         }
///         Ok(())
///     }
///
///     fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, ()>) -> Result<Flow, Failure> {
///         for (i, _) in state.servos.iter().enumerate() {
///             let hold = PositionCommand { position: Some(self.start[i]), velocity: Some(0.0), ..Default::default() };
///             out.set(i, ServoCommand::Position(hold));
///         }
///         Ok(Flow::Continue)
///     }
/// }
/// ```
pub trait Controller: Send {
    /// What the controller records each cycle with [`Output::record`] (its targets,
    /// estimator state, gains, …), written to the log as the record
    /// [`TELEMETRY_RECORD`](Self::TELEMETRY_RECORD). `Copy` so that handing it to the log
    /// writer never allocates; `()` when the controller records nothing.
    type Telemetry: Serialize + Default + Copy + Send + 'static;

    /// The log record name of [`Telemetry`](Self::Telemetry).
    const TELEMETRY_RECORD: &'static str = "controller";

    /// The first measured state, before the first command (`cycle` is 0, `time_s` 0): learn
    /// where the joints are. A servo that answered the queries sent before the run is `fresh`
    /// with `age_cycles == Some(0)`; one that has not answered yet has `age_cycles == None`
    /// (not `fresh`, every value absent). `from_cycle` is `None` for every servo here: those
    /// queries belong to no cycle. An error refuses to start: no cycle runs, the run ends
    /// with its shutdown cycle, and the [`Failure`] is reported (see [the module
    /// docs](self#when-the-control-law-fails)).
    fn start(&mut self, state: &State<'_>) -> Result<(), Failure> {
        let _ = state;
        Ok(())
    }

    /// One cycle: read `state`, write `out`. Real-time: must not allocate, lock, block or
    /// format. Return [`Flow::Stop`] to end the run, a [`Failure`] to ask for the safe stop
    /// (this cycle's commands are replaced by the safe mode).
    fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, Self::Telemetry>) -> Result<Flow, Failure>;

    /// The run has ended (duration, signal, [`Flow::Stop`], a [`Failure`], or the stop flag)
    /// and the servos were left in the safe mode; `state` is the last one read.
    fn stop(&mut self, state: &State<'_>) {
        let _ = state;
    }

    /// What completes the run's summary with what only the control law knows after the run,
    /// called once on your thread before the run: [`crate::Runtime::run`] calls the function
    /// it returns with the summary after the run (the agent spine adds what its agent did and
    /// the commands it refused, by cause, from the record it kept). Not for a failure, which
    /// [`Failure`] reports. `None` (the default): nothing to add.
    fn summarizer(&self) -> Option<Summarizer> {
        None
    }
}

/// Completes a run's summary after the run ([`Controller::summarizer`]).
pub type Summarizer = Box<dyn FnOnce(&mut crate::RunSummary) + Send>;
