//! The writer reproduces mjlib's golden test file byte for byte (tlog.md "Golden bytes").
//!
//! If this fails, files we write no longer match what mjlib itself writes.

use rtloop_tlog::writer::{FileWriter, WriterOptions};

/// 2020-03-10T00:00:00Z in µs since the UNIX epoch.
const GOLDEN_TIMESTAMP_US: i64 = 1_583_798_400_000_000;

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect()
}

#[test]
fn golden_file_bytes() {
    let options =
        WriterOptions { snappy: false, seek_marker_interval_us: None, index: false, ..WriterOptions::default() };
    let mut writer = FileWriter::new(Vec::new(), options).unwrap();
    let id = writer.allocate_id("test");
    assert_eq!(id, 1);
    writer.write_schema(id, b"testschema").unwrap();
    let offset = writer.write_data(id, Some(GOLDEN_TIMESTAMP_US), b"testdata").unwrap();
    assert_eq!(offset, 9 + 19);
    let bytes = writer.close().unwrap();

    let mut expected = hex("54 4C 4F 47 30 30 30 33 00");
    expected.extend(hex("01 11 01 00 04 74 65 73 74 74 65 73 74 73 63 68 65 6D 61"));
    expected.extend(hex("02 17 01 07 00 00 20 07 cd 74 a0 05 00 93 73 df 4e 74 65 73 74 64 61 74 61"));
    assert_eq!(bytes, expected);
}

#[test]
fn golden_data_block_with_default_options_differs_only_by_the_extras() {
    // mjlib's defaults also try Snappy (not smaller for 8 bytes) and append an index on
    // close; the header, schema and data block are the same bytes.
    let mut writer = FileWriter::new(Vec::new(), WriterOptions::default()).unwrap();
    let id = writer.allocate_id("test");
    writer.write_schema(id, b"testschema").unwrap();
    writer.write_data(id, Some(GOLDEN_TIMESTAMP_US), b"testdata").unwrap();
    let bytes = writer.close().unwrap();
    let mut expected = hex("54 4C 4F 47 30 30 30 33 00");
    expected.extend(hex("01 11 01 00 04 74 65 73 74 74 65 73 74 73 63 68 65 6D 61"));
    expected.extend(hex("02 17 01 07 00 00 20 07 cd 74 a0 05 00 93 73 df 4e 74 65 73 74 64 61 74 61"));
    assert_eq!(&bytes[..expected.len()], &expected[..]);
    assert!(bytes.ends_with(b"TLOGIDEX"));
}
