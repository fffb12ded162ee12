//! What a controller costs the cycle, for the 12 servos of the simulated quadruped.
//!
//! 1. In the loop: the simulated robot with no wire time (`sim.wire_time = false`, so the
//!    figure is the host's work, not the bus's) at 5 kHz for 2 s, with a controller that
//!    writes nothing (every servo only queried), with the `stand` example and with the demo
//!    motion. The figure is the cycle thread's CPU time in its real-time section
//!    (`CLOCK_THREAD_CPUTIME_ID`, read by the real-time-section hooks) per cycle: sleeping
//!    costs nothing, everything the thread does per cycle — controller, supervisor, the four
//!    simulated buses, statistics — counts. Median of three runs, interleaved.
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
use rtloop::{Controller, Flow, Output, Runtime, ServoCommand, ServoStatus, State};
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
    fn cycle(&mut self, _: &State<'_>, _: &mut Output<'_, ()>) -> Flow {
        Flow::Continue
    }
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Cycle-thread CPU µs per cycle for one run of `controller`.
fn in_the_loop<C: Controller + 'static>(controller: C) -> f64 {
    let cpu = Arc::new(AtomicU64::new(0));
    let (enter, leave) = (Arc::clone(&cpu), Arc::clone(&cpu));
    let summary = Runtime::new()
        .rate_hz(RATE_HZ)
        .duration_s(SECONDS)
        .sim(SimConfig { wire_time: false, ..SimConfig::default() })
        .on_realtime_section(
            move || enter.store(thread_cpu_ns(), Ordering::SeqCst),
            move || {
                let start = leave.load(Ordering::SeqCst);
                leave.store(thread_cpu_ns() - start, Ordering::SeqCst);
            },
        )
        .run(controller)
        .expect("the run starts");
    assert!(summary.cycles > (RATE_HZ * SECONDS * 0.9) as u64, "{} cycles: the machine is too busy", summary.cycles);
    // The section also holds the 2-4 shutdown cycles; they are a rounding error here.
    cpu.load(Ordering::SeqCst) as f64 / 1e3 / summary.cycles as f64
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
    controller.start(&State {
        time_s: 0.0,
        cycle: 0,
        servos: &servos,
        imu: &imu,
        last_cycle: &figures,
        safe_mode: false,
        events: &[],
    });
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
        };
        let mut out = Output::new(&mut wanted, &mut telemetry);
        black_box(controller.cycle(&state, &mut out));
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
    let (mut query, mut stand, mut motion) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        query.push(in_the_loop(QueryOnly));
        stand.push(in_the_loop(stand::Stand::default()));
        motion.push(in_the_loop(demo()));
    }
    let loop_us = [median(query), median(stand), median(motion), f64::NAN];
    let call_us = [
        call_alone(QueryOnly),
        call_alone(stand::Stand::default()),
        call_alone(demo()),
        call_alone(imu_level::Level::default()),
    ];
    println!("controller cost per cycle, {SERVOS} servos (simulated, no wire time, {RATE_HZ} Hz, {SECONDS} s runs)");
    println!("{:<30} {:>16} {:>14} {:>16}", "controller", "loop CPU µs/cyc", "vs query-only", "call alone µs");
    let names = ["query only (writes nothing)", "stand example", "demo motion (Motion)", "imu_level example"];
    for (i, name) in names.iter().enumerate() {
        let (l, d) = if loop_us[i].is_nan() {
            ("-".to_string(), "-".to_string())
        } else {
            (format!("{:.2}", loop_us[i]), format!("{:+.2}", loop_us[i] - loop_us[0]))
        };
        println!("{name:<30} {l:>16} {d:>14} {:>16.3}", call_us[i]);
    }
    let worst_call = call_us.iter().copied().fold(0.0, f64::max);
    println!(
        "target: at most 1 µs per cycle for the controller call: {} (worst call {worst_call:.3} µs)",
        if worst_call <= 1.0 { "met" } else { "NOT met" }
    );
}
