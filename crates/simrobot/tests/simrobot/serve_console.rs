//! The diagnostic console of servos served behind a pty, driven by the host-side client over
//! the fdcanusb transport: configurations stored with `conf write` land in the configuration
//! directory (or are counted as kept in memory without one), are loaded again at the next
//! start, and the closing report says what the consoles did.
//!
//! Every wait is bounded; nothing here asserts on speed.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rtloop_io::diagnostic::{DiagError, DiagnosticClient, DiagnosticOptions};
use rtloop_io::fdcanusb::{FdcanusbOptions, FdcanusbTransport};
use rtloop_io::MonotonicClock;
use rtloop_simrobot::serve::persist::config_file_name;
use rtloop_simrobot::serve::{ConfigDir, ConfigStore, PtyFdcanusbEndpoint, ServeHandle, ServedBus};

fn bus(ids: &[u8]) -> rtloop_sim::SimBus {
    let mut bus = rtloop_sim::SimBus::new(rtloop_sim::BusConfig::default());
    for &id in ids {
        bus.add_servo(rtloop_sim::Servo::new(rtloop_sim::ServoConfig::new(id)));
    }
    bus
}

fn client(link: &Path, id: u8) -> DiagnosticClient<FdcanusbTransport, MonotonicClock> {
    let transport = FdcanusbTransport::open(link.to_str().unwrap(), FdcanusbOptions::default()).expect("open pty");
    DiagnosticClient::new(transport, MonotonicClock::default(), id, DiagnosticOptions::default()).unwrap()
}

/// Wait (bounded) until `path` holds a line `want`.
fn wait_for_line(path: &Path, want: &str) {
    let start = Instant::now();
    loop {
        if std::fs::read_to_string(path).is_ok_and(|t| t.lines().any(|l| l == want)) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{} never held `{want}`", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn conf_write_lands_in_the_config_dir_and_comes_back_at_the_next_start() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("cfg");
    std::fs::create_dir(&cfg).unwrap();
    let dir = Arc::new(ConfigDir::open(&cfg).unwrap());
    let link = tmp.path().join("bus");

    let endpoint = PtyFdcanusbEndpoint::create(&link).unwrap();
    let served =
        ServedBus::new(bus(&[1, 2]), Box::new(endpoint)).with_store(ConfigStore::new(dir.clone(), 3, vec![1, 2]));
    let server = ServeHandle::start(vec![served]).unwrap();
    let mut c = client(&link, 2);
    c.discard_pending().unwrap();
    c.command("conf set servo.pid_position.kp 6.5").unwrap();
    c.command("conf set id.id 9").unwrap();
    c.command("conf write").unwrap();
    let file = cfg.join(config_file_name(3, 2));
    wait_for_line(&file, "servo.pid_position.kp 6.5");
    // Refused input is counted in the report, with the servo's own figures.
    assert!(matches!(c.command("conf frobnicate"), Err(DiagError::Refused { .. })));
    drop(c);
    let report = server.stop();
    let e = &report.endpoints[0];
    assert_eq!(e.stored.written, 1);
    assert_eq!(e.stored.failed, 0);
    assert_eq!(e.servos[1].console.lines, 4);
    assert_eq!(e.servos[1].console.errors, 1);
    let text = report.to_string();
    assert!(text.contains("servo 2: console 4 lines, 1 answered ERR"), "{text}");
    assert!(text.contains("1 configuration stored"), "{text}");
    // Only the servo that wrote has a file; nothing else is left in the directory.
    let names: Vec<String> =
        std::fs::read_dir(&cfg).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, ["bus3-servo2.cfg"]);

    // The next start: slot 2 answers to 9 with its stored gain.
    let store = ConfigStore::new(dir, 3, vec![1, 2]);
    let mut next = bus(&[1, 2]);
    let loaded = store.load_into(&mut next).unwrap();
    assert_eq!(loaded.loaded, [2]);
    assert_eq!(loaded.renamed, [(2, 9)]);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let endpoint = PtyFdcanusbEndpoint::create(&link).unwrap();
    let server = ServeHandle::start(vec![ServedBus::new(next, Box::new(endpoint)).with_store(store)]).unwrap();
    let mut c = client(&link, 9);
    assert_eq!(c.command_oneline("conf get servo.pid_position.kp").unwrap(), "6.5");
    assert_eq!(c.command_oneline("conf get id.id").unwrap(), "9");
    drop(c);
    drop(server);
}

#[test]
fn bad_stored_lines_are_warnings_naming_the_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = Arc::new(ConfigDir::open(tmp.path()).unwrap());
    std::fs::write(
        tmp.path().join("bus1-servo4.cfg"),
        "servo.pid_position.kp 3\nservo.pid_position.kd nonsense\nno.such.key 1\n",
    )
    .unwrap();
    let store = ConfigStore::new(dir, 1, vec![4]);
    let mut b = bus(&[4]);
    let loaded = store.load_into(&mut b).unwrap();
    assert_eq!(loaded.warnings.len(), 2, "{:?}", loaded.warnings);
    assert!(loaded.warnings[0].contains("bus1-servo4.cfg:2: "), "{}", loaded.warnings[0]);
    assert!(loaded.warnings[1].contains("bus1-servo4.cfg:3: "), "{}", loaded.warnings[1]);
    // The good line applied.
    assert_eq!(b.servo_mut(4).unwrap().console_config().get("servo.pid_position.kp").unwrap(), "3");
}

#[test]
fn without_a_directory_conf_write_is_counted_as_kept_in_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let link = tmp.path().join("bus");
    let endpoint = PtyFdcanusbEndpoint::create(&link).unwrap();
    let server = ServeHandle::start(vec![ServedBus::new(bus(&[1]), Box::new(endpoint))]).unwrap();
    let mut c = client(&link, 1);
    c.command("conf write").unwrap();
    drop(c);
    let report = server.stop();
    assert_eq!(report.endpoints[0].kept_in_memory, 1);
    let text = report.to_string();
    assert!(text.contains("1 conf write kept in memory only") && text.contains("--config-dir"), "{text}");
    // Nothing was written anywhere but the link, which the server removed.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn a_write_that_fails_is_counted_and_reported_and_serving_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("cfg");
    std::fs::create_dir(&cfg).unwrap();
    let dir = Arc::new(ConfigDir::open(&cfg).unwrap());
    let link = tmp.path().join("bus");
    let endpoint = PtyFdcanusbEndpoint::create(&link).unwrap();
    let served = ServedBus::new(bus(&[1]), Box::new(endpoint)).with_store(ConfigStore::new(dir, 1, vec![1]));
    let server = ServeHandle::start(vec![served]).unwrap();
    // Something that is not a file now stands where the configuration goes.
    std::fs::create_dir(cfg.join("bus1-servo1.cfg")).unwrap();
    let mut c = client(&link, 1);
    c.command("conf write").unwrap();
    // The servo still answers.
    assert_eq!(c.command_oneline("conf get id.id").unwrap(), "1");
    drop(c);
    let report = server.stop();
    let e = &report.endpoints[0];
    assert_eq!((e.stored.written, e.stored.failed), (0, 1));
    let text = report.to_string();
    assert!(text.contains("1 configuration could not be stored (first: cannot replace"), "{text}");
    assert!(text.contains("bus1-servo1.cfg"), "{text}");
    // No temporary file is left beside it.
    let names: Vec<String> =
        std::fs::read_dir(&cfg).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, ["bus1-servo1.cfg"]);
}
