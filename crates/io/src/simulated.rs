//! The in-process simulator as a transport: one [`sim::SimBus`] per bus, the simulated IMU,
//! and the built-in quadruped.
//!
//! With [`crate::MonotonicClock`] the simulated wires run in real time (a reply is seen
//! when its last bit would have crossed the wire); with [`crate::VirtualClock`] the same
//! cycle runs deterministically, as fast as the host can compute it.
//!
//! Must never: allocate in `send`/`recv`, or read a clock itself — time comes from the cycle.

use crate::clock::Clock;
use crate::cycle::SetupError;
use crate::robot::{Robot, RobotConfig, ServoSpec};
use crate::transport::{ImuSource, Transport, TransportError};
use proto::CanFdFrame;
use sim::{Imu, ImuSample, SimBus};

/// A simulated CAN-FD bus behind the [`Transport`] interface.
pub struct SimTransport {
    bus: SimBus,
    name: String,
}

impl SimTransport {
    /// Wrap `bus`.
    pub fn new(bus: SimBus, name: impl Into<String>) -> Self {
        SimTransport { bus, name: name.into() }
    }

    /// The simulated bus (servos, statistics).
    pub fn bus(&self) -> &SimBus {
        &self.bus
    }

    /// Mutable access, e.g. for fault injection.
    pub fn bus_mut(&mut self) -> &mut SimBus {
        &mut self.bus
    }
}

impl Transport for SimTransport {
    fn name(&self) -> &str {
        &self.name
    }

    fn send(&mut self, frame: &CanFdFrame, now_ns: u64) -> Result<(), TransportError> {
        self.bus.submit(frame, now_ns).map_err(|_| TransportError::QueueFull)
    }

    fn recv(&mut self, now_ns: u64) -> Result<Option<CanFdFrame>, TransportError> {
        Ok(self.bus.poll_rx(now_ns))
    }

    fn ready_hint_ns(&self) -> Option<u64> {
        self.bus.next_event_ns()
    }

    fn with_sim_bus(&mut self, f: &mut dyn FnMut(&mut SimBus)) -> bool {
        f(&mut self.bus);
        true
    }
}

/// The simulated IMU behind the [`ImuSource`] interface.
pub struct SimImu(pub Imu);

impl ImuSource for SimImu {
    fn read(&mut self, now_ns: u64, out: &mut ImuSample) -> Result<bool, TransportError> {
        *out = self.0.sample(now_ns);
        Ok(true)
    }
}

/// The built-in robot: servo ids 1-12, three per bus on buses 1-4 (indices 0-3), plus the
/// IMU, all simulated.
pub fn default_quadruped<C: Clock>(clock: C, config: RobotConfig) -> Result<Robot<C>, SetupError> {
    let (buses, imu) = sim::default_quadruped();
    let mut transports: Vec<Box<dyn Transport>> = Vec::new();
    let mut servos = Vec::new();
    for (index, bus) in buses.into_iter().enumerate() {
        for s in bus.servos() {
            servos.push(ServoSpec { bus: index, id: s.id() });
        }
        transports.push(Box::new(SimTransport::new(bus, format!("sim:{}", index + 1))));
    }
    Robot::new(transports, servos, Some(Box::new(SimImu(imu))), clock, config)
}
