//! The examples in `crates/rtloop/examples/` as their users meet them: each runs on the
//! simulated robot and says what it did, refuses a bad `--duration` in one sentence (exit 2),
//! and its controller never allocates on the real-time thread.

use rtloop::config::{FaultsConfig, SafetyToml};
use rtloop::{Controller, RunSummary, Runtime};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

#[allow(dead_code)]
#[path = "../../examples/stand.rs"]
mod stand;

#[allow(dead_code)]
#[path = "../../examples/imu_level.rs"]
mod imu_level;

#[allow(dead_code)]
#[path = "../../examples/custom_telemetry.rs"]
mod custom_telemetry;

#[allow(dead_code)]
#[path = "../../examples/fault_tolerant.rs"]
mod fault_tolerant;

/// Allocator calls the cycle thread made inside the real-time section.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// One run at a time: the counter above is shared, and runs at 1 kHz on a small machine
/// should not compete for its CPUs.
static SERIAL: Mutex<()> = Mutex::new(());

const EXAMPLES: [&str; 4] = ["stand", "imu_level", "custom_telemetry", "fault_tolerant"];

/// `<target>/<profile>/examples`, with every example built (once per test binary; a no-op
/// when `cargo test` has already built them).
fn examples_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile_dir = exe.parent().and_then(Path::parent).expect("<target>/<profile>/deps/<test>");
        let target_dir = profile_dir.parent().expect("<target>/<profile>");
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "--quiet", "-p", "rtloop", "--target-dir"]).arg(target_dir);
        for name in EXAMPLES {
            cargo.args(["--example", name]);
        }
        if profile_dir.file_name().is_some_and(|p| p == "release") {
            cargo.arg("--release");
        }
        let status = cargo.current_dir(env!("CARGO_MANIFEST_DIR")).status().expect("run cargo build --example");
        assert!(status.success(), "cargo build --example failed");
        profile_dir.join("examples")
    })
}

fn run_example(name: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let bin = examples_dir().join(name);
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out: Output = Command::new(&bin).args(args).output().unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The number before `what` in `line` ("run: 1000 cycles at …" → 1000 for "cycles").
fn number_before(text: &str, what: &str) -> u64 {
    let at = text.find(what).unwrap_or_else(|| panic!("{what:?} in {text}"));
    let digits: String = text[..at].trim_end().chars().rev().take_while(char::is_ascii_digit).collect();
    digits.chars().rev().collect::<String>().parse().unwrap_or_else(|_| panic!("a number before {what:?} in {text}"))
}

#[test]
fn stand_ramps_to_the_stand_pose_and_holds() {
    let (code, out, err) = run_example("stand", &["--duration", "1.5"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("12 of 12 joints ramped from their measured pose"), "{out}");
    let hold: f64 = out.split("holding within ").nth(1).and_then(|s| s.split(' ').next()).unwrap().parse().unwrap();
    assert!(hold < 0.03, "gravity droop is about 0.015 rev: {out}");
    assert!(out.contains("status: ok"), "{out}");
    // 1500 periods; a busy machine skips some after overruns (counted, not problems).
    assert!((500..=1500).contains(&number_before(&out, "cycles at")), "{out}");
}

#[test]
fn imu_level_reports_the_attitude_it_saw() {
    let (code, out, err) = run_example("imu_level", &["--duration", "1.5"]);
    assert_eq!(code, Some(0), "{out}{err}");
    for what in ["imu_level: roll min", "imu_level: pitch min", "imu_level: largest leg offset", "status: ok"] {
        assert!(out.contains(what), "{what:?} in {out}");
    }
    assert!(number_before(&out, "samples)") >= 500, "one IMU sample per cycle: {out}");
}

#[test]
fn custom_telemetry_logs_one_item_per_cycle_and_reads_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("targets.tlog");
    let log_s = log.to_str().unwrap();
    let (code, out, err) = run_example("custom_telemetry", &["--duration", "1", "--log", log_s]);
    assert_eq!(code, Some(0), "{out}{err}");
    let cycles = number_before(&out, "cycles at");
    assert_eq!(number_before(&out, "stand_targets items"), cycles, "{out}");
    // Read it ourselves: the record is there, one decodable item per cycle; the shutdown
    // cycles are in `cycle` only.
    let reader = tlog::reader::FileReader::open(&log).unwrap();
    assert!(reader.record("stand_targets").is_some());
    let only = |name: &str| tlog::reader::ItemFilter { record: Some(name.into()), ..Default::default() };
    let items: Vec<_> = reader.items(only("stand_targets")).collect::<Result<_, _>>().unwrap();
    assert_eq!(items.len() as u64, cycles);
    let shutdown = number_before(&out, "shutdown cycles");
    assert!((2..=4).contains(&shutdown), "{out}");
    assert_eq!(reader.items(only("cycle")).count() as u64, cycles + shutdown);
    let last = reader.decode_item(items.last().unwrap()).unwrap().to_json();
    assert_eq!(last["target_rev"].as_array().unwrap().len(), 12, "{last}");
    assert!(last["tracking_error_rev"].as_f64().unwrap() < 0.05, "{last}");
    // The log is never overwritten.
    let (code, _, err) = run_example("custom_telemetry", &["--duration", "1", "--log", log_s]);
    assert_eq!(code, Some(2));
    assert!(err.contains("already exists") && err.lines().count() == 1, "{err}");
}

#[test]
fn fault_tolerant_handles_the_fault_itself() {
    let (code, out, err) = run_example("fault_tolerant", &["--duration", "2"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("servo 5 faulted at 1."), "{out}");
    assert!(out.contains("leg 2 parked, 9 servos lowering the body, 11 holding"), "{out}");
    assert!(out.contains("still faulted at the end: true"), "{out}");
    assert!(out.contains("status: degraded") && out.contains("fault handled"), "{out}");
    // Too short for the fault to come: exit 1, and say why.
    let (code, out, _) = run_example("fault_tolerant", &["--duration", "0.5"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("fault not handled"), "{out}");
}

#[test]
fn every_example_refuses_a_bad_duration_in_one_sentence() {
    for name in EXAMPLES {
        for bad in [&["--duration", "0"][..], &["--duration", "NaN"], &["--duration", "inf"], &["--duration", "3601"]] {
            let (code, out, err) = run_example(name, bad);
            assert_eq!(code, Some(2), "{name} {bad:?}: {out}{err}");
            assert!(err.contains("--duration") && err.contains("3600") && err.lines().count() == 1, "{name}: {err}");
        }
        let (code, _, err) = run_example(name, &["--duration"]);
        assert_eq!(code, Some(2), "{name}");
        assert!(err.contains("--duration needs"), "{name}: {err}");
        let (code, _, err) = run_example(name, &["--fast"]);
        assert_eq!(code, Some(2), "{name}");
        assert!(err.contains("unexpected argument \"--fast\""), "{name}: {err}");
    }
}

/// Run `controller` for `duration_s` at 1 kHz, counting the allocator calls the cycle thread
/// makes in its real-time section.
fn allocations_in_real_time<C: Controller + 'static>(runtime: Runtime, controller: C) -> (u64, RunSummary) {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ALLOCATIONS.store(u64::MAX, Ordering::SeqCst);
    let runtime = runtime
        .rate_hz(1000.0)
        .on_realtime_section(testkit::start_counting, || ALLOCATIONS.store(testkit::stop_counting(), Ordering::SeqCst));
    let summary = runtime.run(controller).expect("the run starts");
    (ALLOCATIONS.load(Ordering::SeqCst), summary)
}

#[test]
fn the_harness_sees_an_allocation() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (calls, v) = testkit::count_allocations(|| std::hint::black_box(Vec::<u8>::with_capacity(8)));
    drop(v);
    assert!(calls >= 1);
}

/// Allocates every cycle: what the tests below would catch.
struct Allocates;

impl Controller for Allocates {
    type Telemetry = ();
    fn cycle(&mut self, state: &rtloop::State<'_>, _: &mut rtloop::Output<'_, ()>) -> rtloop::Flow {
        drop(std::hint::black_box(format!("{}", state.cycle)));
        rtloop::Flow::Continue
    }
}

#[test]
fn an_allocating_controller_is_caught() {
    let (allocations, summary) = allocations_in_real_time(Runtime::new().duration_s(0.2), Allocates);
    assert!(allocations >= summary.cycles, "{allocations} allocations in {} cycles", summary.cycles);
}

#[test]
fn stand_never_allocates_in_the_real_time_section() {
    let (allocations, summary) = allocations_in_real_time(Runtime::new().duration_s(0.5), stand::Stand::default());
    assert!(summary.cycles > 250, "{} cycles", summary.cycles);
    assert_eq!(allocations, 0);
}

#[test]
fn imu_level_never_allocates_in_the_real_time_section() {
    // Past the stand-up, so the levelling runs too.
    let runtime = Runtime::new().duration_s(1.2);
    let (allocations, summary) = allocations_in_real_time(runtime, imu_level::Level::default());
    assert!(summary.imu_samples > 600, "{} IMU samples", summary.imu_samples);
    assert_eq!(allocations, 0);
}

#[test]
fn custom_telemetry_never_allocates_in_the_real_time_section() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::new().duration_s(0.5).log(dir.path().join("noalloc.tlog"));
    let (allocations, summary) = allocations_in_real_time(runtime, custom_telemetry::Recorded::default());
    let log = summary.log.as_ref().expect("a log");
    assert!(log.written > summary.cycles, "cycles and telemetry were logged: {} messages", log.written);
    assert_eq!(allocations, 0);
}

#[test]
fn fault_tolerant_never_allocates_in_the_real_time_section_nor_when_reacting() {
    let safety = SafetyToml { on_fault: "ignore".into(), ..SafetyToml::default() };
    let faults = FaultsConfig { overheat: vec!["5@0.2".into()], seed: Some(1), ..FaultsConfig::default() };
    let runtime = Runtime::new().duration_s(0.6).safety(safety).faults(faults);
    let controller = fault_tolerant::FaultTolerant::default();
    let report = std::sync::Arc::clone(&controller.report);
    let (allocations, _) = allocations_in_real_time(runtime, controller);
    let report = report.lock().unwrap().expect("the fault came and was handled");
    assert_eq!((report.servo_id, report.leg, report.parked, report.lowering), (5, 2, 2, 9), "{report:?}");
    assert_eq!(allocations, 0);
}

/// The guide's controller (docs/controllers.md), pasted into a new crate outside the
/// workspace as the guide says: `cargo new`, the lock file copied, `cargo add
/// --no-default-features --path`, `cargo run`. Ignored by
/// default: the new crate compiles rtloop and its dependencies with its own profile (about
/// 2 min on 2 cores the first time; 5 s once built). `cargo test -p rtloop --test rtloop -- --ignored examples::`.
#[test]
#[ignore = "builds rtloop again for a crate outside the workspace (about 2 min the first time)"]
fn a_fresh_crate_runs_the_guides_controller() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = manifest.parent().and_then(Path::parent).expect("crates/rtloop in a workspace");
    let guide = std::fs::read_to_string(workspace.join("docs/controllers.md")).unwrap();
    let after = &guide[guide.find("<!-- mybot main.rs").expect("the marked block")..];
    let code = after.split("```rust\n").nth(1).and_then(|b| b.split("\n```").next()).expect("a rust block");
    let dir = tempfile::tempdir().unwrap();
    let target = examples_dir().parent().and_then(Path::parent).expect("<target>").to_path_buf();
    let cargo = |args: &[&str], cwd: &Path| {
        let out = Command::new(env!("CARGO")).args(args).current_dir(cwd).env("CARGO_TARGET_DIR", &target).output();
        let out = out.expect("run cargo");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "cargo {args:?}: {text}");
        text
    };
    cargo(&["new", "--quiet", "mybot"], dir.path());
    let bot = dir.path().join("mybot");
    // The workspace's lock file: the same dependency versions, all already downloaded.
    std::fs::copy(workspace.join("Cargo.lock"), bot.join("Cargo.lock")).unwrap();
    cargo(&["add", "--offline", "--no-default-features", "--path", manifest.to_str().unwrap()], &bot);
    std::fs::write(bot.join("src/main.rs"), code).unwrap();
    let out = cargo(&["run", "--offline", "--quiet"], &bot);
    assert!(out.contains("cycles at") && out.contains("status ok"), "{out}");
}
