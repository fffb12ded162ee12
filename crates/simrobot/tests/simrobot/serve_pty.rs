//! The simulated fdcanusb on a pseudo-terminal, driven the way the moteus Python client
//! drives a real adapter: open the linked path, write `can send` lines (with and without the
//! ` *XX` suffix), read `OK` / `ERR` / `rcv` lines back.
//!
//! Every wait is bounded by a liveness guard; nothing here asserts on speed.
//!
//! Links live in `tempfile` directories owned by their tests (removed when the test ends, pass
//! or panic); the last test runs all the others again with a private `TMPDIR` and checks that
//! they leave nothing in it.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::stat::Mode;
use nix::sys::termios::{self, SetArg};
use rtloop_proto::fdcanusb::{self, Line};
use rtloop_proto::host::{decode_reply, ServoState};
use rtloop_simrobot::serve::{Endpoint, PtyFdcanusbEndpoint, ServeHandle, ServedBus};

/// Long enough for any expected line on a loaded machine; only a broken server waits it out.
const LIVENESS: Duration = Duration::from_secs(2);
/// How long "no reply" is watched for. A reply on the simulated wire takes well under 1 ms.
const SILENCE: Duration = Duration::from_millis(200);

/// The moteus default query for servo 1 (mode, position, velocity, torque, voltage,
/// temperature, fault), as the Python client writes it.
const QUERY_SERVO_1: &str = "can send 8001 11001F01130D BF";

/// A fresh directory for one test's paths, removed with everything in it when dropped.
fn scratch_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("rtloop-serve-pty-{tag}-")).tempdir().expect("temp dir")
}

fn sim_bus() -> rtloop_sim::SimBus {
    let mut bus = rtloop_sim::SimBus::new(rtloop_sim::BusConfig::default());
    bus.add_servo(rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(1)));
    bus.add_servo(rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(2)));
    bus
}

/// A server with servos 1 and 2 behind a pty linked at a fresh temp path. Fields drop in
/// order: the server (which removes its link) before the directory.
struct Started {
    server: ServeHandle,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

fn start(tag: &str) -> Started {
    let dir = scratch_dir(tag);
    let path = dir.path().join("fdcanusb");
    let endpoint = PtyFdcanusbEndpoint::create(&path).expect("create pty endpoint");
    let server = ServeHandle::start(vec![ServedBus::new(sim_bus(), Box::new(endpoint))]).expect("start server");
    Started { server, path, _dir: dir }
}

fn with_crc(text: &str) -> String {
    let body = format!("{text} ");
    format!("{body}*{:02X}", fdcanusb::crc8(body.as_bytes()))
}

/// The host side, as a serial client opens a device.
struct Client {
    fd: OwnedFd,
    pending: Vec<u8>,
}

impl Client {
    fn open(path: &Path) -> Client {
        let fd = nix::fcntl::open(path, OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC, Mode::empty())
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        let mut modes = termios::tcgetattr(&fd).expect("tcgetattr");
        termios::cfmakeraw(&mut modes);
        termios::tcsetattr(&fd, SetArg::TCSANOW, &modes).expect("tcsetattr");
        Client { fd, pending: Vec::new() }
    }

    fn send(&mut self, line: &str) {
        let bytes = format!("{line}\n");
        let mut rest = bytes.as_bytes();
        while !rest.is_empty() {
            let n = nix::unistd::write(&self.fd, rest).expect("write to pty");
            rest = rest.get(n..).unwrap_or(&[]);
        }
    }

    /// The next line (without its newline), or None if none arrives within `limit`.
    fn line_within(&mut self, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                let text = String::from_utf8(line).expect("answer lines are ASCII");
                return Some(text.trim_end_matches('\n').to_string());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
            let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, PollTimeout::from(ms)) {
                Ok(0) => continue,
                Ok(_) => {
                    let mut buf = [0u8; 512];
                    let n = nix::unistd::read(&self.fd, &mut buf).expect("read from pty");
                    self.pending.extend_from_slice(buf.get(..n).unwrap_or(&[]));
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => panic!("poll: {e}"),
            }
        }
    }

    fn line(&mut self) -> String {
        self.line_within(LIVENESS).expect("an answer line within the liveness guard")
    }
}

/// Split a `rcv` line into its id, payload and flag tokens, checking the layout the moteus
/// client reads.
fn rcv_parts(line: &str) -> (u32, Vec<u8>, Vec<String>) {
    let mut fields = line.split(' ');
    assert_eq!(fields.next(), Some("rcv"), "{line}");
    let id = u32::from_str_radix(fields.next().expect("id"), 16).expect("hex id");
    let hex = fields.next().expect("data");
    assert_eq!(hex.len() % 2, 0, "{line}");
    let data = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex data")).collect();
    (id, data, fields.map(str::to_string).collect())
}

fn check_stopped_servo_reply(line: &str) {
    let (id, data, flags) = rcv_parts(line);
    assert_eq!(id, 0x0100, "reply from servo 1 to the host: {line}");
    assert!(line.starts_with("rcv 0100 "), "ids are printed as whole bytes: {line}");
    for flag in ["E", "B", "F"] {
        assert!(flags.iter().any(|f| f == flag), "flag {flag} missing in {line}");
    }
    let mut state = ServoState::default();
    decode_reply(&data, &mut state).expect("decodable reply");
    assert_eq!(state.mode, Some(0), "a fresh servo is stopped");
    assert!((state.voltage - 24.0).abs() < 1.0, "voltage {}", state.voltage);
}

/// A line the server wrote with the suffix: it must parse, with a valid CRC.
fn assert_suffixed(line: &str) {
    let parsed = fdcanusb::parse_line(line.as_bytes()).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    assert!(parsed.had_crc, "no suffix on {line:?}");
}

#[test]
fn query_is_answered_ok_then_rcv_with_the_servo_state() {
    let Started { server, path, _dir } = start("query");
    let mut client = Client::open(&path);
    client.send(QUERY_SERVO_1);
    assert_eq!(client.line(), "OK");
    let reply = client.line();
    check_stopped_servo_reply(&reply);
    assert!(!reply.contains('*'), "no suffix when the host sent none: {reply}");

    // Servo 2 answers as 0x0200.
    client.send("can send 8002 11001F01130D BF");
    assert_eq!(client.line(), "OK");
    let (id, _, _) = rcv_parts(&client.line());
    assert_eq!(id, 0x0200);

    let report = server.stop();
    let counters = report.endpoints[0].counters;
    assert_eq!(counters.frames_in, 2);
    assert_eq!(counters.frames_out, 2);
    assert_eq!(counters.protocol_errors, 0);
    assert_eq!(report.endpoints[0].service_errors + report.endpoints[0].deliver_errors, 0);
}

#[test]
fn answers_carry_a_suffix_while_the_host_uses_one() {
    let Started { server: _server, path, _dir } = start("crc");
    let mut client = Client::open(&path);
    client.send(&with_crc(QUERY_SERVO_1));
    let ok = client.line();
    assert_suffixed(&ok);
    assert!(ok.starts_with("OK "), "{ok}");
    let reply = client.line();
    assert_suffixed(&reply);
    let Ok(fdcanusb::ParsedLine { line: Line::Rcv(frame), .. }) = fdcanusb::parse_line(reply.as_bytes()) else {
        panic!("not a rcv line: {reply}");
    };
    assert!(frame.flags.extended && frame.flags.brs && frame.flags.fd);
    check_stopped_servo_reply(reply.rsplit_once(" *").expect("suffix").0);

    // Back to plain lines: plain answers.
    client.send(QUERY_SERVO_1);
    assert_eq!(client.line(), "OK");
    assert!(!client.line().contains('*'));
}

#[test]
fn a_wrong_suffix_is_a_checksum_error_with_a_suffix() {
    let Started { server, path, _dir } = start("badcrc");
    let mut client = Client::open(&path);
    let good = with_crc(QUERY_SERVO_1);
    let (text, crc) = good.rsplit_once('*').expect("suffix");
    let wrong = u8::from_str_radix(crc, 16).expect("hex") ^ 0x5A;
    client.send(&format!("{text}*{wrong:02X}"));
    let err = client.line();
    assert_suffixed(&err);
    assert!(err.starts_with("ERR checksum mismatch"), "{err}");
    // The frame was not sent.
    assert_eq!(client.line_within(SILENCE), None);
    let report = server.stop();
    assert_eq!(report.endpoints[0].counters.frames_in, 0);
    assert_eq!(report.endpoints[0].counters.protocol_errors, 1);
}

#[test]
fn unknown_malformed_and_overlong_lines_get_err_and_the_link_recovers() {
    let Started { server, path, _dir } = start("errors");
    let mut client = Client::open(&path);
    client.send("hello");
    assert_eq!(client.line(), "ERR unknown command");
    client.send("can send 8001 11001G01130D BF");
    assert!(client.line().starts_with("ERR "));
    client.send(&"x".repeat(500));
    assert_eq!(client.line(), "ERR line too long");
    // `\r\n` endings are one line, not an extra error.
    client.send(&format!("{QUERY_SERVO_1}\r"));
    assert_eq!(client.line(), "OK");
    check_stopped_servo_reply(&client.line());
    assert_eq!(client.line_within(SILENCE), None);
    let report = server.stop();
    assert_eq!(report.endpoints[0].counters.protocol_errors, 3);
    assert_eq!(report.endpoints[0].counters.frames_in, 1);
}

#[test]
fn what_a_servo_did_not_understand_is_in_the_report() {
    let Started { server, path, _dir } = start("not-understood");
    let mut client = Client::open(&path);
    // A 0x41 (server data: only a servo sends it) and stream data for channel 7, which the
    // servo does not have; neither asks for a reply.
    client.send("can send 0001 410100");
    assert_eq!(client.line(), "OK");
    client.send("can send 0001 4007026869");
    assert_eq!(client.line(), "OK");
    // A write subframe cut short: a malformed frame. Servo 2 gets nothing odd.
    client.send("can send 0001 01");
    assert_eq!(client.line(), "OK");
    client.send("can send 8002 11001F01130D BF");
    assert_eq!(client.line(), "OK");
    rcv_parts(&client.line());
    assert_eq!(client.line_within(SILENCE), None);

    let report = server.stop();
    let servos = &report.endpoints[0].servos;
    assert_eq!(servos.len(), 2);
    assert_eq!(
        (servos[0].id, servos[0].request_errors.malformed_frames, servos[0].request_errors.not_understood),
        (1, 1, 2)
    );
    assert_eq!(servos[1].request_errors, Default::default());
    let text = report.to_string();
    assert!(text.contains("servo 1: 1 malformed frame, 2 subframes not understood"), "{text}");
    assert!(!text.contains("servo 2"), "a servo with nothing to say is not listed: {text}");
    assert_eq!(report.endpoints[0].kept_in_memory, 0);
}

#[test]
fn an_absent_servo_gets_ok_and_no_reply() {
    let Started { server: _server, path, _dir } = start("absent");
    let mut client = Client::open(&path);
    client.send("can send 8063 11001F01130D BF");
    assert_eq!(client.line(), "OK");
    assert_eq!(client.line_within(SILENCE), None);
}

#[test]
fn a_client_can_close_and_reopen_the_device() {
    let Started { server, path, _dir } = start("reopen");
    for _ in 0..3 {
        let mut client = Client::open(&path);
        client.send(QUERY_SERVO_1);
        assert_eq!(client.line(), "OK");
        check_stopped_servo_reply(&client.line());
        drop(client);
    }
    let report = server.stop();
    assert_eq!(report.endpoints[0].counters.frames_out, 3);
    assert_eq!(report.endpoints[0].service_errors, 0);
}

/// A `/dev/pts/N` that does not exist: the pty a killed simulator's link points at.
fn vanished_pty() -> PathBuf {
    (1000..).map(|n| PathBuf::from(format!("/dev/pts/{n}"))).find(|p| !p.exists()).expect("a free pty number")
}

#[test]
fn link_path_rules() {
    let dir = scratch_dir("rules");
    // The stale link of a killed simulator (its pty is gone) is replaced.
    let stale = dir.path().join("stale");
    std::os::unix::fs::symlink(vanished_pty(), &stale).expect("make stale link");
    let endpoint = PtyFdcanusbEndpoint::create(&stale).expect("stale simulator link is replaced");
    assert_eq!(std::fs::read_link(&stale).expect("link"), endpoint.device_path());
    assert_eq!(endpoint.path(), stale.as_path());
    assert_eq!(endpoint.name(), format!("fdcanusb:{}", stale.display()));
    drop(endpoint);
    assert!(std::fs::symlink_metadata(&stale).is_err(), "Drop removes the link");

    // A regular file is never overwritten.
    let file = dir.path().join("regular");
    std::fs::write(&file, b"keep me").expect("write file");
    let err = PtyFdcanusbEndpoint::create(&file).expect_err("regular file is refused").to_string();
    assert!(err.contains("exists and is not a symlink; choose another path"), "{err}");
    assert_eq!(std::fs::read(&file).expect("file kept"), b"keep me");

    // A missing directory is named.
    let missing = dir.path().join("no-such-dir").join("bus1");
    let err = PtyFdcanusbEndpoint::create(&missing).expect_err("missing directory").to_string();
    assert!(err.contains("does not exist"), "{err}");

    // A link someone else has since re-pointed is left alone on Drop.
    let taken = dir.path().join("taken");
    let endpoint = PtyFdcanusbEndpoint::create(&taken).expect("create");
    std::fs::remove_file(&taken).expect("unlink");
    std::os::unix::fs::symlink("/dev/null", &taken).expect("someone else's link");
    drop(endpoint);
    assert_eq!(std::fs::read_link(&taken).expect("still there"), Path::new("/dev/null"));
}

#[test]
fn a_second_endpoint_on_a_live_link_is_refused_and_the_first_keeps_serving() {
    let Started { server, path, _dir } = start("second");
    let before = std::fs::read_link(&path).expect("link");
    let err = PtyFdcanusbEndpoint::create(&path).expect_err("a running simulator's link is refused").to_string();
    assert!(err.contains("already links to") && err.contains("choose another path"), "{err}");
    assert!(err.contains("this very process"), "the holder is named: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(std::fs::read_link(&path).expect("link kept"), before);
    // The first simulator is still reachable through its link.
    let mut client = Client::open(&path);
    client.send(QUERY_SERVO_1);
    assert_eq!(client.line(), "OK");
    check_stopped_servo_reply(&client.line());
    drop(server);
}

#[test]
fn a_users_symlink_is_refused_and_left_untouched() {
    let dir = scratch_dir("userlink");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").expect("victim");
    for (name, target) in [
        ("userlink", victim.clone()),
        ("dangling", dir.path().join("gone")),
        ("devnull", PathBuf::from("/dev/null")),
        ("relative-pts", PathBuf::from("../dev/pts/1")),
    ] {
        let link = dir.path().join(name);
        std::os::unix::fs::symlink(&target, &link).expect("user's link");
        let err = PtyFdcanusbEndpoint::create(&link).expect_err("a user's link is refused").to_string();
        assert!(err.contains("that rtloop sim did not make") && err.contains("left alone"), "{name}: {err}");
        assert_eq!(std::fs::read_link(&link).expect("link untouched"), target, "{name}");
    }
    assert_eq!(std::fs::read(&victim).expect("victim untouched"), b"precious");
}

#[test]
fn a_link_to_a_pty_younger_than_the_link_is_stale() {
    let dir = scratch_dir("reused");
    // A pty that exists now, and a link to it dated a minute earlier: the number was handed
    // to this pty after the link's own simulator died.
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let pts =
        std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&pty.slave))).expect("pty name");
    let link = dir.path().join("reused");
    std::os::unix::fs::symlink(&pts, &link).expect("link");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
    let minute_ago = nix::sys::time::TimeSpec::new(now.as_secs() as i64 - 60, 0);
    nix::sys::stat::utimensat(
        nix::fcntl::AT_FDCWD,
        &link,
        &minute_ago,
        &minute_ago,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )
    .expect("date the link");
    let endpoint = PtyFdcanusbEndpoint::create(&link).expect("a link older than its pty is replaced");
    assert_eq!(std::fs::read_link(&link).expect("link"), endpoint.device_path());
    assert_ne!(endpoint.device_path(), pts.as_path());

    // The same pty with a link made after it: in use, refused.
    let fresh = dir.path().join("fresh");
    std::os::unix::fs::symlink(&pts, &fresh).expect("link");
    let err = PtyFdcanusbEndpoint::create(&fresh).expect_err("a live pty's link is refused").to_string();
    assert!(err.contains("already links to"), "{err}");
    assert_eq!(std::fs::read_link(&fresh).expect("untouched"), pts);
}

#[test]
fn stopping_the_server_removes_the_link() {
    let Started { server, path, _dir } = start("stop");
    assert!(std::fs::symlink_metadata(&path).is_ok());
    let (_report, buses) = server.stop_and_take();
    assert!(std::fs::symlink_metadata(&path).is_ok(), "endpoint still alive in the returned buses");
    drop(buses);
    assert!(std::fs::symlink_metadata(&path).is_err());
}

/// Set in the child process of the hygiene test.
const HYGIENE_CHILD: &str = "RTLOOP_HYGIENE_CHILD";

#[test]
fn every_other_test_here_leaves_nothing_in_the_temp_dir() {
    if std::env::var_os(HYGIENE_CHILD).is_some() {
        return;
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        // This module's tests only: the binary holds the whole crate's.
        .args([
            &rtloop_testkit::test_path(module_path!(), ""),
            "--skip",
            "every_other_test_here_leaves_nothing_in_the_temp_dir",
        ])
        .env("TMPDIR", tmp.path())
        .env(HYGIENE_CHILD, "1")
        .output()
        .expect("run the tests again");
    assert!(out.status.success(), "the tests failed: {}", String::from_utf8_lossy(&out.stdout));
    // The filter matched this module's tests (a wrong one runs none, and leaves nothing).
    assert!(!String::from_utf8_lossy(&out.stdout).contains(" 0 passed"), "no test ran in the child");
    let left: Vec<String> = std::fs::read_dir(tmp.path())
        .expect("read TMPDIR")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");
}
