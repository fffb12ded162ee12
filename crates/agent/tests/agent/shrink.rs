//! A segment that shrinks or grows under a live spine and agent (any process of the user
//! can `truncate` it, or `open(path, "w")` it): nobody dies of SIGBUS, both sides say the
//! segment was lost, the spine stops following and still removes its file; a leftover
//! that holds no header does not block the next spine; a fault outside every segment
//! still kills the process as it would without the guard.

use crate::common;

use rtloop_agent::layout::{status, TOTAL_SIZE};
use rtloop_agent::{Agent, Lockstep, Poll, SegmentLoss, Spine, SpineConfig, SpineGone};
use std::os::unix::fs::OpenOptionsExt;

fn armed(tag: &str) -> (Spine, Agent) {
    let name = common::unique_name(tag);
    let (mut spine, _) = Spine::create(&SpineConfig::new(&name, &common::servos(4), 1000.0)).unwrap();
    let mut agent = Agent::attach(&name).unwrap();
    agent.read_state().unwrap();
    agent.rearm_if_needed();
    agent.send();
    assert_eq!(spine.poll_command(0), Poll::Armed);
    (spine, agent)
}

/// What the spine and the agent do after the file was changed under them: the spine sees
/// `loss`, stops following, polls nothing; the agent says the segment is lost; the spine,
/// dropped, removes the file.
fn both_survive(mut spine: Spine, mut agent: Agent, loss: SegmentLoss) {
    let path = rtloop_agent::segment_path(spine.name());
    // The spine's next cycle: publish (a write into the segment), then its check.
    spine.state_mut().cycle = 7;
    spine.publish(1);
    assert_eq!(spine.check_segment(), Some(loss));
    assert!(!spine.following(), "a lost segment is never followed");
    assert_eq!(spine.status(), status::SHUTTING_DOWN);
    assert_eq!(spine.poll_command(2), Poll::SegmentLost);
    assert!(spine.command().is_none());
    // The agent writes a command and reads a state: no SIGBUS, and it is told.
    agent.send();
    let _ = agent.read_state();
    assert!(agent.segment_lost());
    assert_eq!(agent.spine_gone(), Some(SpineGone::SegmentLost));
    assert_eq!(spine.check_segment(), Some(loss), "once lost, always lost");
    drop(spine);
    assert!(!path.exists(), "the spine removes its file, whatever became of it");
    drop(agent);
}

#[test]
fn a_segment_truncated_to_zero_under_a_live_spine_and_agent_kills_neither() {
    // `File::create` truncates, as `open(path, "w")` in any language does: every later
    // access to the mapping raised SIGBUS and killed the process.
    let (spine, agent) = armed("trunc0");
    std::fs::File::create(rtloop_agent::segment_path(spine.name())).unwrap();
    both_survive(spine, agent, SegmentLoss::Truncated);
}

#[test]
fn a_segment_shrunk_to_a_few_bytes_is_lost_too() {
    // A file written with a few bytes (`echo x > /dev/shm/rtloop-NAME`): its first page
    // stays mapped, the rest faults.
    let (spine, agent) = armed("trunc1");
    std::fs::write(rtloop_agent::segment_path(spine.name()), b"x").unwrap();
    both_survive(spine, agent, SegmentLoss::Truncated);
}

#[test]
fn a_segment_shrunk_then_grown_again_is_lost_without_a_fault() {
    // Truncated and grown back to its size: no access faults (the file is long enough
    // again), but every byte is zero: the magic word is gone.
    let (spine, agent) = armed("regrow");
    let f = std::fs::OpenOptions::new().write(true).open(rtloop_agent::segment_path(spine.name())).unwrap();
    f.set_len(0).unwrap();
    f.set_len(TOTAL_SIZE as u64).unwrap();
    both_survive(spine, agent, SegmentLoss::Replaced);
}

#[test]
fn a_segment_that_grows_changes_nothing() {
    let (mut spine, mut agent) = armed("grow");
    let f = std::fs::OpenOptions::new().write(true).open(rtloop_agent::segment_path(spine.name())).unwrap();
    f.set_len(4 * TOTAL_SIZE as u64).unwrap();
    spine.publish(1);
    assert_eq!(spine.check_segment(), None);
    agent.read_state().unwrap();
    agent.send();
    assert_eq!(spine.poll_command(2), Poll::Command);
    assert!(!agent.segment_lost());
    assert_eq!(agent.spine_gone(), None);
}

#[test]
fn a_lockstep_wait_ends_when_the_segment_is_truncated() {
    let name = common::unique_name("lstrunc");
    let mut config = SpineConfig::new(&name, &common::servos(2), 1000.0);
    config.lockstep = true;
    let (mut spine, _) = Spine::create(&config).unwrap();
    let path = rtloop_agent::segment_path(&name);
    // Truncated while the spine waits for an agent that never comes.
    let truncate = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::File::create(path).unwrap();
    });
    spine.state_mut().cycle = 1;
    spine.publish(1);
    assert_eq!(spine.wait_command_for(1, || false), Lockstep::SegmentLost);
    truncate.join().unwrap();
    assert_eq!(spine.check_segment(), Some(SegmentLoss::Truncated));
}

#[test]
fn a_leftover_that_holds_no_header_is_replaced_with_a_warning() {
    // What a spine killed after its segment was truncated leaves: an empty file, a few
    // bytes, or a segment's size of zeros. It refused every later spine of that name
    // ("too small to be an rtloop agent segment").
    for (tag, bytes) in [("empty", vec![]), ("one", b"x".to_vec()), ("zeros", vec![0u8; TOTAL_SIZE])] {
        let name = common::unique_name(tag);
        let path = rtloop_agent::segment_path(&name);
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).unwrap();
        std::io::Write::write_all(&mut f, &bytes).unwrap();
        let (spine, warning) = Spine::create(&SpineConfig::new(&name, &common::servos(1), 100.0)).unwrap();
        assert_eq!(
            warning.as_deref(),
            Some(
                format!(
                    "removed /dev/shm/rtloop-{name}, a leftover of {} bytes that holds no segment header (a segment \
                     truncated under a spine that could not clean up)",
                    bytes.len()
                )
                .as_str()
            ),
            "{tag}"
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), TOTAL_SIZE as u64, "{tag}: the new segment");
        drop(spine);
        assert!(!path.exists());
    }
}

/// The environment variable that makes [`a_fault_outside_every_segment_still_kills_the_process`]
/// its own child.
const FAULT_CHILD: &str = "RTLOOP_AGENT_TEST_FAULT_CHILD";

#[test]
fn a_fault_outside_every_segment_still_kills_the_process() {
    if let Some(name) = std::env::var_os(FAULT_CHILD) {
        // The child: the guard installed (an agent attached to the parent's spine), then a
        // fault in a mapping of a file that is no segment.
        let _agent = Agent::attach(name.to_str().unwrap()).unwrap();
        let file = tempfile::tempfile().unwrap();
        file.set_len(8192).unwrap();
        // SAFETY: a fresh mapping of our own temporary file.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                8192,
                libc::PROT_READ,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        file.set_len(0).unwrap();
        // SAFETY: inside the mapping; the file is shorter now, so this raises SIGBUS.
        let x = unsafe { core::ptr::read_volatile(p.cast::<u8>()) };
        panic!("read {x} past the end of a file without a fault");
    }
    let name = common::unique_name("fault");
    let (_spine, _) = Spine::create(&SpineConfig::new(&name, &common::servos(1), 100.0)).unwrap();
    let test = rtloop_testkit::test_path(module_path!(), "a_fault_outside_every_segment_still_kills_the_process");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &test, "--nocapture", "--test-threads", "1"])
        .env(FAULT_CHILD, &name)
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "the guard passes faults that are not its own on: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
