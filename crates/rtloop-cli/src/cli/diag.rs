//! `rtloop servo --console | --dump-config | --restore-config FILE`: the servo's diagnostic
//! console (stream channel 1) over any transport, as moteus_tool offers it.
//!
//! What it is for: `--console` sends each line of standard input as a command and prints each
//! answer as it comes (lines, the `OK` or `ERR …` that ends them, a `conf get` value, or a
//! binary block as its header line and the bytes in hex) — interactively or from a pipe;
//! `--dump-config` prints `conf enumerate` exactly as the configuration file format is
//! (`key value` lines); `--restore-config FILE` sends `conf set LINE` for each line of FILE
//! that is neither blank nor a `#` comment, lists the lines the servo refused with its `ERR`
//! text, then stores the rest with `conf write`.
//!
//! Exit status, as for every device command of `rtloop servo` (see [`crate::cli::servo`]): 0
//! when every command was answered and accepted; 1 when the servo refused one (its `ERR` text
//! is printed and quoted on stderr), stopped answering, or the bus failed; 2 for a mistake on
//! the command line, a FILE that cannot be read, or a device that cannot be opened.
//!
//! What it must never do: wait for a servo without a deadline (the client times out every
//! poll and every answer); send a line it has not checked (line ends inside, overlong, not
//! text — refused here with one sentence); read a FILE that is not a regular file (a FIFO is
//! never waited on) or larger than [`MAX_RESTORE_BYTES`]; or exit 0 when anything was refused.

use crate::cli::servo::Outcome;
use rtloop::frame::hex;
use rtloop::numbers::{millis_from_user, MAX_TIMEOUT_MS};
use rtloop_io::diagnostic::{ConsoleAnswer, DiagError, DiagnosticClient, DiagnosticOptions, MAX_COMMAND};
use rtloop_io::{BusUri, MonotonicClock, Transport};
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// The largest configuration file `--restore-config` reads, bytes.
pub const MAX_RESTORE_BYTES: u64 = 1024 * 1024;

/// Which console action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiagAction {
    /// Standard input lines are commands.
    Console,
    /// Print `conf enumerate`.
    DumpConfig,
    /// Set every line of the file, then `conf write`.
    RestoreConfig(PathBuf),
}

/// What was asked.
#[derive(Debug, Clone)]
pub struct DiagRequest {
    /// The servo's bus.
    pub uri: BusUri,
    /// Its id.
    pub id: u8,
    /// What to do.
    pub action: DiagAction,
    /// How long one poll waits for its answer, ms.
    pub timeout_ms: f64,
    /// fdcanusb: CRC suffix on our lines.
    pub crc: bool,
}

type Client = DiagnosticClient<Box<dyn Transport>, MonotonicClock>;

/// Run it. `Err`: a mistake on the command line, an unreadable FILE or a device that cannot be
/// opened (exit 2); an [`Outcome`] with a failure: the servo refused something, went silent,
/// or the bus failed (exit 1).
pub fn run(req: &DiagRequest) -> Result<Outcome, String> {
    let timeout = millis_from_user("--timeout-ms", req.timeout_ms, MAX_TIMEOUT_MS).map_err(|e| e.to_string())?;
    // Read the file before touching the servo: a mistake in it must not leave half a
    // configuration behind.
    let restore = match &req.action {
        DiagAction::RestoreConfig(path) => Some(read_restore_file(path)?),
        _ => None,
    };
    let timeout_ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    let options = DiagnosticOptions {
        reply_timeout_ns: timeout_ns,
        answer_timeout_ns: timeout_ns.saturating_mul(4).max(2_000_000_000),
        ..Default::default()
    };
    let open = rtloop_io::open::OpenOptions { fdcanusb_crc: req.crc, ..Default::default() };
    let transport =
        rtloop_simrobot::open_bus(&req.uri, &[req.id], open, Default::default()).map_err(|e| e.to_string())?;
    let mut client = DiagnosticClient::new(transport, MonotonicClock::default(), req.id, options)
        .map_err(|e| format!("--id: {e}"))?;
    // Whatever an earlier client left unread is not an answer to us.
    if let Err(e) = client.discard_pending() {
        return Ok(Outcome { stdout: String::new(), failure: Some(e.to_string()) });
    }
    match &req.action {
        DiagAction::Console => console(&mut client),
        DiagAction::DumpConfig => Ok(match client.command("conf enumerate") {
            Ok(lines) => Outcome { stdout: lines.join("\n"), failure: None },
            Err(e) => Outcome { stdout: String::new(), failure: Some(e.to_string()) },
        }),
        DiagAction::RestoreConfig(path) => Ok(restore_config(&mut client, path, &restore.unwrap_or_default())),
    }
}

/// The settings of a `--restore-config` file: (1-based line number, `key value`).
fn read_restore_file(path: &Path) -> Result<Vec<(usize, String)>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display();
    // O_NONBLOCK: a FIFO given by mistake is refused below instead of waited on.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("--restore-config {shown}: cannot open it: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("--restore-config {shown}: cannot read it: {e}"))?;
    if !meta.is_file() {
        return Err(format!("--restore-config {shown} is not a regular file; give a file written by --dump-config"));
    }
    if meta.len() > MAX_RESTORE_BYTES {
        return Err(format!(
            "--restore-config {shown} is {} bytes, more than a configuration can be ({MAX_RESTORE_BYTES}); give a file written by --dump-config",
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_RESTORE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("--restore-config {shown}: cannot read it: {e}"))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("--restore-config {shown} is not text; give a file written by --dump-config"))?;
    Ok(text
        .lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.trim().to_string()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
        .collect())
}

/// `conf set` every setting, then `conf write`; report what was refused.
fn restore_config(client: &mut Client, path: &Path, settings: &[(usize, String)]) -> Outcome {
    let shown = path.display();
    let mut refused = Vec::new();
    let mut set = 0usize;
    for (line_no, setting) in settings {
        match client.command(&format!("conf set {setting}")) {
            Ok(_) => set += 1,
            Err(DiagError::Refused { message, .. }) => {
                refused.push(format!("{shown}:{line_no}: {setting}: ERR {message}"))
            }
            Err(DiagError::BadCommand { why, .. }) => refused.push(format!("{shown}:{line_no}: not sent: {why}")),
            Err(e) => {
                let mut stdout =
                    format!("{set} of {} settings were set before the servo stopped answering", settings.len());
                for r in &refused {
                    stdout.push('\n');
                    stdout.push_str(r);
                }
                return Outcome { stdout, failure: Some(format!("{e}; nothing was stored (conf write was not sent)")) };
            }
        }
    }
    let id = client.id();
    let mut stdout = format!("set {set} of {} settings from {shown} on servo {id}", settings.len());
    let stored = client.command("conf write");
    match &stored {
        Ok(_) => stdout.push_str(" and stored them (conf write)"),
        Err(_) => stdout.push_str("; they were not stored"),
    }
    if !refused.is_empty() {
        stdout.push_str(&format!("; refused {}:", refused.len()));
        for r in &refused {
            stdout.push('\n');
            stdout.push_str(r);
        }
    }
    let failure = match (stored, refused.len()) {
        (Err(e), _) => Some(e.to_string()),
        (Ok(_), 0) => None,
        (Ok(_), n) => Some(format!(
            "servo {id} refused {n} of the {} settings in {shown} (listed above with its ERR text); fix or remove those lines and restore again",
            settings.len()
        )),
    };
    Outcome { stdout, failure }
}

/// Read one line of at most `limit` bytes into `line` (without its `\n`); the rest of a longer
/// line is skipped. `Ok(None)` at the end of input, else whether the line was cut.
fn read_bounded_line(input: &mut impl BufRead, line: &mut Vec<u8>, limit: usize) -> std::io::Result<Option<bool>> {
    line.clear();
    let mut overlong = false;
    let mut any = false;
    loop {
        let buf = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(any.then_some(overlong));
        }
        any = true;
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(end) => (&buf[..end], Some(end + 1)),
            None => (buf, None),
        };
        let room = limit.saturating_sub(line.len());
        if chunk.len() > room {
            overlong = true;
        }
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = done.unwrap_or(buf.len());
        input.consume(used);
        if done.is_some() {
            return Ok(Some(overlong));
        }
    }
}

/// Standard input lines → commands; answers → standard output as they come.
fn console(client: &mut Client) -> Result<Outcome, String> {
    use crate::cli::console::{line as print, note};
    let stdin = std::io::stdin();
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(libc::STDIN_FILENO) } == 1 {
        note(format!(
            "rtloop servo: console of servo {} on {}: type commands (tel, conf, d), Ctrl-D to end",
            client.id(),
            client.transport().name()
        ));
    }
    let mut input = stdin.lock();
    let mut buf = Vec::new();
    let (mut sent, mut line_no) = (0usize, 0usize);
    let mut refusals: Vec<String> = Vec::new();
    loop {
        let overlong = match read_bounded_line(&mut input, &mut buf, MAX_COMMAND + 1) {
            Ok(Some(o)) => o,
            Ok(None) => break,
            Err(e) => return Err(format!("cannot read standard input: {e}")),
        };
        line_no += 1;
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        let Ok(text) = std::str::from_utf8(&buf) else {
            let msg = format!("line {line_no} of the input is not UTF-8 text; it was not sent");
            note(format!("rtloop servo: {msg}"));
            refusals.push(msg);
            continue;
        };
        let command = text.trim();
        if command.is_empty() {
            continue;
        }
        if overlong {
            let msg =
                format!("line {line_no} of the input is longer than {MAX_COMMAND} bytes; it was not sent (shorten it)");
            note(format!("rtloop servo: {msg}"));
            refusals.push(msg);
            continue;
        }
        sent += 1;
        match client.command_any(command) {
            Ok(ConsoleAnswer::Lines(lines)) => {
                for l in lines {
                    print(l)?;
                }
                print("OK")?;
            }
            Ok(ConsoleAnswer::Value(v)) => print(v)?,
            Ok(ConsoleAnswer::Block(b)) => {
                print(&b.header)?;
                print(format!("{} bytes: {}", b.data.len(), hex(&b.data)))?;
            }
            Err(DiagError::Refused { message, command, .. }) => {
                print(format!("ERR {message}"))?;
                refusals.push(format!("`{command}`: ERR {message}"));
            }
            Err(e @ DiagError::BadCommand { .. }) => {
                note(format!("rtloop servo: {e}"));
                refusals.push(e.to_string());
            }
            Err(e) => {
                return Ok(Outcome {
                    stdout: String::new(),
                    failure: Some(format!("{e} (after {} of the commands were answered)", sent - 1)),
                })
            }
        }
    }
    let failure = refusals.first().map(|first| {
        format!("servo {} refused {} of {} console lines (first: {first})", client.id(), refusals.len(), line_no)
    });
    Ok(Outcome { stdout: String::new(), failure })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_lines_cut_overlong_input_and_keep_going() {
        let text = format!("conf get id.id\r\n{}\nlast", "x".repeat(50));
        let mut input = std::io::BufReader::with_capacity(7, text.as_bytes());
        let mut line = Vec::new();
        assert_eq!(read_bounded_line(&mut input, &mut line, 20).unwrap(), Some(false));
        assert_eq!(line, b"conf get id.id\r");
        assert_eq!(read_bounded_line(&mut input, &mut line, 20).unwrap(), Some(true));
        assert_eq!(line.len(), 20);
        assert_eq!(read_bounded_line(&mut input, &mut line, 20).unwrap(), Some(false));
        assert_eq!(line, b"last");
        assert_eq!(read_bounded_line(&mut input, &mut line, 20).unwrap(), None);
    }

    #[test]
    fn restore_files_skip_blanks_and_comments_and_refuse_non_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.cfg");
        std::fs::write(&file, "# saved\n\nid.id 1\n  servo.pid_position.kp 4  \n").unwrap();
        assert_eq!(
            read_restore_file(&file).unwrap(),
            [(3, "id.id 1".to_string()), (4, "servo.pid_position.kp 4".to_string())]
        );
        let e = read_restore_file(dir.path()).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let e = read_restore_file(&dir.path().join("missing")).unwrap_err();
        assert!(e.contains("cannot open"), "{e}");
        std::fs::write(&file, [0xff, 0xfe, b'\n']).unwrap();
        assert!(read_restore_file(&file).unwrap_err().contains("not text"));
    }
}
