//! The run configuration: robot, rate, gains, safety policy, real-time settings and
//! simulator fault injection, as one TOML file (`rtloop run --config FILE`), with every
//! field optional and the built-in robot as the default (`rtloop run --print-config`).
//!
//! A program keeps its control law's own settings in the same file, as a table of its own
//! ([`RunConfig::from_toml_with`], [`RunConfig::to_toml_with`]): `rtloop run`'s `[motion]`
//! (the demonstration motion's) is one.
//!
//! Must never: accept a value it would have to guess about. Unknown keys (in every table,
//! `[[bus]]` included), out-of-range numbers (NaN and infinities included) and malformed
//! fault specs are errors: one sentence that names the key (or the flag) and the valid range.
//! The ranges are chosen so that no unit conversion downstream can overflow, and so that no
//! value can leave a servo without its watchdog.
//!
//! | key | range |
//! |---|---|
//! | `rate_hz` | 0.1 … 100 000 Hz |
//! | `duration_s` | above 0, at most one year (31 536 000 s) |
//! | `gains.kp_scale`, `gains.kd_scale` | 0 … 1 |
//! | `gains.maximum_torque` | above 0, at most 300 N·m (what an int16 command register carries is 327.67) |
//! | `gains.watchdog_timeout_s` | 0.01 … 10 s (0.1 s by default; always sent) |
//! | `safety.missing_limit` | 1 … 1 000 000 cycles (no "never": `on_fault = "ignore"` records without acting) |
//! | `safety.recovery_cycles` | 1 … 1 000 000 cycles |
//! | `safety.fall_tilt_deg` | 10 … 180 ° (60 by default) |
//! | `safety.fall_height_m` | 0 (no height check, the default) … 100 m |
//! | `realtime.busy_wait_us` | 0 … one period |
//! | `realtime.priority` | 1 … 99 with fifo or rr, 0 with other or deadline, 0 … 99 with auto (0: [`AUTO_PRIORITY`]) |
//! | `faults.drop_rate`, `faults.corrupt_rate` | 0 … 1 |
//! | `faults.reply_delay_us` | 0 … 50 000 µs (half the late-reply window) |
//! | `faults.overheat` times | 0 … 31 536 000 s |
//! | `faults.seed` | 0 … 9 223 372 036 854 775 807, or absent (random, printed in the summary) |
//! | `sim.start_position_rev` | −1 … 1 rev |
//! | `servo_bus_map` keys, ids | bus numbers 1 … 255 (1 … 5 when `transport` is a pi3hat, the default); ids 1 … 127 |

use crate::robot_spec::{BusSpec, RobotSpec, RobotSpecError};
use serde::{Deserialize, Serialize};

/// Everything `rtloop run` can be told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// Loop rate, Hz.
    pub rate_hz: f64,
    /// Seconds to run.
    pub duration_s: f64,
    /// The robot's buses (the built-in simulated quadruped by default).
    #[serde(rename = "bus")]
    pub buses: Vec<BusSpec>,
    /// What every position command carries.
    pub gains: GainsConfig,
    /// Graceful failure.
    pub safety: SafetyToml,
    /// Thread and loop settings.
    pub realtime: RealtimeConfig,
    /// Faults the simulator injects (simulated buses only).
    pub faults: FaultsConfig,
    /// Simulated-bus physics.
    pub sim: SimConfig,
    /// A body under the simulated servos (MuJoCo): `[physics]`, or `--physics`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physics: Option<crate::physics::PhysicsConfig>,
    /// Live telemetry (Foxglove, zenoh) and remote commands.
    pub live: LiveConfig,
    /// The transport of every bus of `servo_bus_map` (a bus address; `pi3hat` when absent).
    /// Read from a file only: [`RunConfig::from_toml`] turns the map into `bus` tables.
    #[serde(skip_serializing)]
    pub transport: Option<String>,
    /// The buses as bus number → servo ids, the moteus pi3hat transport's `servo_bus_map`:
    /// the alternative to `[[bus]]` tables. Read from a file only, like `transport`.
    #[serde(skip_serializing)]
    pub servo_bus_map: Option<crate::robot_spec::ServoBusMap>,
}

/// Simulated-bus physics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Frames take their real CAN-FD wire time and servos their turnaround (true), or no
    /// time at all (false: measures the host, not the bus).
    pub wire_time: bool,
    /// Where every simulated joint is at power-up, rev (0): real robots rarely start at
    /// zero, and the control law must start from where the joints are.
    pub start_position_rev: f64,
    /// Lockstep: simulated time advances by exactly one period per cycle, as fast as the
    /// controller (or an agent) allows, instead of following the wall clock. The same
    /// inputs give the same run and the same log. Simulated buses only.
    pub lockstep: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig { wire_time: true, start_position_rev: 0.0, lockstep: false }
    }
}

pub use crate::live::{LiveConfig, DEFAULT_LIVE_EVERY};

/// A configuration value as a message names it: `key = value` for a file, `--flag value`
/// for a value that came from a flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The key in the file, e.g. `rate_hz`.
    pub key: &'static str,
    /// The flag that set it, when the message names flags, e.g. `--rate`.
    pub flag: Option<&'static str>,
    /// The value, as the message shows it.
    pub value: String,
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.flag {
            Some(flag) => write!(f, "{flag} {}", self.value),
            None => write!(f, "{} = {}", self.key, self.value),
        }
    }
}

/// Why a run configuration (a file, or flags) was refused. The Display is the one sentence
/// the user sees; the variants carry the key, the value and the range.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A value outside its range; `give` says what to give.
    #[error("{setting} is out of range: give {give}")]
    OutOfRange {
        /// The value.
        setting: Setting,
        /// What to give instead.
        give: String,
    },
    /// A fault rate that is not a probability.
    #[error("{setting} is not a probability: give a number from 0 to 1")]
    NotAProbability {
        /// The value.
        setting: Setting,
    },
    /// A priority the policy does not take.
    #[error(
        "{setting} is out of range for policy {policy}: give 1 to 99 with fifo or rr, 0 to 99 with auto (0: {AUTO_PRIORITY}), 0 with other or deadline"
    )]
    PriorityForPolicy {
        /// The priority.
        setting: Setting,
        /// `realtime.policy` as given.
        policy: String,
    },
    /// A value of `name` (a key, or its flag) that is not one of its words.
    #[error("{name}: {source}")]
    Value {
        /// The key or flag.
        name: String,
        /// What is wrong with it.
        source: Box<ConfigError>,
    },
    /// A word that is not one of a setting's: `'GIVEN' is not a WHAT: give EXPECTED`.
    #[error("'{given}' is not a {what}: give {expected}")]
    UnknownWord {
        /// What the word names, e.g. `recovery policy`.
        what: &'static str,
        /// The word given.
        given: String,
        /// The words it takes.
        expected: &'static str,
    },
    /// `safety.on_fault` is not a fault policy.
    #[error(transparent)]
    FaultPolicy(#[from] rtloop_io::safety::UnknownFaultPolicy),
    /// `realtime.policy` or `realtime.overrun` is not one of its names.
    #[error(transparent)]
    Name(#[from] rtloop_rt::UnknownName),
    /// Not a robot name.
    #[error("{name:?} is not a robot name: give 1 to 64 letters, digits, '-' or '_' (it becomes part of zenoh keys)")]
    RobotName {
        /// The name given.
        name: String,
    },
    /// `live.foxglove` is not an address to serve on.
    #[error(transparent)]
    Address(#[from] crate::live::address::AddressError),
    /// A fault injection (`--fault`, `[faults] overheat`) that does not parse.
    #[error("fault injection {text:?} (--fault or [faults] overheat): {problem}")]
    Overheat {
        /// The injection as given.
        text: String,
        /// What is wrong with it.
        problem: OverheatProblem,
    },
    /// A fault injection for a servo that is not simulated.
    #[error("fault injection names servo {id}, which is not on a simulated bus")]
    OverheatNotSimulated {
        /// The servo.
        id: u8,
    },
    /// The robot part (buses, servos) is wrong, or the file does not parse.
    #[error(transparent)]
    Robot(#[from] RobotSpecError),
    /// `[physics]` or a push is wrong.
    #[error(transparent)]
    Physics(#[from] crate::physics::PhysicsConfigError),
}

/// What is wrong with an `ID@SECONDS` fault injection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OverheatProblem {
    /// No `@`.
    #[error("expected ID@SECONDS, e.g. 5@1 (servo 5 overheats after 1 s)")]
    Form,
    /// The id part is not a servo id.
    #[error("'{0}' is not a servo id (1-127)")]
    Id(String),
    /// The time part is not a time within a year.
    #[error("'{0}' is not a time in seconds from 0 to {MAX_DURATION_S} (one year)")]
    Time(String),
}

/// Check a robot name (`live.name`, `--name`).
pub fn check_robot_name(name: &str) -> Result<(), ConfigError> {
    let ok = (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::RobotName { name: name.to_string() })
    }
}

/// Per-command gains and limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GainsConfig {
    /// Scale of the servo's kp.
    pub kp_scale: f64,
    /// Scale of the servo's kd.
    pub kd_scale: f64,
    /// Torque limit, N·m.
    pub maximum_torque: f64,
    /// Watchdog timeout sent with every command (register 0x027), s, 0.01 to
    /// [`MAX_WATCHDOG_TIMEOUT_S`], 0.1 by default. Always sent: the servo's own default may have
    /// been configured off, and moteus reads 0 as "the default" and NaN as "no watchdog at
    /// all", so neither is accepted.
    pub watchdog_timeout_s: f64,
}

/// Safety policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SafetyToml {
    /// stop | zero-velocity | ignore.
    pub on_fault: String,
    /// A servo whose newest answer is this many cycles old has failed (1 … 1 000 000; a
    /// servo that stops answering is always noticed: `on_fault = "ignore"` only records it).
    pub missing_limit: u32,
    /// Mode commanded by the last cycle on Ctrl-C / SIGTERM: stop | zero-velocity | brake.
    pub shutdown: String,
    /// When the safe mode ends: latched (until the controller re-arms; `rtloop run` never
    /// does) | auto (after `recovery_cycles` good cycles in a row).
    pub recovery: String,
    /// Consecutive cycles with every servo answering, unfaulted and not timed out, after
    /// which `recovery = "auto"` ends the safe mode.
    pub recovery_cycles: u32,
    /// A simulated body with a free base has fallen when it tilts this far from upright,
    /// degrees ([`FALL_TILT_RANGE_DEG`], [`DEFAULT_FALL_TILT_DEG`] by default). Not checked on
    /// a base fixed to the world (an arm).
    pub fall_tilt_deg: f64,
    /// … or when its base, having been above this height, comes down below it, m (0, the
    /// default: height is not checked, only the tilt; at most [`MAX_FALL_HEIGHT_M`]).
    pub fall_height_m: f64,
}

/// The tilt from upright at which a free-based body has fallen unless told otherwise, degrees:
/// past 60° a legged robot's feet no longer carry it (a robot on its side is at 90°, on its
/// back at 180°), while walking, a push or a slope tilts it far less.
pub const DEFAULT_FALL_TILT_DEG: f64 = 60.0;

/// `[safety] fall_tilt_deg`'s range, degrees: at least 10 (a body always sways a little), at
/// most 180 (upside down; the check cannot be switched off, only made to ask for that).
pub const FALL_TILT_RANGE_DEG: (f64, f64) = (10.0, 180.0);

/// The largest `[safety] fall_height_m`, m.
pub const MAX_FALL_HEIGHT_M: f64 = 100.0;

/// Real-time settings of the cycle thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RealtimeConfig {
    /// auto | other | fifo | rr | deadline. `auto` (the default): SCHED_FIFO at `priority`
    /// ([`AUTO_PRIORITY`] when 0), memory locked and /dev/cpu_dma_latency held where the
    /// process may, else SCHED_OTHER with one warning; SCHED_OTHER in lockstep.
    pub policy: String,
    /// 1-99 for fifo/rr; 0-99 for auto (0: [`AUTO_PRIORITY`]).
    pub priority: i32,
    /// CPUs to pin the cycle thread to (empty: leave).
    pub cpus: Vec<usize>,
    /// mlockall(MCL_CURRENT | MCL_FUTURE). `auto` locks memory without it where the limits
    /// cannot make later allocations fail.
    pub mlock: bool,
    /// Spin for the last this-many µs before each deadline.
    pub busy_wait_us: u64,
    /// skip | catch-up.
    pub overrun: String,
    /// Turn every refused request into an error.
    pub strict: bool,
    /// Run the control law on its own thread, exchanging commands and state with the cycle
    /// thread through wait-free ring buffers.
    pub control_thread: bool,
    /// Hold /dev/cpu_dma_latency at 0 µs while the loop runs (as cyclictest does), so no CPU
    /// sleeps in a deep idle state: auto (with a real-time policy, or policy auto outside
    /// lockstep) | hold | off.
    pub cpu_dma_latency: String,
}

/// Simulator fault injection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultsConfig {
    /// `ID@SECONDS`: the servo heats up and faults.
    pub overheat: Vec<String>,
    /// Probability that a frame is lost on the wire.
    pub drop_rate: f64,
    /// Probability that a frame is bit-flipped on the wire (the receiver's CRC drops it).
    pub corrupt_rate: f64,
    /// Extra servo turnaround, µs.
    pub reply_delay_us: u64,
    /// Seed of the run's fault generators; each simulated bus derives its own from it and its
    /// bus number, so buses lose different frames. Absent: a random seed, printed in the
    /// summary (`injected.seed`) so the run can be repeated.
    pub seed: Option<u64>,
    /// Pushes on the body (physics only), N in the world frame; in a file, each as
    /// `SECONDS:FX,FY,FZ[:DURATION]` (what `--push` takes), read once, into the typed value.
    #[serde(with = "push_text")]
    pub push: Vec<crate::physics::PushSpec>,
}

/// `[faults] push` in a file: each push as the text `--push` takes,
/// `SECONDS:FX,FY,FZ[:DURATION]` ([`crate::physics::parse_push`]), read once into the typed
/// value; printed back so that it reads back as the same push.
mod push_text {
    use crate::physics::{parse_push, PushSpec};
    use serde::{Deserialize, Deserializer, Serializer};

    /// The text of `push`: a float's `Display` reads back as the same value.
    pub(super) fn text(push: &PushSpec) -> String {
        let PushSpec { at_s, force_n: [x, y, z], duration_s } = push;
        format!("{at_s}:{x},{y},{z}:{duration_s}")
    }

    pub(super) fn serialize<S: Serializer>(pushes: &[PushSpec], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(pushes.iter().map(text))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PushSpec>, D::Error> {
        let texts = Vec::<String>::deserialize(d)?;
        texts.iter().map(|t| parse_push(t).map_err(serde::de::Error::custom)).collect()
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            rate_hz: 1000.0,
            duration_s: 10.0,
            buses: RobotSpec::default_quadruped().buses,
            gains: GainsConfig::default(),
            safety: SafetyToml::default(),
            realtime: RealtimeConfig::default(),
            faults: FaultsConfig::default(),
            sim: SimConfig::default(),
            physics: None,
            live: LiveConfig::default(),
            transport: None,
            servo_bus_map: None,
        }
    }
}

impl Default for GainsConfig {
    fn default() -> Self {
        GainsConfig {
            kp_scale: 1.0,
            kd_scale: 1.0,
            maximum_torque: DEFAULT_MAXIMUM_TORQUE_NM,
            watchdog_timeout_s: DEFAULT_WATCHDOG_TIMEOUT_S,
        }
    }
}

impl Default for SafetyToml {
    fn default() -> Self {
        SafetyToml {
            on_fault: "zero-velocity".into(),
            missing_limit: 20,
            shutdown: "zero-velocity".into(),
            recovery: "latched".into(),
            recovery_cycles: 100,
            fall_tilt_deg: DEFAULT_FALL_TILT_DEG,
            fall_height_m: 0.0,
        }
    }
}

impl Default for RealtimeConfig {
    fn default() -> Self {
        RealtimeConfig {
            policy: "auto".into(),
            priority: 0,
            cpus: Vec::new(),
            mlock: false,
            busy_wait_us: 0,
            overrun: "skip".into(),
            strict: false,
            control_thread: false,
            cpu_dma_latency: "auto".into(),
        }
    }
}

impl Default for FaultsConfig {
    fn default() -> Self {
        FaultsConfig {
            overheat: Vec::new(),
            drop_rate: 0.0,
            corrupt_rate: 0.0,
            reply_delay_us: 0,
            seed: None,
            push: Vec::new(),
        }
    }
}

/// Loop rates `rtloop run` accepts, Hz: slower and a Ctrl-C or the duration would wait on a
/// period of minutes; faster and the period is shorter than one cycle of any real bus.
pub const RATE_HZ: (f64, f64) = (0.1, 100_000.0);

pub use crate::numbers::MAX_DURATION_S;

pub use crate::numbers::MIN_WATCHDOG_TIMEOUT_S;

/// The watchdog timeout `rtloop run` sends with every command unless told otherwise, s (the
/// moteus default, sent explicitly so that a servo configured without one still has one).
pub const DEFAULT_WATCHDOG_TIMEOUT_S: f64 = 0.1;

/// The torque limit of `[gains] maximum_torque` when none is given, N·m: enough for the
/// built-in quadruped with a body (`--physics`) to carry its 7.4 kg standing (4 N·m is not).
pub const DEFAULT_MAXIMUM_TORQUE_NM: f64 = 8.0;

/// The largest `[gains] maximum_torque`, N·m: big robots' joints (a Go2's knee gives 45 N·m,
/// an arm's shoulder 150) fit, and the commands' int16 register (0.01 N·m steps) carries it.
pub const MAX_MAXIMUM_TORQUE_NM: f64 = 300.0;

/// Longest watchdog timeout a command may carry, s: a host that dies leaves its servos
/// holding position at most this long before they latch mode 11.
pub use crate::numbers::MAX_WATCHDOG_TIMEOUT_S;

/// Longest injected reply delay, µs: half the robot's late-reply window (100 ms), within
/// which a late reply is always attributed to its own request (see `rtloop_io::robot`).
pub const MAX_REPLY_DELAY_US: u64 = 50_000;

/// Largest seed: TOML integers are signed 64-bit, so a printed seed always reads back.
pub const MAX_SEED: u64 = i64::MAX as u64;

/// One `--fault ID@SECONDS`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OverheatSpec {
    /// Servo id.
    pub id: u8,
    /// Seconds after the start of the motion (0 to [`MAX_DURATION_S`]).
    pub at_s: f64,
}

/// Parse `ID@SECONDS`.
pub fn parse_overheat(text: &str) -> Result<OverheatSpec, ConfigError> {
    let refused = |problem| ConfigError::Overheat { text: text.to_string(), problem };
    let (id, at) = text.split_once('@').ok_or_else(|| refused(OverheatProblem::Form))?;
    let id: u8 = id
        .trim()
        .parse()
        .ok()
        .filter(|i| (1..=127).contains(i))
        .ok_or_else(|| refused(OverheatProblem::Id(id.to_string())))?;
    let at_s: f64 = at
        .trim()
        .parse()
        .ok()
        .filter(|s: &f64| (0.0..=MAX_DURATION_S).contains(s))
        .ok_or_else(|| refused(OverheatProblem::Time(at.to_string())))?;
    Ok(OverheatSpec { id, at_s })
}

/// The command-line flag that sets a configuration key, for messages about flags.
pub fn flag_of(key: &str) -> Option<&'static str> {
    Some(match key {
        "rate_hz" => "--rate",
        "duration_s" => "--duration",
        "realtime.policy" => "--policy",
        "realtime.priority" => "--priority",
        "realtime.busy_wait_us" => "--busy-wait-us",
        "realtime.overrun" => "--overrun",
        "realtime.cpu_dma_latency" => "--cpu-dma-latency",
        "safety.on_fault" => "--on-fault",
        "safety.shutdown" => "--shutdown",
        "safety.recovery" => "--recovery",
        "safety.recovery_cycles" => "--recovery-cycles",
        "faults.drop_rate" => "--drop-rate",
        "faults.corrupt_rate" => "--corrupt-rate",
        "faults.reply_delay_us" => "--reply-delay-us",
        "faults.seed" => "--seed",
        "live.name" => "--name",
        "live.foxglove" => "--foxglove",
        "live.foxglove_every" => "--foxglove-every",
        "live.zenoh" => "--zenoh",
        "live.zenoh_every" => "--zenoh-every",
        _ => return None,
    })
}

/// How a message names a value: by its key in the file, or by its flag.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Names {
    Keys,
    Flags,
}

impl Names {
    /// `rate_hz = 0.001` or `--rate 0.001`.
    fn show(self, key: &'static str, value: &dyn std::fmt::Display) -> Setting {
        let flag = match self {
            Names::Flags => flag_of(key),
            Names::Keys => None,
        };
        Setting { key, flag, value: value.to_string() }
    }

    /// `rate_hz` or `--rate`.
    fn name(self, key: &str) -> String {
        match (self, flag_of(key)) {
            (Names::Flags, Some(flag)) => flag.to_string(),
            _ => key.to_string(),
        }
    }

    /// `error` about the value of `key`, named as this says.
    fn value(self, key: &str, error: impl Into<ConfigError>) -> ConfigError {
        ConfigError::Value { name: self.name(key), source: Box::new(error.into()) }
    }
}

/// A number as a message shows it: plain when it reads well, in exponent form when it is
/// huge or tiny (so `1e-300` is not 300 digits), `NaN` and `inf` as such.
pub fn show_number(v: f64) -> String {
    let magnitude = v.abs();
    if v == 0.0 || !v.is_finite() || (1e-4..1e15).contains(&magnitude) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// `lo <= v <= hi`, false for NaN.
fn within(v: f64, lo: f64, hi: f64) -> bool {
    v >= lo && v <= hi
}

/// The random seed of a run that was given none (0 to [`MAX_SEED`]).
pub fn random_seed() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: `bytes` is a writable buffer of the length passed; getrandom only writes it.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    let raw = if got == bytes.len() as isize {
        u64::from_ne_bytes(bytes)
    } else {
        // No entropy source: the clock still gives different runs different seeds.
        rtloop_rt::periodic::now_ns() ^ u64::from(std::process::id()).rotate_left(32)
    };
    raw & MAX_SEED
}

impl RunConfig {
    /// The same configuration with the paths it holds (`[physics] model`) taken from `dir`
    /// when relative: a run file's paths are relative to the file's own folder, wherever the
    /// run is started from.
    pub fn relative_to(mut self, dir: &std::path::Path) -> Self {
        self.physics = self.physics.map(|p| p.relative_to(dir));
        self
    }

    /// Parse a TOML file's text and check it. Errors are one sentence with the line; a key
    /// the run does not know is one.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        Self::read(text, None).map(|(config, _)| config)
    }

    /// [`from_toml`](Self::from_toml) on a file that also holds a table of the program's own,
    /// `[table]` (its control law's settings, say): that table is read into `T` (`None` when
    /// the file has none), with its mistakes (an unknown key, a value of the wrong type) one
    /// sentence with the line like the run's; everything else is the run's. Checking `T`'s
    /// values is the program's part. `rtloop run --config` reads its `[motion]` this way.
    pub fn from_toml_with<T: serde::de::DeserializeOwned>(
        text: &str,
        table: &str,
    ) -> Result<(Self, Option<T>), ConfigError> {
        let (config, own) = Self::read(text, Some(table))?;
        let own = own
            .map(|value| T::deserialize(toml::de::ValueDeserializer::from(value)))
            .transpose()
            .map_err(|e| crate::robot_spec::file_error(text, &e, false))?;
        Ok((config, own))
    }

    /// The run's part of `text`, checked, and the program's `table` as the file gives it (its
    /// spans kept, so that a mistake in it names its line).
    fn read<'t>(
        text: &'t str,
        table: Option<&str>,
    ) -> Result<(Self, Option<toml::Spanned<toml::de::DeValue<'t>>>), ConfigError> {
        let file_error = |e: &toml::de::Error| crate::robot_spec::file_error(text, e, true);
        let mut root = toml::de::DeTable::parse(text).map_err(|e| file_error(&e))?;
        let own = table.and_then(|name| root.get_mut().remove(name));
        let bus_tables = root.get_ref().contains_key("bus");
        let mut c = RunConfig::deserialize(toml::de::Deserializer::from(root)).map_err(|e| file_error(&e))?;
        // `[servo_bus_map]` (and `transport`) become the `bus` tables.
        let map = c.servo_bus_map.take();
        let transport = c.transport.take();
        let bus_tables = map.is_some() && bus_tables;
        if let Some(buses) =
            crate::robot_spec::resolve_servo_bus_map(text, bus_tables, transport.as_deref(), map.as_ref())?
        {
            c.buses = buses;
        }
        c.validate()?;
        Ok((c, own))
    }

    /// The TOML of this configuration. Absent optional values are printed as comments that
    /// say what absent means, so the file documents every key.
    pub fn to_toml(&self) -> String {
        let text = match toml::to_string(self) {
            Ok(t) => t,
            Err(e) => return format!("# cannot print the configuration: {e}\n"),
        };
        let mut out = String::with_capacity(text.len() + 512);
        for line in text.lines() {
            out.push_str(line);
            out.push('\n');
            if line == "[faults]" && self.faults.seed.is_none() {
                out.push_str(
                    "# seed: absent, so every run draws a random one (printed in the summary as injected.seed); \
                     set 0 to 9223372036854775807 to repeat a run\n",
                );
            }
        }
        out
    }

    /// [`to_toml`](Self::to_toml) with a table of the program's own, `[table]` (see
    /// [`from_toml_with`](Self::from_toml_with)), between the robot's buses and the run's
    /// settings.
    pub fn to_toml_with<T: Serialize>(&self, table: &str, value: &T) -> String {
        let own = match toml::to_string(&std::collections::BTreeMap::from([(table, value)])) {
            Ok(t) => t,
            Err(e) => format!("# cannot print [{table}]: {e}\n"),
        };
        let text = self.to_toml();
        // Every field of a RunConfig prints: `[gains]` is the first table after the buses.
        match text.find("\n[gains]\n") {
            Some(at) => format!("{}{own}\n{}", &text[..at + 1], &text[at + 1..]),
            None => format!("{text}\n{own}"),
        }
    }

    /// The robot part.
    pub fn robot(&self) -> RobotSpec {
        RobotSpec { buses: self.buses.clone() }
    }

    /// The parsed overheat injections.
    pub fn overheats(&self) -> Result<Vec<OverheatSpec>, ConfigError> {
        self.faults.overheat.iter().map(|s| parse_overheat(s)).collect()
    }

    /// The period, ns (after [`validate`](Self::validate): 10 µs to 10 s).
    pub fn period_ns(&self) -> u64 {
        (1e9 / self.rate_hz).round().max(1.0) as u64
    }

    /// The run's length, ns (after [`validate`](Self::validate): at most one year).
    pub fn duration_ns(&self) -> u64 {
        (self.duration_s * 1e9).round().max(1.0) as u64
    }

    /// Periods the run starts: every period that begins before the duration is over (at
    /// least one). A hair of tolerance keeps `0.3 s × 1000 Hz` at 300, not 301.
    pub fn periods(&self) -> u64 {
        ((self.duration_s * self.rate_hz - 1e-6).ceil()).max(1.0) as u64
    }

    /// Every value in range; the message names the key and the range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check(Names::Keys)
    }

    /// [`validate`](Self::validate), naming the command-line flag where there is one (for
    /// values that came from flags).
    pub fn validate_flags(&self) -> Result<(), ConfigError> {
        self.check(Names::Flags)
    }

    fn check(&self, names: Names) -> Result<(), ConfigError> {
        let out_of_range = |key: &'static str, value: &dyn std::fmt::Display, give: String| ConfigError::OutOfRange {
            setting: names.show(key, value),
            give,
        };
        let range = |key: &'static str, v: f64, lo: f64, hi: f64, what: &str| {
            if within(v, lo, hi) {
                Ok(())
            } else {
                Err(out_of_range(key, &show_number(v), what.to_string()))
            }
        };
        let (lo, hi) = RATE_HZ;
        range("rate_hz", self.rate_hz, lo, hi, "a rate from 0.1 to 100000 Hz")?;
        if !(self.duration_s > 0.0 && self.duration_s <= MAX_DURATION_S) {
            return Err(out_of_range(
                "duration_s",
                &show_number(self.duration_s),
                format!("a number of seconds above 0 and at most {MAX_DURATION_S} (one year)"),
            ));
        }
        range("gains.kp_scale", self.gains.kp_scale, 0.0, 1.0, "0 to 1")?;
        range("gains.kd_scale", self.gains.kd_scale, 0.0, 1.0, "0 to 1")?;
        if !(self.gains.maximum_torque > 0.0 && self.gains.maximum_torque <= MAX_MAXIMUM_TORQUE_NM) {
            return Err(out_of_range(
                "gains.maximum_torque",
                &show_number(self.gains.maximum_torque),
                format!("a torque above 0 and at most {MAX_MAXIMUM_TORQUE_NM} N·m"),
            ));
        }
        {
            let w = self.gains.watchdog_timeout_s;
            range(
                "gains.watchdog_timeout_s",
                w,
                MIN_WATCHDOG_TIMEOUT_S,
                MAX_WATCHDOG_TIMEOUT_S,
                "0.01 to 10 s: 0, NaN and infinity would hand the watchdog to the servo's own setting or switch \
                 it off",
            )?;
        }
        if !(1..=1_000_000).contains(&self.safety.missing_limit) {
            return Err(out_of_range(
                "safety.missing_limit",
                &self.safety.missing_limit,
                "1 to 1000000 cycles (a servo that stops answering is always noticed; on_fault = \"ignore\" only \
                 records it)"
                    .into(),
            ));
        }
        if !(1..=1_000_000).contains(&self.safety.recovery_cycles) {
            return Err(out_of_range(
                "safety.recovery_cycles",
                &self.safety.recovery_cycles,
                "1 to 1000000 cycles".into(),
            ));
        }
        range(
            "safety.fall_tilt_deg",
            self.safety.fall_tilt_deg,
            FALL_TILT_RANGE_DEG.0,
            FALL_TILT_RANGE_DEG.1,
            "10 to 180 degrees from upright (180: only upside down is a fall)",
        )?;
        range(
            "safety.fall_height_m",
            self.safety.fall_height_m,
            0.0,
            MAX_FALL_HEIGHT_M,
            "0 (no height check) to 100 m",
        )?;
        let period_us = self.period_ns() / 1000;
        if self.realtime.busy_wait_us > period_us {
            return Err(out_of_range(
                "realtime.busy_wait_us",
                &self.realtime.busy_wait_us,
                format!("0 to {period_us} µs (one period at {} Hz)", self.rate_hz),
            ));
        }
        for (key, p) in [("faults.drop_rate", self.faults.drop_rate), ("faults.corrupt_rate", self.faults.corrupt_rate)]
        {
            if !within(p, 0.0, 1.0) {
                return Err(ConfigError::NotAProbability { setting: names.show(key, &show_number(p)) });
            }
        }
        if self.faults.reply_delay_us > MAX_REPLY_DELAY_US {
            return Err(out_of_range(
                "faults.reply_delay_us",
                &self.faults.reply_delay_us,
                format!("0 to {MAX_REPLY_DELAY_US} µs"),
            ));
        }
        if let Some(seed) = self.faults.seed {
            if seed > MAX_SEED {
                return Err(out_of_range("faults.seed", &seed, format!("0 to {MAX_SEED}")));
            }
        }
        range("sim.start_position_rev", self.sim.start_position_rev, -1.0, 1.0, "-1 to 1 rev")?;
        self.safety.on_fault.parse::<rtloop_io::safety::OnFault>().map_err(|e| names.value("safety.on_fault", e))?;
        parse_shutdown(&self.safety.shutdown).map_err(|e| names.value("safety.shutdown", e))?;
        self.recovery().map_err(|e| names.value("safety.recovery", e))?;
        parse_cpu_dma_latency(&self.realtime.cpu_dma_latency)
            .map_err(|e| names.value("realtime.cpu_dma_latency", e))?;
        let choice = parse_policy(&self.realtime.policy).map_err(|e| names.value("realtime.policy", e))?;
        let allowed = match choice {
            PolicyChoice::Auto => 0..=99,
            PolicyChoice::Exact(p) => p.priority_range(),
        };
        if !allowed.contains(&self.realtime.priority) {
            return Err(ConfigError::PriorityForPolicy {
                setting: names.show("realtime.priority", &self.realtime.priority),
                policy: self.realtime.policy.clone(),
            });
        }
        self.realtime
            .overrun
            .parse::<rtloop_rt::periodic::OverrunPolicy>()
            .map_err(|e| names.value("realtime.overrun", e))?;
        for (key, every) in
            [("live.foxglove_every", self.live.foxglove_every), ("live.zenoh_every", self.live.zenoh_every)]
        {
            if !(1..=crate::live::MAX_EVERY).contains(&every) {
                return Err(out_of_range(
                    key,
                    &every,
                    format!("1 (every cycle) to {} cycles, e.g. 10 for 100 Hz at 1 kHz", crate::live::MAX_EVERY),
                ));
            }
        }
        if let Some(name) = &self.live.name {
            check_robot_name(name).map_err(|e| names.value("live.name", e))?;
        }
        if let Some(addr) = &self.live.foxglove {
            crate::live::foxglove::parse_address(addr, self.live.allow_remote)
                .map_err(|e| names.value("live.foxglove", e))?;
        }
        self.robot().validate()?;
        let overheats = self.overheats()?;
        let sim_ids: Vec<u8> = self
            .buses
            .iter()
            .filter(|b| b.uri == rtloop_io::BusUri::Sim)
            .flat_map(|b| b.servos.iter().copied())
            .collect();
        for o in overheats {
            if !sim_ids.contains(&o.id) {
                return Err(ConfigError::OverheatNotSimulated { id: o.id });
            }
        }
        if let Some(physics) = &self.physics {
            physics.spec(&self.buses, self.period_ns())?;
        }
        let pushes = self.pushes();
        // A push given typed (Runtime::push) meets the ranges `--push` does; its printed text
        // reads back as the same push (a float's `Display` does).
        if let Some(push) = pushes.iter().find(|p| !p.is_valid()) {
            return Err(crate::physics::PhysicsConfigError::Push { text: push_text::text(push) }.into());
        }
        if !pushes.is_empty() && self.physics.is_none() {
            return Err(crate::physics::PhysicsConfigError::PushWithoutPhysics.into());
        }
        if pushes.len() > rtloop_sim::world::MAX_PUSHES {
            return Err(crate::physics::PhysicsConfigError::TooManyPushes { given: pushes.len() }.into());
        }
        Ok(())
    }

    /// The pushes on the body (`faults.push`).
    pub fn pushes(&self) -> &[crate::physics::PushSpec] {
        &self.faults.push
    }

    /// The safety supervisor's recovery policy.
    pub fn recovery(&self) -> Result<rtloop_io::safety::Recovery, ConfigError> {
        match self.safety.recovery.as_str() {
            "latched" => Ok(rtloop_io::safety::Recovery::Latched),
            "auto" => Ok(rtloop_io::safety::Recovery::Auto { good_cycles: self.safety.recovery_cycles.max(1) }),
            other => Err(ConfigError::UnknownWord {
                what: "recovery policy",
                given: other.to_string(),
                expected: "latched or auto",
            }),
        }
    }

    /// Whether the run should hold /dev/cpu_dma_latency at 0 µs.
    pub fn holds_cpu_dma_latency(&self) -> bool {
        match parse_cpu_dma_latency(&self.realtime.cpu_dma_latency) {
            Ok(CpuDmaLatencyMode::Hold) => true,
            Ok(CpuDmaLatencyMode::Off) | Err(_) => false,
            Ok(CpuDmaLatencyMode::Auto) => match parse_policy(&self.realtime.policy) {
                Ok(PolicyChoice::Exact(p)) => p.is_realtime(),
                Ok(PolicyChoice::Auto) => self.auto_realtime(),
                Err(_) => false,
            },
        }
    }

    /// Whether `realtime.policy` is `auto` and asks for real time: everywhere but in lockstep,
    /// whose time is simulated (real time buys it nothing, and a lockstep loop never sleeps,
    /// which is exactly the thread RT throttling has to stop).
    pub fn auto_realtime(&self) -> bool {
        parse_policy(&self.realtime.policy) == Ok(PolicyChoice::Auto) && !self.sim.lockstep
    }

    /// The FIFO priority `auto` asks for: `realtime.priority`, or [`AUTO_PRIORITY`] when 0.
    pub fn auto_priority(&self) -> i32 {
        if self.realtime.priority == 0 {
            AUTO_PRIORITY
        } else {
            self.realtime.priority
        }
    }
}

/// The FIFO priority of `--policy auto` when none is given. Below 50, where the kernel runs its
/// threaded interrupt handlers (every IRQ thread on PREEMPT_RT, `threadirqs` elsewhere): the
/// loop's own replies (SocketCAN, fdcanusb's USB, UDP, spidev) arrive through them, so a cycle
/// thread above them would delay the very I/O it waits for, and one that misbehaves would
/// starve the machine's interrupts. Above everything that is not real time (the fair
/// scheduler's random delays the seeds measured: a logger, a shell, a build), above
/// pi3hat_tool's `--realtime` (SCHED_RR 10), and with room below for helpers a user wants
/// under the loop.
pub const AUTO_PRIORITY: i32 = 40;

/// `realtime.policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyChoice {
    /// Real time where the process may (see [`RealtimeConfig::policy`]).
    Auto,
    /// Exactly this policy; a refusal is a warning (an error with `strict`).
    Exact(rtloop_rt::setup::Policy),
}

/// Parse `auto`, `other`, `fifo`, `rr` or `deadline`.
pub fn parse_policy(s: &str) -> Result<PolicyChoice, rtloop_rt::UnknownName> {
    if s == "auto" {
        return Ok(PolicyChoice::Auto);
    }
    s.parse().map(PolicyChoice::Exact).map_err(|e: rtloop_rt::UnknownName| rtloop_rt::UnknownName {
        expected: "auto, other, fifo, rr or deadline",
        ..e
    })
}

/// `realtime.cpu_dma_latency`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuDmaLatencyMode {
    /// Hold it with a real-time policy, leave it otherwise.
    Auto,
    /// Always hold it.
    Hold,
    /// Never touch it.
    Off,
}

/// Parse `auto`, `hold` or `off`.
pub fn parse_cpu_dma_latency(s: &str) -> Result<CpuDmaLatencyMode, ConfigError> {
    match s {
        "auto" => Ok(CpuDmaLatencyMode::Auto),
        "hold" => Ok(CpuDmaLatencyMode::Hold),
        "off" => Ok(CpuDmaLatencyMode::Off),
        other => Err(ConfigError::UnknownWord {
            what: "cpu_dma_latency mode",
            given: other.to_string(),
            expected: "auto, hold or off",
        }),
    }
}

/// The command of the last cycle on shutdown.
pub fn parse_shutdown(s: &str) -> Result<rtloop_io::ServoCommand, ConfigError> {
    match s {
        "stop" => Ok(rtloop_io::ServoCommand::Stop),
        "zero-velocity" => Ok(rtloop_io::ServoCommand::ZeroVelocity),
        "brake" => Ok(rtloop_io::ServoCommand::Brake),
        other => Err(ConfigError::UnknownWord {
            what: "safe mode",
            given: other.to_string(),
            expected: "stop, zero-velocity or brake",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_carries_the_key_its_flag_and_the_value() {
        let e = RunConfig::from_toml("rate_hz = 0.0").unwrap_err();
        let ConfigError::OutOfRange { setting, give } = &e else { panic!("{e:?}") };
        assert_eq!(*setting, Setting { key: "rate_hz", flag: None, value: "0".into() });
        assert_eq!(give, "a rate from 0.1 to 100000 Hz");
        assert_eq!(e.to_string(), "rate_hz = 0 is out of range: give a rate from 0.1 to 100000 Hz");

        let flags = RunConfig { rate_hz: 0.0, ..RunConfig::default() };
        let e = flags.validate_flags().unwrap_err();
        assert!(matches!(&e, ConfigError::OutOfRange { setting, .. } if setting.flag == Some("--rate")), "{e:?}");
        assert!(e.to_string().starts_with("--rate 0 is out of range"), "{e}");

        let e = RunConfig::from_toml("[safety]\nshutdown = \"off\"").unwrap_err();
        let ConfigError::Value { name, source } = &e else { panic!("{e:?}") };
        assert_eq!(name, "safety.shutdown");
        assert!(matches!(&**source, ConfigError::UnknownWord { given, .. } if given == "off"), "{e:?}");

        let e = parse_overheat("5@x").unwrap_err();
        assert!(matches!(e, ConfigError::Overheat { problem: OverheatProblem::Time(ref t), .. } if t == "x"));
    }

    #[test]
    fn the_default_prints_and_parses_back() {
        let c = RunConfig::default();
        let text = c.to_toml();
        assert!(text.contains("rate_hz = 1000.0"), "{text}");
        assert_eq!(RunConfig::from_toml(&text).unwrap(), c);
        // Every field is optional.
        assert_eq!(RunConfig::from_toml("").unwrap(), c);
        assert_eq!(RunConfig::from_toml("rate_hz = 500.0").unwrap().rate_hz, 500.0);
    }

    #[test]
    fn mistakes_name_the_key() {
        for (text, want) in [
            ("rate_hz = 0.0", "rate_hz"),
            ("ratehz = 1.0", "unknown field"),
            ("[faults]\ndrop_rate = 1.5", "not a probability"),
            ("[safety]\non_fault = \"panic\"", "safety.on_fault"),
            ("[safety]\nshutdown = \"off\"", "safety.shutdown"),
            ("[faults]\noverheat = [\"5\"]", "ID@SECONDS"),
            ("[faults]\noverheat = [\"99@1\"]", "not on a simulated bus"),
        ] {
            let e = RunConfig::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        assert_eq!(parse_overheat("5@1.5").unwrap(), OverheatSpec { id: 5, at_s: 1.5 });
        assert!(parse_overheat("0@1").is_err());
        assert!(parse_overheat("5@-1").is_err());
        // 1e11 s would overflow u64 nanoseconds (and overheat the servo at once).
        let e = parse_overheat("5@1e11").unwrap_err().to_string();
        assert!(e.contains("0 to 31536000"), "{e}");
    }

    fn one_line(e: &str) {
        assert_eq!(e.lines().count(), 1, "one sentence: {e}");
        assert!(!e.contains("{ ") && !e.contains("Error("), "no Debug output: {e}");
    }

    #[test]
    fn every_number_is_range_checked_nan_and_infinities_included() {
        let floats = [
            ("", "rate_hz"),
            ("", "duration_s"),
            ("gains", "kp_scale"),
            ("gains", "kd_scale"),
            ("gains", "maximum_torque"),
            ("gains", "watchdog_timeout_s"),
            ("faults", "drop_rate"),
            ("faults", "corrupt_rate"),
            ("sim", "start_position_rev"),
            ("safety", "fall_tilt_deg"),
            ("safety", "fall_height_m"),
        ];
        let toml_of = |table: &str, key: &str, value: &str| {
            if table.is_empty() {
                format!("{key} = {value}\n")
            } else {
                format!("[{table}]\n{key} = {value}\n")
            }
        };
        for (table, key) in floats {
            for bad in ["nan", "inf", "-inf", "-1e300", "1e300"] {
                let text = toml_of(table, key, bad);
                let e = RunConfig::from_toml(&text).expect_err(&text).to_string();
                let name = if table.is_empty() { key.to_string() } else { format!("{table}.{key}") };
                assert!(e.starts_with(&format!("{name} = ")) && e.contains("give"), "{text:?}: {e}");
                one_line(&e);
            }
        }
        let integers = [
            ("safety", "missing_limit", "1000001"),
            ("safety", "missing_limit", "0"),
            ("safety", "recovery_cycles", "0"),
            ("realtime", "busy_wait_us", "1001"),
            ("faults", "reply_delay_us", "18446744073709552"),
            ("faults", "seed", "-1"),
            ("realtime", "priority", "1e3"),
        ];
        for (table, key, bad) in integers {
            let text = toml_of(table, key, bad);
            let e = RunConfig::from_toml(&text).expect_err(&text).to_string();
            assert!(e.contains(key), "{text:?}: {e}");
            one_line(&e);
        }
        // Huge numbers are shown readably.
        let e = RunConfig::from_toml("rate_hz = 1e-300").unwrap_err().to_string();
        assert_eq!(e, "rate_hz = 1e-300 is out of range: give a rate from 0.1 to 100000 Hz");
        // The edges are accepted.
        for ok in ["rate_hz = 0.1", "rate_hz = 100000.0", "[gains]\nwatchdog_timeout_s = 10.0"] {
            RunConfig::from_toml(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn an_unknown_key_in_a_bus_table_is_an_error_with_its_line() {
        let text = "[[bus]]\nbus = 1\nuri = \"sim\"\nservos = [1]\nrate_hz = 10.0\n";
        let e = RunConfig::from_toml(text).unwrap_err().to_string();
        assert!(e.starts_with("line 5 (rate_hz = 10.0): unknown field `rate_hz`"), "{e}");
        assert!(e.contains("move top-level keys above the first table"), "{e}");
        one_line(&e);
        // Every table refuses unknown keys.
        for table in ["gains", "safety", "realtime", "faults", "sim"] {
            let text = format!("[{table}]\nno_such_key = 1\n");
            let e = RunConfig::from_toml(&text).unwrap_err().to_string();
            assert!(e.contains("unknown field `no_such_key`"), "{table}: {e}");
        }
        assert!(crate::robot_spec::RobotSpec::from_toml("[[bus]]\nbus = 1\nuri = \"sim\"\nservos = [1]\nspeed = 2\n")
            .unwrap_err()
            .to_string()
            .contains("unknown field `speed`"));
    }

    #[test]
    fn print_config_shows_what_absent_watchdog_and_seed_mean_and_reads_back() {
        let text = RunConfig::default().to_toml();
        assert!(text.contains("watchdog_timeout_s = 0.1"), "{text}");
        assert!(text.contains("# seed: absent, so every run draws a random one"), "{text}");
        assert_eq!(RunConfig::from_toml(&text).unwrap(), RunConfig::default());
        let mut c = RunConfig::default();
        c.gains.watchdog_timeout_s = 0.5;
        c.faults.seed = Some(MAX_SEED);
        let text = c.to_toml();
        assert!(text.contains("watchdog_timeout_s = 0.5") && !text.contains("# watchdog_timeout_s"), "{text}");
        assert!(text.contains("seed = 9223372036854775807"), "{text}");
        assert_eq!(RunConfig::from_toml(&text).unwrap(), c);
    }

    #[test]
    fn periods_cover_the_duration_without_float_fuzz() {
        let c = |rate_hz: f64, duration_s: f64| RunConfig { rate_hz, duration_s, ..RunConfig::default() };
        assert_eq!(c(1000.0, 0.3).periods(), 300);
        assert_eq!(c(1000.0, 2.0).periods(), 2000);
        assert_eq!(c(3.0, 1.0).periods(), 3);
        assert_eq!(c(0.2, 0.2).periods(), 1, "a run shorter than one period still runs one cycle");
        assert_eq!(c(0.1, MAX_DURATION_S).periods(), 3_153_600);
        assert_eq!(c(100_000.0, MAX_DURATION_S).periods(), 3_153_600_000_000);
        assert_eq!(c(0.1, 1.0).period_ns(), 10_000_000_000);
    }

    #[test]
    fn the_default_policy_is_auto_and_its_priority_is_range_checked() {
        let c = RunConfig::default();
        assert_eq!(c.realtime.policy, "auto");
        assert_eq!(parse_policy(&c.realtime.policy).unwrap(), PolicyChoice::Auto);
        assert!(c.holds_cpu_dma_latency(), "auto holds /dev/cpu_dma_latency outside lockstep");
        let lockstep = RunConfig { sim: SimConfig { lockstep: true, ..SimConfig::default() }, ..c.clone() };
        assert!(!lockstep.holds_cpu_dma_latency(), "lockstep runs SCHED_OTHER: nothing to hold");
        for ok in
            ["[realtime]\npriority = 0", "[realtime]\npriority = 99", "[realtime]\npolicy = \"auto\"\npriority = 1"]
        {
            RunConfig::from_toml(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in ["[realtime]\npriority = 100", "[realtime]\npriority = -1"] {
            let e = RunConfig::from_toml(bad).unwrap_err().to_string();
            assert!(e.contains("out of range for policy auto") && e.contains("0 to 99 with auto"), "{e}");
            one_line(&e);
        }
        let e = RunConfig::from_toml("[realtime]\npolicy = \"turbo\"").unwrap_err().to_string();
        assert!(e.contains("expected auto, other, fifo, rr or deadline"), "{e}");
        let other = RunConfig::from_toml("[realtime]\npolicy = \"other\"").unwrap();
        assert!(!other.holds_cpu_dma_latency());
    }

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Own {
        gain: f64,
        name: String,
    }

    #[test]
    fn a_table_of_the_programs_own_reads_with_its_lines_and_prints_back_between_the_buses_and_the_settings() {
        let text = "rate_hz = 500.0\n[own]\ngain = 2.0\nname = \"x\"\n[safety]\non_fault = \"stop\"\n";
        let (c, own) = RunConfig::from_toml_with::<Own>(text, "own").unwrap();
        assert_eq!(own, Some(Own { gain: 2.0, name: "x".into() }));
        assert_eq!((c.rate_hz, c.safety.on_fault.as_str()), (500.0, "stop"));
        assert_eq!(RunConfig::from_toml_with::<Own>("rate_hz = 500.0", "own").unwrap().1, None);
        // Its mistakes are one sentence with the line, as the run's.
        let e = RunConfig::from_toml_with::<Own>("[own]\ngain = 1.0\nspeed = 2\n", "own").unwrap_err().to_string();
        assert!(e.starts_with("line 3 (speed = 2): unknown field `speed`"), "{e}");
        one_line(&e);
        let e = RunConfig::from_toml_with::<Own>("[own]\ngain = \"fast\"\n", "own").unwrap_err().to_string();
        assert!(e.starts_with("line 2 (gain = \"fast\"): invalid type"), "{e}");
        // The run's own keys stay the run's: a mistake there is still one.
        let e = RunConfig::from_toml_with::<Own>("rate_hz = 0.0\n[own]\n", "own").unwrap_err().to_string();
        assert!(e.starts_with("rate_hz = 0 is out of range"), "{e}");
        // Without the program, its table is a key the run does not know.
        let e = RunConfig::from_toml(text).unwrap_err().to_string();
        assert!(e.contains("unknown field `own`") && !e.contains("move top-level keys"), "{e}");
        // Printed after the buses, before [gains], and read back.
        let own = Own { gain: 0.5, name: "y".into() };
        let printed = c.to_toml_with("own", &own);
        let (buses, own_at, gains) = (
            printed.rfind("[[bus]]").unwrap(),
            printed.find("\n[own]\n").unwrap(),
            printed.find("\n[gains]\n").unwrap(),
        );
        assert!(buses < own_at && own_at < gains, "{printed}");
        assert!(printed.contains("name = \"y\"\n\n[gains]\n"), "{printed}");
        let (again, read) = RunConfig::from_toml_with::<Own>(&printed, "own").unwrap();
        assert_eq!((again, read), (c, Some(own)));
    }

    #[test]
    fn pushes_are_typed_read_once_from_a_file_and_checked_whatever_gave_them() {
        use crate::physics::{PhysicsConfig, PushSpec};
        let text = "[physics]\n[faults]\npush = [\"2:0,60,0\", \"1.5:-10,0,5:0.3\"]\n";
        let c = RunConfig::from_toml(text).unwrap();
        assert_eq!(
            c.pushes(),
            [
                PushSpec { at_s: 2.0, force_n: [0.0, 60.0, 0.0], duration_s: 0.1 },
                PushSpec { at_s: 1.5, force_n: [-10.0, 0.0, 5.0], duration_s: 0.3 }
            ]
        );
        assert_eq!(RunConfig::from_toml(&c.to_toml()).unwrap(), c, "printed pushes read back");
        let e = RunConfig::from_toml("[physics]\n[faults]\npush = [\"soon\"]\n").unwrap_err().to_string();
        assert!(
            e.starts_with("line 3 (push = [\"soon\"]): push \"soon\"") && e.contains("expected SECONDS:FX,FY,FZ"),
            "{e}"
        );
        one_line(&e);
        // A push given typed is range-checked as a written one is.
        let physics = Some(PhysicsConfig::default());
        for bad in [
            PushSpec { at_s: -1.0, force_n: [0.0; 3], duration_s: 0.1 },
            PushSpec { at_s: 1.0, force_n: [0.0, f64::NAN, 0.0], duration_s: 0.1 },
            PushSpec { at_s: 1.0, force_n: [0.0, 2000.0, 0.0], duration_s: 0.1 },
            PushSpec { at_s: 1.0, force_n: [0.0; 3], duration_s: 0.0 },
        ] {
            let mut c = RunConfig { physics: physics.clone(), ..RunConfig::default() };
            c.faults.push.push(bad);
            let e = c.validate().expect_err(&format!("{bad:?}")).to_string();
            assert!(e.contains("expected SECONDS:FX,FY,FZ"), "{bad:?}: {e}");
        }
        let mut c = RunConfig { physics, ..RunConfig::default() };
        c.faults.push.push(PushSpec { at_s: 0.1, force_n: [1e-3, -0.0, 1000.0], duration_s: 10.0 });
        c.validate().unwrap();
    }
}
