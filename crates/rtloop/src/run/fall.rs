//! Whether the simulated body has fallen: its base tilted past `[safety] fall_tilt_deg` from
//! upright, or come down below `[safety] fall_height_m` after having been above it. A fall is
//! an event of the run (a problem: the run ends degraded), said once per fall: the watch
//! re-arms when the body is back upright and (with a height) back up. Pure arithmetic on the
//! body's state, allocation-free, for the cycle thread.

use rtloop_sim::BodyState;

/// What a fall was, for its event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Fall {
    /// The base tilted this far from upright, degrees.
    Tilted(f64),
    /// The base came down to this height, m.
    Low(f64),
}

impl Fall {
    /// The event's name and value (whole degrees; millimetres).
    pub(crate) fn event(self) -> (&'static str, u64) {
        match self {
            Fall::Tilted(deg) => (FALL_TILT_EVENT, deg.round().max(0.0) as u64),
            Fall::Low(m) => (FALL_LOW_EVENT, (m * 1e3).round().max(0.0) as u64),
        }
    }
}

/// The event of a body that tilted past the limit (value: the tilt, whole degrees).
pub(crate) const FALL_TILT_EVENT: &str = "fall";
/// The event of a body whose base came down below the limit (value: the height, mm).
pub(crate) const FALL_LOW_EVENT: &str = "fall_low";

/// The watch over one run's body.
#[derive(Debug, Clone)]
pub(crate) struct FallWatch {
    /// cos of the tilt limit: upright-ness below it is a fall.
    cos_limit: f64,
    /// Hysteresis: upright-ness above it (half the tilt limit) re-arms the tilt check.
    cos_rearm: f64,
    /// 0: no height check.
    height_m: f64,
    /// The base has been above `height_m` since the last fall (or the start).
    was_up: bool,
    /// Between a fall and the body being upright again.
    fallen: bool,
    falls: u32,
}

impl FallWatch {
    /// A watch with the run's limits (checked by `RunConfig::validate`).
    pub(crate) fn new(tilt_deg: f64, height_m: f64) -> Self {
        FallWatch {
            cos_limit: tilt_deg.to_radians().cos(),
            cos_rearm: (tilt_deg / 2.0).to_radians().cos(),
            height_m,
            was_up: false,
            fallen: false,
            falls: 0,
        }
    }

    /// Look at the body this cycle: `Some` when a fall begins now.
    #[inline]
    pub(crate) fn observe(&mut self, body: &BodyState) -> Option<Fall> {
        let upright = uprightness(body.quaternion);
        let height = body.height_m();
        if !upright.is_finite() || !height.is_finite() {
            // An unstable plant is its own problem (physics_unstable), not a fall.
            return None;
        }
        let low = self.height_m > 0.0 && height < self.height_m;
        if self.fallen {
            let back_up = upright > self.cos_rearm && (self.height_m <= 0.0 || height > self.height_m);
            if back_up {
                self.fallen = false;
                self.was_up = self.height_m > 0.0;
            }
            return None;
        }
        let fall = if upright < self.cos_limit {
            Some(Fall::Tilted(upright.clamp(-1.0, 1.0).acos().to_degrees()))
        } else if low && self.was_up {
            Some(Fall::Low(height))
        } else {
            None
        };
        if !low {
            self.was_up = true;
        }
        if fall.is_some() {
            self.fallen = true;
            self.falls += 1;
            self.was_up = false;
        }
        fall
    }

    /// The world was put back at its start (an agent's reset): a new episode, not yet up.
    pub(crate) fn restart(&mut self) {
        self.fallen = false;
        self.was_up = false;
    }

    /// Between a fall and the body being upright again.
    pub(crate) fn fallen(&self) -> bool {
        self.fallen
    }

    /// Falls so far.
    pub(crate) fn falls(&self) -> u32 {
        self.falls
    }
}

/// cos of the angle between the body's up axis and the world's: the z component of the body's
/// z axis turned into the world, `1 − 2(x² + y²)` for a unit quaternion `[w, x, y, z]`.
fn uprightness(q: [f64; 4]) -> f64 {
    let [w, x, y, z] = q;
    let norm = w * w + x * x + y * y + z * z;
    if norm <= 0.0 {
        return f64::NAN;
    }
    1.0 - 2.0 * (x * x + y * y) / norm
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(roll_deg: f64, height_m: f64) -> BodyState {
        let h = roll_deg.to_radians() / 2.0;
        BodyState { quaternion: [h.cos(), h.sin(), 0.0, 0.0], position_m: [0.0, 0.0, height_m], ..BodyState::default() }
    }

    #[test]
    fn tilting_past_the_limit_is_one_fall_until_upright_again() {
        let mut w = FallWatch::new(60.0, 0.0);
        assert_eq!(w.observe(&body(0.0, 0.05)), None, "lying flat on its belly is not a fall");
        assert_eq!(w.observe(&body(59.0, 0.3)), None);
        match w.observe(&body(175.0, 0.1)) {
            Some(Fall::Tilted(deg)) => assert!((deg - 175.0).abs() < 1e-6, "{deg}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(w.observe(&body(90.0, 0.1)), None, "still down: the same fall");
        assert_eq!(w.observe(&body(40.0, 0.1)), None, "not yet back within half the limit");
        assert!(w.fallen);
        assert_eq!(w.observe(&body(10.0, 0.3)), None);
        assert!(!w.fallen);
        assert!(matches!(w.observe(&body(-70.0, 0.3)), Some(Fall::Tilted(_))), "either side");
        assert_eq!(w.falls(), 2);
    }

    #[test]
    fn a_height_fall_needs_the_body_to_have_been_up() {
        let mut w = FallWatch::new(60.0, 0.15);
        assert_eq!(w.observe(&body(0.0, 0.05)), None, "starting low is not a fall");
        assert_eq!(w.observe(&body(0.0, 0.30)), None);
        assert_eq!(w.observe(&body(5.0, 0.10)), Some(Fall::Low(0.10)));
        assert_eq!(w.observe(&body(0.0, 0.05)), None);
        assert_eq!(w.observe(&body(0.0, 0.20)), None, "back up");
        assert_eq!(w.observe(&body(0.0, 0.12)), Some(Fall::Low(0.12)));
        w.restart();
        assert_eq!(w.observe(&body(0.0, 0.05)), None, "a reset starts low again");
        assert_eq!(w.falls(), 2);
    }

    #[test]
    fn a_non_finite_body_is_not_a_fall() {
        let mut w = FallWatch::new(60.0, 0.1);
        assert_eq!(w.observe(&body(f64::NAN, 0.3)), None);
        assert_eq!(w.observe(&BodyState { quaternion: [0.0; 4], ..BodyState::default() }), None);
        assert_eq!(w.falls(), 0);
    }

    #[test]
    fn the_event_carries_whole_degrees_or_millimetres() {
        assert_eq!(Fall::Tilted(172.4).event(), ("fall", 172));
        assert_eq!(Fall::Low(0.1234).event(), ("fall_low", 123));
    }
}
