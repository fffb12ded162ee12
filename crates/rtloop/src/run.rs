//! `rtloop run`: drive the robot from a periodic loop on its own real-time thread and report
//! honest figures — achieved rate, cycle time and wakeup latency percentiles, overruns,
//! missing replies, events — beside the cycle-time model's prediction.
//!
//! Before the loop: every value is range-checked, the cycle-time model is compared with the
//! period (a warning, an error with `strict`), `/dev/cpu_dma_latency` is held at 0 µs with a
//! real-time policy (as cyclictest does), and the servos are queried once so the control law
//! starts from where the joints are. The cycle thread applies the real-time settings (policy,
//! priority, affinity, mlockall, stack prefault, timer slack; every refusal is one warning,
//! or one error listing them all with `strict`; the default policy `auto` asks for SCHED_FIFO
//! at [`AUTO_PRIORITY`](crate::config::AUTO_PRIORITY), locked memory and the held idle latency where the process may, and
//! says in one warning what it did not get), then sleeps to absolute deadlines in
//! [`rt::periodic::PeriodicLoop`]. Each iteration: the control law's commands (computed
//! here, or by a control thread through wait-free ring buffers), the safety supervisor's
//! override, one multi-bus cycle, the supervisor's check.
//!
//! The run lasts `--duration` (the periods that begin before it ends, then the rest of the
//! duration); Ctrl-C / SIGTERM is heard within one period or 50 ms, whichever is less, even
//! in the middle of a long sleep. It ends the run with one cycle that commands the configured
//! safe mode and one query that reads back what the servos did with it.
//!
//! The outcome is in [`RunSummary::problems`]: empty when every servo answered and the
//! safety policy never engaged; otherwise `rtloop run` exits 1 (see [`RunSummary::exit_code`]).
//!
//! Must never: allocate, lock, print or block inside the real-time section (a test proves
//! it with a counting allocator); lose an event or a period silently.

use crate::config::{parse_policy, parse_shutdown, PolicyChoice, RunConfig};
use crate::controller::{Controller, CycleFigures, Flow, Output, Reported, ServoStatus, State, MAX_EVENTS_PER_CYCLE};
use crate::motion::Motion;
use crate::stats::Percentiles;
use crate::telemetry::{CycleLog, LogHandOff, LogMsg, LogSink};
use io::safety::{EventKind, SafetyConfig, Supervisor};
use io::{Clock, MonotonicClock, Robot, RobotConfig, ServoCommand, ServoReply, ServoSpec};
use rt::periodic::{OverrunPolicy, PeriodicLoop, PeriodicOptions, Tick, TimeSource};
use rt::setup::{Policy, RtSettings};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most servos the control-thread messages carry (fixed-size, so the rings never allocate).
pub const MAX_SERVOS: usize = 32;

/// Query cycles at most before the first command, to measure where every joint is.
const START_QUERIES: usize = 10;

/// Queries at most after the shutdown cycle, to read back what the servos did with it.
const READ_BACK_QUERIES: usize = 3;

/// Telemetry ring size: cycles the log writer may fall behind before messages are dropped
/// (and counted): half a second at 1 kHz. (A lockstep run waits for room instead.)
pub const LOG_RING_MESSAGES: usize = 512;

/// The first period starts this long after the servos were first queried (or one period,
/// if shorter), so the first wait is a real sleep without making a slow loop wait a whole
/// period before its first cycle.
pub const FIRST_TICK_DELAY_NS: u64 = 1_000_000;

/// Longest wait for a cycle's replies, ns: a cycle is never interrupted, so this bounds how
/// late a Ctrl-C can be heard (the wait is 90 % of the period when that is shorter).
pub const MAX_CYCLE_TIMEOUT_NS: u64 = 50_000_000;

/// How long the cycle thread waits, before the real-time section, for the control thread's
/// first commands.
const CONTROL_START_TIMEOUT: Duration = Duration::from_secs(1);

/// Exit status of a run that completed but lost servos or engaged its safety policy.
pub const EXIT_DEGRADED: u8 = 1;

/// What to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Everything configurable.
    pub config: RunConfig,
    /// Print progress on stderr.
    pub progress: bool,
    /// Record every cycle to this TLOG0003 file.
    pub log: Option<std::path::PathBuf>,
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

/// Live counters shared with the main thread (atomics only: no lock on the loop thread).
#[derive(Default)]
pub struct Progress {
    /// Cycles completed.
    pub cycles: AtomicU64,
    /// Overruns so far.
    pub overruns: AtomicU64,
    /// Missing replies so far.
    pub missing: AtomicU64,
    /// Duration of the last cycle.
    pub last_cycle_ns: AtomicU64,
    /// Longest cycle so far.
    pub max_cycle_ns: AtomicU64,
    /// The loop has finished.
    pub done: AtomicBool,
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
/// presumed lost (see `io::robot`).
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
    fn add(&mut self, r: &io::CycleReport) {
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

/// Everything `rtloop run` reports; `--json` prints it as one line.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// "ok", or "degraded" when `problems` is not empty (then `rtloop run` exits 1).
    pub status: &'static str,
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
    /// Wall-clock seconds the loop took (in lockstep, far less than `elapsed_s` when the
    /// controller keeps up).
    pub wall_s: f64,
    /// The controller ended the run ([`crate::controller::Flow::Stop`]).
    pub ended_by_controller: bool,
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
    pub agent: Option<crate::agent::AgentSummary>,
    /// Final state per servo: keyed by its id (`"5"`), or by id and bus number (`"5@2"`) when
    /// the same id lives on several buses.
    #[serde(rename = "final")]
    pub final_state: BTreeMap<String, FinalServo>,
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

fn opt(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// The name of a command, as `FinalServo::commanded` reports it.
fn command_name(c: &ServoCommand) -> &'static str {
    match c {
        ServoCommand::Query => "query",
        ServoCommand::Stop => "stop",
        ServoCommand::ZeroVelocity => "zero-velocity",
        ServoCommand::Brake => "brake",
        ServoCommand::Position(_) => "position",
    }
}

/// Most events one cycle hands a control thread (more in one cycle are still in the summary
/// and the log; the controller sees the first ones).
const EVENTS_PER_MESSAGE: usize = 8;

/// State the cycle thread hands the control thread each cycle (fixed size: no allocation).
#[derive(Clone, Copy)]
struct StateMsg {
    time_s: f64,
    cycle: u64,
    servos_len: usize,
    servos: [ServoStatus; MAX_SERVOS],
    imu: sim::ImuSample,
    last_cycle: CycleFigures,
    safe_mode: bool,
    events_len: usize,
    events: [io::safety::Event; EVENTS_PER_MESSAGE],
}

impl StateMsg {
    fn new() -> Self {
        let none = io::safety::Event { at_ns: 0, servo: None, kind: EventKind::Shutdown };
        StateMsg {
            time_s: 0.0,
            cycle: 0,
            servos_len: 0,
            servos: [ServoStatus::default(); MAX_SERVOS],
            imu: sim::ImuSample::default(),
            last_cycle: CycleFigures::default(),
            safe_mode: false,
            events_len: 0,
            events: [none; EVENTS_PER_MESSAGE],
        }
    }

    fn copy_from(&mut self, state: &State<'_>) {
        self.time_s = state.time_s;
        self.cycle = state.cycle;
        self.servos_len = state.servos.len().min(MAX_SERVOS);
        self.servos[..self.servos_len].copy_from_slice(&state.servos[..self.servos_len]);
        self.imu = *state.imu;
        self.last_cycle = *state.last_cycle;
        self.safe_mode = state.safe_mode;
        self.events_len = state.events.len().min(EVENTS_PER_MESSAGE);
        self.events[..self.events_len].copy_from_slice(&state.events[..self.events_len]);
    }

    fn state(&self) -> State<'_> {
        State {
            time_s: self.time_s,
            cycle: self.cycle,
            servos: &self.servos[..self.servos_len],
            imu: &self.imu,
            last_cycle: &self.last_cycle,
            safe_mode: self.safe_mode,
            events: &self.events[..self.events_len],
        }
    }
}

/// Commands the control thread hands back, for the cycle after `cycle`.
#[derive(Clone, Copy)]
struct CommandMsg<T> {
    cycle: u64,
    commands: [ServoCommand; MAX_SERVOS],
    telemetry: Option<T>,
    rearm: bool,
    flow: Flow,
    events_len: usize,
    events: [Reported; MAX_EVENTS_PER_CYCLE],
}

/// What the control thread is told.
#[derive(Clone, Copy)]
enum ToControl {
    /// The first measured state: call `start`.
    Start(StateMsg),
    /// A cycle's state: call `cycle`.
    Cycle(StateMsg),
    /// The run is over: call `stop`.
    Stop(StateMsg),
}

/// Where the commands come from.
enum ControlLaw<C: Controller> {
    /// The controller runs on the cycle thread (boxed: built once, before the real-time
    /// section, so moving it around never copies a large controller).
    Inline(Box<C>),
    /// The controller runs on a control thread; rings of fixed-size `Copy` messages in both
    /// directions, so sending never allocates.
    Thread { to_control: rtrb::Producer<ToControl>, from_control: rtrb::Consumer<CommandMsg<C::Telemetry>> },
}

/// Hooks around the real-time section, so a test can count allocations on this thread and
/// stop a run as Ctrl-C would.
pub struct Hooks {
    /// Called on the cycle thread just before the first real-time iteration.
    pub enter_rt: Box<dyn Fn() + Send>,
    /// Called on the cycle thread right after the last one.
    pub leave_rt: Box<dyn Fn() + Send>,
    /// Set to stop the run as Ctrl-C / SIGTERM does (checked with the signal flag).
    pub stop: Arc<AtomicBool>,
    /// The operator's commands (zenoh's command key sets them; so may you).
    pub remote: Arc<crate::live::RemoteControl>,
    /// Live publishers of your own, besides those the configuration asks for.
    pub publishers: Vec<crate::live::Publisher>,
}

impl Default for Hooks {
    fn default() -> Self {
        Hooks {
            enter_rt: Box::new(|| {}),
            leave_rt: Box::new(|| {}),
            stop: Arc::new(AtomicBool::new(false)),
            remote: Arc::new(crate::live::RemoteControl::new()),
            publishers: Vec::new(),
        }
    }
}

struct LoopResult<K: Clock> {
    periodic: rt::periodic::LoopStats,
    missing: u64,
    accounting: ReplyAccounting,
    timeouts: u64,
    transport_errors: u64,
    imu_samples: u64,
    control_late: u64,
    interrupted: bool,
    ended_by_controller: bool,
    wall_s: f64,
    shutdown_cycles: u64,
    replies: Vec<ServoReply>,
    /// The last command each servo was sent.
    last_commands: Vec<ServoCommand>,
    /// Each servo answered at least once.
    answered: Vec<bool>,
    supervisor: Supervisor,
    start_ns: u64,
    robot: Robot<K>,
}

/// Everything the cycle thread needs, prepared before it starts.
pub struct CycleSetup<K: Clock> {
    robot: Robot<K>,
    config: RunConfig,
    shutdown: ServoCommand,
    overrun: OverrunPolicy,
    bus_numbers: Vec<u8>,
}

/// Seconds (validated: 0 to one year) as nanoseconds, saturating.
fn secs_to_ns(s: f64) -> u64 {
    (s * 1e9).round().clamp(0.0, u64::MAX as f64) as u64
}

/// No position command leaves without a watchdog: one without a valid watchdog timeout
/// (absent, NaN, 0 "servo default", or outside 0.01 … 10 s) gets the run's
/// `[gains] watchdog_timeout_s`, so no control law can switch the servos' watchdog off.
fn enforce_watchdog(commands: &mut [ServoCommand], watchdog_s: f64) {
    for c in commands {
        if let ServoCommand::Position(p) = c {
            if !p.watchdog_timeout.is_some_and(|w| {
                (crate::config::MIN_WATCHDOG_TIMEOUT_S..=crate::config::MAX_WATCHDOG_TIMEOUT_S).contains(&w)
            }) {
                p.watchdog_timeout = Some(watchdog_s);
            }
        }
    }
}

/// Robot exchange numbers ([`io::CycleReport::cycle`]) of the last periods, to tell a
/// controller which period's request a state answers. Fixed size: no allocation.
struct PeriodOfExchange {
    slots: [(u64, u64); Self::SLOTS],
}

impl PeriodOfExchange {
    const SLOTS: usize = 1024;

    fn new() -> Self {
        PeriodOfExchange { slots: [(u64::MAX, 0); Self::SLOTS] }
    }

    fn note(&mut self, exchange: u64, period: u64) {
        self.slots[(exchange % Self::SLOTS as u64) as usize] = (exchange, period);
    }

    fn period(&self, exchange: u64) -> Option<u64> {
        let (e, p) = self.slots[(exchange % Self::SLOTS as u64) as usize];
        (e == exchange).then_some(p)
    }
}

/// What the controller sees of each servo, from the robot's replies.
fn fill_statuses(
    out: &mut [ServoStatus],
    replies: &[ServoReply],
    servos: &[ServoSpec],
    bus_numbers: &[u8],
    periods: &PeriodOfExchange,
) {
    for ((o, r), s) in out.iter_mut().zip(replies).zip(servos) {
        *o = ServoStatus {
            id: s.id,
            bus: bus_numbers.get(s.bus).copied().unwrap_or(0),
            bus_index: s.bus,
            state: r.state,
            fresh: r.fresh,
            age_cycles: r.age(),
            from_cycle: r.request_cycle.and_then(|c| periods.period(c)),
            missing_streak: r.missing_streak,
        };
    }
}

/// The real-time half of the run. Everything between the `enter_rt` and `leave_rt` hooks
/// must not allocate, lock or block (tests/rt_no_alloc.rs).
fn run_loop<C: Controller, K: Clock + Clone, T: TimeSource>(
    setup: CycleSetup<K>,
    time: T,
    progress: &Progress,
    hooks: &Hooks,
    mut law: ControlLaw<C>,
    mut logger: Option<LogHandOff<C::Telemetry>>,
) -> LoopResult<K> {
    let CycleSetup { mut robot, config, shutdown, overrun, bus_numbers } = setup;
    let n = robot.servos().len();
    let servos: Vec<ServoSpec> = robot.servos().to_vec();
    let clock = robot.cycler().clock().clone();
    let period_ns = config.period_ns();
    let total_periods = config.periods();
    let safety = SafetyConfig {
        on_fault: config.safety.on_fault.parse().unwrap_or_default(),
        missing_limit: config.safety.missing_limit,
        recovery: config.recovery().unwrap_or_default(),
    };
    let mut supervisor = Supervisor::new(safety, n, 1024);
    // What the controller asked for (kept from cycle to cycle), and what was sent once the
    // supervisor had its say.
    let mut wanted = vec![ServoCommand::Query; n];
    let mut commands = vec![ServoCommand::Query; n];
    let queries = vec![ServoCommand::Query; n];
    let mut replies = vec![ServoReply::default(); n];
    let mut statuses = vec![ServoStatus::default(); n];
    let mut periods = Box::new(PeriodOfExchange::new());
    let mut answered = vec![false; n];
    let mut imu = sim::ImuSample::default();
    let mut figures = CycleFigures::default();
    let (mut missing, mut timeouts, mut terr, mut imu_samples, mut control_late) = (0u64, 0u64, 0u64, 0u64, 0u64);
    // What `progress` publishes: kept on this thread, stored each cycle.
    let (mut cycles_done, mut max_cycle_ns) =
        (progress.cycles.load(Ordering::Relaxed), progress.max_cycle_ns.load(Ordering::Relaxed));
    let mut accounting = ReplyAccounting::default();
    let stop =
        || crate::signals::stop_requested() || hooks.stop.load(Ordering::Relaxed) || hooks.remote.stop_requested();
    // The operator's commands as last seen (`crate::live::RemoteControl`).
    let mut remote_held = false;
    let mut remote_rearms = hooks.remote.rearms();
    let mut telemetry: Option<C::Telemetry> = None;
    let mut events_seen;
    // The simulator's injected events handed to the log so far, per bus.
    let mut injected_logged = vec![0usize; bus_numbers.len()];
    let watchdog_s = config.gains.watchdog_timeout_s;

    // Learn where the joints are before moving them, and hand that to the controller
    // before its first command: a few query cycles, until every servo has answered.
    for _ in 0..START_QUERIES {
        accounting.add(&robot.cycle(&queries, &mut replies, &mut imu));
        if replies.iter().all(|r| r.request_cycle.is_some()) || stop() {
            break;
        }
    }
    // A servo found in mode 11 (its watchdog expired before this run: an earlier host stopped
    // commanding it) ignores every command but a stop: send it one before the first command,
    // and say so; this run did not cause it. Faults (mode 1) are left for the supervisor.
    if replies.iter().any(|r| r.state.mode == Some(11)) {
        let clear: Vec<ServoCommand> = replies
            .iter()
            .map(|r| if r.state.mode == Some(11) { ServoCommand::Stop } else { ServoCommand::Query })
            .collect();
        accounting.add(&robot.cycle(&clear, &mut replies, &mut imu));
        for (i, c) in clear.iter().enumerate() {
            if *c == ServoCommand::Stop {
                supervisor.record(clock.now_ns(), servos.get(i).copied(), EventKind::StaleTimeoutCleared);
            }
        }
        // A reply shows the state from before its own frame's command: read the result.
        accounting.add(&robot.cycle(&queries, &mut replies, &mut imu));
    }
    for (a, r) in answered.iter_mut().zip(&replies) {
        *a |= r.request_cycle.is_some();
    }
    fill_statuses(&mut statuses, &replies, &servos, &bus_numbers, &periods);
    {
        let events = supervisor.events();
        events_seen = events.len();
        let first = State {
            time_s: 0.0,
            cycle: 0,
            servos: &statuses,
            imu: &imu,
            last_cycle: &figures,
            safe_mode: supervisor.tripped_at().is_some(),
            events,
        };
        match &mut law {
            ControlLaw::Inline(controller) => controller.start(&first),
            ControlLaw::Thread { to_control, .. } => {
                let mut msg = StateMsg::new();
                msg.copy_from(&first);
                let _ = to_control.push(ToControl::Start(msg));
            }
        }
    }
    let start = clock.now_ns().saturating_add(period_ns.min(FIRST_TICK_DELAY_NS));
    let end = start.saturating_add(config.duration_ns());
    if let Ok(overheats) = config.overheats() {
        for o in overheats {
            let at = start.saturating_add(secs_to_ns(o.at_s));
            for s in servos.iter().filter(|s| s.id == o.id) {
                robot.cycler_mut().with_sim_bus(s.bus, |bus| bus.schedule_overheat(o.id, at));
            }
        }
    }
    let busy_wait_ns = config.realtime.busy_wait_us.saturating_mul(1000);
    let mut lp = PeriodicLoop::with_time_source(
        period_ns,
        PeriodicOptions { busy_wait_ns, overrun, start_ns: Some(start) },
        time,
    );
    let mut interrupted = false;
    let mut ended_by_controller = false;
    let mut cycle_log = CycleLog::default();
    let mut events_logged = 0usize;
    let mut first_command_pending = true;

    let wall_start = Instant::now();
    (hooks.enter_rt)();
    // --- real-time section: no allocation, no locks, no I/O below this line ---
    loop {
        if lp.next_index() >= total_periods {
            // Every period of the run has begun: wait out the rest of the duration.
            interrupted = !lp.sleep_until_unless(end, stop);
            break;
        }
        let Some(tick) = lp.wait_next_unless(stop) else {
            interrupted = true;
            break;
        };
        if tick.index >= total_periods {
            // Overruns skipped past the end of the run.
            break;
        }
        let events = supervisor.events();
        let state = State {
            time_s: tick.deadline_ns.saturating_sub(start) as f64 * 1e-9,
            cycle: tick.index,
            servos: &statuses,
            imu: &imu,
            last_cycle: &figures,
            safe_mode: supervisor.tripped_at().is_some(),
            events: events.get(events_seen..).unwrap_or(&[]),
        };
        events_seen = events.len();
        let mut rearm = false;
        let mut reported = [Reported::default(); MAX_EVENTS_PER_CYCLE];
        let mut reported_len = 0;
        let flow = match &mut law {
            ControlLaw::Inline(controller) => {
                let mut out = Output::new(&mut wanted, &mut telemetry);
                let flow = controller.cycle(&state, &mut out);
                rearm = out.rearm_requested();
                reported_len = out.events().len();
                reported[..reported_len].copy_from_slice(out.events());
                flow
            }
            ControlLaw::Thread { to_control, from_control } => {
                // Take the newest commands (older ones are stale by now); the first cycle
                // waits for the commands computed from the measured start, as the inline
                // controller's are.
                let mut got = None;
                if first_command_pending {
                    let give_up = clock.now_ns().saturating_add(CONTROL_START_TIMEOUT.as_nanos() as u64);
                    while got.is_none() && clock.now_ns() < give_up && !stop() {
                        got = from_control.pop().ok();
                        std::hint::spin_loop();
                    }
                    first_command_pending = false;
                }
                while let Ok(msg) = from_control.pop() {
                    got = Some(msg);
                }
                let mut flow = Flow::Continue;
                match got {
                    Some(msg) => {
                        wanted.copy_from_slice(&msg.commands[..n]);
                        telemetry = msg.telemetry;
                        rearm = msg.rearm;
                        flow = msg.flow;
                        reported_len = msg.events_len;
                        reported[..reported_len].copy_from_slice(&msg.events[..msg.events_len]);
                    }
                    None if tick.index > 0 => control_late += 1,
                    None => {}
                }
                let mut msg = StateMsg::new();
                msg.copy_from(&state);
                if to_control.push(ToControl::Cycle(msg)).is_err() {
                    control_late += 1;
                }
                flow
            }
        };
        let now = clock.now_ns();
        for r in &reported[..reported_len] {
            let kind = EventKind::Controller { name: r.name, value: r.value };
            supervisor.record(now, r.servo.and_then(|i| servos.get(i).copied()), kind);
        }
        if rearm {
            supervisor.rearm(now);
        }
        // The operator's commands: a re-arm ends the hold and the safe mode; a hold sends
        // every healthy servo zero velocity, whatever the control law asks.
        let rearms = hooks.remote.rearms();
        if rearms != remote_rearms {
            remote_rearms = rearms;
            supervisor.record(now, None, EventKind::Controller { name: "remote_rearm", value: None });
            supervisor.rearm(now);
        }
        let held = hooks.remote.held();
        if held && !remote_held {
            supervisor.record(now, None, EventKind::Controller { name: "remote_zero_velocity", value: None });
        }
        remote_held = held;
        commands.copy_from_slice(&wanted);
        enforce_watchdog(&mut commands, watchdog_s);
        supervisor.apply(&mut commands);
        if held {
            hold_at_zero_velocity(&mut commands, supervisor.faulted());
        }
        let report = robot.cycle(&commands, &mut replies, &mut imu);
        let now = clock.now_ns();
        periods.note(report.cycle, tick.index);
        supervisor.check(now, &servos, &replies);
        for (a, r) in answered.iter_mut().zip(&replies) {
            *a |= r.request_cycle.is_some();
        }
        fill_statuses(&mut statuses, &replies, &servos, &bus_numbers, &periods);
        let dt = report.stats.duration_ns();
        figures = CycleFigures {
            wakeup_ns: tick.late_ns(),
            duration_ns: dt,
            missing: report.missing,
            late: report.late,
            timed_out: report.stats.timed_out,
        };
        if let Some(log) = logger.as_mut() {
            if log.wants_cycle(tick.index) {
                cycle_log.fill(&tick, dt, &report, &servos, &bus_numbers, &commands, &replies, &imu);
                log.log(LogMsg::Cycle(cycle_log));
            }
            if let Some(value) = telemetry.take().filter(|_| log.wants_custom()) {
                log.log(LogMsg::Custom { at_ns: tick.woke_ns, value });
            }
            events_logged = log_events(log, &supervisor, events_logged, &bus_numbers);
            log_injected(log, &mut robot, &mut injected_logged, &bus_numbers);
        }
        telemetry = None;
        missing += report.missing as u64;
        accounting.add(&report);
        timeouts += report.stats.timed_out as u64;
        terr += report.stats.send_errors as u64 + report.stats.failed_buses.count_ones() as u64;
        imu_samples += report.stats.imu_present as u64;
        // Counters kept here and published with plain stores (no read-modify-write: only
        // this thread writes them), never statistics: `lp.stats()` computes percentiles
        // over two histograms, tens of µs, far too much per cycle (benches/bookkeeping.rs).
        cycles_done += 1;
        max_cycle_ns = max_cycle_ns.max(dt);
        progress.cycles.store(cycles_done, Ordering::Relaxed);
        progress.missing.store(missing, Ordering::Relaxed);
        progress.last_cycle_ns.store(dt, Ordering::Relaxed);
        progress.max_cycle_ns.store(max_cycle_ns, Ordering::Relaxed);
        lp.end_cycle();
        progress.overruns.store(lp.overruns(), Ordering::Relaxed);
        if flow == Flow::Stop {
            ended_by_controller = true;
            break;
        }
    }
    if hooks.remote.stop_requested() {
        supervisor.record(clock.now_ns(), None, EventKind::Controller { name: "remote_stop", value: None });
    }
    let mut shutdown_cycles = 0;
    {
        // However the run ends — its duration, Ctrl-C, SIGTERM, SIGHUP — one last cycle
        // leaves every healthy servo in the safe mode (rather than to its watchdog, which
        // latches mode 11 that only a stop leaves), logged like any other, then queries: a
        // reply shows the state from before its own frame's command, so only a later one
        // shows what the servos did with the safe mode. Up to three, until every servo has
        // answered one (a reply can miss a cycle on a busy machine).
        supervisor.shutdown(shutdown, &mut commands);
        for (index, phase) in (lp.next_index()..).zip(0..1 + READ_BACK_QUERIES) {
            if phase >= 2 && replies.iter().all(|r| r.fresh) {
                break;
            }
            let sent = if phase == 0 { &commands } else { &queries };
            let woke = clock.now_ns();
            let report = robot.cycle(sent, &mut replies, &mut imu);
            periods.note(report.cycle, index);
            accounting.add(&report);
            shutdown_cycles += 1;
            for (a, r) in answered.iter_mut().zip(&replies) {
                *a |= r.request_cycle.is_some();
            }
            if phase == 0 {
                supervisor.record(clock.now_ns(), None, EventKind::Shutdown);
            }
            if let Some(log) = logger.as_mut() {
                let tick = Tick { index, deadline_ns: woke, woke_ns: woke };
                let dt = report.stats.duration_ns();
                cycle_log.fill(&tick, dt, &report, &servos, &bus_numbers, sent, &replies, &imu);
                log.log(LogMsg::Cycle(cycle_log));
                events_logged = log_events(log, &supervisor, events_logged, &bus_numbers);
                log_injected(log, &mut robot, &mut injected_logged, &bus_numbers);
            }
        }
    }
    // --- end of real-time section ---
    (hooks.leave_rt)();
    let wall_s = wall_start.elapsed().as_secs_f64();
    fill_statuses(&mut statuses, &replies, &servos, &bus_numbers, &periods);
    {
        let events = supervisor.events();
        let last = State {
            time_s: clock.now_ns().saturating_sub(start) as f64 * 1e-9,
            cycle: lp.next_index(),
            servos: &statuses,
            imu: &imu,
            last_cycle: &figures,
            safe_mode: supervisor.tripped_at().is_some(),
            events: events.get(events_seen..).unwrap_or(&[]),
        };
        match &mut law {
            ControlLaw::Inline(controller) => controller.stop(&last),
            ControlLaw::Thread { to_control, .. } => {
                let mut msg = StateMsg::new();
                msg.copy_from(&last);
                let _ = to_control.push(ToControl::Stop(msg));
            }
        }
    }
    let mut periodic = lp.stats();
    // The last cycle's overrun may skip periods that lie past the end of the run: they were
    // never part of it, and `cycles + skipped_periods` is the run's period count at most.
    periodic.skipped_periods = periodic.skipped_periods.min(total_periods.saturating_sub(periodic.cycles));
    LoopResult {
        periodic,
        missing,
        accounting,
        timeouts,
        transport_errors: terr,
        imu_samples,
        control_late,
        interrupted,
        ended_by_controller,
        wall_s,
        shutdown_cycles,
        replies,
        last_commands: commands,
        answered,
        supervisor,
        start_ns: start,
        robot,
    }
}

/// Hold every servo at zero velocity (the operator asked, `crate::live::RemoteCommand`),
/// but only query a faulted one, as the safe mode does: its fault stays reported.
fn hold_at_zero_velocity(commands: &mut [ServoCommand], faulted: &[bool]) {
    for (i, c) in commands.iter_mut().enumerate() {
        *c = if faulted.get(i).copied().unwrap_or(false) { ServoCommand::Query } else { ServoCommand::ZeroVelocity };
    }
}

/// Hand the supervisor's events from `from` on to the log; returns how many are logged.
fn log_events<T>(log: &mut LogHandOff<T>, supervisor: &Supervisor, from: usize, bus_numbers: &[u8]) -> usize {
    let events = supervisor.events();
    for e in events.get(from..).unwrap_or(&[]) {
        let (bus, servo) = match e.servo {
            Some(s) => (bus_numbers.get(s.bus).copied().unwrap_or(0), s.id),
            None => (0, 0),
        };
        log.log(LogMsg::Event { at_ns: e.at_ns, bus, servo, kind: e.kind.name() });
    }
    events.len()
}

/// Hand the simulator's injected events (an overheat started, a fault latched, frames lost
/// on the wire) to the log as they happen, as the supervisor's are, so that every event of
/// the summary reaches the log and the live publishers. Reads each bus's event log without
/// emptying it (the summary drains it at the end, with the final counts of coalesced frame
/// losses); `logged[b]` counts bus b's entries handed over. No allocation: the bus's log is
/// a fixed ring of at most `sim::EVENT_CAPACITY` entries.
fn log_injected<T, K: Clock>(log: &mut LogHandOff<T>, robot: &mut Robot<K>, logged: &mut [usize], bus_numbers: &[u8]) {
    for (b, logged) in logged.iter_mut().enumerate() {
        let bus = bus_numbers.get(b).copied().unwrap_or(0);
        robot.cycler_mut().with_sim_bus(b, |sim| {
            for e in sim.events().skip(*logged) {
                log.log(LogMsg::Event {
                    at_ns: e.at_ns,
                    bus,
                    servo: e.servo.unwrap_or(0),
                    kind: injected_name(&e.kind),
                });
                *logged += 1;
            }
        });
    }
}

/// The name of an injected event, in the summary and the log.
fn injected_name(kind: &sim::InjectedKind) -> &'static str {
    match kind {
        sim::InjectedKind::OverheatStarted => "injected_overheat",
        sim::InjectedKind::FaultLatched { .. } => "servo_fault_latched",
        sim::InjectedKind::FrameDropped { .. } => "injected_frame_drops",
        sim::InjectedKind::FrameCorrupted { .. } => "injected_frame_corruption",
    }
}

/// The control thread: the measured start first, then the newest state in and the
/// controller's commands for the next cycle out, until the run is over. Not real-time
/// itself; it must only keep up.
fn control_thread<C: Controller>(
    mut controller: C,
    n: usize,
    period_s: f64,
    mut from_cycle: rtrb::Consumer<ToControl>,
    mut to_cycle: rtrb::Producer<CommandMsg<C::Telemetry>>,
) -> C {
    let mut out = CommandMsg {
        cycle: 0,
        commands: [ServoCommand::Query; MAX_SERVOS],
        telemetry: None,
        rearm: false,
        flow: Flow::Continue,
        events_len: 0,
        events: [Reported::default(); MAX_EVENTS_PER_CYCLE],
    };
    let mut command = |controller: &mut C, state: &State<'_>| {
        out.cycle = state.cycle;
        out.telemetry = None;
        let mut output = Output::new(&mut out.commands[..n], &mut out.telemetry);
        out.flow = controller.cycle(state, &mut output);
        out.rearm = output.rearm_requested();
        out.events_len = output.events().len();
        out.events[..out.events_len].copy_from_slice(output.events());
        let _ = to_cycle.push(out);
    };
    loop {
        let mut newest = None;
        let mut heard = false;
        while let Ok(m) = from_cycle.pop() {
            heard = true;
            match m {
                // The start is never skipped: the commands of cycle 0 come from it.
                ToControl::Start(s) => {
                    let state = s.state();
                    controller.start(&state);
                    command(&mut controller, &state);
                }
                ToControl::Cycle(s) => newest = Some(s),
                ToControl::Stop(s) => {
                    controller.stop(&s.state());
                    return controller;
                }
            }
        }
        match newest {
            // The state read in cycle k gives the commands of cycle k + 1.
            Some(s) => {
                let mut next = s;
                next.cycle = s.cycle + 1;
                next.time_s = s.time_s + period_s;
                command(&mut controller, &next.state());
            }
            None if !heard && from_cycle.is_abandoned() => return controller,
            None if !heard => std::thread::sleep(Duration::from_micros(50)),
            None => {}
        }
    }
}

/// The real-time settings the cycle thread asks for. `auto` asks for SCHED_FIFO at
/// [`AUTO_PRIORITY`](crate::config::AUTO_PRIORITY) (or the priority given) and locked memory where the limits allow it — but
/// SCHED_OTHER in lockstep ([`RunConfig::auto_realtime`]).
fn rt_settings(config: &RunConfig) -> Result<RtSettings, String> {
    let r = &config.realtime;
    let choice = parse_policy(&r.policy).map_err(|e| format!("realtime.policy: {e}"))?;
    let (policy, priority, mlock, mlock_if_unbounded) = match choice {
        PolicyChoice::Auto if config.auto_realtime() => (Policy::Fifo, config.auto_priority(), true, !r.mlock),
        PolicyChoice::Auto => (Policy::Other, 0, r.mlock, false),
        PolicyChoice::Exact(p) => (p, r.priority, r.mlock, false),
    };
    let mut settings = RtSettings {
        policy,
        priority,
        cpus: r.cpus.clone(),
        mlock,
        mlock_if_unbounded,
        strict: r.strict,
        ..RtSettings::default()
    };
    if policy == Policy::Deadline {
        // Reserve 90 % of each period for the cycle thread.
        let period = config.period_ns();
        settings.deadline =
            Some(rt::setup::DeadlineParams { runtime_ns: period / 10 * 9, deadline_ns: period, period_ns: period });
    }
    Ok(settings)
}

/// The model's warning when one cycle of this robot is predicted to take longer than the
/// period, or `None`. Only where the model applies: CAN-FD wire time (a real bus, or a
/// simulated one with wire time).
fn model_warning(config: &RunConfig) -> Option<String> {
    let robot = config.robot();
    if !config.sim.wire_time && robot.all_simulated() {
        return None;
    }
    let predicted_ns = sim::model::predict(&model_of_run(config)).total_ns;
    let period_ns = config.period_ns();
    if predicted_ns <= period_ns {
        return None;
    }
    let busiest = robot.buses.iter().max_by_key(|b| b.servos.len())?;
    let servos = busiest.servos.len();
    Some(format!(
        "the cycle-time model predicts {:.0} µs per cycle for this robot ({servos} servo{} on bus {}), longer than the \
         {:.0} µs period at {} Hz: lower the rate to at most {:.0} Hz or spread the servos over more buses",
        predicted_ns as f64 / 1000.0,
        if servos == 1 { "" } else { "s" },
        busiest.bus,
        period_ns as f64 / 1000.0,
        config.rate_hz,
        (1e9 / predicted_ns as f64).floor()
    ))
}

/// The warning when the servos' watchdog would expire between two commands, or `None`.
fn watchdog_warning(config: &RunConfig) -> Option<String> {
    let timeout_s = config.gains.watchdog_timeout_s;
    let whose = "[gains] watchdog_timeout_s";
    let period_s = config.period_ns() as f64 * 1e-9;
    (timeout_s <= period_s).then(|| {
        format!(
            "the servos' watchdog ({timeout_s} s, {whose}) is not longer than the {period_s} s period: every servo \
             will latch mode 11 (timeout) between two commands; set [gains] watchdog_timeout_s above the period \
             (at most 10 s) or raise the rate"
        )
    })
}

/// Run the demonstration motion and return the summary; real-time warnings are printed on
/// stderr as they happen.
pub fn run(opts: &RunOptions) -> Result<RunSummary, String> {
    run_with_hooks(opts, Hooks::default())
}

/// [`run`] with hooks around the real-time section.
pub fn run_with_hooks(opts: &RunOptions, hooks: Hooks) -> Result<RunSummary, String> {
    execute(opts, hooks, Motion::from_config(&opts.config))
}

/// The resolution of the position commands a run sends: int16 (compact frames; positions to
/// ±3.2767 rev, velocities to ±8.19 rev/s). The agent spine's limits never exceed it.
pub(crate) fn command_resolution() -> proto::host::PositionResolution {
    RobotConfig::default().position_resolution
}

/// The protocol settings a run uses on `robot` (before its timing is set): position commands
/// at [`command_resolution`], and the comprehensive query — or, on a pi3hat, the compact one.
/// `rtloop budget` builds its frames with the same settings.
pub fn robot_config_for(robot: &crate::robot_spec::RobotSpec) -> RobotConfig {
    RobotConfig { position_resolution: command_resolution(), query: robot.query_format(), ..RobotConfig::default() }
}

/// Simulated time for a lockstep run: the loop's sleeps move the robot's virtual clock.
struct VirtualTime(io::VirtualClock);

impl TimeSource for VirtualTime {
    fn now_ns(&mut self) -> u64 {
        self.0.now_ns()
    }

    fn sleep_until_ns(&mut self, deadline_ns: u64) {
        self.0.wait_until_ns(deadline_ns);
    }
}

/// The fault seed of a run without `faults.seed`: random, except in lockstep, where the
/// same inputs must give the same run.
const LOCKSTEP_SEED: u64 = 0;

/// Run `controller` on the robot `opts` describe: the engine behind [`crate::Runtime`].
pub fn execute<C: Controller + 'static>(opts: &RunOptions, hooks: Hooks, controller: C) -> Result<RunSummary, String> {
    if opts.config.sim.lockstep {
        if !opts.config.robot().all_simulated() {
            return Err("lockstep runs only on simulated buses (its time is simulated): drop --lockstep, or \
                        use sim buses"
                .into());
        }
        // Starts at 0: the log's stamps are simulated time, the same in every run.
        let clock = io::VirtualClock::new(0);
        execute_on(opts, hooks, controller, clock.clone(), VirtualTime(clock))
    } else {
        // A simulated robot has no hardware whose answer a spin could catch sooner: its waits
        // sleep, so the default SCHED_FIFO cycle thread never holds a core while it waits.
        let clock =
            if opts.config.robot().all_simulated() { MonotonicClock { spin_ns: 0 } } else { MonotonicClock::default() };
        execute_on(opts, hooks, controller, clock, rt::periodic::Monotonic)
    }
}

fn execute_on<C, K, T>(
    opts: &RunOptions,
    mut hooks: Hooks,
    controller: C,
    clock: K,
    time: T,
) -> Result<RunSummary, String>
where
    C: Controller + 'static,
    K: Clock + Clone + Send + 'static,
    T: TimeSource + Send + 'static,
{
    let lockstep = opts.config.sim.lockstep;
    let config = opts.config.clone();
    config.validate()?;
    let settings = rt_settings(&config)?;
    let overrun: OverrunPolicy = config.realtime.overrun.parse().map_err(|e| format!("realtime.overrun: {e}"))?;
    let shutdown = parse_shutdown(&config.safety.shutdown)?;
    let robot_spec = config.robot();
    if robot_spec.servo_count() > MAX_SERVOS {
        return Err(format!("{} servos configured; rtloop run drives at most {MAX_SERVOS}", robot_spec.servo_count()));
    }
    let strict = config.realtime.strict;
    let mut warnings = Vec::new();
    if let Some(w) = model_warning(&config) {
        if strict {
            return Err(format!("--strict: {w}"));
        }
        crate::cli::console::note(format!("rtloop run: warning: {w}"));
        warnings.push(w);
    }
    if let Some(w) = watchdog_warning(&config) {
        crate::cli::console::note(format!("rtloop run: warning: {w}"));
        warnings.push(w);
    }
    let seed =
        config.faults.seed.unwrap_or_else(|| if lockstep { LOCKSTEP_SEED } else { crate::config::random_seed() });
    let mut robot_config = robot_config_for(&robot_spec);
    // Never let one cycle run into the next period, nor keep Ctrl-C waiting.
    robot_config.cycle.timeout_ns = (config.period_ns() / 10 * 9).clamp(50_000, MAX_CYCLE_TIMEOUT_NS);
    let sim_bus = sim::BusConfig {
        drop_rate: config.faults.drop_rate,
        corrupt_rate: config.faults.corrupt_rate,
        // Validated: at most 10 s, so the product cannot overflow.
        reply_delay_ns: config.faults.reply_delay_us.saturating_mul(1000),
        fault_seed: seed,
        ..if config.sim.wire_time { sim::BusConfig::default() } else { sim::BusConfig::without_wire_time() }
    };
    sim_bus.validate().map_err(|e| e.to_string())?;
    let open = io::open::OpenOptions { sim_bus, ..Default::default() };
    let mut robot = robot_spec.build(clock, robot_config, open)?;
    let servos: Vec<ServoSpec> = robot.servos().to_vec();
    if config.sim.start_position_rev != 0.0 {
        for s in &servos {
            let p = config.sim.start_position_rev;
            robot.cycler_mut().with_sim_bus(s.bus, |b| b.servo_mut(s.id).map(|servo| servo.set_position(p)));
        }
    }
    let bus_numbers: Vec<u8> = robot_spec.buses.iter().map(|b| b.bus).collect();
    let buses = robot.cycler().bus_count();
    let n = servos.len();
    crate::signals::install();

    // `auto` outside lockstep: what it could not get is told in one warning, after the cycle
    // thread has tried the rest.
    let auto = config.auto_realtime();
    let mut auto_refused: Vec<String> = Vec::new();
    // Hold the CPUs out of deep idle states while the loop runs, as cyclictest does.
    let cpu_dma_latency = if config.holds_cpu_dma_latency() {
        match rt::setup::CpuDmaLatency::hold_zero().map_err(|e| e.to_string()) {
            Ok(held) => Some(held),
            Err(e) if strict => return Err(format!("--strict: {e}")),
            Err(e) if auto => {
                auto_refused.push(refusal_clause(&e));
                None
            }
            Err(e) => {
                crate::cli::console::note(format!("rtloop run: warning: {e}"));
                warnings.push(e);
                None
            }
        }
    } else {
        None
    };

    let progress = Arc::new(Progress::default());
    let thread_progress = Arc::clone(&progress);
    let (warn_tx, warn_rx) = std::sync::mpsc::channel::<Result<rt::setup::Applied, rt::setup::RtError>>();
    let control = config.realtime.control_thread;
    let period_s = config.period_ns() as f64 * 1e-9;
    let thread_config = config.clone();
    let thread_bus_numbers = bus_numbers.clone();
    let main_thread = std::thread::current();
    // The live publishers: started now, so a taken port or an unreachable router is an
    // error before the run.
    let mut publishers = std::mem::take(&mut hooks.publishers);
    let hooks_remote = Arc::clone(&hooks.remote);
    publishers.extend(crate::live::publishers(&config.live, &hooks.remote)?);
    let live_robot = crate::live::LiveRobot {
        name: config.live.robot_name(),
        rate_hz: config.rate_hz,
        servos: servos.iter().map(|s| (bus_numbers.get(s.bus).copied().unwrap_or(0), s.id)).collect(),
        imu: robot.cycler().has_imu(),
    };
    // Stamped with wall-clock time, also in lockstep: a viewer shows when it happened.
    let fanout = crate::live::Fanout::start(publishers, &live_robot, crate::telemetry::epoch_offset_us());
    let live_every = (!fanout.is_empty()).then(|| fanout.finest_every());
    let fanout = Arc::new(std::sync::Mutex::new(fanout));
    // The telemetry thread (the log file, the live publishers): it starts now; the cycle
    // thread gets the ring's producer end.
    let (logger, log_thread) = match (&opts.log, live_every) {
        (Some(path), _) => {
            let mut writer = tlog::writer::FileWriter::create(path)
                .map_err(|e| format!("cannot create the log {}: {e}", path.display()))?;
            let mut sink = LogSink::<C::Telemetry>::register(&mut writer, C::TELEMETRY_RECORD)
                .map_err(|e| format!("log {}: {e}", path.display()))?;
            if lockstep {
                // Simulated time from 0: stamps that do not depend on when the run happened.
                sink.set_epoch_offset_us(0);
            }
            let live = Arc::clone(&fanout);
            let (logger, thread) = tlog::realtime::spawn(LOG_RING_MESSAGES, writer, move |w, m| {
                if live_every.is_some() {
                    live.lock().unwrap_or_else(|e| e.into_inner()).offer(&m);
                }
                sink.write(w, m)
            })
            .map_err(|e| format!("log {}: {e}", path.display()))?;
            // Lockstep has no deadline to keep: its log waits for the writer rather than drop
            // a cycle, so it has every cycle whatever the host's speed.
            (Some(LogHandOff::new(logger, lockstep)), Some(thread))
        }
        (None, Some(every)) => {
            // No file: the thread only feeds the publishers; its log goes nowhere.
            let writer = tlog::writer::FileWriter::new(std::io::sink(), Default::default())
                .map_err(|e| format!("live telemetry: {e}"))?;
            let live = Arc::clone(&fanout);
            let (logger, thread) =
                tlog::realtime::spawn(LOG_RING_MESSAGES, writer, move |_, m: LogMsg<C::Telemetry>| {
                    live.lock().unwrap_or_else(|e| e.into_inner()).offer(&m);
                    Ok(())
                })
                .map_err(|e| format!("live telemetry: {e}"))?;
            (Some(LogHandOff::new(logger, lockstep).live_only(every)), Some(thread))
        }
        (None, None) => (None, None),
    };
    let handle = std::thread::Builder::new()
        .name("rtloop-cycle".into())
        .spawn(move || -> Option<LoopResult<K>> {
            let applied = rt::setup::apply_to_current_thread(&settings);
            let ok = applied.is_ok();
            let _ = warn_tx.send(applied);
            if !ok {
                thread_progress.done.store(true, Ordering::Release);
                main_thread.unpark();
                return None;
            }
            let setup = CycleSetup { robot, config: thread_config, shutdown, overrun, bus_numbers: thread_bus_numbers };
            let (law, control_handle) = if control {
                let (to_control, from_cycle) = rtrb::RingBuffer::<ToControl>::new(4);
                let (to_cycle, from_control) = rtrb::RingBuffer::<CommandMsg<C::Telemetry>>::new(4);
                let h = std::thread::Builder::new()
                    .name("rtloop-control".into())
                    .spawn(move || control_thread(controller, n, period_s, from_cycle, to_cycle))
                    .ok();
                (ControlLaw::Thread { to_control, from_control }, h)
            } else {
                (ControlLaw::Inline(Box::new(controller)), None)
            };
            let r = run_loop(setup, time, &thread_progress, &hooks, law, logger);
            if let Some(h) = control_handle {
                let _ = h.join();
            }
            thread_progress.done.store(true, Ordering::Release);
            // The progress printer sleeps between lines; wake it so the run ends on time.
            main_thread.unpark();
            Some(r)
        })
        .map_err(|e| format!("cannot start the cycle thread: {e}"))?;

    let applied = match warn_rx.recv() {
        Ok(Ok(applied)) => applied,
        Ok(Err(e)) => {
            let _ = handle.join();
            return Err(match e {
                rt::setup::RtError::Refused(ws) => format!(
                    "--strict: the system refused {} real-time request{}: {}",
                    ws.len(),
                    if ws.len() == 1 { "" } else { "s" },
                    rt::setup::RtError::Refused(ws).refusals()
                ),
                invalid => invalid.to_string(),
            });
        }
        Err(_) => return Err("the cycle thread ended before it started".into()),
    };
    let mut applied = applied;
    if auto {
        let (mine, rest): (Vec<_>, Vec<_>) = applied
            .warnings
            .drain(..)
            .partition(|w| matches!(w.what, rt::setup::Setting::Scheduler | rt::setup::Setting::MemoryLock));
        applied.warnings = rest;
        let mut refused: Vec<String> = mine.iter().map(|w| refusal_clause(&w.message)).collect();
        refused.append(&mut auto_refused);
        if let Some(w) = auto_warning(&applied, &refused, config.auto_priority()) {
            applied.warnings.insert(0, rt::setup::Warning { what: rt::setup::Setting::Scheduler, message: w });
        }
    }
    for w in &applied.warnings {
        crate::cli::console::note(format!("rtloop run: warning: {w}"));
    }
    if opts.progress {
        print_progress(&progress, &config, config.periods());
    }
    let result =
        handle.join().map_err(|_| "the cycle thread panicked".to_string())?.ok_or("the cycle thread stopped")?;
    let cpu_dma_latency_held = cpu_dma_latency.is_some();
    drop(cpu_dma_latency);
    let log_stats = match log_thread {
        Some(t) => Some(t.finish().map_err(|e| match &opts.log {
            Some(path) => format!("log {}: {e}", path.display()),
            None => format!("live telemetry: {e}"),
        })?),
        None => None,
    };
    let live = live_every.map(|_| {
        let publishers = fanout.lock().unwrap_or_else(|e| e.into_inner()).finish();
        LiveSummary {
            handoff_dropped: log_stats.as_ref().map_or(0, |st| st.dropped),
            publishers,
            remote_commands: hooks_remote.accepted(),
        }
    });
    let log = match (log_stats, &opts.log) {
        (Some(st), Some(path)) => Some(LogSummary {
            path: path.display().to_string(),
            written: st.written,
            dropped: st.dropped,
            lost: st.lost,
            write_errors: st.write_errors,
            first_error: st.first_error,
            complete: st.complete,
            bytes: st.bytes,
        }),
        _ => None,
    };
    let mut summary = summarize(&config, &servos, &bus_numbers, buses, result, &applied, seed);
    if let Some(problem) = log.as_ref().and_then(LogSummary::problem) {
        summary.problems.push(problem);
        summary.status = "degraded";
    }
    summary.log = log;
    summary.live = live;
    // A run that kept far below its rate is not "lost servos", but it did not do what was
    // asked: say so.
    if summary.cycles >= 2 && summary.rate_hz < 0.9 * summary.target_rate_hz {
        warnings.push(format!(
            "achieved {:.0} Hz of the {} Hz asked ({} overruns, {} periods skipped): this machine or these buses \
             cannot keep the rate; see cycle_us and wakeup_us, or lower --rate",
            summary.rate_hz, summary.target_rate_hz, summary.overruns, summary.skipped_periods
        ));
    }
    summary.warnings = warnings;
    summary.realtime.cpu_dma_latency_held = cpu_dma_latency_held;
    Ok(summary)
}

/// The part of a refusal that says what was refused, e.g. "SCHED_FIFO priority 40 refused
/// (EPERM)" (the refusals are "what (why): how to fix it").
fn refusal_clause(message: &str) -> String {
    match message.split_once("): ") {
        Some((what, _)) => format!("{what})"),
        None => message.to_string(),
    }
}

/// The one warning of `--policy auto` when something was refused: what the thread runs
/// with, what was refused, and how to grant it. `None` when everything was granted.
fn auto_warning(applied: &rt::setup::Applied, refused: &[String], priority: i32) -> Option<String> {
    if refused.is_empty() {
        return None;
    }
    let running = if applied.policy.is_realtime() {
        format!("{} priority {}", applied.kernel_policy, applied.priority)
    } else {
        format!("{} (the fair scheduler, with its random delays)", applied.kernel_policy)
    };
    let exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "rtloop".into());
    Some(format!(
        "real time not fully granted (--policy auto), the cycle thread runs {running}: {}; to grant it run as root, \
         or `sudo setcap cap_sys_nice,cap_ipc_lock+ep {exe}` (or rtprio {priority} and memlock unlimited in \
         /etc/security/limits.conf; /dev/cpu_dma_latency needs root or write access), or give --policy other to \
         run without real time and without this warning",
        refused.join("; ")
    ))
}

/// The cycle-time model of this run: CAN-FD wire time, unless every bus is simulated without
/// it (`--no-wire-time`), where frames take no time and only the host costs remain.
fn model_of_run(config: &RunConfig) -> sim::model::CycleModel {
    let robot = config.robot();
    let model = crate::cli::budget::model_for(&robot);
    if config.sim.wire_time || !robot.all_simulated() {
        return model;
    }
    sim::model::CycleModel { nominal_bitrate: u32::MAX, data_bitrate: u32::MAX, turnaround_ns: 0, ..model }
}

/// "servo 5 on bus 2" (the same id may live on several buses).
fn servo_name(id: Option<u8>, bus: Option<u8>) -> String {
    match (id, bus) {
        (Some(id), Some(bus)) => format!("servo {id} on bus {bus}"),
        (Some(id), None) => format!("servo {id}"),
        _ => "the robot".into(),
    }
}

/// What went wrong in a run, one sentence each (empty: nothing).
fn problems_of<K: Clock>(
    events: &[EventRecord],
    result: &LoopResult<K>,
    servos: &[ServoSpec],
    bus_numbers: &[u8],
    on_fault: &str,
) -> Vec<String> {
    let mut problems = Vec::new();
    let ran = result.periodic.cycles + result.shutdown_cycles > 0;
    let silent: Vec<String> = servos
        .iter()
        .zip(&result.answered)
        .filter(|(_, &a)| !a)
        .map(|(s, _)| servo_name(Some(s.id), bus_numbers.get(s.bus).copied()))
        .collect();
    if ran && !silent.is_empty() && silent.len() == servos.len() {
        problems.push(format!(
            "no servo ever answered ({} transport errors): check the bus addresses and that the servos are powered",
            result.transport_errors
        ));
    } else if ran && !silent.is_empty() {
        problems.push(format!("{} never answered", silent.join(", ")));
    }
    // One line per servo and kind of failure: the first time in full, repeats counted.
    let mut repeated: Vec<(String, &str, String, u32)> = Vec::new();
    for e in events {
        let who = servo_name(e.servo, e.bus);
        let text = match e.kind.as_str() {
            "fault" => format!("{who} faulted at {:.3} s ({})", e.time, e.detail.as_deref().unwrap_or("fault")),
            // A servo that never answered is reported once, above.
            "missing_replies" if silent.contains(&who) => continue,
            "missing_replies" => {
                format!("{who} stopped answering at {:.3} s ({})", e.time, e.detail.as_deref().unwrap_or("no replies"))
            }
            "watchdog_timeout" => format!(
                "{who} latched its watchdog timeout (mode 11) at {:.3} s: it went without a command for longer than \
                 its watchdog",
                e.time
            ),
            "agent_timeout" => format!(
                "the agent went silent at {:.3} s: the servos were given the timeout command until it re-armed",
                e.time
            ),
            "agent_command_refused" => format!(
                "the spine refused the agent's command for {who} at {:.3} s (invalid or out of the limits); the servo \
                 kept its safe command",
                e.time
            ),
            "agent_gone" => {
                format!("the agent exited (or detached) at {:.3} s: the lockstep run ended there", e.time)
            }
            "agent_not_armed" => format!(
                "no agent armed the spine within {} s (at {:.3} s of simulated time, which stood still meanwhile); \
                 start the agent, or raise --agent-wait",
                e.value.unwrap_or(0) as f64 * 1e-3,
                e.time
            ),
            "agent_version_mismatch" => match e.value {
                Some(0) => format!(
                    "an agent wrote commands without stating its protocol version (agent_version 0), this spine \
                     speaks {}; the spine ignored them",
                    agent::layout::VERSION
                ),
                v => format!(
                    "an agent of protocol version {}, this spine {}, tried to attach; the spine ignored its commands",
                    v.map_or_else(|| "?".to_string(), |v| v.to_string()),
                    agent::layout::VERSION
                ),
            },
            "safe_mode_engaged" => {
                format!("the safety policy engaged at {:.3} s and commanded {on_fault} to the healthy servos", e.time)
            }
            _ => continue,
        };
        match repeated.iter_mut().find(|(w, k, _, _)| *w == who && *k == e.kind.as_str()) {
            Some(entry) => entry.3 += 1,
            None => repeated.push((who, e.kind.as_str(), text, 0)),
        }
    }
    for (_, _, text, more) in repeated {
        problems.push(match more {
            0 => text,
            1 => format!("{text}, and once more"),
            n => format!("{text}, and {n} times more"),
        });
    }
    if result.supervisor.trips() > 0 && !problems.iter().any(|p| p.starts_with("the safety policy")) {
        problems.push(format!("the safety policy engaged {} times", result.supervisor.trips()));
    }
    problems
}

fn summarize<K: Clock>(
    config: &RunConfig,
    servos: &[ServoSpec],
    bus_numbers: &[u8],
    buses: usize,
    mut result: LoopResult<K>,
    applied: &rt::setup::Applied,
    seed: u64,
) -> RunSummary {
    let mut final_state = BTreeMap::new();
    let finished = result.periodic.cycles + result.shutdown_cycles > 0;
    for ((spec, reply), command) in servos.iter().zip(&result.replies).zip(&result.last_commands) {
        let s = &reply.state;
        let bus = bus_numbers.get(spec.bus).copied().unwrap_or(0);
        let shared = servos.iter().filter(|o| o.id == spec.id).count() > 1;
        let key = if shared { format!("{}@{bus}", spec.id) } else { spec.id.to_string() };
        final_state.insert(
            key,
            FinalServo {
                id: spec.id,
                bus,
                commanded: if finished { command_name(command) } else { "query" },
                fresh: reply.fresh,
                mode: s.mode,
                position: opt(s.position),
                velocity: opt(s.velocity),
                torque: opt(s.torque),
                fault: s.fault,
                temperature: opt(s.temperature),
            },
        );
    }
    let start = result.start_ns;
    let secs = |at: u64| (at as f64 - start as f64) * 1e-9;
    let mut events: Vec<EventRecord> = result
        .supervisor
        .events()
        .iter()
        .map(|e| EventRecord {
            time: secs(e.at_ns),
            bus: e.servo.and_then(|s| bus_numbers.get(s.bus).copied()),
            servo: e.servo.map(|s| s.id),
            kind: e.kind.name().to_string(),
            detail: match e.kind {
                EventKind::Fault { code } => Some(format!("fault code {code}")),
                EventKind::MissingReplies { cycles } => Some(format!("no answer newer than {cycles} cycles")),
                EventKind::Recovered { good_cycles } => Some(format!("after {good_cycles} good cycles")),
                _ => None,
            },
            value: match e.kind {
                EventKind::Controller { value, .. } => value,
                _ => None,
            },
        })
        .collect();
    let mut injected = InjectedSummary { seed, reply_delay_us: config.faults.reply_delay_us, ..Default::default() };
    for o in config.overheats().unwrap_or_default() {
        injected.overheat.insert(o.id, o.at_s);
    }
    for b in 0..buses {
        let bus_number = bus_numbers.get(b).copied();
        result.robot.cycler_mut().with_sim_bus(b, |bus| {
            let st = bus.stats();
            injected.frames_dropped += st.frames_dropped_injected;
            injected.frames_corrupted += st.frames_corrupted_injected;
            while let Some(e) = bus.pop_event() {
                let detail = match e.kind {
                    sim::InjectedKind::OverheatStarted => None,
                    sim::InjectedKind::FaultLatched { code } => Some(format!("fault code {code}")),
                    sim::InjectedKind::FrameDropped { count, .. } => Some(format!("{count} frames lost on the wire")),
                    sim::InjectedKind::FrameCorrupted { count, .. } => {
                        Some(format!("{count} frames bit-flipped on the wire"))
                    }
                };
                events.push(EventRecord {
                    time: secs(e.at_ns),
                    bus: bus_number,
                    servo: e.servo,
                    kind: injected_name(&e.kind).into(),
                    detail,
                    value: None,
                });
            }
        });
    }
    events.sort_by(|a, b| a.time.total_cmp(&b.time));
    let problems = problems_of(&events, &result, servos, bus_numbers, &config.safety.on_fault);
    let p = &result.periodic;
    let elapsed_s = p.last_wake_ns.saturating_sub(p.first_wake_ns) as f64 * 1e-9;
    RunSummary {
        status: if problems.is_empty() { "ok" } else { "degraded" },
        problems,
        warnings: Vec::new(),
        cycles: p.cycles,
        rate_hz: if elapsed_s > 0.0 { p.cycles.saturating_sub(1) as f64 / elapsed_s } else { 0.0 },
        target_rate_hz: config.rate_hz,
        elapsed_s,
        servos: servos.len(),
        buses,
        overruns: p.overruns,
        skipped_periods: p.skipped_periods,
        missing_replies: result.missing,
        reply_accounting: result.accounting,
        timeouts: result.timeouts,
        transport_errors: result.transport_errors,
        imu_samples: result.imu_samples,
        cycle_us: p.cycle,
        wakeup_us: p.wakeup,
        model_cycle_us: sim::model::predict(&model_of_run(config)).total_ns as f64 / 1000.0,
        ended_by_controller: result.ended_by_controller,
        lockstep: config.sim.lockstep,
        wall_s: result.wall_s,
        interrupted: result.interrupted,
        shutdown_cycles: result.shutdown_cycles,
        control_late: result.control_late,
        events,
        events_dropped: result.supervisor.dropped_events(),
        injected,
        realtime: RealtimeSummary {
            requested_policy: config.realtime.policy.clone(),
            policy: applied.policy.to_string(),
            priority: applied.priority,
            cpus: applied.cpus.clone(),
            mlock: applied.mlocked,
            timer_slack_ns: applied.timer_slack_ns,
            busy_wait_us: config.realtime.busy_wait_us,
            overrun: config.realtime.overrun.clone(),
            control_thread: config.realtime.control_thread,
            cpu_dma_latency_held: false,
            warnings: applied.warnings.iter().map(|w| w.to_string()).collect(),
        },
        final_state,
        agent: None,
        log: None,
        live: None,
    }
}

/// Print a progress line every second (every 100 ms on a terminal) until the loop is done;
/// the cycle thread wakes this thread when it ends, so the run never outlasts its loop.
fn print_progress(progress: &Progress, config: &RunConfig, total: u64) {
    let tty = std::io::stderr().is_terminal();
    let every = if tty { Duration::from_millis(100) } else { Duration::from_secs(1) };
    let mut err = std::io::stderr();
    let mut next = Instant::now() + every;
    while !progress.done.load(Ordering::Acquire) {
        let now = Instant::now();
        if now < next {
            std::thread::park_timeout(next - now);
            continue;
        }
        next += every;
        let cycles = progress.cycles.load(Ordering::Relaxed);
        let t = cycles as f64 / config.rate_hz;
        let line = format!(
            "  {:>6.1}/{:.1} s  {:>8}/{} cycles  last {:>5.0} µs  max {:>5.0} µs  overruns {}  missing {}",
            t,
            config.duration_s,
            cycles,
            total,
            progress.last_cycle_ns.load(Ordering::Relaxed) as f64 / 1000.0,
            progress.max_cycle_ns.load(Ordering::Relaxed) as f64 / 1000.0,
            progress.overruns.load(Ordering::Relaxed),
            progress.missing.load(Ordering::Relaxed),
        );
        let _ = if tty { write!(err, "\r{line}") } else { writeln!(err, "{line}") };
        let _ = err.flush();
    }
    if tty {
        let _ = writeln!(err);
    }
}

/// `1 servo`, `12 servos`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The human-readable summary.
pub fn print_summary(s: &RunSummary, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "rtloop run: {} on {}",
        count(s.servos, "servo", "servos"),
        count(s.buses, "CAN-FD bus", "CAN-FD buses")
    )?;
    // A rate needs two wakeups: with fewer there is none to report.
    let achieved = if s.cycles >= 2 { format!("{:.2} Hz", s.rate_hz) } else { "no rate (one cycle)".into() };
    writeln!(
        out,
        "  cycles {}  in {:.3} s  achieved {achieved} (target {:.2}){}",
        s.cycles,
        s.elapsed_s,
        s.target_rate_hz,
        if s.interrupted { "  — interrupted, safe mode commanded" } else { "" }
    )?;
    writeln!(
        out,
        "  overruns {} (skipped periods {})  missing replies {}  timeouts {}  transport errors {}",
        s.overruns, s.skipped_periods, s.missing_replies, s.timeouts, s.transport_errors
    )?;
    let a = &s.reply_accounting;
    if a.late + a.lost + a.expired + a.unqueried + a.unattributed + a.decode_errors > 0 {
        writeln!(
            out,
            "  replies      {} late (kept as the answer to their own request, never fresh)  {} lost  \
             {} expired  {} unqueried  {} unattributed  {} undecodable",
            a.late, a.lost, a.expired, a.unqueried, a.unattributed, a.decode_errors
        )?;
    }
    if let Some(live) = &s.live {
        for p in &live.publishers {
            writeln!(
                out,
                "  live         {} {}: {} cycles, {} events, {} messages, {} dropped, {} refused, {} errors",
                p.sink, p.endpoint, p.cycles, p.events, p.messages, p.dropped, p.refused, p.errors
            )?;
        }
        if live.handoff_dropped + live.remote_commands > 0 {
            writeln!(
                out,
                "  live         {} messages dropped at the hand-off  {} remote commands",
                live.handoff_dropped, live.remote_commands
            )?;
        }
    }
    let p = |x: &Percentiles| format!("p50 {:7.1}  p99 {:7.1}  max {:7.1} µs", x.p50, x.p99, x.max);
    writeln!(out, "  cycle time   {}   (model predicts {:.1} µs)", p(&s.cycle_us), s.model_cycle_us)?;
    writeln!(out, "  wakeup       {}", p(&s.wakeup_us))?;
    let r = &s.realtime;
    writeln!(
        out,
        "  real-time    policy {} ({} asked) priority {} cpus {:?} mlock {} cpu_dma_latency {} timer slack {} ns \
         busy-wait {} µs{}",
        r.policy,
        r.requested_policy,
        r.priority,
        r.cpus,
        r.mlock,
        if r.cpu_dma_latency_held { "held" } else { "not held" },
        r.timer_slack_ns,
        r.busy_wait_us,
        if r.control_thread { "  control law on its own thread" } else { "" }
    )?;
    if let Some(l) = &s.log {
        writeln!(
            out,
            "  log          {}: {} messages, {} dropped, {} lost, {} write errors, {:.1} MB",
            l.path,
            l.written,
            l.dropped,
            l.lost,
            l.write_errors,
            l.bytes as f64 / 1e6
        )?;
    }
    if !s.events.is_empty() {
        writeln!(out, "  events:")?;
        for e in &s.events {
            let who = match (e.servo, e.bus) {
                (Some(id), Some(bus)) => format!("bus {bus} servo {id}"),
                (Some(id), None) => format!("servo {id}"),
                (None, Some(bus)) => format!("bus {bus}"),
                (None, None) => "robot".to_string(),
            };
            writeln!(
                out,
                "    {:>8.3} s  {:<16} {}{}",
                e.time,
                who,
                e.kind,
                e.detail.as_ref().map_or(String::new(), |d| format!(" ({d})"))
            )?;
        }
    }
    writeln!(out, "  final state:")?;
    writeln!(
        out,
        "    {:>3} {:>3} {:<13} {:>4} {:>9} {:>9} {:>5}",
        "id", "bus", "commanded", "mode", "pos rev", "vel rev/s", "fault"
    )?;
    let mut rows: Vec<&FinalServo> = s.final_state.values().collect();
    rows.sort_by_key(|f| (f.id, f.bus));
    for f in rows {
        let num = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.4}"));
        writeln!(
            out,
            "    {:>3} {:>3} {:<13} {:>4} {:>9} {:>9} {:>5}{}",
            f.id,
            f.bus,
            f.commanded,
            f.mode.map_or("-".into(), |m| m.to_string()),
            num(f.position),
            num(f.velocity),
            f.fault.map_or("-".into(), |m| m.to_string()),
            if f.fresh { "" } else { "  (no reply to the last cycle: older state)" }
        )?;
    }
    for w in &s.warnings {
        writeln!(out, "  warning: {w}")?;
    }
    if s.problems.is_empty() {
        writeln!(out, "  status: ok")?;
    } else {
        writeln!(out, "  status: degraded (exit status {}):", s.exit_code())?;
        for p in &s.problems {
            writeln!(out, "    {p}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{enforce_watchdog, LogSummary};
    use io::ServoCommand;
    use proto::host::PositionCommand;

    #[test]
    fn no_controller_command_leaves_without_a_valid_watchdog() {
        let with =
            |w: Option<f64>| ServoCommand::Position(PositionCommand { watchdog_timeout: w, ..Default::default() });
        let mut commands =
            [with(None), with(Some(f64::NAN)), with(Some(0.0)), with(Some(20.0)), with(Some(0.5)), ServoCommand::Stop];
        enforce_watchdog(&mut commands, 0.1);
        let got: Vec<Option<f64>> = commands
            .iter()
            .map(|c| match c {
                ServoCommand::Position(p) => p.watchdog_timeout,
                _ => None,
            })
            .collect();
        assert_eq!(got, [Some(0.1), Some(0.1), Some(0.1), Some(0.1), Some(0.5), None]);
    }

    fn log(written: u64, dropped: u64, lost: u64, complete: bool) -> LogSummary {
        LogSummary {
            path: "run.tlog".into(),
            written,
            dropped,
            lost,
            write_errors: lost,
            first_error: (lost > 0).then(|| "No space left on device".into()),
            complete,
            bytes: 1,
        }
    }

    #[test]
    fn a_log_with_every_message_is_no_problem_and_any_gap_is_one_sentence() {
        assert_eq!(log(100, 0, 0, true).problem(), None);
        let dropped = log(90, 10, 0, true).problem().unwrap();
        assert!(dropped.contains("holds 90 of the 100") && dropped.contains("10 dropped"), "{dropped}");
        assert!(dropped.contains("faster disk"), "{dropped}");
        let lost = log(90, 0, 10, false).problem().unwrap();
        assert!(lost.contains("10 lost to write errors") && lost.contains("No space left"), "{lost}");
        assert!(lost.contains("closing record") && lost.contains("free space"), "{lost}");
        assert!(log(100, 0, 0, false).problem().is_some(), "an unclosed log is a problem even with every message");
    }
}
