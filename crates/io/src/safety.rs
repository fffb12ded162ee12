//! Graceful failure on the host: when one servo faults (or stops answering), command every
//! other servo to a safe mode instead of dropping the robot, and record what happened.
//!
//! The source robot fell and broke a leg when one overheated servo made the gait cut power
//! to all joints; the fix was to put the unfaulted servos in zero velocity so the machine
//! settles gently. [`Supervisor`] does exactly that, every cycle, with no allocation: its
//! event log has a fixed capacity and counts what it had to drop.
//!
//! Must never: allocate or lock in [`Supervisor::check`] / [`Supervisor::apply`], clear a
//! fault by itself (a stop would clear it; the faulted servo is only queried), or lose an
//! event silently.

use crate::robot::{ServoCommand, ServoReply, ServoSpec};
use std::fmt;

/// What the host does to the other servos when one faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFault {
    /// Command zero velocity (mode 12) to every servo that has not faulted.
    #[default]
    ZeroVelocity,
    /// Command stop (mode 0) to every servo that has not faulted.
    Stop,
    /// Record the event, keep sending the control law's commands.
    Ignore,
}

impl std::str::FromStr for OnFault {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "zero-velocity" => Ok(OnFault::ZeroVelocity),
            "stop" => Ok(OnFault::Stop),
            "ignore" => Ok(OnFault::Ignore),
            other => Err(format!("'{other}' is not a fault policy: give stop, zero-velocity or ignore")),
        }
    }
}

impl fmt::Display for OnFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OnFault::ZeroVelocity => "zero-velocity",
            OnFault::Stop => "stop",
            OnFault::Ignore => "ignore",
        })
    }
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The servo reported a fault (mode 1) with this code.
    Fault {
        /// The fault register.
        code: u8,
    },
    /// The servo has not answered for this many consecutive cycles.
    MissingReplies {
        /// Consecutive cycles without a reply.
        cycles: u32,
    },
    /// The servo answers again after being counted missing.
    Answering,
    /// The host switched the other servos to its safe mode.
    SafeModeEngaged,
    /// A stop was requested (Ctrl-C / SIGTERM): the last cycle commanded the safe mode.
    Shutdown,
    /// The watchdog of the servo expired (mode 11).
    WatchdogTimeout,
    /// Something the simulator injected (named by the caller).
    Injected(&'static str),
}

impl EventKind {
    /// A short stable name for summaries and logs.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Fault { .. } => "fault",
            EventKind::MissingReplies { .. } => "missing_replies",
            EventKind::Answering => "answering",
            EventKind::SafeModeEngaged => "safe_mode_engaged",
            EventKind::Shutdown => "shutdown",
            EventKind::WatchdogTimeout => "watchdog_timeout",
            EventKind::Injected(what) => what,
        }
    }
}

/// One recorded event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// When, on the cycle's clock.
    pub at_ns: u64,
    /// Which servo (`None` for the whole robot).
    pub servo: Option<u8>,
    /// What.
    pub kind: EventKind,
}

/// Policy knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SafetyConfig {
    /// What to do to the others when a servo faults or goes missing.
    pub on_fault: OnFault,
    /// Consecutive missing replies that count as a failed servo (0 = never).
    pub missing_limit: u32,
}

impl Default for SafetyConfig {
    fn default() -> Self {
        SafetyConfig { on_fault: OnFault::ZeroVelocity, missing_limit: 20 }
    }
}

/// Watches replies, records events, and overrides commands once tripped.
pub struct Supervisor {
    config: SafetyConfig,
    events: Vec<Event>,
    dropped_events: u64,
    /// Per servo: faulted (as last seen), counted missing, timed out.
    faulted: Vec<bool>,
    missing: Vec<bool>,
    timed_out: Vec<bool>,
    tripped_at: Option<u64>,
}

impl Supervisor {
    /// A supervisor for `servos` servos keeping up to `event_capacity` events.
    pub fn new(config: SafetyConfig, servos: usize, event_capacity: usize) -> Self {
        Supervisor {
            config,
            events: Vec::with_capacity(event_capacity),
            dropped_events: 0,
            faulted: vec![false; servos],
            missing: vec![false; servos],
            timed_out: vec![false; servos],
            tripped_at: None,
        }
    }

    /// The policy.
    pub fn config(&self) -> SafetyConfig {
        self.config
    }

    /// Record an event (counted as dropped when the log is full). Never allocates.
    pub fn record(&mut self, at_ns: u64, servo: Option<u8>, kind: EventKind) {
        if self.events.len() < self.events.capacity() {
            self.events.push(Event { at_ns, servo, kind });
        } else {
            self.dropped_events += 1;
        }
    }

    /// Look at this cycle's replies: record new faults, missing servos, watchdog expiries,
    /// and trip when a servo has failed. Returns whether the supervisor is tripped.
    pub fn check(&mut self, now_ns: u64, servos: &[ServoSpec], replies: &[ServoReply]) -> bool {
        let n = servos.len().min(replies.len()).min(self.faulted.len());
        let mut failed_now = false;
        for i in 0..n {
            let id = servos[i].id;
            let r = &replies[i];
            if r.fresh {
                if self.missing[i] {
                    self.missing[i] = false;
                    self.record(now_ns, Some(id), EventKind::Answering);
                }
                let faulted = r.state.mode == Some(1);
                if faulted && !self.faulted[i] {
                    self.record(now_ns, Some(id), EventKind::Fault { code: r.state.fault.unwrap_or(0) });
                    failed_now = true;
                }
                self.faulted[i] = faulted;
                let timed_out = r.state.mode == Some(11);
                if timed_out && !self.timed_out[i] {
                    self.record(now_ns, Some(id), EventKind::WatchdogTimeout);
                }
                self.timed_out[i] = timed_out;
            } else if self.config.missing_limit > 0 && r.missing_streak >= self.config.missing_limit && !self.missing[i]
            {
                self.missing[i] = true;
                self.record(now_ns, Some(id), EventKind::MissingReplies { cycles: r.missing_streak });
                failed_now = true;
            }
        }
        if failed_now && self.tripped_at.is_none() && self.config.on_fault != OnFault::Ignore {
            self.tripped_at = Some(now_ns);
            self.record(now_ns, None, EventKind::SafeModeEngaged);
        }
        self.tripped_at.is_some()
    }

    /// When tripped, replace the commands per the policy: healthy servos get the safe
    /// mode, faulted ones are only queried (so their fault is reported, not cleared).
    pub fn apply(&self, commands: &mut [ServoCommand]) {
        if self.tripped_at.is_none() {
            return;
        }
        let safe = match self.config.on_fault {
            OnFault::ZeroVelocity => ServoCommand::ZeroVelocity,
            OnFault::Stop => ServoCommand::Stop,
            OnFault::Ignore => return,
        };
        for (i, c) in commands.iter_mut().enumerate() {
            *c = if self.faulted.get(i).copied().unwrap_or(false) { ServoCommand::Query } else { safe };
        }
    }

    /// The commands of a last, shutdown cycle: every servo gets `safe`, then the policy's
    /// override applies as in any cycle, and a servo last seen faulted is only queried so
    /// its fault is reported, not cleared — whatever the policy.
    pub fn shutdown(&self, safe: ServoCommand, commands: &mut [ServoCommand]) {
        for c in commands.iter_mut() {
            *c = safe;
        }
        self.apply(commands);
        for (c, &faulted) in commands.iter_mut().zip(&self.faulted) {
            if faulted {
                *c = ServoCommand::Query;
            }
        }
    }

    /// Tripped, and since when.
    pub fn tripped_at(&self) -> Option<u64> {
        self.tripped_at
    }

    /// The recorded events, oldest first.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Events that did not fit in the log.
    pub fn dropped_events(&self) -> u64 {
        self.dropped_events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::host::{PositionCommand, ServoState};

    fn reply(mode: u8, fault: u8) -> ServoReply {
        ServoReply {
            state: ServoState { mode: Some(mode), fault: Some(fault), ..Default::default() },
            fresh: true,
            ..Default::default()
        }
    }

    fn specs(n: u8) -> Vec<ServoSpec> {
        (1..=n).map(|id| ServoSpec { bus: 0, id }).collect()
    }

    #[test]
    fn a_fault_puts_the_others_in_zero_velocity_and_only_queries_the_faulted_one() {
        let servos = specs(3);
        let mut sup = Supervisor::new(SafetyConfig::default(), 3, 16);
        let mut replies = [reply(10, 0), reply(10, 0), reply(10, 0)];
        assert!(!sup.check(1, &servos, &replies));
        replies[1] = reply(1, 38);
        assert!(sup.check(2, &servos, &replies));
        let mut cmds = [ServoCommand::Position(PositionCommand::default()); 3];
        sup.apply(&mut cmds);
        assert_eq!(cmds, [ServoCommand::ZeroVelocity, ServoCommand::Query, ServoCommand::ZeroVelocity]);
        // The fault is recorded once, then the policy.
        assert!(sup.check(3, &servos, &replies));
        let kinds: Vec<_> = sup.events().iter().map(|e| (e.servo, e.kind)).collect();
        assert_eq!(kinds, vec![(Some(2), EventKind::Fault { code: 38 }), (None, EventKind::SafeModeEngaged)]);
    }

    #[test]
    fn missing_replies_trip_after_the_limit_and_recovery_is_recorded() {
        let servos = specs(2);
        let cfg = SafetyConfig { on_fault: OnFault::Stop, missing_limit: 3 };
        let mut sup = Supervisor::new(cfg, 2, 16);
        let mut replies = [reply(10, 0), reply(10, 0)];
        for streak in 1..=2 {
            replies[0] = ServoReply { fresh: false, missing_streak: streak, ..replies[0] };
            assert!(!sup.check(streak as u64, &servos, &replies));
        }
        replies[0] = ServoReply { fresh: false, missing_streak: 3, ..replies[0] };
        assert!(sup.check(3, &servos, &replies));
        let mut cmds = [ServoCommand::Query; 2];
        sup.apply(&mut cmds);
        assert_eq!(cmds, [ServoCommand::Stop, ServoCommand::Stop]);
        replies[0] = reply(0, 0);
        sup.check(4, &servos, &replies);
        assert_eq!(sup.events().last().unwrap().kind, EventKind::Answering);
    }

    #[test]
    fn shutdown_commands_the_safe_mode_but_never_clears_a_fault() {
        let servos = specs(3);
        let mut sup = Supervisor::new(SafetyConfig { on_fault: OnFault::Ignore, missing_limit: 0 }, 3, 16);
        sup.check(1, &servos, &[reply(10, 0), reply(1, 38), reply(10, 0)]);
        let mut cmds = [ServoCommand::Query; 3];
        sup.shutdown(ServoCommand::Stop, &mut cmds);
        assert_eq!(cmds, [ServoCommand::Stop, ServoCommand::Query, ServoCommand::Stop]);
    }

    #[test]
    fn ignore_records_but_never_overrides_and_a_full_log_counts_drops() {
        let servos = specs(1);
        let mut sup = Supervisor::new(SafetyConfig { on_fault: OnFault::Ignore, missing_limit: 0 }, 1, 1);
        assert!(!sup.check(1, &servos, &[reply(1, 33)]));
        let mut cmds = [ServoCommand::Brake];
        sup.apply(&mut cmds);
        assert_eq!(cmds, [ServoCommand::Brake]);
        sup.record(2, None, EventKind::Shutdown);
        assert_eq!(sup.events().len(), 1);
        assert_eq!(sup.dropped_events(), 1);
        assert_eq!("zero-velocity".parse::<OnFault>().unwrap(), OnFault::ZeroVelocity);
        assert!("explode".parse::<OnFault>().is_err());
    }
}
