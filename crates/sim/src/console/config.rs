//! The simulated servo's configuration, under the moteus firmware's own key names.
//!
//! What it is for: `conf enumerate | get | set | write | load | default` (and the schema
//! form `conf list | schema | data`) on the diagnostic console. Every key the simulator
//! models changes its behaviour ([`Config::apply`]); the rest of a real board's keys are
//! stored and given back so tools that dump and restore a configuration round-trip it.
//! What it must never do: accept a value of the wrong type, out of range, NaN where the
//! firmware would not, or a key it does not have — each is a [`ConfError`] that says what
//! was wrong and how to fix it — or panic on any text.

use crate::servo::ServoConfig;

/// Why a `conf` request was refused. The `Display` text starts with the phrase the
/// firmware uses (`unknown group`, `error reading`, `error setting`), which moteus_tool
/// looks for, and goes on to say what was wrong.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfError {
    /// No configuration group (first key component) of that name.
    UnknownGroup(String),
    /// The group exists, the key does not (`conf get`).
    UnknownKey(String),
    /// The key does not exist or the value was refused (`conf set`).
    Set {
        /// The key as given.
        key: String,
        /// What was wrong, e.g. "'abc' is not a number".
        why: String,
    },
}

impl core::fmt::Display for ConfError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfError::UnknownGroup(g) => write!(f, "unknown group '{g}'"),
            ConfError::UnknownKey(k) => write!(f, "error reading '{k}': no such key"),
            ConfError::Set { key, why } => write!(f, "error setting '{key}': {why}"),
        }
    }
}

/// The configuration of one simulated servo.
#[derive(Debug, Clone)]
pub struct Config {}

impl Config {
    /// The configuration of a servo built with `cfg`: the keys the simulator models take
    /// their values from it, every other key its firmware default.
    pub fn new(cfg: &ServoConfig) -> Config {
        let _ = cfg;
        todo!()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        todo!()
    }

    /// No keys (never, in practice).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Key `i` (in enumeration order) and its value as `conf get` prints it.
    pub fn item(&self, i: usize) -> Option<(&str, String)> {
        let _ = i;
        todo!()
    }

    /// The index range `conf enumerate PREFIX` lists: every key equal to `prefix` or under
    /// it at a dot boundary (`servo` → `servo.*`, not `servopos.*`); the empty prefix is
    /// everything. `Err(UnknownGroup)` when nothing matches.
    pub fn range(&self, prefix: &str) -> Result<core::ops::Range<usize>, ConfError> {
        let _ = prefix;
        todo!()
    }

    /// The value of `key` as `conf get` prints it.
    pub fn get(&self, key: &str) -> Result<String, ConfError> {
        let _ = key;
        todo!()
    }

    /// The value of a numeric key (bools as 0/1). None for a key that does not exist.
    pub fn number(&self, key: &str) -> Option<f64> {
        let _ = key;
        todo!()
    }

    /// Set `key` from its text form; type and range checked.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfError> {
        let _ = (key, value);
        todo!()
    }

    /// Write the keys the simulator models into `cfg` (see the table in the module docs).
    pub fn apply(&self, cfg: &mut ServoConfig) {
        let _ = cfg;
        todo!()
    }

    /// The persisted form: one `key value` line per key, as `conf enumerate` prints them.
    pub fn to_text(&self) -> String {
        todo!()
    }

    /// Load a persisted form: every good line is set; the bad ones are returned with their
    /// 1-based line number and what was wrong.
    pub fn load_text(&mut self, text: &str) -> Vec<(usize, ConfError)> {
        let _ = text;
        todo!()
    }

    /// The configuration groups (first key components), in enumeration order, for
    /// `conf list`.
    pub fn groups(&self) -> Vec<&str> {
        todo!()
    }

    /// The mjlib binary schema of group `group` (an object of nested objects following the
    /// dotted keys), for `conf schema`.
    pub fn group_schema(&self, group: &str) -> Result<Vec<u8>, ConfError> {
        let _ = group;
        todo!()
    }

    /// The data of group `group` matching [`Config::group_schema`], for `conf data`.
    pub fn group_data(&self, group: &str) -> Result<Vec<u8>, ConfError> {
        let _ = group;
        todo!()
    }
}
