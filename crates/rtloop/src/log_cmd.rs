//! `rtloop log`: look into TLOG0003 files — ours or mjlib's. `info` (records, schemas,
//! counts, time span, recovered and corrupt blocks), `dump` (JSON lines, by record and
//! time), `export` (CSV with flattened columns, or MCAP with a JSON schema per record, for
//! Foxglove and PlotJuggler), `plot` (PNG).
//!
//! Must never: give up on a damaged file while complete blocks remain — a cut or corrupt
//! log is read as far as it goes and the damage is reported.

use serde_json::{json, Value as Json};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::Path;
use tlog::reader::{FileReader, ItemFilter};

fn open(path: &Path) -> Result<FileReader, String> {
    FileReader::open(path).map_err(|e| format!("cannot read the log {}: {e}", path.display()))
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

/// `rtloop log info`.
pub fn info(path: &Path, as_json: bool) -> Result<String, String> {
    let reader = open(path)?;
    let report = reader.scan_report();
    let records = reader.records();
    let mut counts: BTreeMap<u64, (u64, Option<i64>, Option<i64>)> = BTreeMap::new();
    let mut read_errors = Vec::new();
    for item in reader.items(ItemFilter::default()) {
        match item {
            Ok(it) => {
                let e = counts.entry(it.record_id).or_insert((0, None, None));
                e.0 += 1;
                if let Some(t) = it.timestamp_us {
                    e.1 = Some(e.1.map_or(t, |a: i64| a.min(t)));
                    e.2 = Some(e.2.map_or(t, |b: i64| b.max(t)));
                }
            }
            Err(e) => read_errors.push(e.to_string()),
        }
    }
    let first = counts.values().filter_map(|c| c.1).min();
    let last = counts.values().filter_map(|c| c.2).max();
    let recs: Vec<Json> = records
        .iter()
        .map(|r| {
            let c = counts.get(&r.id).copied().unwrap_or((0, None, None));
            json!({"id": r.id, "name": r.name, "items": c.0,
                   "schema": r.schema.as_ref().map(|s| tlog::export::record_json_schema(&r.name, s)),
                   "schema_error": r.schema_error})
        })
        .collect();
    let j = json!({
        "file": path.display().to_string(),
        "bytes": reader.len(),
        "records": recs,
        "first_time": first.map(iso),
        "last_time": last.map(iso),
        "span_s": match (first, last) { (Some(a), Some(b)) => json!((b - a) as f64 * 1e-6), _ => Json::Null },
        "blocks": report.blocks,
        "data_blocks": report.data_blocks,
        "seek_markers": report.seek_markers,
        "has_index": report.has_index,
        "truncated_at": report.truncated_at,
        "corrupt": report.corrupt.iter().map(|(o, w)| json!({"offset": o, "what": w})).collect::<Vec<_>>(),
    });
    if as_json {
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
    match (first, last) {
        (Some(a), Some(b)) => s += &format!("time span: {} → {} ({:.3} s)\n", iso(a), iso(b), (b - a) as f64 * 1e-6),
        _ => s += "no timestamped items\n",
    }
    s += &format!(
        "index: {}\n",
        if report.has_index { "present" } else { "absent (read by scanning: the writer did not close the file)" }
    );
    if let Some(t) = report.truncated_at {
        s += &format!("cut at byte {t}: every complete block before it was read\n");
    }
    for (o, w) in &report.corrupt {
        s += &format!("corrupt block at byte {o}: {w} (skipped)\n");
    }
    s += "records:\n";
    for r in &records {
        let c = counts.get(&r.id).map_or(0, |c| c.0);
        let fields = match &r.schema {
            Some(tlog::schema::Schema::Object(f)) => f.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", "),
            Some(_) => "(not an object)".into(),
            None => format!("(schema unreadable: {})", r.schema_error.clone().unwrap_or_default()),
        };
        s += &format!("  {:>3} {:<20} {:>9} items   {}\n", r.id, r.name, c, fields);
    }
    Ok(s.trim_end().to_string())
}

/// Seconds on the command line: below 1e9 they count from the first item of the log;
/// above, they are seconds since the UNIX epoch.
fn to_us(reader: &FileReader, t: Option<f64>) -> Result<Option<i64>, String> {
    let Some(t) = t else { return Ok(None) };
    if !t.is_finite() {
        return Err(format!("{t} is not a time: give seconds from the start of the log"));
    }
    if t >= 1e9 {
        return Ok(Some((t * 1e6) as i64));
    }
    let start = reader
        .items(ItemFilter::default())
        .filter_map(Result::ok)
        .find_map(|i| i.timestamp_us)
        .ok_or("the log has no timestamped items to count from")?;
    Ok(Some(start + (t * 1e6) as i64))
}

/// `rtloop log dump`: one JSON object per line.
pub fn dump(
    path: &Path,
    record: Option<&str>,
    from: Option<f64>,
    to: Option<f64>,
    out: &mut impl Write,
) -> Result<(), String> {
    let reader = open(path)?;
    let records = reader.records();
    if let Some(name) = record {
        if !records.iter().any(|r| r.name == name) {
            let names: Vec<&str> = records.iter().map(|r| r.name.as_str()).collect();
            return Err(format!("no record named '{name}' in {}: it has {}", path.display(), names.join(", ")));
        }
    }
    let filter =
        ItemFilter { record: record.map(str::to_string), from_us: to_us(&reader, from)?, to_us: to_us(&reader, to)? };
    let names: BTreeMap<u64, String> = records.iter().map(|r| (r.id, r.name.clone())).collect();
    for item in reader.items(filter) {
        let line = match item {
            Ok(it) => {
                let value = reader
                    .decode_item(&it)
                    .map(|v| v.to_json())
                    .unwrap_or_else(|e| json!({"decode_error": e.to_string()}));
                json!({"record": names.get(&it.record_id), "time": it.timestamp_us.map(|t| t as f64 * 1e-6), "offset": it.offset, "value": value})
            }
            Err(e) => json!({"error": e.to_string(), "offset": tlog::reader::error_offset(&e)}),
        };
        if writeln!(out, "{line}").is_err() {
            break; // e.g. `| head`
        }
    }
    Ok(())
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

/// The record to export when none is named: `cycle` (rtloop's), else the only record.
fn default_record(reader: &FileReader) -> Result<String, String> {
    let records = reader.records();
    if records.iter().any(|r| r.name == "cycle") {
        return Ok("cycle".into());
    }
    let data: Vec<&str> = records
        .iter()
        .filter(|r| r.last_data_offset.is_some() || !reader.has_index())
        .map(|r| r.name.as_str())
        .collect();
    match data.as_slice() {
        [one] => Ok(one.to_string()),
        _ => Err(format!("say which record to export with --record NAME: the log has {}", data.join(", "))),
    }
}

/// `rtloop log export`.
pub fn export(path: &Path, csv: Option<&Path>, mcap: Option<&Path>, record: Option<&str>) -> Result<String, String> {
    let reader = open(path)?;
    match (csv, mcap) {
        (Some(out), None) => {
            let record = match record {
                Some(r) => r.to_string(),
                None => default_record(&reader)?,
            };
            let file = std::fs::File::create(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
            let bar = progress_bar("csv");
            let rows = tlog::export::to_csv(&reader, &record, file, bar.as_ref()).map_err(|e| e.to_string())?;
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            Ok(format!("{}: {rows} rows of record '{record}'", out.display()))
        }
        (None, Some(out)) => {
            let file = std::fs::File::create(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
            let bar = progress_bar("mcap");
            let st = tlog::export::to_mcap(&reader, std::io::BufWriter::new(file), bar.as_ref())
                .map_err(|e| e.to_string())?;
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            Ok(format!("{}: {} messages on {} channels", out.display(), st.messages, st.channels))
        }
        _ => Err("give exactly one of --csv OUT or --mcap OUT".into()),
    }
}

/// `rtloop log plot`.
pub fn plot(path: &Path, fields: &str, out: &Path) -> Result<String, String> {
    if !out.extension().is_some_and(|e| e.eq_ignore_ascii_case("png")) {
        return Err(format!("--out {}: plots are written as PNG; give a path ending in .png", out.display()));
    }
    let reader = open(path)?;
    let list: Vec<&str> = fields.split(',').map(str::trim).filter(|f| !f.is_empty()).collect();
    if list.is_empty() {
        return Err("--fields needs at least one field, e.g. --fields cycle.cycle_us,cycle.servo.0.position".into());
    }
    tlog::plot::plot(&reader, &list, out, (1200, 700)).map_err(|e| e.to_string())?;
    Ok(format!("{}: {} series", out.display(), list.len()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso_dates() {
        assert_eq!(super::iso(1_583_798_400_000_000), "2020-03-10T00:00:00.000000Z");
        assert_eq!(super::iso(0), "1970-01-01T00:00:00.000000Z");
    }
}
