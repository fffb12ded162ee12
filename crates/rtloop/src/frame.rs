//! One moteus frame: build it exactly as the moteus Python package would send it
//! ([`encode`]), or take any payload apart into subframes and registers as JSON ([`decode`]).
//!
//! Who it is for: the `rtloop frame` command (and the hex of `rtloop can` and `rtloop
//! servo`), the Python package's `rtloop.frame` and the fuzzing crate — not a control law,
//! whose frames the run's cycle encodes and decodes. It is in the library because those three
//! share it and none of them sits below another; it cannot go lower, into `rtloop-proto`
//! (`no_std`, no allocation: this module builds JSON and strings).
//!
//! Must never panic on user input: bad hex, odd lengths, over-long payloads and malformed
//! subframes all come back as one clear error message.
//!
//! Integer registers (mode, fault, home state, trajectory complete, the identity registers:
//! `rtloop_proto::register::integer_range`) are shown as the moteus firmware and clients read
//! them: a float is truncated toward zero. A value such a register cannot hold (NaN, ±inf,
//! mode 300, mode -7.246) is shown as `null` and listed under `"invalid"` with what was
//! received, exactly as `rtloop_proto::host::decode_reply` leaves it absent and counts it.

use rtloop_proto::frame::ArbitrationId;
use rtloop_proto::host::{self, read_int_register, IntReading, PositionCommand, PositionResolution, QueryFormat};
use rtloop_proto::register::{class_of, integer_range, name_of};
use rtloop_proto::subframe::{subframes, Subframe};
use rtloop_proto::{FrameWriter, Resolution, ScaleClass, Value};
use serde_json::{json, Map, Value as Json};

/// Which command to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandKind {
    /// Mode 10 with the given position-mode registers.
    Position,
    /// Only the default query.
    Query,
    /// Mode 0.
    Stop,
    /// Mode 12.
    ZeroVelocity,
}

/// Everything `rtloop frame encode` accepts.
#[derive(Debug, Clone, Default)]
pub struct EncodeRequest {
    /// Servo id.
    pub id: u8,
    /// Position-mode registers (only with `Position`).
    pub command: PositionCommand,
    /// Append the default query and set the reply bit.
    pub query: bool,
    /// Resolution of the command's registers (default: float, as the Python package).
    pub resolution: Option<Resolution>,
}

/// What is wrong with a frame request or a payload: `Display` is the one sentence `rtloop
/// frame` and the Python package's `rtloop.frame` print.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FrameError {
    /// The id is not a servo id (1-127).
    NotAServoId(u8),
    /// Register values were given to a command that is not `position`.
    RegistersWithoutPosition,
    /// A resolution was given to a command that is not `position`.
    ResolutionWithoutPosition,
    /// A register value cannot be encoded (out of range, NaN where it means nothing).
    Register(String),
    /// The command does not fit in a frame.
    Encode(rtloop_proto::EncodeError),
    /// No hex digits at all.
    NoHexDigits,
    /// A character that is not a hex digit.
    NotHex(char),
    /// An odd number of hex digits.
    OddDigits(usize),
    /// More bytes than a CAN-FD frame carries (64).
    TooLong(usize),
    /// The payload does not parse as subframes.
    Malformed(rtloop_proto::DecodeError),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::NotAServoId(id) => write!(f, "--id {id} is not a servo id: give a number from 1 to 127"),
            FrameError::RegistersWithoutPosition => {
                f.write_str("register flags (--position, --velocity, …) only apply to `position`")
            }
            FrameError::ResolutionWithoutPosition => {
                f.write_str("--resolution applies to the registers of a `position` command only")
            }
            FrameError::Register(s) => f.write_str(s),
            FrameError::Encode(e) => write!(f, "cannot encode that command: {e}"),
            FrameError::NoHexDigits => f.write_str("no hex digits given: pass the payload as hex, e.g. 11001f01130d"),
            FrameError::NotHex(c) => write!(f, "'{c}' is not a hex digit: pass the payload as hex, e.g. 11001f01130d"),
            FrameError::OddDigits(n) => write!(f, "{n} hex digits is an odd count: every byte needs two digits"),
            FrameError::TooLong(n) => write!(f, "{n} bytes is more than the 64 a CAN-FD frame can carry"),
            FrameError::Malformed(e) => write!(f, "malformed frame: {e}"),
        }
    }
}

impl std::error::Error for FrameError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FrameError::Encode(e) => Some(e),
            FrameError::Malformed(e) => Some(e),
            _ => None,
        }
    }
}

fn position_fields_set(c: &PositionCommand) -> bool {
    *c != PositionCommand::default()
}

/// Build `HEXID HEXDATA` (unpadded), or say what is wrong with the request.
pub fn encode(kind: CommandKind, req: &EncodeRequest) -> Result<String, FrameError> {
    if req.id == 0 || req.id > 127 {
        return Err(FrameError::NotAServoId(req.id));
    }
    if kind != CommandKind::Position && position_fields_set(&req.command) {
        return Err(FrameError::RegistersWithoutPosition);
    }
    if kind != CommandKind::Position && req.resolution.is_some() {
        return Err(FrameError::ResolutionWithoutPosition);
    }
    if kind == CommandKind::Position {
        crate::numbers::check_position_registers(&req.command, crate::numbers::Watchdog::AnyEncodable)
            .map_err(|e| FrameError::Register(e.to_string()))?;
    }
    let query = QueryFormat::default();
    let want_reply = req.query || kind == CommandKind::Query;
    let q = want_reply.then_some(&query);
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    let res = req.resolution.map(PositionResolution::all).unwrap_or_default();
    let r = match kind {
        CommandKind::Position => host::encode_position(&mut w, &req.command, &res, q),
        CommandKind::Query => host::encode_query(&mut w, &query),
        CommandKind::Stop => host::encode_stop(&mut w, q),
        CommandKind::ZeroVelocity => host::encode_zero_velocity(&mut w, q),
    };
    r.map_err(FrameError::Encode)?;
    let id = ArbitrationId { prefix: 0, source: 0, destination: req.id, reply_required: want_reply }.build();
    Ok(format!("{:04x} {}", id, hex(w.as_slice())))
}

/// Lowercase hex of `bytes`, two digits each (the inverse of [`parse_hex`]).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parse user hex: optional `0x`, spaces, colons or dashes between bytes are allowed.
pub fn parse_hex(text: &str) -> Result<Vec<u8>, FrameError> {
    let t = text.trim();
    let t = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")).unwrap_or(t);
    let digits: Vec<char> = t.chars().filter(|c| !matches!(c, ' ' | ':' | '-' | '_')).collect();
    if digits.is_empty() {
        return Err(FrameError::NoHexDigits);
    }
    if let Some(bad) = digits.iter().find(|c| !c.is_ascii_hexdigit()) {
        return Err(FrameError::NotHex(*bad));
    }
    if !digits.len().is_multiple_of(2) {
        return Err(FrameError::OddDigits(digits.len()));
    }
    if digits.len() / 2 > 64 {
        return Err(FrameError::TooLong(digits.len() / 2));
    }
    Ok(digits
        .chunks(2)
        .map(|p| {
            let s: String = p.iter().collect();
            u8::from_str_radix(&s, 16).unwrap_or(0)
        })
        .collect())
}

fn reg_key(r: u32) -> String {
    format!("0x{r:03x}")
}

/// What was received, for the `"invalid"` list: the number, or its name when JSON has none.
fn received_json(v: Value) -> Json {
    match v {
        Value::F32(f) if f.is_nan() => json!("NaN"),
        Value::F32(f) if f.is_infinite() => json!(if f > 0.0 { "inf" } else { "-inf" }),
        Value::F32(f) => json!(f64::from(f)),
        Value::I8(i) => json!(i),
        Value::I16(i) => json!(i),
        Value::I32(i) => json!(i),
    }
}

/// A register value for JSON: integer registers as integers (floats truncated toward zero,
/// as moteus reads them), the "unset" minimum and NaN as null. A value an integer register
/// cannot hold is null too, and is described in `invalid`.
fn value_json(reg: u16, v: Value, invalid: &mut Vec<Json>) -> Json {
    if let Some((lo, hi)) = integer_range(reg) {
        return match read_int_register(reg, v) {
            IntReading::Int(i) => json!(i),
            IntReading::Unset => Json::Null,
            IntReading::Invalid => {
                let name = name_of(reg).unwrap_or("unknown");
                invalid.push(json!({
                    "register": reg_key(reg as u32),
                    "name": name,
                    "received": received_json(v),
                    "reason": format!("{name} holds integers from {lo} to {hi}"),
                }));
                Json::Null
            }
        };
    }
    let class = class_of(reg);
    if class == ScaleClass::Int {
        // A register this map does not name: show integers as integers, anything else as sent.
        if let Some(i) = v.as_i32() {
            return json!(i);
        }
    }
    let x = v.decode(class);
    if x.is_finite() {
        json!(x)
    } else {
        Json::Null
    }
}

/// Take a payload apart: `{"subframes": [...], "registers": {"0x001": 0.5, ...}}`, plus
/// `"invalid": [...]` when an integer register carried a value it cannot hold.
pub fn decode(text: &str) -> Result<Json, FrameError> {
    let bytes = parse_hex(text)?;
    let mut subs = Vec::new();
    let mut regs = Map::new();
    let mut invalid = Vec::new();
    for item in subframes(&bytes) {
        let sf = item.map_err(FrameError::Malformed)?;
        let entry = match sf {
            Subframe::Write { start, res, count, values } | Subframe::Reply { start, res, count, values } => {
                let kind = if matches!(sf, Subframe::Write { .. }) { "write" } else { "reply" };
                let mut vals = Vec::new();
                for (k, v) in values.iter().enumerate() {
                    let reg = start.saturating_add(k as u16);
                    let j = value_json(reg, v, &mut invalid);
                    regs.insert(reg_key(reg as u32), j.clone());
                    vals.push(j);
                }
                let names: Vec<Json> =
                    (0..count).map(|k| json!(name_of(start.saturating_add(k)).unwrap_or("unknown"))).collect();
                json!({"kind": kind, "type": res.name(), "start": reg_key(start as u32), "count": count,
                       "names": names, "values": vals})
            }
            Subframe::Read { start, res, count } => {
                let names: Vec<Json> =
                    (0..count).map(|k| json!(name_of(start.saturating_add(k)).unwrap_or("unknown"))).collect();
                json!({"kind": "read", "type": res.name(), "start": reg_key(start as u32), "count": count,
                       "names": names})
            }
            Subframe::WriteError { register, code } => {
                json!({"kind": "write_error", "start": reg_key(register as u32), "code": code})
            }
            Subframe::ReadError { register, code } => {
                json!({"kind": "read_error", "start": reg_key(register as u32), "code": code})
            }
            Subframe::Stream { opcode, channel, data } => {
                json!({"kind": "stream", "opcode": format!("0x{opcode:02x}"), "channel": channel, "data": hex(data)})
            }
            Subframe::Poll { channel, max_len } => {
                json!({"kind": "poll", "opcode": "0x42", "channel": channel, "max_len": max_len})
            }
            Subframe::FlowData { channel, packet, data } => {
                json!({"kind": "stream", "opcode": "0x43", "channel": channel, "packet": packet, "data": hex(data)})
            }
            Subframe::FlowPoll { channel, ack, max_len } => {
                json!({"kind": "poll", "opcode": "0x44", "channel": channel, "ack": ack, "max_len": max_len})
            }
            Subframe::Nop => continue,
        };
        subs.push(entry);
    }
    let mut out = json!({"subframes": subs, "registers": Json::Object(regs)});
    if !invalid.is_empty() {
        out["invalid"] = Json::Array(invalid);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_vectors() {
        let pos = EncodeRequest {
            id: 1,
            command: PositionCommand { position: Some(0.5), velocity: Some(0.0), ..Default::default() },
            query: true,
            resolution: None,
        };
        assert_eq!(encode(CommandKind::Position, &pos).unwrap(), "8001 01000a0e200000003f0000000011001f01130d");
        let q = EncodeRequest { id: 1, ..Default::default() };
        assert_eq!(encode(CommandKind::Query, &q).unwrap(), "8001 11001f01130d");
        assert_eq!(encode(CommandKind::Stop, &q).unwrap(), "0001 010000");
        let sq = EncodeRequest { id: 1, query: true, ..Default::default() };
        assert_eq!(encode(CommandKind::Stop, &sq).unwrap(), "8001 01000011001f01130d");
    }

    #[test]
    fn decode_reply_vector() {
        let j = decode("2404000A00881300000000230D301900").unwrap();
        let r = &j["registers"];
        assert_eq!(r["0x000"], json!(10));
        assert_eq!(r["0x001"], json!(0.5));
        assert_eq!(r["0x00d"], json!(24.0));
        assert_eq!(r["0x00e"], json!(25.0));
        assert_eq!(r["0x00f"], json!(0));
        assert_eq!(j["subframes"].as_array().unwrap().len(), 2);
        assert_eq!(j["subframes"][0]["type"], json!("int16"));
    }

    /// A reply subframe of `regs` floats starting at `start`, as hex.
    fn float_reply(start: u8, regs: &[f32]) -> String {
        let mut bytes = vec![0x2c + regs.len() as u8, start];
        for r in regs {
            bytes.extend_from_slice(&r.to_le_bytes());
        }
        hex(&bytes)
    }

    #[test]
    fn integer_registers_sent_as_floats_are_truncated_like_moteus() {
        // mode, position, velocity as floats; then fault as a float.
        let text = float_reply(0x00, &[10.7, 0.25, -1.5]) + &float_reply(0x0f, &[38.9]);
        let j = decode(&text).unwrap();
        assert_eq!(j["registers"]["0x000"], json!(10));
        assert_eq!(j["registers"]["0x001"], json!(0.25));
        assert_eq!(j["registers"]["0x00f"], json!(38));
        assert_eq!(j["subframes"][0]["values"][0], json!(10));
        assert!(j.get("invalid").is_none(), "{j}");
        // Home state, trajectory complete and the identity registers too.
        let j = decode(&(float_reply(0x0b, &[1.9, 2.5]) + &float_reply(0x00, &[-0.5]))).unwrap();
        assert_eq!(j["registers"]["0x00b"], json!(1));
        assert_eq!(j["registers"]["0x00c"], json!(2));
        assert_eq!(j["registers"]["0x000"], json!(0));
        let mut b = vec![0x2d, 0x80, 0x02];
        b.extend_from_slice(&4.75f32.to_le_bytes());
        assert_eq!(decode(&hex(&b)).unwrap()["registers"]["0x100"], json!(4));
    }

    #[test]
    fn integer_registers_out_of_range_are_null_and_listed_never_wrapped() {
        let j = decode(&float_reply(0x00, &[-7.246])).unwrap();
        assert_eq!(j["registers"]["0x000"], Json::Null, "{j}");
        assert_eq!(j["invalid"][0]["register"], json!("0x000"), "{j}");
        assert_eq!(j["invalid"][0]["received"].as_f64().unwrap() as f32, -7.246f32);
        assert!(j["invalid"][0]["reason"].as_str().unwrap().contains("0 to 255"), "{j}");
        for (value, shown) in [(300.0, json!(300.0)), (f32::NAN, json!("NaN")), (f32::INFINITY, json!("inf"))] {
            let j = decode(&float_reply(0x0f, &[value])).unwrap();
            assert_eq!(j["registers"]["0x00f"], Json::Null, "{j}");
            assert_eq!(j["invalid"][0]["received"], shown, "{j}");
        }
        // An int8 -7 in the mode register does not fit either; the unset -128 is just null.
        let j = decode("2100f9").unwrap();
        assert_eq!(j["registers"]["0x000"], Json::Null);
        assert_eq!(j["invalid"][0]["received"], json!(-7));
        let j = decode("210080").unwrap();
        assert_eq!(j["registers"]["0x000"], Json::Null);
        assert!(j.get("invalid").is_none(), "{j}");
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        for bad in ["", "zz", "123", "0x", &"00".repeat(65), "2404", "1f", "ff"] {
            assert!(decode(bad).is_err(), "{bad:?} should fail");
        }
        let bad_id = EncodeRequest { id: 200, ..Default::default() };
        assert!(encode(CommandKind::Query, &bad_id).is_err());
    }
}
