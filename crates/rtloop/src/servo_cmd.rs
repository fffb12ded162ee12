//! `rtloop servo`: a moteus_tool-like one-shot — send one command (with a query) to one
//! servo over any transport and print the decoded state; `--run` repeats it as fast as the
//! transport allows and prints the achieved rate once a second.
//!
//! Must never: report a state that did not come back. A missing reply is an error that
//! says which servo, which bus and what to check.

use crate::robot_spec::{BusSpec, RobotSpec};
use io::{BusUri, Clock, MonotonicClock, RobotConfig, ServoCommand, ServoReply};
use proto::host::{PositionResolution, QueryFormat, ServoState};
use proto::register::Mode;
use serde_json::{json, Value};

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

fn state_line(id: u8, uri: &BusUri, s: &ServoState) -> String {
    let v = state_json(id, s);
    let mut line = format!("servo {id} @ {uri}:");
    for key in [
        "mode",
        "mode_name",
        "position",
        "velocity",
        "torque",
        "q_current",
        "d_current",
        "voltage",
        "temperature",
        "motor_temperature",
        "fault",
    ] {
        match &v[key] {
            Value::Null => {}
            Value::Number(n) => line += &format!(" {key}={}", n.as_f64().map_or(n.to_string(), |x| format!("{x}"))),
            Value::String(t) => line += &format!(" ({t})"),
            other => line += &format!(" {key}={other}"),
        }
    }
    line
}

/// Run it; returns the text to print.
pub fn run(req: &ServoRequest) -> Result<String, String> {
    if !(req.timeout_ms.is_finite() && req.timeout_ms > 0.0) {
        return Err(format!("--timeout-ms {} must be a positive number of milliseconds", req.timeout_ms));
    }
    let spec = RobotSpec { buses: vec![BusSpec { bus: 1, uri: req.uri.clone(), servos: vec![req.id] }] };
    let mut config = RobotConfig {
        query: QueryFormat::comprehensive(),
        // The moteus Python package's default: every command register as a float.
        position_resolution: PositionResolution::default(),
        ..Default::default()
    };
    let timeout_ns = (req.timeout_ms * 1e6) as u64;
    config.cycle.timeout_ns = timeout_ns;
    config.cycle.rx_baseline_wait_ns = timeout_ns;
    config.cycle.busy_poll = req.busy_poll;
    let clock = MonotonicClock::default();
    let open = io::open::OpenOptions { fdcanusb_crc: req.crc, ..Default::default() };
    let mut robot = spec.build(clock, config, open)?;
    let commands = [req.command];
    let mut replies = [ServoReply::default()];
    let mut imu = Default::default();
    let no_reply = || {
        format!(
            "no reply from servo {} on {} within {} ms: is it powered, on this bus, and is its id {}?",
            req.id, req.uri, req.timeout_ms, req.id
        )
    };
    let bus_error = |r: &io::CycleReport| r.stats.bus_errors[0].map(|e| format!("bus {}: {e}", req.uri));

    if !req.run {
        let report = robot.cycle(&commands, &mut replies, &mut imu);
        if let Some(e) = bus_error(&report) {
            return Err(e);
        }
        if !replies[0].fresh {
            return Err(no_reply());
        }
        return Ok(if req.json {
            state_json(req.id, &replies[0].state).to_string()
        } else {
            state_line(req.id, &req.uri, &replies[0].state)
        });
    }

    crate::signals::install();
    let start = clock.now_ns();
    let end = req.duration_s.map(|d| start + (d.max(0.0) * 1e9) as u64);
    let (mut transactions, mut missing, mut errors) = (0u64, 0u64, 0u64);
    let mut bus_down = false;
    let (mut window_start, mut window_count) = (start, 0u64);
    let mut out = String::new();
    loop {
        let now = clock.now_ns();
        if crate::signals::stop_requested() || end.is_some_and(|e| now >= e) {
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
        }
        // Say so once when the bus drops and once when it comes back, not every cycle.
        if failed != bus_down {
            bus_down = failed;
            match report.stats.bus_errors[0] {
                Some(e) if failed => eprintln!("rtloop servo: bus {}: {e}; retrying", req.uri),
                _ => eprintln!("rtloop servo: bus {}: back", req.uri),
            }
        }
        let now = clock.now_ns();
        if now - window_start >= 1_000_000_000 {
            let rate = window_count as f64 * 1e9 / (now - window_start) as f64;
            if !req.json {
                println!("{rate:.1} Hz  ({transactions} replies, {missing} missing, {errors} bus errors)");
            }
            window_start = now;
            window_count = 0;
        }
    }
    let elapsed = (clock.now_ns() - start) as f64 * 1e-9;
    let rate = if elapsed > 0.0 { transactions as f64 / elapsed } else { 0.0 };
    let c = robot.cycler().bus_counters(0).unwrap_or_default();
    if req.json {
        out += &json!({"transactions": transactions, "missing": missing, "bus_errors": errors, "elapsed_s": elapsed,
                       "rate_hz": rate, "disconnects": c.disconnects, "reconnects": c.reconnects,
                       "protocol_errors": c.protocol_errors, "state": state_json(req.id, &replies[0].state)})
        .to_string();
    } else {
        out += &format!(
            "{transactions} transactions in {elapsed:.2} s: {rate:.1} Hz, {missing} missing, {errors} bus errors, \
             {} disconnects, {} reconnects, {} protocol errors\n",
            c.disconnects, c.reconnects, c.protocol_errors
        );
        out += &state_line(req.id, &req.uri, &replies[0].state);
    }
    if transactions == 0 {
        return Err(no_reply());
    }
    Ok(out)
}
