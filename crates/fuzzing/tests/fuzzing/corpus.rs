//! Every seed (`fuzz/corpus/<target>/`) and every kept crash (`fuzz/artifacts/<target>/`)
//! through the same function the fuzz target calls, on stable Rust, in `cargo test`.
//!
//! A crash file stays under `fuzz/artifacts/` after its fix: this test is what keeps it
//! fixed. One test per target, so a failure names its target; each names every failing
//! file with its panic message.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    dir.canonicalize().unwrap_or(dir)
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
    out.sort();
    out
}

fn replay(name: &str) {
    let target = rtloop_fuzzing::TARGETS.iter().find(|t| t.0 == name).unwrap_or_else(|| panic!("no target {name}")).1;
    let seeds = files(&fuzz_dir().join("corpus").join(name));
    assert!(!seeds.is_empty(), "fuzz/corpus/{name}/ has no seeds");
    let crashes = files(&fuzz_dir().join("artifacts").join(name));
    let mut failures = Vec::new();
    for path in seeds.iter().chain(&crashes) {
        let data = std::fs::read(path).unwrap();
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| target(&data))) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let hex: String = data.iter().take(64).map(|b| format!("{b:02x}")).collect();
            failures.push(format!(
                "{}: {message}\n  input {hex}{}",
                path.display(),
                if data.len() > 64 { "…" } else { "" }
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} inputs fail:\n{}",
        failures.len(),
        seeds.len() + crashes.len(),
        failures.join("\n")
    );
}

macro_rules! replay_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                replay(stringify!($name));
            }
        )*

        #[test]
        fn every_target_is_replayed_and_has_a_fuzz_target_file() {
            let replayed = [$(stringify!($name)),*];
            let names: Vec<&str> = rtloop_fuzzing::TARGETS.iter().map(|t| t.0).collect();
            assert_eq!(names, replayed);
            for name in names {
                let file = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
                let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                assert!(text.contains(&format!("rtloop_fuzzing::{name}(")), "{} does not call rtloop_fuzzing::{name}", file.display());
            }
            let files = files(&fuzz_dir().join("fuzz_targets"));
            assert_eq!(files.len(), rtloop_fuzzing::TARGETS.len(), "a fuzz target without a replay: {files:?}");
        }
    };
}

replay_tests!(
    subframes,
    physics_text,
    reply,
    servo,
    fdcanusb_host,
    fdcanusb_device,
    udp,
    run_config,
    tlog_reader,
    tlog_columns,
    tlog_export,
    tlog_plot,
    agent_command,
    console,
    pi3hat_board,
    pi3hat_host,
    foxglove_client,
);
