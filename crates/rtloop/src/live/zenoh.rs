//! zenoh for `rtloop run --zenoh`: the robot's state and events published under
//! `rtloop/<robot>/...`, the operator's three high-level commands taken from
//! `rtloop/<robot>/cmd`.
//!
//! **Keys.**
//! * `rtloop/<robot>/state`: one JSON object per published cycle (every `zenoh_every`-th):
//!   `{"robot", "stamp_us", "timing": CycleTiming, "imu": Imu, "servos": [ServoState…],
//!   "commands": [ServoCommand…]}` — one message for the whole robot, so a subscriber gets
//!   every servo of the same cycle together and the network carries one zenoh header per
//!   cycle instead of one per servo (docs/fleet.md measures it).
//! * `rtloop/<robot>/events`: every event, `{"stamp_us", "bus", "servo", "kind"}`, sent
//!   reliably on its own queue (never dropped behind state messages); a refused command is
//!   one too (`kind: "remote_refused"`, with its `reason`).
//! * `rtloop/<robot>/cmd` (subscribed): `stop`, `zero_velocity` or `rearm`, as plain text or
//!   `{"command": "…"}`. Anything else is refused, counted, and answered on
//!   `rtloop/<robot>/cmd/reply` (`{"accepted": false, "reason": "…"}`; an accepted command
//!   gets `{"accepted": true, "command": "…"}`). Per-cycle servo commands from the network
//!   are not offered.
//!
//! **Sessions.** `--zenoh` alone ("peer") is a peer confined to this machine: it listens on
//! 127.0.0.1 only (a port the system picks), multicast scouting is off, and it connects to
//! `tcp/127.0.0.1:7447` (zenoh's default port: a local router or operator station listening
//! there), retrying in the background when nothing listens yet. `--zenoh FILE` is a zenoh
//! JSON5 configuration (a router's address, client mode…); an endpoint it would listen on or
//! connect to that is not loopback, or multicast scouting (zenoh's default), needs
//! `--allow-remote`.
//!
//! **Threads.** The telemetry thread serialises a cycle to JSON and pushes it into a bounded
//! wait-free ring ([`rtrb`]); a publishing thread of its own takes it from there to zenoh, so
//! a slow network or a congested zenoh queue (a `CongestionControl::Drop` put may wait up to
//! zenoh's `wait_before_drop`, 1 ms by default, before dropping, and does not tell the caller
//! it dropped) never reaches the telemetry thread. A full ring drops the newest message and
//! counts it (`dropped`); events have their own, larger ring and are put with
//! `CongestionControl::Block` at a higher priority.
//!
//! Must never: accept per-cycle servo commands from the network; block the telemetry thread;
//! reach beyond loopback unless `allow_remote`; panic on what arrives on the command key.

use super::{
    CycleTiming, EventMsg, ImuMsg, LiveCycle, LiveError, LiveRobot, LiveSink, LiveStats, LoopbackError, Publisher,
    RemoteCommand, RemoteControl, ServoCommandMsg, ServoStateMsg,
};
use crate::live::LiveConfig;
use ::zenoh::qos::{CongestionControl, Priority};
use ::zenoh::Wait;
use serde::Serialize;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// zenoh's default port: `--zenoh` alone connects to a router or subscriber listening on
/// `tcp/127.0.0.1:7447`.
pub const DEFAULT_PORT: u16 = 7447;

/// File descriptors a zenoh session is budgeted: its runtime's threads and pollers, its
/// listeners, a socket per peer or router (zenoh panics, rather than failing, when it runs out
/// at start).
pub const OPEN_FILES: u64 = 64;

/// The longest command accepted on the command key, bytes (`{"command": "zero_velocity"}`
/// is 29): anything longer is refused unread.
pub const MAX_COMMAND_BYTES: usize = 256;

/// State messages waiting for the publishing thread; more are dropped and counted. At 1 kHz
/// and every cycle, 64 is 64 ms of slack.
pub const STATE_QUEUE: usize = 64;

/// Events waiting for the publishing thread (they are rare: faults, shutdown, commands).
pub const EVENT_QUEUE: usize = 4096;

/// `rtloop/<robot>/state`.
pub fn state_key(robot: &str) -> String {
    format!("rtloop/{robot}/state")
}

/// `rtloop/<robot>/events`.
pub fn events_key(robot: &str) -> String {
    format!("rtloop/{robot}/events")
}

/// `rtloop/<robot>/cmd`.
pub fn cmd_key(robot: &str) -> String {
    format!("rtloop/{robot}/cmd")
}

/// `rtloop/<robot>/cmd/reply`.
pub fn reply_key(robot: &str) -> String {
    format!("rtloop/{robot}/cmd/reply")
}

/// The words a command may be, for every refusal.
const COMMAND_NAMES: &str = "give stop, zero_velocity or rearm (plain text or {\"command\": \"...\"})";

/// Why [`parse_command`] refused a command; the sentence is the reply's `reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteCommandError {
    /// More than [`MAX_COMMAND_BYTES`].
    #[error("a command of {len} bytes is too long (at most {MAX_COMMAND_BYTES}): {COMMAND_NAMES}")]
    TooLong {
        /// Its length, bytes.
        len: usize,
    },
    /// Not UTF-8.
    #[error("the command is not UTF-8 text: {COMMAND_NAMES}")]
    NotUtf8,
    /// Nothing but whitespace.
    #[error("the command is empty: {COMMAND_NAMES}")]
    Empty,
    /// Starts with `{` but is not JSON.
    #[error("the command is not valid JSON: {COMMAND_NAMES}")]
    NotJson,
    /// JSON, but not an object.
    #[error("the command is not a JSON object: {COMMAND_NAMES}")]
    NotAnObject,
    /// An object with another field than `command` (at most 40 characters of its name).
    #[error("the command has an unknown field {field:?}: {COMMAND_NAMES}")]
    UnknownField {
        /// The field.
        field: String,
    },
    /// `"command"` is not a string.
    #[error("\"command\" is not a string: {COMMAND_NAMES}")]
    NotAString,
    /// An object without `"command"`.
    #[error("the JSON has no \"command\": {COMMAND_NAMES}")]
    NoCommand,
    /// Not one of the commands (at most 40 characters of it).
    #[error("{name:?} is not a command: {COMMAND_NAMES}")]
    Unknown {
        /// What was given.
        name: String,
    },
}

/// Read a command from the bytes of the command key: `stop`, `zero_velocity` or `rearm` as
/// text (surrounding whitespace ignored) or as `{"command": "NAME"}`. Anything else is
/// refused with one sentence saying why.
pub fn parse_command(payload: &[u8]) -> Result<RemoteCommand, RemoteCommandError> {
    if payload.len() > MAX_COMMAND_BYTES {
        return Err(RemoteCommandError::TooLong { len: payload.len() });
    }
    let Ok(text) = std::str::from_utf8(payload) else {
        return Err(RemoteCommandError::NotUtf8);
    };
    let text = text.trim();
    if text.is_empty() {
        return Err(RemoteCommandError::Empty);
    }
    let name = if text.starts_with('{') {
        let value: Json = serde_json::from_str(text).map_err(|_| RemoteCommandError::NotJson)?;
        let Some(object) = value.as_object() else {
            return Err(RemoteCommandError::NotAnObject);
        };
        if let Some(other) = object.keys().find(|k| *k != "command") {
            return Err(RemoteCommandError::UnknownField { field: truncated(other) });
        }
        match object.get("command") {
            Some(Json::String(name)) => name.clone(),
            Some(_) => return Err(RemoteCommandError::NotAString),
            None => return Err(RemoteCommandError::NoCommand),
        }
    } else {
        text.to_string()
    };
    RemoteCommand::parse(&name).ok_or_else(|| RemoteCommandError::Unknown { name: truncated(&name) })
}

/// At most 40 characters of what a sender gave, for a reply.
fn truncated(text: &str) -> String {
    let mut out: String = text.chars().take(40).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// The configuration of `--zenoh` alone: a peer on loopback only (see the module's doc).
/// With `allow_remote`, zenoh's default peer (listening on every interface, multicast
/// scouting on), still connecting to a local router.
pub fn peer_config(allow_remote: bool) -> Result<::zenoh::Config, LiveError> {
    let text = if allow_remote {
        format!(r#"{{ mode: "peer", connect: {{ endpoints: ["tcp/127.0.0.1:{DEFAULT_PORT}"] }} }}"#)
    } else {
        format!(
            r#"{{ mode: "peer",
                 listen: {{ endpoints: ["tcp/127.0.0.1:0"] }},
                 connect: {{ endpoints: ["tcp/127.0.0.1:{DEFAULT_PORT}"] }},
                 scouting: {{ multicast: {{ enabled: false }} }} }}"#
        )
    };
    ::zenoh::Config::from_json5(&text).map_err(|e| LiveError::PeerConfig { reason: first_line(&e) })
}

/// The session configuration `config.zenoh` names ("peer" or a JSON5 file), checked: a
/// non-loopback endpoint or multicast scouting needs `allow_remote`.
pub fn session_config(config: &LiveConfig) -> Result<::zenoh::Config, LiveError> {
    let what = config.zenoh.as_deref().unwrap_or("peer");
    let zconfig = if what == "peer" {
        peer_config(config.allow_remote)?
    } else {
        let path = std::path::Path::new(what);
        if !path.is_file() {
            return Err(LiveError::NoZenohFile { what: what.to_string() });
        }
        ::zenoh::Config::from_file(path)
            .map_err(|e| LiveError::NotZenohConfig { what: what.to_string(), reason: first_line(&e) })?
    };
    if !config.allow_remote {
        check_loopback(&zconfig).map_err(|source| LiveError::NotLoopback { what: what.to_string(), source })?;
    }
    Ok(zconfig)
}

/// Every endpoint `zconfig` would listen on or connect to is loopback and multicast scouting
/// is off; else one sentence naming the first that is not.
pub fn check_loopback(zconfig: &::zenoh::Config) -> Result<(), LoopbackError> {
    let get = |key: &str| zconfig.get_json(key).ok().and_then(|s| serde_json::from_str::<Json>(&s).ok());
    let mode = get("mode").and_then(|m| m.as_str().map(str::to_string)).unwrap_or_else(|| "peer".into());
    for (what, key) in [("listens on", "listen/endpoints"), ("connects to", "connect/endpoints")] {
        let mut endpoints = Vec::new();
        if let Some(v) = get(key) {
            endpoints_for_mode(&v, &mode, &mut endpoints);
        }
        if let Some(bad) = endpoints.iter().find(|e| !is_loopback_endpoint(e)) {
            return Err(LoopbackError::Endpoint { mode, what, endpoint: bad.to_string() });
        }
    }
    let multicast = get("scouting/multicast/enabled").map(|v| v.as_bool().unwrap_or(true)).unwrap_or(true);
    if multicast {
        return Err(LoopbackError::Multicast);
    }
    Ok(())
}

/// The endpoint strings of a listen/connect value: a list, or per-mode lists
/// (`{router: [...], peer: [...], client: [...]}`) of which `mode`'s applies.
fn endpoints_for_mode(v: &Json, mode: &str, out: &mut Vec<String>) {
    match v {
        Json::String(s) => out.push(s.clone()),
        Json::Array(items) => items.iter().for_each(|i| endpoints_for_mode(i, mode, out)),
        Json::Object(map) => {
            if let Some(v) = map.get(mode) {
                endpoints_for_mode(v, mode, out);
            }
        }
        _ => {}
    }
}

/// `tcp/127.0.0.1:7447`, `udp/[::1]:0`, `tcp/localhost:7447` (metadata after `?` or `#`
/// ignored) are loopback; `tcp/0.0.0.0:7447`, `tcp/[::]:0`, any other address or host name
/// is not.
pub fn is_loopback_endpoint(endpoint: &str) -> bool {
    let address = endpoint.split(['?', '#']).next().unwrap_or("");
    let Some((_, address)) = address.split_once('/') else { return false };
    let Some((host, _port)) = address.rsplit_once(':') else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn first_line(e: &dyn std::fmt::Display) -> String {
    e.to_string().lines().next().unwrap_or("").trim().to_string()
}

/// What the publisher counts, shared by the telemetry thread, the publishing thread and the
/// command callback.
#[derive(Debug, Default)]
struct Counters {
    state_messages: AtomicU64,
    state_bytes: AtomicU64,
    state_max_bytes: AtomicU64,
    state_dropped: AtomicU64,
    event_messages: AtomicU64,
    event_bytes: AtomicU64,
    events_dropped: AtomicU64,
    reply_messages: AtomicU64,
    reply_bytes: AtomicU64,
    commands_accepted: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
}

/// The JSON published on `rtloop/<robot>/state`.
#[derive(Serialize)]
struct StateMsg<'a> {
    robot: &'a str,
    stamp_us: i64,
    timing: CycleTiming,
    imu: Option<ImuMsg>,
    servos: Vec<ServoStateMsg>,
    commands: Vec<ServoCommandMsg>,
}

/// The JSON published on `rtloop/<robot>/events`.
#[derive(Serialize)]
struct EventOut<'a> {
    stamp_us: i64,
    bus: u8,
    servo: u8,
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

/// The reply on `rtloop/<robot>/cmd/reply`.
#[derive(Serialize)]
struct ReplyMsg<'a> {
    accepted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

/// The zenoh publisher: the telemetry thread's side.
struct ZenohSink {
    robot: String,
    endpoint: String,
    imu: bool,
    counters: Arc<Counters>,
    state_tx: rtrb::Producer<Vec<u8>>,
    events_tx: rtrb::Producer<Vec<u8>>,
    closing: Arc<AtomicBool>,
    worker: Option<JoinHandle<()>>,
    session: ::zenoh::Session,
    subscriber: Option<::zenoh::pubsub::Subscriber<()>>,
    cycles: u64,
    events: u64,
}

/// Open a zenoh session as `config.zenoh` says and publish as `robot`; commands on
/// `rtloop/<robot>/cmd` go to `remote`. The session opens now, so a configuration that
/// does not parse or an endpoint that cannot be used is an error before the run.
pub fn publisher(config: &LiveConfig, robot: &str, remote: Arc<RemoteControl>) -> Result<Publisher, LiveError> {
    let every = super::check_every("--zenoh-every", config.zenoh_every)?;
    let zconfig = session_config(config)?;
    let what = config.zenoh.as_deref().unwrap_or("peer");
    let session = ::zenoh::open(zconfig)
        .wait()
        .map_err(|e| LiveError::Session { what: what.to_string(), reason: first_line(&e) })?;
    let counters = Arc::new(Counters::default());
    let put_error = |e: ::zenoh::Error| LiveError::Declare { what: what.to_string(), reason: first_line(&e) };
    let state_pub = session
        .declare_publisher(state_key(robot))
        .congestion_control(CongestionControl::Drop)
        .priority(Priority::Data)
        .wait()
        .map_err(put_error)?;
    let events_pub = session
        .declare_publisher(events_key(robot))
        .congestion_control(CongestionControl::Block)
        .priority(Priority::InteractiveHigh)
        .wait()
        .map_err(put_error)?;

    let subscriber = {
        let counters = Arc::clone(&counters);
        let reply_session = session.clone();
        let (reply_key, events_key) = (reply_key(robot), events_key(robot));
        session
            .declare_subscriber(cmd_key(robot))
            .callback(move |sample| {
                let payload = sample.payload().to_bytes();
                let (reply, refusal) = match parse_command(&payload) {
                    Ok(command) => {
                        remote.request(command);
                        counters.commands_accepted.fetch_add(1, Ordering::Relaxed);
                        (ReplyMsg { accepted: true, command: Some(command.name()), reason: None }, None)
                    }
                    Err(reason) => {
                        counters.refused.fetch_add(1, Ordering::Relaxed);
                        (ReplyMsg { accepted: false, command: None, reason: None }, Some(reason))
                    }
                };
                let refusal = refusal.map(|e: RemoteCommandError| e.to_string());
                let reply = ReplyMsg { reason: refusal.as_deref(), ..reply };
                let put = |key: &str, bytes: Vec<u8>, counter: (&AtomicU64, &AtomicU64)| {
                    let n = bytes.len() as u64;
                    match reply_session.put(key, bytes).congestion_control(CongestionControl::Drop).wait() {
                        Ok(()) => {
                            counter.0.fetch_add(1, Ordering::Relaxed);
                            counter.1.fetch_add(n, Ordering::Relaxed);
                        }
                        Err(_) => {
                            counters.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                };
                if let Ok(bytes) = serde_json::to_vec(&reply) {
                    put(&reply_key, bytes, (&counters.reply_messages, &counters.reply_bytes));
                }
                if let Some(reason) = refusal.as_deref() {
                    let event = EventOut {
                        stamp_us: rtloop_tlog::realtime::now_us(),
                        bus: 0,
                        servo: 0,
                        kind: "remote_refused",
                        reason: Some(reason),
                    };
                    if let Ok(bytes) = serde_json::to_vec(&event) {
                        put(&events_key, bytes, (&counters.event_messages, &counters.event_bytes));
                    }
                }
            })
            .wait()
            .map_err(put_error)?
    };

    let (state_tx, mut state_rx) = rtrb::RingBuffer::<Vec<u8>>::new(STATE_QUEUE);
    let (events_tx, mut events_rx) = rtrb::RingBuffer::<Vec<u8>>::new(EVENT_QUEUE);
    let closing = Arc::new(AtomicBool::new(false));
    let worker = {
        let counters = Arc::clone(&counters);
        let closing = Arc::clone(&closing);
        std::thread::Builder::new()
            .name("rtloop-zenoh".into())
            .spawn(move || {
                let put = |publisher: &::zenoh::pubsub::Publisher<'_>,
                           bytes: Vec<u8>,
                           messages: &AtomicU64,
                           total: &AtomicU64| {
                    let n = bytes.len() as u64;
                    match publisher.put(bytes).wait() {
                        Ok(()) => {
                            messages.fetch_add(1, Ordering::Relaxed);
                            total.fetch_add(n, Ordering::Relaxed);
                        }
                        Err(_) => {
                            counters.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                };
                loop {
                    // Read before draining: whatever was queued before `closing` is sent.
                    let last = closing.load(Ordering::Acquire);
                    let mut any = false;
                    while let Ok(bytes) = events_rx.pop() {
                        put(&events_pub, bytes, &counters.event_messages, &counters.event_bytes);
                        any = true;
                    }
                    if let Ok(bytes) = state_rx.pop() {
                        put(&state_pub, bytes, &counters.state_messages, &counters.state_bytes);
                        any = true;
                    }
                    if last && !any {
                        break;
                    }
                    if !any {
                        std::thread::park_timeout(Duration::from_millis(20));
                    }
                }
            })
            .map_err(LiveError::Thread)?
    };
    let sink = ZenohSink {
        robot: robot.to_string(),
        endpoint: format!("rtloop/{robot}/** ({what})"),
        imu: true,
        counters,
        state_tx,
        events_tx,
        closing,
        worker: Some(worker),
        session,
        subscriber: Some(subscriber),
        cycles: 0,
        events: 0,
    };
    Ok(Publisher::new(Box::new(sink), every))
}

impl ZenohSink {
    fn wake(&self) {
        if let Some(w) = &self.worker {
            w.thread().unpark();
        }
    }
}

impl LiveSink for ZenohSink {
    fn start(&mut self, robot: &LiveRobot) {
        self.imu = robot.imu;
    }

    fn cycle(&mut self, cycle: &LiveCycle<'_>) {
        self.cycles += 1;
        if self.state_tx.is_full() {
            // Serialising a message that cannot be queued would only cost time.
            self.counters.state_dropped.fetch_add(1, Ordering::Relaxed);
            self.wake();
            return;
        }
        let msg = StateMsg {
            robot: &self.robot,
            stamp_us: cycle.stamp_us,
            timing: cycle.timing,
            imu: self.imu.then_some(cycle.imu),
            servos: cycle.servos.iter().map(ServoStateMsg::from_log).collect(),
            commands: cycle.servos.iter().map(ServoCommandMsg::from_log).collect(),
        };
        match serde_json::to_vec(&msg) {
            Ok(bytes) => {
                let n = bytes.len() as u64;
                self.counters.state_max_bytes.fetch_max(n, Ordering::Relaxed);
                if self.state_tx.push(bytes).is_err() {
                    self.counters.state_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.wake();
    }

    fn event(&mut self, stamp_us: i64, event: &EventMsg<'_>) {
        self.events += 1;
        let msg = EventOut { stamp_us, bus: event.bus, servo: event.servo, kind: event.kind, reason: None };
        match serde_json::to_vec(&msg) {
            Ok(bytes) => {
                if self.events_tx.push(bytes).is_err() {
                    self.counters.events_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.wake();
    }

    fn stats(&self) -> LiveStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let detail: BTreeMap<String, u64> = [
            ("state_messages", get(&c.state_messages)),
            ("state_bytes", get(&c.state_bytes)),
            ("state_max_bytes", get(&c.state_max_bytes)),
            ("state_dropped", get(&c.state_dropped)),
            ("event_messages", get(&c.event_messages)),
            ("event_bytes", get(&c.event_bytes)),
            ("events_dropped", get(&c.events_dropped)),
            ("reply_messages", get(&c.reply_messages)),
            ("reply_bytes", get(&c.reply_bytes)),
            ("commands_accepted", get(&c.commands_accepted)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        LiveStats {
            sink: "zenoh".into(),
            endpoint: self.endpoint.clone(),
            cycles: self.cycles,
            events: self.events,
            messages: get(&c.state_messages) + get(&c.event_messages) + get(&c.reply_messages),
            dropped: get(&c.state_dropped) + get(&c.events_dropped),
            refused: get(&c.refused),
            errors: get(&c.errors),
            detail,
        }
    }

    fn finish(&mut self) {
        self.closing.store(true, Ordering::Release);
        if let Some(w) = self.worker.take() {
            w.thread().unpark();
            if w.join().is_err() {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(s) = self.subscriber.take() {
            let _ = s.undeclare().wait();
        }
        let _ = self.session.close().wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_three_commands_parse_as_text_or_json() {
        for (name, command) in RemoteCommand::ALL {
            assert_eq!(parse_command(name.as_bytes()), Ok(command));
            assert_eq!(parse_command(format!("  {name}\n").as_bytes()), Ok(command));
            assert_eq!(parse_command(format!("{{\"command\": \"{name}\"}}").as_bytes()), Ok(command));
        }
    }

    #[test]
    fn anything_else_is_refused_with_one_sentence() {
        let long = vec![b's'; MAX_COMMAND_BYTES + 1];
        let cases: [(&[u8], &str); 10] = [
            (b"", "empty"),
            (b"   ", "empty"),
            (b"STOP", "not a command"),
            (b"stop now", "not a command"),
            (b"\xff\xfe", "not UTF-8"),
            (b"{\"command\": 1}", "not a string"),
            (b"{\"cmd\": \"stop\"}", "unknown field"),
            (b"{}", "no \"command\""),
            (b"{\"command\": \"stop\"", "not valid JSON"),
            (&long, "too long"),
        ];
        assert_eq!(parse_command(b"{}"), Err(RemoteCommandError::NoCommand));
        assert_eq!(parse_command(b"  jump "), Err(RemoteCommandError::Unknown { name: "jump".into() }));
        for (payload, why) in cases {
            let e = parse_command(payload).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("give stop, zero_velocity or rearm"), "{payload:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    proptest! {
        #[test]
        fn any_bytes_are_refused_or_one_of_the_three(payload in proptest::collection::vec(any::<u8>(), 0..400)) {
            match parse_command(&payload) {
                Ok(c) => {
                    let text = std::str::from_utf8(&payload).unwrap().trim();
                    prop_assert!(text == c.name() || text.contains(c.name()));
                }
                Err(e) => prop_assert!(!e.to_string().is_empty() && !e.to_string().contains('\n')),
            }
        }

        #[test]
        fn any_text_is_refused_or_one_of_the_three(text in "\\PC{0,80}") {
            let _ = parse_command(text.as_bytes());
            let json = serde_json::json!({"command": text}).to_string();
            match parse_command(json.as_bytes()) {
                Ok(c) => prop_assert_eq!(c.name(), text.as_str()),
                Err(e) => prop_assert!(!e.to_string().contains('\n')),
            }
        }
    }

    #[test]
    fn keys_are_under_rtloop_and_the_robot_and_valid_zenoh_keys() {
        assert_eq!(state_key("a"), "rtloop/a/state");
        assert_eq!(events_key("robot-1"), "rtloop/robot-1/events");
        assert_eq!(cmd_key("b_2"), "rtloop/b_2/cmd");
        assert_eq!(reply_key("b"), "rtloop/b/cmd/reply");
        for name in ["a", "robot-1", "B_2", &"x".repeat(64)] {
            crate::config::check_robot_name(name).unwrap();
            for key in [state_key(name), events_key(name), cmd_key(name), reply_key(name)] {
                assert!(::zenoh::key_expr::KeyExpr::new(key.clone()).is_ok(), "{key}");
            }
        }
        // The state key does not match the command key's subscription and vice versa.
        let cmd = ::zenoh::key_expr::KeyExpr::new(cmd_key("a")).unwrap();
        assert!(!cmd.intersects(&::zenoh::key_expr::KeyExpr::new(reply_key("a")).unwrap()));
    }

    #[test]
    fn endpoints_are_loopback_or_not() {
        for ok in [
            "tcp/127.0.0.1:7447",
            "udp/127.0.0.1:0",
            "tcp/[::1]:7447",
            "tcp/localhost:7447",
            "tcp/127.0.0.1:7447#iface=lo",
        ] {
            assert!(is_loopback_endpoint(ok), "{ok}");
        }
        for bad in
            ["tcp/0.0.0.0:7447", "tcp/[::]:0", "tcp/10.0.0.1:7447", "tcp/router.example:7447", "garbage", "tcp/1.2.3.4"]
        {
            assert!(!is_loopback_endpoint(bad), "{bad}");
        }
    }

    fn live(zenoh: &str, allow_remote: bool) -> LiveConfig {
        LiveConfig { zenoh: Some(zenoh.into()), allow_remote, ..LiveConfig::default() }
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        use std::io::Write;
        let mut f = tempfile::Builder::new().suffix(".json5").tempfile().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn the_default_peer_is_loopback_only() {
        let c = session_config(&live("peer", false)).unwrap();
        check_loopback(&c).unwrap();
        assert!(check_loopback(&peer_config(true).unwrap()).is_err(), "zenoh's default peer reaches the network");
    }

    #[test]
    fn a_config_file_reaching_the_network_needs_allow_remote() {
        let router = file(r#"{ mode: "client", connect: { endpoints: ["tcp/10.77.0.1:7447"] } }"#);
        let path = router.path().to_str().unwrap();
        let e = session_config(&live(path, false)).unwrap_err().to_string();
        assert!(e.contains("tcp/10.77.0.1:7447") && e.contains("--allow-remote") && !e.contains('\n'), "{e}");
        assert!(session_config(&live(path, true)).is_ok());

        // A peer that leaves listen endpoints to zenoh listens on every interface.
        let default_listen = file(r#"{ mode: "peer", scouting: { multicast: { enabled: false } } }"#);
        let e = session_config(&live(default_listen.path().to_str().unwrap(), false)).unwrap_err().to_string();
        assert!(e.contains("listens on tcp/[::]:0"), "{e}");

        let multicast = file(r#"{ mode: "peer", listen: { endpoints: ["tcp/127.0.0.1:0"] } }"#);
        let e = session_config(&live(multicast.path().to_str().unwrap(), false)).unwrap_err().to_string();
        assert!(e.contains("multicast scouting"), "{e}");

        let local = file(
            r#"{ mode: "peer", listen: { endpoints: { peer: ["tcp/127.0.0.1:0"] } },
                 connect: { endpoints: ["tcp/127.0.0.1:7999"] }, scouting: { multicast: { enabled: false } } }"#,
        );
        assert!(session_config(&live(local.path().to_str().unwrap(), false)).is_ok());
    }

    #[test]
    fn a_config_that_does_not_parse_or_does_not_exist_is_one_sentence() {
        let garbage = file("{ mode: ");
        let e = session_config(&live(garbage.path().to_str().unwrap(), false)).unwrap_err().to_string();
        assert!(e.contains("not a zenoh configuration") && !e.contains('\n'), "{e}");
        let wrong = file(r#"{ mode: "emperor" }"#);
        let e = session_config(&live(wrong.path().to_str().unwrap(), false)).unwrap_err().to_string();
        assert!(e.contains("not a zenoh configuration") && !e.contains('\n'), "{e}");
        let e = session_config(&live("/nonexistent/zenoh.json5", false)).unwrap_err().to_string();
        assert!(e.contains("no such file") && !e.contains('\n'), "{e}");
    }
}
