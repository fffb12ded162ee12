//! Live telemetry: the cycle, the servos, the IMU and the events of a running loop, handed
//! to publishers (the Foxglove WebSocket server, zenoh, or one of your own) while it runs —
//! and the operator's few remote commands handed back.
//!
//! **How data leaves the loop.** The cycle thread hands each cycle to the telemetry thread
//! through the same wait-free ring as the log ([`rtloop_tlog::realtime`]): a full ring drops the
//! message and counts it, never waits. On the telemetry thread a [`Fanout`] turns every
//! cycle a publisher wants (its decimation, `every` N cycles, by the cycle's index) into a
//! [`LiveCycle`] and hands it to each [`LiveSink`]; events go to every sink, undecimated.
//! A sink must not block the telemetry thread either (it shares it with the log file): one
//! that cannot keep up drops, and counts, in its own queues.
//!
//! **The messages.** [`CycleTiming`], [`ServoStateMsg`], [`ServoCommandMsg`], [`ImuMsg`] and
//! [`EventMsg`] are what every publisher sends, as JSON ([`schemas`] gives their JSON
//! schemas): a log played back (`rtloop log serve`) and a live run carry the same messages.
//! A value the servo did not report is `null`.
//!
//! **Commands from the operator.** [`RemoteControl`] is a handful of atomics a publisher
//! (zenoh's command key) sets and the cycle thread reads once per cycle, wait-free: stop
//! the run (as Ctrl-C does), hold every servo at zero velocity, re-arm (end the hold and the
//! safety supervisor's safe mode, as a controller's `rearm` does). Nothing else from the
//! network reaches the servos.
//!
//! Must never: make the cycle thread wait, lock or allocate for a publisher; let a
//! publisher's failure stop the log or the loop (it is counted in [`LiveStats`]).

pub mod address;
#[cfg(feature = "foxglove")]
pub mod foxglove;
#[cfg(feature = "foxglove")]
pub mod playback;
#[cfg(feature = "zenoh")]
pub mod zenoh;

/// This build has no Foxglove server (the `foxglove` feature is off).
#[cfg(not(feature = "foxglove"))]
pub mod foxglove {
    pub use super::address::{parse_address, AddressError, DEFAULT_ADDRESS};

    /// Nothing is opened for Foxglove in this build.
    pub const OPEN_FILES: u64 = 0;

    /// Refuses: this build has no Foxglove server.
    pub fn publisher(_config: &super::LiveConfig) -> Result<super::Publisher, super::LiveError> {
        Err(super::LiveError::BuiltWithout { feature: "foxglove", flag: "--foxglove" })
    }
}

/// This build has no zenoh (the `zenoh` feature is off).
#[cfg(not(feature = "zenoh"))]
pub mod zenoh {
    /// Nothing is opened for zenoh in this build.
    pub const OPEN_FILES: u64 = 0;

    /// Refuses: this build has no zenoh.
    pub fn publisher(
        _config: &super::LiveConfig,
        _robot: &str,
        _remote: std::sync::Arc<super::RemoteControl>,
    ) -> Result<super::Publisher, super::LiveError> {
        Err(super::LiveError::BuiltWithout { feature: "zenoh", flag: "--zenoh" })
    }
}

/// Live telemetry while the loop runs (`[live]` of a run configuration,
/// [`crate::config::RunConfig::live`]): a Foxglove WebSocket server, zenoh publications and
/// remote commands. Off unless asked for.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LiveConfig {
    /// The robot's name, as zenoh's keys (`rtloop/NAME/...`) carry it: letters, digits, `-`
    /// and `_`, 1 to 64 of them. Absent: this machine's host name.
    pub name: Option<String>,
    /// Serve the Foxglove WebSocket protocol on this address (`127.0.0.1:8765` is
    /// Foxglove's default). A non-loopback address needs `allow_remote`.
    pub foxglove: Option<String>,
    /// Send Foxglove every Nth cycle (1 … 1 000 000; 10: 100 Hz at 1 kHz).
    pub foxglove_every: u32,
    /// Publish over zenoh: `"peer"` (peer mode, loopback only unless `allow_remote`) or the
    /// path of a zenoh configuration file (JSON5: mode, listen and connect endpoints, a router).
    pub zenoh: Option<String>,
    /// Publish to zenoh every Nth cycle (1 … 1 000 000).
    pub zenoh_every: u32,
    /// Let the live servers listen on, and zenoh reach, addresses other than loopback.
    pub allow_remote: bool,
}

impl Default for LiveConfig {
    fn default() -> Self {
        LiveConfig {
            name: None,
            foxglove: None,
            foxglove_every: DEFAULT_LIVE_EVERY,
            zenoh: None,
            zenoh_every: DEFAULT_LIVE_EVERY,
            allow_remote: false,
        }
    }
}

/// The default decimation of live telemetry: every 10th cycle (100 Hz at 1 kHz).
pub const DEFAULT_LIVE_EVERY: u32 = 10;

impl LiveConfig {
    /// File descriptors a publisher of the caller's own ([`crate::Runtime::publish`]) is
    /// budgeted.
    pub const SINK_OPEN_FILES: u64 = 8;

    /// File descriptors the publishers this configuration asks for may hold at once (what a
    /// run makes sure it may open before it starts).
    pub fn open_files(&self) -> u64 {
        let foxglove = if self.foxglove.is_some() { foxglove::OPEN_FILES } else { 0 };
        let zenoh = if self.zenoh.is_some() { zenoh::OPEN_FILES } else { 0 };
        foxglove + zenoh
    }

    /// Foxglove or zenoh is on.
    pub fn any(&self) -> bool {
        self.foxglove.is_some() || self.zenoh.is_some()
    }

    /// The robot's name: `name`, else the host name (its characters outside `[A-Za-z0-9_-]`
    /// made `_`), else `robot`.
    pub fn robot_name(&self) -> String {
        if let Some(n) = &self.name {
            return n.clone();
        }
        // The kernel's host name (what `hostname` prints); a network namespace shares it.
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let host = host.trim();
        let cleaned: String = host
            .chars()
            .take(64)
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
            .collect();
        if cleaned.is_empty() {
            "robot".into()
        } else {
            cleaned
        }
    }
}

/// Why a live publisher (the Foxglove server, a zenoh session) did not start, or a live
/// setting was refused. The Display is the one sentence the user sees.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LiveError {
    /// This build lacks the publisher: the library's feature is off (it is by default).
    #[error(
        "{flag}: this program's rtloop was built without its `{feature}` feature; turn it on in the program's Cargo.toml (`rtloop = {{ ..., features = [\"{feature}\"] }}`; the rtloop command has it by default)"
    )]
    BuiltWithout {
        /// The cargo feature.
        feature: &'static str,
        /// The flag that asked for it.
        flag: &'static str,
    },
    /// A decimation outside 1..=[`MAX_EVERY`].
    #[error(
        "{flag} {every}: give a number of cycles from 1 (every cycle) to {MAX_EVERY}, e.g. 10 for 100 Hz at 1 kHz"
    )]
    Every {
        /// The flag, e.g. `--zenoh-every`.
        flag: String,
        /// The value given.
        every: u32,
    },
    /// The Foxglove address is refused.
    #[error(transparent)]
    Address(#[from] address::AddressError),
    /// The Foxglove server's runtime did not start.
    #[error("cannot start the Foxglove server's runtime: {0}")]
    FoxgloveRuntime(#[source] std::io::Error),
    /// The Foxglove port is taken.
    #[error(
        "cannot serve Foxglove on {addr}: the port is taken (another rtloop or Foxglove server?); give a free one, e.g. --foxglove 127.0.0.1:{}",
        .addr.port().wrapping_add(1).max(1024)
    )]
    PortTaken {
        /// The address asked for.
        addr: std::net::SocketAddr,
    },
    /// The Foxglove address cannot be bound.
    #[error("cannot serve Foxglove on {addr}: {source}; give another address with --foxglove HOST:PORT")]
    CannotBind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The bound Foxglove socket cannot be served.
    #[error("cannot serve Foxglove on {addr}: {source}")]
    CannotServe {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A channel's JSON schema cannot be encoded.
    #[error("{topic}: {source}")]
    Schema {
        /// The topic.
        topic: String,
        /// Why.
        source: serde_json::Error,
    },
    /// The Foxglove server has finished: nothing more can be advertised.
    #[error("the Foxglove server has finished; nothing more can be advertised")]
    Finished,
    /// zenoh refused the built-in peer configuration (`reason`: the first line of its error).
    #[error("the built-in zenoh peer configuration: {reason}")]
    PeerConfig {
        /// zenoh's reason.
        reason: String,
    },
    /// `--zenoh FILE` names no file.
    #[error(
        "--zenoh {what}: no such file: give the path of a zenoh JSON5 configuration, or --zenoh alone for a loopback peer"
    )]
    NoZenohFile {
        /// What `--zenoh` named.
        what: String,
    },
    /// `--zenoh FILE` is not a zenoh configuration.
    #[error("--zenoh {what}: not a zenoh configuration ({reason}): see docs/fleet.md for examples")]
    NotZenohConfig {
        /// What `--zenoh` named.
        what: String,
        /// zenoh's reason (the first line of its error).
        reason: String,
    },
    /// The zenoh configuration reaches beyond loopback without `--allow-remote`.
    #[error("--zenoh {what}: {source}")]
    NotLoopback {
        /// What `--zenoh` named.
        what: String,
        /// Which endpoint, or multicast scouting.
        source: LoopbackError,
    },
    /// The zenoh session did not open.
    #[error("--zenoh {what}: cannot open a zenoh session: {reason}")]
    Session {
        /// What `--zenoh` named.
        what: String,
        /// zenoh's reason (the first line of its error).
        reason: String,
    },
    /// A zenoh publisher or subscriber could not be declared.
    #[error("--zenoh {what}: {reason}")]
    Declare {
        /// What `--zenoh` named.
        what: String,
        /// zenoh's reason (the first line of its error).
        reason: String,
    },
    /// The zenoh publishing thread did not start.
    #[error("--zenoh: cannot start the publishing thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Why a zenoh configuration is not confined to this machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoopbackError {
    /// An endpoint that is not loopback.
    #[error(
        "the {mode} {what} {endpoint}, which is not a loopback address: add --allow-remote (live.allow_remote = true) to reach other machines, or use 127.0.0.1"
    )]
    Endpoint {
        /// The zenoh mode (`peer`, `client`, `router`).
        mode: String,
        /// `listens on` or `connects to`.
        what: &'static str,
        /// The endpoint.
        endpoint: String,
    },
    /// Multicast scouting is on.
    #[error(
        "multicast scouting is on (zenoh's default), which announces this robot to the network: add --allow-remote (live.allow_remote = true), or set scouting: {{ multicast: {{ enabled: false }} }}"
    )]
    Multicast,
}

/// The one sentence for a publisher this build lacks (for `rtloop log serve`'s String path).
#[allow(dead_code)] // Used only when a feature is off.
pub fn built_without(feature: &'static str, flag: &'static str) -> String {
    LiveError::BuiltWithout { feature, flag }.to_string()
}

use crate::telemetry::{CycleLog, LogMsg};
use serde::Serialize;
use serde_json::{json, Value as Json};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The largest decimation: one message every this many cycles.
pub const MAX_EVERY: u32 = 1_000_000;

/// Whether a decimation of `every` sends cycle `index`: the cycles whose index is a multiple of
/// it, in a live run and in a played log alike.
#[inline]
pub fn sends_cycle(index: u64, every: u32) -> bool {
    index.is_multiple_of(u64::from(every))
}

/// Check a decimation given by a user (`--foxglove-every`, `--zenoh-every`).
pub fn check_every(flag: &str, every: u32) -> Result<u32, LiveError> {
    if (1..=MAX_EVERY).contains(&every) {
        Ok(every)
    } else {
        Err(LiveError::Every { flag: flag.to_string(), every })
    }
}

/// The publishers a run's configuration asks for (`[live]`, `--foxglove`, `--zenoh`), started
/// now: a server that cannot bind, or a zenoh session that cannot open, is an error before
/// the run rather than a run nobody can see.
pub fn publishers(config: &LiveConfig, remote: &Arc<RemoteControl>) -> Result<Vec<Publisher>, LiveError> {
    let mut out = Vec::new();
    if config.foxglove.is_some() {
        out.push(foxglove::publisher(config)?);
    }
    if config.zenoh.is_some() {
        out.push(zenoh::publisher(config, &config.robot_name(), Arc::clone(remote))?);
    }
    Ok(out)
}

/// What a publisher learns before the first cycle: who the robot is and what it has.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveRobot {
    /// The robot's name (zenoh's key expressions carry it).
    pub name: String,
    /// The loop rate, Hz.
    pub rate_hz: f64,
    /// Every servo, in cycle order: (bus number, id).
    pub servos: Vec<(u8, u8)>,
    /// The run has an IMU whose attitude is measured (a pi3hat, or the simulated one).
    pub imu: bool,
    /// The simulated body's model (runs with physics): what the 3D view draws
    /// ([`crate::scene`]).
    pub model: Option<crate::telemetry::ModelRecord>,
}

/// One cycle, as publishers get it.
#[derive(Debug, Clone, Copy)]
pub struct LiveCycle<'a> {
    /// Wall-clock time of the cycle's wakeup, µs since the UNIX epoch.
    pub stamp_us: i64,
    /// Timing and reply counts.
    pub timing: CycleTiming,
    /// Every servo's command and state (see [`ServoStateMsg::from_log`] and
    /// [`ServoCommandMsg::from_log`]).
    pub servos: &'a [crate::telemetry::ServoLog],
    /// The attitude.
    pub imu: ImuMsg,
    /// The simulated body's ground truth and `qpos` (runs with physics).
    pub body: Option<&'a crate::telemetry::BodyLog>,
}

/// The cycle's timing: `/cycle` in Foxglove, `rtloop/<robot>/state/cycle` in zenoh.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CycleTiming {
    /// Period index.
    pub index: u64,
    /// Wakeup latency, µs.
    pub wakeup_us: f64,
    /// Cycle duration (commands out, replies in), µs.
    pub cycle_us: f64,
    /// Replies missing.
    pub missing: u32,
    /// Replies to earlier cycles' requests that arrived in this one.
    pub late: u32,
    /// Servos commanded without a query (a reply of theirs still outstanding).
    pub unqueried: u32,
    /// The cycle hit its deadline.
    pub timed_out: bool,
}

/// One servo's state.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ServoStateMsg {
    /// Bus number.
    pub bus: u8,
    /// Servo id.
    pub id: u8,
    /// The state answers this cycle's request.
    pub fresh: bool,
    /// Cycles between the request the state answers and this one; null before any reply.
    pub age_cycles: Option<u32>,
    /// moteus mode (255: none reported).
    pub mode: u8,
    /// Position, rev.
    pub position: f64,
    /// Velocity, rev/s.
    pub velocity: f64,
    /// Torque, N·m.
    pub torque: f64,
    /// Q-axis current, A.
    pub q_current: f64,
    /// Supply voltage, V.
    pub voltage: f64,
    /// Board temperature, °C.
    pub temperature: f64,
    /// Motor temperature, °C.
    pub motor_temperature: f64,
    /// Fault code (0: none).
    pub fault: u8,
}

impl ServoStateMsg {
    /// The state half of a logged servo.
    pub fn from_log(s: &crate::telemetry::ServoLog) -> Self {
        ServoStateMsg {
            bus: s.bus,
            id: s.id,
            fresh: s.fresh,
            age_cycles: s.state_age_cycles,
            mode: s.mode,
            position: s.position,
            velocity: s.velocity,
            torque: s.torque,
            q_current: s.q_current,
            voltage: s.voltage,
            temperature: s.temperature,
            motor_temperature: s.motor_temperature,
            fault: s.fault,
        }
    }
}

/// What one servo was sent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ServoCommandMsg {
    /// Bus number.
    pub bus: u8,
    /// Servo id.
    pub id: u8,
    /// The mode commanded: 10 position, 0 stop, 12 zero velocity, 15 brake, 255 query only.
    pub mode: u8,
    /// Position, rev (null: hold / not a position command).
    pub position: f64,
    /// Velocity, rev/s.
    pub velocity: f64,
    /// Maximum torque, N·m.
    pub maximum_torque: f64,
}

impl ServoCommandMsg {
    /// The command half of a logged servo.
    pub fn from_log(s: &crate::telemetry::ServoLog) -> Self {
        ServoCommandMsg {
            bus: s.bus,
            id: s.id,
            mode: s.command_mode,
            position: s.command_position,
            velocity: s.command_velocity,
            maximum_torque: s.command_maximum_torque,
        }
    }
}

/// A 3-vector.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Vec3 {
    /// x
    pub x: f64,
    /// y
    pub y: f64,
    /// z
    pub z: f64,
}

/// An attitude quaternion.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Quat {
    /// x
    pub x: f64,
    /// y
    pub y: f64,
    /// z
    pub z: f64,
    /// w
    pub w: f64,
}

impl Default for Quat {
    fn default() -> Self {
        Quat { x: 0.0, y: 0.0, z: 0.0, w: 1.0 }
    }
}

/// The IMU (pi3hat frame: +x forward, +y right, +z down).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ImuMsg {
    /// Attitude.
    pub orientation: Quat,
    /// Body rates, deg/s.
    pub rate_dps: Vec3,
    /// Acceleration without gravity, m/s².
    pub accel_mps2: Vec3,
}

impl ImuMsg {
    /// From the cycle's IMU sample.
    pub fn from_sample(s: &rtloop_sim::ImuSample) -> Self {
        let [w, x, y, z] = s.quaternion;
        let v = |a: [f64; 3]| Vec3 { x: a[0], y: a[1], z: a[2] };
        ImuMsg { orientation: Quat { x, y, z, w }, rate_dps: v(s.rate_dps), accel_mps2: v(s.accel_mps2) }
    }
}

/// An event: a fault, a servo missing, the safe mode, a remote command, the shutdown…
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EventMsg<'a> {
    /// Bus number of the servo, 0 for the robot.
    pub bus: u8,
    /// Servo id, 0 for the robot.
    pub servo: u8,
    /// What happened (the names of `rtloop run`'s summary and log).
    pub kind: &'a str,
}

/// JSON schemas (draft 2020-12) of the messages, by the name publishers give them. Every
/// field is always sent (a value not reported is `null`, never left out), so every field is
/// `required`: a payload missing one does not validate.
pub mod schemas {
    use super::*;

    fn number() -> Json {
        json!({"type": ["number", "null"]})
    }

    /// An object whose every property is required (in the order given). The 3D scene's
    /// schemas ([`crate::scene::schemas`]) are built with it too.
    pub(crate) fn object(title: Option<&str>, props: &[(&str, Json)]) -> Json {
        let properties: serde_json::Map<String, Json> = props.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let required: Vec<&str> = props.iter().map(|(k, _)| *k).collect();
        let mut o = json!({"type": "object", "properties": properties, "required": required});
        if let Some(t) = title {
            o["title"] = json!(t);
        }
        o
    }

    fn vec3() -> Json {
        object(None, &[("x", number()), ("y", number()), ("z", number())])
    }

    /// `rtloop.CycleTiming`.
    pub fn cycle_timing() -> Json {
        object(
            Some("rtloop.CycleTiming"),
            &[
                ("index", json!({"type": "integer"})),
                ("wakeup_us", number()),
                ("cycle_us", number()),
                ("missing", json!({"type": "integer"})),
                ("late", json!({"type": "integer"})),
                ("unqueried", json!({"type": "integer"})),
                ("timed_out", json!({"type": "boolean"})),
            ],
        )
    }

    /// `rtloop.ServoState`.
    pub fn servo_state() -> Json {
        object(
            Some("rtloop.ServoState"),
            &[
                ("bus", json!({"type": "integer"})),
                ("id", json!({"type": "integer"})),
                ("fresh", json!({"type": "boolean"})),
                ("age_cycles", json!({"type": ["integer", "null"]})),
                ("mode", json!({"type": "integer"})),
                ("position", number()),
                ("velocity", number()),
                ("torque", number()),
                ("q_current", number()),
                ("voltage", number()),
                ("temperature", number()),
                ("motor_temperature", number()),
                ("fault", json!({"type": "integer"})),
            ],
        )
    }

    /// `rtloop.ServoCommand`.
    pub fn servo_command() -> Json {
        object(
            Some("rtloop.ServoCommand"),
            &[
                ("bus", json!({"type": "integer"})),
                ("id", json!({"type": "integer"})),
                ("mode", json!({"type": "integer"})),
                ("position", number()),
                ("velocity", number()),
                ("maximum_torque", number()),
            ],
        )
    }

    /// `rtloop.Imu`.
    pub fn imu() -> Json {
        let orientation = object(None, &[("x", number()), ("y", number()), ("z", number()), ("w", number())]);
        object(Some("rtloop.Imu"), &[("orientation", orientation), ("rate_dps", vec3()), ("accel_mps2", vec3())])
    }

    /// `rtloop.Event`.
    pub fn event() -> Json {
        object(
            Some("rtloop.Event"),
            &[
                ("bus", json!({"type": "integer"})),
                ("servo", json!({"type": "integer"})),
                ("kind", json!({"type": "string"})),
            ],
        )
    }
}

/// What a publisher did, for the run summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LiveStats {
    /// Which publisher ("foxglove", "zenoh", …).
    pub sink: String,
    /// Where it publishes (an address, a key prefix).
    pub endpoint: String,
    /// Cycles it was handed (after its decimation).
    pub cycles: u64,
    /// Events it was handed.
    pub events: u64,
    /// Messages it sent (a cycle is several: timing, one per servo, …).
    pub messages: u64,
    /// Messages it dropped because a client or the network could not keep up.
    pub dropped: u64,
    /// Bad input it refused (malformed client messages, garbage on a command key, …).
    pub refused: u64,
    /// Publishing errors (not counted in `dropped`).
    pub errors: u64,
    /// Anything else it counts (clients connected, commands accepted, …).
    pub detail: std::collections::BTreeMap<String, u64>,
}

/// A publisher of live telemetry. It runs on the telemetry thread, which also writes the
/// log: none of its calls may block (queue and drop, counting, instead).
pub trait LiveSink: Send {
    /// Before the first cycle: what the robot is (advertise channels, declare keys).
    fn start(&mut self, robot: &LiveRobot);
    /// One cycle (already decimated).
    fn cycle(&mut self, cycle: &LiveCycle<'_>);
    /// One event, stamped in µs since the UNIX epoch.
    fn event(&mut self, stamp_us: i64, event: &EventMsg<'_>);
    /// What it did so far.
    fn stats(&self) -> LiveStats;
    /// The run is over: close (after the last cycle and event).
    fn finish(&mut self) {}
}

/// A publisher and its decimation.
pub struct Publisher {
    sink: Box<dyn LiveSink>,
    every: u32,
}

impl Publisher {
    /// Publish every `every`-th cycle (by the cycle's index: indices divisible by `every`)
    /// to `sink`; every event.
    pub fn new(sink: Box<dyn LiveSink>, every: u32) -> Self {
        Publisher { sink, every: every.clamp(1, MAX_EVERY) }
    }

    /// Its decimation.
    pub fn every(&self) -> u32 {
        self.every
    }
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").field("every", &self.every).finish_non_exhaustive()
    }
}

/// The telemetry thread's side: hands cycles and events to every publisher.
#[derive(Debug, Default)]
pub struct Fanout {
    publishers: Vec<Publisher>,
    epoch_offset_us: i64,
}

impl Fanout {
    /// Start every publisher with `robot`; stamps are the loop's clock plus
    /// `epoch_offset_us` (see [`crate::telemetry::epoch_offset_us`]).
    pub fn start(mut publishers: Vec<Publisher>, robot: &LiveRobot, epoch_offset_us: i64) -> Self {
        for p in &mut publishers {
            p.sink.start(robot);
        }
        Fanout { publishers, epoch_offset_us }
    }

    /// No publisher.
    pub fn is_empty(&self) -> bool {
        self.publishers.is_empty()
    }

    /// The smallest decimation: the cycle thread need hand over no other cycles when nothing
    /// else (a log file) wants them.
    pub fn finest_every(&self) -> u32 {
        self.publishers.iter().map(|p| p.every).min().unwrap_or(1)
    }

    /// Hand one message of the loop to the publishers that want it.
    pub fn offer<T>(&mut self, msg: &LogMsg<T>) {
        match msg {
            LogMsg::Cycle(c) => {
                if !self.publishers.iter().any(|p| sends_cycle(c.index, p.every)) {
                    return;
                }
                let cycle = self.live_cycle(c);
                for p in &mut self.publishers {
                    if sends_cycle(c.index, p.every) {
                        p.sink.cycle(&cycle);
                    }
                }
            }
            LogMsg::Event { at_ns, bus, servo, kind } => {
                let stamp = self.epoch_offset_us + (*at_ns / 1000) as i64;
                let e = EventMsg { bus: *bus, servo: *servo, kind };
                for p in &mut self.publishers {
                    p.sink.event(stamp, &e);
                }
            }
            LogMsg::Custom { .. } => {}
        }
    }

    /// A cycle as publishers get it.
    pub fn live_cycle<'a>(&self, c: &'a CycleLog) -> LiveCycle<'a> {
        live_cycle(c, self.epoch_offset_us)
    }

    /// Close every publisher; what each did.
    pub fn finish(&mut self) -> Vec<LiveStats> {
        self.publishers
            .iter_mut()
            .map(|p| {
                p.sink.finish();
                p.sink.stats()
            })
            .collect()
    }
}

/// A logged cycle as publishers get it, stamped with `epoch_offset_us` plus its wakeup.
pub fn live_cycle(c: &CycleLog, epoch_offset_us: i64) -> LiveCycle<'_> {
    let n = (c.servos_len as usize).min(c.servos.len());
    LiveCycle {
        stamp_us: epoch_offset_us + (c.woke_ns / 1000) as i64,
        timing: CycleTiming {
            index: c.index,
            wakeup_us: c.wakeup_ns as f64 / 1000.0,
            cycle_us: c.cycle_ns as f64 / 1000.0,
            missing: c.missing,
            late: c.late,
            unqueried: c.unqueried,
            timed_out: c.timed_out,
        },
        servos: &c.servos[..n],
        imu: ImuMsg::from_sample(&c.imu),
        body: c.body.present.then_some(&c.body),
    }
}

/// The operator's commands, from the network to the cycle thread: set by a publisher (any
/// thread), read by the cycle thread once per cycle. Atomics only: wait-free both ways.
#[derive(Debug, Default)]
pub struct RemoteControl {
    stop: AtomicBool,
    hold: AtomicBool,
    rearms: AtomicU64,
    accepted: AtomicU64,
}

/// A command an operator may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteCommand {
    /// End the run as Ctrl-C does: the shutdown cycle leaves every servo in the safe mode.
    Stop,
    /// Hold every healthy servo at zero velocity (mode 12) until [`RemoteCommand::Rearm`],
    /// whatever the control law asks.
    ZeroVelocity,
    /// End the hold and the safety supervisor's safe mode: the control law (or the agent)
    /// drives again.
    Rearm,
}

impl RemoteCommand {
    /// Every command, by its name on the wire.
    pub const ALL: [(&'static str, RemoteCommand); 3] = [
        ("stop", RemoteCommand::Stop),
        ("zero_velocity", RemoteCommand::ZeroVelocity),
        ("rearm", RemoteCommand::Rearm),
    ];

    /// The command named `name` (`stop`, `zero_velocity`, `rearm`).
    pub fn parse(name: &str) -> Option<RemoteCommand> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|&(_, c)| c)
    }

    /// Its name on the wire.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(_, c)| *c == self).map_or("?", |(n, _)| n)
    }
}

impl RemoteControl {
    /// A new one: no command yet.
    pub fn new() -> Self {
        RemoteControl::default()
    }

    /// Ask for `command` (any thread; wait-free).
    pub fn request(&self, command: RemoteCommand) {
        match command {
            RemoteCommand::Stop => self.stop.store(true, Ordering::Release),
            RemoteCommand::ZeroVelocity => self.hold.store(true, Ordering::Release),
            RemoteCommand::Rearm => {
                self.hold.store(false, Ordering::Release);
                self.rearms.fetch_add(1, Ordering::AcqRel);
            }
        }
        self.accepted.fetch_add(1, Ordering::Relaxed);
    }

    /// A stop was asked for.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The servos are to be held at zero velocity.
    pub fn held(&self) -> bool {
        self.hold.load(Ordering::Acquire)
    }

    /// How many re-arms were asked for so far.
    pub fn rearms(&self) -> u64 {
        self.rearms.load(Ordering::Acquire)
    }

    /// Commands accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Seen {
        robot: Option<LiveRobot>,
        cycles: Vec<u64>,
        events: Vec<String>,
        finished: bool,
    }

    struct Recorder(Arc<Mutex<Seen>>);

    impl LiveSink for Recorder {
        fn start(&mut self, robot: &LiveRobot) {
            self.0.lock().unwrap().robot = Some(robot.clone());
        }
        fn cycle(&mut self, cycle: &LiveCycle<'_>) {
            self.0.lock().unwrap().cycles.push(cycle.timing.index);
        }
        fn event(&mut self, _stamp_us: i64, event: &EventMsg<'_>) {
            self.0.lock().unwrap().events.push(event.kind.to_string());
        }
        fn stats(&self) -> LiveStats {
            LiveStats { sink: "recorder".into(), ..Default::default() }
        }
        fn finish(&mut self) {
            self.0.lock().unwrap().finished = true;
        }
    }

    #[test]
    fn each_publisher_gets_the_cycles_of_its_decimation_and_every_event() {
        let a = Arc::new(Mutex::new(Seen::default()));
        let b = Arc::new(Mutex::new(Seen::default()));
        let robot = LiveRobot { name: "r".into(), rate_hz: 1000.0, servos: vec![(1, 1)], imu: true, model: None };
        let mut fan = Fanout::start(
            vec![Publisher::new(Box::new(Recorder(a.clone())), 1), Publisher::new(Box::new(Recorder(b.clone())), 4)],
            &robot,
            0,
        );
        assert_eq!(fan.finest_every(), 1);
        let mut c = CycleLog::default();
        for index in 0..10 {
            c.index = index;
            fan.offer::<()>(&LogMsg::Cycle(c));
        }
        fan.offer::<()>(&LogMsg::Event { at_ns: 5, bus: 1, servo: 1, kind: "fault" });
        fan.offer::<()>(&LogMsg::Custom { at_ns: 5, value: () });
        let stats = fan.finish();
        assert_eq!(stats.len(), 2);
        let a = a.lock().unwrap();
        let b = b.lock().unwrap();
        assert_eq!(a.robot.as_ref(), Some(&robot));
        assert_eq!(a.cycles, (0..10).collect::<Vec<_>>());
        assert_eq!(b.cycles, vec![0, 4, 8]);
        assert_eq!(a.events, ["fault"]);
        assert_eq!(b.events, ["fault"]);
        assert!(a.finished && b.finished);
    }

    #[test]
    fn a_decimation_out_of_range_is_one_sentence() {
        assert_eq!(check_every("--foxglove-every", 10).unwrap(), 10);
        let e = check_every("--foxglove-every", 0).unwrap_err();
        assert!(matches!(&e, LiveError::Every { flag, every: 0 } if flag == "--foxglove-every"), "{e:?}");
        let e = e.to_string();
        assert!(e.starts_with("--foxglove-every 0: give") && !e.contains('\n'), "{e}");
        assert!(check_every("--zenoh-every", MAX_EVERY + 1).is_err());
    }

    #[test]
    fn remote_commands_parse_by_name_and_set_their_flags() {
        let r = RemoteControl::new();
        assert!(!r.held() && !r.stop_requested() && r.rearms() == 0);
        for (name, c) in RemoteCommand::ALL {
            assert_eq!(RemoteCommand::parse(name), Some(c));
            assert_eq!(c.name(), name);
        }
        assert_eq!(RemoteCommand::parse("STOP"), None);
        r.request(RemoteCommand::ZeroVelocity);
        assert!(r.held());
        r.request(RemoteCommand::Rearm);
        assert!(!r.held() && r.rearms() == 1);
        r.request(RemoteCommand::Stop);
        assert!(r.stop_requested());
        assert_eq!(r.accepted(), 3);
    }

    /// Every key of `value` is a property of `schema`, and every property is required and
    /// present (recursively): a payload missing a field cannot validate.
    fn check_every_field_required(schema: &Json, value: &Json, at: &str) {
        let Some(props) = schema["properties"].as_object() else { return };
        let mut required: Vec<&str> =
            schema["required"].as_array().map_or(vec![], |r| r.iter().filter_map(Json::as_str).collect());
        required.sort_unstable();
        let mut keys: Vec<&str> = props.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(required, keys, "{at}: every property is required");
        let mut sent: Vec<&str> = value.as_object().expect("an object").keys().map(String::as_str).collect();
        sent.sort_unstable();
        assert_eq!(sent, keys, "{at}: the message sends exactly the schema's properties");
        for (k, sub) in props {
            check_every_field_required(sub, &value[k], &format!("{at}.{k}"));
        }
    }

    #[test]
    fn every_field_of_every_message_is_required_by_its_schema() {
        let s = crate::telemetry::ServoLog::default();
        let cases = [
            (schemas::cycle_timing(), serde_json::to_value(CycleTiming::default()).unwrap()),
            (schemas::servo_state(), serde_json::to_value(ServoStateMsg::from_log(&s)).unwrap()),
            (schemas::servo_command(), serde_json::to_value(ServoCommandMsg::from_log(&s)).unwrap()),
            (schemas::imu(), serde_json::to_value(ImuMsg::default()).unwrap()),
            (schemas::event(), serde_json::to_value(EventMsg { bus: 1, servo: 2, kind: "fault" }).unwrap()),
        ];
        for (schema, value) in &cases {
            check_every_field_required(schema, value, schema["title"].as_str().unwrap());
        }
    }

    #[test]
    fn a_servo_without_a_reported_value_is_null_in_json() {
        let s = crate::telemetry::ServoLog { position: f64::NAN, ..Default::default() };
        let v = serde_json::to_value(ServoStateMsg::from_log(&s)).unwrap();
        assert_eq!(v["position"], Json::Null);
        assert_eq!(v["age_cycles"], Json::Null);
    }
}
