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
//! [`rtloop_rt::periodic::PeriodicLoop`]. Each iteration: the control law's commands (computed
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
use crate::controller::MAX_SERVOS;
use crate::controller::{
    Controller, CycleFigures, Failure, Flow, Output, Reported, ServoStatus, State, MAX_EVENTS_PER_CYCLE,
};
use crate::telemetry::{CycleLog, LogHandOff, LogMsg, LogSink};
use rtloop_io::safety::{EventKind, SafetyConfig, Supervisor};
use rtloop_io::{Clock, MonotonicClock, Robot, ServoCommand, ServoReply, ServoSpec};
use rtloop_rt::periodic::{OverrunPolicy, PeriodicLoop, PeriodicOptions, Tick, TimeSource};
use rtloop_rt::setup::{Policy, RtSettings};
use rtloop_simrobot::SimRobot;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod control;
mod cycle;
mod error;
mod fall;
mod options;
mod report;
mod setup;

pub use crate::summary::*;
use control::*;
use cycle::*;
pub use error::RunError;
use options::report_progress;
pub use options::{Hooks, Progress, RunOptions};
use report::*;
use setup::*;

/// File descriptors a run holds besides its live publishers: the standard streams, the
/// log, `/dev/cpu_dma_latency`, the buses (a pty, a socket or a spidev each), an agent
/// segment, the runtime's own — with room to spare.
pub const RUN_OPEN_FILES: u64 = 64;

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

/// Simulated time for a lockstep run: the loop's sleeps move the robot's virtual clock.
struct VirtualTime(rtloop_io::VirtualClock);

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
pub fn execute<C: Controller + 'static>(
    opts: &RunOptions,
    hooks: Hooks,
    controller: C,
) -> Result<RunSummary, RunError> {
    if opts.config.sim.lockstep {
        if !opts.config.robot().all_simulated() {
            return Err(RunError::LockstepOnRealBuses);
        }
        // Starts at 0: the log's stamps are simulated time, the same in every run.
        let clock = rtloop_io::VirtualClock::new(0);
        execute_on(opts, hooks, controller, clock.clone(), VirtualTime(clock))
    } else {
        // A simulated robot has no hardware whose answer a spin could catch sooner: its waits
        // sleep, so the default SCHED_FIFO cycle thread never holds a core while it waits.
        let clock =
            if opts.config.robot().all_simulated() { MonotonicClock { spin_ns: 0 } } else { MonotonicClock::default() };
        execute_on(opts, hooks, controller, clock, rtloop_rt::periodic::Monotonic)
    }
}
