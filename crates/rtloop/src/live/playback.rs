//! `rtloop log serve`: a log played back to Foxglove clients, on the same channels and with
//! the same messages as a live run (`cycle` items become [`LiveCycle`](super::LiveCycle)s again, `event`
//! items events); any other record (a controller's own, an mjlib log's) goes out as JSON on
//! `/log/<record>` with the JSON schema `rtloop log export --mcap` gives it.
//!
//! **Decimation.** Cycles go out as a live run sends them: those whose index is a multiple
//! of `--foxglove-every` (default 10, as `rtloop run --foxglove`); events and other records
//! are never decimated.
//!
//! **Time control.** Playback starts once the clients' subscriptions have settled: a first
//! subscription, then [`SETTLE`] without another subscribe or unsubscribe (at most
//! [`SETTLE_MAX`] after the first), so the channels a layout subscribes to one panel at a
//! time all start with the log's first item. A client that asks to play starts it at once.
//! A subscription made after playback started gets the items from then on (seek back for
//! the earlier ones). Playback is paced by the items' timestamps divided by the speed. The
//! Foxglove app's playback bar (the protocol's `playbackControl` capability: play, pause, seek,
//! speed) drives it; so do `--speed`, `--start`, `--end` and `--loop`. A request with a
//! speed out of range is answered, as every request is, with the playback state (the speed
//! unchanged) and a warning status saying why.
//!
//! Must never: stop at damage while readable blocks remain (a cut or corrupt log plays as
//! far as it goes, the damage counted and reported as `rtloop log info` does); trust a
//! client's numbers (a speed that is not a finite number in range is refused and counted,
//! a seek outside the log is clamped to it).

use super::foxglove::{
    FoxgloveSink, PlaybackCommand, PlaybackHandler, PlaybackState, PlaybackStatus, ServeOptions, Status,
};
use super::{live_cycle, EventMsg, LiveRobot, LiveSink, LiveStats};
use crate::telemetry::{CycleLog, ServoLog};
use rtloop_tlog::reader::{FileReader, ItemFilter};
use rtloop_tlog::survey::{Problem, ProblemKind, Problems};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The slowest and fastest playback speeds.
pub const SPEED_RANGE: (f64, f64) = (0.01, 1000.0);

/// How long the subscriptions must stay unchanged (no subscribe, no unsubscribe) before
/// playback starts on its own.
pub const SETTLE: Duration = Duration::from_secs(1);

/// The longest playback waits for subscriptions to settle after the first one.
pub const SETTLE_MAX: Duration = Duration::from_secs(5);

/// What `rtloop log serve` is asked for.
#[derive(Debug, Clone)]
pub struct PlaybackOptions {
    /// Where to serve.
    pub addr: SocketAddr,
    /// Log seconds per wall second.
    pub speed: f64,
    /// Send the cycles whose index is a multiple of this (`--foxglove-every`).
    pub every: u32,
    /// Start this many seconds after the log's first item.
    pub start_s: Option<f64>,
    /// End this many seconds after the log's first item.
    pub end_s: Option<f64>,
    /// Start again at the end.
    pub looping: bool,
    /// End the program at the end of the log (scripts, tests) instead of waiting, paused,
    /// for a seek or Ctrl-C.
    pub exit_at_end: bool,
}

/// Why a log could not be played.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlaybackError {
    /// A `--speed` outside [`SPEED_RANGE`].
    #[error(
        "--speed {speed}: give log seconds per second from {} to {}, e.g. 1 for real time or 0.5 for half speed",
        SPEED_RANGE.0,
        SPEED_RANGE.1
    )]
    Speed {
        /// The speed given.
        speed: f64,
    },
    /// The log cannot be opened or read.
    #[error("cannot read the log {}: {source}", .path.display())]
    Read {
        /// The log.
        path: std::path::PathBuf,
        /// Why.
        source: rtloop_tlog::format::TlogError,
    },
    /// The log has no timestamped item.
    #[error("{} has no timestamped items to play: give a log `rtloop run --log` wrote", .path.display())]
    Untimed {
        /// The log.
        path: std::path::PathBuf,
    },
    /// A `--start` or `--end` that is not a number of seconds from the log's start.
    #[error("{flag} {seconds}: give seconds from the log's start, 0 or more")]
    Offset {
        /// `--start` or `--end`.
        flag: &'static str,
        /// The value given.
        seconds: f64,
    },
    /// `--end` before `--start`, or `--start` after the log's end (`length_s`).
    #[error(
        "--end is before --start (or --start after the log's end, {length_s:.3} s): give --start earlier than --end"
    )]
    Window {
        /// The log's length, s.
        length_s: f64,
    },
    /// The Foxglove server did not start, or a channel could not be advertised.
    #[error(transparent)]
    Live(#[from] super::LiveError),
    /// The process may not open as many files as serving needs (`ulimit -n`).
    #[error(transparent)]
    OpenFiles(#[from] rtloop_rt::setup::OpenFilesError),
}

/// Check `--speed`.
pub fn check_speed(speed: f64) -> Result<f64, PlaybackError> {
    if speed.is_finite() && (SPEED_RANGE.0..=SPEED_RANGE.1).contains(&speed) {
        Ok(speed)
    } else {
        Err(PlaybackError::Speed { speed })
    }
}

/// What a playback did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlaybackReport {
    /// The log.
    pub file: String,
    /// Cycles played (every pass; after the decimation).
    pub cycles: u64,
    /// The decimation: cycles whose index is a multiple of it were played.
    pub every: u32,
    /// Cycles read but not played: the decimation skipped them.
    pub decimated: u64,
    /// Events played.
    pub events: u64,
    /// Items of other records played.
    pub other: u64,
    /// Times it started again at the end (`--loop`) or was sought.
    pub restarts: u64,
    /// Damage met on the first pass.
    pub problems: Vec<Problem>,
    /// Playback requests refused (a speed out of range).
    pub refused_requests: u64,
    /// Why a run with physics plays without its 3D view (`null`: it has one, or the log is
    /// of a run without physics).
    pub no_3d: Option<String>,
    /// The server's counts.
    pub foxglove: LiveStats,
}

/// A `cycle` item's JSON (the `cycle` record) as the loop logged it; `None` when it is not
/// one. A value logged as null (not reported) comes back as NaN.
pub fn cycle_from_record(v: &Json) -> Option<CycleLog> {
    let f = |v: &Json| v.as_f64().unwrap_or(f64::NAN);
    let u = |v: &Json| v.as_u64();
    let ns = |v: &Json| v.as_f64().filter(|x| x.is_finite() && *x >= 0.0).map_or(0, |us| (us * 1000.0).round() as u64);
    let arr = |v: &Json, out: &mut [f64]| {
        for (i, o) in out.iter_mut().enumerate() {
            *o = f(&v[i]);
        }
    };
    let mut c = CycleLog {
        woke_ns: 0,
        index: u(&v["index"])?,
        wakeup_ns: ns(&v["wakeup_us"]),
        cycle_ns: ns(&v["cycle_us"]),
        missing: u(&v["missing"]).unwrap_or(0) as u32,
        late: u(&v["late"]).unwrap_or(0) as u32,
        unqueried: u(&v["unqueried"]).unwrap_or(0) as u32,
        timed_out: v["timed_out"].as_bool().unwrap_or(false),
        servos_len: 0,
        servos: [ServoLog::default(); crate::controller::MAX_SERVOS],
        imu: rtloop_sim::ImuSample::default(),
        body: crate::telemetry::BodyLog::default(),
    };
    arr(&v["imu"]["quaternion"], &mut c.imu.quaternion);
    arr(&v["imu"]["rate_dps"], &mut c.imu.rate_dps);
    arr(&v["imu"]["accel_mps2"], &mut c.imu.accel_mps2);
    let servos = v["servo"].as_array()?;
    let byte = |v: &Json| u(v).unwrap_or(0).min(255) as u8;
    for (slot, s) in c.servos.iter_mut().zip(servos) {
        *slot = ServoLog {
            id: byte(&s["id"]),
            bus: byte(&s["bus"]),
            fresh: s["fresh"].as_bool().unwrap_or(false),
            state_age_cycles: u(&s["state_age_cycles"]).map(|a| a.min(u64::from(u32::MAX)) as u32),
            command_mode: byte(&s["command_mode"]),
            command_position: f(&s["command_position"]),
            command_velocity: f(&s["command_velocity"]),
            command_maximum_torque: f(&s["command_maximum_torque"]),
            mode: byte(&s["mode"]),
            position: f(&s["position"]),
            velocity: f(&s["velocity"]),
            torque: f(&s["torque"]),
            q_current: f(&s["q_current"]),
            voltage: f(&s["voltage"]),
            temperature: f(&s["temperature"]),
            motor_temperature: f(&s["motor_temperature"]),
            fault: byte(&s["fault"]),
        };
    }
    c.servos_len = servos.len().min(crate::controller::MAX_SERVOS) as u8;
    Some(c)
}

#[derive(Debug)]
struct Control {
    playing: bool,
    speed: f64,
    seek_us: Option<i64>,
    current_us: i64,
    ended: bool,
    /// Why the last refused request was refused, until the clients are told.
    refused: Option<String>,
}

/// Tell the clients why a request was refused (a warning status), once.
fn answer_refusal(c: &mut Control, sink: &FoxgloveSink) {
    if let Some(why) = c.refused.take() {
        sink.publish_status(Status::warning(why));
    }
}

fn status(c: &Control) -> PlaybackStatus {
    if c.ended {
        PlaybackStatus::Ended
    } else if c.playing {
        PlaybackStatus::Playing
    } else {
        PlaybackStatus::Paused
    }
}

fn state(c: &Control, did_seek: bool) -> PlaybackState {
    PlaybackState {
        status: status(c),
        current_time: u64::try_from(c.current_us).unwrap_or(0).saturating_mul(1000),
        playback_speed: c.speed as f32,
        did_seek,
        request_id: None,
    }
}

/// Serve the log at `path` until its end (`exit_at_end`), or until Ctrl-C.
pub fn serve(path: &Path, opts: &PlaybackOptions) -> Result<PlaybackReport, PlaybackError> {
    let speed = check_speed(opts.speed)?;
    // The log, the standard streams, and the server's sockets.
    rtloop_rt::setup::ensure_open_files("rtloop log serve", 16 + super::foxglove::OPEN_FILES)?;
    let cannot_read = |source| PlaybackError::Read { path: path.to_path_buf(), source };
    let file = rtloop_tlog::reader::open_file(path).map_err(cannot_read)?;
    let reader = FileReader::from_file(file).map_err(cannot_read)?;
    let (first_us, last_us) =
        reader.survey().data_span_us.ok_or_else(|| PlaybackError::Untimed { path: path.to_path_buf() })?;
    let offset = |flag: &'static str, s: Option<f64>| -> Result<Option<i64>, PlaybackError> {
        match s {
            None => Ok(None),
            Some(s) if s.is_finite() && (0.0..=1e9).contains(&s) => {
                Ok(Some(first_us.saturating_add((s * 1e6).round() as i64)))
            }
            Some(seconds) => Err(PlaybackError::Offset { flag, seconds }),
        }
    };
    let start_us = offset("--start", opts.start_s)?.unwrap_or(first_us);
    let end_us = offset("--end", opts.end_s)?.unwrap_or(last_us).min(last_us);
    if end_us < start_us || start_us > last_us {
        return Err(PlaybackError::Window { length_s: (last_us - first_us) as f64 / 1e6 });
    }

    let records = reader.records();
    let id_of = |name: &str| records.iter().find(|r| r.name == name).map(|r| r.id);
    let (cycle_id, event_id, body_id) = (id_of("cycle"), id_of("event"), id_of("body"));
    // The robot: the servos of the first cycle, the model of the `model` record.
    let mut robot = LiveRobot { name: "log".into(), rate_hz: 0.0, servos: Vec::new(), imu: false, model: None };
    let model = crate::scene::logged_model(&reader);
    let mut scene = None;
    let mut no_3d = None;
    if let Some(m) = &model {
        match crate::scene::Scene3d::for_model(m) {
            Ok(s) => {
                scene = Some(s);
                robot.model = model.clone();
            }
            Err(e) => no_3d = Some(e.to_string()),
        }
    }
    if let Some(id) = cycle_id {
        let first = reader
            .items(ItemFilter { record: Some("cycle".into()), ..Default::default() })
            .filter_map(Result::ok)
            .find(|i| i.record_id == id);
        if let Some(c) = first.and_then(|i| reader.decode_item(&i).ok()).and_then(|v| cycle_from_record(&v.to_json())) {
            robot.servos = c.servos[..c.servos_len as usize].iter().map(|s| (s.bus, s.id)).collect();
            robot.imu = true;
        }
    }

    let every = super::check_every("--foxglove-every", opts.every)?;
    let control = Arc::new(Mutex::new(Control {
        playing: false,
        speed,
        seek_us: None,
        current_us: start_us,
        ended: false,
        refused: None,
    }));
    let refused_requests = Arc::new(AtomicU64::new(0));
    let handler: PlaybackHandler = {
        let control = Arc::clone(&control);
        let refused = Arc::clone(&refused_requests);
        Arc::new(move |req| {
            let mut c = control.lock().unwrap_or_else(|e| e.into_inner());
            if let Ok(s) = check_speed(f64::from(req.playback_speed)) {
                c.speed = s;
            } else {
                refused.fetch_add(1, Ordering::Relaxed);
                c.refused = Some(format!(
                    "playback speed {} refused: give {} to {} log seconds per second; the speed stays {}",
                    req.playback_speed, SPEED_RANGE.0, SPEED_RANGE.1, c.speed
                ));
            }
            c.playing = req.playback_command == PlaybackCommand::Play;
            let mut did_seek = false;
            if let Some(ns) = req.seek_time {
                let us = i64::try_from(ns / 1000).unwrap_or(i64::MAX).clamp(start_us, end_us);
                c.seek_us = Some(us);
                c.current_us = us;
                c.ended = false;
                did_seek = true;
            }
            if c.playing {
                c.ended = false;
            }
            Some(state(&c, did_seek))
        })
    };
    let to_ns = |us: i64| u64::try_from(us).unwrap_or(0).saturating_mul(1000);
    let mut sink = FoxgloveSink::bind(
        opts.addr,
        ServeOptions {
            name: format!("rtloop log serve {}", path.display()),
            playback: Some(((to_ns(start_us), to_ns(end_us)), handler)),
        },
    )?;
    if let Some(s) = scene {
        sink.set_scene(s);
    }
    sink.start(&robot);
    let mut other: HashMap<u64, Arc<super::foxglove::server::Channel>> = HashMap::new();
    for r in &records {
        if Some(r.id) == cycle_id || Some(r.id) == event_id || r.name == rtloop_tlog::realtime::STATS_RECORD {
            continue;
        }
        if let Some(schema) = &r.schema {
            let ch = sink.advertise_json(
                &format!("/log/{}", r.name),
                &rtloop_tlog::export::record_json_schema(&r.name, schema),
            )?;
            other.insert(r.id, ch);
        }
    }
    eprintln!(
        "rtloop log serve: ws://{} — in Foxglove: Open connection → Foxglove WebSocket → ws://{}; playback starts when a \
         client's subscriptions settle",
        sink.addr(),
        sink.addr()
    );
    if let Some(why) = &no_3d {
        eprintln!("rtloop log serve: warning: {why}; the log plays without it");
    }

    crate::signals::install();
    let mut report = PlaybackReport {
        file: path.display().to_string(),
        cycles: 0,
        every,
        decimated: 0,
        events: 0,
        other: 0,
        restarts: 0,
        problems: Vec::new(),
        refused_requests: 0,
        no_3d: no_3d.clone(),
        foxglove: LiveStats::default(),
    };
    let mut problems = Problems::default();
    let mut first_pass = true;
    let items_from =
        |us: i64| reader.items(ItemFilter { record: None, from_us: Some(us), to_us: Some(end_us) }).peekable();
    let mut items = items_from(start_us);
    // (wall clock, log time) at which playback was last (re)anchored.
    let mut anchor: Option<(Instant, i64)> = None;
    let mut last_state = Instant::now();
    // Subscriptions settling before the first start: (subscribes + unsubscribes seen, when
    // that count last changed, when the first subscription came).
    let mut settling: (u64, Instant, Option<Instant>) = (0, Instant::now(), None);
    let mut auto_started = false;
    const STEP: Duration = Duration::from_millis(20);
    while !crate::signals::stop_requested() {
        {
            let mut c = control.lock().unwrap_or_else(|e| e.into_inner());
            answer_refusal(&mut c, &sink);
            if c.playing {
                auto_started = true;
            } else if !auto_started && !c.ended {
                let now = Instant::now();
                let changes = sink.subscription_changes();
                if changes != settling.0 {
                    settling.0 = changes;
                    settling.1 = now;
                }
                if sink.subscriptions() > 0 {
                    let first = *settling.2.get_or_insert(now);
                    if now - settling.1 >= SETTLE || now - first >= SETTLE_MAX {
                        c.playing = true;
                        auto_started = true;
                        if let Some(why) = &no_3d {
                            sink.publish_status(Status::warning(why.clone()));
                        }
                    }
                }
            }
            if let Some(us) = c.seek_us.take() {
                items = items_from(us);
                // The app forgets what it had when it seeks: the 3D scene again.
                sink.resend_scene(us);
                anchor = None;
                first_pass = false;
                report.restarts += 1;
            }
            if !c.playing {
                anchor = None;
                drop(c);
                std::thread::sleep(STEP);
                continue;
            }
            if anchor.is_none() {
                anchor = Some((Instant::now(), c.current_us));
            }
            if last_state.elapsed() > Duration::from_millis(250) {
                sink.broadcast_playback_state(state(&c, false));
                last_state = Instant::now();
            }
        }
        let item = match items.next() {
            None => {
                if opts.looping {
                    items = items_from(start_us);
                    anchor = None;
                    first_pass = false;
                    report.restarts += 1;
                    control.lock().unwrap_or_else(|e| e.into_inner()).current_us = start_us;
                    continue;
                }
                let mut c = control.lock().unwrap_or_else(|e| e.into_inner());
                c.playing = false;
                c.ended = true;
                c.current_us = end_us;
                sink.broadcast_playback_state(state(&c, false));
                if opts.exit_at_end {
                    break;
                }
                // Wait, paused at the end, for a seek (or Ctrl-C); play starts over.
                drop(c);
                items = items_from(start_us);
                control.lock().unwrap_or_else(|e| e.into_inner()).current_us = start_us;
                first_pass = false;
                continue;
            }
            Some(Err(e)) => {
                if first_pass {
                    problems.note_read_error(&e);
                }
                continue;
            }
            Some(Ok(item)) => item,
        };
        let Some(ts) = item.timestamp_us else { continue };
        let decoded = match reader.decode_item(&item) {
            Ok(v) => v.to_json(),
            Err(e) => {
                if first_pass {
                    let name = records.iter().find(|r| r.id == item.record_id).map(|r| r.name.clone());
                    problems.note(ProblemKind::Undecodable, Some(item.record_id), name.as_deref(), item.offset, || {
                        e.to_string()
                    });
                }
                continue;
            }
        };
        if Some(item.record_id) == body_id {
            // A body item goes with its cycle (below): this one's cycle was not sent.
            continue;
        }
        let mut cycle = if Some(item.record_id) == cycle_id { cycle_from_record(&decoded) } else { None };
        if cycle.as_ref().is_some_and(|c| !super::sends_cycle(c.index, every)) {
            // Not sent: no need to wait for its time.
            report.decimated += 1;
            continue;
        }
        // The body as of this cycle: the `body` item the loop wrote right after it.
        let mut body_json = None;
        if let (Some(c), Some(body_id)) = (cycle.as_mut(), body_id) {
            let next_is_body =
                matches!(items.peek(), Some(Ok(next)) if next.record_id == body_id && next.timestamp_us == Some(ts));
            if next_is_body {
                if let Some(Ok(next)) = items.next() {
                    if let Ok(v) = reader.decode_item(&next) {
                        let v = v.to_json();
                        if let Some(b) = crate::telemetry::BodyLog::from_record(&v) {
                            c.body = b;
                        }
                        body_json = Some(v);
                    }
                }
            }
        }
        // Wait for the item's time, in short steps so a pause or a seek is heard.
        let mut interrupted = false;
        loop {
            let (wall, log_us) = anchor.unwrap_or((Instant::now(), ts));
            let speed = control.lock().unwrap_or_else(|e| e.into_inner()).speed;
            let due = wall + Duration::from_secs_f64(((ts - log_us).max(0) as f64 / 1e6) / speed);
            let now = Instant::now();
            if now >= due {
                break;
            }
            std::thread::sleep((due - now).min(STEP));
            let mut c = control.lock().unwrap_or_else(|e| e.into_inner());
            answer_refusal(&mut c, &sink);
            if !c.playing || c.seek_us.is_some() || (c.speed - speed).abs() > 0.0 || crate::signals::stop_requested() {
                interrupted = true;
                break;
            }
        }
        if interrupted {
            // Re-anchor at this item (a new speed), or let the control code above act.
            let mut c = control.lock().unwrap_or_else(|e| e.into_inner());
            anchor = if c.playing { Some((Instant::now(), c.current_us)) } else { None };
            if c.seek_us.is_none() && c.playing {
                c.current_us = ts;
            } else {
                continue;
            }
        }
        control.lock().unwrap_or_else(|e| e.into_inner()).current_us = ts;
        if Some(item.record_id) == cycle_id {
            if let Some(c) = cycle {
                let mut live = live_cycle(&c, 0);
                live.stamp_us = ts;
                sink.cycle(&live);
                report.cycles += 1;
            }
            if let (Some(v), Some(ch)) = (body_json, body_id.and_then(|id| other.get(&id))) {
                if let Ok(payload) = serde_json::to_vec(&v) {
                    sink.publish_raw(ch, ts, payload);
                    report.other += 1;
                }
            }
        } else if Some(item.record_id) == event_id {
            let kind = decoded["kind"].as_str().unwrap_or("?");
            let byte = |k: &str| decoded[k].as_u64().unwrap_or(0).min(255) as u8;
            sink.event(ts, &EventMsg { bus: byte("bus"), servo: byte("servo"), kind });
            report.events += 1;
        } else if let Some(ch) = other.get(&item.record_id) {
            if let Ok(payload) = serde_json::to_vec(&decoded) {
                sink.publish_raw(ch, ts, payload);
                report.other += 1;
            }
        }
    }
    // Let clients read what is queued before the server goes.
    sink.set_linger(Duration::from_millis(500));
    sink.finish();
    report.problems = problems.into_vec();
    report.refused_requests = refused_requests.load(Ordering::Relaxed);
    for _ in 0..report.refused_requests {
        sink.note_refused_playback();
    }
    report.foxglove = sink.stats();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_cycle_comes_back_with_nulls_as_nan() {
        let v = serde_json::json!({"index": 7, "wakeup_us": 12.5, "cycle_us": 700.25, "missing": 1, "late": 0,
            "unqueried": 0, "timed_out": false,
            "imu": {"quaternion": [1.0, 0.0, 0.0, 0.0], "rate_dps": [1.0, 2.0, 3.0], "accel_mps2": [0.0, 0.0, null]},
            "servo": [{"id": 3, "bus": 2, "fresh": true, "state_age_cycles": null, "command_mode": 10,
                       "command_position": null, "command_velocity": 0.0, "command_maximum_torque": 4.0,
                       "mode": 10, "position": 0.25, "velocity": null, "torque": 0.0, "q_current": 0.0,
                       "voltage": 24.0, "temperature": 25.0, "motor_temperature": 25.0, "fault": 0}]});
        let c = cycle_from_record(&v).unwrap();
        let live = live_cycle(&c, 0);
        assert_eq!(live.timing.index, 7);
        assert_eq!(live.timing.wakeup_us, 12.5);
        assert_eq!(live.timing.cycle_us, 700.25);
        assert_eq!(live.servos.len(), 1);
        assert_eq!((live.servos[0].bus, live.servos[0].id), (2, 3));
        assert!(live.servos[0].velocity.is_nan() && live.servos[0].command_position.is_nan());
        assert_eq!(live.servos[0].state_age_cycles, None);
        assert!(live.imu.accel_mps2.z.is_nan());
        assert!(cycle_from_record(&serde_json::json!({"kind": "fault"})).is_none());
    }

    #[test]
    fn a_speed_out_of_range_is_one_sentence() {
        assert_eq!(check_speed(2.0).unwrap(), 2.0);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e6] {
            let e = check_speed(bad).unwrap_err().to_string();
            assert!(e.starts_with("--speed") && !e.contains('\n'), "{e}");
        }
    }
}
