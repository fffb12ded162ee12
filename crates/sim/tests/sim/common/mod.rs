//! Helpers shared by the integration tests: building host frames and decoding replies.
#![allow(dead_code)]

use rtloop_proto::frame::{ArbitrationId, CanFdFrame};
use rtloop_proto::host::{
    decode_reply, encode_position, encode_query, encode_stop, PositionCommand, PositionResolution, QueryFormat,
    ServoState,
};
use rtloop_proto::writer::FrameWriter;
use rtloop_sim::Servo;

pub const MS: u64 = 1_000_000;

fn frame(id: u8, reply: bool, build: impl FnOnce(&mut FrameWriter)) -> CanFdFrame {
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    build(&mut w);
    CanFdFrame::new(ArbitrationId::command(id, reply).build(), w.as_slice()).unwrap()
}

/// A position command to `id`, with the default query when `query`.
pub fn position(id: u8, cmd: &PositionCommand, query: bool) -> CanFdFrame {
    let q = QueryFormat::default();
    frame(id, query, |w| encode_position(w, cmd, &PositionResolution::default(), query.then_some(&q)).unwrap())
}

/// A position command with the comprehensive query (what the default robot sends).
pub fn position_comprehensive(id: u8, cmd: &PositionCommand) -> CanFdFrame {
    let q = QueryFormat::comprehensive();
    frame(id, true, |w| encode_position(w, cmd, &PositionResolution::default(), Some(&q)).unwrap())
}

/// The default query.
pub fn query(id: u8) -> CanFdFrame {
    frame(id, true, |w| encode_query(w, &QueryFormat::default()).unwrap())
}

/// A query with every telemetry register.
pub fn query_comprehensive(id: u8) -> CanFdFrame {
    frame(id, true, |w| encode_query(w, &QueryFormat::comprehensive()).unwrap())
}

/// Stop, with the default query.
pub fn stop(id: u8) -> CanFdFrame {
    let q = QueryFormat::default();
    frame(id, true, |w| encode_stop(w, Some(&q)).unwrap())
}

/// A raw request payload to `id` with the reply bit set.
pub fn raw(id: u8, payload: &[u8]) -> CanFdFrame {
    CanFdFrame::new(ArbitrationId::command(id, true).build(), payload).unwrap()
}

/// Hand `frame` to `servo` at `t`, decode the reply.
pub fn exchange(servo: &mut Servo, frame: &CanFdFrame, t: u64) -> ServoState {
    let mut reply = CanFdFrame::default();
    assert!(servo.handle_frame(frame, t, &mut reply), "no reply to {frame:?}");
    let mut state = ServoState::default();
    decode_reply(reply.payload(), &mut state).unwrap();
    state
}

/// The raw reply of `servo` to `frame` at `t`.
pub fn reply_of(servo: &mut Servo, frame: &CanFdFrame, t: u64) -> CanFdFrame {
    let mut reply = CanFdFrame::default();
    assert!(servo.handle_frame(frame, t, &mut reply), "no reply to {frame:?}");
    reply
}

/// Run the bus event by event until it is idle; returns the replies with their end times.
pub fn run_to_idle(bus: &mut rtloop_sim::SimBus) -> Vec<(rtloop_proto::frame::CanFdFrame, u64)> {
    let mut out = Vec::new();
    let mut guard = 0;
    while let Some(t) = bus.next_event_ns() {
        while let Some(r) = bus.poll_rx_stamped(t) {
            out.push(r);
        }
        guard += 1;
        assert!(guard < 100_000, "next_event_ns must make progress");
    }
    out
}
