//! Errors keep their cause: a lab command refused for an I/O reason leads down to the
//! operating system's error, and every lab error that wraps another returns it from
//! `source()` without repeating it (the whole line is `rtloop_output::sentence`'s).

use crate::common::parse;
use rtloop_lab::check::CheckError;
use rtloop_lab::Error;
use std::error::Error as _;
use std::io;

/// The chain of a wakeup run whose `--csv` lies behind a link loop, from the top — what
/// `rtloop lab` gets back — down to the `io::Error` (refused for root too).
#[test]
fn an_output_behind_a_link_loop_leads_to_the_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let knot = dir.path().join("knot");
    std::os::unix::fs::symlink(&knot, &knot).unwrap();
    let csv = knot.join("samples.csv");
    let csv_arg = csv.to_str().unwrap();

    let top = rtloop_lab::cli::run(parse(&["wakeup", "--samples", "10", "--csv", csv_arg])).unwrap_err();
    assert!(matches!(&top, Error::Check(_)), "{top:?}");
    let check = top.source().and_then(|s| s.downcast_ref::<CheckError>()).expect("the refused flag");
    assert!(matches!(check, CheckError::OutputUnreadable { flag, path, .. } if flag == "--csv" && *path == csv));
    let bottom = check.source().expect("the operating system's error is the source");
    let io = bottom.downcast_ref::<io::Error>().expect("an io::Error");
    assert_eq!(io.raw_os_error(), Some(libc::ELOOP), "{io}");
    assert!(bottom.source().is_none(), "the chain ends at the operating system");

    // Each level says what failed once; the line the command prints has every level.
    assert_eq!(top.to_string(), format!("--csv {csv_arg}: cannot look at it"));
    assert_eq!(rtloop_output::sentence(&top), format!("--csv {csv_arg}: cannot look at it: {io}"));
}

/// Whether `e`'s source is a `T`.
fn source_is<T: std::error::Error + 'static>(e: &dyn std::error::Error) -> bool {
    e.source().is_some_and(|s| s.is::<T>())
}

/// A check that an error's source has the type it wraps.
type SourceCheck = fn(&dyn std::error::Error) -> bool;

#[test]
fn every_wrapped_cause_is_the_source() {
    let denied = || io::Error::from_raw_os_error(libc::EACCES);
    let unknown_policy = "fast".parse::<rtloop_rt::setup::Policy>().unwrap_err();
    let rt = || rtloop_rt::setup::RtError::Invalid(rtloop_rt::setup::InvalidSettings::DeadlineMissing);
    let open = rtloop_io::OpenError { uri: "fdcanusb:/x".into(), message: "not there".into() };
    let setup = rtloop_io::SetupError::BadServoId(0);

    let checks: Vec<(CheckError, SourceCheck)> = vec![
        (
            CheckError::InList {
                flag: "--methods".into(),
                source: Box::new(CheckError::NoServos { text: String::new() }),
            },
            // A boxed refusal is returned as its box, which shows and chains as the refusal.
            source_is::<Box<CheckError>>,
        ),
        (CheckError::Policy(unknown_policy.clone()), source_is::<rtloop_rt::UnknownName>),
        (CheckError::Rt(rt()), source_is::<rtloop_rt::setup::RtError>),
        (CheckError::Transport(rtloop_io::uri::parse("").unwrap_err()), source_is::<rtloop_io::uri::UriError>),
        (
            CheckError::BindAddress { bind: "x".into(), source: "x".parse::<std::net::SocketAddr>().unwrap_err() },
            source_is::<std::net::AddrParseError>,
        ),
        (
            CheckError::OutputUnreadable { flag: "--csv".into(), path: "x".into(), source: denied() },
            source_is::<io::Error>,
        ),
    ];
    for (e, has_its_source) in &checks {
        assert!(has_its_source(e), "{e:?}");
    }

    let errors: Vec<(Error, SourceCheck)> = vec![
        (Error::Check(CheckError::NoServos { text: String::new() }), source_is::<CheckError>),
        (Error::Rt(rt()), source_is::<rtloop_rt::setup::RtError>),
        (Error::Open(open), source_is::<rtloop_io::OpenError>),
        (Error::Quadruped(setup.clone()), source_is::<rtloop_io::SetupError>),
        (Error::Robot { transport: "sim".into(), source: setup }, source_is::<rtloop_io::SetupError>),
        (Error::Os { what: "eventfd failed".into(), source: denied() }, source_is::<io::Error>),
        (Error::Sys { what: "pipe failed".into(), source: nix::errno::Errno::EMFILE }, source_is::<nix::Error>),
        (Error::Io(denied()), source_is::<io::Error>),
        (
            Error::CreateNamespace {
                name: "rtloop-lab-1".into(),
                source: Box::new(Error::Os { what: "ip netns add".into(), source: denied() }),
            },
            source_is::<Box<Error>>,
        ),
        (Error::Draw { path: "p.png".into(), source: Box::new(denied()) }, source_is::<io::Error>),
        (Error::WriteCsv { path: "s.csv".into(), source: denied() }, source_is::<io::Error>),
        (
            Error::WritePng { path: "p.png".into(), source: rtloop_output::png::EncodingError::LimitsExceeded },
            source_is::<rtloop_output::png::EncodingError>,
        ),
        (Error::Output(rtloop_output::OutputError::Dash), source_is::<rtloop_output::OutputError>),
    ];
    for (e, has_its_source) in &errors {
        assert!(has_its_source(e), "{e:?}");
        // Said once: the line never holds a cause's words twice.
        let line = rtloop_output::sentence(e);
        if let Some(cause) = e.source().map(ToString::to_string).filter(|c| !c.is_empty()) {
            assert_eq!(line.matches(&cause).count(), 1, "{line}");
        }
    }
    // A cause that sits inside the sentence stays there, with its own cause.
    let namespace = &errors[8].0;
    assert_eq!(
        namespace.to_string(),
        format!(
            "cannot create network namespace rtloop-lab-1: ip netns add: {} — run as root or drop --netns",
            denied()
        )
    );
    assert!(Error::Interrupted.source().is_none());
}
