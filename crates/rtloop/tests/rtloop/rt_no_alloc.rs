//! The hot-path rule for the whole run loop: thousands of real-time iterations — periodic
//! wakeup, control law (inline or through the wait-free rings), safety supervisor, the
//! four-bus cycle, statistics — allocate nothing on the cycle thread. Nor do the waits that
//! listen for Ctrl-C (sliced sleeps at slow rates, the wait for the end of the duration) or
//! the shutdown cycle and its read-back query after a stop.

use crate::support;

use rtloop::config::RunConfig;
use rtloop::Runtime;
use std::sync::atomic::{AtomicU64, Ordering};

/// Allocator calls the cycle thread made inside the real-time section (set by the hooks).
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run_counted(control_thread: bool) -> (u64, u64) {
    run_counted_with(control_thread, None)
}

fn run_counted_with(control_thread: bool, log: Option<std::path::PathBuf>) -> (u64, u64) {
    let mut config = RunConfig { rate_hz: 2000.0, duration_s: 1.5, ..RunConfig::default() };
    config.realtime.control_thread = control_thread;
    // A servo faults midway, so the supervisor's override and event paths run too.
    config.faults.overheat = vec!["3@0.3".into()];
    let (allocations, summary) = run_config(config, log, None);
    (allocations, summary.cycles)
}

/// Run `config` with the allocation counter on around the real-time section; with
/// `stop_after`, stop the run from another thread as Ctrl-C does.
fn run_config(
    config: RunConfig,
    log: Option<std::path::PathBuf>,
    stop_after: Option<std::time::Duration>,
) -> (u64, rtloop::RunSummary) {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ALLOCATIONS.store(0, Ordering::SeqCst);
    let mut runtime = Runtime::from_config(config.clone()).on_realtime_section(rtloop_testkit::start_counting, || {
        ALLOCATIONS.store(rtloop_testkit::stop_counting(), Ordering::SeqCst)
    });
    if let Some(log) = log {
        runtime = runtime.log(log);
    }
    let stopper = stop_after.map(|after| {
        let stop = runtime.stop_flag();
        std::thread::spawn(move || {
            std::thread::sleep(after);
            stop.store(true, Ordering::SeqCst);
        })
    });
    let summary = runtime.run(rtloop::motion::Motion::from_config(&config)).unwrap();
    if let Some(h) = stopper {
        h.join().unwrap();
    }
    (ALLOCATIONS.load(Ordering::SeqCst), summary)
}

#[test]
fn the_harness_sees_an_allocation() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (calls, v) = rtloop_testkit::count_allocations(|| std::hint::black_box(Vec::<u8>::with_capacity(8)));
    drop(v);
    assert!(calls >= 1);
}

#[test]
fn the_real_time_loop_never_allocates() {
    let (allocations, cycles) = run_counted(false);
    assert!(cycles > 1000, "{cycles} cycles");
    assert_eq!(allocations, 0, "the real-time section allocated");
}

#[test]
fn the_real_time_loop_with_a_control_thread_never_allocates() {
    let (allocations, cycles) = run_counted(true);
    assert!(cycles > 1000, "{cycles} cycles");
    assert_eq!(allocations, 0, "the real-time section allocated");
}

#[test]
fn the_real_time_loop_with_telemetry_logging_never_allocates() {
    // Removed with its directory when the guard drops, also if the run panics.
    let dir = tempfile::tempdir().unwrap();
    let (allocations, cycles) = run_counted_with(false, Some(dir.path().join("noalloc.tlog")));
    assert!(cycles > 1000, "{cycles} cycles");
    assert_eq!(allocations, 0, "the real-time section allocated while logging");
}

/// A publisher that allocates on every call: on the telemetry thread, never the cycle thread.
struct Allocating(Vec<Vec<u8>>);

impl rtloop::live::LiveSink for Allocating {
    fn start(&mut self, _robot: &rtloop::live::LiveRobot) {}
    fn cycle(&mut self, cycle: &rtloop::live::LiveCycle<'_>) {
        self.0.push(serde_json::to_vec(&cycle.timing).unwrap());
    }
    fn event(&mut self, _stamp_us: i64, event: &rtloop::live::EventMsg<'_>) {
        self.0.push(event.kind.as_bytes().to_vec());
    }
    fn stats(&self) -> rtloop::live::LiveStats {
        rtloop::live::LiveStats { cycles: self.0.len() as u64, ..Default::default() }
    }
}

#[test]
fn live_publishing_and_remote_commands_never_allocate_on_the_cycle_thread() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ALLOCATIONS.store(0, Ordering::SeqCst);
    let config = RunConfig { rate_hz: 2000.0, duration_s: 1.5, ..RunConfig::default() };
    let runtime = Runtime::from_config(config.clone())
        .on_realtime_section(rtloop_testkit::start_counting, || {
            ALLOCATIONS.store(rtloop_testkit::stop_counting(), Ordering::SeqCst)
        })
        .publish(Allocating(Vec::new()), 1);
    // The operator holds the servos, then re-arms, while the loop runs.
    let remote = runtime.remote_control();
    let operator = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(400));
        remote.request(rtloop::live::RemoteCommand::ZeroVelocity);
        std::thread::sleep(std::time::Duration::from_millis(400));
        remote.request(rtloop::live::RemoteCommand::Rearm);
    });
    let summary = runtime.run(rtloop::motion::Motion::from_config(&config)).unwrap();
    operator.join().unwrap();
    let live = summary.live.expect("a live summary");
    assert!(live.publishers[0].cycles > 1000, "{:?}", live);
    assert_eq!(live.remote_commands, 2);
    assert!(summary.events.iter().any(|e| e.kind == "remote_zero_velocity"), "{:?}", summary.events);
    assert_eq!(ALLOCATIONS.load(Ordering::SeqCst), 0, "the real-time section allocated while publishing");
}

#[test]
fn a_stopped_run_with_its_shutdown_cycle_never_allocates() {
    let path = std::env::temp_dir().join(format!("rtloop-noalloc-stop-{}.tlog", std::process::id()));
    let config = RunConfig { rate_hz: 2000.0, duration_s: 30.0, ..RunConfig::default() };
    let (allocations, summary) = run_config(config, Some(path.clone()), Some(std::time::Duration::from_millis(600)));
    let _ = std::fs::remove_file(&path);
    assert!(summary.interrupted, "stopped");
    assert!((2..=4).contains(&summary.shutdown_cycles), "{}", summary.shutdown_cycles);
    assert!(summary.cycles > 100, "{} cycles", summary.cycles);
    assert_eq!(allocations, 0, "the stopped run (waits, shutdown cycle, read-back) allocated");
}

#[test]
fn the_sliced_waits_of_a_slow_run_never_allocate() {
    // 5 Hz: 200 ms periods, slept in 50 ms slices, then the wait for the end of the duration,
    // with a control thread.
    let mut config = RunConfig { rate_hz: 5.0, duration_s: 0.9, ..RunConfig::default() };
    config.realtime.control_thread = true;
    config.gains.watchdog_timeout_s = 1.0;
    let (allocations, summary) = run_config(config, None, None);
    assert_eq!(summary.cycles + summary.skipped_periods, 5, "periods at 0, 0.2 … 0.8 s");
    assert!(!summary.interrupted);
    assert_eq!(allocations, 0, "the sliced waits allocated");
}

#[test]
fn the_agent_spine_never_allocates_while_it_follows_an_agent() {
    use rtloop::agent::{AgentOptions, AgentSpine};
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = format!("noalloc{}", std::process::id());
    let robot = rtloop::RobotSpec::default_quadruped();
    let servos: Vec<(u8, u8)> = robot.buses.iter().flat_map(|b| b.servos.iter().map(move |&id| (id, b.bus))).collect();
    let (spine, figures, _) = AgentSpine::create(AgentOptions::new(&name), &servos, 1000.0).unwrap();
    // An agent on another thread: arms, then holds every joint, with a burst of NaN
    // velocities (a NaN position is moteus' "hold here"; a NaN velocity is refused) so the
    // refusal path runs too.
    let agent = support::hold_agent(name.clone(), |_, s, cycle| {
        if (300..400).contains(&cycle) {
            s.velocity = f64::NAN;
        }
    });
    ALLOCATIONS.store(0, Ordering::SeqCst);
    let runtime = rtloop::Runtime::new().duration_s(1.0).on_realtime_section(rtloop_testkit::start_counting, || {
        ALLOCATIONS.store(rtloop_testkit::stop_counting(), Ordering::SeqCst)
    });
    let summary = runtime.run(spine).unwrap();
    agent.join().unwrap();
    let f = figures.summary();
    assert!(f.commands_applied > 300 && f.refused > 0, "{f:?}");
    // The refusals' causes were recorded on the cycle thread without allocating, and the
    // spine's summarizer put them in the run's summary.
    let a = summary.agent.as_ref().expect("the agent spine completes the summary");
    assert_eq!(
        a.refusal_causes.iter().map(|c| (c.kind, c.field)).collect::<Vec<_>>(),
        [("non_finite", Some("velocity"))]
    );
    assert_eq!(a.refusal_causes[0].count, f.refused);
    assert!(summary.problems.iter().any(|p| p.contains("velocity is NaN (")), "{:?}", summary.problems);
    assert!(summary.cycles > 500, "{}", summary.cycles);
    assert_eq!(ALLOCATIONS.load(Ordering::SeqCst), 0, "the spine allocated on the cycle thread");
}

/// With physics, the spine also publishes the body's whole pose (MuJoCo's `qpos`, agent
/// protocol 4) every cycle: copied from the simulated robot into the state on the cycle
/// thread, and carried to a control thread in its fixed-size message, without allocating.
#[cfg(feature = "physics")]
#[test]
fn the_agent_spine_publishes_the_body_pose_without_allocating() {
    use rtloop::agent::{AgentOptions, AgentSpine};
    for control_thread in [false, true] {
        let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let name = format!("noallocpose{}{}", std::process::id(), u8::from(control_thread));
        let robot = rtloop::RobotSpec::default_quadruped();
        let servos: Vec<(u8, u8)> =
            robot.buses.iter().flat_map(|b| b.servos.iter().map(move |&id| (id, b.bus))).collect();
        let (spine, _, _) = AgentSpine::create(AgentOptions::new(&name), &servos, 1000.0).unwrap();
        // The agent: holds every servo where it is (a NaN position) and keeps the last pose.
        let agent = std::thread::spawn(move || {
            let mut a = loop {
                match rtloop_agent::Agent::attach(&name) {
                    Ok(a) => break a,
                    Err(e) if e.is_retryable() => std::thread::sleep(std::time::Duration::from_millis(2)),
                    Err(e) => panic!("{e}"),
                }
            };
            let mut last: Option<(u64, rtloop_agent::PoseBlock, rtloop_agent::layout::BodyBlock)> = None;
            while a.spine_gone().is_none() {
                let Ok(state) = a.read_state().copied() else { continue };
                if state.status == rtloop_agent::layout::status::NONE || last.is_some_and(|(c, ..)| c == state.cycle) {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    continue;
                }
                last = Some((state.cycle, state.pose, state.body));
                a.rearm_if_needed();
                let c = a.command_mut();
                c.for_cycle = state.cycle;
                for s in &mut c.servos[..state.servo_count as usize] {
                    *s = rtloop_agent::RawServoCommand::QUERY;
                    s.kind = rtloop_agent::layout::kind::POSITION;
                    s.present = rtloop_agent::layout::field::POSITION;
                    s.position = f64::NAN;
                }
                a.send();
            }
            last
        });
        ALLOCATIONS.store(0, Ordering::SeqCst);
        let runtime = rtloop::Runtime::new()
            .physics(rtloop::physics::PhysicsConfig::default())
            .control_thread(control_thread)
            .duration_s(1.0)
            .on_realtime_section(rtloop_testkit::start_counting, || {
                ALLOCATIONS.store(rtloop_testkit::stop_counting(), Ordering::SeqCst)
            });
        let summary = runtime.run(spine).unwrap();
        let (_, pose, body) = agent.join().unwrap().expect("the agent read states");
        assert!(summary.cycles > 500, "{}", summary.cycles);
        // The built-in quadruped: a free base (position, quaternion) and 12 hinges.
        assert_eq!(pose.nq, 19, "control thread {control_thread}: {pose:?}");
        assert!((pose.qpos[2] - body.height_m).abs() < 1e-6, "{pose:?} vs {body:?}");
        assert!(pose.qpos[19..].iter().all(|q| q.is_nan()));
        assert_eq!(ALLOCATIONS.load(Ordering::SeqCst), 0, "control thread {control_thread}: the spine allocated");
    }
}
