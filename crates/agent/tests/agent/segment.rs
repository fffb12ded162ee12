//! The segment's lifecycle and every refusal: names, a second spine, a stale segment, a
//! foreign file, wrong magic, version or sizes — each one sentence — and the mode.

use crate::common;

use rtloop_agent::layout::{Header, Plain, MAGIC, TOTAL_SIZE, VERSION};
use rtloop_agent::{Agent, AgentAttachError, Spine, SpineConfig, SpineError};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};

fn config(name: &str) -> SpineConfig {
    SpineConfig::new(name, &common::servos(4), 1000.0)
}

fn one_sentence(msg: &str) {
    assert!(!msg.contains('\n'), "{msg}");
    assert_eq!(msg.matches("; ").count(), 1, "one what, one how: {msg}");
}

#[test]
fn names_are_validated() {
    for bad in ["", "a b", "a/b", "../x", "é", &"x".repeat(65), "a.b", "a\0b"] {
        let err = rtloop_agent::validate_name(bad).unwrap_err().to_string();
        assert!(err.starts_with("agent name ") && err.contains("is invalid: use 1 to 64 characters"), "{err}");
        assert!(matches!(Spine::create(&config(bad)), Err(SpineError::Name(_))));
        assert!(matches!(Agent::attach(bad), Err(AgentAttachError::Name(_))));
    }
    for good in ["a", "robot_1", "Upkie-2", &"x".repeat(64)] {
        rtloop_agent::validate_name(good).unwrap();
    }
}

#[test]
fn the_segment_is_0600_and_removed_on_drop() {
    let name = common::unique_name("mode");
    let path = rtloop_agent::segment_path(&name);
    // Whatever the umask, the mode is exactly 0600.
    // SAFETY: umask has no preconditions (this test binary's other tests do not depend on it).
    let old = unsafe { libc::umask(0) };
    let created = Spine::create(&config(&name));
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let (spine, warning) = created.unwrap();
    assert!(warning.is_none());
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    assert_eq!(meta.len(), TOTAL_SIZE as u64);
    drop(spine);
    assert!(!path.exists());
}

#[test]
fn a_second_spine_with_the_same_name_is_refused() {
    let name = common::unique_name("second");
    let (_spine, _) = Spine::create(&config(&name)).unwrap();
    let err = Spine::create(&config(&name)).err().unwrap();
    assert_eq!(
        err.to_string(),
        format!("another spine (pid {}) owns rtloop-{name}; stop it or pick another --agent name", std::process::id())
    );
}

/// A pid that was just running and is gone.
fn dead_pid() -> i32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id() as i32;
    child.wait().unwrap();
    assert!(rtloop_agent::pid_dead(pid));
    pid
}

#[test]
fn a_stale_segment_of_a_dead_spine_is_replaced_with_a_warning() {
    let name = common::unique_name("stale");
    let (spine, _) = Spine::create(&config(&name)).unwrap();
    let pid = dead_pid();
    common::write_raw(&name, 76, &pid.to_le_bytes());
    // The dead spine never cleaned up.
    std::mem::forget(spine);
    let (spine, warning) = Spine::create(&config(&name)).unwrap();
    let warning = warning.unwrap();
    assert_eq!(
        warning,
        format!("removed the stale agent segment rtloop-{name} left by spine pid {pid}, which is no longer running")
    );
    assert_eq!(spine.header().spine_pid as u32, std::process::id());
    let agent = Agent::attach(&name).unwrap();
    assert_eq!(agent.header().spine_pid as u32, std::process::id());
}

#[test]
fn foreign_files_and_symlinks_are_never_replaced() {
    let name = common::unique_name("foreign");
    let path = rtloop_agent::segment_path(&name);
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).unwrap();
    std::fs::write(&path, vec![0xAB; 200]).unwrap();
    let err = Spine::create(&config(&name)).err().unwrap().to_string();
    one_sentence(&err);
    assert!(err.contains("is not an rtloop agent segment (wrong magic)"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), vec![0xAB; 200], "left alone");
    std::fs::remove_file(&path).unwrap();

    let target = tempfile::NamedTempFile::new().unwrap();
    std::os::unix::fs::symlink(target.path(), &path).unwrap();
    let err = Spine::create(&config(&name)).err().unwrap().to_string();
    assert!(err.contains("is a symbolic link"), "{err}");
    assert!(matches!(Agent::attach(&name), Err(AgentAttachError::Io { .. })), "an agent does not follow it either");
    std::fs::remove_file(&path).unwrap();
}

// /dev/shm is world-writable: any local user can make a FIFO under an agent's name. The
// limit bounds a hang; the calls checked return without waiting.
const FIFO_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

#[test]
fn a_planted_fifo_is_refused_at_once_by_the_spine() {
    // Opened without O_NONBLOCK, the spine's read-only look at the existing name waited for
    // a writer for ever.
    let name = common::unique_name("fifo");
    let fifo = common::PlantedFifo::new(&name);
    let n = name.clone();
    let err = common::within(FIFO_LIMIT, move || Spine::create(&config(&n)).err().map(|e| e.to_string()));
    let err = err.expect("a spine never takes over a FIFO");
    one_sentence(&err);
    assert_eq!(
        err,
        format!(
            "/dev/shm/rtloop-{name} exists but is a FIFO (named pipe), not a regular file; remove it if it is yours, or pick another --agent name"
        )
    );
    assert!(std::fs::symlink_metadata(&fifo.path).unwrap().file_type().is_fifo(), "left alone");
}

#[test]
fn a_planted_fifo_is_refused_at_once_by_the_agent() {
    // The agent's read-write open of a FIFO does not wait on Linux, but it saw a 0-byte
    // file, "still being created", and its callers retried for ever.
    let name = common::unique_name("afifo");
    let fifo = common::PlantedFifo::new(&name);
    let n = name.clone();
    let err = common::within(FIFO_LIMIT, move || Agent::attach(&n).err()).expect("an agent never attaches to a FIFO");
    assert!(!err.is_retryable(), "a FIFO is not a segment still being created: {err}");
    let msg = err.to_string();
    one_sentence(&msg);
    assert_eq!(
        msg,
        format!(
            "/dev/shm/rtloop-{name} is a FIFO (named pipe), not a regular file; remove it if it is yours, or use another agent name"
        )
    );
    assert!(matches!(err, AgentAttachError::NotRegular { .. }), "{err:?}");
    assert!(std::fs::symlink_metadata(&fifo.path).unwrap().file_type().is_fifo(), "left alone");
}

/// A hand-made segment: a valid header, then `edit` applied.
fn fake_segment(name: &str, len: usize, edit: impl FnOnce(&mut Header)) {
    let mut h = Header::zeroed();
    let (spine, _) = Spine::create(&config(name)).unwrap();
    h.clone_from(spine.header());
    std::mem::forget(spine);
    edit(&mut h);
    let mut bytes = vec![0u8; len];
    let hb = rtloop_agent::layout::bytes_of(&h);
    let n = hb.len().min(len);
    bytes[..n].copy_from_slice(&hb[..n]);
    std::fs::write(rtloop_agent::segment_path(name), &bytes).unwrap();
}

fn attach_err(name: &str) -> String {
    let err = Agent::attach(name).err().unwrap();
    let msg = err.to_string();
    one_sentence(&msg);
    let _ = std::fs::remove_file(rtloop_agent::segment_path(name));
    msg
}

#[test]
fn attach_refuses_a_wrong_segment_with_one_sentence() {
    let name = common::unique_name("missing");
    let err = Agent::attach(&name).err().unwrap();
    assert!(err.is_retryable());
    assert_eq!(
        err.to_string(),
        format!("no spine is running with agent name {name} (/dev/shm/rtloop-{name} does not exist); start `rtloop run --agent {name}` first")
    );

    let name = common::unique_name("magic");
    fake_segment(&name, TOTAL_SIZE, |h| h.magic = u64::from_le_bytes(*b"NOTOURS!"));
    assert_eq!(
        attach_err(&name),
        format!("/dev/shm/rtloop-{name} is not an rtloop agent segment (wrong magic); check the agent name")
    );

    let name = common::unique_name("notready");
    fake_segment(&name, TOTAL_SIZE, |h| h.magic = 0);
    let err = Agent::attach(&name).err().unwrap();
    assert!(err.is_retryable(), "{err}");
    let _ = std::fs::remove_file(rtloop_agent::segment_path(&name));

    let name = common::unique_name("version");
    fake_segment(&name, 100, |h| h.version = VERSION + 1);
    assert_eq!(
        attach_err(&name),
        format!(
            "the spine speaks protocol version {}, this agent {VERSION}; rebuild the agent against the spine's rtloop_agent.h",
            VERSION + 1
        )
    );

    let name = common::unique_name("short");
    fake_segment(&name, TOTAL_SIZE - 8, |_| {});
    assert_eq!(
        attach_err(&name),
        format!(
            "/dev/shm/rtloop-{name} is {} bytes, smaller than an rtloop agent segment ({TOTAL_SIZE}); check the agent name",
            TOTAL_SIZE - 8
        )
    );

    let name = common::unique_name("tiny");
    fake_segment(&name, 16, |_| {});
    assert!(attach_err(&name).contains("is 16 bytes, smaller than an rtloop agent segment"));

    let name = common::unique_name("size");
    fake_segment(&name, TOTAL_SIZE, |h| h.state_size += 8);
    assert_eq!(
        attach_err(&name),
        "the spine's state size is 3976 but this agent expects 3968; rebuild the agent against the spine's rtloop_agent.h"
    );

    let name = common::unique_name("count");
    fake_segment(&name, TOTAL_SIZE, |h| h.servo_count = 33);
    assert!(attach_err(&name).starts_with("the spine's servo count is 33 but this agent expects 32"));

    let name = common::unique_name("total");
    fake_segment(&name, TOTAL_SIZE, |h| h.total_size = 1 << 40);
    assert!(attach_err(&name).starts_with("the spine's total size is"));
    assert_eq!(MAGIC, u64::from_le_bytes(*b"RTLOOPAG"));
}

#[test]
fn a_second_live_agent_is_refused_and_a_dead_ones_slot_is_taken_over() {
    let name = common::unique_name("busy");
    let (spine, _) = Spine::create(&config(&name)).unwrap();
    // A live agent elsewhere (our parent shell stands in for it: alive, not us).
    let other = std::os::unix::process::parent_id() as i32;
    common::write_raw(&name, 80, &other.to_le_bytes());
    assert_eq!(
        Agent::attach(&name).err().unwrap().to_string(),
        format!("another agent (pid {other}) is attached to rtloop-{name}; stop it first")
    );
    common::write_raw(&name, 80, &dead_pid().to_le_bytes());
    let agent = Agent::attach(&name).unwrap();
    assert_eq!(spine.agent_pid(), Some(std::process::id() as i32));
    drop(agent);
    assert_eq!(spine.agent_pid(), None, "detached");
}

#[test]
fn spine_configuration_mistakes_are_one_sentence() {
    let name = common::unique_name("cfg");
    let mut c = SpineConfig::new(&name, &common::servos(33), 1000.0);
    let e = Spine::create(&c).err().unwrap().to_string();
    one_sentence(&e);
    assert!(e.contains("33 servos"), "{e}");
    c.servos.truncate(4);
    c.rate_hz = f64::NAN;
    one_sentence(&Spine::create(&c).err().unwrap().to_string());
    c.rate_hz = 100.0;
    c.timeout_ns = 0;
    one_sentence(&Spine::create(&c).err().unwrap().to_string());
    assert!(!rtloop_agent::segment_path(&name).exists());
}

#[test]
fn a_segment_whose_spine_pid_names_no_process_is_foreign_not_a_live_spine() {
    // kill(0, 0) and kill(-1, 0) succeed (they address process groups): such a pid once
    // made "another spine (pid 0) owns …".
    for pid in [0, -1] {
        let name = common::unique_name("nopid");
        fake_segment(&name, rtloop_agent::layout::TOTAL_SIZE, |h| h.spine_pid = pid);
        let err = Spine::create(&config(&name)).err().unwrap().to_string();
        assert_eq!(
            err,
            format!(
                "/dev/shm/rtloop-{name} exists but names no spine process (its spine_pid is 0 or negative); remove \
                 it if it is yours, or pick another --agent name"
            ),
            "spine_pid {pid}"
        );
        assert!(rtloop_agent::segment_path(&name).exists(), "left alone");
        std::fs::remove_file(rtloop_agent::segment_path(&name)).unwrap();
    }
}

#[test]
fn a_segment_planted_by_another_user_is_refused_by_the_spine_and_the_agent_naming_its_owner() {
    if !common::can_chown() {
        rtloop_testkit::skip("needs root, to give a segment to user nobody");
        return;
    }
    // Another user makes /dev/shm/rtloop-NAME first, naming a live pid (a whole, valid
    // segment, made here and given away): the spine said "another spine (pid N) owns …",
    // and the agents attached to it and armed it.
    let name = common::unique_name("planted");
    let path = rtloop_agent::segment_path(&name);
    let (planted, _) = Spine::create(&config(&name)).unwrap();
    common::give_to_nobody(&path);
    let (uid, _) = common::nobody();
    let owner = rtloop_agent::describe_owner(uid);
    assert!(owner.ends_with(&format!("(uid {uid})")) || owner == format!("uid {uid}"), "{owner}");

    let err = Spine::create(&config(&name)).err().unwrap();
    assert!(matches!(err, SpineError::OtherUser { .. }), "{err:?}");
    let msg = err.to_string();
    one_sentence(&msg);
    assert_eq!(
        msg,
        format!(
            "/dev/shm/rtloop-{name} belongs to {owner}, not to this spine's user; pick another --agent name, or have \
             {owner} remove it"
        )
    );

    let err = Agent::attach(&name).err().unwrap();
    assert!(!err.is_retryable());
    assert!(matches!(err, AgentAttachError::OtherUser { .. }), "{err:?}");
    let msg = err.to_string();
    one_sentence(&msg);
    assert_eq!(
        msg,
        format!(
            "/dev/shm/rtloop-{name} belongs to {owner}, not to this agent's user (uid {}); attach only to a spine your \
             own user runs, or use another agent name",
            rtloop_agent::euid()
        )
    );
    assert_eq!(planted.agent_pid(), None, "the agent never registered");
    assert_eq!(common::read_raw(&name, 84, 4), [0; 4], "nor wrote its version");
    drop(planted);
    // The planted spine's drop removed it (its inode); nothing of ours is left either.
    assert!(!path.exists());
}

#[test]
fn another_users_empty_leftover_is_refused_not_replaced() {
    if !common::can_chown() {
        rtloop_testkit::skip("needs root, to give a file to user nobody");
        return;
    }
    let name = common::unique_name("theirs");
    let path = rtloop_agent::segment_path(&name);
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).unwrap();
    common::give_to_nobody(&path);
    let err = Spine::create(&config(&name)).err().unwrap().to_string();
    one_sentence(&err);
    assert!(err.contains("belongs to") && err.contains("pick another --agent name"), "{err}");
    assert!(path.exists(), "left alone");
    let err = Agent::attach(&name).err().unwrap();
    assert!(matches!(err, AgentAttachError::OtherUser { .. }), "not 'still being created': {err:?}");
    std::fs::remove_file(&path).unwrap();
}
