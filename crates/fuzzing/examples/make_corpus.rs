//! Write the generated part of the seed corpora under `fuzz/corpus/<target>/`: real frames
//! from rtloop's encoders and the simulated servo's replies, fdcanusb lines and UDP
//! datagrams carrying them, run configurations, and a TLOG written with every writer
//! option. (The real `rtloop run --log` logs are copied in by hand: see `fuzz/README.md`.)
//!
//!     cargo run -p rtloop-fuzzing --example make_corpus
//!
//! Files are named after what they hold; an existing file is replaced only by the same
//! content (the generator is deterministic).

use rtloop_proto::fdcanusb;
use rtloop_proto::frame::{ArbitrationId, CanFdFrame};
use rtloop_proto::host::{self, PositionCommand, PositionResolution, QueryFormat};
use rtloop_proto::udp::DatagramWriter;
use rtloop_proto::{FrameWriter, Resolution};
use std::path::{Path, PathBuf};

fn corpus(target: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn put(target: &str, name: &str, bytes: &[u8]) {
    std::fs::write(corpus(target).join(name), bytes).unwrap();
}

fn payload(f: impl FnOnce(&mut FrameWriter) -> Result<(), rtloop_proto::EncodeError>) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    f(&mut w).unwrap();
    w.as_slice().to_vec()
}

fn frame(id: u8, data: &[u8]) -> CanFdFrame {
    let mut f = CanFdFrame::new(ArbitrationId::command(id, true).build(), data).unwrap();
    f.flags = rtloop_proto::frame::FrameFlags::moteus(f.id);
    f.pad_to_dlc();
    f
}

/// The requests: what `rtloop run` sends, and what the moteus clients send.
fn requests() -> Vec<(&'static str, Vec<u8>)> {
    let run = rtloop::cycle_model::run_command_frame(&rtloop::RobotSpec::default_quadruped(), 1).unwrap();
    let cmd = PositionCommand { position: Some(0.5), velocity: Some(0.0), ..Default::default() };
    let all = PositionCommand::from_registers([Some(0.25); 14]);
    vec![
        ("run_position_command", run.payload().to_vec()),
        ("query_default", payload(|w| host::encode_query(w, &QueryFormat::default()))),
        ("query_comprehensive", payload(|w| host::encode_query(w, &QueryFormat::comprehensive()))),
        (
            "position_spec_vector",
            payload(|w| host::encode_position(w, &cmd, &PositionResolution::default(), Some(&QueryFormat::default()))),
        ),
        (
            "position_all_int16",
            payload(|w| host::encode_position(w, &all, &PositionResolution::all(Resolution::Int16), None)),
        ),
        ("stop_query", payload(|w| host::encode_stop(w, Some(&QueryFormat::default())))),
        ("brake", payload(|w| host::encode_brake(w, None))),
        ("zero_velocity", payload(|w| host::encode_zero_velocity(w, None))),
        // Read of registers the servo does not have, and a long-form read of 0x100..0x102.
        ("read_unknown_and_identity", vec![0x11, 0x80, 0x03, 0x10, 0x03, 0x80, 0x02]),
        ("nop_padding", vec![0x11, 0x00, 0x50, 0x50, 0x50]),
    ]
}

fn main() {
    let mut replies = Vec::new();
    let mut servo = rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(1));
    for (i, (name, data)) in requests().into_iter().enumerate() {
        put("subframes", name, &data);
        put("servo", &format!("serve_{name}"), &data);
        let mut reply = CanFdFrame::default();
        if servo.handle_frame(&frame(1, &data), (i as u64 + 1) * 1_000_000, &mut reply) {
            put("reply", &format!("reply_to_{name}"), reply.payload());
            put("subframes", &format!("reply_to_{name}"), reply.payload());
            replies.push(reply);
        }
    }
    // The spec's reply vector, an error reply, a float mode (must read as 10) and a NaN one.
    put(
        "reply",
        "spec_vector",
        &[0x24, 0x04, 0x00, 0x0a, 0x00, 0x88, 0x13, 0x00, 0x00, 0x00, 0x00, 0x23, 0x0d, 0x30, 0x19, 0x00],
    );
    put("reply", "read_error", &[0x31, 0x80, 0x03, 0x01, 0x21, 0x00, 0x0a]);
    put("reply", "float_mode", &[0x2d, 0x00, 0x33, 0x33, 0x2b, 0x41]);
    put("reply", "nan_fault", &[0x2d, 0x0f, 0x00, 0x00, 0xc0, 0x7f]);

    // The servo target's frame sequences: [flags, len, payload, time step].
    let mut seq = Vec::new();
    for (_, data) in requests().iter().take(6) {
        seq.push(0x81);
        seq.push(data.len() as u8);
        seq.extend_from_slice(data);
        seq.push(10);
    }
    put("servo", "sequence_of_commands", &seq);

    // fdcanusb: host lines (to the device) and device lines (to the host), both CRC modes.
    let mut host_lines = b"can send 8001 01000A0E200000003F0000000011001F01130D50 BF\n".to_vec();
    let mut device_lines = b"rcv 100 2404000A00881300000000230D301900 E B F\nOK\nERR unknown command\n".to_vec();
    let mut line = [0u8; fdcanusb::MAX_LINE];
    for crc in [false, true] {
        for (_, data) in requests() {
            let n = fdcanusb::write_can_send(&frame(1, &data), crc, &mut line).unwrap();
            host_lines.extend_from_slice(&line[..n]);
        }
        for reply in &replies {
            let n = fdcanusb::write_rcv(reply, crc, &mut line).unwrap();
            device_lines.extend_from_slice(&line[..n]);
        }
        let n = fdcanusb::write_ok(crc, &mut line).unwrap();
        device_lines.extend_from_slice(&line[..n]);
        let n = fdcanusb::write_err(b"unknown command", crc, &mut line).unwrap();
        device_lines.extend_from_slice(&line[..n]);
    }
    host_lines.extend_from_slice(b"conf get can.bitrate\r\ncan std 7ff 00\ncan ext 1fffffff 0102 b f\n\n");
    put("fdcanusb_device", "host_lines", &host_lines);
    put("fdcanusb_host", "device_lines", &device_lines);

    // UDP datagrams: commands to three buses, the replies, an empty one.
    let mut buf = [0u8; rtloop_proto::udp::MAX_DATAGRAM];
    let mut w = DatagramWriter::new(&mut buf[..], 7).unwrap();
    for (bus, (_, data)) in requests().into_iter().enumerate() {
        w.push(bus as u8 % 3 + 1, &frame(1, &data)).unwrap();
    }
    put("udp", "commands", w.as_bytes());
    let mut w = DatagramWriter::new(&mut buf[..], 65535).unwrap();
    for reply in &replies {
        w.push(1, reply).unwrap();
    }
    put("udp", "replies", w.as_bytes());
    let w = DatagramWriter::new(&mut buf[..], 0).unwrap();
    put("udp", "empty", w.as_bytes());

    // Run configurations: everything `--print-config` writes, and the README's bus table.
    put("run_config", "print_config", rtloop::config::RunConfig::default().to_toml().as_bytes());
    put("run_config", "readme_bus", b"[[bus]]\nbus = 1\nuri = \"fdcanusb:/dev/ttyACM0\"\nservos = [1, 2, 3]\n");
    put(
        "run_config",
        "udp_and_faults",
        b"rate_hz = 500.0\nduration_s = 2.5\n\n[[bus]]\nbus = 1\nuri = \"udp:127.0.0.1:9000?bus=2\"\nservos = [1, 2]\n\n\
          [[bus]]\nbus = 2\nuri = \"sim\"\nservos = [3]\n\n[faults]\noverheat = [\"2@0.5\"]\n",
    );

    // A TLOG with every writer option: zstd blocks, seek markers every 10 ms, an index,
    // and a record with strings, options, arrays, timestamps.
    #[derive(serde::Serialize, Default)]
    struct Sample {
        name: String,
        count: u32,
        ratio: f32,
        #[serde(serialize_with = "rtloop_tlog::schema::typed_option")]
        maybe: Option<f64>,
        #[serde(serialize_with = "rtloop_tlog::schema::typed_vec")]
        values: Vec<i16>,
        flag: bool,
        at: rtloop_tlog::schema::Timestamp,
    }
    let options = rtloop_tlog::writer::WriterOptions {
        zstd_level: Some(3),
        seek_marker_interval_us: Some(10_000),
        ..Default::default()
    };
    let mut log = rtloop_tlog::writer::FileWriter::new(Vec::new(), options).unwrap();
    let handle = log.register::<Sample>("sample").unwrap();
    for i in 0..40i64 {
        let t = 1_700_000_000_000_000 + i * 2_500;
        let s = Sample {
            name: format!("s{i}"),
            count: i as u32,
            ratio: i as f32 / 7.0,
            maybe: (i % 3 == 0).then_some(i as f64),
            values: (0..(i % 5) as i16).collect(),
            flag: i % 2 == 0,
            at: rtloop_tlog::schema::Timestamp(t),
        };
        log.write(&handle, t, &s).unwrap();
    }
    let bytes = log.close().unwrap();
    for target in ["tlog_reader", "tlog_columns", "tlog_export", "tlog_plot"] {
        put(target, "all_writer_options", &bytes);
        // The same log cut in the middle of a block, as after SIGKILL.
        put(target, "all_writer_options_cut", &bytes[..bytes.len() * 2 / 3]);
    }
    columns_seeds();
    agent_seeds();
    foxglove_seeds();
    println!("seeds written under {}", corpus("").display());
}

/// Seeds of `tlog_columns` besides the logs above: a log of a record with an enum, a map,
/// an option of a struct, a vector of structs, a fixed array and an item without a
/// timestamp, beside a second record; and records in the target's raw form (see
/// `rtloop_fuzzing::raw_record_log`: schema length, schema, then length-prefixed payloads) whose
/// union alternatives share names with different types, and with every scalar type.
fn columns_seeds() {
    use rtloop_tlog::format::{write_string, write_varint, write_varuint};
    use rtloop_tlog::schema::{Field, Schema};
    use std::collections::BTreeMap;

    #[derive(serde::Serialize, serde::Deserialize, Default, Clone, Copy)]
    enum Mode {
        #[default]
        Stopped,
        Position,
    }
    #[derive(serde::Serialize, Default, Clone)]
    struct Joint {
        id: u8,
        position: f32,
    }
    #[derive(serde::Serialize, Default)]
    struct Cycle {
        #[serde(serialize_with = "rtloop_tlog::schema::typed_enum")]
        mode: Mode,
        #[serde(serialize_with = "rtloop_tlog::schema::typed_vec")]
        joints: Vec<Joint>,
        #[serde(serialize_with = "rtloop_tlog::schema::typed_option")]
        spare: Option<Joint>,
        #[serde(serialize_with = "rtloop_tlog::schema::typed_map")]
        named: BTreeMap<String, i16>,
        gains: [f64; 2],
        timestamp: u16,
    }
    #[derive(serde::Serialize, Default)]
    struct Other {
        value: f64,
    }
    let mut log =
        rtloop_tlog::writer::FileWriter::new(Vec::new(), rtloop_tlog::writer::WriterOptions::default()).unwrap();
    let cycle = log.register::<Cycle>("cycle").unwrap();
    let other = log.register::<Other>("other").unwrap();
    for i in 0..6u8 {
        let t = 1_700_000_000_000_000 + i64::from(i) * 1_000;
        let value = Cycle {
            mode: if i % 2 == 0 { Mode::Stopped } else { Mode::Position },
            joints: (0..i % 3).map(|id| Joint { id, position: f32::from(i) * 0.5 }).collect(),
            spare: (i == 3).then(|| Joint { id: 9, position: -1.0 }),
            named: (0..i % 3).map(|k| (format!("k{}", (k + i) % 3), i16::from(k) - 1)).collect(),
            gains: [f64::from(i), f64::NAN],
            timestamp: u16::from(i),
        };
        if i == 4 {
            let mut payload = Vec::new();
            rtloop_tlog::ser::to_bytes(&value, &mut payload).unwrap();
            log.write_data(cycle.id(), None, &payload).unwrap();
        } else {
            log.write(&cycle, t, &value).unwrap();
        }
        log.write(&other, t + 1, &Other { value: f64::from(i) }).unwrap();
    }
    put("tlog_columns", "enum_map_option_untimed", &log.close().unwrap());

    let raw = |schema: &Schema, payloads: &[Vec<u8>]| {
        let schema = schema.to_binary();
        let mut out = vec![u8::try_from(schema.len()).unwrap()];
        out.extend_from_slice(&schema);
        for (i, payload) in payloads.iter().enumerate() {
            let untimed = if i == 1 { 0x40 } else { 0 };
            out.push(u8::try_from(payload.len()).unwrap() | untimed);
            out.extend_from_slice(payload);
        }
        out
    };
    let union = Schema::Union(vec![Schema::Null, Schema::VarInt, Schema::String, Schema::Float64, Schema::Bool]);
    let mixed = Schema::Object(vec![
        Field::new("u", union.clone()),
        Field::new(
            "e",
            Schema::Enum { underlying: Box::new(Schema::VarUInt), items: vec![(0, "zero".into()), (1, "one".into())] },
        ),
        Field::new(
            "s",
            Schema::Union(vec![
                Schema::Object(vec![Field::new("x", Schema::Float32)]),
                Schema::Object(vec![Field::new("x", Schema::String)]),
            ]),
        ),
        Field::new("m", Schema::Map(Box::new(union))),
    ]);
    let mut payloads = Vec::new();
    for (u, text) in [(1u64, false), (2, true), (4, false), (0, true)] {
        let mut p = Vec::new();
        write_varuint(&mut p, u);
        match u {
            1 => write_varint(&mut p, -5),
            2 => write_string(&mut p, "hi"),
            4 => p.push(1),
            _ => {}
        }
        write_varuint(&mut p, u % 3);
        if text {
            write_varuint(&mut p, 1);
            write_string(&mut p, "x");
        } else {
            write_varuint(&mut p, 0);
            p.extend_from_slice(&1.5f32.to_le_bytes());
        }
        write_varuint(&mut p, 1);
        write_string(&mut p, "p");
        write_varuint(&mut p, 3);
        p.extend_from_slice(&0.25f64.to_le_bytes());
        payloads.push(p);
    }
    put("tlog_columns", "raw_unions_sharing_names", &raw(&mixed, &payloads));

    let scalars = Schema::Object(vec![
        Field::new("i8", Schema::FixedInt(1)),
        Field::new("u16", Schema::FixedUInt(2)),
        Field::new("i32", Schema::FixedInt(4)),
        Field::new("u64", Schema::FixedUInt(8)),
        Field::new("f32", Schema::Float32),
        Field::new("b", Schema::Bytes),
        Field::new("at", Schema::Timestamp),
        Field::new("took", Schema::Duration),
        Field::new("n", Schema::Null),
        Field::new("a", Schema::Array(Box::new(Schema::Object(vec![Field::new("id", Schema::FixedUInt(1))])))),
        Field::new("f", Schema::FixedArray(2, Box::new(Schema::Bool))),
    ]);
    let mut payloads = Vec::new();
    for i in 0..3u8 {
        let mut p = vec![i, i, 0, 0, 0, 0, 0xff];
        p.extend_from_slice(&u64::MAX.to_le_bytes());
        p.extend_from_slice(&f32::from(i).to_le_bytes());
        write_varuint(&mut p, 2);
        p.extend_from_slice(&[i, 7]);
        p.extend_from_slice(&(1_700_000_000_000_000i64 + i64::from(i)).to_le_bytes());
        p.extend_from_slice(&(-i64::from(i)).to_le_bytes());
        write_varuint(&mut p, u64::from(i));
        p.extend((0..i).map(|id| id + 1));
        p.extend_from_slice(&[1, 0]);
        payloads.push(p);
    }
    put("tlog_columns", "raw_every_scalar_and_arrays", &raw(&scalars, &payloads));
}

/// Command blocks of the agent protocol: the C example agent's stand pose, every kind, and
/// a hostile mix (NaN, infinities, out of range, unknown kind and bits, overrides); the mix
/// with its segment resized under the spine; and files planted before a spine starts.
fn agent_seeds() {
    use rtloop_agent::layout::{bytes_of, field, kind, CommandBlock, RawServoCommand};
    let stand = |c: &mut RawServoCommand| {
        c.kind = kind::POSITION;
        c.present = field::POSITION | field::VELOCITY | field::KP_SCALE | field::KD_SCALE | field::WATCHDOG_TIMEOUT;
        (c.position, c.velocity, c.kp_scale, c.kd_scale, c.watchdog_timeout) = (0.0, 0.0, 1.0, 1.0, 0.1);
    };
    let mut block = CommandBlock::empty();
    (block.seq, block.for_cycle, block.heartbeat, block.servo_count) = (2, 41, 42, 12);
    block.servos.iter_mut().take(12).for_each(stand);
    put("agent_command", "stand_pose", bytes_of(&block));

    let mut block = CommandBlock::empty();
    for (i, c) in block.servos.iter_mut().enumerate() {
        c.kind = i as u32 % 6;
    }
    put("agent_command", "every_kind", bytes_of(&block));

    let mut block = CommandBlock::empty();
    let values = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300, -0.0, 11.0, 0.5, 1e-300];
    for (i, c) in block.servos.iter_mut().enumerate() {
        c.kind = if i == 31 { 99 } else { kind::POSITION };
        c.present = if i == 30 { u32::MAX } else { 1 << (i % 14) };
        for f in 0..14 {
            c.set(f, values[(i + f) % values.len()]);
        }
        c.present = if i == 30 { u32::MAX } else { 1 << (i % 14) };
    }
    put("agent_command", "hostile_mix", bytes_of(&block));
    put("agent_command", "empty", &[]);

    // After the block: [servos - 1, new size (3 bytes, little-endian), grow back]. The
    // segment resized under a live spine and agent.
    let resized = |servos: u8, size: u32, grow_back: u8| {
        let mut v = bytes_of(&block).to_vec();
        v.extend_from_slice(&[servos - 1, size as u8, (size >> 8) as u8, (size >> 16) as u8, grow_back]);
        v
    };
    let total = rtloop_agent::layout::TOTAL_SIZE as u32;
    put("agent_command", "truncated_to_zero", &resized(12, 0, 0));
    put("agent_command", "truncated_then_grown_back", &resized(12, 0, 1));
    put("agent_command", "shrunk_to_a_byte", &resized(32, 1, 0));
    put("agent_command", "shrunk_within_its_last_page", &resized(4, 5000, 0));
    put("agent_command", "grown", &resized(1, 2 * total, 0));
    // The same bytes planted as a file before a spine starts: a header (the block's `seq`
    // is the magic word) naming a spine pid, owned by another user when the last byte is
    // odd and the fuzzer runs as root.
    let planted = |pid: i32, other_user: u8| {
        let mut b = CommandBlock::empty();
        b.seq = rtloop_agent::layout::MAGIC;
        let mut v = bytes_of(&b).to_vec();
        v[76..80].copy_from_slice(&pid.to_le_bytes());
        v.extend_from_slice(&[11, 0, 0, 0, 0, other_user]);
        v
    };
    put("agent_command", "planted_by_a_live_spine", &planted(1, 0));
    put("agent_command", "planted_by_a_dead_spine", &planted(i32::MAX, 0));
    put("agent_command", "planted_by_another_user", &planted(1, 1));
    put("agent_command", "planted_headerless", &[0x78]);
}

/// Client sessions for the Foxglove server (see `rtloop_fuzzing::foxglove_client` for the format).
fn foxglove_seeds() {
    fn session(offer: u8, frames: &[(u8, &[u8])]) -> Vec<u8> {
        let mut out = vec![offer];
        for (flags, payload) in frames {
            out.push(*flags);
            out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
            out.extend_from_slice(payload);
        }
        out
    }
    const TEXT: u8 = 0x1;
    const BINARY: u8 = 0x2;
    let subscribe = br#"{"op":"subscribe","subscriptions":[{"id":1,"channelId":1},{"id":2,"channelId":99}]}"#;
    let unsubscribe = br#"{"op":"unsubscribe","subscriptionIds":[1,7]}"#;
    put("foxglove_client", "legacy_subscribe", &session(1, &[(TEXT, subscribe), (TEXT, unsubscribe)]));
    put("foxglove_client", "no_subprotocol", &session(0, &[(TEXT, subscribe)]));
    put("foxglove_client", "near_miss_subprotocol", &session(3, &[(TEXT, subscribe)]));
    put(
        "foxglove_client",
        "refused_messages",
        &session(
            2,
            &[
                (TEXT, b"not json"),
                (TEXT, br#"{"op":"setParameters","parameters":[]}"#),
                (BINARY, &[2, 1, 0, 0, 0]),
                (BINARY, &[3, 0, 0, 0, 128, 63, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, b'i', b'd']),
                (BINARY, &[9]),
            ],
        ),
    );
    // A frame header claiming more than the message limit; an unmasked frame; fragments.
    put("foxglove_client", "over_the_limit", &session(2, &[(TEXT | 0x40, b"{}")]));
    put("foxglove_client", "unmasked", &session(2, &[(TEXT | 0x20, b"{}")]));
    put("foxglove_client", "fragments", &session(2, &[(TEXT | 0x10, br#"{"op":"#), (0x0, br#""subscribe"}"#)]));
    put("foxglove_client", "cut", &session(2, &[(TEXT, subscribe), (0x80, b"")]));
}
