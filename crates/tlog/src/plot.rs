//! Quick-look plots: chosen fields of a log against time, rendered to a PNG.
//!
//! Fields are named `record.dotted.path`, the path being a column of [`Value::flatten`]
//! (`servo_status.servo.0.position`). Each field gets its own panel with its own y axis,
//! stacked over one shared time axis, so a position trace next to a cycle time is not flat;
//! [`PlotOptions::one_axis`] draws them all on one axis instead. Lines are drawn one pixel
//! wide: plotters' wide strokes overshoot sharp corners and leave the plot area (plotters
//! issue 549), and every line stays inside its panel's axes.
//!
//! Text needs a font (`rtloop_output::png::font_available`: DejaVu Sans, loaded at runtime); when it
//! is missing, the plot is drawn without any text (lines and grid only) instead of failing.
//!
//! The image is rendered in memory and encoded as PNG into any `Write`: this module never
//! opens a file (callers put the bytes in place with `rtloop_output::OutputFile`), and never panics
//! on a hostile log.

use std::collections::HashMap;
use std::io::Write;
use std::ops::Range;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::export::{decode_or_note, find_record, note_no_schema, unusable_schema};
use crate::format::TlogError;
use crate::reader::{FileReader, ItemFilter};
use crate::survey::Problem;
use crate::value::Value;

/// Image sizes accepted, per side in pixels.
pub const SIZE_RANGE: std::ops::RangeInclusive<u32> = 64..=8192;

/// Smallest panel height worth drawing, in pixels.
const MIN_PANEL_HEIGHT: u32 = 48;

/// How a plot is drawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlotOptions {
    /// (width, height) in pixels, each within [`SIZE_RANGE`].
    pub size: (u32, u32),
    /// Every field on one shared y axis (with a legend) instead of one panel per field.
    pub one_axis: bool,
}

impl Default for PlotOptions {
    fn default() -> Self {
        PlotOptions { size: (1200, 700), one_axis: false }
    }
}

/// What [`plot`] drew, and what it could not read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlotStats {
    /// Points drawn per field, in the order given.
    pub points: Vec<u64>,
    /// `(field, why)` for each field that had nothing to draw (its panel is empty): its
    /// record has no items, or its values have no timestamp or are not finite numbers.
    pub empty: Vec<(String, String)>,
    /// Damage met on the way (corrupt blocks, a cut, data without a schema, items of the
    /// plotted records that did not decode).
    pub problems: Vec<Problem>,
}

/// One plotted line: its label and `(seconds since the first plotted item, value)` points.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
}

/// Where one panel's axes ended up in the image (for checks that lines stay inside).
#[derive(Debug, Clone, PartialEq)]
struct Panel {
    /// Pixel columns and rows of the plotting area.
    pixels: (Range<i32>, Range<i32>),
    y_range: Range<f64>,
}

/// Plot each of `fields` (`"record.dotted.path"`) against time and write the PNG into
/// `out`. Time is in seconds from the earliest plotted item. Items without a timestamp, and
/// non-numeric or non-finite values, are left out; a field left with nothing is named in
/// [`PlotStats::empty`], and when no field has anything to draw nothing is written and the
/// error says why for each ([`TlogError::NothingToDraw`]) — like an export that would write no row.
pub fn plot(
    reader: &FileReader,
    fields: &[&str],
    options: &PlotOptions,
    out: impl Write,
) -> Result<PlotStats, TlogError> {
    check_options(fields, options)?;
    let (series, empty, problems) = collect_series(reader, fields)?;
    if empty.len() == series.len() {
        return Err(TlogError::NothingToDraw { empty, problems: problems.iter().map(|p| p.to_string()).collect() });
    }
    let (pixels, _panels) = render(&series, options, rtloop_output::png::font_available())?;
    let mut out = out;
    encode_png(&pixels, options.size, &mut out)?;
    out.flush()?;
    Ok(PlotStats { points: series.iter().map(|s| s.points.len() as u64).collect(), empty, problems })
}

fn check_options(fields: &[&str], options: &PlotOptions) -> Result<(), TlogError> {
    let (width, height) = options.size;
    if !SIZE_RANGE.contains(&width) || !SIZE_RANGE.contains(&height) {
        return Err(TlogError::PlotSize { width, height, min: *SIZE_RANGE.start(), max: *SIZE_RANGE.end() });
    }
    if fields.is_empty() {
        return Err(TlogError::NoFields);
    }
    let most = (height / MIN_PANEL_HEIGHT).max(1) as usize;
    if !options.one_axis && fields.len() > most {
        return Err(TlogError::TooManyPanels { fields: fields.len(), height, most });
    }
    Ok(())
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

/// One field being collected.
struct Wanted {
    record: String,
    path: String,
    /// Items of its record that had this column (whatever the value).
    values: u64,
    /// Of those, items without a timestamp.
    untimed: u64,
    points: Vec<(i64, f64)>,
}

/// The series of `fields`, `(field, why)` for each field with no point, and the damage met.
#[allow(clippy::type_complexity)]
fn collect_series(
    reader: &FileReader,
    fields: &[&str],
) -> Result<(Vec<Series>, Vec<(String, String)>, Vec<Problem>), TlogError> {
    let records = reader.records();
    let mut wanted: Vec<Wanted> = Vec::with_capacity(fields.len());
    for field in fields {
        let Some((record, path)) = split_field(reader, field) else {
            let records: Vec<String> = records.iter().map(|r| r.name.clone()).collect();
            return Err(TlogError::UnknownField { field: field.to_string(), records });
        };
        let info = find_record(reader, &record)?;
        if info.schema.is_none() {
            return Err(unusable_schema(&info));
        }
        wanted.push(Wanted { record, path: path.to_string(), values: 0, untimed: 0, points: Vec::new() });
    }
    // Which fields each record id feeds (a name may, in a hostile log, have several ids).
    let mut by_id: HashMap<u64, Vec<usize>> = HashMap::new();
    for record in &records {
        for (i, w) in wanted.iter().enumerate() {
            if w.record == record.name {
                by_id.entry(record.id).or_default().push(i);
            }
        }
    }
    let names: HashMap<u64, &str> = records.iter().map(|r| (r.id, r.name.as_str())).collect();
    let mut first_columns: HashMap<u64, Vec<String>> = HashMap::new();
    // Items met per plotted record id, decoded or not.
    let mut items: HashMap<u64, u64> = HashMap::new();
    let mut leaves = Vec::new();
    let mut surviving = reader.surviving_items(ItemFilter::default());
    while let Some(item) = surviving.next() {
        let problems = &mut surviving.problems;
        let Some(targets) = by_id.get(&item.record_id) else {
            if !names.contains_key(&item.record_id) {
                note_no_schema(problems, &item);
            }
            continue;
        };
        *items.entry(item.record_id).or_default() += 1;
        let name = names.get(&item.record_id).copied();
        let Some(value) = decode_or_note(reader, &item, name, problems) else { continue };
        leaves.clear();
        value.flatten("", &mut leaves);
        first_columns.entry(item.record_id).or_insert_with(|| leaves.iter().map(|(name, _)| name.clone()).collect());
        for &i in targets {
            let w = &mut wanted[i];
            let Some((_, leaf)) = leaves.iter().find(|(name, _)| *name == w.path) else { continue };
            w.values += 1;
            match (item.timestamp_us, leaf.as_f64().filter(|v| v.is_finite())) {
                (Some(t), Some(v)) => w.points.push((t, v)),
                (None, _) => w.untimed += 1,
                (Some(_), None) => {}
            }
        }
    }
    let problems = surviving.problems;
    let mut empty = Vec::new();
    for (w, field) in wanted.iter().zip(fields) {
        let ids: Vec<u64> = records.iter().filter(|r| r.name == w.record).map(|r| r.id).collect();
        let record_items: u64 = ids.iter().filter_map(|id| items.get(id)).sum();
        if record_items == 0 {
            // Nothing to check the field against, and nothing damaged: the record has no data.
            empty.push((field.to_string(), format!("has no values: record '{}' has no items", w.record)));
            continue;
        }
        if w.values > 0 {
            if w.points.is_empty() {
                let (n, untimed) = (w.values, w.untimed);
                let why = if untimed == n {
                    format!("has {n} value{} but no timestamp to draw them at", if n == 1 { "" } else { "s" })
                } else if untimed == 0 {
                    format!("has {n} value{} and none is a finite number", if n == 1 { "" } else { "s" })
                } else {
                    format!(
                        "has {n} values: {untimed} without a timestamp, the other {} not finite numbers",
                        n - untimed
                    )
                };
                empty.push((field.to_string(), why));
            }
            continue;
        }
        let available: Vec<String> = ids
            .iter()
            .filter_map(|id| first_columns.get(id))
            .flatten()
            .map(|column| format!("{}.{column}", w.record))
            .collect();
        return Err(TlogError::NoColumn {
            field: field.to_string(),
            record: w.record.clone(),
            path: w.path.clone(),
            available,
        });
    }
    let t0 = wanted.iter().flat_map(|w| w.points.iter().map(|&(t, _)| t)).min().unwrap_or(0);
    let series = wanted
        .into_iter()
        .zip(fields)
        .map(|(w, field)| Series {
            label: field.to_string(),
            points: w
                .points
                .into_iter()
                .map(|(t, v)| (Value::Duration(t.saturating_sub(t0)).as_f64().unwrap_or(0.0), v))
                .collect(),
        })
        .collect();
    Ok((series, empty, problems.into_vec()))
}

/// Draw the series into an RGB buffer: one panel per series (or one for all), sharing the
/// time axis. Returns the pixels and where each panel's axes are.
fn render(series: &[Series], options: &PlotOptions, with_text: bool) -> Result<(Vec<u8>, Vec<Panel>), TlogError> {
    let (width, height) = options.size;
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    let mut panels = Vec::new();
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let x_range = range_of(series.iter().flat_map(|s| s.points.iter().map(|p| p.0)));
        if options.one_axis || series.len() <= 1 {
            let y_range = range_of(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
            let indexed: Vec<(usize, &Series)> = series.iter().enumerate().collect();
            panels.push(draw_panel(&root, &indexed, x_range, y_range, true, with_text)?);
        } else {
            let areas = root.split_evenly((series.len(), 1));
            for (i, (area, line)) in areas.iter().zip(series).enumerate() {
                let y_range = range_of(line.points.iter().map(|p| p.1));
                let last = i + 1 == series.len();
                panels.push(draw_panel(area, &[(i, line)], x_range.clone(), y_range, last, with_text)?);
            }
        }
        root.present().map_err(draw_error)?;
    }
    Ok((pixels, panels))
}

/// Line colours: saturated, distinct, readable on white, none of them grey (grey is the
/// grid's and the text's).
const COLORS: [RGBColor; 9] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
    RGBColor(188, 189, 34),
];

/// The colour of series `i`.
fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

fn draw_panel(
    area: &DrawingArea<BitMapBackend, Shift>,
    series: &[(usize, &Series)],
    x_range: Range<f64>,
    y_range: Range<f64>,
    time_labels: bool,
    with_text: bool,
) -> Result<Panel, TlogError> {
    let mut builder = ChartBuilder::on(area);
    builder.margin(8);
    let single = match series {
        [(_, only)] => Some(*only),
        _ => None,
    };
    if with_text {
        builder.y_label_area_size(70).x_label_area_size(if time_labels { 35 } else { 18 });
        if let Some(line) = single {
            builder.caption(&line.label, (rtloop_output::png::FONT_FAMILY, 14));
        }
    }
    let mut chart = builder.build_cartesian_2d(x_range, y_range.clone()).map_err(draw_error)?;
    let mut mesh = chart.configure_mesh();
    mesh.y_labels(5);
    if !with_text {
        mesh.x_labels(0).y_labels(0);
    } else if time_labels {
        mesh.x_desc("time (s)");
    } else {
        mesh.x_label_formatter(&no_label);
    }
    mesh.draw().map_err(draw_error)?;
    let (lo, hi) = (y_range.start, y_range.end);
    for &(i, line) in series {
        let color = color(i);
        // Only values the range could not hold (beyond ±f64::MAX / 2) are moved, to its edge.
        let points = line.points.iter().map(|&(x, y)| (x, y.clamp(lo, hi)));
        let drawn = chart.draw_series(LineSeries::new(points, color.stroke_width(1))).map_err(draw_error)?;
        if with_text && single.is_none() {
            drawn.label(line.label.clone()).legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
        }
    }
    if with_text && single.is_none() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(draw_error)?;
    }
    Ok(Panel { pixels: chart.plotting_area().get_pixel_range(), y_range })
}

fn no_label(_: &f64) -> String {
    String::new()
}

/// An axis range covering every finite value, never empty (a flat line still gets some
/// height) and never wider than f64 can hold (extreme values would otherwise overflow the
/// range width and put every point off the axis).
fn range_of(values: impl Iterator<Item = f64>) -> Range<f64> {
    let (lo, hi) =
        values.filter(|v| v.is_finite()).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !lo.is_finite() || !hi.is_finite() {
        return 0.0..1.0;
    }
    let width = hi - lo;
    let pad = if width > 0.0 && width.is_finite() { width * 0.05 } else { lo.abs().max(1.0) * 0.5 };
    let (lo, hi) = (lo - pad, hi + pad);
    if (hi - lo).is_finite() && hi > lo {
        lo..hi
    } else {
        (-f64::MAX / 2.0)..(f64::MAX / 2.0)
    }
}

fn encode_png(pixels: &[u8], size: (u32, u32), out: impl Write) -> Result<(), TlogError> {
    rtloop_output::png::encode_rgb(pixels, size, out).map_err(|e| match e {
        rtloop_output::png::EncodingError::IoError(e) => TlogError::Io(e),
        other => TlogError::Png(other),
    })
}

fn draw_error<E: std::error::Error + Send + Sync + 'static>(
    e: plotters::drawing::DrawingAreaErrorKind<E>,
) -> TlogError {
    TlogError::Draw(Box::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_request_carries_what_was_asked() {
        let tiny = PlotOptions { size: (10, 600), ..PlotOptions::default() };
        let e = check_options(&["a.b"], &tiny).unwrap_err();
        assert!(matches!(e, TlogError::PlotSize { width: 10, height: 600, min: 64, max: 8192 }), "{e:?}");
        assert_eq!(e.to_string(), "a plot of 10×600 pixels cannot be drawn: give a width and height from 64 to 8192");
        assert!(matches!(check_options(&[], &PlotOptions::default()), Err(TlogError::NoFields)));
    }

    /// Every pixel of series `i`'s colour, as (x, y).
    fn pixels_of(pixels: &[u8], width: u32, i: usize) -> Vec<(i32, i32)> {
        let c = color(i);
        pixels
            .chunks_exact(3)
            .enumerate()
            .filter(|(_, p)| p == &[c.0, c.1, c.2])
            .map(|(n, _)| ((n as u32 % width) as i32, (n as u32 / width) as i32))
            .collect()
    }

    /// Every coloured pixel (text, grid and axes are grey), as (x, y).
    fn coloured(pixels: &[u8], width: u32) -> Vec<(i32, i32)> {
        pixels
            .chunks_exact(3)
            .enumerate()
            .filter(|(_, p)| p[0] != p[1] || p[1] != p[2])
            .map(|(n, _)| ((n as u32 % width) as i32, (n as u32 / width) as i32))
            .collect()
    }

    fn inside(panels: &[Panel], (x, y): (i32, i32)) -> bool {
        panels.iter().any(|p| p.pixels.0.contains(&x) && p.pixels.1.contains(&y))
    }

    /// 2 s at 1 kHz (less than a pixel per sample): a cycle time with one-sample spikes from
    /// about 700 to 30 000 µs, beside a position that moves by 0.03 — what a run log looks
    /// like, and what made wide strokes overshoot far outside the axes.
    fn spiky_and_small() -> Vec<Series> {
        let cycle =
            (0..2000).map(|k| (k as f64 * 0.001, if k % 7 == 0 { 30_000.0 } else { 700.0 + (k % 5) as f64 })).collect();
        let position = (0..2000).map(|k| (k as f64 * 0.001, 0.03 * (k as f64 * 0.005).sin())).collect();
        vec![
            Series { label: "cycle.cycle_us".into(), points: cycle },
            Series { label: "cycle.position".into(), points: position },
        ]
    }

    #[test]
    fn lines_stay_inside_their_panel_and_each_field_gets_its_own_axis() {
        let options = PlotOptions { size: (800, 500), one_axis: false };
        let with_font = rtloop_output::png::font_available();
        if !with_font {
            rtloop_testkit::skip(
                "needs the DejaVu Sans font to check panels with text: apt-get install fonts-dejavu-core",
            );
        }
        for with_text in [false, with_font] {
            let series = spiky_and_small();
            let (pixels, panels) = render(&series, &options, with_text).unwrap();
            assert_eq!(panels.len(), 2);
            let outside: Vec<(i32, i32)> =
                coloured(&pixels, 800).into_iter().filter(|&p| !inside(&panels, p)).collect();
            assert!(
                outside.is_empty(),
                "{} line pixels outside the axes, e.g. {:?}",
                outside.len(),
                &outside[..outside.len().min(5)]
            );
            for (i, panel) in panels.iter().enumerate() {
                let (xs, ys) = &panel.pixels;
                let drawn = pixels_of(&pixels, 800, i);
                assert!(!drawn.is_empty(), "series {i} drawn");
                for &(x, y) in &drawn {
                    assert!(xs.contains(&x) && ys.contains(&y), "series {i}: pixel ({x}, {y}) outside {xs:?} × {ys:?}");
                }
                // Its own axis: the trace spans most of its panel's height, whatever the
                // other field's magnitude.
                let rows = drawn.iter().map(|p| p.1).max().unwrap() - drawn.iter().map(|p| p.1).min().unwrap();
                assert!(rows as f64 > 0.8 * (ys.end - ys.start) as f64, "series {i} spans {rows} of {ys:?}");
            }
            assert!(panels[1].y_range.end < 1.0 && panels[0].y_range.end > 30_000.0, "{panels:?}");
        }
    }

    #[test]
    fn one_axis_is_still_inside_the_axes() {
        let options = PlotOptions { size: (800, 500), one_axis: true };
        let (pixels, panels) = render(&spiky_and_small(), &options, false).unwrap();
        assert_eq!(panels.len(), 1);
        for p in coloured(&pixels, 800) {
            assert!(inside(&panels, p), "line pixel {p:?} outside the axes {:?}", panels[0].pixels);
        }
    }

    #[test]
    fn extreme_and_empty_series_still_render() {
        let options = PlotOptions { size: (200, 200), one_axis: false };
        let series = vec![
            Series { label: "a".into(), points: vec![(0.0, -f64::MAX), (1.0, f64::MAX), (2.0, 0.0)] },
            Series { label: "b".into(), points: vec![] },
            Series { label: "c".into(), points: vec![(0.0, 5.0)] },
        ];
        let (pixels, panels) = render(&series, &options, false).unwrap();
        assert_eq!(panels.len(), 3);
        let mut png = Vec::new();
        encode_png(&pixels, options.size, &mut png).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    }

    #[test]
    fn ranges_are_never_empty_or_infinite() {
        assert_eq!(range_of(std::iter::empty()), 0.0..1.0);
        assert_eq!(range_of([2.0].into_iter()), 1.0..3.0);
        let wide = range_of([-f64::MAX, f64::MAX].into_iter());
        assert!((wide.end - wide.start).is_finite() && wide.end > wide.start);
        let r = range_of([1.0, 3.0, f64::NAN].into_iter());
        assert!(r.start < 1.0 && r.end > 3.0 && r.end < 3.2);
    }
}
