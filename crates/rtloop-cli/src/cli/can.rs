//! `rtloop can`: raw CAN frames from the command line, mirroring the official mjbots
//! `pi3hat_tool` (`docs/pi3hat-tool.md` goes through it option by option).
//!
//! One cycle (or, with `--run`, a loop of them) over any transport:
//! * `--write-can BUS,HEXID,HEXDATA[,r]` sends a frame (r: a reply is expected);
//!   `--read-can BUS` listens on a bus even if nothing is expected; every frame received
//!   prints as `CAN BUS,HEXID,HEXDATA` (id in upper-case hex, data in lower case, as
//!   pi3hat_tool prints them);
//! * the timing options `--can-timeout-ns`, `--can-min-tx-wait-ns`,
//!   `--can-rx-baseline-wait-ns` and `--can-rx-extra-wait-ns` set the cycle's
//!   [`CycleOptions`]; `--run` loops and prints the rate, `--time-log FILE` writes one line
//!   per cycle (nanoseconds since the previous cycle ended, pi3hat_tool's "delta-t" log);
//!   `--realtime CPU` pins the thread, makes it SCHED_RR and locks memory, warning about
//!   what the system refuses.
//!
//! On a pi3hat (`--transport pi3hat…`, where every bus 1-5 used is connector JC N of the one
//! board, opened together through [`io::open::open_buses`]) also: `--read-att` (the IMU's
//! attitude, `ATT w=… x=… y=… z=…  dps=(…) a=(…)`), `--info` (each processor's versions, git
//! hash and serial number), `--can-config [BUS,OPTIONS]` (set a port's bit rates and modes
//! with pi3hat_tool's letters, print every used port's configuration read back) and
//! `--spi-speed-hz`. Asked of another transport, each is refused with one sentence.
//!
//! Exit status, as for `rtloop servo`: 0 when every expected reply (and attitude) arrived and
//! every bus worked; 1 ([`crate::cli::servo::EXIT_DEVICE_FAILED`]) when a reply or the
//! attitude was missing, a bus failed, or the time log could not keep every cycle; 2 for a
//! wrong command line or a device that cannot be opened.
//!
//! Must never: send a frame it could not parse exactly (a malformed `--write-can` is one
//! message naming the field) or one its port cannot carry (more than 8 bytes on classic CAN),
//! exit 0 when an expected reply did not come, overwrite a file or follow a symbolic link
//! with `--time-log`, or allocate, format or write a file inside the `--run` loop's cycles
//! (durations go through a ring to a writer thread).

use crate::cli::servo::Outcome;
use rtloop::devices::{device_refusal, explain_bus_error};
use rtloop::frame::{hex, parse_hex};
use rtloop::numbers::{millis_from_user, seconds_from_user, MAX_DURATION_S, MAX_TIMEOUT_MS};
use rtloop::robot_spec::parse_id_list;
use rtloop_io::open::{BusRequest, OpenOptions};
use rtloop_io::pi3hat::{ProcessorInfo, SharedPi3hat};
use rtloop_io::spi::SpiTiming;
use rtloop_io::{
    BusUri, Clock, CycleOptions, Cycler, MonotonicClock, Pi3hatCarrier, RxFrame, TransportCounters, TxFrame,
};
use rtloop_proto::frame::ArbitrationId;
use rtloop_proto::CanFdFrame;
use rtloop_sim::pi3hat::CanPortConfig;
use rtloop_sim::ImuSample;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest any `--can-*-ns` timing option may be: 10 s.
pub const MAX_CAN_WAIT_NS: f64 = 1e10;

/// The cycle timeout when neither `--timeout-ms` nor `--can-timeout-ns` is given: 20 ms.
pub const DEFAULT_TIMEOUT_NS: u64 = 20_000_000;

/// The highest nominal (arbitration-phase) bit rate `--can-config` sets: 1 Mbit/s.
pub const MAX_NOMINAL_BITRATE: i32 = 1_000_000;

/// The highest data-phase bit rate `--can-config` sets: 8 Mbit/s.
pub const MAX_DATA_BITRATE: i32 = 8_000_000;

/// The real-time priority `--realtime` asks for (pi3hat_tool's).
pub const REALTIME_PRIORITY: i32 = 10;

/// Cycle durations the `--time-log` ring holds before its writer thread must catch up
/// (about a minute at 1 kHz; the writer drains it every few milliseconds).
const TIME_LOG_RING: usize = 1 << 16;

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

/// The cycle-timing flags as the user gave them (nanoseconds, checked by [`run`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TimingFlags {
    /// `--can-timeout-ns`: hard cap on one cycle.
    pub timeout_ns: Option<f64>,
    /// `--can-min-tx-wait-ns`: the least time to listen on `--read-can` buses.
    pub min_tx_wait_ns: Option<f64>,
    /// `--can-rx-baseline-wait-ns`: how long past the wire-time estimate to wait for replies.
    pub rx_baseline_wait_ns: Option<f64>,
    /// `--can-rx-extra-wait-ns`: keep listening this long after the last expected reply.
    pub rx_extra_wait_ns: Option<f64>,
}

/// What `rtloop can` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct CanRequest {
    /// `--transport`: bus 1, or — for a pi3hat — every bus 1-5 used that `buses` does not name.
    pub transport: Option<BusUri>,
    /// `--bus N=URI`: bus number → address.
    pub buses: BTreeMap<u8, BusUri>,
    /// Frames to send each cycle.
    pub writes: Vec<WriteCan>,
    /// Buses to listen on.
    pub reads: Vec<u8>,
    /// Loop.
    pub run: bool,
    /// With `run`: stop after this long.
    pub duration_s: Option<f64>,
    /// `--timeout-ms`: hard cap on one cycle (the other way to give `timing.timeout_ns`).
    pub timeout_ms: Option<f64>,
    /// Simulated servo ids for `sim` and `pi3hat:sim` buses (default: every destination
    /// written to on that bus).
    pub sim_servos: Option<String>,
    /// `--read-att`: read the pi3hat's attitude in the cycle and print it.
    pub read_att: bool,
    /// `--info`: print each pi3hat processor's versions, git hash and serial number.
    pub info: bool,
    /// `--can-config`: `None` when not given; each value configures one port
    /// (`BUS,OPTION…`); given at all, every used pi3hat port's configuration is printed.
    pub can_config: Option<Vec<String>>,
    /// `--time-log FILE`: with `run`, one line per cycle.
    pub time_log: Option<PathBuf>,
    /// `--realtime CPU`, as typed.
    pub realtime: Option<String>,
    /// The `--can-*-ns` timing flags.
    pub timing: TimingFlags,
    /// `--spi-speed-hz`: the pi3hat's SPI clock.
    pub spi_speed_hz: Option<f64>,
}

/// `CAN 1,100,2300000400` — bus, id in upper-case hex, data in lower-case hex, as
/// pi3hat_tool prints it.
pub fn format_rx(bus: u8, f: &CanFdFrame) -> String {
    format!("CAN {bus},{:X},{}", f.id, hex(f.payload()))
}

/// `ATT w=0.999 x=0.013 y=-0.006 z=-0.029  dps=(  0.1, -0.1, -0.1) a=( 0.0, 0.0, 0.0)`: the
/// quaternion, rates (°/s) and accelerations (m/s²) at pi3hat_tool's widths and precisions
/// (its `--read-att` line before it switched to roll/pitch/yaw).
pub fn format_attitude(a: &ImuSample) -> String {
    let [w, x, y, z] = a.quaternion;
    let [rx, ry, rz] = a.rate_dps;
    let [ax, ay, az] = a.accel_mps2;
    format!(
        "ATT w={w:5.3} x={x:5.3} y={y:5.3} z={z:5.3}  dps=({rx:5.1},{ry:5.1},{rz:5.1}) a=({ax:4.1},{ay:4.1},{az:4.1})"
    )
}

/// `CAN1: <git hash> clean <serial> protocol=0x04 interface=0x01` (`AUX:  …` for processor 3,
/// which adds `imu=0x20`): pi3hat_tool's `--info` line, then the versions.
pub fn format_processor_info(i: &ProcessorInfo) -> String {
    let label = match i.processor {
        1 => "CAN1: ",
        2 => "CAN2: ",
        _ => "AUX:  ",
    };
    let mut line = format!(
        "{label}{} {} {} protocol={:#04x} interface={:#04x}",
        hex(&i.git_hash),
        if i.dirty { "dirty" } else { "clean" },
        hex(&i.serial),
        i.can_version,
        i.interface_type
    );
    if let Some(v) = i.imu_version {
        line += &format!(" imu={v:#04x}");
    }
    line
}

/// `CANCFG 1 nominal=1000000 data=5000000 fd=on brs=on retransmit=on restricted=off
/// monitor=off`: a port's configuration as read back (the bit-timing overrides follow as
/// `timing=…` when any is set, i.e. not -1).
pub fn format_can_config(bus: u8, c: &CanPortConfig) -> String {
    let on = |b: bool| if b { "on" } else { "off" };
    let mut line = format!(
        "CANCFG {bus} nominal={} data={} fd={} brs={} retransmit={} restricted={} monitor={}",
        c.nominal_bitrate,
        c.data_bitrate,
        on(c.fd),
        on(c.bitrate_switch),
        on(c.automatic_retransmission),
        on(c.restricted),
        on(c.bus_monitor)
    );
    if c.timing.iter().any(|&t| t != -1) {
        let t: Vec<String> = c.timing.iter().map(|t| t.to_string()).collect();
        line += &format!(" timing={}", t.join(","));
    }
    line
}

/// The configuration a pi3hat port starts from: classic CAN at 125 kbit/s on JC5, CAN-FD at
/// 1 / 5 Mbit/s with bit rate switching on JC1-JC4.
pub fn default_port_config(bus: u8) -> CanPortConfig {
    if bus == 5 {
        CanPortConfig::SLOW_DEFAULT
    } else {
        CanPortConfig::FD_DEFAULT
    }
}

/// Parse one `--can-config BUS,OPTION[,OPTION…]` the way pi3hat_tool reads it: `rN` nominal
/// bit rate, `RN` data bit rate, `d`/`D` CAN-FD frames off/on, `b`/`B` bit rate switch
/// off/on, `t`/`T` automatic retransmission off/on, `m`/`M` bus monitoring off/on, applied to
/// the port's default configuration.
pub fn parse_can_config(text: &str) -> Result<(u8, CanPortConfig), String> {
    let form = "BUS,OPTION[,OPTION…] with rN (nominal bit rate), RN (data bit rate), d/D (CAN-FD off/on), \
                b/B (bit rate switch off/on), t/T (retransmission off/on) or m/M (bus monitor off/on), \
                e.g. --can-config 1,r1000000,R2000000,D,B";
    let mut fields = text.split(',').map(str::trim);
    let bus_text = fields.next().unwrap_or("");
    let bus = bus_text
        .parse::<u8>()
        .ok()
        .filter(|b| (1..=5).contains(b))
        .ok_or_else(|| format!("--can-config {text}: '{bus_text}' is not a pi3hat bus (1-5): give {form}"))?;
    let mut cfg = default_port_config(bus);
    let mut options = 0;
    for opt in fields {
        options += 1;
        match opt {
            "d" => cfg.fd = false,
            "D" => cfg.fd = true,
            "b" => cfg.bitrate_switch = false,
            "B" => cfg.bitrate_switch = true,
            "t" => cfg.automatic_retransmission = false,
            "T" => cfg.automatic_retransmission = true,
            "m" => cfg.bus_monitor = false,
            "M" => cfg.bus_monitor = true,
            _ if opt.starts_with('r') || opt.starts_with('R') => {
                let (what, max) =
                    if opt.starts_with('r') { ("nominal", MAX_NOMINAL_BITRATE) } else { ("data", MAX_DATA_BITRATE) };
                let rate = opt[1..].parse::<i32>().ok().filter(|r| (1..=max).contains(r)).ok_or_else(|| {
                    format!(
                        "--can-config {text}: '{opt}' is not a {what} bit rate a pi3hat port takes: give {}N with N \
                         from 1 to {max} bit/s",
                        &opt[..1]
                    )
                })?;
                if what == "nominal" {
                    cfg.nominal_bitrate = rate;
                } else {
                    cfg.data_bitrate = rate;
                }
            }
            _ if opt.len() >= 2 && opt.starts_with(['s', 'f']) && opt[1..].starts_with(['p', 'j', '1', '2']) => {
                return Err(format!(
                    "--can-config {text}: '{opt}' is a bit-timing override, which rtloop does not set: give the bit \
                     rates with rN and RN instead"
                ))
            }
            _ => return Err(format!("--can-config {text}: '{opt}' is not a CAN option: give {form}")),
        }
    }
    if options == 0 {
        return Err(format!(
            "--can-config {text}: no option follows the bus number: give {form}, or --can-config alone to print \
             the configuration"
        ));
    }
    Ok((bus, cfg))
}

/// Nanoseconds from a `--can-*-ns` flag: finite, at least 0 (above 0 when `positive`), at
/// most [`MAX_CAN_WAIT_NS`].
pub fn ns_from_user(flag: &str, value: f64, positive: bool) -> Result<u64, String> {
    let low_ok = if positive { value > 0.0 } else { value >= 0.0 };
    if value.is_finite() && low_ok && value <= MAX_CAN_WAIT_NS {
        // In range: fits u64 with room to spare.
        let ns = value.round() as u64;
        return Ok(if positive { ns.max(1) } else { ns });
    }
    Err(format!(
        "{flag} {value} is out of range: give nanoseconds {} and at most 10000000000 (10 s)",
        if positive { "above 0" } else { "from 0" }
    ))
}

/// The SPI timing for `--spi-speed-hz`: whole hertz, as [`SpiTiming::validate`] allows.
pub fn spi_timing_from_user(hz: f64) -> Result<SpiTiming, String> {
    if !(hz.is_finite() && hz >= 0.0 && hz <= f64::from(u32::MAX) && hz.fract() == 0.0) {
        return Err(format!(
            "--spi-speed-hz {hz} is not an SPI clock the pi3hat takes: give whole hertz from 100000 to 10000000"
        ));
    }
    let timing = SpiTiming { speed_hz: hz as u32, ..SpiTiming::default() };
    timing.validate().map_err(|e| format!("--spi-speed-hz: {e}"))?;
    Ok(timing)
}

/// The CPU of `--realtime CPU`: a number naming one of this machine's online CPUs.
pub fn realtime_cpu_from_user(text: &str) -> Result<usize, String> {
    let online = rtloop_rt::setup::online_cpus().filter(|l| !l.is_empty());
    let listed = online.as_deref().map_or_else(|| "0".to_string(), rtloop_rt::setup::format_cpu_list);
    let cpu = text.trim().parse::<usize>().map_err(|_| {
        format!("--realtime {text} is not a CPU number: give one of this machine's online CPUs ({listed})")
    })?;
    let exists = match &online {
        Some(list) => list.contains(&cpu),
        None => cpu < libc::CPU_SETSIZE as usize,
    };
    if !exists {
        return Err(format!("--realtime {cpu}: this machine has no online CPU {cpu}: give one of {listed}"));
    }
    Ok(cpu)
}

/// What a request comes to once checked: everything [`run`] needs before it opens a device.
struct Plan {
    /// Bus number → address, every bus to open.
    buses: BTreeMap<u8, BusUri>,
    options: CycleOptions,
    timeout_ns: u64,
    duration: Option<std::time::Duration>,
    /// Per bus (index bus - 1): the configuration `--can-config` sets.
    port_configs: [Option<CanPortConfig>; 5],
    spi: Option<SpiTiming>,
    realtime_cpu: Option<usize>,
    /// A cycle has something to do: frames, a bus to listen on, or the attitude.
    cycles: bool,
}

fn is_pi3hat(uri: &BusUri) -> bool {
    matches!(uri, BusUri::Pi3hat { .. })
}

/// The buses to open: `--bus` as given, `--transport` as bus 1 — or, for a pi3hat, as every
/// bus from 1 to 5 used and not given with `--bus` (bus 1 when none is used).
fn resolve_buses(req: &CanRequest, used: &BTreeSet<u8>) -> Result<BTreeMap<u8, BusUri>, String> {
    let mut buses = req.buses.clone();
    if let Some(t) = &req.transport {
        if is_pi3hat(t) {
            for &n in used.iter().filter(|n| !req.buses.contains_key(n)) {
                if !(1..=5).contains(&n) {
                    return Err(format!(
                        "bus {n} cannot be on a pi3hat: its connectors are JC1-JC5, so use buses 1 to 5 (or give \
                         --bus {n}=URI for another transport)"
                    ));
                }
                buses.insert(n, t.clone());
            }
            if !buses.values().any(|u| u == t) && !buses.contains_key(&1) {
                buses.insert(1, t.clone());
            }
        } else if buses.insert(1, t.clone()).is_some() {
            return Err("bus 1 is given twice: --transport is bus 1, so drop it or the --bus 1=URI".into());
        }
    }
    for &b in used {
        if !buses.contains_key(&b) {
            return Err(format!("bus {b} is used but not given: add --bus {b}=URI (or --transport URI for bus 1)"));
        }
    }
    if buses.is_empty() {
        return Err(
            "no bus given: add --transport URI (e.g. --transport pi3hat or --transport sim) or --bus N=URI".into()
        );
    }
    Ok(buses)
}

/// Check everything a user gave, before any device is touched.
fn plan(req: &CanRequest) -> Result<Plan, String> {
    let asks_pi3hat = req.read_att || req.info || req.can_config.is_some();
    if req.writes.is_empty() && req.reads.is_empty() && !asks_pi3hat {
        return Err("nothing to do: give --write-can BUS,HEXID,HEXDATA[,r], --read-can BUS, --read-att, --info or \
                    --can-config"
            .into());
    }
    if req.reads.contains(&0) {
        return Err("--read-can 0 is not a bus number: buses are numbered from 1 to 255".into());
    }
    let cycles = !req.writes.is_empty() || !req.reads.is_empty() || req.read_att;
    let duration = match (req.run, req.duration_s) {
        (false, Some(_)) => {
            return Err("--duration applies only with --run; without it rtloop can runs one cycle".into())
        }
        (true, Some(d)) => Some(seconds_from_user("--duration", d, MAX_DURATION_S).map_err(|e| e.to_string())?),
        _ => None,
    };
    if req.run && !cycles {
        return Err("--run needs something to do each cycle: give --write-can, --read-can or --read-att".into());
    }
    if req.time_log.is_some() && !req.run {
        return Err("--time-log applies only with --run: it writes one line per cycle of the loop".into());
    }
    let timeout_ns = match (req.timeout_ms, req.timing.timeout_ns) {
        (Some(_), Some(_)) => {
            return Err("give either --timeout-ms or --can-timeout-ns, not both: they set the same cycle timeout".into())
        }
        (Some(ms), None) => {
            let t = millis_from_user("--timeout-ms", ms, MAX_TIMEOUT_MS).map_err(|e| e.to_string())?;
            // At most a minute: fits u64 nanoseconds many times over.
            u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
        }
        (None, Some(ns)) => ns_from_user("--can-timeout-ns", ns, true)?,
        (None, None) => DEFAULT_TIMEOUT_NS,
    };
    let defaults = CycleOptions::default();
    let flag = |name: &str, v: Option<f64>, default: u64| v.map_or(Ok(default), |v| ns_from_user(name, v, false));
    let min_tx_wait_ns = flag("--can-min-tx-wait-ns", req.timing.min_tx_wait_ns, defaults.min_tx_wait_ns)?;
    // Without the flag a missing reply is waited for up to the timeout, as before the flag.
    let rx_baseline_wait_ns = flag("--can-rx-baseline-wait-ns", req.timing.rx_baseline_wait_ns, timeout_ns)?;
    let rx_extra_wait_ns = flag("--can-rx-extra-wait-ns", req.timing.rx_extra_wait_ns, defaults.rx_extra_wait_ns)?;
    let spi = req.spi_speed_hz.map(spi_timing_from_user).transpose()?;
    let realtime_cpu = req.realtime.as_deref().map(realtime_cpu_from_user).transpose()?;

    let mut port_configs: [Option<CanPortConfig>; 5] = [None; 5];
    for text in req.can_config.iter().flatten() {
        let (bus, cfg) = parse_can_config(text)?;
        let slot = &mut port_configs[usize::from(bus - 1)];
        if slot.is_some() {
            return Err(format!("--can-config gives bus {bus} twice: put all of its options in one --can-config"));
        }
        *slot = Some(cfg);
    }
    let mut used: BTreeSet<u8> = req.writes.iter().map(|w| w.bus).chain(req.reads.iter().copied()).collect();
    used.extend((1..=5u8).filter(|&b| port_configs[usize::from(b - 1)].is_some()));
    let buses = resolve_buses(req, &used)?;
    if let Some((n, uri)) = buses.iter().find(|(n, u)| is_pi3hat(u) && !(1..=5).contains(*n)) {
        return Err(format!(
            "bus {n} cannot be on a pi3hat ({uri}): its connectors are JC1-JC5, so give bus numbers 1 to 5"
        ));
    }

    // What only a pi3hat has.
    if !buses.values().any(is_pi3hat) {
        let uri = buses.values().next().map(|u| u.to_string()).unwrap_or_default();
        let refusal = |what: &str| format!("{what}: give --transport pi3hat (or pi3hat:sim)");
        if req.read_att {
            return Err(refusal(&format!(
                "--read-att needs a pi3hat: the attitude comes from a pi3hat's IMU, and {uri} has no IMU"
            )));
        }
        if req.info {
            return Err(refusal(&format!(
                "--info needs a pi3hat: it reads the versions, git hash and serial number of a pi3hat's processors, \
                 and {uri} has no such processors"
            )));
        }
        if req.can_config.is_some() {
            return Err(refusal(&format!(
                "--can-config needs a pi3hat: it reads and sets the configuration of a pi3hat's CAN ports, and {uri} \
                 has none rtloop can reach"
            )));
        }
        if req.spi_speed_hz.is_some() {
            return Err(refusal(&format!(
                "--spi-speed-hz needs a pi3hat: it sets the SPI clock a Raspberry Pi talks to a pi3hat with, and \
                 {uri} has no SPI"
            )));
        }
    }
    for (i, cfg) in port_configs.iter().enumerate() {
        let bus = i as u8 + 1;
        if cfg.is_some() && !buses.get(&bus).is_some_and(is_pi3hat) {
            return Err(format!(
                "--can-config: bus {bus} is {}, not a pi3hat connector: only a pi3hat's ports have a CAN \
                 configuration rtloop sets",
                buses.get(&bus).map(ToString::to_string).unwrap_or_default()
            ));
        }
    }
    // A frame its port cannot carry is refused before anything is sent.
    for w in &req.writes {
        if !buses.get(&w.bus).is_some_and(is_pi3hat) || w.frame.len <= 8 {
            continue;
        }
        let cfg = port_configs[usize::from(w.bus - 1)].unwrap_or_else(|| default_port_config(w.bus));
        if !cfg.fd {
            let port = if w.bus == 5 && port_configs[4].is_none() {
                "JC5 is classic CAN at 125 kbit/s".to_string()
            } else {
                format!("JC{} is configured for classic CAN", w.bus)
            };
            return Err(format!(
                "--write-can {},{:x},…: {port}, which carries at most 8 data bytes, and this frame has more: send \
                 at most 8 bytes there{}",
                w.bus,
                w.frame.id,
                if w.bus == 5 { ", or use JC1-JC4" } else { ", or configure the port with D" }
            ));
        }
    }
    let numbers: Vec<u8> = buses.keys().copied().collect();
    let index = |bus: u8| numbers.iter().position(|&b| b == bus).unwrap_or(0);
    let options = CycleOptions {
        timeout_ns,
        min_tx_wait_ns,
        rx_baseline_wait_ns,
        rx_extra_wait_ns,
        force_check: req.reads.iter().fold(0u32, |m, &b| m | 1 << index(b)),
        ..defaults
    };
    Ok(Plan { buses, options, timeout_ns, duration, port_configs, spi, realtime_cpu, cycles })
}

/// Pin the thread to `cpu`, make it SCHED_RR and lock memory (pi3hat_tool's `--realtime`);
/// what the system refuses is a warning on stderr and the command goes on without it.
fn apply_realtime(cpu: usize) {
    let settings = rtloop_rt::RtSettings {
        policy: rtloop_rt::Policy::RoundRobin,
        priority: REALTIME_PRIORITY,
        cpus: vec![cpu],
        mlock: true,
        ..rtloop_rt::RtSettings::default()
    };
    match rtloop_rt::setup::apply_to_current_thread(&settings) {
        Ok(applied) => {
            for w in &applied.warnings {
                crate::cli::console::note(format!("rtloop can: warning: --realtime {}: {}", w.what, w.message));
            }
        }
        Err(e) => crate::cli::console::note(format!("rtloop can: warning: --realtime: {e}")),
    }
}

/// The `--time-log` file and the thread that writes it: the loop hands each cycle's duration
/// over a ring (no allocation, no system call), the thread formats and writes.
struct TimeLog {
    path: PathBuf,
    ring: rtrb::Producer<u64>,
    writer: std::thread::JoinHandle<std::io::Result<()>>,
    /// Durations the ring had no room for.
    lost: u64,
}

impl TimeLog {
    /// Create `path` (never an existing file, never through a symbolic link) and start its
    /// writer.
    fn create(path: &Path) -> Result<TimeLog, String> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => format!(
                "--time-log {}: something already exists at that path and rtloop never overwrites a file (nor \
                     writes through a link): give a new path, or remove it first",
                path.display()
            ),
            _ => format!("--time-log {}: cannot create it: {e}", path.display()),
        })?;
        let (ring, mut consumer) = rtrb::RingBuffer::<u64>::new(TIME_LOG_RING);
        let writer = std::thread::Builder::new()
            .name("rtloop-time-log".into())
            .spawn(move || -> std::io::Result<()> {
                let mut out = std::io::BufWriter::new(file);
                loop {
                    // Seen before draining: whatever the loop pushed before it let go is
                    // drained below, so no line is lost at the end.
                    let finished = consumer.is_abandoned();
                    let mut wrote = false;
                    while let Ok(ns) = consumer.pop() {
                        writeln!(out, "{ns}")?;
                        wrote = true;
                    }
                    if finished {
                        break;
                    }
                    if !wrote {
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                }
                out.flush()
            })
            .map_err(|e| format!("--time-log: cannot start its writer thread: {e}"))?;
        Ok(TimeLog { path: path.to_path_buf(), ring, writer, lost: 0 })
    }

    /// Hand one duration over (inside the loop: no allocation, no system call).
    fn push(&mut self, ns: u64) {
        if self.ring.push(ns).is_err() {
            self.lost += 1;
        }
    }

    /// Wait for the writer; what went wrong, if anything.
    fn finish(self, cycles: u64) -> Option<String> {
        let TimeLog { path, ring, writer, lost } = self;
        drop(ring);
        let written = match writer.join() {
            Ok(r) => r,
            Err(_) => return Some(format!("--time-log {}: its writer thread failed", path.display())),
        };
        if let Err(e) = written {
            return Some(format!("--time-log {}: writing failed: {e}", path.display()));
        }
        (lost > 0).then(|| {
            format!("--time-log {} lost {lost} of {cycles} cycles: the file was written too slowly", path.display())
        })
    }
}

/// Run it. `Err` is a mistake in the request or a bus that cannot be opened (exit 2); an
/// [`Outcome`] with a failure is a run in which an expected reply or attitude was missing, a
/// bus failed, or the time log could not keep up (exit 1).
pub fn run(req: &CanRequest) -> Result<Outcome, String> {
    let plan = plan(req)?;
    let numbers: Vec<u8> = plan.buses.keys().copied().collect();
    let explicit_sim = match &req.sim_servos {
        Some(list) => Some(parse_id_list(list).map_err(|e| format!("--sim-servos: {e}"))?),
        None => None,
    };
    let sim_ids: Vec<Vec<u8>> = numbers
        .iter()
        .map(|&n| {
            explicit_sim.clone().unwrap_or_else(|| {
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
            })
        })
        .collect();
    let requests: Vec<BusRequest<'_>> = numbers
        .iter()
        .zip(&sim_ids)
        .map(|(&number, ids)| BusRequest { number, uri: &plan.buses[&number], servo_ids: ids })
        .collect();
    let mut open_options = OpenOptions::default();
    open_options.pi3hat.attitude = req.read_att;
    // pi3hat_tool asks for a fresh attitude whenever it reads one.
    open_options.pi3hat.wait_for_attitude = req.read_att;
    open_options.pi3hat.bus_can = plan.port_configs;
    if let Some(t) = plan.spi {
        open_options.pi3hat.timing = t;
    }
    let clock = MonotonicClock::default();
    let (opened, _sim) =
        rtloop_simrobot::open_buses(&requests, clock, open_options, Default::default()).map_err(|e| e.to_string())?;
    let pi3hat_of = |bus: u8| -> Option<&SharedPi3hat> {
        let BusUri::Pi3hat { carrier } = plan.buses.get(&bus)? else { return None };
        opened.pi3hats.iter().find(|(c, _)| c == carrier).map(|(_, d)| d)
    };

    let mut out = String::new();
    if req.info {
        let several = opened.pi3hats.len() > 1;
        for (carrier, dev) in &opened.pi3hats {
            let mut hat = dev.lock().unwrap_or_else(|p| p.into_inner());
            for p in 1..=3u8 {
                match hat.processor_info(p) {
                    Ok(info) => {
                        if several {
                            out += &format!("{} ", BusUri::Pi3hat { carrier: *carrier });
                        }
                        out += &format_processor_info(&info);
                        out.push('\n');
                    }
                    Err(e) => {
                        let failure =
                            format!("{} processor {p} did not tell its identity: {e}", carrier_name(*carrier));
                        return Ok(Outcome { stdout: out.trim_end().to_string(), failure: Some(failure) });
                    }
                }
            }
        }
    }
    if req.can_config.is_some() {
        for &bus in &numbers {
            let Some(dev) = pi3hat_of(bus) else { continue };
            let read = dev.lock().unwrap_or_else(|p| p.into_inner()).can_config(bus);
            match read {
                Ok(Some(cfg)) => {
                    out += &format_can_config(bus, &cfg);
                    out.push('\n');
                }
                Ok(None) => {
                    let failure = format!("bus {bus}: the CAN configuration read back makes no sense (a bit rate that is not positive): check the pi3hat's firmware");
                    return Ok(Outcome { stdout: out.trim_end().to_string(), failure: Some(failure) });
                }
                Err(e) => {
                    let failure = format!("bus {bus}: the CAN configuration could not be read back: {e}");
                    return Ok(Outcome { stdout: out.trim_end().to_string(), failure: Some(failure) });
                }
            }
        }
    }
    if !plan.cycles {
        return Ok(Outcome { stdout: out.trim_end().to_string(), failure: None });
    }

    let index = |bus: u8| numbers.iter().position(|&b| b == bus).unwrap_or(0);
    let tx: Vec<TxFrame> = req
        .writes
        .iter()
        .map(|w| TxFrame { bus: index(w.bus), frame: w.frame, expect_reply: w.expect_reply })
        .collect();
    let imu = if req.read_att { opened.imu } else { None };
    let mut cycler = Cycler::new(opened.transports, imu, clock, plan.options).map_err(|e| e.to_string())?;
    let buses = &plan.buses;
    let counters = |cycler: &Cycler<MonotonicClock>| -> Vec<TransportCounters> {
        (0..numbers.len()).map(|i| cycler.bus_counters(i).unwrap_or_default()).collect()
    };
    // What the devices said when they refused our frames since `before`, if they did.
    let refusals = |before: &[TransportCounters], now: &[TransportCounters]| -> Option<String> {
        let said: Vec<String> = numbers
            .iter()
            .zip(before.iter().zip(now))
            .filter_map(|(n, (b, c))| device_refusal(&buses[n], b, c))
            .collect();
        (!said.is_empty()).then(|| said.join("; "))
    };
    let first_bus_error = |st: &rtloop_io::CycleStats| {
        st.bus_errors
            .iter()
            .zip(&numbers)
            .find_map(|(e, n)| e.map(|e| format!("bus {n}: {}", explain_bus_error(&buses[n], e))))
    };
    let mut rx = vec![RxFrame::default(); 256];
    let mut attitude = ImuSample::default();
    let print_frames = |st: &rtloop_io::CycleStats, rx: &[RxFrame], out: &mut String| {
        // Frames drained before the writes arrived before this cycle's requests: not its answers.
        for r in rx[..(st.stored as usize).min(rx.len())].iter().filter(|r| !r.drained) {
            *out += &format_rx(numbers[r.bus], &r.frame);
            out.push('\n');
        }
    };
    let timeout_ms = plan.timeout_ns as f64 / 1e6;
    // Created once the devices are open (a device that cannot be opened leaves no file), its
    // writer started before the real-time settings so that it keeps the ordinary ones.
    let mut time_log = req.time_log.as_deref().map(TimeLog::create).transpose()?;
    if let Some(cpu) = plan.realtime_cpu {
        apply_realtime(cpu);
    }
    if !req.run {
        let before = counters(&cycler);
        let st = cycler.cycle(&tx, &mut rx, &mut attitude);
        print_frames(&st, &rx, &mut out);
        if st.imu_present {
            out += &format_attitude(&attitude);
        }
        let out = out.trim_end().to_string();
        if let Some(e) = first_bus_error(&st) {
            return Ok(Outcome { stdout: out, failure: Some(e) });
        }
        if st.timed_out {
            let mut failure = format!(
                "timeout: {} of {} expected replies arrived within {timeout_ms} ms",
                st.answered.min(st.expected),
                st.expected,
            );
            match refusals(&before, &counters(&cycler)) {
                Some(said) => failure += &format!(": {said}"),
                None => failure += ": are the servos powered and on these buses, and are the ids right?",
            }
            return Ok(Outcome { stdout: out, failure: Some(failure) });
        }
        if req.read_att && !st.imu_present {
            let failure = "the pi3hat reported no attitude this cycle: its IMU may still be starting, try again".into();
            return Ok(Outcome { stdout: out, failure: Some(failure) });
        }
        return Ok(Outcome { stdout: out, failure: None });
    }
    if !out.is_empty() {
        // `--info` and `--can-config` come before the loop's progress lines, as they ran.
        let _ = crate::cli::console::line(out.trim_end());
        out.clear();
    }
    rtloop::signals::install();
    let before = counters(&cycler);
    let start = clock.now_ns();
    let end = plan.duration.map(|d| start.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)));
    let (mut cycles, mut window_start, mut window_cycles, mut timeouts) = (0u64, start, 0u64, 0u64);
    let (mut bus_error_cycles, mut bus_error, mut no_attitude) = (0u64, None, 0u64);
    let mut last = rtloop_io::CycleStats::default();
    let mut last_attitude: Option<ImuSample> = None;
    let mut previous_end = start;
    while !rtloop::signals::stop_requested() && end.is_none_or(|e| clock.now_ns() < e) {
        last = cycler.cycle(&tx, &mut rx, &mut attitude);
        let now = clock.now_ns();
        if let Some(log) = time_log.as_mut() {
            log.push(now - previous_end);
        }
        previous_end = now;
        cycles += 1;
        window_cycles += 1;
        timeouts += last.timed_out as u64;
        if req.read_att {
            if last.imu_present {
                last_attitude = Some(attitude);
            } else {
                no_attitude += 1;
            }
        }
        if last.failed_buses != 0 {
            bus_error_cycles += 1;
            bus_error = bus_error.or_else(|| first_bus_error(&last));
            std::thread::sleep(crate::cli::servo::FAILED_BUS_RETRY);
        }
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
    if let Some(a) = &last_attitude {
        out += &format_attitude(a);
        out.push('\n');
    }
    out += &format!(
        "{cycles} cycles in {elapsed:.2} s: {:.1} Hz, {timeouts} timeouts, {bus_error_cycles} bus errors",
        if elapsed > 0.0 { cycles as f64 / elapsed } else { 0.0 }
    );
    let mut problems = Vec::new();
    if timeouts > 0 || bus_error_cycles > 0 {
        let mut p = format!("{timeouts} of {cycles} cycles timed out and {bus_error_cycles} had a bus error");
        if let Some(e) = bus_error {
            p += &format!(" (first: {e})");
        } else if let Some(said) = refusals(&before, &counters(&cycler)) {
            p += &format!(" ({said})");
        }
        problems.push(p);
    }
    if no_attitude > 0 {
        problems.push(format!("{no_attitude} of {cycles} cycles had no attitude from the pi3hat's IMU"));
    }
    if let Some(p) = time_log.take().and_then(|log| log.finish(cycles)) {
        problems.push(p);
    }
    let failure = (!problems.is_empty()).then(|| problems.join("; "));
    Ok(Outcome { stdout: out, failure })
}

fn carrier_name(c: Pi3hatCarrier) -> String {
    BusUri::Pi3hat { carrier: c }.to_string()
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
        // pi3hat_tool prints the id with %X and the data with %02x.
        let f = CanFdFrame::new(0x1abcd, &[0xab]).unwrap();
        assert_eq!(format_rx(2, &f), "CAN 2,1ABCD,ab");
    }

    #[test]
    fn attitude_lines_have_pi3hat_tools_widths() {
        let a = ImuSample {
            quaternion: [0.9994, 0.0131, -0.0062, -0.0291],
            rate_dps: [0.1, -0.1, -0.1],
            accel_mps2: [0.0, 0.0, 0.0],
        };
        assert_eq!(
            format_attitude(&a),
            "ATT w=0.999 x=0.013 y=-0.006 z=-0.029  dps=(  0.1, -0.1, -0.1) a=( 0.0, 0.0, 0.0)"
        );
        let a = ImuSample {
            quaternion: [1.0, 0.0, 0.0, 0.0],
            rate_dps: [-123.46, 0.0, 7.0],
            accel_mps2: [-9.81, 0.0, 10.0],
        };
        assert_eq!(
            format_attitude(&a),
            "ATT w=1.000 x=0.000 y=0.000 z=0.000  dps=(-123.5,  0.0,  7.0) a=(-9.8, 0.0,10.0)"
        );
    }

    #[test]
    fn info_lines_follow_pi3hat_tool_then_the_versions() {
        let mut info = ProcessorInfo {
            processor: 3,
            can_version: 4,
            interface_type: 1,
            imu_version: Some(0x20),
            git_hash: [0xab; 20],
            dirty: false,
            serial: [0x01; 12],
        };
        assert_eq!(
            format_processor_info(&info),
            format!("AUX:  {} clean {} protocol=0x04 interface=0x01 imu=0x20", "ab".repeat(20), "01".repeat(12))
        );
        info.processor = 1;
        info.imu_version = None;
        info.dirty = true;
        assert!(format_processor_info(&info).starts_with("CAN1: abab"));
        assert!(format_processor_info(&info).contains(" dirty "));
    }

    #[test]
    fn can_config_reads_pi3hat_tool_letters() {
        let (bus, c) = parse_can_config("2,r500000,R2000000,d,b,T,M").unwrap();
        assert_eq!(bus, 2);
        assert_eq!((c.nominal_bitrate, c.data_bitrate), (500_000, 2_000_000));
        assert!(!c.fd && !c.bitrate_switch && c.automatic_retransmission && c.bus_monitor);
        let (bus, c) = parse_can_config("5,r250000").unwrap();
        assert_eq!((bus, c.nominal_bitrate, c.fd), (5, 250_000, false));
        assert_eq!(
            format_can_config(1, &CanPortConfig::FD_DEFAULT),
            "CANCFG 1 nominal=1000000 data=5000000 fd=on brs=on retransmit=on restricted=off monitor=off"
        );
        for (bad, want) in [
            ("0,D", "not a pi3hat bus"),
            ("6,D", "not a pi3hat bus"),
            ("x,D", "not a pi3hat bus"),
            ("1", "no option"),
            ("1,r0", "nominal bit rate"),
            ("1,r-5", "nominal bit rate"),
            ("1,r1000001", "nominal bit rate"),
            ("1,rnan", "nominal bit rate"),
            ("1,R8000001", "data bit rate"),
            ("1,R", "data bit rate"),
            ("1,sp4", "bit-timing override"),
            ("1,q", "not a CAN option"),
            ("1,", "not a CAN option"),
        ] {
            let e = parse_can_config(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn timing_numbers_are_range_checked() {
        assert_eq!(ns_from_user("--x", 0.0, false), Ok(0));
        assert_eq!(ns_from_user("--x", 1e10, false), Ok(10_000_000_000));
        assert_eq!(ns_from_user("--x", 0.4, true), Ok(1));
        for (v, positive) in [(0.0, true), (-1.0, false), (f64::NAN, false), (f64::INFINITY, false), (1.1e10, false)] {
            let e = ns_from_user("--x", v, positive).unwrap_err();
            assert!(e.starts_with("--x ") && e.contains("10 s"), "{v}: {e}");
        }
        assert_eq!(spi_timing_from_user(4e6).unwrap().speed_hz, 4_000_000);
        for v in [f64::NAN, -1.0, 1.5e6 + 0.5, 2e7, 5e4, 1e30] {
            assert!(spi_timing_from_user(v).unwrap_err().starts_with("--spi-speed-hz"), "{v}");
        }
    }
}
