//! What a run reports: [`RunSummary`] and its parts (`rtloop run --json` prints it as one
//! line), and what it says while it runs ([`Notice`]). Plain data: the run fills it in.

use serde::Serialize;
use std::collections::BTreeMap;

pub use crate::controller::MAX_SERVOS;
pub use crate::stats::Percentiles;

/// Exit status of a run that completed but lost servos or engaged its safety policy.
pub const EXIT_DEGRADED: u8 = 1;

/// Something a run has to say while it runs, handed to the callback set with
/// [`crate::Runtime::on_notice`] as it happens (the `rtloop` command prints it on stderr).
/// The run itself never prints.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Notice {
    /// A warning, before the loop starts: a setting the run can go on with but should not
    /// (the model's cycle time exceeds the period, a real-time request was refused, …). The
    /// summary lists it too ([`RunSummary::warnings`] or [`RealtimeSummary::warnings`]).
    Warning(String),
    /// How far the loop is, every period set with [`crate::Runtime::progress_every`].
    Progress(ProgressFigures),
    /// The loop has ended: no more [`Notice::Progress`] (given only when progress was asked
    /// for).
    ProgressEnd,
}

/// How far a running loop is ([`Notice::Progress`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProgressFigures {
    /// Seconds of the run done (cycles over the rate).
    pub time_s: f64,
    /// Seconds the run lasts.
    pub duration_s: f64,
    /// Cycles completed.
    pub cycles: u64,
    /// Cycles the run will have.
    pub total_cycles: u64,
    /// Duration of the last cycle, µs.
    pub last_cycle_us: f64,
    /// Longest cycle so far, µs.
    pub max_cycle_us: f64,
    /// Overruns so far.
    pub overruns: u64,
    /// Missing replies so far.
    pub missing: u64,
}

/// What the live publishers got.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LiveSummary {
    /// Messages the cycle thread could not hand to the telemetry thread (its ring was full):
    /// no publisher saw them. (With `--log`, the log's `dropped` counts the same ones.)
    pub handoff_dropped: u64,
    /// Each publisher.
    pub publishers: Vec<crate::live::LiveStats>,
    /// Remote commands accepted.
    pub remote_commands: u64,
}

/// What the telemetry log got.
#[derive(Debug, Clone, Serialize)]
pub struct LogSummary {
    /// The file.
    pub path: String,
    /// Messages in the file (every byte of them reached it).
    pub written: u64,
    /// Messages dropped because the writer fell behind (ring full; in lockstep, only when
    /// the writer thread died or stalled for seconds).
    pub dropped: u64,
    /// Messages the writer took but that are not in the file (a write failed).
    pub lost: u64,
    /// Failed write operations (disk full, …); not a message count, see `lost`.
    pub write_errors: u64,
    /// What the first failed write said.
    pub first_error: Option<String>,
    /// The closing stats record, index and flush reached the file.
    pub complete: bool,
    /// File size, bytes.
    pub bytes: u64,
}

impl LogSummary {
    /// One sentence when the log is not everything the run handed it, else `None`: a log
    /// exists to be trusted, so a gap in it makes the run degraded (exit 1).
    pub fn problem(&self) -> Option<String> {
        let total = self.written + self.dropped + self.lost;
        let mut gaps = Vec::new();
        if self.dropped > 0 {
            gaps.push(format!("{} dropped because the writer fell behind", self.dropped));
        }
        if self.lost > 0 {
            gaps.push(format!("{} lost to write errors", self.lost));
        }
        if gaps.is_empty() && self.complete && self.write_errors == 0 {
            return None;
        }
        let why = self.first_error.as_deref().map(|e| format!(" (first error: {e})")).unwrap_or_default();
        let gaps = if gaps.is_empty() { String::new() } else { format!(": {}", gaps.join(", ")) };
        let end = if self.complete { "" } else { "; its closing record did not reach the file" };
        let fix = if self.dropped > 0 && self.lost == 0 {
            "log to a faster disk or lower --rate"
        } else {
            "check the free space and the disk"
        };
        Some(format!(
            "the log {} holds {} of the {total} messages of the run{gaps}{end}{why}: {fix}",
            self.path, self.written
        ))
    }
}

/// The final state of one servo as the host last saw it, and what it was last told.
#[derive(Debug, Clone, Serialize)]
pub struct FinalServo {
    /// Servo id.
    pub id: u8,
    /// Bus number (1-based).
    pub bus: u8,
    /// The last command this servo was sent: position, stop, zero-velocity, brake or query.
    /// After Ctrl-C, the shutdown cycle's command (what the servo is left doing).
    pub commanded: &'static str,
    /// The state below comes from a reply to the run's last cycle (after Ctrl-C: the query
    /// that followed the shutdown command, so `mode` shows what the servo did with it);
    /// false: it is older, from the last reply that arrived.
    pub fresh: bool,
    /// Mode register.
    pub mode: Option<u8>,
    /// Position, rev.
    pub position: Option<f64>,
    /// Velocity, rev/s.
    pub velocity: Option<f64>,
    /// Torque, N·m.
    pub torque: Option<f64>,
    /// Fault code.
    pub fault: Option<u8>,
    /// Board temperature, °C.
    pub temperature: Option<f64>,
}

/// One event of the run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EventRecord {
    /// Seconds since the motion started.
    pub time: f64,
    /// The bus (its number), for every event about a servo or a bus; `None` for the robot.
    pub bus: Option<u8>,
    /// The servo, if one.
    pub servo: Option<u8>,
    /// What happened.
    pub kind: String,
    /// Detail (fault code, cycles missing, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The number a control law gave with its event (`agent_version_mismatch`: the agent's
    /// protocol version; `agent_not_armed`: how long the spine waited, ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
}

/// Which hook of the control law failed ([`ControlFailure::hook`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Hook {
    /// [`Controller::start`]: it refused to start; no period ran (with a control thread, the
    /// first period learnt it, and commanded the safe mode).
    Start,
    /// [`Controller::cycle`]: it asked for the safe stop.
    Cycle,
}

/// The control law's failure that ended the run ([`crate::controller::Failure`]; `failure`
/// in `rtloop run --json`). Its sentence is the summary's first problem.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ControlFailure {
    /// Its name: its event's `kind`.
    pub name: &'static str,
    /// `"start"` (it refused to start) or `"cycle"` (it asked for the safe stop).
    pub hook: Hook,
    /// When, s since the first period (a refusal to start comes before it).
    pub time: f64,
    /// The bus of the servo it is about (its number), `None` for the robot.
    pub bus: Option<u8>,
    /// The servo it is about, `None` for the robot.
    pub servo: Option<u8>,
    /// The number it gave, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    /// What went wrong.
    pub what: String,
    /// What to do about it.
    pub fix: String,
}

impl ControlFailure {
    /// The one sentence of `problems`: "WHAT at TIME (SERVO): FIX", TIME being "the start"
    /// for a refusal to start.
    pub fn problem(&self) -> String {
        let when = match self.hook {
            Hook::Start => "the start".to_string(),
            Hook::Cycle => format!("{:.3} s", self.time),
        };
        let servo = match self.servo {
            Some(_) => format!(" ({})", servo_name(self.servo, self.bus)),
            None => String::new(),
        };
        format!("{} at {when}{servo}: {}", self.what, self.fix)
    }
}

/// What was injected into the simulated buses.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InjectedSummary {
    /// The run's fault seed (`--seed` / `[faults] seed`, or drawn at random): give it back to
    /// repeat the run's drops and corruptions. Each bus derives its own from it.
    pub seed: u64,
    /// Servos scheduled to overheat: id → seconds.
    pub overheat: BTreeMap<u8, f64>,
    /// Frames lost on simulated wires.
    pub frames_dropped: u64,
    /// Frames bit-flipped on simulated wires (dropped by the receiver's CRC).
    pub frames_corrupted: u64,
    /// Extra servo turnaround, µs.
    pub reply_delay_us: u64,
}

/// Where the replies that were not fresh went: a late reply is attributed to the request it
/// answers (never reported fresh), a servo whose answer is still outstanding is commanded
/// without a query, and a request without an answer within the late-reply window is
/// presumed lost (see `rtloop_io::robot`).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct ReplyAccounting {
    /// Requests sent with a query.
    pub queried: u64,
    /// Replies that answered an earlier cycle's request.
    pub late: u64,
    /// Requests known lost: the servo answered a newer one first (it answers in order).
    pub lost: u64,
    /// Requests given up: the servo answered nothing within the late-reply window.
    pub expired: u64,
    /// Servo-cycles commanded without a query, an earlier reply still outstanding.
    pub unqueried: u64,
    /// Replies that matched no outstanding request (a duplicate, or later than the window).
    pub unattributed: u64,
    /// Replies that did not decode.
    pub decode_errors: u64,
}

impl ReplyAccounting {
    pub(super) fn add(&mut self, r: &rtloop_io::CycleReport) {
        self.queried += u64::from(r.queried);
        self.late += u64::from(r.late);
        self.lost += u64::from(r.lost);
        self.expired += u64::from(r.expired);
        self.unqueried += u64::from(r.unqueried);
        self.unattributed += u64::from(r.unattributed);
        self.decode_errors += u64::from(r.decode_errors);
    }
}

/// The real-time settings in effect and what was refused.
#[derive(Debug, Clone, Serialize)]
pub struct RealtimeSummary {
    /// Policy asked for: auto (the default), other, fifo, rr or deadline.
    pub requested_policy: String,
    /// Policy obtained.
    pub policy: String,
    /// Priority obtained.
    pub priority: i32,
    /// CPUs the cycle thread may run on.
    pub cpus: Vec<usize>,
    /// Memory locked.
    pub mlock: bool,
    /// Timer slack of the cycle thread, ns.
    pub timer_slack_ns: u64,
    /// Busy-wait before each deadline, µs.
    pub busy_wait_us: u64,
    /// Overrun policy.
    pub overrun: String,
    /// Control law on its own thread.
    pub control_thread: bool,
    /// /dev/cpu_dma_latency was held at 0 µs for the whole run (CPUs kept out of deep idle
    /// states, as cyclictest does).
    pub cpu_dma_latency_held: bool,
    /// One line per refused request.
    pub warnings: Vec<String>,
}

/// How a run went, in one word ([`RunSummary::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Status {
    /// Every servo answered and the safety policy never engaged (an interrupted run
    /// included).
    Ok,
    /// The run completed but something in [`RunSummary::problems`] went wrong.
    Degraded,
}

impl Status {
    /// `"ok"` or `"degraded"`: the word `--json` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Degraded => "degraded",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything `rtloop run` reports; `--json` prints it as one line.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// [`Status::Ok`], or [`Status::Degraded`] when `problems` is not empty (then `rtloop
    /// run` exits 1). JSON: `"ok"` or `"degraded"`.
    pub status: Status,
    /// What went wrong, one sentence each: servos that never answered or were lost, faults,
    /// the safety policy taking over, a log that is missing messages. Empty for a good run.
    pub problems: Vec<String>,
    /// Warnings given before the loop started (e.g. the model's cycle time exceeds the period).
    pub warnings: Vec<String>,
    /// Cycles run.
    pub cycles: u64,
    /// Achieved loop rate, measured between the first and the last wakeup.
    pub rate_hz: f64,
    /// Requested loop rate.
    pub target_rate_hz: f64,
    /// Time between the first and the last wakeup, s (covers `cycles − 1` periods).
    pub elapsed_s: f64,
    /// Servos driven.
    pub servos: usize,
    /// Buses driven.
    pub buses: usize,
    /// Cycles that ran past the next deadline.
    pub overruns: u64,
    /// Periods skipped because of overruns.
    pub skipped_periods: u64,
    /// Servo replies that did not arrive in their cycle.
    pub missing_replies: u64,
    /// How every request was accounted for beyond fresh and missing.
    pub reply_accounting: ReplyAccounting,
    /// Cycles that hit their deadline with replies missing.
    pub timeouts: u64,
    /// Frames that failed to send, plus bus errors.
    pub transport_errors: u64,
    /// Cycles with an IMU sample.
    pub imu_samples: u64,
    /// Cycle duration percentiles, µs.
    pub cycle_us: Percentiles,
    /// Wakeup latency percentiles (actual minus scheduled wakeup), µs.
    pub wakeup_us: Percentiles,
    /// The cycle-time model's prediction for this robot, µs.
    pub model_cycle_us: f64,
    /// The run ended early on Ctrl-C / SIGTERM (after one safe-mode cycle).
    pub interrupted: bool,
    /// Lockstep: time was simulated (one period per cycle, as fast as the controller
    /// allowed); `elapsed_s`, `rate_hz`, the latencies and the event times are simulated.
    pub lockstep: bool,
    /// Wall-clock seconds from the start of the loop to this summary: the loop, its shutdown
    /// cycles, and closing the log and the live publishers (bounded, whatever a viewer does).
    pub wall_s: f64,
    /// Wall-clock seconds of the loop alone, its shutdown cycles included (in lockstep, far
    /// less than `elapsed_s` when the controller keeps up): what a rate of simulated time per
    /// wall second is computed from.
    pub loop_wall_s: f64,
    /// The controller ended the run ([`crate::controller::Flow::Stop`], or a failure).
    pub ended_by_controller: bool,
    /// The control law's failure, when it refused to start or asked for the safe stop
    /// ([`crate::controller::Failure`]); absent from the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<ControlFailure>,
    /// Cycles run after the loop (not in `cycles`, but logged like every cycle): the shutdown
    /// cycle and the queries that read its result back (2 to 4).
    pub shutdown_cycles: u64,
    /// Control-thread commands that arrived too late for their cycle (the previous ones
    /// were reused), and state messages the control thread had not taken yet.
    pub control_late: u64,
    /// Events in time order.
    pub events: Vec<EventRecord>,
    /// Events that did not fit in the real-time event log.
    pub events_dropped: u64,
    /// Fault injection (simulated buses).
    pub injected: InjectedSummary,
    /// Real-time settings.
    pub realtime: RealtimeSummary,
    /// The telemetry log, when one was written.
    pub log: Option<LogSummary>,
    /// The live publishers (Foxglove, zenoh, your own), when there were any.
    pub live: Option<LiveSummary>,
    /// What the agent did, when the run followed one (`rtloop run --agent`).
    pub agent: Option<AgentSummary>,
    /// The body at the end of the run, with physics (`--physics`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<BodySummary>,
    /// Final state per servo: keyed by its id (`"5"`), or by id and bus number (`"5@2"`) when
    /// the same id lives on several buses.
    #[serde(rename = "final")]
    pub final_state: BTreeMap<String, FinalServo>,
}

/// The simulated body at the end of a run with physics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BodySummary {
    /// The model's name (`quadruped` for the built-in one).
    pub model: String,
    /// Where the body's origin ended, in the ground's frame (+x forward, +y left from where
    /// the model puts it, +z up), m.
    pub position_m: [f64; 3],
    /// Height of the body's origin above the ground, m.
    pub height_m: f64,
    /// Roll, degrees (right side down positive, as the IMU reads it).
    pub roll_deg: f64,
    /// Pitch, degrees (nose up positive).
    pub pitch_deg: f64,
    /// Plant steps taken.
    pub steps: u64,
    /// Times the body fell (`[safety] fall_tilt_deg`, `fall_height_m`); each is an event.
    pub falls: u32,
}

impl RunSummary {
    /// The process exit status for this run: 0 when every servo answered and the safety
    /// policy never engaged (an interrupted run included), [`EXIT_DEGRADED`] (1) otherwise.
    /// (Usage and setup errors never get a summary; `rtloop` exits 2 for them.)
    pub fn exit_code(&self) -> u8 {
        if self.problems.is_empty() {
            0
        } else {
            EXIT_DEGRADED
        }
    }
}

/// "servo 5 on bus 2" (the same id may live on several buses).
pub(crate) fn servo_name(id: Option<u8>, bus: Option<u8>) -> String {
    match (id, bus) {
        (Some(id), Some(bus)) => format!("servo {id} on bus {bus}"),
        (Some(id), None) => format!("servo {id}"),
        _ => "the robot".into(),
    }
}

/// What the agent did, in the run summary (`agent` in `rtloop run --json`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct AgentSummary {
    /// The agent name.
    pub name: String,
    /// Cycles whose commands came from a new command of the agent.
    pub commands_applied: u64,
    /// Cycles without a new command from the agent (its previous one was reused while it
    /// was followed, or the safe command or a query was sent).
    pub cycles_without_command: u64,
    /// Liveness timeouts.
    pub timeouts: u64,
    /// Armings, the first included: the same number as the shared state's `rearms`.
    pub rearms: u64,
    /// Servo commands refused by validation.
    pub refused: u64,
    /// Cycles with at least one refused servo command.
    pub refused_cycles: u64,
    /// The servos whose commands were refused, each with how many (empty: none was).
    pub refused_servos: Vec<RefusedServo>,
    /// Why they were refused: each distinct cause (the same error about the same field),
    /// typed, with its first refusal and how many refusals share it, in the order first
    /// seen (at most [`rtloop_agent::REFUSAL_CAUSES`]).
    pub refusal_causes: Vec<RefusalReport>,
    /// Refusals of further causes, counted only.
    pub refusals_of_other_causes: u64,
    /// How the segment was lost under the spine, which ended the run: `"truncated"` (the
    /// file became shorter than the segment) or `"replaced"` (truncated and grown again, or
    /// overwritten: the magic word is gone); `null` when it was not.
    pub segment_lost: Option<&'static str>,
    /// Cycles whose command the spine could not read consistently (the agent was mid-write
    /// on every try), at most one per cycle: the shared state's `torn`.
    pub torn: u64,
    /// New commands ignored because the header's `agent_version` was not this spine's
    /// protocol version.
    pub wrong_version: u64,
    /// Resets of the simulated world the agent asked for and got (the shared state's
    /// `resets`).
    pub resets: u64,
    /// Reset requests refused: the run has no physics world, or is not lockstep.
    pub resets_refused: u64,
}

/// One servo's refused commands (`agent.refused_servos` in `rtloop run --json`).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct RefusedServo {
    /// CAN id.
    pub id: u8,
    /// Bus number.
    pub bus: u8,
    /// Commands refused.
    pub refused: u64,
}

/// One cause of refusals (`agent.refusal_causes` in `rtloop run --json`): the first
/// refusal of that cause, typed, and how many share it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RefusalReport {
    /// What kind of error: `out_of_range`, `non_finite`, `override_not_allowed`,
    /// `unknown_kind`, `unknown_field_bits`, `fields_without_position`, `servo_count` or
    /// `no_such_servo`.
    pub kind: &'static str,
    /// The field, when it is about one.
    pub field: Option<&'static str>,
    /// The value the agent sent (the first refused one; NaN shows as `null`).
    pub value: Option<f64>,
    /// The lowest value the limit accepts (out of range only).
    pub min: Option<f64>,
    /// The highest value the limit accepts (out of range only).
    pub max: Option<f64>,
    /// The servo of the first refusal.
    pub servo: RefusedServo,
    /// Refusals of this cause.
    pub count: u64,
    /// The first refusal, in one sentence.
    pub message: String,
}
