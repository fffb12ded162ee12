//! `rtloop can`: raw frames, pi3hat_tool style — `--write-can BUS,HEXID,HEXDATA[,r]` (r: a
//! reply is expected), `--read-can BUS` (listen even if nothing is expected), one cycle,
//! printing `CAN bus,id,data` for every frame received; `--run` loops and prints the rate.
//!
//! Must never: send a frame it could not parse exactly; a malformed `--write-can` is one
//! message naming the field.

use crate::frame_cmd::parse_hex;
use crate::robot_spec::parse_id_list;
use io::{BusUri, Clock, CycleOptions, Cycler, MonotonicClock, RxFrame, Transport, TxFrame};
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

/// Run it; returns the text to print.
pub fn run(req: &CanRequest) -> Result<String, String> {
    if req.writes.is_empty() && req.reads.is_empty() {
        return Err("nothing to do: give --write-can BUS,HEXID,HEXDATA[,r] and/or --read-can BUS".into());
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
    let timeout_ns = (req.timeout_ms.max(0.001) * 1e6) as u64;
    let options = CycleOptions {
        timeout_ns,
        rx_baseline_wait_ns: timeout_ns,
        force_check: req.reads.iter().fold(0u32, |m, &b| m | 1 << index(b)),
        ..Default::default()
    };
    let clock = MonotonicClock::default();
    let mut cycler = Cycler::new(transports, None, clock, options).map_err(|e| e.to_string())?;
    let mut rx = vec![RxFrame::default(); 256];
    let mut imu = Default::default();
    let print_cycle = |st: &io::CycleStats, rx: &[RxFrame], out: &mut String| {
        // Frames drained before the writes arrived before this cycle's requests: not its answers.
        for r in rx[..(st.stored as usize).min(rx.len())].iter().filter(|r| !r.drained) {
            *out += &format_rx(numbers[r.bus], &r.frame);
            out.push('\n');
        }
        for (i, e) in st.bus_errors.iter().enumerate() {
            if let (Some(e), Some(n)) = (e, numbers.get(i)) {
                *out += &format!("bus {n} ({}): {e}\n", req.buses[n]);
            }
        }
    };
    let mut out = String::new();
    if !req.run {
        let st = cycler.cycle(&tx, &mut rx, &mut imu);
        print_cycle(&st, &rx, &mut out);
        if st.timed_out {
            out += &format!("timeout: {} of {} expected replies arrived\n", st.received.min(st.expected), st.expected);
        }
        return Ok(out.trim_end().to_string());
    }
    crate::signals::install();
    let start = clock.now_ns();
    let end = req.duration_s.map(|d| start + (d.max(0.0) * 1e9) as u64);
    let (mut cycles, mut window_start, mut window_cycles, mut timeouts) = (0u64, start, 0u64, 0u64);
    let mut last = io::CycleStats::default();
    while !crate::signals::stop_requested() && end.is_none_or(|e| clock.now_ns() < e) {
        last = cycler.cycle(&tx, &mut rx, &mut imu);
        cycles += 1;
        window_cycles += 1;
        timeouts += last.timed_out as u64;
        let now = clock.now_ns();
        if now - window_start >= 1_000_000_000 {
            println!(
                "{:.1} Hz  ({cycles} cycles, {timeouts} timeouts)",
                window_cycles as f64 * 1e9 / (now - window_start) as f64
            );
            window_start = now;
            window_cycles = 0;
        }
    }
    let elapsed = (clock.now_ns() - start) as f64 * 1e-9;
    print_cycle(&last, &rx, &mut out);
    out += &format!(
        "{cycles} cycles in {elapsed:.2} s: {:.1} Hz, {timeouts} timeouts",
        if elapsed > 0.0 { cycles as f64 / elapsed } else { 0.0 }
    );
    Ok(out)
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
