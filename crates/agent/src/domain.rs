//! What the spine accepts as a reset's physical parameters ([`DomainBlock`]): every value
//! range-checked before the simulated world takes it (`docs/agent-protocol.md` section 9).

use crate::layout::{domain, DomainBlock, MAX_LATENCY_CYCLES, MAX_SERVOS};
use std::fmt;

/// The range of every scalar and per-servo field of a [`DomainBlock`]: (field, lowest,
/// highest). The protocol document's table lists the same (a test compares them).
pub const DOMAIN_RANGES: [(&str, f64, f64); 7] = [
    ("friction_scale", 0.1, 3.0),
    ("mass_scale", 0.5, 2.0),
    ("payload_kg", 0.0, 20.0),
    ("kp_scale", 0.1, 3.0),
    ("kd_scale", 0.1, 3.0),
    ("joint_offset_rad", -1.0, 1.0),
    ("joint_velocity_rad_s", -20.0, 20.0),
];

/// The range of a push's start, duration (s) and of each force component (N).
pub const PUSH_AT_MAX_S: f64 = 86_400.0;
/// Longest push, s.
pub const PUSH_DURATION_MAX_S: f64 = 10.0;
/// Largest force component of a push, N.
pub const PUSH_FORCE_MAX_N: f64 = 1000.0;

/// A [`DomainBlock`] value the spine refuses, in one sentence.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum DomainError {
    /// Bits of `flags` this protocol does not define.
    UnknownFlags(u32),
    /// `latency_cycles` above [`MAX_LATENCY_CYCLES`].
    Latency(u32),
    /// A value out of its range (NaN and infinities included).
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The servo slot, for a per-servo field; the push slot, for a push.
        slot: Option<usize>,
        /// The value.
        value: f64,
        /// Lowest allowed.
        min: f64,
        /// Highest allowed.
        max: f64,
    },
}

impl fmt::Display for DomainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DomainError::UnknownFlags(bits) => write!(
                f,
                "the reset's domain flags 0x{bits:x} hold bits this protocol does not define; set only bit 0 (apply)"
            ),
            DomainError::Latency(n) => write!(
                f,
                "the reset's latency_cycles {n} is above {MAX_LATENCY_CYCLES}; give 0 to {MAX_LATENCY_CYCLES} cycles"
            ),
            DomainError::OutOfRange { field, slot, value, min, max } => {
                let at = slot.map_or_else(String::new, |s| format!("[{s}]"));
                write!(f, "the reset's {field}{at} {value} is outside {min} to {max}; give a value within it")
            }
        }
    }
}

impl std::error::Error for DomainError {}

fn check(field: &'static str, slot: Option<usize>, value: f64, min: f64, max: f64) -> Result<(), DomainError> {
    if value.is_finite() && (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(DomainError::OutOfRange { field, slot, value, min, max })
    }
}

fn range(field: &str) -> (f64, f64) {
    DOMAIN_RANGES.iter().find(|(f, ..)| *f == field).map_or((0.0, 0.0), |&(_, lo, hi)| (lo, hi))
}

/// Check a reset's domain for a robot of `servo_count` servos (slots past it are never
/// read). A block without [`domain::APPLY`] is the nominal world and always accepted. No
/// allocation.
pub fn validate_domain(d: &DomainBlock, servo_count: usize) -> Result<(), DomainError> {
    if d.flags & !domain::APPLY != 0 {
        return Err(DomainError::UnknownFlags(d.flags & !domain::APPLY));
    }
    if d.flags & domain::APPLY == 0 {
        return Ok(());
    }
    if d.latency_cycles > MAX_LATENCY_CYCLES {
        return Err(DomainError::Latency(d.latency_cycles));
    }
    for (field, value) in
        [("friction_scale", d.friction_scale), ("mass_scale", d.mass_scale), ("payload_kg", d.payload_kg)]
    {
        let (lo, hi) = range(field);
        check(field, None, value, lo, hi)?;
    }
    let n = servo_count.min(MAX_SERVOS);
    let per_servo: [(&'static str, &[f64; MAX_SERVOS]); 4] = [
        ("kp_scale", &d.kp_scale),
        ("kd_scale", &d.kd_scale),
        ("joint_offset_rad", &d.joint_offset_rad),
        ("joint_velocity_rad_s", &d.joint_velocity_rad_s),
    ];
    for (field, values) in per_servo {
        let (lo, hi) = range(field);
        for (slot, &v) in values[..n].iter().enumerate() {
            check(field, Some(slot), v, lo, hi)?;
        }
    }
    for (slot, p) in d.pushes.iter().enumerate() {
        check("pushes.duration_s", Some(slot), p.duration_s, 0.0, PUSH_DURATION_MAX_S)?;
        if p.duration_s == 0.0 {
            continue;
        }
        check("pushes.at_s", Some(slot), p.at_s, 0.0, PUSH_AT_MAX_S)?;
        for &force in &p.force_n {
            check("pushes.force_n", Some(slot), force, -PUSH_FORCE_MAX_N, PUSH_FORCE_MAX_N)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nominal_world_passes_and_every_bad_value_is_one_sentence() {
        let mut d = DomainBlock::NOMINAL;
        assert_eq!(validate_domain(&d, 12), Ok(()));
        d.flags = domain::APPLY;
        assert_eq!(validate_domain(&d, 12), Ok(()));
        type Edit = fn(&mut DomainBlock);
        let bad: [(Edit, &str); 7] = [
            (|d| d.friction_scale = f64::NAN, "friction_scale NaN is outside 0.1 to 3"),
            (|d| d.mass_scale = 9.0, "mass_scale 9 is outside"),
            (|d| d.kp_scale[3] = 0.0, "kp_scale[3] 0 is outside"),
            (|d| d.joint_velocity_rad_s[11] = f64::INFINITY, "joint_velocity_rad_s[11] inf"),
            (|d| d.latency_cycles = 33, "latency_cycles 33 is above 32"),
            (
                |d| d.pushes[1] = crate::PushBlock { at_s: -1.0, duration_s: 0.1, force_n: [0.0; 3] },
                "pushes.at_s[1] -1",
            ),
            (|d| d.flags = 3, "flags 0x2"),
        ];
        for (edit, words) in bad {
            let mut d = DomainBlock { flags: domain::APPLY, ..DomainBlock::NOMINAL };
            edit(&mut d);
            let e = validate_domain(&d, 12).unwrap_err().to_string();
            assert!(e.contains(words), "{e}");
            assert!(!e.contains('\n') && e.contains("; "), "{e}");
        }
        // Slots past the robot's servos are never read.
        let mut d = DomainBlock { flags: domain::APPLY, ..DomainBlock::NOMINAL };
        d.kp_scale[20] = f64::NAN;
        assert_eq!(validate_domain(&d, 12), Ok(()));
        // Not applied: nothing in it matters.
        d.flags = 0;
        d.mass_scale = f64::NAN;
        assert_eq!(validate_domain(&d, 12), Ok(()));
    }
}
