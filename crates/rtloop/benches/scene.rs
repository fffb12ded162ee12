//! What the 3D view costs (rtloop::scene): loading a model for viewing, the scene
//! (`foxglove.SceneUpdate`, sent once per client) and every body's pose from a `qpos`
//! (`foxglove.FrameTransforms`, at most 50 Hz, on the publisher thread) — for the built-in
//! quadruped and, when `tools/models` has fetched them, Menagerie's Go2 and UR5e (meshes).
//! `cargo bench -p rtloop --features physics --bench scene`.
use std::time::Instant;

use rtloop::scene::Scene3d;
use rtloop::telemetry::ModelRecord;

fn measure(label: &str, record: &ModelRecord) {
    let started = Instant::now();
    let mut scene = match Scene3d::for_model(record) {
        Ok(s) => s,
        Err(e) => {
            println!("{label}: {e}");
            return;
        }
    };
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let started = Instant::now();
    let json = scene.scene_update(1);
    let scene_ms = started.elapsed().as_secs_f64() * 1e3;
    let qpos = scene.view_mut().poses().len();
    let nq = scene.view_mut().nq();
    let mut out = Vec::new();
    let reference = vec![0.0; nq];
    let n = 20_000;
    let started = Instant::now();
    for i in 0..n {
        // A free joint's quaternion must not be all zero: the reference pose's own qpos.
        let mut q = reference.clone();
        if nq >= 7 {
            q[3] = 1.0;
            q[0] = i as f64 * 1e-6;
        }
        assert!(scene.transforms(i, &q, &mut out));
    }
    let per_us = started.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!(
        "{label:<28} load {load_ms:>7.1} ms  scene {:>9} B in {scene_ms:>6.1} ms  transforms of {} bodies {:>6} B in {per_us:>5.1} µs",
        json.len(),
        qpos - 1,
        out.len()
    );
}

fn main() {
    let built_in = rtloop_physics::view::ModelView::load(&rtloop_physics::ModelSource::BuiltIn).expect("loads");
    let record = ModelRecord { compiled_sha256: built_in.compiled_sha256().into(), ..Default::default() };
    measure("the built-in quadruped", &record);
    let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models");
    for (label, file) in
        [("Menagerie Go2 (scene_flat)", "go2/scene_flat.xml"), ("Menagerie UR5e (scene)", "ur5e/scene.xml")]
    {
        let path = models.join(file);
        if !path.exists() {
            println!("{label}: not fetched (tools/models)");
            continue;
        }
        let path = std::fs::canonicalize(path).expect("a path");
        let view =
            rtloop_physics::view::ModelView::load(&rtloop_physics::ModelSource::File(path.clone())).expect("loads");
        let record = ModelRecord {
            path: path.display().to_string(),
            file_sha256: view.file_sha256().unwrap_or_default().into(),
            compiled_sha256: view.compiled_sha256().into(),
            ..Default::default()
        };
        measure(label, &record);
    }
}
