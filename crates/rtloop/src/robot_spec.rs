//! Which buses a robot has, what carries each one and which servo ids live on it — from
//! command-line flags (`--bus 1=fdcanusb:/dev/ttyACM0 --ids 1=1,2,3`) or a TOML file, whose
//! buses are either `[[bus]]` tables or, in the shape of the moteus pi3hat transport's
//! `servo_bus_map`, one `[servo_bus_map]` table (bus number → servo ids) with an optional
//! `transport` (a bus address for every bus; `pi3hat` by default):
//!
//! ```toml
//! transport = "pi3hat"
//! [servo_bus_map]
//! 1 = [11, 12, 13]
//! 2 = [21, 22, 23]
//! ```
//!
//! Must never: guess. A bus without ids, ids without a bus, a repeated bus number, a
//! malformed list, an unknown key in a `[[bus]]` table, a `servo_bus_map` key that is not a
//! bus number (1-255; 1-5 on a pi3hat), or both forms in one file is one clear error that
//! names the flag or line and shows a correct form.

use rtloop_io::{BusUri, Clock, ImuSource, Robot, RobotConfig, ServoSpec, Transport};
use rtloop_simrobot::SimRobot;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

/// A robot's buses, opened ([`RobotSpec::open`]).
pub struct OpenedRobot {
    /// One transport per bus, in bus order.
    pub transports: Vec<Box<dyn Transport>>,
    /// The attitude source: a pi3hat's, or the simulated robot's.
    pub imu: Option<Box<dyn ImuSource>>,
    /// The simulated robot behind the simulated buses, when some are.
    pub sim: Option<SimRobot>,
}

/// The transport of a `servo_bus_map` file that names none.
pub const DEFAULT_MAP_TRANSPORT: &str = "pi3hat";

/// A robot's buses as bus number → servo ids: the shape of the moteus pi3hat transport's
/// `servo_bus_map` (`Pi3HatRouter(servo_bus_map={1: [11, 12, 13], 2: [21, 22, 23]})`).
/// Read from a TOML table whose keys are the bus numbers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServoBusMap(pub BTreeMap<u8, Vec<u8>>);

impl<'de> Deserialize<'de> for ServoBusMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = ServoBusMap;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a table of bus number = [servo ids], e.g. 1 = [11, 12, 13]")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<ServoBusMap, A::Error> {
                let mut out = BTreeMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    let Some(bus) = key.trim().parse::<u8>().ok().filter(|&b| b >= 1) else {
                        return Err(serde::de::Error::custom(format!(
                            "servo_bus_map key '{key}' is not a bus number: give bus numbers 1 to 255 as keys, e.g. \
                             1 = [11, 12, 13]"
                        )));
                    };
                    let ids: Vec<u8> = map.next_value()?;
                    if out.insert(bus, ids).is_some() {
                        return Err(serde::de::Error::custom(format!(
                            "servo_bus_map names bus {bus} twice ('{key}'): give each bus one list of ids"
                        )));
                    }
                }
                Ok(ServoBusMap(out))
            }
        }
        d.deserialize_map(Keys)
    }
}

/// Why a robot file, `--bus`/`--ids` flags or a robot spec were refused, or its buses did not
/// open. The Display is the one sentence the user sees.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RobotSpecError {
    /// The file is not valid TOML or has an unknown key or a wrong type: the TOML parser's
    /// message, with the line (and the line's text) where it could be found.
    #[error("{0}")]
    Toml(String),
    /// A mistake at a line of the file.
    #[error("line {line}: {source}")]
    AtLine {
        /// The line, 1-based.
        line: usize,
        /// The mistake.
        source: Box<RobotSpecError>,
    },
    /// `transport` is not a bus address.
    #[error("transport = \"{text}\": {source}")]
    Transport {
        /// The text given.
        text: String,
        /// Why it does not parse.
        source: rtloop_io::UriError,
    },
    /// A `servo_bus_map` bus above 5 on a pi3hat.
    #[error(
        "servo_bus_map bus {bus} cannot be on a pi3hat: its buses are connectors JC1-JC5, so give bus numbers 1 to 5 (or another transport)"
    )]
    MapBusNotOnPi3hat {
        /// The bus.
        bus: u8,
    },
    /// An empty `servo_bus_map`.
    #[error("servo_bus_map names no bus: give at least one, e.g. 1 = [11, 12, 13]")]
    MapEmpty,
    /// A `servo_bus_map` bus without ids.
    #[error("servo_bus_map bus {bus} has no servo ids: list them, e.g. {bus} = [11, 12, 13]")]
    MapBusWithoutIds {
        /// The bus.
        bus: u8,
    },
    /// `transport` without `[servo_bus_map]`.
    #[error("transport only applies to a [servo_bus_map] table: add one, or drop it and give each [[bus]] its uri")]
    TransportWithoutMap,
    /// Both `[[bus]]` tables and `[servo_bus_map]`.
    #[error("a robot file gives its buses as [[bus]] tables or as one [servo_bus_map] table, not both: keep one")]
    BothForms,
    /// A robot file without buses.
    #[error("the robot file names no bus: give [[bus]] tables or a [servo_bus_map] table")]
    NoBusInFile,
    /// A spec without buses.
    #[error("the robot has no buses: give at least one --bus N=URI")]
    NoBuses,
    /// Bus number 0.
    #[error("bus numbers start at 1")]
    BusZero,
    /// A bus number given twice.
    #[error("bus {bus} is given twice")]
    BusTwice {
        /// The bus.
        bus: u8,
    },
    /// A pi3hat bus above 5.
    #[error("bus {bus} cannot be on a pi3hat: bus N is its connector JC N, so give pi3hat buses numbers 1 to 5")]
    BusNotOnPi3hat {
        /// The bus.
        bus: u8,
    },
    /// A bus without servos.
    #[error("bus {bus} has no servo ids: add --ids {bus}=1,2,3 (or servos = [..] in the file)")]
    BusWithoutIds {
        /// The bus.
        bus: u8,
    },
    /// A servo id twice on one bus.
    #[error("servo id {id} appears twice on bus {bus}")]
    IdTwice {
        /// The id.
        id: u8,
        /// The bus.
        bus: u8,
    },
    /// A servo id outside 1..=127.
    #[error("servo id {id} on bus {bus} is outside 1..=127")]
    IdOutOfRange {
        /// The id.
        id: u8,
        /// The bus.
        bus: u8,
    },
    /// `--bus N=…` given twice for one N.
    #[error("--bus {bus} is given twice")]
    FlagBusTwice {
        /// The bus.
        bus: u8,
    },
    /// `--ids N=…` for a bus no `--bus` names.
    #[error("--ids {text} names bus {bus}, but there is no --bus {bus}=URI")]
    IdsWithoutBus {
        /// The flag's value.
        text: String,
        /// The bus.
        bus: u8,
    },
    /// A bad id list in `--ids`.
    #[error("--ids {text}: {source}")]
    Ids {
        /// The flag's value.
        text: String,
        /// What is wrong with its list.
        source: Box<RobotSpecError>,
    },
    /// A `--bus` address that does not parse.
    #[error("--bus {text}: {source}")]
    BusUri {
        /// The flag's value.
        text: String,
        /// Why.
        source: rtloop_io::UriError,
    },
    /// A `--bus`/`--ids` value without `BUS=`.
    #[error("{flag} {text}: expected BUS=VALUE, e.g. {flag} {example}")]
    NotNumbered {
        /// The flag.
        flag: String,
        /// Its value.
        text: String,
        /// An example value.
        example: String,
    },
    /// A `--bus`/`--ids` value whose bus is not a number 1-255.
    #[error("{flag} {text}: '{bus}' is not a bus number (1-255), e.g. {flag} {example}")]
    NotABusNumber {
        /// The flag.
        flag: String,
        /// Its value.
        text: String,
        /// The bus part.
        bus: String,
        /// An example value.
        example: String,
    },
    /// An id list item that is not a servo id.
    #[error("'{text}' is not a servo id (1-127)")]
    NotAServoId {
        /// The item.
        text: String,
    },
    /// An id range whose end is below its start.
    #[error("range {range} runs backwards")]
    RangeBackwards {
        /// The range.
        range: String,
    },
    /// An empty id list.
    #[error("no servo ids given: write them like 1,2,3 or 1-3")]
    NoIds,
    /// The robot could not be built on the opened buses.
    #[error(transparent)]
    Robot(#[from] rtloop_io::SetupError),
    /// A bus did not open; `buses` are the bus numbers on that address.
    #[error("bus {}: {source}", .buses.iter().map(u8::to_string).collect::<Vec<_>>().join(", "))]
    Open {
        /// The bus numbers.
        buses: Vec<u8>,
        /// Why.
        source: rtloop_io::OpenError,
    },
}

impl ServoBusMap {
    /// The buses it names, every one on `transport` (a bus address; `None`: `pi3hat`).
    /// On a pi3hat a bus number is a connector, JC1-JC5. The ids are checked by
    /// [`RobotSpec::validate`].
    pub fn buses(&self, transport: Option<&str>) -> Result<Vec<BusSpec>, RobotSpecError> {
        let text = transport.unwrap_or(DEFAULT_MAP_TRANSPORT);
        let uri = rtloop_io::uri::parse(text)
            .map_err(|source| RobotSpecError::Transport { text: text.to_string(), source })?;
        if let BusUri::Pi3hat { .. } = uri {
            if let Some(&bus) = self.0.keys().find(|&&b| b > 5) {
                return Err(RobotSpecError::MapBusNotOnPi3hat { bus });
            }
        }
        if self.0.is_empty() {
            return Err(RobotSpecError::MapEmpty);
        }
        if let Some(&bus) = self.0.iter().find(|(_, ids)| ids.is_empty()).map(|(b, _)| b) {
            return Err(RobotSpecError::MapBusWithoutIds { bus });
        }
        Ok(self.0.iter().map(|(&bus, ids)| BusSpec { bus, uri: uri.clone(), servos: ids.clone() }).collect())
    }
}

/// The buses of a robot file that gives `[servo_bus_map]` (and perhaps `transport`), or
/// `None` when it gives neither. `bus_tables` says whether the file has `[[bus]]` tables too
/// (an error: one form or the other); `text` is the file, for the line of a mistake.
pub fn resolve_servo_bus_map(
    text: &str,
    bus_tables: bool,
    transport: Option<&str>,
    map: Option<&ServoBusMap>,
) -> Result<Option<Vec<BusSpec>>, RobotSpecError> {
    let at = |table: Option<&str>, key: &str, what: RobotSpecError| match key_line(text, table, key) {
        Some(line) => RobotSpecError::AtLine { line, source: Box::new(what) },
        None => what,
    };
    let Some(map) = map else {
        return match transport {
            Some(_) => Err(at(None, "transport", RobotSpecError::TransportWithoutMap)),
            None => Ok(None),
        };
    };
    if bus_tables {
        return Err(at(None, "servo_bus_map", RobotSpecError::BothForms));
    }
    map.buses(transport).map(Some).map_err(|e| match e {
        RobotSpecError::Transport { .. } => at(None, "transport", e),
        RobotSpecError::MapBusNotOnPi3hat { bus } | RobotSpecError::MapBusWithoutIds { bus } => {
            at(Some("servo_bus_map"), &bus.to_string(), e)
        }
        e => at(None, "servo_bus_map", e),
    })
}

/// A TOML error of a robot or run file as one sentence with its line; a `servo_bus_map` key
/// that is not a bus number is pointed at on its own line (the parser only knows its table).
pub(crate) fn file_error(text: &str, e: &toml::de::Error, hint: bool) -> RobotSpecError {
    RobotSpecError::Toml(file_error_text(text, e, hint))
}

fn file_error_text(text: &str, e: &toml::de::Error, hint: bool) -> String {
    let message = e.message().trim();
    let key = ["servo_bus_map key '", " twice ('"]
        .iter()
        .find_map(|m| message.split_once(m))
        .and_then(|(_, rest)| rest.split('\'').next());
    if let Some(line) = key.and_then(|k| key_line(text, Some("servo_bus_map"), k.trim())) {
        let source = text.lines().nth(line - 1).map_or("", str::trim);
        return format!("line {line} ({source}): {}", message.trim_end_matches('.'));
    }
    crate::toml_text::toml_error(text, e, hint)
}

/// The line (1-based) of `key` in `table` (`None`: the top level; a table header line
/// itself counts as the key's line), by a plain scan of the text: good enough to point at a
/// mistake, never needed for parsing.
fn key_line(text: &str, table: Option<&str>, key: &str) -> Option<usize> {
    let mut current: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if let Some(header) = l.strip_prefix('[') {
            let name = header.trim_start_matches('[').split(']').next().unwrap_or("").trim().to_string();
            if table.is_none() && name == key {
                return Some(i + 1);
            }
            current = Some(name);
            continue;
        }
        let Some((k, _)) = l.split_once('=') else { continue };
        let k = k.trim().trim_matches('"').trim_matches('\'');
        if k == key && current.as_deref() == table {
            return Some(i + 1);
        }
    }
    None
}

/// A robot file: `[[bus]]` tables, or `[servo_bus_map]` with an optional `transport`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RobotFile {
    #[serde(rename = "bus")]
    buses: Option<Vec<BusSpec>>,
    transport: Option<String>,
    servo_bus_map: Option<ServoBusMap>,
}

/// One bus of a robot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BusSpec {
    /// The bus number users see (1-based, like pi3hat's CAN ports).
    pub bus: u8,
    /// Where the bus is.
    #[serde(with = "uri_string")]
    pub uri: BusUri,
    /// Servo ids on this bus.
    pub servos: Vec<u8>,
}

mod uri_string {
    use rtloop_io::BusUri;
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(u: &BusUri, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&u.to_string())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BusUri, D::Error> {
        let text = String::deserialize(d)?;
        rtloop_io::uri::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A robot: its buses in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RobotSpec {
    /// Buses, in bus-number order.
    #[serde(rename = "bus")]
    pub buses: Vec<BusSpec>,
}

impl RobotSpec {
    /// The built-in simulated quadruped: ids 1-12, three per bus on buses 1-4.
    pub fn default_quadruped() -> Self {
        RobotSpec {
            buses: (1..=4u8)
                .map(|b| BusSpec { bus: b, uri: BusUri::Sim, servos: vec![3 * b - 2, 3 * b - 1, 3 * b] })
                .collect(),
        }
    }

    /// Every bus is simulated (`sim`, or a connector of the simulated pi3hat `pi3hat:sim`).
    pub fn all_simulated(&self) -> bool {
        self.buses
            .iter()
            .all(|b| matches!(b.uri, BusUri::Sim | BusUri::Pi3hat { carrier: rtloop_io::Pi3hatCarrier::Sim }))
    }

    /// Some bus is a pi3hat connector.
    pub fn has_pi3hat(&self) -> bool {
        self.buses.iter().any(|b| matches!(b.uri, BusUri::Pi3hat { .. }))
    }

    /// The query `rtloop run` (and `rtloop.Robot`) sends this robot's servos: the compact one
    /// on a pi3hat, where every reply byte crosses SPI at 0.8 µs plus the frames' 9 µs of
    /// holds, and the comprehensive query's 24-byte replies alone would keep a 12-servo
    /// cycle above 1 ms; the comprehensive one elsewhere.
    pub fn query_format(&self) -> rtloop_proto::host::QueryFormat {
        if self.has_pi3hat() {
            rtloop_proto::host::QueryFormat::compact()
        } else {
            rtloop_proto::host::QueryFormat::comprehensive()
        }
    }

    /// Number of servos.
    pub fn servo_count(&self) -> usize {
        self.buses.iter().map(|b| b.servos.len()).sum()
    }

    /// Check the spec; the error names what is wrong.
    pub fn validate(&self) -> Result<(), RobotSpecError> {
        if self.buses.is_empty() {
            return Err(RobotSpecError::NoBuses);
        }
        let mut seen = BTreeMap::new();
        for b in &self.buses {
            let bus = b.bus;
            if bus == 0 {
                return Err(RobotSpecError::BusZero);
            }
            if seen.insert(bus, ()).is_some() {
                return Err(RobotSpecError::BusTwice { bus });
            }
            if matches!(b.uri, BusUri::Pi3hat { .. }) && bus > 5 {
                return Err(RobotSpecError::BusNotOnPi3hat { bus });
            }
            if b.servos.is_empty() {
                return Err(RobotSpecError::BusWithoutIds { bus });
            }
            let mut ids = b.servos.clone();
            ids.sort_unstable();
            if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
                return Err(RobotSpecError::IdTwice { id: w[0], bus });
            }
            if let Some(&id) = ids.iter().find(|&&i| i == 0 || i > 127) {
                return Err(RobotSpecError::IdOutOfRange { id, bus });
            }
        }
        Ok(())
    }

    /// Parse a TOML robot file:
    ///
    /// ```toml
    /// [[bus]]
    /// bus = 1
    /// uri = "fdcanusb:/dev/ttyACM0"
    /// servos = [1, 2, 3]
    /// ```
    ///
    /// or, the same buses as the moteus pi3hat transport's `servo_bus_map`:
    ///
    /// ```toml
    /// transport = "fdcanusb:/dev/ttyACM0"   # optional; "pi3hat" by default
    /// [servo_bus_map]
    /// 1 = [1, 2, 3]
    /// ```
    pub fn from_toml(text: &str) -> Result<Self, RobotSpecError> {
        let file: RobotFile = toml::from_str(text).map_err(|e| file_error(text, &e, false))?;
        let from_map =
            resolve_servo_bus_map(text, file.buses.is_some(), file.transport.as_deref(), file.servo_bus_map.as_ref())?;
        let spec = RobotSpec {
            buses: match (from_map, file.buses) {
                (Some(buses), _) | (None, Some(buses)) => buses,
                (None, None) => return Err(RobotSpecError::NoBusInFile),
            },
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Build from `--bus N=URI` and `--ids N=LIST` flags.
    pub fn from_flags(buses: &[String], ids: &[String]) -> Result<Self, RobotSpecError> {
        let mut uris: BTreeMap<u8, BusUri> = BTreeMap::new();
        for b in buses {
            let (n, uri) = parse_bus_flag(b)?;
            if uris.insert(n, uri).is_some() {
                return Err(RobotSpecError::FlagBusTwice { bus: n });
            }
        }
        let mut servos: BTreeMap<u8, Vec<u8>> = BTreeMap::new();
        for i in ids {
            let (n, list) = split_numbered(i, "--ids", "1=1,2,3")?;
            if !uris.contains_key(&n) {
                return Err(RobotSpecError::IdsWithoutBus { text: i.clone(), bus: n });
            }
            let list = parse_id_list(list).map_err(|e| RobotSpecError::Ids { text: i.clone(), source: Box::new(e) })?;
            servos.entry(n).or_default().extend(list);
        }
        let spec = RobotSpec {
            buses: uris
                .into_iter()
                .map(|(bus, uri)| BusSpec { bus, uri, servos: servos.remove(&bus).unwrap_or_default() })
                .collect(),
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Open every bus and build the robot. Simulated buses get their servos and belong to the
    /// simulated robot that comes back beside it (`None` when no bus is simulated); the buses
    /// of one pi3hat share its board, whose IMU becomes the robot's; otherwise a fully
    /// simulated robot gets the simulated IMU. `sim.bus.fault_seed` is the run's seed: each
    /// simulated bus gets its own, derived from it and the bus number
    /// ([`rtloop_sim::bus_fault_seed`]), so no two buses lose the same frames.
    pub fn build<C: Clock + Clone + Send + 'static>(
        &self,
        clock: C,
        config: RobotConfig,
        options: rtloop_io::open::OpenOptions,
        sim: rtloop_simrobot::SimOptions,
    ) -> Result<(Robot<C>, Option<SimRobot>), RobotSpecError> {
        let opened = self.open(clock.clone(), options, sim)?;
        let servos = self.servo_specs();
        Ok((Robot::new(opened.transports, servos, opened.imu, clock, config)?, opened.sim))
    }

    /// Open every bus (see [`build`](Self::build)).
    pub fn open<C: Clock + Clone + Send + 'static>(
        &self,
        clock: C,
        options: rtloop_io::open::OpenOptions,
        sim: rtloop_simrobot::SimOptions,
    ) -> Result<OpenedRobot, RobotSpecError> {
        self.validate()?;
        let requests: Vec<rtloop_io::open::BusRequest<'_>> = self
            .buses
            .iter()
            .map(|b| rtloop_io::open::BusRequest { number: b.bus, uri: &b.uri, servo_ids: &b.servos })
            .collect();
        let (opened, simulated) = rtloop_simrobot::open_buses(&requests, clock, options, sim).map_err(|source| {
            let buses = self.buses.iter().filter(|b| b.uri.to_string() == source.uri).map(|b| b.bus).collect();
            RobotSpecError::Open { buses, source }
        })?;
        Ok(OpenedRobot { transports: opened.transports, imu: opened.imu, sim: simulated })
    }

    /// Every servo with the index of its bus.
    pub fn servo_specs(&self) -> Vec<ServoSpec> {
        let mut servos = Vec::new();
        for (index, b) in self.buses.iter().enumerate() {
            servos.extend(b.servos.iter().map(|&id| ServoSpec { bus: index, id }));
        }
        servos
    }
}

/// One `--bus N=URI` flag.
pub fn parse_bus_flag(text: &str) -> Result<(u8, BusUri), RobotSpecError> {
    let (n, uri) = split_numbered(text, "--bus", "1=fdcanusb:/dev/ttyACM0")?;
    let uri = rtloop_io::uri::parse(uri).map_err(|source| RobotSpecError::BusUri { text: text.to_string(), source })?;
    Ok((n, uri))
}

fn split_numbered<'a>(text: &'a str, flag: &str, example: &str) -> Result<(u8, &'a str), RobotSpecError> {
    let Some((n, rest)) = text.split_once('=') else {
        return Err(RobotSpecError::NotNumbered { flag: flag.into(), text: text.into(), example: example.into() });
    };
    let n: u8 = n.trim().parse().ok().filter(|&n| n >= 1).ok_or_else(|| RobotSpecError::NotABusNumber {
        flag: flag.into(),
        text: text.into(),
        bus: n.into(),
        example: example.into(),
    })?;
    Ok((n, rest.trim()))
}

/// `1,2,3`, `1-3` or a mix (`1-3,7`).
pub fn parse_id_list(text: &str) -> Result<Vec<u8>, RobotSpecError> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let id = |s: &str| -> Result<u8, RobotSpecError> {
            s.trim()
                .parse::<u8>()
                .ok()
                .filter(|i| (1..=127).contains(i))
                .ok_or_else(|| RobotSpecError::NotAServoId { text: s.to_string() })
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (id(a)?, id(b)?);
                if a > b {
                    return Err(RobotSpecError::RangeBackwards { range: part.to_string() });
                }
                out.extend(a..=b);
            }
            None => out.push(id(part)?),
        }
    }
    if out.is_empty() {
        return Err(RobotSpecError::NoIds);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_build_a_robot_spec() {
        let s =
            RobotSpec::from_flags(&["2=udp:127.0.0.1:9000".into(), "1=sim".into()], &["1=1-3".into(), "2=1,4".into()])
                .unwrap();
        assert_eq!(s.buses.len(), 2);
        assert_eq!(s.buses[0].bus, 1);
        assert_eq!(s.buses[0].servos, vec![1, 2, 3]);
        // The same servo id may live on different buses.
        assert_eq!(s.buses[1].servos, vec![1, 4]);
    }

    #[test]
    fn flag_mistakes_are_named() {
        let cases: &[(&[&str], &[&str], &str)] = &[
            (&[], &[], "no buses"),
            (&["1=sim"], &[], "no servo ids"),
            (&["x=sim"], &["1=1"], "not a bus number"),
            (&["1sim"], &["1=1"], "expected BUS=VALUE"),
            (&["1=serial:/dev/x"], &["1=1"], "unknown transport"),
            (&["1=sim"], &["2=1"], "no --bus 2"),
            (&["1=sim"], &["1=1,1"], "twice"),
            (&["1=sim"], &["1=200"], "not a servo id"),
            (&["1=sim", "1=sim"], &["1=1"], "given twice"),
            (&["6=pi3hat:sim"], &["6=1"], "connector JC N"),
        ];
        for (b, i, want) in cases {
            let b: Vec<String> = b.iter().map(|s| s.to_string()).collect();
            let i: Vec<String> = i.iter().map(|s| s.to_string()).collect();
            let e = RobotSpec::from_flags(&b, &i).unwrap_err().to_string();
            assert!(e.contains(want), "{b:?} {i:?}: {e}");
        }
    }

    #[test]
    fn toml_round_trips() {
        let spec = RobotSpec::default_quadruped();
        let text = toml::to_string(&spec).unwrap();
        assert_eq!(RobotSpec::from_toml(&text).unwrap(), spec);
        let e = RobotSpec::from_toml("[[bus]]\nbus = 1\nuri = \"nope\"\nservos = [1]\n").unwrap_err().to_string();
        assert!(e.contains("not a bus address"), "{e}");
    }

    const MAP: &str = "transport = \"pi3hat:sim\"\n[servo_bus_map]\n1 = [11, 12, 13]\n2 = [21, 22, 23]\n";

    #[test]
    fn a_servo_bus_map_is_the_same_robot_as_its_bus_tables() {
        let tables = "[[bus]]\nbus = 1\nuri = \"pi3hat:sim\"\nservos = [11, 12, 13]\n\n\
                      [[bus]]\nbus = 2\nuri = \"pi3hat:sim\"\nservos = [21, 22, 23]\n";
        let from_map = RobotSpec::from_toml(MAP).unwrap();
        assert_eq!(from_map, RobotSpec::from_toml(tables).unwrap());
        assert_eq!(from_map.buses[1].servos, vec![21, 22, 23]);
        // A run configuration takes the same shape, with its other keys.
        let run = crate::config::RunConfig::from_toml(&format!("rate_hz = 500.0\n{MAP}")).unwrap();
        assert_eq!(run.robot(), from_map);
        assert_eq!(run.rate_hz, 500.0);
        assert_eq!(run, crate::config::RunConfig::from_toml(&format!("rate_hz = 500.0\n{tables}")).unwrap());
        // Printed back, it is [[bus]] tables, which read back the same.
        let printed = run.to_toml();
        assert!(printed.contains("[[bus]]") && !printed.contains("servo_bus_map"), "{printed}");
        assert_eq!(crate::config::RunConfig::from_toml(&printed).unwrap(), run);
    }

    #[test]
    fn a_servo_bus_map_defaults_to_the_pi3hat_and_takes_any_bus_address() {
        let spec = RobotSpec::from_toml("[servo_bus_map]\n3 = [1]\n1 = [2, 4]\n").unwrap();
        assert_eq!(spec.buses.len(), 2);
        assert_eq!(spec.buses[0].bus, 1, "in bus order");
        assert_eq!(spec.buses[0].uri, BusUri::Pi3hat { carrier: rtloop_io::Pi3hatCarrier::Auto });
        let spec = RobotSpec::from_toml("transport = \"sim\"\n[servo_bus_map]\n200 = [5]\n").unwrap();
        assert_eq!(spec.buses[0], BusSpec { bus: 200, uri: BusUri::Sim, servos: vec![5] });
        let inline = RobotSpec::from_toml("servo_bus_map = { 1 = [11, 12, 13], 2 = [21, 22, 23] }\n").unwrap();
        assert_eq!(inline.buses.len(), 2);
    }

    #[test]
    fn servo_bus_map_mistakes_are_one_sentence_with_the_line() {
        let cases: &[(&str, &str)] = &[
            ("[servo_bus_map]\nx = [1]\n", "line 2 (x = [1]): servo_bus_map key 'x' is not a bus number"),
            ("[servo_bus_map]\n0 = [1]\n", "line 2 (0 = [1]): servo_bus_map key '0' is not a bus number"),
            ("[servo_bus_map]\n1 = [1]\n256 = [2]\n", "line 3 (256 = [2]): servo_bus_map key '256'"),
            ("[servo_bus_map]\n1 = [1]\n6 = [2]\n", "line 3: servo_bus_map bus 6 cannot be on a pi3hat"),
            (
                "transport = \"pi3hat:sim\"\n[servo_bus_map]\n9 = [1]\n",
                "line 3: servo_bus_map bus 9 cannot be on a pi3hat",
            ),
            ("[servo_bus_map]\n1 = [1]\n01 = [2]\n", "names bus 1 twice"),
            ("[servo_bus_map]\n1 = []\n", "line 2: servo_bus_map bus 1 has no servo ids"),
            ("[servo_bus_map]\n", "servo_bus_map names no bus"),
            ("[servo_bus_map]\n1 = [300]\n", "line 2 (1 = [300])"),
            ("[servo_bus_map]\n1 = 5\n", "line 2 (1 = 5)"),
            ("[servo_bus_map]\n1 = [128]\n", "servo id 128 on bus 1 is outside 1..=127"),
            ("[servo_bus_map]\n1 = [3, 3]\n", "servo id 3 appears twice on bus 1"),
            ("transport = \"serial:x\"\n[servo_bus_map]\n1 = [1]\n", "line 1: transport = \"serial:x\""),
            ("transport = \"sim\"\n", "line 1: transport only applies to a [servo_bus_map] table"),
            (
                "[[bus]]\nbus = 1\nuri = \"sim\"\nservos = [1]\n[servo_bus_map]\n1 = [1]\n",
                "line 5: a robot file gives its buses as [[bus]] tables or as one [servo_bus_map] table, not both",
            ),
            ("servo_bus_mapp = 1\n", "line 1 (servo_bus_mapp = 1): unknown field `servo_bus_mapp`"),
            ("[servo_bus_map]\n1 = [1]\nspeed = 2\n", "line 3 (speed = 2): servo_bus_map key 'speed'"),
        ];
        for (text, want) in cases {
            let e = RobotSpec::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
            let e = crate::config::RunConfig::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(want), "run config {text:?}: {e}");
        }
        let e = RobotSpec::from_toml("").unwrap_err();
        assert!(matches!(e, RobotSpecError::NoBusInFile), "{e:?}");
        assert!(e.to_string().contains("names no bus"), "{e}");
    }

    #[test]
    fn a_refusal_carries_the_bus_the_id_and_the_line() {
        let e = RobotSpec::from_toml("transport = \"pi3hat\"\n[servo_bus_map]\n1 = [1]\n6 = [2]\n").unwrap_err();
        let RobotSpecError::AtLine { line: 4, source } = &e else { panic!("{e:?}") };
        assert!(matches!(**source, RobotSpecError::MapBusNotOnPi3hat { bus: 6 }), "{e:?}");
        let e = RobotSpec::from_flags(&["1=sim".into()], &["1=3,3".into()]).unwrap_err();
        assert!(matches!(e, RobotSpecError::IdTwice { id: 3, bus: 1 }), "{e:?}");
        assert_eq!(e.to_string(), "servo id 3 appears twice on bus 1");
        let e = parse_id_list("4-2").unwrap_err();
        assert!(matches!(&e, RobotSpecError::RangeBackwards { range } if range == "4-2"), "{e:?}");
    }
}
