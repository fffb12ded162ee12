//! The Foxglove server with a real WebSocket client (tungstenite): serverInfo, the
//! advertisements, a subscription and its messageData, checked byte for byte against the
//! protocol; the counts the server reports; and every limit a hostile or broken peer meets.
#![cfg(feature = "foxglove")]

use rtloop::live::foxglove::{FoxgloveSink, ServeOptions};
use rtloop::live::{live_cycle, LiveRobot, LiveSink};
use rtloop::telemetry::CycleLog;
use serde_json::Value as Json;
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::Message;

fn text(ws: &mut tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>>) -> Json {
    loop {
        match ws.read().expect("the server answers") {
            Message::Text(t) => return serde_json::from_str(&t).expect("JSON"),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("expected a text message, got {other:?}"),
        }
    }
}

#[test]
fn a_client_subscribes_and_gets_each_cycle_as_message_data() {
    let mut sink = FoxgloveSink::bind("127.0.0.1:0".parse().unwrap(), ServeOptions::default()).unwrap();
    let robot = LiveRobot { name: "t".into(), rate_hz: 1000.0, servos: vec![(1, 1), (2, 7)], imu: true, model: None };
    sink.start(&robot);
    let mut request = format!("ws://{}", sink.addr()).into_client_request().unwrap();
    request.headers_mut().insert("Sec-WebSocket-Protocol", "foxglove.sdk.v1".parse().unwrap());
    let (mut ws, response) = tungstenite::connect(request).expect("the handshake succeeds");
    assert_eq!(response.headers()["sec-websocket-protocol"], "foxglove.sdk.v1");
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    let info = text(&mut ws);
    assert_eq!(info["op"], "serverInfo");
    let advertise = text(&mut ws);
    assert_eq!(advertise["op"], "advertise");
    let channels = advertise["channels"].as_array().unwrap();
    let topics: Vec<&str> = channels.iter().map(|c| c["topic"].as_str().unwrap()).collect();
    for t in ["/cycle", "/bus/1/servo/1/state", "/bus/2/servo/7/command", "/imu", "/imu/transform", "/events"] {
        assert!(topics.contains(&t), "{t} in {topics:?}");
    }
    let id_of = |t: &str| channels.iter().find(|c| c["topic"] == t).unwrap()["id"].as_u64().unwrap();
    let subscribe = serde_json::json!({"op": "subscribe", "subscriptions": [
        {"id": 10, "channelId": id_of("/cycle")}, {"id": 11, "channelId": id_of("/bus/2/servo/7/state")}]});
    ws.send(Message::text(subscribe.to_string())).unwrap();
    // The subscription reaches the server asynchronously: wait for it, on its own count.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.subscriptions() < 2 {
        assert!(Instant::now() < deadline, "the server saw the subscriptions");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut c = CycleLog { servos_len: 2, ..Default::default() };
    c.servos[0].bus = 1;
    c.servos[0].id = 1;
    c.servos[1].bus = 2;
    c.servos[1].id = 7;
    c.servos[1].position = 0.25;
    c.servos[1].velocity = f64::NAN;
    for index in 0..5 {
        c.index = index * 10;
        c.woke_ns = index * 10_000_000;
        sink.cycle(&live_cycle(&c, 1_000_000));
    }
    let mut cycles = Vec::new();
    let mut states = Vec::new();
    while cycles.len() < 5 || states.len() < 5 {
        let Message::Binary(b) = ws.read().unwrap() else { continue };
        assert_eq!(b[0], 1, "messageData opcode");
        let sub = u32::from_le_bytes(b[1..5].try_into().unwrap());
        let log_time = u64::from_le_bytes(b[5..13].try_into().unwrap());
        let payload: Json = serde_json::from_slice(&b[13..]).unwrap();
        match sub {
            10 => cycles.push((log_time, payload)),
            11 => states.push(payload),
            other => panic!("subscription {other}"),
        }
    }
    let indices: Vec<u64> = cycles.iter().map(|(_, p)| p["index"].as_u64().unwrap()).collect();
    assert_eq!(indices, [0, 10, 20, 30, 40]);
    // Log time: the cycle's wall-clock stamp (1 s + its wakeup), ns.
    assert_eq!(cycles[1].0, 1_010_000_000);
    assert_eq!(states[0]["position"], 0.25);
    assert_eq!(states[0]["velocity"], Json::Null);
    ws.close(None).ok();
    sink.finish();
    let stats = sink.stats();
    assert_eq!(stats.cycles, 5);
    assert_eq!(stats.messages, 10);
    assert_eq!((stats.dropped, stats.refused, stats.errors), (0, 0, 0));
    assert_eq!(stats.detail["clients_connected"], 1);
}

/// The official TypeScript client (`@foxglove/ws-protocol`) offers the protocol's old name
/// alone, as its README shows: it is let in under the name it asked for
/// (tests/foxglove_node.rs runs that client itself).
#[test]
fn a_client_offering_only_the_old_name_is_let_in_under_that_name() {
    let mut sink = FoxgloveSink::bind("127.0.0.1:0".parse().unwrap(), ServeOptions::default()).unwrap();
    sink.start(&LiveRobot { name: "t".into(), rate_hz: 1000.0, servos: vec![(1, 1)], imu: false, model: None });
    let connect = |offer: &str| {
        let mut request = format!("ws://{}", sink.addr()).into_client_request().unwrap();
        request.headers_mut().insert("Sec-WebSocket-Protocol", offer.parse().unwrap());
        tungstenite::connect(request)
    };
    let (mut ws, response) = connect("foxglove.websocket.v1").expect("the handshake succeeds");
    assert_eq!(response.headers()["sec-websocket-protocol"], "foxglove.websocket.v1");
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    assert_eq!(text(&mut ws)["op"], "serverInfo");
    assert_eq!(text(&mut ws)["op"], "advertise");
    ws.close(None).ok();
    // Both names offered: the SDK's.
    let (mut ws, response) = connect("foxglove.websocket.v1, foxglove.sdk.v1").expect("the handshake succeeds");
    assert_eq!(response.headers()["sec-websocket-protocol"], "foxglove.sdk.v1");
    ws.close(None).ok();
    // Neither: refused.
    match connect("something.else") {
        Err(tungstenite::Error::Http(r)) => assert_eq!(r.status(), 400),
        other => panic!("expected HTTP 400, got {:?}", other.map(|(_, r)| r.status())),
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.stats().detail["handshakes_refused"] < 1 {
        assert!(Instant::now() < deadline, "the refusal is counted: {:?}", sink.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
    sink.finish();
    let stats = sink.stats();
    assert_eq!(stats.detail["clients_legacy_subprotocol"], 1, "{stats:?}");
    assert_eq!(stats.detail["clients_connected"], 2, "{stats:?}");
}

/// The server reads at most 64 KiB of handshake: a client that sends more without ending its
/// head is cut off and counted, and the server goes on serving.
#[test]
fn an_endless_handshake_is_cut_off_and_counted() {
    use std::io::{Read, Write};
    let mut sink = FoxgloveSink::bind("127.0.0.1:0".parse().unwrap(), ServeOptions::default()).unwrap();
    sink.start(&LiveRobot { name: "t".into(), rate_hz: 1000.0, servos: vec![(1, 1)], imu: false, model: None });
    let mut s = std::net::TcpStream::connect(sink.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // The server may close while we still write: stop at the first refused write.
    let line = [b'a'; 1024];
    for _ in 0..256 {
        if s.write_all(&line).is_err() {
            break;
        }
    }
    let mut rest = Vec::new();
    // Closed (EOF or reset), never answered with a WebSocket.
    let _ = s.read_to_end(&mut rest);
    assert!(!String::from_utf8_lossy(&rest).contains("101"), "{}", String::from_utf8_lossy(&rest));
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.stats().detail["handshakes_refused"] < 1 {
        assert!(Instant::now() < deadline, "counted: {:?}", sink.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut request = format!("ws://{}", sink.addr()).into_client_request().unwrap();
    request.headers_mut().insert("Sec-WebSocket-Protocol", "foxglove.sdk.v1".parse().unwrap());
    let (mut ws, _) = tungstenite::connect(request).expect("still serving");
    ws.close(None).ok();
    sink.finish();
    assert_eq!(sink.stats().refused, 1, "{:?}", sink.stats());
}

fn sdk_client(
    addr: std::net::SocketAddr,
) -> tungstenite::Result<tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>>> {
    let mut request = format!("ws://{addr}").into_client_request().unwrap();
    request.headers_mut().insert("Sec-WebSocket-Protocol", "foxglove.sdk.v1".parse().unwrap());
    let (ws, _) = tungstenite::connect(request)?;
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    }
    Ok(ws)
}

/// Wait (bounded) until `what` holds of the sink's stats.
fn until(sink: &FoxgloveSink, what: &str, check: impl Fn(&rtloop::live::LiveStats) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check(&sink.stats()) {
        assert!(Instant::now() < deadline, "{what}: {:?}", sink.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `finish` on another thread: it must return, whatever the clients do (a hang is a
/// failure after a minute, far beyond the second it is bounded by).
fn finish_returns(mut sink: FoxgloveSink) -> rtloop::live::LiveStats {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        sink.finish();
        let _ = tx.send(sink.stats());
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("finish returned although a client does not cooperate")
}

fn robot(servos: usize) -> LiveRobot {
    LiveRobot {
        name: "t".into(),
        rate_hz: 1000.0,
        servos: (0..servos).map(|i| (1, i as u8 + 1)).collect(),
        imu: true,
        model: None,
    }
}

/// Issue 29 §1: a client that subscribes to everything and stops reading fills its socket
/// and then its queue (which drops, counted per message); `finish` still returns, and the
/// client's socket is closed under it.
#[test]
fn a_client_that_stops_reading_cannot_keep_the_server_from_finishing() {
    let mut sink = FoxgloveSink::bind("127.0.0.1:0".parse().unwrap(), ServeOptions::default()).unwrap();
    sink.start(&robot(32));
    let mut ws = sdk_client(sink.addr()).unwrap();
    text(&mut ws);
    let advertise = text(&mut ws);
    let subs: Vec<Json> = advertise["channels"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, c)| serde_json::json!({"id": i, "channelId": c["id"]}))
        .collect();
    let n = subs.len() as u64;
    ws.send(Message::text(serde_json::json!({"op": "subscribe", "subscriptions": subs}).to_string())).unwrap();
    until(&sink, "subscribed", |s| s.detail["subscriptions"] == n);
    // Never read again: push cycles until the client's queue drops, and until it still drops
    // after the server's writer had 300 ms to move the queue into the socket. A drop the
    // writer merely lagged behind (a busy machine) is not a full socket: the writer would
    // then send the queue and the close frame in time, and nothing would be closed hard.
    let mut c = CycleLog { servos_len: 32, ..Default::default() };
    let mut index = 0;
    let mut push = |sink: &mut FoxgloveSink| {
        c.index = index;
        index += 1;
        sink.cycle(&live_cycle(&c, 1_000_000));
        if index % 64 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let dropped = |sink: &FoxgloveSink| sink.stats().detail["client_queue_dropped"];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let before = dropped(&sink);
        let mut pushed = 0;
        while dropped(&sink) == before {
            assert!(Instant::now() < deadline, "the socket never filled: {:?}", sink.stats());
            push(&mut sink);
            pushed += 1;
        }
        // Full, and still full after the pause: the writer is blocked on the socket.
        if before > 0 && pushed <= 16 {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let stats = finish_returns(sink);
    assert!(stats.dropped >= stats.detail["client_queue_dropped"], "{stats:?}");
    // It could not take a close frame: its socket was dropped.
    assert_eq!(stats.detail["clients_closed_hard"], 1, "{stats:?}");
    assert_eq!(stats.detail["clients_disconnected"], 1, "{stats:?}");
    assert_eq!((stats.refused, stats.errors), (0, 0), "{stats:?}");
    // The socket was closed under the client: reading reaches its end (after what was sent).
    let end = Instant::now() + Duration::from_secs(60);
    while ws.read().is_ok() {
        assert!(Instant::now() < end, "the server closed the connection");
    }
}

/// Issue 29 §2 and §11: a bare TCP connection (no handshake) neither holds `finish` nor
/// counts as a refusal; one closed at once counts as abandoned, not as a failed handshake.
#[test]
fn bare_connections_are_abandoned_not_refused_and_hold_nothing() {
    let mut sink = FoxgloveSink::bind("127.0.0.1:0".parse().unwrap(), ServeOptions::default()).unwrap();
    sink.start(&robot(1));
    drop(std::net::TcpStream::connect(sink.addr()).unwrap());
    until(&sink, "the closed connection is counted", |s| s.detail["connections_abandoned"] == 1);
    let _held = std::net::TcpStream::connect(sink.addr()).unwrap();
    let stats = finish_returns(sink);
    assert_eq!(stats.refused, 0, "{stats:?}");
    assert_eq!(stats.detail["connections_abandoned"], 1, "{stats:?}");
}

/// Issue 29 §4: at most MAX_CLIENTS clients; the next gets HTTP 503 and a sentence, and gets
/// in once one has left.
#[test]
fn clients_beyond_the_limit_are_refused_until_one_leaves() {
    use rtloop::live::foxglove::server::MAX_CLIENTS;
    let mut sink = FoxgloveSink::bind("127.0.0.1:0".parse().unwrap(), ServeOptions::default()).unwrap();
    sink.start(&robot(1));
    let mut clients: Vec<_> = (0..MAX_CLIENTS).map(|_| sdk_client(sink.addr()).expect("within the limit")).collect();
    match sdk_client(sink.addr()) {
        Err(tungstenite::Error::Http(r)) => {
            assert_eq!(r.status(), 503);
            let body = String::from_utf8_lossy(r.body().as_deref().unwrap_or_default()).to_string();
            assert!(body.contains(&format!("at most {MAX_CLIENTS}")), "{body}");
        }
        other => panic!("expected HTTP 503, got {:?}", other.map(|_| "a connection")),
    }
    let mut first = clients.remove(0);
    first.close(None).unwrap();
    while first.read().is_ok() {}
    until(&sink, "one left", |s| s.detail["clients_disconnected"] == 1);
    let _in = sdk_client(sink.addr()).expect("a slot is free again");
    let stats = finish_returns(sink);
    assert_eq!(stats.detail["clients_refused"], 1, "{stats:?}");
    assert_eq!(stats.refused, 1, "{stats:?}");
    assert_eq!(stats.detail["clients_connected"], MAX_CLIENTS as u64 + 1, "{stats:?}");
}

/// Issue 29 §4: a message over CLIENT_MESSAGE_MAX — whole, announced by a frame header, or
/// built of fragments — closes the connection with code 1009 and is counted; it is never
/// buffered beyond the limit.
#[test]
fn a_client_message_over_the_limit_closes_the_connection() {
    use rtloop::live::foxglove::server::CLIENT_MESSAGE_MAX;
    use std::io::Write;
    let mut sink = FoxgloveSink::bind("127.0.0.1:0".parse().unwrap(), ServeOptions::default()).unwrap();
    sink.start(&robot(1));
    let closed_with_1009 = |ws: &mut tungstenite::WebSocket<_>| loop {
        match ws.read() {
            Ok(Message::Close(Some(f))) => {
                assert_eq!(u16::from(f.code), 1009, "{f:?}");
                return;
            }
            Ok(_) => {}
            Err(e) => panic!("expected a close frame with code 1009, got {e}"),
        }
    };
    // A whole text message one byte too long.
    let mut ws = sdk_client(sink.addr()).unwrap();
    ws.send(Message::text("x".repeat(CLIENT_MESSAGE_MAX + 1))).unwrap();
    closed_with_1009(&mut ws);
    // Fragments of a message that would grow past the limit.
    let mut ws = sdk_client(sink.addr()).unwrap();
    let chunk = vec![b'y'; 16 * 1024];
    let mut sent = 0;
    let mut first = true;
    while sent <= CLIENT_MESSAGE_MAX {
        let frame = if first {
            tungstenite::protocol::frame::Frame::message(
                chunk.clone(),
                tungstenite::protocol::frame::coding::OpCode::Data(tungstenite::protocol::frame::coding::Data::Binary),
                false,
            )
        } else {
            tungstenite::protocol::frame::Frame::message(
                chunk.clone(),
                tungstenite::protocol::frame::coding::OpCode::Data(
                    tungstenite::protocol::frame::coding::Data::Continue,
                ),
                false,
            )
        };
        first = false;
        if ws.write(Message::Frame(frame)).and_then(|()| ws.flush()).is_err() {
            break;
        }
        sent += chunk.len();
    }
    closed_with_1009(&mut ws);
    // A raw frame header announcing 1 GiB: refused on the header, nothing buffered.
    let mut ws = sdk_client(sink.addr()).unwrap();
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_mut() {
        // FIN + binary, masked, 64-bit length, mask key.
        let mut header = vec![0x82, 0x80 | 127];
        header.extend_from_slice(&(1u64 << 30).to_be_bytes());
        header.extend_from_slice(&[1, 2, 3, 4]);
        s.write_all(&header).unwrap();
    }
    closed_with_1009(&mut ws);
    until(&sink, "each counted", |s| s.detail["refused_too_large"] == 3);
    let stats = finish_returns(sink);
    assert_eq!(stats.refused, 3, "{stats:?}");
}

/// Issue 29 §4 and §11: at most MAX_HANDSHAKING connections in their handshake; the next is
/// closed at once and counted. A service call (we offer none) is refused and counted.
#[test]
fn handshakes_beyond_the_limit_are_closed_and_service_calls_are_refused() {
    use rtloop::live::foxglove::server::MAX_HANDSHAKING;
    use std::io::Read;
    let mut sink = FoxgloveSink::bind("127.0.0.1:0".parse().unwrap(), ServeOptions::default()).unwrap();
    sink.start(&robot(1));
    let mut ws = sdk_client(sink.addr()).unwrap();
    ws.send(Message::binary(vec![2u8, 1, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, b'j', b's', b'o', b'n'])).unwrap();
    let status = loop {
        let t = text(&mut ws);
        if t["op"] == "status" {
            break t;
        }
    };
    assert_eq!(status["level"], 2, "{status}");
    assert!(status["message"].as_str().unwrap().contains("services"), "{status}");
    let held: Vec<_> = (0..MAX_HANDSHAKING).map(|_| std::net::TcpStream::connect(sink.addr()).unwrap()).collect();
    let mut extra = std::net::TcpStream::connect(sink.addr()).unwrap();
    extra.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = [0u8; 16];
    // Closed at once: EOF (or a reset), not a wait for the handshake timeout.
    assert!(matches!(extra.read(&mut buf), Ok(0) | Err(_)));
    until(&sink, "counted", |s| s.detail["connections_refused"] == 1);
    drop(held);
    let stats = finish_returns(sink);
    assert_eq!(stats.detail["refused_unsupported"], 1, "{stats:?}");
    assert_eq!(stats.refused, 2, "{stats:?}");
}
