//! The telemetry records a simulated servo serves on its console (`tel list`): the names and
//! fields the moteus firmware uses, so moteus_tool (`--info` reads `firmware` and `git`,
//! calibration and the old zero-offset path read `servo_stats`) and tview (which plots any
//! field) read them unchanged.
//!
//! Each record is a plain serde struct; its schema and data bytes come from the TLOG
//! crate's encoder ([`rtloop_tlog::schema::schema_of`], [`rtloop_tlog::ser::to_bytes`]) — the same bytes a
//! TLOG file carries, one implementation for both. Must never: change a field's type or
//! order without the schema following (they are derived from the same struct), or report a
//! value the simulated servo does not have (fields the model lacks are fixed, documented
//! values: 0, or NaN where the firmware uses NaN for "none").

use serde::Serialize;

use crate::servo::{Servo, FIRMWARE_VERSION, MODEL_NUMBER};

/// `firmware`: identity, as the firmware's `FirmwareInfo` reports it.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Firmware {
    /// Firmware ABI version (the same value as register 0x101).
    pub version: u32,
    /// The three serial-number words (registers 0x120-0x122).
    pub serial_number: [u32; 3],
    /// Model number (register 0x100).
    pub model: u32,
    /// Board family (0: moteus r4).
    pub family: u8,
    /// Hardware revision.
    pub hwrev: u8,
}

/// `git`: the build the firmware came from. The simulator reports a fixed hash derived
/// from rtloop's version, clean, with the release's timestamp.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Git {
    /// 20-byte commit hash.
    pub hash: [u8; 20],
    /// Built from a modified tree.
    pub dirty: bool,
    /// Commit time, s since the UNIX epoch.
    pub timestamp: u64,
}

/// `servo_stats`: what the control loop measures and does (a subset of the firmware's
/// fields, with its names and units).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ServoStats {
    /// Mode (0 stopped, 1 fault, 10 position, 11 timeout, 12 zero velocity, 13 stay
    /// within, 15 brake).
    pub mode: u8,
    /// Fault code (0: none).
    pub fault: u32,
    /// Phase currents, A (the model's q current spread over the phases).
    #[serde(rename = "cur1_A")]
    pub cur1_a: f32,
    /// Phase 2 current, A.
    #[serde(rename = "cur2_A")]
    pub cur2_a: f32,
    /// Phase 3 current, A.
    #[serde(rename = "cur3_A")]
    pub cur3_a: f32,
    /// Supply voltage, V.
    #[serde(rename = "bus_V")]
    pub bus_v: f32,
    /// Filtered supply voltage, V.
    #[serde(rename = "filt_bus_V")]
    pub filt_bus_v: f32,
    /// Board (FET) temperature, °C.
    #[serde(rename = "fet_temp_C")]
    pub fet_temp_c: f32,
    /// Filtered board temperature, °C.
    #[serde(rename = "filt_fet_temp_C")]
    pub filt_fet_temp_c: f32,
    /// Motor temperature, °C.
    #[serde(rename = "motor_temp_C")]
    pub motor_temp_c: f32,
    /// Filtered motor temperature, °C.
    #[serde(rename = "filt_motor_temp_C")]
    pub filt_motor_temp_c: f32,
    /// D-axis current, A.
    #[serde(rename = "d_A")]
    pub d_a: f32,
    /// Q-axis current, A.
    #[serde(rename = "q_A")]
    pub q_a: f32,
    /// Output position, rev.
    pub position: f32,
    /// Output velocity, rev/s.
    pub velocity: f32,
    /// Output torque, N·m.
    #[serde(rename = "torque_Nm")]
    pub torque_nm: f32,
    /// Electrical power, W.
    #[serde(rename = "power_W")]
    pub power_w: f32,
    /// Filtered velocity, rev/s.
    pub velocity_filt: f32,
    /// Raw position (the output position in 2^-24 rev steps: moteus_tool's old
    /// zero-offset path reads it).
    pub position_raw: i64,
    /// Control (setpoint) position, rev; NaN outside position mode.
    pub control_position: f32,
    /// Control velocity, rev/s.
    pub control_velocity: f32,
    /// Seconds left before the watchdog trips; NaN without a watchdog.
    pub timeout_s: f32,
    /// The position-mode trajectory reached its target.
    pub trajectory_done: bool,
    /// Frames the servo has handled.
    pub frames_received: u64,
    /// Times the watchdog latched mode 11.
    pub watchdog_expiries: u64,
}

impl Default for ServoStats {
    fn default() -> Self {
        ServoStats {
            mode: 0,
            fault: 0,
            cur1_a: 0.0,
            cur2_a: 0.0,
            cur3_a: 0.0,
            bus_v: 0.0,
            filt_bus_v: 0.0,
            fet_temp_c: 0.0,
            filt_fet_temp_c: 0.0,
            motor_temp_c: 0.0,
            filt_motor_temp_c: 0.0,
            d_a: 0.0,
            q_a: 0.0,
            position: 0.0,
            velocity: 0.0,
            torque_nm: 0.0,
            power_w: 0.0,
            velocity_filt: 0.0,
            position_raw: 0,
            control_position: f32::NAN,
            control_velocity: 0.0,
            timeout_s: f32::NAN,
            trajectory_done: false,
            frames_received: 0,
            watchdog_expiries: 0,
        }
    }
}

/// `servo_cmd`: the command in force, with the firmware's field names. Unset fields are NaN.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ServoCmd {
    /// Mode in force.
    pub mode: u8,
    /// Target position, rev.
    pub position: f32,
    /// Target velocity, rev/s.
    pub velocity: f32,
    /// Feedforward torque, N·m.
    #[serde(rename = "feedforward_Nm")]
    pub feedforward_nm: f32,
    /// Position gain scale.
    pub kp_scale: f32,
    /// Velocity gain scale.
    pub kd_scale: f32,
    /// Torque limit of this command, N·m.
    #[serde(rename = "max_torque_Nm")]
    pub max_torque_nm: f32,
    /// Watchdog timeout of this command, s.
    pub timeout_s: f32,
    /// Velocity limit, rev/s.
    pub velocity_limit: f32,
    /// Acceleration limit, rev/s².
    pub accel_limit: f32,
    /// Stay-within lower bound, rev.
    pub bounds_min: f32,
    /// Stay-within upper bound, rev.
    pub bounds_max: f32,
}

impl Default for ServoCmd {
    fn default() -> Self {
        ServoCmd {
            mode: 0,
            position: f32::NAN,
            velocity: f32::NAN,
            feedforward_nm: f32::NAN,
            kp_scale: f32::NAN,
            kd_scale: f32::NAN,
            max_torque_nm: f32::NAN,
            timeout_s: f32::NAN,
            velocity_limit: f32::NAN,
            accel_limit: f32::NAN,
            bounds_min: f32::NAN,
            bounds_max: f32::NAN,
        }
    }
}

/// The records, in `tel list` order.
pub const NAMES: [&str; 4] = ["firmware", "git", "servo_stats", "servo_cmd"];

/// Index of record `name` in [`NAMES`].
pub fn index_of(name: &str) -> Option<usize> {
    NAMES.iter().position(|n| *n == name)
}

/// The binary schema of record `index` (mjlib's schema encoding).
pub fn schema(index: usize) -> Vec<u8> {
    let schema = match index {
        0 => rtloop_tlog::schema::schema_of::<Firmware>(),
        1 => rtloop_tlog::schema::schema_of::<Git>(),
        2 => rtloop_tlog::schema::schema_of::<ServoStats>(),
        _ => rtloop_tlog::schema::schema_of::<ServoCmd>(),
    };
    // The record types are fixed structs of scalars and fixed arrays, which schema_of
    // always handles (a unit test checks each); an empty schema would only make a reader
    // refuse the record, never mis-decode it.
    schema.map(|s| s.to_binary()).unwrap_or_default()
}

/// Append the data of record `index`, as the servo is now, to `out`.
pub fn data(index: usize, servo: &Servo, out: &mut Vec<u8>) {
    // Encoding plain structs into a Vec cannot fail (see `schema`).
    let _ = match index {
        0 => rtloop_tlog::ser::to_bytes(&firmware(servo), out),
        1 => rtloop_tlog::ser::to_bytes(&git(), out),
        2 => rtloop_tlog::ser::to_bytes(&servo_stats(servo), out),
        _ => rtloop_tlog::ser::to_bytes(&servo_cmd(servo), out),
    };
}

/// The `firmware` record of `servo`.
pub fn firmware(servo: &Servo) -> Firmware {
    Firmware {
        version: FIRMWARE_VERSION as u32,
        serial_number: servo.serial_number(),
        model: MODEL_NUMBER as u32,
        family: 0,
        hwrev: 7,
    }
}

/// The `git` record: a hash made from rtloop's version string, so a tool shows which
/// simulator answered.
pub fn git() -> Git {
    let mut hash = [0u8; 20];
    let version = concat!("rtloop-sim ", env!("CARGO_PKG_VERSION")).as_bytes();
    for (slot, byte) in hash.iter_mut().zip(version.iter().cycle()) {
        *slot = *byte;
    }
    Git { hash, dirty: false, timestamp: 1_790_000_000 }
}

/// The `servo_stats` record of `servo`.
pub fn servo_stats(servo: &Servo) -> ServoStats {
    let t = servo.telemetry();
    // A balanced three-phase current whose peak is the q current, sampled at the
    // electrical angle of the joint (7 pole pairs): believable, and zero at rest.
    let theta = t.position * 7.0 * core::f64::consts::TAU;
    let third = core::f64::consts::TAU / 3.0;
    let phase = |shift: f64| (t.q_current * (theta - shift).sin()) as f32;
    ServoStats {
        mode: t.mode,
        fault: u32::from(t.fault),
        cur1_a: phase(0.0),
        cur2_a: phase(third),
        cur3_a: phase(2.0 * third),
        bus_v: t.voltage as f32,
        filt_bus_v: t.voltage as f32,
        fet_temp_c: t.board_temperature as f32,
        filt_fet_temp_c: t.board_temperature as f32,
        motor_temp_c: t.motor_temperature as f32,
        filt_motor_temp_c: t.motor_temperature as f32,
        d_a: t.d_current as f32,
        q_a: t.q_current as f32,
        position: t.position as f32,
        velocity: t.velocity as f32,
        torque_nm: t.torque as f32,
        power_w: t.power as f32,
        velocity_filt: t.velocity as f32,
        position_raw: position_raw(t.position),
        control_position: t.control_position as f32,
        control_velocity: servo.control_velocity() as f32,
        timeout_s: servo.watchdog_remaining_s() as f32,
        trajectory_done: t.trajectory_complete,
        frames_received: t.frames_received,
        watchdog_expiries: t.watchdog_expiries,
    }
}

/// Position in 2^-24 rev steps, saturating (NaN → 0).
fn position_raw(position: f64) -> i64 {
    (position * f64::from(1u32 << 24)) as i64
}

/// The `servo_cmd` record of `servo`.
pub fn servo_cmd(servo: &Servo) -> ServoCmd {
    let c = servo.command_registers();
    let f = |i: usize| c.get(i).copied().unwrap_or(f64::NAN) as f32;
    ServoCmd {
        mode: servo.mode(),
        position: f(0),
        velocity: f(1),
        feedforward_nm: f(2),
        kp_scale: f(3),
        kd_scale: f(4),
        max_torque_nm: f(5),
        timeout_s: f(7),
        velocity_limit: f(8),
        accel_limit: f(9),
        bounds_min: f(14),
        bounds_max: f(15),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::servo::ServoConfig;

    #[test]
    fn every_record_has_a_schema_its_data_decodes_against() {
        let servo = Servo::new(ServoConfig::new(3));
        for (i, name) in NAMES.iter().enumerate() {
            let schema =
                rtloop_tlog::schema::Schema::parse_binary(&schema(i)).unwrap_or_else(|e| panic!("{name}: {e}"));
            let mut bytes = Vec::new();
            data(i, &servo, &mut bytes);
            let value = rtloop_tlog::value::decode(&schema, &bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            let mut flat = Vec::new();
            value.flatten("", &mut flat);
            assert!(flat.len() >= 3, "{name}: {flat:?}");
        }
        let mut bytes = Vec::new();
        data(0, &servo, &mut bytes);
        let schema = rtloop_tlog::schema::Schema::parse_binary(&schema(0)).unwrap();
        let mut flat = Vec::new();
        rtloop_tlog::value::decode(&schema, &bytes).unwrap().flatten("", &mut flat);
        let serial0 = flat.iter().find(|(k, _)| k.contains("serial_number")).map(|(_, v)| v.as_f64());
        assert_eq!(serial0, Some(Some(f64::from(servo.serial_number()[0]))));
    }
}
