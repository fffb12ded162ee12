//! Opening a bus from its address: the one place that knows every transport.
//!
//! Must never: open anything the address does not name, or hide why an open failed.

use crate::simulated::SimTransport;
use crate::transport::{OpenError, Transport};
use crate::uri::BusUri;

/// Knobs that apply to some transports.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    /// fdcanusb: append the ` *XX` CRC suffix to our lines (needed on UART links).
    pub fdcanusb_crc: bool,
    /// `sim`: wire timing and fault injection of the simulated bus.
    pub sim_bus: sim::BusConfig,
}

/// Open the bus at `uri`. A `sim` bus is an in-process simulated bus populated with
/// `sim_servo_ids` (ignored by the other transports).
pub fn open_bus(uri: &BusUri, sim_servo_ids: &[u8], options: OpenOptions) -> Result<Box<dyn Transport>, OpenError> {
    match uri {
        BusUri::Sim => {
            let mut bus = sim::SimBus::new(options.sim_bus);
            for &id in sim_servo_ids {
                bus.add_servo(sim::Servo::new(sim::ServoConfig::new(id)));
            }
            Ok(Box::new(SimTransport::new(bus, "sim")))
        }
        BusUri::Fdcanusb { path } => {
            let opts = crate::fdcanusb::FdcanusbOptions { crc: options.fdcanusb_crc, ..Default::default() };
            Ok(Box::new(crate::fdcanusb::FdcanusbTransport::open(path, opts)?))
        }
        BusUri::SocketCan { iface } => Ok(Box::new(crate::socketcan::SocketCanTransport::open(iface)?)),
        BusUri::Udp { host, port, bus } => Ok(Box::new(crate::udp::UdpTransport::open(host, *port, *bus)?)),
    }
}
