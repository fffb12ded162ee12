//! The segment's binary layout: `#[repr(C)]`, little-endian, every padding byte an explicit
//! field, every size and offset fixed at compile time.
//!
//! The segment is one [`Header`] at offset 0, one [`StateBlock`] at [`STATE_OFFSET`] (the
//! spine writes it) and one [`CommandBlock`] at [`COMMAND_OFFSET`] (the agent writes it),
//! [`TOTAL_SIZE`] bytes in all. `docs/agent-protocol.md` lists every field's offset; a test
//! compares that table with these structs, and another the offsets the C header asserts.
//!
//! Every type here is plain data: integers and floats only (no `bool`, no enums), no
//! implicit padding, 8-byte aligned, a multiple of 8 bytes long. So any bit pattern a hostile
//! agent leaves is a valid value of the type, and a block can be copied word by word.

#[cfg(not(target_endian = "little"))]
compile_error!("the rtloop agent segment is little-endian; this target is big-endian");

/// Protocol version: bumped on any change to the layout or the meaning of a field.
pub const VERSION: u32 = 4;

/// The first 8 bytes of every segment.
pub const MAGIC_BYTES: [u8; 8] = *b"RTLOOPAG";

/// [`MAGIC_BYTES`] read as a little-endian `u64` (how [`Header::magic`] holds it).
pub const MAGIC: u64 = u64::from_le_bytes(MAGIC_BYTES);

/// Servo slots in the segment (fixed capacity; [`Header::servo_count`] of them are in use).
pub const MAX_SERVOS: usize = 32;

/// Most generalised positions (MuJoCo's `nq`) a [`PoseBlock`] carries: enough for a quadruped
/// (19), a humanoid or an arm. A larger model's pose is left out (`nq` 0). Telemetry's `body`
/// record has the same capacity (`rtloop::telemetry::MAX_QPOS` is this constant).
pub const MAX_QPOS: usize = 64;

/// Position-mode fields per servo command ([`RawServoCommand`] order, bit `i` of `present`):
/// moteus' position-mode registers 0x020..=0x02D ([`rtloop_proto::register::POSITION_COMMAND`]).
pub const FIELD_COUNT: usize = rtloop_proto::register::POSITION_COMMAND_LEN;

/// Names of the position-mode fields, in bit order (`present` bit `i` = `FIELD_NAMES[i]`):
/// the names of [`rtloop_proto::register::POSITION_COMMAND`]. [`RawServoCommand`] mirrors them
/// field for field (a test compares its fields with this list).
pub const FIELD_NAMES: [&str; FIELD_COUNT] = rtloop_proto::register::POSITION_COMMAND_NAMES;

/// Mask of the defined `present` bits.
pub const FIELD_MASK: u32 = (1 << FIELD_COUNT) - 1;

/// Spine status, [`StateBlock::status`].
pub mod status {
    /// Nothing published yet (a zeroed block).
    pub const NONE: u32 = 0;
    /// No agent has armed the spine yet: commands are not followed until one echoes the
    /// published `arm_token`.
    pub const WAITING: u32 = 1;
    /// The spine follows the agent's commands.
    pub const FOLLOWING: u32 = 2;
    /// The agent's heartbeat stopped for longer than the timeout: the servos hold their safe
    /// command until the agent echoes the new `arm_token`.
    pub const SAFE: u32 = 3;
    /// The run is stopping: commands are no longer followed.
    pub const SHUTTING_DOWN: u32 = 4;
    /// The spine has ended and removed the segment; the agent should exit.
    pub const ENDED: u32 = 5;
}

/// What became of the last reset request, [`StateBlock::reset_result`].
pub mod reset {
    /// No reset was asked for yet.
    pub const NONE: u32 = 0;
    /// Done: the simulated world is back at its starting pose (perturbed by the seed) and
    /// every servo is stopped (mode 0).
    pub const DONE: u32 = 1;
    /// Refused: the run has no physics world to reset (`rtloop run` without `--physics`).
    pub const NO_PHYSICS: u32 = 2;
    /// Refused: the run is not lockstep (a reset is reproducible only in simulated time).
    pub const NOT_LOCKSTEP: u32 = 3;
    /// Refused: the request's [`DomainBlock`](super::DomainBlock) holds a value out of its
    /// range (`docs/agent-protocol.md` section 9).
    pub const BAD_DOMAIN: u32 = 4;
}

/// Bits of [`DomainBlock::flags`].
pub mod domain {
    /// The reset applies the block's physical parameters; without it the world goes back to
    /// its nominal ones (every scale 1, no latency, no noise, no pushes).
    pub const APPLY: u32 = 1;
}

/// The longest command latency a reset may ask for ([`DomainBlock::latency_cycles`]), cycles.
pub const MAX_LATENCY_CYCLES: u32 = 32;

/// Pushes one reset may schedule ([`DomainBlock::pushes`]).
pub const DOMAIN_PUSHES: usize = 4;

/// The longest a lockstep command may be held ([`CommandBlock::hold_cycles`]), cycles.
pub const MAX_HOLD_CYCLES: u32 = 100_000;

/// Command kinds, [`RawServoCommand::kind`].
pub mod kind {
    /// No command this cycle: only query the servo.
    pub const QUERY: u32 = 0;
    /// Mode 0, stop (also clears a fault).
    pub const STOP: u32 = 1;
    /// Mode 12, hold zero velocity.
    pub const ZERO_VELOCITY: u32 = 2;
    /// Mode 15, brake.
    pub const BRAKE: u32 = 3;
    /// Mode 10, position control with the fields whose `present` bits are set.
    pub const POSITION: u32 = 4;
}

/// Bits of [`RawServoCommand::present`].
pub mod field {
    #![allow(missing_docs)] // one bit per RawServoCommand field, same names
    pub const POSITION: u32 = 1 << 0;
    pub const VELOCITY: u32 = 1 << 1;
    pub const FEEDFORWARD_TORQUE: u32 = 1 << 2;
    pub const KP_SCALE: u32 = 1 << 3;
    pub const KD_SCALE: u32 = 1 << 4;
    pub const MAXIMUM_TORQUE: u32 = 1 << 5;
    pub const STOP_POSITION: u32 = 1 << 6;
    pub const WATCHDOG_TIMEOUT: u32 = 1 << 7;
    pub const VELOCITY_LIMIT: u32 = 1 << 8;
    pub const ACCEL_LIMIT: u32 = 1 << 9;
    pub const FIXED_VOLTAGE_OVERRIDE: u32 = 1 << 10;
    pub const ILIMIT_SCALE: u32 = 1 << 11;
    pub const FIXED_CURRENT_OVERRIDE: u32 = 1 << 12;
    pub const IGNORE_POSITION_BOUNDS: u32 = 1 << 13;
}

/// Where one servo lives: its moteus id and the robot's bus number.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServoInfo {
    /// moteus CAN id, 1..=127.
    pub id: u32,
    /// Bus number, as the robot's configuration names it.
    pub bus: u32,
}

/// The segment header, written once by the spine before it publishes [`Header::magic`];
/// only `agent_pid` and `agent_version` change afterwards (the agent writes them, atomically).
///
/// Frozen across versions: `magic`, `version`, the sizes, `spine_pid`, `agent_pid` and
/// `agent_version` keep their offsets (0 to 88) in every protocol version, so any agent can
/// say which version it met and any spine which version tried to attach.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Header {
    /// [`MAGIC`]: the bytes "RTLOOPAG". Stored last (release) when the segment is ready.
    pub magic: u64,
    /// [`VERSION`].
    pub version: u32,
    /// `size_of::<Header>()`, also the state block's offset.
    pub header_size: u32,
    /// Offset of the [`StateBlock`].
    pub state_offset: u32,
    /// `size_of::<StateBlock>()`.
    pub state_size: u32,
    /// Offset of the [`CommandBlock`].
    pub command_offset: u32,
    /// `size_of::<CommandBlock>()`.
    pub command_size: u32,
    /// Size of the whole segment.
    pub total_size: u64,
    /// [`MAX_SERVOS`]: the capacity of the servo arrays.
    pub max_servos: u32,
    /// Servos in use (slots `0..servo_count` of every servo array).
    pub servo_count: u32,
    /// Cycle rate of the spine, Hz.
    pub rate_hz: f64,
    /// Cycle period of the spine, ns.
    pub period_ns: u64,
    /// The agent liveness timeout, ns.
    pub timeout_ns: u64,
    /// 1: lockstep (the spine waits each cycle for a command with `for_cycle` = that
    /// cycle); 0: free-running.
    pub lockstep: u32,
    /// The spine's process id.
    pub spine_pid: i32,
    /// The attached agent's process id, 0 for none (agent writes it, atomically).
    pub agent_pid: i32,
    /// The protocol version of the last agent that tried to attach, 0 for none (agent
    /// writes it, atomically, before it checks `version`).
    pub agent_version: u32,
    /// Lockstep hand-off, spine to agent: the spine adds 1 (atomically) when an agent has
    /// something to look at — a state it waits on, a new status — and wakes whoever sleeps
    /// on the word (a futex). Not a value to interpret: only its changes matter.
    pub state_bell: u32,
    /// Agents sleeping on `state_bell` (each adds 1 before it sleeps, 1 less after): the
    /// spine makes the wake-up system call only when it is not 0.
    pub agent_waiting: u32,
    /// Lockstep hand-off, agent to spine: the agent adds 1 after every command it writes,
    /// and wakes the spine if `spine_waiting` says it sleeps on the word.
    pub command_bell: u32,
    /// 1 while the spine sleeps on `command_bell` (waiting for a command in lockstep).
    pub spine_waiting: u32,
    /// Zero.
    pub reserved: [u8; 24],
    /// Slots `0..servo_count`: which servo each slot is.
    pub servos: [ServoInfo; MAX_SERVOS],
}

/// The IMU in a [`StateBlock`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImuBlock {
    /// 1 when the robot has an IMU and the fields below hold its latest sample.
    pub present: u32,
    /// Zero.
    pub reserved: u32,
    /// Attitude quaternion w, x, y, z.
    pub quaternion: [f64; 4],
    /// Body rates about x, y, z, °/s.
    pub rate_dps: [f64; 3],
    /// Linear acceleration x, y, z, m/s².
    pub accel_mps2: [f64; 3],
}

/// The simulated body's ground truth in a [`StateBlock`] (physics runs only): what the
/// physics computed, not what a sensor measured.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BodyBlock {
    /// 1 when the run simulates a body (`rtloop run --physics`) and the fields below hold
    /// its state at this cycle; 0 (and every float NaN) otherwise.
    pub present: u32,
    /// 1 from the cycle the body fell (tilted past `[safety] fall_tilt_deg`, or came down
    /// through `fall_height_m`) until it is upright again; 0 otherwise.
    pub fallen: u32,
    /// Height of the body's origin above the ground under it, m.
    pub height_m: f64,
    /// Roll, degrees: positive is the right side down (the pi3hat's sense).
    pub roll_deg: f64,
    /// Pitch, degrees: positive is the nose up (the pi3hat's sense).
    pub pitch_deg: f64,
    /// Attitude quaternion w, x, y, z in the pi3hat's frame (+x forward, +y right, +z down),
    /// as a perfect IMU would report it.
    pub quaternion: [f64; 4],
    /// Position of the body's origin in the ground's frame (+x forward and +y left of where
    /// the run started, +z up), m.
    pub position_m: [f64; 3],
    /// Velocity of the body's origin in the ground's frame, m/s.
    pub velocity_mps: [f64; 3],
    /// Heading: rotation about the vertical from the starting heading, degrees, positive
    /// turning left (counter-clockwise seen from above), -180 to 180.
    pub yaw_deg: f64,
    /// Zero.
    pub reserved2: u64,
}

/// The simulated body's whole pose in a [`StateBlock`] (physics runs only): MuJoCo's
/// generalised positions `qpos`, as the model holds them, read with [`BodyBlock`]. With the
/// model, every body's pose: what a renderer or a viewer needs to draw the robot exactly.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoseBlock {
    /// Generalised positions in use in `qpos` (the model's `nq`); 0 without a simulated body,
    /// or when the model has more than [`MAX_QPOS`].
    pub nq: u32,
    /// Zero.
    pub reserved: u32,
    /// Slots `0..nq`: MuJoCo's `qpos` (a free joint's 3 position and 4 quaternion values,
    /// then each hinge's or slide's, in the model's order); NaN past `nq`.
    pub qpos: [f64; MAX_QPOS],
}

/// One servo in a [`StateBlock`]. Floats are NaN when absent.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RawServoState {
    /// moteus mode (0 stopped, 1 fault, 10 position, 11 timeout, ...), -1 when absent.
    pub mode: i32,
    /// Fault code, -1 when absent.
    pub fault: i32,
    /// 1 when the state answers this cycle's request.
    pub fresh: u8,
    /// Zero.
    pub reserved: [u8; 7],
    /// The cycle whose request the state answers, -1 before the servo first answered.
    pub request_cycle: i64,
    /// How many cycles old the state is (0 when fresh), -1 before the servo first answered.
    pub age_cycles: i64,
    /// Position, rev.
    pub position: f64,
    /// Velocity, rev/s.
    pub velocity: f64,
    /// Torque, N·m.
    pub torque: f64,
    /// Q-axis current, A.
    pub q_current: f64,
    /// D-axis current, A.
    pub d_current: f64,
    /// Motor temperature, °C.
    pub motor_temperature: f64,
    /// Board temperature, °C.
    pub temperature: f64,
    /// Supply voltage, V.
    pub voltage: f64,
}

/// The state block: the spine publishes one per cycle, under the seqlock `seq`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StateBlock {
    /// Seqlock sequence: odd while the spine writes the block.
    pub seq: u64,
    /// Cycle index.
    pub cycle: u64,
    /// Time since the run started, ns.
    pub time_ns: u64,
    /// Monotonic clock (CLOCK_MONOTONIC, ns) when the block was published.
    pub stamp_ns: u64,
    /// [`status`] of the spine.
    pub status: u32,
    /// Copy of [`Header::servo_count`].
    pub servo_count: u32,
    /// Agent timeouts so far.
    pub timeouts: u64,
    /// Armings so far (the first arming counts).
    pub rearms: u64,
    /// The token an agent echoes in [`CommandBlock::arm_token`] to arm the spine; changes
    /// every time the spine stops following (never 0).
    pub arm_token: u64,
    /// Servo commands the spine refused (validation) so far.
    pub rejected: u64,
    /// Command reads the spine gave up on because the agent was mid-write (or left the
    /// sequence odd) so far.
    pub torn: u64,
    /// The IMU.
    pub imu: ImuBlock,
    /// The last [`CommandBlock::reset_request`] the spine answered (0: none yet).
    pub reset_ack: u64,
    /// What became of it: [`reset`].
    pub reset_result: u32,
    /// 1 when the spine waits for a command answering this state (lockstep: a command with
    /// `for_cycle` equal to `cycle`, or one held over it); 0 otherwise.
    pub awaiting: u32,
    /// Resets done so far.
    pub resets: u64,
    /// The simulated body's ground truth.
    pub body: BodyBlock,
    /// Slots `0..servo_count` in use.
    pub servos: [RawServoState; MAX_SERVOS],
    /// The simulated body's generalised positions.
    pub pose: PoseBlock,
    /// Zero: the command block starts on a cache line.
    pub reserved2: [u8; 56],
}

/// One servo in a [`CommandBlock`]. Field `i` of the position-mode fields is sent only when
/// bit `i` of `present` is set ([`field`]).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RawServoCommand {
    /// [`kind`].
    pub kind: u32,
    /// Bit mask of the fields to send ([`field`]); must be 0 unless `kind` is position.
    pub present: u32,
    /// Target position, rev (NaN: hold the current position).
    pub position: f64,
    /// Target velocity, rev/s.
    pub velocity: f64,
    /// Feedforward torque, N·m.
    pub feedforward_torque: f64,
    /// kp scale.
    pub kp_scale: f64,
    /// kd scale.
    pub kd_scale: f64,
    /// Maximum torque, N·m.
    pub maximum_torque: f64,
    /// Stop position, rev.
    pub stop_position: f64,
    /// Watchdog timeout, s.
    pub watchdog_timeout: f64,
    /// Velocity limit, rev/s.
    pub velocity_limit: f64,
    /// Acceleration limit, rev/s².
    pub accel_limit: f64,
    /// Fixed-voltage override, V.
    pub fixed_voltage_override: f64,
    /// Current limit scale.
    pub ilimit_scale: f64,
    /// Fixed-current override, A.
    pub fixed_current_override: f64,
    /// Ignore position bounds (non-zero: ignore).
    pub ignore_position_bounds: f64,
}

/// The command block: the agent writes it under the seqlock `seq`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CommandBlock {
    /// Seqlock sequence: odd while the agent writes the block.
    pub seq: u64,
    /// The state cycle the agent computed this command from (lockstep waits for it).
    pub for_cycle: u64,
    /// Incremented with every command: a new value is a new command and proof of life.
    pub heartbeat: u64,
    /// The spine's published `arm_token`, echoed to arm it.
    pub arm_token: u64,
    /// Servo entries the agent filled: must equal [`Header::servo_count`].
    pub servo_count: u32,
    /// Lockstep: how many cycles this command answers, from `for_cycle` on (0 and 1: that
    /// cycle only; at most [`MAX_HOLD_CYCLES`]): the spine applies it each of them without
    /// waiting, as a real robot's spine applies an agent's last command until the next, and
    /// waits again at `for_cycle + hold_cycles`. Ignored by a free-running spine.
    pub hold_cycles: u32,
    /// Ask for a reset of the simulated world: a value different from the state's
    /// `reset_ack` is a new request (add 1 for each). Continued from the block's value when
    /// an agent attaches, like `heartbeat`.
    pub reset_request: u64,
    /// The seed of the requested reset (0: the starting pose exactly; otherwise the joints
    /// are perturbed as the seed says).
    pub reset_seed: u64,
    /// Zero.
    pub reserved: [u8; 8],
    /// Slots `0..servo_count` in use.
    pub servos: [RawServoCommand; MAX_SERVOS],
    /// The physical parameters of the world the requested reset starts (domain
    /// randomisation): read with the request, once.
    pub domain: DomainBlock,
}

/// One push a reset schedules, timed from the reset ([`DomainBlock::pushes`]).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PushBlock {
    /// Seconds after the reset it starts.
    pub at_s: f64,
    /// Seconds it lasts; 0: no push in this slot.
    pub duration_s: f64,
    /// Force, N, in the ground's frame (+x forward, +y left, +z up).
    pub force_n: [f64; 3],
}

/// The physical parameters a reset gives the simulated world, read only when
/// [`domain::APPLY`] is set in `flags` (otherwise the reset restores the nominal world).
/// Every value is range-checked by the spine (`docs/agent-protocol.md` section 9); a reset
/// with a value out of range is refused ([`reset::BAD_DOMAIN`]).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DomainBlock {
    /// [`domain`] bits.
    pub flags: u32,
    /// Cycles each new agent command waits before it reaches the servos (0 to
    /// [`MAX_LATENCY_CYCLES`]); meanwhile they get the command before it.
    pub latency_cycles: u32,
    /// Scale of every contact's friction coefficients.
    pub friction_scale: f64,
    /// Scale of every body's mass and inertia.
    pub mass_scale: f64,
    /// Mass added to the body the IMU is on, kg.
    pub payload_kg: f64,
    /// Per servo slot: scale of its position gain kp.
    pub kp_scale: [f64; MAX_SERVOS],
    /// Per servo slot: scale of its velocity gain kd.
    pub kd_scale: [f64; MAX_SERVOS],
    /// Per servo slot: added to its joint's angle once the world has settled, rad.
    pub joint_offset_rad: [f64; MAX_SERVOS],
    /// Per servo slot: its joint's velocity once the world has settled, rad/s.
    pub joint_velocity_rad_s: [f64; MAX_SERVOS],
    /// Pushes on the body, timed from the reset.
    pub pushes: [PushBlock; DOMAIN_PUSHES],
}

/// Offset of the [`StateBlock`] in the segment.
pub const STATE_OFFSET: usize = size_of::<Header>();
/// Offset of the [`CommandBlock`] in the segment.
pub const COMMAND_OFFSET: usize = STATE_OFFSET + size_of::<StateBlock>();
/// Size of the whole segment.
pub const TOTAL_SIZE: usize = COMMAND_OFFSET + size_of::<CommandBlock>();
/// The frozen prefix of the header every version shares (through `agent_version`).
pub const FROZEN_PREFIX: usize = 88;

const _: () = {
    assert!(size_of::<ServoInfo>() == 8);
    assert!(size_of::<Header>() == 384);
    assert!(size_of::<ImuBlock>() == 88);
    assert!(size_of::<RawServoState>() == 96);
    assert!(size_of::<BodyBlock>() == 128);
    assert!(size_of::<PoseBlock>() == 520);
    assert!(size_of::<StateBlock>() == 3968);
    assert!(size_of::<RawServoCommand>() == 120);
    assert!(size_of::<PushBlock>() == 40);
    assert!(size_of::<DomainBlock>() == 1216);
    assert!(size_of::<CommandBlock>() == 5120);
    assert!(STATE_OFFSET == 384);
    assert!(COMMAND_OFFSET == 4352);
    assert!(TOTAL_SIZE == 9472);
    assert!(core::mem::offset_of!(Header, agent_version) + 4 == FROZEN_PREFIX);
    assert!(core::mem::offset_of!(Header, spine_pid) == 76);
    assert!(core::mem::offset_of!(Header, state_bell) == 88);
    assert!(core::mem::offset_of!(StateBlock, body) == 192);
    assert!(core::mem::offset_of!(StateBlock, servos) == 320);
    assert!(core::mem::offset_of!(StateBlock, pose) == 3392);
    assert!(core::mem::offset_of!(CommandBlock, servos) == 64);
    assert!(core::mem::offset_of!(CommandBlock, domain) == 3904);
    // Blocks start on cache lines, so the spine's and the agent's writes never share one.
    assert!(STATE_OFFSET.is_multiple_of(64) && COMMAND_OFFSET.is_multiple_of(64));
    assert!(align_of::<Header>() == 8 && align_of::<StateBlock>() == 8 && align_of::<CommandBlock>() == 8);
};

/// Plain data: any bit pattern is a valid value, no implicit padding, 8-byte aligned, a
/// whole number of 8-byte words. (The two blocks also have their seqlock sequence in
/// word 0; the crate's seqlock is only ever used with them.)
///
/// # Safety
/// Implement only for `#[repr(C)]` types made of integers and floats (and arrays and
/// structs of them) with every padding byte an explicit field, alignment 8 and size a
/// multiple of 8.
pub unsafe trait Plain: Copy + 'static {
    /// An all-zero value.
    fn zeroed() -> Self {
        // SAFETY: `Plain` types accept every bit pattern, the all-zero one included.
        unsafe { core::mem::zeroed() }
    }
}

// SAFETY: integers only, explicit padding (`reserved`), size 384, align 8 (asserted above).
unsafe impl Plain for Header {}
// SAFETY: integers and floats, explicit padding, size 3968, align 8 (asserted above).
unsafe impl Plain for StateBlock {}
// SAFETY: integers and floats, explicit padding, size 5120, align 8 (asserted above).
unsafe impl Plain for CommandBlock {}
// SAFETY: integers and floats, no padding (4 + 4 + 14 × 8), size 120, align 8 (asserted above).
unsafe impl Plain for RawServoCommand {}
// SAFETY: integers and floats, explicit padding, size 96, align 8 (asserted above).
unsafe impl Plain for RawServoState {}

impl RawServoState {
    /// A servo that has not answered: every value absent.
    pub const ABSENT: RawServoState = RawServoState {
        mode: -1,
        fault: -1,
        fresh: 0,
        reserved: [0; 7],
        request_cycle: -1,
        age_cycles: -1,
        position: f64::NAN,
        velocity: f64::NAN,
        torque: f64::NAN,
        q_current: f64::NAN,
        d_current: f64::NAN,
        motor_temperature: f64::NAN,
        temperature: f64::NAN,
        voltage: f64::NAN,
    };
}

impl ImuBlock {
    /// No IMU: `present` 0, every value NaN.
    pub const ABSENT: ImuBlock = ImuBlock {
        present: 0,
        reserved: 0,
        quaternion: [f64::NAN; 4],
        rate_dps: [f64::NAN; 3],
        accel_mps2: [f64::NAN; 3],
    };
}

impl BodyBlock {
    /// No body: `present` 0, every value NaN.
    pub const ABSENT: BodyBlock = BodyBlock {
        present: 0,
        fallen: 0,
        height_m: f64::NAN,
        roll_deg: f64::NAN,
        pitch_deg: f64::NAN,
        quaternion: [f64::NAN; 4],
        position_m: [f64::NAN; 3],
        velocity_mps: [f64::NAN; 3],
        yaw_deg: f64::NAN,
        reserved2: 0,
    };
}

impl PoseBlock {
    /// No pose: `nq` 0, every value NaN.
    pub const ABSENT: PoseBlock = PoseBlock { nq: 0, reserved: 0, qpos: [f64::NAN; MAX_QPOS] };

    /// The positions in use: `qpos[..nq]` (empty when `nq` is 0 or, from a hostile writer,
    /// past [`MAX_QPOS`]).
    pub fn qpos(&self) -> &[f64] {
        self.qpos.get(..self.nq as usize).unwrap_or(&[])
    }
}

impl DomainBlock {
    /// The nominal world: `flags` 0 (nothing applied), every scale 1, no latency, noise or
    /// push.
    pub const NOMINAL: DomainBlock = DomainBlock {
        flags: 0,
        latency_cycles: 0,
        friction_scale: 1.0,
        mass_scale: 1.0,
        payload_kg: 0.0,
        kp_scale: [1.0; MAX_SERVOS],
        kd_scale: [1.0; MAX_SERVOS],
        joint_offset_rad: [0.0; MAX_SERVOS],
        joint_velocity_rad_s: [0.0; MAX_SERVOS],
        pushes: [PushBlock { at_s: 0.0, duration_s: 0.0, force_n: [0.0; 3] }; DOMAIN_PUSHES],
    };
}

impl RawServoCommand {
    /// Query only, nothing sent.
    pub const QUERY: RawServoCommand = RawServoCommand {
        kind: kind::QUERY,
        present: 0,
        position: 0.0,
        velocity: 0.0,
        feedforward_torque: 0.0,
        kp_scale: 0.0,
        kd_scale: 0.0,
        maximum_torque: 0.0,
        stop_position: 0.0,
        watchdog_timeout: 0.0,
        velocity_limit: 0.0,
        accel_limit: 0.0,
        fixed_voltage_override: 0.0,
        ilimit_scale: 0.0,
        fixed_current_override: 0.0,
        ignore_position_bounds: 0.0,
    };

    /// The 14 position-mode fields, in bit order.
    pub fn fields(&self) -> [f64; FIELD_COUNT] {
        [
            self.position,
            self.velocity,
            self.feedforward_torque,
            self.kp_scale,
            self.kd_scale,
            self.maximum_torque,
            self.stop_position,
            self.watchdog_timeout,
            self.velocity_limit,
            self.accel_limit,
            self.fixed_voltage_override,
            self.ilimit_scale,
            self.fixed_current_override,
            self.ignore_position_bounds,
        ]
    }

    /// Field `i` (bit order) as a mutable reference, `None` past the last.
    pub fn field_mut(&mut self, i: usize) -> Option<&mut f64> {
        Some(match i {
            0 => &mut self.position,
            1 => &mut self.velocity,
            2 => &mut self.feedforward_torque,
            3 => &mut self.kp_scale,
            4 => &mut self.kd_scale,
            5 => &mut self.maximum_torque,
            6 => &mut self.stop_position,
            7 => &mut self.watchdog_timeout,
            8 => &mut self.velocity_limit,
            9 => &mut self.accel_limit,
            10 => &mut self.fixed_voltage_override,
            11 => &mut self.ilimit_scale,
            12 => &mut self.fixed_current_override,
            13 => &mut self.ignore_position_bounds,
            _ => return None,
        })
    }

    /// Set field `i` (bit order) and its `present` bit; ignored past the last field.
    pub fn set(&mut self, i: usize, value: f64) {
        if let Some(f) = self.field_mut(i) {
            *f = value;
            self.present |= 1 << i;
        }
    }
}

impl Default for RawServoCommand {
    fn default() -> Self {
        Self::QUERY
    }
}

impl StateBlock {
    /// A block with nothing published: status [`status::NONE`], every servo, the IMU, the
    /// body and its pose absent.
    pub fn empty() -> StateBlock {
        let mut s = StateBlock::zeroed();
        s.imu = ImuBlock::ABSENT;
        s.body = BodyBlock::ABSENT;
        s.pose = PoseBlock::ABSENT;
        s.servos = [RawServoState::ABSENT; MAX_SERVOS];
        s
    }
}

impl CommandBlock {
    /// Every servo queried only, heartbeat 0.
    pub fn empty() -> CommandBlock {
        CommandBlock::zeroed()
    }
}

/// The bytes of a plain value (its exact in-segment representation).
pub fn bytes_of<T: Plain>(value: &T) -> &[u8] {
    // SAFETY: `T: Plain` has no padding, so all `size_of::<T>()` bytes are initialised; the
    // slice borrows `value`.
    unsafe { core::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }
}

/// A plain value from the first `size_of::<T>()` bytes of `bytes` (`None` when shorter).
pub fn from_bytes<T: Plain>(bytes: &[u8]) -> Option<T> {
    let bytes = bytes.get(..size_of::<T>())?;
    // SAFETY: `bytes` holds `size_of::<T>()` bytes; any bit pattern is a valid `T: Plain`;
    // `read_unaligned` copes with any alignment.
    Some(unsafe { bytes.as_ptr().cast::<T>().read_unaligned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`RawServoCommand`] is a `repr(C)` mirror of [`rtloop_proto::register::POSITION_COMMAND`]:
    /// after `kind` and `present`, one f64 per register, named and ordered as the table is,
    /// and `fields`, `field_mut` and the [`field`] bits follow the same order.
    #[test]
    fn the_raw_command_mirrors_the_position_command_table() {
        let debug = format!("{:?}", RawServoCommand::QUERY);
        let inner = debug.strip_prefix("RawServoCommand { ").and_then(|d| d.strip_suffix(" }")).unwrap();
        let names: Vec<&str> = inner.split(", ").map(|f| f.split(':').next().unwrap()).collect();
        let mut expected = vec!["kind", "present"];
        expected.extend(rtloop_proto::register::POSITION_COMMAND.iter().map(|c| c.name));
        assert_eq!(names, expected);
        assert_eq!(FIELD_NAMES.as_slice(), &expected[2..]);
        for (i, name) in FIELD_NAMES.iter().enumerate() {
            let mut c = RawServoCommand::QUERY;
            c.set(i, 1.0 + i as f64);
            assert_eq!(c.present, 1 << i);
            assert_eq!(c.fields()[i], 1.0 + i as f64);
            let offset = 8 + 8 * i;
            assert_eq!(bytes_of(&c)[offset..offset + 8], (1.0 + i as f64).to_le_bytes(), "{name}");
        }
        let bits = [
            field::POSITION,
            field::VELOCITY,
            field::FEEDFORWARD_TORQUE,
            field::KP_SCALE,
            field::KD_SCALE,
            field::MAXIMUM_TORQUE,
            field::STOP_POSITION,
            field::WATCHDOG_TIMEOUT,
            field::VELOCITY_LIMIT,
            field::ACCEL_LIMIT,
            field::FIXED_VOLTAGE_OVERRIDE,
            field::ILIMIT_SCALE,
            field::FIXED_CURRENT_OVERRIDE,
            field::IGNORE_POSITION_BOUNDS,
        ];
        for (i, bit) in bits.into_iter().enumerate() {
            assert_eq!(bit, 1 << i, "{}", FIELD_NAMES[i]);
        }
    }
}
