//! The C example agent (`examples/agent.c` at the workspace root), compiled with the
//! system `cc` exactly as its header comment says, against a spine in this process: it
//! attaches (retrying until the spine exists), arms, holds every servo at the stand pose,
//! heartbeats, re-arms after a timeout, steps a lockstep run, and exits 0 when the spine is
//! dropped. Also: the C header compiles warning-free on its own and refuses a wrong
//! version with one sentence.

use crate::common;

use rtloop_agent::layout::status;
use rtloop_agent::{Limits, Lockstep, Poll, Spine, SpineConfig, ValidCommand};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MS: u64 = 1_000_000;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Compile `source` into `dir` with the documented flags plus -Werror; `None` when there is
/// no C compiler (the caller skips).
fn compile(source: &Path, dir: &Path, out: &str) -> Option<PathBuf> {
    let exe = dir.join(out);
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let result = Command::new("cc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-std=c11", "-I"])
        .arg(&include)
        .arg(source)
        .arg("-o")
        .arg(&exe)
        .output();
    match result {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("cannot run cc: {e}"),
        Ok(o) => {
            assert!(o.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&o.stderr));
            assert!(o.stderr.is_empty(), "cc warned:\n{}", String::from_utf8_lossy(&o.stderr));
            Some(exe)
        }
    }
}

fn c_agent(dir: &Path) -> Option<PathBuf> {
    compile(&workspace().join("examples/agent.c"), dir, "agent")
}

/// Wait for `child` to exit (at most `limit`); kill it and fail otherwise.
fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the agent did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Publish cycles every `period` until `until` says stop (or 10 s pass), polling the
/// agent's commands; returns the polls' outcomes as counted.
struct Run {
    cycle: u64,
    armed: u32,
    commands: u32,
    timeouts: u32,
}

fn run_until(spine: &mut Spine, run: &mut Run, mut until: impl FnMut(&Spine, &Run) -> bool) {
    let start = Instant::now();
    while !until(spine, run) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "gave up: status {} after {} cycles",
            spine.status(),
            run.cycle
        );
        run.cycle += 1;
        let s = spine.state_mut();
        s.cycle = run.cycle;
        s.time_ns = run.cycle * MS;
        for (i, servo) in s.servos.iter_mut().enumerate().take(12) {
            servo.mode = 10;
            servo.position = i as f64 * 0.1;
        }
        spine.publish(rtloop_agent::monotonic_ns());
        std::thread::sleep(Duration::from_micros(500));
        match spine.poll_command(rtloop_agent::monotonic_ns()) {
            Poll::Armed => run.armed += 1,
            Poll::Command => run.commands += 1,
            Poll::TimedOut => run.timeouts += 1,
            _ => {}
        }
    }
}

fn assert_stand_pose(spine: &Spine, servos: usize) {
    let limits = Limits::default();
    for i in 0..servos {
        let Some(Ok(ValidCommand::Position(p))) = spine.command_for(i, &limits) else {
            panic!("servo {i}: {:?}", spine.command_for(i, &limits));
        };
        assert_eq!(p.position, Some(0.0), "servo {i}");
        assert_eq!(
            (p.velocity, p.kp_scale, p.kd_scale, p.watchdog_timeout),
            (Some(0.0), Some(1.0), Some(1.0), Some(0.1))
        );
        assert_eq!(p.feedforward_torque, None);
    }
}

#[test]
fn the_c_agent_arms_holds_the_stand_pose_rearms_and_exits_when_the_spine_ends() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = c_agent(dir.path()) else {
        rtloop_testkit::skip("needs a C compiler (cc)");
        return;
    };
    let name = common::unique_name("c");
    // The agent starts first: it must retry until the spine exists.
    let mut child = Command::new(&exe).arg(&name).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let mut config = SpineConfig::new(&name, &common::servos(12), 1000.0);
    config.timeout_ns = 200 * MS;
    let (mut spine, _) = Spine::create(&config).unwrap();
    let mut run = Run { cycle: 0, armed: 0, commands: 0, timeouts: 0 };

    // It arms, then follows with one command (one heartbeat) per state.
    run_until(&mut spine, &mut run, |_, r| r.armed >= 1 && r.commands >= 50);
    assert!(spine.following());
    assert_eq!(spine.agent_pid(), Some(child.id() as i32));
    assert_stand_pose(&spine, 12);
    let c = spine.command().unwrap();
    assert!(c.heartbeat >= 51, "heartbeat {}", c.heartbeat);
    assert!(c.for_cycle >= 1 && c.for_cycle <= run.cycle, "for_cycle {} at {}", c.for_cycle, run.cycle);

    // Stall the spine past the timeout: it goes safe, publishes a new token, and the agent
    // re-arms with it.
    // (The first poll may still take the agent's late answer to the last state.)
    let timed_out = (0..5).any(|_| {
        std::thread::sleep(Duration::from_millis(250));
        spine.poll_command(rtloop_agent::monotonic_ns()) == Poll::TimedOut
    });
    assert!(timed_out);
    assert_eq!(spine.status(), status::SAFE);
    let armed_before = run.armed;
    run_until(&mut spine, &mut run, |s, r| r.armed > armed_before && s.following());
    assert!(spine.counters().rearms >= 2 && spine.counters().timeouts >= 1);
    assert_stand_pose(&spine, 12);

    // The spine goes away: the agent exits 0.
    drop(spine);
    let status = wait_exit(&mut child, Duration::from_secs(5));
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "agent exited {status}: {stderr}");
    assert!(stderr.contains("arming"), "{stderr}");
    assert!(stderr.contains("the spine is gone"), "{stderr}");
}

#[test]
fn the_c_agent_steps_a_lockstep_run() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = c_agent(dir.path()) else {
        rtloop_testkit::skip("needs a C compiler (cc)");
        return;
    };
    let name = common::unique_name("clock");
    let mut config = SpineConfig::new(&name, &common::servos(3), 1000.0);
    config.lockstep = true;
    config.timeout_ns = 3_000 * MS;
    let (mut spine, _) = Spine::create(&config).unwrap();
    let mut child = Command::new(&exe).arg(&name).stderr(Stdio::null()).spawn().unwrap();
    for cycle in 1..=100u64 {
        spine.state_mut().cycle = cycle;
        spine.publish(rtloop_agent::monotonic_ns());
        assert_eq!(spine.wait_command_for(cycle, || false), Lockstep::Command, "cycle {cycle}");
        assert_eq!(spine.command().unwrap().for_cycle, cycle);
    }
    assert_stand_pose(&spine, 3);
    drop(spine);
    assert!(wait_exit(&mut child, Duration::from_secs(5)).success());
}

#[test]
fn the_c_agent_exits_1_with_one_line_when_it_cannot_attach() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = c_agent(dir.path()) else {
        rtloop_testkit::skip("needs a C compiler (cc)");
        return;
    };
    let out = Command::new(&exe).arg("bad/name").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("agent name \"bad/name\" is invalid"), "{err}");

    // A segment of another protocol version: refused with one sentence.
    let name = common::unique_name("cver");
    let (spine, _) = Spine::create(&SpineConfig::new(&name, &common::servos(1), 100.0)).unwrap();
    common::write_raw(&name, 8, &9u32.to_le_bytes());
    let out = Command::new(&exe).arg(&name).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err.trim_end(),
        "agent: the spine speaks protocol version 9, this agent 4; rebuild the agent against the spine's rtloop_agent.h"
    );
    drop(spine);

    let out = Command::new(&exe).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "usage");
}

#[test]
fn the_c_agent_refuses_a_planted_fifo_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = c_agent(dir.path()) else {
        rtloop_testkit::skip("needs a C compiler (cc)");
        return;
    };
    // Any local user can make a FIFO in /dev/shm. The header's attach used to read it as a
    // segment still being created (0 bytes) and retry; it must say what it is, at once.
    let name = common::unique_name("cfifo");
    let _fifo = common::PlantedFifo::new(&name);
    let mut child = Command::new(&exe).arg(&name).stderr(Stdio::piped()).spawn().unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(20));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "agent: /dev/shm/rtloop-{name} is a FIFO (named pipe), not a regular file; remove it if it is yours, or use another agent name"
        )
    );
}

#[test]
fn the_c_header_compiles_alone_without_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("only_header.c");
    std::fs::write(&src, "#include \"rtloop_agent.h\"\nint main(void) { return (int)sizeof(rtloop_agent) == 0; }\n")
        .unwrap();
    if compile(&src, dir.path(), "only_header").is_none() {
        rtloop_testkit::skip("needs a C compiler (cc)");
    }
}

#[test]
fn the_c_agent_survives_its_segment_truncated_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = c_agent(dir.path()) else {
        rtloop_testkit::skip("needs a C compiler (cc)");
        return;
    };
    // Truncated to 0, and truncated then grown again: the agent's next access faulted
    // (SIGBUS killed it), or it read zeros and took them for states.
    for regrow in [false, true] {
        let name = common::unique_name(if regrow { "cregrow" } else { "ctrunc" });
        let (mut spine, _) = Spine::create(&SpineConfig::new(&name, &common::servos(4), 1000.0)).unwrap();
        let mut child = Command::new(&exe).arg(&name).stderr(Stdio::piped()).spawn().unwrap();
        let mut run = Run { cycle: 0, armed: 0, commands: 0, timeouts: 0 };
        run_until(&mut spine, &mut run, |_, r| r.armed >= 1 && r.commands >= 20);
        let path = rtloop_agent::segment_path(&name);
        let f = std::fs::File::create(&path).unwrap();
        if regrow {
            f.set_len(rtloop_agent::layout::TOTAL_SIZE as u64).unwrap();
        }
        let status = wait_exit(&mut child, Duration::from_secs(10));
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(1), "regrow {regrow}: {status}: {err}");
        assert_eq!(
            err.lines().last().unwrap(),
            format!(
                "agent: /dev/shm/rtloop-{name} was truncated (or replaced) by another process, so the spine ends its \
                 run; never write to /dev/shm/rtloop-{name} while a spine runs"
            )
        );
        spine.publish(rtloop_agent::monotonic_ns());
        let want = if regrow { rtloop_agent::SegmentLoss::Replaced } else { rtloop_agent::SegmentLoss::Truncated };
        assert_eq!(spine.check_segment(), Some(want));
        drop(spine);
        assert!(!path.exists(), "the spine removes its file");
    }
}

#[test]
fn the_c_agent_refuses_a_segment_of_another_user() {
    if !common::can_chown() {
        rtloop_testkit::skip("needs root, to give a segment to user nobody");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = c_agent(dir.path()) else {
        rtloop_testkit::skip("needs a C compiler (cc)");
        return;
    };
    let name = common::unique_name("cnobody");
    let (spine, _) = Spine::create(&SpineConfig::new(&name, &common::servos(2), 100.0)).unwrap();
    common::give_to_nobody(&rtloop_agent::segment_path(&name));
    let out = Command::new(&exe).arg(&name).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err.trim_end(),
        format!(
            "agent: /dev/shm/rtloop-{name} belongs to {}, not to this agent's user (uid {}); attach only to a spine \
             your own user runs, or use another agent name",
            rtloop_agent::describe_owner(common::nobody().0),
            rtloop_agent::euid()
        )
    );
    assert_eq!(spine.agent_pid(), None, "it never registered, let alone armed");
    assert_eq!(spine.counters().rearms, 0);
}

#[test]
fn the_c_header_compiles_without_its_guard_too() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("no_guard.c");
    std::fs::write(
        &src,
        "#define RTLOOP_AGENT_NO_GUARD\n#include \"rtloop_agent.h\"\nint main(void) { return (int)sizeof(rtloop_agent) == 0; }\n",
    )
    .unwrap();
    if compile(&src, dir.path(), "no_guard").is_none() {
        rtloop_testkit::skip("needs a C compiler (cc)");
    }
}
