//! What a run reports: [`RunSummary`] and its parts, built from the loop's result
//! ([`summarize`]), with its problems in one sentence each.

use super::*;

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
    pub agent: Option<crate::agent::AgentSummary>,
    /// The body at the end of the run, with physics (`--physics`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<BodySummary>,
    /// Final state per servo: keyed by its id (`"5"`), or by id and bus number (`"5@2"`) when
    /// the same id lives on several buses.
    #[serde(rename = "final")]
    pub final_state: BTreeMap<String, FinalServo>,
}

/// The simulated body at the end of a run with physics.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BodySummary {
    /// Height of the body's origin above the ground, m.
    pub height_m: f64,
    /// Roll, degrees (right side down positive, as the IMU reads it).
    pub roll_deg: f64,
    /// Pitch, degrees (nose up positive).
    pub pitch_deg: f64,
    /// Plant steps taken.
    pub steps: u64,
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

pub(super) fn opt(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// The name of a command, as `FinalServo::commanded` reports it.
pub(super) fn command_name(c: &ServoCommand) -> &'static str {
    match c {
        ServoCommand::Query => "query",
        ServoCommand::Stop => "stop",
        ServoCommand::ZeroVelocity => "zero-velocity",
        ServoCommand::Brake => "brake",
        ServoCommand::Position(_) => "position",
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

/// What went wrong in a run, one sentence each (empty: nothing).
pub(super) fn problems_of(
    events: &[EventRecord],
    result: &LoopResult,
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
            // Said by the agent spine's summarizer (`crate::agent::AgentFigures::complete`),
            // which knows the causes, the servos and the counts.
            "agent_command_refused" => continue,
            "agent_version_mismatch" => match e.value {
                Some(0) => format!(
                    "an agent wrote commands without stating its protocol version (agent_version 0), this spine \
                     speaks {}; the spine ignored them",
                    rtloop_agent::layout::VERSION
                ),
                v => format!(
                    "an agent of protocol version {}, this spine {}, tried to attach; the spine ignored its commands",
                    v.map_or_else(|| "?".to_string(), |v| v.to_string()),
                    rtloop_agent::layout::VERSION
                ),
            },
            "physics_reset_failed" => format!(
                "the simulated world could not be reset at {:.3} s (the plant went unstable while it settled); the \
                 run ended there",
                e.time
            ),
            "agent_reset_refused" => format!(
                "the spine refused the agent's reset at {:.3} s: {}",
                e.time,
                match e.value.and_then(|v| u32::try_from(v).ok()) {
                    Some(rtloop_agent::layout::reset::NOT_LOCKSTEP) => {
                        "a reset is reproducible only in simulated time; run with --lockstep"
                    }
                    _ => "the run has no physics world to reset; run with --physics",
                }
            ),
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

pub(super) fn summarize(
    config: &RunConfig,
    servos: &[ServoSpec],
    bus_numbers: &[u8],
    buses: usize,
    mut result: LoopResult,
    applied: &rtloop_rt::setup::Applied,
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
        let Some(sim) = &result.sim else { break };
        sim.with_bus(b, |bus| {
            let st = bus.stats();
            injected.frames_dropped += st.frames_dropped_injected;
            injected.frames_corrupted += st.frames_corrupted_injected;
            while let Some(e) = bus.pop_event() {
                let detail = match e.kind {
                    rtloop_sim::InjectedKind::OverheatStarted => None,
                    rtloop_sim::InjectedKind::FaultLatched { code } => Some(format!("fault code {code}")),
                    rtloop_sim::InjectedKind::FrameDropped { count, .. } => {
                        Some(format!("{count} frames lost on the wire"))
                    }
                    rtloop_sim::InjectedKind::FrameCorrupted { count, .. } => {
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
    let mut problems = problems_of(&events, &result, servos, bus_numbers, &config.safety.on_fault);
    // The control law's failure ended the run: the first thing to say.
    let failure = result.failure.take().map(|(f, hook, at_ns)| {
        let servo = f.servo.and_then(|i| servos.get(i));
        ControlFailure {
            name: f.name,
            hook,
            time: secs(at_ns),
            bus: servo.and_then(|s| bus_numbers.get(s.bus).copied()),
            servo: servo.map(|s| s.id),
            value: f.value,
            what: f.what.to_string(),
            fix: f.fix.to_string(),
        }
    });
    if let Some(f) = &failure {
        problems.insert(0, f.problem());
    }
    if let Some(fault) = result.sim.as_ref().and_then(SimRobot::world_fault) {
        problems.push(fault.to_string());
    }
    let p = &result.periodic;
    let elapsed_s = p.last_wake_ns.saturating_sub(p.first_wake_ns) as f64 * 1e-9;
    RunSummary {
        status: if problems.is_empty() { Status::Ok } else { Status::Degraded },
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
        model_cycle_us: rtloop_sim::model::predict(&model_of_run(config)).total_ns as f64 / 1000.0,
        ended_by_controller: result.ended_by_controller,
        failure,
        lockstep: config.sim.lockstep,
        wall_s: result.loop_wall_s,
        loop_wall_s: result.loop_wall_s,
        interrupted: result.interrupted,
        shutdown_cycles: result.shutdown_cycles,
        control_late: result.control_late,
        events,
        events_dropped: result.supervisor.dropped_events(),
        body: result.sim.as_ref().and_then(SimRobot::world_body).map(|(b, steps)| {
            let (roll, pitch) = b.roll_pitch();
            BodySummary { height_m: b.height_m, roll_deg: roll.to_degrees(), pitch_deg: pitch.to_degrees(), steps }
        }),
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

#[cfg(test)]
mod tests {
    use super::LogSummary;

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
