//! A demonstration controller: stand up, then a slow sinusoid on every joint. `rtloop run`
//! drives it when no agent is given (the program sets it from its `[motion]` table), the
//! cycle-time model encodes its commands as the frames a run sends, and the examples build
//! their control laws on it. Its settings are its public fields; the run configuration
//! knows nothing of them.
//!
//! Every joint starts its stand-up ramp where it was measured to be: a joint whose position
//! has not been measured yet (its servo has not answered) is only queried, never moved, and
//! starts its own ramp from the position it reports once it answers.
//!
//! Must never allocate: [`Motion::fill`] runs on the real-time thread every cycle and
//! writes into the caller's command array.

use crate::controller::{Controller, Failure, Flow, ModelPose, Output, State};
use rtloop_io::ServoCommand;
use rtloop_proto::host::PositionCommand;
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
    /// Where each joint was first measured (NaN: not yet), and when (s).
    start: [f64; MAX_JOINTS],
    start_t: [f64; MAX_JOINTS],
    /// Where each joint stands (NaN: where it was measured).
    stand: [f64; MAX_JOINTS],
}

/// Joints a motion drives.
pub const MAX_JOINTS: usize = 64;

impl Default for Motion {
    fn default() -> Self {
        Motion {
            stand_s: 1.0,
            // Small enough that the quadruped with a body (`--physics`) sways without falling.
            amplitude_rev: 0.02,
            frequency_hz: 0.5,
            maximum_torque: crate::config::DEFAULT_MAXIMUM_TORQUE_NM,
            kp_scale: 1.0,
            kd_scale: 1.0,
            watchdog_timeout: None,
            start: [f64::NAN; MAX_JOINTS],
            start_t: [0.0; MAX_JOINTS],
            stand: core::array::from_fn(|i| STAND_POSE[i % 3]),
        }
    }
}

fn smoothstep(x: f64) -> (f64, f64) {
    let x = x.clamp(0.0, 1.0);
    (x * x * (3.0 - 2.0 * x), 6.0 * x * (1.0 - x))
}

impl Motion {
    /// The motion at its defaults, with the gains, torque limit and watchdog every command of
    /// a run carries: its configuration's `[gains]`.
    pub fn from_config(config: &crate::config::RunConfig) -> Self {
        Motion {
            maximum_torque: config.gains.maximum_torque,
            kp_scale: config.gains.kp_scale,
            kd_scale: config.gains.kd_scale,
            watchdog_timeout: Some(config.gains.watchdog_timeout_s),
            ..Motion::default()
        }
    }

    /// Where each joint starts, measured before the first command (time 0). A NaN position
    /// is "not measured": that joint is not moved until [`Motion::learn_start`] knows it.
    pub fn set_start(&mut self, positions: impl Iterator<Item = f64>) {
        for (i, p) in positions.enumerate().take(MAX_JOINTS) {
            self.start[i] = if p.is_finite() { p } else { f64::NAN };
            self.start_t[i] = 0.0;
        }
    }

    /// Joint `i` was measured at `position` at time `t`: if its start was not known yet, its
    /// stand-up ramp starts there and then. Cheap and allocation-free: call it every cycle.
    pub fn learn_start(&mut self, i: usize, position: f64, t: f64) {
        if let Some(start) = self.start.get_mut(i) {
            if start.is_nan() && position.is_finite() {
                *start = position;
                self.start_t[i] = t;
            }
        }
    }

    /// Stand joint `i` at `stand[i]` (servo units) instead of the built-in quadruped's
    /// [`STAND_POSE`]; NaN: where the joint was first measured (it only sways).
    pub fn set_stand(&mut self, stand: &[f64]) {
        for (s, &p) in self.stand.iter_mut().zip(stand) {
            *s = p;
        }
    }

    /// Whether joint `i`'s start is known (it may be moved).
    pub fn started(&self, i: usize) -> bool {
        self.start.get(i).is_some_and(|p| !p.is_nan())
    }

    /// The target of joint `i` at `t` seconds: (position, velocity); `None` while its start
    /// is unknown.
    pub fn target(&self, i: usize, t: f64) -> Option<(f64, f64)> {
        let p0 = *self.start.get(i)?;
        if p0.is_nan() {
            return None;
        }
        let stand = if self.stand[i].is_nan() { p0 } else { self.stand[i] };
        let t = t - self.start_t[i];
        if t < self.stand_s {
            let (s, ds) = smoothstep(t / self.stand_s);
            Some((p0 + (stand - p0) * s, (stand - p0) * ds / self.stand_s))
        } else {
            // Neighbouring joints are phase-shifted so the legs do not move in lockstep.
            let phase = i as f64 * TAU / 12.0;
            let w = TAU * self.frequency_hz;
            let ts = t - self.stand_s;
            // Fade the sway in over one second so the velocity is continuous at the seam.
            let (fade, dfade) = smoothstep(ts);
            let s = (w * ts + phase).sin() - phase.sin();
            let ds = w * (w * ts + phase).cos();
            Some((stand + self.amplitude_rev * fade * s, self.amplitude_rev * (fade * ds + dfade * s)))
        }
    }

    /// Write every servo's command for time `t` into `out` (a query for a joint whose start
    /// is not known: it is not moved).
    pub fn fill(&self, t: f64, out: &mut [ServoCommand]) {
        for (i, cmd) in out.iter_mut().enumerate() {
            let Some((position, velocity)) = self.target(i, t) else {
                *cmd = ServoCommand::Query;
                continue;
            };
            *cmd = ServoCommand::Position(PositionCommand {
                position: Some(position),
                velocity: Some(velocity),
                // At their defaults these registers are left out: a moteus resets every
                // position register a frame does not write, so the frame means the same and
                // is shorter on the wires and over a pi3hat's SPI.
                kp_scale: (self.kp_scale != 1.0).then_some(self.kp_scale),
                kd_scale: (self.kd_scale != 1.0).then_some(self.kd_scale),
                maximum_torque: Some(self.maximum_torque),
                watchdog_timeout: self.watchdog_timeout,
                ..Default::default()
            });
        }
    }
}

impl Controller for Motion {
    type Telemetry = ();

    fn start(&mut self, state: &State<'_>) -> Result<(), Failure> {
        match state.model_pose {
            ModelPose::NotGiven => {}
            ModelPose::Stand(stand) => self.set_stand(stand),
            ModelPose::Missing => {
                return Err(Failure::new(
                    "no_stand_pose",
                    "the demonstration motion stands the built-in quadruped, and this model names no pose to stand in",
                    "name one of its keyframes as stand_pose under [physics] (or give it a `home` keyframe), or drive \
                     it with a controller of your own (--agent)",
                ));
            }
        }
        self.set_start(state.servos.iter().map(|s| if s.age_cycles.is_some() { s.state.position } else { f64::NAN }));
        Ok(())
    }

    fn cycle(&mut self, state: &State<'_>, out: &mut Output<'_, ()>) -> Result<Flow, Failure> {
        // A joint not measured before the start is not moved until it answers.
        for (i, s) in state.servos.iter().enumerate() {
            if s.age_cycles.is_some() {
                self.learn_start(i, s.state.position, state.time_s);
            }
        }
        self.fill(state.time_s, out.commands());
        Ok(Flow::Continue)
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
            let (p0, _) = m.target(i, 0.0).unwrap();
            assert!((p0 - 0.3).abs() < 1e-12);
            let (a, va) = m.target(i, m.stand_s - 1e-9).unwrap();
            let (b, vb) = m.target(i, m.stand_s + 1e-9).unwrap();
            assert!((a - b).abs() < 1e-6, "joint {i}: {a} vs {b}");
            assert!((va - vb).abs() < 1e-3, "joint {i}: {va} vs {vb}");
            // Bounded by the amplitude around the stand pose.
            for k in 0..100 {
                let (p, _) = m.target(i, m.stand_s + k as f64 * 0.1).unwrap();
                assert!((p - STAND_POSE[i % 3]).abs() <= 2.0 * m.amplitude_rev + 1e-9);
            }
        }
    }

    #[test]
    fn a_joint_not_measured_is_only_queried_until_it_is_then_ramps_from_there() {
        let mut m = Motion::default();
        m.set_start([0.5, f64::NAN].into_iter());
        let mut out = [ServoCommand::Stop; 2];
        m.fill(0.0, &mut out);
        assert!(matches!(out[0], ServoCommand::Position(p) if p.position == Some(0.5)));
        assert_eq!(out[1], ServoCommand::Query, "never commanded to a made-up position");
        m.learn_start(1, 0.4, 0.25);
        m.learn_start(1, 9.0, 0.30); // only the first measurement counts
        m.fill(0.25, &mut out);
        assert!(matches!(out[1], ServoCommand::Position(p) if p.position == Some(0.4) && p.velocity == Some(0.0)));
        // Its ramp takes the full stand time from when it was learned.
        let (p, _) = m.target(1, 0.25 + m.stand_s).unwrap();
        assert!((p - STAND_POSE[1]).abs() < 1e-9);
    }
}
