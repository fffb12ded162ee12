//! The spine's hot path never touches the allocator: filling and publishing the state,
//! polling commands (new, unchanged, ignored, torn, timed out, re-armed), validating them,
//! counting and recording refusals, checking the agent's version and the segment.

use crate::common;

use rtloop_agent::layout::{kind, COMMAND_OFFSET};
use rtloop_agent::{Agent, Limits, Poll, Spine, SpineConfig};
use std::os::unix::fs::FileExt;

const MS: u64 = 1_000_000;

#[test]
fn the_harness_sees_an_allocation() {
    let (calls, v) = rtloop_testkit::count_allocations(|| std::hint::black_box(Vec::<u8>::with_capacity(8)));
    drop(v);
    assert!(calls >= 1);
}

#[test]
fn publish_and_poll_never_allocate() {
    let name = common::unique_name("noalloc");
    let (mut spine, _) = Spine::create(&SpineConfig::new(&name, &common::servos(12), 1000.0)).unwrap();
    let mut agent = Agent::attach(&name).unwrap();
    let limits = Limits::default();
    let raw = std::fs::OpenOptions::new().write(true).open(rtloop_agent::segment_path(&name)).unwrap();
    let mut outcomes = [0u32; 7];
    let mut accepted = 0u32;

    let (calls, ()) = rtloop_testkit::count_allocations(|| {
        let mut now = 0u64;
        for cycle in 1..=2000u64 {
            now += MS;
            let s = spine.state_mut();
            s.cycle = cycle;
            s.time_ns = now;
            for (i, sv) in s.servos.iter_mut().take(12).enumerate() {
                sv.position = i as f64;
                sv.fresh = 1;
            }
            spine.publish(now);
            // The agent (same thread, so its work is counted too): answers most cycles,
            // stalls for a while around cycle 1000 so the spine times out, then re-arms.
            if !(1000..1200).contains(&cycle) {
                agent.read_state().unwrap();
                agent.rearm_if_needed();
                let cmd = agent.command_mut();
                cmd.for_cycle = cycle;
                for c in cmd.servos.iter_mut().take(12) {
                    c.kind = kind::POSITION;
                    c.present = 1;
                    c.position = if cycle % 7 == 0 { f64::INFINITY } else { 0.0 };
                }
                agent.send();
            }
            if cycle % 500 == 0 {
                // An odd sequence, as an agent dying mid-write leaves it: a torn poll.
                raw.write_all_at(&1u64.to_le_bytes(), COMMAND_OFFSET as u64).unwrap();
            }
            let p = spine.poll_command(now);
            outcomes[match p {
                Poll::Command => 0,
                Poll::Armed => 1,
                Poll::Unchanged => 2,
                Poll::Ignored => 3,
                Poll::Torn => 4,
                Poll::TimedOut => 5,
                Poll::SegmentLost => 6,
            }] += 1;
            for i in 0..12 {
                match spine.command_for(i, &limits) {
                    Some(Ok(_)) => accepted += 1,
                    Some(Err(e)) => {
                        spine.note_rejected(i, cycle, &e);
                    }
                    None => {}
                }
            }
            let _ = spine.version_mismatch();
            let _ = spine.check_segment();
            let _ = agent.segment_lost();
        }
    });
    assert_eq!(calls, 0, "the hot path allocated; outcomes {outcomes:?}");
    assert!(outcomes[0] > 1000 && outcomes[1] >= 2 && outcomes[4] >= 1 && outcomes[5] >= 1, "{outcomes:?}");
    assert!(accepted > 10_000 && spine.counters().rejected > 1000);
    assert_eq!(outcomes[6], 0, "the segment stayed whole");
    // The refusals were recorded as they happened (fixed-size storage): every one counted
    // per servo, one cause (position infinite).
    let r = spine.refusals();
    assert_eq!(r.per_servo.iter().sum::<u64>(), spine.counters().rejected);
    assert_eq!(r.causes().count(), 1, "{r:?}");
}
