//! The Foxglove WebSocket server of `rtloop run --foxglove` and `rtloop log serve`: the
//! Foxglove WebSocket protocol (subprotocols `foxglove.sdk.v1` and its original name
//! `foxglove.websocket.v1`; [`protocol`]) served by a server of ours on `tokio-tungstenite`
//! ([`server`], which says why not the Foxglove SDK's); JSON messages with JSON schemas, one
//! channel per message kind and per servo.
//!
//! **Channels** (advertised at [`LiveSink::start`]): `/cycle` (`rtloop.CycleTiming`),
//! `/bus/B/servo/ID/state` (`rtloop.ServoState`), `/bus/B/servo/ID/command`
//! (`rtloop.ServoCommand`), `/imu` (`rtloop.Imu`), `/imu/transform` (the well-known
//! `foxglove.FrameTransform`, so the 3D panel shows the body turning), `/events` (the
//! well-known `foxglove.Log`, so the Log panel lists them with a level). Every message's
//! log time is the cycle's wall-clock stamp, ns.
//!
//! **Threads and drops.** The telemetry thread (which also writes the log file) only moves
//! each cycle into a bounded queue ([`QUEUE_LEN`] items; `try_send`, never waiting): a full
//! queue drops the item and counts its messages in `dropped`. A publisher thread of ours
//! serialises into reused buffers and queues each message for every client subscribed to its
//! channel; a client whose queue is full ([`server::CLIENT_QUEUE_BYTES`]) loses that message,
//! counted in `dropped` and `detail.client_queue_dropped` — exact counts, per message.
//!
//! **Refused input** is answered with an error status to that client and counted in
//! `refused` and `detail` (see [`server`] for every limit).
//!
//! Must never: listen beyond loopback unless asked (`allow_remote`); block the telemetry
//! thread on a client or on the server (a full queue drops and counts); let a client's
//! input panic anything or reach the loop; take longer than [`server::CLOSE_TIMEOUT`] (plus
//! the linger asked for) to finish, whatever the clients do.

pub mod protocol;
pub mod server;

use super::{CycleTiming, EventMsg, ImuMsg, LiveCycle, LiveError, LiveRobot, LiveSink, LiveStats, Publisher, Quat};
use super::{ServoCommandMsg, ServoStateMsg};
use crate::live::LiveConfig;
use crate::telemetry::ServoLog;
use protocol::Time;
use serde::Serialize;
use serde_json::Value as Json;
use server::{Channel, Server};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

pub use super::address::{parse_address, AddressError, DEFAULT_ADDRESS};
pub use protocol::{PlaybackCommand, PlaybackControlRequest, PlaybackState, PlaybackStatus, Status};
pub use server::PlaybackHandler;
pub use server::OPEN_FILES;

/// Items (cycles, events) the telemetry thread may queue for the publisher thread before
/// it drops: 256 cycles is a quarter second at every cycle of 1 kHz.
pub const QUEUE_LEN: usize = 256;

/// Start the server `config.foxglove` names (bound before the run starts, so a taken port
/// is an error now rather than a silent run without a view).
pub fn publisher(config: &LiveConfig) -> Result<Publisher, LiveError> {
    let addr = parse_address(config.foxglove.as_deref().unwrap_or(DEFAULT_ADDRESS), config.allow_remote)?;
    let every = super::check_every("--foxglove-every", config.foxglove_every)?;
    let sink = FoxgloveSink::bind(
        addr,
        ServeOptions { name: format!("rtloop {}", config.robot_name()), ..Default::default() },
    )?;
    Ok(Publisher::new(Box::new(sink), every))
}

/// The topic of one servo's `what` (`state`, `command`).
pub fn servo_topic(bus: u8, id: u8, what: &str) -> String {
    format!("/bus/{bus}/servo/{id}/{what}")
}

/// The `foxglove.Log` level of an event kind: faults, the safe mode, a fall and a plant gone
/// unstable are errors, a servo going quiet a warning, the rest (shutdown, answering again,
/// re-armed, …) information.
pub fn event_level(kind: &str) -> u8 {
    const WARNING: u8 = 3;
    const ERROR: u8 = 4;
    const INFO: u8 = 2;
    match kind {
        "fault" | "watchdog_timeout" | "safe_mode_engaged" | "fall" | "fall_low" | "physics_unstable" => ERROR,
        "missing_replies" | "stale_timeout_cleared" => WARNING,
        k if k.contains("fault") || k.contains("timeout") || k.contains("refused") => WARNING,
        _ => INFO,
    }
}

/// JSON schemas of the well-known Foxglove messages this server sends as JSON (those of
/// the 3D view are [`crate::scene::schemas`]).
pub mod wellknown {
    use serde_json::{json, Value as Json};

    fn time() -> Json {
        json!({"type": "object", "properties": {
            "sec": {"type": "integer", "minimum": 0}, "nsec": {"type": "integer", "minimum": 0, "maximum": 999_999_999}},
            "required": ["sec", "nsec"]})
    }

    /// `foxglove.Log` (level: 0 unknown, 1 debug, 2 info, 3 warning, 4 error, 5 fatal).
    pub fn log() -> Json {
        json!({"title": "foxglove.Log", "type": "object", "properties": {
            "timestamp": time(), "level": {"type": "integer", "minimum": 0, "maximum": 5},
            "message": {"type": "string"}, "name": {"type": "string"}, "file": {"type": "string"},
            "line": {"type": "integer", "minimum": 0}},
            "required": ["timestamp", "level", "message", "name", "file", "line"]})
    }
}

#[derive(Serialize)]
struct LogMsg<'a> {
    timestamp: Time,
    level: u8,
    message: &'a str,
    name: &'static str,
    file: &'static str,
    line: u32,
}

/// The attitude in Foxglove's z-up world: the pi3hat frame is x forward, y right, z down;
/// turning both the world and the body half a turn about x (x forward, y left, z up)
/// negates the quaternion's y and z.
fn z_up(q: Quat) -> Quat {
    Quat { x: q.x, y: -q.y, z: -q.z, w: q.w }
}

/// Nanoseconds since the epoch of a µs stamp (0 before the epoch).
fn stamp_ns(stamp_us: i64) -> u64 {
    u64::try_from(stamp_us).unwrap_or(0).saturating_mul(1000)
}

/// Counters shared by the sink, the publisher thread and the server's tasks.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    cycles: AtomicU64,
    events: AtomicU64,
    messages: AtomicU64,
    dropped: AtomicU64,
    errors: AtomicU64,
    detail: [AtomicU64; DETAIL.len()],
}

/// What each `detail` counter counts, by name, and whether it is a refusal (counted in
/// `refused` too), in the order of [`Detail`].
const DETAIL: [(&str, bool); 24] = [
    ("clients_connected", false),
    ("clients_disconnected", false),
    ("clients_legacy_subprotocol", false),
    ("clients_refused", true),
    ("connections_refused", true),
    ("connections_abandoned", false),
    ("handshakes_timed_out", true),
    ("handshakes_refused", true),
    ("subscriptions", false),
    ("unsubscriptions", false),
    ("refused_malformed", true),
    ("refused_unknown_channel", true),
    ("refused_unsupported", true),
    ("refused_too_large", true),
    ("refused_other", true),
    ("receive_errors", true),
    ("connection_errors", false),
    ("client_queue_dropped", false),
    ("clients_dropped_slow", false),
    ("clients_closed_hard", false),
    ("queue_dropped_items", false),
    ("playback_requests", false),
    ("accept_errors", false),
    ("refused_playback", true),
];

/// The `detail` counters (see [`DETAIL`] for their names).
#[derive(Clone, Copy)]
pub(crate) enum Detail {
    /// Clients whose handshake succeeded.
    ClientsConnected,
    /// Clients gone (closed by them, by us, or at the end).
    ClientsDisconnected,
    /// Clients that offered only `foxglove.websocket.v1`.
    ClientsLegacySubprotocol,
    /// Handshakes refused with HTTP 503: [`server::MAX_CLIENTS`] were connected.
    ClientsRefused,
    /// Connections closed at once: [`server::MAX_HANDSHAKING`] were in their handshake.
    ConnectionsRefused,
    /// Connections closed (or reset) by the peer before a whole handshake: not a refusal.
    ConnectionsAbandoned,
    /// Handshakes not complete within [`server::HANDSHAKE_TIMEOUT`].
    HandshakesTimedOut,
    /// Handshakes refused: not a WebSocket upgrade, no Foxglove subprotocol offered, a head
    /// over 64 KiB.
    HandshakesRefused,
    /// Subscriptions made.
    Subscriptions,
    /// Subscriptions ended by the client.
    Unsubscriptions,
    /// Client messages that are not the protocol's.
    RefusedMalformed,
    /// Subscriptions to a channel that does not exist.
    RefusedUnknownChannel,
    /// Operations this server does not offer (publishing, services, parameters, …).
    RefusedUnsupported,
    /// Client messages over [`server::CLIENT_MESSAGE_MAX`] (the connection is closed).
    RefusedTooLarge,
    /// Anything else refused (a duplicate subscription, an unknown subscription id).
    RefusedOther,
    /// WebSocket protocol violations (the connection is closed).
    ReceiveErrors,
    /// Connections reset by the peer after the handshake.
    ConnectionErrors,
    /// Messages a client's full queue did not take (also in `dropped`).
    ClientQueueDropped,
    /// Clients closed because a control message did not fit their queue.
    ClientsDroppedSlow,
    /// Clients still connected [`server::CLOSE_TIMEOUT`] after the close frame: dropped.
    ClientsClosedHard,
    /// Items (cycles, events) the telemetry thread's full queue dropped.
    QueueDroppedItems,
    /// Playback control requests (`rtloop log serve`).
    PlaybackRequests,
    /// Failed accepts (out of file descriptors, …).
    AcceptErrors,
    /// Playback requests refused (a speed out of range: `rtloop log serve`).
    RefusedPlayback,
}

impl Counters {
    pub(crate) fn add(&self, d: Detail, n: u64) {
        self.detail[d as usize].fetch_add(n, Ordering::Relaxed);
    }
    fn get(&self, d: Detail) -> u64 {
        self.detail[d as usize].load(Ordering::Relaxed)
    }
    /// Every refusal: the sum of the refusal counters.
    fn refused(&self) -> u64 {
        DETAIL
            .iter()
            .zip(&self.detail)
            .filter(|((_, refusal), _)| *refusal)
            .map(|(_, v)| v.load(Ordering::Relaxed))
            .sum()
    }
}

/// How to start a server.
#[derive(Default)]
pub struct ServeOptions {
    /// The name clients show.
    pub name: String,
    /// A log's time range, ns since the epoch, and what to do with the app's playback
    /// requests: offers the `playbackControl` capability.
    pub playback: Option<((u64, u64), PlaybackHandler)>,
}

/// Every channel of a robot.
struct Channels {
    cycle: Arc<Channel>,
    /// (state, command) per servo, in cycle order.
    servos: Vec<(Arc<Channel>, Arc<Channel>)>,
    imu: Option<(Arc<Channel>, Arc<Channel>)>,
    events: Arc<Channel>,
    /// The 3D view (runs with physics): the scene (latched) and every body's transform.
    model: Option<(Arc<Channel>, Arc<Channel>)>,
}

/// One JSON channel with a JSON schema (named by the schema's `title`).
fn json_channel(server: &Server, topic: &str, schema: &Json) -> Result<Arc<Channel>, LiveError> {
    let name = schema["title"].as_str().unwrap_or(topic).to_string();
    let text =
        serde_json::to_string(schema).map_err(|source| LiveError::Schema { topic: topic.to_string(), source })?;
    Ok(server.add_channel(topic, &name, text))
}

impl Channels {
    fn advertise(server: &Server, robot: &LiveRobot) -> Result<Self, LiveError> {
        use super::schemas;
        let mut servos = Vec::with_capacity(robot.servos.len());
        for &(bus, id) in &robot.servos {
            servos.push((
                json_channel(server, &servo_topic(bus, id, "state"), &schemas::servo_state())?,
                json_channel(server, &servo_topic(bus, id, "command"), &schemas::servo_command())?,
            ));
        }
        let imu = if robot.imu {
            Some((
                json_channel(server, "/imu", &schemas::imu())?,
                json_channel(server, "/imu/transform", &crate::scene::schemas::frame_transform())?,
            ))
        } else {
            None
        };
        let model = if robot.model.is_some() {
            Some((
                json_channel(server, crate::scene::SCENE_TOPIC, &crate::scene::schemas::scene_update())?,
                json_channel(server, crate::scene::TRANSFORMS_TOPIC, &crate::scene::schemas::frame_transforms())?,
            ))
        } else {
            None
        };
        Ok(Channels {
            cycle: json_channel(server, "/cycle", &schemas::cycle_timing())?,
            servos,
            imu,
            events: json_channel(server, "/events", &wellknown::log())?,
            model,
        })
    }
}

/// A cycle as the publisher thread gets it (owned: the telemetry thread's borrow ends).
#[derive(Clone, Copy)]
struct OwnedCycle {
    stamp_us: i64,
    timing: CycleTiming,
    imu: ImuMsg,
    servos_len: usize,
    servos: [ServoLog; crate::controller::MAX_SERVOS],
    body: crate::telemetry::BodyLog,
}

// A cycle stays inline in the queue: the queue's slots are allocated once, up front.
#[allow(clippy::large_enum_variant)]
enum Item {
    Cycle(OwnedCycle),
    Event {
        stamp_us: i64,
        bus: u8,
        servo: u8,
        kind: String,
    },
    /// Send the 3D scene again, stamped `stamp_us` (`rtloop log serve` after a seek: the app
    /// forgets what it had).
    Scene {
        stamp_us: i64,
    },
    /// A message on a channel of the caller's (`rtloop log serve`'s `/log/<record>`).
    Raw {
        channel: Arc<Channel>,
        stamp_us: i64,
        payload: Vec<u8>,
    },
}

/// The publisher thread: serialise each item into reused buffers, queue it for the clients.
fn publish_loop(
    rx: Receiver<Item>,
    channels: Channels,
    server: Arc<Server>,
    counters: Arc<Counters>,
    mut scene: Option<crate::scene::Scene3d>,
) {
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut text = String::with_capacity(128);
    let mut scene_sent = false;
    let mut rate = crate::scene::RateLimit::default();
    let mut transforms: Vec<u8> = Vec::with_capacity(4096);
    let mut send = |channel: &Channel, stamp_ns: u64, encode: &dyn Fn(&mut Vec<u8>) -> serde_json::Result<()>| {
        if !channel.has_sinks() {
            return;
        }
        buf.clear();
        match encode(&mut buf) {
            Ok(()) => {
                if server.publish(channel, stamp_ns, &buf) > 0 {
                    counters.messages.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    while let Ok(item) = rx.recv() {
        match item {
            Item::Cycle(c) => {
                let ns = stamp_ns(c.stamp_us);
                send(&channels.cycle, ns, &|b| serde_json::to_writer(b, &c.timing));
                for (s, (state, command)) in c.servos[..c.servos_len].iter().zip(&channels.servos) {
                    send(state, ns, &|b| serde_json::to_writer(b, &ServoStateMsg::from_log(s)));
                    send(command, ns, &|b| serde_json::to_writer(b, &ServoCommandMsg::from_log(s)));
                }
                let body = c.body.present.then_some(&c.body);
                if let Some((imu, transform)) = &channels.imu {
                    send(imu, ns, &|b| serde_json::to_writer(b, &c.imu));
                    let o = z_up(c.imu.orientation);
                    let position = body.map_or([0.0; 3], |b| b.state.position_m);
                    send(transform, ns, &|b| {
                        crate::scene::frame_transform_json(b, ns, "world", "body", position, [o.w, o.x, o.y, o.z])
                    });
                }
                if let (Some(s), Some((scene_ch, tf_ch)), Some(b)) = (scene.as_mut(), &channels.model, body) {
                    if !scene_sent {
                        let json = s.scene_update(ns);
                        if !server.set_latched(scene_ch, ns, &json) {
                            counters.errors.fetch_add(1, Ordering::Relaxed);
                            server.broadcast_status(&Status::warning(format!(
                                "no 3D view: the model's scene is {} MB of JSON, more than the {} MB a client is sent",
                                json.len() >> 20,
                                server::MAX_LATCHED_BYTES >> 20
                            )));
                        }
                        scene_sent = true;
                    }
                    let n = usize::from(b.qpos_len).min(b.qpos.len());
                    if tf_ch.has_sinks() && n > 0 && rate.due(ns) {
                        if s.transforms(ns, &b.qpos[..n], &mut transforms) {
                            if server.publish(tf_ch, ns, &transforms) > 0 {
                                counters.messages.fetch_add(1, Ordering::Relaxed);
                            }
                        } else {
                            counters.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            Item::Scene { stamp_us } => {
                if let (Some(s), Some((scene_ch, _)), true) = (scene.as_ref(), &channels.model, scene_sent) {
                    let ns = stamp_ns(stamp_us);
                    let _ = server.set_latched(scene_ch, ns, &s.scene_update(ns));
                    rate = crate::scene::RateLimit::default();
                }
            }
            Item::Event { stamp_us, bus, servo, kind } => {
                let ns = stamp_ns(stamp_us);
                let m = log_message(ns, &EventMsg { bus, servo, kind: &kind }, &mut text);
                send(&channels.events, ns, &|b| serde_json::to_writer(b, &m));
            }
            Item::Raw { channel, stamp_us, payload } => {
                send(&channel, stamp_ns(stamp_us), &|b| {
                    b.extend_from_slice(&payload);
                    Ok(())
                });
            }
        }
    }
}

/// The Foxglove server as a [`LiveSink`] (see the module doc).
pub struct FoxgloveSink {
    addr: SocketAddr,
    counters: Arc<Counters>,
    server: Option<Arc<Server>>,
    runtime: Option<tokio::runtime::Runtime>,
    tx: Option<SyncSender<Item>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Messages one cycle makes (to count a dropped cycle's messages).
    per_cycle: u64,
    /// How long [`LiveSink::finish`] leaves clients to read what is queued.
    linger: std::time::Duration,
    /// The 3D view's model, given before [`LiveSink::start`] (`rtloop log serve`).
    scene: Option<crate::scene::Scene3d>,
    /// Why the run's model cannot be shown in 3D.
    scene_error: Option<String>,
}

impl std::fmt::Debug for FoxgloveSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FoxgloveSink").field("addr", &self.addr).finish_non_exhaustive()
    }
}

/// Stack of the server's runtime threads: its tasks are small state machines, and under
/// `mlockall` every byte of a thread's stack is resident.
const RUNTIME_STACK: usize = 256 * 1024;

impl FoxgloveSink {
    /// Start serving on `addr` (port 0: any free port; see [`FoxgloveSink::addr`]) on a
    /// runtime of its own (one worker thread); channels come with [`LiveSink::start`].
    pub fn bind(addr: SocketAddr, options: ServeOptions) -> Result<Self, LiveError> {
        let counters = Arc::new(Counters::default());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .thread_stack_size(RUNTIME_STACK)
            .thread_name("rtloop-foxglove")
            .enable_all()
            .build()
            .map_err(LiveError::FoxgloveRuntime)?;
        let listener = std::net::TcpListener::bind(addr).map_err(|source| {
            if source.kind() == std::io::ErrorKind::AddrInUse {
                LiveError::PortTaken { addr }
            } else {
                LiveError::CannotBind { addr, source }
            }
        })?;
        let server = Server::start(
            &runtime,
            listener,
            server::Options { name: options.name, playback: options.playback },
            Arc::clone(&counters),
        )
        .map_err(|source| LiveError::CannotServe { addr, source })?;
        Ok(FoxgloveSink {
            addr: server.addr(),
            counters,
            server: Some(Arc::new(server)),
            runtime: Some(runtime),
            tx: None,
            thread: None,
            per_cycle: 1,
            linger: std::time::Duration::ZERO,
            scene: None,
            scene_error: None,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Clients connected now.
    pub fn client_count(&self) -> usize {
        self.server.as_ref().map_or(0, |s| s.client_count())
    }

    /// Subscriptions made so far (never fewer than those active now).
    pub fn subscriptions(&self) -> u64 {
        self.counters.get(Detail::Subscriptions)
    }

    /// Subscribes and unsubscribes so far: it moves while clients are still choosing their
    /// channels.
    pub fn subscription_changes(&self) -> u64 {
        self.counters.get(Detail::Subscriptions) + self.counters.get(Detail::Unsubscriptions)
    }

    /// Send every client a status message (shown by the app; `rtloop log serve` explains a
    /// refused playback request with one).
    pub fn publish_status(&self, status: Status) {
        if let Some(s) = &self.server {
            s.broadcast_status(&status);
        }
    }

    /// Advertise a JSON channel of the caller's (`rtloop log serve`'s `/log/<record>`).
    pub fn advertise_json(&self, topic: &str, schema: &Json) -> Result<Arc<Channel>, LiveError> {
        match &self.server {
            Some(s) => json_channel(s, topic, schema),
            None => Err(LiveError::Finished),
        }
    }

    /// Queue one JSON message on a channel of [`FoxgloveSink::advertise_json`]'s (counted
    /// as dropped when the queue is full).
    pub fn publish_raw(&mut self, channel: &Arc<Channel>, stamp_us: i64, payload: Vec<u8>) {
        if !channel.has_sinks() {
            return;
        }
        self.enqueue(Item::Raw { channel: Arc::clone(channel), stamp_us, payload }, 1);
    }

    /// The 3D view's model, loaded by the caller (`rtloop log serve`, which checked it against
    /// the log): used at [`LiveSink::start`] when the robot has a model.
    pub fn set_scene(&mut self, scene: crate::scene::Scene3d) {
        self.scene = Some(scene);
    }

    /// Why the run's model is not shown in 3D (it did not load, or is not the run's).
    pub fn scene_error(&self) -> Option<&str> {
        self.scene_error.as_deref()
    }

    /// Send the 3D scene again, stamped `stamp_us` (after a seek the app has forgotten it).
    pub fn resend_scene(&mut self, stamp_us: i64) {
        self.enqueue(Item::Scene { stamp_us }, 1);
    }

    /// Tell every client where playback is (`rtloop log serve`).
    pub fn broadcast_playback_state(&self, state: PlaybackState) {
        if let Some(s) = &self.server {
            s.broadcast_playback_state(&state);
        }
    }

    /// Leave clients `linger` to read what is queued when [`LiveSink::finish`] stops the
    /// server (`rtloop log serve --exit-at-end`; a live run stops at once).
    pub fn set_linger(&mut self, linger: std::time::Duration) {
        self.linger = linger;
    }

    /// Count a playback request refused outside the server (a speed out of range).
    pub fn note_refused_playback(&self) {
        self.counters.add(Detail::RefusedPlayback, 1);
    }

    fn enqueue(&mut self, item: Item, messages: u64) {
        let Some(tx) = &self.tx else { return };
        match tx.try_send(item) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.counters.dropped.fetch_add(messages, Ordering::Relaxed);
                self.counters.add(Detail::QueueDroppedItems, 1);
            }
            Err(TrySendError::Disconnected(_)) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl LiveSink for FoxgloveSink {
    fn start(&mut self, robot: &LiveRobot) {
        let Some(server) = &self.server else { return };
        let channels = match Channels::advertise(server, robot) {
            Ok(c) => c,
            Err(_) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        self.per_cycle = 1 + 2 * robot.servos.len() as u64 + if robot.imu { 2 } else { 0 };
        // The 3D view's model, loaded now (before the run, never on the telemetry thread),
        // unless the caller gave it already; a model that cannot be shown is said to every
        // client that connects (a status) and counted in `errors`.
        let mut scene = self.scene.take();
        if let (None, Some(record)) = (&scene, &robot.model) {
            match crate::scene::Scene3d::for_model(record) {
                Ok(s) => scene = Some(s),
                Err(e) => {
                    self.counters.errors.fetch_add(1, Ordering::Relaxed);
                    self.scene_error = Some(e.to_string());
                }
            }
        }
        if channels.model.is_none() {
            scene = None;
        }
        let (tx, rx) = sync_channel(QUEUE_LEN);
        let counters = Arc::clone(&self.counters);
        let server = Arc::clone(server);
        match std::thread::Builder::new()
            .name("rtloop-foxglove-pub".into())
            .stack_size(RUNTIME_STACK)
            .spawn(move || publish_loop(rx, channels, server, counters, scene))
        {
            Ok(t) => {
                self.tx = Some(tx);
                self.thread = Some(t);
            }
            Err(_) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn cycle(&mut self, cycle: &LiveCycle<'_>) {
        self.counters.cycles.fetch_add(1, Ordering::Relaxed);
        let n = cycle.servos.len().min(crate::controller::MAX_SERVOS);
        let mut owned = OwnedCycle {
            stamp_us: cycle.stamp_us,
            timing: cycle.timing,
            imu: cycle.imu,
            servos_len: n,
            servos: [ServoLog::default(); crate::controller::MAX_SERVOS],
            body: cycle.body.copied().unwrap_or_default(),
        };
        owned.servos[..n].copy_from_slice(&cycle.servos[..n]);
        self.enqueue(Item::Cycle(owned), self.per_cycle);
    }

    fn event(&mut self, stamp_us: i64, event: &EventMsg<'_>) {
        self.counters.events.fetch_add(1, Ordering::Relaxed);
        let item = Item::Event { stamp_us, bus: event.bus, servo: event.servo, kind: event.kind.to_string() };
        self.enqueue(item, 1);
    }

    fn stats(&self) -> LiveStats {
        let c = &self.counters;
        let detail: BTreeMap<String, u64> =
            DETAIL.iter().zip(&c.detail).map(|((k, _), v)| (k.to_string(), v.load(Ordering::Relaxed))).collect();
        LiveStats {
            sink: "foxglove".into(),
            endpoint: format!("ws://{}", self.addr),
            cycles: c.cycles.load(Ordering::Relaxed),
            events: c.events.load(Ordering::Relaxed),
            messages: c.messages.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            refused: c.refused(),
            errors: c.errors.load(Ordering::Relaxed),
            detail,
        }
    }

    /// Bounded: the publisher thread drains a bounded queue without waiting on any client,
    /// then the clients get the linger and [`server::CLOSE_TIMEOUT`], then every socket is
    /// dropped.
    fn finish(&mut self) {
        // The publisher thread drains what is queued and ends when the queue closes.
        self.tx = None;
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let (Some(server), Some(runtime)) = (self.server.take(), self.runtime.take()) {
            if !self.linger.is_zero() {
                server.drain(self.linger);
            }
            // The publisher thread has ended, so this is the last handle.
            if let Ok(mut server) = Arc::try_unwrap(server) {
                server.stop(&runtime);
            }
            // Drops every task (and with them every socket) without waiting for any.
            runtime.shutdown_background();
        }
    }
}

impl Drop for FoxgloveSink {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The `/events` message (`foxglove.Log`) of an event at `ns`; its text is written into
/// `text` (reused by the publisher thread).
fn log_message<'a>(ns: u64, event: &EventMsg<'_>, text: &'a mut String) -> LogMsg<'a> {
    text.clear();
    if event.bus == 0 && event.servo == 0 {
        text.push_str(event.kind);
    } else {
        use std::fmt::Write;
        let _ = write!(text, "{} (bus {}, servo {})", event.kind, event.bus, event.servo);
    }
    LogMsg {
        timestamp: Time::from_ns(ns),
        level: event_level(event.kind),
        message: text,
        name: "rtloop",
        file: "",
        line: 0,
    }
}

/// A JSON value for tests and tools: what the `/events` channel sends for an event.
pub fn event_json(stamp_us: i64, event: &EventMsg<'_>) -> Json {
    let mut text = String::new();
    serde_json::to_value(log_message(stamp_ns(stamp_us), event, &mut text)).unwrap_or(Json::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn channels_are_named_by_bus_and_servo() {
        assert_eq!(servo_topic(1, 1, "state"), "/bus/1/servo/1/state");
        assert_eq!(servo_topic(4, 12, "command"), "/bus/4/servo/12/command");
    }

    #[test]
    fn events_get_a_log_level_from_their_kind() {
        assert_eq!(event_level("fall"), 4);
        assert_eq!(event_level("fall_low"), 4);
        assert_eq!(event_level("fault"), 4);
        assert_eq!(event_level("safe_mode_engaged"), 4);
        assert_eq!(event_level("missing_replies"), 3);
        assert_eq!(event_level("shutdown"), 2);
        let j = event_json(1_500_000, &EventMsg { bus: 2, servo: 5, kind: "fault" });
        assert_eq!(j["message"], "fault (bus 2, servo 5)");
        assert_eq!(j["timestamp"], json!({"sec": 1, "nsec": 500_000_000}));
    }

    #[test]
    fn a_value_not_reported_is_null_and_the_attitude_turns_z_up() {
        let s = ServoLog { position: f64::NAN, velocity: f64::INFINITY, ..Default::default() };
        let mut buf = Vec::new();
        serde_json::to_writer(&mut buf, &ServoStateMsg::from_log(&s)).unwrap();
        let v: Json = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v["position"], Json::Null);
        assert_eq!(v["velocity"], Json::Null);
        let q = z_up(Quat { x: 0.1, y: 0.2, z: 0.3, w: 0.9 });
        assert_eq!((q.x, q.y, q.z, q.w), (0.1, -0.2, -0.3, 0.9));
    }

    #[test]
    fn refusals_add_up_in_refused() {
        let c = Counters::default();
        assert_eq!(DETAIL.len(), Detail::RefusedPlayback as usize + 1, "one name per counter");
        c.add(Detail::RefusedMalformed, 2);
        c.add(Detail::ClientsRefused, 1);
        c.add(Detail::HandshakesTimedOut, 1);
        c.add(Detail::ConnectionsAbandoned, 5);
        c.add(Detail::ClientsConnected, 3);
        assert_eq!(c.refused(), 4);
    }

    #[test]
    fn a_taken_port_is_one_sentence() {
        let first = FoxgloveSink::bind("127.0.0.1:0".parse().unwrap(), ServeOptions::default()).unwrap();
        let e = FoxgloveSink::bind(first.addr(), ServeOptions::default()).unwrap_err();
        assert!(matches!(e, LiveError::PortTaken { addr } if addr == first.addr()), "{e:?}");
        let e = e.to_string();
        assert!(e.contains(&first.addr().to_string()) && e.contains("port is taken") && !e.contains('\n'), "{e}");
    }
}
