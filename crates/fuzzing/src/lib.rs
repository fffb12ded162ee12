//! # rtloop-fuzzing — the bodies of rtloop's fuzz targets
//!
//! What it is for: one function per input surface, taking arbitrary bytes, that feeds them
//! to every public entry point reading that kind of input and checks what must hold for
//! any input (the decoders return errors instead of panicking, what parses re-encodes to
//! the same thing, a served reply always decodes). The cargo-fuzz targets in `fuzz/` are
//! one line each around these functions, and `tests/fuzzing/corpus.rs` replays every seed and every
//! crash file kept under `fuzz/` through the same functions on stable Rust, so a fixed
//! crash stays fixed. A panic, from the code under test or from a check here, is a finding.
//!
//! What it must never do: be a dependency of the product (it is `publish = false` and only
//! the fuzz targets and the tests use it), hide a panic (nothing here catches unwinds), or
//! do work that grows faster than its input (every loop is bounded by the input length or
//! a fixed cap), so a fuzzer's time goes into the code under test.
//!
//! The TLOG targets read from memory ([`rtloop_tlog::reader::FileReader::from_bytes`]); only
//! [`tlog_plot`] writes a file, because the plotter renders to a path.

#![forbid(unsafe_code)]

use rtloop_proto::fdcanusb::{self, Line, LineError, MAX_LINE};
use rtloop_proto::frame::CanFdFrame;
use rtloop_proto::host::{decode_reply, ServoState};
use rtloop_proto::servo::{serve, RegisterServer, ERROR_UNKNOWN_REGISTER};
use rtloop_proto::subframe::{subframes as parse_subframes, Subframe};
use rtloop_proto::udp::{decode_datagram, encode_datagram, MAX_DATAGRAM};
use rtloop_proto::{FrameWriter, Resolution, Value};
use rtloop_tlog::reader::{FileReader, ItemFilter};

/// A fuzz target body: any bytes in, a panic out only for a finding.
pub type Target = fn(&[u8]);

/// Every target, by the name of its `fuzz/fuzz_targets/<name>.rs`, its seed corpus
/// `fuzz/corpus/<name>/` and its crash files `fuzz/artifacts/<name>/`.
pub const TARGETS: &[(&str, Target)] = &[
    ("subframes", subframes),
    ("physics_text", physics_text),
    ("reply", reply),
    ("servo", servo),
    ("fdcanusb_host", fdcanusb_host),
    ("fdcanusb_device", fdcanusb_device),
    ("udp", udp),
    ("run_config", run_config),
    ("tlog_reader", tlog_reader),
    ("tlog_columns", tlog_columns),
    ("tlog_export", tlog_export),
    ("tlog_plot", tlog_plot),
    ("agent_command", agent_command),
    ("console", console),
    ("pi3hat_board", pi3hat_board),
    ("pi3hat_host", pi3hat_host),
    ("foxglove_client", foxglove_client),
];

/// The simulated servo's diagnostic console: the input is split into chunks of console
/// bytes sent in 0x40 frames, each followed by polls (0x42, or 0x44 with an ack taken from
/// the input, so lost and repeated packets happen). Every poll is answered within 64 bytes
/// with exactly one stream subframe, registers are still served afterwards, and the
/// console never holds more than its buffers.
pub fn console(data: &[u8]) {
    use rtloop_proto::frame::ArbitrationId;
    let mut servo = rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(1));
    let mut now_ns = 0u64;
    let frame = |payload: &[u8], reply: bool| {
        CanFdFrame::new(ArbitrationId::command(1, reply).build(), payload).expect("payloads here are at most 64 bytes")
    };
    let mut rest = data;
    while let [control, tail @ ..] = rest {
        let len = usize::from(control & 0x3f).min(tail.len()).min(61);
        let (chunk, after) = tail.split_at(len);
        let mut buf = [0u8; 64];
        let mut w = FrameWriter::new(&mut buf);
        if w.stream(0x40, 1, chunk).is_ok() {
            let mut reply = CanFdFrame::default();
            assert!(!servo.handle_frame(&frame(w.as_slice(), false), now_ns, &mut reply));
        }
        let ack = after.first().copied().unwrap_or(0);
        let poll: &[u8] = if control & 0x40 != 0 { &[0x44, 0x01, ack, 61] } else { &[0x42, 0x01, 61] };
        for _ in 0..=(control >> 7) {
            now_ns += 1_000_000;
            let mut reply = CanFdFrame::default();
            assert!(servo.handle_frame(&frame(poll, true), now_ns, &mut reply), "a poll is always answered");
            let subs: Vec<_> = parse_subframes(reply.payload()).collect();
            assert!(
                matches!(subs.first(), Some(Ok(Subframe::Stream { opcode: 0x41, .. } | Subframe::FlowData { .. }))),
                "a poll is answered by one stream subframe: {subs:?}"
            );
        }
        rest = after;
    }
    let mut reply = CanFdFrame::default();
    let query = [0x11, 0x00];
    assert!(servo.handle_frame(&frame(&query, true), now_ns + 1, &mut reply));
    let mut state = ServoState::default();
    decode_reply(reply.payload(), &mut state).expect("registers are still served");
    assert!(state.mode.is_some());
}

/// The subframe parser: it ends, stops for good after an error, and every register
/// subframe holds exactly `count` values of its resolution.
pub fn subframes(data: &[u8]) {
    let mut iter = parse_subframes(data);
    let mut steps = 0usize;
    while let Some(item) = iter.next() {
        steps += 1;
        // Every subframe is at least one byte: more items than bytes means no progress.
        assert!(steps <= data.len(), "more subframes than bytes");
        assert!(iter.offset() <= data.len());
        match item {
            Ok(Subframe::Write { res, count, values, .. } | Subframe::Reply { res, count, values, .. }) => {
                assert_eq!(values.len(), usize::from(count));
                assert_eq!(values.resolution(), res);
                assert_eq!(values.iter().count(), usize::from(count));
            }
            Ok(_) => {}
            Err(_) => {
                assert!(iter.next().is_none(), "the parser goes on after an error");
                break;
            }
        }
    }
}

/// The reply decoder, and `rtloop frame decode` on the same bytes: both parse the same
/// subframe stream, so they accept and refuse the same payloads.
pub fn reply(data: &[u8]) {
    let mut state = ServoState::default();
    let typed = decode_reply(data, &mut state);
    for r in 0..=0x200u16 {
        let _ = state.get(r);
    }
    let _ = state.mode_enum();
    if data.len() <= 64 {
        let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
        let text = if hex.is_empty() { "0x".to_string() } else { hex };
        let json = rtloop::frame::decode(&text);
        if !data.is_empty() {
            assert_eq!(typed.is_ok(), json.is_ok(), "decode_reply {typed:?}, frame decode {json:?}");
        }
    }
}

/// A register server that answers registers below 0x100 from a table the requests write,
/// and refuses the rest: enough for `serve` to produce every kind of reply subframe.
struct TableServer {
    regs: [Value; 0x100],
    frames: u32,
}

impl RegisterServer for TableServer {
    fn write(&mut self, reg: u16, value: Value) -> Result<(), u32> {
        let slot = self.regs.get_mut(usize::from(reg)).ok_or(ERROR_UNKNOWN_REGISTER)?;
        *slot = value;
        Ok(())
    }

    fn read(&mut self, reg: u16, res: Resolution) -> Result<Value, u32> {
        let v = *self.regs.get(usize::from(reg)).ok_or(ERROR_UNKNOWN_REGISTER)?;
        // Re-encode at the requested resolution through the physical value.
        let class = rtloop_proto::register::class_of(reg);
        Ok(Value::encode(v.decode(class), class, res))
    }

    fn end_of_frame(&mut self) {
        self.frames += 1;
    }
}

/// The servo side: `rtloop_proto::servo::serve` on the whole input as one request, then the input
/// as a sequence of frames to a simulated servo (`rtloop_sim::Servo`), with time moving on.
/// Each frame is `[flags, len, payload…]`: flags bit 7 = reply required, bits 0-6 the
/// destination; `len` is taken modulo 65; the next byte after the payload, if any, is how
/// far time moves (×100 µs). Every reply must decode.
pub fn servo(data: &[u8]) {
    let mut server = TableServer { regs: [Value::I8(0); 0x100], frames: 0 };
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    if let Ok(n) = serve(data, &mut server, &mut w) {
        assert_eq!(n, w.len());
        let mut state = ServoState::default();
        decode_reply(w.as_slice(), &mut state).expect("a served reply decodes");
    }

    let mut servo = rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(1));
    let mut now_ns = 0u64;
    let mut rest = data;
    while let [flags, len, tail @ ..] = rest {
        let len = usize::from(*len) % 65;
        let (payload, after) = tail.split_at(len.min(tail.len()));
        let id = rtloop_proto::frame::ArbitrationId {
            prefix: 0,
            source: 0,
            destination: flags & 0x7f,
            reply_required: flags & 0x80 != 0,
        }
        .build();
        let Ok(frame) = CanFdFrame::new(id, payload) else { break };
        let mut reply = CanFdFrame::default();
        if servo.handle_frame(&frame, now_ns, &mut reply) {
            assert!(usize::from(reply.len) <= 64);
            let mut state = ServoState::default();
            decode_reply(reply.payload(), &mut state).expect("the simulated servo's reply decodes");
        }
        let (step, after) = match after {
            [step, after @ ..] => (u64::from(*step), after),
            [] => (1, after),
        };
        now_ns += step * 100_000;
        servo.advance_to(now_ns);
        rest = after;
    }
    let _ = servo.telemetry();
}

/// The input's lines, split at `\n` as the fdcanusb readers split them; the parser trims a
/// `\r` and refuses a line longer than [`MAX_LINE`].
fn lines(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    data.split(|&b| b == b'\n')
}

/// What a line means once re-written: an id above 0x7FF always travels as extended.
fn normalized(mut f: CanFdFrame) -> CanFdFrame {
    f.flags.extended |= f.id > 0x7FF;
    f
}

/// The host reading device lines (`rcv`, `OK`, `ERR`, noise): every line parses or is a
/// typed error, and a frame that parsed is written back to a line that parses to it.
pub fn fdcanusb_host(data: &[u8]) {
    for line in lines(data) {
        let Ok(parsed) = fdcanusb::parse_line(line) else { continue };
        let mut out = [0u8; MAX_LINE + 8];
        match parsed.line {
            Line::Rcv(frame) | Line::CanSend(frame) => {
                let n = fdcanusb::write_rcv(&frame, parsed.had_crc, &mut out).expect("a parsed frame fits a line");
                let back = fdcanusb::parse_line(&out[..n]).expect("a written rcv line parses");
                assert_eq!(back.line, Line::Rcv(normalized(frame)));
                assert_eq!(back.had_crc, parsed.had_crc);
            }
            Line::Ok => {
                let n = fdcanusb::write_ok(parsed.had_crc, &mut out).expect("OK fits");
                assert_eq!(fdcanusb::parse_line(&out[..n]).map(|p| p.line), Ok(Line::Ok));
            }
            Line::Err(_) | Line::Other(_) => {}
        }
    }
}

/// A simulated fdcanusb reading host lines: `can send` frames go onto a simulated bus with
/// servos 1-3, every answer (`OK`, `ERR …`, `rcv …` for each reply) is written in the
/// host's CRC mode and must parse back.
pub fn fdcanusb_device(data: &[u8]) {
    let mut bus = rtloop_sim::SimBus::new(rtloop_sim::BusConfig::default());
    for id in 1..=3 {
        bus.add_servo(rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(id)));
    }
    let mut now_ns = 0u64;
    let mut out = [0u8; MAX_LINE + 8];
    for line in lines(data) {
        let crc = fdcanusb::split_crc(line).map(|(_, had)| had).unwrap_or(true);
        let answer = match fdcanusb::parse_line(line) {
            Ok(parsed) => match parsed.line {
                Line::CanSend(frame) => {
                    let n = fdcanusb::write_can_send(&frame, crc, &mut out).expect("a parsed frame fits a line");
                    let back = fdcanusb::parse_line(&out[..n]).expect("a written can send line parses");
                    assert_eq!(back.line, Line::CanSend(normalized(frame)));
                    if bus.submit(&frame, now_ns).is_ok() {
                        fdcanusb::write_ok(crc, &mut out)
                    } else {
                        fdcanusb::write_err(b"queue full", crc, &mut out)
                    }
                }
                _ => fdcanusb::write_err(b"unknown command", crc, &mut out),
            },
            Err(LineError::Empty) => continue,
            Err(_) => fdcanusb::write_err(b"bad line", crc, &mut out),
        };
        let n = answer.expect("an answer fits a line");
        fdcanusb::parse_line(&out[..n]).expect("the device's answer parses");
        now_ns += 1_000_000;
        while let Some(reply) = bus.poll_rx(now_ns) {
            let n = fdcanusb::write_rcv(&reply, crc, &mut out).expect("a reply fits a line");
            let back = fdcanusb::parse_line(&out[..n]).expect("an rcv line parses");
            assert_eq!(back.line, Line::Rcv(normalized(reply)));
        }
    }
}

/// A UDP datagram (`rtloop_proto::udp`): it decodes or is a typed error; what decodes re-encodes
/// to a datagram that decodes to the same frames.
pub fn udp(data: &[u8]) {
    let Ok(iter) = decode_datagram(data) else { return };
    let sequence = iter.sequence();
    let valid = iter.validate();
    let frames: Vec<(u8, CanFdFrame)> = iter.clone().map_while(Result::ok).collect();
    if valid.is_err() {
        return;
    }
    assert_eq!(valid, Ok(frames.len()));
    let mut out = [0u8; MAX_DATAGRAM];
    // A datagram larger than MAX_DATAGRAM decodes, but our writer will not build one.
    let Ok(n) = encode_datagram(sequence, frames.iter().map(|(b, f)| (*b, f)), &mut out) else { return };
    let again = decode_datagram(&out[..n]).expect("a written datagram decodes");
    assert_eq!(again.sequence(), sequence);
    let back: Vec<(u8, CanFdFrame)> = again.map(|r| r.expect("a written record decodes")).collect();
    assert_eq!(back, frames);
}

/// The run configuration (`rtloop run --config FILE`): any text is a config or one error
/// message; a config that loads is written back (`--print-config`) to text that loads.
pub fn run_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(config) = rtloop::config::RunConfig::from_toml(text) else { return };
    let _ = config.validate();
    let _ = config.robot();
    let _ = config.overheats();
    let _ = config.pushes();
    if let Some(physics) = &config.physics {
        let _ = physics.spec(&config.buses, config.period_ns());
    }
    let printed = config.to_toml();
    if let Err(e) = rtloop::config::RunConfig::from_toml(&printed) {
        panic!("a loaded config prints as text that does not load: {e}\n--- input\n{text}\n--- printed\n{printed}");
    }
}

/// A model file's text as the physics reads it before MuJoCo does (the scan for numbers written
/// as NaN or infinity), and the push syntax (`--push`, `[faults] push`): a finding is a
/// panic, or a refusal that is not one line.
pub fn physics_text(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Some(e) = rtloop_physics::non_finite_attribute(&text) {
        let line = e.to_string();
        assert!(!line.contains('\n') || text.contains('\n'), "one line unless the value spans lines: {line}");
    }
    for part in text.split('\n').take(64) {
        if let Ok(p) = rtloop::physics::parse_push(part) {
            assert!(p.at_s >= 0.0 && p.duration_s > 0.0 && p.force_n.iter().all(|f| f.is_finite()), "{part:?} → {p:?}");
        }
    }
}

/// Most items a TLOG target looks at: a fuzzer's inputs are small, a seed log need not be
/// walked to the end to be useful.
const MAX_ITEMS: usize = 4096;

/// Every entry point of the TLOG reader on an in-memory log: the directory, the scan
/// report, the seek markers, items (all, per record, in a time window), seek, backwards
/// chains and the schema decoding of every item, to JSON and flattened.
pub fn tlog_reader(data: &[u8]) {
    let Ok(reader) = FileReader::from_bytes(data.to_vec()) else { return };
    let _ = (reader.len(), reader.is_empty(), reader.data_start(), reader.has_index());
    let report = reader.scan_report();
    assert!(report.data_blocks <= report.blocks);
    let markers = reader.seek_markers();
    let records = reader.records();
    let mut times = vec![i64::MIN, -1, 0, i64::MAX];
    times.extend(markers.iter().take(8).map(|m| m.timestamp_us));
    for item in reader.items(ItemFilter::default()).take(MAX_ITEMS) {
        let Ok(item) = item else { continue };
        if let Some(t) = item.timestamp_us {
            if times.len() < 16 {
                times.push(t);
            }
        }
        if let Ok(value) = reader.decode_item(&item) {
            let _ = value.to_json();
            let mut leaves = Vec::new();
            value.flatten("", &mut leaves);
            for (_, leaf) in &leaves {
                let _ = leaf.as_f64();
            }
        }
    }
    for &t in &times {
        if let Ok(offset) = reader.seek(t) {
            assert!(offset <= reader.len(), "seek({t}) = {offset} past the end ({})", reader.len());
        }
    }
    for record in records.iter().take(16) {
        assert!(reader.record(&record.name).is_some());
        for _ in reader.backwards(record.id).take(MAX_ITEMS) {}
        let window = ItemFilter {
            record: Some(record.name.clone()),
            from_us: times.get(4).copied(),
            to_us: times.get(5).copied(),
        };
        for _ in reader.items(window).take(MAX_ITEMS) {}
    }
    let _ = reader.record("no such record");
    for _ in reader.backwards(u64::MAX).take(MAX_ITEMS) {}
}

/// The column reader (`rtloop_tlog::columns::read`, behind `rtloop.tlog`'s `read`) on every record
/// of a log, with the default options, enum names with `fields`, and a time window; and in
/// chunks of two rows (`read_chunks`, behind the Parquet export), which must give the same
/// rows. The
/// input is a log when it starts with `TLOG0003`; otherwise it is the schema and payloads
/// of one record, written into a log here (see [`raw_record_log`]), so that the fuzzer
/// reaches the decoder without having to forge CRCs. Whatever is read must be a
/// consistent table, and where no name is ambiguous it must hold what `items` +
/// `decode_item` + `Value::flatten` give: the same rows, timestamps and values (the column
/// decoder may accept more items than the value decoder, whose budget also counts the
/// containers around zero-width values, never fewer).
pub fn tlog_columns(data: &[u8]) {
    use rtloop_tlog::columns::{self, ColumnOptions};
    let bytes = if data.starts_with(b"TLOG0003") { data.to_vec() } else { raw_record_log(data) };
    let Ok(reader) = FileReader::from_bytes(bytes) else { return };
    let mut names: Vec<String> = reader.records().into_iter().map(|r| r.name).take(16).collect();
    names.push("no such record".into());
    let first_us = reader.items(ItemFilter::default()).take(MAX_ITEMS).flatten().find_map(|item| item.timestamp_us);
    let window =
        ColumnOptions { from_us: first_us.map(|t| t.saturating_add(1)), to_us: Some(i64::MAX), ..Default::default() };
    let named = ColumnOptions { enum_names: true, fields: Some(vec!["*".into(), "?".into()]), ..Default::default() };
    for name in &names {
        // Read in chunks of two rows, the rows and their timestamps are the whole read's.
        if let Ok(whole) = columns::read(&reader, name, &ColumnOptions::default()) {
            let chunks = columns::read_chunks(&reader, name, &ColumnOptions::default(), 2)
                .and_then(|chunks| chunks.collect::<Result<Vec<_>, _>>())
                .expect("the chunks of a record that reads whole read too");
            let stamps: Vec<i64> = chunks.iter().flat_map(|c| c.timestamps_us.iter().copied()).collect();
            assert_eq!(stamps, whole.timestamps_us, "chunks of '{name}'");
            assert!(chunks.iter().all(|c| c.rows() <= 2));
        }
        for options in [ColumnOptions::default(), named.clone(), window.clone()] {
            match columns::read(&reader, name, &options) {
                Ok(got) => check_columns(&reader, name, &options, &got),
                Err(columns::ColumnsError::NoRecord { record }) => {
                    assert!(reader.record(&record).is_none(), "'{record}' exists, yet NoRecord")
                }
                Err(error) => {
                    let _ = error.to_string();
                }
            }
        }
    }
}

/// A log of one record `x` built from fuzz bytes: the first byte is the schema's length (the
/// bytes after it, taken as the schema whatever they are), then payloads, each after a
/// byte whose low 6 bits are its length and whose bit 6 leaves the item without timestamp.
pub fn raw_record_log(data: &[u8]) -> Vec<u8> {
    use rtloop_tlog::writer::{FileWriter, WriterOptions};
    let (&len, rest) = data.split_first().unwrap_or((&0, &[]));
    let (schema, mut rest) = rest.split_at(usize::from(len).min(rest.len()));
    let mut writer = FileWriter::new(Vec::new(), WriterOptions::default()).expect("a log in memory");
    let id = writer.allocate_id("x");
    writer.write_schema(id, schema).expect("a log in memory");
    let mut t = 1_700_000_000_000_000i64;
    while let [control, tail @ ..] = rest {
        let (payload, after) = tail.split_at(usize::from(control & 0x3f).min(tail.len()));
        t += i64::from(*control);
        let timestamp = (control & 0x40 == 0).then_some(t);
        writer.write_data(id, timestamp, payload).expect("a log in memory");
        rest = after;
    }
    writer.close().expect("a log in memory")
}

/// True when an item has two leaves that `Value::flatten` would tell apart by renaming
/// (`name#2`) and a column cannot: a repeated field name or map key, or a name with a dot
/// or `#` that could collide with another leaf's.
fn ambiguous(value: &rtloop_tlog::value::Value) -> bool {
    use rtloop_tlog::value::Value;
    match value {
        Value::Object(entries) | Value::Map(entries) => {
            let mut seen = std::collections::HashSet::new();
            entries.iter().any(|(k, v)| !seen.insert(k) || k.contains(['.', '#']) || ambiguous(v))
        }
        Value::Array(items) => items.iter().any(ambiguous),
        Value::Union(_, inner) => ambiguous(inner),
        _ => false,
    }
}

/// Check one read (see [`tlog_columns`]).
fn check_columns(
    reader: &FileReader,
    name: &str,
    options: &rtloop_tlog::columns::ColumnOptions,
    got: &rtloop_tlog::columns::Columns,
) {
    use rtloop_tlog::columns::{Cell, ColumnData, NO_TIMESTAMP, TIMESTAMP};
    use rtloop_tlog::value::Value;
    let rows = got.rows();
    let mut names = std::collections::HashMap::new();
    for (i, column) in got.columns.iter().enumerate() {
        assert!(names.insert(column.name.as_str(), i).is_none(), "column {} twice", column.name);
        assert_eq!(column.len(), rows, "column {} has {} rows of {rows}", column.name, column.len());
        if let Some(missing) = &column.missing {
            assert_eq!(missing.len(), rows, "the mask of {}", column.name);
            assert!(matches!(column.data, ColumnData::Bool(_) | ColumnData::I64(_) | ColumnData::U64(_)));
        }
    }
    if options.fields.is_some() {
        return;
    }
    // The reference: the items that decode, flattened.
    let filter = ItemFilter { record: Some(name.to_string()), from_us: options.from_us, to_us: options.to_us };
    let mut reference = Vec::new();
    for item in reader.items(filter).flatten() {
        let Ok(value) = reader.decode_item(&item) else { continue };
        if ambiguous(&value) {
            return;
        }
        let mut leaves = Vec::new();
        value.flatten("", &mut leaves);
        reference.push((item.timestamp_us.unwrap_or(NO_TIMESTAMP), leaves));
    }
    assert_eq!(got.collisions, 0, "no name is ambiguous, yet values collided");
    assert!(rows >= reference.len(), "{rows} rows, but {} items decode", reference.len());
    if rows != reference.len() {
        return;
    }
    let times: Vec<i64> = reference.iter().map(|(t, _)| *t).collect();
    assert_eq!(got.timestamps_us, times);
    let missing = |cell: &Cell| matches!(cell, Cell::None) || matches!(cell, Cell::F64(x) if x.is_nan());
    let same = |a: f64, b: f64| (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits();
    for (row, (_, leaves)) in reference.iter().enumerate() {
        let mut named = std::collections::HashSet::new();
        for (leaf_name, leaf) in leaves {
            let leaf_name = if leaf_name == TIMESTAMP { format!("{TIMESTAMP}#2") } else { leaf_name.clone() };
            let column = names.get(leaf_name.as_str()).and_then(|&i| got.columns.get(i));
            let want = match leaf {
                Value::Null => None,
                Value::Bool(b) => Some(Cell::Bool(*b)),
                Value::Int(v) => Some(Cell::I64(*v)),
                Value::UInt(v) => Some(Cell::U64(*v)),
                Value::F32(v) => Some(Cell::F64(f64::from(*v))),
                Value::F64(v) => Some(Cell::F64(*v)),
                Value::Bytes(b) => Some(Cell::Bytes(b.clone())),
                Value::String(s) => Some(Cell::Str(s.clone())),
                Value::Enum(_, Some(n)) if options.enum_names => Some(Cell::Str(n.clone())),
                Value::Enum(raw, _) => Some(Cell::U64(*raw)),
                Value::Timestamp(us) | Value::Duration(us) => {
                    Some(Cell::F64(rtloop_tlog::value::micros_to_seconds(*us)))
                }
                other => panic!("flatten gave a container: {other:?}"),
            };
            let Some(column) = column else {
                assert!(want.is_none(), "no column {leaf_name} for {leaf:?}");
                continue;
            };
            named.insert(leaf_name.clone());
            let cell = column.cell(row).expect("every column has every row");
            let Some(want) = want else {
                assert!(missing(&cell), "{leaf_name} row {row}: {cell:?} for a null");
                continue;
            };
            let holds = match (&cell, &want) {
                (Cell::F64(a), Cell::F64(b)) => same(*a, *b),
                // A column widened to floats (and maybe on to objects) holds numbers as floats.
                (Cell::F64(a), want) => want.as_f64().is_some_and(|b| same(*a, b)),
                (cell, want) => cell == want,
            };
            assert!(holds, "{leaf_name} row {row}: {cell:?}, want {want:?}");
        }
        for column in &got.columns {
            if !named.contains(&column.name) {
                let cell = column.cell(row).expect("every column has every row");
                assert!(missing(&cell), "{} row {row}: {cell:?}, but the item has no such leaf", column.name);
            }
        }
    }
}

/// Every exporter on an in-memory log: CSV of each record and the whole log as MCAP, into
/// memory. An error is a fine answer; a panic is not.
pub fn tlog_export(data: &[u8]) {
    let Ok(reader) = FileReader::from_bytes(data.to_vec()) else { return };
    for record in reader.records().iter().take(16) {
        let mut csv = Vec::new();
        let _ = rtloop_tlog::export::to_csv(&reader, &record.name, &mut csv, None);
    }
    let mut csv = Vec::new();
    let _ = rtloop_tlog::export::to_csv(&reader, "no such record", &mut csv, None);
    let mut mcap = std::io::Cursor::new(Vec::new());
    let _ = rtloop_tlog::export::to_mcap(&reader, &mut mcap, None);
}

/// The plotter (`rtloop log plot`) on an in-memory log, into a small PNG in memory: the
/// first few numeric leaves of each record, and a field that does not exist, one panel per
/// field and all on one axis.
pub fn tlog_plot(data: &[u8]) {
    let Ok(reader) = FileReader::from_bytes(data.to_vec()) else { return };
    let mut fields = vec!["no.such.field".to_string()];
    for record in reader.records().iter().take(4) {
        let filter = ItemFilter { record: Some(record.name.clone()), ..ItemFilter::default() };
        let Some(Ok(item)) = reader.items(filter).next() else { continue };
        let Ok(value) = reader.decode_item(&item) else { continue };
        let mut leaves = Vec::new();
        value.flatten("", &mut leaves);
        let numeric = leaves.iter().filter(|(_, leaf)| leaf.as_f64().is_some());
        fields.extend(numeric.take(2).map(|(name, _)| format!("{}.{name}", record.name)));
    }
    let names: Vec<&str> = fields.iter().map(String::as_str).collect();
    for one_axis in [false, true] {
        let options = rtloop_tlog::plot::PlotOptions { size: (320, 240), one_axis };
        let _ = rtloop_tlog::plot::plot(&reader, &names, &options, &mut Vec::new());
        let _ = rtloop_tlog::plot::plot(&reader, &names[1..], &options, &mut Vec::new());
    }
}

/// The agent protocol, as a hostile agent or another process of the user can drive it.
///
/// * **Validation** (`rtloop_agent::validate`): the input's first bytes are a command block
///   (zero-padded or cut to its size); every servo slot is validated with the default
///   limits and with the overrides allowed, and whatever is accepted must be finite (NaN
///   only for `position`, meaning hold) and within the limits.
/// * **The refusal record**: a real spine with 1 to 32 servos, armed by a real agent, reads
///   that block; every refusal is noted, and the spine's record ([`rtloop_agent::Refusals`]) must
///   count each one for its servo and keep the first refusal of each cause, as it was.
/// * **A segment that shrinks or grows under the spine** (the input's tail says to what
///   size, and whether it grows back): nothing crashes (the SIGBUS guard takes the faults);
///   a segment left without its magic word is always seen lost, by the spine and the
///   agent; a grown one never is; a lost one is never followed; and the spine still removes
///   its file.
/// * **What the next spine finds** (a file planted under a fresh name: the input's bytes,
///   and, when this runs as root, another user as its owner): the spine either creates its
///   segment (replacing only this user's dead spine's segment or headerless leftover) or
///   refuses in one sentence — another user's file always, naming its owner — and never
///   removes another user's file.
pub fn agent_command(data: &[u8]) {
    use rtloop_agent::layout::{from_bytes, CommandBlock};
    use rtloop_agent::{validate, Limits, ValidCommand};
    let mut bytes = [0u8; size_of::<CommandBlock>()];
    let n = data.len().min(bytes.len());
    bytes[..n].copy_from_slice(&data[..n]);
    let Some(block) = from_bytes::<CommandBlock>(&bytes) else { unreachable!("the buffer is the block's size") };
    let strict = Limits::default();
    let lenient = Limits { allow_overrides: true, ..strict };
    for raw in &block.servos {
        for limits in [&strict, &lenient] {
            let Ok(ValidCommand::Position(p)) = validate(raw, limits) else { continue };
            let fields = p.to_registers();
            for (i, value) in fields.iter().enumerate() {
                let Some(x) = *value else { continue };
                assert!(x.is_finite() || (i == 0 && x.is_nan()), "field {i} accepted as {x}");
                assert!(raw.present & (1 << i) != 0, "field {i} accepted without its present bit");
            }
            let within = |x: Option<f64>, lo: f64, hi: f64| x.is_none_or(|x| x >= lo && x <= hi);
            assert!(p.position.is_none_or(|x| x.is_nan() || (x >= limits.position_min && x <= limits.position_max)));
            assert!(within(p.velocity, -limits.max_velocity, limits.max_velocity));
            assert!(within(p.feedforward_torque, -limits.max_torque, limits.max_torque));
            assert!(within(p.maximum_torque, 0.0, limits.max_torque));
            assert!(within(p.watchdog_timeout, limits.watchdog_min_s, limits.watchdog_max_s));
            if !limits.allow_overrides {
                assert!(p.fixed_voltage_override.is_none() && p.fixed_current_override.is_none());
                assert!(p.ignore_position_bounds.is_none());
            }
        }
    }
    let tail = &data[n..];
    agent_spine_under_fire(&block, tail);
    agent_planted_segment(data);
}

/// A segment name of this process's own, fresh for every call.
fn agent_fuzz_name(tag: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("fuzz{}-{tag}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// The refusal record and a segment resized under a spine: see [`agent_command`]. `tail`:
/// [servos, size (3 bytes, little-endian), grow back].
fn agent_spine_under_fire(block: &rtloop_agent::layout::CommandBlock, tail: &[u8]) {
    use rtloop_agent::layout::{MAX_SERVOS, TOTAL_SIZE};
    use rtloop_agent::{
        Agent, Limits, Poll, RefusalCause, SegmentLoss, ServoCommandError, ServoInfo, Spine, SpineConfig,
    };
    let byte = |i: usize| tail.get(i).copied().unwrap_or(0);
    let count = usize::from(byte(0)) % MAX_SERVOS + 1;
    let servos: Vec<ServoInfo> = (0..count as u32).map(|i| ServoInfo { id: i + 1, bus: 1 }).collect();
    let name = agent_fuzz_name("spine");
    let path = rtloop_agent::segment_path(&name);
    let Ok((mut spine, _)) = Spine::create(&SpineConfig::new(&name, &servos, 1000.0)) else {
        panic!("a spine could not create its segment under a fresh name")
    };
    let Ok(mut agent) = Agent::attach(&name) else { panic!("an agent could not attach to a fresh spine") };
    let _ = agent.read_state();
    agent.rearm_if_needed();
    agent.send();
    assert_eq!(spine.poll_command(1), Poll::Armed);
    // The hostile block, written as a well-behaved writer would (so the spine reads it).
    let command = agent.command_mut();
    command.servos = block.servos;
    agent.send();
    assert_eq!(spine.poll_command(2), Poll::Command);
    let limits = Limits::default();
    let mut firsts: Vec<(ServoCommandError, usize)> = Vec::new();
    let mut per_servo = [0u64; MAX_SERVOS];
    for cycle in 0..2u64 {
        for (i, refused) in per_servo.iter_mut().enumerate().take(count) {
            let Some(Err(e)) = spine.command_for(i, &limits) else { continue };
            spine.note_rejected(i, cycle, &e);
            *refused += 1;
            if !firsts.iter().any(|(f, _)| f.same_cause(&e)) {
                firsts.push((e, i));
            }
        }
    }
    let r = spine.refusals();
    assert_eq!(r.per_servo, per_servo, "refusals per servo");
    assert_eq!(r.per_servo.iter().sum::<u64>(), spine.counters().rejected);
    let kept: Vec<&RefusalCause> = r.causes().collect();
    assert_eq!(kept.len(), firsts.len().min(rtloop_agent::REFUSAL_CAUSES));
    for (cause, (first, servo)) in kept.iter().zip(&firsts) {
        // NaN values compare unequal: compare the sentences, which say the value.
        assert_eq!((cause.first.to_string(), cause.servo), (first.to_string(), *servo));
    }
    assert_eq!(kept.iter().map(|c| c.count).sum::<u64>() + r.other, spine.counters().rejected);

    // The file resized under both sides.
    let size = u64::from(byte(1)) | u64::from(byte(2)) << 8 | u64::from(byte(3)) << 16;
    let size = size % (2 * TOTAL_SIZE as u64 + 1);
    let grow_back = byte(4) & 1 == 1;
    let Ok(file) = std::fs::OpenOptions::new().write(true).open(&path) else { panic!("the segment vanished") };
    let _ = file.set_len(size);
    if grow_back {
        let _ = file.set_len(TOTAL_SIZE as u64);
    }
    spine.publish(3);
    let lost = spine.check_segment();
    let _ = agent.read_state();
    agent.send();
    let agent_lost = agent.segment_lost();
    if size < 8 {
        // The magic word went with the shrink: lost, whether an access faulted (truncated)
        // or not (grown back: replaced).
        assert!(lost.is_some(), "size {size}, grown back {grow_back}: not seen lost");
        if grow_back {
            assert_eq!(lost, Some(SegmentLoss::Replaced), "size {size}: grown back without a fault");
        }
        assert!(agent_lost, "the agent sees a segment without its magic word lost");
    }
    if size >= TOTAL_SIZE as u64 {
        assert_eq!(lost, None, "a segment that grew is not lost");
        assert!(!agent_lost);
    }
    if lost.is_some() {
        assert_eq!(spine.poll_command(4), Poll::SegmentLost);
        assert!(spine.command().is_none(), "a lost segment is never followed");
    }
    drop(agent);
    drop(spine);
    assert!(!path.exists(), "the spine removes its file, whatever became of it");
}

/// A file planted under a fresh name before a spine starts: see [`agent_command`].
fn agent_planted_segment(data: &[u8]) {
    use rtloop_agent::layout::FROZEN_PREFIX;
    use rtloop_agent::{ServoInfo, Spine, SpineConfig, SpineError};
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let name = agent_fuzz_name("planted");
    let path = rtloop_agent::segment_path(&name);
    // The file: the input's first bytes (at most a header's worth), owned by nobody when
    // the input's last byte says so and this process may give files away.
    let len = data.len().min(2 * FROZEN_PREFIX);
    let other_user = rtloop_agent::euid() == 0 && data.last().is_some_and(|b| b & 1 == 1);
    let Ok(mut f) = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) else {
        panic!("cannot plant a file under a fresh name")
    };
    let _ = std::io::Write::write_all(&mut f, &data[..len]);
    drop(f);
    if other_user {
        let _ = std::os::unix::fs::chown(&path, Some(65534), Some(65534));
    }
    let owner = std::fs::metadata(&path).map(|m| m.uid()).unwrap_or(0);
    match Spine::create(&SpineConfig::new(&name, &[ServoInfo { id: 1, bus: 1 }], 100.0)) {
        Ok((spine, _)) => {
            assert_eq!(owner, rtloop_agent::euid(), "a spine replaced another user's file");
            drop(spine);
            assert!(!path.exists());
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n') && msg.contains("; "), "not one sentence: {msg}");
            if owner != rtloop_agent::euid() {
                assert!(matches!(e, SpineError::OtherUser { .. }), "{e:?}");
                assert!(msg.contains(&rtloop_agent::describe_owner(owner)), "{msg}");
            }
            assert!(path.exists(), "a refused file is left alone");
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The simulated pi3hat's register map, as a host (or a broken one) drives it: the input is a
/// sequence of transactions `[processor, address, flags, length, bytes…]` (flags bit 0 =
/// write, bits 1-7 = microseconds to wait first) on a board with a servo on JC1 and JC3 and
/// an IMU. Every transaction takes exactly its SPI time, starts no earlier than the one
/// before ended, and a read returns no more bytes than asked; refusals are counted, never
/// panics.
pub fn pi3hat_board(data: &[u8]) {
    use rtloop_sim::pi3hat::{Pi3hatConfig, SimPi3hat};
    let cfg = Pi3hatConfig::default();
    let mut board = SimPi3hat::new(cfg);
    for (number, id) in [(1u8, 1u8), (3, 2)] {
        let mut bus = rtloop_sim::SimBus::new(rtloop_sim::BusConfig::default());
        bus.add_servo(rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(id)));
        board.attach_bus(number, bus);
    }
    board.attach_imu(rtloop_sim::Imu::new(1));
    let mut now = 0u64;
    let mut last_end = 0u64;
    let mut rest = data;
    let mut out = [0u8; 128];
    while let [processor, address, flags, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len()).min(out.len());
        let (bytes, next) = tail.split_at(n);
        rest = next;
        now += u64::from(flags >> 1) * 1_000;
        let before = board.stats();
        let t = if flags & 1 == 1 {
            board.write(*processor, *address, bytes, now)
        } else {
            out[..n].fill(0xAA);
            board.read(*processor, *address, &mut out[..n], now)
        };
        assert!(t.start_ns >= last_end.max(now), "transaction started before the previous one ended");
        assert_eq!(t.end_ns - t.start_ns, cfg.transaction_ns(n), "a transaction took other than its SPI time");
        let after = board.stats();
        let refused = after.unknown_register + after.wrong_direction + after.malformed + after.tx_overflow;
        let refused_before = before.unknown_register + before.wrong_direction + before.malformed + before.tx_overflow;
        assert_eq!(t.result.is_err(), refused > refused_before, "a refusal not counted (or counted twice)");
        if t.result.is_err() && flags & 1 == 0 {
            assert!(out[..n].iter().all(|&b| b == 0), "a refused read returned data");
        }
        last_end = t.end_ns;
        now = t.end_ns;
    }
}

/// The host side of the pi3hat (`io::pi3hat::Pi3hat`) against a board that answers every
/// read with bytes from the input: bring-up (versions, configuration read back), frames sent
/// and received on every bus, the attitude and the error status. Whatever the board says,
/// nothing panics, a received frame is a valid CAN frame filed under a bus 1-5, and an
/// attitude is only reported when the present bit was set.
pub fn pi3hat_host(data: &[u8]) {
    use rtloop_io::pi3hat::{Pi3hat, Pi3hatOptions};
    use rtloop_io::spi::{ChipSelect, Pi3hatSpi, SpiError, SpiTiming};

    struct ScriptedBoard {
        answers: Vec<u8>,
        at: usize,
    }
    impl Pi3hatSpi for ScriptedBoard {
        fn name(&self) -> &str {
            "fuzz"
        }
        fn read(&mut self, _cs: ChipSelect, _address: u8, out: &mut [u8]) -> Result<(), SpiError> {
            let left = &self.answers[self.at..];
            let n = out.len().min(left.len());
            out.fill(0);
            out[..n].copy_from_slice(&left[..n]);
            self.at += n;
            if self.at == self.answers.len() && n < out.len() {
                return Err(SpiError::Os(5));
            }
            Ok(())
        }
        fn write(&mut self, _cs: ChipSelect, _address: u8, _data: &[u8]) -> Result<(), SpiError> {
            Ok(())
        }
        fn timing(&self) -> SpiTiming {
            SpiTiming::default()
        }
    }

    // The first bytes pick what to bring up; the rest is what the board answers.
    let Some((&pick, answers)) = data.split_first() else { return };
    let buses: Vec<u8> = (1..=5u8).filter(|b| pick & (1 << (b - 1)) != 0).collect();
    let options =
        Pi3hatOptions { attitude: pick & 0x20 != 0, wait_for_attitude: pick & 0x40 != 0, ..Default::default() };
    let spi = Box::new(ScriptedBoard { answers: answers.to_vec(), at: 0 });
    let Ok(mut hat) = Pi3hat::open(spi, &buses, options) else { return };
    let frame = CanFdFrame::new(0x8001, &[0x11, 0x00]).unwrap_or_default();
    for round in 0..64u64 {
        for &b in &buses {
            let _ = hat.send(b, &frame);
            while let Ok(Some(f)) = hat.recv(b, round) {
                assert!(f.len as usize <= f.data.len() && f.id <= 0x1FFF_FFFF, "an impossible frame: {f:?}");
            }
        }
        let mut imu = Default::default();
        if let Ok(true) = hat.read_attitude(&mut imu) {
            let _ = imu;
        }
        for b in 1..=5u8 {
            let _ = hat.error_status(b);
            let _ = hat.can_config(b);
        }
        let _ = hat.processor_info(1 + (round % 3) as u8);
    }
}

/// The Foxglove server (`rtloop run --foxglove`, `rtloop log serve`) as a hostile client
/// drives it, over a real loopback connection: byte 0 picks the subprotocol offer (none, the
/// old name, the new one, a near miss); the rest is a sequence of client frames `[flags,
/// len_lo, len_hi, payload…]` (flags: bits 0-3 the opcode, bit 4 not final, bit 5 unmasked,
/// bit 6 a length header claiming more than the server's message limit, bit 7 cut the
/// connection here). Whatever was sent, the server stays up (a second, well-behaved client
/// gets its `serverInfo`), `finish` returns, every connected client is counted gone, and
/// `refused` is never below the refusals counted in `detail`.
pub fn foxglove_client(data: &[u8]) {
    use rtloop::live::foxglove::{server::CLIENT_MESSAGE_MAX, FoxgloveSink, ServeOptions};
    use rtloop::live::{LiveRobot, LiveSink};
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    let Some((&offer, mut rest)) = data.split_first() else { return };
    let mut sink = FoxgloveSink::bind("127.0.0.1:0".parse().expect("an address"), ServeOptions::default())
        .expect("a loopback port");
    sink.start(&LiveRobot {
        name: "fuzz".into(),
        rate_hz: 1000.0,
        servos: vec![(1, 1), (1, 2)],
        imu: true,
        model: None,
    });
    let addr = sink.addr();
    let handshake = |offer: &str| {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_millis(200))).expect("a timeout");
        s.set_write_timeout(Some(Duration::from_secs(2))).expect("a timeout");
        let protocol = if offer.is_empty() { String::new() } else { format!("Sec-WebSocket-Protocol: {offer}\r\n") };
        let request = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{protocol}\r\n"
        );
        let _ = s.write_all(request.as_bytes());
        s
    };
    let offers = ["", "foxglove.websocket.v1", "foxglove.sdk.v1", "foxglove.sdk.v1.1"];
    let mut s = handshake(offers[usize::from(offer) % offers.len()]);
    // Frames, bounded by the input.
    let mut frames = 0;
    while rest.len() >= 3 && frames < 64 {
        let (flags, len) = (rest[0], usize::from(u16::from_le_bytes([rest[1], rest[2]])));
        let payload = &rest[3..3 + len.min(rest.len() - 3)];
        rest = &rest[3 + payload.len()..];
        frames += 1;
        if flags & 0x80 != 0 {
            break;
        }
        let mut f = vec![if flags & 0x10 != 0 { flags & 0x0f } else { 0x80 | (flags & 0x0f) }];
        let masked = flags & 0x20 == 0;
        let claimed =
            if flags & 0x40 != 0 { CLIENT_MESSAGE_MAX as u64 + 1 + payload.len() as u64 } else { payload.len() as u64 };
        let mask_bit = if masked { 0x80 } else { 0 };
        if claimed < 126 {
            f.push(mask_bit | claimed as u8);
        } else if claimed <= 0xffff {
            f.push(mask_bit | 126);
            f.extend_from_slice(&(claimed as u16).to_be_bytes());
        } else {
            f.push(mask_bit | 127);
            f.extend_from_slice(&claimed.to_be_bytes());
        }
        let key = [0x37, 0xfa, 0x21, 0x3d];
        if masked {
            f.extend_from_slice(&key);
        }
        f.extend(payload.iter().enumerate().map(|(i, b)| if masked { b ^ key[i % 4] } else { *b }));
        if s.write_all(&f).is_err() {
            break;
        }
    }
    // Read what the server says until it closes or is quiet.
    let mut buf = [0u8; 4096];
    for _ in 0..64 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    // A well-behaved client is still served.
    let mut good = handshake("foxglove.sdk.v1");
    good.set_read_timeout(Some(Duration::from_secs(10))).expect("a timeout");
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains("serverInfo") {
        match good.read(&mut buf) {
            Ok(0) | Err(_) => panic!("the server stopped serving: {}", String::from_utf8_lossy(&got)),
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    assert!(got.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&got));
    sink.finish();
    let stats = sink.stats();
    let d = |k: &str| stats.detail.get(k).copied().unwrap_or(0);
    assert_eq!(d("clients_connected"), d("clients_disconnected"), "{stats:?}");
    let counted: u64 = [
        "refused_malformed",
        "refused_unknown_channel",
        "refused_unsupported",
        "refused_too_large",
        "refused_other",
        "receive_errors",
        "handshakes_refused",
        "handshakes_timed_out",
    ]
    .iter()
    .map(|k| d(k))
    .sum();
    assert!(stats.refused >= counted, "{stats:?}");
    assert_eq!(stats.errors, 0, "{stats:?}");
}
