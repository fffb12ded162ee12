//! The simulated robot in 3D, for Foxglove's 3D panel: the model's geometry as one
//! `foxglove.SceneUpdate` (boxes, spheres, cylinders, capsules as a cylinder and two spheres,
//! planes as a thin box, meshes as triangle lists from MuJoCo's compiled mesh data) and every
//! body's pose as `foxglove.FrameTransforms`, computed from the logged `qpos` with MuJoCo's
//! forward kinematics ([`rtloop_physics::view`]). Used by `rtloop run --physics --foxglove`
//! (on the publisher thread), `rtloop log serve` and `rtloop log export --mcap`.
//!
//! **Frames.** [`WORLD_FRAME`] is MuJoCo's world (the ground's frame: +x forward, +y left, +z
//! up); each body is the frame `model/<body name>` ([`FRAME_PREFIX`]), a child of the world.
//! Each entity of the scene is one body's shapes, locked to its frame.
//!
//! **Which model.** The run's `model` record names the file and its hashes; a replay loads
//! that file again and refuses ([`SceneError`]) when it is not what the run simulated. The
//! built-in quadruped is compiled from this program's copy and checked the same way.
//!
//! Must never: run on the cycle thread (loading compiles meshes; a pose runs
//! `mj_kinematics`), or show a model other than the one the run simulated.

use crate::telemetry::ModelRecord;
#[cfg(feature = "physics")]
use serde::ser::{SerializeSeq, SerializeStruct, Serializer};
use serde::Serialize;
use serde_json::{json, Value as Json};

/// The topic of the model's geometry (`foxglove.SceneUpdate`, sent once; a client that
/// subscribes later gets it then).
pub const SCENE_TOPIC: &str = "/model/scene";
/// The topic of every body's pose (`foxglove.FrameTransforms`).
pub const TRANSFORMS_TOPIC: &str = "/model/transforms";
/// The root frame: MuJoCo's world.
pub const WORLD_FRAME: &str = "world";
/// What a body's frame name starts with.
pub const FRAME_PREFIX: &str = "model/";
/// The shortest time between two `/model/transforms` messages, ns (at most 50 Hz).
pub const TRANSFORMS_INTERVAL_NS: u64 = 20_000_000;
/// Half-size of the square drawn for an infinite plane (MuJoCo's size 0), m.
pub const INFINITE_PLANE_HALF_M: f64 = 10.0;

/// Why a run cannot be shown in 3D. The Display is one sentence.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SceneError {
    /// This program was built without MuJoCo.
    #[error("no 3D view: this rtloop was built without physics (build with `--features physics`, docs/physics.md)")]
    NotBuilt,
    /// The log has no `model` record (a run without physics, or from before rtloop logged it).
    #[error("no 3D view: the log has no `model` record (only runs with --physics record the model)")]
    NoModel,
    /// The model file the run simulated is gone.
    #[error("no 3D view: the run's model {} is not there any more; put it back where the run found it", .path.display())]
    Missing {
        /// Where the run found it.
        path: std::path::PathBuf,
    },
    /// The model file is not the one the run simulated.
    #[error(
        "no 3D view: {} has changed since the run (SHA-256 {now}, the run's {recorded}): the view would show another robot; restore the file the run used",
        .path.display()
    )]
    FileChanged {
        /// The model file.
        path: std::path::PathBuf,
        /// Its hash in the log.
        recorded: String,
        /// Its hash now.
        now: String,
    },
    /// The model compiles differently (an included file or a mesh changed).
    #[error(
        "no 3D view: {model} compiles differently from the run's (an included file or a mesh changed since): restore the files the run used"
    )]
    CompiledChanged {
        /// The model.
        model: String,
    },
    /// The built-in quadruped of this rtloop is not the run's.
    #[error(
        "no 3D view: this rtloop's built-in quadruped is not the one the run simulated (the log is from another rtloop version)"
    )]
    BuiltInChanged,
    /// The model does not load.
    #[error("no 3D view: {0}")]
    Load(#[source] rtloop_physics::PhysicsError),
}

/// A run's model, ready to be drawn.
pub struct Scene3d {
    #[cfg(feature = "physics")]
    view: rtloop_physics::view::ModelView,
    /// Frame name of every body (index: body id; 0 is [`WORLD_FRAME`]).
    frames: Vec<String>,
}

impl std::fmt::Debug for Scene3d {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scene3d").field("frames", &self.frames).finish_non_exhaustive()
    }
}

/// Foxglove's time, from ns since the epoch.
#[derive(Debug, Clone, Copy, Serialize)]
struct Time {
    sec: u64,
    nsec: u32,
}

fn time(ns: u64) -> Time {
    Time { sec: ns / 1_000_000_000, nsec: (ns % 1_000_000_000) as u32 }
}

#[derive(Serialize)]
struct V3 {
    x: f64,
    y: f64,
    z: f64,
}

#[derive(Serialize)]
struct Q {
    x: f64,
    y: f64,
    z: f64,
    w: f64,
}

/// MuJoCo's `[w, x, y, z]` as Foxglove's quaternion.
fn q(wxyz: [f64; 4]) -> Q {
    Q { x: wxyz[1], y: wxyz[2], z: wxyz[3], w: wxyz[0] }
}

fn v3(p: [f64; 3]) -> V3 {
    V3 { x: p[0], y: p[1], z: p[2] }
}

/// One `foxglove.FrameTransform`.
#[derive(Serialize)]
struct Transform<'a> {
    timestamp: Time,
    parent_frame_id: &'a str,
    child_frame_id: &'a str,
    translation: V3,
    rotation: Q,
}

/// The JSON of one `foxglove.FrameTransform` from `parent` to `child` (the IMU's body, as
/// `/imu/transform` carries it).
pub fn frame_transform_json(
    out: &mut Vec<u8>,
    stamp_ns: u64,
    parent: &str,
    child: &str,
    position_m: [f64; 3],
    quaternion_wxyz: [f64; 4],
) -> serde_json::Result<()> {
    out.clear();
    let t = Transform {
        timestamp: time(stamp_ns),
        parent_frame_id: parent,
        child_frame_id: child,
        translation: v3(position_m),
        rotation: q(quaternion_wxyz),
    };
    serde_json::to_writer(out, &t)
}

impl Scene3d {
    /// The model `record` names, loaded and checked against the run's hashes.
    pub fn for_model(record: &ModelRecord) -> Result<Scene3d, SceneError> {
        #[cfg(feature = "physics")]
        {
            use rtloop_physics::view::ModelView;
            use rtloop_physics::ModelSource;
            let same_mujoco = record.mujoco.is_empty() || record.mujoco == rtloop_physics::MUJOCO_VERSION;
            let view = if record.path.is_empty() {
                let view = ModelView::load(&ModelSource::BuiltIn).map_err(SceneError::Load)?;
                if same_mujoco && view.compiled_sha256() != record.compiled_sha256 {
                    return Err(SceneError::BuiltInChanged);
                }
                view
            } else {
                let path = std::path::PathBuf::from(&record.path);
                if !path.is_file() {
                    return Err(SceneError::Missing { path });
                }
                let view = ModelView::load(&ModelSource::File(path.clone())).map_err(SceneError::Load)?;
                let now = view.file_sha256().unwrap_or_default();
                if !record.file_sha256.is_empty() && now != record.file_sha256 {
                    return Err(SceneError::FileChanged {
                        path,
                        recorded: record.file_sha256.clone(),
                        now: now.into(),
                    });
                }
                if same_mujoco && view.compiled_sha256() != record.compiled_sha256 {
                    return Err(SceneError::CompiledChanged { model: path.display().to_string() });
                }
                view
            };
            let frames = view
                .bodies()
                .iter()
                .enumerate()
                .map(|(b, name)| if b == 0 { WORLD_FRAME.to_string() } else { format!("{FRAME_PREFIX}{name}") })
                .collect();
            Ok(Scene3d { view, frames })
        }
        #[cfg(not(feature = "physics"))]
        {
            let _ = record;
            Err(SceneError::NotBuilt)
        }
    }

    /// Every body's frame name (index: MuJoCo's body id; 0 is [`WORLD_FRAME`]).
    pub fn frames(&self) -> &[String] {
        &self.frames
    }

    /// The model for drawing and posing.
    #[cfg(feature = "physics")]
    pub fn view_mut(&mut self) -> &mut rtloop_physics::view::ModelView {
        &mut self.view
    }

    /// The model's geometry, stamped `stamp_ns`: a `foxglove.SceneUpdate`, JSON.
    pub fn scene_update(&self, stamp_ns: u64) -> Vec<u8> {
        serde_json::to_vec(&self.scene_json(stamp_ns)).unwrap_or_default()
    }

    /// The model's geometry as a JSON value (`foxglove.SceneUpdate`).
    pub fn scene_json(&self, stamp_ns: u64) -> Json {
        #[cfg(feature = "physics")]
        {
            scene_json(&self.view, &self.frames, stamp_ns)
        }
        #[cfg(not(feature = "physics"))]
        {
            let _ = stamp_ns;
            json!({"deletions": [], "entities": []})
        }
    }

    /// Every body's pose with the model in `qpos`, stamped `stamp_ns`, written into `out` as a
    /// `foxglove.FrameTransforms` (JSON); false (nothing written) when `qpos` does not fit the
    /// model (another length, a value not finite).
    pub fn transforms(&mut self, stamp_ns: u64, qpos: &[f64], out: &mut Vec<u8>) -> bool {
        out.clear();
        #[cfg(feature = "physics")]
        {
            let Some(poses) = self.view.pose(qpos) else { return false };
            let msg = TransformsMsg { stamp: time(stamp_ns), frames: &self.frames, poses };
            serde_json::to_writer(out, &msg).is_ok()
        }
        #[cfg(not(feature = "physics"))]
        {
            let _ = (stamp_ns, qpos);
            false
        }
    }
}

/// `foxglove.FrameTransforms`: every body but the world, from the world.
#[cfg(feature = "physics")]
struct TransformsMsg<'a> {
    stamp: Time,
    frames: &'a [String],
    poses: &'a [rtloop_physics::view::BodyPose],
}

#[cfg(feature = "physics")]
impl Serialize for TransformsMsg<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct All<'b>(&'b TransformsMsg<'b>);
        impl Serialize for All<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let m = self.0;
                let mut seq = s.serialize_seq(Some(m.frames.len().saturating_sub(1)))?;
                for (frame, pose) in m.frames.iter().zip(m.poses).skip(1) {
                    seq.serialize_element(&Transform {
                        timestamp: m.stamp,
                        parent_frame_id: WORLD_FRAME,
                        child_frame_id: frame,
                        translation: v3(pose.position),
                        rotation: q(pose.quaternion),
                    })?;
                }
                seq.end()
            }
        }
        let mut st = s.serialize_struct("FrameTransforms", 1)?;
        st.serialize_field("transforms", &All(self))?;
        st.end()
    }
}

/// `q` applied to `v`.
#[cfg(feature = "physics")]
fn rotate(q: [f64; 4], v: [f64; 3]) -> [f64; 3] {
    let [w, x, y, z] = q;
    // v + 2w(u × v) + 2u × (u × v), u = (x, y, z)
    let u = [x, y, z];
    let cross =
        |a: [f64; 3], b: [f64; 3]| [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
    let t = cross(u, v).map(|c| 2.0 * c);
    let c = cross(u, t);
    [v[0] + w * t[0] + c[0], v[1] + w * t[1] + c[1], v[2] + w * t[2] + c[2]]
}

#[cfg(feature = "physics")]
fn scene_json(view: &rtloop_physics::view::ModelView, frames: &[String], stamp_ns: u64) -> Json {
    use rtloop_physics::view::ShapeKind;
    let pose = |p: [f64; 3], quat: [f64; 4]| json!({"position": v3(p), "orientation": q(quat)});
    let mut per_body: Vec<[Vec<Json>; 4]> = (0..frames.len()).map(|_| Default::default()).collect();
    const CUBES: usize = 0;
    const SPHERES: usize = 1;
    const CYLINDERS: usize = 2;
    const TRIANGLES: usize = 3;
    for s in view.shapes() {
        let Some(lists) = per_body.get_mut(s.body) else { continue };
        let [r, g, b, a] = s.rgba.map(f64::from);
        let color = json!({"r": r, "g": g, "b": b, "a": a});
        let at = pose(s.position, s.quaternion);
        let size = |x: f64, y: f64, z: f64| json!({"x": x, "y": y, "z": z});
        match &s.kind {
            ShapeKind::Box { half } => {
                lists[CUBES].push(
                    json!({"pose": at, "size": size(2.0 * half[0], 2.0 * half[1], 2.0 * half[2]), "color": color}),
                );
            }
            ShapeKind::Plane { half } => {
                let h = |v: f64| if v > 0.0 { v } else { INFINITE_PLANE_HALF_M };
                // A thin box whose top face is the plane.
                let thickness = 0.002;
                let p = rotate(s.quaternion, [0.0, 0.0, -thickness / 2.0]);
                let centre = [s.position[0] + p[0], s.position[1] + p[1], s.position[2] + p[2]];
                lists[CUBES].push(json!({"pose": pose(centre, s.quaternion),
                    "size": size(2.0 * h(half[0]), 2.0 * h(half[1]), thickness), "color": color}));
            }
            ShapeKind::Sphere { radius } => {
                let d = 2.0 * radius;
                lists[SPHERES].push(json!({"pose": at, "size": size(d, d, d), "color": color}));
            }
            ShapeKind::Ellipsoid { radii } => {
                lists[SPHERES].push(
                    json!({"pose": at, "size": size(2.0 * radii[0], 2.0 * radii[1], 2.0 * radii[2]), "color": color}),
                );
            }
            ShapeKind::Cylinder { radius, half_length } => {
                let d = 2.0 * radius;
                lists[CYLINDERS].push(json!({"pose": at, "size": size(d, d, 2.0 * half_length),
                    "bottom_scale": 1.0, "top_scale": 1.0, "color": color}));
            }
            ShapeKind::Capsule { radius, half_length } => {
                let d = 2.0 * radius;
                lists[CYLINDERS].push(json!({"pose": at, "size": size(d, d, 2.0 * half_length),
                    "bottom_scale": 1.0, "top_scale": 1.0, "color": color}));
                for sign in [-1.0, 1.0] {
                    let o = rotate(s.quaternion, [0.0, 0.0, sign * half_length]);
                    let c = [s.position[0] + o[0], s.position[1] + o[1], s.position[2] + o[2]];
                    lists[SPHERES].push(json!({"pose": pose(c, s.quaternion), "size": size(d, d, d), "color": color}));
                }
            }
            ShapeKind::Mesh { mesh } => {
                let Some(m) = view.meshes().get(*mesh) else { continue };
                // To 10 µm: a mesh's text is most of a scene's bytes, and no viewer shows less.
                let um10 = |x: f32| (f64::from(x) * 1e5).round() / 1e5;
                let points: Vec<Json> =
                    m.vertices.iter().map(|v| json!({"x": um10(v[0]), "y": um10(v[1]), "z": um10(v[2])})).collect();
                let indices: Vec<u32> = m.triangles.iter().flatten().copied().collect();
                lists[TRIANGLES].push(json!({"pose": at, "points": points, "color": color, "colors": [],
                    "indices": indices}));
            }
        }
    }
    let stamp = time(stamp_ns);
    let entities: Vec<Json> = per_body
        .into_iter()
        .zip(frames)
        .filter(|(lists, _)| lists.iter().any(|l| !l.is_empty()))
        .map(|([cubes, spheres, cylinders, triangles], frame)| {
            json!({"timestamp": stamp, "frame_id": frame, "id": frame, "lifetime": {"sec": 0, "nsec": 0},
                "frame_locked": true, "metadata": [], "arrows": [], "cubes": cubes, "spheres": spheres,
                "cylinders": cylinders, "lines": [], "triangles": triangles, "texts": [], "models": []})
        })
        .collect();
    json!({"deletions": [], "entities": entities})
}

/// The `model` record of a log (its first item), if it has one that decodes.
pub fn logged_model(reader: &rtloop_tlog::reader::FileReader) -> Option<ModelRecord> {
    let id = reader.records().iter().find(|r| r.name == "model")?.id;
    let filter = rtloop_tlog::reader::ItemFilter { record: Some("model".into()), ..Default::default() };
    let item = reader.items(filter).filter_map(Result::ok).find(|i| i.record_id == id)?;
    serde_json::from_value(reader.decode_item(&item).ok()?.to_json()).ok()
}

/// The 3D view in an MCAP export (`rtloop log export --mcap`): from each `body` item, the
/// IMU body's pose on `/imu/transform` (as live), and with the run's model the scene (once,
/// with the first) and every body's pose (at most every [`TRANSFORMS_INTERVAL_NS`]).
#[derive(Debug)]
pub struct SceneExport {
    scene: Option<Scene3d>,
    /// Why the export has no 3D view (the model did not load or is not the run's).
    pub no_3d: Option<String>,
    scene_sent: bool,
    rate: RateLimit,
    buf: Vec<u8>,
    /// Messages derived so far.
    pub messages: u64,
}

impl SceneExport {
    const IMU_TRANSFORM: usize = 0;
    const SCENE: usize = 1;
    const TRANSFORMS: usize = 2;

    /// For a log whose `model` record is `model`.
    pub fn new(model: &ModelRecord) -> SceneExport {
        let (scene, no_3d) = match Scene3d::for_model(model) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e.to_string())),
        };
        SceneExport { scene, no_3d, scene_sent: false, rate: RateLimit::default(), buf: Vec::new(), messages: 0 }
    }
}

impl rtloop_tlog::export::Derived for SceneExport {
    fn channels(&self) -> Vec<rtloop_tlog::export::DerivedChannel> {
        let channel = |topic: &str, schema: Json| rtloop_tlog::export::DerivedChannel {
            topic: topic.into(),
            schema_name: schema["title"].as_str().unwrap_or_default().to_string(),
            schema,
        };
        let mut out = vec![channel("/imu/transform", schemas::frame_transform())];
        if self.scene.is_some() {
            out.push(channel(SCENE_TOPIC, schemas::scene_update()));
            out.push(channel(TRANSFORMS_TOPIC, schemas::frame_transforms()));
        }
        out
    }

    fn item(&mut self, record: &str, time_ns: u64, value: &Json, emit: &mut dyn FnMut(usize, &[u8])) {
        if record != "body" {
            return;
        }
        let Some(b) = crate::telemetry::BodyLog::from_record(value) else { return };
        if frame_transform_json(&mut self.buf, time_ns, WORLD_FRAME, "body", b.state.position_m, b.state.quaternion)
            .is_ok()
        {
            emit(Self::IMU_TRANSFORM, &self.buf);
            self.messages += 1;
        }
        let Some(scene) = self.scene.as_mut() else { return };
        if !self.scene_sent {
            emit(Self::SCENE, &scene.scene_update(time_ns));
            self.scene_sent = true;
            self.messages += 1;
        }
        let n = usize::from(b.qpos_len).min(b.qpos.len());
        if n > 0 && self.rate.due(time_ns) && scene.transforms(time_ns, &b.qpos[..n], &mut self.buf) {
            emit(Self::TRANSFORMS, &self.buf);
            self.messages += 1;
        }
    }
}

/// At most one message every [`TRANSFORMS_INTERVAL_NS`] of the stamps it is shown.
#[derive(Debug, Clone, Copy, Default)]
pub struct RateLimit {
    last_ns: Option<u64>,
}

impl RateLimit {
    /// Whether a message stamped `stamp_ns` is due (and, if so, it counts as sent). A stamp
    /// earlier than the last (a seek back) is due.
    pub fn due(&mut self, stamp_ns: u64) -> bool {
        let due = match self.last_ns {
            None => true,
            Some(last) => stamp_ns < last || stamp_ns - last >= TRANSFORMS_INTERVAL_NS,
        };
        if due {
            self.last_ns = Some(stamp_ns);
        }
        due
    }
}

/// JSON schemas of the well-known Foxglove messages of the 3D view (as their channels
/// advertise them and the MCAP export declares them).
pub mod schemas {
    use crate::live::schemas::object;
    use serde_json::{json, Value as Json};

    fn time() -> Json {
        json!({"type": "object", "properties": {
            "sec": {"type": "integer", "minimum": 0}, "nsec": {"type": "integer", "minimum": 0, "maximum": 999_999_999}},
            "required": ["sec", "nsec"]})
    }

    fn numbers(keys: &[&str]) -> Json {
        let props: Vec<(&str, Json)> = keys.iter().map(|k| (*k, json!({"type": "number"}))).collect();
        object(None, &props)
    }

    fn array(items: Json) -> Json {
        json!({"type": "array", "items": items})
    }

    fn pose() -> Json {
        object(None, &[("position", numbers(&["x", "y", "z"])), ("orientation", numbers(&["x", "y", "z", "w"]))])
    }

    /// `foxglove.FrameTransform`.
    pub fn frame_transform() -> Json {
        object(
            Some("foxglove.FrameTransform"),
            &[
                ("timestamp", time()),
                ("parent_frame_id", json!({"type": "string"})),
                ("child_frame_id", json!({"type": "string"})),
                ("translation", numbers(&["x", "y", "z"])),
                ("rotation", numbers(&["x", "y", "z", "w"])),
            ],
        )
    }

    /// `foxglove.FrameTransforms`.
    pub fn frame_transforms() -> Json {
        let mut one = frame_transform();
        one.as_object_mut().map(|o| o.remove("title"));
        object(Some("foxglove.FrameTransforms"), &[("transforms", array(one))])
    }

    /// `foxglove.SceneUpdate` (every primitive list; this server fills cubes, spheres,
    /// cylinders and triangles).
    pub fn scene_update() -> Json {
        let color = numbers(&["r", "g", "b", "a"]);
        let size = numbers(&["x", "y", "z"]);
        let point = numbers(&["x", "y", "z"]);
        let shape = |extra: &[(&str, Json)]| {
            let mut props = vec![("pose", pose()), ("size", size.clone())];
            props.extend(extra.iter().cloned());
            props.push(("color", color.clone()));
            object(None, &props)
        };
        let cylinder = shape(&[("bottom_scale", json!({"type": "number"})), ("top_scale", json!({"type": "number"}))]);
        let triangles = object(
            None,
            &[
                ("pose", pose()),
                ("points", array(point.clone())),
                ("color", color.clone()),
                ("colors", array(color.clone())),
                ("indices", array(json!({"type": "integer", "minimum": 0}))),
            ],
        );
        let entity = object(
            None,
            &[
                ("timestamp", time()),
                ("frame_id", json!({"type": "string"})),
                ("id", json!({"type": "string"})),
                ("lifetime", time()),
                ("frame_locked", json!({"type": "boolean"})),
                (
                    "metadata",
                    array(object(None, &[("key", json!({"type": "string"})), ("value", json!({"type": "string"}))])),
                ),
                ("arrows", array(json!({"type": "object"}))),
                ("cubes", array(shape(&[]))),
                ("spheres", array(shape(&[]))),
                ("cylinders", array(cylinder)),
                ("lines", array(json!({"type": "object"}))),
                ("triangles", array(triangles)),
                ("texts", array(json!({"type": "object"}))),
                ("models", array(json!({"type": "object"}))),
            ],
        );
        let deletion = object(
            None,
            &[
                ("timestamp", time()),
                ("type", json!({"type": "integer", "minimum": 0, "maximum": 1})),
                ("id", json!({"type": "string"})),
            ],
        );
        object(Some("foxglove.SceneUpdate"), &[("deletions", array(deletion)), ("entities", array(entity))])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transforms_are_sent_at_most_every_interval_and_again_after_a_seek_back() {
        let mut r = RateLimit::default();
        assert!(r.due(1_000_000_000));
        assert!(!r.due(1_000_000_000 + TRANSFORMS_INTERVAL_NS - 1));
        assert!(r.due(1_000_000_000 + TRANSFORMS_INTERVAL_NS));
        assert!(r.due(5), "a seek back");
    }

    #[test]
    fn a_frame_transform_carries_the_position_and_the_attitude() {
        let mut out = Vec::new();
        frame_transform_json(&mut out, 1_500_000_000, "world", "body", [1.0, 2.0, 0.3], [0.5, 0.5, -0.5, 0.5]).unwrap();
        let v: Json = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["translation"], json!({"x": 1.0, "y": 2.0, "z": 0.3}));
        assert_eq!(v["rotation"], json!({"x": 0.5, "y": -0.5, "z": 0.5, "w": 0.5}));
        assert_eq!(v["timestamp"], json!({"sec": 1, "nsec": 500_000_000}));
    }

    #[cfg(feature = "physics")]
    #[test]
    fn the_built_in_quadruped_is_drawn_and_posed_from_its_qpos() {
        let view = rtloop_physics::view::ModelView::load(&rtloop_physics::ModelSource::BuiltIn).unwrap();
        let record = ModelRecord { compiled_sha256: view.compiled_sha256().into(), ..Default::default() };
        let mut scene = Scene3d::for_model(&record).unwrap();
        let frames = scene.frames().to_vec();
        assert_eq!(frames[0], WORLD_FRAME);
        assert!(frames.iter().any(|f| f == "model/body"), "{frames:?}");
        let s = scene.scene_json(7);
        let entities = s["entities"].as_array().unwrap();
        // The ground (the world's plane, a thin box) and the torso (a box); four feet, twelve
        // capsules (each a cylinder and two spheres).
        let count = |kind: &str| entities.iter().map(|e| e[kind].as_array().unwrap().len()).sum::<usize>();
        assert_eq!(count("cubes"), 2);
        assert_eq!(count("cylinders"), 4 + 8);
        assert_eq!(count("spheres"), 4 + 2 * 8);
        let ground = entities.iter().find(|e| e["frame_id"] == WORLD_FRAME).unwrap();
        assert_eq!(ground["cubes"][0]["size"]["x"], 2.0 * INFINITE_PLANE_HALF_M);
        // Posed: the torso follows the free joint's position.
        let nq = scene.view_mut().nq();
        let mut qpos = vec![0.0; nq];
        qpos[..7].copy_from_slice(&[1.5, -2.0, 0.4, 1.0, 0.0, 0.0, 0.0]);
        let mut out = Vec::new();
        assert!(scene.transforms(9, &qpos, &mut out));
        let v: Json = serde_json::from_slice(&out).unwrap();
        let torso = v["transforms"].as_array().unwrap().iter().find(|t| t["child_frame_id"] == "model/body").unwrap();
        assert_eq!(torso["translation"], json!({"x": 1.5, "y": -2.0, "z": 0.4}));
        assert_eq!(torso["parent_frame_id"], WORLD_FRAME);
        assert_eq!(v["transforms"].as_array().unwrap().len(), frames.len() - 1);
        assert!(!scene.transforms(9, &qpos[1..], &mut out), "a qpos of another length");
        qpos[3] = f64::NAN;
        assert!(!scene.transforms(9, &qpos, &mut out), "a NaN");
    }

    #[cfg(feature = "physics")]
    #[test]
    fn a_model_that_is_not_the_runs_is_one_sentence() {
        let record = ModelRecord { compiled_sha256: "00".into(), ..Default::default() };
        let e = Scene3d::for_model(&record).unwrap_err();
        assert!(matches!(e, SceneError::BuiltInChanged), "{e:?}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("robot.xml");
        std::fs::write(&path, r#"<mujoco><worldbody><body><freejoint/><geom size="0.1"/></body></worldbody></mujoco>"#)
            .unwrap();
        let record =
            ModelRecord { path: path.display().to_string(), file_sha256: "ab".repeat(32), ..Default::default() };
        let e = Scene3d::for_model(&record).unwrap_err().to_string();
        assert!(e.contains("has changed since the run") && !e.contains('\n'), "{e}");
        let record = ModelRecord { path: dir.path().join("gone.xml").display().to_string(), ..Default::default() };
        let e = Scene3d::for_model(&record).unwrap_err().to_string();
        assert!(e.contains("is not there any more"), "{e}");
    }
}
