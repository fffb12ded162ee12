//! `rtloop log`: look into TLOG0003 files — ours or mjlib's. `info` (records, schemas,
//! counts, time span, recovered and corrupt blocks), `dump` (JSON lines, by record and
//! time), `export` (CSV with flattened columns, or MCAP with a JSON schema per record, for
//! Foxglove and PlotJuggler), `plot` (PNG), `serve` (to Foxglove clients, `rtloop::live::playback`).
//!
//! Must never: give up on a damaged file while complete blocks remain — a cut or corrupt
//! log is read as far as it goes and the damage is reported (counts and byte offsets, on
//! stderr and in `--json`); open anything but a regular file as a log (a FIFO would block, a
//! device would read as an empty log); write an output onto the log it reads, or truncate
//! or replace anything but a regular file (an output is written beside its path and renamed
//! into place when complete, an existing one replaced only with `--force`, and a device,
//! FIFO, socket, directory or `-` refused); exit 0 from an export or plot that wrote nothing,
//! or from a dump whose output could not be written (only a reader that went away, as with
//! `| head`, ends a dump early without an error); leave `export --json` without its JSON
//! line, even when the export fails.

use rtloop_output::sentence;
use rtloop_output::{FileIdentity, OutputError, OutputFile};
use rtloop_tlog::reader::{FileReader, ItemFilter};
use rtloop_tlog::survey::{Problem, ProblemKind, Problems};
use serde_json::{json, Value as Json};
use std::collections::{BTreeMap, HashSet};
use std::io::{BufWriter, IsTerminal, Write};
use std::path::Path;

/// What a `log` subcommand has to say: its normal output (stdout), warnings about damage
/// it met (stderr, one line each), and — when it failed after all but still had something
/// to print (`export --json`) — the one sentence saying why (stderr; exit status 2).
#[derive(Debug, Default)]
pub struct Outcome {
    pub text: String,
    pub warnings: Vec<String>,
    pub failure: Option<String>,
    /// The command did its work but left something out (a dataset export skipped a file,
    /// or a log's damage): one sentence; exit status 1.
    pub incomplete: Option<String>,
}

fn cannot_read(path: &Path, e: impl std::fmt::Display) -> String {
    format!("cannot read the log {}: {e}", path.display())
}

fn open(path: &Path) -> Result<FileReader, String> {
    FileReader::open(path).map_err(|e| cannot_read(path, e))
}

/// Open the log (a regular file only, never waiting on a FIFO) and remember which file it
/// is, so no output can be written onto it.
fn open_input(path: &Path) -> Result<(FileReader, FileIdentity), String> {
    let file = rtloop_tlog::reader::open_file(path).map_err(|e| cannot_read(path, e))?;
    let identity = FileIdentity::of_file(&file).map_err(|e| cannot_read(path, e))?;
    let reader = FileReader::from_file(file).map_err(|e| cannot_read(path, e))?;
    Ok((reader, identity))
}

/// Check the output path and create its temporary file; `flag` names the option for the
/// message (`--csv`, `--mcap`, `--out`).
fn create_output(dest: &Path, input: FileIdentity, force: bool, flag: &str) -> Result<OutputFile, String> {
    OutputFile::create(dest, Some(input), force).map_err(|e| match e {
        OutputError::Exists { dest } => format!(
            "{flag} {}: the file already exists; give --force to replace it, or choose another path",
            dest.display()
        ),
        // These start with the path: name the option in front of it.
        e @ (OutputError::NotAFile { .. } | OutputError::Dash | OutputError::IsDirectory { .. }) => {
            format!("{flag} {e}")
        }
        other => sentence(&other),
    })
}

fn iso(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let micros = us.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z", tod / 3600, tod / 60 % 60, tod % 60)
}

/// µs as seconds for JSON: the nearest f64 to the exact quotient, which prints back as the
/// exact decimal (1700000001502000 µs → 1700000001.502), unlike `us as f64 * 1e-6`.
fn seconds(us: i64) -> f64 {
    rtloop_tlog::value::micros_to_seconds(us)
}

#[cfg(feature = "parquet")]
mod parquet;
#[cfg(not(feature = "parquet"))]
#[path = "log/without_parquet.rs"]
mod parquet;
mod render;
use parquet::{export_dataset, export_parquet};
pub use render::{render, RenderArgs};

fn problems_json(problems: &[Problem]) -> Json {
    serde_json::to_value(problems).unwrap_or(Json::Null)
}

/// `rtloop log info`.
pub fn info(path: &Path, as_json: bool) -> Result<String, String> {
    let reader = open(path)?;
    let survey = reader.survey();
    let records = reader.records();
    let report = &survey.scan;
    let span = survey.data_span_us;
    let items_of = |id: u64| survey.records.iter().find(|r| r.id == id).map_or(0, |r| r.items);
    if as_json {
        let recs: Vec<Json> = records
            .iter()
            .map(|r| {
                json!({"id": r.id, "name": r.name, "items": items_of(r.id),
                       "schema": r.schema.as_ref().map(|s| rtloop_tlog::export::record_json_schema(&r.name, s)),
                       "schema_error": r.schema_error})
            })
            .collect();
        let j = json!({
            "file": path.display().to_string(),
            "bytes": reader.len(),
            "records": recs,
            "first_time": span.map(|s| iso(s.0)),
            "last_time": span.map(|s| iso(s.1)),
            "span_s": span.map(|(a, b)| seconds(b.saturating_sub(a))),
            "blocks": report.blocks,
            "data_blocks": report.data_blocks,
            "seek_markers": report.seek_markers,
            "has_index": report.has_index,
            "index": survey.index.describe(),
            "truncated_at": report.truncated_at,
            "corrupt": report.corrupt.iter().map(|(o, w)| json!({"offset": o, "what": w})).collect::<Vec<_>>(),
            "problems": problems_json(&survey.problems),
        });
        return Ok(j.to_string());
    }
    let mut s = format!(
        "{}: {} bytes, {} blocks ({} data, {} seek markers)\n",
        path.display(),
        reader.len(),
        report.blocks,
        report.data_blocks,
        report.seek_markers
    );
    match span {
        Some((a, b)) => s += &format!("time span: {} → {} ({:.3} s)\n", iso(a), iso(b), seconds(b.saturating_sub(a))),
        None => s += "no timestamped items\n",
    }
    s += &format!("index: {}\n", survey.index.describe());
    /// Corrupt blocks listed one by one before the rest are only counted.
    const LISTED: usize = 20;
    for (o, w) in report.corrupt.iter().take(LISTED) {
        s += &format!("corrupt block at byte {o}: {w} (skipped)\n");
    }
    if report.corrupt.len() > LISTED {
        s += &format!("… and {} more corrupt blocks (all skipped)\n", report.corrupt.len() - LISTED);
    }
    // Corrupt blocks and the cut are listed above (and in the index line).
    for p in survey.problems.iter().filter(|p| !matches!(p.kind, ProblemKind::CorruptBlock | ProblemKind::Truncated)) {
        s += &format!("warning: {p}\n");
    }
    if records.is_empty() {
        s += "records: none (no schema block could be read)\n";
    } else {
        s += "records:\n";
    }
    for r in &records {
        let fields = match &r.schema {
            Some(rtloop_tlog::schema::Schema::Object(f)) => {
                rtloop_tlog::value::unique_names(f.iter().map(|f| f.name.as_str())).join(", ")
            }
            Some(_) => "(not an object)".into(),
            None => format!("(schema unreadable: {})", r.schema_error.clone().unwrap_or_default()),
        };
        s += &format!("  {:>3} {:<20} {:>9} items   {}\n", r.id, r.name, items_of(r.id), fields);
    }
    Ok(s.trim_end().to_string())
}

/// Seconds on the command line (`flag` names the option): below 1e9 they count from the
/// first item of the log; from 1e9 on, they are seconds since the UNIX epoch.
fn to_us(reader: &FileReader, flag: &str, t: Option<f64>) -> Result<Option<i64>, String> {
    let Some(t) = t else { return Ok(None) };
    // 1e13 s is far past any log (year 318857); beyond it µs would leave i64.
    if !t.is_finite() || !(0.0..=1e13).contains(&t) {
        return Err(format!(
            "{flag} {t} is not a time in the log: give seconds from its start (0 or more), or seconds since the \
             UNIX epoch (1e9 or more)"
        ));
    }
    let us = (t * 1e6).round() as i64;
    if t >= 1e9 {
        return Ok(Some(us));
    }
    let start = reader
        .items(ItemFilter::default())
        .filter_map(Result::ok)
        .find_map(|i| i.timestamp_us)
        .ok_or_else(|| format!("{flag} counts from the first timestamped item, and the log has none"))?;
    Ok(Some(start.saturating_add(us)))
}

/// `rtloop log dump`: one JSON object per line into `out`; damage met on the way comes back
/// as warnings (it is also in the lines: `error` and `decode_error` objects).
pub fn dump(
    path: &Path,
    record: Option<&str>,
    from: Option<f64>,
    to: Option<f64>,
    out: &mut impl Write,
) -> Result<Outcome, String> {
    let reader = open(path)?;
    let records = reader.records();
    if let Some(name) = record {
        if !records.iter().any(|r| r.name == name) {
            let names: Vec<String> = records.iter().map(|r| r.name.clone()).collect();
            return Err(format!(
                "no record named '{name}' in {}: {}",
                path.display(),
                rtloop_tlog::export::describe_records(&names)
            ));
        }
    }
    let filter =
        ItemFilter { record: None, from_us: to_us(&reader, "--from", from)?, to_us: to_us(&reader, "--to", to)? };
    if let (Some(a), Some(b)) = (filter.from_us, filter.to_us) {
        if a > b {
            return Err(format!(
                "--from is after --to: give a --from earlier than --to ({} > {})",
                seconds(a),
                seconds(b)
            ));
        }
    }
    let names: BTreeMap<u64, String> = records.iter().map(|r| (r.id, r.name.clone())).collect();
    let wanted: Option<HashSet<u64>> =
        record.map(|name| records.iter().filter(|r| r.name == name).map(|r| r.id).collect());
    let mut problems = Problems::default();
    let mut printed = 0u64;
    let mut reader_gone = false;
    for item in reader.items(filter) {
        let line = match item {
            Ok(it) => {
                let name = names.get(&it.record_id);
                if name.is_none() {
                    problems.note(ProblemKind::NoSchema, Some(it.record_id), None, it.offset, || {
                        "no schema block for this record id".into()
                    });
                }
                if wanted.as_ref().is_some_and(|w| !w.contains(&it.record_id)) {
                    continue;
                }
                let value = match reader.decode_item(&it) {
                    Ok(v) => v.to_json(),
                    Err(e) => {
                        if let Some(name) = name {
                            problems.note(ProblemKind::Undecodable, Some(it.record_id), Some(name), it.offset, || {
                                e.to_string()
                            });
                        }
                        json!({"decode_error": e.to_string()})
                    }
                };
                json!({"record": name, "time": it.timestamp_us.map(seconds), "offset": it.offset, "value": value})
            }
            Err(e) => {
                problems.note_read_error(&e);
                json!({"error": e.to_string(), "offset": rtloop_tlog::reader::error_offset(&e)})
            }
        };
        if let Err(e) = writeln!(out, "{line}") {
            reader_gone = dump_write_failed(e)?;
            break;
        }
        printed += 1;
    }
    if !reader_gone {
        if let Err(e) = out.flush() {
            reader_gone = dump_write_failed(e)?;
        }
    }
    let mut warnings: Vec<String> = problems.list().iter().map(ToString::to_string).collect();
    if printed == 0 && !reader_gone {
        warnings.push(match record {
            Some(name) => format!("no item of record '{name}' matched"),
            None => "no item matched".to_string(),
        });
    }
    Ok(Outcome { text: String::new(), warnings, failure: None, incomplete: None })
}

/// A write of the dump failed: `Ok(true)` when only the reader went away (a closed pipe,
/// as with `| head`: the dump just ends), else the error as one sentence — a full disk or
/// any other failure leaves the output cut short, which must not pass for success.
fn dump_write_failed(e: std::io::Error) -> Result<bool, String> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return Ok(true);
    }
    Err(format!(
        "cannot write the dump ({e}), so its output is cut short: make room or send it elsewhere, and dump again"
    ))
}

fn progress_bar(what: &str) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    Some(bar)
}

/// The record to export when none is named: `cycle` (rtloop's), else the only record with
/// data.
fn default_record(reader: &FileReader) -> Result<String, String> {
    let records = reader.records();
    if records.iter().any(|r| r.name == "cycle") {
        return Ok("cycle".into());
    }
    let all: Vec<String> = records.iter().map(|r| r.name.clone()).collect();
    if all.is_empty() {
        return Err(format!("nothing to export: {}", rtloop_tlog::export::describe_records(&all)));
    }
    let with_data: Vec<String> = records
        .iter()
        .filter(|r| r.last_data_offset.is_some() || !reader.has_index())
        .map(|r| r.name.clone())
        .collect();
    match with_data.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(format!("say which record to export with --record NAME: the log has {}", all.join(", "))),
        many => Err(format!("say which record to export with --record NAME: the log has {}", many.join(", "))),
    }
}

/// The problems as one clause for an error message: "; p1; p2".
fn problems_clause(problems: &[Problem]) -> String {
    problems.iter().map(|p| format!("; {p}")).collect()
}

/// What `rtloop log export` is asked to do.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExportRequest<'a> {
    /// The log (several logs, or directories of logs, with `dataset`).
    pub files: &'a [std::path::PathBuf],
    pub csv: Option<&'a Path>,
    pub mcap: Option<&'a Path>,
    pub parquet: Option<&'a Path>,
    /// Every log of `files` into one Parquet dataset at `parquet`.
    pub dataset: bool,
    /// The dataset's `robot` column (default: each log's directory name).
    pub robot: Option<&'a str>,
    pub record: Option<&'a str>,
    pub force: bool,
    pub json: bool,
}

/// `rtloop log export`: CSV of one record, MCAP of every record, or Parquet (one record to a
/// `.parquet` file, every record to a directory, or many logs to a dataset), written to a
/// temporary file or directory beside the output and renamed into place only when something
/// was written. Never onto the log itself; an existing output only with `force`. With
/// `json` the last line of the text is one JSON object, also when the export failed (`error`
/// then says why, and the outcome carries the failure).
pub fn export(request: &ExportRequest<'_>) -> Result<Outcome, String> {
    let &ExportRequest { files, csv, mcap, parquet, dataset, robot, record, force, json: as_json } = request;
    if dataset {
        if csv.is_some() || mcap.is_some() {
            return Err("--dataset writes Parquet only: give --parquet OUT_DIR, without --csv or --mcap".into());
        }
        let Some(out) = parquet else {
            return Err("--dataset needs --parquet OUT_DIR: the directory to write the dataset into".into());
        };
        return export_dataset(files, out, record, robot, force, as_json);
    }
    if robot.is_some() {
        return Err("--robot names the robot column of a --dataset export: give --dataset too, or leave it out".into());
    }
    let path = match files {
        [one] => one.as_path(),
        [] => return Err("give the log to export".into()),
        _ => {
            return Err(format!(
                "give one log to export ({} given), or --dataset --parquet OUT_DIR to export several into one \
                 dataset",
                files.len()
            ))
        }
    };
    let (format, out) = match (csv, mcap, parquet) {
        (Some(out), None, None) => (Some("csv"), Some(out)),
        (None, Some(out), None) => (Some("mcap"), Some(out)),
        (None, None, Some(out)) => (Some("parquet"), Some(out)),
        _ => (None, None),
    };
    let result = export_to(path, format.zip(out), record, force);
    if !as_json {
        return match result {
            Ok(done) => {
                Ok(Outcome { text: done.summary, warnings: done.report.warnings(), failure: None, incomplete: None })
            }
            Err(failed) => Err(failed.message),
        };
    }
    let (summary, report, failure) = match result {
        Ok(done) => (Some(done.summary), done.report, None),
        Err(failed) => (None, failed.report, Some(failed.message)),
    };
    let mut j = json!({
        "file": path.display().to_string(),
        "output": out.map(|out| out.display().to_string()),
        "format": format,
        "record": report.record,
        "skipped": report.problems.iter().filter(|p| p.skips_items()).map(|p| p.count).sum::<u64>(),
        "problems": problems_json(&report.problems),
        "error": failure,
    });
    if let (Some(object), Some(extra)) = (j.as_object_mut(), report.written.as_object()) {
        object.extend(extra.clone());
    }
    let text = match summary {
        Some(summary) => format!("{summary}\n{j}"),
        None => j.to_string(),
    };
    // On failure the sentence already names the problems: no separate warnings.
    let warnings = if failure.is_some() { Vec::new() } else { report.warnings() };
    Ok(Outcome { text, warnings, failure, incomplete: None })
}

/// What an export wrote (or would have) and met, for the summary and `--json`.
#[derive(Default)]
struct ExportReport {
    record: Option<String>,
    /// `rows` and `columns`, or `messages` and `channels`.
    written: Json,
    problems: Vec<Problem>,
}

impl ExportReport {
    fn warnings(&self) -> Vec<String> {
        self.problems
            .iter()
            .map(ToString::to_string)
            .chain(self.written["no_3d"].as_str().map(|w| format!("{w}; the MCAP has the records without it")))
            .collect()
    }
}

struct ExportDone {
    summary: String,
    report: ExportReport,
}

struct ExportFailed {
    message: String,
    report: ExportReport,
}

impl From<String> for ExportFailed {
    fn from(message: String) -> Self {
        ExportFailed { message, report: ExportReport::default() }
    }
}

impl From<&str> for ExportFailed {
    fn from(message: &str) -> Self {
        message.to_string().into()
    }
}

/// Why nothing was written: the record (or the log) has no items at all, or what it has
/// does not decode — never the one dressed as the other.
fn nothing_written(out: &Path, what: &str, items: u64, problems: &[Problem]) -> String {
    let why = match items {
        0 if problems.is_empty() => format!("{what} has no items, so there is nothing to export"),
        0 => format!("{what} has no items that could be read"),
        1 => format!("the one item of {what} does not decode"),
        n => format!("none of the {n} items of {what} decodes"),
    };
    format!("nothing written to {}: {why}{}", out.display(), problems_clause(problems))
}

/// The export itself; `output`: the format and path, `None` when the flags gave not
/// exactly one (reported after the log, which is checked first).
fn export_to(
    path: &Path,
    output: Option<(&str, &Path)>,
    record: Option<&str>,
    force: bool,
) -> Result<ExportDone, ExportFailed> {
    let (reader, identity) = open_input(path)?;
    let (format, out) = output.ok_or("give exactly one of --csv OUT, --mcap OUT or --parquet OUT")?;
    if format == "parquet" {
        return export_parquet(path, reader, identity, out, record, force);
    }
    let flag = if format == "csv" { "--csv" } else { "--mcap" };
    let cannot_export =
        |e: rtloop_tlog::format::TlogError| format!("cannot export {}: {}", path.display(), sentence(&e));
    if format == "csv" {
        let record = match record {
            Some(r) => r.to_string(),
            None => default_record(&reader)?,
        };
        let mut output = create_output(out, identity, force, flag)?;
        let bar = progress_bar("csv");
        let stats =
            rtloop_tlog::export::to_csv(&reader, &record, output.file(), bar.as_ref()).map_err(cannot_export)?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        let report = ExportReport {
            record: Some(record.clone()),
            written: json!({"rows": stats.rows, "columns": stats.columns}),
            problems: stats.problems,
        };
        if stats.rows == 0 {
            let what = format!("record '{record}'");
            return Err(ExportFailed { message: nothing_written(out, &what, stats.items, &report.problems), report });
        }
        if let Err(e) = output.commit() {
            return Err(ExportFailed { message: sentence(&e), report });
        }
        let summary = format!("{}: {} rows of record '{record}'", out.display(), stats.rows);
        Ok(ExportDone { summary, report })
    } else {
        let mut output = create_output(out, identity, force, flag)?;
        let bar = progress_bar("mcap");
        // A run with physics: its 3D view too (the scene, every body's pose, the body's
        // transform), from the `model` and `body` records.
        let mut scene = rtloop::scene::logged_model(&reader).map(|m| rtloop::scene::SceneExport::new(&m));
        let derived = scene.as_mut().map(|s| s as &mut dyn rtloop_tlog::export::Derived);
        let stats =
            rtloop_tlog::export::to_mcap_with(&reader, output.file(), bar.as_ref(), derived).map_err(cannot_export)?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        let report = ExportReport {
            record: None,
            written: json!({"messages": stats.messages, "channels": stats.channels,
                            "no_3d": scene.as_ref().and_then(|s| s.no_3d.clone())}),
            problems: stats.problems,
        };
        if stats.messages == 0 {
            return Err(ExportFailed {
                message: nothing_written(out, "the log", stats.items, &report.problems),
                report,
            });
        }
        if let Err(e) = output.commit() {
            return Err(ExportFailed { message: sentence(&e), report });
        }
        let summary = format!("{}: {} messages on {} channels", out.display(), stats.messages, stats.channels);
        Ok(ExportDone { summary, report })
    }
}

/// `rtloop log plot`: one panel per field (or all on one axis), a PNG written beside `out`
/// and renamed into place when complete.
pub fn plot(path: &Path, fields: &str, out: &Path, force: bool, one_axis: bool) -> Result<Outcome, String> {
    if !out.extension().is_some_and(|e| e.eq_ignore_ascii_case("png")) {
        return Err(format!("--out {}: plots are written as PNG; give a path ending in .png", out.display()));
    }
    let list: Vec<&str> = fields.split(',').map(str::trim).filter(|f| !f.is_empty()).collect();
    if list.is_empty() {
        return Err("--fields needs at least one field, e.g. --fields cycle.cycle_us,cycle.servo.0.position".into());
    }
    let (reader, identity) = open_input(path)?;
    let mut output = create_output(out, identity, force, "--out")?;
    let options = rtloop_tlog::plot::PlotOptions { one_axis, ..rtloop_tlog::plot::PlotOptions::default() };
    // Nothing to draw at all is an error from the plotter (no file is put in place); a
    // field with nothing beside others that drew is a warning (its panel is empty).
    let stats = rtloop_tlog::plot::plot(&reader, &list, &options, BufWriter::new(output.file()))
        .map_err(|e| format!("cannot plot {}: {}", path.display(), sentence(&e)))?;
    output.commit().map_err(|e| sentence(&e))?;
    let mut warnings: Vec<String> = stats.problems.iter().map(ToString::to_string).collect();
    warnings.extend(stats.empty.iter().map(|(field, why)| format!("field '{field}' {why}: its panel is empty")));
    let drawn = stats.points.iter().filter(|&&points| points > 0).count();
    let text = format!("{}: {drawn} of {} series drawn", out.display(), list.len());
    Ok(Outcome { text, warnings, failure: None, incomplete: None })
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso_dates() {
        assert_eq!(super::iso(1_583_798_400_000_000), "2020-03-10T00:00:00.000000Z");
        assert_eq!(super::iso(0), "1970-01-01T00:00:00.000000Z");
    }
}

/// `rtloop log serve`'s options (read only with the `foxglove` feature, which serves them).
#[cfg_attr(not(feature = "foxglove"), allow(dead_code))]
#[derive(Debug, Clone)]
pub struct ServeArgs {
    /// `--foxglove ADDR`.
    pub foxglove: String,
    /// `--speed`.
    pub speed: f64,
    /// `--foxglove-every`.
    pub foxglove_every: u32,
    /// `--start` (s).
    pub start: Option<f64>,
    /// `--end` (s).
    pub end: Option<f64>,
    /// `--loop`.
    pub looping: bool,
    /// `--exit-at-end`.
    pub exit_at_end: bool,
    /// `--allow-remote`.
    pub allow_remote: bool,
}

/// `rtloop log serve`: play the log to Foxglove clients; the damage met comes back as
/// warnings, the counts as text (or one JSON object).
#[cfg(not(feature = "foxglove"))]
pub fn serve(_path: &Path, _args: &ServeArgs, _as_json: bool) -> Result<Outcome, String> {
    Err(rtloop::live::built_without("foxglove", "rtloop log serve"))
}

/// `rtloop log serve`: play the log to Foxglove clients; the damage met comes back as
/// warnings, the counts as text (or one JSON object).
#[cfg(feature = "foxglove")]
pub fn serve(path: &Path, args: &ServeArgs, as_json: bool) -> Result<Outcome, String> {
    use rtloop::live::playback;
    let addr = rtloop::live::foxglove::parse_address(&args.foxglove, args.allow_remote).map_err(|e| e.to_string())?;
    let opts = playback::PlaybackOptions {
        addr,
        speed: playback::check_speed(args.speed).map_err(|e| e.to_string())?,
        every: rtloop::live::check_every("--foxglove-every", args.foxglove_every).map_err(|e| e.to_string())?,
        start_s: args.start,
        end_s: args.end,
        looping: args.looping,
        exit_at_end: args.exit_at_end,
    };
    let report = playback::serve(path, &opts).map_err(|e| e.to_string())?;
    let warnings = report.problems.iter().map(ToString::to_string).chain(report.no_3d.clone()).collect();
    let text = if as_json {
        serde_json::to_string(&report).map_err(|e| e.to_string())?
    } else {
        let f = &report.foxglove;
        format!(
            "{}: {} cycles (1 in {} by index; {} skipped), {} events, {} other items played ({} restarts); foxglove {}: \
             {} messages, {} dropped, {} refused, {} errors, {} clients",
            report.file,
            report.cycles,
            report.every,
            report.decimated,
            report.events,
            report.other,
            report.restarts,
            f.endpoint,
            f.messages,
            f.dropped,
            f.refused,
            f.errors,
            f.detail.get("clients_connected").copied().unwrap_or(0)
        )
    };
    Ok(Outcome { text, warnings, ..Default::default() })
}
