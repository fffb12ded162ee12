//! The multi-bus cycle: one call that writes every frame, reads the IMU while replies are
//! in flight, and collects replies against a deadline — the pi3hat "omnibus" cycle,
//! over any set of [`Transport`]s.
//!
//! Order inside a cycle (see `shared/spec/pi3hat-and-cycle.md`):
//! 1. estimate, per bus, when every reply can be back, from the frames' real bit counts;
//! 2. drain frames that arrived since the last cycle (late replies to earlier requests):
//!    they are handed to the caller marked [`RxFrame::drained`], never counted as answers
//!    (buses whose reads cost time, a pi3hat's, only when earlier replies are still owed);
//! 3. write all frames one per bus per pass, round-robin (buses in [`Transport::write_rank`]
//!    order), so every bus starts transmitting as early as possible while the rest queue behind;
//! 4. read the IMU while the replies are on the wires;
//! 5. poll for replies, returning early once every expected reply is in (plus the optional
//!    extra wait), else giving up at the estimate plus the baseline wait after the writes,
//!    capped by the hard timeout from the start.
//!
//! Which received frame is an *expected* reply is the caller's to say
//! ([`Cycler::cycle_matching`]): a late reply to an earlier request that lands inside this
//! cycle must not end the wait for this cycle's own reply from the same servo. The plain
//! [`Cycler::cycle`] counts every frame, as pi3hat's cycle does.
//!
//! Must never: allocate (every buffer is the caller's or was sized at construction), block
//! past the deadline, or let one failing bus stop the others.

use crate::clock::Clock;
use crate::transport::ImuSample;
use crate::transport::{ImuSource, Transport, TransportError};
use rtloop_proto::CanFdFrame;

/// The most buses one cycle drives.
pub const MAX_BUSES: usize = 16;

/// The most reply tags a servo may use ([`crate::RobotConfig::reply_tags`]): CAN source ids
/// `host_id .. host_id + tags`.
pub const MAX_REPLY_TAGS: u8 = 16;

/// A frame to send: which bus, the frame, and whether its destination will answer.
#[derive(Debug, Clone, Copy, Default)]
pub struct TxFrame {
    /// Index into the cycler's bus list.
    pub bus: usize,
    /// The frame, already padded to a CAN-FD length.
    pub frame: CanFdFrame,
    /// The destination answers (reply bit set) and the cycle should wait for it.
    pub expect_reply: bool,
}

/// A received frame and where and when it arrived.
#[derive(Debug, Clone, Copy, Default)]
pub struct RxFrame {
    /// Index into the cycler's bus list.
    pub bus: usize,
    /// The frame as received.
    pub frame: CanFdFrame,
    /// When the cycle picked it up.
    pub at_ns: u64,
    /// Taken at the start of the cycle, before any frame of this cycle was sent: it cannot
    /// answer this cycle's requests (a late reply to an earlier one, or a stray).
    pub drained: bool,
}

/// Timing knobs of a cycle (names follow pi3hat's).
#[derive(Debug, Clone, Copy)]
pub struct CycleOptions {
    /// Hard cap on the whole cycle.
    pub timeout_ns: u64,
    /// How long past the wire-time estimate to keep waiting for missing replies.
    pub rx_baseline_wait_ns: u64,
    /// Keep listening this long after the last expected reply arrived.
    pub rx_extra_wait_ns: u64,
    /// Minimum time to listen on buses in `force_check` when nothing is expected.
    pub min_tx_wait_ns: u64,
    /// Bitmask of buses to listen on even when no reply is expected from them.
    pub force_check: u32,
    /// Poll period for transports that can neither tell when data will arrive nor offer a
    /// descriptor to wait on.
    pub poll_interval_ns: u64,
    /// Spin instead of sleeping in `ppoll` while waiting for device replies: lowest
    /// turnaround (the source posts' 4 µs vs 30-80 µs), at the price of a busy CPU.
    pub busy_poll: bool,
    /// Bitrates used for the reply-time estimate.
    pub nominal_bitrate: u32,
    /// Data-phase bitrate used for the estimate.
    pub data_bitrate: u32,
    /// Servo turnaround assumed by the estimate.
    pub turnaround_ns: u64,
}

impl Default for CycleOptions {
    fn default() -> Self {
        CycleOptions {
            timeout_ns: 5_000_000,
            rx_baseline_wait_ns: 1_000_000,
            rx_extra_wait_ns: 0,
            min_tx_wait_ns: 200_000,
            force_check: 0,
            poll_interval_ns: 20_000,
            busy_poll: false,
            nominal_bitrate: 1_000_000,
            data_bitrate: 5_000_000,
            turnaround_ns: 50_000,
        }
    }
}

/// What happened in one cycle. Plain data, `Copy`, no allocation.
#[derive(Debug, Clone, Copy, Default)]
pub struct CycleStats {
    /// When the cycle started.
    pub started_ns: u64,
    /// When the last frame had been handed to its transport.
    pub tx_done_ns: u64,
    /// When the cycle returned.
    pub finished_ns: u64,
    /// The instant the cycle would have given up at.
    pub deadline_ns: u64,
    /// Frames handed to transports.
    pub sent: u32,
    /// Frames a transport refused.
    pub send_errors: u32,
    /// Frames that expected a reply.
    pub expected: u32,
    /// Frames received after the writes (stored or not).
    pub received: u32,
    /// Received frames the caller's matcher took for this cycle's expected replies (every
    /// received frame with [`Cycler::cycle`]).
    pub answered: u32,
    /// Frames written to the caller's buffer: drained ones first, then received ones.
    pub stored: u32,
    /// Frames that did not fit in the caller's buffer (counted, not stored).
    pub rx_overflow: u32,
    /// Frames that had arrived before the cycle started (late replies of an earlier cycle),
    /// stored with [`RxFrame::drained`] set.
    pub stale_drained: u32,
    /// Whether the IMU produced a sample this cycle.
    pub imu_present: bool,
    /// The deadline passed before every expected reply was in.
    pub timed_out: bool,
    /// Buses that failed this cycle, as a bitmask; the error is in `bus_errors`.
    pub failed_buses: u32,
    /// The error of each failed bus.
    pub bus_errors: [Option<TransportError>; MAX_BUSES],
}

impl CycleStats {
    /// Total duration.
    pub fn duration_ns(&self) -> u64 {
        self.finished_ns.saturating_sub(self.started_ns)
    }
}

/// Owns the buses, the IMU and a clock; runs cycles over caller-owned frame buffers.
pub struct Cycler<C: Clock> {
    buses: Vec<Box<dyn Transport>>,
    imu: Option<Box<dyn ImuSource>>,
    clock: C,
    /// Per-bus scratch, sized at construction so a cycle never allocates.
    expected: Vec<u32>,
    received: Vec<u32>,
    cursor: Vec<usize>,
    estimate: Vec<u64>,
    pollfds: Vec<libc::pollfd>,
    /// Bus indices in the order each write pass visits them ([`Transport::write_rank`]).
    write_order: Vec<usize>,
    /// Buses whose empty reads cost bus time ([`Transport::reads_cost_time`]), as a bitmask.
    costly_reads: u32,
    /// Options for every cycle; adjustable between cycles.
    pub options: CycleOptions,
}

/// Why a cycler or robot could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SetupError {
    /// More buses than [`MAX_BUSES`].
    TooManyBuses(usize),
    /// A servo names a bus index that does not exist.
    NoSuchBus {
        /// The servo id.
        servo: u8,
        /// The bus index it names.
        bus: usize,
    },
    /// A servo id outside 1..=127.
    BadServoId(u8),
    /// The same servo id twice on one bus.
    DuplicateServo {
        /// The bus index.
        bus: usize,
        /// The repeated id.
        id: u8,
    },
    /// The reply tags (host source ids `host_id .. host_id + reply_tags`) are not 1 to
    /// 16 ids below the broadcast id 0x7F.
    BadReplyTags {
        /// The configured host id.
        host_id: u8,
        /// The configured number of tags.
        reply_tags: u8,
    },
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupError::TooManyBuses(n) => write!(f, "{n} buses configured; at most {MAX_BUSES} are supported"),
            SetupError::NoSuchBus { servo, bus } => {
                write!(f, "servo {servo} is on bus index {bus}, which is not configured")
            }
            SetupError::BadServoId(id) => write!(f, "servo id {id} is outside 1..=127"),
            SetupError::DuplicateServo { bus, id } => write!(f, "servo id {id} appears twice on bus index {bus}"),
            SetupError::BadReplyTags { host_id, reply_tags } => write!(
                f,
                "host id {host_id} with {reply_tags} reply tags does not fit: give 1 to {} tags and keep \
                 host id + tags at most 127",
                MAX_REPLY_TAGS
            ),
        }
    }
}

impl std::error::Error for SetupError {}

impl<C: Clock> Cycler<C> {
    /// A cycler over `buses` (index = position in the list).
    pub fn new(
        buses: Vec<Box<dyn Transport>>,
        imu: Option<Box<dyn ImuSource>>,
        clock: C,
        options: CycleOptions,
    ) -> Result<Self, SetupError> {
        if buses.len() > MAX_BUSES {
            return Err(SetupError::TooManyBuses(buses.len()));
        }
        let n = buses.len();
        let mut write_order: Vec<usize> = (0..n).collect();
        write_order.sort_by_key(|&b| buses[b].write_rank());
        let costly_reads = (0..n).filter(|&b| buses[b].reads_cost_time()).fold(0u32, |m, b| m | 1 << b);
        Ok(Cycler {
            buses,
            imu,
            clock,
            expected: vec![0; n],
            received: vec![0; n],
            cursor: vec![0; n],
            estimate: vec![0; n],
            pollfds: Vec::with_capacity(n),
            costly_reads,
            write_order,
            options,
        })
    }

    /// The clock the cycles run on.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The cycle reads an IMU (a simulated one, or a pi3hat's).
    pub fn has_imu(&self) -> bool {
        self.imu.is_some()
    }

    /// Number of buses.
    pub fn bus_count(&self) -> usize {
        self.buses.len()
    }

    /// Running counters of bus `i` (protocol errors, disconnects, reconnects, …).
    pub fn bus_counters(&self, i: usize) -> Option<crate::transport::TransportCounters> {
        self.buses.get(i).map(|b| b.counters())
    }

    /// The name of bus `i`.
    pub fn bus_name(&self, i: usize) -> Option<&str> {
        self.buses.get(i).map(|b| b.name())
    }

    /// Run one cycle: send `tx`, read the IMU into `imu`, collect replies into `rx`.
    /// Returns the statistics; `rx[..stats.stored]` holds the frames: those drained at the
    /// start (marked [`RxFrame::drained`]), then those received, in arrival order. Every
    /// received frame counts toward the expected replies of its bus.
    pub fn cycle(&mut self, tx: &[TxFrame], rx: &mut [RxFrame], imu: &mut ImuSample) -> CycleStats {
        self.cycle_matching(tx, rx, imu, &[], |_, _| true)
    }

    /// [`Cycler::cycle`], with `answers(bus, frame)` saying whether a frame received after
    /// the writes is one of this cycle's expected replies. Only those count toward a bus's
    /// expected replies, so a late answer to an earlier request cannot end the wait early.
    /// Every frame is stored either way. `awaited[b]` more replies to earlier requests are
    /// expected on bus `b` (the matcher says which frames they are): the bus is read and the
    /// cycle waits for them like for this cycle's, up to the same deadline.
    pub fn cycle_matching<F>(
        &mut self,
        tx: &[TxFrame],
        rx: &mut [RxFrame],
        imu: &mut ImuSample,
        awaited: &[u32],
        mut answers: F,
    ) -> CycleStats
    where
        F: FnMut(usize, &CanFdFrame) -> bool,
    {
        let opts = self.options;
        let nbus = self.buses.len();
        let mut st = CycleStats { started_ns: self.clock.now_ns(), ..Default::default() };
        // 1. Per-bus wire estimate: each frame and (if answered) a reply of similar size,
        //    plus one exposed turnaround.
        for b in 0..nbus {
            self.expected[b] = 0;
            self.received[b] = 0;
            self.cursor[b] = 0;
            self.estimate[b] = 0;
        }
        for t in tx {
            if t.bus >= nbus {
                st.send_errors += 1;
                continue;
            }
            let ft = estimate_frame_time_ns(&t.frame, opts.nominal_bitrate, opts.data_bitrate);
            self.estimate[t.bus] += ft;
            if t.expect_reply {
                self.expected[t.bus] += 1;
                self.estimate[t.bus] += ft;
            }
        }
        for (b, &n) in awaited.iter().enumerate().take(nbus) {
            self.expected[b] += n;
        }
        let mut estimate = 0;
        for b in 0..nbus {
            if self.expected[b] > 0 {
                estimate = estimate.max(self.estimate[b] + opts.turnaround_ns);
            }
        }
        st.expected = self.expected.iter().sum();
        st.deadline_ns = st.started_ns + opts.timeout_ns.min(estimate + opts.rx_baseline_wait_ns);
        let forced = opts.force_check & ((1u32 << nbus.min(31)) - 1);
        let read = |expected: u32, b: usize| expected > 0 || forced & (1 << b) != 0;
        if st.expected == 0 && forced == 0 {
            st.deadline_ns = st.started_ns;
        }

        // 2. Take what arrived since the last cycle on every bus that will be read. These
        //    frames were on their way before this cycle's requests: they go to the caller
        //    marked as drained, who may attribute them to earlier requests. A bus whose reads
        //    cost bus time (a pi3hat's) is drained only when earlier replies are still owed
        //    or it is force-checked: otherwise a drain could only find strays, which the
        //    collection below reads anyway (and the matcher does not take for answers).
        for b in 0..nbus {
            if !read(self.expected[b], b) {
                continue;
            }
            let owed = awaited.get(b).is_some_and(|&n| n > 0) || forced & (1 << b) != 0;
            if self.costly_reads & (1 << b) != 0 && !owed {
                continue;
            }
            for _ in 0..MAX_DRAIN_FRAMES {
                match self.buses[b].recv(st.started_ns) {
                    Ok(Some(frame)) => {
                        st.stale_drained += 1;
                        let at_ns = st.started_ns;
                        store(&mut st, rx, RxFrame { bus: b, frame, at_ns, drained: true });
                    }
                    Ok(None) => break,
                    Err(e) => {
                        fail_bus(&mut st, b, e);
                        break;
                    }
                }
            }
        }

        // 3. Round-robin writes: pass k sends the k-th frame of every bus.
        loop {
            let mut any = false;
            for k in 0..nbus {
                let b = self.write_order[k];
                let mut i = self.cursor[b];
                while i < tx.len() && tx[i].bus != b {
                    i += 1;
                }
                if i >= tx.len() {
                    self.cursor[b] = i;
                    continue;
                }
                any = true;
                self.cursor[b] = i + 1;
                if st.failed_buses & (1 << b) != 0 {
                    st.send_errors += 1;
                    if tx[i].expect_reply {
                        self.expected[b] = self.expected[b].saturating_sub(1);
                    }
                    continue;
                }
                let now = self.clock.now_ns();
                match self.buses[b].send(&tx[i].frame, now) {
                    Ok(()) => st.sent += 1,
                    Err(e) => {
                        st.send_errors += 1;
                        if tx[i].expect_reply {
                            self.expected[b] = self.expected[b].saturating_sub(1);
                        }
                        if e != TransportError::QueueFull {
                            fail_bus(&mut st, b, e);
                        }
                    }
                }
            }
            if !any {
                break;
            }
        }
        for b in 0..nbus {
            if self.estimate[b] > 0 && st.failed_buses & (1 << b) == 0 {
                if let Err(e) = self.buses[b].flush(self.clock.now_ns()) {
                    fail_bus(&mut st, b, e);
                }
            }
        }
        st.tx_done_ns = self.clock.now_ns();
        // The wire estimate runs from when the frames were handed over: writes that took long
        // (a slow device, a simulator catching up on physics) must not eat the replies' time.
        // The hard cap still counts from the start.
        if st.deadline_ns > st.started_ns {
            let from_writes = st.tx_done_ns.saturating_add(estimate + opts.rx_baseline_wait_ns);
            st.deadline_ns = st.deadline_ns.max(from_writes).min(st.started_ns + opts.timeout_ns);
        }

        // 4. The IMU, while replies are in flight.
        if let Some(src) = self.imu.as_mut() {
            st.imu_present = matches!(src.read(st.tx_done_ns, imu), Ok(true));
        }

        // 5. Collect.
        let mut all_in_at: Option<u64> = None;
        let min_listen_until = if forced != 0 { st.started_ns + opts.min_tx_wait_ns } else { 0 };
        loop {
            let now = self.clock.now_ns();
            for b in 0..nbus {
                if st.failed_buses & (1 << b) != 0 {
                    continue;
                }
                if !read(self.expected[b], b) {
                    continue;
                }
                if self.done_reading(b, forced) {
                    continue;
                }
                loop {
                    match self.buses[b].recv(now) {
                        Ok(Some(frame)) => {
                            st.received += 1;
                            if answers(b, &frame) {
                                self.received[b] += 1;
                                st.answered += 1;
                            }
                            store(&mut st, rx, RxFrame { bus: b, frame, at_ns: now, drained: false });
                        }
                        Ok(None) => break,
                        Err(e) => {
                            fail_bus(&mut st, b, e);
                            break;
                        }
                    }
                }
            }
            let all_in = (0..nbus).all(|b| st.failed_buses & (1 << b) != 0 || self.received[b] >= self.expected[b]);
            let mut wake = st.deadline_ns;
            if all_in {
                let at = *all_in_at.get_or_insert(now);
                let done_at = (at + opts.rx_extra_wait_ns).max(min_listen_until);
                if now >= done_at {
                    break;
                }
                wake = wake.min(done_at);
            }
            if now >= st.deadline_ns {
                st.timed_out = !all_in;
                break;
            }
            // Sleep until the earliest instant anything can change: a simulator's next event,
            // a device descriptor becoming readable, or the deadline.
            let mut hint = u64::MAX;
            let mut blind = false;
            self.pollfds.clear();
            for b in 0..nbus {
                // A bus no longer read cannot end the wait: its hint would only wake the loop.
                if st.failed_buses & (1 << b) != 0 || self.done_reading(b, forced) {
                    continue;
                }
                let bus = &self.buses[b];
                match (bus.ready_hint_ns(), bus.poll_fd()) {
                    (Some(h), _) => hint = hint.min(h.max(now + 1)),
                    (None, Some(fd)) => {
                        if self.pollfds.len() < self.pollfds.capacity() {
                            self.pollfds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
                        }
                    }
                    (None, None) => blind = true,
                }
            }
            if blind || (opts.busy_poll && !self.pollfds.is_empty()) {
                hint = hint.min(now + if opts.busy_poll { 0 } else { opts.poll_interval_ns });
            }
            let until = wake.min(hint);
            if self.pollfds.is_empty() || opts.busy_poll {
                if until > now {
                    self.clock.wait_until_ns(until);
                }
            } else {
                self.clock.wait_readable_until_ns(&mut self.pollfds, until);
            }
        }
        st.finished_ns = self.clock.now_ns();
        st
    }
}

impl<C: Clock> Cycler<C> {
    /// Bus `b` has every reply it expects, is not force-checked, and reading it costs bus
    /// time ([`Transport::reads_cost_time`]): the cycle stops reading it.
    fn done_reading(&self, b: usize, forced: u32) -> bool {
        self.costly_reads & (1 << b) != 0 && forced & (1 << b) == 0 && self.received[b] >= self.expected[b]
    }
}

/// Upper bound of one frame's wire time, in closed form: the deadline estimate needs a
/// bound, not the exact stuffed bit count (which the simulator's wire model computes by walking
/// every bit — a few hundred nanoseconds per frame the hot path does not need to spend).
/// Arbitration, ACK, EOF and intermission at the nominal rate with worst-case stuffing of
/// the header (one stuff bit per four); DLC, payload, stuff count and CRC at the data rate
/// with the same worst case.
pub fn estimate_frame_time_ns(frame: &CanFdFrame, nominal_bitrate: u32, data_bitrate: u32) -> u64 {
    let len = rtloop_proto::frame::round_up_dlc(frame.len as usize).unwrap_or(64) as u64;
    let header: u64 = if frame.flags.extended { 38 } else { 19 };
    let nominal_bits = header + header / 4 + 12;
    let crc: u64 = if len > 16 { 21 } else { 17 };
    let data_bits = 5 + len * 8 + (len * 8) / 4 + 4 + crc + 8 + 1;
    let rate = |r: u32| u64::from(r.max(1));
    let data_rate = if frame.flags.brs { rate(data_bitrate) } else { rate(nominal_bitrate) };
    nominal_bits * 1_000_000_000 / rate(nominal_bitrate) + data_bits * 1_000_000_000 / data_rate
}

/// Most frames taken from one bus before a cycle's writes: a device that streams without
/// end cannot hold the cycle in its drain.
const MAX_DRAIN_FRAMES: usize = 256;

fn store(st: &mut CycleStats, rx: &mut [RxFrame], frame: RxFrame) {
    match rx.get_mut(st.stored as usize) {
        Some(slot) => {
            *slot = frame;
            st.stored += 1;
        }
        None => st.rx_overflow += 1,
    }
}

fn fail_bus(st: &mut CycleStats, b: usize, e: TransportError) {
    if b < MAX_BUSES {
        st.failed_buses |= 1 << b;
        st.bus_errors[b] = Some(e);
    }
}
