//! What a model looks like and where its bodies are: the geometry a viewer draws (Foxglove's
//! 3D panel, `rtloop log render`) and every body's pose computed from logged `qpos` by MuJoCo's
//! forward kinematics. Never used on a control thread: loading compiles the model (meshes
//! too), and [`ModelView::pose`] runs `mj_kinematics`.

use mujoco_rs::prelude::*;

use crate::spec::{ModelSource, PhysicsError};

/// The geom groups a viewer shows: MuJoCo's own viewer shows groups 0, 1 and 2 by default;
/// models such as MuJoCo Menagerie's put their collision geoms in group 3 and their visual
/// meshes in group 2.
pub const VISIBLE_GROUPS: core::ops::Range<i32> = 0..3;

/// A shape's form and size, as MuJoCo's geom types define them.
#[derive(Debug, Clone, PartialEq)]
pub enum ShapeKind {
    /// A box of these half-sizes, m.
    Box {
        /// Half-sizes along x, y, z.
        half: [f64; 3],
    },
    /// A sphere.
    Sphere {
        /// Radius, m.
        radius: f64,
    },
    /// An ellipsoid of these radii, m.
    Ellipsoid {
        /// Radii along x, y, z.
        radii: [f64; 3],
    },
    /// A capsule along z: a cylinder of `half_length` each side of the origin, capped by
    /// hemispheres.
    Capsule {
        /// Radius, m.
        radius: f64,
        /// Half the length of its cylinder, m.
        half_length: f64,
    },
    /// A cylinder along z.
    Cylinder {
        /// Radius, m.
        radius: f64,
        /// Half its length, m.
        half_length: f64,
    },
    /// A plane facing +z; a half-size of 0 means infinite in that direction.
    Plane {
        /// Half-sizes along x and y, m (0: infinite).
        half: [f64; 2],
    },
    /// A mesh of the model ([`ModelView::meshes`]), in the geom's frame.
    Mesh {
        /// Its index in [`ModelView::meshes`].
        mesh: usize,
    },
}

/// One visible geom: its form, its pose in its body's frame and its colour.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    /// The body it is fixed to (0: the world).
    pub body: usize,
    /// The geom's name, if it has one.
    pub name: Option<String>,
    /// Position in the body's frame, m.
    pub position: [f64; 3],
    /// Orientation in the body's frame, `[w, x, y, z]`.
    pub quaternion: [f64; 4],
    /// Colour, RGBA 0 to 1 (its material's, else its own).
    pub rgba: [f32; 4],
    /// Form and size.
    pub kind: ShapeKind,
}

/// A triangle mesh as MuJoCo compiled it (centred and aligned as the geoms using it expect).
#[derive(Debug, Clone, PartialEq)]
pub struct Mesh {
    /// Vertices, m.
    pub vertices: Vec<[f32; 3]>,
    /// Triangles, as indices into `vertices`.
    pub triangles: Vec<[u32; 3]>,
}

/// A body's pose in the world frame.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BodyPose {
    /// Position, m.
    pub position: [f64; 3],
    /// Orientation `[w, x, y, z]`.
    pub quaternion: [f64; 4],
}

/// A compiled model for viewing: its geometry, and its bodies posed from a `qpos`.
pub struct ModelView {
    data: MjData<Box<MjModel>>,
    name: String,
    file_sha256: Option<String>,
    compiled_sha256: String,
    bodies: Vec<String>,
    shapes: Vec<Shape>,
    meshes: Vec<Mesh>,
    /// Geoms of a kind a viewer cannot draw from these shapes (height fields, SDFs), left out.
    left_out: usize,
    poses: Vec<BodyPose>,
}

impl core::fmt::Debug for ModelView {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ModelView")
            .field("name", &self.name)
            .field("bodies", &self.bodies)
            .field("shapes", &self.shapes.len())
            .field("meshes", &self.meshes.len())
            .finish_non_exhaustive()
    }
}

impl ModelView {
    /// Compile the model `source` names, as [`crate::load`] does (the same file gives the
    /// same [`ModelView::compiled_sha256`] as the run's [`crate::ModelFacts`]).
    pub fn load(source: &ModelSource) -> Result<ModelView, PhysicsError> {
        crate::mujoco_plant::quiet_mujoco();
        let (name, model, file_sha256) = crate::mujoco_plant::compile(source)?;
        let compiled_sha256 = crate::mujoco_plant::compiled_fingerprint(&model);
        let m = &model;
        let name_of = |kind: MjtObjBase, i: usize| m.id_to_name(kind, i).filter(|n| !n.is_empty()).map(str::to_string);
        let nbody = m.ffi().nbody as usize;
        let bodies =
            (0..nbody).map(|b| name_of(MjtObjBase::mjOBJ_BODY, b).unwrap_or_else(|| format!("body{b}"))).collect();
        let meshes = (0..m.ffi().nmesh as usize)
            .map(|k| {
                let (v0, nv) = (m.mesh_vertadr()[k] as usize, m.mesh_vertnum()[k] as usize);
                let (f0, nf) = (m.mesh_faceadr()[k] as usize, m.mesh_facenum()[k] as usize);
                Mesh {
                    vertices: m.mesh_vert()[v0..v0 + nv].to_vec(),
                    triangles: m.mesh_face()[f0..f0 + nf].iter().map(|t| t.map(|i| i.max(0) as u32)).collect(),
                }
            })
            .collect();
        let mut shapes = Vec::new();
        let mut left_out = 0;
        for g in 0..m.ffi().ngeom as usize {
            if !VISIBLE_GROUPS.contains(&m.geom_group()[g]) {
                continue;
            }
            let matid = m.geom_matid()[g];
            let rgba = if matid >= 0 { m.mat_rgba()[matid as usize] } else { m.geom_rgba()[g] };
            if rgba[3] <= 0.0 {
                continue;
            }
            let s = m.geom_size()[g];
            let kind = match m.geom_type()[g] {
                MjtGeomBase::mjGEOM_BOX => ShapeKind::Box { half: s },
                MjtGeomBase::mjGEOM_SPHERE => ShapeKind::Sphere { radius: s[0] },
                MjtGeomBase::mjGEOM_ELLIPSOID => ShapeKind::Ellipsoid { radii: s },
                MjtGeomBase::mjGEOM_CAPSULE => ShapeKind::Capsule { radius: s[0], half_length: s[1] },
                MjtGeomBase::mjGEOM_CYLINDER => ShapeKind::Cylinder { radius: s[0], half_length: s[1] },
                MjtGeomBase::mjGEOM_PLANE => ShapeKind::Plane { half: [s[0], s[1]] },
                MjtGeomBase::mjGEOM_MESH if m.geom_dataid()[g] >= 0 => {
                    ShapeKind::Mesh { mesh: m.geom_dataid()[g] as usize }
                }
                _ => {
                    left_out += 1;
                    continue;
                }
            };
            shapes.push(Shape {
                body: m.geom_bodyid()[g] as usize,
                name: name_of(MjtObjBase::mjOBJ_GEOM, g),
                position: m.geom_pos()[g],
                quaternion: m.geom_quat()[g],
                rgba,
                kind,
            });
        }
        let mut data = MjData::new(Box::new(model));
        data.kinematics();
        let poses = vec![BodyPose::default(); nbody];
        let mut view = ModelView { data, name, file_sha256, compiled_sha256, bodies, shapes, meshes, left_out, poses };
        view.read_poses();
        Ok(view)
    }

    /// "the built-in quadruped", or the file as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// SHA-256 of the model file, hex (`None`: built in).
    pub fn file_sha256(&self) -> Option<&str> {
        self.file_sha256.as_deref()
    }

    /// SHA-256 of the compiled model (see [`crate::ModelFacts::compiled_sha256`]).
    pub fn compiled_sha256(&self) -> &str {
        &self.compiled_sha256
    }

    /// Generalised positions the model has (MuJoCo's `nq`).
    pub fn nq(&self) -> usize {
        self.data.model().ffi().nq as usize
    }

    /// The model's size, m (MuJoCo's `stat.extent`: what its viewer frames the model by).
    pub fn extent(&self) -> f64 {
        self.data.model().stat().extent
    }

    /// Every body's name, by body index (0: `world`; an unnamed body is `bodyN`).
    pub fn bodies(&self) -> &[String] {
        &self.bodies
    }

    /// Every visible geom ([`VISIBLE_GROUPS`], not fully transparent) of a kind
    /// [`ShapeKind`] describes.
    pub fn shapes(&self) -> &[Shape] {
        &self.shapes
    }

    /// The model's meshes.
    pub fn meshes(&self) -> &[Mesh] {
        &self.meshes
    }

    /// Visible geoms of kinds left out of [`ModelView::shapes`] (height fields, SDFs).
    pub fn left_out(&self) -> usize {
        self.left_out
    }

    /// Every body's world pose with the model in `qpos` (MuJoCo's forward kinematics); `None`
    /// when `qpos` is not the model's length or holds a value that is not finite.
    pub fn pose(&mut self, qpos: &[f64]) -> Option<&[BodyPose]> {
        if qpos.len() != self.nq() || qpos.iter().any(|v| !v.is_finite()) {
            return None;
        }
        self.data.qpos_mut().copy_from_slice(qpos);
        self.data.kinematics();
        // Each subtree's centre of mass: what a tracking camera follows (MuJoCo's
        // mjv_updateCamera looks at it), so a rendered robot stays in frame as it moves.
        self.data.com_pos();
        self.read_poses();
        Some(&self.poses)
    }

    /// The poses of the last [`ModelView::pose`] (the model's reference pose before one).
    pub fn poses(&self) -> &[BodyPose] {
        &self.poses
    }

    fn read_poses(&mut self) {
        for (b, p) in self.poses.iter_mut().enumerate() {
            p.position = self.data.xpos()[b];
            p.quaternion = self.data.xquat()[b];
        }
    }

    /// The model and its data posed by the last [`ModelView::pose`] (the renderer's input).
    #[cfg(feature = "render")]
    pub(crate) fn data_mut(&mut self) -> &mut MjData<Box<MjModel>> {
        &mut self.data
    }
}
