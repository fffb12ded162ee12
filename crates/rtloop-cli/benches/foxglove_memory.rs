//! The memory a run holds with Foxglove clients: `rtloop run --foxglove --foxglove-every 1`
//! (the 12-servo simulated quadruped at 1 kHz, every cycle published) with 0, 1 and 50
//! clients, each subscribed to every channel. Each client is as hostile as the limits allow
//! (issue 29 §4): it stops reading once subscribed (so its queue fills to its bound) and
//! leaves a message unfinished, one byte under the size limit (so the server holds it).
//! Clients beyond the server's limit are refused; they are counted, not served.
//!
//! The figure is the process's peak resident set (VmHWM; with `mlockall`, all of it locked)
//! and its resident set after the clients had 5 s to fill their queues.
//!
//! `cargo bench -p rtloop-cli --bench foxglove_memory` (docs/foxglove.md quotes it).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The server's limit on a client message (rtloop::live::foxglove::server::CLIENT_MESSAGE_MAX).
const MESSAGE_MAX: usize = rtloop::live::foxglove::server::CLIENT_MESSAGE_MAX;

fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A masked client frame (the client must mask), `fin` or not.
fn frame(opcode: u8, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![if fin { 0x80 | opcode } else { opcode }];
    let len = payload.len();
    if len < 126 {
        out.push(0x80 | len as u8);
    } else if len <= 0xFFFF {
        out.push(0x80 | 126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0x80 | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    let mask = [0x12, 0x34, 0x56, 0x78];
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

/// Connect, subscribe to every channel, start a message just under the limit and never
/// finish it, never read again. `None` when the server refused the client.
fn hostile_client(port: u16) -> Option<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: foxglove.sdk.v1\r\n\r\n"
    )
    .ok()?;
    // Read the answer and the first messages (serverInfo, advertise) as raw bytes.
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    let deadline = Instant::now() + Duration::from_secs(10);
    while !String::from_utf8_lossy(&got).contains("\"advertise\"") {
        if Instant::now() > deadline {
            return None;
        }
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
    }
    if !got.starts_with(b"HTTP/1.1 101") {
        return None;
    }
    // Channel ids: every `"id":N` in the advertisement (ids are small integers).
    let text = String::from_utf8_lossy(&got).to_string();
    let ids: Vec<u64> = text
        .split("\"id\":")
        .skip(1)
        .filter_map(|r| r.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect();
    let subs: Vec<String> =
        ids.iter().enumerate().map(|(i, id)| format!("{{\"id\":{i},\"channelId\":{id}}}")).collect();
    let subscribe = format!("{{\"op\":\"subscribe\",\"subscriptions\":[{}]}}", subs.join(","));
    s.write_all(&frame(0x1, true, subscribe.as_bytes())).ok()?;
    // A binary message one byte under the limit, its last byte never sent.
    let body = vec![0u8; MESSAGE_MAX - 1];
    s.write_all(&frame(0x2, false, &body)).ok()?;
    Some(s)
}

fn measure(clients: usize) -> (u64, u64, usize, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut run = Command::new(env!("CARGO_BIN_EXE_rtloop"))
        .args(["run", "--duration", "12", "--foxglove", &format!("127.0.0.1:{port}"), "--foxglove-every", "1"])
        .args(["--json", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start rtloop run");
    let pid = run.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let held: Vec<TcpStream> = (0..clients).filter_map(|_| hostile_client(port)).collect();
    std::thread::sleep(Duration::from_secs(5));
    let rss = status_kib(pid, "VmRSS:");
    let hwm = status_kib(pid, "VmHWM:");
    let mut out = String::new();
    run.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let _ = run.wait();
    drop(held);
    let summary: serde_json::Value = out.lines().last().and_then(|l| serde_json::from_str(l).ok()).unwrap_or_default();
    let fox = summary["live"]["publishers"][0].clone();
    let served = held_count(&fox);
    (rss, hwm, served, format!("refused {} dropped {}", fox["detail"]["clients_refused"], fox["dropped"]))
}

fn held_count(fox: &serde_json::Value) -> usize {
    fox["detail"]["clients_connected"].as_u64().unwrap_or(0) as usize
}

fn main() {
    println!("rtloop run --foxglove --foxglove-every 1, 12 servos at 1 kHz; clients subscribed to all, never reading,");
    println!("each holding an unfinished message of {} bytes", MESSAGE_MAX - 1);
    println!("{:>8} {:>8} {:>12} {:>12}  counts", "clients", "served", "VmRSS MiB", "VmHWM MiB");
    for clients in [0, 1, 50] {
        let (rss, hwm, served, counts) = measure(clients);
        println!("{clients:>8} {served:>8} {:>12.1} {:>12.1}  {counts}", rss as f64 / 1024.0, hwm as f64 / 1024.0);
    }
}
