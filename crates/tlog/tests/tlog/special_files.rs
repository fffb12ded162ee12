//! The reader opens regular files only: a FIFO would block the open until some writer came,
//! and `/dev/zero` would read as an empty log. Both are made here, in a temporary directory
//! (mkfifo; mknod of a zero-like node when running as root), never taken from /dev.

use rtloop_tlog::format::TlogError;
use rtloop_tlog::reader::FileReader;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

/// `FileReader::open(path)` on another thread, with a guard against a hang (a guard only:
/// a refusal comes at once).
fn open_guarded(path: &Path) -> Result<FileReader, TlogError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(FileReader::open(&path));
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("FileReader::open blocked")
}

fn assert_refused(result: Result<FileReader, TlogError>, kind: &str) {
    match result {
        Err(e @ TlogError::NotAFile { .. }) => {
            let text = e.to_string();
            assert!(text.starts_with(&format!("it is {kind}, not a log file")), "{text}");
        }
        Err(e) => panic!("refused for the wrong reason: {e}"),
        Ok(_) => panic!("opened as a log"),
    }
}

#[test]
fn a_fifo_is_refused_at_once_by_name_or_through_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.tlog");
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
    assert_eq!(unsafe { libc::mkfifo(c_path(&fifo).as_ptr(), 0o644) }, 0);
    let link = dir.path().join("link.tlog");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    assert_refused(open_guarded(&fifo), "a FIFO (named pipe)");
    assert_refused(open_guarded(&link), "a FIFO (named pipe)");
}

#[test]
fn a_directory_and_a_device_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    assert_refused(open_guarded(dir.path()), "a directory");
    let zero = dir.path().join("zero-like");
    // SAFETY: a valid NUL-terminated path; mknod only creates a file.
    let made = unsafe { libc::mknod(c_path(&zero).as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 5)) };
    if made != 0 {
        rtloop_testkit::skip("needs root (CAP_MKNOD) to make a device node; the directory is still checked");
        return;
    }
    assert_refused(open_guarded(&zero), "a character device");
    // An already opened device is refused by from_file too.
    let file = std::fs::File::open(&zero).unwrap();
    assert!(matches!(FileReader::from_file(file), Err(TlogError::NotAFile { kind: "a character device" })));
}
