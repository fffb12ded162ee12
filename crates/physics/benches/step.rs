//! Steps per second of the built-in quadruped: MuJoCo's own `mj_step` (the limit anything
//! built on it can reach) beside the plant rtloop steps (the same step, the joint torques
//! written in and the stability checks after), and beside twelve servos coupled to it through
//! `rtloop_sim::World` (their controllers evaluated every step). One line each:
//! `cargo bench -p rtloop-physics --features mujoco --bench step`. Then, when `tools/models`
//! has fetched them, `mj_step` for other people's robots as they ship them (Go2, Go1, UR5e),
//! at their own time step: what `benches/models.sh` sets beside rtloop's lockstep rate.
use std::time::Instant;

use mujoco_rs::prelude::*;
use rtloop_physics::{load, PhysicsSpec, QUADRUPED_MJCF};
use rtloop_sim::{Servo, ServoConfig, World};

const SECONDS: f64 = 2.0;

fn rate(label: &str, mut step: impl FnMut()) -> f64 {
    for _ in 0..2000 {
        step();
    }
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < SECONDS {
        for _ in 0..1000 {
            step();
        }
        n += 1000;
    }
    let per_s = n as f64 / start.elapsed().as_secs_f64();
    println!("{label:<44} {per_s:>10.0} steps/s  {:>6.2} µs/step", 1e6 / per_s);
    per_s
}

fn main() {
    let model = MjModel::from_xml_string(QUADRUPED_MJCF).expect("the built-in model compiles");
    let timestep = model.opt().timestep;
    let mut data = MjData::new(Box::new(model));
    data.reset_keyframe(0).expect("the lying keyframe");
    println!("built-in quadruped, time step {:.2} ms", timestep * 1e3);
    rate("mj_step (MuJoCo alone)", || data.step());

    let mut loaded = load(&PhysicsSpec::quadruped()).expect("loads");
    let torques = [0.0; 12];
    rate("Plant::step (torques in, checks out)", || {
        let _ = loaded.plant.step(&torques);
    });

    let loaded = load(&PhysicsSpec::quadruped()).expect("loads");
    let mut world = World::new(loaded.plant, loaded.links).expect("couples");
    // The quadruped's layout: three servos per bus.
    let mut buses: Vec<rtloop_sim::SimBus> = (0..4u8)
        .map(|b| {
            let mut bus = rtloop_sim::SimBus::new(Default::default());
            for id in b * 3 + 1..=b * 3 + 3 {
                bus.add_servo(Servo::new(ServoConfig::physical(id)));
            }
            bus
        })
        .collect();
    world.couple(&mut buses).expect("couples");
    let step_ns = world.step_ns();
    let mut now = 0u64;
    world.advance_to(now, &mut buses);
    rate("World::advance_to (12 servos + plant)", || {
        now += step_ns;
        world.advance_to(now, &mut buses);
    });

    let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models");
    let models = std::env::var_os("CARGO_TARGET_DIR").map_or(models, |t| std::path::PathBuf::from(t).join("models"));
    for file in ["go2/scene_flat.xml", "go1/scene_flat.xml", "ur5e/scene.xml"] {
        let path = models.join(file);
        let Ok(model) = MjModel::from_xml(&path) else {
            println!("{file}: not here (tools/models fetches it)");
            continue;
        };
        let timestep = model.opt().timestep;
        let mut data = MjData::new(Box::new(model));
        let _ = data.reset_keyframe(0);
        let per_s = rate(&format!("mj_step {file} ({:.1} ms step)", timestep * 1e3), || data.step());
        println!("{:<44} {:>10.1} simulated s per wall s", "", per_s * timestep);
    }
}
