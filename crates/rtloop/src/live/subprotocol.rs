//! The Foxglove server's front door: lets in clients that offer only the protocol's old name,
//! `foxglove.websocket.v1`.
//!
//! **Why.** The Foxglove SDK (0.30) negotiates only `foxglove.sdk.v1` and `foxglove.sdk.v1.1`
//! and answers any other offer with HTTP 400 ("Missing expected sec-websocket-protocol
//! header"); it has no option for another name. `foxglove.sdk.v1` is the old protocol
//! renamed — the same messages (Foxglove's stance, and why Lichtblick 1.22 and Flora merely
//! added the new name beside the old) — but the official TypeScript client
//! (`@foxglove/ws-protocol` 0.8.0, npm's latest) opens its socket, as its README shows, with
//! `foxglove.websocket.v1` alone, as do Lichtblick before 1.22 and older Foxglove Studios.
//!
//! **How.** The address the user gave is ours; the SDK listens on a loopback port of its own.
//! For each connection we read the HTTP upgrade request (at most [`HEAD_MAX`] bytes, within
//! [`HANDSHAKE_TIMEOUT`]; otherwise the connection is closed and counted as a failed
//! handshake). A request that offers `foxglove.websocket.v1` and none of the SDK's names gets
//! `foxglove.sdk.v1` added to its offer, and the SDK's `101` answer naming `foxglove.sdk.v1`
//! goes back under the name the client offered (a WebSocket client refuses a subprotocol it
//! did not offer). Everything else — any other request, every byte after the handshake —
//! passes through unchanged, so the SDK still answers (and we still count) every refusal,
//! and a client that does not read still fills its SDK queue, which drops and reports.
//!
//! Must never: wait without a bound for a handshake; grow a buffer past [`HEAD_MAX`]; change
//! a byte of the WebSocket stream; listen on the SDK's port beyond loopback.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The old name of the protocol (`@foxglove/ws-protocol`'s `SUPPORTED_SUBPROTOCOL`).
pub const LEGACY: &str = "foxglove.websocket.v1";

/// The names the SDK negotiates.
pub const SDK: [&str; 2] = ["foxglove.sdk.v1", "foxglove.sdk.v1.1"];

/// The largest HTTP request (or answer) head read before the WebSocket stream starts.
pub const HEAD_MAX: usize = 16 * 1024;

/// How long a client (or the SDK) has to send its whole head.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the front door tells the server's counters.
pub trait FrontCounts: Send + Sync + 'static {
    /// A connection closed before the SDK saw it (a head too long, too slow, or cut).
    fn handshake_failed(&self);
    /// A client that offered only the old name was let in.
    fn legacy_client(&self);
}

/// Serve `listener` (the user's address), relaying each connection to the SDK at `inner`.
/// Runs until its runtime shuts down.
pub async fn serve(listener: TcpListener, inner: SocketAddr, counts: Arc<dyn FrontCounts>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(relay(stream, inner, Arc::clone(&counts)));
            }
            // Out of descriptors and the like: do not spin; the SDK's own listener did the same.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// One connection: the head (rewritten for an old client), then both directions verbatim.
async fn relay(mut client: TcpStream, inner: SocketAddr, counts: Arc<dyn FrontCounts>) {
    let _ = client.set_nodelay(true);
    let head = match tokio::time::timeout(HANDSHAKE_TIMEOUT, read_head(&mut client)).await {
        Ok(Ok(head)) => head,
        _ => {
            counts.handshake_failed();
            return;
        }
    };
    let (request, legacy) = rewrite_request(&head);
    let Ok(Ok(mut server)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, TcpStream::connect(inner)).await else {
        counts.handshake_failed();
        return;
    };
    let _ = server.set_nodelay(true);
    if server.write_all(&request).await.is_err() {
        return;
    }
    if legacy {
        let Ok(Ok(answer)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, read_head(&mut server)).await else {
            counts.handshake_failed();
            return;
        };
        let (answer, accepted) = rewrite_answer(&answer);
        if accepted {
            counts.legacy_client();
        }
        if client.write_all(&answer).await.is_err() {
            return;
        }
    }
    // Ends when both sides have closed, or either fails (a reset, the server stopping).
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}

/// Read until the end of an HTTP head (`\r\n\r\n`); the bytes read (the head and whatever
/// followed it in the same reads). An error for a head longer than [`HEAD_MAX`] or a stream
/// that ends first.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let searched = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if head_end(&buf[searched..]).is_some() {
            return Ok(buf);
        }
        if buf.len() > HEAD_MAX {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
    }
}

/// Where the head in `bytes` ends (just past its `\r\n\r\n`).
fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// The value of every `name:` header line of `head` (case-insensitive), comma lists split.
fn header_tokens<'a>(head: &'a str, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    head.split("\r\n")
        .skip(1)
        .filter_map(move |line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then_some(v)
        })
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

/// The request to send the SDK, and whether the client offered only the old name (then
/// `foxglove.sdk.v1` is added to its offer). Anything that is not such a request is sent
/// unchanged: the SDK answers it as it would.
pub fn rewrite_request(bytes: &[u8]) -> (Vec<u8>, bool) {
    let Some(end) = head_end(bytes) else { return (bytes.to_vec(), false) };
    let Ok(head) = std::str::from_utf8(&bytes[..end]) else { return (bytes.to_vec(), false) };
    let offered: Vec<&str> = header_tokens(head, "sec-websocket-protocol").collect();
    let legacy = offered.contains(&LEGACY) && !offered.iter().any(|o| SDK.contains(o));
    if !legacy {
        return (bytes.to_vec(), false);
    }
    let mut out = Vec::with_capacity(bytes.len() + 48);
    // The head without its blank line, one more header line, the blank line, the rest.
    out.extend_from_slice(&bytes[..end - 2]);
    out.extend_from_slice(format!("Sec-WebSocket-Protocol: {}\r\n\r\n", SDK[0]).as_bytes());
    out.extend_from_slice(&bytes[end..]);
    (out, true)
}

/// The SDK's answer as the old client must see it: a `101` naming `foxglove.sdk.v1` names
/// `foxglove.websocket.v1` instead (true: the client is in). Any other answer (a 400) is
/// unchanged.
pub fn rewrite_answer(bytes: &[u8]) -> (Vec<u8>, bool) {
    let Some(end) = head_end(bytes) else { return (bytes.to_vec(), false) };
    let Ok(head) = std::str::from_utf8(&bytes[..end]) else { return (bytes.to_vec(), false) };
    let switching = head.split("\r\n").next().is_some_and(|status| status.split(' ').nth(1) == Some("101"));
    if !switching {
        return (bytes.to_vec(), false);
    }
    let mut out = Vec::with_capacity(bytes.len() + 8);
    let mut renamed = false;
    for line in head[..end - 4].split("\r\n") {
        match line.split_once(':') {
            Some((k, v)) if k.trim().eq_ignore_ascii_case("sec-websocket-protocol") && v.trim() == SDK[0] => {
                out.extend_from_slice(format!("{}: {LEGACY}", k.trim()).as_bytes());
                renamed = true;
            }
            _ => out.extend_from_slice(line.as_bytes()),
        }
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&bytes[end..]);
    (out, renamed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\nsec-websocket-protocol: foxglove.websocket.v1\r\n\r\n";

    #[test]
    fn an_old_client_gets_the_new_name_added_to_its_offer() {
        let (out, legacy) = rewrite_request(OLD);
        assert!(legacy);
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with("foxglove.websocket.v1\r\nSec-WebSocket-Protocol: foxglove.sdk.v1\r\n\r\n"), "{text}");
        // Bytes after the head (none are expected, but nothing is lost) follow unchanged.
        let mut more = OLD.to_vec();
        more.extend_from_slice(b"\x81\x00");
        assert!(rewrite_request(&more).0.ends_with(b"foxglove.sdk.v1\r\n\r\n\x81\x00"));
    }

    #[test]
    fn other_requests_pass_unchanged() {
        for req in [
            &b"GET / HTTP/1.1\r\nSec-WebSocket-Protocol: foxglove.websocket.v1, foxglove.sdk.v1\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nSec-WebSocket-Protocol: foxglove.sdk.v1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nSec-WebSocket-Protocol: foxglove.websocket.v10\r\n\r\n",
            b"\xff\xfe garbage \r\n\r\n",
            b"no end of head",
        ] {
            assert_eq!(rewrite_request(req), (req.to_vec(), false), "{}", String::from_utf8_lossy(req));
        }
    }

    #[test]
    fn the_sdk_answer_names_what_the_old_client_offered() {
        let answer = b"HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nsec-websocket-protocol: foxglove.sdk.v1\r\n\r\n\x81\x05hello";
        let (out, ok) = rewrite_answer(answer);
        assert!(ok);
        assert_eq!(
            out,
            b"HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nsec-websocket-protocol: foxglove.websocket.v1\r\n\r\n\x81\x05hello"
        );
        let refused = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(rewrite_answer(refused), (refused.to_vec(), false));
    }

    #[test]
    fn a_head_is_read_to_its_end_and_no_further_than_the_limit() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut ok = &b"GET / HTTP/1.1\r\n\r\nrest"[..];
        assert_eq!(rt.block_on(read_head(&mut ok)).unwrap(), b"GET / HTTP/1.1\r\n\r\nrest");
        let endless = vec![b'a'; HEAD_MAX * 4];
        let mut r = &endless[..];
        assert_eq!(rt.block_on(read_head(&mut r)).unwrap_err().kind(), std::io::ErrorKind::InvalidData);
        assert!(r.len() >= HEAD_MAX * 4 - HEAD_MAX - 2048, "stopped reading at the limit");
        let mut cut = &b"GET / HTTP/1.1\r\n"[..];
        assert_eq!(rt.block_on(read_head(&mut cut)).unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
