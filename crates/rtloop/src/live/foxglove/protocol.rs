//! The Foxglove WebSocket protocol, as far as this server speaks it: the server's messages
//! (JSON `serverInfo`, `advertise`, `unadvertise`, `status`; binary `messageData` and
//! `playbackState`) and every client message parsed into a [`ClientMessage`] or a typed
//! [`ClientError`]. Pure: no I/O, no state.
//!
//! Facts (the protocol's spec, `foxglove/ws-protocol` `docs/spec.md`, v1 — renamed
//! `foxglove.sdk.v1` by Foxglove's SDK, the same messages): text messages are JSON objects
//! with an `op`; binary messages start with a one-byte opcode, integers little-endian.
//! Server → client binary: `1` messageData (`u32` subscription id, `u64` log time ns, the
//! payload), `5` playbackState (`u8` status, `u64` current time ns, `f32` speed, `u8` did
//! seek, `u32` length + UTF-8 request id). Client → server binary: `1` messageData (client
//! publishing), `2` service call request, `3` playbackControlRequest (`u8` command, `f32`
//! speed, `u8` had seek, `u64` seek time ns, `u32` length + UTF-8 request id).
//!
//! Must never: panic or allocate without a bound on client input (every length is checked
//! against what was received, which the server already capped at
//! [`super::server::CLIENT_MESSAGE_MAX`]).

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use std::fmt;

/// The protocol's original name (`@foxglove/ws-protocol`'s `SUPPORTED_SUBPROTOCOL`), offered
/// by its TypeScript client, Lichtblick before 1.22 and older Foxglove Studios.
pub const LEGACY_SUBPROTOCOL: &str = "foxglove.websocket.v1";

/// The same protocol under the name Foxglove's SDK and the current app use.
pub const SDK_SUBPROTOCOL: &str = "foxglove.sdk.v1";

/// The subprotocol to answer a client's offer (the tokens of its `Sec-WebSocket-Protocol`
/// headers) with: `foxglove.sdk.v1` when offered, else `foxglove.websocket.v1`, else none
/// (the handshake is refused). Tokens match exactly: `foxglove.sdk.v1.1` (a variant that sends
/// schemas once per connection) is not `foxglove.sdk.v1`, and a client that offers it also
/// offers `foxglove.sdk.v1`.
pub fn negotiate<'a>(offered: impl IntoIterator<Item = &'a str>) -> Option<&'static str> {
    let mut legacy = false;
    for token in offered {
        match token.trim() {
            SDK_SUBPROTOCOL => return Some(SDK_SUBPROTOCOL),
            LEGACY_SUBPROTOCOL => legacy = true,
            _ => {}
        }
    }
    legacy.then_some(LEGACY_SUBPROTOCOL)
}

/// Binary opcode of the server's `messageData`.
pub const OP_MESSAGE_DATA: u8 = 1;
/// Binary opcode of the server's `playbackState`.
pub const OP_PLAYBACK_STATE: u8 = 5;
/// Binary opcode of the client's `messageData` (client publishing).
pub const OP_CLIENT_MESSAGE_DATA: u8 = 1;
/// Binary opcode of the client's service call request.
pub const OP_SERVICE_CALL_REQUEST: u8 = 2;
/// Binary opcode of the client's `playbackControlRequest`.
pub const OP_PLAYBACK_CONTROL_REQUEST: u8 = 3;

/// Bytes before the payload of a `messageData`.
pub const MESSAGE_DATA_HEADER: usize = 1 + 4 + 8;

/// Append a `messageData` (subscription `subscription`, log time `log_time_ns`) to `out`.
pub fn message_data(out: &mut Vec<u8>, subscription: u32, log_time_ns: u64, payload: &[u8]) {
    out.reserve(MESSAGE_DATA_HEADER + payload.len());
    out.push(OP_MESSAGE_DATA);
    out.extend_from_slice(&subscription.to_le_bytes());
    out.extend_from_slice(&log_time_ns.to_le_bytes());
    out.extend_from_slice(payload);
}

/// Where playback stands (`playbackState.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PlaybackStatus {
    /// Playing at the speed given.
    Playing = 0,
    /// Paused.
    Paused = 1,
    /// Not playing yet: preparing.
    Buffering = 2,
    /// At the end of the data.
    Ended = 3,
}

/// The server's `playbackState` (capability `playbackControl`).
#[derive(Debug, Clone, PartialEq)]
pub struct PlaybackState {
    /// Playing, paused, ended.
    pub status: PlaybackStatus,
    /// Where playback is, ns since the epoch.
    pub current_time: u64,
    /// Log seconds per wall second.
    pub playback_speed: f32,
    /// This state answers a seek.
    pub did_seek: bool,
    /// The request this state answers, if it answers one.
    pub request_id: Option<String>,
}

impl PlaybackState {
    /// The binary message.
    pub fn encode(&self) -> Vec<u8> {
        let id = self.request_id.as_deref().unwrap_or("");
        let mut out = Vec::with_capacity(1 + 1 + 8 + 4 + 1 + 4 + id.len());
        out.push(OP_PLAYBACK_STATE);
        out.push(self.status as u8);
        out.extend_from_slice(&self.current_time.to_le_bytes());
        out.extend_from_slice(&self.playback_speed.to_le_bytes());
        out.push(u8::from(self.did_seek));
        out.extend_from_slice(&(id.len() as u32).to_le_bytes());
        out.extend_from_slice(id.as_bytes());
        out
    }
}

/// A playback command (`playbackControlRequest.playback_command`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaybackCommand {
    /// Play.
    Play,
    /// Pause.
    Pause,
}

/// The client's `playbackControlRequest`.
#[derive(Debug, Clone, PartialEq)]
pub struct PlaybackControlRequest {
    /// Play or pause.
    pub playback_command: PlaybackCommand,
    /// The speed asked for (checked by whoever plays).
    pub playback_speed: f32,
    /// Where to seek to, ns since the epoch, if the client sought.
    pub seek_time: Option<u64>,
    /// The client's id of the request (echoed in the answer).
    pub request_id: String,
}

/// A `status` message's level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusLevel {
    /// Information.
    Info = 0,
    /// A warning.
    Warning = 1,
    /// An error.
    Error = 2,
}

/// The server's `status` message: shown by the app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// How serious.
    pub level: StatusLevel,
    /// The sentence.
    pub message: String,
}

impl Status {
    /// A warning.
    pub fn warning(message: impl Into<String>) -> Self {
        Status { level: StatusLevel::Warning, message: message.into() }
    }

    /// An error.
    pub fn error(message: impl Into<String>) -> Self {
        Status { level: StatusLevel::Error, message: message.into() }
    }

    /// The JSON text.
    pub fn to_json(&self) -> String {
        serde_json::json!({"op": "status", "level": self.level as u8, "message": self.message}).to_string()
    }
}

/// What the server says it is (`serverInfo`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerInfo<'a> {
    op: &'static str,
    /// Shown by clients.
    pub name: &'a str,
    /// `playbackControl` for `rtloop log serve`, nothing for a live run.
    pub capabilities: &'a [&'a str],
    /// Clients reset their state when it changes.
    pub session_id: &'a str,
    /// The data's time range (`rtloop log serve`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_start_time: Option<Time>,
    /// The data's time range (`rtloop log serve`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_end_time: Option<Time>,
}

impl<'a> ServerInfo<'a> {
    /// A server called `name` offering `capabilities`.
    pub fn new(name: &'a str, capabilities: &'a [&'a str], session_id: &'a str, range: Option<(u64, u64)>) -> Self {
        ServerInfo {
            op: "serverInfo",
            name,
            capabilities,
            session_id,
            data_start_time: range.map(|r| Time::from_ns(r.0)),
            data_end_time: range.map(|r| Time::from_ns(r.1)),
        }
    }

    /// The JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The capability that lets a client play, pause, seek and change speed.
pub const CAPABILITY_PLAYBACK_CONTROL: &str = "playbackControl";

/// A time as the protocol's JSON gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Time {
    /// Seconds.
    pub sec: u64,
    /// Nanoseconds, below 1e9.
    pub nsec: u32,
}

impl Time {
    /// From nanoseconds.
    pub fn from_ns(ns: u64) -> Self {
        Time { sec: ns / 1_000_000_000, nsec: (ns % 1_000_000_000) as u32 }
    }
}

/// One channel as `advertise` announces it (every channel here is JSON with a JSON schema).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelInfo<'a> {
    /// The channel's id.
    pub id: u64,
    /// The topic.
    pub topic: &'a str,
    /// `json`.
    pub encoding: &'static str,
    /// The schema's name (`rtloop.ServoState`, `foxglove.Log`, …).
    pub schema_name: &'a str,
    /// The JSON schema, as text.
    pub schema: &'a str,
    /// `jsonschema`.
    pub schema_encoding: &'static str,
}

/// The `advertise` message of `channels`.
pub fn advertise(channels: &[ChannelInfo<'_>]) -> String {
    serde_json::json!({"op": "advertise", "channels": channels}).to_string()
}

/// The `unadvertise` message of channel ids.
pub fn unadvertise(ids: &[u64]) -> String {
    serde_json::json!({"op": "unadvertise", "channelIds": ids}).to_string()
}

/// A client's subscription: its id for it, and the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subscription {
    /// The client's id (carried by every `messageData` of it).
    pub id: u32,
    /// The channel.
    pub channel_id: u64,
}

/// What a client asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientMessage {
    /// Subscribe to channels.
    Subscribe(Vec<Subscription>),
    /// End subscriptions (by the client's ids).
    Unsubscribe(Vec<u32>),
    /// Play, pause, seek, change speed.
    PlaybackControl(PlaybackControlRequest),
}

/// Why a client message was refused. The Display is the sentence the client gets in a
/// `status` error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// Not a JSON object with an `op`, not UTF-8, a field missing or of the wrong type.
    Malformed(String),
    /// A binary message with an opcode the protocol does not have, or too short.
    MalformedBinary(String),
    /// An operation of the protocol this server does not offer (client publishing,
    /// services, parameters, the connection graph, assets; playback control on a live run).
    Unsupported(&'static str),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Malformed(why) => write!(f, "Invalid message: {why}"),
            ClientError::MalformedBinary(why) => write!(f, "Invalid binary message: {why}"),
            ClientError::Unsupported(what) => {
                write!(f, "This server does not support {what}: it only serves channels to subscribe to")
            }
        }
    }
}

/// What the text ops this server does not offer are.
fn unsupported_op(op: &str) -> Option<&'static str> {
    Some(match op {
        "advertise" | "unadvertise" => "client publishing (advertise)",
        "getParameters" | "setParameters" | "subscribeParameterUpdates" | "unsubscribeParameterUpdates" => "parameters",
        "subscribeConnectionGraph" | "unsubscribeConnectionGraph" => "the connection graph",
        "fetchAsset" => "assets (fetchAsset)",
        _ => return None,
    })
}

/// Parse a text message.
pub fn parse_text(text: &str) -> Result<ClientMessage, ClientError> {
    let value: Json = serde_json::from_str(text).map_err(|e| ClientError::Malformed(e.to_string()))?;
    let op = value
        .get("op")
        .and_then(Json::as_str)
        .ok_or_else(|| ClientError::Malformed("a JSON object with a string \"op\" is expected".into()))?;
    match op {
        "subscribe" => {
            #[derive(Deserialize)]
            struct Subscribe {
                subscriptions: Vec<Subscription>,
            }
            serde_json::from_value::<Subscribe>(value)
                .map(|s| ClientMessage::Subscribe(s.subscriptions))
                .map_err(|e| ClientError::Malformed(format!("subscribe: {e}")))
        }
        "unsubscribe" => {
            #[derive(Deserialize)]
            #[serde(rename_all = "camelCase")]
            struct Unsubscribe {
                subscription_ids: Vec<u32>,
            }
            serde_json::from_value::<Unsubscribe>(value)
                .map(|u| ClientMessage::Unsubscribe(u.subscription_ids))
                .map_err(|e| ClientError::Malformed(format!("unsubscribe: {e}")))
        }
        other => match unsupported_op(other) {
            Some(what) => Err(ClientError::Unsupported(what)),
            None => Err(ClientError::Malformed(format!("unknown op {:?}", truncate(other, 64)))),
        },
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Parse a binary message; `playback` says whether this server offers playback control.
pub fn parse_binary(bytes: &[u8], playback: bool) -> Result<ClientMessage, ClientError> {
    let Some((&opcode, body)) = bytes.split_first() else {
        return Err(ClientError::MalformedBinary("empty".into()));
    };
    match opcode {
        OP_CLIENT_MESSAGE_DATA => Err(ClientError::Unsupported("client publishing (messageData)")),
        OP_SERVICE_CALL_REQUEST => Err(ClientError::Unsupported("services (a service call)")),
        OP_PLAYBACK_CONTROL_REQUEST if !playback => Err(ClientError::Unsupported("playback control on a live run")),
        OP_PLAYBACK_CONTROL_REQUEST => parse_playback_request(body).map(ClientMessage::PlaybackControl),
        other => Err(ClientError::MalformedBinary(format!("unknown opcode {other}"))),
    }
}

fn parse_playback_request(body: &[u8]) -> Result<PlaybackControlRequest, ClientError> {
    const FIXED: usize = 1 + 4 + 1 + 8 + 4;
    let short = || ClientError::MalformedBinary(format!("a playbackControlRequest needs at least {FIXED} bytes"));
    let fixed = body.get(..FIXED).ok_or_else(short)?;
    let playback_command = match fixed[0] {
        0 => PlaybackCommand::Play,
        1 => PlaybackCommand::Pause,
        other => return Err(ClientError::MalformedBinary(format!("playback command {other} (0 play, 1 pause)"))),
    };
    let word = |at: usize| [fixed[at], fixed[at + 1], fixed[at + 2], fixed[at + 3]];
    let playback_speed = f32::from_le_bytes(word(1));
    let had_seek = fixed[5] != 0;
    let mut seek = [0u8; 8];
    seek.copy_from_slice(&fixed[6..14]);
    let seek_time = had_seek.then_some(u64::from_le_bytes(seek));
    let id_len = u32::from_le_bytes(word(14)) as usize;
    let id = body[FIXED..]
        .get(..id_len)
        .ok_or_else(|| ClientError::MalformedBinary(format!("request id of {id_len} bytes past the message's end")))?;
    let request_id = std::str::from_utf8(id)
        .map_err(|_| ClientError::MalformedBinary("request id is not UTF-8".into()))?
        .to_string();
    Ok(PlaybackControlRequest { playback_command, playback_speed, seek_time, request_id })
}

/// A `playbackControlRequest` as a client sends it (for tests and tools).
pub fn encode_playback_request(r: &PlaybackControlRequest) -> Vec<u8> {
    let mut out = vec![OP_PLAYBACK_CONTROL_REQUEST];
    out.push(match r.playback_command {
        PlaybackCommand::Play => 0,
        PlaybackCommand::Pause => 1,
    });
    out.extend_from_slice(&r.playback_speed.to_le_bytes());
    out.push(u8::from(r.seek_time.is_some()));
    out.extend_from_slice(&r.seek_time.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&(r.request_id.len() as u32).to_le_bytes());
    out.extend_from_slice(r.request_id.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdk_name_is_preferred_and_tokens_match_exactly() {
        assert_eq!(negotiate(["foxglove.websocket.v1", " foxglove.sdk.v1"]), Some(SDK_SUBPROTOCOL));
        assert_eq!(negotiate(["foxglove.websocket.v1"]), Some(LEGACY_SUBPROTOCOL));
        assert_eq!(negotiate(["foxglove.sdk.v1.1"]), None);
        assert_eq!(negotiate(["foxglove.websocket.v10", "x"]), None);
        assert_eq!(negotiate([]), None);
    }

    #[test]
    fn message_data_is_opcode_subscription_time_payload() {
        let mut out = Vec::new();
        message_data(&mut out, 7, 0x0102_0304_0506_0708, b"{}");
        assert_eq!(out, [1, 7, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1, b'{', b'}']);
    }

    #[test]
    fn playback_requests_round_trip_and_every_cut_is_refused() {
        let r = PlaybackControlRequest {
            playback_command: PlaybackCommand::Pause,
            playback_speed: 2.5,
            seek_time: Some(123_456_789),
            request_id: "é1".into(),
        };
        let bytes = encode_playback_request(&r);
        assert_eq!(parse_binary(&bytes, true), Ok(ClientMessage::PlaybackControl(r)));
        for cut in 0..bytes.len() {
            assert!(parse_binary(&bytes[..cut], true).is_err(), "{cut}");
        }
        assert_eq!(parse_binary(&bytes, false), Err(ClientError::Unsupported("playback control on a live run")));
    }

    fn kind(e: &ClientError) -> &'static str {
        match e {
            ClientError::Malformed(_) | ClientError::MalformedBinary(_) => "refused_malformed",
            ClientError::Unsupported(_) => "refused_unsupported",
        }
    }

    #[test]
    fn text_messages_parse_or_say_why_not() {
        assert_eq!(
            parse_text(r#"{"op":"subscribe","subscriptions":[{"id":1,"channelId":4}]}"#),
            Ok(ClientMessage::Subscribe(vec![Subscription { id: 1, channel_id: 4 }]))
        );
        assert_eq!(
            parse_text(r#"{"op":"unsubscribe","subscriptionIds":[1,2]}"#),
            Ok(ClientMessage::Unsubscribe(vec![1, 2]))
        );
        for (text, counter) in [
            ("nope", "refused_malformed"),
            ("[]", "refused_malformed"),
            (r#"{"op":"subscribe"}"#, "refused_malformed"),
            (r#"{"op":"subscribe","subscriptions":[{"id":-1,"channelId":4}]}"#, "refused_malformed"),
            (r#"{"op":"frobnicate"}"#, "refused_malformed"),
            (r#"{"op":"setParameters","parameters":[]}"#, "refused_unsupported"),
            (r#"{"op":"advertise","channels":[]}"#, "refused_unsupported"),
            (r#"{"op":"fetchAsset","uri":"x","requestId":1}"#, "refused_unsupported"),
        ] {
            let e = parse_text(text).unwrap_err();
            assert_eq!(kind(&e), counter, "{text}: {e}");
            assert!(!e.to_string().contains('\n'));
        }
        assert_eq!(kind(&parse_binary(&[2, 0, 0], true).unwrap_err()), "refused_unsupported");
        assert_eq!(kind(&parse_binary(&[9], true).unwrap_err()), "refused_malformed");
        assert_eq!(kind(&parse_binary(&[], true).unwrap_err()), "refused_malformed");
    }

    #[test]
    fn server_messages_are_the_protocols_json() {
        let info: Json =
            serde_json::from_str(&ServerInfo::new("n", &["playbackControl"], "s", Some((1_500_000_000, 2))).to_json())
                .unwrap();
        assert_eq!(info["op"], "serverInfo");
        assert_eq!(info["capabilities"][0], "playbackControl");
        assert_eq!(info["sessionId"], "s");
        assert_eq!(info["dataStartTime"], serde_json::json!({"sec": 1, "nsec": 500_000_000}));
        let ad: Json = serde_json::from_str(&advertise(&[ChannelInfo {
            id: 3,
            topic: "/t",
            encoding: "json",
            schema_name: "x.Y",
            schema: "{}",
            schema_encoding: "jsonschema",
        }]))
        .unwrap();
        assert_eq!(ad["channels"][0]["schemaName"], "x.Y");
        assert_eq!(ad["channels"][0]["schemaEncoding"], "jsonschema");
        let st: Json = serde_json::from_str(&Status::warning("w").to_json()).unwrap();
        assert_eq!((st["op"].as_str(), st["level"].as_u64()), (Some("status"), Some(1)));
        let ps = PlaybackState {
            status: PlaybackStatus::Ended,
            current_time: 9,
            playback_speed: 1.0,
            did_seek: true,
            request_id: Some("r".into()),
        }
        .encode();
        assert_eq!(ps[..2], [5, 3]);
        assert_eq!(ps.len(), 1 + 1 + 8 + 4 + 1 + 4 + 1);
    }
}
