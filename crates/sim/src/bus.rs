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
//! * A reply becomes ready `turnaround_ns` after the end of the command that asked for it.
//! * Whenever the wire is free, the ready frame with the lowest id starts (ties: the one
//!   ready first, then the one queued first). A frame that becomes ready while the wire is
//!   busy waits for the end of the current frame. A frame that becomes ready at exactly the
//!   instant another starts has missed that arbitration, as on a real bus.
//! * A host frame is delivered, when its last bit is on the wire, to every servo whose id
//!   it names (or all, for broadcast); a reply is queued for the host, stamped with its end
//!   time. A reply to a servo id that is not on the bus never comes (the host times out).

use std::collections::VecDeque;
use std::fmt;

use proto::frame::CanFdFrame;

pub use crate::bits::{frame_bits, frame_time_ns, FrameBits};
use crate::servo::Servo;

/// Servos a bus reserves room for in `new` (more may be added; `add_servo` runs at setup).
const SERVO_CAPACITY: usize = 16;

/// Wire parameters of one bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

impl BusConfig {
    /// A bus whose wire takes (next to) no time and whose servos answer at once: for
    /// measuring everything around the wire — host, transport, server — rather than the
    /// physics of CAN-FD. Frames still queue and arbitrate in order.
    pub fn without_wire_time() -> Self {
        BusConfig { nominal_bitrate: u32::MAX, data_bitrate: u32::MAX, turnaround_ns: 0, ..BusConfig::default() }
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
        }
    }
}

/// `submit` found the host transmit queue full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusFull;

impl fmt::Display for BusFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("simulated CAN bus transmit queue is full")
    }
}

impl std::error::Error for BusFull {}

/// Counters of what crossed the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BusStats {
    /// Frames the host put on the wire (completed).
    pub host_frames: u64,
    /// Replies the servos put on the wire (completed).
    pub servo_frames: u64,
    /// Bits on the wire, both phases, stuff bits and intermission included.
    pub bits: u64,
    /// Of those, stuff bits.
    pub stuff_bits: u64,
    /// Time the wire was busy, ns.
    pub busy_ns: u64,
    /// Replies lost because the receive queue (or the reply queue) was full.
    pub rx_dropped: u64,
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
}

impl SimBus {
    /// An empty bus. All queues are reserved here.
    pub fn new(cfg: BusConfig) -> Self {
        let cap = cfg.queue_capacity.max(1);
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
        }
    }

    /// The wire parameters.
    pub fn config(&self) -> &BusConfig {
        &self.cfg
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

    /// The servo with CAN id `id`, if it is on this bus.
    pub fn servo_mut(&mut self, id: u8) -> Option<&mut Servo> {
        self.servos.iter_mut().find(|s| s.id() == id)
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
        frame.len = frame.len.min(proto::frame::MAX_DATA as u8);
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
            let bits = frame_bits(&pending.frame);
            let end_ns = start + bits.time_ns(self.cfg.nominal_bitrate, self.cfg.data_bitrate);
            self.on_wire = Some(OnWire { pending, start_ns: start, end_ns, bits });
        }
        self.now_ns = now_ns;
        for s in &mut self.servos {
            s.advance_to(now_ns);
        }
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
            });
        }
        if pending.from_host {
            self.stats.host_frames += 1;
            let ready_ns = end_ns.saturating_add(self.cfg.turnaround_ns);
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
        } else {
            self.stats.servo_frames += 1;
            if self.rx.len() >= self.cfg.queue_capacity {
                self.stats.rx_dropped += 1;
            } else {
                self.rx.push_back((pending.frame, end_ns));
            }
        }
    }
}
