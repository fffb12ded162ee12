//! The CAN-FD frame as it crosses a bus, and the moteus arbitration-id layout.

use core::fmt;

/// The largest CAN-FD payload.
pub const MAX_DATA: usize = 64;

/// The byte moteus uses to pad a payload up to a valid CAN-FD length: a NOP subframe, so
/// the receiver's parser skips it.
pub const PAD_BYTE: u8 = 0x50;

/// The payload lengths CAN-FD can carry; a length between two of these is rounded up.
pub const DLC_LENGTHS: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 32, 48, 64];

/// Why a frame could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CanFdFrameError {
    /// More than 64 payload bytes.
    TooLong(usize),
    /// An identifier wider than 29 bits.
    IdTooWide(u32),
}

impl fmt::Display for CanFdFrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CanFdFrameError::TooLong(n) => write!(f, "payload of {n} bytes exceeds the CAN-FD maximum of 64"),
            CanFdFrameError::IdTooWide(id) => write!(f, "identifier {id:#x} is wider than 29 bits"),
        }
    }
}

impl core::error::Error for CanFdFrameError {}

/// Smallest valid CAN-FD payload length that holds `len` bytes, or `None` above 64.
pub const fn round_up_dlc(len: usize) -> Option<usize> {
    // A const fn cannot use iterators; walk the table by destructuring instead of indexing.
    let mut rest: &[u8] = &DLC_LENGTHS;
    while let [first, tail @ ..] = rest {
        if *first as usize >= len {
            return Some(*first as usize);
        }
        rest = tail;
    }
    None
}

/// The 4-bit DLC code for a valid payload length (`None` if `len` is not one of
/// [`DLC_LENGTHS`]).
pub fn dlc_code(len: usize) -> Option<u8> {
    DLC_LENGTHS.iter().position(|&l| l as usize == len).map(|i| i as u8)
}

/// Frame format flags. moteus traffic is FD with bitrate switch; the extended flag follows
/// the id width unless a transport says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FrameFlags {
    /// 29-bit identifier.
    pub extended: bool,
    /// FD format (up to 64 bytes).
    pub fd: bool,
    /// Bitrate switch: the data phase runs at the fast rate.
    pub brs: bool,
    /// Remote frame (classic CAN only; never used by moteus).
    pub remote: bool,
}

impl FrameFlags {
    /// The flags moteus clients use for an id: FD + BRS, extended when the id needs it.
    pub const fn moteus(id: u32) -> Self {
        FrameFlags { extended: id > 0x7FF, fd: true, brs: true, remote: false }
    }
}

/// One CAN-FD frame: id, up to 64 data bytes, flags. `Copy` and fixed-size so the hot path
/// can keep arrays of them without allocating.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CanFdFrame {
    /// Arbitration id (11 or 29 bits).
    pub id: u32,
    /// Number of valid bytes in `data`.
    pub len: u8,
    /// Payload storage; bytes past `len` are meaningless.
    pub data: [u8; MAX_DATA],
    /// Format flags.
    pub flags: FrameFlags,
}

impl Default for CanFdFrame {
    fn default() -> Self {
        CanFdFrame { id: 0, len: 0, data: [0; MAX_DATA], flags: FrameFlags::default() }
    }
}

impl fmt::Debug for CanFdFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CanFdFrame {{ id: {:#x}, data: ", self.id)?;
        for b in self.payload() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ", flags: {:?} }}", self.flags)
    }
}

impl CanFdFrame {
    /// A frame with `id`, a copy of `payload` and moteus flags (FD, BRS, extended if needed).
    pub fn new(id: u32, payload: &[u8]) -> Result<Self, CanFdFrameError> {
        if id > 0x1FFF_FFFF {
            return Err(CanFdFrameError::IdTooWide(id));
        }
        let mut f = CanFdFrame { id, flags: FrameFlags::moteus(id), ..Default::default() };
        f.set_payload(payload)?;
        Ok(f)
    }

    /// The valid payload bytes.
    pub fn payload(&self) -> &[u8] {
        self.data.get(..self.len as usize).unwrap_or(&self.data)
    }

    /// Replace the payload.
    pub fn set_payload(&mut self, payload: &[u8]) -> Result<(), CanFdFrameError> {
        if payload.len() > MAX_DATA {
            return Err(CanFdFrameError::TooLong(payload.len()));
        }
        let Some(dst) = self.data.get_mut(..payload.len()) else {
            return Err(CanFdFrameError::TooLong(payload.len()));
        };
        dst.copy_from_slice(payload);
        self.len = payload.len() as u8;
        Ok(())
    }

    /// Pad with [`PAD_BYTE`] up to the next valid CAN-FD length (a no-op when already valid).
    pub fn pad_to_dlc(&mut self) {
        let len = (self.len as usize).min(MAX_DATA);
        let padded = round_up_dlc(len).unwrap_or(MAX_DATA);
        if let Some(tail) = self.data.get_mut(len..padded) {
            tail.fill(PAD_BYTE);
        }
        self.len = padded as u8;
    }

    /// The moteus view of this frame's id.
    pub fn arbitration(&self) -> ArbitrationId {
        ArbitrationId::parse(self.id)
    }
}

/// The moteus layout of a 29-bit arbitration id:
/// `prefix << 16 | reply_required << 15 | source << 8 | destination`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ArbitrationId {
    /// 13-bit CAN prefix (0 by default).
    pub prefix: u16,
    /// Sender: the host id for commands, the servo id for replies (7 bits).
    pub source: u8,
    /// Receiver: the servo id for commands, the host id for replies; 0x7F is broadcast.
    pub destination: u8,
    /// Ask the destination to answer.
    pub reply_required: bool,
}

/// The destination that every servo accepts.
pub const BROADCAST: u8 = 0x7F;

impl ArbitrationId {
    /// A host command to servo `id` from host 0 with no prefix.
    pub const fn command(id: u8, reply_required: bool) -> Self {
        ArbitrationId { prefix: 0, source: 0, destination: id, reply_required }
    }

    /// The id a servo answers this command with.
    pub const fn reply(&self) -> Self {
        ArbitrationId { prefix: self.prefix, source: self.destination, destination: self.source, reply_required: false }
    }

    /// Pack into the 29-bit id. Out-of-range fields are masked to their widths.
    pub const fn build(&self) -> u32 {
        ((self.prefix as u32 & 0x1FFF) << 16)
            | if self.reply_required { 0x8000 } else { 0 }
            | ((self.source as u32 & 0x7F) << 8)
            | (self.destination as u32 & 0x7F)
    }

    /// Unpack any id; bits above 29 are ignored (every 29-bit value is a valid moteus id).
    pub const fn parse(id: u32) -> Self {
        ArbitrationId {
            prefix: ((id >> 16) & 0x1FFF) as u16,
            reply_required: id & 0x8000 != 0,
            source: ((id >> 8) & 0x7F) as u8,
            destination: (id & 0x7F) as u8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dlc_rounding_matches_can_fd_lengths() {
        assert_eq!(round_up_dlc(0), Some(0));
        assert_eq!(round_up_dlc(8), Some(8));
        assert_eq!(round_up_dlc(9), Some(12));
        assert_eq!(round_up_dlc(19), Some(20));
        assert_eq!(round_up_dlc(33), Some(48));
        assert_eq!(round_up_dlc(64), Some(64));
        assert_eq!(round_up_dlc(65), None);
        assert_eq!(dlc_code(20), Some(11));
        assert_eq!(dlc_code(21), None);
    }

    #[test]
    fn padding_uses_nop_byte() {
        let mut f = CanFdFrame::new(0x8001, &[0x01, 0x00, 0x00, 0x11, 0x00, 0x1f, 0x01, 0x13, 0x0d]).unwrap();
        f.pad_to_dlc();
        assert_eq!(f.payload(), &[0x01, 0x00, 0x00, 0x11, 0x00, 0x1f, 0x01, 0x13, 0x0d, 0x50, 0x50, 0x50]);
        assert!(f.flags.extended && f.flags.fd && f.flags.brs);
    }

    #[test]
    fn arbitration_ids_round_trip() {
        let cmd = ArbitrationId::command(1, true);
        assert_eq!(cmd.build(), 0x8001);
        assert_eq!(cmd.reply().build(), 0x0100);
        let id = ArbitrationId { prefix: 0x1abc, source: 0x12, destination: 0x7f, reply_required: true };
        assert_eq!(ArbitrationId::parse(id.build()), id);
        assert_eq!(CanFdFrame::new(0x2000_0000, &[]), Err(CanFdFrameError::IdTooWide(0x2000_0000)));
        assert_eq!(CanFdFrame::new(1, &[0; 65]), Err(CanFdFrameError::TooLong(65)));
    }
}
