//! The real-time loop behind `rtloop sim`: every served bus and its endpoint on one thread.
//!
//! What it is for: [`serve`] reads the clients' frames onto the simulated buses and hands
//! each reply to its client when the bus says its last bit has crossed the wire, sleeping
//! in `ppoll` until either a client writes or the next simulated wire event is due (capped at
//! [`MAX_SLEEP_NS`] so that a stop request is noticed). [`ServeHandle`] runs it on a
//! background thread, for tests and for callers that do other things meanwhile.
//!
//! After each service pass it takes the configurations the servos' consoles were asked to
//! store (`conf write`) and hands them to the [`ConfigWriter`] thread when the bus has a
//! [`ConfigStore`] (`rtloop sim --config-dir`); without one they are kept in the servo's
//! memory only, and counted. When it stops, the report carries per bus what the servos could
//! not act on (malformed frames, subframes not understood) and what their consoles counted.
//!
//! What it must never do: print (errors are counted and returned in the [`ServeReport`]);
//! let one endpoint's errors stop the others or spin the CPU (a failing endpoint is rested
//! for [`ERROR_BACKOFF_NS`] before it is tried again); wait for a disk (configurations are
//! written on their own thread); or allocate per iteration for register traffic (the poll
//! set is reserved before the loop; only the first error message of each endpoint is kept
//! as text — a console line or a stored configuration allocates, as the console does).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use rtloop_sim::console::ConsoleStats;
use rtloop_sim::servo::RequestErrors;
use rtloop_sim::SimBus;

use super::persist::{ConfigStore, ConfigWriter, StoreCounts};
use super::{Endpoint, EndpointCounters};
use rtloop_io::clock::monotonic_now_ns;

/// The longest the loop sleeps without checking the stop flag, ns.
pub const MAX_SLEEP_NS: u64 = 50_000_000;

/// How long an endpoint that just returned an error is left alone, ns. Long enough that a
/// descriptor stuck in an error state costs no CPU, short enough that a recovered client
/// hardly notices.
pub const ERROR_BACKOFF_NS: u64 = 10_000_000;

/// One simulated bus and the endpoint that serves it.
pub struct ServedBus {
    /// The bus, with its servos.
    pub bus: SimBus,
    /// The device side the clients talk to.
    pub endpoint: Box<dyn Endpoint>,
    /// Where `conf write` stores the servos' configurations (`rtloop sim --config-dir`);
    /// `None`: in the servos' memory only, until the server stops.
    pub store: Option<ConfigStore>,
}

impl ServedBus {
    /// `bus` served by `endpoint`, its configurations kept in memory only.
    pub fn new(bus: SimBus, endpoint: Box<dyn Endpoint>) -> Self {
        ServedBus { bus, endpoint, store: None }
    }

    /// Store the configurations `conf write` asks for in `store`'s files.
    pub fn with_store(mut self, store: ConfigStore) -> Self {
        self.store = Some(store);
        self
    }
}

impl fmt::Debug for ServedBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServedBus").field("endpoint", &self.endpoint.name()).finish_non_exhaustive()
    }
}

/// How one endpoint fared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointReport {
    /// The endpoint's name, e.g. `fdcanusb:/tmp/rtloop-bus1`.
    pub name: String,
    /// Its counters when the server stopped.
    pub counters: EndpointCounters,
    /// Calls to `service` that returned an error.
    pub service_errors: u64,
    /// Calls to `deliver` that returned an error.
    pub deliver_errors: u64,
    /// Replies thrown away because they arrived while the endpoint was resting after an error.
    pub undelivered: u64,
    /// The first error, as text (later ones are only counted).
    pub first_error: Option<String>,
    /// Per servo on the bus, in order.
    pub servos: Vec<ServoReport>,
    /// Configurations `conf write` asked to store: written to files, failed, first failure.
    pub stored: StoreCounts,
    /// Configurations `conf write` asked to store on a bus without a configuration
    /// directory: kept in the servo's memory only.
    pub kept_in_memory: u64,
}

/// What one simulated servo counted while it was served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServoReport {
    /// The id it answers to when the server stopped.
    pub id: u8,
    /// Requests it could not act on.
    pub request_errors: RequestErrors,
    /// Its diagnostic console's figures.
    pub console: ConsoleStats,
}

impl ServoReport {
    /// Nothing worth reporting.
    pub fn is_quiet(&self) -> bool {
        self.request_errors == RequestErrors::default()
            && self.console.lines == 0
            && self.console.errors == 0
            && self.console.input_dropped == 0
            && self.console.telemetry_skipped == 0
    }
}

/// `n thing` or `n things`.
fn count(f: &mut fmt::Formatter<'_>, n: u64, one: &str, many: &str) -> fmt::Result {
    write!(f, "{n} {}", if n == 1 { one } else { many })
}

impl fmt::Display for ServoReport {
    /// The non-zero figures, e.g. `servo 1: 2 subframes not understood; console: 4 lines, 1
    /// answered ERR`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "servo {}:", self.id)?;
        let mut sep = " ";
        let r = &self.request_errors;
        for (n, one, many) in [
            (r.malformed_frames, "malformed frame", "malformed frames"),
            (r.not_understood, "subframe not understood", "subframes not understood"),
        ] {
            if n > 0 {
                f.write_str(sep)?;
                count(f, n, one, many)?;
                sep = ", ";
            }
        }
        let c = &self.console;
        let mut first = true;
        for (n, one, many) in [
            (c.lines, "line", "lines"),
            (c.errors, "answered ERR", "answered ERR"),
            (c.input_dropped, "input byte dropped", "input bytes dropped"),
            (c.telemetry_skipped, "telemetry emission skipped", "telemetry emissions skipped"),
        ] {
            if n > 0 {
                f.write_str(if first {
                    if sep == " " {
                        " console "
                    } else {
                        "; console "
                    }
                } else {
                    ", "
                })?;
                first = false;
                count(f, n, one, many)?;
            }
        }
        Ok(())
    }
}

/// What [`serve`] did, one entry per served bus, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServeReport {
    /// Per endpoint.
    pub endpoints: Vec<EndpointReport>,
    /// `ppoll` calls that failed (other than being interrupted by a signal).
    pub poll_errors: u64,
}

impl fmt::Display for ServeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.endpoints.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            let c = &e.counters;
            write!(
                f,
                "{}: {} frames in, {} out, {} protocol errors, {} dropped",
                e.name, c.frames_in, c.frames_out, c.protocol_errors, c.dropped
            )?;
            let errors = e.service_errors + e.deliver_errors;
            if errors > 0 {
                write!(f, ", {errors} endpoint errors")?;
                if let Some(first) = &e.first_error {
                    write!(f, " (first: {first})")?;
                }
            }
            for servo in e.servos.iter().filter(|s| !s.is_quiet()) {
                write!(f, "; {servo}")?;
            }
            if e.stored.written > 0 {
                f.write_str("; ")?;
                count(f, e.stored.written, "configuration stored", "configurations stored")?;
            }
            if e.stored.failed > 0 {
                f.write_str("; ")?;
                count(f, e.stored.failed, "configuration could not be stored", "configurations could not be stored")?;
                if let Some(first) = &e.stored.first_error {
                    write!(f, " (first: {first})")?;
                }
            }
            if e.kept_in_memory > 0 {
                f.write_str("; ")?;
                count(f, e.kept_in_memory, "conf write", "conf writes")?;
                f.write_str(
                    " kept in memory only, lost now that the simulator stops (give --config-dir DIR to keep them)",
                )?;
            }
        }
        if self.poll_errors > 0 {
            write!(f, "; {} poll errors", self.poll_errors)?;
        }
        Ok(())
    }
}

/// How the server waits for work.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServeOptions {
    /// Poll the descriptors without sleeping: the lowest turnaround for clients (no
    /// wakeup latency), at the price of one busy core.
    pub busy_poll: bool,
}

/// Serve every bus until `stop` is set; returns what happened.
pub fn serve(buses: &mut [ServedBus], stop: &AtomicBool) -> ServeReport {
    serve_with(buses, stop, ServeOptions::default())
}

/// [`serve`] with options.
pub fn serve_with(buses: &mut [ServedBus], stop: &AtomicBool, options: ServeOptions) -> ServeReport {
    let mut report = ServeReport {
        endpoints: buses
            .iter()
            .map(|b| EndpointReport { name: b.endpoint.name().to_string(), ..EndpointReport::default() })
            .collect(),
        poll_errors: 0,
    };
    let mut poll_set: Vec<libc::pollfd> =
        buses.iter().map(|b| libc::pollfd { fd: b.endpoint.fd(), events: libc::POLLIN, revents: 0 }).collect();
    // Per endpoint: do not touch it before this time (set after an error).
    let mut resting_until: Vec<u64> = vec![0; buses.len()];
    // Writes stored configurations off this thread; only when some bus has a directory.
    let mut writer = None;
    if buses.iter().any(|b| b.store.is_some()) {
        match ConfigWriter::start() {
            Ok(w) => writer = Some(w),
            Err(e) => {
                for (entry, served) in report.endpoints.iter_mut().zip(buses.iter()) {
                    if served.store.is_some() {
                        entry.stored.first_error = Some(format!("cannot start the configuration writer: {e}"));
                    }
                }
            }
        }
    }

    while !stop.load(Ordering::Relaxed) {
        let now = monotonic_now_ns();
        let mut wake = now.saturating_add(MAX_SLEEP_NS);
        for ((((index, served), entry), pfd), rest) in buses
            .iter_mut()
            .enumerate()
            .zip(report.endpoints.iter_mut())
            .zip(poll_set.iter_mut())
            .zip(resting_until.iter_mut())
        {
            let ServedBus { bus, endpoint, store } = served;
            let resting = now < *rest;
            if !resting {
                if let Err(e) = endpoint.service(bus, now) {
                    entry.service_errors += 1;
                    note_first(entry, &e);
                    *rest = now.saturating_add(ERROR_BACKOFF_NS);
                }
            }
            // Replies keep crossing the wire whatever the client is doing; a resting endpoint
            // just does not get them (they would only fail again). Read the clock again: a
            // reply that became due while the requests were handled leaves with their `OK`s.
            let now = monotonic_now_ns();
            while let Some(frame) = bus.poll_rx(now) {
                if now < *rest {
                    entry.undelivered += 1;
                    continue;
                }
                if let Err(e) = endpoint.deliver(&frame, now) {
                    entry.deliver_errors += 1;
                    note_first(entry, &e);
                    *rest = now.saturating_add(ERROR_BACKOFF_NS);
                }
            }
            if now >= *rest {
                if let Err(e) = endpoint.flush() {
                    entry.deliver_errors += 1;
                    note_first(entry, &e);
                    *rest = now.saturating_add(ERROR_BACKOFF_NS);
                }
            }
            take_stored_configs(index, bus, store.as_ref(), writer.as_ref(), entry);
            if let Some(t) = bus.next_event_ns() {
                wake = wake.min(t.max(now));
            }
            if now < *rest {
                // ppoll skips negative descriptors: a descriptor stuck in an error state
                // would otherwise wake us at once, forever.
                pfd.fd = -1;
                wake = wake.min(*rest);
            } else {
                pfd.fd = endpoint.fd();
            }
            pfd.revents = 0;
        }
        if options.busy_poll {
            wake = now;
        }
        if wait_readable_until(&mut poll_set, wake).is_err() {
            report.poll_errors += 1;
        }
    }

    // A `conf write` answered in the last pass is stored too.
    for (index, (served, entry)) in buses.iter_mut().zip(report.endpoints.iter_mut()).enumerate() {
        take_stored_configs(index, &mut served.bus, served.store.as_ref(), writer.as_ref(), entry);
    }
    if let Some(writer) = writer {
        for (index, counts) in writer.finish() {
            if let Some(entry) = report.endpoints.get_mut(index) {
                entry.stored.written += counts.written;
                entry.stored.failed += counts.failed;
                if entry.stored.first_error.is_none() {
                    entry.stored.first_error = counts.first_error;
                }
            }
        }
    }
    for (entry, served) in report.endpoints.iter_mut().zip(buses.iter()) {
        entry.counters = served.endpoint.counters();
        entry.servos = served
            .bus
            .servos()
            .iter()
            .map(|s| ServoReport { id: s.id(), request_errors: s.request_errors(), console: s.console_stats() })
            .collect();
    }
    report
}

/// Hand every configuration a servo of `bus` was asked to store to the writer (or count it
/// as kept in memory when the bus has no store).
fn take_stored_configs(
    index: usize,
    bus: &mut SimBus,
    store: Option<&ConfigStore>,
    writer: Option<&ConfigWriter>,
    entry: &mut EndpointReport,
) {
    for (slot, servo) in bus.servos_mut().iter_mut().enumerate() {
        let Some(text) = servo.take_config_to_store() else { continue };
        let (Some(store), Some(writer)) = (store, writer) else {
            if store.is_some() {
                // The writer could not start (already noted): this one is lost too.
                entry.stored.failed += 1;
            } else {
                entry.kept_in_memory += 1;
            }
            continue;
        };
        let Some(name) = store.file_name(slot) else {
            entry.stored.failed += 1;
            entry.stored.first_error.get_or_insert_with(|| format!("servo {} has no configuration slot", servo.id()));
            continue;
        };
        if let Err(e) = writer.submit(index, store.dir(), name, text) {
            entry.stored.failed += 1;
            entry.stored.first_error.get_or_insert(e.to_string());
        }
    }
}

fn note_first(entry: &mut EndpointReport, e: &super::EndpointError) {
    if entry.first_error.is_none() {
        entry.first_error = Some(e.to_string());
    }
}

/// `ppoll` until one descriptor is ready or `CLOCK_MONOTONIC` reaches `wake_ns`. A signal
/// interrupting the wait is not an error: the loop simply goes round again.
fn wait_readable_until(poll_set: &mut [libc::pollfd], wake_ns: u64) -> std::io::Result<()> {
    let wait_ns = wake_ns.saturating_sub(monotonic_now_ns()).min(MAX_SLEEP_NS);
    let timeout = libc::timespec {
        // Both fit: wait_ns is at most MAX_SLEEP_NS.
        tv_sec: (wait_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (wait_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `poll_set` is a valid, writable array of `poll_set.len()` pollfd structs for the
    // whole call, `timeout` is a valid timespec, and a null sigmask leaves the mask unchanged.
    let rc = unsafe { libc::ppoll(poll_set.as_mut_ptr(), poll_set.len() as libc::nfds_t, &timeout, std::ptr::null()) };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// [`serve`] running on a background thread; stop it to get the report (and the buses) back.
///
/// Dropping the handle stops the thread too, so a failing test never leaves it running.
#[derive(Debug)]
pub struct ServeHandle {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<(ServeReport, Vec<ServedBus>)>>,
}

impl ServeHandle {
    /// Start serving `buses` on a new thread named `rtloop-serve`.
    pub fn start(mut buses: Vec<ServedBus>) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("rtloop-serve".into()).spawn(move || {
            let report = serve(&mut buses, &flag);
            (report, buses)
        })?;
        Ok(ServeHandle { stop, thread: Some(thread) })
    }

    /// Stop serving and return the report.
    pub fn stop(self) -> ServeReport {
        self.stop_and_take().0
    }

    /// Stop serving and return the report and the buses (to inspect their servos and wire
    /// statistics). The endpoints are still open until the buses are dropped.
    pub fn stop_and_take(mut self) -> (ServeReport, Vec<ServedBus>) {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            // The server panicked: pass the panic on rather than invent a report.
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => (ServeReport::default(), Vec::new()),
        }
    }
}

impl Drop for ServeHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            // Already unwinding or being discarded: the report is not wanted.
            let _ = thread.join();
        }
    }
}
