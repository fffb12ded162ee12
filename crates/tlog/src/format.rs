//! Wire-level constants and primitives of the TLOG0003 format (mjlib's telemetry log).
//!
//! Everything both the writer and the reader need to agree on lives here: the file magic,
//! block type and flag numbers, varuint/varint/string encodings, the CRC, and the one error
//! type of the crate. The decoding helpers work on untrusted bytes, so they must never panic,
//! never index out of bounds and never allocate based on a length read from the file; they
//! return a typed [`TlogError`] instead.

use std::fmt;

/// The eight bytes every log starts with; a varuint header flags field (0) follows.
pub const FILE_MAGIC: &[u8; 8] = b"TLOG0003";

/// Block type numbers (the first varuint of every block).
pub mod block_type {
    /// Record name + binary schema, written once per record.
    pub const SCHEMA: u64 = 1;
    /// One serialized instance of a record.
    pub const DATA: u64 = 2;
    /// Written on close: where every record's schema and last data block are.
    pub const INDEX: u64 = 3;
    /// Reserved by mjlib for compression dictionaries; never written.
    pub const DICTIONARY: u64 = 4;
    /// Timestamp + magic so a reader can regain framing after a random seek.
    pub const SEEK_MARKER: u64 = 5;
}

/// Flag bits of a data block. Optional fields appear in bit order before the payload.
pub mod data_flags {
    /// A varuint "this block's start minus the previous block of the same id" follows.
    pub const PREVIOUS_OFFSET: u64 = 0x01;
    /// An int64 timestamp (µs since the UNIX epoch) follows.
    pub const TIMESTAMP: u64 = 0x02;
    /// A u32 CRC-32 of the whole block (CRC field zeroed) follows.
    pub const CHECKSUM: u64 = 0x04;
    /// The payload is raw (unframed) Snappy.
    pub const SNAPPY: u64 = 0x10;
    /// rtloop extension: the payload is a zstd frame. Opt-in only, because mjlib's readers
    /// reject unknown flag bits and so cannot open blocks carrying it.
    pub const ZSTD: u64 = 0x20;
    /// Every bit this crate understands; readers reject anything else.
    pub const KNOWN: u64 = PREVIOUS_OFFSET | TIMESTAMP | CHECKSUM | SNAPPY | ZSTD;
}

/// The 8-byte marker value (stored little-endian: `64 75 86 97 a8 b9 ca fd`).
pub const SEEK_MARKER_MAGIC: u64 = 0xfdca_b9a8_9786_7564;

/// The last eight bytes of a file that was closed cleanly (end of the index block).
pub const INDEX_TRAILER: &[u8; 8] = b"TLOGIDEX";

/// The longest legal varuint: 10 × 7 bits covers 64 bits.
pub const MAX_VARUINT_LEN: usize = 10;

/// Everything that can go wrong reading or writing a log.
///
/// `Display` gives one sentence without a trailing period, fit to follow "cannot read the log
/// FILE: "; variants other than [`TlogError::Io`] never pretend to be I/O errors. A variant
/// that wraps another error returns it from `source()`. The sentence of an export or plot
/// failure leaves the cause's words to the caller that prints the chain (the command does);
/// [`TlogError::Io`] and [`TlogError::Compression`], which a log being written can meet, keep
/// them: the writer records that sentence alone ([`crate::realtime::LogStats`]), and so does
/// a run that fails to create its log.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlogError {
    /// The underlying file or stream failed: its sentence is the operating system's.
    Io(std::io::Error),
    /// The input holds no bytes at all.
    Empty,
    /// The path is not a regular file (a device, FIFO, socket or directory, named here):
    /// a log is read by positioned reads, and a device or FIFO is never even opened (a FIFO
    /// would block, a device may act on being opened).
    NotAFile { kind: &'static str },
    /// The file does not start with `TLOG0003`.
    BadMagic,
    /// Input ended inside a value or block that starts (or sits) at `offset`.
    Truncated { offset: u64 },
    /// A block's stored CRC does not match its contents.
    BadCrc { offset: u64 },
    /// A block uses flag bits this crate does not know.
    UnknownFlags { offset: u64, flags: u64 },
    /// Structurally invalid content (bad type code, overlong varuint, bad UTF-8, ...).
    Malformed { offset: u64, what: String },
    /// A Rust value cannot be expressed in the format (e.g. a non-unit enum variant).
    Unsupported(String),
    /// A compression codec (zstd, Snappy) failed.
    Compression(Box<dyn std::error::Error + Send + Sync>),
    /// The log has no record called `name`; `records` are the ones it has.
    NoRecord { name: String, records: Vec<String> },
    /// The schema of `record` (its block at byte `offset`) does not parse, so none of its
    /// items decodes; `reason` is the schema parser's.
    UnusableSchema { record: String, offset: u64, reason: String },
    /// A plot field that names no record (`records`: some the log has).
    UnknownField { field: String, records: Vec<String> },
    /// A plot field whose record has no such column; `available` are the columns it has
    /// (empty: no item of the record decodes).
    NoColumn { field: String, record: String, path: String, available: Vec<String> },
    /// No plot field has a value to draw: why for each field, then the damage found.
    NothingToDraw { empty: Vec<(String, String)>, problems: Vec<String> },
    /// An MCAP message or schema could not be encoded as JSON.
    McapJson(serde_json::Error),
    /// The MCAP writer failed.
    Mcap(mcap::McapError),
    /// The PNG encoder failed.
    Png(rtloop_output::png::EncodingError),
    /// Drawing the plot failed (the drawing library's error, whose type is generic over the
    /// backend).
    Draw(Box<dyn std::error::Error + Send + Sync>),
    /// A plot size outside `min..=max` pixels.
    PlotSize { width: u32, height: u32, min: u32, max: u32 },
    /// A plot without fields.
    NoFields,
    /// More plot fields than panels fit in `height` pixels (at most `most`).
    TooManyPanels { fields: usize, height: u32, most: usize },
}

/// The most record or column names an error lists.
const SUGGESTIONS: usize = 8;

/// "it has records a, b, c" or "it has no records at all (no schema blocks)".
pub fn describe_records(names: &[String]) -> String {
    if names.is_empty() {
        "it has no records at all (no schema block could be read)".to_string()
    } else {
        format!("it has {}", names.join(", "))
    }
}

impl fmt::Display for TlogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlogError::Io(e) => write!(f, "{e}"),
            TlogError::Empty => {
                write!(f, "the file is empty (0 bytes): nothing was ever logged to it, so there is nothing to read")
            }
            TlogError::NotAFile { kind } => write!(
                f,
                "it is {kind}, not a log file; give the path of a regular file (a stream must be saved to a file \
                 first)"
            ),
            TlogError::BadMagic => write!(f, "not a TLOG0003 log: it does not start with the bytes \"TLOG0003\""),
            TlogError::Truncated { offset } => write!(f, "the data ends inside the block or value at byte {offset}"),
            TlogError::BadCrc { offset } => write!(f, "CRC mismatch in the block at byte {offset}"),
            TlogError::UnknownFlags { offset, flags } => {
                write!(f, "unknown flags {flags:#x} in the block at byte {offset}")
            }
            TlogError::Malformed { offset, what } => write!(f, "malformed data at byte {offset}: {what}"),
            TlogError::Unsupported(what) => write!(f, "unsupported by the tlog format: {what}"),
            TlogError::Compression(e) => write!(f, "compression error: {e}"),
            TlogError::NoRecord { name, records } => {
                write!(f, "the log has no record '{name}'; {}", describe_records(records))
            }
            TlogError::UnusableSchema { record, offset, reason } => write!(
                f,
                "the schema of record '{record}' (block at byte {offset}) does not parse, so none of its items can \
                 be decoded: {reason}"
            ),
            TlogError::UnknownField { field, records } => {
                let names: Vec<String> = records.iter().take(SUGGESTIONS).cloned().collect();
                write!(
                    f,
                    "unknown field '{field}': a field is record.path and no record name prefixes it; {}",
                    describe_records(&names)
                )
            }
            TlogError::NoColumn { field, record, path, available } => {
                if available.is_empty() {
                    write!(
                        f,
                        "unknown field '{field}': record '{record}' has no item that decodes, so it has no columns"
                    )
                } else {
                    let shown: Vec<&str> = available.iter().take(SUGGESTIONS).map(String::as_str).collect();
                    let more = if available.len() > SUGGESTIONS { ", …" } else { "" };
                    write!(
                        f,
                        "unknown field '{field}': record '{record}' has no column '{path}'; it has {}{more}",
                        shown.join(", ")
                    )
                }
            }
            TlogError::NothingToDraw { empty, problems } => {
                let why: Vec<String> = empty.iter().map(|(field, why)| format!("field '{field}' {why}")).collect();
                let problems: String = problems.iter().map(|p| format!("; {p}")).collect();
                write!(f, "nothing to draw: {}{problems}", why.join("; "))
            }
            TlogError::McapJson(_) => f.write_str("mcap"),
            TlogError::Mcap(_) => f.write_str("the MCAP writer failed"),
            TlogError::Png(_) => f.write_str("the PNG encoder failed"),
            TlogError::Draw(_) => f.write_str("drawing the plot failed"),
            TlogError::PlotSize { width, height, min, max } => write!(
                f,
                "a plot of {width}×{height} pixels cannot be drawn: give a width and height from {min} to {max}"
            ),
            TlogError::NoFields => f.write_str("no field to plot: name at least one"),
            TlogError::TooManyPanels { fields, height, most } => write!(
                f,
                "{fields} fields do not fit as panels in a {height}-pixel-high plot (at most {most}): plot fewer \
                 fields, or all on one axis"
            ),
        }
    }
}

impl std::error::Error for TlogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlogError::Io(e) => Some(e),
            TlogError::Compression(e) | TlogError::Draw(e) => Some(e.as_ref()),
            TlogError::McapJson(e) => Some(e),
            TlogError::Mcap(e) => Some(e),
            TlogError::Png(e) => Some(e),
            _ => None,
        }
    }
}

/// Lets the serde-based schema builder and data encoder report their errors directly.
impl serde::ser::Error for TlogError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        TlogError::Unsupported(msg.to_string())
    }
}

impl From<std::io::Error> for TlogError {
    fn from(e: std::io::Error) -> Self {
        TlogError::Io(e)
    }
}

/// Append `v` as LEB128 (7 bits per byte, least significant group first).
pub fn write_varuint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let low = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(low);
            return;
        }
        out.push(low | 0x80);
    }
}

/// Number of bytes [`write_varuint`] produces for `v` (1..=10).
pub fn varuint_len(v: u64) -> usize {
    let bits = 64 - v.leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

/// Decode a varuint at `*pos`, advancing `*pos` past it.
///
/// Fails (without moving `*pos`) on truncation, on more than 10 bytes, and on a 10th byte
/// whose bits would overflow 64 bits.
pub fn read_varuint(buf: &[u8], pos: &mut usize) -> Result<u64, TlogError> {
    let start = *pos;
    let mut result = 0u64;
    for i in 0..MAX_VARUINT_LEN {
        let Some(&byte) = buf.get(start.saturating_add(i)) else {
            return Err(TlogError::Truncated { offset: start as u64 });
        };
        let group = u64::from(byte & 0x7f);
        // The 10th byte may only contribute the single remaining bit.
        if i == MAX_VARUINT_LEN - 1 && group > 1 {
            return Err(malformed(start, "varuint overflows 64 bits"));
        }
        result |= group << (7 * i);
        if byte & 0x80 == 0 {
            *pos = start + i + 1;
            return Ok(result);
        }
    }
    Err(malformed(start, "varuint longer than 10 bytes"))
}

/// Append a signed value zigzag-encoded as a varuint (small magnitudes stay short).
pub fn write_varint(out: &mut Vec<u8>, v: i64) {
    write_varuint(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// Decode a zigzag varint.
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Result<i64, TlogError> {
    let z = read_varuint(buf, pos)?;
    Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
}

/// Append varuint length + the bytes (the encoding of both `string` and `bytes`).
pub fn write_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    write_varuint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Append a string as varuint length + UTF-8 bytes.
pub fn write_string(out: &mut Vec<u8>, s: &str) {
    write_bytes(out, s.as_bytes());
}

/// Decode varuint length + bytes, borrowing from `buf`.
pub fn read_bytes<'a>(buf: &'a [u8], pos: &mut usize) -> Result<&'a [u8], TlogError> {
    let start = *pos;
    let mut p = start;
    let len = read_varuint(buf, &mut p)?;
    let end = usize::try_from(len).ok().and_then(|l| p.checked_add(l)).filter(|&e| e <= buf.len());
    let Some(end) = end else {
        return Err(TlogError::Truncated { offset: start as u64 });
    };
    *pos = end;
    Ok(&buf[p..end])
}

/// Decode varuint length + UTF-8, borrowing from `buf`.
pub fn read_string<'a>(buf: &'a [u8], pos: &mut usize) -> Result<&'a str, TlogError> {
    let start = *pos;
    let mut p = start;
    let bytes = read_bytes(buf, &mut p)?;
    let s = std::str::from_utf8(bytes).map_err(|_| malformed(start, "string is not UTF-8"))?;
    *pos = p;
    Ok(s)
}

/// Read `N` raw bytes at `*pos` (for fixed-width little-endian fields).
pub fn read_array<const N: usize>(buf: &[u8], pos: &mut usize) -> Result<[u8; N], TlogError> {
    let start = *pos;
    let bytes = start
        .checked_add(N)
        .and_then(|end| buf.get(start..end))
        .ok_or(TlogError::Truncated { offset: start as u64 })?;
    let mut out = [0u8; N];
    out.copy_from_slice(bytes);
    *pos = start + N;
    Ok(out)
}

/// Read a little-endian u32.
pub fn read_u32(buf: &[u8], pos: &mut usize) -> Result<u32, TlogError> {
    read_array::<4>(buf, pos).map(u32::from_le_bytes)
}

/// Read a little-endian u64.
pub fn read_u64(buf: &[u8], pos: &mut usize) -> Result<u64, TlogError> {
    read_array::<8>(buf, pos).map(u64::from_le_bytes)
}

/// Read a little-endian i64.
pub fn read_i64(buf: &[u8], pos: &mut usize) -> Result<i64, TlogError> {
    read_array::<8>(buf, pos).map(i64::from_le_bytes)
}

/// Standard CRC-32 (IEEE, reflected; identical to `zlib.crc32`).
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

fn malformed(offset: usize, what: &str) -> TlogError {
    TlogError::Malformed { offset: offset as u64, what: what.to_string() }
}

/// The file offset an error refers to, when it has one.
pub fn error_offset(error: &TlogError) -> Option<u64> {
    match error {
        TlogError::Truncated { offset }
        | TlogError::BadCrc { offset }
        | TlogError::UnknownFlags { offset, .. }
        | TlogError::Malformed { offset, .. } => Some(*offset),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varuint_known_encodings() {
        let mut out = Vec::new();
        write_varuint(&mut out, 128);
        assert_eq!(out, [0x80, 0x01]);
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut out = Vec::new();
            write_varuint(&mut out, v);
            assert_eq!(out.len(), varuint_len(v));
            let mut pos = 0;
            assert_eq!(read_varuint(&out, &mut pos).unwrap(), v);
            assert_eq!(pos, out.len());
        }
    }

    #[test]
    fn varuint_rejects_garbage_without_panicking() {
        let mut pos = 0;
        assert!(matches!(read_varuint(&[0x80], &mut pos), Err(TlogError::Truncated { .. })));
        assert_eq!(pos, 0);
        assert!(read_varuint(&[0xff; 11], &mut pos).is_err());
        assert!(read_varuint(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02], &mut pos).is_err());
        assert!(read_varuint(&[], &mut pos).is_err());
    }

    #[test]
    fn varint_zigzag() {
        for v in [0i64, -1, 1, -64, 64, i64::MIN, i64::MAX] {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            let mut pos = 0;
            assert_eq!(read_varint(&out, &mut pos).unwrap(), v);
        }
        let mut out = Vec::new();
        write_varint(&mut out, -1);
        assert_eq!(out, [1]);
    }

    #[test]
    fn strings_and_crc() {
        let mut out = Vec::new();
        write_string(&mut out, "test");
        let mut pos = 0;
        assert_eq!(read_string(&out, &mut pos).unwrap(), "test");
        let mut pos = 0;
        assert!(read_string(&[5, b'a'], &mut pos).is_err());
        assert!(read_string(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], &mut pos).is_err());
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }
}
