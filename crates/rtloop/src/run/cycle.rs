//! The loop: the real-time half of a run ([`run_loop`]) and the helpers it calls each
//! cycle. Everything between the `enter_rt` and `leave_rt` hooks must not allocate, lock or
//! block.

use super::*;

pub(super) struct LoopResult {
    pub(super) periodic: rtloop_rt::periodic::LoopStats,
    pub(super) missing: u64,
    pub(super) accounting: ReplyAccounting,
    pub(super) timeouts: u64,
    pub(super) transport_errors: u64,
    pub(super) imu_samples: u64,
    pub(super) control_late: u64,
    pub(super) interrupted: bool,
    pub(super) ended_by_controller: bool,
    /// The control law's failure, if it failed: in which hook, and when (the cycle's clock).
    pub(super) failure: Option<(Failure, Hook, u64)>,
    /// Wall-clock seconds of the loop (its periods and shutdown cycles).
    pub(super) loop_wall_s: f64,
    /// When the loop started (the summary's `wall_s` runs from here to the summary).
    pub(super) loop_started: Instant,
    pub(super) shutdown_cycles: u64,
    pub(super) replies: Vec<ServoReply>,
    /// The last command each servo was sent.
    pub(super) last_commands: Vec<ServoCommand>,
    /// Each servo answered at least once.
    pub(super) answered: Vec<bool>,
    pub(super) supervisor: Supervisor,
    pub(super) start_ns: u64,
    pub(super) sim: Option<SimRobot>,
    /// The body's falls ([`super::fall`]); 0 without a body or on a fixed base.
    pub(super) falls: u32,
    /// The name of the model under the servos, when there is one.
    pub(super) model_name: Option<String>,
}

/// Everything the cycle thread needs, prepared before it starts.
pub struct CycleSetup<K: Clock> {
    pub(super) robot: Robot<K>,
    /// The simulated robot behind the simulated buses, when some are: the loop steps it.
    pub(super) sim: Option<SimRobot>,
    pub(super) config: RunConfig,
    pub(super) shutdown: ServoCommand,
    pub(super) overrun: OverrunPolicy,
    pub(super) bus_numbers: Vec<u8>,
    /// The body under the simulated servos, when there is one.
    pub(super) physics: Option<crate::physics::PhysicsInfo>,
}

/// The robot side of a loop, as [`CycleLoop::new`] takes it from a [`CycleSetup`].
struct Devices<K: Clock> {
    robot: Robot<K>,
    sim: Option<SimRobot>,
    bus_numbers: Vec<u8>,
    physics: Option<crate::physics::PhysicsInfo>,
}

/// What [`State::model_pose`] says, held by the loop (the stand itself in `CycleLoop::stand`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PoseKind {
    NotGiven,
    Stand,
    Missing,
}

impl PoseKind {
    /// The state's view of it, with the stand the loop holds.
    pub(super) fn view(self, stand: &[f64]) -> crate::controller::ModelPose<'_> {
        match self {
            PoseKind::NotGiven => crate::controller::ModelPose::NotGiven,
            PoseKind::Stand => crate::controller::ModelPose::Stand(stand),
            PoseKind::Missing => crate::controller::ModelPose::Missing,
        }
    }
}

/// Seconds (validated: 0 to one year) as nanoseconds, saturating.
pub(super) fn secs_to_ns(s: f64) -> u64 {
    (s * 1e9).round().clamp(0.0, u64::MAX as f64) as u64
}

/// No position command leaves without a watchdog: one without a valid watchdog timeout
/// (absent, NaN, 0 "servo default", or outside 0.01 … 10 s) gets the run's
/// `[gains] watchdog_timeout_s`, so no control law can switch the servos' watchdog off.
pub(super) fn enforce_watchdog(commands: &mut [ServoCommand], watchdog_s: f64) {
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

/// Robot exchange numbers ([`rtloop_io::CycleReport::cycle`]) of the last periods, to tell a
/// controller which period's request a state answers. Fixed size: no allocation.
pub(super) struct PeriodOfExchange {
    pub(super) slots: [(u64, u64); Self::SLOTS],
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
pub(super) fn fill_statuses(
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

/// One bus cycle of the robot, the simulated robot (if any) first brought to the cycle's start:
/// what its servos answer is the plant's state then.
#[inline]
fn cycle_robot<K: Clock>(
    robot: &mut Robot<K>,
    sim: Option<&SimRobot>,
    commands: &[ServoCommand],
    replies: &mut [ServoReply],
    imu: &mut rtloop_io::ImuSample,
) -> rtloop_io::CycleReport {
    if let Some(sim) = sim {
        sim.advance_to(robot.cycler().clock().now_ns());
    }
    robot.cycle(commands, replies, imu)
}

/// The real-time half of the run: set-up, the periods, the shutdown cycles, the controller's
/// `stop`. Everything between the `enter_rt` and `leave_rt` hooks must not allocate, lock or
/// block (tests/rt_no_alloc.rs).
pub(super) fn run_loop<C: Controller, K: Clock + Clone, T: TimeSource>(
    setup: CycleSetup<K>,
    time: T,
    progress: &Progress,
    hooks: &Hooks,
    law: ControlLaw<C>,
    logger: Option<LogHandOff<C::Telemetry>>,
) -> LoopResult {
    let CycleSetup { robot, sim, config, shutdown, overrun, bus_numbers, physics } = setup;
    let mut cl = CycleLoop::new(Devices { robot, sim, bus_numbers, physics }, &config, progress, hooks, law, logger);
    cl.shutdown = shutdown;
    cl.measure_start();
    let started = cl.start_controller();
    let period_ns = config.period_ns();
    let total_periods = config.periods();
    let start = cl.clock.now_ns().saturating_add(period_ns.min(FIRST_TICK_DELAY_NS));
    let end = start.saturating_add(config.duration_ns());
    cl.schedule_overheats(&config, start);
    cl.schedule_pushes(&config, start);
    let busy_wait_ns = config.realtime.busy_wait_us.saturating_mul(1000);
    let mut lp = PeriodicLoop::with_time_source(
        period_ns,
        PeriodicOptions { busy_wait_ns, overrun, start_ns: Some(start) },
        time,
    );

    let wall_start = Instant::now();
    (hooks.enter_rt)();
    // --- real-time section: no allocation, no locks, no I/O below this line ---
    let ending = match started {
        Ok(()) => cl.run_periods(&mut lp, start, end, total_periods),
        // Refused to start: not one period; the shutdown cycle below, as at any end.
        Err(failure) => {
            cl.fail(failure, Hook::Start);
            Ending { interrupted: false, ended_by_controller: true }
        }
    };
    if hooks.remote.stop_requested() {
        cl.supervisor.record(cl.clock.now_ns(), None, EventKind::Controller { name: "remote_stop", value: None });
    }
    let shutdown_cycles = cl.shut_down(shutdown, lp.next_index());
    // --- end of real-time section ---
    (hooks.leave_rt)();
    let loop_wall_s = wall_start.elapsed().as_secs_f64();
    cl.stop_controller(start, lp.next_index());
    let mut periodic = lp.stats();
    // The last cycle's overrun may skip periods that lie past the end of the run: they were
    // never part of it, and `cycles + skipped_periods` is the run's period count at most.
    periodic.skipped_periods = periodic.skipped_periods.min(total_periods.saturating_sub(periodic.cycles));
    cl.into_result(periodic, ending, (wall_start, loop_wall_s), shutdown_cycles, start)
}

/// A stop asked for from outside the loop: a signal, the caller, the operator.
#[inline]
fn stop_requested(hooks: &Hooks) -> bool {
    crate::signals::stop_requested() || hooks.stop.load(Ordering::Relaxed) || hooks.remote.stop_requested()
}

/// How the periods ended.
#[derive(Clone, Copy, Default)]
struct Ending {
    /// A stop came before the run's duration was over.
    interrupted: bool,
    /// The control law returned [`Flow::Stop`], or failed.
    ended_by_controller: bool,
}

/// The counts the summary reports and [`Progress`] publishes, kept on the cycle thread.
#[derive(Default)]
struct Counts {
    missing: u64,
    timeouts: u64,
    transport_errors: u64,
    imu_samples: u64,
    control_late: u64,
    /// Published by plain stores, so kept here rather than read back from `Progress`.
    cycles_done: u64,
    max_cycle_ns: u64,
}

/// What the control law answered in a cycle, beside its commands (left in
/// [`CycleLoop::wanted`]). Fixed size: no allocation.
struct Answer {
    flow: Flow,
    rearm: bool,
    /// The control law asked for a reset of the simulated world.
    reset_world: Option<crate::controller::WorldReset>,
    /// The control law failed (in `cycle`, or in `start` on a control thread): the safe stop.
    failure: Option<(Failure, Hook)>,
    reported: [Reported; MAX_EVENTS_PER_CYCLE],
    reported_len: usize,
}

impl Answer {
    #[inline]
    fn new(flow: Flow, rearm: bool, reset_world: Option<crate::controller::WorldReset>, events: &[Reported]) -> Self {
        let mut answer = Answer {
            flow,
            rearm,
            reset_world,
            failure: None,
            reported: [Reported::default(); MAX_EVENTS_PER_CYCLE],
            reported_len: 0,
        };
        answer.reported_len = events.len();
        answer.reported[..events.len()].copy_from_slice(events);
        answer
    }

    /// The law's answer: its wishes, or its failure (which asks for nothing else: no re-arm,
    /// no reset; the events it reported still count).
    #[inline]
    fn of(
        result: Result<Flow, Failure>,
        hook: Hook,
        rearm: bool,
        reset_world: Option<crate::controller::WorldReset>,
        events: &[Reported],
    ) -> Self {
        match result {
            Ok(flow) => Answer::new(flow, rearm, reset_world, events),
            Err(failure) => Answer { failure: Some((failure, hook)), ..Answer::new(Flow::Stop, false, None, events) },
        }
    }

    #[inline]
    fn reported(&self) -> &[Reported] {
        &self.reported[..self.reported_len]
    }
}

/// The loop's state from one cycle to the next: every buffer is allocated in [`Self::new`],
/// before the real-time section, so the per-cycle methods only overwrite them.
struct CycleLoop<'a, C: Controller, K: Clock> {
    robot: Robot<K>,
    /// The simulated robot, stepped to each cycle's start before it, and to the next period's
    /// start right after it (in the slack: the same steps either way).
    sim: Option<SimRobot>,
    clock: K,
    servos: Vec<ServoSpec>,
    bus_numbers: Vec<u8>,
    supervisor: Supervisor,
    law: ControlLaw<C>,
    logger: Option<LogHandOff<C::Telemetry>>,
    progress: &'a Progress,
    hooks: &'a Hooks,
    watchdog_s: f64,
    /// What the controller asked for (kept from cycle to cycle), and what was sent once the
    /// supervisor had its say.
    wanted: Vec<ServoCommand>,
    commands: Vec<ServoCommand>,
    queries: Vec<ServoCommand>,
    replies: Vec<ServoReply>,
    statuses: Vec<ServoStatus>,
    periods: Box<PeriodOfExchange>,
    answered: Vec<bool>,
    imu: rtloop_io::ImuSample,
    figures: CycleFigures,
    counts: Counts,
    accounting: ReplyAccounting,
    /// The operator's commands as last seen (`crate::live::RemoteControl`).
    remote_held: bool,
    /// The physics went unstable (and the event is recorded).
    physics_failed: bool,
    remote_rearms: u64,
    telemetry: Option<C::Telemetry>,
    /// The supervisor's events the controller has been shown, and those handed to the log.
    events_seen: usize,
    events_logged: usize,
    /// The simulator's injected events handed to the log so far, per bus.
    injected_logged: Vec<usize>,
    cycle_log: CycleLog,
    /// A control thread's first commands are still to be waited for.
    first_command_pending: bool,
    /// The command of the shutdown cycle (`safety.shutdown`), also what a failing cycle sends.
    shutdown: ServoCommand,
    /// The control law's failure: in which hook, and when.
    failure: Option<(Failure, Hook, u64)>,
    /// The model's standing pose, per servo ([`State::model_pose`]).
    pose_kind: PoseKind,
    stand: Vec<f64>,
    /// The body's generalised positions as the IMU last read them ([`State::qpos`]), the
    /// first `qpos_len` in use.
    qpos: [f64; crate::telemetry::MAX_QPOS],
    qpos_len: usize,
    /// Whether the body has fallen: a body with a free base only.
    fall: Option<super::fall::FallWatch>,
    model_name: Option<String>,
}

impl<'a, C: Controller, K: Clock + Clone> CycleLoop<'a, C, K> {
    /// Allocates every buffer the loop will use: nothing is allocated after this.
    fn new(
        devices: Devices<K>,
        config: &RunConfig,
        progress: &'a Progress,
        hooks: &'a Hooks,
        law: ControlLaw<C>,
        logger: Option<LogHandOff<C::Telemetry>>,
    ) -> Self {
        let Devices { robot, sim, bus_numbers, physics } = devices;
        let n = robot.servos().len();
        let numbered: Vec<(u8, u8)> =
            robot.servos().iter().map(|s| (bus_numbers.get(s.bus).copied().unwrap_or(0), s.id)).collect();
        let (pose_kind, stand) = match &physics {
            None => (PoseKind::NotGiven, Vec::new()),
            Some(p) => match p.stand_for(&numbered) {
                Some(stand) => (PoseKind::Stand, stand),
                None if p.model.path.is_some() => (PoseKind::Missing, Vec::new()),
                None => (PoseKind::NotGiven, Vec::new()),
            },
        };
        let fall = physics
            .as_ref()
            .filter(|p| p.model.floating)
            .map(|_| super::fall::FallWatch::new(config.safety.fall_tilt_deg, config.safety.fall_height_m));
        let model_name = physics.as_ref().map(|p| p.model.name.clone());
        let servos: Vec<ServoSpec> = robot.servos().to_vec();
        let clock = robot.cycler().clock().clone();
        let safety = SafetyConfig {
            on_fault: config.safety.on_fault.parse().unwrap_or_default(),
            missing_limit: config.safety.missing_limit,
            recovery: config.recovery().unwrap_or_default(),
        };
        let counts = Counts {
            cycles_done: progress.cycles.load(Ordering::Relaxed),
            max_cycle_ns: progress.max_cycle_ns.load(Ordering::Relaxed),
            ..Counts::default()
        };
        CycleLoop {
            robot,
            sim,
            clock,
            servos,
            injected_logged: vec![0usize; bus_numbers.len()],
            bus_numbers,
            supervisor: Supervisor::new(safety, n, 1024),
            law,
            logger,
            progress,
            hooks,
            watchdog_s: config.gains.watchdog_timeout_s,
            wanted: vec![ServoCommand::Query; n],
            commands: vec![ServoCommand::Query; n],
            queries: vec![ServoCommand::Query; n],
            replies: vec![ServoReply::default(); n],
            statuses: vec![ServoStatus::default(); n],
            periods: Box::new(PeriodOfExchange::new()),
            answered: vec![false; n],
            imu: rtloop_io::ImuSample::default(),
            figures: CycleFigures::default(),
            counts,
            accounting: ReplyAccounting::default(),
            remote_held: false,
            physics_failed: false,
            remote_rearms: hooks.remote.rearms(),
            telemetry: None,
            events_seen: 0,
            events_logged: 0,
            cycle_log: CycleLog::default(),
            first_command_pending: true,
            shutdown: ServoCommand::ZeroVelocity,
            failure: None,
            pose_kind,
            stand,
            qpos: [f64::NAN; crate::telemetry::MAX_QPOS],
            qpos_len: 0,
            fall,
            model_name,
        }
    }

    /// Learn where the joints are before moving them: a few query cycles, until every servo
    /// has answered. Before the real-time section (it may allocate).
    fn measure_start(&mut self) {
        for _ in 0..START_QUERIES {
            self.accounting.add(&cycle_robot(
                &mut self.robot,
                self.sim.as_ref(),
                &self.queries,
                &mut self.replies,
                &mut self.imu,
            ));
            if self.replies.iter().all(|r| r.request_cycle.is_some()) || stop_requested(self.hooks) {
                break;
            }
        }
        // A servo found in mode 11 (its watchdog expired before this run: an earlier host
        // stopped commanding it) ignores every command but a stop: send it one before the
        // first command, and say so; this run did not cause it. Faults (mode 1) are left for
        // the supervisor.
        if self.replies.iter().any(|r| r.state.mode == Some(11)) {
            let clear: Vec<ServoCommand> = self
                .replies
                .iter()
                .map(|r| if r.state.mode == Some(11) { ServoCommand::Stop } else { ServoCommand::Query })
                .collect();
            self.accounting.add(&cycle_robot(
                &mut self.robot,
                self.sim.as_ref(),
                &clear,
                &mut self.replies,
                &mut self.imu,
            ));
            for (i, c) in clear.iter().enumerate() {
                if *c == ServoCommand::Stop {
                    let servo = self.servos.get(i).copied();
                    self.supervisor.record(self.clock.now_ns(), servo, EventKind::StaleTimeoutCleared);
                }
            }
            // A reply shows the state from before its own frame's command: read the result.
            self.accounting.add(&cycle_robot(
                &mut self.robot,
                self.sim.as_ref(),
                &self.queries,
                &mut self.replies,
                &mut self.imu,
            ));
        }
        Self::note_answered(&mut self.answered, &self.replies);
        fill_statuses(&mut self.statuses, &self.replies, &self.servos, &self.bus_numbers, &self.periods);
    }

    /// Copy the body's generalised positions, as the IMU last read the body, for the next
    /// [`State`] (none without physics, or past [`crate::telemetry::MAX_QPOS`]). No allocation.
    #[inline]
    fn read_qpos(&mut self) {
        let n = self.sim.as_ref().map_or(0, |s| s.qpos_read(&mut self.qpos));
        self.qpos_len = if n <= self.qpos.len() { n } else { 0 };
    }

    /// Hand the measured start to the controller before its first command; its refusal, if it
    /// refused (on a control thread, the refusal comes with its first commands instead).
    fn start_controller(&mut self) -> Result<(), Failure> {
        self.read_qpos();
        let events = self.supervisor.events();
        self.events_seen = events.len();
        let first = State {
            time_s: 0.0,
            cycle: 0,
            servos: &self.statuses,
            imu: &self.imu,
            last_cycle: &self.figures,
            safe_mode: self.supervisor.tripped_at().is_some(),
            events,
            body: self.sim.as_ref().and_then(SimRobot::body),
            qpos: &self.qpos[..self.qpos_len],
            fallen: self.fall.as_ref().is_some_and(super::fall::FallWatch::fallen),
            model_pose: self.pose_kind.view(&self.stand),
        };
        match &mut self.law {
            ControlLaw::Inline(controller) => controller.start(&first),
            ControlLaw::Thread { to_control, .. } => {
                let mut msg = StateMsg::new();
                msg.copy_from(&first);
                let _ = to_control.push(ToControl::Start(msg));
                Ok(())
            }
        }
    }

    /// The control law failed: its event now (the summary's events, the log, the live
    /// publishers), and the failure kept for the summary.
    #[inline]
    fn fail(&mut self, failure: Failure, hook: Hook) {
        let now = self.clock.now_ns();
        let servo = failure.servo.and_then(|i| self.servos.get(i).copied());
        self.supervisor.record(now, servo, EventKind::Controller { name: failure.name, value: failure.value });
        self.failure = Some((failure, hook, now));
    }

    /// The simulator's scheduled overheats (`faults.overheat`), timed from the first period.
    fn schedule_overheats(&mut self, config: &RunConfig, start: u64) {
        if let Ok(overheats) = config.overheats() {
            for o in overheats {
                let at = start.saturating_add(secs_to_ns(o.at_s));
                for s in self.servos.iter().filter(|s| s.id == o.id) {
                    if let Some(sim) = &self.sim {
                        sim.with_bus(s.bus, |bus| bus.schedule_overheat(o.id, at));
                    }
                }
            }
        }
    }

    /// The pushes on the body (`faults.push`), timed from the first period.
    fn schedule_pushes(&mut self, config: &RunConfig, start: u64) {
        for p in config.pushes() {
            let push = rtloop_sim::Push {
                force_n: p.force_n,
                from_ns: start.saturating_add(secs_to_ns(p.at_s)),
                duration_ns: secs_to_ns(p.duration_s),
            };
            // At most rtloop_sim::world::MAX_PUSHES: RunConfig::validate checks it.
            if let Some(sim) = &self.sim {
                sim.push(push);
                // Every episode of a reset world gets the run's pushes again, timed from
                // its reset.
                sim.repeat_after_reset(rtloop_sim::Push { from_ns: secs_to_ns(p.at_s), ..push });
            }
        }
    }

    /// A plant that went unstable ends the run: its servos can no longer report anything
    /// true. Recorded once, as an event the summary reports as a problem.
    #[inline]
    fn physics_failed(&mut self) -> bool {
        if self.physics_failed {
            return true;
        }
        let Some(fault) = self.sim.as_ref().and_then(SimRobot::world_fault) else { return false };
        // The event's value: the plant's time when it failed, in ms.
        let at_ms = (fault.time_s() * 1e3).max(0.0) as u64;
        let now = self.clock.now_ns();
        self.supervisor.record(now, None, EventKind::Controller { name: "physics_unstable", value: Some(at_ms) });
        self.physics_failed = true;
        true
    }

    /// A body that falls is an event of the run (and so a problem: the run ends degraded);
    /// the loop goes on, as the robot's computer would, and the control law may stand it up.
    #[inline]
    fn watch_fall(&mut self) {
        let (Some(fall), Some(sim)) = (&mut self.fall, &self.sim) else { return };
        let Some(body) = sim.body() else { return };
        if let Some(f) = fall.observe(&body) {
            let (name, value) = f.event();
            let now = self.clock.now_ns();
            self.supervisor.record(now, None, EventKind::Controller { name, value: Some(value) });
        }
    }

    /// The control law asked for a reset of the simulated world ([`Output::reset_world`]):
    /// the plant back at its starting pose (perturbed by `seed`), every servo stopped as
    /// `d stop` does (so the next command starts it afresh) and sent a stop this cycle. A
    /// plant that cannot reset ends the run (a `physics_reset_failed` event, a problem of
    /// the run). Nothing without a world.
    #[inline]
    fn reset_world(&mut self, seed: u64, episode: &rtloop_sim::Episode) {
        let done = self.sim.as_ref().and_then(|sim| sim.reset_world_with(seed, episode));
        match done {
            None => {}
            Some(true) => {
                self.commands.fill(ServoCommand::Stop);
                if let Some(fall) = &mut self.fall {
                    fall.restart();
                }
            }
            Some(false) => {
                let now = self.clock.now_ns();
                let kind = EventKind::Controller { name: "physics_reset_failed", value: None };
                self.supervisor.record(now, None, kind);
                self.physics_failed = true;
            }
        }
    }

    /// Every period of the run, until its end, a stop, or the control law's [`Flow::Stop`] or
    /// failure.
    fn run_periods<T: TimeSource>(&mut self, lp: &mut PeriodicLoop<T>, start: u64, end: u64, total: u64) -> Ending {
        let hooks = self.hooks;
        let stop = || stop_requested(hooks);
        loop {
            if lp.next_index() >= total {
                // Every period of the run has begun: wait out the rest of the duration.
                return Ending { interrupted: !lp.sleep_until_unless(end, stop), ended_by_controller: false };
            }
            let Some(tick) = lp.wait_next_unless(stop) else {
                return Ending { interrupted: true, ended_by_controller: false };
            };
            if tick.index >= total {
                // Overruns skipped past the end of the run.
                return Ending::default();
            }
            if self.cycle(lp, &tick, start) == Flow::Stop {
                // A control law that stops because a stop was asked for (a lockstep agent
                // spine, woken from its wait by Ctrl-C) did not end the run: the stop did. One
                // that failed did.
                let by_law = self.failure.is_some() || !stop();
                return Ending { interrupted: !by_law, ended_by_controller: by_law };
            }
            if self.physics_failed() {
                return Ending::default();
            }
        }
    }

    /// One period: the control law's commands, the supervisor's say, the bus cycle, the
    /// replies read, the log hand-off, the counters. Returns the control law's wish.
    #[inline]
    fn cycle<T: TimeSource>(&mut self, lp: &mut PeriodicLoop<T>, tick: &Tick, start: u64) -> Flow {
        let mut answer = self.control(tick, start);
        self.supervise(&answer);
        self.watch_fall();
        if let Some((failure, hook)) = answer.failure.take() {
            // The safe stop begins in this very cycle: the law's commands are not sent.
            self.fail(failure, hook);
            self.supervisor.shutdown(self.shutdown, &mut self.commands);
        } else if let Some(reset) = &answer.reset_world {
            self.reset_world(reset.seed, &reset.episode);
        }
        let report = cycle_robot(&mut self.robot, self.sim.as_ref(), &self.commands, &mut self.replies, &mut self.imu);
        let dt = self.read_replies(tick, &report);
        self.hand_off(tick, dt, &report);
        self.count(&report, dt);
        lp.end_cycle();
        // With physics: the body's next steps now, in the slack before the next period, rather
        // than on the next cycle's critical path (the same steps either way).
        if let Some(sim) = &self.sim {
            sim.advance_to(lp.next_deadline_ns());
        }
        self.progress.overruns.store(lp.overruns(), Ordering::Relaxed);
        answer.flow
    }

    /// Show the control law this period's state (with the events since the last one) and
    /// take its commands into `wanted`.
    #[inline]
    fn control(&mut self, tick: &Tick, start: u64) -> Answer {
        self.read_qpos();
        let events = self.supervisor.events();
        let state = State {
            time_s: tick.deadline_ns.saturating_sub(start) as f64 * 1e-9,
            cycle: tick.index,
            servos: &self.statuses,
            imu: &self.imu,
            last_cycle: &self.figures,
            safe_mode: self.supervisor.tripped_at().is_some(),
            events: events.get(self.events_seen..).unwrap_or(&[]),
            body: self.sim.as_ref().and_then(SimRobot::body),
            qpos: &self.qpos[..self.qpos_len],
            fallen: self.fall.as_ref().is_some_and(super::fall::FallWatch::fallen),
            model_pose: self.pose_kind.view(&self.stand),
        };
        self.events_seen = events.len();
        match &mut self.law {
            ControlLaw::Inline(controller) => {
                let mut out = Output::new(&mut self.wanted, &mut self.telemetry);
                let result = controller.cycle(&state, &mut out);
                Answer::of(result, Hook::Cycle, out.rearm_requested(), out.world_reset().copied(), out.events())
            }
            ControlLaw::Thread { to_control, from_control } => {
                let first = std::mem::replace(&mut self.first_command_pending, false);
                let got = newest_commands(from_control, first, &self.clock, self.hooks);
                let answer = match got {
                    Some(msg) => {
                        let n = self.wanted.len();
                        self.wanted.copy_from_slice(&msg.commands[..n]);
                        self.telemetry = msg.telemetry;
                        let events = &msg.events[..msg.events_len];
                        match msg.failure {
                            Some((failure, hook)) => Answer::of(Err(failure), hook, false, None, events),
                            None => Answer::new(msg.flow, msg.rearm, msg.reset_world, events),
                        }
                    }
                    None => {
                        if tick.index > 0 {
                            self.counts.control_late += 1;
                        }
                        Answer::new(Flow::Continue, false, None, &[])
                    }
                };
                let mut msg = StateMsg::new();
                msg.copy_from(&state);
                if to_control.push(ToControl::Cycle(msg)).is_err() {
                    self.counts.control_late += 1;
                }
                answer
            }
        }
    }

    /// The commands sent: the control law's, each with a valid watchdog, overridden by the
    /// supervisor (safe mode, faults) and by the operator's hold; the law's and the
    /// operator's events and re-arms recorded first, so this cycle's commands obey them.
    #[inline]
    fn supervise(&mut self, answer: &Answer) {
        let now = self.clock.now_ns();
        for r in answer.reported() {
            let kind = EventKind::Controller { name: r.name, value: r.value };
            self.supervisor.record(now, r.servo.and_then(|i| self.servos.get(i).copied()), kind);
        }
        if answer.rearm {
            self.supervisor.rearm(now);
        }
        // The operator's commands: a re-arm ends the hold and the safe mode; a hold sends
        // every healthy servo zero velocity, whatever the control law asks.
        let rearms = self.hooks.remote.rearms();
        if rearms != self.remote_rearms {
            self.remote_rearms = rearms;
            self.supervisor.record(now, None, EventKind::Controller { name: "remote_rearm", value: None });
            self.supervisor.rearm(now);
        }
        let held = self.hooks.remote.held();
        if held && !self.remote_held {
            self.supervisor.record(now, None, EventKind::Controller { name: "remote_zero_velocity", value: None });
        }
        self.remote_held = held;
        self.commands.copy_from_slice(&self.wanted);
        enforce_watchdog(&mut self.commands, self.watchdog_s);
        self.supervisor.apply(&mut self.commands);
        if held {
            hold_at_zero_velocity(&mut self.commands, self.supervisor.faulted());
        }
    }

    /// After the bus cycle: the supervisor's check of the replies, and what the controller
    /// sees next period. Returns the cycle's duration, ns.
    #[inline]
    fn read_replies(&mut self, tick: &Tick, report: &rtloop_io::CycleReport) -> u64 {
        let now = self.clock.now_ns();
        self.periods.note(report.cycle, tick.index);
        self.supervisor.check(now, &self.servos, &self.replies);
        Self::note_answered(&mut self.answered, &self.replies);
        fill_statuses(&mut self.statuses, &self.replies, &self.servos, &self.bus_numbers, &self.periods);
        let dt = report.stats.duration_ns();
        self.figures = CycleFigures {
            wakeup_ns: tick.late_ns(),
            duration_ns: dt,
            missing: report.missing,
            late: report.late,
            timed_out: report.stats.timed_out,
        };
        dt
    }

    /// The cycle, the controller's telemetry and the new events to the log (a wait-free
    /// ring; `crate::telemetry`). Telemetry nobody reads is dropped here, every cycle.
    #[inline]
    fn hand_off(&mut self, tick: &Tick, dt: u64, report: &rtloop_io::CycleReport) {
        if let Some(log) = self.logger.as_mut() {
            if log.wants_cycle(tick.index) {
                let (servos, buses) = (&self.servos, &self.bus_numbers);
                self.cycle_log.fill(tick, dt, report, servos, buses, &self.commands, &self.replies, &self.imu);
                self.cycle_log.fill_body(self.sim.as_ref());
                log.log(LogMsg::Cycle(self.cycle_log));
            }
            if let Some(value) = self.telemetry.take().filter(|_| log.wants_custom()) {
                log.log(LogMsg::Custom { at_ns: tick.woke_ns, value });
            }
            self.events_logged = log_events(log, &self.supervisor, self.events_logged, &self.bus_numbers);
            log_injected(log, self.sim.as_ref(), &mut self.injected_logged, &self.bus_numbers);
        }
        self.telemetry = None;
    }

    /// The summary's counts, and the figures `progress` publishes.
    #[inline]
    fn count(&mut self, report: &rtloop_io::CycleReport, dt: u64) {
        let c = &mut self.counts;
        c.missing += report.missing as u64;
        self.accounting.add(report);
        c.timeouts += report.stats.timed_out as u64;
        c.transport_errors += report.stats.send_errors as u64 + report.stats.failed_buses.count_ones() as u64;
        c.imu_samples += report.stats.imu_present as u64;
        // Counters kept here and published with plain stores (no read-modify-write: only
        // this thread writes them), never statistics: `lp.stats()` computes percentiles
        // over two histograms, tens of µs, far too much per cycle (benches/bookkeeping.rs).
        c.cycles_done += 1;
        c.max_cycle_ns = c.max_cycle_ns.max(dt);
        let p = self.progress;
        p.cycles.store(c.cycles_done, Ordering::Relaxed);
        p.missing.store(c.missing, Ordering::Relaxed);
        p.last_cycle_ns.store(dt, Ordering::Relaxed);
        p.max_cycle_ns.store(c.max_cycle_ns, Ordering::Relaxed);
    }

    /// Each servo that answered this cycle has answered at least once. (A function of the two
    /// fields, not a method: the shutdown cycle calls it while its `sent` commands still borrow
    /// the rest of `self`.)
    #[inline]
    fn note_answered(answered: &mut [bool], replies: &[ServoReply]) {
        for (a, r) in answered.iter_mut().zip(replies) {
            *a |= r.request_cycle.is_some();
        }
    }

    /// However the run ends — its duration, Ctrl-C, SIGTERM, SIGHUP — one last cycle leaves
    /// every healthy servo in the safe mode (rather than to its watchdog, which latches mode
    /// 11 that only a stop leaves), logged like any other, then queries: a reply shows the
    /// state from before its own frame's command, so only a later one shows what the servos
    /// did with the safe mode. Up to three, until every servo has answered one (a reply can
    /// miss a cycle on a busy machine). Returns how many cycles that took.
    fn shut_down(&mut self, shutdown: ServoCommand, first_index: u64) -> u64 {
        let mut shutdown_cycles = 0;
        self.supervisor.shutdown(shutdown, &mut self.commands);
        for (index, phase) in (first_index..).zip(0..1 + READ_BACK_QUERIES) {
            if phase >= 2 && self.replies.iter().all(|r| r.fresh) {
                break;
            }
            let sent = if phase == 0 { &self.commands } else { &self.queries };
            let woke = self.clock.now_ns();
            let report = cycle_robot(&mut self.robot, self.sim.as_ref(), sent, &mut self.replies, &mut self.imu);
            self.periods.note(report.cycle, index);
            self.accounting.add(&report);
            shutdown_cycles += 1;
            Self::note_answered(&mut self.answered, &self.replies);
            if phase == 0 {
                self.supervisor.record(self.clock.now_ns(), None, EventKind::Shutdown);
            }
            if let Some(log) = self.logger.as_mut() {
                let tick = Tick { index, deadline_ns: woke, woke_ns: woke };
                let dt = report.stats.duration_ns();
                let (servos, buses) = (&self.servos, &self.bus_numbers);
                self.cycle_log.fill(&tick, dt, &report, servos, buses, sent, &self.replies, &self.imu);
                self.cycle_log.fill_body(self.sim.as_ref());
                log.log(LogMsg::Cycle(self.cycle_log));
                self.events_logged = log_events(log, &self.supervisor, self.events_logged, &self.bus_numbers);
                log_injected(log, self.sim.as_ref(), &mut self.injected_logged, &self.bus_numbers);
            }
        }
        shutdown_cycles
    }

    /// After the real-time section: the controller's `stop`, with the last replies.
    fn stop_controller(&mut self, start: u64, next_index: u64) {
        fill_statuses(&mut self.statuses, &self.replies, &self.servos, &self.bus_numbers, &self.periods);
        self.read_qpos();
        let events = self.supervisor.events();
        let last = State {
            time_s: self.clock.now_ns().saturating_sub(start) as f64 * 1e-9,
            cycle: next_index,
            servos: &self.statuses,
            imu: &self.imu,
            last_cycle: &self.figures,
            safe_mode: self.supervisor.tripped_at().is_some(),
            events: events.get(self.events_seen..).unwrap_or(&[]),
            body: self.sim.as_ref().and_then(SimRobot::body),
            qpos: &self.qpos[..self.qpos_len],
            fallen: self.fall.as_ref().is_some_and(super::fall::FallWatch::fallen),
            model_pose: self.pose_kind.view(&self.stand),
        };
        match &mut self.law {
            ControlLaw::Inline(controller) => controller.stop(&last),
            ControlLaw::Thread { to_control, .. } => {
                let mut msg = StateMsg::new();
                msg.copy_from(&last);
                let _ = to_control.push(ToControl::Stop(msg));
            }
        }
    }

    /// What the summary is made of.
    fn into_result(
        self,
        periodic: rtloop_rt::periodic::LoopStats,
        ending: Ending,
        (loop_started, loop_wall_s): (Instant, f64),
        shutdown_cycles: u64,
        start_ns: u64,
    ) -> LoopResult {
        LoopResult {
            periodic,
            missing: self.counts.missing,
            accounting: self.accounting,
            timeouts: self.counts.timeouts,
            transport_errors: self.counts.transport_errors,
            imu_samples: self.counts.imu_samples,
            control_late: self.counts.control_late,
            interrupted: ending.interrupted,
            ended_by_controller: ending.ended_by_controller,
            failure: self.failure,
            loop_wall_s,
            loop_started,
            shutdown_cycles,
            replies: self.replies,
            last_commands: self.commands,
            answered: self.answered,
            supervisor: self.supervisor,
            start_ns,
            sim: self.sim,
            falls: self.fall.as_ref().map_or(0, super::fall::FallWatch::falls),
            model_name: self.model_name,
        }
    }
}

/// A control thread's newest commands (older ones are stale by now). The first cycle waits
/// (bounded, spinning: the real-time section may not sleep on a lock) for the commands
/// computed from the measured start, as the inline controller's are.
#[inline]
fn newest_commands<T, K: Clock>(
    from_control: &mut rtrb::Consumer<CommandMsg<T>>,
    first: bool,
    clock: &K,
    hooks: &Hooks,
) -> Option<CommandMsg<T>> {
    let mut got = None;
    if first {
        let give_up = clock.now_ns().saturating_add(CONTROL_START_TIMEOUT.as_nanos() as u64);
        while got.is_none() && clock.now_ns() < give_up && !stop_requested(hooks) {
            got = from_control.pop().ok();
            std::hint::spin_loop();
        }
    }
    while let Ok(mut msg) = from_control.pop() {
        // Older commands are stale, but a reset one of them asked for still happens, and a
        // failure one of them reported still ends the run.
        if let Some(older) = got.take() {
            msg.reset_world = msg.reset_world.or(older.reset_world);
            if msg.failure.is_none() && older.failure.is_some() {
                (msg.flow, msg.failure) = (Flow::Stop, older.failure);
            }
        }
        got = Some(msg);
    }
    got
}

/// Hold every servo at zero velocity (the operator asked, `crate::live::RemoteCommand`),
/// but only query a faulted one, as the safe mode does: its fault stays reported.
pub(super) fn hold_at_zero_velocity(commands: &mut [ServoCommand], faulted: &[bool]) {
    for (i, c) in commands.iter_mut().enumerate() {
        *c = if faulted.get(i).copied().unwrap_or(false) { ServoCommand::Query } else { ServoCommand::ZeroVelocity };
    }
}

/// Hand the supervisor's events from `from` on to the log; returns how many are logged.
pub(super) fn log_events<T>(
    log: &mut LogHandOff<T>,
    supervisor: &Supervisor,
    from: usize,
    bus_numbers: &[u8],
) -> usize {
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
/// a fixed ring of at most `rtloop_sim::EVENT_CAPACITY` entries.
pub(super) fn log_injected<T>(
    log: &mut LogHandOff<T>,
    sim: Option<&SimRobot>,
    logged: &mut [usize],
    bus_numbers: &[u8],
) {
    let Some(robot) = sim else { return };
    for (b, logged) in logged.iter_mut().enumerate() {
        let bus = bus_numbers.get(b).copied().unwrap_or(0);
        robot.with_bus(b, |sim| {
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
pub(super) fn injected_name(kind: &rtloop_sim::InjectedKind) -> &'static str {
    match kind {
        rtloop_sim::InjectedKind::OverheatStarted => "injected_overheat",
        rtloop_sim::InjectedKind::FaultLatched { .. } => "servo_fault_latched",
        rtloop_sim::InjectedKind::FrameDropped { .. } => "injected_frame_drops",
        rtloop_sim::InjectedKind::FrameCorrupted { .. } => "injected_frame_corruption",
    }
}

#[cfg(test)]
mod tests {
    use super::enforce_watchdog;
    use rtloop_io::ServoCommand;
    use rtloop_proto::host::PositionCommand;

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
}
