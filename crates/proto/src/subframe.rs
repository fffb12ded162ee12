//! Parsing a payload into subframes; never panics, returns typed errors.
//!
//! What it is for: both sides read payloads through [`subframes`] — the servo reads
//! requests, the host reads replies. What it must never do: read past the payload, accept
//! a register range that runs past 0xFFFF, allocate, or panic. After the first error the
//! iterator is exhausted, because nothing after a malformed subframe can be trusted.

use core::fmt;

use crate::value::{Resolution, Value};
use crate::varuint::{self, VaruintError};
use crate::writer::opcode;

/// Why a payload could not be parsed. `offset` is the payload byte where the problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The payload ended inside a subframe.
    Truncated {
        /// Where more bytes were needed: the payload length.
        offset: usize,
    },
    /// An opcode this protocol does not define.
    UnknownOpcode {
        /// Where the opcode is.
        offset: usize,
        /// The opcode byte.
        opcode: u8,
    },
    /// A varuint longer than 5 bytes or wider than 32 bits.
    VarintTooLong {
        /// Where the varuint starts.
        offset: usize,
    },
    /// A register number above 0xFFFF, a count above 0xFFFF, or registers that would run
    /// past 0xFFFF.
    RegisterOverflow {
        /// Where the offending varuint starts.
        offset: usize,
    },
    /// A register subframe with an explicit count of zero.
    ZeroCount {
        /// Where the count starts.
        offset: usize,
    },
    /// Only from [`crate::servo::serve`]: the reply to the read subframe at `offset` did
    /// not fit in the 64-byte reply. Every write of the request was still handled.
    ReplyTooLong {
        /// Where the read subframe starts in the request.
        offset: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated { offset } => write!(f, "payload truncated at byte {offset}"),
            DecodeError::UnknownOpcode { offset, opcode } => {
                write!(f, "unknown opcode {opcode:#04x} at byte {offset}")
            }
            DecodeError::VarintTooLong { offset } => write!(f, "varuint at byte {offset} is too long"),
            DecodeError::RegisterOverflow { offset } => {
                write!(f, "register number or count at byte {offset} runs past 0xffff")
            }
            DecodeError::ZeroCount { offset } => write!(f, "zero register count at byte {offset}"),
            DecodeError::ReplyTooLong { offset } => {
                write!(f, "reply to the read at byte {offset} does not fit in 64 bytes")
            }
        }
    }
}

impl core::error::Error for DecodeError {}

/// The values of a write or reply subframe, still as wire bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawValues<'a> {
    res: Resolution,
    bytes: &'a [u8],
}

impl<'a> RawValues<'a> {
    /// Values of resolution `res` packed in `bytes` (a trailing partial value is ignored).
    pub fn new(res: Resolution, bytes: &'a [u8]) -> Self {
        RawValues { res, bytes }
    }

    /// The resolution of every value.
    pub fn resolution(&self) -> Resolution {
        self.res
    }

    /// The wire bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Number of whole values.
    pub fn len(&self) -> usize {
        self.bytes.len().checked_div(self.res.size()).unwrap_or(0)
    }

    /// No values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Value `i`, if present.
    pub fn get(&self, i: usize) -> Option<Value> {
        let size = self.res.size();
        let start = i.checked_mul(size)?;
        let end = start.checked_add(size)?;
        Value::from_le_bytes(self.res, self.bytes.get(start..end)?)
    }

    /// The values in register order.
    pub fn iter(&self) -> impl Iterator<Item = Value> + 'a {
        let res = self.res;
        self.bytes.chunks_exact(res.size()).filter_map(move |c| Value::from_le_bytes(res, c))
    }
}

/// One parsed subframe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Subframe<'a> {
    /// Write `count` registers from `start`.
    Write {
        /// First register.
        start: u16,
        /// Resolution of every value.
        res: Resolution,
        /// Number of registers (≥ 1).
        count: u16,
        /// The values, one per register.
        values: RawValues<'a>,
    },
    /// Read `count` registers from `start`.
    Read {
        /// First register.
        start: u16,
        /// Requested resolution.
        res: Resolution,
        /// Number of registers (≥ 1).
        count: u16,
    },
    /// Values of `count` registers from `start`.
    Reply {
        /// First register.
        start: u16,
        /// Resolution of every value.
        res: Resolution,
        /// Number of registers (≥ 1).
        count: u16,
        /// The values, one per register.
        values: RawValues<'a>,
    },
    /// Writing `register` failed with `code`.
    WriteError {
        /// The register.
        register: u16,
        /// The error code (1 = unknown register).
        code: u32,
    },
    /// Reading `register` failed with `code`.
    ReadError {
        /// The register.
        register: u16,
        /// The error code (1 = unknown register).
        code: u32,
    },
    /// Diagnostic stream data: 0x40 (client to server) or 0x41 (server to client).
    Stream {
        /// 0x40 or 0x41.
        opcode: u8,
        /// Stream channel (1 = diagnostic console).
        channel: u32,
        /// Stream bytes (may be empty).
        data: &'a [u8],
    },
    /// 0x42: the client asks for up to `max_len` bytes of `channel`; a servo always answers
    /// with one 0x41 subframe, empty when it has nothing to say.
    Poll {
        /// Stream channel.
        channel: u32,
        /// Most bytes the client wants.
        max_len: u32,
    },
    /// 0x43: flow-controlled server data, packet `packet`.
    FlowData {
        /// Stream channel.
        channel: u32,
        /// Packet number; the client acknowledges it in its next 0x44.
        packet: u8,
        /// Stream bytes (may be empty).
        data: &'a [u8],
    },
    /// 0x44: flow-controlled poll acknowledging packet `ack` (0 before any was received).
    FlowPoll {
        /// Stream channel.
        channel: u32,
        /// The packet number the client last received.
        ack: u8,
        /// Most bytes the client wants.
        max_len: u32,
    },
    /// 0x50: nothing (also the padding byte).
    Nop,
}

/// Iterator over the subframes of a payload; see [`subframes`].
#[derive(Debug, Clone)]
pub struct SubframeIter<'a> {
    data: &'a [u8],
    pos: usize,
    failed: bool,
}

/// Parse `payload` subframe by subframe. Yields `Err` once for a malformed subframe and
/// then stops.
pub fn subframes(payload: &[u8]) -> SubframeIter<'_> {
    SubframeIter { data: payload, pos: 0, failed: false }
}

impl<'a> SubframeIter<'a> {
    /// Byte offset of the next subframe (the payload length once exhausted).
    pub fn offset(&self) -> usize {
        self.pos
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *self.data.get(self.pos).ok_or(DecodeError::Truncated { offset: self.pos })?;
        self.pos = self.pos.saturating_add(1);
        Ok(b)
    }

    fn varuint(&mut self) -> Result<u32, DecodeError> {
        let offset = self.pos;
        // Most varuints (register numbers and counts below 0x80) are one byte.
        if let Some(&b) = self.data.get(offset) {
            if b & 0x80 == 0 {
                self.pos = offset.saturating_add(1);
                return Ok(u32::from(b));
            }
        }
        let rest = self.data.get(offset..).unwrap_or(&[]);
        match varuint::decode(rest) {
            Ok((v, n)) => {
                self.pos = offset.saturating_add(n);
                Ok(v)
            }
            Err(VaruintError::Truncated) => Err(DecodeError::Truncated { offset: self.data.len() }),
            Err(VaruintError::TooLong) => Err(DecodeError::VarintTooLong { offset }),
        }
    }

    fn varuint_u16(&mut self) -> Result<u16, DecodeError> {
        let offset = self.pos;
        let v = self.varuint()?;
        u16::try_from(v).map_err(|_| DecodeError::RegisterOverflow { offset })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let start = self.pos;
        let data: &'a [u8] = self.data;
        let end = start.checked_add(n).ok_or(DecodeError::Truncated { offset: data.len() })?;
        let bytes = data.get(start..end).ok_or(DecodeError::Truncated { offset: data.len() })?;
        self.pos = end;
        Ok(bytes)
    }

    /// Parse `[count] start` of a register subframe: `(start, count)`.
    #[inline]
    fn register_range(&mut self, op: u8) -> Result<(u16, u16), DecodeError> {
        let count = match op & 0x03 {
            0 => {
                let offset = self.pos;
                let c = self.varuint_u16()?;
                if c == 0 {
                    return Err(DecodeError::ZeroCount { offset });
                }
                c
            }
            n => u16::from(n),
        };
        let start_offset = self.pos;
        let start = self.varuint_u16()?;
        if count.checked_sub(1).and_then(|extra| start.checked_add(extra)).is_none() {
            return Err(DecodeError::RegisterOverflow { offset: start_offset });
        }
        Ok((start, count))
    }

    #[inline]
    fn parse_one(&mut self) -> Result<Subframe<'a>, DecodeError> {
        let op_offset = self.pos;
        let op = self.byte()?;
        let res = Resolution::from_type_code(op >> 2);
        match op {
            0x00..=0x0F | 0x20..=0x2F => {
                let (start, count) = self.register_range(op)?;
                let n = usize::from(count)
                    .checked_mul(res.size())
                    .ok_or(DecodeError::Truncated { offset: self.data.len() })?;
                let values = RawValues::new(res, self.take(n)?);
                Ok(if op < 0x10 {
                    Subframe::Write { start, res, count, values }
                } else {
                    Subframe::Reply { start, res, count, values }
                })
            }
            0x10..=0x1F => {
                let (start, count) = self.register_range(op)?;
                Ok(Subframe::Read { start, res, count })
            }
            opcode::WRITE_ERROR | opcode::READ_ERROR => {
                let register = self.varuint_u16()?;
                let code = self.varuint()?;
                Ok(if op == opcode::WRITE_ERROR {
                    Subframe::WriteError { register, code }
                } else {
                    Subframe::ReadError { register, code }
                })
            }
            opcode::STREAM_CLIENT_TO_SERVER | opcode::STREAM_SERVER_TO_CLIENT => {
                let channel = self.varuint()?;
                let len = self.varuint()?;
                let n = usize::try_from(len).map_err(|_| DecodeError::Truncated { offset: self.data.len() })?;
                let data = self.take(n)?;
                Ok(Subframe::Stream { opcode: op, channel, data })
            }
            opcode::STREAM_CLIENT_POLL_SERVER => {
                let channel = self.varuint()?;
                let max_len = self.varuint()?;
                Ok(Subframe::Poll { channel, max_len })
            }
            opcode::STREAM_SERVER_TO_CLIENT_FLOW => {
                let channel = self.varuint()?;
                let packet = self.byte()?;
                let len = self.varuint()?;
                let n = usize::try_from(len).map_err(|_| DecodeError::Truncated { offset: self.data.len() })?;
                let data = self.take(n)?;
                Ok(Subframe::FlowData { channel, packet, data })
            }
            opcode::STREAM_CLIENT_POLL_SERVER_FLOW => {
                let channel = self.varuint()?;
                let ack = self.byte()?;
                let max_len = self.varuint()?;
                Ok(Subframe::FlowPoll { channel, ack, max_len })
            }
            opcode::NOP => Ok(Subframe::Nop),
            _ => Err(DecodeError::UnknownOpcode { offset: op_offset, opcode: op }),
        }
    }
}

impl<'a> Iterator for SubframeIter<'a> {
    type Item = Result<Subframe<'a>, DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.data.len() {
            return None;
        }
        let r = self.parse_one();
        if r.is_err() {
            self.failed = true;
        }
        Some(r)
    }
}

impl core::iter::FusedIterator for SubframeIter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn all(p: &[u8]) -> Vec<Result<Subframe<'_>, DecodeError>> {
        subframes(p).collect()
    }

    #[test]
    fn parses_the_default_query() {
        let v = all(&[0x11, 0x00, 0x1f, 0x01, 0x13, 0x0d, 0x50]);
        assert_eq!(
            v,
            [
                Ok(Subframe::Read { start: 0, res: Resolution::Int8, count: 1 }),
                Ok(Subframe::Read { start: 1, res: Resolution::Float, count: 3 }),
                Ok(Subframe::Read { start: 0x0d, res: Resolution::Int8, count: 3 }),
                Ok(Subframe::Nop),
            ]
        );
    }

    #[test]
    fn errors_stop_the_iterator() {
        assert_eq!(all(&[0x60, 0x50]), [Err(DecodeError::UnknownOpcode { offset: 0, opcode: 0x60 })]);
        assert_eq!(all(&[0x50, 0x10, 0x00, 0x00]), [Ok(Subframe::Nop), Err(DecodeError::ZeroCount { offset: 2 })]);
        assert_eq!(all(&[0x13, 0xfe, 0xff, 0x03]), [Err(DecodeError::RegisterOverflow { offset: 1 })]);
        assert_eq!(all(&[0x11, 0xff, 0xff, 0x04]), [Err(DecodeError::RegisterOverflow { offset: 1 })]);
        assert_eq!(all(&[0x11, 0x80, 0x80, 0x80, 0x80, 0x80]), [Err(DecodeError::VarintTooLong { offset: 1 })]);
        assert_eq!(all(&[0x0d, 0x20, 0x00]), [Err(DecodeError::Truncated { offset: 3 })]);
        assert_eq!(all(&[0x31, 0x80]), [Err(DecodeError::Truncated { offset: 2 })]);
    }

    #[test]
    fn streams_and_errors() {
        let v = all(&[0x41, 0x01, 0x02, b'o', b'k', 0x42, 0x01, 0x30, 0x30, 0x70, 0x01, 0x31, 0xb0, 0x02, 0x01]);
        // (0x42 poll: channel 1, max length 0x30 = 48.)
        assert_eq!(
            v,
            [
                Ok(Subframe::Stream { opcode: 0x41, channel: 1, data: b"ok" }),
                Ok(Subframe::Poll { channel: 1, max_len: 48 }),
                Ok(Subframe::WriteError { register: 0x70, code: 1 }),
                Ok(Subframe::ReadError { register: 0x130, code: 1 }),
            ]
        );
        let v = all(&[0x44, 0x01, 0xff, 0x3d, 0x43, 0x01, 0x07, 0x02, b'o', b'k', 0x43, 0x01]);
        assert_eq!(
            v,
            [
                Ok(Subframe::FlowPoll { channel: 1, ack: 0xff, max_len: 61 }),
                Ok(Subframe::FlowData { channel: 1, packet: 7, data: b"ok" }),
                Err(DecodeError::Truncated { offset: 12 }),
            ]
        );
    }
}
