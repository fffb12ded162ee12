//! # rtloop-sim — simulated moteus servos, IMU and CAN-FD buses, and the cycle-time model
//!
//! What it is for: letting the whole rtloop stack run, be tested and be benchmarked without
//! hardware. A [`SimBus`] behaves like one CAN-FD port with the servos cabled to it — exact
//! wire times, arbitration, turnaround — and each [`Servo`] answers frames byte-for-byte as
//! a moteus controller would, backed by a small joint / electrical / thermal model. An
//! [`Imu`] reports a gently swaying body. [`model`] predicts a control cycle term by term
//! from the same bit counts, so predictions and simulated (or measured) cycles can be
//! compared.
//!
//! What it must never do: perform I/O, spawn threads, read a clock (time is always passed
//! in as `now_ns: u64` on the caller's monotonic timeline), allocate after construction on
//! the per-frame paths (`SimBus::submit`, `poll_rx`, `advance_to`, `next_event_ns`,
//! `Servo::handle_frame` for register frames; the diagnostic console allocates its answers,
//! and only when a client uses it), panic on any frame input, or be non-deterministic: the only
//! randomness is a seeded xorshift generator.
//!
//! Fault injection, for exercising a runtime's error handling: a bus can lose frames on the
//! wire (`BusConfig::drop_rate`), corrupt them so the receiver's CRC rejects them
//! (`corrupt_rate`), and delay every reply (`reply_delay_ns`), all from its own seeded
//! generator (`fault_seed`); a servo can be made to overheat at a chosen time
//! ([`Servo::schedule_overheat`], [`SimBus::schedule_overheat`]) and then trips fault 38
//! through its thermal model. Everything injected is counted in [`BusStats`] and logged in a
//! small fixed-capacity event log on the bus ([`inject`], [`SimBus::drain_events`]), which
//! also records every fault a servo latches.
//!
//! Layout:
//! * [`servo`] — the simulated moteus controller and its joint.
//! * [`console`] — its diagnostic console (`tel`, `conf`, `d`), as moteus_tool and tview
//!   use it, with the configuration under the firmware's key names.
//! * [`bus`] — the simulated CAN-FD bus: queues, arbitration, delivery, statistics, wire faults.
//! * [`inject`] — the log of injected faults and latched servo faults.
//! * [`bits`] — exact bit counts and wire times of CAN / CAN-FD frames.
//! * [`imu`] — the simulated attitude reference.
//! * [`model`] — the cycle-time model ("spreadsheet").
//! * [`pi3hat`] — the simulated pi3hat: its SPI registers, receive queues and timing.
//! * [`rng`] — the seeded pseudo-random generator.
//! * [`plant`] — what the servos turn: the [`Plant`] interface and the default, independent joints.
//! * [`world`] — servos coupled to one plant (a robot with a body), and the IMU it gives.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bits;
pub mod bus;
pub mod console;
pub mod imu;
pub mod inject;
pub mod model;
pub mod pi3hat;
pub mod plant;
pub mod rng;
pub mod servo;
pub mod world;

pub use bits::{frame_bits, frame_time_ns, FrameBits};
pub use bus::{BusConfig, BusFull, BusStats, FrameLoss, NotAProbability, SimBus, WireRecord};
pub use imu::{Imu, ImuConfig, ImuSample};
pub use inject::{bus_fault_seed, InjectedEvent, InjectedKind, EVENT_CAPACITY};
pub use model::{predict, CycleModel, Prediction};
pub use pi3hat::{Pi3hatConfig, SimPi3hat};
pub use plant::{BodyState, IndependentJoints, JointKind, JointParams, Plant, PlantError, PlantParams};
pub use servo::{OverheatState, Servo, ServoConfig, ServoSetup, Telemetry, OVERHEAT_OVERSHOOT_C, OVERHEAT_RAMP_NS};
pub use world::{Episode, EpisodeServo, JointLink, Push, Servos, World, WorldError, EPISODE_PUSHES};

/// Seed of the IMU [`default_quadruped`] builds.
pub const DEFAULT_IMU_SEED: u64 = 1;

/// The default robot: buses 1-4 (indices 0-3) carrying servos (1, 2, 3), (4, 5, 6),
/// (7, 8, 9), (10, 11, 12) with default configurations — joints at rest at 0, a light
/// gravity-like load, stable default gains — and an IMU seeded with [`DEFAULT_IMU_SEED`].
pub fn default_quadruped() -> (Vec<SimBus>, Imu) {
    let buses = (0..4u8)
        .map(|b| {
            let mut bus = SimBus::new(BusConfig::default());
            for k in 1..=3u8 {
                bus.add_servo(Servo::new(ServoConfig::new(b * 3 + k)));
            }
            bus
        })
        .collect();
    (buses, Imu::new(DEFAULT_IMU_SEED))
}
