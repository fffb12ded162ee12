//! Quick-look plots: chosen fields of a log against time, rendered to a PNG.
//!
//! Fields are named `record.dotted.path`, the path being a column of [`Value::flatten`]
//! (`servo_status.servo.0.position`). Text needs a font; plotters is built without system
//! font lookup, so DejaVu Sans is loaded at runtime from its usual Debian path and, when it is
//! missing, the plot is drawn without any text (lines and grid only) instead of failing.
//! This module only reads the log and writes the one output file.

use std::io;
use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;

use crate::export::{find_record, not_found, unusable_schema};
use crate::format::TlogError;
use crate::reader::{FileReader, ItemFilter};
use crate::value::Value;

/// Where the plot font is looked for.
const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// How many available fields an "unknown field" error lists.
const SUGGESTIONS: usize = 8;

/// One plotted line: its label and `(seconds since the first plotted item, value)` points.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
}

/// Plot each of `fields` (`"record.dotted.path"`) against time into the PNG at `out`,
/// `size` = (width, height) in pixels. Time is in seconds from the earliest plotted item.
/// Items without a timestamp, and non-numeric or non-finite values, are left out.
pub fn plot(reader: &FileReader, fields: &[&str], out: &Path, size: (u32, u32)) -> Result<(), TlogError> {
    let series = collect_series(reader, fields)?;
    render(&series, out, size, font_available())
}

/// Register the plot font with plotters once per process; false if it could not be loaded.
fn font_available() -> bool {
    static LOADED: OnceLock<bool> = OnceLock::new();
    *LOADED.get_or_init(|| {
        let Ok(bytes) = std::fs::read(FONT_PATH) else { return false };
        // plotters keeps fonts for the life of the process and wants a 'static slice;
        // this runs at most once, so the leak is bounded.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
    })
}

/// Split `record.dotted.path` at the longest record name that prefixes it.
fn split_field<'f>(reader: &FileReader, field: &'f str) -> Option<(String, &'f str)> {
    reader
        .records()
        .into_iter()
        .filter_map(|r| {
            let rest = field.strip_prefix(r.name.as_str())?.strip_prefix('.')?;
            Some((r.name, rest))
        })
        .max_by_key(|(name, _)| name.len())
}

fn collect_series(reader: &FileReader, fields: &[&str]) -> Result<Vec<Series>, TlogError> {
    let mut raw: Vec<(String, Vec<(i64, f64)>)> = Vec::with_capacity(fields.len());
    for field in fields {
        let Some((record, path)) = split_field(reader, field) else {
            let names: Vec<String> = reader.records().into_iter().take(SUGGESTIONS).map(|r| r.name).collect();
            return Err(not_found(format!(
                "unknown field '{field}': no record name prefixes it; records: {}",
                names.join(", ")
            )));
        };
        let info = find_record(reader, &record)?;
        if info.schema.is_none() {
            return Err(unusable_schema(&info));
        }
        let mut points = Vec::new();
        let mut seen_column = false;
        let mut first_columns: Option<Vec<String>> = None;
        let mut leaves = Vec::new();
        for item in reader.items(ItemFilter { record: Some(record.clone()), ..ItemFilter::default() }) {
            let Ok(item) = item else { continue };
            let Ok(value) = reader.decode_item(&item) else { continue };
            leaves.clear();
            value.flatten("", &mut leaves);
            if first_columns.is_none() {
                first_columns = Some(leaves.iter().map(|(name, _)| format!("{record}.{name}")).collect());
            }
            let Some((_, leaf)) = leaves.iter().find(|(name, _)| name == path) else { continue };
            seen_column = true;
            if let (Some(t), Some(v)) = (item.timestamp_us, leaf.as_f64().filter(|v| v.is_finite())) {
                points.push((t, v));
            }
        }
        if !seen_column {
            let available = first_columns.unwrap_or_default();
            let shown: Vec<&str> = available.iter().take(SUGGESTIONS).map(String::as_str).collect();
            let more = if available.len() > SUGGESTIONS { ", …" } else { "" };
            return Err(not_found(format!(
                "unknown field '{field}' (record '{record}' has no column '{path}'); available: {}{more}",
                if shown.is_empty() { "none (record has no decodable items)".to_string() } else { shown.join(", ") }
            )));
        }
        raw.push((field.to_string(), points));
    }
    let t0 = raw.iter().flat_map(|(_, points)| points.iter().map(|&(t, _)| t)).min().unwrap_or(0);
    Ok(raw
        .into_iter()
        .map(|(label, points)| Series {
            label,
            points: points
                .into_iter()
                .map(|(t, v)| (Value::Duration(t.saturating_sub(t0)).as_f64().unwrap_or(0.0), v))
                .collect(),
        })
        .collect())
}

fn render(series: &[Series], out: &Path, size: (u32, u32), with_text: bool) -> Result<(), TlogError> {
    let (x_range, y_range) = ranges(series);
    let root = BitMapBackend::new(out, size).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(10);
    if with_text {
        builder.caption("telemetry", ("sans-serif", 20)).x_label_area_size(40).y_label_area_size(60);
    }
    let mut chart = builder.build_cartesian_2d(x_range, y_range).map_err(draw_error)?;
    let mut mesh = chart.configure_mesh();
    if with_text {
        mesh.x_desc("time (s)");
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(draw_error)?;
    for (i, line) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let drawn = chart
            .draw_series(LineSeries::new(line.points.iter().copied(), color.stroke_width(2)))
            .map_err(draw_error)?;
        if with_text {
            drawn.label(line.label.clone()).legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
        }
    }
    if with_text {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(draw_error)?;
    }
    root.present().map_err(draw_error)?;
    Ok(())
}

/// Axis ranges covering every point, never empty (a flat line still gets some height).
fn ranges(series: &[Series]) -> (std::ops::Range<f64>, std::ops::Range<f64>) {
    let points = || series.iter().flat_map(|s| s.points.iter());
    let span = |values: &mut dyn Iterator<Item = f64>| {
        let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if !lo.is_finite() || !hi.is_finite() {
            return 0.0..1.0;
        }
        let pad = if hi > lo { (hi - lo) * 0.05 } else { lo.abs().max(1.0) * 0.5 };
        (lo - pad)..(hi + pad)
    };
    (span(&mut points().map(|p| p.0)), span(&mut points().map(|p| p.1)))
}

fn draw_error<E: std::error::Error + Send + Sync>(e: plotters::drawing::DrawingAreaErrorKind<E>) -> TlogError {
    TlogError::Io(io::Error::other(format!("plot: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_without_a_font() {
        let dir = std::env::temp_dir().join(format!("tlog-plot-nofont-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("plot.png");
        let series = vec![Series { label: "a.b".into(), points: vec![(0.0, 1.0), (1.0, 3.0), (2.0, 2.0)] }];
        render(&series, &out, (320, 200), false).unwrap();
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        std::fs::remove_dir_all(&dir).ok();
    }
}
