//! `rtloop can`: raw frames, pi3hat_tool style — `--write-can BUS,HEXID,HEXDATA[,r]` (r: a
//! reply is expected), `--read-can BUS` (listen even if nothing is expected), one cycle,
//! printing `CAN bus,id,data` for every frame received; `--run` loops and prints the rate.
//!
//! Exit status, as for `rtloop servo`: 0 when every expected reply arrived and every bus
//! worked; 1 ([`crate::cli::servo::EXIT_DEVICE_FAILED`]) when a reply was missing (a timeout)
//! or a bus failed; 2 for a wrong command line or a device that cannot be opened.
//!
//! Must never: send a frame it could not parse exactly (a malformed `--write-can` is one
//! message naming the field), or exit 0 when an expected reply did not come.

use crate::cli::frame::parse_hex;
use crate::cli::servo::{device_refusal, explain_bus_error, Outcome};
use crate::numbers::{millis_from_user, seconds_from_user, MAX_DURATION_S, MAX_TIMEOUT_MS};
use crate::robot_spec::parse_id_list;
use io::{BusUri, Clock, CycleOptions, Cycler, MonotonicClock, RxFrame, Transport, TransportCounters, TxFrame};
use proto::frame::ArbitrationId;
use proto::CanFdFrame;
use std::collections::BTreeMap;

/// One `--write-can`.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteCan {
    /// Bus number (1-based).
    pub bus: u8,
    /// The frame (padded to a CAN-FD length with 0x50 when sent).
    pub frame: CanFdFrame,
    /// Wait for a reply to this frame.
    pub expect_reply: bool,
}

/// Parse `BUS,HEXID,HEXDATA[,r]`.
pub fn parse_write_can(text: &str) -> Result<WriteCan, String> {
    let form = "--write-can BUS,HEXID,HEXDATA[,r], e.g. --write-can 1,8001,1300,r";
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    if !(3..=4).contains(&parts.len()) {
        return Err(format!("--write-can {text}: expected {form}"));
    }
    let bus: u8 = parts[0]
        .parse()
        .ok()
        .filter(|&b| b >= 1)
        .ok_or_else(|| format!("--write-can {text}: '{}' is not a bus number (1-255)", parts[0]))?;
    let id = u32::from_str_radix(parts[1].trim_start_matches("0x"), 16)
        .ok()
        .filter(|&id| id <= 0x1FFF_FFFF)
        .ok_or_else(|| format!("--write-can {text}: '{}' is not a CAN id in hex (at most 29 bits)", parts[1]))?;
    let data = if parts[2].is_empty() {
        Vec::new()
    } else {
        parse_hex(parts[2]).map_err(|e| format!("--write-can {text}: {e}"))?
    };
    let expect_reply = match parts.get(3) {
        None => false,
        Some(&"r") => true,
        Some(other) => return Err(format!("--write-can {text}: the fourth field may only be 'r', not '{other}'")),
    };
    let mut frame = CanFdFrame::new(id, &data).map_err(|e| format!("--write-can {text}: {e}"))?;
    frame.pad_to_dlc();
    Ok(WriteCan { bus, frame, expect_reply })
}

/// What `rtloop can` was asked to do.
#[derive(Debug, Clone)]
pub struct CanRequest {
    /// Bus number → address.
    pub buses: BTreeMap<u8, BusUri>,
    /// Frames to send each cycle.
    pub writes: Vec<WriteCan>,
    /// Buses to listen on.
    pub reads: Vec<u8>,
    /// Loop.
    pub run: bool,
    /// With `run`: stop after this long.
    pub duration_s: Option<f64>,
    /// Hard cap on one cycle.
    pub timeout_ms: f64,
    /// Simulated servo ids for `sim` buses (default: every destination written to).
    pub sim_servos: Option<String>,
}

/// `CAN 1,100,2300000400` — bus, id in hex, data in hex, as pi3hat_tool prints it.
pub fn format_rx(bus: u8, f: &CanFdFrame) -> String {
    let data: String = f.payload().iter().map(|b| format!("{b:02x}")).collect();
    format!("CAN {bus},{:x},{data}", f.id)
}

/// Run it. `Err` is a mistake in the request or a bus that cannot be opened (exit 2); an
/// [`Outcome`] with a failure is a run in which an expected reply was missing or a bus failed
/// (exit 1).
pub fn run(req: &CanRequest) -> Result<Outcome, String> {
    if req.writes.is_empty() && req.reads.is_empty() {
        return Err("nothing to do: give --write-can BUS,HEXID,HEXDATA[,r] and/or --read-can BUS".into());
    }
    let timeout = millis_from_user("--timeout-ms", req.timeout_ms, MAX_TIMEOUT_MS)?;
    let duration = match (req.run, req.duration_s) {
        (false, Some(_)) => {
            return Err("--duration applies only with --run; without it rtloop can runs one cycle".into())
        }
        (true, Some(d)) => Some(seconds_from_user("--duration", d, MAX_DURATION_S)?),
        _ => None,
    };
    if req.reads.contains(&0) {
        return Err("--read-can 0 is not a bus number: buses are numbered from 1 to 255".into());
    }
    let numbers: Vec<u8> = req.buses.keys().copied().collect();
    for b in req.writes.iter().map(|w| w.bus).chain(req.reads.iter().copied()) {
        if !req.buses.contains_key(&b) {
            return Err(format!("bus {b} is used but not given: add --bus {b}=URI (or --transport URI for bus 1)"));
        }
    }
    let explicit_sim = match &req.sim_servos {
        Some(list) => Some(parse_id_list(list).map_err(|e| format!("--sim-servos: {e}"))?),
        None => None,
    };
    let mut transports: Vec<Box<dyn Transport>> = Vec::new();
    for (&n, uri) in &req.buses {
        let ids: Vec<u8> = explicit_sim.clone().unwrap_or_else(|| {
            let mut ids: Vec<u8> = req
                .writes
                .iter()
                .filter(|w| w.bus == n)
                .map(|w| ArbitrationId::parse(w.frame.id).destination)
                .filter(|&d| (1..=126).contains(&d))
                .collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        });
        transports.push(io::open::open_bus(uri, &ids, Default::default()).map_err(|e| format!("bus {n}: {e}"))?);
    }
    let index = |bus: u8| numbers.iter().position(|&b| b == bus).unwrap_or(0);
    let tx: Vec<TxFrame> = req
        .writes
        .iter()
        .map(|w| TxFrame { bus: index(w.bus), frame: w.frame, expect_reply: w.expect_reply })
        .collect();
    // At most a minute: fits u64 nanoseconds many times over.
    let timeout_ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    let options = CycleOptions {
        timeout_ns,
        rx_baseline_wait_ns: timeout_ns,
        force_check: req.reads.iter().fold(0u32, |m, &b| m | 1 << index(b)),
        ..Default::default()
    };
    let clock = MonotonicClock::default();
    let mut cycler = Cycler::new(transports, None, clock, options).map_err(|e| e.to_string())?;
    let counters = |cycler: &Cycler<MonotonicClock>| -> Vec<TransportCounters> {
        (0..numbers.len()).map(|i| cycler.bus_counters(i).unwrap_or_default()).collect()
    };
    // What the devices said when they refused our frames since `before`, if they did.
    let refusals = |before: &[TransportCounters], now: &[TransportCounters]| -> Option<String> {
        let said: Vec<String> = numbers
            .iter()
            .zip(before.iter().zip(now))
            .filter_map(|(n, (b, c))| device_refusal(&req.buses[n], b, c))
            .collect();
        (!said.is_empty()).then(|| said.join("; "))
    };
    let first_bus_error = |st: &io::CycleStats| {
        st.bus_errors
            .iter()
            .zip(&numbers)
            .find_map(|(e, n)| e.map(|e| format!("bus {n}: {}", explain_bus_error(&req.buses[n], e))))
    };
    let mut rx = vec![RxFrame::default(); 256];
    let mut imu = Default::default();
    let print_frames = |st: &io::CycleStats, rx: &[RxFrame], out: &mut String| {
        // Frames drained before the writes arrived before this cycle's requests: not its answers.
        for r in rx[..(st.stored as usize).min(rx.len())].iter().filter(|r| !r.drained) {
            *out += &format_rx(numbers[r.bus], &r.frame);
            out.push('\n');
        }
    };
    let mut out = String::new();
    if !req.run {
        let before = counters(&cycler);
        let st = cycler.cycle(&tx, &mut rx, &mut imu);
        print_frames(&st, &rx, &mut out);
        let out = out.trim_end().to_string();
        if let Some(e) = first_bus_error(&st) {
            return Ok(Outcome { stdout: out, failure: Some(e) });
        }
        if st.timed_out {
            let mut failure = format!(
                "timeout: {} of {} expected replies arrived within {} ms",
                st.answered.min(st.expected),
                st.expected,
                req.timeout_ms
            );
            match refusals(&before, &counters(&cycler)) {
                Some(said) => failure += &format!(": {said}"),
                None => failure += ": are the servos powered and on these buses, and are the ids right?",
            }
            return Ok(Outcome { stdout: out, failure: Some(failure) });
        }
        return Ok(Outcome { stdout: out, failure: None });
    }
    crate::signals::install();
    let before = counters(&cycler);
    let start = clock.now_ns();
    let end = duration.map(|d| start.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)));
    let (mut cycles, mut window_start, mut window_cycles, mut timeouts) = (0u64, start, 0u64, 0u64);
    let (mut bus_error_cycles, mut bus_error) = (0u64, None);
    let mut last = io::CycleStats::default();
    while !crate::signals::stop_requested() && end.is_none_or(|e| clock.now_ns() < e) {
        last = cycler.cycle(&tx, &mut rx, &mut imu);
        cycles += 1;
        window_cycles += 1;
        timeouts += last.timed_out as u64;
        if last.failed_buses != 0 {
            bus_error_cycles += 1;
            bus_error = bus_error.or_else(|| first_bus_error(&last));
            std::thread::sleep(crate::cli::servo::FAILED_BUS_RETRY);
        }
        let now = clock.now_ns();
        if now - window_start >= 1_000_000_000 {
            // Progress only: a reader that went away must not stop the loop.
            let _ = crate::cli::console::line(format!(
                "{:.1} Hz  ({cycles} cycles, {timeouts} timeouts, {bus_error_cycles} bus errors)",
                window_cycles as f64 * 1e9 / (now - window_start) as f64
            ));
            window_start = now;
            window_cycles = 0;
        }
    }
    let elapsed = (clock.now_ns() - start) as f64 * 1e-9;
    print_frames(&last, &rx, &mut out);
    out += &format!(
        "{cycles} cycles in {elapsed:.2} s: {:.1} Hz, {timeouts} timeouts, {bus_error_cycles} bus errors",
        if elapsed > 0.0 { cycles as f64 / elapsed } else { 0.0 }
    );
    if timeouts == 0 && bus_error_cycles == 0 {
        return Ok(Outcome { stdout: out, failure: None });
    }
    let mut failure = format!("{timeouts} of {cycles} cycles timed out and {bus_error_cycles} had a bus error");
    if let Some(e) = bus_error {
        failure += &format!(" (first: {e})");
    } else if let Some(said) = refusals(&before, &counters(&cycler)) {
        failure += &format!(" ({said})");
    }
    Ok(Outcome { stdout: out, failure: Some(failure) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_can_parses_like_pi3hat_tool() {
        let w = parse_write_can("1,8001,1300,r").unwrap();
        assert_eq!((w.bus, w.frame.id, w.expect_reply), (1, 0x8001, true));
        assert_eq!(w.frame.payload(), &[0x13, 0x00]);
        let w = parse_write_can("3,1,010000").unwrap();
        assert!(!w.expect_reply);
        for (bad, want) in [
            ("1,8001", "expected"),
            ("0,8001,13", "bus number"),
            ("1,zz,13", "CAN id"),
            ("1,40000000,13", "CAN id"),
            ("1,8001,1", "odd"),
            ("1,8001,13,x", "fourth field"),
        ] {
            let e = parse_write_can(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn rx_lines_look_like_pi3hat_tool() {
        let f = CanFdFrame::new(0x100, &[0x23, 0x00, 0x00, 0x04, 0x00]).unwrap();
        assert_eq!(format_rx(1, &f), "CAN 1,100,2300000400");
    }
}
