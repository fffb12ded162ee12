//! No configuration value can leave a servo without its watchdog: every
//! `[gains] watchdog_timeout_s` is either refused with one sentence naming the key and the
//! range, or the commands `rtloop run` sends with it make a (simulated moteus) servo latch
//! mode 11 once they stop — within the value given (or the 0.1 s default when absent).

use rtloop::config::{RunConfig, MAX_WATCHDOG_TIMEOUT_S};
use rtloop::robot_spec::{BusSpec, RobotSpec};
use rtloop_io::{Clock, ServoCommand, ServoReply, VirtualClock};

/// Command one simulated servo with the run's position command for `config`, then only
/// query it (reads do not feed the watchdog) until it latches mode 11. Returns the seconds
/// that took, or `None` if it never did within `give_up_s`.
fn seconds_to_timeout(config: &RunConfig, give_up_s: f64) -> Option<f64> {
    let clock = VirtualClock::new(1_000_000_000);
    let spec = RobotSpec { buses: vec![BusSpec { bus: 1, uri: rtloop_io::BusUri::Sim, servos: vec![1] }] };
    let mut robot =
        spec.build(clock.clone(), rtloop_io::RobotConfig::default(), Default::default(), Default::default()).unwrap().0;
    let mut motion = rtloop::motion::Motion::from_config(config);
    motion.set_start([0.0].into_iter());
    let mut commands = [ServoCommand::Query];
    let mut replies = [ServoReply::default()];
    let mut imu = Default::default();
    motion.fill(0.0, &mut commands);
    robot.cycle(&commands, &mut replies, &mut imu);
    let commanded_at = clock.now_ns();
    let step_ns = 5_000_000;
    let queries = [ServoCommand::Query];
    let mut waited = 0.0;
    while waited <= give_up_s {
        clock.advance_ns(step_ns);
        robot.cycle(&queries, &mut replies, &mut imu);
        waited = (clock.now_ns() - commanded_at) as f64 * 1e-9;
        if replies[0].fresh && replies[0].state.mode == Some(11) {
            return Some(waited);
        }
    }
    None
}

#[test]
fn no_watchdog_value_switches_the_watchdog_off() {
    let values = [
        "nan", "inf", "-inf", "0.0", "-0.0", "-1.0", "1e-300", "0.001", "0.009", "10.001", "1e300", // refused
        "0.01", "0.05", "0.5", "2.0", "10.0", // accepted
    ];
    for v in values {
        let text = format!("[gains]\nwatchdog_timeout_s = {v}\n");
        match RunConfig::from_toml(&text).map_err(|e| e.to_string()) {
            Err(e) => {
                assert!(e.starts_with("gains.watchdog_timeout_s = "), "{v}: {e}");
                assert!(e.contains("0.01 to 10 s"), "{v}: {e}");
                assert_eq!(e.lines().count(), 1, "{e}");
            }
            Ok(config) => {
                let timeout = config.gains.watchdog_timeout_s;
                assert!(timeout > 0.0 && timeout <= MAX_WATCHDOG_TIMEOUT_S, "{v} accepted");
                let took = seconds_to_timeout(&config, timeout + 0.5)
                    .unwrap_or_else(|| panic!("watchdog_timeout_s = {v}: the servo never timed out"));
                assert!(took >= timeout - 0.006 && took <= timeout + 0.02, "{v}: latched after {took} s");
            }
        }
    }
}

#[test]
fn absent_is_an_explicit_tenth_of_a_second_even_on_a_servo_configured_without_one() {
    let config = RunConfig::from_toml("").unwrap();
    assert_eq!(config.gains.watchdog_timeout_s, 0.1);
    let took = seconds_to_timeout(&config, 1.0).expect("the 0.1 s default applies");
    assert!((0.09..=0.12).contains(&took), "{took}");
    // Every command carries it: a servo whose own default is "no watchdog" still gets one.
    let mut motion = rtloop::motion::Motion::from_config(&config);
    motion.set_start([0.0].into_iter());
    let mut commands = [ServoCommand::Query];
    motion.fill(0.0, &mut commands);
    assert!(matches!(commands[0], ServoCommand::Position(p) if p.watchdog_timeout == Some(0.1)), "{commands:?}");
}

#[test]
fn no_flag_sets_the_watchdog() {
    // The flags of `rtloop run` cannot reach the watchdog at all: only the file can, and
    // the file is checked above. --help proves the absence.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_rtloop")).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("--rate"), "{help}");
    assert!(!help.contains("--watchdog"), "{help}");
}
