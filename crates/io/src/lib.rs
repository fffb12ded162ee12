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
//! The simulated robot — servos on simulated buses, a simulated pi3hat, a body — is one more
//! device behind these interfaces (rtloop-simrobot): this crate knows nothing of it.
//!
//! ```
//! use rtloop_io::{Robot, RobotConfig, ServoCommand, ServoReply, ServoSpec, Transport, TransportError, VirtualClock};
//! use rtloop_proto::CanFdFrame;
//!
//! /// A bus with nothing on it: every frame goes out, nothing ever answers.
//! struct Silent;
//!
//! impl Transport for Silent {
//!     fn name(&self) -> &str {
//!         "silent"
//!     }
//!     fn send(&mut self, _frame: &CanFdFrame, _now_ns: u64) -> Result<(), TransportError> {
//!         Ok(())
//!     }
//!     fn recv(&mut self, _now_ns: u64) -> Result<Option<CanFdFrame>, TransportError> {
//!         Ok(None)
//!     }
//! }
//!
//! let servos = vec![ServoSpec { bus: 0, id: 1 }];
//! let clock = VirtualClock::new(0);
//! let mut robot = Robot::new(vec![Box::new(Silent)], servos, None, clock, RobotConfig::default()).unwrap();
//! let mut replies = [ServoReply::default()];
//! let report = robot.cycle(&[ServoCommand::Query], &mut replies, &mut Default::default());
//! // The cycle gave up at its deadline, and says so: nothing stale is handed out as fresh.
//! assert_eq!(report.missing, 1);
//! assert!(!replies[0].fresh);
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
pub mod socketcan;
pub mod spi;
pub mod transport;
pub mod udp;
pub mod uri;

pub use clock::{Clock, MonotonicClock, VirtualClock};
pub use cycle::{CycleOptions, CycleStats, Cycler, RxFrame, SetupError, TxFrame, MAX_BUSES};
pub use robot::{CycleReport, Robot, RobotConfig, ServoCommand, ServoReply, ServoSpec};
pub use transport::{DeviceMessage, ImuSample, ImuSource, OpenError, Transport, TransportCounters, TransportError};
pub use uri::{BusUri, Pi3hatCarrier, UriError};
