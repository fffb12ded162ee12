//! Errors keep their cause: an output the file system refuses says which output in its
//! sentence and returns the operating system's error from `source()`, not repeated in it.

use rtloop_output::{OutputDir, OutputError, OutputFile};
use std::error::Error;
use std::io;

/// The chain of a refused output, from the top down to the `io::Error`. A link that points
/// at itself cannot be followed, for root too.
#[test]
fn a_refused_output_returns_the_operating_systems_error() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("loop.csv");
    std::os::unix::fs::symlink(&dest, &dest).unwrap();

    let Err(top) = OutputFile::create(&dest, None, true) else { panic!("a link loop is no output") };
    assert!(matches!(&top, OutputError::Io { dest: d, .. } if *d == dest), "{top:?}");
    assert_eq!(top.to_string(), format!("cannot write {}", dest.display()));
    let bottom = top.source().expect("the operating system's error is the source");
    let io = bottom.downcast_ref::<io::Error>().expect("an io::Error");
    assert_eq!(io.raw_os_error(), Some(libc::ELOOP), "{io}");
    assert!(bottom.source().is_none(), "the chain ends at the operating system");

    let inside = dest.join("tables");
    let Err(top) = OutputDir::create(&inside, true, "parquet") else { panic!("no directory inside a link loop") };
    assert_eq!(top.to_string(), format!("cannot write {}", inside.display()));
    let io = top.source().and_then(|s| s.downcast_ref::<io::Error>()).expect("an io::Error");
    assert_eq!(io.raw_os_error(), Some(libc::ELOOP), "{io}");
}

/// Every variant with a wrapped cause returns it; the others have none.
#[test]
fn only_a_wrapped_cause_is_a_source() {
    let io = OutputError::Io { dest: "out.csv".into(), error: io::Error::from(io::ErrorKind::StorageFull) };
    let kind = io.source().and_then(|s| s.downcast_ref::<io::Error>()).map(io::Error::kind);
    assert_eq!(kind, Some(io::ErrorKind::StorageFull));
    for plain in [OutputError::Dash, OutputError::Exists { dest: "out.csv".into() }] {
        assert!(plain.source().is_none(), "{plain}");
    }
}
