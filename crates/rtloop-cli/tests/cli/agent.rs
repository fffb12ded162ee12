//! `rtloop run --agent`: the spine follows a control law in another process — the C agent
//! of `examples/agent.c`, compiled here with the system C compiler, and hostile agents
//! written with the `agent` crate.

use crate::support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::{last_json, rtloop_bin, stderr, Scratch};

/// Compile examples/agent.c into `dir`; `None` (after a visible skip) without a compiler.
fn c_agent(dir: &Scratch) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = dir.path("agent");
    let o = Command::new("cc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-std=c11", "-I"])
        .arg(root.join("crates/agent/include"))
        .arg(root.join("examples/agent.c"))
        .arg("-o")
        .arg(&out)
        .output();
    match o {
        Ok(o) if o.status.success() => Some(out),
        Ok(o) => panic!("examples/agent.c does not compile: {}", String::from_utf8_lossy(&o.stderr)),
        Err(_) => {
            rtloop_testkit::skip("needs a C compiler (cc) to build examples/agent.c");
            None
        }
    }
}

/// A unique agent name per test (tests run in parallel, segments are system-wide).
fn name(test: &str) -> String {
    format!("t{}-{test}", std::process::id())
}

fn spine(args: &[&str]) -> Child {
    Command::new(rtloop_bin())
        .args(["run", "--quiet", "--json"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn start_agent(bin: &Path, name: &str) -> Child {
    Command::new(bin).arg(name).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
}

fn event_kinds(j: &Value) -> Vec<String> {
    j["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect()
}

fn event_time(j: &Value, kind: &str) -> f64 {
    j["events"].as_array().unwrap().iter().find(|e| e["kind"] == kind).unwrap_or_else(|| panic!("no {kind}: {j}"))
        ["time"]
        .as_f64()
        .unwrap()
}

/// Every `cycle` record of a log: (time s, index, command modes).
fn command_modes(log: &Path) -> Vec<(f64, u64, Vec<u64>)> {
    let reader = rtloop_tlog::reader::FileReader::open(log).unwrap();
    let filter = rtloop_tlog::reader::ItemFilter { record: Some("cycle".into()), ..Default::default() };
    let mut out = Vec::new();
    for item in reader.items(filter) {
        let item = item.unwrap();
        let v = reader.decode_item(&item).unwrap().to_json();
        let modes = v["servo"].as_array().unwrap().iter().map(|s| s["command_mode"].as_u64().unwrap()).collect();
        out.push((item.timestamp_us.unwrap() as f64 * 1e-6, v["index"].as_u64().unwrap(), modes));
    }
    out
}

#[test]
fn the_c_agent_arms_the_spine_and_holds_the_robot_then_exits_when_the_spine_ends() {
    let dir = Scratch::new("agent-run");
    let Some(agent) = c_agent(&dir) else { return };
    let name = name("run");
    // The agent may start first: it waits for the spine.
    let mut a = start_agent(&agent, &name);
    let o = spine(&["--agent", &name, "--duration", "1.5"]).wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j = last_json(&o);
    assert_eq!(j["agent"]["name"], name.as_str(), "{j}");
    assert!(j["agent"]["commands_applied"].as_u64().unwrap() > 500, "{j}");
    assert_eq!(j["agent"]["timeouts"], 0, "{j}");
    assert_eq!(j["agent"]["refused"], 0, "{j}");
    assert_eq!(event_kinds(&j), ["agent_armed", "shutdown"], "{j}");
    // The agent holds every joint at 0 rev; the shutdown leaves them in zero velocity.
    for id in 1..=12 {
        let f = &j["final"][id.to_string()];
        assert!(f["position"].as_f64().unwrap().abs() < 0.02, "servo {id}: {f}");
        assert_eq!(f["mode"], 12, "servo {id}: {f}");
    }
    let status = a.wait().unwrap();
    assert!(status.success(), "the agent exits 0 when the spine goes away: {status}");
    assert!(!rtloop::agent::segment_path(&name).exists(), "the spine removes its segment");
}

#[test]
fn a_killed_agent_gets_zero_velocity_within_the_timeout_and_its_successor_rearms() {
    let dir = Scratch::new("agent-kill");
    let Some(agent) = c_agent(&dir) else { return };
    let name = name("kill");
    let log = dir.path("kill.tlog");
    let run = spine(&["--agent", &name, "--duration", "3", "--log", log.to_str().unwrap()]);
    let mut first = start_agent(&agent, &name);
    std::thread::sleep(Duration::from_millis(1000));
    first.kill().unwrap(); // SIGKILL
    let _ = first.wait();
    std::thread::sleep(Duration::from_millis(500));
    let mut second = start_agent(&agent, &name);
    let o = run.wait_with_output().unwrap();
    assert!(second.wait().unwrap().success());
    // A run whose agent went silent is degraded: exit 1, and it says why.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let j = last_json(&o);
    assert_eq!(event_kinds(&j), ["agent_armed", "agent_timeout", "agent_rearmed", "shutdown"], "{j}");
    // `rearms` counts every arming, the first included (the shared state's number).
    assert_eq!((j["agent"]["timeouts"].as_u64(), j["agent"]["rearms"].as_u64()), (Some(1), Some(2)), "{j}");
    assert!(j["problems"][0].as_str().unwrap().contains("the agent went silent"), "{j}");
    // In the log: position commands (10) from the agent, then zero velocity (12) for every
    // servo from the timeout until the re-arm, then the agent's again.
    // Event times count from the first period, one period (1 ms) per cycle index.
    let index_at = |t: f64| (t * 1000.0).floor() as u64;
    let (timeout, rearm) = (index_at(event_time(&j, "agent_timeout")), index_at(event_time(&j, "agent_rearmed")));
    let cycles = command_modes(&log);
    let last_agent = cycles.iter().rfind(|c| c.1 < timeout && c.2.iter().all(|&m| m == 10)).unwrap().1;
    let first_safe = cycles.iter().find(|c| c.1 >= last_agent && c.2.iter().all(|&m| m == 12)).unwrap().1;
    eprintln!("agent killed: {} ms from its last command to zero velocity (timeout 100 ms)", first_safe - last_agent);
    assert!(
        first_safe - last_agent < 1000,
        "zero velocity came {} cycles after the agent's last command",
        first_safe - last_agent
    );
    for (_, index, modes) in cycles.iter().filter(|c| c.1 > timeout && c.1 + 2 < rearm) {
        assert!(
            modes.iter().all(|&m| m == 12),
            "cycle {index}, between timeout ({timeout}) and re-arm ({rearm}): {modes:?}"
        );
    }
    let after = cycles.iter().find(|c| c.1 > rearm + 2).unwrap();
    assert!(after.2.iter().all(|&m| m == 10), "the agent's commands apply again: {after:?}");
}

#[test]
fn the_same_agent_in_lockstep_twice_writes_the_same_log() {
    let dir = Scratch::new("agent-lockstep");
    let Some(agent) = c_agent(&dir) else { return };
    let mut logs = Vec::new();
    for run in ["a", "b"] {
        let name = name(&format!("ls{run}"));
        let log = dir.path(&format!("{run}.tlog"));
        let mut a = start_agent(&agent, &name);
        let o = spine(&["--agent", &name, "--lockstep", "--duration", "1", "--log", log.to_str().unwrap()])
            .wait_with_output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let j = last_json(&o);
        assert_eq!(j["lockstep"], true);
        // Cycle 0 measures the servos (queries only, no wait); every later one waits for
        // the agent.
        assert_eq!(j["agent"]["commands_applied"], 999, "every simulated cycle waits for the agent: {j}");
        assert_eq!(j["agent"]["cycles_without_command"], 1, "{j}");
        assert_eq!(j["agent"]["torn"], 0, "a well-behaved agent tears no command: {j}");
        assert!(a.wait().unwrap().success());
        logs.push(std::fs::read(&log).unwrap());
    }
    assert!(logs[0] == logs[1], "the lockstep logs differ ({} vs {} bytes)", logs[0].len(), logs[1].len());
}

#[test]
fn bad_commands_from_an_agent_never_reach_a_servo_and_are_counted() {
    let dir = Scratch::new("agent-hostile");
    let log = dir.path("hostile.tlog");
    let name = name("hostile");
    // Servo index 4 (id 5) gets three bursts of bad commands — NaN velocity, a position far
    // out of the limits, an unknown kind — with valid ones between; the others are held at 0.
    let agent = support::hold_agent(name.clone(), |i, s, cycle| match (i, cycle) {
        (4, 100..200) => s.velocity = f64::NAN,
        (4, 300..400) => s.position = 1e9,
        (4, 500..600) => s.kind = 99,
        _ => {}
    });
    let o = spine(&["--agent", &name, "--duration", "1", "--log", log.to_str().unwrap()]).wait_with_output().unwrap();
    agent.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "refused commands make a degraded run: {}", stderr(&o));
    let j = last_json(&o);
    let refused = j["agent"]["refused"].as_u64().unwrap();
    // Three bursts of 100 cycles (fewer on a loaded machine that skips periods).
    assert!((150..=310).contains(&refused), "{j}");
    let kinds = event_kinds(&j);
    let bursts = kinds.iter().filter(|k| *k == "agent_command_refused").count();
    assert_eq!(bursts, 3, "one event per burst, not per refusal: {bursts} events for {refused}");
    // One sentence: how many, for which servo, the causes (each with its count), the fix.
    let problem = j["problems"].as_array().unwrap().iter().find(|p| p.as_str().unwrap().contains("refused")).unwrap();
    let problem = problem.as_str().unwrap();
    let servo5 = format!("servo 5 on bus {}", j["final"]["5"]["bus"]);
    assert!(
        problem.starts_with(&format!("the spine refused {refused} of the agent's servo commands ({servo5}, in ")),
        "{problem}"
    );
    assert!(problem.contains("velocity is NaN ("), "{problem}");
    assert!(problem.contains("position 1000000000 is outside the allowed range -3.2767 to 3.2767 ("), "{problem}");
    assert!(problem.contains("command kind 99 is unknown ("), "{problem}");
    assert!(!problem.contains("invalid or out of the limits"), "{problem}");
    let causes = j["agent"]["refusal_causes"].as_array().unwrap();
    let kinds: Vec<&str> = causes.iter().map(|c| c["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["non_finite", "out_of_range", "unknown_kind"], "{j}");
    assert_eq!(causes.iter().map(|c| c["count"].as_u64().unwrap()).sum::<u64>(), refused, "{j}");
    assert_eq!(
        j["agent"]["refused_servos"],
        serde_json::json!([{"id": 5, "bus": j["final"]["5"]["bus"], "refused": refused}])
    );
    // Servo 5 only ever got the agent's valid commands (10) or its safe one (12); every other
    // servo followed the agent throughout.
    for (_, index, modes) in command_modes(&log).iter().filter(|c| c.2.contains(&10)) {
        assert!(modes[4] == 10 || modes[4] == 12, "cycle {index}: {modes:?}");
    }
    assert!(j["final"]["5"]["position"].as_f64().unwrap().abs() < 0.05, "{j}");
}

#[test]
fn agent_mistakes_get_one_sentence() {
    for (args, want) in [
        (vec!["--agent", "no/slash"], "agent name"),
        (vec!["--agent", "ok", "--agent-timeout-ms", "0"], "--agent-timeout-ms"),
        (vec!["--agent", "ok", "--agent-timeout-ms", "nan"], "--agent-timeout-ms"),
        (vec!["--agent", "ok", "--agent-on-timeout", "dance"], "--agent-on-timeout"),
    ] {
        let o = spine(&args).wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains(want), "{args:?}: {e}");
        assert_eq!(e.trim().lines().count(), 1, "{args:?}: {e}");
    }
    // A second spine with the same name is refused while the first runs.
    let name = name("twice");
    let mut first = spine(&["--agent", &name, "--duration", "2"]);
    support::wait_for("the first spine's segment", Duration::from_secs(10), || {
        rtloop::agent::segment_path(&name).exists()
    });
    let o = spine(&["--agent", &name, "--duration", "1"]).wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("another spine"), "{}", stderr(&o));
    // SIGKILL leaves the first spine no chance to remove its segment: do it here.
    let _ = first.kill();
    let _ = first.wait();
    let _ = std::fs::remove_file(rtloop::agent::segment_path(&name));
}

/// The run's output, or a panic (after killing it) when it has not ended within `limit`:
/// a lockstep run must always end.
fn finish(mut child: Child, limit: Duration) -> std::process::Output {
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("the run did not end within {limit:?} (killed): {}", stderr(&o));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn attach(name: &str) -> rtloop_agent::Agent {
    let start = std::time::Instant::now();
    loop {
        match rtloop_agent::Agent::attach(name) {
            Ok(a) => return a,
            Err(e) if e.is_retryable() && start.elapsed() < Duration::from_secs(30) => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// Write the command answering `cycle`: hold every servo at 0 rev.
fn answer(a: &mut rtloop_agent::Agent, cycle: u64) {
    let count = a.header().servo_count as usize;
    let c = a.command_mut();
    c.for_cycle = cycle;
    for s in c.servos[..count].iter_mut() {
        *s = rtloop_agent::RawServoCommand::QUERY;
        s.kind = rtloop_agent::layout::kind::POSITION;
        s.present = rtloop_agent::layout::field::POSITION | rtloop_agent::layout::field::VELOCITY;
        s.position = 0.0;
        s.velocity = 0.0;
    }
    a.send();
}

/// What a lockstep agent saw of a state: (cycle, status, timeouts, rearms, arm token changed).
type Seen = (u64, u32, u64, u64, bool);

/// A lockstep agent: answers every new state (re-arming when asked) until the spine ends;
/// `silent(cycle)` says whether to pause `pause` before answering that state (a learner
/// updating its policy), and `quit(cycle)` whether to exit (detach) at that state. Returns
/// the first 3 distinct states it read after its first pause: (cycle, status, timeouts,
/// rearms, arm token changed).
fn lockstep_agent(
    name: String,
    silent: fn(u64) -> bool,
    quit: fn(u64) -> bool,
    pause: Duration,
) -> std::thread::JoinHandle<Vec<Seen>> {
    std::thread::spawn(move || {
        let mut a = attach(&name);
        let mut last = u64::MAX;
        let mut seen = Vec::new();
        let mut token_before_silence = None;
        while a.spine_gone().is_none() {
            let Ok(s) = a.read_state().copied() else { continue };
            if s.cycle == last || s.status == rtloop_agent::layout::status::ENDED {
                std::thread::sleep(Duration::from_micros(50));
                continue;
            }
            last = s.cycle;
            if let Some(token) = token_before_silence {
                if seen.len() < 3 {
                    seen.push((s.cycle, s.status, s.timeouts, s.rearms, s.arm_token != token));
                }
            }
            if quit(s.cycle) {
                return seen;
            }
            if silent(s.cycle) {
                token_before_silence.get_or_insert(s.arm_token);
                std::thread::sleep(pause);
            }
            a.rearm_if_needed();
            answer(&mut a, s.cycle);
        }
        seen
    })
}

#[test]
fn a_lockstep_agent_that_pauses_past_the_timeout_is_waited_for_and_the_run_is_unchanged() {
    // Issue 32: simulated time waits for a registered agent however long it pauses (here
    // 300 ms at cycle 200, 15 times the agent timeout) while its process lives.
    let name = name("ls-pause");
    let log = support::unique_path("ls-pause.tlog");
    let agent = lockstep_agent(name.clone(), |c| c == 200, |_| false, Duration::from_millis(300));
    let args = ["--agent", &name, "--lockstep", "--duration", "0.5", "--agent-timeout-ms", "20"];
    let o = finish(spine(&[&args[..], &["--log", log.to_str().unwrap()]].concat()), Duration::from_secs(60));
    let seen = agent.join().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j = last_json(&o);
    assert_eq!(event_kinds(&j), ["agent_armed", "shutdown"], "{j}");
    // The state after the pause: cycle 201, still following, no timeout, the same token.
    assert_eq!(seen[0], (201, rtloop_agent::layout::status::FOLLOWING, 0, 1, false), "{seen:?}");
    let a = &j["agent"];
    assert_eq!((a["timeouts"].as_u64(), a["rearms"].as_u64(), a["torn"].as_u64()), (Some(0), Some(1), Some(0)), "{j}");
    // 500 cycles: cycle 0 measures (queries only); every other one has the agent's command.
    assert_eq!((a["commands_applied"].as_u64(), a["cycles_without_command"].as_u64()), (Some(499), Some(1)), "{j}");
    assert_eq!(j["cycles"], 500, "{j}");
    let cycles = command_modes(&log);
    let modes = |index: u64| cycles.iter().find(|c| c.1 == index).unwrap().2.clone();
    assert!(modes(0).iter().all(|&m| m == 255), "cycle 0 only queries: {:?}", modes(0));
    for c in [199, 200, 201] {
        assert!(modes(c).iter().all(|&m| m == 10), "cycle {c}: the agent's position command: {:?}", modes(c));
    }
}

#[test]
fn a_lockstep_run_ends_when_its_agent_exits() {
    let name = name("ls-exit");
    let agent = lockstep_agent(name.clone(), |_| false, |c| c == 100, Duration::ZERO);
    let args = ["--agent", &name, "--lockstep", "--duration", "0.5", "--agent-timeout-ms", "10000"];
    let o = finish(spine(&args), Duration::from_secs(60));
    agent.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let j = last_json(&o);
    assert_eq!(event_kinds(&j), ["agent_armed", "agent_gone", "shutdown"], "{j}");
    assert_eq!(j["cycles"], 101, "cycles 0 to 100, the one the agent left unanswered: {j}");
    assert_eq!(j["agent"]["timeouts"], 0, "{j}");
    assert!(j["problems"][0].as_str().unwrap().contains("the agent exited"), "{j}");
}

#[test]
fn a_lockstep_agent_may_wait_for_a_measured_state_before_its_first_command() {
    let name = name("ls-measure");
    let first = std::sync::Arc::new(std::sync::Mutex::new(None));
    let agent = {
        let (name, first) = (name.clone(), first.clone());
        std::thread::spawn(move || {
            let mut a = attach(&name);
            let mut last = u64::MAX;
            while a.spine_gone().is_none() {
                let Ok(s) = a.read_state().copied() else { continue };
                let count = s.servo_count as usize;
                // Commands only once every servo has answered a cycle's request.
                if s.cycle == last || s.servos[..count].iter().any(|v| v.request_cycle < 0) {
                    std::thread::sleep(Duration::from_micros(50));
                    continue;
                }
                last = s.cycle;
                first.lock().unwrap().get_or_insert((s.cycle, s.servos[0].request_cycle, s.servos[0].fresh, s.status));
                a.rearm_if_needed();
                answer(&mut a, s.cycle);
            }
        })
    };
    let o = finish(spine(&["--agent", &name, "--lockstep", "--duration", "0.5"]), Duration::from_secs(60));
    agent.join().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j = last_json(&o);
    assert_eq!(event_kinds(&j), ["agent_armed", "shutdown"], "{j}");
    // The first state waited on is cycle 1, answering cycle 0's query.
    assert_eq!(*first.lock().unwrap(), Some((1, 0, 1, rtloop_agent::layout::status::WAITING)));
    let a = &j["agent"];
    assert_eq!((a["commands_applied"].as_u64(), a["cycles_without_command"].as_u64()), (Some(499), Some(1)), "{j}");
}

#[test]
fn a_lockstep_spine_nobody_arms_ends_after_agent_wait_with_one_sentence() {
    let name = name("ls-none");
    let o = finish(
        spine(&["--agent", &name, "--lockstep", "--duration", "0.5", "--agent-wait", "0.3"]),
        Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let j = last_json(&o);
    assert_eq!(event_kinds(&j), ["agent_not_armed", "shutdown"], "{j}");
    let problem = j["problems"][0].as_str().unwrap();
    assert!(problem.starts_with("no agent armed the spine within 0.3 s"), "{problem}");
    assert!(problem.contains("--agent-wait"), "{problem}");
    // It measured the servos first (cycle 0), then waited at cycle 1.
    assert_eq!(j["cycles"], 2, "{j}");
    assert!(!rtloop::agent::segment_path(&name).exists());
}

/// A writer that skips the library: states `version` in the header (0: never writes it)
/// and echoes the token with a command for every new state, until the spine ends.
fn foreign_agent(name: String, version: Option<u32>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        use std::os::unix::fs::FileExt;
        let path = rtloop::agent::segment_path(&name);
        support::wait_for("the spine's segment", Duration::from_secs(30), || {
            std::fs::metadata(&path).is_ok_and(|m| m.len() as usize == rtloop_agent::layout::TOTAL_SIZE)
        });
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        if let Some(v) = version {
            f.write_all_at(&v.to_le_bytes(), 84).unwrap();
        }
        let (mut seq, mut last, mut written) = (0u64, u64::MAX, 0u64);
        let word = |at: usize| {
            let mut b = [0u8; 8];
            f.read_exact_at(&mut b, at as u64).map(|_| u64::from_le_bytes(b)).unwrap_or(0)
        };
        let state = rtloop_agent::layout::STATE_OFFSET;
        while word(state + 32) as u32 != rtloop_agent::layout::status::ENDED && path.exists() {
            let cycle = word(state + 8);
            if cycle == last {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            last = cycle;
            let mut block = rtloop_agent::CommandBlock::empty();
            seq += 2;
            written += 1;
            block.seq = seq;
            block.for_cycle = cycle;
            block.heartbeat = written;
            block.arm_token = word(state + 56);
            block.servo_count = 12;
            for s in block.servos[..12].iter_mut() {
                s.kind = rtloop_agent::layout::kind::POSITION;
                s.present = rtloop_agent::layout::field::POSITION;
                s.position = 0.1;
            }
            let _ = f.write_all_at(rtloop_agent::layout::bytes_of(&block), rtloop_agent::layout::COMMAND_OFFSET as u64);
        }
        written
    })
}

#[test]
fn commands_of_another_protocol_version_or_none_are_never_applied_and_the_run_names_both_versions() {
    for (version, tag, want) in [
        (
            Some(1),
            "v1",
            "an agent of protocol version 1, this spine 4, tried to attach; the spine ignored its commands",
        ),
        (
            None,
            "v0",
            "an agent wrote commands without stating its protocol version (agent_version 0), this spine speaks 4; \
             the spine ignored them",
        ),
    ] {
        let name = name(&format!("ls-{tag}"));
        let writer = foreign_agent(name.clone(), version);
        let o = finish(
            spine(&["--agent", &name, "--lockstep", "--duration", "0.5", "--agent-wait", "1"]),
            Duration::from_secs(60),
        );
        let written = writer.join().unwrap();
        assert_eq!(o.status.code(), Some(1), "{tag}: {}", stderr(&o));
        let j = last_json(&o);
        assert!(written > 0, "{tag}: the writer wrote nothing");
        assert_eq!(j["agent"]["commands_applied"], 0, "{tag}: {j}");
        assert_eq!(j["agent"]["rearms"], 0, "{tag}: {j}");
        assert!(j["agent"]["wrong_version"].as_u64().unwrap() > 0, "{tag}: {j}");
        assert_eq!(event_kinds(&j), ["agent_version_mismatch", "agent_not_armed", "shutdown"], "{tag}: {j}");
        assert_eq!(j["events"][0]["value"], version.unwrap_or(0), "{tag}: {j}");
        assert!(j["problems"].as_array().unwrap().iter().any(|p| p == want), "{tag}: {j}");
        // No servo ever left query-only.
        for id in 1..=12 {
            assert_eq!(j["final"][id.to_string()]["commanded"], "zero-velocity", "{tag}: the shutdown's only: {j}");
        }
    }
}

#[test]
fn a_mistake_is_the_only_line_printed_before_an_agent_run() {
    let dir = Scratch::new("agent-log-exists");
    let log = dir.path("exists.tlog");
    std::fs::write(&log, b"").unwrap();
    let name = name("logexists");
    let o = spine(&["--agent", &name, "--log", log.to_str().unwrap()]).wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(!e.contains("waiting for agent"), "{e}");
    for wait in ["0", "nan", "1e9"] {
        let o = spine(&["--agent", &name, "--lockstep", "--agent-wait", wait]).wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{wait}: {}", stderr(&o));
        assert!(stderr(&o).contains("--agent-wait"), "{wait}: {}", stderr(&o));
        assert_eq!(stderr(&o).trim().lines().count(), 1, "{wait}: {}", stderr(&o));
    }
}

/// What a lockstep agent saw in the first state after a reset it asked for.
#[derive(Debug, Clone, PartialEq)]
struct AfterReset {
    result: u32,
    resets: u64,
    modes: Vec<i32>,
    positions: Vec<f64>,
    imu: [f64; 4],
    body: rtloop_agent::layout::BodyBlock,
    qpos: Vec<f64>,
}

/// Write the command answering `cycle`: every servo to `targets[i]` rev, stiff enough to
/// carry the quadruped.
fn answer_pose(a: &mut rtloop_agent::Agent, cycle: u64, targets: &[f64]) {
    let count = a.header().servo_count as usize;
    let c = a.command_mut();
    c.for_cycle = cycle;
    for (i, s) in c.servos[..count].iter_mut().enumerate() {
        *s = rtloop_agent::RawServoCommand::QUERY;
        s.kind = rtloop_agent::layout::kind::POSITION;
        s.present = rtloop_agent::layout::field::POSITION
            | rtloop_agent::layout::field::VELOCITY
            | rtloop_agent::layout::field::MAXIMUM_TORQUE
            | rtloop_agent::layout::field::WATCHDOG_TIMEOUT;
        s.position = targets[i];
        s.velocity = 0.0;
        s.maximum_torque = 8.0;
        s.watchdog_timeout = 0.1;
    }
    a.send();
}

/// A lockstep agent that, from the first measured state, answers every state with
/// `pose(k, start, i)` for servo `i` (k: states answered since the episode began, `start`:
/// the servo's position then) and asks for a reset with each seed of `seeds` every `every`
/// states; returns what it saw right after each reset, and the last state it read before
/// the spine ended.
fn resetting_agent(
    name: String,
    seeds: Vec<u64>,
    every: u64,
    pose: fn(u64, f64, usize) -> f64,
) -> std::thread::JoinHandle<(Vec<AfterReset>, rtloop_agent::StateBlock)> {
    std::thread::spawn(move || {
        let mut a = attach(&name);
        let mut last = u64::MAX;
        let mut seen = Vec::new();
        let mut pending: Option<u64> = None;
        let mut seeds = seeds.into_iter();
        let mut k = 0u64;
        let mut start = Vec::new();
        let mut final_state = rtloop_agent::StateBlock::empty();
        while a.spine_gone().is_none() {
            let Ok(s) = a.read_state().copied() else { continue };
            if s.status == rtloop_agent::layout::status::ENDED {
                break;
            }
            if s.cycle == last || s.servos[0].request_cycle < 0 {
                std::hint::spin_loop();
                continue;
            }
            last = s.cycle;
            final_state = s;
            if let Some(request) = pending {
                if s.reset_ack == request {
                    let n = s.servo_count as usize;
                    seen.push(AfterReset {
                        result: s.reset_result,
                        resets: s.resets,
                        modes: s.servos[..n].iter().map(|v| v.mode).collect(),
                        positions: s.servos[..n].iter().map(|v| v.position).collect(),
                        imu: s.imu.quaternion,
                        body: s.body,
                        qpos: s.pose.qpos().to_vec(),
                    });
                    pending = None;
                    k = 0;
                }
            }
            a.rearm_if_needed();
            if pending.is_none() && k >= every && s.status == rtloop_agent::layout::status::FOLLOWING {
                if let Some(seed) = seeds.next() {
                    pending = Some(a.request_reset(seed, &rtloop_agent::DomainBlock::NOMINAL));
                }
            }
            let n = s.servo_count as usize;
            if k == 0 {
                start = s.servos[..n].iter().map(|v| v.position).collect();
            }
            let targets: Vec<f64> = (0..n).map(|i| pose(k, start[i], i)).collect();
            answer_pose(&mut a, s.cycle, &targets);
            k += 1;
        }
        (seen, final_state)
    })
}

/// From `start` to the stand pose (abduction 0, hip -0.1, knee 0.2 rev) over 800 states
/// (faster, and the stiff legs pitch the body over as it rises).
fn stand_ramp(k: u64, start: f64, i: usize) -> f64 {
    let x = (k as f64 / 800.0).min(1.0);
    let s = x * x * (3.0 - 2.0 * x);
    start + ([0.0, -0.1, 0.2][i % 3] - start) * s
}

#[test]
fn a_lockstep_agent_resets_the_physical_robot_to_the_same_pose_for_the_same_seed() {
    if !cfg!(feature = "physics") {
        rtloop_testkit::skip(
            "rtloop-cli built without the physics feature (tools/test builds it with --features \"$(tools/features)\")",
        );
        return;
    }
    let name = name("reset");
    // Reset after 350 states of standing up each time: seeds 7, 7 (the episode before it
    // started from another pose: nothing of it survives the reset), 8; then stand up and
    // hold.
    let agent = resetting_agent(name.clone(), vec![7, 7, 8], 350, stand_ramp);
    let args = ["--agent", &name, "--lockstep", "--physics", "--duration", "2.5"];
    let o = finish(spine(&args), Duration::from_secs(240));
    let (seen, last) = agent.join().unwrap();
    let j = last_json(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(j["agent"]["resets"], 3, "{j}");
    assert_eq!(j["agent"]["resets_refused"], 0, "{j}");
    assert_eq!(seen.len(), 3, "{seen:?}");
    for (i, r) in seen.iter().enumerate() {
        assert_eq!(r.result, rtloop_agent::layout::reset::DONE, "{r:?}");
        assert_eq!(r.resets, i as u64 + 1);
        // Every servo stopped: the agent's next commands start afresh.
        assert!(r.modes.iter().all(|&m| m == 0), "modes after a reset: {:?}", r.modes);
        assert_eq!(r.body.present, 1);
        // Lying on the ground (the start keyframe), level.
        assert!(r.body.height_m > 0.0 && r.body.height_m < 0.2, "{:?}", r.body);
        assert!(r.body.roll_deg.abs() < 10.0 && r.body.pitch_deg.abs() < 10.0, "{:?}", r.body);
        // The ground truth's attitude is the one the (noise-free) simulated IMU reports.
        for (b, m) in r.body.quaternion.iter().zip(r.imu) {
            assert!((b - m).abs() < 1e-9, "body {:?} vs imu {:?}", r.body.quaternion, r.imu);
        }
        // The whole pose: the built-in quadruped's free base (3 + 4) and 12 hinges, its
        // height the body's (flat ground), the base quaternion a unit one.
        assert_eq!(r.qpos.len(), 19, "{:?}", r.qpos);
        assert!((r.qpos[2] - r.body.height_m).abs() < 1e-6, "qpos {:?} vs {:?}", r.qpos, r.body);
        let norm: f64 = r.qpos[3..7].iter().map(|q| q * q).sum();
        assert!((norm - 1.0).abs() < 1e-9, "{:?}", r.qpos);
    }
    // The same seed, the same world, bit for bit; another seed, another pose.
    assert_eq!(seen[0], AfterReset { resets: 1, ..seen[1].clone() }, "seed 7 twice");
    assert_ne!(seen[0].positions, seen[2].positions, "seeds 7 and 8 gave the same pose");
    assert_ne!(seen[0].qpos, seen[2].qpos, "seeds 7 and 8 gave the same qpos");
    assert_eq!(last.pose.nq, 19);
    assert!((last.pose.qpos[2] - last.body.height_m).abs() < 1e-6, "{:?} vs {:?}", last.pose, last.body);
    assert!(last.pose.qpos[19..].iter().all(|q| q.is_nan()), "NaN past nq: {:?}", last.pose);
    // After the last reset the agent stood the robot up: the body says so, and agrees with
    // the summary's (computed from the world at the end of the run, a few cycles later).
    assert_eq!(last.body.present, 1);
    assert!(last.body.height_m > 0.28, "{:?}", last.body);
    assert!(last.body.roll_deg.abs() < 3.0 && last.body.pitch_deg.abs() < 3.0, "{:?}", last.body);
    let body = &j["body"];
    assert!((body["height_m"].as_f64().unwrap() - last.body.height_m).abs() < 0.005, "{body} vs {:?}", last.body);
    assert!((body["roll_deg"].as_f64().unwrap() - last.body.roll_deg).abs() < 0.5, "{body} vs {:?}", last.body);
    assert!((body["pitch_deg"].as_f64().unwrap() - last.body.pitch_deg).abs() < 0.5, "{body} vs {:?}", last.body);
}

#[test]
fn a_reset_without_physics_or_outside_lockstep_is_refused_with_its_reason_and_counted() {
    for (extra, reason, sentence) in [
        (&["--lockstep"][..], rtloop_agent::layout::reset::NO_PHYSICS, "run with --physics"),
        (&[][..], rtloop_agent::layout::reset::NOT_LOCKSTEP, "run with --lockstep"),
    ] {
        let name = name(&format!("refused{reason}"));
        let agent = resetting_agent(name.clone(), vec![5], 20, |_, _, _| 0.0);
        let mut args = vec!["--agent", &name, "--duration", "0.3"];
        args.extend_from_slice(extra);
        let o = finish(spine(&args), Duration::from_secs(60));
        let (seen, last) = agent.join().unwrap();
        let j = last_json(&o);
        assert_eq!(seen.len(), 1, "{seen:?} / {}", stderr(&o));
        assert_eq!(seen[0].result, reason);
        assert_eq!(seen[0].resets, 0);
        assert_eq!(seen[0].body.present, 0, "no body without physics");
        assert!(seen[0].body.height_m.is_nan());
        assert_eq!(last.pose.nq, 0, "no pose without physics");
        assert!(last.pose.qpos.iter().all(|q| q.is_nan()), "{:?}", last.pose);
        assert_eq!(last.resets, 0);
        assert_eq!(j["agent"]["resets"], 0, "{j}");
        assert_eq!(j["agent"]["resets_refused"], 1, "{j}");
        assert!(event_kinds(&j).contains(&"agent_reset_refused".to_string()), "{j}");
        assert_eq!(o.status.code(), Some(1), "a refused reset is a problem of the run");
        let problems = j["problems"].to_string();
        assert!(problems.contains(sentence), "{problems}");
    }
}

#[test]
fn refused_torques_are_reported_with_the_field_the_limit_the_servos_and_the_count() {
    // Every servo, every cycle: maximum_torque 10 N·m over the run's limit, [gains]
    // maximum_torque (8 N·m by default). The run said "(invalid or out of the limits)"
    // naming servo 1 only.
    let name = name("torque");
    let agent = support::hold_agent(name.clone(), |_, s, _| {
        s.present |= rtloop_agent::layout::field::MAXIMUM_TORQUE;
        s.maximum_torque = 10.0;
    });
    let o = spine(&["--agent", &name, "--duration", "0.3"]).wait_with_output().unwrap();
    agent.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let j = last_json(&o);
    let a = &j["agent"];
    let refused = a["refused"].as_u64().unwrap();
    let cycles = a["refused_cycles"].as_u64().unwrap();
    assert!(refused > 0 && refused == 12 * cycles, "every servo, every cycle: {j}");
    assert_eq!(
        a["refusal_causes"],
        serde_json::json!([{
            "kind": "out_of_range",
            "field": "maximum_torque",
            "value": 10.0,
            "min": 0.0,
            "max": 8.0,
            "servo": {"id": 1, "bus": j["final"]["1"]["bus"], "refused": refused / 12},
            "count": refused,
            "message": "maximum_torque 10 is outside the allowed range 0 to 8; send a value within it",
        }]),
        "{j}"
    );
    assert_eq!(a["refused_servos"].as_array().unwrap().len(), 12, "{j}");
    let problem = j["problems"][0].as_str().unwrap();
    let from = event_time(&j, "agent_command_refused");
    assert_eq!(
        problem,
        format!(
            "the spine refused {refused} of the agent's servo commands (all 12 servos, in {cycles} cycles from \
             {from:.3} s) and gave each its safe command instead: maximum_torque 10 is outside the allowed range 0 to \
             8 ({refused} times); send a value within it, within the limits of docs/agent-protocol.md section 7 (for \
             `rtloop run`, the torque limit is its [gains] maximum_torque)"
        )
    );
    assert_eq!(stderr(&o).lines().last().unwrap(), format!("rtloop run: {problem}"));
}

/// The spine's status as the segment of agent `name` shows it (0 while there is none).
fn status_of(name: &str) -> u32 {
    use std::os::unix::fs::FileExt;
    let Ok(f) = std::fs::File::open(rtloop::agent::segment_path(name)) else { return 0 };
    let mut b = [0u8; 4];
    match f.read_exact_at(&mut b, rtloop_agent::layout::STATE_OFFSET as u64 + 32) {
        Ok(()) => u32::from_le_bytes(b),
        Err(_) => 0,
    }
}

#[test]
fn a_segment_truncated_or_regrown_under_a_running_spine_ends_the_run_safe_with_one_sentence() {
    // `truncate -s 0 /dev/shm/rtloop-NAME` (or any `open(path, "w")`) under a running spine:
    // it died of SIGBUS (exit 135), with no shutdown command, no summary, and an empty file
    // that refused the next run.
    for (regrow, lost, what) in
        [(false, "truncated", "was truncated"), (true, "replaced", "was truncated and grown again, or overwritten,")]
    {
        let name = name(&format!("shrink-{lost}"));
        let path = rtloop::agent::segment_path(&name);
        let agent = support::hold_agent(name.clone(), |_, _, _| {});
        let run = spine(&["--agent", &name, "--duration", "30"]);
        support::wait_for("the agent to arm the spine", Duration::from_secs(30), || {
            status_of(&name) == rtloop_agent::layout::status::FOLLOWING
        });
        let f = std::fs::File::create(&path).unwrap();
        if regrow {
            f.set_len(rtloop_agent::layout::TOTAL_SIZE as u64).unwrap();
        }
        let o = finish(run, Duration::from_secs(60));
        agent.join().unwrap();
        assert_eq!(o.status.code(), Some(1), "{lost}: {}", stderr(&o));
        let j = last_json(&o);
        assert_eq!(j["ended_by_controller"], true, "{lost}: the loss ended the run: {j}");
        assert_eq!(event_kinds(&j), ["agent_armed", "agent_segment_lost", "shutdown"], "{lost}: {j}");
        assert_eq!(j["agent"]["segment_lost"], lost, "{j}");
        // The servos were commanded safe: the shutdown's zero velocity, every one.
        for id in 1..=12 {
            let f = &j["final"][id.to_string()];
            assert_eq!(f["commanded"], "zero-velocity", "{lost}: servo {id}: {f}");
            assert_eq!(f["mode"], 12, "{lost}: servo {id}: {f}");
        }
        let at = event_time(&j, "agent_segment_lost");
        let p = path.display();
        let sentence = format!(
            "the agent segment {p} {what} by another process at {at:.3} s: the spine commanded the servos safe and \
             ended the run; never write to {p} while its spine runs (an agent only maps it)"
        );
        assert_eq!(j["problems"][0], sentence.as_str(), "{lost}: {j}");
        assert_eq!(stderr(&o).lines().last().unwrap(), format!("rtloop run: {sentence}"), "{lost}");
        assert!(!path.exists(), "{lost}: no file left behind");
    }
}

#[test]
fn an_empty_leftover_segment_does_not_block_the_next_run() {
    // What a spine killed after its segment was truncated leaves: a 0-byte file, which
    // refused every later run ("too small to be an rtloop agent segment").
    use std::os::unix::fs::OpenOptionsExt;
    let name = name("leftover");
    let path = rtloop::agent::segment_path(&name);
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).unwrap();
    let o = spine(&["--agent", &name, "--duration", "0.1"]).wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "rtloop run: warning: removed {}, a leftover of 0 bytes that holds no segment header",
            path.display()
        )),
        "{}",
        stderr(&o)
    );
    assert!(!path.exists());
}

#[test]
fn a_segment_planted_by_another_user_is_refused_naming_its_owner() {
    if rtloop_agent::euid() != 0 {
        rtloop_testkit::skip("needs root, to give a segment to user nobody");
        return;
    }
    // Another user made /dev/shm/rtloop-NAME first, naming a live pid: the spine said
    // "another spine (pid N) owns …", not that the file is not even its user's.
    let name = name("planted");
    let path = rtloop::agent::segment_path(&name);
    let (planted, _) = rtloop_agent::Spine::create(&rtloop_agent::SpineConfig::new(
        &name,
        &[rtloop_agent::ServoInfo { id: 1, bus: 1 }],
        100.0,
    ))
    .unwrap();
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    let o = spine(&["--agent", &name, "--duration", "0.1"]).wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert_eq!(
        e.trim(),
        format!(
            "rtloop: {} belongs to {}, not to this spine's user; pick another --agent name, or have {} remove it",
            path.display(),
            rtloop_agent::describe_owner(65534),
            rtloop_agent::describe_owner(65534)
        )
    );
    drop(planted);
}
