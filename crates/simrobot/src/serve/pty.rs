//! A simulated fdcanusb adapter on a pseudo-terminal: the device side of the fdcanusb text
//! protocol, served to any client that opens the pty (the moteus Python package, rtloop's own
//! fdcanusb transport and its diagnostic-console client, anything else that speaks
//! `can send` / `OK` / `rcv`).
//!
//! What it is for: [`PtyFdcanusbEndpoint::create`] opens a pty pair, puts it in raw mode and
//! links its `/dev/pts/N` at a path of the user's choosing. The server then reads the host's
//! `can send` lines, puts their frames on a [`SimBus`] and answers `OK` at once (a real
//! fdcanusb answers when the frame is queued for the bus, not when it has been sent), and
//! writes a `rcv` line for every frame the bus delivers towards the host. Whenever the host's
//! latest line carried a ` *XX` CRC suffix, every answer carries one too, because the moteus
//! client drops unsuffixed lines once it has switched checksums on.
//!
//! Whose link is it? The link path belongs to the user; the only thing `create` ever replaces
//! there is a *stale link of a simulator*, recognised like this:
//!
//! * it is a symlink whose target is exactly `/dev/pts/<number>` — the only form `create`
//!   writes (the pty slave's own name) — and
//! * the pty it was made for is gone: either `/dev/pts/<number>` no longer exists (devpts
//!   removes it when the last descriptor of the pty is closed; a running simulator holds both
//!   ends for its whole life, so no live process holds that pty), or the pty now at that
//!   number was created after the link was (its inode change time is later than the link's
//!   own modification time: the kernel has handed the number to a newer pty since).
//!
//! That is what a simulator killed without warning (SIGKILL, power loss) leaves behind.
//! Everything else is refused with a sentence that says why and is never touched: a regular
//! file or directory; a symlink to anywhere else, even a dangling one (the user's); and a link
//! to a pty that still exists and is not newer than the link — another running simulator, or
//! a program on that pty, named with its pid when `/proc` shows it. A stale link is removed
//! only if it still reads the same target just before, and the new link is made with
//! `symlink(2)`, which fails rather than overwrites if anything appeared meanwhile. When the
//! endpoint is dropped it removes the link only if the link still points at its own pty.
//!
//! What it must never do: allocate or block in [`Endpoint::service`] / [`Endpoint::deliver`]
//! (all buffers are reserved in `create`, the master is non-blocking, and answers the client
//! is not reading are dropped and counted); write part of a line (an answer is queued whole or
//! not at all); let the client's disconnect hang up the master (the server keeps the slave
//! open for its whole life, so the path stays valid between clients); or replace anything at
//! the link path but a stale link of a simulator, nor remove a link that no longer points at
//! its own pty.

use std::io::ErrorKind;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{self, FcntlArg, OFlag};
use nix::pty::PtyMaster;
use nix::sys::stat::Mode;
use nix::sys::termios::{self, SetArg};
use rtloop_proto::fdcanusb::{self, Line, LineError, MAX_LINE};
use rtloop_proto::CanFdFrame;
use rtloop_sim::SimBus;

use super::{Endpoint, EndpointCounters, EndpointError};
use rtloop_io::OpenError;

/// Bytes read from the master per `read` call. Any size works; this one takes a burst of a
/// dozen full-length `can send` lines in one call.
const READ_CHUNK: usize = 4096;

/// Answers waiting for the client to read them. Room for a few hundred `OK`s or a few dozen
/// full 64-byte `rcv` lines; a client that falls this far behind is not reading at all.
const OUTBOX_CAPACITY: usize = 16 * 1024;

/// What an oversized line gets; the line is discarded up to its newline first.
const ERR_LINE_TOO_LONG: &[u8] = b"line too long";
/// The moteus client looks for "checksum" in an `ERR` to switch its own suffix on.
const ERR_CHECKSUM: &[u8] = b"checksum mismatch";
const ERR_UNKNOWN_COMMAND: &[u8] = b"unknown command";
const ERR_QUEUE_FULL: &[u8] = b"queue full";

/// The device side of one simulated bus, served on a pseudo-terminal as an fdcanusb.
pub struct PtyFdcanusbEndpoint {
    master: PtyMaster,
    /// Held open for the endpoint's whole life: while any slave descriptor is open, a client
    /// closing the device does not hang up the master, and the pty (and its raw settings)
    /// survive until the next client opens it.
    _slave: OwnedFd,
    link_path: PathBuf,
    device_path: PathBuf,
    name: String,
    read_chunk: Box<[u8]>,
    line: LineAssembler,
    outbox: Outbox,
    /// The host's latest line carried a CRC suffix, so answers carry one.
    crc_mode: bool,
    counters: EndpointCounters,
    refused_by_bus: u64,
}

// By hand: the derived form would print every byte of the buffers.
impl std::fmt::Debug for PtyFdcanusbEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtyFdcanusbEndpoint")
            .field("link_path", &self.link_path)
            .field("device_path", &self.device_path)
            .field("crc_mode", &self.crc_mode)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl PtyFdcanusbEndpoint {
    /// Open a pty pair in raw mode and link its slave device at `link_path`.
    ///
    /// A stale link of a simulator already at `link_path` (see the module doc) is replaced;
    /// anything else there is refused and left alone, as is a path whose directory does not
    /// exist.
    pub fn create(link_path: &Path) -> Result<Self, OpenError> {
        let fail = |message: String| OpenError { uri: format!("fdcanusb:{}", link_path.display()), message };
        check_link_path(link_path).map_err(fail)?;

        let (master, slave, device_path) = open_raw_pty().map_err(fail)?;

        if let Err(e) = std::os::unix::fs::symlink(&device_path, link_path) {
            let message = if e.kind() == ErrorKind::AlreadyExists {
                format!("{} appeared while the link was being made; choose another path", link_path.display())
            } else {
                format!("cannot link {} to {}: {e}", link_path.display(), device_path.display())
            };
            return Err(fail(message));
        }

        Ok(PtyFdcanusbEndpoint {
            master,
            _slave: slave,
            link_path: link_path.to_path_buf(),
            device_path,
            name: format!("fdcanusb:{}", link_path.display()),
            read_chunk: vec![0u8; READ_CHUNK].into_boxed_slice(),
            line: LineAssembler::new(),
            outbox: Outbox::new(OUTBOX_CAPACITY),
            crc_mode: false,
            counters: EndpointCounters::default(),
            refused_by_bus: 0,
        })
    }

    /// The path clients open (the symlink).
    pub fn path(&self) -> &Path {
        &self.link_path
    }

    /// The pty slave the link points at, e.g. `/dev/pts/3`.
    pub fn device_path(&self) -> &Path {
        &self.device_path
    }

    /// `can send` lines answered `ERR queue full` because the bus's transmit queue was full.
    pub fn refused_by_bus(&self) -> u64 {
        self.refused_by_bus
    }

    /// Whether answers are currently written with the ` *XX` suffix.
    pub fn crc_mode(&self) -> bool {
        self.crc_mode
    }

    /// Handle one complete line (line ending removed) from the host.
    fn handle_line(&mut self, line_len: usize, bus: &mut SimBus, now_ns: u64) {
        let text = self.line.bytes(line_len);
        let trimmed = text.trim_ascii();
        if trimmed.is_empty() {
            // `\r\n` endings and blank lines are not commands; the firmware ignores them too.
            return;
        }
        // Decide the answer mode before parsing, so that a line with a suffix gets a suffixed
        // ERR even when the rest of it is malformed.
        self.crc_mode = match fdcanusb::split_crc(trimmed) {
            Ok((_, had_crc)) => had_crc,
            Err(_) => true,
        };
        let crc = self.crc_mode;
        match fdcanusb::parse_line(trimmed) {
            Ok(parsed) => match parsed.line {
                Line::CanSend(frame) => {
                    if bus.submit(&frame, now_ns).is_ok() {
                        self.counters.frames_in += 1;
                        self.answer(|out| fdcanusb::write_ok(crc, out));
                    } else {
                        self.refused_by_bus += 1;
                        self.answer(|out| fdcanusb::write_err(ERR_QUEUE_FULL, crc, out));
                    }
                }
                // A device answers device-side lines (`OK`, `rcv` …) like any other
                // command it does not implement.
                Line::Rcv(_) | Line::Ok | Line::Err(_) | Line::Other(_) => {
                    self.counters.protocol_errors += 1;
                    self.answer(|out| fdcanusb::write_err(ERR_UNKNOWN_COMMAND, crc, out));
                }
            },
            Err(e) => {
                self.counters.protocol_errors += 1;
                let reason = reason_for(e);
                self.answer(|out| fdcanusb::write_err(reason, crc, out));
            }
        }
    }

    /// Queue one answer line, or count it as dropped when the client has let the outbox fill.
    fn answer(&mut self, write: impl FnOnce(&mut [u8]) -> Result<usize, LineError>) {
        if !self.outbox.queue_with(write) {
            self.counters.dropped += 1;
        }
    }
}

/// Refuse a path we must not touch; remove a stale link of a simulator so the new one can take
/// its place (the rules are in the module doc).
fn check_link_path(link_path: &Path) -> Result<(), String> {
    if link_path.as_os_str().is_empty() {
        return Err("empty path; give the path the pty should be linked at".into());
    }
    if link_path.file_name().is_none() {
        return Err(format!("{} names no file; give a path such as /tmp/fdcanusb-sim", link_path.display()));
    }
    if let Some(dir) = link_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(format!("{} is not a directory", dir.display())),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(format!("directory {} does not exist", dir.display()));
            }
            Err(e) => return Err(format!("cannot use directory {}: {e}", dir.display())),
        }
    }
    let link_meta = match std::fs::symlink_metadata(link_path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("cannot check {}: {e}", link_path.display())),
    };
    if !link_meta.file_type().is_symlink() {
        return Err(format!("{} exists and is not a symlink; choose another path", link_path.display()));
    }
    let target =
        std::fs::read_link(link_path).map_err(|e| format!("cannot read the link {}: {e}", link_path.display()))?;
    match link_owner(&target, &link_meta) {
        LinkOwner::StaleSimulator => {}
        LinkOwner::NotASimulatorLink => {
            return Err(format!(
                "{} is a symlink to {} that rtloop sim did not make, so it is left alone: remove it yourself or choose another path",
                link_path.display(),
                target.display()
            ))
        }
        LinkOwner::LivePty => {
            let holder = match pty_holder(&target) {
                Some((pid, _)) if pid == std::process::id() => "this very process".to_string(),
                Some((pid, name)) => format!("{name} (pid {pid})"),
                None => "another program, perhaps another rtloop sim,".to_string(),
            };
            return Err(format!(
                "{} already links to {}, a pseudo-terminal that {holder} is using: stop that program or choose another path",
                link_path.display(),
                target.display()
            ));
        }
    }
    // Only the link we judged: if someone replaced it since, theirs stays.
    if std::fs::read_link(link_path).ok().as_deref() != Some(target.as_path()) {
        return Err(format!(
            "{} changed while it was being checked; try again or choose another path",
            link_path.display()
        ));
    }
    std::fs::remove_file(link_path).map_err(|e| format!("cannot replace the stale link {}: {e}", link_path.display()))
}

/// Who a symlink at the link path belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkOwner {
    /// A simulator's link whose pty is gone: safe to replace.
    StaleSimulator,
    /// A link to a pty that exists and is not newer than the link: someone is using it.
    LivePty,
    /// Anything else: the user's.
    NotASimulatorLink,
}

/// Apply the rules of the module doc to a symlink reading `target`, whose own metadata is
/// `link_meta`.
fn link_owner(target: &Path, link_meta: &std::fs::Metadata) -> LinkOwner {
    use std::os::unix::fs::MetadataExt;
    if !is_pty_slave_name(target) {
        return LinkOwner::NotASimulatorLink;
    }
    match std::fs::metadata(target) {
        Err(e) if e.kind() == ErrorKind::NotFound => LinkOwner::StaleSimulator,
        // A pty allocated after the link was made is not the one the link was made for.
        Ok(pty) if (pty.ctime(), pty.ctime_nsec()) > (link_meta.mtime(), link_meta.mtime_nsec()) => {
            LinkOwner::StaleSimulator
        }
        // Exists (or cannot be checked): assume someone holds it.
        _ => LinkOwner::LivePty,
    }
}

/// Whether `path` is exactly `/dev/pts/<decimal number>`.
fn is_pty_slave_name(path: &Path) -> bool {
    path.to_str()
        .and_then(|s| s.strip_prefix("/dev/pts/"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A process holding `device` open, as (pid, command name), if `/proc` shows one. Best
/// effort, for the message only: processes of other users cannot be inspected.
fn pty_holder(device: &Path) -> Option<(u32, String)> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else { continue };
        if fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == device)) {
            let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            let name = name.trim();
            return Some((pid, if name.is_empty() { "a process".to_string() } else { name.to_string() }));
        }
    }
    None
}

/// A new pty pair, both sides raw, the master non-blocking; and the slave's device path.
fn open_raw_pty() -> Result<(PtyMaster, OwnedFd, PathBuf), String> {
    let os = |what: &str, e: Errno| format!("{what}: {}", std::io::Error::from(e));
    // O_NOCTTY: the server must never acquire the pty as its controlling terminal.
    let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
        .map_err(|e| os("cannot open a pseudo-terminal (/dev/ptmx)", e))?;
    nix::pty::grantpt(&master).map_err(|e| os("grantpt", e))?;
    nix::pty::unlockpt(&master).map_err(|e| os("unlockpt", e))?;
    let device_path = PathBuf::from(nix::pty::ptsname_r(&master).map_err(|e| os("ptsname", e))?);
    let slave = fcntl::open(&device_path, OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| os(&format!("cannot open {}", device_path.display()), e))?;

    // The default line discipline echoes what the host writes back to it and turns `\n`
    // into `\r\n`; either would corrupt the protocol. The settings stay with the pty as long
    // as the slave is open, so a client that does not set its own modes still gets raw.
    for (side, fd) in [("slave", slave.as_fd()), ("master", master.as_fd())] {
        let mut modes = termios::tcgetattr(fd).map_err(|e| os(&format!("tcgetattr on the pty {side}"), e))?;
        termios::cfmakeraw(&mut modes);
        termios::tcsetattr(fd, SetArg::TCSANOW, &modes).map_err(|e| os(&format!("tcsetattr on the pty {side}"), e))?;
    }

    let flags = fcntl::fcntl(&master, FcntlArg::F_GETFL).map_err(|e| os("fcntl(F_GETFL)", e))?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl::fcntl(&master, FcntlArg::F_SETFL(flags)).map_err(|e| os("fcntl(F_SETFL, O_NONBLOCK)", e))?;
    Ok((master, slave, device_path))
}

/// The `ERR` text for a line the codec refused. Static, so answering allocates nothing; none
/// contains `*`, which `write_err` refuses.
fn reason_for(e: LineError) -> &'static [u8] {
    match e {
        LineError::BadCrc { .. } => ERR_CHECKSUM,
        LineError::TooLong => ERR_LINE_TOO_LONG,
        LineError::BadHex => b"bad hex data",
        LineError::OddHexDigits => b"odd number of hex digits",
        LineError::DataTooLong => b"data too long",
        LineError::BadId => b"bad id",
        LineError::BadFlag => b"bad flag",
        LineError::MissingField => b"missing field",
        // Empty, BufferTooSmall and BadText are not reachable for a non-blank line, and a
        // reason a later codec adds has no text here yet: answered like any other unknown input.
        _ => ERR_UNKNOWN_COMMAND,
    }
}

impl Endpoint for PtyFdcanusbEndpoint {
    fn name(&self) -> &str {
        &self.name
    }

    fn fd(&self) -> RawFd {
        self.master.as_raw_fd()
    }

    fn service(&mut self, bus: &mut SimBus, now_ns: u64) -> Result<(), EndpointError> {
        // Answers left over from last time go first, to keep them in order.
        self.outbox.flush(self.master.as_fd())?;
        loop {
            let n = match nix::unistd::read(&self.master, &mut self.read_chunk) {
                Ok(0) | Err(Errno::EAGAIN) => break,
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                // The master reports EIO only once no slave descriptor is open, which cannot
                // happen while we hold one; treat it as nothing to read.
                Err(Errno::EIO) => break,
                Err(e) => return Err(EndpointError::Io(e.into())),
            };
            for i in 0..n {
                let byte = self.read_chunk.get(i).copied().unwrap_or(b'\n');
                match self.line.push(byte) {
                    Pushed::Byte => {}
                    Pushed::Line(len) => self.handle_line(len, bus, now_ns),
                    Pushed::OverlongEnded => {
                        self.counters.protocol_errors += 1;
                        let crc = self.crc_mode;
                        self.answer(|out| fdcanusb::write_err(ERR_LINE_TOO_LONG, crc, out));
                    }
                }
            }
        }
        // The server flushes after delivering, so answers and replies leave together.
        Ok(())
    }

    fn deliver(&mut self, frame: &CanFdFrame, _now_ns: u64) -> Result<(), EndpointError> {
        let crc = self.crc_mode;
        if self.outbox.queue_with(|out| fdcanusb::write_rcv(frame, crc, out)) {
            self.counters.frames_out += 1;
        } else {
            self.counters.dropped += 1;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), EndpointError> {
        self.outbox.flush(self.master.as_fd())
    }

    fn counters(&self) -> EndpointCounters {
        self.counters
    }
}

impl Drop for PtyFdcanusbEndpoint {
    fn drop(&mut self) {
        // Only our own link: someone may have replaced it with theirs since.
        if std::fs::read_link(&self.link_path).is_ok_and(|target| target == self.device_path) {
            let _ = std::fs::remove_file(&self.link_path);
        }
    }
}

/// What one byte did to the line being assembled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pushed {
    /// Stored (or skipped, while discarding an overlong line).
    Byte,
    /// A line ending completed a line of this many bytes (possibly 0).
    Line(usize),
    /// A line ending closed a line that was too long and has been discarded.
    OverlongEnded,
}

/// Splits the host's byte stream into lines in a fixed buffer. `\r` and `\n` both end a line,
/// as in the fdcanusb firmware, so `\r\n` gives one line and one blank line.
#[derive(Debug)]
struct LineAssembler {
    buf: Box<[u8]>,
    len: usize,
    discarding: bool,
}

impl LineAssembler {
    fn new() -> Self {
        LineAssembler { buf: vec![0u8; MAX_LINE].into_boxed_slice(), len: 0, discarding: false }
    }

    fn push(&mut self, byte: u8) -> Pushed {
        if byte == b'\n' || byte == b'\r' {
            let len = std::mem::take(&mut self.len);
            return if std::mem::take(&mut self.discarding) { Pushed::OverlongEnded } else { Pushed::Line(len) };
        }
        if self.discarding {
            return Pushed::Byte;
        }
        match self.buf.get_mut(self.len) {
            Some(slot) => {
                *slot = byte;
                self.len += 1;
            }
            None => {
                self.discarding = true;
                self.len = 0;
            }
        }
        Pushed::Byte
    }

    /// The first `len` bytes: the line just completed.
    fn bytes(&self, len: usize) -> &[u8] {
        self.buf.get(..len).unwrap_or(&[])
    }
}

/// Answer lines waiting for the client, written whole or not at all.
#[derive(Debug)]
struct Outbox {
    buf: Box<[u8]>,
    len: usize,
}

impl Outbox {
    fn new(capacity: usize) -> Self {
        Outbox { buf: vec![0u8; capacity].into_boxed_slice(), len: 0 }
    }

    /// Let `write` put one line into the free space; false (and nothing queued) when it does
    /// not fit.
    fn queue_with(&mut self, write: impl FnOnce(&mut [u8]) -> Result<usize, LineError>) -> bool {
        let Some(free) = self.buf.get_mut(self.len..) else { return false };
        match write(free) {
            Ok(n) => {
                self.len += n;
                true
            }
            Err(_) => false,
        }
    }

    /// Write as much as the pty takes without blocking; keep the rest, in order.
    fn flush(&mut self, fd: BorrowedFd<'_>) -> Result<(), EndpointError> {
        let mut written = 0;
        while written < self.len {
            let pending = self.buf.get(written..self.len).unwrap_or(&[]);
            match nix::unistd::write(fd, pending) {
                Ok(0) | Err(Errno::EAGAIN) => break,
                Ok(n) => written += n,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    self.discard_front(written);
                    return Err(EndpointError::Io(e.into()));
                }
            }
        }
        self.discard_front(written);
        Ok(())
    }

    fn discard_front(&mut self, n: usize) {
        let n = n.min(self.len);
        self.buf.copy_within(n..self.len, 0);
        self.len -= n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn assembler_splits_lines_and_discards_overlong_ones() {
        let mut a = LineAssembler::new();
        let mut events = Vec::new();
        for &b in b"ab\r\n" {
            events.push(a.push(b));
        }
        assert_eq!(events, [Pushed::Byte, Pushed::Byte, Pushed::Line(2), Pushed::Line(0)]);
        for _ in 0..MAX_LINE + 5 {
            assert_eq!(a.push(b'x'), Pushed::Byte);
        }
        assert_eq!(a.push(b'\n'), Pushed::OverlongEnded);
        assert_eq!(a.push(b'y'), Pushed::Byte);
        assert_eq!(a.push(b'\n'), Pushed::Line(1));
        assert_eq!(a.bytes(1), b"y");
    }

    #[test]
    fn outbox_queues_whole_lines_only() {
        let mut o = Outbox::new(8);
        assert!(o.queue_with(|out| fdcanusb::write_ok(false, out)));
        assert_eq!(o.len, 3);
        // `ERR queue full\n` does not fit in the 5 bytes left: nothing is queued.
        assert!(!o.queue_with(|out| fdcanusb::write_err(ERR_QUEUE_FULL, false, out)));
        assert_eq!(o.len, 3);
        o.discard_front(2);
        assert_eq!(o.buf.get(..o.len), Some(&b"\n"[..]));
    }

    #[test]
    fn refuses_a_regular_file_and_a_missing_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("regular");
        std::fs::write(&file, b"x").unwrap();
        let err = check_link_path(&file).unwrap_err();
        assert!(err.contains("exists and is not a symlink"), "{err}");
        assert_eq!(std::fs::read(&file).unwrap(), b"x");
        let missing = dir.path().join(OsStr::new("no-such-dir")).join("bus");
        let err = check_link_path(&missing).unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
    }

    #[test]
    fn only_the_exact_pty_slave_form_counts_as_a_simulator_link() {
        for yes in ["/dev/pts/0", "/dev/pts/17"] {
            assert!(is_pty_slave_name(Path::new(yes)), "{yes}");
        }
        for no in ["/dev/pts/", "/dev/pts/ptmx", "/dev/pts/1/x", "dev/pts/1", "/dev/pts/../pts/1", "/tmp/victim"] {
            assert!(!is_pty_slave_name(Path::new(no)), "{no}");
        }
    }
}
