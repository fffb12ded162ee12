//! The Foxglove WebSocket server of `rtloop run --foxglove` and `rtloop log serve`: the
//! official `foxglove` SDK's server (subprotocols `foxglove.sdk.v1` / `.v1.1`), behind a
//! front door of ours that also lets in clients offering the old name,
//! `foxglove.websocket.v1` ([`super::subprotocol`]); JSON messages with JSON schemas, one
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
//! serialises into reused buffers and hands each message to the SDK, which queues it per
//! client (`message_backlog_size`) and, when a client does not read, drops that client's
//! oldest message. The SDK 0.30 does not say how many it dropped there: what it does report
//! (a "full outbox" line, at most one per 30 s for the whole process) is counted as
//! `detail.slow_client_reports` — a sign that some client lost messages, not a count.
//!
//! **Refused input.** The SDK answers a malformed client message, a subscription to an
//! unknown channel, a request for a capability we do not offer, … with an error status to
//! that client and a `tracing` event; a failed handshake or a broken frame with a `tracing`
//! event. Its listener reports none of these, so the server's own runtime threads (and the
//! publisher thread) carry a thread-scoped `tracing` subscriber of ours that counts those
//! events into `refused` and `detail` — per server, never process-wide.
//!
//! Must never: listen beyond loopback unless asked (`allow_remote`); block the telemetry
//! thread on a client or on the server (a full queue drops and counts); let a client's
//! input panic anything or reach the loop.

use super::subprotocol::FrontCounts;
use super::{
    CycleTiming, EventMsg, ImuMsg, LiveCycle, LiveError, LiveRobot, LiveSink, LiveStats, Publisher, Quat, Vec3,
};
use super::{ServoCommandMsg, ServoStateMsg};
use crate::live::LiveConfig;
use crate::telemetry::ServoLog;
use foxglove::websocket::{Capability, ChannelView, Client, PlaybackControlRequest, PlaybackState, ServerListener};
use foxglove::{ChannelBuilder, Context, PartialMetadata, RawChannel, Schema, WebSocketServerHandle};
use serde::Serialize;
use serde_json::Value as Json;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

pub use super::address::{parse_address, AddressError, DEFAULT_ADDRESS};

/// Items (cycles, events) the telemetry thread may queue for the publisher thread before
/// it drops: 256 cycles is a quarter second at every cycle of 1 kHz.
pub const QUEUE_LEN: usize = 256;

/// Messages the SDK queues per client before it drops that client's oldest (its default).
pub const CLIENT_BACKLOG: usize = 1024;

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

/// The `foxglove.Log` level of an event kind: faults and the safe mode are errors, a servo
/// going quiet a warning, the rest (shutdown, answering again, re-armed, …) information.
pub fn event_level(kind: &str) -> u8 {
    const WARNING: u8 = 3;
    const ERROR: u8 = 4;
    const INFO: u8 = 2;
    match kind {
        "fault" | "watchdog_timeout" | "safe_mode_engaged" => ERROR,
        "missing_replies" | "stale_timeout_cleared" => WARNING,
        k if k.contains("fault") || k.contains("timeout") || k.contains("refused") => WARNING,
        _ => INFO,
    }
}

/// JSON schemas of the well-known Foxglove messages this server sends as JSON.
pub mod wellknown {
    use serde_json::{json, Value as Json};

    fn time() -> Json {
        json!({"type": "object", "properties": {
            "sec": {"type": "integer", "minimum": 0}, "nsec": {"type": "integer", "minimum": 0, "maximum": 999_999_999}},
            "required": ["sec", "nsec"]})
    }

    fn xyz(keys: &[&str]) -> Json {
        let props: serde_json::Map<String, Json> =
            keys.iter().map(|k| (k.to_string(), json!({"type": "number"}))).collect();
        json!({"type": "object", "properties": props, "required": keys})
    }

    /// `foxglove.FrameTransform`.
    pub fn frame_transform() -> Json {
        json!({"title": "foxglove.FrameTransform", "type": "object", "properties": {
            "timestamp": time(), "parent_frame_id": {"type": "string"}, "child_frame_id": {"type": "string"},
            "translation": xyz(&["x", "y", "z"]), "rotation": xyz(&["x", "y", "z", "w"])},
            "required": ["timestamp", "parent_frame_id", "child_frame_id", "translation", "rotation"]})
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

#[derive(Debug, Clone, Copy, Serialize)]
struct Time {
    sec: u64,
    nsec: u32,
}

impl Time {
    fn from_ns(ns: u64) -> Self {
        Time { sec: ns / 1_000_000_000, nsec: (ns % 1_000_000_000) as u32 }
    }
}

#[derive(Serialize)]
struct FrameTransformMsg {
    timestamp: Time,
    parent_frame_id: &'static str,
    child_frame_id: &'static str,
    translation: Vec3,
    rotation: Quat,
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

/// Counters shared by the sink, the publisher thread, the listener and the tracing hook.
#[derive(Debug, Default)]
struct Counters {
    cycles: AtomicU64,
    events: AtomicU64,
    messages: AtomicU64,
    dropped: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
    detail: [AtomicU64; DETAIL.len()],
}

/// The names of `LiveStats::detail`, in the order of `Counters::detail`.
const DETAIL: [&str; 14] = [
    "clients_connected",
    "clients_disconnected",
    "subscriptions",
    "unsubscriptions",
    "refused_malformed",
    "refused_unknown_channel",
    "refused_unsupported",
    "refused_other",
    "handshakes_failed",
    "receive_errors",
    "slow_client_reports",
    "queue_dropped_items",
    "playback_requests",
    "clients_legacy_subprotocol",
];

#[derive(Clone, Copy)]
enum Detail {
    ClientsConnected,
    ClientsDisconnected,
    Subscriptions,
    Unsubscriptions,
    RefusedMalformed,
    RefusedUnknownChannel,
    RefusedUnsupported,
    RefusedOther,
    HandshakesFailed,
    ReceiveErrors,
    SlowClientReports,
    QueueDroppedItems,
    PlaybackRequests,
    ClientsLegacySubprotocol,
}

impl FrontCounts for Counters {
    fn handshake_failed(&self) {
        self.add(Detail::HandshakesFailed, 1);
        self.refused.fetch_add(1, Ordering::Relaxed);
    }
    fn legacy_client(&self) {
        self.add(Detail::ClientsLegacySubprotocol, 1);
    }
}

impl Counters {
    fn add(&self, d: Detail, n: u64) {
        self.detail[d as usize].fetch_add(n, Ordering::Relaxed);
    }
    fn get(&self, d: Detail) -> u64 {
        self.detail[d as usize].load(Ordering::Relaxed)
    }
    /// Count what one SDK `tracing` event says (see the module doc).
    fn note_sdk_event(&self, level: tracing::Level, text: &str) {
        let refused = |d: Detail| {
            self.add(d, 1);
            self.refused.fetch_add(1, Ordering::Relaxed);
        };
        if let Some(rest) =
            text.strip_prefix("Sending error to client ").or_else(|| text.strip_prefix("Sending warning to client "))
        {
            // "<addr>: <the status sent>"
            let status = rest.split_once(": ").map_or(rest, |(_, s)| s);
            if status.starts_with("Invalid message") {
                refused(Detail::RefusedMalformed);
            } else if status.starts_with("Unknown channel") {
                refused(Detail::RefusedUnknownChannel);
            } else if status.contains("does not support") || status.contains("didn't provide") {
                refused(Detail::RefusedUnsupported);
            } else {
                refused(Detail::RefusedOther);
            }
        } else if text.starts_with("Dropping client") {
            refused(Detail::HandshakesFailed);
        } else if text.starts_with("Error receiving from client") {
            refused(Detail::ReceiveErrors);
        } else if text.starts_with("outbox for client") {
            self.add(Detail::SlowClientReports, 1);
        } else if level <= tracing::Level::WARN
            && !text.starts_with("Client ")
            && !text.starts_with("Received message for unknown channel")
            && !text.starts_with("Invalid message from")
            && !text.starts_with("Error sending message to client")
        {
            // The refusals above log an error line and then send the status counted above;
            // a client gone mid-send is not our error. Anything else the SDK calls an error.
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A `tracing` subscriber that counts the SDK's events (installed per thread, see
/// [`install_counting`]).
struct SdkEventCounter(Arc<Counters>);

struct MessageText(String);

impl tracing::field::Visit for MessageText {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            use std::fmt::Write;
            let _ = write!(self.0, "{value:?}");
        }
    }
}

impl tracing::Subscriber for SdkEventCounter {
    fn register_callsite(&self, m: &'static tracing::Metadata<'static>) -> tracing::subscriber::Interest {
        if self.wants(m) {
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::never()
        }
    }
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        self.wants(m)
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut text = MessageText(String::new());
        event.record(&mut text);
        self.0.note_sdk_event(*event.metadata().level(), &text.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

impl SdkEventCounter {
    fn wants(&self, m: &tracing::Metadata<'_>) -> bool {
        m.is_event() && m.target().starts_with("foxglove")
    }
}

thread_local! {
    static COUNTING: RefCell<Option<tracing::dispatcher::DefaultGuard>> = const { RefCell::new(None) };
}

/// Count the SDK's events on this thread (until [`uninstall_counting`]).
fn install_counting(dispatch: &tracing::Dispatch) {
    let guard = tracing::dispatcher::set_default(dispatch);
    COUNTING.with(|c| *c.borrow_mut() = Some(guard));
}

fn uninstall_counting() {
    COUNTING.with(|c| c.borrow_mut().take());
}

/// What the app's playback controls ask `rtloop log serve` for.
pub type PlaybackHandler = Arc<dyn Fn(PlaybackControlRequest) -> Option<PlaybackState> + Send + Sync>;

/// How to start a server.
#[derive(Default)]
pub struct ServeOptions {
    /// The name clients show.
    pub name: String,
    /// A log's time range, ns since the epoch, and what to do with the app's playback
    /// requests: offers the `PlaybackControl` capability.
    pub playback: Option<((u64, u64), PlaybackHandler)>,
}

struct Listener {
    counters: Arc<Counters>,
    playback: Option<PlaybackHandler>,
}

impl ServerListener for Listener {
    fn on_subscribe(&self, _client: Client, _channel: ChannelView) {
        self.counters.add(Detail::Subscriptions, 1);
    }
    fn on_unsubscribe(&self, _client: Client, _channel: ChannelView) {
        self.counters.add(Detail::Unsubscriptions, 1);
    }
    fn on_client_connect(&self) {
        self.counters.add(Detail::ClientsConnected, 1);
    }
    fn on_client_disconnect(&self) {
        self.counters.add(Detail::ClientsDisconnected, 1);
    }
    fn on_playback_control_request(&self, request: PlaybackControlRequest) -> Option<PlaybackState> {
        self.counters.add(Detail::PlaybackRequests, 1);
        self.playback.as_ref().and_then(|p| p(request))
    }
}

/// Every channel of a robot.
struct Channels {
    cycle: Arc<RawChannel>,
    /// (state, command) per servo, in cycle order.
    servos: Vec<(Arc<RawChannel>, Arc<RawChannel>)>,
    imu: Option<(Arc<RawChannel>, Arc<RawChannel>)>,
    events: Arc<RawChannel>,
}

/// One JSON channel with a JSON schema.
fn json_channel(ctx: &Arc<Context>, topic: &str, schema: &Json) -> Result<Arc<RawChannel>, LiveError> {
    let name = schema["title"].as_str().unwrap_or(topic).to_string();
    let bytes = serde_json::to_vec(schema).map_err(|source| LiveError::Schema { topic: topic.to_string(), source })?;
    ChannelBuilder::new(topic)
        .context(ctx)
        .message_encoding("json")
        .schema(Schema::new(name, "jsonschema", bytes))
        .build_raw()
        .map_err(|source| LiveError::Advertise { topic: topic.to_string(), source })
}

impl Channels {
    fn advertise(ctx: &Arc<Context>, robot: &LiveRobot) -> Result<Self, LiveError> {
        use super::schemas;
        let mut servos = Vec::with_capacity(robot.servos.len());
        for &(bus, id) in &robot.servos {
            servos.push((
                json_channel(ctx, &servo_topic(bus, id, "state"), &schemas::servo_state())?,
                json_channel(ctx, &servo_topic(bus, id, "command"), &schemas::servo_command())?,
            ));
        }
        let imu = if robot.imu {
            Some((
                json_channel(ctx, "/imu", &schemas::imu())?,
                json_channel(ctx, "/imu/transform", &wellknown::frame_transform())?,
            ))
        } else {
            None
        };
        Ok(Channels {
            cycle: json_channel(ctx, "/cycle", &schemas::cycle_timing())?,
            servos,
            imu,
            events: json_channel(ctx, "/events", &wellknown::log())?,
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
    /// A message on a channel of the caller's (`rtloop log serve`'s `/log/<record>`).
    Raw {
        channel: Arc<RawChannel>,
        stamp_us: i64,
        payload: Vec<u8>,
    },
}

/// The publisher thread: serialise each item into reused buffers, hand it to the SDK.
fn publish_loop(rx: Receiver<Item>, channels: Channels, counters: Arc<Counters>, dispatch: tracing::Dispatch) {
    install_counting(&dispatch);
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut text = String::with_capacity(128);
    let mut send = |channel: &RawChannel, stamp_ns: u64, encode: &dyn Fn(&mut Vec<u8>) -> serde_json::Result<()>| {
        if !channel.has_sinks() {
            return;
        }
        buf.clear();
        match encode(&mut buf) {
            Ok(()) => {
                channel.log_with_meta(&buf, PartialMetadata::with_log_time(stamp_ns));
                counters.messages.fetch_add(1, Ordering::Relaxed);
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
                if let Some((imu, transform)) = &channels.imu {
                    send(imu, ns, &|b| serde_json::to_writer(b, &c.imu));
                    let t = FrameTransformMsg {
                        timestamp: Time::from_ns(ns),
                        parent_frame_id: "world",
                        child_frame_id: "body",
                        translation: Vec3::default(),
                        rotation: z_up(c.imu.orientation),
                    };
                    send(transform, ns, &|b| serde_json::to_writer(b, &t));
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
    uninstall_counting();
}

/// The Foxglove server as a [`LiveSink`] (see the module doc).
pub struct FoxgloveSink {
    addr: SocketAddr,
    context: Arc<Context>,
    counters: Arc<Counters>,
    dispatch: tracing::Dispatch,
    handle: Option<WebSocketServerHandle>,
    runtime: Option<tokio::runtime::Runtime>,
    tx: Option<SyncSender<Item>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Messages one cycle makes (to count a dropped cycle's messages).
    per_cycle: u64,
    /// How long [`LiveSink::finish`] leaves clients to read what is queued.
    linger: std::time::Duration,
}

impl std::fmt::Debug for FoxgloveSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FoxgloveSink").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl FoxgloveSink {
    /// Start serving on `addr` (port 0: any free port; see [`FoxgloveSink::addr`]) with its
    /// own SDK context and runtime; channels come with [`LiveSink::start`].
    pub fn bind(addr: SocketAddr, options: ServeOptions) -> Result<Self, LiveError> {
        let counters = Arc::new(Counters::default());
        let dispatch = tracing::Dispatch::new(SdkEventCounter(Arc::clone(&counters)));
        let on_start = dispatch.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("rtloop-foxglove")
            .enable_all()
            .on_thread_start(move || install_counting(&on_start))
            .on_thread_stop(uninstall_counting)
            .build()
            .map_err(LiveError::FoxgloveRuntime)?;
        // The user's address is the front door's (see `super::subprotocol`): bound first, so a
        // taken port is the error the user sees; the SDK listens behind it, on loopback only.
        let front = std::net::TcpListener::bind(addr).map_err(|source| {
            if source.kind() == std::io::ErrorKind::AddrInUse {
                LiveError::PortTaken { addr }
            } else {
                LiveError::CannotBind { addr, source }
            }
        })?;
        let public = front.local_addr().map_err(|source| LiveError::CannotServe { addr, source })?;
        let front = front
            .set_nonblocking(true)
            .and_then(|()| {
                let _in_runtime = runtime.enter();
                tokio::net::TcpListener::from_std(front)
            })
            .map_err(|source| LiveError::CannotServe { addr, source })?;
        let context = Context::new();
        let mut server = context
            .websocket_server()
            .bind("127.0.0.1", 0)
            .name(options.name)
            .message_backlog_size(CLIENT_BACKLOG)
            .tokio_runtime(runtime.handle());
        let mut playback = None;
        if let Some(((start, end), handler)) = options.playback {
            server = server.playback_time_range(start, end).capabilities([Capability::PlaybackControl]);
            playback = Some(handler);
        }
        server = server.listener(Arc::new(Listener { counters: Arc::clone(&counters), playback }));
        let handle = tracing::dispatcher::with_default(&dispatch, || runtime.block_on(server.start()))
            .map_err(LiveError::FoxgloveStart)?;
        let inner = SocketAddr::from(([127, 0, 0, 1], handle.port()));
        runtime.spawn(super::subprotocol::serve(front, inner, Arc::clone(&counters) as Arc<dyn FrontCounts>));
        let addr = public;
        Ok(FoxgloveSink {
            addr,
            context,
            counters,
            dispatch,
            handle: Some(handle),
            runtime: Some(runtime),
            tx: None,
            thread: None,
            per_cycle: 1,
            linger: std::time::Duration::ZERO,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Clients connected now.
    pub fn client_count(&self) -> usize {
        self.handle.as_ref().map_or(0, |h| h.client_count())
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
    pub fn publish_status(&self, status: foxglove::websocket::Status) {
        if let Some(h) = &self.handle {
            h.publish_status(status);
        }
    }

    /// Advertise a JSON channel of the caller's (`rtloop log serve`'s `/log/<record>`).
    pub fn advertise_json(&self, topic: &str, schema: &Json) -> Result<Arc<RawChannel>, LiveError> {
        json_channel(&self.context, topic, schema)
    }

    /// Queue one JSON message on a channel of [`FoxgloveSink::advertise_json`]'s (counted
    /// as dropped when the queue is full).
    pub fn publish_raw(&mut self, channel: &Arc<RawChannel>, stamp_us: i64, payload: Vec<u8>) {
        if !channel.has_sinks() {
            return;
        }
        self.enqueue(Item::Raw { channel: Arc::clone(channel), stamp_us, payload }, 1);
    }

    /// Tell every client where playback is (`rtloop log serve`).
    pub fn broadcast_playback_state(&self, state: PlaybackState) {
        if let Some(h) = &self.handle {
            h.broadcast_playback_state(state);
        }
    }

    /// Leave clients `linger` to read what is queued when [`LiveSink::finish`] stops the
    /// server (`rtloop log serve --exit-at-end`; a live run stops at once).
    pub fn set_linger(&mut self, linger: std::time::Duration) {
        self.linger = linger;
    }

    /// Count bad input found outside the SDK (a playback request out of range).
    pub fn note_refused(&self) {
        self.counters.refused.fetch_add(1, Ordering::Relaxed);
        self.counters.add(Detail::RefusedOther, 1);
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
        let channels = match Channels::advertise(&self.context, robot) {
            Ok(c) => c,
            Err(_) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        self.per_cycle = 1 + 2 * robot.servos.len() as u64 + if robot.imu { 2 } else { 0 };
        let (tx, rx) = sync_channel(QUEUE_LEN);
        let counters = Arc::clone(&self.counters);
        let dispatch = self.dispatch.clone();
        match std::thread::Builder::new()
            .name("rtloop-foxglove-pub".into())
            .spawn(move || publish_loop(rx, channels, counters, dispatch))
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
            DETAIL.iter().zip(&c.detail).map(|(k, v)| (k.to_string(), v.load(Ordering::Relaxed))).collect();
        LiveStats {
            sink: "foxglove".into(),
            endpoint: format!("ws://{}", self.addr),
            cycles: c.cycles.load(Ordering::Relaxed),
            events: c.events.load(Ordering::Relaxed),
            messages: c.messages.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            detail,
        }
    }

    fn finish(&mut self) {
        // The publisher thread drains what is queued and ends when the queue closes.
        self.tx = None;
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(h) = self.handle.take() {
            if h.client_count() > 0 {
                std::thread::sleep(self.linger);
            }
            h.stop().wait_blocking();
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(std::time::Duration::from_secs(1));
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
    fn sdk_events_are_counted_by_what_they_refuse() {
        let c = Counters::default();
        use tracing::Level;
        c.note_sdk_event(Level::DEBUG, "Sending error to client 127.0.0.1:5: Invalid message: expected value");
        c.note_sdk_event(Level::DEBUG, "Sending error to client 127.0.0.1:5: Unknown channel ID: 99");
        c.note_sdk_event(
            Level::DEBUG,
            "Sending error to client 127.0.0.1:5: Server does not support parameters capability",
        );
        c.note_sdk_event(Level::ERROR, "Client 127.0.0.1:5 attempted to subscribe to unknown channel: 99");
        c.note_sdk_event(Level::ERROR, "Dropping client 127.0.0.1:5: handshake failed");
        c.note_sdk_event(Level::INFO, "outbox for client 127.0.0.1:5 full");
        c.note_sdk_event(Level::INFO, "Registered client 127.0.0.1:5");
        assert_eq!(c.refused.load(Ordering::Relaxed), 4);
        assert_eq!(c.get(Detail::RefusedMalformed), 1);
        assert_eq!(c.get(Detail::RefusedUnknownChannel), 1);
        assert_eq!(c.get(Detail::RefusedUnsupported), 1);
        assert_eq!(c.get(Detail::HandshakesFailed), 1);
        assert_eq!(c.get(Detail::SlowClientReports), 1);
        assert_eq!(c.errors.load(Ordering::Relaxed), 0);
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
