//! `rtloop run --agent`: the spine follows a control law in another process — the C agent
//! of `examples/agent.c`, compiled here with the system C compiler, and hostile agents
//! written with the `agent` crate.

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::{rtloop_bin, stderr, stdout, Scratch};

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
            testkit::skip("needs a C compiler (cc) to build examples/agent.c");
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

fn summary_of(o: &std::process::Output) -> Value {
    serde_json::from_str(stdout(o).lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{e}: {} / {}", stdout(o), stderr(o)))
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
    let reader = tlog::reader::FileReader::open(log).unwrap();
    let filter = tlog::reader::ItemFilter { record: Some("cycle".into()), ..Default::default() };
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
    let j = summary_of(&o);
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
    let j = summary_of(&o);
    assert_eq!(event_kinds(&j), ["agent_armed", "agent_timeout", "agent_rearmed", "shutdown"], "{j}");
    assert_eq!((j["agent"]["timeouts"].as_u64(), j["agent"]["rearms"].as_u64()), (Some(1), Some(1)), "{j}");
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
        let j = summary_of(&o);
        assert_eq!(j["lockstep"], true);
        assert_eq!(j["agent"]["commands_applied"], 1000, "every simulated cycle waits for the agent: {j}");
        assert_eq!(j["agent"]["cycles_without_command"], 0, "{j}");
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
    let j = summary_of(&o);
    let refused = j["agent"]["refused"].as_u64().unwrap();
    // Three bursts of 100 cycles (fewer on a loaded machine that skips periods).
    assert!((150..=310).contains(&refused), "{j}");
    let kinds = event_kinds(&j);
    let bursts = kinds.iter().filter(|k| *k == "agent_command_refused").count();
    assert_eq!(bursts, 3, "one event per burst, not per refusal: {bursts} events for {refused}");
    assert!(j["problems"].to_string().contains("refused the agent's command for servo 5"), "{j}");
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
