//! Simulated servos served behind real operating-system devices — a pseudo-terminal speaking
//! the fdcanusb protocol, or a UDP port — so that unmodified moteus clients, and rtloop's own
//! transports, can drive them: what `rtloop sim` and the Python package's `rtloop.sim` serve.
//! Who it is for: those two (they share it so both refuse the same flags, paths and
//! addresses); a robot builder's control law never needs it. The serving itself is
//! rtloop-simrobot's ([`rtloop_simrobot::serve`]); this module turns the flags, read as a robot
//! file's buses are ([`crate::robot_spec`]), into what to serve.
//!
//! [`plan`] turns flags into [`ServedSpec`]s, [`load_buses`] builds the simulated buses and
//! loads each servo's stored configuration (`config_dir`: `DIR/bus<B>-servo<ID>.cfg`, see
//! [`rtloop_simrobot::serve::persist`]), and [`endpoint`] creates the device side of one bus; serving
//! them is [`rtloop_simrobot::serve::runner`]'s.
//!
//! Must never: serve on an address other hosts can reach unless told to (`allow_remote`);
//! replace anything at a `fdcanusb:` path but a stale link of a killed simulator (the rules
//! are in [`rtloop_simrobot::serve::pty`]); read or write a configuration through a link (the rules are
//! in [`rtloop_simrobot::serve::persist`]).

use crate::robot_spec::parse_id_list;
use rtloop_io::BusUri;
use rtloop_simrobot::serve::Endpoint;
use std::path::Path;

/// What is wrong with the buses asked for: `Display` is the one sentence `rtloop sim` (with
/// its `rtloop sim: ` prefix) and `rtloop.sim` print.
#[derive(Debug)]
#[non_exhaustive]
pub enum SimBusError {
    /// `--fdcanusb`/`--udp` and `--bus` together.
    OneAndSeveral,
    /// `--fdcanusb` and `--udp` together.
    FdcanusbAndUdp,
    /// `--servos` is not a list of ids.
    Servos(String),
    /// An id given twice on one bus.
    DuplicateId(u8),
    /// `--udp ADDR:PORT` is not an address.
    Udp {
        /// What was given.
        address: String,
        /// Why it is not an address.
        error: String,
    },
    /// No bus at all.
    NothingToServe,
    /// `--servos` with `--bus`.
    ServosWithBuses,
    /// The `--bus`/`--ids` flags are wrong.
    Flags(String),
    /// A bus whose kind cannot be served (only `fdcanusb:` and `udp:` can).
    CannotServe {
        /// Its number.
        bus: u8,
        /// Its address.
        uri: BusUri,
    },
    /// An address [`endpoint`] cannot serve.
    CannotServeUri(BusUri),
    /// The device cannot be created (a path that is taken, an address that cannot be bound).
    Device(rtloop_io::OpenError),
    /// The configuration directory or a stored configuration cannot be read.
    Config(rtloop_simrobot::serve::ConfigStoreError),
}

impl std::fmt::Display for SimBusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimBusError::OneAndSeveral => {
                f.write_str("give either --fdcanusb/--udp (one bus) or --bus N=URI (several), not both")
            }
            SimBusError::FdcanusbAndUdp => {
                f.write_str("give one of --fdcanusb PATH or --udp ADDR:PORT; serve several buses with --bus N=URI")
            }
            SimBusError::Servos(e) => write!(f, "--servos: {e}"),
            SimBusError::DuplicateId(id) => {
                write!(f, "--servos: servo id {id} is given twice; each id may answer only once on a bus")
            }
            SimBusError::Udp { address, error } => write!(f, "--udp {address}: {error}"),
            SimBusError::NothingToServe => f.write_str(
                "nothing to serve: give --fdcanusb PATH, --udp ADDR:PORT, or --bus N=fdcanusb:PATH|udp:ADDR:PORT",
            ),
            SimBusError::ServosWithBuses => {
                f.write_str("--servos goes with --fdcanusb/--udp; with --bus use --ids N=LIST")
            }
            SimBusError::Flags(e) => f.write_str(e),
            SimBusError::Config(e) => write!(f, "{e}"),
            SimBusError::CannotServe { bus, uri } => {
                write!(f, "bus {bus}: rtloop sim serves fdcanusb: and udp: buses, not {uri}")
            }
            SimBusError::CannotServeUri(uri) => write!(f, "rtloop sim cannot serve {uri}"),
            SimBusError::Device(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SimBusError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SimBusError::Device(e) => Some(e),
            SimBusError::Config(e) => Some(e),
            _ => None,
        }
    }
}

/// One served bus as the user asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedSpec {
    /// Bus number (1-based).
    pub bus: u8,
    /// `fdcanusb:PATH` (the link to create) or `udp:HOST:PORT` (the address to bind).
    pub uri: BusUri,
    /// Simulated servo ids on it.
    pub servos: Vec<u8>,
}

/// What `rtloop sim` was asked to do.
#[derive(Debug, Clone)]
pub struct SimRequest {
    /// The buses.
    pub buses: Vec<ServedSpec>,
    /// Allow binding UDP to a non-loopback address.
    pub allow_remote: bool,
    /// Stop after this long (default: until Ctrl-C).
    pub duration_s: Option<f64>,
    /// Simulated wires take no time and servos answer at once (measure clients, not CAN-FD).
    pub no_wire_time: bool,
    /// Spin instead of sleeping between client requests.
    pub busy_poll: bool,
    /// Where the servos' configurations are kept (`conf write`); `None`: memory only.
    pub config_dir: Option<std::path::PathBuf>,
}

/// Turn the flags into served buses: `--fdcanusb PATH` / `--udp ADDR:PORT` with `--servos`
/// for a single bus, or `--bus N=URI` with `--ids N=LIST` for several.
pub fn plan(
    fdcanusb: Option<&str>,
    udp: Option<&str>,
    servos: Option<&str>,
    buses: &[String],
    ids: &[String],
) -> Result<Vec<ServedSpec>, SimBusError> {
    let mut out = Vec::new();
    let single = fdcanusb.is_some() || udp.is_some();
    if single && !buses.is_empty() {
        return Err(SimBusError::OneAndSeveral);
    }
    if single {
        if fdcanusb.is_some() && udp.is_some() {
            return Err(SimBusError::FdcanusbAndUdp);
        }
        let servos = parse_id_list(servos.unwrap_or("1")).map_err(|e| SimBusError::Servos(e.to_string()))?;
        let mut sorted = servos.clone();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(SimBusError::DuplicateId(w[0]));
        }
        let uri = match (fdcanusb, udp) {
            (Some(p), _) => BusUri::Fdcanusb { path: p.to_string() },
            (_, Some(a)) => rtloop_io::uri::parse(&format!("udp:{a}"))
                .map_err(|e| SimBusError::Udp { address: a.to_string(), error: e.to_string() })?,
            _ => unreachable!("single implies one of them"),
        };
        out.push(ServedSpec { bus: 1, uri, servos });
        return Ok(out);
    }
    if buses.is_empty() {
        return Err(SimBusError::NothingToServe);
    }
    if servos.is_some() {
        return Err(SimBusError::ServosWithBuses);
    }
    let spec = crate::robot_spec::RobotSpec::from_flags(buses, ids).map_err(|e| SimBusError::Flags(e.to_string()))?;
    for b in spec.buses {
        match b.uri {
            BusUri::Fdcanusb { .. } | BusUri::Udp { .. } => {
                out.push(ServedSpec { bus: b.bus, uri: b.uri, servos: b.servos })
            }
            other => return Err(SimBusError::CannotServe { bus: b.bus, uri: other }),
        }
    }
    Ok(out)
}

/// The device side of `spec`: a pty linked at its `fdcanusb:` path, or a UDP socket bound at
/// its `udp:` address (an address other hosts can reach only with `allow_remote`). Shared with
/// the Python package's `rtloop.sim`, so both refuse the same paths and addresses.
pub fn endpoint(spec: &ServedSpec, allow_remote: bool) -> Result<Box<dyn Endpoint>, SimBusError> {
    match &spec.uri {
        BusUri::Fdcanusb { path } => rtloop_simrobot::serve::pty::PtyFdcanusbEndpoint::create(Path::new(path))
            .map(|e| Box::new(e) as Box<dyn Endpoint>)
            .map_err(SimBusError::Device),
        BusUri::Udp { host, port, bus } => {
            let addr = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
            rtloop_simrobot::serve::UdpEndpoint::bind(&addr, *bus, allow_remote)
                .map(|e| Box::new(e) as Box<dyn Endpoint>)
                .map_err(SimBusError::Device)
        }
        other => Err(SimBusError::CannotServeUri(other.clone())),
    }
}

/// The simulated buses of a request, each with its servos powered up from their stored
/// configurations (when `config_dir` is given), before any device exists.
#[derive(Debug)]
pub struct LoadedBuses {
    /// Per requested bus, in order: the bus and where its `conf write`s go.
    pub buses: Vec<(rtloop_sim::SimBus, Option<rtloop_simrobot::serve::ConfigStore>)>,
    /// The configuration directory, when one was given.
    pub config_dir: Option<std::sync::Arc<rtloop_simrobot::serve::ConfigDir>>,
    /// Problems worth a warning (a stored line that cannot be applied, two servos on one id).
    pub warnings: Vec<String>,
    /// What the start should say (a servo that a stored `id.id` moved to another id).
    pub notes: Vec<String>,
}

/// Build the simulated buses of `req` and load every stored configuration into them. A file
/// that cannot be read stops the start with nothing to clean up (no device is created here).
/// Shared with the Python package's `rtloop.sim`; the texts carry no `rtloop sim:` prefix.
pub fn load_buses(req: &SimRequest) -> Result<LoadedBuses, SimBusError> {
    let config_dir = match &req.config_dir {
        Some(path) => {
            Some(std::sync::Arc::new(rtloop_simrobot::serve::ConfigDir::open(path).map_err(SimBusError::Config)?))
        }
        None => None,
    };
    let mut buses = Vec::new();
    let mut warnings = Vec::new();
    let mut notes = Vec::new();
    for spec in &req.buses {
        let config = if req.no_wire_time {
            rtloop_sim::BusConfig::without_wire_time()
        } else {
            rtloop_sim::BusConfig::default()
        };
        let mut bus = rtloop_sim::SimBus::new(config);
        for &id in &spec.servos {
            bus.add_servo(rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(id)));
        }
        let store = config_dir
            .as_ref()
            .map(|dir| rtloop_simrobot::serve::ConfigStore::new(dir.clone(), spec.bus, spec.servos.clone()));
        if let Some(store) = &store {
            let loaded = store.load_into(&mut bus).map_err(SimBusError::Config)?;
            warnings.extend(loaded.warnings.iter().cloned());
            for (slot, id) in &loaded.renamed {
                notes.push(format!(
                    "bus {}: servo {slot} answers to id {id} (its stored configuration, {}, sets id.id {id})",
                    spec.bus,
                    store
                        .dir()
                        .path()
                        .join(rtloop_simrobot::serve::persist::config_file_name(spec.bus, *slot))
                        .display()
                ));
            }
            let mut ids: Vec<u8> = bus.servos().iter().map(rtloop_sim::Servo::id).collect();
            ids.sort_unstable();
            if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
                warnings.push(format!(
                    "bus {}: two servos answer to id {}; change id.id on one of them (conf set id.id N, conf write, d reset)",
                    spec.bus, w[0]
                ));
            }
        }
        buses.push((bus, store));
    }
    Ok(LoadedBuses { buses, config_dir, warnings, notes })
}
