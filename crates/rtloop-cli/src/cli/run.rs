//! `rtloop run`: what a run says while it runs (its [`Notice`]s, on stderr) and its summary as
//! text (on stdout).

use rtloop::summary::{FinalServo, Notice, Percentiles, RunSummary};
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// How often the progress line is printed: every 100 ms on a terminal (rewritten in place),
/// every second otherwise (one line each).
pub fn progress_interval() -> Duration {
    if std::io::stderr().is_terminal() {
        Duration::from_millis(100)
    } else {
        Duration::from_secs(1)
    }
}

/// Print what the run says on stderr: a warning as `rtloop run: warning: …`, the progress
/// line (in place on a terminal).
pub fn print_notice(notice: &Notice) {
    let tty = std::io::stderr().is_terminal();
    let mut err = std::io::stderr().lock();
    let _ = match notice {
        Notice::Warning(w) => writeln!(err, "rtloop run: warning: {w}"),
        Notice::Progress(p) => {
            let line = format!(
                "  {:>6.1}/{:.1} s  {:>8}/{} cycles  last {:>5.0} µs  max {:>5.0} µs  overruns {}  missing {}",
                p.time_s,
                p.duration_s,
                p.cycles,
                p.total_cycles,
                p.last_cycle_us,
                p.max_cycle_us,
                p.overruns,
                p.missing,
            );
            if tty {
                write!(err, "\r{line}")
            } else {
                writeln!(err, "{line}")
            }
        }
        Notice::ProgressEnd if tty => writeln!(err),
        _ => Ok(()),
    };
    let _ = err.flush();
}

/// `1 servo`, `12 servos`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The human-readable summary.
pub fn print_summary(s: &RunSummary, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "rtloop run: {} on {}",
        count(s.servos, "servo", "servos"),
        count(s.buses, "CAN-FD bus", "CAN-FD buses")
    )?;
    // A rate needs two wakeups: with fewer there is none to report.
    let achieved = if s.cycles >= 2 { format!("{:.2} Hz", s.rate_hz) } else { "no rate (one cycle)".into() };
    writeln!(
        out,
        "  cycles {}  in {:.3} s  achieved {achieved} (target {:.2}){}",
        s.cycles,
        s.elapsed_s,
        s.target_rate_hz,
        if s.interrupted { "  — interrupted, safe mode commanded" } else { "" }
    )?;
    writeln!(
        out,
        "  overruns {} (skipped periods {})  missing replies {}  timeouts {}  transport errors {}",
        s.overruns, s.skipped_periods, s.missing_replies, s.timeouts, s.transport_errors
    )?;
    let a = &s.reply_accounting;
    if a.late + a.lost + a.expired + a.unqueried + a.unattributed + a.decode_errors > 0 {
        writeln!(
            out,
            "  replies      {} late (kept as the answer to their own request, never fresh)  {} lost  \
             {} expired  {} unqueried  {} unattributed  {} undecodable",
            a.late, a.lost, a.expired, a.unqueried, a.unattributed, a.decode_errors
        )?;
    }
    if let Some(live) = &s.live {
        for p in &live.publishers {
            writeln!(
                out,
                "  live         {} {}: {} cycles, {} events, {} messages, {} dropped, {} refused, {} errors",
                p.sink, p.endpoint, p.cycles, p.events, p.messages, p.dropped, p.refused, p.errors
            )?;
        }
        if live.handoff_dropped + live.remote_commands > 0 {
            writeln!(
                out,
                "  live         {} messages dropped at the hand-off  {} remote commands",
                live.handoff_dropped, live.remote_commands
            )?;
        }
    }
    let p = |x: &Percentiles| format!("p50 {:7.1}  p99 {:7.1}  max {:7.1} µs", x.p50, x.p99, x.max);
    writeln!(out, "  cycle time   {}   (model predicts {:.1} µs)", p(&s.cycle_us), s.model_cycle_us)?;
    writeln!(out, "  wakeup       {}", p(&s.wakeup_us))?;
    let r = &s.realtime;
    writeln!(
        out,
        "  real-time    policy {} ({} asked) priority {} cpus {:?} mlock {} cpu_dma_latency {} timer slack {} ns \
         busy-wait {} µs{}",
        r.policy,
        r.requested_policy,
        r.priority,
        r.cpus,
        r.mlock,
        if r.cpu_dma_latency_held { "held" } else { "not held" },
        r.timer_slack_ns,
        r.busy_wait_us,
        if r.control_thread { "  control law on its own thread" } else { "" }
    )?;
    if let Some(l) = &s.log {
        writeln!(
            out,
            "  log          {}: {} messages, {} dropped, {} lost, {} write errors, {:.1} MB",
            l.path,
            l.written,
            l.dropped,
            l.lost,
            l.write_errors,
            l.bytes as f64 / 1e6
        )?;
    }
    if let Some(b) = &s.body {
        let [x, y, _] = b.position_m;
        writeln!(
            out,
            "  body         {}: height {:.3} m at x {:.3} y {:.3} m, roll {:.1}° pitch {:.1}°, {} steps{}",
            b.model,
            b.height_m,
            x,
            y,
            b.roll_deg,
            b.pitch_deg,
            b.steps,
            match b.falls {
                0 => String::new(),
                1 => ", fell once".into(),
                n => format!(", fell {n} times"),
            }
        )?;
    }
    if !s.events.is_empty() {
        writeln!(out, "  events:")?;
        for e in &s.events {
            let who = match (e.servo, e.bus) {
                (Some(id), Some(bus)) => format!("bus {bus} servo {id}"),
                (Some(id), None) => format!("servo {id}"),
                (None, Some(bus)) => format!("bus {bus}"),
                (None, None) => "robot".to_string(),
            };
            writeln!(
                out,
                "    {:>8.3} s  {:<16} {}{}",
                e.time,
                who,
                e.kind,
                e.detail.as_ref().map_or(String::new(), |d| format!(" ({d})"))
            )?;
        }
    }
    writeln!(out, "  final state:")?;
    writeln!(
        out,
        "    {:>3} {:>3} {:<13} {:>4} {:>9} {:>9} {:>5}",
        "id", "bus", "commanded", "mode", "pos rev", "vel rev/s", "fault"
    )?;
    let mut rows: Vec<&FinalServo> = s.final_state.values().collect();
    rows.sort_by_key(|f| (f.id, f.bus));
    for f in rows {
        let num = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.4}"));
        writeln!(
            out,
            "    {:>3} {:>3} {:<13} {:>4} {:>9} {:>9} {:>5}{}",
            f.id,
            f.bus,
            f.commanded,
            f.mode.map_or("-".into(), |m| m.to_string()),
            num(f.position),
            num(f.velocity),
            f.fault.map_or("-".into(), |m| m.to_string()),
            if f.fresh { "" } else { "  (no reply to the last cycle: older state)" }
        )?;
    }
    for w in &s.warnings {
        writeln!(out, "  warning: {w}")?;
    }
    if s.problems.is_empty() {
        writeln!(out, "  status: ok")?;
    } else {
        writeln!(out, "  status: degraded (exit status {}):", s.exit_code())?;
        for p in &s.problems {
            writeln!(out, "    {p}")?;
        }
    }
    Ok(())
}
