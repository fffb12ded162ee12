//! `rtloop log render`: a pushed run of the built-in quadruped drawn by MuJoCo's offscreen
//! renderer, frame by frame, and the robot found in each frame where the log says it was.
//! The camera looks straight down from above the body's first logged position, so a point at
//! (x, y) on the torso's top face shows at a pixel that perspective projection gives exactly;
//! the torso is the only orange thing in the picture. Skips (visibly) where no EGL context can
//! be had.

use crate::support::*;
use serde_json::Value as Json;
use std::path::Path;

/// The built-in quadruped's torso is a box 0.10 m high around the body's origin.
const TORSO_HALF_HEIGHT_M: f64 = 0.05;
/// MuJoCo's default vertical field of view (the built-in model sets none).
const FOVY_DEG: f64 = 45.0;

/// A pushed run with physics, logged; the `body` items' (time s, position).
fn pushed_run(scratch: &Scratch) -> (std::path::PathBuf, Vec<(f64, [f64; 3])>) {
    let log = scratch.path("run.tlog");
    crate::physics::logged_pushed_run(&log, "4", "2:0,40,0:0.2");
    let o = rtloop(&["log", "dump", log.to_str().unwrap(), "--record", "body"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bodies = stdout(&o)
        .lines()
        .map(|l| {
            let v: Json = serde_json::from_str(l).unwrap();
            let p = &v["value"]["position_m"];
            (v["time"].as_f64().unwrap(), [0, 1, 2].map(|k| p[k].as_f64().unwrap()))
        })
        .collect();
    (log, bodies)
}

/// Render, or None (skipped) when this machine gives MuJoCo no OpenGL context.
fn render(log: &Path, out: &Path, extra: &[&str]) -> Option<String> {
    let mut args = vec!["log", "render", log.to_str().unwrap(), "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = rtloop(&args);
    if stderr(&o).contains("found no OpenGL context") {
        rtloop_testkit::skip(&format!("rtloop log render: {}", stderr(&o).trim()));
        return None;
    }
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    Some(stdout(&o))
}

/// (width, height, RGB) of a PNG.
fn read_png(path: &Path) -> (usize, usize, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    (info.width as usize, info.height as usize, buf)
}

/// The centroid (column, row) of the orange pixels, and how many there are.
fn orange_centroid((w, _h, rgb): &(usize, usize, Vec<u8>)) -> (f64, f64, usize) {
    let (mut sx, mut sy, mut n) = (0.0, 0.0, 0usize);
    for (i, p) in rgb.chunks_exact(3).enumerate() {
        let (r, g, b) = (f64::from(p[0]), f64::from(p[1]), f64::from(p[2]));
        if r > 90.0 && r > 1.5 * g && r > 2.5 * b {
            sx += (i % w) as f64;
            sy += (i / w) as f64;
            n += 1;
        }
    }
    (sx / n.max(1) as f64, sy / n.max(1) as f64, n)
}

#[test]
fn rendered_frames_show_the_robot_where_the_log_says_it_was() {
    let scratch = Scratch::new("render-frames");
    let (log, bodies) = pushed_run(&scratch);
    let frames = scratch.path("frames");
    let (fps, distance) = (2.0, 1.5);
    let Some(said) = render(
        &log,
        &frames,
        &["--fps", "2", "--size", "480x360", "--azimuth", "90", "--elevation", "-90", "--distance", "1.5"],
    ) else {
        return;
    };
    assert!(said.contains("9 frames of 480x360"), "{said}");
    let (t0, p0) = bodies[0];
    let focal = 180.0 / (FOVY_DEG.to_radians() / 2.0).tan();
    let mut seen = Vec::new();
    for k in 0..9 {
        // The frame of time k / fps: the first body item at or after it.
        let (_, p) = *bodies.iter().find(|(t, _)| *t >= t0 + k as f64 / fps - 1e-9).unwrap();
        let image = read_png(&frames.join(format!("frame-{k:06}.png")));
        assert_eq!((image.0, image.1), (480, 360));
        let (col, row, n) = orange_centroid(&image);
        assert!(n > 500, "frame {k}: the torso is in the picture ({n} orange pixels)");
        // Looking down (-z) with +y up the picture and +x to the right, from `distance` above
        // the first position.
        let depth = p0[2] + distance - (p[2] + TORSO_HALF_HEIGHT_M);
        let want = (240.0 + focal * (p[0] - p0[0]) / depth, 180.0 - focal * (p[1] - p0[1]) / depth);
        assert!(
            (col - want.0).abs() < 8.0 && (row - want.1).abs() < 8.0,
            "frame {k}: the torso is at ({col:.1}, {row:.1}) px, the log puts it at ({:.1}, {:.1}) (body at {p:?})",
            want.0,
            want.1
        );
        seen.push((col, row));
    }
    // The push moved it across the picture: a frame that ignored the log would not.
    let moved = (seen[8].1 - seen[0].1).abs().max((seen[8].0 - seen[0].0).abs());
    assert!(moved > 30.0, "the body moved {moved:.1} px: {seen:?}");
}

#[test]
fn a_run_renders_to_an_mp4_through_ffmpeg() {
    if let Err(why) = apt_packages(&["ffmpeg"]) {
        rtloop_testkit::skip(&format!("an MP4 needs ffmpeg: {why}"));
        return;
    }
    let scratch = Scratch::new("render-mp4");
    let (log, _) = pushed_run(&scratch);
    let mp4 = scratch.path("run.mp4");
    let Some(said) = render(&log, &mp4, &["--fps", "10", "--size", "320x240", "--end", "2"]) else { return };
    assert!(said.contains("21 frames of 320x240"), "{said}");
    let probe = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries"])
        .args(["stream=codec_name,width,height,nb_read_frames", "-of", "json"])
        .arg(&mp4)
        .output()
        .unwrap();
    let v: Json = serde_json::from_slice(&probe.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&probe)));
    let s = &v["streams"][0];
    assert_eq!(
        (s["codec_name"].as_str(), s["width"].as_u64(), s["height"].as_u64()),
        (Some("h264"), Some(320), Some(240))
    );
    assert_eq!(s["nb_read_frames"], "21", "{v}");
    // Refused, one sentence each: an existing output, an odd size for H.264, a log without a body.
    let o = rtloop(&["log", "render", log.to_str().unwrap(), "-o", mp4.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("already exists; give --force"), "{}", stderr(&o));
    let o = rtloop(&[
        "log",
        "render",
        log.to_str().unwrap(),
        "-o",
        scratch.path("odd.mp4").to_str().unwrap(),
        "--size",
        "321x240",
    ]);
    assert!(stderr(&o).contains("even width and height"), "{}", stderr(&o));
    let plain = scratch.path("plain.tlog");
    assert!(rtloop(&["run", "--lockstep", "--duration", "0.1", "--log", plain.to_str().unwrap(), "--quiet"])
        .status
        .success());
    let o = rtloop(&["log", "render", plain.to_str().unwrap(), "-o", scratch.path("x").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("has no `model` record"), "{}", stderr(&o));
}
