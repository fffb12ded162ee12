//! `rtloop run`'s own control law, the demonstration motion (the library's
//! [`rtloop::motion::Motion`]: stand up, then sway), and its settings: the `[motion]` table
//! of the run file. They are this program's, kept in the file beside the run's settings
//! ([`RunConfig::from_toml_with`]) and never in the library's run configuration, as a robot
//! builder's program keeps its control law's.
//!
//! Must never: accept a value it would have to guess about (what the run's own keys refuse:
//! an unknown key, NaN, infinities, a number out of its range, each one sentence that names
//! the key and the range).

use rtloop::config::{show_number, ConfigError, RunConfig, Setting};
use rtloop::motion::Motion;
use serde::{Deserialize, Serialize};

/// The run file's table of the demonstration motion.
pub const TABLE: &str = "motion";

/// `[motion]`: stand, then sway. Every key optional; the defaults are [`Motion`]'s.
///
/// | key | range |
/// |---|---|
/// | `motion.stand_s` | 0.1 … 60 s |
/// | `motion.amplitude_rev` | 0 … 0.25 rev |
/// | `motion.frequency_hz` | 0 … 5 Hz |
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

impl Default for MotionConfig {
    fn default() -> Self {
        let m = Motion::default();
        MotionConfig { stand_s: m.stand_s, amplitude_rev: m.amplitude_rev, frequency_hz: m.frequency_hz }
    }
}

impl MotionConfig {
    /// Every value in range; the message names the key and the range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let ranges = [
            ("motion.stand_s", self.stand_s, 0.1, 60.0, "0.1 to 60 s"),
            ("motion.amplitude_rev", self.amplitude_rev, 0.0, 0.25, "0 to 0.25 rev"),
            ("motion.frequency_hz", self.frequency_hz, 0.0, 5.0, "0 to 5 Hz"),
        ];
        for (key, value, lo, hi, give) in ranges {
            // False for NaN.
            if !(value >= lo && value <= hi) {
                let setting = Setting { key, flag: None, value: show_number(value) };
                return Err(ConfigError::OutOfRange { setting, give: give.into() });
            }
        }
        Ok(())
    }

    /// The motion a run drives: these settings, with the gains, torque limit and watchdog of
    /// the run's `[gains]`.
    pub fn motion(&self, run: &RunConfig) -> Motion {
        let mut motion = Motion::from_config(run);
        (motion.stand_s, motion.amplitude_rev, motion.frequency_hz) =
            (self.stand_s, self.amplitude_rev, self.frequency_hz);
        motion
    }
}

/// A run file of `rtloop run` (`--config`, `--print-config`): the run's configuration and
/// the demonstration motion's `[motion]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFile {
    /// Everything the library runs with.
    pub run: RunConfig,
    /// The demonstration motion.
    pub motion: MotionConfig,
}

impl RunFile {
    /// Parse a file's text and check it; a mistake is one sentence with its line.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let (run, motion) = RunConfig::from_toml_with::<MotionConfig>(text, TABLE)?;
        let motion = motion.unwrap_or_default();
        motion.validate()?;
        Ok(RunFile { run, motion })
    }

    /// The file's text: every key, `[motion]` between the buses and the run's settings.
    pub fn to_toml(&self) -> String {
        self.run.to_toml_with(TABLE, &self.motion)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_line(e: &str) {
        assert_eq!(e.lines().count(), 1, "one sentence: {e}");
        assert!(!e.contains("{ ") && !e.contains("Error("), "no Debug output: {e}");
    }

    #[test]
    fn the_default_prints_as_it_always_did_and_reads_back() {
        let text = RunFile::default().to_toml();
        let motion = "servos = [10, 11, 12]\n\n[motion]\nstand_s = 1.0\namplitude_rev = 0.02\nfrequency_hz = 0.5\n\n\
                      [gains]\nkp_scale = 1.0\n";
        assert!(text.contains(motion), "{text}");
        assert_eq!(RunFile::from_toml(&text).unwrap(), RunFile::default());
        assert_eq!(RunFile::from_toml("").unwrap(), RunFile::default(), "every key is optional");
        let set = RunFile::from_toml("rate_hz = 500.0\n[motion]\nstand_s = 2.0\n").unwrap();
        assert_eq!((set.run.rate_hz, set.motion.stand_s, set.motion.frequency_hz), (500.0, 2.0, 0.5));
        let motion = set.motion.motion(&set.run);
        assert_eq!((motion.stand_s, motion.watchdog_timeout), (2.0, Some(0.1)), "with the run's [gains]");
    }

    // Moved here with the table from the library's run configuration (crates/rtloop/src/config.rs).
    #[test]
    fn every_number_is_range_checked_nan_and_infinities_included() {
        for key in ["stand_s", "amplitude_rev", "frequency_hz"] {
            for bad in ["nan", "inf", "-inf", "-1e300", "1e300"] {
                let text = format!("[motion]\n{key} = {bad}\n");
                let e = RunFile::from_toml(&text).expect_err(&text).to_string();
                assert!(e.starts_with(&format!("motion.{key} = ")) && e.contains("give"), "{text:?}: {e}");
                one_line(&e);
            }
        }
    }

    #[test]
    fn an_unknown_key_is_an_error_with_its_line() {
        let e = RunFile::from_toml("[motion]\nno_such_key = 1\n").unwrap_err().to_string();
        assert!(e.contains("unknown field `no_such_key`"), "{e}");
        assert!(e.starts_with("line 2 (no_such_key = 1)"), "{e}");
        one_line(&e);
        // And the run's tables still refuse theirs.
        let e = RunFile::from_toml("[gains]\nno_such_key = 1\n").unwrap_err().to_string();
        assert!(e.contains("unknown field `no_such_key`"), "{e}");
    }
}
