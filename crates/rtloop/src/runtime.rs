//! [`Runtime`]: runs your [`Controller`] on a robot, in real time, and reports how it went.
//!
//! It owns everything but the control law: the robot's buses (simulated or real), the
//! real-time cycle thread (policy, priority, affinity, mlockall, absolute deadlines), the
//! safety supervisor (faults, silent servos, the safe mode, the shutdown cycle, the servos'
//! watchdog), the telemetry log and the figures. `rtloop run` is one user of it.
//!
//! Must never: start a run with a value it has not range-checked, or let a run end without
//! its shutdown cycle.

use crate::config::{FaultsConfig, RealtimeConfig, RunConfig, SafetyToml, SimConfig};
use crate::controller::Controller;
use crate::robot_spec::RobotSpec;
use crate::run::{Hooks, Notice, RunOptions, RunSummary};
pub use crate::run::{RunError, RUN_OPEN_FILES};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Runs a [`Controller`] on a robot at a fixed rate until the duration ends, a signal
/// (Ctrl-C, SIGTERM, SIGHUP) arrives, the [stop flag](Runtime::stop_flag) is set, or the
/// controller returns [`Flow::Stop`](crate::controller::Flow::Stop) — or fails
/// ([`Failure`](crate::controller::Failure): the safe stop, with its reason).
///
/// Built from defaults (the simulated quadruped: 12 servos on 4 CAN-FD buses with real wire
/// timing and an IMU, 1 kHz, 10 s), from a [`RunConfig`], or from the TOML file `rtloop run
/// --config` reads; every setting is range-checked when the run starts.
///
/// ```
/// use rtloop::{Runtime, RobotSpec};
///
/// let runtime = Runtime::new()
///     .robot(RobotSpec::default_quadruped())
///     .rate_hz(500.0)
///     .duration_s(0.1);
/// let summary = runtime.run(rtloop::motion::Motion::default())?;
/// assert_eq!(summary.status, rtloop::summary::Status::Ok);
/// # Ok::<(), rtloop::RunError>(())
/// ```
pub struct Runtime {
    options: RunOptions,
    hooks: Hooks,
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime::new()
    }
}

impl Runtime {
    /// The defaults: the built-in simulated quadruped, 1 kHz for 10 s, no log, the
    /// scheduling policy `auto` (SCHED_FIFO where the process may, see
    /// [`RealtimeConfig::policy`]), the safety policy `zero-velocity`.
    pub fn new() -> Self {
        Runtime::from_config(RunConfig::default())
    }

    /// Everything from a [`RunConfig`] (what `rtloop run --print-config` shows).
    pub fn from_config(config: RunConfig) -> Self {
        Runtime { options: RunOptions { config, progress: None, log: None }, hooks: Hooks::default() }
    }

    /// Everything from a run configuration's TOML text ([`RunConfig::from_toml`]: unknown
    /// keys and out-of-range values are errors). A file of `rtloop run --config` with its
    /// demonstration motion's `[motion]` is the program's: it reads it with
    /// [`RunConfig::from_toml_with`].
    pub fn from_toml(text: &str) -> Result<Self, RunError> {
        let config = RunConfig::from_toml(text).map_err(RunError::Config)?;
        config.validate().map_err(RunError::Config)?;
        Ok(Runtime::from_config(config))
    }

    /// [`from_toml`](Self::from_toml) on a file; the paths it holds (`[physics] model`) are
    /// relative to the file's folder ([`RunConfig::relative_to`]).
    pub fn from_toml_file(path: impl AsRef<std::path::Path>) -> Result<Self, RunError> {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).map_err(|error| RunError::ReadConfig { path: path.to_path_buf(), error })?;
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        let config = RunConfig::from_toml(&text)
            .map(|c| c.relative_to(dir))
            .map_err(|e| RunError::InFile { path: path.to_path_buf(), error: Box::new(RunError::Config(e)) })?;
        config
            .validate()
            .map_err(|e| RunError::InFile { path: path.to_path_buf(), error: Box::new(RunError::Config(e)) })?;
        Ok(Runtime::from_config(config))
    }

    /// The robot: its buses and servos ([`RobotSpec::default_quadruped`], a spec built from
    /// `--bus`/`--ids`-like flags with [`RobotSpec::from_flags`], or [`RobotSpec::from_toml`]).
    pub fn robot(mut self, robot: RobotSpec) -> Self {
        self.options.config.buses = robot.buses;
        self
    }

    /// The loop rate, Hz (0.1 … 100 000).
    pub fn rate_hz(mut self, rate_hz: f64) -> Self {
        self.options.config.rate_hz = rate_hz;
        self
    }

    /// How long to run, s (above 0, at most one year).
    pub fn duration_s(mut self, duration_s: f64) -> Self {
        self.options.config.duration_s = duration_s;
        self
    }

    /// The real-time settings of the cycle thread (policy, priority, CPUs, mlockall, busy
    /// wait, overrun policy, a control thread for the controller, `/dev/cpu_dma_latency`).
    pub fn realtime(mut self, realtime: RealtimeConfig) -> Self {
        self.options.config.realtime = realtime;
        self
    }

    /// Run the controller on its own thread rather than on the cycle thread: a slow cycle of
    /// the controller then costs it a cycle (its previous commands are reused, counted in
    /// [`RunSummary::control_late`]) instead of delaying the buses.
    pub fn control_thread(mut self, on: bool) -> Self {
        self.options.config.realtime.control_thread = on;
        self
    }

    /// The safety policy: what the healthy servos do when one faults or goes silent, after
    /// how many cycles a silent servo has failed, how the safe mode ends, and the mode the
    /// shutdown cycle commands.
    pub fn safety(mut self, safety: SafetyToml) -> Self {
        self.options.config.safety = safety;
        self
    }

    /// The watchdog timeout every position command carries, s (0.01 … 10; it cannot be
    /// switched off): a servo not commanded for this long stops by itself (mode 11).
    pub fn watchdog_timeout_s(mut self, seconds: f64) -> Self {
        self.options.config.gains.watchdog_timeout_s = seconds;
        self
    }

    /// Faults the simulated buses inject (dropped and corrupted frames, reply delays,
    /// overheating servos, the seed).
    pub fn faults(mut self, faults: FaultsConfig) -> Self {
        self.options.config.faults = faults;
        self
    }

    /// Simulated-bus physics (wire time, where the joints start, lockstep).
    pub fn sim(mut self, sim: SimConfig) -> Self {
        self.options.config.sim = sim;
        self
    }

    /// Lockstep (simulated buses only): simulated time advances by exactly one period per
    /// cycle, as fast as the controller allows, and the same run gives the same results on
    /// repeat (`rtloop run --lockstep`; [`SimConfig::lockstep`]).
    ///
    /// ```
    /// let summary = rtloop::Runtime::new().lockstep(true).duration_s(0.05).run(rtloop::motion::Motion::default())?;
    /// assert_eq!(summary.cycles, 50);
    /// # Ok::<(), rtloop::RunError>(())
    /// ```
    pub fn lockstep(mut self, on: bool) -> Self {
        self.options.config.sim.lockstep = on;
        self
    }

    /// A body under the simulated servos: MuJoCo physics, the built-in quadruped unless
    /// `physics.model` names another (`rtloop run --physics`, the run file's `[physics]`).
    ///
    /// ```
    /// use rtloop::physics::PhysicsConfig;
    /// use rtloop::{Runtime, RunError};
    ///
    /// // The built-in quadruped, lying on ground that slopes 8° nose up, stood up by the demo motion.
    /// let runtime = Runtime::new()
    ///     .physics(PhysicsConfig { ground_pitch_deg: 8.0, ..PhysicsConfig::default() })
    ///     .lockstep(true)
    ///     .duration_s(3.0);
    /// match runtime.run(rtloop::motion::Motion::default()) {
    ///     Ok(summary) => {
    ///         let body = summary.body.expect("a run with physics reports the body");
    ///         assert!(body.height_m > 0.28, "standing");
    ///         assert!(body.pitch_deg > 5.0, "nose up, as the slope: the IMU's sign");
    ///     }
    ///     // Built without the `physics` feature: one sentence says how to build it.
    ///     Err(RunError::Physics(e)) => assert!(e.to_string().starts_with("this rtloop was built without physics")),
    ///     Err(e) => panic!("{e}"),
    /// }
    /// ```
    ///
    /// The servos' joints are then the model's: they start in its pose (the built-in
    /// quadruped's keyframe `lying`, whatever [`SimConfig::start_position_rev`] says), the
    /// IMU reads its body, and [`RunSummary::body`] reports where the body ended. Every
    /// number is range-checked when the run starts; a build without the `physics` feature
    /// refuses the run in one sentence ([`RunError::Physics`]: "this rtloop was built without
    /// physics: …").
    pub fn physics(mut self, physics: crate::physics::PhysicsConfig) -> Self {
        self.options.config.physics = Some(physics);
        self
    }

    /// Push the body (with [`physics`](Self::physics)): an external force on it, as a
    /// fault injection (`rtloop run --push`, `[faults] push`). Set it after
    /// [`faults`](Self::faults), which replaces every fault, pushes included. Call it once per
    /// push: pushes that overlap add up, at most [`rtloop_sim::world::MAX_PUSHES`] per run.
    ///
    /// ```
    /// use rtloop::physics::{PhysicsConfig, PushSpec};
    /// use rtloop::{Runtime, RunError};
    ///
    /// // 40 N to the robot's left for 0.1 s, 2 s after the start: it sways, and stands on.
    /// let push = PushSpec { at_s: 2.0, force_n: [0.0, 40.0, 0.0], duration_s: 0.1 };
    /// let runtime = Runtime::new().physics(PhysicsConfig::default()).push(push).lockstep(true).duration_s(4.0);
    /// match runtime.run(rtloop::motion::Motion::default()) {
    ///     Ok(summary) => assert!(summary.body.expect("the body").height_m > 0.28, "still standing"),
    ///     Err(RunError::Physics(e)) => assert!(e.to_string().starts_with("this rtloop was built without physics")),
    ///     Err(e) => panic!("{e}"),
    /// }
    /// ```
    ///
    /// Forces are in the world frame (+x forward, +y left, +z up), N, at most
    /// [`MAX_PUSH_N`](crate::physics::MAX_PUSH_N) per axis; the run refuses a push without
    /// physics in one sentence.
    pub fn push(mut self, push: crate::physics::PushSpec) -> Self {
        // Checked with every other fault when the run starts.
        self.options.config.faults.push.push(push);
        self
    }

    /// Record every cycle (and the controller's telemetry) to this TLOG0003 file; it must
    /// not exist yet.
    pub fn log(mut self, path: impl Into<PathBuf>) -> Self {
        self.options.log = Some(path.into());
        self
    }

    /// Live telemetry and the operator's commands: a Foxglove server, zenoh, the robot's name
    /// (what `rtloop run --foxglove/--zenoh/--name` set; see [`LiveConfig`](crate::config::LiveConfig)).
    pub fn live(mut self, live: crate::config::LiveConfig) -> Self {
        self.options.config.live = live;
        self
    }

    /// Publish the loop's cycles (every `every`-th, by index) and all its events to a
    /// publisher of your own, off the real-time thread ([`crate::live`]): a view, a bridge to
    /// another middleware, a recorder.
    pub fn publish(mut self, sink: impl crate::live::LiveSink + 'static, every: u32) -> Self {
        self.hooks.publishers.push(crate::live::Publisher::new(Box::new(sink), every));
        self
    }

    /// The operator's commands (stop, hold at zero velocity, re-arm), settable from any thread;
    /// zenoh's command key uses the same ([`crate::live::RemoteControl`]).
    pub fn remote_control(&self) -> Arc<crate::live::RemoteControl> {
        Arc::clone(&self.hooks.remote)
    }

    /// Hand the [notice callback](Self::on_notice) the loop's progress
    /// ([`Notice::Progress`]) this often while it runs (`rtloop run` prints it on stderr).
    pub fn progress_every(mut self, every: std::time::Duration) -> Self {
        self.options.progress = Some(every);
        self
    }

    /// Call `notice` with what the run has to say while it runs: warnings before the loop
    /// starts, progress (see [`progress_every`](Self::progress_every)). Called on the thread
    /// that runs [`run`](Self::run), never on the cycle thread; without it, the run says
    /// nothing while it runs (its warnings are in the summary all the same).
    pub fn on_notice(mut self, notice: impl FnMut(&Notice) + Send + 'static) -> Self {
        self.hooks.notice = Box::new(notice);
        self
    }

    /// The configuration so far.
    pub fn config(&self) -> &RunConfig {
        &self.options.config
    }

    /// The configuration, to change any setting the builder has no method for.
    pub fn config_mut(&mut self) -> &mut RunConfig {
        &mut self.options.config
    }

    /// A flag that ends the run (with its shutdown cycle) when set, from any thread, as
    /// Ctrl-C does.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.hooks.stop)
    }

    /// Functions called on the cycle thread right before its real-time section and right
    /// after it (for instrumentation: the tests count allocations between the two).
    pub fn on_realtime_section(mut self, enter: impl Fn() + Send + 'static, leave: impl Fn() + Send + 'static) -> Self {
        self.hooks.enter_rt = Box::new(enter);
        self.hooks.leave_rt = Box::new(leave);
        self
    }

    /// Run `controller` and return the summary `rtloop run` prints. Warnings (a refused
    /// real-time request, a rate the model says the buses cannot keep) go to the
    /// [notice callback](Self::on_notice) as they happen and are in [`RunSummary::warnings`].
    ///
    /// The control law's [`Controller::summarizer`], if it has one, completes the summary.
    pub fn run<C: Controller + 'static>(self, controller: C) -> Result<RunSummary, RunError> {
        let summarizer = controller.summarizer();
        let mut summary = crate::run::execute(&self.options, self.hooks, controller)?;
        if let Some(complete) = summarizer {
            complete(&mut summary);
        }
        Ok(summary)
    }
}
