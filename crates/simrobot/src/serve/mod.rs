//! The simulator behind a real device (`rtloop sim`): simulated buses served over a
//! pseudo-terminal that speaks the fdcanusb protocol, or over UDP, so that unmodified clients
//! (the moteus Python package over the pty, rtloop's own transports over either) can drive
//! them — registers and the moteus diagnostic channel alike: each simulated servo serves its
//! console on stream channel 1 (`tel`, `conf`, `d`, answered as the firmware answers them,
//! every 0x42/0x44 poll with its 0x41/0x43), so moteus_tool, tview and `rtloop servo
//! --console` talk to it as to a board (`crates/rtloop-cli/tests/cli/moteus_tool.rs`, `tview.rs`). With a [`persist::ConfigStore`] a servo's `conf write` is kept
//! in a file and loaded again at the next start.
//!
//! An [`Endpoint`] is the device side of one bus; [`serve`] runs every endpoint and its
//! [`rtloop_sim::SimBus`] in real time on one thread until asked to stop.
//!
//! Must never: block on one endpoint while others have work, or let a misbehaving client
//! (garbage, a closed pty, a vanished peer) stop the server: errors are counted and the
//! endpoint waits for the next client.

pub mod persist;
pub mod pty;
pub mod runner;
pub mod udp;

pub use persist::{ConfigDir, ConfigStore, ConfigStoreError};
pub use pty::PtyFdcanusbEndpoint;
pub use runner::{serve, EndpointReport, ServeHandle, ServeReport, ServedBus, ServoReport};
pub use udp::UdpEndpoint;

use rtloop_proto::CanFdFrame;
use rtloop_sim::SimBus;
use std::fmt;
use std::os::fd::RawFd;

/// What went wrong on an endpoint. The server logs it, counts it and carries on.
#[derive(Debug)]
#[non_exhaustive]
pub enum EndpointError {
    /// An operating-system error.
    Io(std::io::Error),
    /// The client sent something that is not the protocol (counted, answered with ERR where
    /// the protocol has one).
    Protocol(String),
}

impl fmt::Display for EndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndpointError::Io(e) => write!(f, "{e}"),
            EndpointError::Protocol(m) => write!(f, "protocol error: {m}"),
        }
    }
}

impl std::error::Error for EndpointError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EndpointError::Io(e) => Some(e),
            EndpointError::Protocol(_) => None,
        }
    }
}

impl From<std::io::Error> for EndpointError {
    fn from(e: std::io::Error) -> Self {
        EndpointError::Io(e)
    }
}

/// Running counts an endpoint keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointCounters {
    /// Frames received from the client and put on the simulated bus.
    pub frames_in: u64,
    /// Frames sent to the client.
    pub frames_out: u64,
    /// Lines/datagrams that were not the protocol.
    pub protocol_errors: u64,
    /// Frames the client was not there to take.
    pub dropped: u64,
}

/// The device side of one simulated bus.
pub trait Endpoint: Send {
    /// What to call it in messages, e.g. `fdcanusb:/tmp/rtloop-bus1`.
    fn name(&self) -> &str;
    /// Descriptor that becomes readable when the client has sent something.
    fn fd(&self) -> RawFd;
    /// Read and handle everything the client has sent so far: submit its frames to `bus`
    /// at `now_ns` and answer at the protocol level (`OK`, `ERR`). Never blocks.
    fn service(&mut self, bus: &mut SimBus, now_ns: u64) -> Result<(), EndpointError>;
    /// Hand one frame that `bus` delivered towards the host to the client. Never blocks:
    /// when the client is not reading, drop the frame and count it.
    fn deliver(&mut self, frame: &CanFdFrame, now_ns: u64) -> Result<(), EndpointError>;
    /// Push out whatever `service` and `deliver` queued. The server calls it once per
    /// iteration, after delivering, so an `OK` and the reply that follows it at once can
    /// leave in one write (one wakeup of the client instead of two). Never blocks.
    fn flush(&mut self) -> Result<(), EndpointError> {
        Ok(())
    }
    /// Counters.
    fn counters(&self) -> EndpointCounters;
}
