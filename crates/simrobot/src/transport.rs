//! Simulated buses behind rtloop-io's transport interface: [`SimPort`] (one bus of a
//! [`SimRobot`]) and [`SimTransport`] (one bus on its own, for a tool or a test that needs
//! nothing else).
//!
//! With [`rtloop_io::MonotonicClock`] the simulated wires run in real time (a reply is seen
//! when its last bit would have crossed the wire); with [`rtloop_io::VirtualClock`] the same
//! cycle runs deterministically, as fast as the host can compute it.
//!
//! Must never: allocate in `send`/`recv`, or read a clock itself — time comes from the cycle.

use crate::robot::SimRobot;
use rtloop_io::{Transport, TransportError};
use rtloop_proto::CanFdFrame;
use rtloop_sim::SimBus;

fn send_on(bus: &mut SimBus, frame: &CanFdFrame, now_ns: u64) -> Result<(), TransportError> {
    bus.submit(frame, now_ns).map_err(|_| TransportError::QueueFull)
}

/// One in-process bus (`sim`) of a [`SimRobot`].
pub struct SimPort {
    pub(crate) robot: SimRobot,
    /// Index into the robot's plain buses.
    pub(crate) plain: usize,
    pub(crate) name: String,
}

impl SimPort {
    fn with<R>(&self, f: impl FnOnce(&mut SimBus) -> R) -> Option<R> {
        self.robot.lock().plain.get_mut(self.plain).map(f)
    }
}

impl Transport for SimPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn send(&mut self, frame: &CanFdFrame, now_ns: u64) -> Result<(), TransportError> {
        self.with(|bus| send_on(bus, frame, now_ns)).unwrap_or(Err(TransportError::Disconnected))
    }

    fn recv(&mut self, now_ns: u64) -> Result<Option<CanFdFrame>, TransportError> {
        self.with(|bus| bus.poll_rx(now_ns)).ok_or(TransportError::Disconnected)
    }

    fn ready_hint_ns(&self) -> Option<u64> {
        self.with(|bus| bus.next_event_ns()).flatten()
    }
}

/// One simulated bus on its own behind the [`Transport`] interface: for a tool or a test that
/// drives one bus and needs no robot around it (no world, no IMU).
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
        send_on(&mut self.bus, frame, now_ns)
    }

    fn recv(&mut self, now_ns: u64) -> Result<Option<CanFdFrame>, TransportError> {
        Ok(self.bus.poll_rx(now_ns))
    }

    fn ready_hint_ns(&self) -> Option<u64> {
        self.bus.next_event_ns()
    }
}
