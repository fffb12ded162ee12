// FROZEN copy of crates/proto/src/writer.rs as of commit 57a042a (before the codec speed-up):
// the reference the optimised codec must match byte for byte. Do not edit.
//! Building a payload subframe by subframe into a fixed 64-byte buffer.
//!
//! What it is for: every encoder (host commands, servo replies) appends whole subframes
//! here. What it must never do: write past 64 bytes, leave half a subframe behind after an
//! error, silently drop data, allocate, or panic. A subframe either fits completely or the
//! call returns [`EncodeError`] and the buffer is unchanged.

use core::fmt;

use super::frame::{CanFdFrame, CanFdFrameError, MAX_DATA};
use super::register::reg;
use super::value::{Resolution, Value};
use super::varuint;

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
    fn register(base: u8, res: Resolution, start: u16, count: usize) -> Result<Header, EncodeError> {
        if count == 0 {
            return Err(EncodeError::NoRegisters);
        }
        let count16 = u16::try_from(count).map_err(|_| EncodeError::TooManyRegisters)?;
        if count16.checked_sub(1).and_then(|extra| start.checked_add(extra)).is_none() {
            return Err(EncodeError::RegisterOutOfRange);
        }
        let mut h = Header { bytes: [0; 1 + 2 * varuint::MAX_LEN], len: 0 };
        let typed = base | (res.type_code() << 2);
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
        let (bytes, n) = varuint::encode(v);
        for &b in bytes.iter().take(n) {
            self.push(b);
        }
    }

    fn as_slice(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&[])
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
        let available = self.remaining();
        if needed > available {
            return Err(EncodeError::Overflow { needed, available });
        }
        for part in parts {
            for &b in part.iter() {
                if let Some(slot) = self.buf.get_mut(self.len) {
                    *slot = b;
                    self.len = self.len.saturating_add(1);
                }
            }
        }
        Ok(())
    }

    /// Append values after a header in one unit.
    fn append_values(&mut self, header: &Header, values: &[Value]) -> Result<(), EncodeError> {
        let values_len = values.iter().fold(0usize, |acc, v| acc.saturating_add(v.size()));
        let needed = header.len.saturating_add(values_len);
        let available = self.remaining();
        if needed > available {
            return Err(EncodeError::Overflow { needed, available });
        }
        self.append(&[header.as_slice()])?;
        for v in values {
            let bytes = v.to_le_bytes();
            self.append(&[bytes.get(..v.size()).unwrap_or(&[])])?;
        }
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
        self.append_values(&header, values)?;
        self.wrote_registers = true;
        Ok(())
    }

    /// One read subframe asking for `count` registers from `start` at `res`.
    pub fn read_registers(&mut self, start: u16, count: u16, res: Resolution) -> Result<(), EncodeError> {
        let header = Header::register(opcode::READ, res, start, count.into())?;
        self.append(&[header.as_slice()])
    }

    /// One reply subframe: the values of `start`, `start + 1`, …; all share a resolution.
    pub fn reply_registers(&mut self, start: u16, values: &[Value]) -> Result<(), EncodeError> {
        let res = Self::common_resolution(values)?;
        let header = Header::register(opcode::REPLY, res, start, values.len())?;
        self.append_values(&header, values)
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
