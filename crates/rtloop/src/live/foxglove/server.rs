//! The Foxglove WebSocket server itself: the listener, the handshake, one task pair per
//! client, every limit a peer can run into, and a shutdown bounded in time.
//!
//! **Why our own server, on `tokio-tungstenite`.** Foxglove's Rust SDK (0.30) served this
//! before; it could not be made safe against a hostile local peer: it takes no listener of
//! ours (so it listened on a loopback port of its own that any local user could reach past
//! every limit we set in front of it), accepts client messages of up to 64 MiB with no
//! client limit (8 clients holding unfinished messages grew a run from 45 to 686 MB, all of it
//! locked by `mlockall`), waits without a bound in its shutdown for a client that stopped
//! reading, negotiates only its own subprotocol names, and reports drops and refusals only as
//! log lines. The protocol we serve is small ([`super::protocol`]); the WebSocket layer —
//! framing, masking, the handshake, the size limits — is `tungstenite`'s, the maintained
//! crate the SDK itself is built on.
//!
//! **Limits** (each stated in docs/foxglove.md with what a peer that breaks it gets):
//! * [`MAX_CLIENTS`] clients at once; one more gets HTTP 503 (`clients_refused`).
//! * [`MAX_HANDSHAKING`] connections still in their handshake; one more is closed at once
//!   (`connections_refused`).
//! * A handshake must arrive whole within [`HANDSHAKE_TIMEOUT`] (`handshakes_timed_out`) and
//!   64 KiB (tungstenite's cap; `handshakes_refused`).
//! * A client message (and frame) is at most [`CLIENT_MESSAGE_MAX`] bytes: a longer one
//!   closes the connection with code 1009 (`refused_too_large`) before it is buffered.
//! * Each client's outgoing queue holds at most [`CLIENT_QUEUE_BYTES`]: a message that does
//!   not fit is dropped and counted (`client_queue_dropped`, and in `dropped`), but for a
//!   latched channel's one message (the 3D scene, [`Server::set_latched`]), which is taken
//!   while the queue is within its limit, whatever its size; a control
//!   message (advertisement, status, playback state) that does not fit closes the client
//!   (`clients_dropped_slow`).
//! * [`Server::stop`] gives every client [`CLOSE_TIMEOUT`] to take a close frame, then drops
//!   every socket: it returns within that bound whatever the clients do.
//!
//! Memory is therefore bounded by `MAX_CLIENTS × (CLIENT_QUEUE_BYTES + the latched message
//! + tungstenite's buffers + CLIENT_MESSAGE_MAX)` plus `MAX_HANDSHAKING` handshakes of 64 KiB.
//!
//! Must never: listen beyond the address given; buffer a client's input past the limits;
//! let a client's input panic anything or reach the loop; make [`Server::stop`] or the
//! publisher thread wait on a client.

use super::protocol::{self, ChannelInfo, ClientError, ClientMessage, PlaybackControlRequest, PlaybackState, Status};
use super::{Counters, Detail};
use futures_util::{SinkExt, StreamExt};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

/// Clients connected at once.
pub const MAX_CLIENTS: usize = 16;

/// Connections in their handshake at once.
pub const MAX_HANDSHAKING: usize = 16;

/// File descriptors the server may hold at once: a socket per client and per handshake,
/// the listener, the runtime's own.
pub const OPEN_FILES: u64 = (MAX_CLIENTS + MAX_HANDSHAKING) as u64 + 8;

/// How long a client has to send its whole handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest message (and frame) a client may send: the protocol's client messages are
/// small (a subscription to every channel of a 32-servo robot is about 3 KB).
pub const CLIENT_MESSAGE_MAX: usize = 64 * 1024;

/// The bytes one client's outgoing queue may hold (at 100 Hz of a 12-servo robot, about a
/// second of every channel).
pub const CLIENT_QUEUE_BYTES: usize = 1024 * 1024;

/// The largest latched message (the 3D scene; Menagerie's Go2 with its meshes is 23 MB): a
/// client's write buffer grows to hold one message while it is sent.
pub const MAX_LATCHED_BYTES: usize = 64 * 1024 * 1024;

/// How long [`Server::stop`] gives clients to take their close frame before it drops their
/// sockets.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// tungstenite's buffers per connection: reads of this size, writes flushed at this size and
/// never buffered beyond [`MAX_WRITE_BUFFER`].
const READ_BUFFER: usize = 16 * 1024;
const WRITE_BUFFER: usize = 64 * 1024;
const MAX_WRITE_BUFFER: usize = 256 * 1024;

/// What the app's playback controls ask for, answered with the new state (`rtloop log serve`).
pub type PlaybackHandler = Arc<dyn Fn(PlaybackControlRequest) -> Option<PlaybackState> + Send + Sync>;

/// A channel: advertised to every client, subscribed to by some.
#[derive(Debug)]
pub struct Channel {
    id: u64,
    topic: String,
    schema_name: String,
    schema: String,
    subscribers: AtomicU32,
    /// The message a client gets when it subscribes (a latched channel: the 3D scene, sent
    /// once), with its log time.
    latched: Mutex<Option<(u64, Arc<[u8]>)>>,
}

impl Channel {
    /// Someone subscribed to it (else nothing need be encoded for it).
    pub fn has_sinks(&self) -> bool {
        self.subscribers.load(Ordering::Relaxed) > 0
    }

    /// Its topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    fn info(&self) -> ChannelInfo<'_> {
        ChannelInfo {
            id: self.id,
            topic: &self.topic,
            encoding: "json",
            schema_name: &self.schema_name,
            schema: &self.schema,
            schema_encoding: "jsonschema",
        }
    }
}

/// One client's outgoing messages.
#[derive(Default)]
struct Outbox {
    messages: VecDeque<Message>,
    bytes: usize,
}

/// One connected client, shared by its tasks and the publisher thread.
struct Client {
    /// (subscription id, channel) of each of its subscriptions.
    subscriptions: Mutex<Vec<(u32, Arc<Channel>)>>,
    outbox: Mutex<Outbox>,
    wake: Notify,
    /// The server closes it: send the close frame, then end.
    closing: AtomicBool,
}

/// A poisoned lock only means a task panicked while holding it; the data is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Client {
    fn new() -> Self {
        Client {
            subscriptions: Mutex::new(Vec::new()),
            outbox: Mutex::new(Outbox::default()),
            wake: Notify::new(),
            closing: AtomicBool::new(false),
        }
    }

    /// Queue a data message; false (dropped) when the queue is full.
    fn push_data(&self, message: Message) -> bool {
        self.push(message, |queued, len| queued + len <= CLIENT_QUEUE_BYTES)
    }

    /// Queue a latched channel's message (the 3D scene, which may be larger than the whole
    /// queue): taken while the queue holds at most [`CLIENT_QUEUE_BYTES`], so one such message
    /// at most goes past the limit; false (dropped) otherwise.
    fn push_latched(&self, message: Message) -> bool {
        self.push(message, |queued, _| queued <= CLIENT_QUEUE_BYTES)
    }

    /// Queue a control message; false when it does not fit (the client is then closed: it
    /// would otherwise miss an advertisement or an answer). An empty queue takes any size.
    fn push_control(&self, message: Message) -> bool {
        let taken = self.push(message, |queued, len| queued == 0 || queued + len <= CLIENT_QUEUE_BYTES);
        if !taken {
            self.close();
        }
        taken
    }

    /// Queue `message` when `admits(queued bytes, its length)` says so, and wake the writer.
    fn push(&self, message: Message, admits: impl FnOnce(usize, usize) -> bool) -> bool {
        let len = message.len();
        let mut o = lock(&self.outbox);
        if !admits(o.bytes, len) {
            return false;
        }
        o.bytes += len;
        o.messages.push_back(message);
        drop(o);
        self.wake.notify_one();
        true
    }

    fn pop(&self) -> Option<Message> {
        let mut o = lock(&self.outbox);
        let m = o.messages.pop_front()?;
        o.bytes -= m.len();
        Some(m)
    }

    fn queued_bytes(&self) -> usize {
        lock(&self.outbox).bytes
    }

    fn close(&self) {
        self.closing.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }

    fn subscription_for(&self, channel: &Channel) -> Option<u32> {
        lock(&self.subscriptions).iter().find(|(_, c)| c.id == channel.id).map(|(s, _)| *s)
    }
}

/// What the server's tasks share with [`Server`].
struct Shared {
    counters: Arc<Counters>,
    name: String,
    session_id: String,
    playback: Option<((u64, u64), PlaybackHandler)>,
    channels: Mutex<Vec<Arc<Channel>>>,
    next_channel: Mutex<u64>,
    clients: Mutex<Vec<Arc<Client>>>,
    /// Client slots taken (reserved in the handshake, freed when the client is gone).
    slots: AtomicUsize,
    handshaking: AtomicUsize,
    /// Every client task has ended (checked by [`Server::stop`]).
    all_gone: Notify,
}

impl Shared {
    fn count(&self, d: Detail) {
        self.counters.add(d, 1);
    }

    fn capabilities(&self) -> &'static [&'static str] {
        if self.playback.is_some() {
            &[protocol::CAPABILITY_PLAYBACK_CONTROL]
        } else {
            &[]
        }
    }

    fn server_info(&self) -> String {
        protocol::ServerInfo::new(
            &self.name,
            self.capabilities(),
            &self.session_id,
            self.playback.as_ref().map(|p| p.0),
        )
        .to_json()
    }
}

/// A running server (see the module doc). Its tasks run on the tokio runtime given to
/// [`Server::start`].
pub(crate) struct Server {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept: Option<tokio::task::JoinHandle<()>>,
}

/// What [`Server::start`] needs besides the listener.
pub(crate) struct Options {
    /// The name clients show.
    pub name: String,
    /// The data's time range and the playback handler (`rtloop log serve`): offers
    /// `playbackControl`.
    pub playback: Option<((u64, u64), PlaybackHandler)>,
}

impl Server {
    /// Serve `listener` on `runtime`.
    pub fn start(
        runtime: &tokio::runtime::Runtime,
        listener: std::net::TcpListener,
        options: Options,
        counters: Arc<Counters>,
    ) -> std::io::Result<Server> {
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let listener = {
            let _in_runtime = runtime.enter();
            TcpListener::from_std(listener)?
        };
        let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let shared = Arc::new(Shared {
            counters,
            name: options.name,
            session_id: format!("rtloop-{started}"),
            playback: options.playback,
            channels: Mutex::new(Vec::new()),
            next_channel: Mutex::new(1),
            clients: Mutex::new(Vec::new()),
            slots: AtomicUsize::new(0),
            handshaking: AtomicUsize::new(0),
            all_gone: Notify::new(),
        });
        let accept = runtime.spawn(accept_loop(listener, Arc::clone(&shared)));
        Ok(Server { shared, addr, accept: Some(accept) })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Clients connected now.
    pub fn client_count(&self) -> usize {
        lock(&self.shared.clients).len()
    }

    /// Add a JSON channel with a JSON schema; advertised to every client now and later.
    pub fn add_channel(&self, topic: &str, schema_name: &str, schema: String) -> Arc<Channel> {
        let id = {
            let mut next = lock(&self.shared.next_channel);
            let id = *next;
            *next += 1;
            id
        };
        let channel = Arc::new(Channel {
            id,
            topic: topic.to_string(),
            schema_name: schema_name.to_string(),
            schema,
            subscribers: AtomicU32::new(0),
            latched: Mutex::new(None),
        });
        lock(&self.shared.channels).push(Arc::clone(&channel));
        let text = protocol::advertise(&[channel.info()]);
        for c in lock(&self.shared.clients).iter() {
            if !c.push_control(Message::text(text.clone())) {
                self.shared.count(Detail::ClientsDroppedSlow);
            }
        }
        channel
    }

    /// Send `payload` on `channel`, stamped `log_time_ns`, to every client subscribed to it.
    /// Returns how many were subscribed; a client whose queue is full loses it (counted).
    pub fn publish(&self, channel: &Channel, log_time_ns: u64, payload: &[u8]) -> usize {
        let mut subscribed = 0;
        for c in lock(&self.shared.clients).iter() {
            let Some(sub) = c.subscription_for(channel) else { continue };
            subscribed += 1;
            let mut frame = Vec::new();
            protocol::message_data(&mut frame, sub, log_time_ns, payload);
            if !c.push_data(Message::binary(frame)) {
                self.shared.count(Detail::ClientQueueDropped);
                self.shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        subscribed
    }

    /// Make `payload` the message every client gets when it subscribes to `channel` (and
    /// send it now to those subscribed): the 3D scene, sent once but needed by every client.
    /// False (nothing latched or sent) when it is over [`MAX_LATCHED_BYTES`].
    pub fn set_latched(&self, channel: &Channel, log_time_ns: u64, payload: &[u8]) -> bool {
        if payload.len() > MAX_LATCHED_BYTES {
            return false;
        }
        let payload: Arc<[u8]> = Arc::from(payload);
        *lock(&channel.latched) = Some((log_time_ns, Arc::clone(&payload)));
        for c in lock(&self.shared.clients).iter() {
            let Some(sub) = c.subscription_for(channel) else { continue };
            send_latched(c, &self.shared, sub, log_time_ns, &payload);
        }
        true
    }

    /// A status message for every client.
    pub fn broadcast_status(&self, status: &Status) {
        self.broadcast(Message::text(status.to_json()));
    }

    /// Where playback stands, for every client.
    pub fn broadcast_playback_state(&self, state: &PlaybackState) {
        self.broadcast(Message::binary(state.encode()));
    }

    fn broadcast(&self, message: Message) {
        for c in lock(&self.shared.clients).iter() {
            if !c.push_control(message.clone()) {
                self.shared.count(Detail::ClientsDroppedSlow);
            }
        }
    }

    /// Wait until every client's queue is empty, or `linger` passed.
    pub fn drain(&self, linger: Duration) {
        let end = std::time::Instant::now() + linger;
        while std::time::Instant::now() < end {
            let queued: usize = lock(&self.shared.clients).iter().map(|c| c.queued_bytes()).sum();
            if queued == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stop accepting, send every client a close frame, and give them [`CLOSE_TIMEOUT`] to
    /// take it; then the caller drops the runtime, which closes every socket still open
    /// (counted as `clients_closed_hard`). Returns within `CLOSE_TIMEOUT` (plus a
    /// scheduling slice), whatever the clients do.
    pub fn stop(&mut self, runtime: &tokio::runtime::Runtime) {
        if let Some(a) = self.accept.take() {
            a.abort();
        }
        let clients: Vec<Arc<Client>> = lock(&self.shared.clients).clone();
        for c in &clients {
            c.close();
        }
        let shared = Arc::clone(&self.shared);
        let gone = runtime.block_on(async move {
            tokio::time::timeout(CLOSE_TIMEOUT, async {
                loop {
                    let notified = shared.all_gone.notified();
                    if lock(&shared.clients).is_empty() && shared.handshaking.load(Ordering::Relaxed) == 0 {
                        return;
                    }
                    notified.await;
                }
            })
            .await
            .is_ok()
        });
        if !gone {
            // Their tasks and sockets go with the runtime: they are disconnected now.
            let left = lock(&self.shared.clients).len() as u64;
            self.shared.counters.add(Detail::ClientsClosedHard, left);
            self.shared.counters.add(Detail::ClientsDisconnected, left);
        }
    }
}

/// Accept connections until the task is aborted.
async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, addr)) => {
                if shared.handshaking.load(Ordering::Relaxed) >= MAX_HANDSHAKING {
                    shared.count(Detail::ConnectionsRefused);
                    drop(stream);
                    continue;
                }
                shared.handshaking.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(connection(stream, addr, Arc::clone(&shared)));
            }
            // Out of descriptors and the like: count it, and do not spin.
            Err(_) => {
                shared.count(Detail::AcceptErrors);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// How a handshake ended, as the callback saw it.
#[derive(Clone, Copy, PartialEq)]
enum Verdict {
    NotSeen,
    Accepted { legacy: bool },
    NoSubprotocol,
    Full,
}

/// Releases a handshake slot, and a client slot if one was reserved and not handed on.
struct HandshakeGuard {
    shared: Arc<Shared>,
    slot_reserved: bool,
}

impl Drop for HandshakeGuard {
    fn drop(&mut self) {
        if self.slot_reserved {
            self.shared.slots.fetch_sub(1, Ordering::Relaxed);
        }
        self.shared.handshaking.fetch_sub(1, Ordering::Relaxed);
        self.shared.all_gone.notify_waiters();
    }
}

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER)
        // One whole message must fit (tungstenite refuses a larger one): the latched scene may
        // be far larger than the buffer (it only grows past `WRITE_BUFFER` while a message that
        // large is written).
        .max_write_buffer_size(MAX_WRITE_BUFFER + MAX_LATCHED_BYTES + 64)
        .max_message_size(Some(CLIENT_MESSAGE_MAX))
        .max_frame_size(Some(CLIENT_MESSAGE_MAX))
}

/// One connection: the handshake, then the client until it or the server closes.
async fn connection(stream: TcpStream, _addr: SocketAddr, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let mut guard = HandshakeGuard { shared: Arc::clone(&shared), slot_reserved: false };
    let mut verdict = Verdict::NotSeen;
    // The signature is tungstenite's (its error type is an HTTP response).
    #[allow(clippy::result_large_err)]
    let callback = |request: &Request, mut response: Response| -> Result<Response, ErrorResponse> {
        let offered = request
            .headers()
            .get_all("sec-websocket-protocol")
            .iter()
            .flat_map(|h| h.to_str().unwrap_or_default().split(','));
        let Some(name) = protocol::negotiate(offered) else {
            verdict = Verdict::NoSubprotocol;
            return Err(refusal(
                400,
                "offer the WebSocket subprotocol foxglove.sdk.v1 or foxglove.websocket.v1 (Sec-WebSocket-Protocol)",
            ));
        };
        if shared.slots.fetch_add(1, Ordering::Relaxed) >= MAX_CLIENTS {
            shared.slots.fetch_sub(1, Ordering::Relaxed);
            verdict = Verdict::Full;
            return Err(refusal(
                503,
                &format!("this server serves at most {MAX_CLIENTS} Foxglove clients at once; close one and retry"),
            ));
        }
        guard.slot_reserved = true;
        if let Ok(v) = name.parse() {
            response.headers_mut().insert("sec-websocket-protocol", v);
        }
        verdict = Verdict::Accepted { legacy: name == protocol::LEGACY_SUBPROTOCOL };
        Ok(response)
    };
    let handshake = tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(ws_config())),
    )
    .await;
    let ws = match handshake {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            shared.count(match (verdict, &e) {
                (Verdict::NoSubprotocol, _) => Detail::HandshakesRefused,
                (Verdict::Full, _) => Detail::ClientsRefused,
                // Connected and closed (or reset) before sending a whole request: a port
                // scan, a health check — not a refusal.
                (_, WsError::Io(_) | WsError::ConnectionClosed | WsError::AlreadyClosed) => {
                    Detail::ConnectionsAbandoned
                }
                (_, WsError::Protocol(p)) if is_incomplete(p) => Detail::ConnectionsAbandoned,
                _ => Detail::HandshakesRefused,
            });
            return;
        }
        Err(_) => {
            shared.count(Detail::HandshakesTimedOut);
            return;
        }
    };
    if let Verdict::Accepted { legacy: true } = verdict {
        shared.count(Detail::ClientsLegacySubprotocol);
    }
    // The client holds its slot from here; it is freed when the client is unregistered.
    guard.slot_reserved = false;
    drop(guard);
    serve_client(ws, shared).await;
}

fn is_incomplete(p: &tokio_tungstenite::tungstenite::error::ProtocolError) -> bool {
    matches!(p, tokio_tungstenite::tungstenite::error::ProtocolError::HandshakeIncomplete)
}

/// An HTTP refusal with a one-sentence body.
fn refusal(status: u16, why: &str) -> ErrorResponse {
    let mut r = ErrorResponse::new(Some(format!("{why}\n")));
    *r.status_mut() = tokio_tungstenite::tungstenite::http::StatusCode::from_u16(status)
        .unwrap_or(tokio_tungstenite::tungstenite::http::StatusCode::BAD_REQUEST);
    r
}

/// A connected client: register it, greet it, then read its messages while a writer task
/// drains its queue; unregister it when either side ends.
async fn serve_client(ws: tokio_tungstenite::WebSocketStream<TcpStream>, shared: Arc<Shared>) {
    let client = Arc::new(Client::new());
    // Greet before registering, so no data can overtake the advertisement.
    client.push_control(Message::text(shared.server_info()));
    {
        let channels = lock(&shared.channels);
        if !channels.is_empty() {
            let infos: Vec<ChannelInfo<'_>> = channels.iter().map(|c| c.info()).collect();
            client.push_control(Message::text(protocol::advertise(&infos)));
        }
        // Registered while the channel list is held: a channel added now is advertised once.
        lock(&shared.clients).push(Arc::clone(&client));
    }
    shared.count(Detail::ClientsConnected);
    let (sink, mut stream) = ws.split();
    let mut writer = tokio::spawn(write_loop(sink, Arc::clone(&client)));
    // A finished task's handle must not be polled again (tokio panics).
    let mut writer_done = false;
    loop {
        tokio::select! {
            _ = &mut writer => {
                writer_done = true;
                break;
            }
            next = stream.next() => match next {
                None => break,
                Some(Ok(message)) => handle(&message, &client, &shared),
                Some(Err(e)) => {
                    match e {
                        WsError::Capacity(_) => {
                            shared.count(Detail::RefusedTooLarge);
                            let why = format!("client messages are limited to {CLIENT_MESSAGE_MAX} bytes");
                            client.push_control(Message::Close(Some(CloseFrame { code: CloseCode::Size, reason: why.into() })));
                        }
                        WsError::Protocol(_) | WsError::Utf8(_) | WsError::AttackAttempt => {
                            shared.count(Detail::ReceiveErrors);
                        }
                        // A reset, the client gone.
                        _ => shared.count(Detail::ConnectionErrors),
                    }
                    client.close();
                    break;
                }
            },
        }
    }
    client.close();
    // Let the writer send what is queued and the close frame, within the bound.
    if !writer_done && tokio::time::timeout(CLOSE_TIMEOUT, &mut writer).await.is_err() {
        writer.abort();
    }
    unregister(&client, &shared);
}

fn unregister(client: &Arc<Client>, shared: &Shared) {
    for (_, channel) in lock(&client.subscriptions).drain(..) {
        channel.subscribers.fetch_sub(1, Ordering::Relaxed);
    }
    lock(&shared.clients).retain(|c| !Arc::ptr_eq(c, client));
    shared.slots.fetch_sub(1, Ordering::Relaxed);
    shared.count(Detail::ClientsDisconnected);
    shared.all_gone.notify_waiters();
}

/// Send the client's queue until it is closed; then its close frame (a close the server
/// queued itself, with its reason, goes out as queued).
async fn write_loop(
    mut sink: futures_util::stream::SplitSink<tokio_tungstenite::WebSocketStream<TcpStream>, Message>,
    client: Arc<Client>,
) {
    loop {
        let woken = client.wake.notified();
        if let Some(message) = client.pop() {
            let close = matches!(message, Message::Close(_));
            if sink.send(message).await.is_err() || close {
                return;
            }
            continue;
        }
        if client.closing.load(Ordering::Relaxed) {
            let _ = sink.send(Message::Close(Some(CloseFrame { code: CloseCode::Away, reason: "".into() }))).await;
            return;
        }
        woken.await;
    }
}

/// One message from the client.
fn handle(message: &Message, client: &Client, shared: &Shared) {
    let parsed = match message {
        Message::Text(t) => protocol::parse_text(t.as_str()),
        Message::Binary(b) => protocol::parse_binary(b, shared.playback.is_some()),
        // Pings are answered by tungstenite; a close ends the read loop after this.
        _ => return,
    };
    match parsed {
        Ok(ClientMessage::Subscribe(subs)) => {
            for s in subs {
                let channel = lock(&shared.channels).iter().find(|c| c.id == s.channel_id).cloned();
                let Some(channel) = channel else {
                    refuse(
                        client,
                        shared,
                        Detail::RefusedUnknownChannel,
                        format!("Unknown channel ID: {}", s.channel_id),
                    );
                    continue;
                };
                let mut subscriptions = lock(&client.subscriptions);
                if subscriptions.iter().any(|(id, c)| *id == s.id || c.id == channel.id) {
                    drop(subscriptions);
                    refuse(
                        client,
                        shared,
                        Detail::RefusedOther,
                        format!(
                            "Subscription {} to channel {}: the id or the channel is already subscribed",
                            s.id, s.channel_id
                        ),
                    );
                    continue;
                }
                channel.subscribers.fetch_add(1, Ordering::Relaxed);
                let latched = lock(&channel.latched).clone();
                subscriptions.push((s.id, channel));
                drop(subscriptions);
                shared.count(Detail::Subscriptions);
                if let Some((log_time_ns, payload)) = latched {
                    send_latched(client, shared, s.id, log_time_ns, &payload);
                }
            }
        }
        Ok(ClientMessage::Unsubscribe(ids)) => {
            for id in ids {
                let mut subscriptions = lock(&client.subscriptions);
                match subscriptions.iter().position(|(s, _)| *s == id) {
                    Some(i) => {
                        let (_, channel) = subscriptions.swap_remove(i);
                        channel.subscribers.fetch_sub(1, Ordering::Relaxed);
                        drop(subscriptions);
                        shared.count(Detail::Unsubscriptions);
                    }
                    None => {
                        drop(subscriptions);
                        refuse(client, shared, Detail::RefusedOther, format!("Unknown subscription ID: {id}"));
                    }
                }
            }
        }
        Ok(ClientMessage::PlaybackControl(request)) => {
            shared.count(Detail::PlaybackRequests);
            let request_id = request.request_id.clone();
            let answer = shared.playback.as_ref().and_then(|(_, handler)| handler(request));
            if let Some(mut state) = answer {
                state.request_id = Some(request_id);
                client.push_control(Message::binary(state.encode()));
            }
        }
        Err(e) => refuse_error(client, shared, &e),
    }
}

/// A latched channel's message to one client (dropped and counted when its queue is over
/// the limit).
fn send_latched(client: &Client, shared: &Shared, sub: u32, log_time_ns: u64, payload: &[u8]) {
    let mut frame = Vec::with_capacity(payload.len() + 16);
    protocol::message_data(&mut frame, sub, log_time_ns, payload);
    if !client.push_latched(Message::binary(frame)) {
        shared.count(Detail::ClientQueueDropped);
        shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

fn refuse_error(client: &Client, shared: &Shared, e: &ClientError) {
    let d = match e {
        ClientError::Malformed(_) | ClientError::MalformedBinary(_) => Detail::RefusedMalformed,
        ClientError::Unsupported(_) => Detail::RefusedUnsupported,
    };
    refuse(client, shared, d, e.to_string());
}

/// Count a refusal and tell the client why (a status error).
fn refuse(client: &Client, shared: &Shared, d: Detail, why: String) {
    shared.count(d);
    if !client.push_control(Message::text(Status::error(why).to_json())) {
        shared.count(Detail::ClientsDroppedSlow);
    }
}
