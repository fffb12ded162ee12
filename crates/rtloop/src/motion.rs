//! The demonstration motion of `rtloop run`: stand up, then a slow sinusoid on every joint.
//!
//! Must never allocate: [`Motion::fill`] runs on the real-time thread every cycle and
//! writes into the caller's command array.

use io::ServoCommand;
use proto::host::PositionCommand;
use std::f64::consts::TAU;

/// The stand pose of one leg, in revolutions: abduction, hip, knee.
pub const STAND_POSE: [f64; 3] = [0.0, -0.1, 0.2];

/// Stand, then sway.
#[derive(Debug, Clone)]
pub struct Motion {
    /// Seconds to move from the starting pose to the stand pose.
    pub stand_s: f64,
    /// Sinusoid amplitude, revolutions.
    pub amplitude_rev: f64,
    /// Sinusoid frequency, Hz.
    pub frequency_hz: f64,
    /// Torque limit sent with every command, N·m.
    pub maximum_torque: f64,
    /// Scale of the servo's kp sent with every command.
    pub kp_scale: f64,
    /// Scale of the servo's kd sent with every command.
    pub kd_scale: f64,
    /// Watchdog timeout sent with every command (register 0x027), s; `None` = the servo's
    /// configured default.
    pub watchdog_timeout: Option<f64>,
    start: [f64; 64],
}

impl Default for Motion {
    fn default() -> Self {
        Motion {
            stand_s: 1.0,
            amplitude_rev: 0.05,
            frequency_hz: 0.5,
            maximum_torque: 4.0,
            kp_scale: 1.0,
            kd_scale: 1.0,
            watchdog_timeout: None,
            start: [0.0; 64],
        }
    }
}

fn smoothstep(x: f64) -> (f64, f64) {
    let x = x.clamp(0.0, 1.0);
    (x * x * (3.0 - 2.0 * x), 6.0 * x * (1.0 - x))
}

impl Motion {
    /// Remember where each joint starts (NaN positions count as 0).
    pub fn set_start(&mut self, positions: impl Iterator<Item = f64>) {
        for (slot, p) in self.start.iter_mut().zip(positions) {
            *slot = if p.is_finite() { p } else { 0.0 };
        }
    }

    /// The target of joint `i` at `t` seconds: (position, velocity).
    pub fn target(&self, i: usize, t: f64) -> (f64, f64) {
        let stand = STAND_POSE[i % 3];
        if t < self.stand_s {
            let p0 = self.start.get(i).copied().unwrap_or(0.0);
            let (s, ds) = smoothstep(t / self.stand_s);
            (p0 + (stand - p0) * s, (stand - p0) * ds / self.stand_s)
        } else {
            // Neighbouring joints are phase-shifted so the legs do not move in lockstep.
            let phase = i as f64 * TAU / 12.0;
            let w = TAU * self.frequency_hz;
            let ts = t - self.stand_s;
            // Fade the sway in over one second so the velocity is continuous at the seam.
            let (fade, dfade) = smoothstep(ts);
            let s = (w * ts + phase).sin() - phase.sin();
            let ds = w * (w * ts + phase).cos();
            (stand + self.amplitude_rev * fade * s, self.amplitude_rev * (fade * ds + dfade * s))
        }
    }

    /// Write every servo's command for time `t` into `out`.
    pub fn fill(&self, t: f64, out: &mut [ServoCommand]) {
        for (i, cmd) in out.iter_mut().enumerate() {
            let (position, velocity) = self.target(i, t);
            *cmd = ServoCommand::Position(PositionCommand {
                position: Some(position),
                velocity: Some(velocity),
                kp_scale: Some(self.kp_scale),
                kd_scale: Some(self.kd_scale),
                feedforward_torque: Some(0.0),
                maximum_torque: Some(self.maximum_torque),
                watchdog_timeout: self.watchdog_timeout,
                ..Default::default()
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn motion_is_continuous_at_the_seams() {
        let mut m = Motion::default();
        m.set_start([0.3; 12].into_iter());
        for i in 0..12 {
            let (p0, _) = m.target(i, 0.0);
            assert!((p0 - 0.3).abs() < 1e-12);
            let (a, va) = m.target(i, m.stand_s - 1e-9);
            let (b, vb) = m.target(i, m.stand_s + 1e-9);
            assert!((a - b).abs() < 1e-6, "joint {i}: {a} vs {b}");
            assert!((va - vb).abs() < 1e-3, "joint {i}: {va} vs {vb}");
            // Bounded by the amplitude around the stand pose.
            for k in 0..100 {
                let (p, _) = m.target(i, m.stand_s + k as f64 * 0.1);
                assert!((p - STAND_POSE[i % 3]).abs() <= 2.0 * m.amplitude_rev + 1e-9);
            }
        }
    }
}
