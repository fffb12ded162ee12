//! The simulated servo's configuration, under the moteus firmware's own key names.
//!
//! What it is for: `conf enumerate | get | set | write | load | default` (and the schema
//! form `conf list | schema | data`) on the diagnostic console. Every key the simulator
//! models changes its behaviour ([`Config::apply`]); the rest of a real board's keys are
//! stored and given back so tools that dump and restore a configuration round-trip it.
//! What it must never do: accept a value of the wrong type, out of range, NaN where the
//! firmware would not, or a key it does not have — each is a [`ConfError`] that says what
//! was wrong and how to fix it — or panic on any text.
//!
//! # The keys
//!
//! The key names, types, order and defaults are those of moteus firmware ABI 0x010100 on a
//! moteus-r4.11 (hardware family 0), with the board defaults the firmware resolves at start
//! already resolved (aux1: onboard AS5047 on SPI; aux2: the fdcanusb serial protocol on its
//! two UART pins). Groups, in the order the firmware registers them: `uuid`, `clock`,
//! `aux1`, `aux2`, `motor_position`, `motor`, `servo`, `servopos`, `id`, `can` — 302 keys.
//! Left out, because they are large calibration tables nothing here would fill in:
//! `motor.cogging_dq_comp.*` (1024 keys), `motor_position.sources.N.compensation_table.*`
//! (256 keys each), and the gate driver's `drv8323_conf.*` (board-specific register codes).
//!
//! Values: floats are the firmware's `float` — stored rounded to f32, printed as the shortest
//! text that reads back to the same f32 (`4`, `0.1`, `nan`); any decimal or exponent text is
//! accepted, `nan` (any case) only where the table below or the firmware allows it, and
//! infinities never. Integers keep their C type's range or the documented one, written in
//! decimal (or `0x` hex, as the firmware's `strtol` takes). Bools print `0`/`1` and accept
//! `0`, `1`, `true`, `false`.
//!
//! # Keys that change the simulator's behaviour
//!
//! [`Config::new`] seeds these from the [`ServoConfig`] (bringing a value the table refuses
//! into range: clamped, or NaN where NaN is allowed, or else the firmware default) and
//! [`Config::apply`] writes them back; every other key is stored and reported only.
//!
//! | Key | `ServoConfig` field | Allowed | Effect in the simulator |
//! |-----|---------------------|---------|-------------------------|
//! | `id.id` | `id` | integer 1 to 126 | CAN id the servo answers to |
//! | `can.prefix` | `can_prefix` | integer 0 to 8191 (13 bits) | CAN id prefix it answers to |
//! | `servo.pid_position.kp` | `kp_nm_per_rev` | 0 to 100000 N·m/rev | position gain |
//! | `servo.pid_position.kd` | `kd_nms_per_rev` | 0 to 100000 N·m·s/rev | velocity gain |
//! | `servo.max_current_A` | `max_current_a` | above 0, up to 1000 A | phase current limit, caps torque |
//! | `servo.default_timeout_s` | `watchdog_default_s` | above 0, up to 3600 s, or `nan` | watchdog used when a command gives none; `nan` never times out (written back as +∞, the simulator's "never") |
//! | `servo.max_velocity` | `max_velocity_rev_s` | above 0, up to 10000 rev/s | fastest commanded velocity |
//! | `servopos.position_min` | `position_min_rev` | −100000 to 100000 rev, or `nan` | lowest commandable position; `nan` no limit |
//! | `servopos.position_max` | `position_max_rev` | −100000 to 100000 rev, or `nan` | highest commandable position; `nan` no limit |
//! | `servo.fault_temperature` | `fault_temperature_c` | 0 to 200 °C | temperature that trips fault 38 (the simulator applies it to motor and board) |
//! | `servo.default_velocity_limit` | `default_velocity_limit` | above 0, up to 10000 rev/s, or `nan` | trajectory velocity limit when a command leaves it unset; `nan` none |
//! | `servo.default_accel_limit` | `default_accel_limit` | above 0, up to 1000000 rev/s², or `nan` | trajectory acceleration limit when a command leaves it unset; `nan` none |
//! | `motor_position.output.sign` | `output_sign` | 1 or −1 | direction of the output position |
//! | `motor_position.output.offset` | `output_offset_rev` | −100000 to 100000 rev | offset of the output position |
//!
//! Why these choices: `servo.default_timeout_s` takes `nan` because the firmware documents
//! it as "never enter the timeout state", but not 0 or less, which would time out at once;
//! `servo.fault_temperature` refuses `nan` because the firmware documents no way to disable
//! its over-temperature fault (`servo.motor_fault_temperature`, which defaults to `nan`,
//! does take it); velocity and acceleration limits of 0 would freeze every trajectory.
//!
//! Other behaviour kept from the firmware: the `uuid.uuid.N` bytes are factory data (derived
//! here from the servo's id and CAN prefix at construction) — setting one is accepted and
//! changes nothing, as on a board whose OTP UUID overwrites the stored one.

use crate::rng::XorShift64;
use crate::servo::ServoConfig;
use rtloop_tlog::schema::{Field, Schema};

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
pub struct Config {
    /// Every key, in enumeration order.
    keys: Vec<Key>,
    /// The value of each key (same index). Every firmware type is exact in an f64: floats
    /// are f32 values, integers fit in 53 bits, bools are 0 or 1.
    values: Vec<f64>,
}

/// One configuration key: its full dotted name and what it may hold.
#[derive(Debug, Clone)]
struct Key {
    name: String,
    spec: Spec,
}

impl Config {
    /// The configuration of a servo built with `cfg`: the keys the simulator models take
    /// their values from it, every other key its firmware default.
    pub fn new(cfg: &ServoConfig) -> Config {
        let mut keys = Vec::with_capacity(KEY_COUNT_HINT);
        for group in GROUPS {
            expand(group, String::from(group.name()), &mut keys);
        }
        // Through the range check so float defaults are stored as the f32 the firmware holds.
        let values = keys.iter().map(|key| bring_into_range(&key.spec, key.spec.default)).collect();
        let mut config = Config { keys, values };
        for &(key, value) in BOARD_DEFAULTS {
            config.store(key, value);
        }
        for modelled in MODELLED {
            config.store(modelled.key, (modelled.read)(cfg));
        }
        for (byte, value) in factory_uuid(cfg).into_iter().enumerate() {
            config.store(&format!("uuid.uuid.{byte}"), f64::from(value));
        }
        config
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// No keys (never, in practice).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Key `i` (in enumeration order) and its value as `conf get` prints it.
    pub fn item(&self, i: usize) -> Option<(&str, String)> {
        let key = self.keys.get(i)?;
        let value = *self.values.get(i)?;
        Some((key.name.as_str(), format_value(key.spec.ctype, value)))
    }

    /// The index range `conf enumerate PREFIX` lists: every key equal to `prefix` or under
    /// it at a dot boundary (`servo` → `servo.*`, not `servopos.*`); the empty prefix is
    /// everything. `Err(UnknownGroup)` when nothing matches.
    pub fn range(&self, prefix: &str) -> Result<core::ops::Range<usize>, ConfError> {
        if prefix.is_empty() {
            return Ok(0..self.keys.len());
        }
        // The keys are a depth-first walk of a tree, so everything under one prefix is
        // contiguous: the first match and the run after it are the whole answer.
        let matches = |key: &Key| is_under(&key.name, prefix);
        let Some(start) = self.keys.iter().position(matches) else {
            return Err(ConfError::UnknownGroup(shown(prefix)));
        };
        let count = self.keys[start..].iter().take_while(|key| matches(key)).count();
        Ok(start..start + count)
    }

    /// The value of `key` as `conf get` prints it.
    pub fn get(&self, key: &str) -> Result<String, ConfError> {
        match self.index_of(key) {
            Some(i) => Ok(format_value(self.keys[i].spec.ctype, self.values[i])),
            None if self.has_group(group_of(key)) => Err(ConfError::UnknownKey(shown(key))),
            None => Err(ConfError::UnknownGroup(shown(group_of(key)))),
        }
    }

    /// The value of a numeric key (bools as 0/1). None for a key that does not exist.
    pub fn number(&self, key: &str) -> Option<f64> {
        self.index_of(key).map(|i| self.values[i])
    }

    /// Set `key` from its text form; type and range checked.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfError> {
        let Some(i) = self.index_of(key) else {
            if self.has_group(group_of(key)) {
                return Err(ConfError::Set { key: shown(key), why: String::from("no such key") });
            }
            return Err(ConfError::UnknownGroup(shown(group_of(key))));
        };
        let parsed = parse_value(&self.keys[i].spec, value).map_err(|why| ConfError::Set { key: shown(key), why })?;
        // The UUID is factory data: the firmware re-reads it from OTP after every write, so
        // a valid value is accepted and the factory one stays (a restored dump of another
        // board must not clone its identity).
        if group_of(key) != "uuid" {
            self.values[i] = parsed;
        }
        Ok(())
    }

    /// Write the keys the simulator models into `cfg` (see the table in the module docs).
    pub fn apply(&self, cfg: &mut ServoConfig) {
        for modelled in MODELLED {
            let Some(i) = self.index_of(modelled.key) else { continue };
            let value = match self.keys[i].spec.ctype {
                CType::F32 => decimal_f64(self.values[i] as f32),
                _ => self.values[i],
            };
            (modelled.write)(cfg, value);
        }
    }

    /// The persisted form: one `key value` line per key, as `conf enumerate` prints them.
    pub fn to_text(&self) -> String {
        let mut text = String::with_capacity(self.keys.len() * 40);
        for i in 0..self.keys.len() {
            if let Some((key, value)) = self.item(i) {
                text.push_str(key);
                text.push(' ');
                text.push_str(&value);
                text.push('\n');
            }
        }
        text
    }

    /// Load a persisted form: every good line is set; the bad ones are returned with their
    /// 1-based line number and what was wrong.
    pub fn load_text(&mut self, text: &str) -> Vec<(usize, ConfError)> {
        let mut refused = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line_number = index + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = match line.split_once(|c: char| c.is_ascii_whitespace()) {
                Some((key, value)) => (key, value.trim()),
                None => (line, ""),
            };
            if let Err(error) = self.set(key, value) {
                refused.push((line_number, error));
            }
        }
        refused
    }

    /// The configuration groups (first key components), in enumeration order, for
    /// `conf list`.
    pub fn groups(&self) -> Vec<&str> {
        GROUPS.iter().map(Node::name).collect()
    }

    /// The mjlib binary schema of group `group` (an object of nested objects following the
    /// dotted keys), for `conf schema`.
    pub fn group_schema(&self, group: &str) -> Result<Vec<u8>, ConfError> {
        let node = group_node(group)?;
        Ok(node_schema(node).to_binary())
    }

    /// The data of group `group` matching [`Config::group_schema`], for `conf data`.
    pub fn group_data(&self, group: &str) -> Result<Vec<u8>, ConfError> {
        group_node(group)?;
        let range = self.range(group)?;
        let mut data = Vec::with_capacity(range.len() * 4);
        // The keys were expanded from the same tree the schema is built from, in the same
        // depth-first order, so the values back to back are exactly the schema's fields.
        for i in range {
            let key = &self.keys[i];
            if encode_value(key.spec.ctype, self.values[i], &mut data).is_err() {
                // Unreachable: encoding a scalar only appends bytes. Refused the way the
                // firmware refuses a value it cannot read, naming the key.
                return Err(ConfError::UnknownKey(shown(&key.name)));
            }
        }
        Ok(data)
    }

    /// Index of `key`, if it is one.
    fn index_of(&self, key: &str) -> Option<usize> {
        self.keys.iter().position(|k| k.name == key)
    }

    /// Is `group` the first component of some key?
    fn has_group(&self, group: &str) -> bool {
        GROUPS.iter().any(|node| node.name() == group)
    }

    /// Put `raw` into `key`, brought into the key's range (construction only: the sources
    /// are the static tables and a `ServoConfig`, whose values are not checked).
    fn store(&mut self, key: &str, raw: f64) {
        if let Some(i) = self.index_of(key) {
            self.values[i] = bring_into_range(&self.keys[i].spec, raw);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Value types and their checks.

/// The C type of a firmware field: how it is stored, printed, checked and encoded.
/// C enums (`int`-sized in the firmware) are `I32`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum CType {
    Bool,
    U8,
    I8,
    U16,
    I32,
    U32,
    F32,
}

const F32_MAX: f64 = f32::MAX as f64;
const I32_MAX: i64 = i32::MAX as i64;
const U32_MAX: i64 = u32::MAX as i64;

impl CType {
    /// The whole range of the type.
    fn limits(self) -> (f64, f64) {
        match self {
            CType::Bool => (0.0, 1.0),
            CType::U8 => (0.0, f64::from(u8::MAX)),
            CType::I8 => (f64::from(i8::MIN), f64::from(i8::MAX)),
            CType::U16 => (0.0, f64::from(u16::MAX)),
            CType::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
            CType::U32 => (0.0, f64::from(u32::MAX)),
            CType::F32 => (-F32_MAX, F32_MAX),
        }
    }

    /// The mjlib schema type of one value.
    fn schema(self) -> Schema {
        match self {
            CType::Bool => Schema::Bool,
            CType::U8 => Schema::FixedUInt(1),
            CType::I8 => Schema::FixedInt(1),
            CType::U16 => Schema::FixedUInt(2),
            CType::I32 => Schema::FixedInt(4),
            CType::U32 => Schema::FixedUInt(4),
            CType::F32 => Schema::Float32,
        }
    }
}

/// Which values of its type a key takes (beyond NaN, see [`Spec::nan_allowed`]).
#[derive(Debug, Clone, Copy)]
enum Allowed {
    /// Any value of the type (any finite one, for floats).
    Any,
    /// From `min` to `max`, both included.
    Between { min: f64, max: f64 },
    /// Greater than `min`, at most `max`.
    Above { min: f64, max: f64 },
    /// Exactly one of these (the default first).
    OneOf(&'static [i64]),
}

/// What one key holds.
#[derive(Debug, Clone, Copy)]
struct Spec {
    ctype: CType,
    default: f64,
    allowed: Allowed,
    /// NaN is a meaning ("no limit", "never"), not an error. Floats only.
    nan_allowed: bool,
}

impl Spec {
    /// Is `value` (already of the type's precision) one this key takes?
    fn allows(&self, value: f64) -> bool {
        if value.is_nan() {
            return self.nan_allowed;
        }
        let (type_min, type_max) = self.ctype.limits();
        if !(type_min..=type_max).contains(&value) {
            return false;
        }
        if self.ctype != CType::F32 && value.fract() != 0.0 {
            return false;
        }
        match self.allowed {
            Allowed::Any => true,
            Allowed::Between { min, max } => (min..=max).contains(&value),
            Allowed::Above { min, max } => value > min && value <= max,
            Allowed::OneOf(values) => values.iter().any(|&v| v as f64 == value),
        }
    }

    /// The allowed values, as the refusal messages give them: "1 to 126".
    fn describe(&self) -> String {
        let values = match (self.ctype, self.allowed) {
            (CType::Bool, _) => String::from("0, 1, true or false"),
            (CType::F32, Allowed::Any) => String::from("any finite float32"),
            (_, Allowed::Any) => {
                let (min, max) = self.ctype.limits();
                format!("{} to {}", number_text(min), number_text(max))
            }
            (_, Allowed::Between { min, max }) if max >= F32_MAX => format!("{} or more", number_text(min)),
            (_, Allowed::Between { min, max }) => format!("{} to {}", number_text(min), number_text(max)),
            (_, Allowed::Above { min, max }) if max >= F32_MAX => format!("greater than {}", number_text(min)),
            (_, Allowed::Above { min, max }) => {
                format!("greater than {}, up to {}", number_text(min), number_text(max))
            }
            (_, Allowed::OneOf(values)) => {
                let listed: Vec<String> = values.iter().map(i64::to_string).collect();
                format!("one of {}", listed.join(", "))
            }
        };
        if self.nan_allowed {
            format!("{values}, or nan")
        } else {
            values
        }
    }
}

/// Text of a bound in a message: integers without a fraction, others as f64 prints them.
fn number_text(x: f64) -> String {
    format!("{x}")
}

// The table-building shorthands. Floats are f32 in the firmware, so every float default
// and bound below is one an f32 holds exactly or near enough for a range check.

const fn float(default: f64) -> Spec {
    Spec { ctype: CType::F32, default, allowed: Allowed::Any, nan_allowed: false }
}

const fn float_between(default: f64, min: f64, max: f64) -> Spec {
    Spec { ctype: CType::F32, default, allowed: Allowed::Between { min, max }, nan_allowed: false }
}

const fn float_between_or_nan(default: f64, min: f64, max: f64) -> Spec {
    Spec { ctype: CType::F32, default, allowed: Allowed::Between { min, max }, nan_allowed: true }
}

const fn float_above(default: f64, min: f64, max: f64) -> Spec {
    Spec { ctype: CType::F32, default, allowed: Allowed::Above { min, max }, nan_allowed: false }
}

const fn float_above_or_nan(default: f64, min: f64, max: f64) -> Spec {
    Spec { ctype: CType::F32, default, allowed: Allowed::Above { min, max }, nan_allowed: true }
}

/// A float that is meaningless below zero (a resistance, a rate, a time).
const fn non_negative(default: f64) -> Spec {
    float_between(default, 0.0, F32_MAX)
}

/// A non-negative float where NaN means "not set".
const fn non_negative_or_nan(default: f64) -> Spec {
    float_between_or_nan(default, 0.0, F32_MAX)
}

/// Any value of the C type.
const fn int(ctype: CType, default: i64) -> Spec {
    Spec { ctype, default: default as f64, allowed: Allowed::Any, nan_allowed: false }
}

const fn int_between(ctype: CType, default: i64, min: i64, max: i64) -> Spec {
    Spec {
        ctype,
        default: default as f64,
        allowed: Allowed::Between { min: min as f64, max: max as f64 },
        nan_allowed: false,
    }
}

const fn int_one_of(ctype: CType, values: &'static [i64]) -> Spec {
    // The default is listed first; an empty list would make every value a refusal, which
    // the table test catches.
    let default = if let Some(first) = values.first() { *first } else { 0 };
    Spec { ctype, default: default as f64, allowed: Allowed::OneOf(values), nan_allowed: false }
}

const fn boolean(default: bool) -> Spec {
    Spec { ctype: CType::Bool, default: if default { 1.0 } else { 0.0 }, allowed: Allowed::Any, nan_allowed: false }
}

// ---------------------------------------------------------------------------------------
// The key tree: the firmware's structs, field by field, in their serialisation order.

/// One node of the key tree. Arrays are the firmware's `std::array`s: their keys are the
/// element's keys under `NAME.0`, `NAME.1`, …; the element node's own name is unused.
enum Node {
    Leaf(&'static str, Spec),
    Object(&'static str, &'static [Node]),
    Array(&'static str, usize, &'static Node),
}

impl Node {
    fn name(&self) -> &'static str {
        match self {
            Node::Leaf(name, _) | Node::Object(name, _) | Node::Array(name, _, _) => name,
        }
    }
}

/// Output and commutation positions are f32 revolutions: beyond ±100000 rev an f32 no
/// longer resolves a hundredth of a turn.
const POSITION_LIMIT_REV: f64 = 100_000.0;
/// Largest position-loop gain taken; far beyond any real joint, finite so a typo is caught.
const GAIN_LIMIT: f64 = 100_000.0;

const UUID: &[Node] = &[Node::Array("uuid", 16, &Node::Leaf("", int(CType::U8, 0)))];

/// The HSI oscillator trim the firmware clamps to 0..=127.
const CLOCK: &[Node] = &[Node::Leaf("hsitrim", int_between(CType::I32, 64, 0, 127))];

const AUX_I2C_DEVICE: Node = Node::Object(
    "",
    &[
        // 0 disabled, 1 AS5048, 2 AS5600.
        Node::Leaf("type", int_between(CType::I32, 0, 0, 2)),
        // A 7-bit I2C address.
        Node::Leaf("address", int_between(CType::U8, 0x40, 0, 127)),
        Node::Leaf("poll_rate_us", int_between(CType::I32, 1000, 0, I32_MAX)),
    ],
);

const AUX_PIN: Node = Node::Object(
    "",
    &[
        // 0 NC … 18 BiSS-C, 19 board default.
        Node::Leaf("mode", int_between(CType::I32, 0, 0, 19)),
        // 0 none, 1 pull up, 2 pull down, 3 open drain.
        Node::Leaf("pull", int_between(CType::I32, 0, 0, 3)),
    ],
);

const AUX: &[Node] = &[
    Node::Object(
        "i2c",
        &[
            // The documented bus frequencies.
            Node::Leaf("i2c_hz", int_between(CType::I32, 400_000, 50_000, 400_000)),
            // 0 standard, 1 fast, 2 fast+.
            Node::Leaf("i2c_mode", int_between(CType::I32, 1, 0, 2)),
            Node::Leaf("pullup", boolean(false)),
            Node::Array("devices", 3, &AUX_I2C_DEVICE),
        ],
    ),
    Node::Object(
        "spi",
        &[
            // 0 onboard AS5047 … 9 RLS Orbis (7 is "board default", resolved at start).
            Node::Leaf("mode", int_between(CType::I32, 0, 0, 9)),
            Node::Leaf("rate_hz", int_between(CType::U32, 12_000_000, 1, U32_MAX)),
            Node::Leaf("filter_us", int(CType::U16, 64)),
            Node::Leaf("bct", int(CType::U8, 0)),
            // 0 none, 1 X, 2 Y.
            Node::Leaf("trim", int_between(CType::I32, 0, 0, 2)),
        ],
    ),
    Node::Object(
        "uart",
        &[
            // 0 disabled … 5 fdcanusb serial (6 is "board default", resolved at start).
            Node::Leaf("mode", int_between(CType::I32, 0, 0, 6)),
            Node::Leaf("baud_rate", int_between(CType::I32, 921_600, 1, I32_MAX)),
            Node::Leaf("poll_rate_us", int_between(CType::I32, 100, 0, I32_MAX)),
            Node::Leaf("cui_amt21_address", int(CType::U8, 0x54)),
        ],
    ),
    Node::Object(
        "quadrature",
        &[Node::Leaf("enabled", boolean(false)), Node::Leaf("cpr", int_between(CType::U32, 16384, 1, U32_MAX))],
    ),
    // The polarity is XORed with the three hall bits.
    Node::Object(
        "hall",
        &[Node::Leaf("enabled", boolean(false)), Node::Leaf("polarity", int_between(CType::U8, 0, 0, 7))],
    ),
    Node::Object("index", &[Node::Leaf("enabled", boolean(false)), Node::Leaf("invert", boolean(false))]),
    // The common-mode level is a 12-bit ADC reading.
    Node::Object(
        "sine_cosine",
        &[Node::Leaf("enabled", boolean(false)), Node::Leaf("common", int_between(CType::U16, 1700, 0, 4095))],
    ),
    Node::Object("pwm_input", &[Node::Leaf("enabled", boolean(false))]),
    Node::Object(
        "bissc",
        &[
            Node::Leaf("enabled", boolean(false)),
            // 1 Mbit/s is the documented maximum.
            Node::Leaf("rate_hz", int_between(CType::U32, 1_000_000, 1, 1_000_000)),
            Node::Leaf("data_bits", int_between(CType::U8, 20, 1, 64)),
            Node::Leaf("crc_bits", int_between(CType::U8, 6, 0, 16)),
            Node::Leaf("poll_rate_us", int_between(CType::I32, 100, 0, I32_MAX)),
        ],
    ),
    Node::Leaf("i2c_startup_delay_ms", int_between(CType::I32, 30, 0, I32_MAX)),
    Node::Leaf("pwm_period_us", int_between(CType::I32, 1000, 1, I32_MAX)),
    Node::Leaf("rs422", boolean(false)),
    Node::Array("pins", 5, &AUX_PIN),
];

const POSITION_SOURCE: Node = Node::Object(
    "",
    &[
        Node::Leaf("aux_number", int_between(CType::U8, 1, 1, 2)),
        // 0 disabled, 1 SPI, 2 UART, 3 quadrature, 4 hall, 5 index, 6 sine/cosine, 7 I2C,
        // 8 sensorless, 9 BiSS-C.
        Node::Leaf("type", int_between(CType::I32, 0, 0, 9)),
        Node::Leaf("i2c_device", int_between(CType::U8, 0, 0, 2)),
        // -1 none, else the aux port (1 or 2) carrying the index pin.
        Node::Leaf("incremental_index", int_between(CType::I8, -1, -1, 2)),
        Node::Leaf("cpr", int_between(CType::U32, 16384, 1, U32_MAX)),
        Node::Leaf("offset", float(0.0)),
        Node::Leaf("sign", int_one_of(CType::I8, &[1, -1])),
        Node::Leaf("debug_override", int(CType::I32, -1)),
        Node::Leaf("timeout_s", non_negative(0.2)),
        // 0 rotor, 1 output.
        Node::Leaf("reference", int_between(CType::I32, 0, 0, 1)),
        Node::Leaf("pll_filter_hz", non_negative(400.0)),
        Node::Leaf("hall_lost_tracking_scale", non_negative(5.0)),
        Node::Leaf("hall_lost_tracking_max_s", non_negative(0.5)),
        Node::Leaf("hall_lost_tracking_tau_s", non_negative(0.05)),
        Node::Leaf("compensation_scale", float(0.0)),
    ],
);

const MOTOR_POSITION: &[Node] = &[
    Node::Array("sources", 3, &POSITION_SOURCE),
    Node::Leaf("commutation_source", int_between(CType::I8, 0, 0, 2)),
    Node::Object(
        "output",
        &[
            Node::Leaf("source", int_between(CType::I8, 0, 0, 2)),
            Node::Leaf("offset", float_between(0.0, -POSITION_LIMIT_REV, POSITION_LIMIT_REV)),
            Node::Leaf("sign", int_one_of(CType::I8, &[1, -1])),
            // -1 none, else a source index.
            Node::Leaf("reference_source", int_between(CType::I8, -1, -1, 2)),
        ],
    ),
    // A ratio of zero or less has no meaning; above 1 the firmware faults unless overridden.
    Node::Leaf("rotor_to_output_ratio", float_above(1.0, 0.0, F32_MAX)),
    Node::Leaf("rotor_to_output_override", boolean(false)),
];

const MOTOR: &[Node] = &[
    Node::Leaf("poles", int(CType::U8, 0)),
    Node::Leaf("phase_invert", int_between(CType::U8, 0, 0, 1)),
    Node::Leaf("resistance_ohm", non_negative(0.0)),
    Node::Leaf("inductance_d_H", non_negative(0.0)),
    Node::Leaf("inductance_q_H", non_negative(0.0)),
    Node::Leaf("inductance_d_scale", float(0.0)),
    Node::Leaf("Kv", non_negative(0.0)),
    // moteus_tool clears these until "error setting", so the count is the firmware's.
    Node::Array("offset", 64, &Node::Leaf("", float(0.0))),
    Node::Leaf("rotation_current_cutoff_A", non_negative(10000.0)),
    Node::Leaf("rotation_current_scale", float(0.05)),
    Node::Leaf("rotation_torque_scale", float(14.7)),
    Node::Leaf("cogging_dq_scale", float(0.0)),
];

/// The ADC sample times the STM32G4 offers, in cycles.
const ADC_CYCLES_CURRENT: &[i64] = &[2, 6, 12, 24, 47, 92, 247, 640];
const ADC_CYCLES_AUX: &[i64] = &[47, 2, 6, 12, 24, 92, 247, 640];

const SERVO: &[Node] = &[
    // The documented PWM range.
    Node::Leaf("pwm_rate_hz", int_between(CType::U16, 30_000, 15_000, 60_000)),
    Node::Leaf("current_sense_ohm", float_above(0.0005, 0.0, F32_MAX)),
    Node::Leaf("max_voltage", float_above(46.0, 0.0, F32_MAX)),
    Node::Leaf("max_power_W", non_negative_or_nan(f64::NAN)),
    Node::Leaf("override_board_max_power", boolean(false)),
    Node::Leaf("temperature_margin", non_negative(25.0)),
    Node::Leaf("fault_temperature", float_between(75.0, 0.0, 200.0)),
    Node::Leaf("enable_motor_temperature", boolean(false)),
    Node::Leaf("motor_thermistor_ohm", float_above(10000.0, 0.0, F32_MAX)),
    Node::Leaf("motor_temperature_margin", non_negative(20.0)),
    Node::Leaf("motor_fault_temperature", float_between_or_nan(f64::NAN, 0.0, 250.0)),
    Node::Leaf("fault_position_error", non_negative_or_nan(f64::NAN)),
    Node::Leaf("fault_velocity_error", non_negative_or_nan(f64::NAN)),
    Node::Leaf("velocity_threshold", float(0.0)),
    Node::Leaf("position_derate", non_negative(0.02)),
    Node::Leaf("adc_cur_cycles", int_one_of(CType::U16, ADC_CYCLES_CURRENT)),
    Node::Leaf("adc_aux_cycles", int_one_of(CType::U16, ADC_CYCLES_AUX)),
    Node::Leaf("pid_dq_hz", non_negative(100.0)),
    Node::Leaf("max_current_desired_rate", non_negative(10000.0)),
    Node::Object(
        "pid_position",
        &[
            Node::Leaf("kp", float_between(4.0, 0.0, GAIN_LIMIT)),
            Node::Leaf("ki", float(1.0)),
            Node::Leaf("kd", float_between(0.05, 0.0, GAIN_LIMIT)),
            // Negative: no limit.
            Node::Leaf("iratelimit", float(-1.0)),
            Node::Leaf("ilimit", float(0.0)),
            Node::Leaf("kpkd_limit", float(-1.0)),
            Node::Leaf("max_desired_rate", non_negative(0.0)),
            Node::Leaf("sign", float(-1.0)),
        ],
    ),
    Node::Leaf("current_feedforward", float(1.0)),
    Node::Leaf("bemf_feedforward", float(0.0)),
    Node::Leaf("bemf_feedforward_override", boolean(false)),
    Node::Leaf("cross_coupling_feedforward", float(1.0)),
    Node::Leaf("inertia_feedforward", float(0.0)),
    Node::Leaf("default_velocity_limit", float_above_or_nan(f64::NAN, 0.0, 10_000.0)),
    Node::Leaf("default_accel_limit", float_above_or_nan(50.0, 0.0, 1_000_000.0)),
    Node::Leaf("voltage_mode_control", boolean(false)),
    Node::Leaf("fixed_voltage_mode", boolean(false)),
    Node::Leaf("fixed_voltage_control_V", float(0.0)),
    Node::Leaf("max_position_slip", non_negative_or_nan(f64::NAN)),
    Node::Leaf("max_velocity_slip", non_negative_or_nan(f64::NAN)),
    Node::Leaf("default_timeout_s", float_above_or_nan(0.1, 0.0, 3600.0)),
    Node::Leaf("timeout_max_torque_Nm", non_negative(5.0)),
    // 12 zero velocity (default), 0 stopped, 10 decelerate and hold, 15 brake.
    Node::Leaf("timeout_mode", int_one_of(CType::U8, &[12, 0, 10, 15])),
    Node::Leaf("flux_brake_margin_voltage", float(3.0)),
    Node::Leaf("flux_brake_resistance_ohm", non_negative(0.025)),
    Node::Leaf("max_regen_power_W", non_negative_or_nan(f64::NAN)),
    Node::Object(
        "fw",
        &[
            Node::Leaf("enable", boolean(false)),
            Node::Leaf("modulation_margin", float_between(0.15, 0.0, 1.0)),
            Node::Leaf("bandwidth_hz", non_negative(100.0)),
            Node::Leaf("max_current_ratio", float_between(0.5, 0.0, 1.0)),
        ],
    ),
    Node::Leaf("max_current_A", float_above(100.0, 0.0, 1000.0)),
    Node::Leaf("derate_current_A", float(-20.0)),
    Node::Leaf("max_velocity", float_above(500.0, 0.0, 10_000.0)),
    Node::Leaf("max_velocity_derate", non_negative(2.0)),
    Node::Leaf("cooldown_cycles", int(CType::U16, 256)),
    Node::Leaf("cooldown_brake", int(CType::U16, 64)),
    Node::Leaf("velocity_zero_capture_threshold", non_negative(0.05)),
    Node::Leaf("timing_fault", boolean(false)),
    Node::Leaf("emit_debug", int(CType::U32, 0)),
];

const SERVOPOS: &[Node] = &[
    Node::Leaf("position_min", float_between_or_nan(-0.01, -POSITION_LIMIT_REV, POSITION_LIMIT_REV)),
    Node::Leaf("position_max", float_between_or_nan(0.01, -POSITION_LIMIT_REV, POSITION_LIMIT_REV)),
];

/// CAN ids 0 and 127 are not usable by a servo (the firmware resets them to 1).
const ID: &[Node] = &[Node::Leaf("id", int_between(CType::U8, 1, 1, 126))];

/// The prefix is the upper 13 bits of a 29-bit CAN id.
const CAN: &[Node] = &[Node::Leaf("prefix", int_between(CType::U32, 0, 0, 8191))];

/// The groups, in the order the firmware registers them (which `conf enumerate` keeps).
const GROUPS: &[Node] = &[
    Node::Object("uuid", UUID),
    Node::Object("clock", CLOCK),
    Node::Object("aux1", AUX),
    Node::Object("aux2", AUX),
    Node::Object("motor_position", MOTOR_POSITION),
    Node::Object("motor", MOTOR),
    Node::Object("servo", SERVO),
    Node::Object("servopos", SERVOPOS),
    Node::Object("id", ID),
    Node::Object("can", CAN),
];

/// Roughly how many keys the tree expands to (the vector's first allocation).
const KEY_COUNT_HINT: usize = 320;

/// Defaults that differ from the struct defaults above: the firmware resolves its "board
/// default" choices per port at start (moteus-r4.11: aux2 has no SPI encoder and runs the
/// fdcanusb serial protocol on its two UART pins), and source 0 is the onboard SPI encoder.
const BOARD_DEFAULTS: &[(&str, f64)] = &[
    ("aux2.spi.mode", 1.0),
    ("aux2.uart.mode", 5.0),
    ("aux2.pins.0.mode", 3.0),
    ("aux2.pins.1.mode", 3.0),
    ("motor_position.sources.0.type", 1.0),
];

/// A key the simulator models and the `ServoConfig` field behind it.
struct Modelled {
    key: &'static str,
    read: fn(&ServoConfig) -> f64,
    write: fn(&mut ServoConfig, f64),
}

/// The table in the module docs. Values written are already in range for their key (the
/// integer casts cannot saturate).
const MODELLED: &[Modelled] = &[
    Modelled { key: "id.id", read: |c| f64::from(c.id), write: |c, v| c.id = v as u8 },
    // The servo compares only the low 13 bits; seeding with them keeps what it answers to.
    Modelled { key: "can.prefix", read: |c| f64::from(c.can_prefix & 0x1FFF), write: |c, v| c.can_prefix = v as u16 },
    Modelled { key: "servo.pid_position.kp", read: |c| c.kp_nm_per_rev, write: |c, v| c.kp_nm_per_rev = v },
    Modelled { key: "servo.pid_position.kd", read: |c| c.kd_nms_per_rev, write: |c, v| c.kd_nms_per_rev = v },
    Modelled { key: "servo.max_current_A", read: |c| c.max_current_a, write: |c, v| c.max_current_a = v },
    // NaN is the firmware's "never time out"; the servo's own spelling of it is +inf (a
    // NaN there would become a zero-length watchdog).
    Modelled {
        key: "servo.default_timeout_s",
        read: |c| c.watchdog_default_s,
        write: |c, v| c.watchdog_default_s = if v.is_nan() { f64::INFINITY } else { v },
    },
    Modelled { key: "servo.max_velocity", read: |c| c.max_velocity_rev_s, write: |c, v| c.max_velocity_rev_s = v },
    Modelled { key: "servopos.position_min", read: |c| c.position_min_rev, write: |c, v| c.position_min_rev = v },
    Modelled { key: "servopos.position_max", read: |c| c.position_max_rev, write: |c, v| c.position_max_rev = v },
    Modelled {
        key: "servo.fault_temperature",
        read: |c| c.fault_temperature_c,
        write: |c, v| c.fault_temperature_c = v,
    },
    Modelled {
        key: "servo.default_velocity_limit",
        read: |c| c.default_velocity_limit,
        write: |c, v| c.default_velocity_limit = v,
    },
    Modelled {
        key: "servo.default_accel_limit",
        read: |c| c.default_accel_limit,
        write: |c, v| c.default_accel_limit = v,
    },
    Modelled { key: "motor_position.output.sign", read: |c| c.output_sign, write: |c, v| c.output_sign = v },
    Modelled {
        key: "motor_position.output.offset",
        read: |c| c.output_offset_rev,
        write: |c, v| c.output_offset_rev = v,
    },
];

/// Append the keys under `node`, whose full name is `path`.
fn expand(node: &Node, path: String, keys: &mut Vec<Key>) {
    match node {
        Node::Leaf(_, spec) => keys.push(Key { name: path, spec: *spec }),
        Node::Object(_, children) => {
            for child in children.iter() {
                expand(child, format!("{path}.{}", child.name()), keys);
            }
        }
        Node::Array(_, count, element) => {
            for index in 0..*count {
                expand(element, format!("{path}.{index}"), keys);
            }
        }
    }
}

/// The mjlib schema of `node`: objects field by field, arrays as fixed arrays.
fn node_schema(node: &Node) -> Schema {
    match node {
        Node::Leaf(_, spec) => spec.ctype.schema(),
        Node::Object(_, children) => {
            Schema::Object(children.iter().map(|child| Field::new(child.name(), node_schema(child))).collect())
        }
        Node::Array(_, count, element) => Schema::FixedArray(*count as u64, Box::new(node_schema(element))),
    }
}

/// The tree of group `group`, for the schema form.
fn group_node(group: &str) -> Result<&'static Node, ConfError> {
    GROUPS.iter().find(|node| node.name() == group).ok_or_else(|| ConfError::UnknownGroup(shown(group)))
}

/// The first component of a key.
fn group_of(key: &str) -> &str {
    key.split('.').next().unwrap_or(key)
}

/// Is `key` equal to `prefix` or under it at a dot boundary?
fn is_under(key: &str, prefix: &str) -> bool {
    match key.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('.'),
        None => false,
    }
}

/// The factory UUID of a servo: 16 bytes that only its id and CAN prefix decide, so the
/// same simulated robot has the same UUIDs on every run and no two servos share one.
fn factory_uuid(cfg: &ServoConfig) -> [u8; 16] {
    // "moteussi" in ASCII: keeps these streams apart from the small seeds noise uses.
    const SALT: u64 = 0x6d6f_7465_7573_7369;
    let seed = SALT ^ (u64::from(cfg.can_prefix & 0x1FFF) << 8) ^ u64::from(cfg.id);
    let mut rng = XorShift64::new(seed);
    let mut uuid = [0u8; 16];
    for half in uuid.chunks_mut(8) {
        half.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    // xorshift64* never yields 0 twice in a row, but the guarantee is cheap.
    if uuid.iter().all(|&b| b == 0) {
        uuid[0] = 1;
    }
    uuid
}

// ---------------------------------------------------------------------------------------
// Text in and out.

/// `value` as `conf get` prints it.
fn format_value(ctype: CType, value: f64) -> String {
    match ctype {
        CType::F32 if value.is_nan() => String::from("nan"),
        CType::F32 => format!("{}", value as f32),
        CType::Bool => String::from(if value != 0.0 { "1" } else { "0" }),
        _ => format!("{}", value as i64),
    }
}

/// Parse `text` as a value for `spec`, or say in one phrase what was wrong and what is
/// allowed.
fn parse_value(spec: &Spec, text: &str) -> Result<f64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("no value given ({})", spec.describe()));
    }
    let value = match spec.ctype {
        CType::Bool => {
            parse_bool(text).ok_or_else(|| format!("'{}' is not a bool ({})", shown(text), spec.describe()))?
        }
        CType::F32 => {
            let parsed: f64 =
                text.parse().map_err(|_| format!("'{}' is not a number ({})", shown(text), spec.describe()))?;
            if parsed.is_nan() {
                if spec.nan_allowed {
                    return Ok(f64::NAN);
                }
                return Err(format!("nan is not allowed ({})", spec.describe()));
            }
            // Rounded to the f32 the firmware would store, so the check is on what is kept
            // (beyond the f32 range this is infinite and refused below).
            f64::from(parsed as f32)
        }
        _ => parse_int(text).ok_or_else(|| format!("'{}' is not an integer ({})", shown(text), spec.describe()))?,
    };
    if spec.allows(value) {
        Ok(value)
    } else {
        Err(format!("{} is out of range ({})", shown(text), spec.describe()))
    }
}

/// `0`, `1`, `true`, `false` (any case).
fn parse_bool(text: &str) -> Option<f64> {
    if text == "0" || text.eq_ignore_ascii_case("false") {
        Some(0.0)
    } else if text == "1" || text.eq_ignore_ascii_case("true") {
        Some(1.0)
    } else {
        None
    }
}

/// A decimal or `0x` hexadecimal integer with an optional sign. Too large for an i64 is
/// returned as ±inf, so it is refused as out of range rather than as "not an integer".
fn parse_int(text: &str) -> Option<f64> {
    let (negative, magnitude) = match (text.strip_prefix('-'), text.strip_prefix('+')) {
        (Some(rest), _) => (true, rest),
        (None, Some(rest)) => (false, rest),
        (None, None) => (false, text),
    };
    let (digits, radix) = match magnitude.strip_prefix("0x").or_else(|| magnitude.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (magnitude, 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let value = match u64::from_str_radix(digits, radix) {
        Ok(v) => v as f64,
        Err(_) => f64::INFINITY,
    };
    Some(if negative { -value } else { value })
}

/// Echo of user text in a message: control characters escaped (a message is one console
/// line) and cut at a length that still identifies it.
fn shown(text: &str) -> String {
    const LONGEST: usize = 80;
    let mut out = String::with_capacity(text.len().min(LONGEST) + 3);
    for (count, c) in text.chars().enumerate() {
        if count == LONGEST {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The f64 nearest the decimal `x` prints as: a value typed as `0.1` reaches the simulator
/// as 0.1, not as the f32's 0.100000001490116.
fn decimal_f64(x: f32) -> f64 {
    use core::fmt::Write;
    /// Enough for any f32's shortest form (subnormals print ~50 digits without exponent).
    struct Text {
        bytes: [u8; 64],
        len: usize,
    }
    impl Write for Text {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            let end = self.len.checked_add(s.len()).filter(|&end| end <= self.bytes.len()).ok_or(core::fmt::Error)?;
            self.bytes[self.len..end].copy_from_slice(s.as_bytes());
            self.len = end;
            Ok(())
        }
    }
    if !x.is_finite() {
        return f64::from(x);
    }
    let mut text = Text { bytes: [0; 64], len: 0 };
    if write!(text, "{x}").is_err() {
        return f64::from(x);
    }
    core::str::from_utf8(&text.bytes[..text.len]).ok().and_then(|s| s.parse().ok()).unwrap_or(f64::from(x))
}

/// Bring a construction-time value into `spec`'s range: NaN or ±inf become NaN where NaN
/// is allowed; otherwise NaN becomes the default, numbers are clamped and rounded to the
/// type, and whatever is still refused (an excluded bound, a value not in a list) becomes
/// the nearest listed value or the default.
fn bring_into_range(spec: &Spec, raw: f64) -> f64 {
    if spec.nan_allowed && !raw.is_finite() {
        return f64::NAN;
    }
    if raw.is_nan() {
        return spec.default;
    }
    let (type_min, type_max) = spec.ctype.limits();
    let (min, max) = match spec.allowed {
        Allowed::Any | Allowed::OneOf(_) => (type_min, type_max),
        Allowed::Between { min, max } | Allowed::Above { min, max } => (min, max),
    };
    // max/min rather than clamp: never panics, whatever the bounds.
    let clamped = raw.max(min).min(max);
    let rounded = match spec.ctype {
        CType::F32 => f64::from(clamped as f32),
        _ => clamped.round(),
    };
    if spec.allows(rounded) {
        return rounded;
    }
    if let Allowed::OneOf(values) = spec.allowed {
        let nearest = values.iter().min_by(|a, b| (**a as f64 - raw).abs().total_cmp(&(**b as f64 - raw).abs()));
        if let Some(&nearest) = nearest {
            return nearest as f64;
        }
    }
    spec.default
}

/// Append the mjlib data encoding of one value.
fn encode_value(ctype: CType, value: f64, out: &mut Vec<u8>) -> Result<(), rtloop_tlog::format::TlogError> {
    // Values are in their type's range (checked on every way in), so the casts are exact.
    match ctype {
        CType::Bool => rtloop_tlog::ser::to_bytes(&(value != 0.0), out),
        CType::U8 => rtloop_tlog::ser::to_bytes(&(value as u8), out),
        CType::I8 => rtloop_tlog::ser::to_bytes(&(value as i8), out),
        CType::U16 => rtloop_tlog::ser::to_bytes(&(value as u16), out),
        CType::I32 => rtloop_tlog::ser::to_bytes(&(value as i32), out),
        CType::U32 => rtloop_tlog::ser::to_bytes(&(value as u32), out),
        CType::F32 => rtloop_tlog::ser::to_bytes(&(value as f32), out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rtloop_tlog::value::{decode, Value};

    fn config() -> Config {
        Config::new(&ServoConfig::new(5))
    }

    fn set_error(config: &mut Config, key: &str, value: &str) -> String {
        match config.set(key, value) {
            Ok(()) => panic!("{key} {value} was accepted"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn the_table_is_consistent() {
        let config = config();
        assert_eq!(config.len(), 302);
        for key in &config.keys {
            assert!(key.spec.allows(key.spec.default), "{}: default {} refused", key.name, key.spec.default);
            assert!(!key.name.is_empty() && !key.name.contains(".."), "{}", key.name);
        }
        let mut names: Vec<&str> = config.keys.iter().map(|k| k.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), config.len(), "duplicate keys");
        for (key, value) in BOARD_DEFAULTS {
            let i = config.index_of(key).unwrap_or_else(|| panic!("{key}"));
            assert!(config.keys[i].spec.allows(*value), "{key}");
        }
        for modelled in MODELLED {
            assert!(config.index_of(modelled.key).is_some(), "{}", modelled.key);
        }
    }

    #[test]
    fn defaults_come_from_the_servo_config_and_the_firmware() {
        let config = config();
        let expected = [
            ("id.id", "5"),
            ("can.prefix", "0"),
            ("servo.pid_position.kp", "20"),
            ("servo.pid_position.kd", "0.5"),
            ("servo.max_current_A", "100"),
            ("servo.default_timeout_s", "0.1"),
            ("servo.max_velocity", "500"),
            ("servopos.position_min", "nan"),
            ("servopos.position_max", "nan"),
            ("servo.fault_temperature", "80"),
            ("servo.default_velocity_limit", "nan"),
            ("servo.default_accel_limit", "nan"),
            ("motor_position.output.sign", "1"),
            ("motor_position.output.offset", "0"),
            // Firmware defaults.
            ("servo.pid_position.ki", "1"),
            ("servo.pid_position.iratelimit", "-1"),
            ("servo.pid_position.sign", "-1"),
            ("servo.pwm_rate_hz", "30000"),
            ("servo.timeout_mode", "12"),
            ("servo.max_power_W", "nan"),
            ("servo.fw.enable", "0"),
            ("servo.flux_brake_resistance_ohm", "0.025"),
            ("motor.offset.0", "0"),
            ("motor.offset.63", "0"),
            ("motor.rotation_torque_scale", "14.7"),
            ("motor_position.sources.0.type", "1"),
            ("motor_position.sources.1.type", "0"),
            ("motor_position.sources.2.incremental_index", "-1"),
            ("motor_position.output.reference_source", "-1"),
            ("aux1.spi.mode", "0"),
            ("aux2.spi.mode", "1"),
            ("aux2.uart.mode", "5"),
            ("aux2.pins.1.mode", "3"),
            ("aux2.pins.2.mode", "0"),
            ("aux1.uart.cui_amt21_address", "84"),
            ("clock.hsitrim", "64"),
        ];
        for (key, value) in expected {
            assert_eq!(config.get(key).as_deref(), Ok(value), "{key}");
        }
        assert_eq!(config.number("servo.pid_position.kp"), Some(20.0));
        assert!(config.number("servopos.position_min").is_some_and(f64::is_nan));
        assert_eq!(config.number("nope.nope"), None);
        assert_eq!(config.item(0).map(|(k, _)| k), Some("uuid.uuid.0"));
        assert_eq!(config.item(config.len()), None);
        assert_eq!(
            config.groups(),
            ["uuid", "clock", "aux1", "aux2", "motor_position", "motor", "servo", "servopos", "id", "can"]
        );
    }

    #[test]
    fn a_servo_config_out_of_range_is_brought_into_range() {
        let cfg = ServoConfig {
            id: 0,
            can_prefix: 0xFFFF,
            kp_nm_per_rev: -3.0,
            max_current_a: 0.0,
            watchdog_default_s: f64::INFINITY,
            fault_temperature_c: f64::NAN,
            output_sign: -0.5,
            default_accel_limit: f64::NEG_INFINITY,
            position_max_rev: 1e12,
            ..ServoConfig::new(1)
        };
        let config = Config::new(&cfg);
        assert_eq!(config.get("id.id").as_deref(), Ok("1"));
        assert_eq!(config.get("can.prefix").as_deref(), Ok("8191"));
        assert_eq!(config.get("servo.pid_position.kp").as_deref(), Ok("0"));
        assert_eq!(config.get("servo.max_current_A").as_deref(), Ok("100"));
        assert_eq!(config.get("servo.default_timeout_s").as_deref(), Ok("nan"));
        assert_eq!(config.get("servo.fault_temperature").as_deref(), Ok("75"));
        assert_eq!(config.get("motor_position.output.sign").as_deref(), Ok("-1"));
        assert_eq!(config.get("servo.default_accel_limit").as_deref(), Ok("nan"));
        assert_eq!(config.get("servopos.position_max").as_deref(), Ok("100000"));
        // Every value is one `set` would take, so the dump reloads cleanly.
        let text = config.to_text();
        assert_eq!(Config::new(&ServoConfig::new(1)).load_text(&text), Vec::new());
    }

    #[test]
    fn set_then_get_round_trips() {
        let mut config = config();
        let cases = [
            ("id.id", "7", "7"),
            ("id.id", "+0x10", "16"),
            ("can.prefix", "8191", "8191"),
            ("servo.pid_position.kp", "0.1", "0.1"),
            ("servo.pid_position.kp", "1e3", "1000"),
            ("servo.pid_position.kd", " 2.5 ", "2.5"),
            ("servopos.position_min", "NaN", "nan"),
            ("servopos.position_min", "-1.25", "-1.25"),
            ("servo.default_timeout_s", "nan", "nan"),
            ("servo.timeout_mode", "15", "15"),
            ("servo.voltage_mode_control", "true", "1"),
            ("servo.voltage_mode_control", "FALSE", "0"),
            ("servo.fw.enable", "1", "1"),
            ("motor.offset.63", "-0.5", "-0.5"),
            ("motor_position.output.sign", "-1", "-1"),
            ("motor_position.sources.1.cpr", "4096", "4096"),
            ("servo.emit_debug", "4294967295", "4294967295"),
            ("motor_position.sources.0.debug_override", "-2147483648", "-2147483648"),
            ("servo.derate_current_A", "-3", "-3"),
            ("servo.pid_position.ki", "3.4e38", "340000000000000000000000000000000000000"),
        ];
        for (key, value, printed) in cases {
            assert_eq!(config.set(key, value), Ok(()), "{key} {value}");
            assert_eq!(config.get(key).as_deref(), Ok(printed), "{key} {value}");
        }
    }

    #[test]
    fn refusals_say_what_was_wrong_and_what_is_allowed() {
        let mut config = config();
        let before = config.to_text();
        assert_eq!(set_error(&mut config, "id.id", "300"), "error setting 'id.id': 300 is out of range (1 to 126)");
        assert_eq!(set_error(&mut config, "id.id", "0"), "error setting 'id.id': 0 is out of range (1 to 126)");
        assert_eq!(
            set_error(&mut config, "id.id", "99999999999999999999999"),
            "error setting 'id.id': 99999999999999999999999 is out of range (1 to 126)"
        );
        assert_eq!(set_error(&mut config, "id.id", "1.5"), "error setting 'id.id': '1.5' is not an integer (1 to 126)");
        assert_eq!(set_error(&mut config, "id.id", ""), "error setting 'id.id': no value given (1 to 126)");
        assert_eq!(
            set_error(&mut config, "servo.pid_position.kp", "abc"),
            "error setting 'servo.pid_position.kp': 'abc' is not a number (0 to 100000)"
        );
        assert_eq!(
            set_error(&mut config, "servo.pid_position.kp", "-1"),
            "error setting 'servo.pid_position.kp': -1 is out of range (0 to 100000)"
        );
        assert_eq!(
            set_error(&mut config, "servo.pid_position.kp", "nan"),
            "error setting 'servo.pid_position.kp': nan is not allowed (0 to 100000)"
        );
        assert_eq!(
            set_error(&mut config, "servo.pid_position.kp", "inf"),
            "error setting 'servo.pid_position.kp': inf is out of range (0 to 100000)"
        );
        assert_eq!(
            set_error(&mut config, "servopos.position_max", "-inf"),
            "error setting 'servopos.position_max': -inf is out of range (-100000 to 100000, or nan)"
        );
        assert_eq!(
            set_error(&mut config, "servo.pid_position.ki", "1e39"),
            "error setting 'servo.pid_position.ki': 1e39 is out of range (any finite float32)"
        );
        assert_eq!(
            set_error(&mut config, "servo.max_current_A", "0"),
            "error setting 'servo.max_current_A': 0 is out of range (greater than 0, up to 1000)"
        );
        assert_eq!(
            set_error(&mut config, "servo.default_timeout_s", "0"),
            "error setting 'servo.default_timeout_s': 0 is out of range (greater than 0, up to 3600, or nan)"
        );
        assert_eq!(
            set_error(&mut config, "servo.timeout_mode", "11"),
            "error setting 'servo.timeout_mode': 11 is out of range (one of 12, 0, 10, 15)"
        );
        assert_eq!(
            set_error(&mut config, "motor_position.output.sign", "0"),
            "error setting 'motor_position.output.sign': 0 is out of range (one of 1, -1)"
        );
        assert_eq!(
            set_error(&mut config, "servo.fw.enable", "2"),
            "error setting 'servo.fw.enable': '2' is not a bool (0, 1, true or false)"
        );
        assert_eq!(
            set_error(&mut config, "servo.fw.enable", "yes"),
            "error setting 'servo.fw.enable': 'yes' is not a bool (0, 1, true or false)"
        );
        assert_eq!(
            set_error(&mut config, "servo.rotor_to_output_ratio", "0.5"),
            "error setting 'servo.rotor_to_output_ratio': no such key"
        );
        assert_eq!(set_error(&mut config, "motor.offset.64", "0"), "error setting 'motor.offset.64': no such key");
        assert_eq!(set_error(&mut config, "servo", "0"), "error setting 'servo': no such key");
        assert_eq!(set_error(&mut config, "nosuch.key", "1"), "unknown group 'nosuch'");
        assert_eq!(set_error(&mut config, "", "1"), "unknown group ''");
        // Nothing refused changed anything.
        assert_eq!(config.to_text(), before);

        assert_eq!(config.get("servo.nope"), Err(ConfError::UnknownKey("servo.nope".into())));
        assert_eq!(
            config.get("servo.nope").map_err(|e| e.to_string()),
            Err("error reading 'servo.nope': no such key".into())
        );
        assert_eq!(config.get("servo"), Err(ConfError::UnknownKey("servo".into())));
        assert_eq!(config.get("servox.kp"), Err(ConfError::UnknownGroup("servox".into())));
        // Echoed text is one line and bounded.
        let long = "9".repeat(1000);
        let message = set_error(&mut config, "id.id", &long);
        assert!(message.len() < 200, "{message}");
        let message = set_error(&mut config, "id.id", "1\n2");
        assert!(!message.contains('\n'), "{message}");
    }

    #[test]
    fn moteus_tool_finds_the_end_of_the_offsets() {
        let mut config = config();
        let mut cleared = 0;
        loop {
            match config.set(&format!("motor.offset.{cleared}"), "0") {
                Ok(()) => cleared += 1,
                Err(error) => {
                    assert!(error.to_string().starts_with("error setting"), "{error}");
                    break;
                }
            }
            assert!(cleared <= 64);
        }
        assert_eq!(cleared, 64);
    }

    #[test]
    fn prefixes_match_whole_components() {
        let config = config();
        let keys_in = |prefix: &str| -> Vec<&str> {
            config.range(prefix).map(|range| config.keys[range].iter().map(|k| k.name.as_str()).collect()).unwrap()
        };
        let servo = keys_in("servo");
        assert!(servo.iter().all(|k| k.starts_with("servo.")));
        assert_eq!(servo.len(), config.keys.iter().filter(|k| k.name.starts_with("servo.")).count());
        assert_eq!(keys_in("servopos"), ["servopos.position_min", "servopos.position_max"]);
        assert_eq!(keys_in("servo.pid_position").len(), 8);
        assert_eq!(keys_in("servo.pid_position.kp"), ["servo.pid_position.kp"]);
        assert_eq!(keys_in("motor").len(), 75);
        assert_eq!(keys_in("motor.offset").len(), 64);
        assert_eq!(keys_in("motor_position.sources.1").len(), 15);
        assert_eq!(keys_in("uuid").len(), 16);
        assert_eq!(keys_in("aux1.pins").len(), 10);
        assert_eq!(config.range(""), Ok(0..config.len()));
        assert_eq!(config.range("serv"), Err(ConfError::UnknownGroup("serv".into())));
        assert_eq!(config.range("servo."), Err(ConfError::UnknownGroup("servo.".into())));
        assert_eq!(config.range("motor.offset.64"), Err(ConfError::UnknownGroup("motor.offset.64".into())));
        // Every key's own name is a prefix matching exactly it.
        for (i, key) in config.keys.iter().enumerate() {
            assert_eq!(config.range(&key.name), Ok(i..i + 1), "{}", key.name);
        }
    }

    #[test]
    fn the_uuid_is_factory_data() {
        let a = config();
        let uuid = |config: &Config| -> Vec<f64> {
            (0..16).map(|i| config.number(&format!("uuid.uuid.{i}")).unwrap()).collect()
        };
        assert!(uuid(&a).iter().any(|&b| b != 0.0));
        assert_eq!(uuid(&a), uuid(&config()));
        assert_ne!(uuid(&a), uuid(&Config::new(&ServoConfig::new(6))));
        assert_ne!(uuid(&a), uuid(&Config::new(&ServoConfig { can_prefix: 1, ..ServoConfig::new(5) })));
        let mut b = a.clone();
        assert_eq!(b.set("uuid.uuid.0", "17"), Ok(()));
        assert_eq!(uuid(&b), uuid(&a));
        assert!(b.set("uuid.uuid.0", "256").is_err());
        assert!(b.set("uuid.uuid.16", "1").is_err());
    }

    #[test]
    fn text_round_trips_and_reports_bad_lines() {
        let mut original = config();
        for (key, value) in [
            ("servo.pid_position.kp", "33.3"),
            ("servopos.position_max", "2.5"),
            ("motor.offset.10", "1e-7"),
            ("servo.fw.enable", "1"),
            ("aux1.pins.4.pull", "2"),
            ("servo.default_timeout_s", "nan"),
        ] {
            assert_eq!(original.set(key, value), Ok(()));
        }
        let text = original.to_text();
        assert_eq!(text.lines().count(), original.len());
        assert!(text.starts_with("uuid.uuid.0 "));
        assert!(text.contains("\nservo.pid_position.kp 33.3\n"));
        let mut loaded = config();
        assert_eq!(loaded.load_text(&text), Vec::new());
        assert_eq!(loaded.to_text(), text);

        // A fresh configuration's own dump loads into it unchanged.
        let mut fresh = config();
        let dump = fresh.to_text();
        assert_eq!(fresh.load_text(&dump), Vec::new());
        assert_eq!(fresh.to_text(), dump);

        let mut partial = config();
        let errors = partial.load_text(
            "# a comment\n\nservo.pid_position.kp 7\r\nid.id 300\nbogus.key 1\nservo.pid_position.kd\n  motor.poles   14  \n",
        );
        let lines: Vec<usize> = errors.iter().map(|(line, _)| *line).collect();
        assert_eq!(lines, [4, 5, 6]);
        assert_eq!(errors[0].1.to_string(), "error setting 'id.id': 300 is out of range (1 to 126)");
        assert_eq!(errors[1].1, ConfError::UnknownGroup("bogus".into()));
        assert!(errors[2].1.to_string().contains("no value given"));
        assert_eq!(partial.get("servo.pid_position.kp").as_deref(), Ok("7"));
        assert_eq!(partial.get("motor.poles").as_deref(), Ok("14"));
        assert_eq!(partial.get("id.id").as_deref(), Ok("5"));
    }

    #[test]
    fn apply_writes_the_modelled_fields() {
        let mut config = config();
        for (key, value) in [
            ("id.id", "9"),
            ("can.prefix", "3"),
            ("servo.pid_position.kp", "0.1"),
            ("servo.pid_position.kd", "0.3"),
            ("servo.max_current_A", "12.5"),
            ("servo.default_timeout_s", "nan"),
            ("servo.max_velocity", "40"),
            ("servopos.position_min", "-2"),
            ("servopos.position_max", "nan"),
            ("servo.fault_temperature", "60"),
            ("servo.default_velocity_limit", "3"),
            ("servo.default_accel_limit", "nan"),
            ("motor_position.output.sign", "-1"),
            ("motor_position.output.offset", "0.25"),
            // Not modelled: changes nothing in the ServoConfig.
            ("motor.poles", "14"),
        ] {
            assert_eq!(config.set(key, value), Ok(()), "{key}");
        }
        let mut cfg = ServoConfig::new(5);
        config.apply(&mut cfg);
        assert_eq!(cfg.id, 9);
        assert_eq!(cfg.can_prefix, 3);
        assert_eq!(cfg.kp_nm_per_rev, 0.1);
        assert_eq!(cfg.kd_nms_per_rev, 0.3);
        assert_eq!(cfg.max_current_a, 12.5);
        assert_eq!(cfg.watchdog_default_s, f64::INFINITY);
        assert_eq!(cfg.max_velocity_rev_s, 40.0);
        assert_eq!(cfg.position_min_rev, -2.0);
        assert!(cfg.position_max_rev.is_nan());
        assert_eq!(cfg.fault_temperature_c, 60.0);
        assert_eq!(cfg.default_velocity_limit, 3.0);
        assert!(cfg.default_accel_limit.is_nan());
        assert_eq!(cfg.output_sign, -1.0);
        assert_eq!(cfg.output_offset_rev, 0.25);
        assert_eq!(cfg.inertia_kgm2, ServoConfig::new(5).inertia_kgm2);

        // Applying an untouched configuration leaves the servo as it was built.
        let built = ServoConfig::new(5);
        let mut again = built;
        Config::new(&built).apply(&mut again);
        assert_eq!(format!("{again:?}"), format!("{built:?}"));
    }

    #[test]
    fn group_data_decodes_against_group_schema() -> Result<(), rtloop_tlog::format::TlogError> {
        let mut config = config();
        assert_eq!(config.set("servo.timeout_mode", "10"), Ok(()));
        assert_eq!(config.set("motor.offset.3", "-1.5"), Ok(()));
        assert_eq!(config.set("motor_position.sources.2.sign", "-1"), Ok(()));
        for group in config.groups() {
            let schema = Schema::parse_binary(&config.group_schema(group).unwrap())?;
            let data = config.group_data(group).unwrap();
            let value = decode(&schema, &data)?;
            // Decoding consumed exactly the data: re-encoding the schema's min size matches
            // (every field here is fixed-width).
            assert_eq!(schema.min_encoded_size(), data.len() as u64, "{group}");
            let mut leaves = Vec::new();
            value.flatten(group, &mut leaves);
            let range = config.range(group).unwrap();
            assert_eq!(leaves.len(), range.len(), "{group}");
            for ((name, leaf), i) in leaves.iter().zip(range) {
                assert_eq!(name, &config.keys[i].name);
                let expected = config.values[i];
                let got = leaf.as_f64().unwrap();
                assert!(got == expected || (got.is_nan() && expected.is_nan()), "{name}: {got} != {expected}");
            }
        }
        let schema = Schema::parse_binary(&config.group_schema("servo").unwrap())?;
        let Value::Object(fields) = decode(&schema, &config.group_data("servo").unwrap())? else {
            panic!("servo is not an object");
        };
        let field = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        assert_eq!(field("timeout_mode"), Some(Value::UInt(10)));
        assert_eq!(field("max_current_A"), Some(Value::F32(100.0)));
        let Some(Value::Object(pid)) = field("pid_position") else { panic!("no pid_position") };
        assert_eq!(pid.first(), Some(&("kp".to_string(), Value::F32(20.0))));

        let schema = Schema::parse_binary(&config.group_schema("motor").unwrap())?;
        let Schema::Object(motor) = &schema else { panic!() };
        let offset = motor.iter().find(|f| f.name == "offset").map(|f| f.schema.clone());
        assert_eq!(offset, Some(Schema::FixedArray(64, Box::new(Schema::Float32))));

        let schema = Schema::parse_binary(&config.group_schema("uuid").unwrap())?;
        assert_eq!(
            schema,
            Schema::Object(vec![Field::new("uuid", Schema::FixedArray(16, Box::new(Schema::FixedUInt(1))))])
        );
        assert_eq!(
            config.group_schema("servo.pid_position"),
            Err(ConfError::UnknownGroup("servo.pid_position".into()))
        );
        assert_eq!(config.group_data("nope"), Err(ConfError::UnknownGroup("nope".into())));
        Ok(())
    }

    #[test]
    fn decimal_f64_gives_the_printed_value() {
        assert_eq!(decimal_f64(0.1), 0.1);
        assert_eq!(decimal_f64(f32::MAX), 3.4028235e38);
        // Subnormals print in full (no exponent); still within the text buffer.
        let tiny = f32::from_bits(1);
        assert_eq!(decimal_f64(tiny), 1e-45);
        assert_eq!(decimal_f64(tiny) as f32, tiny);
        assert!(decimal_f64(f32::NAN).is_nan());
    }

    proptest! {
        #[test]
        fn set_never_panics(key in ".{0,40}", value in ".{0,40}") {
            let mut config = config();
            let _ = config.set(&key, &value);
            let _ = config.get(&key);
            let _ = config.range(&key);
            let _ = config.group_schema(&key);
            let _ = config.group_data(&key);
        }

        #[test]
        fn any_value_on_a_real_key_is_taken_or_refused_cleanly(index in 0usize..302, value in "\\PC{0,24}|[-+]?[0-9.eE]{1,24}|(?i:[-+]?(nan|inf|infinity|true|false|0x[0-9a-f]{1,10}))") {
            let mut config = config();
            let key = config.keys[index].name.clone();
            let before = config.get(&key);
            match config.set(&key, &value) {
                Ok(()) => {
                    // What was taken prints as something that is taken again, unchanged.
                    let printed = config.get(&key).unwrap();
                    prop_assert_eq!(config.set(&key, &printed), Ok(()));
                    prop_assert_eq!(config.get(&key).unwrap(), printed);
                }
                Err(error) => {
                    prop_assert!(error.to_string().starts_with("error setting"));
                    prop_assert_eq!(config.get(&key), before);
                }
            }
        }

        #[test]
        fn load_text_never_panics(text in "(.{0,60}\n){0,20}") {
            let mut config = config();
            let errors = config.load_text(&text);
            prop_assert!(errors.len() <= text.lines().count());
            let mut cfg = ServoConfig::new(1);
            config.apply(&mut cfg);
            prop_assert!((1..=126).contains(&cfg.id));
        }
    }
}
