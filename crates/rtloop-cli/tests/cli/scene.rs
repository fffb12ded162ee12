//! A recorded run with physics replays in 3D: `rtloop log export --mcap` adds the model's scene
//! (`foxglove.SceneUpdate`), every body's pose (`foxglove.FrameTransforms`, at most 50 Hz) and
//! the IMU body's pose (`/imu/transform`) computed from the log's `model` and `body` records;
//! Foxglove's own JSON schemas (@foxglove/schemas, through node) judge every payload; a model
//! file changed since the run gives an export without the 3D view and one sentence saying why.
//! (`rtloop log serve` in 3D: tests/cli/foxglove_node.rs.)

use crate::support::*;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Every message of an MCAP file: (topic, schema name, log time ns, payload).
fn mcap_messages(path: &Path) -> Vec<(String, String, u64, Json)> {
    let bytes = std::fs::read(path).unwrap();
    mcap::MessageStream::new(&bytes)
        .unwrap()
        .map(|m| {
            let m = m.unwrap();
            let schema = m.channel.schema.as_ref().map(|s| s.name.clone()).unwrap_or_default();
            (m.channel.topic.clone(), schema, m.log_time, serde_json::from_slice(&m.data).unwrap())
        })
        .collect()
}

fn export(log: &Path, out: &Path) -> std::process::Output {
    rtloop(&["log", "export", log.to_str().unwrap(), "--mcap", out.to_str().unwrap(), "--json"])
}

#[test]
fn an_mcap_export_of_a_run_with_physics_carries_its_3d_view() {
    let scratch = Scratch::new("scene-mcap");
    let log = scratch.path("run.tlog");
    crate::physics::logged_pushed_run(&log, "2", "1:0,40,0:0.2");
    let mcap = scratch.path("run.mcap");
    let o = export(&log, &mcap);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let messages = mcap_messages(&mcap);
    // Topic → (schema name, every (log time, payload)).
    type Topics<'a> = BTreeMap<&'a str, (&'a str, Vec<(u64, &'a Json)>)>;
    let mut per_topic: Topics = BTreeMap::new();
    for (topic, schema, t, v) in &messages {
        per_topic.entry(topic).or_insert((schema, Vec::new())).1.push((*t, v));
    }
    let schema_of = |t: &str| per_topic.get(t).map(|(s, _)| *s);
    assert_eq!(schema_of("/model/scene"), Some("foxglove.SceneUpdate"));
    assert_eq!(schema_of("/model/transforms"), Some("foxglove.FrameTransforms"));
    assert_eq!(schema_of("/imu/transform"), Some("foxglove.FrameTransform"));
    let bodies = &per_topic["body"].1;
    // The scene once, with the first body item; its entities are the model's bodies.
    let scene = &per_topic["/model/scene"].1;
    assert_eq!(scene.len(), 1);
    assert_eq!(scene[0].0, bodies[0].0);
    let frames: Vec<&str> =
        scene[0].1["entities"].as_array().unwrap().iter().map(|e| e["frame_id"].as_str().unwrap()).collect();
    assert!(
        frames.contains(&"world") && frames.contains(&"model/body") && frames.contains(&"model/fl_shank"),
        "{frames:?}"
    );
    // Every body item's pose on /imu/transform; every body's pose at most every 20 ms.
    let body_at: BTreeMap<u64, &Json> = bodies.iter().copied().collect();
    let imu = &per_topic["/imu/transform"].1;
    assert_eq!(imu.len(), bodies.len());
    for (t, v) in imu {
        assert_eq!(v["translation"]["y"], body_at[t]["position_m"][1], "at {t}");
        assert_eq!(v["rotation"]["w"], body_at[t]["quaternion"][0], "at {t}");
    }
    let tf = &per_topic["/model/transforms"].1;
    assert!((95..=101).contains(&tf.len()), "2 s at 50 Hz: {}", tf.len());
    assert!(tf.windows(2).all(|w| w[1].0 - w[0].0 >= 20_000_000));
    let mut moved = 0.0f64;
    for (t, v) in tf {
        let base = v["transforms"].as_array().unwrap().iter().find(|f| f["child_frame_id"] == "model/body").unwrap();
        let p = &body_at[t]["position_m"];
        for (k, axis) in ["x", "y", "z"].iter().enumerate() {
            let (got, want) = (base["translation"][axis].as_f64().unwrap(), p[k].as_f64().unwrap());
            assert!((got - want).abs() < 1e-9, "at {t}: {axis} {got} vs the log's {want}");
        }
        moved = moved.max(p[1].as_f64().unwrap().abs());
    }
    assert!(moved > 0.02, "the push moved the body sideways: {moved} m");
    // Foxglove's own schemas judge the payloads.
    let Some(dir) = crate::foxglove_node::node_client() else {
        rtloop_testkit::skip("node and npm are needed for Foxglove's JSON schemas (@foxglove/schemas)");
        return;
    };
    let mut lines = String::new();
    for (topic, schema, _, v) in &messages {
        if schema.starts_with("foxglove.") && (topic != "/imu/transform" || lines.len() < 200_000) {
            lines.push_str(&serde_json::json!({"schema": schema, "payload": v}).to_string());
            lines.push('\n');
        }
    }
    let ran = run_limited(
        Command::new("node").arg("validate.js").current_dir(dir),
        lines.as_bytes(),
        Duration::from_secs(120),
    );
    let report: Json = serde_json::from_str(ran.stdout.lines().last().unwrap_or("{}")).unwrap();
    assert!(ran.success(), "Foxglove's schemas: {report:#} {}", ran.describe());
    for s in ["foxglove.SceneUpdate", "foxglove.FrameTransforms", "foxglove.FrameTransform"] {
        assert!(report["checked"][s].as_u64().unwrap_or(0) > 0, "{s} checked: {report}");
    }
}

const ARM: &str = r#"<mujoco>
  <option timestep="0.001"/>
  <worldbody>
    <body name="base" pos="0 0 0.5">
      <geom type="box" size="0.1 0.1 0.1" mass="1"/>
      <body name="upper">
        <joint name="shoulder" axis="0 1 0" armature="0.01"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.02" mass="0.3"/>
      </body>
    </body>
  </worldbody>
  <keyframe><key name="home" qpos="0.2"/></keyframe>
</mujoco>"#;

#[test]
fn a_model_changed_since_the_run_exports_without_3d_saying_why() {
    let scratch = Scratch::new("scene-changed");
    let xml = scratch.path("arm.xml");
    std::fs::write(&xml, ARM).unwrap();
    let config = scratch.path("arm.toml");
    std::fs::write(
        &config,
        format!(
            "[[bus]]\nbus = 1\nuri = \"sim\"\nservos = [1]\n\n[physics]\nmodel = \"{}\"\nsettle_s = 0\njoints = [{{ bus = 1, id = 1, joint = \"shoulder\" }}]\n",
            xml.display()
        ),
    )
    .unwrap();
    let log = scratch.path("arm.tlog");
    let o = rtloop(&[
        "run",
        "--config",
        config.to_str().unwrap(),
        "--lockstep",
        "--duration",
        "0.5",
        "--log",
        log.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    // As recorded: the arm's scene (the base's box, the upper arm's capsule).
    let first = scratch.path("first.mcap");
    assert!(export(&log, &first).status.success());
    let scene = mcap_messages(&first).into_iter().find(|m| m.0 == "/model/scene").expect("a scene");
    let e = scene.3["entities"].as_array().unwrap();
    assert_eq!(e.iter().map(|e| e["frame_id"].as_str().unwrap()).collect::<Vec<_>>(), ["model/base", "model/upper"]);
    // The file edited since: the records still export, the 3D view does not, and why is said.
    std::fs::write(&xml, ARM.replace("0.3\"/>", "0.35\"/>")).unwrap();
    let second = scratch.path("second.mcap");
    let o = export(&log, &second);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let warning = stderr(&o);
    assert!(warning.contains("has changed since the run") && warning.contains(xml.to_str().unwrap()), "{warning}");
    let report: Json = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
    assert!(report["no_3d"].as_str().unwrap().contains("has changed since the run"), "{report}");
    let topics: Vec<String> = mcap_messages(&second).into_iter().map(|m| m.0).collect();
    assert!(!topics.iter().any(|t| t.starts_with("/model/")) && topics.iter().any(|t| t == "body"), "{topics:?}");
}
