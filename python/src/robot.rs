//! `rtloop.Robot`: one call commands and queries every servo of a robot, states out as one
//! numpy structured array.
//!
//! What it is for: driving [`rtloop_io::Robot`] — the multi-bus cycle with per-servo reply
//! attribution — from Python at rtloop's speed. A robot is the built-in simulated quadruped,
//! buses given as URIs (`sim`, `fdcanusb:PATH`, `socketcan:IFACE`, `udp:HOST:PORT`), or the
//! `[[bus]]` tables of an `rtloop run --config` file. Each cycle's arguments (scalars or one
//! value per servo) are range-checked here, the cycle runs with the GIL released, and the
//! replies land in one freshly allocated, read-only structured array whose fields the
//! [`State`] hands out as views.
//!
//! What it must never do: panic or crash on any input (every number from Python is checked
//! before it reaches the codec: NaN only where moteus gives it a meaning, ranges named in the
//! message), hold the GIL while it waits on a bus or a clock, block on its lock while holding
//! the GIL (a robot busy on another thread is an error, not a deadlock), or hand out a state
//! as fresh when its reply did not answer this cycle's request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, TryLockError};

use numpy::npyffi::{self, PY_ARRAY_API};
use numpy::{PyArray1, PyArrayDescr, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString, PyTuple};

use rtloop::config::{
    show_number, RunConfig, DEFAULT_WATCHDOG_TIMEOUT_S, MAX_WATCHDOG_TIMEOUT_S, MIN_WATCHDOG_TIMEOUT_S,
};
use rtloop::robot_spec::{parse_id_list, BusSpec, RobotSpec};
use rtloop_io::{BusUri, Clock, CycleReport, MonotonicClock, RobotConfig, ServoCommand, ServoReply, VirtualClock};
use rtloop_proto::host::{PositionCommand, PositionResolution, QueryFormat};
use rtloop_proto::register::class_of;
use rtloop_proto::Resolution;
use rtloop_sim::ImuSample;
use rtloop_simrobot::SimRobot;

use crate::values::{self, Given, Refusal, FIELDS, NAMES, REGISTERS};

/// Add `Robot`, `State` and `Command` to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Robot>()?;
    m.add_class::<State>()?;
    m.add_class::<Command>()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Command fields and their ranges
// ---------------------------------------------------------------------------------------

/// Units of each field, for messages ("" for the dimensionless gain scales).
const UNITS: [&str; FIELDS] = ["rev", "rev/s", "N·m", "", "", "N·m", "rev", "s", "rev/s", "rev/s²"];

const POSITION: usize = 0;
const WATCHDOG: usize = 7;

/// Fields that can only be zero or more (a negative gain scale, torque limit or
/// velocity/acceleration limit means nothing to moteus).
const NON_NEGATIVE: [bool; FIELDS] = [false, false, false, true, true, true, false, true, true, true];

/// An accepted closed interval, and whether its bound comes from what the resolution can
/// carry (so a message can say how to get more).
#[derive(Debug, Clone, Copy)]
struct Range {
    /// Lowest accepted.
    lo: f64,
    /// Highest accepted.
    hi: f64,
    /// A bound is what the resolution carries, narrower than the limit asked for.
    capped: bool,
}

/// The default range of every field: the agent protocol's [`rtloop_agent::validate::Limits`]
/// (sized for a small legged robot), and rtloop's watchdog rule (0.01 to 10 s: never off).
fn default_limits() -> [(f64, f64); FIELDS] {
    let l = rtloop_agent::validate::Limits::default();
    [
        (l.position_min, l.position_max),
        (-l.max_velocity, l.max_velocity),
        (-l.max_torque, l.max_torque),
        (0.0, l.max_kp_scale),
        (0.0, l.max_kd_scale),
        (0.0, l.max_torque),
        (l.position_min, l.position_max),
        (MIN_WATCHDOG_TIMEOUT_S, MAX_WATCHDOG_TIMEOUT_S),
        (0.0, l.max_velocity),
        (0.0, l.max_accel),
    ]
}

/// The largest magnitude field `i` can carry at `res`: an integer resolution saturates at
/// its largest integer times the register's scale (int16 positions end at ±3.2767 rev);
/// floats at the largest f32.
fn carried(i: usize, res: Resolution) -> f64 {
    class_of(REGISTERS[i]).carried_max(res)
}

/// Every field's range: `limits` narrowed to what `res` carries.
fn ranges(limits: &[(f64, f64); FIELDS], res: Resolution) -> [Range; FIELDS] {
    let mut out = [Range { lo: 0.0, hi: 0.0, capped: false }; FIELDS];
    for (i, r) in out.iter_mut().enumerate() {
        let (lo, hi) = limits[i];
        let cap = carried(i, res);
        *r = Range { lo: lo.max(-cap), hi: hi.min(cap), capped: lo < -cap || hi > cap };
    }
    out
}

/// What a command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Mode 10 with fields.
    Position,
    /// Mode 0.
    Stop,
    /// Mode 12.
    ZeroVelocity,
    /// Mode 15.
    Brake,
    /// No command, only the query.
    Query,
}

impl Kind {
    fn parse(text: &str) -> PyResult<Kind> {
        Ok(match text {
            "position" => Kind::Position,
            "stop" => Kind::Stop,
            "zero_velocity" | "zero-velocity" => Kind::ZeroVelocity,
            "brake" => Kind::Brake,
            "query" => Kind::Query,
            other => {
                return Err(PyValueError::new_err(format!(
                    "mode {other:?} is unknown; give 'position', 'stop', 'zero_velocity', 'brake' or 'query'"
                )))
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Position => "position",
            Kind::Stop => "stop",
            Kind::ZeroVelocity => "zero_velocity",
            Kind::Brake => "brake",
            Kind::Query => "query",
        }
    }

    /// Why field `i` cannot go with this kind (any but position).
    fn refuse_field(self, i: usize) -> PyErr {
        PyValueError::new_err(format!(
            "{} is sent only with mode='position', not mode={:?}; drop it or use mode='position'",
            NAMES[i],
            self.name()
        ))
    }

    /// The command, for kinds without fields.
    fn simple(self) -> Option<ServoCommand> {
        match self {
            Kind::Position => None,
            Kind::Stop => Some(ServoCommand::Stop),
            Kind::ZeroVelocity => Some(ServoCommand::ZeroVelocity),
            Kind::Brake => Some(ServoCommand::Brake),
            Kind::Query => Some(ServoCommand::Query),
        }
    }
}

/// Check one value of field `i`; `servo` names the servo for per-servo values.
fn check(i: usize, v: f64, range: &Range, servo: Option<(u8, u8)>, resolution: Resolution) -> PyResult<f64> {
    // The hot path: a finite value in range (or a NaN position, which holds where the servo
    // is, as in moteus) goes through without building any message.
    if (v >= range.lo && v <= range.hi && v.is_finite()) || (i == POSITION && v.is_nan()) {
        return Ok(v);
    }
    Err(refusal(i, v, range, servo, resolution))
}

/// Why `check` refused value `v` of field `i`: one sentence naming the field, the servo
/// and the range.
fn refusal(i: usize, v: f64, range: &Range, servo: Option<(u8, u8)>, resolution: Resolution) -> PyErr {
    let name = NAMES[i];
    let unit = UNITS[i];
    let whom = servo.map(|(bus, id)| format!(" for servo {id} on bus {bus}")).unwrap_or_default();
    let span = if unit.is_empty() {
        format!("{} to {}", show_number(range.lo), show_number(range.hi))
    } else {
        format!("{} to {} {unit}", show_number(range.lo), show_number(range.hi))
    };
    if i == WATCHDOG && (v == 0.0 || v.is_nan()) {
        let what = if v == 0.0 {
            "would hand the watchdog to the servo's configured default, which may be off"
        } else {
            "would switch the servo's watchdog off"
        };
        return PyValueError::new_err(format!(
            "watchdog_timeout {}{whom} {what}; give {span} (every position command carries a watchdog)",
            show_number(v)
        ));
    }
    if !v.is_finite() {
        let nan = if i == POSITION { "" } else { " (NaN is accepted only for position, meaning hold)" };
        return PyValueError::new_err(format!(
            "{name} is {}{whom}; give a finite number from {span}{nan}",
            show_number(v)
        ));
    }
    let more = if range.capped && resolution != Resolution::Float {
        format!(" ({} commands carry no more; Robot(resolution=\"float\") carries more)", resolution.name())
    } else {
        String::new()
    };
    PyValueError::new_err(format!("{name} {}{whom} is outside {span}; give a value within it{more}", show_number(v)))
}

// ---------------------------------------------------------------------------------------
// Command
// ---------------------------------------------------------------------------------------

/// One servo's command for `Robot.cycle(commands=[...])`, as `Controller.make_position()`,
/// `make_stop()`, `make_query()` … build it. The robot checks its numbers (ranges, NaN)
/// when it sends it; servos no command names are queried.
#[pyclass(module = "rtloop", frozen)]
#[derive(Debug, Clone)]
pub struct Command {
    /// The servo's moteus id.
    id: u8,
    /// Its bus number (`None`: the id alone, unique on the robot).
    bus: Option<u8>,
    /// What to do.
    kind: Kind,
    /// Position-mode fields in [`NAMES`] order (`None`: not sent); checked when sent.
    fields: [Option<f64>; FIELDS],
}

#[pymethods]
impl Command {
    /// `Command(id, *, bus=None, mode="position", position=None, ...)`: the command for servo
    /// `id` (on bus `bus`; `None` when the id is on one bus only). Fields as `Robot.cycle`:
    /// positions rev, velocities rev/s, torques N·m, times s; `None` = not sent (the
    /// watchdog is always sent: 0.1 s unless given).
    #[new]
    #[pyo3(signature = (id, *, bus=None, mode="position", position=None, velocity=None, feedforward_torque=None,
        kp_scale=None, kd_scale=None, maximum_torque=None, stop_position=None, watchdog_timeout=None,
        velocity_limit=None, accel_limit=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        id: i64,
        bus: Option<i64>,
        mode: &str,
        position: Option<f64>,
        velocity: Option<f64>,
        feedforward_torque: Option<f64>,
        kp_scale: Option<f64>,
        kd_scale: Option<f64>,
        maximum_torque: Option<f64>,
        stop_position: Option<f64>,
        watchdog_timeout: Option<f64>,
        velocity_limit: Option<f64>,
        accel_limit: Option<f64>,
    ) -> PyResult<Self> {
        let id = u8::try_from(id)
            .ok()
            .filter(|i| (1..=127).contains(i))
            .ok_or_else(|| PyValueError::new_err(format!("servo id {id} is outside 1 to 127; give a moteus id")))?;
        let bus = match bus {
            None => None,
            Some(b) => Some(u8::try_from(b).ok().filter(|&b| b >= 1).ok_or_else(|| {
                PyValueError::new_err(format!("bus {b} is not a bus number; give 1 to 255 (or None)"))
            })?),
        };
        let kind = Kind::parse(mode)?;
        let fields = [
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
        ];
        if kind != Kind::Position {
            if let Some(i) = fields.iter().position(Option::is_some) {
                return Err(kind.refuse_field(i));
            }
        }
        Ok(Command { id, bus, kind, fields })
    }

    /// The servo's moteus id.
    #[getter]
    fn id(&self) -> u8 {
        self.id
    }

    /// The servo's bus number, or None when the command names the id alone.
    #[getter]
    fn bus(&self) -> Option<u8> {
        self.bus
    }

    /// "position", "stop", "zero_velocity", "brake" or "query".
    #[getter]
    fn mode(&self) -> &'static str {
        self.kind.name()
    }

    /// The position-mode fields that are set, by name (positions rev, velocities rev/s,
    /// torques N·m, times s).
    #[getter]
    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (name, v) in NAMES.iter().zip(self.fields) {
            if let Some(v) = v {
                d.set_item(name, v)?;
            }
        }
        Ok(d)
    }

    /// `Command(id, bus=…, mode=…, field=value, …)`.
    fn __repr__(&self) -> String {
        let mut s = format!("Command({}", self.id);
        if let Some(b) = self.bus {
            s += &format!(", bus={b}");
        }
        s += &format!(", mode={:?}", self.kind.name());
        for (name, v) in NAMES.iter().zip(self.fields) {
            if let Some(v) = v {
                s += &format!(", {name}={v}");
            }
        }
        s + ")"
    }
}

// ---------------------------------------------------------------------------------------
// The state array
// ---------------------------------------------------------------------------------------

/// Byte layout of one row of a state's structured array: `(name, numpy format, offset)`.
/// Natural alignment throughout, so numpy marks the array aligned.
const ROW: [(&str, &str, usize); 15] = [
    ("id", "i4", 0),
    ("bus", "i4", 4),
    ("mode", "i4", 8),
    ("position", "f8", 16),
    ("velocity", "f8", 24),
    ("torque", "f8", 32),
    ("q_current", "f8", 40),
    ("d_current", "f8", 48),
    ("motor_temperature", "f8", 56),
    ("temperature", "f8", 64),
    ("voltage", "f8", 72),
    ("fault", "i4", 80),
    ("fresh", "?", 84),
    ("age_cycles", "i8", 88),
    ("request_cycle", "i8", 96),
];

/// Bytes per row.
const ROW_SIZE: usize = 104;

/// The numpy dtype of [`ROW`].
fn state_dtype(py: Python<'_>) -> PyResult<Py<PyArrayDescr>> {
    let spec = PyDict::new(py);
    spec.set_item("names", ROW.iter().map(|r| r.0).collect::<Vec<_>>())?;
    spec.set_item("formats", ROW.iter().map(|r| r.1).collect::<Vec<_>>())?;
    spec.set_item("offsets", ROW.iter().map(|r| r.2).collect::<Vec<_>>())?;
    spec.set_item("itemsize", ROW_SIZE)?;
    let dtype = PyArrayDescr::new(py, &spec)?;
    // The rows are written byte by byte at these offsets: a dtype of another size would
    // misread them, so refuse rather than hand out garbage.
    if dtype.itemsize() != ROW_SIZE {
        return Err(PyRuntimeError::new_err(format!(
            "numpy made the state dtype {} bytes long instead of {ROW_SIZE}; report this with your numpy version",
            dtype.itemsize()
        )));
    }
    Ok(dtype.unbind())
}

/// Write `bytes` at `offset` of `row` (rows are sized [`ROW_SIZE`], so this always fits).
fn put(row: &mut [u8], offset: usize, bytes: &[u8]) {
    if let Some(dst) = row.get_mut(offset..offset + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

/// One servo's row: where it is, and its reply as [`ServoReply`] holds it.
fn write_row(row: &mut [u8], spec: (u8, u8), reply: &ServoReply) {
    let (bus, id) = spec;
    let s = &reply.state;
    let int = |v: Option<u8>| v.map_or(-1, i32::from);
    put(row, 0, &i32::from(id).to_ne_bytes());
    put(row, 4, &i32::from(bus).to_ne_bytes());
    put(row, 8, &int(s.mode).to_ne_bytes());
    for (offset, v) in [
        (16, s.position),
        (24, s.velocity),
        (32, s.torque),
        (40, s.q_current),
        (48, s.d_current),
        (56, s.motor_temperature),
        (64, s.temperature),
        (72, s.voltage),
    ] {
        put(row, offset, &v.to_ne_bytes());
    }
    put(row, 80, &int(s.fault).to_ne_bytes());
    put(row, 84, &[u8::from(reply.fresh)]);
    let age = reply.age().map_or(-1, |a| i64::try_from(a).unwrap_or(i64::MAX));
    let request = reply.request_cycle.map_or(-1, |c| i64::try_from(c).unwrap_or(i64::MAX));
    put(row, 88, &age.to_ne_bytes());
    put(row, 96, &request.to_ne_bytes());
}

/// Clear the writeable flag: a state is a record of one cycle.
fn make_read_only(array: &Bound<'_, PyUntypedArray>) {
    // SAFETY: `as_array_ptr` is a live ndarray owned by `array` and the GIL is held;
    // `_PyArray_GET_ITEM_DATA` is rust-numpy's portable access to its fields. Clearing
    // WRITEABLE on an array nobody else references yet is what `PyArray_CLEARFLAGS` does.
    unsafe {
        (*npyffi::objects::_PyArray_GET_ITEM_DATA(array.as_array_ptr())).flags &= !npyffi::NPY_ARRAY_WRITEABLE;
    }
}

/// The rows as one read-only structured array of `dtype`: one copy of the bytes, then a
/// view with the row dtype (numpy's C `PyArray_View`, no Python-level call).
fn rows_array<'py>(py: Python<'py>, bytes: &[u8], dtype: &Bound<'py, PyArrayDescr>) -> PyResult<Bound<'py, PyAny>> {
    let raw = PyArray1::<u8>::from_slice(py, bytes);
    make_read_only(raw.as_untyped());
    // SAFETY: `raw` is a live 1-D contiguous array whose length is a multiple of the dtype's
    // itemsize (checked in `state_dtype`); PyArray_View steals the dtype reference it is
    // given (`into_dtype_ptr` hands over a new one) and returns a new reference or NULL
    // with an exception set.
    unsafe {
        let view = PY_ARRAY_API.PyArray_View(
            py,
            raw.as_untyped().as_array_ptr(),
            dtype.clone().into_dtype_ptr(),
            std::ptr::null_mut(),
        );
        Bound::from_owned_ptr_or_err(py, view)
    }
}

/// What one robot cycle returned: every servo's newest reply, as numpy arrays with one
/// value per servo in command order (`Robot.ids`), plus the cycle's figures.
///
/// Floats are NaN and `mode`/`fault` -1 where the servo never answered; `fresh` says
/// whether the value answers this cycle's request, `age_cycles` how many cycles old it is
/// (0 when fresh, -1 before the servo first answered). The arrays are read-only views into
/// one structured array (`as_array()`), owned by this state: later cycles do not change it.
#[pyclass(module = "rtloop", frozen)]
pub struct State {
    /// The read-only structured array of this cycle's rows.
    array: Py<PyAny>,
    /// The cycle's number (from 1).
    cycle: u64,
    /// Servos without a fresh reply.
    missing: u32,
    /// Encode, bus cycle and decode, s on the robot's clock.
    duration_s: f64,
    /// When the cycle started, s since the robot was made.
    time_s: f64,
    /// The cycle hit its deadline with replies missing.
    timed_out: bool,
    /// The IMU sample, when the cycle read one.
    imu: Option<ImuSample>,
    /// Number of servos.
    n: usize,
}

impl State {
    fn field<'py>(&self, py: Python<'py>, name: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyAny>> {
        self.array.bind(py).get_item(name)
    }
}

#[pymethods]
impl State {
    /// moteus mode per servo (0 stopped, 1 fault, 10 position, 11 timeout, 12 zero
    /// velocity, 15 brake, …), int32; -1 where the servo never answered.
    #[getter]
    fn mode<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.field(py, intern!(py, "mode"))
    }

    /// Position per servo, revolutions (float64; NaN where never answered).
    #[getter]
    fn position<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.field(py, intern!(py, "position"))
    }

    /// Velocity per servo, rev/s (float64).
    #[getter]
    fn velocity<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.field(py, intern!(py, "velocity"))
    }

    /// Torque per servo, N·m (float64).
    #[getter]
    fn torque<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.field(py, intern!(py, "torque"))
    }

    /// Q-axis current per servo, A (float64).
    #[getter]
    fn q_current<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.field(py, intern!(py, "q_current"))
    }

    /// D-axis current per servo, A (float64).
    #[getter]
    fn d_current<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.field(py, intern!(py, "d_current"))
    }

    /// Motor temperature per servo, °C (float64).
    #[getter]
    fn motor_temperature<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.field(py, intern!(py, "motor_temperature"))
    }

    /// Board temperature per servo, °C (float64).
    #[getter]
    fn temperature<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.field(py, intern!(py, "temperature"))
    }

    /// Supply voltage per servo, V (float64).
    #[getter]
    fn voltage<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.field(py, intern!(py, "voltage"))
    }

    /// Fault code per servo (int32; 0 none, -1 where never answered).
    #[getter]
    fn fault<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.field(py, intern!(py, "fault"))
    }

    /// Per servo: the values answer this cycle's request (bool).
    #[getter]
    fn fresh<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.field(py, intern!(py, "fresh"))
    }

    /// Per servo: how many cycles old the values are (int64; 0 fresh, -1 never answered).
    #[getter]
    fn age_cycles<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.field(py, intern!(py, "age_cycles"))
    }

    /// Per servo: the cycle whose request the values answer (int64; -1 never answered).
    #[getter]
    fn request_cycle<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.field(py, intern!(py, "request_cycle"))
    }

    /// Servo ids, in command order (int32).
    #[getter]
    fn id<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.field(py, intern!(py, "id"))
    }

    /// Bus numbers, in command order (int32).
    #[getter]
    fn bus<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.field(py, intern!(py, "bus"))
    }

    /// This cycle's number (the robot's first cycle is 1).
    #[getter]
    fn cycle(&self) -> u64 {
        self.cycle
    }

    /// Servos without a fresh reply this cycle.
    #[getter]
    fn missing(&self) -> u32 {
        self.missing
    }

    /// How long the cycle took on the robot's clock, seconds: encoding every command, the
    /// bus cycle (writes to the last reply or the deadline) and decoding the replies; the
    /// wait for the period, if any, is not included (simulated time with the virtual clock).
    #[getter]
    fn duration(&self) -> f64 {
        self.duration_s
    }

    /// When the cycle started, seconds since the robot was made, on its clock (simulated
    /// time with `clock="virtual"`).
    #[getter]
    fn time(&self) -> f64 {
        self.time_s
    }

    /// The cycle gave up waiting at its deadline with replies still missing.
    #[getter]
    fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// The IMU sample read during the cycle, or None (only a fully simulated robot has
    /// one): a dict with `quaternion` (w, x, y, z), `rate_dps` (°/s about x, y, z) and
    /// `accel_mps2` (m/s², gravity removed), each a tuple of floats.
    #[getter]
    fn imu<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(s) = self.imu else { return Ok(None) };
        let d = PyDict::new(py);
        d.set_item("quaternion", PyTuple::new(py, s.quaternion)?)?;
        d.set_item("rate_dps", PyTuple::new(py, s.rate_dps)?)?;
        d.set_item("accel_mps2", PyTuple::new(py, s.accel_mps2)?)?;
        Ok(Some(d))
    }

    /// The whole state as one read-only numpy structured array, one row per servo in
    /// command order, with the fields id, bus, mode, position, velocity, torque, q_current,
    /// d_current, motor_temperature, temperature, voltage, fault, fresh, age_cycles and
    /// request_cycle (`.copy()` it to modify it).
    fn as_array<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.array.bind(py).clone()
    }

    /// The number of servos.
    fn __len__(&self) -> usize {
        self.n
    }

    /// `State(cycle=…, servos=…, missing=…, duration=… s, time=… s)`.
    fn __repr__(&self) -> String {
        format!(
            "State(cycle={}, servos={}, missing={}, duration={:.6} s, time={:.6} s)",
            self.cycle, self.n, self.missing, self.duration_s, self.time_s
        )
    }
}

// ---------------------------------------------------------------------------------------
// The robot
// ---------------------------------------------------------------------------------------

/// An [`rtloop_io::Robot`] whatever its clock.
trait Driver: Send {
    /// [`rtloop_io::Robot::cycle`].
    fn cycle(&mut self, commands: &[ServoCommand], replies: &mut [ServoReply], imu: &mut ImuSample) -> CycleReport;
    /// Now, ns on the robot's clock.
    fn now_ns(&self) -> u64;
    /// Wait (or, on the virtual clock, move time) until `t_ns`.
    fn wait_until_ns(&self, t_ns: u64);
    /// The simulated body, with physics.
    fn body(&self) -> Option<(rtloop_sim::BodyState, u64)>;
    /// Push the body: `None` without physics, `Some(false)` when the world holds as many
    /// pushes as it can.
    fn push(&mut self, push: rtloop_sim::Push) -> Option<bool>;
}

/// A robot and the simulated robot behind its simulated buses, if any.
struct Opened<C: Clock> {
    robot: rtloop_io::Robot<C>,
    sim: Option<SimRobot>,
}

impl<C: Clock + Send> Driver for Opened<C> {
    fn cycle(&mut self, commands: &[ServoCommand], replies: &mut [ServoReply], imu: &mut ImuSample) -> CycleReport {
        // The simulated body catches up with the cycle's start: what the servos answer is
        // the plant's state then.
        if let Some(sim) = &self.sim {
            sim.advance_to(self.robot.cycler().clock().now_ns());
        }
        self.robot.cycle(commands, replies, imu)
    }
    fn now_ns(&self) -> u64 {
        self.robot.cycler().clock().now_ns()
    }
    fn wait_until_ns(&self, t_ns: u64) {
        self.robot.cycler().clock().wait_until_ns(t_ns)
    }
    fn body(&self) -> Option<(rtloop_sim::BodyState, u64)> {
        self.sim.as_ref()?.world_body()
    }
    fn push(&mut self, push: rtloop_sim::Push) -> Option<bool> {
        self.sim.as_ref()?.push(push)
    }
}

/// Cumulative counters (see `Robot.stats`).
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    cycles: u64,
    missing: u64,
    queried: u64,
    unqueried: u64,
    late: u64,
    lost: u64,
    expired: u64,
    unattributed: u64,
    decode_errors: u64,
    unexpected: u64,
    encode_errors: u64,
    timed_out: u64,
    send_errors: u64,
    rx_overflow: u64,
    bus_errors: u64,
    overruns: u64,
}

impl Totals {
    fn add(&mut self, r: &CycleReport) {
        self.cycles += 1;
        self.missing += u64::from(r.missing);
        self.queried += u64::from(r.queried);
        self.unqueried += u64::from(r.unqueried);
        self.late += u64::from(r.late);
        self.lost += u64::from(r.lost);
        self.expired += u64::from(r.expired);
        self.unattributed += u64::from(r.unattributed);
        self.decode_errors += u64::from(r.decode_errors);
        self.unexpected += u64::from(r.unexpected);
        self.encode_errors += u64::from(r.encode_errors);
        self.timed_out += u64::from(r.stats.timed_out);
        self.send_errors += u64::from(r.stats.send_errors);
        self.rx_overflow += u64::from(r.stats.rx_overflow);
        self.bus_errors += u64::from(r.stats.failed_buses.count_ones());
    }

    fn entries(&self) -> [(&'static str, u64); 16] {
        [
            ("cycles", self.cycles),
            ("missing", self.missing),
            ("queried", self.queried),
            ("unqueried", self.unqueried),
            ("late", self.late),
            ("lost", self.lost),
            ("expired", self.expired),
            ("unattributed", self.unattributed),
            ("decode_errors", self.decode_errors),
            ("unexpected", self.unexpected),
            ("encode_errors", self.encode_errors),
            ("timed_out", self.timed_out),
            ("send_errors", self.send_errors),
            ("rx_overflow", self.rx_overflow),
            ("bus_errors", self.bus_errors),
            ("overruns", self.overruns),
        ]
    }
}

/// Everything a cycle touches, behind the robot's lock; sized once, reused every cycle.
struct Inner {
    /// The robot: buses, servos, clock.
    driver: Box<dyn Driver>,
    /// This cycle's command per slot.
    commands: Vec<ServoCommand>,
    /// Each slot's newest reply (kept across cycles: rtloop_io::Robot ages them).
    replies: Vec<ServoReply>,
    /// The last IMU sample.
    imu: ImuSample,
    /// The rows of the next state array.
    bytes: Vec<u8>,
    /// Per-servo values of each field.
    scratch: [Vec<f64>; FIELDS],
    /// Servos a `commands=[...]` list already named.
    named: Vec<bool>,
    /// The next period's start, ns on the robot's clock.
    next_deadline_ns: Option<u64>,
    /// Periods that started more than a period late.
    overruns: u64,
}

/// What one cycle produced (plain data, computed without the GIL).
struct Outcome {
    report: CycleReport,
    imu_present: bool,
    /// When the cycle started (after the period's wait) and ended (replies decoded), ns on
    /// the robot's clock.
    started_ns: u64,
    finished_ns: u64,
}

impl Inner {
    /// Wait for the period (if any), run one cycle, write the rows.
    fn step(&mut self, period_ns: Option<u64>, servos: &[(u8, u8)]) -> Outcome {
        if let Some(period) = period_ns {
            let now = self.driver.now_ns();
            let mut deadline = self.next_deadline_ns.unwrap_or(now);
            if now > deadline.saturating_add(period) {
                // More than a period behind: skip the lost periods rather than run a burst.
                self.overruns += 1;
                deadline = now;
            } else {
                self.driver.wait_until_ns(deadline);
            }
            self.next_deadline_ns = Some(deadline.saturating_add(period));
        }
        let started_ns = self.driver.now_ns();
        let report = self.driver.cycle(&self.commands, &mut self.replies, &mut self.imu);
        let finished_ns = self.driver.now_ns();
        for ((row, reply), &spec) in self.bytes.chunks_exact_mut(ROW_SIZE).zip(&self.replies).zip(servos) {
            write_row(row, spec, reply);
        }
        Outcome { report, imu_present: report.stats.imu_present, started_ns, finished_ns }
    }
}

/// The robot's clock, outside the lock (for `Robot.time`).
#[derive(Clone)]
enum ClockHandle {
    /// `CLOCK_MONOTONIC`.
    Real,
    /// A handle on the robot's virtual clock (clones share its timeline).
    Virtual(VirtualClock),
}

impl ClockHandle {
    fn now_ns(&self) -> u64 {
        match self {
            ClockHandle::Real => rtloop_io::clock::monotonic_now_ns(),
            ClockHandle::Virtual(c) => c.now_ns(),
        }
    }
}

/// Why a robot could not be opened (plain data, so opening can run without the GIL).
enum OpenFailure {
    /// A device path that does not exist.
    NotFound { message: String, path: String },
    /// A device that exists but could not be opened.
    Os(String),
    /// A robot description the cycle refuses.
    Setup(String),
}

impl From<OpenFailure> for PyErr {
    fn from(f: OpenFailure) -> PyErr {
        match f {
            OpenFailure::NotFound { message, path } => PyFileNotFoundError::new_err((libc::ENOENT, message, path)),
            OpenFailure::Os(m) => PyOSError::new_err(m),
            OpenFailure::Setup(m) => PyValueError::new_err(m),
        }
    }
}

/// How the buses are opened.
#[derive(Clone)]
struct OpenPlan {
    /// Resolution of position commands and of the main query fields.
    config_resolution: Resolution,
    /// Wire timing and drop rate of simulated buses (each gets its own seed).
    sim_bus: rtloop_sim::BusConfig,
    /// The fault seed the buses' seeds derive from.
    seed: u64,
    /// Hard cap on one cycle, ns.
    timeout_ns: u64,
    /// How long past the wire-time estimate a cycle waits for missing replies, ns.
    reply_wait_ns: u64,
    /// Where simulated joints start, rev.
    start_position: Option<f64>,
    /// A body under the simulated servos (`physics=`, or the file's `[physics]`).
    physics: Option<rtloop::physics::PhysicsConfig>,
}

impl OpenPlan {
    /// The robot configuration for `spec`: its query (compact on a pi3hat), at float
    /// resolution when asked.
    fn robot_config(&self, spec: &RobotSpec) -> RobotConfig {
        let mut config = RobotConfig { query: spec.query_format(), ..RobotConfig::default() };
        config.cycle.timeout_ns = self.timeout_ns;
        config.cycle.rx_baseline_wait_ns = self.reply_wait_ns;
        if self.config_resolution == Resolution::Float {
            config.position_resolution = PositionResolution::all(Resolution::Float);
            let q: &mut QueryFormat = &mut config.query;
            for field in [&mut q.position, &mut q.velocity, &mut q.torque, &mut q.q_current, &mut q.d_current] {
                if field.is_some() {
                    *field = Some(Resolution::Float);
                }
            }
        }
        config
    }
}

/// Open every bus of `spec` and build the robot on `clock` (may wait on devices: run it
/// without the GIL).
fn open_robot<C: Clock + Clone + Send + 'static>(
    spec: &RobotSpec,
    clock: C,
    plan: OpenPlan,
) -> Result<Box<dyn Driver>, OpenFailure> {
    for b in &spec.buses {
        if let BusUri::Fdcanusb { path } = &b.uri {
            if !std::path::Path::new(path).exists() {
                return Err(OpenFailure::NotFound {
                    message: format!(
                        "bus {}: the fdcanusb device {path} does not exist; plug the adapter in, or start the \
                         simulator there (rtloop sim --fdcanusb {path})",
                        b.bus
                    ),
                    path: path.clone(),
                });
            }
        }
    }
    let setup = rtloop::robot::SimSetup {
        options: rtloop_simrobot::SimOptions { bus: rtloop_sim::BusConfig { fault_seed: plan.seed, ..plan.sim_bus } },
        start_position_rev: plan.start_position,
        physics: plan.physics.clone(),
        // A program drives its own cycles: the model's step divides the 1 ms of a 1 kHz loop.
        period_ns: 0,
    };
    let config = plan.robot_config(spec);
    let rtloop::robot::Built { robot, sim, .. } = rtloop::robot::build(spec, clock, config, Default::default(), &setup)
        .map_err(|e| match e {
            rtloop::robot::BuildError::Open(e) => OpenFailure::Os(e.to_string()),
            other => OpenFailure::Setup(other.to_string()),
        })?;
    Ok(Box::new(Opened { robot, sim }))
}

/// "ids 1..12" when the ids run without gaps, else "ids 1, 2, 5".
fn describe_ids(ids: &[u8]) -> String {
    let contiguous = ids.windows(2).all(|w| w[1] == w[0].wrapping_add(1));
    match (ids.first(), ids.last()) {
        (Some(a), Some(b)) if contiguous && ids.len() > 2 => format!("ids {a}..{b}"),
        _ => format!("ids {}", ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// A `float` argument of the constructor: finite and within `lo..=hi`.
fn checked_arg(name: &str, v: f64, lo: f64, hi: f64, unit: &str) -> PyResult<f64> {
    if v.is_finite() && v >= lo && v <= hi {
        Ok(v)
    } else {
        Err(PyValueError::new_err(format!(
            "{name} {} is out of range; give {} to {}{unit}",
            show_number(v),
            show_number(lo),
            show_number(hi)
        )))
    }
}

/// The robot description from the constructor's `config`, `buses` and `servos`.
fn robot_spec(
    py: Python<'_>,
    config: Option<&Bound<'_, PyAny>>,
    buses: Option<&Bound<'_, PyDict>>,
    servos: Option<&Bound<'_, PyDict>>,
) -> PyResult<(RobotSpec, Option<rtloop::physics::PhysicsConfig>)> {
    if let Some(config) = config {
        if buses.is_some() || servos.is_some() {
            return Err(PyValueError::new_err("give either config= (a robot file) or buses=/servos=, not both"));
        }
        let path: std::path::PathBuf = config
            .extract()
            .map_err(|_| PyTypeError::new_err("config must be the path of a TOML robot file (str or os.PathLike)"))?;
        let shown = path.display().to_string();
        let text = py.detach(|| std::fs::read_to_string(&path)).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err((
                libc::ENOENT,
                format!("the robot file {shown} does not exist; give the path of a TOML file with [[bus]] tables"),
                shown.clone(),
            )),
            _ => PyOSError::new_err((
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("cannot read the robot file {shown}: {e}"),
                shown.clone(),
            )),
        })?;
        // A file of `rtloop run --config`: the run's settings, and the `[motion]` of the
        // program's demonstration motion (crates/rtloop-cli/src/cli/demo.rs), not read here.
        let (run, _motion) = RunConfig::from_toml_with::<serde::de::IgnoredAny>(&text, "motion")
            .map_err(|e| PyValueError::new_err(format!("{shown}: {e}")))?;
        // A Robot is only the robot: the loop settings of `rtloop run` (rate, motion, gains,
        // safety, realtime) are the Python program's business and are not read; but the
        // simulator settings would silently change what the robot does, so they are refused
        // rather than ignored.
        if run.sim != rtloop::config::SimConfig::default() || run.faults != rtloop::config::FaultsConfig::default() {
            return Err(PyValueError::new_err(format!(
                "{shown} sets [sim] or [faults], which Robot does not read from a file; remove them and pass \
                 wire_time=, clock=\"virtual\", start_position=, drop_rate= or seed= to Robot instead"
            )));
        }
        // Paths in the file are relative to the file's folder.
        let run = run.relative_to(path.parent().unwrap_or(std::path::Path::new(".")));
        return Ok((run.robot(), run.physics.clone()));
    }
    let Some(servos) = servos else {
        if buses.is_some() {
            return Err(PyValueError::new_err(
                "buses= needs servos= too, e.g. servos={1: [1, 2, 3]}: the ids on each bus",
            ));
        }
        return Ok((RobotSpec::default_quadruped(), None));
    };
    let mut spec = RobotSpec { buses: Vec::new() };
    let mut numbers: Vec<u8> = Vec::new();
    for (key, ids) in servos.iter() {
        let bus = bus_number(&key)?;
        let ids: Vec<u8> = if let Ok(text) = ids.cast::<PyString>() {
            parse_id_list(&text.to_cow()?).map_err(|e| PyValueError::new_err(format!("servos[{bus}]: {e}")))?
        } else {
            let list: Vec<i64> = ids.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "servos[{bus}] must be a list of servo ids (e.g. [1, 2, 3]) or a string like \"1-3\""
                ))
            })?;
            list.iter()
                .map(|&i| {
                    u8::try_from(i).ok().filter(|i| (1..=127).contains(i)).ok_or_else(|| {
                        PyValueError::new_err(format!("servos[{bus}]: servo id {i} is outside 1 to 127"))
                    })
                })
                .collect::<PyResult<_>>()?
        };
        let uri = match buses {
            None => BusUri::Sim,
            Some(b) => match b.get_item(bus)? {
                Some(u) => {
                    let text: String = u.extract().map_err(|_| {
                        PyTypeError::new_err(format!(
                            "buses[{bus}] must be a bus address string such as \"fdcanusb:/dev/ttyACM0\""
                        ))
                    })?;
                    rtloop_io::uri::parse(&text).map_err(|e| PyValueError::new_err(format!("buses[{bus}]: {e}")))?
                }
                None => {
                    return Err(PyValueError::new_err(format!(
                        "servos names bus {bus} but buses has no entry for it; add buses={{{bus}: \"sim\"}} (or its \
                         device)"
                    )))
                }
            },
        };
        numbers.push(bus);
        spec.buses.push(BusSpec { bus, uri, servos: ids });
    }
    if let Some(b) = buses {
        for key in b.keys() {
            let bus = bus_number(&key)?;
            if !numbers.contains(&bus) {
                return Err(PyValueError::new_err(format!(
                    "bus {bus} has no servos; add servos={{{bus}: [1, 2, 3]}} with the ids on it"
                )));
            }
        }
    }
    spec.buses.sort_by_key(|b| b.bus);
    spec.validate().map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((spec, None))
}

/// A bus number key of `buses`/`servos`.
fn bus_number(key: &Bound<'_, PyAny>) -> PyResult<u8> {
    key.extract::<i64>().ok().and_then(|b| u8::try_from(b).ok()).filter(|&b| b >= 1).ok_or_else(|| {
        PyValueError::new_err(format!("bus number {key} is not 1 to 255; key buses and servos by bus number"))
    })
}

/// Read one field argument of `Robot.cycle` for `n` servos ([`values::array_like`]): absent,
/// one scalar, or one value per servo (copied into `out`). Numbers are checked later; only
/// shape and type here.
fn read_field(
    py: Python<'_>,
    name: &str,
    value: Option<&Bound<'_, PyAny>>,
    n: usize,
    ids: &str,
    out: &mut [f64],
) -> PyResult<Given> {
    let not_numbers = |what: String| {
        PyTypeError::new_err(format!(
            "{name} must be a number or one number per servo, not {what}; give floats (numpy float64 or anything \
             numpy converts to it)"
        ))
    };
    let Some(value) = value else { return Ok(Given::Absent) };
    values::array_like(py, value, n, out).map_err(|refusal| match refusal {
        Refusal::NotNumbers if value.is_instance_of::<PyBool>() => not_numbers("a bool".into()),
        Refusal::NotNumbers if value.is_instance_of::<PyString>() => not_numbers("a string".into()),
        Refusal::NotNumbers => not_numbers("that".into()),
        Refusal::Unconvertible(e) => not_numbers(format!("something numpy cannot convert ({e})")),
        Refusal::Dtype(dtype) => not_numbers(format!("an array of dtype {dtype}")),
        Refusal::Length(len) => PyValueError::new_err(format!(
            "{name} has {len} values but the robot has {n} servos ({ids}); give one per servo or a scalar"
        )),
        Refusal::Shape(dims) => PyValueError::new_err(format!(
            "{name} has shape ({}) but must be a scalar or 1-D with one value per servo ({n}: {ids})",
            dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
        )),
        Refusal::Unreadable(e) => e.into(),
        Refusal::Python(e) => e,
    })
}

/// Drives every servo of a robot, one cycle per call: each servo gets its command and is
/// queried, with the GIL released while the cycle runs.
///
/// `Robot()` is the simulated 12-servo quadruped (buses 1-4, ids 1-12, three per bus).
/// `Robot(buses={1: "fdcanusb:/dev/ttyACM0"}, servos={1: [1, 2, 3]})` names real buses
/// (`sim`, `fdcanusb:PATH`, `socketcan:IFACE`, `udp:HOST:PORT`; `buses` may be left out for
/// simulated ones); `Robot("robot.toml")` reads the `[[bus]]` tables of an `rtloop run
/// --config` file.
///
/// Keywords: `wire_time` (simulated buses: frames take their CAN-FD time; False: none),
/// `clock` ("realtime", or "virtual": simulated robots only, deterministic simulated time that
/// advances by `period` each cycle, as fast as the host computes), `period` (seconds between
/// cycle starts; `cycle()` waits for the next one; 0.001 by default with the virtual clock,
/// none with the real one), `resolution` ("int16": compact frames, as `rtloop run`;
/// positions to ±3.2767 rev, velocities to ±8.19 rev/s; "float": moteus' default, full range),
/// `timeout` (the longest a cycle waits for replies, s; by default 1 ms past the wire-time
/// estimate, at most 5 ms or 0.9 period: raise it for slow adapters or a loaded simulator),
/// `limits` (narrow or widen the accepted ranges, `{"velocity": (-30, 30)}`, see `limits`),
/// and for simulated buses `start_position` (rev, where every joint starts), `drop_rate`
/// (probability a frame is lost on the wire) and `seed`.
///
/// Use it from one thread at a time: a cycle started while another thread's cycle runs
/// raises RuntimeError rather than wait.
#[pyclass(module = "rtloop._rtloop", name = "Robot", frozen, subclass)]
pub struct Robot {
    /// The cycle's state; `None` once closed. Only ever `try_lock`ed with the GIL held.
    inner: Mutex<Option<Inner>>,
    /// Cumulative counters, apart from `inner` so `stats` never waits on a running cycle.
    totals: Mutex<Totals>,
    /// Cycles run (the last report's cycle number).
    cycles: AtomicU64,
    /// (bus number, id) per slot, command order.
    servos: Vec<(u8, u8)>,
    /// (bus number, id) → slot.
    slots: HashMap<(u8, u8), usize>,
    /// "ids 1..12", for messages.
    ids_text: String,
    /// `Robot.ids` (read-only int64 array, made once).
    ids: Py<PyAny>,
    /// `Robot.buses` (read-only int64 array, made once).
    bus_numbers: Py<PyAny>,
    /// The accepted range of each field.
    ranges: [Range; FIELDS],
    /// The resolution of position commands.
    resolution: Resolution,
    /// Time between cycle starts, ns (`None`: none).
    period_ns: Option<u64>,
    /// The robot's clock, for `time`.
    clock: ClockHandle,
    /// When the robot was made, ns on its clock.
    start_ns: u64,
    /// The state rows' numpy dtype.
    dtype: Py<PyArrayDescr>,
    /// `repr(robot)`.
    description: String,
}

/// The longest period, s (one minute: a `cycle()` never sleeps longer).
const MAX_PERIOD_S: f64 = 60.0;

/// The cycle's own time cap without a period, ns (io's default).
const DEFAULT_TIMEOUT_NS: u64 = 5_000_000;

/// The longest `timeout=`, s: a cycle that waits longer is not a control loop.
const MAX_TIMEOUT_S: f64 = 1.0;

impl Robot {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, Option<Inner>>> {
        match self.inner.try_lock() {
            Ok(g) => Ok(g),
            // A panic cannot leave a half-written cycle behind that matters: the next cycle
            // rewrites every buffer.
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => Err(PyRuntimeError::new_err(
                "the robot is running a cycle on another thread; use a Robot from one thread at a time (or guard it \
                 with a threading.Lock)",
            )),
        }
    }

    /// Fill the commands with `fill`, run one cycle without the GIL, return its state.
    fn run<'py>(&self, py: Python<'py>, fill: impl FnOnce(&mut Inner) -> PyResult<()>) -> PyResult<State> {
        let mut guard = self.lock()?;
        let inner = guard
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("the robot is closed; make a new Robot to cycle again"))?;
        fill(inner)?;
        let period = self.period_ns;
        let servos = &self.servos;
        let outcome = py.detach(|| inner.step(period, servos));
        let array = rows_array(py, &inner.bytes, self.dtype.bind(py))?;
        let overruns = inner.overruns;
        let imu = outcome.imu_present.then_some(inner.imu);
        drop(guard);
        let report = outcome.report;
        {
            let mut t = self.totals.lock().unwrap_or_else(|p| p.into_inner());
            t.add(&report);
            t.overruns = overruns;
        }
        self.cycles.store(report.cycle, Ordering::Relaxed);
        Ok(State {
            array: array.unbind(),
            cycle: report.cycle,
            missing: report.missing,
            duration_s: outcome.finished_ns.saturating_sub(outcome.started_ns) as f64 * 1e-9,
            time_s: outcome.started_ns.saturating_sub(self.start_ns) as f64 * 1e-9,
            timed_out: report.stats.timed_out,
            imu,
            n: self.servos.len(),
        })
    }

    /// Every servo gets `cmd`.
    fn run_all(&self, py: Python<'_>, cmd: ServoCommand) -> PyResult<State> {
        self.run(py, |inner| {
            inner.commands.fill(cmd);
            Ok(())
        })
    }

    /// The slot of `(bus, id)`, or of `id` alone when it is on one bus.
    fn slot_of(&self, id: u8, bus: Option<u8>) -> PyResult<usize> {
        if let Some(bus) = bus {
            return self.slots.get(&(bus, id)).copied().ok_or_else(|| {
                PyValueError::new_err(format!(
                    "the robot has no servo {id} on bus {bus} ({}); name one of its servos",
                    self.ids_text
                ))
            });
        }
        let mut found = self.servos.iter().enumerate().filter(|(_, s)| s.1 == id);
        match (found.next(), found.next()) {
            (Some((slot, _)), None) => Ok(slot),
            (None, _) => Err(PyValueError::new_err(format!(
                "the robot has no servo {id} ({}); name one of its servos",
                self.ids_text
            ))),
            (Some(_), Some(_)) => {
                Err(PyValueError::new_err(format!("servo id {id} is on several buses; give bus= to say which")))
            }
        }
    }

    /// The position command of slot `i` from checked field values.
    fn position_command(&self, values: [Option<f64>; FIELDS], slot: usize, per_servo: bool) -> PyResult<ServoCommand> {
        let servo = per_servo.then(|| self.servos.get(slot).copied()).flatten();
        let mut v = [None; FIELDS];
        for (i, x) in values.iter().enumerate() {
            if let Some(x) = *x {
                v[i] = Some(check(i, x, &self.ranges[i], servo, self.resolution)?);
            }
        }
        // Always sent: a servo configured without a default watchdog still gets one.
        v[WATCHDOG] = Some(v[WATCHDOG].unwrap_or(DEFAULT_WATCHDOG_TIMEOUT_S));
        let mut registers = [None; rtloop_proto::register::POSITION_COMMAND_LEN];
        registers[..FIELDS].copy_from_slice(&v);
        Ok(ServoCommand::Position(PositionCommand::from_registers(registers)))
    }
}

#[pymethods]
impl Robot {
    #[new]
    #[pyo3(signature = (config=None, *, buses=None, servos=None, wire_time=true, clock="realtime", period=None,
        resolution="int16", timeout=None, limits=None, start_position=None, drop_rate=0.0, seed=0, physics=None,
        ground_tilt=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        config: Option<&Bound<'_, PyAny>>,
        buses: Option<&Bound<'_, PyDict>>,
        servos: Option<&Bound<'_, PyDict>>,
        wire_time: bool,
        clock: &str,
        period: Option<f64>,
        resolution: &str,
        timeout: Option<f64>,
        limits: Option<&Bound<'_, PyDict>>,
        start_position: Option<f64>,
        drop_rate: f64,
        seed: u64,
        physics: Option<bool>,
        ground_tilt: Option<(f64, f64)>,
    ) -> PyResult<Self> {
        let (spec, file_physics) = robot_spec(py, config, buses, servos)?;
        // `physics=True` or a file's [physics]: a body under the simulated servos;
        // `physics=False` switches a file's off.
        let mut physics = match physics {
            Some(true) => Some(file_physics.unwrap_or_default()),
            Some(false) => None,
            None => file_physics,
        };
        if let Some((roll, pitch)) = ground_tilt {
            let Some(p) = physics.as_mut() else {
                return Err(PyValueError::new_err("ground_tilt tilts the ground under a body: add physics=True"));
            };
            (p.ground_roll_deg, p.ground_pitch_deg) = (roll, pitch);
        }
        if let Some(p) = &physics {
            p.spec(&spec.buses, 1_000_000).map_err(|e| PyValueError::new_err(e.to_string()))?;
        }
        let simulated = spec.all_simulated();
        let any_simulated = spec.buses.iter().any(|b| b.uri == BusUri::Sim);
        let virtual_clock = match clock {
            "realtime" => false,
            "virtual" => true,
            other => {
                return Err(PyValueError::new_err(format!(
                    "clock {other:?} is unknown; give \"realtime\" or \"virtual\" (simulated robots only)"
                )))
            }
        };
        if virtual_clock && !simulated {
            return Err(PyValueError::new_err(
                "clock=\"virtual\" runs only on simulated buses (its time is simulated); use clock=\"realtime\" with \
                 real devices",
            ));
        }
        let period = match period {
            Some(p) => Some(checked_arg("period", p, 1e-5, MAX_PERIOD_S, " s")?),
            // Virtual time moves only when someone waits: without a period, a robot whose
            // wires take no time would never see its servos move.
            None if virtual_clock => Some(0.001),
            None => None,
        };
        let period_ns = period.map(|p| (p * 1e9).round() as u64);
        let resolution = match resolution {
            "int16" => Resolution::Int16,
            "float" => Resolution::Float,
            other => {
                return Err(PyValueError::new_err(format!(
                    "resolution {other:?} is unknown; give \"int16\" (compact, as rtloop run) or \"float\" (moteus' \
                     default, full range)"
                )))
            }
        };
        let mut bounds = default_limits();
        if let Some(limits) = limits {
            for (key, value) in limits.iter() {
                let name: String = key.extract()?;
                let Some(i) = NAMES.iter().position(|n| *n == name) else {
                    return Err(PyValueError::new_err(format!(
                        "limits has {name:?}, which is not a command field; give some of {}",
                        NAMES.join(", ")
                    )));
                };
                let (lo, hi): (f64, f64) = value.extract().map_err(|_| {
                    PyTypeError::new_err(format!("limits[{name:?}] must be a pair (low, high) of numbers"))
                })?;
                let floor = if NON_NEGATIVE[i] { 0.0 } else { f64::NEG_INFINITY };
                if !(lo.is_finite() && hi.is_finite() && lo <= hi && lo >= floor) {
                    return Err(PyValueError::new_err(format!(
                        "limits[{name:?}] = ({}, {}) is not a range; give finite low <= high{}",
                        show_number(lo),
                        show_number(hi),
                        if NON_NEGATIVE[i] { ", both 0 or more" } else { "" }
                    )));
                }
                if i == WATCHDOG && (lo < MIN_WATCHDOG_TIMEOUT_S || hi > MAX_WATCHDOG_TIMEOUT_S) {
                    return Err(PyValueError::new_err(format!(
                        "limits[\"watchdog_timeout\"] may only narrow {MIN_WATCHDOG_TIMEOUT_S} to \
                         {MAX_WATCHDOG_TIMEOUT_S} s: a shorter timeout rounds to 0 (the servo's default) and a longer \
                         one leaves servos without a host too long"
                    )));
                }
                bounds[i] = (lo, hi);
            }
        }
        if let Some(p) = start_position {
            if !any_simulated {
                return Err(PyValueError::new_err(
                    "start_position places simulated joints; this robot has no simulated bus",
                ));
            }
            checked_arg("start_position", p, -1.0, 1.0, " rev")?;
        }
        let drop_rate = checked_arg("drop_rate", drop_rate, 0.0, 1.0, " (a probability)")?;
        if seed > rtloop::config::MAX_SEED {
            return Err(PyValueError::new_err(format!(
                "seed {seed} is out of range; give 0 to {}",
                rtloop::config::MAX_SEED
            )));
        }
        let sim_bus = rtloop_sim::BusConfig {
            drop_rate,
            ..if wire_time { rtloop_sim::BusConfig::default() } else { rtloop_sim::BusConfig::without_wire_time() }
        };
        let (timeout_ns, reply_wait_ns) = match timeout {
            // Asked for: wait for replies up to it (a slow adapter, a loaded simulator).
            Some(t) => {
                let t = (checked_arg("timeout", t, 5e-5, MAX_TIMEOUT_S, " s")? * 1e9).round() as u64;
                (t, t)
            }
            // Never let one cycle run into the next period, as `rtloop run` does.
            None => (
                period_ns.map_or(DEFAULT_TIMEOUT_NS, |p| (p / 10 * 9).clamp(50_000, DEFAULT_TIMEOUT_NS)),
                rtloop_io::CycleOptions::default().rx_baseline_wait_ns,
            ),
        };
        let plan = OpenPlan {
            config_resolution: resolution,
            sim_bus,
            seed,
            timeout_ns,
            reply_wait_ns,
            start_position,
            physics,
        };
        let dtype = state_dtype(py)?;

        let (driver, handle) = if virtual_clock {
            let vc = VirtualClock::new(0);
            let handle = ClockHandle::Virtual(vc.clone());
            (py.detach(|| open_robot(&spec, vc, plan))?, handle)
        } else {
            (py.detach(|| open_robot(&spec, MonotonicClock::default(), plan))?, ClockHandle::Real)
        };
        let servos: Vec<(u8, u8)> =
            spec.buses.iter().flat_map(|b| b.servos.iter().map(move |&id| (b.bus, id))).collect();
        let n = servos.len();
        let slots = servos.iter().enumerate().map(|(i, &s)| (s, i)).collect();
        let id_list: Vec<u8> = servos.iter().map(|s| s.1).collect();
        let ids = PyArray1::from_vec(py, servos.iter().map(|s| i64::from(s.1)).collect::<Vec<_>>());
        let bus_numbers = PyArray1::from_vec(py, servos.iter().map(|s| i64::from(s.0)).collect::<Vec<_>>());
        make_read_only(ids.as_untyped());
        make_read_only(bus_numbers.as_untyped());
        let start_ns = handle.now_ns();
        let mut inner = Inner {
            driver,
            commands: vec![ServoCommand::Query; n],
            replies: vec![ServoReply::default(); n],
            imu: ImuSample::default(),
            bytes: vec![0; n * ROW_SIZE],
            scratch: std::array::from_fn(|_| vec![0.0; n]),
            named: vec![false; n],
            next_deadline_ns: None,
            overruns: 0,
        };
        // Rows of servos that have not answered yet read as such even before the first cycle.
        for ((row, reply), &spec) in inner.bytes.chunks_exact_mut(ROW_SIZE).zip(&inner.replies).zip(&servos) {
            write_row(row, spec, reply);
        }
        let description = format!(
            "Robot({n} servos on {} bus{}: {}; clock={clock}{}, resolution={})",
            spec.buses.len(),
            if spec.buses.len() == 1 { "" } else { "es" },
            spec.buses.iter().map(|b| format!("{}={}", b.bus, b.uri)).collect::<Vec<_>>().join(", "),
            period.map(|p| format!(", period={p} s")).unwrap_or_default(),
            resolution.name()
        );
        Ok(Robot {
            inner: Mutex::new(Some(inner)),
            totals: Mutex::new(Totals::default()),
            cycles: AtomicU64::new(0),
            ids_text: describe_ids(&id_list),
            servos,
            slots,
            ids: ids.into_any().unbind(),
            bus_numbers: bus_numbers.into_any().unbind(),
            ranges: ranges(&bounds, resolution),
            resolution,
            period_ns,
            clock: handle,
            start_ns,
            dtype,
            description,
        })
    }

    /// One cycle: command every servo and query its state; returns the `State`.
    ///
    /// Each field is a scalar (sent to every servo) or one value per servo in `ids` order
    /// (anything numpy converts to float64); `None` is not sent. Positions in revolutions
    /// (NaN: hold where it is, as moteus), velocities rev/s, torques N·m, `watchdog_timeout`
    /// in seconds (0.01 to 10; 0.1 when not given: every position command carries one),
    /// `velocity_limit` rev/s, `accel_limit` rev/s². Ranges: `Robot.limits`.
    ///
    /// `mode`: "position" (mode 10, the default), "stop", "zero_velocity", "brake" or
    /// "query" (the others take no fields). `commands=[...]` instead gives servos their own
    /// `Command` (from `Controller.make_*`); servos it does not name are queried.
    #[pyo3(signature = (*, commands=None, position=None, velocity=None, feedforward_torque=None, kp_scale=None,
        kd_scale=None, maximum_torque=None, stop_position=None, watchdog_timeout=None, velocity_limit=None,
        accel_limit=None, mode="position"))]
    #[allow(clippy::too_many_arguments)]
    fn cycle(
        &self,
        py: Python<'_>,
        commands: Option<&Bound<'_, PyAny>>,
        position: Option<&Bound<'_, PyAny>>,
        velocity: Option<&Bound<'_, PyAny>>,
        feedforward_torque: Option<&Bound<'_, PyAny>>,
        kp_scale: Option<&Bound<'_, PyAny>>,
        kd_scale: Option<&Bound<'_, PyAny>>,
        maximum_torque: Option<&Bound<'_, PyAny>>,
        stop_position: Option<&Bound<'_, PyAny>>,
        watchdog_timeout: Option<&Bound<'_, PyAny>>,
        velocity_limit: Option<&Bound<'_, PyAny>>,
        accel_limit: Option<&Bound<'_, PyAny>>,
        mode: &str,
    ) -> PyResult<State> {
        let args = [
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
        ];
        let kind = Kind::parse(mode)?;
        let first_field = args.iter().position(|a| a.is_some_and(|a| !a.is_none()));
        if let Some(commands) = commands.filter(|c| !c.is_none()) {
            if let Some(i) = first_field {
                return Err(PyValueError::new_err(format!(
                    "give either commands=[...] or per-field arguments such as {}=, not both",
                    NAMES[i]
                )));
            }
            if kind != Kind::Position {
                return Err(PyValueError::new_err(
                    "mode= does not apply with commands=[...]: each Command carries its own mode",
                ));
            }
            return self.run(py, |inner| self.fill_commands(commands, inner));
        }
        if let Some(simple) = kind.simple() {
            if let Some(i) = first_field {
                return Err(kind.refuse_field(i));
            }
            return self.run_all(py, simple);
        }
        let n = self.servos.len();
        self.run(py, |inner| {
            let mut given = [Given::Absent; FIELDS];
            for (i, arg) in args.iter().enumerate() {
                given[i] = read_field(py, NAMES[i], *arg, n, &self.ids_text, &mut inner.scratch[i])?;
            }
            // Scalars are checked once, naming no servo; per-servo values each, naming it.
            let mut scalars = [None; FIELDS];
            for (i, g) in given.iter().enumerate() {
                if let Given::Scalar(v) = g {
                    scalars[i] = Some(check(i, *v, &self.ranges[i], None, self.resolution)?);
                }
            }
            let per_servo = given.iter().any(|g| matches!(g, Given::PerServo));
            if !per_servo {
                let cmd = self.position_command(scalars, 0, false)?;
                inner.commands.fill(cmd);
                return Ok(());
            }
            for slot in 0..n {
                let mut values = scalars;
                for (i, g) in given.iter().enumerate() {
                    if let Given::PerServo = g {
                        values[i] = inner.scratch[i].get(slot).copied();
                    }
                }
                let cmd = self.position_command(values, slot, true)?;
                if let Some(c) = inner.commands.get_mut(slot) {
                    *c = cmd;
                }
            }
            Ok(())
        })
    }

    /// Query every servo (no command: modes stay as they are); returns the `State`.
    fn query(&self, py: Python<'_>) -> PyResult<State> {
        self.run_all(py, ServoCommand::Query)
    }

    /// Stop every servo (mode 0; also clears a fault); returns the `State`.
    fn stop(&self, py: Python<'_>) -> PyResult<State> {
        self.run_all(py, ServoCommand::Stop)
    }

    /// Put every servo in zero-velocity mode (mode 12: holds still, damped); returns the
    /// `State`.
    fn zero_velocity(&self, py: Python<'_>) -> PyResult<State> {
        self.run_all(py, ServoCommand::ZeroVelocity)
    }

    /// Put every servo in brake mode (mode 15: windings shorted); returns the `State`.
    fn brake(&self, py: Python<'_>) -> PyResult<State> {
        self.run_all(py, ServoCommand::Brake)
    }

    /// Close the buses (nothing is sent: the servos' watchdogs end any position command
    /// within its timeout). Later cycles raise RuntimeError.
    fn close(&self) -> PyResult<()> {
        let mut guard = self.lock()?;
        *guard = None;
        Ok(())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> PyResult<bool> {
        Ok(self.lock()?.is_none())
    }

    /// `with Robot(...) as robot:` closes the buses at the end of the block.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Close the buses (see `close`); exceptions propagate.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close()?;
        Ok(false)
    }

    /// Servo id per slot, in command order (read-only numpy int64 array).
    #[getter]
    fn ids<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.ids.bind(py).clone()
    }

    /// Bus number per slot, in command order (read-only numpy int64 array).
    #[getter]
    fn buses<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.bus_numbers.bind(py).clone()
    }

    /// Cycles run so far.
    #[getter]
    fn cycle_count(&self) -> u64 {
        self.cycles.load(Ordering::Relaxed)
    }

    /// Cumulative counters since the robot was made: cycles; missing (servo-cycles without
    /// a fresh reply); queried, unqueried (servos commanded without a query while an answer
    /// was outstanding); late (replies to earlier cycles' requests), lost, expired,
    /// unattributed, decode_errors, unexpected, encode_errors; timed_out (cycles that hit
    /// their deadline), send_errors, rx_overflow, bus_errors (bus failures); overruns
    /// (periods started more than a period late).
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let t = *self.totals.lock().unwrap_or_else(|p| p.into_inner());
        let d = PyDict::new(py);
        for (k, v) in t.entries() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// The accepted range of each `cycle` field, `{name: (low, high)}` in the field's units
    /// (the agent protocol's defaults or `limits=`, narrowed to what the resolution carries).
    #[getter]
    fn limits<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (name, r) in NAMES.iter().zip(&self.ranges) {
            d.set_item(name, (r.lo, r.hi))?;
        }
        Ok(d)
    }

    /// "int16" or "float": the resolution of position commands and of the main query fields.
    #[getter]
    fn resolution(&self) -> &'static str {
        self.resolution.name()
    }

    /// Seconds between cycle starts, or None (each `cycle()` starts at once).
    #[getter]
    fn period(&self) -> Option<f64> {
        self.period_ns.map(|p| p as f64 * 1e-9)
    }

    /// "realtime" or "virtual".
    #[getter]
    fn clock(&self) -> &'static str {
        match self.clock {
            ClockHandle::Real => "realtime",
            ClockHandle::Virtual(_) => "virtual",
        }
    }

    /// The simulated body (``physics=True``): a dict of ``height_m`` (its origin above the
    /// ground), ``position_m`` and ``velocity_mps`` (its origin's, ``[x, y, z]`` in the ground's
    /// frame: +x forward, +y left, +z up), ``roll_deg`` and ``pitch_deg`` (as the IMU reads
    /// them), ``quaternion`` (the IMU's, ``[w, x, y, z]``) and ``steps`` (physics steps so far);
    /// None without physics.
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let guard = self.lock()?;
        let Some((b, steps)) = guard.as_ref().and_then(|inner| inner.driver.body()) else { return Ok(None) };
        let (roll, pitch) = b.roll_pitch();
        let d = PyDict::new(py);
        d.set_item("height_m", b.height_m())?;
        d.set_item("position_m", b.position_m.to_vec())?;
        d.set_item("velocity_mps", b.velocity_mps.to_vec())?;
        d.set_item("roll_deg", roll.to_degrees())?;
        d.set_item("pitch_deg", pitch.to_degrees())?;
        d.set_item("quaternion", b.to_imu().quaternion.to_vec())?;
        d.set_item("steps", steps)?;
        Ok(Some(d))
    }

    /// Push the body with ``force`` = (fx, fy, fz) newtons (world frame: +x forward, +y left,
    /// +z up) from now for ``duration`` seconds (physics only; each axis within ±1000 N,
    /// duration above 0 and at most 10 s).
    #[pyo3(signature = (force, duration=0.1))]
    fn push(&self, force: (f64, f64, f64), duration: f64) -> PyResult<()> {
        let force_n = [force.0, force.1, force.2];
        if !force_n.iter().all(|f| f.is_finite() && f.abs() <= rtloop::physics::MAX_PUSH_N) {
            return Err(PyValueError::new_err(format!(
                "force {force:?} is out of range; give three finite numbers within ±{} N",
                rtloop::physics::MAX_PUSH_N
            )));
        }
        let duration = checked_arg("duration", duration, 1e-6, 10.0, " s")?;
        let from_ns = self.clock.now_ns();
        let push = rtloop_sim::Push { force_n, from_ns, duration_ns: (duration * 1e9).round() as u64 };
        let mut guard = self.lock()?;
        let inner = guard.as_mut().ok_or_else(|| PyRuntimeError::new_err("the robot is closed"))?;
        match inner.driver.push(push) {
            Some(true) => Ok(()),
            Some(false) => Err(PyValueError::new_err(format!(
                "{} pushes are scheduled or under way already; wait for one to end",
                rtloop_sim::world::MAX_PUSHES
            ))),
            None => Err(PyValueError::new_err("a push needs a body: make the Robot with physics=True")),
        }
    }

    /// Seconds since the robot was made, on its clock (simulated time with the virtual clock).
    #[getter]
    fn time(&self) -> f64 {
        self.clock.now_ns().saturating_sub(self.start_ns) as f64 * 1e-9
    }

    /// The number of servos.
    fn __len__(&self) -> usize {
        self.servos.len()
    }

    /// The buses, servos, clock, period and resolution.
    fn __repr__(&self) -> String {
        self.description.clone()
    }
}

impl Robot {
    /// `cycle(commands=[...])`: every servo queried, then each command on its servo.
    fn fill_commands(&self, commands: &Bound<'_, PyAny>, inner: &mut Inner) -> PyResult<()> {
        inner.commands.fill(ServoCommand::Query);
        inner.named.fill(false);
        let iter = commands.try_iter().map_err(|_| {
            PyTypeError::new_err("commands must be a list of rtloop.Command (from Controller.make_position() etc.)")
        })?;
        for item in iter {
            let item = item?;
            let cmd = item.cast::<Command>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "commands holds a {}, not an rtloop.Command; build them with Controller.make_position(), \
                     make_stop(), make_query() …",
                    item.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
                ))
            })?;
            let cmd = cmd.get();
            let slot = self.slot_of(cmd.id, cmd.bus)?;
            if inner.named.get(slot).copied().unwrap_or(false) {
                let (bus, id) = self.servos.get(slot).copied().unwrap_or((0, cmd.id));
                return Err(PyValueError::new_err(format!(
                    "commands names servo {id} on bus {bus} twice; give each servo at most one command"
                )));
            }
            let servo_cmd = match cmd.kind.simple() {
                Some(c) => c,
                None => self.position_command(cmd.fields, slot, true)?,
            };
            if let (Some(c), Some(named)) = (inner.commands.get_mut(slot), inner.named.get_mut(slot)) {
                *c = servo_cmd;
                *named = true;
            }
        }
        Ok(())
    }
}
