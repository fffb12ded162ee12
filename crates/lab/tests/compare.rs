//! `rtloop lab compare`: parsers checked on captured cyclictest and sockperf outputs, and an
//! end-to-end run when both tools are installed.

use lab::compare::{compare, parse_cyclictest, parse_sockperf, CompareOptions};

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
    assert_eq!(f.avg_us, Some(128.0));
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
        testkit::skip("needs cyclictest (apt-get install rt-tests) and sockperf (apt-get install sockperf)");
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
