//! What `rtloop run --log FILE` records, and how it gets from the real-time thread to the
//! file without the loop ever waiting.
//!
//! The cycle thread fills a fixed-size [`LogMsg`] (plain `Copy` data: no allocation) and
//! hands it to a wait-free ring ([`rtloop_tlog::realtime`]); a writer thread turns it into TLOG0003
//! records — `cycle` (timing, IMU and every servo's command and state, one per cycle) and
//! `event` — encodes, compresses and writes them. In a real-time run a full ring drops the
//! message and counts it; the counts are in the run summary and in the log itself
//! (`rtloop_log_stats`). A lockstep run has no deadline (simulated time stands still while
//! the loop waits), so there the hand-off waits for room instead ([`LogHandOff`]): its log
//! has every cycle, whatever the host's speed. The writer flushes at least every 100 ms and
//! after every event, so a killed run loses at most the last ~100 ms of cycles and no event
//! that was written.
//!
//! Must never: allocate, lock or make a system call on the real-time side of a real-time run.

use crate::controller::MAX_SERVOS;
use rtloop_tlog::realtime::RtLogger;
use rtloop_tlog::writer::{FileWriter, RecordHandle};
use serde::Serialize;

/// The cycle thread's end of the log.
pub struct LogHandOff<T> {
    logger: RtLogger<LogMsg<T>>,
    /// Lockstep: wait for room in a full ring rather than drop.
    wait: bool,
    /// Hand over only the cycles whose index this divides (1 with a log file: every cycle;
    /// without one, the finest decimation of the live publishers).
    cycle_every: u64,
    /// Hand over the controller's telemetry (only a log file records it).
    custom: bool,
}

impl<T> LogHandOff<T> {
    /// `lockstep`: the run's time is simulated, so a full ring is waited for
    /// ([`RtLogger::log_waiting`]: it still drops, and counts, if the writer thread is gone,
    /// stopping or stuck) rather than dropped ([`RtLogger::log`], wait-free).
    pub fn new(logger: RtLogger<LogMsg<T>>, lockstep: bool) -> Self {
        LogHandOff { logger, wait: lockstep, cycle_every: 1, custom: true }
    }

    /// Without a log file, only live publishers read the ring: hand over only the cycles
    /// they want (indices divisible by `every`) and no controller telemetry, so the cycle
    /// thread copies nothing nobody reads.
    pub fn live_only(mut self, every: u32) -> Self {
        self.cycle_every = u64::from(every.max(1));
        self.custom = false;
        self
    }

    /// Someone reads cycle `index`.
    #[inline]
    pub fn wants_cycle(&self, index: u64) -> bool {
        index.is_multiple_of(self.cycle_every)
    }

    /// Someone reads the controller's telemetry.
    #[inline]
    pub fn wants_custom(&self) -> bool {
        self.custom
    }

    /// Hand `msg` to the writer thread; false when it was dropped (and counted). Wait-free in
    /// a real-time run.
    #[inline]
    pub fn log(&mut self, msg: LogMsg<T>) -> bool {
        if self.wait {
            self.logger.log_waiting(msg)
        } else {
            self.logger.log(msg)
        }
    }
}

/// One servo in one cycle: recorded by the real-time thread (plain `Copy` data) and
/// written as is inside the `cycle` record.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ServoLog {
    /// Servo id.
    pub id: u8,
    /// Bus number.
    pub bus: u8,
    /// The state below answers this cycle's request.
    pub fresh: bool,
    /// Cycles between the request the state answers and this one (0 when fresh; a late
    /// reply is logged with its true age, never as fresh); absent (null) before the servo
    /// first answered.
    #[serde(serialize_with = "rtloop_tlog::schema::typed_option")]
    pub state_age_cycles: Option<u32>,
    /// Commanded mode (0 stop, 10 position, 12 zero velocity, 15 brake; 255 = query only).
    pub command_mode: u8,
    /// Commanded position, rev (NaN = not sent).
    pub command_position: f64,
    /// Commanded velocity, rev/s.
    pub command_velocity: f64,
    /// Commanded torque limit, N·m.
    pub command_maximum_torque: f64,
    /// Mode reported.
    pub mode: u8,
    /// Position, rev.
    pub position: f64,
    /// Velocity, rev/s.
    pub velocity: f64,
    /// Torque, N·m.
    pub torque: f64,
    /// q-axis current, A.
    pub q_current: f64,
    /// Bus voltage, V.
    pub voltage: f64,
    /// Board temperature, °C.
    pub temperature: f64,
    /// Motor temperature, °C.
    pub motor_temperature: f64,
    /// Fault code.
    pub fault: u8,
}

/// One cycle, as the real-time thread records it.
#[derive(Debug, Clone, Copy)]
pub struct CycleLog {
    /// Monotonic time of the wakeup, ns.
    pub woke_ns: u64,
    /// Period index.
    pub index: u64,
    /// Wakeup latency, ns.
    pub wakeup_ns: u64,
    /// Cycle duration, ns.
    pub cycle_ns: u64,
    /// Replies missing this cycle.
    pub missing: u32,
    /// Replies to earlier cycles' requests that arrived this cycle.
    pub late: u32,
    /// Servos commanded without a query (a reply of theirs still outstanding).
    pub unqueried: u32,
    /// The cycle hit its deadline.
    pub timed_out: bool,
    /// Servos in use in `servos`.
    pub servos_len: u8,
    /// Per servo.
    pub servos: [ServoLog; MAX_SERVOS],
    /// The IMU sample.
    pub imu: rtloop_sim::ImuSample,
    /// The simulated body's ground truth, with physics.
    pub body: BodyLog,
}

/// Most generalised positions (MuJoCo's `nq`) a `body` record carries: enough for a
/// quadruped (19), a humanoid or an arm; a larger model's record leaves `qpos` empty. The
/// agent segment's capacity ([`rtloop_agent::layout::MAX_QPOS`]), so a record and a state
/// carry the same models' poses.
pub use rtloop_agent::layout::MAX_QPOS;

/// The simulated body in one cycle, as the real-time thread records it (fixed size).
#[derive(Debug, Clone, Copy)]
pub struct BodyLog {
    /// There is a body this cycle.
    pub present: bool,
    /// Its ground truth.
    pub state: rtloop_sim::BodyState,
    /// Generalised positions in use in `qpos` (0: more than [`MAX_QPOS`]).
    pub qpos_len: u16,
    /// MuJoCo's `qpos` as the IMU read the body.
    pub qpos: [f64; MAX_QPOS],
}

impl BodyLog {
    /// A `body` item's JSON (the `body` record) as the loop logged it; `None` when it is not one.
    pub fn from_record(v: &serde_json::Value) -> Option<BodyLog> {
        let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
        let arr = |v: &serde_json::Value, out: &mut [f64]| {
            for (i, o) in out.iter_mut().enumerate() {
                *o = f(&v[i]);
            }
        };
        let mut b = BodyLog { present: true, ..Default::default() };
        v.get("position_m")?;
        arr(&v["position_m"], &mut b.state.position_m);
        arr(&v["quaternion"], &mut b.state.quaternion);
        arr(&v["velocity_mps"], &mut b.state.velocity_mps);
        arr(&v["rate_rps"], &mut b.state.rate_rps);
        let qpos = v["qpos"].as_array().map_or(&[][..], Vec::as_slice);
        let n = if qpos.len() <= b.qpos.len() { qpos.len() } else { 0 };
        arr(&v["qpos"], &mut b.qpos[..n]);
        b.qpos_len = n as u16;
        Some(b)
    }
}

impl Default for BodyLog {
    fn default() -> Self {
        BodyLog { present: false, state: rtloop_sim::BodyState::default(), qpos_len: 0, qpos: [0.0; MAX_QPOS] }
    }
}

/// The `body` record (runs with physics): the simulated body's ground truth each cycle, as the
/// IMU read it. Frames as MuJoCo's: +x forward, +y left, +z up.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BodyRecord {
    /// The body origin's position in the ground's frame, m (z: height above the ground).
    pub position_m: [f64; 3],
    /// Attitude `[w, x, y, z]`, rotating body vectors into the gravity-aligned world frame.
    pub quaternion: [f64; 4],
    /// The body origin's velocity in the ground's frame, m/s.
    pub velocity_mps: [f64; 3],
    /// Body rates about its own x, y, z, rad/s.
    pub rate_rps: [f64; 3],
    /// The model's generalised positions (MuJoCo's `qpos`, the `model` record's `nq` of them;
    /// empty past [`MAX_QPOS`]): with the model, every body's pose (what the 3D view and
    /// `rtloop log render` pose the model from).
    #[serde(serialize_with = "rtloop_tlog::schema::typed_vec")]
    pub qpos: Vec<f64>,
}

/// The `model` record (runs with physics), written once at the start: which model the run
/// simulated and how its servos map onto it, so a run can be replayed and checked.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ModelRecord {
    /// "the built-in quadruped", or the file as given.
    pub name: String,
    /// The model file, absolute ("" when built in).
    pub path: String,
    /// SHA-256 of the model file, hex ("" when built in): what `sha256sum` prints.
    pub file_sha256: String,
    /// SHA-256 of the compiled model (MuJoCo's MJB), hex: the same files, includes and meshes
    /// compiled by the same MuJoCo give the same value.
    pub compiled_sha256: String,
    /// MuJoCo's version.
    pub mujoco: String,
    /// The body the IMU is on.
    pub body: String,
    /// That body floats (a free joint).
    pub floating: bool,
    /// MuJoCo's time step, s.
    pub timestep_s: f64,
    /// Generalised positions (the length of `body.qpos`).
    pub nq: u32,
    /// The keyframe taken as the standing pose ("" for none).
    pub stand_pose: String,
    /// The servo ↔ joint map.
    #[serde(serialize_with = "rtloop_tlog::schema::typed_vec")]
    pub joints: Vec<JointRecord>,
}

/// One servo's joint in the `model` record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct JointRecord {
    /// Bus number.
    pub bus: u8,
    /// Servo id.
    pub id: u8,
    /// The model's joint.
    pub joint: String,
    /// The servo's position gain, N·m/rev.
    pub kp: f64,
    /// The servo's velocity gain, N·m·s/rev.
    pub kd: f64,
    /// The servo's torque limit, N·m.
    pub max_torque: f64,
    /// Rotor turns per output turn.
    pub gear_ratio: f64,
    /// `motor_position.output.sign`.
    pub sign: f64,
}

impl ModelRecord {
    /// The record of a run's physics.
    pub fn of(info: &crate::physics::PhysicsInfo) -> Self {
        let m = &info.model;
        ModelRecord {
            name: m.name.clone(),
            path: m.path.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            file_sha256: m.file_sha256.clone().unwrap_or_default(),
            compiled_sha256: m.compiled_sha256.clone(),
            mujoco: rtloop_physics::MUJOCO_VERSION.to_string(),
            body: m.body.clone(),
            floating: m.floating,
            timestep_s: m.timestep_s,
            nq: m.nq as u32,
            stand_pose: m.stand_pose.clone().unwrap_or_default(),
            joints: info
                .joints
                .iter()
                .zip(&info.setups)
                .map(|((bus, id, joint), s)| JointRecord {
                    bus: *bus,
                    id: *id,
                    joint: joint.clone(),
                    kp: s.kp_nm_per_rev,
                    kd: s.kd_nms_per_rev,
                    max_torque: s.max_torque_nm,
                    gear_ratio: s.gear_ratio,
                    sign: s.output_sign,
                })
                .collect(),
        }
    }
}

/// Messages from the real-time thread. The cycle variant stays inline (about 5 KB, copied
/// into the ring): boxing it would allocate on the real-time thread.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy)]
pub enum LogMsg<T = ()> {
    /// One cycle.
    Cycle(CycleLog),
    /// An event (fault, missing servo, safe mode, shutdown, …).
    Event {
        /// Monotonic time, ns.
        at_ns: u64,
        /// Bus number of the servo, 0 for the robot.
        bus: u8,
        /// Servo id, 0 for the robot.
        servo: u8,
        /// Event name.
        kind: &'static str,
    },
    /// The controller's own telemetry for one cycle.
    Custom {
        /// Monotonic time of the cycle's wakeup, ns.
        at_ns: u64,
        /// What the controller recorded.
        value: T,
    },
}

impl CycleLog {
    /// Fill a cycle message from this cycle's commands and replies (no allocation).
    #[allow(clippy::too_many_arguments)]
    pub fn fill(
        &mut self,
        tick: &rtloop_rt::periodic::Tick,
        cycle_ns: u64,
        report: &rtloop_io::CycleReport,
        servos: &[rtloop_io::ServoSpec],
        bus_numbers: &[u8],
        commands: &[rtloop_io::ServoCommand],
        replies: &[rtloop_io::ServoReply],
        imu: &rtloop_sim::ImuSample,
    ) {
        let out = self;
        out.woke_ns = tick.woke_ns;
        out.index = tick.index;
        out.wakeup_ns = tick.woke_ns.saturating_sub(tick.deadline_ns);
        out.cycle_ns = cycle_ns;
        out.missing = report.missing;
        out.late = report.late;
        out.unqueried = report.unqueried;
        out.timed_out = report.stats.timed_out;
        out.imu = *imu;
        let n = servos.len().min(replies.len()).min(commands.len()).min(MAX_SERVOS);
        out.servos_len = n as u8;
        for i in 0..n {
            let s = &replies[i].state;
            let (mode, position, velocity, max_torque) = match &commands[i] {
                rtloop_io::ServoCommand::Position(p) => (
                    10,
                    p.position.unwrap_or(f64::NAN),
                    p.velocity.unwrap_or(f64::NAN),
                    p.maximum_torque.unwrap_or(f64::NAN),
                ),
                rtloop_io::ServoCommand::Stop => (0, f64::NAN, f64::NAN, f64::NAN),
                rtloop_io::ServoCommand::ZeroVelocity => (12, f64::NAN, 0.0, f64::NAN),
                rtloop_io::ServoCommand::Brake => (15, f64::NAN, f64::NAN, f64::NAN),
                rtloop_io::ServoCommand::Query => (255, f64::NAN, f64::NAN, f64::NAN),
            };
            out.servos[i] = ServoLog {
                id: servos[i].id,
                bus: bus_numbers.get(servos[i].bus).copied().unwrap_or(0),
                fresh: replies[i].fresh,
                state_age_cycles: replies[i].age().map(|a| u32::try_from(a).unwrap_or(u32::MAX)),
                command_mode: mode,
                command_position: position,
                command_velocity: velocity,
                command_maximum_torque: max_torque,
                mode: s.mode.unwrap_or(255),
                position: s.position,
                velocity: s.velocity,
                torque: s.torque,
                q_current: s.q_current,
                voltage: s.voltage,
                temperature: s.temperature,
                motor_temperature: s.motor_temperature,
                fault: s.fault.unwrap_or(0),
            };
        }
    }
}

impl Default for CycleLog {
    fn default() -> Self {
        CycleLog {
            woke_ns: 0,
            index: 0,
            wakeup_ns: 0,
            cycle_ns: 0,
            missing: 0,
            late: 0,
            unqueried: 0,
            timed_out: false,
            servos_len: 0,
            servos: [ServoLog::default(); MAX_SERVOS],
            imu: rtloop_sim::ImuSample::default(),
            body: BodyLog::default(),
        }
    }
}

impl CycleLog {
    /// Take the simulated body's ground truth for this cycle (as the IMU read it), or note
    /// there is none. No allocation.
    pub fn fill_body(&mut self, sim: Option<&rtloop_simrobot::SimRobot>) {
        let b = &mut self.body;
        match sim.and_then(rtloop_simrobot::SimRobot::body) {
            Some(state) => {
                b.present = true;
                b.state = state;
                let n = sim.map_or(0, |s| s.qpos_read(&mut b.qpos));
                b.qpos_len = if n <= MAX_QPOS { n as u16 } else { 0 };
            }
            None => b.present = false,
        }
    }
}

/// The `cycle` record: one per cycle.
#[derive(Debug, Clone, Serialize)]
pub struct CycleRecord {
    /// Period index.
    pub index: u64,
    /// Wakeup latency, µs.
    pub wakeup_us: f64,
    /// Cycle duration, µs.
    pub cycle_us: f64,
    /// Replies missing.
    pub missing: u32,
    /// Replies to earlier cycles' requests that arrived in this one.
    pub late: u32,
    /// Servos commanded without a query (a reply of theirs still outstanding).
    pub unqueried: u32,
    /// The cycle hit its deadline.
    pub timed_out: bool,
    /// The attitude.
    pub imu: ImuRecord,
    /// Every servo.
    pub servo: Vec<ServoLog>,
}

/// The IMU inside a `cycle` record (pi3hat frame: +x forward, +y right, +z down).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImuRecord {
    /// Attitude quaternion w, x, y, z.
    pub quaternion: [f64; 4],
    /// Body rates, deg/s.
    pub rate_dps: [f64; 3],
    /// Acceleration without gravity, m/s².
    pub accel_mps2: [f64; 3],
}

impl Default for CycleRecord {
    /// One servo in the default so the schema knows the array's item type.
    fn default() -> Self {
        CycleRecord {
            index: 0,
            wakeup_us: 0.0,
            cycle_us: 0.0,
            missing: 0,
            late: 0,
            unqueried: 0,
            timed_out: false,
            imu: ImuRecord::default(),
            servo: vec![ServoLog::default()],
        }
    }
}

/// The `event` record.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EventLogRecord {
    /// Bus number of the servo, 0 for the robot (the same id may live on several buses).
    pub bus: u8,
    /// Servo id, 0 for the robot.
    pub servo: u8,
    /// What happened.
    pub kind: String,
}

/// `CLOCK_REALTIME − CLOCK_MONOTONIC` in µs, so monotonic stamps become wall-clock log
/// timestamps (µs since the UNIX epoch, as TLOG0003 wants).
pub fn epoch_offset_us() -> i64 {
    let wall = rtloop_tlog::realtime::now_us();
    wall - (rtloop_rt::periodic::now_ns() / 1000) as i64
}

/// The writer-thread side: record handles and a reusable record.
pub struct LogSink<T = ()> {
    cycle: RecordHandle<CycleRecord>,
    event: RecordHandle<EventLogRecord>,
    /// With physics: the `body` record, and the `model` record still to write.
    body: Option<(RecordHandle<BodyRecord>, BodyRecord)>,
    model: Option<(RecordHandle<ModelRecord>, ModelRecord)>,
    /// The controller's record; `None` for a zero-sized telemetry type (nothing to record).
    custom: Option<RecordHandle<T>>,
    epoch_offset_us: i64,
    scratch: CycleRecord,
}

impl<T: Serialize + Default> LogSink<T> {
    /// Register the records on `writer`; the controller's as `custom_name` (unless its
    /// telemetry type is zero-sized, like `()`).
    pub fn register<W: std::io::Write>(
        writer: &mut FileWriter<W>,
        custom_name: &str,
    ) -> Result<Self, rtloop_tlog::format::TlogError> {
        let cycle = writer.register::<CycleRecord>("cycle")?;
        let event = writer.register::<EventLogRecord>("event")?;
        let custom = if std::mem::size_of::<T>() == 0 { None } else { Some(writer.register::<T>(custom_name)?) };
        Ok(LogSink {
            cycle,
            event,
            body: None,
            model: None,
            custom,
            epoch_offset_us: epoch_offset_us(),
            scratch: CycleRecord::default(),
        })
    }

    /// Also record the simulated body: the `model` record (written with the first cycle) and
    /// a `body` record every cycle.
    pub fn with_physics<W: std::io::Write>(
        mut self,
        writer: &mut FileWriter<W>,
        info: &crate::physics::PhysicsInfo,
    ) -> Result<Self, rtloop_tlog::format::TlogError> {
        let model = writer.register::<ModelRecord>("model")?;
        let body = writer.register::<BodyRecord>("body")?;
        let nq = info.model.nq.min(MAX_QPOS);
        self.body = Some((body, BodyRecord { qpos: Vec::with_capacity(nq), ..BodyRecord::default() }));
        self.model = Some((model, ModelRecord::of(info)));
        Ok(self)
    }

    /// What is added to the loop's clock (µs) to stamp a record: by default the offset of
    /// wall-clock time from the monotonic clock; 0 for a lockstep run, whose clock is
    /// simulated time from 0.
    pub fn set_epoch_offset_us(&mut self, offset_us: i64) {
        self.epoch_offset_us = offset_us;
    }

    /// Write one message.
    pub fn write<W: std::io::Write>(
        &mut self,
        w: &mut FileWriter<W>,
        msg: LogMsg<T>,
    ) -> Result<(), rtloop_tlog::format::TlogError> {
        match msg {
            LogMsg::Cycle(c) => {
                let r = &mut self.scratch;
                r.index = c.index;
                r.wakeup_us = c.wakeup_ns as f64 / 1000.0;
                r.cycle_us = c.cycle_ns as f64 / 1000.0;
                r.missing = c.missing;
                r.late = c.late;
                r.unqueried = c.unqueried;
                r.timed_out = c.timed_out;
                r.imu =
                    ImuRecord { quaternion: c.imu.quaternion, rate_dps: c.imu.rate_dps, accel_mps2: c.imu.accel_mps2 };
                r.servo.clear();
                r.servo.extend_from_slice(&c.servos[..(c.servos_len as usize).min(MAX_SERVOS)]);
                let ts = self.epoch_offset_us + (c.woke_ns / 1000) as i64;
                if let Some((handle, record)) = self.model.take() {
                    w.write(&handle, ts, &record)?;
                }
                w.write(&self.cycle, ts, &self.scratch)?;
                if let (Some((handle, r)), true) = (&mut self.body, c.body.present) {
                    let b = &c.body.state;
                    r.position_m = b.position_m;
                    r.quaternion = b.quaternion;
                    r.velocity_mps = b.velocity_mps;
                    r.rate_rps = b.rate_rps;
                    r.qpos.clear();
                    r.qpos.extend_from_slice(&c.body.qpos[..usize::from(c.body.qpos_len).min(MAX_QPOS)]);
                    w.write(handle, ts, r)?;
                }
            }
            LogMsg::Event { at_ns, bus, servo, kind } => {
                let ts = self.epoch_offset_us + (at_ns / 1000) as i64;
                w.write(&self.event, ts, &EventLogRecord { bus, servo, kind: kind.to_string() })?;
                // An event is what a crash log is read for: put it in the file now rather
                // than within the writer's flush interval.
                w.flush()?;
            }
            LogMsg::Custom { at_ns, value } => {
                if let Some(handle) = &self.custom {
                    w.write(handle, self.epoch_offset_us + (at_ns / 1000) as i64, &value)?;
                }
            }
        }
        Ok(())
    }
}
