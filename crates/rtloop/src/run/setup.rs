//! Setting a run up: the checks and warnings before the loop, the real-time settings, the
//! telemetry thread and the cycle thread ([`execute_on`]), then the summary.

use super::*;

/// The real-time settings the cycle thread asks for. `auto` asks for SCHED_FIFO at
/// [`AUTO_PRIORITY`](crate::config::AUTO_PRIORITY) (or the priority given) and locked memory where the limits allow it — but
/// SCHED_OTHER in lockstep ([`RunConfig::auto_realtime`]).
pub(super) fn rt_settings(config: &RunConfig) -> Result<RtSettings, RunError> {
    let r = &config.realtime;
    let choice = parse_policy(&r.policy).map_err(|source| RunError::RealtimeWord { key: "realtime.policy", source })?;
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
        settings.deadline = Some(rtloop_rt::setup::DeadlineParams {
            runtime_ns: period / 10 * 9,
            deadline_ns: period,
            period_ns: period,
        });
    }
    Ok(settings)
}

/// The model's warning when one cycle of this robot is predicted to take longer than the
/// period, or `None`. Only where the model applies: CAN-FD wire time (a real bus, or a
/// simulated one with wire time).
pub(super) fn model_warning(config: &RunConfig) -> Option<String> {
    let robot = config.robot();
    if !config.sim.wire_time && robot.all_simulated() {
        return None;
    }
    let predicted_ns = rtloop_sim::model::predict(&model_of_run(config)).total_ns;
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
pub(super) fn watchdog_warning(config: &RunConfig) -> Option<String> {
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

/// The robot of a run: its buses opened with the run's protocol settings and a cycle timeout
/// within the period, the simulated ones with the configured faults (from `seed`), start
/// position and body; and the simulated robot behind them, when some are simulated.
fn open_robot<K: Clock + Clone + Send + 'static>(
    config: &RunConfig,
    robot_spec: &crate::robot_spec::RobotSpec,
    clock: K,
    seed: u64,
) -> Result<crate::robot::Built<K>, RunError> {
    let mut robot_config = crate::cycle_model::robot_config_for(robot_spec);
    // Never let one cycle run into the next period, nor keep Ctrl-C waiting.
    robot_config.cycle.timeout_ns = (config.period_ns() / 10 * 9).clamp(50_000, MAX_CYCLE_TIMEOUT_NS);
    let sim_bus = rtloop_sim::BusConfig {
        drop_rate: config.faults.drop_rate,
        corrupt_rate: config.faults.corrupt_rate,
        // Validated: at most 10 s, so the product cannot overflow.
        reply_delay_ns: config.faults.reply_delay_us.saturating_mul(1000),
        fault_seed: seed,
        ..if config.sim.wire_time {
            rtloop_sim::BusConfig::default()
        } else {
            rtloop_sim::BusConfig::without_wire_time()
        }
    };
    sim_bus.validate().map_err(RunError::FaultRate)?;
    let setup = crate::robot::SimSetup {
        options: rtloop_simrobot::SimOptions { bus: sim_bus },
        start_position_rev: (config.sim.start_position_rev != 0.0).then_some(config.sim.start_position_rev),
        physics: config.physics.clone(),
        period_ns: config.period_ns(),
    };
    crate::robot::build(robot_spec, clock, robot_config, Default::default(), &setup).map_err(|e| match e {
        crate::robot::BuildError::Open(e) | crate::robot::BuildError::Setup(e) => RunError::Bus(e),
        crate::robot::BuildError::Physics(e) => RunError::Physics(e),
    })
}

/// The telemetry thread (the log file, the live publishers) and the hand-off the cycle thread
/// feeds it through; neither when there is no log and nothing live.
type Telemetry<T> = (Option<LogHandOff<T>>, Option<rtloop_tlog::realtime::LogThread>);

/// Start the telemetry thread: it writes `log` (with `C`'s own record) and offers every
/// message to `fanout` when `live_every` is set. A lockstep run's log waits for the writer.
fn start_telemetry<C: Controller>(
    log: Option<&std::path::PathBuf>,
    physics: Option<&crate::physics::PhysicsInfo>,
    lockstep: bool,
    fanout: &Arc<std::sync::Mutex<crate::live::Fanout>>,
    live_every: Option<u32>,
) -> Result<Telemetry<C::Telemetry>, RunError> {
    Ok(match (log, live_every) {
        (Some(path), _) => {
            let mut writer = rtloop_tlog::writer::FileWriter::create(path)
                .map_err(|e| RunError::CreateLog { path: path.clone(), error: e })?;
            let mut sink = LogSink::<C::Telemetry>::register(&mut writer, C::TELEMETRY_RECORD)
                .map_err(|e| RunError::Log { path: path.clone(), error: e })?;
            if let Some(info) = physics {
                sink =
                    sink.with_physics(&mut writer, info).map_err(|e| RunError::Log { path: path.clone(), error: e })?;
            }
            if lockstep {
                // Simulated time from 0: stamps that do not depend on when the run happened.
                sink.set_epoch_offset_us(0);
            }
            let live = Arc::clone(fanout);
            let (logger, thread) = rtloop_tlog::realtime::spawn(LOG_RING_MESSAGES, writer, move |w, m| {
                if live_every.is_some() {
                    live.lock().unwrap_or_else(|e| e.into_inner()).offer(&m);
                }
                sink.write(w, m)
            })
            .map_err(|e| RunError::Log { path: path.clone(), error: e })?;
            // Lockstep has no deadline to keep: its log waits for the writer rather than drop
            // a cycle, so it has every cycle whatever the host's speed.
            (Some(LogHandOff::new(logger, lockstep)), Some(thread))
        }
        (None, Some(every)) => {
            // No file: the thread only feeds the publishers; its log goes nowhere.
            let writer = rtloop_tlog::writer::FileWriter::new(std::io::sink(), Default::default())
                .map_err(RunError::LiveTelemetry)?;
            let live = Arc::clone(fanout);
            let (logger, thread) =
                rtloop_tlog::realtime::spawn(LOG_RING_MESSAGES, writer, move |_, m: LogMsg<C::Telemetry>| {
                    live.lock().unwrap_or_else(|e| e.into_inner()).offer(&m);
                    Ok(())
                })
                .map_err(RunError::LiveTelemetry)?;
            (Some(LogHandOff::new(logger, lockstep).live_only(every)), Some(thread))
        }
        (None, None) => (None, None),
    })
}

/// Close the telemetry thread and say what the log and the live publishers got.
fn finish_telemetry(
    log_thread: Option<rtloop_tlog::realtime::LogThread>,
    log: Option<&std::path::PathBuf>,
    fanout: &std::sync::Mutex<crate::live::Fanout>,
    live_every: Option<u32>,
    remote: &crate::live::RemoteControl,
) -> Result<(Option<LogSummary>, Option<LiveSummary>), RunError> {
    let log_stats = match log_thread {
        Some(t) => Some(t.finish().map_err(|e| match log {
            Some(path) => RunError::Log { path: path.clone(), error: e },
            None => RunError::LiveTelemetry(e),
        })?),
        None => None,
    };
    let live = live_every.map(|_| {
        let publishers = fanout.lock().unwrap_or_else(|e| e.into_inner()).finish();
        LiveSummary {
            handoff_dropped: log_stats.as_ref().map_or(0, |st| st.dropped),
            publishers,
            remote_commands: remote.accepted(),
        }
    });
    let log = match (log_stats, log) {
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
    Ok((log, live))
}

/// The error of real-time settings the cycle thread could not apply: with `strict`, every
/// refusal in one sentence; otherwise the settings were invalid.
fn realtime_error(e: rtloop_rt::setup::RtError) -> RunError {
    match e {
        rtloop_rt::setup::RtError::Refused(ws) => RunError::Strict(format!(
            "the system refused {} real-time request{}: {}",
            ws.len(),
            if ws.len() == 1 { "" } else { "s" },
            rtloop_rt::setup::RtError::Refused(ws).refusals()
        )),
        invalid => RunError::Realtime(invalid),
    }
}

/// `--policy auto`: what it could not get (the scheduler and memory lock refusals, and
/// `refused_before` the cycle thread started) becomes one warning, the first.
fn merge_auto_refusals(applied: &mut rtloop_rt::setup::Applied, mut refused_before: Vec<String>, priority: i32) {
    let (mine, rest): (Vec<_>, Vec<_>) = applied
        .warnings
        .drain(..)
        .partition(|w| matches!(w.what, rtloop_rt::setup::Setting::Scheduler | rtloop_rt::setup::Setting::MemoryLock));
    applied.warnings = rest;
    let mut refused: Vec<String> = mine.iter().map(|w| refusal_clause(&w.message)).collect();
    refused.append(&mut refused_before);
    if let Some(w) = auto_warning(applied, &refused, priority) {
        applied
            .warnings
            .insert(0, rtloop_rt::setup::Warning { what: rtloop_rt::setup::Setting::Scheduler, message: w });
    }
}

/// Set a run up, run its loop on the cycle thread and return its summary.
pub(super) fn execute_on<C, K, T>(
    opts: &RunOptions,
    mut hooks: Hooks,
    controller: C,
    clock: K,
    time: T,
) -> Result<RunSummary, RunError>
where
    C: Controller + 'static,
    K: Clock + Clone + Send + 'static,
    T: TimeSource + Send + 'static,
{
    // First: a signal while the robot is opened (a physics model loading and settling for up
    // to a second) is heard after it, and the run ends with its summary.
    crate::signals::install();
    let lockstep = opts.config.sim.lockstep;
    let mut notify = std::mem::replace(&mut hooks.notice, Box::new(|_: &Notice| {}));
    let config = opts.config.clone();
    config.validate().map_err(RunError::Config)?;
    let settings = rt_settings(&config)?;
    let overrun: OverrunPolicy =
        config.realtime.overrun.parse().map_err(|source| RunError::RealtimeWord { key: "realtime.overrun", source })?;
    let shutdown = parse_shutdown(&config.safety.shutdown).map_err(RunError::Config)?;
    let robot_spec = config.robot();
    if robot_spec.servo_count() > MAX_SERVOS {
        return Err(RunError::TooManyServos { configured: robot_spec.servo_count() });
    }
    // Before anything is opened: enough file descriptors for everything the run holds.
    let files = RUN_OPEN_FILES
        + config.live.open_files()
        + crate::live::LiveConfig::SINK_OPEN_FILES * hooks.publishers.len() as u64;
    rtloop_rt::setup::ensure_open_files("this run", files).map_err(RunError::OpenFiles)?;
    let strict = config.realtime.strict;
    let mut warnings = Vec::new();
    if let Some(w) = model_warning(&config) {
        if strict {
            return Err(RunError::Strict(w));
        }
        notify(&Notice::Warning(w.clone()));
        warnings.push(w);
    }
    if let Some(w) = watchdog_warning(&config) {
        notify(&Notice::Warning(w.clone()));
        warnings.push(w);
    }
    let seed =
        config.faults.seed.unwrap_or_else(|| if lockstep { LOCKSTEP_SEED } else { crate::config::random_seed() });
    let crate::robot::Built { robot, sim, physics } = open_robot(&config, &robot_spec, clock, seed)?;
    if let Some(p) = &physics {
        let torque_cap = p.torque_cap_notice(config.gains.maximum_torque);
        for n in p.notices.iter().map(ToString::to_string).chain(torque_cap) {
            notify(&Notice::Warning(n.clone()));
            warnings.push(n);
        }
    }
    let servos: Vec<ServoSpec> = robot.servos().to_vec();
    let bus_numbers: Vec<u8> = robot_spec.buses.iter().map(|b| b.bus).collect();
    let buses = robot.cycler().bus_count();
    let n = servos.len();

    // `auto` outside lockstep: what it could not get is told in one warning, after the cycle
    // thread has tried the rest.
    let auto = config.auto_realtime();
    let mut auto_refused: Vec<String> = Vec::new();
    // Hold the CPUs out of deep idle states while the loop runs, as cyclictest does.
    let cpu_dma_latency = if config.holds_cpu_dma_latency() {
        match rtloop_rt::setup::CpuDmaLatency::hold_zero() {
            Ok(held) => Some(held),
            Err(e) if strict => return Err(RunError::Strict(e.to_string())),
            Err(e) if auto => {
                auto_refused.push(refusal_clause(&e.to_string()));
                None
            }
            Err(e) => {
                let e = e.to_string();
                notify(&Notice::Warning(e.clone()));
                warnings.push(e);
                None
            }
        }
    } else {
        None
    };

    let progress = Arc::new(Progress::default());
    let thread_progress = Arc::clone(&progress);
    let (warn_tx, warn_rx) = std::sync::mpsc::channel::<Result<rtloop_rt::setup::Applied, rtloop_rt::setup::RtError>>();
    let control = config.realtime.control_thread;
    let period_s = config.period_ns() as f64 * 1e-9;
    let thread_config = config.clone();
    let thread_bus_numbers = bus_numbers.clone();
    let thread_physics = physics.clone();
    let main_thread = std::thread::current();
    // The live publishers: started now, so a taken port or an unreachable router is an
    // error before the run.
    let mut publishers = std::mem::take(&mut hooks.publishers);
    let hooks_remote = Arc::clone(&hooks.remote);
    publishers.extend(crate::live::publishers(&config.live, &hooks.remote).map_err(RunError::Live)?);
    let live_robot = crate::live::LiveRobot {
        name: config.live.robot_name(),
        rate_hz: config.rate_hz,
        servos: servos.iter().map(|s| (bus_numbers.get(s.bus).copied().unwrap_or(0), s.id)).collect(),
        imu: robot.cycler().has_imu(),
        model: physics.as_ref().map(crate::telemetry::ModelRecord::of),
    };
    // Stamped with wall-clock time, also in lockstep: a viewer shows when it happened.
    let fanout = crate::live::Fanout::start(publishers, &live_robot, crate::telemetry::epoch_offset_us());
    let live_every = (!fanout.is_empty()).then(|| fanout.finest_every());
    let fanout = Arc::new(std::sync::Mutex::new(fanout));
    // The telemetry thread (the log file, the live publishers): it starts now; the cycle
    // thread gets the ring's producer end.
    let (logger, log_thread) =
        start_telemetry::<C>(opts.log.as_ref(), physics.as_ref(), lockstep, &fanout, live_every)?;
    let handle = std::thread::Builder::new()
        .name("rtloop-cycle".into())
        .spawn(move || -> Option<LoopResult> {
            let applied = rtloop_rt::setup::apply_to_current_thread(&settings);
            let ok = applied.is_ok();
            let _ = warn_tx.send(applied);
            if !ok {
                thread_progress.done.store(true, Ordering::Release);
                main_thread.unpark();
                return None;
            }
            let setup = CycleSetup {
                robot,
                sim,
                config: thread_config,
                shutdown,
                overrun,
                bus_numbers: thread_bus_numbers,
                physics: thread_physics,
            };
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
        .map_err(RunError::CycleThreadStart)?;

    let applied = match warn_rx.recv() {
        Ok(Ok(applied)) => applied,
        Ok(Err(e)) => {
            let _ = handle.join();
            return Err(realtime_error(e));
        }
        Err(_) => return Err(RunError::CycleThreadEnded),
    };
    let mut applied = applied;
    if auto {
        merge_auto_refusals(&mut applied, auto_refused, config.auto_priority());
    }
    for w in &applied.warnings {
        notify(&Notice::Warning(w.to_string()));
    }
    if let Some(every) = opts.progress {
        report_progress(&progress, &config, every, &mut notify);
    }
    let result = handle.join().map_err(|_| RunError::CycleThreadPanicked)?.ok_or(RunError::CycleThreadStopped)?;
    let cpu_dma_latency_held = cpu_dma_latency.is_some();
    drop(cpu_dma_latency);
    let loop_started = result.loop_started;
    let (log, live) = finish_telemetry(log_thread, opts.log.as_ref(), &fanout, live_every, &hooks_remote)?;
    let mut summary = summarize(&config, &servos, &bus_numbers, buses, result, &applied, seed);
    summary.wall_s = loop_started.elapsed().as_secs_f64();
    if let Some(problem) = log.as_ref().and_then(LogSummary::problem) {
        summary.problems.push(problem);
        summary.status = Status::Degraded;
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
pub(super) fn refusal_clause(message: &str) -> String {
    match message.split_once("): ") {
        Some((what, _)) => format!("{what})"),
        None => message.to_string(),
    }
}

/// The one warning of `--policy auto` when something was refused: what the thread runs
/// with, what was refused, and how to grant it. `None` when everything was granted.
pub(super) fn auto_warning(applied: &rtloop_rt::setup::Applied, refused: &[String], priority: i32) -> Option<String> {
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
pub(super) fn model_of_run(config: &RunConfig) -> rtloop_sim::model::CycleModel {
    let robot = config.robot();
    let model = crate::cycle_model::model_for(&robot);
    if config.sim.wire_time || !robot.all_simulated() {
        return model;
    }
    rtloop_sim::model::CycleModel { nominal_bitrate: u32::MAX, data_bitrate: u32::MAX, turnaround_ns: 0, ..model }
}
