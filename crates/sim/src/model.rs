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
//! (`real_frames_stuff_about_as_the_model_assumes` in tests/bus.rs).

use std::fmt;

use proto::frame::{ArbitrationId, CanFdFrame, FrameFlags, MAX_DATA};

use crate::bits::{frame_bits, FrameBits};

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
        }
    }

    /// The same robot with no host or IMU costs: the wire alone, as the simulated bus
    /// (with zero adapter latency) reproduces it.
    pub fn wire_only(&self) -> Self {
        CycleModel { host_per_frame_ns: 0, host_fixed_ns: 0, imu_read_ns: 0, ..self.clone() }
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
    let mut out = BusWire { idle_for_replies_ns: 0, idle_for_host_ns: 0 };
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
            None => out.idle_for_replies_ns += idle,
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
    let n_buses = model.servos_per_bus.len();
    let turnaround = model.turnaround_ns;
    let h = model.host_per_frame_ns;
    let mut buses = Vec::with_capacity(n_buses);
    let mut next_id: u32 = 1;
    let command_of =
        |id: u32| estimate(model, ArbitrationId::command(id as u8, true).build(), false, model.command_bytes);
    let reply_of = |id: u32| {
        let reply = ArbitrationId::command(id as u8, true).reply().build();
        estimate(model, reply, true, model.reply_bytes)
    };

    for (index, &n) in model.servos_per_bus.iter().enumerate() {
        let ids = next_id..next_id + n as u32;
        next_id += n as u32;
        let commands: Vec<FrameEstimate> = ids.clone().map(command_of).collect();
        let replies: Vec<FrameEstimate> = ids.map(reply_of).collect();
        let handed_over: Vec<u64> =
            (0..n as u64).map(|j| (j * n_buses as u64 + index as u64 + 1).saturating_mul(h)).collect();
        let wire = play_bus(&commands, &replies, &handed_over, turnaround);
        let command_ns: u64 = commands.iter().map(|f| f.ns).sum();
        let reply_ns: u64 = replies.iter().map(|f| f.ns).sum();
        let mut terms = Vec::with_capacity(4);
        if let Some(c) = commands.first() {
            terms.push(Term {
                name: "command frames",
                ns: command_ns,
                explanation: format!(
                    "{n} × {} B (DLC {}): {} nominal + {:.0} data bits ≈ {:.1} µs each",
                    c.payload_bytes,
                    c.bits.data_bytes,
                    c.bits.nominal_bits,
                    f64::from(c.bits.data_bits) + c.content_stuff_bits,
                    us(c.ns)
                ),
            });
        }
        if let Some(r) = replies.first() {
            terms.push(Term {
                name: "reply frames",
                ns: reply_ns,
                explanation: format!(
                    "{n} × {} B (DLC {}): {} nominal + {:.0} data bits ≈ {:.1} µs each",
                    r.payload_bytes,
                    r.bits.data_bytes,
                    r.bits.nominal_bits,
                    f64::from(r.bits.data_bits) + r.content_stuff_bits,
                    us(r.ns)
                ),
            });
        }
        if n > 0 {
            terms.push(Term {
                name: "turnaround",
                ns: wire.idle_for_replies_ns,
                explanation: format!(
                    "wire idle until a reply is ready ({:.1} µs after its command; replies to earlier commands \
                     cover the rest)",
                    us(turnaround)
                ),
            });
            let k = index + 1;
            terms.push(Term {
                name: "host write",
                ns: wire.idle_for_host_ns,
                explanation: format!(
                    "wire idle until the host hands a command over (round-robin, {:.1} µs a frame; bus {k} starts \
                     after {k} of them)",
                    us(h)
                ),
            });
        }
        let total_ns = terms.iter().map(|t| t.ns).sum();
        buses.push(BusPrediction { bus: index + 1, servos: n, terms, total_ns });
    }

    let critical_bus =
        buses.iter().enumerate().max_by_key(|(i, b)| (b.total_ns, std::cmp::Reverse(*i))).map_or(0, |(i, _)| i);
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
    Prediction { buses, critical_bus, terms, total_ns, command: command_of(1), reply: reply_of(1) }
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
}
