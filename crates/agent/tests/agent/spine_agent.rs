//! The spine and a Rust agent in one process: round trip, seqlock consistency under
//! concurrent writes, the liveness/arming state machine on an injected clock, lockstep.

use crate::common;

use rtloop_agent::layout::{field, kind, status, MAX_SERVOS};
use rtloop_agent::{Agent, Limits, Lockstep, Poll, ServoCommandError, Spine, SpineConfig, SpineGone, ValidCommand};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MS: u64 = 1_000_000;

fn spine(tag: &str, servos: u32) -> Spine {
    let config = SpineConfig::new(&common::unique_name(tag), &common::servos(servos), 1000.0);
    Spine::create(&config).unwrap().0
}

/// Read the state, echo the token, send: the explicit arming.
fn arm(agent: &mut Agent) {
    agent.read_state().unwrap();
    assert!(agent.rearm_if_needed());
    agent.send();
}

#[test]
fn state_and_command_round_trip() {
    let mut spine = spine("rt", 12);
    let mut agent = Agent::attach(spine.name()).unwrap();
    assert_eq!(agent.header().servo_count, 12);
    assert_eq!(agent.header().servos[3], rtloop_agent::ServoInfo { id: 4, bus: 4 });
    assert_eq!(agent.header().period_ns, 1_000_000);
    assert_eq!(agent.header().spine_pid as u32, std::process::id());
    assert_eq!(spine.agent_pid(), Some(std::process::id() as i32));

    let s = spine.state_mut();
    s.cycle = 7;
    s.time_ns = 7_000_000;
    s.imu.present = 1;
    s.imu.quaternion = [1.0, 0.0, 0.0, 0.0];
    s.servos[2].mode = 10;
    s.servos[2].position = 0.25;
    s.servos[2].fresh = 1;
    s.servos[2].request_cycle = 7;
    s.servos[2].age_cycles = 0;
    spine.publish(123);
    let st = *agent.read_state().unwrap();
    assert_eq!((st.cycle, st.time_ns, st.stamp_ns, st.status), (7, 7_000_000, 123, status::WAITING));
    // The cheap look: the sequence stays that of the last read until the next publish.
    assert_eq!(agent.state_sequence(), st.seq);
    assert_eq!(st.servo_count, 12);
    assert_eq!(st.arm_token, spine.arm_token());
    assert_ne!(st.arm_token, 0);
    assert_eq!((st.servos[2].mode, st.servos[2].position, st.servos[2].fresh), (10, 0.25, 1));
    assert!(st.servos[0].position.is_nan() && st.servos[0].request_cycle == -1 && st.servos[0].mode == -1);
    assert_eq!(st.imu.quaternion, [1.0, 0.0, 0.0, 0.0]);

    // Arm and command every servo.
    agent.rearm_if_needed();
    let cmd = agent.command_mut();
    cmd.for_cycle = 7;
    for (i, c) in cmd.servos.iter_mut().take(12).enumerate() {
        c.kind = kind::POSITION;
        c.set(0, i as f64 * 0.01);
        c.set(3, 1.0);
        c.set(7, 0.1);
    }
    cmd.servos[11].kind = kind::BRAKE;
    cmd.servos[11].present = 0;
    assert_eq!(agent.send(), 1);
    assert_eq!(spine.poll_command(MS), Poll::Armed);
    assert!(spine.following());
    assert_eq!(spine.command().unwrap().for_cycle, 7);
    let limits = Limits::default();
    for i in 0..11 {
        let ValidCommand::Position(p) = spine.command_for(i, &limits).unwrap().unwrap() else { panic!() };
        assert_eq!(p.position, Some(i as f64 * 0.01));
        assert_eq!((p.kp_scale, p.watchdog_timeout, p.velocity), (Some(1.0), Some(0.1), None));
    }
    assert_eq!(spine.command_for(11, &limits), Some(Ok(ValidCommand::Brake)));
    assert!(matches!(spine.command_for(12, &limits), Some(Err(rtloop_agent::ServoCommandError::NoSuchServo { .. }))));
    assert_eq!(spine.poll_command(2 * MS), Poll::Unchanged);

    // The published counters follow.
    let before = agent.state_sequence();
    spine.publish(3 * MS);
    assert_ne!(agent.state_sequence(), before, "a publish moves the sequence");
    let st = agent.read_state().unwrap();
    assert_eq!((st.status, st.rearms, st.timeouts), (status::FOLLOWING, 1, 0));
}

#[test]
fn liveness_timeout_and_rearm_on_an_injected_clock() {
    let name = common::unique_name("live");
    let mut config = SpineConfig::new(&name, &common::servos(2), 500.0);
    config.timeout_ns = 100 * MS;
    let (mut spine, warning) = Spine::create(&config).unwrap();
    assert!(warning.is_none());
    let mut agent = Agent::attach(&name).unwrap();

    // Waiting: nothing times out, commands without the token are ignored.
    assert_eq!(spine.status(), status::WAITING);
    assert_eq!(spine.poll_command(0), Poll::Unchanged);
    assert_eq!(spine.poll_command(10_000 * MS), Poll::Unchanged, "no timeout before arming");
    agent.send();
    assert_eq!(spine.poll_command(10_001 * MS), Poll::Ignored);
    agent.arm(spine.arm_token() ^ 1);
    agent.send();
    assert_eq!(spine.poll_command(10_002 * MS), Poll::Ignored, "a wrong token does not arm");
    assert!(spine.command_for(0, &Limits::default()).is_none());

    // Arm at t = 20 s.
    spine.publish(10_003 * MS);
    arm(&mut agent);
    let t = 20_000 * MS;
    assert_eq!(spine.poll_command(t), Poll::Armed);
    assert_eq!((spine.counters().rearms, spine.counters().timeouts), (1, 0));
    agent.send();
    assert_eq!(spine.poll_command(t + 50 * MS), Poll::Command);
    // Exactly the timeout: still alive; one ns more: safe.
    assert_eq!(spine.poll_command(t + 150 * MS), Poll::Unchanged);
    let first_token = spine.arm_token();
    assert_eq!(spine.poll_command(t + 150 * MS + 1), Poll::TimedOut);
    assert_eq!(spine.status(), status::SAFE);
    assert_eq!(spine.counters().timeouts, 1);
    assert_ne!(spine.arm_token(), first_token, "a timeout publishes a new token");
    assert_eq!(spine.poll_command(t + 400 * MS), Poll::Unchanged, "one timeout per loss");
    assert!(spine.command().is_none());

    // The agent keeps sending with the old token: not followed.
    agent.send();
    assert_eq!(spine.poll_command(t + 401 * MS), Poll::Ignored);
    assert_eq!(spine.status(), status::SAFE);

    // It reads the new token and echoes it: re-armed.
    spine.publish(t + 402 * MS);
    let st = agent.read_state().unwrap();
    assert_eq!((st.status, st.timeouts, st.arm_token), (status::SAFE, 1, spine.arm_token()));
    assert!(agent.rearm_if_needed());
    assert!(!agent.rearm_if_needed(), "only once per token");
    agent.send();
    assert_eq!(spine.poll_command(t + 403 * MS), Poll::Armed);
    assert_eq!(spine.counters().rearms, 2);
    assert!(spine.following());

    // A torn read (the agent died mid-write) is counted and does not count as a heartbeat.
    let seq = u64::from_le_bytes(common::read_raw(&name, rtloop_agent::layout::COMMAND_OFFSET, 8).try_into().unwrap());
    common::write_raw(&name, rtloop_agent::layout::COMMAND_OFFSET, &(seq | 1).to_le_bytes());
    assert_eq!(spine.poll_command(t + 404 * MS), Poll::Torn);
    assert_eq!(spine.counters().torn, 1);
    assert_eq!(spine.poll_command(t + 600 * MS), Poll::TimedOut);

    // Shutting down: commands are no longer followed.
    spine.begin_shutdown();
    spine.publish(t + 601 * MS);
    assert_eq!(agent.read_state().unwrap().status, status::SHUTTING_DOWN);
    assert!(!agent.rearm_if_needed());
}

#[test]
fn rejected_commands_are_counted_with_one_event_per_burst() {
    let mut spine = spine("burst", 3);
    let torque = |value| ServoCommandError::OutOfRange { field: "maximum_torque", value, min: 0.0, max: 8.0 };
    let nan = ServoCommandError::NonFinite { field: "velocity", value: f64::NAN };
    assert!(spine.note_rejected(0, 10, &torque(10.0)));
    assert!(!spine.note_rejected(1, 10, &torque(12.0)));
    assert!(!spine.note_rejected(0, 11, &nan));
    assert!(spine.note_rejected(2, 13, &torque(9.0)));
    assert_eq!(spine.counters().rejected, 4);
    // The record: per servo, per cause (the first of each, typed), and in how many cycles.
    let r = spine.refusals();
    assert_eq!(&r.per_servo[..4], &[2, 1, 1, 0]);
    assert_eq!(r.cycles, 3);
    let causes: Vec<_> = r.causes().map(|c| (c.first.field(), c.servo, c.count)).collect();
    assert_eq!(causes, [(Some("maximum_torque"), 0, 3), (Some("velocity"), 0, 1)]);
    assert_eq!(r.causes().next().unwrap().first, torque(10.0), "the first refusal of the cause, as it was");
    assert_eq!(r.other, 0);
    let mut agent = Agent::attach(spine.name()).unwrap();
    spine.publish(0);
    assert_eq!(agent.read_state().unwrap().rejected, 4);
}

#[test]
fn refusal_causes_beyond_the_record_are_counted_as_other() {
    let mut spine = spine("causes", 1);
    let fields = ["position", "velocity", "kp_scale", "kd_scale", "accel_limit", "ilimit_scale"];
    for (cycle, field) in fields.iter().enumerate() {
        let e = ServoCommandError::OutOfRange { field, value: 2.0, min: 0.0, max: 1.0 };
        spine.note_rejected(0, cycle as u64, &e);
    }
    let r = spine.refusals();
    assert_eq!(r.causes().count(), rtloop_agent::REFUSAL_CAUSES);
    assert_eq!(r.other, (fields.len() - rtloop_agent::REFUSAL_CAUSES) as u64);
    assert_eq!(r.per_servo[0], fields.len() as u64);
}

#[test]
fn the_agent_sees_the_spine_go_away() {
    let spine = spine("gone", 3);
    let mut agent = Agent::attach(spine.name()).unwrap();
    agent.read_state().unwrap();
    assert_eq!(agent.spine_gone(), None);
    let path = rtloop_agent::segment_path(spine.name());
    drop(spine);
    assert!(!path.exists(), "the segment is removed");
    assert_eq!(agent.spine_gone(), Some(SpineGone::Unlinked));
    assert_eq!(agent.read_state().unwrap().status, status::ENDED);
    assert_eq!(agent.spine_gone(), Some(SpineGone::Ended));
}

#[test]
fn seqlock_never_yields_a_torn_state() {
    // The spine hammers states whose every caller-filled field equals the cycle; the agent
    // checks each copy is one whole write.
    let spine = spine("tornstate", MAX_SERVOS as u32);
    let name = spine.name().to_string();
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let done = Arc::clone(&done);
        let mut spine = spine;
        std::thread::spawn(move || {
            let mut k = 0u64;
            while !done.load(Ordering::Relaxed) {
                k += 1;
                let x = k as f64;
                let s = spine.state_mut();
                s.cycle = k;
                s.time_ns = k;
                s.imu.quaternion = [x; 4];
                s.imu.rate_dps = [x; 3];
                s.imu.accel_mps2 = [x; 3];
                for sv in s.servos.iter_mut() {
                    sv.request_cycle = k as i64;
                    sv.age_cycles = k as i64;
                    sv.position = x;
                    sv.velocity = x;
                    sv.torque = x;
                    sv.voltage = x;
                }
                spine.publish(k);
                // A breath between writes (a real spine writes once a period), short
                // enough that most reads still overlap a write.
                for _ in 0..200 {
                    std::hint::spin_loop();
                }
            }
            spine
        })
    };
    let mut agent = Agent::attach(&name).unwrap();
    let (mut reads, mut distinct, mut last, mut torn) = (0u64, 0u64, 0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(300) || distinct < 100 {
        assert!(start.elapsed() < Duration::from_secs(10), "no progress: {reads} reads, {torn} torn");
        let Ok(s) = agent.read_state() else {
            torn += 1;
            continue;
        };
        let k = s.cycle;
        if k == 0 {
            continue; // the state published at creation, before the writer's first
        }
        let x = k as f64;
        assert_eq!(s.time_ns, k);
        assert_eq!(s.stamp_ns, k);
        assert!(s.imu.quaternion.iter().chain(&s.imu.rate_dps).chain(&s.imu.accel_mps2).all(|&v| v == x));
        for sv in &s.servos {
            assert_eq!((sv.request_cycle, sv.age_cycles), (k as i64, k as i64));
            assert!([sv.position, sv.velocity, sv.torque, sv.voltage].iter().all(|&v| v == x), "torn at {k}");
        }
        assert!(k >= last, "states go forward");
        distinct += u64::from(k != last);
        last = k;
        reads += 1;
    }
    done.store(true, Ordering::Relaxed);
    drop(writer.join().unwrap());
    assert!(reads > 100 && distinct > 1, "{reads} reads, {distinct} distinct");
}

#[test]
fn seqlock_never_yields_a_torn_command() {
    // The agent hammers commands whose every field equals `for_cycle`; the spine checks
    // each command it takes is one whole write (or reports the read as torn).
    let mut spine = spine("torncmd", MAX_SERVOS as u32);
    let mut agent = Agent::attach(spine.name()).unwrap();
    arm(&mut agent);
    assert_eq!(spine.poll_command(0), Poll::Armed);
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut k = 0u64;
            while !done.load(Ordering::Relaxed) {
                k += 1;
                let cmd = agent.command_mut();
                cmd.for_cycle = k;
                for c in cmd.servos.iter_mut() {
                    c.kind = k as u32;
                    c.present = k as u32;
                    for f in 0..14 {
                        *c.field_mut(f).unwrap() = k as f64;
                    }
                }
                agent.send();
            }
            agent
        })
    };
    let (mut taken, mut torn) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(300) || taken < 100 {
        match spine.poll_command(0) {
            Poll::Command => {
                let c = spine.command().unwrap();
                let k = c.for_cycle;
                for s in &c.servos {
                    assert_eq!((s.kind, s.present), (k as u32, k as u32));
                    assert!(s.fields().iter().all(|&v| v == k as f64), "torn command at {k}");
                }
                taken += 1;
            }
            Poll::Torn => torn += 1,
            Poll::Unchanged => {}
            other => panic!("{other:?}"),
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the writer made no progress");
    }
    done.store(true, Ordering::Relaxed);
    drop(writer.join().unwrap());
    assert_eq!(spine.counters().torn, torn);
    assert!(taken >= 100, "{taken} commands taken, {torn} torn");
}

#[test]
fn lockstep_waits_for_the_command_of_each_cycle() {
    let name = common::unique_name("lockstep");
    let mut config = SpineConfig::new(&name, &common::servos(4), 1000.0);
    config.lockstep = true;
    config.timeout_ns = 2_000 * MS;
    let (mut spine, _) = Spine::create(&config).unwrap();
    let stop = AtomicBool::new(false);
    let agent_thread = {
        let name = name.clone();
        std::thread::spawn(move || {
            let mut agent = Agent::attach(&name).unwrap();
            assert_eq!(agent.header().lockstep, 1);
            let mut last = u64::MAX;
            let mut answered = 0;
            loop {
                let s = *agent.read_state().unwrap();
                if s.status == status::ENDED {
                    return answered;
                }
                let rearm = agent.rearm_if_needed();
                if s.cycle != last || rearm {
                    last = s.cycle;
                    let cmd = agent.command_mut();
                    cmd.for_cycle = s.cycle;
                    cmd.servos[0].kind = kind::POSITION;
                    cmd.servos[0].present = field::POSITION;
                    cmd.servos[0].position = s.cycle as f64 * 0.001;
                    agent.send();
                    answered += 1;
                } else {
                    std::thread::sleep(Duration::from_micros(20));
                }
            }
        })
    };
    for cycle in 1..=50u64 {
        spine.state_mut().cycle = cycle;
        spine.publish(rtloop_agent::monotonic_ns());
        assert_eq!(spine.wait_command_for(cycle, || stop.load(Ordering::Relaxed)), Lockstep::Command, "cycle {cycle}");
        assert_eq!(spine.command().unwrap().for_cycle, cycle);
        let Some(Ok(ValidCommand::Position(p))) = spine.command_for(0, &Limits::default()) else { panic!() };
        assert_eq!(p.position, Some(cycle as f64 * 0.001));
    }
    assert_eq!(spine.counters().rearms, 1);
    drop(spine);
    assert!(agent_thread.join().unwrap() >= 50);
}

/// This thread's CPU time so far.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A stop flag raised by another thread after `after`.
fn stop_after(after: Duration) -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let raise = Arc::clone(&flag);
    std::thread::spawn(move || {
        std::thread::sleep(after);
        raise.store(true, Ordering::Relaxed);
    });
    flag
}

fn publish(spine: &mut Spine, cycle: u64) {
    spine.state_mut().cycle = cycle;
    spine.publish(rtloop_agent::monotonic_ns());
}

#[test]
fn a_lockstep_spine_waits_for_a_live_agent_however_long_it_pauses_without_using_the_cpu() {
    let name = common::unique_name("lockpause");
    let mut config = SpineConfig::new(&name, &common::servos(1), 1000.0);
    config.lockstep = true;
    config.timeout_ns = 20 * MS;
    config.arm_wait_ns = 50 * MS;
    let (mut spine, _) = Spine::create(&config).unwrap();
    assert_eq!(spine.wait_command_for(1, || true), Lockstep::Stopped);

    // Nobody arms it: the wait ends after the arm wait, not the (shorter) timeout, and
    // nothing timed out (there was nothing to time out).
    let start = Instant::now();
    assert_eq!(spine.wait_command_for(1, || false), Lockstep::NotArmed);
    assert!(start.elapsed() >= Duration::from_millis(50));
    assert_eq!((spine.status(), spine.counters().timeouts), (status::WAITING, 0));

    // Armed by the command answering cycle 1.
    let mut agent = Agent::attach(&name).unwrap();
    publish(&mut spine, 1);
    agent.read_state().unwrap();
    assert!(agent.rearm_if_needed());
    agent.command_mut().for_cycle = 1;
    agent.send();
    assert_eq!(spine.wait_command_for(1, || false), Lockstep::Command);

    // The agent (registered, alive) pauses for ten timeouts: the spine still waits, without
    // timing out, and sleeps meanwhile (a few wake-ups, not a spinning core).
    publish(&mut spine, 2);
    let stop = stop_after(Duration::from_millis(300));
    let (t, cpu) = (Instant::now(), thread_cpu());
    assert_eq!(spine.wait_command_for(2, || stop.load(Ordering::Relaxed)), Lockstep::Stopped);
    let (waited, used) = (t.elapsed(), thread_cpu() - cpu);
    assert!(waited >= Duration::from_millis(300));
    assert_eq!((spine.status(), spine.counters().timeouts), (status::FOLLOWING, 0));
    assert!(used < waited / 5, "the waiting spine used {used:?} of CPU in {waited:?}");

    // The command after the pause is taken as if there had been none; the bell wakes the
    // spine long before its next look.
    let answer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        let t = Instant::now();
        agent.command_mut().for_cycle = 2;
        agent.send();
        (agent, t)
    });
    assert_eq!(spine.wait_command_for(2, || false), Lockstep::Command);
    let woke = Instant::now();
    let (mut agent, sent) = answer.join().unwrap();
    assert_eq!(spine.command().unwrap().for_cycle, 2);
    assert!(woke >= sent);

    // A command held over 5 cycles answers them without a wait; the sixth waits again.
    publish(&mut spine, 3);
    agent.command_mut().for_cycle = 3;
    agent.command_mut().hold_cycles = 5;
    agent.send();
    for cycle in 3..8 {
        publish(&mut spine, cycle);
        assert_eq!(spine.wait_command_for(cycle, || true), Lockstep::Command, "cycle {cycle}");
        assert!(spine.covers(cycle));
    }
    assert!(!spine.covers(8));
    assert_eq!(spine.wait_command_for(8, || true), Lockstep::Stopped);

    // The agent detaches (exits): the wait ends at once, whatever the arm wait.
    drop(agent);
    assert_eq!(spine.wait_command_for(8, || false), Lockstep::AgentGone);
}

#[test]
fn a_lockstep_wait_sees_a_zombie_agent_as_gone() {
    let name = common::unique_name("zombie");
    let mut config = SpineConfig::new(&name, &common::servos(1), 1000.0);
    config.lockstep = true;
    let (mut spine, _) = Spine::create(&config).unwrap();
    // A child that exits at once and is not reaped: kill(pid, 0) still succeeds on it.
    let child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id() as i32;
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    assert_eq!(unsafe { libc::kill(pid, 0) }, 0, "the zombie answers kill(pid, 0)");
    assert!(rtloop_agent::pid_dead(pid), "a zombie is dead");
    common::write_raw(&name, 80, &pid.to_le_bytes());
    publish(&mut spine, 1);
    let t = Instant::now();
    assert_eq!(spine.wait_command_for(1, || false), Lockstep::AgentGone);
    assert!(t.elapsed() < Duration::from_secs(5));
    drop(child);
}

#[test]
fn an_unregistered_lockstep_agent_times_out_and_rearms() {
    let name = common::unique_name("lockstop");
    let mut config = SpineConfig::new(&name, &common::servos(1), 1000.0);
    config.lockstep = true;
    config.timeout_ns = 20 * MS;
    config.arm_wait_ns = 50 * MS;
    let (mut spine, _) = Spine::create(&config).unwrap();
    // An agent that writes commands without registering its pid (a hand-made one): nothing
    // tells the spine whether it lives, so the timeout applies.
    let mut agent = Agent::attach(&name).unwrap();
    common::write_raw(&name, 80, &0i32.to_le_bytes());
    publish(&mut spine, 1);
    agent.read_state().unwrap();
    assert!(agent.rearm_if_needed());
    agent.command_mut().for_cycle = 1;
    agent.send();
    assert_eq!(spine.wait_command_for(1, || false), Lockstep::Command);

    // Silent while following: the cycle times out, the spine is SAFE with a fresh token.
    let token = spine.arm_token();
    publish(&mut spine, 2);
    assert_eq!(spine.wait_command_for(2, || false), Lockstep::TimedOut);
    assert_eq!((spine.status(), spine.counters().timeouts), (status::SAFE, 1));
    assert_ne!(spine.arm_token(), token);
    publish(&mut spine, 3);
    let st = *agent.read_state().unwrap();
    assert_eq!((st.cycle, st.status, st.timeouts, st.arm_token), (3, status::SAFE, 1, spine.arm_token()));

    // Commands with the old token are ignored: the arm wait ends the wait.
    agent.command_mut().for_cycle = 3;
    agent.send();
    assert_eq!(spine.wait_command_for(3, || false), Lockstep::NotArmed);

    // The new token re-arms it.
    assert!(agent.rearm_if_needed());
    agent.send();
    assert_eq!(spine.wait_command_for(3, || false), Lockstep::Command);
    assert_eq!(spine.counters().rearms, 2);

    // A writer that died mid-write (odd sequence): the cycle times out, one torn cycle (not
    // one per look).
    let seq = u64::from_le_bytes(common::read_raw(&name, rtloop_agent::layout::COMMAND_OFFSET, 8).try_into().unwrap());
    common::write_raw(&name, rtloop_agent::layout::COMMAND_OFFSET, &(seq | 1).to_le_bytes());
    publish(&mut spine, 4);
    assert_eq!(spine.wait_command_for(4, || false), Lockstep::TimedOut);
    assert_eq!(spine.counters().torn, 1);
    common::write_raw(&name, rtloop_agent::layout::COMMAND_OFFSET, &seq.to_le_bytes());
}

#[test]
fn an_agent_sleeps_on_the_bell_until_the_spine_awaits_it() {
    let name = common::unique_name("bell");
    let mut config = SpineConfig::new(&name, &common::servos(1), 1000.0);
    config.lockstep = true;
    let (mut spine, _) = Spine::create(&config).unwrap();
    let mut agent = Agent::attach(&name).unwrap();
    let sleeper = std::thread::spawn(move || {
        let (t, cpu) = (Instant::now(), thread_cpu());
        let mut woke = 0;
        // Sleep until the state the spine awaits: intermediate states do not ring.
        loop {
            let seen = agent.state_bell();
            let s = *agent.read_state().unwrap();
            if s.awaiting == 1 {
                return (s.cycle, woke, t.elapsed(), thread_cpu() - cpu);
            }
            agent.sleep_until_rung(seen, 5_000 * MS);
            woke += 1;
        }
    });
    std::thread::sleep(Duration::from_millis(100));
    for cycle in 1..5 {
        spine.state_mut().cycle = cycle;
        spine.state_mut().awaiting = 0;
        spine.publish(rtloop_agent::monotonic_ns());
    }
    std::thread::sleep(Duration::from_millis(100));
    spine.state_mut().cycle = 5;
    spine.state_mut().awaiting = 1;
    spine.publish(rtloop_agent::monotonic_ns());
    let (cycle, woke, slept, cpu) = sleeper.join().unwrap();
    assert_eq!((cycle, woke), (5, 1), "one wake-up, by the awaited state");
    assert!(slept >= Duration::from_millis(150) && slept < Duration::from_secs(4), "{slept:?}");
    assert!(cpu < Duration::from_millis(50), "the sleeping agent used {cpu:?} of CPU");
}

#[test]
fn commands_are_followed_only_from_an_agent_of_this_version() {
    let name = common::unique_name("foreign");
    let (mut spine, _) = Spine::create(&SpineConfig::new(&name, &common::servos(1), 1000.0)).unwrap();
    let mut seq = 0u64;
    let mut write = |spine: &Spine, version: u32, heartbeat: u64| {
        common::write_raw(&name, 84, &version.to_le_bytes());
        let mut block = rtloop_agent::CommandBlock::empty();
        seq += 2;
        block.seq = seq;
        block.heartbeat = heartbeat;
        block.arm_token = spine.arm_token();
        block.servo_count = 1;
        common::write_command_raw(&name, &block);
    };
    // An agent of version 1 that ignored its refusal and echoes the token: ignored.
    write(&spine, 1, 1);
    assert_eq!(spine.poll_command(MS), Poll::Ignored);
    assert!(!spine.following());
    let m = spine.version_mismatch().unwrap();
    assert_eq!(
        m.to_string(),
        "agent speaks protocol version 1, this spine 4; the spine ignores its commands: rebuild the agent against \
         this rtloop's rtloop_agent.h"
    );
    assert_eq!(spine.version_mismatch(), None, "reported once");
    // Commands written by nobody who stated a version (agent_version 0): ignored too.
    write(&spine, 0, 2);
    assert_eq!(spine.poll_command(2 * MS), Poll::Ignored);
    let m = spine.version_mismatch().unwrap();
    assert_eq!(m.agent, 0);
    assert!(m.to_string().starts_with("an agent wrote commands without stating its protocol version"), "{m}");
    // Version 1 again: ignored, and already reported.
    write(&spine, 1, 3);
    assert_eq!(spine.poll_command(3 * MS), Poll::Ignored);
    assert_eq!(spine.version_mismatch(), None);
    assert_eq!((spine.counters().wrong_version, spine.counters().rearms), (3, 0));

    // An agent of this version arms it; one that states its version with every command
    // recovers from a foreign attempt overwriting agent_version.
    let mut agent = Agent::attach(&name).unwrap();
    arm(&mut agent);
    assert_eq!(spine.poll_command(4 * MS), Poll::Armed);
    common::write_raw(&name, 84, &7u32.to_le_bytes());
    agent.send();
    assert_eq!(spine.poll_command(5 * MS), Poll::Command);
    assert_eq!(spine.counters().wrong_version, 3);
}

#[test]
fn a_wrong_version_agent_is_reported_once_by_the_spine() {
    let mut spine = spine("version", 1);
    assert_eq!(spine.version_mismatch(), None);
    // What an agent of version 7 does before refusing itself: write its version.
    common::write_raw(spine.name(), 84, &7u32.to_le_bytes());
    let m = spine.version_mismatch().unwrap();
    assert_eq!(
        m.to_string(),
        "agent speaks protocol version 7, this spine 4; the spine ignores its commands: rebuild the agent against \
         this rtloop's rtloop_agent.h"
    );
    assert_eq!(spine.version_mismatch(), None, "reported once");
    let _agent = Agent::attach(spine.name()).unwrap();
    assert_eq!(spine.version_mismatch(), None, "a matching agent clears it");
}
