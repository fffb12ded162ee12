//! The `rtloop` command.

use clap::{Args, Parser, Subcommand, ValueEnum};
use proto::host::PositionCommand;
use proto::Resolution;
use rtloop::frame_cmd::{self, CommandKind, EncodeRequest};
use rtloop::run::{self, RunOptions};
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
    Run(RunArgs),
    /// Print the cycle-time model ("the spreadsheet") for the built-in robot, term by term.
    Budget {
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Build or take apart moteus CAN-FD frames.
    #[command(subcommand)]
    Frame(FrameCommand),
}

#[derive(Args)]
struct RunArgs {
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0, allow_negative_numbers = true)]
    duration: f64,
    /// Loop rate in Hz.
    #[arg(long, default_value_t = 1000.0, allow_negative_numbers = true)]
    rate: f64,
    /// Print the summary as one JSON object on the last line of stdout.
    #[arg(long)]
    json: bool,
    /// No progress line.
    #[arg(long, short)]
    quiet: bool,
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

#[derive(Args)]
struct EncodeArgs {
    /// Which command.
    #[arg(value_enum)]
    kind: Kind,
    /// Servo id (1-127).
    #[arg(long, default_value_t = 1)]
    id: u8,
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
    /// Watchdog timeout for this command, s (0 = servo default, NaN = none).
    #[arg(long, allow_negative_numbers = true)]
    watchdog_timeout: Option<f64>,
    /// Velocity limit, rev/s.
    #[arg(long, allow_negative_numbers = true)]
    velocity_limit: Option<f64>,
    /// Acceleration limit, rev/s².
    #[arg(long, allow_negative_numbers = true)]
    accel_limit: Option<f64>,
    /// Append the default query and ask for a reply.
    #[arg(long)]
    query: bool,
    /// Resolution of the command's registers (the query keeps its default resolution).
    #[arg(long, value_enum)]
    resolution: Option<Res>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("rtloop: {msg}");
            ExitCode::from(2)
        }
    }
}

fn dispatch(cmd: Command) -> Result<(), String> {
    match cmd {
        Command::Run(a) => {
            let opts = RunOptions { duration_s: a.duration, rate_hz: a.rate, progress: !a.quiet };
            let summary = run::run(&opts)?;
            let mut out = std::io::stdout().lock();
            run::print_summary(&summary, &mut out).map_err(|e| e.to_string())?;
            if a.json {
                use std::io::Write;
                let line = serde_json::to_string(&summary).map_err(|e| e.to_string())?;
                writeln!(out, "{line}").map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        Command::Budget { json } => {
            let text = if json { rtloop::budget::render_json() } else { rtloop::budget::render_table() };
            println!("{text}");
            Ok(())
        }
        Command::Frame(FrameCommand::Encode(a)) => {
            let kind = match a.kind {
                Kind::Position => CommandKind::Position,
                Kind::Query => CommandKind::Query,
                Kind::Stop => CommandKind::Stop,
                Kind::ZeroVelocity => CommandKind::ZeroVelocity,
            };
            let req = EncodeRequest {
                id: a.id,
                command: PositionCommand {
                    position: a.position,
                    velocity: a.velocity,
                    feedforward_torque: a.feedforward_torque,
                    kp_scale: a.kp_scale,
                    kd_scale: a.kd_scale,
                    maximum_torque: a.maximum_torque,
                    watchdog_timeout: a.watchdog_timeout,
                    velocity_limit: a.velocity_limit,
                    accel_limit: a.accel_limit,
                    ..Default::default()
                },
                query: a.query,
                resolution: a.resolution.map(|r| match r {
                    Res::Int8 => Resolution::Int8,
                    Res::Int16 => Resolution::Int16,
                    Res::Int32 => Resolution::Int32,
                    Res::Float => Resolution::Float,
                }),
            };
            println!("{}", frame_cmd::encode(kind, &req)?);
            Ok(())
        }
        Command::Frame(FrameCommand::Decode { hexdata }) => {
            let j = frame_cmd::decode(&hexdata)?;
            println!("{j}");
            Ok(())
        }
    }
}
