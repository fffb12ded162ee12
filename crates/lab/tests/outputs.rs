//! The files `--csv` and `--plot` write: created under a fresh name and renamed into place, so
//! a symlink at the output path is replaced, never written through, and a PNG write error is
//! one sentence (issue 9, "safe by default" and §6).

use lab::report::{write_csv, Outcome, Run};

fn outcome() -> Outcome {
    Outcome {
        experiment: "wakeup".into(),
        runs: vec![Run { label: "wakeup".into(), size: None, method: None, samples_ns: (1..=500).collect() }],
        ..Outcome::default()
    }
}

#[test]
fn an_output_symlink_is_replaced_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    for (name, write) in [
        (
            "samples.csv",
            &(|p: &std::path::Path| write_csv(&outcome(), p)) as &dyn Fn(&std::path::Path) -> Result<(), String>,
        ),
        ("plot.png", &|p: &std::path::Path| lab::plot::plot(&outcome(), p)),
    ] {
        let link = dir.path().join(name);
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        write(&link).unwrap();
        let victim_now = std::fs::read(&victim).unwrap();
        assert!(victim_now == b"precious", "{name}: {} bytes written through a symlink", victim_now.len());
        let meta = std::fs::symlink_metadata(&link).unwrap();
        assert!(meta.file_type().is_file(), "{name}: not a regular file now");
        assert!(std::fs::metadata(&link).unwrap().len() > 100, "{name}: empty");
    }
    // Nothing else is left in the directory (no temporary names).
    let mut names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["plot.png", "samples.csv", "victim"]);
}

#[test]
fn a_plot_that_cannot_be_written_says_why_in_one_sentence() {
    let err = lab::plot::plot(&outcome(), std::path::Path::new("/nonexistent/rtloop-lab/plot.png")).unwrap_err();
    assert!(err.contains("/nonexistent/rtloop-lab"), "{err}");
    assert!(!err.contains("Os {") && !err.contains("IoError(") && !err.contains('\n'), "{err}");
}
