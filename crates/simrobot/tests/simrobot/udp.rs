//! The UDP transport and endpoint on loopback: a robot cycle against a simulated servo
//! served over UDP, batching, a vanished peer reported as `Disconnected` (and its return
//! as a reconnect), garbage counted on both sides, the remote-address guard, and no heap
//! allocation on the transport's hot path.

use rtloop_io::clock::monotonic_now_ns;
use rtloop_io::robot::encode_command;
use rtloop_io::udp::UdpTransport;
use rtloop_io::{
    CycleOptions, MonotonicClock, Robot, RobotConfig, ServoCommand, ServoReply, ServoSpec, Transport, TransportError,
};
use rtloop_proto::udp::{decode_datagram, encode_datagram, MAX_DATAGRAM};
use rtloop_proto::CanFdFrame;
use rtloop_sim::{BusConfig, Servo, ServoConfig, SimBus};
use rtloop_simrobot::serve::Endpoint;
use rtloop_simrobot::serve::UdpEndpoint;

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

// ---- helpers ----

/// A simulated bus with `ids`, served by `endpoint` on its own thread in real time.
struct Server {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<(UdpEndpoint, SimBus)>>,
}

impl Server {
    fn start(mut endpoint: UdpEndpoint, ids: &[u8]) -> Server {
        let mut bus = SimBus::new(BusConfig::default());
        for &id in ids {
            bus.add_servo(Servo::new(ServoConfig::new(id)));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                let now = monotonic_now_ns();
                let _ = endpoint.service(&mut bus, now);
                while let Some(frame) = bus.poll_rx(now) {
                    let _ = endpoint.deliver(&frame, now);
                }
                // Wake for the bus's next event, or soon anyway to notice new datagrams.
                let wake = bus.next_event_ns().unwrap_or(u64::MAX).min(now + 100_000);
                std::thread::sleep(Duration::from_nanos(wake.saturating_sub(now)));
            }
            (endpoint, bus)
        });
        Server { stop, thread: Some(thread) }
    }

    fn stop(mut self) -> (UdpEndpoint, SimBus) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn query_frame(id: u8) -> CanFdFrame {
    let mut f = CanFdFrame::default();
    encode_command(&RobotConfig::default(), ServoSpec { bus: 0, id }, &ServoCommand::Query, &mut f).unwrap();
    f
}

/// A port nobody listens on: bind one, note it, close it.
fn closed_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port()
}

/// Call `recv` until it returns something other than `Ok(None)`, or give up after 2 s.
fn recv_within(t: &mut UdpTransport) -> Result<Option<CanFdFrame>, TransportError> {
    recv_for(t, Duration::from_secs(2))
}

/// Call `recv` until it returns something other than `Ok(None)`, or `patience` passes.
fn recv_for(t: &mut UdpTransport, patience: Duration) -> Result<Option<CanFdFrame>, TransportError> {
    let until = Instant::now() + patience;
    loop {
        match t.recv(monotonic_now_ns()) {
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_micros(200)),
            other => return other,
        }
    }
}

fn robot_config() -> RobotConfig {
    // Generous waits: the server is a test thread that may be scheduled late.
    let cycle = CycleOptions { timeout_ns: 100_000_000, rx_baseline_wait_ns: 50_000_000, ..Default::default() };
    RobotConfig { cycle, ..Default::default() }
}

// ---- tests ----

#[test]
fn a_robot_cycle_over_udp_gets_a_fresh_reply_from_the_served_servo() {
    let endpoint = UdpEndpoint::bind("127.0.0.1:0", 1, false).unwrap();
    let port = endpoint.local_addr().unwrap().port();
    assert_eq!(endpoint.name(), format!("udp:127.0.0.1:{port}"));
    let server = Server::start(endpoint, &[1]);

    let transport = UdpTransport::open("127.0.0.1", port, 1).unwrap();
    assert_eq!(transport.name(), format!("udp:127.0.0.1:{port}"));
    assert!(transport.poll_fd().is_some());
    let mut robot = Robot::new(
        vec![Box::new(transport)],
        vec![ServoSpec { bus: 0, id: 1 }],
        None,
        MonotonicClock::default(),
        robot_config(),
    )
    .unwrap();

    let mut replies = [ServoReply::default()];
    let mut imu = Default::default();
    let mut fresh_cycles = 0;
    for _ in 0..5 {
        let report = robot.cycle(&[ServoCommand::Query], &mut replies, &mut imu);
        assert_eq!(report.stats.failed_buses, 0, "{:?}", report.stats.bus_errors);
        if replies[0].fresh {
            fresh_cycles += 1;
            assert_eq!(replies[0].state.mode, Some(0));
            assert!(replies[0].state.voltage > 20.0);
            // Answered long before the deadline: the cycle did not wait it out.
            assert!(report.stats.duration_ns() < 50_000_000, "{} ns", report.stats.duration_ns());
        }
    }
    assert!(fresh_cycles >= 4, "only {fresh_cycles} of 5 cycles got a fresh reply");

    let (endpoint, _bus) = server.stop();
    let c = endpoint.counters();
    assert_eq!(c.frames_in, 5);
    assert!(c.frames_out >= 4);
    assert_eq!(c.protocol_errors, 0);
}

#[test]
fn serving_on_a_reachable_address_needs_allow_remote() {
    let e = UdpEndpoint::bind("0.0.0.0:9000", 1, false).err().expect("must refuse");
    let msg = e.to_string();
    assert!(
        msg.contains("refusing to serve on 0.0.0.0:9000, which is reachable from other hosts: use 127.0.0.1 or pass --allow-remote"),
        "{msg}"
    );
    // With permission it binds (port 0: any free one).
    let ok = UdpEndpoint::bind("0.0.0.0:0", 1, true).unwrap();
    assert!(ok.local_addr().unwrap().ip().is_unspecified());
    // Loopback needs no permission, by name too.
    UdpEndpoint::bind("localhost:0", 2, false).unwrap();
    // A name that does not resolve is reported as such.
    let msg = UdpEndpoint::bind("no-such-host.invalid:9000", 1, false).err().unwrap().to_string();
    assert!(msg.contains("cannot resolve"), "{msg}");
}

#[test]
fn a_closed_peer_port_is_reported_disconnected_and_its_return_counts_as_a_reconnect() {
    let port = closed_port();
    let mut t = UdpTransport::open("127.0.0.1", port, 1).unwrap();
    t.send(&query_frame(1), monotonic_now_ns()).unwrap();
    t.flush(monotonic_now_ns()).unwrap();
    // The kernel turns the ICMP "port unreachable" into ECONNREFUSED on the next call.
    assert_eq!(recv_within(&mut t), Err(TransportError::Disconnected));
    assert_eq!(t.counters().disconnects, 1);
    // Still gone: reported again, but counted as one outage.
    t.send(&query_frame(1), monotonic_now_ns()).unwrap();
    let flushed = t.flush(monotonic_now_ns());
    assert!(flushed.is_ok() || flushed == Err(TransportError::Disconnected), "{flushed:?}");
    if flushed.is_ok() {
        assert_eq!(recv_within(&mut t), Err(TransportError::Disconnected));
    }
    assert_eq!(t.counters().disconnects, 1);
    assert_eq!(t.counters().reconnects, 0);

    // The peer comes back on the same port: the next reply counts as a reconnect.
    let endpoint = UdpEndpoint::bind(&format!("127.0.0.1:{port}"), 1, false).unwrap();
    let server = Server::start(endpoint, &[1]);
    let mut reply = None;
    for _ in 0..10 {
        t.send(&query_frame(1), monotonic_now_ns()).unwrap();
        let _ = t.flush(monotonic_now_ns());
        if let Ok(Some(f)) = recv_within(&mut t) {
            reply = Some(f);
            break;
        }
    }
    let reply = reply.expect("no reply once the peer was back");
    assert_eq!(reply.arbitration().source, 1);
    assert_eq!(t.counters().reconnects, 1);
    drop(server.stop());
}

#[test]
fn a_cycle_against_a_closed_port_fails_the_bus_instead_of_hanging() {
    let port = closed_port();
    let transport = UdpTransport::open("127.0.0.1", port, 1).unwrap();
    let options = CycleOptions { timeout_ns: 200_000_000, rx_baseline_wait_ns: 200_000_000, ..Default::default() };
    let mut robot = Robot::new(
        vec![Box::new(transport)],
        vec![ServoSpec { bus: 0, id: 1 }],
        None,
        MonotonicClock::default(),
        RobotConfig { cycle: options, ..Default::default() },
    )
    .unwrap();
    let mut replies = [ServoReply::default()];
    let mut imu = Default::default();
    let started = Instant::now();
    let report = robot.cycle(&[ServoCommand::Query], &mut replies, &mut imu);
    assert!(!replies[0].fresh);
    assert_eq!(report.stats.failed_buses, 1, "{report:?}");
    assert_eq!(report.stats.bus_errors[0], Some(TransportError::Disconnected));
    // The refusal woke the cycle's ppoll: it did not sit out the 200 ms deadline.
    assert!(started.elapsed() < Duration::from_millis(150), "{:?}", started.elapsed());
}

#[test]
fn frames_are_batched_into_datagrams_that_never_exceed_1472_bytes() {
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut t = UdpTransport::open("127.0.0.1", peer.local_addr().unwrap().port(), 3).unwrap();
    let frames: Vec<CanFdFrame> = (0..30u32).map(|i| CanFdFrame::new(0x8000 | i, &[i as u8; 64]).unwrap()).collect();
    for f in &frames {
        t.send(f, 0).unwrap();
    }
    t.flush(0).unwrap();
    // Nothing left to send: a second flush sends no empty datagram.
    t.flush(0).unwrap();
    assert_eq!(t.counters().sent, 30);

    let mut got = Vec::new();
    let mut sequences = Vec::new();
    let mut buf = [0u8; 65536];
    while got.len() < frames.len() {
        let n = peer.recv(&mut buf).unwrap();
        assert!(n <= MAX_DATAGRAM, "{n}-byte datagram");
        let records = decode_datagram(&buf[..n]).unwrap();
        sequences.push(records.sequence());
        for r in records {
            let (bus, f) = r.unwrap();
            assert_eq!(bus, 3);
            got.push(f);
        }
    }
    assert_eq!(got, frames);
    assert_eq!(sequences, [0, 1], "20 full frames fit in the first datagram, 10 in the second");
}

#[test]
fn garbage_and_misrouted_frames_are_counted_by_the_transport_not_fatal() {
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut t = UdpTransport::open("127.0.0.1", peer.local_addr().unwrap().port(), 1).unwrap();
    let me = t.local_addr().unwrap();

    peer.send_to(b"hello, world", me).unwrap();
    peer.send_to(&[0u8; 3000], me).unwrap();
    assert_eq!(recv_for(&mut t, Duration::from_millis(50)), Ok(None));
    assert_eq!(t.counters().protocol_errors, 2);

    // A stranger (not the connected peer) is filtered by the kernel: not even counted.
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    stranger.send_to(b"garbage from a stranger", me).unwrap();

    // One datagram: a frame for bus 2 (counted, dropped), then one for us.
    let other = CanFdFrame::new(0x0100, &[1, 2, 3]).unwrap();
    let ours = CanFdFrame::new(0x0101, &[4, 5, 6]).unwrap();
    let mut out = [0u8; MAX_DATAGRAM];
    let n = encode_datagram(0, [(2u8, &other), (1u8, &ours)].into_iter(), &mut out).unwrap();
    peer.send_to(&out[..n], me).unwrap();
    assert_eq!(recv_within(&mut t), Ok(Some(ours)));
    assert_eq!(t.counters().protocol_errors, 3);
    assert_eq!(t.counters().received, 1);

    // A datagram whose second record is cut off is dropped whole: its first frame too.
    let n = encode_datagram(0, [(1u8, &ours), (1u8, &ours)].into_iter(), &mut out).unwrap();
    peer.send_to(&out[..n - 1], me).unwrap();
    assert_eq!(recv_for(&mut t, Duration::from_millis(50)), Ok(None));
    assert_eq!(t.counters().protocol_errors, 4);
    assert_eq!(t.counters().received, 1);
    assert_eq!(t.counters().disconnects, 0);
}

#[test]
fn garbage_and_misrouted_frames_are_counted_by_the_endpoint_not_fatal() {
    let mut endpoint = UdpEndpoint::bind("127.0.0.1:0", 1, false).unwrap();
    let addr = endpoint.local_addr().unwrap();
    let mut bus = SimBus::new(BusConfig::default());
    bus.add_servo(Servo::new(ServoConfig::new(1)));
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(Duration::from_secs(2))).unwrap();

    // Nobody has sent anything yet: a reply has nowhere to go and is dropped.
    endpoint.deliver(&CanFdFrame::new(0x100, &[]).unwrap(), 0).unwrap();
    assert_eq!(endpoint.counters().dropped, 1);

    let service = |endpoint: &mut UdpEndpoint, bus: &mut SimBus| {
        // Datagrams on loopback arrive at once, but allow for a slow scheduler.
        std::thread::sleep(Duration::from_millis(5));
        endpoint.service(bus, monotonic_now_ns())
    };
    // Garbage is counted, not an endpoint error (the server would back off for one).
    client.send_to(b"definitely not a datagram", addr).unwrap();
    service(&mut endpoint, &mut bus).unwrap();
    assert_eq!(endpoint.counters().protocol_errors, 1);
    assert_eq!(endpoint.client(), None, "garbage must not make its sender the client");

    let mut out = [0u8; MAX_DATAGRAM];
    let n = encode_datagram(0, [(7u8, &query_frame(1))].into_iter(), &mut out).unwrap();
    client.send_to(&out[..n], addr).unwrap();
    service(&mut endpoint, &mut bus).unwrap();
    assert_eq!(endpoint.counters().protocol_errors, 2);
    assert_eq!(endpoint.counters().frames_in, 0);

    // A real query still works afterwards, and the reply goes back to its sender.
    let n = encode_datagram(0, [(1u8, &query_frame(1))].into_iter(), &mut out).unwrap();
    client.send_to(&out[..n], addr).unwrap();
    service(&mut endpoint, &mut bus).unwrap();
    assert_eq!(endpoint.counters().frames_in, 1);
    assert_eq!(endpoint.client(), Some(client.local_addr().unwrap()));
    let until = Instant::now() + Duration::from_secs(2);
    let reply = loop {
        let now = monotonic_now_ns();
        if let Some(f) = bus.poll_rx(now) {
            break f;
        }
        assert!(Instant::now() < until, "the simulated servo never answered");
        std::thread::sleep(Duration::from_micros(100));
    };
    endpoint.deliver(&reply, monotonic_now_ns()).unwrap();
    let mut buf = [0u8; 2048];
    let n = client.recv(&mut buf).unwrap();
    let got: Vec<_> = decode_datagram(&buf[..n]).unwrap().map(Result::unwrap).collect();
    assert_eq!(got, vec![(1u8, reply)]);
    assert_eq!(endpoint.counters().frames_out, 1);
}

#[test]
fn send_flush_and_recv_do_not_allocate() {
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut t = UdpTransport::open("127.0.0.1", peer.local_addr().unwrap().port(), 1).unwrap();
    let query = query_frame(1);
    let reply = CanFdFrame::new(0x0100, &[0x50; 16]).unwrap();
    let mut out = [0u8; MAX_DATAGRAM];
    let n = encode_datagram(0, [(1u8, &reply), (1u8, &reply)].into_iter(), &mut out).unwrap();
    let mut buf = [0u8; 2048];
    let mut allocations = 0;
    for round in 0..50 {
        rtloop_testkit::start_counting();
        t.send(&query, 0).unwrap();
        t.send(&query, 0).unwrap();
        t.flush(0).unwrap();
        allocations += rtloop_testkit::stop_counting();
        let (_, me) = peer.recv_from(&mut buf).unwrap();
        peer.send_to(&out[..n], me).unwrap();
        std::thread::sleep(Duration::from_micros(200));
        rtloop_testkit::start_counting();
        let mut got = 0;
        let until = monotonic_now_ns() + 2_000_000_000;
        while got < 2 && monotonic_now_ns() < until {
            if let Some(f) = t.recv(0).unwrap() {
                assert_eq!(f, reply);
                got += 1;
            }
        }
        assert_eq!(t.recv(0), Ok(None));
        allocations += rtloop_testkit::stop_counting();
        assert_eq!(got, 2, "round {round}");
    }
    assert_eq!(allocations, 0);

    // The counter does see allocations on this thread (so the zero above means something).
    let (seen, ()) = rtloop_testkit::count_allocations(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(8))));
    assert_eq!(seen, 2, "one alloc and one dealloc");
}
