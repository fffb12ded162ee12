//! `rtloop lab compare`: parsers checked on captured cyclictest and sockperf outputs, and an
//! end-to-end run when both tools are installed.

use rtloop_lab::compare::{
    compare, parse_cyclictest, parse_sockperf, wakeup_figures, wakeup_schedule, wakeup_setup, CompareOptions, Side,
    WAKEUP_ROUNDS,
};

/// `cyclictest -m -p 90 -i 1000 -l 20 -q -h 20000`, empty histogram rows removed.
const CYCLICTEST_HISTOGRAM: &str = "\
# /dev/cpu_dma_latency set to 0us
# Histogram
000000 000000
000024 000002
000026 000005
000030 000004
000041 000005
000055 000003
001735 000001
# Total: 000000020
# Min Latencies: 00024
# Avg Latencies: 00128
# Max Latencies: 01735
# Histogram Overflows: 00000
# Histogram Overflow at cycle number:
# Thread 0:
";

const CYCLICTEST_PLAIN: &str = "\
# /dev/cpu_dma_latency set to 0us
T: 0 ( 3004) P:90 I:1000 C:    100 Min:     24 Act:   33 Avg:   39 Max:      62
";

/// `sockperf pp -i 127.0.0.1 -p 11111 -m 64 -t 1 --full-rtt` (version 3.7), colour codes kept.
const SOCKPERF_PP: &str = "\
sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m
sockperf[CLIENT] send on:sockperf: using recvfrom() to block on socket(s)
sockperf: Test ended
sockperf: [Valid Duration] RunTime=0.548 sec; SentMessages=5068; ReceivedMessages=5068
sockperf: \x1b[2;35m====> avg-rtt=107.951 (std-dev=398.548)\x1b[0m
sockperf: # dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0
sockperf: Summary: Round trip is 107.951 usec
sockperf: \x1b[2;35mTotal 5068 observations\x1b[0m; each percentile contains 50.68 observations
sockperf: ---> <MAX> observation = 7082.211
sockperf: ---> percentile 99.999 = 7082.211
sockperf: ---> percentile 99.990 = 6237.181
sockperf: ---> percentile 99.900 = 4348.082
sockperf: ---> percentile 99.000 = 2629.006
sockperf: ---> percentile 90.000 =   66.007
sockperf: ---> percentile 75.000 =   57.771
sockperf: ---> percentile 50.000 =   51.942
sockperf: ---> percentile 25.000 =   48.188
sockperf: ---> <MIN> observation =   28.960
";

#[test]
fn cyclictest_histogram_gives_percentiles_and_extremes() {
    let f = parse_cyclictest(CYCLICTEST_HISTOGRAM).unwrap();
    assert_eq!(f.samples, 20);
    // Ranks: p50 is the 10th sample (2 + 5 + 4 = 11 reach 30 µs), p99 the 20th (1735 µs).
    assert_eq!(f.p50_us, Some(30.0));
    assert_eq!(f.p99_us, Some(1735.0));
    assert_eq!(f.min_us, Some(24.0));
    // From the histogram (2403 µs over 20 samples), not the printed, truncated "Avg".
    assert_eq!(f.avg_us, Some(120.15));
    assert_eq!(f.max_us, Some(1735.0));
}

#[test]
fn cyclictest_overflows_count_at_the_maximum() {
    let text = "000010 000001\n# Max Latencies: 25000\n# Histogram Overflows: 00001\n";
    let f = parse_cyclictest(text).unwrap();
    assert_eq!(f.samples, 2);
    assert_eq!(f.p50_us, Some(10.0));
    assert_eq!(f.p99_us, Some(25000.0));
}

#[test]
fn cyclictest_status_line_gives_min_avg_max() {
    let f = parse_cyclictest(CYCLICTEST_PLAIN).unwrap();
    assert_eq!((f.min_us, f.avg_us, f.max_us), (Some(24.0), Some(39.0), Some(62.0)));
    assert_eq!(f.samples, 100);
    assert_eq!(f.p50_us, None);
    assert!(parse_cyclictest("nothing here\n").is_err());
}

#[test]
fn sockperf_report_gives_percentiles_average_and_extremes() {
    let f = parse_sockperf(SOCKPERF_PP).unwrap();
    assert_eq!(f.samples, 5068);
    assert_eq!(f.avg_us, Some(107.951));
    assert_eq!(f.p50_us, Some(51.942));
    assert_eq!(f.p99_us, Some(2629.006));
    assert_eq!(f.min_us, Some(28.96));
    assert_eq!(f.max_us, Some(7082.211));
    assert!(parse_sockperf("sockperf: Test ended\n").is_err());
}

fn installed(program: &str) -> bool {
    std::process::Command::new(program).arg("--help").output().is_ok()
}

#[test]
fn end_to_end_prints_both_sides_and_a_json_line() {
    if !installed("cyclictest") || !installed("sockperf") {
        rtloop_testkit::skip("needs cyclictest (apt-get install rt-tests) and sockperf (apt-get install sockperf)");
        return;
    }
    let out = compare(&CompareOptions { samples: 300, sizes: vec![64], json: true }).expect("compare runs");
    println!("{out}");
    let last = out.lines().last().unwrap();
    let report: serde_json::Value = serde_json::from_str(last).expect("last line is JSON");
    let comparisons = report["comparisons"].as_array().unwrap();
    assert_eq!(comparisons.len(), 2);
    assert_eq!(comparisons[0]["tool"], "cyclictest");
    assert_eq!(comparisons[1]["tool"], "sockperf");
    for c in comparisons {
        assert!(c["ours"]["p50_us"].as_f64().unwrap() > 0.0);
        if c["theirs"].is_null() {
            println!("{} has no reference figures: {}", c["what"], c["note"]);
        } else {
            assert!(c["ratios"]["p50"].as_f64().unwrap() > 0.0);
        }
    }
    assert!(!out.contains("rtloop-lab-probe"));
    // The sockperf server compare started is gone. Only our own children count: another
    // sockperf on the machine (a second test run, a developer's) is none of this test's business.
    let me = std::process::id().to_string();
    let ps = std::process::Command::new("pgrep").args(["-x", "sockperf", "-P", &me]).output().unwrap();
    assert!(ps.stdout.is_empty(), "sockperf still running: {}", String::from_utf8_lossy(&ps.stdout));
}

#[test]
fn cyclictest_average_comes_from_its_histogram_not_its_truncated_print() {
    // cyclictest prints the average truncated to a whole µs; its histogram has every sample.
    let text = "000002 000001\n000003 000001\n# Avg Latencies: 00002\n# Histogram Overflows: 00000\n";
    let f = parse_cyclictest(text).unwrap();
    assert_eq!(f.avg_us, Some(2.5));
    // With overflows the histogram does not hold every sample: the printed average stays.
    let text = "000002 000001\n# Avg Latencies: 00009\n# Max Latencies: 25000\n# Histogram Overflows: 00001\n";
    assert_eq!(parse_cyclictest(text).unwrap().avg_us, Some(9.0));
}

#[test]
fn our_wakeups_are_compared_in_whole_microseconds_truncated_like_cyclictests() {
    // cyclictest keeps (now - next) / 1000 in integer µs: 2.999 µs counts as 2.
    let f = wakeup_figures(&[2_999, 2_999, 2_100, 3_000]);
    assert_eq!(f.samples, 4);
    assert_eq!(f.p50_us, Some(2.0));
    assert_eq!(f.min_us, Some(2.0));
    assert_eq!(f.max_us, Some(3.0));
    assert_eq!(f.avg_us, Some(2.25));
    assert_eq!(f.p99_us, Some(3.0));
}

#[test]
fn the_wakeup_sides_alternate_in_rounds_so_both_see_the_same_load() {
    for samples in [1usize, 2, 3, 7, 8, 9, 300, 10_001] {
        let plan = wakeup_schedule(samples);
        let total = |side: Side| plan.iter().filter(|(s, _)| *s == side).map(|&(_, n)| n).sum::<usize>();
        assert_eq!((total(Side::Ours), total(Side::Theirs)), (samples, samples), "{samples}: {plan:?}");
        assert!(plan.iter().all(|&(_, n)| n > 0), "{samples}: {plan:?}");
        // Rounds of one chunk per side; the side that goes first alternates (ABBA…), so a
        // load that rises or falls during the run weighs on both sides alike.
        assert_eq!(plan.len() % 2, 0, "{plan:?}");
        for (round, pair) in plan.chunks(2).enumerate() {
            let first = if round % 2 == 0 { Side::Ours } else { Side::Theirs };
            let second = if first == Side::Ours { Side::Theirs } else { Side::Ours };
            assert_eq!((pair[0].0, pair[1].0), (first, second), "{samples}: {plan:?}");
            assert_eq!(pair[0].1, pair[1].1, "same chunk on both sides: {plan:?}");
        }
        let rounds = plan.len() / 2;
        assert_eq!(rounds, samples.min(WAKEUP_ROUNDS), "{samples}: {plan:?}");
        // Not one long window per side.
        assert!(rounds >= samples.min(4), "{samples}: {plan:?}");
        let (smallest, largest) = (plan.iter().map(|p| p.1).min().unwrap(), plan.iter().map(|p| p.1).max().unwrap());
        assert!(largest - smallest <= 1, "{plan:?}");
    }
}

#[test]
fn compare_gives_cyclictest_the_settings_of_our_loop() {
    let setup = wakeup_setup(1234);
    let args = &setup.cyclictest_args;
    let value = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].as_str());
    let rt = &setup.ours.rt;
    // cyclictest -p N runs its thread SCHED_FIFO at N (no --policy given).
    assert_eq!(rt.policy, rtloop_rt::setup::Policy::Fifo);
    assert!(!args.iter().any(|a| a.starts_with("--policy")), "{args:?}");
    assert_eq!(value("-p"), Some(rt.priority.to_string().as_str()), "{args:?}");
    assert_eq!(value("-i"), Some(setup.period_us.to_string().as_str()), "{args:?}");
    assert_eq!(value("-l"), Some("1234"), "{args:?}");
    assert_eq!(setup.ours.samples, 1234);
    assert!(rt.mlock && args.iter().any(|a| a == "-m"), "both lock memory: {args:?}");
    // Neither side is pinned to a CPU, runs more than one thread, spins or runs beside load.
    assert!(rt.cpus.is_empty());
    assert!(!args.iter().any(|a| a == "-a" || a.starts_with("--affinity") || a == "-t" || a == "-S"), "{args:?}");
    assert_eq!((setup.ours.busy_wait_us, setup.ours.load), (0, 0));
    // cyclictest counts in µs (no -N), as wakeup_figures counts ours; its histogram feeds the
    // percentiles and the average.
    assert!(!args.iter().any(|a| a == "-N" || a == "--nsecs"), "{args:?}");
    assert!(value("-h").is_some(), "{args:?}");
}

#[test]
fn cyclictest_rounds_merge_into_one_histogram() {
    // The fixture twice: every count doubles, so the figures stay those of one run.
    let one = parse_cyclictest(CYCLICTEST_HISTOGRAM).unwrap();
    let two = rtloop_lab::compare::parse_cyclictest_rounds(&[CYCLICTEST_HISTOGRAM, CYCLICTEST_HISTOGRAM]).unwrap();
    assert_eq!(two.samples, 2 * one.samples);
    assert_eq!((two.p50_us, two.p99_us, two.min_us, two.max_us), (one.p50_us, one.p99_us, one.min_us, one.max_us));
    assert_eq!(two.avg_us, one.avg_us);
    // Different runs: the median and the extremes are those of all the samples together.
    let low = "000010 000003\n# Min Latencies: 00010\n# Max Latencies: 00010\n# Histogram Overflows: 00000\n";
    let high = "000020 000001\n# Min Latencies: 00020\n# Max Latencies: 00020\n# Histogram Overflows: 00000\n";
    let both = rtloop_lab::compare::parse_cyclictest_rounds(&[high, low]).unwrap();
    assert_eq!(both.samples, 4);
    assert_eq!((both.p50_us, both.p99_us), (Some(10.0), Some(20.0)));
    assert_eq!((both.min_us, both.max_us, both.avg_us), (Some(10.0), Some(20.0), Some(12.5)));
}
