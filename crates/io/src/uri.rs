//! Bus addresses as users write them: `sim`, `fdcanusb:PATH`, `socketcan:IFACE`,
//! `udp:HOST:PORT[?bus=N]`, `pi3hat[:spidev|:mem|:sim]`.
//!
//! Must never: touch a device. Parsing is pure; every mistake comes back as one message
//! that says what was wrong and what a valid address looks like.

use std::fmt;

/// Where one bus is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusUri {
    /// The in-process simulator.
    Sim,
    /// An fdcanusb (or anything speaking its text protocol) on a serial device or pty.
    Fdcanusb {
        /// Device path.
        path: String,
    },
    /// A Linux SocketCAN interface.
    SocketCan {
        /// Interface name, e.g. `can0`.
        iface: String,
    },
    /// CAN-FD frames in UDP datagrams (see `docs/udp-framing.md`).
    Udp {
        /// Host name or address (IPv6 without brackets).
        host: String,
        /// UDP port.
        port: u16,
        /// Bus number carried in the datagrams (default 1).
        bus: u8,
    },
    /// A connector of an mjbots pi3hat: bus N is JC N. Every bus naming the same carrier
    /// shares one board.
    Pi3hat {
        /// How the board is reached.
        carrier: Pi3hatCarrier,
    },
}

/// How a pi3hat is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pi3hatCarrier {
    /// `/dev/mem` when running as root, else spidev (`pi3hat`).
    Auto,
    /// Linux's spidev driver (`pi3hat:spidev`).
    Spidev,
    /// The BCM283x registers through `/dev/mem` (`pi3hat:mem`).
    Mem,
    /// The simulated pi3hat (`pi3hat:sim`).
    Sim,
}

/// A bus address that does not parse: what was given, and (in the sentence) what to give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UriError {
    /// Nothing but blanks.
    #[error("empty bus address: give one of {FORMS}")]
    Empty,
    /// No `scheme:` and not a word address.
    #[error("'{text}' is not a bus address: give one of {FORMS}")]
    NotAnAddress {
        /// The address.
        text: String,
    },
    /// `fdcanusb:` without a path.
    #[error("fdcanusb: needs a device path, e.g. fdcanusb:/dev/ttyACM0")]
    NoDevicePath,
    /// `socketcan:` with something that cannot be an interface name.
    #[error("'{iface}' is not a network interface name: give e.g. socketcan:can0 (at most 15 characters)")]
    Interface {
        /// The name given.
        iface: String,
    },
    /// `pi3hat:` with an unknown carrier.
    #[error("'{carrier}' is not a way to reach a pi3hat: give pi3hat, pi3hat:spidev, pi3hat:mem or pi3hat:sim")]
    Carrier {
        /// The carrier given.
        carrier: String,
    },
    /// An unknown scheme.
    #[error("unknown transport '{scheme}' in '{text}': give one of {FORMS}")]
    UnknownTransport {
        /// The scheme.
        scheme: String,
        /// The address.
        text: String,
    },
    /// `udp:` without `HOST:PORT`.
    #[error("'udp:{rest}' is not a UDP address: give udp:HOST:PORT, e.g. udp:127.0.0.1:9000")]
    UdpAddress {
        /// What follows `udp:`.
        rest: String,
    },
    /// A UDP port that is not a number 0-65535.
    #[error("'{port}' is not a UDP port number (1-65535)")]
    UdpPort {
        /// The port given.
        port: String,
    },
    /// UDP port 0.
    #[error("UDP port 0 is not a port a peer can listen on: give 1-65535")]
    UdpPortZero,
    /// `?bus=` that is not 1-255.
    #[error("'{bus}' is not a bus number: give ?bus=N with N from 1 to 255")]
    UdpBus {
        /// The value given.
        bus: String,
    },
    /// A UDP option other than `bus`.
    #[error("unknown option '{option}' in 'udp:{rest}': only ?bus=N is understood")]
    UdpOption {
        /// The option.
        option: String,
        /// What follows `udp:`.
        rest: String,
    },
}

const FORMS: &str = "sim, fdcanusb:/dev/ttyACM0, socketcan:can0, udp:127.0.0.1:9000 or pi3hat[:spidev|:mem|:sim]";

impl fmt::Display for BusUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BusUri::Sim => write!(f, "sim"),
            BusUri::Fdcanusb { path } => write!(f, "fdcanusb:{path}"),
            BusUri::SocketCan { iface } => write!(f, "socketcan:{iface}"),
            BusUri::Pi3hat { carrier: Pi3hatCarrier::Auto } => write!(f, "pi3hat"),
            BusUri::Pi3hat { carrier: Pi3hatCarrier::Spidev } => write!(f, "pi3hat:spidev"),
            BusUri::Pi3hat { carrier: Pi3hatCarrier::Mem } => write!(f, "pi3hat:mem"),
            BusUri::Pi3hat { carrier: Pi3hatCarrier::Sim } => write!(f, "pi3hat:sim"),
            BusUri::Udp { host, port, bus } => {
                let h = if host.contains(':') { format!("[{host}]") } else { host.clone() };
                if *bus == 1 {
                    write!(f, "udp:{h}:{port}")
                } else {
                    write!(f, "udp:{h}:{port}?bus={bus}")
                }
            }
        }
    }
}

impl std::str::FromStr for BusUri {
    type Err = UriError;
    fn from_str(s: &str) -> Result<Self, UriError> {
        parse(s)
    }
}

/// Parse a bus address.
pub fn parse(text: &str) -> Result<BusUri, UriError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(UriError::Empty);
    }
    if t == "sim" {
        return Ok(BusUri::Sim);
    }
    if t == "pi3hat" {
        return Ok(BusUri::Pi3hat { carrier: Pi3hatCarrier::Auto });
    }
    let Some((scheme, rest)) = t.split_once(':') else {
        return Err(UriError::NotAnAddress { text: t.to_string() });
    };
    match scheme {
        "fdcanusb" => {
            if rest.is_empty() {
                return Err(UriError::NoDevicePath);
            }
            Ok(BusUri::Fdcanusb { path: rest.to_string() })
        }
        "socketcan" => {
            if rest.is_empty() || rest.len() > 15 || rest.contains('/') || rest.contains(char::is_whitespace) {
                return Err(UriError::Interface { iface: rest.to_string() });
            }
            Ok(BusUri::SocketCan { iface: rest.to_string() })
        }
        "udp" => parse_udp(rest),
        "pi3hat" => match rest {
            "spidev" => Ok(BusUri::Pi3hat { carrier: Pi3hatCarrier::Spidev }),
            "mem" => Ok(BusUri::Pi3hat { carrier: Pi3hatCarrier::Mem }),
            "sim" => Ok(BusUri::Pi3hat { carrier: Pi3hatCarrier::Sim }),
            other => Err(UriError::Carrier { carrier: other.to_string() }),
        },
        other => Err(UriError::UnknownTransport { scheme: other.to_string(), text: t.to_string() }),
    }
}

fn parse_udp(rest: &str) -> Result<BusUri, UriError> {
    let (addr, query) = match rest.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (rest, None),
    };
    let bad = || UriError::UdpAddress { rest: rest.to_string() };
    let (host, port) = if let Some(v6) = addr.strip_prefix('[') {
        let (h, p) = v6.split_once("]:").ok_or_else(bad)?;
        (h, p)
    } else {
        addr.rsplit_once(':').ok_or_else(bad)?
    };
    if host.is_empty() {
        return Err(bad());
    }
    let port: u16 = port.parse().map_err(|_| UriError::UdpPort { port: port.to_string() })?;
    if port == 0 {
        return Err(UriError::UdpPortZero);
    }
    let mut bus = 1u8;
    if let Some(q) = query {
        for kv in q.split('&') {
            match kv.split_once('=') {
                Some(("bus", v)) => {
                    bus = v.parse().ok().filter(|b| *b >= 1).ok_or_else(|| UriError::UdpBus { bus: v.to_string() })?
                }
                _ => return Err(UriError::UdpOption { option: kv.to_string(), rest: rest.to_string() }),
            }
        }
    }
    Ok(BusUri::Udp { host: host.to_string(), port, bus })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_address_carries_what_was_wrong() {
        assert_eq!(parse("udp:127.0.0.1:0"), Err(UriError::UdpPortZero));
        assert_eq!(parse("can:x"), Err(UriError::UnknownTransport { scheme: "can".into(), text: "can:x".into() }));
        let e = parse("udp:127.0.0.1:9000?bus=0").unwrap_err();
        assert_eq!(e, UriError::UdpBus { bus: "0".into() });
        assert_eq!(e.to_string(), "'0' is not a bus number: give ?bus=N with N from 1 to 255");
    }

    #[test]
    fn valid_addresses_parse_and_print_back() {
        for s in [
            "sim",
            "fdcanusb:/dev/ttyACM0",
            "socketcan:can0",
            "udp:127.0.0.1:9000",
            "udp:[::1]:9000?bus=3",
            "pi3hat",
            "pi3hat:spidev",
            "pi3hat:mem",
            "pi3hat:sim",
        ] {
            let u = parse(s).unwrap();
            assert_eq!(u.to_string(), s);
            assert_eq!(parse(&u.to_string()).unwrap(), u);
        }
        assert_eq!(parse("udp:localhost:7").unwrap(), BusUri::Udp { host: "localhost".into(), port: 7, bus: 1 });
    }

    #[test]
    fn mistakes_get_one_clear_message() {
        for (s, want) in [
            ("", "empty"),
            ("ttyACM0", "not a bus address"),
            ("serial:/dev/x", "unknown transport"),
            ("fdcanusb:", "device path"),
            ("socketcan:", "interface"),
            ("udp:127.0.0.1", "UDP address"),
            ("udp:127.0.0.1:99999", "port"),
            ("udp:127.0.0.1:0", "port 0"),
            ("udp:127.0.0.1:9000?bus=0", "bus number"),
            ("udp:127.0.0.1:9000?x=1", "unknown option"),
            ("pi3hat:usb", "not a way to reach a pi3hat"),
            ("pi3hat:", "not a way to reach a pi3hat"),
        ] {
            let e = parse(s).unwrap_err().to_string();
            assert!(e.contains(want), "{s:?}: {e}");
        }
    }
}
