//! Servo-level cycles: commands in, typed servo states out, per-servo missing replies.
//!
//! A [`Robot`] knows which servo lives on which bus, encodes each servo's command with the
//! moteus codec, runs one [`Cycler`] cycle, and decodes each reply into that servo's
//! [`ServoState`]. The same servo id may live on several buses: a servo is addressed by
//! (bus, id).
//!
//! Must never: allocate inside [`Robot::cycle`] (every buffer is sized in [`Robot::new`]),
//! or let a malformed or unexpected reply disturb another servo's state.

use crate::clock::Clock;
use crate::cycle::{CycleOptions, CycleStats, Cycler, RxFrame, SetupError, TxFrame};
use crate::transport::{ImuSource, Transport};
use proto::frame::ArbitrationId;
use proto::host::{self, PositionCommand, PositionResolution, QueryFormat, ServoState};
use proto::{CanFdFrame, FrameWriter};
use sim::ImuSample;

/// Where a servo is: bus index and CAN id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServoSpec {
    /// Index into the robot's bus list.
    pub bus: usize,
    /// moteus id, 1..=127.
    pub id: u8,
}

/// What to tell one servo this cycle. Every command also queries the servo's state.
// Commands live in fixed, caller-owned arrays that are rewritten every cycle; boxing the
// large variant would put a heap allocation on the hot path, so the size is the price.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServoCommand {
    /// Only ask for the state.
    Query,
    /// Mode 0: stop (also clears a fault).
    Stop,
    /// Mode 12: hold zero velocity.
    ZeroVelocity,
    /// Mode 15: brake.
    Brake,
    /// Mode 10: position control.
    Position(PositionCommand),
}

/// What came back from one servo.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServoReply {
    /// The last decoded state (kept from an earlier cycle when this one's reply is missing).
    pub state: ServoState,
    /// A reply arrived in this cycle.
    pub fresh: bool,
    /// Consecutive cycles without a reply.
    pub missing_streak: u32,
    /// When the last reply arrived.
    pub received_ns: u64,
}

/// Host-side protocol settings.
#[derive(Debug, Clone)]
pub struct RobotConfig {
    /// What each command asks back.
    pub query: QueryFormat,
    /// Resolution of the position-mode registers.
    pub position_resolution: PositionResolution,
    /// Cycle timing.
    pub cycle: CycleOptions,
    /// Host id used as the source of commands.
    pub host_id: u8,
}

impl Default for RobotConfig {
    fn default() -> Self {
        RobotConfig {
            query: QueryFormat::comprehensive(),
            position_resolution: PositionResolution::all(proto::Resolution::Int16),
            cycle: CycleOptions::default(),
            host_id: 0,
        }
    }
}

/// The outcome of one robot cycle.
#[derive(Debug, Clone, Copy, Default)]
pub struct CycleReport {
    /// The underlying multi-bus cycle.
    pub stats: CycleStats,
    /// Servos whose reply did not arrive.
    pub missing: u32,
    /// Replies that failed to decode (the servo counts as missing).
    pub decode_errors: u32,
    /// Frames that matched no servo of this robot.
    pub unexpected: u32,
    /// Commands that could not be encoded (not sent; the servo counts as missing).
    pub encode_errors: u32,
}

/// Servos on buses, cycled together.
pub struct Robot<C: Clock> {
    cycler: Cycler<C>,
    servos: Vec<ServoSpec>,
    /// (bus, id) → servo index + 1 (0 = none): O(1) reply matching without hashing.
    lookup: Vec<[u16; 128]>,
    tx: Vec<TxFrame>,
    tx_servo: Vec<usize>,
    rx: Vec<RxFrame>,
    config: RobotConfig,
}

impl<C: Clock> Robot<C> {
    /// Build a robot over `buses` (index = position) with `servos`.
    pub fn new(
        buses: Vec<Box<dyn Transport>>,
        servos: Vec<ServoSpec>,
        imu: Option<Box<dyn ImuSource>>,
        clock: C,
        config: RobotConfig,
    ) -> Result<Self, SetupError> {
        let nbus = buses.len();
        let mut lookup = vec![[0u16; 128]; nbus];
        for (i, s) in servos.iter().enumerate() {
            if s.id == 0 || s.id > 127 {
                return Err(SetupError::BadServoId(s.id));
            }
            let Some(table) = lookup.get_mut(s.bus) else {
                return Err(SetupError::NoSuchBus { servo: s.id, bus: s.bus });
            };
            if table[s.id as usize] != 0 {
                return Err(SetupError::DuplicateServo { bus: s.bus, id: s.id });
            }
            table[s.id as usize] = (i + 1) as u16;
        }
        let cycler = Cycler::new(buses, imu, clock, config.cycle)?;
        let n = servos.len();
        Ok(Robot {
            cycler,
            lookup,
            tx: vec![TxFrame::default(); n],
            tx_servo: vec![0; n],
            // Room for every reply plus as many strays again before overflow is counted.
            rx: vec![RxFrame::default(); 2 * n + 8],
            servos,
            config,
        })
    }

    /// The servos, in command order.
    pub fn servos(&self) -> &[ServoSpec] {
        &self.servos
    }

    /// The cycler (bus names, clock, options).
    pub fn cycler(&self) -> &Cycler<C> {
        &self.cycler
    }

    /// Mutable cycler, e.g. to change timing options between cycles.
    pub fn cycler_mut(&mut self) -> &mut Cycler<C> {
        &mut self.cycler
    }

    /// The configuration.
    pub fn config(&self) -> &RobotConfig {
        &self.config
    }

    /// Encode one command frame for servo `spec` into `frame`.
    pub fn encode_command(
        &self,
        spec: ServoSpec,
        cmd: &ServoCommand,
        frame: &mut CanFdFrame,
    ) -> Result<(), proto::EncodeError> {
        encode_command(&self.config, spec, cmd, frame)
    }

    /// One cycle: `commands[i]` goes to `servos()[i]`, its reply lands in `replies[i]`.
    /// Servos beyond the shorter of the two slices are not commanded.
    pub fn cycle(&mut self, commands: &[ServoCommand], replies: &mut [ServoReply], imu: &mut ImuSample) -> CycleReport {
        let mut report = CycleReport::default();
        let n = self.servos.len().min(commands.len()).min(replies.len());
        let mut ntx = 0;
        for i in 0..n {
            let spec = self.servos[i];
            let slot = &mut self.tx[ntx];
            match encode_command(&self.config, spec, &commands[i], &mut slot.frame) {
                Ok(()) => {
                    slot.bus = spec.bus;
                    slot.expect_reply = true;
                    self.tx_servo[ntx] = i;
                    ntx += 1;
                }
                Err(_) => report.encode_errors += 1,
            }
            replies[i].fresh = false;
        }
        report.stats = self.cycler.cycle(&self.tx[..ntx], &mut self.rx, imu);
        let stored = (report.stats.received as usize).min(self.rx.len());
        for r in &self.rx[..stored] {
            let arb = ArbitrationId::parse(r.frame.id);
            let idx = self.lookup.get(r.bus).and_then(|t| t.get(arb.source as usize)).copied().unwrap_or(0);
            if idx == 0 || arb.destination != self.config.host_id || arb.reply_required {
                report.unexpected += 1;
                continue;
            }
            let i = idx as usize - 1;
            let Some(reply) = replies.get_mut(i) else {
                report.unexpected += 1;
                continue;
            };
            let mut state = ServoState::default();
            match host::decode_reply(r.frame.payload(), &mut state) {
                Ok(()) => {
                    reply.state = state;
                    reply.fresh = true;
                    reply.received_ns = r.at_ns;
                }
                Err(_) => report.decode_errors += 1,
            }
        }
        for reply in replies.iter_mut().take(n) {
            if reply.fresh {
                reply.missing_streak = 0;
            } else {
                reply.missing_streak = reply.missing_streak.saturating_add(1);
                report.missing += 1;
            }
        }
        report
    }
}

/// Encode `cmd` for `spec` as the moteus clients would, padded to a CAN-FD length.
pub fn encode_command(
    config: &RobotConfig,
    spec: ServoSpec,
    cmd: &ServoCommand,
    frame: &mut CanFdFrame,
) -> Result<(), proto::EncodeError> {
    let mut buf = [0u8; 64];
    let len = {
        let mut w = FrameWriter::new(&mut buf);
        let q = Some(&config.query);
        match cmd {
            ServoCommand::Query => host::encode_query(&mut w, &config.query)?,
            ServoCommand::Stop => host::encode_stop(&mut w, q)?,
            ServoCommand::ZeroVelocity => host::encode_zero_velocity(&mut w, q)?,
            ServoCommand::Brake => host::encode_brake(&mut w, q)?,
            ServoCommand::Position(p) => host::encode_position(&mut w, p, &config.position_resolution, q)?,
        }
        w.len()
    };
    let id = ArbitrationId { prefix: 0, source: config.host_id, destination: spec.id, reply_required: true }.build();
    frame.id = id;
    frame.flags = proto::frame::FrameFlags::moteus(id);
    frame.data[..len].copy_from_slice(&buf[..len]);
    frame.len = len as u8;
    frame.pad_to_dlc();
    Ok(())
}
