//! `rtloop servo`: a moteus_tool-like one-shot — send one command (with a query) to one
//! servo over any transport and print the decoded state; `--run` repeats it as fast as the
//! transport allows and prints the achieved rate once a second.
//!
//! `--console`, `--dump-config` and `--restore-config FILE` talk to the servo's diagnostic
//! console instead; they live in [`crate::cli::diag`] and end with the same exit statuses.
//!
//! Exit status (shared with `rtloop can`, which uses [`Outcome`] and [`rtloop::devices::explain_bus_error`]
//! too): 0 when every reply the command expected arrived; [`EXIT_DEVICE_FAILED`] (1) when the
//! command ran but a reply was missing or a bus failed — the message says which servo, which
//! bus, and what the device said if it refused the command (for the console actions: the
//! servo's `ERR` text); 2 when the command line is wrong or a device cannot be opened.
//!
//! Must never: report a state that did not come back, or exit 0 when a reply was missing.
//! A missing reply is an error that says which servo, which bus and what to check.

use rtloop::devices::{device_refusal, explain_bus_error};
use rtloop::numbers::{
    check_position_registers, millis_from_user, seconds_from_user, Watchdog, MAX_DURATION_S, MAX_TIMEOUT_MS,
};
use rtloop::robot_spec::{BusSpec, RobotSpec};
use rtloop_io::{BusUri, Clock, MonotonicClock, RobotConfig, ServoCommand, ServoReply, TransportCounters};
use rtloop_proto::host::{PositionResolution, QueryFormat, ServoState};
use rtloop_proto::register::Mode;
use serde_json::{json, Value};

/// The exit status of a device command that ran but did not get everything it expected.
pub const EXIT_DEVICE_FAILED: u8 = 1;

/// With `--run`, how long to wait after a cycle whose bus failed before trying again.
pub const FAILED_BUS_RETRY: std::time::Duration = std::time::Duration::from_millis(10);

/// What a device command came to: the text for stdout, and — when something it expected did
/// not happen — the one sentence for stderr; the command then exits with
/// [`EXIT_DEVICE_FAILED`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// What to print on stdout (may be empty).
    pub stdout: String,
    /// What failed, if anything.
    pub failure: Option<String>,
}

impl Outcome {
    fn ok(stdout: String) -> Self {
        Outcome { stdout, failure: None }
    }

    fn failed(stdout: String, failure: String) -> Self {
        Outcome { stdout, failure: Some(failure) }
    }
}

/// What `rtloop servo` was asked to do.
#[derive(Debug, Clone)]
pub struct ServoRequest {
    /// Where the servo's bus is.
    pub uri: BusUri,
    /// Servo id.
    pub id: u8,
    /// The command (sent with the comprehensive query).
    pub command: ServoCommand,
    /// Repeat as fast as possible.
    pub run: bool,
    /// With `run`: stop after this many seconds (default: until Ctrl-C).
    pub duration_s: Option<f64>,
    /// Per-transaction reply timeout.
    pub timeout_ms: f64,
    /// Print JSON.
    pub json: bool,
    /// Spin while waiting for the reply instead of sleeping in ppoll.
    pub busy_poll: bool,
    /// fdcanusb: CRC suffix on our lines.
    pub crc: bool,
}

/// The state as one JSON object (NaN and absent as null).
pub fn state_json(id: u8, s: &ServoState) -> Value {
    let f = |x: f64| if x.is_finite() { json!(x) } else { Value::Null };
    json!({
        "id": id,
        "mode": s.mode,
        "mode_name": s.mode.and_then(Mode::from_u8).map(|m| format!("{m:?}")),
        "position": f(s.position),
        "velocity": f(s.velocity),
        "torque": f(s.torque),
        "q_current": f(s.q_current),
        "d_current": f(s.d_current),
        "voltage": f(s.voltage),
        "temperature": f(s.temperature),
        "motor_temperature": f(s.motor_temperature),
        "trajectory_complete": s.trajectory_complete,
        "fault": s.fault,
    })
}

/// Decimal places of each physical value in text output: as fine as the finest resolution
/// moteus sends in its integer formats (position 0.0001 rev, velocity 0.00025 rev/s, torque
/// 0.01 N·m, current 0.1 A, voltage 0.1 V, temperature 0.1 °C), so float noise such as
/// 0.30000000000000004 never shows. JSON keeps full precision.
const TEXT_PLACES: [(&str, usize); 8] = [
    ("position", 4),
    ("velocity", 4),
    ("torque", 3),
    ("q_current", 3),
    ("d_current", 3),
    ("voltage", 2),
    ("temperature", 1),
    ("motor_temperature", 1),
];

/// `x` with `places` decimals, never "-0.000".
fn fixed(x: f64, places: usize) -> String {
    let text = format!("{x:.places$}");
    match text.strip_prefix('-') {
        Some(magnitude) if magnitude.bytes().all(|b| b == b'0' || b == b'.') => magnitude.to_string(),
        _ => text,
    }
}

/// The state as one line: `servo 1 @ URI: mode=10 (Position) position=0.5000 …`. Absent
/// values (NaN) are left out.
pub fn state_line(id: u8, uri: &BusUri, s: &ServoState) -> String {
    let mut line = format!("servo {id} @ {uri}:");
    if let Some(mode) = s.mode {
        line += &format!(" mode={mode}");
        if let Some(name) = Mode::from_u8(mode) {
            line += &format!(" ({name:?})");
        }
    }
    let values =
        [s.position, s.velocity, s.torque, s.q_current, s.d_current, s.voltage, s.temperature, s.motor_temperature];
    for ((key, places), value) in TEXT_PLACES.iter().zip(values) {
        if value.is_finite() {
            line += &format!(" {key}={}", fixed(value, *places));
        }
    }
    if let Some(fault) = s.fault {
        line += &format!(" fault={fault}");
    }
    line
}

/// Run it. `Err` is a mistake in the request or a device that cannot be opened (exit 2);
/// an [`Outcome`] with a failure is a command that ran without getting its replies (exit 1).
pub fn run(req: &ServoRequest) -> Result<Outcome, String> {
    let timeout = millis_from_user("--timeout-ms", req.timeout_ms, MAX_TIMEOUT_MS).map_err(|e| e.to_string())?;
    let duration = match (req.run, req.duration_s) {
        (false, Some(_)) => {
            return Err("--duration applies only with --run; a single command is one transaction".into());
        }
        (true, Some(d)) => Some(seconds_from_user("--duration", d, MAX_DURATION_S).map_err(|e| e.to_string())?),
        _ => None,
    };
    if let ServoCommand::Position(cmd) = &req.command {
        check_position_registers(cmd, Watchdog::AlwaysOn).map_err(|e| e.to_string())?;
    }
    let spec = RobotSpec { buses: vec![BusSpec { bus: 1, uri: req.uri.clone(), servos: vec![req.id] }] };
    let mut config = RobotConfig {
        query: QueryFormat::comprehensive(),
        // The moteus Python package's default: every command register as a float.
        position_resolution: PositionResolution::default(),
        ..Default::default()
    };
    // At most a minute: fits u64 nanoseconds many times over.
    let timeout_ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    config.cycle.timeout_ns = timeout_ns;
    config.cycle.rx_baseline_wait_ns = timeout_ns;
    config.cycle.busy_poll = req.busy_poll;
    let clock = MonotonicClock::default();
    let open = rtloop_io::open::OpenOptions { fdcanusb_crc: req.crc, ..Default::default() };
    let (mut robot, _sim) = spec.build(clock, config, open, Default::default()).map_err(|e| e.to_string())?;
    let commands = [req.command];
    let mut replies = [ServoReply::default()];
    let mut imu = Default::default();
    let counters = |robot: &rtloop_io::Robot<MonotonicClock>| robot.cycler().bus_counters(0).unwrap_or_default();
    let no_reply = |before: &TransportCounters, now: &TransportCounters| match device_refusal(&req.uri, before, now) {
        Some(refusal) => format!("no reply from servo {}: {refusal}", req.id),
        None => format!(
            "no reply from servo {} on {} within {} ms: is it powered, on this bus, and is its id {}?",
            req.id, req.uri, req.timeout_ms, req.id
        ),
    };

    if !req.run {
        let before = counters(&robot);
        let report = robot.cycle(&commands, &mut replies, &mut imu);
        if let Some(e) = report.stats.bus_errors[0] {
            return Ok(Outcome::failed(String::new(), explain_bus_error(&req.uri, e)));
        }
        if !replies[0].fresh {
            return Ok(Outcome::failed(String::new(), no_reply(&before, &counters(&robot))));
        }
        return Ok(Outcome::ok(if req.json {
            state_json(req.id, &replies[0].state).to_string()
        } else {
            state_line(req.id, &req.uri, &replies[0].state)
        }));
    }

    rtloop::signals::install();
    let before = counters(&robot);
    let start = clock.now_ns();
    let end = duration.map(|d| start.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)));
    let (mut transactions, mut missing, mut errors) = (0u64, 0u64, 0u64);
    let mut bus_down = false;
    let mut first_bus_error = None;
    let (mut window_start, mut window_count) = (start, 0u64);
    let mut out = String::new();
    loop {
        let now = clock.now_ns();
        if rtloop::signals::stop_requested() || end.is_some_and(|e| now >= e) {
            break;
        }
        let report = robot.cycle(&commands, &mut replies, &mut imu);
        if replies[0].fresh {
            transactions += 1;
            window_count += 1;
        } else {
            missing += 1;
        }
        let failed = report.stats.failed_buses != 0;
        if failed {
            errors += 1;
            first_bus_error = first_bus_error.or(report.stats.bus_errors[0]);
            // A failed bus fails the next cycle at once too: retry at a human pace instead
            // of spinning a core.
            std::thread::sleep(FAILED_BUS_RETRY);
        }
        // Say so once when the bus drops and once when it comes back, not every cycle.
        if failed != bus_down {
            bus_down = failed;
            match report.stats.bus_errors[0] {
                Some(e) if failed => {
                    crate::cli::console::note(format!("rtloop servo: {}; retrying", explain_bus_error(&req.uri, e)))
                }
                _ => crate::cli::console::note(format!("rtloop servo: bus {}: back", req.uri)),
            }
        }
        let now = clock.now_ns();
        if now - window_start >= 1_000_000_000 {
            let rate = window_count as f64 * 1e9 / (now - window_start) as f64;
            if !req.json {
                // Progress only: a reader that went away must not stop the loop.
                let _ = crate::cli::console::line(format!(
                    "{rate:.1} Hz  ({transactions} replies, {missing} missing, {errors} bus errors)"
                ));
            }
            window_start = now;
            window_count = 0;
        }
    }
    let elapsed = (clock.now_ns() - start) as f64 * 1e-9;
    let rate = if elapsed > 0.0 { transactions as f64 / elapsed } else { 0.0 };
    let c = counters(&robot);
    // The last state that came back; none at all is not a state to show.
    let state = (transactions > 0).then_some(&replies[0].state);
    if req.json {
        out += &json!({"transactions": transactions, "missing": missing, "bus_errors": errors, "elapsed_s": elapsed,
                       "rate_hz": rate, "disconnects": c.disconnects, "reconnects": c.reconnects,
                       "protocol_errors": c.protocol_errors, "device_errors": c.device_errors,
                       "state": state.map(|s| state_json(req.id, s))})
        .to_string();
    } else {
        out += &format!(
            "{transactions} transactions in {elapsed:.2} s: {rate:.1} Hz, {missing} missing, {errors} bus errors, \
             {} disconnects, {} reconnects, {} protocol errors",
            c.disconnects, c.reconnects, c.protocol_errors
        );
        if let Some(s) = state {
            out += "\n";
            out += &state_line(req.id, &req.uri, s);
        }
    }
    if transactions == 0 {
        let failure = match first_bus_error {
            Some(e) => explain_bus_error(&req.uri, e),
            None => no_reply(&before, &c),
        };
        return Ok(Outcome::failed(out, failure));
    }
    if missing > 0 || errors > 0 {
        let mut failure = format!(
            "{missing} of {} replies from servo {} were missing and {errors} transactions had a bus error",
            transactions + missing,
            req.id
        );
        if let Some(refusal) = device_refusal(&req.uri, &before, &c) {
            failure += &format!(" ({refusal})");
        }
        return Ok(Outcome::failed(out, failure));
    }
    Ok(Outcome::ok(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtloop_io::TransportError;

    #[test]
    fn text_output_uses_a_fixed_precision_per_unit() {
        let mut s = ServoState { mode: Some(10), fault: Some(0), ..ServoState::default() };
        s.position = 0.5;
        s.velocity = -0.0;
        s.torque = 0.1 + 0.2;
        s.q_current = 0.1 + 0.2;
        s.d_current = -0.00001;
        s.voltage = 24.0;
        s.temperature = 25.04999;
        s.motor_temperature = f64::NAN;
        let line = state_line(3, &BusUri::Sim, &s);
        assert_eq!(
            line,
            "servo 3 @ sim: mode=10 (Position) position=0.5000 velocity=0.0000 torque=0.300 q_current=0.300 \
             d_current=0.000 voltage=24.00 temperature=25.0 fault=0"
        );
    }

    #[test]
    fn bus_errors_say_what_to_do() {
        let udp = rtloop_io::uri::parse("udp:127.0.0.1:1").unwrap();
        let e = explain_bus_error(&udp, TransportError::Disconnected);
        assert!(e.starts_with("nothing is listening at udp:127.0.0.1:1"), "{e}");
        assert!(e.contains("rtloop sim --udp 127.0.0.1:1"), "{e}");
        let v6 = rtloop_io::uri::parse("udp:[::1]:9000").unwrap();
        assert!(explain_bus_error(&v6, TransportError::Disconnected).contains("--udp [::1]:9000"));
        let pty = rtloop_io::uri::parse("fdcanusb:/tmp/x").unwrap();
        assert!(explain_bus_error(&pty, TransportError::Disconnected).contains("unplugged"));
    }

    #[test]
    fn a_refusal_quotes_the_device() {
        let before = TransportCounters::default();
        let now = TransportCounters {
            device_errors: 1,
            last_device_error: rtloop_io::DeviceMessage::new(b"unknown command"),
            ..TransportCounters::default()
        };
        let uri = rtloop_io::uri::parse("fdcanusb:/tmp/x").unwrap();
        assert_eq!(device_refusal(&uri, &before, &before), None);
        let said = device_refusal(&uri, &before, &now).unwrap();
        assert!(said.contains("`ERR unknown command`"), "{said}");
    }
}
