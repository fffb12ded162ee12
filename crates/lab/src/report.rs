//! What every experiment hands back, and how it is summarised, printed and exported.
//!
//! An experiment returns an [`Outcome`]: one [`Run`] of raw samples (nanoseconds) per
//! configuration it measured, plus the warnings the system gave (refused real-time settings,
//! missing tools). [`Summary::of`] turns samples into the figures the lab prints (exact
//! order statistics over all samples, not a histogram approximation), [`text_histogram`]
//! draws them as log-spaced buckets, [`render`] prints a whole outcome (with `--json`, the
//! last line is one JSON object) and [`write_csv`] exports the raw samples;
//! [`measure_on_thread`] runs a measurement beside the background load.
//! An outcome whose figures do not measure what was asked (a cycle experiment in which
//! replies were missing) carries a [`Outcome::failure`]: the report says so on its second
//! line and in the JSON, and the command exits 1.
//!
//! What it must never do: run on a measuring thread's hot path (everything here allocates),
//! drop a warning, present a failed measurement as a result, print anything after the JSON
//! line when JSON was asked for, or write an output over anything but a regular file the
//! user allowed it to replace (`--force`).

use crate::conditions::Conditions;
use crate::options::progress_bar;
use serde::Serialize;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

// Where the lab's users have always found them; defined below everything that uses them.
pub use crate::options::CommonOptions;
pub use crate::wording::count;

/// The samples of one configuration of an experiment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Run {
    /// What was measured, e.g. "wakeup 1000 us" or "epoll 64 B".
    pub label: String,
    /// Message size in bytes, for experiments that sweep sizes.
    pub size: Option<usize>,
    /// The method (receive or wait strategy), for experiments that compare methods.
    pub method: Option<String>,
    /// One latency per sample, ns.
    pub samples_ns: Vec<u64>,
}

/// Everything an experiment measured.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// The experiment's command name, e.g. "wakeup".
    pub experiment: String,
    /// One entry per configuration measured.
    pub runs: Vec<Run>,
    /// Refused settings and other things the reader must know to trust the figures.
    pub warnings: Vec<String>,
    /// What this experiment measured that the system conditions do not say, as key and value
    /// (e.g. `network`: `netns`, `commands`: `query-only`): printed on the head line and
    /// added to the JSON `conditions`.
    pub setup: Vec<(String, String)>,
    /// Counts the figures depend on (e.g. `expected_replies`, `missing_replies`), added to
    /// the JSON `conditions` as numbers.
    pub counts: Vec<(String, u64)>,
    /// Why the figures do not measure what was asked (e.g. replies were missing), as one
    /// sentence; `None` for a sound measurement. Printed under the head line, in the JSON
    /// (`failure`), and by the command on stderr before it exits 1.
    pub failure: Option<String>,
}

/// The figures printed for one run, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Summary {
    /// Smallest sample.
    pub min_us: f64,
    /// Arithmetic mean.
    pub mean_us: f64,
    /// Population standard deviation.
    pub std_us: f64,
    /// Median (nearest rank).
    pub p50_us: f64,
    /// 90th percentile (nearest rank).
    pub p90_us: f64,
    /// 99th percentile (nearest rank).
    pub p99_us: f64,
    /// 99.9th percentile (nearest rank).
    pub p999_us: f64,
    /// Largest sample.
    pub max_us: f64,
    /// Number of samples.
    pub samples: usize,
}

impl Summary {
    /// Summarise samples given in ns. Percentiles use the nearest-rank definition (the
    /// smallest sample with at least q of all samples at or below it), so every figure is a
    /// sample that actually occurred. All zeros for no samples.
    pub fn of(samples_ns: &[u64]) -> Summary {
        if samples_ns.is_empty() {
            return Summary::default();
        }
        let mut sorted = samples_ns.to_vec();
        sorted.sort_unstable();
        let n = sorted.len();
        let us = |ns: u64| ns as f64 / 1000.0;
        let rank = |q: f64| {
            let r = (q * n as f64).ceil() as usize;
            us(sorted[r.clamp(1, n) - 1])
        };
        // Sum in u128 so a long run of large samples cannot overflow.
        let sum: u128 = sorted.iter().map(|&v| v as u128).sum();
        let mean_ns = sum as f64 / n as f64;
        let var_ns2 = sorted.iter().map(|&v| (v as f64 - mean_ns).powi(2)).sum::<f64>() / n as f64;
        Summary {
            min_us: us(sorted[0]),
            mean_us: mean_ns / 1000.0,
            std_us: var_ns2.sqrt() / 1000.0,
            p50_us: rank(0.5),
            p90_us: rank(0.9),
            p99_us: rank(0.99),
            p999_us: rank(0.999),
            max_us: us(sorted[n - 1]),
            samples: n,
        }
    }
}

/// Bucket bounds within one decade, ×10^k µs: the R10 preferred numbers, so each bucket is
/// about 26 % wider than the previous one and a latency tail spanning decades stays readable.
const DECADE_STEPS: [f64; 10] = [1.0, 1.25, 1.6, 2.0, 2.5, 3.2, 4.0, 5.0, 6.3, 8.0];

/// One histogram bucket: samples in `[lo_ns, hi_ns)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Lower bound, ns (inclusive).
    pub lo_ns: u64,
    /// Upper bound, ns (exclusive).
    pub hi_ns: u64,
    /// Samples in the bucket.
    pub count: u64,
}

/// The lower bound (ns) of log bucket `i`. Bucket 0 is [0, 1 µs); bucket i ≥ 1 starts at
/// DECADE_STEPS[(i-1) % 10] × 10^((i-1)/10) µs.
fn bucket_lo_ns(i: usize) -> u64 {
    if i == 0 {
        return 0;
    }
    let step = DECADE_STEPS[(i - 1) % DECADE_STEPS.len()];
    let decade = 10f64.powi(((i - 1) / DECADE_STEPS.len()) as i32);
    (step * decade * 1000.0).round() as u64
}

/// The index of the log bucket holding `ns`.
fn bucket_index(ns: u64) -> usize {
    let mut i = 0;
    // At most ~100 buckets up to u64::MAX ns; a linear walk is simple and exact.
    while i < 200 && bucket_lo_ns(i + 1) <= ns {
        i += 1;
    }
    i
}

/// The log-spaced buckets from the one holding the smallest sample to the one holding the
/// largest, empty ones included (so gaps in the distribution show). Empty for no samples.
pub fn log_buckets(samples_ns: &[u64]) -> Vec<Bucket> {
    let (Some(&min), Some(&max)) = (samples_ns.iter().min(), samples_ns.iter().max()) else {
        return Vec::new();
    };
    let (first, last) = (bucket_index(min), bucket_index(max));
    let mut buckets: Vec<Bucket> =
        (first..=last).map(|i| Bucket { lo_ns: bucket_lo_ns(i), hi_ns: bucket_lo_ns(i + 1), count: 0 }).collect();
    for &s in samples_ns {
        buckets[bucket_index(s) - first].count += 1;
    }
    buckets
}

/// Format a µs value compactly: 3 significant decimals below 10 µs, fewer above.
fn fmt_us(us: f64) -> String {
    if us < 10.0 {
        format!("{us:.3}")
    } else if us < 1000.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

/// A text histogram of `samples_ns`: one line per log-spaced µs bucket, `[lo, hi) us  count
/// bar`, with bars scaled so the fullest bucket is `width` characters.
pub fn text_histogram(samples_ns: &[u64], width: usize) -> String {
    let buckets = log_buckets(samples_ns);
    let peak = buckets.iter().map(|b| b.count).max().unwrap_or(0);
    let mut out = String::new();
    for b in &buckets {
        let bar_len = if peak == 0 { 0 } else { (b.count as u128 * width as u128).div_ceil(peak as u128) as usize };
        let range = format!("[{}, {}) us", fmt_us(b.lo_ns as f64 / 1000.0), fmt_us(b.hi_ns as f64 / 1000.0));
        let _ = writeln!(out, "  {range:>22} {:>9} {}", b.count, "#".repeat(bar_len));
    }
    out
}

/// The summary of one run with its identity, as it appears in JSON.
#[derive(Serialize)]
struct RunJson<'a> {
    #[serde(flatten)]
    summary: Summary,
    label: &'a str,
    size: Option<usize>,
    method: Option<&'a str>,
}

/// Print an outcome: per run the label, the figures and a histogram, then the warnings. With
/// `json`, the last line is one JSON object: the summary fields of the single run, or a
/// `results` list of them for several runs, with `experiment`, `conditions` and `warnings`.
pub fn render(outcome: &Outcome, conditions: &Conditions, json: bool) -> String {
    let mut out = String::new();
    let setup: String = outcome.setup.iter().map(|(k, v)| format!(", {k} {v}")).collect();
    let _ = writeln!(out, "{} — {}{setup}", outcome.experiment, conditions.one_line());
    if let Some(failure) = &outcome.failure {
        // Before the figures, so nobody reads them first.
        let _ = writeln!(out, "FAILED: {failure}");
    }
    let summaries: Vec<Summary> = outcome.runs.iter().map(|r| Summary::of(&r.samples_ns)).collect();
    for (run, s) in outcome.runs.iter().zip(&summaries) {
        let _ = writeln!(out, "\n{} ({})", run.label, count(s.samples as u64, "sample", "samples"));
        let _ = writeln!(
            out,
            "  min {}  mean {}  std {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  (us)",
            fmt_us(s.min_us),
            fmt_us(s.mean_us),
            fmt_us(s.std_us),
            fmt_us(s.p50_us),
            fmt_us(s.p90_us),
            fmt_us(s.p99_us),
            fmt_us(s.p999_us),
            fmt_us(s.max_us)
        );
        out.push_str(&text_histogram(&run.samples_ns, 40));
    }
    if outcome.runs.len() > 1 {
        out.push('\n');
        out.push_str(&comparison_table(outcome, &summaries));
    }
    for w in &outcome.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    if json {
        let mut conditions_json = serde_json::to_value(conditions).unwrap_or(serde_json::Value::Null);
        if let Some(map) = conditions_json.as_object_mut() {
            for (k, v) in &outcome.setup {
                map.insert(k.clone(), v.clone().into());
            }
            for (k, v) in &outcome.counts {
                map.insert(k.clone(), (*v).into());
            }
        }
        let mut object = if outcome.runs.len() == 1 {
            let run = &outcome.runs[0];
            let one =
                RunJson { summary: summaries[0], label: &run.label, size: run.size, method: run.method.as_deref() };
            serde_json::to_value(one).unwrap_or_default()
        } else {
            let results: Vec<RunJson> = outcome
                .runs
                .iter()
                .zip(&summaries)
                .map(|(r, s)| RunJson { summary: *s, label: &r.label, size: r.size, method: r.method.as_deref() })
                .collect();
            serde_json::json!({ "results": results })
        };
        if let Some(map) = object.as_object_mut() {
            map.insert("experiment".into(), outcome.experiment.clone().into());
            map.insert("conditions".into(), conditions_json);
            map.insert("warnings".into(), outcome.warnings.clone().into());
            map.insert("failure".into(), outcome.failure.clone().into());
        }
        let _ = writeln!(out, "{object}");
    }
    out
}

/// One line per run with the headline figures, for reading several runs side by side.
fn comparison_table(outcome: &Outcome, summaries: &[Summary]) -> String {
    let label_width = outcome.runs.iter().map(|r| r.label.len()).max().unwrap_or(5).max(5);
    let mut out = format!(
        "{:<label_width$} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        "run", "min us", "p50 us", "p99 us", "p99.9 us", "max us", "mean us"
    );
    for (r, s) in outcome.runs.iter().zip(summaries) {
        let _ = writeln!(
            out,
            "{:<label_width$} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            r.label,
            fmt_us(s.min_us),
            fmt_us(s.p50_us),
            fmt_us(s.p99_us),
            fmt_us(s.p999_us),
            fmt_us(s.max_us),
            fmt_us(s.mean_us)
        );
    }
    out
}

/// Write every raw sample as CSV: `label,size,method,sample_us`, one line per sample after
/// the header. Labels and methods containing commas or quotes are quoted. The file goes in
/// place only when complete, and never over anything but a regular file with `force`
/// ([`create_output`]).
pub fn write_csv(outcome: &Outcome, path: &Path, force: bool) -> Result<(), crate::Error> {
    let mut out = create_output("--csv", path, force)?;
    let mut w = std::io::BufWriter::new(out.file());
    let fail = |source: std::io::Error| crate::Error::WriteCsv { path: path.to_path_buf(), source };
    writeln!(w, "label,size,method,sample_us").map_err(fail)?;
    for run in &outcome.runs {
        let label = csv_field(&run.label);
        let size = run.size.map(|s| s.to_string()).unwrap_or_default();
        let method = csv_field(run.method.as_deref().unwrap_or(""));
        for &ns in &run.samples_ns {
            writeln!(w, "{label},{size},{method},{}.{:03}", ns / 1000, ns % 1000).map_err(fail)?;
        }
    }
    w.flush().map_err(fail)?;
    drop(w);
    out.commit().map_err(|e| output_error("--csv", path, e))
}

/// The lab's output at `path` (CSV or PNG, given as `flag`): written to a new, exclusively
/// created file beside it and renamed onto `path` when complete ([`rtloop_output::OutputFile`]), so
/// a failed write leaves no half file. `path` must not exist, or with `force` be a regular
/// file ([`crate::check::output_file`], checked again here because the measurement took a
/// while): never a link, a device, a FIFO, a socket or a directory.
pub fn create_output(flag: &str, path: &Path, force: bool) -> Result<rtloop_output::OutputFile, crate::Error> {
    crate::check::output_file(flag, path, None, force)?;
    rtloop_output::OutputFile::create(path, None, force).map_err(|e| output_error(flag, path, e))
}

/// The error of an output that could not be created or put in place.
pub fn output_error(flag: &str, path: &Path, error: rtloop_output::OutputError) -> crate::Error {
    match error {
        // Appeared after the check: the same refusal the check gives.
        rtloop_output::OutputError::Exists { .. } => crate::check::exists_without_force(flag, path).into(),
        e => e.into(),
    }
}

/// Quote a CSV field if it needs it (RFC 4180).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// What a measuring thread returns: the samples in ns, and warnings (refused real-time
/// settings, missing replies, …).
pub type Measured = Result<(Vec<u64>, Vec<String>), crate::Error>;

/// Run `measure` on its own thread named `name` while `common.load` background workers run;
/// draw progress from the calling thread (never the measuring one) from the counter the
/// measurement bumps; return the samples and every warning, the load's included.
pub fn measure_on_thread<F>(common: &CommonOptions, name: &str, measure: F) -> Measured
where
    F: FnOnce(&std::sync::atomic::AtomicUsize) -> Measured + Send + 'static,
{
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let mut load = crate::load::Load::start(common.load)?;
    let done = Arc::new(AtomicUsize::new(0));
    let done_in_thread = Arc::clone(&done);
    let measuring = std::thread::Builder::new()
        .name(format!("lab-{name}"))
        .spawn(move || measure(&done_in_thread))
        .map_err(|e| crate::Error::os("cannot start the measuring thread", e))?;
    if let Some(bar) = progress_bar(common, common.samples as u64, name) {
        while !measuring.is_finished() {
            bar.set_position(done.load(Ordering::Relaxed) as u64);
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        bar.finish_and_clear();
    }
    let result = measuring.join().map_err(|_| crate::Error::panicked("measuring thread"));
    let mut load_problems = load.stop();
    let (samples_ns, mut warnings) = result??;
    warnings.append(&mut load_problems);
    Ok((samples_ns, warnings))
}
