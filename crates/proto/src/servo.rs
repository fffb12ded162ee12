//! The servo side: serve a request against a register server, build the reply.
//!
//! What it is for: a simulated (or real) servo hands every request payload to [`serve`],
//! which applies the writes and answers the reads through a [`RegisterServer`], producing
//! exactly the reply subframes a moteus controller would. What it must never do: panic on
//! any request, write past the 64-byte reply, allocate, or skip `end_of_frame` — writes
//! that were applied stay applied even when the rest of the frame is malformed.

use crate::subframe::{subframes, DecodeError, Subframe};
use crate::value::{Resolution, Value};
use crate::writer::{EncodeError, FrameWriter};

/// The registers of one servo, as [`serve`] sees them.
pub trait RegisterServer {
    /// Apply one register write from the current frame. Err(code) → a write-error subframe.
    fn write(&mut self, reg: u16, value: Value) -> Result<(), u32>;
    /// Read one register at the requested resolution. Err(code) → a read-error subframe.
    /// Returning another resolution is allowed; the reply then carries that one.
    fn read(&mut self, reg: u16, res: Resolution) -> Result<Value, u32>;
    /// Called once after every subframe of a frame has been handled (commit the command).
    fn end_of_frame(&mut self) {}
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
            // Replies, error reports, streams (no console here) and NOPs need no answer.
            Ok(_) => {}
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
