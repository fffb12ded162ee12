//! `rtloop sim`: the simulated servos behind real operating-system devices — a
//! pseudo-terminal speaking the fdcanusb protocol, or a UDP port — so that unmodified moteus
//! clients, and rtloop's own transports, can drive them. Runs until Ctrl-C.
//!
//! Every servo serves its diagnostic console as well as its registers. `--config-dir DIR`
//! keeps each servo's configuration in `DIR/bus<B>-servo<ID>.cfg` ([`io::serve::persist`]):
//! loaded at start (a line that cannot be applied is a warning naming the file and line; a
//! stored `id.id` moves the servo to that id, and the start says so), written whenever a
//! client sends `conf write`. Without it, `conf write` keeps the configuration in memory
//! only, and the closing report says how many were lost.
//!
//! Must never: serve on an address other hosts can reach unless told to
//! (`--allow-remote`); replace anything at a `--fdcanusb` path but a stale link of a killed
//! simulator (the rules are in [`io::serve::pty`]); read or write a configuration through a
//! link (the rules are in [`io::serve::persist`]); or start with a number it cannot honour
//! (every flag is range-checked first, see `numbers`).

use crate::numbers::{seconds_from_user, MAX_DURATION_S};
use crate::robot_spec::parse_id_list;
use io::serve::Endpoint;
use io::BusUri;
use std::path::Path;

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
) -> Result<Vec<ServedSpec>, String> {
    let mut out = Vec::new();
    let single = fdcanusb.is_some() || udp.is_some();
    if single && !buses.is_empty() {
        return Err("give either --fdcanusb/--udp (one bus) or --bus N=URI (several), not both".into());
    }
    if single {
        if fdcanusb.is_some() && udp.is_some() {
            return Err("give one of --fdcanusb PATH or --udp ADDR:PORT; serve several buses with --bus N=URI".into());
        }
        let servos = parse_id_list(servos.unwrap_or("1")).map_err(|e| format!("--servos: {e}"))?;
        let mut sorted = servos.clone();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("--servos: servo id {} is given twice; each id may answer only once on a bus", w[0]));
        }
        let uri = match (fdcanusb, udp) {
            (Some(p), _) => BusUri::Fdcanusb { path: p.to_string() },
            (_, Some(a)) => io::uri::parse(&format!("udp:{a}")).map_err(|e| format!("--udp {a}: {e}"))?,
            _ => unreachable!("single implies one of them"),
        };
        out.push(ServedSpec { bus: 1, uri, servos });
        return Ok(out);
    }
    if buses.is_empty() {
        return Err(
            "nothing to serve: give --fdcanusb PATH, --udp ADDR:PORT, or --bus N=fdcanusb:PATH|udp:ADDR:PORT".into()
        );
    }
    if servos.is_some() {
        return Err("--servos goes with --fdcanusb/--udp; with --bus use --ids N=LIST".into());
    }
    let spec = crate::robot_spec::RobotSpec::from_flags(buses, ids)?;
    for b in spec.buses {
        match b.uri {
            BusUri::Fdcanusb { .. } | BusUri::Udp { .. } => {
                out.push(ServedSpec { bus: b.bus, uri: b.uri, servos: b.servos })
            }
            other => return Err(format!("bus {}: rtloop sim serves fdcanusb: and udp: buses, not {other}", b.bus)),
        }
    }
    Ok(out)
}

/// The device side of `spec`: a pty linked at its `fdcanusb:` path, or a UDP socket bound at
/// its `udp:` address (an address other hosts can reach only with `allow_remote`). Shared with
/// the Python package's `rtloop.sim`, so both refuse the same paths and addresses.
pub fn endpoint(spec: &ServedSpec, allow_remote: bool) -> Result<Box<dyn Endpoint>, String> {
    match &spec.uri {
        BusUri::Fdcanusb { path } => io::serve::pty::PtyFdcanusbEndpoint::create(Path::new(path))
            .map(|e| Box::new(e) as Box<dyn Endpoint>)
            .map_err(|e| e.to_string()),
        BusUri::Udp { host, port, bus } => {
            let addr = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
            io::udp::UdpEndpoint::bind(&addr, *bus, allow_remote)
                .map(|e| Box::new(e) as Box<dyn Endpoint>)
                .map_err(|e| e.to_string())
        }
        other => Err(format!("rtloop sim cannot serve {other}")),
    }
}

/// The simulated buses of a request, each with its servos powered up from their stored
/// configurations (when `config_dir` is given), before any device exists.
#[derive(Debug)]
pub struct LoadedBuses {
    /// Per requested bus, in order: the bus and where its `conf write`s go.
    pub buses: Vec<(sim::SimBus, Option<io::serve::ConfigStore>)>,
    /// The configuration directory, when one was given.
    pub config_dir: Option<std::sync::Arc<io::serve::ConfigDir>>,
    /// Problems worth a warning (a stored line that cannot be applied, two servos on one id).
    pub warnings: Vec<String>,
    /// What the start should say (a servo that a stored `id.id` moved to another id).
    pub notes: Vec<String>,
}

/// Build the simulated buses of `req` and load every stored configuration into them. A file
/// that cannot be read stops the start with nothing to clean up (no device is created here).
/// Shared with the Python package's `rtloop.sim`; the texts carry no `rtloop sim:` prefix.
pub fn load_buses(req: &SimRequest) -> Result<LoadedBuses, String> {
    let config_dir = match &req.config_dir {
        Some(path) => Some(std::sync::Arc::new(io::serve::ConfigDir::open(path).map_err(|e| e.to_string())?)),
        None => None,
    };
    let mut buses = Vec::new();
    let mut warnings = Vec::new();
    let mut notes = Vec::new();
    for spec in &req.buses {
        let config = if req.no_wire_time { sim::BusConfig::without_wire_time() } else { sim::BusConfig::default() };
        let mut bus = sim::SimBus::new(config);
        for &id in &spec.servos {
            bus.add_servo(sim::Servo::new(sim::ServoConfig::new(id)));
        }
        let store =
            config_dir.as_ref().map(|dir| io::serve::ConfigStore::new(dir.clone(), spec.bus, spec.servos.clone()));
        if let Some(store) = &store {
            let loaded = store.load_into(&mut bus).map_err(|e| e.to_string())?;
            warnings.extend(loaded.warnings.iter().cloned());
            for (slot, id) in &loaded.renamed {
                notes.push(format!(
                    "bus {}: servo {slot} answers to id {id} (its stored configuration, {}, sets id.id {id})",
                    spec.bus,
                    store.dir().path().join(io::serve::persist::config_file_name(spec.bus, *slot)).display()
                ));
            }
            let mut ids: Vec<u8> = bus.servos().iter().map(sim::Servo::id).collect();
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

/// Serve until Ctrl-C (or the duration); returns the closing report.
pub fn run(req: &SimRequest) -> Result<String, String> {
    let duration = req.duration_s.map(|d| seconds_from_user("--duration", d, MAX_DURATION_S)).transpose()?;
    let LoadedBuses { buses, config_dir, warnings, notes } = load_buses(req)?;
    for warning in &warnings {
        crate::cli::console::note(format!("rtloop sim: warning: {warning}"));
    }
    let mut served = Vec::new();
    for (spec, (bus, store)) in req.buses.iter().zip(buses) {
        let endpoint = endpoint(spec, req.allow_remote).map_err(|e| format!("bus {}: {e}", spec.bus))?;
        let mut s = io::serve::runner::ServedBus::new(bus, endpoint);
        s.store = store;
        served.push(s);
    }
    crate::signals::install();
    for spec in &req.buses {
        let ids: Vec<String> = spec.servos.iter().map(u8::to_string).collect();
        crate::cli::console::line(format!(
            "rtloop sim: bus {} at {} with servos {}",
            spec.bus,
            spec.uri,
            ids.join(",")
        ))?;
    }
    for note in notes {
        crate::cli::console::line(format!("rtloop sim: {note}"))?;
    }
    match &config_dir {
        Some(dir) => crate::cli::console::line(format!(
            "rtloop sim: configurations kept in {} (bus<B>-servo<ID>.cfg)",
            dir.path().display()
        ))?,
        None => crate::cli::console::line(
            "rtloop sim: no --config-dir: conf write keeps a configuration in memory only, until the simulator stops",
        )?,
    }
    crate::cli::console::line("rtloop sim: serving; Ctrl-C to stop")?;
    let stop = crate::signals::stop_flag();
    if let Some(d) = duration {
        std::thread::spawn(move || {
            std::thread::sleep(d);
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        });
    }
    let options = io::serve::runner::ServeOptions { busy_poll: req.busy_poll };
    let report = io::serve::runner::serve_with(&mut served, stop, options);
    Ok(format!("rtloop sim: stopped. {report}"))
}
