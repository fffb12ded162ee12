// FROZEN copy of crates/proto/src/host.rs as of commit 57a042a (before the codec speed-up):
// the reference the optimised codec must match byte for byte. Do not edit.
//! The host side: commands out, replies in.
//!
//! What it is for: building the payloads the moteus Python client 1.1.1 builds (position,
//! stop, zero-velocity, brake, query) byte for byte, and reading a servo's reply into a
//! [`ServoState`]. What it must never do: write past 64 bytes (it returns [`EncodeError`]),
//! allocate, or panic on any reply, however malformed.
//!
//! Every encoder is all-or-nothing: when a command does not fit, the writer is left as it
//! was and the error says how much was missing.
//!
//! Every command goes through the same "write combiner" as the official clients
//! ([`encode_writes`] / [`encode_reads`]): unset registers are skipped, a run of
//! consecutive registers with one resolution becomes one subframe, and a gap or a change
//! of resolution starts the next.

use super::register::{class_of, integer_range, reg, Mode};
use super::subframe::{subframes, DecodeError, Subframe};
use super::value::{Resolution, Value};
use super::writer::{EncodeError, FrameWriter};

/// Most values one register subframe can carry in a 64-byte payload (64 int8 values
/// would already need more than 64 bytes with their header).
const MAX_RUN: usize = 64;

/// Write the registers that are set, grouping runs the way the official clients do.
///
/// Each entry is `(register, value, resolution)`; `None` values are skipped. Runs are only
/// formed between entries that are adjacent in the slice, so give the registers in
/// ascending order for the fewest subframes; any order still encodes correctly. Values are
/// scaled with the register's [`class_of`]. The mode register, if present, must come
/// first.
pub fn encode_writes(w: &mut FrameWriter, entries: &[(u16, Option<f64>, Resolution)]) -> Result<(), EncodeError> {
    w.atomically(|w| encode_writes_inner(w, entries))
}

fn encode_writes_inner(w: &mut FrameWriter, entries: &[(u16, Option<f64>, Resolution)]) -> Result<(), EncodeError> {
    let mut values = [Value::I8(0); MAX_RUN];
    let mut run_len = 0usize;
    let mut run_start = 0u16;
    let mut run_res = Resolution::Int8;
    // The register the next value must have to extend the current run.
    let mut next_reg: Option<u16> = None;

    for &(r, x, res) in entries {
        let Some(x) = x else {
            continue;
        };
        let extends = run_len > 0 && run_len < MAX_RUN && res == run_res && next_reg == Some(r);
        if !extends && run_len > 0 {
            w.write_registers(run_start, values.get(..run_len).unwrap_or(&[]))?;
            run_len = 0;
        }
        if run_len == 0 {
            run_start = r;
            run_res = res;
        }
        if let Some(slot) = values.get_mut(run_len) {
            *slot = encode_register(r, x, res);
            run_len = run_len.saturating_add(1);
        }
        next_reg = r.checked_add(1);
    }
    if run_len > 0 {
        w.write_registers(run_start, values.get(..run_len).unwrap_or(&[]))?;
    }
    Ok(())
}

/// `x` for register `r` at `res`, scaled with its [`class_of`]. An integer register
/// ([`integer_range`]) at float resolution is truncated toward zero first, as the Python
/// client's `int(value)` does (0.7 → 0.0, -0.0 → +0.0); the integer resolutions truncate
/// anyway. NaN and ±inf pass unchanged.
pub fn encode_register(r: u16, x: f64, res: Resolution) -> Value {
    let x = if res == Resolution::Float && integer_range(r).is_some() { truncated(x) } else { x };
    Value::encode(x, class_of(r), res)
}

/// `x` truncated toward zero (a zero result is +0.0); non-finite `x` is returned as is.
/// (`f64::trunc` needs `std`.)
fn truncated(x: f64) -> f64 {
    // At or beyond 2^53 every f64 is already an integer.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if x > -EXACT && x < EXACT {
        // Exact: |x| < 2^53 fits an i64, and the integer converts back without rounding.
        (x as i64) as f64
    } else {
        x
    }
}

/// Read registers, one read subframe per run of consecutive registers with one
/// resolution (same grouping rule as [`encode_writes`]).
pub fn encode_reads(w: &mut FrameWriter, regs: &[(u16, Resolution)]) -> Result<(), EncodeError> {
    w.atomically(|w| encode_reads_inner(w, regs))
}

fn encode_reads_inner(w: &mut FrameWriter, regs: &[(u16, Resolution)]) -> Result<(), EncodeError> {
    let mut run: Option<(u16, u16, Resolution)> = None; // (start, count, res)
    for &(r, res) in regs {
        if let Some((start, count, run_res)) = run {
            let extended = count.checked_add(1).filter(|_| run_res == res && start.checked_add(count) == Some(r));
            if let Some(count) = extended {
                run = Some((start, count, run_res));
                continue;
            }
            w.read_registers(start, count, run_res)?;
        }
        run = Some((r, 1, res));
    }
    if let Some((start, count, res)) = run {
        w.read_registers(start, count, res)?;
    }
    Ok(())
}

/// A position-mode command (registers 0x020..=0x02D). `None` fields are not sent, so the
/// servo keeps its default for them. Units: revolutions, seconds, N·m, A, V.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PositionCommand {
    /// 0x020 target position (NaN = hold current position).
    pub position: Option<f64>,
    /// 0x021 target velocity.
    pub velocity: Option<f64>,
    /// 0x022 feedforward torque.
    pub feedforward_torque: Option<f64>,
    /// 0x023 kp scale.
    pub kp_scale: Option<f64>,
    /// 0x024 kd scale.
    pub kd_scale: Option<f64>,
    /// 0x025 maximum torque.
    pub maximum_torque: Option<f64>,
    /// 0x026 stop position (deprecated).
    pub stop_position: Option<f64>,
    /// 0x027 watchdog timeout (0 = servo default, NaN = none).
    pub watchdog_timeout: Option<f64>,
    /// 0x028 velocity limit.
    pub velocity_limit: Option<f64>,
    /// 0x029 acceleration limit.
    pub accel_limit: Option<f64>,
    /// 0x02A fixed-voltage override.
    pub fixed_voltage_override: Option<f64>,
    /// 0x02B current limit scale.
    pub ilimit_scale: Option<f64>,
    /// 0x02C fixed-current override.
    pub fixed_current_override: Option<f64>,
    /// 0x02D ignore position bounds.
    pub ignore_position_bounds: Option<f64>,
}

/// The resolution each [`PositionCommand`] field is sent at. Default: all Float, like the
/// Python client 1.1.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // one field per PositionCommand field, same names
pub struct PositionResolution {
    pub position: Resolution,
    pub velocity: Resolution,
    pub feedforward_torque: Resolution,
    pub kp_scale: Resolution,
    pub kd_scale: Resolution,
    pub maximum_torque: Resolution,
    pub stop_position: Resolution,
    pub watchdog_timeout: Resolution,
    pub velocity_limit: Resolution,
    pub accel_limit: Resolution,
    pub fixed_voltage_override: Resolution,
    pub ilimit_scale: Resolution,
    pub fixed_current_override: Resolution,
    pub ignore_position_bounds: Resolution,
}

impl Default for PositionResolution {
    fn default() -> Self {
        Self::all(Resolution::Float)
    }
}

impl PositionResolution {
    /// Resolutions of the 14 position-mode registers 0x020..=0x02D, in register order.
    pub const fn from_registers(r: [Resolution; 14]) -> Self {
        let [position, velocity, feedforward_torque, kp_scale, kd_scale, maximum_torque, stop_position, watchdog_timeout, velocity_limit, accel_limit, fixed_voltage_override, ilimit_scale, fixed_current_override, ignore_position_bounds] =
            r;
        PositionResolution {
            position,
            velocity,
            feedforward_torque,
            kp_scale,
            kd_scale,
            maximum_torque,
            stop_position,
            watchdog_timeout,
            velocity_limit,
            accel_limit,
            fixed_voltage_override,
            ilimit_scale,
            fixed_current_override,
            ignore_position_bounds,
        }
    }

    /// Every field at `res`.
    pub const fn all(res: Resolution) -> Self {
        Self::from_registers([res; 14])
    }
}

impl PositionCommand {
    /// Values of the 14 position-mode registers 0x020..=0x02D, in register order
    /// (`None` = not sent).
    pub const fn from_registers(v: [Option<f64>; 14]) -> Self {
        let [position, velocity, feedforward_torque, kp_scale, kd_scale, maximum_torque, stop_position, watchdog_timeout, velocity_limit, accel_limit, fixed_voltage_override, ilimit_scale, fixed_current_override, ignore_position_bounds] =
            v;
        PositionCommand {
            position,
            velocity,
            feedforward_torque,
            kp_scale,
            kd_scale,
            maximum_torque,
            stop_position,
            watchdog_timeout,
            velocity_limit,
            accel_limit,
            fixed_voltage_override,
            ilimit_scale,
            fixed_current_override,
            ignore_position_bounds,
        }
    }

    /// `(register, value, resolution)` for 0x020..=0x02D in register order.
    pub fn entries(&self, res: &PositionResolution) -> [(u16, Option<f64>, Resolution); 14] {
        [
            (reg::COMMAND_POSITION, self.position, res.position),
            (reg::COMMAND_VELOCITY, self.velocity, res.velocity),
            (reg::COMMAND_FEEDFORWARD_TORQUE, self.feedforward_torque, res.feedforward_torque),
            (reg::COMMAND_KP_SCALE, self.kp_scale, res.kp_scale),
            (reg::COMMAND_KD_SCALE, self.kd_scale, res.kd_scale),
            (reg::COMMAND_MAXIMUM_TORQUE, self.maximum_torque, res.maximum_torque),
            (reg::COMMAND_STOP_POSITION, self.stop_position, res.stop_position),
            (reg::COMMAND_TIMEOUT, self.watchdog_timeout, res.watchdog_timeout),
            (reg::COMMAND_VELOCITY_LIMIT, self.velocity_limit, res.velocity_limit),
            (reg::COMMAND_ACCEL_LIMIT, self.accel_limit, res.accel_limit),
            (reg::COMMAND_FIXED_VOLTAGE_OVERRIDE, self.fixed_voltage_override, res.fixed_voltage_override),
            (reg::COMMAND_ILIMIT_SCALE, self.ilimit_scale, res.ilimit_scale),
            (reg::COMMAND_FIXED_CURRENT_OVERRIDE, self.fixed_current_override, res.fixed_current_override),
            (reg::COMMAND_IGNORE_POSITION_BOUNDS, self.ignore_position_bounds, res.ignore_position_bounds),
        ]
    }
}

/// How many extra registers a [`QueryFormat`] holds.
pub const MAX_QUERY_EXTRA: usize = 8;

/// The telemetry registers a query can name directly, in register order.
const TELEMETRY: [u16; 14] = [
    reg::MODE,
    reg::POSITION,
    reg::VELOCITY,
    reg::TORQUE,
    reg::Q_CURRENT,
    reg::D_CURRENT,
    reg::ABS_POSITION,
    reg::POWER,
    reg::MOTOR_TEMPERATURE,
    reg::TRAJECTORY_COMPLETE,
    reg::HOME_STATE,
    reg::VOLTAGE,
    reg::TEMPERATURE,
    reg::FAULT,
];

/// Which registers a query reads and at what resolution (`None` = not read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // fields are named after their registers
pub struct QueryFormat {
    pub mode: Option<Resolution>,
    pub position: Option<Resolution>,
    pub velocity: Option<Resolution>,
    pub torque: Option<Resolution>,
    pub q_current: Option<Resolution>,
    pub d_current: Option<Resolution>,
    pub abs_position: Option<Resolution>,
    pub power: Option<Resolution>,
    pub motor_temperature: Option<Resolution>,
    pub trajectory_complete: Option<Resolution>,
    pub home_state: Option<Resolution>,
    pub voltage: Option<Resolution>,
    pub temperature: Option<Resolution>,
    pub fault: Option<Resolution>,
    /// Further registers, ascending; only the first `extra_len` entries count.
    pub extra: [(u16, Resolution); MAX_QUERY_EXTRA],
    /// Entries of `extra` in use.
    pub extra_len: u8,
}

impl Default for QueryFormat {
    /// The Python client's default: mode int8; position, velocity, torque float;
    /// voltage, temperature, fault int8 → `11 00 1f 01 13 0d`.
    fn default() -> Self {
        QueryFormat {
            mode: Some(Resolution::Int8),
            position: Some(Resolution::Float),
            velocity: Some(Resolution::Float),
            torque: Some(Resolution::Float),
            voltage: Some(Resolution::Int8),
            temperature: Some(Resolution::Int8),
            fault: Some(Resolution::Int8),
            ..Self::empty()
        }
    }
}

/// The `(register, resolution)` list a [`QueryFormat`] reads: telemetry fields, then
/// extras.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryReads {
    regs: [(u16, Resolution); TELEMETRY.len() + MAX_QUERY_EXTRA],
    len: usize,
    telemetry_len: usize,
}

impl QueryReads {
    /// The registers in read order.
    pub fn as_slice(&self) -> &[(u16, Resolution)] {
        self.regs.get(..self.len).unwrap_or(&[])
    }

    /// The telemetry part (registers 0x000..=0x00F).
    pub fn telemetry(&self) -> &[(u16, Resolution)] {
        self.regs.get(..self.telemetry_len).unwrap_or(&[])
    }

    /// The extras part, ascending.
    pub fn extras(&self) -> &[(u16, Resolution)] {
        self.regs.get(self.telemetry_len..self.len).unwrap_or(&[])
    }
}

impl QueryFormat {
    /// A query of the 14 telemetry registers in register order (mode, position, velocity,
    /// torque, q current, d current, absolute position, power, motor temperature,
    /// trajectory complete, home state, voltage, temperature, fault), `None` = not asked;
    /// no extras. Handy where resolutions come from a table or a config file.
    pub const fn from_telemetry(f: [Option<Resolution>; 14]) -> Self {
        let [mode, position, velocity, torque, q_current, d_current, abs_position, power, motor_temperature, trajectory_complete, home_state, voltage, temperature, fault] =
            f;
        QueryFormat {
            mode,
            position,
            velocity,
            torque,
            q_current,
            d_current,
            abs_position,
            power,
            motor_temperature,
            trajectory_complete,
            home_state,
            voltage,
            temperature,
            fault,
            ..QueryFormat::empty()
        }
    }

    /// Reads nothing.
    pub const fn empty() -> Self {
        QueryFormat {
            mode: None,
            position: None,
            velocity: None,
            torque: None,
            q_current: None,
            d_current: None,
            abs_position: None,
            power: None,
            motor_temperature: None,
            trajectory_complete: None,
            home_state: None,
            voltage: None,
            temperature: None,
            fault: None,
            extra: [(0, Resolution::Int8); MAX_QUERY_EXTRA],
            extra_len: 0,
        }
    }

    /// What a control loop needs and no more: mode int8; position, velocity, torque int16;
    /// voltage, temperature, fault int8 — a 16-byte reply where [`comprehensive`] takes 24,
    /// for links where every byte costs time (a pi3hat's SPI).
    ///
    /// [`comprehensive`]: Self::comprehensive
    pub fn compact() -> Self {
        QueryFormat {
            mode: Some(Resolution::Int8),
            position: Some(Resolution::Int16),
            velocity: Some(Resolution::Int16),
            torque: Some(Resolution::Int16),
            voltage: Some(Resolution::Int8),
            temperature: Some(Resolution::Int8),
            fault: Some(Resolution::Int8),
            ..Self::empty()
        }
    }

    /// Everything the control loop usually wants, compactly: mode int8; position,
    /// velocity, torque, q/d current int16; 0x00A..=0x00F int8.
    pub fn comprehensive() -> Self {
        QueryFormat {
            mode: Some(Resolution::Int8),
            position: Some(Resolution::Int16),
            velocity: Some(Resolution::Int16),
            torque: Some(Resolution::Int16),
            q_current: Some(Resolution::Int16),
            d_current: Some(Resolution::Int16),
            motor_temperature: Some(Resolution::Int8),
            trajectory_complete: Some(Resolution::Int8),
            home_state: Some(Resolution::Int8),
            voltage: Some(Resolution::Int8),
            temperature: Some(Resolution::Int8),
            fault: Some(Resolution::Int8),
            ..Self::empty()
        }
    }

    fn field_mut(&mut self, r: u16) -> Option<&mut Option<Resolution>> {
        Some(match r {
            reg::MODE => &mut self.mode,
            reg::POSITION => &mut self.position,
            reg::VELOCITY => &mut self.velocity,
            reg::TORQUE => &mut self.torque,
            reg::Q_CURRENT => &mut self.q_current,
            reg::D_CURRENT => &mut self.d_current,
            reg::ABS_POSITION => &mut self.abs_position,
            reg::POWER => &mut self.power,
            reg::MOTOR_TEMPERATURE => &mut self.motor_temperature,
            reg::TRAJECTORY_COMPLETE => &mut self.trajectory_complete,
            reg::HOME_STATE => &mut self.home_state,
            reg::VOLTAGE => &mut self.voltage,
            reg::TEMPERATURE => &mut self.temperature,
            reg::FAULT => &mut self.fault,
            _ => return None,
        })
    }

    fn field(&self, r: u16) -> Option<Resolution> {
        match r {
            reg::MODE => self.mode,
            reg::POSITION => self.position,
            reg::VELOCITY => self.velocity,
            reg::TORQUE => self.torque,
            reg::Q_CURRENT => self.q_current,
            reg::D_CURRENT => self.d_current,
            reg::ABS_POSITION => self.abs_position,
            reg::POWER => self.power,
            reg::MOTOR_TEMPERATURE => self.motor_temperature,
            reg::TRAJECTORY_COMPLETE => self.trajectory_complete,
            reg::HOME_STATE => self.home_state,
            reg::VOLTAGE => self.voltage,
            reg::TEMPERATURE => self.temperature,
            reg::FAULT => self.fault,
            _ => None,
        }
    }

    /// The extras in use.
    pub fn extras(&self) -> &[(u16, Resolution)] {
        let len = usize::from(self.extra_len).min(MAX_QUERY_EXTRA);
        self.extra.get(..len).unwrap_or(&[])
    }

    /// Also read `r` at `res`. A telemetry register with its own field sets that field;
    /// an extra already present gets the new resolution; the extras stay ascending.
    /// Err([`EncodeError::TooManyRegisters`]) when all 8 extra slots are taken.
    pub fn add_extra(&mut self, r: u16, res: Resolution) -> Result<(), EncodeError> {
        if let Some(field) = self.field_mut(r) {
            *field = Some(res);
            return Ok(());
        }
        let len = usize::from(self.extra_len).min(MAX_QUERY_EXTRA);
        if let Some(e) = self.extra.iter_mut().take(len).find(|e| e.0 == r) {
            e.1 = res;
            return Ok(());
        }
        if len >= MAX_QUERY_EXTRA {
            return Err(EncodeError::TooManyRegisters);
        }
        // Insert keeping ascending order.
        let pos = self.extra.iter().take(len).position(|e| e.0 > r).unwrap_or(len);
        let mut i = len;
        while let Some(below) = i.checked_sub(1).filter(|&b| b >= pos) {
            let prev = self.extra.get(below).copied();
            if let (Some(prev), Some(slot)) = (prev, self.extra.get_mut(i)) {
                *slot = prev;
            }
            i = below;
        }
        if let Some(slot) = self.extra.get_mut(pos) {
            *slot = (r, res);
        }
        self.extra_len = u8::try_from(len).map_or(u8::MAX, |l| l.saturating_add(1));
        Ok(())
    }

    /// The registers this query reads: the telemetry fields in register order, then the
    /// extras ascending (the order [`encode_query`] uses).
    pub fn reads(&self) -> QueryReads {
        let mut out =
            QueryReads { regs: [(0, Resolution::Int8); TELEMETRY.len() + MAX_QUERY_EXTRA], len: 0, telemetry_len: 0 };
        for entry in TELEMETRY.iter().filter_map(|&r| self.field(r).map(|res| (r, res))) {
            if let Some(slot) = out.regs.get_mut(out.len) {
                *slot = entry;
                out.len = out.len.saturating_add(1);
            }
        }
        let first_extra = out.len;
        for &entry in self.extras() {
            // Insertion sort of the extras: stable, tiny, no allocation. `extra` is public,
            // so a hand-edited array may be unsorted.
            let mut i = out.len;
            while let Some(below) = i.checked_sub(1).filter(|&b| b >= first_extra) {
                match out.regs.get(below) {
                    Some(&prev) if prev.0 > entry.0 => {
                        if let Some(slot) = out.regs.get_mut(i) {
                            *slot = prev;
                        }
                        i = below;
                    }
                    _ => break,
                }
            }
            if let Some(slot) = out.regs.get_mut(i) {
                *slot = entry;
                out.len = out.len.saturating_add(1);
            }
        }
        out.telemetry_len = first_extra;
        out
    }
}

/// Append the read subframes of `q`. Like the official clients, the extras are grouped
/// on their own: an extra never joins a run of the telemetry registers.
pub fn encode_query(w: &mut FrameWriter, q: &QueryFormat) -> Result<(), EncodeError> {
    let reads = q.reads();
    w.atomically(|w| {
        encode_reads(w, reads.telemetry())?;
        encode_reads(w, reads.extras())
    })
}

fn encode_query_opt(w: &mut FrameWriter, query: Option<&QueryFormat>) -> Result<(), EncodeError> {
    match query {
        Some(q) => encode_query(w, q),
        None => Ok(()),
    }
}

/// Write the mode register (int8, first in the frame), then optionally a query.
pub fn encode_mode(w: &mut FrameWriter, mode: Mode, query: Option<&QueryFormat>) -> Result<(), EncodeError> {
    w.atomically(|w| {
        encode_writes(w, &[(reg::MODE, Some(f64::from(mode.as_u8())), Resolution::Int8)])?;
        encode_query_opt(w, query)
    })
}

/// Position mode: `01 00 0a`, then the set registers of `cmd`, then the query if any.
pub fn encode_position(
    w: &mut FrameWriter,
    cmd: &PositionCommand,
    res: &PositionResolution,
    query: Option<&QueryFormat>,
) -> Result<(), EncodeError> {
    w.atomically(|w| {
        encode_writes(w, &[(reg::MODE, Some(f64::from(Mode::Position.as_u8())), Resolution::Int8)])?;
        encode_writes(w, &cmd.entries(res))?;
        encode_query_opt(w, query)
    })
}

/// Stop (mode 0, also clears a fault): `01 00 00`.
pub fn encode_stop(w: &mut FrameWriter, query: Option<&QueryFormat>) -> Result<(), EncodeError> {
    encode_mode(w, Mode::Stopped, query)
}

/// Zero velocity (mode 12): `01 00 0c`.
pub fn encode_zero_velocity(w: &mut FrameWriter, query: Option<&QueryFormat>) -> Result<(), EncodeError> {
    encode_mode(w, Mode::ZeroVelocity, query)
}

/// Brake (mode 15): `01 00 0f`.
pub fn encode_brake(w: &mut FrameWriter, query: Option<&QueryFormat>) -> Result<(), EncodeError> {
    encode_mode(w, Mode::Brake, query)
}

/// How many registers outside the telemetry fields a [`ServoState`] keeps.
pub const MAX_STATE_EXTRA: usize = 16;

/// What a reply said. Physical values are NaN and integer fields `None` when the reply
/// did not carry them (or carried the "unset" minimum).
///
/// Integer registers ([`integer_range`]: mode, fault, home state, trajectory complete, the
/// identity registers …) are read as the moteus firmware and clients read them: a float is
/// truncated toward zero (mode 10.7 → 10). A value the register cannot hold — NaN or ±inf,
/// or outside its range (mode 300, mode -7.246 → -7) — never wraps: the field stays absent
/// and [`ServoState::invalid_integers`] counts it.
#[derive(Debug, Clone, Copy, PartialEq)]
#[allow(missing_docs)] // fields are named after their registers
pub struct ServoState {
    pub mode: Option<u8>,
    pub position: f64,
    pub velocity: f64,
    pub torque: f64,
    pub q_current: f64,
    pub d_current: f64,
    pub abs_position: f64,
    pub power: f64,
    pub motor_temperature: f64,
    pub trajectory_complete: Option<bool>,
    pub home_state: Option<u8>,
    pub voltage: f64,
    pub temperature: f64,
    pub fault: Option<u8>,
    /// Other registers, in reply order, scaled with their [`class_of`].
    pub extra: [(u16, f64); MAX_STATE_EXTRA],
    /// Entries of `extra` in use.
    pub extra_len: u8,
    /// Further registers that did not fit in `extra`.
    pub extra_dropped: u8,
    /// Read/write error subframes in the reply (saturating).
    pub errors: u8,
    /// Integer registers whose value was not an integer they can hold (NaN, ±inf, out of
    /// range): left absent and counted here (saturating). See [`read_int_register`].
    pub invalid_integers: u8,
}

impl Default for ServoState {
    fn default() -> Self {
        ServoState {
            mode: None,
            position: f64::NAN,
            velocity: f64::NAN,
            torque: f64::NAN,
            q_current: f64::NAN,
            d_current: f64::NAN,
            abs_position: f64::NAN,
            power: f64::NAN,
            motor_temperature: f64::NAN,
            trajectory_complete: None,
            home_state: None,
            voltage: f64::NAN,
            temperature: f64::NAN,
            fault: None,
            extra: [(0, f64::NAN); MAX_STATE_EXTRA],
            extra_len: 0,
            extra_dropped: 0,
            errors: 0,
            invalid_integers: 0,
        }
    }
}

fn some_if_present(x: f64) -> Option<f64> {
    (!x.is_nan()).then_some(x)
}

/// An integer register's value as read from a reply (see [`read_int_register`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntReading {
    /// The "unset" minimum integer of an int8/int16/int32 value: no value.
    Unset,
    /// An integer the register can hold.
    Int(i32),
    /// Not a value of the register: a NaN or infinite float, or a number outside the
    /// register's range after truncation.
    Invalid,
}

/// Read register `r` as an integer, the way the moteus firmware and clients do: integers as
/// they are, a float truncated toward zero; then checked against [`integer_range`] (a
/// register that is not a known integer accepts any `i32`). Never wraps: a value that does
/// not fit is [`IntReading::Invalid`].
pub fn read_int_register(r: u16, v: Value) -> IntReading {
    let (lo, hi) = integer_range(r).unwrap_or((i32::MIN, i32::MAX));
    let x = match v {
        Value::I8(i8::MIN) | Value::I16(i16::MIN) | Value::I32(i32::MIN) => return IntReading::Unset,
        Value::I8(i) => f64::from(i),
        Value::I16(i) => f64::from(i),
        Value::I32(i) => f64::from(i),
        Value::F32(f) => f64::from(f),
    };
    // Truncation toward zero lands in lo..=hi exactly when x is in (lo − 1, hi + 1); NaN
    // fails both comparisons and ±inf one of them.
    if x > f64::from(lo) - 1.0 && x < f64::from(hi) + 1.0 {
        // `as` truncates toward zero, and saturates to lo/hi at the open ends of the
        // interval, which is where truncation lands too.
        IntReading::Int(x as i32)
    } else {
        IntReading::Invalid
    }
}

impl ServoState {
    /// The value of register `r` as received (integers as f64), `None` if absent.
    pub fn get(&self, r: u16) -> Option<f64> {
        match r {
            reg::MODE => self.mode.map(f64::from),
            reg::POSITION => some_if_present(self.position),
            reg::VELOCITY => some_if_present(self.velocity),
            reg::TORQUE => some_if_present(self.torque),
            reg::Q_CURRENT => some_if_present(self.q_current),
            reg::D_CURRENT => some_if_present(self.d_current),
            reg::ABS_POSITION => some_if_present(self.abs_position),
            reg::POWER => some_if_present(self.power),
            reg::MOTOR_TEMPERATURE => some_if_present(self.motor_temperature),
            reg::TRAJECTORY_COMPLETE => self.trajectory_complete.map(|b| if b { 1.0 } else { 0.0 }),
            reg::HOME_STATE => self.home_state.map(f64::from),
            reg::VOLTAGE => some_if_present(self.voltage),
            reg::TEMPERATURE => some_if_present(self.temperature),
            reg::FAULT => self.fault.map(f64::from),
            _ => self.extras().iter().find(|e| e.0 == r).and_then(|e| some_if_present(e.1)),
        }
    }

    /// The extras in use.
    pub fn extras(&self) -> &[(u16, f64)] {
        let len = usize::from(self.extra_len).min(MAX_STATE_EXTRA);
        self.extra.get(..len).unwrap_or(&[])
    }

    /// The mode as an enum, if it is a known one.
    pub fn mode_enum(&self) -> Option<Mode> {
        self.mode.and_then(Mode::from_u8)
    }

    /// Record one register value from a reply.
    fn set(&mut self, r: u16, v: Value) {
        if integer_range(r).is_some() {
            let i = match read_int_register(r, v) {
                IntReading::Int(i) => Some(i),
                IntReading::Unset => None,
                IntReading::Invalid => {
                    self.invalid_integers = self.invalid_integers.saturating_add(1);
                    None
                }
            };
            // `integer_range` keeps mode, fault and home state within 0..=255.
            let byte = i.and_then(|i| u8::try_from(i).ok());
            match r {
                reg::MODE => self.mode = byte,
                reg::TRAJECTORY_COMPLETE => self.trajectory_complete = i.map(|i| i != 0),
                reg::HOME_STATE => self.home_state = byte,
                reg::FAULT => self.fault = byte,
                _ => self.set_extra(r, i.map_or(f64::NAN, f64::from)),
            }
            return;
        }
        let x = v.decode(class_of(r));
        match r {
            reg::POSITION => self.position = x,
            reg::VELOCITY => self.velocity = x,
            reg::TORQUE => self.torque = x,
            reg::Q_CURRENT => self.q_current = x,
            reg::D_CURRENT => self.d_current = x,
            reg::ABS_POSITION => self.abs_position = x,
            reg::POWER => self.power = x,
            reg::MOTOR_TEMPERATURE => self.motor_temperature = x,
            reg::VOLTAGE => self.voltage = x,
            reg::TEMPERATURE => self.temperature = x,
            _ => self.set_extra(r, x),
        }
    }

    fn set_extra(&mut self, r: u16, x: f64) {
        match self.extra.get_mut(usize::from(self.extra_len)) {
            Some(slot) => {
                *slot = (r, x);
                self.extra_len = self.extra_len.saturating_add(1);
            }
            None => self.extra_dropped = self.extra_dropped.saturating_add(1),
        }
    }
}

/// Read a reply payload into `out` (reset first). Reply subframes of any resolution fill
/// the fields; error subframes are counted; NOPs, streams and stray requests are skipped.
/// A malformed payload returns the error; `out` then holds what came before it.
pub fn decode_reply(payload: &[u8], out: &mut ServoState) -> Result<(), DecodeError> {
    *out = ServoState::default();
    for sub in subframes(payload) {
        match sub? {
            Subframe::Reply { start, values, .. } => {
                for (r, v) in (start..=u16::MAX).zip(values.iter()) {
                    out.set(r, v);
                }
            }
            Subframe::WriteError { .. } | Subframe::ReadError { .. } => {
                out.errors = out.errors.saturating_add(1);
            }
            Subframe::Write { .. }
            | Subframe::Read { .. }
            | Subframe::Stream { .. }
            | Subframe::Poll { .. }
            | Subframe::FlowData { .. }
            | Subframe::FlowPoll { .. }
            | Subframe::Nop => {}
        }
    }
    Ok(())
}
