//! What a controller costs the cycle, for the 12 servos of the simulated quadruped.
//!
//! 1. In the loop: the simulated robot with no wire time (`sim.wire_time = false`, so the
//!    figures are the host's work, not the bus's) at 5 kHz for 2 s, with a controller that
//!    writes nothing (every servo only queried), with the `stand` example and with the demo
//!    motion, each wrapped in a controller that times its `cycle` calls (two clock reads).
//!    Beside it, the mean cycle (the bus exchange) of the same run. Median of three runs,
//!    interleaved. (The cycle thread's whole CPU time per cycle was tried too: it is
//!    dominated by the in-process simulator and varies by ±10 µs from run to run, far more
//!    than any controller here costs.)
//! 2. The call alone: what the runtime does around `Controller::cycle` each cycle (build the
//!    `State`, wrap the commands in an `Output`, call `cycle`, copy the commands out) timed
//!    with `Instant` over 10⁶ iterations on a prepared state of 12 servos.
//!
//! `cargo bench -p rtloop --bench controller` (about 25 s).

#[allow(dead_code)]
#[path = "../examples/stand.rs"]
mod stand;

#[allow(dead_code)]
#[path = "../examples/imu_level.rs"]
mod imu_level;

use rtloop::config::SimConfig;
use rtloop::controller::CycleFigures;
use rtloop::motion::Motion;
use rtloop::{Controller, Failure, Flow, Output, Runtime, ServoCommand, ServoStatus, State};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

const SERVOS: usize = 12;
const RATE_HZ: f64 = 5000.0;
const SECONDS: f64 = 2.0;
const CALLS: u64 = 1_000_000;

/// Writes nothing: every servo is only queried.
struct QueryOnly;

impl Controller for QueryOnly {
    type Telemetry = ();
    fn cycle(&mut self, _: &State<'_>, _: &mut Output<'_, ()>) -> Result<Flow, Failure> {
        Ok(Flow::Continue)
    }
}

/// Times every `cycle` call of the controller it wraps (two clock reads per call, no
/// allocation); `stop` stores the mean, ns.
struct Timed<C> {
    inner: C,
    total_ns: u64,
    calls: u64,
    mean_ns: Arc<AtomicU64>,
}

impl<C: Controller> Controller for Timed<C> {
    type Telemetry = C::Telemetry;
    const TELEMETRY_RECORD: &'static str = C::TELEMETRY_RECORD;
    fn start(&mut self, state: &State<'_>) -> Result<(), Failure> {
        self.inner.start(state)
    }
    fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, C::Telemetry>) -> Result<Flow, Failure> {
        let t0 = Instant::now();
        let flow = self.inner.cycle(state, out);
        self.total_ns += t0.elapsed().as_nanos() as u64;
        self.calls += 1;
        flow
    }
    fn stop(&mut self, _: &State<'_>) {
        // The wrapped controller's `stop` only prints its report: left out of the table.
        self.mean_ns.store(self.total_ns * 1000 / self.calls.max(1), Ordering::SeqCst);
        // in ps
    }
}

/// One run of `controller` in the loop: (mean cycle µs — the bus exchange — and the mean µs
/// of its `cycle` calls, clock reads included).
fn in_the_loop<C: Controller + 'static>(controller: C) -> (f64, f64) {
    let mean_ps = Arc::new(AtomicU64::new(0));
    let timed = Timed { inner: controller, total_ns: 0, calls: 0, mean_ns: Arc::clone(&mean_ps) };
    let summary = Runtime::new()
        .rate_hz(RATE_HZ)
        .duration_s(SECONDS)
        .sim(SimConfig { wire_time: false, ..SimConfig::default() })
        .run(timed)
        .expect("the run starts");
    // Periods skipped after an overrun (a busy machine) cost nothing: the figures are per cycle run.
    assert!(summary.cycles > (RATE_HZ * SECONDS * 0.5) as u64, "{} cycles: the machine is too busy", summary.cycles);
    (summary.cycle_us.mean, mean_ps.load(Ordering::SeqCst) as f64 / 1e6)
}

/// µs per call of what the runtime does around `cycle`, on a prepared 12-servo state.
fn call_alone<C: Controller>(mut controller: C) -> f64 {
    let mut servos = [ServoStatus::default(); SERVOS];
    for (i, s) in servos.iter_mut().enumerate() {
        (s.id, s.bus, s.fresh, s.age_cycles, s.from_cycle) = (i as u8 + 1, i as u8 / 3 + 1, true, Some(0), Some(0));
        s.state.mode = Some(10);
        s.state.position = 0.01 * i as f64;
    }
    let imu = rtloop::controller::ImuSample { quaternion: [0.999, 0.02, -0.03, 0.01], ..Default::default() };
    let figures = CycleFigures::default();
    let (mut wanted, mut sent) = ([ServoCommand::Query; SERVOS], [ServoCommand::Query; SERVOS]);
    let mut telemetry = None;
    controller
        .start(&State {
            time_s: 0.0,
            cycle: 0,
            servos: &servos,
            imu: &imu,
            last_cycle: &figures,
            safe_mode: false,
            events: &[],
            body: None,
            qpos: &[],
            fallen: false,
            model_pose: rtloop::ModelPose::NotGiven,
        })
        .expect("the controllers measured here start on this state");
    let started = Instant::now();
    for k in 0..CALLS {
        let state = State {
            time_s: k as f64 * 2e-4, // 5 kHz: the stand-up ramp, then the hold
            cycle: k,
            servos: black_box(&servos),
            imu: &imu,
            last_cycle: &figures,
            safe_mode: false,
            events: &[],
            body: None,
            qpos: &[],
            fallen: false,
            model_pose: rtloop::ModelPose::NotGiven,
        };
        let mut out = Output::new(&mut wanted, &mut telemetry);
        let _ = black_box(controller.cycle(&state, &mut out));
        black_box(out.rearm_requested());
        sent.copy_from_slice(&wanted);
        black_box(&mut sent);
        telemetry = None;
    }
    started.elapsed().as_secs_f64() * 1e6 / CALLS as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let demo = || {
        let mut motion = Motion::default();
        motion.watchdog_timeout = Some(0.1);
        motion
    };
    let mut runs: [Vec<(f64, f64)>; 3] = Default::default();
    for _ in 0..3 {
        runs[0].push(in_the_loop(QueryOnly));
        runs[1].push(in_the_loop(stand::Stand::default()));
        runs[2].push(in_the_loop(demo()));
    }
    let cycle_us = runs.each_ref().map(|r| median(r.iter().map(|x| x.0).collect()));
    let in_loop_us = runs.each_ref().map(|r| median(r.iter().map(|x| x.1).collect()));
    let call_us = [
        call_alone(QueryOnly),
        call_alone(stand::Stand::default()),
        call_alone(demo()),
        call_alone(imu_level::Level::default()),
    ];
    println!();
    println!(
        "controller cost per cycle, {SERVOS} servos (simulated, no wire time, {RATE_HZ} Hz, median of 3 × {SECONDS} s)"
    );
    println!(
        "{:<28} {:>10} {:>14} {:>14} {:>14}",
        "controller", "cycle µs", "cycle() µs", "vs query-only", "plumbing+call"
    );
    let names = ["query only (writes nothing)", "stand example", "demo motion (Motion)", "imu_level example"];
    for (i, name) in names.iter().enumerate() {
        let loop_figures = match (cycle_us.get(i), in_loop_us.get(i)) {
            (Some(c), Some(t)) => format!("{c:>10.2} {t:>14.3} {:>+14.3}", t - in_loop_us[0]),
            _ => format!("{:>10} {:>14} {:>14}", "-", "-", "-"),
        };
        println!("{name:<28} {loop_figures} {:>14.3}", call_us[i]);
    }
    println!("cycle µs: the bus exchange alone; cycle() µs: the controller's calls timed in the loop (two");
    println!("clock reads included); plumbing+call: State + Output + cycle() + copying the commands, alone.");
    let worst = call_us.iter().copied().fold(0.0, f64::max);
    let verdict = if worst <= 1.0 { "met" } else { "NOT met" };
    println!("target: at most 1 µs per cycle beyond the cycle itself: {verdict} (worst {worst:.3} µs)");
}
