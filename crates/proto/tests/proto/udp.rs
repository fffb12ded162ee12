//! The UDP datagram framing: the golden vector of `docs/udp-framing.md`, round trips of
//! random frames, every typed error, and arbitrary bytes never panicking.

use crate::common;

use proptest::prelude::*;
use rtloop_proto::frame::FrameFlags;
use rtloop_proto::udp::{
    decode_datagram, encode_datagram, DatagramWriter, UdpFrameError, HEADER_LEN, MAX_DATAGRAM, RECORD_HEADER_LEN,
};
use rtloop_proto::CanFdFrame;

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    digits.chunks(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap()).collect()
}

/// The example datagram of docs/udp-framing.md, byte for byte.
const GOLDEN: &str = "52 54 4c 55 01 02 2a 00
                      01 07 08 01 80 00 00 11 00 1f 01 13 0d 50 50
                      02 00 02 23 01 00 00 de ad";

fn golden_frames() -> [(u8, CanFdFrame); 2] {
    let query = CanFdFrame::new(0x8001, &[0x11, 0x00, 0x1f, 0x01, 0x13, 0x0d, 0x50, 0x50]).unwrap();
    let mut classic = CanFdFrame::new(0x123, &[0xde, 0xad]).unwrap();
    classic.flags = FrameFlags::default();
    [(1, query), (2, classic)]
}

#[test]
fn golden_vector_matches_the_document() {
    let frames = golden_frames();
    let mut out = [0u8; MAX_DATAGRAM];
    let n = encode_datagram(42, frames.iter().map(|(b, f)| (*b, f)), &mut out).unwrap();
    assert_eq!(&out[..n], &hex(GOLDEN)[..]);

    let bytes = hex(GOLDEN);
    let it = decode_datagram(&bytes).unwrap();
    assert_eq!(it.sequence(), 42);
    assert_eq!(it.declared_count(), 2);
    let decoded: Vec<_> = it.map(Result::unwrap).collect();
    assert_eq!(decoded, frames.to_vec());
}

#[test]
fn every_malformation_has_its_own_error() {
    let good = hex(GOLDEN);
    let err = |bytes: &[u8]| -> UdpFrameError {
        match decode_datagram(bytes) {
            Err(e) => e,
            Ok(it) => it.validate().unwrap_err(),
        }
    };
    assert_eq!(err(b"hello, world"), UdpFrameError::BadMagic);
    assert_eq!(err(b"RTL"), UdpFrameError::Truncated { offset: 0 });
    assert_eq!(err(&good[..6]), UdpFrameError::Truncated { offset: 0 });

    let mut v2 = good.clone();
    v2[4] = 2;
    assert_eq!(err(&v2), UdpFrameError::UnsupportedVersion(2));

    // Cut inside the second record's header, then inside its data.
    assert_eq!(err(&good[..25]), UdpFrameError::Truncated { offset: 23 });
    assert_eq!(err(&good[..31]), UdpFrameError::Truncated { offset: 23 });
    // Cut cleanly after the first record.
    assert_eq!(err(&good[..23]), UdpFrameError::CountMismatch { declared: 2, found: 1 });

    let mut long = good.clone();
    long[10] = 65;
    assert_eq!(err(&long), UdpFrameError::LengthTooLong { offset: 8, len: 65 });

    let mut wide = good.clone();
    wide[14] = 0x20;
    assert_eq!(err(&wide), UdpFrameError::IdTooWide { offset: 8, id: 0x2000_8001 });

    let mut reserved = good.clone();
    reserved[9] |= 0x10;
    assert_eq!(err(&reserved), UdpFrameError::ReservedFlags { offset: 8, flags: 0x17 });

    let mut trailing = good.clone();
    trailing.push(0);
    assert_eq!(err(&trailing), UdpFrameError::TrailingBytes { offset: 32 });

    let mut fewer = good.clone();
    fewer[5] = 1;
    assert_eq!(err(&fewer), UdpFrameError::TrailingBytes { offset: 23 });

    // The iterator yields the good record, then the error, then stops.
    let items: Vec<_> = decode_datagram(&good[..25]).unwrap().collect();
    assert_eq!(items.len(), 2);
    assert!(items[0].is_ok() && items[1].is_err());
}

#[test]
fn encoders_refuse_what_no_receiver_would_accept() {
    let mut out = [0u8; MAX_DATAGRAM];
    let mut tiny = [0u8; HEADER_LEN - 1];
    assert_eq!(DatagramWriter::new(&mut tiny[..], 0).unwrap_err(), UdpFrameError::BufferTooSmall);

    let mut w = DatagramWriter::new(&mut out[..], 0).unwrap();
    let mut bad = CanFdFrame { len: 65, ..Default::default() };
    assert_eq!(w.push(1, &bad), Err(UdpFrameError::LengthTooLong { offset: HEADER_LEN, len: 65 }));
    bad.len = 0;
    bad.id = 0x2000_0000;
    assert_eq!(w.push(1, &bad), Err(UdpFrameError::IdTooWide { offset: HEADER_LEN, id: 0x2000_0000 }));
    assert!(w.is_empty());

    // A small buffer fills: the datagram is left intact and still valid.
    let mut small = [0u8; HEADER_LEN + RECORD_HEADER_LEN + 8];
    let mut w = DatagramWriter::new(&mut small[..], 9).unwrap();
    let f = CanFdFrame::new(1, &[1; 8]).unwrap();
    w.push(3, &f).unwrap();
    assert_eq!(w.push(3, &f), Err(UdpFrameError::DatagramFull));
    assert_eq!(w.count(), 1);
    assert_eq!(decode_datagram(w.as_bytes()).unwrap().validate(), Ok(1));
    assert_eq!(w.sequence(), 9);

    // encode_datagram reports the overflow instead of truncating.
    let many = vec![(1u8, CanFdFrame::new(1, &[0; 64]).unwrap()); 21];
    assert_eq!(encode_datagram(0, many.iter().map(|(b, f)| (*b, f)), &mut out), Err(UdpFrameError::DatagramFull));
}

#[test]
fn an_empty_datagram_is_valid() {
    let mut out = [0u8; 16];
    let n = encode_datagram(0xffff, std::iter::empty(), &mut out).unwrap();
    assert_eq!(n, HEADER_LEN);
    let it = decode_datagram(&out[..n]).unwrap();
    assert_eq!(it.sequence(), 0xffff);
    assert_eq!(it.validate(), Ok(0));
}

fn arb_frame() -> impl Strategy<Value = (u8, CanFdFrame)> {
    (any::<u8>(), 0u32..=0x1FFF_FFFF, prop::collection::vec(any::<u8>(), 0..=64), any::<(bool, bool, bool, bool)>())
        .prop_map(|(bus, id, data, (extended, fd, brs, remote))| {
            let mut f = CanFdFrame::new(id, &data).unwrap();
            f.flags = FrameFlags { extended, fd, brs, remote };
            (bus, f)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_frames_round_trip_across_as_many_datagrams_as_needed(
        frames in prop::collection::vec(arb_frame(), 0..100),
        seq in any::<u16>(),
    ) {
        let mut decoded = Vec::new();
        let mut w = DatagramWriter::new([0u8; MAX_DATAGRAM], seq).unwrap();
        let mut datagrams = Vec::new();
        for (bus, f) in &frames {
            if w.push(*bus, f) == Err(UdpFrameError::DatagramFull) {
                datagrams.push(w.as_bytes().to_vec());
                w.reset(w.sequence().wrapping_add(1));
                w.push(*bus, f).unwrap();
            }
        }
        datagrams.push(w.as_bytes().to_vec());
        for (i, d) in datagrams.iter().enumerate() {
            prop_assert!(d.len() <= MAX_DATAGRAM);
            let it = decode_datagram(d).unwrap();
            prop_assert_eq!(it.sequence(), seq.wrapping_add(i as u16));
            prop_assert_eq!(it.validate(), Ok(it.declared_count()));
            for item in it {
                decoded.push(item.unwrap());
            }
        }
        prop_assert_eq!(decoded, frames);
    }

    #[test]
    fn encode_datagram_round_trips_whatever_fits(frames in prop::collection::vec(arb_frame(), 0..30)) {
        let mut out = [0u8; MAX_DATAGRAM];
        let need: usize = HEADER_LEN + frames.iter().map(|(_, f)| RECORD_HEADER_LEN + f.len as usize).sum::<usize>();
        match encode_datagram(1, frames.iter().map(|(b, f)| (*b, f)), &mut out) {
            Ok(n) => {
                prop_assert_eq!(n, need);
                let back: Vec<_> = decode_datagram(&out[..n]).unwrap().map(Result::unwrap).collect();
                prop_assert_eq!(back, frames);
            }
            Err(e) => {
                prop_assert_eq!(e, UdpFrameError::DatagramFull);
                prop_assert!(need > MAX_DATAGRAM);
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        tail in prop::collection::vec(any::<u8>(), 0..2000),
        count in any::<u8>(),
        with_header in any::<bool>(),
    ) {
        // Half the cases get a valid header so the record parser sees the random bytes.
        let mut bytes = if with_header { vec![b'R', b'T', b'L', b'U', 1, count, 0, 0] } else { Vec::new() };
        bytes.extend_from_slice(&tail);
        if let Ok(it) = decode_datagram(&bytes) {
            let verdict = it.validate();
            let mut n = 0usize;
            let mut failed = false;
            for item in it {
                prop_assert!(!failed, "the iterator continued after an error");
                match item {
                    Ok((_, f)) => { prop_assert!(f.len <= 64 && f.id <= 0x1FFF_FFFF); n += 1; }
                    Err(_) => failed = true,
                }
            }
            prop_assert_eq!(verdict.is_ok(), !failed);
            if let Ok(count) = verdict { prop_assert_eq!(count, n); }
        }
    }

    #[test]
    fn corrupted_valid_datagrams_never_panic(
        frames in prop::collection::vec(arb_frame(), 1..10),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut out = [0u8; MAX_DATAGRAM];
        let n = encode_datagram(7, frames.iter().map(|(b, f)| (*b, f)), &mut out).unwrap();
        let mut bytes = out[..n].to_vec();
        for (at, value) in flips {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        bytes.truncate(cut.index(bytes.len() + 1));
        if let Ok(it) = decode_datagram(&bytes) {
            let _ = it.validate();
            for item in it { let _ = item; }
        }
    }
}

#[test]
fn proptest_cases_is_respected() {
    // Run the property test in a child process and count its cases.
    let test = rtloop_testkit::test_path(module_path!(), "random_frames_round_trip_across_as_many_datagrams_as_needed");
    assert_eq!(common::cases_run(&test, Some(7)), 7);
    assert_eq!(common::cases_run(&test, None), 512, "the default when PROPTEST_CASES is unset");
}
