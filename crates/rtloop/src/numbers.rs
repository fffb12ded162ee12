//! Numbers from users (flags of `rtloop sim`, `servo` and `can`): range checks that refuse
//! NaN, infinities, negatives and absurd values with one sentence naming the flag and the
//! valid range, before anything is opened or started.
//!
//! Must never: let a number through that a later conversion would overflow, saturate or turn
//! into a panic (`Duration::from_secs_f64`, `as u64` nanoseconds), or accept NaN where it would
//! silently mean "stop at once" or "never".

use std::time::Duration;

/// A number a user gave that rtloop refuses: the flag, the value, and the range it takes.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum NumberError {
    /// A duration outside (0, `max_s`] seconds, or not finite.
    #[error(
        "{flag} {value} is not a duration rtloop can use: give seconds above 0 and at most {max_s} ({}), or leave {flag} out to run until Ctrl-C",
        in_words(*.max_s)
    )]
    Seconds {
        /// The flag, e.g. `--duration`.
        flag: String,
        /// The value given.
        value: f64,
        /// The longest accepted, s.
        max_s: f64,
    },
    /// A timeout outside (0, `max_ms`] milliseconds, or not finite.
    #[error("{flag} {value} is out of range: give milliseconds above 0 and at most {max_ms}")]
    Millis {
        /// The flag, e.g. `--timeout-ms`.
        flag: String,
        /// The value given.
        value: f64,
        /// The longest accepted, ms.
        max_ms: f64,
    },
    /// NaN where NaN means nothing.
    #[error("{flag} nan is not a number: give a finite value")]
    NotANumber {
        /// The flag.
        flag: String,
    },
    /// A register value a 32-bit float register cannot carry, or negative where it must not be.
    #[error(
        "{flag} {value} is out of range: give {}{}, at most {:.1e} in size",
        if *.non_negative { "0 or more" } else { "a finite number" },
        .nan_means.as_ref().map(|m| format!(" (or nan: {m})")).unwrap_or_default(),
        f64::from(f32::MAX)
    )]
    Register {
        /// The flag, e.g. `--kp-scale`.
        flag: String,
        /// The value given.
        value: f64,
        /// Whether it must be 0 or more.
        non_negative: bool,
        /// What NaN would mean for this register, where it means something.
        nan_means: Option<String>,
    },
    /// A watchdog timeout that would leave the servo without a working watchdog.
    #[error(
        "--watchdog-timeout {timeout_s} would leave the servo without a working watchdog: give 0 (the servo's default) or 0.01 to {MAX_WATCHDOG_TIMEOUT_S} s"
    )]
    NoWatchdog {
        /// The timeout given, s.
        timeout_s: f64,
    },
}

/// The longest `--duration` any command accepts: one year. Leaving `--duration` out runs
/// until Ctrl-C, so a longer run never needs a number.
pub const MAX_DURATION_S: f64 = 365.0 * 24.0 * 3600.0;

/// The longest reply or cycle timeout: one minute. A device that takes longer is not
/// answering.
pub const MAX_TIMEOUT_MS: f64 = 60_000.0;

/// Seconds a user gave with `flag`: finite, above 0 and at most `max_s`.
pub fn seconds_from_user(flag: &str, value: f64, max_s: f64) -> Result<Duration, NumberError> {
    if value.is_finite() && value > 0.0 && value <= max_s {
        // In range, so finite and far below Duration's limit: cannot panic.
        return Ok(Duration::from_secs_f64(value));
    }
    Err(NumberError::Seconds { flag: flag.to_string(), value, max_s })
}

/// Milliseconds a user gave with `flag`: finite, above 0 and at most `max_ms`.
pub fn millis_from_user(flag: &str, value: f64, max_ms: f64) -> Result<Duration, NumberError> {
    if value.is_finite() && value > 0.0 && value <= max_ms {
        return Ok(Duration::from_secs_f64(value / 1000.0));
    }
    Err(NumberError::Millis { flag: flag.to_string(), value, max_ms })
}

/// A register value for a command: finite and within what a 32-bit float register holds
/// (a larger one would arrive as infinity), never negative when `non_negative`. NaN passes
/// where `nan_means` says what the servo makes of it (e.g. "hold the position").
pub fn register_from_user(
    flag: &str,
    value: f64,
    non_negative: bool,
    nan_means: Option<&str>,
) -> Result<f64, NumberError> {
    if value.is_nan() {
        return match nan_means {
            Some(_) => Ok(value),
            None => Err(NumberError::NotANumber { flag: flag.to_string() }),
        };
    }
    let limit = f64::from(f32::MAX);
    let lower = if non_negative { 0.0 } else { -limit };
    if value.is_finite() && value >= lower && value <= limit {
        return Ok(value);
    }
    Err(NumberError::Register { flag: flag.to_string(), value, non_negative, nan_means: nan_means.map(str::to_string) })
}

/// Longest watchdog timeout a command may ask of a servo, s: longer is no watchdog at all.
pub const MAX_WATCHDOG_TIMEOUT_S: f64 = 10.0;

/// Shortest watchdog timeout a command may carry, s. Shorter ones round to 0 at the int16
/// resolution the run sends, and moteus reads 0 as "use the configured default".
pub const MIN_WATCHDOG_TIMEOUT_S: f64 = 0.01;

/// What a command's watchdog register may say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watchdog {
    /// The servo's own default (0) or 0.01 to [`MAX_WATCHDOG_TIMEOUT_S`]: nothing that
    /// switches it off (`rtloop servo`, `rtloop run`).
    AlwaysOn,
    /// Any value the protocol carries, NaN ("none") included: `rtloop frame encode` builds
    /// bytes as the moteus clients do and sends nothing.
    AnyEncodable,
}

/// Range-check the registers of a position command (flags `--position` …): finite values a
/// float register can carry (the moteus Python client refuses larger ones too), no negative
/// gains or limits, NaN only where it means something, and a watchdog as `watchdog` says.
pub fn check_position_registers(
    cmd: &rtloop_proto::host::PositionCommand,
    watchdog: Watchdog,
) -> Result<(), NumberError> {
    let checks: [(&str, Option<f64>, bool, Option<&str>); 8] = [
        ("--position", cmd.position, false, Some("hold the current position")),
        ("--velocity", cmd.velocity, false, None),
        ("--feedforward-torque", cmd.feedforward_torque, false, None),
        ("--kp-scale", cmd.kp_scale, true, None),
        ("--kd-scale", cmd.kd_scale, true, None),
        ("--maximum-torque", cmd.maximum_torque, true, None),
        ("--velocity-limit", cmd.velocity_limit, true, None),
        ("--accel-limit", cmd.accel_limit, true, None),
    ];
    for (flag, value, non_negative, nan_means) in checks {
        if let Some(v) = value {
            register_from_user(flag, v, non_negative, nan_means)?;
        }
    }
    if let Some(t) = cmd.watchdog_timeout {
        match watchdog {
            Watchdog::AnyEncodable => {
                register_from_user("--watchdog-timeout", t, true, Some("no watchdog"))?;
            }
            Watchdog::AlwaysOn if t == 0.0 || (MIN_WATCHDOG_TIMEOUT_S..=MAX_WATCHDOG_TIMEOUT_S).contains(&t) => {}
            Watchdog::AlwaysOn => return Err(NumberError::NoWatchdog { timeout_s: t }),
        }
    }
    Ok(())
}

/// "1 year", "2 hours" …: a round limit as people say it.
fn in_words(seconds: f64) -> String {
    const UNITS: [(f64, &str); 4] = [(365.0 * 86400.0, "year"), (86400.0, "day"), (3600.0, "hour"), (60.0, "minute")];
    for (size, name) in UNITS {
        if seconds >= size && (seconds / size).fract() == 0.0 {
            let n = seconds / size;
            return format!("{n} {name}{}", if n == 1.0 { "" } else { "s" });
        }
    }
    format!("{seconds} s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_outside_the_range_are_refused_with_the_flag_and_the_range() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -1.0, 1e11, 1e20, MAX_DURATION_S * 1.001] {
            let e = seconds_from_user("--duration", bad, MAX_DURATION_S).unwrap_err().to_string();
            assert!(e.starts_with("--duration "), "{e}");
            assert!(e.contains("at most 31536000 (1 year)"), "{e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        assert_eq!(seconds_from_user("--duration", 2.5, MAX_DURATION_S), Ok(Duration::from_millis(2500)));
        assert!(seconds_from_user("--duration", MAX_DURATION_S, MAX_DURATION_S).is_ok());
    }

    #[test]
    fn timeouts_outside_the_range_are_refused() {
        for bad in [f64::NAN, f64::INFINITY, 0.0, -5.0, 60_001.0] {
            let e = millis_from_user("--timeout-ms", bad, MAX_TIMEOUT_MS).unwrap_err().to_string();
            assert!(e.contains("--timeout-ms") && e.contains("at most 60000"), "{e}");
        }
        assert_eq!(millis_from_user("--timeout-ms", 20.0, MAX_TIMEOUT_MS), Ok(Duration::from_millis(20)));
    }

    #[test]
    fn register_values_are_finite_and_fit_a_float_register() {
        assert_eq!(register_from_user("--position", -0.5, false, Some("hold")), Ok(-0.5));
        assert!(register_from_user("--position", f64::NAN, false, Some("hold")).unwrap().is_nan());
        for bad in [f64::INFINITY, f64::NEG_INFINITY, 1e39] {
            let e = register_from_user("--position", bad, false, Some("hold")).unwrap_err().to_string();
            assert!(e.contains("--position") && e.contains("nan: hold"), "{e}");
        }
        let e = register_from_user("--kp-scale", -0.1, true, None).unwrap_err();
        assert_eq!(
            e,
            NumberError::Register { flag: "--kp-scale".into(), value: -0.1, non_negative: true, nan_means: None }
        );
        assert!(e.to_string().contains("0 or more"), "{e}");
        assert!(register_from_user("--kp-scale", f64::NAN, true, None).is_err());
    }
}
