//! The moteus register map: addresses, names and scale classes, modes and fault codes.
//!
//! What it is for: one place that says which register holds what, so encoders and
//! decoders on both sides scale a register the same way. What it must never do: guess —
//! an unknown register is a plain integer ([`ScaleClass::Int`]) and has no name.

use crate::value::ScaleClass;

/// Register addresses (spec §4).
pub mod reg {
    /// Current mode (see [`super::Mode`]); writing it selects the mode.
    pub const MODE: u16 = 0x000;
    /// Output position, revolutions.
    pub const POSITION: u16 = 0x001;
    /// Output velocity, revolutions per second.
    pub const VELOCITY: u16 = 0x002;
    /// Output torque, N·m.
    pub const TORQUE: u16 = 0x003;
    /// Q-axis current, A.
    pub const Q_CURRENT: u16 = 0x004;
    /// D-axis current, A.
    pub const D_CURRENT: u16 = 0x005;
    /// Absolute encoder position, revolutions.
    pub const ABS_POSITION: u16 = 0x006;
    /// Electrical power, W.
    pub const POWER: u16 = 0x007;
    /// Motor temperature, °C.
    pub const MOTOR_TEMPERATURE: u16 = 0x00A;
    /// Trajectory complete flag.
    pub const TRAJECTORY_COMPLETE: u16 = 0x00B;
    /// Home state.
    pub const HOME_STATE: u16 = 0x00C;
    /// Supply voltage, V.
    pub const VOLTAGE: u16 = 0x00D;
    /// Board temperature, °C.
    pub const TEMPERATURE: u16 = 0x00E;
    /// Fault code (see [`super::fault`]).
    pub const FAULT: u16 = 0x00F;

    /// Position-mode command: target position.
    pub const COMMAND_POSITION: u16 = 0x020;
    /// Position-mode command: target velocity.
    pub const COMMAND_VELOCITY: u16 = 0x021;
    /// Position-mode command: feedforward torque.
    pub const COMMAND_FEEDFORWARD_TORQUE: u16 = 0x022;
    /// Position-mode command: kp scale.
    pub const COMMAND_KP_SCALE: u16 = 0x023;
    /// Position-mode command: kd scale.
    pub const COMMAND_KD_SCALE: u16 = 0x024;
    /// Position-mode command: maximum torque.
    pub const COMMAND_MAXIMUM_TORQUE: u16 = 0x025;
    /// Position-mode command: stop position (deprecated).
    pub const COMMAND_STOP_POSITION: u16 = 0x026;
    /// Position-mode command: watchdog timeout, s (0 = default, NaN = none).
    pub const COMMAND_TIMEOUT: u16 = 0x027;
    /// Position-mode command: velocity limit.
    pub const COMMAND_VELOCITY_LIMIT: u16 = 0x028;
    /// Position-mode command: acceleration limit.
    pub const COMMAND_ACCEL_LIMIT: u16 = 0x029;
    /// Position-mode command: fixed-voltage override.
    pub const COMMAND_FIXED_VOLTAGE_OVERRIDE: u16 = 0x02A;
    /// Position-mode command: current limit scale.
    pub const COMMAND_ILIMIT_SCALE: u16 = 0x02B;
    /// Position-mode command: fixed-current override.
    pub const COMMAND_FIXED_CURRENT_OVERRIDE: u16 = 0x02C;
    /// Position-mode command: ignore position bounds.
    pub const COMMAND_IGNORE_POSITION_BOUNDS: u16 = 0x02D;

    /// Stay-within: lower bound.
    pub const STAY_WITHIN_LOWER_BOUND: u16 = 0x040;
    /// Stay-within: upper bound.
    pub const STAY_WITHIN_UPPER_BOUND: u16 = 0x041;
    /// Stay-within shadow of 0x022.
    pub const STAY_WITHIN_FEEDFORWARD_TORQUE: u16 = 0x042;
    /// Stay-within shadow of 0x023.
    pub const STAY_WITHIN_KP_SCALE: u16 = 0x043;
    /// Stay-within shadow of 0x024.
    pub const STAY_WITHIN_KD_SCALE: u16 = 0x044;
    /// Stay-within shadow of 0x025.
    pub const STAY_WITHIN_MAXIMUM_TORQUE: u16 = 0x045;
    /// Stay-within shadow of 0x027.
    pub const STAY_WITHIN_TIMEOUT: u16 = 0x046;
    /// Stay-within shadow of 0x02B.
    pub const STAY_WITHIN_ILIMIT_SCALE: u16 = 0x047;
    /// Stay-within shadow of 0x02D.
    pub const STAY_WITHIN_IGNORE_POSITION_BOUNDS: u16 = 0x048;

    /// Free-running millisecond counter.
    pub const MILLISECOND_COUNTER: u16 = 0x070;

    /// Model number.
    pub const MODEL_NUMBER: u16 = 0x100;
    /// Firmware version.
    pub const FIRMWARE_VERSION: u16 = 0x101;
    /// Register map version (5).
    pub const REGISTER_MAP_VERSION: u16 = 0x102;
    /// Multiplex (CAN) id.
    pub const MULTIPLEX_ID: u16 = 0x110;
    /// Serial number, word 1.
    pub const SERIAL_NUMBER1: u16 = 0x120;
    /// Serial number, word 2.
    pub const SERIAL_NUMBER2: u16 = 0x121;
    /// Serial number, word 3.
    pub const SERIAL_NUMBER3: u16 = 0x122;
    /// Set the output position to the nearest equivalent of this value.
    pub const SET_OUTPUT_NEAREST: u16 = 0x130;
    /// Set the output position to exactly this value.
    pub const SET_OUTPUT_EXACT: u16 = 0x131;
}

/// One register of a position-mode command: its address, the field name every API spells
/// it with, and how it scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandRegister {
    /// The register address (0x020..=0x02D).
    pub register: u16,
    /// The name of its field: [`crate::host::PositionCommand`]'s, the agent protocol's (bit
    /// `i` of `present` is entry `i`), and the Python API's keyword argument.
    pub name: &'static str,
    /// Its scale class ([`class_of`]).
    pub class: ScaleClass,
}

/// Number of position-mode command registers.
pub const POSITION_COMMAND_LEN: usize = 14;

const fn command(register: u16, name: &'static str) -> CommandRegister {
    CommandRegister { register, name, class: class_of(register) }
}

/// The position-mode command registers 0x020..=0x02D in register order: the one table the
/// encoder ([`crate::host::PositionCommand::entries`]), the agent protocol's field order and
/// the Python package's keyword arguments derive from (their tests compare against it).
pub const POSITION_COMMAND: [CommandRegister; POSITION_COMMAND_LEN] = [
    command(reg::COMMAND_POSITION, "position"),
    command(reg::COMMAND_VELOCITY, "velocity"),
    command(reg::COMMAND_FEEDFORWARD_TORQUE, "feedforward_torque"),
    command(reg::COMMAND_KP_SCALE, "kp_scale"),
    command(reg::COMMAND_KD_SCALE, "kd_scale"),
    command(reg::COMMAND_MAXIMUM_TORQUE, "maximum_torque"),
    command(reg::COMMAND_STOP_POSITION, "stop_position"),
    command(reg::COMMAND_TIMEOUT, "watchdog_timeout"),
    command(reg::COMMAND_VELOCITY_LIMIT, "velocity_limit"),
    command(reg::COMMAND_ACCEL_LIMIT, "accel_limit"),
    command(reg::COMMAND_FIXED_VOLTAGE_OVERRIDE, "fixed_voltage_override"),
    command(reg::COMMAND_ILIMIT_SCALE, "ilimit_scale"),
    command(reg::COMMAND_FIXED_CURRENT_OVERRIDE, "fixed_current_override"),
    command(reg::COMMAND_IGNORE_POSITION_BOUNDS, "ignore_position_bounds"),
];

/// The field names of [`POSITION_COMMAND`], in register order.
pub const POSITION_COMMAND_NAMES: [&str; POSITION_COMMAND_LEN] = {
    let mut names = [""; POSITION_COMMAND_LEN];
    let mut i = 0;
    while i < POSITION_COMMAND_LEN {
        // In range: `i` stops at the arrays' common length; evaluated at compile time.
        #[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
        {
            names[i] = POSITION_COMMAND[i].name;
            i += 1;
        }
    }
    names
};

/// The register map version this crate implements.
pub const REGISTER_MAP_VERSION: u8 = 5;

/// The scale class of a register; unknown registers are plain integers.
pub const fn class_of(r: u16) -> ScaleClass {
    match r {
        reg::POSITION
        | reg::ABS_POSITION
        | reg::COMMAND_POSITION
        | reg::COMMAND_STOP_POSITION
        | reg::STAY_WITHIN_LOWER_BOUND
        | reg::STAY_WITHIN_UPPER_BOUND
        | reg::SET_OUTPUT_NEAREST
        | reg::SET_OUTPUT_EXACT => ScaleClass::Position,
        reg::VELOCITY | reg::COMMAND_VELOCITY | reg::COMMAND_VELOCITY_LIMIT => ScaleClass::Velocity,
        reg::COMMAND_ACCEL_LIMIT => ScaleClass::Acceleration,
        reg::TORQUE
        | reg::COMMAND_FEEDFORWARD_TORQUE
        | reg::COMMAND_MAXIMUM_TORQUE
        | reg::STAY_WITHIN_FEEDFORWARD_TORQUE
        | reg::STAY_WITHIN_MAXIMUM_TORQUE => ScaleClass::Torque,
        reg::Q_CURRENT | reg::D_CURRENT | reg::COMMAND_FIXED_CURRENT_OVERRIDE => ScaleClass::Current,
        reg::VOLTAGE | reg::COMMAND_FIXED_VOLTAGE_OVERRIDE => ScaleClass::Voltage,
        reg::MOTOR_TEMPERATURE | reg::TEMPERATURE => ScaleClass::Temperature,
        reg::COMMAND_TIMEOUT | reg::STAY_WITHIN_TIMEOUT => ScaleClass::Time,
        reg::POWER => ScaleClass::Power,
        reg::COMMAND_KP_SCALE
        | reg::COMMAND_KD_SCALE
        | reg::COMMAND_ILIMIT_SCALE
        | reg::STAY_WITHIN_KP_SCALE
        | reg::STAY_WITHIN_KD_SCALE
        | reg::STAY_WITHIN_ILIMIT_SCALE => ScaleClass::Ratio,
        _ => ScaleClass::Int,
    }
}

/// The values an integer-valued register can hold, or `None` for a register that is not a
/// known integer: a scaled register, or one this map does not name (its meaning is unknown,
/// so a float reply is kept as it came rather than cut to an integer).
///
/// Readers truncate a float sent for an integer register toward zero, as the moteus
/// firmware and clients do (`int(x)` in Python); a value outside this range — mode 300,
/// fault -7, a NaN — is not a value of the register at all, and readers report it as
/// invalid instead of wrapping it (see [`crate::host::read_int_register`]).
pub const fn integer_range(r: u16) -> Option<(i32, i32)> {
    match r {
        reg::MODE | reg::FAULT | reg::HOME_STATE => Some((0, 255)),
        reg::TRAJECTORY_COMPLETE
        | reg::COMMAND_IGNORE_POSITION_BOUNDS
        | reg::STAY_WITHIN_IGNORE_POSITION_BOUNDS
        | reg::MILLISECOND_COUNTER
        | reg::MODEL_NUMBER
        | reg::FIRMWARE_VERSION
        | reg::REGISTER_MAP_VERSION
        | reg::MULTIPLEX_ID
        | reg::SERIAL_NUMBER1
        | reg::SERIAL_NUMBER2
        | reg::SERIAL_NUMBER3 => Some((i32::MIN, i32::MAX)),
        _ => None,
    }
}

/// The snake_case name of a known register.
pub const fn name_of(r: u16) -> Option<&'static str> {
    Some(match r {
        reg::MODE => "mode",
        reg::POSITION => "position",
        reg::VELOCITY => "velocity",
        reg::TORQUE => "torque",
        reg::Q_CURRENT => "q_current",
        reg::D_CURRENT => "d_current",
        reg::ABS_POSITION => "abs_position",
        reg::POWER => "power",
        reg::MOTOR_TEMPERATURE => "motor_temperature",
        reg::TRAJECTORY_COMPLETE => "trajectory_complete",
        reg::HOME_STATE => "home_state",
        reg::VOLTAGE => "voltage",
        reg::TEMPERATURE => "temperature",
        reg::FAULT => "fault",
        reg::COMMAND_POSITION => "command_position",
        reg::COMMAND_VELOCITY => "command_velocity",
        reg::COMMAND_FEEDFORWARD_TORQUE => "command_feedforward_torque",
        reg::COMMAND_KP_SCALE => "command_kp_scale",
        reg::COMMAND_KD_SCALE => "command_kd_scale",
        reg::COMMAND_MAXIMUM_TORQUE => "command_maximum_torque",
        reg::COMMAND_STOP_POSITION => "command_stop_position",
        reg::COMMAND_TIMEOUT => "command_timeout",
        reg::COMMAND_VELOCITY_LIMIT => "command_velocity_limit",
        reg::COMMAND_ACCEL_LIMIT => "command_accel_limit",
        reg::COMMAND_FIXED_VOLTAGE_OVERRIDE => "command_fixed_voltage_override",
        reg::COMMAND_ILIMIT_SCALE => "command_ilimit_scale",
        reg::COMMAND_FIXED_CURRENT_OVERRIDE => "command_fixed_current_override",
        reg::COMMAND_IGNORE_POSITION_BOUNDS => "command_ignore_position_bounds",
        reg::STAY_WITHIN_LOWER_BOUND => "stay_within_lower_bound",
        reg::STAY_WITHIN_UPPER_BOUND => "stay_within_upper_bound",
        reg::STAY_WITHIN_FEEDFORWARD_TORQUE => "stay_within_feedforward_torque",
        reg::STAY_WITHIN_KP_SCALE => "stay_within_kp_scale",
        reg::STAY_WITHIN_KD_SCALE => "stay_within_kd_scale",
        reg::STAY_WITHIN_MAXIMUM_TORQUE => "stay_within_maximum_torque",
        reg::STAY_WITHIN_TIMEOUT => "stay_within_timeout",
        reg::STAY_WITHIN_ILIMIT_SCALE => "stay_within_ilimit_scale",
        reg::STAY_WITHIN_IGNORE_POSITION_BOUNDS => "stay_within_ignore_position_bounds",
        reg::MILLISECOND_COUNTER => "millisecond_counter",
        reg::MODEL_NUMBER => "model_number",
        reg::FIRMWARE_VERSION => "firmware_version",
        reg::REGISTER_MAP_VERSION => "register_map_version",
        reg::MULTIPLEX_ID => "multiplex_id",
        reg::SERIAL_NUMBER1 => "serial_number1",
        reg::SERIAL_NUMBER2 => "serial_number2",
        reg::SERIAL_NUMBER3 => "serial_number3",
        reg::SET_OUTPUT_NEAREST => "set_output_nearest",
        reg::SET_OUTPUT_EXACT => "set_output_exact",
        _ => return None,
    })
}

/// Every register this crate names, ascending (for tables, tests and servers).
pub const ALL: [u16; 47] = [
    0x000, 0x001, 0x002, 0x003, 0x004, 0x005, 0x006, 0x007, 0x00A, 0x00B, 0x00C, 0x00D, 0x00E, 0x00F, 0x020, 0x021,
    0x022, 0x023, 0x024, 0x025, 0x026, 0x027, 0x028, 0x029, 0x02A, 0x02B, 0x02C, 0x02D, 0x040, 0x041, 0x042, 0x043,
    0x044, 0x045, 0x046, 0x047, 0x048, 0x070, 0x100, 0x101, 0x102, 0x110, 0x120, 0x121, 0x122, 0x130, 0x131,
];

/// Controller modes (register 0x000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Mode {
    /// Output off; writing it also clears a fault.
    Stopped = 0,
    /// Latched fault (see register 0x00F).
    Fault = 1,
    /// Internal: enabling.
    Enabling = 2,
    /// Internal: calibrating.
    Calibrating = 3,
    /// Internal: calibration complete.
    CalibrationComplete = 4,
    /// Raw PWM.
    Pwm = 5,
    /// Voltage.
    Voltage = 6,
    /// Voltage FOC.
    VoltageFoc = 7,
    /// Voltage DQ.
    VoltageDq = 8,
    /// Current.
    Current = 9,
    /// Position.
    Position = 10,
    /// Watchdog timeout: holds zero velocity with damping; only a stop leaves it.
    Timeout = 11,
    /// Zero velocity.
    ZeroVelocity = 12,
    /// Stay within bounds.
    StayWithin = 13,
    /// Measure inductance.
    MeasureInductance = 14,
    /// Brake: windings shorted.
    Brake = 15,
}

impl Mode {
    /// The mode with this number, if there is one.
    pub const fn from_u8(v: u8) -> Option<Mode> {
        Some(match v {
            0 => Mode::Stopped,
            1 => Mode::Fault,
            2 => Mode::Enabling,
            3 => Mode::Calibrating,
            4 => Mode::CalibrationComplete,
            5 => Mode::Pwm,
            6 => Mode::Voltage,
            7 => Mode::VoltageFoc,
            8 => Mode::VoltageDq,
            9 => Mode::Current,
            10 => Mode::Position,
            11 => Mode::Timeout,
            12 => Mode::ZeroVelocity,
            13 => Mode::StayWithin,
            14 => Mode::MeasureInductance,
            15 => Mode::Brake,
            _ => return None,
        })
    }

    /// The register value.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }
}

/// Fault codes (register 0x00F) and limit flags reported without a fault (spec §5).
pub mod fault {
    /// No fault.
    pub const NONE: u8 = 0;
    /// Calibration fault.
    pub const CALIBRATION: u8 = 32;
    /// Motor driver fault.
    pub const MOTOR_DRIVER: u8 = 33;
    /// Over-voltage.
    pub const OVER_VOLTAGE: u8 = 34;
    /// Encoder fault.
    pub const ENCODER: u8 = 35;
    /// Not configured.
    pub const NOT_CONFIGURED: u8 = 36;
    /// PWM cycle overrun.
    pub const PWM_CYCLE_OVERRUN: u8 = 37;
    /// Over-temperature.
    pub const OVER_TEMPERATURE: u8 = 38;
    /// Outside limit.
    pub const OUTSIDE_LIMIT: u8 = 39;
    /// Under-voltage.
    pub const UNDER_VOLTAGE: u8 = 40;
    /// Configuration changed.
    pub const CONFIG_CHANGED: u8 = 41;
    /// Theta invalid.
    pub const THETA_INVALID: u8 = 42;
    /// Position invalid.
    pub const POSITION_INVALID: u8 = 43;
    /// Driver enable fault.
    pub const DRIVER_ENABLE: u8 = 44;
    /// Timing violation.
    pub const TIMING_VIOLATION: u8 = 46;
    /// Invalid limits.
    pub const INVALID_LIMITS: u8 = 48;
    /// Position control error.
    pub const POSITION_CONTROL_ERROR: u8 = 49;
    /// Velocity control error.
    pub const VELOCITY_CONTROL_ERROR: u8 = 50;
    /// Limit flag: max velocity.
    pub const LIMIT_MAX_VELOCITY: u8 = 96;
    /// Limit flag: max power.
    pub const LIMIT_MAX_POWER: u8 = 97;
    /// Limit flag: system voltage.
    pub const LIMIT_SYSTEM_VOLTAGE: u8 = 98;
    /// Limit flag: max current.
    pub const LIMIT_MAX_CURRENT: u8 = 99;
    /// Limit flag: fault temperature.
    pub const LIMIT_FAULT_TEMPERATURE: u8 = 100;
    /// Limit flag: motor temperature.
    pub const LIMIT_MOTOR_TEMPERATURE: u8 = 101;
    /// Limit flag: commanded max torque.
    pub const LIMIT_COMMANDED_MAX_TORQUE: u8 = 102;
    /// Limit flag: position bounds.
    pub const LIMIT_POSITION_BOUNDS: u8 = 103;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_register_is_listed_and_names_are_unique() {
        for (i, &r) in ALL.iter().enumerate() {
            let name = name_of(r).unwrap();
            for &other in &ALL[i + 1..] {
                assert!(other > r);
                assert_ne!(name_of(other), Some(name));
            }
        }
        let named = (0..=u16::MAX).filter(|&r| name_of(r).is_some()).count();
        assert_eq!(named, ALL.len());
        // The integer registers are exactly the named ones of class Int.
        for r in 0..=u16::MAX {
            let named_int = name_of(r).is_some() && class_of(r) == ScaleClass::Int;
            assert_eq!(integer_range(r).is_some(), named_int, "{r:#x}");
        }
    }

    #[test]
    fn the_position_command_table_is_registers_0x020_to_0x02d_in_order() {
        for (i, c) in POSITION_COMMAND.iter().enumerate() {
            assert_eq!(c.register, reg::COMMAND_POSITION + i as u16, "{}", c.name);
            assert_eq!(c.class, class_of(c.register), "{}", c.name);
            assert_eq!(POSITION_COMMAND_NAMES[i], c.name);
            // The register's own name is the field's, prefixed (0x027 is the watchdog timeout).
            let register_name = name_of(c.register).unwrap();
            let field = if c.name == "watchdog_timeout" { "timeout" } else { c.name };
            assert_eq!(register_name.strip_prefix("command_"), Some(field));
        }
        assert_eq!(POSITION_COMMAND[13].register, reg::COMMAND_IGNORE_POSITION_BOUNDS);
    }

    #[test]
    fn classes_and_modes() {
        assert_eq!(class_of(reg::COMMAND_KP_SCALE), ScaleClass::Ratio);
        assert_eq!(class_of(reg::STAY_WITHIN_TIMEOUT), ScaleClass::Time);
        assert_eq!(class_of(reg::SET_OUTPUT_EXACT), ScaleClass::Position);
        assert_eq!(class_of(reg::FAULT), ScaleClass::Int);
        assert_eq!(class_of(0x777), ScaleClass::Int);
        for v in 0..=255u8 {
            assert_eq!(Mode::from_u8(v).map(Mode::as_u8), (v <= 15).then_some(v));
        }
    }
}
