//! The fdcanusb transport against real pseudo-terminals: a fake device on a thread holds the
//! master side, answers our `can send` lines, and sends whatever a test wants it to (garbage,
//! CRC suffixes, endless lines); the transport opens the slave side through a symlink, so a
//! test can re-point the link at a new pty to exercise reconnecting.
//!
//! No assertion is about speed. Waits are bounded by iteration counts (with generous polls in
//! between) only so that a broken transport fails the test instead of hanging it.
//!
//! Every link lives in a `tempfile` directory owned by its test and removed when the test
//! ends, pass or panic; the last test here runs all the others again in a child process with
//! a private `TMPDIR` and checks that they leave nothing in it.

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::termios::{self, SetArg};
use rtloop_io::fdcanusb::{FdcanusbOptions, FdcanusbTransport};
use rtloop_io::{MonotonicClock, Robot, RobotConfig, ServoCommand, ServoReply, ServoSpec, Transport, TransportError};
use rtloop_proto::fdcanusb::{self as lines, Line};
use rtloop_proto::CanFdFrame;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

/// The spec's position command to servo 1 (position 0.5, velocity 0, default query), unpadded.
const POSITION_QUERY_HEX: &str = "01000A0E200000003F0000000011001F01130D";
/// How that frame must appear on the line: padded with 0x50 to 20 bytes, B and F flags.
const POSITION_QUERY_LINE: &str = "can send 8001 01000A0E200000003F0000000011001F01130D50 BF";
/// The spec's reply of servo 1 (mode 10, position 0.5, 24 V, 25 °C).
const REPLY_LINE: &str = "rcv 0100 2404000A00881300000000230D301900 E B F";
const REPLY_HEX: &str = "2404000A00881300000000230D301900";

/// Polls of up to 10 ms each a test waits for something that should come at once: ~2 s.
const PATIENCE: usize = 200;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn position_query_frame() -> CanFdFrame {
    CanFdFrame::new(0x8001, &hex(POSITION_QUERY_HEX)).unwrap()
}

/// A fresh, empty directory for this test's symlink, removed (with everything in it) when
/// the returned guard is dropped — also when the test panics.
fn scratch_dir(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("rtloop-fdcanusb-{test}-")).tempdir().unwrap()
}

/// Point `link` at `target`, atomically replacing whatever it pointed at.
fn point_link(link: &Path, target: &Path) {
    let tmp = link.with_extension("new");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).unwrap();
    std::fs::rename(&tmp, link).unwrap();
}

/// One pseudo-terminal: the master for the fake device, the slave kept open (raw, so nothing
/// echoes) for as long as the test wants.
struct Pty {
    master: OwnedFd,
    _slave: OwnedFd,
    slave_path: PathBuf,
}

fn new_pty() -> Pty {
    let pty = nix::pty::openpty(None, None).unwrap();
    let mut tio = termios::tcgetattr(&pty.slave).unwrap();
    termios::cfmakeraw(&mut tio);
    termios::tcsetattr(&pty.slave, SetArg::TCSANOW, &tio).unwrap();
    let slave_path = std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd())).unwrap();
    Pty { master: pty.master, _slave: pty.slave, slave_path }
}

fn readable(fd: BorrowedFd<'_>, timeout_ms: u16) -> bool {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    matches!(nix::poll::poll(&mut fds, PollTimeout::from(timeout_ms)), Ok(n) if n > 0)
}

/// The fake device: reads lines from the master and lets `answer` reply to each one. Stops
/// when asked to (or when the slave side is gone) and hands the master back, still open.
struct FakeDevice {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<File>>,
    /// Every line the device received, without its newline.
    lines: mpsc::Receiver<String>,
}

impl FakeDevice {
    fn start(master: OwnedFd, answer: impl FnMut(&[u8], &mut Vec<u8>) + Send + 'static) -> Self {
        Self::start_with_junk(master, b"", answer)
    }

    /// As `start`, with `junk` already in the device's line buffer, as an earlier client that
    /// wrote half a line leaves it.
    fn start_with_junk(
        master: OwnedFd,
        junk: &[u8],
        mut answer: impl FnMut(&[u8], &mut Vec<u8>) + Send + 'static,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let stop_flag = stop.clone();
        let junk = junk.to_vec();
        let thread = std::thread::spawn(move || {
            let mut file = File::from(master);
            let mut pending = junk;
            let mut buf = [0u8; 4096];
            while !stop_flag.load(Ordering::SeqCst) {
                if !readable(file.as_fd(), 10) {
                    continue;
                }
                let n = match file.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                pending.extend_from_slice(&buf[..n]);
                while let Some(pos) = pending.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=pos).collect();
                    let line = &line[..line.len() - 1];
                    // Like the fdcanusb firmware: an empty line is no command and gets no answer
                    // (the transport starts every descriptor with one, to end junk).
                    if line.is_empty() {
                        continue;
                    }
                    let _ = tx.send(String::from_utf8_lossy(line).into_owned());
                    let mut out = Vec::new();
                    answer(line, &mut out);
                    if file.write_all(&out).is_err() {
                        return file;
                    }
                }
            }
            file
        });
        FakeDevice { stop, thread: Some(thread), lines: rx }
    }

    /// Stop the device and take the master back (drop it to close the pty).
    fn stop(mut self) -> File {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }

    fn next_line(&self) -> String {
        self.lines.recv_timeout(std::time::Duration::from_secs(2)).expect("the device received no line")
    }
}

impl Drop for FakeDevice {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answer every `can send` with `OK` and the spec reply, in the CRC mode of the request.
fn answer_with_reply(line: &[u8], out: &mut Vec<u8>) {
    let Ok(parsed) = lines::parse_line(line) else {
        out.extend_from_slice(b"ERR parse\n");
        return;
    };
    let mut buf = [0u8; 256];
    let n = lines::write_ok(parsed.had_crc, &mut buf).unwrap();
    out.extend_from_slice(&buf[..n]);
    let mut reply = CanFdFrame::new(0x100, &hex(REPLY_HEX)).unwrap();
    // moteus replies are extended frames even when the id fits in 11 bits (`E` in the spec).
    reply.flags.extended = true;
    let n = lines::write_rcv(&reply, parsed.had_crc, &mut buf).unwrap();
    out.extend_from_slice(&buf[..n]);
}

/// Call `recv` until a frame arrives, polling the transport's descriptor in between.
fn recv_frame(t: &mut FdcanusbTransport, now_ns: u64) -> CanFdFrame {
    for _ in 0..PATIENCE {
        if let Some(frame) = t.recv(now_ns).expect("recv failed") {
            return frame;
        }
        let fd = t.poll_fd().expect("connected");
        // SAFETY: the transport keeps `fd` open for the duration of this poll.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        readable(fd, 10);
    }
    panic!("no frame arrived");
}

fn assert_is_spec_reply(frame: &CanFdFrame) {
    assert_eq!(frame.id, 0x100);
    assert_eq!(frame.payload(), &hex(REPLY_HEX)[..]);
    assert!(frame.flags.extended && frame.flags.brs && frame.flags.fd && !frame.flags.remote);
}

/// A pty behind a fresh symlink, and the transport opened through that link; the directory
/// guard removes the link when the test ends.
struct Setup {
    _dir: tempfile::TempDir,
    link: PathBuf,
    pty: Pty,
    transport: FdcanusbTransport,
}

fn setup(test: &str, options: FdcanusbOptions) -> Setup {
    let dir = scratch_dir(test);
    let link = dir.path().join("fdcanusb");
    let pty = new_pty();
    point_link(&link, &pty.slave_path);
    let transport = FdcanusbTransport::open(link.to_str().unwrap(), options).unwrap();
    Setup { _dir: dir, link, pty, transport }
}

#[test]
fn a_frame_goes_out_padded_as_the_spec_line_and_the_reply_comes_back() {
    let Setup { _dir, link, pty, transport: mut t } = setup("roundtrip", FdcanusbOptions::default());
    assert_eq!(t.name(), format!("fdcanusb:{}", link.display()));
    assert!(t.poll_fd().is_some());
    let device = FakeDevice::start(pty.master.try_clone().unwrap(), answer_with_reply);

    t.send(&position_query_frame(), 1).unwrap();
    t.flush(1).unwrap();
    assert_eq!(device.next_line(), POSITION_QUERY_LINE);
    let frame = recv_frame(&mut t, 2);
    assert_is_spec_reply(&frame);
    assert_eq!(t.outstanding(), 0, "the OK before the rcv was counted");
    let c = t.counters();
    assert_eq!((c.sent, c.received, c.protocol_errors, c.disconnects), (1, 1, 0, 0));
    assert_eq!(t.recv(3), Ok(None));
}

#[test]
fn disable_brs_sends_lowercase_b() {
    let options = FdcanusbOptions { disable_brs: true, ..Default::default() };
    let Setup { _dir, pty, transport: mut t, .. } = setup("nobrs", options);
    let device = FakeDevice::start(pty.master.try_clone().unwrap(), answer_with_reply);
    t.send(&position_query_frame(), 1).unwrap();
    assert_eq!(device.next_line(), POSITION_QUERY_LINE.replace(" BF", " bF"));
}

#[test]
fn with_crc_our_lines_carry_a_valid_suffix_and_suffixed_answers_are_accepted() {
    let Setup { _dir, pty, transport: mut t, .. } = setup("crc", FdcanusbOptions { crc: true, ..Default::default() });
    let device = FakeDevice::start(pty.master.try_clone().unwrap(), answer_with_reply);

    t.send(&position_query_frame(), 1).unwrap();
    let line = device.next_line();
    let (text, suffix) = line.rsplit_once('*').expect("a CRC suffix");
    assert_eq!(text, format!("{POSITION_QUERY_LINE} "));
    assert_eq!(suffix, format!("{:02X}", lines::crc8(text.as_bytes())));
    assert!(lines::parse_line(line.as_bytes()).unwrap().had_crc);

    let frame = recv_frame(&mut t, 2);
    assert_is_spec_reply(&frame);
    assert_eq!(t.counters().protocol_errors, 0);
    assert_eq!(t.outstanding(), 0);
}

#[test]
fn err_garbage_bad_crc_and_overlong_lines_are_counted_and_the_next_frame_arrives() {
    let Setup { _dir, pty, transport: mut t, .. } = setup("garbage", FdcanusbOptions::default());
    let device = FakeDevice::start(pty.master.try_clone().unwrap(), |_line, out| {
        out.extend_from_slice(b"ERR x\n");
        out.extend_from_slice(b"garbage \x01\xff\n");
        let wrong = lines::crc8(b"OK ") ^ 0xFF;
        out.extend_from_slice(format!("OK *{wrong:02X}\n").as_bytes());
        out.extend_from_slice(&[b'A'; 1000]);
        out.extend_from_slice(b"\r\n");
        // A blank line is not an error.
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(REPLY_LINE.as_bytes());
        out.extend_from_slice(b"\n");
    });
    t.send(&position_query_frame(), 1).unwrap();
    let frame = recv_frame(&mut t, 2);
    assert_is_spec_reply(&frame);
    assert_eq!(t.counters().protocol_errors, 4);
    assert_eq!(t.outstanding(), 0, "ERR answered our line");
    assert_eq!(t.counters().device_errors, 1, "only the ERR was a refusal");
    assert_eq!(t.counters().last_device_error.as_str(), "x");
    drop(device);
}

#[test]
fn a_line_longer_than_the_receive_buffer_is_skipped_and_counted_once() {
    let Setup { _dir, pty, transport: mut t, .. } = setup("endless", FdcanusbOptions::default());
    let device = FakeDevice::start(pty.master.try_clone().unwrap(), |_line, out| {
        out.extend_from_slice(&vec![b'Z'; 40_000]);
        out.extend_from_slice(b"\n");
        out.extend_from_slice(REPLY_LINE.as_bytes());
        out.extend_from_slice(b"\n");
    });
    t.send(&position_query_frame(), 1).unwrap();
    let frame = recv_frame(&mut t, 2);
    assert_is_spec_reply(&frame);
    assert_eq!(t.counters().protocol_errors, 1);
    drop(device);
}

#[test]
fn a_line_split_across_reads_arrives_whole() {
    let Setup { _dir, pty, transport: mut t, .. } = setup("split", FdcanusbOptions::default());
    let mut master = File::from(pty.master.try_clone().unwrap());
    let (first, second) = REPLY_LINE.split_at(20);
    master.write_all(first.as_bytes()).unwrap();
    // Give the transport the first half on its own.
    for _ in 0..10 {
        assert_eq!(t.recv(1), Ok(None));
    }
    master.write_all(second.as_bytes()).unwrap();
    master.write_all(b"\n").unwrap();
    assert_is_spec_reply(&recv_frame(&mut t, 2));
    assert_eq!(t.counters().protocol_errors, 0);
}

#[test]
fn a_closed_master_disconnects_and_a_new_pty_behind_the_link_reconnects() {
    let Setup { _dir, link, pty: pty_a, transport: mut t } = setup("reconnect", FdcanusbOptions::default());
    let device = FakeDevice::start(pty_a.master.try_clone().unwrap(), answer_with_reply);
    t.send(&position_query_frame(), 1_000).unwrap();
    assert_is_spec_reply(&recv_frame(&mut t, 1_000));

    // The device goes away: every descriptor of the master closes.
    drop(device.stop());
    drop(pty_a.master);
    let lost_at = 2_000_000;
    let mut result = Ok(None);
    for _ in 0..PATIENCE {
        result = t.recv(lost_at);
        if result.is_err() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(result, Err(TransportError::Disconnected));
    assert_eq!(t.counters().disconnects, 1);
    assert!(t.poll_fd().is_none());
    assert!(!t.is_connected());

    // Not due yet: refused at once, nothing reopened.
    assert_eq!(t.recv(lost_at + 1), Err(TransportError::Disconnected));
    assert_eq!(t.send(&position_query_frame(), lost_at + 2), Err(TransportError::Disconnected));
    assert_eq!(t.counters().reconnects, 0);

    // A new device appears behind the same link.
    let pty_b = new_pty();
    point_link(&link, &pty_b.slave_path);
    let device = FakeDevice::start(pty_b.master.try_clone().unwrap(), answer_with_reply);
    let due = lost_at + FdcanusbOptions::default().reconnect_interval_ns;
    assert_eq!(t.recv(due), Ok(None));
    assert_eq!(t.counters().reconnects, 1);
    assert!(t.poll_fd().is_some());

    t.send(&position_query_frame(), due + 1).unwrap();
    assert_eq!(device.next_line(), POSITION_QUERY_LINE);
    assert_is_spec_reply(&recv_frame(&mut t, due + 2));
    let c = t.counters();
    assert_eq!((c.disconnects, c.reconnects), (1, 1));
    drop(pty_a._slave);
}

#[test]
fn a_reopen_that_fails_waits_a_full_interval_before_the_next_try() {
    let options = FdcanusbOptions { reconnect_interval_ns: 1_000, ..Default::default() };
    let Setup { _dir, link, pty, transport: mut t } = setup("retry", options);
    drop(pty.master);
    let mut result = Ok(None);
    for _ in 0..PATIENCE {
        result = t.recv(10_000);
        if result.is_err() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(result, Err(TransportError::Disconnected));
    // The link now points at a pty that is gone: the reopen at 11_000 fails.
    std::fs::remove_file(&link).unwrap();
    assert_eq!(t.recv(11_000), Err(TransportError::Disconnected));
    let pty_b = new_pty();
    point_link(&link, &pty_b.slave_path);
    // 11_500 is within the interval of the failed try; 12_000 is due.
    assert_eq!(t.recv(11_500), Err(TransportError::Disconnected));
    assert_eq!(t.counters().reconnects, 0);
    assert_eq!(t.recv(12_000), Ok(None));
    assert_eq!(t.counters().reconnects, 1);
}

#[test]
fn a_device_that_stops_reading_fills_the_backlog_then_queue_full_and_flush_catches_up() {
    let Setup { _dir, pty, transport: mut t, .. } = setup("backlog", FdcanusbOptions::default());
    let frame_for = |i: u32| CanFdFrame::new(0x8001, &i.to_le_bytes()).unwrap();
    let mut accepted = 0u32;
    let mut refused = false;
    for i in 0..100_000u32 {
        match t.send(&frame_for(i), 1) {
            Ok(()) => accepted += 1,
            Err(TransportError::QueueFull) => {
                refused = true;
                break;
            }
            Err(e) => panic!("send failed: {e}"),
        }
    }
    assert!(refused, "the backlog never filled");
    assert!(t.backlog_len() > 0);
    assert_eq!(t.counters().sent, u64::from(accepted));

    // Now the device reads again: every accepted line arrives whole and in order.
    let master = File::from(pty.master.try_clone().unwrap());
    let reader = std::thread::spawn(move || {
        let mut master = master;
        let mut received = Vec::new();
        let mut pending = Vec::new();
        let mut buf = [0u8; 4096];
        let mut idle = 0;
        while received.len() < accepted as usize && idle < PATIENCE {
            if !readable(master.as_fd(), 10) {
                idle += 1;
                continue;
            }
            let n = master.read(&mut buf).unwrap();
            pending.extend_from_slice(&buf[..n]);
            while let Some(pos) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=pos).collect();
                // The newline every fresh descriptor starts with.
                if line == b"\n" {
                    continue;
                }
                match lines::parse_line(&line).unwrap().line {
                    Line::CanSend(f) => received.push(u32::from_le_bytes(f.payload()[..4].try_into().unwrap())),
                    other => panic!("unexpected line {other:?}"),
                }
            }
        }
        received
    });
    for _ in 0..100_000 {
        t.flush(2).unwrap();
        if t.backlog_len() == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    assert_eq!(t.backlog_len(), 0);
    let received = reader.join().unwrap();
    assert_eq!(received, (0..accepted).collect::<Vec<_>>());
}

#[test]
fn a_robot_cycle_over_the_fake_device_gets_the_spec_reply() {
    let dir = scratch_dir("robot");
    let link = dir.path().join("fdcanusb");
    let pty = new_pty();
    point_link(&link, &pty.slave_path);
    let device =
        FakeDevice::start(pty.master.try_clone().unwrap(), |line, out| match lines::parse_line(line).map(|p| p.line) {
            Ok(Line::CanSend(f)) if f.id == 0x8001 => answer_with_reply(line, out),
            _ => out.extend_from_slice(b"ERR unexpected\n"),
        });
    let transport = FdcanusbTransport::open(link.to_str().unwrap(), FdcanusbOptions::default()).unwrap();
    let mut config = RobotConfig::default();
    // Liveness guards only: the cycle returns as soon as the reply is in.
    config.cycle.timeout_ns = 2_000_000_000;
    config.cycle.rx_baseline_wait_ns = 2_000_000_000;
    let mut robot = Robot::new(
        vec![Box::new(transport)],
        vec![ServoSpec { bus: 0, id: 1 }],
        None,
        MonotonicClock::default(),
        config,
    )
    .unwrap();
    let mut replies = [ServoReply::default()];
    let mut imu = Default::default();
    let report = robot.cycle(&[ServoCommand::Query], &mut replies, &mut imu);
    assert_eq!(report.missing, 0, "{report:?}");
    assert_eq!(report.stats.failed_buses, 0);
    let state = &replies[0].state;
    assert!(replies[0].fresh);
    assert_eq!(state.mode, Some(10));
    assert_eq!(state.position, 0.5);
    assert_eq!(state.voltage, 24.0);
    assert!(device.next_line().starts_with("can send 8001 "));
    assert_eq!(robot.cycler().bus_counters(0).unwrap().protocol_errors, 0);
}

#[test]
fn open_errors_say_what_is_wrong() {
    let dir = scratch_dir("open-errors");
    let dir = dir.path();
    let missing = dir.join("ttyACM9");
    let err = FdcanusbTransport::open(missing.to_str().unwrap(), FdcanusbOptions::default()).err().unwrap();
    assert_eq!(err.uri, format!("fdcanusb:{}", missing.display()));
    assert!(err.message.contains("no such device"), "{err}");

    let file = dir.join("not-a-tty");
    std::fs::write(&file, b"").unwrap();
    let err = FdcanusbTransport::open(file.to_str().unwrap(), FdcanusbOptions::default()).err().unwrap();
    assert!(err.message.contains("not a serial device"), "{err}");
    assert!(err.message.contains(file.to_str().unwrap()), "{err}");

    // A FIFO at the path (anyone can make one in /tmp, where `rtloop sim` links its pty):
    // opened without blocking (O_NONBLOCK) and refused, never waited on for a peer.
    let fifo = dir.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    let err = FdcanusbTransport::open(fifo.to_str().unwrap(), FdcanusbOptions::default()).err().unwrap();
    assert_eq!(err.message, format!("{} is not a serial device", fifo.display()));

    // A dangling link, like a by-id link of an unplugged adapter, reads as missing too.
    let dangling = dir.join("dangling");
    std::os::unix::fs::symlink(dir.join("gone"), &dangling).unwrap();
    let err = FdcanusbTransport::open(dangling.to_str().unwrap(), FdcanusbOptions::default()).err().unwrap();
    assert!(err.message.contains("no such device"), "{err}");
}

#[test]
fn an_err_answer_is_kept_as_the_devices_refusal_with_its_text() {
    let Setup { _dir, pty, transport: mut t, .. } = setup("refusal", FdcanusbOptions::default());
    let _device = FakeDevice::start(pty.master.try_clone().unwrap(), |_line, out| {
        out.extend_from_slice(b"ERR unknown command\n")
    });
    t.send(&position_query_frame(), 1).unwrap();
    for _ in 0..PATIENCE {
        assert_eq!(t.recv(2), Ok(None), "a refusal is no frame");
        if t.counters().device_errors > 0 {
            break;
        }
        // SAFETY: the transport keeps its descriptor open for the duration of this poll.
        readable(unsafe { BorrowedFd::borrow_raw(t.poll_fd().unwrap()) }, 10);
    }
    let c = t.counters();
    assert_eq!(c.device_errors, 1);
    assert_eq!(c.last_device_error.as_str(), "unknown command");
    assert_eq!(c.protocol_errors, 1);
    assert_eq!(t.outstanding(), 0, "the ERR answered our line");
}

#[test]
fn junk_left_in_the_device_by_an_earlier_client_is_ended_before_our_first_line() {
    let dir = scratch_dir("junk");
    let link = dir.path().join("fdcanusb");
    let pty = new_pty();
    point_link(&link, &pty.slave_path);
    // An earlier client wrote half a line and went away; the device still holds it. It
    // refuses anything but `can send`, like the simulator and the firmware; a frame from the
    // bus happens to arrive just before that refusal.
    let refuse_junk = |line: &[u8], out: &mut Vec<u8>| match lines::parse_line(line).map(|p| p.line) {
        Ok(Line::CanSend(_)) => answer_with_reply(line, out),
        _ => {
            out.extend_from_slice(REPLY_LINE.as_bytes());
            out.extend_from_slice(b"\nERR unknown command\n");
        }
    };
    let device = FakeDevice::start_with_junk(pty.master.try_clone().unwrap(), b"garbage", refuse_junk);
    let mut t = FdcanusbTransport::open(link.to_str().unwrap(), FdcanusbOptions::default()).unwrap();
    assert_eq!(device.next_line(), "garbage", "the junk ended as a line of its own");
    t.send(&position_query_frame(), 1).unwrap();
    assert_eq!(device.next_line(), POSITION_QUERY_LINE, "our line reached the device whole");
    assert_is_spec_reply(&recv_frame(&mut t, 2));
    // The device's ERR about the junk is counted (dropped at open, or — on a machine too
    // busy for the settle time — read later), never lost; the frame is bus traffic, not an
    // error (dropped at open like flushed input, or read as a frame).
    assert_eq!(t.counters().protocol_errors, 1);
}

/// Set in the child process of the hygiene test.
const HYGIENE_CHILD: &str = "RTLOOP_HYGIENE_CHILD";

#[test]
fn every_other_test_here_leaves_nothing_in_the_temp_dir() {
    if std::env::var_os(HYGIENE_CHILD).is_some() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = rtloop_testkit::this_test_binary()
        // This module's tests only: the binary holds the whole crate's.
        .args([
            &rtloop_testkit::test_path(module_path!(), ""),
            "--skip",
            "every_other_test_here_leaves_nothing_in_the_temp_dir",
        ])
        .env("TMPDIR", tmp.path())
        .env(HYGIENE_CHILD, "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "the tests failed: {}", String::from_utf8_lossy(&out.stdout));
    // The filter matched this module's tests (a wrong one runs none, and leaves nothing).
    assert!(!String::from_utf8_lossy(&out.stdout).contains(" 0 passed"), "no test ran in the child");
    let left: Vec<String> =
        std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");
}
