//! A robot's buses opened from their addresses, the simulated ones here: [`open_buses`] hands
//! rtloop-io's [`rtloop_io::open::open_buses`] this crate's answer to the simulated addresses
//! (`sim`, `pi3hat:sim`), so real and simulated buses open through one call and the cycle gets
//! transports (and an SPI carrier under rtloop-io's pi3hat driver) it cannot tell apart from
//! devices. Every simulated bus of the call belongs to one [`SimRobot`].
//!
//! Must never: share a fault stream between buses (each simulated bus derives its own seed
//! from the run's and its number), or open anything but what the addresses name.

use crate::robot::{Location, SimRobot};
use crate::spi::SimSpi;
use crate::transport::SimPort;
use rtloop_io::open::{BusRequest, OpenOptions, OpenedBuses, SimulatedDevices};
use rtloop_io::spi::{Pi3hatSpi, SpiTiming};
use rtloop_io::{Clock, OpenError, Robot, RobotConfig, ServoSpec, SetupError, Transport};
use rtloop_sim::{BusConfig, Servo, ServoConfig, SimBus};

/// How the simulated buses behave: wire timing and fault injection. Its `fault_seed` is the
/// run's: each bus gets its own, derived from it and the bus number
/// ([`rtloop_sim::bus_fault_seed`]), so no two buses lose the same frames.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimOptions {
    /// The simulated buses' configuration.
    pub bus: BusConfig,
}

/// The simulated robot being opened, as rtloop-io's answer to the simulated addresses.
struct Opening<C> {
    robot: SimRobot,
    options: SimOptions,
    clock: C,
}

impl<C> Opening<C> {
    fn bus_config(&self, number: u8) -> BusConfig {
        BusConfig { fault_seed: rtloop_sim::bus_fault_seed(self.options.bus.fault_seed, number), ..self.options.bus }
    }

    fn locate(&self, index: usize, location: Location) {
        let mut inner = self.robot.lock();
        if inner.buses.len() <= index {
            inner.buses.resize(index + 1, None);
        }
        inner.buses[index] = Some(location);
    }
}

/// A simulated bus carrying a default servo for each of `ids`.
fn bus_with(config: BusConfig, ids: &[u8]) -> SimBus {
    let mut bus = SimBus::new(config);
    for &id in ids {
        bus.add_servo(Servo::new(ServoConfig::new(id)));
    }
    bus
}

impl<C: Clock + Clone + Send + 'static> SimulatedDevices for Opening<C> {
    fn bus(&mut self, index: usize, request: &BusRequest<'_>) -> Result<Box<dyn Transport>, OpenError> {
        let bus = bus_with(self.bus_config(request.number), request.servo_ids);
        let plain = {
            let mut inner = self.robot.lock();
            inner.plain.push(bus);
            inner.plain.len() - 1
        };
        self.locate(index, Location::Plain(plain));
        Ok(Box::new(SimPort { robot: self.robot.clone(), plain, name: "sim".into() }))
    }

    fn pi3hat(
        &mut self,
        buses: &[(usize, BusRequest<'_>)],
        timing: SpiTiming,
    ) -> Result<Box<dyn Pi3hatSpi>, OpenError> {
        let mut board = rtloop_sim::pi3hat::SimPi3hat::new(rtloop_sim::Pi3hatConfig {
            spi_hz: timing.speed_hz,
            cs_hold_ns: u64::from(timing.cs_hold_ns),
            address_hold_ns: u64::from(timing.address_hold_ns),
            ..Default::default()
        });
        for (_, r) in buses {
            let mut config = self.bus_config(r.number);
            if r.number == 5 && config.nominal_bitrate != u32::MAX {
                // JC5 is the board's slow classic-CAN port.
                config.nominal_bitrate = 125_000;
                config.data_bitrate = 125_000;
            }
            board.attach_bus(r.number, bus_with(config, r.servo_ids));
        }
        board.attach_imu(rtloop_sim::Imu::new(rtloop_sim::DEFAULT_IMU_SEED));
        let index = {
            let mut inner = self.robot.lock();
            inner.boards.push(board);
            inner.boards.len() - 1
        };
        for &(i, r) in buses {
            self.locate(i, Location::Board { board: index, connector: r.number });
        }
        Ok(Box::new(SimSpi { robot: self.robot.clone(), board: index, clock: self.clock.clone() }))
    }
}

/// Open every bus of a robot (see the module doc). Simulated buses run on `clock` (a clone of
/// the cycle's clock, so that a virtual clock's time is shared); the simulated robot they
/// belong to comes back beside the opened buses, `None` when no bus was simulated. A robot
/// whose buses are all simulated and that has no IMU yet (a pi3hat's comes with its board, as
/// on hardware) gets the simulated one.
pub fn open_buses<C: Clock + Clone + Send + 'static>(
    requests: &[BusRequest<'_>],
    clock: C,
    options: OpenOptions,
    sim: SimOptions,
) -> Result<(OpenedBuses, Option<SimRobot>), OpenError> {
    let mut opening = Opening { robot: SimRobot::new(), options: sim, clock };
    let mut opened = rtloop_io::open::open_buses(requests, options, &mut opening)?;
    let robot = opening.robot;
    let simulated = |r: &BusRequest<'_>| {
        matches!(r.uri, rtloop_io::BusUri::Sim | rtloop_io::BusUri::Pi3hat { carrier: rtloop_io::Pi3hatCarrier::Sim })
    };
    if !requests.iter().any(simulated) {
        return Ok((opened, None));
    }
    if opened.imu.is_none() && requests.iter().all(simulated) {
        robot.lock().imu = Some(rtloop_sim::Imu::new(rtloop_sim::DEFAULT_IMU_SEED));
        opened.imu = Some(robot.imu_source());
    }
    Ok((opened, Some(robot)))
}

/// Open one bus on its own (see [`rtloop_io::open::open_bus`]), a simulated one here (on the
/// real clock).
pub fn open_bus(
    uri: &rtloop_io::BusUri,
    servo_ids: &[u8],
    options: OpenOptions,
    sim: SimOptions,
) -> Result<Box<dyn Transport>, OpenError> {
    let request = BusRequest { number: 1, uri, servo_ids };
    let (mut opened, _) = open_buses(&[request], rtloop_io::MonotonicClock::default(), options, sim)?;
    opened.transports.pop().ok_or_else(|| OpenError { uri: uri.to_string(), message: "nothing was opened".into() })
}

/// The built-in robot: servo ids 1-12, three per bus on simulated buses 1-4 (indices 0-3,
/// named `sim:1` … `sim:4`), plus the simulated IMU; and the simulated robot behind it.
pub fn quadruped<C: Clock>(clock: C, config: RobotConfig) -> Result<(Robot<C>, SimRobot), SetupError> {
    let (buses, imu) = rtloop_sim::default_quadruped();
    let robot = SimRobot::new();
    let mut transports: Vec<Box<dyn Transport>> = Vec::new();
    let mut servos = Vec::new();
    {
        let mut inner = robot.lock();
        for (index, bus) in buses.into_iter().enumerate() {
            servos.extend(bus.servos().iter().map(|s| ServoSpec { bus: index, id: s.id() }));
            inner.plain.push(bus);
            inner.buses.push(Some(Location::Plain(index)));
            transports.push(Box::new(SimPort {
                robot: robot.clone(),
                plain: index,
                name: format!("sim:{}", index + 1),
            }));
        }
        inner.imu = Some(imu);
    }
    let io_robot = Robot::new(transports, servos, Some(robot.imu_source()), clock, config)?;
    Ok((io_robot, robot))
}
