//! Which buses a robot has, what carries each one and which servo ids live on it — from
//! command-line flags (`--bus 1=fdcanusb:/dev/ttyACM0 --ids 1=1,2,3`) or a TOML file.
//!
//! Must never: guess. A bus without ids, ids without a bus, a repeated bus number, a
//! malformed list or an unknown key in a `[[bus]]` table is one clear error that names the
//! flag or line and shows a correct form.

use io::{BusUri, Clock, Robot, RobotConfig, ServoSpec, Transport};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    use io::BusUri;
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(u: &BusUri, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&u.to_string())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BusUri, D::Error> {
        let text = String::deserialize(d)?;
        io::uri::parse(&text).map_err(serde::de::Error::custom)
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
        self.buses.iter().all(|b| matches!(b.uri, BusUri::Sim | BusUri::Pi3hat { carrier: io::Pi3hatCarrier::Sim }))
    }

    /// Some bus is a pi3hat connector.
    pub fn has_pi3hat(&self) -> bool {
        self.buses.iter().any(|b| matches!(b.uri, BusUri::Pi3hat { .. }))
    }

    /// The query `rtloop run` (and `rtloop.Robot`) sends this robot's servos: the compact one
    /// on a pi3hat, where every reply byte crosses SPI at 0.8 µs plus the frames' 9 µs of
    /// holds, and the comprehensive query's 24-byte replies alone would keep a 12-servo
    /// cycle above 1 ms; the comprehensive one elsewhere.
    pub fn query_format(&self) -> proto::host::QueryFormat {
        if self.has_pi3hat() {
            proto::host::QueryFormat::compact()
        } else {
            proto::host::QueryFormat::comprehensive()
        }
    }

    /// Number of servos.
    pub fn servo_count(&self) -> usize {
        self.buses.iter().map(|b| b.servos.len()).sum()
    }

    /// Check the spec; the error names what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.buses.is_empty() {
            return Err("the robot has no buses: give at least one --bus N=URI".into());
        }
        let mut seen = BTreeMap::new();
        for b in &self.buses {
            if b.bus == 0 {
                return Err("bus numbers start at 1".into());
            }
            if seen.insert(b.bus, ()).is_some() {
                return Err(format!("bus {} is given twice", b.bus));
            }
            if matches!(b.uri, BusUri::Pi3hat { .. }) && b.bus > 5 {
                return Err(format!(
                    "bus {} cannot be on a pi3hat: bus N is its connector JC N, so give pi3hat buses numbers 1 to 5",
                    b.bus
                ));
            }
            if b.servos.is_empty() {
                return Err(format!(
                    "bus {} has no servo ids: add --ids {}=1,2,3 (or servos = [..] in the file)",
                    b.bus, b.bus
                ));
            }
            let mut ids = b.servos.clone();
            ids.sort_unstable();
            if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
                return Err(format!("servo id {} appears twice on bus {}", w[0], b.bus));
            }
            if let Some(bad) = ids.iter().find(|&&i| i == 0 || i > 127) {
                return Err(format!("servo id {bad} on bus {} is outside 1..=127", b.bus));
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
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let spec: RobotSpec = toml::from_str(text).map_err(|e| e.message().trim().replace('\n', " "))?;
        spec.validate()?;
        Ok(spec)
    }

    /// Build from `--bus N=URI` and `--ids N=LIST` flags.
    pub fn from_flags(buses: &[String], ids: &[String]) -> Result<Self, String> {
        let mut uris: BTreeMap<u8, BusUri> = BTreeMap::new();
        for b in buses {
            let (n, uri) = parse_bus_flag(b)?;
            if uris.insert(n, uri).is_some() {
                return Err(format!("--bus {n} is given twice"));
            }
        }
        let mut servos: BTreeMap<u8, Vec<u8>> = BTreeMap::new();
        for i in ids {
            let (n, list) = split_numbered(i, "--ids", "1=1,2,3")?;
            if !uris.contains_key(&n) {
                return Err(format!("--ids {i} names bus {n}, but there is no --bus {n}=URI"));
            }
            servos.entry(n).or_default().extend(parse_id_list(list).map_err(|e| format!("--ids {i}: {e}"))?);
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

    /// Open every bus and build the robot. Simulated buses get their servos; the buses of one
    /// pi3hat share its board, whose IMU becomes the robot's; otherwise a fully simulated
    /// robot gets the simulated IMU. `options.sim_bus.fault_seed` is the run's seed: each
    /// simulated bus gets its own, derived from it and the bus number
    /// ([`sim::bus_fault_seed`]), so no two buses lose the same frames.
    pub fn build<C: Clock + Clone + Send + 'static>(
        &self,
        clock: C,
        config: RobotConfig,
        options: io::open::OpenOptions,
    ) -> Result<Robot<C>, String> {
        let (transports, imu) = self.open(clock.clone(), options)?;
        let servos = self.servo_specs();
        Robot::new(transports, servos, imu, clock, config).map_err(|e| e.to_string())
    }

    /// Open every bus (see [`build`](Self::build)): the transports in bus order, and the IMU.
    #[allow(clippy::type_complexity)]
    pub fn open<C: Clock + Clone + Send + 'static>(
        &self,
        clock: C,
        options: io::open::OpenOptions,
    ) -> Result<(Vec<Box<dyn Transport>>, Option<Box<dyn io::ImuSource>>), String> {
        self.validate()?;
        let requests: Vec<io::open::BusRequest<'_>> = self
            .buses
            .iter()
            .map(|b| io::open::BusRequest { number: b.bus, uri: &b.uri, sim_servo_ids: &b.servos })
            .collect();
        let opened = io::open::open_buses(&requests, clock, options).map_err(|e| {
            let numbers: Vec<String> =
                self.buses.iter().filter(|b| b.uri.to_string() == e.uri).map(|b| b.bus.to_string()).collect();
            format!("bus {}: {e}", numbers.join(", "))
        })?;
        let imu = opened.imu.or_else(|| self.all_simulated().then(io::open::sim_imu));
        Ok((opened.transports, imu))
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
pub fn parse_bus_flag(text: &str) -> Result<(u8, BusUri), String> {
    let (n, uri) = split_numbered(text, "--bus", "1=fdcanusb:/dev/ttyACM0")?;
    let uri = io::uri::parse(uri).map_err(|e| format!("--bus {text}: {e}"))?;
    Ok((n, uri))
}

fn split_numbered<'a>(text: &'a str, flag: &str, example: &str) -> Result<(u8, &'a str), String> {
    let Some((n, rest)) = text.split_once('=') else {
        return Err(format!("{flag} {text}: expected BUS=VALUE, e.g. {flag} {example}"));
    };
    let n: u8 = n
        .trim()
        .parse()
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| format!("{flag} {text}: '{n}' is not a bus number (1-255), e.g. {flag} {example}"))?;
    Ok((n, rest.trim()))
}

/// `1,2,3`, `1-3` or a mix (`1-3,7`).
pub fn parse_id_list(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let id = |s: &str| -> Result<u8, String> {
            s.trim()
                .parse::<u8>()
                .ok()
                .filter(|i| (1..=127).contains(i))
                .ok_or_else(|| format!("'{s}' is not a servo id (1-127)"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (id(a)?, id(b)?);
                if a > b {
                    return Err(format!("range {part} runs backwards"));
                }
                out.extend(a..=b);
            }
            None => out.push(id(part)?),
        }
    }
    if out.is_empty() {
        return Err("no servo ids given: write them like 1,2,3 or 1-3".into());
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
            let e = RobotSpec::from_flags(&b, &i).unwrap_err();
            assert!(e.contains(want), "{b:?} {i:?}: {e}");
        }
    }

    #[test]
    fn toml_round_trips() {
        let spec = RobotSpec::default_quadruped();
        let text = toml::to_string(&spec).unwrap();
        assert_eq!(RobotSpec::from_toml(&text).unwrap(), spec);
        let e = RobotSpec::from_toml("[[bus]]\nbus = 1\nuri = \"nope\"\nservos = [1]\n").unwrap_err();
        assert!(e.contains("not a bus address"), "{e}");
    }
}
