//! Simulated servos coupled to one plant: a robot with a body.
//!
//! What it is for: stepping every coupled servo and the [`Plant`] under them together, in
//! fixed steps of the plant's time step — each step every servo's controller turns its joint's
//! state into a torque ([`Servo::drive`]), the plant advances under all the torques at once,
//! and every servo is handed its joint's new state ([`Servo::set_joint_state`]) — and giving
//! the IMU the body's state. The servos live on their buses; the world reaches each linked one
//! by bus index and id through [`Servos`], which the buses' owner implements (a `Vec` of
//! [`SimBus`]es does).
//! What it must never do: allocate or panic after construction, read a clock (time comes in
//! as `now_ns`), or hand a servo a state the plant could not compute: after a
//! [`PlantError`] the plant is not stepped again, the servos keep their last finite joint
//! state, and the error is kept for the caller ([`World::fault`]).

use crate::bus::SimBus;
use crate::imu::ImuSample;
use crate::plant::{BodyState, Plant, PlantError, PlantParams};
use crate::servo::{Servo, ServoSetup};

/// The robot's simulated servos, as a [`World`] reaches them: by bus index (the position of
/// the bus in the robot's bus list, from 0) and CAN id.
pub trait Servos {
    /// The servo with CAN id `id` on bus index `bus`, if the robot has one there.
    fn servo_mut(&mut self, bus: usize, id: u8) -> Option<&mut Servo>;
}

/// Buses indexed by their position: bus index `i` is `self[i]`.
impl Servos for Vec<SimBus> {
    fn servo_mut(&mut self, bus: usize, id: u8) -> Option<&mut Servo> {
        self.get_mut(bus)?.servo_mut(id)
    }
}

/// A servo's joint: the servo on bus index `bus` with CAN id `id` turns plant joint `joint`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JointLink {
    /// Bus index (position in the robot's bus list, from 0).
    pub bus: usize,
    /// Servo CAN id.
    pub id: u8,
    /// Plant joint index.
    pub joint: usize,
}

/// Why servos and a plant cannot be coupled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorldError {
    /// A link names a joint the plant does not have.
    NoSuchJoint {
        /// The link.
        link: JointLink,
        /// Joints the plant has.
        joints: usize,
    },
    /// Two servos drive one joint.
    SharedJoint {
        /// The joint.
        joint: usize,
        /// The first servo.
        first: (usize, u8),
        /// The second.
        second: (usize, u8),
    },
    /// One servo is linked twice.
    ServoTwice {
        /// Bus index and id.
        servo: (usize, u8),
    },
    /// A linked servo is not on the robot.
    MissingServo {
        /// Bus index and id.
        servo: (usize, u8),
    },
}

impl core::fmt::Display for WorldError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            WorldError::NoSuchJoint { link, joints } => write!(
                f,
                "servo {} on bus {} is mapped to joint {}, but the model has {joints} joints: map it to one of 0 to {}",
                link.id,
                link.bus + 1,
                link.joint,
                joints.saturating_sub(1)
            ),
            WorldError::SharedJoint { joint, first, second } => write!(
                f,
                "servos {} (bus {}) and {} (bus {}) are both mapped to joint {joint}: give each servo its own joint",
                first.1,
                first.0 + 1,
                second.1,
                second.0 + 1
            ),
            WorldError::ServoTwice { servo } => {
                write!(f, "servo {} on bus {} is mapped twice: map each servo once", servo.1, servo.0 + 1)
            }
            WorldError::MissingServo { servo } => write!(
                f,
                "servo {} on bus {} is mapped to a joint but is not on the robot: add it to the bus or drop it from \
                 the map",
                servo.1,
                servo.0 + 1
            ),
        }
    }
}

impl core::error::Error for WorldError {}

/// Hand every linked servo its joint's state as the plant has it, in the servo's units
/// (`units[k]`: plant units per servo unit of link `k`).
fn hand_joint_states(links: &[JointLink], units: &[f64], plant: &dyn Plant, servos: &mut dyn Servos) {
    for (l, &u) in links.iter().zip(units) {
        if let Some(servo) = servos.servo_mut(l.bus, l.id) {
            let (pos, vel) = plant.joint_state(l.joint);
            servo.set_joint_state(pos / u, vel / u);
        }
    }
}

/// Longest stretch of time one [`World::advance_to`] integrates (1 s): after a longer gap
/// (a stalled host in a real-time run) the world skips the rest rather than spend seconds
/// catching up; the servos' watchdogs have long fired by then.
pub const MAX_CATCH_UP_NS: u64 = 1_000_000_000;

/// Servos coupled to a plant. See the module docs.
pub struct World {
    plant: Box<dyn Plant>,
    links: Vec<JointLink>,
    /// Per link: plant units (rad, m) per servo unit (rev, m), from the joint's kind.
    units: Vec<f64>,
    torque: Vec<f64>,
    step_ns: u64,
    time_ns: Option<u64>,
    fault: Option<PlantError>,
    /// The push acting when the plant failed, N (zero: none).
    fault_push: [f64; 3],
    steps: u64,
    /// Pushes scheduled or under way (fixed capacity: no allocation while stepping).
    pushes: [Option<Push>; MAX_PUSHES],
    /// The force last handed to the plant, N.
    pushing: [f64; 3],
    /// Per link, the setup [`World::couple`] gives its servo (none: the servo keeps its own).
    setups: Vec<Option<ServoSetup>>,
    /// The last episode scaled some servo's gains (the next reset puts them back).
    gains_scaled: bool,
    /// Pushes every reset schedules again, `from_ns` counted from the reset
    /// ([`World::repeat_after_reset`]).
    repeated: [Option<Push>; MAX_PUSHES],
}

/// Pushes a world holds at once (scheduled or under way).
pub const MAX_PUSHES: usize = 16;

/// A push on the body: `force_n` (world frame) from `from_ns` for `duration_ns`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Push {
    /// Force, N, in the world frame (+x forward, +y left, +z up).
    pub force_n: [f64; 3],
    /// When it starts, ns on the world's timeline.
    pub from_ns: u64,
    /// How long it lasts, ns.
    pub duration_ns: u64,
}

/// Pushes an [`Episode`] schedules at most.
pub const EPISODE_PUSHES: usize = 4;

/// Servos an [`Episode`] describes at most.
pub const EPISODE_SERVOS: usize = 32;

/// One servo of an [`Episode`]: the servo on bus index `bus` with CAN id `id`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpisodeServo {
    /// Bus index.
    pub bus: usize,
    /// CAN id.
    pub id: u8,
    /// Scale of its position gain kp (of its stored configuration's, [`World::with_setups`]).
    pub kp_scale: f64,
    /// Scale of its velocity gain kd.
    pub kd_scale: f64,
    /// Added to its joint's angle once the plant has settled, rad.
    pub offset_rad: f64,
    /// Its joint's velocity once the plant has settled, rad/s.
    pub velocity_rad_s: f64,
}

impl EpisodeServo {
    /// Nothing changed for the servo on bus index `bus` with id `id`.
    pub const fn nominal(bus: usize, id: u8) -> Self {
        EpisodeServo { bus, id, kp_scale: 1.0, kd_scale: 1.0, offset_rad: 0.0, velocity_rad_s: 0.0 }
    }
}

/// What a reset gives the world beside its seed (domain randomisation): the plant's physical
/// parameters, per servo its gains and its joint's start, and pushes timed from the reset.
/// Fixed size: no allocation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Episode {
    /// The plant's parameters.
    pub plant: PlantParams,
    /// Per servo (the first `servo_count`); a linked servo left out keeps its nominal gains
    /// and its settled joint.
    pub servos: [EpisodeServo; EPISODE_SERVOS],
    /// Servos in `servos`.
    pub servo_count: usize,
    /// Pushes, `from_ns` counted from the reset.
    pub pushes: [Option<Push>; EPISODE_PUSHES],
}

impl Episode {
    /// The nominal world: the model's own parameters, the servos' nominal gains, the
    /// settled start, no push.
    pub const NOMINAL: Episode = Episode {
        plant: PlantParams::NOMINAL,
        servos: [EpisodeServo::nominal(0, 0); EPISODE_SERVOS],
        servo_count: 0,
        pushes: [None; EPISODE_PUSHES],
    };
}

impl Default for Episode {
    fn default() -> Self {
        Self::NOMINAL
    }
}

impl World {
    /// Couple the servos `links` names to `plant`. Checks the links against the plant; the
    /// servos themselves are checked by [`World::couple`].
    pub fn new(plant: Box<dyn Plant>, links: Vec<JointLink>) -> Result<Self, WorldError> {
        let joints = plant.joint_count();
        for (i, link) in links.iter().enumerate() {
            if link.joint >= joints {
                return Err(WorldError::NoSuchJoint { link: *link, joints });
            }
            for other in &links[..i] {
                if (other.bus, other.id) == (link.bus, link.id) {
                    return Err(WorldError::ServoTwice { servo: (link.bus, link.id) });
                }
                if other.joint == link.joint {
                    return Err(WorldError::SharedJoint {
                        joint: link.joint,
                        first: (other.bus, other.id),
                        second: (link.bus, link.id),
                    });
                }
            }
        }
        let step_ns = plant.timestep_ns().max(1);
        let units = links.iter().map(|l| plant.joint_kind(l.joint).plant_units_per_servo_unit()).collect();
        Ok(World {
            plant,
            torque: vec![0.0; joints],
            setups: vec![None; links.len()],
            units,
            links,
            step_ns,
            time_ns: None,
            fault: None,
            fault_push: [0.0; 3],
            steps: 0,
            pushes: [None; MAX_PUSHES],
            pushing: [0.0; 3],
            gains_scaled: false,
            repeated: [None; MAX_PUSHES],
        })
    }

    /// Give the servo of each link the setup at its index ([`ServoSetup`]: gains, torque limit,
    /// gear ratio, output sign) in its stored configuration when [`World::couple`] couples it:
    /// the plant's joints need stiffer servos than the default's free joints. Entries beyond
    /// the links are ignored; a link without one keeps its servo's own configuration.
    pub fn with_setups(mut self, setups: &[ServoSetup]) -> Self {
        for (slot, s) in self.setups.iter_mut().zip(setups) {
            *slot = Some(*s);
        }
        self
    }

    /// The plant's time step, ns.
    pub fn step_ns(&self) -> u64 {
        self.step_ns
    }

    /// Plant steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The plant.
    pub fn plant(&self) -> &dyn Plant {
        &*self.plant
    }

    /// Why the plant stopped, if it did.
    pub fn fault(&self) -> Option<PlantError> {
        self.fault
    }

    /// The sum of the pushes acting on the body when the plant stopped, N (world frame);
    /// `None` when it has not stopped or no push was acting.
    pub fn fault_push(&self) -> Option<[f64; 3]> {
        self.fault.filter(|_| self.fault_push != [0.0; 3]).map(|_| self.fault_push)
    }

    /// The plant's generalised positions now ([`Plant::qpos`]).
    pub fn qpos(&self) -> &[f64] {
        self.plant.qpos()
    }

    /// Couple every linked servo of `servos` and hand it its joint's state. Fails, coupling
    /// none, when a linked servo is not there.
    pub fn couple(&mut self, servos: &mut dyn Servos) -> Result<(), WorldError> {
        if let Some(l) = self.links.iter().find(|l| servos.servo_mut(l.bus, l.id).is_none()) {
            return Err(WorldError::MissingServo { servo: (l.bus, l.id) });
        }
        for (l, setup) in self.links.iter().zip(&self.setups) {
            if let Some(servo) = servos.servo_mut(l.bus, l.id) {
                servo.set_coupled(true);
                if let Some(setup) = setup {
                    servo.set_stored_setup(setup);
                }
            }
        }
        hand_joint_states(&self.links, &self.units, &*self.plant, servos);
        Ok(())
    }

    /// Schedule a push on the body (see [`Push`]); pushes that overlap add up. False, and
    /// nothing scheduled, when [`MAX_PUSHES`] are already scheduled or under way.
    pub fn push(&mut self, push: Push) -> bool {
        match self.pushes.iter_mut().find(|p| p.is_none()) {
            Some(slot) => {
                *slot = Some(push);
                true
            }
            None => false,
        }
    }

    /// Schedule `push` again after every reset, `from_ns` counted from the reset (a run's
    /// pushes, so that every episode of a simulated robot gets them). False when the world
    /// holds as many as it can ([`MAX_PUSHES`]).
    pub fn repeat_after_reset(&mut self, push: Push) -> bool {
        match self.repeated.iter_mut().find(|p| p.is_none()) {
            Some(slot) => {
                *slot = Some(push);
                true
            }
            None => false,
        }
    }

    /// Step the linked servos of `servos` and the plant to `now_ns` (see the module docs).
    /// The first call sets the time origin.
    pub fn advance_to(&mut self, now_ns: u64, servos: &mut dyn Servos) {
        let Some(mut t) = self.time_ns else {
            self.time_ns = Some(now_ns);
            return;
        };
        if now_ns <= t {
            return;
        }
        if now_ns - t > MAX_CATCH_UP_NS {
            t = now_ns - MAX_CATCH_UP_NS;
        }
        let dt = self.step_ns as f64 * 1e-9;
        while now_ns - t >= self.step_ns {
            t += self.step_ns;
            if self.fault.is_some() {
                continue;
            }
            self.apply_push(t);
            self.torque.fill(0.0);
            for l in &self.links {
                if let Some(servo) = servos.servo_mut(l.bus, l.id) {
                    // The servo's torque is at its output: N·m for a hinge, N for a slide.
                    self.torque[l.joint] = servo.drive(t, dt);
                }
            }
            if let Err(e) = self.plant.step(&self.torque) {
                self.fault = Some(e);
                self.fault_push = self.pushing;
                continue;
            }
            self.steps += 1;
            hand_joint_states(&self.links, &self.units, &*self.plant, servos);
        }
        self.time_ns = Some(t);
    }

    /// The sum of the pushes under way at `t`, handed to the plant when it changes; finished
    /// ones are dropped.
    fn apply_push(&mut self, t: u64) {
        let mut force = [0.0; 3];
        for slot in &mut self.pushes {
            let Some(p) = *slot else { continue };
            if t >= p.from_ns.saturating_add(p.duration_ns) {
                *slot = None;
            } else if t >= p.from_ns {
                for (f, q) in force.iter_mut().zip(p.force_n) {
                    *f += q;
                }
            }
        }
        if force != self.pushing {
            self.pushing = force;
            self.plant.set_push(force);
        }
    }

    /// The body's state, when the plant has a body.
    pub fn body(&self) -> Option<BodyState> {
        self.plant.body()
    }

    /// What the IMU reads: the body's state in the pi3hat's frame; `None` without a body.
    pub fn imu(&self) -> Option<ImuSample> {
        self.plant.body().map(|b| b.to_imu())
    }

    /// Back to the plant's initial state (perturbed as `seed` says), handing every coupled
    /// servo its joint's state: [`World::reset_with`] the nominal [`Episode`].
    pub fn reset(&mut self, seed: u64, servos: &mut dyn Servos) -> bool {
        self.reset_with(seed, &Episode::NOMINAL, servos)
    }

    /// Back to the plant's initial state (perturbed as `seed` says) with `episode`'s physical
    /// parameters ([`Plant::set_params`], taken before the plant settles), each listed
    /// servo's gains scaled from its stored ones and its joint moved and set moving after
    /// the settle ([`Plant::nudge_joint`]), the pushes under way dropped and the repeated
    /// ones ([`World::repeat_after_reset`]) and the episode's scheduled from the world's
    /// time now (as many as [`MAX_PUSHES`] allows); every coupled servo is handed its
    /// joint's state. False when the plant cannot reset. No allocation.
    pub fn reset_with(&mut self, seed: u64, episode: &Episode, servos: &mut dyn Servos) -> bool {
        // A plant without parameters of its own runs the nominal world whatever is asked.
        self.plant.set_params(&episode.plant);
        if !self.plant.reset(seed) {
            return false;
        }
        self.fault = None;
        self.fault_push = [0.0; 3];
        self.pushes = [None; MAX_PUSHES];
        self.pushing = [0.0; 3];
        // After an episode that scaled them, every coupled servo back to its stored gains;
        // then this episode's scales.
        if self.gains_scaled {
            for l in &self.links {
                if let Some(servo) = servos.servo_mut(l.bus, l.id) {
                    let stored = *servo.factory_config();
                    servo.set_gains(stored.kp_nm_per_rev, stored.kd_nms_per_rev);
                }
            }
        }
        self.gains_scaled = false;
        for e in &episode.servos[..episode.servo_count.min(EPISODE_SERVOS)] {
            let Some(link) = self.links.iter().find(|l| l.bus == e.bus && l.id == e.id) else { continue };
            if e.offset_rad != 0.0 || e.velocity_rad_s != 0.0 {
                self.plant.nudge_joint(link.joint, e.offset_rad, e.velocity_rad_s);
            }
            if e.kp_scale == 1.0 && e.kd_scale == 1.0 {
                continue;
            }
            if let Some(servo) = servos.servo_mut(e.bus, e.id) {
                let stored = *servo.factory_config();
                servo.set_gains(stored.kp_nm_per_rev * e.kp_scale, stored.kd_nms_per_rev * e.kd_scale);
                self.gains_scaled = true;
            }
        }
        let now = self.time_ns.unwrap_or(0);
        // The repeated pushes first, then the episode's, as long as there are slots.
        let repeated = self.repeated;
        for p in repeated.iter().flatten().chain(episode.pushes.iter().flatten()) {
            self.push(Push { from_ns: now.saturating_add(p.from_ns), ..*p });
        }
        hand_joint_states(&self.links, &self.units, &*self.plant, servos);
        true
    }

    /// The world's time, ns on its timeline (the last time it was stepped to); `None` before
    /// the first [`World::advance_to`].
    pub fn time_ns(&self) -> Option<u64> {
        self.time_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plant::{IndependentJoints, JointParams};
    use crate::servo::ServoConfig;

    fn params(cfg: &ServoConfig) -> JointParams {
        JointParams {
            inertia_kgm2: cfg.inertia_kgm2,
            damping_nms_per_rad: cfg.damping_nms_per_rad,
            load_torque_nm: cfg.load_torque_nm,
            friction_nm: cfg.friction_nm,
        }
    }

    /// Servos all on bus index 0.
    struct OneBus(Vec<Servo>);

    impl Servos for OneBus {
        fn servo_mut(&mut self, bus: usize, id: u8) -> Option<&mut Servo> {
            self.0.iter_mut().find(|s| bus == 0 && s.id() == id)
        }
    }

    #[test]
    fn links_are_checked_with_one_sentence_each() {
        let plant = || -> Box<dyn Plant> {
            Box::new(IndependentJoints::new(vec![params(&ServoConfig::new(1)); 2], &[], 100_000))
        };
        let e = World::new(plant(), vec![JointLink { bus: 0, id: 1, joint: 2 }]).err().unwrap();
        assert_eq!(e, WorldError::NoSuchJoint { link: JointLink { bus: 0, id: 1, joint: 2 }, joints: 2 });
        assert!(e.to_string().contains("map it to one of 0 to 1"), "{e}");
        let e = World::new(plant(), vec![JointLink { bus: 0, id: 1, joint: 0 }, JointLink { bus: 1, id: 2, joint: 0 }]);
        assert!(matches!(e, Err(WorldError::SharedJoint { joint: 0, .. })));
        let e = World::new(plant(), vec![JointLink { bus: 0, id: 1, joint: 0 }, JointLink { bus: 0, id: 1, joint: 1 }]);
        assert!(matches!(e, Err(WorldError::ServoTwice { servo: (0, 1) })));
        let mut w = World::new(plant(), vec![JointLink { bus: 0, id: 9, joint: 0 }]).unwrap();
        let mut servos = OneBus(vec![Servo::new(ServoConfig::new(1))]);
        assert_eq!(w.couple(&mut servos), Err(WorldError::MissingServo { servo: (0, 9) }));
    }

    /// A plant that records the push it is handed each step.
    struct Recorder {
        pushes: std::sync::Arc<std::sync::Mutex<Vec<[f64; 3]>>>,
        current: [f64; 3],
    }

    impl Plant for Recorder {
        fn joint_count(&self) -> usize {
            0
        }
        fn timestep_ns(&self) -> u64 {
            1_000_000
        }
        fn step(&mut self, _torque_nm: &[f64]) -> Result<(), PlantError> {
            self.pushes.lock().unwrap().push(self.current);
            Ok(())
        }
        fn joint_state(&self, _j: usize) -> (f64, f64) {
            (0.0, 0.0)
        }
        fn set_push(&mut self, force_n: [f64; 3]) {
            self.current = force_n;
        }
    }

    #[test]
    fn pushes_add_up_while_they_overlap_and_end_on_time() {
        let recorded = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorder = Recorder { pushes: recorded.clone(), current: [0.0; 3] };
        let mut w = World::new(Box::new(recorder), Vec::new()).unwrap();
        let ms = 1_000_000;
        assert!(w.push(Push { force_n: [10.0, 0.0, 0.0], from_ns: 2 * ms, duration_ns: 3 * ms }));
        assert!(w.push(Push { force_n: [0.0, 5.0, 0.0], from_ns: 4 * ms, duration_ns: 2 * ms }));
        let mut none = OneBus(Vec::new());
        w.advance_to(0, &mut none);
        w.advance_to(8 * ms, &mut none);
        // Steps end at 1..=8 ms; a push acts in the steps that end within [from, from + duration).
        assert_eq!(
            *recorded.lock().unwrap(),
            [
                [0.0; 3],
                [10.0, 0.0, 0.0],
                [10.0, 0.0, 0.0],
                [10.0, 5.0, 0.0],
                [0.0, 5.0, 0.0],
                [0.0; 3],
                [0.0; 3],
                [0.0; 3]
            ]
        );
        for k in 0..MAX_PUSHES {
            assert!(w.push(Push { force_n: [1.0; 3], from_ns: 100 * ms, duration_ns: ms }), "{k}");
        }
        assert!(!w.push(Push { force_n: [1.0; 3], from_ns: 100 * ms, duration_ns: ms }), "full");
    }

    /// A servo coupled to the default plant moves exactly as the same servo on its own: the
    /// world is only a different owner of the same equation.
    #[test]
    fn the_default_plant_through_the_world_matches_a_free_servo() {
        use rtloop_proto::frame::CanFdFrame;
        let cfg = ServoConfig { initial_position_rev: 0.05, ..ServoConfig::new(1) };
        let mut free = Servo::new(cfg);
        let mut coupled = OneBus(vec![Servo::new(cfg)]);
        let plant = IndependentJoints::new(vec![params(&cfg)], &[0.05], cfg.step_ns);
        let mut world = World::new(Box::new(plant), vec![JointLink { bus: 0, id: 1, joint: 0 }]).unwrap();
        world.couple(&mut coupled).unwrap();
        // Position mode, target 0.2 rev, through a real command frame at t = 0.
        let mut buf = [0u8; rtloop_proto::frame::MAX_DATA];
        let mut w = rtloop_proto::writer::FrameWriter::new(&mut buf);
        let cmd = rtloop_proto::host::PositionCommand { position: Some(0.2), ..Default::default() };
        rtloop_proto::host::encode_position(&mut w, &cmd, &Default::default(), None).unwrap();
        let frame: CanFdFrame = w.to_frame(0x8001).unwrap();
        let mut reply = CanFdFrame::default();
        world.advance_to(0, &mut coupled);
        free.advance_to(0);
        free.handle_frame(&frame, 0, &mut reply);
        coupled.0[0].handle_frame(&frame, 0, &mut reply);
        for k in 1..=50u64 {
            let t = k * 1_000_000;
            free.advance_to(t);
            world.advance_to(t, &mut coupled);
            coupled.0[0].advance_to(t);
        }
        let (a, b) = (free.position(), coupled.0[0].position());
        assert!((a - b).abs() < 1e-9, "free {a} coupled {b}");
        assert!(a > 0.08, "the joint moved toward its target from 0.05: {a}");
        assert_eq!(world.steps(), 500);
    }

    /// A plant that logs what a reset asks of it.
    struct Episodic {
        log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
        pos: [f64; 2],
        push: [f64; 3],
    }

    impl Plant for Episodic {
        fn joint_count(&self) -> usize {
            2
        }
        fn timestep_ns(&self) -> u64 {
            1_000_000
        }
        fn step(&mut self, _torque_nm: &[f64]) -> Result<(), PlantError> {
            self.log.lock().unwrap().push(format!("step {:?}", self.push));
            Ok(())
        }
        fn joint_state(&self, j: usize) -> (f64, f64) {
            (self.pos[j], 0.0)
        }
        fn set_push(&mut self, force_n: [f64; 3]) {
            self.push = force_n;
        }
        fn reset(&mut self, seed: u64) -> bool {
            self.pos = [0.0; 2];
            self.log.lock().unwrap().push(format!("reset {seed}"));
            true
        }
        fn set_params(&mut self, p: &PlantParams) -> bool {
            self.log.lock().unwrap().push(format!("params {} {} {}", p.friction_scale, p.mass_scale, p.payload_kg));
            true
        }
        fn nudge_joint(&mut self, j: usize, offset_rad: f64, velocity_rad_s: f64) {
            self.pos[j] += offset_rad;
            self.log.lock().unwrap().push(format!("nudge {j} {offset_rad} {velocity_rad_s}"));
        }
    }

    #[test]
    fn an_episode_sets_the_plant_the_gains_the_start_and_pushes_timed_from_the_reset() {
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let plant = Episodic { log: log.clone(), pos: [0.0; 2], push: [0.0; 3] };
        let links = vec![JointLink { bus: 0, id: 1, joint: 0 }, JointLink { bus: 0, id: 2, joint: 1 }];
        let setup = ServoSetup { kp_nm_per_rev: 300.0, kd_nms_per_rev: 5.0, ..ServoSetup::PHYSICAL };
        let mut w = World::new(Box::new(plant), links).unwrap().with_setups(&[setup, setup]);
        let mut servos = OneBus(vec![Servo::new(ServoConfig::new(1)), Servo::new(ServoConfig::new(2))]);
        w.couple(&mut servos).unwrap();
        let ms = 1_000_000;
        w.advance_to(0, &mut servos);
        w.advance_to(10 * ms, &mut servos);
        let mut episode = Episode::NOMINAL;
        episode.plant = PlantParams { friction_scale: 0.5, mass_scale: 1.1, payload_kg: 2.0 };
        episode.servos[0] =
            EpisodeServo { kp_scale: 0.5, kd_scale: 2.0, offset_rad: 0.25, ..EpisodeServo::nominal(0, 2) };
        episode.servo_count = 1;
        episode.pushes[0] = Some(Push { force_n: [7.0, 0.0, 0.0], from_ns: 2 * ms, duration_ns: ms });
        log.lock().unwrap().clear();
        assert!(w.reset_with(9, &episode, &mut servos));
        assert_eq!(*log.lock().unwrap(), ["params 0.5 1.1 2", "reset 9", "nudge 1 0.25 0"]);
        let gains = |s: &Servo| (s.config().kp_nm_per_rev, s.config().kd_nms_per_rev);
        assert_eq!((gains(&servos.0[0]), gains(&servos.0[1])), ((300.0, 5.0), (150.0, 10.0)));
        // The servo was handed its nudged joint.
        assert!((servos.0[1].position() - 0.25 / core::f64::consts::TAU).abs() < 1e-12, "{}", servos.0[1].position());
        // The push (2 ms after the reset at 10 ms, for 1 ms) acts in exactly one 1 ms step, as
        // a push scheduled from the start would.
        log.lock().unwrap().clear();
        w.advance_to(15 * ms, &mut servos);
        let steps: Vec<String> = log.lock().unwrap().clone();
        assert_eq!(
            steps,
            [
                "step [0.0, 0.0, 0.0]",
                "step [7.0, 0.0, 0.0]",
                "step [0.0, 0.0, 0.0]",
                "step [0.0, 0.0, 0.0]",
                "step [0.0, 0.0, 0.0]"
            ]
        );
        // A nominal reset puts the gains and the plant back.
        log.lock().unwrap().clear();
        assert!(w.reset(3, &mut servos));
        assert_eq!(log.lock().unwrap()[0], "params 1 1 0");
        assert_eq!(gains(&servos.0[1]), (300.0, 5.0));
    }
}
