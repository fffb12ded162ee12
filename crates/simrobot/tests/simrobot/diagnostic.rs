//! rtloop-io's diagnostic client against the simulated servo's own console (the client's
//! unit tests, against a scripted stand-in, are in rtloop-io).

use rtloop_io::diagnostic::{DiagError, DiagnosticClient, DiagnosticOptions, MAX_COMMAND};
use rtloop_io::{Transport, TransportError, VirtualClock};
use rtloop_proto::subframe::{subframes, Subframe};
use rtloop_proto::CanFdFrame;
use rtloop_simrobot::SimTransport;

fn client(ids: &[u8]) -> DiagnosticClient<SimTransport, VirtualClock> {
    let mut bus = rtloop_sim::SimBus::new(rtloop_sim::BusConfig::default());
    for &id in ids {
        bus.add_servo(rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(id)));
    }
    DiagnosticClient::new(SimTransport::new(bus, "sim"), VirtualClock::new(0), ids[0], Default::default()).unwrap()
}

#[test]
fn ids_and_options_are_checked() {
    let bus = || SimTransport::new(rtloop_sim::SimBus::new(rtloop_sim::BusConfig::default()), "sim");
    for id in [0u8, 127, 200] {
        let e = DiagnosticClient::new(bus(), VirtualClock::new(0), id, Default::default()).unwrap_err();
        assert!(e.to_string().contains("1 to 126"), "{e}");
    }
    let options = DiagnosticOptions { reply_timeout_ns: 0, ..Default::default() };
    assert!(DiagnosticClient::new(bus(), VirtualClock::new(0), 1, options).is_err());
}

#[test]
fn lines_with_line_ends_or_too_long_are_refused_before_sending() {
    let mut c = client(&[1]);
    for bad in ["tel list\nconf write", "a\rb", "   ", ""] {
        assert!(matches!(c.command(bad), Err(DiagError::BadCommand { .. })), "{bad:?}");
    }
    let long = "x".repeat(MAX_COMMAND + 1);
    let e = c.command(&long).unwrap_err();
    assert!(e.to_string().contains("shorten it"), "{e}");
    assert_eq!(c.stats().frames_sent, 0);
}

#[test]
fn a_silent_servo_is_a_clear_error_not_a_hang() {
    // Servo 1 is on the bus, servo 9 is not.
    let mut bus = rtloop_sim::SimBus::new(rtloop_sim::BusConfig::default());
    bus.add_servo(rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(1)));
    let mut c =
        DiagnosticClient::new(SimTransport::new(bus, "sim:bus1"), VirtualClock::new(0), 9, Default::default()).unwrap();
    let e = c.command("tel list").unwrap_err();
    assert!(matches!(e, DiagError::NoAnswer { id: 9, .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("servo 9") && text.contains("sim:bus1"), "{text}");
    // The probe and its retries, nothing more.
    assert_eq!(c.stats().lost_answers, u64::from(DiagnosticOptions::default().poll_retries) + 1);
}

// Against the simulator's own console.

fn sim_client(bus: rtloop_sim::SimBus, id: u8) -> DiagnosticClient<SimTransport, VirtualClock> {
    DiagnosticClient::new(SimTransport::new(bus, "sim"), VirtualClock::new(0), id, Default::default()).unwrap()
}

#[test]
fn the_simulated_console_answers_conf_and_tel() {
    let mut c = client(&[1, 2]);
    assert_eq!(c.command_oneline("conf get id.id").unwrap(), "1");
    let lines = c.command("conf enumerate").unwrap();
    assert!(lines.iter().any(|l| l.starts_with("servo.default_timeout_s ")), "{lines:?}");
    c.command("conf set servo.pid_position.kp 7").unwrap();
    assert_eq!(c.command_oneline("conf get servo.pid_position.kp").unwrap().parse::<f64>().unwrap(), 7.0);
    let e = c.command("conf set servo.pid_position.kp nope").unwrap_err();
    assert!(matches!(&e, DiagError::Refused { message, .. } if message.starts_with("error setting")), "{e}");
    let names = c.command("tel list").unwrap();
    assert!(names.iter().any(|n| n == "servo_stats"), "{names:?}");
    let schema = c.command_block("tel schema servo_stats").unwrap();
    assert_eq!(schema.header, "schema servo_stats");
    assert!(!schema.data.is_empty());
    let data = c.command_block("tel get servo_stats").unwrap();
    assert_eq!(data.header, "emit servo_stats");
    assert_eq!(c.flow_controlled(), Some(true));
    let e = c.command(&"x".repeat(300)).unwrap_err();
    assert!(e.to_string().contains("line too long"), "{e}");
    // Servo 2 was never spoken to.
    let bus = c.transport_mut().bus_mut();
    assert_eq!(bus.servos()[1].console_stats().lines, 0);
}

/// A simulated bus whose replies pass through a filter that can lose them.
struct Lossy {
    inner: SimTransport,
    lose_next_flow_data: usize,
    seen: Vec<(u8, Vec<u8>)>,
}

impl Transport for Lossy {
    fn name(&self) -> &str {
        "sim:lossy"
    }
    fn send(&mut self, frame: &CanFdFrame, now_ns: u64) -> Result<(), TransportError> {
        self.inner.send(frame, now_ns)
    }
    fn recv(&mut self, now_ns: u64) -> Result<Option<CanFdFrame>, TransportError> {
        while let Some(frame) = self.inner.recv(now_ns)? {
            let flow = subframes(frame.payload()).map_while(Result::ok).find_map(|s| match s {
                Subframe::FlowData { packet, data, .. } if !data.is_empty() => Some((packet, data.to_vec())),
                _ => None,
            });
            if let Some(p) = flow {
                self.seen.push(p);
                if self.lose_next_flow_data > 0 {
                    self.lose_next_flow_data -= 1;
                    continue;
                }
            }
            return Ok(Some(frame));
        }
        Ok(None)
    }
    fn ready_hint_ns(&self) -> Option<u64> {
        self.inner.ready_hint_ns()
    }
}

#[test]
fn the_simulated_console_sends_a_lost_packet_again() {
    let mut bus = rtloop_sim::SimBus::new(rtloop_sim::BusConfig::default());
    bus.add_servo(rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(1)));
    let lossy = Lossy { inner: SimTransport::new(bus, "sim"), lose_next_flow_data: 1, seen: Vec::new() };
    let mut c = DiagnosticClient::new(lossy, VirtualClock::new(0), 1, Default::default()).unwrap();
    let reference = sim_client(
        {
            let mut bus = rtloop_sim::SimBus::new(rtloop_sim::BusConfig::default());
            bus.add_servo(rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(1)));
            bus
        },
        1,
    )
    .command("conf enumerate")
    .unwrap();
    let lines = c.command("conf enumerate").unwrap();
    assert_eq!(lines, reference, "the loss cost nothing");
    assert_eq!(c.stats().lost_answers, 1);
    let seen = &c.transport().seen;
    assert_eq!(seen[0], seen[1], "the same packet, number and bytes, came again");
}
