//! The files `--csv` and `--plot` write: created under a fresh name and renamed into place
//! when complete; an existing destination only with `--force`, and never anything but a
//! regular file — a symbolic link is neither written through nor replaced — and a PNG write
//! error is one sentence (issue 9, "safe by default" and §6; second round: `--force`).

use rtloop_lab::report::{write_csv, Outcome, Run};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

fn outcome() -> Outcome {
    Outcome {
        experiment: "wakeup".into(),
        runs: vec![Run { label: "wakeup".into(), size: None, method: None, samples_ns: (1..=500).collect() }],
        ..Outcome::default()
    }
}

type Writer = dyn Fn(&Path, bool) -> Result<(), rtloop_lab::Error>;

/// Both lab outputs, by file name and writer.
fn writers() -> [(&'static str, &'static Writer); 2] {
    [
        ("samples.csv", &|p, force| write_csv(&outcome(), p, force)),
        ("plot.png", &|p, force| rtloop_lab::plot::plot(&outcome(), p, force)),
    ]
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn an_output_symlink_is_neither_followed_nor_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    for (name, write) in writers() {
        let link = dir.path().join(name);
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        for force in [false, true] {
            let err = write(&link, force).unwrap_err().to_string();
            assert!(err.contains("symbolic link") && !err.contains('\n'), "{name}, force {force}: {err}");
            assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "{name}: written through a symlink");
            assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "{name}: link replaced");
        }
    }
    // Nothing else is left in the directory (no temporary names).
    assert_eq!(names(dir.path()), ["plot.png", "samples.csv", "victim"]);
}

#[test]
fn an_existing_file_is_replaced_only_with_force() {
    let dir = tempfile::tempdir().unwrap();
    for (name, write) in writers() {
        let path = dir.path().join(name);
        std::fs::write(&path, b"TLOG0003 precious").unwrap();
        let err = write(&path, false).unwrap_err().to_string();
        assert!(err.contains("already exists") && err.contains("--force"), "{name}: {err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"TLOG0003 precious", "{name}: overwritten without --force");
        write(&path, true).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > 100, "{name}: not replaced with --force");
        // A new name needs no --force.
        let fresh = dir.path().join(format!("new-{name}"));
        write(&fresh, false).unwrap();
    }
    assert_eq!(names(dir.path()), ["new-plot.png", "new-samples.csv", "plot.png", "samples.csv"]);
}

#[test]
fn the_option_check_refuses_what_the_writer_would() {
    // The same refusals before measuring (`check::output_file`) as when writing.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("old.csv");
    std::fs::write(&file, b"x").unwrap();
    assert!(rtloop_lab::check::output_file("--csv", &file, None, false).unwrap_err().to_string().contains("--force"));
    rtloop_lab::check::output_file("--csv", &file, None, true).unwrap();
    let fifo = dir.path().join("fifo.csv");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for force in [false, true] {
        let err = rtloop_lab::check::output_file("--csv", &fifo, None, force).unwrap_err().to_string();
        assert!(err.contains("a FIFO") && err.contains("not even with --force"), "{err}");
        let err = write_csv(&outcome(), &fifo, force).unwrap_err().to_string();
        assert!(err.contains("a FIFO"), "{err}");
    }
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    rtloop_lab::check::output_file("--csv", &dir.path().join("new.csv"), None, false).unwrap();
}

#[test]
fn a_plot_that_cannot_be_written_says_why_in_one_sentence() {
    let err = rtloop_lab::plot::plot(&outcome(), Path::new("/nonexistent/rtloop-lab/plot.png"), false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/rtloop-lab"), "{err}");
    assert!(!err.contains("Os {") && !err.contains("IoError(") && !err.contains('\n'), "{err}");
}
