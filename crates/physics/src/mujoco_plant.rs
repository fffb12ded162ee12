//! The MuJoCo plant: a compiled model, its data, and the joints servos turn.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

use mujoco_rs::prelude::*;
use rtloop_sim::plant::GRAVITY_MPS2;
use rtloop_sim::rng::XorShift64;
use rtloop_sim::{BodyState, JointLink, Plant, PlantError, PlantParams};

use crate::spec::{
    BuiltInPose, ModelActuators, ModelSource, PhysicsError, PhysicsSpec, ServoJoint, ServoOverrides, STAND_KEYFRAMES,
};
use crate::{Loaded, ModelFacts, PhysicsNotice, QUADRUPED_MJCF};
use rtloop_sim::{JointKind, ServoSetup};

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
    /// Per plant joint: (qpos address, dof address), and whether it turns or slides.
    joints: Vec<(usize, usize)>,
    kinds: Vec<JointKind>,
    /// The IMU's body, and its free joint's qpos address when it floats.
    body: usize,
    body_qpos: Option<usize>,
    /// Rotates the model's frame (ground horizontal) into the gravity-aligned frame.
    tilt: [f64; 4],
    /// The pose a reset returns to, the controls of the actuators left on, and the settle time.
    start_qpos: Vec<f64>,
    start_ctrl: Vec<f64>,
    settle_steps: u64,
    /// The body's world-frame linear velocity at the previous step (for its acceleration).
    last_velocity: [f64; 3],
    accel_world: [f64; 3],
    steps: u64,
    timestep_ns: u64,
    push: [f64; 3],
    /// The model's own masses, inertias and friction coefficients: an episode's parameters
    /// scale these, never the last episode's ([`Plant::set_params`]).
    nominal: Nominal,
}

/// The compiled model's own physical values, per body and per geom.
struct Nominal {
    mass: Vec<f64>,
    inertia: Vec<[f64; 3]>,
    friction: Vec<[f64; 3]>,
}

/// MuJoCo's warnings since the process started (it would otherwise print them and write
/// them to MUJOCO_LOG.TXT in the working directory).
static WARNINGS: AtomicU64 = AtomicU64::new(0);

/// MuJoCo's messages go to [`quiet_handler`], once per process, before any model is loaded.
pub(crate) fn quiet_mujoco() {
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
    let (name, mut model, file_sha256) = compile(&spec.model)?;
    // Of the model as its files compile, before the run changes its time step or switches
    // actuators off: a viewer compiling the same files gets the same value.
    let compiled_sha256 = compiled_fingerprint(&model);
    check_finite(&model)?;
    let model_step_s = model.opt().timestep;
    if !(1e-5..=0.01).contains(&model_step_s) {
        return Err(PhysicsError::BadNumber {
            what: "the model's time step",
            value: model_step_s,
            range: "10 µs to 10 ms",
        });
    }
    let mut notices = Vec::new();
    // A step that does not divide the loop's period would leave some cycles without a step
    // (the same "fresh" joints twice): the longest step that divides it, never longer than
    // the model's own.
    let model_step_ns = (model_step_s * 1e9).round() as u64;
    let timestep_ns = if spec.period_ns.is_multiple_of(model_step_ns) {
        model_step_ns
    } else {
        let steps = spec.period_ns.div_ceil(model_step_ns);
        let used = spec.period_ns / steps;
        notices.push(PhysicsNotice::TimeStepAdapted {
            model_s: model_step_s,
            used_s: used as f64 * 1e-9,
            period_s: spec.period_ns as f64 * 1e-9,
        });
        used
    };
    model.opt_mut().timestep = timestep_ns as f64 * 1e-9;

    let hinge_or_slide = |t: MjtJoint| matches!(t, MjtJoint::mjJNT_HINGE | MjtJoint::mjJNT_SLIDE);
    let known: Vec<String> = (0..model.ffi().njnt as usize)
        .filter(|&j| hinge_or_slide(model.jnt_type()[j]))
        .filter_map(|j| model.id_to_name(MjtObjBase::mjOBJ_JOINT, j).map(str::to_string))
        .collect();
    let map = spec.joint_map();
    let mut joint_ids = Vec::with_capacity(map.len());
    for sj in &map {
        let Some(j) = model.name_to_id(MjtObjBase::mjOBJ_JOINT, &sj.joint) else {
            return Err(PhysicsError::NoSuchJoint { joint: sj.joint.clone(), known });
        };
        if !hinge_or_slide(model.jnt_type()[j]) {
            return Err(PhysicsError::NotAServoJoint { joint: sj.joint.clone() });
        }
        joint_ids.push(j);
    }
    let kinds: Vec<JointKind> = joint_ids
        .iter()
        .map(|&j| if model.jnt_type()[j] == MjtJoint::mjJNT_SLIDE { JointKind::Slide } else { JointKind::Hinge })
        .collect();
    let joints: Vec<(usize, usize)> =
        joint_ids.iter().map(|&j| (model.jnt_qposadr()[j] as usize, model.jnt_dofadr()[j] as usize)).collect();
    let links: Vec<JointLink> =
        map.iter().enumerate().map(|(index, sj)| JointLink { bus: sj.bus, id: sj.id, joint: index }).collect();
    let joint_names: Vec<String> = map.iter().map(|sj| sj.joint.clone()).collect();

    let body = match &spec.body {
        Some(b) => model.name_to_id(MjtObjBase::mjOBJ_BODY, b).ok_or(PhysicsError::NoSuchBody { body: b.clone() })?,
        None => imu_body(&model, &joint_ids)?,
    };
    let body_name = model.id_to_name(MjtObjBase::mjOBJ_BODY, body).unwrap_or("(unnamed)").to_string();
    let body_qpos = free_joint_of(&model, body).map(|j| model.jnt_qposadr()[j] as usize);

    let nq = model.ffi().nq as usize;
    let nu = model.ffi().nu as usize;
    let keyframe = |model: &MjModel, k: &str| model.name_to_id(MjtObjBase::mjOBJ_KEY, k);
    let (start_qpos, start_ctrl) = match &spec.pose {
        BuiltInPose::Reference => (model.qpos0().to_vec(), vec![0.0; nu]),
        BuiltInPose::Keyframe(k) => {
            let key = keyframe(&model, k).ok_or_else(|| PhysicsError::NoSuchPose { pose: k.clone() })?;
            (model.key_qpos()[key * nq..(key + 1) * nq].to_vec(), model.key_ctrl()[key * nu..(key + 1) * nu].to_vec())
        }
    };

    // The model's own actuators on mapped joints: switched off (their transmission no
    // longer reaches the joint), their figures kept for the servos' setups.
    let mut adopted = vec![ServoOverrides::default(); map.len()];
    let mut switched_off = 0;
    let nact = model.ffi().nu as usize;
    for a in 0..nact {
        if model.actuator_trntype()[a] != MjtTrn::mjTRN_JOINT {
            continue;
        }
        let target = model.actuator_trnid()[a][0];
        let Some(link) = joint_ids.iter().position(|&j| j as i32 == target) else { continue };
        if spec.actuators == ModelActuators::Adopt {
            adopted[link] = actuator_setup(&model, a, kinds[link]);
        }
        model.actuator_gear_mut()[a] = [0.0; 6];
        switched_off += 1;
    }
    if switched_off > 0 {
        notices.push(PhysicsNotice::ActuatorsSwitchedOff {
            count: switched_off,
            adopted: spec.actuators == ModelActuators::Adopt,
        });
    }
    let mut setups = Vec::with_capacity(map.len());
    for (sj, from_model) in map.iter().zip(&adopted) {
        let setup = sj.servo.or(spec.servo).or(*from_model).resolve();
        if !setup.is_valid() {
            // Only the model's figures can be out of range here (the user's were checked).
            return Err(PhysicsError::BadSetup {
                servo: format!("servo {} on bus {} (from the model's actuator on `{}`)", sj.id, sj.bus + 1, sj.joint),
                what: "max_torque",
                value: setup.max_torque_nm,
                range: format!("at most {:.0} N·m: give max_torque for it under [physics]", setup.torque_ceiling_nm()),
            });
        }
        setups.push(setup);
    }

    // The pose a demonstration stands in, in each servo's units.
    let stand_name = match (&spec.stand_pose, &spec.model) {
        (Some(k), _) => Some(k.clone()),
        (None, ModelSource::BuiltIn) => None,
        (None, ModelSource::File(_)) => {
            STAND_KEYFRAMES.iter().find(|k| keyframe(&model, k).is_some()).map(|k| k.to_string())
        }
    };
    let stand_rev = match &stand_name {
        None => None,
        Some(k) => {
            let Some(key) = keyframe(&model, k) else {
                let known = (0..model.ffi().nkey as usize)
                    .filter_map(|i| model.id_to_name(MjtObjBase::mjOBJ_KEY, i).map(str::to_string))
                    .collect();
                return Err(PhysicsError::NoSuchStandPose { pose: k.clone(), known });
            };
            let qpos = &model.key_qpos()[key * nq..(key + 1) * nq];
            Some(
                joints
                    .iter()
                    .zip(&kinds)
                    .zip(&setups)
                    .map(|((&(q, _), kind), setup)| setup.output_sign * qpos[q] / kind.plant_units_per_servo_unit())
                    .collect(),
            )
        }
    };

    let tilt = tilt_quaternion(spec.ground_tilt_deg);
    let facts = ModelFacts {
        name: match &spec.model {
            ModelSource::BuiltIn => name.clone(),
            ModelSource::File(_) => model_name(&model).unwrap_or_else(|| name.clone()),
        },
        path: match &spec.model {
            ModelSource::BuiltIn => None,
            ModelSource::File(p) => Some(std::path::absolute(p).unwrap_or_else(|_| p.clone())),
        },
        file_sha256,
        compiled_sha256,
        body: body_name.clone(),
        floating: body_qpos.is_some(),
        timestep_s: timestep_ns as f64 * 1e-9,
        nq,
        stand_pose: stand_name,
    };
    notices.extend(stiff_servos(&model, &map, &joints, &kinds, &setups, timestep_ns as f64 * 1e-9));
    let mut data = MjData::new(Box::new(model));
    // Gravity along the true vertical, seen from the ground's frame.
    let down = rotate(conjugate(tilt), [0.0, 0.0, -GRAVITY_MPS2]);
    data.model_opt_mut().gravity = down;
    data.qpos_mut().copy_from_slice(&start_qpos);
    data.forward();
    if body_qpos.is_some() && !has_ground_under(&data, body) {
        return Err(PhysicsError::NoGround { model: name, body: body_name });
    }
    let settle_steps = (spec.settle_s / (timestep_ns as f64 * 1e-9)).round() as u64;
    let nominal = Nominal {
        mass: data.model().body_mass().to_vec(),
        inertia: data.model().body_inertia().to_vec(),
        friction: data.model().geom_friction().to_vec(),
    };
    let mut plant = MujocoPlant {
        data,
        joints,
        kinds,
        body,
        body_qpos,
        tilt,
        start_qpos,
        start_ctrl,
        settle_steps,
        last_velocity: [0.0; 3],
        accel_world: [0.0; 3],
        steps: 0,
        timestep_ns,
        push: [0.0; 3],
        nominal,
    };
    plant.restart(0).map_err(|e| PhysicsError::Unstable { reason: e.to_string() })?;
    Ok(Loaded { plant: Box::new(plant), links, joint_names, setups, stand_rev, notices, model: facts })
}

/// Compile the model: its name for sentences, the model, and the SHA-256 of its file.
pub(crate) fn compile(source: &ModelSource) -> Result<(String, MjModel, Option<String>), PhysicsError> {
    match source {
        ModelSource::BuiltIn => {
            let model = MjModel::from_xml_string(QUADRUPED_MJCF).map_err(|e| PhysicsError::Model {
                model: "the built-in quadruped".into(),
                reason: one_line(&e.to_string()),
            })?;
            Ok(("the built-in quadruped".to_string(), model, None))
        }
        ModelSource::File(path) => {
            let name = path.display().to_string();
            let refused = |reason: String| PhysicsError::Model { model: name.clone(), reason };
            // Read here first: a file that cannot be read gets the system's reason, and a NaN
            // written in it is refused before MuJoCo would replace it with a default.
            let text = std::fs::read(path).map_err(|e| refused(e.to_string().to_lowercase()))?;
            if let Some(e) = crate::spec::non_finite_attribute(&String::from_utf8_lossy(&text)) {
                return Err(e);
            }
            let Some(c_path) = path.to_str().and_then(|p| std::ffi::CString::new(p).ok()) else {
                return Err(refused("its path is not UTF-8 or holds a NUL character: rename it".into()));
            };
            match MjModel::from_xml(path) {
                Ok(model) => Ok((name, model, Some(sha256_hex(&text)))),
                Err(_) => Err(refused(full_load_error(&c_path))),
            }
        }
    }
}

/// MuJoCo's whole message for a model that does not load (mujoco-rs keeps 99 characters,
/// which cuts off where in which file the problem is), on one line.
fn full_load_error(path: &std::ffi::CStr) -> String {
    let mut buffer = vec![0 as std::ffi::c_char; 4096];
    // SAFETY: `path` is NUL-terminated; the buffer is writable for its length, which is
    // passed, and MuJoCo NUL-terminates what it writes within it; a null VFS means the file
    // system. A model that loads this time (it failed a moment ago) is freed at once.
    let message = unsafe {
        let m =
            mujoco_rs::mujoco_c::mj_loadXML(path.as_ptr(), std::ptr::null(), buffer.as_mut_ptr(), buffer.len() as i32);
        if !m.is_null() {
            mujoco_rs::mujoco_c::mj_deleteModel(m);
        }
        std::ffi::CStr::from_ptr(buffer.as_ptr()).to_string_lossy().into_owned()
    };
    if message.trim().is_empty() {
        "MuJoCo gave no reason".to_string()
    } else {
        one_line(&message)
    }
}

/// A message on one line, without a trailing full stop.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").trim_end_matches('.').to_string()
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The servos whose gains are too stiff for their joint at this time step. A simulated
/// servo's PD loop runs once per MuJoCo step (a moteus runs its own at 40 kHz): explicit
/// damping decays only while `h·kd/I < 2`, and the spring rings apart past `h²·kp/I ≈ 4`, so
/// with a margin either above 1 is said, with what to change. `I` is the joint's inertia at
/// the model's reference pose (MuJoCo's `dof_M0`, armature included).
fn stiff_servos(
    model: &MjModel,
    map: &[ServoJoint],
    joints: &[(usize, usize)],
    kinds: &[JointKind],
    setups: &[ServoSetup],
    step_s: f64,
) -> Vec<PhysicsNotice> {
    let mut stiff = Vec::new();
    for (((sj, &(_, dof)), kind), setup) in map.iter().zip(joints).zip(kinds).zip(setups) {
        let inertia = model.dof_m0()[dof];
        let per_unit = kind.plant_units_per_servo_unit();
        let (kp, kd) = (setup.kp_nm_per_rev / per_unit, setup.kd_nms_per_rev / per_unit);
        let (damping, spring) = (step_s * kd / inertia, step_s * step_s * kp / inertia);
        if inertia > 0.0 && (damping > 1.0 || spring > 1.0) {
            stiff.push(PhysicsNotice::StiffServo {
                servo: format!("servo {} on bus {}", sj.id, sj.bus + 1),
                joint: sj.joint.clone(),
                inertia,
                max_kp: inertia / (step_s * step_s) * per_unit,
                max_kd: inertia / step_s * per_unit,
                step_s,
            });
        }
    }
    stiff
}

/// The model's own name (`<mujoco model="go2">`), if it gives one.
fn model_name(model: &MjModel) -> Option<String> {
    let ffi = model.ffi();
    let len = usize::try_from(ffi.nnames).ok().filter(|&n| n > 0)?;
    if ffi.names.is_null() {
        return None;
    }
    // SAFETY: a compiled mjModel's `names` points at `nnames` bytes of NUL-terminated names,
    // the model's own first; the model outlives this borrow and is not written meanwhile.
    let bytes = unsafe { std::slice::from_raw_parts(ffi.names.cast::<u8>(), len) };
    let name = std::ffi::CStr::from_bytes_until_nul(bytes).ok()?.to_str().ok()?;
    (!name.is_empty()).then(|| name.to_string())
}

/// SHA-256 of the compiled model as MuJoCo saves it (MJB): the same for the same files
/// (includes and meshes too) and the same MuJoCo, whatever path they were loaded from.
pub(crate) fn compiled_fingerprint(model: &MjModel) -> String {
    let mut buffer = vec![0u8; model.size()];
    match model.save_to_buffer(&mut buffer) {
        Ok(()) => sha256_hex(&buffer),
        Err(_) => String::new(),
    }
}

/// The free joint of body `b`, if it floats.
fn free_joint_of(model: &MjModel, b: usize) -> Option<usize> {
    (0..model.ffi().njnt as usize)
        .find(|&j| model.jnt_type()[j] == MjtJoint::mjJNT_FREE && model.jnt_bodyid()[j] as usize == b)
}

/// The body the IMU is on: the free-floating body the mapped joints hang from (their nearest
/// ancestor with a free joint); for a fixed-base model the body at the root of their chain.
/// Refused when they hang from several.
fn imu_body(model: &MjModel, mapped: &[usize]) -> Result<usize, PhysicsError> {
    let parent = |b: usize| model.body_parentid()[b] as usize;
    let mut floating = Vec::new();
    let mut roots = Vec::new();
    for &j in mapped {
        let mut b = model.jnt_bodyid()[j] as usize;
        let base = loop {
            if free_joint_of(model, b).is_some() {
                break Some(b);
            }
            if b == 0 || parent(b) == 0 {
                break None;
            }
            b = parent(b);
        };
        match base {
            Some(base) if !floating.contains(&base) => floating.push(base),
            Some(_) => {}
            None => {
                let root = model.body_rootid()[model.jnt_bodyid()[j] as usize] as usize;
                if !roots.contains(&root) {
                    roots.push(root);
                }
            }
        }
    }
    let name = |b: usize| model.id_to_name(MjtObjBase::mjOBJ_BODY, b).map_or(format!("body {b}"), |n| format!("`{n}`"));
    match (floating.as_slice(), roots.as_slice()) {
        ([one], []) => Ok(*one),
        ([], [one]) => Ok(*one),
        ([], []) => {
            // No joints mapped: the model's only free body, else its first body.
            let free: Vec<usize> =
                (1..model.ffi().nbody as usize).filter(|&b| free_joint_of(model, b).is_some()).collect();
            match free.as_slice() {
                [one] => Ok(*one),
                [] => (model.ffi().nbody > 1).then_some(1).ok_or(PhysicsError::NoBody),
                many => Err(PhysicsError::AmbiguousBody { candidates: many.iter().map(|&b| name(b)).collect() }),
            }
        }
        _ => Err(PhysicsError::AmbiguousBody { candidates: floating.iter().chain(&roots).map(|&b| name(b)).collect() }),
    }
}

/// Whether something fixed to the world, that the robot's geoms can touch, lies under the
/// floating body `body` (as the model is posed in `data`): a floor plane facing up, or any
/// other static geom below the body's origin.
fn has_ground_under(data: &MjData<Box<MjModel>>, body: usize) -> bool {
    let m = data.model();
    let root = m.body_rootid()[body];
    let ngeom = m.ffi().ngeom as usize;
    let robot: Vec<usize> = (0..ngeom).filter(|&g| m.body_rootid()[m.geom_bodyid()[g] as usize] == root).collect();
    let body_z = data.xpos()[body][2];
    (0..ngeom).filter(|&g| m.body_weldid()[m.geom_bodyid()[g] as usize] == 0).any(|g| {
        let touches = robot.iter().any(|&r| {
            (m.geom_contype()[g] & m.geom_conaffinity()[r]) != 0 || (m.geom_contype()[r] & m.geom_conaffinity()[g]) != 0
        });
        let below = if m.geom_type()[g] == MjtGeomBase::mjGEOM_PLANE {
            // The plane's normal is its frame's z axis (third column of its rotation).
            let r = data.geom_xmat()[g];
            r[8] > 0.0 && data.geom_xpos()[g][2] < body_z
        } else {
            data.geom_xpos()[g][2] < body_z
        };
        touches && below
    })
}

/// What a model's actuator `a` on a joint of `kind` says its servo should be: its force or
/// control range as the torque limit, a position actuator's gains as the position gains
/// (MuJoCo's per radian or metre turned into the servo's per revolution or metre).
fn actuator_setup(m: &MjModel, a: usize, kind: JointKind) -> ServoOverrides {
    let gear = m.actuator_gear()[a][0].abs();
    let per_unit = kind.plant_units_per_servo_unit();
    let gain = m.actuator_gainprm()[a][0];
    let bias = m.actuator_biasprm()[a];
    let fixed_gain = m.actuator_gaintype()[a] == MjtGain::mjGAIN_FIXED;
    let position = fixed_gain && m.actuator_biastype()[a] == MjtBias::mjBIAS_AFFINE && bias[1] < 0.0;
    let motor = fixed_gain && m.actuator_biastype()[a] == MjtBias::mjBIAS_NONE;
    let range_max = |r: [f64; 2]| r[0].abs().max(r[1].abs());
    let max_torque = if m.actuator_forcelimited()[a] {
        Some(range_max(m.actuator_forcerange()[a]) * gear)
    } else if motor && m.actuator_ctrllimited()[a] {
        Some(range_max(m.actuator_ctrlrange()[a]) * gain.abs() * gear)
    } else {
        None
    };
    let (kp, kd) = if position {
        // force = kp·(ctrl − gear·q) − kv·gear·q̇, applied through the gear once more.
        (Some(-bias[1] * gear * gear * per_unit), Some((-bias[2]).max(0.0) * gear * gear * per_unit))
    } else {
        (None, None)
    };
    ServoOverrides {
        kp_nm_per_rev: kp.filter(|v| v.is_finite()),
        kd_nms_per_rev: kd.filter(|v| v.is_finite()),
        max_torque_nm: max_torque.filter(|v| v.is_finite() && *v > 0.0),
        gear_ratio: None,
        output_sign: None,
    }
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
        self.data.ctrl_mut().copy_from_slice(&self.start_ctrl);
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

    fn joint_kind(&self, j: usize) -> JointKind {
        self.kinds.get(j).copied().unwrap_or_default()
    }

    fn body(&self) -> Option<BodyState> {
        // A floating body's state is its free joint's, as of this step; a fixed-base model's
        // body pose comes from the kinematics MuJoCo computed at the start of the step.
        let (attitude_model, position) = match self.body_qpos {
            Some(a) => {
                let q = &self.data.qpos()[a..a + 7];
                ([q[3], q[4], q[5], q[6]], [q[0], q[1], q[2]])
            }
            None => (self.data.xquat()[self.body], self.data.xpos()[self.body]),
        };
        let attitude = normalize(multiply(self.tilt, attitude_model));
        // Body rates in the body's own frame; acceleration turned into it.
        let v = self.data.object_velocity(MjtObjBase::mjOBJ_BODY, self.body, true);
        let accel = rotate(conjugate(attitude_model), self.accel_world);
        Some(BodyState {
            quaternion: attitude,
            rate_rps: [v[0], v[1], v[2]],
            accel_mps2: accel,
            position_m: position,
            velocity_mps: self.last_velocity,
        })
    }

    fn qpos(&self) -> &[f64] {
        self.data.qpos()
    }

    fn set_push(&mut self, force_n: [f64; 3]) {
        // The push is given in the gravity-aligned frame; MuJoCo wants it in the ground's.
        self.push =
            if force_n.iter().all(|f| f.is_finite()) { rotate(conjugate(self.tilt), force_n) } else { [0.0; 3] };
    }

    fn reset(&mut self, seed: u64) -> bool {
        self.restart(seed).is_ok()
    }

    fn set_params(&mut self, params: &PlantParams) -> bool {
        let ok = |v: f64| v.is_finite() && v > 0.0;
        if !(ok(params.friction_scale) && ok(params.mass_scale) && params.payload_kg.is_finite()) {
            return false;
        }
        let payload = params.payload_kg.max(0.0);
        // SAFETY: only the values of existing per-body and per-geom arrays change (masses,
        // inertias, friction coefficients: all positive and finite); no size, index or
        // address of the model does, which is what the wrapper's invariants rest on.
        let model = unsafe { self.data.model_mut() };
        for (b, (m, i)) in self.nominal.mass.iter().zip(&self.nominal.inertia).enumerate() {
            let extra = if b == self.body { payload } else { 0.0 };
            model.body_mass_mut()[b] = m * params.mass_scale + extra;
            // The payload sits at the body's centre of mass: its inertia grows with its mass.
            let grow = if *m > 0.0 { (m * params.mass_scale + extra) / m } else { params.mass_scale };
            model.body_inertia_mut()[b] = [i[0] * grow, i[1] * grow, i[2] * grow];
        }
        for (g, f) in self.nominal.friction.iter().enumerate() {
            model.geom_friction_mut()[g] =
                [f[0] * params.friction_scale, f[1] * params.friction_scale, f[2] * params.friction_scale];
        }
        true
    }

    fn nudge_joint(&mut self, j: usize, offset: f64, velocity: f64) {
        let Some(&(q, d)) = self.joints.get(j) else { return };
        if !(offset.is_finite() && velocity.is_finite()) {
            return;
        }
        self.data.qpos_mut()[q] += offset;
        self.data.qvel_mut()[d] = velocity;
        self.data.forward();
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
