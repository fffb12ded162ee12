//! CAN-FD frames in UDP datagrams: the `udp:` transport's wire format (version 1).
//!
//! What it is for: packing several CAN-FD frames, each tagged with a bus number, into one
//! datagram that never fragments on Ethernet, and unpacking any byte string back into
//! frames or a typed error. The layout is specified in `docs/udp-framing.md`:
//!
//! ```text
//! header  (8 bytes):  "RTLU"  version=1  count  sequence(u16 LE)
//! record  (7 + len):  bus  flags  len  id(u32 LE)  data[len]      × count
//! ```
//!
//! What it must never do: allocate, panic, or accept a datagram that is not exactly the
//! header plus `count` well-formed records — every deviation is a [`UdpFrameError`], so
//! a receiver can count garbage instead of misreading it. Encoders never produce a
//! datagram longer than [`MAX_DATAGRAM`].
//!
//! ```
//! use rtloop_proto::udp::{decode_datagram, DatagramWriter, MAX_DATAGRAM};
//! use rtloop_proto::CanFdFrame;
//!
//! let mut buf = [0u8; MAX_DATAGRAM];
//! let mut writer = DatagramWriter::new(&mut buf[..], 7).unwrap();
//! writer.push(1, &CanFdFrame::new(0x8001, &[0x11, 0x00]).unwrap()).unwrap();
//! let len = writer.finish();
//!
//! let datagram = decode_datagram(&buf[..len]).unwrap();
//! assert_eq!(datagram.sequence(), 7);
//! for item in datagram {
//!     let (bus, frame) = item.unwrap();
//!     assert_eq!((bus, frame.id, frame.payload()), (1, 0x8001, &[0x11, 0x00][..]));
//! }
//! ```

use crate::frame::{CanFdFrame, FrameFlags, MAX_DATA};
use core::fmt;

/// The first four bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"RTLU";
/// The only format version this module reads and writes.
pub const VERSION: u8 = 1;
/// Bytes before the first frame record.
pub const HEADER_LEN: usize = 8;
/// Bytes of a frame record before its data.
pub const RECORD_HEADER_LEN: usize = 7;
/// The largest datagram an encoder emits: a 1500-byte Ethernet MTU minus the 20-byte IPv4
/// and 8-byte UDP headers, so a datagram is never fragmented on the way.
pub const MAX_DATAGRAM: usize = 1472;
/// The most records one datagram can hold (the count is one byte).
pub const MAX_FRAMES: usize = 255;
/// The most records a [`MAX_DATAGRAM`]-byte datagram can hold (all with empty payloads).
pub const MAX_FRAMES_PER_MAX_DATAGRAM: usize = (MAX_DATAGRAM - HEADER_LEN) / RECORD_HEADER_LEN;

/// Bits of the record's `flags` byte. Bits 4-7 are reserved and must be zero.
pub mod flag {
    /// 29-bit identifier.
    pub const EXTENDED: u8 = 0x01;
    /// FD format.
    pub const FD: u8 = 0x02;
    /// Bitrate switch.
    pub const BRS: u8 = 0x04;
    /// Remote frame.
    pub const REMOTE: u8 = 0x08;
    /// Every defined bit; anything else is reserved.
    pub const ALL: u8 = EXTENDED | FD | BRS | REMOTE;
}

/// Why a datagram could not be encoded or decoded. Offsets are byte positions in the
/// datagram, so a message can point at the bad byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UdpFrameError {
    /// The datagram does not start with [`MAGIC`]: it is not this protocol.
    BadMagic,
    /// A version this decoder does not know.
    UnsupportedVersion(u8),
    /// The datagram ends inside the header or inside the record starting at `offset`.
    Truncated {
        /// Where the incomplete header or record starts.
        offset: usize,
    },
    /// A record claims more than 64 data bytes.
    LengthTooLong {
        /// Where the record starts.
        offset: usize,
        /// The claimed length.
        len: u8,
    },
    /// A record's identifier is wider than 29 bits.
    IdTooWide {
        /// Where the record starts.
        offset: usize,
        /// The identifier.
        id: u32,
    },
    /// A record sets reserved flag bits (4-7).
    ReservedFlags {
        /// Where the record starts.
        offset: usize,
        /// The whole flags byte.
        flags: u8,
    },
    /// The datagram ends cleanly after fewer records than the header's count.
    CountMismatch {
        /// The header's count.
        declared: u8,
        /// Records actually present.
        found: u8,
    },
    /// Bytes follow the last record the header counts.
    TrailingBytes {
        /// Where the extra bytes start.
        offset: usize,
    },
    /// Encoding: the output buffer cannot even hold the header.
    BufferTooSmall,
    /// Encoding: the record does not fit in the remaining room (or the datagram already
    /// holds [`MAX_FRAMES`] records). Send this datagram and start another.
    DatagramFull,
}

impl fmt::Display for UdpFrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UdpFrameError::BadMagic => write!(f, "not an rtloop UDP datagram (no \"RTLU\" magic)"),
            UdpFrameError::UnsupportedVersion(v) => {
                write!(f, "datagram format version {v} is not supported (this build reads version {VERSION})")
            }
            UdpFrameError::Truncated { offset } => write!(f, "datagram truncated inside the item at byte {offset}"),
            UdpFrameError::LengthTooLong { offset, len } => {
                write!(f, "record at byte {offset} claims {len} data bytes (CAN-FD carries at most 64)")
            }
            UdpFrameError::IdTooWide { offset, id } => {
                write!(f, "record at byte {offset} has identifier {id:#x}, wider than 29 bits")
            }
            UdpFrameError::ReservedFlags { offset, flags } => {
                write!(f, "record at byte {offset} sets reserved flag bits ({flags:#04x})")
            }
            UdpFrameError::CountMismatch { declared, found } => {
                write!(f, "header counts {declared} frames but the datagram holds {found}")
            }
            UdpFrameError::TrailingBytes { offset } => {
                write!(f, "unexpected bytes after the last frame, at byte {offset}")
            }
            UdpFrameError::BufferTooSmall => write!(f, "output buffer smaller than the {HEADER_LEN}-byte header"),
            UdpFrameError::DatagramFull => write!(f, "datagram full"),
        }
    }
}

impl core::error::Error for UdpFrameError {}

/// The record's flags byte for `flags`.
pub const fn flags_byte(flags: FrameFlags) -> u8 {
    (if flags.extended { flag::EXTENDED } else { 0 })
        | (if flags.fd { flag::FD } else { 0 })
        | (if flags.brs { flag::BRS } else { 0 })
        | (if flags.remote { flag::REMOTE } else { 0 })
}

/// The frame flags a (valid) flags byte stands for; reserved bits are ignored here.
pub const fn frame_flags(byte: u8) -> FrameFlags {
    FrameFlags {
        extended: byte & flag::EXTENDED != 0,
        fd: byte & flag::FD != 0,
        brs: byte & flag::BRS != 0,
        remote: byte & flag::REMOTE != 0,
    }
}

/// Builds one datagram in a caller-owned buffer: an owned array (a transport keeps a
/// `DatagramWriter<[u8; MAX_DATAGRAM]>` and reuses it) or a borrowed `&mut [u8]`.
///
/// The header's count is updated on every push, so [`as_bytes`](Self::as_bytes) is always
/// a complete, valid datagram.
#[derive(Debug, Clone)]
pub struct DatagramWriter<B> {
    buf: B,
    /// Bytes written so far (header included).
    len: usize,
    /// Records written so far.
    count: u8,
    /// Usable room: the buffer's length capped at [`MAX_DATAGRAM`].
    limit: usize,
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> DatagramWriter<B> {
    /// Start a datagram with sequence number `sequence` in `buf`. Only the first
    /// [`MAX_DATAGRAM`] bytes of a larger buffer are used.
    pub fn new(buf: B, sequence: u16) -> Result<Self, UdpFrameError> {
        let limit = buf.as_ref().len().min(MAX_DATAGRAM);
        if limit < HEADER_LEN {
            return Err(UdpFrameError::BufferTooSmall);
        }
        let mut writer = DatagramWriter { buf, len: HEADER_LEN, count: 0, limit };
        writer.reset(sequence);
        Ok(writer)
    }

    /// Throw away the records and start a new datagram with `sequence`.
    pub fn reset(&mut self, sequence: u16) {
        let [s0, s1] = sequence.to_le_bytes();
        let [m0, m1, m2, m3] = MAGIC;
        let header = [m0, m1, m2, m3, VERSION, 0, s0, s1];
        if let Some(dst) = self.buf.as_mut().get_mut(..HEADER_LEN) {
            dst.copy_from_slice(&header);
        }
        self.len = HEADER_LEN;
        self.count = 0;
    }

    /// Append `frame` for `bus`. [`UdpFrameError::DatagramFull`] when it does not fit (the
    /// datagram is unchanged); [`UdpFrameError::LengthTooLong`] / [`UdpFrameError::IdTooWide`]
    /// for a frame no receiver would accept (the offset is where it would have gone).
    pub fn push(&mut self, bus: u8, frame: &CanFdFrame) -> Result<(), UdpFrameError> {
        let offset = self.len;
        if usize::from(frame.len) > MAX_DATA {
            return Err(UdpFrameError::LengthTooLong { offset, len: frame.len });
        }
        if frame.id > 0x1FFF_FFFF {
            return Err(UdpFrameError::IdTooWide { offset, id: frame.id });
        }
        if usize::from(self.count) >= MAX_FRAMES {
            return Err(UdpFrameError::DatagramFull);
        }
        let data = frame.data.get(..usize::from(frame.len)).ok_or(UdpFrameError::DatagramFull)?;
        let end = offset
            .checked_add(RECORD_HEADER_LEN)
            .and_then(|n| n.checked_add(data.len()))
            .filter(|&end| end <= self.limit)
            .ok_or(UdpFrameError::DatagramFull)?;
        let Some(record) = self.buf.as_mut().get_mut(offset..end) else {
            return Err(UdpFrameError::DatagramFull);
        };
        let (head, body) = record.split_at_mut(RECORD_HEADER_LEN.min(record.len()));
        let [i0, i1, i2, i3] = frame.id.to_le_bytes();
        if head.len() != RECORD_HEADER_LEN || body.len() != data.len() {
            return Err(UdpFrameError::DatagramFull);
        }
        head.copy_from_slice(&[bus, flags_byte(frame.flags), frame.len, i0, i1, i2, i3]);
        body.copy_from_slice(data);
        self.len = end;
        self.count = self.count.saturating_add(1);
        if let Some(count) = self.buf.as_mut().get_mut(5) {
            *count = self.count;
        }
        Ok(())
    }

    /// Records written so far.
    pub fn count(&self) -> usize {
        usize::from(self.count)
    }

    /// Whether no record has been written.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Length of the datagram so far, header included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The sequence number in the header.
    pub fn sequence(&self) -> u16 {
        match self.buf.as_ref().get(6..8) {
            Some(&[lo, hi]) => u16::from_le_bytes([lo, hi]),
            _ => 0,
        }
    }

    /// The datagram as it stands: header plus every record pushed.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.as_ref().get(..self.len).unwrap_or(&[])
    }

    /// Done: the datagram's length (its bytes are the start of the buffer).
    pub fn finish(self) -> usize {
        self.len
    }
}

/// Encode every `(bus, frame)` into one datagram in `out`; its length. Fails with
/// [`UdpFrameError::DatagramFull`] when they do not all fit in `out` (or in
/// [`MAX_DATAGRAM`]); use [`DatagramWriter`] to split across datagrams instead.
pub fn encode_datagram<'f>(
    sequence: u16,
    frames: impl Iterator<Item = (u8, &'f CanFdFrame)>,
    out: &mut [u8],
) -> Result<usize, UdpFrameError> {
    let mut writer = DatagramWriter::new(out, sequence)?;
    for (bus, frame) in frames {
        writer.push(bus, frame)?;
    }
    Ok(writer.finish())
}

/// Check a datagram's header and iterate over its records.
///
/// Header errors (magic, version, a datagram shorter than the header) come back here;
/// record errors come from the iterator, which stops after the first one. A receiver
/// that must not act on part of a bad datagram calls [`DatagramIter::validate`] first.
pub fn decode_datagram(bytes: &[u8]) -> Result<DatagramIter<'_>, UdpFrameError> {
    let Some((header, records)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        // Say "not our protocol" rather than "truncated" when even the magic is wrong.
        if bytes.len() >= MAGIC.len() && bytes.get(..MAGIC.len()) != Some(&MAGIC[..]) {
            return Err(UdpFrameError::BadMagic);
        }
        return Err(UdpFrameError::Truncated { offset: 0 });
    };
    let [m0, m1, m2, m3, version, count, s0, s1] = *header;
    if [m0, m1, m2, m3] != MAGIC {
        return Err(UdpFrameError::BadMagic);
    }
    if version != VERSION {
        return Err(UdpFrameError::UnsupportedVersion(version));
    }
    Ok(DatagramIter {
        rest: records,
        offset: HEADER_LEN,
        declared: count,
        found: 0,
        sequence: u16::from_le_bytes([s0, s1]),
        done: false,
    })
}

/// The records of one datagram: `Ok((bus, frame))` each, or one error and then `None`.
/// After the last counted record it checks that nothing follows.
#[derive(Debug, Clone)]
pub struct DatagramIter<'a> {
    rest: &'a [u8],
    offset: usize,
    declared: u8,
    found: u8,
    sequence: u16,
    done: bool,
}

impl DatagramIter<'_> {
    /// The header's sequence number.
    pub fn sequence(&self) -> u16 {
        self.sequence
    }

    /// The header's frame count.
    pub fn declared_count(&self) -> usize {
        usize::from(self.declared)
    }

    /// Walk a copy of the iterator to the end: `Ok(count)` when every record is valid and
    /// nothing follows them, else the first error.
    pub fn validate(&self) -> Result<usize, UdpFrameError> {
        let mut n = 0usize;
        for item in self.clone() {
            item?;
            n = n.saturating_add(1);
        }
        Ok(n)
    }

    fn fail(&mut self, e: UdpFrameError) -> Option<Result<(u8, CanFdFrame), UdpFrameError>> {
        self.done = true;
        Some(Err(e))
    }
}

impl Iterator for DatagramIter<'_> {
    type Item = Result<(u8, CanFdFrame), UdpFrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let offset = self.offset;
        if self.found >= self.declared {
            self.done = true;
            if self.rest.is_empty() {
                return None;
            }
            return Some(Err(UdpFrameError::TrailingBytes { offset }));
        }
        if self.rest.is_empty() {
            let e = UdpFrameError::CountMismatch { declared: self.declared, found: self.found };
            return self.fail(e);
        }
        let Some((head, tail)) = self.rest.split_first_chunk::<RECORD_HEADER_LEN>() else {
            return self.fail(UdpFrameError::Truncated { offset });
        };
        let [bus, flags, len, i0, i1, i2, i3] = *head;
        let id = u32::from_le_bytes([i0, i1, i2, i3]);
        if usize::from(len) > MAX_DATA {
            return self.fail(UdpFrameError::LengthTooLong { offset, len });
        }
        if id > 0x1FFF_FFFF {
            return self.fail(UdpFrameError::IdTooWide { offset, id });
        }
        if flags & !flag::ALL != 0 {
            return self.fail(UdpFrameError::ReservedFlags { offset, flags });
        }
        let Some((data, rest)) = tail.split_at_checked(usize::from(len)) else {
            return self.fail(UdpFrameError::Truncated { offset });
        };
        let mut frame = CanFdFrame { id, len, flags: frame_flags(flags), ..Default::default() };
        if let Some(dst) = frame.data.get_mut(..data.len()) {
            dst.copy_from_slice(data);
        }
        self.rest = rest;
        self.offset = offset.saturating_add(RECORD_HEADER_LEN).saturating_add(data.len());
        self.found = self.found.saturating_add(1);
        Some(Ok((bus, frame)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_datagram_of_64_byte_frames_stays_under_the_limit() {
        let frame = CanFdFrame::new(0x8001, &[0x50; 64]).unwrap();
        let mut buf = [0u8; 2000];
        let mut w = DatagramWriter::new(&mut buf[..], 0).unwrap();
        let mut n = 0;
        while w.push(1, &frame).is_ok() {
            n += 1;
        }
        assert_eq!(n, (MAX_DATAGRAM - HEADER_LEN) / (RECORD_HEADER_LEN + 64));
        assert!(w.len() <= MAX_DATAGRAM);
        assert_eq!(decode_datagram(w.as_bytes()).unwrap().validate(), Ok(n));
    }

    #[test]
    fn empty_records_fill_a_datagram_at_209() {
        let frame = CanFdFrame::new(1, &[]).unwrap();
        let mut buf = [0u8; MAX_DATAGRAM];
        let mut w = DatagramWriter::new(&mut buf[..], 0).unwrap();
        let mut n = 0;
        while w.push(1, &frame).is_ok() {
            n += 1;
        }
        assert_eq!(n, MAX_FRAMES_PER_MAX_DATAGRAM.min(MAX_FRAMES));
    }
}
