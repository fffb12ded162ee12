//! The servo side of the diagnostic stream: every poll is answered (empty when there is
//! nothing to say, for any channel), answers never overflow the 64-byte reply even beside
//! register replies, client data reaches the server, and what a servo cannot act on is
//! reported rather than dropped.

use rtloop_proto::servo::{serve, NotUnderstood, RegisterServer};
use rtloop_proto::subframe::{subframes, Subframe};
use rtloop_proto::value::{Resolution, Value};
use rtloop_proto::writer::FrameWriter;

/// A servo with one stream channel (1) holding `pending` bytes of output.
#[derive(Default)]
struct Echo {
    received: Vec<u8>,
    pending: Vec<u8>,
    packet: u8,
    refused: Vec<NotUnderstood>,
}

impl RegisterServer for Echo {
    fn write(&mut self, _: u16, _: Value) -> Result<(), u32> {
        Ok(())
    }
    fn read(&mut self, _: u16, _: Resolution) -> Result<Value, u32> {
        Ok(Value::F32(1.5))
    }
    fn client_data(&mut self, channel: u32, data: &[u8]) -> Result<(), NotUnderstood> {
        if channel != 1 {
            return Err(NotUnderstood::UnknownChannel { channel });
        }
        self.received.extend_from_slice(data);
        Ok(())
    }
    fn poll(&mut self, channel: u32, out: &mut [u8]) -> usize {
        if channel != 1 {
            return 0;
        }
        let n = out.len().min(self.pending.len());
        out[..n].copy_from_slice(&self.pending[..n]);
        self.pending.drain(..n);
        n
    }
    fn poll_flow(&mut self, channel: u32, ack: u8, out: &mut [u8]) -> (u8, usize) {
        if channel != 1 || ack != self.packet {
            return (self.packet, 0);
        }
        let n = self.poll(channel, out);
        if n > 0 {
            self.packet = self.packet.wrapping_add(1);
        }
        (self.packet, n)
    }
    fn not_understood(&mut self, what: NotUnderstood) {
        self.refused.push(what);
    }
}

fn serve_payload(request: &[u8], server: &mut Echo) -> (Vec<u8>, bool) {
    let mut buf = [0u8; 64];
    let mut reply = FrameWriter::new(&mut buf);
    let ok = serve(request, server, &mut reply).is_ok();
    (reply.as_slice().to_vec(), ok)
}

#[test]
fn a_poll_with_nothing_to_say_gets_an_empty_answer_on_any_channel() {
    let mut s = Echo::default();
    for channel in [1u8, 2, 0x7f] {
        let (reply, ok) = serve_payload(&[0x42, channel, 48], &mut s);
        assert!(ok);
        assert_eq!(reply, [0x41, channel, 0x00], "channel {channel}");
    }
}

#[test]
fn client_data_reaches_the_server_and_an_unknown_channel_is_reported() {
    let mut s = Echo::default();
    let (reply, ok) = serve_payload(&[0x40, 0x01, 0x03, b'a', b'b', b'\n', 0x40, 0x09, 0x01, b'x'], &mut s);
    assert!(ok);
    assert!(reply.is_empty(), "0x40 carries no reply: {reply:?}");
    assert_eq!(s.received, b"ab\n");
    assert_eq!(s.refused, [NotUnderstood::UnknownChannel { channel: 9 }]);
}

#[test]
fn answers_shrink_to_fit_beside_register_replies() {
    let mut s = Echo { pending: vec![b'z'; 200], ..Echo::default() };
    // Read 10 floats (42 bytes of reply), then ask for 61 bytes of stream.
    let (reply, ok) = serve_payload(&[0x1c, 0x0a, 0x01, 0x42, 0x01, 61], &mut s);
    assert!(ok);
    assert_eq!(reply.len(), 64, "{reply:?}");
    let subs: Vec<_> = subframes(&reply).collect::<Result<_, _>>().unwrap();
    let Subframe::Stream { opcode: 0x41, channel: 1, data } = subs[1] else { panic!("{subs:?}") };
    assert_eq!(data.len(), 64 - 43 - 3);
    assert_eq!(s.pending.len(), 200 - data.len(), "only what was sent left the server");
    // A flow-controlled answer carries one byte more of header.
    let (reply, _) = serve_payload(&[0x44, 0x01, 0x00, 61], &mut s);
    let subs: Vec<_> = subframes(&reply).collect::<Result<_, _>>().unwrap();
    let Subframe::FlowData { channel: 1, packet: 1, data } = subs[0] else { panic!("{subs:?}") };
    assert_eq!(data.len(), 60);
}

#[test]
fn a_reply_with_no_room_left_for_the_answer_is_an_error_not_a_silent_drop() {
    let mut s = Echo { pending: vec![b'z'; 10], ..Echo::default() };
    // 15 floats fill 62 bytes; the poll's 3-byte header does not fit.
    let (reply, ok) = serve_payload(&[0x1c, 0x0f, 0x01, 0x42, 0x01, 48], &mut s);
    assert!(!ok);
    assert!(reply.len() <= 64);
    assert_eq!(s.pending.len(), 10, "nothing was taken from the server");
}

#[test]
fn subframes_only_a_servo_sends_are_reported() {
    let mut s = Echo::default();
    let (_, ok) =
        serve_payload(&[0x41, 0x01, 0x00, 0x21, 0x00, 0x05, 0x30, 0x01, 0x01, 0x43, 0x01, 0x00, 0x00], &mut s);
    assert!(ok);
    assert_eq!(
        s.refused,
        [
            NotUnderstood::ServerSubframe { opcode: 0x41 },
            NotUnderstood::ServerSubframe { opcode: 0x21 },
            NotUnderstood::ServerSubframe { opcode: 0x30 },
            NotUnderstood::ServerSubframe { opcode: 0x43 },
        ]
    );
}

#[test]
fn a_server_without_a_console_still_answers_polls() {
    struct Plain;
    impl RegisterServer for Plain {
        fn write(&mut self, _: u16, _: Value) -> Result<(), u32> {
            Ok(())
        }
        fn read(&mut self, _: u16, _: Resolution) -> Result<Value, u32> {
            Err(1)
        }
    }
    let mut buf = [0u8; 64];
    let mut reply = FrameWriter::new(&mut buf);
    serve(&[0x42, 0x01, 0x30, 0x44, 0x01, 0x05, 0x30], &mut Plain, &mut reply).unwrap();
    assert_eq!(reply.as_slice(), [0x41, 0x01, 0x00, 0x43, 0x01, 0x05, 0x00]);
}
