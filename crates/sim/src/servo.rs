//! A simulated moteus controller driving one joint.
//!
//! What it is for: answering CAN-FD frames exactly as a moteus controller would as far as
//! a host can see — the register map, modes, the watchdog, faults, replies at the requested
//! resolution — while a small physical model (joint dynamics, electrical and thermal state)
//! gives the telemetry something believable to say.
//! What it must never do: read a clock (time is always passed in as `now_ns`), allocate
//! after construction, or panic on any frame or register value: NaN, infinities and
//! garbage are sanitised, unknown registers are answered with error subframes.
//!
//! # Units
//!
//! Positions are in revolutions of the output, velocities in rev/s, torques in N·m at the
//! output (after the gearbox), currents in A, temperatures in °C. Gains follow moteus:
//! `kp` in N·m per revolution of error, `kd` in N·m per rev/s of velocity error. `kt` is the
//! output-referred torque constant (motor kt × gear ratio), N·m/A, so q current = torque / kt.
//!
//! # Semantics (moteus-compatible where the host can tell)
//!
//! * A frame is a *command* when it writes the mode or any position-mode / stay-within
//!   register (0x020-0x02D, 0x040-0x041). The command takes effect in `end_of_frame`: every
//!   command register not written in that frame becomes unset (NaN), as each moteus command
//!   frame carries the full set. A command without a mode write is a new command in the
//!   current mode. A frame that only reads is not a command and does not feed the watchdog.
//!   Reads are answered while the frame is parsed, so the reply to a command frame shows
//!   the state from before that command (as a moteus controller's does); the next reply
//!   shows its effect. The one exception: a read of a command register that the same frame
//!   wrote answers the written value, so a test can tell which request a reply answers
//!   (read 0x020 beside a position command and the reply carries that command's position).
//! * Modes: 0 stopped (also clears a fault), 10 position, 11 timeout (entered by the
//!   watchdog only), 12 zero velocity, 13 stay-within, 15 brake. Every other mode value
//!   (the internal modes 2-4, the PWM/voltage/current modes 5-9 that need a real motor, 14,
//!   and anything above 15) is accepted as a stop that does not clear a fault: the mode
//!   register then reads 0, so a host sees the request did not take.
//! * In mode 1 (fault) and mode 11 (timeout) only a stop command is obeyed; other commands
//!   are ignored but still answered.
//! * Writes to read-only registers (telemetry, identity) are answered with a write-error
//!   subframe carrying `ERROR_UNKNOWN_REGISTER`, the only error code moteus defines; a
//!   host that writes telemetry has a bug it should hear about.
//! * Position mode: the control position starts at the measured position when the mode is
//!   entered. A command position sets it (NaN holds it); the command velocity advances it
//!   every step. With a velocity and/or acceleration limit (NaN, ±inf or ≤ 0 = no limit) the
//!   control position instead moves toward the (moving) target on a trapezoidal profile
//!   obeying both limits, and trajectory complete (0x00B) reads 1 once it is reached.
//!   torque = kp·kp_scale·(control_pos − pos) + kd·kd_scale·(control_vel − vel) + feedforward,
//!   clamped to ±min(max torque, command maximum torque).
//! * Zero velocity, timeout and brake: torque = −kd·vel (damping only). Stay-within: feed-
//!   forward inside the bounds, a position controller toward the violated bound outside.
//! * Watchdog: every command resets it; its timeout is register 0x027 of the latest command:
//!   not written, 0 or negative → the configured default (0.1 s); written as NaN (the
//!   "unset" minimum integer, or a float NaN) → no watchdog. This is moteus's split between
//!   the firmware default (0 = use the configured timeout) and an explicit NaN. In
//!   position, zero velocity or stay-within mode a silence longer than the timeout latches
//!   mode 11.
//! * Over-temperature: when the motor or board temperature reaches the fault temperature
//!   while the servo is driving (any mode but stopped), it latches mode 1 with fault 38.
//!   A stop (mode 0) clears the fault register at once, even while hot (a stopped servo
//!   does not fault); a drive command while the motor is still at or above the fault
//!   temperature latches the fault again at the next physics step, so in effect the servo
//!   can be driven again only once it has cooled below the limit.
//! * Injected overheat ([`Servo::schedule_overheat`] or [`ServoConfig::overheat_at_ns`]):
//!   from the first physics step at or after the scheduled time, extra heat goes into the
//!   motor so that its temperature rises at a steady rate through the ordinary thermal
//!   model — from wherever it is to [`OVERHEAT_OVERSHOOT_C`] above the fault temperature in
//!   [`OVERHEAT_RAMP_NS`] (0.25 s) — and then the injection stops and the motor cools with
//!   its own time constant (with the defaults, from 90 °C back under 80 °C in about 6.7 s).
//!   A servo that is driving therefore latches fault 38 / mode 1 by the ordinary
//!   over-temperature check no later than [`OVERHEAT_RAMP_NS`] plus two physics steps after
//!   the scheduled time; a stopped servo heats the same but faults only when next driven
//!   while still hot. The servo notes when the overheat started and when any fault latched,
//!   for the bus's event log, and [`Telemetry`] shows the overheat state and the latch count.
//! * Physics advance in fixed steps (`step_ns`) from the first time the servo is told
//!   about; a gap longer than ten seconds is not integrated beyond its last ten seconds.
//! * Configuration (the keys of [`crate::console::config`], changed over the diagnostic
//!   console with `conf set`, stored with `conf write`): the position gains, the torque
//!   limit (also capped at `servo.max_current_A` × kt), the default watchdog timeout,
//!   `servo.max_velocity` (commanded velocities are clamped to it), `servopos.position_min
//!   / max` (the control position is held inside them unless the command sets "ignore
//!   position bounds"), the default velocity / acceleration limits (used when a command
//!   leaves its own unset), and the output mapping: output = `motor_position.output.sign`
//!   × joint + `motor_position.output.offset` + the run-time offset (set-output registers,
//!   `d rezero`). A change takes effect at once, except `id.id` and `can.prefix`, which
//!   take effect at the next restart (`d reset`, or a simulator started with the stored
//!   configuration), as on the board.
//! * The diagnostic console ([`crate::console`]) answers on stream channel 1; every poll
//!   gets its answer, empty when there is nothing to say. Requests the servo cannot act on
//!   are counted ([`Servo::request_errors`]). The console is made on first use and is the
//!   one part that allocates after construction (its answers are built as text); the
//!   register path never touches it.

use core::f64::consts::TAU;

use rtloop_proto::frame::{ArbitrationId, CanFdFrame, FrameFlags, BROADCAST};
use rtloop_proto::register::{class_of, fault, reg, Mode, REGISTER_MAP_VERSION};
use rtloop_proto::servo::{serve, NotUnderstood, RegisterServer, ERROR_UNKNOWN_REGISTER};

use crate::console::config::{ConfError, Config};
use crate::console::{Console, ConsoleStats, ServoAction};
use rtloop_proto::value::{Resolution, ScaleClass, Value};
use rtloop_proto::writer::FrameWriter;

/// An injected overheat takes the motor from its temperature at the start to
/// [`OVERHEAT_OVERSHOOT_C`] above the fault temperature in this time, ns (0.25 s). The fault
/// temperature is crossed sooner; heating stops at the overshoot (or at twice this time).
pub const OVERHEAT_RAMP_NS: u64 = 250_000_000;

/// How far above the fault temperature an injected overheat takes the motor, °C (10).
pub const OVERHEAT_OVERSHOOT_C: f64 = 10.0;

/// The state of a servo's injected overheat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OverheatState {
    /// None scheduled.
    #[default]
    Off,
    /// Scheduled to start at `at_ns`.
    Armed {
        /// Scheduled start, ns.
        at_ns: u64,
    },
    /// Heating the motor since `since_ns`.
    Heating {
        /// Physics step at which heating started, ns.
        since_ns: u64,
    },
    /// Heating started at `since_ns` and is over; the motor cools on its own.
    Done {
        /// Physics step at which heating started, ns.
        since_ns: u64,
    },
}

impl OverheatState {
    /// Scheduled and not started yet.
    pub fn is_armed(&self) -> bool {
        matches!(self, OverheatState::Armed { .. })
    }

    /// Started (heating now, or done).
    pub fn is_triggered(&self) -> bool {
        matches!(self, OverheatState::Heating { .. } | OverheatState::Done { .. })
    }
}

/// The longest stretch of time one `advance_to` integrates, ns.
const MAX_CATCH_UP_NS: u64 = 10_000_000_000;

/// Value of the model-number register (0x100).
pub const MODEL_NUMBER: i32 = 0x0000_0404;
/// Value of the firmware-version register (0x101) and of `firmware.version`: ABI
/// 0x010100, the moteus release whose configuration keys the simulator serves (moteus_tool
/// compares it with the ABI it supports).
pub const FIRMWARE_VERSION: i32 = 0x0001_0100;

/// Command slots: 0x020..=0x02D map to 0..=13, the stay-within bounds to 14 and 15.
const COMMAND_SLOTS: usize = 16;
const SLOT_POSITION: usize = 0;
const SLOT_VELOCITY: usize = 1;
const SLOT_FEEDFORWARD: usize = 2;
const SLOT_KP_SCALE: usize = 3;
const SLOT_KD_SCALE: usize = 4;
const SLOT_MAXIMUM_TORQUE: usize = 5;
const SLOT_STOP_POSITION: usize = 6;
const SLOT_TIMEOUT: usize = 7;
const SLOT_VELOCITY_LIMIT: usize = 8;
const SLOT_ACCEL_LIMIT: usize = 9;
const SLOT_IGNORE_BOUNDS: usize = 13;
const SLOT_LOWER_BOUND: usize = 14;
const SLOT_UPPER_BOUND: usize = 15;

const UNSET: [f64; COMMAND_SLOTS] = [f64::NAN; COMMAND_SLOTS];

fn command_slot(r: u16) -> Option<usize> {
    match r {
        reg::COMMAND_POSITION..=reg::COMMAND_IGNORE_POSITION_BOUNDS => Some(usize::from(r - reg::COMMAND_POSITION)),
        reg::STAY_WITHIN_LOWER_BOUND => Some(SLOT_LOWER_BOUND),
        reg::STAY_WITHIN_UPPER_BOUND => Some(SLOT_UPPER_BOUND),
        _ => None,
    }
}

const MODE_STOPPED: u8 = Mode::Stopped as u8;
const MODE_FAULT: u8 = Mode::Fault as u8;
const MODE_POSITION: u8 = Mode::Position as u8;
const MODE_TIMEOUT: u8 = Mode::Timeout as u8;
const MODE_ZERO_VELOCITY: u8 = Mode::ZeroVelocity as u8;
const MODE_STAY_WITHIN: u8 = Mode::StayWithin as u8;
const MODE_BRAKE: u8 = Mode::Brake as u8;

/// `lo ≤ x ≤ hi` without `f64::clamp`'s panic on NaN bounds; a NaN `x` stays NaN.
fn clampf(x: f64, lo: f64, hi: f64) -> f64 {
    x.max(lo).min(hi)
}

/// A finite value, or `default` for NaN/±inf.
fn finite_or(x: f64, default: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        default
    }
}

/// A positive finite limit, or +inf (no limit) for NaN, ±inf, zero or negative.
fn limit_or_inf(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        f64::INFINITY
    }
}

/// A plain integer register at a resolution, wrapping to the width as a C cast would
/// (used for counters and identity words, which moteus truncates rather than saturates).
fn wrapping_int(x: i64, res: Resolution) -> Value {
    match res {
        Resolution::Int8 => Value::I8(x as i8),
        Resolution::Int16 => Value::I16(x as i16),
        Resolution::Int32 => Value::I32(x as i32),
        Resolution::Float => Value::F32(x as f32),
    }
}

/// Everything that makes one simulated servo different from another.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServoConfig {
    /// CAN id (1..=126); also the multiplex-id register.
    pub id: u8,
    /// 13-bit CAN prefix the servo answers to (0).
    pub can_prefix: u16,
    /// Joint inertia at the output, kg·m² (0.01).
    pub inertia_kgm2: f64,
    /// Viscous damping at the output, N·m·s/rad (0.05).
    pub damping_nms_per_rad: f64,
    /// Peak of the gravity-like load `load·sin(2π·pos)`, N·m (0.3). Positive is a hanging
    /// pendulum: stable at 0.
    pub load_torque_nm: f64,
    /// Coulomb friction magnitude, N·m (0).
    pub friction_nm: f64,
    /// Position at power-up, rev (0).
    pub initial_position_rev: f64,
    /// Position gain, N·m/rev (20).
    pub kp_nm_per_rev: f64,
    /// Velocity gain, N·m·s/rev (0.5).
    pub kd_nms_per_rev: f64,
    /// Configured torque limit, N·m (16).
    pub max_torque_nm: f64,
    /// Output-referred torque constant, N·m/A (0.5: motor 0.083 × 6:1 gearbox).
    pub kt_nm_per_a: f64,
    /// Phase resistance, Ω (0.05).
    pub phase_resistance_ohm: f64,
    /// Supply voltage with no load, V (24).
    pub supply_voltage_v: f64,
    /// Supply source resistance: voltage sags by this × |q current|, Ω (0.01).
    pub source_resistance_ohm: f64,
    /// Ambient temperature, °C (25).
    pub ambient_c: f64,
    /// Motor heat capacity, J/K (20).
    pub motor_heat_capacity_j_per_k: f64,
    /// Motor thermal resistance to ambient, K/W (2: 40 s time constant).
    pub motor_thermal_resistance_k_per_w: f64,
    /// Board heat capacity, J/K (15).
    pub board_heat_capacity_j_per_k: f64,
    /// Board thermal resistance to ambient, K/W (4).
    pub board_thermal_resistance_k_per_w: f64,
    /// Resistance whose I²R heats the board (the FETs), Ω (0.01).
    pub board_resistance_ohm: f64,
    /// Motor or board temperature that trips fault 38, °C (80).
    pub fault_temperature_c: f64,
    /// Watchdog timeout used when a command sends 0, s (0.1; `servo.default_timeout_s`).
    pub watchdog_default_s: f64,
    /// Phase current limit, A (`servo.max_current_A`, 100): the torque limit is also
    /// capped at this × `kt_nm_per_a`.
    pub max_current_a: f64,
    /// Largest velocity position mode commands, rev/s (`servo.max_velocity`, 500).
    pub max_velocity_rev_s: f64,
    /// Lowest position position mode may command, rev (`servopos.position_min`; NaN: none).
    pub position_min_rev: f64,
    /// Highest position position mode may command, rev (`servopos.position_max`; NaN: none).
    pub position_max_rev: f64,
    /// Velocity limit used when a command leaves it unset, rev/s
    /// (`servo.default_velocity_limit`; NaN: none).
    pub default_velocity_limit: f64,
    /// Acceleration limit used when a command leaves it unset, rev/s²
    /// (`servo.default_accel_limit`; NaN: none).
    pub default_accel_limit: f64,
    /// Output position = sign × joint position + offset (`motor_position.output.sign`, 1
    /// or -1).
    pub output_sign: f64,
    /// Output position offset, rev (`motor_position.output.offset`, 0).
    pub output_offset_rev: f64,
    /// Physics step, ns (100 000 = 100 µs).
    pub step_ns: u64,
    /// Fault injection: start an overheat at this time, ns (None); see
    /// [`Servo::schedule_overheat`].
    pub overheat_at_ns: Option<u64>,
}

impl ServoConfig {
    /// The defaults (see each field) for servo `id`.
    pub fn new(id: u8) -> Self {
        ServoConfig {
            id,
            can_prefix: 0,
            inertia_kgm2: 0.01,
            damping_nms_per_rad: 0.05,
            load_torque_nm: 0.3,
            friction_nm: 0.0,
            initial_position_rev: 0.0,
            kp_nm_per_rev: 20.0,
            kd_nms_per_rev: 0.5,
            max_torque_nm: 16.0,
            kt_nm_per_a: 0.5,
            phase_resistance_ohm: 0.05,
            supply_voltage_v: 24.0,
            source_resistance_ohm: 0.01,
            ambient_c: 25.0,
            motor_heat_capacity_j_per_k: 20.0,
            motor_thermal_resistance_k_per_w: 2.0,
            board_heat_capacity_j_per_k: 15.0,
            board_thermal_resistance_k_per_w: 4.0,
            board_resistance_ohm: 0.01,
            fault_temperature_c: 80.0,
            watchdog_default_s: 0.1,
            max_current_a: 100.0,
            max_velocity_rev_s: 500.0,
            position_min_rev: f64::NAN,
            position_max_rev: f64::NAN,
            default_velocity_limit: f64::NAN,
            default_accel_limit: f64::NAN,
            output_sign: 1.0,
            output_offset_rev: 0.0,
            step_ns: 100_000,
            overheat_at_ns: None,
        }
    }

    /// Servo `id` for a joint of a physical plant (rtloop-physics): position gains stiff
    /// enough to carry a small quadruped's leg, on a slope too (kp 300 N·m/rev, kd 5
    /// N·m·s/rev: with 150 the built-in quadruped folds over its front legs on an 8° downhill),
    /// the rest as [`ServoConfig::new`]. The joint's
    /// inertia, damping and load come from the plant, not from here.
    pub fn physical(id: u8) -> Self {
        ServoConfig {
            kp_nm_per_rev: PHYSICAL_KP_NM_PER_REV,
            kd_nms_per_rev: PHYSICAL_KD_NMS_PER_REV,
            ..ServoConfig::new(id)
        }
    }
}

/// The motor's own torque constant, N·m/A (at the rotor: [`ServoConfig::kt_nm_per_a`] is this
/// × the gear ratio).
pub const MOTOR_KT_NM_PER_A: f64 = 0.5 / 6.0;

/// The largest phase current a moteus accepts as `servo.max_current_A`, A.
pub const MAX_CURRENT_A: f64 = 1000.0;

/// How a servo is set up for the joint it drives: the stored configuration a coupled servo
/// starts from (what `conf set` and `conf write` would leave on a board).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServoSetup {
    /// Position gain, N·m/rev (N/m for a slide joint): `servo.pid_position.kp`.
    pub kp_nm_per_rev: f64,
    /// Velocity gain, N·m·s/rev (N·s/m for a slide): `servo.pid_position.kd`.
    pub kd_nms_per_rev: f64,
    /// Torque limit at the output, N·m (N for a slide). `servo.max_current_A` is raised to the
    /// current it takes.
    pub max_torque_nm: f64,
    /// Rotor turns per output turn (6 for the built-in robot's 6:1 gearbox): the output torque
    /// constant is [`MOTOR_KT_NM_PER_A`] × this, so currents, heating and the current limit
    /// follow it.
    pub gear_ratio: f64,
    /// `motor_position.output.sign`: 1, or -1 for a joint that turns the other way.
    pub output_sign: f64,
}

/// Range of [`ServoSetup::kp_nm_per_rev`] and [`ServoSetup::kd_nms_per_rev`] (the console's
/// `servo.pid_position.kp/kd`).
pub const MAX_GAIN: f64 = 100_000.0;

/// Range of [`ServoSetup::gear_ratio`].
pub const GEAR_RATIO_RANGE: (f64, f64) = (1.0, 1000.0);

impl ServoSetup {
    /// A servo for a joint of a physical plant: [`PHYSICAL_KP_NM_PER_REV`],
    /// [`PHYSICAL_KD_NMS_PER_REV`], the default 16 N·m limit and 6:1 gearbox, sign 1.
    pub const PHYSICAL: ServoSetup = ServoSetup {
        kp_nm_per_rev: PHYSICAL_KP_NM_PER_REV,
        kd_nms_per_rev: PHYSICAL_KD_NMS_PER_REV,
        max_torque_nm: 16.0,
        gear_ratio: 6.0,
        output_sign: 1.0,
    };

    /// The largest torque limit this setup's gear ratio allows: [`MAX_CURRENT_A`] through the
    /// output torque constant, N·m.
    pub fn torque_ceiling_nm(&self) -> f64 {
        MAX_CURRENT_A * MOTOR_KT_NM_PER_A * self.gear_ratio
    }

    /// Every number finite and in range: gains 0 to [`MAX_GAIN`], a torque limit above 0 up to
    /// [`ServoSetup::torque_ceiling_nm`], a gear ratio in [`GEAR_RATIO_RANGE`], sign ±1.
    pub fn is_valid(&self) -> bool {
        let gain = |g: f64| (0.0..=MAX_GAIN).contains(&g);
        gain(self.kp_nm_per_rev)
            && gain(self.kd_nms_per_rev)
            && (GEAR_RATIO_RANGE.0..=GEAR_RATIO_RANGE.1).contains(&self.gear_ratio)
            && self.max_torque_nm > 0.0
            && self.max_torque_nm <= self.torque_ceiling_nm()
            && (self.output_sign == 1.0 || self.output_sign == -1.0)
    }
}

/// Position gain of a servo on a physical plant ([`ServoConfig::physical`]), N·m/rev.
pub const PHYSICAL_KP_NM_PER_REV: f64 = 300.0;

/// Velocity gain of a servo on a physical plant ([`ServoConfig::physical`]), N·m·s/rev.
pub const PHYSICAL_KD_NMS_PER_REV: f64 = 5.0;

impl Default for ServoConfig {
    fn default() -> Self {
        ServoConfig::new(1)
    }
}

/// A snapshot of what the servo is doing, for tools and tests (not a wire format).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Telemetry {
    /// Servo id.
    pub id: u8,
    /// Mode register value.
    pub mode: u8,
    /// Output position, rev.
    pub position: f64,
    /// Output velocity, rev/s.
    pub velocity: f64,
    /// Applied output torque, N·m.
    pub torque: f64,
    /// Q-axis current, A.
    pub q_current: f64,
    /// D-axis current, A (always 0: the model has no field weakening).
    pub d_current: f64,
    /// Electrical power, W.
    pub power: f64,
    /// Supply voltage at the board, V.
    pub voltage: f64,
    /// Motor temperature, °C.
    pub motor_temperature: f64,
    /// Board temperature, °C.
    pub board_temperature: f64,
    /// Fault register value (0 = none).
    pub fault: u8,
    /// The position-mode trajectory has reached its target.
    pub trajectory_complete: bool,
    /// Control (setpoint) position, rev (NaN outside position mode).
    pub control_position: f64,
    /// Frames addressed to this servo (or broadcast) it has handled.
    pub frames_received: u64,
    /// Frames that were commands (see the module docs).
    pub commands_received: u64,
    /// Times the watchdog latched mode 11.
    pub watchdog_expiries: u64,
    /// Time of the physics state, ns.
    pub time_ns: u64,
    /// The injected overheat: off, armed, heating or done.
    pub overheat: OverheatState,
    /// Times the servo latched a fault (mode 1).
    pub faults_latched: u64,
}

/// A console for a servo built with `factory`, its defaults in force, nothing stored.
fn fresh_console(factory: &ServoConfig) -> Box<Console> {
    Box::new(Console::new(Config::new(factory), None))
}

/// A position command from the console (`d pos`): NaN fields are unset, as in a register
/// command.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PositionCommand {
    /// Target position, rev.
    pub position: f64,
    /// Target velocity, rev/s.
    pub velocity: f64,
    /// Torque limit, N·m.
    pub max_torque: f64,
    /// Feedforward torque, N·m.
    pub feedforward: f64,
    /// Position gain scale.
    pub kp_scale: f64,
    /// Velocity gain scale.
    pub kd_scale: f64,
    /// Watchdog timeout, s (NaN: none; unset: the default).
    pub timeout_s: f64,
    /// Velocity limit, rev/s.
    pub velocity_limit: f64,
    /// Acceleration limit, rev/s².
    pub accel_limit: f64,
    /// Non-zero: ignore `servopos.position_min/max`.
    pub ignore_bounds: f64,
    /// Stop position, rev (stored; the model does not use it).
    pub stop_position: f64,
}

impl Default for PositionCommand {
    fn default() -> Self {
        PositionCommand {
            position: f64::NAN,
            velocity: f64::NAN,
            max_torque: f64::NAN,
            feedforward: f64::NAN,
            kp_scale: f64::NAN,
            kd_scale: f64::NAN,
            timeout_s: 0.0,
            velocity_limit: f64::NAN,
            accel_limit: f64::NAN,
            ignore_bounds: f64::NAN,
            stop_position: f64::NAN,
        }
    }
}

/// A drive command from the console; it takes effect as the same command sent in
/// registers would (it feeds the watchdog, a latched fault still needs a stop).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ConsoleCommand {
    /// `d stop`.
    Stop,
    /// `d brake`.
    Brake,
    /// `d pos …`.
    Position(PositionCommand),
    /// `d within LOWER UPPER MAX_TORQUE`.
    StayWithin {
        /// Lower bound, rev (NaN: none).
        lower: f64,
        /// Upper bound, rev (NaN: none).
        upper: f64,
        /// Torque limit, N·m.
        max_torque: f64,
    },
}

/// What a servo counted of the requests it could not act on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestErrors {
    /// Frames whose payload did not parse (the subframes before the error were handled).
    pub malformed_frames: u64,
    /// Well-formed subframes the servo did not act on: subframes only a servo sends,
    /// stream data for a channel it does not have, console input it had no room for.
    pub not_understood: u64,
}

/// One simulated moteus controller and its joint.
#[derive(Debug, Clone)]
pub struct Servo {
    cfg: ServoConfig,
    /// The configuration it was built with: `conf default` and a restart start from it.
    factory: ServoConfig,
    /// The diagnostic console, made on first use (a servo nobody talks to carries none).
    console: Option<Box<Console>>,
    request_errors: RequestErrors,

    // Mechanical state. `phys_pos` drives the load; the host sees `phys_pos + offset`.
    /// A plant moves the joint ([`Servo::set_coupled`]).
    coupled: bool,
    phys_pos_rev: f64,
    velocity_rev_s: f64,
    output_offset_rev: f64,

    // Electrical and thermal state (recomputed or integrated every step).
    torque_nm: f64,
    q_current_a: f64,
    power_w: f64,
    voltage_v: f64,
    motor_temp_c: f64,
    board_temp_c: f64,
    injected_heat_w: f64,

    mode: u8,
    fault: u8,

    // The command in force, and the registers written by the frame being served.
    command: [f64; COMMAND_SLOTS],
    pending: [f64; COMMAND_SLOTS],
    pending_mode: Option<u8>,
    /// Bit `slot` set: the frame being served wrote that command register. A read of it in
    /// the same frame answers the written value (the request's own command), so a reply
    /// tells which request it answers.
    pending_written: u16,
    pending_command: bool,
    pending_timeout_written: bool,
    pending_set_output: Option<(f64, bool)>,
    frame_ended: bool,

    // Position-mode controller.
    control_pos: f64,
    control_vel: f64,
    target_pos: f64,
    trajectory_complete: bool,

    // Watchdog.
    watchdog_timeout_ns: Option<u64>,
    last_command_ns: u64,

    // Time: physics state time (None until first told), and the latest time told.
    time_ns: Option<u64>,
    now_ns: u64,

    frames_received: u64,
    commands_received: u64,
    watchdog_expiries: u64,

    // Fault injection.
    overheat: OverheatState,
    overheat_rate_c_per_s: f64,
    faults_latched: u64,
    // Not yet collected by the bus: overheat start time; latch time and code.
    report_overheat: Option<u64>,
    report_latch: Option<(u64, u8)>,
}

impl Servo {
    /// A stopped servo at its initial position, at ambient temperature.
    pub fn new(cfg: ServoConfig) -> Self {
        Servo {
            cfg,
            factory: cfg,
            console: None,
            request_errors: RequestErrors::default(),
            coupled: false,
            phys_pos_rev: cfg.initial_position_rev,
            velocity_rev_s: 0.0,
            output_offset_rev: 0.0,
            torque_nm: 0.0,
            q_current_a: 0.0,
            power_w: 0.0,
            voltage_v: cfg.supply_voltage_v,
            motor_temp_c: cfg.ambient_c,
            board_temp_c: cfg.ambient_c,
            injected_heat_w: 0.0,
            mode: MODE_STOPPED,
            fault: fault::NONE,
            command: UNSET,
            pending: UNSET,
            pending_mode: None,
            pending_written: 0,
            pending_command: false,
            pending_timeout_written: false,
            pending_set_output: None,
            frame_ended: true,
            control_pos: f64::NAN,
            control_vel: 0.0,
            target_pos: f64::NAN,
            trajectory_complete: false,
            watchdog_timeout_ns: None,
            last_command_ns: 0,
            time_ns: None,
            now_ns: 0,
            frames_received: 0,
            commands_received: 0,
            watchdog_expiries: 0,
            overheat: match cfg.overheat_at_ns {
                Some(at_ns) => OverheatState::Armed { at_ns },
                None => OverheatState::Off,
            },
            overheat_rate_c_per_s: 0.0,
            faults_latched: 0,
            report_overheat: None,
            report_latch: None,
        }
    }

    /// The CAN id.
    pub fn id(&self) -> u8 {
        self.cfg.id
    }

    /// The configuration in force (the one it was built with, changed by `conf set`).
    pub fn config(&self) -> &ServoConfig {
        &self.cfg
    }

    /// The configuration it was built with (`conf default` goes back to it).
    pub fn factory_config(&self) -> &ServoConfig {
        &self.factory
    }

    /// The latest time it was told, ns.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// The three serial-number words (registers 0x120-0x122).
    pub fn serial_number(&self) -> [u32; 3] {
        [
            0x5349_4D00 | u32::from(self.cfg.id), // "SIM" + id
            u32::from(self.cfg.can_prefix) << 8 | u32::from(self.cfg.id),
            0x1234_5678 ^ (u32::from(self.cfg.id) << 24),
        ]
    }

    /// The control velocity of position mode, rev/s.
    pub fn control_velocity(&self) -> f64 {
        self.control_vel
    }

    /// Seconds before the watchdog trips (NaN: no watchdog running).
    pub fn watchdog_remaining_s(&self) -> f64 {
        match self.watchdog_timeout_ns {
            Some(t) if matches!(self.mode, MODE_POSITION | MODE_ZERO_VELOCITY | MODE_STAY_WITHIN) => {
                t.saturating_sub(self.now_ns.saturating_sub(self.last_command_ns)) as f64 * 1e-9
            }
            _ => f64::NAN,
        }
    }

    /// The command registers in force (0x020-0x02D, then the stay-within bounds); NaN =
    /// unset.
    pub fn command_registers(&self) -> [f64; 16] {
        self.command
    }

    /// What it counted of requests it could not act on.
    pub fn request_errors(&self) -> RequestErrors {
        self.request_errors
    }

    /// What its console counted (all zero when nobody used it).
    pub fn console_stats(&self) -> ConsoleStats {
        self.console.as_ref().map(|c| c.stats()).unwrap_or_default()
    }

    /// The console's configuration (made on first use).
    pub fn console_config(&mut self) -> &Config {
        self.console_mut().config()
    }

    /// Power up with `stored`, the configuration text a previous run stored (`conf
    /// write`): as a board reading its flash at boot, a changed `id.id` takes effect.
    /// Returns the lines that could not be applied (1-based), which are skipped.
    pub fn load_stored_config(&mut self, stored: &str) -> Vec<(usize, ConfError)> {
        let mut config = Config::new(&self.factory);
        let bad = config.load_text(stored);
        self.restart_with(config, Some(stored.to_string()));
        bad
    }

    /// The configuration text `conf write` asked to store since the last call, if any
    /// (the I/O layer writes it where it loads it from at the next start).
    pub fn take_config_to_store(&mut self) -> Option<String> {
        self.console.as_mut().and_then(|c| c.take_store_request())
    }

    fn console_mut(&mut self) -> &mut Console {
        let factory = &self.factory;
        self.console.get_or_insert_with(|| fresh_console(factory))
    }

    /// Run the console until it waits for input or output room; restart the servo when a
    /// line asked for it.
    fn pump_console(&mut self) {
        let mut console = self.console.take().unwrap_or_else(|| fresh_console(&self.factory));
        let action = console.pump(self);
        self.console = Some(console);
        if action == ServoAction::Restart {
            self.restart();
        }
    }

    /// A reboot: the stored configuration (or the factory one) comes back, with its
    /// `id.id` and `can.prefix`; the servo is stopped with no command, no runtime offset and
    /// a fresh console. The joint stays where it is.
    pub fn restart(&mut self) {
        let stored = self.console.as_ref().and_then(|c| c.stored().map(str::to_string));
        let config = crate::console::stored_config(self, stored.as_deref());
        self.restart_with(config, stored);
    }

    /// [`Servo::restart`] with `config` (already loaded from `stored`) as the configuration
    /// it comes back with. A store request the I/O layer has not taken yet survives.
    fn restart_with(&mut self, config: Config, stored: Option<String>) {
        let pending_store = self.console.as_mut().and_then(|c| c.take_store_request());
        let mut cfg = self.factory;
        config.apply(&mut cfg);
        // The joint does not move when the board reboots; only the offsets can change
        // where it reads.
        self.cfg = cfg;
        self.output_offset_rev = 0.0;
        self.mode = MODE_STOPPED;
        self.fault = fault::NONE;
        self.command = UNSET;
        self.watchdog_timeout_ns = None;
        self.control_pos = f64::NAN;
        self.control_vel = 0.0;
        self.target_pos = f64::NAN;
        self.trajectory_complete = false;
        let mut console = Console::new(config, stored);
        if let Some(text) = pending_store {
            console.restore_store_request(text);
        }
        self.console = Some(Box::new(console));
    }

    /// Take a changed configuration into force: everything but the CAN id and prefix,
    /// which change at the next restart, as on the board. A changed output offset or sign
    /// moves the position a position command holds by the same amount, so the joint does
    /// not jump.
    pub fn reconfigure(&mut self, config: &Config) {
        let before = self.position();
        let mut cfg = self.cfg;
        config.apply(&mut cfg);
        cfg.id = self.cfg.id;
        cfg.can_prefix = self.cfg.can_prefix;
        self.cfg = cfg;
        let shift = self.position() - before;
        if shift.is_finite() && shift != 0.0 {
            self.hold_through_shift(shift);
        }
    }

    /// The output now reads `shift` more: move the position a command holds (and its
    /// target) with it, so the joint does not jump.
    fn hold_through_shift(&mut self, shift: f64) {
        self.control_pos += shift;
        self.target_pos += shift;
    }

    /// Add `shift` to the run-time output offset (set-output registers, `d rezero`).
    fn shift_runtime_offset(&mut self, shift: f64) {
        self.output_offset_rev += shift;
        self.hold_through_shift(shift);
    }

    /// The `motor_position.output.offset` that makes the output read `position` now.
    pub fn output_offset_for(&self, position: f64) -> f64 {
        self.cfg.output_offset_rev + (position - self.position())
    }

    /// Make the output read `position` now (`d rezero`, `d index`): a run-time offset,
    /// lost at restart, as the set-output registers set.
    pub fn set_output_position(&mut self, position: f64) {
        if !position.is_finite() {
            return;
        }
        self.shift_runtime_offset(position - self.position());
    }

    /// Apply a drive command from the console as the same register command would apply.
    pub fn console_command(&mut self, command: ConsoleCommand) {
        self.pending = UNSET;
        self.pending_written = 0;
        self.pending_timeout_written = false;
        let mode = match command {
            ConsoleCommand::Stop => MODE_STOPPED,
            ConsoleCommand::Brake => MODE_BRAKE,
            ConsoleCommand::Position(p) => {
                self.pending[SLOT_POSITION] = p.position;
                self.pending[SLOT_VELOCITY] = p.velocity;
                self.pending[SLOT_FEEDFORWARD] = p.feedforward;
                self.pending[SLOT_KP_SCALE] = p.kp_scale;
                self.pending[SLOT_KD_SCALE] = p.kd_scale;
                self.pending[SLOT_MAXIMUM_TORQUE] = p.max_torque;
                self.pending[SLOT_STOP_POSITION] = p.stop_position;
                self.pending[SLOT_TIMEOUT] = p.timeout_s;
                self.pending_timeout_written = true;
                self.pending[SLOT_VELOCITY_LIMIT] = p.velocity_limit;
                self.pending[SLOT_ACCEL_LIMIT] = p.accel_limit;
                self.pending[SLOT_IGNORE_BOUNDS] = p.ignore_bounds;
                MODE_POSITION
            }
            ConsoleCommand::StayWithin { lower, upper, max_torque } => {
                self.pending[SLOT_LOWER_BOUND] = lower;
                self.pending[SLOT_UPPER_BOUND] = upper;
                self.pending[SLOT_MAXIMUM_TORQUE] = max_torque;
                MODE_STAY_WITHIN
            }
        };
        self.pending_mode = Some(mode);
        self.end_of_frame();
    }

    /// The current mode register value.
    pub fn mode(&self) -> u8 {
        self.mode
    }

    /// Output position the host sees, rev: sign × joint position + configured offset +
    /// the offset set at run time (`d rezero`, the set-output registers).
    pub fn position(&self) -> f64 {
        self.output_sign() * self.phys_pos_rev + self.cfg.output_offset_rev + self.output_offset_rev
    }

    /// Output velocity the host sees, rev/s.
    pub fn velocity(&self) -> f64 {
        self.output_sign() * self.velocity_rev_s
    }

    /// `motor_position.output.sign` as used: -1 for a negative setting, 1 otherwise.
    fn output_sign(&self) -> f64 {
        if self.cfg.output_sign < 0.0 {
            -1.0
        } else {
            1.0
        }
    }

    /// Add a constant heat input to the motor (replacing any earlier one), W; 0 stops it.
    /// For fault injection: enough watts make the servo heat up and trip fault 38.
    pub fn inject_heat(&mut self, watts: f64) {
        self.injected_heat_w = finite_or(watts, 0.0);
    }

    /// Fault injection: overheat the motor from `at_ns` on (replacing any earlier schedule,
    /// even one already started). See the module docs for the heating profile; a driving
    /// servo latches fault 38 / mode 1 within [`OVERHEAT_RAMP_NS`] plus two physics steps.
    pub fn schedule_overheat(&mut self, at_ns: u64) {
        self.overheat = OverheatState::Armed { at_ns };
    }

    /// Cancel a scheduled or running injected overheat (the motor keeps its temperature).
    pub fn cancel_overheat(&mut self) {
        self.overheat = OverheatState::Off;
    }

    /// The injected overheat's state.
    pub fn overheat_state(&self) -> OverheatState {
        self.overheat
    }

    /// What the bus has not logged yet: when an injected overheat started, and when and
    /// with which code a fault latched (the latest of each). Taking them clears them.
    pub(crate) fn take_reports(&mut self) -> (Option<u64>, Option<(u64, u8)>) {
        (self.report_overheat.take(), self.report_latch.take())
    }

    /// Set the motor temperature, °C (the board follows on its own).
    pub fn set_temperature(&mut self, motor_c: f64) {
        self.motor_temp_c = finite_or(motor_c, self.cfg.ambient_c);
    }

    /// Set the board temperature, °C.
    pub fn set_board_temperature(&mut self, board_c: f64) {
        self.board_temp_c = finite_or(board_c, self.cfg.ambient_c);
    }

    /// Move the joint (for test setup and scenario scripts): position in rev, at rest.
    pub fn set_position(&mut self, position_rev: f64) {
        self.phys_pos_rev =
            (finite_or(position_rev, 0.0) - self.cfg.output_offset_rev - self.output_offset_rev) * self.output_sign();
        self.velocity_rev_s = 0.0;
    }

    /// A snapshot of the state.
    pub fn telemetry(&self) -> Telemetry {
        Telemetry {
            id: self.cfg.id,
            mode: self.mode,
            position: self.position(),
            velocity: self.velocity(),
            torque: self.torque_nm,
            q_current: self.q_current_a,
            d_current: 0.0,
            power: self.power_w,
            voltage: self.voltage_v,
            motor_temperature: self.motor_temp_c,
            board_temperature: self.board_temp_c,
            fault: self.fault,
            trajectory_complete: self.trajectory_complete,
            control_position: if self.mode == MODE_POSITION { self.control_pos } else { f64::NAN },
            frames_received: self.frames_received,
            commands_received: self.commands_received,
            watchdog_expiries: self.watchdog_expiries,
            time_ns: self.time_ns.unwrap_or(0),
            overheat: self.overheat,
            faults_latched: self.faults_latched,
        }
    }

    /// Integrate physics, thermal state and the watchdog up to `now_ns`. The first call
    /// only sets the time origin; a time in the past or equal does nothing.
    pub fn advance_to(&mut self, now_ns: u64) {
        let Some(mut t) = self.time_ns else {
            self.time_ns = Some(now_ns);
            self.now_ns = now_ns;
            return;
        };
        self.now_ns = self.now_ns.max(now_ns);
        if self.coupled {
            // The world steps the joint (`drive`); between its steps only the watchdog runs.
            self.check_watchdog(now_ns);
            return;
        }
        if now_ns <= t {
            return;
        }
        if now_ns - t > MAX_CATCH_UP_NS {
            t = now_ns - MAX_CATCH_UP_NS;
        }
        let step_ns = self.cfg.step_ns.max(1);
        let dt = step_ns as f64 * 1e-9;
        while now_ns - t >= step_ns {
            t += step_ns;
            self.check_watchdog(t);
            self.step(t, dt);
        }
        self.time_ns = Some(t);
        self.check_watchdog(now_ns);
    }

    /// Handle one frame seen on the bus at `now_ns`. Returns true when `reply` was filled
    /// with the answer to send (the request had the reply-required bit).
    pub fn handle_frame(&mut self, frame: &CanFdFrame, now_ns: u64, reply: &mut CanFdFrame) -> bool {
        self.advance_to(now_ns);
        if frame.flags.remote {
            return false;
        }
        let arb = frame.arbitration();
        if arb.prefix != self.cfg.can_prefix & 0x1FFF {
            return false;
        }
        if arb.destination != self.cfg.id && arb.destination != BROADCAST {
            return false;
        }
        self.frames_received += 1;

        let mut buf = [0u8; rtloop_proto::frame::MAX_DATA];
        let mut writer = FrameWriter::new(&mut buf);
        self.frame_ended = false;
        // Malformed input: the subframes before the error stay applied and are answered,
        // as a real controller does; the error itself is not reported on the wire.
        if serve(frame.payload(), self, &mut writer).is_err() {
            self.request_errors.malformed_frames += 1;
        }
        if !self.frame_ended {
            self.end_of_frame();
        }
        if !arb.reply_required {
            return false;
        }
        let id =
            ArbitrationId { prefix: arb.prefix, source: self.cfg.id, destination: arb.source, reply_required: false }
                .build();
        *reply = CanFdFrame::default();
        reply.id = id;
        if reply.set_payload(writer.as_slice()).is_err() {
            reply.len = 0;
        }
        reply.pad_to_dlc();
        // Real controllers answer with extended ids even when the id would fit in 11 bits
        // (the spec's captured reply line carries `E`).
        reply.flags = FrameFlags { extended: true, ..FrameFlags::moteus(id) };
        true
    }

    fn check_watchdog(&mut self, t: u64) {
        if !matches!(self.mode, MODE_POSITION | MODE_ZERO_VELOCITY | MODE_STAY_WITHIN) {
            return;
        }
        if let Some(timeout) = self.watchdog_timeout_ns {
            if t.saturating_sub(self.last_command_ns) > timeout {
                self.mode = MODE_TIMEOUT;
                self.watchdog_expiries += 1;
            }
        }
    }

    /// Torque the controller asks for in the current mode (before the limit).
    fn control_torque(&mut self, dt: f64) -> (f64, f64) {
        let pos = self.position();
        let vel = self.velocity();
        let kp = self.cfg.kp_nm_per_rev;
        let kd = self.cfg.kd_nms_per_rev;
        let current_limit_nm = (self.cfg.max_current_a * self.cfg.kt_nm_per_a).abs();
        let max =
            self.cfg.max_torque_nm.abs().min(if current_limit_nm.is_nan() { f64::INFINITY } else { current_limit_nm });
        let kp_scale = finite_or(self.command[SLOT_KP_SCALE], 1.0);
        let kd_scale = finite_or(self.command[SLOT_KD_SCALE], 1.0);
        let feedforward = finite_or(self.command[SLOT_FEEDFORWARD], 0.0);
        let cmd_max = self.command[SLOT_MAXIMUM_TORQUE];
        let limit = if cmd_max.is_finite() { max.min(cmd_max.abs()) } else { max };
        match self.mode {
            MODE_POSITION => {
                self.update_trajectory(dt);
                self.apply_position_bounds();
                let torque =
                    kp * kp_scale * (self.control_pos - pos) + kd * kd_scale * (self.control_vel - vel) + feedforward;
                (torque, limit)
            }
            MODE_ZERO_VELOCITY | MODE_TIMEOUT | MODE_BRAKE => (-kd * vel, max),
            MODE_STAY_WITHIN => {
                let lower = self.command[SLOT_LOWER_BOUND];
                let upper = self.command[SLOT_UPPER_BOUND];
                let bound = if lower.is_finite() && pos < lower {
                    lower
                } else if upper.is_finite() && pos > upper {
                    upper
                } else {
                    return (feedforward, limit);
                };
                (kp * kp_scale * (bound - pos) - kd * kd_scale * vel + feedforward, limit)
            }
            _ => (0.0, 0.0),
        }
    }

    /// `servopos.position_min/max` hold the control position inside them unless the
    /// command asked to ignore the bounds.
    fn apply_position_bounds(&mut self) {
        let ignore = self.command[SLOT_IGNORE_BOUNDS];
        if ignore.is_finite() && ignore != 0.0 {
            return;
        }
        let (lo, hi) = (self.cfg.position_min_rev, self.cfg.position_max_rev);
        if lo.is_finite() && self.control_pos < lo {
            self.control_pos = lo;
            self.control_vel = self.control_vel.max(0.0);
        }
        if hi.is_finite() && self.control_pos > hi {
            self.control_pos = hi;
            self.control_vel = self.control_vel.min(0.0);
        }
    }

    /// The command's velocity and acceleration limits, the configured defaults where the
    /// command leaves them unset (+inf: none).
    fn trajectory_limits(&self) -> (f64, f64) {
        let or_default = |x: f64, default: f64| if x.is_nan() { default } else { x };
        (
            limit_or_inf(or_default(self.command[SLOT_VELOCITY_LIMIT], self.cfg.default_velocity_limit)),
            limit_or_inf(or_default(self.command[SLOT_ACCEL_LIMIT], self.cfg.default_accel_limit)),
        )
    }

    /// Move the control position one step (see the module docs).
    fn update_trajectory(&mut self, dt: f64) {
        let max_velocity = limit_or_inf(self.cfg.max_velocity_rev_s);
        let velocity = clampf(finite_or(self.command[SLOT_VELOCITY], 0.0), -max_velocity, max_velocity);
        let (vlim, alim) = self.trajectory_limits();
        if vlim.is_infinite() && alim.is_infinite() {
            self.control_vel = velocity;
            self.control_pos += velocity * dt;
            self.trajectory_complete = true;
            return;
        }
        let dv_max = alim * dt;
        if self.target_pos.is_nan() {
            // Velocity-only target: ramp the velocity.
            let goal = clampf(velocity, -vlim, vlim);
            self.control_vel += clampf(goal - self.control_vel, -dv_max, dv_max);
            self.control_pos += self.control_vel * dt;
            self.trajectory_complete = (goal - self.control_vel).abs() < 1e-12;
            return;
        }
        self.target_pos += velocity * dt;
        let error = self.target_pos - self.control_pos;
        // Fastest approach that can still stop (relative to the moving target) within the
        // acceleration limit, never more than closes the gap in one step.
        let closing = (2.0 * alim * error.abs()).sqrt().min(error.abs() / dt);
        let desired = clampf(velocity + error.signum() * closing, -vlim, vlim);
        self.control_vel += clampf(desired - self.control_vel, -dv_max, dv_max);
        self.control_pos += self.control_vel * dt;
        let remaining = self.target_pos - self.control_pos;
        if remaining.abs() < 1e-9 && (self.control_vel - velocity).abs() <= dv_max.max(1e-9) {
            self.control_pos = self.target_pos;
            self.control_vel = clampf(velocity, -vlim, vlim);
            self.trajectory_complete = true;
        } else {
            self.trajectory_complete = false;
        }
    }

    /// One physics step of `dt` seconds ending at `t`: controller, joint, electrical,
    /// thermal, faults.
    fn step(&mut self, t: u64, dt: f64) {
        let joint_torque = self.actuate(dt);
        (self.phys_pos_rev, self.velocity_rev_s) =
            crate::plant::joint_step(&self.joint_params(), self.phys_pos_rev, self.velocity_rev_s, joint_torque, dt)
                .unwrap_or((self.phys_pos_rev, 0.0));
        self.settle(t, dt, joint_torque);
    }

    /// The joint this servo turns when no plant is coupled to it.
    fn joint_params(&self) -> crate::plant::JointParams {
        crate::plant::JointParams {
            inertia_kgm2: self.cfg.inertia_kgm2,
            damping_nms_per_rad: self.cfg.damping_nms_per_rad,
            load_torque_nm: self.cfg.load_torque_nm,
            friction_nm: self.cfg.friction_nm,
        }
    }

    /// The controller's torque for this step, limited; returns it at the joint (N·m).
    fn actuate(&mut self, dt: f64) -> f64 {
        let (wanted, limit) = self.control_torque(dt);
        let torque = if wanted.is_nan() { 0.0 } else { clampf(wanted, -limit, limit) };
        self.torque_nm = torque;
        // The controller works at the output; the joint turns the other way when the
        // output sign is negative.
        self.output_sign() * torque
    }

    /// Coupled to a plant ([`crate::world::World`]): the world calls this once per plant step
    /// ending at `t` (`dt` seconds long) — watchdog, controller, electrical and thermal state,
    /// faults — and applies the returned joint torque (N·m) to the plant, then reports the
    /// joint's new state through [`Servo::set_joint_state`].
    pub fn drive(&mut self, t: u64, dt: f64) -> f64 {
        self.check_watchdog(t);
        let joint_torque = self.actuate(dt);
        self.settle(t, dt, joint_torque);
        self.time_ns = Some(t);
        self.now_ns = self.now_ns.max(t);
        joint_torque
    }

    /// Couple the servo to a plant that moves its joint (or uncouple it): from now on
    /// [`Servo::advance_to`] keeps time and the watchdog only, and the joint moves through
    /// [`Servo::drive`] and [`Servo::set_joint_state`].
    pub fn set_coupled(&mut self, coupled: bool) {
        self.coupled = coupled;
    }

    /// Set the servo up for the joint it drives ([`ServoSetup`]), in the configuration it
    /// starts from (as stored with `conf write`) and in the one in force. A setup that is not
    /// [`ServoSetup::is_valid`] is ignored.
    pub fn set_stored_setup(&mut self, setup: &ServoSetup) {
        if !setup.is_valid() {
            return;
        }
        let kt = MOTOR_KT_NM_PER_A * setup.gear_ratio;
        for cfg in [&mut self.cfg, &mut self.factory] {
            cfg.kp_nm_per_rev = setup.kp_nm_per_rev;
            cfg.kd_nms_per_rev = setup.kd_nms_per_rev;
            cfg.max_torque_nm = setup.max_torque_nm;
            cfg.kt_nm_per_a = kt;
            // The phase current that gives the torque limit: the current limit never caps
            // below the torque asked for.
            cfg.max_current_a = cfg.max_current_a.max(setup.max_torque_nm / kt).min(MAX_CURRENT_A);
            cfg.output_sign = setup.output_sign;
        }
        // A console made before shows the old configuration: make it again from the new one.
        if self.console.is_some() {
            self.console = Some(fresh_console(&self.factory));
        }
    }

    /// Set the position gains in force (`kp` N·m/rev, `kd` N·m·s/rev) without touching the
    /// stored configuration: a simulated episode's servo, stiffer or softer than the stored
    /// one (domain randomisation). No allocation. Non-finite or negative values are ignored.
    pub fn set_gains(&mut self, kp: f64, kd: f64) {
        if kp.is_finite() && kd.is_finite() && kp >= 0.0 && kd >= 0.0 {
            self.cfg.kp_nm_per_rev = kp;
            self.cfg.kd_nms_per_rev = kd;
        }
    }

    /// The joint's state as the plant computed it: position (rev, before the output sign and
    /// offset) and velocity (rev/s). Non-finite values are ignored (the joint keeps its last
    /// state), so a servo never reports a NaN it was handed.
    pub fn set_joint_state(&mut self, pos_rev: f64, vel_rev_s: f64) {
        if pos_rev.is_finite() && vel_rev_s.is_finite() {
            self.phys_pos_rev = pos_rev;
            self.velocity_rev_s = vel_rev_s;
        }
    }

    /// Electrical and thermal state after a step that put `joint_torque` on the joint, and
    /// the over-temperature fault.
    fn settle(&mut self, t: u64, dt: f64, joint_torque: f64) {
        let torque = self.torque_nm;
        // Electrical.
        let kt = if self.cfg.kt_nm_per_a.abs() > 1e-9 { self.cfg.kt_nm_per_a } else { 1.0 };
        let current = torque / kt;
        let copper_w = current * current * self.cfg.phase_resistance_ohm;
        self.q_current_a = current;
        self.power_w = joint_torque * self.velocity_rev_s * TAU + copper_w;
        self.voltage_v = self.cfg.supply_voltage_v - self.cfg.source_resistance_ohm * current.abs();

        // Thermal: first order toward ambient.
        let ambient = self.cfg.ambient_c;
        let motor_c = self.cfg.motor_heat_capacity_j_per_k.abs().max(1e-6);
        let motor_r = self.cfg.motor_thermal_resistance_k_per_w.abs().max(1e-6);
        let board_c = self.cfg.board_heat_capacity_j_per_k.abs().max(1e-6);
        let board_r = self.cfg.board_thermal_resistance_k_per_w.abs().max(1e-6);
        let overheat_w = self.overheat_heat_w(t, motor_c, motor_r);
        let motor_in = copper_w + self.injected_heat_w + overheat_w - (self.motor_temp_c - ambient) / motor_r;
        self.motor_temp_c += motor_in / motor_c * dt;
        let board_in = current * current * self.cfg.board_resistance_ohm - (self.board_temp_c - ambient) / board_r;
        self.board_temp_c += board_in / board_c * dt;

        if !matches!(self.mode, MODE_STOPPED | MODE_FAULT)
            && (self.motor_temp_c >= self.cfg.fault_temperature_c || self.board_temp_c >= self.cfg.fault_temperature_c)
        {
            self.mode = MODE_FAULT;
            self.fault = fault::OVER_TEMPERATURE;
            self.faults_latched += 1;
            self.report_latch = Some((t, self.fault));
        }
    }

    /// Heat an injected overheat puts into the motor in the step ending at `t`, W: enough
    /// (with the motor's own loss to ambient made up) for a steady rise that covers the
    /// distance to the overshoot in [`OVERHEAT_RAMP_NS`]; 0 outside the heating phase.
    fn overheat_heat_w(&mut self, t: u64, motor_c: f64, motor_r: f64) -> f64 {
        let ambient = self.cfg.ambient_c;
        let target = finite_or(self.cfg.fault_temperature_c, ambient + 55.0) + OVERHEAT_OVERSHOOT_C;
        let ramp_s = OVERHEAT_RAMP_NS as f64 * 1e-9;
        if let OverheatState::Armed { at_ns } = self.overheat {
            if t < at_ns {
                return 0.0;
            }
            self.overheat = OverheatState::Heating { since_ns: t };
            self.overheat_rate_c_per_s = (target - self.motor_temp_c).max(OVERHEAT_OVERSHOOT_C) / ramp_s;
            self.report_overheat = Some(t);
        }
        let OverheatState::Heating { since_ns } = self.overheat else {
            return 0.0;
        };
        if self.motor_temp_c >= target || t - since_ns >= 2 * OVERHEAT_RAMP_NS {
            self.overheat = OverheatState::Done { since_ns };
            return 0.0;
        }
        motor_c * self.overheat_rate_c_per_s + (self.motor_temp_c - ambient) / motor_r
    }

    /// Apply the command gathered from the frame just served.
    fn commit_command(&mut self, requested: u8) {
        self.commands_received += 1;
        if matches!(self.mode, MODE_TIMEOUT | MODE_FAULT) && requested != MODE_STOPPED {
            return; // latched: only a stop leaves
        }
        // Sanitise: a non-finite target or gain means "unset".
        let mut command = self.pending;
        for slot in [SLOT_POSITION, SLOT_VELOCITY, SLOT_FEEDFORWARD, SLOT_KP_SCALE, SLOT_KD_SCALE] {
            if !command[slot].is_finite() {
                command[slot] = f64::NAN;
            }
        }
        self.command = command;
        self.last_command_ns = self.now_ns;
        let timeout_s = if self.pending_timeout_written { command[SLOT_TIMEOUT] } else { 0.0 };
        self.watchdog_timeout_ns = if timeout_s.is_nan() {
            None
        } else {
            let s = if timeout_s > 0.0 { timeout_s } else { self.cfg.watchdog_default_s };
            // A configured default of NaN (or anything not positive) means no watchdog,
            // never an immediate timeout.
            (s > 0.0).then_some((s * 1e9) as u64) // saturating cast: +inf → never
        };

        let previous = self.mode;
        match requested {
            MODE_STOPPED => {
                self.mode = MODE_STOPPED;
                self.fault = fault::NONE;
            }
            MODE_POSITION => {
                if previous != MODE_POSITION {
                    self.control_pos = self.position();
                    self.control_vel = self.velocity();
                    self.target_pos = f64::NAN;
                }
                let position = command[SLOT_POSITION];
                let (vlim, alim) = self.trajectory_limits();
                let limited = vlim.is_finite() || alim.is_finite();
                if limited {
                    self.target_pos = position; // NaN: velocity-only profile
                    self.trajectory_complete = false;
                } else {
                    if !position.is_nan() {
                        self.control_pos = position;
                    }
                    self.target_pos = f64::NAN;
                    self.trajectory_complete = true;
                }
                self.mode = MODE_POSITION;
            }
            MODE_ZERO_VELOCITY | MODE_STAY_WITHIN | MODE_BRAKE => self.mode = requested,
            _ => self.mode = MODE_STOPPED, // unsupported: a stop that keeps nothing running
        }
        if self.mode != MODE_POSITION {
            self.trajectory_complete = false;
        }
    }
}

impl RegisterServer for Servo {
    fn write(&mut self, r: u16, value: Value) -> Result<(), u32> {
        if r == reg::MODE {
            // Read as the firmware reads an integer register: a float is truncated (10.7 is
            // position mode). A NaN or out-of-range mode is an unsupported mode: handled as a
            // stop.
            let mode = match rtloop_proto::host::read_int_register(reg::MODE, value) {
                rtloop_proto::host::IntReading::Int(m) => u8::try_from(m).unwrap_or(u8::MAX),
                _ => u8::MAX,
            };
            self.pending_mode = Some(mode);
            return Ok(());
        }
        if let Some(slot) = command_slot(r) {
            self.pending[slot] = value.decode(class_of(r));
            self.pending_written |= 1 << slot;
            self.pending_command = true;
            self.pending_timeout_written |= slot == SLOT_TIMEOUT;
            return Ok(());
        }
        match r {
            reg::SET_OUTPUT_NEAREST | reg::SET_OUTPUT_EXACT => {
                let target = value.decode(ScaleClass::Position);
                if target.is_finite() {
                    self.pending_set_output = Some((target, r == reg::SET_OUTPUT_EXACT));
                }
                Ok(())
            }
            // Telemetry and identity are read-only; everything else is unknown.
            _ => Err(ERROR_UNKNOWN_REGISTER),
        }
    }

    fn read(&mut self, r: u16, res: Resolution) -> Result<Value, u32> {
        let class = class_of(r);
        let float = |x: f64| Ok(Value::encode(x, class, res));
        match r {
            reg::MODE => Ok(Value::encode_int(i32::from(self.mode), res)),
            reg::POSITION => float(self.position()),
            reg::VELOCITY => float(self.velocity()),
            reg::TORQUE => float(self.torque_nm),
            reg::Q_CURRENT => float(self.q_current_a),
            reg::D_CURRENT => float(0.0),
            reg::ABS_POSITION => float(self.phys_pos_rev.rem_euclid(1.0)),
            reg::POWER => float(self.power_w),
            reg::MOTOR_TEMPERATURE => float(self.motor_temp_c),
            reg::TRAJECTORY_COMPLETE => Ok(Value::encode_int(i32::from(self.trajectory_complete), res)),
            reg::HOME_STATE => Ok(Value::encode_int(0, res)),
            reg::VOLTAGE => float(self.voltage_v),
            reg::TEMPERATURE => float(self.board_temp_c),
            reg::FAULT => Ok(Value::encode_int(i32::from(self.fault), res)),
            reg::MILLISECOND_COUNTER => Ok(wrapping_int((self.now_ns / 1_000_000) as i64, res)),
            reg::MODEL_NUMBER => Ok(wrapping_int(i64::from(MODEL_NUMBER), res)),
            reg::FIRMWARE_VERSION => Ok(wrapping_int(i64::from(FIRMWARE_VERSION), res)),
            reg::REGISTER_MAP_VERSION => Ok(Value::encode_int(i32::from(REGISTER_MAP_VERSION), res)),
            reg::MULTIPLEX_ID => Ok(Value::encode_int(i32::from(self.cfg.id), res)),
            reg::SERIAL_NUMBER1 => Ok(wrapping_int(i64::from(self.serial_number()[0]), res)),
            reg::SERIAL_NUMBER2 => Ok(wrapping_int(i64::from(self.serial_number()[1]), res)),
            reg::SERIAL_NUMBER3 => Ok(wrapping_int(i64::from(self.serial_number()[2]), res)),
            _ => match command_slot(r) {
                Some(slot) if self.pending_written & (1 << slot) != 0 => float(self.pending[slot]),
                Some(slot) => float(self.command[slot]),
                None => Err(ERROR_UNKNOWN_REGISTER),
            },
        }
    }

    fn client_data(&mut self, channel: u32, data: &[u8]) -> Result<(), NotUnderstood> {
        if channel != crate::console::CHANNEL {
            return Err(NotUnderstood::UnknownChannel { channel });
        }
        let dropped = self.console_mut().receive(data);
        self.pump_console();
        if dropped > 0 {
            return Err(NotUnderstood::InputFull { dropped });
        }
        Ok(())
    }

    fn poll(&mut self, channel: u32, out: &mut [u8]) -> usize {
        if channel != crate::console::CHANNEL {
            return 0;
        }
        self.pump_console();
        let n = self.console_mut().poll(out);
        // Polling made room: let a pending answer continue into it.
        self.pump_console();
        n
    }

    fn poll_flow(&mut self, channel: u32, ack: u8, out: &mut [u8]) -> (u8, usize) {
        if channel != crate::console::CHANNEL {
            return (ack, 0);
        }
        self.pump_console();
        let answer = self.console_mut().poll_flow(ack, out);
        self.pump_console();
        answer
    }

    fn not_understood(&mut self, _what: NotUnderstood) {
        self.request_errors.not_understood += 1;
    }

    fn end_of_frame(&mut self) {
        self.frame_ended = true;
        if let Some((target, exact)) = self.pending_set_output.take() {
            let current = self.position();
            let shift = if exact { target - current } else { (target - current).round() };
            self.shift_runtime_offset(shift);
        }
        let mode = self.pending_mode.take();
        let wrote = core::mem::replace(&mut self.pending_command, false);
        if mode.is_some() || wrote {
            self.commit_command(mode.unwrap_or(self.mode));
        }
        self.pending = UNSET;
        self.pending_written = 0;
        self.pending_timeout_written = false;
    }
}
