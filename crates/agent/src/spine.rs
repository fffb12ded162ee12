//! The spine's side: create the segment, publish state, poll and validate commands, keep
//! the agent's liveness.
//!
//! Hot path ([`Spine::publish`], [`Spine::poll_command`], [`Spine::command_for`],
//! [`Spine::note_rejected`], [`Spine::version_mismatch`]): no allocation, no lock, bounded
//! work, and no system call in a free-running run (a lockstep publish that the agent must
//! answer rings its bell, one `FUTEX_WAKE` when the agent sleeps on it). Everything read
//! from the mapping is first copied into the spine's own memory; nothing read from it is
//! used as a size or an index.

use crate::layout::{
    status, CommandBlock, Header, ServoInfo, StateBlock, COMMAND_OFFSET, FROZEN_PREFIX, MAGIC, MAX_SERVOS,
    STATE_OFFSET, TOTAL_SIZE, VERSION,
};
use crate::shm::{self, Mapping, NameError};
use crate::validate::{validate, Limits, ServoCommandError, ValidCommand};
use crate::{bell, header_atomics, seqlock};
use core::sync::atomic::{AtomicU64, Ordering};
use std::fmt;
use std::io;
use std::os::fd::OwnedFd;

/// Default agent liveness timeout: 100 ms without a new heartbeat.
pub const DEFAULT_TIMEOUT_NS: u64 = 100_000_000;

/// Seqlock tries per [`Spine::poll_command`] before it reports [`Poll::Torn`]. Each try
/// copies one block (about 4 KB): bounded, and short next to a cycle.
pub const SPINE_READ_TRIES: u32 = 4;

/// Lockstep: how long [`Spine::wait_command_for`] spins (an agent on a core of its own
/// answers within it) before it sleeps on the agent's bell.
pub const LOCKSTEP_SPIN_NS: u64 = 20_000;

/// Lockstep: the longest [`Spine::wait_command_for`] sleeps on the agent's bell before it
/// looks again (a stop, the agent's death, the arm wait), ns, in the first
/// [`LOCKSTEP_IDLE_AFTER_NS`] of a wait.
pub const LOCKSTEP_SLEEP_NS: u64 = 20_000_000;

/// Lockstep: after this long without a command (a learner paused to update its policy), the
/// spine looks only every [`LOCKSTEP_IDLE_SLEEP_NS`]: an idle spine wakes 4 times a second.
pub const LOCKSTEP_IDLE_AFTER_NS: u64 = 1_000_000_000;

/// Lockstep: the longest sleep on the agent's bell of a long wait, ns (a stop or the
/// agent's death is noticed within it; the agent's command or detach rings at once).
pub const LOCKSTEP_IDLE_SLEEP_NS: u64 = 250_000_000;

/// Lockstep: how long, by default, [`Spine::wait_command_for`] waits for an agent to arm the
/// spine (status `WAITING` or `SAFE`) before it gives up ([`Lockstep::NotArmed`]), ns.
pub const DEFAULT_ARM_WAIT_NS: u64 = 60_000_000_000;

/// Distinct foreign `agent_version` values [`Spine::version_mismatch`] reports (each once);
/// further ones are still ignored, just not reported.
const REPORTED_VERSIONS: usize = 8;

/// How to create the segment.
#[derive(Debug, Clone, PartialEq)]
pub struct SpineConfig {
    /// Agent name: the segment is `/dev/shm/rtloop-NAME`.
    pub name: String,
    /// The servos, in slot order (at most [`MAX_SERVOS`]).
    pub servos: Vec<ServoInfo>,
    /// Cycle rate, Hz.
    pub rate_hz: f64,
    /// Lockstep: the caller waits each cycle for the agent ([`Spine::wait_command_for`]).
    pub lockstep: bool,
    /// Agent liveness timeout, ns.
    pub timeout_ns: u64,
    /// Lockstep: how long the spine waits, in wall-clock time, for an agent to arm it before
    /// [`Spine::wait_command_for`] gives up, ns.
    pub arm_wait_ns: u64,
}

impl SpineConfig {
    /// A free-running spine for `servos` at `rate_hz`, default timeout.
    pub fn new(name: &str, servos: &[ServoInfo], rate_hz: f64) -> Self {
        SpineConfig {
            name: name.to_string(),
            servos: servos.to_vec(),
            rate_hz,
            lockstep: false,
            timeout_ns: DEFAULT_TIMEOUT_NS,
            arm_wait_ns: DEFAULT_ARM_WAIT_NS,
        }
    }
}

/// Why the spine could not create its segment. Each displays as one sentence; the error a
/// variant wraps is its `source()`. [`SpineError::Io`] keeps the operating system's words in
/// its sentence too: `rtloop run --agent` prints that sentence alone (through errors that
/// show only their `Display`), and the C agent's header words its failures the same way.
#[derive(Debug)]
#[non_exhaustive]
pub enum SpineError {
    /// The agent name is malformed.
    Name(NameError),
    /// More servos than the segment holds.
    TooManyServos(usize),
    /// The rate is not a positive finite number.
    Rate(f64),
    /// The timeout is zero.
    Timeout,
    /// A live spine owns the name.
    Owned {
        /// The agent name.
        name: String,
        /// The owner's pid.
        pid: i32,
    },
    /// The name is taken by a file of another user: a spine only ever replaces its own
    /// user's segments.
    OtherUser {
        /// The agent name.
        name: String,
        /// The owner, as [`shm::describe_owner`] names it ("user nobody (uid 65534)").
        owner: String,
    },
    /// Something that is not a live or stale rtloop segment has the name.
    Foreign {
        /// The agent name.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A system call failed.
    Io {
        /// The agent name.
        name: String,
        /// What the spine was doing.
        op: &'static str,
        /// The error.
        err: io::Error,
    },
}

impl fmt::Display for SpineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpineError::Name(e) => e.fmt(f),
            SpineError::TooManyServos(n) => {
                write!(f, "the robot has {n} servos but an agent segment holds at most {MAX_SERVOS}; use fewer servos")
            }
            SpineError::Rate(r) => write!(f, "rate {r} Hz is not a positive finite number; give a rate above 0"),
            SpineError::Timeout => write!(f, "the agent timeout is 0; give a positive timeout"),
            SpineError::Owned { name, pid } => {
                write!(f, "another spine (pid {pid}) owns rtloop-{name}; stop it or pick another --agent name")
            }
            SpineError::OtherUser { name, owner } => write!(
                f,
                "/dev/shm/rtloop-{name} belongs to {owner}, not to this spine's user; pick another --agent name, or \
                 have {owner} remove it"
            ),
            SpineError::Foreign { name, why } => write!(
                f,
                "/dev/shm/rtloop-{name} exists but {why}; remove it if it is yours, or pick another --agent name"
            ),
            SpineError::Io { name, op, err } => write!(f, "cannot {op} /dev/shm/rtloop-{name}: {err}"),
        }
    }
}

impl std::error::Error for SpineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SpineError::Name(e) => Some(e),
            SpineError::Io { err, .. } => Some(err),
            _ => None,
        }
    }
}

/// What [`Spine::poll_command`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// A new command, followed: use [`Spine::command_for`].
    Command,
    /// A new command that echoed the arm token: the spine follows the agent from now on,
    /// starting with this command.
    Armed,
    /// No new command. While following, the last command still applies (until the timeout).
    Unchanged,
    /// A new command that is not followed: the spine is waiting for arming, safe (and the
    /// token did not match), or shutting down, or the header's `agent_version` is not this
    /// spine's (counted in [`Counters::wrong_version`]). It still counts as a heartbeat.
    Ignored,
    /// No consistent read in [`SPINE_READ_TRIES`] tries (counted in `torn` by
    /// [`Spine::poll_command`], which looks once per cycle).
    Torn,
    /// The agent's heartbeat stopped for longer than the timeout: the spine went safe just
    /// now and published a new arm token.
    TimedOut,
    /// The segment was lost under the spine ([`Spine::check_segment`]): nothing was read,
    /// and the spine no longer follows any command.
    SegmentLost,
}

/// What [`Spine::wait_command_for`] ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lockstep {
    /// A followed command for the cycle arrived.
    Command,
    /// The stop flag was raised.
    Stopped,
    /// The agent is gone: the pid it registered is dead, or it unregistered (`agent_pid`
    /// back to 0) after registering.
    AgentGone,
    /// The spine was following, and no command for the cycle came within the timeout: it
    /// went safe just now (`timeouts` + 1, a new arm token). The caller applies the safe
    /// command and goes on to the next cycle.
    TimedOut,
    /// The spine was waiting to be armed (`WAITING` or `SAFE`) and nothing armed it within
    /// [`SpineConfig::arm_wait_ns`].
    NotArmed,
    /// The segment was lost under the spine ([`Spine::check_segment`]).
    SegmentLost,
}

/// How the segment was lost under the spine ([`Spine::check_segment`]): another process of
/// the spine's user changed the file's size, which only the spine ever sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentLoss {
    /// The file became shorter than the segment (truncated): an access past its new end
    /// faulted, and the guard replaced the spine's mapping with zero pages.
    Truncated,
    /// The header's magic word is gone: the file was truncated and grown again (its bytes
    /// are zeros now), or overwritten.
    Replaced,
}

impl SegmentLoss {
    /// The code an event carries for it: 1 truncated, 2 replaced.
    pub fn code(self) -> u64 {
        match self {
            SegmentLoss::Truncated => 1,
            SegmentLoss::Replaced => 2,
        }
    }

    /// The loss of event code `code` ([`SegmentLoss::code`]).
    pub fn from_code(code: u64) -> Option<SegmentLoss> {
        match code {
            1 => Some(SegmentLoss::Truncated),
            2 => Some(SegmentLoss::Replaced),
            _ => None,
        }
    }

    /// What happened to `/dev/shm/rtloop-NAME`, to follow the path in a sentence.
    pub fn what(self) -> &'static str {
        match self {
            SegmentLoss::Truncated => "was truncated",
            SegmentLoss::Replaced => "was truncated and grown again, or overwritten,",
        }
    }
}

/// Distinct refusal causes [`Refusals`] keeps (the first of each); refusals of further
/// causes are only counted, in [`Refusals::other`].
pub const REFUSAL_CAUSES: usize = 4;

/// One cause of refusals: the first refusal of its kind, and how many share it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RefusalCause {
    /// The first refusal of this cause, typed: which field, its value, the limit.
    pub first: ServoCommandError,
    /// The servo slot it was for.
    pub servo: usize,
    /// Refusals of this cause (same kind of error, same field), the first included.
    pub count: u64,
}

/// What validation refused, kept in fixed-size storage as it happens (no allocation, no
/// formatting): per servo slot, per cause, and in how many cycles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Refusals {
    /// Refused commands per servo slot.
    pub per_servo: [u64; MAX_SERVOS],
    /// Cycles with at least one refusal.
    pub cycles: u64,
    /// The distinct causes in the order first seen, at most [`REFUSAL_CAUSES`].
    pub causes: [Option<RefusalCause>; REFUSAL_CAUSES],
    /// Refusals whose cause did not fit in `causes`.
    pub other: u64,
}

impl Default for Refusals {
    fn default() -> Self {
        Refusals { per_servo: [0; MAX_SERVOS], cycles: 0, causes: [None; REFUSAL_CAUSES], other: 0 }
    }
}

impl Refusals {
    /// Count one refusal of `error` for servo slot `servo`.
    fn note(&mut self, servo: usize, error: &ServoCommandError) {
        if let Some(n) = self.per_servo.get_mut(servo) {
            *n += 1;
        }
        for slot in &mut self.causes {
            match slot {
                Some(cause) if cause.first.same_cause(error) => {
                    cause.count += 1;
                    return;
                }
                Some(_) => {}
                None => {
                    *slot = Some(RefusalCause { first: *error, servo, count: 1 });
                    return;
                }
            }
        }
        self.other += 1;
    }

    /// The causes recorded.
    pub fn causes(&self) -> impl Iterator<Item = &RefusalCause> {
        self.causes.iter().flatten()
    }
}

/// The header's `agent_version` is not this spine's: an agent of another protocol version
/// tried to attach (and refused itself), or (`agent` 0) commands were written without any
/// agent stating its version. Either way the spine ignores the commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionMismatch {
    /// The agent's version (0: none stated).
    pub agent: u32,
    /// This spine's version.
    pub spine: u32,
}

impl fmt::Display for VersionMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.agent {
            0 => write!(
                f,
                "an agent wrote commands without stating its protocol version (agent_version 0), this spine speaks {}; \
                 the spine ignores them: attach with the rtloop agent library, which writes its version",
                self.spine
            ),
            agent => write!(
                f,
                "agent speaks protocol version {agent}, this spine {}; the spine ignores its commands: rebuild the \
                 agent against this rtloop's rtloop_agent.h",
                self.spine
            ),
        }
    }
}

/// The spine's counters (also published in every state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Liveness timeouts.
    pub timeouts: u64,
    /// Armings, the first included (the state's `rearms`).
    pub rearms: u64,
    /// Servo commands refused by validation ([`Spine::note_rejected`]).
    pub rejected: u64,
    /// Cycles whose command could not be read consistently (the agent was mid-write on every
    /// try), at most one per cycle.
    pub torn: u64,
    /// New commands seen (heartbeats).
    pub commands: u64,
    /// New commands ignored because the header's `agent_version` was not this spine's.
    pub wrong_version: u64,
    /// Resets of the simulated world done ([`Spine::answer_reset`] with `reset::DONE`).
    pub resets: u64,
    /// Reset requests refused ([`Spine::answer_reset`] with a refusal).
    pub resets_refused: u64,
}

/// The spine's side of one segment. Dropping it publishes status `ENDED` and removes the
/// segment.
pub struct Spine {
    name: String,
    fd: OwnedFd,
    map: Mapping,
    header: Header,
    state: Box<StateBlock>,
    state_seq: u64,
    /// The last command followed (valid while `status` is FOLLOWING).
    command: Box<CommandBlock>,
    /// Where reads land before they are judged.
    scratch: Box<CommandBlock>,
    status: u32,
    seen_heartbeat: u64,
    /// Sequence of the command block at the last consistent read.
    seen_seq: Option<u64>,
    last_beat_ns: u64,
    arm_token: u64,
    rng: u64,
    counters: Counters,
    last_rejected_cycle: Option<u64>,
    /// What validation refused, by servo and cause.
    refusals: Refusals,
    /// The segment was lost under the spine (sticky: once lost, always lost).
    lost: Option<SegmentLoss>,
    /// Lockstep: how long to wait to be armed, ns.
    arm_wait_ns: u64,
    /// An agent registered its pid at some point (so `agent_pid` back at 0 means it left).
    agent_seen: bool,
    /// The `agent_version` of the last command ignored for its version.
    ignored_version: Option<u32>,
    /// Foreign versions already reported (each once).
    reported_versions: [u32; REPORTED_VERSIONS],
    reported_len: usize,
    /// The last reset request answered, and how (`layout::reset`).
    reset_ack: u64,
    reset_result: u32,
    /// The status last published (a change rings the agent's bell in lockstep).
    published_status: u32,
}

// SAFETY: the mapping is owned by the Spine (unmapped only in its drop) and all accesses to
// it go through `&mut self` or atomics, so moving the Spine to another thread is sound.
unsafe impl Send for Spine {}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D4_9BB1_3311_33EB);
    z ^ (z >> 31)
}

impl Spine {
    /// Create `/dev/shm/rtloop-NAME` (exclusively, mode 0600), size and map it, and publish
    /// the header and a first state (status `WAITING`). Returns a warning when it replaced a
    /// stale segment left by a dead spine.
    pub fn create(config: &SpineConfig) -> Result<(Spine, Option<String>), SpineError> {
        let name = config.name.as_str();
        shm::validate_name(name).map_err(SpineError::Name)?;
        if config.servos.len() > MAX_SERVOS {
            return Err(SpineError::TooManyServos(config.servos.len()));
        }
        if !(config.rate_hz.is_finite() && config.rate_hz > 0.0) {
            return Err(SpineError::Rate(config.rate_hz));
        }
        if config.timeout_ns == 0 {
            return Err(SpineError::Timeout);
        }
        let io_err = |op, err| SpineError::Io { name: name.to_string(), op, err };
        let mut warning = None;
        let fd = loop {
            match shm::open(name, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o600) {
                Ok(fd) => break fd,
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) && warning.is_none() => {
                    let leftover = inspect_existing(name)?;
                    shm::unlink(name).map_err(|e| io_err("remove the stale segment", e))?;
                    warning = Some(match leftover {
                        Leftover::Stale(pid) => format!(
                            "removed the stale agent segment rtloop-{name} left by spine pid {pid}, which is no longer \
                             running"
                        ),
                        Leftover::Headerless(size) => format!(
                            "removed /dev/shm/rtloop-{name}, a leftover of {size} bytes that holds no segment header \
                             (a segment truncated under a spine that could not clean up)"
                        ),
                    });
                }
                Err(e) => return Err(io_err("create", e)),
            }
        };
        // Whatever the umask: exactly 0600.
        // SAFETY: `fd` is open.
        if unsafe { libc::fchmod(std::os::fd::AsRawFd::as_raw_fd(&fd), 0o600) } != 0 {
            let e = io::Error::last_os_error();
            let _ = shm::unlink(name);
            return Err(io_err("set the mode of", e));
        }
        // SAFETY: `fd` is open.
        if unsafe { libc::ftruncate(std::os::fd::AsRawFd::as_raw_fd(&fd), TOTAL_SIZE as libc::off_t) } != 0 {
            let e = io::Error::last_os_error();
            let _ = shm::unlink(name);
            return Err(io_err("size", e));
        }
        let map = match Mapping::new(&fd, TOTAL_SIZE, true) {
            Ok(m) => m,
            Err(e) => {
                let _ = shm::unlink(name);
                return Err(io_err("map", e));
            }
        };
        let period_ns = (1e9 / config.rate_hz).round().clamp(1.0, u64::MAX as f64) as u64;
        let mut header = Header::zeroed_header();
        header.magic = MAGIC;
        header.version = VERSION;
        header.header_size = size_of::<Header>() as u32;
        header.state_offset = STATE_OFFSET as u32;
        header.state_size = size_of::<StateBlock>() as u32;
        header.command_offset = COMMAND_OFFSET as u32;
        header.command_size = size_of::<CommandBlock>() as u32;
        header.total_size = TOTAL_SIZE as u64;
        header.max_servos = MAX_SERVOS as u32;
        header.servo_count = config.servos.len() as u32;
        header.rate_hz = config.rate_hz;
        header.period_ns = period_ns;
        header.timeout_ns = config.timeout_ns;
        header.lockstep = u32::from(config.lockstep);
        header.spine_pid = shm::my_pid();
        header.servos[..config.servos.len()].copy_from_slice(&config.servos);

        let mut rng = (header.spine_pid as u64) ^ shm::monotonic_ns() ^ (map.ptr() as u64).rotate_left(32);
        let mut spine = Spine {
            name: name.to_string(),
            fd,
            map,
            header,
            state: Box::new(StateBlock::empty()),
            state_seq: 0,
            command: Box::new(CommandBlock::empty()),
            scratch: Box::new(CommandBlock::empty()),
            status: status::WAITING,
            seen_heartbeat: 0,
            seen_seq: None,
            last_beat_ns: 0,
            arm_token: 0,
            rng: 0,
            counters: Counters::default(),
            last_rejected_cycle: None,
            refusals: Refusals::default(),
            lost: None,
            arm_wait_ns: config.arm_wait_ns,
            agent_seen: false,
            ignored_version: None,
            reported_versions: [0; REPORTED_VERSIONS],
            reported_len: 0,
            reset_ack: 0,
            reset_result: crate::layout::reset::NONE,
            published_status: status::NONE,
        };
        spine.arm_token = next_token(&mut rng, 0);
        spine.rng = rng;
        // Touch every page now (ftruncate's pages are allocated on first write), write the
        // header with magic last, then the first state.
        // SAFETY: the mapping is TOTAL_SIZE bytes, ours, and nobody can have a view of its
        // contents yet beyond the magic word, which stays 0 until the release store below.
        unsafe {
            for i in 1..TOTAL_SIZE / 8 {
                (*spine.map.ptr().cast::<AtomicU64>().add(i)).store(0, Ordering::Relaxed);
            }
            header_atomics::store_header(spine.map.ptr(), &spine.header);
        }
        spine.state.servo_count = spine.header.servo_count;
        spine.publish(0);
        Ok((spine, warning))
    }

    /// The agent name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The header this spine published (its own copy).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The spine's status ([`status`]).
    pub fn status(&self) -> u32 {
        self.status
    }

    /// Whether the spine follows the agent's commands.
    pub fn following(&self) -> bool {
        self.status == status::FOLLOWING
    }

    /// The current arm token (published in every state).
    pub fn arm_token(&self) -> u64 {
        self.arm_token
    }

    /// The counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The state to publish next: fill `cycle`, `time_ns`, `imu` and `servos` before
    /// [`Spine::publish`]. The spine's own fields (`status`, counters, `arm_token`,
    /// `stamp_ns`, `servo_count`) are overwritten by `publish`.
    pub fn state_mut(&mut self) -> &mut StateBlock {
        &mut self.state
    }

    /// Publish the state (seqlock write), stamped `now_ns` (CLOCK_MONOTONIC). No allocation;
    /// the agent never delays it. In a lockstep run, a state the agent must answer (its
    /// `awaiting`, set by the caller through [`Spine::state_mut`]) or a new status rings
    /// the agent's bell (one `FUTEX_WAKE` when it sleeps on it); so does status `ENDED`. A
    /// free-running publish makes no system call.
    pub fn publish(&mut self, now_ns: u64) {
        let s = &mut *self.state;
        s.stamp_ns = now_ns;
        s.status = self.status;
        s.servo_count = self.header.servo_count;
        s.timeouts = self.counters.timeouts;
        s.rearms = self.counters.rearms;
        s.arm_token = self.arm_token;
        s.rejected = self.counters.rejected;
        s.torn = self.counters.torn;
        s.reset_ack = self.reset_ack;
        s.reset_result = self.reset_result;
        s.resets = self.counters.resets;
        // SAFETY: the state block is inside our mapping, 64-byte aligned, and the spine is
        // its only writer (agents only read it; a hostile agent's writes there race only
        // with atomics, never with a plain access).
        unsafe { seqlock::write(self.map.ptr().add(STATE_OFFSET), &*self.state, &mut self.state_seq) };
        let changed = self.status != self.published_status;
        self.published_status = self.status;
        let lockstep = self.header.lockstep != 0;
        if (lockstep && (changed || self.state.awaiting != 0)) || self.status == status::ENDED {
            self.ring_agent();
        }
    }

    /// Ring the agent's bell: whoever sleeps on it looks at the state again.
    pub fn ring_agent(&self) {
        // SAFETY: the header is inside our mapping (the guard keeps it mapped); the bell
        // words are only accessed atomically.
        let (bell_word, sleepers) = unsafe { header_atomics::state_bell(self.map.ptr()) };
        bell::ring(bell_word, sleepers);
    }

    /// Whether the followed command answers `cycle` in lockstep: its `for_cycle` is
    /// `cycle`, or it is held over it (`for_cycle < cycle < for_cycle + hold_cycles`).
    pub fn covers(&self, cycle: u64) -> bool {
        let c = &*self.command;
        let hold = u64::from(c.hold_cycles.clamp(1, crate::layout::MAX_HOLD_CYCLES));
        self.following() && c.for_cycle <= cycle && cycle - c.for_cycle < hold
    }

    /// Look for a new command at `now_ns` (the caller's monotonic clock) and keep the
    /// agent's liveness: a consistent read whose heartbeat differs from the last one seen is
    /// a new command. While following, a heartbeat older than the timeout sends the spine
    /// safe. No allocation, no system call, at most [`SPINE_READ_TRIES`] block copies.
    ///
    /// Meant to be called once per cycle: each [`Poll::Torn`] it returns counts one torn
    /// cycle.
    pub fn poll_command(&mut self, now_ns: u64) -> Poll {
        if self.check_segment().is_some() {
            return Poll::SegmentLost;
        }
        let outcome = self.look(now_ns);
        if outcome == Poll::Torn {
            self.counters.torn += 1;
        }
        if self.status == status::FOLLOWING && now_ns.saturating_sub(self.last_beat_ns) > self.header.timeout_ns {
            self.time_out();
            return Poll::TimedOut;
        }
        outcome
    }

    /// One look at the command block, without the liveness timeout and without counting a
    /// torn read.
    fn look(&mut self, now_ns: u64) -> Poll {
        // SAFETY: the command block is inside our mapping and 64-byte aligned.
        let seq = unsafe { seqlock::sequence(self.map.ptr().add(COMMAND_OFFSET)) };
        // The sequence of the last consistent read, unchanged: no new command, and no copy
        // (a copy while the agent writes would only slow both sides down).
        if Some(seq) == self.seen_seq {
            Poll::Unchanged
        } else {
            self.read_command(now_ns)
        }
    }

    /// The agent timed out: go safe, count it, publish a fresh token (with the next state).
    fn time_out(&mut self) {
        self.status = status::SAFE;
        self.counters.timeouts += 1;
        self.arm_token = next_token(&mut self.rng, self.arm_token);
    }

    /// Copy the command block out (seqlock) and judge it.
    fn read_command(&mut self, now_ns: u64) -> Poll {
        // SAFETY: the command block is inside our mapping and 64-byte aligned; the agent
        // writes it with atomics only (or, if hostile, with anything: we only copy words out).
        let read = unsafe { seqlock::read(self.map.ptr().add(COMMAND_OFFSET), &mut *self.scratch, SPINE_READ_TRIES) };
        // Zeros the guard put in place of a truncated segment are no command.
        if self.check_segment().is_some() {
            return Poll::SegmentLost;
        }
        if let Ok(s) = read {
            self.seen_seq = Some(s);
        }
        match read {
            Err(seqlock::Torn) => Poll::Torn,
            Ok(_) if self.scratch.heartbeat == self.seen_heartbeat => Poll::Unchanged,
            Ok(_) => {
                self.seen_heartbeat = self.scratch.heartbeat;
                self.counters.commands += 1;
                // Loaded after the read's acquire fence: an agent stores its version before
                // it writes a command, so this is at least the version of that command's
                // writer. Commands are only ever followed from an agent of this version.
                // SAFETY: the header is inside our mapping; agent_version is only accessed
                // atomically.
                let version = unsafe { header_atomics::agent_version(self.map.ptr()) }.load(Ordering::Relaxed);
                if version != VERSION {
                    self.counters.wrong_version += 1;
                    self.ignored_version = Some(version);
                    return Poll::Ignored;
                }
                match self.status {
                    status::FOLLOWING => {
                        self.take_command(now_ns);
                        Poll::Command
                    }
                    status::WAITING | status::SAFE if self.scratch.arm_token == self.arm_token => {
                        self.status = status::FOLLOWING;
                        self.counters.rearms += 1;
                        self.agent_seen |= self.agent_pid().is_some();
                        self.take_command(now_ns);
                        Poll::Armed
                    }
                    _ => Poll::Ignored,
                }
            }
        }
    }

    fn take_command(&mut self, now_ns: u64) {
        core::mem::swap(&mut self.command, &mut self.scratch);
        self.last_beat_ns = now_ns;
    }

    /// The last command followed, while the spine follows the agent (`None` otherwise).
    pub fn command(&self) -> Option<&CommandBlock> {
        self.following().then_some(&*self.command)
    }

    /// A reset the followed command asks for, not answered yet: `(request, seed)` when its
    /// `reset_request` differs from the last one answered (the state's `reset_ack`). Answer
    /// it with [`Spine::answer_reset`] before the next state is published.
    pub fn reset_request(&self) -> Option<(u64, u64)> {
        let cmd = self.command()?;
        (cmd.reset_request != self.reset_ack).then_some((cmd.reset_request, cmd.reset_seed))
    }

    /// The physical parameters the followed command's reset request asks for (read with
    /// [`Spine::reset_request`]; check them with [`crate::validate_domain`]).
    pub fn reset_domain(&self) -> Option<&crate::layout::DomainBlock> {
        self.command().map(|c| &c.domain)
    }

    /// Answer reset request `request` with `result` (`layout::reset`: `DONE` or a
    /// refusal), published with the next state and counted.
    pub fn answer_reset(&mut self, request: u64, result: u32) {
        self.reset_ack = request;
        self.reset_result = result;
        if result == crate::layout::reset::DONE {
            self.counters.resets += 1;
        } else {
            self.counters.resets_refused += 1;
        }
    }

    /// Servo slot `servo`'s command, validated against `limits`, while the spine follows the
    /// agent; `None` when it does not (the caller applies its safe command). On `Err` the
    /// caller keeps the servo's safe command for this cycle and calls
    /// [`Spine::note_rejected`].
    pub fn command_for(&self, servo: usize, limits: &Limits) -> Option<Result<ValidCommand, ServoCommandError>> {
        let cmd = self.command()?;
        let count = self.header.servo_count;
        if servo >= count as usize {
            return Some(Err(ServoCommandError::NoSuchServo { index: servo, count }));
        }
        if cmd.servo_count != count {
            return Some(Err(ServoCommandError::ServoCount { got: cmd.servo_count, expected: count }));
        }
        // `servo < count <= MAX_SERVOS`: in bounds of our own copy.
        Some(validate(&cmd.servos[servo], limits))
    }

    /// Count one refused servo command, `error` for servo slot `servo`, in `cycle`, and
    /// record its cause ([`Spine::refusals`]: fixed-size, no allocation). Returns true when it
    /// starts a burst (no refusal in the previous cycle): report an event then, once.
    pub fn note_rejected(&mut self, servo: usize, cycle: u64, error: &ServoCommandError) -> bool {
        self.counters.rejected += 1;
        self.refusals.note(servo, error);
        if self.last_rejected_cycle != Some(cycle) {
            self.refusals.cycles += 1;
        }
        let starts = !matches!(self.last_rejected_cycle, Some(c) if c == cycle || c.wrapping_add(1) == cycle);
        self.last_rejected_cycle = Some(cycle);
        starts
    }

    /// What validation refused so far: per servo slot, per cause (the first refusal of
    /// each, typed), and in how many cycles.
    pub fn refusals(&self) -> &Refusals {
        &self.refusals
    }

    /// Whether the segment is still the one this spine made, checked with two atomic loads
    /// (no system call: fit for every cycle): the mapping's last word — a file truncated
    /// below it faults there, and the guard replaces the mapping with zero pages — and the
    /// header's magic word, which a file truncated and grown again (or overwritten) no
    /// longer has. Once lost, always lost: the spine stops following commands (status
    /// `SHUTTING_DOWN`); its caller commands the servos safe and ends the run.
    ///
    /// A shrink that keeps the segment's last page and its magic word goes unseen here; it
    /// only zeroes the bytes past the new end once, as an agent writing zeros there would,
    /// and the spine still reads and writes only its own layout.
    pub fn check_segment(&mut self) -> Option<SegmentLoss> {
        if self.lost.is_none() {
            let truncated = self.map.probe();
            // SAFETY: the header is inside our mapping (the guard keeps it mapped); the
            // magic word is only accessed atomically.
            let magic = unsafe { &*self.map.ptr().cast::<AtomicU64>() }.load(Ordering::Relaxed);
            self.lost = if truncated {
                Some(SegmentLoss::Truncated)
            } else if magic != MAGIC {
                Some(SegmentLoss::Replaced)
            } else {
                None
            };
            if self.lost.is_some() {
                self.status = status::SHUTTING_DOWN;
            }
        }
        self.lost
    }

    /// The run is stopping: status `SHUTTING_DOWN`, commands no longer followed (published
    /// with the next state).
    pub fn begin_shutdown(&mut self) {
        self.status = status::SHUTTING_DOWN;
    }

    /// The pid of the attached agent, if one says it is attached (a positive pid: 0 is
    /// "none", and a negative value names no process).
    pub fn agent_pid(&self) -> Option<i32> {
        // SAFETY: the header is inside our mapping; agent_pid is only accessed atomically.
        let pid = unsafe { header_atomics::agent_pid(self.map.ptr()) }.load(Ordering::Relaxed);
        (pid > 0).then_some(pid)
    }

    /// Whether the agent is gone: the pid it registered is dead (a zombie included), or it
    /// registered once and `agent_pid` is back at 0 (it detached). One atomic load, plus
    /// `kill(pid, 0)` (and a read of `/proc/PID/stat` for a live pid).
    fn agent_left(&mut self) -> bool {
        match self.agent_pid() {
            Some(pid) => {
                self.agent_seen = true;
                shm::pid_dead(pid)
            }
            None => self.agent_seen,
        }
    }

    /// A foreign protocol version to report, once per distinct value: the header's
    /// `agent_version` when it is neither 0 nor this spine's (an agent of another version
    /// tried to attach), or the version of commands the spine ignored for it (0 included:
    /// commands written by no agent that stated a version). One atomic load; no allocation.
    pub fn version_mismatch(&mut self) -> Option<VersionMismatch> {
        // SAFETY: the header is inside our mapping; agent_version is only accessed atomically.
        let v = unsafe { header_atomics::agent_version(self.map.ptr()) }.load(Ordering::Relaxed);
        let candidates = [(v != 0 && v != VERSION).then_some(v), self.ignored_version.take()];
        for v in candidates.into_iter().flatten() {
            let reported = &self.reported_versions[..self.reported_len];
            if reported.contains(&v) {
                continue;
            }
            if let Some(slot) = self.reported_versions.get_mut(self.reported_len) {
                *slot = v;
                self.reported_len += 1;
                return Some(VersionMismatch { agent: v, spine: VERSION });
            }
        }
        None
    }

    /// Lockstep: wait, in wall-clock time, for the agent's command for `cycle` (simulated
    /// time stands still meanwhile). Spins for [`LOCKSTEP_SPIN_NS`], then sleeps on the
    /// agent's bell (the agent rings it with every command it writes), waking at least every
    /// [`LOCKSTEP_SLEEP_NS`] to look at its stop, the agent's liveness and its bounds: an
    /// idle spine costs no CPU. Ends with:
    /// * [`Lockstep::Command`]: a followed command that answers `cycle` ([`Spine::covers`]:
    ///   `for_cycle == cycle` or held over it; an arming one included) arrived — at once,
    ///   without waiting, when the last one is held over `cycle`;
    /// * [`Lockstep::AgentGone`]: the agent's registered pid is dead (a zombie included), or
    ///   it detached;
    /// * [`Lockstep::TimedOut`]: the spine was following an agent that never registered its
    ///   pid (so nothing tells whether it lives) and no command came within `timeout_ns`:
    ///   the spine went safe (the caller applies the safe command and goes on). An agent
    ///   that registered is waited for as long as its process lives — simulated time waits
    ///   for it however long it pauses — so it never times out here;
    /// * [`Lockstep::NotArmed`]: the spine was waiting to be armed (`WAITING` or `SAFE`) and
    ///   nothing armed it within [`SpineConfig::arm_wait_ns`];
    /// * [`Lockstep::SegmentLost`]: the segment was lost under the spine
    ///   ([`Spine::check_segment`]);
    /// * [`Lockstep::Stopped`]: `stop` returned true.
    ///
    /// A wait that ends without the command while the last read was torn counts one torn
    /// cycle. Blocks: for lockstep runs only, never on a real-time path.
    pub fn wait_command_for(&mut self, cycle: u64, stop: impl Fn() -> bool) -> Lockstep {
        // SAFETY: the header is inside our mapping (the guard keeps it mapped); the bell
        // words are only accessed atomically.
        let (bell_word, sleeping) = unsafe { header_atomics::command_bell(self.map.ptr()) };
        let start = shm::monotonic_ns();
        let mut torn;
        let outcome = loop {
            // Read before looking: a command written after this look moves the bell, and
            // the sleep below then does not happen.
            let seen = bell::value(bell_word);
            let look = self.look(shm::monotonic_ns());
            torn = look == Poll::Torn;
            if look == Poll::SegmentLost || self.check_segment().is_some() {
                break Lockstep::SegmentLost;
            }
            if self.covers(cycle) {
                break Lockstep::Command;
            }
            let now = shm::monotonic_ns();
            let waited = now.saturating_sub(start);
            // An agent on its own core answers within microseconds: spin a little first
            // (looks only: the clock is read above, the liveness checks come later).
            if waited < LOCKSTEP_SPIN_NS {
                core::hint::spin_loop();
                continue;
            }
            if stop() {
                break Lockstep::Stopped;
            }
            if self.agent_left() {
                break Lockstep::AgentGone;
            }
            let registered = self.agent_pid().is_some();
            let bound = if self.following() {
                if registered {
                    None
                } else {
                    Some(self.header.timeout_ns)
                }
            } else {
                Some(self.arm_wait_ns)
            };
            if let Some(bound) = bound {
                if waited > bound {
                    if self.following() {
                        self.time_out();
                        break Lockstep::TimedOut;
                    }
                    break Lockstep::NotArmed;
                }
            }
            let slice = if waited < LOCKSTEP_IDLE_AFTER_NS { LOCKSTEP_SLEEP_NS } else { LOCKSTEP_IDLE_SLEEP_NS };
            let left = bound.map_or(slice, |b| b.saturating_sub(waited).saturating_add(1));
            bell::sleep(bell_word, sleeping, seen, left.min(slice));
        };
        if torn && outcome != Lockstep::Command {
            self.counters.torn += 1;
        }
        outcome
    }
}

/// A fresh arm token: never 0, never `previous`.
fn next_token(rng: &mut u64, previous: u64) -> u64 {
    loop {
        let t = splitmix(rng);
        if t != 0 && t != previous {
            return t;
        }
    }
}

/// How long [`inspect_existing`] gives a segment that holds no header yet to get one, when
/// it looks like a spine's mid-creation (empty, or full-size zeros: a spine sizes it and
/// writes its header within microseconds), ns.
const HEADERLESS_SETTLE_NS: u64 = 100_000_000;

/// What an existing segment that may be replaced is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leftover {
    /// A segment of a spine that is no longer running (its pid).
    Stale(i32),
    /// A file of this user that holds no header (shorter than the frozen prefix, or that
    /// prefix all zeros): what a segment truncated under a spine that was then killed
    /// leaves; its size.
    Headerless(u64),
}

/// An existing segment blocks creation: what it is when the caller may replace it (a dead
/// spine's, or an empty leftover of this user), or the error that refuses creation. Never
/// follows a symbolic link, never waits on a FIFO, never replaces another user's file.
fn inspect_existing(name: &str) -> Result<Leftover, SpineError> {
    use std::os::unix::fs::FileExt;
    let foreign = |why| SpineError::Foreign { name: name.to_string(), why };
    let io_err = |err| SpineError::Io { name: name.to_string(), op: "inspect the existing", err };
    let fd = match shm::open(name, libc::O_RDONLY, 0) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(foreign("is a symbolic link")),
        Err(e) => return Err(io_err(e)),
    };
    let file = std::fs::File::from(fd);
    let start = shm::monotonic_ns();
    loop {
        let st = shm::fstat(&file).map_err(io_err)?;
        // The open did not block (shm::open adds O_NONBLOCK): a FIFO someone planted here is
        // refused now rather than waited on.
        if let Some(why) = shm::not_regular(&st) {
            return Err(foreign(why));
        }
        if st.st_uid != shm::euid() {
            return Err(SpineError::OtherUser { name: name.to_string(), owner: shm::describe_owner(st.st_uid) });
        }
        // Read, not mapped: a file that shrinks meanwhile only makes the read short.
        let mut prefix = [0u8; FROZEN_PREFIX];
        let mut got = 0;
        while got < FROZEN_PREFIX {
            match file.read_at(&mut prefix[got..], got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(e)),
            }
        }
        if got < FROZEN_PREFIX || prefix.iter().all(|&b| b == 0) {
            // A spine creating its segment shows it empty, then full-size zeros, for
            // microseconds: give exactly those a moment to become a segment.
            let size = st.st_size as u64;
            let creating = size == 0 || size == TOTAL_SIZE as u64;
            if creating && shm::monotonic_ns().saturating_sub(start) < HEADERLESS_SETTLE_NS {
                std::thread::sleep(std::time::Duration::from_millis(5));
                continue;
            }
            return Ok(Leftover::Headerless(size));
        }
        let word = |at: usize| u64::from_le_bytes(prefix[at..at + 8].try_into().unwrap_or([0; 8]));
        let magic = word(0);
        let pid = word(core::mem::offset_of!(Header, spine_pid)) as u32 as i32;
        if magic != MAGIC {
            return Err(foreign("is not an rtloop agent segment (wrong magic)"));
        }
        // A spine writes its own (positive) pid; 0 or a negative one names no process (kill
        // would address a process group or every process), so no live spine owns the file.
        if pid <= 0 {
            return Err(foreign("names no spine process (its spine_pid is 0 or negative)"));
        }
        if !shm::pid_dead(pid) {
            return Err(SpineError::Owned { name: name.to_string(), pid });
        }
        return Ok(Leftover::Stale(pid));
    }
}

impl Drop for Spine {
    fn drop(&mut self) {
        self.status = status::ENDED;
        let now = shm::monotonic_ns();
        self.publish(now);
        // Remove the name only if it is still our segment (same inode).
        let ours = match (shm::fstat(&self.fd), std::fs::metadata(shm::segment_path(&self.name))) {
            (Ok(a), Ok(b)) => {
                use std::os::unix::fs::MetadataExt;
                a.st_ino == b.ino() && a.st_dev == b.dev()
            }
            _ => false,
        };
        if ours {
            let _ = shm::unlink(&self.name);
        }
        // The mapping and the descriptor close with their own drops.
    }
}

impl Header {
    fn zeroed_header() -> Header {
        <Header as crate::layout::Plain>::zeroed()
    }
}
