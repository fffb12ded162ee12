//! # rtloop-agent — the shared-memory protocol between the real-time loop and an agent
//!
//! What it is for: rtloop's real-time loop (the *spine*) publishes every cycle's robot
//! state — servo replies, IMU, liveness — into a POSIX shared-memory segment
//! `/dev/shm/rtloop-NAME`, and applies the latest command an external *agent* process, in
//! any language, writes there. This crate is that protocol: the fixed binary layout
//! ([`layout`]), the seqlock both sides use ([`seqlock`]), the spine's side ([`Spine`]: create,
//! publish, poll, liveness and arming, validation, lockstep) and a Rust agent ([`Agent`]).
//! `include/rtloop_agent.h` is the same protocol for C, `examples/agent.c` (workspace root)
//! a complete C agent, and `docs/agent-protocol.md` the specification for any language.
//!
//! What it must never do:
//! * **block the spine**: [`Spine::publish`] and [`Spine::poll_command`] are bounded, allocate
//!   nothing, take no lock and make no system call; a stalled, slow or absent agent only
//!   makes the spine go safe after the timeout. (Only [`Spine::wait_command_for`], for
//!   lockstep runs, waits.)
//! * **let a hostile agent corrupt the spine's memory or steer it past its limits**: the spine
//!   only ever *copies out* of the shared mapping (atomic word loads) into its own memory,
//!   never trusts a size, count or index read from it (capacities are compile-time
//!   constants, the servo count is the spine's own), and validates every command field
//!   ([`validate()`]) before anything is sent to a servo.
//! * **follow an agent implicitly**: arming is always an explicit echo of the published arm
//!   token, the first time and after every timeout.
//! * **die of a segment changed under it**: any process of the user can truncate the file;
//!   every mapping is guarded against the SIGBUS that follows (`guard`: a process-wide
//!   handler maps zero pages over a faulting segment and marks it lost), and
//!   [`Spine::check_segment`] and [`Agent::segment_lost`] see it with two atomic loads.
//! * **trust another user's file**: the spine and the agent refuse a segment their effective
//!   user does not own, naming the owner.

#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod agent;
mod bell;
pub mod domain;
mod guard;
pub mod layout;
pub mod seqlock;
pub mod shm;
pub mod spine;
pub mod validate;

pub use agent::{Agent, AgentAttachError, SpineGone};
pub use domain::{validate_domain, DomainError};
pub use layout::{
    CommandBlock, DomainBlock, Header, PoseBlock, PushBlock, RawServoCommand, RawServoState, ServoInfo, StateBlock,
};
pub use shm::{describe_owner, euid, monotonic_ns, pid_dead, segment_path, user_name, validate_name, NameError};
pub use spine::{
    Counters, Lockstep, Poll, RefusalCause, Refusals, SegmentLoss, Spine, SpineConfig, SpineError, VersionMismatch,
    DEFAULT_ARM_WAIT_NS, DEFAULT_TIMEOUT_NS, REFUSAL_CAUSES,
};
pub use validate::{validate, Limits, PositionFields, ServoCommandError, ValidCommand};

/// Atomic views of the header's fields that change after publication, and whole-header
/// copies made of atomic word accesses.
mod header_atomics {
    use crate::layout::Header;
    use core::mem::offset_of;
    use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

    /// # Safety
    /// `base` points to a mapped header (at least `FROZEN_PREFIX` bytes) that outlives `'a`.
    pub(crate) unsafe fn agent_pid<'a>(base: *mut u8) -> &'a AtomicI32 {
        // SAFETY: in bounds and 4-aligned (offset 80 of a page-aligned mapping).
        unsafe { AtomicI32::from_ptr(base.add(offset_of!(Header, agent_pid)).cast()) }
    }

    /// # Safety
    /// As [`agent_pid`].
    pub(crate) unsafe fn agent_version<'a>(base: *mut u8) -> &'a AtomicU32 {
        // SAFETY: in bounds and 4-aligned (offset 84).
        unsafe { AtomicU32::from_ptr(base.add(offset_of!(Header, agent_version)).cast()) }
    }

    /// # Safety
    /// As [`agent_pid`], with the whole header mapped.
    pub(crate) unsafe fn u32_at<'a>(base: *mut u8, offset: usize) -> &'a AtomicU32 {
        debug_assert!(offset.is_multiple_of(4) && offset + 4 <= size_of::<Header>());
        // SAFETY: in bounds and 4-aligned (the caller passes a field's offset).
        unsafe { AtomicU32::from_ptr(base.add(offset).cast()) }
    }

    /// The spine-to-agent bell and its sleeper count (`crate::bell`).
    ///
    /// # Safety
    /// As [`u32_at`].
    pub(crate) unsafe fn state_bell<'a>(base: *mut u8) -> (&'a AtomicU32, &'a AtomicU32) {
        // SAFETY: the caller's promise.
        unsafe { (u32_at(base, offset_of!(Header, state_bell)), u32_at(base, offset_of!(Header, agent_waiting))) }
    }

    /// The agent-to-spine bell and the spine's sleeping flag (`crate::bell`).
    ///
    /// # Safety
    /// As [`u32_at`].
    pub(crate) unsafe fn command_bell<'a>(base: *mut u8) -> (&'a AtomicU32, &'a AtomicU32) {
        // SAFETY: the caller's promise.
        unsafe { (u32_at(base, offset_of!(Header, command_bell)), u32_at(base, offset_of!(Header, spine_waiting))) }
    }

    /// # Safety
    /// As [`agent_pid`].
    pub(crate) unsafe fn version<'a>(base: *mut u8) -> &'a AtomicU32 {
        // SAFETY: in bounds and 4-aligned (offset 8).
        unsafe { AtomicU32::from_ptr(base.add(offset_of!(Header, version)).cast()) }
    }

    /// Write the whole header with atomic word stores, the magic word last (release).
    ///
    /// # Safety
    /// `base` points to a mapped, writable segment of at least `size_of::<Header>()` bytes.
    pub(crate) unsafe fn store_header(base: *mut u8, header: &Header) {
        let words = (header as *const Header).cast::<u64>();
        let dst = base.cast::<AtomicU64>();
        for i in 1..size_of::<Header>() / 8 {
            // SAFETY: word `i` is inside both headers; `Header: Plain` has no padding.
            unsafe { (*dst.add(i)).store(words.add(i).read(), Ordering::Relaxed) };
        }
        // SAFETY: word 0 is in bounds.
        unsafe { (*dst).store(header.magic, Ordering::Release) };
    }

    /// Copy the whole header out with atomic word loads (after the magic's acquire load).
    ///
    /// # Safety
    /// `base` points to a mapped segment of at least `size_of::<Header>()` bytes.
    pub(crate) unsafe fn load_header(base: *mut u8, out: &mut Header) {
        let src = base.cast::<AtomicU64>();
        let dst = (out as *mut Header).cast::<u64>();
        for i in 0..size_of::<Header>() / 8 {
            // SAFETY: word `i` is inside both headers; any bit pattern is a valid `Header`.
            unsafe { dst.add(i).write((*src.add(i)).load(Ordering::Acquire)) };
        }
    }
}
