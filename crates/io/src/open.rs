//! Opening buses from their addresses: the one place that knows every transport.
//!
//! Most transports are one bus each; a pi3hat is five buses and an IMU on one board, so
//! [`open_buses`] opens a robot's buses together: every bus that names the same pi3hat
//! carrier becomes a port of one shared device, and that board's IMU becomes the robot's.
//!
//! The simulated addresses (`sim`, `pi3hat:sim`) are part of the address language, but what
//! answers them is not this crate's: the caller passes a [`SimulatedDevices`] (the simulated
//! robot, rtloop-simrobot), which hands over a transport for a `sim` bus and an SPI carrier
//! for a simulated pi3hat — driven from then on like any device.
//!
//! Must never: open anything the address does not name, or hide why an open failed.

use crate::pi3hat::Pi3hatOptions;
use crate::spi::{Pi3hatSpi, SpiTiming};
use crate::transport::{ImuSource, OpenError, Transport};
use crate::uri::{BusUri, Pi3hatCarrier};

/// Knobs that apply to some transports.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    /// fdcanusb: append the ` *XX` CRC suffix to our lines (needed on UART links).
    pub fdcanusb_crc: bool,
    /// pi3hat: SPI timing, CAN configuration, attitude.
    pub pi3hat: Pi3hatOptions,
}

/// What answers the simulated addresses: a transport for each `sim` bus, an SPI carrier for
/// each simulated pi3hat. rtloop-simrobot's simulated robot implements it; [`NoSimulation`]
/// refuses them.
pub trait SimulatedDevices {
    /// The transport of `request` (a `sim` address), bus `index` of the robot's list.
    fn bus(&mut self, index: usize, request: &BusRequest<'_>) -> Result<Box<dyn Transport>, OpenError>;
    /// The SPI carrier of a simulated pi3hat whose connectors carry `buses` (each with its
    /// index in the robot's list), at `timing`.
    fn pi3hat(&mut self, buses: &[(usize, BusRequest<'_>)], timing: SpiTiming)
        -> Result<Box<dyn Pi3hatSpi>, OpenError>;
}

/// No simulator: a simulated address is refused, with the way to get one.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSimulation;

impl SimulatedDevices for NoSimulation {
    fn bus(&mut self, _index: usize, request: &BusRequest<'_>) -> Result<Box<dyn Transport>, OpenError> {
        Err(refused(request.uri))
    }
    fn pi3hat(&mut self, buses: &[(usize, BusRequest<'_>)], _: SpiTiming) -> Result<Box<dyn Pi3hatSpi>, OpenError> {
        Err(refused(buses.first().map_or(&BusUri::Pi3hat { carrier: Pi3hatCarrier::Sim }, |b| b.1.uri)))
    }
}

fn refused(uri: &BusUri) -> OpenError {
    OpenError {
        uri: uri.to_string(),
        message: "a simulated bus needs the simulated robot: open it with rtloop-simrobot (rtloop run does)".into(),
    }
}

/// One bus to open.
#[derive(Debug, Clone, Copy)]
pub struct BusRequest<'a> {
    /// The bus number users see (for a pi3hat, its connector JC1-JC5).
    pub number: u8,
    /// Where it is.
    pub uri: &'a BusUri,
    /// The servo ids on it (what a simulated bus is populated with; the others ignore it).
    pub servo_ids: &'a [u8],
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

/// Open the bus at `uri` on its own (a pi3hat address opens a board for this one bus, as
/// bus 1, JC1; use [`open_buses`] for several buses of one board); `simulated` answers a
/// simulated address.
pub fn open_bus(
    uri: &BusUri,
    servo_ids: &[u8],
    options: OpenOptions,
    simulated: &mut dyn SimulatedDevices,
) -> Result<Box<dyn Transport>, OpenError> {
    let mut opened = open_buses(&[BusRequest { number: 1, uri, servo_ids }], options, simulated)?;
    opened.transports.pop().ok_or_else(|| OpenError { uri: uri.to_string(), message: "nothing was opened".into() })
}

/// A transport that is one bus on its own; `None` for a pi3hat, whose buses open together.
fn open_single(
    index: usize,
    request: &BusRequest<'_>,
    options: OpenOptions,
    simulated: &mut dyn SimulatedDevices,
) -> Result<Option<Box<dyn Transport>>, OpenError> {
    Ok(Some(match request.uri {
        BusUri::Sim => simulated.bus(index, request)?,
        BusUri::Fdcanusb { path } => {
            let opts = crate::fdcanusb::FdcanusbOptions { crc: options.fdcanusb_crc, ..Default::default() };
            Box::new(crate::fdcanusb::FdcanusbTransport::open(path, opts)?)
        }
        BusUri::SocketCan { iface } => Box::new(crate::socketcan::SocketCanTransport::open(iface)?),
        BusUri::Udp { host, port, bus } => Box::new(crate::udp::UdpTransport::open(host, *port, *bus)?),
        BusUri::Pi3hat { .. } => return Ok(None),
    }))
}

/// Open every bus of a robot, in the order asked. Buses naming the same pi3hat carrier share
/// one board (bus N on connector JC N); `simulated` answers the simulated addresses.
pub fn open_buses(
    requests: &[BusRequest<'_>],
    options: OpenOptions,
    simulated: &mut dyn SimulatedDevices,
) -> Result<OpenedBuses, OpenError> {
    let mut slots: Vec<Option<Box<dyn Transport>>> = (0..requests.len()).map(|_| None).collect();
    let mut imu: Option<Box<dyn ImuSource>> = None;
    let mut carriers: Vec<Pi3hatCarrier> = Vec::new();
    let mut pi3hats = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        match open_single(i, r, options, simulated)? {
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
                let buses: Vec<(usize, BusRequest<'_>)> = mine.iter().map(|&i| (i, requests[i])).collect();
                simulated.pi3hat(&buses, options.pi3hat.timing)?
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
