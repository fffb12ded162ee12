//! `rtloop lab compare`: our measurements beside the established tools', on the same machine,
//! in the same run, with the same settings.
//!
//! * our `wakeup` (SCHED_FIFO 90, mlock, 1000 µs period) beside
//!   `cyclictest -m -p 90 -i 1000 -l N -q -h 20000` (package rt-tests), both built from one
//!   [`wakeup_setup`]. The two sides measure in [`WAKEUP_ROUNDS`] alternating rounds
//!   ([`wakeup_schedule`]) rather than one after the other, so they see the same load, and
//!   our samples are truncated to whole µs as cyclictest's are ([`wakeup_figures`]), so the
//!   ratio compares like with like;
//! * our `udp-echo` on loopback (SCHED_FIFO 90, mlock, blocking receive) beside
//!   `sockperf sr` + `sockperf pp --full-rtt` (package sockperf), run under `chrt -f 90`.
//!
//! It prints p50 / p99 / average of both sides and the ratios ours ÷ theirs; with `json`, the
//! last line is one JSON object with both sides and the ratios. The output parsers are public
//! so they can be tested on captured outputs.
//!
//! What it must never do: fail because a tool is missing (it says how to install it and still
//! reports our side), leave cyclictest or sockperf running after it ends, however it ends (they
//! are started through [`crate::child`]: the kernel kills them when the lab dies, a guard on
//! every other path), talk to anything but loopback, or measure before every option was
//! checked.

use crate::child::Tied;
use crate::options::CommonOptions;
use crate::report::Summary;
use crate::udp::{RecvMethod, UdpEchoOptions};
use crate::Error;
use rtloop_rt::setup::{Policy, RtSettings};
use serde::Serialize;
use std::fmt::Write as _;
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What `compare` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompareOptions {
    /// Wakeups measured by both sides, and UDP round trips per size on our side.
    pub samples: usize,
    /// UDP message sizes in bytes.
    pub sizes: Vec<usize>,
    /// End the output with one JSON line.
    pub json: bool,
}

/// Real-time priority both sides run at (cyclictest's customary -p 90).
const PRIORITY: i32 = 90;
/// Wakeup period of both sides, µs.
const PERIOD_US: u64 = 1000;
/// Histogram range given to cyclictest, µs; slower wakeups count as overflows.
const CYCLICTEST_HISTOGRAM_US: u64 = 20_000;
/// Duration of each `sockperf pp` run, s.
const SOCKPERF_SECONDS: u32 = 3;
/// sockperf refuses messages shorter than its own header.
const SOCKPERF_MIN_SIZE: usize = 14;
/// Median ratios beyond this (either way) get an explanation line.
const RATIO_TOLERANCE: f64 = 1.2;

/// The figures one side reports, µs. A tool that only prints some of them leaves the rest
/// `None`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Figures {
    /// Samples (wakeups, round trips) behind the figures.
    pub samples: u64,
    /// Smallest.
    pub min_us: Option<f64>,
    /// Average.
    pub avg_us: Option<f64>,
    /// Median.
    pub p50_us: Option<f64>,
    /// 99th percentile.
    pub p99_us: Option<f64>,
    /// Largest.
    pub max_us: Option<f64>,
}

impl Figures {
    fn of_summary(s: &Summary) -> Figures {
        Figures {
            samples: s.samples as u64,
            min_us: Some(s.min_us),
            avg_us: Some(s.mean_us),
            p50_us: Some(s.p50_us),
            p99_us: Some(s.p99_us),
            max_us: Some(s.max_us),
        }
    }
}

/// Rounds the wakeup comparison is cut into. Each round measures one chunk of samples on
/// each side, the side going first alternating (ours, theirs, theirs, ours, …), so on a
/// machine whose load changes during the run both sides measure under the same load, and a
/// load that rises or falls steadily weighs on both alike.
pub const WAKEUP_ROUNDS: usize = 10;

/// Which side of the wakeup comparison a chunk of samples belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Our loop.
    Ours,
    /// cyclictest.
    Theirs,
}

/// The wakeup comparison's chunks of samples, in the order they run: `min(samples,
/// WAKEUP_ROUNDS)` rounds of one chunk per side, chunks within one sample of each other, the
/// side going first alternating; each side measures `samples` in all.
pub fn wakeup_schedule(samples: usize) -> Vec<(Side, usize)> {
    let rounds = samples.min(WAKEUP_ROUNDS);
    let mut plan = Vec::with_capacity(2 * rounds);
    for round in 0..rounds {
        let chunk = samples / rounds + usize::from(round < samples % rounds);
        let (first, second) = if round % 2 == 0 { (Side::Ours, Side::Theirs) } else { (Side::Theirs, Side::Ours) };
        plan.push((first, chunk));
        plan.push((second, chunk));
    }
    plan
}

/// What each side of the wakeup comparison runs with, built from one set of constants so
/// they cannot drift apart: SCHED_FIFO [`PRIORITY`], mlockall, a [`PERIOD_US`] period on
/// CLOCK_MONOTONIC absolute deadlines, no CPU pinning, no busy-wait, one thread, every
/// wakeup counted from the first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeupSetup {
    /// Our side's options (policy, priority, mlock, affinity, busy-wait, samples).
    pub ours: CommonOptions,
    /// Our loop's period, µs.
    pub period_us: u64,
    /// cyclictest's arguments.
    pub cyclictest_args: Vec<String>,
}

/// The wakeup comparison's settings for a chunk of `samples` wakeups per side.
pub fn wakeup_setup(samples: usize) -> WakeupSetup {
    let ours = CommonOptions {
        rt: RtSettings { policy: Policy::Fifo, priority: PRIORITY, mlock: true, ..RtSettings::default() },
        samples,
        ..CommonOptions::default()
    };
    let cyclictest_args = [
        "-m",
        "-p",
        &PRIORITY.to_string(),
        "-i",
        &PERIOD_US.to_string(),
        "-l",
        &samples.to_string(),
        "-q",
        "-h",
        &CYCLICTEST_HISTOGRAM_US.to_string(),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    WakeupSetup { ours, period_us: PERIOD_US, cyclictest_args }
}

/// Our wakeup figures as they are compared with cyclictest's: each sample truncated to whole
/// µs first, as cyclictest stores `(now − next) / 1000` in integer µs before its histogram,
/// min, max and average see it. Compared with exact ones, cyclictest's figures are on average
/// half a µs low, which at a median of a few µs alone moves the ratio by 1.1–1.3.
pub fn wakeup_figures(samples_ns: &[u64]) -> Figures {
    let truncated: Vec<u64> = samples_ns.iter().map(|&ns| ns / 1000 * 1000).collect();
    Figures::of_summary(&Summary::of(&truncated))
}

/// Ours ÷ theirs, where both sides have the figure.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Ratios {
    /// Median ratio.
    pub p50: Option<f64>,
    /// 99th percentile ratio.
    pub p99: Option<f64>,
    /// Average ratio.
    pub avg: Option<f64>,
}

impl Ratios {
    fn between(ours: &Figures, theirs: &Figures) -> Ratios {
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        Ratios {
            p50: ratio(ours.p50_us, theirs.p50_us),
            p99: ratio(ours.p99_us, theirs.p99_us),
            avg: ratio(ours.avg_us, theirs.avg_us),
        }
    }
}

/// One measurement, both sides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// What was measured, e.g. "wakeup 1000 us" or "udp-echo 64 B blocking".
    pub what: String,
    /// The reference tool.
    pub tool: String,
    /// Our figures.
    pub ours: Figures,
    /// The tool's figures; `None` when it is missing or failed (see `note`).
    pub theirs: Option<Figures>,
    /// Ours ÷ theirs.
    pub ratios: Ratios,
    /// Why `theirs` is missing, or why the medians differ by more than the tolerance.
    pub note: Option<String>,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    comparisons: &'a [Comparison],
    warnings: &'a [String],
}

/// Run both comparisons and return the printed report.
pub fn compare(opts: &CompareOptions) -> Result<String, Error> {
    // Every option first: the wakeup half alone measures for `samples` ms.
    crate::check::samples("--samples", opts.samples)?;
    crate::check::udp_sizes("--sizes", &opts.sizes)?;
    crate::check::samples_in_all(opts.samples, 1 + opts.sizes.len(), "one wakeup run and one per --sizes")?;
    let common = wakeup_setup(opts.samples).ours;
    let mut warnings: Vec<String> = Vec::new();
    let mut comparisons = Vec::new();

    // Wakeup latency.
    // cyclictest holds /dev/cpu_dma_latency at 0 while it measures (CPUs stay out of deep
    // idle states); hold the same request while ours runs, or the comparison is unfair.
    let dma_guard = DmaLatency::hold_zero();
    if dma_guard.is_none() {
        warnings.push("could not hold /dev/cpu_dma_latency at 0 for our side (cyclictest does): run as root".into());
    }
    let mut our_wakeups: Vec<u64> = Vec::with_capacity(opts.samples);
    // Ok(None) until cyclictest's first chunk; an error ends cyclictest's side for the run.
    let mut theirs: Result<Option<CyclictestRun>, Error> =
        if tool_exists("cyclictest") { Ok(None) } else { Err(CYCLICTEST_MISSING) };
    for (side, chunk) in wakeup_schedule(opts.samples) {
        let setup = wakeup_setup(chunk);
        match side {
            Side::Ours => {
                let ours = crate::wakeup::wakeup(&setup.ours, setup.period_us)?;
                merge_warnings(&mut warnings, &ours.warnings);
                our_wakeups.extend(ours.runs.iter().flat_map(|r| r.samples_ns.iter().copied()));
            }
            Side::Theirs => {
                if let Ok(so_far) = &mut theirs {
                    match run_cyclictest(&setup.cyclictest_args) {
                        Ok(run) => match so_far {
                            Some(all) => all.merge(&run),
                            None => *so_far = Some(run),
                        },
                        Err(e) => theirs = Err(e),
                    }
                }
            }
        }
    }
    let theirs = theirs.and_then(|run| run.ok_or(Error::CyclictestDidNotRun)).map(|run| (run.figures(), None));
    comparisons.push(Comparison::new(
        format!("wakeup {PERIOD_US} us"),
        "cyclictest",
        wakeup_figures(&our_wakeups),
        theirs,
    ));
    drop(dma_guard);

    // UDP round trip.
    let udp = UdpEchoOptions { sizes: opts.sizes.clone(), methods: vec![RecvMethod::Blocking], netns: false, port: 0 };
    let ours = crate::udp::udp_echo(&common, &udp)?;
    merge_warnings(&mut warnings, &ours.warnings);
    for run in &ours.runs {
        let size = run.size.unwrap_or(0);
        let theirs = run_sockperf(size);
        comparisons.push(Comparison::new(
            format!("udp-echo {size} B blocking"),
            "sockperf",
            Figures::of_summary(&Summary::of(&run.samples_ns)),
            theirs,
        ));
    }
    Ok(render(&comparisons, &warnings, opts.json))
}

impl Comparison {
    fn new(what: String, tool: &str, ours: Figures, theirs: Result<(Figures, Option<String>), Error>) -> Comparison {
        match theirs {
            Ok((theirs, caveat)) => {
                let ratios = Ratios::between(&ours, &theirs);
                let divergence =
                    ratios.p50.filter(|r| !(1.0 / RATIO_TOLERANCE..=RATIO_TOLERANCE).contains(r)).map(|r| {
                        format!(
                            "median ratio {r:.2} is outside 1/{RATIO_TOLERANCE}..{RATIO_TOLERANCE}: {}",
                            divergence_reason(tool)
                        )
                    });
                let note = match (caveat, divergence) {
                    (Some(a), Some(b)) => Some(format!("{a}; {b}")),
                    (a, b) => a.or(b),
                };
                Comparison { what, tool: tool.to_string(), ours, theirs: Some(theirs), ratios, note }
            }
            Err(why) => Comparison {
                what,
                tool: tool.to_string(),
                ours,
                theirs: None,
                ratios: Ratios::default(),
                note: Some(rtloop_output::sentence(&why)),
            },
        }
    }
}

/// The known reasons the two sides can disagree, so a reader knows what to check.
fn divergence_reason(tool: &str) -> &'static str {
    match tool {
        "cyclictest" => {
            "both sides ran with the same settings in alternating rounds and are counted in whole µs, \
             so what is left is mostly noise: a median of a few µs moves by a whole step, and on a VM \
             the host's scheduling of the vCPU moves both runs; rerun, or raise --samples"
        }
        _ => {
            "sockperf measures for a fixed time after its own warm-up and its server waits differently \
             (select/epoll) than ours (blocking recv); on a VM a few host preemptions move small \
             medians, so rerun to see whether it is noise"
        }
    }
}

fn merge_warnings(into: &mut Vec<String>, new: &[String]) {
    for w in new {
        if !into.contains(w) {
            into.push(w.clone());
        }
    }
}

fn render(comparisons: &[Comparison], warnings: &[String], json: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "rtloop lab compare: ours vs the reference tool, same machine, SCHED_FIFO {PRIORITY}, mlock \
         (µs; ratio = ours / theirs); wakeup: {WAKEUP_ROUNDS} alternating rounds, ours in whole µs \
         as cyclictest counts"
    );
    let _ = writeln!(
        out,
        "{:<26} {:<10} {:>9} {:>9} {:>6}  {:>9} {:>9} {:>6}  {:>9} {:>9} {:>6}",
        "what",
        "tool",
        "ours p50",
        "their p50",
        "ratio",
        "ours p99",
        "their p99",
        "ratio",
        "ours avg",
        "their avg",
        "ratio"
    );
    let num = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let ratio = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    for c in comparisons {
        let theirs = c.theirs.unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<26} {:<10} {:>9} {:>9} {:>6}  {:>9} {:>9} {:>6}  {:>9} {:>9} {:>6}",
            c.what,
            c.tool,
            num(c.ours.p50_us),
            num(theirs.p50_us),
            ratio(c.ratios.p50),
            num(c.ours.p99_us),
            num(theirs.p99_us),
            ratio(c.ratios.p99),
            num(c.ours.avg_us),
            num(theirs.avg_us),
            ratio(c.ratios.avg),
        );
    }
    let notes: Vec<String> =
        comparisons.iter().filter_map(|c| c.note.as_ref().map(|n| format!("{} ({}): {n}", c.what, c.tool))).collect();
    if !notes.is_empty() {
        let _ = writeln!(out, "notes:");
        for n in notes {
            let _ = writeln!(out, "  {n}");
        }
    }
    if !warnings.is_empty() {
        let _ = writeln!(out, "warnings:");
        for w in warnings {
            let _ = writeln!(out, "  {w}");
        }
    }
    if json {
        let line = serde_json::to_string(&JsonReport { comparisons, warnings })
            .unwrap_or_else(|e| format!("{{\"error\":\"cannot encode the report: {e}\"}}"));
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// True when `program` can be started (it is on PATH).
fn tool_exists(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
        .unwrap_or(false)
}

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

const CYCLICTEST_MISSING: Error =
    Error::ToolMissing { tool: "cyclictest", hint: "cyclictest is not installed: apt-get install rt-tests" };

/// One run of cyclictest with `args` (from [`wakeup_setup`]).
fn run_cyclictest(args: &[String]) -> Result<CyclictestRun, Error> {
    let mut command = Command::new("cyclictest");
    command.args(args).stdin(Stdio::null());
    let out = crate::child::output(&mut command).map_err(|e| Error::os("cannot run cyclictest", e))?;
    if !out.status.success() {
        return Err(Error::ToolFailed {
            tool: "cyclictest",
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    CyclictestRun::parse(&String::from_utf8_lossy(&out.stdout))
}

/// Figures from cyclictest's output: the `-h` histogram (rows `%06d %06d`: µs, count; more
/// count columns with more threads, which are summed) gives p50/p99 and, when no sample
/// overflowed it, the exact average (cyclictest prints its average truncated to a whole µs);
/// the `# Min/Avg/Max Latencies` lines (or, without `-h`, the `T:` status line) give min/max
/// and the average otherwise. Samples beyond the histogram (`# Histogram Overflows`) are
/// counted at the maximum.
pub fn parse_cyclictest(output: &str) -> Result<Figures, Error> {
    CyclictestRun::parse(output).map(|run| run.figures())
}

/// The figures of several cyclictest runs' outputs taken together, as the rounds of the
/// wakeup comparison are ([`parse_cyclictest`] for each, then one histogram).
pub fn parse_cyclictest_rounds(outputs: &[&str]) -> Result<Figures, Error> {
    let mut all: Option<CyclictestRun> = None;
    for output in outputs {
        let run = CyclictestRun::parse(output)?;
        match &mut all {
            Some(all) => all.merge(&run),
            None => all = Some(run),
        }
    }
    all.map(|run| run.figures()).ok_or(Error::NoCyclictestOutput)
}

/// What one or more cyclictest runs reported, merged ([`CyclictestRun::merge`]) across the
/// rounds of the comparison.
#[derive(Debug, Clone, Default, PartialEq)]
struct CyclictestRun {
    /// Histogram: latency µs → count.
    buckets: std::collections::BTreeMap<u64, u64>,
    /// Samples beyond the histogram.
    overflows: u64,
    /// Samples in all.
    samples: u64,
    min_us: Option<f64>,
    avg_us: Option<f64>,
    max_us: Option<f64>,
}

impl CyclictestRun {
    fn parse(output: &str) -> Result<CyclictestRun, Error> {
        let mut run = CyclictestRun::default();
        let mut status_samples = 0u64;
        let first_number = |rest: &str| rest.split_whitespace().next().and_then(|v| v.parse::<f64>().ok());
        for line in output.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("# Min Latencies:") {
                run.min_us = first_number(rest);
            } else if let Some(rest) = line.strip_prefix("# Avg Latencies:") {
                run.avg_us = first_number(rest);
            } else if let Some(rest) = line.strip_prefix("# Max Latencies:") {
                run.max_us = first_number(rest);
            } else if let Some(rest) = line.strip_prefix("# Histogram Overflows:") {
                run.overflows = rest.split_whitespace().filter_map(|v| v.parse::<u64>().ok()).sum();
            } else if line.starts_with("T:") {
                // "T: 0 ( 3004) P:90 I:1000 C:    100 Min:     24 Act:   33 Avg:   39 Max:      62"
                let field = |name: &str| {
                    line.split(name)
                        .nth(1)
                        .and_then(|rest| rest.split_whitespace().next())
                        .and_then(|v| v.parse::<f64>().ok())
                };
                run.min_us = run.min_us.or(field("Min:"));
                run.avg_us = run.avg_us.or(field("Avg:"));
                run.max_us = run.max_us.or(field("Max:"));
                if status_samples == 0 {
                    status_samples = field("C:").map_or(0, |c| c as u64);
                }
            } else if !line.starts_with('#') {
                let mut columns = line.split_whitespace();
                let latency = columns.next().filter(|c| c.len() == 6).and_then(|c| c.parse::<u64>().ok());
                if let Some(latency_us) = latency {
                    let counts: Option<Vec<u64>> = columns.map(|c| c.parse::<u64>().ok()).collect();
                    if let Some(counts) = counts.filter(|c| !c.is_empty()) {
                        *run.buckets.entry(latency_us).or_default() += counts.iter().sum::<u64>();
                    }
                }
            }
        }
        let in_histogram: u64 = run.buckets.values().sum();
        run.samples = if in_histogram + run.overflows > 0 { in_histogram + run.overflows } else { status_samples };
        if in_histogram > 0 && run.overflows == 0 {
            // Every sample is in the histogram: its mean is exact, the printed one truncated.
            let sum: u128 = run.buckets.iter().map(|(&us, &n)| us as u128 * n as u128).sum();
            run.avg_us = Some(sum as f64 / in_histogram as f64);
        }
        if in_histogram + run.overflows == 0 && run.avg_us.is_none() {
            return Err(Error::NoFigures { tool: "cyclictest", wanted: "histogram and no Min/Avg/Max" });
        }
        Ok(run)
    }

    /// Add another run's samples: histograms and overflows add up, the average is weighted by
    /// the samples of each run, min and max are the extremes of both.
    fn merge(&mut self, other: &CyclictestRun) {
        for (&us, &n) in &other.buckets {
            *self.buckets.entry(us).or_default() += n;
        }
        self.overflows += other.overflows;
        let total = self.samples + other.samples;
        self.avg_us = match (self.avg_us, other.avg_us) {
            (Some(a), Some(b)) if total > 0 => {
                Some((a * self.samples as f64 + b * other.samples as f64) / total as f64)
            }
            _ => None,
        };
        self.samples = total;
        let extreme = |a: Option<f64>, b: Option<f64>, pick: fn(f64, f64) -> f64| match (a, b) {
            (Some(a), Some(b)) => Some(pick(a, b)),
            (a, b) => a.or(b),
        };
        self.min_us = extreme(self.min_us, other.min_us, f64::min);
        self.max_us = extreme(self.max_us, other.max_us, f64::max);
    }

    fn figures(&self) -> Figures {
        let mut figures = Figures {
            samples: self.samples,
            min_us: self.min_us,
            avg_us: self.avg_us,
            max_us: self.max_us,
            ..Figures::default()
        };
        let in_histogram: u64 = self.buckets.values().sum();
        if in_histogram + self.overflows > 0 {
            let percentile = |q: f64| -> Option<f64> {
                let rank = ((q * self.samples as f64).ceil() as u64).max(1);
                let mut seen = 0;
                for (&latency_us, &n) in &self.buckets {
                    seen += n;
                    if seen >= rank {
                        return Some(latency_us as f64);
                    }
                }
                // The rank lies among the overflows: the best figure known for them is the
                // maximum.
                self.max_us
            };
            figures.p50_us = percentile(0.5);
            figures.p99_us = percentile(0.99);
        }
        figures
    }
}

/// `program args…`, under `chrt -f 90` when we can (root and chrt present), so the tool runs
/// with the same policy and priority as our side.
fn realtime_command(program: &str, args: &[&str]) -> (Command, bool) {
    let realtime = running_as_root() && tool_exists("chrt");
    let mut command = if realtime {
        let mut c = Command::new("chrt");
        c.args(["-f", &PRIORITY.to_string(), program]);
        c
    } else {
        Command::new(program)
    };
    command.args(args);
    (command, realtime)
}

fn run_sockperf(size: usize) -> Result<(Figures, Option<String>), Error> {
    if !tool_exists("sockperf") {
        return Err(Error::ToolMissing {
            tool: "sockperf",
            hint: "sockperf is not installed: apt-get install sockperf",
        });
    }
    if size < SOCKPERF_MIN_SIZE {
        return Err(Error::SockperfTooSmall { min: SOCKPERF_MIN_SIZE });
    }
    let port = free_udp_port()?;
    let port_arg = port.to_string();
    let (mut server, _) = realtime_command("sockperf", &["sr", "--ip", "127.0.0.1", "--port", &port_arg]);
    server.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    // Killed when the guard drops (every return below), or by the kernel if the lab dies.
    let mut server = Tied::spawn(&mut server).map_err(|e| Error::os("cannot start sockperf sr", e))?;
    wait_for_udp_listener(&mut server, port)?;
    let size_arg = size.to_string();
    let seconds = SOCKPERF_SECONDS.to_string();
    let (mut client, realtime) = realtime_command(
        "sockperf",
        &["pp", "-i", "127.0.0.1", "-p", &port_arg, "-m", &size_arg, "-t", &seconds, "--full-rtt"],
    );
    let out = crate::child::output(client.stdin(Stdio::null())).map_err(|e| Error::os("cannot run sockperf pp", e))?;
    drop(server);
    if !out.status.success() {
        return Err(Error::ToolFailed {
            tool: "sockperf pp",
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    // sockperf prints its report on stdout and some versions on stderr; read both.
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let figures = parse_sockperf(&text)?;
    let caveat = (!realtime)
        .then(|| format!("sockperf ran without chrt -f {PRIORITY} (not root or no chrt), so its settings differ"));
    Ok((figures, caveat))
}

/// A UDP port on 127.0.0.1 nobody is bound to right now.
fn free_udp_port() -> Result<u16, Error> {
    let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| Error::os("cannot find a free UDP port", e))?;
    Ok(socket.local_addr()?.port())
}

/// Wait until something is bound to `port` (binding it ourselves fails), or the server died.
fn wait_for_udp_listener(server: &mut Tied, port: u16) -> Result<(), Error> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        if let Ok(Some(status)) = server.try_wait() {
            return Err(Error::SockperfExited { status });
        }
        if UdpSocket::bind(("127.0.0.1", port)).is_err() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(Error::SockperfNotBound { port })
}

/// Figures from `sockperf pp --full-rtt` output (µs): `avg-rtt=` (or `avg-latency=` without
/// --full-rtt), `<MIN>`/`<MAX> observation = …`, `percentile 50.000 = …`, `percentile 99.000
/// = …` and `Total N observations`. Terminal colour codes are ignored.
pub fn parse_sockperf(output: &str) -> Result<Figures, Error> {
    let text = strip_ansi(output);
    let mut figures = Figures::default();
    let value_after = |line: &str, marker: &str| -> Option<f64> {
        let rest = line.split(marker).nth(1)?;
        let token: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
        token.parse().ok()
    };
    for line in text.lines() {
        if line.contains("avg-rtt=") {
            figures.avg_us = value_after(line, "avg-rtt=");
        } else if line.contains("avg-latency=") {
            figures.avg_us = value_after(line, "avg-latency=");
        } else if line.contains("<MAX> observation") {
            figures.max_us = value_after(line, "=");
        } else if line.contains("<MIN> observation") {
            figures.min_us = value_after(line, "=");
        } else if line.contains("percentile 50.000") {
            figures.p50_us = value_after(line, "=");
        } else if line.contains("percentile 99.000") {
            figures.p99_us = value_after(line, "=");
        } else if let Some(rest) = line.split("Total ").nth(1).filter(|_| line.contains("observations")) {
            figures.samples = rest.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0);
        }
    }
    if figures.p50_us.is_none() && figures.avg_us.is_none() {
        return Err(Error::NoFigures { tool: "sockperf", wanted: "percentiles and no average" });
    }
    Ok(figures)
}

/// The text without ANSI escape sequences (ESC [ … final letter), which sockperf uses for
/// colour even when not writing to a terminal.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// A held `/dev/cpu_dma_latency` request at 0 µs, as cyclictest holds while it measures. A thin
/// wrapper: the one implementation is [`rtloop_rt::setup::CpuDmaLatency`], shared with `rtloop run`.
struct DmaLatency {
    /// Held for as long as the wrapper lives; dropping it ends the request.
    _request: rtloop_rt::setup::CpuDmaLatency,
}

impl DmaLatency {
    fn hold_zero() -> Option<DmaLatency> {
        rtloop_rt::setup::CpuDmaLatency::hold_zero().ok().map(|r| DmaLatency { _request: r })
    }
}
