//! `rtloop log render`: a run with physics, drawn from its log by MuJoCo's own offscreen
//! renderer (headless, EGL: [`rtloop_physics::render`]) — the model the `model` record names
//! (checked against the run's hashes), posed at each frame's time from the `body` items'
//! `qpos`. Frames go to a directory of PNGs, or to an MP4 through `ffmpeg` (Debian's `ffmpeg`
//! package: raw RGB frames piped to it, H.264 in a fragmented MP4, which it writes to a pipe).

use super::Outcome;
use std::path::Path;

/// What `rtloop log render` is asked for.
#[derive(Debug, Clone)]
pub struct RenderArgs {
    /// Frames per second of log time.
    pub fps: f64,
    /// `WIDTHxHEIGHT`.
    pub size: String,
    /// Camera azimuth, degrees (MuJoCo's: the heading the camera looks along).
    pub azimuth: f64,
    /// Camera elevation, degrees (negative: from above).
    pub elevation: f64,
    /// Camera distance, m (absent: from the model's size).
    pub distance: Option<f64>,
    /// Follow the body instead of a fixed camera aimed at where it starts.
    pub track: bool,
    /// From this many seconds after the log's first body item.
    pub start: Option<f64>,
    /// Up to this many seconds after it.
    pub end: Option<f64>,
    /// Replace the output.
    pub force: bool,
}

/// The frame rates accepted.
pub const FPS_RANGE: (f64, f64) = (0.1, 240.0);

fn parse_size(size: &str) -> Result<(u32, u32), String> {
    let bad = || format!("--size {size}: give WIDTHxHEIGHT in pixels, e.g. 640x480");
    let (w, h) = size.split_once(['x', 'X']).ok_or_else(bad)?;
    let (w, h) = (w.trim().parse::<u32>().map_err(|_| bad())?, h.trim().parse::<u32>().map_err(|_| bad())?);
    if w == 0 || h == 0 || w > 4096 || h > 4096 {
        return Err(format!("--size {size}: give a width and height from 1 to 4096 pixels, e.g. 640x480"));
    }
    Ok((w, h))
}

fn check(args: &RenderArgs) -> Result<(), String> {
    if !(args.fps.is_finite() && (FPS_RANGE.0..=FPS_RANGE.1).contains(&args.fps)) {
        return Err(format!("--fps {}: give frames per second from {} to {}", args.fps, FPS_RANGE.0, FPS_RANGE.1));
    }
    for (flag, v, range) in [("--azimuth", args.azimuth, 360.0), ("--elevation", args.elevation, 90.0)] {
        if !(v.is_finite() && v.abs() <= range) {
            return Err(format!("{flag} {v}: give degrees from -{range} to {range}"));
        }
    }
    if let Some(d) = args.distance {
        if !(d.is_finite() && (0.05..=1000.0).contains(&d)) {
            return Err(format!("--distance {d}: give metres from 0.05 to 1000"));
        }
    }
    for (flag, v) in [("--start", args.start), ("--end", args.end)] {
        if let Some(v) = v {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{flag} {v}: give seconds from the log's start, 0 or more"));
            }
        }
    }
    Ok(())
}

/// Without MuJoCo's renderer in this build.
#[cfg(not(feature = "render"))]
pub fn render(path: &Path, out: &Path, args: &RenderArgs) -> Result<Outcome, String> {
    check(args)?;
    parse_size(&args.size)?;
    let _ = (path, out, args.track, args.force);
    Err("rtloop log render: this rtloop was built without MuJoCo's renderer; run tools/mujoco once, then build \
         with `--features render` (docs/physics.md)"
        .into())
}

/// Where the frames go.
#[cfg(feature = "render")]
enum Sink {
    Pngs { dir: rtloop_output::OutputDir, written: u64 },
    Mp4 { ffmpeg: std::process::Child, copier: std::thread::JoinHandle<std::io::Result<rtloop_output::OutputFile>> },
}

/// Render the log at `path` into `out` (a `.mp4` file, else a new directory of PNGs).
#[cfg(feature = "render")]
pub fn render(path: &Path, out: &Path, args: &RenderArgs) -> Result<Outcome, String> {
    use rtloop::scene::Scene3d;
    use rtloop_physics::render::{Camera, Renderer};
    use rtloop_tlog::reader::ItemFilter;
    check(args)?;
    let (width, height) = parse_size(&args.size)?;
    let mp4 = out.extension().is_some_and(|e| e.eq_ignore_ascii_case("mp4"));
    if mp4 && (width % 2 != 0 || height % 2 != 0) {
        return Err(format!("--size {}: an MP4 (H.264) needs an even width and height, e.g. 640x480", args.size));
    }
    let (reader, identity) = super::open_input(path)?;
    let record = rtloop::scene::logged_model(&reader).ok_or_else(|| {
        format!(
            "{}: the log has no `model` record, so there is nothing to draw (only runs with --physics record their model)",
            path.display()
        )
    })?;
    let mut scene = Scene3d::for_model(&record).map_err(|e| format!("{}: {e}", path.display()))?;
    let body_id = reader
        .records()
        .iter()
        .find(|r| r.name == "body")
        .map(|r| r.id)
        .ok_or_else(|| format!("{}: the log has no `body` record: no pose to draw", path.display()))?;
    let bodies = || {
        reader
            .items(ItemFilter { record: Some("body".into()), ..Default::default() })
            .filter_map(Result::ok)
            .filter(move |i| i.record_id == body_id)
    };
    // The first body item: where the fixed camera looks, and time zero.
    let (t0_us, start_position) = bodies()
        .find_map(|i| {
            let ts = i.timestamp_us?;
            let v = reader.decode_item(&i).ok()?.to_json();
            Some((ts, rtloop::telemetry::BodyLog::from_record(&v)?.state.position_m))
        })
        .ok_or_else(|| format!("{}: the log's `body` record has no items: no pose to draw", path.display()))?;
    let imu_body =
        scene.frames().iter().position(|f| f.strip_prefix(rtloop::scene::FRAME_PREFIX) == Some(record.body.as_str()));
    let extent = scene.view_mut().extent();
    let camera = Camera {
        lookat: start_position,
        distance: args.distance.unwrap_or(2.0 * extent),
        azimuth: args.azimuth,
        elevation: args.elevation,
        track: if args.track { imu_body } else { None },
    };
    let mut renderer = Renderer::new(scene.view_mut(), width, height, camera).map_err(|e| e.to_string())?;

    let mut sink = if mp4 {
        let mut output = rtloop_output::OutputFile::create(out, Some(identity), args.force).map_err(|e| match e {
            rtloop_output::OutputError::Exists { dest } => format!(
                "-o {}: the file already exists; give --force to replace it, or choose another path",
                dest.display()
            ),
            other => format!("-o {other}"),
        })?;
        let mut ffmpeg = std::process::Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s"])
            .arg(format!("{width}x{height}"))
            .arg("-r")
            .arg(format!("{}", args.fps))
            .args(["-i", "-", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-movflags", "frag_keyframe+empty_moov"])
            .args(["-f", "mp4", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| {
                format!(
                    "-o {}: an MP4 is encoded by ffmpeg, which could not be started ({e}): install it (Debian: apt \
                     install ffmpeg), or give a directory to write PNG frames instead",
                    out.display()
                )
            })?;
        let mut stdout = ffmpeg.stdout.take().ok_or("ffmpeg gave no output pipe")?;
        let copier = std::thread::spawn(move || {
            std::io::copy(&mut stdout, output.file())?;
            Ok(output)
        });
        Sink::Mp4 { ffmpeg, copier }
    } else {
        let dir = rtloop_output::OutputDir::create(out, args.force, "png").map_err(|e| match e {
            rtloop_output::OutputError::Exists { dest } => format!(
                "-o {}: it already exists; give --force to replace an earlier render, or choose another path",
                dest.display()
            ),
            other => format!("-o {other}"),
        })?;
        Sink::Pngs { dir, written: 0 }
    };

    let frame_us = 1e6 / args.fps;
    let from_us = t0_us + (args.start.unwrap_or(0.0) * 1e6) as i64;
    let to_us = args.end.map_or(i64::MAX, |e| t0_us + (e * 1e6) as i64);
    let mut next_us = from_us as f64;
    let mut frames = 0u64;
    let started = std::time::Instant::now();
    let mut render_time = std::time::Duration::ZERO;
    for item in bodies() {
        let Some(ts) = item.timestamp_us else { continue };
        if (ts as f64) < next_us {
            continue;
        }
        if ts > to_us {
            break;
        }
        let Some(body) =
            reader.decode_item(&item).ok().and_then(|v| rtloop::telemetry::BodyLog::from_record(&v.to_json()))
        else {
            continue;
        };
        let n = usize::from(body.qpos_len);
        if scene.view_mut().pose(&body.qpos[..n]).is_none() {
            continue;
        }
        let t = std::time::Instant::now();
        let rgb = renderer.frame(scene.view_mut()).map_err(|e| e.to_string())?;
        render_time += t.elapsed();
        match &mut sink {
            Sink::Pngs { dir, written } => {
                let name = format!("frame-{:06}.png", *written);
                let file = dir.create_file(Path::new(&name)).map_err(|e| format!("-o {}: {e}", out.display()))?;
                rtloop_output::png::encode_rgb(rgb, (width, height), std::io::BufWriter::new(file))
                    .map_err(|e| format!("-o {}: {e}", out.display()))?;
                *written += 1;
            }
            Sink::Mp4 { ffmpeg, .. } => {
                use std::io::Write;
                let stdin = ffmpeg.stdin.as_mut().ok_or("ffmpeg's input closed")?;
                stdin.write_all(rgb).map_err(|e| format!("ffmpeg stopped taking frames: {e}"))?;
            }
        }
        frames += 1;
        // The next frame's time: skip those the log has no item for.
        while next_us <= ts as f64 {
            next_us += frame_us;
        }
    }
    if frames == 0 {
        return Err(format!("{}: no body item in the time asked for: nothing rendered", path.display()));
    }
    match sink {
        Sink::Pngs { dir, .. } => dir.commit().map_err(|e| format!("-o {e}"))?,
        Sink::Mp4 { mut ffmpeg, copier } => {
            drop(ffmpeg.stdin.take());
            let mut why = String::new();
            if let Some(mut err) = ffmpeg.stderr.take() {
                use std::io::Read;
                let _ = err.read_to_string(&mut why);
            }
            let status = ffmpeg.wait().map_err(|e| format!("ffmpeg: {e}"))?;
            let output = copier.join().map_err(|_| "the MP4 writer failed".to_string())?;
            if !status.success() {
                return Err(format!("ffmpeg failed ({status}): {}", why.trim()));
            }
            let output = output.map_err(|e| format!("-o {}: {e}", out.display()))?;
            output.commit().map_err(|e| format!("-o {e}"))?;
        }
    }
    let per_frame_ms = render_time.as_secs_f64() * 1e3 / frames as f64;
    let text = format!(
        "{}: {frames} frames of {width}x{height} at {} fps from {} ({:.1} ms a frame to draw; {:.1} s in all)",
        out.display(),
        args.fps,
        path.display(),
        per_frame_ms,
        started.elapsed().as_secs_f64()
    );
    Ok(Outcome { text, ..Default::default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_numbers_are_checked_with_one_sentence() {
        assert_eq!(parse_size("640x480").unwrap(), (640, 480));
        for bad in ["640", "0x480", "x", "640x-1", "5000x10"] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.starts_with(&format!("--size {bad}:")) && !e.contains('\n'), "{e}");
        }
        let ok = RenderArgs {
            fps: 30.0,
            size: "640x480".into(),
            azimuth: 90.0,
            elevation: -20.0,
            distance: None,
            track: false,
            start: None,
            end: None,
            force: false,
        };
        assert!(check(&ok).is_ok());
        assert!(check(&RenderArgs { fps: f64::NAN, ..ok.clone() }).unwrap_err().starts_with("--fps NaN"));
        assert!(check(&RenderArgs { elevation: -100.0, ..ok.clone() }).is_err());
        assert!(check(&RenderArgs { distance: Some(f64::INFINITY), ..ok.clone() }).is_err());
        assert!(check(&RenderArgs { start: Some(-1.0), ..ok }).is_err());
    }
}
