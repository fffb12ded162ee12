//! A run that fails for an operating-system reason keeps the reason: walking `source()` from
//! the run's error down reaches the `std::io::Error` itself, each level the type that wrapped
//! it. (The tools print the chain as one sentence, `rtloop_output::sentence`.)

use rtloop::{Controller, Failure, Flow, Output, RunError, Runtime, State};

struct Idle;

impl Controller for Idle {
    type Telemetry = ();
    fn cycle(&mut self, _state: &State<'_>, _out: &mut Output<'_, ()>) -> Result<Flow, Failure> {
        Ok(Flow::Continue)
    }
}

#[test]
fn a_log_that_cannot_be_created_keeps_its_io_error_at_the_bottom_of_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-folder").join("run.tlog");
    let e = Runtime::new().lockstep(true).duration_s(0.01).log(&path).run(Idle).expect_err("the folder is missing");
    assert!(matches!(e, RunError::CreateLog { .. }), "{e:?}");
    // RunError → TlogError → io::Error.
    let tlog = std::error::Error::source(&e).expect("the run's error has a cause");
    assert!(tlog.downcast_ref::<rtloop_tlog::format::TlogError>().is_some(), "{tlog:?}");
    let mut bottom: &dyn std::error::Error = tlog;
    while let Some(next) = bottom.source() {
        bottom = next;
    }
    let io = bottom.downcast_ref::<std::io::Error>().expect("an io::Error at the bottom");
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
    // What the user reads names the file and the reason, on one line.
    let line = rtloop_output::sentence(&e);
    assert!(line.contains(&path.display().to_string()) && !line.contains('\n'), "{line}");
}
