//! The protocol's variable-length unsigned integer: 7 bits per byte, least significant group
//! first, 0x80 = more bytes follow, at most 5 bytes.
//!
//! What it is for: register numbers, counts, error codes and stream lengths in subframes.
//! What it must never do: read past the input, accept more than 5 bytes or a value wider
//! than 32 bits, or panic.

/// The most bytes a varuint may take (enough for 32 bits).
pub const MAX_LEN: usize = 5;

/// Why a varuint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VaruintError {
    /// The input ended while the continuation bit was still set (or before any byte).
    Truncated,
    /// More than 5 bytes, or a value that does not fit in 32 bits.
    TooLong,
}

impl core::fmt::Display for VaruintError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            VaruintError::Truncated => f.write_str("varuint truncated"),
            VaruintError::TooLong => f.write_str("varuint longer than 5 bytes or wider than 32 bits"),
        }
    }
}

impl core::error::Error for VaruintError {}

/// Read a varuint from the start of `input`: `(value, bytes consumed)`.
pub fn decode(input: &[u8]) -> Result<(u32, usize), VaruintError> {
    let mut value: u32 = 0;
    for (i, shift) in (0..MAX_LEN).zip([0u32, 7, 14, 21, 28]) {
        let byte = *input.get(i).ok_or(VaruintError::Truncated)?;
        let group = u32::from(byte & 0x7F);
        // The fifth byte may only carry the top 4 bits of a u32.
        if shift == 28 && group > 0x0F {
            return Err(VaruintError::TooLong);
        }
        value |= group << shift;
        if byte & 0x80 == 0 {
            return Ok((value, i.saturating_add(1)));
        }
    }
    Err(VaruintError::TooLong)
}

/// Encode `value` into a fixed buffer: `(buffer, length)`.
pub fn encode(mut value: u32) -> ([u8; MAX_LEN], usize) {
    let mut out = [0u8; MAX_LEN];
    let mut len = 0usize;
    for slot in out.iter_mut() {
        let group = (value & 0x7F) as u8;
        value >>= 7;
        len = len.saturating_add(1);
        if value == 0 {
            *slot = group;
            break;
        }
        *slot = group | 0x80;
    }
    (out, len)
}

/// Bytes [`encode`] would produce for `value`.
pub const fn encoded_len(value: u32) -> usize {
    match value {
        0..=0x7F => 1,
        0x80..=0x3FFF => 2,
        0x4000..=0x1F_FFFF => 3,
        0x20_0000..=0xFFF_FFFF => 4,
        _ => 5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_boundaries() {
        for v in [0u32, 1, 0x7F, 0x80, 0x3FFF, 0x4000, 0xFFFF, 0x1F_FFFF, 0x20_0000, u32::MAX] {
            let (buf, len) = encode(v);
            assert_eq!(len, encoded_len(v));
            assert_eq!(decode(&buf[..len]), Ok((v, len)));
        }
        assert_eq!(encode(300).0[..2], [0xAC, 0x02]);
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(decode(&[]), Err(VaruintError::Truncated));
        assert_eq!(decode(&[0x80]), Err(VaruintError::Truncated));
        assert_eq!(decode(&[0xFF, 0xFF, 0xFF, 0xFF, 0x10]), Err(VaruintError::TooLong));
        assert_eq!(decode(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]), Err(VaruintError::TooLong));
        assert_eq!(decode(&[0xFF, 0xFF, 0xFF, 0xFF, 0x0F]), Ok((u32::MAX, 5)));
    }
}
