//! rtloop-proto beside the official `moteus-protocol` 0.5.5 on the same bytes: encode of the
//! position command + default query `rtloop run` sends every cycle, and decode of the reply
//! a servo sends to it. Both codecs produce the same payload (checked before timing).
//!
//! `cargo bench -p rtloop-proto --bench codec` — prints ns/op per case, the median over
//! interleaved rounds (each round times every case once, so a load spike on the shared
//! machine hits both codecs alike), and the ratio rtloop / moteus-protocol.
//!
//! For a count that does not depend on machine load, run one case under callgrind:
//! `valgrind --tool=callgrind target/release/deps/codec-* CASE N` with CASE one of
//! `ours-encode`, `theirs-encode`, `ours-decode`, `theirs-decode`; instructions per op are
//! (Ir at N = 200000 − Ir at N = 100000) / 100000.
//!
//! Figures (this 2-core VM, shared with other builds; wall clock is the median of 21
//! interleaved rounds, instructions are callgrind's per op):
//!
//! | case   | before (57a042a)        | after                   | moteus-protocol 0.5.5 |
//! |--------|-------------------------|-------------------------|-----------------------|
//! | encode | 186 ns, 2826 instr (2.13×) | 62 ns, 1522 instr (0.79×) | 79–87 ns, 1392 instr |
//! | decode | 66 ns, 1263 instr (1.17×)  | 39 ns, 757 instr (0.71×)  | 55–57 ns, 1053 instr |
//!
//! Encode executes a few more instructions than the official crate (it checks every write
//! and rolls back a command that does not fit) but no longer calls `memcpy` per value or
//! header, which is where the time went. `tests/proto/frozen_codec.rs` keeps the bytes, states and
//! errors identical to the codec before the speed-up.

use moteus_protocol as official;
use official::command::PositionFormat;
use rtloop_proto::host::{decode_reply, encode_position, PositionCommand, PositionResolution, QueryFormat, ServoState};
use rtloop_proto::{FrameWriter, Resolution, Value};
use std::hint::black_box;
use std::time::Instant;

/// The command `rtloop run` sends every cycle (as crates/io/benches/cycle.rs does).
fn our_command() -> PositionCommand {
    PositionCommand {
        position: Some(0.1),
        velocity: Some(0.0),
        kp_scale: Some(1.0),
        kd_scale: Some(1.0),
        feedforward_torque: Some(0.0),
        maximum_torque: Some(4.0),
        ..Default::default()
    }
}

fn their_command() -> official::command::PositionCommand {
    let mut c = official::command::PositionCommand::new();
    c.position = Some(0.1);
    c.velocity = Some(0.0);
    c.kp_scale = Some(1.0);
    c.kd_scale = Some(1.0);
    c.feedforward_torque = Some(0.0);
    c.maximum_torque = Some(4.0);
    c
}

/// The reply a servo sends to the default query: mode int8; position, velocity, torque
/// float; voltage, temperature, fault int8.
fn reply_bytes() -> Vec<u8> {
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    w.reply_registers(0x000, &[Value::I8(10)]).unwrap();
    w.reply_registers(0x001, &[Value::F32(0.1), Value::F32(-0.25), Value::F32(0.5)]).unwrap();
    w.reply_registers(0x00D, &[Value::I8(48), Value::I8(37), Value::I8(0)]).unwrap();
    w.as_slice().to_vec()
}

fn ours_encode(cmd: &PositionCommand, res: &PositionResolution, q: &QueryFormat) -> ([u8; 64], usize) {
    let mut buf = [0u8; 64];
    let mut w = FrameWriter::new(&mut buf);
    encode_position(&mut w, cmd, res, Some(q)).unwrap();
    let n = w.len();
    (buf, n)
}

fn theirs_encode(
    cmd: &official::command::PositionCommand,
    fmt: &PositionFormat,
    q: &official::query::QueryFormat,
) -> official::CanFdFrame {
    let mut f = official::CanFdFrame::new();
    cmd.serialize(&mut f, fmt);
    q.serialize(&mut f);
    f
}

const CASES: [&str; 4] = ["ours-encode", "theirs-encode", "ours-decode", "theirs-decode"];

/// Run case `which` `n` times; returns nothing, the work goes through `black_box`.
fn run(which: usize, n: u64, reply: &[u8]) {
    let (cmd, res, q) = (our_command(), PositionResolution::default(), QueryFormat::default());
    let (tcmd, tfmt, tq) = (their_command(), PositionFormat::default(), official::query::QueryFormat::default());
    match which {
        0 => (0..n).for_each(|_| {
            black_box(ours_encode(black_box(&cmd), black_box(&res), black_box(&q)));
        }),
        1 => (0..n).for_each(|_| {
            black_box(theirs_encode(black_box(&tcmd), black_box(&tfmt), black_box(&tq)));
        }),
        2 => (0..n).for_each(|_| {
            let mut s = ServoState::default();
            decode_reply(black_box(reply), &mut s).unwrap();
            black_box(&s);
        }),
        _ => (0..n).for_each(|_| {
            black_box(official::query::QueryResult::parse_data(black_box(reply)));
        }),
    }
}

fn main() {
    // The same bytes on both sides, or the comparison means nothing.
    let (buf, n) = ours_encode(&our_command(), &PositionResolution::default(), &QueryFormat::default());
    let theirs = theirs_encode(&their_command(), &PositionFormat::default(), &official::query::QueryFormat::default());
    assert_eq!(&buf[..n], theirs.payload(), "the two encoders disagree");
    let reply = reply_bytes();
    let mut s = ServoState::default();
    decode_reply(&reply, &mut s).unwrap();
    let t = official::query::QueryResult::parse_data(&reply);
    assert_eq!((s.position as f32, s.velocity as f32, s.torque as f32), (t.position, t.velocity, t.torque));
    assert_eq!(Some(Resolution::Float), QueryFormat::default().position);

    // `codec CASE N`: one case, no timing (for callgrind). Cargo passes `--bench`.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    if let [case, n] = args.as_slice() {
        let which = CASES
            .iter()
            .position(|c| c == case)
            .expect("CASE is one of ours-encode, theirs-encode, ours-decode, theirs-decode");
        run(which, n.parse().expect("N is a count"), &reply);
        return;
    }

    const ROUNDS: usize = 21;
    const N: u64 = 200_000;
    let mut ns = [[0f64; ROUNDS]; 4];
    for round in 0..ROUNDS {
        for (which, per_case) in ns.iter_mut().enumerate() {
            let t0 = Instant::now();
            run(which, N, &reply);
            per_case[round] = t0.elapsed().as_nanos() as f64 / N as f64;
        }
    }
    let med: Vec<f64> = ns
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            v[ROUNDS / 2]
        })
        .collect();
    println!("codec, payload {n} B out / {} B in; median of {ROUNDS} interleaved rounds × {N} ops:", reply.len());
    for (case, m) in CASES.iter().zip(&med) {
        println!("  {case:<14} {m:>7.1} ns/op");
    }
    println!("  encode ratio rtloop / moteus-protocol: {:.2}×", med[0] / med[1]);
    println!("  decode ratio rtloop / moteus-protocol: {:.2}×", med[2] / med[3]);
    println!("  encode + decode ratio:                  {:.2}×", (med[0] + med[2]) / (med[1] + med[3]));
}
