//! The `rtloop lab` command line: the experiments' flags, and dispatch to them.
//!
//! Every experiment takes the same [`CommonArgs`] (the real-time settings of `rtloop run`,
//! background load, sample count and the output options) plus its own flags. [`run`] first
//! checks every flag of the command ([`crate::check`]: ranges, NaN and infinities, lists,
//! output paths, the load the machine can carry), then turns them into [`CommonOptions`], runs
//! the experiment, gathers the conditions, renders the report and writes the CSV and plot when
//! asked. With `--json` the last line of the returned text is the JSON object, so notes about
//! written files come before it. A measurement that ran but does not measure what was asked
//! (replies were missing) comes back as a [`Report`] with a `failure`: the caller prints the
//! report, then the sentence, and exits 1.
//!
//! What it must never do: print by itself (the caller prints what [`run`] returns), measure
//! anything before every flag was checked, silently accept (or ignore) a flag value, or let a
//! failed measurement pass for a result.

use crate::check::{self, CheckError};
use crate::conditions::Conditions;
use crate::options::CommonOptions;
use crate::report::{render, write_csv, Outcome};
use rtloop_rt::setup::{DeadlineParams, Policy, RtSettings};
use std::fmt::Display;
use std::path::PathBuf;
use std::str::FromStr;

/// Priority used for fifo and rr when `--priority` is not given: high, but below the
/// kernel's own threads at 99 and the usual IRQ threads at 50 is not what we want either —
/// 80 is above IRQ threads, like a control loop should be.
const DEFAULT_RT_PRIORITY: i32 = 80;
/// SCHED_DEADLINE runtime per period when `--deadline-runtime-us` is not given, µs.
const DEFAULT_DEADLINE_RUNTIME_US: u64 = 200;
/// SCHED_DEADLINE period when `--deadline-period-us` is not given, µs.
const DEFAULT_DEADLINE_PERIOD_US: u64 = 1000;

/// The flags every experiment takes.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct CommonArgs {
    /// Scheduling policy of the measuring thread(s): other, fifo, rr or deadline.
    #[arg(long, default_value = "other")]
    pub policy: String,
    /// Real-time priority 1-99 for fifo and rr (default 80).
    #[arg(long)]
    pub priority: Option<i32>,
    /// SCHED_DEADLINE runtime per period, µs (with --policy deadline; default 200).
    #[arg(long, value_name = "US")]
    pub deadline_runtime_us: Option<u64>,
    /// SCHED_DEADLINE period (and relative deadline), µs (with --policy deadline; default 1000).
    #[arg(long, value_name = "US")]
    pub deadline_period_us: Option<u64>,
    /// Pin the measuring thread(s) to these CPUs, e.g. 1 or 0,1 or 0-1.
    #[arg(long, value_name = "LIST")]
    pub cpu: Option<String>,
    /// Lock all memory (mlockall) so the measurement never waits for a page.
    #[arg(long)]
    pub mlock: bool,
    /// Spin for the last N µs before each deadline instead of sleeping (wakeup and cycle,
    /// the experiments that sleep until a deadline; at most the period).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub busy_wait_us: u64,
    /// Run N background load workers (CPU, memory, file I/O) during the measurement (at most
    /// 4 per CPU, and 65 MiB each within half of the available memory).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub load: usize,
    /// Samples per run (1..=10000000).
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
    /// Let --csv and --plot replace an existing regular file (never a link, device, FIFO,
    /// socket or directory).
    #[arg(long)]
    pub force: bool,
    /// Do not show a progress bar (it is only shown on a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,
}

impl CommonArgs {
    /// The experiment options these flags ask for, every flag checked; an error is one
    /// sentence naming the bad flag and what to give instead. `--busy-wait-us` is checked
    /// by each experiment against its own period ([`check::busy_wait_us`]).
    pub fn options(&self) -> Result<CommonOptions, CheckError> {
        let policy: Policy = self.policy.parse().map_err(CheckError::Policy)?;
        let priority = match (policy, self.priority) {
            (Policy::Fifo | Policy::RoundRobin, Some(p)) => {
                check::in_range("--priority", p, &(1..=99), &format!("for --policy {}", self.policy))?
            }
            (Policy::Fifo | Policy::RoundRobin, None) => DEFAULT_RT_PRIORITY,
            (_, Some(p)) if p != 0 => {
                return Err(CheckError::PriorityNeedsRealtime { priority: p, policy: policy.kernel_name() })
            }
            _ => 0,
        };
        let deadline = if policy == Policy::Deadline {
            let period_us = check::in_range(
                "--deadline-period-us",
                self.deadline_period_us.unwrap_or(DEFAULT_DEADLINE_PERIOD_US),
                &check::DEADLINE_PERIOD_US,
                "(us)",
            )?;
            let runtime_us = check::in_range(
                "--deadline-runtime-us",
                self.deadline_runtime_us.unwrap_or(DEFAULT_DEADLINE_RUNTIME_US.min(period_us)),
                &(check::DEADLINE_MIN_RUNTIME_US..=period_us),
                "(us, at most --deadline-period-us)",
            )?;
            Some(DeadlineParams {
                runtime_ns: runtime_us * 1000,
                deadline_ns: period_us * 1000,
                period_ns: period_us * 1000,
            })
        } else {
            for (flag, given) in
                [("--deadline-runtime-us", self.deadline_runtime_us), ("--deadline-period-us", self.deadline_period_us)]
            {
                if given.is_some() {
                    return Err(CheckError::DeadlineOnly { flag });
                }
            }
            None
        };
        let cpus = match &self.cpu {
            None => Vec::new(),
            Some(list) => {
                rtloop_rt::setup::parse_cpu_list(list).ok_or_else(|| CheckError::NotACpuList { list: list.clone() })?
            }
        };
        if let Some(allowed) = rtloop_rt::setup::current_conditions().affinity {
            if let Some(cpu) = cpus.iter().find(|c| !allowed.contains(c)) {
                return Err(CheckError::CpuNotAllowed { cpu: *cpu, allowed });
            }
        }
        let rt = RtSettings {
            policy,
            priority,
            deadline,
            cpus,
            mlock: self.mlock,
            strict: self.strict,
            ..RtSettings::default()
        };
        rtloop_rt::setup::validate(&rt)?;
        check::samples("--samples", self.samples)?;
        crate::load::Capacity::of_this_machine().check(self.load)?;
        if let Some(path) = &self.csv {
            check::output_file("--csv", path, None, self.force)?;
        }
        if let Some(path) = &self.plot {
            check::output_file("--plot", path, Some("png"), self.force)?;
        }
        check::distinct_outputs(self.csv.as_deref(), self.plot.as_deref())?;
        Ok(CommonOptions {
            rt,
            load: self.load,
            samples: self.samples,
            busy_wait_us: self.busy_wait_us,
            progress: !self.no_progress,
        })
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
        /// UDP port of the echo server (default 0: a free port the system picks).
        #[arg(long, default_value_t = 0)]
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
        /// Message size, bytes (1..=4096).
        #[arg(long, default_value_t = 64)]
        size: usize,
    },
    /// Duration of the full rtloop cycle against the simulator, an fdcanusb or UDP (exit 1
    /// when any reply was missing: the figures then time waits, not cycles).
    Cycle {
        #[command(flatten)]
        common: CommonArgs,
        /// sim, fdcanusb:PATH or udp:HOST:PORT.
        #[arg(long, default_value = "sim")]
        transport: String,
        /// Servo ids, e.g. 1-12 or 1,2,3.
        #[arg(long, default_value = "1-12")]
        servos: String,
        /// Cycle rate, Hz (0.1..=100000).
        #[arg(long, default_value_t = 1000.0)]
        rate: f64,
    },
    /// Our wakeup and UDP figures beside cyclictest's and sockperf's, same settings.
    Compare {
        /// Samples per measurement (1..=10000000).
        #[arg(long, default_value_t = 10_000)]
        samples: usize,
        /// UDP message sizes, bytes (1..=65507).
        #[arg(long, value_delimiter = ',', default_value = "64")]
        sizes: Vec<usize>,
        /// Make the last line of output one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Check the system's real-time readiness and, on a robot's computer, its SPI and CAN
    /// buses, where interrupts land, and the systemd service and its running loop.
    Doctor {
        /// Make the last line of output one JSON object.
        #[arg(long)]
        json: bool,
        /// The systemd service that runs the robot (NAME.service).
        #[arg(long, value_name = "NAME", default_value = crate::doctor::DEFAULT_SERVICE)]
        service: String,
        /// Examine the machine whose /proc, /sys and /etc are copied under DIR instead of this
        /// one (CAN bit timing is then unknown: netlink answers for this machine only).
        #[arg(long, value_name = "DIR")]
        root: Option<std::path::PathBuf>,
    },
    /// The echo server udp-echo starts in a network namespace (internal).
    #[command(hide = true)]
    UdpEchoServer {
        /// Address to bind, HOST:PORT: loopback, or any address inside one of the lab's own
        /// network namespaces, unless --allow-remote.
        #[arg(long)]
        bind: String,
        /// Receive method: blocking, epoll, busy-poll.
        #[arg(long, default_value = "blocking")]
        method: String,
        /// Serve this long, seconds.
        #[arg(long, default_value_t = 60.0)]
        seconds: f64,
        /// End after this long without a datagram, seconds (it also ends when the process
        /// that started it is gone).
        #[arg(long, default_value_t = crate::udp::SERVER_IDLE_LIMIT.as_secs_f64())]
        idle_seconds: f64,
        /// Also end when process PID is gone (the lab gives its own pid). It always ends when
        /// the parent it started with is gone.
        #[arg(long, value_name = "PID")]
        parent_pid: Option<u32>,
        /// Echo to anyone who can reach BIND, even outside loopback and the lab's namespaces.
        #[arg(long)]
        allow_remote: bool,
    },
}

/// Parse a comma-separated method list with the experiment's own names; each at most once.
fn parse_list<T>(flag: &str, items: &[String]) -> Result<Vec<T>, CheckError>
where
    T: FromStr<Err = CheckError> + PartialEq + Display,
{
    if items.is_empty() {
        return Err(CheckError::EmptyList { flag: flag.to_string(), give: "at least one".into() });
    }
    let parsed = items
        .iter()
        .map(|s| s.trim().parse::<T>().map_err(|e| CheckError::InList { flag: flag.to_string(), source: Box::new(e) }))
        .collect::<Result<Vec<T>, _>>()?;
    check::each_once(flag, &parsed)?;
    Ok(parsed)
}

/// What a lab command produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    /// What to print on stdout (with `--json`, its last line is the JSON object).
    pub text: String,
    /// Why the measurement failed although it ran and its figures are in `text` (e.g. replies
    /// were missing), as one sentence for stderr; the command then exits 1.
    pub failure: Option<String>,
}

impl From<String> for Report {
    fn from(text: String) -> Report {
        Report { text, failure: None }
    }
}

/// Run a lab command and return what to print (with `--json`, its last line is the JSON) and
/// whether the measurement failed. Every flag is checked before anything is measured; an
/// error is one sentence (a flag, or a measurement that could not run).
pub fn run(cmd: LabCommand) -> Result<Report, crate::Error> {
    match cmd {
        LabCommand::Wakeup { common, period_us } => {
            let options = common.options()?;
            check::period_us("--period-us", period_us)?;
            check::busy_wait_us(common.busy_wait_us, period_us)?;
            let outcome = crate::wakeup::wakeup(&options, period_us)?;
            finish(&common, &options, &outcome)
        }
        LabCommand::UdpEcho { common, sizes, methods, netns, port } => {
            let options = common.options()?;
            check::no_busy_wait(common.busy_wait_us, "udp-echo")?;
            let methods = parse_list::<crate::udp::RecvMethod>("--methods", &methods)?;
            check::udp_sizes("--sizes", &sizes)?;
            check::samples_in_all(common.samples, sizes.len() * methods.len(), "--sizes × --methods")?;
            let udp = crate::udp::UdpEchoOptions { sizes, methods, netns, port };
            let outcome = crate::udp::udp_echo(&options, &udp)?;
            finish(&common, &options, &outcome)
        }
        LabCommand::Event { common, methods, processes } => {
            let options = common.options()?;
            check::no_busy_wait(common.busy_wait_us, "event")?;
            let methods = parse_list::<crate::event::EventMethod>("--methods", &methods)?;
            let outcome = crate::event::event(&options, &crate::event::EventOptions { methods, processes })?;
            finish(&common, &options, &outcome)
        }
        LabCommand::Serial { common, methods, size } => {
            let options = common.options()?;
            check::no_busy_wait(common.busy_wait_us, "serial")?;
            let methods = parse_list::<crate::serial::SerialMethod>("--methods", &methods)?;
            check::serial_size("--size", size)?;
            let outcome = crate::serial::serial(&options, &crate::serial::SerialOptions { methods, size })?;
            finish(&common, &options, &outcome)
        }
        LabCommand::Cycle { common, transport, servos, rate } => {
            let options = common.options()?;
            check::rate_hz("--rate", rate)?;
            check::busy_wait_us(common.busy_wait_us, crate::cycle::period_ns(rate) / 1000)?;
            crate::cycle::parse_servo_ids(&servos)?;
            rtloop_io::uri::parse(&transport).map_err(CheckError::Transport)?;
            let outcome = crate::cycle::cycle(&options, &transport, &servos, rate)?;
            finish(&common, &options, &outcome)
        }
        LabCommand::Compare { samples, sizes, json } => {
            crate::compare::compare(&crate::compare::CompareOptions { samples, sizes, json }).map(Report::from)
        }
        LabCommand::Doctor { json, service, root } => {
            check::service_name(&service)?;
            let machine = match root {
                Some(dir) => {
                    check::root_directory(&dir)?;
                    crate::doctor::Machine::at(dir)
                }
                None => crate::doctor::Machine::this(),
            };
            Ok(crate::doctor::run(&machine.with_service(&service), json).into())
        }
        LabCommand::UdpEchoServer { bind, method, seconds, idle_seconds, parent_pid, allow_remote } => {
            let lifetime = crate::udp::ServerLifetime { seconds, idle_seconds, parent_pid };
            crate::udp::serve_echo(&bind, &method, lifetime, allow_remote).map(|_| Report::default())
        }
    }
}

/// Write the CSV and plot when asked, then render the report (notes about the files first,
/// so a JSON line stays last). The files are written for a failed measurement too: they are
/// what a user looks at to see why.
fn finish(args: &CommonArgs, options: &CommonOptions, outcome: &Outcome) -> Result<Report, crate::Error> {
    let mut notes = String::new();
    if let Some(path) = &args.csv {
        write_csv(outcome, path, args.force)?;
        notes.push_str(&format!("raw samples written to {}\n", path.display()));
    }
    if let Some(path) = &args.plot {
        crate::plot::plot(outcome, path, args.force)?;
        notes.push_str(&format!("plot written to {}\n", path.display()));
    }
    let conditions = Conditions::gather(options);
    Ok(Report { text: notes + &render(outcome, &conditions, args.json), failure: outcome.failure.clone() })
}
