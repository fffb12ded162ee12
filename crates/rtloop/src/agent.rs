//! The spine: a control law in another process (any language), over shared memory.
//!
//! [`AgentSpine`] is a [`Controller`] whose commands come from an agent process through the
//! segment `/dev/shm/rtloop-NAME` (the protocol, byte by byte: `docs/agent-protocol.md`; the
//! C header: `crates/agent/include/rtloop_agent.h`; an agent in C: `examples/agent.c`). Each
//! cycle it publishes the state, takes the newest command the agent wrote, validates it
//! servo by servo, and never waits for the agent — except in lockstep, where simulated time
//! stands still until the agent has answered.
//!
//! * Arming is explicit: nothing the agent writes is followed until it echoes the published
//!   arm token. Until then every servo is only queried. Commands are only ever followed
//!   while the header's `agent_version` is this spine's (one `agent_version_mismatch` event
//!   per foreign version, naming both).
//! * Liveness: an agent that stops writing commands (crash, stall, SIGSTOP) for longer than
//!   the timeout sends the servos to the safe command (zero velocity by default) with an
//!   `agent_timeout` event; it is followed again once it echoes the new token
//!   (`agent_rearmed`).
//! * Bad input: a command that fails validation (NaN, out of the limits, an unknown kind,
//!   …) is refused for that servo and cycle — the servo keeps its safe command — counted,
//!   and reported as one `agent_command_refused` event per burst. The spine records each
//!   refusal's typed cause (field, value, limit) and the count per servo as it goes, in
//!   fixed-size storage ([`rtloop_agent::Refusals`]); the run's summary says, in one sentence, which
//!   fields broke which limits, for which servos, how many times.
//! * A segment lost under the spine (another process of the user truncated
//!   `/dev/shm/rtloop-NAME`, or truncated and grew it again: the agent crate's SIGBUS guard
//!   keeps the spine alive through it) is the spine's [`Failure`]: every servo gets the safe
//!   mode at once, the run ends with an `agent_segment_lost` event (its `value`: 1
//!   truncated, 2 replaced) and its shutdown cycle, and the summary's first problem says
//!   what happened and how to avoid it. The spine still removes its file.
//! * Every position command carries a watchdog: the agent's if it sent one (within the
//!   limits), else the run's `[gains] watchdog_timeout_s`.
//! * The limits never exceed what the run's commands carry ([`carried_limits`]): an int16
//!   position ends at ±3.2767 rev, and a value beyond it would be clamped on the wire —
//!   moved somewhere the agent did not ask for, silently — so it is refused instead.
//!
//! * Lockstep: the first states are measured before the spine waits — it runs query-only
//!   cycles, without looking at commands, until every servo has answered a cycle's request
//!   (at most [`MEASURE_CYCLES`]). Then each cycle waits for the agent's command: while
//!   following, at most the timeout (then the cycle goes on with the safe command, and the
//!   spine is `SAFE` with a new token); while waiting to be armed, at most
//!   [`AgentOptions::arm_wait_s`] of wall-clock time, and not at all once the agent is gone:
//!   either is the spine's [`Failure`] (`agent_not_armed`, `agent_gone`), which ends the run
//!   with one sentence.
//!
//! Must never: block the real-time loop on the agent outside lockstep, allocate in
//! [`Controller::cycle`], or send a servo anything that was not validated.

use crate::controller::{Controller, Failure, Flow, Output, PositionCommand, ServoCommand, State, Summarizer};
use rtloop_agent::layout::status;
use rtloop_agent::{
    Limits, Lockstep, Refusals, SegmentLoss, ServoCommandError, ServoInfo, Spine, SpineConfig, ValidCommand,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use rtloop_agent::{segment_path, DEFAULT_TIMEOUT_NS};

/// Lockstep: the most query-only cycles the spine runs before it first waits for the agent
/// (it stops as soon as every servo has answered a cycle's request), so that a servo that
/// never answers cannot hold the run either.
pub const MEASURE_CYCLES: u32 = 10;

/// Lockstep: how long the spine waits, by default, for an agent to arm it, s.
pub const DEFAULT_ARM_WAIT_S: f64 = 60.0;

/// The range of [`AgentOptions::arm_wait_s`], s.
pub const ARM_WAIT_RANGE_S: std::ops::RangeInclusive<f64> = 0.01..=86_400.0;

/// How the spine treats its agent.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The agent name: the segment is `/dev/shm/rtloop-NAME`.
    pub name: String,
    /// An agent silent for longer than this has timed out, s (0.001 … 10).
    pub timeout_s: f64,
    /// What the servos get while the agent has timed out: zero velocity (the default), stop
    /// or brake.
    pub on_timeout: ServoCommand,
    /// What an agent's command may ask for.
    pub limits: Limits,
    /// The watchdog every position command carries when the agent sent none, s.
    pub watchdog_timeout_s: f64,
    /// Lockstep: wait each cycle for the agent's command computed from this cycle's state
    /// (simulated robots only: the runtime's lockstep).
    pub lockstep: bool,
    /// Lockstep: how long the spine waits, in wall-clock time, for an agent to arm it (at the
    /// start, and after a timeout) before it ends the run, s (0.01 … 86400).
    pub arm_wait_s: f64,
}

impl AgentOptions {
    /// The defaults for agent `name`: 100 ms timeout, zero velocity on timeout, the default
    /// limits, a 0.1 s watchdog, free-running (in lockstep: 60 s to be armed).
    pub fn new(name: &str) -> Self {
        AgentOptions {
            name: name.to_string(),
            timeout_s: DEFAULT_TIMEOUT_NS as f64 * 1e-9,
            on_timeout: ServoCommand::ZeroVelocity,
            limits: Limits::default(),
            watchdog_timeout_s: crate::config::DEFAULT_WATCHDOG_TIMEOUT_S,
            lockstep: false,
            arm_wait_s: DEFAULT_ARM_WAIT_S,
        }
    }
}

/// `limits` narrowed to what commands at `resolution` carry. An integer register clamps at
/// its largest integer times its scale (int16: positions to ±3.2767 rev, velocities to
/// ±8.19 rev/s), so a wider limit would let a value through that the wire then clamps.
pub fn carried_limits(limits: Limits, resolution: &rtloop_proto::host::PositionResolution) -> Limits {
    use rtloop_proto::value::ScaleClass;
    let r = resolution;
    let position = ScaleClass::Position.carried_max(r.position).min(ScaleClass::Position.carried_max(r.stop_position));
    let velocity = ScaleClass::Velocity.carried_max(r.velocity).min(ScaleClass::Velocity.carried_max(r.velocity_limit));
    let torque =
        ScaleClass::Torque.carried_max(r.feedforward_torque).min(ScaleClass::Torque.carried_max(r.maximum_torque));
    Limits {
        position_min: limits.position_min.max(-position),
        position_max: limits.position_max.min(position),
        max_velocity: limits.max_velocity.min(velocity),
        max_accel: limits.max_accel.min(ScaleClass::Acceleration.carried_max(r.accel_limit)),
        max_torque: limits.max_torque.min(torque),
        max_kp_scale: limits.max_kp_scale.min(ScaleClass::Ratio.carried_max(r.kp_scale)),
        max_kd_scale: limits.max_kd_scale.min(ScaleClass::Ratio.carried_max(r.kd_scale)),
        max_ilimit_scale: limits.max_ilimit_scale.min(ScaleClass::Ratio.carried_max(r.ilimit_scale)),
        watchdog_max_s: limits.watchdog_max_s.min(ScaleClass::Time.carried_max(r.watchdog_timeout)),
        ..limits
    }
}

pub use crate::summary::{AgentSummary, RefusalReport, RefusedServo};

/// The name `--json` gives the kind of `e`.
fn error_kind(e: &ServoCommandError) -> &'static str {
    match e {
        ServoCommandError::UnknownKind(_) => "unknown_kind",
        ServoCommandError::UnknownFieldBits(_) => "unknown_field_bits",
        ServoCommandError::FieldsWithoutPosition { .. } => "fields_without_position",
        ServoCommandError::NonFinite { .. } => "non_finite",
        ServoCommandError::OutOfRange { .. } => "out_of_range",
        ServoCommandError::OverrideNotAllowed { .. } => "override_not_allowed",
        ServoCommandError::ServoCount { .. } => "servo_count",
        ServoCommandError::NoSuchServo { .. } => "no_such_servo",
        _ => "other",
    }
}

/// Counters the cycle thread updates and the caller reads after the run (atomics: no lock;
/// the refusal record is copied once, when the run stops).
#[derive(Debug, Default)]
struct Figures {
    applied: AtomicU64,
    without: AtomicU64,
    timeouts: AtomicU64,
    armings: AtomicU64,
    refused: AtomicU64,
    torn: AtomicU64,
    wrong_version: AtomicU64,
    resets: AtomicU64,
    resets_refused: AtomicU64,
    /// The segment was lost: [`SegmentLoss::code`] (0: it was not).
    segment_lost: AtomicU64,
    /// What validation refused, copied from the spine when the run stops.
    refusals: Mutex<Option<Refusals>>,
}

/// A handle to the spine's figures, valid after the run.
#[derive(Debug, Clone)]
pub struct AgentFigures {
    name: String,
    /// (id, bus) per servo slot.
    servos: Vec<(u8, u8)>,
    figures: Arc<Figures>,
}

impl AgentFigures {
    /// The figures so far.
    pub fn summary(&self) -> AgentSummary {
        let f = &self.figures;
        let refusals = f.refusals.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or_default();
        let servo = |slot: usize, refused: u64| {
            let (id, bus) = self.servos.get(slot).copied().unwrap_or((0, 0));
            RefusedServo { id, bus, refused }
        };
        let refused_servos =
            refusals.per_servo.iter().enumerate().filter(|(_, &n)| n > 0).map(|(slot, &n)| servo(slot, n)).collect();
        let refusal_causes = refusals
            .causes()
            .map(|c| {
                let (value, min, max) = match c.first {
                    ServoCommandError::OutOfRange { value, min, max, .. } => (Some(value), Some(min), Some(max)),
                    ServoCommandError::NonFinite { value, .. } => (Some(value), None, None),
                    ServoCommandError::UnknownKind(k) => (Some(f64::from(k)), None, None),
                    _ => (None, None, None),
                };
                RefusalReport {
                    kind: error_kind(&c.first),
                    field: c.first.field(),
                    value,
                    min,
                    max,
                    servo: servo(c.servo, refusals.per_servo.get(c.servo).copied().unwrap_or(0)),
                    count: c.count,
                    message: c.first.to_string(),
                }
            })
            .collect();
        AgentSummary {
            name: self.name.clone(),
            commands_applied: f.applied.load(Ordering::Relaxed),
            cycles_without_command: f.without.load(Ordering::Relaxed),
            timeouts: f.timeouts.load(Ordering::Relaxed),
            rearms: f.armings.load(Ordering::Relaxed),
            refused: f.refused.load(Ordering::Relaxed),
            refused_cycles: refusals.cycles,
            refused_servos,
            refusal_causes,
            refusals_of_other_causes: refusals.other,
            segment_lost: SegmentLoss::from_code(f.segment_lost.load(Ordering::Relaxed)).map(loss_name),
            torn: f.torn.load(Ordering::Relaxed),
            wrong_version: f.wrong_version.load(Ordering::Relaxed),
            resets: f.resets.load(Ordering::Relaxed),
            resets_refused: f.resets_refused.load(Ordering::Relaxed),
        }
    }
}

impl AgentFigures {
    /// Complete the run's summary after the run with what the spine recorded: what the agent
    /// did (`summary.agent`) and the commands it refused, with their causes, in one sentence.
    /// (What ended a run — a lost segment, an agent gone or never armed — is the spine's
    /// [`Failure`], already in the summary.) [`AgentSpine::summarizer`] hands this to
    /// [`crate::Runtime::run`].
    pub fn complete(&self, summary: &mut crate::RunSummary) {
        let agent = self.summary();
        let first_time = |kind: &str| summary.events.iter().find(|e| e.kind == kind).map(|e| e.time);
        if agent.refused > 0 {
            let refusals = self.refusals();
            let from = first_time("agent_command_refused");
            summary.problems.push(refusal_problem(&agent, &refusals, self.servos.len(), from));
        }
        summary.agent = Some(agent);
        if !summary.problems.is_empty() {
            summary.status = crate::summary::Status::Degraded;
        }
    }
}

impl AgentFigures {
    /// The refusal record the spine kept (empty before the run stopped).
    fn refusals(&self) -> Refusals {
        self.figures.refusals.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or_default()
    }
}

/// `"truncated"` or `"replaced"`: [`AgentSummary::segment_lost`].
fn loss_name(loss: SegmentLoss) -> &'static str {
    match loss {
        SegmentLoss::Truncated => "truncated",
        SegmentLoss::Replaced => "replaced",
    }
}

/// The refusals of a run in one sentence: how many, for which servos, in how many cycles
/// from when, each cause with its count, and the fix.
fn refusal_problem(agent: &AgentSummary, refusals: &Refusals, servo_count: usize, from_s: Option<f64>) -> String {
    let servos = match agent.refused_servos.as_slice() {
        all if all.len() == servo_count && servo_count > 1 => format!("all {servo_count} servos"),
        few if few.len() <= 4 => {
            let names: Vec<String> = few.iter().map(|s| crate::summary::servo_name(Some(s.id), Some(s.bus))).collect();
            names.join(", ")
        }
        many => format!("{} of the {servo_count} servos", many.len()),
    };
    let from = from_s.map_or_else(String::new, |t| format!(" from {t:.3} s"));
    let cycles = match agent.refused_cycles {
        1 => "1 cycle".to_string(),
        n => format!("{n} cycles"),
    };
    let mut causes: Vec<String> = refusals
        .causes()
        .map(|c| {
            let times = if c.count == 1 { "once".to_string() } else { format!("{} times", c.count) };
            format!("{} ({times})", c.first.what())
        })
        .collect();
    if refusals.other > 0 {
        causes.push(format!("{} of other causes", refusals.other));
    }
    let fix = refusals.causes().next().map_or("send valid commands", |c| c.first.fix());
    let torque = refusals.causes().any(|c| {
        matches!(c.first, ServoCommandError::OutOfRange { field: "maximum_torque" | "feedforward_torque", .. })
    });
    let torque_note = if torque { " (for `rtloop run`, the torque limit is its [gains] maximum_torque)" } else { "" };
    format!(
        "the spine refused {} of the agent's servo commands ({servos}, in {cycles}{from}) and gave each its safe \
         command instead: {}; {fix}, within the limits of docs/agent-protocol.md section 7{torque_note}",
        agent.refused,
        causes.join(", ")
    )
}

/// The run is to stop: the spine's own flag, or Ctrl-C / SIGTERM.
fn stop_requested(stop: &AtomicBool) -> bool {
    stop.load(Ordering::Relaxed) || crate::signals::stop_requested()
}

/// The words of the spine's failures that name its segment or its wait, made once when it is
/// created: a failing cycle only counts one more holder of them.
struct FailureWords {
    /// `agent_not_armed`: what happened, with the wait.
    not_armed: Arc<str>,
    /// `agent_segment_lost`: what happened, truncated or replaced.
    truncated: Arc<str>,
    replaced: Arc<str>,
    /// `agent_segment_lost`: what to do, with the path.
    lost_fix: Arc<str>,
}

impl FailureWords {
    fn new(options: &AgentOptions) -> Self {
        let path = segment_path(&options.name).display().to_string();
        let lost =
            |loss: SegmentLoss| Arc::from(format!("the agent segment {path} {} by another process", loss.what()));
        FailureWords {
            not_armed: Arc::from(format!(
                "no agent armed the spine within {} s of waiting (wall-clock time; simulated time stood still)",
                options.arm_wait_s
            )),
            truncated: lost(SegmentLoss::Truncated),
            replaced: lost(SegmentLoss::Replaced),
            lost_fix: Arc::from(format!(
                "the spine commanded the servos safe and ended the run; never write to {path} while its spine runs \
                 (an agent only maps it)"
            )),
        }
    }
}

/// The spine: a [`Controller`] that follows an agent process.
pub struct AgentSpine {
    spine: Spine,
    options: AgentOptions,
    words: FailureWords,
    figures: Arc<Figures>,
    /// The handle [`AgentSpine::create`] returned (for the summarizer).
    handle: AgentFigures,
    seen: rtloop_agent::Counters,
    stop: Arc<AtomicBool>,
    /// Cycles this spine has run: the cycle numbers the agent crate's burst rule counts in
    /// (period indices jump over skipped periods, which must not end a burst).
    cycles_run: u64,
    /// Lockstep: query-only cycles run to measure the servos before the first wait.
    measuring: u32,
    /// Lockstep: the spine has begun waiting for the agent (measuring is over).
    measured: bool,
    /// Called when the run starts ([`AgentSpine::on_start`]).
    on_start: Option<Box<dyn FnOnce() + Send>>,
    /// Reset refusal reasons already reported as an event (bit `reason`).
    reset_refusals_reported: u32,
    /// The episode's command latency, cycles (a reset's domain sets it; 0: none).
    latency: usize,
    /// The commands of the last `latency + 1` cycles, `servo_count` each (ring), and the
    /// cycles since the last reset: what a latency delays. Allocated once, at creation.
    history: Vec<ServoCommand>,
    since_reset: u64,
}

/// Why an agent spine could not be set up: `Display` is the one sentence `rtloop run --agent`
/// prints.
#[derive(Debug)]
#[non_exhaustive]
pub enum AgentError {
    /// The agent timeout (seconds) is outside 0.001 … 10 s.
    Timeout(f64),
    /// The wait for a lockstep agent to arm (seconds) is outside its range.
    ArmWait(f64),
    /// The shared-memory segment cannot be created (a live spine of that name, a bad name…).
    Spine(rtloop_agent::SpineError),
}

impl std::fmt::Display for AgentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentError::Timeout(s) => {
                write!(f, "agent timeout = {s} s is out of range: give 0.001 to 10 s (--agent-timeout-ms 1 to 10000)")
            }
            AgentError::ArmWait(s) => write!(
                f,
                "agent arm wait = {s} s is out of range: give {} to {} s (--agent-wait)",
                ARM_WAIT_RANGE_S.start(),
                ARM_WAIT_RANGE_S.end()
            ),
            AgentError::Spine(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for AgentError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AgentError::Spine(e) => Some(e),
            _ => None,
        }
    }
}

impl AgentSpine {
    /// Create the segment for `servos` (id, bus number; the robot's order) at `rate_hz`.
    /// Returns the spine, a handle on its figures, and a warning when a stale segment of a
    /// dead spine was replaced. An existing live spine of that name is refused in one
    /// sentence.
    pub fn create(
        options: AgentOptions,
        servos: &[(u8, u8)],
        rate_hz: f64,
    ) -> Result<(AgentSpine, AgentFigures, Option<String>), AgentError> {
        if !(options.timeout_s.is_finite() && (0.001..=10.0).contains(&options.timeout_s)) {
            return Err(AgentError::Timeout(options.timeout_s));
        }
        if !(options.arm_wait_s.is_finite() && ARM_WAIT_RANGE_S.contains(&options.arm_wait_s)) {
            return Err(AgentError::ArmWait(options.arm_wait_s));
        }
        let options = AgentOptions {
            limits: carried_limits(options.limits, &crate::cycle_model::command_resolution()),
            ..options
        };
        let infos: Vec<ServoInfo> =
            servos.iter().map(|&(id, bus)| ServoInfo { id: u32::from(id), bus: u32::from(bus) }).collect();
        let mut config = SpineConfig::new(&options.name, &infos, rate_hz);
        config.lockstep = options.lockstep;
        config.timeout_ns = (options.timeout_s * 1e9).round() as u64;
        config.arm_wait_ns = (options.arm_wait_s * 1e9).round() as u64;
        let (spine, warning) = Spine::create(&config).map_err(AgentError::Spine)?;
        let figures = Arc::new(Figures::default());
        let handle =
            AgentFigures { name: options.name.clone(), servos: servos.to_vec(), figures: Arc::clone(&figures) };
        let stop = Arc::new(AtomicBool::new(false));
        Ok((
            AgentSpine {
                spine,
                words: FailureWords::new(&options),
                options,
                figures,
                handle: handle.clone(),
                seen: rtloop_agent::Counters::default(),
                stop,
                cycles_run: 0,
                measuring: 0,
                measured: false,
                on_start: None,
                reset_refusals_reported: 0,
                latency: 0,
                history: vec![
                    ServoCommand::Stop;
                    (rtloop_agent::layout::MAX_LATENCY_CYCLES as usize + 1) * servos.len()
                ],
                since_reset: 0,
            },
            handle,
            warning,
        ))
    }

    /// A handle on the spine's figures (the one [`AgentSpine::create`] returned).
    pub fn figures(&self) -> AgentFigures {
        self.handle.clone()
    }

    /// The segment was lost under the spine: the spine's failure `agent_segment_lost`
    /// (valued with [`SegmentLoss::code`]), which commands every servo the safe mode at once
    /// and ends the run.
    fn segment_lost(&mut self, loss: SegmentLoss) -> Failure {
        self.figures.segment_lost.store(loss.code(), Ordering::Relaxed);
        self.figures.without.fetch_add(1, Ordering::Relaxed);
        let what = match loss {
            SegmentLoss::Truncated => &self.words.truncated,
            SegmentLoss::Replaced => &self.words.replaced,
        };
        Failure::new("agent_segment_lost", what, &self.words.lost_fix).value(loss.code())
    }

    /// A flag that ends a lockstep wait for the agent (Ctrl-C does too).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// Call `announce` once when the run starts, before the first wait for the agent — after
    /// the runtime has checked every setting, so a mistake is the only thing `rtloop run`
    /// says (its "waiting for agent …" line is not).
    pub fn on_start(&mut self, announce: impl FnOnce() + Send + 'static) {
        self.on_start = Some(Box::new(announce));
    }

    /// Publish `state`; `awaiting`: the spine waits for a command answering it (the agent
    /// is woken for it).
    fn publish(&mut self, state: &State<'_>, awaiting: bool) {
        let block = self.spine.state_mut();
        block.cycle = state.cycle;
        block.awaiting = u32::from(awaiting);
        block.time_ns = (state.time_s * 1e9).max(0.0) as u64;
        block.imu.present = u32::from(state.imu.quaternion != [0.0; 4]);
        block.imu.quaternion = state.imu.quaternion;
        block.imu.rate_dps = state.imu.rate_dps;
        block.imu.accel_mps2 = state.imu.accel_mps2;
        block.body = match &state.body {
            Some(b) => {
                let imu = b.to_imu();
                let (roll, pitch) = rtloop_sim::imu::roll_pitch(imu.quaternion);
                // Heading about the world's vertical (+z up), positive turning left.
                let [w, x, y, z] = b.quaternion;
                let yaw = (2.0 * (w * z + x * y)).atan2(1.0 - 2.0 * (y * y + z * z));
                rtloop_agent::layout::BodyBlock {
                    present: 1,
                    fallen: u32::from(state.fallen),
                    height_m: b.height_m(),
                    roll_deg: roll.to_degrees(),
                    pitch_deg: pitch.to_degrees(),
                    quaternion: imu.quaternion,
                    position_m: b.position_m,
                    velocity_mps: b.velocity_mps,
                    yaw_deg: yaw.to_degrees(),
                    reserved2: 0,
                }
            }
            None => rtloop_agent::layout::BodyBlock::ABSENT,
        };
        let pose = &mut block.pose;
        let n = if state.body.is_some() && state.qpos.len() <= pose.qpos.len() { state.qpos.len() } else { 0 };
        pose.nq = n as u32;
        pose.qpos[..n].copy_from_slice(&state.qpos[..n]);
        pose.qpos[n..].fill(f64::NAN);
        for (raw, s) in block.servos.iter_mut().zip(state.servos) {
            let st = &s.state;
            raw.mode = st.mode.map_or(-1, i32::from);
            raw.fault = st.fault.map_or(-1, i32::from);
            raw.fresh = u8::from(s.fresh);
            raw.request_cycle = s.from_cycle.map_or(-1, |c| c.min(i64::MAX as u64) as i64);
            raw.age_cycles = s.age_cycles.map_or(-1, |c| c.min(i64::MAX as u64) as i64);
            raw.position = st.position;
            raw.velocity = st.velocity;
            raw.torque = st.torque;
            raw.q_current = st.q_current;
            raw.d_current = st.d_current;
            raw.motor_temperature = st.motor_temperature;
            raw.temperature = st.temperature;
            raw.voltage = st.voltage;
        }
        self.spine.publish(rtloop_agent::monotonic_ns());
    }

    /// A reset the followed command asks for: done (the world reset before this cycle's
    /// commands go out, every servo stopped) in a lockstep run with physics, else refused
    /// with its reason (an `agent_reset_refused` event, once per reason, valued with it).
    /// Answered in the next state either way. Returns whether the world resets.
    fn answer_reset(&mut self, state: &State<'_>, out: &mut Output<'_, ()>) -> bool {
        use rtloop_agent::layout::reset;
        let Some((request, seed)) = self.spine.reset_request() else { return false };
        let domain = self.spine.reset_domain().copied().unwrap_or(rtloop_agent::DomainBlock::NOMINAL);
        let result = if !self.options.lockstep {
            reset::NOT_LOCKSTEP
        } else if state.body.is_none() {
            reset::NO_PHYSICS
        } else if rtloop_agent::validate_domain(&domain, state.servos.len()).is_err() {
            reset::BAD_DOMAIN
        } else {
            reset::DONE
        };
        self.spine.answer_reset(request, result);
        if result == reset::DONE {
            let applied = domain.flags & rtloop_agent::layout::domain::APPLY != 0;
            let episode = if applied { episode_of(&domain, state) } else { rtloop_sim::Episode::NOMINAL };
            out.reset_world_with(seed, &episode);
            self.latency = if applied { domain.latency_cycles as usize } else { 0 };
            self.since_reset = 0;
            return true;
        }
        if self.reset_refusals_reported & (1 << result) == 0 {
            self.reset_refusals_reported |= 1 << result;
            out.event_value(None, "agent_reset_refused", u64::from(result));
        }
        false
    }

    /// Servo `i`'s command `command` of this cycle as the servo gets it: `latency` cycles
    /// late (a stop until the first one arrives after a reset). No allocation.
    fn delayed(&mut self, i: usize, command: ServoCommand, n: usize) -> ServoCommand {
        if self.latency == 0 || n == 0 {
            return command;
        }
        let slots = self.latency as u64 + 1;
        let now = (self.since_reset % slots) as usize;
        if let Some(slot) = self.history.get_mut(now * n + i) {
            *slot = command;
        }
        if self.since_reset < self.latency as u64 {
            return ServoCommand::Stop;
        }
        let then = ((self.since_reset - self.latency as u64) % slots) as usize;
        self.history.get(then * n + i).copied().unwrap_or(command)
    }

    /// The command a validated agent command becomes.
    fn command_of(&self, valid: ValidCommand) -> ServoCommand {
        match valid {
            ValidCommand::Query => ServoCommand::Query,
            ValidCommand::Stop => ServoCommand::Stop,
            ValidCommand::ZeroVelocity => ServoCommand::ZeroVelocity,
            ValidCommand::Brake => ServoCommand::Brake,
            ValidCommand::Position(p) => ServoCommand::Position(PositionCommand {
                // Never without a watchdog.
                watchdog_timeout: Some(p.watchdog_timeout.unwrap_or(self.options.watchdog_timeout_s)),
                ..p
            }),
        }
    }
}

/// The episode a reset's checked `domain` asks for, per servo of `state` (bus index, id).
fn episode_of(domain: &rtloop_agent::DomainBlock, state: &State<'_>) -> rtloop_sim::Episode {
    let mut episode = rtloop_sim::Episode::NOMINAL;
    episode.plant = rtloop_sim::PlantParams {
        friction_scale: domain.friction_scale,
        mass_scale: domain.mass_scale,
        payload_kg: domain.payload_kg,
    };
    let n = state.servos.len().min(rtloop_sim::world::EPISODE_SERVOS).min(rtloop_agent::layout::MAX_SERVOS);
    for (k, s) in state.servos[..n].iter().enumerate() {
        episode.servos[k] = rtloop_sim::EpisodeServo {
            bus: s.bus_index,
            id: s.id,
            kp_scale: domain.kp_scale[k],
            kd_scale: domain.kd_scale[k],
            offset_rad: domain.joint_offset_rad[k],
            velocity_rad_s: domain.joint_velocity_rad_s[k],
        };
    }
    episode.servo_count = n;
    for (slot, p) in episode.pushes.iter_mut().zip(&domain.pushes) {
        *slot = (p.duration_s > 0.0).then_some(rtloop_sim::Push {
            force_n: p.force_n,
            from_ns: (p.at_s * 1e9) as u64,
            duration_ns: (p.duration_s * 1e9) as u64,
        });
    }
    episode
}

impl Controller for AgentSpine {
    type Telemetry = ();

    fn start(&mut self, state: &State<'_>) -> Result<(), Failure> {
        if let Some(announce) = self.on_start.take() {
            announce();
        }
        self.publish(state, false);
        Ok(())
    }

    fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, ()>) -> Result<Flow, Failure> {
        // Lockstep: measure before waiting — the first state has no servo answer to a
        // cycle's request, and an agent may rightly wait for one before it commands anything.
        let unmeasured = state.servos.iter().any(|s| s.from_cycle.is_none());
        let measuring = self.options.lockstep && !self.measured && unmeasured && self.measuring < MEASURE_CYCLES;
        // The spine waits on this state unless a held command answers it already.
        let awaiting = self.options.lockstep && !measuring && !self.spine.covers(state.cycle);
        self.publish(state, awaiting);
        // Two atomic loads: the segment is still the one the spine made (publishing into a
        // truncated one faulted, and the guard took the fault).
        if let Some(loss) = self.spine.check_segment() {
            return Err(self.segment_lost(loss));
        }
        let mut flow = Flow::Continue;
        // Why a lockstep wait ended the run, reported after what the wait saw.
        let mut ended = None;
        if self.options.lockstep {
            if measuring {
                // A query-only cycle that does not look at commands (reproducible: when
                // the agent arms does not depend on how fast it is).
                self.measuring += 1;
            } else {
                self.measured = true;
                // Simulated time stands still until the agent has answered this state, or
                // the wait is over (see `Spine::wait_command_for`).
                let stop = &self.stop;
                let stopped = || stop_requested(stop);
                match self.spine.wait_command_for(state.cycle, stopped) {
                    // Timed out: the spine went safe; this cycle goes on with the safe command.
                    Lockstep::Command | Lockstep::TimedOut => {}
                    Lockstep::AgentGone => {
                        let (what, fix) = ("the agent exited (or detached)", "the lockstep run ended there");
                        ended = Some(Failure::new("agent_gone", what, fix));
                    }
                    Lockstep::NotArmed => {
                        let ms = (self.options.arm_wait_s * 1e3).round() as u64;
                        let fix = "start the agent, or raise --agent-wait";
                        ended = Some(Failure::new("agent_not_armed", &self.words.not_armed, fix).value(ms));
                    }
                    Lockstep::Stopped => flow = Flow::Stop,
                    // Handled below, with a free-running poll's.
                    Lockstep::SegmentLost => {}
                }
            }
        } else {
            // `Poll::SegmentLost` is handled below, with a lockstep wait's.
            self.spine.poll_command(rtloop_agent::monotonic_ns());
        }
        if let Some(loss) = self.spine.check_segment() {
            return Err(self.segment_lost(loss));
        }
        let now = self.spine.counters();
        let f = &self.figures;
        if now.timeouts > self.seen.timeouts {
            out.event(None, "agent_timeout");
            f.timeouts.store(now.timeouts, Ordering::Relaxed);
        }
        if now.rearms > self.seen.rearms {
            out.event(None, if self.seen.rearms == 0 { "agent_armed" } else { "agent_rearmed" });
            f.armings.store(now.rearms, Ordering::Relaxed);
        }
        f.torn.store(now.torn, Ordering::Relaxed);
        f.wrong_version.store(now.wrong_version, Ordering::Relaxed);
        if let Some(m) = self.spine.version_mismatch() {
            out.event_value(None, "agent_version_mismatch", u64::from(m.agent));
        }
        // A command held over this cycle (lockstep `hold_cycles`) answers it like a fresh one.
        let fresh_command =
            now.commands > self.seen.commands || (self.options.lockstep && self.spine.covers(state.cycle));
        let following = self.spine.following();
        let waiting = self.spine.status() == status::WAITING;
        self.cycles_run += 1;
        let resetting = self.answer_reset(state, out);
        for i in 0..state.servos.len() {
            let command = match self.spine.command_for(i, &self.options.limits) {
                Some(Ok(valid)) => self.command_of(valid),
                Some(Err(e)) => {
                    // One event per burst: a burst ends with a cycle that refused nothing.
                    // The cause is recorded in fixed-size storage (no formatting here).
                    if self.spine.note_rejected(i, self.cycles_run, &e) {
                        out.event(Some(i), "agent_command_refused");
                    }
                    // A refused command: the servo gets the safe command for this cycle.
                    self.options.on_timeout
                }
                // Never armed yet: the servos are only queried (not commanded at all).
                None if waiting => ServoCommand::Query,
                // Timed out (SAFE) or stopping: the safe command.
                None => self.options.on_timeout,
            };
            // A reset stops every servo: the agent's next commands start afresh.
            let command = if resetting { ServoCommand::Stop } else { command };
            out.set(i, self.delayed(i, command, state.servos.len()));
        }
        self.since_reset += 1;
        let f = &self.figures;
        if following && fresh_command {
            f.applied.fetch_add(1, Ordering::Relaxed);
        } else {
            f.without.fetch_add(1, Ordering::Relaxed);
        }
        self.seen = self.spine.counters();
        f.refused.store(self.seen.rejected, Ordering::Relaxed);
        f.resets.store(self.seen.resets, Ordering::Relaxed);
        f.resets_refused.store(self.seen.resets_refused, Ordering::Relaxed);
        match ended {
            Some(failure) => Err(failure),
            None => Ok(flow),
        }
    }

    fn stop(&mut self, state: &State<'_>) {
        // The agent sees the run stopping; the segment goes (status ENDED) when the spine
        // is dropped with this controller.
        self.spine.begin_shutdown();
        self.publish(state, false);
        // Off the real-time section: the refusal record, for the summary.
        *self.figures.refusals.lock().unwrap_or_else(|e| e.into_inner()) = Some(*self.spine.refusals());
    }

    fn summarizer(&self) -> Option<Summarizer> {
        let figures = self.figures();
        Some(Box::new(move |summary| figures.complete(summary)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtloop_proto::host::PositionResolution;
    use rtloop_proto::Resolution;

    #[test]
    fn int16_commands_narrow_positions_and_velocities_to_what_they_carry() {
        let limits = carried_limits(Limits::default(), &PositionResolution::all(Resolution::Int16));
        assert!((limits.position_max - 3.2767).abs() < 1e-9, "{}", limits.position_max);
        assert!((limits.position_min + 3.2767).abs() < 1e-9, "{}", limits.position_min);
        assert!((limits.max_velocity - 8.19175).abs() < 1e-9, "{}", limits.max_velocity);
        assert!((limits.max_accel - 32.767).abs() < 1e-9, "{}", limits.max_accel);
        // What int16 carries beyond the defaults leaves the defaults alone.
        let defaults = Limits::default();
        assert_eq!(limits.max_torque, defaults.max_torque);
        assert_eq!(limits.watchdog_max_s, defaults.watchdog_max_s);
        assert_eq!(limits.watchdog_min_s, defaults.watchdog_min_s);
    }

    #[test]
    fn float_commands_keep_the_limits() {
        let limits = carried_limits(Limits::default(), &PositionResolution::all(Resolution::Float));
        assert_eq!(limits, Limits::default());
    }

    /// The limits `rtloop run --agent` gives its spine (as `run_agent` in rtloop-cli's
    /// main.rs sets them), narrowed as [`AgentSpine::create`] narrows them.
    fn run_limits() -> Limits {
        let config = crate::config::RunConfig::default();
        let limits = Limits { max_torque: config.gains.maximum_torque, ..Limits::default() };
        carried_limits(limits, &crate::cycle_model::command_resolution())
    }

    #[test]
    fn the_protocol_doc_states_the_limits_rtloop_run_gives_its_spine() {
        // docs/agent-protocol.md section 7 said maximum_torque 0 to 10 while every run
        // refused anything above its [gains] maximum_torque, 8.
        let doc = include_str!("../../../docs/agent-protocol.md");
        let table = doc.split("| Field | `rtloop run --agent` accepts |").nth(1).expect("the limits table");
        let limits = run_limits();
        let mut checked = Vec::new();
        for row in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let fields: Vec<&str> = cells[1].split('`').skip(1).step_by(2).collect();
            let mut range = cells[2].split_whitespace();
            let lo: f64 = range.next().unwrap().parse().unwrap();
            assert_eq!(range.next(), Some("to"), "{row}");
            let hi: f64 = range.next().unwrap().parse().unwrap();
            for field in fields {
                let bit = rtloop_agent::layout::FIELD_NAMES.iter().position(|n| *n == field).unwrap();
                let mut command = rtloop_agent::RawServoCommand::QUERY;
                command.kind = rtloop_agent::layout::kind::POSITION;
                command.present = 1 << bit;
                command.set(bit, 1e12);
                let Err(ServoCommandError::OutOfRange { min, max, .. }) = rtloop_agent::validate(&command, &limits)
                else {
                    panic!("{field}: 1e12 was not out of range")
                };
                assert!(
                    (min - lo).abs() < 1e-9 && (max - hi).abs() < 1e-9,
                    "{field}: the doc says {lo} to {hi}, the spine {min} to {max}"
                );
                checked.push(field);
            }
        }
        checked.sort_unstable();
        let mut ranged: Vec<&str> = rtloop_agent::layout::FIELD_NAMES
            .iter()
            .copied()
            .filter(|f| !matches!(*f, "fixed_voltage_override" | "fixed_current_override" | "ignore_position_bounds"))
            .collect();
        ranged.sort_unstable();
        assert_eq!(checked, ranged, "every field with a range has its row");
    }

    #[test]
    fn a_spine_refuses_a_position_its_commands_cannot_carry() {
        let limits = carried_limits(Limits::default(), &crate::cycle_model::command_resolution());
        let mut command = rtloop_agent::RawServoCommand::QUERY;
        command.kind = rtloop_agent::layout::kind::POSITION;
        command.present = rtloop_agent::layout::field::POSITION;
        command.position = 5.0;
        assert!(rtloop_agent::validate(&command, &limits).is_err(), "5 rev would be clamped to 3.2767 on the wire");
        command.position = 3.0;
        assert!(rtloop_agent::validate(&command, &limits).is_ok());
    }
}
