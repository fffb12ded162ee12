//! The diagnostic console of a simulated servo, driven through CAN-FD frames as moteus_tool
//! drives it: 0x40 client data, 0x42 / 0x44 polls. Telemetry decodes with the TLOG crate's
//! reader, drive commands move the joint, bad input gets `ERR` lines and never stops the
//! register protocol.

use crate::common::*;
use rtloop_proto::frame::CanFdFrame;
use rtloop_proto::subframe::{subframes, Subframe};
use rtloop_proto::writer::FrameWriter;
use rtloop_sim::{Servo, ServoConfig};

/// A simulated servo and a clock, with a console client.
struct Bench {
    servo: Servo,
    t: u64,
    ack: u8,
}

impl Bench {
    fn new(id: u8) -> Self {
        let mut servo = Servo::new(ServoConfig { load_torque_nm: 0.0, ..ServoConfig::new(id) });
        servo.advance_to(0);
        Bench { servo, t: 0, ack: 0 }
    }

    fn handle(&mut self, payload: &[u8], reply: bool) -> Option<CanFdFrame> {
        self.t += MS;
        let id = self.servo.id();
        let frame = CanFdFrame::new(rtloop_proto::frame::ArbitrationId::command(id, reply).build(), payload).unwrap();
        let mut out = CanFdFrame::default();
        self.servo.handle_frame(&frame, self.t, &mut out).then_some(out)
    }

    /// Send `bytes` in 0x40 chunks of at most 61.
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(61) {
            let mut buf = [0u8; 64];
            let mut w = FrameWriter::new(&mut buf);
            w.stream(0x40, 1, chunk).unwrap();
            let payload = w.as_slice().to_vec();
            assert!(self.handle(&payload, false).is_none(), "0x40 gets no reply");
        }
    }

    /// One 0x42 poll: the data of its 0x41 answer.
    fn poll(&mut self, max: u8) -> Vec<u8> {
        let reply = self.handle(&[0x42, 0x01, max], true).expect("a poll is always answered");
        let subs: Vec<_> = subframes(reply.payload()).collect::<Result<_, _>>().unwrap();
        match subs.first() {
            Some(Subframe::Stream { opcode: 0x41, channel: 1, data }) => data.to_vec(),
            other => panic!("poll answered with {other:?}"),
        }
    }

    /// One 0x44 poll acknowledging `ack`: (packet, data).
    fn poll_flow(&mut self, ack: u8, max: u8) -> (u8, Vec<u8>) {
        let reply = self.handle(&[0x44, 0x01, ack, max], true).expect("a flow poll is always answered");
        let subs: Vec<_> = subframes(reply.payload()).collect::<Result<_, _>>().unwrap();
        match subs.first() {
            Some(Subframe::FlowData { channel: 1, packet, data }) => (*packet, data.to_vec()),
            other => panic!("flow poll answered with {other:?}"),
        }
    }

    /// Send `line`, then poll (flow-controlled) until `done` says the answer is complete.
    fn command_until(&mut self, line: &str, done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
        self.write(format!("{line}\n").as_bytes());
        let mut got = Vec::new();
        for _ in 0..10_000 {
            let (packet, data) = self.poll_flow(self.ack, 61);
            self.ack = packet;
            got.extend_from_slice(&data);
            if done(&got) {
                return got;
            }
        }
        let head: String = String::from_utf8_lossy(&got).chars().take(300).collect();
        panic!("no complete answer to {line:?} ({} bytes): {head:?}", got.len());
    }

    /// A command answered by lines ending in OK or ERR.
    fn command(&mut self, line: &str) -> String {
        let got = self.command_until(line, |g| {
            let text = String::from_utf8_lossy(g);
            text.ends_with("OK\r\n")
                || text.lines().last().is_some_and(|l| l.starts_with("ERR")) && text.ends_with('\n')
        });
        String::from_utf8(got).unwrap()
    }

    /// A command answered by one line (`conf get`).
    fn oneline(&mut self, line: &str) -> String {
        String::from_utf8(self.command_until(line, |g| g.ends_with(b"\r\n"))).unwrap()
    }

    /// A command answered by `PREFIX NAME\r\n` + u32 size + bytes.
    fn block(&mut self, line: &str) -> (String, Vec<u8>) {
        let got = self.command_until(line, |g| {
            let Some(end) = g.windows(2).position(|w| w == b"\r\n") else { return false };
            if g.starts_with(b"ERR") {
                return true;
            }
            let Some(size) = g.get(end + 2..end + 6) else { return false };
            g.len() >= end + 6 + u32::from_le_bytes(size.try_into().unwrap()) as usize
        });
        let end = got.windows(2).position(|w| w == b"\r\n").unwrap();
        let head = String::from_utf8_lossy(&got[..end]).to_string();
        (head, got.get(end + 6..).unwrap_or(&[]).to_vec())
    }
}

fn decode(schema: &[u8], data: &[u8]) -> Vec<(String, f64)> {
    let schema = rtloop_tlog::schema::Schema::parse_binary(schema).unwrap();
    let mut flat = Vec::new();
    rtloop_tlog::value::decode(&schema, data).unwrap().flatten("", &mut flat);
    flat.into_iter().filter_map(|(k, v)| v.as_f64().map(|x| (k, x))).collect()
}

fn field(flat: &[(String, f64)], name: &str) -> f64 {
    flat.iter().find(|(k, _)| k == name).unwrap_or_else(|| panic!("no {name} in {flat:?}")).1
}

#[test]
fn tel_lists_the_records_and_serves_schema_and_data_that_decode() {
    let mut b = Bench::new(2);
    assert_eq!(b.command("tel stop"), "OK\r\n");
    assert_eq!(b.command("tel list"), "firmware\r\ngit\r\nservo_stats\r\nservo_cmd\r\nOK\r\n");
    let (head, schema) = b.block("tel schema firmware");
    assert_eq!(head, "schema firmware");
    let (head, data) = b.block("tel get firmware");
    assert_eq!(head, "emit firmware");
    let flat = decode(&schema, &data);
    assert_eq!(field(&flat, "model"), f64::from(rtloop_sim::servo::MODEL_NUMBER));
    assert_eq!(field(&flat, "serial_number.0"), f64::from(b.servo.serial_number()[0]));

    // servo_stats follows the joint.
    b.servo.set_position(0.125);
    let (_, schema) = b.block("tel schema servo_stats");
    let (_, data) = b.block("tel get servo_stats");
    let flat = decode(&schema, &data);
    assert!((field(&flat, "position") - 0.125).abs() < 1e-6, "{flat:?}");
    assert_eq!(field(&flat, "mode"), 0.0);

    // Text format: one `name.field value` line per field, then OK.
    assert_eq!(b.command("tel fmt servo_stats 1"), "OK\r\n");
    let text = b.command("tel get servo_stats");
    assert!(text.contains("servo_stats.position 0.125"), "{text}");
    assert!(text.ends_with("OK\r\n"));
}

#[test]
fn tel_rate_emits_periodically_and_tel_stop_ends_it() {
    let mut b = Bench::new(1);
    b.write(b"tel rate servo_stats 10\n");
    let mut got = Vec::new();
    for _ in 0..100 {
        got.extend(b.poll(61)); // 1 ms per poll: 100 ms
    }
    let emits = got.windows(16).filter(|w| w == b"emit servo_stats").count();
    assert!(got.starts_with(b"OK\r\n"));
    assert!((8..=11).contains(&emits), "{emits} emissions in 100 ms at 10 ms");
    b.write(b"tel stop\n");
    for _ in 0..5 {
        b.poll(61);
    }
    for _ in 0..50 {
        assert!(b.poll(61).is_empty(), "still emitting after tel stop");
    }
    assert!(b.servo.console_stats().telemetry_sent >= 8);
}

#[test]
fn flow_control_resends_a_packet_until_it_is_acknowledged() {
    let mut b = Bench::new(1);
    b.write(b"tel list\n");
    let (p1, first) = b.poll_flow(0, 8);
    assert_eq!(first, b"firmware");
    // The answer was lost: the client acknowledges the old number, gets the same packet.
    let (again, same) = b.poll_flow(0, 8);
    assert_eq!((again, same.as_slice()), (p1, first.as_slice()));
    // Acknowledged: the next packet carries what follows.
    let (p2, next) = b.poll_flow(p1, 8);
    assert_eq!(p2, p1.wrapping_add(1));
    assert_eq!(next, b"\r\ngit\r\ns");
    // Nothing left to say: an empty answer with the acknowledged number.
    let mut all = Vec::new();
    let mut ack = p2;
    loop {
        let (p, d) = b.poll_flow(ack, 61);
        if d.is_empty() {
            assert_eq!(p, ack);
            break;
        }
        ack = p;
        all.extend(d);
    }
    assert_eq!(all, b"ervo_stats\r\nservo_cmd\r\nOK\r\n");
}

#[test]
fn drive_commands_move_the_joint_and_refuse_what_the_model_lacks() {
    let mut b = Bench::new(1);
    assert_eq!(b.command("d pos 0.2 0 2 tnan"), "OK\r\n");
    for _ in 0..500 {
        b.poll(61);
    }
    assert_eq!(b.servo.mode(), 10);
    assert!((b.servo.position() - 0.2).abs() < 0.01, "at {}", b.servo.position());
    assert_eq!(b.command("d rezero 1.5"), "OK\r\n");
    assert!((b.servo.position() - 1.5).abs() < 0.01, "at {}", b.servo.position());
    // The held position moved with the offset: the joint does not jump.
    for _ in 0..100 {
        b.poll(61);
    }
    assert!((b.servo.position() - 1.5).abs() < 0.01, "at {}", b.servo.position());
    assert_eq!(b.command("d stop"), "OK\r\n");
    assert_eq!(b.servo.mode(), 0);
    for (line, want) in [
        ("d pwm 0 0.5", "does not model"),
        ("d pos nan 0 nan c1.5 b1", "does not model"),
        ("d flash", "does not have"),
        ("d pos x 0 1", "'x' is not a number"),
        ("d pos 0 0 1 q3", "unknown option 'q'"),
        ("d", "needs one of"),
        ("d spin", "unknown subcommand 'd spin'"),
    ] {
        let answer = b.command(line);
        assert!(answer.starts_with("ERR ") && answer.contains(want), "{line}: {answer}");
    }
    assert_eq!(b.servo.mode(), 0, "refused commands did not drive the servo");
}

#[test]
fn bad_input_gets_err_lines_and_the_registers_keep_working() {
    let mut b = Bench::new(1);
    let long = "x".repeat(300);
    for (line, want) in [
        (long.as_str(), "line too long"),
        ("frobnicate", "unknown command 'frobnicate'"),
        ("tel get nothing", "unknown name 'nothing'"),
        ("tel rate servo_stats -5", "period in ms"),
        ("tel", "needs one of"),
        ("unlock", "no flash"),
    ] {
        let answer = b.command(line);
        assert!(answer.starts_with("ERR ") && answer.contains(want), "{line:?}: {answer}");
    }
    let answer = b.command("\u{1}\u{7f}garbage");
    assert!(answer.starts_with("ERR byte 0x01"), "{answer}");
    // Binary garbage with no line end, ended by a bare line end (as tview starts its
    // session), then a normal command: one ERR for the garbage, then the command's answer.
    b.write(&[0xff; 500]);
    b.write(b"\r\n");
    let answer = String::from_utf8(b.command_until("tel stop", |g| g.ends_with(b"OK\r\n"))).unwrap();
    assert!(answer.starts_with("ERR line too long") && answer.ends_with("OK\r\n"), "{answer}");
    // Registers are served as before.
    let state = exchange(&mut b.servo, &query(1), b.t + MS);
    assert_eq!(state.mode, Some(0));
    assert!(b.servo.console_stats().errors >= 8);
}

#[test]
fn input_beyond_the_buffer_is_dropped_counted_and_reported() {
    let mut b = Bench::new(1);
    // Many commands at once without reading any answer: the first answers fill the
    // output, the rest of the input waits, and what does not fit is dropped.
    let burst = "tel list\n".repeat(1000);
    b.write(burst.as_bytes());
    let stats = b.servo.console_stats();
    assert!(stats.input_dropped > 0, "{stats:?}");
    assert!(b.servo.request_errors().not_understood > 0);
    let mut text = String::new();
    for _ in 0..20_000 {
        let d = b.poll(61);
        if d.is_empty() && text.contains("input overflow") {
            break;
        }
        text.push_str(&String::from_utf8_lossy(&d));
    }
    assert!(text.contains(&format!("ERR input overflow: {} bytes dropped", stats.input_dropped)), "{text}");
}

#[test]
fn streams_on_other_channels_and_server_subframes_are_counted() {
    let mut b = Bench::new(1);
    assert!(b.handle(&[0x40, 0x05, 0x01, b'x'], false).is_none());
    let reply = b.handle(&[0x42, 0x05, 48, 0x41, 0x01, 0x00], true).unwrap();
    assert_eq!(reply.payload().get(..3), Some(&[0x41, 0x05, 0x00][..]), "an unknown channel's poll is answered empty");
    assert_eq!(b.servo.request_errors().not_understood, 2);
    b.handle(&[0x60, 0x01], true);
    assert_eq!(b.servo.request_errors().malformed_frames, 1);
}

#[test]
fn conf_enumerate_streams_every_key_through_the_bounded_output() {
    let mut b = Bench::new(4);
    let all = b.command("conf enumerate");
    let lines: Vec<&str> = all.trim_end().lines().collect();
    assert!(lines.len() > 250, "{} keys", lines.len());
    assert!(all.len() > rtloop_sim::console::OUTPUT_CAPACITY, "the dump is bigger than the output buffer");
    assert_eq!(lines.last(), Some(&"OK"));
    assert!(lines.contains(&"id.id 4"), "{all}");
    assert!(lines.iter().any(|l| l.starts_with("servo.default_timeout_s ")));
    let servo = b.command("conf enumerate servo");
    assert!(servo.lines().all(|l| l.starts_with("servo.") || l == "OK"), "{servo}");
    let uuid = b.command("conf enumerate uuid");
    assert_eq!(uuid.lines().count(), 17, "{uuid}");
    assert!(b.command("conf enumerate nothing").starts_with("ERR unknown group"));
}

#[test]
fn conf_set_changes_the_behaviour_and_refuses_bad_values() {
    let mut b = Bench::new(1);
    assert_eq!(b.oneline("conf get servo.default_timeout_s"), "0.1\r\n");
    // A position limit holds the joint inside it.
    assert_eq!(b.command("conf set servopos.position_max 0.05"), "OK\r\n");
    b.command("d pos 0.3 0 2 tnan");
    for _ in 0..1000 {
        b.poll(61);
    }
    assert!((b.servo.position() - 0.05).abs() < 0.01, "bounded at {}", b.servo.position());
    // A softer position gain: the same torque disturbance moves the joint further.
    let sag = |b: &mut Bench, kp: &str| {
        assert_eq!(b.command(&format!("conf set servo.pid_position.kp {kp}")), "OK\r\n");
        b.command("d pos 0 0 5 tnan f1");
        for _ in 0..1500 {
            b.poll(61);
        }
        b.servo.position()
    };
    let stiff = sag(&mut b, "40");
    let soft = sag(&mut b, "4");
    assert!(soft > 4.0 * stiff && stiff > 0.0, "kp 40: {stiff}, kp 4: {soft}");
    for (line, want) in [
        ("conf set servo.pid_position.kp abc", "error setting"),
        ("conf set id.id 300", "out of range"),
        ("conf set servo.max_current_A inf", "error setting"),
        ("conf set servo.nothing 1", "error setting"),
        ("conf set nothing.at.all 1", "unknown group"),
        ("conf set motor.offset.64 0", "error setting"),
        ("conf frob", "unknown subcommand"),
    ] {
        let answer = b.command(line);
        assert!(answer.starts_with("ERR ") && answer.contains(want), "{line}: {answer}");
    }
    let answer = b.oneline("conf get servo.nothing");
    assert!(answer.starts_with("ERR error reading"), "{answer}");
    assert_eq!(b.oneline("conf get servo.pid_position.kp"), "4\r\n", "a refused set changed nothing");
    // conf default goes back to the simulator's values; conf load to the stored ones.
    assert_eq!(b.command("conf write"), "OK\r\n");
    assert!(b.servo.take_config_to_store().unwrap().contains("servo.pid_position.kp 4\n"));
    b.command("conf default");
    assert_eq!(b.oneline("conf get servo.pid_position.kp"), "20\r\n");
    b.command("conf load");
    assert_eq!(b.oneline("conf get servo.pid_position.kp"), "4\r\n");
}

#[test]
fn a_new_id_takes_effect_at_restart_after_conf_write() {
    let mut b = Bench::new(1);
    assert_eq!(b.command("conf set id.id 7"), "OK\r\n");
    assert_eq!(b.servo.id(), 1, "not before a restart");
    assert_eq!(b.command("conf write"), "OK\r\n");
    b.write(b"d reset\n");
    assert_eq!(b.servo.id(), 7);
    let stored = b.servo.take_config_to_store().expect("the write survives the restart");
    // A simulator started again with the stored text answers to the new id at once.
    let mut fresh = Servo::new(ServoConfig::new(1));
    assert!(fresh.load_stored_config(&stored).is_empty());
    assert_eq!(fresh.id(), 7);
    let bad = fresh.load_stored_config("id.id 9\nservo.pid_position.kp x\n# comment\nnothing.here 1\n");
    assert_eq!(bad.iter().map(|(line, _)| *line).collect::<Vec<_>>(), [2, 4]);
    assert_eq!(fresh.id(), 9);
}

#[test]
fn set_offset_as_moteus_tool_does_it_moves_the_output_and_is_stored() {
    let mut b = Bench::new(1);
    b.servo.set_position(0.4);
    assert_eq!(b.command("d cfg-set-output 0.25"), "OK\r\n");
    assert!((b.servo.position() - 0.25).abs() < 1e-3, "{}", b.servo.position());
    b.command("conf write");
    b.command("d rezero 0.25");
    let stored = b.servo.take_config_to_store().unwrap();
    assert!(stored.contains("motor_position.output.offset -0.15"), "{stored}");
    b.write(b"d reset\n");
    assert!((b.servo.position() - 0.25).abs() < 1e-3, "the configured offset survives a restart");
}

#[test]
fn a_new_client_does_not_get_the_last_packet_of_the_one_before() {
    let mut b = Bench::new(1);
    // The first client reads a whole answer and leaves without acknowledging its last packet.
    b.write(b"tel list\n");
    let mut ack = 0;
    let mut got = Vec::new();
    while !got.ends_with(b"OK\r\n") {
        let (p, d) = b.poll_flow(ack, 8);
        ack = p;
        got.extend(d);
    }
    // A new client starts from 0: nothing stale, and its own answer comes whole.
    assert_eq!(b.poll_flow(0, 1).1, b"");
    b.ack = 0;
    assert_eq!(b.command("tel stop"), "OK\r\n");
    // Packet numbers wrap past 255 without using 0 again.
    let mut seen_zero = false;
    for _ in 0..300 {
        b.write(b"tel stop\n");
        let (p, _) = b.poll_flow(b.ack, 2);
        seen_zero |= p == 0;
        b.ack = p;
        let (p, _) = b.poll_flow(b.ack, 2);
        seen_zero |= p == 0;
        b.ack = p;
    }
    assert!(!seen_zero);
}
