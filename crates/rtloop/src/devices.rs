//! One device as a user names it (`fdcanusb:PATH`, `udp:HOST:PORT`, …): what its failures
//! mean, in the one sentence `rtloop servo`, `rtloop can` and the Python package print.

use rtloop_io::{BusUri, TransportCounters, TransportError};

/// A bus error in words a user can act on: what is wrong with `uri` and what to do.
pub fn explain_bus_error(uri: &BusUri, e: TransportError) -> String {
    match (uri, e) {
        (BusUri::Udp { host, port, .. }, TransportError::Disconnected) => {
            let addr = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
            format!(
                "nothing is listening at {uri} (its datagrams are refused, or the host cannot be reached): start `rtloop sim --udp {addr}` there, or check the address"
            )
        }
        (BusUri::Fdcanusb { path }, TransportError::Disconnected) => format!(
            "{uri} disconnected: the adapter was unplugged or the simulator behind {path} stopped; plug it back in or restart it"
        ),
        _ => format!("bus {uri}: {e}"),
    }
}

/// When the device refused some of our lines since `before`, what it said, as a sentence
/// part: "the device at URI refused … with `ERR text`".
pub fn device_refusal(uri: &BusUri, before: &TransportCounters, now: &TransportCounters) -> Option<String> {
    if now.device_errors <= before.device_errors {
        return None;
    }
    let said =
        if now.last_device_error.is_empty() { "ERR".to_string() } else { format!("ERR {}", now.last_device_error) };
    Some(format!("the device at {uri} refused the frame with `{said}` instead of sending it on the bus"))
}
