//! The run's report made from the loop's result ([`summarize`]): the [`crate::summary`]
//! types filled in, with the run's problems in one sentence each.

use super::*;
use crate::summary::servo_name;

pub(super) fn opt(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// The name of a command, as `FinalServo::commanded` reports it.
pub(super) fn command_name(c: &ServoCommand) -> &'static str {
    match c {
        ServoCommand::Query => "query",
        ServoCommand::Stop => "stop",
        ServoCommand::ZeroVelocity => "zero-velocity",
        ServoCommand::Brake => "brake",
        ServoCommand::Position(_) => "position",
    }
}

/// What went wrong in a run, one sentence each (empty: nothing).
pub(super) fn problems_of(
    events: &[EventRecord],
    result: &LoopResult,
    servos: &[ServoSpec],
    bus_numbers: &[u8],
    safety: &crate::config::SafetyToml,
) -> Vec<String> {
    let (on_fault, fall_tilt_deg, fall_height_m) = (&safety.on_fault, safety.fall_tilt_deg, safety.fall_height_m);
    let mut problems = Vec::new();
    let ran = result.periodic.cycles + result.shutdown_cycles > 0;
    let silent: Vec<String> = servos
        .iter()
        .zip(&result.answered)
        .filter(|(_, &a)| !a)
        .map(|(s, _)| servo_name(Some(s.id), bus_numbers.get(s.bus).copied()))
        .collect();
    if ran && !silent.is_empty() && silent.len() == servos.len() {
        problems.push(format!(
            "no servo ever answered ({} transport errors): check the bus addresses and that the servos are powered",
            result.transport_errors
        ));
    } else if ran && !silent.is_empty() {
        problems.push(format!("{} never answered", silent.join(", ")));
    }
    // One line per servo and kind of failure: the first time in full, repeats counted.
    let mut repeated: Vec<(String, &str, String, u32)> = Vec::new();
    for e in events {
        let who = servo_name(e.servo, e.bus);
        let text = match e.kind.as_str() {
            "fault" => format!("{who} faulted at {:.3} s ({})", e.time, e.detail.as_deref().unwrap_or("fault")),
            // A servo that never answered is reported once, above.
            "missing_replies" if silent.contains(&who) => continue,
            "missing_replies" => {
                format!("{who} stopped answering at {:.3} s ({})", e.time, e.detail.as_deref().unwrap_or("no replies"))
            }
            "watchdog_timeout" => format!(
                "{who} latched its watchdog timeout (mode 11) at {:.3} s: it went without a command for longer than \
                 its watchdog",
                e.time
            ),
            "agent_timeout" => format!(
                "the agent went silent at {:.3} s: the servos were given the timeout command until it re-armed",
                e.time
            ),
            // Said by the agent spine's summarizer (`crate::agent::AgentFigures::complete`),
            // which knows the causes, the servos and the counts.
            "agent_command_refused" => continue,
            "agent_version_mismatch" => match e.value {
                Some(0) => format!(
                    "an agent wrote commands without stating its protocol version (agent_version 0), this spine \
                     speaks {}; the spine ignored them",
                    rtloop_agent::layout::VERSION
                ),
                v => format!(
                    "an agent of protocol version {}, this spine {}, tried to attach; the spine ignored its commands",
                    v.map_or_else(|| "?".to_string(), |v| v.to_string()),
                    rtloop_agent::layout::VERSION
                ),
            },
            "physics_reset_failed" => format!(
                "the simulated world could not be reset at {:.3} s (the plant went unstable while it settled); the \
                 run ended there",
                e.time
            ),
            "agent_reset_refused" => format!(
                "the spine refused the agent's reset at {:.3} s: {}",
                e.time,
                match e.value.and_then(|v| u32::try_from(v).ok()) {
                    Some(rtloop_agent::layout::reset::NOT_LOCKSTEP) => {
                        "a reset is reproducible only in simulated time; run with --lockstep"
                    }
                    _ => "the run has no physics world to reset; run with --physics",
                }
            ),
            "fall" => format!(
                "the body fell at {:.3} s: it tilted {}° from upright ([safety] fall_tilt_deg {})",
                e.time,
                e.value.unwrap_or(0),
                fall_tilt_deg
            ),
            "fall_low" => format!(
                "the body fell at {:.3} s: its base came down to {:.3} m ([safety] fall_height_m {})",
                e.time,
                e.value.unwrap_or(0) as f64 / 1e3,
                fall_height_m
            ),
            "safe_mode_engaged" => {
                format!("the safety policy engaged at {:.3} s and commanded {on_fault} to the healthy servos", e.time)
            }
            _ => continue,
        };
        match repeated.iter_mut().find(|(w, k, _, _)| *w == who && *k == e.kind.as_str()) {
            Some(entry) => entry.3 += 1,
            None => repeated.push((who, e.kind.as_str(), text, 0)),
        }
    }
    for (_, _, text, more) in repeated {
        problems.push(match more {
            0 => text,
            1 => format!("{text}, and once more"),
            n => format!("{text}, and {n} times more"),
        });
    }
    if result.supervisor.trips() > 0 && !problems.iter().any(|p| p.starts_with("the safety policy")) {
        problems.push(format!("the safety policy engaged {} times", result.supervisor.trips()));
    }
    problems
}

pub(super) fn summarize(
    config: &RunConfig,
    servos: &[ServoSpec],
    bus_numbers: &[u8],
    buses: usize,
    mut result: LoopResult,
    applied: &rtloop_rt::setup::Applied,
    seed: u64,
) -> RunSummary {
    let mut final_state = BTreeMap::new();
    let finished = result.periodic.cycles + result.shutdown_cycles > 0;
    for ((spec, reply), command) in servos.iter().zip(&result.replies).zip(&result.last_commands) {
        let s = &reply.state;
        let bus = bus_numbers.get(spec.bus).copied().unwrap_or(0);
        let shared = servos.iter().filter(|o| o.id == spec.id).count() > 1;
        let key = if shared { format!("{}@{bus}", spec.id) } else { spec.id.to_string() };
        final_state.insert(
            key,
            FinalServo {
                id: spec.id,
                bus,
                commanded: if finished { command_name(command) } else { "query" },
                fresh: reply.fresh,
                mode: s.mode,
                position: opt(s.position),
                velocity: opt(s.velocity),
                torque: opt(s.torque),
                fault: s.fault,
                temperature: opt(s.temperature),
            },
        );
    }
    let start = result.start_ns;
    let secs = |at: u64| (at as f64 - start as f64) * 1e-9;
    let mut events: Vec<EventRecord> = result
        .supervisor
        .events()
        .iter()
        .map(|e| EventRecord {
            time: secs(e.at_ns),
            bus: e.servo.and_then(|s| bus_numbers.get(s.bus).copied()),
            servo: e.servo.map(|s| s.id),
            kind: e.kind.name().to_string(),
            detail: match e.kind {
                EventKind::Fault { code } => Some(format!("fault code {code}")),
                EventKind::MissingReplies { cycles } => Some(format!("no answer newer than {cycles} cycles")),
                EventKind::Recovered { good_cycles } => Some(format!("after {good_cycles} good cycles")),
                _ => None,
            },
            value: match e.kind {
                EventKind::Controller { value, .. } => value,
                _ => None,
            },
        })
        .collect();
    let mut injected = InjectedSummary { seed, reply_delay_us: config.faults.reply_delay_us, ..Default::default() };
    for o in config.overheats().unwrap_or_default() {
        injected.overheat.insert(o.id, o.at_s);
    }
    for b in 0..buses {
        let bus_number = bus_numbers.get(b).copied();
        let Some(sim) = &result.sim else { break };
        sim.with_bus(b, |bus| {
            let st = bus.stats();
            injected.frames_dropped += st.frames_dropped_injected;
            injected.frames_corrupted += st.frames_corrupted_injected;
            while let Some(e) = bus.pop_event() {
                let detail = match e.kind {
                    rtloop_sim::InjectedKind::OverheatStarted => None,
                    rtloop_sim::InjectedKind::FaultLatched { code } => Some(format!("fault code {code}")),
                    rtloop_sim::InjectedKind::FrameDropped { count, .. } => {
                        Some(format!("{count} frames lost on the wire"))
                    }
                    rtloop_sim::InjectedKind::FrameCorrupted { count, .. } => {
                        Some(format!("{count} frames bit-flipped on the wire"))
                    }
                };
                events.push(EventRecord {
                    time: secs(e.at_ns),
                    bus: bus_number,
                    servo: e.servo,
                    kind: injected_name(&e.kind).into(),
                    detail,
                    value: None,
                });
            }
        });
    }
    events.sort_by(|a, b| a.time.total_cmp(&b.time));
    let mut problems = problems_of(&events, &result, servos, bus_numbers, &config.safety);
    // The control law's failure ended the run: the first thing to say.
    let failure = result.failure.take().map(|(f, hook, at_ns)| {
        let servo = f.servo.and_then(|i| servos.get(i));
        ControlFailure {
            name: f.name,
            hook,
            time: secs(at_ns),
            bus: servo.and_then(|s| bus_numbers.get(s.bus).copied()),
            servo: servo.map(|s| s.id),
            value: f.value,
            what: f.what.to_string(),
            fix: f.fix.to_string(),
        }
    });
    if let Some(f) = &failure {
        problems.insert(0, f.problem());
    }
    if let Some(fault) = result.sim.as_ref().and_then(SimRobot::world_fault) {
        let push = result.sim.as_ref().and_then(SimRobot::world_fault_push);
        problems.push(match push {
            Some([x, y, z]) => format!(
                "{} while a push of ({x}, {y}, {z}) N acted on the body (a --push, or one of the control law's): the \
                 push is the likely cause, not the model; try a smaller force or a shorter push; the run stopped the \
                 servos",
                fault.what()
            ),
            None => fault.to_string(),
        });
    }
    let p = &result.periodic;
    let elapsed_s = p.last_wake_ns.saturating_sub(p.first_wake_ns) as f64 * 1e-9;
    RunSummary {
        status: if problems.is_empty() { Status::Ok } else { Status::Degraded },
        problems,
        warnings: Vec::new(),
        cycles: p.cycles,
        rate_hz: if elapsed_s > 0.0 { p.cycles.saturating_sub(1) as f64 / elapsed_s } else { 0.0 },
        target_rate_hz: config.rate_hz,
        elapsed_s,
        servos: servos.len(),
        buses,
        overruns: p.overruns,
        skipped_periods: p.skipped_periods,
        missing_replies: result.missing,
        reply_accounting: result.accounting,
        timeouts: result.timeouts,
        transport_errors: result.transport_errors,
        imu_samples: result.imu_samples,
        cycle_us: p.cycle,
        wakeup_us: p.wakeup,
        model_cycle_us: rtloop_sim::model::predict(&model_of_run(config)).total_ns as f64 / 1000.0,
        ended_by_controller: result.ended_by_controller,
        failure,
        lockstep: config.sim.lockstep,
        wall_s: result.loop_wall_s,
        loop_wall_s: result.loop_wall_s,
        interrupted: result.interrupted,
        shutdown_cycles: result.shutdown_cycles,
        control_late: result.control_late,
        events,
        events_dropped: result.supervisor.dropped_events(),
        body: result.sim.as_ref().and_then(SimRobot::world_body).map(|(b, steps)| {
            let (roll, pitch) = b.roll_pitch();
            BodySummary {
                model: result.model_name.clone().unwrap_or_default(),
                position_m: b.position_m,
                height_m: b.height_m(),
                roll_deg: roll.to_degrees(),
                pitch_deg: pitch.to_degrees(),
                steps,
                falls: result.falls,
            }
        }),
        injected,
        realtime: RealtimeSummary {
            requested_policy: config.realtime.policy.clone(),
            policy: applied.policy.to_string(),
            priority: applied.priority,
            cpus: applied.cpus.clone(),
            mlock: applied.mlocked,
            timer_slack_ns: applied.timer_slack_ns,
            busy_wait_us: config.realtime.busy_wait_us,
            overrun: config.realtime.overrun.clone(),
            control_thread: config.realtime.control_thread,
            cpu_dma_latency_held: false,
            warnings: applied.warnings.iter().map(|w| w.to_string()).collect(),
        },
        final_state,
        agent: None,
        log: None,
        live: None,
    }
}

#[cfg(test)]
mod tests {
    use super::LogSummary;

    fn log(written: u64, dropped: u64, lost: u64, complete: bool) -> LogSummary {
        LogSummary {
            path: "run.tlog".into(),
            written,
            dropped,
            lost,
            write_errors: lost,
            first_error: (lost > 0).then(|| "No space left on device".into()),
            complete,
            bytes: 1,
        }
    }

    #[test]
    fn a_log_with_every_message_is_no_problem_and_any_gap_is_one_sentence() {
        assert_eq!(log(100, 0, 0, true).problem(), None);
        let dropped = log(90, 10, 0, true).problem().unwrap();
        assert!(dropped.contains("holds 90 of the 100") && dropped.contains("10 dropped"), "{dropped}");
        assert!(dropped.contains("faster disk"), "{dropped}");
        let lost = log(90, 0, 10, false).problem().unwrap();
        assert!(lost.contains("10 lost to write errors") && lost.contains("No space left"), "{lost}");
        assert!(lost.contains("closing record") && lost.contains("free space"), "{lost}");
        assert!(log(100, 0, 0, false).problem().is_some(), "an unclosed log is a problem even with every message");
    }
}
