//! # rtloop-simrobot — the simulated robot as a device
//!
//! What it is for: putting rtloop-sim's servos, CAN-FD buses, pi3hat and body (with
//! rtloop-physics, MuJoCo) behind rtloop-io's interfaces, so that the cycle drives a simulated
//! robot exactly as it drives hardware — through transports ([`SimPort`]), an SPI carrier
//! under rtloop-io's own pi3hat driver ([`SimSpi`]) and an IMU source — while the simulated
//! robot ([`SimRobot`]) stays one component its owner can reach (fault injection, pushes,
//! resets, the body's ground truth) and step in time ([`SimRobot::advance_to`]). As a
//! simulated system is one more hardware component in ros2_control, this crate is where the
//! simulator meets the I/O layer; neither knows the other.
//!
//! It also serves simulated buses behind real operating-system devices ([`serve`]: a
//! pseudo-terminal speaking the fdcanusb protocol, a UDP port) for programs that cannot link
//! rtloop — the moteus Python package, moteus_tool, tview.
//!
//! ```
//! use rtloop_io::{RobotConfig, ServoCommand, ServoReply, VirtualClock};
//!
//! let (mut robot, _sim) = rtloop_simrobot::quadruped(VirtualClock::new(0), RobotConfig::default()).unwrap();
//! let commands = [ServoCommand::Query; 12];
//! let mut replies = [ServoReply::default(); 12];
//! let mut imu = Default::default();
//! let report = robot.cycle(&commands, &mut replies, &mut imu);
//! assert_eq!(report.missing, 0);
//! assert_eq!(replies[0].state.mode, Some(0)); // stopped
//! ```
//!
//! What it must never do: allocate, or take a lock another thread holds, in a cycle's calls
//! (the simulated robot's one lock is only ever taken by the thread that runs the cycles);
//! read a clock but the one it is given; serve on an address other hosts can reach unless
//! asked.
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod open;
pub mod robot;
pub mod serve;
pub mod spi;
pub mod transport;

pub use open::{open_bus, open_buses, quadruped, SimOptions};
pub use robot::SimRobot;
pub use spi::{SimSpi, SIM_SPI_LEAD_NS};
pub use transport::{SimPort, SimTransport};
