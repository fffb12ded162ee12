//! Where the Foxglove server listens (`--foxglove ADDR`, `live.foxglove`, `rtloop log
//! serve --foxglove`): checked by the configuration whether or not this build has the
//! server.
//!
//! Must never: accept an address beyond loopback unless `allow_remote` says so.

use std::net::{SocketAddr, ToSocketAddrs};

/// Foxglove's default address.
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:8765";

/// Why [`parse_address`] refused an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressError {
    /// Not `HOST:PORT` (or a port alone).
    #[error("{text:?} is not an address: give HOST:PORT, e.g. {DEFAULT_ADDRESS}")]
    NotAnAddress {
        /// The text given.
        text: String,
    },
    /// An address beyond loopback without `allow_remote`.
    #[error(
        "{addr} is not a loopback address: add --allow-remote (live.allow_remote = true) to let other machines connect, or use 127.0.0.1"
    )]
    NotLoopback {
        /// The address.
        addr: SocketAddr,
    },
}

/// The address to serve on: `HOST:PORT` (`PORT` alone means loopback); a non-loopback
/// address only with `allow_remote`.
pub fn parse_address(text: &str, allow_remote: bool) -> Result<SocketAddr, AddressError> {
    let text = text.trim();
    let with_host = if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit()) {
        format!("127.0.0.1:{text}")
    } else {
        text.to_string()
    };
    let addr = with_host
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| AddressError::NotAnAddress { text: text.to_string() })?;
    if !addr.ip().is_loopback() && !allow_remote {
        return Err(AddressError::NotLoopback { addr });
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_by_default_and_anything_else_only_when_allowed() {
        assert_eq!(parse_address("8765", false).unwrap().to_string(), "127.0.0.1:8765");
        assert_eq!(parse_address("127.0.0.1:9000", false).unwrap().port(), 9000);
        assert_eq!(parse_address("[::1]:9000", false).unwrap().port(), 9000);
        let e = parse_address("0.0.0.0:8765", false).unwrap_err();
        assert_eq!(e, AddressError::NotLoopback { addr: "0.0.0.0:8765".parse().unwrap() });
        let e = e.to_string();
        assert!(e.contains("--allow-remote") && !e.contains('\n'), "{e}");
        assert!(parse_address("0.0.0.0:8765", true).is_ok());
        for bad in ["", "nonsense", "127.0.0.1:99999", "127.0.0.1"] {
            assert!(parse_address(bad, false).unwrap_err().to_string().contains("give HOST:PORT"), "{bad}");
        }
    }
}
