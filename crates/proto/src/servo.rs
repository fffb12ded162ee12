//! The servo side: serve a request against a register server, build the reply.
//!
//! What it is for: a simulated (or real) servo hands every request payload to [`serve`],
//! which applies the writes and answers the reads through a [`RegisterServer`], producing
//! exactly the reply subframes a moteus controller would — the diagnostic stream included:
//! client data (0x40) goes to [`RegisterServer::client_data`], and every poll (0x42) gets
//! its 0x41 answer, every flow-controlled poll (0x44) its 0x43 answer, empty when the
//! server has nothing to say (a client waits for that answer forever otherwise).
//! What it must never do: panic on any request, write past the 64-byte reply, allocate, or
//! skip `end_of_frame` — writes that were applied stay applied even when the rest of the
//! frame is malformed — or let a subframe it did not act on pass unreported
//! ([`RegisterServer::not_understood`]).

use crate::subframe::{subframes, DecodeError, Subframe};
use crate::value::{Resolution, Value};
use crate::varuint;
use crate::writer::{opcode, EncodeError, FrameWriter};

/// The registers of one servo, as [`serve`] sees them.
pub trait RegisterServer {
    /// Apply one register write from the current frame. Err(code) → a write-error subframe.
    fn write(&mut self, reg: u16, value: Value) -> Result<(), u32>;
    /// Read one register at the requested resolution. Err(code) → a read-error subframe.
    /// Returning another resolution is allowed; the reply then carries that one.
    fn read(&mut self, reg: u16, res: Resolution) -> Result<Value, u32>;
    /// Called once after every subframe of a frame has been handled (commit the command).
    fn end_of_frame(&mut self) {}

    /// Client data (0x40) for stream `channel`. `Err` reports why it was not taken; the
    /// server should also make the refusal visible on the stream where it can (an `ERR`
    /// line), since 0x40 carries no reply.
    fn client_data(&mut self, channel: u32, data: &[u8]) -> Result<(), NotUnderstood> {
        let _ = data;
        Err(NotUnderstood::UnknownChannel { channel })
    }

    /// A poll (0x42): copy up to `out.len()` pending bytes of `channel` into `out` and
    /// return how many. A channel with nothing to say (or no such channel) returns 0; the
    /// client still gets its empty answer.
    fn poll(&mut self, channel: u32, out: &mut [u8]) -> usize {
        let _ = (channel, out);
        0
    }

    /// A flow-controlled poll (0x44) acknowledging packet `ack`: returns the packet number
    /// and the length of the data put in `out` (the next packet when `ack` matches the last
    /// one sent, that packet again when it does not).
    fn poll_flow(&mut self, channel: u32, ack: u8, out: &mut [u8]) -> (u8, usize) {
        let _ = (channel, out);
        (ack, 0)
    }

    /// A subframe this server did not act on (see [`NotUnderstood`]); for counting.
    fn not_understood(&mut self, what: NotUnderstood) {
        let _ = what;
    }
}

/// A well-formed subframe a servo did not act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotUnderstood {
    /// A subframe only a servo sends (0x20-0x2F replies, 0x30/0x31 errors, 0x41/0x43
    /// server data) arrived at the servo.
    ServerSubframe {
        /// Its opcode byte.
        opcode: u8,
    },
    /// Client data for a stream channel the servo does not have.
    UnknownChannel {
        /// The channel.
        channel: u32,
    },
    /// Client data that did not fit the channel's input buffer; `dropped` bytes were lost
    /// (the server says so on the stream).
    InputFull {
        /// Bytes not taken.
        dropped: usize,
    },
}

impl core::fmt::Display for NotUnderstood {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NotUnderstood::ServerSubframe { opcode } => {
                write!(f, "subframe {opcode:#04x} is one only a servo sends")
            }
            NotUnderstood::UnknownChannel { channel } => write!(f, "no stream channel {channel}"),
            NotUnderstood::InputFull { dropped } => write!(f, "stream input full: {dropped} bytes dropped"),
        }
    }
}

impl core::error::Error for NotUnderstood {}

/// The most data bytes one stream answer carries: a one-byte length (what every client
/// asks for: 48-61) and never more than the 64-byte reply holds anyway.
const MAX_STREAM_ANSWER: usize = 127;

/// Bytes of a stream answer's header: opcode, channel varuint, [packet], length varuint
/// (one byte: answers are at most [`MAX_STREAM_ANSWER`]).
fn stream_header_len(channel: u32, flow: bool) -> usize {
    // At most 1 + 5 + 1 + 1 bytes: no overflow is possible, but proto spells it out.
    varuint::encode(channel).1.saturating_add(usize::from(flow)).saturating_add(2)
}

/// Answer a 0x42 (`flow` None) or 0x44 (`flow` Some(ack)) poll with as many bytes as the
/// client asked for and the reply still holds.
fn answer_poll(
    server: &mut impl RegisterServer,
    reply: &mut FrameWriter,
    channel: u32,
    max_len: u32,
    flow: Option<u8>,
) -> Result<(), EncodeError> {
    let header = stream_header_len(channel, flow.is_some());
    let room = reply
        .remaining()
        .checked_sub(header)
        .ok_or(EncodeError::Overflow { needed: header, available: reply.remaining() })?;
    let want = usize::try_from(max_len).unwrap_or(usize::MAX).min(room).min(MAX_STREAM_ANSWER);
    let mut data = [0u8; MAX_STREAM_ANSWER];
    let out = data.get_mut(..want).unwrap_or(&mut []);
    match flow {
        None => {
            let n = server.poll(channel, out).min(want);
            reply.stream(opcode::STREAM_SERVER_TO_CLIENT, channel, data.get(..n).unwrap_or(&[]))
        }
        Some(ack) => {
            let (packet, n) = server.poll_flow(channel, ack, out);
            reply.stream_flow(channel, packet, data.get(..n.min(want)).unwrap_or(&[]))
        }
    }
}

/// Error code for a register the server does not have.
pub const ERROR_UNKNOWN_REGISTER: u32 = 1;

/// Most values gathered before a reply subframe is flushed; 64 of even the smallest kind
/// cannot fit with a header, so a longer run would overflow anyway.
const MAX_RUN: usize = 64;

/// Answer one read subframe: runs of successful reads with one resolution become one reply
/// subframe, each failed read a read-error subframe. Stops at the first reply that does
/// not fit, which also bounds the work for huge counts.
fn answer_read(
    server: &mut impl RegisterServer,
    reply: &mut FrameWriter,
    start: u16,
    res: Resolution,
    count: u16,
) -> Result<(), EncodeError> {
    let mut values = [Value::I8(0); MAX_RUN];
    let mut run_len = 0usize;
    let mut run_start = start;
    for i in 0..count {
        let Some(r) = start.checked_add(i) else {
            break;
        };
        match server.read(r, res) {
            Ok(v) => {
                let same = values.first().map(|f| f.resolution()) == Some(v.resolution());
                if run_len > 0 && (!same || run_len >= MAX_RUN) {
                    reply.reply_registers(run_start, values.get(..run_len).unwrap_or(&[]))?;
                    run_len = 0;
                }
                if run_len == 0 {
                    run_start = r;
                }
                if let Some(slot) = values.get_mut(run_len) {
                    *slot = v;
                    run_len = run_len.saturating_add(1);
                }
            }
            Err(code) => {
                if run_len > 0 {
                    reply.reply_registers(run_start, values.get(..run_len).unwrap_or(&[]))?;
                    run_len = 0;
                }
                reply.read_error(r, code)?;
            }
        }
    }
    if run_len > 0 {
        reply.reply_registers(run_start, values.get(..run_len).unwrap_or(&[]))?;
    }
    Ok(())
}

/// Handle one request payload; appends the reply subframes to `reply` (replies grouped
/// per read subframe, consecutive successes with one resolution in one reply subframe,
/// errors as 0x30/0x31) and returns the reply length (0 = nothing to say).
///
/// Malformed input: the subframes before the error have been handled (writes stay
/// applied), `end_of_frame` is still called, and the parse error is returned. A reply
/// that would not fit in 64 bytes: every write is still applied, no reply subframe is
/// added after the first one that did not fit, and [`DecodeError::ReplyTooLong`] is
/// returned.
pub fn serve(request: &[u8], server: &mut impl RegisterServer, reply: &mut FrameWriter) -> Result<usize, DecodeError> {
    let mut parse_error = None;
    let mut overflow_at: Option<usize> = None;
    let mut iter = subframes(request);
    loop {
        let offset = iter.offset();
        let Some(sub) = iter.next() else {
            break;
        };
        match sub {
            Err(e) => {
                parse_error = Some(e);
                break;
            }
            Ok(Subframe::Write { start, values, .. }) => {
                for (r, v) in (start..=u16::MAX).zip(values.iter()) {
                    if let Err(code) = server.write(r, v) {
                        if overflow_at.is_none() && reply.write_error(r, code).is_err() {
                            overflow_at = Some(offset);
                        }
                    }
                }
            }
            Ok(Subframe::Read { start, res, count }) => {
                if overflow_at.is_none() && answer_read(server, reply, start, res, count).is_err() {
                    overflow_at = Some(offset);
                }
            }
            Ok(Subframe::Stream { opcode: opcode::STREAM_CLIENT_TO_SERVER, channel, data }) => {
                if let Err(why) = server.client_data(channel, data) {
                    server.not_understood(why);
                }
            }
            Ok(Subframe::Poll { channel, max_len }) => {
                if overflow_at.is_none() && answer_poll(server, reply, channel, max_len, None).is_err() {
                    overflow_at = Some(offset);
                }
            }
            Ok(Subframe::FlowPoll { channel, ack, max_len }) => {
                if overflow_at.is_none() && answer_poll(server, reply, channel, max_len, Some(ack)).is_err() {
                    overflow_at = Some(offset);
                }
            }
            Ok(Subframe::Nop) => {}
            Ok(
                Subframe::Reply { .. }
                | Subframe::WriteError { .. }
                | Subframe::ReadError { .. }
                | Subframe::Stream { .. }
                | Subframe::FlowData { .. },
            ) => {
                let opcode = request.get(offset).copied().unwrap_or(0);
                server.not_understood(NotUnderstood::ServerSubframe { opcode });
            }
        }
    }
    server.end_of_frame();
    if let Some(e) = parse_error {
        return Err(e);
    }
    if let Some(offset) = overflow_at {
        return Err(DecodeError::ReplyTooLong { offset });
    }
    Ok(reply.len())
}
