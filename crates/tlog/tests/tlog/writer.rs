//! Writer, schema and data-encoding tests: the schema binary round-trips, `schema_of` and
//! `to_bytes` agree and decode by hand as mjlib would, and the block-level features (Snappy
//! only when smaller, previous offsets, CRCs, seek markers, index) are laid out as mjlib's
//! readers expect.

use rtloop_tlog::format::{self, block_type, data_flags, read_i64, read_u32, read_u64, read_varuint, TlogError};
use rtloop_tlog::schema::{self, schema_of, Duration, Field, Schema, Timestamp};
use rtloop_tlog::ser::to_bytes;
use rtloop_tlog::writer::{FileWriter, WriterOptions};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One block of a file as laid out on disk.
#[derive(Debug)]
struct Block {
    offset: u64,
    kind: u64,
    /// Bytes of the type and size varuints.
    header_len: usize,
    body: Vec<u8>,
}

/// Walk a complete file block by block (the simplest possible reader).
fn blocks(file: &[u8]) -> Vec<Block> {
    assert_eq!(&file[..8], format::FILE_MAGIC);
    let mut pos = 8;
    assert_eq!(read_varuint(file, &mut pos).unwrap(), 0);
    let mut out = Vec::new();
    while pos < file.len() {
        let offset = pos as u64;
        let kind = read_varuint(file, &mut pos).unwrap();
        let size = read_varuint(file, &mut pos).unwrap() as usize;
        let header_len = pos - offset as usize;
        out.push(Block { offset, kind, header_len, body: file[pos..pos + size].to_vec() });
        pos += size;
    }
    out
}

/// A data block's fields.
#[derive(Debug)]
struct Data {
    id: u64,
    flags: u64,
    previous_offset: Option<u64>,
    timestamp: Option<i64>,
    payload: Vec<u8>,
}

fn parse_data(block: &Block, file: &[u8]) -> Data {
    assert_eq!(block.kind, block_type::DATA);
    let b = &block.body;
    let mut pos = 0;
    let id = read_varuint(b, &mut pos).unwrap();
    let flags = read_varuint(b, &mut pos).unwrap();
    assert_eq!(flags & !data_flags::KNOWN, 0);
    let previous_offset = (flags & data_flags::PREVIOUS_OFFSET != 0).then(|| read_varuint(b, &mut pos).unwrap());
    let timestamp = (flags & data_flags::TIMESTAMP != 0).then(|| read_i64(b, &mut pos).unwrap());
    if flags & data_flags::CHECKSUM != 0 {
        let crc_at = block.header_len + pos;
        let stored = read_u32(b, &mut pos).unwrap();
        let start = block.offset as usize;
        let mut whole = file[start..start + block.header_len + b.len()].to_vec();
        whole[crc_at..crc_at + 4].fill(0);
        assert_eq!(format::crc32(&whole), stored, "data block CRC covers the whole block");
    }
    let raw = &b[pos..];
    let payload = if flags & data_flags::SNAPPY != 0 {
        snap::raw::Decoder::new().decompress_vec(raw).unwrap()
    } else if flags & data_flags::ZSTD != 0 {
        zstd::decode_all(raw).unwrap()
    } else {
        raw.to_vec()
    };
    Data { id, flags, previous_offset, timestamp, payload }
}

fn quiet_options() -> WriterOptions {
    WriterOptions { seek_marker_interval_us: None, index: false, ..WriterOptions::default() }
}

// ----------------------------------------------------------------------------------------
// Schema binary

fn every_type_schema() -> Schema {
    let mut with_alias = Field::new("renamed", Schema::FixedUInt(2));
    with_alias.aliases = vec!["old_name".into(), "older_name".into()];
    with_alias.default = Some(vec![0x34, 0x12]);
    let mut with_union_default = Field::new("maybe", Schema::Union(vec![Schema::Null, Schema::String]));
    with_union_default.default = Some(vec![1, 2, b'h', b'i']);
    Schema::Object(vec![
        Field::new("null", Schema::Null),
        Field::new("bool", Schema::Bool),
        Field::new("i8", Schema::FixedInt(1)),
        Field::new("i16", Schema::FixedInt(2)),
        Field::new("i32", Schema::FixedInt(4)),
        Field::new("i64", Schema::FixedInt(8)),
        Field::new("u8", Schema::FixedUInt(1)),
        Field::new("u64", Schema::FixedUInt(8)),
        Field::new("varint", Schema::VarInt),
        Field::new("varuint", Schema::VarUInt),
        Field::new("f32", Schema::Float32),
        Field::new("f64", Schema::Float64),
        Field::new("bytes", Schema::Bytes),
        Field::new("string", Schema::String),
        Field::new("object", Schema::Object(vec![Field::new("inner", Schema::Bool)])),
        Field::new("empty_object", Schema::Object(vec![])),
        Field::new(
            "enum",
            Schema::Enum {
                underlying: Box::new(Schema::VarUInt),
                items: vec![(0, "stopped".into()), (10, "position".into()), (300, "big".into())],
            },
        ),
        Field::new("array", Schema::Array(Box::new(Schema::Float32))),
        Field::new("fixedarray", Schema::FixedArray(3, Box::new(Schema::FixedInt(2)))),
        Field::new("map", Schema::Map(Box::new(Schema::Array(Box::new(Schema::String))))),
        Field::new("union", Schema::Union(vec![Schema::Null, Schema::Float64, Schema::String])),
        Field::new("timestamp", Schema::Timestamp),
        Field::new("duration", Schema::Duration),
        with_alias,
        with_union_default,
    ])
}

#[test]
fn schema_binary_round_trips_every_type() {
    let schema = every_type_schema();
    let binary = schema.to_binary();
    assert_eq!(Schema::parse_binary(&binary).unwrap(), schema);
    // Every strict prefix is an error, never a panic.
    for len in 0..binary.len() {
        assert!(Schema::parse_binary(&binary[..len]).is_err(), "prefix of {len} bytes parsed");
    }
}

#[test]
fn schema_binary_known_bytes() {
    let schema = Schema::Object(vec![
        Field::new("a", Schema::Union(vec![Schema::Null, Schema::Float64])),
        Field::new("e", Schema::Enum { underlying: Box::new(Schema::VarUInt), items: vec![(1, "x".into())] }),
        Field::new("f", Schema::FixedArray(2, Box::new(Schema::FixedUInt(1)))),
    ]);
    #[rustfmt::skip]
    let expected = [
        0x10, 0x00,                                     // object, flags
        0x00, 0x01, b'a', 0x00, 0x15, 0x01, 0x08, 0x00, 0x00, // field a: optional double, no default
        0x00, 0x01, b'e', 0x00, 0x11, 0x06, 0x01, 0x01, 0x01, b'x', 0x00, // field e: enum varuint {1: "x"}
        0x00, 0x01, b'f', 0x00, 0x13, 0x02, 0x04, 0x01, 0x00, // field f: fixedarray 2 of u8
        0x00, 0x00, 0x00, 0x00, 0x00,                   // terminator
    ];
    assert_eq!(schema.to_binary(), expected);
}

#[test]
fn parse_rejects_non_object_top_level_and_unknown_codes() {
    assert!(Schema::parse_binary(&[0x02]).is_err());
    assert!(Schema::parse_binary(&[0x10, 0x00, 0x00, 0x01, b'a', 0x00, 0x0b, 0x00]).is_err()); // code 11
    assert!(matches!(
        Schema::parse_binary(&[0x10, 0x02, 0, 0, 0, 0, 0]),
        Err(TlogError::UnknownFlags { offset: 1, flags: 2 })
    ));
    assert!(Schema::parse_binary(&[0x10, 0x00, 0x00, 0x01, b'a', 0x00, 0x03, 0x03, 0x00]).is_err());
    // int3
}

// ----------------------------------------------------------------------------------------
// schema_of + to_bytes

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
enum Mode {
    #[default]
    Stopped,
    Position,
    Brake,
}

#[derive(Debug, Clone, Default, Serialize)]
struct Joint {
    id: u8,
    position: f32,
    #[serde(serialize_with = "schema::typed_option")]
    fault: Option<u16>,
}

#[derive(Debug, Clone, Serialize)]
struct Nested {
    time: Timestamp,
    took: Duration,
    name: String,
    #[serde(serialize_with = "schema::typed_enum")]
    mode: Mode,
    joints: Vec<Joint>,
    matrix: Vec<Vec<i16>>,
    gains: [f64; 2],
    maybe_list: Option<Vec<bool>>,
    #[serde(serialize_with = "schema::typed_vec")]
    tags: Vec<String>,
    #[serde(serialize_with = "schema::typed_option")]
    limit: Option<i32>,
    #[serde(serialize_with = "schema::typed_map")]
    named: BTreeMap<String, u32>,
    pair: (u8, String),
    unit: (),
}

impl Default for Nested {
    fn default() -> Self {
        Nested {
            time: Timestamp(0),
            took: Duration(0),
            name: String::new(),
            mode: Mode::Stopped,
            joints: vec![Joint { id: 0, position: 0.0, fault: Some(0) }],
            matrix: vec![vec![0]],
            gains: [0.0; 2],
            maybe_list: Some(vec![false]),
            tags: Vec::new(),
            limit: None,
            named: BTreeMap::new(),
            pair: (0, String::new()),
            unit: (),
        }
    }
}

#[test]
fn schema_of_nested_struct() {
    let schema = schema_of::<Nested>().unwrap();
    let joint = Schema::Object(vec![
        Field::new("id", Schema::FixedUInt(1)),
        Field::new("position", Schema::Float32),
        Field::new("fault", Schema::Union(vec![Schema::Null, Schema::FixedUInt(2)])),
    ]);
    let expected = Schema::Object(vec![
        Field::new("time", Schema::Timestamp),
        Field::new("took", Schema::Duration),
        Field::new("name", Schema::String),
        Field::new(
            "mode",
            Schema::Enum {
                underlying: Box::new(Schema::VarUInt),
                items: vec![(0, "Stopped".into()), (1, "Position".into()), (2, "Brake".into())],
            },
        ),
        Field::new("joints", Schema::Array(Box::new(joint))),
        Field::new("matrix", Schema::Array(Box::new(Schema::Array(Box::new(Schema::FixedInt(2)))))),
        Field::new("gains", Schema::FixedArray(2, Box::new(Schema::Float64))),
        Field::new("maybe_list", Schema::Union(vec![Schema::Null, Schema::Array(Box::new(Schema::Bool))])),
        Field::new("tags", Schema::Array(Box::new(Schema::String))),
        Field::new("limit", Schema::Union(vec![Schema::Null, Schema::FixedInt(4)])),
        Field::new("named", Schema::Map(Box::new(Schema::FixedUInt(4)))),
        Field::new(
            "pair",
            Schema::Object(vec![Field::new("_0", Schema::FixedUInt(1)), Field::new("_1", Schema::String)]),
        ),
        Field::new("unit", Schema::Null),
    ]);
    assert_eq!(schema, expected);
    assert_eq!(Schema::parse_binary(&schema.to_binary()).unwrap(), schema);
}

#[test]
fn nested_struct_bytes_decode_by_hand() {
    let value = Nested {
        time: Timestamp(1_583_798_400_000_000),
        took: Duration(-5),
        name: "leg".into(),
        mode: Mode::Brake,
        joints: vec![Joint { id: 3, position: 1.5, fault: None }, Joint { id: 4, position: -2.0, fault: Some(0x0102) }],
        matrix: vec![vec![], vec![1, -1]],
        gains: [0.5, 2.0],
        maybe_list: None,
        tags: vec!["a".into()],
        limit: Some(-2),
        named: BTreeMap::from([("k".to_string(), 7)]),
        pair: (9, "z".into()),
        unit: (),
    };
    let mut bytes = Vec::new();
    to_bytes(&value, &mut bytes).unwrap();

    let mut expected = Vec::new();
    expected.extend(1_583_798_400_000_000i64.to_le_bytes()); // time
    expected.extend((-5i64).to_le_bytes()); // took
    expected.extend([3, b'l', b'e', b'g']); // name
    expected.push(2); // mode: Brake is variant 2
    expected.push(2); // joints: 2 items
    expected.push(3); // id
    expected.extend(1.5f32.to_le_bytes());
    expected.push(0); // fault: None (union index 0)
    expected.push(4);
    expected.extend((-2.0f32).to_le_bytes());
    expected.extend([1, 0x02, 0x01]); // fault: Some(0x0102)
    expected.extend([2, 0, 2]); // matrix: 2 rows, [], [..2 items]
    expected.extend(1i16.to_le_bytes());
    expected.extend((-1i16).to_le_bytes());
    expected.extend(0.5f64.to_le_bytes()); // gains: fixed array, no count
    expected.extend(2.0f64.to_le_bytes());
    expected.push(0); // maybe_list: None
    expected.extend([1, 1, b'a']); // tags
    expected.push(1); // limit: Some
    expected.extend((-2i32).to_le_bytes());
    expected.extend([1, 1, b'k']); // named: 1 entry, key "k"
    expected.extend(7u32.to_le_bytes());
    expected.extend([9, 1, b'z']); // pair
    assert_eq!(bytes, expected);

    // And the schema agrees about where the value ends.
    let schema = schema_of::<Nested>().unwrap();
    let mut pos = 0;
    schema.skip_value(&bytes, &mut pos).unwrap();
    assert_eq!(pos, bytes.len());
}

#[test]
fn unhinted_enum_lists_the_default_variant() {
    #[derive(Default, Serialize)]
    struct Plain {
        mode: Mode,
    }
    let schema = schema_of::<Plain>().unwrap();
    assert_eq!(
        schema,
        Schema::Object(vec![Field::new(
            "mode",
            Schema::Enum { underlying: Box::new(Schema::VarUInt), items: vec![(0, "Stopped".into())] }
        )])
    );
}

#[test]
fn unknown_item_types_are_errors_not_guesses() {
    #[derive(Default, Serialize)]
    struct EmptyVec {
        v: Vec<u8>,
    }
    #[derive(Default, Serialize)]
    struct NoneOption {
        o: Option<u8>,
    }
    #[derive(Default, Serialize)]
    struct Mixed {
        v: Vec<Option<u8>>,
    }
    #[derive(Serialize)]
    enum WithData {
        A(u8),
    }
    impl Default for WithData {
        fn default() -> Self {
            WithData::A(0)
        }
    }
    #[derive(Default, Serialize)]
    struct HasData {
        e: WithData,
    }
    assert!(matches!(schema_of::<EmptyVec>(), Err(TlogError::Unsupported(_))));
    assert!(matches!(schema_of::<NoneOption>(), Err(TlogError::Unsupported(_))));
    let mixed = Mixed { v: vec![None, Some(1)] };
    assert!(schema::schema_of_value(&mixed).is_err());
    assert!(schema_of::<HasData>().is_err());
    assert!(schema_of::<u32>().is_err(), "top level must be a struct");
}

#[test]
fn hints_do_not_change_the_bytes() {
    let value = Nested::default();
    let mut ours = Vec::new();
    to_bytes(&value, &mut ours).unwrap();
    // serde_json sees the plain values: the hints are invisible to other serializers.
    let json = serde_json::to_value(&value).unwrap();
    assert_eq!(json["tags"], serde_json::json!([]));
    assert_eq!(json["limit"], serde_json::Value::Null);
    assert_eq!(json["mode"], serde_json::json!("Stopped"));
}

proptest::proptest! {
    #[test]
    fn schema_and_bytes_agree_for_any_value(
        ids in proptest::collection::vec(proptest::num::u16::ANY, 0..20),
        name in ".{0,12}",
        fault in proptest::option::of(proptest::num::u16::ANY),
        rows in proptest::collection::vec(proptest::collection::vec(proptest::num::i16::ANY, 0..5), 0..5),
    ) {
        let value = Nested {
            name,
            joints: ids.iter().map(|&i| Joint { id: i as u8, position: i as f32, fault }).collect(),
            matrix: rows,
            ..Nested::default()
        };
        let mut bytes = Vec::new();
        to_bytes(&value, &mut bytes).unwrap();
        let schema = schema_of::<Nested>().unwrap();
        let mut pos = 0;
        schema.skip_value(&bytes, &mut pos).unwrap();
        proptest::prop_assert_eq!(pos, bytes.len());
        for cut in 0..bytes.len() {
            let mut pos = 0;
            proptest::prop_assert!(schema.skip_value(&bytes[..cut], &mut pos).is_err());
        }
    }
}

// ----------------------------------------------------------------------------------------
// Blocks

#[test]
fn snappy_is_used_only_when_smaller() {
    let mut writer = FileWriter::new(Vec::new(), quiet_options()).unwrap();
    let id = writer.allocate_id("r");
    writer.write_schema(id, &Schema::Object(vec![Field::new("b", Schema::Bytes)]).to_binary()).unwrap();
    let compressible = vec![7u8; 1000];
    let incompressible: Vec<u8> = (0..64u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    writer.write_data(id, Some(1), &compressible).unwrap();
    writer.write_data(id, Some(2), &incompressible).unwrap();
    writer.write_data(id, Some(3), b"").unwrap();
    let file = writer.close().unwrap();
    let data: Vec<Data> =
        blocks(&file).iter().filter(|b| b.kind == block_type::DATA).map(|b| parse_data(b, &file)).collect();
    assert_eq!(data.len(), 3);
    assert_ne!(data[0].flags & data_flags::SNAPPY, 0);
    assert_eq!(data[0].payload, compressible);
    assert_eq!(data[1].flags & data_flags::SNAPPY, 0);
    assert_eq!(data[1].payload, incompressible);
    assert_eq!(data[2].flags, data_flags::PREVIOUS_OFFSET | data_flags::TIMESTAMP | data_flags::CHECKSUM);
    assert!(data[2].payload.is_empty());
    assert!(file.len() < 1000, "the compressible block was stored compressed");
}

#[test]
fn zstd_is_opt_in_and_flagged() {
    let options = WriterOptions { zstd_level: Some(3), ..quiet_options() };
    let mut writer = FileWriter::new(Vec::new(), options).unwrap();
    let id = writer.allocate_id("r");
    writer.write_schema(id, &Schema::Object(vec![Field::new("b", Schema::Bytes)]).to_binary()).unwrap();
    writer.write_data(id, Some(1), &[1u8; 4096]).unwrap();
    let file = writer.close().unwrap();
    let block = blocks(&file).into_iter().find(|b| b.kind == block_type::DATA).unwrap();
    let data = parse_data(&block, &file);
    assert_ne!(data.flags & data_flags::ZSTD, 0);
    assert_eq!(data.flags & data_flags::SNAPPY, 0);
    assert_eq!(data.payload, vec![1u8; 4096]);
    // Default options never set it.
    assert!(WriterOptions::default().zstd_level.is_none());
}

#[test]
fn previous_offsets_chain_per_record() {
    let mut writer = FileWriter::new(Vec::new(), quiet_options()).unwrap();
    let a = writer.allocate_id("a");
    let b = writer.allocate_id("b");
    assert_eq!((a, b), (1, 2));
    assert_eq!(writer.allocate_id("a"), 1);
    let schema = Schema::Object(vec![Field::new("x", Schema::FixedUInt(1))]).to_binary();
    writer.write_schema(a, &schema).unwrap();
    writer.write_schema(b, &schema).unwrap();
    let a0 = writer.write_data(a, Some(10), &[1]).unwrap();
    let b0 = writer.write_data(b, None, &[2]).unwrap();
    let a1 = writer.write_data(a, Some(11), &[3]).unwrap();
    let file = writer.close().unwrap();
    let data: Vec<(u64, Data)> = blocks(&file)
        .iter()
        .filter(|blk| blk.kind == block_type::DATA)
        .map(|blk| (blk.offset, parse_data(blk, &file)))
        .collect();
    assert_eq!(data.iter().map(|(o, _)| *o).collect::<Vec<_>>(), [a0, b0, a1]);
    assert_eq!(data[0].1.previous_offset, Some(0));
    assert_eq!(data[1].1.previous_offset, Some(0));
    assert_eq!(data[1].1.timestamp, None);
    assert_eq!(data[1].1.flags & data_flags::TIMESTAMP, 0);
    assert_eq!(data[2].1.previous_offset, Some(a1 - a0));
    assert_eq!(data[2].1.id, a);
    assert_eq!(data[2].1.payload, [3]);
}

#[test]
fn index_block_lists_records_and_its_size() {
    let mut writer = FileWriter::new(Vec::new(), WriterOptions::default()).unwrap();
    let schema = Schema::Object(vec![Field::new("x", Schema::FixedUInt(1))]).to_binary();
    let a = writer.allocate_id("a");
    let b = writer.allocate_id("b");
    let _never_schema = writer.allocate_id("c");
    writer.write_schema(a, &schema).unwrap();
    writer.write_schema(b, &schema).unwrap();
    writer.write_data(a, Some(1), &[1]).unwrap();
    let last_a = writer.write_data(a, Some(2), &[2]).unwrap();
    let file = writer.close().unwrap();

    let all = blocks(&file);
    let index = all.last().unwrap();
    assert_eq!(index.kind, block_type::INDEX);
    let index_len = index.header_len + index.body.len();
    assert_eq!(index.offset as usize + index_len, file.len());
    assert!(file.ends_with(format::INDEX_TRAILER));
    let size_at = file.len() - 12;
    let trailer_size = u32::from_le_bytes(file[size_at..size_at + 4].try_into().unwrap());
    assert_eq!(trailer_size as usize, index_len, "trailer size = whole index block");

    let schema_offsets: Vec<u64> = all.iter().filter(|b| b.kind == block_type::SCHEMA).map(|b| b.offset).collect();
    let body = &index.body;
    let mut pos = 0;
    assert_eq!(read_varuint(body, &mut pos).unwrap(), 0);
    assert_eq!(read_varuint(body, &mut pos).unwrap(), 2, "only records with a schema");
    assert_eq!(read_varuint(body, &mut pos).unwrap(), a);
    assert_eq!(read_u64(body, &mut pos).unwrap(), schema_offsets[0]);
    assert_eq!(read_u64(body, &mut pos).unwrap(), last_a);
    assert_eq!(read_varuint(body, &mut pos).unwrap(), b);
    assert_eq!(read_u64(body, &mut pos).unwrap(), schema_offsets[1]);
    assert_eq!(read_u64(body, &mut pos).unwrap(), u64::MAX, "no data: all ones");
}

#[test]
fn index_size_is_right_when_the_size_varuint_takes_two_bytes() {
    let mut writer = FileWriter::new(Vec::new(), WriterOptions::default()).unwrap();
    let schema = Schema::Object(vec![Field::new("x", Schema::FixedUInt(1))]).to_binary();
    for i in 0..20 {
        let id = writer.allocate_id(&format!("r{i}"));
        writer.write_schema(id, &schema).unwrap();
    }
    let file = writer.close().unwrap();
    let index = blocks(&file).pop().unwrap();
    assert_eq!(index.header_len, 3);
    let size_at = file.len() - 12;
    let trailer_size = u32::from_le_bytes(file[size_at..size_at + 4].try_into().unwrap());
    assert_eq!(trailer_size as usize, index.header_len + index.body.len());
}

#[test]
fn seek_markers_about_once_per_second() {
    let mut writer = FileWriter::new(Vec::new(), WriterOptions::default()).unwrap();
    let schema = Schema::Object(vec![Field::new("x", Schema::FixedUInt(4))]).to_binary();
    let fast = writer.allocate_id("fast");
    let slow = writer.allocate_id("slow");
    writer.write_schema(fast, &schema).unwrap();
    writer.write_schema(slow, &schema).unwrap();
    let t0 = 1_700_000_000_000_000i64;
    // 10 s of 100 Hz data, plus a slow record every 3 s.
    for i in 0..1000i64 {
        let ts = t0 + i * 10_000;
        writer.write_data(fast, Some(ts), &(i as u32).to_le_bytes()).unwrap();
        if i % 300 == 0 {
            writer.write_data(slow, Some(ts), &[0; 4]).unwrap();
        }
    }
    let file = writer.close().unwrap();
    let all = blocks(&file);
    let markers: Vec<&Block> = all.iter().filter(|b| b.kind == block_type::SEEK_MARKER).collect();
    assert_eq!(markers.len(), 9, "one per second after the first timestamp");

    let mut last_data: BTreeMap<u64, u64> = BTreeMap::new();
    let mut previous_marker_ts = None;
    for block in &all {
        if block.kind == block_type::DATA {
            last_data.insert(parse_data(block, &file).id, block.offset);
            continue;
        }
        if block.kind != block_type::SEEK_MARKER {
            continue;
        }
        let b = &block.body;
        let mut pos = 0;
        assert_eq!(read_u64(b, &mut pos).unwrap(), format::SEEK_MARKER_MAGIC);
        assert_eq!(&b[..8], [0x64, 0x75, 0x86, 0x97, 0xa8, 0xb9, 0xca, 0xfd]);
        let crc = read_u32(b, &mut pos).unwrap();
        let header_len = b[pos] as usize;
        pos += 1;
        assert_eq!(header_len, block.header_len);
        let mut whole = file[block.offset as usize..block.offset as usize + block.header_len + b.len()].to_vec();
        whole[header_len + 8..header_len + 12].fill(0);
        assert_eq!(format::crc32(&whole), crc, "CRC over type+size+body with the CRC zeroed");
        assert_eq!(read_varuint(b, &mut pos).unwrap(), 0);
        let ts = read_i64(b, &mut pos).unwrap();
        if let Some(prev) = previous_marker_ts {
            assert_eq!(ts - prev, 1_000_000);
        } else {
            assert_eq!(ts, t0 + 1_000_000);
        }
        previous_marker_ts = Some(ts);
        let n = read_varuint(b, &mut pos).unwrap();
        assert_eq!(n as usize, last_data.len());
        for (&id, &offset) in &last_data {
            assert_eq!(read_varuint(b, &mut pos).unwrap(), id);
            assert_eq!(read_varuint(b, &mut pos).unwrap(), block.offset - offset);
        }
        assert_eq!(pos, b.len());
        // A reader that finds the magic can back up to the block start.
        let magic_last_byte = block.offset as usize + header_len + 7;
        assert_eq!(magic_last_byte - (7 + header_len), block.offset as usize);
    }
}

#[test]
fn typed_layer_registers_and_writes() {
    let mut writer = FileWriter::new(Vec::new(), quiet_options()).unwrap();
    let handle = writer.register::<Joint>("joint").unwrap();
    assert_eq!(handle.id(), 1);
    // Registering the same type again is harmless; a different schema is refused.
    assert_eq!(writer.register::<Joint>("joint").unwrap().id(), 1);
    assert!(writer.register::<Nested>("joint").is_err());
    writer.write(&handle, 42, &Joint { id: 1, position: 0.25, fault: Some(3) }).unwrap();
    let before = writer.bytes_written();
    assert!(writer.write_data(99, Some(1), &[]).is_err(), "unknown id");
    assert_eq!(writer.bytes_written(), before);
    let file = writer.close().unwrap();
    let all = blocks(&file);
    let schema_block = &all[0];
    let mut pos = 0;
    assert_eq!(read_varuint(&schema_block.body, &mut pos).unwrap(), 1);
    assert_eq!(read_varuint(&schema_block.body, &mut pos).unwrap(), 0);
    assert_eq!(format::read_string(&schema_block.body, &mut pos).unwrap(), "joint");
    assert_eq!(Schema::parse_binary(&schema_block.body[pos..]).unwrap(), schema_of::<Joint>().unwrap());
    let data = parse_data(&all[1], &file);
    assert_eq!(data.timestamp, Some(42));
    let mut expected = vec![1];
    expected.extend(0.25f32.to_le_bytes());
    expected.extend([1, 3, 0]);
    assert_eq!(data.payload, expected);
}

#[test]
fn create_writes_a_file() {
    let path = std::env::temp_dir().join(format!("tlog-writer-test-{}.log", std::process::id()));
    let mut writer = FileWriter::create(&path).unwrap();
    let handle = writer.register::<Joint>("joint").unwrap();
    writer.write(&handle, 1, &Joint::default()).unwrap();
    let size = writer.finish().unwrap();
    drop(writer);
    let file = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(file.len() as u64, size);
    assert!(file.starts_with(b"TLOG0003\0") && file.ends_with(b"TLOGIDEX"));
}

#[test]
fn create_never_overwrites_a_file_or_follows_a_link() {
    let dir = std::env::temp_dir().join(format!("tlog-writer-excl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let existing = dir.join("earlier.tlog");
    std::fs::write(&existing, b"an earlier log").unwrap();
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, b"outside file").unwrap();
    let link = dir.join("link.tlog");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    for path in [&existing, &link] {
        let error = FileWriter::create(path).err().expect("refused").to_string();
        assert!(error.contains("already exists") && error.contains("never overwrites"), "{error}");
    }
    assert_eq!(std::fs::read(&existing).unwrap(), b"an earlier log");
    assert_eq!(std::fs::read(&victim).unwrap(), b"outside file");
    std::fs::remove_dir_all(&dir).unwrap();
}
