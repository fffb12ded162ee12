//! The native side of `rtloop.moteus_transport`: raw CAN-FD frames over rtloop's transports
//! (fdcanusb, SocketCAN, UDP, the in-process simulator), one multi-bus cycle per call.
//!
//! What it is for: [`FrameCycler::cycle`] sends every frame of a moteus `Transport.cycle()` on
//! its bus — all buses at once, through [`rtloop_io::Cycler`] — and collects the replies, matching
//! each to the request it answers in Rust (same CAN prefix, the reply's source is the
//! request's destination, its destination the request's source), returning as soon as every
//! awaited reply is in or the timeout passes. The wait runs with the GIL released.
//!
//! What it must never do: panic on what Python passes (bus numbers, ids, payloads are
//! checked and refused with a `ValueError` naming the frame), hold the GIL while it waits, or
//! hide a failed bus (the cycle raises `OSError` saying which bus and why).

use std::path::Path;
use std::sync::Mutex;

use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyPermissionError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use rtloop_io::open::OpenOptions;
use rtloop_io::{
    BusUri, CycleOptions, CycleStats, Cycler, MonotonicClock, RxFrame, TransportCounters, TxFrame, MAX_BUSES,
};
use rtloop_proto::CanFdFrame;
use rtloop_simrobot::open_bus;

/// Add this part's classes to the extension module (called from the module initialiser in `lib.rs`).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FrameCycler>()
}

/// The longest timeout a cycle or a receive may be given, s.
const MAX_TIMEOUT_S: f64 = 60.0;

/// Frames one call keeps at most (replies, late replies and unsolicited frames together);
/// more are counted in `rx_overflow`.
const RX_CAPACITY: usize = 1024;

/// Received-frame tuple handed to Python: `(bus, arbitration_id, data, flags)`, flags bit 0
/// extended id, bit 1 FD format, bit 2 bitrate switch.
type PyRx<'py> = (u8, u32, Bound<'py, PyBytes>, u8);

/// Several CAN-FD buses driven as one: send frames, collect the replies.
///
/// `buses` holds `(bus number, address)` pairs; an address is what `rtloop` takes everywhere:
/// `fdcanusb:PATH`, `socketcan:IFACE`, `udp:HOST:PORT` or `sim` (an in-process simulated bus
/// holding the servos `sim_servos` lists for that bus number; `sim_instant`: its wires take no
/// time and its servos answer at once). `timeout` (s) caps how long a cycle waits for missing
/// replies. Users build it through
/// `rtloop.moteus_transport.Transport`.
#[pyclass(module = "rtloop._rtloop", name = "FrameCycler", frozen)]
pub struct FrameCycler {
    /// `None` once closed. Behind a mutex: the cycle runs without the GIL, so two Python
    /// threads could call it at once; the second waits for the first.
    inner: Mutex<Option<Inner>>,
    /// Per bus index: its number and address, for messages and `buses`.
    buses: Vec<(u8, BusUri)>,
}

struct Inner {
    cycler: Cycler<MonotonicClock>,
    /// Frames of the current call, reused between calls.
    tx: Vec<TxFrame>,
    /// Per frame of `tx`: the reply that answered it has arrived.
    answered: Vec<bool>,
    /// Per frame of `tx`: a reply is matched by prefix and ids (`false`: raw, any frame on
    /// its bus answers it).
    by_ids: Vec<bool>,
    /// For each frame received after the writes, in arrival order: the `tx` index it answers.
    matches: Vec<Option<usize>>,
    rx: Vec<RxFrame>,
    /// The options cycles run with; receives change a copy.
    options: CycleOptions,
    last: CycleStats,
}

/// What one call brought back, before it becomes Python objects.
struct Collected {
    /// `(tx index, rx frame)` for every reply that answered a frame, in arrival order.
    replies: Vec<(usize, RxFrame)>,
    /// Everything else received: late replies of earlier calls, unsolicited frames.
    others: Vec<RxFrame>,
    stats: CycleStats,
}

#[pymethods]
impl FrameCycler {
    /// Open every bus (without the GIL: an fdcanusb open waits for the device to settle).
    #[new]
    #[pyo3(signature = (buses, *, sim_servos = Vec::new(), timeout = 0.1, fdcanusb_crc = false, sim_instant = false))]
    fn new(
        py: Python<'_>,
        buses: Vec<(i64, String)>,
        sim_servos: Vec<(i64, Vec<i64>)>,
        timeout: f64,
        fdcanusb_crc: bool,
        sim_instant: bool,
    ) -> PyResult<Self> {
        let timeout_ns = timeout_ns("timeout", timeout, false)?;
        if buses.is_empty() {
            return Err(PyValueError::new_err(
                "no buses given: give buses={1: \"fdcanusb:/dev/ttyACM0\"} (bus number: address)",
            ));
        }
        if buses.len() > MAX_BUSES {
            return Err(PyValueError::new_err(format!(
                "{} buses given; at most {MAX_BUSES} can be cycled together",
                buses.len()
            )));
        }
        let mut parsed: Vec<(u8, BusUri)> = Vec::with_capacity(buses.len());
        for (bus, address) in &buses {
            let number = bus_number(*bus)?;
            if parsed.iter().any(|(n, _)| *n == number) {
                return Err(PyValueError::new_err(format!("bus {number} is given twice; give each bus once")));
            }
            let uri =
                rtloop_io::uri::parse(address).map_err(|e| PyValueError::new_err(format!("bus {number}: {e}")))?;
            parsed.push((number, uri));
        }
        let mut sim_ids: Vec<(u8, Vec<u8>)> = Vec::with_capacity(sim_servos.len());
        for (bus, ids) in &sim_servos {
            let number = bus_number(*bus)?;
            let mut checked = Vec::with_capacity(ids.len());
            for &id in ids {
                checked.push(servo_id(number, id)?);
            }
            sim_ids.push((number, checked));
        }
        let sim_bus =
            if sim_instant { rtloop_sim::BusConfig::without_wire_time() } else { rtloop_sim::BusConfig::default() };
        let options = OpenOptions { fdcanusb_crc, ..Default::default() };
        let sim = rtloop_simrobot::SimOptions { bus: sim_bus };
        let to_open = parsed.clone();
        let opened = py.detach(move || {
            let mut transports = Vec::with_capacity(to_open.len());
            for (number, uri) in &to_open {
                let ids = sim_ids.iter().find(|(n, _)| n == number).map(|(_, ids)| ids.as_slice()).unwrap_or(&[]);
                transports.push(open_bus(uri, ids, options, sim).map_err(|e| (*number, uri.clone(), e))?);
            }
            Ok(transports)
        });
        let transports = opened.map_err(|(number, uri, e)| open_error(number, &uri, &e.to_string()))?;
        let options = CycleOptions { timeout_ns, rx_baseline_wait_ns: timeout_ns, ..Default::default() };
        let cycler = Cycler::new(transports, None, MonotonicClock::default(), options)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(FrameCycler {
            inner: Mutex::new(Some(Inner {
                cycler,
                tx: Vec::new(),
                answered: Vec::new(),
                by_ids: Vec::new(),
                matches: Vec::new(),
                rx: vec![RxFrame::default(); RX_CAPACITY],
                options,
                last: CycleStats::default(),
            })),
            buses: parsed,
        })
    }

    /// `(bus number, address)` of every bus, in order.
    #[getter]
    fn buses(&self) -> Vec<(u8, String)> {
        self.buses.iter().map(|(n, u)| (*n, u.to_string())).collect()
    }

    /// One cycle. `frames`: `(bus, arbitration_id, data, reply, raw)` each — `reply`: wait for
    /// its answer; `raw`: any frame on that bus answers it (moteus' raw commands), otherwise
    /// the reply must come from the frame's destination, to its source, with its CAN prefix.
    /// `listen`: bus numbers to read even when nothing there is awaited. `timeout` (s)
    /// overrides the cycler's for this call.
    ///
    /// Returns `(replies, others)`: `replies` holds `(index, bus, arbitration_id, data,
    /// flags)` for each frame answered (index into `frames`), `others` every other frame
    /// received `(bus, arbitration_id, data, flags)`. Raises `OSError` when a bus failed.
    #[pyo3(signature = (frames, *, listen = Vec::new(), timeout = None))]
    #[allow(clippy::type_complexity)] // The tuples are the Python interface.
    fn cycle<'py>(
        &self,
        py: Python<'py>,
        frames: Vec<(i64, i64, Vec<u8>, bool, bool)>,
        listen: Vec<i64>,
        timeout: Option<f64>,
    ) -> PyResult<(Vec<(usize, u8, u32, Bound<'py, PyBytes>, u8)>, Vec<PyRx<'py>>)> {
        let timeout = timeout.map(|t| timeout_ns("timeout", t, false)).transpose()?;
        let mut tx = Vec::with_capacity(frames.len());
        let mut by_ids = Vec::with_capacity(frames.len());
        for (i, (bus, id, data, reply, raw)) in frames.iter().enumerate() {
            let index = self.bus_index(*bus).map_err(|e| PyValueError::new_err(format!("frame {i}: {e}")))?;
            let id = u32::try_from(*id).ok().filter(|id| *id <= 0x1FFF_FFFF).ok_or_else(|| {
                PyValueError::new_err(format!("frame {i}: arbitration id {id} does not fit in 29 bits"))
            })?;
            let mut frame = CanFdFrame::new(id, data).map_err(|e| {
                PyValueError::new_err(format!("frame {i}: {e}: a CAN-FD frame carries at most 64 bytes"))
            })?;
            // moteus pads with 0x50 (a no-op subframe) up to the next CAN-FD length; so do we.
            frame.pad_to_dlc();
            tx.push(TxFrame { bus: index, frame, expect_reply: *reply });
            by_ids.push(!*raw);
        }
        let mut force_check = 0u32;
        for bus in listen {
            force_check |= 1 << self.bus_index(bus).map_err(|e| PyValueError::new_err(format!("listen: {e}")))?;
        }
        let collected = py.detach(move || -> Result<Collected, String> {
            let mut guard = self.inner.lock().map_err(|_| "an earlier cycle panicked; make a new transport")?;
            let inner = guard.as_mut().ok_or("the transport is closed; make a new one")?;
            let mut options = inner.options;
            options.force_check = force_check;
            if let Some(t) = timeout {
                options.timeout_ns = t;
                options.rx_baseline_wait_ns = t;
            }
            inner.tx = tx;
            inner.by_ids = by_ids;
            Ok(inner.run(options))
        });
        let collected = collected.map_err(PyRuntimeError::new_err)?;
        self.check_buses(&collected.stats)?;
        let replies = collected
            .replies
            .iter()
            .map(|(i, r)| (*i, self.number(r.bus), r.frame.id, PyBytes::new(py, r.frame.payload()), flags(&r.frame)))
            .collect();
        Ok((replies, self.to_py(py, &collected.others)))
    }

    /// Every frame received within `timeout` s (0: only what has already arrived), from
    /// every bus, without sending anything: `(bus, arbitration_id, data, flags)` each.
    #[pyo3(signature = (timeout = 0.0))]
    fn receive<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Vec<PyRx<'py>>> {
        let wait_ns = timeout_ns("timeout", timeout, true)?;
        let all = if self.buses.len() >= 32 { u32::MAX } else { (1u32 << self.buses.len()) - 1 };
        let collected = py.detach(move || -> Result<Collected, String> {
            let mut guard = self.inner.lock().map_err(|_| "an earlier cycle panicked; make a new transport")?;
            let inner = guard.as_mut().ok_or("the transport is closed; make a new one")?;
            let mut options = inner.options;
            options.force_check = all;
            options.min_tx_wait_ns = wait_ns;
            options.timeout_ns = wait_ns;
            options.rx_baseline_wait_ns = wait_ns;
            inner.tx.clear();
            inner.by_ids.clear();
            Ok(inner.run(options))
        });
        let collected = collected.map_err(PyRuntimeError::new_err)?;
        self.check_buses(&collected.stats)?;
        Ok(self.to_py(py, &collected.others))
    }

    /// Figures of the last call as a dict: `expected`, `answered`, `received`, `sent`,
    /// `send_errors`, `stale_drained`, `rx_overflow`, `timed_out`, `duration_s`.
    #[getter]
    fn last_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        // Locked without the GIL: a cycle in another thread holds the lock while it waits.
        let st = py.detach(|| self.inner.lock().ok().and_then(|g| g.as_ref().map(|i| i.last)).unwrap_or_default());
        let d = PyDict::new(py);
        d.set_item("expected", st.expected)?;
        d.set_item("answered", st.answered)?;
        d.set_item("received", st.received)?;
        d.set_item("sent", st.sent)?;
        d.set_item("send_errors", st.send_errors)?;
        d.set_item("stale_drained", st.stale_drained)?;
        d.set_item("rx_overflow", st.rx_overflow)?;
        d.set_item("timed_out", st.timed_out)?;
        d.set_item("duration_s", st.duration_ns() as f64 * 1e-9)?;
        Ok(d)
    }

    /// Per bus number, the transport's running counters as a dict: `sent`, `received`,
    /// `protocol_errors`, `device_errors`, `last_device_error`, `disconnects`, `reconnects`
    /// (empty once closed).
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let all: Vec<TransportCounters> = py.detach(|| {
            let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            guard
                .as_ref()
                .map(|inner| (0..self.buses.len()).map(|i| inner.cycler.bus_counters(i).unwrap_or_default()).collect())
                .unwrap_or_default()
        });
        let out = PyDict::new(py);
        for ((number, _), c) in self.buses.iter().zip(&all) {
            let d = PyDict::new(py);
            d.set_item("sent", c.sent)?;
            d.set_item("received", c.received)?;
            d.set_item("protocol_errors", c.protocol_errors)?;
            d.set_item("device_errors", c.device_errors)?;
            d.set_item("last_device_error", c.last_device_error.as_str())?;
            d.set_item("disconnects", c.disconnects)?;
            d.set_item("reconnects", c.reconnects)?;
            out.set_item(number, d)?;
        }
        Ok(out)
    }

    /// Close every bus (later calls raise). Waits for a cycle in progress, without the GIL.
    fn close(&self, py: Python<'_>) {
        py.detach(|| {
            // A poisoned lock still holds the buses: close them all the same.
            let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            guard.take();
        });
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        py.detach(|| self.inner.lock().map(|g| g.is_none()).unwrap_or(true))
    }
}

impl FrameCycler {
    /// The index of bus `number`, or why there is none.
    fn bus_index(&self, number: i64) -> Result<usize, String> {
        self.buses.iter().position(|(n, _)| i64::from(*n) == number).ok_or_else(|| {
            let known: Vec<String> = self.buses.iter().map(|(n, _)| n.to_string()).collect();
            format!("bus {number} is not one of this transport's buses ({})", known.join(", "))
        })
    }

    fn number(&self, index: usize) -> u8 {
        self.buses.get(index).map_or(0, |(n, _)| *n)
    }

    /// Raise `OSError` for the first bus that failed in this call.
    fn check_buses(&self, st: &CycleStats) -> PyResult<()> {
        for (i, e) in st.bus_errors.iter().enumerate() {
            if let (Some(e), Some((number, uri))) = (e, self.buses.get(i)) {
                let why = rtloop::devices::explain_bus_error(uri, *e);
                return Err(PyOSError::new_err(format!("bus {number}: {why}")));
            }
        }
        Ok(())
    }

    fn to_py<'py>(&self, py: Python<'py>, frames: &[RxFrame]) -> Vec<PyRx<'py>> {
        frames
            .iter()
            .map(|r| (self.number(r.bus), r.frame.id, PyBytes::new(py, r.frame.payload()), flags(&r.frame)))
            .collect()
    }
}

impl Inner {
    /// Run one cycle of `self.tx` with `options`; match replies to requests.
    fn run(&mut self, options: CycleOptions) -> Collected {
        let Inner { cycler, tx, answered, by_ids, matches, rx, last, .. } = self;
        cycler.options = options;
        answered.clear();
        answered.resize(tx.len(), false);
        matches.clear();
        let mut imu = Default::default();
        let stats = cycler.cycle_matching(tx, rx, &mut imu, &[], |bus, frame| {
            let found = tx.iter().enumerate().position(|(i, t)| {
                t.expect_reply && !answered[i] && t.bus == bus && (!by_ids[i] || answers(&t.frame, frame))
            });
            if let Some(i) = found {
                answered[i] = true;
            }
            matches.push(found);
            found.is_some()
        });
        *last = stats;
        // The k-th frame received after the writes is the k-th the matcher saw; frames
        // drained before the writes come first and were never shown to it.
        let mut replies = Vec::new();
        let mut others = Vec::new();
        let mut seen = 0usize;
        for r in rx.iter().take(stats.stored as usize) {
            if r.drained {
                others.push(*r);
                continue;
            }
            match matches.get(seen).copied().flatten() {
                Some(i) => replies.push((i, *r)),
                None => others.push(*r),
            }
            seen += 1;
        }
        Collected { replies, others, stats }
    }
}

/// Whether `reply` answers `request` the way moteus matches them: same CAN prefix, sent by
/// the request's destination (any servo for a broadcast) to the request's source.
fn answers(request: &CanFdFrame, reply: &CanFdFrame) -> bool {
    let (q, r) = (request.id, reply.id);
    let prefix = |id: u32| (id >> 16) & 0x1FFF;
    let destination = q & 0x7F;
    let source = (q >> 8) & 0x7F;
    prefix(q) == prefix(r) && (destination == 0x7F || (r >> 8) & 0x7F == destination) && r & 0x7F == source
}

fn flags(frame: &CanFdFrame) -> u8 {
    u8::from(frame.flags.extended) | u8::from(frame.flags.fd) << 1 | u8::from(frame.flags.brs) << 2
}

fn bus_number(bus: i64) -> PyResult<u8> {
    u8::try_from(bus)
        .ok()
        .filter(|b| *b >= 1)
        .ok_or_else(|| PyValueError::new_err(format!("bus {bus} is not a bus number: buses are numbered 1 to 255")))
}

fn servo_id(bus: u8, id: i64) -> PyResult<u8> {
    u8::try_from(id).ok().filter(|i| (1..=127).contains(i)).ok_or_else(|| {
        PyValueError::new_err(format!("bus {bus}: servo id {id} is out of range: give ids from 1 to 127"))
    })
}

/// A timeout in seconds as nanoseconds: finite, positive (or zero when `zero_ok`), at most a
/// minute.
fn timeout_ns(name: &str, seconds: f64, zero_ok: bool) -> PyResult<u64> {
    let low_ok = if zero_ok { seconds >= 0.0 } else { seconds > 0.0 };
    if !seconds.is_finite() || !low_ok || seconds > MAX_TIMEOUT_S {
        let range = if zero_ok { "from 0" } else { "above 0" };
        return Err(PyValueError::new_err(format!(
            "{name}={seconds} is out of range: give a number of seconds {range}, at most {MAX_TIMEOUT_S}"
        )));
    }
    // At most 6e10: fits.
    Ok((seconds * 1e9).round() as u64)
}

/// The exception for a bus that cannot be opened: a missing device path is
/// `FileNotFoundError`, a refused one `PermissionError`, the rest `OSError`; each names the
/// bus and its address.
fn open_error(number: u8, uri: &BusUri, message: &str) -> PyErr {
    let text = format!("bus {number}: {message}");
    if let BusUri::Fdcanusb { path } = uri {
        if !Path::new(path).exists() {
            return crate::sim::with_errno(PyFileNotFoundError::new_err(text), libc::ENOENT);
        }
        if message.contains("permission denied") {
            return crate::sim::with_errno(PyPermissionError::new_err(text), libc::EACCES);
        }
    }
    PyOSError::new_err(text)
}
