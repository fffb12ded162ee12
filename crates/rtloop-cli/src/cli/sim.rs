//! `rtloop sim`: the simulated servos behind real operating-system devices — a
//! pseudo-terminal speaking the fdcanusb protocol, or a UDP port — so that unmodified moteus
//! clients, and rtloop's own transports, can drive them. Runs until Ctrl-C.
//!
//! Every servo serves its diagnostic console as well as its registers. `--config-dir DIR`
//! keeps each servo's configuration in `DIR/bus<B>-servo<ID>.cfg` ([`rtloop_simrobot::serve::persist`]):
//! loaded at start (a line that cannot be applied is a warning naming the file and line; a
//! stored `id.id` moves the servo to that id, and the start says so), written whenever a
//! client sends `conf write`. Without it, `conf write` keeps the configuration in memory
//! only, and the closing report says how many were lost.
//!
//! Must never: serve on an address other hosts can reach unless told to
//! (`--allow-remote`); replace anything at a `--fdcanusb` path but a stale link of a killed
//! simulator (the rules are in [`rtloop_simrobot::serve::pty`]); read or write a configuration through a
//! link (the rules are in [`rtloop_simrobot::serve::persist`]); or start with a number it cannot honour
//! (every flag is range-checked first, see `numbers`).

use rtloop::numbers::{seconds_from_user, MAX_DURATION_S};
use rtloop::sim_buses::{endpoint, load_buses, LoadedBuses, SimRequest};

/// Serve until Ctrl-C (or the duration); returns the closing report.
pub fn run(req: &SimRequest) -> Result<String, String> {
    let duration = req
        .duration_s
        .map(|d| seconds_from_user("--duration", d, MAX_DURATION_S))
        .transpose()
        .map_err(|e| e.to_string())?;
    let LoadedBuses { buses, config_dir, warnings, notes } = load_buses(req).map_err(|e| e.to_string())?;
    for warning in &warnings {
        crate::cli::console::note(format!("rtloop sim: warning: {warning}"));
    }
    let mut served = Vec::new();
    for (spec, (bus, store)) in req.buses.iter().zip(buses) {
        let endpoint = endpoint(spec, req.allow_remote).map_err(|e| format!("bus {}: {e}", spec.bus))?;
        let mut s = rtloop_simrobot::serve::runner::ServedBus::new(bus, endpoint);
        s.store = store;
        served.push(s);
    }
    rtloop::signals::install();
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
    let stop = rtloop::signals::stop_flag();
    if let Some(d) = duration {
        std::thread::spawn(move || {
            std::thread::sleep(d);
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        });
    }
    let options = rtloop_simrobot::serve::runner::ServeOptions { busy_poll: req.busy_poll };
    let report = rtloop_simrobot::serve::runner::serve_with(&mut served, stop, options);
    Ok(format!("rtloop sim: stopped. {report}"))
}
