//! The serial experiment: one run per method over a pty, `samples` round trips each. Counts
//! only — timing depends on the machine.

use rtloop_lab::report::CommonOptions;
use rtloop_lab::serial::{serial, SerialMethod, SerialOptions};

fn common(samples: usize) -> CommonOptions {
    CommonOptions { samples, ..CommonOptions::default() }
}

#[test]
fn three_runs_of_200() {
    let outcome = serial(&common(200), &SerialOptions::default()).expect("serial runs");
    assert_eq!(outcome.experiment, "serial");
    assert_eq!(outcome.runs.len(), 3);
    for (run, method) in outcome.runs.iter().zip(SerialMethod::ALL) {
        assert_eq!(run.samples_ns.len(), 200, "{}", run.label);
        assert_eq!(run.label, format!("serial 16 B {method}"));
        assert_eq!((run.size, run.method.as_deref()), (Some(16), Some(method.as_str())));
    }
}

#[test]
fn messages_above_vmin_and_of_one_byte_work() {
    for size in [1, 300] {
        let opts = SerialOptions { size, ..SerialOptions::default() };
        let outcome = serial(&common(20), &opts).expect("serial runs");
        assert!(outcome.runs.iter().all(|r| r.samples_ns.len() == 20));
    }
}

#[test]
fn methods_parse_and_print() {
    for m in SerialMethod::ALL {
        assert_eq!(m.to_string().parse::<SerialMethod>().unwrap(), m);
    }
    let err = "poll".parse::<SerialMethod>().unwrap_err().to_string();
    assert!(err.contains("'poll'") && err.contains("blocking, epoll or busy-poll"), "{err}");
}

#[test]
fn nonsense_options_are_refused() {
    let zero = SerialOptions { size: 0, ..SerialOptions::default() };
    assert!(serial(&common(10), &zero).unwrap_err().to_string().contains("size"));
    assert!(serial(&common(0), &SerialOptions::default()).unwrap_err().to_string().contains("sample"));
    let none = SerialOptions { methods: vec![], size: 16 };
    assert!(serial(&common(10), &none).unwrap_err().to_string().contains("method"));
}

/// Not a check: prints p50/p99 per method under `other` and `fifo`, with and without load.
/// Run with `cargo test -p rtloop-lab --test lab serial:: -- --ignored --nocapture`.
#[test]
#[ignore]
fn print_figures() {
    for (policy, priority) in [(rtloop_rt::Policy::Other, 0), (rtloop_rt::Policy::Fifo, 80)] {
        for load in [0, 2] {
            let mut common = common(5000);
            common.rt.policy = policy;
            common.rt.priority = priority;
            common.load = load;
            let outcome = serial(&common, &SerialOptions::default()).unwrap();
            for run in &outcome.runs {
                let s = rtloop_lab::report::Summary::of(&run.samples_ns);
                println!(
                    "{policy} load {load} {:<24} p50 {:>8.1} µs p99 {:>8.1} µs max {:>9.1} µs",
                    run.label, s.p50_us, s.p99_us, s.max_us
                );
            }
        }
    }
}
