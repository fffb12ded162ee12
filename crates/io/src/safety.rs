//! Graceful failure on the host: when one servo faults (or stops answering), command every
//! other servo to a safe mode instead of dropping the robot, and record what happened.
//!
//! The source robot fell and broke a leg when one overheated servo made the gait cut power
//! to all joints; the fix was to put the unfaulted servos in zero velocity so the machine
//! settles gently. [`Supervisor`] does exactly that, every cycle, with no allocation: its
//! event log has a fixed capacity and counts what it had to drop.
//!
//! # Recovery
//!
//! Once tripped, the safe mode holds until [`Recovery`] says otherwise:
//!
//! * [`Recovery::Latched`] (the default): until the controller (or an operator through it)
//!   calls [`Supervisor::rearm`]. A trip means something went wrong; a person or a control
//!   law that knows the robot's state decides when motion may resume.
//! * [`Recovery::Auto`]: after `good_cycles` consecutive cycles in which every servo's state
//!   is at most one cycle old (fresh, or the late answer to the previous request), none
//!   reports a fault (mode 1) and none sits in its watchdog timeout (mode 11) — so a
//!   burst of late or lost replies costs only the burst plus the wait. A faulted servo never
//!   counts as good (only a stop clears its fault, and the supervisor never sends one), so
//!   a fault stays latched under either policy.
//!
//! Every trip is a [`EventKind::SafeModeEngaged`] event and every end of one a
//! [`EventKind::Recovered`] or [`EventKind::Rearmed`] event; [`Supervisor::trips`] counts them.
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
    type Err = UnknownFaultPolicy;
    fn from_str(s: &str) -> Result<Self, UnknownFaultPolicy> {
        match s {
            "zero-velocity" => Ok(OnFault::ZeroVelocity),
            "stop" => Ok(OnFault::Stop),
            "ignore" => Ok(OnFault::Ignore),
            other => Err(UnknownFaultPolicy { given: other.to_string() }),
        }
    }
}

/// A fault policy name [`OnFault`] does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{given}' is not a fault policy: give stop, zero-velocity or ignore")]
#[non_exhaustive]
pub struct UnknownFaultPolicy {
    /// The name given.
    pub given: String,
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

/// When a tripped supervisor lets the control law's commands through again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recovery {
    /// Hold the safe mode until [`Supervisor::rearm`].
    #[default]
    Latched,
    /// Resume after this many consecutive good cycles (see the module docs), at least 1.
    Auto {
        /// Consecutive cycles with every servo answering, unfaulted and not timed out.
        good_cycles: u32,
    },
}

impl Recovery {
    /// The configuration spelling: `latched` or `auto`.
    pub fn name(&self) -> &'static str {
        match self {
            Recovery::Latched => "latched",
            Recovery::Auto { .. } => "auto",
        }
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
    /// The servo has no answer newer than this many cycles (fresh or late).
    MissingReplies {
        /// How old the newest answer is, in cycles (or cycles without any answer).
        cycles: u32,
    },
    /// The servo answers again after being counted missing.
    Answering,
    /// The host switched the other servos to its safe mode.
    SafeModeEngaged,
    /// The safe mode ended by itself ([`Recovery::Auto`]) after this many good cycles.
    Recovered {
        /// Consecutive good cycles seen.
        good_cycles: u32,
    },
    /// The safe mode ended because the controller called [`Supervisor::rearm`].
    Rearmed,
    /// The run ended (its duration, or a stop was requested): the last cycle commanded the
    /// safe mode.
    Shutdown,
    /// The watchdog of the servo expired (mode 11).
    WatchdogTimeout,
    /// The servo was already in mode 11 (its watchdog expired before this run, e.g. after an
    /// earlier host stopped commanding it) and was sent a stop, the only way out, before the
    /// first command.
    StaleTimeoutCleared,
    /// Something the simulator injected (named by the caller).
    Injected(&'static str),
    /// Something the control law reported (named by it: an agent timing out, a command
    /// refused, …), with the value it gave, if any (a protocol version, …).
    Controller {
        /// The event's name.
        name: &'static str,
        /// Its detail, as a number.
        value: Option<u64>,
    },
}

impl EventKind {
    /// A short stable name for summaries and logs.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Fault { .. } => "fault",
            EventKind::MissingReplies { .. } => "missing_replies",
            EventKind::Answering => "answering",
            EventKind::SafeModeEngaged => "safe_mode_engaged",
            EventKind::Recovered { .. } => "recovered",
            EventKind::Rearmed => "rearmed",
            EventKind::Shutdown => "shutdown",
            EventKind::WatchdogTimeout => "watchdog_timeout",
            EventKind::StaleTimeoutCleared => "stale_timeout_cleared",
            EventKind::Injected(what) | EventKind::Controller { name: what, .. } => what,
        }
    }
}

/// One recorded event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// When, on the cycle's clock.
    pub at_ns: u64,
    /// Which servo, by bus index and id (`None` for the whole robot).
    pub servo: Option<ServoSpec>,
    /// What.
    pub kind: EventKind,
}

/// Policy knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SafetyConfig {
    /// What to do to the others when a servo faults or goes missing.
    pub on_fault: OnFault,
    /// A servo whose newest answer is this many cycles old (or that has not answered for
    /// this many cycles) has failed (0 = never). A servo whose replies all come one cycle
    /// late is answering, with old data ([`ServoReply::age`] says how old); one that stops
    /// answering, fresh or late, fails after this many cycles.
    pub missing_limit: u32,
    /// When the safe mode ends.
    pub recovery: Recovery,
}

impl Default for SafetyConfig {
    fn default() -> Self {
        SafetyConfig { on_fault: OnFault::ZeroVelocity, missing_limit: 20, recovery: Recovery::Latched }
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
    /// Consecutive good cycles while tripped (for [`Recovery::Auto`]).
    good_streak: u32,
    trips: u32,
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
            good_streak: 0,
            trips: 0,
        }
    }

    /// The policy.
    pub fn config(&self) -> SafetyConfig {
        self.config
    }

    /// Record an event (counted as dropped when the log is full). Never allocates.
    pub fn record(&mut self, at_ns: u64, servo: Option<ServoSpec>, kind: EventKind) {
        if self.events.len() < self.events.capacity() {
            self.events.push(Event { at_ns, servo, kind });
        } else {
            self.dropped_events += 1;
        }
    }

    /// Look at this cycle's replies: record new faults, missing servos, watchdog expiries,
    /// trip when a servo has failed, and end a trip as [`Recovery`] says. Returns whether the
    /// supervisor is tripped.
    pub fn check(&mut self, now_ns: u64, servos: &[ServoSpec], replies: &[ServoReply]) -> bool {
        let n = servos.len().min(replies.len()).min(self.faulted.len());
        let mut failed_now = false;
        let mut all_good = n == self.faulted.len();
        for i in 0..n {
            let id = Some(servos[i]);
            let r = &replies[i];
            // How long the servo has been silent: the age of its newest answer (a late answer
            // counts: it is alive), or the cycles without any answer since the start.
            let silent = r.age().map_or(u64::from(r.missing_streak), |age| age);
            let limit = u64::from(self.config.missing_limit);
            let answering = r.request_cycle.is_some() && (limit == 0 || silent < limit);
            // A good cycle (towards automatic recovery): every state at most one cycle old —
            // fresh, or the late answer to the previous request — and no fault or timeout.
            all_good &= r.age().is_some_and(|age| age <= 1) && !matches!(r.state.mode, Some(1) | Some(11));
            if answering && self.missing[i] {
                self.missing[i] = false;
                self.record(now_ns, id, EventKind::Answering);
            }
            if r.request_cycle.is_some() {
                let faulted = r.state.mode == Some(1);
                if faulted && !self.faulted[i] {
                    self.record(now_ns, id, EventKind::Fault { code: r.state.fault.unwrap_or(0) });
                    failed_now = true;
                }
                self.faulted[i] = faulted;
                let timed_out = r.state.mode == Some(11);
                if timed_out && !self.timed_out[i] {
                    self.record(now_ns, id, EventKind::WatchdogTimeout);
                }
                self.timed_out[i] = timed_out;
            }
            if limit > 0 && silent >= limit && !self.missing[i] {
                self.missing[i] = true;
                self.record(now_ns, id, EventKind::MissingReplies { cycles: silent.min(u64::from(u32::MAX)) as u32 });
                failed_now = true;
            }
        }
        if failed_now && self.config.on_fault != OnFault::Ignore {
            if self.tripped_at.is_none() {
                self.tripped_at = Some(now_ns);
                self.trips += 1;
                self.record(now_ns, None, EventKind::SafeModeEngaged);
            }
            // A new failure restarts the count towards recovery.
            self.good_streak = 0;
        } else if self.tripped_at.is_some() {
            self.good_streak = if all_good { self.good_streak.saturating_add(1) } else { 0 };
            if let Recovery::Auto { good_cycles } = self.config.recovery {
                if self.good_streak >= good_cycles.max(1) {
                    self.tripped_at = None;
                    self.record(now_ns, None, EventKind::Recovered { good_cycles: self.good_streak });
                    self.good_streak = 0;
                }
            }
        }
        self.tripped_at.is_some()
    }

    /// End the safe mode now, whatever the recovery policy (the controller, or an operator
    /// through it, decided that motion may resume). Recorded as [`EventKind::Rearmed`];
    /// does nothing when not tripped. A servo that is still faulted keeps being only queried.
    pub fn rearm(&mut self, now_ns: u64) {
        if self.tripped_at.take().is_some() {
            self.good_streak = 0;
            self.record(now_ns, None, EventKind::Rearmed);
        }
    }

    /// Times the safe mode engaged.
    pub fn trips(&self) -> u32 {
        self.trips
    }

    /// Servos last seen faulted (mode 1), by index.
    pub fn faulted(&self) -> &[bool] {
        &self.faulted
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
    use rtloop_proto::host::{PositionCommand, ServoState};

    /// A fresh reply.
    fn reply(mode: u8, fault: u8) -> ServoReply {
        ServoReply {
            state: ServoState { mode: Some(mode), fault: Some(fault), ..Default::default() },
            fresh: true,
            request_cycle: Some(0),
            ..Default::default()
        }
    }

    /// `r`'s state, `cycles` cycles later without a newer answer.
    fn aged(r: ServoReply, cycles: u32) -> ServoReply {
        ServoReply { fresh: cycles == 0, missing_streak: cycles, as_of_cycle: u64::from(cycles), ..r }
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
        let kinds: Vec<_> = sup.events().iter().map(|e| (e.servo.map(|s| s.id), e.kind)).collect();
        assert_eq!(kinds, vec![(Some(2), EventKind::Fault { code: 38 }), (None, EventKind::SafeModeEngaged)]);
    }

    #[test]
    fn missing_replies_trip_after_the_limit_and_recovery_is_recorded() {
        let servos = specs(2);
        let cfg = SafetyConfig { on_fault: OnFault::Stop, missing_limit: 3, ..Default::default() };
        let mut sup = Supervisor::new(cfg, 2, 16);
        let mut replies = [reply(10, 0), reply(10, 0)];
        for streak in 1..=2 {
            replies[0] = aged(reply(10, 0), streak);
            assert!(!sup.check(streak as u64, &servos, &replies));
        }
        replies[0] = aged(reply(10, 0), 3);
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
        let cfg = SafetyConfig { on_fault: OnFault::Ignore, missing_limit: 0, ..Default::default() };
        let mut sup = Supervisor::new(cfg, 3, 16);
        sup.check(1, &servos, &[reply(10, 0), reply(1, 38), reply(10, 0)]);
        let mut cmds = [ServoCommand::Query; 3];
        sup.shutdown(ServoCommand::Stop, &mut cmds);
        assert_eq!(cmds, [ServoCommand::Stop, ServoCommand::Query, ServoCommand::Stop]);
    }

    #[test]
    fn ignore_records_but_never_overrides_and_a_full_log_counts_drops() {
        let servos = specs(1);
        let cfg = SafetyConfig { on_fault: OnFault::Ignore, missing_limit: 0, ..Default::default() };
        let mut sup = Supervisor::new(cfg, 1, 1);
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

    /// Two servos on two buses; servo 1 (bus 1) misses `burst` cycles in a row.
    fn burst(sup: &mut Supervisor, servos: &[ServoSpec], t: &mut u64, burst: u32) {
        for streak in 1..=burst {
            *t += 1;
            let missing = aged(reply(10, 0), streak);
            sup.check(*t, servos, &[reply(10, 0), missing]);
        }
    }

    fn good_cycles(sup: &mut Supervisor, servos: &[ServoSpec], t: &mut u64, n: u32) -> bool {
        let mut tripped = true;
        for _ in 0..n {
            *t += 1;
            tripped = sup.check(*t, servos, &[reply(12, 0), reply(12, 0)]);
        }
        tripped
    }

    fn two_buses() -> Vec<ServoSpec> {
        vec![ServoSpec { bus: 0, id: 1 }, ServoSpec { bus: 1, id: 1 }]
    }

    #[test]
    fn latched_holds_the_safe_mode_until_rearmed() {
        let servos = two_buses();
        let mut sup = Supervisor::new(SafetyConfig { missing_limit: 20, ..Default::default() }, 2, 64);
        let mut t = 0;
        burst(&mut sup, &servos, &mut t, 20);
        assert_eq!(sup.tripped_at(), Some(20));
        // The servos answer again, for a long time: still latched.
        assert!(good_cycles(&mut sup, &servos, &mut t, 10_000));
        let mut cmds = [ServoCommand::Position(PositionCommand::default()); 2];
        sup.apply(&mut cmds);
        assert_eq!(cmds, [ServoCommand::ZeroVelocity; 2]);
        sup.rearm(t);
        assert_eq!(sup.tripped_at(), None);
        let mut cmds = [ServoCommand::Position(PositionCommand::default()); 2];
        sup.apply(&mut cmds);
        assert_eq!(cmds, [ServoCommand::Position(PositionCommand::default()); 2], "the control law is back");
        let kinds: Vec<_> = sup.events().iter().map(|e| e.kind.name()).collect();
        assert_eq!(kinds, ["missing_replies", "safe_mode_engaged", "answering", "rearmed"]);
        // The missing servo is named with its bus: id 1 lives on both buses.
        assert_eq!(sup.events()[0].servo, Some(ServoSpec { bus: 1, id: 1 }));
        assert_eq!(sup.trips(), 1);
    }

    #[test]
    fn auto_recovers_after_n_consecutive_good_cycles_only() {
        let servos = two_buses();
        let cfg = SafetyConfig { missing_limit: 20, recovery: Recovery::Auto { good_cycles: 5 }, ..Default::default() };
        let mut sup = Supervisor::new(cfg, 2, 64);
        let mut t = 0;
        burst(&mut sup, &servos, &mut t, 20);
        assert!(good_cycles(&mut sup, &servos, &mut t, 4), "4 of 5 good cycles: still tripped");
        // One bad cycle starts the count again.
        t += 1;
        // Two cycles old: one late answer is a good cycle, two missed ones are not.
        let late = aged(reply(12, 0), 2);
        assert!(sup.check(t, &servos, &[reply(12, 0), late]));
        assert!(good_cycles(&mut sup, &servos, &mut t, 4));
        assert!(!good_cycles(&mut sup, &servos, &mut t, 1), "the fifth good cycle in a row recovers");
        let recovered = sup.events().last().unwrap();
        assert_eq!(
            (recovered.at_ns, recovered.servo, recovered.kind),
            (t, None, EventKind::Recovered { good_cycles: 5 })
        );
        let mut cmds = [ServoCommand::Brake; 2];
        sup.apply(&mut cmds);
        assert_eq!(cmds, [ServoCommand::Brake; 2], "the control law's commands pass again");
        // A second burst trips again and is counted.
        burst(&mut sup, &servos, &mut t, 20);
        assert_eq!(sup.trips(), 2);
        assert!(sup.tripped_at().is_some());
    }

    #[test]
    fn auto_never_recovers_while_a_servo_is_faulted_or_timed_out() {
        let servos = two_buses();
        let cfg = SafetyConfig { recovery: Recovery::Auto { good_cycles: 1 }, ..Default::default() };
        for bad_mode in [1u8, 11] {
            let mut sup = Supervisor::new(cfg, 2, 64);
            sup.check(1, &servos, &[reply(10, 0), reply(1, 38)]);
            assert!(sup.tripped_at().is_some());
            for t in 2..1000 {
                assert!(sup.check(t, &servos, &[reply(12, 0), reply(bad_mode, 38)]), "mode {bad_mode}");
            }
        }
    }

    /// A servo whose state is `age` cycles old at cycle `cycle`, answering request `cycle - age`.
    fn late_by(mode: u8, cycle: u64, age: u64) -> ServoReply {
        ServoReply {
            state: ServoState { mode: Some(mode), fault: Some(0), ..Default::default() },
            fresh: age == 0,
            request_cycle: Some(cycle - age),
            as_of_cycle: cycle,
            missing_streak: cycle as u32,
            ..Default::default()
        }
    }

    #[test]
    fn a_servo_whose_every_reply_comes_a_cycle_late_is_answering_not_missing() {
        // Its missing streak grows (no reply is ever fresh), but each cycle brings the answer
        // to the previous request: alive, with one-cycle-old data. It must not trip the robot.
        let servos = specs(2);
        let mut sup = Supervisor::new(SafetyConfig { missing_limit: 20, ..Default::default() }, 2, 64);
        for cycle in 1..=1000u64 {
            assert!(!sup.check(cycle, &servos, &[reply(10, 0), late_by(10, cycle, 1)]), "cycle {cycle}");
        }
        assert!(sup.events().is_empty(), "{:?}", sup.events());
        // When its answers stop coming, fresh or late, it fails after the limit.
        for cycle in 1001..=1018u64 {
            assert!(!sup.check(cycle, &servos, &[reply(10, 0), late_by(10, cycle, cycle - 999)]));
        }
        assert!(sup.check(1019, &servos, &[reply(10, 0), late_by(10, 1019, 20)]));
        assert_eq!(sup.events()[0].kind, EventKind::MissingReplies { cycles: 20 });
    }

    #[test]
    fn a_fault_in_a_late_answer_is_a_fault() {
        let servos = specs(2);
        let mut sup = Supervisor::new(SafetyConfig::default(), 2, 64);
        assert!(sup.check(5, &servos, &[reply(10, 0), late_by(1, 5, 1)]));
        assert_eq!(sup.events()[0].kind, EventKind::Fault { code: 0 });
    }
}
