//! A simulated attitude reference (the pi3hat's IMU as its library reports it).
//!
//! What it is for: giving the control loop and the `--read-att` style tools an attitude,
//! body rates and accelerations that look like a robot body standing and gently swaying —
//! consistent with each other (the rates are the derivative of the attitude) and
//! deterministic for a seed.
//! What it must never do: read a clock (time is passed in), allocate, or use entropy other
//! than its seeded generator.
//!
//! Frame: the pi3hat's, +x forward, +y right, +z down. The quaternion `[w, x, y, z]` rotates
//! body vectors into the world frame; it is built from yaw ψ (constant, a few degrees, as
//! an un-referenced heading is), pitch θ and roll φ (slow sinusoids of a few degrees) in the
//! usual z-y-x order. Body rates follow from the Euler rates with ψ̇ = 0:
//! p = φ̇, q = θ̇·cos φ, r = −θ̇·sin φ. Acceleration is reported with gravity removed, as
//! pi3hat_tool shows it (≈ 0 at rest): the sway is a rotation about the sensor, so only a
//! small bias and noise remain.

use crate::rng::XorShift64;
use core::f64::consts::{PI, TAU};

/// One attitude report: the content of the pi3hat's attitude register.
pub use rtloop_proto::pi3hat::ImuSample;

/// Roll and pitch (radians, z-y-x order) of an attitude quaternion `[w, x, y, z]` in the
/// pi3hat's frame: positive roll is the right side down, positive pitch the nose up.
pub fn roll_pitch(q: [f64; 4]) -> (f64, f64) {
    let [w, x, y, z] = q;
    let roll = (2.0 * (w * x + y * z)).atan2(1.0 - 2.0 * (x * x + y * y));
    let pitch = (2.0 * (w * y - z * x)).clamp(-1.0, 1.0).asin();
    (roll, pitch)
}

/// Magnitudes of the motion and of the sensor imperfections.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImuConfig {
    /// Largest sway amplitude (roll and pitch each get a seeded amplitude up to this), degrees.
    pub max_sway_deg: f64,
    /// Sway frequencies are drawn in this range, Hz.
    pub sway_hz: (f64, f64),
    /// Largest constant heading, degrees.
    pub max_yaw_deg: f64,
    /// Gyro noise, standard deviation per sample, °/s.
    pub rate_noise_dps: f64,
    /// Largest gyro bias per axis, °/s.
    pub max_rate_bias_dps: f64,
    /// Accelerometer noise, standard deviation per sample, m/s².
    pub accel_noise_mps2: f64,
    /// Largest accelerometer bias per axis, m/s².
    pub max_accel_bias_mps2: f64,
}

impl Default for ImuConfig {
    fn default() -> Self {
        ImuConfig {
            max_sway_deg: 3.0,
            sway_hz: (0.2, 0.5),
            max_yaw_deg: 5.0,
            rate_noise_dps: 0.05,
            max_rate_bias_dps: 0.1,
            accel_noise_mps2: 0.02,
            max_accel_bias_mps2: 0.03,
        }
    }
}

impl ImuConfig {
    /// The same motion without noise or bias: exact kinematics, for tests and replay.
    pub fn noiseless() -> Self {
        ImuConfig {
            rate_noise_dps: 0.0,
            max_rate_bias_dps: 0.0,
            accel_noise_mps2: 0.0,
            max_accel_bias_mps2: 0.0,
            ..Default::default()
        }
    }
}

/// One sinusoid `amp · sin(2π·f·t + phase)`, radians.
#[derive(Debug, Clone, Copy)]
struct Sway {
    amp_rad: f64,
    freq_hz: f64,
    phase: f64,
}

impl Sway {
    fn angle(&self, t: f64) -> f64 {
        self.amp_rad * (TAU * self.freq_hz * t + self.phase).sin()
    }
    fn rate(&self, t: f64) -> f64 {
        self.amp_rad * TAU * self.freq_hz * (TAU * self.freq_hz * t + self.phase).cos()
    }
}

/// The simulated IMU.
#[derive(Debug, Clone)]
pub struct Imu {
    cfg: ImuConfig,
    rng: XorShift64,
    roll: Sway,
    pitch: Sway,
    yaw_rad: f64,
    rate_bias_dps: [f64; 3],
    accel_bias_mps2: [f64; 3],
}

impl Imu {
    /// An IMU with the default magnitudes; everything random is drawn from `seed`.
    pub fn new(seed: u64) -> Self {
        Self::with_config(seed, ImuConfig::default())
    }

    /// An IMU with explicit magnitudes.
    pub fn with_config(seed: u64, cfg: ImuConfig) -> Self {
        let mut rng = XorShift64::new(seed);
        let deg = PI / 180.0;
        let (f_lo, f_hi) = cfg.sway_hz;
        let sway = |rng: &mut XorShift64| Sway {
            amp_rad: rng.uniform(0.3, 1.0) * cfg.max_sway_deg * deg,
            freq_hz: rng.uniform(f_lo, f_hi),
            phase: rng.uniform(0.0, TAU),
        };
        let roll = sway(&mut rng);
        let pitch = sway(&mut rng);
        let yaw_rad = rng.uniform(-1.0, 1.0) * cfg.max_yaw_deg * deg;
        let mut rate_bias_dps = [0.0; 3];
        for b in &mut rate_bias_dps {
            *b = rng.uniform(-1.0, 1.0) * cfg.max_rate_bias_dps;
        }
        let mut accel_bias_mps2 = [0.0; 3];
        for b in &mut accel_bias_mps2 {
            *b = rng.uniform(-1.0, 1.0) * cfg.max_accel_bias_mps2;
        }
        Imu { cfg, rng, roll, pitch, yaw_rad, rate_bias_dps, accel_bias_mps2 }
    }

    /// Roll, pitch, yaw (radians) of the true motion at `now_ns`.
    pub fn euler_rad(&self, now_ns: u64) -> [f64; 3] {
        let t = now_ns as f64 * 1e-9;
        [self.roll.angle(t), self.pitch.angle(t), self.yaw_rad]
    }

    /// The report at `now_ns`. Each call draws fresh noise from the seeded generator, so a
    /// given seed and sequence of calls always gives the same reports.
    pub fn sample(&mut self, now_ns: u64) -> ImuSample {
        let t = now_ns as f64 * 1e-9;
        let (phi, theta, psi) = (self.roll.angle(t), self.pitch.angle(t), self.yaw_rad);
        let (phi_dot, theta_dot) = (self.roll.rate(t), self.pitch.rate(t));

        let (sr, cr) = (phi * 0.5).sin_cos();
        let (sp, cp) = (theta * 0.5).sin_cos();
        let (sy, cy) = (psi * 0.5).sin_cos();
        let mut q = [
            cr * cp * cy + sr * sp * sy,
            sr * cp * cy - cr * sp * sy,
            cr * sp * cy + sr * cp * sy,
            cr * cp * sy - sr * sp * cy,
        ];
        let norm = q.iter().map(|c| c * c).sum::<f64>().sqrt();
        for c in &mut q {
            *c /= norm;
        }

        let body_rate = [phi_dot, theta_dot * phi.cos(), -theta_dot * phi.sin()];
        let mut rate_dps = [0.0; 3];
        let mut accel_mps2 = [0.0; 3];
        for i in 0..3 {
            rate_dps[i] =
                body_rate[i].to_degrees() + self.rate_bias_dps[i] + self.cfg.rate_noise_dps * self.rng.gaussian();
            accel_mps2[i] = self.accel_bias_mps2[i] + self.cfg.accel_noise_mps2 * self.rng.gaussian();
        }
        ImuSample { quaternion: q, rate_dps, accel_mps2 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quaternion_is_unit_and_sway_is_a_few_degrees() {
        let mut imu = Imu::new(3);
        for k in 0..2000u64 {
            let s = imu.sample(k * 5_000_000);
            let n: f64 = s.quaternion.iter().map(|c| c * c).sum();
            assert!((n - 1.0).abs() < 1e-12);
            let (r, p) = roll_pitch(s.quaternion);
            assert!(r.to_degrees().abs() <= 3.0 + 1e-9 && p.to_degrees().abs() <= 3.0 + 1e-9);
            for a in s.accel_mps2 {
                assert!(a.abs() < 0.2, "gravity must be removed: {a}");
            }
        }
    }

    #[test]
    fn same_seed_same_reports() {
        let mut a = Imu::new(11);
        let mut b = Imu::new(11);
        let mut c = Imu::new(12);
        let t = 123_456_789;
        assert_eq!(a.sample(t), b.sample(t));
        assert_ne!(a.sample(t), c.sample(t));
    }

    #[test]
    fn rates_are_the_derivative_of_the_attitude() {
        let mut imu = Imu::with_config(5, ImuConfig::noiseless());
        let dt_ns = 1_000_000u64;
        for k in 1..500u64 {
            let t = k * 10_000_000;
            let before = roll_pitch(imu.sample(t - dt_ns).quaternion);
            let after = roll_pitch(imu.sample(t + dt_ns).quaternion);
            let now = imu.sample(t);
            let roll_rate = ((after.0 - before.0) / (2e-3)).to_degrees();
            let pitch_rate = ((after.1 - before.1) / (2e-3)).to_degrees();
            assert!((now.rate_dps[0] - roll_rate).abs() < 1e-3, "{} vs {roll_rate}", now.rate_dps[0]);
            // q = θ̇·cos φ; with φ of a few degrees the y rate is within 0.2% of θ̇.
            assert!((now.rate_dps[1] - pitch_rate).abs() < 0.01 * pitch_rate.abs().max(0.1));
        }
    }
}
