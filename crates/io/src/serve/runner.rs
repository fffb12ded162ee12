//! The real-time loop behind `rtloop sim`: every served bus and its endpoint on one thread.
//!
//! What it is for: [`serve`] reads the clients' frames onto the simulated buses and hands
//! each reply to its client when the bus says its last bit has crossed the wire, sleeping
//! in `ppoll` until either a client writes or the next simulated wire event is due (capped at
//! [`MAX_SLEEP_NS`] so that a stop request is noticed). [`ServeHandle`] runs it on a
//! background thread, for tests and for callers that do other things meanwhile.
//!
//! What it must never do: print (errors are counted and returned in the [`ServeReport`]);
//! let one endpoint's errors stop the others or spin the CPU (a failing endpoint is rested
//! for [`ERROR_BACKOFF_NS`] before it is tried again); or allocate per iteration (the
//! poll set is reserved before the loop; only the first error message of each endpoint is
//! kept as text).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use sim::SimBus;

use super::{Endpoint, EndpointCounters};
use crate::clock::monotonic_now_ns;

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

    while !stop.load(Ordering::Relaxed) {
        let now = monotonic_now_ns();
        let mut wake = now.saturating_add(MAX_SLEEP_NS);
        for (((served, entry), pfd), rest) in
            buses.iter_mut().zip(report.endpoints.iter_mut()).zip(poll_set.iter_mut()).zip(resting_until.iter_mut())
        {
            let ServedBus { bus, endpoint } = served;
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

    for (entry, served) in report.endpoints.iter_mut().zip(buses.iter()) {
        entry.counters = served.endpoint.counters();
    }
    report
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
