//! The run configuration: robot, rate, motion, gains, safety policy, real-time settings and
//! simulator fault injection, as one TOML file (`rtloop run --config FILE`), with every
//! field optional and the built-in robot as the default (`rtloop run --print-config`).
//!
//! Must never: accept a value it would have to guess about. Unknown keys, out-of-range
//! numbers and malformed fault specs are errors that name the key and the valid range.

use crate::robot_spec::{BusSpec, RobotSpec};
use serde::{Deserialize, Serialize};

/// Everything `rtloop run` can be told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// Loop rate, Hz.
    pub rate_hz: f64,
    /// Seconds to run.
    pub duration_s: f64,
    /// The robot's buses (the built-in simulated quadruped by default).
    #[serde(rename = "bus")]
    pub buses: Vec<BusSpec>,
    /// The demonstration motion.
    pub motion: MotionConfig,
    /// What every position command carries.
    pub gains: GainsConfig,
    /// Graceful failure.
    pub safety: SafetyToml,
    /// Thread and loop settings.
    pub realtime: RealtimeConfig,
    /// Faults the simulator injects (simulated buses only).
    pub faults: FaultsConfig,
    /// Simulated-bus physics.
    pub sim: SimConfig,
}

/// Simulated-bus physics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Frames take their real CAN-FD wire time and servos their turnaround (true), or no
    /// time at all (false: measures the host, not the bus).
    pub wire_time: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig { wire_time: true }
    }
}

/// Stand, then sway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MotionConfig {
    /// Seconds to reach the stand pose.
    pub stand_s: f64,
    /// Sway amplitude, rev.
    pub amplitude_rev: f64,
    /// Sway frequency, Hz.
    pub frequency_hz: f64,
}

/// Per-command gains and limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GainsConfig {
    /// Scale of the servo's kp.
    pub kp_scale: f64,
    /// Scale of the servo's kd.
    pub kd_scale: f64,
    /// Torque limit, N·m.
    pub maximum_torque: f64,
    /// Watchdog timeout sent with every command (register 0x027), s; absent = the servo's
    /// default (0.1 s on moteus).
    pub watchdog_timeout_s: Option<f64>,
}

/// Safety policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SafetyToml {
    /// stop | zero-velocity | ignore.
    pub on_fault: String,
    /// Consecutive missing replies that count as a failed servo (0 = never).
    pub missing_limit: u32,
    /// Mode commanded by the last cycle on Ctrl-C / SIGTERM: stop | zero-velocity | brake.
    pub shutdown: String,
}

/// Real-time settings of the cycle thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RealtimeConfig {
    /// other | fifo | rr | deadline.
    pub policy: String,
    /// 1-99 for fifo/rr.
    pub priority: i32,
    /// CPUs to pin the cycle thread to (empty: leave).
    pub cpus: Vec<usize>,
    /// mlockall(MCL_CURRENT | MCL_FUTURE).
    pub mlock: bool,
    /// Spin for the last this-many µs before each deadline.
    pub busy_wait_us: u64,
    /// skip | catch-up.
    pub overrun: String,
    /// Turn every refused request into an error.
    pub strict: bool,
    /// Run the control law on its own thread, exchanging commands and state with the cycle
    /// thread through wait-free ring buffers.
    pub control_thread: bool,
}

/// Simulator fault injection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultsConfig {
    /// `ID@SECONDS`: the servo heats up and faults.
    pub overheat: Vec<String>,
    /// Probability that a frame is lost on the wire.
    pub drop_rate: f64,
    /// Probability that a frame is bit-flipped on the wire (the receiver's CRC drops it).
    pub corrupt_rate: f64,
    /// Extra servo turnaround, µs.
    pub reply_delay_us: u64,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            rate_hz: 1000.0,
            duration_s: 10.0,
            buses: RobotSpec::default_quadruped().buses,
            motion: MotionConfig::default(),
            gains: GainsConfig::default(),
            safety: SafetyToml::default(),
            realtime: RealtimeConfig::default(),
            faults: FaultsConfig::default(),
            sim: SimConfig::default(),
        }
    }
}

impl Default for MotionConfig {
    fn default() -> Self {
        MotionConfig { stand_s: 1.0, amplitude_rev: 0.05, frequency_hz: 0.5 }
    }
}

impl Default for GainsConfig {
    fn default() -> Self {
        GainsConfig { kp_scale: 1.0, kd_scale: 1.0, maximum_torque: 4.0, watchdog_timeout_s: None }
    }
}

impl Default for SafetyToml {
    fn default() -> Self {
        SafetyToml { on_fault: "zero-velocity".into(), missing_limit: 20, shutdown: "zero-velocity".into() }
    }
}

impl Default for RealtimeConfig {
    fn default() -> Self {
        RealtimeConfig {
            policy: "other".into(),
            priority: 0,
            cpus: Vec::new(),
            mlock: false,
            busy_wait_us: 0,
            overrun: "skip".into(),
            strict: false,
            control_thread: false,
        }
    }
}

impl Default for FaultsConfig {
    fn default() -> Self {
        FaultsConfig { overheat: Vec::new(), drop_rate: 0.0, corrupt_rate: 0.0, reply_delay_us: 0 }
    }
}

/// One `--fault ID@SECONDS`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OverheatSpec {
    /// Servo id.
    pub id: u8,
    /// Seconds after the start of the motion.
    pub at_s: f64,
}

/// Parse `ID@SECONDS`.
pub fn parse_overheat(text: &str) -> Result<OverheatSpec, String> {
    let (id, at) = text.split_once('@').ok_or_else(|| {
        format!("--fault {text}: expected ID@SECONDS, e.g. --fault 5@1 (servo 5 overheats after 1 s)")
    })?;
    let id: u8 = id
        .trim()
        .parse()
        .ok()
        .filter(|i| (1..=127).contains(i))
        .ok_or_else(|| format!("--fault {text}: '{id}' is not a servo id (1-127)"))?;
    let at_s: f64 = at
        .trim()
        .parse()
        .ok()
        .filter(|s: &f64| s.is_finite() && *s >= 0.0)
        .ok_or_else(|| format!("--fault {text}: '{at}' is not a time in seconds (0 or more)"))?;
    Ok(OverheatSpec { id, at_s })
}

impl RunConfig {
    /// Parse a TOML file's text and check it.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let c: RunConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        c.validate()?;
        Ok(c)
    }

    /// The TOML of this configuration.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot print the configuration: {e}\n"))
    }

    /// The robot part.
    pub fn robot(&self) -> RobotSpec {
        RobotSpec { buses: self.buses.clone() }
    }

    /// The parsed overheat injections.
    pub fn overheats(&self) -> Result<Vec<OverheatSpec>, String> {
        self.faults.overheat.iter().map(|s| parse_overheat(s)).collect()
    }

    /// Every value in range; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        let pos = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!("{name} = {v} must be a positive number"))
            }
        };
        pos("rate_hz", self.rate_hz)?;
        if self.rate_hz > 100_000.0 {
            return Err(format!("rate_hz = {} is above the 100000 Hz this loop supports", self.rate_hz));
        }
        pos("duration_s", self.duration_s)?;
        pos("motion.stand_s", self.motion.stand_s)?;
        pos("gains.maximum_torque", self.gains.maximum_torque)?;
        for (name, p) in
            [("faults.drop_rate", self.faults.drop_rate), ("faults.corrupt_rate", self.faults.corrupt_rate)]
        {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{name} = {p} is not a probability: give a number from 0 to 1"));
            }
        }
        self.safety.on_fault.parse::<io::safety::OnFault>().map_err(|e| format!("safety.on_fault: {e}"))?;
        parse_shutdown(&self.safety.shutdown)?;
        self.robot().validate()?;
        let overheats = self.overheats()?;
        let sim_ids: Vec<u8> =
            self.buses.iter().filter(|b| b.uri == io::BusUri::Sim).flat_map(|b| b.servos.iter().copied()).collect();
        for o in overheats {
            if !sim_ids.contains(&o.id) {
                return Err(format!("fault injection names servo {}, which is not on a simulated bus", o.id));
            }
        }
        Ok(())
    }
}

/// The command of the last cycle on shutdown.
pub fn parse_shutdown(s: &str) -> Result<io::ServoCommand, String> {
    match s {
        "stop" => Ok(io::ServoCommand::Stop),
        "zero-velocity" => Ok(io::ServoCommand::ZeroVelocity),
        "brake" => Ok(io::ServoCommand::Brake),
        other => Err(format!("safety.shutdown: '{other}' is not a safe mode: give stop, zero-velocity or brake")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_prints_and_parses_back() {
        let c = RunConfig::default();
        let text = c.to_toml();
        assert!(text.contains("rate_hz = 1000.0"), "{text}");
        assert_eq!(RunConfig::from_toml(&text).unwrap(), c);
        // Every field is optional.
        assert_eq!(RunConfig::from_toml("").unwrap(), c);
        assert_eq!(RunConfig::from_toml("rate_hz = 500.0").unwrap().rate_hz, 500.0);
    }

    #[test]
    fn mistakes_name_the_key() {
        for (text, want) in [
            ("rate_hz = 0.0", "rate_hz"),
            ("ratehz = 1.0", "unknown field"),
            ("[faults]\ndrop_rate = 1.5", "not a probability"),
            ("[safety]\non_fault = \"panic\"", "safety.on_fault"),
            ("[safety]\nshutdown = \"off\"", "safety.shutdown"),
            ("[faults]\noverheat = [\"5\"]", "ID@SECONDS"),
            ("[faults]\noverheat = [\"99@1\"]", "not on a simulated bus"),
        ] {
            let e = RunConfig::from_toml(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        assert_eq!(parse_overheat("5@1.5").unwrap(), OverheatSpec { id: 5, at_s: 1.5 });
        assert!(parse_overheat("0@1").is_err());
        assert!(parse_overheat("5@-1").is_err());
    }
}
