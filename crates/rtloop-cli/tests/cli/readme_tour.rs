//! The README's tour, run as written: every command of every indented block of "A short tour"
//! in one scratch directory, in order, with `rtloop` on the PATH as the binary under test.
//!
//! * A command ending in `&` is started in the background and waited for until it says it is
//!   serving; the background commands are stopped (SIGTERM) when the tour ends.
//! * A command exits 0 unless its comment says `(exit N)`.
//! * Lines right below a command that are not commands are its expected output, line by line.
//! * A command whose `"` quotes are still open continues on the next lines.
//! * Commands that need a tool this machine lacks (cyclictest and sockperf for
//!   `rtloop lab compare`, nightly for fuzzing) are skipped with `testkit::skip`, saying so.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One command of the tour and what it must do.
#[derive(Debug)]
struct Step {
    command: String,
    background: bool,
    exit_code: i32,
    expected_output: Vec<String>,
}

const COMMAND_STARTS: &[&str] = &["rtloop ", "python3 ", ".venv/", "cargo "];

fn is_command(line: &str) -> bool {
    COMMAND_STARTS.iter().any(|s| line.starts_with(s))
}

/// The tour's steps, parsed from the README text.
fn tour(readme: &str) -> Vec<Step> {
    let start = readme.find("## A short tour").expect("the README has a tour");
    let end = readme[start..].find("\n## ").map_or(readme.len(), |e| start + e);
    let mut steps: Vec<Step> = Vec::new();
    let mut lines = readme[start..end].lines().peekable();
    let mut in_command_block = false;
    while let Some(line) = lines.next() {
        let Some(code) = line.strip_prefix("    ") else {
            in_command_block = false;
            continue;
        };
        if is_command(code) {
            in_command_block = true;
            let mut command = code.to_string();
            // A quoted argument spread over several lines (a Python script, say).
            while command.matches('"').count() % 2 == 1 {
                let Some(next) = lines.next() else { break };
                command.push('\n');
                command.push_str(next.strip_prefix("    ").unwrap_or(next));
            }
            let (body, comment) = match command.find("  #") {
                Some(i) => (command[..i].trim_end().to_string(), command[i..].to_string()),
                None => (command.trim_end().to_string(), String::new()),
            };
            let background = body.ends_with('&');
            let exit_code = comment
                .split("(exit ")
                .nth(1)
                .and_then(|rest| rest.split(')').next())
                .map_or(0, |n| n.trim().parse().expect("(exit N) names a number"));
            steps.push(Step {
                command: body.trim_end_matches('&').trim_end().to_string(),
                background,
                exit_code,
                expected_output: Vec::new(),
            });
        } else if in_command_block {
            if let Some(step) = steps.last_mut() {
                step.expected_output.push(code.trim_end().to_string());
            }
        }
    }
    steps
}

fn installed(program: &str) -> bool {
    Command::new(program).arg("--help").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// Why a step cannot run on this machine, if it cannot.
fn missing_tool(command: &str) -> Option<&'static str> {
    if command.starts_with("rtloop lab compare") && !(installed("cyclictest") && installed("sockperf")) {
        return Some("needs cyclictest (apt-get install rt-tests) and sockperf (apt-get install sockperf)");
    }
    None
}

/// A shell running `command` in `dir`, with `rtloop` on the PATH.
fn shell(command: &str, dir: &Path, bin_dir: &Path) -> Command {
    let mut c = Command::new("bash");
    c.arg("-c").arg(command).current_dir(dir);
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin_dir.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    c.env("PATH", std::env::join_paths(paths).unwrap());
    c
}

/// Start a background command and wait until it prints that it is serving.
fn start_background(step: &Step, dir: &Path, bin_dir: &Path) -> Child {
    // `exec` so the signal at the end reaches the program, not a shell around it.
    let mut child = shell(&format!("exec {}", step.command), dir, bin_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("bash runs");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Read to the end, so the program never writes into a closed pipe.
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("serving") => return child,
            Ok(_) => continue,
            Err(_) => {
                let _ = child.kill();
                panic!("`{}` did not start serving within 30 s", step.command);
            }
        }
    }
}

/// Stops the background commands however the tour ends.
struct Background(Vec<Child>);

impl Drop for Background {
    fn drop(&mut self) {
        for child in &mut self.0 {
            // SAFETY: kill with a valid signal number on a pid we spawned and have not reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        }
        for child in &mut self.0 {
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn the_tour_parses_into_commands_with_their_outputs_and_exit_codes() {
    let readme = "## A short tour\n\n    rtloop frame encode query\n    8001 11001f01130d\n\n    \
                  [[bus]]\n    bus = 1\n\n    rtloop sim --udp 127.0.0.1:9 &  # a server\n    \
                  rtloop run --fault 5@1   # (exit 1)\n    python3 -c \"print(1)\n    print(2)\"\n\n## Layout\n    rtloop no\n";
    let steps = tour(readme);
    let commands: Vec<&str> = steps.iter().map(|s| s.command.as_str()).collect();
    assert_eq!(
        commands,
        [
            "rtloop frame encode query",
            "rtloop sim --udp 127.0.0.1:9",
            "rtloop run --fault 5@1",
            "python3 -c \"print(1)\nprint(2)\""
        ]
    );
    assert_eq!(steps[0].expected_output, ["8001 11001f01130d"]);
    assert!(steps[1].background && !steps[0].background);
    assert_eq!((steps[1].exit_code, steps[2].exit_code), (0, 1));
}

#[test]
fn every_command_of_the_readme_tour_works_as_written() {
    let readme_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let steps = tour(&readme);
    assert!(steps.len() > 20, "the tour has its commands: {steps:?}");
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(support::rtloop_bin(), bin_dir.path().join("rtloop")).unwrap();
    let mut background = Background(Vec::new());
    for step in &steps {
        if let Some(why) = missing_tool(&step.command) {
            testkit::skip(&format!("README tour `{}`: {why}", step.command));
            continue;
        }
        if step.background {
            background.0.push(start_background(step, dir.path(), bin_dir.path()));
            continue;
        }
        let started = Instant::now();
        let out = shell(&step.command, dir.path(), bin_dir.path()).output().expect("bash runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("README tour: `{}` took {:.1} s", step.command, started.elapsed().as_secs_f64());
        assert_eq!(
            out.status.code(),
            Some(step.exit_code),
            "README tour: `{}` exited {:?}, the README says {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            step.command,
            out.status.code(),
            step.exit_code
        );
        if !step.expected_output.is_empty() {
            let got: Vec<&str> = stdout.lines().collect();
            assert_eq!(got, step.expected_output, "README tour: `{}` printed something else", step.command);
        }
    }
}
