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
use std::path::Path;

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
/// UDP payload sizes, bytes (65535 − 20 bytes IP header − 8 bytes UDP header).
pub const UDP_SIZE: RangeInclusive<usize> = 1..=crate::udp::MAX_UDP_PAYLOAD;
/// Message sizes of the serial experiment, bytes.
pub const SERIAL_SIZE: RangeInclusive<usize> = 1..=crate::serial::MAX_SIZE;
/// Lifetime of the hidden echo server, seconds: up to a week.
pub const SERVER_MAX_SECONDS: f64 = 7.0 * 24.0 * 3600.0;

/// "FLAG VALUE is out of range: give RANGE".
pub fn out_of_range(flag: &str, value: impl Display, range: impl Display) -> String {
    format!("{flag} {value} is out of range: give {range}")
}

/// `value` within `range` (inclusive), or the refusal; `unit` follows the range, e.g. "(us)".
pub fn in_range<T: PartialOrd + Display>(
    flag: &str,
    value: T,
    range: &RangeInclusive<T>,
    unit: &str,
) -> Result<T, String> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(out_of_range(flag, &value, format!("{}..={} {unit}", range.start(), range.end()).trim_end()))
    }
}

/// Samples per run: 1..=[`MAX_SAMPLES`].
pub fn samples(flag: &str, samples: usize) -> Result<usize, String> {
    in_range(flag, samples, &(1..=MAX_SAMPLES), "samples per run")
}

/// All the samples a command holds at once: `samples` × `runs` ≤ [`MAX_SAMPLES_IN_ALL`].
pub fn samples_in_all(samples: usize, runs: usize, runs_are: &str) -> Result<(), String> {
    let total = samples.saturating_mul(runs);
    if total <= MAX_SAMPLES_IN_ALL {
        Ok(())
    } else {
        Err(format!(
            "--samples {samples} for {} ({runs_are}) is {} in all: keep --samples × runs within \
             {MAX_SAMPLES_IN_ALL}",
            crate::report::count(runs as u64, "run", "runs"),
            crate::report::count(total as u64, "sample", "samples"),
        ))
    }
}

/// The wakeup period, µs.
pub fn period_us(flag: &str, period_us: u64) -> Result<u64, String> {
    in_range(flag, period_us, &PERIOD_US, "(us)")
}

/// A spin before each deadline: at most the period.
pub fn busy_wait_us(busy_wait_us: u64, period_us: u64) -> Result<u64, String> {
    in_range("--busy-wait-us", busy_wait_us, &(0..=period_us), "(us, at most the period)")
}

/// `--busy-wait-us` for an experiment that never sleeps until a deadline: only 0.
pub fn no_busy_wait(busy_wait_us: u64, experiment: &str) -> Result<(), String> {
    if busy_wait_us == 0 {
        Ok(())
    } else {
        Err(format!(
            "--busy-wait-us applies to wakeup and cycle only (the experiments that sleep until a deadline): \
             drop it for {experiment}"
        ))
    }
}

/// A cycle rate, Hz: finite, within [`RATE_HZ`].
pub fn rate_hz(flag: &str, rate: f64) -> Result<f64, String> {
    // NaN fails `contains`, and so do both infinities.
    in_range(flag, rate, &RATE_HZ, "(Hz)")
}

/// UDP payload sizes: at least one, each within [`UDP_SIZE`], each once.
pub fn udp_sizes(flag: &str, sizes: &[usize]) -> Result<(), String> {
    if sizes.is_empty() {
        return Err(format!("{flag} is empty: give at least one UDP payload size in 1..={}", UDP_SIZE.end()));
    }
    for &size in sizes {
        in_range(flag, size, &UDP_SIZE, "(bytes)")?;
    }
    each_once(flag, sizes)
}

/// A list in which nothing appears twice.
pub fn each_once<T: PartialEq + Display>(flag: &str, items: &[T]) -> Result<(), String> {
    for (i, item) in items.iter().enumerate() {
        if items[..i].contains(item) {
            return Err(format!("{flag} lists {item} twice: give each once"));
        }
    }
    Ok(())
}

/// The serial message size, bytes.
pub fn serial_size(flag: &str, size: usize) -> Result<usize, String> {
    in_range(flag, size, &SERIAL_SIZE, "(bytes)")
}

/// The echo server's lifetime, seconds: more than 0, at most [`SERVER_MAX_SECONDS`].
pub fn server_seconds(flag: &str, seconds: f64) -> Result<f64, String> {
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
pub fn output_file(flag: &str, path: &Path, extension: Option<&str>, force: bool) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    if let Some(ext) = extension {
        let matches = path.extension().and_then(|e| e.to_str()).is_some_and(|e| e.eq_ignore_ascii_case(ext));
        if !matches {
            return Err(format!(
                "{flag} {}: the file is written as {}; give a name ending in .{ext}",
                path.display(),
                ext.to_uppercase()
            ));
        }
    }
    // Links not followed: what is at the path itself is what a rename would replace.
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            let kind = meta.file_type();
            if kind.is_dir() {
                return Err(format!("{flag} {} is a directory: give a file name", path.display()));
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
            if let Some(what) = never_replaced {
                return Err(format!(
                    "{flag} {} is {what}, which the lab never replaces (not even with --force): give the path of a \
                     new or regular file",
                    path.display()
                ));
            }
            if !force {
                return Err(exists_without_force(flag, path));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{flag} {}: cannot look at it: {e}", path.display())),
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(format!("{flag} {}: the directory {} does not exist", path.display(), parent.display()));
    }
    Ok(())
}

/// `--csv` and `--plot` must name different files (the second would replace the first).
pub fn distinct_outputs(csv: Option<&Path>, plot: Option<&Path>) -> Result<(), String> {
    match (csv, plot) {
        (Some(csv), Some(plot)) if csv == plot => {
            Err(format!("--csv and --plot both name {}: give each its own file", csv.display()))
        }
        _ => Ok(()),
    }
}

/// A process id given on the command line (`--parent-pid`): 1 up to the kernel's pid type.
pub fn pid(flag: &str, pid: u32) -> Result<libc::pid_t, String> {
    libc::pid_t::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| out_of_range(flag, pid, format!("1..={} (a process id)", libc::pid_t::MAX)))
}

/// The refusal of an output path that exists when `--force` was not given.
pub fn exists_without_force(flag: &str, path: &Path) -> String {
    format!("{flag} {} already exists: give another path, or --force to replace it", path.display())
}
