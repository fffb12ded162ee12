//! Recovery: a log cut at every byte, and logs with flipped bytes, must read back everything
//! that survived without the reader ever panicking.

use proptest::prelude::*;
use rtloop_tlog::format::TlogError;
use rtloop_tlog::reader::{FileReader, ItemFilter};
use rtloop_tlog::writer::{FileWriter, WriterOptions};

const START_US: i64 = 1_600_000_000_000_000;

/// One data block as written: where it starts and ends, its record and payload.
#[derive(Debug, Clone)]
struct Written {
    start: u64,
    end: u64,
    record_id: u64,
    payload: Vec<u8>,
}

fn varuint(bytes: &[u8], pos: &mut usize) -> u64 {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let byte = bytes[*pos];
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return value;
        }
        shift += 7;
    }
}

/// A few hundred blocks: two records at 100 Hz / 25 Hz over 3 s with seek markers every
/// 0.25 s, payloads of varying size (some compressible, so Snappy is exercised too).
/// Block ends are computed from each block's own header, independently of the reader.
fn build_log() -> (Vec<u8>, Vec<Written>) {
    let options = WriterOptions { seek_marker_interval_us: Some(250_000), ..WriterOptions::default() };
    let mut writer = FileWriter::new(Vec::new(), options).unwrap();
    let fast = writer.allocate_id("fast");
    writer.write_schema(fast, &[16, 0, 0, 4, b'b', b'l', b'o', b'b', 0, 9, 0, 0, 0, 0, 0, 0]).unwrap();
    let slow = writer.allocate_id("slow");
    writer.write_schema(slow, b"opaque").unwrap();
    let mut written = Vec::new();
    for i in 0..300u32 {
        let t = START_US + i64::from(i) * 10_000;
        let mut payload = vec![(i % 40) as u8];
        payload.extend((0..(i % 40)).map(|k| if i % 3 == 0 { 7 } else { (k * 31 + i) as u8 }));
        let id = if i % 4 == 3 { slow } else { fast };
        let start = writer.write_data(id, Some(t), &payload).unwrap();
        written.push(Written { start, end: 0, record_id: id, payload });
    }
    let bytes = writer.close().unwrap();
    for block in &mut written {
        let mut pos = block.start as usize;
        assert_eq!(varuint(&bytes, &mut pos), 2, "a data block starts at {}", block.start);
        let size = varuint(&bytes, &mut pos);
        block.end = pos as u64 + size;
    }
    (bytes, written)
}

fn read_all(bytes: Vec<u8>) -> Option<(Vec<rtloop_tlog::reader::Item>, Vec<TlogError>)> {
    let reader = FileReader::from_bytes(bytes).ok()?;
    let (mut items, mut errors) = (Vec::new(), Vec::new());
    for result in reader.items(ItemFilter::default()) {
        match result {
            Ok(item) => items.push(item),
            Err(error) => errors.push(error),
        }
    }
    // The other entry points must not panic either.
    let _ = reader.scan_report();
    for record in reader.records() {
        for _ in reader.backwards(record.id) {}
    }
    let _ = reader.seek(START_US + 1_500_000);
    Some((items, errors))
}

#[test]
fn a_log_cut_at_every_byte_yields_every_complete_block() {
    let (bytes, written) = build_log();
    assert!(written.len() >= 300);
    let reader = FileReader::from_bytes(bytes.clone()).unwrap();
    assert!(reader.seek_markers().len() >= 10);
    for cut in 0..=bytes.len() {
        let Some((items, errors)) = read_all(bytes[..cut].to_vec()) else {
            assert!(cut < 9, "only a cut inside the file header may fail to open (cut {cut})");
            continue;
        };
        let expected: Vec<&Written> = written.iter().filter(|w| w.end <= cut as u64).collect();
        assert_eq!(items.len(), expected.len(), "cut at {cut}");
        for (item, w) in items.iter().zip(&expected) {
            assert_eq!((item.offset, item.record_id, &item.data), (w.start, w.record_id, &w.payload), "cut at {cut}");
        }
        // The only possible complaint is the cut itself, reported last.
        assert!(errors.len() <= 1, "cut at {cut}: {errors:?}");
        if let Some(error) = errors.first() {
            assert!(matches!(error, TlogError::Truncated { .. }), "cut at {cut}: {error:?}");
        }
        let report = FileReader::from_bytes(bytes[..cut].to_vec()).unwrap().scan_report();
        assert!(report.corrupt.is_empty(), "cut at {cut}: {:?}", report.corrupt);
        assert_eq!(report.data_blocks, expected.len() as u64);
    }
}

#[test]
fn a_flipped_payload_byte_is_a_crc_error_and_the_rest_still_reads() {
    let (bytes, written) = build_log();
    for (n, victim) in written.iter().enumerate() {
        // Every payload byte of the first blocks, the last payload byte of the others.
        let payload_start = victim.end as usize - victim.payload.len().min(1);
        let positions: Vec<usize> =
            if n < 8 { (victim.start as usize + 2..victim.end as usize).collect() } else { vec![payload_start] };
        for at in positions {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            let reader = FileReader::from_bytes(damaged).unwrap();
            let results: Vec<_> = reader.items(ItemFilter::default()).collect();
            let errors: Vec<&TlogError> = results.iter().filter_map(|r| r.as_ref().err()).collect();
            let items: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
            let expected: Vec<u64> = written.iter().filter(|w| w.start != victim.start).map(|w| w.start).collect();
            // Bytes in the id/flags/optional fields may yield other errors than BadCrc, but the
            // block is always reported at its own offset and everything else still reads.
            assert_eq!(errors.len(), 1, "flip at {at}: {errors:?}");
            match errors[0] {
                TlogError::BadCrc { offset }
                | TlogError::UnknownFlags { offset, .. }
                | TlogError::Malformed { offset, .. } => {
                    assert_eq!(*offset, victim.start, "flip at {at}")
                }
                other => panic!("flip at {at}: {other:?}"),
            }
            if at >= payload_start {
                assert!(matches!(errors[0], TlogError::BadCrc { .. }), "payload flip at {at}: {errors:?}");
            }
            let offsets: Vec<u64> = items.iter().map(|item| item.offset).collect();
            // A flip in the record id can move the block to another record but not hide it:
            // it still fails its CRC, so it is never returned.
            assert_eq!(offsets, expected, "flip at {at}");
            let report = reader.scan_report();
            assert_eq!(report.corrupt.len(), 1);
            assert_eq!(report.corrupt[0].0, victim.start);
        }
    }
}

#[test]
fn a_flipped_byte_anywhere_never_panics_and_reading_resumes_by_the_next_marker() {
    let (bytes, written) = build_log();
    let markers: Vec<u64> =
        FileReader::from_bytes(bytes.clone()).unwrap().seek_markers().iter().map(|m| m.offset).collect();
    for at in 9..bytes.len() {
        for flip in [0x01u8, 0x80] {
            let mut damaged = bytes.clone();
            damaged[at] ^= flip;
            let (items, _errors) = read_all(damaged).expect("header intact");
            // Every data block after the first seek marker past the damage is read intact.
            let Some(&resync) = markers.iter().find(|&&m| m > at as u64) else { continue };
            let got: std::collections::HashSet<u64> = items.iter().map(|i| i.offset).collect();
            for w in written.iter().filter(|w| w.start > resync) {
                assert!(got.contains(&w.start), "flip {flip:#x} at {at}: block at {} lost", w.start);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_after_a_valid_header_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut bytes = b"TLOG0003\0".to_vec();
        bytes.extend_from_slice(&tail);
        let _ = read_all(bytes);
    }

    #[test]
    fn arbitrary_splices_into_a_real_log_never_panic(
        at in 9usize..4000,
        junk in proptest::collection::vec(any::<u8>(), 1..64),
    ) {
        let (bytes, _) = build_log();
        let at = at.min(bytes.len());
        let mut damaged = bytes[..at].to_vec();
        damaged.extend_from_slice(&junk);
        damaged.extend_from_slice(&bytes[at..]);
        let _ = read_all(damaged);
    }
}
