//! The `tlog` part of the Python package: TLOG0003 logs (rtloop's and mjlib's) read into numpy
//! columns, streamed item by item, and checked for damage.
//!
//! What it is for: `rtloop.tlog.open(path).read("cycle")` turns a million-item log into a dict
//! of numpy arrays in about a second. The payloads are decoded straight into typed column
//! buffers (one `Vec<f64>`, `Vec<i64>`, … per flattened leaf such as `servo.0.position`) by a
//! decoder compiled once per record from its schema — no per-value allocation, no Python object
//! per value — and the whole walk runs with the GIL released. The pure-Python module
//! `rtloop/tlog.py` wraps the native class [`NativeLog`] with the documented API.
//!
//! Column names are those of `rtloop log export --csv` ([`tlog::value::Value::flatten`]):
//! object fields by name, array items by index, map entries by key, unions transparent.
//!
//! What it must never do: panic or crash on a hostile or damaged file (every count read from
//! the file is checked against the bytes that remain before it drives a loop or an
//! allocation, and the columns a schema may create are capped), fail on a cut log (every
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
use tlog::format::{read_bytes, read_string, read_varuint, TlogError as Error};
use tlog::reader::{error_offset, FileReader, ItemFilter, Items};
use tlog::schema::Schema;
use tlog::survey::{IndexState, Problem, ProblemKind, Problems};
use tlog::value::{micros_to_seconds, unique_names, Value};
use wildmatch::WildMatch;

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

/// Values (leaves, objects, array items) one read may set up per record: a hostile schema
/// (`fixedarray(2^40, …)`) or payload must not make the decoder allocate without bound.
/// rtloop's `cycle` record has about 230.
const MAX_NODES: usize = 1_000_000;

/// Values with a zero-byte encoding (nulls, empty objects) one payload may contain, on top
/// of one value per byte (as `tlog::value::decode` allows).
const ZERO_WIDTH_VALUE_ALLOWANCE: usize = 1 << 16;

/// Most rows a read reserves column memory for before it has seen them.
const MAX_RESERVED_ROWS: u64 = 1 << 26;

/// Items decoded per GIL-free step of an item iterator.
const ITEMS_PER_BATCH: usize = 1024;

/// Corrupt blocks listed one by one in a damage report; the rest are only counted.
const LISTED_CORRUPT: usize = 1000;

/// The column every read starts with; a record field of that name becomes `timestamp#2`.
const TIMESTAMP: &str = "timestamp";

/// Marks a leaf whose column was not selected (`fields=`): its bytes are parsed and skipped.
const SKIP: usize = usize::MAX;

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
    PyKeyError::new_err(format!("the log has no record '{name}'; {}", tlog::export::describe_records(&dedup(names))))
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

/// Count a reader error (a corrupt block, or the cut at the end).
fn note_read_error(problems: &mut Problems, error: &Error) {
    let kind =
        if matches!(error, Error::Truncated { .. }) { ProblemKind::Truncated } else { ProblemKind::CorruptBlock };
    problems.note(kind, None, None, error_offset(error).unwrap_or(0), || error.to_string());
}

// ---------------------------------------------------------------------------------------
// Columns

/// How a column's values are stored while a read fills it. A column takes the type of its
/// first value and widens when a later value of the same name has another (a union of an int
/// and a string, say): numbers to `F64`, anything else to `Obj`.
enum Data {
    /// No value yet, only missing rows.
    Null,
    Bool(Vec<bool>),
    I64(Vec<i64>),
    U64(Vec<u64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Obj(Vec<Cell>),
}

/// One value of an object column (strings, bytes, enum names, mixed types).
#[derive(Clone)]
enum Cell {
    None,
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(String),
    Bytes(Vec<u8>),
}

/// One decoded leaf value, borrowing strings and bytes from the payload.
#[derive(Clone, Copy)]
enum Leaf<'a> {
    Missing,
    Bool(bool),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
    Str(&'a str),
    Bytes(&'a [u8]),
}

impl Leaf<'_> {
    /// The value as a float (for a column widened to float64); None for non-numbers.
    fn as_f64(self) -> Option<f64> {
        match self {
            Leaf::Bool(b) => Some(f64::from(u8::from(b))),
            Leaf::I64(v) => Some(v as f64),
            Leaf::U64(v) => Some(v as f64),
            Leaf::F32(v) => Some(f64::from(v)),
            Leaf::F64(v) => Some(v),
            Leaf::Missing | Leaf::Str(_) | Leaf::Bytes(_) => None,
        }
    }

    /// The value as an object-column cell (strings and bytes copied out of the payload).
    fn cell(self) -> Cell {
        match self {
            Leaf::Missing => Cell::None,
            Leaf::Bool(b) => Cell::Bool(b),
            Leaf::I64(v) => Cell::I64(v),
            Leaf::U64(v) => Cell::U64(v),
            Leaf::F32(v) => Cell::F64(f64::from(v)),
            Leaf::F64(v) => Cell::F64(v),
            Leaf::Str(s) => Cell::Str(s.to_string()),
            Leaf::Bytes(b) => Cell::Bytes(b.to_vec()),
        }
    }

    /// The storage a column holding only this value would have.
    fn kind(self) -> Kind {
        match self {
            Leaf::Missing => Kind::Null,
            Leaf::Bool(_) => Kind::Bool,
            Leaf::I64(_) => Kind::I64,
            Leaf::U64(_) => Kind::U64,
            Leaf::F32(_) => Kind::F32,
            Leaf::F64(_) => Kind::F64,
            Leaf::Str(_) | Leaf::Bytes(_) => Kind::Obj,
        }
    }
}

/// The storage of a column ([`Data`]'s variants), or of a value ([`Leaf::kind`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    I64,
    U64,
    F32,
    F64,
    Obj,
}

/// The storage that holds values of both kinds.
fn widen(a: Kind, b: Kind) -> Kind {
    match (a, b) {
        (Kind::Null, k) | (k, Kind::Null) => k,
        (a, b) if a == b => a,
        (Kind::Obj, _) | (_, Kind::Obj) => Kind::Obj,
        _ => Kind::F64,
    }
}

/// One output column: a flattened leaf name and its values, one per row. Values staged in
/// [`Columns`]' block are not here yet (see [`Columns::push`]).
struct Column {
    name: String,
    /// Where the leaf sits in the schema (field index, array index, …): columns are returned
    /// in this order, so `servo.0.*` precede `servo.1.*` whatever order they first appeared in.
    key: Vec<u32>,
    data: Data,
    /// Rows in `data` (missing ones included).
    len: usize,
    /// Which rows have no value, for storages without NaN (created on the first such row).
    missing: Option<Vec<bool>>,
}

impl Column {
    /// A column of `kind` (the schema's); `rows` earlier rows without a value in it.
    fn new(name: String, key: Vec<u32>, rows: usize, kind: Kind) -> Self {
        let mut column = Column { name, key, data: Data::Null, len: rows, missing: None };
        // Typed from the start, so that a read of no rows still has the schema's dtypes.
        column.convert(kind);
        column
    }

    /// The column's current storage.
    fn kind(&self) -> Kind {
        match self.data {
            Data::Null => Kind::Null,
            Data::Bool(_) => Kind::Bool,
            Data::I64(_) => Kind::I64,
            Data::U64(_) => Kind::U64,
            Data::F32(_) => Kind::F32,
            Data::F64(_) => Kind::F64,
            Data::Obj(_) => Kind::Obj,
        }
    }

    /// The kind of value that may be staged for this column: its own numeric or bool type,
    /// while no row is missing (a missing row needs the mask, kept by [`Column::push`]).
    fn stageable(&self) -> Kind {
        match self.kind() {
            kind @ (Kind::F64 | Kind::F32) => kind,
            kind @ (Kind::I64 | Kind::U64 | Kind::Bool) if self.missing.is_none() => kind,
            _ => Kind::Null,
        }
    }

    /// Append one row's value directly (the slow path: missing values, widening, objects).
    fn push(&mut self, leaf: Leaf<'_>) {
        if let Leaf::Missing = leaf {
            self.push_missing();
            return;
        }
        let target = widen(self.kind(), leaf.kind());
        if target != self.kind() {
            self.convert(target);
        }
        match (&mut self.data, leaf) {
            (Data::F64(v), leaf) => v.push(leaf.as_f64().unwrap_or(f64::NAN)),
            (Data::F32(v), Leaf::F32(x)) => v.push(x),
            (Data::I64(v), Leaf::I64(x)) => v.push(x),
            (Data::U64(v), Leaf::U64(x)) => v.push(x),
            (Data::Bool(v), Leaf::Bool(x)) => v.push(x),
            (Data::Obj(v), leaf) => v.push(leaf.cell()),
            // widen() gives a storage that holds the leaf, so this is never reached; a
            // missing value keeps the row count right if it were.
            _ => {
                self.push_missing();
                return;
            }
        }
        if let Some(missing) = &mut self.missing {
            missing.push(false);
        }
        self.len += 1;
    }

    /// Append staged values (bits of the column's own [`Column::stageable`] kind).
    fn extend_bits(&mut self, bits: impl ExactSizeIterator<Item = u64>) {
        let n = bits.len();
        match &mut self.data {
            Data::F64(v) => v.extend(bits.map(f64::from_bits)),
            Data::F32(v) => v.extend(bits.map(|b| f32::from_bits(b as u32))),
            Data::I64(v) => v.extend(bits.map(|b| b as i64)),
            Data::U64(v) => v.extend(bits),
            Data::Bool(v) => v.extend(bits.map(|b| b != 0)),
            // Only the kinds above are staged; were anything else, the rows stay missing.
            Data::Null | Data::Obj(_) => {
                for _ in 0..n {
                    self.push_missing();
                }
                return;
            }
        }
        if let Some(missing) = &mut self.missing {
            missing.extend(std::iter::repeat_n(false, n));
        }
        self.len += n;
    }

    fn push_missing(&mut self) {
        let len = self.len;
        let needs_mask = match &mut self.data {
            Data::Null => false,
            Data::F64(v) => {
                v.push(f64::NAN);
                false
            }
            Data::F32(v) => {
                v.push(f32::NAN);
                false
            }
            Data::Obj(v) => {
                v.push(Cell::None);
                false
            }
            Data::Bool(v) => {
                v.push(false);
                true
            }
            Data::I64(v) => {
                v.push(0);
                true
            }
            Data::U64(v) => {
                v.push(0);
                true
            }
        };
        if needs_mask {
            self.missing.get_or_insert_with(|| vec![false; len]).push(true);
        } else if let Some(missing) = &mut self.missing {
            missing.push(true);
        }
        self.len += 1;
    }

    /// Change the storage to `target`, keeping every row (missing rows stay missing).
    fn convert(&mut self, target: Kind) {
        let len = self.len;
        let missing = self.missing.take();
        let old = std::mem::replace(&mut self.data, Data::Null);
        let all_missing = matches!(old, Data::Null);
        self.data = match target {
            Kind::Null => Data::Null,
            Kind::F64 => Data::F64(match old {
                Data::Null => vec![f64::NAN; len],
                Data::F64(v) => v,
                Data::F32(v) => v.into_iter().map(f64::from).collect(),
                Data::I64(v) => masked(v, &missing, |x| x as f64, f64::NAN),
                Data::U64(v) => masked(v, &missing, |x| x as f64, f64::NAN),
                Data::Bool(v) => masked(v, &missing, |x| f64::from(u8::from(x)), f64::NAN),
                Data::Obj(v) => v.iter().map(|c| c.as_f64().unwrap_or(f64::NAN)).collect(),
            }),
            Kind::F32 => Data::F32(vec![f32::NAN; len]),
            Kind::Obj => Data::Obj(match old {
                Data::Null => vec![Cell::None; len],
                Data::F64(v) => v.into_iter().map(Cell::F64).collect(),
                Data::F32(v) => v.into_iter().map(|x| Cell::F64(f64::from(x))).collect(),
                Data::I64(v) => masked(v, &missing, Cell::I64, Cell::None),
                Data::U64(v) => masked(v, &missing, Cell::U64, Cell::None),
                Data::Bool(v) => masked(v, &missing, Cell::Bool, Cell::None),
                Data::Obj(v) => v,
            }),
            // Only a column without values becomes one of these (widen() never narrows).
            Kind::Bool => Data::Bool(vec![false; len]),
            Kind::I64 => Data::I64(vec![0; len]),
            Kind::U64 => Data::U64(vec![0; len]),
        };
        if all_missing && matches!(target, Kind::Bool | Kind::I64 | Kind::U64) && len > 0 {
            self.missing = Some(vec![true; len]);
        }
    }

    /// Forget the rows from `row` on (an item that failed to decode half way).
    fn truncate(&mut self, row: usize) {
        if self.len <= row {
            return;
        }
        match &mut self.data {
            Data::Null => {}
            Data::Bool(v) => v.truncate(row),
            Data::I64(v) => v.truncate(row),
            Data::U64(v) => v.truncate(row),
            Data::F32(v) => v.truncate(row),
            Data::F64(v) => v.truncate(row),
            Data::Obj(v) => v.truncate(row),
        }
        if let Some(missing) = &mut self.missing {
            missing.truncate(row);
        }
        self.len = row;
    }

    /// Reserve room for `rows` rows in all (a guess; untouched capacity costs no memory).
    fn reserve_total(&mut self, rows: usize) {
        let extra = rows.saturating_sub(self.len);
        // try_reserve: a wrong guess must not abort the process; growing as needed still works.
        let _ = match &mut self.data {
            Data::F64(v) => v.try_reserve(extra),
            Data::F32(v) => v.try_reserve(extra),
            Data::I64(v) => v.try_reserve(extra),
            Data::U64(v) => v.try_reserve(extra),
            Data::Bool(v) => v.try_reserve(extra),
            Data::Null | Data::Obj(_) => Ok(()),
        };
    }

    /// The numpy array of this column: float64/float32 as stored; int64, uint64 (only when a
    /// value exceeds int64) and bool when no row is missing, else float64 with NaN; objects
    /// (str, bytes, enum names, mixed) as an object array with None for missing rows.
    fn into_numpy(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let Column { data, missing, len, .. } = self;
        let array = match data {
            Data::Null => PyArray1::from_vec(py, vec![f64::NAN; len]).into_any(),
            Data::F64(v) => PyArray1::from_vec(py, v).into_any(),
            Data::F32(v) => PyArray1::from_vec(py, v).into_any(),
            Data::I64(v) => match &missing {
                Some(_) => PyArray1::from_vec(py, masked(v, &missing, |x| x as f64, f64::NAN)).into_any(),
                None => PyArray1::from_vec(py, v).into_any(),
            },
            Data::U64(v) => match &missing {
                Some(_) => PyArray1::from_vec(py, masked(v, &missing, |x| x as f64, f64::NAN)).into_any(),
                None if v.iter().all(|&x| i64::try_from(x).is_ok()) => {
                    // Integers are int64 for users: mixing uint64 with int64 in numpy gives floats.
                    PyArray1::from_vec(py, v.into_iter().map(|x| x as i64).collect::<Vec<i64>>()).into_any()
                }
                None => PyArray1::from_vec(py, v).into_any(),
            },
            Data::Bool(v) => match &missing {
                Some(_) => PyArray1::from_vec(py, masked(v, &missing, |x| f64::from(u8::from(x)), f64::NAN)).into_any(),
                None => PyArray1::from_vec(py, v).into_any(),
            },
            Data::Obj(cells) => {
                let objects = cells.into_iter().map(|c| c.into_py(py)).collect::<PyResult<Vec<Py<PyAny>>>>()?;
                PyArray1::from_vec(py, objects).into_any()
            }
        };
        Ok(array.unbind())
    }
}

impl Cell {
    /// The cell as a float, so that `convert` handles every pair of storages (widen() never
    /// turns an object column into floats); None for non-numbers.
    fn as_f64(&self) -> Option<f64> {
        match self {
            Cell::Bool(b) => Some(f64::from(u8::from(*b))),
            Cell::I64(v) => Some(*v as f64),
            Cell::U64(v) => Some(*v as f64),
            Cell::F64(v) => Some(*v),
            Cell::None | Cell::Str(_) | Cell::Bytes(_) => None,
        }
    }

    /// The Python object of this cell (None, bool, int, float, str or bytes).
    fn into_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self {
            Cell::None => Ok(py.None()),
            Cell::Bool(b) => b.into_py_any(py),
            Cell::I64(v) => v.into_py_any(py),
            Cell::U64(v) => v.into_py_any(py),
            Cell::F64(v) => v.into_py_any(py),
            Cell::Str(s) => s.into_py_any(py),
            Cell::Bytes(b) => Ok(PyBytes::new(py, &b).into_any().unbind()),
        }
    }
}

/// `values` mapped through `f`, with `gap` at the rows `missing` marks.
fn masked<T: Copy, U>(values: Vec<T>, missing: &Option<Vec<bool>>, f: impl Fn(T) -> U, gap: U) -> Vec<U>
where
    U: Clone,
{
    values
        .into_iter()
        .enumerate()
        .map(|(i, x)| match missing.as_ref().and_then(|m| m.get(i)) {
            Some(true) => gap.clone(),
            _ => f(x),
        })
        .collect()
}

/// Which columns a read keeps (`fields=`): shell-style wildcards, and a pattern naming an
/// object or array keeps every leaf under it (`imu` keeps `imu.quaternion.0`).
struct Selector {
    patterns: Vec<WildMatch>,
    /// Whether each pattern matched some column.
    hits: Vec<bool>,
}

impl Selector {
    /// A selector keeping the columns any of `patterns` matches.
    fn new(patterns: &[String]) -> Self {
        Selector { patterns: patterns.iter().map(|p| WildMatch::new(p)).collect(), hits: vec![false; patterns.len()] }
    }

    /// Whether column `name` is kept (and note which patterns matched it).
    fn select(&mut self, name: &str) -> bool {
        let mut selected = false;
        for (pattern, hit) in self.patterns.iter().zip(self.hits.iter_mut()) {
            let matches = pattern.matches(name) || name.match_indices('.').any(|(i, _)| pattern.matches(&name[..i]));
            if matches {
                *hit = true;
                selected = true;
            }
        }
        selected
    }
}

/// Rows staged in [`Columns`]' row-major block before they are moved into the columns.
const BLOCK_ROWS: usize = 64;

/// What the hot path needs of a column, kept apart from [`Column`] so that ~200 of them fit
/// in a few cache lines.
#[derive(Clone, Copy)]
struct Hot {
    /// Rows filled: those in the column plus those staged.
    filled: usize,
    /// Staged rows: block rows `start .. start + staged`.
    start: usize,
    staged: usize,
    /// The kind of value that may be staged ([`Kind::Null`]: none, push directly).
    staging: Kind,
}

/// The columns of one read, and the row being filled.
///
/// A read writes ~200 columns per row; pushing each value straight into its column's vector
/// misses the cache on almost every store (too many write streams for the prefetcher). So
/// numeric and bool values are staged in a row-major block (each row's values are written
/// side by side) and moved into the columns every [`BLOCK_ROWS`] rows, one column at a time.
struct Columns {
    cols: Vec<Column>,
    hot: Vec<Hot>,
    /// `BLOCK_ROWS × width` value bits, row-major; column `c` of block row `r` is at
    /// `r * width + c`. Columns created inside a block (`c >= width`) are not staged.
    block: Vec<u64>,
    width: usize,
    /// The first row of the current block.
    block_start: usize,
    /// Rows the read expects in all (a guess, to reserve column memory once), if known.
    expected_rows: Option<usize>,
    by_name: HashMap<String, usize>,
    /// Rows completed.
    row: usize,
    /// Values stored in the current row (a column takes at most one per row).
    written: usize,
    selector: Option<Selector>,
    /// Every leaf name seen (selected or not): a few for messages, and how many.
    seen_sample: Vec<String>,
    seen: usize,
    /// Schema nodes set up so far (capped at [`MAX_NODES`]).
    nodes: usize,
    /// Values dropped because a column of the same name already had one in that row
    /// (dotted names that collide in a foreign log).
    collisions: u64,
}

impl Columns {
    /// No columns yet; `selector` is `fields=` (None: keep every column).
    fn new(selector: Option<Selector>) -> Self {
        Columns {
            cols: Vec::new(),
            hot: Vec::new(),
            block: Vec::new(),
            width: 0,
            block_start: 0,
            expected_rows: None,
            by_name: HashMap::new(),
            row: 0,
            written: 0,
            selector,
            seen_sample: Vec::new(),
            seen: 0,
            nodes: 0,
            collisions: 0,
        }
    }

    /// Count more schema nodes, refusing to go past [`MAX_NODES`].
    fn node(&mut self, count: usize) -> Result<(), String> {
        self.nodes = self.nodes.saturating_add(count);
        if self.nodes > MAX_NODES {
            return Err(format!(
                "its items hold more than {MAX_NODES} values (or its schema claims so); read() decodes records up to \
                 that size: stream this one with items() instead"
            ));
        }
        Ok(())
    }

    /// The column of a leaf called `name` (created with every earlier row missing), or
    /// [`SKIP`] when `fields=` does not select it. Leaves of one name share a column (the
    /// alternatives of a union, say).
    fn register(&mut self, name: String, key: Vec<u32>, kind: Kind) -> Result<usize, String> {
        self.node(1)?;
        let name = if name == TIMESTAMP { format!("{TIMESTAMP}#2") } else { name };
        if let Some(&i) = self.by_name.get(&name) {
            return Ok(i);
        }
        self.seen += 1;
        if self.seen_sample.len() < 12 {
            self.seen_sample.push(name.clone());
        }
        if let Some(selector) = &mut self.selector {
            if !selector.select(&name) {
                self.by_name.insert(name, SKIP);
                return Ok(SKIP);
            }
        }
        let i = self.cols.len();
        self.by_name.insert(name.clone(), i);
        self.cols.push(Column::new(name, key, self.row, kind));
        // Not staged until the next block: the block has no room for it.
        self.hot.push(Hot { filled: self.row, start: 0, staged: 0, staging: Kind::Null });
        Ok(i)
    }

    /// Store one value of the current row in column `col` (never twice in one row).
    #[inline(always)]
    fn push(&mut self, col: usize, leaf: Leaf<'_>) {
        let row = self.row;
        let Some(hot) = self.hot.get_mut(col) else { return };
        if hot.filled != row {
            self.collisions += 1;
            return;
        }
        let bits = match (hot.staging, leaf) {
            (Kind::F64, Leaf::F64(x)) => x.to_bits(),
            (Kind::F32, Leaf::F32(x)) => u64::from(x.to_bits()),
            (Kind::I64, Leaf::I64(x)) => x as u64,
            (Kind::U64, Leaf::U64(x)) => x,
            (Kind::Bool, Leaf::Bool(x)) => u64::from(x),
            _ => {
                self.push_direct(col, leaf);
                return;
            }
        };
        let block_row = row - self.block_start;
        if hot.staged == 0 {
            hot.start = block_row;
        }
        // In range: staging is only on for columns < width, and block_row < BLOCK_ROWS.
        if let Some(slot) = self.block.get_mut(block_row * self.width + col) {
            *slot = bits;
        }
        hot.staged += 1;
        hot.filled += 1;
        self.written += 1;
    }

    /// Store one number (see [`Payload::number`]) of the current row in column `col`.
    #[inline(always)]
    fn push_bits(&mut self, col: usize, kind: Kind, bits: u64) {
        let row = self.row;
        let Some(hot) = self.hot.get_mut(col) else { return };
        if hot.filled != row {
            self.collisions += 1;
            return;
        }
        if hot.staging != kind {
            let leaf = match kind {
                Kind::F64 => Leaf::F64(f64::from_bits(bits)),
                Kind::F32 => Leaf::F32(f32::from_bits(bits as u32)),
                Kind::I64 => Leaf::I64(bits as i64),
                Kind::U64 => Leaf::U64(bits),
                Kind::Bool => Leaf::Bool(bits != 0),
                Kind::Null | Kind::Obj => Leaf::Missing,
            };
            self.push_direct(col, leaf);
            return;
        }
        let block_row = row - self.block_start;
        if hot.staged == 0 {
            hot.start = block_row;
        }
        // In range: staging is only on for columns < width, and block_row < BLOCK_ROWS.
        if let Some(slot) = self.block.get_mut(block_row * self.width + col) {
            *slot = bits;
        }
        hot.staged += 1;
        hot.filled += 1;
        self.written += 1;
    }

    /// The slow path: move the column's staged values in, then push into the column itself.
    #[inline(never)]
    fn push_direct(&mut self, col: usize, leaf: Leaf<'_>) {
        self.flush(col);
        let (Some(column), Some(hot)) = (self.cols.get_mut(col), self.hot.get_mut(col)) else { return };
        column.push(leaf);
        hot.filled = column.len;
        hot.staging = if col < self.width { column.stageable() } else { Kind::Null };
        self.written += 1;
    }

    /// Move column `col`'s staged values from the block into the column.
    fn flush(&mut self, col: usize) {
        let (Some(column), Some(hot)) = (self.cols.get_mut(col), self.hot.get_mut(col)) else { return };
        if hot.staged == 0 {
            return;
        }
        let (block, width) = (&self.block, self.width);
        column
            .extend_bits((hot.start..hot.start + hot.staged).map(|r| block.get(r * width + col).copied().unwrap_or(0)));
        hot.staged = 0;
    }

    /// Move every staged value into the columns and start a new block (wide enough for every
    /// column there is now).
    fn flush_all(&mut self) {
        for col in 0..self.cols.len() {
            self.flush(col);
        }
        self.block_start = self.row;
        self.width = self.cols.len();
        self.block.resize(BLOCK_ROWS * self.width, 0);
        let expected = self.expected_rows;
        for (column, hot) in self.cols.iter_mut().zip(&mut self.hot) {
            if let Some(rows) = expected {
                column.reserve_total(rows);
            }
            hot.staging = column.stageable();
        }
    }

    /// Close the row: columns without a value in it get a missing one.
    fn finish_row(&mut self) {
        if self.written != self.cols.len() {
            let row = self.row;
            for col in 0..self.cols.len() {
                if self.hot.get(col).is_some_and(|h| h.filled == row) {
                    self.push_direct(col, Leaf::Missing);
                }
            }
        }
        self.row += 1;
        self.written = 0;
        if self.row - self.block_start >= BLOCK_ROWS || self.width < self.cols.len() {
            self.flush_all();
        }
    }

    /// Drop what the current row stored (its item did not decode).
    fn abandon_row(&mut self) {
        let row = self.row;
        for col in 0..self.cols.len() {
            self.flush(col);
            if let (Some(column), Some(hot)) = (self.cols.get_mut(col), self.hot.get_mut(col)) {
                column.truncate(row);
                hot.filled = column.len;
            }
        }
        self.written = 0;
    }

    /// Every column with all its values, in schema order.
    fn finish(mut self) -> (Vec<Column>, Self) {
        for col in 0..self.cols.len() {
            self.flush(col);
        }
        let mut cols = std::mem::take(&mut self.cols);
        // Stable: leaves sharing a key keep their first-seen order.
        cols.sort_by(|a, b| a.key.cmp(&b.key));
        (cols, self)
    }
}

// ---------------------------------------------------------------------------------------
// The compiled decoder

/// A scalar schema type, as the decoder reads it.
#[derive(Clone, Copy)]
enum Ty {
    Null,
    Bool,
    Int(u8),
    UInt(u8),
    VarInt,
    VarUInt,
    F32,
    F64,
    Bytes,
    Str,
    /// Timestamps and durations: int64 µs, stored as float seconds.
    Micros,
}

impl Ty {
    /// The storage of a column of this type.
    fn kind(self) -> Kind {
        match self {
            Ty::Null => Kind::Null,
            Ty::Bool => Kind::Bool,
            Ty::Int(_) | Ty::VarInt => Kind::I64,
            Ty::UInt(_) | Ty::VarUInt => Kind::U64,
            Ty::F32 => Kind::F32,
            Ty::F64 | Ty::Micros => Kind::F64,
            Ty::Bytes | Ty::Str => Kind::Obj,
        }
    }
}

/// The item names of an enum (boxed in [`Op`], which they would make three times larger).
struct EnumNames(HashMap<u64, String>);

/// One step of a record's decoder. Objects and fixed arrays are flattened into their
/// parent's list of steps at compile time, so decoding a record is mostly one loop over
/// scalars; arrays and maps grow their items' steps (and columns) the first time an item
/// with that index or key is seen.
enum Op {
    /// One scalar into column `.1` ([`SKIP`]: parsed, not stored).
    Leaf(Ty, usize),
    /// An enum: its integer type, column, and item names (when names were asked for).
    Enum(Ty, usize, Option<Box<EnumNames>>),
    Array(Box<Dynamic>),
    Map(Box<DynMap>),
    /// The steps of each alternative (a null alternative has none: the row's columns stay
    /// missing).
    Union(Vec<Vec<Op>>),
}

/// A variable-length array: its item schema, where its leaves are named and sorted, and the
/// steps of each item index seen so far.
struct Dynamic {
    item: Schema,
    name: String,
    key: Vec<u32>,
    items: Vec<Vec<Op>>,
}

/// A map: its value schema, where its leaves are named and sorted, and the steps of each key
/// seen so far.
struct DynMap {
    item: Schema,
    name: String,
    key: Vec<u32>,
    entries: HashMap<String, Vec<Op>>,
}

/// Settings of one read that shape the decoder.
#[derive(Clone, Copy)]
struct Options {
    enum_names: bool,
}

/// `prefix.name`, or `name` at the top level (column names as `Value::flatten` makes them).
fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// The sort key of a child: the parent's key and the child's position.
fn with_key(key: &[u32], part: usize) -> Vec<u32> {
    let mut key = key.to_vec();
    key.push(u32::try_from(part).unwrap_or(u32::MAX));
    key
}

/// The decoder type of a scalar schema; None for containers (and enums, compiled apart).
fn scalar(schema: &Schema) -> Option<Ty> {
    Some(match schema {
        Schema::Null => Ty::Null,
        Schema::Bool => Ty::Bool,
        Schema::FixedInt(n) => Ty::Int(*n),
        Schema::FixedUInt(n) => Ty::UInt(*n),
        Schema::VarInt => Ty::VarInt,
        Schema::VarUInt => Ty::VarUInt,
        Schema::Float32 => Ty::F32,
        Schema::Float64 => Ty::F64,
        Schema::Bytes => Ty::Bytes,
        Schema::String => Ty::Str,
        Schema::Timestamp | Schema::Duration => Ty::Micros,
        _ => return None,
    })
}

/// Append the decoder steps of `schema`, whose leaves are named under `name`, to `out`.
/// `in_union`: this is an alternative of a union, where a null stores nothing.
fn compile(
    schema: &Schema,
    name: &str,
    key: &[u32],
    in_union: bool,
    cols: &mut Columns,
    options: Options,
    out: &mut Vec<Op>,
) -> Result<(), String> {
    cols.node(1)?;
    match schema {
        Schema::Null if in_union => {}
        Schema::Enum { underlying, items } => {
            let under = scalar(underlying)
                .filter(|ty| matches!(ty, Ty::Int(_) | Ty::UInt(_) | Ty::VarInt | Ty::VarUInt))
                .ok_or_else(|| format!("the enum '{name}' does not have an integer underlying type"))?;
            let names = options.enum_names.then(|| Box::new(EnumNames(items.iter().cloned().collect())));
            let kind = if names.is_some() { Kind::Obj } else { Kind::U64 };
            let col = cols.register(name.to_string(), key.to_vec(), kind)?;
            out.push(Op::Enum(under, col, names));
        }
        Schema::Object(fields) => {
            // Repeated field names (legal in a foreign log) get #2, #3 as in the CSV export.
            let names = unique_names(fields.iter().map(|f| f.name.as_str()));
            for (i, (field, field_name)) in fields.iter().zip(names).enumerate() {
                compile(&field.schema, &join(name, &field_name), &with_key(key, i), false, cols, options, out)?;
            }
        }
        Schema::FixedArray(count, item) => {
            // Checked before unrolling: fixedarray(2^40, {}) must not make 2^40 steps.
            let count = usize::try_from(*count).map_err(|_| "a fixed array is too large".to_string())?;
            cols.node(count)?;
            for i in 0..count {
                compile(item, &join(name, &i.to_string()), &with_key(key, i), false, cols, options, out)?;
            }
        }
        Schema::Array(item) => out.push(Op::Array(Box::new(Dynamic {
            item: (**item).clone(),
            name: name.to_string(),
            key: key.to_vec(),
            items: Vec::new(),
        }))),
        Schema::Map(item) => out.push(Op::Map(Box::new(DynMap {
            item: (**item).clone(),
            name: name.to_string(),
            key: key.to_vec(),
            entries: HashMap::new(),
        }))),
        Schema::Union(alternatives) => {
            let mut steps = Vec::with_capacity(alternatives.len());
            for alternative in alternatives {
                let mut alternative_steps = Vec::new();
                compile(alternative, name, key, true, cols, options, &mut alternative_steps)?;
                steps.push(alternative_steps);
            }
            out.push(Op::Union(steps));
        }
        scalar_schema => {
            let ty = scalar(scalar_schema).ok_or_else(|| format!("unexpected schema type at '{name}'"))?;
            let col = cols.register(name.to_string(), key.to_vec(), ty.kind())?;
            out.push(Op::Leaf(ty, col));
        }
    }
    Ok(())
}

/// Why an item did not decode.
enum DecodeError {
    /// The payload does not match the schema: the item is skipped and counted.
    Bad(Error),
    /// The record is too big to read into columns: the read stops.
    Limit(String),
}

/// A reader error inside a payload: the item does not decode.
impl From<Error> for Box<DecodeError> {
    fn from(e: Error) -> Self {
        Box::new(DecodeError::Bad(e))
    }
}

fn malformed(pos: usize, what: impl Into<String>) -> Box<DecodeError> {
    Box::new(DecodeError::Bad(Error::Malformed { offset: pos as u64, what: what.into() }))
}

/// What [`Payload::number`] read.
enum Number {
    /// A number or bool: the kind of column that stores it, and its bits as staged.
    Bits(Kind, u64),
    /// Not a number (string, bytes, null, odd integer size): use [`Payload::scalar`].
    Other,
    /// The payload ends (or the varuint is bad) here.
    Short,
}

/// One payload being decoded.
struct Payload<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Values left to decode (see `tlog::value::decode`): bounds the work on zero-width items.
    budget: usize,
}

impl<'a> Payload<'a> {
    /// A payload to decode from its start.
    fn new(bytes: &'a [u8]) -> Self {
        Payload { bytes, pos: 0, budget: bytes.len().saturating_add(ZERO_WIDTH_VALUE_ALLOWANCE) }
    }

    /// Bytes not decoded yet.
    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// Count one value against the budget (array items and map entries, which may be empty).
    fn spend(&mut self) -> Result<(), Box<DecodeError>> {
        if self.budget == 0 {
            return Err(malformed(self.pos, "too many values for the payload size"));
        }
        self.budget -= 1;
        Ok(())
    }

    /// An element count from the payload, refused when the bytes left cannot hold it.
    fn count(&mut self) -> Result<usize, Box<DecodeError>> {
        let count = read_varuint(self.bytes, &mut self.pos).map_err(|e| Box::new(DecodeError::Bad(e)))?;
        let count = usize::try_from(count).map_err(|_| malformed(self.pos, "count does not fit in memory"))?;
        if count > self.remaining().saturating_add(ZERO_WIDTH_VALUE_ALLOWANCE).min(self.budget) {
            return Err(Box::new(DecodeError::Bad(Error::Truncated { offset: self.pos as u64 })));
        }
        Ok(count)
    }

    /// `N` bytes at the read position (the hot path: no error value is built here).
    #[inline(always)]
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let end = self.pos.checked_add(N)?;
        let bytes: [u8; N] = self.bytes.get(self.pos..end)?.try_into().ok()?;
        self.pos = end;
        Some(bytes)
    }

    #[inline(always)]
    fn varuint(&mut self) -> Option<u64> {
        // One-byte values are the common case (counts, small enums, union indices).
        match self.bytes.get(self.pos) {
            Some(&byte) if byte < 0x80 => {
                self.pos += 1;
                Some(u64::from(byte))
            }
            _ => self.long_varuint(),
        }
    }

    #[inline(never)]
    fn long_varuint(&mut self) -> Option<u64> {
        read_varuint(self.bytes, &mut self.pos).ok()
    }

    /// A numeric or bool scalar as its column kind and bits (the hot path: one dispatch on
    /// the type, and the caller compares kinds instead of matching again).
    #[inline(always)]
    fn number(&mut self, ty: Ty) -> Number {
        let value = match ty {
            Ty::F64 => self.take::<8>().map(|b| (Kind::F64, u64::from_le_bytes(b))),
            Ty::F32 => self.take::<4>().map(|b| (Kind::F32, u64::from(u32::from_le_bytes(b)))),
            Ty::Bool => self.take::<1>().map(|b| (Kind::Bool, u64::from(b[0] != 0))),
            Ty::Int(1) => self.take::<1>().map(|b| (Kind::I64, i64::from(i8::from_le_bytes(b)) as u64)),
            Ty::Int(2) => self.take::<2>().map(|b| (Kind::I64, i64::from(i16::from_le_bytes(b)) as u64)),
            Ty::Int(4) => self.take::<4>().map(|b| (Kind::I64, i64::from(i32::from_le_bytes(b)) as u64)),
            Ty::Int(8) => self.take::<8>().map(|b| (Kind::I64, u64::from_le_bytes(b))),
            Ty::UInt(1) => self.take::<1>().map(|b| (Kind::U64, u64::from(b[0]))),
            Ty::UInt(2) => self.take::<2>().map(|b| (Kind::U64, u64::from(u16::from_le_bytes(b)))),
            Ty::UInt(4) => self.take::<4>().map(|b| (Kind::U64, u64::from(u32::from_le_bytes(b)))),
            Ty::UInt(8) => self.take::<8>().map(|b| (Kind::U64, u64::from_le_bytes(b))),
            Ty::VarUInt => self.varuint().map(|v| (Kind::U64, v)),
            Ty::VarInt => self.varuint().map(|z| (Kind::I64, (((z >> 1) as i64) ^ -((z & 1) as i64)) as u64)),
            Ty::Micros => self.take::<8>().map(|b| (Kind::F64, micros_to_seconds(i64::from_le_bytes(b)).to_bits())),
            Ty::Null | Ty::Str | Ty::Bytes | Ty::Int(_) | Ty::UInt(_) => return Number::Other,
        };
        match value {
            Some((kind, bits)) => Number::Bits(kind, bits),
            None => Number::Short,
        }
    }

    /// One scalar, or None when the payload does not hold one here ([`Payload::why`] says
    /// why): the hot path builds no error values.
    #[inline(always)]
    fn scalar(&mut self, ty: Ty) -> Option<Leaf<'a>> {
        Some(match ty {
            Ty::Null => Leaf::Missing,
            Ty::Bool => Leaf::Bool(self.take::<1>()?[0] != 0),
            Ty::F32 => Leaf::F32(f32::from_le_bytes(self.take()?)),
            Ty::F64 => Leaf::F64(f64::from_le_bytes(self.take()?)),
            Ty::Int(1) => Leaf::I64(i64::from(i8::from_le_bytes(self.take()?))),
            Ty::Int(2) => Leaf::I64(i64::from(i16::from_le_bytes(self.take()?))),
            Ty::Int(4) => Leaf::I64(i64::from(i32::from_le_bytes(self.take()?))),
            Ty::Int(8) => Leaf::I64(i64::from_le_bytes(self.take()?)),
            Ty::UInt(1) => Leaf::U64(u64::from(self.take::<1>()?[0])),
            Ty::UInt(2) => Leaf::U64(u64::from(u16::from_le_bytes(self.take()?))),
            Ty::UInt(4) => Leaf::U64(u64::from(u32::from_le_bytes(self.take()?))),
            Ty::UInt(8) => Leaf::U64(u64::from_le_bytes(self.take()?)),
            Ty::Int(_) | Ty::UInt(_) => return None,
            Ty::VarInt => {
                let z = self.varuint()?;
                Leaf::I64(((z >> 1) as i64) ^ -((z & 1) as i64))
            }
            Ty::VarUInt => Leaf::U64(self.varuint()?),
            Ty::Bytes => Leaf::Bytes(self.bytes_value()?),
            Ty::Str => Leaf::Str(self.string_value()?),
            Ty::Micros => Leaf::F64(micros_to_seconds(i64::from_le_bytes(self.take()?))),
        })
    }

    #[inline(never)]
    fn bytes_value(&mut self) -> Option<&'a [u8]> {
        read_bytes(self.bytes, &mut self.pos).ok()
    }

    #[inline(never)]
    fn string_value(&mut self) -> Option<&'a str> {
        read_string(self.bytes, &mut self.pos).ok()
    }

    /// An enum's integer, of the underlying type `under`.
    #[inline(never)]
    fn enum_value(&mut self, under: Ty) -> Option<u64> {
        Some(match under {
            Ty::UInt(1) => u64::from(self.take::<1>()?[0]),
            Ty::UInt(2) => u64::from(u16::from_le_bytes(self.take()?)),
            Ty::UInt(4) => u64::from(u32::from_le_bytes(self.take()?)),
            Ty::UInt(8) => u64::from_le_bytes(self.take()?),
            // Signed underlying types are unusual; keep the bit pattern (as dumps do).
            Ty::Int(1) => i64::from(i8::from_le_bytes(self.take()?)) as u64,
            Ty::Int(2) => i64::from(i16::from_le_bytes(self.take()?)) as u64,
            Ty::Int(4) => i64::from(i32::from_le_bytes(self.take()?)) as u64,
            Ty::Int(8) => i64::from_le_bytes(self.take()?) as u64,
            Ty::VarUInt => self.varuint()?,
            Ty::VarInt => {
                let z = self.varuint()?;
                (((z >> 1) as i64) ^ -((z & 1) as i64)) as u64
            }
            _ => return None,
        })
    }

    /// Why [`Payload::scalar`] found no `ty` at the read position: the reader's own error.
    fn why(&self, ty: Ty) -> Box<DecodeError> {
        let mut pos = self.pos;
        let buf = self.bytes;
        let error = match ty {
            Ty::Int(n) | Ty::UInt(n) if !matches!(n, 1 | 2 | 4 | 8) => {
                return malformed(pos, format!("integer of size {n}"));
            }
            Ty::Bytes => read_bytes(buf, &mut pos).err(),
            Ty::Str => read_string(buf, &mut pos).err(),
            Ty::VarInt | Ty::VarUInt => read_varuint(buf, &mut pos).err(),
            _ => None,
        };
        Box::new(DecodeError::Bad(error.unwrap_or(Error::Truncated { offset: pos as u64 })))
    }
}

/// Run decoder steps over the payload, storing into the row's columns.
fn decode(
    ops: &mut [Op],
    payload: &mut Payload<'_>,
    cols: &mut Columns,
    options: Options,
) -> Result<(), Box<DecodeError>> {
    for op in ops {
        if payload.budget == 0 {
            return Err(malformed(payload.pos, "too many values for the payload size"));
        }
        payload.budget -= 1;
        match op {
            Op::Leaf(ty, col) => match payload.number(*ty) {
                Number::Bits(kind, bits) => {
                    if *col != SKIP {
                        cols.push_bits(*col, kind, bits);
                    }
                }
                Number::Other => {
                    let Some(leaf) = payload.scalar(*ty) else { return Err(payload.why(*ty)) };
                    if *col != SKIP {
                        cols.push(*col, leaf);
                    }
                }
                Number::Short => return Err(payload.why(*ty)),
            },
            Op::Enum(ty, col, names) => {
                let Some(raw) = payload.enum_value(*ty) else { return Err(payload.why(*ty)) };
                match names.as_ref().and_then(|names| names.0.get(&raw)) {
                    Some(name) => cols.push(*col, Leaf::Str(name)),
                    None => cols.push(*col, Leaf::U64(raw)),
                }
            }
            Op::Array(array) => {
                let count = payload.count()?;
                while array.items.len() < count {
                    let i = array.items.len();
                    let mut steps = Vec::new();
                    let name = join(&array.name, &i.to_string());
                    compile(&array.item, &name, &with_key(&array.key, i), false, cols, options, &mut steps)
                        .map_err(|e| Box::new(DecodeError::Limit(e)))?;
                    array.items.push(steps);
                }
                for steps in array.items.iter_mut().take(count) {
                    payload.spend()?;
                    decode(steps, payload, cols, options)?;
                }
            }
            Op::Map(map) => {
                let count = payload.count()?;
                for _ in 0..count {
                    payload.spend()?;
                    let entry = read_string(payload.bytes, &mut payload.pos)?;
                    if !map.entries.contains_key(entry) {
                        let index = map.entries.len();
                        let mut steps = Vec::new();
                        compile(
                            &map.item,
                            &join(&map.name, entry),
                            &with_key(&map.key, index),
                            false,
                            cols,
                            options,
                            &mut steps,
                        )
                        .map_err(|e| Box::new(DecodeError::Limit(e)))?;
                        map.entries.insert(entry.to_string(), steps);
                    }
                    if let Some(steps) = map.entries.get_mut(entry) {
                        decode(steps, payload, cols, options)?;
                    }
                }
            }
            Op::Union(alternatives) => {
                let Some(index) = payload.varuint() else { return Err(payload.why(Ty::VarUInt)) };
                let count = alternatives.len();
                let Some(steps) = usize::try_from(index).ok().and_then(|i| alternatives.get_mut(i)) else {
                    return Err(malformed(payload.pos, format!("union index {index} of {count}")));
                };
                decode(steps, payload, cols, options)?;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Reading a record into columns

/// What [`read_columns`] produced.
struct ReadOutput {
    columns: Vec<Column>,
    timestamps_us: Vec<i64>,
    problems: Problems,
    collisions: u64,
    /// `fields=` patterns that matched no column (only checked when some item was read).
    unmatched: Vec<String>,
    seen_sample: Vec<String>,
    seen: usize,
}

/// Decode every item of record `name` in `[from_us, to_us]` into columns (no GIL needed).
fn read_columns(
    reader: &FileReader,
    name: &str,
    from_us: Option<i64>,
    to_us: Option<i64>,
    fields: Option<&[String]>,
    options: Options,
) -> Result<ReadOutput, String> {
    let records = reader.records();
    let mut columns = Columns::new(fields.map(Selector::new));
    let mut plans: HashMap<u64, Option<Vec<Op>>> = HashMap::new();
    let mut problems = Problems::default();
    let mut timestamps_us = Vec::new();
    for record in records.iter().filter(|r| r.name == name) {
        if let Some(error) = &record.schema_error {
            problems.schema_unreadable(record.id, &record.name, record.schema_offset, error);
        }
    }
    let mut first_offset: Option<u64> = None;
    let filter = ItemFilter { record: Some(name.to_string()), from_us, to_us };
    for item in reader.items(filter) {
        let item = match item {
            Ok(item) => item,
            Err(error) => {
                note_read_error(&mut problems, &error);
                continue;
            }
        };
        if let std::collections::hash_map::Entry::Vacant(entry) = plans.entry(item.record_id) {
            let plan = match records.iter().find(|r| r.id == item.record_id).and_then(|r| r.schema.as_ref()) {
                Some(schema) => {
                    let mut steps = Vec::new();
                    compile(schema, "", &[], false, &mut columns, options, &mut steps)
                        .map_err(|e| format!("record '{name}' cannot be read into columns: {e}"))?;
                    Some(steps)
                }
                None => None,
            };
            entry.insert(plan);
        }
        let Some(Some(plan)) = plans.get_mut(&item.record_id) else {
            problems.data_without_readable_schema(item.record_id);
            continue;
        };
        if columns.row == BLOCK_ROWS && to_us.is_none() {
            // Rows per byte of file so far, times the bytes left: reserving the columns once
            // spares the copies of growing them (a guess; capped, and only ever reserved).
            let first = *first_offset.get_or_insert(item.offset);
            let walked = item.offset.saturating_sub(first).max(1);
            let total = reader.len().saturating_sub(first);
            let guess = (BLOCK_ROWS as u64).saturating_mul(total) / walked;
            columns.expected_rows = Some(usize::try_from(guess.min(MAX_RESERVED_ROWS)).unwrap_or(0) + BLOCK_ROWS);
        }
        first_offset.get_or_insert(item.offset);
        let mut payload = Payload::new(&item.data);
        match decode(plan, &mut payload, &mut columns, options).map_err(|e| *e) {
            Ok(()) => {
                columns.finish_row();
                // i64::MIN is numpy's NaT: items without a timestamp stay visible as such.
                timestamps_us.push(item.timestamp_us.unwrap_or(i64::MIN));
            }
            Err(DecodeError::Bad(e)) => {
                columns.abandon_row();
                problems.note(ProblemKind::Undecodable, Some(item.record_id), Some(name), item.offset, || {
                    format!("payload of record '{name}' does not decode: {e}")
                });
            }
            Err(DecodeError::Limit(e)) => return Err(format!("record '{name}' cannot be read into columns: {e}")),
        }
    }
    if plans.is_empty() {
        // No item: the record's fixed columns still come back, empty, with their dtypes.
        if let Some(schema) = records.iter().find(|r| r.name == name).and_then(|r| r.schema.as_ref()) {
            compile(schema, "", &[], false, &mut columns, options, &mut Vec::new())
                .map_err(|e| format!("record '{name}' cannot be read into columns: {e}"))?;
        }
    }
    let unmatched = match &columns.selector {
        Some(selector) if columns.row > 0 => fields
            .unwrap_or(&[])
            .iter()
            .zip(&selector.hits)
            .filter(|(_, hit)| !**hit)
            .map(|(pattern, _)| pattern.clone())
            .collect(),
        _ => Vec::new(),
    };
    let (cols, columns) = columns.finish();
    Ok(ReadOutput {
        columns: cols,
        timestamps_us,
        problems,
        collisions: columns.collisions,
        unmatched,
        seen_sample: columns.seen_sample,
        seen: columns.seen,
    })
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
                note_read_error(&mut problems, &error);
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
            if record.is_none_or(|i| records[i].name != tlog::realtime::STATS_RECORD) {
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
            IndexState::Absent { closed: merged.iter().any(|r| r.0 == tlog::realtime::STATS_RECORD && r.1 > 0) }
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
            Some(schema) => Ok(tlog::export::record_json_schema(name, schema).to_string()),
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
        let record = py.detach(|| reader.record(name));
        let Some(record) = record else { return Err(unknown_record(&reader, name)) };
        if record.schema.is_none() {
            return Err(TlogError::new_err(format!(
                "the schema of record '{name}' (block at byte {}) does not parse, so its items cannot be decoded \
                 into columns: {}; read the raw payloads with items('{name}', raw=True)",
                record.schema_offset,
                record.schema_error.as_deref().unwrap_or("unknown error")
            )));
        }
        let options = Options { enum_names };
        let output = py
            .detach(|| read_columns(&reader, name, from_us, to_us, fields.as_deref(), options))
            .map_err(TlogError::new_err)?;
        if !output.unmatched.is_empty() {
            let more = output.seen.saturating_sub(output.seen_sample.len());
            let tail = if more > 0 { format!(", … ({more} more)") } else { String::new() };
            return Err(PyKeyError::new_err(format!(
                "no column of record '{name}' matches {}; its columns are {}{tail}",
                output.unmatched.iter().map(|p| format!("'{p}'")).collect::<Vec<_>>().join(", "),
                output.seen_sample.join(", ")
            )));
        }
        let mut warnings: Vec<String> = output.problems.list().iter().map(ToString::to_string).collect();
        if output.collisions > 0 {
            warnings.push(format!(
                "{} values of record '{name}' were dropped: their flattened names collide with another field's",
                output.collisions
            ));
        }
        let mut names = Vec::with_capacity(output.columns.len());
        let mut arrays = Vec::with_capacity(output.columns.len());
        for column in output.columns {
            names.push(column.name.clone());
            arrays.push(column.into_numpy(py)?);
        }
        let seconds: Vec<f64> = output
            .timestamps_us
            .iter()
            .map(|&us| if us == i64::MIN { f64::NAN } else { micros_to_seconds(us) })
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
                        note_read_error(problems, &error);
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
