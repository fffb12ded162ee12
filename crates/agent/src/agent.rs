//! The agent's side: attach, read state, write commands (each one a heartbeat), arm, notice
//! the spine going away.

use crate::layout::{
    status, CommandBlock, Header, Plain, StateBlock, COMMAND_OFFSET, FROZEN_PREFIX, MAGIC, MAX_SERVOS, STATE_OFFSET,
    TOTAL_SIZE, VERSION,
};
use crate::shm::{self, Mapping, NameError};
use crate::{bell, header_atomics, seqlock};
use core::sync::atomic::{AtomicU64, Ordering};
use std::fmt;
use std::io;
use std::os::fd::OwnedFd;

/// Seqlock tries per [`Agent::read_state`] (the agent may spin; the spine's write is short).
pub const AGENT_READ_TRIES: u32 = 100_000;

/// Why an agent could not attach. Each displays as one sentence; the error a variant wraps
/// is its `source()`. [`AgentAttachError::Io`] keeps the operating system's words in its
/// sentence too, as [`crate::SpineError::Io`] does and as the C agent's header does.
#[derive(Debug)]
#[non_exhaustive]
pub enum AgentAttachError {
    /// The agent name is malformed.
    Name(NameError),
    /// No segment of that name (no spine running yet): retry.
    NotFound(String),
    /// The segment exists but its spine has not finished creating it: retry.
    NotReady(String),
    /// The segment is not an rtloop agent segment.
    BadMagic(String),
    /// The name is taken by something that is not a regular file (a FIFO someone planted in
    /// the world-writable `/dev/shm`, a directory, ...): never waited on, never retried.
    NotRegular {
        /// The agent name.
        name: String,
        /// What it is instead ("is a FIFO (named pipe), not a regular file").
        what: &'static str,
    },
    /// The segment belongs to another user than this agent's effective user: whoever made
    /// it, it is not a spine of this user's (a spine makes its segment 0600, its own).
    OtherUser {
        /// The agent name.
        name: String,
        /// The owner, as [`crate::describe_owner`] names it ("user nobody (uid 65534)").
        owner: String,
        /// This agent's effective uid.
        euid: u32,
    },
    /// The segment is smaller than this agent's layout needs.
    TooSmall {
        /// The agent name.
        name: String,
        /// The segment's size.
        size: u64,
    },
    /// The spine speaks another protocol version.
    Version {
        /// The spine's version.
        spine: u32,
        /// This agent's version.
        agent: u32,
    },
    /// Same version, different layout (a corrupt or hand-made header).
    Layout {
        /// Which size or offset.
        what: &'static str,
        /// The spine's value.
        spine: u64,
        /// This agent's value.
        agent: u64,
    },
    /// Another live agent is attached.
    Busy {
        /// The agent name.
        name: String,
        /// The other agent's pid.
        pid: i32,
    },
    /// A system call failed.
    Io {
        /// The agent name.
        name: String,
        /// What the agent was doing.
        op: &'static str,
        /// The error.
        err: io::Error,
    },
}

impl AgentAttachError {
    /// Whether retrying soon may succeed (the spine is not there yet, or still starting).
    pub fn is_retryable(&self) -> bool {
        matches!(self, AgentAttachError::NotFound(_) | AgentAttachError::NotReady(_))
    }
}

impl fmt::Display for AgentAttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentAttachError::Name(e) => e.fmt(f),
            AgentAttachError::NotFound(n) => {
                write!(f, "no spine is running with agent name {n} (/dev/shm/rtloop-{n} does not exist); start `rtloop run --agent {n}` first")
            }
            AgentAttachError::NotReady(n) => write!(f, "the spine is still creating /dev/shm/rtloop-{n}; retry in a moment"),
            AgentAttachError::BadMagic(n) => {
                write!(f, "/dev/shm/rtloop-{n} is not an rtloop agent segment (wrong magic); check the agent name")
            }
            AgentAttachError::NotRegular { name, what } => {
                write!(f, "/dev/shm/rtloop-{name} {what}; remove it if it is yours, or use another agent name")
            }
            AgentAttachError::OtherUser { name, owner, euid } => write!(
                f,
                "/dev/shm/rtloop-{name} belongs to {owner}, not to this agent's user (uid {euid}); attach only to a \
                 spine your own user runs, or use another agent name"
            ),
            AgentAttachError::TooSmall { name, size } => write!(
                f,
                "/dev/shm/rtloop-{name} is {size} bytes, smaller than an rtloop agent segment ({TOTAL_SIZE}); check the agent name"
            ),
            AgentAttachError::Version { spine, agent } => write!(
                f,
                "the spine speaks protocol version {spine}, this agent {agent}; rebuild the agent against the spine's rtloop_agent.h"
            ),
            AgentAttachError::Layout { what, spine, agent } => write!(
                f,
                "the spine's {what} is {spine} but this agent expects {agent}; rebuild the agent against the spine's rtloop_agent.h"
            ),
            AgentAttachError::Busy { name, pid } => {
                write!(f, "another agent (pid {pid}) is attached to rtloop-{name}; stop it first")
            }
            AgentAttachError::Io { name, op, err } => write!(f, "cannot {op} /dev/shm/rtloop-{name}: {err}"),
        }
    }
}

impl std::error::Error for AgentAttachError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AgentAttachError::Name(e) => Some(e),
            AgentAttachError::Io { err, .. } => Some(err),
            _ => None,
        }
    }
}

/// Why the agent should stop: the spine went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpineGone {
    /// The spine published status `ENDED`.
    Ended,
    /// The segment was removed (unlinked).
    Unlinked,
    /// The spine's process is gone (killed: it could not clean up).
    Dead,
    /// The segment was lost under the agent: another process truncated it (the guard then
    /// gave the agent's mapping zero pages instead of letting SIGBUS kill it), or truncated
    /// and grew it again (its magic word is gone). The spine sees the same and ends its run.
    SegmentLost,
}

/// The agent's side of one segment. Dropping it detaches (clears `agent_pid`).
pub struct Agent {
    fd: OwnedFd,
    map: Mapping,
    header: Header,
    state: Box<StateBlock>,
    command: Box<CommandBlock>,
    command_seq: u64,
    pid: i32,
}

// SAFETY: the mapping is owned by the Agent and only accessed through `&mut self` or atomics.
unsafe impl Send for Agent {}

impl Agent {
    /// Attach to the spine's segment `/dev/shm/rtloop-NAME`: read-write, never created.
    /// Checks magic, version and every size; writes this agent's version (so the spine can
    /// report a mismatch) and pid. Continues the command sequence and heartbeat where the
    /// block stands.
    pub fn attach(name: &str) -> Result<Agent, AgentAttachError> {
        shm::validate_name(name).map_err(AgentAttachError::Name)?;
        let io_err = |op, err| AgentAttachError::Io { name: name.to_string(), op, err };
        let fd = match shm::open(name, libc::O_RDWR, 0) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(AgentAttachError::NotFound(name.to_string()))
            }
            Err(e) => return Err(io_err("open", e)),
        };
        let st = shm::fstat(&fd).map_err(|e| io_err("inspect", e))?;
        // The open did not block (shm::open adds O_NONBLOCK); a FIFO has size 0 and would
        // otherwise read as "not ready", retried for ever.
        if let Some(what) = shm::not_regular(&st) {
            return Err(AgentAttachError::NotRegular { name: name.to_string(), what });
        }
        // Another user's file is never a segment of a spine of ours (a spine makes its own,
        // mode 0600): refused before anything is read from it or written into it.
        let euid = shm::euid();
        if st.st_uid != euid {
            return Err(AgentAttachError::OtherUser {
                name: name.to_string(),
                owner: shm::describe_owner(st.st_uid),
                euid,
            });
        }
        let size = st.st_size as u64;
        if size == 0 {
            return Err(AgentAttachError::NotReady(name.to_string()));
        }
        if size < FROZEN_PREFIX as u64 {
            return Err(AgentAttachError::TooSmall { name: name.to_string(), size });
        }
        // Map only what the file has (at most our layout); check before reading further.
        let len = (size as usize).min(TOTAL_SIZE);
        let map = Mapping::new(&fd, len, true).map_err(|e| io_err("map", e))?;
        let base = map.ptr();
        // SAFETY: at least FROZEN_PREFIX bytes are mapped; the magic word is accessed
        // atomically only.
        let magic = unsafe { &*base.cast::<AtomicU64>() }.load(Ordering::Acquire);
        if magic == 0 {
            return Err(AgentAttachError::NotReady(name.to_string()));
        }
        if magic != MAGIC {
            return Err(AgentAttachError::BadMagic(name.to_string()));
        }
        // SAFETY: the frozen prefix is mapped; these fields are accessed atomically only.
        let version = unsafe {
            header_atomics::agent_version(base).store(VERSION, Ordering::Relaxed);
            header_atomics::version(base).load(Ordering::Relaxed)
        };
        if version != VERSION {
            return Err(AgentAttachError::Version { spine: version, agent: VERSION });
        }
        if size < TOTAL_SIZE as u64 {
            return Err(AgentAttachError::TooSmall { name: name.to_string(), size });
        }
        let mut header = Header::zeroed();
        // SAFETY: TOTAL_SIZE bytes are mapped (checked just above), so is the header.
        unsafe { header_atomics::load_header(base, &mut header) };
        let checks: [(&'static str, u64, u64); 7] = [
            ("header size", header.header_size.into(), size_of::<Header>() as u64),
            ("state offset", header.state_offset.into(), STATE_OFFSET as u64),
            ("state size", header.state_size.into(), size_of::<StateBlock>() as u64),
            ("command offset", header.command_offset.into(), COMMAND_OFFSET as u64),
            ("command size", header.command_size.into(), size_of::<CommandBlock>() as u64),
            ("total size", header.total_size, TOTAL_SIZE as u64),
            ("servo capacity", header.max_servos.into(), MAX_SERVOS as u64),
        ];
        for (what, spine, agent) in checks {
            if spine != agent {
                return Err(AgentAttachError::Layout { what, spine, agent });
            }
        }
        if header.servo_count > MAX_SERVOS as u32 {
            return Err(AgentAttachError::Layout {
                what: "servo count",
                spine: header.servo_count.into(),
                agent: MAX_SERVOS as u64,
            });
        }
        let pid = shm::my_pid();
        // SAFETY: the header is mapped; agent_pid is accessed atomically only.
        let slot = unsafe { header_atomics::agent_pid(base) };
        let mut current = slot.load(Ordering::Relaxed);
        loop {
            if current != 0 && current != pid && !shm::pid_dead(current) {
                return Err(AgentAttachError::Busy { name: name.to_string(), pid: current });
            }
            match slot.compare_exchange(current, pid, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        let mut agent = Agent {
            fd,
            map,
            header,
            state: Box::new(StateBlock::empty()),
            command: Box::new(CommandBlock::empty()),
            command_seq: 0,
            pid,
        };
        // Continue from the block as it stands (a previous agent may have written it).
        let mut current = CommandBlock::empty();
        // SAFETY: the command block is mapped, 64-byte aligned, accessed atomically only.
        if let Ok(seq) = unsafe { seqlock::read(agent.map.ptr().add(COMMAND_OFFSET), &mut current, AGENT_READ_TRIES) } {
            agent.command_seq = seq;
            agent.command.heartbeat = current.heartbeat;
        } else {
            // A previous writer died mid-write: step past its odd sequence.
            // SAFETY: as above.
            let seq = unsafe { &*agent.map.ptr().add(COMMAND_OFFSET).cast::<AtomicU64>() }.load(Ordering::Relaxed);
            agent.command_seq = seq.wrapping_add(1) & !1;
        }
        // No reset pending: start from the last request the spine answered (a request a
        // previous agent left unanswered is not this agent's to make).
        if let Ok(state) = agent.read_state() {
            let ack = state.reset_ack;
            agent.command.reset_request = ack;
        }
        agent.command.servo_count = agent.header.servo_count;
        Ok(agent)
    }

    /// The header as read at attach.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Read the newest state (seqlock). `Err` only if the spine stayed mid-write for
    /// [`AGENT_READ_TRIES`] tries (it never does unless it died mid-write).
    pub fn read_state(&mut self) -> Result<&StateBlock, seqlock::Torn> {
        // SAFETY: the state block is mapped, 64-byte aligned, accessed atomically only.
        unsafe { seqlock::read(self.map.ptr().add(STATE_OFFSET), &mut *self.state, AGENT_READ_TRIES)? };
        Ok(&self.state)
    }

    /// The state block's sequence as it is now (one acquire load, no copy): while it equals
    /// the `seq` of the state last read, nothing new was published — a cheap look for a
    /// polling agent (the C header's `rtloop_agent_state_sequence`).
    pub fn state_sequence(&self) -> u64 {
        // SAFETY: the state block is mapped and 64-byte aligned; its sequence word is
        // accessed atomically only.
        unsafe { seqlock::sequence(self.map.ptr().add(STATE_OFFSET)) }
    }

    /// The state last read.
    pub fn state(&self) -> &StateBlock {
        &self.state
    }

    /// The command to send next: fill `for_cycle` and `servos` (slots `0..servo_count`),
    /// then [`Agent::send`]. `heartbeat` and `servo_count` are set by `send`.
    pub fn command_mut(&mut self) -> &mut CommandBlock {
        &mut self.command
    }

    /// Write the command (seqlock) with the next heartbeat; returns the heartbeat. States
    /// this agent's protocol version first (one atomic store): the spine follows commands
    /// only while `agent_version` is its own, and an agent of another version that tried
    /// to attach meanwhile overwrote it.
    pub fn send(&mut self) -> u64 {
        // SAFETY: the header is mapped; agent_version is accessed atomically only.
        unsafe { header_atomics::agent_version(self.map.ptr()) }.store(VERSION, Ordering::Relaxed);
        self.command.heartbeat = self.command.heartbeat.wrapping_add(1);
        self.command.servo_count = self.header.servo_count;
        // SAFETY: the command block is mapped, 64-byte aligned; this agent is its only
        // writer (attach refused a second live agent).
        unsafe { seqlock::write(self.map.ptr().add(COMMAND_OFFSET), &*self.command, &mut self.command_seq) };
        self.ring_spine();
        self.command.heartbeat
    }

    /// Ring the spine's bell (after every command [`Agent::send`] writes): a lockstep
    /// spine sleeping on it wakes and reads the command at once. One atomic add; the
    /// `FUTEX_WAKE` system call only when the spine sleeps.
    pub fn ring_spine(&self) {
        // SAFETY: the header is mapped; the bell words are only accessed atomically.
        let (bell_word, sleeping) = unsafe { header_atomics::command_bell(self.map.ptr()) };
        bell::ring(bell_word, sleeping);
    }

    /// The spine's bell as it is now: read it *before* looking at the state, then pass it to
    /// [`Agent::sleep_until_rung`] if there was nothing to do.
    pub fn state_bell(&self) -> u32 {
        // SAFETY: the header is mapped; the bell words are only accessed atomically.
        let (bell_word, _) = unsafe { header_atomics::state_bell(self.map.ptr()) };
        bell::value(bell_word)
    }

    /// Sleep until the spine rings its bell (a lockstep spine rings when it publishes a
    /// state it waits on, a new status, or its end) or `timeout_ns` passes; at once if the
    /// bell moved since `seen` ([`Agent::state_bell`]). May return early; look again then.
    /// No CPU is used meanwhile. A free-running spine rings only for a new status: poll
    /// its states instead.
    pub fn sleep_until_rung(&self, seen: u32, timeout_ns: u64) {
        // SAFETY: the header is mapped; the bell words are only accessed atomically.
        let (bell_word, sleepers) = unsafe { header_atomics::state_bell(self.map.ptr()) };
        bell::sleep(bell_word, sleepers, seen, timeout_ns);
    }

    /// Ask for a reset of the simulated world with the next [`Agent::send`]: the next
    /// request number after both this agent's last one and the last one the spine answered
    /// (the state's `reset_ack`), with `seed` and the world's physical parameters `domain`
    /// ([`DomainBlock::NOMINAL`](crate::DomainBlock::NOMINAL): the nominal world). Returns
    /// the request number: the reset is answered in the first state whose `reset_ack`
    /// equals it (`reset_result` says how).
    pub fn request_reset(&mut self, seed: u64, domain: &crate::DomainBlock) -> u64 {
        let next = self.command.reset_request.max(self.state.reset_ack).wrapping_add(1);
        self.command.reset_request = next;
        self.command.reset_seed = seed;
        self.command.domain = *domain;
        next
    }

    /// Echo `token` in the commands from now on (arming is explicit: pass the
    /// `arm_token` of a state you have read).
    pub fn arm(&mut self, token: u64) {
        self.command.arm_token = token;
    }

    /// If the last state read says the spine waits to be armed (status `WAITING` or `SAFE`)
    /// with a token the commands do not echo yet, echo it and return true: the next
    /// [`Agent::send`] arms the spine.
    pub fn rearm_if_needed(&mut self) -> bool {
        let s = &self.state;
        if matches!(s.status, status::WAITING | status::SAFE) && s.arm_token != self.command.arm_token {
            self.command.arm_token = s.arm_token;
            return true;
        }
        false
    }

    /// Whether the segment was lost under the agent ([`SpineGone::SegmentLost`]): truncated
    /// (an access past its new end faulted, and the guard gave the mapping zero pages) or
    /// truncated and grown again (the magic word is gone). Two atomic loads, no system call.
    pub fn segment_lost(&self) -> bool {
        let truncated = self.map.probe();
        // SAFETY: the header is mapped (the guard keeps it so); the magic word is only
        // accessed atomically.
        let magic = unsafe { &*self.map.ptr().cast::<AtomicU64>() }.load(Ordering::Relaxed);
        truncated || magic != MAGIC
    }

    /// Whether the spine went away, judged from the segment ([`Agent::segment_lost`]), the
    /// last state read, the segment's link count and the spine's pid (two system calls:
    /// call it at a modest rate).
    pub fn spine_gone(&self) -> Option<SpineGone> {
        if self.segment_lost() {
            return Some(SpineGone::SegmentLost);
        }
        if self.state.status == status::ENDED {
            return Some(SpineGone::Ended);
        }
        if matches!(shm::fstat(&self.fd), Ok(st) if st.st_nlink == 0) {
            return Some(SpineGone::Unlinked);
        }
        if shm::pid_dead(self.header.spine_pid) {
            return Some(SpineGone::Dead);
        }
        None
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // SAFETY: the header is mapped; agent_pid is accessed atomically only.
        let slot = unsafe { header_atomics::agent_pid(self.map.ptr()) };
        let _ = slot.compare_exchange(self.pid, 0, Ordering::AcqRel, Ordering::Relaxed);
        // A lockstep spine sleeping on its bell sees at once that its agent left.
        self.ring_spine();
    }
}
