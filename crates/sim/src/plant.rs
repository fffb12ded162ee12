//! What the simulated servos turn: the plant under them.
//!
//! What it is for: separating the servo (registers, modes, the position controller, limits,
//! watchdog, electrical and thermal state) from the mechanics it drives. A [`Plant`] takes
//! one joint torque per joint over a fixed time step and reports joint positions and
//! velocities and, when it has one, the attitude, rates and acceleration of the body it
//! carries. [`IndependentJoints`] is the default: one joint per servo, each on its own (the
//! equation [`joint_step`] every uncoupled servo integrates by itself); a physics engine
//! (rtloop-physics) is another. [`crate::world::World`] couples servos to a plant.
//! What it must never do: allocate or panic in [`Plant::step`], or report a non-finite
//! joint state: a plant that goes unstable says so with a [`PlantError`] and keeps its last
//! finite state.
//!
//! Units: joint positions in radians, velocities in rad/s, torques in N·m, all at the joint
//! (after the gearbox). Body frame and world frame as MuJoCo's: +x forward, +y left, +z up;
//! the world's +z is against gravity. [`BodyState::to_imu`] turns a body state into the
//! pi3hat's frame and conventions.

use core::f64::consts::TAU;

use crate::imu::ImuSample;

/// Standard gravity, m/s².
pub const GRAVITY_MPS2: f64 = 9.806_65;

/// The body a plant carries, as its IMU would sense it (MuJoCo's frames: +x forward, +y
/// left, +z up).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BodyState {
    /// Attitude `[w, x, y, z]`: rotates body vectors into the gravity-aligned world frame.
    pub quaternion: [f64; 4],
    /// Angular rates about the body's x, y, z, rad/s.
    pub rate_rps: [f64; 3],
    /// Linear acceleration in the body frame with gravity removed, m/s².
    pub accel_mps2: [f64; 3],
    /// The body origin's position in the ground's frame (x forward, y left along the ground
    /// from where the model puts its origin; z up from the ground), m.
    pub position_m: [f64; 3],
    /// The body origin's velocity in the ground's frame, m/s.
    pub velocity_mps: [f64; 3],
}

impl BodyState {
    /// Height of the body's origin above the ground under it, m.
    pub fn height_m(&self) -> f64 {
        self.position_m[2]
    }

    /// Roll and pitch, radians, in the pi3hat's sense: positive roll is the right side down,
    /// positive pitch the nose up.
    pub fn roll_pitch(&self) -> (f64, f64) {
        crate::imu::roll_pitch(self.to_imu().quaternion)
    }

    /// The same state as the pi3hat reports it: +x forward, +y right, +z down, rates in °/s,
    /// acceleration with gravity removed. Turning MuJoCo's frames into the pi3hat's is a half
    /// turn about x, in the body and in the world alike, so each vector's y and z change sign
    /// and so do the quaternion's.
    pub fn to_imu(&self) -> ImuSample {
        let [w, x, y, z] = self.quaternion;
        let d = |r: f64| r.to_degrees();
        ImuSample {
            quaternion: [w, x, -y, -z],
            rate_dps: [d(self.rate_rps[0]), -d(self.rate_rps[1]), -d(self.rate_rps[2])],
            accel_mps2: [self.accel_mps2[0], -self.accel_mps2[1], -self.accel_mps2[2]],
        }
    }
}

/// Why a plant stopped: its state is no longer something a servo could report.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum PlantError {
    /// A position, velocity or the body's state became NaN or infinite.
    NotFinite {
        /// Simulated time of the step that failed, s.
        time_s: f64,
    },
    /// The mechanical energy grew past any the actuators could have put in.
    EnergyBlowUp {
        /// Simulated time of the step that failed, s.
        time_s: f64,
        /// The energy it reached, J.
        energy_j: f64,
    },
}

impl core::fmt::Display for PlantError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{}: the model's masses, inertias or time step do not fit the gains; the run stops the servos",
            self.what()
        )
    }
}

impl PlantError {
    /// What happened, without a cause: "the physics went unstable at 1.432 s (its energy
    /// reached 1.078e4 J)".
    pub fn what(&self) -> String {
        match self {
            PlantError::NotFinite { time_s } => {
                format!("the physics went unstable at {time_s:.3} s (its state became NaN)")
            }
            PlantError::EnergyBlowUp { time_s, energy_j } => {
                format!("the physics went unstable at {time_s:.3} s (its energy reached {energy_j:.3e} J)")
            }
        }
    }

    /// Simulated time of the step that failed, s.
    pub fn time_s(&self) -> f64 {
        match *self {
            PlantError::NotFinite { time_s } | PlantError::EnergyBlowUp { time_s, .. } => time_s,
        }
    }
}

impl core::error::Error for PlantError {}

/// Mechanics under the simulated servos. Implementations must not allocate in `step`.
pub trait Plant: Send {
    /// Joints it has; joint indices run from 0.
    fn joint_count(&self) -> usize;

    /// Its time step, ns: [`crate::world::World`] evaluates the servos' controllers once per
    /// step.
    fn timestep_ns(&self) -> u64;

    /// Advance one time step with `torque_nm[j]` applied at joint `j` (N·m; missing entries
    /// are 0). On an error the state stays the last finite one.
    fn step(&mut self, torque_nm: &[f64]) -> Result<(), PlantError>;

    /// Joint `j`'s position and velocity: rad and rad/s for a hinge, m and m/s for a slide
    /// ([`Plant::joint_kind`]); zeros for a joint it does not have.
    fn joint_state(&self, j: usize) -> (f64, f64);

    /// Whether joint `j` turns (a hinge: its servo counts revolutions) or slides (its servo
    /// counts metres, as a moteus on a linear actuator whose output is set up in metres).
    fn joint_kind(&self, _j: usize) -> JointKind {
        JointKind::Hinge
    }

    /// The body, when the plant has one (the default plant has none).
    fn body(&self) -> Option<BodyState> {
        None
    }

    /// The plant's generalised positions (MuJoCo's `qpos`), from which a viewer poses every
    /// body; empty for a plant without them.
    fn qpos(&self) -> &[f64] {
        &[]
    }

    /// Push the body with `force_n` (world frame, N) at its origin, from now on until
    /// changed (zero: no push). Ignored by a plant without a body.
    fn set_push(&mut self, _force_n: [f64; 3]) {}

    /// Back to the initial state, with the initial pose perturbed as `seed` says (0: not
    /// at all). Returns false when the plant cannot reset.
    fn reset(&mut self, _seed: u64) -> bool {
        false
    }

    /// Take the physical parameters `params` (scales of the model's own values, never of the
    /// last ones) for the episodes from the next [`Plant::reset`] on. Returns false when the
    /// plant has none of these parameters (the default): only the nominal world then.
    fn set_params(&mut self, _params: &PlantParams) -> bool {
        false
    }

    /// Move joint `j` by `offset_rad` and set its velocity to `velocity_rad_s`: a start that
    /// differs from the settled pose (after a [`Plant::reset`]). Ignored by a plant that
    /// cannot (the default).
    fn nudge_joint(&mut self, _j: usize, _offset_rad: f64, _velocity_rad_s: f64) {}
}

/// The physical parameters of a plant's episode (domain randomisation), as scales of the
/// model's own values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlantParams {
    /// Scale of every contact's friction coefficients.
    pub friction_scale: f64,
    /// Scale of every body's mass and inertia.
    pub mass_scale: f64,
    /// Mass added to the body (the one the IMU is on), kg.
    pub payload_kg: f64,
}

impl PlantParams {
    /// The model as it is.
    pub const NOMINAL: PlantParams = PlantParams { friction_scale: 1.0, mass_scale: 1.0, payload_kg: 0.0 };
}

impl Default for PlantParams {
    fn default() -> Self {
        Self::NOMINAL
    }
}

/// How a joint moves, which sets the unit its servo counts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JointKind {
    /// It turns: positions in radians at the plant, revolutions at the servo; torques in N·m.
    #[default]
    Hinge,
    /// It slides: positions in metres at the plant and at the servo (one servo "revolution"
    /// is one metre); forces in N where the servo says N·m.
    Slide,
}

impl JointKind {
    /// Plant units (rad or m) per servo unit (rev or m).
    pub fn plant_units_per_servo_unit(self) -> f64 {
        match self {
            JointKind::Hinge => TAU,
            JointKind::Slide => 1.0,
        }
    }
}

/// One free joint's mechanics, as an uncoupled simulated servo carries it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JointParams {
    /// Inertia at the output, kg·m².
    pub inertia_kgm2: f64,
    /// Viscous damping, N·m·s/rad.
    pub damping_nms_per_rad: f64,
    /// Peak of the gravity-like load `load·sin(θ)`, N·m (positive: a hanging pendulum).
    pub load_torque_nm: f64,
    /// Coulomb friction magnitude, N·m.
    pub friction_nm: f64,
}

/// One step of `dt` seconds of a free joint at `pos_rev`, `vel_rev_s` under `torque_nm`
/// (semi-implicit Euler in radians): the new position and velocity, or `None` when the
/// velocity would not be finite (the caller then stops the joint).
#[inline]
pub fn joint_step(p: &JointParams, pos_rev: f64, vel_rev_s: f64, torque_nm: f64, dt: f64) -> Option<(f64, f64)> {
    let inertia = p.inertia_kgm2.abs().max(1e-9);
    let omega = vel_rev_s * TAU;
    let theta = pos_rev * TAU;
    let friction = p.friction_nm * (omega / 1e-2).tanh();
    let accel = (torque_nm - p.damping_nms_per_rad * omega - p.load_torque_nm * theta.sin() - friction) / inertia;
    let omega = omega + accel * dt;
    if !omega.is_finite() {
        return None;
    }
    let vel = omega / TAU;
    Some((pos_rev + vel * dt, vel))
}

/// The default plant: every joint on its own, with its own [`JointParams`]; no body.
#[derive(Debug, Clone)]
pub struct IndependentJoints {
    params: Vec<JointParams>,
    initial_rev: Vec<f64>,
    /// Position (rev) and velocity (rev/s) per joint.
    state: Vec<(f64, f64)>,
    step_ns: u64,
}

impl IndependentJoints {
    /// Joints with `params`, starting at rest at `initial_rev` (rev; missing entries 0),
    /// stepped every `step_ns`.
    pub fn new(params: Vec<JointParams>, initial_rev: &[f64], step_ns: u64) -> Self {
        let initial_rev: Vec<f64> = (0..params.len()).map(|j| initial_rev.get(j).copied().unwrap_or(0.0)).collect();
        let state = initial_rev.iter().map(|&p| (p, 0.0)).collect();
        IndependentJoints { params, initial_rev, state, step_ns: step_ns.max(1) }
    }
}

impl Plant for IndependentJoints {
    fn joint_count(&self) -> usize {
        self.params.len()
    }

    fn timestep_ns(&self) -> u64 {
        self.step_ns
    }

    fn step(&mut self, torque_nm: &[f64]) -> Result<(), PlantError> {
        let dt = self.step_ns as f64 * 1e-9;
        for (j, (p, s)) in self.params.iter().zip(self.state.iter_mut()).enumerate() {
            let torque = torque_nm.get(j).copied().unwrap_or(0.0);
            *s = joint_step(p, s.0, s.1, torque, dt).unwrap_or((s.0, 0.0));
        }
        Ok(())
    }

    fn joint_state(&self, j: usize) -> (f64, f64) {
        self.state.get(j).map_or((0.0, 0.0), |&(p, v)| (p * TAU, v * TAU))
    }

    fn reset(&mut self, _seed: u64) -> bool {
        for (s, &p) in self.state.iter_mut().zip(&self.initial_rev) {
            *s = (p, 0.0);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frames_turn_by_half_a_turn_about_x() {
        // Nose up by 10° in MuJoCo's frame is a rotation of −10° about +y (left); in the
        // pi3hat's frame (+y right) it is +10° about +y: positive pitch, nose up.
        let half = (-10f64).to_radians() / 2.0;
        let body = BodyState {
            quaternion: [half.cos(), 0.0, half.sin(), 0.0],
            rate_rps: [0.1, 0.2, 0.3],
            accel_mps2: [1.0, 2.0, 3.0],
            position_m: [0.0, 0.0, 0.3],
            velocity_mps: [0.0; 3],
        };
        let (roll, pitch) = body.roll_pitch();
        assert!(roll.abs() < 1e-12);
        assert!((pitch.to_degrees() - 10.0).abs() < 1e-9, "{}", pitch.to_degrees());
        let imu = body.to_imu();
        assert_eq!(imu.accel_mps2, [1.0, -2.0, -3.0]);
        assert!((imu.rate_dps[1] + 0.2f64.to_degrees()).abs() < 1e-12);
    }

    #[test]
    fn independent_joints_integrate_the_servo_equation() {
        let p = JointParams { inertia_kgm2: 0.01, damping_nms_per_rad: 0.05, load_torque_nm: 0.3, friction_nm: 0.0 };
        let mut plant = IndependentJoints::new(vec![p; 2], &[0.1], 100_000);
        plant.step(&[1.0]).unwrap();
        let expected = joint_step(&p, 0.1, 0.0, 1.0, 1e-4).unwrap();
        let (pos, vel) = plant.joint_state(0);
        assert!((pos - expected.0 * TAU).abs() < 1e-15 && (vel - expected.1 * TAU).abs() < 1e-15);
        // The second joint had no torque and sits at 0 with no load to move it.
        assert_eq!(plant.joint_state(1), (0.0, 0.0));
        assert!(plant.reset(0));
        assert_eq!(plant.joint_state(0), (0.1 * TAU, 0.0));
    }

    #[test]
    fn an_infinite_torque_stops_the_joint_instead_of_reporting_nan() {
        let p = JointParams { inertia_kgm2: 0.01, damping_nms_per_rad: 0.0, load_torque_nm: 0.0, friction_nm: 0.0 };
        assert_eq!(joint_step(&p, 0.0, 0.0, f64::INFINITY, 1e-4), None);
    }
}
