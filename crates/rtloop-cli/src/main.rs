//! The `rtloop` command: one user of the `rtloop` library, like the Python package.
//!
//! It parses flags, calls the library (and the latency lab) and prints: every sentence a user
//! reads on the terminal comes from here, every decision from the library. It must never hold
//! what a library user needs (that belongs in `rtloop`), and never print from a cycle.

#![warn(clippy::undocumented_unsafe_blocks)]

mod cli;

use clap::{Args, Parser, Subcommand, ValueEnum};
use cli::console;
use cli::demo::RunFile;
use cli::run::print_summary;
use rtloop::frame::{self, CommandKind, EncodeRequest};
use rtloop::robot_spec::RobotSpec;
use rtloop::Runtime;
use rtloop_io::ServoCommand;
use rtloop_proto::host::PositionCommand;
use rtloop_proto::Resolution;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "rtloop", version, about = "Real-time control of moteus servos over CAN-FD, measured")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Drive the built-in simulated quadruped (12 servos on 4 CAN-FD buses + IMU) from a
    /// periodic loop and report cycle figures.
    ///
    /// Exit status: 0 when every servo answered and the safety policy never engaged (a run
    /// ended by Ctrl-C included); 1 when the run completed but lost servos (one never
    /// answered, or stopped answering), a servo faulted, the safety policy took over, the
    /// --log file is missing messages, or, with --agent, the agent timed out, had commands
    /// refused, spoke another protocol version (or none), exited during a lockstep run, or
    /// never armed a lockstep spine within --agent-wait —
    /// the summary (and --json) still prints, with the reasons under `problems`; 2 for a
    /// usage or setup error (one sentence on stderr, no summary).
    Run(Box<RunArgs>),
    /// Print the cycle-time model ("the spreadsheet") of a robot, term by term; on a simulated
    /// pi3hat, measured beside it.
    ///
    /// The robot: the built-in quadruped, or --config FILE / --bus / --ids as rtloop run takes
    /// them, or --pi3hat (the quadruped on pi3hat:sim connectors JC1-JC4). A robot whose buses
    /// are all on a pi3hat is modelled transaction by transaction on the board's SPI, and, on
    /// pi3hat:sim, measured with the frames rtloop run sends: --cycles cycles at 1 kHz on a
    /// virtual clock (exact simulated time) and on the real clock (plus this host's time).
    /// --seed-case sets the source post's "around 740us" beside the model and the simulation.
    Budget(BudgetArgs),
    /// Build or take apart moteus CAN-FD frames.
    #[command(subcommand)]
    Frame(FrameCommand),
    /// Serve simulated servos behind a pseudo-terminal that speaks the fdcanusb protocol, or
    /// over UDP, until Ctrl-C.
    Sim(SimArgs),
    /// Send one command (with a query) to one servo and print its state, or talk to its
    /// diagnostic console: --console, --dump-config, --restore-config FILE (moteus_tool-like).
    #[command(after_help = DEVICE_EXIT_STATUS)]
    Servo(ServoArgs),
    /// Send and receive raw CAN-FD frames for one cycle or a loop, pi3hat_tool-like; on a
    /// pi3hat also its attitude (--read-att), identity (--info) and CAN configuration
    /// (--can-config).
    #[command(after_help = DEVICE_EXIT_STATUS)]
    Can(CanArgs),
    /// Read TLOG0003 telemetry logs (rtloop's or mjlib's).
    #[command(subcommand)]
    Log(LogCommand),
    /// Measure the machine and the stack: wakeup latency, UDP round trip, event response,
    /// serial turnaround, the full cycle; compare with cyclictest and sockperf; check tuning.
    #[cfg(feature = "lab")]
    #[command(subcommand)]
    Lab(rtloop_lab::cli::LabCommand),
    /// The lab, left out of this build.
    #[cfg(not(feature = "lab"))]
    #[command(hide = true, disable_help_flag = true)]
    Lab {
        /// Whatever was given after `lab`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// What `rtloop lab` says in a build without the `lab` feature.
#[cfg(not(feature = "lab"))]
const WITHOUT_LAB: &str =
    "this rtloop was built without the lab (feature `lab`): rebuild with it, e.g. tools/cross --robot (which keeps it)";

/// The exit status of `rtloop log export`.
const EXPORT_EXIT_STATUS: &str = "Exit status: 0 when the output was written (damage met in a log is \
reported on stderr and in --json, and left out); 1 when a --dataset export was written but skipped a file \
that is not a readable log, or left out damaged parts of a log; 2 when nothing was written (a mistake on \
the command line, an output that exists without --force, a record without items).";

/// The exit status of `rtloop servo` and `rtloop can`.
const DEVICE_EXIT_STATUS: &str = "Exit status: 0 when every expected reply arrived; 1 when the command ran \
but a reply was missing or a bus failed (stderr says which, and what the device said if it refused a frame), \
or the servo's console refused a command or a setting (its ERR text is printed); \
2 when the command line is wrong, a file cannot be read, or a device cannot be opened.";

#[derive(Subcommand)]
enum LogCommand {
    /// Records, schemas, item counts, time span, recovered and corrupt blocks.
    Info {
        /// The log.
        file: std::path::PathBuf,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Items as JSON lines.
    Dump {
        /// The log.
        file: std::path::PathBuf,
        /// Only this record.
        #[arg(long)]
        record: Option<String>,
        /// From this time: seconds from the start of the log (or since the epoch, if ≥ 1e9).
        #[arg(long, allow_negative_numbers = true)]
        from: Option<f64>,
        /// Up to this time.
        #[arg(long, allow_negative_numbers = true)]
        to: Option<f64>,
    },
    /// Flatten a record to CSV, every record to MCAP (Foxglove, PlotJuggler), or records to
    /// Parquet tables (DuckDB, pandas, Polars) — of one log, or of many as one dataset.
    #[command(after_help = EXPORT_EXIT_STATUS)]
    Export {
        /// The log (with --dataset: logs, and directories searched for logs).
        #[arg(required = true, value_name = "FILE")]
        files: Vec<std::path::PathBuf>,
        /// Write CSV here (one row per item of the record).
        #[arg(long, value_name = "OUT")]
        csv: Option<std::path::PathBuf>,
        /// Write MCAP here (one channel per record, JSON messages with a JSON schema).
        #[arg(long, value_name = "OUT")]
        mcap: Option<std::path::PathBuf>,
        /// Write Parquet here: OUT.parquet holds one record (--record, or as for CSV); any
        /// other OUT is a new directory of <record>.parquet, one per record (with --dataset,
        /// OUT/<record>/<run>.parquet).
        #[arg(long, value_name = "OUT")]
        parquet: Option<std::path::PathBuf>,
        /// Export every log given (and every file under each directory given) into one
        /// Parquet dataset, with `robot` and `run` columns.
        #[arg(long)]
        dataset: bool,
        /// The dataset's robot column (default: the name of each log's directory).
        #[arg(long, value_name = "NAME")]
        robot: Option<String>,
        /// The record for CSV and a .parquet file (default: `cycle`, or the only record);
        /// for a Parquet directory or dataset, only this record (default: all).
        #[arg(long)]
        record: Option<String>,
        /// Replace the output if it exists (never the log itself).
        #[arg(long)]
        force: bool,
        /// Also print one JSON object as the last line: rows or messages, skipped blocks and
        /// every problem with counts and offsets.
        #[arg(long)]
        json: bool,
    },
    /// Play a log back to Foxglove clients on the same channels as `rtloop run --foxglove`,
    /// with time control (the app's playback bar: play, pause, seek, speed). Playback starts
    /// once the clients' subscriptions have settled (1 s without a new one).
    Serve {
        /// The log.
        file: std::path::PathBuf,
        /// Serve the Foxglove WebSocket protocol here (loopback unless --allow-remote).
        #[arg(long, value_name = "ADDR", default_value = rtloop::live::foxglove::DEFAULT_ADDRESS)]
        foxglove: String,
        /// Log seconds per second (0.01 to 1000).
        #[arg(long, default_value_t = 1.0)]
        speed: f64,
        /// Send every Nth logged cycle, by its index, as `rtloop run --foxglove-every` does
        /// live (1 … 1000000; default 10). Events are never decimated.
        #[arg(long, value_name = "N", default_value_t = rtloop::config::DEFAULT_LIVE_EVERY)]
        foxglove_every: u32,
        /// Start this many seconds after the log's first item.
        #[arg(long, allow_negative_numbers = true)]
        start: Option<f64>,
        /// End this many seconds after the log's first item.
        #[arg(long, allow_negative_numbers = true)]
        end: Option<f64>,
        /// Start over at the end.
        #[arg(long = "loop")]
        looping: bool,
        /// Exit at the end of the log instead of waiting, paused, for a seek or Ctrl-C.
        #[arg(long)]
        exit_at_end: bool,
        /// Let other machines connect (an address other than loopback).
        #[arg(long)]
        allow_remote: bool,
        /// Print one JSON object at the end.
        #[arg(long)]
        json: bool,
    },
    /// Draw a run with physics from its log with MuJoCo's own renderer (offscreen, headless):
    /// a directory of PNG frames, or an MP4 (OUT ending in .mp4, encoded by ffmpeg).
    Render {
        /// The log (of `rtloop run --physics --log`).
        file: std::path::PathBuf,
        /// A new directory of frame-NNNNNN.png, or an .mp4 file.
        #[arg(short = 'o', long = "out", value_name = "OUT")]
        out: std::path::PathBuf,
        /// Frames per second of log time.
        #[arg(long, default_value_t = 30.0)]
        fps: f64,
        /// Picture size, WIDTHxHEIGHT.
        #[arg(long, default_value = "640x480")]
        size: String,
        /// Camera heading, degrees (90: from the robot's right side, looking along +y).
        #[arg(long, default_value_t = 90.0, allow_negative_numbers = true)]
        azimuth: f64,
        /// Camera elevation, degrees (negative: from above; -90 straight down).
        #[arg(long, default_value_t = -20.0, allow_negative_numbers = true)]
        elevation: f64,
        /// Camera distance, m (default: twice the model's size).
        #[arg(long)]
        distance: Option<f64>,
        /// Follow the IMU's body rather than keep the camera where the body started.
        #[arg(long)]
        track: bool,
        /// From this many seconds after the log's first body item.
        #[arg(long, allow_negative_numbers = true)]
        start: Option<f64>,
        /// Up to this many seconds after it.
        #[arg(long, allow_negative_numbers = true)]
        end: Option<f64>,
        /// Replace OUT if it is an earlier render.
        #[arg(long)]
        force: bool,
    },
    /// Plot fields against time to a PNG.
    Plot {
        /// The log.
        file: std::path::PathBuf,
        /// Comma-separated `record.dotted.path`, e.g. cycle.cycle_us,cycle.servo.0.position.
        #[arg(long)]
        fields: String,
        /// The PNG to write.
        #[arg(long)]
        out: std::path::PathBuf,
        /// Replace the PNG if it exists (never the log itself).
        #[arg(long)]
        force: bool,
        /// Every field on one shared y axis instead of one panel per field.
        #[arg(long)]
        one_axis: bool,
    },
}

#[derive(Args)]
struct BudgetArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// A TOML run configuration or robot file: its [[bus]] tables or [servo_bus_map].
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// A bus of the robot: N=URI, as with rtloop run (repeatable; replaces the file's buses).
    #[arg(long = "bus", value_name = "N=URI")]
    buses: Vec<String>,
    /// Servo ids of bus N, e.g. 1=1,2,3 or 1=1-3 (repeatable).
    #[arg(long = "ids", value_name = "N=LIST")]
    ids: Vec<String>,
    /// The built-in quadruped on a simulated pi3hat: bus N on connector JC N, N = 1-4.
    #[arg(long)]
    pi3hat: bool,
    /// The source post's case: 12 servos on pi3hat buses 1-4, full position command and the
    /// comprehensive query, attitude; model and simulation beside its 740 µs, and the same
    /// for rtloop run's pi3hat frames.
    #[arg(long, conflicts_with_all = ["config", "buses", "ids", "pi3hat"])]
    seed_case: bool,
    /// Cycles to measure on each clock, 0 (the model only) to 100000.
    #[arg(long, value_name = "N", default_value_t = crate::cli::budget::DEFAULT_CYCLES)]
    cycles: u64,
}

#[derive(Args)]
struct SimArgs {
    /// Create a pseudo-terminal speaking the fdcanusb protocol and link it at PATH.
    #[arg(long, value_name = "PATH")]
    fdcanusb: Option<String>,
    /// Serve the fdcanusb frames over UDP at ADDR:PORT instead (loopback unless --allow-remote).
    #[arg(long, value_name = "ADDR:PORT")]
    udp: Option<String>,
    /// Simulated servo ids for --fdcanusb/--udp, e.g. 1,2,3 or 1-3 (default 1).
    #[arg(long, value_name = "LIST")]
    servos: Option<String>,
    /// Several buses: N=fdcanusb:PATH or N=udp:ADDR:PORT (repeatable), with --ids N=LIST.
    #[arg(long = "bus", value_name = "N=URI")]
    buses: Vec<String>,
    /// Servo ids of bus N (repeatable).
    #[arg(long = "ids", value_name = "N=LIST")]
    ids: Vec<String>,
    /// Allow serving UDP on an address other hosts can reach.
    #[arg(long)]
    allow_remote: bool,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long, allow_negative_numbers = true)]
    duration: Option<f64>,
    /// Simulated wires take no time and servos answer at once: measures the clients and the
    /// device path, not CAN-FD physics.
    #[arg(long)]
    no_wire_time: bool,
    /// Spin instead of sleeping between requests (lowest latency, one busy core).
    #[arg(long)]
    busy_poll: bool,
    /// Keep each servo's configuration in DIR/bus<B>-servo<ID>.cfg (ID: the id given here,
    /// even after a stored id.id moves the servo to another one): loaded at start, written
    /// when a client sends `conf write`. DIR must exist. Without it, `conf write` keeps the
    /// configuration in memory only, until the simulator stops.
    #[arg(long, value_name = "DIR")]
    config_dir: Option<std::path::PathBuf>,
}

#[derive(Args)]
struct ServoArgs {
    /// The servo's bus: sim, fdcanusb:PATH, socketcan:IFACE or udp:HOST:PORT.
    #[arg(long, short)]
    transport: String,
    /// Servo id (1-127).
    #[arg(long, default_value_t = 1)]
    id: u8,
    /// What to send (or use --console, --dump-config or --restore-config FILE instead).
    #[arg(value_enum)]
    kind: Option<Kind>,
    /// Talk to the servo's diagnostic console: each line of standard input is a command
    /// (tel, conf, d) and each answer is printed as it comes, ending in OK or ERR (moteus_tool
    /// --console); works from a pipe: printf 'conf get id.id\n' | rtloop servo ... --console.
    #[arg(long)]
    console: bool,
    /// Print the servo's configuration, one `key value` line per item (`conf enumerate`):
    /// the format --restore-config reads.
    #[arg(long)]
    dump_config: bool,
    /// Send `conf set LINE` for each line of FILE that is neither blank nor a # comment, then
    /// store the configuration (`conf write`); lines the servo refused are listed with its ERR
    /// text (exit status 1).
    #[arg(long, value_name = "FILE")]
    restore_config: Option<std::path::PathBuf>,
    #[command(flatten)]
    registers: RegisterArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Repeat as fast as possible and print the achieved rate once a second.
    #[arg(long)]
    run: bool,
    /// With --run: stop after this many seconds (default: until Ctrl-C).
    #[arg(long, allow_negative_numbers = true)]
    duration: Option<f64>,
    /// Reply timeout, ms (above 0, at most 60000); with the console actions, how long each
    /// poll of the console waits for its answer.
    #[arg(long, default_value_t = 100.0, allow_negative_numbers = true)]
    timeout_ms: f64,
    /// Spin while waiting for replies (lowest latency, one busy core).
    #[arg(long)]
    busy_poll: bool,
    /// fdcanusb: append the ` *XX` CRC suffix to our lines (for UART links).
    #[arg(long)]
    crc: bool,
}

#[derive(Args)]
struct CanArgs {
    /// The address of bus 1: sim, fdcanusb:PATH, socketcan:IFACE, udp:HOST:PORT — or a pi3hat
    /// (pi3hat, pi3hat:spidev, pi3hat:mem, pi3hat:sim), whose connectors JC1-JC5 are then every
    /// bus 1-5 used, as pi3hat_tool addresses them.
    #[arg(long, short)]
    transport: Option<String>,
    /// More buses: N=URI (repeatable).
    #[arg(long = "bus", value_name = "N=URI")]
    buses: Vec<String>,
    /// BUS,HEXID,HEXDATA[,r] — send a frame; r: expect a reply (repeatable). On a pi3hat, JC5
    /// is classic CAN: at most 8 data bytes there.
    #[arg(long = "write-can", short = 'c', value_name = "BUS,HEXID,HEXDATA[,r]")]
    write_can: Vec<String>,
    /// Listen on BUS even when no reply is expected (repeatable).
    #[arg(long = "read-can", value_name = "BUS")]
    read_can: Vec<u8>,
    /// pi3hat: read the IMU's attitude in the cycle (waiting for a fresh one) and print
    /// `ATT w=… x=… y=… z=…  dps=(…) a=(…)`.
    #[arg(long = "read-att")]
    read_att: bool,
    /// pi3hat: print each processor's git hash, clean/dirty, serial number and protocol
    /// versions (CAN1:, CAN2:, AUX: lines).
    #[arg(long)]
    info: bool,
    /// pi3hat: configure bus BUS (1-5) with pi3hat_tool's options — rN nominal bit rate (up to
    /// 1000000), RN data bit rate (up to 8000000), d/D CAN-FD off/on, b/B bit rate switch
    /// off/on, t/T automatic retransmission off/on, m/M bus monitor off/on, e.g.
    /// --can-config 1,r1000000,R2000000,D,B (repeatable). Given at all, with or without a
    /// value, every used port's configuration read back is printed (CANCFG lines).
    #[arg(long = "can-config", value_name = "BUS,OPTIONS", num_args = 0..=1)]
    can_config: Option<Vec<String>>,
    /// Loop and print the cycle rate once a second.
    #[arg(long, short)]
    run: bool,
    /// With --run: stop after this many seconds (default: until Ctrl-C).
    #[arg(long, allow_negative_numbers = true)]
    duration: Option<f64>,
    /// With --run: write one line per cycle to FILE, the nanoseconds since the previous cycle
    /// ended (pi3hat_tool's delta-t log). The file must not exist yet.
    #[arg(long = "time-log", value_name = "FILE")]
    time_log: Option<std::path::PathBuf>,
    /// Pin to CPU, run SCHED_RR (priority 10) and lock memory; what the system refuses is a
    /// warning.
    #[arg(long, value_name = "CPU", allow_hyphen_values = true)]
    realtime: Option<String>,
    /// Cycle timeout, ms (above 0, at most 60000; default 20). Or give --can-timeout-ns.
    #[arg(long, allow_negative_numbers = true)]
    timeout_ms: Option<f64>,
    /// Cycle timeout, ns (above 0, at most 10000000000).
    #[arg(long = "can-timeout-ns", value_name = "NS", allow_hyphen_values = true)]
    can_timeout_ns: Option<f64>,
    /// The least time to listen on --read-can buses, ns (0 to 10000000000; default 200000).
    #[arg(long = "can-min-tx-wait-ns", value_name = "NS", allow_hyphen_values = true)]
    can_min_tx_wait_ns: Option<f64>,
    /// How long past the wire-time estimate to wait for missing replies, ns (0 to
    /// 10000000000; default: the timeout).
    #[arg(long = "can-rx-baseline-wait-ns", value_name = "NS", allow_hyphen_values = true)]
    can_rx_baseline_wait_ns: Option<f64>,
    /// Keep listening this long after the last expected reply, ns (0 to 10000000000;
    /// default 0).
    #[arg(long = "can-rx-extra-wait-ns", value_name = "NS", allow_hyphen_values = true)]
    can_rx_extra_wait_ns: Option<f64>,
    /// pi3hat: SPI clock, Hz (100000 to 10000000; default 10000000).
    #[arg(long = "spi-speed-hz", alias = "spi-speed", value_name = "HZ", allow_hyphen_values = true)]
    spi_speed_hz: Option<f64>,
    /// Servo ids to simulate on `sim` and `pi3hat:sim` buses (default: every id written to).
    #[arg(long, value_name = "LIST")]
    sim_servos: Option<String>,
}

#[derive(Args)]
struct RunArgs {
    /// Seconds to run (default 10, or the config's duration_s).
    #[arg(long, allow_negative_numbers = true)]
    duration: Option<f64>,
    /// Loop rate in Hz, 0.1 to 100000 (default 1000, or the config's rate_hz).
    #[arg(long, allow_negative_numbers = true)]
    rate: Option<f64>,
    /// Print the summary as one JSON object on the last line of stdout.
    #[arg(long)]
    json: bool,
    /// No progress line.
    #[arg(long, short)]
    quiet: bool,
    /// Record every cycle (commands, states, IMU, timing, events) to this TLOG0003 file,
    /// written off the real-time thread.
    #[arg(long, value_name = "FILE")]
    log: Option<std::path::PathBuf>,
    /// A TOML run configuration (robot, rate, motion, gains, safety, real-time, faults);
    /// see --print-config. Flags given as well override its values.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Print the configuration that would run (the built-in default, or FILE with the
    /// flags applied) as TOML, and exit.
    #[arg(long)]
    print_config: bool,
    /// A bus of the robot: N=URI (sim, fdcanusb:PATH, socketcan:IFACE, udp:HOST:PORT);
    /// repeatable. Replaces the configured buses.
    #[arg(long = "bus", value_name = "N=URI")]
    buses: Vec<String>,
    /// Servo ids of bus N, e.g. 1=1,2,3 or 1=1-3 (repeatable).
    #[arg(long = "ids", value_name = "N=LIST")]
    ids: Vec<String>,
    /// Scheduling policy of the cycle thread: auto (the default: SCHED_FIFO priority 40,
    /// memory locked and /dev/cpu_dma_latency held where the process may — root,
    /// CAP_SYS_NICE, an rtprio limit — else SCHED_OTHER with one warning; SCHED_OTHER in
    /// lockstep), other, fifo, rr or deadline.
    #[arg(long)]
    policy: Option<String>,
    /// Real-time priority (1-99) for fifo and rr; for auto, 0-99 (0: 40).
    #[arg(long)]
    priority: Option<i32>,
    /// Pin the cycle thread to these CPUs, e.g. 1 or 0,1.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    cpu: Vec<usize>,
    /// Lock all memory (mlockall) so the loop never waits for a page.
    #[arg(long)]
    mlock: bool,
    /// Spin for the last N µs before each deadline instead of sleeping through it (0 to one
    /// period).
    #[arg(long, value_name = "N")]
    busy_wait_us: Option<u64>,
    /// What to do after an overrun: skip (run the late period, skip fully missed ones) or
    /// catch-up (run every missed period back to back).
    #[arg(long)]
    overrun: Option<String>,
    /// Turn every refused real-time request into an error.
    #[arg(long)]
    strict: bool,
    /// Run the control law on its own thread (wait-free rings to the cycle thread).
    #[arg(long)]
    control_thread: bool,
    /// Hold /dev/cpu_dma_latency at 0 µs while the loop runs, as cyclictest does: auto (with
    /// a real-time policy or policy auto, outside lockstep; the default), hold (always) or off.
    #[arg(long, value_name = "MODE")]
    cpu_dma_latency: Option<String>,
    /// When a servo faults or stops answering: stop, zero-velocity or ignore.
    #[arg(long, value_name = "POLICY")]
    on_fault: Option<String>,
    /// The mode the last cycle commands on Ctrl-C / SIGTERM: stop, zero-velocity or brake.
    #[arg(long, value_name = "MODE")]
    shutdown: Option<String>,
    /// When the safe mode ends: latched (the default: for the rest of the run) or auto (after
    /// --recovery-cycles good cycles in a row).
    #[arg(long, value_name = "POLICY")]
    recovery: Option<String>,
    /// With --recovery auto: consecutive cycles with every servo answering, unfaulted and not
    /// timed out, that end the safe mode (1 to 1000000; default 100).
    #[arg(long, value_name = "N")]
    recovery_cycles: Option<u32>,
    /// Simulated buses: servo ID overheats and faults SECONDS after the start (repeatable).
    #[arg(long = "fault", value_name = "ID@SECONDS")]
    faults: Vec<String>,
    /// Simulated buses: probability that a frame is lost on the wire.
    #[arg(long, value_name = "P")]
    drop_rate: Option<f64>,
    /// Simulated buses: probability that a frame is bit-flipped on the wire.
    #[arg(long, value_name = "P")]
    corrupt_rate: Option<f64>,
    /// Simulated buses: extra servo turnaround, µs (0 to 50000: half the late-reply window).
    #[arg(long, value_name = "N")]
    reply_delay_us: Option<u64>,
    /// Simulated buses: seed of the fault generators (each bus derives its own), to repeat a
    /// run; default: random, printed in the summary as injected.seed.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Simulated buses take no wire time and servos answer at once (measures the host).
    #[arg(long)]
    no_wire_time: bool,
    /// Simulated time: each cycle advances the simulated robot by exactly one period, as
    /// fast as the control law (or the --agent) allows; the same inputs give the same log.
    /// Simulated buses only; the fault seed defaults to 0.
    #[arg(long)]
    lockstep: bool,
    /// Simulated buses: put a body under the servos — MuJoCo physics, the built-in quadruped
    /// unless the config's [physics] names a model (docs/physics.md). Needs a build with
    /// `--features physics`.
    #[arg(long)]
    physics: bool,
    /// With --physics: slope of the ground, degrees, as the roll and pitch a robot standing
    /// level on it reads (positive roll: right side down; positive pitch: nose up; -30 … 30).
    #[arg(long, value_name = "ROLL,PITCH", allow_hyphen_values = true)]
    ground_tilt: Option<String>,
    /// With --physics: push the body with FX,FY,FZ newtons (world frame: +x forward, +y
    /// left, +z up) SECONDS after the start, for DURATION seconds (0.1 when not given;
    /// repeatable).
    #[arg(long, value_name = "SECONDS:FX,FY,FZ[:DURATION]")]
    push: Vec<String>,
    /// Follow an agent process instead of the demo motion: publish every cycle's state to
    /// /dev/shm/rtloop-NAME and apply the commands the agent writes there (protocol:
    /// docs/agent-protocol.md; an agent in C: examples/agent.c). Until the agent arms, the
    /// servos are only queried; an agent silent for longer than --agent-timeout-ms gets
    /// --agent-on-timeout until it re-arms.
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// With --agent: how long the agent may go without a new command, ms (1 … 10000).
    #[arg(long, value_name = "MS", default_value_t = 100.0)]
    agent_timeout_ms: f64,
    /// With --agent: what the servos get while the agent has timed out: zero-velocity,
    /// stop or brake.
    #[arg(long, value_name = "MODE", default_value = "zero-velocity")]
    agent_on_timeout: String,
    /// With --agent --lockstep: how long the spine waits, in wall-clock time, for an agent to
    /// arm it (at the start, and after a timeout) before it ends the run, s (0.01 … 86400;
    /// simulated time stands still meanwhile).
    #[arg(long, value_name = "SECONDS", default_value_t = rtloop::agent::DEFAULT_ARM_WAIT_S)]
    agent_wait: f64,
    /// Serve the loop live to Foxglove (WebSocket protocol) on ADDR, 127.0.0.1:8765 when
    /// given alone: open ws://127.0.0.1:8765 in Foxglove. Channels /cycle, /imu, /events,
    /// /bus/B/servo/ID/state and .../command. Another machine's address needs --allow-remote.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = rtloop::live::foxglove::DEFAULT_ADDRESS)]
    foxglove: Option<String>,
    /// Send Foxglove every Nth cycle (1 … 1000000; default 10: 100 Hz at 1 kHz).
    #[arg(long, value_name = "N")]
    foxglove_every: Option<u32>,
    /// Publish the state over zenoh under rtloop/NAME/state/..., events under
    /// rtloop/NAME/events, and take stop, zero_velocity and rearm on rtloop/NAME/cmd. Alone:
    /// peer mode on loopback; CONFIG: a zenoh configuration file (a router, endpoints).
    #[arg(long, value_name = "CONFIG", num_args = 0..=1, default_missing_value = "peer")]
    zenoh: Option<String>,
    /// Publish to zenoh every Nth cycle (1 … 1000000; default 10).
    #[arg(long, value_name = "N")]
    zenoh_every: Option<u32>,
    /// The robot's name in zenoh keys (letters, digits, - and _; default: the host name).
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Let --foxglove listen on, and --zenoh reach, addresses other than loopback.
    #[arg(long)]
    allow_remote: bool,
}

impl RunArgs {
    /// The configuration (the run's, and the demonstration motion's): built-in default, then
    /// the file, then the flags.
    fn config(&self) -> Result<RunFile, String> {
        let mut file = match &self.config {
            Some(path) => read_run_file(path)?,
            None => RunFile::default(),
        };
        let c = &mut file.run;
        if let Some(d) = self.duration {
            c.duration_s = d;
        }
        if let Some(r) = self.rate {
            c.rate_hz = r;
        }
        if !self.buses.is_empty() || !self.ids.is_empty() {
            c.buses = RobotSpec::from_flags(&self.buses, &self.ids).map_err(|e| e.to_string())?.buses;
        }
        let rt = &mut c.realtime;
        if let Some(p) = &self.policy {
            rt.policy = p.clone();
        }
        if let Some(p) = self.priority {
            rt.priority = p;
        }
        if !self.cpu.is_empty() {
            rt.cpus = self.cpu.clone();
        }
        rt.mlock |= self.mlock;
        rt.strict |= self.strict;
        rt.control_thread |= self.control_thread;
        if let Some(b) = self.busy_wait_us {
            rt.busy_wait_us = b;
        }
        if let Some(o) = &self.overrun {
            rt.overrun = o.clone();
        }
        if let Some(p) = &self.on_fault {
            c.safety.on_fault = p.clone();
        }
        if let Some(m) = &self.shutdown {
            c.safety.shutdown = m.clone();
        }
        if let Some(r) = &self.recovery {
            c.safety.recovery = r.clone();
        }
        if let Some(n) = self.recovery_cycles {
            c.safety.recovery_cycles = n;
        }
        if let Some(m) = &self.cpu_dma_latency {
            c.realtime.cpu_dma_latency = m.clone();
        }
        if self.seed.is_some() {
            c.faults.seed = self.seed;
        }
        c.faults.overheat.extend(self.faults.iter().cloned());
        if let Some(p) = self.drop_rate {
            c.faults.drop_rate = p;
        }
        if let Some(p) = self.corrupt_rate {
            c.faults.corrupt_rate = p;
        }
        if let Some(n) = self.reply_delay_us {
            c.faults.reply_delay_us = n;
        }
        if self.no_wire_time {
            c.sim.wire_time = false;
        }
        if self.lockstep {
            c.sim.lockstep = true;
        }
        if self.physics || self.ground_tilt.is_some() {
            let physics = c.physics.get_or_insert_with(Default::default);
            if let Some(tilt) = &self.ground_tilt {
                let parsed =
                    tilt.split_once(',').and_then(|(r, p)| Some((r.trim().parse().ok()?, p.trim().parse().ok()?)));
                // Unparseable: NaN, which the range check refuses with its sentence.
                (physics.ground_roll_deg, physics.ground_pitch_deg) = parsed.unwrap_or((f64::NAN, f64::NAN));
            }
        }
        for push in &self.push {
            c.faults.push.push(rtloop::physics::parse_push(push).map_err(|e| e.to_string())?);
        }
        let live = &mut c.live;
        if let Some(a) = &self.foxglove {
            live.foxglove = Some(a.clone());
        }
        if let Some(n) = self.foxglove_every {
            live.foxglove_every = n;
        }
        if let Some(z) = &self.zenoh {
            live.zenoh = Some(z.clone());
        }
        if let Some(n) = self.zenoh_every {
            live.zenoh_every = n;
        }
        if let Some(n) = &self.name {
            live.name = Some(n.clone());
        }
        live.allow_remote |= self.allow_remote;
        c.validate_flags().map_err(|e| e.to_string())?;
        Ok(file)
    }
}

/// A run file (`--config FILE` of `rtloop run` and `rtloop budget`).
fn read_run_file(path: &std::path::Path) -> Result<RunFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read --config {}: {e}", path.display()))?;
    let mut file = RunFile::from_toml(&text).map_err(|e| format!("--config {}: {e}", path.display()))?;
    // Paths in the file are relative to the file's folder.
    file.run = file.run.relative_to(path.parent().unwrap_or(std::path::Path::new(".")));
    Ok(file)
}

#[derive(Subcommand)]
enum FrameCommand {
    /// Print `HEXID HEXDATA` as the moteus Python package would send it (before padding).
    Encode(EncodeArgs),
    /// Print the subframes and registers of a payload as JSON.
    Decode {
        /// The payload in hex, e.g. 2404000A00881300000000230D301900.
        hexdata: String,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Kind {
    Position,
    Query,
    Stop,
    ZeroVelocity,
}

#[derive(Clone, Copy, ValueEnum)]
enum Res {
    Int8,
    Int16,
    Int32,
    Float,
}

/// The position-mode registers a command can carry.
#[derive(Args, Clone, Default)]
struct RegisterArgs {
    /// Position, rev (NaN = hold).
    #[arg(long, allow_negative_numbers = true)]
    position: Option<f64>,
    /// Velocity, rev/s.
    #[arg(long, allow_negative_numbers = true)]
    velocity: Option<f64>,
    /// Feedforward torque, N·m.
    #[arg(long, allow_negative_numbers = true)]
    feedforward_torque: Option<f64>,
    /// Scale of the configured kp.
    #[arg(long, allow_negative_numbers = true)]
    kp_scale: Option<f64>,
    /// Scale of the configured kd.
    #[arg(long, allow_negative_numbers = true)]
    kd_scale: Option<f64>,
    /// Torque limit, N·m.
    #[arg(long, allow_negative_numbers = true)]
    maximum_torque: Option<f64>,
    /// Watchdog timeout for this command, s: 0 (the servo's default) or 0.01 to 10; `frame encode`
    /// also encodes NaN ("none"), which `servo` refuses: it never leaves a servo without one.
    #[arg(long, allow_negative_numbers = true)]
    watchdog_timeout: Option<f64>,
    /// Velocity limit, rev/s.
    #[arg(long, allow_negative_numbers = true)]
    velocity_limit: Option<f64>,
    /// Acceleration limit, rev/s².
    #[arg(long, allow_negative_numbers = true)]
    accel_limit: Option<f64>,
}

impl RegisterArgs {
    fn command(&self) -> PositionCommand {
        PositionCommand {
            position: self.position,
            velocity: self.velocity,
            feedforward_torque: self.feedforward_torque,
            kp_scale: self.kp_scale,
            kd_scale: self.kd_scale,
            maximum_torque: self.maximum_torque,
            watchdog_timeout: self.watchdog_timeout,
            velocity_limit: self.velocity_limit,
            accel_limit: self.accel_limit,
            ..Default::default()
        }
    }
}

#[derive(Args)]
struct EncodeArgs {
    /// Which command.
    #[arg(value_enum)]
    kind: Kind,
    /// Servo id (1-127).
    #[arg(long, default_value_t = 1)]
    id: u8,
    #[command(flatten)]
    registers: RegisterArgs,
    /// Append the default query and ask for a reply.
    #[arg(long)]
    query: bool,
    /// Resolution of the command's registers (the query keeps its default resolution).
    #[arg(long, value_enum)]
    resolution: Option<Res>,
}

/// The command line, every option that takes a number accepting a negative one as the docs
/// write it (`--position -0.1`, not only `--position=-0.1`): clap otherwise reads `-0.1` as a
/// flag, and says "unexpected argument".
fn cli_command() -> clap::Command {
    signed_numbers(<Cli as clap::CommandFactory>::command())
}

fn signed_numbers(cmd: clap::Command) -> clap::Command {
    use std::any::TypeId;
    let numeric = [
        TypeId::of::<f64>(),
        TypeId::of::<f32>(),
        TypeId::of::<i64>(),
        TypeId::of::<i32>(),
        TypeId::of::<i16>(),
        TypeId::of::<i8>(),
    ];
    let ids: Vec<clap::Id> = cmd
        .get_arguments()
        .filter(|a| {
            let t = a.get_value_parser().type_id();
            a.get_action().takes_values() && numeric.iter().any(|n| t == *n)
        })
        .map(|a| a.get_id().clone())
        .collect();
    let names: Vec<String> = cmd.get_subcommands().map(|c| c.get_name().to_string()).collect();
    let mut cmd = cmd;
    for id in ids {
        cmd = cmd.mut_arg(id, |a| a.allow_negative_numbers(true));
    }
    for name in names {
        cmd = cmd.mut_subcommand(name, signed_numbers);
    }
    cmd
}

fn main() -> ExitCode {
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&cli_command().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match dispatch(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            console::note(format!("rtloop: {msg}"));
            ExitCode::from(2)
        }
    }
}

/// Print what `servo` or `can` has to say; when something it expected failed, say so on
/// stderr and exit with status 1 (2 stays for command-line mistakes, through `main`).
fn finish_device_command(outcome: crate::cli::servo::Outcome) -> Result<(), String> {
    use std::io::Write;
    if !outcome.stdout.is_empty() {
        console::line(&outcome.stdout)?;
    }
    let Some(failure) = outcome.failure else { return Ok(()) };
    let _ = std::io::stdout().flush();
    console::note(format!("rtloop: {failure}"));
    std::process::exit(i32::from(crate::cli::servo::EXIT_DEVICE_FAILED))
}

/// `rtloop run --agent NAME`: the spine follows an agent process.
fn run_agent(
    runtime: Runtime,
    config: &rtloop::config::RunConfig,
    name: &str,
    timeout_ms: f64,
    on_timeout: &str,
    arm_wait_s: f64,
) -> Result<rtloop::RunSummary, String> {
    use rtloop::agent::{AgentOptions, AgentSpine};
    let mut options = AgentOptions::new(name);
    options.timeout_s = timeout_ms * 1e-3;
    options.on_timeout = rtloop::config::parse_shutdown(on_timeout)
        .map_err(|_| format!("--agent-on-timeout {on_timeout}: give zero-velocity, stop or brake"))?;
    options.lockstep = config.sim.lockstep;
    options.arm_wait_s = arm_wait_s;
    options.watchdog_timeout_s = config.gains.watchdog_timeout_s;
    options.limits.max_torque = config.gains.maximum_torque;
    if !(timeout_ms.is_finite() && (1.0..=10_000.0).contains(&timeout_ms)) {
        return Err(format!("--agent-timeout-ms {timeout_ms} is out of range: give 1 to 10000 ms"));
    }
    let robot = config.robot();
    let servos: Vec<(u8, u8)> = robot.buses.iter().flat_map(|b| b.servos.iter().map(move |&id| (id, b.bus))).collect();
    let (mut spine, figures, warning) =
        AgentSpine::create(options, &servos, config.rate_hz).map_err(|e| rtloop_output::sentence(&e))?;
    if let Some(w) = warning {
        console::note(format!("rtloop run: warning: {w}"));
    }
    // Said when the run starts, once the runtime has checked every setting (a --log that
    // exists, …): a mistake is then the only line printed.
    let announcement = format!(
        "rtloop run: waiting for agent '{name}' on {} (it arms by echoing the arm token){}",
        rtloop::agent::segment_path(name).display(),
        if config.sim.lockstep {
            format!("; lockstep: simulated time waits for it, at most {arm_wait_s} s to be armed (--agent-wait)")
        } else {
            String::new()
        }
    );
    spine.on_start(move || console::note(announcement));
    let mut summary = runtime.run(spine).map_err(|e| rtloop_output::sentence(&e))?;
    summary.agent = Some(figures.summary());
    Ok(summary)
}

/// Run one subcommand; a usage or setup error is the one sentence `main` prints (exit 2).
fn dispatch(cmd: Command) -> Result<(), String> {
    match cmd {
        Command::Run(a) => run_command(&a),
        Command::Budget(a) => budget_command(&a),
        Command::Frame(FrameCommand::Encode(a)) => frame_encode_command(&a),
        Command::Sim(a) => sim_command(a),
        Command::Servo(a) => servo_command(&a),
        Command::Can(a) => can_command(&a),
        #[cfg(feature = "lab")]
        Command::Lab(cmd) => lab_command(cmd),
        #[cfg(not(feature = "lab"))]
        Command::Lab { .. } => Err(WITHOUT_LAB.into()),
        Command::Log(cmd) => log_command(cmd),
        Command::Frame(FrameCommand::Decode { hexdata }) => {
            console::line(frame::decode(&hexdata).map_err(|e| e.to_string())?)
        }
    }
}

/// `rtloop run`: the demonstration motion or an agent, then the summary.
fn run_command(a: &RunArgs) -> Result<(), String> {
    // Before anything is created (an agent segment, a physics model): a signal from now on
    // ends the run cleanly, with its summary.
    rtloop::signals::install();
    let file = a.config()?;
    if a.print_config {
        return console::text(file.to_toml());
    }
    let config = file.run;
    let mut runtime = Runtime::from_config(config.clone()).on_notice(cli::run::print_notice);
    if !a.quiet {
        runtime = runtime.progress_every(cli::run::progress_interval());
    }
    if let Some(log) = &a.log {
        runtime = runtime.log(log);
    }
    let summary = match &a.agent {
        Some(name) => run_agent(runtime, &config, name, a.agent_timeout_ms, &a.agent_on_timeout, a.agent_wait)?,
        // The demonstration motion is a controller like any other.
        None => runtime.run(file.motion.motion(&config)).map_err(|e| rtloop_output::sentence(&e))?,
    };
    let mut out = std::io::stdout().lock();
    console::tolerate_closed_reader(print_summary(&summary, &mut out))?;
    use std::io::Write;
    if a.json {
        let line = serde_json::to_string(&summary).map_err(|e| e.to_string())?;
        console::tolerate_closed_reader(writeln!(out, "{line}"))?;
    }
    let code = summary.exit_code();
    if code != 0 {
        // A completed run that lost servos or engaged its safety policy: the summary is
        // out; the exit status says it (see `rtloop run --help`).
        console::tolerate_closed_reader(out.flush())?;
        let first = summary.problems.first().map_or("the run was degraded", String::as_str);
        match summary.problems.len() {
            0 | 1 => console::note(format!("rtloop run: {first}")),
            2 => console::note(format!("rtloop run: {first}; and 1 more problem (see the summary)")),
            n => console::note(format!("rtloop run: {first}; and {} more problems (see the summary)", n - 1)),
        }
        std::process::exit(code.into());
    }
    Ok(())
}

/// `rtloop budget`: the cycle-time model of a robot, measured beside it on a simulated pi3hat.
fn budget_command(a: &BudgetArgs) -> Result<(), String> {
    let from_file = match &a.config {
        Some(path) => Some(read_run_file(path)?.run.robot()),
        None => None,
    };
    let robot = crate::cli::budget::robot_from_args(from_file, &a.buses, &a.ids, a.pi3hat)?;
    let request = crate::cli::budget::BudgetRequest { robot, cycles: a.cycles, seed_case: a.seed_case, json: a.json };
    console::line(crate::cli::budget::run(&request)?)
}

/// `rtloop frame encode`.
fn frame_encode_command(a: &EncodeArgs) -> Result<(), String> {
    let kind = match a.kind {
        Kind::Position => CommandKind::Position,
        Kind::Query => CommandKind::Query,
        Kind::Stop => CommandKind::Stop,
        Kind::ZeroVelocity => CommandKind::ZeroVelocity,
    };
    let req = EncodeRequest {
        id: a.id,
        command: a.registers.command(),
        query: a.query,
        resolution: a.resolution.map(|r| match r {
            Res::Int8 => Resolution::Int8,
            Res::Int16 => Resolution::Int16,
            Res::Int32 => Resolution::Int32,
            Res::Float => Resolution::Float,
        }),
    };
    console::line(frame::encode(kind, &req).map_err(|e| e.to_string())?)
}

/// `rtloop sim`: serve simulated servos until Ctrl-C.
fn sim_command(a: SimArgs) -> Result<(), String> {
    let buses = rtloop::sim_buses::plan(a.fdcanusb.as_deref(), a.udp.as_deref(), a.servos.as_deref(), &a.buses, &a.ids)
        .map_err(|e| e.to_string())?;
    let text = crate::cli::sim::run(&rtloop::sim_buses::SimRequest {
        buses,
        allow_remote: a.allow_remote,
        duration_s: a.duration,
        no_wire_time: a.no_wire_time,
        busy_poll: a.busy_poll,
        config_dir: a.config_dir,
    })?;
    console::line(text)
}

/// `rtloop servo`: one command to one servo, or its diagnostic console.
fn servo_command(a: &ServoArgs) -> Result<(), String> {
    let uri = rtloop_io::uri::parse(&a.transport).map_err(|e| format!("--transport {}: {e}", a.transport))?;
    if a.id == 0 || a.id > 127 {
        return Err(format!("--id {} is not a servo id: give a number from 1 to 127", a.id));
    }
    use crate::cli::diag::{DiagAction, DiagRequest};
    let mut actions = Vec::new();
    if a.console {
        actions.push(DiagAction::Console);
    }
    if a.dump_config {
        actions.push(DiagAction::DumpConfig);
    }
    if let Some(file) = &a.restore_config {
        actions.push(DiagAction::RestoreConfig(file.clone()));
    }
    let kind = match (a.kind, actions.len()) {
        (Some(_), 1..) | (None, 2..) => {
            return Err("give one action: query, position, stop, zero-velocity, --console, --dump-config or --restore-config FILE".into())
        }
        (None, 0) => {
            return Err("nothing to do: give query, position, stop or zero-velocity, or --console, --dump-config or --restore-config FILE".into())
        }
        (Some(kind), 0) => kind,
        (None, _) => {
            if a.registers.command() != PositionCommand::default() {
                return Err("register flags (--position, --velocity, …) only apply to `position`".into());
            }
            if a.run || a.duration.is_some() || a.json || a.busy_poll {
                return Err("--run, --duration, --json and --busy-poll apply to query, position, stop and zero-velocity, not to the console actions".into());
            }
            if a.id == 127 {
                return Err("--id 127 is the broadcast address, which has no console: give the servo's own id (1-126)".into());
            }
            let req = DiagRequest {
                uri,
                id: a.id,
                action: actions.remove(0),
                timeout_ms: a.timeout_ms,
                crc: a.crc,
            };
            return finish_device_command(crate::cli::diag::run(&req)?);
        }
    };
    let command = match kind {
        Kind::Position => ServoCommand::Position(a.registers.command()),
        _ if a.registers.command() != PositionCommand::default() => {
            return Err("register flags (--position, --velocity, …) only apply to `position`".into())
        }
        Kind::Query => ServoCommand::Query,
        Kind::Stop => ServoCommand::Stop,
        Kind::ZeroVelocity => ServoCommand::ZeroVelocity,
    };
    let req = crate::cli::servo::ServoRequest {
        uri,
        id: a.id,
        command,
        run: a.run,
        duration_s: a.duration,
        timeout_ms: a.timeout_ms,
        json: a.json,
        busy_poll: a.busy_poll,
        crc: a.crc,
    };
    finish_device_command(crate::cli::servo::run(&req)?)
}

/// `rtloop can`: raw CAN-FD frames, pi3hat_tool-like.
fn can_command(a: &CanArgs) -> Result<(), String> {
    let transport = a
        .transport
        .as_deref()
        .map(|t| rtloop_io::uri::parse(t).map_err(|e| format!("--transport {t}: {e}")))
        .transpose()?;
    let mut buses = std::collections::BTreeMap::new();
    for b in &a.buses {
        let (n, uri) = rtloop::robot_spec::parse_bus_flag(b).map_err(|e| e.to_string())?;
        if buses.insert(n, uri).is_some() {
            return Err(format!("bus {n} is given twice"));
        }
    }
    let writes = a.write_can.iter().map(|w| crate::cli::can::parse_write_can(w)).collect::<Result<Vec<_>, _>>()?;
    let req = crate::cli::can::CanRequest {
        transport,
        buses,
        writes,
        reads: a.read_can.clone(),
        run: a.run,
        duration_s: a.duration,
        timeout_ms: a.timeout_ms,
        sim_servos: a.sim_servos.clone(),
        read_att: a.read_att,
        info: a.info,
        can_config: a.can_config.clone(),
        time_log: a.time_log.clone(),
        realtime: a.realtime.clone(),
        timing: crate::cli::can::TimingFlags {
            timeout_ns: a.can_timeout_ns,
            min_tx_wait_ns: a.can_min_tx_wait_ns,
            rx_baseline_wait_ns: a.can_rx_baseline_wait_ns,
            rx_extra_wait_ns: a.can_rx_extra_wait_ns,
        },
        spi_speed_hz: a.spi_speed_hz,
    };
    finish_device_command(crate::cli::can::run(&req)?)
}

/// `rtloop lab`: measure the machine and the stack.
#[cfg(feature = "lab")]
fn lab_command(cmd: rtloop_lab::cli::LabCommand) -> Result<(), String> {
    let report = rtloop_lab::cli::run(cmd).map_err(|e| rtloop_output::sentence(&e))?;
    // The JSON object, when asked for, must be the very last line.
    let text = report.text.trim_end();
    if !text.is_empty() {
        console::line(text)?;
    }
    if let Some(failure) = report.failure {
        // A measurement that ran but failed (replies missing): figures printed, exit 1.
        console::note(format!("rtloop lab: {failure}"));
        std::process::exit(1);
    }
    Ok(())
}

/// `rtloop log`: read TLOG0003 logs.
fn log_command(cmd: LogCommand) -> Result<(), String> {
    use crate::cli::log as log_cmd;
    let (what, outcome) = match cmd {
        LogCommand::Info { file, json } => {
            ("info", log_cmd::Outcome { text: log_cmd::info(&file, json)?, ..Default::default() })
        }
        LogCommand::Dump { file, record, from, to } => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let outcome = log_cmd::dump(&file, record.as_deref(), from, to, &mut out)?;
            drop(out);
            ("dump", outcome)
        }
        LogCommand::Export { files, csv, mcap, parquet, dataset, robot, record, force, json } => {
            let request = log_cmd::ExportRequest {
                files: &files,
                csv: csv.as_deref(),
                mcap: mcap.as_deref(),
                parquet: parquet.as_deref(),
                dataset,
                robot: robot.as_deref(),
                record: record.as_deref(),
                force,
                json,
            };
            ("export", log_cmd::export(&request)?)
        }
        LogCommand::Serve {
            file,
            foxglove,
            speed,
            foxglove_every,
            start,
            end,
            looping,
            exit_at_end,
            allow_remote,
            json,
        } => {
            let opts =
                log_cmd::ServeArgs { foxglove, speed, foxglove_every, start, end, looping, exit_at_end, allow_remote };
            ("serve", log_cmd::serve(&file, &opts, json)?)
        }
        LogCommand::Render { file, out, fps, size, azimuth, elevation, distance, track, start, end, force } => {
            let args = log_cmd::RenderArgs { fps, size, azimuth, elevation, distance, track, start, end, force };
            ("render", log_cmd::render(&file, &out, &args)?)
        }
        LogCommand::Plot { file, fields, out, force, one_axis } => {
            ("plot", log_cmd::plot(&file, &fields, &out, force, one_axis)?)
        }
    };
    for warning in &outcome.warnings {
        console::note(format!("rtloop log {what}: warning: {warning}"));
    }
    if !outcome.text.is_empty() {
        console::line(&outcome.text)?;
    }
    if let (Some(incomplete), None) = (&outcome.incomplete, &outcome.failure) {
        // Done, but something was left out (a dataset skipped a file): exit 1.
        console::note(format!("rtloop log {what}: {incomplete}"));
        std::process::exit(1);
    }
    // A failure that still printed its report (export --json): exit 2 all the same.
    outcome.failure.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every option of every command that takes a signed number accepts a negative one as
    /// the docs write it, separated by a space (clap alone reads `--ground-tilt -5,0` as a flag and says
    /// "unexpected argument '-5'").
    #[test]
    fn every_signed_number_option_takes_a_negative_value() {
        use std::any::TypeId;
        fn walk(cmd: &clap::Command, path: &mut Vec<String>, checked: &mut usize) {
            let signed = [TypeId::of::<f64>(), TypeId::of::<f32>(), TypeId::of::<i64>(), TypeId::of::<i32>()];
            for a in cmd.get_arguments() {
                let Some(long) = a.get_long() else { continue };
                let t = a.get_value_parser().type_id();
                if !a.get_action().takes_values() || !signed.iter().any(|s| t == *s) {
                    continue;
                }
                let mut argv: Vec<String> = vec!["rtloop".into()];
                argv.extend(path.iter().cloned());
                argv.push(format!("--{long}"));
                argv.push("-5".into());
                let r = cli_command().try_get_matches_from(&argv);
                if let Err(e) = &r {
                    assert!(!matches!(e.kind(), clap::error::ErrorKind::UnknownArgument), "{}: {e}", argv.join(" "));
                }
                *checked += 1;
            }
            for sub in cmd.get_subcommands() {
                path.push(sub.get_name().to_string());
                walk(sub, path, checked);
                path.pop();
            }
        }
        let mut checked = 0;
        walk(&cli_command(), &mut Vec::new(), &mut checked);
        assert!(checked > 20, "only {checked} signed options found");
        // Lists of signed numbers.
        let m = cli_command().try_get_matches_from(["rtloop", "run", "--ground-tilt", "-5,0", "--duration", "1"]);
        assert!(m.is_ok(), "{:?}", m.err().map(|e| e.to_string()));
        let m = cli_command().try_get_matches_from(["rtloop", "run", "--push", "1:-100,0,0", "--lockstep"]);
        assert!(m.is_ok(), "{:?}", m.err().map(|e| e.to_string()));
    }
}
