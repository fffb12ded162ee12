//! # rtloop-io — transports and the multi-bus cycle
//!
//! What it is for: moving CAN-FD frames between the host and its servo buses, one
//! [`Transport`] per bus, and running the cycle that commands and queries every servo on
//! several buses at once ([`Cycler`] for frames, [`Robot`] for servo commands and states),
//! with the clock that drives it ([`MonotonicClock`] for real runs, [`VirtualClock`] for
//! deterministic tests).
//!
//! What it must never do: allocate, lock, or block past a deadline inside a cycle; let one
//! bus's failure stop the others; panic on anything a device or peer sends.
//!
//! ```
//! use rtloop_io::{default_quadruped, RobotConfig, ServoCommand, ServoReply, VirtualClock};
//!
//! let mut robot = default_quadruped(VirtualClock::new(0), RobotConfig::default()).unwrap();
//! let commands = [ServoCommand::Query; 12];
//! let mut replies = [ServoReply::default(); 12];
//! let mut imu = Default::default();
//! let report = robot.cycle(&commands, &mut replies, &mut imu);
//! assert_eq!(report.missing, 0);
//! assert_eq!(replies[0].state.mode, Some(0)); // stopped
//! ```
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod clock;
pub mod cycle;
pub mod diagnostic;
pub mod fdcanusb;
pub mod open;
pub mod pi3hat;
pub mod robot;
pub mod safety;
pub mod serve;
pub mod simulated;
pub mod socketcan;
pub mod spi;
pub mod transport;
pub mod udp;
pub mod uri;

pub use clock::{Clock, MonotonicClock, VirtualClock};
pub use cycle::{CycleOptions, CycleStats, Cycler, RxFrame, SetupError, TxFrame, MAX_BUSES};
pub use robot::{CycleReport, Robot, RobotConfig, ServoCommand, ServoReply, ServoSpec};
pub use simulated::{default_quadruped, SimImu, SimTransport};
pub use transport::{DeviceMessage, ImuSource, OpenError, Transport, TransportCounters, TransportError};
pub use uri::{BusUri, Pi3hatCarrier, UriError};
