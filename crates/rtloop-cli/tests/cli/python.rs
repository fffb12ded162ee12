//! The Python package, as a new user gets it: `pip install ./python` into a fresh virtual
//! environment (pip builds the wheel with maturin from PyPI, as on any machine), then the
//! package's own pytest suite (`python/tests`) against the installed package — never
//! against the source tree, so a file missing from the wheel fails here. The suite drives
//! this build's `rtloop` program (`RTLOOP_BIN`) for spines, logs and the simulator, and the
//! official moteus package where it compares with it.
//!
//! What pytest skipped (a check that needs something this machine lacks) is listed with
//! the other skips at the end of `tools/test`.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;
use support::*;

/// The test venv's packages beside rtloop (pinned: a new release must not change the
/// results under us). pandas for `to_pandas`, moteus for the comparisons with the official
/// client, python-snappy for mjlib's reader when `RTLOOP_MJLIB` names a checkout, vermin to
/// check that the pure-Python side runs on the oldest Python the wheel claims (3.9),
/// eclipse-zenoh for `rtloop run --zenoh` (1.10.2: the protocol of the `zenoh` crate rtloop
/// uses), websockets and jsonschema for the Foxglove client of `test_foxglove.py`, duckdb to
/// query what `rtloop log export --parquet` writes (test_parquet.py), gymnasium for
/// `rtloop.gym` (test_gym.py), moviepy for Gymnasium's `RecordVideo` of its frames
/// (test_gym_render.py).
const PACKAGES: &[&str] = &[
    "pytest==9.2.0",
    "numpy==2.4.6",
    "pandas==3.1.1",
    "moteus==1.1.1",
    "python-snappy==0.7.3",
    "vermin==1.9.2",
    "eclipse-zenoh==1.10.2",
    "websockets==17.4",
    "jsonschema==4.26.0",
    "duckdb==2.0.0",
    "gymnasium==1.4.0",
    "moviepy==2.2.1",
];

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().and_then(Path::parent).expect("crates/rtloop is two levels down")
}

/// The venv's Python with the package installed from `python/` (once per test binary).
fn installed_python() -> &'static Path {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| {
        // Named after its package list, so a changed pin gets a new venv, not a stale one.
        let digest = PACKAGES
            .join(" ")
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        let python = python_venv(&format!("rtloop-python-venv-{digest:016x}"), PACKAGES);
        // Build outputs go to the workspace's target directory (maturin asks cargo), so a
        // second run rebuilds only what changed.
        let mut pip = Command::new(&python);
        pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--force-reinstall", "--no-deps"])
            .arg(repo_root().join("python"))
            .current_dir(repo_root());
        // Built as pip builds it for a user (maturin's PEP 517 backend), but in the profile
        // this test suite was built in, not release: the package's dependencies are then the
        // ones `cargo test --workspace` already compiled (same profile, same features through
        // the workspace-hack crate), so only the extension and the library crates with other
        // features are compiled again — minutes less than a release build from scratch.
        // With physics when this suite has it (tools/test: MuJoCo's library is there, and
        // MUJOCO_DYNAMIC_LINK_DIR names it), for `Robot(physics=True)`.
        let physics = if cfg!(feature = "render") {
            " --features physics,render"
        } else if cfg!(feature = "physics") {
            " --features physics"
        } else {
            ""
        };
        pip.env("MATURIN_PEP517_ARGS", format!("--profile dev{physics}"));
        let ran = run_limited(&mut pip, b"", Duration::from_secs(1200));
        assert!(ran.success(), "pip install ./python failed: {}", tail(&ran.describe(), 60));
        python
    })
}

/// The last `lines` lines of `text`: enough to see why, without pages of build output.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Record each test pytest skipped (`-rs` prints `SKIPPED [n] file:line: reason`) with the
/// suite's other skips.
fn report_skips(pytest_output: &str) {
    for line in pytest_output.lines() {
        if let Some(rest) = line.strip_prefix("SKIPPED ") {
            rtloop_testkit::skip(&format!("pytest {rest}"));
        }
    }
}

#[test]
fn pip_install_then_pytest_passes() {
    let python = installed_python();
    // Run from a scratch directory so `import rtloop` can only find the installed package.
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let ran = run_limited(
        Command::new(python)
            .args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--color=no"])
            .arg(repo_root().join("python/tests"))
            .current_dir(scratch.path())
            .env("RTLOOP_BIN", rtloop_bin())
            .env_remove("PYTHONPATH"),
        b"",
        Duration::from_secs(900),
    );
    report_skips(&ran.stdout);
    assert!(ran.success(), "pytest python/tests failed: {}", tail(&ran.describe(), 120));
    assert!(ran.stdout.contains(" passed"), "pytest ran no test: {}", tail(&ran.describe(), 40));
}

#[test]
fn the_installed_package_is_the_wheel_not_the_source_tree() {
    let python = installed_python();
    let out = Command::new(python)
        .args(["-c", "import rtloop, rtloop._rtloop as n; print(rtloop.__file__); print(n.__file__)"])
        .current_dir(std::env::temp_dir())
        .output()
        .expect("python runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "import rtloop failed: {}", String::from_utf8_lossy(&out.stderr));
    for line in text.lines() {
        assert!(line.contains("site-packages"), "rtloop imported from {line}, not from the installed wheel");
    }
    assert!(text.contains(".abi3.so"), "the extension is not an abi3 build: {text}");
}
