//! The in-process simulator as a transport: one [`rtloop_sim::SimBus`] per bus, the simulated IMU,
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
use rtloop_proto::CanFdFrame;
use rtloop_sim::{Imu, ImuSample, SimBus};

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
}

/// Run `f` on the simulated bus behind `transport`, if it is one (fault injection,
/// statistics, start positions): a [`SimTransport`], or a port of a simulated pi3hat, whose
/// buses live inside the board its ports share. `None` for any other transport. The
/// [`Transport`] trait knows nothing of simulators: this looks at the concrete type.
pub fn with_sim_bus<R>(transport: &mut dyn Transport, f: impl FnOnce(&mut SimBus) -> R) -> Option<R> {
    let any: &mut dyn std::any::Any = transport;
    if any.is::<Box<dyn Transport>>() {
        let inner = any.downcast_mut::<Box<dyn Transport>>()?;
        return with_sim_bus(&mut **inner, f);
    }
    if let Some(t) = any.downcast_mut::<SimTransport>() {
        return Some(f(t.bus_mut()));
    }
    let port = any.downcast_mut::<crate::pi3hat::Pi3hatPort>()?;
    let bus = port.bus();
    // A panic while holding the lock cannot leave the queues inconsistent (plain data), as
    // the driver's own `lock` reasons: keep going.
    let mut dev = port.device().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    dev.sim_mut().and_then(|board| board.bus_mut(bus)).map(f)
}

/// Call `f` on every servo of every simulated bus among `buses`, with its bus index: what
/// [`rtloop_sim::World`] steps. Buses that are not simulated are skipped.
pub(crate) fn visit_sim_servos(buses: &mut [Box<dyn Transport>], f: &mut dyn FnMut(usize, &mut rtloop_sim::Servo)) {
    for (i, bus) in buses.iter_mut().enumerate() {
        with_sim_bus(&mut **bus, |b| {
            for s in b.servos_mut() {
                f(i, s);
            }
        });
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
    let (buses, imu) = rtloop_sim::default_quadruped();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sim_bus_is_reached_through_any_box_and_nothing_else_has_one() {
        let mut t: Box<dyn Transport> =
            Box::new(SimTransport::new(SimBus::new(rtloop_sim::BusConfig::default()), "sim"));
        assert_eq!(with_sim_bus(&mut *t, |b| b.servos().len()), Some(0));
        let mut boxed: Box<dyn Transport> = Box::new(t);
        assert_eq!(with_sim_bus(&mut *boxed, |b| b.servos().len()), Some(0));
        let udp = crate::udp::UdpTransport::open("127.0.0.1", 9, 1);
        if let Ok(mut udp) = udp {
            assert_eq!(with_sim_bus(&mut udp, |_| ()), None);
        }
    }
}
