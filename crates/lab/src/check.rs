//! The ranges of the lab's numbers and what its output paths may be, and the one-sentence
//! refusals of everything else.
//!
//! The command line ([`crate::cli`]) checks every flag with these before anything is
//! measured; the experiment functions (and the output writers) check their own inputs with
//! the same functions, so a library caller gets the same refusal. Each refusal names the flag
//! as the user typed it and what to give, e.g. "--rate NaN is out of range: give
//! 0.1..=100000 (Hz)".
//!
//! What it must never do: accept NaN, an infinity, zero where zero means nothing, a value
//! that overflows later arithmetic (µs → ns, samples → memory), or an output path whose
//! writing would replace an existing file without `--force`, or anything but a regular file.

use std::fmt::Display;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

/// Samples one run may hold: 8 bytes each, 80 MB at most, so a typo cannot exhaust memory.
pub const MAX_SAMPLES: usize = 10_000_000;
/// Samples one command may hold over all its runs (320 MB).
pub const MAX_SAMPLES_IN_ALL: usize = 40_000_000;
/// Wakeup periods, µs: below 10 µs every period overruns; above 1 s it is not a control loop.
pub const PERIOD_US: RangeInclusive<u64> = 10..=1_000_000;
/// Cycle rates, Hz: the range `rtloop run` accepts.
pub const RATE_HZ: RangeInclusive<f64> = 0.1..=100_000.0;
/// SCHED_DEADLINE periods, µs: the kernel's default limits (sched_deadline_period_min_us is
/// 100, sched_deadline_period_max_us about 4.2 s).
pub const DEADLINE_PERIOD_US: RangeInclusive<u64> = 100..=4_000_000;
/// SCHED_DEADLINE runtime floor, µs: the kernel wants at least 1024 ns.
pub const DEADLINE_MIN_RUNTIME_US: u64 = 2;
/// Largest UDP payload over IPv4 (65535 − 20 bytes IP header − 8 bytes UDP header).
pub const MAX_UDP_PAYLOAD: usize = 65_507;
/// UDP payload sizes, bytes.
pub const UDP_SIZE: RangeInclusive<usize> = 1..=MAX_UDP_PAYLOAD;
/// The largest message of the serial experiment: bigger ones would not fit the pty buffers in
/// one piece and measure flow control rather than turnaround.
pub const MAX_SERIAL_SIZE: usize = 4096;
/// Message sizes of the serial experiment, bytes.
pub const SERIAL_SIZE: RangeInclusive<usize> = 1..=MAX_SERIAL_SIZE;
/// Lifetime of the hidden echo server, seconds: up to a week.
pub const SERVER_MAX_SECONDS: f64 = 7.0 * 24.0 * 3600.0;

/// One refused flag or argument: what the lab checks before anything is measured. Its
/// Display is the one sentence the user sees — with the refusal it wraps, if any, which is
/// its `source()` ([`rtloop_output::sentence`] joins them); the variants carry what was wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// A number outside its range (`range` as the user should read it, unit included).
    #[error("{flag} {value} is out of range: give {range}")]
    OutOfRange {
        /// The flag as the user typed it, e.g. `--rate`.
        flag: String,
        /// The value given.
        value: String,
        /// What to give instead, e.g. `0.1..=100000 (Hz)`.
        range: String,
    },
    /// `--samples` × runs would hold more than [`MAX_SAMPLES_IN_ALL`] samples.
    #[error(
        "--samples {samples} for {} ({runs_are}) is {} in all: keep --samples × runs within {MAX_SAMPLES_IN_ALL}",
        runs_text(.runs),
        total_text(.samples, .runs)
    )]
    TooManySamples {
        /// Samples per run.
        samples: usize,
        /// Runs the command makes.
        runs: usize,
        /// What the runs are, e.g. `--sizes × --methods`.
        runs_are: String,
    },
    /// `--busy-wait-us` for an experiment that never sleeps until a deadline.
    #[error(
        "--busy-wait-us applies to wakeup and cycle only (the experiments that sleep until a deadline): drop it for {experiment}"
    )]
    BusyWaitNotApplicable {
        /// The experiment, e.g. `udp-echo`.
        experiment: String,
    },
    /// An empty list where at least one item is needed.
    #[error("{flag} is empty: give {give}")]
    EmptyList {
        /// The flag.
        flag: String,
        /// What to give, e.g. `at least one of blocking, epoll, busy-poll`.
        give: String,
    },
    /// A list names one item twice.
    #[error("{flag} lists {item} twice: give each once")]
    Duplicate {
        /// The flag.
        flag: String,
        /// The repeated item.
        item: String,
    },
    /// An item of a list flag that is not one of its names. The item's refusal (the `source`)
    /// stays in the sentence: library callers, such as those of `udp::serve_echo`, read the
    /// refused name there.
    #[error("{flag}: {source}")]
    InList {
        /// The flag.
        flag: String,
        /// Why the item was refused.
        source: Box<CheckError>,
    },
    /// A method name an experiment does not know.
    #[error("unknown {kind} method '{given}': expected {expected}")]
    UnknownMethod {
        /// Which methods: `event`, `serial` or `receive`.
        kind: &'static str,
        /// The name given.
        given: String,
        /// The names it knows, as a sentence.
        expected: &'static str,
    },
    /// A `--policy` that is not a scheduling policy.
    #[error("--policy")]
    Policy(#[source] rtloop_rt::UnknownName),
    /// `--priority` with a policy that has no real-time priority.
    #[error("--priority {priority} needs --policy fifo or rr: {policy} has no real-time priority")]
    PriorityNeedsRealtime {
        /// The priority given.
        priority: i32,
        /// The kernel's name of the policy given.
        policy: &'static str,
    },
    /// A SCHED_DEADLINE flag without `--policy deadline`.
    #[error("{flag} applies only with --policy deadline")]
    DeadlineOnly {
        /// The flag.
        flag: &'static str,
    },
    /// `--cpu` that does not parse as a CPU list.
    #[error("--cpu '{list}' is not a CPU list: give e.g. 1 or 0,1 or 0-3")]
    NotACpuList {
        /// The text given.
        list: String,
    },
    /// `--cpu` names a CPU outside this process's affinity.
    #[error(
        "--cpu {cpu} is not a CPU this process may run on: give CPUs from {}",
        rtloop_rt::setup::format_cpu_list(.allowed)
    )]
    CpuNotAllowed {
        /// The CPU named.
        cpu: usize,
        /// The CPUs this process may run on.
        allowed: Vec<usize>,
    },
    /// The real-time settings themselves are wrong.
    #[error("{0}")]
    Rt(#[from] rtloop_rt::setup::RtError),
    /// `--transport` is not a bus address.
    #[error("--transport")]
    Transport(#[source] rtloop_io::uri::UriError),
    /// A `--servos` id outside 1..=127 (or not a number).
    #[error("--servos '{text}': servo id '{id}' is out of range: give ids in 1..=127, e.g. 1-12 or 1,2,5-7")]
    ServoId {
        /// The whole `--servos` text.
        text: String,
        /// The id that is wrong.
        id: String,
    },
    /// A `--servos` range whose upper end is below its lower one.
    #[error("--servos '{text}': the range '{range}' runs backwards: give the lower id first")]
    ServoRangeBackwards {
        /// The whole `--servos` text.
        text: String,
        /// The range.
        range: String,
    },
    /// `--servos` names no id at all.
    #[error("--servos '{text}' names no servo: give ids in 1..=127, e.g. 1-12 or 1,2,5-7")]
    NoServos {
        /// The whole `--servos` text.
        text: String,
    },
    /// More `--load` workers than this machine can carry (`max` 0: none at all).
    #[error("--load {workers} is more than this machine can carry{}", load_advice(.max, .why))]
    TooMuchLoad {
        /// Workers asked for.
        workers: usize,
        /// The most this machine carries.
        max: usize,
        /// What limits it (CPUs or memory), as a clause.
        why: String,
    },
    /// `--bind` is not a socket address.
    #[error("--bind '{bind}' is not an address like 127.0.0.1:9000")]
    BindAddress {
        /// The text given.
        bind: String,
        /// Why it does not parse.
        source: std::net::AddrParseError,
    },
    /// The echo server would answer outside loopback without `--allow-remote`.
    #[error("refusing to serve on {addr}, which other hosts can reach: bind 127.0.0.1 or pass --allow-remote")]
    RemoteBind {
        /// The address.
        addr: std::net::SocketAddr,
    },
    /// An output file name without the extension of what is written.
    #[error(
        "{flag} {}: the file is written as {}; give a name ending in .{extension}",
        .path.display(),
        .extension.to_uppercase()
    )]
    OutputExtension {
        /// The flag.
        flag: String,
        /// The path given.
        path: PathBuf,
        /// The extension required.
        extension: String,
    },
    /// An output path that is a directory.
    #[error("{flag} {} is a directory: give a file name", .path.display())]
    OutputIsDirectory {
        /// The flag.
        flag: String,
        /// The path given.
        path: PathBuf,
    },
    /// An output path that is something the lab never replaces.
    #[error(
        "{flag} {} is {kind}, which the lab never replaces (not even with --force): give the path of a new or regular file",
        .path.display()
    )]
    OutputNeverReplaced {
        /// The flag.
        flag: String,
        /// The path given.
        path: PathBuf,
        /// What it is: `a symbolic link`, `a device node`, `a FIFO`, `a socket`, …
        kind: &'static str,
    },
    /// An output path that exists, without `--force`.
    #[error("{flag} {} already exists: give another path, or --force to replace it", .path.display())]
    OutputExists {
        /// The flag.
        flag: String,
        /// The path given.
        path: PathBuf,
    },
    /// An output path that cannot even be looked at.
    #[error("{flag} {}: cannot look at it", .path.display())]
    OutputUnreadable {
        /// The flag.
        flag: String,
        /// The path given.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An output path in a directory that does not exist.
    #[error("{flag} {}: the directory {} does not exist", .path.display(), .dir.display())]
    OutputNoDirectory {
        /// The flag.
        flag: String,
        /// The path given.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
    },
    /// `--service` that cannot be a systemd unit name.
    #[error("--service '{name}' is not a service name: give the unit's name, e.g. rtloop (for rtloop.service)")]
    ServiceName {
        /// The text given.
        name: String,
    },
    /// `--root` that is not a directory.
    #[error("--root {}: not a directory: give the directory holding the machine's proc/ and sys/", .path.display())]
    NotADirectory {
        /// The path given.
        path: PathBuf,
    },
    /// `--csv` and `--plot` name the same file.
    #[error("--csv and --plot both name {}: give each its own file", .path.display())]
    SameOutput {
        /// The path both name.
        path: PathBuf,
    },
}

fn runs_text(runs: &usize) -> String {
    crate::wording::count(*runs as u64, "run", "runs")
}

fn total_text(samples: &usize, runs: &usize) -> String {
    crate::wording::count(samples.saturating_mul(*runs) as u64, "sample", "samples")
}

/// The end of the `--load` refusal: what to give instead, or to drop it when nothing fits.
fn load_advice(max: &usize, why: &str) -> String {
    if *max == 0 {
        format!(" ({why}): run without --load")
    } else {
        format!(": give --load 0..={max} ({why})")
    }
}

/// "FLAG VALUE is out of range: give RANGE".
pub fn out_of_range(flag: &str, value: impl Display, range: impl Display) -> CheckError {
    CheckError::OutOfRange { flag: flag.to_string(), value: value.to_string(), range: range.to_string() }
}

/// `value` within `range` (inclusive), or the refusal; `unit` follows the range, e.g. "(us)".
pub fn in_range<T: PartialOrd + Display>(
    flag: &str,
    value: T,
    range: &RangeInclusive<T>,
    unit: &str,
) -> Result<T, CheckError> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(out_of_range(flag, &value, format!("{}..={} {unit}", range.start(), range.end()).trim_end()))
    }
}

/// Samples per run: 1..=[`MAX_SAMPLES`].
pub fn samples(flag: &str, samples: usize) -> Result<usize, CheckError> {
    in_range(flag, samples, &(1..=MAX_SAMPLES), "samples per run")
}

/// All the samples a command holds at once: `samples` × `runs` ≤ [`MAX_SAMPLES_IN_ALL`].
pub fn samples_in_all(samples: usize, runs: usize, runs_are: &str) -> Result<(), CheckError> {
    if samples.saturating_mul(runs) <= MAX_SAMPLES_IN_ALL {
        Ok(())
    } else {
        Err(CheckError::TooManySamples { samples, runs, runs_are: runs_are.to_string() })
    }
}

/// The wakeup period, µs.
pub fn period_us(flag: &str, period_us: u64) -> Result<u64, CheckError> {
    in_range(flag, period_us, &PERIOD_US, "(us)")
}

/// A spin before each deadline: at most the period.
pub fn busy_wait_us(busy_wait_us: u64, period_us: u64) -> Result<u64, CheckError> {
    in_range("--busy-wait-us", busy_wait_us, &(0..=period_us), "(us, at most the period)")
}

/// `--busy-wait-us` for an experiment that never sleeps until a deadline: only 0.
pub fn no_busy_wait(busy_wait_us: u64, experiment: &str) -> Result<(), CheckError> {
    if busy_wait_us == 0 {
        Ok(())
    } else {
        Err(CheckError::BusyWaitNotApplicable { experiment: experiment.to_string() })
    }
}

/// A cycle rate, Hz: finite, within [`RATE_HZ`].
pub fn rate_hz(flag: &str, rate: f64) -> Result<f64, CheckError> {
    // NaN fails `contains`, and so do both infinities.
    in_range(flag, rate, &RATE_HZ, "(Hz)")
}

/// UDP payload sizes: at least one, each within [`UDP_SIZE`], each once.
pub fn udp_sizes(flag: &str, sizes: &[usize]) -> Result<(), CheckError> {
    if sizes.is_empty() {
        return Err(CheckError::EmptyList {
            flag: flag.to_string(),
            give: format!("at least one UDP payload size in 1..={}", UDP_SIZE.end()),
        });
    }
    for &size in sizes {
        in_range(flag, size, &UDP_SIZE, "(bytes)")?;
    }
    each_once(flag, sizes)
}

/// A list in which nothing appears twice.
pub fn each_once<T: PartialEq + Display>(flag: &str, items: &[T]) -> Result<(), CheckError> {
    for (i, item) in items.iter().enumerate() {
        if items[..i].contains(item) {
            return Err(CheckError::Duplicate { flag: flag.to_string(), item: item.to_string() });
        }
    }
    Ok(())
}

/// The serial message size, bytes.
pub fn serial_size(flag: &str, size: usize) -> Result<usize, CheckError> {
    in_range(flag, size, &SERIAL_SIZE, "(bytes)")
}

/// The echo server's lifetime, seconds: more than 0, at most [`SERVER_MAX_SECONDS`].
pub fn server_seconds(flag: &str, seconds: f64) -> Result<f64, CheckError> {
    if seconds > 0.0 && seconds <= SERVER_MAX_SECONDS {
        Ok(seconds)
    } else {
        Err(out_of_range(flag, seconds, format!("more than 0 and at most {SERVER_MAX_SECONDS} (seconds)")))
    }
}

/// An output file the experiment will write when it is done: its directory must exist now,
/// and the path must be free — or, with `force` (`--force`), a regular file to replace — so a
/// typo or an occupied name fails before the measurement rather than after it. Nothing but a
/// regular file is ever replaced, `force` or not: not a symbolic link (which the user may
/// mean to keep), a device node, a FIFO, a socket or a directory. `extension`, when given, is
/// required (case-insensitive). [`crate::report::create_output`] checks again when it writes.
pub fn output_file(flag: &str, path: &Path, extension: Option<&str>, force: bool) -> Result<(), CheckError> {
    use std::os::unix::fs::FileTypeExt;
    if let Some(ext) = extension {
        let matches = path.extension().and_then(|e| e.to_str()).is_some_and(|e| e.eq_ignore_ascii_case(ext));
        if !matches {
            return Err(CheckError::OutputExtension {
                flag: flag.to_string(),
                path: path.to_path_buf(),
                extension: ext.to_string(),
            });
        }
    }
    // Links not followed: what is at the path itself is what a rename would replace.
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            let kind = meta.file_type();
            if kind.is_dir() {
                return Err(CheckError::OutputIsDirectory { flag: flag.to_string(), path: path.to_path_buf() });
            }
            let never_replaced = if kind.is_symlink() {
                Some("a symbolic link")
            } else if kind.is_char_device() || kind.is_block_device() {
                Some("a device node")
            } else if kind.is_fifo() {
                Some("a FIFO")
            } else if kind.is_socket() {
                Some("a socket")
            } else if !kind.is_file() {
                Some("not a regular file")
            } else {
                None
            };
            if let Some(kind) = never_replaced {
                return Err(CheckError::OutputNeverReplaced { flag: flag.to_string(), path: path.to_path_buf(), kind });
            }
            if !force {
                return Err(exists_without_force(flag, path));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(CheckError::OutputUnreadable { flag: flag.to_string(), path: path.to_path_buf(), source })
        }
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(CheckError::OutputNoDirectory {
            flag: flag.to_string(),
            path: path.to_path_buf(),
            dir: parent.to_path_buf(),
        });
    }
    Ok(())
}

/// `--csv` and `--plot` must name different files (the second would replace the first).
pub fn distinct_outputs(csv: Option<&Path>, plot: Option<&Path>) -> Result<(), CheckError> {
    match (csv, plot) {
        (Some(csv), Some(plot)) if csv == plot => Err(CheckError::SameOutput { path: csv.to_path_buf() }),
        _ => Ok(()),
    }
}

/// A process id given on the command line (`--parent-pid`): 1 up to the kernel's pid type.
pub fn pid(flag: &str, pid: u32) -> Result<libc::pid_t, CheckError> {
    libc::pid_t::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| out_of_range(flag, pid, format!("1..={} (a process id)", libc::pid_t::MAX)))
}

/// `--service`: a systemd service's name (`rtloop`, `rtloop.service`, `robot@left`): letters, digits and
/// `:-_.@\`, at most 255 characters, not empty.
pub fn service_name(name: &str) -> Result<(), CheckError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name.chars().all(|c| c.is_ascii_alphanumeric() || ":-_.@\\".contains(c))
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(CheckError::ServiceName { name: name.to_string() })
    }
}

/// The directory `--root` names.
pub fn root_directory(path: &Path) -> Result<(), CheckError> {
    if path.is_dir() {
        Ok(())
    } else {
        Err(CheckError::NotADirectory { path: path.to_path_buf() })
    }
}

/// The refusal of an output path that exists when `--force` was not given.
pub fn exists_without_force(flag: &str, path: &Path) -> CheckError {
    CheckError::OutputExists { flag: flag.to_string(), path: path.to_path_buf() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_carries_the_flag_the_value_and_what_to_give() {
        let e = rate_hz("--rate", f64::NAN).unwrap_err();
        let CheckError::OutOfRange { flag, value, range } = &e else { panic!("{e:?}") };
        assert_eq!((flag.as_str(), value.as_str(), range.as_str()), ("--rate", "NaN", "0.1..=100000 (Hz)"));
        assert_eq!(e.to_string(), "--rate NaN is out of range: give 0.1..=100000 (Hz)");

        let e = samples_in_all(10_000_000, 5, "--methods").unwrap_err();
        assert!(
            matches!(&e, CheckError::TooManySamples { samples: 10_000_000, runs: 5, runs_are } if runs_are == "--methods")
        );

        let e = crate::cycle::parse_servo_ids("1,5-2").unwrap_err();
        assert!(matches!(&e, CheckError::ServoRangeBackwards { range, .. } if range == "5-2"), "{e:?}");
        assert_eq!(e.to_string(), "--servos '1,5-2': the range '5-2' runs backwards: give the lower id first");
    }

    #[test]
    fn an_occupied_output_path_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        std::fs::write(&path, "x").unwrap();
        let e = output_file("--csv", &path, None, false).unwrap_err();
        assert!(matches!(&e, CheckError::OutputExists { flag, path: p } if flag == "--csv" && *p == path), "{e:?}");
        let e = crate::Error::from(e);
        assert!(e.to_string().ends_with("already exists: give another path, or --force to replace it"), "{e}");
    }
}
