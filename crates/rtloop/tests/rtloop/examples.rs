//! The examples in `crates/rtloop/examples/` as their users meet them: each runs on the
//! simulated robot and says what it did, refuses a bad `--duration` in one sentence (exit 2),
//! and its controller never allocates on the real-time thread. With the `physics` feature,
//! `stand`, `imu_level` and `push_recover` close their loop on the body of the built-in
//! quadruped in lockstep, and the tests assert where the body ended (the `body:` line, from
//! `RunSummary::body`).

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

#[allow(dead_code)]
#[path = "../../examples/push_recover.rs"]
mod push_recover;

/// Allocator calls the cycle thread made inside the real-time section.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// One run at a time: the counter above is shared, and runs at 1 kHz on a small machine
/// should not compete for its CPUs.
static SERIAL: Mutex<()> = Mutex::new(());

const EXAMPLES: [&str; 5] = ["stand", "imu_level", "custom_telemetry", "fault_tolerant", "push_recover"];

/// `<target>/<profile>/examples`, with every example built with this test binary's
/// features (once per test binary; a no-op when `cargo test` has already built them).
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
        if cfg!(feature = "physics") {
            cargo.args(["--features", "physics"]);
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
    let reader = rtloop_tlog::reader::FileReader::open(&log).unwrap();
    assert!(reader.record("stand_targets").is_some());
    let only = |name: &str| rtloop_tlog::reader::ItemFilter { record: Some(name.into()), ..Default::default() };
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

#[test]
fn push_recover_without_a_body_sees_no_push() {
    let (code, out, err) = run_example("push_recover", &["--duration", "1.5"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("push_recover: no push seen: peak acceleration"), "{out}");
    assert!(!out.contains("body:"), "no body without --physics: {out}");
    assert!(out.contains("status: ok"), "{out}");
}

#[test]
fn the_physics_options_are_checked_in_one_sentence() {
    for (name, args, says) in [
        ("imu_level", &["--tilt", "8"][..], "--tilt slopes the ground under a body: add --physics"),
        ("imu_level", &["--physics", "--tilt", "31"], "--tilt \"31\" is not a slope from -30 to 30 degrees"),
        ("imu_level", &["--gain", "-1"], "--gain \"-1\" is not a number from 0 to 100"),
        ("stand", &["--tilt", "8"], "unexpected argument \"--tilt\""),
        ("push_recover", &["--push", "2:0,60"], "expected SECONDS:FX,FY,FZ[:DURATION]"),
        ("push_recover", &["--push", "1:0,10,0"], "a push needs a body: add --physics"),
    ] {
        let (code, out, err) = run_example(name, args);
        assert_eq!(code, Some(2), "{name} {args:?}: {out}{err}");
        assert!(err.contains(says) && err.lines().count() == 1, "{name} {args:?}: {err}");
    }
}

/// Without the `physics` feature, `--physics` is refused with the sentence that says how to
/// build it.
#[cfg(not(feature = "physics"))]
#[test]
fn physics_in_a_build_without_it_is_one_sentence() {
    for name in ["stand", "imu_level", "push_recover"] {
        let (code, out, err) = run_example(name, &["--physics", "--lockstep", "--duration", "0.1"]);
        assert_eq!(code, Some(2), "{name}: {out}{err}");
        assert!(err.contains("built without physics") && err.lines().count() == 1, "{name}: {err}");
    }
}

/// The examples on the built-in quadruped's body (MuJoCo), in lockstep: the same outcome on
/// every run, whatever the machine's load.
#[cfg(feature = "physics")]
mod with_a_body {
    use super::run_example;

    /// The `body:` line: (height m, roll °, pitch °) where the body ended.
    fn body(out: &str) -> (f64, f64, f64) {
        let line = out.lines().find_map(|l| l.strip_prefix("body: height ")).unwrap_or_else(|| panic!("{out}"));
        let number = |after: &str| -> f64 {
            let rest =
                if after.is_empty() { line } else { line.split(after).nth(1).unwrap_or_else(|| panic!("{line}")) };
            rest.trim_start().split([' ', '°']).next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"))
        };
        (number(""), number("roll "), number("pitch "))
    }

    /// The number right after `what` in `out`.
    fn after(out: &str, what: &str) -> f64 {
        let rest = out.split(what).nth(1).unwrap_or_else(|| panic!("{what:?} in {out}"));
        rest.trim_start().split([' ', '°', 'm']).next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{out}"))
    }

    fn physics(name: &str, args: &[&str]) -> String {
        let mut all = vec!["--physics", "--lockstep"];
        all.extend_from_slice(args);
        let (code, out, err) = run_example(name, &all);
        assert_eq!(code, Some(0), "{name} {all:?}: {out}{err}");
        assert!(out.contains("status: ok"), "{out}");
        out
    }

    #[test]
    fn stand_raises_the_quadruped_from_lying_to_standing_and_holds_it() {
        let (height, _, _) = body(&physics("stand", &["--duration", "0.05"]));
        assert!(height < 0.1, "it starts lying on the ground: {height} m");
        let out = physics("stand", &["--duration", "3"]);
        let (height, roll, pitch) = body(&out);
        assert!(height > 0.28, "standing: {out}");
        assert!(roll.abs() < 3.0 && pitch.abs() < 3.0, "level: {out}");
        assert!(out.contains("12 of 12 joints ramped"), "{out}");
        // Lockstep: the same run ends with the same body, to the last digit printed.
        let again = physics("stand", &["--duration", "3"]);
        let line = |o: &str| o.lines().find(|l| l.starts_with("body:")).map(str::to_string);
        assert_eq!(line(&out), line(&again));
    }

    /// `<target>/models` (`tools/models`), or a visible skip.
    fn models() -> Option<std::path::PathBuf> {
        let exe = std::env::current_exe().ok()?;
        let dir = exe.parent()?.parent()?.parent()?.join("models");
        if dir.join(".complete").exists() {
            Some(dir)
        } else {
            rtloop_testkit::skip(&format!("robot models absent from {} (tools/models fetches them)", dir.display()));
            None
        }
    }

    /// `examples/robots/NAME.toml` with its model from `models`, in a scratch folder.
    fn robot_file(models: &std::path::Path, name: &str) -> (tempfile::TempDir, String) {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let text = std::fs::read_to_string(root.join(format!("examples/robots/{name}.toml"))).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text.replace("../../target/models", &models.display().to_string())).unwrap();
        (dir, path.display().to_string())
    }

    #[test]
    fn stand_stands_a_go2_in_its_own_pose_and_holds_a_ur5e_at_home() {
        let Some(models) = models() else { return };
        let (_go2_dir, go2) = robot_file(&models, "go2");
        let out = physics("stand", &["--robot", &go2, "--duration", "3"]);
        let (height, roll, pitch) = body(&out);
        assert!(height > 0.26 && roll.abs() < 3.0 && pitch.abs() < 3.0, "Go2 standing level: {out}");
        assert!(out.contains("go2 scene; falls 0"), "{out}");
        let (_ur5e_dir, ur5e) = robot_file(&models, "ur5e");
        let out = physics("stand", &["--robot", &ur5e, "--duration", "3"]);
        assert!(out.contains("6 of 6 joints ramped"), "{out}");
        assert!(after(&out, "holding within") < 0.01, "the arm holds its home pose: {out}");
    }

    #[test]
    fn stand_refuses_a_model_without_a_pose_to_stand_in() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("arm.xml"),
            r#"<mujoco><worldbody><body name="base" pos="0 0 0.5"><geom type="box" size="0.1 0.1 0.1" mass="1"/>
               <body><joint name="j" axis="0 1 0" armature="0.01"/><geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.02" mass="0.3"/></body>
               </body></worldbody></mujoco>"#,
        )
        .unwrap();
        let file = dir.path().join("arm.toml");
        std::fs::write(
            &file,
            "[[bus]]\nbus = 1\nuri = \"sim\"\nservos = [1]\n\n[physics]\nmodel = \"arm.xml\"\njoints = [{ bus = 1, id = 1, joint = \"j\" }]\n",
        )
        .unwrap();
        let (code, out, err) =
            run_example("stand", &["--robot", file.to_str().unwrap(), "--lockstep", "--duration", "0.5"]);
        assert_eq!(code, Some(1), "{out}{err}");
        assert!(out.contains("names no pose to stand in"), "{out}{err}");
    }

    #[test]
    fn imu_level_levels_the_body_on_a_slope_from_the_imu() {
        let flat = physics("imu_level", &["--tilt", "8", "--gain", "0", "--duration", "4"]);
        let (height, roll, pitch) = body(&flat);
        // Nose up on ground sloping nose up, as the IMU reads it.
        assert!(height > 0.28 && (6.5..9.5).contains(&pitch) && roll.abs() < 1.0, "without levelling: {flat}");
        assert!((after(&flat, "the IMU read roll") - roll).abs() < 0.5, "{flat}");
        assert!((after(&flat, "° pitch") - pitch).abs() < 0.5, "the IMU reads the body: {flat}");
        let level = physics("imu_level", &["--tilt", "8", "--duration", "4"]);
        let (height, roll, pitch) = body(&level);
        assert!(height > 0.28 && pitch.abs() < 1.0 && roll.abs() < 1.0, "levelled: {level}");
        // The rear legs lengthened, the front ones shortened.
        assert!(after(&level, "for pitch") > 0.02, "{level}");
        let downhill = physics("imu_level", &["--tilt", "-8", "--duration", "4"]);
        let (_, _, pitch) = body(&downhill);
        assert!(pitch.abs() < 1.0 && after(&downhill, "for pitch") < -0.02, "nose down: {downhill}");
    }

    #[test]
    fn push_recover_on_a_body_never_allocates_in_the_real_time_section() {
        // Standing, levelling and pushed: every path of the controller, with the physics.
        let push = rtloop::physics::PushSpec { at_s: 1.0, force_n: [0.0, 60.0, 0.0], duration_s: 0.1 };
        let runtime = rtloop::Runtime::new()
            .physics(rtloop::physics::PhysicsConfig::default())
            .push(push)
            .lockstep(true)
            .duration_s(2.0);
        let controller = super::push_recover::PushRecover::default();
        let (allocations, summary) = super::allocations_in_real_time(runtime, controller);
        assert!(summary.body.as_ref().is_some_and(|b| b.height_m > 0.28), "{:?}", summary.body);
        assert_eq!(allocations, 0);
    }

    #[test]
    fn push_recover_sees_the_push_in_the_imu_and_stands_again() {
        let out = physics("push_recover", &[]);
        assert!(out.contains("push_recover: push seen at 2.5"), "{out}");
        assert!(after(&out, "peak acceleration") > 4.0, "60 N on 7.4 kg: {out}");
        assert!(after(&out, "peak tilt") > 1.0, "{out}");
        assert!(out.contains("push_recover: recovered"), "{out}");
        let (height, roll, pitch) = body(&out);
        assert!(height > 0.28 && roll.abs() < 3.0 && pitch.abs() < 3.0, "standing and level again: {out}");
        // No force, no push: the example says so and fails.
        let (code, out, err) = run_example("push_recover", &["--physics", "--lockstep", "--push", "2.5:0,0,0"]);
        assert_eq!(code, Some(1), "{out}{err}");
        assert!(out.contains("no push seen") && out.contains("push not recovered from"), "{out}");
    }
}

/// Run `controller` for `duration_s` at 1 kHz, counting the allocator calls the cycle thread
/// makes in its real-time section.
fn allocations_in_real_time<C: Controller + 'static>(runtime: Runtime, controller: C) -> (u64, RunSummary) {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ALLOCATIONS.store(u64::MAX, Ordering::SeqCst);
    let runtime = runtime.rate_hz(1000.0).on_realtime_section(rtloop_testkit::start_counting, || {
        ALLOCATIONS.store(rtloop_testkit::stop_counting(), Ordering::SeqCst)
    });
    let summary = runtime.run(controller).expect("the run starts");
    (ALLOCATIONS.load(Ordering::SeqCst), summary)
}

#[test]
fn the_harness_sees_an_allocation() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (calls, v) = rtloop_testkit::count_allocations(|| std::hint::black_box(Vec::<u8>::with_capacity(8)));
    drop(v);
    assert!(calls >= 1);
}

/// Allocates every cycle: what the tests below would catch.
struct Allocates;

impl Controller for Allocates {
    type Telemetry = ();
    fn cycle(
        &mut self,
        state: &rtloop::State<'_>,
        _: &mut rtloop::Output<'_, ()>,
    ) -> Result<rtloop::Flow, rtloop::Failure> {
        drop(std::hint::black_box(format!("{}", state.cycle)));
        Ok(rtloop::Flow::Continue)
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
fn push_recover_never_allocates_in_the_real_time_section() {
    let runtime = Runtime::new().duration_s(1.8);
    let (allocations, summary) = allocations_in_real_time(runtime, push_recover::PushRecover::default());
    assert!(summary.imu_samples > 900, "{} IMU samples", summary.imu_samples);
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
/// workspace as the guide says: `cargo new`, the lock file copied, `cargo add --path` (the
/// library's default features: none), `cargo run`. Ignored by
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
    cargo(&["add", "--offline", "--path", manifest.to_str().unwrap()], &bot);
    std::fs::write(bot.join("src/main.rs"), code).unwrap();
    let out = cargo(&["run", "--offline", "--quiet"], &bot);
    assert!(out.contains("cycles at") && out.contains("status ok"), "{out}");
}

#[test]
fn fault_tolerant_asks_for_the_safe_stop_when_a_second_leg_faults_and_never_allocates() {
    let safety = SafetyToml { on_fault: "ignore".into(), ..SafetyToml::default() };
    let overheat = vec!["5@0.2".into(), "8@0.4".into()];
    let faults = FaultsConfig { overheat, seed: Some(1), ..FaultsConfig::default() };
    let runtime = Runtime::new().duration_s(1.5).safety(safety).faults(faults);
    let (allocations, summary) = allocations_in_real_time(runtime, fault_tolerant::FaultTolerant::default());
    assert_eq!(allocations, 0);
    // Servo 8 is leg 3's hip, on bus 3: the failure names it, and ended the run.
    let failure = summary.failure.as_ref().expect("the second leg's fault is the controller's failure");
    assert_eq!((failure.name, failure.servo, failure.bus), ("second_leg_faulted", Some(8), Some(3)), "{failure:?}");
    assert!(summary.ended_by_controller && summary.cycles < 1400, "{} cycles", summary.cycles);
    let first = &summary.problems[0];
    assert!(first.starts_with("a servo of a second leg faulted, and two legs cannot hold the body at 0."), "{first}");
    assert!(first.contains("(servo 8 on bus 3): let the servos cool down"), "{first}");
    assert!(
        summary.events.iter().any(|e| e.kind == "second_leg_faulted" && e.servo == Some(8)),
        "{:?}",
        summary.events
    );
}

#[test]
fn imu_level_refuses_to_start_on_a_robot_without_an_imu() {
    use rtloop::controller::{CycleFigures, ImuSample, State};
    let (imu, figures) = (ImuSample::default(), CycleFigures::default());
    let state = State {
        time_s: 0.0,
        cycle: 0,
        servos: &[],
        imu: &imu,
        last_cycle: &figures,
        safe_mode: false,
        events: &[],
        body: None,
        qpos: &[],
        fallen: false,
        model_pose: rtloop::ModelPose::NotGiven,
    };
    let refused = imu_level::Level::default().start(&state).expect_err("no IMU: nothing to level with");
    assert_eq!(refused.name, "no_imu");
    // The same for what builds on it.
    assert!(push_recover::PushRecover::default().start(&state).is_err());
}
