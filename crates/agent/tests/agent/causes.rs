//! Errors keep their cause: an agent that cannot open its segment leads down to the
//! operating system's error, and every error that wraps another returns it.

use crate::common;

use rtloop_agent::{Agent, AgentAttachError, NameError, Spine, SpineConfig, SpineError};
use std::error::Error;
use std::io;

/// The chain of an attach the operating system refuses, from the top down to the
/// `io::Error`: a directory under the agent's name cannot be opened read-write (for root
/// too).
#[test]
fn an_attach_the_system_refuses_leads_to_the_io_error() {
    let name = common::unique_name("dir");
    let path = rtloop_agent::segment_path(&name);
    std::fs::create_dir(&path).unwrap();
    let result = Agent::attach(&name);
    std::fs::remove_dir(&path).unwrap();

    let Err(top) = result else { panic!("attached to a directory") };
    assert!(matches!(&top, AgentAttachError::Io { op: "open", .. }), "{top:?}");
    let bottom = top.source().expect("the operating system's error is the source");
    let io = bottom.downcast_ref::<io::Error>().expect("an io::Error");
    // open(2) says EISDIR; glibc's shm_open reports it as EINVAL.
    assert!(matches!(io.kind(), io::ErrorKind::InvalidInput | io::ErrorKind::IsADirectory), "{io:?}");
    assert!(bottom.source().is_none(), "the chain ends at the operating system");
    // The sentence keeps the system's words (see AgentAttachError).
    assert_eq!(top.to_string(), format!("cannot open /dev/shm/rtloop-{name}: {io}"));
}

/// Each variant that wraps an error returns it, as the type it is; the others return none.
#[test]
fn every_wrapped_cause_is_the_source() {
    let bad = NameError { name: "a b".into() };
    let spine = Spine::create(&SpineConfig::new("a b", &common::servos(1), 1000.0)).err().unwrap();
    assert!(matches!(&spine, SpineError::Name(_)));
    assert_eq!(spine.source().and_then(|s| s.downcast_ref::<NameError>()), Some(&bad));
    let agent = Agent::attach("a b").err().unwrap();
    assert_eq!(agent.source().and_then(|s| s.downcast_ref::<NameError>()), Some(&bad));

    let denied = || io::Error::from_raw_os_error(libc::EACCES);
    let spine = SpineError::Io { name: "x".into(), op: "create", err: denied() };
    let kind = spine.source().and_then(|s| s.downcast_ref::<io::Error>()).map(io::Error::kind);
    assert_eq!(kind, Some(io::ErrorKind::PermissionDenied));
    let agent = AgentAttachError::Io { name: "x".into(), op: "map", err: denied() };
    let kind = agent.source().and_then(|s| s.downcast_ref::<io::Error>()).map(io::Error::kind);
    assert_eq!(kind, Some(io::ErrorKind::PermissionDenied));

    assert!(SpineError::Timeout.source().is_none());
    assert!(AgentAttachError::NotFound("x".into()).source().is_none());
}
