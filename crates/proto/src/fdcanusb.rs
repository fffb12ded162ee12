//! The fdcanusb text-line protocol, both directions, with the optional ` *XX` CRC-8 suffix.
//!
//! What it is for: turning a [`CanFdFrame`] into the exact line an fdcanusb adapter (or a
//! moteus on its UART port) expects — `can send 8001 01000A…50 BF` — and the device's answers
//! (`OK`, `ERR <text>`, `rcv <id> <data> E B F`) back into typed values; and the reverse, for a
//! simulated device: parse the host's `can send` lines, write `OK`/`ERR`/`rcv` answers. A
//! device should answer with the CRC suffix whenever the host's line carried one
//! ([`ParsedLine::had_crc`]), because the moteus Python client, once it has switched the
//! suffix on, drops every answer line without a valid one.
//!
//! What it must never do: allocate, panic, or trust its input. Every byte string fed to
//! [`parse_line`] ends in a [`ParsedLine`] or a [`LineError`]; every writer stops with
//! [`LineError::BufferTooSmall`] instead of writing past the caller's buffer. It performs no
//! I/O: splitting a byte stream into lines is the transport's job.
//!
//! It also never changes a payload: the writers put the frame's bytes on the line as they are
//! and the parsers keep the data exactly as received. Padding a payload to a valid CAN-FD
//! length with 0x50 is the caller's job ([`CanFdFrame::pad_to_dlc`]) — a real fdcanusb fills
//! the gap with 0x00, which a moteus would try to decode as a subframe.

use core::fmt;

use crate::frame::{CanFdFrame, FrameFlags, MAX_DATA};

/// The longest line (without its line ending) [`parse_line`] accepts and the writers can
/// produce. The longest line either side writes is about 155 bytes: `can send `, an 8-digit
/// id, 128 data digits, `BFR`, ` *XX` and the newline.
pub const MAX_LINE: usize = 200;

/// The largest identifier a CAN frame can carry (29 bits).
const MAX_ID: u32 = 0x1FFF_FFFF;

/// The largest identifier a standard (11-bit) frame can carry; anything above is extended.
const MAX_STANDARD_ID: u32 = 0x7FF;

/// Polynomial of the line CRC (x^8 + x^7 + x^4 + x^2 + x + 1, MSB first).
const CRC8_POLY: u8 = 0x97;

/// Byte-at-a-time table for [`crc8`], built at compile time.
const CRC8_TABLE: [u8; 256] = crc8_table();

// Evaluated at compile time into a const: any out-of-bounds index or overflow here fails
// the build, so it can never panic at run time.
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
const fn crc8_table() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x80 != 0 { (crc << 1) ^ CRC8_POLY } else { crc << 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

/// CRC-8 of the fdcanusb line suffix: polynomial 0x97, initial value 0, MSB first, no final
/// xor. The suffix ` *XX` carries the CRC of everything before the `*`, including the space.
pub fn crc8(data: &[u8]) -> u8 {
    data.iter()
        // A u8 index into a 256-entry table is always in bounds; `get` just says so to clippy.
        .fold(0u8, |crc, &b| CRC8_TABLE.get(usize::from(crc ^ b)).copied().unwrap_or(0))
}

/// One classified protocol line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'a> {
    /// Host → device: a frame to put on the bus (`can send`, also `can std` / `can ext`,
    /// which the fdcanusb firmware accepts to force the id type).
    CanSend(CanFdFrame),
    /// Device → host: a frame seen on the bus.
    Rcv(CanFdFrame),
    /// Device → host: the previous command succeeded.
    Ok,
    /// Device → host: the previous command failed; the text after `ERR`.
    Err(&'a [u8]),
    /// Any other line (other `can` subcommands, `conf`, `tel`, noise), CRC suffix removed.
    /// A simulated device answers these with `ERR`.
    Other(&'a [u8]),
}

/// A line and how it was framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedLine<'a> {
    /// What the line says.
    pub line: Line<'a>,
    /// The line carried a valid ` *XX` suffix; a device answers in the same mode.
    pub had_crc: bool,
}

/// Why a line could not be parsed or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LineError {
    /// The CRC suffix does not match the line: `expected` is computed, `found` is written.
    BadCrc {
        /// CRC-8 of the line text up to the `*`.
        expected: u8,
        /// The value after the `*`.
        found: u8,
    },
    /// A non-hex character in the data field.
    BadHex,
    /// An odd number of hex digits in the data field.
    OddHexDigits,
    /// More than 64 data bytes.
    DataTooLong,
    /// The id field is empty, not hex, wider than 29 bits, or (for `can std`) wider than
    /// 11 bits. Writers report a frame id wider than 29 bits the same way.
    BadId,
    /// A flag that is not one of `B b F f R r` (`can send`) or `E e B b F f R r` (`rcv`).
    BadFlag,
    /// A `can send` / `rcv` line without its id or data field.
    MissingField,
    /// The line (without its line ending) is longer than [`MAX_LINE`].
    TooLong,
    /// Nothing but a line ending or blanks.
    Empty,
    /// The output buffer is too small for the line.
    BufferTooSmall,
    /// An `ERR` text with a byte that would break the line framing: a control character, a
    /// non-ASCII byte, or `*` (which a reader would take for a CRC suffix).
    BadText,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LineError::BadCrc { expected, found } => {
                write!(f, "line CRC is {found:02X}, expected {expected:02X}")
            }
            LineError::BadHex => f.write_str("non-hex character in data"),
            LineError::OddHexDigits => f.write_str("odd number of hex digits in data"),
            LineError::DataTooLong => f.write_str("more than 64 data bytes"),
            LineError::BadId => f.write_str("bad CAN id"),
            LineError::BadFlag => f.write_str("unknown flag"),
            LineError::MissingField => f.write_str("missing id or data field"),
            LineError::TooLong => write!(f, "line longer than {MAX_LINE} bytes"),
            LineError::Empty => f.write_str("empty line"),
            LineError::BufferTooSmall => f.write_str("output buffer too small"),
            LineError::BadText => f.write_str("ERR text contains a byte that breaks framing"),
        }
    }
}

impl core::error::Error for LineError {}

/// Split a trailing CRC suffix off a line (line ending already removed).
///
/// Returns the line text before the suffix with trailing blanks removed, and whether a
/// suffix was present. A suffix is `*` plus two hex digits (either case) at the very end;
/// its CRC covers everything before the `*`, so the usual ` *XX` includes the space. Like
/// the moteus clients, a `*` without a space before it still counts as a suffix.
pub fn split_crc(line: &[u8]) -> Result<(&[u8], bool), LineError> {
    let (text, found) = match line {
        [text @ .., b'*', hi, lo] => match (hex_value(*hi), hex_value(*lo)) {
            (Some(hi), Some(lo)) => (text, (hi << 4) | lo),
            _ => return Ok((line, false)),
        },
        _ => return Ok((line, false)),
    };
    let expected = crc8(text);
    if expected != found {
        return Err(LineError::BadCrc { expected, found });
    }
    Ok((trim_end(text), true))
}

/// Parse one line of either direction. Trailing `\r`/`\n` (and blanks) are removed first,
/// then the optional CRC suffix is checked and removed.
///
/// `can send <id> <data> [flags]`: the flags run together (`BF`); a flag that is absent
/// takes the fdcanusb firmware's default, which is what the frame's id implies for moteus:
/// FD and bitrate switch on (the firmware's `can.fdcan_frame` / `can.bitrate_switch` config,
/// both on by default), extended when the id is above 0x7FF (the firmware's `id >= 2048`
/// rule), remote off. Later flags override earlier ones, as in the firmware. `can std` /
/// `can ext` force the id type.
///
/// `rcv <id> <data> [E|e] [B|b] [F|f] [R|r] …`: space-separated single-letter flags in any
/// order; an absent flag is off (the writer only emits set flags), except that an id above
/// 0x7FF is always extended. Longer tokens that start with a letter (the firmware's `f-1`
/// filter index, timestamps such as `t123`) are ignored.
///
/// In both, the id is 1–8 hex digits (leading zeros allowed, ≤ 29 bits) and the data field
/// may be empty (`rcv 0100  E B F`). Parsed frames keep their data exactly as sent; bytes of
/// `data` past `len` are zero.
pub fn parse_line(line: &[u8]) -> Result<ParsedLine<'_>, LineError> {
    let line = trim_end(line);
    if line.len() > MAX_LINE {
        return Err(LineError::TooLong);
    }
    let (text, had_crc) = split_crc(line)?;
    let text = trim_start(text);
    if text.is_empty() {
        return Err(LineError::Empty);
    }
    let line = classify(text)?;
    Ok(ParsedLine { line, had_crc })
}

fn classify(text: &[u8]) -> Result<Line<'_>, LineError> {
    if text == b"OK" {
        return Ok(Line::Ok);
    }
    if text == b"ERR" {
        return Ok(Line::Err(&[]));
    }
    if let Some(rest) = text.strip_prefix(b"ERR ") {
        return Ok(Line::Err(trim_start(rest)));
    }
    if matches!(text, b"rcv" | b"can send" | b"can std" | b"can ext") {
        return Err(LineError::MissingField);
    }
    if let Some(rest) = text.strip_prefix(b"rcv ") {
        return parse_rcv(rest).map(Line::Rcv);
    }
    if let Some(rest) = text.strip_prefix(b"can send ") {
        return parse_can_send(rest, None).map(Line::CanSend);
    }
    if let Some(rest) = text.strip_prefix(b"can std ") {
        return parse_can_send(rest, Some(false)).map(Line::CanSend);
    }
    if let Some(rest) = text.strip_prefix(b"can ext ") {
        return parse_can_send(rest, Some(true)).map(Line::CanSend);
    }
    Ok(Line::Other(text))
}

/// The id and data fields, then the rest. Fields are split on single spaces so that an
/// empty data field (two spaces in a row) stays a field, as both the fdcanusb firmware and
/// our writers produce it.
fn id_and_data(fields: &[u8]) -> Result<(u32, CanFdFrame, &[u8]), LineError> {
    let mut parts = fields.splitn(3, |&b| b == b' ');
    let id = parse_id(parts.next().ok_or(LineError::MissingField)?)?;
    let data = parts.next().ok_or(LineError::MissingField)?;
    let rest = parts.next().unwrap_or(&[]);
    let mut frame = CanFdFrame { id, ..CanFdFrame::default() };
    frame.len = parse_data(data, &mut frame.data)?;
    Ok((id, frame, rest))
}

fn parse_can_send(fields: &[u8], extended: Option<bool>) -> Result<CanFdFrame, LineError> {
    let (id, mut frame, flags) = id_and_data(fields)?;
    let extended = extended.unwrap_or(id > MAX_STANDARD_ID);
    if !extended && id > MAX_STANDARD_ID {
        return Err(LineError::BadId);
    }
    frame.flags = FrameFlags { extended, fd: true, brs: true, remote: false };
    // The firmware reads every character after the data as a flag; blanks between flags are
    // tolerated here because they carry no meaning.
    for &c in flags {
        match c {
            b'B' => frame.flags.brs = true,
            b'b' => frame.flags.brs = false,
            b'F' => frame.flags.fd = true,
            b'f' => frame.flags.fd = false,
            b'R' => frame.flags.remote = true,
            b'r' => frame.flags.remote = false,
            b' ' => {}
            _ => return Err(LineError::BadFlag),
        }
    }
    Ok(frame)
}

fn parse_rcv(fields: &[u8]) -> Result<CanFdFrame, LineError> {
    let (id, mut frame, flags) = id_and_data(fields)?;
    frame.flags = FrameFlags { extended: id > MAX_STANDARD_ID, fd: false, brs: false, remote: false };
    for token in flags.split(|&b| b == b' ') {
        match token {
            [] => {}
            [b'E'] => frame.flags.extended = true,
            // An id that needs 29 bits cannot have come from a standard frame.
            [b'e'] => frame.flags.extended = id > MAX_STANDARD_ID,
            [b'B'] => frame.flags.brs = true,
            [b'b'] => frame.flags.brs = false,
            [b'F'] => frame.flags.fd = true,
            [b'f'] => frame.flags.fd = false,
            [b'R'] => frame.flags.remote = true,
            [b'r'] => frame.flags.remote = false,
            // Annotations such as the firmware's filter index (`f-1`) or a timestamp.
            [first, _, ..] if first.is_ascii_alphabetic() && token.iter().all(u8::is_ascii_graphic) => {}
            _ => return Err(LineError::BadFlag),
        }
    }
    Ok(frame)
}

fn parse_id(field: &[u8]) -> Result<u32, LineError> {
    if field.is_empty() {
        return Err(LineError::BadId);
    }
    let mut id: u32 = 0;
    for &c in field {
        let digit = hex_value(c).ok_or(LineError::BadId)?;
        // Checked before every shift, so leading zeros are fine and nothing overflows.
        if id > MAX_ID >> 4 {
            return Err(LineError::BadId);
        }
        id = (id << 4) | u32::from(digit);
    }
    if id > MAX_ID {
        return Err(LineError::BadId);
    }
    Ok(id)
}

/// Decode hex `field` into `out`, returning the byte count.
fn parse_data(field: &[u8], out: &mut [u8; MAX_DATA]) -> Result<u8, LineError> {
    if !field.len().is_multiple_of(2) {
        // Non-hex characters are the more useful report when both apply.
        if field.iter().any(|&c| hex_value(c).is_none()) {
            return Err(LineError::BadHex);
        }
        return Err(LineError::OddHexDigits);
    }
    if field.len() > 2 * MAX_DATA {
        return Err(LineError::DataTooLong);
    }
    let mut len = 0u8;
    for (pair, slot) in field.chunks_exact(2).zip(out.iter_mut()) {
        let (hi, lo) = match pair {
            [hi, lo] => (*hi, *lo),
            _ => return Err(LineError::OddHexDigits),
        };
        match (hex_value(hi), hex_value(lo)) {
            (Some(hi), Some(lo)) => *slot = (hi << 4) | lo,
            _ => return Err(LineError::BadHex),
        }
        // At most one step per output byte, so it cannot overflow.
        len = len.saturating_add(1);
    }
    Ok(len)
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        // Inside each matched range the subtraction cannot wrap.
        b'0'..=b'9' => Some(c.wrapping_sub(b'0')),
        b'a'..=b'f' => Some(c.wrapping_sub(b'a').wrapping_add(10)),
        b'A'..=b'F' => Some(c.wrapping_sub(b'A').wrapping_add(10)),
        _ => None,
    }
}

fn trim_end(mut s: &[u8]) -> &[u8] {
    while let [rest @ .., last] = s {
        if !last.is_ascii_whitespace() {
            break;
        }
        s = rest;
    }
    s
}

fn trim_start(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !first.is_ascii_whitespace() {
            break;
        }
        s = rest;
    }
    s
}

/// Appends to a caller buffer; every write is bounds-checked.
struct LineWriter<'a> {
    out: &'a mut [u8],
    pos: usize,
}

impl<'a> LineWriter<'a> {
    fn new(out: &'a mut [u8]) -> Self {
        LineWriter { out, pos: 0 }
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), LineError> {
        let end = self.pos.checked_add(bytes.len()).ok_or(LineError::BufferTooSmall)?;
        let dst = self.out.get_mut(self.pos..end).ok_or(LineError::BufferTooSmall)?;
        dst.copy_from_slice(bytes);
        self.pos = end;
        Ok(())
    }

    fn put_hex_byte(&mut self, b: u8, upper: bool) -> Result<(), LineError> {
        self.put(&[hex_digit(b >> 4, upper), hex_digit(b, upper)])
    }

    /// The id in at least 4 hex digits; with `whole_bytes`, an even digit count.
    fn put_id(&mut self, id: u32, whole_bytes: bool, upper: bool) -> Result<(), LineError> {
        let step: u32 = if whole_bytes { 2 } else { 1 };
        let mut digits: u32 = 4;
        while digits < 8 && id.checked_shr(digits.saturating_mul(4)).unwrap_or(0) != 0 {
            digits = digits.saturating_add(step);
        }
        for i in (0..digits).rev() {
            let nibble = id.checked_shr(i.saturating_mul(4)).unwrap_or(0);
            self.put(&[hex_digit(nibble as u8, upper)])?;
        }
        Ok(())
    }

    fn put_data(&mut self, frame: &CanFdFrame) -> Result<(), LineError> {
        for &b in frame_payload(frame)? {
            self.put_hex_byte(b, true)?;
        }
        Ok(())
    }

    /// Optional ` *XX`, then the newline; returns the line length.
    fn finish(mut self, crc: bool) -> Result<usize, LineError> {
        if crc {
            self.put(b" ")?;
            let sum = crc8(self.out.get(..self.pos).ok_or(LineError::BufferTooSmall)?);
            self.put(b"*")?;
            self.put_hex_byte(sum, true)?;
        }
        self.put(b"\n")?;
        Ok(self.pos)
    }
}

fn hex_digit(nibble: u8, upper: bool) -> u8 {
    let n = nibble & 0x0F;
    match (n, upper) {
        // n ≤ 15, so none of these can wrap.
        (0..=9, _) => b'0'.wrapping_add(n),
        (_, true) => b'A'.wrapping_add(n).wrapping_sub(10),
        (_, false) => b'a'.wrapping_add(n).wrapping_sub(10),
    }
}

/// The frame's payload, refusing (rather than truncating) a length above 64.
fn frame_payload(frame: &CanFdFrame) -> Result<&[u8], LineError> {
    frame.data.get(..usize::from(frame.len)).ok_or(LineError::DataTooLong)
}

fn check_id(frame: &CanFdFrame) -> Result<(), LineError> {
    if frame.id > MAX_ID {
        return Err(LineError::BadId);
    }
    Ok(())
}

/// Write the host → device line for `frame`, e.g. `can send 8001 01000A…50 BF\n`, as the
/// moteus Python client does (`{id:04x}`): id in lowercase hex with at least 4 digits, data in uppercase
/// hex exactly as the frame holds it (pad it first with [`CanFdFrame::pad_to_dlc`]), then
/// `B`/`b` and `F`/`f` always and `R` for a remote frame, so the device's defaults never
/// matter. A frame with an id ≤ 0x7FF marked extended is written as `can ext`, the only way
/// the firmware sends such a frame; an id above 0x7FF is always sent extended.
pub fn write_can_send(frame: &CanFdFrame, crc: bool, out: &mut [u8]) -> Result<usize, LineError> {
    check_id(frame)?;
    let mut w = LineWriter::new(out);
    if frame.flags.extended && frame.id <= MAX_STANDARD_ID {
        w.put(b"can ext ")?;
    } else {
        w.put(b"can send ")?;
    }
    w.put_id(frame.id, false, false)?;
    w.put(b" ")?;
    w.put_data(frame)?;
    w.put(b" ")?;
    w.put(if frame.flags.brs { b"B" } else { b"b" })?;
    w.put(if frame.flags.fd { b"F" } else { b"f" })?;
    if frame.flags.remote {
        w.put(b"R")?;
    }
    w.finish(crc)
}

/// Write the device → host line for a frame seen on the bus, e.g.
/// `rcv 0100 2404000A00881300000000230D301900 E B F\n`: id in uppercase hex, whole bytes,
/// at least 4 digits; data in uppercase hex; then ` E` when extended (flag set or id above
/// 0x7FF), ` B` for bitrate switch, ` F` for FD and ` R` for remote — only set flags, except
/// that an empty frame with no flag set ends in ` e` so its empty data field survives.
pub fn write_rcv(frame: &CanFdFrame, crc: bool, out: &mut [u8]) -> Result<usize, LineError> {
    check_id(frame)?;
    let mut w = LineWriter::new(out);
    w.put(b"rcv ")?;
    w.put_id(frame.id, true, true)?;
    w.put(b" ")?;
    w.put_data(frame)?;
    let header_len = w.pos;
    if frame.flags.extended || frame.id > MAX_STANDARD_ID {
        w.put(b" E")?;
    }
    if frame.flags.brs {
        w.put(b" B")?;
    }
    if frame.flags.fd {
        w.put(b" F")?;
    }
    if frame.flags.remote {
        w.put(b" R")?;
    }
    if frame.len == 0 && w.pos == header_len {
        // An empty data field must be followed by something, or readers that trim the line
        // (ours and the official clients) lose the field: say one of the flags that is off.
        w.put(b" e")?;
    }
    w.finish(crc)
}

/// Write `OK\n` (or `OK *BD\n`).
pub fn write_ok(crc: bool, out: &mut [u8]) -> Result<usize, LineError> {
    let mut w = LineWriter::new(out);
    w.put(b"OK")?;
    w.finish(crc)
}

/// Write `ERR <msg>\n` (just `ERR` for an empty message). `msg` must be printable ASCII
/// without `*`: a newline would split the line and a trailing `*XX` would read as a CRC.
pub fn write_err(msg: &[u8], crc: bool, out: &mut [u8]) -> Result<usize, LineError> {
    if msg.iter().any(|&c| !(c == b' ' || c.is_ascii_graphic()) || c == b'*') {
        return Err(LineError::BadText);
    }
    // The prefix, separator and suffix take at most 12 bytes; keep the line readable.
    if msg.len() > MAX_LINE - 12 {
        return Err(LineError::TooLong);
    }
    let mut w = LineWriter::new(out);
    w.put(b"ERR")?;
    if !msg.is_empty() {
        w.put(b" ")?;
        w.put(msg)?;
    }
    w.finish(crc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &[u8]) -> Line<'_> {
        parse_line(line).unwrap().line
    }

    #[test]
    fn crc_matches_bitwise_definition() {
        fn bitwise(data: &[u8]) -> u8 {
            let mut crc = 0u8;
            for &b in data {
                crc ^= b;
                for _ in 0..8 {
                    crc = if crc & 0x80 != 0 { (crc << 1) ^ 0x97 } else { crc << 1 };
                }
            }
            crc
        }
        let all: [u8; 256] = core::array::from_fn(|i| i as u8);
        assert_eq!(crc8(&all), bitwise(&all));
        assert_eq!(crc8(b"OK "), 0xBD);
    }

    #[test]
    fn id_widths() {
        let mut buf = [0u8; MAX_LINE];
        let mut check = |id: u32, want: &[u8]| {
            let f = CanFdFrame::new(id, &[]).unwrap();
            write_rcv(&f, false, &mut buf).unwrap();
            assert_eq!(buf.get(4..4 + want.len()).unwrap(), want, "id {id:#x}");
        };
        check(0x5, b"0005 ");
        check(0x100, b"0100 ");
        check(0x8001, b"8001 ");
        check(0x10005, b"010005 ");
        check(0x1FFF_FFFF, b"1FFFFFFF ");
    }

    #[test]
    fn can_std_ext_force_id_type() {
        let Line::CanSend(f) = parse(b"can ext 0001 20 BF") else { panic!() };
        assert!(f.flags.extended);
        let Line::CanSend(f) = parse(b"can std 0001 20") else { panic!() };
        assert!(!f.flags.extended && f.flags.fd && f.flags.brs);
        assert_eq!(parse_line(b"can std 8001 20"), Err(LineError::BadId));
    }

    #[test]
    fn rcv_ignores_annotations() {
        let Line::Rcv(f) = parse(b"rcv 100 2030 e B F r f-1 t12345") else { panic!() };
        assert_eq!(f.id, 0x100);
        assert_eq!(f.payload(), &[0x20, 0x30]);
        assert!(!f.flags.extended && f.flags.brs && f.flags.fd && !f.flags.remote);
        assert_eq!(parse_line(b"rcv 100 2030 Q"), Err(LineError::BadFlag));
        assert_eq!(parse_line(b"rcv 100 2030 7x"), Err(LineError::BadFlag));
    }

    #[test]
    fn oversized_frame_len_is_refused() {
        let mut f = CanFdFrame { len: 65, ..CanFdFrame::default() };
        let mut buf = [0u8; 512];
        assert_eq!(write_rcv(&f, false, &mut buf), Err(LineError::DataTooLong));
        f.len = 0;
        f.id = 0x2000_0000;
        assert_eq!(write_can_send(&f, false, &mut buf), Err(LineError::BadId));
    }
}
