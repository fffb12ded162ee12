//! Opening buses from their addresses: the one place that knows every transport.
//!
//! Most transports are one bus each; a pi3hat is five buses and an IMU on one board, so
//! [`open_buses`] opens a robot's buses together: every bus that names the same pi3hat
//! carrier becomes a port of one shared device, and that board's IMU becomes the robot's.
//!
//! Must never: open anything the address does not name, or hide why an open failed.

use crate::clock::{Clock, MonotonicClock};
use crate::pi3hat::Pi3hatOptions;
use crate::simulated::{SimImu, SimTransport};
use crate::spi::{Pi3hatSpi, SimSpi, SpiTiming};
use crate::transport::{ImuSource, OpenError, Transport};
use crate::uri::{BusUri, Pi3hatCarrier};

/// Knobs that apply to some transports.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    /// fdcanusb: append the ` *XX` CRC suffix to our lines (needed on UART links).
    pub fdcanusb_crc: bool,
    /// `sim` and `pi3hat:sim`: wire timing and fault injection of the simulated buses. Its
    /// `fault_seed` is the run's: [`open_buses`] gives each bus its own, derived from it and
    /// the bus number ([`rtloop_sim::bus_fault_seed`]), so no two buses lose the same frames.
    pub sim_bus: rtloop_sim::BusConfig,
    /// pi3hat: SPI timing, CAN configuration, attitude.
    pub pi3hat: Pi3hatOptions,
}

/// One bus to open.
#[derive(Debug, Clone, Copy)]
pub struct BusRequest<'a> {
    /// The bus number users see (for a pi3hat, its connector JC1-JC5).
    pub number: u8,
    /// Where it is.
    pub uri: &'a BusUri,
    /// Servo ids to simulate on it when it is simulated (ignored otherwise).
    pub sim_servo_ids: &'a [u8],
}

/// A robot's opened buses: transports in the order asked, and the IMU if one came with them
/// (a pi3hat's).
pub struct OpenedBuses {
    /// One transport per request.
    pub transports: Vec<Box<dyn Transport>>,
    /// The attitude source of the first pi3hat, when its options read the attitude.
    pub imu: Option<Box<dyn ImuSource>>,
    /// Each pi3hat opened, by carrier: the device its ports share, for one-shot queries
    /// between cycles (identity, CAN configuration).
    pub pi3hats: Vec<(Pi3hatCarrier, crate::pi3hat::SharedPi3hat)>,
}

/// Open the bus at `uri`. A `sim` bus is an in-process simulated bus populated with
/// `sim_servo_ids` (ignored by the other transports). A pi3hat address opens a board for this
/// one bus (as bus 1, JC1); use [`open_buses`] for several buses of one board.
/// `options.sim_bus` is used as given (its seed too).
pub fn open_bus(uri: &BusUri, sim_servo_ids: &[u8], options: OpenOptions) -> Result<Box<dyn Transport>, OpenError> {
    if let Some(t) = open_single(uri, sim_servo_ids, options, options.sim_bus)? {
        return Ok(t);
    }
    let mut opened = open_buses(&[BusRequest { number: 1, uri, sim_servo_ids }], MonotonicClock::default(), options)?;
    opened.transports.pop().ok_or_else(|| OpenError { uri: uri.to_string(), message: "nothing was opened".into() })
}

/// A transport that is one bus on its own; `None` for a pi3hat, whose buses open together.
fn open_single(
    uri: &BusUri,
    sim_servo_ids: &[u8],
    options: OpenOptions,
    bus_config: rtloop_sim::BusConfig,
) -> Result<Option<Box<dyn Transport>>, OpenError> {
    Ok(Some(match uri {
        BusUri::Sim => Box::new(SimTransport::new(sim_bus(bus_config, sim_servo_ids), "sim")),
        BusUri::Fdcanusb { path } => {
            let opts = crate::fdcanusb::FdcanusbOptions { crc: options.fdcanusb_crc, ..Default::default() };
            Box::new(crate::fdcanusb::FdcanusbTransport::open(path, opts)?)
        }
        BusUri::SocketCan { iface } => Box::new(crate::socketcan::SocketCanTransport::open(iface)?),
        BusUri::Udp { host, port, bus } => Box::new(crate::udp::UdpTransport::open(host, *port, *bus)?),
        BusUri::Pi3hat { .. } => return Ok(None),
    }))
}

/// Open every bus of a robot. Buses naming the same pi3hat carrier share one board (bus N on
/// connector JC N); simulated ones (`sim`, `pi3hat:sim`) run on `clock` (a clone of the
/// cycle's clock, so that a virtual clock's time is shared).
pub fn open_buses<C: Clock + Clone + Send + 'static>(
    requests: &[BusRequest<'_>],
    clock: C,
    options: OpenOptions,
) -> Result<OpenedBuses, OpenError> {
    let mut slots: Vec<Option<Box<dyn Transport>>> = (0..requests.len()).map(|_| None).collect();
    let mut imu: Option<Box<dyn ImuSource>> = None;
    let mut carriers: Vec<Pi3hatCarrier> = Vec::new();
    let mut pi3hats = Vec::new();
    // Each simulated bus gets its own fault seed, derived from the run's and its number.
    let bus_config = |number: u8| rtloop_sim::BusConfig {
        fault_seed: rtloop_sim::bus_fault_seed(options.sim_bus.fault_seed, number),
        ..options.sim_bus
    };
    for (i, r) in requests.iter().enumerate() {
        match open_single(r.uri, r.sim_servo_ids, options, bus_config(r.number))? {
            Some(t) => slots[i] = Some(t),
            None => {
                if let BusUri::Pi3hat { carrier } = r.uri {
                    if !carriers.contains(carrier) {
                        carriers.push(*carrier);
                    }
                }
            }
        }
    }
    for carrier in carriers {
        let uri = BusUri::Pi3hat { carrier }.to_string();
        let mine: Vec<usize> =
            (0..requests.len()).filter(|&i| requests[i].uri == &BusUri::Pi3hat { carrier }).collect();
        let numbers: Vec<u8> = mine.iter().map(|&i| requests[i].number).collect();
        if let Some(n) = numbers.iter().find(|&&n| !(1..=5).contains(&n)) {
            return Err(OpenError {
                uri,
                message: format!("bus {n} cannot be on a pi3hat: bus N is connector JC N, so give bus numbers 1 to 5"),
            });
        }
        let spi: Box<dyn Pi3hatSpi> = match carrier {
            Pi3hatCarrier::Sim => {
                let mut board = rtloop_sim::pi3hat::SimPi3hat::new(sim_pi3hat_config(options.pi3hat.timing));
                for &i in &mine {
                    let r = &requests[i];
                    let mut config = bus_config(r.number);
                    if r.number == 5 && config.nominal_bitrate != u32::MAX {
                        // JC5 is the board's slow classic-CAN port.
                        config.nominal_bitrate = 125_000;
                        config.data_bitrate = 125_000;
                    }
                    board.attach_bus(r.number, sim_bus(config, r.sim_servo_ids));
                }
                board.attach_imu(rtloop_sim::Imu::new(rtloop_sim::DEFAULT_IMU_SEED));
                Box::new(SimSpi::new(board, clock.clone()))
            }
            Pi3hatCarrier::Spidev => Box::new(crate::spi::spidev::SpidevSpi::open(options.pi3hat.timing)?),
            Pi3hatCarrier::Mem => Box::new(crate::spi::bcm::BcmSpi::open(options.pi3hat.timing)?),
            Pi3hatCarrier::Auto => open_auto(options.pi3hat.timing)?,
        };
        let with_imu = imu.is_none() && options.pi3hat.attitude;
        let pi3hat_options = Pi3hatOptions { attitude: with_imu, ..options.pi3hat };
        let (ports, hat_imu) = crate::pi3hat::open_shared(spi, &numbers, pi3hat_options, &uri)?;
        if let Some(p) = ports.first() {
            pi3hats.push((carrier, p.device().clone()));
        }
        for (&i, port) in mine.iter().zip(ports) {
            slots[i] = Some(Box::new(port));
        }
        if let Some(h) = hat_imu {
            imu = Some(Box::new(h));
        }
    }
    let transports = slots.into_iter().flatten().collect::<Vec<_>>();
    debug_assert_eq!(transports.len(), requests.len());
    Ok(OpenedBuses { transports, imu, pi3hats })
}

/// `pi3hat`: `/dev/mem` (the official library's way, fastest) when running as root, else
/// spidev; when both fail, say why each did.
fn open_auto(timing: SpiTiming) -> Result<Box<dyn Pi3hatSpi>, OpenError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mem_error = if root {
        match crate::spi::bcm::BcmSpi::open(timing) {
            Ok(s) => return Ok(Box::new(s)),
            Err(e) => e.message,
        }
    } else {
        "not running as root".to_string()
    };
    match crate::spi::spidev::SpidevSpi::open(timing) {
        Ok(s) => Ok(Box::new(s)),
        Err(e) => Err(OpenError {
            uri: "pi3hat".into(),
            message: format!("no pi3hat found: through /dev/mem, {mem_error}; through spidev, {}", e.message),
        }),
    }
}

fn sim_bus(config: rtloop_sim::BusConfig, ids: &[u8]) -> rtloop_sim::SimBus {
    let mut bus = rtloop_sim::SimBus::new(config);
    for &id in ids {
        bus.add_servo(rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(id)));
    }
    bus
}

fn sim_pi3hat_config(t: SpiTiming) -> rtloop_sim::Pi3hatConfig {
    rtloop_sim::Pi3hatConfig {
        spi_hz: t.speed_hz,
        cs_hold_ns: u64::from(t.cs_hold_ns),
        address_hold_ns: u64::from(t.address_hold_ns),
        ..Default::default()
    }
}

/// The simulated IMU for a robot whose buses are all simulated in process.
pub fn sim_imu() -> Box<dyn ImuSource> {
    Box::new(SimImu(rtloop_sim::Imu::new(rtloop_sim::DEFAULT_IMU_SEED)))
}
