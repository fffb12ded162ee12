//! The simulated robot: every simulated bus of a robot (in process, or behind a simulated
//! pi3hat's connectors), its IMU and, with physics, the world that couples its servos to a
//! body — one component, reached by the cycle only through rtloop-io's interfaces (the
//! transports and SPI carrier of [`crate::open`], the IMU of [`SimRobot::imu_source`]) and
//! driven by whoever owns the run's time through [`SimRobot::advance_to`].
//!
//! **Time.** A real robot's physics runs by itself; a simulated one runs when its owner says
//! how far: [`SimRobot::advance_to`] steps the world (servos and body together, in the plant's
//! fixed steps) to an instant. The run's loop calls it with each cycle's start before the
//! cycle, and with the next period's start right after it (so the physics is computed in the
//! slack, not on the next cycle's critical path: the same steps either way). The buses need no
//! call: a frame is delivered when the cycle's reads reach its time.
//!
//! **Sharing.** The transports, the SPI carriers and the IMU source are handles on one
//! simulated robot behind one mutex. Only the thread that runs the cycles takes it (and the
//! setup and the summary, before and after): it is never contended, never held across a
//! wait, and taking it allocates nothing.
//!
//! Must never: allocate in [`SimRobot::advance_to`] or in the devices' per-frame calls; read
//! a clock (time comes in as nanoseconds); hand a servo a state the plant could not compute.

use rtloop_io::transport::ImuSample;
use rtloop_io::{ImuSource, TransportError};
use rtloop_sim::pi3hat::SimPi3hat;
use rtloop_sim::{BodyState, Imu, PlantError, Push, Servo, Servos, SimBus, World, WorldError};
use std::sync::{Arc, Mutex, MutexGuard};

/// Where one bus of the robot is simulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Location {
    /// An in-process bus (`sim`): index into the robot's plain buses.
    Plain(usize),
    /// A connector of a simulated pi3hat (`pi3hat:sim`): the board's index, and the connector
    /// (JC1-JC5).
    Board {
        /// Index into the robot's boards.
        board: usize,
        /// The connector.
        connector: u8,
    },
}

/// What the robot's handles share.
#[derive(Default)]
pub(crate) struct Inner {
    /// Where each bus of the robot is simulated, by its index in the robot's bus list;
    /// `None` for a bus that is not simulated (a real one beside simulated ones).
    pub(crate) buses: Vec<Option<Location>>,
    pub(crate) plain: Vec<SimBus>,
    pub(crate) boards: Vec<SimPi3hat>,
    /// The swaying attitude of a robot without a body.
    pub(crate) imu: Option<Imu>,
    world: Option<World>,
    /// The body as the IMU last read it.
    body_read: Option<BodyState>,
    /// The plant's generalised positions when the IMU last read the body (sized when the
    /// world is attached: a read copies, never allocates).
    qpos_read: Vec<f64>,
}

/// The servos of every simulated bus, by bus index and id: what a [`World`] steps.
struct BusesOf<'a> {
    buses: &'a [Option<Location>],
    plain: &'a mut [SimBus],
    boards: &'a mut [SimPi3hat],
}

/// The simulated bus at robot bus index `index`.
fn bus_at<'a>(
    buses: &[Option<Location>],
    plain: &'a mut [SimBus],
    boards: &'a mut [SimPi3hat],
    index: usize,
) -> Option<&'a mut SimBus> {
    match (*buses.get(index)?)? {
        Location::Plain(i) => plain.get_mut(i),
        Location::Board { board, connector } => boards.get_mut(board)?.bus_mut(connector),
    }
}

impl BusesOf<'_> {
    fn bus_mut(&mut self, index: usize) -> Option<&mut SimBus> {
        bus_at(self.buses, self.plain, self.boards, index)
    }
}

impl Servos for BusesOf<'_> {
    fn servo_mut(&mut self, bus: usize, id: u8) -> Option<&mut Servo> {
        self.bus_mut(bus)?.servo_mut(id)
    }
}

impl Inner {
    /// The world and the buses it steps, borrowed apart.
    fn split(&mut self) -> (Option<&mut World>, BusesOf<'_>) {
        let Inner { buses, plain, boards, world, .. } = self;
        (world.as_mut(), BusesOf { buses, plain, boards })
    }

    fn bus_mut(&mut self, index: usize) -> Option<&mut SimBus> {
        bus_at(&self.buses, &mut self.plain, &mut self.boards, index)
    }

    /// The robot's attitude at `now_ns`: the body's, with physics (kept as the body that
    /// reading saw), else the swaying IMU's.
    pub(crate) fn read_imu(&mut self, now_ns: u64) -> Option<ImuSample> {
        if let Some(world) = self.world.as_ref() {
            if let Some(body) = world.body() {
                self.body_read = Some(body);
                let qpos = world.qpos();
                if qpos.len() == self.qpos_read.len() {
                    self.qpos_read.copy_from_slice(qpos);
                }
                return Some(body.to_imu());
            }
        }
        self.imu.as_mut().map(|imu| imu.sample(now_ns))
    }
}

/// The simulated robot (see the module doc). Clones are handles on the same robot.
#[derive(Clone, Default)]
pub struct SimRobot {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for SimRobot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("SimRobot")
            .field("buses", &inner.buses)
            .field("world", &inner.world.is_some())
            .finish_non_exhaustive()
    }
}

impl SimRobot {
    /// An empty robot: buses come with [`crate::open`].
    pub(crate) fn new() -> Self {
        SimRobot::default()
    }

    /// The shared state. Never contended (see the module doc); a panic while it was held
    /// leaves plain data behind, which stays usable.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Couple the servos `world` links to its plant: from now on [`SimRobot::advance_to`]
    /// steps them and the body together, and the IMU reads the body when the plant has one.
    /// Fails, coupling nothing, when a linked servo is not on a simulated bus.
    pub fn attach_world(&self, mut world: World) -> Result<(), WorldError> {
        let mut inner = self.lock();
        world.couple(&mut inner.split().1)?;
        inner.qpos_read = world.qpos().to_vec();
        inner.world = Some(world);
        Ok(())
    }

    /// The plant's generalised positions (MuJoCo's `qpos`) as of the IMU's last read of the
    /// body, copied into `out`; returns how many there are (0 without a world; nothing is
    /// copied when `out` is shorter). Allocation-free: what a run logs each cycle.
    pub fn qpos_read(&self, out: &mut [f64]) -> usize {
        let inner = self.lock();
        let n = inner.qpos_read.len();
        if let Some(dst) = out.get_mut(..n) {
            dst.copy_from_slice(&inner.qpos_read);
        }
        n
    }

    /// Step the world to `t_ns` (nothing without one, or when it is there already).
    pub fn advance_to(&self, t_ns: u64) {
        let mut inner = self.lock();
        if let (Some(world), mut servos) = inner.split() {
            world.advance_to(t_ns, &mut servos);
        }
    }

    /// The robot has a world (physics).
    pub fn has_world(&self) -> bool {
        self.lock().world.is_some()
    }

    /// The robot has an attitude to report: a body, or the swaying IMU.
    pub fn has_imu(&self) -> bool {
        let inner = self.lock();
        inner.imu.is_some() || inner.world.as_ref().is_some_and(|w| w.body().is_some())
    }

    /// The body as the IMU last read it (what goes with that cycle's IMU sample); `None`
    /// before the first read or without a body.
    pub fn body(&self) -> Option<BodyState> {
        self.lock().body_read
    }

    /// The body now, and the plant steps taken so far; `None` without a body.
    pub fn world_body(&self) -> Option<(BodyState, u64)> {
        let inner = self.lock();
        let world = inner.world.as_ref()?;
        Some((world.body()?, world.steps()))
    }

    /// Why the plant stopped, if it did.
    pub fn world_fault(&self) -> Option<PlantError> {
        self.lock().world.as_ref().and_then(World::fault)
    }

    /// The pushes acting on the body when the plant stopped, N; `None` when it has not
    /// stopped or nothing was pushing.
    pub fn world_fault_push(&self) -> Option<[f64; 3]> {
        self.lock().world.as_ref().and_then(World::fault_push)
    }

    /// Schedule `push` again after every reset, timed from the reset
    /// ([`World::repeat_after_reset`]); `None` without a world.
    pub fn repeat_after_reset(&self, push: Push) -> Option<bool> {
        self.lock().world.as_mut().map(|w| w.repeat_after_reset(push))
    }

    /// Schedule a push on the body; `None` without a world, `Some(false)` when the world
    /// holds as many pushes as it can.
    pub fn push(&self, push: Push) -> Option<bool> {
        self.lock().world.as_mut().map(|w| w.push(push))
    }

    /// The world back at its starting pose (perturbed as `seed` says) and every servo stopped
    /// as `d stop` does, so the next command starts it afresh. `None` without a world,
    /// `Some(false)` when the plant cannot reset.
    pub fn reset_world(&self, seed: u64) -> Option<bool> {
        self.reset_world_with(seed, &rtloop_sim::Episode::NOMINAL)
    }

    /// [`SimRobot::reset_world`] into an episode with `episode`'s physical parameters,
    /// servo gains, joint start and pushes ([`World::reset_with`]).
    pub fn reset_world_with(&self, seed: u64, episode: &rtloop_sim::Episode) -> Option<bool> {
        let mut inner = self.lock();
        let (world, mut servos) = inner.split();
        let done = world?.reset_with(seed, episode, &mut servos);
        for index in 0..inner.buses.len() {
            if let Some(bus) = inner.bus_mut(index) {
                for servo in bus.servos_mut() {
                    servo.console_command(rtloop_sim::servo::ConsoleCommand::Stop);
                }
            }
        }
        Some(done)
    }

    /// Run `f` on the simulated bus at index `index` of the robot's bus list (fault
    /// injection, statistics, start positions); `None` when that bus is not simulated.
    pub fn with_bus<R>(&self, index: usize, f: impl FnOnce(&mut SimBus) -> R) -> Option<R> {
        self.lock().bus_mut(index).map(f)
    }

    /// The robot's attitude as the cycle reads it ([`rtloop_io::ImuSource`]): the body's with
    /// physics, else the swaying IMU's.
    pub fn imu_source(&self) -> Box<dyn rtloop_io::ImuSource> {
        Box::new(SimImuSource { robot: self.clone() })
    }
}

/// The attitude of a [`SimRobot`] ([`SimRobot::imu_source`]).
struct SimImuSource {
    robot: SimRobot,
}

impl ImuSource for SimImuSource {
    fn read(&mut self, now_ns: u64, out: &mut ImuSample) -> Result<bool, TransportError> {
        match self.robot.lock().read_imu(now_ns) {
            Some(sample) => {
                *out = sample;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}
