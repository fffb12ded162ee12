//! Why a run could not start: [`RunError`].

use std::path::PathBuf;

/// Why a run could not start (or its log could not be closed): its `Display` is the one
/// sentence saying what is wrong and how to fix it (what `rtloop run` prints). A run that
/// started and lost servos is not an error: see [`RunSummary::problems`](crate::summary::RunSummary::problems).
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError {
    /// A setting is wrong (out of range, unknown, not parseable): the sentence names it.
    Config(crate::config::ConfigError),
    /// A word of `[realtime]` (`policy`, `overrun`) that is not one of its words.
    RealtimeWord {
        /// The key, e.g. `realtime.policy`.
        key: &'static str,
        /// The word and the words it takes.
        source: rtloop_rt::UnknownName,
    },
    /// A simulated fault rate that is not a probability.
    FaultRate(rtloop_sim::NotAProbability),
    /// The configuration file cannot be read.
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// What reading it said.
        error: std::io::Error,
    },
    /// A configuration file holds a wrong setting.
    InFile {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        error: Box<RunError>,
    },
    /// `lockstep` was asked for on a robot with real buses.
    LockstepOnRealBuses,
    /// More servos than a run drives ([`crate::controller::MAX_SERVOS`]).
    TooManyServos {
        /// Servos configured.
        configured: usize,
    },
    /// `strict` made a warning an error (the model's cycle time exceeds the period, the
    /// system refused a real-time request): the sentence after `--strict: `.
    Strict(String),
    /// The real-time settings are invalid.
    Realtime(rtloop_rt::setup::RtError),
    /// A bus cannot be opened, or the robot's buses and servos are wrong.
    Bus(crate::robot_spec::RobotSpecError),
    /// A live publisher cannot start (a taken port, an unreachable router).
    Live(crate::live::LiveError),
    /// The telemetry log cannot be created.
    CreateLog {
        /// The file.
        path: PathBuf,
        /// What creating it said.
        error: rtloop_tlog::format::TlogError,
    },
    /// The telemetry log failed (registering its records, starting or finishing its writer).
    Log {
        /// The file.
        path: PathBuf,
        /// What failed.
        error: rtloop_tlog::format::TlogError,
    },
    /// The telemetry thread of the live publishers failed.
    LiveTelemetry(rtloop_tlog::format::TlogError),
    /// The cycle thread could not be started.
    CycleThreadStart(std::io::Error),
    /// The cycle thread ended before it started its loop.
    CycleThreadEnded,
    /// The cycle thread panicked.
    CycleThreadPanicked,
    /// The cycle thread stopped without a result.
    CycleThreadStopped,
    /// The agent spine could not be set up (`rtloop run --agent`).
    Agent(crate::agent::AgentError),
    /// The physics could not start: the model, its map, or the coupling.
    Physics(crate::physics::PhysicsStartError),
    /// The process may not open as many files as the run needs (`ulimit -n`).
    OpenFiles(rtloop_rt::setup::OpenFilesError),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Config(e) => write!(f, "{e}"),
            RunError::RealtimeWord { key, source } => write!(f, "{key}: {source}"),
            RunError::FaultRate(e) => write!(f, "{e}"),
            RunError::Bus(e) => write!(f, "{e}"),
            RunError::Live(e) => write!(f, "{e}"),
            RunError::ReadConfig { path, error } => write!(f, "cannot read the config {}: {error}", path.display()),
            RunError::InFile { path, error } => write!(f, "{}: {error}", path.display()),
            RunError::LockstepOnRealBuses => f.write_str(
                "lockstep runs only on simulated buses (its time is simulated): drop --lockstep, or use sim buses",
            ),
            RunError::TooManyServos { configured } => {
                write!(f, "{configured} servos configured; rtloop run drives at most {}", crate::controller::MAX_SERVOS)
            }
            RunError::Strict(s) => write!(f, "--strict: {s}"),
            RunError::Realtime(e) => write!(f, "{e}"),
            RunError::CreateLog { path, error } => write!(f, "cannot create the log {}: {error}", path.display()),
            RunError::Log { path, error } => write!(f, "log {}: {error}", path.display()),
            RunError::LiveTelemetry(s) => write!(f, "live telemetry: {s}"),
            RunError::CycleThreadStart(e) => write!(f, "cannot start the cycle thread: {e}"),
            RunError::CycleThreadEnded => f.write_str("the cycle thread ended before it started"),
            RunError::CycleThreadPanicked => f.write_str("the cycle thread panicked"),
            RunError::CycleThreadStopped => f.write_str("the cycle thread stopped"),
            RunError::Agent(e) => write!(f, "{e}"),
            RunError::Physics(e) => write!(f, "{e}"),
            RunError::OpenFiles(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::ReadConfig { error, .. } | RunError::CycleThreadStart(error) => Some(error),
            RunError::InFile { error, .. } => Some(error.as_ref()),
            RunError::Realtime(e) => Some(e),
            RunError::Agent(e) => Some(e),
            RunError::Config(e) => Some(e),
            RunError::RealtimeWord { source, .. } => Some(source),
            RunError::FaultRate(e) => Some(e),
            RunError::Bus(e) => Some(e),
            RunError::Live(e) => Some(e),
            RunError::Physics(e) => Some(e),
            RunError::OpenFiles(e) => Some(e),
            RunError::CreateLog { error, .. } | RunError::Log { error, .. } | RunError::LiveTelemetry(error) => {
                Some(error)
            }
            _ => None,
        }
    }
}
