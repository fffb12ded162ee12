//! `OutputDir`: a directory output appears whole on commit or not at all, never replaces
//! what appeared meanwhile, replaces (when asked) only an earlier export's files, and never
//! creates or removes a file outside itself.

use rtloop_output::{OutputDir, OutputError};
use std::fs;
use std::path::Path;

/// The names in `dir`, sorted (hidden ones included: nothing may be left behind).
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn a_directory_appears_only_on_commit() {
    let scratch = tempfile::tempdir().unwrap();
    let dest = scratch.path().join("out");
    let out = OutputDir::create(&dest, false, "parquet").unwrap();
    fs::write(scratch.path().join("keep"), "x").unwrap();
    out.create_file(Path::new("cycle/run.parquet")).unwrap();
    out.create_file(Path::new("event.parquet")).unwrap();
    assert!(!dest.exists());
    out.commit().unwrap();
    assert_eq!(names(&dest), ["cycle", "event.parquet"]);
    assert_eq!(names(&dest.join("cycle")), ["run.parquet"]);
    assert_eq!(names(scratch.path()), ["keep", "out"]);
    // Dropped without a commit: nothing left.
    let other = scratch.path().join("other");
    let out = OutputDir::create(&other, false, "parquet").unwrap();
    out.create_file(Path::new("a.parquet")).unwrap();
    drop(out);
    assert_eq!(names(scratch.path()), ["keep", "out"]);
}

#[test]
fn what_appears_meanwhile_is_never_replaced() {
    let scratch = tempfile::tempdir().unwrap();
    let dest = scratch.path().join("out");
    let out = OutputDir::create(&dest, false, "parquet").unwrap();
    out.create_file(Path::new("a.parquet")).unwrap();
    // Someone else's (empty) directory: rename(2) would replace it; this must not.
    fs::create_dir(&dest).unwrap();
    assert!(matches!(out.commit(), Err(OutputError::Exists { .. })));
    assert!(names(&dest).is_empty());
    // And an existing one is refused up front, without --force.
    assert!(matches!(OutputDir::create(&dest, false, "parquet"), Err(OutputError::Exists { .. })));
}

#[test]
fn only_an_earlier_export_is_replaced() {
    let scratch = tempfile::tempdir().unwrap();
    let dest = scratch.path().join("out");
    fs::create_dir_all(dest.join("cycle")).unwrap();
    fs::write(dest.join("cycle/old.parquet"), "old").unwrap();
    fs::write(dest.join("gone.parquet"), "old").unwrap();
    let out = OutputDir::create(&dest, true, "parquet").unwrap();
    out.create_file(Path::new("new.parquet")).unwrap();
    out.commit().unwrap();
    assert_eq!(names(&dest), ["new.parquet"]);
    assert_eq!(names(scratch.path()), ["out"], "the earlier export is removed, nothing else left");

    for (what, make) in [
        (
            "another kind of file",
            Box::new(|d: &Path| fs::write(d.join("notes.txt"), "mine").unwrap()) as Box<dyn Fn(&Path)>,
        ),
        ("a hidden file", Box::new(|d: &Path| fs::write(d.join(".x.parquet"), "mine").unwrap())),
        ("a deeper directory", Box::new(|d: &Path| fs::create_dir_all(d.join("a/b")).unwrap())),
        ("a link", Box::new(|d: &Path| std::os::unix::fs::symlink("/etc/hostname", d.join("l.parquet")).unwrap())),
    ] {
        let dest = scratch.path().join("mine");
        fs::create_dir(&dest).unwrap();
        make(&dest);
        let before = names(&dest);
        let refused = OutputDir::create(&dest, true, "parquet");
        assert!(matches!(refused, Err(OutputError::NotAnExport { .. })), "{what}");
        assert_eq!(names(&dest), before, "{what}");
        fs::remove_dir_all(&dest).unwrap();
    }
    // A file, or a link to a directory, is not a directory of an earlier export.
    let file = scratch.path().join("file");
    fs::write(&file, "x").unwrap();
    assert!(matches!(OutputDir::create(&file, true, "parquet"), Err(OutputError::NotAnExport { .. })));
    let link = scratch.path().join("link");
    std::os::unix::fs::symlink(&dest, &link).unwrap();
    assert!(matches!(OutputDir::create(&link, true, "parquet"), Err(OutputError::NotAnExport { .. })));
    assert_eq!(fs::read_to_string(&file).unwrap(), "x");
}

#[test]
fn files_stay_inside() {
    let scratch = tempfile::tempdir().unwrap();
    let out = OutputDir::create(&scratch.path().join("out"), false, "parquet").unwrap();
    for bad in ["../escape.parquet", "/tmp/abs.parquet", "", "a/../../b"] {
        assert!(out.create_file(Path::new(bad)).is_err(), "{bad}");
        assert!(out.remove_file(Path::new(bad)).is_err(), "{bad}");
    }
    assert!(matches!(OutputDir::create(Path::new("-"), true, "parquet"), Err(OutputError::Dash)));
    assert!(matches!(
        OutputDir::create(&scratch.path().join("no/such/out"), false, "parquet"),
        Err(OutputError::NoDirectory { .. })
    ));
    out.commit().unwrap();
    assert_eq!(names(scratch.path()), ["out"]);
}
