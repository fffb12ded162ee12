//! Exact bit counts and wire times of CAN and CAN-FD frames (ISO 11898-1:2015 layout).
//!
//! What it is for: telling the simulated bus how long a frame occupies the wire, and the
//! cycle-time model how long representative frames take — counted bit by bit, with the
//! dynamic stuff bits computed from the frame's actual bit values.
//! What it must never do: allocate, panic on any frame (lengths are clamped), or depend on
//! anything but the frame and the two bit rates.
//!
//! # Derivation
//!
//! A CAN-FD frame with bit-rate switch (BRS) is sent as:
//!
//! | phase | extended id (29 bit) | base id (11 bit) |
//! |---|---|---|
//! | nominal rate | SOF, base id 11, SRR, IDE, id ext 18, RRS, FDF, res, BRS (36 bits) | SOF, id 11, RRS, IDE, FDF, res, BRS (17 bits) |
//! | data rate | ESI, DLC 4, data 8·n | same |
//! | data rate | stuff count 4 + CRC-17 (n ≤ 16) or CRC-21 (n > 16), fixed stuff bits, CRC delimiter | same |
//! | nominal rate | ACK slot, ACK delimiter, EOF 7, intermission 3 (12 bits) | same |
//!
//! *Dynamic stuffing* covers SOF through the last data bit: after five consecutive equal
//! bits the transmitter inserts one complementary bit, which itself starts the next run.
//! It is computed here from the real bit values (ids MSB first, dominant = 0, SOF = 0,
//! SRR/IDE/FDF recessive = 1 as the layout requires, ESI = 0 for an error-active node). A
//! stuff bit due right after the BRS bit is sent at the data rate, since the rate switches
//! at BRS's sample point. A stuff bit due right after the last data bit is *not* added:
//! the CRC field's first fixed stuff bit takes its place (ISO 11898-1:2015 §10.5).
//!
//! *Fixed stuffing* covers the stuff-count and CRC fields: one fixed stuff bit before the
//! stuff count and one after every four bits of (stuff count + CRC). For CRC-17 that is
//! 1 + ⌊21/4⌋ = 6 bits, for CRC-21 1 + ⌊25/4⌋ = 7 bits. They are inserted regardless of the
//! bit values, so the CRC itself need not be computed: only the count matters.
//!
//! The data field has the DLC-rounded length (12, 16, 20, 24, 32, 48, 64 above 8 bytes); a
//! frame whose length is not already valid is counted as if padded with 0x50, as moteus
//! and the pi3hat do on the wire.
//!
//! Without BRS the same bits are all sent at the nominal rate. A classic (non-FD) frame has
//! RTR/r1/r0 instead of RRS/FDF/res/BRS, at most 8 data bytes, a CRC-15 that is stuffed
//! dynamically (so it is computed here, from the real polynomial), a CRC delimiter, and the
//! same 12-bit tail, all at the nominal rate.

use rtloop_proto::frame::{dlc_code, round_up_dlc, CanFdFrame, MAX_DATA, PAD_BYTE};

/// The bits of one frame on the wire, split by the rate they are sent at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FrameBits {
    /// Bits sent at the nominal (arbitration) rate, stuff bits included.
    pub nominal_bits: u32,
    /// Bits sent at the data rate, stuff bits included (0 without BRS).
    pub data_bits: u32,
    /// All stuff bits, dynamic and fixed (already counted in the two fields above).
    pub stuff_bits: u32,
    /// The dynamic stuff bits alone: the part that depends on the frame's contents.
    pub dynamic_stuff_bits: u32,
    /// Length of the data field on the wire after DLC rounding, bytes.
    pub data_bytes: u32,
}

impl FrameBits {
    /// All bits of the frame, intermission included.
    pub fn total(&self) -> u32 {
        self.nominal_bits + self.data_bits
    }

    /// Time on the wire in nanoseconds, rounded up; a zero bit rate is treated as 1 bit/s.
    pub fn time_ns(&self, nominal_bitrate: u32, data_bitrate: u32) -> u64 {
        let nominal = u128::from(nominal_bitrate.max(1));
        let data = u128::from(data_bitrate.max(1));
        // One common denominator so that a frame's time is rounded once, not per phase.
        let num =
            u128::from(self.nominal_bits) * 1_000_000_000 * data + u128::from(self.data_bits) * 1_000_000_000 * nominal;
        let den = nominal * data;
        let ns = num.div_ceil(den);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

/// Counts bits while tracking runs of equal bits for dynamic stuffing.
struct BitCounter {
    last: bool,
    run: u32,
    stuff_due: bool,
    in_data_phase: bool,
    nominal: u32,
    data: u32,
    dynamic_stuff: u32,
    /// CRC-15 register for classic frames (the only CRC whose stuffing depends on values).
    crc15: u16,
}

impl BitCounter {
    fn new() -> Self {
        // The idle bus is recessive (1), so SOF (0) starts a fresh run.
        BitCounter {
            last: true,
            run: 0,
            stuff_due: false,
            in_data_phase: false,
            nominal: 0,
            data: 0,
            dynamic_stuff: 0,
            crc15: 0,
        }
    }

    fn count(&mut self, n: u32) {
        if self.in_data_phase {
            self.data += n;
        } else {
            self.nominal += n;
        }
    }

    /// One bit inside the dynamically stuffed region.
    fn stuffed(&mut self, bit: bool) {
        if self.stuff_due {
            // The stuff bit is the complement of the run and starts a new run of one.
            self.stuff_due = false;
            self.count(1);
            self.dynamic_stuff += 1;
            self.last = !self.last;
            self.run = 1;
        }
        self.count(1);
        if bit == self.last {
            self.run += 1;
        } else {
            self.last = bit;
            self.run = 1;
        }
        if self.run == 5 {
            self.stuff_due = true;
        }
        // CRC-15/CAN, polynomial 0x4599, over the unstuffed bits.
        let feedback = bit ^ (self.crc15 & 0x4000 != 0);
        self.crc15 = (self.crc15 << 1) & 0x7FFF;
        if feedback {
            self.crc15 ^= 0x4599;
        }
    }

    /// `n` bits of `value`, most significant first, inside the stuffed region.
    fn stuffed_bits(&mut self, value: u32, n: u32) {
        for i in (0..n).rev() {
            self.stuffed((value >> i) & 1 != 0);
        }
    }

    /// End of the dynamically stuffed region of a classic frame: a stuff bit that is due
    /// after the last CRC bit is still sent.
    fn flush_stuff(&mut self) {
        if self.stuff_due {
            self.stuff_due = false;
            self.count(1);
            self.dynamic_stuff += 1;
        }
    }
}

/// Count the bits of `frame` as it appears on the wire. See the module docs for the layout.
/// Never panics: lengths above 64 are clamped, a classic frame carries at most 8 bytes.
pub fn frame_bits(frame: &CanFdFrame) -> FrameBits {
    let id = frame.id & 0x1FFF_FFFF;
    let extended = frame.flags.extended || id > 0x7FF;
    let len = (frame.len as usize).min(MAX_DATA);
    let mut c = BitCounter::new();

    c.stuffed(false); // SOF
    if frame.flags.fd {
        let wire_len = round_up_dlc(len).unwrap_or(MAX_DATA);
        if extended {
            c.stuffed_bits(id >> 18, 11);
            c.stuffed(true); // SRR
            c.stuffed(true); // IDE
            c.stuffed_bits(id & 0x3FFFF, 18);
            c.stuffed(false); // RRS
        } else {
            c.stuffed_bits(id, 11);
            c.stuffed(false); // RRS
            c.stuffed(false); // IDE
        }
        c.stuffed(true); // FDF
        c.stuffed(false); // res
        c.stuffed(frame.flags.brs); // BRS
        c.in_data_phase = frame.flags.brs;
        c.stuffed(false); // ESI: error active
        c.stuffed_bits(u32::from(dlc_code(wire_len).unwrap_or(15)), 4);
        for i in 0..wire_len {
            let byte = if i < len { frame.data[i] } else { PAD_BYTE };
            c.stuffed_bits(u32::from(byte), 8);
        }
        // A pending dynamic stuff bit is replaced by the first fixed stuff bit.
        let crc_len = if wire_len <= 16 { 17 } else { 21 };
        let field = 4 + crc_len; // stuff count (3-bit Gray code + parity) + CRC
        let fixed = 1 + field / 4;
        c.count(field + fixed + 1); // + CRC delimiter
        c.in_data_phase = false;
        c.count(12); // ACK slot, ACK delimiter, EOF 7, intermission 3
        FrameBits {
            nominal_bits: c.nominal,
            data_bits: c.data,
            stuff_bits: c.dynamic_stuff + fixed,
            dynamic_stuff_bits: c.dynamic_stuff,
            data_bytes: wire_len as u32,
        }
    } else {
        let remote = frame.flags.remote;
        let data_len = if remote { 0 } else { len.min(8) };
        let dlc = len.min(8) as u32;
        if extended {
            c.stuffed_bits(id >> 18, 11);
            c.stuffed(true); // SRR
            c.stuffed(true); // IDE
            c.stuffed_bits(id & 0x3FFFF, 18);
            c.stuffed(remote); // RTR: recessive for a remote frame
            c.stuffed(false); // r1
            c.stuffed(false); // r0
        } else {
            c.stuffed_bits(id, 11);
            c.stuffed(remote); // RTR
            c.stuffed(false); // IDE
            c.stuffed(false); // r0
        }
        c.stuffed_bits(dlc, 4);
        for &byte in &frame.data[..data_len] {
            c.stuffed_bits(u32::from(byte), 8);
        }
        let crc = u32::from(c.crc15);
        c.stuffed_bits(crc, 15);
        c.flush_stuff();
        c.count(1 + 12); // CRC delimiter, then ACK, ACK delimiter, EOF, intermission
        FrameBits {
            nominal_bits: c.nominal,
            data_bits: 0,
            stuff_bits: c.dynamic_stuff,
            dynamic_stuff_bits: c.dynamic_stuff,
            data_bytes: data_len as u32,
        }
    }
}

/// Time `frame` occupies the wire at the given rates (bit/s), rounded up to a nanosecond.
pub fn frame_time_ns(frame: &CanFdFrame, nominal_bitrate: u32, data_bitrate: u32) -> u64 {
    frame_bits(frame).time_ns(nominal_bitrate, data_bitrate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtloop_proto::frame::FrameFlags;

    fn fd(id: u32, payload: &[u8]) -> CanFdFrame {
        CanFdFrame::new(id, payload).unwrap()
    }

    #[test]
    fn classic_sized_fd_frame_counts() {
        // Extended id 0x8001, 8 bytes of alternating bits: no stuffing in the data.
        let f = fd(0x8001, &[0x55; 8]);
        let b = frame_bits(&f);
        // Arbitration: 36 bits + stuff bits from the long zero runs in id 0x8001, then 12 tail.
        assert!(b.nominal_bits >= 48 && b.nominal_bits <= 56, "{b:?}");
        // ESI + DLC + 64 data + 4 + 17 + 6 fixed + delimiter = 97 (+ a few dynamic).
        assert!(b.data_bits >= 97 && b.data_bits <= 100, "{b:?}");
        assert_eq!(b.data_bytes, 8);
        // 1 Mbit/s + 5 Mbit/s: about 50 µs + 20 µs.
        let t = b.time_ns(1_000_000, 5_000_000);
        assert!((65_000..80_000).contains(&t), "{t}");
    }

    #[test]
    fn extended_id_zero_runs_are_stuffed_exactly() {
        // id 0: SOF + 11 zero bits → stuff after 5 zeros twice (0 00000s 00000s 0)...
        let mut f = fd(0, &[]);
        f.flags.extended = true;
        let b = frame_bits(&f);
        // Bits before BRS: SOF 0, base 00000000000, SRR 1, IDE 1, ext 18×0, RRS 0, FDF 1, res 0, BRS 1.
        // Run of 12 zeros (SOF+11): stuffs after bit 5 and after bit 10 (stuff bits restart
        // runs): 0000 0s 0000 0s 00 → 2; then 11, then 19 zeros (18 ext + RRS): 0000 0s 0000
        // 0s 0000 0s 0000 → 3 (the stuff 1 after IDE's 1 1 breaks nothing). Total 5.
        assert_eq!(b.nominal_bits, 36 + 5 + 12);
        // ESI 0, DLC 0000 after BRS 1: 5 zeros → a stuff bit is due after the last DLC bit
        // and is replaced by the fixed stuff bit (no data bytes). 1 + 4 + 21 + 6 + 1 = 33.
        assert_eq!(b.data_bits, 33);
        assert_eq!(b.dynamic_stuff_bits, 5);
        assert_eq!(b.stuff_bits, 11);
    }

    #[test]
    fn sixty_four_byte_frame_uses_crc21() {
        let f = fd(0x8001, &[0x55; 64]);
        let b = frame_bits(&f);
        // 1 + 4 + 512 + 4 + 21 + 7 + 1 = 550 plus a little stuffing from the DLC.
        assert!(b.data_bits >= 550 && b.data_bits <= 553, "{b:?}");
        assert_eq!(b.data_bytes, 64);
        let t = b.time_ns(1_000_000, 5_000_000);
        assert!((155_000..165_000).contains(&t), "{t}");
    }

    #[test]
    fn stuffing_grows_with_runs_of_equal_bits() {
        let zeros = frame_bits(&fd(0x8001, &[0x00; 64]));
        let ones = frame_bits(&fd(0x8001, &[0xFF; 64]));
        let alternating = frame_bits(&fd(0x8001, &[0x55; 64]));
        // 512 equal bits → one stuff bit after every 5 (the complementary stuff bit does
        // not extend the run of data bits): ≈ 102.
        assert!(zeros.dynamic_stuff_bits > 100, "{zeros:?}");
        assert!(ones.dynamic_stuff_bits > 100, "{ones:?}");
        assert!(alternating.dynamic_stuff_bits < 5, "{alternating:?}");
        assert!(zeros.data_bits > alternating.data_bits + 95);
    }

    #[test]
    fn short_payload_is_counted_as_padded() {
        let short = fd(0x8001, &[0x01, 0x00, 0x00, 0x11, 0x00, 0x1f, 0x01, 0x13, 0x0d]);
        let mut padded = short;
        padded.pad_to_dlc();
        assert_eq!(padded.len, 12);
        assert_eq!(frame_bits(&short), frame_bits(&padded));
    }

    #[test]
    fn no_brs_sends_everything_at_nominal_rate() {
        let mut f = fd(0x8001, &[0x55; 8]);
        let with = frame_bits(&f);
        f.flags.brs = false;
        let without = frame_bits(&f);
        assert_eq!(without.data_bits, 0);
        assert_eq!(without.total(), with.total());
        assert!(without.time_ns(1_000_000, 5_000_000) > with.time_ns(1_000_000, 5_000_000));
    }

    #[test]
    fn classic_frames_and_garbage_lengths_do_not_panic() {
        let mut f = CanFdFrame { id: 0x123, len: 8, flags: FrameFlags::default(), ..Default::default() };
        let b = frame_bits(&f);
        // SOF + 11 + RTR + IDE + r0 + 4 + 64 + 15 CRC + stuffing, then 13.
        assert!(b.nominal_bits >= 111 && b.nominal_bits < 140, "{b:?}");
        f.len = 200;
        let _ = frame_bits(&f);
        f.flags.fd = true;
        f.id = u32::MAX;
        let b = frame_bits(&f);
        assert_eq!(b.data_bytes, 64);
        f.flags.remote = true;
        f.flags.fd = false;
        let _ = frame_bits(&f);
        assert_eq!(frame_time_ns(&f, 0, 0), u64::from(frame_bits(&f).total()) * 1_000_000_000);
    }
}
