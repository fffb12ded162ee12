//! The agent protocol, measured: the round trip from the spine publishing a state to the
//! agent's command for it being visible to the spine (examples/agent.c, busy-polling on the
//! other core, then sleeping between looks), and lockstep throughput (`rtloop run --agent
//! --lockstep --no-wire-time`, 12 simulated servos, the C agent) beside lockstep with the
//! built-in demo motion.
//!
//! `cargo bench -p rtloop-cli --bench agent` (needs a C compiler).

use rtloop_agent::{ServoInfo, Spine, SpineConfig};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it; sched_setaffinity(0, …)
    // only changes this thread's affinity.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn compile_agent(dir: &Path) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = dir.join("agent");
    let ok = Command::new("cc")
        .args(["-O2", "-std=c11", "-I"])
        .arg(root.join("crates/agent/include"))
        .arg(root.join("examples/agent.c"))
        .arg("-o")
        .arg(&out)
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(out)
}

fn start_agent(bin: &Path, name: &str, busy: bool, cpu: Option<usize>) -> Child {
    let mut cmd = Command::new(bin);
    cmd.arg(name).stdout(Stdio::null()).stderr(Stdio::null());
    if busy {
        cmd.env("RTLOOP_AGENT_BUSY", "1");
    }
    if let Some(cpu) = cpu {
        // SAFETY: only sched_setaffinity (async-signal-safe) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                pin_to(cpu);
                Ok(())
            });
        }
    }
    cmd.spawn().expect("start the C agent")
}

/// Round trips, ns: publish state k, spin until the agent's command for k is followed.
/// Runs on a thread of its own, pinned to CPU 0 (the agent to CPU 1) when there are two.
fn round_trips(agent_bin: &Path, busy: bool, count: usize, gap: Duration) -> hdrhistogram::Histogram<u64> {
    let bin = agent_bin.to_path_buf();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::spawn(move || round_trips_on_this_thread(&bin, busy, count, gap, cpus)).join().unwrap()
}

fn round_trips_on_this_thread(
    agent_bin: &Path,
    busy: bool,
    count: usize,
    gap: Duration,
    cpus: usize,
) -> hdrhistogram::Histogram<u64> {
    let name = format!("bench{}-{}", std::process::id(), if busy { "busy" } else { "sleep" });
    let servos: Vec<ServoInfo> = (1..=12).map(|id| ServoInfo { id, bus: (id - 1) / 3 + 1 }).collect();
    let (mut spine, _) = Spine::create(&SpineConfig::new(&name, &servos, 1000.0)).expect("create the segment");
    let (spine_cpu, agent_cpu) = if cpus >= 2 { (Some(0), Some(1)) } else { (None, None) };
    if let Some(c) = spine_cpu {
        pin_to(c);
    }
    let mut child = start_agent(agent_bin, &name, busy, agent_cpu);
    let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
    let give_up = Instant::now() + Duration::from_secs(10);
    let mut cycle = 0u64;
    // Arm first (not measured).
    while !spine.following() && Instant::now() < give_up {
        spine.state_mut().cycle = cycle;
        spine.publish(rtloop_agent::monotonic_ns());
        std::thread::sleep(Duration::from_millis(1));
        spine.poll_command(rtloop_agent::monotonic_ns());
    }
    assert!(spine.following(), "the C agent never armed the spine");
    for _ in 0..count {
        cycle += 1;
        spine.state_mut().cycle = cycle;
        let t0 = rtloop_agent::monotonic_ns();
        spine.publish(t0);
        loop {
            let now = rtloop_agent::monotonic_ns();
            spine.poll_command(now);
            if spine.command().is_some_and(|c| c.for_cycle == cycle) {
                hist.record(now - t0).unwrap();
                break;
            }
            assert!(now - t0 < 1_000_000_000, "no answer for cycle {cycle} within 1 s");
        }
        if !gap.is_zero() {
            std::thread::sleep(gap);
        }
    }
    drop(spine);
    let _ = child.wait();
    hist
}

fn lockstep_steps_per_s(args: &[&str], agent_bin: Option<&Path>, agent_cpu: Option<usize>) -> f64 {
    let name = format!("benchls{}", std::process::id());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rtloop"));
    cmd.args(["run", "--lockstep", "--no-wire-time", "--duration", "20", "--quiet", "--json"]).args(args);
    if agent_bin.is_some() {
        cmd.args(["--agent", &name]);
    }
    let run = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let agent = agent_bin.map(|b| start_agent(b, &name, true, agent_cpu));
    let out = run.wait_with_output().unwrap();
    if let Some(mut a) = agent {
        let _ = a.wait();
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let j: serde_json::Value = serde_json::from_str(text.lines().last().unwrap_or("")).expect("the run's JSON");
    j["cycles"].as_f64().unwrap() / j["loop_wall_s"].as_f64().unwrap()
}

fn main() {
    // As cyclictest and `rtloop run` with a real-time policy do: keep the CPUs out of deep
    // idle states, so a sleeping agent's wakeups measure the protocol, not the idle states.
    let held = rtloop_rt::setup::CpuDmaLatency::hold_zero();
    let two = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    println!("/dev/cpu_dma_latency held at 0: {}", if held.is_ok() { "yes" } else { "no (not root?)" });
    let dir = tempfile::tempdir().unwrap();
    let Some(agent_bin) = compile_agent(dir.path()) else {
        println!("SKIPPED: needs a C compiler (cc) to build examples/agent.c");
        return;
    };
    let us = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!("agent round trip (state published -> the agent's command for it seen by the spine), 12 servos");
    println!("{:<44} {:>8} {:>8} {:>8} {:>8}", "agent", "p50 µs", "p99 µs", "max µs", "samples");
    let busy = round_trips(&agent_bin, true, 50_000, Duration::ZERO);
    println!(
        "{:<44} {:>8.2} {:>8.2} {:>8.1} {:>8}",
        "C agent busy-polling on the other core",
        us(&busy, 0.5),
        us(&busy, 0.99),
        busy.max() as f64 / 1000.0,
        busy.len()
    );
    let sleeping = round_trips(&agent_bin, false, 2_000, Duration::from_millis(1));
    println!(
        "{:<44} {:>8.2} {:>8.2} {:>8.1} {:>8}",
        "C agent sleeping 20 µs between looks, 1 kHz",
        us(&sleeping, 0.5),
        us(&sleeping, 0.99),
        sleeping.max() as f64 / 1000.0,
        sleeping.len()
    );
    println!();
    println!("lockstep throughput, 12 simulated servos without wire time, 20 000 steps");
    println!("{:<44} {:>10}", "control law", "steps/s");
    println!("{:<44} {:>10.0}", "demo motion (in the spine)", lockstep_steps_per_s(&[], None, None));
    println!("{:<44} {:>10.0}", "C agent, spine and agent unpinned", lockstep_steps_per_s(&[], Some(&agent_bin), None));
    if two {
        println!(
            "{:<44} {:>10.0}",
            "C agent, spine --cpu 0, agent on CPU 1",
            lockstep_steps_per_s(&["--cpu", "0"], Some(&agent_bin), Some(1))
        );
    }
}
