//! `rtloop run` against peers that do not cooperate (issue 29): a Foxglove client that
//! subscribes and stops reading, a bare connection to every port the process listens on,
//! signals in every phase, too few file descriptors. These are real-clock runs on a machine
//! that may be busy: what they assert is what a stall cannot change — the run ends, prints
//! its summary, says how it ended, and its counts add up.

use crate::support::*;
use serde_json::Value as Json;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::Message;

type Ws = tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>>;

/// The last line of a `--json` run: its summary.
fn summary(ran: &Ran) -> Json {
    ran.stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("the run printed its summary: {}", ran.describe()))
}

fn foxglove_stats(summary: &Json) -> Json {
    summary["live"]["publishers"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["sink"] == "foxglove"))
        .cloned()
        .unwrap_or_else(|| panic!("foxglove counts in {summary}"))
}

/// A client of the server at `port` (retried while the run starts) that subscribes to every
/// channel, then is handed back without reading another byte.
fn subscribed_client(port: u16, run: &Session) -> Ws {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ws = loop {
        let mut request = format!("ws://127.0.0.1:{port}").into_client_request().unwrap();
        request.headers_mut().insert("Sec-WebSocket-Protocol", "foxglove.sdk.v1".parse().unwrap());
        match tungstenite::connect(request) {
            Ok((ws, _)) => break ws,
            Err(e) => {
                assert!(Instant::now() < deadline, "the server never answered: {e}\n{}", run.stderr_so_far());
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    }
    let advertise = loop {
        let Message::Text(t) = ws.read().expect("serverInfo and advertise") else { continue };
        let v: Json = serde_json::from_str(&t).unwrap();
        if v["op"] == "advertise" {
            break v;
        }
    };
    let subs: Vec<Json> = advertise["channels"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, c)| serde_json::json!({"id": i, "channelId": c["id"]}))
        .collect();
    ws.send(Message::text(serde_json::json!({"op": "subscribe", "subscriptions": subs}).to_string())).unwrap();
    ws
}

fn foxglove_run(port: u16, duration: &str, extra: &[&str]) -> Session {
    let mut cmd = Command::new(rtloop_bin());
    cmd.args(["run", "--duration", duration, "--foxglove", &format!("127.0.0.1:{port}"), "--foxglove-every", "1"]);
    cmd.args(extra).args(["--json", "--quiet"]);
    Session::spawn(&mut cmd)
}

/// Issue 29 §1: a viewer that subscribes to every channel and stops reading kept the run
/// from ever exiting. The run ends after its duration, with its summary; the client was
/// connected, and is counted gone.
#[test]
fn a_foxglove_client_that_stops_reading_cannot_hold_the_run() {
    let port = free_tcp_port();
    let run = foxglove_run(port, "3", &[]);
    let _client = subscribed_client(port, &run);
    let ran = run.finish(Duration::from_secs(120));
    assert!(ran.exited(), "the run ended on its own: {}", ran.describe());
    let s = summary(&ran);
    let fox = foxglove_stats(&s);
    assert_eq!(fox["detail"]["clients_connected"], 1, "{fox}");
    assert_eq!(fox["detail"]["clients_disconnected"], 1, "{fox}");
    assert_eq!(fox["errors"], 0, "{fox}");
    // The whole run, its teardown included: never less than the loop.
    assert!(s["wall_s"].as_f64().unwrap() >= s["loop_wall_s"].as_f64().unwrap(), "{s}");
}

/// Issue 29 §1: a signal always ends the run, whatever the clients do; a second one ends
/// the process at once.
#[test]
fn a_signal_ends_a_run_whatever_the_clients_do() {
    let port = free_tcp_port();
    let run = foxglove_run(port, "600", &[]);
    let _client = subscribed_client(port, &run);
    std::thread::sleep(Duration::from_millis(500));
    run.signal(nix::sys::signal::Signal::SIGTERM);
    let ran = run.finish(Duration::from_secs(120));
    assert!(ran.exited(), "SIGTERM ended the run: {}", ran.describe());
    let s = summary(&ran);
    assert_eq!(s["interrupted"], true, "{s}");
    assert!(ran.stdout.contains("interrupted"), "the text summary says so: {}", ran.stdout);

    // Two different signals (two of one kind may merge while pending): the second ends the
    // process at once, saying so.
    let port = free_tcp_port();
    let run = foxglove_run(port, "600", &[]);
    let _client = subscribed_client(port, &run);
    run.signal(nix::sys::signal::Signal::SIGINT);
    run.signal(nix::sys::signal::Signal::SIGTERM);
    let ran = run.finish(Duration::from_secs(120));
    let code = ran.status.and_then(|s| s.code());
    assert!(matches!(code, Some(130) | Some(143)), "{}", ran.describe());
    assert!(ran.stderr.contains("second signal"), "{}", ran.describe());
}

/// The TCP ports `pid` listens on: its sockets' inodes (/proc/PID/fd) matched against the
/// listening sockets of its network namespace (/proc/PID/net/tcp, tcp6).
fn listening_ports(pid: i32) -> Vec<u16> {
    let mut inodes = std::collections::HashSet::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for e in dir.flatten() {
            if let Ok(target) = std::fs::read_link(e.path()) {
                let t = target.to_string_lossy().to_string();
                if let Some(n) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                    inodes.insert(n.to_string());
                }
            }
        }
    }
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address rem_address st ... inode (field 9); 0A: LISTEN.
            if f.len() > 9 && f[3] == "0A" && inodes.contains(f[9]) {
                if let Some(port) = f[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()) {
                    ports.push(port);
                }
            }
        }
    }
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// Issue 29 §2: every port the process listens on (the Foxglove server, zenoh's) takes a
/// bare TCP connection that never says a word; none of them holds the run.
#[test]
fn a_bare_connection_to_every_listening_port_cannot_hold_the_run() {
    let port = free_tcp_port();
    let run = foxglove_run(port, "3", &["--zenoh"]);
    let pid = run.pid().as_raw();
    let mut ports = Vec::new();
    wait_for("the Foxglove port to listen", Duration::from_secs(60), || {
        ports = listening_ports(pid);
        ports.contains(&port)
    });
    let held: Vec<std::net::TcpStream> =
        ports.iter().filter_map(|p| std::net::TcpStream::connect(("127.0.0.1", *p)).ok()).collect();
    assert_eq!(held.len(), ports.len(), "every listening port {ports:?} took a connection");
    let ran = run.finish(Duration::from_secs(120));
    assert!(ran.exited(), "the run ended on its own with {ports:?} held: {}", ran.describe());
    let s = summary(&ran);
    let fox = foxglove_stats(&s);
    // The held connection never finished its handshake: neither a client nor a refusal.
    assert_eq!(fox["detail"]["clients_connected"], 0, "{fox}");
    assert_eq!(fox["refused"], 0, "{fox}");
    drop(held);
}

/// `rtloop run ARGS` with RLIMIT_NOFILE set to `limit` (soft and hard, as `ulimit -n` does).
fn with_file_limit(limit: u64, args: &[&str]) -> Ran {
    let mut cmd = Command::new(rtloop_bin());
    cmd.args(args);
    // SAFETY: setrlimit is async-signal-safe, and the closure touches nothing else.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit { rlim_cur: limit, rlim_max: limit };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    run_limited(&mut cmd, b"", Duration::from_secs(120))
}

/// Issue 29 §6 and §12: with few file descriptors the run refuses at start with one sentence
/// and exit status 2 (zenoh panicked, the Foxglove runtime too); with exactly enough it runs,
/// and a capability the process holds is never reported missing for want of a descriptor.
#[test]
fn too_few_file_descriptors_is_one_sentence_at_start() {
    let port = free_tcp_port();
    let address = format!("127.0.0.1:{port}");
    for args in [
        vec!["run", "--foxglove", address.as_str(), "--duration", "1"],
        vec!["run", "--zenoh", "--duration", "1"],
        vec!["run", "--duration", "1"],
    ] {
        let ran = with_file_limit(8, &args);
        assert_eq!(ran.status.and_then(|s| s.code()), Some(2), "{args:?}: {}", ran.describe());
        let e = ran.stderr.trim();
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
        assert!(e.contains("open files") && e.contains("ulimit -n"), "{args:?}: {e}");
        assert!(!e.contains("panicked"), "{args:?}: {e}");
    }
    // Exactly what a plain run asks for: it runs, and as root no capability is said missing.
    let ran = with_file_limit(rtloop::runtime::RUN_OPEN_FILES, &["run", "--duration", "0.3", "--quiet"]);
    assert!(ran.exited() && !ran.stderr.contains("panicked"), "{}", ran.describe());
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    if unsafe { libc::geteuid() } == 0 {
        assert!(!ran.stderr.contains("no CAP_IPC_LOCK"), "{}", ran.describe());
    }
}

/// Issue 29 §7: Ctrl-C while a lockstep spine waits for its agent is an interruption, not
/// the controller ending the run, and the text summary says so.
#[test]
fn a_signal_while_a_lockstep_spine_waits_is_an_interruption() {
    let name = format!("hostile-wait-{}", std::process::id());
    let run = Session::spawn(Command::new(rtloop_bin()).args(["run", "--lockstep", "--agent", &name, "--json"]));
    let segment = std::path::PathBuf::from(format!("/dev/shm/rtloop-{name}"));
    wait_for("the spine's segment", Duration::from_secs(60), || segment.exists());
    std::thread::sleep(Duration::from_millis(300));
    run.interrupt();
    let ran = run.finish(Duration::from_secs(120));
    assert!(ran.exited(), "{}", ran.describe());
    let s = summary(&ran);
    assert_eq!(s["interrupted"], true, "{s}");
    assert_eq!(s["ended_by_controller"], false, "{s}");
    assert!(ran.stdout.contains("interrupted"), "{}", ran.stdout);
    assert!(!segment.exists(), "the segment was removed");
}

/// Issue 29 §8: a signal while a physics model loads and settles (before the loop) ends the
/// run with its summary and removes the agent segment.
#[cfg(feature = "physics")]
#[test]
fn a_signal_during_the_physics_settle_ends_the_run_with_its_summary() {
    let dir = Scratch::new("settle-signal");
    let config = dir.path("run.toml");
    std::fs::write(&config, "[physics]\nsettle_s = 10.0\n").unwrap();
    let name = format!("hostile-settle-{}", std::process::id());
    let run = Session::spawn(Command::new(rtloop_bin()).args([
        "run",
        "--config",
        config.to_str().unwrap(),
        "--physics",
        "--lockstep",
        "--agent",
        &name,
        "--json",
    ]));
    let segment = std::path::PathBuf::from(format!("/dev/shm/rtloop-{name}"));
    // The segment exists before the robot is opened: the settle is under way (or about to be).
    wait_for("the spine's segment", Duration::from_secs(60), || segment.exists());
    run.interrupt();
    let ran = run.finish(Duration::from_secs(120));
    assert!(ran.exited(), "{}", ran.describe());
    let s = summary(&ran);
    assert_eq!(s["interrupted"], true, "{s}");
    assert!(!segment.exists(), "the segment was removed");
}
