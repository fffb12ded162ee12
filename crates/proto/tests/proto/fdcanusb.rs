//! The fdcanusb line codec against the spec vectors (moteus-protocol.md §6, §7), the official
//! `moteus-protocol` codec as an oracle, and arbitrary input.

use crate::common;

use proptest::prelude::*;
use rtloop_proto::fdcanusb::{
    crc8, parse_line, split_crc, write_can_send, write_err, write_ok, write_rcv, Line, LineError, ParsedLine, MAX_LINE,
};
use rtloop_proto::frame::{CanFdFrame, FrameFlags};

use moteus_protocol::fdcanusb as oracle;

/// The make_position(position=0.5, velocity=0.0, query=True) payload of §7, padded to 20.
const POSITION_PAYLOAD: [u8; 20] = [
    0x01, 0x00, 0x0a, 0x0e, 0x20, 0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x11, 0x00, 0x1f, 0x01, 0x13, 0x0d,
    0x50,
];

fn write_str(f: impl FnOnce(&mut [u8]) -> Result<usize, LineError>) -> String {
    let mut buf = [0u8; MAX_LINE];
    let n = f(&mut buf).expect("line fits");
    String::from_utf8(buf[..n].to_vec()).expect("ascii")
}

fn parsed(line: &[u8]) -> ParsedLine<'_> {
    parse_line(line).unwrap_or_else(|e| panic!("{:?}: {e:?}", String::from_utf8_lossy(line)))
}

fn frame(id: u32, data: &[u8], flags: FrameFlags) -> CanFdFrame {
    let mut f = CanFdFrame::new(id, data).unwrap();
    f.flags = flags;
    f
}

#[test]
fn spec_can_send_vector() {
    let f = CanFdFrame::new(0x8001, &POSITION_PAYLOAD).unwrap();
    assert!(f.flags.fd && f.flags.brs);
    assert_eq!(
        write_str(|b| write_can_send(&f, false, b)),
        "can send 8001 01000A0E200000003F0000000011001F01130D50 BF\n"
    );

    // The 19-byte payload padded by the frame layer gives the same line.
    let mut unpadded = CanFdFrame::new(0x8001, &POSITION_PAYLOAD[..19]).unwrap();
    unpadded.pad_to_dlc();
    assert_eq!(write_str(|b| write_can_send(&unpadded, false, b)), write_str(|b| write_can_send(&f, false, b)));

    // And a device reads it back as the same frame.
    let p = parsed(b"can send 8001 01000A0E200000003F0000000011001F01130D50 BF\n");
    assert!(!p.had_crc);
    let Line::CanSend(got) = p.line else { panic!("{p:?}") };
    assert_eq!(got, f);
}

#[test]
fn spec_rcv_vector() {
    let p = parsed(b"rcv 100 2404000A00881300000000230D301900 E B F");
    assert!(!p.had_crc);
    let Line::Rcv(f) = p.line else { panic!("{p:?}") };
    assert_eq!(f.id, 0x100);
    assert_eq!(
        f.payload(),
        &[0x24, 0x04, 0x00, 0x0A, 0x00, 0x88, 0x13, 0x00, 0x00, 0x00, 0x00, 0x23, 0x0D, 0x30, 0x19, 0x00]
    );
    assert_eq!(f.flags, FrameFlags { extended: true, fd: true, brs: true, remote: false });

    assert_eq!(write_str(|b| write_rcv(&f, false, b)), "rcv 0100 2404000A00881300000000230D301900 E B F\n");
}

#[test]
fn crc_known_values() {
    assert_eq!(crc8(b""), 0x00);
    assert_eq!(crc8(b"OK "), 0xBD);
    assert_eq!(crc8(b"can send 0001 20 "), 0xAE);
    assert_eq!(crc8(b"rcv 0502 1234 "), 0x3C);
    assert_eq!(crc8(b"rcv 00000100 230b0a00 "), 0xD2);
}

#[test]
fn crc_suffix_lines() {
    assert!(parsed(b"rcv 0502 1234 *3C\r\n").had_crc);
    // Either case of hex digits is accepted.
    let p = parsed(b"rcv 00000100 230b0a00 *d2");
    assert!(p.had_crc);
    let Line::Rcv(f) = p.line else { panic!() };
    assert_eq!((f.id, f.payload()), (0x100, &[0x23, 0x0b, 0x0a, 0x00][..]));
    assert!(!f.flags.extended, "no E flag and a short id: standard");

    let p = parsed(b"can send 0001 20 *AE");
    assert!(p.had_crc);
    let Line::CanSend(f) = p.line else { panic!() };
    assert_eq!((f.id, f.payload()), (1, &[0x20][..]));
    assert_eq!(f.flags, FrameFlags { extended: false, fd: true, brs: true, remote: false });

    assert_eq!(split_crc(b"OK *BD"), Ok((&b"OK"[..], true)));
    assert_eq!(split_crc(b"OK"), Ok((&b"OK"[..], false)));
    // Not a suffix: not two hex digits, or not at the end.
    assert_eq!(split_crc(b"ERR bad *ZZ"), Ok((&b"ERR bad *ZZ"[..], false)));
    assert_eq!(split_crc(b"rcv 0001 2a *1"), Ok((&b"rcv 0001 2a *1"[..], false)));
}

#[test]
fn wrong_crc_is_rejected() {
    assert_eq!(parse_line(b"OK *FF"), Err(LineError::BadCrc { expected: 0xBD, found: 0xFF }));
    assert_eq!(parse_line(b"rcv 0502 1234 *3D\n"), Err(LineError::BadCrc { expected: 0x3C, found: 0x3D }));
    // One corrupted character in an otherwise valid line.
    assert!(matches!(parse_line(b"rcv 0502 1235 *3C"), Err(LineError::BadCrc { .. })));
}

#[test]
fn ok_and_err_with_and_without_crc() {
    assert_eq!(write_str(|b| write_ok(false, b)), "OK\n");
    assert_eq!(write_str(|b| write_ok(true, b)), "OK *BD\n");
    assert_eq!(parsed(b"OK\n"), ParsedLine { line: Line::Ok, had_crc: false });
    assert_eq!(parsed(b"OK\r\n"), ParsedLine { line: Line::Ok, had_crc: false });
    assert_eq!(parsed(b"OK *BD\r\n"), ParsedLine { line: Line::Ok, had_crc: true });

    let plain = write_str(|b| write_err(b"unknown flag", false, b));
    assert_eq!(plain, "ERR unknown flag\n");
    assert_eq!(parsed(plain.as_bytes()), ParsedLine { line: Line::Err(b"unknown flag"), had_crc: false });

    let with_crc = write_str(|b| write_err(b"unknown flag", true, b));
    let expected_crc = crc8(b"ERR unknown flag ");
    assert_eq!(with_crc, format!("ERR unknown flag *{expected_crc:02X}\n"));
    assert_eq!(parsed(with_crc.as_bytes()), ParsedLine { line: Line::Err(b"unknown flag"), had_crc: true });

    assert_eq!(write_str(|b| write_err(b"", false, b)), "ERR\n");
    assert_eq!(parsed(b"ERR"), ParsedLine { line: Line::Err(b""), had_crc: false });

    let mut buf = [0u8; MAX_LINE];
    assert_eq!(write_err(b"two\nlines", false, &mut buf), Err(LineError::BadText));
    assert_eq!(write_err(b"star *AE", false, &mut buf), Err(LineError::BadText));
}

#[test]
fn other_and_empty_lines() {
    assert_eq!(parse_line(b""), Err(LineError::Empty));
    assert_eq!(parse_line(b"\r\n"), Err(LineError::Empty));
    assert_eq!(parse_line(b"   \n"), Err(LineError::Empty));
    assert_eq!(parsed(b"can on\n").line, Line::Other(b"can on"));
    assert_eq!(parsed(b"conf get id.id").line, Line::Other(b"conf get id.id"));
    assert_eq!(parsed(b"OKAY").line, Line::Other(b"OKAY"));
    assert_eq!(parsed(b"ERRx").line, Line::Other(b"ERRx"));
    let crc = crc8(b"tel stop ");
    let line = format!("tel stop *{crc:02X}");
    assert_eq!(parsed(line.as_bytes()), ParsedLine { line: Line::Other(b"tel stop"), had_crc: true });
}

#[test]
fn malformed_fields_are_typed_errors() {
    assert_eq!(parse_line(b"can send 0001"), Err(LineError::MissingField));
    assert_eq!(parse_line(b"rcv 0001"), Err(LineError::MissingField));
    assert_eq!(parse_line(b"rcv\n"), Err(LineError::MissingField));
    assert_eq!(parse_line(b"can send"), Err(LineError::MissingField));
    assert_eq!(parse_line(b"rcv zz 00"), Err(LineError::BadId));
    assert_eq!(parse_line(b"rcv  00"), Err(LineError::BadId));
    assert_eq!(parse_line(b"can send 20000000 00"), Err(LineError::BadId));
    assert_eq!(parse_line(b"can send 123456789 00"), Err(LineError::BadId));
    assert!(parsed(b"can send 000000001FFFFFFF 00").line != Line::Ok, "leading zeros are fine");
    assert_eq!(parse_line(b"can send 0001 012"), Err(LineError::OddHexDigits));
    assert_eq!(parse_line(b"can send 0001 0G"), Err(LineError::BadHex));
    assert_eq!(parse_line(b"rcv 0001 0g1"), Err(LineError::BadHex));
    let long = format!("rcv 0001 {}", "00".repeat(65));
    assert_eq!(parse_line(long.as_bytes()), Err(LineError::DataTooLong));
    let full = format!("rcv 0001 {}", "AB".repeat(64));
    let Line::Rcv(f) = parsed(full.as_bytes()).line else { panic!() };
    assert_eq!(f.payload(), &[0xAB; 64][..]);
    assert_eq!(parse_line(b"can send 0001 00 BX"), Err(LineError::BadFlag));
    assert_eq!(parse_line(b"can send 0001 00 E"), Err(LineError::BadFlag));
    let too_long = [b'x'; MAX_LINE + 1];
    assert_eq!(parse_line(&too_long), Err(LineError::TooLong));
    assert_eq!(
        parse_line(&too_long[..MAX_LINE]),
        Ok(ParsedLine { line: Line::Other(&too_long[..MAX_LINE]), had_crc: false })
    );
}

#[test]
fn can_send_flags_and_defaults() {
    let send = |line: &'static [u8]| match parsed(line).line {
        Line::CanSend(f) => f,
        other => panic!("{other:?}"),
    };
    // Absent flags: FD + BRS, extended iff the id needs 29 bits (fdcanusb firmware defaults).
    assert_eq!(send(b"can send 0001 20").flags, FrameFlags { extended: false, fd: true, brs: true, remote: false });
    assert_eq!(send(b"can send 8001 20").flags, FrameFlags { extended: true, fd: true, brs: true, remote: false });
    assert!(send(b"can send 0800 20").flags.extended);
    assert!(!send(b"can send 07ff 20").flags.extended);
    assert_eq!(
        send(b"can send 0001 20 bf").flags,
        FrameFlags { extended: false, fd: false, brs: false, remote: false }
    );
    assert_eq!(send(b"can send 0001 20 bFR").flags, FrameFlags { extended: false, fd: true, brs: false, remote: true });
    // Later flags win, as in the firmware's loop.
    assert!(!send(b"can send 0001 20 Bb").flags.brs);
    // Empty data field.
    let f = send(b"can send 0001  BF");
    assert_eq!((f.len, f.flags.fd), (0, true));
    // The data is kept as sent: 19 bytes stay 19 bytes.
    assert_eq!(send(b"can send 8001 01000A0E200000003F0000000011001F01130D").len, 19);
}

#[test]
fn writer_id_and_flag_forms() {
    let w = |f: &CanFdFrame| write_str(|b| write_can_send(f, false, b));
    let r = |f: &CanFdFrame| write_str(|b| write_rcv(f, false, b));
    let moteus = FrameFlags::moteus;
    assert_eq!(w(&frame(0x1, &[0x20], moteus(1))), "can send 0001 20 BF\n");
    assert_eq!(w(&frame(0x12345, &[0xFF], moteus(0x12345))), "can send 12345 FF BF\n");
    assert_eq!(r(&frame(0x10005, &[0xFF], moteus(0x10005))), "rcv 010005 FF E B F\n");
    assert_eq!(r(&frame(0x8001, &[], moteus(0x8001))), "rcv 8001  E B F\n");
    let classic = FrameFlags { extended: false, fd: false, brs: false, remote: false };
    assert_eq!(w(&frame(0x100, &[1, 2], classic)), "can send 0100 0102 bf\n");
    assert_eq!(r(&frame(0x100, &[1, 2], classic)), "rcv 0100 0102\n");
    assert_eq!(r(&frame(0x100, &[], classic)), "rcv 0100  e\n");
    let Line::Rcv(empty) = parsed(b"rcv 0100  e").line else { panic!() };
    assert_eq!(empty, frame(0x100, &[], classic));
    let small_ext = FrameFlags { extended: true, ..FrameFlags::moteus(5) };
    assert_eq!(w(&frame(0x5, &[1], small_ext)), "can ext 0005 01 BF\n");

    let mut tiny = [0u8; 10];
    assert_eq!(write_can_send(&frame(1, &[0x20], moteus(1)), false, &mut tiny), Err(LineError::BufferTooSmall));
    let mut exact = [0u8; 20];
    assert_eq!(write_can_send(&frame(1, &[0x20], moteus(1)), false, &mut exact), Ok(20));
    assert_eq!(write_ok(true, &mut [0u8; 6]), Err(LineError::BufferTooSmall));
    assert_eq!(write_ok(true, &mut [0u8; 7]), Ok(7));
}

fn oracle_frame(f: &CanFdFrame) -> moteus_protocol::CanFdFrame {
    let mut o = moteus_protocol::CanFdFrame::new();
    o.arbitration_id = f.id;
    o.data = f.data;
    o.size = f.len;
    o.set_brs(f.flags.brs);
    o.set_fdcan(f.flags.fd);
    o
}

fn any_frame() -> impl Strategy<Value = CanFdFrame> {
    (
        prop_oneof![0u32..=0x7FF, 0u32..=0xFFFF, 0u32..=0x1FFF_FFFF],
        // Empty payloads get their own arm: they are the edge case of the line format.
        prop_oneof![1 => Just(Vec::new()), 4 => proptest::collection::vec(any::<u8>(), 0..=64)],
        any::<[bool; 4]>(),
    )
        .prop_map(|(id, data, [extended, fd, brs, remote])| frame(id, &data, FrameFlags { extended, fd, brs, remote }))
}

/// What survives a trip through a line: an id above 0x7FF is always extended.
fn normalized(mut f: CanFdFrame) -> CanFdFrame {
    f.flags.extended |= f.id > 0x7FF;
    f
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn can_send_round_trips(f in any_frame(), crc: bool) {
        let mut buf = [0u8; MAX_LINE];
        let n = write_can_send(&f, crc, &mut buf).unwrap();
        prop_assert!(n <= MAX_LINE);
        let p = parse_line(&buf[..n]).unwrap();
        prop_assert_eq!(p.had_crc, crc);
        prop_assert_eq!(p.line, Line::CanSend(normalized(f)));
    }

    #[test]
    fn rcv_round_trips(f in any_frame(), crc: bool) {
        let mut buf = [0u8; MAX_LINE];
        let n = write_rcv(&f, crc, &mut buf).unwrap();
        let p = parse_line(&buf[..n]).unwrap();
        prop_assert_eq!(p.had_crc, crc);
        prop_assert_eq!(p.line, Line::Rcv(normalized(f)));
    }

    #[test]
    fn crc_matches_oracle(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        prop_assert_eq!(crc8(&data), oracle::compute_crc8(&data));
    }

    /// For the frames moteus clients send (FD, not remote), our line is the official one.
    #[test]
    fn can_send_matches_oracle(f in any_frame(), crc: bool) {
        let mut f = f;
        f.flags = FrameFlags { fd: true, remote: false, ..FrameFlags::moteus(f.id) };
        f.pad_to_dlc();
        let mut ours = [0u8; MAX_LINE];
        let n = write_can_send(&f, crc, &mut ours).unwrap();
        let mut theirs = [0u8; oracle::MAX_LINE_LENGTH];
        let opts = oracle::EncodeOptions { disable_brs: !f.flags.brs, checksum: crc };
        let m = oracle::encode_can_send(&oracle_frame(&f), &opts, &mut theirs).unwrap();
        prop_assert_eq!(
            String::from_utf8_lossy(&ours[..n]),
            String::from_utf8_lossy(&theirs[..m])
        );
    }

    /// The official host parser reads our rcv lines as we meant them.
    #[test]
    fn oracle_reads_our_rcv(f in any_frame(), crc: bool) {
        let mut buf = [0u8; MAX_LINE];
        let n = write_rcv(&f, crc, &mut buf).unwrap();
        let line = &buf[..n - 1];
        let (content, had, valid) = oracle::strip_checksum(line);
        prop_assert_eq!(had, crc);
        prop_assert!(!crc || valid);
        let Some(o) = oracle::parse_rcv(content) else { return Err(TestCaseError::fail("oracle rejected")) };
        prop_assert_eq!(o.arbitration_id & 0x1FFF_FFFF, f.id);
        prop_assert_eq!(o.payload(), f.payload());
        prop_assert_eq!(o.arbitration_id & 0x8000_0000 != 0, f.flags.extended || f.id > 0x7FF);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse_line(&bytes);
    }

    #[test]
    fn arbitrary_ascii_never_panics(s in "[ -~\r\n]{0,250}") {
        let _ = parse_line(s.as_bytes());
    }

    #[test]
    fn mutated_valid_lines_never_panic(
        f in any_frame(),
        crc: bool,
        rcv: bool,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let mut buf = [0u8; MAX_LINE];
        let n = if rcv { write_rcv(&f, crc, &mut buf) } else { write_can_send(&f, crc, &mut buf) }.unwrap();
        let mut line = buf[..n].to_vec();
        for (at, byte, kind) in edits {
            let i = at.index(line.len() + 1);
            match kind {
                0 if i < line.len() => line[i] = byte,
                1 => line.insert(i, byte),
                _ if i < line.len() => { line.remove(i); }
                _ => {}
            }
        }
        let _ = parse_line(&line);
    }

    /// A CRC-8 catches every burst of up to 8 bits, so any one changed byte of the text is
    /// caught.
    #[test]
    fn one_changed_byte_fails_the_crc(f in any_frame(), rcv: bool, at: prop::sample::Index, byte: u8) {
        let mut buf = [0u8; MAX_LINE];
        let n = if rcv { write_rcv(&f, true, &mut buf) } else { write_can_send(&f, true, &mut buf) }.unwrap();
        let star = n - 4;
        let i = at.index(star);
        prop_assume!(buf[i] != byte);
        buf[i] = byte;
        let result = parse_line(&buf[..n]);
        prop_assert!(matches!(result, Err(LineError::BadCrc { .. })), "{:?}", result);
    }

    #[test]
    fn small_buffers_error_instead_of_panicking(f in any_frame(), crc: bool, len in 0usize..160) {
        let mut buf = vec![0u8; len];
        let _ = write_can_send(&f, crc, &mut buf);
        let _ = write_rcv(&f, crc, &mut buf);
        let _ = write_ok(crc, &mut buf);
        let _ = write_err(b"bad", crc, &mut buf);
    }
}

#[test]
fn proptest_cases_is_respected() {
    // Run the property test in a child process and count its cases.
    let test = rtloop_testkit::test_path(module_path!(), "can_send_round_trips");
    assert_eq!(common::cases_run(&test, Some(7)), 7);
    assert_eq!(common::cases_run(&test, None), 2000, "the default when PROPTEST_CASES is unset");
}
