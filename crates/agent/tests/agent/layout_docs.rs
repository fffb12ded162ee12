//! The layout cannot drift from its two other descriptions: the offset tables of
//! `docs/agent-protocol.md` and the `_Static_assert(offsetof(...))` lines of the C header
//! are compared with the crate's structures, field by field.

use rtloop_agent::layout::{
    BodyBlock, CommandBlock, DomainBlock, Header, ImuBlock, Plain, PoseBlock, PushBlock, RawServoCommand,
    RawServoState, ServoInfo, StateBlock,
};
use std::collections::BTreeMap;
use std::mem::{offset_of, size_of_val};
use std::path::Path;

/// (struct, field) → (offset, size), for every field of every layout structure.
fn layout() -> BTreeMap<(String, String), (usize, usize)> {
    let mut m = BTreeMap::new();
    macro_rules! fields {
        ($t:ident, $v:expr; $($f:ident),* $(,)?) => {{
            let v = $v;
            $( m.insert((stringify!($t).to_string(), stringify!($f).to_string()), (offset_of!($t, $f), size_of_val(&v.$f))); )*
        }};
    }
    fields!(Header, Header::zeroed(); magic, version, header_size, state_offset, state_size, command_offset,
        command_size, total_size, max_servos, servo_count, rate_hz, period_ns, timeout_ns, lockstep, spine_pid,
        agent_pid, agent_version, state_bell, agent_waiting, command_bell, spine_waiting, reserved, servos);
    fields!(ServoInfo, ServoInfo::default(); id, bus);
    fields!(StateBlock, StateBlock::empty(); seq, cycle, time_ns, stamp_ns, status, servo_count, timeouts, rearms,
        arm_token, rejected, torn, imu, reset_ack, reset_result, awaiting, resets, body, servos, pose, reserved2);
    fields!(PoseBlock, PoseBlock::ABSENT; nq, reserved, qpos);
    fields!(BodyBlock, BodyBlock::ABSENT; present, fallen, height_m, roll_deg, pitch_deg, quaternion, position_m,
        velocity_mps, yaw_deg, reserved2);
    fields!(ImuBlock, ImuBlock::ABSENT; present, reserved, quaternion, rate_dps, accel_mps2);
    fields!(RawServoState, RawServoState::ABSENT; mode, fault, fresh, reserved, request_cycle, age_cycles, position,
        velocity, torque, q_current, d_current, motor_temperature, temperature, voltage);
    fields!(CommandBlock, CommandBlock::empty(); seq, for_cycle, heartbeat, arm_token, servo_count, hold_cycles,
        reset_request, reset_seed, reserved, servos, domain);
    fields!(DomainBlock, DomainBlock::NOMINAL; flags, latency_cycles, friction_scale, mass_scale, payload_kg, kp_scale,
        kd_scale, joint_offset_rad, joint_velocity_rad_s, pushes);
    fields!(PushBlock, DomainBlock::NOMINAL.pushes[0]; at_s, duration_s, force_n);
    fields!(RawServoCommand, RawServoCommand::QUERY; kind, present, position, velocity, feedforward_torque, kp_scale,
        kd_scale, maximum_torque, stop_position, watchdog_timeout, velocity_limit, accel_limit,
        fixed_voltage_override, ilimit_scale, fixed_current_override, ignore_position_bounds);
    m
}

fn sizes() -> BTreeMap<&'static str, usize> {
    BTreeMap::from([
        ("Header", size_of::<Header>()),
        ("ServoInfo", size_of::<ServoInfo>()),
        ("StateBlock", size_of::<StateBlock>()),
        ("ImuBlock", size_of::<ImuBlock>()),
        ("BodyBlock", size_of::<BodyBlock>()),
        ("PoseBlock", size_of::<PoseBlock>()),
        ("RawServoState", size_of::<RawServoState>()),
        ("CommandBlock", size_of::<CommandBlock>()),
        ("RawServoCommand", size_of::<RawServoCommand>()),
        ("DomainBlock", size_of::<DomainBlock>()),
        ("PushBlock", size_of::<PushBlock>()),
    ])
}

fn between_backticks(s: &str) -> Option<&str> {
    let a = s.find('`')?;
    let b = s[a + 1..].find('`')?;
    Some(&s[a + 1..a + 1 + b])
}

#[test]
fn the_protocol_doc_tables_match_the_layout() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/agent-protocol.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let sizes = sizes();
    let mut found = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            current = between_backticks(heading).filter(|s| sizes.contains_key(s)).map(str::to_string);
            if let Some(name) = &current {
                let size = sizes[name.as_str()];
                assert!(
                    heading.contains(&format!("{size} bytes")),
                    "heading of {name} should say {size} bytes: {line}"
                );
            }
            continue;
        }
        let Some(name) = &current else { continue };
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 6 {
            continue;
        }
        let (Ok(offset), Ok(size)) = (cells[1].parse::<usize>(), cells[2].parse::<usize>()) else { continue };
        let field = between_backticks(cells[4]).unwrap_or_else(|| panic!("no field name in: {line}"));
        let dup = found.insert((name.clone(), field.to_string()), (offset, size));
        assert!(dup.is_none(), "{name}.{field} listed twice");
    }
    let want = layout();
    for (k, v) in &want {
        assert_eq!(found.get(k), Some(v), "{}.{}: doc says {:?}, layout (offset, size) {v:?}", k.0, k.1, found.get(k));
    }
    for k in found.keys() {
        assert!(want.contains_key(k), "the doc lists {}.{}, which the layout lacks", k.0, k.1);
    }
}

#[test]
fn the_c_header_asserts_the_same_offsets() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/rtloop_agent.h");
    let header = std::fs::read_to_string(path).unwrap();
    let c_names = BTreeMap::from([
        ("rtloop_header", "Header"),
        ("rtloop_servo_info", "ServoInfo"),
        ("rtloop_state", "StateBlock"),
        ("rtloop_imu", "ImuBlock"),
        ("rtloop_body", "BodyBlock"),
        ("rtloop_pose", "PoseBlock"),
        ("rtloop_servo_state", "RawServoState"),
        ("rtloop_command", "CommandBlock"),
        ("rtloop_servo_command", "RawServoCommand"),
        ("rtloop_domain", "DomainBlock"),
        ("rtloop_push", "PushBlock"),
    ]);
    let mut found = BTreeMap::new();
    let mut sizes_found = BTreeMap::new();
    for line in header.lines() {
        if let Some(rest) = line.strip_prefix("_Static_assert(offsetof(") {
            let (args, rest) = rest.split_once(')').unwrap();
            let (ty, field) = args.split_once(", ").unwrap();
            let offset: usize = rest.trim_start_matches(" == ").split(',').next().unwrap().trim().parse().unwrap();
            found.insert((c_names[ty].to_string(), field.to_string()), offset);
        } else if let Some(rest) = line.strip_prefix("_Static_assert(sizeof(") {
            let (ty, rest) = rest.split_once(')').unwrap();
            if let Some(rust) = c_names.get(ty) {
                let size: usize = rest.trim_start_matches(" == ").split(',').next().unwrap().trim().parse().unwrap();
                sizes_found.insert(*rust, size);
            }
        }
    }
    let want = layout();
    for (k, (offset, _)) in &want {
        assert_eq!(found.get(k), Some(offset), "C header offset of {}.{}", k.0, k.1);
    }
    assert_eq!(found.len(), want.len(), "the C header asserts fields the layout lacks");
    assert_eq!(sizes_found, sizes(), "C header sizes");
    for (name, value) in [
        ("RTLOOP_STATE_OFFSET", rtloop_agent::layout::STATE_OFFSET),
        ("RTLOOP_COMMAND_OFFSET", rtloop_agent::layout::COMMAND_OFFSET),
        ("RTLOOP_TOTAL_SIZE", rtloop_agent::layout::TOTAL_SIZE),
        ("RTLOOP_MAX_SERVOS", rtloop_agent::layout::MAX_SERVOS),
        ("RTLOOP_MAX_QPOS", rtloop_agent::layout::MAX_QPOS),
        ("RTLOOP_FROZEN_PREFIX", rtloop_agent::layout::FROZEN_PREFIX),
    ] {
        assert!(header.contains(&format!("#define {name} {value}\n")), "{name} should be {value}");
    }
    assert!(header.contains(&format!("#define RTLOOP_AGENT_VERSION {}u\n", rtloop_agent::layout::VERSION)));
    assert!(header
        .contains(&format!("#define RTLOOP_MAGIC {:#018X}ull\n", rtloop_agent::layout::MAGIC).replace("0X", "0x")));
}

#[test]
fn the_protocol_doc_states_the_domain_ranges_the_spine_accepts() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/agent-protocol.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let table = doc.split("| Domain field | Accepted |").nth(1).expect("the domain ranges table");
    let mut rows = Vec::new();
    for row in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let field = between_backticks(cells[1]).unwrap();
        let mut words = cells[2].split_whitespace();
        let lo: f64 = words.next().unwrap().parse().unwrap();
        assert_eq!(words.next(), Some("to"), "{row}");
        let hi: f64 = words.next().unwrap().parse().unwrap();
        rows.push((field.to_string(), lo, hi));
    }
    let want: Vec<(String, f64, f64)> =
        rtloop_agent::domain::DOMAIN_RANGES.iter().map(|&(f, lo, hi)| (f.to_string(), lo, hi)).collect();
    assert_eq!(rows, want);
}
