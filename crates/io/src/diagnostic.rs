//! The host side of the moteus diagnostic channel: a console client for one servo over any
//! [`Transport`] (what moteus_tool `--console`, `--dump-config` and `--restore-config` use).
//!
//! What it is for: [`DiagnosticClient::write`] sends bytes to the servo's stream channel in
//! 0x40 subframes of at most [`MAX_CLIENT_DATA`] bytes, without the reply bit (the servo
//! answers data only when polled); reading polls with 0x44 (flow control: each poll
//! acknowledges the last packet received, so a lost answer is sent again rather than lost)
//! and falls back to plain 0x42 polls when the first 0x44 probe gets no 0x43 answer (firmware
//! without flow control). On top of the byte stream: [`DiagnosticClient::command`] sends one
//! line and reads the answer lines up to `OK` (an `ERR …` becomes [`DiagError::Refused`] with
//! the servo's text), [`DiagnosticClient::command_oneline`] reads a one-line answer
//! (`conf get`), and [`DiagnosticClient::command_block`] reads a binary block (`tel get`,
//! `tel schema`, `conf schema`, `conf data`: a line, a u32 little-endian size, the bytes).
//!
//! Flow-control bookkeeping: the servo numbers the packets it sends (1 to 255, then 1 again); a
//! poll acknowledges the last one taken. An answer carrying the acknowledged number is a
//! repeat (or empty) and adds nothing; the first packet after connecting is taken whatever
//! its number (the servo's count may be anywhere), after that only the next number is.
//!
//! What it must never do: wait without a deadline — every poll waits at most
//! [`DiagnosticOptions::reply_timeout_ns`] and is retried [`DiagnosticOptions::poll_retries`]
//! times before a [`DiagError::NoAnswer`] that names the servo and the transport, and a
//! command that is answered but never finished gives up after
//! [`DiagnosticOptions::answer_timeout_ns`]; take a size from the servo on trust (lines and
//! blocks are bounded); send a command line with a line end inside it (it would be two
//! commands); panic on anything a servo sends; or be used inside a real-time cycle (it
//! allocates and waits; it is a tool's client).

use std::collections::VecDeque;
use std::fmt;

use rtloop_proto::frame::ArbitrationId;
use rtloop_proto::subframe::{subframes, Subframe};
use rtloop_proto::writer::{opcode, FrameWriter};
use rtloop_proto::CanFdFrame;

use crate::clock::Clock;
use crate::transport::{Transport, TransportError};

/// The console's stream channel.
pub const CONSOLE_CHANNEL: u32 = 1;

/// Client bytes in one 0x40 subframe: 64 bytes less the opcode, channel and length.
pub const MAX_CLIENT_DATA: usize = 61;

/// Bytes a plain poll (0x42) asks for: what fits in one reply after the 0x41 header.
pub const PLAIN_POLL_LEN: u32 = 61;

/// Bytes a flow-controlled poll (0x44) asks for: what fits after the 0x43 header.
pub const FLOW_POLL_LEN: u32 = 60;

/// The longest command line sent; longer ones are refused here, before anything is sent.
/// (The servo has its own, shorter limit, which it reports with `ERR`.)
pub const MAX_COMMAND: usize = 4096;

/// How the client polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlowMode {
    /// Probe with 0x44; plain 0x42 polls when the probe gets no 0x43 answer.
    #[default]
    Auto,
    /// Only flow-controlled polls (0x44).
    Flow,
    /// Only plain polls (0x42).
    Plain,
}

/// Knobs of a [`DiagnosticClient`]; [`Default`] suits a servo on any transport.
#[derive(Debug, Clone, Copy)]
pub struct DiagnosticOptions {
    /// The stream channel (1: the console).
    pub channel: u32,
    /// The host's id, the source of every frame (0-126).
    pub source: u8,
    /// The servo's CAN prefix (13 bits).
    pub can_prefix: u16,
    /// How long one poll waits for its answer, ns.
    pub reply_timeout_ns: u64,
    /// Polls sent again after an unanswered one before the servo is declared silent.
    pub poll_retries: u32,
    /// How long a command may go on being answered without finishing, ns.
    pub answer_timeout_ns: u64,
    /// Pause after a poll that brought nothing, ns (a servo still working on a command is
    /// not polled in a tight loop).
    pub idle_poll_ns: u64,
    /// The longest answer line accepted, bytes.
    pub max_line: usize,
    /// The largest binary block accepted, bytes.
    pub max_block: usize,
    /// Flow-controlled or plain polls.
    pub flow: FlowMode,
}

impl Default for DiagnosticOptions {
    fn default() -> Self {
        DiagnosticOptions {
            channel: CONSOLE_CHANNEL,
            source: 0,
            can_prefix: 0,
            reply_timeout_ns: 100_000_000,
            poll_retries: 3,
            answer_timeout_ns: 2_000_000_000,
            idle_poll_ns: 1_000_000,
            max_line: 4096,
            max_block: 1 << 20,
            flow: FlowMode::Auto,
        }
    }
}

/// What went wrong talking to a servo's console. Every `Display` is one sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiagError {
    /// The transport failed sending or receiving.
    Transport {
        /// The servo.
        id: u8,
        /// The transport's name.
        transport: String,
        /// What failed.
        error: TransportError,
    },
    /// The servo did not answer polls.
    NoAnswer {
        /// The servo.
        id: u8,
        /// The transport's name.
        transport: String,
        /// How long the client waited, ms.
        waited_ms: u64,
    },
    /// The servo answered polls but did not finish the command's answer in time.
    Incomplete {
        /// The servo.
        id: u8,
        /// The transport's name.
        transport: String,
        /// The command.
        command: String,
        /// How long the client waited, ms.
        waited_ms: u64,
    },
    /// The servo answered `ERR …`.
    Refused {
        /// The servo.
        id: u8,
        /// The command.
        command: String,
        /// The servo's text after `ERR `.
        message: String,
    },
    /// The command cannot be sent as it is.
    BadCommand {
        /// The command (clipped).
        command: String,
        /// Why, and what to do.
        why: String,
    },
    /// The servo sent something the console protocol does not allow.
    Protocol {
        /// The servo.
        id: u8,
        /// What.
        what: String,
    },
    /// An option is out of range.
    BadOption(String),
}

impl fmt::Display for DiagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiagError::Transport { id, transport, error: TransportError::Disconnected } => write!(
                f,
                "{transport} went away while talking to servo {id}: the adapter was unplugged or the simulator stopped; plug it back in or restart it"
            ),
            DiagError::Transport { id, transport, error } => {
                write!(f, "{transport} failed while talking to servo {id}: {error}")
            }
            DiagError::NoAnswer { id, transport, waited_ms } => write!(
                f,
                "servo {id} on {transport} did not answer the diagnostic channel within {waited_ms} ms: is it powered, on this bus, and is its id {id}?"
            ),
            DiagError::Incomplete { id, transport, command, waited_ms } => write!(
                f,
                "servo {id} on {transport} did not finish answering `{command}` within {waited_ms} ms (no OK or ERR line came)"
            ),
            DiagError::Refused { id, command, message } => {
                write!(f, "servo {id} refused `{command}`: ERR {message}")
            }
            DiagError::BadCommand { command, why } => write!(f, "`{command}` was not sent: {why}"),
            DiagError::Protocol { id, what } => {
                write!(f, "servo {id} sent something that is not the console protocol: {what}")
            }
            DiagError::BadOption(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for DiagError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DiagError::Transport { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// What the client counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiagnosticStats {
    /// Frames sent (data and polls).
    pub frames_sent: u64,
    /// Polls sent.
    pub polls: u64,
    /// Polls whose answer did not come in time (each was sent again).
    pub lost_answers: u64,
    /// Flow-controlled packets that came again (already taken) and were dropped.
    pub repeats: u64,
    /// Flow-controlled packets out of sequence, dropped.
    pub out_of_sequence: u64,
    /// Frames received that were not an answer to us (other servos, other hosts).
    pub stray_frames: u64,
    /// Periodic telemetry blocks (`tel rate`) met while reading an answer, skipped.
    pub emissions_skipped: u64,
}

/// A binary block answer: its first line (e.g. `emit servo_stats`) and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The line before the size, e.g. `schema servo_stats`.
    pub header: String,
    /// The bytes.
    pub data: Vec<u8>,
}

/// How polls are done, once known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Polling {
    /// Not probed yet.
    Unknown,
    /// 0x44 polls; `ack` is the last packet taken, `synced` once a first 0x43 came.
    Flow { ack: u8, synced: bool },
    /// 0x42 polls.
    Plain,
}

/// One answer to a poll.
#[derive(Debug, Clone, Copy)]
struct StreamAnswer {
    /// `Some(packet)` for 0x43, `None` for 0x41.
    packet: Option<u8>,
    len: usize,
    data: [u8; 64],
}

impl StreamAnswer {
    fn bytes(&self) -> &[u8] {
        self.data.get(..self.len).unwrap_or(&[])
    }
}

/// A console client for servo `id` over `transport`, timed by `clock`.
pub struct DiagnosticClient<T: Transport, C: Clock> {
    transport: T,
    clock: C,
    id: u8,
    options: DiagnosticOptions,
    polling: Polling,
    /// Received bytes not yet consumed.
    input: VecDeque<u8>,
    stats: DiagnosticStats,
}

impl<T: Transport, C: Clock> fmt::Debug for DiagnosticClient<T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiagnosticClient")
            .field("transport", &self.transport.name())
            .field("id", &self.id)
            .field("polling", &self.polling)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// At most 60 characters of `text`, for messages.
fn clip(text: &str) -> String {
    let mut out: String = text.chars().take(60).collect();
    if text.chars().count() > 60 {
        out.push_str("...");
    }
    out
}

/// A command that answers a binary block, and the first word of its header line.
fn block_prefix(command: &str) -> Option<&'static str> {
    let mut words = command.split_ascii_whitespace();
    match (words.next(), words.next()) {
        (Some("tel"), Some("get")) => Some("emit"),
        (Some("tel"), Some("schema")) => Some("schema"),
        (Some("conf"), Some("schema")) => Some("cschema"),
        (Some("conf"), Some("data")) => Some("cdata"),
        _ => None,
    }
}

impl<T: Transport, C: Clock> DiagnosticClient<T, C> {
    /// A client for servo `id` (1-126) on `transport`. Nothing is sent yet.
    pub fn new(transport: T, clock: C, id: u8, options: DiagnosticOptions) -> Result<Self, DiagError> {
        if !(1..=126).contains(&id) {
            return Err(DiagError::BadOption(format!(
                "servo id {id} cannot have a console conversation: give an id from 1 to 126"
            )));
        }
        if options.source > 126 {
            return Err(DiagError::BadOption(format!("host id {} is out of range: give 0 to 126", options.source)));
        }
        if options.can_prefix > 0x1FFF {
            return Err(DiagError::BadOption(format!(
                "CAN prefix {:#x} is wider than 13 bits: give 0 to 0x1fff",
                options.can_prefix
            )));
        }
        if options.reply_timeout_ns == 0 || options.answer_timeout_ns == 0 {
            return Err(DiagError::BadOption("diagnostic timeouts must be above 0".into()));
        }
        if options.max_line == 0 || options.max_block == 0 {
            return Err(DiagError::BadOption("diagnostic line and block limits must be above 0".into()));
        }
        let polling = match options.flow {
            FlowMode::Plain => Polling::Plain,
            FlowMode::Auto | FlowMode::Flow => Polling::Unknown,
        };
        Ok(DiagnosticClient {
            transport,
            clock,
            id,
            options,
            polling,
            input: VecDeque::new(),
            stats: Default::default(),
        })
    }

    /// The servo's id.
    pub fn id(&self) -> u8 {
        self.id
    }

    /// What the client counted.
    pub fn stats(&self) -> DiagnosticStats {
        self.stats
    }

    /// Whether the servo answers flow-controlled polls (`None`: not probed yet).
    pub fn flow_controlled(&self) -> Option<bool> {
        match self.polling {
            Polling::Unknown => None,
            Polling::Flow { .. } => Some(true),
            Polling::Plain => Some(false),
        }
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The transport, mutably (e.g. a simulated bus for fault injection).
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// The transport back.
    pub fn into_transport(self) -> T {
        self.transport
    }

    fn transport_error(&self, error: TransportError) -> DiagError {
        DiagError::Transport { id: self.id, transport: self.transport.name().to_string(), error }
    }

    fn command_id(&self, reply_required: bool) -> u32 {
        ArbitrationId {
            prefix: self.options.can_prefix,
            source: self.options.source,
            destination: self.id,
            reply_required,
        }
        .build()
    }

    fn send_frame(&mut self, frame: &CanFdFrame) -> Result<(), DiagError> {
        let now = self.clock.now_ns();
        self.transport.send(frame, now).map_err(|e| self.transport_error(e))?;
        self.transport.flush(now).map_err(|e| self.transport_error(e))?;
        self.stats.frames_sent += 1;
        Ok(())
    }

    /// Send `bytes` to the servo's channel, in 0x40 subframes of at most
    /// [`MAX_CLIENT_DATA`] bytes, without the reply bit. The first call probes how the servo
    /// is polled first (and so finds out whether it answers at all), while no answer of ours
    /// is at stake.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), DiagError> {
        if self.polling == Polling::Unknown {
            self.poll()?;
        }
        let id = self.command_id(false);
        for chunk in bytes.chunks(MAX_CLIENT_DATA) {
            let mut buf = [0u8; rtloop_proto::frame::MAX_DATA];
            let mut w = FrameWriter::new(&mut buf);
            w.stream(opcode::STREAM_CLIENT_TO_SERVER, self.options.channel, chunk)
                .map_err(|e| DiagError::BadCommand { command: String::new(), why: e.to_string() })?;
            let frame =
                w.to_frame(id).map_err(|e| DiagError::BadCommand { command: String::new(), why: e.to_string() })?;
            self.send_frame(&frame)?;
        }
        Ok(())
    }

    /// The stream answer in `frame`, if it is our servo's answer to us.
    fn answer_in(&self, frame: &CanFdFrame) -> Option<StreamAnswer> {
        let arb = frame.arbitration();
        if arb.source != self.id || arb.destination != self.options.source || arb.prefix != self.options.can_prefix {
            return None;
        }
        let channel = self.options.channel;
        // Subframes after a malformed one are lost; the ones before it count.
        for sub in subframes(frame.payload()).map_while(Result::ok) {
            let (packet, data) = match sub {
                Subframe::Stream { opcode: opcode::STREAM_SERVER_TO_CLIENT, channel: c, data } if c == channel => {
                    (None, data)
                }
                Subframe::FlowData { channel: c, packet, data } if c == channel => (Some(packet), data),
                _ => continue,
            };
            let mut answer = StreamAnswer { packet, len: data.len().min(64), data: [0; 64] };
            for (slot, b) in answer.data.iter_mut().zip(data) {
                *slot = *b;
            }
            return Some(answer);
        }
        None
    }

    /// Wait until `deadline` for our servo's stream answer.
    fn await_answer(&mut self, deadline: u64) -> Result<Option<StreamAnswer>, DiagError> {
        loop {
            let now = self.clock.now_ns();
            while let Some(frame) = self.transport.recv(now).map_err(|e| self.transport_error(e))? {
                match self.answer_in(&frame) {
                    Some(answer) => return Ok(Some(answer)),
                    None => self.stats.stray_frames += 1,
                }
            }
            if now >= deadline {
                return Ok(None);
            }
            match (self.transport.ready_hint_ns(), self.transport.poll_fd()) {
                (Some(hint), _) => self.clock.wait_until_ns(hint.max(now + 1).min(deadline)),
                (None, Some(fd)) => {
                    let mut fds = [libc::pollfd { fd, events: libc::POLLIN, revents: 0 }];
                    self.clock.wait_readable_until_ns(&mut fds, deadline);
                }
                (None, None) => self.clock.wait_until_ns(now.saturating_add(200_000).min(deadline)),
            }
        }
    }

    /// One poll (sent again while its answer is lost); appends what it brought to the input
    /// and returns how many bytes that was.
    fn poll(&mut self) -> Result<usize, DiagError> {
        let started = self.clock.now_ns();
        let mut attempts = 0u32;
        loop {
            let probing = self.polling == Polling::Unknown;
            let mut buf = [0u8; rtloop_proto::frame::MAX_DATA];
            let mut w = FrameWriter::new(&mut buf);
            let encoded = match self.polling {
                Polling::Unknown => w.stream_poll_flow(self.options.channel, 0, FLOW_POLL_LEN),
                Polling::Flow { ack, .. } => w.stream_poll_flow(self.options.channel, ack, FLOW_POLL_LEN),
                Polling::Plain => w.stream_poll(self.options.channel, PLAIN_POLL_LEN),
            };
            let frame = encoded
                .map_err(|e| e.to_string())
                .and_then(|()| w.to_frame(self.command_id(true)).map_err(|e| e.to_string()))
                .map_err(|why| DiagError::Protocol { id: self.id, what: format!("cannot build a poll: {why}") })?;
            self.send_frame(&frame)?;
            self.stats.polls += 1;
            let deadline = self.clock.now_ns().saturating_add(self.options.reply_timeout_ns);
            let answer = self.await_answer(deadline)?;
            if probing {
                match answer {
                    Some(StreamAnswer { packet: Some(_), .. }) => {
                        self.polling = Polling::Flow { ack: 0, synced: false }
                    }
                    // No 0x43: firmware without flow control (it may have answered 0x41, or
                    // nothing at all). Plain polls from now on, unless flow was demanded.
                    _ if self.options.flow == FlowMode::Auto => {
                        self.polling = Polling::Plain;
                        if let Some(a) = answer.filter(|a| a.packet.is_none()) {
                            return Ok(self.take(a.bytes()));
                        }
                        continue;
                    }
                    _ => {}
                }
            }
            let Some(answer) = answer else {
                self.stats.lost_answers += 1;
                attempts += 1;
                if attempts > self.options.poll_retries {
                    let waited_ms = self.clock.now_ns().saturating_sub(started) / 1_000_000;
                    return Err(DiagError::NoAnswer {
                        id: self.id,
                        transport: self.transport.name().to_string(),
                        waited_ms,
                    });
                }
                continue;
            };
            return Ok(match (self.polling, answer.packet) {
                (Polling::Flow { ack, synced }, Some(packet)) => {
                    if packet == ack {
                        if answer.len > 0 {
                            self.stats.repeats += 1;
                        }
                        self.polling = Polling::Flow { ack, synced: true };
                        0
                    } else if !synced || packet == next_packet(ack) {
                        self.polling = Polling::Flow { ack: packet, synced: true };
                        self.take(answer.bytes())
                    } else {
                        self.stats.out_of_sequence += 1;
                        0
                    }
                }
                // A plain answer while polling with flow control (or the reverse): data all
                // the same, in order.
                (_, _) => self.take(answer.bytes()),
            });
        }
    }

    fn take(&mut self, bytes: &[u8]) -> usize {
        self.input.extend(bytes);
        bytes.len()
    }

    /// Poll until at least one new byte is in, or `deadline`; false at the deadline.
    fn fill(&mut self, deadline: u64) -> Result<bool, DiagError> {
        loop {
            if self.poll()? > 0 {
                return Ok(true);
            }
            let now = self.clock.now_ns();
            if now >= deadline {
                return Ok(false);
            }
            self.clock.wait_until_ns(now.saturating_add(self.options.idle_poll_ns).min(deadline));
        }
    }

    /// Read and drop whatever the servo has queued (answers to an earlier client), until a
    /// poll brings nothing or the answer timeout passes. Returns how many bytes were dropped.
    pub fn discard_pending(&mut self) -> Result<usize, DiagError> {
        let deadline = self.clock.now_ns().saturating_add(self.options.answer_timeout_ns);
        let mut dropped = self.input.len();
        self.input.clear();
        loop {
            let n = self.poll()?;
            dropped += n;
            self.input.clear();
            if n == 0 || self.clock.now_ns() >= deadline {
                return Ok(dropped);
            }
        }
    }

    /// Check that `line` can be sent as one command; the line and its `\n`.
    fn checked_line(line: &str) -> Result<Vec<u8>, DiagError> {
        let bad = |why: String| DiagError::BadCommand { command: clip(line), why };
        if line.contains(['\r', '\n']) {
            return Err(bad("it holds a line end, which would make it two commands; send one line at a time".into()));
        }
        if line.len() > MAX_COMMAND {
            return Err(bad(format!(
                "it is {} bytes long, more than the {MAX_COMMAND} a command line may be; shorten it",
                line.len()
            )));
        }
        if line.trim().is_empty() {
            return Err(bad("it is empty; give a command such as `conf get id.id`".into()));
        }
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        Ok(bytes)
    }

    /// The next answer line (without its line end), waiting until `deadline`.
    fn read_line(&mut self, command: &str, deadline: u64) -> Result<String, DiagError> {
        loop {
            if let Some(end) = self.input.iter().position(|&b| b == b'\n') {
                if end > self.options.max_line {
                    return Err(self.overlong_line());
                }
                let mut line: Vec<u8> = self.input.drain(..=end).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(String::from_utf8_lossy(&line).into_owned());
            }
            if self.input.len() > self.options.max_line {
                return Err(self.overlong_line());
            }
            if !self.fill(deadline)? {
                return Err(self.incomplete(command));
            }
        }
    }

    fn overlong_line(&self) -> DiagError {
        DiagError::Protocol { id: self.id, what: format!("an answer line longer than {} bytes", self.options.max_line) }
    }

    fn incomplete(&self, command: &str) -> DiagError {
        DiagError::Incomplete {
            id: self.id,
            transport: self.transport.name().to_string(),
            command: clip(command),
            waited_ms: self.options.answer_timeout_ns / 1_000_000,
        }
    }

    /// Exactly `n` bytes, waiting until `deadline`.
    fn read_exact(&mut self, n: usize, command: &str, deadline: u64) -> Result<Vec<u8>, DiagError> {
        while self.input.len() < n {
            if !self.fill(deadline)? {
                return Err(self.incomplete(command));
            }
        }
        Ok(self.input.drain(..n).collect())
    }

    /// The size and bytes of a block whose header line has been read.
    fn read_block_body(&mut self, command: &str, deadline: u64) -> Result<Vec<u8>, DiagError> {
        let size = self.read_exact(4, command, deadline)?;
        let size = u32::from_le_bytes([size[0], size[1], size[2], size[3]]);
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        if size > self.options.max_block {
            return Err(DiagError::Protocol {
                id: self.id,
                what: format!("a binary block of {size} bytes, more than the {} accepted", self.options.max_block),
            });
        }
        self.read_exact(size, command, deadline)
    }

    /// The `ERR` text of `line`, if it is an error line.
    fn err_text(line: &str) -> Option<&str> {
        if line == "ERR" {
            return Some("");
        }
        line.strip_prefix("ERR ")
    }

    /// Read lines until a terminating one; a periodic telemetry block in between is skipped.
    /// `one_line`: the first non-empty line is the answer. `block`: a header line starting
    /// with this word is followed by a binary block, which ends the answer.
    fn read_answer(&mut self, command: &str, one_line: bool, block: Option<&str>) -> Result<Answer, DiagError> {
        let deadline = self.clock.now_ns().saturating_add(self.options.answer_timeout_ns);
        let mut lines = Vec::new();
        loop {
            let line = self.read_line(command, deadline)?;
            if line.is_empty() {
                continue;
            }
            if let Some(message) = Self::err_text(&line) {
                return Err(DiagError::Refused { id: self.id, command: clip(command), message: message.to_string() });
            }
            let first_word = line.split(' ').next().unwrap_or("");
            if block.is_some_and(|b| b == first_word) {
                let data = self.read_block_body(command, deadline)?;
                return Ok(Answer::Block(Block { header: line, data }));
            }
            if first_word == "emit" {
                // `tel rate` telemetry arriving between answers: not ours.
                let _ = self.read_block_body(command, deadline)?;
                self.stats.emissions_skipped += 1;
                continue;
            }
            if line == "OK" {
                return Ok(Answer::Lines(lines));
            }
            if one_line {
                return Ok(Answer::Line(line));
            }
            lines.push(line);
        }
    }

    /// Send `line` and return the answer lines before its `OK`. `ERR …` is
    /// [`DiagError::Refused`] with the servo's text.
    pub fn command(&mut self, line: &str) -> Result<Vec<String>, DiagError> {
        let bytes = Self::checked_line(line)?;
        self.write(&bytes)?;
        match self.read_answer(line, false, None)? {
            Answer::Lines(lines) => Ok(lines),
            Answer::Line(l) => Ok(vec![l]),
            Answer::Block(b) => Ok(vec![b.header]),
        }
    }

    /// Send `line` (e.g. `conf get servo.pid_position.kp`) and return its one-line answer.
    /// A bare `OK` answers as an empty string.
    pub fn command_oneline(&mut self, line: &str) -> Result<String, DiagError> {
        let bytes = Self::checked_line(line)?;
        self.write(&bytes)?;
        match self.read_answer(line, true, None)? {
            Answer::Line(l) => Ok(l),
            Answer::Lines(lines) => Ok(lines.into_iter().next().unwrap_or_default()),
            Answer::Block(b) => Ok(b.header),
        }
    }

    /// Send `line` (`tel get NAME`, `tel schema NAME`, `conf schema G`, `conf data G`) and read
    /// its binary block. A command that answers text instead (`tel fmt NAME 1` makes `tel get`
    /// answer text) is a [`DiagError::Protocol`] error naming what came.
    pub fn command_block(&mut self, line: &str) -> Result<Block, DiagError> {
        let bytes = Self::checked_line(line)?;
        let Some(prefix) = block_prefix(line) else {
            return Err(DiagError::BadCommand {
                command: clip(line),
                why: "it does not answer a binary block; binary blocks come from tel get, tel schema, conf schema and conf data".into(),
            });
        };
        self.write(&bytes)?;
        match self.read_answer(line, true, Some(prefix))? {
            Answer::Block(b) => Ok(b),
            Answer::Line(l) => Err(DiagError::Protocol {
                id: self.id,
                what: format!("`{}` answered the text line `{}` instead of a binary block", clip(line), clip(&l)),
            }),
            Answer::Lines(_) => Err(DiagError::Protocol {
                id: self.id,
                what: format!("`{}` answered OK instead of a binary block", clip(line)),
            }),
        }
    }

    /// Send `line` and read its answer in whatever form the command gives: the block of
    /// `tel get` / `tel schema` / `conf schema` / `conf data`, the one line of `conf get`, or
    /// lines up to `OK` for everything else (what an interactive console needs).
    pub fn command_any(&mut self, line: &str) -> Result<ConsoleAnswer, DiagError> {
        let bytes = Self::checked_line(line)?;
        let mut words = line.split_ascii_whitespace();
        let one_line = matches!((words.next(), words.next()), (Some("conf"), Some("get")));
        let block = block_prefix(line);
        self.write(&bytes)?;
        Ok(match self.read_answer(line, one_line, block)? {
            Answer::Block(b) => ConsoleAnswer::Block(b),
            Answer::Line(l) => ConsoleAnswer::Value(l),
            Answer::Lines(lines) => ConsoleAnswer::Lines(lines),
        })
    }
}

/// An answer as [`DiagnosticClient::read_answer`] found it.
enum Answer {
    Lines(Vec<String>),
    Line(String),
    Block(Block),
}

/// What a console command answered ([`DiagnosticClient::command_any`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsoleAnswer {
    /// Lines before the `OK` (possibly none).
    Lines(Vec<String>),
    /// The one line of a `conf get`.
    Value(String),
    /// A binary block.
    Block(Block),
}

/// The packet number that follows `packet`: servos count 1, 2, …, 255, then 1 again (0 is
/// kept for "nothing received yet", the ack of a new client).
fn next_packet(packet: u8) -> u8 {
    packet.checked_add(1).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VirtualClock;

    /// A servo console stand-in behind the transport interface: answers each line with
    /// `script(line)`, serves 0x42 always and 0x44 only when `flow`, and can lose replies.
    struct FakeServo {
        id: u8,
        flow: bool,
        script: fn(&str) -> Vec<u8>,
        input: Vec<u8>,
        output: VecDeque<u8>,
        packet: u8,
        unacked: usize,
        replies: VecDeque<CanFdFrame>,
        /// Lose the next this many replies that carry stream data.
        lose_data_replies: usize,
        sent: Vec<CanFdFrame>,
        /// (packet, data) of every 0x43 sent, lost or not.
        flow_log: Vec<(u8, Vec<u8>)>,
    }

    impl FakeServo {
        fn new(id: u8, flow: bool, script: fn(&str) -> Vec<u8>) -> Self {
            FakeServo {
                id,
                flow,
                script,
                input: Vec::new(),
                output: VecDeque::new(),
                packet: 0,
                unacked: 0,
                replies: VecDeque::new(),
                lose_data_replies: 0,
                sent: Vec::new(),
                flow_log: Vec::new(),
            }
        }
    }

    impl Transport for FakeServo {
        fn name(&self) -> &str {
            "fake:bus"
        }

        fn send(&mut self, frame: &CanFdFrame, _now_ns: u64) -> Result<(), TransportError> {
            self.sent.push(*frame);
            let arb = frame.arbitration();
            if arb.destination != self.id {
                return Ok(());
            }
            let mut buf = [0u8; 64];
            let mut w = FrameWriter::new(&mut buf);
            let mut answered_data = false;
            for sub in subframes(frame.payload()).map_while(Result::ok) {
                match sub {
                    Subframe::Stream { opcode: 0x40, channel: 1, data } => {
                        self.input.extend_from_slice(data);
                        while let Some(end) = self.input.iter().position(|&b| b == b'\n') {
                            let line: Vec<u8> = self.input.drain(..=end).collect();
                            let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
                            self.output.extend((self.script)(&text));
                        }
                    }
                    Subframe::Poll { channel: 1, max_len } => {
                        let n = (max_len as usize).min(self.output.len());
                        let data: Vec<u8> = self.output.drain(..n).collect();
                        self.unacked = 0;
                        answered_data |= !data.is_empty();
                        w.stream(0x41, 1, &data).unwrap();
                    }
                    Subframe::FlowPoll { channel: 1, ack, max_len } if self.flow => {
                        if ack == self.packet {
                            self.output.drain(..self.unacked);
                            self.unacked = 0;
                            if !self.output.is_empty() {
                                self.packet = self.packet.wrapping_add(1);
                                self.unacked = (max_len as usize).min(self.output.len());
                            }
                        }
                        let data: Vec<u8> = self.output.iter().take(self.unacked).copied().collect();
                        self.flow_log.push((self.packet, data.clone()));
                        answered_data |= !data.is_empty();
                        w.stream_flow(1, self.packet, &data).unwrap();
                    }
                    // A firmware without flow control stops at what it does not know.
                    Subframe::FlowPoll { .. } => break,
                    _ => {}
                }
            }
            if arb.reply_required && !w.is_empty() {
                if answered_data && self.lose_data_replies > 0 {
                    self.lose_data_replies -= 1;
                } else {
                    self.replies.push_back(w.to_frame(arb.reply().build()).unwrap());
                }
            }
            Ok(())
        }

        fn recv(&mut self, _now_ns: u64) -> Result<Option<CanFdFrame>, TransportError> {
            Ok(self.replies.pop_front())
        }
    }

    fn conf_script(line: &str) -> Vec<u8> {
        match line {
            "conf get servo.pid_position.kp" => b"4\r\n".to_vec(),
            "conf enumerate" => {
                let mut out = String::new();
                for i in 0..20 {
                    out.push_str(&format!("servo.key{i} {i}.5\r\n"));
                }
                out.push_str("OK\r\n");
                out.into_bytes()
            }
            "tel get servo_stats" => {
                let mut out = b"emit servo_stats\r\n".to_vec();
                out.extend_from_slice(&300u32.to_le_bytes());
                out.extend((0..300u32).map(|i| i as u8));
                out
            }
            "tel schema huge" => {
                let mut out = b"schema huge\r\n".to_vec();
                out.extend_from_slice(&u32::MAX.to_le_bytes());
                out
            }
            "hang" => b"partial line".to_vec(),
            other => format!("ERR unknown command '{other}'\r\n").into_bytes(),
        }
    }

    fn fake_client(servo: FakeServo) -> DiagnosticClient<FakeServo, VirtualClock> {
        let id = servo.id;
        DiagnosticClient::new(servo, VirtualClock::new(0), id, Default::default()).unwrap()
    }

    #[test]
    fn writes_are_chunked_into_0x40_subframes_without_the_reply_bit() {
        let mut c = fake_client(FakeServo::new(3, true, conf_script));
        c.write(&[b'x'; 130]).unwrap();
        // The probe, then the data.
        let frames = &c.transport().sent[1..];
        assert_eq!(frames.len(), 3);
        let mut total = 0;
        for f in frames {
            let arb = f.arbitration();
            assert_eq!((arb.destination, arb.source, arb.reply_required), (3, 0, false));
            let sub = subframes(f.payload()).next().unwrap().unwrap();
            let Subframe::Stream { opcode: 0x40, channel: 1, data } = sub else { panic!("{sub:?}") };
            assert!(data.len() <= MAX_CLIENT_DATA);
            total += data.len();
        }
        assert_eq!(total, 130);
    }

    #[test]
    fn commands_read_lines_values_blocks_and_errors_with_flow_control() {
        let mut c = fake_client(FakeServo::new(2, true, conf_script));
        let lines = c.command("conf enumerate").unwrap();
        assert_eq!(lines.len(), 20);
        assert_eq!(lines[19], "servo.key19 19.5");
        assert_eq!(c.flow_controlled(), Some(true));
        assert_eq!(c.command_oneline("conf get servo.pid_position.kp").unwrap(), "4");
        let block = c.command_block("tel get servo_stats").unwrap();
        assert_eq!(block.header, "emit servo_stats");
        assert_eq!(block.data, (0..300u32).map(|i| i as u8).collect::<Vec<_>>());
        let e = c.command("bogus").unwrap_err();
        assert_eq!(e, DiagError::Refused { id: 2, command: "bogus".into(), message: "unknown command 'bogus'".into() });
        assert!(e.to_string().contains("ERR unknown command 'bogus'"));
        // Every poll was flow-controlled.
        let plain_polls = c
            .transport()
            .sent
            .iter()
            .filter(|f| matches!(subframes(f.payload()).next(), Some(Ok(Subframe::Poll { .. }))))
            .count();
        assert_eq!(plain_polls, 0);
    }

    #[test]
    fn a_lost_flow_answer_is_sent_again_with_the_same_packet_number() {
        let mut servo = FakeServo::new(1, true, conf_script);
        // The first answer carrying data is lost on its way back.
        servo.lose_data_replies = 1;
        let mut c = fake_client(servo);
        let lines = c.command("conf enumerate").unwrap();
        assert_eq!(lines.len(), 20, "nothing lost, nothing doubled: {lines:?}");
        assert_eq!(c.stats().lost_answers, 1);
        let log = &c.transport().flow_log;
        let first = log.iter().position(|(_, d)| !d.is_empty()).unwrap();
        assert_eq!(log[first], log[first + 1], "the lost packet came again, same number, same bytes");
    }

    #[test]
    fn a_repeated_packet_is_taken_once() {
        let mut c = fake_client(FakeServo::new(1, true, conf_script));
        c.write(b"conf get servo.pid_position.kp\n").unwrap();
        assert_eq!(c.poll().unwrap(), 3);
        // The servo sends packet 1 again (as if our ack had been lost): nothing new.
        let mut buf = [0u8; 64];
        let mut w = FrameWriter::new(&mut buf);
        w.stream_flow(1, 1, b"4\r\n").unwrap();
        let reply = w.to_frame(ArbitrationId::command(1, false).reply().build()).unwrap();
        c.transport_mut().replies.push_back(reply);
        c.transport_mut().lose_data_replies = 0;
        assert_eq!(c.poll().unwrap(), 0);
        assert_eq!(c.stats().repeats, 1);
        assert_eq!(c.input.len(), 3);
    }

    #[test]
    fn firmware_without_flow_control_is_polled_with_0x42() {
        let mut c = fake_client(FakeServo::new(4, false, conf_script));
        assert_eq!(c.command_oneline("conf get servo.pid_position.kp").unwrap(), "4");
        assert_eq!(c.flow_controlled(), Some(false));
        assert_eq!(c.command("conf enumerate").unwrap().len(), 20);
        // One probe went unanswered; no retries of it.
        assert_eq!(c.stats().lost_answers, 0);
    }

    #[test]
    fn oversized_blocks_and_unfinished_answers_are_errors_not_hangs() {
        let mut c = fake_client(FakeServo::new(1, true, conf_script));
        let e = c.command_block("tel schema huge").unwrap_err();
        assert!(matches!(e, DiagError::Protocol { .. }) && e.to_string().contains("binary block"), "{e}");
        let mut c = fake_client(FakeServo::new(1, true, conf_script));
        let e = c.command("hang").unwrap_err();
        assert!(matches!(e, DiagError::Incomplete { .. }), "{e:?}");
        assert!(e.to_string().contains("did not finish answering `hang`"), "{e}");
    }

    #[test]
    fn text_where_a_block_was_expected_is_named() {
        fn text_tel(line: &str) -> Vec<u8> {
            match line {
                "tel get servo_stats" => b"servo_stats.mode 0\r\nOK\r\n".to_vec(),
                _ => b"OK\r\n".to_vec(),
            }
        }
        let mut c = fake_client(FakeServo::new(1, true, text_tel));
        let e = c.command_block("tel get servo_stats").unwrap_err();
        assert!(e.to_string().contains("instead of a binary block"), "{e}");
        let e = c.command_block("conf get x").unwrap_err();
        assert!(matches!(e, DiagError::BadCommand { .. }), "{e:?}");
    }

    #[test]
    fn periodic_telemetry_between_answers_is_skipped() {
        fn with_emission(line: &str) -> Vec<u8> {
            let mut out = b"emit servo_stats\r\n".to_vec();
            out.extend_from_slice(&5u32.to_le_bytes());
            out.extend_from_slice(b"\n\nOK\r");
            match line {
                "tel list" => out.extend_from_slice(b"servo_stats\r\nOK\r\n"),
                _ => out.extend_from_slice(b"OK\r\n"),
            }
            out
        }
        let mut c = fake_client(FakeServo::new(1, true, with_emission));
        assert_eq!(c.command("tel list").unwrap(), ["servo_stats"]);
        assert_eq!(c.stats().emissions_skipped, 1);
    }
}
