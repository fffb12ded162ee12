//! The `tlog` part of the Python package: TLOG0003 logs (rtloop's and mjlib's) read into numpy
//! columns, streamed item by item, and checked for damage.
//!
//! What it is for: `rtloop.tlog.open(path).read("cycle")` turns a million-item log into a dict
//! of numpy arrays in about a second. The decoding is [`rtloop_tlog::columns::read`] (pure Rust, in
//! the tlog crate: typed column buffers, one `Vec<f64>`, `Vec<i64>`, … per flattened leaf
//! such as `servo.0.position`, filled by a decoder compiled once per record from its
//! schema), run with the GIL released; this file only hands its buffers to numpy (no Python
//! object per value, objects columns aside) and turns its errors into Python exceptions. The
//! pure-Python module `rtloop/tlog.py` wraps the native class [`NativeLog`] with the
//! documented API.
//!
//! Column names are those of `rtloop log export --csv` ([`rtloop_tlog::value::Value::flatten`]):
//! object fields by name, array items by index, map entries by key, unions transparent.
//!
//! What it must never do: panic or crash on a hostile or damaged file (`rtloop_tlog::columns` and
//! the reader check every count read from the file before it drives a loop or an
//! allocation, and cap the columns a schema may create), fail on a cut log (every
//! complete item is read and the damage is reported as a warning and in `damage`), block on a
//! FIFO or device (the reader refuses anything but a regular file before opening it), or hold
//! the GIL while it reads the file.

use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use numpy::PyArray1;
use pyo3::conversion::IntoPyObjectExt;
use pyo3::exceptions::{PyKeyError, PyOSError, PyUserWarning, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use rtloop_tlog::columns::{self, Cell, Column, ColumnData, ColumnOptions, ColumnsError};
use rtloop_tlog::format::TlogError as Error;
use rtloop_tlog::reader::{error_offset, FileReader, ItemFilter, Items};
use rtloop_tlog::survey::{IndexState, Problem, ProblemKind, Problems};
use rtloop_tlog::value::{micros_to_seconds, unique_names, Value};

pyo3::create_exception!(
    rtloop.tlog,
    TlogError,
    PyValueError,
    "The file is not a TLOG0003 log, or a record cannot be read as asked (a subclass of \
     ValueError); the message says what is wrong and how to fix it."
);

pyo3::create_exception!(
    rtloop.tlog,
    TlogWarning,
    PyUserWarning,
    "Part of a log could not be read (a cut, corrupt blocks, items that do not decode): what \
     was read is complete and correct, the message counts what was lost and where."
);

/// Items decoded per GIL-free step of an item iterator.
const ITEMS_PER_BATCH: usize = 1024;

/// Corrupt blocks listed one by one in a damage report; the rest are only counted.
const LISTED_CORRUPT: usize = 1000;

/// Add this part's classes, functions and exceptions to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("TlogError", py.get_type::<TlogError>())?;
    m.add("TlogWarning", py.get_type::<TlogWarning>())?;
    m.add_class::<NativeLog>()?;
    m.add_class::<ItemIter>()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Errors

/// A Python exception for a failure to open `path` as a log: `FileNotFoundError`,
/// `PermissionError`, `IsADirectoryError` … (an `OSError` built from the errno, with the
/// path) for the file system's refusals, [`TlogError`] for a file that is not a log.
fn open_error(path: &Path, error: Error) -> PyErr {
    let shown = path.display().to_string();
    match error {
        Error::Io(e) => {
            let what = match e.kind() {
                std::io::ErrorKind::NotFound => "no such file; check the path".to_string(),
                std::io::ErrorKind::PermissionDenied => {
                    "permission denied; make the file readable or run as a user who may read it".to_string()
                }
                _ => e.to_string(),
            };
            // OSError(errno, strerror, filename) makes the matching subclass.
            PyOSError::new_err((e.raw_os_error().unwrap_or(libc::EIO), format!("cannot read the log: {what}"), shown))
        }
        Error::NotAFile { kind: "a directory" } => PyOSError::new_err((
            libc::EISDIR,
            "cannot read the log: it is a directory; give the path of a log file inside it",
            shown,
        )),
        other => TlogError::new_err(format!("cannot read the log {shown}: {other}")),
    }
}

/// A failure while reading an open log, as [`TlogError`] (or `OSError` for I/O).
fn read_error(path: &Path, error: Error) -> PyErr {
    match error {
        Error::Io(e) => PyOSError::new_err((
            e.raw_os_error().unwrap_or(libc::EIO),
            format!("reading the log failed: {e}"),
            path.display().to_string(),
        )),
        other => TlogError::new_err(format!("cannot read the log {}: {other}", path.display())),
    }
}

/// `KeyError` for a record the log does not have, listing those it has.
fn unknown_record(reader: &FileReader, name: &str) -> PyErr {
    let names: Vec<String> = reader.records().into_iter().map(|r| r.name).collect();
    PyKeyError::new_err(format!(
        "the log has no record '{name}'; {}",
        rtloop_tlog::export::describe_records(&dedup(names))
    ))
}

/// Names in first-seen order without repeats (a log may register one name under two ids).
fn dedup(names: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    names.into_iter().filter(|n| seen.insert(n.clone())).collect()
}

/// Emit one [`TlogWarning`]; `stacklevel` 1 points at the Python code that called in.
fn warn(py: Python<'_>, message: &str, stacklevel: i32) -> PyResult<()> {
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    PyErr::warn(py, &py.get_type::<TlogWarning>(), &message, stacklevel)
}

// ---------------------------------------------------------------------------------------
// Columns to numpy

/// The numpy array of a column read by [`rtloop_tlog::columns::read`]: float64/float32 as stored;
/// int64, uint64 (only when a value exceeds int64) and bool when no row is missing, else
/// float64 with NaN; objects (str, bytes, enum names, mixed) as an object array with None for
/// missing rows.
fn column_to_numpy(py: Python<'_>, column: Column) -> PyResult<Py<PyAny>> {
    let array = match column.data {
        ColumnData::F64(v) => PyArray1::from_vec(py, v).into_any(),
        ColumnData::F32(v) => PyArray1::from_vec(py, v).into_any(),
        ColumnData::I64(v) if column.missing.is_none() => PyArray1::from_vec(py, v).into_any(),
        ColumnData::U64(v) if column.missing.is_none() => {
            if v.iter().all(|&x| i64::try_from(x).is_ok()) {
                // Integers are int64 for users: mixing uint64 with int64 in numpy gives floats.
                PyArray1::from_vec(py, v.into_iter().map(|x| x as i64).collect::<Vec<i64>>()).into_any()
            } else {
                PyArray1::from_vec(py, v).into_any()
            }
        }
        ColumnData::Bool(v) if column.missing.is_none() => PyArray1::from_vec(py, v).into_any(),
        ColumnData::Obj(cells) => {
            let objects = cells.into_iter().map(|c| cell_to_py(py, c)).collect::<PyResult<Vec<Py<PyAny>>>>()?;
            PyArray1::from_vec(py, objects).into_any()
        }
        // No value at all, or integers and bools with missing rows: float64 with NaN.
        ColumnData::Null(_) | ColumnData::I64(_) | ColumnData::U64(_) | ColumnData::Bool(_) => {
            PyArray1::from_vec(py, column.into_f64()).into_any()
        }
    };
    Ok(array.unbind())
}

/// The Python object of an object-column cell (None, bool, int, float, str or bytes).
fn cell_to_py(py: Python<'_>, cell: Cell) -> PyResult<Py<PyAny>> {
    match cell {
        Cell::None => Ok(py.None()),
        Cell::Bool(b) => b.into_py_any(py),
        Cell::I64(v) => v.into_py_any(py),
        Cell::U64(v) => v.into_py_any(py),
        Cell::F64(v) => v.into_py_any(py),
        Cell::Str(s) => s.into_py_any(py),
        Cell::Bytes(b) => Ok(PyBytes::new(py, &b).into_any().unbind()),
    }
}

// ---------------------------------------------------------------------------------------
// The log summary (one walk without decoding)

/// What one walk over every block found, without decoding payloads: records with item counts
/// and time ranges, the data's time span, and the damage.
struct Summary {
    /// `(name, items, first µs, last µs)` in the reader's order, merged by name.
    records: Vec<RecordRow>,
    span_us: Option<(i64, i64)>,
    damage: Damage,
}

/// Damage of a log, as the Python `Damage` gets it.
struct Damage {
    data_blocks: u64,
    has_index: bool,
    index: String,
    truncated_at: Option<u64>,
    corrupt: Vec<(u64, String)>,
    corrupt_count: u64,
    problems: Vec<Problem>,
}

/// Earliest and latest timestamp (µs), if any.
type SpanUs = Option<(i64, i64)>;

/// `(name, items, first µs, last µs)` of one record.
type RecordRow = (String, u64, Option<i64>, Option<i64>);

/// Walk every block once (payloads are not decoded) and count records, time span and damage
/// the way `rtloop log info` does.
fn summarize(reader: &FileReader) -> Summary {
    let records = reader.records();
    let by_id: HashMap<u64, usize> = records.iter().enumerate().map(|(i, r)| (r.id, i)).rev().collect();
    let mut counts: Vec<(u64, Option<i64>, Option<i64>)> = vec![(0, None, None); records.len()];
    let mut problems = Problems::default();
    for record in &records {
        if let Some(error) = &record.schema_error {
            problems.schema_unreadable(record.id, &record.name, record.schema_offset, error);
        }
    }
    let (mut data_span, mut all_span): (SpanUs, SpanUs) = (None, None);
    let widen_span = |span: &mut Option<(i64, i64)>, t: i64| {
        *span = Some(span.map_or((t, t), |(a, b)| (a.min(t), b.max(t))));
    };
    let mut damage = Damage {
        data_blocks: 0,
        has_index: reader.has_index(),
        index: String::new(),
        truncated_at: None,
        corrupt: Vec::new(),
        corrupt_count: 0,
        problems: Vec::new(),
    };
    for item in reader.items(ItemFilter::default()) {
        let item = match item {
            Ok(item) => item,
            Err(error) => {
                problems.note_read_error(&error);
                match error {
                    Error::Truncated { offset } => damage.truncated_at = Some(offset),
                    other => {
                        damage.corrupt_count += 1;
                        if damage.corrupt.len() < LISTED_CORRUPT {
                            damage.corrupt.push((error_offset(&other).unwrap_or(0), other.to_string()));
                        }
                    }
                }
                continue;
            }
        };
        damage.data_blocks += 1;
        let record = by_id.get(&item.record_id).copied();
        if let Some(t) = item.timestamp_us {
            widen_span(&mut all_span, t);
            // The bookkeeping record rtloop's writer adds on close is not data (as `info`).
            if record.is_none_or(|i| records[i].name != rtloop_tlog::realtime::STATS_RECORD) {
                widen_span(&mut data_span, t);
            }
        }
        let Some(i) = record else {
            problems.note(ProblemKind::NoSchema, Some(item.record_id), None, item.offset, || {
                "no schema block for this record id".into()
            });
            continue;
        };
        if records[i].schema.is_none() {
            problems.data_without_readable_schema(item.record_id);
        }
        let entry = &mut counts[i];
        entry.0 += 1;
        if let Some(t) = item.timestamp_us {
            entry.1 = Some(entry.1.map_or(t, |f| f.min(t)));
            entry.2 = Some(entry.2.map_or(t, |l| l.max(t)));
        }
    }
    let mut merged: Vec<RecordRow> = Vec::new();
    for (record, (n, first, last)) in records.iter().zip(counts) {
        match merged.iter_mut().find(|m| m.0 == record.name) {
            Some(m) => {
                m.1 += n;
                m.2 = [m.2, first].into_iter().flatten().min();
                m.3 = [m.3, last].into_iter().flatten().max();
            }
            None => merged.push((record.name.clone(), n, first, last)),
        }
    }
    let index = match (damage.has_index, damage.truncated_at) {
        (true, _) => IndexState::Present,
        (false, Some(at)) => IndexState::Cut { at },
        (false, None) => {
            IndexState::Absent { closed: merged.iter().any(|r| r.0 == rtloop_tlog::realtime::STATS_RECORD && r.1 > 0) }
        }
    };
    damage.index = index.describe();
    damage.problems = problems.into_vec();
    Summary { records: merged, span_us: data_span.or(all_span), damage }
}

/// A damage report as the dict `rtloop.tlog.Damage` is built from.
fn damage_to_py<'py>(py: Python<'py>, damage: &Damage) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("data_blocks", damage.data_blocks)?;
    d.set_item("has_index", damage.has_index)?;
    d.set_item("index", &damage.index)?;
    d.set_item("truncated_at", damage.truncated_at)?;
    d.set_item("corrupt", damage.corrupt.clone())?;
    d.set_item("corrupt_count", damage.corrupt_count)?;
    let problems = PyList::empty(py);
    for p in &damage.problems {
        let entry = PyDict::new(py);
        let kind = serde_json::to_value(p.kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        entry.set_item("kind", kind)?;
        entry.set_item("record", p.record.clone())?;
        entry.set_item("record_id", p.record_id)?;
        entry.set_item("count", p.count)?;
        entry.set_item("first_offset", p.first_offset)?;
        entry.set_item("last_offset", p.last_offset)?;
        entry.set_item("skips_items", p.skips_items())?;
        entry.set_item("message", p.to_string())?;
        problems.append(entry)?;
    }
    d.set_item("problems", problems)?;
    Ok(d)
}

// ---------------------------------------------------------------------------------------
// Python classes

/// An open log (the native half of `rtloop.tlog.Log`). Every method that reads the file
/// releases the GIL; the reader is shared, so reads from several threads may overlap.
#[pyclass(frozen, name = "NativeLog", module = "rtloop._rtloop")]
pub struct NativeLog {
    path: PathBuf,
    /// `None` once closed.
    reader: Mutex<Option<Arc<FileReader>>>,
    size: u64,
    summary: OnceLock<Summary>,
    origin_us: OnceLock<Option<i64>>,
    full_report: OnceLock<Damage>,
}

impl NativeLog {
    /// The reader, or `ValueError` once the log is closed.
    fn reader(&self) -> PyResult<Arc<FileReader>> {
        let guard = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        guard.clone().ok_or_else(|| {
            PyValueError::new_err(format!(
                "the log {} is closed; open it again with rtloop.tlog.open(path)",
                self.path.display()
            ))
        })
    }

    /// The walk of [`summarize`], made once (with the GIL released) and kept.
    fn summary(&self, py: Python<'_>) -> PyResult<&Summary> {
        if let Some(summary) = self.summary.get() {
            return Ok(summary);
        }
        let reader = self.reader()?;
        Ok(py.detach(|| self.summary.get_or_init(|| summarize(&reader))))
    }
}

#[pymethods]
impl NativeLog {
    /// Open `path` (a regular file only: a FIFO or device is refused, never waited on).
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let opened = py.detach(|| FileReader::open(&path));
        let reader = opened.map_err(|e| open_error(&path, e))?;
        Ok(NativeLog {
            size: reader.len(),
            path,
            reader: Mutex::new(Some(Arc::new(reader))),
            summary: OnceLock::new(),
            origin_us: OnceLock::new(),
            full_report: OnceLock::new(),
        })
    }

    /// The path as given.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// File size in bytes (as of open).
    #[getter]
    fn size(&self) -> u64 {
        self.size
    }

    /// True after `close()`.
    #[getter]
    fn closed(&self) -> bool {
        self.reader.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }

    /// Close the file (reads in progress in other threads finish first).
    fn close(&self) {
        self.reader.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Record names in the reader's order (from the index, or a scan of schema blocks).
    fn record_names(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let reader = self.reader()?;
        Ok(dedup(py.detach(|| reader.records()).into_iter().map(|r| r.name).collect()))
    }

    /// `[(name, items, first_us, last_us)]`: one walk over the file, cached.
    fn records(&self, py: Python<'_>) -> PyResult<Vec<RecordRow>> {
        Ok(self.summary(py)?.records.clone())
    }

    /// `(first_us, last_us)` of the data, or None.
    fn span_us(&self, py: Python<'_>) -> PyResult<Option<(i64, i64)>> {
        Ok(self.summary(py)?.span_us)
    }

    /// Timestamp (µs) of the first timestamped item in file order, or None.
    fn origin_us(&self, py: Python<'_>) -> PyResult<Option<i64>> {
        if let Some(origin) = self.origin_us.get() {
            return Ok(*origin);
        }
        let reader = self.reader()?;
        Ok(*py.detach(|| {
            self.origin_us.get_or_init(|| {
                reader.items(ItemFilter::default()).filter_map(Result::ok).find_map(|item| item.timestamp_us)
            })
        }))
    }

    /// Damage found by a walk without decoding (dict, see `rtloop.tlog.Damage`).
    fn damage<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        damage_to_py(py, &self.summary(py)?.damage)
    }

    /// Damage found by a walk that decodes every item (`rtloop log info`'s survey).
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let reader = self.reader()?;
        let damage = py.detach(|| {
            self.full_report.get_or_init(|| {
                let survey = reader.survey();
                let mut corrupt = survey.scan.corrupt.clone();
                let corrupt_count = corrupt.len() as u64;
                corrupt.truncate(LISTED_CORRUPT);
                Damage {
                    data_blocks: survey.scan.data_blocks,
                    has_index: survey.scan.has_index,
                    index: survey.index.describe(),
                    truncated_at: survey.scan.truncated_at,
                    corrupt,
                    corrupt_count,
                    problems: survey.problems.clone(),
                }
            })
        });
        damage_to_py(py, damage)
    }

    /// The JSON Schema (as text) of record `name`; KeyError when there is none.
    fn schema_json(&self, py: Python<'_>, name: &str) -> PyResult<String> {
        let reader = self.reader()?;
        let record = py.detach(|| reader.record(name));
        let Some(record) = record else { return Err(unknown_record(&reader, name)) };
        match &record.schema {
            Some(schema) => Ok(rtloop_tlog::export::record_json_schema(name, schema).to_string()),
            None => Err(TlogError::new_err(format!(
                "the schema of record '{name}' (block at byte {}) does not parse: {}",
                record.schema_offset,
                record.schema_error.as_deref().unwrap_or("unknown error")
            ))),
        }
    }

    /// Byte offset of the first data block at or after `timestamp_us` (the file size when
    /// there is none), found by binary search over seek markers.
    fn seek(&self, py: Python<'_>, timestamp_us: i64) -> PyResult<u64> {
        let reader = self.reader()?;
        py.detach(|| reader.seek(timestamp_us)).map_err(|e| read_error(&self.path, e))
    }

    /// Read record `name` into columns: `(names, arrays, timestamp seconds, timestamp µs,
    /// warnings)`. See `rtloop.tlog.Log.read`.
    #[pyo3(signature = (name, from_us=None, to_us=None, fields=None, enum_names=false))]
    #[allow(clippy::type_complexity)]
    fn read<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        from_us: Option<i64>,
        to_us: Option<i64>,
        fields: Option<Vec<String>>,
        enum_names: bool,
    ) -> PyResult<(Vec<String>, Vec<Py<PyAny>>, Py<PyAny>, Py<PyAny>, Vec<String>)> {
        let reader = self.reader()?;
        let options = ColumnOptions { from_us, to_us, fields, enum_names, ..ColumnOptions::default() };
        let output = py.detach(|| columns::read(&reader, name, &options)).map_err(|e| match e {
            ColumnsError::NoRecord { .. } => unknown_record(&reader, name),
            ColumnsError::SchemaUnreadable { offset, error, .. } => TlogError::new_err(format!(
                "the schema of record '{name}' (block at byte {offset}) does not parse, so its items cannot be decoded \
                 into columns: {error}; read the raw payloads with items('{name}', raw=True)"
            )),
            ColumnsError::TooLarge { limit, .. } => TlogError::new_err(format!(
                "record '{name}' cannot be read into columns: its items hold more than {limit} values (or its schema \
                 claims so); read() decodes records up to that size: stream this one with items() instead"
            )),
            ColumnsError::NoMatch { .. } => PyKeyError::new_err(e.to_string()),
            // Unsupported, and any reason a later release adds.
            _ => TlogError::new_err(e.to_string()),
        })?;
        let mut warnings: Vec<String> = output.problems.list().iter().map(ToString::to_string).collect();
        if output.collisions > 0 {
            warnings.push(format!(
                "{} values of record '{name}' were dropped: their flattened names collide with another field's",
                output.collisions
            ));
        }
        let mut names = Vec::with_capacity(output.columns.len());
        let mut arrays = Vec::with_capacity(output.columns.len());
        for mut column in output.columns {
            names.push(std::mem::take(&mut column.name));
            arrays.push(column_to_numpy(py, column)?);
        }
        let seconds: Vec<f64> = output
            .timestamps_us
            .iter()
            .map(|&us| if us == columns::NO_TIMESTAMP { f64::NAN } else { micros_to_seconds(us) })
            .collect();
        let seconds = PyArray1::from_vec(py, seconds).into_any().unbind();
        let micros = PyArray1::from_vec(py, output.timestamps_us).into_any().unbind();
        Ok((names, arrays, seconds, micros, warnings))
    }

    /// An iterator of `(record, timestamp seconds or None, value)`; see `rtloop.tlog.Log.items`.
    #[pyo3(signature = (name=None, from_us=None, to_us=None, raw=false, flat=false))]
    fn items(
        &self,
        py: Python<'_>,
        name: Option<String>,
        from_us: Option<i64>,
        to_us: Option<i64>,
        raw: bool,
        flat: bool,
    ) -> PyResult<ItemIter> {
        let reader = self.reader()?;
        let records = py.detach(|| reader.records());
        if let Some(name) = &name {
            if !records.iter().any(|r| &r.name == name) {
                return Err(unknown_record(&reader, name));
            }
        }
        let names = records.iter().map(|r| (r.id, r.name.clone())).collect();
        let filter = ItemFilter { record: name, from_us, to_us };
        let walk = py.detach(|| ItemWalk::new(reader, |reader| reader.items(filter)));
        Ok(ItemIter { walk, names, raw, flat, buffer: VecDeque::new(), problems: Problems::default(), done: false })
    }
}

/// The reader's item walk, as the dependent of [`ItemWalk`].
type ItemsOf<'a> = Items<'a>;

self_cell::self_cell!(
    /// A walk over a log's items that owns (a share of) its reader.
    struct ItemWalk {
        owner: Arc<FileReader>,
        #[covariant]
        dependent: ItemsOf,
    }
);

/// What the item iterator yields: record name, timestamp (s), value.
type NextItem = (String, Option<f64>, Py<PyAny>);

/// One item ready for Python: record id, timestamp, and its value or raw payload.
enum Ready {
    Value(u64, Option<i64>, Value),
    Raw(u64, Option<i64>, Vec<u8>),
}

/// Iterator of `(record, timestamp, value)` over a log (`rtloop.tlog.Log.items`). Items are
/// read and decoded in batches with the GIL released; items that cannot be decoded (and
/// corrupt blocks, a cut) are skipped and reported in one `TlogWarning` at the end.
#[pyclass(name = "ItemIter", module = "rtloop._rtloop")]
pub struct ItemIter {
    walk: ItemWalk,
    names: HashMap<u64, String>,
    raw: bool,
    flat: bool,
    buffer: VecDeque<Ready>,
    problems: Problems,
    done: bool,
}

impl ItemIter {
    /// Read and decode the next batch (no GIL needed).
    fn fill(&mut self) {
        let (raw, names) = (self.raw, &self.names);
        let (buffer, problems) = (&mut self.buffer, &mut self.problems);
        let done = self.walk.with_dependent_mut(|reader, items| {
            while buffer.len() < ITEMS_PER_BATCH {
                let Some(item) = items.next() else { return true };
                let item = match item {
                    Ok(item) => item,
                    Err(error) => {
                        problems.note_read_error(&error);
                        continue;
                    }
                };
                let Some(name) = names.get(&item.record_id) else {
                    problems.note(ProblemKind::NoSchema, Some(item.record_id), None, item.offset, || {
                        "no schema block for this record id".into()
                    });
                    continue;
                };
                if raw {
                    buffer.push_back(Ready::Raw(item.record_id, item.timestamp_us, item.data));
                    continue;
                }
                match reader.decode_item(&item) {
                    Ok(value) => buffer.push_back(Ready::Value(item.record_id, item.timestamp_us, value)),
                    Err(e) => {
                        problems.note(ProblemKind::Undecodable, Some(item.record_id), Some(name), item.offset, || {
                            e.to_string()
                        })
                    }
                }
            }
            false
        });
        self.done = done;
    }
}

#[pymethods]
impl ItemIter {
    /// The iterator itself.
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next `(record, timestamp, value)`; at the end, one `TlogWarning` if anything was
    /// skipped.
    fn __next__(mut slf: PyRefMut<'_, Self>, py: Python<'_>) -> PyResult<Option<NextItem>> {
        if slf.buffer.is_empty() && !slf.done {
            let this = &mut *slf;
            py.detach(|| this.fill());
        }
        let Some(ready) = slf.buffer.pop_front() else {
            if !slf.problems.is_empty() {
                let problems = std::mem::take(&mut slf.problems);
                let text: Vec<String> = problems.list().iter().map(ToString::to_string).collect();
                warn(py, &format!("some items were skipped: {}", text.join("; ")), 1)?;
            }
            return Ok(None);
        };
        let (id, timestamp_us, value) = match ready {
            Ready::Value(id, t, value) => {
                let value = if slf.flat {
                    let mut leaves = Vec::new();
                    value.flatten("", &mut leaves);
                    let dict = PyDict::new(py);
                    for (name, leaf) in leaves {
                        dict.set_item(name, value_to_py(py, &leaf)?)?;
                    }
                    dict.into_any().unbind()
                } else {
                    value_to_py(py, &value)?
                };
                (id, t, value)
            }
            Ready::Raw(id, t, data) => (id, t, PyBytes::new(py, &data).into_any().unbind()),
        };
        let name = slf.names.get(&id).cloned().unwrap_or_default();
        Ok(Some((name, timestamp_us.map(micros_to_seconds), value)))
    }
}

/// A decoded value as Python: objects and maps → dict (repeated names `#2`, …), arrays →
/// list, unions → their value, enums → the item name when known else the integer,
/// timestamps and durations → float seconds, bytes → bytes, null → None.
fn value_to_py(py: Python<'_>, value: &Value) -> PyResult<Py<PyAny>> {
    Ok(match value {
        Value::Null => py.None(),
        Value::Bool(b) => b.into_py_any(py)?,
        Value::Int(v) => v.into_py_any(py)?,
        Value::UInt(v) => v.into_py_any(py)?,
        Value::F32(v) => f64::from(*v).into_py_any(py)?,
        Value::F64(v) => v.into_py_any(py)?,
        Value::Bytes(b) => PyBytes::new(py, b).into_any().unbind(),
        Value::String(s) => s.into_py_any(py)?,
        Value::Object(fields) | Value::Map(fields) => {
            let dict = PyDict::new(py);
            let names = unique_names(fields.iter().map(|(k, _)| k.as_str()));
            for (name, (_, v)) in names.into_iter().zip(fields) {
                dict.set_item(name, value_to_py(py, v)?)?;
            }
            dict.into_any().unbind()
        }
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(value_to_py(py, item)?)?;
            }
            list.into_any().unbind()
        }
        Value::Union(_, inner) => value_to_py(py, inner)?,
        Value::Enum(raw, name) => match name {
            Some(name) => name.into_py_any(py)?,
            None => raw.into_py_any(py)?,
        },
        Value::Timestamp(us) | Value::Duration(us) => micros_to_seconds(*us).into_py_any(py)?,
    })
}
