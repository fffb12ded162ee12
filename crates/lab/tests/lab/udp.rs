//! UDP echo experiment: run counts on loopback, namespace cleanup with --netns, method parsing.
//! No timing assertions: latencies depend on the machine; only the shape of the result is checked.

use rtloop_lab::report::CommonOptions;
use rtloop_lab::udp::{udp_echo, RecvMethod, UdpEchoOptions};
use std::process::Command;
use std::sync::Mutex;

/// The namespace tests share one process id, hence one namespace name, and each checks that
/// none is left: they must not overlap.
static NETNS_TESTS: Mutex<()> = Mutex::new(());

const ALL_METHODS: [RecvMethod; 3] = [RecvMethod::Blocking, RecvMethod::Epoll, RecvMethod::BusyPoll];

fn common(samples: usize) -> CommonOptions {
    CommonOptions { samples, ..CommonOptions::default() }
}

/// One run per size × method, each labelled with what was measured; `network` is "loopback"
/// or "netns", and a namespace run says so in its label too.
fn assert_runs(outcome: &rtloop_lab::report::Outcome, sizes: &[usize], samples: usize, network: &str) {
    assert_eq!(outcome.runs.len(), sizes.len() * ALL_METHODS.len());
    assert!(outcome.setup.contains(&("network".to_string(), network.to_string())), "{:?}", outcome.setup);
    let suffix = if network == "netns" { ", netns" } else { "" };
    for method in ALL_METHODS {
        for &size in sizes {
            let run = outcome
                .runs
                .iter()
                .find(|r| r.size == Some(size) && r.method.as_deref() == Some(method.as_str()))
                .unwrap_or_else(|| panic!("no run for {size} B {method}"));
            assert_eq!(run.samples_ns.len(), samples, "{}", run.label);
            assert_eq!(run.label, format!("udp-echo {size} B {method}{suffix}"));
            assert!(run.samples_ns.iter().all(|&ns| ns > 0), "{}: a round trip cannot take 0 ns", run.label);
        }
    }
}

#[test]
fn loopback_gives_one_full_run_per_size_and_method() {
    let opts = UdpEchoOptions { sizes: vec![16, 1024], methods: ALL_METHODS.to_vec(), netns: false, port: 0 };
    let outcome = udp_echo(&common(200), &opts).expect("udp echo on loopback");
    assert_eq!(outcome.experiment, "udp-echo");
    assert_runs(&outcome, &[16, 1024], 200, "loopback");
}

fn leftovers() -> Vec<String> {
    let run = |args: &[&str]| {
        let out = Command::new("ip").args(args).output().expect("ip runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut left: Vec<String> =
        run(&["netns", "list"]).lines().filter(|l| l.starts_with("rtloop-lab-")).map(str::to_string).collect();
    left.extend(run(&["-o", "link"]).lines().filter(|l| l.contains("rtlab")).map(str::to_string));
    left
}

#[test]
fn netns_runs_complete_and_leave_nothing_behind() {
    let _serial = NETNS_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        rtloop_testkit::skip("--netns needs root to create network namespaces");
        return;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        rtloop_testkit::skip("needs the ip command (apt-get install iproute2)");
        return;
    }
    let opts = UdpEchoOptions { sizes: vec![16, 1024], methods: ALL_METHODS.to_vec(), netns: true, port: 0 };
    let outcome = udp_echo(&common(200), &opts).expect("udp echo across a namespace");
    assert_runs(&outcome, &[16, 1024], 200, "netns");
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
}

#[test]
fn netns_bad_options_leave_nothing_behind() {
    let _serial = NETNS_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 || Command::new("ip").arg("-V").output().is_err() {
        rtloop_testkit::skip("needs root and the ip command (iproute2) to create network namespaces");
        return;
    }
    // Options are checked before the namespace is created, so a refusal creates nothing.
    let opts = UdpEchoOptions { sizes: vec![0], methods: vec![RecvMethod::Blocking], netns: true, port: 0 };
    assert!(udp_echo(&common(10), &opts).is_err());
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
}

#[test]
fn method_names_round_trip_and_errors_are_clear() {
    for method in ALL_METHODS {
        assert_eq!(method.to_string().parse::<RecvMethod>().unwrap(), method);
    }
    assert_eq!("busy-poll".parse::<RecvMethod>().unwrap(), RecvMethod::BusyPoll);
    let err = "busypoll".parse::<RecvMethod>().unwrap_err().to_string();
    assert!(err.contains("busypoll"), "{err}");
    assert!(err.contains("blocking, epoll or busy-poll"), "{err}");
    assert!("".parse::<RecvMethod>().is_err());
    assert!("Epoll".parse::<RecvMethod>().is_err());
}

#[test]
fn bad_options_are_refused_before_anything_runs() {
    let base = UdpEchoOptions::default();
    assert_eq!(base.sizes, vec![16, 64, 256, 1024]);
    assert_eq!(base.methods, vec![RecvMethod::Blocking]);
    let too_big = UdpEchoOptions { sizes: vec![70_000], ..base.clone() };
    assert!(udp_echo(&common(10), &too_big).unwrap_err().to_string().contains("70000"));
    let no_methods = UdpEchoOptions { methods: vec![], ..base };
    assert!(udp_echo(&common(10), &no_methods).is_err());
}

#[test]
fn serve_echo_rejects_bad_arguments() {
    let lifetime =
        |seconds: f64, idle_seconds: f64| rtloop_lab::udp::ServerLifetime { seconds, idle_seconds, parent_pid: None };
    let second = lifetime(1.0, 1.0);
    assert!(rtloop_lab::udp::serve_echo("not-an-address", "blocking", second, false)
        .unwrap_err()
        .to_string()
        .contains("not-an-address"));
    assert!(rtloop_lab::udp::serve_echo("127.0.0.1:0", "poll", second, false)
        .unwrap_err()
        .to_string()
        .contains("poll"));
    assert!(rtloop_lab::udp::serve_echo("127.0.0.1:0", "blocking", lifetime(0.0, 1.0), false).is_err());
    for idle in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let err =
            rtloop_lab::udp::serve_echo("127.0.0.1:0", "blocking", lifetime(1.0, idle), false).unwrap_err().to_string();
        assert!(err.contains("--idle-seconds"), "{idle}: {err}");
    }
    for pid in [0, u32::MAX] {
        let orphan = rtloop_lab::udp::ServerLifetime { parent_pid: Some(pid), ..second };
        let err = rtloop_lab::udp::serve_echo("127.0.0.1:0", "blocking", orphan, false).unwrap_err().to_string();
        assert!(err.contains(&format!("--parent-pid {pid} is out of range")), "{err}");
    }
}
