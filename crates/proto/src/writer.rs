//! Building a payload subframe by subframe into a fixed 64-byte buffer.
//!
//! What it is for: every encoder (host commands, servo replies) appends whole subframes
//! here. What it must never do: write past 64 bytes, leave half a subframe behind after an
//! error, silently drop data, allocate, or panic. A subframe either fits completely or the
//! call returns [`EncodeError`] and the buffer is unchanged.

use core::fmt;

use crate::frame::{CanFdFrame, CanFdFrameError, MAX_DATA};
use crate::register::reg;
use crate::value::{Resolution, Value};
use crate::varuint;

/// Opcode family bases; the resolution's type code goes in bits 2..3, the short count in
/// bits 0..1.
pub mod opcode {
    /// Write registers.
    pub const WRITE: u8 = 0x00;
    /// Read registers.
    pub const READ: u8 = 0x10;
    /// Reply with register values.
    pub const REPLY: u8 = 0x20;
    /// Write error: register, code.
    pub const WRITE_ERROR: u8 = 0x30;
    /// Read error: register, code.
    pub const READ_ERROR: u8 = 0x31;
    /// Stream data, client to server.
    pub const STREAM_CLIENT_TO_SERVER: u8 = 0x40;
    /// Stream data, server to client.
    pub const STREAM_SERVER_TO_CLIENT: u8 = 0x41;
    /// Stream poll: client asks the server for up to max-length bytes.
    pub const STREAM_CLIENT_POLL_SERVER: u8 = 0x42;
    /// Flow-controlled stream data, server to client: channel, packet number, data.
    pub const STREAM_SERVER_TO_CLIENT_FLOW: u8 = 0x43;
    /// Flow-controlled poll: channel, the packet number last received (the ack), max length.
    pub const STREAM_CLIENT_POLL_SERVER_FLOW: u8 = 0x44;
    /// No operation; also the padding byte.
    pub const NOP: u8 = 0x50;
}

/// Why a subframe could not be appended. The buffer is unchanged when one is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    /// The subframe needs `needed` bytes but only `available` are left of the 64.
    Overflow {
        /// Bytes the subframe needs.
        needed: usize,
        /// Bytes left in the payload.
        available: usize,
    },
    /// The mode register (0x000) was written after another write in the same frame.
    ModeNotFirst,
    /// More registers than fit a count, or more extras than a [`crate::host::QueryFormat`]
    /// holds.
    TooManyRegisters,
    /// The registers would run past 0xFFFF.
    RegisterOutOfRange,
    /// A register subframe with no registers.
    NoRegisters,
    /// Values of different resolutions in one register subframe.
    MixedResolution,
    /// A stream opcode that is not 0x40 or 0x41.
    NotAStreamOpcode(u8),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::Overflow { needed, available } => {
                write!(f, "subframe needs {needed} bytes, only {available} left of 64")
            }
            EncodeError::ModeNotFirst => f.write_str("the mode register must be the first write of a frame"),
            EncodeError::TooManyRegisters => f.write_str("too many registers"),
            EncodeError::RegisterOutOfRange => f.write_str("registers run past 0xffff"),
            EncodeError::NoRegisters => f.write_str("a register subframe needs at least one register"),
            EncodeError::MixedResolution => f.write_str("values of one subframe must share a resolution"),
            EncodeError::NotAStreamOpcode(op) => write!(f, "{op:#04x} is not a stream data opcode"),
        }
    }
}

impl core::error::Error for EncodeError {}

/// A saved writer position; see [`FrameWriter::checkpoint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    len: usize,
    wrote_registers: bool,
}

/// Appends subframes to a 64-byte payload buffer.
#[derive(Debug)]
pub struct FrameWriter<'a> {
    buf: &'a mut [u8; MAX_DATA],
    len: usize,
    wrote_registers: bool,
}

/// Opcode byte + optional count + start register for a register subframe.
struct Header {
    bytes: [u8; 1 + 2 * varuint::MAX_LEN],
    len: usize,
}

impl Header {
    #[inline]
    fn register(base: u8, res: Resolution, start: u16, count: usize) -> Result<Header, EncodeError> {
        if count == 0 {
            return Err(EncodeError::NoRegisters);
        }
        let count16 = u16::try_from(count).map_err(|_| EncodeError::TooManyRegisters)?;
        if count16.checked_sub(1).and_then(|extra| start.checked_add(extra)).is_none() {
            return Err(EncodeError::RegisterOutOfRange);
        }
        let typed = base | (res.type_code() << 2);
        // The usual case, a short count and a register below 0x80: two bytes.
        if let (1..=3, Ok(start8 @ 0..=0x7F)) = (count16, u8::try_from(start)) {
            let mut bytes = [0; 1 + 2 * varuint::MAX_LEN];
            let [op, reg, ..] = &mut bytes;
            *op = typed | count16 as u8;
            *reg = start8;
            return Ok(Header { bytes, len: 2 });
        }
        let mut h = Header { bytes: [0; 1 + 2 * varuint::MAX_LEN], len: 0 };
        if count16 <= 3 {
            h.push(typed | count16 as u8);
        } else {
            h.push(typed);
            h.push_varuint(count16.into());
        }
        h.push_varuint(start.into());
        Ok(h)
    }

    fn push(&mut self, b: u8) {
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = b;
            self.len = self.len.saturating_add(1);
        }
    }

    fn push_varuint(&mut self, v: u32) {
        // Register numbers below 0x80 (the telemetry and command registers) take one byte.
        if let Ok(b) = u8::try_from(v) {
            if b < 0x80 {
                self.push(b);
                return;
            }
        }
        let (bytes, n) = varuint::encode(v);
        for &b in bytes.iter().take(n) {
            self.push(b);
        }
    }

    fn as_slice(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&[])
    }

    /// Copy the header to the start of `dst`; returns the rest of `dst`. The two-byte
    /// header is written without a loop (a loop of unknown length becomes a `memcpy` call,
    /// which costs more than the copy).
    #[inline]
    fn write_into<'b>(&self, dst: &'b mut [u8]) -> &'b mut [u8] {
        match (self.as_slice(), dst) {
            (&[a, b], [d0, d1, rest @ ..]) => {
                *d0 = a;
                *d1 = b;
                rest
            }
            (h, dst) => {
                let (head, rest) = dst.split_at_mut_checked(h.len()).unwrap_or_default();
                for (d, &b) in head.iter_mut().zip(h) {
                    *d = b;
                }
                rest
            }
        }
    }
}

/// Write `v` into `slot`, which is exactly [`Value::size`] bytes long (else nothing is
/// written). One arm per resolution, so no copy of unknown length.
#[inline]
pub(crate) fn put_value(slot: &mut [u8], v: Value) {
    match (v, slot) {
        (Value::I8(x), [a]) => [*a] = x.to_le_bytes(),
        (Value::I16(x), [a, b]) => [*a, *b] = x.to_le_bytes(),
        (Value::I32(x), [a, b, c, d]) => [*a, *b, *c, *d] = x.to_le_bytes(),
        (Value::F32(x), [a, b, c, d]) => [*a, *b, *c, *d] = x.to_le_bytes(),
        _ => {}
    }
}

impl<'a> FrameWriter<'a> {
    /// A writer that starts with an empty payload in `buf`.
    pub fn new(buf: &'a mut [u8; MAX_DATA]) -> Self {
        FrameWriter { buf, len: 0, wrote_registers: false }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Nothing written yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes still free of the 64.
    pub fn remaining(&self) -> usize {
        MAX_DATA.saturating_sub(self.len)
    }

    /// The payload written so far.
    pub fn as_slice(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }

    /// The current position, to [`FrameWriter::rollback`] to if a multi-subframe
    /// command does not fit.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint { len: self.len, wrote_registers: self.wrote_registers }
    }

    /// Drop everything written since `cp` (a later checkpoint of this writer is ignored).
    pub fn rollback(&mut self, cp: Checkpoint) {
        if cp.len <= self.len {
            self.len = cp.len;
            self.wrote_registers = cp.wrote_registers;
        }
    }

    /// Run `f`; if it fails, undo everything it appended, so a command is either
    /// entirely in the payload or not at all.
    pub fn atomically<T, E>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, E>) -> Result<T, E> {
        let cp = self.checkpoint();
        let r = f(self);
        if r.is_err() {
            self.rollback(cp);
        }
        r
    }

    /// Forget everything written.
    pub fn clear(&mut self) {
        self.len = 0;
        self.wrote_registers = false;
    }

    /// A moteus frame (FD, BRS, extended when needed) carrying the payload, padded with
    /// 0x50 to a valid CAN-FD length.
    pub fn to_frame(&self, id: u32) -> Result<CanFdFrame, CanFdFrameError> {
        let mut frame = CanFdFrame::new(id, self.as_slice())?;
        frame.pad_to_dlc();
        Ok(frame)
    }

    /// Append `parts` as one unit, or nothing at all.
    fn append(&mut self, parts: &[&[u8]]) -> Result<(), EncodeError> {
        let needed = parts.iter().fold(0usize, |acc, p| acc.saturating_add(p.len()));
        let mut dst = self.reserve(needed)?.iter_mut();
        for part in parts {
            // `part` first: `zip` stops on it without taking a byte of `dst`.
            for (&b, d) in part.iter().zip(dst.by_ref()) {
                *d = b;
            }
        }
        Ok(())
    }

    /// The next `needed` bytes of the buffer, counted as written (the caller fills them
    /// all), or the overflow error with nothing changed.
    fn reserve(&mut self, needed: usize) -> Result<&mut [u8], EncodeError> {
        let available = self.remaining();
        let start = self.len;
        let end = start.checked_add(needed).filter(|_| needed <= available);
        match end.and_then(|end| self.buf.get_mut(start..end).map(|dst| (end, dst))) {
            Some((end, dst)) => {
                self.len = end;
                Ok(dst)
            }
            None => Err(EncodeError::Overflow { needed, available }),
        }
    }

    /// Append values (all of resolution `res`) after a header in one unit.
    fn append_values(&mut self, header: &Header, res: Resolution, values: &[Value]) -> Result<(), EncodeError> {
        let size = res.size();
        let needed = header.len.saturating_add(values.len().saturating_mul(size));
        let body = header.write_into(self.reserve(needed)?);
        for (chunk, &v) in body.chunks_exact_mut(size).zip(values) {
            put_value(chunk, v);
        }
        Ok(())
    }

    /// One write subframe of `count` values of resolution `res`, their wire bytes
    /// (`count × res.size()`) filled in by `fill`: [`FrameWriter::write_registers`] without
    /// the [`Value`]s, for the host's write combiner. Same checks, same errors, in the same
    /// order; `fill` runs only once the subframe is known to fit.
    pub(crate) fn write_registers_with(
        &mut self,
        start: u16,
        res: Resolution,
        count: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), EncodeError> {
        let header = Header::register(opcode::WRITE, res, start, count)?;
        if start == reg::MODE && self.wrote_registers {
            return Err(EncodeError::ModeNotFirst);
        }
        let dst = self.reserve(header.len.saturating_add(count.saturating_mul(res.size())))?;
        fill(header.write_into(dst));
        self.wrote_registers = true;
        Ok(())
    }

    fn common_resolution(values: &[Value]) -> Result<Resolution, EncodeError> {
        let first = values.first().ok_or(EncodeError::NoRegisters)?.resolution();
        if values.iter().any(|v| v.resolution() != first) {
            return Err(EncodeError::MixedResolution);
        }
        Ok(first)
    }

    /// One write subframe: `values` go to `start`, `start + 1`, …; all must share a
    /// resolution. Writing the mode register after another write is refused, because a
    /// servo applies the mode first only when it comes first.
    pub fn write_registers(&mut self, start: u16, values: &[Value]) -> Result<(), EncodeError> {
        let res = Self::common_resolution(values)?;
        let header = Header::register(opcode::WRITE, res, start, values.len())?;
        if start == reg::MODE && self.wrote_registers {
            return Err(EncodeError::ModeNotFirst);
        }
        self.append_values(&header, res, values)?;
        self.wrote_registers = true;
        Ok(())
    }

    /// One read subframe asking for `count` registers from `start` at `res`.
    pub fn read_registers(&mut self, start: u16, count: u16, res: Resolution) -> Result<(), EncodeError> {
        let header = Header::register(opcode::READ, res, start, count.into())?;
        header.write_into(self.reserve(header.len)?);
        Ok(())
    }

    /// One reply subframe: the values of `start`, `start + 1`, …; all share a resolution.
    pub fn reply_registers(&mut self, start: u16, values: &[Value]) -> Result<(), EncodeError> {
        let res = Self::common_resolution(values)?;
        let header = Header::register(opcode::REPLY, res, start, values.len())?;
        self.append_values(&header, res, values)
    }

    fn error_subframe(&mut self, op: u8, reg: u16, code: u32) -> Result<(), EncodeError> {
        let (r, rn) = varuint::encode(reg.into());
        let (c, cn) = varuint::encode(code);
        self.append(&[&[op], r.get(..rn).unwrap_or(&[]), c.get(..cn).unwrap_or(&[])])
    }

    /// A write-error subframe (0x30): writing `reg` failed with `code`.
    pub fn write_error(&mut self, reg: u16, code: u32) -> Result<(), EncodeError> {
        self.error_subframe(opcode::WRITE_ERROR, reg, code)
    }

    /// A read-error subframe (0x31): reading `reg` failed with `code`.
    pub fn read_error(&mut self, reg: u16, code: u32) -> Result<(), EncodeError> {
        self.error_subframe(opcode::READ_ERROR, reg, code)
    }

    /// A stream data subframe (0x40 client→server or 0x41 server→client).
    pub fn stream(&mut self, op: u8, channel: u32, data: &[u8]) -> Result<(), EncodeError> {
        if op != opcode::STREAM_CLIENT_TO_SERVER && op != opcode::STREAM_SERVER_TO_CLIENT {
            return Err(EncodeError::NotAStreamOpcode(op));
        }
        let data_len = u32::try_from(data.len())
            .map_err(|_| EncodeError::Overflow { needed: data.len(), available: self.remaining() })?;
        let (c, cn) = varuint::encode(channel);
        let (l, ln) = varuint::encode(data_len);
        self.append(&[&[op], c.get(..cn).unwrap_or(&[]), l.get(..ln).unwrap_or(&[]), data])
    }

    /// A stream poll subframe (0x42): ask for up to `max_len` bytes on `channel`.
    pub fn stream_poll(&mut self, channel: u32, max_len: u32) -> Result<(), EncodeError> {
        let (c, cn) = varuint::encode(channel);
        let (l, ln) = varuint::encode(max_len);
        self.append(&[&[opcode::STREAM_CLIENT_POLL_SERVER], c.get(..cn).unwrap_or(&[]), l.get(..ln).unwrap_or(&[])])
    }

    /// A flow-controlled poll subframe (0x44): acknowledge packet `ack` (the number of the
    /// last 0x43 received, 0 at first) and ask for up to `max_len` bytes on `channel`.
    pub fn stream_poll_flow(&mut self, channel: u32, ack: u8, max_len: u32) -> Result<(), EncodeError> {
        let (c, cn) = varuint::encode(channel);
        let (l, ln) = varuint::encode(max_len);
        self.append(&[
            &[opcode::STREAM_CLIENT_POLL_SERVER_FLOW],
            c.get(..cn).unwrap_or(&[]),
            &[ack],
            l.get(..ln).unwrap_or(&[]),
        ])
    }

    /// A flow-controlled server data subframe (0x43): packet `packet` carrying `data`.
    pub fn stream_flow(&mut self, channel: u32, packet: u8, data: &[u8]) -> Result<(), EncodeError> {
        let data_len = u32::try_from(data.len())
            .map_err(|_| EncodeError::Overflow { needed: data.len(), available: self.remaining() })?;
        let (c, cn) = varuint::encode(channel);
        let (l, ln) = varuint::encode(data_len);
        self.append(&[
            &[opcode::STREAM_SERVER_TO_CLIENT_FLOW],
            c.get(..cn).unwrap_or(&[]),
            &[packet],
            l.get(..ln).unwrap_or(&[]),
            data,
        ])
    }

    /// One NOP byte (0x50).
    pub fn nop(&mut self) -> Result<(), EncodeError> {
        self.append(&[&[opcode::NOP]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_forms() {
        let mut buf = [0u8; 64];
        let mut w = FrameWriter::new(&mut buf);
        w.read_registers(0, 1, Resolution::Int8).unwrap();
        w.read_registers(1, 3, Resolution::Float).unwrap();
        w.read_registers(1, 5, Resolution::Int16).unwrap();
        w.read_registers(0x130, 4, Resolution::Int32).unwrap();
        assert_eq!(w.as_slice(), &[0x11, 0x00, 0x1f, 0x01, 0x14, 0x05, 0x01, 0x18, 0x04, 0xb0, 0x02]);
    }

    #[test]
    fn errors_leave_the_buffer_unchanged() {
        let mut buf = [0u8; 64];
        let mut w = FrameWriter::new(&mut buf);
        w.write_registers(0, &[Value::I8(10)]).unwrap();
        assert_eq!(w.write_registers(0, &[Value::I8(0)]), Err(EncodeError::ModeNotFirst));
        assert_eq!(w.write_registers(0x20, &[]), Err(EncodeError::NoRegisters));
        assert_eq!(w.write_registers(0x20, &[Value::I8(0), Value::F32(0.0)]), Err(EncodeError::MixedResolution));
        assert_eq!(w.read_registers(0xFFFF, 2, Resolution::Int8), Err(EncodeError::RegisterOutOfRange));
        let floats = [Value::F32(1.0); 15];
        assert_eq!(w.write_registers(0x20, &floats), Err(EncodeError::Overflow { needed: 63, available: 61 }));
        assert_eq!(w.as_slice(), &[0x01, 0x00, 0x0a]);
        while w.nop().is_ok() {}
        assert_eq!(w.len(), 64);
    }
}
