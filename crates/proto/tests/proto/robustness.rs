//! Property tests: no byte string makes the parser, the reply decoder or the servo panic,
//! and what they produce stays well-formed (the iterator stops after an error, a reply
//! always re-parses, `end_of_frame` runs exactly once).

use proptest::prelude::*;
use rtloop_proto::host::{decode_reply, ServoState};
use rtloop_proto::register::class_of;
use rtloop_proto::servo::{serve, RegisterServer};
use rtloop_proto::subframe::{subframes, DecodeError, Subframe};
use rtloop_proto::varuint;
use rtloop_proto::{FrameWriter, Resolution, Value};

/// Payloads that look like protocol: valid opcodes followed by plausible (and
/// implausible) varuints and value bytes.
fn biased_payload() -> impl Strategy<Value = Vec<u8>> {
    let opcode =
        prop_oneof![0x00u8..=0x2F, Just(0x30u8), Just(0x31u8), 0x40u8..=0x44, Just(0x50u8), proptest::num::u8::ANY,];
    let varuint = prop_oneof![0u8..=0x7F, Just(0x00u8), Just(0x80u8), Just(0xFFu8), proptest::num::u8::ANY,];
    let token =
        (opcode, proptest::collection::vec(varuint, 0..4), proptest::collection::vec(proptest::num::u8::ANY, 0..6))
            .prop_map(|(op, v, bytes)| {
                let mut t = vec![op];
                t.extend(v);
                t.extend(bytes);
                t
            });
    proptest::collection::vec(token, 0..12).prop_map(|tokens| {
        let mut p: Vec<u8> = tokens.concat();
        p.truncate(64);
        p
    })
}

fn any_payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![proptest::collection::vec(proptest::num::u8::ANY, 0..=64), biased_payload()]
}

/// A server that accepts or refuses by a rule derived from the register and answers at
/// a resolution that is sometimes not the one asked for.
#[derive(Default)]
struct ChaosServer {
    end_of_frame_calls: usize,
    writes: usize,
    reads: usize,
}

impl RegisterServer for ChaosServer {
    fn write(&mut self, reg: u16, _value: Value) -> Result<(), u32> {
        self.writes += 1;
        if reg.is_multiple_of(3) {
            Err(u32::from(reg) * 65_537)
        } else {
            Ok(())
        }
    }
    fn read(&mut self, reg: u16, res: Resolution) -> Result<Value, u32> {
        self.reads += 1;
        match reg % 5 {
            0 => Err(1),
            1 => Ok(Value::F32(f32::from(reg))),
            _ => Ok(Value::encode(f64::from(reg) * 0.37, class_of(reg), res)),
        }
    }
    fn end_of_frame(&mut self) {
        self.end_of_frame_calls += 1;
    }
}

fn check_parse(payload: &[u8]) {
    let mut it = subframes(payload);
    let mut last_offset = 0;
    while let Some(item) = it.next() {
        assert!(it.offset() > last_offset || item.is_err());
        last_offset = it.offset();
        match item {
            Err(_) => {
                assert!(it.next().is_none(), "the iterator must stop after an error");
                break;
            }
            Ok(Subframe::Write { start, count, values, .. } | Subframe::Reply { start, count, values, .. }) => {
                assert!(count >= 1);
                assert_eq!(values.len(), usize::from(count));
                assert!(u32::from(start) + u32::from(count) - 1 <= 0xFFFF);
                assert_eq!(values.iter().count(), values.len());
                assert!(values.get(values.len()).is_none());
            }
            Ok(Subframe::Read { start, count, .. }) => {
                assert!(count >= 1);
                assert!(u32::from(start) + u32::from(count) - 1 <= 0xFFFF);
            }
            Ok(_) => {}
        }
    }
    assert!(it.next().is_none());
}

fn check_serve(payload: &[u8]) {
    let mut server = ChaosServer::default();
    let mut buf = [0u8; 64];
    let mut reply = FrameWriter::new(&mut buf);
    let result = serve(payload, &mut server, &mut reply);
    assert_eq!(server.end_of_frame_calls, 1);
    assert!(reply.len() <= 64);
    // Reads are bounded even for a count of 65535: the reply fills up first.
    assert!(server.reads <= 64 * 3, "{} reads", server.reads);
    let parse_error = subframes(payload).find_map(Result::err);
    match result {
        Ok(n) => {
            assert_eq!(n, reply.len());
            assert!(parse_error.is_none());
        }
        Err(DecodeError::ReplyTooLong { .. }) => assert!(parse_error.is_none()),
        Err(e) => assert_eq!(Some(e), parse_error),
    }
    // Whatever the request, the reply is well-formed and decodes.
    for s in subframes(reply.as_slice()) {
        assert!(
            matches!(
                s,
                Ok(Subframe::Reply { .. }
                    | Subframe::WriteError { .. }
                    | Subframe::ReadError { .. }
                    | Subframe::Stream { opcode: 0x41, .. }
                    | Subframe::FlowData { .. })
            ),
            "{s:?}"
        );
    }
    let mut state = ServoState::default();
    decode_reply(reply.as_slice(), &mut state).unwrap();
}

proptest! {
    #[test]
    fn parser_never_panics(payload in any_payload()) {
        check_parse(&payload);
    }

    #[test]
    fn parser_never_panics_on_long_input(payload in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
        check_parse(&payload);
        let mut state = ServoState::default();
        let _ = decode_reply(&payload, &mut state);
    }

    #[test]
    fn decode_reply_never_panics(payload in any_payload()) {
        let mut state = ServoState::default();
        let result = decode_reply(&payload, &mut state);
        prop_assert_eq!(result.err(), subframes(&payload).find_map(Result::err));
        prop_assert!(usize::from(state.extra_len) <= state.extra.len());
        for &(r, _) in state.extras() {
            prop_assert!(rtloop_proto::register::name_of(r).is_none() || r > 0x00F);
        }
        // Error messages render without panicking.
        if let Err(e) = result {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn serve_never_panics(payload in any_payload()) {
        check_serve(&payload);
    }

    #[test]
    fn varuint_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..8)) {
        if let Ok((v, n)) = varuint::decode(&bytes) {
            prop_assert!((1..=5).contains(&n));
            let (enc, len) = varuint::encode(v);
            // Canonical input re-encodes identically; padded input (0x80 0x00) is longer.
            prop_assert!(len <= n);
            prop_assert_eq!(varuint::decode(&enc[..len]), Ok((v, len)));
        }
    }
}

#[test]
fn huge_read_counts_are_bounded() {
    // Read 65535 int8 registers from 0: the reply fills after a bounded number of reads.
    let payload = [0x10, 0xFF, 0xFF, 0x03, 0x00];
    check_parse(&payload);
    check_serve(&payload);
    let mut server = ChaosServer::default();
    let mut buf = [0u8; 64];
    let mut reply = FrameWriter::new(&mut buf);
    assert!(matches!(serve(&payload, &mut server, &mut reply), Err(DecodeError::ReplyTooLong { offset: 0 })));
}

#[test]
fn too_many_extras_are_counted_not_stored() {
    // 40 unknown int8 registers in one reply subframe.
    let mut payload = vec![0x20, 40, 0x80, 0x02];
    payload.extend((0..40).map(|i| i as u8));
    let mut state = ServoState::default();
    decode_reply(&payload, &mut state).unwrap();
    assert_eq!(usize::from(state.extra_len), state.extra.len());
    assert_eq!(usize::from(state.extra_dropped), 40 - state.extra.len());
    assert_eq!(state.get(0x100), Some(0.0));
    assert_eq!(state.get(0x10F), Some(15.0));
    assert_eq!(state.get(0x110), None);
}

#[test]
fn writes_before_a_malformed_subframe_stay_applied() {
    // Write register 1 (accepted), then garbage.
    let payload = [0x01, 0x01, 0x05, 0x60];
    let mut server = ChaosServer::default();
    let mut buf = [0u8; 64];
    let mut reply = FrameWriter::new(&mut buf);
    let r = serve(&payload, &mut server, &mut reply);
    assert_eq!(r, Err(DecodeError::UnknownOpcode { offset: 3, opcode: 0x60 }));
    assert_eq!(server.writes, 1);
    assert_eq!(server.end_of_frame_calls, 1);
}
