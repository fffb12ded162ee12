//! The loop: the real-time half of a run ([`run_loop`]) and the helpers it calls each
//! cycle. Everything between the `enter_rt` and `leave_rt` hooks must not allocate, lock or
//! block.

use super::*;

pub(super) struct LoopResult<K: Clock> {
    pub(super) periodic: rt::periodic::LoopStats,
    pub(super) missing: u64,
    pub(super) accounting: ReplyAccounting,
    pub(super) timeouts: u64,
    pub(super) transport_errors: u64,
    pub(super) imu_samples: u64,
    pub(super) control_late: u64,
    pub(super) interrupted: bool,
    pub(super) ended_by_controller: bool,
    pub(super) wall_s: f64,
    pub(super) shutdown_cycles: u64,
    pub(super) replies: Vec<ServoReply>,
    /// The last command each servo was sent.
    pub(super) last_commands: Vec<ServoCommand>,
    /// Each servo answered at least once.
    pub(super) answered: Vec<bool>,
    pub(super) supervisor: Supervisor,
    pub(super) start_ns: u64,
    pub(super) robot: Robot<K>,
}

/// Everything the cycle thread needs, prepared before it starts.
pub struct CycleSetup<K: Clock> {
    pub(super) robot: Robot<K>,
    pub(super) config: RunConfig,
    pub(super) shutdown: ServoCommand,
    pub(super) overrun: OverrunPolicy,
    pub(super) bus_numbers: Vec<u8>,
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

/// Robot exchange numbers ([`io::CycleReport::cycle`]) of the last periods, to tell a
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

/// The real-time half of the run. Everything between the `enter_rt` and `leave_rt` hooks
/// must not allocate, lock or block (tests/rt_no_alloc.rs).
pub(super) fn run_loop<C: Controller, K: Clock + Clone, T: TimeSource>(
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
/// a fixed ring of at most `sim::EVENT_CAPACITY` entries.
pub(super) fn log_injected<T, K: Clock>(
    log: &mut LogHandOff<T>,
    robot: &mut Robot<K>,
    logged: &mut [usize],
    bus_numbers: &[u8],
) {
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
pub(super) fn injected_name(kind: &sim::InjectedKind) -> &'static str {
    match kind {
        sim::InjectedKind::OverheatStarted => "injected_overheat",
        sim::InjectedKind::FaultLatched { .. } => "servo_fault_latched",
        sim::InjectedKind::FrameDropped { .. } => "injected_frame_drops",
        sim::InjectedKind::FrameCorrupted { .. } => "injected_frame_corruption",
    }
}

#[cfg(test)]
mod tests {
    use super::enforce_watchdog;
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
}
