//! The `rtloop lab` command line: the experiments' flags, and dispatch to them.
//!
//! Every experiment takes the same [`CommonArgs`] (the real-time settings of `rtloop run`,
//! background load, sample count and the output options) plus its own flags. [`run`] turns
//! the flags into [`CommonOptions`], runs the experiment, gathers the conditions, renders the
//! report and writes the CSV and plot when asked. With `--json` the last line of the returned
//! text is the JSON object, so notes about written files come before it.
//!
//! What it must never do: print by itself (the caller prints what [`run`] returns), or
//! silently accept a flag value it does not understand.

use crate::conditions::Conditions;
use crate::report::{render, write_csv, CommonOptions, Outcome};
use rt::setup::{DeadlineParams, Policy, RtSettings};
use std::fmt::Display;
use std::path::PathBuf;
use std::str::FromStr;

/// Priority used for fifo and rr when `--priority` is not given: high, but below the
/// kernel's own threads at 99 and the usual IRQ threads at 50 is not what we want either —
/// 80 is above IRQ threads, like a control loop should be.
const DEFAULT_RT_PRIORITY: i32 = 80;

/// The flags every experiment takes.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct CommonArgs {
    /// Scheduling policy of the measuring thread(s): other, fifo, rr or deadline.
    #[arg(long, default_value = "other")]
    pub policy: String,
    /// Real-time priority 1-99 for fifo and rr (default 80).
    #[arg(long)]
    pub priority: Option<i32>,
    /// SCHED_DEADLINE runtime per period, µs (with --policy deadline).
    #[arg(long, value_name = "US", default_value_t = 200)]
    pub deadline_runtime_us: u64,
    /// SCHED_DEADLINE period (and relative deadline), µs (with --policy deadline).
    #[arg(long, value_name = "US", default_value_t = 1000)]
    pub deadline_period_us: u64,
    /// Pin the measuring thread(s) to these CPUs, e.g. 1 or 0,1 or 0-1.
    #[arg(long, value_name = "LIST")]
    pub cpu: Option<String>,
    /// Lock all memory (mlockall) so the measurement never waits for a page.
    #[arg(long)]
    pub mlock: bool,
    /// Spin for the last N µs before each deadline / instead of sleeping, where the
    /// experiment sleeps.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub busy_wait_us: u64,
    /// Run N background load workers (CPU, memory, file I/O) during the measurement.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub load: usize,
    /// Samples per run.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub samples: usize,
    /// Turn every refused real-time request into an error.
    #[arg(long)]
    pub strict: bool,
    /// Make the last line of output one JSON object with the figures and conditions.
    #[arg(long)]
    pub json: bool,
    /// Write every raw sample to FILE as CSV (label,size,method,sample_us).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Draw a histogram (one run) or a side-by-side plot (several runs) to FILE.png.
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
    /// Do not show a progress bar (it is only shown on a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,
}

impl CommonArgs {
    /// The experiment options these flags ask for; an error names the bad flag.
    pub fn options(&self) -> Result<CommonOptions, String> {
        let policy: Policy = self.policy.parse().map_err(|e| format!("--policy: {e}"))?;
        let priority = match (policy, self.priority) {
            (_, Some(p)) => p,
            (Policy::Fifo | Policy::RoundRobin, None) => DEFAULT_RT_PRIORITY,
            _ => 0,
        };
        let deadline = (policy == Policy::Deadline).then_some(DeadlineParams {
            runtime_ns: self.deadline_runtime_us * 1000,
            deadline_ns: self.deadline_period_us * 1000,
            period_ns: self.deadline_period_us * 1000,
        });
        let cpus = match &self.cpu {
            None => Vec::new(),
            Some(list) => rt::setup::parse_cpu_list(list)
                .ok_or_else(|| format!("--cpu: '{list}' is not a CPU list like 1 or 0,1 or 0-3"))?,
        };
        let rt = RtSettings {
            policy,
            priority,
            deadline,
            cpus,
            mlock: self.mlock,
            strict: self.strict,
            ..RtSettings::default()
        };
        rt::setup::validate(&rt).map_err(|e| e.to_string())?;
        if self.samples == 0 {
            return Err("--samples must be at least 1".into());
        }
        crate::load::Capacity::of_this_machine().check(self.load)?;
        Ok(CommonOptions { rt, load: self.load, samples: self.samples, progress: !self.no_progress })
    }
}

/// `rtloop lab …`: the experiments, the comparison with standard tools, and the doctor.
#[derive(clap::Subcommand, Debug, Clone, PartialEq)]
pub enum LabCommand {
    /// Wakeup latency of a periodic thread (what cyclictest measures).
    Wakeup {
        #[command(flatten)]
        common: CommonArgs,
        /// Period of the thread, µs.
        #[arg(long, default_value_t = 1000)]
        period_us: u64,
    },
    /// UDP round trip to an echo server on this host (or in its own network namespace).
    UdpEcho {
        #[command(flatten)]
        common: CommonArgs,
        /// Message sizes, bytes.
        #[arg(long, value_delimiter = ',', default_value = "16,64,256,1024")]
        sizes: Vec<usize>,
        /// Receive methods: blocking, epoll, busy-poll.
        #[arg(long, value_delimiter = ',', default_value = "blocking,epoll,busy-poll")]
        methods: Vec<String>,
        /// Put the server in its own network namespace behind a veth pair (needs root).
        #[arg(long)]
        netns: bool,
        /// UDP port of the echo server.
        #[arg(long, default_value_t = 7777)]
        port: u16,
    },
    /// Event response between threads or processes (the interrupt-response analogue).
    Event {
        #[command(flatten)]
        common: CommonArgs,
        /// How the event is raised and awaited: eventfd, pipe, futex, busy-poll.
        #[arg(long, value_delimiter = ',', default_value = "eventfd,pipe,futex,busy-poll")]
        methods: Vec<String>,
        /// Answer from a separate process instead of a thread.
        #[arg(long)]
        processes: bool,
    },
    /// Turnaround over a pseudo-terminal: blocking read, epoll, busy polling.
    Serial {
        #[command(flatten)]
        common: CommonArgs,
        /// Read methods: blocking, epoll, busy-poll.
        #[arg(long, value_delimiter = ',', default_value = "blocking,epoll,busy-poll")]
        methods: Vec<String>,
        /// Message size, bytes.
        #[arg(long, default_value_t = 64)]
        size: usize,
    },
    /// Duration of the full rtloop cycle against the simulator, an fdcanusb or UDP.
    Cycle {
        #[command(flatten)]
        common: CommonArgs,
        /// sim, fdcanusb:PATH or udp:HOST:PORT.
        #[arg(long, default_value = "sim")]
        transport: String,
        /// Servo ids, e.g. 1-12 or 1,2,3.
        #[arg(long, default_value = "1-12")]
        servos: String,
        /// Cycle rate, Hz.
        #[arg(long, default_value_t = 1000.0)]
        rate: f64,
    },
    /// Our wakeup and UDP figures beside cyclictest's and sockperf's, same settings.
    Compare {
        /// Samples per measurement.
        #[arg(long, default_value_t = 10_000)]
        samples: usize,
        /// UDP message sizes, bytes.
        #[arg(long, value_delimiter = ',', default_value = "64")]
        sizes: Vec<usize>,
        /// Make the last line of output one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Check the system's real-time readiness.
    Doctor {
        /// Make the last line of output one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// The echo server udp-echo starts in a network namespace (internal).
    #[command(hide = true)]
    UdpEchoServer {
        /// Address to bind, HOST:PORT.
        #[arg(long)]
        bind: String,
        /// Receive method: blocking, epoll, busy-poll.
        #[arg(long, default_value = "blocking")]
        method: String,
        /// Serve this long, seconds.
        #[arg(long, default_value_t = 60.0)]
        seconds: f64,
    },
}

/// Parse a comma-separated method list with the experiment's own names.
fn parse_list<T>(flag: &str, items: &[String]) -> Result<Vec<T>, String>
where
    T: FromStr,
    T::Err: Display,
{
    if items.is_empty() {
        return Err(format!("{flag}: give at least one"));
    }
    items.iter().map(|s| s.trim().parse::<T>().map_err(|e| format!("{flag}: {e}"))).collect()
}

/// Run a lab command and return what to print (with `--json`, its last line is the JSON).
pub fn run(cmd: LabCommand) -> Result<String, String> {
    match cmd {
        LabCommand::Wakeup { common, period_us } => {
            let options = common.options()?;
            let outcome = crate::wakeup::wakeup(&options, period_us, common.busy_wait_us)?;
            finish(&common, &options, &outcome)
        }
        LabCommand::UdpEcho { common, sizes, methods, netns, port } => {
            let options = common.options()?;
            let methods = parse_list::<crate::udp::RecvMethod>("--methods", &methods)?;
            let udp = crate::udp::UdpEchoOptions { sizes, methods, netns, port };
            let outcome = crate::udp::udp_echo(&options, &udp)?;
            finish(&common, &options, &outcome)
        }
        LabCommand::Event { common, methods, processes } => {
            let options = common.options()?;
            let methods = parse_list::<crate::event::EventMethod>("--methods", &methods)?;
            let outcome = crate::event::event(&options, &crate::event::EventOptions { methods, processes })?;
            finish(&common, &options, &outcome)
        }
        LabCommand::Serial { common, methods, size } => {
            let options = common.options()?;
            let methods = parse_list::<crate::serial::SerialMethod>("--methods", &methods)?;
            let outcome = crate::serial::serial(&options, &crate::serial::SerialOptions { methods, size })?;
            finish(&common, &options, &outcome)
        }
        LabCommand::Cycle { common, transport, servos, rate } => {
            let options = common.options()?;
            let outcome = crate::cycle::cycle(&options, &transport, &servos, rate)?;
            finish(&common, &options, &outcome)
        }
        LabCommand::Compare { samples, sizes, json } => {
            crate::compare::compare(&crate::compare::CompareOptions { samples, sizes, json })
        }
        LabCommand::Doctor { json } => Ok(crate::doctor::run(json)),
        LabCommand::UdpEchoServer { bind, method, seconds } => {
            crate::udp::serve_echo(&bind, &method, seconds).map(|_| String::new())
        }
    }
}

/// Write the CSV and plot when asked, then render the report (notes about the files first,
/// so a JSON line stays last).
fn finish(args: &CommonArgs, options: &CommonOptions, outcome: &Outcome) -> Result<String, String> {
    let mut notes = String::new();
    if let Some(path) = &args.csv {
        write_csv(outcome, path)?;
        notes.push_str(&format!("raw samples written to {}\n", path.display()));
    }
    if let Some(path) = &args.plot {
        crate::plot::plot(outcome, path)?;
        notes.push_str(&format!("plot written to {}\n", path.display()));
    }
    let conditions = Conditions::gather(options);
    Ok(notes + &render(outcome, &conditions, args.json))
}
