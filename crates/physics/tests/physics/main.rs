//! The physics plant on its own and under simulated servos, in simulated time (no clock):
//! the built-in quadruped lies, stands on its servos' position controllers, feels a tilted
//! ground and a push in its IMU; bad models are refused with one sentence each.
#![cfg(feature = "mujoco")]

use rtloop_physics::{load, BuiltInPose, ModelSource, PhysicsError, PhysicsSpec, ServoJoint};
use rtloop_proto::frame::CanFdFrame;
use rtloop_proto::host::PositionCommand;
use rtloop_sim::{Push, Servo, ServoConfig, World};

mod authors_models;
mod bad_models;

/// The stand pose of the library's motion (abduction, hip, knee), rev.
const STAND: [f64; 3] = [0.0, -0.1, 0.2];

/// Twelve servos (bus index = (id − 1) / 3) coupled to the built-in quadruped.
struct Robot {
    world: World,
    servos: Vec<Servo>,
    now_ns: u64,
}

impl Robot {
    fn new(spec: &PhysicsSpec) -> Robot {
        let loaded = load(spec).expect("the model loads");
        let mut world = World::new(loaded.plant, loaded.links).unwrap();
        let mut servos: Vec<Servo> = (1..=12).map(|id| Servo::new(ServoConfig::physical(id))).collect();
        world.couple(&mut visit(&mut servos)).unwrap();
        let mut r = Robot { world, servos, now_ns: 0 };
        r.world.advance_to(0, &mut visit(&mut r.servos));
        r
    }

    /// Command every servo to `pose(i)` (position mode) and run `seconds`, commanding every ms.
    fn run(&mut self, seconds: f64, pose: impl Fn(usize, f64) -> f64) {
        let steps = (seconds * 1000.0) as u64;
        for _ in 0..steps {
            self.now_ns += 1_000_000;
            self.world.advance_to(self.now_ns, &mut visit(&mut self.servos));
            let t = self.now_ns as f64 * 1e-9;
            for (i, s) in self.servos.iter_mut().enumerate() {
                s.advance_to(self.now_ns);
                let cmd = PositionCommand {
                    position: Some(pose(i, t)),
                    velocity: Some(0.0),
                    maximum_torque: Some(16.0),
                    watchdog_timeout: Some(0.1),
                    ..Default::default()
                };
                let mut reply = CanFdFrame::default();
                s.handle_frame(&position_frame(s.id(), &cmd), self.now_ns, &mut reply);
            }
        }
    }

    fn height(&self) -> f64 {
        self.world.body().unwrap().height_m()
    }
}

/// Servos laid out as the quadruped's: three per bus (one servo alone is on bus 0).
struct Quadruped<'a>(&'a mut [Servo]);

impl rtloop_sim::Servos for Quadruped<'_> {
    fn servo_mut(&mut self, bus: usize, id: u8) -> Option<&mut Servo> {
        self.0.iter_mut().find(|s| s.id() == id && usize::from((s.id() - 1) / 3) == bus)
    }
}

fn visit(servos: &mut [Servo]) -> Quadruped<'_> {
    Quadruped(servos)
}

fn position_frame(id: u8, cmd: &PositionCommand) -> CanFdFrame {
    let mut buf = [0u8; rtloop_proto::frame::MAX_DATA];
    let mut w = rtloop_proto::writer::FrameWriter::new(&mut buf);
    rtloop_proto::host::encode_position(&mut w, cmd, &Default::default(), None).unwrap();
    w.to_frame(0x8000 | u32::from(id)).unwrap()
}

/// From the lying pose, ramp every joint to `STAND` over `ramp_s` from where it lies.
fn stand_up(r: &mut Robot, ramp_s: f64, hold_s: f64) {
    let from: Vec<f64> = r.servos.iter().map(|s| s.position()).collect();
    let t0 = r.now_ns as f64 * 1e-9;
    r.run(ramp_s + hold_s, |i, t| {
        let x = ((t - t0) / ramp_s).clamp(0.0, 1.0);
        let s = x * x * (3.0 - 2.0 * x);
        from[i] + (STAND[i % 3] - from[i]) * s
    });
}

#[test]
fn the_built_in_quadruped_lies_then_stands_on_its_servos() {
    let mut r = Robot::new(&PhysicsSpec::quadruped());
    let lying = r.height();
    assert!(lying < 0.16, "lying: the body is {lying:.3} m up");
    // Every servo reports the joint where the physics has it (knees folded).
    let knee = r.servos[2].position();
    assert!(knee > 0.35, "the knee lies folded: {knee:.3} rev");
    stand_up(&mut r, 1.0, 1.0);
    let standing = r.height();
    // Hips 0.32 m above the feet at the stand pose, feet 0.02 m balls, a little droop.
    assert!((0.28..0.36).contains(&standing), "standing: the body is {standing:.3} m up");
    let (roll, pitch) = r.world.body().unwrap().roll_pitch();
    assert!(roll.abs().to_degrees() < 2.0 && pitch.abs().to_degrees() < 2.0, "level: {roll} {pitch}");
    for s in &r.servos {
        assert!(s.position().is_finite() && s.velocity().abs() < 0.05, "servo {} settled", s.id());
    }
}

#[test]
fn a_tilted_ground_shows_in_the_imu_and_a_push_moves_the_body() {
    let spec = PhysicsSpec { ground_tilt_deg: (0.0, 8.0), ..PhysicsSpec::quadruped() };
    let mut r = Robot::new(&spec);
    stand_up(&mut r, 1.0, 0.5);
    let imu = r.world.imu().unwrap();
    let (roll, pitch) = rtloop_sim::imu::roll_pitch(imu.quaternion);
    assert!((pitch.to_degrees() - 8.0).abs() < 2.5, "standing on an 8° slope, nose up: pitch {}", pitch.to_degrees());
    assert!(roll.to_degrees().abs() < 2.0, "roll {}", roll.to_degrees());
    // Push sideways (to the robot's left) for 0.1 s: the IMU sees the acceleration.
    let from = r.now_ns;
    assert!(r.world.push(Push { force_n: [0.0, 60.0, 0.0], from_ns: from, duration_ns: 100_000_000 }));
    let mut peak = 0.0f64;
    for _ in 0..100 {
        r.run(0.001, |i, _| STAND[i % 3]);
        // Left is −y in the pi3hat's frame.
        peak = peak.max(-r.world.imu().unwrap().accel_mps2[1]);
    }
    assert!(peak > 2.0, "the push accelerates the body to the left: peak {peak:.2} m/s²");
    r.run(1.5, |i, _| STAND[i % 3]);
    assert!(r.height() > 0.25, "still standing after the push: {:.3} m", r.height());
}

#[test]
fn a_reset_returns_to_the_same_pose_for_the_same_seed() {
    let mut r = Robot::new(&PhysicsSpec::quadruped());
    stand_up(&mut r, 0.5, 0.2);
    let mut poses = Vec::new();
    for seed in [7, 7, 8] {
        assert!(r.world.reset(seed, &mut visit(&mut r.servos)));
        poses.push(r.servos.iter().map(|s| s.position()).collect::<Vec<_>>());
    }
    assert_eq!(poses[0], poses[1], "the same seed, the same pose");
    assert_ne!(poses[0], poses[2], "another seed, another pose");
    assert!(r.height() < 0.16);
}

#[test]
fn the_built_in_map_is_buses_one_to_four_abduction_hip_knee() {
    let map = PhysicsSpec::quadruped().joint_map();
    assert_eq!(map.len(), 12);
    assert_eq!(map[0], ServoJoint::new(0, 1, "fl_abduction"));
    assert_eq!(map[11], ServoJoint::new(3, 12, "rr_knee"));
    let loaded = load(&PhysicsSpec::quadruped()).unwrap();
    assert_eq!(loaded.joint_names[5], "fr_knee");
    let _ = (BuiltInPose::Reference, ModelSource::BuiltIn, PhysicsError::NoMap);
}

/// The servo controllers run once per plant step (0.5 ms, 2 kHz). A moteus runs its position
/// loop at tens of kHz; at this model's gains and inertias (ω·dt ≈ 0.05, see docs/physics.md)
/// the discrete loop already behaves as a continuous one: halving the step changes where the
/// robot stands by micrometres (measured: 0.3 µm, 0.0001°, 2e-6 rev).
#[test]
fn halving_the_step_does_not_change_the_stand() {
    use std::io::Write;
    let stand_at = |xml: &str| {
        let mut f = tempfile::Builder::new().suffix(".xml").tempfile().unwrap();
        f.write_all(xml.as_bytes()).unwrap();
        let spec = PhysicsSpec {
            model: ModelSource::File(f.path().to_path_buf()),
            joints: PhysicsSpec::quadruped().joint_map(),
            ..PhysicsSpec::quadruped()
        };
        let mut r = Robot::new(&spec);
        stand_up(&mut r, 1.0, 1.0);
        let (roll, pitch) = r.world.body().unwrap().roll_pitch();
        (r.height(), roll.to_degrees(), pitch.to_degrees(), r.servos.iter().map(|s| s.position()).collect::<Vec<_>>())
    };
    let half = rtloop_physics::QUADRUPED_MJCF.replace(r#"timestep="0.0005""#, r#"timestep="0.00025""#);
    assert_ne!(half, rtloop_physics::QUADRUPED_MJCF, "the model states its time step");
    let (h1, r1, p1, j1) = stand_at(rtloop_physics::QUADRUPED_MJCF);
    let (h2, r2, p2, j2) = stand_at(&half);
    assert!((h1 - h2).abs() < 1e-5, "height {h1:.5} vs {h2:.5}");
    assert!((r1 - r2).abs() < 0.01 && (p1 - p2).abs() < 0.01, "roll {r1:.3}/{r2:.3} pitch {p1:.3}/{p2:.3}");
    for (a, b) in j1.iter().zip(&j2) {
        assert!((a - b).abs() < 1e-4, "joints {a:.5} vs {b:.5} rev");
    }
}
