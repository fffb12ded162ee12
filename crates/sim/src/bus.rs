//! A simulated CAN-FD bus with wire timing, arbitration and the servos on it.
//!
//! What it is for: standing in for one pi3hat / fdcanusb port and everything cabled to it,
//! with the timing of the real wire — every frame occupies the bus for its exact bit time
//! ([`frame_bits`]), replies come back a turnaround after the command ends, and when several
//! frames are ready the lowest id wins, so replies (0x0100…) overtake queued commands
//! (0x8001…) as they do on a real bus.
//! What it must never do: read a clock (time is passed in; the bus is processed lazily and
//! deterministically up to the time it is told), allocate after construction (`submit`,
//! `poll_rx`, `advance_to` and `next_event_ns` only use storage reserved in `new` and
//! `add_servo`), or panic on any frame.
//!
//! # Timing rules
//!
//! * A host frame becomes ready `adapter_latency_ns` after `submit`.
//! * A reply becomes ready `turnaround_ns` (plus any injected `reply_delay_ns`) after the
//!   end of the command that asked for it.
//! * Whenever the wire is free, the ready frame with the lowest id starts (ties: the one
//!   ready first, then the one queued first). A frame that becomes ready while the wire is
//!   busy waits for the end of the current frame. A frame that becomes ready at exactly the
//!   instant another starts has missed that arbitration, as on a real bus.
//! * A host frame is delivered, when its last bit is on the wire, to every servo whose id
//!   it names (or all, for broadcast); a reply is queued for the host, stamped with its end
//!   time. A reply to a servo id that is not on the bus never comes (the host times out).
//!
//! # Fault injection
//!
//! All off by default; each is counted in [`BusStats`] and logged (see [`crate::inject`]).
//!
//! * [`BusConfig::drop_rate`]: each frame, in either direction, is lost with this
//!   probability. It occupies the wire for its full time (and counts in `host_frames` /
//!   `servo_frames`, `bits`, `busy_ns`, the trace) but nobody receives it: a lost command
//!   reaches no servo, so no reply is even generated; a lost reply never reaches the host.
//!   Counted in [`BusStats::frames_dropped_injected`].
//! * [`BusConfig::corrupt_rate`]: each frame not already dropped has one bit flipped with
//!   this probability. On CAN-FD the receivers' CRC check rejects it, so the effect is the
//!   same as a drop (no corrupted payload is ever delivered); counted apart in
//!   [`BusStats::frames_corrupted_injected`]. The error frame and the automatic
//!   retransmission a real controller would attempt are not modelled: a corrupted frame is
//!   simply lost, as with one-shot transmission.
//! * [`BusConfig::reply_delay_ns`]: added to the turnaround of every reply.
//! * [`BusConfig::fault_seed`]: seeds the bus's own xorshift generator, drawn once per
//!   frame per non-zero rate (drop first, then corrupt), so a run is repeatable and a bus
//!   with both rates at 0 draws nothing.
//! * Servo overheats: [`SimBus::schedule_overheat`] (see [`Servo::schedule_overheat`]).
//!   Whenever a servo on the bus starts an injected overheat or latches a fault (injected
//!   or not), the bus logs it; read the log with [`SimBus::pop_event`] or
//!   [`SimBus::drain_events`].

use std::collections::VecDeque;
use std::fmt;

use rtloop_proto::frame::CanFdFrame;

pub use crate::bits::{frame_bits, frame_time_ns, FrameBits};
use crate::inject::{EventLog, InjectedEvent, InjectedKind, LossKind};
use crate::rng::XorShift64;
use crate::servo::Servo;

/// Servos a bus reserves room for in `new` (more may be added; `add_servo` runs at setup).
const SERVO_CAPACITY: usize = 16;

/// Wire parameters of one bus, and the faults injected on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BusConfig {
    /// Arbitration-phase bit rate, bit/s (1 000 000).
    pub nominal_bitrate: u32,
    /// Data-phase bit rate with bit-rate switch, bit/s (5 000 000).
    pub data_bitrate: u32,
    /// Servo turnaround: end of a command to its reply being ready, ns (50 000).
    pub turnaround_ns: u64,
    /// Host adapter latency: `submit` to the frame being ready on the bus, ns (0).
    pub adapter_latency_ns: u64,
    /// Bound of the host transmit queue and of the receive queue, frames (64).
    pub queue_capacity: usize,
    /// Probability that a frame (either direction) is lost on the wire: it takes its wire
    /// time but nobody receives it (0). Outside 0..=1 it is clamped; NaN counts as 0.
    pub drop_rate: f64,
    /// Probability that a frame gets a bit flipped on the wire, so that the receiver's CRC
    /// check rejects it: lost like a drop, counted apart (0). Clamped like `drop_rate`.
    pub corrupt_rate: f64,
    /// Extra servo turnaround added to every reply, ns (0).
    pub reply_delay_ns: u64,
    /// Seed of the bus's fault generator (0). Give each bus of a robot its own (see
    /// [`crate::bus_fault_seed`]), or they all lose the same frames.
    pub fault_seed: u64,
}

impl BusConfig {
    /// A bus whose wire takes (next to) no time and whose servos answer at once: for
    /// measuring everything around the wire — host, transport, server — rather than the
    /// physics of CAN-FD. Frames still queue and arbitrate in order.
    pub fn without_wire_time() -> Self {
        BusConfig { nominal_bitrate: u32::MAX, data_bitrate: u32::MAX, turnaround_ns: 0, ..BusConfig::default() }
    }

    /// Check the injected-fault parameters: each rate must be a probability (a number from
    /// 0 to 1). The message names the command-line option the runtime maps it to. A bus
    /// built from an invalid configuration clamps instead (see [`SimBus::new`]).
    pub fn validate(&self) -> Result<(), NotAProbability> {
        for (option, rate) in [("--drop-rate", self.drop_rate), ("--corrupt-rate", self.corrupt_rate)] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(NotAProbability { option, rate });
            }
        }
        Ok(())
    }

    /// The configuration with both rates made probabilities: NaN → 0, clamped to 0..=1.
    pub fn clamped(&self) -> Self {
        BusConfig { drop_rate: probability(self.drop_rate), corrupt_rate: probability(self.corrupt_rate), ..*self }
    }
}

fn probability(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}

impl Default for BusConfig {
    fn default() -> Self {
        BusConfig {
            nominal_bitrate: 1_000_000,
            data_bitrate: 5_000_000,
            turnaround_ns: 50_000,
            adapter_latency_ns: 0,
            queue_capacity: 64,
            drop_rate: 0.0,
            corrupt_rate: 0.0,
            reply_delay_ns: 0,
            fault_seed: 0,
        }
    }
}

/// A fault rate of [`BusConfig`] that is not a number from 0 to 1.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct NotAProbability {
    /// The command-line option the runtime maps the rate to: `--drop-rate` or `--corrupt-rate`.
    pub option: &'static str,
    /// The rate given.
    pub rate: f64,
}

impl fmt::Display for NotAProbability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} is not a probability: give a number from 0 to 1", self.option, self.rate)
    }
}

impl std::error::Error for NotAProbability {}

/// `submit` found the host transmit queue full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusFull;

impl fmt::Display for BusFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("simulated CAN bus transmit queue is full")
    }
}

impl std::error::Error for BusFull {}

/// Counters of what crossed the wire, and of the faults injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BusStats {
    /// Frames the host put on the wire (completed), lost ones included.
    pub host_frames: u64,
    /// Replies the servos put on the wire (completed), lost ones included.
    pub servo_frames: u64,
    /// Bits on the wire, both phases, stuff bits and intermission included (0 without wire
    /// time: frames are not walked bit by bit then).
    pub bits: u64,
    /// Of those, stuff bits.
    pub stuff_bits: u64,
    /// Time the wire was busy, ns.
    pub busy_ns: u64,
    /// Replies lost because the receive queue (or the reply queue) was full.
    pub rx_dropped: u64,
    /// Frames, both directions, lost on the wire by [`BusConfig::drop_rate`].
    pub frames_dropped_injected: u64,
    /// Frames, both directions, corrupted on the wire by [`BusConfig::corrupt_rate`] (and so
    /// rejected by the receiver: lost too, but not counted in `frames_dropped_injected`).
    pub frames_corrupted_injected: u64,
    /// Of `frames_dropped_injected + frames_corrupted_injected`, the replies.
    pub replies_lost_injected: u64,
    /// Injected overheats that started on this bus's servos.
    pub overheats_started: u64,
    /// Faults latched by this bus's servos (injected or not).
    pub faults_latched: u64,
    /// Entries the event log had no room for (see [`crate::inject`]).
    pub events_discarded: u64,
}

/// One frame as it crossed the wire, for traces and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireRecord {
    /// Arbitration id.
    pub id: u32,
    /// Sent by the host (true) or by a servo (false).
    pub from_host: bool,
    /// Time it became ready, ns.
    pub ready_ns: u64,
    /// First bit (SOF), ns.
    pub start_ns: u64,
    /// End of the intermission, ns.
    pub end_ns: u64,
    /// Lost on the wire by an injected fault (`None`: received).
    pub lost: Option<FrameLoss>,
}

/// How an injected fault lost a frame on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameLoss {
    /// Dropped ([`BusConfig::drop_rate`]).
    Dropped,
    /// Corrupted and rejected by CRC ([`BusConfig::corrupt_rate`]).
    Corrupted,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    frame: CanFdFrame,
    from_host: bool,
    ready_ns: u64,
    seq: u64,
}

#[derive(Debug, Clone, Copy)]
struct OnWire {
    pending: Pending,
    start_ns: u64,
    end_ns: u64,
    bits: FrameBits,
}

/// One simulated CAN-FD bus and the servos cabled to it.
#[derive(Debug, Clone)]
pub struct SimBus {
    cfg: BusConfig,
    servos: Vec<Servo>,
    /// Frames waiting for the wire (host and servo), unordered; selection scans it.
    pending: Vec<Pending>,
    host_pending: usize,
    on_wire: Option<OnWire>,
    /// When the wire last became free.
    wire_free_ns: u64,
    rx: VecDeque<(CanFdFrame, u64)>,
    trace: VecDeque<WireRecord>,
    trace_capacity: usize,
    now_ns: u64,
    seq: u64,
    stats: BusStats,
    fault_rng: XorShift64,
    events: EventLog,
}

impl SimBus {
    /// An empty bus. All queues are reserved here. Rates that are not probabilities are
    /// clamped ([`BusConfig::clamped`]); [`config`](Self::config) shows the values in force.
    pub fn new(cfg: BusConfig) -> Self {
        let cap = cfg.queue_capacity.max(1);
        let cfg = cfg.clamped();
        SimBus {
            cfg: BusConfig { queue_capacity: cap, ..cfg },
            servos: Vec::with_capacity(SERVO_CAPACITY),
            // Host frames and replies each have `cap` slots.
            pending: Vec::with_capacity(2 * cap),
            host_pending: 0,
            on_wire: None,
            wire_free_ns: 0,
            rx: VecDeque::with_capacity(cap),
            trace: VecDeque::new(),
            trace_capacity: 0,
            now_ns: 0,
            seq: 0,
            stats: BusStats::default(),
            fault_rng: XorShift64::new(cfg.fault_seed),
            events: EventLog::new(),
        }
    }

    /// The wire parameters.
    pub fn config(&self) -> &BusConfig {
        &self.cfg
    }

    /// Change the bit rates (a controller reconfigured); frames already on the wire keep
    /// their timing. Zero is taken as 1 bit/s.
    pub fn set_bitrates(&mut self, nominal_bitrate: u32, data_bitrate: u32) {
        self.cfg.nominal_bitrate = nominal_bitrate.max(1);
        self.cfg.data_bitrate = data_bitrate.max(1);
    }

    /// Cable a servo to the bus (setup time; may allocate).
    pub fn add_servo(&mut self, servo: Servo) {
        self.servos.push(servo);
    }

    /// Keep the last `capacity` frames that crossed the wire (setup time; allocates once).
    pub fn enable_trace(&mut self, capacity: usize) {
        self.trace = VecDeque::with_capacity(capacity);
        self.trace_capacity = capacity;
    }

    /// The traced frames, oldest first.
    pub fn trace(&self) -> impl Iterator<Item = &WireRecord> + '_ {
        self.trace.iter()
    }

    /// Forget the traced frames (keeps the storage).
    pub fn clear_trace(&mut self) {
        self.trace.clear();
    }

    /// The servos on this bus.
    pub fn servos(&self) -> &[Servo] {
        &self.servos
    }

    /// The servos on this bus, mutably, in the order they were cabled (a servo's index
    /// stays its own when a stored configuration changes its id).
    pub fn servos_mut(&mut self) -> &mut [Servo] {
        &mut self.servos
    }

    /// The servo with CAN id `id`, if it is on this bus.
    pub fn servo_mut(&mut self, id: u8) -> Option<&mut Servo> {
        self.servos.iter_mut().find(|s| s.id() == id)
    }

    /// Schedule an injected overheat of servo `id` at `at_ns` (see
    /// [`Servo::schedule_overheat`]). False when no such servo is on this bus.
    pub fn schedule_overheat(&mut self, id: u8, at_ns: u64) -> bool {
        match self.servo_mut(id) {
            Some(s) => {
                s.schedule_overheat(at_ns);
                true
            }
            None => false,
        }
    }

    /// The oldest entry of the event log, removed (see [`crate::inject`] for what is logged).
    /// The log is brought up to date with the servos' state first, without advancing time.
    pub fn pop_event(&mut self) -> Option<InjectedEvent> {
        self.collect_servo_events();
        self.events.pop()
    }

    /// Hand every entry of the event log to `out`, oldest first, emptying it; returns how
    /// many. Like [`pop_event`](Self::pop_event), does not advance time.
    pub fn drain_events(&mut self, mut out: impl FnMut(InjectedEvent)) -> usize {
        let mut n = 0;
        while let Some(e) = self.pop_event() {
            out(e);
            n += 1;
        }
        n
    }

    /// The entries of the event log, oldest first, without removing them (only what the
    /// bus has collected so far; `pop_event` / `drain_events` collect first).
    pub fn events(&self) -> impl Iterator<Item = &InjectedEvent> + '_ {
        self.events.iter()
    }

    /// The counters so far.
    pub fn stats(&self) -> BusStats {
        self.stats
    }

    /// The latest time the bus has been told about, ns.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Queue a host frame at `now_ns`. It becomes ready after the adapter latency. Payloads
    /// of FD frames are padded with 0x50 to a valid length, as the adapter does on the wire.
    pub fn submit(&mut self, frame: &CanFdFrame, now_ns: u64) -> Result<(), BusFull> {
        self.advance_to(now_ns);
        if self.host_pending >= self.cfg.queue_capacity {
            return Err(BusFull);
        }
        let mut frame = *frame;
        frame.len = frame.len.min(rtloop_proto::frame::MAX_DATA as u8);
        if frame.flags.fd {
            frame.pad_to_dlc();
        }
        let ready_ns = self.now_ns.saturating_add(self.cfg.adapter_latency_ns);
        self.push_pending(frame, true, ready_ns);
        self.host_pending += 1;
        Ok(())
    }

    /// The next reply that finished on the wire by `now_ns`, oldest first.
    pub fn poll_rx(&mut self, now_ns: u64) -> Option<CanFdFrame> {
        self.poll_rx_stamped(now_ns).map(|(f, _)| f)
    }

    /// Like [`poll_rx`](Self::poll_rx), with the time the reply's last bit left the wire.
    pub fn poll_rx_stamped(&mut self, now_ns: u64) -> Option<(CanFdFrame, u64)> {
        self.advance_to(now_ns);
        self.rx.pop_front()
    }

    /// Frames waiting in the receive queue.
    pub fn rx_len(&self) -> usize {
        self.rx.len()
    }

    /// Drop everything waiting in the receive queue; returns how many were dropped.
    pub fn drain_rx(&mut self) -> usize {
        let n = self.rx.len();
        self.rx.clear();
        n
    }

    /// True when nothing is queued, on the wire or waiting to be read.
    pub fn is_idle(&self) -> bool {
        self.on_wire.is_none() && self.pending.is_empty() && self.rx.is_empty()
    }

    /// The earliest time something happens on this bus: a frame ends, the next frame can
    /// start, or (if replies are already waiting) the time the oldest one arrived. `None`
    /// when idle and empty. Servo physics are not events.
    pub fn next_event_ns(&self) -> Option<u64> {
        if let Some(&(_, t)) = self.rx.front() {
            return Some(t);
        }
        if let Some(w) = &self.on_wire {
            return Some(w.end_ns);
        }
        self.pending.iter().map(|p| p.ready_ns).min().map(|r| r.max(self.wire_free_ns))
    }

    /// Process the wire up to `now_ns`: start and finish frames, deliver commands to the
    /// servos, queue their replies, and bring every servo's physics up to `now_ns`. A time
    /// in the past does nothing.
    pub fn advance_to(&mut self, now_ns: u64) {
        if now_ns < self.now_ns {
            return;
        }
        loop {
            if let Some(w) = self.on_wire {
                if w.end_ns > now_ns {
                    break;
                }
                self.on_wire = None;
                self.wire_free_ns = w.end_ns;
                self.finish(w);
                continue;
            }
            let Some(earliest) = self.pending.iter().map(|p| p.ready_ns).min() else {
                break;
            };
            let start = earliest.max(self.wire_free_ns);
            if start > now_ns {
                break;
            }
            // Arbitration among everything ready at `start`: lowest id, then earliest ready,
            // then first queued.
            let mut best: Option<usize> = None;
            for (i, p) in self.pending.iter().enumerate() {
                if p.ready_ns > start {
                    continue;
                }
                best = match best {
                    Some(b) => {
                        let q = &self.pending[b];
                        if (p.frame.id, p.ready_ns, p.seq) < (q.frame.id, q.ready_ns, q.seq) {
                            Some(i)
                        } else {
                            Some(b)
                        }
                    }
                    None => Some(i),
                };
            }
            let Some(i) = best else { break };
            let pending = self.pending.swap_remove(i);
            if pending.from_host {
                self.host_pending -= 1;
            }
            // Without wire time a frame takes no time and has no bits to count: skip the
            // bit-stuffing walk, the costliest part of a simulated cycle.
            let (bits, end_ns) = if self.cfg.nominal_bitrate == u32::MAX && self.cfg.data_bitrate == u32::MAX {
                (FrameBits::default(), start)
            } else {
                let bits = frame_bits(&pending.frame);
                (bits, start + bits.time_ns(self.cfg.nominal_bitrate, self.cfg.data_bitrate))
            };
            self.on_wire = Some(OnWire { pending, start_ns: start, end_ns, bits });
        }
        self.now_ns = now_ns;
        for s in &mut self.servos {
            s.advance_to(now_ns);
        }
        self.collect_servo_events();
    }

    /// Log (and count) overheats started and faults latched by the servos since last time.
    fn collect_servo_events(&mut self) {
        for i in 0..self.servos.len() {
            let id = self.servos[i].id();
            let (overheat, latch) = self.servos[i].take_reports();
            if let Some(at_ns) = overheat {
                self.stats.overheats_started += 1;
                self.log(InjectedEvent { at_ns, servo: Some(id), kind: InjectedKind::OverheatStarted });
            }
            if let Some((at_ns, code)) = latch {
                self.stats.faults_latched += 1;
                self.log(InjectedEvent { at_ns, servo: Some(id), kind: InjectedKind::FaultLatched { code } });
            }
        }
    }

    fn log(&mut self, ev: InjectedEvent) {
        if !self.events.push(ev) {
            self.stats.events_discarded += 1;
        }
    }

    /// Draw the injected fate of one frame on the wire.
    fn injected_loss(&mut self) -> Option<FrameLoss> {
        if self.cfg.drop_rate > 0.0 && self.fault_rng.next_f64() < self.cfg.drop_rate {
            return Some(FrameLoss::Dropped);
        }
        if self.cfg.corrupt_rate > 0.0 && self.fault_rng.next_f64() < self.cfg.corrupt_rate {
            return Some(FrameLoss::Corrupted);
        }
        None
    }

    fn push_pending(&mut self, frame: CanFdFrame, from_host: bool, ready_ns: u64) {
        self.seq += 1;
        self.pending.push(Pending { frame, from_host, ready_ns, seq: self.seq });
    }

    /// A frame's last bit has left the wire at `w.end_ns`.
    fn finish(&mut self, w: OnWire) {
        let OnWire { pending, start_ns, end_ns, bits } = w;
        self.stats.bits += u64::from(bits.total());
        self.stats.stuff_bits += u64::from(bits.stuff_bits);
        self.stats.busy_ns += end_ns - start_ns;
        let lost = self.injected_loss();
        if self.trace_capacity > 0 {
            if self.trace.len() == self.trace_capacity {
                self.trace.pop_front();
            }
            self.trace.push_back(WireRecord {
                id: pending.frame.id,
                from_host: pending.from_host,
                ready_ns: pending.ready_ns,
                start_ns,
                end_ns,
                lost,
            });
        }
        if pending.from_host {
            self.stats.host_frames += 1;
        } else {
            self.stats.servo_frames += 1;
        }
        if let Some(loss) = lost {
            let arb = pending.frame.arbitration();
            let servo = if pending.from_host {
                Some(arb.destination).filter(|&d| d != rtloop_proto::frame::BROADCAST)
            } else {
                self.stats.replies_lost_injected += 1;
                Some(arb.source)
            };
            let kind = match loss {
                FrameLoss::Dropped => {
                    self.stats.frames_dropped_injected += 1;
                    LossKind::Dropped
                }
                FrameLoss::Corrupted => {
                    self.stats.frames_corrupted_injected += 1;
                    LossKind::Corrupted
                }
            };
            if !self.events.frame_lost(kind, end_ns, servo) {
                self.stats.events_discarded += 1;
            }
            return;
        }
        if pending.from_host {
            let ready_ns = end_ns.saturating_add(self.cfg.turnaround_ns).saturating_add(self.cfg.reply_delay_ns);
            for i in 0..self.servos.len() {
                let mut reply = CanFdFrame::default();
                if self.servos[i].handle_frame(&pending.frame, end_ns, &mut reply) {
                    let replies = self.pending.len() - self.host_pending;
                    if replies >= self.cfg.queue_capacity {
                        self.stats.rx_dropped += 1;
                    } else {
                        self.push_pending(reply, false, ready_ns);
                    }
                }
            }
        } else if self.rx.len() >= self.cfg.queue_capacity {
            self.stats.rx_dropped += 1;
        } else {
            self.rx.push_back((pending.frame, end_ns));
        }
    }
}
