//! `rtloop log export --parquet` (through the rtloop-parquet crate): one log's records as Parquet
//! tables — one record to a `.parquet` file, or every record to a new directory of
//! `<record>.parquet` — and many logs as one dataset, `OUT/<record>/<run>.parquet` with
//! `robot` and `run` columns, so that one query spans every run.
//!
//! Must never: write but into a new temporary file or directory renamed into place when
//! complete (an existing output replaced only with `--force`, and a directory only when it
//! holds an earlier export's files alone); let one unreadable file stop a dataset (it is
//! skipped, reported, and the exit status says so); name an output file after a record or
//! log without making it a plain file name (`../x` must not escape the output).

use super::{
    cannot_read, create_output, default_record, nothing_written, open_input, problems_json, progress_bar, ExportDone,
    ExportFailed, ExportReport, Outcome,
};
use rtloop_output::sentence;
use rtloop_output::{FileIdentity, OutputError};
use rtloop_tlog::reader::FileReader;
use rtloop_tlog::survey::{Problem, ProblemKind};
use serde_json::{json, Value as Json};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// Whether `out` names a single Parquet file (`….parquet`) rather than a directory.
fn is_parquet_file(out: &Path) -> bool {
    out.extension().is_some_and(|e| e.eq_ignore_ascii_case("parquet"))
}

/// Items of `record` that did not decode (they made no row), from an export's problems.
fn undecodable(problems: &[Problem]) -> u64 {
    problems.iter().filter(|p| p.kind == ProblemKind::Undecodable).map(|p| p.count).sum()
}

/// One record's table, for `--json`.
fn table_json(stats: &rtloop_parquet::ParquetStats, file: &str) -> Json {
    json!({"file": file, "rows": stats.rows, "columns": stats.columns, "row_groups": stats.row_groups,
           "bytes": stats.bytes, "collisions": stats.collisions})
}

/// A record's name as a file name: letters, digits, `_`, `-` and `.` kept, anything else
/// `_`, never hidden or empty (a record called `../x` must not write outside the output).
fn file_stem_of(name: &str) -> String {
    let mut stem: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') { c } else { '_' }).collect();
    if stem.is_empty() || stem.starts_with('.') {
        stem.insert(0, '_');
    }
    stem
}

/// `stem`, or `stem~2`, `stem~3`, … : the first not in `taken` (which then holds it).
fn unique_stem(stem: String, taken: &mut HashSet<String>) -> String {
    let mut name = stem.clone();
    let mut n = 2;
    while !taken.insert(name.clone()) {
        name = format!("{stem}~{n}");
        n += 1;
    }
    name
}

/// The records a Parquet export of a log writes: the one asked for (which must exist), or
/// every record whose schema parses (the others are counted in the problems).
fn parquet_records(reader: &FileReader, path: &Path, record: Option<&str>) -> Result<Vec<String>, String> {
    let records = reader.records();
    let all: Vec<String> = records.iter().map(|r| r.name.clone()).collect();
    if let Some(name) = record {
        if !records.iter().any(|r| r.name == name) {
            return Err(format!(
                "no record named '{name}' in {}: {}",
                path.display(),
                rtloop_tlog::export::describe_records(&all)
            ));
        }
        return Ok(vec![name.to_string()]);
    }
    let mut names: Vec<String> = Vec::new();
    for r in &records {
        if !names.contains(&r.name) && reader.record(&r.name).is_some_and(|first| first.schema.is_some()) {
            names.push(r.name.clone());
        }
    }
    if names.is_empty() {
        return Err(format!(
            "nothing to export from {}: {}",
            path.display(),
            rtloop_tlog::export::describe_records(&all)
        ));
    }
    Ok(names)
}

/// `export --parquet`: one record into a `.parquet` file, or every record (or the one
/// asked for) into a new directory of `<record>.parquet` files.
pub(super) fn export_parquet(
    path: &Path,
    reader: FileReader,
    identity: FileIdentity,
    out: &Path,
    record: Option<&str>,
    force: bool,
) -> Result<ExportDone, ExportFailed> {
    let cannot_export = |e: rtloop_parquet::ParquetError| format!("cannot export {}: {}", path.display(), sentence(&e));
    let options = rtloop_parquet::ParquetOptions {
        metadata: vec![("rtloop.source".into(), path.display().to_string())],
        ..Default::default()
    };
    if is_parquet_file(out) {
        let record = match record {
            Some(r) => {
                // Refused with the list of records the log has.
                parquet_records(&reader, path, Some(r))?;
                r.to_string()
            }
            None => default_record(&reader)?,
        };
        let mut output = create_output(out, identity, force, "--parquet")?;
        let bar = progress_bar("parquet");
        let stats = rtloop_parquet::to_parquet(&reader, &record, output.file(), &options, bar.as_ref())
            .map_err(cannot_export)?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        let report = ExportReport {
            record: Some(record.clone()),
            written: json!({"rows": stats.rows, "columns": stats.columns, "row_groups": stats.row_groups,
                            "bytes": stats.bytes, "collisions": stats.collisions}),
            problems: stats.problems.clone(),
        };
        if stats.rows == 0 {
            let what = format!("record '{record}'");
            let items = undecodable(&report.problems);
            return Err(ExportFailed { message: nothing_written(out, &what, items, &report.problems), report });
        }
        if let Err(e) = output.commit() {
            return Err(ExportFailed { message: sentence(&e), report });
        }
        let summary = format!(
            "{}: {} rows of record '{record}' in {} row group{}, {} bytes",
            out.display(),
            stats.rows,
            stats.row_groups,
            if stats.row_groups == 1 { "" } else { "s" },
            stats.bytes
        );
        return Ok(ExportDone { summary, report });
    }
    let names = parquet_records(&reader, path, record)?;
    let dir = create_output_dir(out, force)?;
    let mut taken = HashSet::new();
    let mut files = Vec::with_capacity(names.len());
    let mut outputs = Vec::with_capacity(names.len());
    for name in &names {
        let file = format!("{}.parquet", unique_stem(file_stem_of(name), &mut taken));
        let handle = dir
            .create_file(Path::new(&file))
            .map_err(|e| format!("cannot write {}: {e}", out.join(&file).display()))?;
        files.push(file);
        outputs.push((name.clone(), handle));
    }
    let bar = progress_bar("parquet");
    let stats = rtloop_parquet::records_to_parquet(&reader, outputs, &options, bar.as_ref()).map_err(cannot_export)?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let rows: u64 = stats.records.iter().map(|r| r.rows).sum();
    let tables: serde_json::Map<String, Json> =
        stats.records.iter().zip(&files).map(|(r, file)| (r.record.clone(), table_json(r, file))).collect();
    let report = ExportReport {
        record: record.map(str::to_string),
        written: json!({
            "rows": rows,
            "row_groups": stats.records.iter().map(|r| r.row_groups).sum::<usize>(),
            "bytes": stats.records.iter().map(|r| r.bytes).sum::<u64>(),
            "records": tables,
        }),
        problems: stats.all_problems(),
    };
    if rows == 0 {
        let what = match record {
            Some(name) => format!("record '{name}'"),
            None => "the log".to_string(),
        };
        let items = undecodable(&report.problems);
        return Err(ExportFailed { message: nothing_written(out, &what, items, &report.problems), report });
    }
    if let Err(e) = dir.commit() {
        return Err(ExportFailed { message: format!("--parquet {}", sentence(&e)), report });
    }
    let listed: Vec<String> = stats.records.iter().map(|r| format!("{} {}", r.record, r.rows)).collect();
    let summary = format!("{}: {rows} rows in {} tables ({})", out.display(), stats.records.len(), listed.join(", "));
    Ok(ExportDone { summary, report })
}

/// Check an output directory's path and create its temporary directory.
fn create_output_dir(dest: &Path, force: bool) -> Result<rtloop_output::OutputDir, String> {
    rtloop_output::OutputDir::create(dest, force, "parquet").map_err(|e| match e {
        OutputError::Exists { dest } => format!(
            "--parquet {}: it already exists; give --force to replace an earlier export there, or choose a new \
             directory (a path ending in .parquet writes one record to one file)",
            dest.display()
        ),
        other => format!("--parquet {}", sentence(&other)),
    })
}

/// A dataset's robot name from `--robot`: any text a directory could be named, checked.
fn check_robot(robot: &str) -> Result<(), String> {
    if robot.is_empty() || robot.len() > 255 || robot.chars().any(char::is_control) {
        return Err(format!(
            "--robot {robot:?} is not a robot name: give 1 to 255 characters without control characters"
        ));
    }
    Ok(())
}

/// The logs a dataset export reads: each file given, and every regular file under each
/// directory given (sorted, hidden names and `skip` left out); anything else is refused
/// later, by name, as not a log. A path that does not exist is a mistake on the command
/// line.
fn dataset_logs(paths: &[std::path::PathBuf], skip: &Path) -> Result<Vec<std::path::PathBuf>, String> {
    // The output (an earlier export being replaced) by any spelling of its path.
    let skip = std::fs::canonicalize(skip).unwrap_or_else(|_| skip.to_path_buf());
    let skip = skip.as_path();
    fn walk(dir: &Path, skip: &Path, depth: usize, out: &mut Vec<std::path::PathBuf>) -> Result<(), String> {
        let cannot = |e: std::io::Error| format!("cannot read the directory {}: {e}", dir.display());
        let mut entries: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
            .map_err(cannot)?
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().as_encoded_bytes().starts_with(b"."))
            .map(|e| e.path())
            .collect();
        entries.sort();
        for path in entries {
            // Links followed (a directory of links to logs), loops bounded by the depth.
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() && std::fs::canonicalize(&path).is_ok_and(|p| p == skip) => {}
                Ok(m) if m.is_dir() && depth < MAX_DATASET_DEPTH => walk(&path, skip, depth + 1, out)?,
                Ok(m) if m.is_dir() => {}
                _ => out.push(path),
            }
        }
        Ok(())
    }
    let mut logs = Vec::new();
    for path in paths {
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => walk(path, skip, 0, &mut logs)?,
            Ok(_) => logs.push(path.clone()),
            Err(e) => return Err(cannot_read(path, e)),
        }
    }
    Ok(logs)
}

/// Directory levels a dataset export searches below each directory given.
const MAX_DATASET_DEPTH: usize = 8;

/// One log's part of a dataset, for `--json`.
struct DatasetRun {
    file: String,
    robot: Option<String>,
    run: String,
    tables: serde_json::Map<String, Json>,
    problems: Vec<Problem>,
}

/// `export --dataset --parquet OUT`: every log into `OUT/<record>/<run>.parquet`, with
/// `robot` and `run` columns; a file that cannot be exported is skipped and reported.
pub(super) fn export_dataset(
    paths: &[std::path::PathBuf],
    out: &Path,
    record: Option<&str>,
    robot: Option<&str>,
    force: bool,
    as_json: bool,
) -> Result<Outcome, String> {
    if let Some(robot) = robot {
        check_robot(robot)?;
    }
    if paths.is_empty() {
        return Err("give the logs to export, or directories holding them".into());
    }
    let logs = dataset_logs(paths, out)?;
    if logs.is_empty() {
        return Err(format!(
            "no file found in {}: give logs, or directories holding them",
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ));
    }
    let dir = create_output_dir(out, force)?;
    let mut runs: Vec<DatasetRun> = Vec::new();
    let mut skipped: Vec<(String, String)> = Vec::new();
    // Per record directory, the file names taken (two logs with one stem get run~2).
    let mut taken: BTreeMap<String, HashSet<String>> = BTreeMap::new();
    let mut record_dirs: BTreeMap<String, String> = BTreeMap::new();
    let mut dir_names = HashSet::new();
    let mut totals: BTreeMap<String, (u64, usize, u64, usize)> = BTreeMap::new();
    for path in &logs {
        let file = path.display().to_string();
        let run = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| file.clone());
        let robot_name = robot.map(str::to_string).or_else(|| {
            std::path::absolute(path)
                .ok()
                .and_then(|p| p.parent().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned()))
        });
        let (reader, _) = match open_input(path) {
            Ok(opened) => opened,
            Err(why) => {
                skipped.push((file, why));
                continue;
            }
        };
        let names = match parquet_records(&reader, path, record) {
            Ok(names) => names,
            Err(why) => {
                skipped.push((file, why));
                continue;
            }
        };
        let mut created = Vec::new();
        let mut outputs = Vec::new();
        let mut failed = None;
        for name in &names {
            let record_dir = record_dirs
                .entry(name.clone())
                .or_insert_with(|| unique_stem(file_stem_of(name), &mut dir_names))
                .clone();
            let stem = unique_stem(file_stem_of(&run), taken.entry(record_dir.clone()).or_default());
            let relative = Path::new(&record_dir).join(format!("{stem}.parquet"));
            match dir.create_file(&relative) {
                Ok(handle) => {
                    created.push(relative);
                    outputs.push((name.clone(), handle));
                }
                Err(e) => {
                    failed = Some(format!("cannot write {}: {e}", out.join(&relative).display()));
                    break;
                }
            }
        }
        if let Some(why) = failed {
            // The output itself failed (a full disk): not this log's fault, stop.
            return Err(why);
        }
        let options = rtloop_parquet::ParquetOptions {
            constants: vec![("robot".into(), robot_name.clone()), ("run".into(), Some(run.clone()))],
            metadata: vec![("rtloop.source".into(), file.clone())],
            ..Default::default()
        };
        let bar = progress_bar(&run);
        let result = rtloop_parquet::records_to_parquet(&reader, outputs, &options, bar.as_ref());
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        let stats = match result {
            Ok(stats) => stats,
            Err(rtloop_parquet::ParquetError::Io(e)) => {
                return Err(format!("cannot write the dataset {}: {e}", out.display()));
            }
            Err(e) => {
                for relative in &created {
                    let _ = dir.remove_file(relative);
                }
                skipped.push((file, format!("cannot export {}: {}", path.display(), sentence(&e))));
                continue;
            }
        };
        let mut tables = serde_json::Map::new();
        for (table, relative) in stats.records.iter().zip(&created) {
            let total = totals.entry(table.record.clone()).or_default();
            total.0 += table.rows;
            total.1 += table.row_groups;
            total.2 += table.bytes;
            total.3 += 1;
            tables.insert(table.record.clone(), table_json(table, &relative.display().to_string()));
        }
        runs.push(DatasetRun { file, robot: robot_name, run, tables, problems: stats.all_problems() });
    }
    let damaged: Vec<&DatasetRun> = runs.iter().filter(|r| r.problems.iter().any(Problem::skips_items)).collect();
    let rows: u64 = totals.values().map(|t| t.0).sum();
    let mut failure = None;
    if runs.is_empty() {
        failure = Some(format!(
            "nothing written to {}: none of the {} files could be exported ({})",
            out.display(),
            logs.len(),
            skipped.iter().map(|(f, why)| format!("{f}: {why}")).collect::<Vec<_>>().join("; ")
        ));
    } else if let Err(e) = dir.commit() {
        failure = Some(format!("--parquet {}", sentence(&e)));
    }
    let mut warnings: Vec<String> = skipped.iter().map(|(file, why)| format!("skipped {file}: {why}")).collect();
    for run in &runs {
        warnings.extend(run.problems.iter().map(|p| format!("{}: {p}", run.file)));
    }
    let incomplete = (failure.is_none() && (!skipped.is_empty() || !damaged.is_empty())).then(|| {
        format!(
            "the dataset is incomplete: {} of {} files skipped, {} exported with damage left out (see the warnings)",
            skipped.len(),
            logs.len(),
            damaged.len()
        )
    });
    let records_json: serde_json::Map<String, Json> = totals
        .iter()
        .map(|(name, (rows, groups, bytes, files))| {
            (name.clone(), json!({"dir": record_dirs.get(name), "files": files, "rows": rows, "row_groups": groups, "bytes": bytes}))
        })
        .collect();
    let summary = format!(
        "{}: {} logs, {rows} rows in {} records; {} files skipped, {} with damage",
        out.display(),
        runs.len(),
        totals.len(),
        skipped.len(),
        damaged.len()
    );
    let mut text = if failure.is_none() { summary } else { String::new() };
    if as_json {
        let j = json!({
            "output": out.display().to_string(),
            "format": "parquet",
            "dataset": true,
            "record": record,
            "logs": logs.len(),
            "exported": runs.len(),
            "skipped": skipped.len(),
            "damaged": damaged.len(),
            "rows": rows,
            "records": records_json,
            "runs": runs.iter().map(|r| json!({"file": r.file, "robot": r.robot, "run": r.run, "records": r.tables,
                                               "problems": problems_json(&r.problems)})).collect::<Vec<_>>(),
            "skipped_files": skipped.iter().map(|(file, why)| json!({"file": file, "why": why})).collect::<Vec<_>>(),
            "error": failure,
        });
        text = if text.is_empty() { j.to_string() } else { format!("{text}\n{j}") };
    } else if let Some(failure) = failure {
        return Err(failure);
    }
    Ok(Outcome { text, warnings, failure, incomplete })
}
