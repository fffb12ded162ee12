//! The moteus C++ library (mjbots' header-only `lib/cpp/mjbots/moteus`) against `rtloop sim`
//! over its fdcanusb pseudo-terminal, with the example program of docs/moteus-tools.md.
//!
//! No package registry ships that library (the `moteus` PyPI package is the Python client
//! only, the `moteus` crate is the Rust one, Debian has no moteus package), and another
//! project's code is not copied into this one. So:
//! * always checked: the two facts the guide's recipe rests on — the library's path
//!   constructor fails on a pty (`TIOCGSERIAL` answers ENOTTY), and a descriptor the program
//!   opens itself with `O_RDWR | O_NOCTTY` carries fdcanusb traffic to the servo, the
//!   diagnostic stream included;
//! * with `RTLOOP_MOTEUS_CPP=<moteus checkout>/lib/cpp` and a C++ compiler: the guide's
//!   example is compiled against that library and run against the simulator; otherwise that
//!   part is skipped, visibly.

use crate::support;

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::*;

/// Where the example lives in docs/moteus-tools.md: the C++ block after this marker.
const EXAMPLE_MARKER: &str = "<!-- example: moteus-cpp-sim -->";

fn readme_example() -> String {
    let guide = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/moteus-tools.md");
    let readme = std::fs::read_to_string(guide).unwrap();
    let after = readme.split_once(EXAMPLE_MARKER).expect("docs/moteus-tools.md has the C++ example marker").1;
    let block = after.split_once("```cpp\n").expect("a ```cpp block after the marker").1;
    block.split_once("```").expect("the block ends").0.to_string()
}

/// The simulator's pty, opened the way the guide says (`O_RDWR | O_NOCTTY`; non-blocking
/// here only so that a silent servo fails the test instead of hanging it).
struct Pty {
    file: std::fs::File,
    input: Vec<u8>,
}

impl Pty {
    fn open(path: &Path) -> Pty {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
            .open(path)
            .unwrap();
        Pty { file, input: Vec::new() }
    }

    /// The next line, within `deadline`.
    fn line(&mut self, deadline: Instant) -> String {
        loop {
            if let Some(end) = self.input.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.input.drain(..=end).collect();
                return String::from_utf8_lossy(&line).trim().to_string();
            }
            assert!(
                Instant::now() < deadline,
                "no complete line from the pty: {:?}",
                String::from_utf8_lossy(&self.input)
            );
            let mut buf = [0u8; 512];
            match self.file.read(&mut buf) {
                Ok(n) => self.input.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(1)),
                Err(e) => panic!("reading the pty: {e}"),
            }
        }
    }

    /// `can send` of a diagnostic subframe (0x40 write or 0x42 poll) to servo 1, padded to
    /// a CAN-FD length with 0x50 (no-op) bytes. Reads the `OK` and, for a poll, the `rcv`
    /// line with the servo's answer, whose bytes it returns.
    fn stream_frame(&mut self, bytes: &[u8]) -> Option<Vec<u8>> {
        let mut data = bytes.to_vec();
        let len = [8, 12, 16, 20, 24, 32, 48, 64].into_iter().find(|n| *n >= data.len()).unwrap();
        data.resize(len, 0x50);
        let hex: String = data.iter().map(|b| format!("{b:02X}")).collect();
        // 0x8000: reply requested (a poll); source 0, destination 1.
        let poll = bytes[0] == 0x42;
        self.file.write_all(format!("can send {} {hex}\n", if poll { "8001" } else { "0001" }).as_bytes()).unwrap();
        let (mut ok, mut rcv) = (false, None);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ok || (poll && rcv.is_none()) {
            let line = self.line(deadline);
            if line == "OK" {
                ok = true;
            } else if let Some(rest) = line.strip_prefix("rcv ") {
                let hex = rest.split_whitespace().nth(1)?;
                rcv =
                    Some((0..hex.len() / 2).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect());
            }
        }
        rcv
    }
}

#[test]
fn the_moteus_cpp_library_recipe_works_on_the_simulator_pty() {
    let path = unique_path("moteus-cpp");
    let _sim = SimProcess::start(&["--fdcanusb", path.to_str().unwrap(), "--servos", "1"]);

    // 1. What the library's path constructor does first fails on a pty.
    let mut pty = Pty::open(&path);
    let mut serial = [0u8; 128]; // at least sizeof(struct serial_struct)
                                 // SAFETY: a valid descriptor, and a buffer larger than the structure the ioctl fills.
    let r = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&pty.file), libc::TIOCGSERIAL, serial.as_mut_ptr()) };
    assert_eq!(r, -1);
    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::ENOTTY));

    // 2. The descriptor the program opened itself carries the diagnostic stream: write a
    //    console line (0x40, channel 1), poll (0x42) until its answer is complete.
    let command = b"conf get servo.default_timeout_s\n";
    let mut write = vec![0x40, 0x01, command.len() as u8];
    write.extend_from_slice(command);
    pty.stream_frame(&write);
    let mut answer = Vec::new();
    let start = Instant::now();
    while !answer.ends_with(b"\n") {
        assert!(start.elapsed() < Duration::from_secs(10), "no answer: {:?}", String::from_utf8_lossy(&answer));
        let reply = pty.stream_frame(&[0x42, 0x01, 48]).expect("a 0x42 poll is always answered");
        assert_eq!(&reply[..2], &[0x41, 0x01], "{reply:02x?}");
        let n = reply[2] as usize;
        answer.extend_from_slice(&reply[3..3 + n]);
    }
    let text = String::from_utf8_lossy(&answer);
    assert!(text.trim().parse::<f64>().is_ok_and(|v| v > 0.0), "{text:?}");
    drop(pty);

    // 3. The example of docs/moteus-tools.md, compiled against the real library when one is
    // at hand (read in any case: the guide must still have it).
    let example = readme_example();
    let Some(lib) = std::env::var_os("RTLOOP_MOTEUS_CPP").map(PathBuf::from) else {
        rtloop_testkit::skip(
            "the moteus C++ library is in no package registry (PyPI's moteus is Python, the moteus crate is Rust, \
             Debian has none); set RTLOOP_MOTEUS_CPP=<moteus checkout>/lib/cpp to compile and run the example of docs/moteus-tools.md",
        );
        return;
    };
    assert!(
        lib.join("mjbots/moteus/moteus.h").exists(),
        "RTLOOP_MOTEUS_CPP={} has no mjbots/moteus/moteus.h",
        lib.display()
    );
    let Some(cxx) = ["c++", "g++", "clang++"].into_iter().find(|c| Command::new(c).arg("--version").output().is_ok())
    else {
        rtloop_testkit::skip(
            "needs a C++ compiler (apt-get install g++) to build the moteus C++ example of docs/moteus-tools.md",
        );
        return;
    };
    let scratch = Scratch::new("moteus-cpp");
    let source = scratch.path("sim_conf_get.cc");
    std::fs::write(&source, example).unwrap();
    let exe = scratch.path("sim_conf_get");
    let built = run_limited(
        Command::new(cxx).args(["-std=c++17", "-O1", "-pthread", "-I"]).arg(&lib).arg(&source).arg("-o").arg(&exe),
        b"",
        Duration::from_secs(300),
    );
    assert!(built.success(), "the example of docs/moteus-tools.md does not compile: {}", built.describe());
    let ran = run_limited(Command::new(&exe).arg(&path), b"", Duration::from_secs(30));
    assert!(ran.success(), "{}", ran.describe());
    let value: f64 = ran.stdout.trim().parse().unwrap_or_else(|_| panic!("{}", ran.describe()));
    assert!(value > 0.0, "{}", ran.describe());

    // And why the guide does not simply pass the path: the library's path constructor
    // gives up on the pty.
    let probe = scratch.path("path_constructor.cc");
    std::fs::write(
        &probe,
        r#"#include <iostream>
#include "mjbots/moteus/moteus.h"
int main(int, char** argv) {
  try {
    mjbots::moteus::Fdcanusb transport(argv[1]);
    std::cout << "opened\n";
  } catch (const std::exception& e) {
    std::cout << "failed: " << e.what() << "\n";
  }
}
"#,
    )
    .unwrap();
    let probe_exe = scratch.path("path_constructor");
    let built = run_limited(
        Command::new(cxx).args(["-std=c++17", "-O1", "-pthread", "-I"]).arg(&lib).arg(&probe).arg("-o").arg(&probe_exe),
        b"",
        Duration::from_secs(300),
    );
    assert!(built.success(), "{}", built.describe());
    let ran = run_limited(Command::new(&probe_exe).arg(&path), b"", Duration::from_secs(30));
    assert_eq!(ran.stdout.trim(), "failed: Inappropriate ioctl for device", "{}", ran.describe());
}
