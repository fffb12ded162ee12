//! `rtloop log export --parquet` in a program built without the `parquet` feature (a robot's
//! build): the same two entry points as `parquet.rs`, each refusing with one sentence that
//! says how to get Parquet. Must never: write anything.

use super::{ExportDone, ExportFailed, Outcome};
use rtloop_output::FileIdentity;
use rtloop_tlog::reader::FileReader;
use std::path::Path;

/// Why a Parquet export is refused, and what to do instead.
const WITHOUT_PARQUET: &str = "this rtloop was built without Parquet export (feature `parquet`): copy the log to a \
                               machine whose rtloop has it (the default build), or rebuild with --features parquet";

pub(super) fn export_parquet(
    _path: &Path,
    _reader: FileReader,
    _identity: FileIdentity,
    _out: &Path,
    _record: Option<&str>,
    _force: bool,
) -> Result<ExportDone, ExportFailed> {
    Err(WITHOUT_PARQUET.into())
}

pub(super) fn export_dataset(
    _paths: &[std::path::PathBuf],
    _out: &Path,
    _record: Option<&str>,
    _robot: Option<&str>,
    _force: bool,
    _as_json: bool,
) -> Result<Outcome, String> {
    Err(WITHOUT_PARQUET.into())
}
