//! `rtloop.Agent`: a control law in its own Python process beside `rtloop run --agent NAME`,
//! over the spine's shared memory (`docs/agent-protocol.md`), built on the Rust agent of the
//! `rtloop-agent` crate ([`rtloop_agent::Agent`]).
//!
//! * Attaching retries while the spine is not there yet (or still creating its segment), with
//!   the GIL released; every other refusal is one exception at once.
//! * States are copied out of the shared mapping under its seqlock into the agent's private
//!   block, and Python only ever sees copies of that copy ([`AgentState`]'s numpy arrays): a
//!   view of the shared memory itself would change (and tear) under the reader.
//! * Commands are checked here against the spine's limits before anything is written, so a
//!   mistake is an exception at the call instead of a silent refusal counted by the spine.
//! * Every wait (attaching, the next state) runs with the GIL released. In lockstep it
//!   sleeps on the spine's bell (a futex: no CPU until the spine publishes a state to answer,
//!   [`rtloop_agent::Agent::sleep_until_rung`]); free-running it polls with short sleeps
//!   (or spins, with `busy_poll`). It looks at the spine's liveness every few milliseconds
//!   and comes back for Ctrl-C every 50 ms.
//!
//! Must never: expose shared memory to Python, panic on user input, or hold the GIL while it
//! waits.

use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyString;
use rtloop_agent::layout::{kind, reset, status, RawServoCommand, RawServoState, StateBlock, MAX_SERVOS};
use rtloop_agent::{AgentAttachError, Limits, ServoCommandError};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::values::{self, Given, Refusal, FIELDS, NAMES};

pyo3::create_exception!(
    rtloop,
    SpineNotFound,
    PyFileNotFoundError,
    "No spine is running with this agent name: start `rtloop run --agent NAME` first (the \
     segment /dev/shm/rtloop-NAME does not exist, or was never completed)."
);
pyo3::create_exception!(
    rtloop,
    ProtocolVersionError,
    PyRuntimeError,
    "The spine speaks another version of the agent protocol (`.spine_version`, \
     `.agent_version`): use an rtloop package built from the same release as the spine."
);
pyo3::create_exception!(
    rtloop,
    AgentBusy,
    PyRuntimeError,
    "Another live agent process (`.pid`) is attached to this spine: one agent at a time."
);
pyo3::create_exception!(
    rtloop,
    SpineGone,
    PyRuntimeError,
    "The spine went away: `.reason` is \"ended\" (its run ended), \"unlinked\" (its segment \
     was removed), \"dead\" (its process died without cleaning up) or \"lost\" (another \
     process truncated the segment under the agent, so the spine ends its run too)."
);

/// Between looks at the segment while waiting, when not busy-polling (as the C agent).
const POLL_SLEEP: Duration = Duration::from_micros(20);
/// Between attach attempts while the spine is not there yet.
const ATTACH_RETRY: Duration = Duration::from_millis(10);
/// How often a waiting agent asks whether the spine is gone (two system calls).
const GONE_CHECK: Duration = Duration::from_millis(5);
/// How long a wait runs without the GIL before coming back to look for Ctrl-C.
const SIGNAL_SLICE: Duration = Duration::from_millis(50);
/// Longest `wait` / `timeout` accepted, s (`None` waits without a bound).
const MAX_WAIT_S: f64 = 86_400.0;
/// Looks between clock reads while busy-polling (the clock costs more than a look).
const BUSY_LOOKS_PER_CLOCK: u32 = 64;

/// One push of `Agent.request_reset(pushes=...)`: at s, duration s, force x, y, z N.
type PushArg = (f64, f64, f64, f64, f64);

/// The command kinds, by the names Python uses, and their protocol codes.
const KINDS: [(&str, u32); 5] = [
    ("query", kind::QUERY),
    ("stop", kind::STOP),
    ("zero_velocity", kind::ZERO_VELOCITY),
    ("brake", kind::BRAKE),
    ("position", kind::POSITION),
];

/// The limits checked before a command is written: the spine's defaults, except the torque
/// bounds, which the spine takes from its configuration (`[gains] maximum_torque`) and the
/// segment does not carry — locally torques are only checked to be finite (and
/// `maximum_torque` non-negative); the spine checks them against its own bound.
fn local_limits() -> Limits {
    Limits { max_torque: f64::INFINITY, ..Limits::default() }
}

/// The status names Python sees.
fn status_name(code: u32) -> &'static str {
    match code {
        status::NONE => "none",
        status::WAITING => "waiting",
        status::FOLLOWING => "following",
        status::SAFE => "safe",
        status::SHUTTING_DOWN => "shutting_down",
        status::ENDED => "ended",
        _ => "unknown",
    }
}

/// Check a duration argument in seconds (`wait`, `timeout`): finite, 0 to [`MAX_WAIT_S`].
fn seconds_arg(what: &str, value: f64) -> PyResult<Duration> {
    if !(value.is_finite() && (0.0..=MAX_WAIT_S).contains(&value)) {
        return Err(PyValueError::new_err(format!(
            "{what} = {value} s is out of range: give 0 to {MAX_WAIT_S} seconds (or None to wait without a bound)"
        )));
    }
    Ok(Duration::from_secs_f64(value))
}

/// Lock the agent's state (`None` once closed).
fn lock(m: &Mutex<Option<Inner>>) -> MutexGuard<'_, Option<Inner>> {
    // A panic while locked cannot leave `Inner` half-updated in a way that matters (every
    // field is overwritten whole), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The error of any call after `close()`.
fn closed_error() -> PyErr {
    PyValueError::new_err("this agent is closed (detached from its spine); create a new rtloop.Agent")
}

/// The exception for a spine that went away, with `.reason`.
fn spine_gone_error(py: Python<'_>, name: &str, spine_pid: i32, gone: rtloop_agent::SpineGone) -> PyErr {
    let (reason, message) = match gone {
        rtloop_agent::SpineGone::Ended => {
            ("ended", format!("the spine of rtloop-{name} ended its run; start `rtloop run --agent {name}` for another"))
        }
        rtloop_agent::SpineGone::Unlinked => (
            "unlinked",
            format!("the segment /dev/shm/rtloop-{name} was removed, so its spine is gone; start `rtloop run --agent {name}` again"),
        ),
        rtloop_agent::SpineGone::Dead => (
            "dead",
            format!(
                "the spine of rtloop-{name} (pid {spine_pid}) died without ending its run (its servos stop on their watchdogs); start `rtloop run --agent {name}` again"
            ),
        ),
        rtloop_agent::SpineGone::SegmentLost => (
            "lost",
            format!(
                "/dev/shm/rtloop-{name} was truncated (or replaced) by another process, so the spine ends its run; never write to /dev/shm/rtloop-{name} while a spine runs"
            ),
        ),
    };
    let err = SpineGone::new_err(message);
    // Setting an attribute on a fresh exception instance cannot fail in practice; if it did,
    // the exception without `.reason` is still the right one to raise.
    let _ = err.value(py).setattr("reason", reason);
    err
}

/// The Python exception for a refused attach, after waiting `waited` seconds.
fn attach_error(py: Python<'_>, err: AgentAttachError, name: &str, waited: f64) -> PyErr {
    let path = rtloop_agent::segment_path(name).display().to_string();
    match err {
        AgentAttachError::Name(e) => PyValueError::new_err(e.to_string()),
        AgentAttachError::NotFound(_) => SpineNotFound::new_err((
            libc::ENOENT,
            format!("no spine is running with agent name {name} (waited {waited} s for it); start `rtloop run --agent {name}` first"),
            path,
        )),
        AgentAttachError::NotReady(_) => SpineNotFound::new_err((
            libc::ENOENT,
            format!(
                "the segment exists but no spine finished creating it within {waited} s; check that `rtloop run --agent {name}` is running, or remove the leftover file"
            ),
            path,
        )),
        AgentAttachError::Version { spine, agent } => {
            let e = ProtocolVersionError::new_err(
                AgentAttachError::Version { spine, agent }.to_string().replace("rebuild the agent against the spine's rtloop_agent.h", "use an rtloop Python package of the spine's release"),
            );
            let _ = e.value(py).setattr("spine_version", spine);
            let _ = e.value(py).setattr("agent_version", agent);
            e
        }
        AgentAttachError::Busy { name: n, pid } => {
            let e = AgentBusy::new_err(AgentAttachError::Busy { name: n, pid }.to_string());
            let _ = e.value(py).setattr("pid", pid);
            e
        }
        AgentAttachError::OtherUser { name: n, owner, euid } => {
            // PermissionError: the segment is not this user's to attach to.
            let message = AgentAttachError::OtherUser { name: n, owner, euid }.to_string();
            PyOSError::new_err((libc::EACCES, message, path))
        }
        AgentAttachError::Io { name: n, op, err } => {
            // OSError(errno, message, path) becomes the errno's subclass (PermissionError, …).
            let errno = err.raw_os_error().unwrap_or(0);
            let message = AgentAttachError::Io { name: n, op, err }.to_string();
            PyOSError::new_err((errno, message, path))
        }
        // BadMagic, NotRegular, TooSmall, Layout, and any reason a later release adds.
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// Attach, retrying retryable refusals every [`ATTACH_RETRY`] until `end` (GIL released).
fn attach_until(name: &str, end: Instant) -> Result<rtloop_agent::Agent, AgentAttachError> {
    loop {
        match rtloop_agent::Agent::attach(name) {
            Ok(a) => return Ok(a),
            Err(e) if e.is_retryable() => {
                let now = Instant::now();
                if now >= end {
                    return Err(e);
                }
                std::thread::sleep(ATTACH_RETRY.min(end - now));
            }
            Err(e) => return Err(e),
        }
    }
}

/// The header's facts, kept outside the lock (they never change).
struct Info {
    /// The agent name.
    name: String,
    /// Servos in use (at most `MAX_SERVOS`).
    count: usize,
    /// CAN id per servo slot.
    ids: Vec<i64>,
    /// Bus number per servo slot.
    buses: Vec<i64>,
    /// The spine's rate, Hz.
    rate_hz: f64,
    /// The spine's period, ns.
    period_ns: u64,
    /// The liveness timeout, ns.
    timeout_ns: u64,
    /// Lockstep run.
    lockstep: bool,
    /// The spine's pid.
    spine_pid: i32,
}

/// What one look at the segment found.
enum Look {
    /// A state newer than the last one returned.
    State(Box<StateBlock>),
    /// The spine went away.
    Gone(rtloop_agent::SpineGone),
    /// Nothing new before the end of the slice.
    Slice,
    /// The agent was closed meanwhile (by another thread).
    Closed,
}

/// The attached agent and what it remembers between calls (behind the lock).
struct Inner {
    agent: rtloop_agent::Agent,
    /// The sequence of the last state read: unchanged = nothing new published.
    seen_seq: Option<u64>,
    /// The cycle of the last state returned to Python (`for_cycle` of the next command).
    returned: Option<u64>,
    /// When the spine's liveness was last checked.
    gone_checked: Instant,
    /// Return only states the spine waits on (`awaiting`), and its status changes.
    awaited_only: bool,
    /// The status of the last state read.
    last_status: u32,
}

impl Inner {
    /// One look: a new state if one was published since the last look, the spine's absence
    /// (checked every [`GONE_CHECK`]), or nothing.
    fn look(&mut self, now: Instant) -> Option<Look> {
        if Some(self.agent.state_sequence()) != self.seen_seq {
            match self.agent.read_state() {
                Ok(s) => {
                    self.seen_seq = Some(s.seq);
                    if s.status == status::ENDED {
                        // A spine whose segment was replaced under it (truncated and grown
                        // again) still publishes its last state into the file: the segment
                        // being lost is the news, not the end it caused.
                        let gone = self.agent.spine_gone().unwrap_or(rtloop_agent::SpineGone::Ended);
                        return Some(Look::Gone(gone));
                    }
                    let status_changed = s.status != self.last_status;
                    self.last_status = s.status;
                    // A state the spine does not wait on (a held command answers it) is
                    // skipped when only awaited ones are asked for, unless its status is new.
                    let wanted = !self.awaited_only || s.awaiting != 0 || status_changed;
                    if s.status != status::NONE && wanted && self.returned.is_none_or(|c| s.cycle > c) {
                        self.returned = Some(s.cycle);
                        return Some(Look::State(Box::new(*s)));
                    }
                }
                // Only a spine that died mid-write leaves its block torn for 100 000 tries.
                Err(_) => {
                    if let Some(g) = self.agent.spine_gone() {
                        return Some(Look::Gone(g));
                    }
                }
            }
        }
        if now.saturating_duration_since(self.gone_checked) >= GONE_CHECK {
            self.gone_checked = now;
            if let Some(g) = self.agent.spine_gone() {
                return Some(Look::Gone(g));
            }
        }
        None
    }

    /// Read the newest state now (no wait) and count it as returned.
    fn read_now(&mut self) -> Result<Box<StateBlock>, Option<rtloop_agent::SpineGone>> {
        match self.agent.read_state() {
            Ok(s) => {
                let s = Box::new(*s);
                self.seen_seq = Some(s.seq);
                if s.status != status::NONE {
                    self.returned = Some(self.returned.map_or(s.cycle, |c| c.max(s.cycle)));
                }
                Ok(s)
            }
            Err(_) => Err(self.agent.spine_gone()),
        }
    }

    /// `for_cycle` for a command sent now: the cycle of the last state returned (or read).
    fn for_cycle(&self) -> u64 {
        self.returned.unwrap_or(self.agent.state().cycle)
    }
}

/// The native `rtloop.Agent` (the Python class `rtloop.Agent` subclasses it and adds `next`,
/// iteration, `run` and the context manager).
#[pyclass(frozen, subclass, module = "rtloop._rtloop", name = "Agent")]
pub struct PyAgent {
    inner: Mutex<Option<Inner>>,
    info: Info,
    auto_arm: bool,
    busy: bool,
}

impl PyAgent {
    /// Run `f` on the attached agent (a short critical section: no Python, no wait).
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> PyResult<R> {
        let mut guard = lock(&self.inner);
        let inner = guard.as_mut().ok_or_else(closed_error)?;
        Ok(f(inner))
    }

    /// Poll until a new state, the spine's absence, or `end` (called with the GIL released;
    /// the lock is held only for each look, so other threads may command meanwhile).
    fn poll_until(&self, end: Instant, awaited_only: bool) -> Look {
        let mut looks: u32 = 0;
        let mut now = Instant::now();
        loop {
            let bell;
            {
                let mut guard = lock(&self.inner);
                let Some(inner) = guard.as_mut() else { return Look::Closed };
                // Read the bell before looking: a state published after the look moves it.
                bell = inner.agent.state_bell();
                inner.awaited_only = awaited_only;
                if let Some(found) = inner.look(now) {
                    return found;
                }
            }
            // Before the pause, so a zero timeout costs one look, not one sleep.
            if now >= end {
                return Look::Slice;
            }
            if self.info.lockstep && !self.busy {
                // The spine rings when it publishes a state it waits on (or a new status);
                // wake at least every GONE_CHECK to look whether it died.
                let left = end.saturating_duration_since(now).min(GONE_CHECK);
                // Under the lock (which keeps the mapping alive: `close` takes the agent out
                // under it): another thread's command waits at most one such slice.
                let guard = lock(&self.inner);
                let Some(inner) = guard.as_ref() else { return Look::Closed };
                inner.agent.sleep_until_rung(bell, left.as_nanos() as u64);
                drop(guard);
                now = Instant::now();
            } else if self.busy {
                core::hint::spin_loop();
                looks = looks.wrapping_add(1);
                if looks.is_multiple_of(BUSY_LOOKS_PER_CLOCK) {
                    now = Instant::now();
                }
            } else {
                std::thread::sleep(POLL_SLEEP);
                now = Instant::now();
            }
        }
    }

    fn state_object(&self, block: Box<StateBlock>) -> AgentState {
        AgentState::new(block, self.info.count)
    }
}

/// Read one field argument of `command()` ([`values::number_or_sequence`]) into `out[..n]`:
/// a number (broadcast) or `n` numbers.
fn field_values(field: &str, obj: &Bound<'_, PyAny>, n: usize, out: &mut [f64; MAX_SERVOS]) -> PyResult<Given> {
    // Built only on the error paths: the accepted ones allocate nothing but the values.
    let shape_hint = || format!("pass a number or an array of shape ({n},), one value per servo");
    let given = values::number_or_sequence(obj, n, out).map_err(|refusal| match refusal {
        // (`Unconvertible` is `Robot.cycle`'s: numpy is not asked here.)
        Refusal::NotNumbers | Refusal::Unconvertible(_) => {
            let type_name = obj.get_type().name().map_or_else(|_| "?".to_string(), |s| s.to_string());
            PyTypeError::new_err(format!("{field} is a {type_name}; {}", shape_hint()))
        }
        Refusal::Dtype(dtype) => PyTypeError::new_err(format!(
            "{field} has dtype {dtype}; pass real numbers (a float or integer array of shape ({n},))"
        )),
        Refusal::Length(len) => {
            PyValueError::new_err(format!("{field} has {len} values but the spine has {n} servos; {}", shape_hint()))
        }
        Refusal::Shape(dims) => {
            let dims: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
            PyValueError::new_err(format!("{field} has shape ({}); {}", dims.join(", "), shape_hint()))
        }
        Refusal::Unreadable(e) => PyValueError::new_err(format!("{field} cannot be read: {e}")),
        Refusal::Python(e) => e,
    })?;
    if let Given::Scalar(v) = given {
        out[..n].fill(v);
    }
    Ok(given)
}

/// The kind code of a kind name.
fn kind_code(name: &str) -> PyResult<u32> {
    KINDS.iter().find(|(k, _)| *k == name).map(|&(_, c)| c).ok_or_else(|| {
        PyValueError::new_err(format!(
            "kind {name:?} is unknown; use \"position\", \"query\", \"stop\", \"zero_velocity\" or \"brake\""
        ))
    })
}

/// Read `kind` (a name, or one name per servo) into `out[..n]`.
fn kinds(obj: Option<&Bound<'_, PyAny>>, n: usize, out: &mut [u32; MAX_SERVOS]) -> PyResult<()> {
    let Some(obj) = obj else {
        out[..n].fill(kind::POSITION);
        return Ok(());
    };
    if let Ok(s) = obj.cast::<PyString>() {
        out[..n].fill(kind_code(&s.to_cow()?)?);
        return Ok(());
    }
    let names: Vec<String> = obj.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "kind must be a kind name (\"position\", \"query\", \"stop\", \"zero_velocity\", \"brake\") or a sequence of {n} of them, one per servo"
        ))
    })?;
    if names.len() != n {
        return Err(PyValueError::new_err(format!(
            "kind has {} names but the spine has {n} servos; pass one kind name, or {n} of them",
            names.len()
        )));
    }
    for (slot, name) in out.iter_mut().zip(&names) {
        *slot = kind_code(name)?;
    }
    Ok(())
}

/// A refused command in one sentence, naming the servo when the value was per servo.
fn command_error(e: ServoCommandError, index: usize, id: i64, per_servo: bool) -> PyErr {
    let text = match e {
        // The local torque bounds are open-ended (see `local_limits`).
        ServoCommandError::OutOfRange { field, value, min, max } if max.is_infinite() => {
            format!("{field} {value} is below {min}; send {min} or more")
        }
        other => other.to_string(),
    };
    if per_servo {
        PyValueError::new_err(format!("servo {index} (id {id}): {text}"))
    } else {
        PyValueError::new_err(text)
    }
}

#[pymethods]
impl PyAgent {
    /// Attach to the spine of `rtloop run --agent NAME` (`/dev/shm/rtloop-NAME`), retrying
    /// for up to `wait` seconds while it is not there yet (see the Python class `rtloop.Agent`).
    #[new]
    #[pyo3(signature = (name, *, wait = 5.0, auto_arm = true, busy_poll = None))]
    fn new(py: Python<'_>, name: &str, wait: f64, auto_arm: bool, busy_poll: Option<bool>) -> PyResult<Self> {
        rtloop_agent::validate_name(name).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let deadline = Instant::now() + seconds_arg("wait", wait)?;
        let attached = loop {
            let slice_end = deadline.min(Instant::now() + SIGNAL_SLICE);
            match py.detach(|| attach_until(name, slice_end)) {
                Ok(a) => break a,
                Err(e) if e.is_retryable() && Instant::now() < deadline => py.check_signals()?,
                Err(e) => return Err(attach_error(py, e, name, wait)),
            }
        };
        let h = attached.header();
        let count = (h.servo_count as usize).min(MAX_SERVOS);
        let info = Info {
            name: name.to_string(),
            count,
            ids: h.servos[..count].iter().map(|s| i64::from(s.id)).collect(),
            buses: h.servos[..count].iter().map(|s| i64::from(s.bus)).collect(),
            rate_hz: h.rate_hz,
            period_ns: h.period_ns,
            timeout_ns: h.timeout_ns,
            lockstep: h.lockstep != 0,
            spine_pid: h.spine_pid,
        };
        let busy = busy_poll.unwrap_or(false);
        let inner = Inner {
            agent: attached,
            seen_seq: None,
            returned: None,
            gone_checked: Instant::now(),
            awaited_only: false,
            last_status: status::NONE,
        };
        Ok(PyAgent { inner: Mutex::new(Some(inner)), info, auto_arm, busy })
    }

    /// The agent name (the segment is `/dev/shm/rtloop-NAME`).
    #[getter]
    fn name(&self) -> &str {
        &self.info.name
    }

    /// Number of servos; every per-servo array has this length.
    #[getter]
    fn servo_count(&self) -> usize {
        self.info.count
    }

    /// CAN id of each servo slot (numpy int64 array of shape (servo_count,)).
    #[getter]
    fn ids<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        PyArray1::from_slice(py, &self.info.ids)
    }

    /// Bus number of each servo slot, as the robot configuration names it (numpy int64 array).
    #[getter]
    fn buses<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        PyArray1::from_slice(py, &self.info.buses)
    }

    /// The spine's cycle rate, Hz.
    #[getter]
    fn rate_hz(&self) -> f64 {
        self.info.rate_hz
    }

    /// The spine's cycle period, s.
    #[getter]
    fn period(&self) -> f64 {
        self.info.period_ns as f64 * 1e-9
    }

    /// The agent liveness timeout, s: silent for longer, the spine goes safe.
    #[getter]
    fn timeout(&self) -> f64 {
        self.info.timeout_ns as f64 * 1e-9
    }

    /// Whether the spine runs in lockstep (each cycle waits for this agent's command).
    #[getter]
    fn lockstep(&self) -> bool {
        self.info.lockstep
    }

    /// The spine's process id.
    #[getter]
    fn spine_pid(&self) -> i32 {
        self.info.spine_pid
    }

    /// Whether `command()` re-arms the spine by itself (see the class documentation).
    #[getter]
    fn auto_arm(&self) -> bool {
        self.auto_arm
    }

    /// Whether waits spin instead of sleeping 20 µs between looks.
    #[getter]
    fn busy_poll(&self) -> bool {
        self.busy
    }

    /// Whether the agent was closed (detached).
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.inner).is_none()
    }

    /// The newest state the spine published, now (a seqlock read; no wait).
    ///
    /// Returns an `AgentState` holding copies: the state is copied out of the shared
    /// memory into this agent's private block, and its numpy arrays are made from that
    /// copy — never views of the shared mapping, which the spine rewrites every cycle (a
    /// view would change, and tear, under the reader). Counts as returned: `wait_next`
    /// then waits for a newer cycle, and the next command is computed "for" this one.
    /// Works after the spine ended too (status "ended"). Raises `SpineGone` if the spine
    /// died in the middle of writing it.
    fn state(&self, py: Python<'_>) -> PyResult<AgentState> {
        match self.with(|inner| inner.read_now())? {
            Ok(block) => Ok(self.state_object(block)),
            Err(Some(gone)) => Err(spine_gone_error(py, &self.info.name, self.info.spine_pid, gone)),
            Err(None) => Err(PyRuntimeError::new_err(format!(
                "the state block of rtloop-{} stayed mid-write for 100000 reads; the spine is stuck, restart it",
                self.info.name
            ))),
        }
    }

    /// Wait for the next state with a newer cycle than the last one returned, and return
    /// it (an `AgentState`, copies as for `state()`).
    ///
    /// Blocks with the GIL released: in lockstep it sleeps on the spine's bell (no CPU
    /// until the spine publishes a state it waits on); free-running it looks at the segment
    /// every 20 µs (or spins, with `busy_poll`). It checks every 5 ms whether the spine is
    /// gone and every 50 ms for Ctrl-C. `timeout`: seconds, 0 to 86400, or None (no
    /// bound); returns None when it passes. `awaited`: return only a state the spine waits
    /// on (`state.awaiting`; lockstep: the one after the cycles a held command answers, see
    /// `command(hold=)`) or one with a new status. Raises `SpineGone` (`.reason` "ended",
    /// "unlinked" or "dead") when the spine went away; `ValueError` for a bad timeout.
    #[pyo3(signature = (timeout = None, *, awaited = false))]
    fn wait_next(&self, py: Python<'_>, timeout: Option<f64>, awaited: bool) -> PyResult<Option<AgentState>> {
        let deadline = match timeout {
            Some(t) => Some(Instant::now() + seconds_arg("timeout", t)?),
            None => None,
        };
        loop {
            let now = Instant::now();
            let slice_end = deadline.map_or(now + SIGNAL_SLICE, |d| d.min(now + SIGNAL_SLICE));
            match py.detach(|| self.poll_until(slice_end, awaited)) {
                Look::State(block) => return Ok(Some(self.state_object(block))),
                Look::Gone(g) => return Err(spine_gone_error(py, &self.info.name, self.info.spine_pid, g)),
                Look::Closed => return Err(closed_error()),
                Look::Slice => {
                    py.check_signals()?;
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Write one command for every servo, for the last state returned; returns its
    /// heartbeat number (every command is also the agent's proof of life).
    ///
    /// Each field is a number (sent to every servo) or an array / sequence of
    /// `servo_count` numbers (one per servo, in `ids` order): `position` rev (NaN: hold
    /// the current position), `velocity` rev/s, `feedforward_torque` N·m, `kp_scale` and
    /// `kd_scale` 0 to 1, `maximum_torque` N·m, `stop_position` rev, `watchdog_timeout` s
    /// (0.001 to 10: the servo stops by itself when commands stop coming — send one, e.g.
    /// 0.1), `velocity_limit` rev/s, `accel_limit` rev/s². Fields not given are not sent.
    /// `kind`: "position" (the default), "query", "stop", "zero_velocity" or "brake", or a
    /// sequence of `servo_count` of them; the fields go only to the "position" servos.
    /// `hold` (lockstep, 1 to 100000): the cycles this command answers, from the last state
    /// returned on — the spine applies it each of them without waiting (as a real robot's
    /// spine applies an agent's last command until the next) and waits again after them:
    /// a policy at 50 Hz over a 1 kHz spine sends `hold=20` and waits with
    /// `wait_next(awaited=True)`. A free-running spine ignores it.
    ///
    /// Everything is checked before anything is written, with the spine's limits
    /// (positions ±10 rev, velocities ±20 rev/s, accel_limit 0 to 200 rev/s², scales 0 to
    /// 1, watchdog 0.001 to 10 s; NaN or infinite values refused, except NaN position);
    /// torques only for being finite here (the spine's bound comes from its
    /// configuration, and it refuses and counts, in `state.rejected`, what exceeds it).
    /// Raises `ValueError` (a value, a length, a kind) or `TypeError` (not numbers) naming
    /// the argument; nothing is sent then. With `auto_arm`, a command re-arms a spine
    /// waiting to be armed (see the class).
    #[pyo3(signature = (
        *, position = None, velocity = None, feedforward_torque = None, kp_scale = None,
        kd_scale = None, maximum_torque = None, stop_position = None, watchdog_timeout = None,
        velocity_limit = None, accel_limit = None, kind = None, hold = 1
    ))]
    // `kind=None` means "position": say so in the signature Python shows.
    #[pyo3(text_signature = "(self, /, *, position=None, velocity=None, feedforward_torque=None, kp_scale=None, \
        kd_scale=None, maximum_torque=None, stop_position=None, watchdog_timeout=None, velocity_limit=None, \
        accel_limit=None, kind='position', hold=1)")]
    #[allow(clippy::too_many_arguments)] // one keyword argument per protocol field
    fn command(
        &self,
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
        kind: Option<&Bound<'_, PyAny>>,
        hold: i64,
    ) -> PyResult<u64> {
        let n = self.info.count;
        let max_hold = i64::from(rtloop_agent::layout::MAX_HOLD_CYCLES);
        if !(1..=max_hold).contains(&hold) {
            return Err(PyValueError::new_err(format!("hold = {hold} cycles is out of range; give 1 to {max_hold}")));
        }
        let args: [Option<&Bound<'_, PyAny>>; FIELDS] = [
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
        let mut kind_codes = [kind::QUERY; MAX_SERVOS];
        kinds(kind, n, &mut kind_codes)?;
        let any_position = kind_codes[..n].contains(&kind::POSITION);
        let mut values = [[0.0f64; MAX_SERVOS]; FIELDS];
        let mut given = [Given::Absent; FIELDS];
        for (f, arg) in args.iter().enumerate() {
            let Some(arg) = arg else { continue };
            if !any_position {
                return Err(PyValueError::new_err(format!(
                    "{} is sent only with kind \"position\"; leave it out or command kind=\"position\"",
                    NAMES[f]
                )));
            }
            given[f] = field_values(NAMES[f], arg, n, &mut values[f])?;
        }
        // Build and check every servo's command before anything is written.
        let limits = local_limits();
        let mut servos = [RawServoCommand::QUERY; MAX_SERVOS];
        for i in 0..n {
            let s = &mut servos[i];
            s.kind = kind_codes[i];
            if s.kind == kind::POSITION {
                for f in 0..FIELDS {
                    if given[f] != Given::Absent {
                        s.set(f, values[f][i]);
                    }
                }
            }
            if let Err(e) = rtloop_agent::validate(s, &limits) {
                let field_given = match e {
                    ServoCommandError::NonFinite { field, .. } | ServoCommandError::OutOfRange { field, .. } => {
                        NAMES.iter().position(|&f| f == field).and_then(|f| given.get(f).copied())
                    }
                    _ => None,
                };
                return Err(command_error(e, i, self.info.ids[i], field_given == Some(Given::PerServo)));
            }
        }
        let auto_arm = self.auto_arm;
        self.with(|inner| {
            if inner.seen_seq.is_none() {
                // Nothing read yet: read once, so arming and `for_cycle` have a state to go by.
                let _ = inner.read_now();
            }
            let for_cycle = inner.for_cycle();
            let cmd = inner.agent.command_mut();
            cmd.for_cycle = for_cycle;
            cmd.servos = servos;
            cmd.hold_cycles = hold as u32;
            if auto_arm {
                inner.agent.rearm_if_needed();
            }
            inner.agent.send()
        })
    }

    /// Send the last command again as a new heartbeat — proof of life without a new
    /// decision — for the last state returned (so in lockstep it answers that cycle).
    /// Before any `command()`, every servo is only queried. Never arms the spine. Returns
    /// the heartbeat number.
    fn heartbeat(&self) -> PyResult<u64> {
        self.with(|inner| {
            let for_cycle = inner.for_cycle();
            inner.agent.command_mut().for_cycle = for_cycle;
            inner.agent.send()
        })
    }

    /// Ask the spine to reset the simulated world (lockstep runs with physics: `rtloop run
    /// --physics --lockstep --agent NAME`), sent with the next `command()` or
    /// `heartbeat()`: the body back at its starting pose, the joints perturbed as `seed`
    /// says (0: not at all; the same seed, the same pose), every servo stopped (mode 0) so
    /// the next position commands start afresh — without restarting the spine. Returns the
    /// request number: the answer is the first state whose `reset_ack` equals it, with
    /// `reset_result` "done", or "no_physics" / "not_lockstep" / "bad_domain" when the
    /// spine refused (it also counts and reports the refusal). `seed`: 0 to 2**64 - 1
    /// (`OverflowError` otherwise). The spine must be armed (following) to act on it.
    ///
    /// The episode's physical parameters (domain randomisation; any given: the others
    /// nominal; none: the nominal world): `friction_scale` (0.1 to 3), `mass_scale` (0.5 to
    /// 2), `payload_kg` (0 to 20), per servo (a number or one per servo) `kp_scale` and
    /// `kd_scale` (0.1 to 3: of the servo's stored gains), `joint_offset` (rad, -1 to 1,
    /// added to the settled pose) and `joint_velocity` (rad/s, -20 to 20), `latency_cycles`
    /// (0 to 32: each new command reaches the servos that many cycles late), and `pushes`,
    /// up to 4 of `(at_s, duration_s, fx, fy, fz)` (s after the reset, s, N in the ground's
    /// frame: +x forward, +y left, +z up). Checked here: `ValueError` (one sentence) for a
    /// value out of range, nothing sent then.
    #[pyo3(signature = (
        seed = 0, *, friction_scale = None, mass_scale = None, payload_kg = None, kp_scale = None,
        kd_scale = None, joint_offset = None, joint_velocity = None, latency_cycles = None, pushes = None
    ))]
    #[allow(clippy::too_many_arguments)] // one keyword argument per domain field
    fn request_reset(
        &self,
        seed: u64,
        friction_scale: Option<f64>,
        mass_scale: Option<f64>,
        payload_kg: Option<f64>,
        kp_scale: Option<&Bound<'_, PyAny>>,
        kd_scale: Option<&Bound<'_, PyAny>>,
        joint_offset: Option<&Bound<'_, PyAny>>,
        joint_velocity: Option<&Bound<'_, PyAny>>,
        latency_cycles: Option<u32>,
        pushes: Option<Vec<PushArg>>,
    ) -> PyResult<u64> {
        use rtloop_agent::layout::{domain, DomainBlock, PushBlock, DOMAIN_PUSHES};
        let n = self.info.count;
        let mut d = DomainBlock::NOMINAL;
        let mut any = false;
        for (value, slot) in
            [(friction_scale, &mut d.friction_scale), (mass_scale, &mut d.mass_scale), (payload_kg, &mut d.payload_kg)]
        {
            if let Some(v) = value {
                *slot = v;
                any = true;
            }
        }
        for (name, value, out) in [
            ("kp_scale", kp_scale, &mut d.kp_scale),
            ("kd_scale", kd_scale, &mut d.kd_scale),
            ("joint_offset", joint_offset, &mut d.joint_offset_rad),
            ("joint_velocity", joint_velocity, &mut d.joint_velocity_rad_s),
        ] {
            if let Some(v) = value {
                if field_values(name, v, n, out)? != Given::Absent {
                    any = true;
                }
            }
        }
        if let Some(l) = latency_cycles {
            d.latency_cycles = l;
            any = true;
        }
        if let Some(pushes) = pushes {
            if pushes.len() > DOMAIN_PUSHES {
                return Err(PyValueError::new_err(format!(
                    "{} pushes given; a reset takes at most {DOMAIN_PUSHES}: combine pushes that happen together",
                    pushes.len()
                )));
            }
            for (slot, (at_s, duration_s, fx, fy, fz)) in d.pushes.iter_mut().zip(pushes) {
                *slot = PushBlock { at_s, duration_s, force_n: [fx, fy, fz] };
                any = true;
            }
        }
        if any {
            d.flags = domain::APPLY;
        }
        rtloop_agent::validate_domain(&d, n).map_err(|e| PyValueError::new_err(e.to_string()))?;
        self.with(|inner| {
            if inner.seen_seq.is_none() {
                let _ = inner.read_now();
            }
            inner.agent.request_reset(seed, &d)
        })
    }

    /// Arm explicitly: if the last state read says the spine waits to be armed (status
    /// "waiting" or "safe") with a token the commands do not echo yet, echo it — the next
    /// `command()` or `heartbeat()` arms the spine — and return True; else return False.
    fn arm(&self) -> PyResult<bool> {
        self.with(|inner| {
            if inner.seen_seq.is_none() {
                let _ = inner.read_now();
            }
            inner.agent.rearm_if_needed()
        })
    }

    /// Detach from the spine (another agent may attach then). The spine, no longer hearing
    /// from this agent, times out and applies its `--agent-on-timeout` action. Later calls
    /// raise `ValueError`; closing twice is harmless.
    fn close(&self, py: Python<'_>) {
        // Take it out under the lock, drop it (which clears `agent_pid`) outside.
        let taken = py.detach(|| lock(&self.inner).take());
        drop(taken);
    }

    fn __repr__(&self) -> String {
        format!(
            "rtloop.Agent(name='{}', servo_count={}, rate_hz={}, lockstep={}{})",
            self.info.name,
            self.info.count,
            self.info.rate_hz,
            if self.info.lockstep { "True" } else { "False" },
            if self.closed() { ", closed" } else { "" }
        )
    }
}

/// One state the spine published, as `Agent.state()` / `Agent.wait_next()` return it.
///
/// Everything here is a copy: the agent copies the state out of the shared memory under
/// its seqlock, and the per-servo numpy arrays (shape (servo_count,), in `Agent.ids`
/// order) are made from that private copy on first access (then the same array each
/// time). The shared mapping itself is never exposed to Python: the spine rewrites it
/// every cycle, so a view of it would change, and tear, while you read it.
/// Units: positions rev, velocities rev/s, torques N·m, currents A, temperatures °C,
/// voltages V, `time` s.
#[pyclass(frozen, module = "rtloop._rtloop", name = "AgentState")]
pub struct AgentState {
    block: Box<StateBlock>,
    count: usize,
    mode: PyOnceLock<Py<PyArray1<i32>>>,
    fault: PyOnceLock<Py<PyArray1<i32>>>,
    fresh: PyOnceLock<Py<PyArray1<bool>>>,
    request_cycle: PyOnceLock<Py<PyArray1<i64>>>,
    age_cycles: PyOnceLock<Py<PyArray1<i64>>>,
    position: PyOnceLock<Py<PyArray1<f64>>>,
    velocity: PyOnceLock<Py<PyArray1<f64>>>,
    torque: PyOnceLock<Py<PyArray1<f64>>>,
    q_current: PyOnceLock<Py<PyArray1<f64>>>,
    d_current: PyOnceLock<Py<PyArray1<f64>>>,
    motor_temperature: PyOnceLock<Py<PyArray1<f64>>>,
    temperature: PyOnceLock<Py<PyArray1<f64>>>,
    voltage: PyOnceLock<Py<PyArray1<f64>>>,
}

impl AgentState {
    fn new(block: Box<StateBlock>, count: usize) -> Self {
        AgentState {
            block,
            count: count.min(MAX_SERVOS),
            mode: PyOnceLock::new(),
            fault: PyOnceLock::new(),
            fresh: PyOnceLock::new(),
            request_cycle: PyOnceLock::new(),
            age_cycles: PyOnceLock::new(),
            position: PyOnceLock::new(),
            velocity: PyOnceLock::new(),
            torque: PyOnceLock::new(),
            q_current: PyOnceLock::new(),
            d_current: PyOnceLock::new(),
            motor_temperature: PyOnceLock::new(),
            temperature: PyOnceLock::new(),
            voltage: PyOnceLock::new(),
        }
    }

    fn servos(&self) -> &[RawServoState] {
        &self.block.servos[..self.count]
    }

    /// One per-servo column as a numpy array, made once and then the same object.
    fn column<'py, T: numpy::Element>(
        &self,
        py: Python<'py>,
        cell: &PyOnceLock<Py<PyArray1<T>>>,
        get: fn(&RawServoState) -> T,
    ) -> Bound<'py, PyArray1<T>> {
        cell.get_or_init(py, || PyArray1::from_iter(py, self.servos().iter().map(get)).unbind()).bind(py).clone()
    }
}

#[pymethods]
impl AgentState {
    /// The spine's cycle index.
    #[getter]
    fn cycle(&self) -> u64 {
        self.block.cycle
    }

    /// Time since the run started, s.
    #[getter]
    fn time(&self) -> f64 {
        self.block.time_ns as f64 * 1e-9
    }

    /// CLOCK_MONOTONIC when the spine published this state, ns (`time.monotonic_ns()`'s clock).
    #[getter]
    fn stamp_ns(&self) -> u64 {
        self.block.stamp_ns
    }

    /// The spine's status: "waiting", "following", "safe", "shutting_down" or "ended".
    #[getter]
    fn status(&self) -> &'static str {
        status_name(self.block.status)
    }

    /// Whether the spine follows this agent's commands (status "following").
    #[getter]
    fn armed(&self) -> bool {
        self.block.status == status::FOLLOWING
    }

    /// The arm token the spine publishes (echoed by `Agent.arm()`).
    #[getter]
    fn arm_token(&self) -> u64 {
        self.block.arm_token
    }

    /// Agent timeouts so far.
    #[getter]
    fn timeouts(&self) -> u64 {
        self.block.timeouts
    }

    /// Armings so far (the first one counts).
    #[getter]
    fn rearms(&self) -> u64 {
        self.block.rearms
    }

    /// Servo commands the spine refused so far.
    #[getter]
    fn rejected(&self) -> u64 {
        self.block.rejected
    }

    /// Cycles whose command the spine could not read consistently (the agent was mid-write
    /// on every try) so far, at most one per cycle.
    #[getter]
    fn torn(&self) -> u64 {
        self.block.torn
    }

    /// Number of servos (the length of every per-servo array).
    #[getter]
    fn servo_count(&self) -> usize {
        self.count
    }

    /// moteus mode per servo (int32; -1 before it answered).
    #[getter]
    fn mode<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i32>> {
        self.column(py, &self.mode, |s| s.mode)
    }

    /// moteus fault code per servo (int32; -1 before it answered).
    #[getter]
    fn fault<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i32>> {
        self.column(py, &self.fault, |s| s.fault)
    }

    /// Whether each servo's state answers this cycle's request (bool).
    #[getter]
    fn fresh<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<bool>> {
        self.column(py, &self.fresh, |s| s.fresh != 0)
    }

    /// The cycle whose request each state answers (int64; -1 before the first answer).
    #[getter]
    fn request_cycle<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        self.column(py, &self.request_cycle, |s| s.request_cycle)
    }

    /// How many cycles old each state is (int64; 0 when fresh, -1 before the first answer).
    #[getter]
    fn age_cycles<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        self.column(py, &self.age_cycles, |s| s.age_cycles)
    }

    /// Position per servo, rev (NaN when unknown).
    #[getter]
    fn position<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.column(py, &self.position, |s| s.position)
    }

    /// Velocity per servo, rev/s.
    #[getter]
    fn velocity<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.column(py, &self.velocity, |s| s.velocity)
    }

    /// Torque per servo, N·m.
    #[getter]
    fn torque<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.column(py, &self.torque, |s| s.torque)
    }

    /// Q-axis current per servo, A.
    #[getter]
    fn q_current<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.column(py, &self.q_current, |s| s.q_current)
    }

    /// D-axis current per servo, A.
    #[getter]
    fn d_current<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.column(py, &self.d_current, |s| s.d_current)
    }

    /// Motor temperature per servo, °C.
    #[getter]
    fn motor_temperature<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.column(py, &self.motor_temperature, |s| s.motor_temperature)
    }

    /// Board temperature per servo, °C.
    #[getter]
    fn temperature<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.column(py, &self.temperature, |s| s.temperature)
    }

    /// Supply voltage per servo, V.
    #[getter]
    fn voltage<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.column(py, &self.voltage, |s| s.voltage)
    }

    /// The last reset request the spine answered (`Agent.request_reset`), 0 before any.
    #[getter]
    fn reset_ack(&self) -> u64 {
        self.block.reset_ack
    }

    /// How the spine answered it: "none" (no request yet), "done", "no_physics" (refused:
    /// the run has no physics world) or "not_lockstep" (refused: the run is not lockstep).
    #[getter]
    fn reset_result(&self) -> &'static str {
        match self.block.reset_result {
            reset::NONE => "none",
            reset::DONE => "done",
            reset::NO_PHYSICS => "no_physics",
            reset::NOT_LOCKSTEP => "not_lockstep",
            reset::BAD_DOMAIN => "bad_domain",
            _ => "unknown",
        }
    }

    /// Whether the spine waits for a command answering this state (lockstep; False for a
    /// state a held command answers already, see `Agent.command(hold=)`).
    #[getter]
    fn awaiting(&self) -> bool {
        self.block.awaiting != 0
    }

    /// Resets of the simulated world done so far.
    #[getter]
    fn resets(&self) -> u64 {
        self.block.resets
    }

    /// The simulated body's ground truth (a `BodyState`), or None without physics.
    #[getter]
    fn body(&self, py: Python<'_>) -> Option<BodyState> {
        let b = &self.block.body;
        (b.present != 0).then(|| BodyState {
            position_m: PyArray1::from_slice(py, &b.position_m).unbind(),
            velocity_mps: PyArray1::from_slice(py, &b.velocity_mps).unbind(),
            yaw_deg: b.yaw_deg,
            fallen: b.fallen != 0,
            height_m: b.height_m,
            roll_deg: b.roll_deg,
            pitch_deg: b.pitch_deg,
            quaternion: PyArray1::from_slice(py, &b.quaternion).unbind(),
            qpos: PyArray1::from_slice(py, self.block.pose.qpos()).unbind(),
        })
    }

    /// The IMU, or None when the robot has none.
    #[getter]
    fn imu(&self, py: Python<'_>) -> Option<ImuState> {
        let imu = &self.block.imu;
        (imu.present != 0).then(|| ImuState {
            quaternion: PyArray1::from_slice(py, &imu.quaternion).unbind(),
            rate_dps: PyArray1::from_slice(py, &imu.rate_dps).unbind(),
            accel_mps2: PyArray1::from_slice(py, &imu.accel_mps2).unbind(),
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "rtloop.AgentState(cycle={}, time={:.6}, status='{}', servo_count={})",
            self.block.cycle,
            self.time(),
            self.status(),
            self.count
        )
    }
}

/// The IMU part of a state (copies).
#[pyclass(frozen, module = "rtloop._rtloop", name = "ImuState")]
pub struct ImuState {
    /// Attitude quaternion w, x, y, z (float64, shape (4,)).
    #[pyo3(get)]
    quaternion: Py<PyArray1<f64>>,
    /// Body rates x, y, z, °/s (float64, shape (3,)).
    #[pyo3(get)]
    rate_dps: Py<PyArray1<f64>>,
    /// Linear acceleration x, y, z, m/s² (float64, shape (3,)).
    #[pyo3(get)]
    accel_mps2: Py<PyArray1<f64>>,
}

#[pymethods]
impl ImuState {
    fn __repr__(&self, py: Python<'_>) -> String {
        let q = self.quaternion.bind(py).to_vec().unwrap_or_default();
        format!("rtloop.ImuState(quaternion={q:?})")
    }
}

/// The simulated body's ground truth in a state (physics runs only): what the physics
/// computed, not a sensor reading.
#[pyclass(frozen, module = "rtloop._rtloop", name = "BodyState")]
pub struct BodyState {
    /// Height of the body's origin above the ground under it, m.
    #[pyo3(get)]
    height_m: f64,
    /// Roll, degrees (right side down positive).
    #[pyo3(get)]
    roll_deg: f64,
    /// Pitch, degrees (nose up positive).
    #[pyo3(get)]
    pitch_deg: f64,
    /// Attitude quaternion w, x, y, z in the pi3hat's frame (float64, shape (4,)).
    #[pyo3(get)]
    quaternion: Py<PyArray1<f64>>,
    /// Position of the body's origin in the ground's frame (+x forward, +y left of where
    /// the model starts, +z up), m (float64, shape (3,)).
    #[pyo3(get)]
    position_m: Py<PyArray1<f64>>,
    /// Velocity of the body's origin in the ground's frame, m/s (float64, shape (3,)).
    #[pyo3(get)]
    velocity_mps: Py<PyArray1<f64>>,
    /// Heading: rotation about the vertical, degrees, positive turning left (-180 to 180).
    #[pyo3(get)]
    yaw_deg: f64,
    /// The body has fallen (the run's `fall` event, `[safety] fall_tilt_deg`) and is not
    /// upright again yet.
    #[pyo3(get)]
    fallen: bool,
    /// MuJoCo's generalised positions of the whole model (float64, shape (nq,)): with the
    /// model, every body's pose (what `rtloop.Renderer` draws); empty for a model with more
    /// than 64.
    #[pyo3(get)]
    qpos: Py<PyArray1<f64>>,
}

#[pymethods]
impl BodyState {
    fn __repr__(&self) -> String {
        format!(
            "rtloop.BodyState(height_m={:.4}, roll_deg={:.3}, pitch_deg={:.3})",
            self.height_m, self.roll_deg, self.pitch_deg
        )
    }
}

/// Add the agent classes and exceptions to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyAgent>()?;
    m.add_class::<AgentState>()?;
    m.add_class::<ImuState>()?;
    m.add_class::<BodyState>()?;
    m.add("SpineNotFound", py.get_type::<SpineNotFound>())?;
    m.add("ProtocolVersionError", py.get_type::<ProtocolVersionError>())?;
    m.add("AgentBusy", py.get_type::<AgentBusy>())?;
    m.add("SpineGone", py.get_type::<SpineGone>())?;
    Ok(())
}
