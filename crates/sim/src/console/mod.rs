//! The diagnostic console of a simulated servo: stream channel 1, as moteus_tool, tview and
//! the moteus client libraries use it.
//!
//! What it is for: turning the bytes of 0x40 subframes into console lines and the answers
//! into bytes that 0x42 / 0x44 polls collect — `tel` (telemetry records in mjlib's binary
//! encoding), `conf` (the configuration under the firmware's key names, see [`config`]),
//! `d` (drive commands) — so a simulated servo is a moteus the official tools recognise.
//! Every command ends with `OK` or `ERR <what was wrong>` (except `conf get`, which answers
//! the value alone, and `tel get` / `tel schema`, which answer a binary block), as the
//! firmware does; the error texts start with the firmware's own phrases (`unknown command`,
//! `unknown group`, `error reading`, `error setting`) that tools look for.
//!
//! Flow: lines are handled in order, one at a time. An answer that does not fit the output
//! buffer waits and is copied in as polls drain it (a `conf enumerate` of a few hundred
//! keys streams through a 4 KiB buffer); while one is pending, later input waits in the
//! bounded input buffer. Input beyond that is dropped, counted, and reported by an `ERR`
//! line, never silently. Periodic telemetry (`tel rate`) is emitted only between answers
//! and only when the whole record fits; a skipped emission is counted.
//!
//! What it must never do: panic on any input (lines are bytes, not necessarily text), hang
//! a client (every command gets its terminating line, an overlong line gets `ERR`), touch
//! the register path (a console that is busy or full never delays a register reply), or
//! read a clock (time comes from the servo).

pub mod config;
pub mod records;

use std::collections::VecDeque;

use crate::servo::Servo;
use config::{ConfError, Config};

/// The console's stream channel.
pub const CHANNEL: u32 = 1;

/// Longest console line, bytes (without its CR/LF).
pub const MAX_LINE: usize = 256;

/// Bytes of input held while an answer is still being sent.
pub const INPUT_CAPACITY: usize = 2048;

/// Bytes of answer waiting for polls.
pub const OUTPUT_CAPACITY: usize = 4096;

/// Shortest `tel rate` period, ms (as the firmware: smaller rates are raised to it).
const MIN_RATE_MS: u64 = 1;

/// What the console has counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsoleStats {
    /// Lines handled.
    pub lines: u64,
    /// Lines answered with `ERR`.
    pub errors: u64,
    /// Input bytes dropped because the input buffer was full.
    pub input_dropped: u64,
    /// Periodic telemetry emissions skipped because the output buffer was busy.
    pub telemetry_skipped: u64,
    /// Periodic telemetry emissions sent.
    pub telemetry_sent: u64,
}

/// An answer still being produced.
#[derive(Debug, Clone)]
enum Job {
    /// Bytes to copy into the output, from `next`.
    Bytes { bytes: Vec<u8>, next: usize },
    /// `conf enumerate`: keys `next..end`, then `OK`.
    Enumerate { next: usize, end: usize },
}

/// Periodic emission state of one telemetry record.
#[derive(Debug, Clone, Copy, Default)]
struct RecordState {
    /// Emission period, ms (0: off).
    rate_ms: u64,
    /// When the next emission is due, ns.
    next_ns: u64,
    /// `tel fmt NAME 1`: text lines instead of the binary block.
    text: bool,
}

/// What a console line asked of the servo beyond the console itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServoAction {
    /// Nothing.
    None,
    /// Restart the servo (`d reset`): the stored configuration comes back, a changed
    /// `id.id` takes effect.
    Restart,
}

/// The console of one servo.
#[derive(Debug, Clone)]
pub struct Console {
    config: Config,
    /// The configuration as last stored (`conf write`, or loaded at power-up); `conf load`
    /// and a restart go back to it. None: nothing stored, the defaults apply.
    stored: Option<String>,
    /// Set by `conf write`; the I/O layer takes it to write the file.
    store_request: Option<String>,
    input: VecDeque<u8>,
    /// Dropping the rest of an overlong line; its `ERR` goes out at its end.
    discarding: bool,
    /// Input bytes dropped since the last report.
    unreported_drops: u64,
    output: VecDeque<u8>,
    /// Bytes at the front of `output` sent in flow-controlled packet `packet` and not yet
    /// acknowledged.
    unacked: usize,
    packet: u8,
    job: Option<Job>,
    records: [RecordState; records::NAMES.len()],
    stats: ConsoleStats,
}

impl Console {
    /// A console for a servo whose configuration is `config`, with `stored` the stored
    /// configuration text it was powered up with (if any).
    pub fn new(config: Config, stored: Option<String>) -> Self {
        Console {
            config,
            stored,
            store_request: None,
            input: VecDeque::with_capacity(INPUT_CAPACITY),
            discarding: false,
            unreported_drops: 0,
            output: VecDeque::with_capacity(OUTPUT_CAPACITY),
            unacked: 0,
            packet: 0,
            job: None,
            records: [RecordState::default(); records::NAMES.len()],
            stats: ConsoleStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The stored configuration text, if any.
    pub fn stored(&self) -> Option<&str> {
        self.stored.as_deref()
    }

    /// Take the text `conf write` asked to store (for the I/O layer to persist).
    pub fn take_store_request(&mut self) -> Option<String> {
        self.store_request.take()
    }

    /// Put back a store request a restart must not lose (the I/O layer has not taken it
    /// yet).
    pub fn restore_store_request(&mut self, text: String) {
        self.store_request = Some(text);
    }

    /// What the console has counted.
    pub fn stats(&self) -> ConsoleStats {
        self.stats
    }

    /// Bytes waiting for polls.
    pub fn pending_output(&self) -> usize {
        self.output.len()
    }

    /// Take client bytes (0x40). Returns how many were dropped because the input buffer
    /// was full (0 normally); the drop is reported on the stream as an `ERR` line.
    pub fn receive(&mut self, data: &[u8]) -> usize {
        let room = INPUT_CAPACITY.saturating_sub(self.input.len());
        let taken = data.len().min(room);
        self.input.extend(data.iter().take(taken));
        let dropped = data.len() - taken;
        if dropped > 0 {
            self.stats.input_dropped += dropped as u64;
            self.unreported_drops += dropped as u64;
        }
        dropped
    }

    /// Handle whatever input can be handled now and fill the output: finish the pending
    /// answer, run the next lines, emit periodic telemetry that is due. Returns what a
    /// line asked of the servo (a restart stops the pump: the caller restarts the servo,
    /// which clears the console).
    pub fn pump(&mut self, servo: &mut Servo) -> ServoAction {
        loop {
            if !self.advance_job() {
                return ServoAction::None;
            }
            if self.unreported_drops > 0 {
                let n = core::mem::take(&mut self.unreported_drops);
                self.stats.errors += 1;
                self.start_bytes(
                    format!(
                        "ERR input overflow: {n} bytes dropped; wait for each command's answer before sending more\r\n"
                    )
                    .into_bytes(),
                );
                continue;
            }
            let Some(line) = self.next_line() else {
                break;
            };
            if self.run_line(&line, servo) == ServoAction::Restart {
                return ServoAction::Restart;
            }
        }
        self.emit_due_telemetry(servo);
        ServoAction::None
    }

    /// A 0x42 poll: up to `out.len()` bytes of output.
    pub fn poll(&mut self, out: &mut [u8]) -> usize {
        let n = out.len().min(self.output.len());
        for (slot, byte) in out.iter_mut().zip(self.output.drain(..n)) {
            *slot = byte;
        }
        // Whatever a flow-controlled packet held has now been read by a plain poll.
        self.unacked = 0;
        n
    }

    /// A 0x44 poll acknowledging `ack`: (packet number, bytes in `out`). When `ack` is the
    /// last packet sent (or 0: a new client), its bytes are done with and the next packet
    /// carries new output; otherwise the last packet is sent again.
    pub fn poll_flow(&mut self, ack: u8, out: &mut [u8]) -> (u8, usize) {
        // Packet numbers skip 0 once counting has begun, so an ack of 0 comes from a client
        // that has received nothing yet. After packet 1 that is the loss of the very first
        // packet (send it again); after a later one it is a new client, and the last packet
        // went to the client before it: done with, not sent again to the newcomer.
        let new_client = ack == 0 && self.packet > 1;
        if ack == self.packet || new_client {
            self.output.drain(..self.unacked.min(self.output.len()));
            self.unacked = 0;
            if self.output.is_empty() {
                return (self.packet, 0);
            }
            self.packet = self.packet.checked_add(1).unwrap_or(1);
            self.unacked = out.len().min(self.output.len());
        } else {
            // A client that asks for less than the lost packet held gets its first part;
            // the packet shrinks to that.
            self.unacked = self.unacked.min(out.len());
        }
        for (slot, byte) in out.iter_mut().zip(self.output.iter().take(self.unacked)) {
            *slot = *byte;
        }
        (self.packet, self.unacked)
    }

    /// Copy as much of the pending answer as fits. True when it is complete (or there is
    /// none).
    fn advance_job(&mut self) -> bool {
        loop {
            match &mut self.job {
                None => return true,
                Some(Job::Bytes { bytes, next }) => {
                    let room = OUTPUT_CAPACITY.saturating_sub(self.output.len());
                    let rest = bytes.get(*next..).unwrap_or(&[]);
                    let n = rest.len().min(room);
                    self.output.extend(rest.iter().take(n));
                    *next += n;
                    if *next < bytes.len() {
                        return false;
                    }
                    self.job = None;
                }
                Some(Job::Enumerate { next, end }) => {
                    if *next >= *end {
                        self.job = Some(Job::Bytes { bytes: b"OK\r\n".to_vec(), next: 0 });
                        continue;
                    }
                    let Some((key, value)) = self.config.item(*next) else {
                        *next = *end;
                        continue;
                    };
                    let line = format!("{key} {value}\r\n");
                    if OUTPUT_CAPACITY.saturating_sub(self.output.len()) < line.len() {
                        return false;
                    }
                    self.output.extend(line.as_bytes());
                    *next += 1;
                }
            }
        }
    }

    fn start_bytes(&mut self, bytes: Vec<u8>) {
        self.job = Some(Job::Bytes { bytes, next: 0 });
    }

    /// The next complete input line (CR or LF ends it; empty lines are skipped). An
    /// overlong line becomes an `ERR` once its end arrives.
    fn next_line(&mut self) -> Option<Vec<u8>> {
        loop {
            let end = self.input.iter().position(|b| *b == b'\r' || *b == b'\n');
            let Some(end) = end else {
                if self.input.len() > MAX_LINE {
                    // No end in sight and already too long: drop what we have and the rest
                    // up to the next line end.
                    self.input.clear();
                    self.discarding = true;
                }
                return None;
            };
            let line: Vec<u8> = self.input.drain(..end).collect();
            self.input.pop_front();
            if self.discarding || line.len() > MAX_LINE {
                self.discarding = false;
                return Some(b"\x00too-long".to_vec());
            }
            if line.iter().all(|b| *b == b' ' || *b == b'\t') {
                continue;
            }
            return Some(line);
        }
    }

    /// Run one line; queues its answer.
    fn run_line(&mut self, line: &[u8], servo: &mut Servo) -> ServoAction {
        self.stats.lines += 1;
        let text: String = line.iter().map(|&b| char::from(b)).collect();
        let answer = if line == b"\x00too-long" {
            Err(format!("line too long (more than {MAX_LINE} bytes); shorten it"))
        } else if let Some(bad) = line.iter().find(|b| !(b.is_ascii_graphic() || **b == b' ' || **b == b'\t')) {
            Err(format!("byte {bad:#04x} in the command; the console takes printable ASCII text lines"))
        } else {
            let mut words = text.split_ascii_whitespace();
            let group = words.next().unwrap_or("");
            let rest: Vec<&str> = words.collect();
            match group {
                "tel" => self.tel(&rest, servo),
                "conf" => self.conf(&rest, servo),
                "d" => match self.drive(&rest, servo) {
                    Ok(Answer::Restart) => return ServoAction::Restart,
                    other => other,
                },
                "unlock" | "lock" => {
                    Err(format!("unknown command '{group}': the simulator has no flash to unlock or lock"))
                }
                _ => Err(format!("unknown command '{}'; the console knows tel, conf and d", clip(group))),
            }
        };
        match answer {
            Ok(Answer::Ok) => self.start_bytes(b"OK\r\n".to_vec()),
            Ok(Answer::Bytes(bytes)) => self.start_bytes(bytes),
            Ok(Answer::Job(job)) => self.job = Some(job),
            Ok(Answer::Restart) => {}
            Err(message) => {
                self.stats.errors += 1;
                self.start_bytes(format!("ERR {message}\r\n").into_bytes());
            }
        }
        ServoAction::None
    }

    fn tel(&mut self, args: &[&str], servo: &mut Servo) -> Result<Answer, String> {
        let record = |name: Option<&&str>| -> Result<usize, String> {
            let name = name.ok_or("the command needs a record name (see tel list)")?;
            records::index_of(name).ok_or_else(|| format!("unknown name '{}'; tel list shows the records", clip(name)))
        };
        match args.first().copied() {
            Some("stop") => {
                for r in &mut self.records {
                    r.rate_ms = 0;
                }
                Ok(Answer::Ok)
            }
            Some("list") => {
                let mut out = String::new();
                for name in records::NAMES {
                    out.push_str(name);
                    out.push_str("\r\n");
                }
                out.push_str("OK\r\n");
                Ok(Answer::Bytes(out.into_bytes()))
            }
            Some("schema") => {
                let i = record(args.get(1))?;
                Ok(Answer::Bytes(block("schema", records::NAMES[i], &records::schema(i))))
            }
            Some("get") => {
                let i = record(args.get(1))?;
                Ok(Answer::Bytes(self.emission(i, servo)))
            }
            Some("fmt") => {
                let i = record(args.get(1))?;
                let text = match args.get(2).copied() {
                    Some("0") => false,
                    Some("1") => true,
                    _ => return Err("tel fmt takes a record name and 0 (binary) or 1 (text)".into()),
                };
                self.records[i].text = text;
                Ok(Answer::Ok)
            }
            Some("text") => {
                for r in &mut self.records {
                    r.text = true;
                }
                Ok(Answer::Ok)
            }
            Some("rate") => {
                let i = record(args.get(1))?;
                let ms = args
                    .get(2)
                    .and_then(|t| t.parse::<u64>().ok())
                    .filter(|ms| *ms <= 3_600_000)
                    .ok_or("tel rate takes a record name and a period in ms (0 to 3600000; 0 stops it)")?;
                let r = &mut self.records[i];
                r.rate_ms = if ms == 0 { 0 } else { ms.max(MIN_RATE_MS) };
                r.next_ns = servo.now_ns();
                Ok(Answer::Ok)
            }
            Some(other) => Err(format!(
                "unknown subcommand 'tel {}'; tel knows stop, list, schema, get, fmt, text, rate",
                clip(other)
            )),
            None => Err("unknown subcommand: tel needs one of stop, list, schema, get, fmt, text, rate".into()),
        }
    }

    /// What `tel get` (or a periodic emission) sends for record `i`.
    fn emission(&self, i: usize, servo: &Servo) -> Vec<u8> {
        let name = records::NAMES[i];
        let mut data = Vec::new();
        records::data(i, servo, &mut data);
        if !self.records[i].text {
            return block("emit", name, &data);
        }
        let mut out = String::new();
        let flat = rtloop_tlog::schema::Schema::parse_binary(&records::schema(i))
            .and_then(|schema| rtloop_tlog::value::decode(&schema, &data))
            .map(|value| {
                let mut flat = Vec::new();
                value.flatten(name, &mut flat);
                flat
            })
            .unwrap_or_default();
        for (key, value) in flat {
            let v = match value.as_f64() {
                Some(x) => format!("{x}"),
                None => format!("{}", value.to_json()),
            };
            out.push_str(&format!("{key} {v}\r\n"));
        }
        out.push_str("OK\r\n");
        out.into_bytes()
    }

    fn emit_due_telemetry(&mut self, servo: &Servo) {
        let now = servo.now_ns();
        for i in 0..self.records.len() {
            let r = self.records[i];
            if r.rate_ms == 0 || now < r.next_ns {
                continue;
            }
            let period_ns = r.rate_ms.saturating_mul(1_000_000);
            // Catch up at most one period: a client that stopped polling for a while gets
            // the latest state, not a burst of old ones.
            self.records[i].next_ns = r.next_ns.saturating_add(period_ns).max(now);
            let bytes = self.emission(i, servo);
            if self.job.is_some() || OUTPUT_CAPACITY.saturating_sub(self.output.len()) < bytes.len() {
                self.stats.telemetry_skipped += 1;
                continue;
            }
            self.output.extend(bytes);
            self.stats.telemetry_sent += 1;
        }
    }

    fn conf(&mut self, args: &[&str], servo: &mut Servo) -> Result<Answer, String> {
        let err = |e: ConfError| e.to_string();
        match args.first().copied() {
            Some("enumerate") => {
                let range = self.config.range(args.get(1).copied().unwrap_or("")).map_err(err)?;
                Ok(Answer::Job(Job::Enumerate { next: range.start, end: range.end }))
            }
            Some("get") => {
                let key = args.get(1).ok_or("conf get needs a key, e.g. conf get servo.default_timeout_s")?;
                let value = self.config.get(key).map_err(err)?;
                Ok(Answer::Bytes(format!("{value}\r\n").into_bytes()))
            }
            Some("set") => {
                let (Some(key), Some(value)) = (args.get(1), args.get(2)) else {
                    return Err("error setting: conf set needs a key and a value, e.g. conf set servo.pid_position.kp 4".into());
                };
                if args.len() > 3 {
                    return Err(format!("error setting '{}': one value only", clip(key)));
                }
                self.config.set(key, value).map_err(err)?;
                servo.reconfigure(&self.config);
                Ok(Answer::Ok)
            }
            Some("write") => {
                let text = self.config.to_text();
                self.stored = Some(text.clone());
                self.store_request = Some(text);
                Ok(Answer::Ok)
            }
            Some("load") => {
                self.config = stored_config(servo, self.stored.as_deref());
                servo.reconfigure(&self.config);
                Ok(Answer::Ok)
            }
            Some("default") => {
                self.config = Config::new(servo.factory_config());
                servo.reconfigure(&self.config);
                Ok(Answer::Ok)
            }
            Some("list") => {
                let mut out = String::new();
                for g in self.config.groups() {
                    out.push_str(g);
                    out.push_str("\r\n");
                }
                out.push_str("OK\r\n");
                Ok(Answer::Bytes(out.into_bytes()))
            }
            Some("schema") => {
                let group = args.get(1).ok_or("conf schema needs a group name (see conf list)")?;
                let schema = self.config.group_schema(group).map_err(err)?;
                Ok(Answer::Bytes(block("cschema", group, &schema)))
            }
            Some("data") => {
                let group = args.get(1).ok_or("conf data needs a group name (see conf list)")?;
                let data = self.config.group_data(group).map_err(err)?;
                Ok(Answer::Bytes(block("cdata", group, &data)))
            }
            Some(other) => Err(format!(
                "unknown subcommand 'conf {}'; conf knows enumerate, get, set, write, load, default, list, schema, data",
                clip(other)
            )),
            None => Err("unknown subcommand: conf needs one of enumerate, get, set, write, load, default".into()),
        }
    }

    fn drive(&mut self, args: &[&str], servo: &mut Servo) -> Result<Answer, String> {
        let number = |what: &str, text: Option<&&str>| -> Result<f64, String> {
            let text = text.ok_or_else(|| format!("missing {what}"))?;
            parse_number(text).ok_or_else(|| format!("{what} '{}' is not a number", clip(text)))
        };
        let finite = |what: &str, text: Option<&&str>| -> Result<f64, String> {
            let x = number(what, text)?;
            if x.is_finite() {
                Ok(x)
            } else {
                Err(format!("{what} must be a finite number"))
            }
        };
        match args.first().copied() {
            Some("stop") => {
                servo.console_command(crate::servo::ConsoleCommand::Stop);
                Ok(Answer::Ok)
            }
            Some("brake") => {
                servo.console_command(crate::servo::ConsoleCommand::Brake);
                Ok(Answer::Ok)
            }
            Some("pos") => {
                let position = number("position", args.get(1))?;
                let velocity = number("velocity", args.get(2))?;
                let max_torque = number("maximum torque", args.get(3))?;
                let mut cmd = crate::servo::PositionCommand { position, velocity, max_torque, ..Default::default() };
                for option in args.iter().skip(4) {
                    parse_pos_option(option, &mut cmd)?;
                }
                servo.console_command(crate::servo::ConsoleCommand::Position(cmd));
                Ok(Answer::Ok)
            }
            Some("within") => {
                let lower = number("lower bound", args.get(1))?;
                let upper = number("upper bound", args.get(2))?;
                let max_torque = number("maximum torque", args.get(3))?;
                servo.console_command(crate::servo::ConsoleCommand::StayWithin { lower, upper, max_torque });
                Ok(Answer::Ok)
            }
            Some("rezero") | Some("index") => {
                let what = args.first().copied().unwrap_or("rezero");
                let value = match args.get(1) {
                    Some(t) => finite("position", Some(t))?,
                    None if what == "rezero" => 0.0,
                    None => return Err("d index needs a position".into()),
                };
                servo.set_output_position(value);
                Ok(Answer::Ok)
            }
            Some("cfg-set-output") => {
                let value = finite("position", args.get(1))?;
                let offset = servo.output_offset_for(value);
                self.config
                    .set("motor_position.output.offset", &format!("{offset}"))
                    .map_err(|e| e.to_string())?;
                servo.reconfigure(&self.config);
                Ok(Answer::Ok)
            }
            Some("reset") => Ok(Answer::Restart),
            Some(cmd @ ("pwm" | "volt" | "dq" | "i" | "ind" | "cal" | "calibrate" | "vdq" | "fixed-voltage")) => Err(format!(
                "'d {cmd}' drives the motor's phases directly (PWM, voltage or current injection), which the simulator does not model; use d pos, d stop, d brake or d within"
            )),
            Some("flash") => Err("'d flash' writes the firmware flash, which the simulator does not have".into()),
            Some(other) => Err(format!(
                "unknown subcommand 'd {}'; the simulator knows d stop, pos, within, brake, rezero, index, cfg-set-output, reset",
                clip(other)
            )),
            None => Err("unknown subcommand: d needs one of stop, pos, within, brake, rezero, index, cfg-set-output, reset".into()),
        }
    }
}

/// The configuration a servo powers up with: its factory configuration with the stored
/// text (if any) applied over it. Bad stored lines are skipped (the I/O layer reports
/// them when it loads the file).
pub fn stored_config(servo: &Servo, stored: Option<&str>) -> Config {
    let mut config = Config::new(servo.factory_config());
    if let Some(text) = stored {
        let _ = config.load_text(text);
    }
    config
}

/// What a command answered.
enum Answer {
    /// `OK`.
    Ok,
    /// These bytes (which end with the terminating line, or are a binary block).
    Bytes(Vec<u8>),
    /// An answer produced as the output drains.
    Job(Job),
    /// Restart the servo; no answer (as on the board, which reboots).
    Restart,
}

/// `PREFIX NAME\r\n`, the u32 little-endian size, the bytes: the framing of `tel schema`,
/// `tel get`, `conf schema` and `conf data` answers.
fn block(prefix: &str, name: &str, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + name.len() + 7 + bytes.len());
    out.extend_from_slice(prefix.as_bytes());
    out.push(b' ');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
    out
}

/// A number as the firmware's console reads one: decimal or exponent, `nan` allowed.
fn parse_number(text: &str) -> Option<f64> {
    let lower = text.to_ascii_lowercase();
    if lower == "nan" {
        return Some(f64::NAN);
    }
    if lower.contains("inf") {
        return None;
    }
    text.parse::<f64>().ok()
}

/// One `d pos` option: a letter and its value with no space (`p0.5`, `t0.2`, `b1`).
fn parse_pos_option(option: &str, cmd: &mut crate::servo::PositionCommand) -> Result<(), String> {
    let mut chars = option.chars();
    let letter = chars.next().unwrap_or(' ');
    let value = parse_number(chars.as_str())
        .ok_or_else(|| format!("option '{}' needs a number after its letter, e.g. p0.5", clip(option)))?;
    match letter {
        'p' => cmd.kp_scale = value,
        'd' => cmd.kd_scale = value,
        'f' => cmd.feedforward = value,
        't' => cmd.timeout_s = value,
        'v' => cmd.velocity_limit = value,
        'a' => cmd.accel_limit = value,
        'b' => cmd.ignore_bounds = value,
        's' => cmd.stop_position = value,
        'c' | 'o' => {
            return Err(format!(
                "option '{letter}' injects a fixed {} into the phases, which the simulator does not model",
                if letter == 'c' { "current" } else { "voltage" }
            ))
        }
        _ => {
            return Err(format!(
                "unknown option '{letter}'; d pos takes p (kp scale), d (kd scale), f (feedforward), t (timeout), v (velocity limit), a (accel limit), b (ignore bounds), s (stop position)"
            ))
        }
    }
    Ok(())
}

/// At most 40 characters of user text, for error messages.
fn clip(text: &str) -> String {
    let mut out: String = text.chars().take(40).collect();
    if text.chars().count() > 40 {
        out.push_str("...");
    }
    out
}
