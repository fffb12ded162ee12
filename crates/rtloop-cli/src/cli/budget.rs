//! `rtloop budget`: the cycle-time model of a robot, term by term — the "spreadsheet" of the
//! source posts, fed with the frames `rtloop run` really sends — and, for a robot on a
//! simulated pi3hat, the same robot measured beside it.
//!
//! The frame sizes are not assumed: the command is encoded exactly as the run loop encodes
//! it for that robot (on a pi3hat: the compact query, see `rtloop::cycle_model::robot_config_for`),
//! and the reply is what a simulated servo answers to it. Without a pi3hat, host costs are
//! those of the in-process simulator (no SPI or USB hop between host and bus) and the IMU
//! read costs nothing extra. On a pi3hat every frame crosses the board's SPI, and the model
//! plays its transactions one by one ([`rtloop_sim::model`]); the measurement then runs the same
//! robot and frames through the simulated pi3hat (`rtloop_io::open::open_buses`), on a virtual
//! clock (exact simulated time) and on the real one (plus this host's own time).
//!
//! `--seed-case` reproduces the source post's figure (12 servos, full command and the
//! comprehensive query, attitude: "around 740us" on a Raspberry Pi 3b+) and sets the model,
//! the simulation and 740 µs side by side, term by term. The model's constants are the
//! board's specification; nothing here is fitted to 740.
//!
//! Must never: send a frame to hardware (only simulated buses are measured), or change the
//! model to match a measurement.

use rtloop::cycle_model::*;
use rtloop::robot_spec::RobotSpec;
use rtloop_io::{BusUri, Clock, Pi3hatCarrier, ServoCommand, ServoReply};
use rtloop_sim::model::{predict, CriticalPath, CycleModel, Prediction, SpiPhase};
use serde_json::{json, Value};

/// The source post's figure for its case, µs.
pub const SEED_CYCLE_US: f64 = 740.0;

/// The period of measured cycles: `rtloop run`'s default rate, 1 kHz.
pub const MEASURE_PERIOD_NS: u64 = 1_000_000;

/// Cycles measured on each clock unless told otherwise.
pub const DEFAULT_CYCLES: u64 = 1000;

/// Most cycles one measurement runs (100 s on the real clock).
pub const MAX_CYCLES: u64 = 100_000;

/// Cycles run before the measured ones, as `rtloop run` queries the servos once before its
/// loop: the first cycles pay for cold caches and lazily touched memory.
pub const WARMUP_CYCLES: u64 = 10;

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Cycle times measured over many cycles, µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// Cycles measured.
    pub cycles: u64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile (nearest rank).
    pub p99_us: f64,
    /// Longest.
    pub max_us: f64,
    /// Servo replies missing over all the cycles.
    pub missing: u64,
}

impl Measured {
    fn json(&self) -> Value {
        json!({"cycles": self.cycles, "p50_us": self.p50_us, "p99_us": self.p99_us, "max_us": self.max_us,
               "missing": self.missing})
    }
}

/// Nearest-rank percentile `q` (0-100) of sorted `v`.
fn percentile(v: &[u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let rank = ((q / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

/// Run `cycles` cycles of `workload` on `robot` (simulated buses only) on `clock`, one every
/// [`MEASURE_PERIOD_NS`] after [`WARMUP_CYCLES`] unmeasured ones, and time each
/// [`rtloop_io::Robot::cycle`] call. The robot is built as
/// `rtloop run` builds it ([`RobotSpec::build`], the run's protocol settings); the simulated
/// buses keep their wire time.
pub fn measure<C: Clock + Clone + Send + 'static>(
    robot: &RobotSpec,
    workload: Workload,
    clock: C,
    cycles: u64,
) -> Result<Measured, String> {
    if !robot.all_simulated() {
        return Err("only simulated buses are measured (sim, pi3hat:sim)".into());
    }
    let (mut r, _sim) = robot
        .build(clock.clone(), workload.robot_config(robot), Default::default(), Default::default())
        .map_err(|e| e.to_string())?;
    let n = r.servos().len();
    let motion = run_motion(n);
    let mut commands = vec![ServoCommand::Query; n];
    let mut replies = vec![ServoReply::default(); n];
    let mut imu = rtloop_io::ImuSample::default();
    let mut samples = Vec::with_capacity(usize::try_from(cycles).unwrap_or(0));
    let mut missing = 0u64;
    for k in 0..WARMUP_CYCLES + cycles {
        workload.fill(&motion, k as f64 * MEASURE_PERIOD_NS as f64 * 1e-9, &mut commands);
        let start = clock.now_ns();
        let report = r.cycle(&commands, &mut replies, &mut imu);
        if k >= WARMUP_CYCLES {
            samples.push(clock.now_ns().saturating_sub(start));
            missing += u64::from(report.missing);
        }
        clock.wait_until_ns(start + MEASURE_PERIOD_NS);
    }
    samples.sort_unstable();
    Ok(Measured {
        cycles,
        p50_us: us(percentile(&samples, 50.0)),
        p99_us: us(percentile(&samples, 99.0)),
        max_us: us(samples.last().copied().unwrap_or(0)),
        missing,
    })
}

/// The same robot measured on the virtual clock and on the real one.
#[derive(Debug, Clone)]
pub enum Measurement {
    /// Not asked for (`--cycles 0`), or a robot without a pi3hat.
    NotAsked,
    /// Could not be measured: why.
    Skipped(String),
    /// Both clocks.
    Done {
        /// Exact simulated time.
        virtual_clock: Measured,
        /// This host's monotonic clock: the simulated SPI and wires plus this host's time
        /// between transactions.
        real_clock: Measured,
    },
}

impl Measurement {
    /// Measure `robot` sending `workload` on both clocks, `cycles` each.
    pub fn take(robot: &RobotSpec, workload: Workload, cycles: u64) -> Self {
        if cycles == 0 {
            return Measurement::NotAsked;
        }
        if let Some(b) =
            robot.buses.iter().find(|b| !matches!(b.uri, BusUri::Sim | BusUri::Pi3hat { carrier: Pi3hatCarrier::Sim }))
        {
            return Measurement::Skipped(format!(
                "bus {} is {} (hardware): budget measures simulated buses only; rtloop run on the robot reports its \
                 cycle figures",
                b.bus, b.uri
            ));
        }
        let virtual_clock = measure(robot, workload, rtloop_io::VirtualClock::new(0), cycles);
        // Measure as `rtloop run`'s cycle thread runs: with 1 ns of timer slack (rtloop_rt::setup),
        // not the default 50 µs by which the kernel may defer each sleep of the simulated
        // board (it sleeps rather than spins on the real clock).
        // SAFETY: PR_SET_TIMERSLACK takes the slack as an integer argument; no memory is passed.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        let real_clock = measure(robot, workload, rtloop_io::MonotonicClock::default(), cycles);
        match (virtual_clock, real_clock) {
            (Ok(virtual_clock), Ok(real_clock)) => Measurement::Done { virtual_clock, real_clock },
            (Err(e), _) | (_, Err(e)) => Measurement::Skipped(e),
        }
    }

    fn json(&self) -> Value {
        match self {
            Measurement::NotAsked => Value::Null,
            Measurement::Skipped(why) => json!({"skipped": why}),
            Measurement::Done { virtual_clock, real_clock } => json!({
                "period_us": us(MEASURE_PERIOD_NS),
                "virtual": virtual_clock.json(),
                "real": real_clock.json(),
            }),
        }
    }
}

/// What `rtloop budget` is asked.
#[derive(Debug, Clone)]
pub struct BudgetRequest {
    /// The robot (ignored by `seed_case`, which has its own).
    pub robot: RobotSpec,
    /// Cycles to measure on each clock (pi3hat robots; 0: the model only).
    pub cycles: u64,
    /// The source post's case instead of `robot`.
    pub seed_case: bool,
    /// One JSON object instead of the tables.
    pub json: bool,
}

impl BudgetRequest {
    /// Check the request: at most [`MAX_CYCLES`] cycles, pi3hat buses numbered 1-5, a valid
    /// robot.
    pub fn validate(&self) -> Result<(), String> {
        if self.cycles > MAX_CYCLES {
            return Err(format!(
                "--cycles {} is more than budget measures: give 0 (the model only) to {MAX_CYCLES}",
                self.cycles
            ));
        }
        if let Some(b) = self.robot.buses.iter().find(|b| matches!(b.uri, BusUri::Pi3hat { .. }) && b.bus > 5) {
            return Err(format!(
                "bus {} cannot be on a pi3hat: bus N is connector JC N, so give bus numbers 1 to 5",
                b.bus
            ));
        }
        self.robot.validate().map_err(|e| e.to_string())
    }
}

/// Answer `request`: the text (or JSON) `rtloop budget` prints.
pub fn run(request: &BudgetRequest) -> Result<String, String> {
    request.validate()?;
    if request.seed_case {
        let case = SeedCase::compute(request.cycles);
        return Ok(if request.json { case.json().to_string() } else { case.render() });
    }
    let robot = &request.robot;
    let model = model_for(robot);
    let prediction = predict(&model);
    let measured =
        if on_pi3hat(robot) { Measurement::take(robot, Workload::Run, request.cycles) } else { Measurement::NotAsked };
    Ok(if request.json {
        render_json_for(robot, &model, &prediction, &measured)
    } else {
        render_table_for(robot, &model, &prediction, &measured)
    })
}

/// The buses a pi3hat model uses, as "JC1-JC4" or "JC1, JC3".
fn connectors_label(robot: &RobotSpec) -> String {
    let n: Vec<u8> = robot.buses.iter().map(|b| b.bus).collect();
    let contiguous = n.windows(2).all(|w| w[1] == w[0] + 1);
    match (n.first(), n.last()) {
        (Some(a), Some(b)) if contiguous && n.len() > 2 => format!("JC{a}-JC{b}"),
        _ => n.iter().map(|c| format!("JC{c}")).collect::<Vec<_>>().join(", "),
    }
}

/// Every used processor's error status, read every `rtloop_io::pi3hat::ERROR_STATUS_PERIOD_NS`: the
/// SPI time it adds to that cycle, ns, and how many reads.
fn error_status_ns(model: &CycleModel) -> (u64, usize) {
    let Some(host) = &model.pi3hat else { return (0, 0) };
    let mut processors: Vec<u8> = (0..model.servos_per_bus.len()).map(|i| host.processor(i)).collect();
    processors.sort_unstable();
    processors.dedup();
    (processors.len() as u64 * host.transaction_ns(rtloop_sim::pi3hat::ERROR_STATUS_LEN), processors.len())
}

/// The table for `robot`: the model term by term, then the measurement beside it.
pub fn render_table_for(robot: &RobotSpec, m: &CycleModel, p: &Prediction, measured: &Measurement) -> String {
    let mut s = String::new();
    let servos = m.servos_per_bus.iter().sum::<usize>();
    match &m.pi3hat {
        Some(host) => {
            s += &format!(
                "cycle-time model: {servos} servos on a pi3hat ({}), SPI {} MHz with {:.0}/{:.0} µs holds, {}/{} \
                 Mbit/s, turnaround {:.0} µs\n",
                connectors_label(robot),
                host.spi.spi_hz as f64 / 1e6,
                us(host.spi.cs_hold_ns),
                us(host.spi.address_hold_ns),
                m.nominal_bitrate as f64 / 1e6,
                m.data_bitrate as f64 / 1e6,
                us(m.turnaround_ns)
            );
            let hat = p.pi3hat.as_ref();
            s += &format!(
                "{}: command {} B (SPI write {} B), reply {} B (pop {} B), before padding\n\n",
                Workload::Run.describe(robot),
                m.command_bytes,
                hat.map_or(0, |h| h.write_bytes),
                m.reply_bytes,
                hat.map_or(0, |h| h.pop_bytes)
            );
        }
        None => {
            s += &format!(
                "cycle-time model: {servos} servos on {} buses, {}/{} Mbit/s, turnaround {:.0} µs\n",
                m.servos_per_bus.len(),
                m.nominal_bitrate as f64 / 1e6,
                m.data_bitrate as f64 / 1e6,
                us(m.turnaround_ns)
            );
            s += &format!("command {} B, reply {} B (before padding)\n\n", m.command_bytes, m.reply_bytes);
        }
    }
    for (i, b) in p.buses.iter().enumerate() {
        let number = robot.buses.get(i).map_or(b.bus, |r| usize::from(r.bus));
        let on = if m.pi3hat.is_some() { format!("JC{number}, ") } else { String::new() };
        s += &format!(
            "bus {number} ({on}{} servos){}\n",
            b.servos,
            if i == p.critical_bus { "  ← slowest" } else { "" }
        );
        for t in &b.terms {
            s += &format!("  {:<16} {:>8.1} µs  {}\n", t.name, us(t.ns), t.explanation);
        }
        s += &format!("  {:<16} {:>8.1} µs\n", "bus total", us(b.total_ns));
    }
    s += if m.pi3hat.is_some() {
        "\ncycle (the SPI is one serial resource: the cycle ends when the last reply is popped)\n"
    } else {
        "\ncycle\n"
    };
    for t in &p.terms {
        s += &format!("  {:<16} {:>8.1} µs  {}\n", t.name, us(t.ns), t.explanation);
    }
    s += &format!("  {:<16} {:>8.1} µs  → at most {:.0} Hz\n", "total", us(p.total_ns), 1e9 / p.total_ns.max(1) as f64);
    if let Some(hat) = &p.pi3hat {
        s += &format!("critical path: {}\n", hat.explanation);
        let (ns, reads) = error_status_ns(m);
        s += &format!(
            "not in the total: every {} ms, {reads} error-status read{} of {} B (+{:.1} µs on that cycle; it shows in \
             the max)\n",
            rtloop_io::pi3hat::ERROR_STATUS_PERIOD_NS / 1_000_000,
            if reads == 1 { "" } else { "s" },
            rtloop_sim::pi3hat::ERROR_STATUS_LEN,
            us(ns)
        );
    }
    match measured {
        Measurement::NotAsked => {}
        Measurement::Skipped(why) => s += &format!("\nnot measured: {why}\n"),
        Measurement::Done { virtual_clock: v, real_clock: r } => {
            s += &format!(
                "\nmeasured through the simulated pi3hat: {} cycles at {:.0} Hz on each clock, the same frames\n",
                v.cycles,
                1e9 / MEASURE_PERIOD_NS as f64
            );
            s += &format!(
                "  {:<14} p50 {:>7.1}  max {:>7.1} µs   exact simulated time: SPI + wires ({} replies missing)\n",
                "virtual clock", v.p50_us, v.max_us, v.missing
            );
            s += &format!(
                "  {:<14} p50 {:>7.1}  p99 {:>7.1} µs   plus this host's time between SPI transactions ({} replies \
                 missing)\n",
                "real clock", r.p50_us, r.p99_us, r.missing
            );
            s += &format!("  {:<14}     {:>7.1} µs\n", "model", us(p.total_ns));
        }
    }
    s
}

fn terms_json(terms: &[rtloop_sim::model::Term]) -> Vec<Value> {
    terms.iter().map(|t| json!({"name": t.name, "us": us(t.ns), "explanation": t.explanation})).collect()
}

/// `robot`'s model (and measurement) as one JSON object.
pub fn render_json_for(robot: &RobotSpec, m: &CycleModel, p: &Prediction, measured: &Measurement) -> String {
    let buses: Vec<_> = p
        .buses
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let number = robot.buses.get(i).map_or(b.bus, |r| usize::from(r.bus));
            json!({"bus": number, "servos": b.servos, "total_us": us(b.total_ns), "terms": terms_json(&b.terms)})
        })
        .collect();
    let pi3hat = match (&m.pi3hat, &p.pi3hat) {
        (Some(host), Some(hat)) => {
            let (error_status, _) = error_status_ns(m);
            json!({
                "spi_hz": host.spi.spi_hz, "cs_hold_us": us(host.spi.cs_hold_ns),
                "address_hold_us": us(host.spi.address_hold_ns), "attitude": host.attitude,
                "write_bytes": hat.write_bytes, "pop_bytes": hat.pop_bytes,
                "transactions": hat.transactions.len(), "spi_busy_us": us(hat.spi_busy_ns),
                "spi_idle_us": us(hat.spi_idle_ns), "wire_done_us": us(hat.wire_done_ns),
                "critical_path": match hat.critical { CriticalPath::Spi => "spi", CriticalPath::Wire => "wire" },
                "critical_explanation": hat.explanation,
                "error_status_us": us(error_status),
                "error_status_period_ms": rtloop_io::pi3hat::ERROR_STATUS_PERIOD_NS / 1_000_000,
            })
        }
        _ => Value::Null,
    };
    json!({
        "command_bytes": m.command_bytes, "reply_bytes": m.reply_bytes,
        "nominal_bitrate": m.nominal_bitrate, "data_bitrate": m.data_bitrate,
        "turnaround_us": us(m.turnaround_ns), "host_per_frame_us": us(m.host_per_frame_ns),
        "buses": buses, "terms": terms_json(&p.terms), "total_us": us(p.total_ns),
        "pi3hat": pi3hat, "measured": measured.json(),
    })
    .to_string()
}

/// One column of the seed-case table: a workload on the seed robot, modelled and measured.
#[derive(Debug, Clone)]
pub struct SeedColumn {
    /// What is sent.
    pub workload: Workload,
    /// The model.
    pub model: CycleModel,
    /// Its prediction.
    pub prediction: Prediction,
    /// The simulated pi3hat.
    pub measured: Measurement,
}

impl SeedColumn {
    fn compute(workload: Workload, cycles: u64) -> Self {
        let robot = pi3hat_quadruped();
        let model = model_of(&robot, workload);
        let prediction = predict(&model);
        let measured = Measurement::take(&robot, workload, cycles);
        SeedColumn { workload, model, prediction, measured }
    }

    fn term(&self, name: &str) -> u64 {
        self.prediction.terms.iter().find(|t| t.name == name).map_or(0, |t| t.ns)
    }

    fn spi(&self) -> &rtloop_sim::model::Pi3hatPrediction {
        self.prediction.pi3hat.as_ref().expect("the seed robot is on a pi3hat")
    }

    /// The slowest bus's time on the wire (commands, replies, turnaround, waits for the SPI).
    fn wire_ns(&self) -> u64 {
        self.prediction.bus_total_ns()
    }

    /// The SPI's time for the bits alone (no holds), ns.
    fn bits_ns(&self) -> u64 {
        let host = self.model.pi3hat.as_ref().expect("pi3hat");
        self.spi().transactions.iter().map(|t| host.spi.bits_ns((1 + t.bytes as u64) * 8)).sum()
    }

    /// The largest command and reply (bytes, cut one at a time, the reply first) for which
    /// the model's cycle fits `target_ns`, if any does.
    fn fitting_frames(&self, target_ns: u64) -> Option<(usize, usize)> {
        let mut m = self.model.clone();
        let mut cut_reply = true;
        while m.command_bytes + m.reply_bytes > 0 {
            if predict(&m).total_ns <= target_ns {
                return Some((m.command_bytes, m.reply_bytes));
            }
            match (cut_reply && m.reply_bytes > 0, m.command_bytes > 0) {
                (true, _) | (false, false) => m.reply_bytes = m.reply_bytes.saturating_sub(1),
                (false, true) => m.command_bytes -= 1,
            }
            cut_reply = !cut_reply;
        }
        None
    }

    fn json(&self) -> Value {
        let hat = self.spi();
        json!({
            "workload": match self.workload { Workload::SeedCase => "seed", Workload::Run => "run" },
            "frames": self.workload.describe(&pi3hat_quadruped()),
            "command_bytes": self.model.command_bytes, "reply_bytes": self.model.reply_bytes,
            "write_bytes": hat.write_bytes, "pop_bytes": hat.pop_bytes,
            "terms": terms_json(&self.prediction.terms),
            "spi_busy_us": us(hat.spi_busy_ns), "spi_bits_us": us(self.bits_ns()),
            "transactions": hat.transactions.len(),
            "wire_us": us(self.wire_ns()), "wire_exposed_us": us(hat.spi_idle_ns),
            "critical_path": match hat.critical { CriticalPath::Spi => "spi", CriticalPath::Wire => "wire" },
            "model_us": us(self.prediction.total_ns),
            "measured": self.measured.json(),
        })
    }
}

/// The source post's case against the model and the simulation.
#[derive(Debug, Clone)]
pub struct SeedCase {
    /// The seed's frames, then `rtloop run`'s.
    pub columns: [SeedColumn; 2],
}

impl SeedCase {
    /// Model and measure both columns (`cycles` per clock; 0: the model only).
    pub fn compute(cycles: u64) -> Self {
        SeedCase {
            columns: [SeedColumn::compute(Workload::SeedCase, cycles), SeedColumn::compute(Workload::Run, cycles)],
        }
    }

    /// Why the model and 740 µs differ, one sentence each, from the figures.
    pub fn explanation(&self) -> Vec<String> {
        let seed = &self.columns[0];
        let run = &self.columns[1];
        let hat = seed.spi();
        let target = (SEED_CYCLE_US * 1000.0) as u64;
        let model = seed.prediction.total_ns;
        let n = hat.transactions.len() as u64;
        let holds = seed.spi().spi_busy_ns - seed.bits_ns();
        let mut out = Vec::new();
        out.push(format!(
            "The model's seed cycle is {:.0} µs, {:+.0} µs ({:+.0} %) from the post's 740 µs; it is {}-bound: the \
             wires are done at {:.0} µs, and the SPI carries {n} transactions: {:.0} µs of clocked bits at {} MHz \
             plus {:.0} µs of holds ({:.0} µs each).",
            us(model),
            us(model) - SEED_CYCLE_US,
            (us(model) / SEED_CYCLE_US - 1.0) * 100.0,
            match hat.critical {
                CriticalPath::Spi => "SPI",
                CriticalPath::Wire => "wire",
            },
            us(hat.wire_done_ns),
            us(seed.bits_ns()),
            seed.model.pi3hat.as_ref().map_or(0.0, |h| h.spi.spi_hz as f64 / 1e6),
            us(holds),
            us(holds) / n.max(1) as f64
        ));
        if seed.bits_ns() > target {
            out.push(format!(
                "The bits alone ({:.0} µs) exceed 740 µs: no hold times make these frames fit, so on the board as \
                 modelled the 2020 frames were shorter than ours (or the figure covers less than this whole cycle).",
                us(seed.bits_ns())
            ));
        } else if model > target {
            out.push(format!(
                "To reach 740 µs with these frames, each transaction would have to cost {:.1} µs less than modelled \
                 ({:.1} µs of its {:.1} µs of holds).",
                us(model - target) / n.max(1) as f64,
                us(model - target) / n.max(1) as f64,
                us(holds) / n.max(1) as f64
            ));
        }
        let wire_alone = predict(&seed.model.wire_only()).bus_total_ns();
        out.push(format!(
            "The wires alone, never waiting for the SPI, need {:.0} µs for these frames ({} commands and replies per \
             bus at {}/{} Mbit/s, {:.0} µs turnaround){}.",
            us(wire_alone),
            seed.model.servos_per_bus.iter().copied().max().unwrap_or(0),
            seed.model.nominal_bitrate as f64 / 1e6,
            seed.model.data_bitrate as f64 / 1e6,
            us(seed.model.turnaround_ns),
            if wire_alone > target { ": above 740 µs too" } else { ": within 740 µs" }
        ));
        if let Some((c, r)) = seed.fitting_frames(target) {
            out.push(format!(
                "With the board as modelled, 740 µs fits commands of {c} B and replies of {r} B (ours: {} B and {} B): \
                 each byte of the twelve commands or replies costs {:.1} µs of SPI.",
                seed.model.command_bytes,
                seed.model.reply_bytes,
                12.0 * 8e6 / seed.model.pi3hat.as_ref().map_or(1.0, |h| f64::from(h.spi.spi_hz.max(1)))
            ));
        }
        out.push(
            "No drain is charged: rtloop reads a processor before its writes only when replies of an earlier cycle \
             are still owed, where the current library reads every processor in use every cycle (+14.6 µs each)."
                .to_string(),
        );
        let this_host = match &seed.measured {
            Measurement::Done { real_clock, virtual_clock } => format!(
                "; the real-clock simulation shows this machine's ({:+.1} µs at p50)",
                real_clock.p50_us - virtual_clock.p50_us
            ),
            _ => String::new(),
        };
        out.push(format!(
            "The model adds no host time between transactions, which could only lengthen the cycle (the post says a \
             Pi 4 is about 5 % faster, mostly because its CPU leaves less dead time on the SPI){this_host}."
        ));
        out.push(format!(
            "rtloop run's own pi3hat frames ({} B command, {} B reply, the compact query) model at {:.0} µs.",
            run.model.command_bytes,
            run.model.reply_bytes,
            us(run.prediction.total_ns)
        ));
        out
    }

    /// The table `rtloop budget --seed-case` prints.
    pub fn render(&self) -> String {
        let [seed, run] = &self.columns;
        let mut s = String::new();
        s += "the source post's case: 12 servos on pi3hat buses 1-4 (3 each), full command and query, attitude;\n";
        s += "\"a full command and query of the comprehensive state of 12 qdd100 servos, and reading the IMU takes \
              around 740us\" (Raspberry Pi 3b+)\n\n";
        s += &format!("{:<34} {:>14} {:>14}\n", "", "seed frames", "run frames");
        let row = |s: &mut String, name: &str, a: String, b: String| *s += &format!("{name:<34} {a:>14} {b:>14}\n");
        let fmt = |ns: u64| format!("{:.1}", us(ns));
        row(
            &mut s,
            "command: CAN-FD / SPI write, B",
            format!("{} / {}", seed.model.command_bytes, seed.spi().write_bytes),
            format!("{} / {}", run.model.command_bytes, run.spi().write_bytes),
        );
        row(
            &mut s,
            "reply: CAN-FD / SPI pop, B",
            format!("{} / {}", seed.model.reply_bytes, seed.spi().pop_bytes),
            format!("{} / {}", run.model.reply_bytes, run.spi().pop_bytes),
        );
        s += "host's SPI share, µs\n";
        for (name, label) in [
            (SpiPhase::Write.name(), "  writes"),
            (SpiPhase::Attitude.name(), "  attitude"),
            (SpiPhase::Status.name(), "  reads: receive status"),
            (SpiPhase::Pop.name(), "  reads: pops"),
            (SpiPhase::Drain.name(), "  polls: drain before the writes"),
        ] {
            row(&mut s, label, fmt(seed.term(name)), fmt(run.term(name)));
        }
        row(&mut s, "  (of which clocked bits)", fmt(seed.bits_ns()), fmt(run.bits_ns()));
        s += "wire's share, µs\n";
        row(&mut s, "  slowest bus on the wire", fmt(seed.wire_ns()), fmt(run.wire_ns()));
        row(&mut s, "  exposed: the SPI waits for it", fmt(seed.term("spi waits")), fmt(run.term("spi waits")));
        let critical = |c: &SeedColumn| match c.spi().critical {
            CriticalPath::Spi => "SPI".to_string(),
            CriticalPath::Wire => "wire".to_string(),
        };
        row(&mut s, "critical path", critical(seed), critical(run));
        s += "cycle, µs\n";
        row(&mut s, "  model", fmt(seed.prediction.total_ns), fmt(run.prediction.total_ns));
        let measured = |c: &SeedColumn, pick: fn(&Measured) -> f64, real: bool| match &c.measured {
            Measurement::Done { virtual_clock, real_clock } => {
                format!("{:.1}", pick(if real { real_clock } else { virtual_clock }))
            }
            _ => "-".to_string(),
        };
        row(
            &mut s,
            "  simulated pi3hat, virtual p50",
            measured(seed, |m| m.p50_us, false),
            measured(run, |m| m.p50_us, false),
        );
        row(
            &mut s,
            "  simulated pi3hat, virtual max",
            measured(seed, |m| m.max_us, false),
            measured(run, |m| m.max_us, false),
        );
        row(
            &mut s,
            "  simulated pi3hat, real p50",
            measured(seed, |m| m.p50_us, true),
            measured(run, |m| m.p50_us, true),
        );
        row(
            &mut s,
            "  simulated pi3hat, real p99",
            measured(seed, |m| m.p99_us, true),
            measured(run, |m| m.p99_us, true),
        );
        row(&mut s, "  the post (Pi 3b+)", format!("{SEED_CYCLE_US:.0}"), "-".to_string());
        if let Measurement::Skipped(why) = &seed.measured {
            s += &format!("not measured: {why}\n");
        }
        s += "\nwhat explains the difference\n";
        for line in self.explanation() {
            s += &format!("* {line}\n");
        }
        s
    }

    /// The same as one JSON object.
    pub fn json(&self) -> Value {
        json!({
            "seed_us": SEED_CYCLE_US,
            "servos": 12,
            "seed": self.columns[0].json(),
            "run": self.columns[1].json(),
            "explanation": self.explanation(),
        })
    }
}

/// The robot `rtloop budget` describes: the built-in quadruped, on a simulated pi3hat with
/// `pi3hat`, or the buses of a run configuration file (`from_file`) and/or `--bus`/`--ids`
/// flags (the flags replace the file's buses, as with `rtloop run`).
pub fn robot_from_args(
    from_file: Option<RobotSpec>,
    buses: &[String],
    ids: &[String],
    pi3hat: bool,
) -> Result<RobotSpec, String> {
    let flags = !buses.is_empty() || !ids.is_empty();
    if pi3hat && (flags || from_file.is_some()) {
        return Err("--pi3hat is the built-in quadruped on pi3hat:sim: drop it, or drop --config/--bus/--ids".into());
    }
    if pi3hat {
        return Ok(pi3hat_quadruped());
    }
    if flags {
        return RobotSpec::from_flags(buses, ids).map_err(|e| e.to_string());
    }
    Ok(from_file.unwrap_or_else(RobotSpec::default_quadruped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtloop::robot_spec::BusSpec;

    /// When the last reply of `n` servos (ids 1..=n) on one simulated bus ends, all commands
    /// handed over at once — the frames `rtloop run` sends, on the bus `rtloop run` uses.
    fn simulated_bus_ns(n: u8) -> u64 {
        let robot = RobotSpec::default_quadruped();
        let mut bus = rtloop_sim::SimBus::new(rtloop_sim::BusConfig::default());
        for id in 1..=n {
            bus.add_servo(rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(id)));
            bus.submit(&run_command_frame(&robot, id).unwrap(), 0).unwrap();
        }
        let mut last = 0;
        let mut replies = 0;
        while let Some(t) = bus.next_event_ns() {
            while let Some((_, end)) = bus.poll_rx_stamped(t) {
                last = end;
                replies += 1;
            }
        }
        assert_eq!(replies, n);
        last
    }

    #[test]
    fn the_model_rtloop_run_reports_matches_the_simulated_bus_for_1_to_6_servos() {
        for n in 1..=6u8 {
            let robot =
                RobotSpec { buses: vec![BusSpec { bus: 1, uri: rtloop_io::BusUri::Sim, servos: (1..=n).collect() }] };
            let predicted = predict(&model_for(&robot).wire_only()).bus_total_ns();
            let actual = simulated_bus_ns(n);
            // Only the frames' content stuffing is estimated (see rtloop_sim::model): within 1 %.
            let err = predicted as f64 / actual as f64 - 1.0;
            assert!(
                err.abs() < 0.01,
                "{n} servos: model {predicted} ns, simulated {actual} ns ({:+.2} %)",
                err * 100.0
            );
        }
    }

    #[test]
    fn the_model_and_the_transport_time_spi_transactions_alike() {
        let model = model_for(&pi3hat_quadruped());
        let host = model.pi3hat.as_ref().unwrap();
        let run = rtloop_io::spi::SpiTiming::default();
        assert_eq!(u64::from(run.cs_hold_ns), host.spi.cs_hold_ns);
        for n in 0..=69 {
            assert_eq!(host.transaction_ns(n), run.transaction_ns(n), "{n} bytes");
        }
    }

    #[test]
    fn frames_follow_the_robot() {
        let plain = RobotSpec::default_quadruped();
        let hat = pi3hat_quadruped();
        // On a pi3hat the run asks the compact query: the same command carries a shorter
        // query, and the reply is shorter.
        let (c_plain, r_plain) = frame_sizes(&plain, Workload::Run);
        let (c_hat, r_hat) = frame_sizes(&hat, Workload::Run);
        assert!(c_hat < c_plain, "{c_hat} vs {c_plain}");
        assert!(r_hat < r_plain, "{r_hat} vs {r_plain}");
        // The SPI write is exactly what the transport clocks for the real frame.
        let frame = run_command_frame(&hat, 1).unwrap();
        assert_eq!(c_hat, usize::from(rtloop_io::pi3hat::unpadded_len(&frame)));
        // The seed case's full command is longer than the run's.
        let (c_seed, r_seed) = frame_sizes(&hat, Workload::SeedCase);
        assert!(c_seed > c_plain && r_seed == r_plain, "{c_seed} {r_seed}");
        assert!(model_for(&plain).pi3hat.is_none());
        assert_eq!(model_for(&hat).pi3hat.unwrap().connectors, vec![1, 2, 3, 4]);
    }

    /// The model against robots of 1-4 buses with 1-4 servos each on the simulated pi3hat, in
    /// virtual time (exact and deterministic), with both workloads.
    ///
    /// Tolerance: two receive-status reads (2 × 14.6 µs at 10 MHz) plus 1 % of the slowest
    /// bus's wire time. The model reads a processor exactly when a reply is there and never
    /// polls in vain; the transport polls the processors in turn, from a lower bound of when
    /// a reply can be back, so it makes polls that find nothing, and a reply that lands just
    /// after a poll sampled waits for the next round: at the end of the cycle it can be up
    /// to one read per processor (two: JC1-JC4 sit on processors 1 and 2) behind the model
    /// (and a read that happens to show one more reply can put it a little ahead). The
    /// content's stuff bits are estimated by the model (within 1 % of the wire, see
    /// `rtloop_sim::model`), the rest — bytes, bus order, holds, frames, turnarounds — is the same
    /// arithmetic on both sides. The whole quadruped, SPI-bound, agrees to the nanosecond.
    #[test]
    fn the_pi3hat_model_matches_the_simulated_board_within_two_status_reads() {
        for workload in [Workload::Run, Workload::SeedCase] {
            for buses in 1..=4usize {
                for servos in 1..=4u8 {
                    let mut robot = pi3hat_quadruped();
                    robot.buses.truncate(buses);
                    let mut next = 1;
                    for b in &mut robot.buses {
                        b.servos = (next..next + servos).collect();
                        next += servos;
                    }
                    let model = model_of(&robot, workload);
                    let p = predict(&model);
                    let m = measure(&robot, workload, rtloop_io::VirtualClock::new(0), 50).unwrap();
                    assert_eq!(m.missing, 0);
                    let status = us(model.pi3hat.as_ref().unwrap().transaction_ns(6));
                    let tolerance = 2.0 * status + 0.01 * us(p.bus_total_ns());
                    let predicted = us(p.total_ns);
                    assert!(
                        (m.p50_us - predicted).abs() <= tolerance,
                        "{workload:?}, {buses} buses × {servos} servos: model {predicted:.1} µs, simulated p50 {:.1} \
                         µs (± {tolerance:.1})\n{p}",
                        m.p50_us
                    );
                    // The longest cycle adds the error-status reads every 100 ms, no more.
                    let (errors, _) = error_status_ns(&model);
                    assert!(m.max_us <= predicted + tolerance + us(errors), "{workload:?} {buses} × {servos}: {m:?}");
                    if buses == 4 && servos == 3 {
                        assert_eq!(m.p50_us, predicted, "{workload:?}: the quadruped is SPI-bound: exact");
                    }
                }
            }
        }
    }

    #[test]
    fn virtual_measurements_repeat_exactly() {
        let robot = pi3hat_quadruped();
        let a = measure(&robot, Workload::Run, rtloop_io::VirtualClock::new(0), 30).unwrap();
        let b = measure(&robot, Workload::Run, rtloop_io::VirtualClock::new(0), 30).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn hardware_is_never_measured() {
        let mut robot = pi3hat_quadruped();
        robot.buses[0].uri = BusUri::Pi3hat { carrier: Pi3hatCarrier::Spidev };
        match Measurement::take(&robot, Workload::Run, 10) {
            Measurement::Skipped(why) => assert!(why.contains("bus 1 is pi3hat:spidev"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(measure(&robot, Workload::Run, rtloop_io::VirtualClock::new(0), 1).is_err());
    }

    #[test]
    fn requests_are_checked() {
        let r = BudgetRequest { robot: pi3hat_quadruped(), cycles: MAX_CYCLES + 1, seed_case: false, json: false };
        let e = run(&r).unwrap_err();
        assert!(e.contains("--cycles") && e.contains("100000"), "{e}");
        let e = robot_from_args(None, &["1=sim".into()], &["1=1".into()], true).unwrap_err();
        assert!(e.contains("--pi3hat"), "{e}");
        let e = robot_from_args(Some(RobotSpec::default_quadruped()), &[], &[], true).unwrap_err();
        assert!(e.contains("--pi3hat"), "{e}");
        assert!(on_pi3hat(&robot_from_args(None, &[], &[], true).unwrap()));
        assert!(!on_pi3hat(&robot_from_args(None, &[], &[], false).unwrap()));
    }

    #[test]
    fn the_seed_case_sets_the_model_beside_740() {
        let case = SeedCase::compute(0);
        let text = case.render();
        assert!(text.contains("740"), "{text}");
        for want in ["writes", "attitude", "receive status", "pops", "drain", "slowest bus on the wire", "model"] {
            assert!(text.contains(want), "{want}: {text}");
        }
        let seed = &case.columns[0];
        // The seed's frames are the comprehensive query's: longer replies than the run's.
        assert!(seed.model.reply_bytes > case.columns[1].model.reply_bytes);
        // The explanation is computed, not canned: it quotes the model's own figure.
        let lines = case.explanation();
        assert!(lines[0].contains(&format!("{:.0} µs", us(seed.prediction.total_ns))), "{lines:?}");
        // Cutting frames down to fit 740 µs only ever shortens them.
        if let Some((c, r)) = seed.fitting_frames((SEED_CYCLE_US * 1000.0) as u64) {
            assert!(c <= seed.model.command_bytes && r <= seed.model.reply_bytes);
        }
    }
}
