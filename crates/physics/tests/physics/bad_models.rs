//! Models and maps that cannot be used: one sentence each, never a panic, never a NaN handed
//! to a servo.

use super::*;
use std::io::Write;

fn file(text: &str, suffix: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(suffix).tempfile().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

fn spec_for(path: &std::path::Path, joints: &[(usize, u8, &str)]) -> PhysicsSpec {
    PhysicsSpec {
        model: ModelSource::File(path.to_path_buf()),
        joints: joints.iter().map(|&(bus, id, j)| ServoJoint::new(bus, id, j)).collect(),
        pose: BuiltInPose::Reference,
        settle_s: 0.0,
        ..PhysicsSpec::quadruped()
    }
}

/// One pendulum on a free base: small enough to read, a real model all the same.
const PENDULUM: &str = r#"<mujoco>
  <worldbody>
    <geom type="plane" size="1 1 0.1"/>
    <body name="base" pos="0 0 0.5">
      <freejoint/>
      <geom type="box" size="0.1 0.1 0.1" mass="1"/>
      <body name="arm">
        <joint name="swing" axis="0 1 0" armature="0.01"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.02" mass="MASS"/>
      </body>
    </body>
  </worldbody>
</mujoco>"#;

fn error_of(spec: &PhysicsSpec) -> PhysicsError {
    load(spec).expect_err("refused")
}

#[test]
fn a_file_that_does_not_parse_gets_mujocos_reason_in_one_sentence() {
    let f = file("<mujoco><worldbody><body></mujoco>", ".xml");
    let e = error_of(&spec_for(f.path(), &[(0, 1, "swing")]));
    assert!(matches!(e, PhysicsError::Model { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.starts_with("MuJoCo could not load ") && text.ends_with("fix the model file"), "{text}");
    assert!(!text.contains('\n'), "one line: {text}");
    let e = error_of(&spec_for(std::path::Path::new("/nonexistent/robot.xml"), &[(0, 1, "swing")]));
    assert!(matches!(e, PhysicsError::Model { .. }), "{e:?}");
}

#[test]
fn a_mapped_joint_the_model_lacks_is_named_with_the_ones_it_has() {
    let f = file(&PENDULUM.replace("MASS", "0.2"), ".xml");
    let e = error_of(&spec_for(f.path(), &[(0, 1, "knee")]));
    assert_eq!(e, PhysicsError::NoSuchJoint { joint: "knee".into(), known: vec!["swing".into()] });
    assert!(e.to_string().contains("map each servo to one of swing"), "{e}");
}

#[test]
fn two_servos_on_one_joint_and_one_servo_twice_are_refused() {
    let f = file(&PENDULUM.replace("MASS", "0.2"), ".xml");
    let e = error_of(&spec_for(f.path(), &[(0, 1, "swing"), (1, 2, "swing")]));
    assert!(matches!(e, PhysicsError::SharedJoint { .. }), "{e:?}");
    assert!(e.to_string().contains("servos 1 (bus 1) and 2 (bus 2) are both mapped to joint `swing`"), "{e}");
    let e = error_of(&spec_for(f.path(), &[(0, 1, "swing"), (0, 1, "other")]));
    assert_eq!(e, PhysicsError::ServoTwice { bus: 0, id: 1 });
}

#[test]
fn a_nan_in_the_model_is_refused_before_anything_steps() {
    for bad in ["nan", "inf", "-nan"] {
        let f = file(&PENDULUM.replace("MASS", bad), ".xml");
        let e = error_of(&spec_for(f.path(), &[(0, 1, "swing")]));
        // MuJoCo itself would read `nan` as "not given" and use a default: refused first.
        assert_eq!(
            e,
            PhysicsError::NotFiniteAttribute { element: "geom".into(), attribute: "mass".into(), value: bad.into() },
            "mass {bad}"
        );
        assert!(e.to_string().contains("mass=\""), "{e}");
    }
}

#[test]
fn a_ball_joint_cannot_be_a_servos() {
    let f = file(
        &PENDULUM
            .replace("MASS", "0.2")
            .replace(r#"<joint name="swing" axis="0 1 0""#, r#"<joint name="swing" type="ball""#),
        ".xml",
    );
    assert_eq!(
        error_of(&spec_for(f.path(), &[(0, 1, "swing")])),
        PhysicsError::NotAServoJoint { joint: "swing".into() }
    );
}

#[test]
fn a_missing_keyframe_and_body_are_named() {
    let f = file(&PENDULUM.replace("MASS", "0.2"), ".xml");
    let spec = PhysicsSpec { pose: BuiltInPose::Keyframe("crouch".into()), ..spec_for(f.path(), &[(0, 1, "swing")]) };
    assert_eq!(error_of(&spec), PhysicsError::NoSuchPose { pose: "crouch".into() });
    let spec = PhysicsSpec { body: Some("torso".into()), ..spec_for(f.path(), &[(0, 1, "swing")]) };
    assert_eq!(error_of(&spec), PhysicsError::NoSuchBody { body: "torso".into() });
}

#[test]
fn a_urdf_loads_as_mujoco_compiles_it() {
    let urdf = r#"<robot name="arm">
  <link name="base"><inertial><mass value="1"/><inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="upper"><inertial><origin xyz="0 0 -0.15"/><mass value="0.3"/><inertia ixx="0.002" iyy="0.002" izz="0.0001" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="shoulder" type="revolute"><parent link="base"/><child link="upper"/><axis xyz="0 1 0"/><limit lower="-3" upper="3" effort="10" velocity="10"/></joint>
</robot>"#;
    let f = file(urdf, ".urdf");
    let loaded = load(&spec_for(f.path(), &[(0, 1, "shoulder")])).expect("MuJoCo compiles URDF");
    assert_eq!(loaded.joint_names, ["shoulder"]);
}

/// A joint spring far too stiff for the time step of the explicit integrator: the plant blows
/// up on its own. The world stops stepping it, keeps the error, and no servo ever reports a
/// non-finite position. (Too-stiff servo gains do not do it: the servo's torque and current
/// limits and its over-temperature fault bound what it puts in, as on a real moteus.)
#[test]
fn an_unstable_plant_stops_with_an_error_and_no_nan_reaches_a_servo() {
    let stiff = PENDULUM
        .replace("MASS", "0.2")
        .replace("<mujoco>", r#"<mujoco><option integrator="Euler"/>"#)
        .replace(r#"armature="0.01""#, r#"armature="0" stiffness="1e9""#);
    let f = file(&stiff, ".xml");
    let loaded = load(&spec_for(f.path(), &[(0, 1, "swing")])).unwrap();
    let mut world = World::new(loaded.plant, loaded.links).unwrap();
    let mut servos = vec![Servo::new(ServoConfig::physical(1))];
    world.couple(&mut visit(&mut servos)).unwrap();
    world.advance_to(0, &mut visit(&mut servos));
    let cmd = PositionCommand { position: Some(0.25), ..Default::default() };
    let mut reply = CanFdFrame::default();
    servos[0].handle_frame(&position_frame(1, &cmd), 0, &mut reply);
    let mut now = 0;
    for _ in 0..2000 {
        now += 1_000_000;
        world.advance_to(now, &mut visit(&mut servos));
        servos[0].advance_to(now);
        assert!(servos[0].position().is_finite() && servos[0].velocity().is_finite());
        if world.fault().is_some() {
            break;
        }
    }
    let fault = world.fault().expect("the plant went unstable");
    let text = fault.to_string();
    assert!(text.starts_with("the physics went unstable at "), "{text}");
    let steps = world.steps();
    world.advance_to(now + 10_000_000, &mut visit(&mut servos));
    assert_eq!(world.steps(), steps, "an unstable plant is not stepped again");
}

/// The built-in model with one number at a time replaced by something hostile (NaN, an
/// infinity, a huge or negative value, a word, nothing), 300 times from a fixed seed: every
/// load is a model or one sentence, and a model that loads steps without handing a servo a
/// non-finite state (it may stop with a PlantError).
#[test]
fn hostile_numbers_in_a_model_never_panic_or_reach_a_servo() {
    let text = rtloop_physics::QUADRUPED_MJCF;
    // Byte ranges of every number in an attribute value.
    let mut numbers = Vec::new();
    let bytes = text.as_bytes();
    let mut in_value = false;
    let mut start = None;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'"' {
            in_value = !in_value;
        }
        let numeric = in_value && (b.is_ascii_digit() || b == b'.' || b == b'-');
        match (numeric, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                numbers.push(s..i);
                start = None;
            }
            _ => {}
        }
    }
    assert!(numbers.len() > 100, "the model has numbers to replace: {}", numbers.len());
    let hostile = ["nan", "inf", "-inf", "1e300", "-1e300", "-1", "0", "1e9", "abc", ""];
    let mut rng = rtloop_sim::rng::XorShift64::new(24);
    let (mut loaded, mut refused) = (0, 0);
    for _ in 0..300 {
        let range = numbers[(rng.next_u64() % numbers.len() as u64) as usize].clone();
        let with = hostile[(rng.next_u64() % hostile.len() as u64) as usize];
        let mutated = format!("{}{with}{}", &text[..range.start], &text[range.end..]);
        let f = file(&mutated, ".xml");
        let spec = PhysicsSpec {
            model: ModelSource::File(f.path().to_path_buf()),
            joints: PhysicsSpec::quadruped().joint_map(),
            settle_s: 0.05,
            ..PhysicsSpec::quadruped()
        };
        match load(&spec) {
            Err(e) => {
                refused += 1;
                assert!(!e.to_string().contains('\n'), "one line: {e}");
            }
            Ok(l) => {
                loaded += 1;
                let mut world = World::new(l.plant, l.links).unwrap();
                let mut servos: Vec<Servo> = (1..=12).map(|id| Servo::new(ServoConfig::physical(id))).collect();
                world.couple(&mut visit(&mut servos)).unwrap();
                for k in 0..=100u64 {
                    world.advance_to(k * 1_000_000, &mut visit(&mut servos));
                }
                for s in &servos {
                    assert!(s.position().is_finite() && s.velocity().is_finite(), "{with} at {range:?}");
                }
                if let Some(imu) = world.imu() {
                    assert!(imu.quaternion.iter().all(|q| q.is_finite()), "{with} at {range:?}");
                }
            }
        }
    }
    assert!(loaded > 0 && refused > 0, "both outcomes seen: {loaded} loaded, {refused} refused");
}
