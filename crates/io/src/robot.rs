//! Servo-level cycles: commands in, typed servo states out, per-servo missing replies, and
//! every reply attributed to the request it answers.
//!
//! A [`Robot`] knows which servo lives on which bus, encodes each servo's command with the
//! moteus codec, runs one [`Cycler`] cycle, and decodes each reply into that servo's
//! [`ServoState`]. The same servo id may live on several buses: a servo is addressed by
//! (bus, id).
//!
//! # Never stale: which request does a reply answer?
//!
//! A cycle gives up on a missing reply at its deadline, but the reply may still be on its
//! way and land inside the next cycle, where it would look like the answer to the *next*
//! request. A moteus servo answers to the CAN source id of the request (the reply's
//! destination is the request's source), so the robot uses a few host source ids as *reply
//! tags* (`host_id .. host_id + reply_tags`): each request to a servo carries a tag that no
//! request of that servo which may still be answered holds (a *reserved* tag), and the
//! reply's tag names its request exactly. Tags rise with the requests of a servo and start
//! again from `host_id` only when none of its tags is reserved: a tag is part of the reply's
//! CAN id, the lowest id wins the bus, so rising tags keep a servo's queued replies in the
//! order of its requests. In the usual case (every reply back within its cycle) every
//! request goes out from `host_id`, as the moteus clients send it.
//!
//! A request holds its tag until one of these:
//! * its own reply arrives; or
//! * a *newer* request of the same servo is answered: a servo answers its requests in the
//!   order it received them and the rising tags keep its replies in that order on the bus,
//!   so an older request still outstanding then will never be answered — it is lost (counted in
//!   [`CycleReport::lost`]); this frees the tags of a slow but living servo however late its
//!   replies are; or
//! * the servo has answered nothing at all for [`RobotConfig::late_reply_window_ns`] (100 ms
//!   by default) since the request was sent: the request is given up
//!   ([`CycleReport::expired`]), no longer waited for, and its tag is *quarantined*.
//!
//! Giving up on a request does not stop its answer from coming (a host or simulator that
//! stalls for longer than the window delivers it afterwards), so a quarantined tag is not
//! reused until nothing can still come with it:
//! * its own answer arrives: it is the given-up request's (no other request holds the tag),
//!   counted in [`CycleReport::unattributed`] and ignored; or
//! * a newer request is answered (as above: nothing older can follow). The next request
//!   takes a tag above the quarantined ones, so a servo that is only slow proves its
//!   quarantined tags free with its next answer; or
//! * the servo has answered nothing at all for another window since the request was given
//!   up: without this bound a servo whose answers were lost, or one switched off and on
//!   again, would never be asked again.
//!
//! When no tag above a servo's reserved ones is left, the servo gets its command without a
//! query and without the reply bit (from [`UNQUERIED_SOURCE`], so the command ranks below
//! every reply on the bus), so nothing it sends can be taken for a newer request's answer;
//! it counts as not queried ([`CycleReport::unqueried`]), and the cycle waits, up to its
//! deadline, for the late answer that would free a tag. With `reply_tags = 1` this is plain
//! per-servo outstanding-reply accounting: a servo whose request was given up is only
//! commanded until that request's answer comes or another window of silence has passed —
//! the price of never mistaking that answer for a newer one's is that a servo whose one
//! reply is lost goes unqueried for two windows instead of one. With more tags the servo is
//! asked again at once on the next tag up, unless it had used up its tags. A late reply
//! updates the state only if it is newer than what the state holds, and
//! [`ServoReply::request_cycle`] always says which cycle's request the state answers.
//!
//! The one case no host can rule out without a sequence number in the protocol: a servo
//! that answers nothing at all for longer than two windows after a request (the window to
//! give it up, another to release its tag), whose very late answer then arrives after the
//! tag went to a newer request. Keep the window above the longest a servo can be silent and
//! still answer; a reply that answers no outstanding request (a given-up one's, a
//! duplicate, a stray) is counted ([`CycleReport::unattributed`]) and ignored.
//!
//! Must never: allocate inside [`Robot::cycle`] (every buffer is sized in [`Robot::new`]),
//! let a malformed or unexpected reply disturb another servo's state, or hand out a state as
//! the answer to a request newer than the one it answers.

use crate::clock::Clock;
pub use crate::cycle::MAX_REPLY_TAGS;
use crate::cycle::{CycleOptions, CycleStats, Cycler, RxFrame, SetupError, TxFrame};
use crate::transport::{ImuSample, ImuSource, Transport};
use rtloop_proto::frame::ArbitrationId;
use rtloop_proto::host::{self, PositionCommand, PositionResolution, QueryFormat, ServoState};
use rtloop_proto::{CanFdFrame, FrameWriter};

/// Where a servo is: bus index and CAN id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServoSpec {
    /// Index into the robot's bus list.
    pub bus: usize,
    /// moteus id, 1..=127.
    pub id: u8,
}

/// What to tell one servo this cycle. Every command also queries the servo's state.
// Commands live in fixed, caller-owned arrays that are rewritten every cycle; boxing the
// large variant would put a heap allocation on the hot path, so the size is the price.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServoCommand {
    /// Only ask for the state.
    Query,
    /// Mode 0: stop (also clears a fault).
    Stop,
    /// Mode 12: hold zero velocity.
    ZeroVelocity,
    /// Mode 15: brake.
    Brake,
    /// Mode 10: position control.
    Position(PositionCommand),
}

/// What came back from one servo.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServoReply {
    /// The newest decoded state (kept from an earlier cycle when this one's reply is
    /// missing; see `request_cycle` for how old it is).
    pub state: ServoState,
    /// `state` answers this cycle's request.
    pub fresh: bool,
    /// The cycle ([`CycleReport::cycle`]) whose request `state` answers; `None` until the
    /// servo first answers.
    pub request_cycle: Option<u64>,
    /// The cycle that last brought this reply up to date (answer or not): `as_of_cycle -
    /// request_cycle` is the state's age in cycles ([`ServoReply::age`]).
    pub as_of_cycle: u64,
    /// Consecutive cycles without a fresh reply.
    pub missing_streak: u32,
    /// When the reply that `state` came from arrived.
    pub received_ns: u64,
}

impl ServoReply {
    /// How many cycles old `state` is (0: it answers the latest cycle's request, i.e. it is
    /// fresh); `None` before the servo first answered.
    pub fn age(&self) -> Option<u64> {
        self.request_cycle.map(|c| self.as_of_cycle.saturating_sub(c))
    }
}

/// Host-side protocol settings.
#[derive(Debug, Clone)]
pub struct RobotConfig {
    /// What each command asks back.
    pub query: QueryFormat,
    /// Resolution of the position-mode registers.
    pub position_resolution: PositionResolution,
    /// Cycle timing.
    pub cycle: CycleOptions,
    /// Host id: the CAN source of commands, and the first reply tag.
    pub host_id: u8,
    /// How many source ids, from `host_id` on, tag requests so each reply names the request
    /// it answers (1..=[`MAX_REPLY_TAGS`]). 1 uses `host_id` alone: a servo whose reply is
    /// outstanding then goes unqueried until it is answered. Lower it if other hosts on the
    /// same buses use nearby ids; raise it for servos whose replies come many cycles late.
    pub reply_tags: u8,
    /// How long a servo that answers nothing at all may stay silent before its outstanding
    /// requests are given up (no longer waited for; the servo is asked again on a fresh tag
    /// if one is left), and again before the tags of given-up requests are reused. A reply
    /// later than twice this, from a servo silent all that time, is the one case that could
    /// be taken for a newer request's answer; a servo that keeps answering (late or not)
    /// frees its tags by answering, whatever this is.
    pub late_reply_window_ns: u64,
}

impl Default for RobotConfig {
    fn default() -> Self {
        RobotConfig {
            query: QueryFormat::comprehensive(),
            position_resolution: PositionResolution::all(rtloop_proto::Resolution::Int16),
            cycle: CycleOptions::default(),
            host_id: 0,
            reply_tags: 8,
            late_reply_window_ns: 100_000_000,
        }
    }
}

/// The outcome of one robot cycle. Per servo commanded, exactly one of: a fresh reply, or
/// missing (`missing` = `unqueried` + `encode_errors` + queried servos with no fresh reply).
#[derive(Debug, Clone, Copy, Default)]
pub struct CycleReport {
    /// This cycle's index, counted from 1 by the robot ([`ServoReply::request_cycle`] uses
    /// the same numbering).
    pub cycle: u64,
    /// The underlying multi-bus cycle.
    pub stats: CycleStats,
    /// Servos without a fresh reply this cycle.
    pub missing: u32,
    /// Servos sent a request that expects a reply.
    pub queried: u32,
    /// Servos commanded without a query, because no reply tag of theirs was left above the
    /// reserved ones (held by an outstanding request, or quarantined after one was given up):
    /// no newer request may be asked while its answer would be ambiguous.
    pub unqueried: u32,
    /// Replies to requests of earlier cycles that arrived this cycle (attributed to their
    /// own request, never reported fresh).
    pub late: u32,
    /// Outstanding requests known lost this cycle: the servo answered a newer request first
    /// (it answers in order, so these will never be answered).
    pub lost: u32,
    /// Outstanding requests given up this cycle: the servo answered nothing within the
    /// late-reply window. Their tags are quarantined (see the module doc).
    pub expired: u32,
    /// Replies from a servo of this robot that answer no outstanding request (ignored): the
    /// answer to a request given up (expired), a duplicate, or a stray.
    pub unattributed: u32,
    /// Replies that failed to decode (the servo counts as missing).
    pub decode_errors: u32,
    /// Frames that matched no servo of this robot.
    pub unexpected: u32,
    /// Commands that could not be encoded (not sent; the servo counts as missing).
    pub encode_errors: u32,
}

/// A request whose reply has not arrived yet.
#[derive(Debug, Clone, Copy)]
struct Outstanding {
    /// The cycle that sent it.
    cycle: u64,
    /// When it had been handed to its bus (end of that cycle's writes).
    sent_ns: u64,
}

/// A request given up (expired) whose answer may still come: its tag is not reused until it
/// cannot (see the module doc).
#[derive(Debug, Clone, Copy)]
struct Quarantined {
    /// The cycle that sent it.
    cycle: u64,
    /// When it was given up.
    since_ns: u64,
}

/// Reply bookkeeping of one servo. A tag is *reserved* while it is held or quarantined; a
/// tag is in at most one of the two.
#[derive(Debug, Clone, Copy, Default)]
struct ServoTags {
    /// Tag `t` (source id `host_id + t`) → the request holding it.
    held: [Option<Outstanding>; MAX_REPLY_TAGS as usize],
    /// Tag `t` → the given-up request whose answer may still come with that tag.
    quarantined: [Option<Quarantined>; MAX_REPLY_TAGS as usize],
    /// The tag of this cycle's request, if the servo was queried.
    current: Option<u8>,
    /// This cycle's reply was seen by the cycle's matcher (a duplicate is not counted twice).
    answered: bool,
    /// When the servo last answered anything.
    last_answer_ns: u64,
    /// Tags (bit t) whose request is given up at the end of this cycle unless answered.
    expiring: u16,
}

impl ServoTags {
    fn reserved(&self, t: usize) -> bool {
        self.held[t].is_some() || self.quarantined[t].is_some()
    }
}

/// Servos on buses, cycled together.
pub struct Robot<C: Clock> {
    cycler: Cycler<C>,
    servos: Vec<ServoSpec>,
    /// (bus, id) → servo index + 1 (0 = none): O(1) reply matching without hashing.
    lookup: Vec<[u16; 128]>,
    tags: Vec<ServoTags>,
    /// Per bus: late replies the cycle waits for (scratch, sized in `new`).
    awaited: Vec<u32>,
    cycle_index: u64,
    tx: Vec<TxFrame>,
    tx_servo: Vec<usize>,
    rx: Vec<RxFrame>,
    config: RobotConfig,
}

impl<C: Clock> Robot<C> {
    /// Build a robot over `buses` (index = position) with `servos`.
    pub fn new(
        buses: Vec<Box<dyn Transport>>,
        servos: Vec<ServoSpec>,
        imu: Option<Box<dyn ImuSource>>,
        clock: C,
        config: RobotConfig,
    ) -> Result<Self, SetupError> {
        if config.reply_tags == 0
            || config.reply_tags > MAX_REPLY_TAGS
            || u16::from(config.host_id) + u16::from(config.reply_tags) > 0x7F
        {
            return Err(SetupError::BadReplyTags { host_id: config.host_id, reply_tags: config.reply_tags });
        }
        let nbus = buses.len();
        let mut lookup = vec![[0u16; 128]; nbus];
        for (i, s) in servos.iter().enumerate() {
            if s.id == 0 || s.id > 127 {
                return Err(SetupError::BadServoId(s.id));
            }
            let Some(table) = lookup.get_mut(s.bus) else {
                return Err(SetupError::NoSuchBus { servo: s.id, bus: s.bus });
            };
            if table[s.id as usize] != 0 {
                return Err(SetupError::DuplicateServo { bus: s.bus, id: s.id });
            }
            table[s.id as usize] = (i + 1) as u16;
        }
        let cycler = Cycler::new(buses, imu, clock, config.cycle)?;
        let n = servos.len();
        Ok(Robot {
            cycler,
            lookup,
            tags: vec![ServoTags::default(); n],
            awaited: vec![0; nbus],
            cycle_index: 0,
            tx: vec![TxFrame::default(); n],
            tx_servo: vec![0; n],
            // Room for every reply, as many late ones and strays again, before overflow is
            // counted.
            rx: vec![RxFrame::default(); 3 * n + 8],
            servos,
            config,
        })
    }

    /// The servos, in command order.
    pub fn servos(&self) -> &[ServoSpec] {
        &self.servos
    }

    /// The cycler (bus names, clock, options).
    pub fn cycler(&self) -> &Cycler<C> {
        &self.cycler
    }

    /// Mutable cycler, e.g. to change timing options between cycles.
    pub fn cycler_mut(&mut self) -> &mut Cycler<C> {
        &mut self.cycler
    }

    /// The configuration.
    pub fn config(&self) -> &RobotConfig {
        &self.config
    }

    /// The index of the last cycle run (0 before the first).
    pub fn cycle_index(&self) -> u64 {
        self.cycle_index
    }

    /// Requests sent whose reply has neither arrived nor been presumed lost. Over a run,
    /// `queried = fresh + late + decode_errors + lost + expired + outstanding()`.
    pub fn outstanding(&self) -> usize {
        self.tags.iter().map(|t| t.held.iter().filter(|h| h.is_some()).count()).sum()
    }

    /// Tags of given-up (expired) requests kept from reuse because their answers may still
    /// come (see the module doc).
    pub fn quarantined(&self) -> usize {
        self.tags.iter().map(|t| t.quarantined.iter().filter(|q| q.is_some()).count()).sum()
    }

    /// Encode one command frame for servo `spec` into `frame`, as the first request of a
    /// robot would carry it (source `host_id`, reply requested).
    pub fn encode_command(
        &self,
        spec: ServoSpec,
        cmd: &ServoCommand,
        frame: &mut CanFdFrame,
    ) -> Result<(), rtloop_proto::EncodeError> {
        encode_command(&self.config, spec, cmd, frame)
    }

    /// One cycle: `commands[i]` goes to `servos()[i]`, its reply lands in `replies[i]`.
    /// Servos beyond the shorter of the two slices are not commanded.
    pub fn cycle(&mut self, commands: &[ServoCommand], replies: &mut [ServoReply], imu: &mut ImuSample) -> CycleReport {
        self.cycle_index += 1;
        let this_cycle = self.cycle_index;
        let mut report = CycleReport { cycle: this_cycle, ..CycleReport::default() };
        let n = self.servos.len().min(commands.len()).min(replies.len());
        let window = self.config.late_reply_window_ns;
        let ntags = self.config.reply_tags;
        let now = self.cycler.clock().now_ns();
        let mut ntx = 0;
        for i in 0..n {
            let spec = self.servos[i];
            let tags = &mut self.tags[i];
            replies[i].fresh = false;
            replies[i].as_of_cycle = this_cycle;
            tags.current = None;
            tags.answered = false;
            // Only a servo that answered nothing since a request went out gets that request
            // presumed lost: any answer after it settled it already (its own, or a newer one).
            // Given up after this cycle's frames are read, not now: a reply that came in since
            // the last cycle (after a long period, say) is still taken as that request's answer.
            let last_answer_ns = tags.last_answer_ns;
            tags.expiring = 0;
            for (t, held) in tags.held.iter().enumerate().take(ntags as usize) {
                if held.is_some_and(|h| now.saturating_sub(h.sent_ns.max(last_answer_ns)) >= window) {
                    tags.expiring |= 1 << t;
                }
            }
            // Tags rise with the requests they tag: the reply's tag is in its CAN id, and when
            // a servo holds several replies the lowest id goes first, so rising tags keep its
            // replies in the order of its requests (which is what lets a newer answer prove an
            // older request lost). A quarantined tag counts like a held one: its answer may
            // still come. Back to the first tag only when no tag is reserved.
            let above = (0..ntags as usize).rev().find(|&t| tags.reserved(t)).map_or(0, |t| t + 1);
            let free = (above < ntags as usize).then_some(above as u8);
            let slot = &mut self.tx[ntx];
            let request = match free {
                Some(t) => Request::Tagged(self.config.host_id + t),
                None => Request::Unqueried,
            };
            match encode_request(&self.config, spec, &commands[i], request, &mut slot.frame) {
                Ok(true) => {
                    slot.bus = spec.bus;
                    slot.expect_reply = free.is_some();
                    self.tx_servo[ntx] = i;
                    ntx += 1;
                    if let Some(t) = free {
                        tags.current = Some(t);
                        report.queried += 1;
                    } else {
                        report.unqueried += 1;
                    }
                }
                // A query of a servo that may not be queried: nothing to send.
                Ok(false) => report.unqueried += 1,
                Err(_) => report.encode_errors += 1,
            }
        }

        // A servo left unqueried has a reply outstanding or quarantined: the cycle waits for
        // that late answer (up to the same deadline) as it would for a fresh one, so it is
        // taken as soon as it is in (freeing tags) and a loop without a period does not spin.
        self.awaited.fill(0);
        for (spec, t) in self.servos.iter().zip(&self.tags).take(n) {
            if t.current.is_none() && (0..ntags as usize).any(|tag| t.reserved(tag)) {
                if let Some(a) = self.awaited.get_mut(spec.bus) {
                    *a += 1;
                }
            }
        }
        let host_id = self.config.host_id;
        let (lookup, tags) = (&self.lookup, &mut self.tags);
        report.stats = self.cycler.cycle_matching(&self.tx[..ntx], &mut self.rx, imu, &self.awaited, |bus, frame| {
            let Some((i, tag)) = attribute(lookup, host_id, ntags, bus, frame) else {
                return false;
            };
            match tags.get_mut(i) {
                // This cycle's own answer, or the one late answer an unqueried servo's cycle
                // waits for.
                Some(t)
                    if !t.answered && (t.current == Some(tag) || (t.current.is_none() && t.reserved(tag as usize))) =>
                {
                    t.answered = true;
                    true
                }
                _ => false,
            }
        });
        let sent_ns = report.stats.tx_done_ns;
        for t in self.tags.iter_mut().take(n) {
            if let Some(tag) = t.current {
                t.held[tag as usize] = Some(Outstanding { cycle: this_cycle, sent_ns });
            }
        }

        let stored = (report.stats.stored as usize).min(self.rx.len());
        for r in &self.rx[..stored] {
            let Some((i, tag)) = attribute(&self.lookup, host_id, ntags, r.bus, &r.frame) else {
                report.unexpected += 1;
                continue;
            };
            let (Some(tags), Some(reply)) = (self.tags.get_mut(i), replies.get_mut(i)) else {
                report.unexpected += 1;
                continue;
            };
            let (request_cycle, given_up) = match (tags.held[tag as usize], tags.quarantined[tag as usize]) {
                // A frame taken before this cycle's writes cannot answer this cycle's request.
                (Some(req), _) if !(r.drained && req.cycle == this_cycle) => (req.cycle, false),
                // The answer to a request given up: no newer request holds its tag, so it is
                // that request's; too late to hand over (counted as given up already).
                (None, Some(q)) => (q.cycle, true),
                _ => {
                    report.unattributed += 1;
                    continue;
                }
            };
            tags.held[tag as usize] = None;
            tags.quarantined[tag as usize] = None;
            tags.last_answer_ns = r.at_ns;
            // The servo answers in order: whatever it was asked before this request and has not
            // answered by now never will be.
            for held in tags.held.iter_mut().take(ntags as usize) {
                if held.is_some_and(|h| h.cycle < request_cycle) {
                    *held = None;
                    report.lost += 1;
                }
            }
            for q in tags.quarantined.iter_mut().take(ntags as usize) {
                if q.is_some_and(|q| q.cycle < request_cycle) {
                    *q = None;
                }
            }
            if given_up {
                report.unattributed += 1;
                continue;
            }
            let mut state = ServoState::default();
            if host::decode_reply(r.frame.payload(), &mut state).is_err() {
                report.decode_errors += 1;
                continue;
            }
            if request_cycle != this_cycle {
                report.late += 1;
            }
            // Never let an older answer replace a newer one.
            if reply.request_cycle.is_none_or(|c| c < request_cycle) {
                reply.state = state;
                reply.request_cycle = Some(request_cycle);
                reply.received_ns = r.at_ns;
                reply.fresh = request_cycle == this_cycle;
            }
        }
        let finished_ns = report.stats.finished_ns;
        for tags in self.tags.iter_mut().take(n) {
            let last_answer_ns = tags.last_answer_ns;
            for t in 0..ntags as usize {
                // Given up, the request keeps its tag from reuse (quarantine) until its answer,
                // or a newer one, shows that nothing can still come with it...
                if tags.expiring & (1 << t) != 0 {
                    if let Some(h) = tags.held[t].take() {
                        tags.quarantined[t] = Some(Quarantined { cycle: h.cycle, since_ns: now });
                        report.expired += 1;
                    }
                }
                // ...or the servo has stayed silent for another window: without that bound a
                // servo whose answers are all lost would never be asked again.
                if tags.quarantined[t]
                    .is_some_and(|q| finished_ns.saturating_sub(q.since_ns.max(last_answer_ns)) >= window)
                {
                    tags.quarantined[t] = None;
                }
            }
        }
        for reply in replies.iter_mut().take(n) {
            if reply.fresh {
                reply.missing_streak = 0;
            } else {
                reply.missing_streak = reply.missing_streak.saturating_add(1);
                report.missing += 1;
            }
        }
        report
    }
}

/// The servo index and reply tag of a frame, when it is a reply from a servo of this robot
/// to one of its tags.
fn attribute(lookup: &[[u16; 128]], host_id: u8, ntags: u8, bus: usize, frame: &CanFdFrame) -> Option<(usize, u8)> {
    let arb = ArbitrationId::parse(frame.id);
    let idx = lookup.get(bus).and_then(|t| t.get(arb.source as usize)).copied().unwrap_or(0);
    let tag = arb.destination.checked_sub(host_id).filter(|&t| t < ntags)?;
    if idx == 0 || arb.reply_required {
        return None;
    }
    Some((idx as usize - 1, tag))
}

/// The CAN source of a command sent without a query. Without the reply bit a command's id
/// is `source << 8 | servo`, and the lowest id wins the bus: from `host_id` such commands
/// would outrank every servo's replies and, on a saturated bus, starve a late reply for as
/// long as they keep coming. No servo has id 0x7F (the broadcast address), so from this
/// source they rank below every reply. Nothing answers them.
pub const UNQUERIED_SOURCE: u8 = 0x7F;

/// How a request is sent.
#[derive(Debug, Clone, Copy)]
enum Request {
    /// With the query and the reply bit, from this source id.
    Tagged(u8),
    /// The command alone: no query, no reply bit, from [`UNQUERIED_SOURCE`].
    Unqueried,
}

/// Encode `cmd` for `spec` as the moteus clients would, padded to a CAN-FD length: from
/// source `host_id`, with the query and the reply bit.
pub fn encode_command(
    config: &RobotConfig,
    spec: ServoSpec,
    cmd: &ServoCommand,
    frame: &mut CanFdFrame,
) -> Result<(), rtloop_proto::EncodeError> {
    encode_request(config, spec, cmd, Request::Tagged(config.host_id), frame).map(|_| ())
}

/// Encode one request; `Ok(false)` when there is nothing to send (a query that may not ask).
fn encode_request(
    config: &RobotConfig,
    spec: ServoSpec,
    cmd: &ServoCommand,
    request: Request,
    frame: &mut CanFdFrame,
) -> Result<bool, rtloop_proto::EncodeError> {
    let (source, query) = match request {
        Request::Tagged(source) => (source, Some(&config.query)),
        Request::Unqueried => (UNQUERIED_SOURCE, None),
    };
    let mut buf = [0u8; 64];
    let len = {
        let mut w = FrameWriter::new(&mut buf);
        match (cmd, query) {
            (ServoCommand::Query, Some(q)) => host::encode_query(&mut w, q)?,
            (ServoCommand::Query, None) => return Ok(false),
            (ServoCommand::Stop, q) => host::encode_stop(&mut w, q)?,
            (ServoCommand::ZeroVelocity, q) => host::encode_zero_velocity(&mut w, q)?,
            (ServoCommand::Brake, q) => host::encode_brake(&mut w, q)?,
            (ServoCommand::Position(p), q) => host::encode_position(&mut w, p, &config.position_resolution, q)?,
        }
        w.len()
    };
    let id = ArbitrationId { prefix: 0, source, destination: spec.id, reply_required: query.is_some() }.build();
    frame.id = id;
    frame.flags = rtloop_proto::frame::FrameFlags::moteus(id);
    frame.data[..len].copy_from_slice(&buf[..len]);
    frame.len = len as u8;
    frame.pad_to_dlc();
    Ok(true)
}
