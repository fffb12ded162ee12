//! The optimised codec against a frozen copy of the one it replaced (`tests/proto/frozen/`, the
//! crate's own host, writer, subframe and value modules as of commit 57a042a): for random
//! commands, queries, writer states and payloads — well-formed replies and arbitrary bytes
//! alike — the bytes written, the states decoded (NaN-aware: compared bit for bit) and the
//! errors returned are identical.

#[path = "frozen/host.rs"]
#[allow(dead_code, clippy::all)]
mod host;
#[path = "frozen/subframe.rs"]
#[allow(dead_code, clippy::all)]
mod subframe;
#[path = "frozen/value.rs"]
#[allow(dead_code, clippy::all)]
mod value;
#[path = "frozen/writer.rs"]
#[allow(dead_code, clippy::all)]
mod writer;
// Modules the speed-up did not touch: the frozen copies use the crate's own.
mod register {
    pub use rtloop_proto::register::*;
}
mod varuint {
    pub use rtloop_proto::varuint::*;
}
mod frame {
    pub use rtloop_proto::frame::*;
}

use proptest::prelude::*;
use rtloop_proto::Resolution;

/// The frozen copy shares the crate's `Resolution` (unchanged by the speed-up).
fn old_res(r: Resolution) -> Resolution {
    r
}

fn resolution() -> impl Strategy<Value = Resolution> {
    proptest::sample::select(&[Resolution::Int8, Resolution::Int16, Resolution::Int32, Resolution::Float][..])
}

/// Values that exercise every branch of the scaling: ordinary, integral, at and past the
/// clamps, tiny, huge, ±0, NaN and ±inf.
fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => -10.0f64..10.0,
        2 => (-300i32..300).prop_map(f64::from),
        1 => proptest::sample::select(&[
            0.0, -0.0, 1.0, -1.0, 0.5, 127.0, 128.0, -128.0, 32767.0, 1e-300, -1e-300, 1e300, -1e300,
            f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::MAX, f64::MIN, 2147483647.0, -2147483648.0,
            9_007_199_254_740_992.0, -9_007_199_254_740_993.0,
        ][..]),
        1 => any::<f64>(),
    ]
}

fn command() -> impl Strategy<Value = ([Option<f64>; 14], [Resolution; 14])> {
    (proptest::array::uniform14(proptest::option::weighted(0.6, value())), proptest::array::uniform14(resolution()))
}

/// Telemetry fields and extras, sometimes hand-edited out of order (the field is public).
fn query() -> impl Strategy<Value = ([Option<Resolution>; 14], Vec<(u16, Resolution)>, bool)> {
    let reg = prop_oneof![0x000u16..0x020, 0x020u16..0x080, 0x100u16..0x140, any::<u16>()];
    (
        proptest::array::uniform14(proptest::option::weighted(0.5, resolution())),
        proptest::collection::vec((reg, resolution()), 0..10),
        any::<bool>(),
    )
}

fn queries(
    f: &[Option<Resolution>; 14],
    extras: &[(u16, Resolution)],
    raw: bool,
) -> (rtloop_proto::host::QueryFormat, host::QueryFormat) {
    let mut new = rtloop_proto::host::QueryFormat::from_telemetry(*f);
    let mut old = host::QueryFormat::from_telemetry(f.map(|r| r.map(old_res)));
    if raw {
        // Straight into the public array, unsorted, duplicates and telemetry registers kept.
        for (i, &(r, res)) in extras.iter().take(rtloop_proto::host::MAX_QUERY_EXTRA).enumerate() {
            new.extra[i] = (r, res);
            old.extra[i] = (r, old_res(res));
        }
        let n = extras.len().min(rtloop_proto::host::MAX_QUERY_EXTRA) as u8;
        new.extra_len = n;
        old.extra_len = n;
    } else {
        for &(r, res) in extras {
            let a = new.add_extra(r, res);
            let b = old.add_extra(r, old_res(res));
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
        }
    }
    (new, old)
}

/// Run both encoders on writers that already hold `prefill` NOP bytes (so that some
/// commands overflow) and, if `wrote`, a write (so that a mode write is refused): the
/// results and the whole buffers must agree.
fn both(
    prefill: usize,
    wrote: bool,
    new: impl FnOnce(&mut rtloop_proto::FrameWriter) -> Result<(), rtloop_proto::EncodeError>,
    old: impl FnOnce(&mut writer::FrameWriter) -> Result<(), writer::EncodeError>,
) -> Result<(), TestCaseError> {
    let (mut a, mut b) = ([0xAAu8; 64], [0xAAu8; 64]);
    let mut wa = rtloop_proto::FrameWriter::new(&mut a);
    let mut wb = writer::FrameWriter::new(&mut b);
    if wrote {
        wa.write_registers(0x30, &[rtloop_proto::Value::I8(1)]).unwrap();
        wb.write_registers(0x30, &[value::Value::I8(1)]).unwrap();
    }
    for _ in 0..prefill {
        let _ = wa.nop();
        let _ = wb.nop();
    }
    let ra = new(&mut wa);
    let rb = old(&mut wb);
    prop_assert_eq!(format!("{ra:?}"), format!("{rb:?}"));
    prop_assert_eq!(wa.as_slice(), wb.as_slice());
    prop_assert_eq!(wa.len(), wb.len());
    // What a later write sees (mode first or not) must agree too.
    let ma = wa.write_registers(0, &[rtloop_proto::Value::I8(0)]);
    let mb = wb.write_registers(0, &[value::Value::I8(0)]);
    prop_assert_eq!(format!("{ma:?}"), format!("{mb:?}"));
    prop_assert_eq!(wa.as_slice(), wb.as_slice());
    // The whole buffers: nothing written past the payload either.
    prop_assert_eq!(a, b);
    Ok(())
}

/// The decoded states, bit for bit (NaN payloads and the sign of zero included).
fn same_state(a: &rtloop_proto::host::ServoState, b: &host::ServoState) -> Result<(), TestCaseError> {
    let fa = [
        a.position,
        a.velocity,
        a.torque,
        a.q_current,
        a.d_current,
        a.abs_position,
        a.power,
        a.motor_temperature,
        a.voltage,
        a.temperature,
    ];
    let fb = [
        b.position,
        b.velocity,
        b.torque,
        b.q_current,
        b.d_current,
        b.abs_position,
        b.power,
        b.motor_temperature,
        b.voltage,
        b.temperature,
    ];
    prop_assert_eq!(fa.map(f64::to_bits), fb.map(f64::to_bits));
    prop_assert_eq!(
        (a.mode, a.trajectory_complete, a.home_state, a.fault),
        (b.mode, b.trajectory_complete, b.home_state, b.fault)
    );
    prop_assert_eq!(
        (a.extra_len, a.extra_dropped, a.errors, a.invalid_integers),
        (b.extra_len, b.extra_dropped, b.errors, b.invalid_integers)
    );
    let ea: Vec<(u16, u64)> = a.extra.iter().map(|e| (e.0, e.1.to_bits())).collect();
    let eb: Vec<(u16, u64)> = b.extra.iter().map(|e| (e.0, e.1.to_bits())).collect();
    prop_assert_eq!(ea, eb);
    Ok(())
}

fn decode_both(payload: &[u8]) -> Result<(), TestCaseError> {
    let mut a = rtloop_proto::host::ServoState::default();
    let mut b = host::ServoState::default();
    let ra = rtloop_proto::host::decode_reply(payload, &mut a);
    let rb = host::decode_reply(payload, &mut b);
    prop_assert_eq!(format!("{ra:?}"), format!("{rb:?}"));
    same_state(&a, &b)?;
    // The subframe parser on its own: every item (and the final offset) agrees.
    let ia: Vec<String> = rtloop_proto::subframe::subframes(payload).map(|s| format!("{s:?}")).collect();
    let ib: Vec<String> = subframe::subframes(payload).map(|s| format!("{s:?}")).collect();
    prop_assert_eq!(ia, ib);
    Ok(())
}

/// Reply payloads that decode: reply subframes of random registers, counts and
/// resolutions carrying random value bytes, sometimes an error subframe or a NOP, and
/// sometimes cut short.
fn reply_payload() -> impl Strategy<Value = Vec<u8>> {
    let reg = prop_oneof![0x000u16..0x010, 0x000u16..0x030, 0x100u16..0x140, 0xFFF0u16..=0xFFFF, any::<u16>()];
    let sub = prop_oneof![
        8 => (reg, 1u16..6, resolution(), proptest::collection::vec(any::<u8>(), 24)).prop_map(|(start, count, res, bytes)| {
            let mut buf = [0u8; 64];
            let mut w = rtloop_proto::FrameWriter::new(&mut buf);
            let values: Vec<rtloop_proto::Value> = bytes
                .chunks_exact(res.size())
                .take(count as usize)
                .map(|c| rtloop_proto::Value::from_le_bytes(res, c).unwrap())
                .collect();
            let _ = w.reply_registers(start, &values);
            w.as_slice().to_vec()
        }),
        1 => (any::<u16>(), any::<u32>()).prop_map(|(r, c)| {
            let mut buf = [0u8; 64];
            let mut w = rtloop_proto::FrameWriter::new(&mut buf);
            w.read_error(r, c).unwrap();
            w.as_slice().to_vec()
        }),
        1 => Just(vec![0x50]),
    ];
    (proptest::collection::vec(sub, 0..8), any::<u8>()).prop_map(|(subs, cut)| {
        let mut p: Vec<u8> = subs.concat();
        p.truncate(64);
        if cut % 4 == 0 && !p.is_empty() {
            let n = usize::from(cut) % p.len();
            p.truncate(n);
        }
        p
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn position_commands_encode_identically(
        (v, r) in command(),
        (f, extras, raw) in query(),
        with_query in any::<bool>(),
        prefill in prop_oneof![Just(0usize), 0usize..64],
        wrote in proptest::bool::weighted(0.1),
    ) {
        let (qn, qo) = queries(&f, &extras, raw);
        let cn = rtloop_proto::host::PositionCommand::from_registers(v);
        let rn = rtloop_proto::host::PositionResolution::from_registers(r);
        let co = host::PositionCommand::from_registers(v);
        let ro = host::PositionResolution::from_registers(r.map(old_res));
        both(
            prefill,
            wrote,
            |w| rtloop_proto::host::encode_position(w, &cn, &rn, with_query.then_some(&qn)),
            |w| host::encode_position(w, &co, &ro, with_query.then_some(&qo)),
        )?;
    }

    #[test]
    fn queries_and_modes_encode_identically(
        (f, extras, raw) in query(),
        prefill in prop_oneof![Just(0usize), 0usize..64],
        wrote in proptest::bool::weighted(0.1),
        which in 0u8..4,
    ) {
        let (qn, qo) = queries(&f, &extras, raw);
        let rn: Vec<(u16, Resolution)> = qn.reads().as_slice().to_vec();
        let ro: Vec<(u16, Resolution)> =
            qo.reads().as_slice().iter().map(|&(r, res)| (r, Resolution::from_type_code(res.type_code()))).collect();
        prop_assert_eq!(rn, ro);
        prop_assert_eq!(qn.reads().telemetry().len(), qo.reads().telemetry().len());
        both(
            prefill,
            wrote,
            |w| match which {
                0 => rtloop_proto::host::encode_query(w, &qn),
                1 => rtloop_proto::host::encode_stop(w, Some(&qn)),
                2 => rtloop_proto::host::encode_zero_velocity(w, Some(&qn)),
                _ => rtloop_proto::host::encode_brake(w, None),
            },
            |w| match which {
                0 => host::encode_query(w, &qo),
                1 => host::encode_stop(w, Some(&qo)),
                2 => host::encode_zero_velocity(w, Some(&qo)),
                _ => host::encode_brake(w, None),
            },
        )?;
    }

    #[test]
    fn arbitrary_writes_and_reads_encode_identically(
        entries in proptest::collection::vec(
            (prop_oneof![0u16..0x30, 0x100u16..0x140, 0xFFF8u16..=0xFFFF], proptest::option::weighted(0.8, value()), resolution()),
            0..40,
        ),
        prefill in prop_oneof![Just(0usize), 0usize..64],
        wrote in proptest::bool::weighted(0.2),
    ) {
        let old: Vec<(u16, Option<f64>, value::Resolution)> = entries.iter().map(|&(r, x, res)| (r, x, old_res(res))).collect();
        both(prefill, wrote, |w| rtloop_proto::host::encode_writes(w, &entries), |w| host::encode_writes(w, &old))?;
        let reads: Vec<(u16, Resolution)> = entries.iter().map(|&(r, _, res)| (r, res)).collect();
        let old: Vec<(u16, value::Resolution)> = reads.iter().map(|&(r, res)| (r, old_res(res))).collect();
        both(prefill, wrote, |w| rtloop_proto::host::encode_reads(w, &reads), |w| host::encode_reads(w, &old))?;
        // Single values through the public scaling functions.
        for &(r, x, res) in &entries {
            let x = x.unwrap_or(f64::NAN);
            prop_assert_eq!(
                format!("{:?}", rtloop_proto::host::encode_register(r, x, res)),
                format!("{:?}", host::encode_register(r, x, old_res(res)))
            );
        }
    }

    #[test]
    fn long_runs_encode_identically(
        start in prop_oneof![0u16..0x40, 0xFFB0u16..=0xFFFF],
        n in 1usize..140,
        res in resolution(),
        x in value(),
        prefill in prop_oneof![Just(0usize), 0usize..64],
    ) {
        // Runs up to and past the 64 values one subframe may hold (and past 0xFFFF).
        let entries: Vec<(u16, Option<f64>, Resolution)> =
            (0..n).map(|k| (start.wrapping_add(k as u16), Some(x), res)).collect();
        both(prefill, false, |w| rtloop_proto::host::encode_writes(w, &entries), |w| host::encode_writes(w, &entries))?;
    }

    #[test]
    fn replies_decode_identically(payload in reply_payload()) {
        decode_both(&payload)?;
    }

    #[test]
    fn arbitrary_bytes_decode_identically(payload in proptest::collection::vec(any::<u8>(), 0..=64)) {
        decode_both(&payload)?;
    }

    #[test]
    fn single_values_decode_identically(bytes in any::<[u8; 4]>(), res in resolution(), r in any::<u16>()) {
        let a = rtloop_proto::Value::from_le_bytes(res, &bytes).unwrap();
        let b = value::Value::from_le_bytes(old_res(res), &bytes).unwrap();
        let class = rtloop_proto::register::class_of(r);
        prop_assert_eq!(a.decode(class).to_bits(), b.decode(class).to_bits());
        prop_assert_eq!(format!("{:?}", rtloop_proto::host::read_int_register(r, a)), format!("{:?}", host::read_int_register(r, b)));
    }
}
