//! The Foxglove server with a real WebSocket client (tungstenite, already in the SDK's
//! dependency tree): serverInfo, the advertisements, a subscription and its messageData,
//! checked byte for byte against the protocol; the counts the server reports.
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
    let robot = LiveRobot { name: "t".into(), rate_hz: 1000.0, servos: vec![(1, 1), (2, 7)], imu: true };
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
/// alone, as its README shows; the SDK refuses that with HTTP 400, our front door lets it
/// in under the name it asked for (tests/foxglove_node.rs runs that client itself).
#[test]
fn a_client_offering_only_the_old_name_is_let_in_under_that_name() {
    let mut sink = FoxgloveSink::bind("127.0.0.1:0".parse().unwrap(), ServeOptions::default()).unwrap();
    sink.start(&LiveRobot { name: "t".into(), rate_hz: 1000.0, servos: vec![(1, 1)], imu: false });
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
    // Both names offered: the SDK's, untouched.
    let (mut ws, response) = connect("foxglove.websocket.v1, foxglove.sdk.v1").expect("the handshake succeeds");
    assert_eq!(response.headers()["sec-websocket-protocol"], "foxglove.sdk.v1");
    ws.close(None).ok();
    // Neither: the SDK's refusal, passed through.
    match connect("something.else") {
        Err(tungstenite::Error::Http(r)) => assert_eq!(r.status(), 400),
        other => panic!("expected HTTP 400, got {:?}", other.map(|(_, r)| r.status())),
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.stats().detail["handshakes_failed"] < 1 {
        assert!(Instant::now() < deadline, "the refusal is counted: {:?}", sink.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
    sink.finish();
    let stats = sink.stats();
    assert_eq!(stats.detail["clients_legacy_subprotocol"], 1, "{stats:?}");
    assert_eq!(stats.detail["clients_connected"], 2, "{stats:?}");
}

/// The front door reads at most 16 KiB of handshake: a client that sends more without
/// ending its head is cut off and counted, and the server goes on serving.
#[test]
fn an_endless_handshake_is_cut_off_and_counted() {
    use std::io::{Read, Write};
    let mut sink = FoxgloveSink::bind("127.0.0.1:0".parse().unwrap(), ServeOptions::default()).unwrap();
    sink.start(&LiveRobot { name: "t".into(), rate_hz: 1000.0, servos: vec![(1, 1)], imu: false });
    let mut s = std::net::TcpStream::connect(sink.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // The server may close while we still write: stop at the first refused write.
    let line = [b'a'; 1024];
    for _ in 0..64 {
        if s.write_all(&line).is_err() {
            break;
        }
    }
    let mut rest = Vec::new();
    // Closed (EOF or reset), never answered with a WebSocket.
    let _ = s.read_to_end(&mut rest);
    assert!(!String::from_utf8_lossy(&rest).contains("101"), "{}", String::from_utf8_lossy(&rest));
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.stats().detail["handshakes_failed"] < 1 {
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
