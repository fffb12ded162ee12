//! What the spine accepts from an agent: one servo command checked against [`Limits`].
//!
//! Rules (the same in `docs/agent-protocol.md`):
//! * `kind` is 0..=4, anything else is [`ServoCommandError::UnknownKind`];
//! * `present` has only bits 0..=13 ([`ServoCommandError::UnknownFieldBits`]), and none unless
//!   `kind` is position ([`ServoCommandError::FieldsWithoutPosition`]);
//! * every present field is finite, except `position`, where NaN means "hold the current
//!   position" (infinities are refused there too);
//! * every present field is within its range in [`Limits`];
//! * the overrides (`fixed_voltage_override`, `fixed_current_override`,
//!   `ignore_position_bounds`) are refused unless [`Limits::allow_overrides`];
//! * `watchdog_timeout` must be positive and at most [`Limits::watchdog_max_s`] — an agent may
//!   not switch the servo's watchdog off (NaN) or lengthen it without bound.

use crate::layout::{kind, RawServoCommand, FIELD_COUNT, FIELD_MASK, FIELD_NAMES};
#[cfg(doc)]
use rtloop_proto::host::PositionCommand;
use std::fmt;

/// Bounds on what an agent may command. The defaults suit a small legged robot; the
/// integrator sets them from the robot's configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Lowest `position` and `stop_position`, rev.
    pub position_min: f64,
    /// Highest `position` and `stop_position`, rev.
    pub position_max: f64,
    /// Largest |`velocity`| and `velocity_limit`, rev/s.
    pub max_velocity: f64,
    /// Largest `accel_limit`, rev/s².
    pub max_accel: f64,
    /// Largest |`feedforward_torque`| and `maximum_torque`, N·m.
    pub max_torque: f64,
    /// Largest `kp_scale` (the lowest is 0).
    pub max_kp_scale: f64,
    /// Largest `kd_scale` (the lowest is 0).
    pub max_kd_scale: f64,
    /// Largest `ilimit_scale` (the lowest is 0).
    pub max_ilimit_scale: f64,
    /// Shortest `watchdog_timeout`, s (must be positive).
    pub watchdog_min_s: f64,
    /// Longest `watchdog_timeout`, s.
    pub watchdog_max_s: f64,
    /// Accept `fixed_voltage_override`, `fixed_current_override` and `ignore_position_bounds`.
    pub allow_overrides: bool,
    /// Largest |`fixed_voltage_override`|, V (when overrides are allowed).
    pub max_fixed_voltage: f64,
    /// Largest |`fixed_current_override`|, A (when overrides are allowed).
    pub max_fixed_current: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            position_min: -10.0,
            position_max: 10.0,
            max_velocity: 20.0,
            max_accel: 200.0,
            max_torque: 10.0,
            max_kp_scale: 1.0,
            max_kd_scale: 1.0,
            max_ilimit_scale: 1.0,
            watchdog_min_s: 0.001,
            watchdog_max_s: 10.0,
            allow_overrides: false,
            max_fixed_voltage: 5.0,
            max_fixed_current: 5.0,
        }
    }
}

/// Position-mode fields, `None` = not sent: moteus' position command (registers
/// 0x020..=0x02D, in bit order [`PositionCommand::to_registers`]).
pub type PositionFields = rtloop_proto::host::PositionCommand;

/// A command that passed [`validate`].
// Returned by value on the hot path; boxing the large variant would allocate.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValidCommand {
    /// Only query the servo.
    Query,
    /// Mode 0: stop.
    Stop,
    /// Mode 12: hold zero velocity.
    ZeroVelocity,
    /// Mode 15: brake.
    Brake,
    /// Mode 10: position control.
    Position(PositionFields),
}

/// Why a servo command was refused. Every variant displays as one sentence.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum ServoCommandError {
    /// `kind` is not 0..=4.
    UnknownKind(u32),
    /// `present` has bits above bit 13 (the value shows only those bits).
    UnknownFieldBits(u32),
    /// `present` has bits although `kind` is not position.
    FieldsWithoutPosition {
        /// The command's kind.
        kind: u32,
        /// The command's `present`.
        present: u32,
    },
    /// A present field is NaN or infinite (NaN is allowed for `position` only).
    NonFinite {
        /// The field's name.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// A present field is outside its range.
    OutOfRange {
        /// The field's name.
        field: &'static str,
        /// Its value.
        value: f64,
        /// Lowest accepted.
        min: f64,
        /// Highest accepted.
        max: f64,
    },
    /// An override field is present but [`Limits::allow_overrides`] is off.
    OverrideNotAllowed {
        /// The field's name.
        field: &'static str,
    },
    /// The command block's `servo_count` is not the header's.
    ServoCount {
        /// What the agent wrote.
        got: u32,
        /// The header's `servo_count`.
        expected: u32,
    },
    /// A servo slot past the header's `servo_count`.
    NoSuchServo {
        /// The slot.
        index: usize,
        /// The header's `servo_count`.
        count: u32,
    },
}

impl fmt::Display for ServoCommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; {}", self.what(), self.fix())
    }
}

/// What is wrong with a refused command, without the fix ([`ServoCommandError::what`]).
#[derive(Debug, Clone, Copy)]
pub struct What<'a>(&'a ServoCommandError);

impl fmt::Display for What<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self.0 {
            ServoCommandError::UnknownKind(k) => write!(f, "command kind {k} is unknown"),
            ServoCommandError::UnknownFieldBits(b) => write!(f, "present bits {b:#x} name no field"),
            ServoCommandError::FieldsWithoutPosition { kind, present } => {
                write!(f, "present is {present:#x} on a command of kind {kind}")
            }
            ServoCommandError::NonFinite { field, value } => write!(f, "{field} is {value}"),
            ServoCommandError::OutOfRange { field, value, min, max } => {
                write!(f, "{field} {value} is outside the allowed range {min} to {max}")
            }
            ServoCommandError::OverrideNotAllowed { field } => {
                write!(f, "{field} is an override this spine does not allow")
            }
            ServoCommandError::ServoCount { got, expected } => {
                write!(f, "the command block's servo_count is {got} but the spine has {expected} servos")
            }
            ServoCommandError::NoSuchServo { index, count } => {
                write!(f, "servo slot {index} does not exist, the spine has {count} servos")
            }
        }
    }
}

impl std::error::Error for ServoCommandError {}

impl ServoCommandError {
    /// What is wrong, as the first half of its sentence ("maximum_torque 10 is outside the
    /// allowed range 0 to 8"); [`ServoCommandError::fix`] is the second.
    pub fn what(&self) -> What<'_> {
        What(self)
    }

    /// How to fix it, the second half of its sentence ("send a value within it").
    pub fn fix(&self) -> &'static str {
        match self {
            ServoCommandError::UnknownKind(_) => {
                "use 0 (query), 1 (stop), 2 (zero velocity), 3 (brake) or 4 (position)"
            }
            ServoCommandError::UnknownFieldBits(_) => "only bits 0 to 13 are defined",
            ServoCommandError::FieldsWithoutPosition { .. } => "set fields only on position commands (kind 4)",
            ServoCommandError::NonFinite { .. } => {
                "send a finite value (NaN is allowed for position only, meaning hold)"
            }
            ServoCommandError::OutOfRange { .. } => "send a value within it",
            ServoCommandError::OverrideNotAllowed { .. } => "leave its present bit clear",
            ServoCommandError::ServoCount { .. } => "write servo_count = header servo_count",
            ServoCommandError::NoSuchServo { .. } => "command only the slots below the header's servo_count",
        }
    }

    /// The field it is about, when it is about one.
    pub fn field(&self) -> Option<&'static str> {
        match *self {
            ServoCommandError::NonFinite { field, .. }
            | ServoCommandError::OutOfRange { field, .. }
            | ServoCommandError::OverrideNotAllowed { field } => Some(field),
            _ => None,
        }
    }

    /// Whether `other` has the same cause: the same kind of error about the same field
    /// (the values may differ).
    pub fn same_cause(&self, other: &ServoCommandError) -> bool {
        core::mem::discriminant(self) == core::mem::discriminant(other) && self.field() == other.field()
    }
}

/// Check one servo command against `limits`. Never panics, whatever the bytes.
pub fn validate(raw: &RawServoCommand, limits: &Limits) -> Result<ValidCommand, ServoCommandError> {
    let present = raw.present;
    if present & !FIELD_MASK != 0 {
        return Err(ServoCommandError::UnknownFieldBits(present & !FIELD_MASK));
    }
    let simple = match raw.kind {
        kind::QUERY => Some(ValidCommand::Query),
        kind::STOP => Some(ValidCommand::Stop),
        kind::ZERO_VELOCITY => Some(ValidCommand::ZeroVelocity),
        kind::BRAKE => Some(ValidCommand::Brake),
        kind::POSITION => None,
        k => return Err(ServoCommandError::UnknownKind(k)),
    };
    if let Some(cmd) = simple {
        if present != 0 {
            return Err(ServoCommandError::FieldsWithoutPosition { kind: raw.kind, present });
        }
        return Ok(cmd);
    }
    let l = limits;
    // (min, max) per field in bit order; `None` = an override.
    let ranges: [Option<(f64, f64)>; FIELD_COUNT] = [
        Some((l.position_min, l.position_max)),
        Some((-l.max_velocity, l.max_velocity)),
        Some((-l.max_torque, l.max_torque)),
        Some((0.0, l.max_kp_scale)),
        Some((0.0, l.max_kd_scale)),
        Some((0.0, l.max_torque)),
        Some((l.position_min, l.position_max)),
        Some((l.watchdog_min_s, l.watchdog_max_s)),
        Some((0.0, l.max_velocity)),
        Some((0.0, l.max_accel)),
        if l.allow_overrides { Some((-l.max_fixed_voltage, l.max_fixed_voltage)) } else { None },
        Some((0.0, l.max_ilimit_scale)),
        if l.allow_overrides { Some((-l.max_fixed_current, l.max_fixed_current)) } else { None },
        if l.allow_overrides { Some((0.0, 1.0)) } else { None },
    ];
    let values = raw.fields();
    let mut out = [None; FIELD_COUNT];
    for i in 0..FIELD_COUNT {
        if present & (1 << i) == 0 {
            continue;
        }
        let (field, value) = (FIELD_NAMES[i], values[i]);
        let Some((min, max)) = ranges[i] else {
            return Err(ServoCommandError::OverrideNotAllowed { field });
        };
        if i == 0 && value.is_nan() {
            out[i] = Some(value);
            continue;
        }
        if !value.is_finite() {
            return Err(ServoCommandError::NonFinite { field, value });
        }
        // `!(a <= b)` style: a NaN limit refuses everything rather than accepting it.
        if !(value >= min && value <= max) {
            return Err(ServoCommandError::OutOfRange { field, value, min, max });
        }
        out[i] = Some(value);
    }
    Ok(ValidCommand::Position(PositionFields::from_registers(out)))
}
