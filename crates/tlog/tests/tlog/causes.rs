//! Errors keep their cause: every `TlogError` that wraps another error returns it from
//! `source()`, and a log that cannot be created leads down to the operating system's error.

use rtloop_tlog::format::TlogError;
use rtloop_tlog::writer::FileWriter;
use std::error::Error;
use std::io;

/// The chain of a log that cannot be created, from the top down to the `io::Error`: a
/// directory that does not exist (refused for root too, unlike a read-only one).
#[test]
fn a_log_that_cannot_be_created_leads_to_the_operating_systems_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no such directory").join("run.tlog");
    let Err(top) = FileWriter::create(&path) else { panic!("created a log in a missing directory") };
    assert!(matches!(top, TlogError::Io(_)), "{top:?}");
    let bottom = top.source().expect("the operating system's error is the source");
    let io = bottom.downcast_ref::<io::Error>().expect("an io::Error");
    assert_eq!(io.kind(), io::ErrorKind::NotFound);
    assert!(bottom.source().is_none(), "the chain ends at the operating system");
    // The sentence of an I/O failure is the operating system's (what `rtloop run` prints
    // after "cannot create the log PATH: ").
    assert_eq!(top.to_string(), io.to_string());
}

/// Each variant with a wrapped cause returns it, as the type it is; the sentence of an
/// export or plot failure does not repeat it.
#[test]
fn every_wrapped_cause_is_the_source() {
    fn source_of<T: Error + 'static>(e: &TlogError) -> &T {
        e.source().and_then(|s| s.downcast_ref::<T>()).unwrap_or_else(|| panic!("no source of {e:?}"))
    }
    let e = TlogError::Io(io::Error::from(io::ErrorKind::StorageFull));
    assert_eq!(source_of::<io::Error>(&e).kind(), io::ErrorKind::StorageFull);

    let e = TlogError::Compression(Box::new(io::Error::other("the codec refused")));
    assert_eq!(source_of::<io::Error>(&e).to_string(), "the codec refused");
    assert_eq!(e.to_string(), "compression error: the codec refused", "kept: the writer records this sentence");

    let json = serde_json::from_str::<u8>("x").unwrap_err();
    let words = json.to_string();
    let e = TlogError::McapJson(json);
    assert_eq!(source_of::<serde_json::Error>(&e).to_string(), words);
    assert_eq!(e.to_string(), "mcap");

    let e = TlogError::Mcap(mcap::McapError::BadMagic);
    assert!(matches!(source_of::<mcap::McapError>(&e), mcap::McapError::BadMagic));
    assert_eq!(e.to_string(), "the MCAP writer failed");

    let e = TlogError::Png(rtloop_output::png::EncodingError::LimitsExceeded);
    assert!(matches!(
        source_of::<rtloop_output::png::EncodingError>(&e),
        rtloop_output::png::EncodingError::LimitsExceeded
    ));
    assert_eq!(e.to_string(), "the PNG encoder failed");

    type DrawError = plotters::drawing::DrawingAreaErrorKind<io::Error>;
    let e = TlogError::Draw(Box::new(DrawError::LayoutError));
    assert!(matches!(source_of::<DrawError>(&e), DrawError::LayoutError));
    assert_eq!(e.to_string(), "drawing the plot failed");

    for plain in [TlogError::BadMagic, TlogError::Empty, TlogError::NoFields] {
        assert!(plain.source().is_none(), "{plain}");
    }
}
