//! The control thread: the controller on its own thread, fed through wait-free rings of
//! fixed-size messages ([`StateMsg`] in, [`CommandMsg`] out), so the cycle thread never
//! allocates or waits for it.

use super::*;

/// Most events one cycle hands a control thread (more in one cycle are still in the summary
/// and the log; the controller sees the first ones).
pub(super) const EVENTS_PER_MESSAGE: usize = 8;

/// State the cycle thread hands the control thread each cycle (fixed size: no allocation).
#[derive(Clone, Copy)]
pub(super) struct StateMsg {
    pub(super) time_s: f64,
    pub(super) cycle: u64,
    pub(super) servos_len: usize,
    pub(super) servos: [ServoStatus; MAX_SERVOS],
    pub(super) imu: rtloop_sim::ImuSample,
    pub(super) last_cycle: CycleFigures,
    pub(super) safe_mode: bool,
    pub(super) events_len: usize,
    pub(super) events: [rtloop_io::safety::Event; EVENTS_PER_MESSAGE],
    pub(super) body: Option<rtloop_sim::BodyState>,
    pub(super) qpos_len: usize,
    pub(super) qpos: [f64; crate::telemetry::MAX_QPOS],
    pub(super) fallen: bool,
    pub(super) pose_kind: super::cycle::PoseKind,
    pub(super) stand_len: usize,
    pub(super) stand: [f64; MAX_SERVOS],
}

impl StateMsg {
    pub(super) fn new() -> Self {
        let none = rtloop_io::safety::Event { at_ns: 0, servo: None, kind: EventKind::Shutdown };
        StateMsg {
            time_s: 0.0,
            cycle: 0,
            servos_len: 0,
            servos: [ServoStatus::default(); MAX_SERVOS],
            imu: rtloop_sim::ImuSample::default(),
            last_cycle: CycleFigures::default(),
            safe_mode: false,
            events_len: 0,
            events: [none; EVENTS_PER_MESSAGE],
            body: None,
            qpos_len: 0,
            qpos: [f64::NAN; crate::telemetry::MAX_QPOS],
            fallen: false,
            pose_kind: super::cycle::PoseKind::NotGiven,
            stand_len: 0,
            stand: [f64::NAN; MAX_SERVOS],
        }
    }

    pub(super) fn copy_from(&mut self, state: &State<'_>) {
        self.time_s = state.time_s;
        self.cycle = state.cycle;
        self.servos_len = state.servos.len().min(MAX_SERVOS);
        self.servos[..self.servos_len].copy_from_slice(&state.servos[..self.servos_len]);
        self.imu = *state.imu;
        self.last_cycle = *state.last_cycle;
        self.safe_mode = state.safe_mode;
        self.events_len = state.events.len().min(EVENTS_PER_MESSAGE);
        self.events[..self.events_len].copy_from_slice(&state.events[..self.events_len]);
        self.body = state.body;
        self.qpos_len = state.qpos.len().min(self.qpos.len());
        self.qpos[..self.qpos_len].copy_from_slice(&state.qpos[..self.qpos_len]);
        self.fallen = state.fallen;
        (self.pose_kind, self.stand_len) = match state.model_pose {
            crate::controller::ModelPose::NotGiven => (super::cycle::PoseKind::NotGiven, 0),
            crate::controller::ModelPose::Missing => (super::cycle::PoseKind::Missing, 0),
            crate::controller::ModelPose::Stand(p) => {
                let n = p.len().min(MAX_SERVOS);
                self.stand[..n].copy_from_slice(&p[..n]);
                (super::cycle::PoseKind::Stand, n)
            }
        };
    }

    pub(super) fn state(&self) -> State<'_> {
        State {
            time_s: self.time_s,
            cycle: self.cycle,
            servos: &self.servos[..self.servos_len],
            imu: &self.imu,
            last_cycle: &self.last_cycle,
            safe_mode: self.safe_mode,
            events: &self.events[..self.events_len],
            body: self.body,
            qpos: &self.qpos[..self.qpos_len],
            fallen: self.fallen,
            model_pose: self.pose_kind.view(&self.stand[..self.stand_len]),
        }
    }
}

/// Commands the control thread hands back, for the cycle after `cycle`. (Not `Copy`: a
/// failure's words may be shared; cloning them counts a holder, it never allocates.)
#[derive(Clone)]
pub(super) struct CommandMsg<T> {
    pub(super) cycle: u64,
    pub(super) commands: [ServoCommand; MAX_SERVOS],
    pub(super) telemetry: Option<T>,
    pub(super) rearm: bool,
    pub(super) reset_world: Option<crate::controller::WorldReset>,
    pub(super) flow: Flow,
    /// The control law failed, in which hook.
    pub(super) failure: Option<(Failure, Hook)>,
    pub(super) events_len: usize,
    pub(super) events: [Reported; MAX_EVENTS_PER_CYCLE],
}

/// What the control thread is told.
#[derive(Clone, Copy)]
pub(super) enum ToControl {
    /// The first measured state: call `start`.
    Start(StateMsg),
    /// A cycle's state: call `cycle`.
    Cycle(StateMsg),
    /// The run is over: call `stop`.
    Stop(StateMsg),
}

/// Where the commands come from.
pub(super) enum ControlLaw<C: Controller> {
    /// The controller runs on the cycle thread (boxed: built once, before the real-time
    /// section, so moving it around never copies a large controller).
    Inline(Box<C>),
    /// The controller runs on a control thread; rings of fixed-size messages in both
    /// directions (nothing boxed), so sending never allocates.
    Thread { to_control: rtrb::Producer<ToControl>, from_control: rtrb::Consumer<CommandMsg<C::Telemetry>> },
}

/// The control thread: the measured start first, then the newest state in and the
/// controller's commands for the next cycle out, until the run is over. Not real-time
/// itself; it must only keep up.
pub(super) fn control_thread<C: Controller>(
    mut controller: C,
    n: usize,
    period_s: f64,
    mut from_cycle: rtrb::Consumer<ToControl>,
    mut to_cycle: rtrb::Producer<CommandMsg<C::Telemetry>>,
) -> C {
    let mut out = CommandMsg {
        cycle: 0,
        commands: [ServoCommand::Query; MAX_SERVOS],
        telemetry: None,
        rearm: false,
        reset_world: None,
        flow: Flow::Continue,
        failure: None,
        events_len: 0,
        events: [Reported::default(); MAX_EVENTS_PER_CYCLE],
    };
    // The law's commands for `state` (with `start` first, for the measured start), handed to
    // the cycle thread; whether it failed. A refusal to start commands nothing.
    let mut command = |controller: &mut C, state: &State<'_>, start: bool| {
        out.cycle = state.cycle;
        out.telemetry = None;
        let mut output = Output::new(&mut out.commands[..n], &mut out.telemetry);
        let result = match start.then(|| controller.start(state)) {
            Some(Err(failure)) => Err((failure, Hook::Start)),
            _ => controller.cycle(state, &mut output).map_err(|failure| (failure, Hook::Cycle)),
        };
        out.rearm = output.rearm_requested();
        out.reset_world = output.world_reset().copied();
        out.events_len = output.events().len();
        out.events[..out.events_len].copy_from_slice(output.events());
        (out.flow, out.failure) = match result {
            Ok(flow) => (flow, None),
            Err(failure) => (Flow::Stop, Some(failure)),
        };
        let _ = to_cycle.push(out.clone());
        out.failure.is_some()
    };
    // A law that failed is not called again (but for its `stop`).
    let mut failed = false;
    loop {
        let mut newest = None;
        let mut heard = false;
        while let Ok(m) = from_cycle.pop() {
            heard = true;
            match m {
                // The start is never skipped: the commands of cycle 0 come from it.
                ToControl::Start(s) => failed = command(&mut controller, &s.state(), true),
                ToControl::Cycle(s) if !failed => newest = Some(s),
                ToControl::Cycle(_) => {}
                ToControl::Stop(s) => {
                    controller.stop(&s.state());
                    return controller;
                }
            }
        }
        match newest {
            // The state read in cycle k gives the commands of cycle k + 1.
            Some(s) => {
                let mut next = s;
                next.cycle = s.cycle + 1;
                next.time_s = s.time_s + period_s;
                failed = command(&mut controller, &next.state(), false);
            }
            None if !heard && from_cycle.is_abandoned() => return controller,
            None if !heard => std::thread::sleep(Duration::from_micros(50)),
            None => {}
        }
    }
}
