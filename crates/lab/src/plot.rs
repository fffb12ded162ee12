//! Plots of an experiment's samples as PNG images.
//!
//! One run: a histogram over log-spaced microsecond buckets (the same buckets as the text
//! histogram) with log scales on both axes, so the rare slow samples that matter for real
//! time stay visible next to the thousands of fast ones. Several runs: the histograms overlaid
//! in distinct colours, and below them p50 / p99 / max bars per run, side by side.
//!
//! Text needs a font (`rtloop_output::png::font_available`: DejaVu Sans, loaded at run time when
//! installed); without it the plot is drawn without any text rather than failing.
//!
//! The image is drawn in memory, encoded with `rtloop_output::png`, and written like the CSV
//! ([`crate::report::create_output`]): under a fresh name beside `path`, renamed onto it when
//! complete; an existing `path` only with `force`, and only when it is a regular file.
//!
//! What it must never do: fail for want of a font, write anything but a PNG to `path`, or
//! leave a half-written file.

use crate::report::{log_buckets, Outcome, Summary};
use plotters::prelude::*;
use std::path::Path;

use rtloop_output::png::FONT_FAMILY;
/// Run colours, distinguishable and readable on white.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Draw `outcome` to `path` (PNG): a histogram for one run, overlaid histograms and
/// percentile bars for several. `force`: an existing regular file at `path` may be replaced.
pub fn plot(outcome: &Outcome, path: &Path, force: bool) -> Result<(), crate::Error> {
    let runs: Vec<_> = outcome.runs.iter().filter(|r| !r.samples_ns.is_empty()).collect();
    if runs.is_empty() {
        return Err(crate::Error::NothingToPlot);
    }
    let text = rtloop_output::png::font_available();
    let fail = |source: DrawError| crate::Error::Draw { path: path.to_path_buf(), source };
    let (width, height) = (1200u32, if runs.len() == 1 { 600u32 } else { 1000 });
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    {
        // Drawing into memory cannot fail for I/O reasons; the file is written below.
        let root = BitMapBackend::with_buffer(&mut rgb, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| fail(e.into()))?;
        if runs.len() == 1 {
            histograms(&root, &outcome.experiment, &runs, text).map_err(fail)?;
        } else {
            let (top, bottom) = root.split_vertically(height / 2);
            histograms(&top, &outcome.experiment, &runs, text).map_err(fail)?;
            percentile_bars(&bottom, &runs, text).map_err(fail)?;
        }
        root.present().map_err(|e| fail(e.into()))?;
    }
    write_png(path, &rgb, width, height, force)
}

/// Encode 8-bit RGB pixels as a PNG file at `path`.
fn write_png(path: &Path, rgb: &[u8], width: u32, height: u32, force: bool) -> Result<(), crate::Error> {
    let mut out = crate::report::create_output("--plot", path, force)?;
    let fail = |source: rtloop_output::png::EncodingError| crate::Error::WritePng { path: path.to_path_buf(), source };
    rtloop_output::png::encode_rgb(rgb, (width, height), std::io::BufWriter::new(out.file())).map_err(fail)?;
    out.commit().map_err(|e| crate::report::output_error("--plot", path, e))
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// What drawing failed with: the drawing library's error, whose type is generic over the
/// backend.
type DrawError = Box<dyn std::error::Error + Send + Sync>;

/// Log-log histogram: bars for a single run, step outlines for several (so they overlap
/// readably).
fn histograms(area: &Area, title: &str, runs: &[&crate::report::Run], text: bool) -> Result<(), DrawError> {
    let all: Vec<u64> = runs.iter().flat_map(|r| r.samples_ns.iter().copied()).collect();
    let span = log_buckets(&all);
    let (Some(first), Some(last)) = (span.first(), span.last()) else {
        return Ok(());
    };
    // Bucket 0 starts at 0 µs, which a log axis cannot show: start it at 0.5 µs instead.
    let x_lo = (first.lo_ns as f64 / 1000.0).max(0.5);
    let x_hi = last.hi_ns as f64 / 1000.0;
    let per_run: Vec<_> = runs.iter().map(|r| log_buckets(&r.samples_ns)).collect();
    let peak = per_run.iter().flatten().map(|b| b.count).max().unwrap_or(1) as f64;
    // Counts of 0 sit on the floor of the log axis.
    let floor = 0.5;
    let mut builder = ChartBuilder::on(area);
    builder.margin(15);
    if text {
        builder.caption(format!("{title}: latency histogram"), (FONT_FAMILY, 24)).x_label_area_size(45);
        builder.y_label_area_size(70);
    }
    let mut chart = builder.build_cartesian_2d((x_lo..x_hi).log_scale(), (floor..peak * 2.0).log_scale())?;
    if text {
        chart.configure_mesh().x_desc("latency (us)").y_desc("samples (log)").label_style((FONT_FAMILY, 14)).draw()?;
    }
    let x = |ns: u64| (ns as f64 / 1000.0).max(x_lo);
    for (i, (run, buckets)) in runs.iter().zip(&per_run).enumerate() {
        let c = colour(i);
        if runs.len() == 1 {
            let bars = buckets
                .iter()
                .filter(|b| b.count > 0)
                .map(|b| Rectangle::new([(x(b.lo_ns), floor), (x(b.hi_ns), b.count as f64)], c.mix(0.8).filled()));
            chart.draw_series(bars)?;
        } else {
            let mut steps = Vec::with_capacity(buckets.len() * 2 + 2);
            for b in buckets {
                let y = (b.count as f64).max(floor);
                steps.push((x(b.lo_ns), y));
                steps.push((x(b.hi_ns), y));
            }
            let series = chart.draw_series(LineSeries::new(steps, c.stroke_width(2)))?;
            if text {
                series
                    .label(run.label.clone())
                    .legend(move |(px, py)| PathElement::new(vec![(px, py), (px + 20, py)], c.stroke_width(3)));
            }
        }
    }
    if text && runs.len() > 1 {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font((FONT_FAMILY, 14))
            .draw()?;
    }
    Ok(())
}

/// Per run, side by side: p50, p99 and max bars (log µs), in the run's colour, lighter to
/// darker.
fn percentile_bars(area: &Area, runs: &[&crate::report::Run], text: bool) -> Result<(), DrawError> {
    let summaries: Vec<Summary> = runs.iter().map(|r| Summary::of(&r.samples_ns)).collect();
    let lo = summaries.iter().map(|s| s.min_us).fold(f64::INFINITY, f64::min).max(0.1) / 2.0;
    let hi = summaries.iter().map(|s| s.max_us).fold(0.0, f64::max).max(lo * 4.0) * 2.0;
    let n = runs.len() as f64;
    let mut builder = ChartBuilder::on(area);
    builder.margin(15);
    if text {
        builder.caption("p50 / p99 / max per run", (FONT_FAMILY, 20)).y_label_area_size(70).x_label_area_size(10);
    }
    let mut chart = builder.build_cartesian_2d(0.0..n, (lo..hi).log_scale())?;
    if text {
        chart
            .configure_mesh()
            .disable_x_mesh()
            .disable_x_axis()
            .y_desc("latency (us, log)")
            .label_style((FONT_FAMILY, 14))
            .draw()?;
    }
    const BAR_WIDTH: f64 = 0.22;
    for (i, s) in summaries.iter().enumerate() {
        let c = colour(i);
        for (j, (value, shade)) in [(s.p50_us, 0.45), (s.p99_us, 0.7), (s.max_us, 1.0)].into_iter().enumerate() {
            let left = i as f64 + 0.12 + j as f64 * (BAR_WIDTH + 0.03);
            let bar = Rectangle::new([(left, lo), (left + BAR_WIDTH, value.max(lo))], c.mix(shade).filled());
            chart.draw_series(std::iter::once(bar))?;
        }
        if text {
            let caption = format!("{}: {:.1} / {:.1} / {:.1}", runs[i].label, s.p50_us, s.p99_us, s.max_us);
            let style = TextStyle::from((FONT_FAMILY, 13).into_font()).color(&BLACK);
            let position = (i as f64 + 0.05, hi / 1.3);
            chart.draw_series(std::iter::once(Text::new(caption, position, style)))?;
        }
    }
    Ok(())
}
