//! The event experiment: one run per method, `samples` samples each, between threads and
//! between processes. Counts only — timing depends on the machine.

use rtloop_lab::event::{event, EventMethod, EventOptions};
use rtloop_lab::report::CommonOptions;

fn common(samples: usize) -> CommonOptions {
    CommonOptions { samples, ..CommonOptions::default() }
}

fn check_counts(processes: bool) {
    let opts = EventOptions { processes, ..EventOptions::default() };
    let outcome = event(&common(200), &opts).expect("event runs");
    assert_eq!(outcome.experiment, "event");
    assert_eq!(outcome.runs.len(), 4);
    let mode = if processes { "(processes)" } else { "(threads)" };
    for (run, method) in outcome.runs.iter().zip(EventMethod::ALL) {
        assert_eq!(run.samples_ns.len(), 200, "{}", run.label);
        assert_eq!(run.method.as_deref(), Some(method.as_str()));
        assert_eq!(run.label, format!("event {method} {mode}"));
        assert!(run.samples_ns.iter().all(|&s| s < 10_000_000_000), "{}: absurd sample", run.label);
    }
}

#[test]
fn threads_give_four_runs_of_200() {
    check_counts(false);
}

#[test]
fn processes_give_four_runs_of_200() {
    check_counts(true);
}

#[test]
fn methods_parse_and_print() {
    for m in EventMethod::ALL {
        assert_eq!(m.to_string().parse::<EventMethod>().unwrap(), m);
    }
    assert_eq!("busy-poll".parse::<EventMethod>().unwrap(), EventMethod::BusyPoll);
    let err = "signal".parse::<EventMethod>().unwrap_err().to_string();
    assert!(err.contains("signal") && err.contains("eventfd, pipe, futex or busy-poll"), "{err}");
}

#[test]
fn nonsense_options_are_refused() {
    assert!(event(&common(0), &EventOptions::default()).unwrap_err().to_string().contains("sample"));
    let none = EventOptions { methods: vec![], processes: false };
    assert!(event(&common(10), &none).unwrap_err().to_string().contains("method"));
}

/// Not a check: prints p50/p99 per method under `other` and `fifo`, with and without load.
/// Run with `cargo test -p rtloop-lab --test lab event:: -- --ignored --nocapture`.
#[test]
#[ignore]
fn print_figures() {
    for (policy, priority) in [(rtloop_rt::Policy::Other, 0), (rtloop_rt::Policy::Fifo, 80)] {
        for load in [0, 2] {
            for processes in [false, true] {
                let mut common = common(5000);
                common.rt.policy = policy;
                common.rt.priority = priority;
                common.load = load;
                let outcome = event(&common, &EventOptions { processes, ..EventOptions::default() }).unwrap();
                for run in &outcome.runs {
                    let s = rtloop_lab::report::Summary::of(&run.samples_ns);
                    println!(
                        "{policy} load {load} {:<28} p50 {:>8.1} µs p99 {:>8.1} µs max {:>9.1} µs",
                        run.label, s.p50_us, s.p99_us, s.max_us
                    );
                }
            }
        }
    }
}
