//! `rtloop can` on a pi3hat, as pi3hat_tool's users run it: the simulated board
//! (`--transport pi3hat:sim`) answers on its five connectors, reports its attitude, identity
//! and CAN configuration; every new option refuses bad values with one sentence; the
//! hardware carriers, absent here, say what is missing.

use crate::support;

use std::path::Path;
use support::{assert_one_clear_message, rtloop, stderr, stdout, unique_path};

const PI3HAT: &[&str] = &["can", "--transport", "pi3hat:sim"];

fn can(args: &[&str]) -> std::process::Output {
    let all: Vec<&str> = PI3HAT.iter().chain(args).copied().collect();
    rtloop(&all)
}

fn ok_lines(args: &[&str]) -> Vec<String> {
    let o = can(args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{args:?}: {}", stderr(&o));
    stdout(&o).lines().map(str::to_string).collect()
}

/// The numbers of an `ATT` line, after checking that formatting them again at
/// pi3hat_tool's widths gives the line back: (quaternion, rates, accelerations).
fn parse_att(line: &str) -> ([f64; 4], [f64; 3], [f64; 3]) {
    let rest = line.strip_prefix("ATT ").unwrap_or_else(|| panic!("not an ATT line: {line}"));
    let num = |s: &str| s.trim().parse::<f64>().unwrap_or_else(|_| panic!("'{s}' in {line}"));
    let (quat, rest) = rest.split_once("  dps=(").unwrap();
    let q: Vec<f64> = quat.split(' ').map(|kv| num(&kv[2..])).collect();
    let (dps, acc) = rest.split_once(") a=(").unwrap();
    let r: Vec<f64> = dps.split(',').map(num).collect();
    let a: Vec<f64> = acc.trim_end_matches(')').split(',').map(num).collect();
    assert_eq!((q.len(), r.len(), a.len()), (4, 3, 3), "{line}");
    let again = format!(
        "ATT w={:5.3} x={:5.3} y={:5.3} z={:5.3}  dps=({:5.1},{:5.1},{:5.1}) a=({:4.1},{:4.1},{:4.1})",
        q[0], q[1], q[2], q[3], r[0], r[1], r[2], a[0], a[1], a[2]
    );
    assert_eq!(again, line, "the line has pi3hat_tool's widths and precisions");
    ([q[0], q[1], q[2], q[3]], [r[0], r[1], r[2]], [a[0], a[1], a[2]])
}

#[test]
fn a_query_on_jc1_with_the_attitude_prints_the_reply_and_att_lines() {
    let lines = ok_lines(&["--write-can", "1,8001,1300,r", "--read-att"]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    // Servo 1 answers the host (id 0x100: source 1, destination 0) with its mode, position and
    // velocity as int8 registers (0x23: reply, int8, three values from register 0).
    assert_eq!(lines[0], "CAN 1,100,2300000000");
    let (q, rates, accel) = parse_att(&lines[1]);
    let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    // Each component is rounded to 3 decimals: the norm is within 0.002 of 1.
    assert!((norm - 1.0).abs() < 2e-3, "|q| = {norm}: {}", lines[1]);
    assert!(rates.iter().chain(&accel).all(|v| v.is_finite()));
}

#[test]
fn every_connector_of_the_one_board_answers_including_jc5() {
    let writes: Vec<String> = (1..=5).map(|b| format!("{b},800{b},1300,r")).collect();
    let mut args: Vec<&str> = Vec::new();
    for w in &writes {
        args.extend(["--write-can", w.as_str()]);
    }
    let mut lines = ok_lines(&args);
    lines.sort();
    let want: Vec<String> = (1..=5).map(|b| format!("CAN {b},{b}00,2300000000")).collect();
    assert_eq!(lines, want);
    // JC5 on its own, too.
    assert_eq!(ok_lines(&["--write-can", "5,8001,1300,r"]), ["CAN 5,100,2300000000"]);
}

#[test]
fn a_frame_longer_than_classic_can_is_refused_before_sending() {
    let long = "5,8001,010203040506070809,r";
    assert_one_clear_message(&["can", "--transport", "pi3hat:sim", "--write-can", long], "at most 8 data bytes");
    assert_one_clear_message(&["can", "--transport", "pi3hat:sim", "--write-can", long], "JC5");
    // A port configured for classic CAN refuses them too; the FD ports carry them.
    assert_one_clear_message(
        &["can", "--transport", "pi3hat:sim", "--can-config", "2,d", "--write-can", "2,8001,010203040506070809"],
        "JC2 is configured for classic CAN",
    );
    let o = can(&["--write-can", "1,1,010203040506070809"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn info_names_each_processor_with_its_versions() {
    let lines = ok_lines(&["--info"]);
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (line, label) in lines.iter().zip(["CAN1: ", "CAN2: ", "AUX:  "]) {
        let rest = line.strip_prefix(label).unwrap_or_else(|| panic!("{label:?}: {line}"));
        let fields: Vec<&str> = rest.split(' ').collect();
        let is_hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit());
        assert!(is_hex(fields[0], 40), "git hash: {line}");
        assert!(["clean", "dirty"].contains(&fields[1]), "{line}");
        assert!(is_hex(fields[2], 24), "serial number: {line}");
        assert_eq!(fields[3], "protocol=0x04", "{line}");
        assert_eq!(fields[4], "interface=0x01", "{line}");
        let imu: Vec<&&str> = fields[5..].iter().collect();
        if label == "AUX:  " {
            assert_eq!(imu, [&"imu=0x20"], "{line}");
        } else {
            assert!(imu.is_empty(), "{line}");
        }
    }
    // The three processors are three chips: their serial numbers differ.
    let serials: std::collections::BTreeSet<&str> = lines.iter().map(|l| l.split(' ').nth(3).unwrap()).collect();
    assert_eq!(serials.len(), 3, "{lines:?}");
}

#[test]
fn can_config_sets_ports_and_prints_them_read_back() {
    let lines = ok_lines(&[
        "--can-config",
        "1,r500000,R2000000,T",
        "--can-config",
        "2,d,b,M",
        "--can-config",
        "--write-can",
        "1,8001,1300,r",
        "--write-can",
        "5,8002,1300,r",
    ]);
    assert_eq!(
        lines,
        [
            "CANCFG 1 nominal=500000 data=2000000 fd=on brs=on retransmit=on restricted=off monitor=off",
            "CANCFG 2 nominal=1000000 data=5000000 fd=off brs=off retransmit=on restricted=off monitor=on",
            "CANCFG 5 nominal=125000 data=125000 fd=off brs=off retransmit=on restricted=off monitor=off",
            // Servo 1 still answers at the new bit rates.
            "CAN 1,100,2300000000",
            "CAN 5,200,2300000000",
        ]
    );
    // Printing alone: the defaults of the port used.
    assert_eq!(
        ok_lines(&["--can-config", "--read-can", "3"]),
        ["CANCFG 3 nominal=1000000 data=5000000 fd=on brs=on retransmit=on restricted=off monitor=off"]
    );
}

#[test]
fn run_writes_one_time_log_line_per_cycle_and_keeps_the_last_attitude() {
    let log = unique_path("time-log");
    let log_s = log.to_str().unwrap();
    let o = can(&["--write-can", "1,8001,1300,r", "--read-att", "--run", "--duration", "0.5", "--time-log", log_s]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    let summary = lines.last().unwrap();
    let cycles: u64 = summary.split(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("{summary}"));
    let elapsed_s: f64 = summary.split(" cycles in ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(cycles > 0, "{out}");
    assert!(lines.contains(&"CAN 1,100,2300000000"), "{out}");
    let att = lines.iter().find(|l| l.starts_with("ATT ")).unwrap_or_else(|| panic!("no ATT line: {out}"));
    parse_att(att);
    let text = std::fs::read_to_string(&log).unwrap();
    let durations: Vec<u64> = text.lines().map(|l| l.parse().unwrap_or_else(|_| panic!("'{l}'"))).collect();
    assert_eq!(durations.len() as u64, cycles, "one line per cycle");
    assert!(durations.iter().all(|&d| d > 0));
    // Each line runs from the previous cycle's end: together they stay within the run.
    let total_s = durations.iter().sum::<u64>() as f64 * 1e-9;
    assert!(total_s <= elapsed_s + 0.006, "{total_s} s of cycles in a {elapsed_s} s run");
}

#[test]
fn time_log_never_overwrites_nor_follows_a_link() {
    let existing = unique_path("existing");
    std::fs::write(&existing, "keep me\n").unwrap();
    let args = |p: &Path| -> Vec<String> {
        ["can", "--transport", "pi3hat:sim", "--write-can", "1,8001,1300,r", "--run", "--duration", "0.1", "--time-log"]
            .iter()
            .map(|s| s.to_string())
            .chain([p.to_str().unwrap().to_string()])
            .collect()
    };
    let a = args(&existing);
    assert_one_clear_message(&a.iter().map(String::as_str).collect::<Vec<_>>(), "never overwrites");
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me\n");
    // A dangling link: writing through it would create its target.
    let target = unique_path("target");
    let link = unique_path("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let a = args(&link);
    assert_one_clear_message(&a.iter().map(String::as_str).collect::<Vec<_>>(), "--time-log");
    assert!(!target.exists(), "nothing was written through the link");
    // Without --run there is no loop to log.
    let fresh = unique_path("fresh");
    assert_one_clear_message(
        &["can", "--transport", "pi3hat:sim", "--write-can", "1,8001,1300,r", "--time-log", fresh.to_str().unwrap()],
        "only with --run",
    );
    assert!(!fresh.exists());
}

#[test]
fn bad_values_of_every_new_option_get_one_sentence() {
    let cases: &[(&[&str], &str)] = &[
        (&["--can-timeout-ns", "nan"], "--can-timeout-ns"),
        (&["--can-timeout-ns", "0"], "--can-timeout-ns"),
        (&["--can-timeout-ns", "-1"], "--can-timeout-ns"),
        (&["--can-timeout-ns", "1e11"], "--can-timeout-ns"),
        (&["--can-timeout-ns", "inf"], "--can-timeout-ns"),
        (&["--can-min-tx-wait-ns", "nan"], "--can-min-tx-wait-ns"),
        (&["--can-min-tx-wait-ns", "-1"], "--can-min-tx-wait-ns"),
        (&["--can-min-tx-wait-ns", "2e10"], "--can-min-tx-wait-ns"),
        (&["--can-rx-baseline-wait-ns", "nan"], "--can-rx-baseline-wait-ns"),
        (&["--can-rx-baseline-wait-ns", "-5"], "--can-rx-baseline-wait-ns"),
        (&["--can-rx-baseline-wait-ns", "1e300"], "--can-rx-baseline-wait-ns"),
        (&["--can-rx-extra-wait-ns", "nan"], "--can-rx-extra-wait-ns"),
        (&["--can-rx-extra-wait-ns", "-1"], "--can-rx-extra-wait-ns"),
        (&["--can-rx-extra-wait-ns", "-inf"], "--can-rx-extra-wait-ns"),
        (&["--timeout-ms", "5", "--can-timeout-ns", "5000000"], "not both"),
        (&["--spi-speed-hz", "nan"], "--spi-speed-hz"),
        (&["--spi-speed-hz", "-1"], "--spi-speed-hz"),
        (&["--spi-speed-hz", "0"], "--spi-speed-hz"),
        (&["--spi-speed-hz", "20000000"], "--spi-speed-hz"),
        (&["--spi-speed-hz", "1e30"], "--spi-speed-hz"),
        (&["--spi-speed-hz", "1000000.5"], "--spi-speed-hz"),
        (&["--realtime", "-1"], "--realtime"),
        (&["--realtime", "nan"], "--realtime"),
        (&["--realtime", "99999"], "--realtime"),
        (&["--realtime", "18446744073709551616"], "--realtime"),
        (&["--can-config", "0,D"], "not a pi3hat bus"),
        (&["--can-config", "6,D"], "not a pi3hat bus"),
        (&["--can-config", "1,r0"], "nominal bit rate"),
        (&["--can-config", "1,r-1"], "nominal bit rate"),
        (&["--can-config", "1,rnan"], "nominal bit rate"),
        (&["--can-config", "1,r2000000"], "nominal bit rate"),
        (&["--can-config", "1,R9000000"], "data bit rate"),
        (&["--can-config", "1,R99999999999"], "data bit rate"),
        (&["--can-config", "1,x"], "not a CAN option"),
        (&["--can-config", "1"], "no option"),
        (&["--can-config", "1,D", "--can-config", "1,B"], "twice"),
        (&["--write-can", "6,8001,1300,r"], "JC1-JC5"),
        (&["--bus", "7=pi3hat:sim", "--write-can", "7,1,0102030405060708090a"], "JC1-JC5"),
        (&["--bus", "7=pi3hat:sim", "--read-can", "7", "--read-att"], "JC1-JC5"),
    ];
    for (extra, want) in cases {
        let mut args: Vec<&str> = PI3HAT.to_vec();
        if !extra.contains(&"--write-can") {
            args.extend(["--write-can", "1,8001,1300,r"]);
        }
        args.extend(extra.iter());
        assert_one_clear_message(&args, want);
    }
}

#[test]
fn pi3hat_options_on_other_transports_are_refused() {
    for (extra, want) in [
        (&["--read-att"][..], "the attitude comes from a pi3hat's IMU"),
        (&["--info"][..], "--info needs a pi3hat"),
        (&["--can-config"][..], "--can-config needs a pi3hat"),
        (&["--can-config", "1,D"][..], "--can-config needs a pi3hat"),
        (&["--spi-speed-hz", "1000000"][..], "--spi-speed-hz needs a pi3hat"),
    ] {
        let mut args = vec!["can", "--transport", "sim", "--write-can", "1,8001,1300,r"];
        args.extend(extra);
        assert_one_clear_message(&args, want);
        let mut args = vec!["can", "--transport", "fdcanusb:/dev/null", "--write-can", "1,8001,1300,r"];
        args.extend(extra);
        assert_one_clear_message(&args, want);
    }
    // A pi3hat beside another bus: the configuration is for the pi3hat's ports only.
    assert_one_clear_message(
        &["can", "--bus", "1=sim", "--bus", "2=pi3hat:sim", "--can-config", "1,D", "--read-can", "2"],
        "not a pi3hat connector",
    );
}

#[test]
fn the_timing_options_reach_the_cycle() {
    // All accepted together, and the reply still comes.
    let lines = ok_lines(&[
        "--write-can",
        "1,8001,1300,r",
        "--can-timeout-ns",
        "5000000",
        "--can-min-tx-wait-ns",
        "0",
        "--can-rx-baseline-wait-ns",
        "1000000",
        "--can-rx-extra-wait-ns",
        "40000",
        "--spi-speed-hz",
        "5000000",
    ]);
    assert_eq!(lines, ["CAN 1,100,2300000000"]);
    // No servo 9: the cycle gives up at the timeout given in nanoseconds.
    let o = can(&["--write-can", "1,8009,1300,r", "--sim-servos", "1", "--can-timeout-ns", "3000000"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("0 of 1 expected replies arrived within 3 ms"), "{}", stderr(&o));
}

#[test]
fn realtime_runs_with_what_the_system_grants() {
    let o = can(&["--write-can", "1,8001,1300,r", "--realtime", "0", "--run", "--duration", "0.1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Refusals (no privilege here, say) are warnings, one line each; granted, nothing.
    for line in stderr(&o).lines() {
        assert!(line.starts_with("rtloop can: warning: --realtime "), "{line}");
    }
    assert!(stdout(&o).lines().last().unwrap().contains(" cycles in "), "{}", stdout(&o));
}

#[test]
fn hardware_carriers_that_are_absent_say_so() {
    for (uri, device) in [("pi3hat:spidev", "/dev/spidev0.0"), ("pi3hat:mem", "/dev/mem")] {
        if Path::new(device).exists() {
            rtloop_testkit::skip(&format!("{device} exists here: {uri} may reach real hardware"));
            continue;
        }
        assert_one_clear_message(&["can", "--transport", uri, "--write-can", "1,8001,1300,r"], uri);
        assert_one_clear_message(&["can", "--transport", uri, "--info"], uri);
    }
}

#[test]
fn help_lists_the_pi3hat_tool_options() {
    let o = rtloop(&["can", "--help"]);
    assert!(o.status.success());
    let help = stdout(&o);
    for flag in [
        "--write-can",
        "--read-can",
        "--read-att",
        "--info",
        "--can-config",
        "--run",
        "--time-log",
        "--realtime",
        "--can-timeout-ns",
        "--can-min-tx-wait-ns",
        "--can-rx-baseline-wait-ns",
        "--can-rx-extra-wait-ns",
        "--spi-speed-hz",
        "pi3hat:sim",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

/// `lines` with each run of consecutive `CAN ` lines sorted.
fn sort_can_runs(mut lines: Vec<&str>) -> Vec<&str> {
    let mut start = 0;
    while start < lines.len() {
        let len = lines[start..].iter().take_while(|l| l.starts_with("CAN ")).count();
        lines[start..start + len].sort_unstable();
        start += len.max(1);
    }
    lines
}

#[test]
fn the_examples_of_the_pi3hat_tool_page_are_what_rtloop_prints() {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/pi3hat-tool.md");
    let text = std::fs::read_to_string(&page).unwrap();
    // (command, expected lines) of each `$ rtloop can …` in the console blocks.
    let mut examples: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = line == "```console";
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            examples.push((cmd.to_string(), Vec::new()));
        } else if let Some((_, out)) = examples.last_mut() {
            out.push(line.to_string());
        }
    }
    let mut ran = 0;
    for (cmd, want) in examples.iter().filter(|(c, _)| c.starts_with("rtloop can ") && !c.contains("--time-log")) {
        let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        let o = rtloop(&args);
        let (want_err, want_out): (Vec<&String>, Vec<&String>) = want.iter().partition(|l| l.starts_with("rtloop: "));
        assert_eq!(o.status.code(), Some(if want_err.is_empty() { 0 } else { 2 }), "{cmd}: {}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.lines().collect::<Vec<_>>(), want_err, "{cmd}");
        // The once-a-second progress lines of a loop: how many fit depends on the machine.
        let progress = |l: &str| l.contains(" Hz  (");
        let want_out: Vec<&String> = want_out.into_iter().filter(|l| !progress(l)).collect();
        let out = stdout(&o);
        let got: Vec<&str> = out.lines().filter(|l| !progress(l)).collect();
        assert_eq!(got.len(), want_out.len(), "{cmd}:\n{out}");
        // `CAN` lines come in the order the frames arrived (as pi3hat_tool prints them), and
        // replies on different buses race on the real clock: compare each run of them as a set.
        let got = sort_can_runs(got);
        let want_out = sort_can_runs(want_out.iter().map(|l| l.as_str()).collect());
        for (g, w) in got.iter().zip(want_out) {
            if w.starts_with("ATT ") {
                parse_att(g);
            } else if w.contains(" Hz") {
                // Rates and cycle counts depend on the machine: the line's kind only.
                assert_eq!(g.contains(" cycles in "), w.contains(" cycles in "), "{cmd}: {g}");
                assert!(g.contains(" Hz"), "{cmd}: {g}");
            } else {
                assert_eq!(*g, w, "{cmd}");
            }
        }
        ran += 1;
    }
    assert!(ran >= 6, "only {ran} examples found in {}", page.display());
}
