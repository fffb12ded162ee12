//! Why a lab command could not measure: [`Error`], one sentence for the user per variant,
//! with the data (paths, addresses, methods) kept in fields.
//!
//! Refused flags are a [`CheckError`](crate::check::CheckError), wrapped here as
//! [`Error::Check`]: they are found before anything is measured.
//!
//! An error that wraps another (the operating system's, a bus's, a refused flag's) returns it
//! from `source()` and says only what failed: [`rtloop_output::sentence`] gives the whole line,
//! as the command prints it. A variant that adds nothing to what it wraps shows that error's
//! sentence as its own; one whose cause sits inside the sentence keeps it there.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitStatus;

pub use crate::check::CheckError;

/// Why a lab experiment, report or server failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A flag or argument refused before anything was measured.
    #[error("{0}")]
    Check(#[from] CheckError),
    /// The real-time settings could not be applied (or `--strict` refused a fallback).
    #[error("{0}")]
    Rt(#[from] rtloop_rt::setup::RtError),
    /// The bus could not be opened (the sentence names the address and what to do).
    #[error("{0}")]
    Open(#[from] rtloop_io::OpenError),
    /// The simulated quadruped could not be built.
    #[error("cannot build the simulated quadruped")]
    Quadruped(#[source] rtloop_io::SetupError),
    /// The robot could not be built on the bus.
    #[error("cannot build the robot on {transport}")]
    Robot {
        /// The `--transport` address.
        transport: String,
        /// Why.
        source: rtloop_io::SetupError,
    },
    /// An operating-system call failed; `what` says which and on what (e.g. "eventfd failed",
    /// "cannot bind the echo server to 127.0.0.1:9000").
    #[error("{what}")]
    Os {
        /// The call and its object.
        what: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A call through `nix` failed; as [`Error::Os`].
    #[error("{what}")]
    Sys {
        /// The call and its object.
        what: String,
        /// The errno.
        source: nix::Error,
    },
    /// An operating-system error with nothing to add.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A thread of the lab panicked (`thread` names it, e.g. "raiser thread").
    #[error("the {thread} panicked")]
    Panicked {
        /// Which thread.
        thread: &'static str,
    },
    /// SIGINT or SIGTERM arrived during the measurement.
    #[error("interrupted")]
    Interrupted,
    /// A descriptor-based event method found no descriptor (a bug).
    #[error("no descriptor")]
    NoDescriptor,
    /// The other side of the event channel closed it.
    #[error("the other side closed the channel")]
    ChannelClosed,
    /// The event responder did not answer in time.
    #[error("event {method}: no answer from the responder within {ms} ms")]
    NoAnswer {
        /// The event method.
        method: crate::methods::EventMethod,
        /// How long the raiser waited.
        ms: i32,
    },
    /// The responder (thread or process) could not take its real-time settings under
    /// `--strict`; `process` tells which.
    #[error("the responder{}'s real-time setup was refused (strict)", if *.process { " process" } else { "" })]
    ResponderRtRefused {
        /// The responder was a process (`--processes`).
        process: bool,
    },
    /// Waiting for the responder process failed.
    #[error("waiting for the responder process failed")]
    ResponderWaitFailed,
    /// The responder process ended in a way it never does by itself.
    #[error("the responder process ended abnormally (wait status {status:#x})")]
    ResponderAbnormal {
        /// Its wait status.
        status: i32,
    },
    /// The other side of the pseudo-terminal closed.
    #[error("the other side of the pty closed")]
    PtyClosed,
    /// No serial echo arrived in time.
    #[error("no echo within {ms} ms ({method})")]
    NoEcho {
        /// The wait method (`epoll`, `busy-poll`).
        method: &'static str,
        /// How long it waited.
        ms: u64,
    },
    /// A serial echo came back different.
    #[error("serial {method}: the echo of message {index} differs from what was sent")]
    EchoDiffers {
        /// The serial method.
        method: crate::methods::SerialMethod,
        /// Which message.
        index: usize,
    },
    /// The UDP echo server thread ended before it bound its socket.
    #[error("the echo server thread ended before binding")]
    EchoServerGone,
    /// The UDP echo server thread ended before the measurement.
    #[error("the echo server thread ended early")]
    EchoServerEnded,
    /// The UDP echo server process ended before the measurement.
    #[error("the echo server process exited early ({status})")]
    EchoServerExited {
        /// How it ended.
        status: ExitStatus,
    },
    /// The UDP echo server never answered its probe.
    #[error("the echo server at {addr} did not answer within {secs} s")]
    EchoServerSilent {
        /// Its address.
        addr: SocketAddr,
        /// How long the probe tried.
        secs: u64,
    },
    /// No echo of a UDP message arrived in time.
    #[error("no echo of a {size} B message within {secs} s (lost datagram or dead server)")]
    NoUdpEcho {
        /// The message size.
        size: usize,
        /// How long the client waited.
        secs: u64,
    },
    /// The lab would have sent outside loopback and its own namespaces (a bug).
    #[error("refusing to send to {ip}: udp-echo only talks to loopback or its own namespace")]
    RefusedTarget {
        /// The destination.
        ip: IpAddr,
    },
    /// `--netns` without root.
    #[error(
        "--netns creates a network namespace and a veth pair, which needs root: run as root (sudo) or drop --netns"
    )]
    NetnsNeedsRoot,
    /// `--netns` without the `ip` command.
    #[error("--netns needs the `ip` command (apt-get install iproute2), or drop --netns")]
    NoIpCommand,
    /// The network namespace could not be created. The advice follows the cause, which
    /// therefore stays inside the sentence, its own causes included.
    #[error(
        "cannot create network namespace {name}: {} — run as root or drop --netns",
        rtloop_output::sentence(.source.as_ref())
    )]
    CreateNamespace {
        /// The namespace.
        name: String,
        /// Why.
        source: Box<Error>,
    },
    /// An `ip` command failed.
    #[error("`ip {}` failed: {stderr}", .args.join(" "))]
    IpFailed {
        /// Its arguments.
        args: Vec<String>,
        /// What it printed on stderr, trimmed.
        stderr: String,
    },
    /// Every 10.200.x.0/30 subnet is taken.
    #[error("no free 10.200.x.0/30 subnet for the veth pair")]
    NoFreeSubnet,
    /// A tool `compare` runs is not installed (`hint` is the sentence naming the package).
    #[error("{hint}")]
    ToolMissing {
        /// The tool.
        tool: &'static str,
        /// "TOOL is not installed: apt-get install PACKAGE".
        hint: &'static str,
    },
    /// A tool `compare` runs failed.
    #[error("{tool} failed ({status}): {stderr}")]
    ToolFailed {
        /// The tool and its mode, e.g. `sockperf pp`.
        tool: &'static str,
        /// How it ended.
        status: ExitStatus,
        /// What it printed on stderr, trimmed.
        stderr: String,
    },
    /// A tool's output holds none of the figures `compare` reads.
    #[error("no {wanted} in {tool}'s output")]
    NoFigures {
        /// The tool.
        tool: &'static str,
        /// What was looked for.
        wanted: &'static str,
    },
    /// cyclictest produced no output to read.
    #[error("no cyclictest output")]
    NoCyclictestOutput,
    /// cyclictest was not run.
    #[error("cyclictest did not run")]
    CyclictestDidNotRun,
    /// sockperf cannot send messages this small.
    #[error("sockperf cannot send messages under {min} B")]
    SockperfTooSmall {
        /// Its smallest message.
        min: usize,
    },
    /// The sockperf server exited at once.
    #[error("sockperf sr exited at once ({status})")]
    SockperfExited {
        /// How it ended.
        status: ExitStatus,
    },
    /// The sockperf server did not bind its port in time.
    #[error("sockperf sr did not bind 127.0.0.1:{port} within 3 s")]
    SockperfNotBound {
        /// The port.
        port: u16,
    },
    /// `plot` got an outcome without samples.
    #[error("nothing to plot: no run has samples")]
    NothingToPlot,
    /// The plot could not be drawn.
    #[error("cannot draw {}", .path.display())]
    Draw {
        /// The PNG.
        path: PathBuf,
        /// The drawing library's error (its type is generic over the backend).
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The CSV could not be written.
    #[error("cannot write {}", .path.display())]
    WriteCsv {
        /// The CSV.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The PNG could not be encoded or written.
    #[error("cannot write {}", .path.display())]
    WritePng {
        /// The PNG.
        path: PathBuf,
        /// Why.
        source: rtloop_output::png::EncodingError,
    },
    /// An output file could not be created or put in place.
    #[error("{0}")]
    Output(#[from] rtloop_output::OutputError),
}

impl Error {
    /// An operating-system error `source` of the call `what`.
    pub(crate) fn os(what: impl Into<String>, source: std::io::Error) -> Error {
        Error::Os { what: what.into(), source }
    }

    /// The last operating-system error of the call `what`.
    pub(crate) fn last_os(what: impl Into<String>) -> Error {
        Error::os(what, std::io::Error::last_os_error())
    }

    /// A `nix` error `source` of the call `what`.
    pub(crate) fn sys(what: impl Into<String>, source: nix::Error) -> Error {
        Error::Sys { what: what.into(), source }
    }

    /// The thread `thread` panicked.
    pub(crate) fn panicked(thread: &'static str) -> Error {
        Error::Panicked { thread }
    }
}
