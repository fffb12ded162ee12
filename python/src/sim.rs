//! `rtloop.sim` from the native side: the simulated servos served behind a pseudo-terminal
//! that speaks the fdcanusb protocol, or behind a UDP port — `rtloop sim` in-process.
//!
//! What it is for: [`SimServer`] builds the buses exactly as `rtloop sim` does (the CLI's own
//! [`rtloop::sim_buses::load_buses`] and [`rtloop::sim_buses::endpoint`], so both refuse the same
//! paths and addresses and load the same stored configurations) and serves them on a
//! background Rust thread ([`rtloop_io::serve::ServeHandle`]) that never touches the interpreter, so
//! Python code in the same process — the official moteus package, or rtloop's own transports
//! ([`transport`]) — can drive them while the GIL is free.
//!
//! What it must never do: take over a path that is not a stale simulator link (the pty rules
//! of [`rtloop_io::serve::pty`]), serve UDP on an address other hosts can reach unless told to, panic
//! on user input, or hold the GIL while it waits for the serving thread to stop.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pyo3::exceptions::{PyFileExistsError, PyFileNotFoundError, PyNotADirectoryError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rtloop::sim_buses::{ServedSpec, SimRequest};
use rtloop_io::BusUri;
use rtloop_simrobot::serve::{ServeHandle, ServeReport, ServedBus};

/// Add this part's classes, functions and exceptions to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SimServer>()
}

/// The largest servo id (0x7F is the broadcast address).
const MAX_SERVO_ID: i64 = 127;

/// One bus as Python asked for it, checked.
struct BusRequest {
    bus: u8,
    servos: Vec<u8>,
    kind: Kind,
}

/// Where a bus is served.
enum Kind {
    /// A pty linked at this path.
    Fdcanusb(PathBuf),
    /// A UDP socket bound at this host and port.
    Udp(String, u16),
}

/// Simulated moteus servos served behind fdcanusb ptys or UDP ports on a background thread.
///
/// `buses` holds one `(bus, kind, where, port, servos)` per bus: `kind` is `"fdcanusb"`
/// (`where` the path to link the pty at, `port` ignored) or `"udp"` (`where` the host to bind,
/// `port` the UDP port, 0 for any free one); `servos` the simulated servo ids, 1 to 127.
/// Serving starts at once; [`SimServer::stop`] (or dropping the object) stops it and removes
/// the pty links. Users call `rtloop.sim.serve`, `rtloop.sim.fdcanusb` or `rtloop.sim.udp`.
#[pyclass(module = "rtloop._rtloop", name = "SimServer", frozen)]
pub struct SimServer {
    /// `None` once stopped. Behind a mutex so that `stop` can wait for the thread without
    /// the GIL while other Python threads still read the properties.
    handle: Mutex<Option<ServeHandle>>,
    /// Per bus: number, `"fdcanusb"` or `"udp"`, and the path or the bound `host:port`.
    endpoints: Vec<(u8, &'static str, String)>,
    /// The bound UDP addresses, per bus (after port 0 was given a real port).
    udp_addresses: Vec<(u8, SocketAddr)>,
    warnings: Vec<String>,
    notes: Vec<String>,
    /// What the server reported when it stopped.
    report: Mutex<Option<ServeReport>>,
}

#[pymethods]
impl SimServer {
    /// Build the buses, load stored configurations from `config_dir` (like `rtloop sim
    /// --config-dir`), create every endpoint and start serving. `instant`: simulated wires
    /// take no time and servos answer at once (like `rtloop sim --no-wire-time`).
    #[new]
    #[pyo3(signature = (buses, *, instant = false, allow_remote = false, config_dir = None))]
    fn new(
        py: Python<'_>,
        buses: Vec<(i64, String, String, i64, Vec<i64>)>,
        instant: bool,
        allow_remote: bool,
        config_dir: Option<PathBuf>,
    ) -> PyResult<Self> {
        let requests = check_buses(&buses, allow_remote)?;
        if let Some(dir) = &config_dir {
            check_config_dir(dir)?;
        }
        let request = SimRequest {
            buses: requests
                .iter()
                .map(|r| ServedSpec {
                    bus: r.bus,
                    uri: match &r.kind {
                        Kind::Fdcanusb(path) => BusUri::Fdcanusb { path: path.display().to_string() },
                        Kind::Udp(host, port) => BusUri::Udp { host: host.clone(), port: *port, bus: 1 },
                    },
                    servos: r.servos.clone(),
                })
                .collect(),
            // The loopback rule was applied above with Python's own wording.
            allow_remote: true,
            duration_s: None,
            no_wire_time: instant,
            busy_poll: false,
            config_dir,
        };
        // Reading stored configurations is file I/O: done without the GIL.
        let loaded =
            py.detach(|| rtloop::sim_buses::load_buses(&request)).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let (warnings, notes) = (loaded.warnings, loaded.notes);
        let mut served = Vec::with_capacity(request.buses.len());
        let mut endpoints = Vec::with_capacity(request.buses.len());
        let mut udp_addresses = Vec::new();
        for ((spec, r), (bus, store)) in request.buses.iter().zip(&requests).zip(loaded.buses) {
            // Dropping `served` on an error removes the links made so far.
            let endpoint =
                rtloop::sim_buses::endpoint(spec, true).map_err(|e| endpoint_error(r, spec.bus, e.to_string()))?;
            match &r.kind {
                Kind::Fdcanusb(path) => endpoints.push((spec.bus, "fdcanusb", path.display().to_string())),
                Kind::Udp(..) => {
                    // The endpoint names itself `udp:<bound address>`: the real port after 0.
                    let name = endpoint.name().to_string();
                    let addr: SocketAddr = name.strip_prefix("udp:").and_then(|a| a.parse().ok()).ok_or_else(|| {
                        PyOSError::new_err(format!("bus {}: the UDP endpoint reports no address ({name})", spec.bus))
                    })?;
                    udp_addresses.push((spec.bus, addr));
                    endpoints.push((spec.bus, "udp", addr.to_string()));
                }
            }
            let mut s = ServedBus::new(bus, endpoint);
            s.store = store;
            served.push(s);
        }
        let handle = ServeHandle::start(served)
            .map_err(|e| PyOSError::new_err(format!("cannot start the simulator's thread: {e}")))?;
        Ok(SimServer {
            handle: Mutex::new(Some(handle)),
            endpoints,
            udp_addresses,
            warnings,
            notes,
            report: Mutex::new(None),
        })
    }

    /// Per bus `(bus, kind, where)`: kind `"fdcanusb"` with the pty's link path, or `"udp"`
    /// with the bound `host:port` (IPv6 hosts in brackets).
    #[getter]
    fn endpoints(&self) -> Vec<(u8, &'static str, String)> {
        self.endpoints.clone()
    }

    /// Per UDP bus `(bus, host, port)`: the address the simulator is bound at.
    #[getter]
    fn udp_addresses(&self) -> Vec<(u8, String, u16)> {
        self.udp_addresses.iter().map(|(b, a)| (*b, a.ip().to_string(), a.port())).collect()
    }

    /// Warnings from loading stored configurations (a line that cannot be applied, two servos
    /// answering to one id).
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    /// Notes from loading stored configurations (a servo a stored `id.id` moved to another id).
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    /// Whether the simulator is still serving.
    #[getter]
    fn running(&self) -> bool {
        // `try_lock`: a `stop` in progress holds the lock, and means "not serving".
        self.handle.try_lock().map(|h| h.is_some()).unwrap_or(false)
    }

    /// Stop serving (waits up to ~50 ms for the thread, without the GIL), remove the pty
    /// links, and return the report as a dict (see `rtloop.sim.Simulator.stop`). Calling it
    /// again returns the same report.
    fn stop(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let report = py.detach(|| {
            // A poisoned lock (a panic in an earlier stop) still holds what is left.
            let mut handle = self.handle.lock().unwrap_or_else(|p| p.into_inner());
            let mut report = self.report.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(h) = handle.take() {
                // The endpoints (and their links) go when the buses are dropped.
                let (r, buses) = h.stop_and_take();
                drop(buses);
                *report = Some(r);
            }
            report.clone().unwrap_or_default()
        });
        report_to_dict(py, &report, &self.endpoints)
    }
}

// No Drop of its own: dropping the ServeHandle stops the thread (a SimServer the garbage
// collector drops may hold the GIL for that, at most one server sleep, 50 ms) and dropping
// the buses removes the links.

/// Check every bus: numbers 1 to 255 given once, servo ids 1 to 127 given once per bus,
/// paths that can be links, UDP hosts on loopback unless `allow_remote`.
fn check_buses(buses: &[(i64, String, String, i64, Vec<i64>)], allow_remote: bool) -> PyResult<Vec<BusRequest>> {
    if buses.is_empty() {
        return Err(PyValueError::new_err("no buses given: give buses={1: [1, 2, 3]} (bus number: servo ids)"));
    }
    let mut out: Vec<BusRequest> = Vec::with_capacity(buses.len());
    for (bus, kind, place, port, servos) in buses {
        let Some(number) = u8::try_from(*bus).ok().filter(|b| *b >= 1) else {
            return Err(PyValueError::new_err(format!("bus {bus} is not a bus number: buses are numbered 1 to 255")));
        };
        if out.iter().any(|r| r.bus == number) {
            return Err(PyValueError::new_err(format!("bus {number} is given twice; give each bus once")));
        }
        if servos.is_empty() {
            return Err(PyValueError::new_err(format!(
                "bus {number} has no servos: give at least one servo id from 1 to {MAX_SERVO_ID}"
            )));
        }
        let mut ids = Vec::with_capacity(servos.len());
        for &id in servos {
            let Some(id) = u8::try_from(id).ok().filter(|i| (1..=MAX_SERVO_ID).contains(&i64::from(*i))) else {
                return Err(PyValueError::new_err(format!(
                    "bus {number}: servo id {id} is out of range: give ids from 1 to {MAX_SERVO_ID}"
                )));
            };
            if ids.contains(&id) {
                return Err(PyValueError::new_err(format!(
                    "bus {number}: servo id {id} is given twice; each id may answer only once on a bus"
                )));
            }
            ids.push(id);
        }
        let kind = match kind.as_str() {
            "fdcanusb" => {
                if place.is_empty() || place.contains('\0') {
                    return Err(PyValueError::new_err(format!(
                        "bus {number}: {place:?} cannot be a path: give a path such as /tmp/rtloop-bus1"
                    )));
                }
                Kind::Fdcanusb(PathBuf::from(place))
            }
            "udp" => {
                let Some(port) = u16::try_from(*port).ok() else {
                    return Err(PyValueError::new_err(format!(
                        "bus {number}: port {port} is out of range: give 0 (any free port) to 65535"
                    )));
                };
                check_loopback(number, place, port, allow_remote)?;
                Kind::Udp(place.clone(), port)
            }
            other => {
                return Err(PyValueError::new_err(format!(
                    "bus {number}: transport {other:?} is not served: give \"fdcanusb\" or \"udp\""
                )))
            }
        };
        out.push(BusRequest { bus: number, servos: ids, kind });
    }
    Ok(out)
}

/// A simulator answers anyone who writes to it: refuse an address other hosts can reach
/// unless the caller said so.
fn check_loopback(bus: u8, host: &str, port: u16, allow_remote: bool) -> PyResult<()> {
    let shown = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| PyOSError::new_err(format!("bus {bus}: cannot resolve {shown}: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(PyOSError::new_err(format!("bus {bus}: {shown} resolves to no address")));
    }
    if !allow_remote {
        if let Some(a) = addrs.iter().find(|a| !a.ip().is_loopback()) {
            return Err(PyValueError::new_err(format!(
                "bus {bus}: {a} is reachable from other hosts: serve on 127.0.0.1, or pass allow_remote=True"
            )));
        }
    }
    Ok(())
}

/// A configuration directory that is not there is a missing file, named with its path.
fn check_config_dir(dir: &Path) -> PyResult<()> {
    let shown = dir.display().to_string();
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(with_errno(
            PyNotADirectoryError::new_err(format!("config_dir {shown} is not a directory; give a directory")),
            libc::ENOTDIR,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(with_errno(
            PyFileNotFoundError::new_err(format!("config_dir {shown} does not exist; create it first")),
            libc::ENOENT,
        )),
        Err(e) => Err(PyOSError::new_err(format!("config_dir {shown}: {e}"))),
    }
}

/// The exception for an endpoint that could not be created: something already at the link
/// path is `FileExistsError`, a missing directory `FileNotFoundError`, the rest `OSError`.
fn endpoint_error(r: &BusRequest, bus: u8, message: String) -> PyErr {
    let message = format!("bus {bus}: {message}");
    match &r.kind {
        Kind::Fdcanusb(path) => {
            if std::fs::symlink_metadata(path).is_ok() {
                with_errno(PyFileExistsError::new_err(message), libc::EEXIST)
            } else if path.parent().is_some_and(|d| !d.as_os_str().is_empty() && !d.exists()) {
                with_errno(PyFileNotFoundError::new_err(message), libc::ENOENT)
            } else {
                PyOSError::new_err(message)
            }
        }
        Kind::Udp(..) => PyOSError::new_err(message),
    }
}

/// Set `errno` on an `OSError` built from a message alone (the message, which names the
/// path, stays its text: setting `filename` would make Python print `[Errno …] None: path`).
pub(crate) fn with_errno(err: PyErr, errno: i32) -> PyErr {
    Python::attach(|py| {
        // Best effort: the exception's type and message already say what is wrong.
        let _ = err.value(py).setattr("errno", errno);
    });
    err
}

/// The server's report as a dict of plain numbers and strings.
fn report_to_dict(
    py: Python<'_>,
    report: &ServeReport,
    endpoints: &[(u8, &'static str, String)],
) -> PyResult<Py<PyAny>> {
    let out = PyDict::new(py);
    let list = PyList::empty(py);
    for (i, e) in report.endpoints.iter().enumerate() {
        let d = PyDict::new(py);
        if let Some((bus, kind, place)) = endpoints.get(i) {
            d.set_item("bus", bus)?;
            d.set_item("transport", kind)?;
            d.set_item("address", place)?;
        }
        d.set_item("name", &e.name)?;
        d.set_item("frames_in", e.counters.frames_in)?;
        d.set_item("frames_out", e.counters.frames_out)?;
        d.set_item("protocol_errors", e.counters.protocol_errors)?;
        d.set_item("dropped", e.counters.dropped)?;
        d.set_item("service_errors", e.service_errors)?;
        d.set_item("deliver_errors", e.deliver_errors)?;
        d.set_item("undelivered", e.undelivered)?;
        d.set_item("first_error", &e.first_error)?;
        d.set_item("configs_stored", e.stored.written)?;
        d.set_item("configs_failed", e.stored.failed)?;
        d.set_item("first_store_error", &e.stored.first_error)?;
        d.set_item("kept_in_memory", e.kept_in_memory)?;
        let servos = PyList::empty(py);
        for s in &e.servos {
            let sd = PyDict::new(py);
            sd.set_item("id", s.id)?;
            sd.set_item("malformed_frames", s.request_errors.malformed_frames)?;
            sd.set_item("not_understood", s.request_errors.not_understood)?;
            sd.set_item("console_lines", s.console.lines)?;
            sd.set_item("console_errors", s.console.errors)?;
            sd.set_item("console_input_dropped", s.console.input_dropped)?;
            sd.set_item("telemetry_sent", s.console.telemetry_sent)?;
            sd.set_item("telemetry_skipped", s.console.telemetry_skipped)?;
            servos.append(sd)?;
        }
        d.set_item("servos", servos)?;
        list.append(d)?;
    }
    out.set_item("endpoints", list)?;
    out.set_item("poll_errors", report.poll_errors)?;
    out.set_item("text", report.to_string())?;
    Ok(out.into_any().unbind())
}
