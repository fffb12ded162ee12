//! What an output may land on. Every special file here is made by the test in its own
//! temporary directory (mkfifo; mknod of a null-like device node, which needs root) — never a
//! system path. Each refusal must leave the special file, and any link to it, exactly as it
//! was, and leave no temporary file behind.

use rtloop_output::{OutputError, OutputFile};
use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

fn mkfifo(path: &Path) {
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
    assert_eq!(unsafe { libc::mkfifo(c_path(path).as_ptr(), 0o644) }, 0, "mkfifo {}", path.display());
}

/// A character device node with /dev/null's numbers (1, 3), or `None` without the right to
/// make one.
fn mknod_null(path: &Path) -> Option<()> {
    // SAFETY: a valid NUL-terminated path; mknod only creates a file.
    let made = unsafe { libc::mknod(c_path(path).as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    (made == 0).then_some(())
}

/// (is a char device, its device numbers) of whatever is at `path`, links not followed.
fn node(path: &Path) -> (bool, u64) {
    let m = std::fs::symlink_metadata(path).unwrap();
    (m.file_type().is_char_device(), m.rdev())
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// `OutputFile::create` with replacing allowed; the error, or a panic if it was accepted.
fn refused(dest: &Path) -> OutputError {
    match OutputFile::create(dest, None, true) {
        Ok(_) => panic!("{} was accepted as an output", dest.display()),
        Err(e) => e,
    }
}

fn assert_one_sentence(e: &OutputError, dest: &Path, kind: &str) {
    let text = e.to_string();
    assert!(text.contains(&dest.display().to_string()) && text.contains(kind), "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(!text.contains('{'), "{text}");
}

#[test]
fn a_fifo_or_a_link_to_one_is_never_replaced_or_written() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let link = dir.path().join("link.csv");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();

    let e = refused(&fifo);
    assert!(matches!(e, OutputError::NotAFile { through_link: false, .. }), "{e:?}");
    assert_one_sentence(&e, &fifo, "a FIFO");
    let e = refused(&link);
    assert!(matches!(e, OutputError::NotAFile { through_link: true, .. }), "{e:?}");
    assert_one_sentence(&e, &link, "a link to a FIFO");

    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    assert_eq!(std::fs::read_link(&link).unwrap(), fifo);
    assert_eq!(names(dir.path()), ["fifo", "link.csv"], "no temporary file is left");
}

#[test]
fn a_device_node_or_a_link_to_one_is_never_replaced_or_written() {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("null-like");
    if mknod_null(&dev).is_none() {
        rtloop_testkit::skip("needs root (CAP_MKNOD) to make a device node: run the tests as root");
        return;
    }
    let before = node(&dev);
    assert!(before.0);
    let link = dir.path().join("out.csv");
    std::os::unix::fs::symlink(&dev, &link).unwrap();

    let e = refused(&dev);
    assert_one_sentence(&e, &dev, "is a character device");
    let e = refused(&link);
    assert_one_sentence(&e, &link, "is a link to a character device");
    assert_eq!(node(&dev), before, "the device node is still there, the same device");
    assert_eq!(std::fs::read_link(&link).unwrap(), dev);
    assert_eq!(names(dir.path()), ["null-like", "out.csv"]);
}

#[test]
fn sockets_and_directories_are_refused_too() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    assert_one_sentence(&refused(&socket), &socket, "a socket");
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let link = dir.path().join("to-sub");
    std::os::unix::fs::symlink(&sub, &link).unwrap();
    assert!(matches!(refused(&sub), OutputError::IsDirectory { .. }));
    assert!(matches!(refused(&link), OutputError::IsDirectory { .. }));
    assert!(std::fs::symlink_metadata(&socket).unwrap().file_type().is_socket());
    assert_eq!(names(dir.path()), ["sock", "sub", "to-sub"]);
}

#[test]
fn a_dash_is_refused_and_no_file_named_dash_appears() {
    let e = refused(Path::new("-"));
    assert!(matches!(e, OutputError::Dash), "{e:?}");
    assert!(e.to_string().contains("./-"), "{e}");
    // The check comes before anything is created in the current directory.
    assert!(!Path::new("-").exists());
}

#[test]
fn what_appears_at_the_destination_while_writing_is_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("late.csv");
    let mut out = OutputFile::create(&dest, None, true).unwrap();
    out.file().write_all(b"a,b\n").unwrap();
    mkfifo(&dest);
    let e = out.commit().unwrap_err();
    assert!(matches!(e, OutputError::NotAFile { .. }), "{e:?}");
    assert!(std::fs::symlink_metadata(&dest).unwrap().file_type().is_fifo());
    assert_eq!(names(dir.path()), ["late.csv"], "the temporary file went with the refused output");
}

#[test]
fn regular_files_and_links_to_them_or_to_nothing_are_still_replaced_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "outside\n").unwrap();
    let cases: Vec<PathBuf> =
        vec![dir.path().join("old.csv"), dir.path().join("link.csv"), dir.path().join("dangling")];
    std::fs::write(&cases[0], "old\n").unwrap();
    std::os::unix::fs::symlink(&victim, &cases[1]).unwrap();
    std::os::unix::fs::symlink(dir.path().join("nothing"), &cases[2]).unwrap();
    for dest in &cases {
        assert!(matches!(OutputFile::create(dest, None, false), Err(OutputError::Exists { .. })));
        let mut out = OutputFile::create(dest, None, true).unwrap();
        out.file().write_all(b"new\n").unwrap();
        out.commit().unwrap();
        assert!(std::fs::symlink_metadata(dest).unwrap().file_type().is_file(), "{}", dest.display());
        assert_eq!(std::fs::read_to_string(dest).unwrap(), "new\n");
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "outside\n", "a link is replaced, never followed");
}
