//! `rtloop log …` against what an audit of the log tools found: outputs pointed at device
//! nodes, FIFOs, sockets or `-`; a dump into a sink that fails (a full device, a descriptor
//! that cannot be written) versus one whose reader went away; `export --json` that failed;
//! records without items; plots with nothing to draw; logs that are FIFOs or devices; and a
//! log on a full disk, whose `written` count must match the file.
//!
//! Every special file is made by the test in its own scratch directory (mkfifo; mknod of
//! null-, zero- and full-like device nodes when running as root) — never a system path. The
//! full disk is a 200 KiB tmpfs mounted inside a private mount namespace (`unshare`), so it
//! vanishes with the command even if the test dies.

use crate::support;

use rtloop_tlog::writer::{FileWriter, WriterOptions};
use serde::Serialize;
use serde_json::Value;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::*;

const T0_US: i64 = 1_700_000_000_000_000;

#[derive(Serialize, Default)]
struct Cycle {
    index: u64,
    position: f64,
    velocity: f64,
}

#[derive(Serialize, Default)]
struct Event {
    kind: String,
}

/// A log like `rtloop run` writes: `cycles` items of `cycle` 1 ms apart (`velocity` NaN
/// throughout), and an `event` record with no items.
fn write_log(path: &Path, cycles: u64) {
    let mut writer = FileWriter::new(Vec::new(), WriterOptions::default()).unwrap();
    let cycle = writer.register::<Cycle>("cycle").unwrap();
    writer.register::<Event>("event").unwrap();
    for i in 0..cycles {
        let value = Cycle { index: i, position: i as f64 / 1000.0, velocity: f64::NAN };
        writer.write(&cycle, T0_US + i as i64 * 1000, &value).unwrap();
    }
    std::fs::write(path, writer.close().unwrap()).unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

fn mkfifo(path: &Path) {
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
    assert_eq!(unsafe { libc::mkfifo(c_path(path).as_ptr(), 0o644) }, 0, "mkfifo {}", path.display());
}

/// A character device node with the numbers of /dev/null (1, 3), /dev/zero (1, 5) or
/// /dev/full (1, 7) at `path`; false without the right to make one (not root).
fn mknod_char(path: &Path, minor: u32) -> bool {
    // SAFETY: a valid NUL-terminated path; mknod only creates a file.
    unsafe { libc::mknod(c_path(path).as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, minor)) == 0 }
}

/// One line on stderr, no Debug structs, no panic, exit status 2.
fn assert_one_sentence(o: &Output, args: &[&str]) -> String {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
    assert_eq!(e.trim().lines().count(), 1, "{args:?}: {e}");
    for bad in ["panicked", "Os {", "Error(", "Error {", "tlog I/O error"] {
        assert!(!e.contains(bad), "{args:?}: {e}");
    }
    e
}

/// `rtloop args` with a guard against a hang: a command that has not ended after a minute
/// is killed and the test fails (a guard only, never a timing check).
fn rtloop_ending(args: &[&str]) -> Output {
    let mut child = Command::new(rtloop_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rtloop {args:?} blocked");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

// ---------------------------------------------------------------------------------------
// 1. Outputs that are not regular files

#[test]
fn export_and_plot_never_replace_a_device_fifo_or_socket_even_with_force() {
    let dir = Scratch::new("special-out");
    let log = dir.path("run.tlog");
    write_log(&log, 50);
    let fifo = dir.path("fifo");
    mkfifo(&fifo);
    std::os::unix::fs::symlink(&fifo, dir.path("fifo-link.csv")).unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(dir.path("sock")).unwrap();
    let node = dir.path("null-like");
    let have_node = mknod_char(&node, 3);
    if !have_node {
        rtloop_testkit::skip("needs root (CAP_MKNOD) to make a device node; FIFOs and sockets are still checked");
    }
    let mut cases: Vec<(&str, String, &str)> = vec![
        ("--csv", s(&fifo).into(), "is a FIFO"),
        ("--mcap", s(&dir.path("fifo-link.csv")).into(), "is a link to a FIFO"),
        ("--csv", s(&dir.path("sock")).into(), "is a socket"),
    ];
    if have_node {
        cases.push(("--csv", s(&node).into(), "is a character device"));
        cases.push(("--mcap", s(&node).into(), "is a character device"));
    }
    for (flag, dest, what) in &cases {
        let args = ["log", "export", s(&log), flag, dest, "--force"];
        let e = assert_one_sentence(&rtloop(&args), &args);
        assert!(e.contains(&format!("{flag} {dest} {what}")), "{args:?}: {e}");
    }
    let (fifo_link, png_link) = (dir.path("fifo-link.csv"), dir.path("p.png"));
    let args = ["log", "plot", s(&log), "--fields", "cycle.position", "--out", s(&fifo_link)];
    assert_one_sentence(&rtloop(&args), &args);
    std::os::unix::fs::symlink(&fifo, &png_link).unwrap();
    let args = ["log", "plot", s(&log), "--fields", "cycle.position", "--out", s(&png_link), "--force"];
    let e = assert_one_sentence(&rtloop(&args), &args);
    assert!(e.contains("is a link to a FIFO"), "{e}");

    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(std::fs::symlink_metadata(dir.path("sock")).unwrap().file_type().is_socket());
    if have_node {
        let m = std::fs::symlink_metadata(&node).unwrap();
        assert!(m.file_type().is_char_device() && m.rdev() == libc::makedev(1, 3), "the node was replaced");
    }
    let mut expected = vec!["fifo", "fifo-link.csv", "p.png", "run.tlog", "sock"];
    if have_node {
        expected.insert(2, "null-like");
    }
    assert_eq!(dir.names(), expected, "nothing was created or replaced");
}

#[test]
fn a_dash_is_not_an_output_file() {
    let dir = Scratch::new("dash");
    let log = dir.path("run.tlog");
    write_log(&log, 50);
    for flag in ["--csv", "--mcap"] {
        let args = ["log", "export", s(&log), flag, "-", "--force"];
        let o = Command::new(rtloop_bin()).args(args).current_dir(dir.dir()).output().unwrap();
        let e = assert_one_sentence(&o, &args);
        assert!(e.contains(&format!("{flag} - does not mean standard output")) && e.contains("./-"), "{e}");
    }
    assert_eq!(dir.names(), ["run.tlog"], "no file named - was written");
    // A file that is really called `-` is named as one.
    let o = Command::new(rtloop_bin()).args(["log", "export", s(&log), "--csv", "./-"]).current_dir(dir.dir()).output();
    assert!(o.unwrap().status.success());
    assert!(std::fs::read_to_string(dir.path("-")).unwrap().starts_with("timestamp,index,position,velocity\n"));
}

// ---------------------------------------------------------------------------------------
// 2. A dump whose output fails

/// `rtloop log dump` with its stdout on `sink`.
fn dump_into(sink: impl Into<Stdio>, args: &[&str]) -> Output {
    Command::new(rtloop_bin()).args(["log", "dump"]).args(args).stdout(sink).stderr(Stdio::piped()).output().unwrap()
}

#[test]
fn a_dump_that_cannot_write_fails_and_says_so() {
    let dir = Scratch::new("dump-fail");
    let log = dir.path("run.tlog");
    // 2000 lines: far more than stdout's buffer, so the failure comes mid-dump; `--to 0`
    // prints one line, so it comes only when the last of the output is flushed.
    write_log(&log, 2000);
    let many = ["--record", "cycle"];
    let one = ["--record", "cycle", "--to", "0"];

    // A file that may not grow past 4 KiB (RLIMIT_FSIZE, with SIGXFSZ ignored so the write
    // fails with EFBIG instead of killing the process): a full disk without root.
    for args in [&many[..], &one[..]] {
        let mut full: Vec<&str> = vec![s(&log)];
        full.extend(args);
        let limit: u64 = if args.len() == 2 { 4096 } else { 0 };
        let sink = std::fs::File::create(dir.path("limited.jsonl")).unwrap();
        let mut command = Command::new(rtloop_bin());
        command.args(["log", "dump"]).args(&full).stdout(sink).stderr(Stdio::piped());
        // SAFETY: between fork and exec only async-signal-safe calls (setrlimit, signal).
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                let rlimit = libc::rlimit { rlim_cur: limit, rlim_max: limit };
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                if libc::setrlimit(libc::RLIMIT_FSIZE, &rlimit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let o = command.output().unwrap();
        let e = assert_one_sentence(&o, &full);
        assert!(e.contains("cannot write the dump (File too large") && e.contains("cut short"), "{e}");
        let written = std::fs::metadata(dir.path("limited.jsonl")).unwrap().len();
        assert_eq!(written, limit, "{full:?}");
    }

    // A full device (a node like /dev/full, made here): ENOSPC.
    let node = dir.path("full-like");
    if mknod_char(&node, 7) {
        for args in [&many[..], &one[..]] {
            let mut full: Vec<&str> = vec![s(&log)];
            full.extend(args);
            let sink = std::fs::OpenOptions::new().write(true).open(&node).unwrap();
            let o = dump_into(sink, &full);
            let e = assert_one_sentence(&o, &full);
            assert!(e.contains("cannot write the dump (No space left on device") && e.contains("cut short"), "{e}");
        }
        assert!(std::fs::symlink_metadata(&node).unwrap().file_type().is_char_device());
    } else {
        rtloop_testkit::skip(
            "needs root (CAP_MKNOD) to make a /dev/full-like node; the read-only sink is still checked",
        );
    }

    // A reader that went away (`| head`): the dump just ends, successfully and quietly.
    let (reader, writer) = std::os::unix::net::UnixStream::pair().unwrap();
    drop(reader);
    let o = dump_into(std::os::fd::OwnedFd::from(writer), &[s(&log), "--record", "cycle"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stderr(&o).contains("no item"), "a closed pipe is not an empty dump: {}", stderr(&o));
}

// ---------------------------------------------------------------------------------------
// 3. Failed exports still report in JSON; no items is not damage; plots with nothing to draw

#[test]
fn a_failed_export_with_json_still_prints_its_json_line() {
    let dir = Scratch::new("json-fail");
    let log = dir.path("run.tlog");
    write_log(&log, 50);
    let csv = dir.path("event.csv");
    let args = ["log", "export", s(&log), "--csv", s(&csv), "--record", "event", "--json"];
    let o = rtloop(&args);
    let e = assert_one_sentence(&o, &args);
    assert!(e.contains("record 'event' has no items"), "{e}");
    assert!(!e.contains("decode"), "no items is not damage: {e}");
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    let j: Value = serde_json::from_str(out.trim()).unwrap_or_else(|err| panic!("{err}: {out}"));
    assert_eq!(j["error"].as_str(), Some(e.trim().trim_start_matches("rtloop: ")), "{j}");
    assert_eq!(j["rows"], 0, "{j}");
    assert_eq!(j["record"], "event", "{j}");
    assert_eq!(j["skipped"], 0, "{j}");
    assert!(!csv.exists());

    // A failure before anything was read (the output exists) is reported the same way.
    std::fs::write(&csv, "keep\n").unwrap();
    let args = ["log", "export", s(&log), "--mcap", s(&csv), "--json"];
    let o = rtloop(&args);
    let e = assert_one_sentence(&o, &args);
    let j: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert!(j["error"].as_str().is_some_and(|m| m.contains("--force")), "{j} / {e}");
    assert_eq!(j["format"], "mcap");
    assert_eq!(std::fs::read_to_string(&csv).unwrap(), "keep\n");

    // Success says so too.
    let good = dir.path("cycle.csv");
    let o = rtloop(&["log", "export", s(&log), "--csv", s(&good), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: Value = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
    assert_eq!((j["error"].clone(), j["rows"].clone()), (Value::Null, Value::from(50)), "{j}");
}

#[test]
fn a_plot_with_nothing_to_draw_fails_and_names_the_fields() {
    let dir = Scratch::new("plot-empty");
    let log = dir.path("run.tlog");
    write_log(&log, 50);
    let png = dir.path("p.png");

    // Nothing at all to draw: exit 2, no file, every field named with its reason.
    let args = ["log", "plot", s(&log), "--fields", "cycle.velocity,event.kind", "--out", s(&png)];
    let e = assert_one_sentence(&rtloop(&args), &args);
    assert!(e.contains("nothing to draw"), "{e}");
    assert!(e.contains("field 'cycle.velocity' has 50 values and none is a finite number"), "{e}");
    assert!(e.contains("field 'event.kind' has no values: record 'event' has no items"), "{e}");
    assert!(!png.exists());

    // Something drawn: exit 0, the empty field named in a warning.
    let args = ["log", "plot", s(&log), "--fields", "cycle.position,cycle.velocity", "--out", s(&png)];
    let o = rtloop(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("1 of 2 series drawn"), "{}", stdout(&o));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("warning: field 'cycle.velocity' has 50 values and none is a finite number"), "{e}");
    assert_eq!(&std::fs::read(&png).unwrap()[..4], b"\x89PNG");
}

// ---------------------------------------------------------------------------------------
// 4. Logs that are not regular files

#[test]
fn a_fifo_device_or_directory_is_not_read_as_a_log_and_never_blocks() {
    let dir = Scratch::new("special-in");
    let fifo = dir.path("fifo.tlog");
    mkfifo(&fifo);
    std::os::unix::fs::symlink(&fifo, dir.path("link.tlog")).unwrap();
    let zero = dir.path("zero-like");
    let have_node = mknod_char(&zero, 5);
    if !have_node {
        rtloop_testkit::skip(
            "needs root (CAP_MKNOD) to make a /dev/zero-like node; FIFOs and directories are still checked",
        );
    }
    let out = dir.path("out.csv");
    let png = dir.path("out.png");
    let mut inputs = vec![(s(&fifo).to_string(), "is a FIFO"), (s(&dir.path("link.tlog")).to_string(), "is a FIFO")];
    inputs.push((s(dir.dir()).to_string(), "is a directory"));
    if have_node {
        inputs.push((s(&zero).to_string(), "is a character device"));
    }
    for (input, what) in &inputs {
        let commands: [Vec<&str>; 5] = [
            vec!["log", "info", input],
            vec!["log", "info", input, "--json"],
            vec!["log", "dump", input],
            vec!["log", "export", input, "--csv", s(&out)],
            vec!["log", "plot", input, "--fields", "cycle.position", "--out", s(&png)],
        ];
        for args in commands {
            let e = assert_one_sentence(&rtloop_ending(&args), &args);
            assert!(e.contains(&format!("cannot read the log {input}: it {what}")), "{args:?}: {e}");
            assert!(e.contains("not a log file"), "{args:?}: {e}");
            assert!(!e.contains("empty"), "{args:?}: {e}");
        }
    }
    assert!(!out.exists() && !png.exists());
}

// ---------------------------------------------------------------------------------------
// 5. A log on a full disk

/// Items of `record` that read back from the log at `path`.
fn items_in(path: &Path, record: &str) -> u64 {
    let reader = rtloop_tlog::reader::FileReader::open(path).unwrap();
    let filter = rtloop_tlog::reader::ItemFilter { record: Some(record.into()), ..Default::default() };
    reader.items(filter).filter(Result::is_ok).count() as u64
}

#[test]
fn on_a_full_disk_the_run_counts_only_what_reached_the_log() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || Command::new("unshare").arg("--version").output().is_err() {
        rtloop_testkit::skip("needs root and unshare (util-linux) to mount a small tmpfs in a private mount namespace");
        return;
    }
    let dir = Scratch::new("full-disk");
    let small = dir.path("small");
    std::fs::create_dir(&small).unwrap();
    let kept = dir.path("x.tlog");
    // The tmpfs exists only inside this command's mount namespace: the log is copied out
    // before the namespace (and the mount) goes away with it.
    let script = format!(
        "mount -t tmpfs -o size=200k tmpfs '{small}' && '{bin}' run --duration 2 --log '{small}/x.tlog' --json \
         --quiet; status=$?; cp '{small}/x.tlog' '{kept}'; exit $status",
        small = s(&small),
        bin = rtloop_bin(),
        kept = s(&kept)
    );
    let o =
        Command::new("unshare").args(["--mount", "--propagation", "private", "sh", "-c", &script]).output().unwrap();
    let text = stdout(&o);
    let summary: Value = serde_json::from_str(text.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{e}: {text} / {}", stderr(&o)));
    let log = &summary["log"];
    let on_disk = std::fs::metadata(&kept).unwrap().len();
    assert!(on_disk <= 200 * 1024, "{on_disk}");
    let cycles = summary["cycles"].as_u64().unwrap();
    let in_file = items_in(&kept, "cycle") + items_in(&kept, "event");
    assert!(in_file < cycles, "the disk was meant to fill: {in_file} items for {cycles} cycles");
    assert_eq!(log["written"].as_u64(), Some(in_file), "written counts what is in the file: {log}");
    assert_eq!(log["bytes"].as_u64(), Some(on_disk), "{log}");
    assert!(log["write_errors"].as_u64().unwrap() > 0, "{log}");
    assert!(log["lost"].as_u64().unwrap() > 0, "{log}");
    assert!(log["first_error"].as_str().unwrap().contains("No space left"), "{log}");
    // A log with a gap is a degraded run: exit 1, the reason in one sentence.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(summary["status"], "degraded", "{summary}");
    let problem =
        summary["problems"].as_array().unwrap().iter().filter_map(Value::as_str).find(|p| p.contains("the log"));
    let problem = problem.unwrap_or_else(|| panic!("no log problem in {summary}"));
    assert!(problem.contains("lost to write errors") && problem.contains("free space"), "{problem}");
    assert!(stderr(&o).contains("the log"), "{}", stderr(&o));
    assert!(std::fs::read_dir(&small).unwrap().next().is_none(), "the tmpfs went with its namespace");
}
