//! `rtloop run --physics`: the simulated robot with a body (MuJoCo), end to end through the
//! program. Exact outcomes only in lockstep; from the one real-clock run, only what a stalled
//! host cannot change.

use crate::support::*;

/// `rtloop run --physics --lockstep` for `duration` s with one `--push`, logged to `log`
/// (the recorded run the 3D export, serve and render tests read); panics when it fails.
pub(crate) fn logged_pushed_run(log: &std::path::Path, duration: &str, push: &str) {
    let o = rtloop(&[
        "run",
        "--physics",
        "--lockstep",
        "--duration",
        duration,
        "--push",
        push,
        "--log",
        log.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
}

fn body_of(summary: &serde_json::Value) -> (f64, f64, f64) {
    let b = &summary["body"];
    (b["height_m"].as_f64().unwrap(), b["roll_deg"].as_f64().unwrap(), b["pitch_deg"].as_f64().unwrap())
}

#[test]
fn the_demo_stands_the_body_up_and_a_repeat_is_byte_for_byte_the_same() {
    let scratch = Scratch::new("physics-repeat");
    let mut runs = Vec::new();
    for name in ["a.tlog", "b.tlog"] {
        let log = scratch.path(name);
        let o =
            rtloop(&["run", "--physics", "--lockstep", "--duration", "3", "--json", "--log", log.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
        let s = last_json(&o);
        assert_eq!(s["imu_samples"], s["cycles"], "the IMU reads the body every cycle");
        runs.push((s, std::fs::read(&log).unwrap()));
    }
    let (height, roll, pitch) = body_of(&runs[0].0);
    // Lying at 0.05 m at the start; the demo stands it up (hips 0.32 m above the feet).
    assert!(height > 0.28, "the body stands: {height:.3} m");
    assert!(roll.abs() < 10.0 && pitch.abs() < 10.0, "upright while it sways: roll {roll:.1}° pitch {pitch:.1}°");
    assert_eq!(runs[0].0["body"], runs[1].0["body"]);
    assert_eq!(runs[0].0["final"], runs[1].0["final"]);
    assert!(runs[0].1 == runs[1].1, "the same lockstep run writes the same log, byte for byte");
}

#[test]
fn a_tilted_ground_shows_in_the_body_and_a_push_moves_it() {
    let level = last_json(&rtloop(&["run", "--physics", "--lockstep", "--duration", "2.5", "--json"]));
    let tilted =
        last_json(&rtloop(&["run", "--physics", "--lockstep", "--duration", "2.5", "--json", "--ground-tilt", "0,8"]));
    let (_, _, level_pitch) = body_of(&level);
    let (_, _, tilted_pitch) = body_of(&tilted);
    assert!(tilted_pitch - level_pitch > 5.0, "an 8° slope, nose up: pitch {level_pitch:.1}° → {tilted_pitch:.1}°");
    // A strong sideways push at 2 s knocks the swaying robot over.
    let pushed = last_json(&rtloop(&[
        "run",
        "--physics",
        "--lockstep",
        "--duration",
        "3",
        "--json",
        "--push",
        "2:0,120,0:0.15",
    ]));
    let (_, roll, _) = body_of(&pushed);
    let (_, level_roll, _) =
        body_of(&last_json(&rtloop(&["run", "--physics", "--lockstep", "--duration", "3", "--json"])));
    assert!((roll - level_roll).abs() > 20.0, "the push rolled the body: {level_roll:.1}° → {roll:.1}°");
}

#[test]
fn every_push_of_a_run_acts() {
    let body = |pushes: &[&str]| {
        let mut args = vec!["run", "--physics", "--lockstep", "--duration", "3.5", "--json"];
        for p in pushes {
            args.extend(["--push", p]);
        }
        last_json(&rtloop(&args))["body"].clone()
    };
    let first = body(&["2:0,120,0:0.15"]);
    let both = body(&["2:0,120,0:0.15", "3:0,0,0:0.1"]);
    let none = body(&[]);
    // A zero push changes nothing, and a second push does not cancel the first.
    assert_eq!(first, both);
    assert_ne!(first, none);
}

#[test]
fn injected_faults_work_on_the_body_as_without_it() {
    let o = rtloop(&["run", "--physics", "--lockstep", "--duration", "2", "--json", "--fault", "3@1"]);
    assert_eq!(o.status.code(), Some(1), "a servo faulted: degraded");
    let s = last_json(&o);
    let kinds: Vec<&str> = s["events"].as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
    assert!(kinds.contains(&"injected_overheat") && kinds.contains(&"servo_fault_latched"), "{kinds:?}");
    assert_eq!(s["final"]["3"]["fault"], 38);
}

/// A model, a robot file mapping one servo to its joint, and the run's answer.
fn run_model(scratch: &Scratch, model: &str, joints: &str, extra: &[&str]) -> std::process::Output {
    let xml = scratch.path("robot.xml");
    std::fs::write(&xml, model).unwrap();
    let config = scratch.path("robot.toml");
    std::fs::write(
        &config,
        format!(
            "[[bus]]\nbus = 1\nuri = \"sim\"\nservos = [1, 2]\n\n[physics]\nmodel = \"{}\"\nsettle_s = 0\n{joints}\n",
            xml.display()
        ),
    )
    .unwrap();
    let mut args = vec!["run", "--config", config.to_str().unwrap(), "--lockstep", "--duration", "1", "--json"];
    args.extend_from_slice(extra);
    rtloop(&args)
}

const ARM: &str = r#"<mujoco>
  <option integrator="INTEGRATOR"/>
  <worldbody>
    <body name="base" pos="0 0 0.5">
      <geom type="box" size="0.1 0.1 0.1" mass="1"/>
      <body name="upper">
        <joint name="shoulder" axis="0 1 0" armature="ARMATURE" STIFF/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.02" mass="MASS"/>
        <body name="lower" pos="0 0 -0.3">
          <joint name="elbow" axis="0 1 0" armature="0.01"/>
          <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.02" mass="0.2"/>
        </body>
      </body>
    </body>
  </worldbody>
  <keyframe><key name="home" qpos="0.1 -0.2"/></keyframe>
</mujoco>"#;

fn arm(mass: &str) -> String {
    ARM.replace("INTEGRATOR", "implicitfast").replace("ARMATURE", "0.01").replace("STIFF", "").replace("MASS", mass)
}

const MAP: &str = "joints = [{ bus = 1, id = 1, joint = \"shoulder\" }, { bus = 1, id = 2, joint = \"elbow\" }]";

#[test]
fn a_model_of_ones_own_drives_its_servos() {
    let scratch = Scratch::new("physics-own");
    let o = run_model(&scratch, &arm("0.3"), MAP, &[]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let s = last_json(&o);
    assert_eq!(s["servos"], 2);
    // A fixed-base arm: its base does not move.
    let (height, roll, pitch) = body_of(&s);
    assert!((height - 0.5).abs() < 1e-9 && roll.abs() < 1e-9 && pitch.abs() < 1e-9, "{height} {roll} {pitch}");
}

#[test]
fn bad_models_and_maps_get_one_sentence_and_exit_2() {
    let scratch = Scratch::new("physics-bad");
    let cases: [(String, &str, &str); 5] = [
        ("<mujoco><worldbody><body></mujoco>".into(), MAP, "MuJoCo could not load"),
        (arm("0.3"), "joints = [{ bus = 1, id = 1, joint = \"wrist\" }]", "no hinge or slide joint named `wrist`"),
        (
            arm("0.3"),
            "joints = [{ bus = 1, id = 1, joint = \"elbow\" }, { bus = 1, id = 2, joint = \"elbow\" }]",
            "are both mapped to joint `elbow`",
        ),
        (arm("nan"), MAP, "mass=\"nan\"> is not a finite number"),
        (arm("0.3"), "joints = [{ bus = 1, id = 7, joint = \"elbow\" }]", "which the robot does not have"),
    ];
    for (model, joints, want) in cases {
        let o = run_model(&scratch, &model, joints, &[]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{want}: {e}");
        assert!(e.contains(want), "{want}: {e}");
        assert_eq!(e.trim().lines().count(), 1, "one sentence: {e}");
        assert!(!e.contains("panicked"), "{e}");
    }
    assert_one_clear_message(
        &["run", "--physics", "--ground-tilt", "0,45"],
        "physics.ground_pitch_deg = 45 is out of range",
    );
    assert_one_clear_message(&["run", "--physics", "--ground-tilt", "level"], "is out of range");
    assert_one_clear_message(&["run", "--lockstep", "--push", "1:0,0,0"], "a push needs a body");
    assert_one_clear_message(&["run", "--physics", "--push", "soon"], "expected SECONDS:FX,FY,FZ");
    let mut many = vec!["run", "--physics"];
    for _ in 0..17 {
        many.extend(["--push", "1:0,1,0"]);
    }
    assert_one_clear_message(&many, "17 pushes given; a run takes at most 16");
}

#[test]
fn an_unstable_model_ends_the_run_degraded_with_an_event_and_no_nan() {
    let scratch = Scratch::new("physics-unstable");
    let model = ARM
        .replace("INTEGRATOR", "Euler")
        .replace("ARMATURE", "0")
        .replace("STIFF", r#"stiffness="1e9""#)
        .replace("MASS", "0.3");
    let o = run_model(&scratch, &model, MAP, &[]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", stdout(&o), stderr(&o));
    let s = last_json(&o);
    assert_eq!(s["status"], "degraded");
    let problems = s["problems"].to_string();
    assert!(problems.contains("the physics went unstable"), "{problems}");
    let kinds: Vec<&str> = s["events"].as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
    assert!(kinds.contains(&"physics_unstable"), "{kinds:?}");
    assert!(s["cycles"].as_u64().unwrap() < 1000, "the run ended early");
    for servo in s["final"].as_object().unwrap().values() {
        assert!(servo["position"].is_number(), "a finite position, never NaN/null: {servo}");
    }
}

/// Real time (the wall clock) with a body: a stalled host can change how many cycles came and
/// how the body moved, not that the counts add up and the IMU read the body.
#[test]
fn a_real_time_run_with_a_body_keeps_its_books() {
    let o = rtloop(&["run", "--physics", "--duration", "1", "--json"]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    let s = last_json(&o);
    assert!(s["body"]["steps"].as_u64().unwrap() > 0);
    assert_eq!(s["imu_samples"], s["cycles"]);
}

/// The body under a simulated pi3hat's four buses, as under four `sim` buses: the servos'
/// frames go through the board's SPI registers, the IMU reads the body.
#[test]
fn the_body_stands_on_a_simulated_pi3hat_too() {
    let o = rtloop(&[
        "run",
        "--physics",
        "--lockstep",
        "--duration",
        "3",
        "--json",
        "--bus",
        "1=pi3hat:sim",
        "--bus",
        "2=pi3hat:sim",
        "--bus",
        "3=pi3hat:sim",
        "--bus",
        "4=pi3hat:sim",
        "--ids",
        "1=1-3",
        "--ids",
        "2=4-6",
        "--ids",
        "3=7-9",
        "--ids",
        "4=10-12",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let s = last_json(&o);
    assert_eq!(s["missing_replies"], 0);
    assert_eq!(s["imu_samples"], s["cycles"]);
    let (height, _, _) = body_of(&s);
    assert!(height > 0.28, "standing: {height:.3} m");
}
