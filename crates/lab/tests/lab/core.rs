//! The lab's core: summaries, histograms, JSON and CSV reports, the wakeup experiment, the
//! load generator, plots and conditions.

use rtloop_lab::conditions::Conditions;
use rtloop_lab::report::{render, text_histogram, write_csv, CommonOptions, Outcome, Run, Summary};
use rtloop_rt::setup::{Policy, RtSettings};
use std::path::PathBuf;

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rtloop-lab-core-{}-{name}", std::process::id()))
}

fn run(label: &str, size: Option<usize>, method: Option<&str>, samples_ns: Vec<u64>) -> Run {
    Run { label: label.into(), size, method: method.map(String::from), samples_ns }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * b.abs().max(1.0)
}

#[test]
fn summary_of_known_samples() {
    // 1..=1000 µs: nearest-rank percentiles are exact samples.
    let samples: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
    let s = Summary::of(&samples);
    assert_eq!(s.samples, 1000);
    assert!(close(s.min_us, 1.0), "{s:?}");
    assert!(close(s.max_us, 1000.0), "{s:?}");
    assert!(close(s.p50_us, 500.0), "{s:?}");
    assert!(close(s.p90_us, 900.0), "{s:?}");
    assert!(close(s.p99_us, 990.0), "{s:?}");
    assert!(close(s.p999_us, 999.0), "{s:?}");
    assert!(close(s.mean_us, 500.5), "{s:?}");
    // Population std of 1..=n is sqrt((n²−1)/12).
    assert!(close(s.std_us, ((1000.0f64 * 1000.0 - 1.0) / 12.0).sqrt()), "{s:?}");

    let s = Summary::of(&[2000, 4000, 4000, 4000, 5000, 5000, 7000, 9000]);
    assert!(close(s.mean_us, 5.0) && close(s.std_us, 2.0), "{s:?}");
    assert!(close(s.p50_us, 4.0) && close(s.p99_us, 9.0) && close(s.min_us, 2.0), "{s:?}");

    assert_eq!(Summary::of(&[]).samples, 0);
    let one = Summary::of(&[1500]);
    assert!(close(one.p50_us, 1.5) && close(one.p999_us, 1.5) && close(one.std_us, 0.0), "{one:?}");
}

#[test]
fn histogram_lists_every_samples_bucket() {
    let samples = [300, 1_000, 1_100, 2_400, 55_000, 55_500, 1_200_000];
    let text = text_histogram(&samples, 30);
    let buckets = rtloop_lab::report::log_buckets(&samples);
    for &s in &samples {
        let b = buckets.iter().find(|b| b.lo_ns <= s && s < b.hi_ns).unwrap_or_else(|| panic!("no bucket for {s}"));
        assert!(b.count > 0);
    }
    assert_eq!(buckets.iter().map(|b| b.count).sum::<u64>(), samples.len() as u64);
    // One line per bucket, first and last hold the extremes, counts printed.
    assert_eq!(text.lines().count(), buckets.len());
    assert!(text.lines().next().unwrap().contains("[0.000, 1.000) us"), "{text}");
    assert!(text.lines().next_back().unwrap().contains("1000"), "{text}");
    let line_55 = text.lines().find(|l| l.contains("[50.0, 63.0) us")).expect("55 us bucket");
    assert!(line_55.contains(" 2 ") && line_55.contains('#'), "{line_55}");
    assert_eq!(text_histogram(&[], 30), "");
}

fn sample_conditions() -> Conditions {
    let common = CommonOptions { load: 2, ..CommonOptions::default() };
    Conditions::gather(&common)
}

fn last_json(text: &str) -> serde_json::Value {
    let last = text.lines().next_back().expect("output");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {last}"))
}

const SUMMARY_KEYS: [&str; 9] =
    ["min_us", "mean_us", "std_us", "p50_us", "p90_us", "p99_us", "p999_us", "max_us", "samples"];
const CONDITION_KEYS: [&str; 9] =
    ["kernel", "preemption", "policy", "priority", "affinity", "load", "timer_slack_ns", "governor", "idle_driver"];

#[test]
fn render_json_single_run() {
    let outcome = Outcome {
        experiment: "wakeup".into(),
        runs: vec![run("wakeup 1000 us period", None, None, vec![1000, 2000, 3000])],
        warnings: vec!["scheduler: refused".into()],
        ..Outcome::default()
    };
    let text = render(&outcome, &sample_conditions(), true);
    assert!(text.contains("wakeup 1000 us period") && text.contains("p99.9"), "{text}");
    assert!(text.contains("warning: scheduler: refused"), "{text}");
    let v = last_json(&text);
    for k in SUMMARY_KEYS {
        assert!(v.get(k).is_some(), "missing {k}: {v}");
    }
    assert_eq!(v["samples"], 3);
    assert_eq!(v["p50_us"], 2.0);
    assert_eq!(v["experiment"], "wakeup");
    for k in CONDITION_KEYS {
        assert!(v["conditions"].get(k).is_some(), "missing conditions.{k}: {v}");
    }
    assert_eq!(v["conditions"]["load"], 2);
    // Without --json no line is JSON.
    let plain = render(&outcome, &sample_conditions(), false);
    assert!(serde_json::from_str::<serde_json::Value>(plain.lines().next_back().unwrap()).is_err());
}

#[test]
fn render_json_several_runs() {
    let outcome = Outcome {
        experiment: "udp-echo".into(),
        runs: vec![
            run("epoll 64 B", Some(64), Some("epoll"), vec![10_000, 12_000]),
            run("busy-poll 64 B", Some(64), Some("busy-poll"), vec![4_000, 5_000, 6_000]),
        ],
        warnings: vec![],
        ..Outcome::default()
    };
    let text = render(&outcome, &sample_conditions(), true);
    let v = last_json(&text);
    assert_eq!(v["experiment"], "udp-echo");
    let results = v["results"].as_array().expect("results list");
    assert_eq!(results.len(), 2);
    for r in results {
        for k in SUMMARY_KEYS.iter().chain(&["size", "method", "label"]) {
            assert!(r.get(*k).is_some(), "missing {k}: {r}");
        }
    }
    assert_eq!(results[1]["method"], "busy-poll");
    assert_eq!(results[1]["size"], 64);
    assert_eq!(results[1]["samples"], 3);
    assert!(v["conditions"]["kernel"].is_string());
}

#[test]
fn csv_has_a_header_and_one_line_per_sample() {
    let outcome = Outcome {
        experiment: "event".into(),
        runs: vec![
            run("eventfd", None, Some("eventfd"), vec![1_234, 5_000]),
            run("pipe, threads", Some(8), Some("pipe"), vec![7, 8, 9]),
        ],
        warnings: vec![],
        ..Outcome::default()
    };
    let path = temp_path("samples.csv");
    write_csv(&outcome, &path, false).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1 + 5, "{text}");
    assert_eq!(lines[0], "label,size,method,sample_us");
    assert_eq!(lines[1], "eventfd,,eventfd,1.234");
    assert_eq!(lines[3], "\"pipe, threads\",8,pipe,0.007");
}

#[test]
fn wakeup_records_every_sample() {
    let common = CommonOptions {
        rt: RtSettings { policy: Policy::Other, ..RtSettings::default() },
        samples: 500,
        ..CommonOptions::default()
    };
    let outcome = rtloop_lab::wakeup::wakeup(&common, 1000).unwrap();
    assert_eq!(outcome.experiment, "wakeup");
    assert_eq!(outcome.runs.len(), 1);
    assert_eq!(outcome.runs[0].samples_ns.len(), 500);
    // Latencies are unsigned by construction; what matters is that none is absurd (a wrapped
    // subtraction would be near u64::MAX).
    assert!(outcome.runs[0].samples_ns.iter().all(|&s| s < 10_000_000_000));
}

#[test]
fn load_starts_and_stops_its_workers() {
    let mut none = rtloop_lab::load::Load::start(0).unwrap();
    assert_eq!(none.workers(), 0);
    assert!(none.stop().is_empty());

    let mut load = rtloop_lab::load::Load::start(2).unwrap();
    let start = std::time::Instant::now();
    while (load.running_workers() < 2 || load.rounds() < 4) && start.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(load.running_workers(), 2);
    assert!(load.rounds() >= 4, "workers did no work");
    load.stop();
    assert_eq!(load.running_workers(), 0);
    let rounds = load.rounds();
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(load.rounds(), rounds, "a worker kept running after stop");
}

fn assert_png(path: &std::path::Path) {
    let bytes = std::fs::read(path).unwrap();
    assert!(bytes.starts_with(&[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a]), "not a PNG");
    assert!(bytes.len() > 1000);
}

#[test]
fn plot_writes_png_for_one_and_several_runs() {
    let spread =
        |base: u64| (0..2000u64).map(move |i| base + (i * 7919) % 40_000 + if i % 500 == 0 { 900_000 } else { 0 });
    let one = Outcome {
        experiment: "wakeup".into(),
        runs: vec![run("wakeup", None, None, spread(3_000).collect())],
        warnings: vec![],
        ..Outcome::default()
    };
    let path = temp_path("one.png");
    rtloop_lab::plot::plot(&one, &path, false).unwrap();
    assert_png(&path);
    std::fs::remove_file(&path).unwrap();

    let several = Outcome {
        experiment: "udp-echo".into(),
        runs: vec![
            run("blocking 64 B", Some(64), Some("blocking"), spread(20_000).collect()),
            run("epoll 64 B", Some(64), Some("epoll"), spread(25_000).collect()),
            run("busy-poll 64 B", Some(64), Some("busy-poll"), spread(4_000).collect()),
        ],
        warnings: vec![],
        ..Outcome::default()
    };
    let path = temp_path("several.png");
    rtloop_lab::plot::plot(&several, &path, false).unwrap();
    assert_png(&path);
    std::fs::remove_file(&path).unwrap();

    assert!(rtloop_lab::plot::plot(&Outcome::default(), &temp_path("empty.png"), false).is_err());
}

#[test]
fn conditions_never_panic_and_name_the_kernel() {
    let c = Conditions::system();
    assert!(!c.kernel.is_empty() && c.kernel != "unknown", "{c:?}");
    assert_eq!(c.policy, "other");
    assert!(!c.preemption.is_empty());
    let line = c.one_line();
    assert!(line.contains("governor") && line.contains("idle"), "{line}");
    if c.governor.is_none() {
        assert!(line.contains("governor absent"), "{line}");
    }
    let json = serde_json::to_value(&c).unwrap();
    assert!(json["governor"].is_null() || json["governor"].is_string());
}
