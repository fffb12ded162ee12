//! Models as their authors ship them (docs/physics.md, "What is taken from a model"): their
//! own actuators, their keyframes, their time step, their bodies in any order, slide joints,
//! mirrored joints, a missing floor, an `<include>` — each what a run of someone else's robot
//! met before, as a small model that shows it.

use super::*;
use rtloop_physics::{ModelActuators, PhysicsNotice, ServoOverrides};
use rtloop_sim::ServoSetup;
use std::f64::consts::TAU;
use std::io::Write;

fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::File::create(path).unwrap().write_all(text.as_bytes()).unwrap();
    }
    dir
}

fn spec(path: &std::path::Path, joints: &[(usize, u8, &str)]) -> PhysicsSpec {
    PhysicsSpec {
        settle_s: 0.0,
        ..PhysicsSpec::model_file(path, joints.iter().map(|&(bus, id, j)| ServoJoint::new(bus, id, j)).collect())
    }
}

/// A one-legged hopper on a floor: a free base carrying a hip (hinge) and a foot (slide), a
/// position actuator on the hip, a motor on the foot, and two keyframes.
const HOPPER: &str = r#"<mujoco model="hopper">
  <option timestep="STEP"/>
  <worldbody>
    FLOOR
    <body name="base" pos="0 0 0.5">
      <freejoint/>
      <geom type="box" size="0.1 0.1 0.05" mass="2"/>
      <body name="leg">
        <joint name="hip" axis="0 1 0" armature="0.05" range="-1.5 1.5"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.02" mass="0.3"/>
        <body name="foot" pos="0 0 -0.3">
          <joint name="foot" type="slide" axis="0 0 1" range="-0.1 0.1" armature="0.05"/>
          <geom type="sphere" size="0.03" mass="0.1"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position name="hip" joint="hip" kp="40" kv="2" forcerange="-7 7"/>
    <motor name="foot" joint="foot" ctrlrange="-30 30"/>
  </actuator>
  <keyframe>
    <key name="home" qpos="0 0 0.5 1 0 0 0 0.5 0.03" ctrl="0.5 0"/>
    <key name="crouch" qpos="0 0 0.4 1 0 0 0 1.0 -0.05" ctrl="1.0 0"/>
  </keyframe>
</mujoco>"#;

const FLOOR: &str = r#"<geom name="floor" type="plane" size="0 0 0.05"/>"#;

fn hopper(step: &str) -> String {
    HOPPER.replace("STEP", step).replace("FLOOR", FLOOR)
}

const HOPPER_MAP: [(usize, u8, &str); 2] = [(0, 1, "hip"), (0, 2, "foot")];

#[test]
fn the_models_actuators_on_servo_joints_are_switched_off_and_their_figures_adopted() {
    let d = dir_with(&[("hopper.xml", &hopper("0.001"))]);
    let loaded = load(&spec(&d.path().join("hopper.xml"), &HOPPER_MAP)).unwrap();
    assert!(
        loaded.notices.contains(&PhysicsNotice::ActuatorsSwitchedOff { count: 2, adopted: true }),
        "{:?}",
        loaded.notices
    );
    let [hip, foot] = [loaded.setups[0], loaded.setups[1]];
    // The position actuator's kp, kv (per radian) as the servo's (per revolution), its force
    // range as the torque limit; the motor's control range as the slide's force limit.
    assert!((hip.kp_nm_per_rev - 40.0 * TAU).abs() < 1e-9 && (hip.kd_nms_per_rev - 2.0 * TAU).abs() < 1e-9, "{hip:?}");
    assert_eq!(hip.max_torque_nm, 7.0);
    assert_eq!(foot.max_torque_nm, 30.0);
    assert_eq!(
        (foot.kp_nm_per_rev, foot.kd_nms_per_rev),
        (ServoSetup::PHYSICAL.kp_nm_per_rev, ServoSetup::PHYSICAL.kd_nms_per_rev)
    );

    // `actuators = "off"`: switched off all the same, nothing taken from them.
    let off = load(&PhysicsSpec { actuators: ModelActuators::Off, ..spec(&d.path().join("hopper.xml"), &HOPPER_MAP) })
        .unwrap();
    assert!(off.notices.contains(&PhysicsNotice::ActuatorsSwitchedOff { count: 2, adopted: false }));
    assert_eq!(off.setups, vec![ServoSetup::PHYSICAL; 2]);

    // The run file's figures come first: the joint's own entry, then the global ones.
    let mut s = spec(&d.path().join("hopper.xml"), &HOPPER_MAP);
    s.servo = ServoOverrides { max_torque_nm: Some(5.0), kd_nms_per_rev: Some(3.0), ..Default::default() };
    s.joints[0].servo = ServoOverrides { max_torque_nm: Some(9.0), ..Default::default() };
    let mixed = load(&s).unwrap();
    assert_eq!(mixed.setups[0].max_torque_nm, 9.0, "the joint's entry");
    assert_eq!(mixed.setups[0].kd_nms_per_rev, 3.0, "the global entry");
    assert!((mixed.setups[0].kp_nm_per_rev - 40.0 * TAU).abs() < 1e-9, "the model's");
    assert_eq!(mixed.setups[1].max_torque_nm, 5.0);
}

#[test]
fn a_switched_off_actuator_no_longer_moves_its_joint() {
    // A pendulum hanging from the world, its position actuator asked (keyframe ctrl) for
    // 1 rad: live, it would swing the arm there under limp servos; switched off, the arm
    // hangs where gravity leaves it.
    let model = r#"<mujoco>
  <option timestep="0.001"/>
  <worldbody>
    <body name="arm" pos="0 0 1">
      <joint name="swing" axis="0 1 0" armature="0.01"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.02" mass="0.3"/>
    </body>
  </worldbody>
  <actuator><position joint="swing" kp="40" kv="1" forcerange="-7 7"/></actuator>
  <keyframe><key name="start" qpos="0" ctrl="1"/></keyframe>
</mujoco>"#;
    let d = dir_with(&[("arm.xml", model)]);
    let s = PhysicsSpec {
        pose: BuiltInPose::Keyframe("start".into()),
        ..spec(&d.path().join("arm.xml"), &[(0, 1, "swing")])
    };
    let loaded = load(&s).unwrap();
    assert!(!loaded.model.floating);
    let mut world = World::new(loaded.plant, loaded.links).unwrap().with_setups(&loaded.setups);
    let mut servos = vec![Servo::new(ServoConfig::physical(1))];
    world.couple(&mut OneBus(&mut servos)).unwrap();
    for k in 1..=500u64 {
        world.advance_to(k * 1_000_000, &mut OneBus(&mut servos));
    }
    let swing_rad = servos[0].position() * TAU;
    assert!(swing_rad.abs() < 0.01, "the arm hangs, not at the actuator's 1 rad: {swing_rad}");
}

struct OneBus<'a>(&'a mut [Servo]);

impl rtloop_sim::Servos for OneBus<'_> {
    fn servo_mut(&mut self, bus: usize, id: u8) -> Option<&mut Servo> {
        if bus != 0 {
            return None;
        }
        self.0.iter_mut().find(|s| s.id() == id)
    }
}

#[test]
fn the_stand_pose_is_the_home_keyframe_or_the_one_named_in_servo_units() {
    let d = dir_with(&[("hopper.xml", &hopper("0.001"))]);
    let path = d.path().join("hopper.xml");
    let home = load(&spec(&path, &HOPPER_MAP)).unwrap();
    assert_eq!(home.model.stand_pose.as_deref(), Some("home"));
    let stand = home.stand_rev.unwrap();
    // A hinge in revolutions, a slide in metres (0.03 m is 0.03, not 0.03 / 2π "rev").
    assert!((stand[0] - 0.5 / TAU).abs() < 1e-12 && (stand[1] - 0.03).abs() < 1e-12, "{stand:?}");

    let crouch = load(&PhysicsSpec { stand_pose: Some("crouch".into()), ..spec(&path, &HOPPER_MAP) }).unwrap();
    assert!((crouch.stand_rev.unwrap()[1] + 0.05).abs() < 1e-12);

    let e = load(&PhysicsSpec { stand_pose: Some("sit".into()), ..spec(&path, &HOPPER_MAP) }).unwrap_err();
    assert_eq!(e, PhysicsError::NoSuchStandPose { pose: "sit".into(), known: vec!["home".into(), "crouch".into()] });
    assert!(e.to_string().contains("name one of home, crouch as `stand_pose`"), "{e}");

    // A mirrored joint (sign -1) stands at the mirrored servo position.
    let mut s = spec(&path, &HOPPER_MAP);
    s.joints[0].servo.output_sign = Some(-1.0);
    let mirrored = load(&s).unwrap();
    assert!((mirrored.stand_rev.unwrap()[0] + 0.5 / TAU).abs() < 1e-12);

    // A model without such keyframes names none.
    let bare = dir_with(&[(
        "bare.xml",
        &hopper("0.001").replace(r#"name="home""#, r#"name="pose1""#).replace(r#"name="crouch""#, r#"name="pose2""#),
    )]);
    assert_eq!(load(&spec(&bare.path().join("bare.xml"), &HOPPER_MAP)).unwrap().stand_rev, None);
}

#[test]
fn a_time_step_that_does_not_divide_the_period_is_adapted_and_said() {
    for (step, period_ns, used_s) in
        [("0.002", 1_000_000, 0.001), ("0.0015", 1_000_000, 0.001), ("0.002", 2_500_000, 0.00125)]
    {
        let d = dir_with(&[("hopper.xml", &hopper(step))]);
        let s = PhysicsSpec { period_ns, ..spec(&d.path().join("hopper.xml"), &HOPPER_MAP) };
        let loaded = load(&s).unwrap();
        assert!(
            (loaded.model.timestep_s - used_s).abs() < 1e-12,
            "{step} under {period_ns} ns: {}",
            loaded.model.timestep_s
        );
        let notice = loaded.notices.iter().find(|n| matches!(n, PhysicsNotice::TimeStepAdapted { .. }));
        assert!(notice.is_some(), "{:?}", loaded.notices);
        let text = notice.unwrap().to_string();
        assert!(
            text.contains(&format!("the model's {} ms time step does not divide", step.parse::<f64>().unwrap() * 1e3)),
            "{text}"
        );
    }
    // A step that divides the period is the model's, said nothing about.
    let d = dir_with(&[("hopper.xml", &hopper("0.0005"))]);
    let loaded = load(&spec(&d.path().join("hopper.xml"), &HOPPER_MAP)).unwrap();
    assert_eq!(loaded.model.timestep_s, 0.0005);
    assert!(!loaded.notices.iter().any(|n| matches!(n, PhysicsNotice::TimeStepAdapted { .. })));
}

#[test]
fn a_free_box_declared_first_is_not_the_imus_body() {
    let model = hopper("0.001")
        .replace(
            r#"<body name="base""#,
            r#"<body name="crate" pos="1 0 0.2"><freejoint/><geom type="box" size="0.1 0.1 0.1" mass="1"/></body>
    <body name="base""#,
        )
        .replace(r#"qpos="0 0 0.5 1 0 0 0 0.5 0.03""#, r#"qpos="1 0 0.2 1 0 0 0 0 0 0.5 1 0 0 0 0.5 0.03""#)
        .replace(r#"qpos="0 0 0.4 1 0 0 0 1.0 -0.05""#, r#"qpos="1 0 0.2 1 0 0 0 0 0 0.4 1 0 0 0 1.0 -0.05""#);
    let d = dir_with(&[("two.xml", &model)]);
    let loaded = load(&spec(&d.path().join("two.xml"), &HOPPER_MAP)).unwrap();
    assert_eq!(loaded.model.body, "base", "the free body that carries the mapped joints");
    assert!(loaded.model.floating);
}

#[test]
fn two_free_bodies_carrying_mapped_joints_are_refused_naming_both() {
    let model = r#"<mujoco>
  <worldbody>
    <geom type="plane" size="0 0 0.05"/>
    <body name="left" pos="0 0 0.3"><freejoint/><geom type="box" size="0.1 0.1 0.1" mass="1"/>
      <body><joint name="a" axis="0 1 0"/><geom type="capsule" fromto="0 0 0 0 0 -0.2" size="0.02" mass="0.2"/></body>
    </body>
    <body name="right" pos="1 0 0.3"><freejoint/><geom type="box" size="0.1 0.1 0.1" mass="1"/>
      <body><joint name="b" axis="0 1 0"/><geom type="capsule" fromto="0 0 0 0 0 -0.2" size="0.02" mass="0.2"/></body>
    </body>
  </worldbody>
</mujoco>"#;
    let d = dir_with(&[("twins.xml", model)]);
    let e = load(&spec(&d.path().join("twins.xml"), &[(0, 1, "a"), (0, 2, "b")])).unwrap_err();
    assert_eq!(e, PhysicsError::AmbiguousBody { candidates: vec!["`left`".into(), "`right`".into()] });
    assert!(e.to_string().contains("name the robot's base as `body` under [physics]"), "{e}");
    // Named, it loads.
    let s =
        PhysicsSpec { body: Some("right".into()), ..spec(&d.path().join("twins.xml"), &[(0, 1, "a"), (0, 2, "b")]) };
    assert_eq!(load(&s).unwrap().model.body, "right");
}

#[test]
fn a_floating_robot_without_a_floor_is_refused_pointing_at_the_scene_pattern() {
    let d = dir_with(&[("robot.xml", &HOPPER.replace("STEP", "0.001").replace("FLOOR", ""))]);
    let e = load(&spec(&d.path().join("robot.xml"), &HOPPER_MAP)).unwrap_err();
    assert!(matches!(e, PhysicsError::NoGround { ref body, .. } if body == "base"), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("has no ground") && text.contains("scene.xml") && text.contains("<include"), "{text}");
    assert!(!text.contains("unstable") && !text.contains("masses"), "not blamed on the model's physics: {text}");

    // The Menagerie pattern: a scene that includes the robot and adds the floor (from a
    // folder beside it: an include may reach outside the scene's folder).
    let scene = format!(
        r#"<mujoco model="hopper scene"><include file="../robot/robot.xml"/><worldbody>{FLOOR}</worldbody></mujoco>"#
    );
    let d = dir_with(&[
        ("robot/robot.xml", &HOPPER.replace("STEP", "0.001").replace("FLOOR", "")),
        ("scene/scene.xml", &scene),
    ]);
    let loaded = load(&spec(&d.path().join("scene/scene.xml"), &HOPPER_MAP)).unwrap();
    assert_eq!(loaded.model.name, "hopper scene");
}

#[test]
fn mujocos_whole_error_is_kept_with_the_element_and_line() {
    let model = "<mujoco model=\"m\">\n\n\n  <option timestep=\"0.001\"/>\n  <include file=\"parts/missing_part_with_a_long_name_to_pass_ninety_nine_characters.xml\"/>\n</mujoco>\n";
    let d = dir_with(&[("m.xml", model)]);
    let e = load(&spec(&d.path().join("m.xml"), &HOPPER_MAP)).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, PhysicsError::Model { .. }), "{e:?}");
    assert!(text.contains("missing_part_with_a_long_name_to_pass_ninety_nine_characters.xml"), "{text}");
    assert!(text.contains("include") && text.contains("line 5"), "the element and its line: {text}");
    assert!(!text.contains('\n'), "one line: {text}");
}

#[test]
fn servo_gains_a_light_joint_cannot_carry_at_the_step_are_said() {
    let d = dir_with(&[("hopper.xml", &hopper("0.001"))]);
    let mut s = spec(&d.path().join("hopper.xml"), &HOPPER_MAP);
    s.joints[0].servo.kd_nms_per_rev = Some(5000.0);
    let loaded = load(&s).unwrap();
    let stiff: Vec<String> = loaded
        .notices
        .iter()
        .filter(|n| matches!(n, PhysicsNotice::StiffServo { .. }))
        .map(ToString::to_string)
        .collect();
    assert_eq!(stiff.len(), 1, "{:?}", loaded.notices);
    assert!(stiff[0].starts_with("servo 1 on bus 1's gains are too stiff for joint `hip`"), "{}", stiff[0]);
    assert!(stiff[0].contains("kd at most"), "{}", stiff[0]);
    // The adopted gains (40 N·m/rad on 0.05+ kg·m²) are fine.
    let fine = load(&spec(d.path().join("hopper.xml").as_path(), &HOPPER_MAP)).unwrap();
    assert!(!fine.notices.iter().any(|n| matches!(n, PhysicsNotice::StiffServo { .. })), "{:?}", fine.notices);
}

#[test]
fn the_model_is_named_and_fingerprinted() {
    let d = dir_with(&[("hopper.xml", &hopper("0.001"))]);
    let a = load(&spec(&d.path().join("hopper.xml"), &HOPPER_MAP)).unwrap().model;
    assert_eq!(a.name, "hopper");
    assert_eq!(a.nq, 9);
    assert!(a.file_sha256.as_ref().is_some_and(|h| h.len() == 64) && a.compiled_sha256.len() == 64, "{a:?}");
    // The same model compiled from a copy elsewhere: the same compiled fingerprint.
    let e = dir_with(&[("copy.xml", &hopper("0.001"))]);
    let b = load(&spec(&e.path().join("copy.xml"), &HOPPER_MAP)).unwrap().model;
    assert_eq!(a.compiled_sha256, b.compiled_sha256);
}
