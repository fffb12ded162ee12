//! The cycle-time model (the "spreadsheet"): a term-by-term prediction of one control cycle.
//!
//! What it is for: answering "how long should one cycle take, and where does the time go?"
//! before measuring — so a CLI can print predicted against measured, term by term, and a
//! regression in either shows which term moved.
//! What it must never do: measure anything, read a clock or touch a bus; it is arithmetic
//! on a description of the robot. (It allocates freely: it is not on the real-time path.)
//!
//! # The model
//!
//! Every bus runs in parallel; on each, the host writes one command per servo and each
//! servo answers. Per bus with `n` servos (ids numbered from 1 across the buses in order,
//! as [`crate::default_quadruped`] does), the model plays the bus's arbitration through
//! with representative frames, exactly as [`crate::SimBus`] does with real ones: whenever
//! the wire is free, the ready frame with the lowest id goes; a command is ready when the
//! host has handed it over, its reply a turnaround after the command's last bit. Replies
//! (`servo << 8`) have lower ids than commands (`0x8000 | servo`), so a ready reply
//! overtakes every queued command. The bus time is when the last reply ends, and it splits
//! exactly into four terms:
//!
//! * **command frames** — the sum of the wire times of the `n` commands ([`frame_bits`] on
//!   a representative frame with the servo's real id).
//! * **reply frames** — the same for the `n` replies (extended id `servo << 8`).
//! * **turnaround** — time the wire stands idle because the next frame to go is a reply that
//!   is not ready yet. Replies to earlier commands fill most turnarounds: with a
//!   turnaround shorter than a command, commands and replies go in pairs (c1 c2 r1 r2 c3
//!   c4 r3 r4 …), and only an odd last command leaves its turnaround exposed. (An earlier
//!   model charged every bus one turnaround after its last command; for an even number of
//!   servos that over-predicted by a whole turnaround, 50 µs at the defaults.)
//! * **host write** — time the wire stands idle waiting for the host: frames are written
//!   round-robin, one per bus per pass, so bus `k` (1-based) gets its `j`-th frame
//!   (0-based) `(j · buses + k) · host_per_frame` after the cycle starts.
//!
//! The cycle is the slowest bus, plus the IMU read and the host's fixed per-cycle cost.
//!
//! # Behind a pi3hat ([`CycleModel::pi3hat`])
//!
//! With a pi3hat between host and buses, every byte of every frame crosses the board's SPI,
//! one transaction at a time, and the SPI — not the host's CPU — sets the pace. The model
//! plays one cycle as rtloop's pi3hat transport (and the official library) drives the board,
//! each transaction taking [`Pi3hatConfig::transaction_ns`] (2 × CS hold + address hold +
//! (1 + bytes) × 8 bits at the SPI clock):
//!
//! 1. **drain** — none: the transport reads a processor before its writes only when replies
//!    of an earlier cycle are still owed (one receive-status read, 6 bytes, per such
//!    processor), and in the model every reply is in by the end of its cycle (the term stays,
//!    at 0, so a late cycle's cost has its name);
//! 2. **writes** — one transaction per command (register 5 when the id fits in two bytes:
//!    1 header byte + 2 id bytes + the payload, without the padding the board restores; else
//!    register 4 with a 4-byte id), one per bus per pass in bus order 1, 3, 5, 2, 4
//!    ([`PI3HAT_WRITE_ORDER`]). A command reaches its bus when its write completes, so each
//!    bus's wire starts while the later writes are still on the SPI;
//! 3. **attitude** — register 34, the 42-byte short read, while replies are on the wires;
//! 4. **reads** — the processors are served in turn (in the order of their first bus): a
//!    receive-status read, sampled once its address byte and hold are clocked, shows every
//!    reply its processor holds by then (at most six), and one pop (register 3: 5 header
//!    bytes + the reply at its CAN-FD length) follows per reply shown. When no processor holds
//!    a reply, the SPI waits for the next one to land (a real host polls blindly meanwhile;
//!    the model charges none of those empty polls).
//!
//! The wires are played exactly as without a pi3hat (see above), each command handed over
//! when its SPI write ends, so the per-bus terms keep their meaning ("spi write" replaces
//! "host write": the wire idle until the SPI has written the command). The cycle ends when
//! the last reply is both on the board and popped, so its terms are the SPI's own time line,
//! which adds up exactly: drain + writes + attitude + status reads + pops + waits (the SPI
//! idle, waiting for the wires) + the host's fixed cost. The **critical path** says what the
//! end of the cycle waited on: the SPI (the last reply sat in the board's queue while the SPI
//! was busy) or the wire (the SPI was idle, waiting for it). `host_per_frame_ns` and
//! `imu_read_ns` do not apply (the SPI transactions are those costs).
//!
//! # Representative frames and stuffing
//!
//! The payload content is unknown to the model (it depends on the commanded values), so a
//! representative frame carries `command_bytes` (or `reply_bytes`) of 0x55 — alternating
//! bits, which never stuff — padded with 0x50 to the CAN-FD length. [`frame_bits`] then
//! counts the fixed structure, the id's stuffing and the padding's stuffing exactly, and
//! the model adds `stuff_fraction` × (8 × content bytes) data-phase bits for the content.
//! 0.13 is the default: float registers of small values and int8 fields are full of zero
//! runs, and the real default command and reply (position/velocity/feedforward floats with
//! the comprehensive query, and its answer) measure 12-16% over a range of positions
//! (`real_frames_stuff_about_as_the_model_assumes` in tests/sim/bus.rs).

use std::fmt;

use rtloop_proto::frame::{ArbitrationId, CanFdFrame, FrameFlags, MAX_DATA};

use crate::bits::{frame_bits, FrameBits};
use crate::pi3hat::{processor_port, Pi3hatConfig, ATTITUDE_SHORT_LEN, RX_HEADER_LEN, RX_STATUS_SLOTS};

/// The order the pi3hat's buses are written in, one frame per bus per pass (the official
/// library's, and rtloop's transport's): both CAN processors get a frame early.
pub const PI3HAT_WRITE_ORDER: [u8; 5] = [1, 3, 5, 2, 4];

/// What the model needs to know about a robot and its buses.
#[derive(Debug, Clone, PartialEq)]
pub struct CycleModel {
    /// Servos on each bus, in bus order (bus 1 first).
    pub servos_per_bus: Vec<usize>,
    /// Command payload before padding, bytes.
    pub command_bytes: usize,
    /// Reply payload before padding, bytes.
    pub reply_bytes: usize,
    /// Arbitration-phase bit rate, bit/s.
    pub nominal_bitrate: u32,
    /// Data-phase bit rate, bit/s.
    pub data_bitrate: u32,
    /// Servo turnaround, ns.
    pub turnaround_ns: u64,
    /// Host cost to encode and hand over one frame, ns.
    pub host_per_frame_ns: u64,
    /// Host cost per cycle independent of the frames (wake-up, bookkeeping), ns.
    pub host_fixed_ns: u64,
    /// Reading the IMU, ns.
    pub imu_read_ns: u64,
    /// Expected dynamic stuff bits per content bit of the payload (0.13).
    pub stuff_fraction: f64,
    /// The buses are a pi3hat's connectors: frames and replies cross its SPI (see the
    /// module docs). `None`: the host hands frames to the buses directly.
    pub pi3hat: Option<Pi3hatHost>,
}

/// A pi3hat between the host and the buses.
#[derive(Debug, Clone, PartialEq)]
pub struct Pi3hatHost {
    /// The connector (JC1-JC5: 1-5) of each entry of [`CycleModel::servos_per_bus`], in the
    /// same order; an entry missing here is connector index + 1.
    pub connectors: Vec<u8>,
    /// SPI clock and hold times (its receive-queue capacity is not used).
    pub spi: Pi3hatConfig,
    /// Read the attitude (register 34, the 42-byte short read) every cycle.
    pub attitude: bool,
}

impl Pi3hatHost {
    /// `connectors` at the board's defaults (10 MHz, 3 µs holds), reading the attitude.
    pub fn new(connectors: Vec<u8>) -> Self {
        Pi3hatHost { connectors, spi: Pi3hatConfig::default(), attitude: true }
    }

    /// Time one transaction of `data_bytes` occupies the SPI, ns.
    pub fn transaction_ns(&self, data_bytes: usize) -> u64 {
        self.spi.transaction_ns(data_bytes)
    }

    /// From the start of a read to the instant the processor samples its register: the gap
    /// before CS low, the hold after it, the address byte and the address hold, ns.
    pub fn sample_offset_ns(&self) -> u64 {
        2 * self.spi.cs_hold_ns + self.spi.bits_ns(8) + self.spi.address_hold_ns
    }

    /// The connector of bus `index` (0-based position in `servos_per_bus`).
    pub fn connector(&self, index: usize) -> u8 {
        self.connectors.get(index).copied().unwrap_or_else(|| (index + 1).min(255) as u8)
    }

    /// The processor (1-3) serving bus `index`; a connector the board does not have is
    /// counted on processor 1.
    pub fn processor(&self, index: usize) -> u8 {
        processor_port(self.connector(index)).map_or(1, |(p, _)| p)
    }

    /// Bytes of the SPI write of a command with arbitration id `id` and `payload_bytes` of
    /// payload (the padding the board restores is not clocked).
    pub fn write_bytes(id: u32, payload_bytes: usize) -> usize {
        1 + if id <= 0xffff { 2 } else { 4 } + payload_bytes.min(MAX_DATA)
    }

    /// Bytes of the pop of a reply of `payload_bytes`: the 5-byte header and the payload at
    /// its CAN-FD length (the servo's padding crossed the wire and is in the queue).
    pub fn pop_bytes(payload_bytes: usize) -> usize {
        RX_HEADER_LEN + rtloop_proto::frame::round_up_dlc(payload_bytes.min(MAX_DATA)).unwrap_or(MAX_DATA)
    }
}

/// What an SPI transaction of a pi3hat cycle is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpiPhase {
    /// A receive-status read before the writes.
    Drain,
    /// A command written to a transmit register.
    Write,
    /// The attitude read.
    Attitude,
    /// A receive-status read that shows replies.
    Status,
    /// One reply popped.
    Pop,
}

impl SpiPhase {
    /// The term's name.
    pub fn name(self) -> &'static str {
        match self {
            SpiPhase::Drain => "spi drain",
            SpiPhase::Write => "spi writes",
            SpiPhase::Attitude => "spi attitude",
            SpiPhase::Status => "spi status",
            SpiPhase::Pop => "spi pops",
        }
    }
}

/// One SPI transaction of the modelled cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpiTransaction {
    /// What it is for.
    pub phase: SpiPhase,
    /// The processor (1-3) addressed.
    pub processor: u8,
    /// The bus (index into `servos_per_bus`) a write or a pop is for.
    pub bus: Option<usize>,
    /// Data bytes clocked (the address byte not included).
    pub bytes: usize,
    /// Start (the gap before CS low), ns from the start of the cycle.
    pub start_ns: u64,
    /// Duration, ns ([`Pi3hatHost::transaction_ns`]).
    pub ns: u64,
}

impl SpiTransaction {
    /// When the SPI is free again.
    pub fn end_ns(&self) -> u64 {
        self.start_ns + self.ns
    }
}

/// What the end of a pi3hat cycle waited on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CriticalPath {
    /// The SPI: the last replies sat in the board's queue while it was busy.
    Spi,
    /// The wire: the SPI was idle, waiting for the last reply to land.
    Wire,
}

/// The pi3hat part of a prediction: the SPI's time line.
#[derive(Debug, Clone, PartialEq)]
pub struct Pi3hatPrediction {
    /// Every transaction, in order.
    pub transactions: Vec<SpiTransaction>,
    /// Bytes of one command's SPI write (servo 1's).
    pub write_bytes: usize,
    /// Bytes of one reply's pop.
    pub pop_bytes: usize,
    /// Time the SPI was busy, ns (the sum of the transactions).
    pub spi_busy_ns: u64,
    /// Time the SPI was idle, waiting for replies to land, ns.
    pub spi_idle_ns: u64,
    /// When the last reply was on the board (the slowest wire), ns.
    pub wire_done_ns: u64,
    /// What the end of the cycle waited on.
    pub critical: CriticalPath,
    /// One line on the critical path.
    pub explanation: String,
}

impl Pi3hatPrediction {
    /// Total time of the transactions of `phase`, ns.
    pub fn phase_ns(&self, phase: SpiPhase) -> u64 {
        self.transactions.iter().filter(|t| t.phase == phase).map(|t| t.ns).sum()
    }

    /// Number of transactions of `phase`.
    pub fn count(&self, phase: SpiPhase) -> usize {
        self.transactions.iter().filter(|t| t.phase == phase).count()
    }
}

impl CycleModel {
    /// 12 servos on 4 buses (ids 1-3 on bus 1 … 10-12 on bus 4), a position command with
    /// the comprehensive query (26 bytes → DLC 32) and its reply (25 bytes → DLC 32), the
    /// pi3hat rates (1 / 5 Mbit/s), 50 µs turnaround, and host costs of a pi3hat on a
    /// Raspberry Pi 4: 10 µs per frame over SPI, 20 µs per cycle, 30 µs for the attitude.
    pub fn default_quadruped() -> Self {
        CycleModel {
            servos_per_bus: vec![3, 3, 3, 3],
            command_bytes: 26,
            reply_bytes: 25,
            nominal_bitrate: 1_000_000,
            data_bitrate: 5_000_000,
            turnaround_ns: 50_000,
            host_per_frame_ns: 10_000,
            host_fixed_ns: 20_000,
            imu_read_ns: 30_000,
            stuff_fraction: 0.13,
            pi3hat: None,
        }
    }

    /// The same robot with no host or IMU costs (and no pi3hat): the wire alone, as the
    /// simulated bus (with zero adapter latency) reproduces it.
    pub fn wire_only(&self) -> Self {
        CycleModel { host_per_frame_ns: 0, host_fixed_ns: 0, imu_read_ns: 0, pi3hat: None, ..self.clone() }
    }

    /// The same robot behind a pi3hat: bus `i` of `servos_per_bus` on connector
    /// `connectors[i]`, at the board's SPI defaults, reading the attitude.
    pub fn on_pi3hat(&self, connectors: Vec<u8>) -> Self {
        CycleModel { pi3hat: Some(Pi3hatHost::new(connectors)), ..self.clone() }
    }
}

/// One named contribution to a prediction.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    /// Short name, e.g. `"command frames"`.
    pub name: &'static str,
    /// Contribution, ns.
    pub ns: u64,
    /// One line on where the number comes from.
    pub explanation: String,
}

/// The prediction for one bus.
#[derive(Debug, Clone, PartialEq)]
pub struct BusPrediction {
    /// Bus number, 1-based.
    pub bus: usize,
    /// Servos on it.
    pub servos: usize,
    /// Its terms, in wire order.
    pub terms: Vec<Term>,
    /// Their sum, ns.
    pub total_ns: u64,
}

/// A representative frame: its bits and its time on the wire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrameEstimate {
    /// Arbitration id of the frame (it decides the frame's place in arbitration).
    pub id: u32,
    /// Payload before padding, bytes.
    pub payload_bytes: usize,
    /// Exact bit counts of the representative frame (content stuffing not included).
    pub bits: FrameBits,
    /// Expected stuff bits for the content, added to the data phase.
    pub content_stuff_bits: f64,
    /// Time on the wire, ns.
    pub ns: u64,
}

/// The whole prediction: per-bus terms, the cycle terms and the total.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    /// Per bus, in bus order.
    pub buses: Vec<BusPrediction>,
    /// Index into `buses` of the slowest bus.
    pub critical_bus: usize,
    /// The cycle terms: slowest bus, IMU read, host fixed cost.
    pub terms: Vec<Term>,
    /// The cycle, ns.
    pub total_ns: u64,
    /// The representative command frame (of servo 1).
    pub command: FrameEstimate,
    /// The representative reply frame (of servo 1).
    pub reply: FrameEstimate,
    /// The SPI's time line, when the buses are behind a pi3hat.
    pub pi3hat: Option<Pi3hatPrediction>,
}

impl Prediction {
    /// Time of the slowest bus, ns.
    pub fn bus_total_ns(&self) -> u64 {
        self.buses.get(self.critical_bus).map_or(0, |b| b.total_ns)
    }
}

/// A representative frame of `payload_bytes` for `id`, and its estimated wire time.
fn estimate(model: &CycleModel, id: u32, extended: bool, payload_bytes: usize) -> FrameEstimate {
    let bytes = payload_bytes.min(MAX_DATA);
    let mut frame = CanFdFrame { id, ..Default::default() };
    frame.flags = FrameFlags { extended: extended || id > 0x7FF, ..FrameFlags::moteus(id) };
    frame.data[..bytes].fill(0x55);
    frame.len = bytes as u8;
    frame.pad_to_dlc();
    let bits = frame_bits(&frame);
    let content_stuff_bits = model.stuff_fraction.max(0.0) * 8.0 * bytes as f64;
    let nominal = f64::from(model.nominal_bitrate.max(1));
    let data = f64::from(model.data_bitrate.max(1));
    let data_rate = if frame.flags.brs { data } else { nominal };
    let ns = f64::from(bits.nominal_bits) * 1e9 / nominal
        + (f64::from(bits.data_bits) + content_stuff_bits) * 1e9 / data_rate;
    FrameEstimate { id: frame.id, payload_bytes: bytes, bits, content_stuff_bits, ns: ns.round() as u64 }
}

/// How one bus's wire time splits, from [`play_bus`].
struct BusWire {
    /// Idle while the next frame to go was a reply not yet ready, ns.
    idle_for_replies_ns: u64,
    /// Idle while the next frame to go was a command not yet handed over, ns.
    idle_for_host_ns: u64,
    /// When each reply's last bit was on the wire, in wire order, ns.
    reply_ends_ns: Vec<u64>,
}

/// Play one bus through: `commands[i]` is ready at `handed_over[i]`, its reply
/// `turnaround` after the command ends; whenever the wire is free the ready frame with the
/// lowest id goes (ties: ready first, then queued first), as on [`crate::SimBus`]. Returns
/// the idle time, split by what the wire was waiting for; the bus time is the frames' sum
/// plus both idle parts.
fn play_bus(commands: &[FrameEstimate], replies: &[FrameEstimate], handed_over: &[u64], turnaround: u64) -> BusWire {
    // (ready, id, queued order, wire time, Some(i) = command i / None = a reply)
    let mut pending: Vec<(u64, u32, usize, u64, Option<usize>)> =
        commands.iter().zip(handed_over).enumerate().map(|(i, (c, &ready))| (ready, c.id, i, c.ns, Some(i))).collect();
    let mut queued = pending.len();
    let mut wire_free = 0u64;
    let mut out =
        BusWire { idle_for_replies_ns: 0, idle_for_host_ns: 0, reply_ends_ns: Vec::with_capacity(replies.len()) };
    while let Some(earliest) = pending.iter().map(|p| p.0).min() {
        let start = earliest.max(wire_free);
        let Some(best) = pending
            .iter()
            .enumerate()
            .filter(|(_, p)| p.0 <= start)
            .min_by_key(|(_, p)| (p.1, p.0, p.2))
            .map(|(i, _)| i)
        else {
            break;
        };
        let (_, _, _, ns, command) = pending.swap_remove(best);
        let idle = start - wire_free;
        match command {
            Some(_) => out.idle_for_host_ns += idle,
            None => {
                out.idle_for_replies_ns += idle;
                out.reply_ends_ns.push(start + ns);
            }
        }
        wire_free = start + ns;
        if let Some(reply) = command.and_then(|i| replies.get(i)) {
            pending.push((wire_free.saturating_add(turnaround), reply.id, queued, reply.ns, None));
            queued += 1;
        }
    }
    out
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Predict one cycle of `model`. See the module docs for each term.
pub fn predict(model: &CycleModel) -> Prediction {
    match &model.pi3hat {
        Some(host) => predict_pi3hat(model, host),
        None => predict_direct(model),
    }
}

/// The representative command of servo `id`.
fn command_of(model: &CycleModel, id: u32) -> FrameEstimate {
    estimate(model, ArbitrationId::command(id as u8, true).build(), false, model.command_bytes)
}

/// The representative reply of servo `id`.
fn reply_of(model: &CycleModel, id: u32) -> FrameEstimate {
    let reply = ArbitrationId::command(id as u8, true).reply().build();
    estimate(model, reply, true, model.reply_bytes)
}

/// Per bus, the representative commands and replies of its servos (ids numbered from 1
/// across the buses in order).
fn bus_frames(model: &CycleModel) -> Vec<(Vec<FrameEstimate>, Vec<FrameEstimate>)> {
    let mut next_id: u32 = 1;
    model
        .servos_per_bus
        .iter()
        .map(|&n| {
            let ids = next_id..next_id + n as u32;
            next_id += n as u32;
            (ids.clone().map(|id| command_of(model, id)).collect(), ids.map(|id| reply_of(model, id)).collect())
        })
        .collect()
}

/// The wire terms of one bus: its frames, the exposed turnaround, and `host_wait` (the wire
/// idle until the host handed a command over).
fn wire_terms(
    commands: &[FrameEstimate],
    replies: &[FrameEstimate],
    wire: &BusWire,
    turnaround: u64,
    host_wait: (&'static str, String),
) -> Vec<Term> {
    let n = commands.len();
    let frames = |name: &'static str, frames: &[FrameEstimate]| {
        frames.first().map(|f| Term {
            name,
            ns: frames.iter().map(|f| f.ns).sum(),
            explanation: format!(
                "{n} × {} B (DLC {}): {} nominal + {:.0} data bits ≈ {:.1} µs each",
                f.payload_bytes,
                f.bits.data_bytes,
                f.bits.nominal_bits,
                f64::from(f.bits.data_bits) + f.content_stuff_bits,
                us(f.ns)
            ),
        })
    };
    let mut terms: Vec<Term> =
        [frames("command frames", commands), frames("reply frames", replies)].into_iter().flatten().collect();
    if n > 0 {
        terms.push(Term {
            name: "turnaround",
            ns: wire.idle_for_replies_ns,
            explanation: format!(
                "wire idle until a reply is ready ({:.1} µs after its command; replies to earlier commands cover \
                 the rest)",
                us(turnaround)
            ),
        });
        terms.push(Term { name: host_wait.0, ns: wire.idle_for_host_ns, explanation: host_wait.1 });
    }
    terms
}

/// The slowest bus (ties: the first).
fn slowest_bus(buses: &[BusPrediction]) -> usize {
    buses.iter().enumerate().max_by_key(|(i, b)| (b.total_ns, std::cmp::Reverse(*i))).map_or(0, |(i, _)| i)
}

/// The host hands frames to the buses directly (no pi3hat).
fn predict_direct(model: &CycleModel) -> Prediction {
    let n_buses = model.servos_per_bus.len();
    let turnaround = model.turnaround_ns;
    let h = model.host_per_frame_ns;
    let mut buses = Vec::with_capacity(n_buses);
    for (index, (commands, replies)) in bus_frames(model).into_iter().enumerate() {
        let n = commands.len();
        let handed_over: Vec<u64> =
            (0..n as u64).map(|j| (j * n_buses as u64 + index as u64 + 1).saturating_mul(h)).collect();
        let wire = play_bus(&commands, &replies, &handed_over, turnaround);
        let k = index + 1;
        let host = format!(
            "wire idle until the host hands a command over (round-robin, {:.1} µs a frame; bus {k} starts after {k} \
             of them)",
            us(h)
        );
        let terms = wire_terms(&commands, &replies, &wire, turnaround, ("host write", host));
        let total_ns = terms.iter().map(|t| t.ns).sum();
        buses.push(BusPrediction { bus: index + 1, servos: n, terms, total_ns });
    }

    let critical_bus = slowest_bus(&buses);
    let slowest = buses.get(critical_bus).map_or(0, |b| b.total_ns);
    let terms = vec![
        Term {
            name: "slowest bus",
            ns: slowest,
            explanation: format!("bus {} of {n_buses}; the buses run in parallel", critical_bus + 1),
        },
        Term { name: "imu read", ns: model.imu_read_ns, explanation: "reading the attitude".to_string() },
        Term {
            name: "host fixed",
            ns: model.host_fixed_ns,
            explanation: "per-cycle host cost: wake-up, bookkeeping".to_string(),
        },
    ];
    let total_ns = terms.iter().map(|t| t.ns).sum();
    Prediction {
        buses,
        critical_bus,
        terms,
        total_ns,
        command: command_of(model, 1),
        reply: reply_of(model, 1),
        pi3hat: None,
    }
}

/// The pi3hat's SPI as one serial resource: transactions back to back, or after a wait.
struct SpiLine<'a> {
    host: &'a Pi3hatHost,
    free_ns: u64,
    idle_ns: u64,
    log: Vec<SpiTransaction>,
}

impl SpiLine<'_> {
    /// Run one transaction as soon as the SPI is free; returns when it ends.
    fn run(&mut self, phase: SpiPhase, processor: u8, bus: Option<usize>, bytes: usize) -> u64 {
        let t = SpiTransaction {
            phase,
            processor,
            bus,
            bytes,
            start_ns: self.free_ns,
            ns: self.host.transaction_ns(bytes),
        };
        self.free_ns = t.end_ns();
        self.log.push(t);
        self.free_ns
    }

    /// Stay idle until `t_ns`.
    fn wait_until(&mut self, t_ns: u64) {
        if t_ns > self.free_ns {
            self.idle_ns += t_ns - self.free_ns;
            self.free_ns = t_ns;
        }
    }
}

/// The buses are a pi3hat's connectors (see the module docs).
fn predict_pi3hat(model: &CycleModel, host: &Pi3hatHost) -> Prediction {
    let n_buses = model.servos_per_bus.len();
    let turnaround = model.turnaround_ns;
    let frames = bus_frames(model);
    let mut spi = SpiLine { host, free_ns: 0, idle_ns: 0, log: Vec::new() };

    // 1. Drain: nothing is owed from an earlier cycle in the model, so no processor is read
    //    before the writes (see the module docs). The processors are polled later in the
    //    order of their first bus.
    let mut processors: Vec<u8> = Vec::new();
    for (i, &n) in model.servos_per_bus.iter().enumerate() {
        let p = host.processor(i);
        if n > 0 && !processors.contains(&p) {
            processors.push(p);
        }
    }

    // 2. Writes: one per bus per pass, buses in the library's order.
    let rank = |c: u8| PI3HAT_WRITE_ORDER.iter().position(|&b| b == c).unwrap_or(PI3HAT_WRITE_ORDER.len());
    let mut order: Vec<usize> = (0..n_buses).collect();
    order.sort_by_key(|&i| (rank(host.connector(i)), i));
    let passes = model.servos_per_bus.iter().copied().max().unwrap_or(0);
    let mut handed_over: Vec<Vec<u64>> = model.servos_per_bus.iter().map(|&n| Vec::with_capacity(n)).collect();
    for pass in 0..passes {
        for &i in &order {
            if let Some(c) = frames[i].0.get(pass) {
                let end = spi.run(
                    SpiPhase::Write,
                    host.processor(i),
                    Some(i),
                    Pi3hatHost::write_bytes(c.id, c.payload_bytes),
                );
                handed_over[i].push(end);
            }
        }
    }

    // 3. The attitude, while the replies are on the wires.
    if host.attitude {
        spi.run(SpiPhase::Attitude, 3, None, ATTITUDE_SHORT_LEN);
    }

    // The wires, each command handed over when its write ended.
    let mut buses = Vec::with_capacity(n_buses);
    let mut arrivals: Vec<(u64, usize)> = Vec::new();
    for (index, (commands, replies)) in frames.iter().enumerate() {
        let wire = play_bus(commands, replies, &handed_over[index], turnaround);
        arrivals.extend(wire.reply_ends_ns.iter().map(|&t| (t, index)));
        let first_write = handed_over[index].first().map_or(0, |&t| t);
        let wait = format!(
            "wire idle until the SPI has written the command (JC{} in bus order 1 3 5 2 4: its first write ends at \
             {:.1} µs)",
            host.connector(index),
            us(first_write)
        );
        let terms = wire_terms(commands, replies, &wire, turnaround, ("spi write", wait));
        let total_ns = terms.iter().map(|t| t.ns).sum();
        buses.push(BusPrediction { bus: index + 1, servos: commands.len(), terms, total_ns });
    }
    arrivals.sort_unstable();
    let wire_done_ns = arrivals.last().map_or(0, |a| a.0);

    // 4. Reads: the processors in turn; a status read shows what its processor holds.
    let offset = host.sample_offset_ns();
    let pop_bytes = Pi3hatHost::pop_bytes(model.reply_bytes);
    let mut pending = arrivals;
    let mut last_read_waited = false;
    let mut waited = false;
    while !pending.is_empty() {
        let mut progressed = false;
        for &p in &processors {
            let sample = spi.free_ns + offset;
            let shown: Vec<usize> = (0..pending.len())
                .filter(|&k| host.processor(pending[k].1) == p && pending[k].0 <= sample)
                .take(RX_STATUS_SLOTS)
                .collect();
            if shown.is_empty() {
                continue;
            }
            last_read_waited = waited;
            waited = false;
            spi.run(SpiPhase::Status, p, None, RX_STATUS_SLOTS);
            for &k in &shown {
                spi.run(SpiPhase::Pop, p, Some(pending[k].1), pop_bytes);
            }
            for &k in shown.iter().rev() {
                pending.remove(k);
            }
            progressed = true;
        }
        if !progressed {
            // Nothing on the board yet: wait for the next reply to land.
            let next = pending.iter().map(|a| a.0).min().unwrap_or(0);
            spi.wait_until(next.saturating_sub(offset));
            waited = true;
        }
    }

    let spi_end_ns = spi.free_ns;
    let critical = if last_read_waited { CriticalPath::Wire } else { CriticalPath::Spi };
    let last_bus = spi.log.iter().rev().find_map(|t| t.bus.filter(|_| t.phase == SpiPhase::Pop));
    let explanation = match (critical, last_bus) {
        (_, None) => "no replies: the cycle is the SPI's writes and reads".to_string(),
        (CriticalPath::Spi, Some(b)) => format!(
            "SPI: the wires were done at {:.1} µs, the SPI only at {:.1} µs (its last pop is for bus {}); the SPI \
             waited {:.1} µs for the wires in all",
            us(wire_done_ns),
            us(spi_end_ns),
            b + 1,
            us(spi.idle_ns)
        ),
        (CriticalPath::Wire, Some(b)) => format!(
            "wire: the SPI waited for bus {}'s last reply, on the board at {:.1} µs; reading it took {:.1} µs more",
            b + 1,
            us(wire_done_ns),
            us(spi_end_ns.saturating_sub(wire_done_ns))
        ),
    };
    let log = spi.log;
    let busy: u64 = log.iter().map(|t| t.ns).sum();
    let count = |phase: SpiPhase| log.iter().filter(|t| t.phase == phase).count();
    let sum = |phase: SpiPhase| log.iter().filter(|t| t.phase == phase).map(|t| t.ns).sum::<u64>();
    let write_bytes =
        frames.iter().find_map(|(c, _)| c.first()).map_or(0, |c| Pi3hatHost::write_bytes(c.id, c.payload_bytes));
    let list = |ps: &[u8]| ps.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ");
    let each = |bytes: usize| us(host.transaction_ns(bytes));
    let terms = vec![
        Term {
            name: SpiPhase::Drain.name(),
            ns: sum(SpiPhase::Drain),
            explanation: format!(
                "{} × {RX_STATUS_SLOTS} B receive status before the writes (processor {}) = {:.1} µs each",
                count(SpiPhase::Drain),
                list(&processors),
                each(RX_STATUS_SLOTS)
            ),
        },
        Term {
            name: SpiPhase::Write.name(),
            ns: sum(SpiPhase::Write),
            explanation: format!(
                "{} × {write_bytes} B (header, id, {} B payload; the board restores the padding) = {:.1} µs each, \
                 bus order 1 3 5 2 4",
                count(SpiPhase::Write),
                model.command_bytes.min(MAX_DATA),
                each(write_bytes)
            ),
        },
        Term {
            name: SpiPhase::Attitude.name(),
            ns: sum(SpiPhase::Attitude),
            explanation: if host.attitude {
                format!("register 34, {ATTITUDE_SHORT_LEN} B, while the replies are on the wires")
            } else {
                "not read".to_string()
            },
        },
        Term {
            name: SpiPhase::Status.name(),
            ns: sum(SpiPhase::Status),
            explanation: format!(
                "{} × {RX_STATUS_SLOTS} B receive status = {:.1} µs each; one shows every reply its processor holds",
                count(SpiPhase::Status),
                each(RX_STATUS_SLOTS)
            ),
        },
        Term {
            name: SpiPhase::Pop.name(),
            ns: sum(SpiPhase::Pop),
            explanation: format!(
                "{} × {pop_bytes} B ({RX_HEADER_LEN} B header + the reply at its CAN-FD length) = {:.1} µs each",
                count(SpiPhase::Pop),
                each(pop_bytes)
            ),
        },
        Term {
            name: "spi waits",
            ns: spi.idle_ns,
            explanation: "the SPI idle, waiting for a reply to land on the board".to_string(),
        },
        Term {
            name: "host fixed",
            ns: model.host_fixed_ns,
            explanation: "per-cycle host cost: wake-up, bookkeeping".to_string(),
        },
    ];
    let total_ns = terms.iter().map(|t| t.ns).sum();
    debug_assert_eq!(total_ns, spi_end_ns + model.host_fixed_ns);
    Prediction {
        critical_bus: slowest_bus(&buses),
        buses,
        terms,
        total_ns,
        command: command_of(model, 1),
        reply: reply_of(model, 1),
        pi3hat: Some(Pi3hatPrediction {
            transactions: log,
            write_bytes,
            pop_bytes,
            spi_busy_ns: busy,
            spi_idle_ns: spi.idle_ns,
            wire_done_ns,
            critical,
            explanation,
        }),
    }
}

impl fmt::Display for Prediction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.buses {
            writeln!(f, "bus {} ({} servos): {:.1} µs", b.bus, b.servos, us(b.total_ns))?;
            for t in &b.terms {
                writeln!(f, "  {:<16} {:>8.1} µs  {}", t.name, us(t.ns), t.explanation)?;
            }
        }
        writeln!(f, "cycle: {:.1} µs", us(self.total_ns))?;
        for t in &self.terms {
            writeln!(f, "  {:<16} {:>8.1} µs  {}", t.name, us(t.ns), t.explanation)?;
        }
        if let Some(p) = &self.pi3hat {
            writeln!(f, "critical path: {}", p.explanation)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_quadruped_terms_add_up() {
        let p = predict(&CycleModel::default_quadruped());
        assert_eq!(p.buses.len(), 4);
        for b in &p.buses {
            assert_eq!(b.total_ns, b.terms.iter().map(|t| t.ns).sum::<u64>());
            assert_eq!(b.terms.len(), 4);
        }
        assert_eq!(p.critical_bus, 3, "the last bus waits longest for its first frame");
        assert_eq!(p.total_ns, p.terms.iter().map(|t| t.ns).sum::<u64>());
        assert_eq!(p.command.bits.data_bytes, 32);
        assert_eq!(p.reply.bits.data_bytes, 32);
        // A 32-byte frame: ~50 nominal bits + ~300 data bits ≈ 110 µs.
        assert!((100_000..125_000).contains(&p.command.ns), "{:?}", p.command);
        // The seed measured ≈ 740 µs for this robot on a Pi 3b+; same ballpark.
        assert!((650_000..900_000).contains(&p.total_ns), "{p}");
        let text = p.to_string();
        assert!(text.contains("command frames") && text.contains("slowest bus"));
    }

    #[test]
    fn replies_fill_the_turnarounds_they_can() {
        let mut m = CycleModel::default_quadruped().wire_only();
        m.servos_per_bus = vec![1, 2, 3, 4];
        let p = predict(&m);
        let exposed = |b: usize| p.buses[b].terms.iter().find(|t| t.name == "turnaround").unwrap().ns;
        // c1 · r1 | c1 c2 r1 r2 | c1 c2 r1 r2 c3 · r3 | c1 c2 r1 r2 c3 c4 r3 r4
        assert_eq!(exposed(0), m.turnaround_ns);
        assert_eq!(exposed(1), 0);
        assert_eq!(exposed(2), m.turnaround_ns);
        assert_eq!(exposed(3), 0);
    }

    #[test]
    fn a_long_turnaround_is_exposed_once_after_the_commands() {
        // 300 µs outlasts two commands: c1 c2 c3 go back to back, the wire waits for r1,
        // and r2, r3 follow as soon as they can.
        let mut m = CycleModel::default_quadruped().wire_only();
        m.turnaround_ns = 300_000;
        let p = predict(&m);
        let b = &p.buses[0];
        let c = p.command.ns;
        let r = p.reply.ns;
        let t = b.terms.iter().find(|t| t.name == "turnaround").unwrap().ns;
        assert!(c < 150_000 && r < c, "{c} {r}");
        // r1 ready at c + 300 µs, the commands end at 3c; r2 ready at 2c + 300 µs, after r1 ends.
        let r1_start = c + 300_000;
        let r2_start = (r1_start + r).max(2 * c + 300_000);
        let r3_start = (r2_start + r).max(3 * c + 300_000);
        // Servos 2 and 3 have other ids, so their frames stuff a few bits differently.
        assert!(b.total_ns.abs_diff(r3_start + r) < 3_000, "{} vs {}", b.total_ns, r3_start + r);
        assert!(t.abs_diff(b.total_ns - 3 * c - 3 * r) < 3_000, "{t}");
        assert!(t > 300_000 - 2 * c - 3_000, "{t}");
    }

    #[test]
    fn empty_and_odd_models_do_not_panic() {
        let mut m = CycleModel::default_quadruped();
        m.servos_per_bus = vec![];
        assert_eq!(predict(&m).bus_total_ns(), 0);
        m.servos_per_bus = vec![0, 5];
        m.command_bytes = 1000;
        m.nominal_bitrate = 0;
        let p = predict(&m);
        assert_eq!(p.critical_bus, 1);
    }

    /// One servo on JC1 of a pi3hat: a 20-byte command, a 16-byte reply.
    fn one_servo_on_a_pi3hat() -> CycleModel {
        CycleModel {
            servos_per_bus: vec![1],
            command_bytes: 20,
            reply_bytes: 16,
            host_fixed_ns: 0,
            ..CycleModel::default_quadruped()
        }
        .on_pi3hat(vec![1])
    }

    #[test]
    fn one_servo_on_a_pi3hat_by_hand() {
        let m = one_servo_on_a_pi3hat();
        let p = predict(&m);
        let hat = p.pi3hat.as_ref().unwrap();
        // At 10 MHz with 3 µs holds a transaction of n bytes takes 9 µs + (1 + n) × 0.8 µs.
        let status = 9_000 + 7 * 800; // receive status, 6 B: 14.6 µs
        let write = 9_000 + 24 * 800; // header + 2-byte id + 20 B: 28.2 µs
        let attitude = 9_000 + 43 * 800; // 42 B: 43.4 µs
        let pop = 9_000 + 22 * 800; // 5 B header + 16 B: 26.6 µs
        assert_eq!(hat.write_bytes, 23);
        assert_eq!(hat.pop_bytes, 21);
        let (c, r) = (p.command.ns, p.reply.ns);
        // The command goes on the wire when its write ends; the reply lands a turnaround after
        // the command and its own wire time later: long after the attitude read.
        let handed_over = write;
        let landed = handed_over + c + m.turnaround_ns + r;
        assert!(landed > write + attitude + 9_800, "{landed}");
        // The status read is sampled 9.8 µs after it starts (CS gap and hold, the address
        // byte, the address hold): it starts 9.8 µs before the reply lands.
        let waits = landed - 9_800 - (write + attitude);
        let end = landed - 9_800 + status + pop;
        assert_eq!(p.total_ns, end);
        let term = |name: &str| p.terms.iter().find(|t| t.name == name).unwrap().ns;
        assert_eq!(term("spi drain"), 0, "nothing owed from an earlier cycle");
        assert_eq!(term("spi writes"), write);
        assert_eq!(term("spi attitude"), attitude);
        assert_eq!(term("spi status"), status);
        assert_eq!(term("spi pops"), pop);
        assert_eq!(term("spi waits"), waits);
        assert_eq!(hat.critical, CriticalPath::Wire);
        assert_eq!(hat.wire_done_ns, landed);
        // The bus: its frames, the turnaround, and the wait for the SPI write.
        let b = &p.buses[0];
        let bus_term = |name: &str| b.terms.iter().find(|t| t.name == name).unwrap().ns;
        assert_eq!(bus_term("command frames"), c);
        assert_eq!(bus_term("reply frames"), r);
        assert_eq!(bus_term("turnaround"), m.turnaround_ns);
        assert_eq!(bus_term("spi write"), handed_over);
        assert_eq!(b.total_ns, landed);
        let text = p.to_string();
        assert!(text.contains("critical path: wire"), "{text}");
    }

    #[test]
    fn the_spi_terms_are_the_sum_of_its_transactions() {
        let mut m = CycleModel { command_bytes: 23, reply_bytes: 16, ..CycleModel::default_quadruped() };
        m = m.on_pi3hat(vec![1, 2, 3, 4]);
        let host = m.pi3hat.clone().unwrap();
        let p = predict(&m);
        let hat = p.pi3hat.as_ref().unwrap();
        let by_formula: u64 = hat.transactions.iter().map(|t| host.transaction_ns(t.bytes)).sum();
        let spi_terms: u64 =
            p.terms.iter().filter(|t| t.name.starts_with("spi ") && t.name != "spi waits").map(|t| t.ns).sum();
        assert_eq!(spi_terms, by_formula);
        assert_eq!(hat.spi_busy_ns, by_formula);
        assert_eq!(p.total_ns, hat.spi_busy_ns + hat.spi_idle_ns + m.host_fixed_ns);
        assert_eq!(p.total_ns, p.terms.iter().map(|t| t.ns).sum::<u64>());
        // Back to back: each transaction starts when the previous ends or later.
        for w in hat.transactions.windows(2) {
            assert!(w[1].start_ns >= w[0].end_ns(), "{w:?}");
        }
        assert_eq!(hat.count(SpiPhase::Drain), 0, "nothing owed from an earlier cycle");
        assert_eq!(hat.count(SpiPhase::Write), 12);
        assert_eq!(hat.count(SpiPhase::Pop), 12);
        assert_eq!(hat.count(SpiPhase::Attitude), 1);
        // Twelve 16-byte replies come back faster than the SPI pops them: a status read
        // finds several, and the SPI never waits for the wires.
        assert!(hat.count(SpiPhase::Status) < 12, "{:?}", hat.count(SpiPhase::Status));
        assert_eq!(hat.spi_idle_ns, 0);
        assert_eq!(hat.critical, CriticalPath::Spi);
    }

    #[test]
    fn more_servos_take_more_spi_time() {
        let mut last: Option<(u64, u64)> = None;
        for n in 1..=6 {
            let m = CycleModel { servos_per_bus: vec![n; 4], ..CycleModel::default_quadruped() }
                .on_pi3hat(vec![1, 2, 3, 4]);
            let p = predict(&m);
            let busy = p.pi3hat.as_ref().unwrap().spi_busy_ns;
            if let Some((busy_before, total_before)) = last {
                assert!(busy > busy_before, "{n} servos per bus: {busy} ns of SPI, {busy_before} with one less");
                assert!(p.total_ns > total_before, "{n} servos per bus");
            }
            last = Some((busy, p.total_ns));
        }
        // The same servos with longer replies: longer pops.
        let short = CycleModel { reply_bytes: 8, ..CycleModel::default_quadruped() }.on_pi3hat(vec![1, 2, 3, 4]);
        let long = CycleModel { reply_bytes: 40, ..short.clone() };
        let pops = |m: &CycleModel| predict(m).pi3hat.unwrap().phase_ns(SpiPhase::Pop);
        assert_eq!(pops(&long) - pops(&short), 12 * (48 - 8) * 800);
    }

    #[test]
    fn the_pi3hat_is_written_in_bus_order_1_3_5_2_4() {
        let m =
            CycleModel { servos_per_bus: vec![2; 5], ..CycleModel::default_quadruped() }.on_pi3hat(vec![1, 2, 3, 4, 5]);
        let p = predict(&m);
        let hat = p.pi3hat.unwrap();
        let writes: Vec<u8> = hat
            .transactions
            .iter()
            .filter(|t| t.phase == SpiPhase::Write)
            .map(|t| m.pi3hat.as_ref().unwrap().connector(t.bus.unwrap()))
            .collect();
        assert_eq!(writes, [1, 3, 5, 2, 4, 1, 3, 5, 2, 4]);
        let processors: Vec<u8> =
            hat.transactions.iter().filter(|t| t.phase == SpiPhase::Write).map(|t| t.processor).collect();
        assert_eq!(processors, [1, 2, 3, 1, 2, 1, 2, 3, 1, 2]);
        // Connectors, not positions, decide: a robot on JC4 and JC1 writes JC1 first.
        let m = CycleModel { servos_per_bus: vec![1, 1], ..CycleModel::default_quadruped() }.on_pi3hat(vec![4, 1]);
        let p = predict(&m);
        let first = p.pi3hat.unwrap().transactions.into_iter().find(|t| t.phase == SpiPhase::Write).unwrap();
        assert_eq!(first.bus, Some(1));
        // ... so JC1's wire starts first and waits less for its command.
        let wait = |b: usize| p.buses[b].terms.iter().find(|t| t.name == "spi write").unwrap().ns;
        assert!(wait(1) < wait(0));
    }

    #[test]
    fn odd_pi3hat_models_do_not_panic() {
        for connectors in [vec![], vec![9], vec![0, 5], vec![5, 5]] {
            for servos in [vec![], vec![0], vec![0, 2], vec![7, 1, 3]] {
                let mut m = CycleModel { servos_per_bus: servos.clone(), ..CycleModel::default_quadruped() }
                    .on_pi3hat(connectors.clone());
                m.command_bytes = 1000;
                let p = predict(&m);
                let hat = p.pi3hat.as_ref().unwrap();
                assert_eq!(hat.count(SpiPhase::Pop), servos.iter().sum::<usize>(), "{connectors:?} {servos:?}");
                m.pi3hat.as_mut().unwrap().attitude = false;
                m.pi3hat.as_mut().unwrap().spi.spi_hz = 0;
                let _ = predict(&m);
            }
        }
    }
}
