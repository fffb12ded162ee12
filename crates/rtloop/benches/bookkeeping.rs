//! What the run loop itself costs each cycle, beside the bus exchange: the bookkeeping that
//! must stay small for `rtloop run --rate 20000` to keep its 50 µs period.
//!
//! 1. The periodic loop alone, on a hand-moved clock (no sleeping): `wait_next` +
//!    `end_cycle` + the overrun counter, as `run_loop` calls them each cycle. Budget:
//!    **at most 0.5 µs per cycle** (0.013 µs on the 2-core VM this was written on). Beside
//!    it, for scale, the same with `PeriodicLoop::stats()` read every cycle (percentiles over
//!    two histograms: 8.5 µs per call there), the mistake issue 22 found on the cycle thread.
//! 2. The whole run loop in lockstep (`sim.lockstep`, the 12-servo simulated quadruped at
//!    1 kHz, a controller that only queries): wall-clock µs per cycle, minus the same robot's
//!    `Robot::cycle` alone on a virtual clock. What remains is the loop's own work per cycle —
//!    periodic loop, supervisor, statuses, the controller call, progress counters. The buses
//!    keep their wire time (simulated, so it costs no wall-clock time): the loop's histograms
//!    then hold cycles of a few hundred µs, as a real run's do, and percentiles over them cost
//!    what they cost in a real run (over a histogram of zeros they would be nearly free).
//!    Budget: **at most 5 µs per cycle**; reading `stats()` every cycle again shows up here as
//!    +14 µs (2-core VM). Median of 5 interleaved runs of each.
//!
//! A benchmark, not a test: it prints the figures and whether each budget is met, on this
//! machine, now (a loaded machine inflates both).
//!
//! `cargo bench -p rtloop --bench bookkeeping` (a few seconds once built).

use rtloop::config::SimConfig;
use rtloop::io::{Clock, MonotonicClock, ServoCommand as IoCommand, ServoReply, VirtualClock};
use rtloop::{Controller, Failure, Flow, Output, RobotSpec, Runtime, State};
use rtloop_rt::periodic::{ManualClock, OverrunPolicy, PeriodicLoop, PeriodicOptions};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

/// Budget of part 1, µs per cycle.
const PERIODIC_BUDGET_US: f64 = 0.5;
/// Budget of part 2, µs per cycle.
const LOOP_BUDGET_US: f64 = 5.0;
/// Rate and simulated seconds of part 2's runs (20 000 cycles each).
const RATE_HZ: f64 = 1_000.0;
const LOCKSTEP_S: f64 = 20.0;
const ROUNDS: usize = 5;

/// Writes nothing: every servo is only queried.
struct QueryOnly;

impl Controller for QueryOnly {
    type Telemetry = ();
    fn cycle(&mut self, _: &State<'_>, _: &mut Output<'_, ()>) -> Result<Flow, Failure> {
        Ok(Flow::Continue)
    }
}

/// µs per cycle of the periodic loop's bookkeeping on a [`ManualClock`], reading the
/// overrun counter (`stats == false`) or the full statistics (`stats == true`) each cycle.
fn periodic(cycles: u64, stats: bool) -> f64 {
    let options = PeriodicOptions { busy_wait_ns: 0, overrun: OverrunPolicy::Skip, start_ns: Some(50_000) };
    let mut lp = PeriodicLoop::with_time_source(50_000, options, ManualClock::new(0));
    let overruns = AtomicU64::new(0);
    let wall = MonotonicClock::default();
    let t0 = wall.now_ns();
    for k in 0..cycles {
        let tick = lp.wait_next();
        black_box(tick);
        // A cycle's work: 20 to 39 µs, so the histograms fill as in a real run.
        lp.clock_mut().advance(20_000 + (k % 20) * 1_000);
        lp.end_cycle();
        let n = if stats { lp.stats().overruns } else { lp.overruns() };
        overruns.store(n, Ordering::Relaxed);
    }
    black_box(overruns.load(Ordering::Relaxed));
    (wall.now_ns() - t0) as f64 / 1000.0 / cycles as f64
}

/// µs per cycle of the whole run loop in lockstep.
fn lockstep_loop() -> f64 {
    let summary = Runtime::new()
        .rate_hz(RATE_HZ)
        .duration_s(LOCKSTEP_S)
        .sim(SimConfig { lockstep: true, ..SimConfig::default() })
        .run(QueryOnly)
        .expect("the run starts");
    assert_eq!(summary.cycles, (RATE_HZ * LOCKSTEP_S) as u64, "lockstep runs every period");
    summary.loop_wall_s * 1e6 / summary.cycles as f64
}

/// µs per cycle of the same robot's `Robot::cycle` alone (queries, simulated wire time), on
/// a virtual clock moved to the next period after each cycle as lockstep does.
fn robot_alone() -> f64 {
    let spec = RobotSpec::default_quadruped();
    let clock = VirtualClock::new(0);
    let config = rtloop::cycle_model::robot_config_for(&spec);
    let (mut robot, _sim) = spec.build(clock.clone(), config, Default::default(), Default::default()).expect("robot");
    let n = robot.servos().len();
    let commands = vec![IoCommand::Query; n];
    let mut replies = vec![ServoReply::default(); n];
    let mut imu = Default::default();
    let period_ns = (1e9 / RATE_HZ) as u64;
    let cycles = (RATE_HZ * LOCKSTEP_S) as u64;
    let wall = MonotonicClock::default();
    let t0 = wall.now_ns();
    for k in 1..=cycles {
        let report = robot.cycle(&commands, &mut replies, &mut imu);
        assert_eq!(report.missing, 0);
        clock.wait_until_ns(k * period_ns);
    }
    (wall.now_ns() - t0) as f64 / 1000.0 / cycles as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn verdict(value: f64, budget: f64) -> &'static str {
    if value <= budget {
        "met"
    } else {
        "NOT met"
    }
}

fn main() {
    let mut counter = Vec::new();
    let mut with_stats = Vec::new();
    let mut whole = Vec::new();
    let mut alone = Vec::new();
    for _ in 0..ROUNDS {
        counter.push(periodic(1_000_000, false));
        with_stats.push(periodic(2_000, true));
        whole.push(lockstep_loop());
        alone.push(robot_alone());
    }
    let (counter, with_stats) = (median(counter), median(with_stats));
    let (whole, alone) = (median(whole), median(alone));
    let own = whole - alone;
    println!();
    println!("run-loop bookkeeping per cycle (median of {ROUNDS} interleaved rounds)");
    println!("{:<58} {:>10}", "", "µs/cycle");
    println!("{:<58} {counter:>10.3}", "periodic loop: wait_next + end_cycle + overruns()");
    println!("{:<58} {with_stats:>10.3}", "  the same reading stats() every cycle (for scale)");
    println!("{:<58} {whole:>10.3}", "lockstep run loop, 12 sim servos at 1 kHz, query-only");
    println!("{:<58} {alone:>10.3}", "  Robot::cycle alone, same robot");
    println!("{:<58} {own:>10.3}", "  the loop's own work (difference)");
    println!(
        "budget: periodic loop at most {PERIODIC_BUDGET_US} µs: {}; the loop's own work at most {LOOP_BUDGET_US} µs: {}",
        verdict(counter, PERIODIC_BUDGET_US),
        verdict(own, LOOP_BUDGET_US)
    );
}
