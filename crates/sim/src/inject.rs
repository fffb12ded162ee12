//! The log of injected faults (and of every fault a servo latches) that a host can read.
//!
//! What it is for: letting a run summary say what the simulator did to it — frames lost on
//! the wire, an overheat started, a fault latched — with the simulated time of each.
//! What it must never do: allocate after construction (the log is a fixed array of
//! [`EVENT_CAPACITY`] entries), grow without bound, or panic.
//!
//! # Policy
//!
//! * Servo events ([`InjectedKind::OverheatStarted`], [`InjectedKind::FaultLatched`]) get one
//!   entry each.
//! * Frame losses are coalesced so a lossy bus cannot flood the log: the first dropped
//!   (or corrupted) frame since the host last read the log opens an entry, and every later
//!   one of the same kind increments that entry's `count` and moves its `last_ns`, until the
//!   entry has been read. The exact totals are always in `BusStats`.
//! * When the log is full, new entries are discarded (the oldest are kept) and counted in
//!   `BusStats::events_discarded`; coalescing into an entry already in the log goes on.

/// Entries the log of a bus holds.
pub const EVENT_CAPACITY: usize = 64;

/// The fault seed of bus `bus` (its user-facing number) in a run seeded with `run_seed`: one
/// run seed repeats a whole multi-bus run, and different buses (or runs) get unrelated
/// streams, so no two buses drop or corrupt the same frames. (`BusConfig::fault_seed` takes
/// the result; the bus's generator mixes it further.)
pub fn bus_fault_seed(run_seed: u64, bus: u8) -> u64 {
    // Distinct odd multiples keep distinct buses distinct for every run seed.
    run_seed ^ (u64::from(bus) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InjectedKind {
    /// Frames lost on the wire by `BusConfig::drop_rate` (nobody received them).
    FrameDropped {
        /// Frames this entry stands for (coalesced, see the module docs).
        count: u32,
        /// End of the last of them on the wire, ns (the entry's `at_ns` is the first).
        last_ns: u64,
    },
    /// Frames that had a bit flipped by `BusConfig::corrupt_rate`; the receiver's CRC check
    /// rejected them, so they were lost too.
    FrameCorrupted {
        /// Frames this entry stands for (coalesced, see the module docs).
        count: u32,
        /// End of the last of them on the wire, ns (the entry's `at_ns` is the first).
        last_ns: u64,
    },
    /// A scheduled overheat started heating the servo's motor.
    OverheatStarted,
    /// The servo latched a fault (mode 1), injected or not.
    FaultLatched {
        /// The fault register value (38: over-temperature).
        code: u8,
    },
}

/// One entry of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InjectedEvent {
    /// When it happened, ns: end of the (first) lost frame on the wire, or the physics step
    /// at which the servo started heating or latched its fault.
    pub at_ns: u64,
    /// The servo concerned: the destination of a lost command, the source of a lost reply,
    /// the servo that heated or faulted; `None` for a broadcast, or when a coalesced entry
    /// covers frames of several servos.
    pub servo: Option<u8>,
    /// What happened.
    pub kind: InjectedKind,
}

const EMPTY: InjectedEvent = InjectedEvent { at_ns: 0, servo: None, kind: InjectedKind::OverheatStarted };

/// Which coalesced frame-loss entry (by sequence number) is open for each loss kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LossKind {
    Dropped,
    Corrupted,
}

/// Fixed-capacity FIFO of events with frame-loss coalescing.
#[derive(Debug, Clone)]
pub(crate) struct EventLog {
    ring: [InjectedEvent; EVENT_CAPACITY],
    /// Sequence number of the oldest entry held (entry `s` lives at `s % EVENT_CAPACITY`).
    popped: u64,
    /// Sequence number the next entry gets.
    pushed: u64,
    /// Open coalescing entries: dropped, corrupted.
    open: [Option<u64>; 2],
}

impl EventLog {
    pub(crate) fn new() -> Self {
        EventLog { ring: [EMPTY; EVENT_CAPACITY], popped: 0, pushed: 0, open: [None; 2] }
    }

    pub(crate) fn len(&self) -> usize {
        (self.pushed - self.popped) as usize
    }

    /// Append; false (and nothing stored) when full.
    pub(crate) fn push(&mut self, ev: InjectedEvent) -> bool {
        if self.len() >= EVENT_CAPACITY {
            return false;
        }
        self.ring[(self.pushed % EVENT_CAPACITY as u64) as usize] = ev;
        self.pushed += 1;
        true
    }

    /// Record one lost frame: coalesce into the open entry of its kind, or open one.
    /// Returns false when a new entry was needed and the log was full.
    pub(crate) fn frame_lost(&mut self, kind: LossKind, at_ns: u64, servo: Option<u8>) -> bool {
        let k = kind as usize;
        if let Some(seq) = self.open[k] {
            if seq >= self.popped && seq < self.pushed {
                let e = &mut self.ring[(seq % EVENT_CAPACITY as u64) as usize];
                if e.servo != servo {
                    e.servo = None;
                }
                if let InjectedKind::FrameDropped { count, last_ns } | InjectedKind::FrameCorrupted { count, last_ns } =
                    &mut e.kind
                {
                    *count = count.saturating_add(1);
                    *last_ns = at_ns;
                }
                return true;
            }
        }
        let kind = match kind {
            LossKind::Dropped => InjectedKind::FrameDropped { count: 1, last_ns: at_ns },
            LossKind::Corrupted => InjectedKind::FrameCorrupted { count: 1, last_ns: at_ns },
        };
        let seq = self.pushed;
        if self.push(InjectedEvent { at_ns, servo, kind }) {
            self.open[k] = Some(seq);
            true
        } else {
            false
        }
    }

    /// The oldest entry, removed.
    pub(crate) fn pop(&mut self) -> Option<InjectedEvent> {
        if self.popped == self.pushed {
            return None;
        }
        let ev = self.ring[(self.popped % EVENT_CAPACITY as u64) as usize];
        self.popped += 1;
        Some(ev)
    }

    /// The entries held, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &InjectedEvent> + '_ {
        (self.popped..self.pushed).map(move |s| &self.ring[(s % EVENT_CAPACITY as u64) as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buses_of_one_run_get_different_seeds_and_a_run_seed_repeats_them() {
        for run in [0u64, 1, 42, u64::MAX] {
            let seeds: Vec<u64> = (1..=8).map(|bus| bus_fault_seed(run, bus)).collect();
            for (i, a) in seeds.iter().enumerate() {
                assert!(seeds[i + 1..].iter().all(|b| b != a), "run {run}: {seeds:?}");
            }
            assert_eq!(seeds, (1..=8).map(|bus| bus_fault_seed(run, bus)).collect::<Vec<_>>());
        }
        assert_ne!(bus_fault_seed(1, 1), bus_fault_seed(2, 1));
    }

    #[test]
    fn coalesces_until_read_and_keeps_the_oldest_when_full() {
        let mut log = EventLog::new();
        assert!(log.frame_lost(LossKind::Dropped, 10, Some(1)));
        assert!(log.frame_lost(LossKind::Corrupted, 15, Some(1)));
        assert!(log.frame_lost(LossKind::Dropped, 20, Some(2)));
        assert_eq!(log.len(), 2);
        let e = log.pop().unwrap();
        assert_eq!(
            e,
            InjectedEvent { at_ns: 10, servo: None, kind: InjectedKind::FrameDropped { count: 2, last_ns: 20 } }
        );
        // Read: the next drop opens a new entry.
        assert!(log.frame_lost(LossKind::Dropped, 30, Some(3)));
        assert_eq!(log.len(), 2);
        for k in 0..100 {
            log.push(InjectedEvent { at_ns: k, servo: None, kind: InjectedKind::FaultLatched { code: 38 } });
        }
        assert_eq!(log.len(), EVENT_CAPACITY);
        // Coalescing into an entry still held goes on when full.
        assert!(log.frame_lost(LossKind::Corrupted, 40, Some(1)));
        assert_eq!(log.pop().unwrap().kind, InjectedKind::FrameCorrupted { count: 2, last_ns: 40 });
        assert_eq!(log.pop().unwrap().kind, InjectedKind::FrameDropped { count: 1, last_ns: 30 });
        assert_eq!(log.iter().count(), EVENT_CAPACITY - 2);
        assert_eq!(log.iter().next().unwrap().at_ns, 0);
    }
}
