//! The MuJoCo plant: a compiled model, its data, and the joints servos turn.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

use mujoco_rs::prelude::*;
use rtloop_sim::plant::GRAVITY_MPS2;
use rtloop_sim::rng::XorShift64;
use rtloop_sim::{BodyState, JointLink, Plant, PlantError};

use crate::spec::{BuiltInPose, ModelSource, PhysicsError, PhysicsSpec};
use crate::{Loaded, QUADRUPED_MJCF};

/// Kinetic energy (J) past which the plant is taken to have blown up: a 10 kg robot would
/// have to move at over 40 m/s.
const MAX_KINETIC_J: f64 = 1.0e4;

/// How often (in steps) the kinetic energy is computed; finiteness is checked every step.
const ENERGY_EVERY: u64 = 64;

/// Largest perturbation of each joint of the starting pose a reset's seed draws, rad.
const RESET_JOINT_JITTER_RAD: f64 = 0.05;

/// A compiled model and its state.
pub(crate) struct MujocoPlant {
    data: MjData<Box<MjModel>>,
    /// Per plant joint: (qpos address, dof address).
    joints: Vec<(usize, usize)>,
    /// The IMU's body, and its free joint's qpos address when it floats.
    body: usize,
    body_qpos: Option<usize>,
    /// Rotates the model's frame (ground horizontal) into the gravity-aligned frame.
    tilt: [f64; 4],
    /// The pose a reset returns to, and the settle time.
    start_qpos: Vec<f64>,
    settle_steps: u64,
    /// The body's world-frame linear velocity at the previous step (for its acceleration).
    last_velocity: [f64; 3],
    accel_world: [f64; 3],
    steps: u64,
    timestep_ns: u64,
    push: [f64; 3],
}

/// MuJoCo's warnings since the process started (it would otherwise print them and write
/// them to MUJOCO_LOG.TXT in the working directory).
static WARNINGS: AtomicU64 = AtomicU64::new(0);

/// MuJoCo's messages go to [`quiet_handler`], once per process, before any model is loaded.
fn quiet_mujoco() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: this runs before the first model is loaded in the process (every load
        // comes through here first, and `Once` makes any other thread's load wait until it
        // returns), so no other thread uses MuJoCo while the handler is replaced.
        unsafe { mujoco_rs::prelude::set_log_handler(quiet_handler) };
    });
}

/// Counts warnings (instability shows as NaN state, checked after every step, not as text).
/// An error is the one thing MuJoCo does not survive (the process ends after this returns,
/// and the only causes are out-of-memory conditions): say so on stderr rather than vanish.
fn quiet_handler(message: &MjLogMessage) {
    match message.level() {
        MjtLogLevel::mjLOG_ERROR => {
            eprintln!("rtloop: MuJoCo failed and ends the process: {}", message.subject());
        }
        MjtLogLevel::mjLOG_WARNING => {
            WARNINGS.fetch_add(1, Ordering::Relaxed);
        }
        _ => {}
    }
}

/// MuJoCo warnings seen in this process.
pub(crate) fn warnings() -> u64 {
    WARNINGS.load(Ordering::Relaxed)
}

pub(crate) fn load(spec: &PhysicsSpec) -> Result<Loaded, PhysicsError> {
    quiet_mujoco();
    let (name, model) = match &spec.model {
        ModelSource::BuiltIn => ("the built-in quadruped".to_string(), MjModel::from_xml_string(QUADRUPED_MJCF)),
        ModelSource::File(path) => {
            let name = path.display().to_string();
            // Read here first: a file that cannot be read gets the system's reason, and a NaN
            // written in it is refused before MuJoCo would replace it with a default.
            let text = std::fs::read(path)
                .map_err(|e| PhysicsError::Model { model: name.clone(), reason: e.to_string().to_lowercase() })?;
            if let Some(e) = crate::spec::non_finite_attribute(&String::from_utf8_lossy(&text)) {
                return Err(e);
            }
            (name, MjModel::from_xml(path))
        }
    };
    let model = model.map_err(|e| PhysicsError::Model { model: name.clone(), reason: mujoco_reason(&e) })?;
    check_finite(&model)?;
    let timestep_s = model.opt().timestep;
    if !(1e-5..=0.01).contains(&timestep_s) {
        return Err(PhysicsError::BadNumber {
            what: "the model's time step",
            value: timestep_s,
            range: "10 µs to 10 ms",
        });
    }
    let known: Vec<String> = (0..model.ffi().njnt as usize)
        .filter(|&j| matches!(model.jnt_type()[j], MjtJoint::mjJNT_HINGE | MjtJoint::mjJNT_SLIDE))
        .filter_map(|j| model.id_to_name(MjtObjBase::mjOBJ_JOINT, j).map(str::to_string))
        .collect();
    let mut joints = Vec::new();
    let mut links = Vec::new();
    let mut joint_names = Vec::new();
    for (index, sj) in spec.joint_map().into_iter().enumerate() {
        let Some(j) = model.name_to_id(MjtObjBase::mjOBJ_JOINT, &sj.joint) else {
            return Err(PhysicsError::NoSuchJoint { joint: sj.joint, known });
        };
        if !matches!(model.jnt_type()[j], MjtJoint::mjJNT_HINGE | MjtJoint::mjJNT_SLIDE) {
            return Err(PhysicsError::NotAServoJoint { joint: sj.joint });
        }
        joints.push((model.jnt_qposadr()[j] as usize, model.jnt_dofadr()[j] as usize));
        links.push(JointLink { bus: sj.bus, id: sj.id, joint: index });
        joint_names.push(sj.joint);
    }
    let free_joint_of = |b: usize| {
        (0..model.ffi().njnt as usize)
            .find(|&j| model.jnt_type()[j] == MjtJoint::mjJNT_FREE && model.jnt_bodyid()[j] as usize == b)
    };
    let body = match &spec.body {
        Some(b) => model.name_to_id(MjtObjBase::mjOBJ_BODY, b).ok_or(PhysicsError::NoSuchBody { body: b.clone() })?,
        // The floating base; a fixed-base model's first body (a robot arm's base).
        None => (0..model.ffi().njnt as usize)
            .find(|&j| model.jnt_type()[j] == MjtJoint::mjJNT_FREE)
            .map(|j| model.jnt_bodyid()[j] as usize)
            .or((model.ffi().nbody > 1).then_some(1))
            .ok_or(PhysicsError::NoBody)?,
    };
    let body_qpos = free_joint_of(body).map(|j| model.jnt_qposadr()[j] as usize);
    let nq = model.ffi().nq as usize;
    let start_qpos = match &spec.pose {
        BuiltInPose::Reference => model.qpos0().to_vec(),
        BuiltInPose::Keyframe(k) => {
            let key = model
                .name_to_id(MjtObjBase::mjOBJ_KEY, k)
                .ok_or_else(|| PhysicsError::NoSuchPose { pose: k.clone() })?;
            model.key_qpos()[key * nq..(key + 1) * nq].to_vec()
        }
    };
    let tilt = tilt_quaternion(spec.ground_tilt_deg);
    let mut data = MjData::new(Box::new(model));
    // Gravity along the true vertical, seen from the ground's frame.
    let down = rotate(conjugate(tilt), [0.0, 0.0, -GRAVITY_MPS2]);
    data.model_opt_mut().gravity = down;
    let timestep_ns = (timestep_s * 1e9).round() as u64;
    let settle_steps = (spec.settle_s / timestep_s).round() as u64;
    let mut plant = MujocoPlant {
        data,
        joints,
        body,
        body_qpos,
        tilt,
        start_qpos,
        settle_steps,
        last_velocity: [0.0; 3],
        accel_world: [0.0; 3],
        steps: 0,
        timestep_ns,
        push: [0.0; 3],
    };
    plant.restart(0).map_err(|e| PhysicsError::Unstable { reason: e.to_string() })?;
    Ok(Loaded { plant: Box::new(plant), links, joint_names })
}

/// MuJoCo's message, on one line.
fn mujoco_reason(e: &MjModelError) -> String {
    let text = match e {
        MjModelError::LoadFailed(s) => s.clone(),
        other => other.to_string(),
    };
    text.split_whitespace().collect::<Vec<_>>().join(" ").trim_end_matches('.').to_string()
}

/// Every number a model carries that a NaN would poison.
fn check_finite(m: &MjModel) -> Result<(), PhysicsError> {
    let fields: [(&'static str, &[f64]); 9] = [
        ("body masses", m.body_mass()),
        ("body inertias", m.body_inertia().as_flattened()),
        ("body positions", m.body_pos().as_flattened()),
        ("geom sizes", m.geom_size().as_flattened()),
        ("geom positions", m.geom_pos().as_flattened()),
        ("joint ranges", m.jnt_range().as_flattened()),
        ("joint armatures", m.dof_armature()),
        ("joint damping", m.dof_damping()),
        ("reference pose", m.qpos0()),
    ];
    for (field, values) in fields {
        if values.iter().any(|v| !v.is_finite()) {
            return Err(PhysicsError::NotFinite { field });
        }
    }
    if m.key_qpos().iter().any(|v| !v.is_finite()) {
        return Err(PhysicsError::NotFinite { field: "keyframes" });
    }
    let o = m.opt();
    if !o.timestep.is_finite() || o.gravity.iter().any(|v| !v.is_finite()) {
        return Err(PhysicsError::NotFinite { field: "options" });
    }
    Ok(())
}

impl MujocoPlant {
    /// To the starting pose (joints jittered by `seed` unless 0), then settle limp.
    fn restart(&mut self, seed: u64) -> Result<(), PlantError> {
        self.data.reset();
        self.data.qpos_mut().copy_from_slice(&self.start_qpos);
        if seed != 0 {
            let mut rng = XorShift64::new(seed);
            for &(q, _) in &self.joints {
                self.data.qpos_mut()[q] += (rng.next_f64() * 2.0 - 1.0) * RESET_JOINT_JITTER_RAD;
            }
        }
        self.data.forward();
        self.push = [0.0; 3];
        self.steps = 0;
        for _ in 0..self.settle_steps {
            self.advance()?;
        }
        self.data.set_time(0.0);
        self.accel_world = [0.0; 3];
        Ok(())
    }

    /// One MuJoCo step with whatever forces are set, then the checks.
    fn advance(&mut self) -> Result<(), PlantError> {
        let body = self.body;
        self.data.xfrc_applied_mut()[body] = [self.push[0], self.push[1], self.push[2], 0.0, 0.0, 0.0];
        self.data.step();
        self.steps += 1;
        let time_s = self.data.time();
        let bad_qacc = self.data.warning()[MjtWarning::mjWARN_BADQACC as usize].number > 0;
        if bad_qacc || self.data.qpos().iter().chain(self.data.qvel()).any(|v| !v.is_finite()) {
            return Err(PlantError::NotFinite { time_s });
        }
        if self.steps.is_multiple_of(ENERGY_EVERY) {
            self.data.energy_vel();
            let energy_j = self.data.energy()[1];
            if !energy_j.is_finite() || energy_j > MAX_KINETIC_J {
                return Err(PlantError::EnergyBlowUp { time_s, energy_j });
            }
        }
        // The body's acceleration from the change of its velocity over the step (the
        // accelerometer's view, before gravity).
        let v = self.data.object_velocity(MjtObjBase::mjOBJ_BODY, body, false);
        let dt = self.timestep_ns as f64 * 1e-9;
        for k in 0..3 {
            self.accel_world[k] = (v[3 + k] - self.last_velocity[k]) / dt;
            self.last_velocity[k] = v[3 + k];
        }
        Ok(())
    }
}

impl Plant for MujocoPlant {
    fn joint_count(&self) -> usize {
        self.joints.len()
    }

    fn timestep_ns(&self) -> u64 {
        self.timestep_ns
    }

    fn step(&mut self, torque_nm: &[f64]) -> Result<(), PlantError> {
        let frc = self.data.qfrc_applied_mut();
        for (j, &(_, dof)) in self.joints.iter().enumerate() {
            let t = torque_nm.get(j).copied().unwrap_or(0.0);
            frc[dof] = if t.is_finite() { t } else { 0.0 };
        }
        self.advance()
    }

    fn joint_state(&self, j: usize) -> (f64, f64) {
        self.joints.get(j).map_or((0.0, 0.0), |&(q, d)| (self.data.qpos()[q], self.data.qvel()[d]))
    }

    fn body(&self) -> Option<BodyState> {
        // A floating body's state is its free joint's, as of this step; a fixed-base model's
        // body pose comes from the kinematics MuJoCo computed at the start of the step.
        let (attitude_model, height_m) = match self.body_qpos {
            Some(a) => {
                let q = &self.data.qpos()[a..a + 7];
                ([q[3], q[4], q[5], q[6]], q[2])
            }
            None => (self.data.xquat()[self.body], self.data.xpos()[self.body][2]),
        };
        let attitude = normalize(multiply(self.tilt, attitude_model));
        // Body rates in the body's own frame; acceleration turned into it.
        let v = self.data.object_velocity(MjtObjBase::mjOBJ_BODY, self.body, true);
        let accel = rotate(conjugate(attitude_model), self.accel_world);
        Some(BodyState { quaternion: attitude, rate_rps: [v[0], v[1], v[2]], accel_mps2: accel, height_m })
    }

    fn set_push(&mut self, force_n: [f64; 3]) {
        // The push is given in the gravity-aligned frame; MuJoCo wants it in the ground's.
        self.push =
            if force_n.iter().all(|f| f.is_finite()) { rotate(conjugate(self.tilt), force_n) } else { [0.0; 3] };
    }

    fn reset(&mut self, seed: u64) -> bool {
        self.restart(seed).is_ok()
    }
}

/// The ground's slope as a rotation from the ground's frame to the gravity-aligned one:
/// roll about +x, pitch given nose-up-positive (a rotation about −y in MuJoCo's frame).
fn tilt_quaternion((roll_deg, pitch_deg): (f64, f64)) -> [f64; 4] {
    let (r, p) = (roll_deg.to_radians() / 2.0, -pitch_deg.to_radians() / 2.0);
    let qx = [r.cos(), r.sin(), 0.0, 0.0];
    let qy = [p.cos(), 0.0, p.sin(), 0.0];
    multiply(qy, qx)
}

fn multiply(a: [f64; 4], b: [f64; 4]) -> [f64; 4] {
    [
        a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3],
        a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
        a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1],
        a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0],
    ]
}

fn conjugate(q: [f64; 4]) -> [f64; 4] {
    [q[0], -q[1], -q[2], -q[3]]
}

fn normalize(q: [f64; 4]) -> [f64; 4] {
    let n = q.iter().map(|x| x * x).sum::<f64>().sqrt();
    if n > 0.0 && n.is_finite() {
        q.map(|x| x / n)
    } else {
        [1.0, 0.0, 0.0, 0.0]
    }
}

/// `q` applied to vector `v`.
fn rotate(q: [f64; 4], v: [f64; 3]) -> [f64; 3] {
    let p = multiply(multiply(q, [0.0, v[0], v[1], v[2]]), conjugate(q));
    [p[1], p[2], p[3]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tilted_ground_tilts_gravity_the_other_way() {
        // Ground 10° nose up: in the ground's frame gravity pulls back (down the slope).
        let t = tilt_quaternion((0.0, 10.0));
        let g = rotate(conjugate(t), [0.0, 0.0, -1.0]);
        assert!(g[0] < -0.17 && g[0] > -0.18, "{g:?}");
        let t = tilt_quaternion((10.0, 0.0));
        let g = rotate(conjugate(t), [0.0, 0.0, -1.0]);
        // Right side down: gravity pulls to the right (−y in MuJoCo's frame).
        assert!(g[1] < -0.17 && g[1] > -0.18, "{g:?}");
    }
}
