//! A record of a log read into typed columns: one buffer of `f64`, `f32`, `i64`, `u64`,
//! `bool` or objects (strings, bytes, enum names, mixed values) per flattened leaf such as
//! `servo.0.position`, one row per item, with the timestamps and the damage met.
//!
//! What it is for: turning a million-item record into a table in about a second, for the
//! Python package's `rtloop.tlog.Log.read` (which hands the buffers to numpy as they are)
//! and any other tool that wants columns rather than one [`Value`](crate::value::Value)
//! tree per item. Payloads are decoded straight into the column buffers by a decoder
//! compiled once per record from its schema: no allocation per value (strings and bytes
//! aside), no tree per item. [`read`] gives exactly what [`FileReader::items`],
//! [`FileReader::decode_item`] and [`Value::flatten`](crate::value::Value::flatten) give,
//! laid out as columns — but where one item has two values under one name (a map key
//! repeated, or a dotted name colliding with a nested one in a foreign log): `flatten`
//! keeps both (`name#2`), a column keeps the first and counts the others in
//! [`Columns::collisions`].
//!
//! **Columns.** Names are those of `rtloop log export --csv`: object fields by name, array
//! items by index, map entries by key, unions transparent, a repeated field name `name#2`;
//! a record field called `timestamp` becomes `timestamp#2` (the timestamps are apart, in
//! [`Columns::timestamps_us`]). Columns come in schema order (`servo.0.*` before `servo.1.*`
//! whatever order they first appeared in). A column's storage is its schema type's
//! ([`ColumnData`]); one that meets a value of another type (the alternatives of a union
//! sharing a name) widens: numbers to `F64`, anything else to `Obj` (where numbers already
//! widened to floats stay floats, and bools among floats are 0 and 1). Timestamps and
//! durations are float seconds; enums are their integer (`U64`), or their item name when
//! [`ColumnOptions::enum_names`] asks for it. A row without a value in a column is NaN in
//! float columns, [`Cell::None`] in object columns, and marked in [`Column::missing`] for
//! `bool`, `i64` and `u64` columns.
//!
//! **Damage.** A log cut short or with corrupt blocks is still read: every complete item
//! comes back and the damage is counted in [`Columns::problems`] (with byte offsets), as are
//! items whose payload does not decode against the schema (skipped whole: a row is all of an
//! item or nothing). Only what makes the whole read impossible is an error
//! ([`ColumnsError`]): no such record, a schema that does not parse, a record too large or
//! of a shape columns cannot hold, `fields` that match no column.
//!
//! What it must never do: panic on any input (every count read from the file is checked
//! against the bytes that remain before it drives a loop or an allocation, every index is
//! checked), allocate without bound on a hostile size (`fixedarray(2^40, …)` or a payload
//! claiming 2^60 items is refused before anything is reserved; the values a record may set
//! up are capped at [`MAX_NODES`]; reserving ahead is a capped guess that may fail without
//! harm), or touch anything but the reader it is given (no files of its own, no printing).
//! Memory is that of the table asked for: columns × rows — or of one chunk of rows, read
//! with [`read_chunks`] or a [`ColumnBuilder`] (what the Parquet export writes a row group
//! at a time with; chunks concatenated are the whole read).

use std::collections::HashMap;
use std::fmt;

use wildmatch::WildMatch;

use crate::export::note_read_error;
use crate::format::{read_bytes, read_string, read_varuint, TlogError as Error};
use crate::reader::{FileReader, ItemFilter};
use crate::schema::Schema;
use crate::survey::{ProblemKind, Problems};
use crate::value::{micros_to_seconds, unique_names};

/// Values (leaves, objects, array items) one read may set up per record: a hostile schema
/// (`fixedarray(2^40, …)`) or payload must not make the decoder allocate without bound.
/// rtloop's `cycle` record has about 230.
pub const MAX_NODES: usize = 1_000_000;

/// Values with a zero-byte encoding (nulls, empty objects) one payload may contain, on top
/// of one value per byte (as `rtloop_tlog::value::decode` allows).
const ZERO_WIDTH_VALUE_ALLOWANCE: usize = 1 << 16;

/// Most rows a read reserves column memory for before it has seen them.
const MAX_RESERVED_ROWS: u64 = 1 << 26;

/// The name the timestamps go by beside the columns: a record field of that name becomes
/// `timestamp#2`.
pub const TIMESTAMP: &str = "timestamp";

/// [`Columns::timestamps_us`] of an item without a timestamp (numpy's `NaT`).
pub const NO_TIMESTAMP: i64 = i64::MIN;

/// Marks a leaf whose column was not selected (`fields`): its bytes are parsed and skipped.
const SKIP: usize = usize::MAX;

// ---------------------------------------------------------------------------------------
// The API

/// What [`read`] reads, beside the record's name. The default reads every item and every
/// column, enums as integers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnOptions {
    /// Only items stamped at or after this (µs since the epoch); items without a timestamp
    /// are left out when either bound is set (as [`ItemFilter`]).
    pub from_us: Option<i64>,
    /// Only items stamped at or before this (µs since the epoch).
    pub to_us: Option<i64>,
    /// Only the columns these shell-style wildcards match (`servo.*.position`); a pattern
    /// naming an object or array keeps every leaf under it (`imu` keeps `imu.quaternion.0`).
    /// `None` keeps every column. Every pattern must match some column once an item was read
    /// ([`ColumnsError::NoMatch`]).
    pub fields: Option<Vec<String>>,
    /// Enums as their item name (an `Obj` column of strings; a value the schema does not
    /// name stays its integer) rather than their integer (`U64`).
    pub enum_names: bool,
    /// Mark the missing rows of float columns in [`Column::missing`] too (they hold NaN
    /// either way), so that a NaN the log holds and a value the row lacks can be told apart:
    /// what a table with nulls (Parquet) needs, and numpy does not.
    pub mask_floats: bool,
}

/// A record read into columns.
#[derive(Debug, Clone, PartialEq)]
pub struct Columns {
    /// One per flattened leaf (selected by [`ColumnOptions::fields`]), in schema order; each
    /// holds one value per row. A record without items still has the columns its schema
    /// fixes (no arrays or maps), empty, with their types.
    pub columns: Vec<Column>,
    /// One per row: the item's timestamp in µs since the epoch, [`NO_TIMESTAMP`] for an item
    /// without one.
    pub timestamps_us: Vec<i64>,
    /// One per row: the byte offset of the item's data block in the log (where to look, or
    /// what to name in a message about that row).
    pub item_offsets: Vec<u64>,
    /// What was met and skipped: corrupt blocks, the cut at the end, a schema that does not
    /// parse (another block of the same name), items that do not decode — counted per kind
    /// with the byte offsets of the first and last.
    pub problems: Problems,
    /// Values dropped because a column of the same name already had one in that row: dotted
    /// names that collide in a foreign log (a field `a.b` beside an object `a` with a field
    /// `b`), where [`Value::flatten`](crate::value::Value::flatten) says `a.b#2`.
    pub collisions: u64,
}

impl Columns {
    /// Rows read (items that decoded).
    pub fn rows(&self) -> usize {
        self.timestamps_us.len()
    }

    /// The column called `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }
}

/// One column: a flattened leaf name, and one value per row.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    pub data: ColumnData,
    /// Which rows have no value, for `Bool`, `I64` and `U64` data (whose missing rows hold
    /// `false` or 0), and for `F32` and `F64` data when [`ColumnOptions::mask_floats`] asks
    /// (their missing rows are NaN); `None` when every row has one, and always `None` for
    /// `Obj` and `Null` data (whose missing rows are [`Cell::None`], or all of them).
    pub missing: Option<Vec<bool>>,
}

/// The values of a column, in the storage of its type.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnData {
    /// A column that never had a value (a null field, an alternative never taken since it
    /// widened to nothing): this many rows, all missing.
    Null(usize),
    Bool(Vec<bool>),
    I64(Vec<i64>),
    U64(Vec<u64>),
    F32(Vec<f32>),
    /// Floats, timestamps and durations (seconds), and numbers of mixed types.
    F64(Vec<f64>),
    /// Strings, bytes, enum names, and values of mixed types.
    Obj(Vec<Cell>),
}

/// One value of an object column (strings, bytes, enum names, mixed types), or of any
/// column through [`Column::cell`].
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// No value in this row.
    None,
    Bool(bool),
    I64(i64),
    U64(u64),
    /// Floats of either width (an `f32` widens exactly).
    F64(f64),
    Str(String),
    Bytes(Vec<u8>),
}

impl Column {
    /// Rows in the column (the same for every column of a read).
    pub fn len(&self) -> usize {
        match &self.data {
            ColumnData::Null(rows) => *rows,
            ColumnData::Bool(v) => v.len(),
            ColumnData::I64(v) => v.len(),
            ColumnData::U64(v) => v.len(),
            ColumnData::F32(v) => v.len(),
            ColumnData::F64(v) => v.len(),
            ColumnData::Obj(v) => v.len(),
        }
    }

    /// True for a column of no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when `row` has no value in [`Column::missing`] (NaN floats and [`Cell::None`]
    /// are not counted here: those kinds keep no mask).
    fn masked(&self, row: usize) -> bool {
        self.missing.as_ref().and_then(|m| m.get(row)).copied().unwrap_or(false)
    }

    /// The value at `row` as a [`Cell`] ([`Cell::None`] for a missing one, a NaN float as
    /// stored); `None` past the end.
    pub fn cell(&self, row: usize) -> Option<Cell> {
        if row >= self.len() {
            return None;
        }
        if self.masked(row) {
            return Some(Cell::None);
        }
        Some(match &self.data {
            ColumnData::Null(_) => Cell::None,
            ColumnData::Bool(v) => Cell::Bool(*v.get(row)?),
            ColumnData::I64(v) => Cell::I64(*v.get(row)?),
            ColumnData::U64(v) => Cell::U64(*v.get(row)?),
            ColumnData::F32(v) => Cell::F64(f64::from(*v.get(row)?)),
            ColumnData::F64(v) => Cell::F64(*v.get(row)?),
            ColumnData::Obj(v) => v.get(row)?.clone(),
        })
    }

    /// Every row as a float: NaN for missing rows and for values that are not numbers
    /// (strings, bytes); bools are 0 and 1. What a table of floats (numpy `float64`) holds.
    pub fn into_f64(self) -> Vec<f64> {
        let missing = self.missing;
        match self.data {
            ColumnData::Null(rows) => vec![f64::NAN; rows],
            ColumnData::F64(v) => v,
            ColumnData::F32(v) => v.into_iter().map(f64::from).collect(),
            ColumnData::I64(v) => masked(v, &missing, |x| x as f64, f64::NAN),
            ColumnData::U64(v) => masked(v, &missing, |x| x as f64, f64::NAN),
            ColumnData::Bool(v) => masked(v, &missing, |x| f64::from(u8::from(x)), f64::NAN),
            ColumnData::Obj(v) => v.iter().map(|c| c.as_f64().unwrap_or(f64::NAN)).collect(),
        }
    }
}

impl Cell {
    /// The cell as a float (bools 0 and 1); None for missing values and non-numbers.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Cell::Bool(b) => Some(f64::from(u8::from(*b))),
            Cell::I64(v) => Some(*v as f64),
            Cell::U64(v) => Some(*v as f64),
            Cell::F64(v) => Some(*v),
            Cell::None | Cell::Str(_) | Cell::Bytes(_) => None,
        }
    }
}

/// Why a record cannot be read into columns at all. (Damage in the log is not an error:
/// see [`Columns::problems`].) `Display` gives one sentence without a trailing period.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ColumnsError {
    /// The log has no schema block for a record of this name.
    NoRecord { record: String },
    /// The record's schema (the block at `offset`) does not parse, so its items cannot be
    /// decoded; `error` says why. Their raw payloads can still be read from the reader.
    SchemaUnreadable { record: String, offset: u64, error: String },
    /// The record's items hold more than `limit` values ([`MAX_NODES`]), or its schema
    /// claims so: read it item by item instead.
    TooLarge { record: String, limit: usize },
    /// The schema has a shape columns cannot hold (an enum over something other than an
    /// integer, a fixed array longer than memory); `what` says which.
    Unsupported { record: String, what: String },
    /// Some [`ColumnOptions::fields`] patterns (`patterns`) match no column of the record.
    /// `sample` names a few of its columns, `columns` counts them all.
    NoMatch { record: String, patterns: Vec<String>, sample: Vec<String>, columns: usize },
}

impl fmt::Display for ColumnsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColumnsError::NoRecord { record } => write!(f, "the log has no record '{record}'"),
            ColumnsError::SchemaUnreadable { record, offset, error } => write!(
                f,
                "the schema of record '{record}' (block at byte {offset}) does not parse, so its items cannot be \
                 decoded into columns: {error}"
            ),
            ColumnsError::TooLarge { record, limit } => write!(
                f,
                "record '{record}' cannot be read into columns: its items hold more than {limit} values (or its \
                 schema claims so); read it item by item instead"
            ),
            ColumnsError::Unsupported { record, what } => {
                write!(f, "record '{record}' cannot be read into columns: {what}")
            }
            ColumnsError::NoMatch { record, patterns, sample, columns } => {
                let more = columns.saturating_sub(sample.len());
                let tail = if more > 0 { format!(", … ({more} more)") } else { String::new() };
                write!(
                    f,
                    "no column of record '{record}' matches {}; its columns are {}{tail}",
                    patterns.iter().map(|p| format!("'{p}'")).collect::<Vec<_>>().join(", "),
                    sample.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for ColumnsError {}

/// Why the decoder of a record cannot be built (see [`ColumnsError`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Refusal {
    /// More than [`MAX_NODES`] values.
    TooLarge,
    /// A shape columns cannot hold.
    Unsupported(String),
}

impl Refusal {
    fn for_record(self, record: &str) -> ColumnsError {
        let record = record.to_string();
        match self {
            Refusal::TooLarge => ColumnsError::TooLarge { record, limit: MAX_NODES },
            Refusal::Unsupported(what) => ColumnsError::Unsupported { record, what },
        }
    }
}

// ---------------------------------------------------------------------------------------
// Column buffers

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
/// [`Table`]'s block are not here yet (see [`Table::push`]).
struct Buffer {
    name: String,
    /// Where the leaf sits in the schema (field index, array index, …): columns are returned
    /// in this order, so `servo.0.*` precede `servo.1.*` whatever order they first appeared in.
    key: Vec<u32>,
    data: Data,
    /// Rows in `data` (missing ones included).
    len: usize,
    /// Which rows have no value, for storages without NaN, and for floats when
    /// `mask_floats` (created on the first such row).
    missing: Option<Vec<bool>>,
    /// Floats keep a mask of their missing rows too ([`ColumnOptions::mask_floats`]).
    mask_floats: bool,
}

impl Buffer {
    /// A column of `kind` (the schema's); `rows` earlier rows without a value in it.
    fn new(name: String, key: Vec<u32>, rows: usize, kind: Kind, mask_floats: bool) -> Self {
        let mut column = Buffer { name, key, data: Data::Null, len: rows, missing: None, mask_floats };
        // Typed from the start, so that a read of no rows still has the schema's types.
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
    /// while no row is missing (a missing row needs the mask, kept by [`Buffer::push`]).
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

    /// Append staged values (bits of the column's own [`Buffer::stageable`] kind).
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
                self.mask_floats
            }
            Data::F32(v) => {
                v.push(f32::NAN);
                self.mask_floats
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
        if self.mask_floats && matches!(target, Kind::F64 | Kind::F32) {
            // The rows missing before are missing still (the mask of an integer column
            // marks the very rows its conversion made NaN).
            self.missing = if all_missing && len > 0 { Some(vec![true; len]) } else { missing };
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

    /// The rows filled so far as a finished column (as [`read`] returns it), leaving this
    /// one empty, of the same storage, for the next chunk.
    fn take(&mut self) -> Column {
        let kind = self.kind();
        let len = std::mem::take(&mut self.len);
        let missing = self.missing.take();
        let data = match std::mem::replace(&mut self.data, Data::Null) {
            Data::Null => ColumnData::Null(len),
            Data::Bool(v) => ColumnData::Bool(v),
            Data::I64(v) => ColumnData::I64(v),
            Data::U64(v) => ColumnData::U64(v),
            Data::F32(v) => ColumnData::F32(v),
            Data::F64(v) => ColumnData::F64(v),
            Data::Obj(v) => ColumnData::Obj(v),
        };
        // No rows: an empty vector of the same kind, no mask.
        self.convert(kind);
        Column { name: self.name.clone(), data, missing }
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

/// Which columns a read keeps (`fields`): shell-style wildcards, and a pattern naming an
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

/// Rows staged in [`Table`]'s row-major block before they are moved into the columns.
const BLOCK_ROWS: usize = 64;

/// Columns staged in the block (the first ones; any further column is pushed directly):
/// keeps the block at 2 MiB however many columns a hostile schema sets up, where
/// [`MAX_NODES`] columns would make it 512 MiB. rtloop's `cycle` record has about 230.
const MAX_STAGED_COLUMNS: usize = 4096;

/// What the hot path needs of a column, kept apart from [`Buffer`] so that ~200 of them fit
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
struct Table {
    cols: Vec<Buffer>,
    hot: Vec<Hot>,
    /// `BLOCK_ROWS × width` value bits, row-major; column `c` of block row `r` is at
    /// `r * width + c`. Columns created inside a block (`c >= width`), and any past
    /// [`MAX_STAGED_COLUMNS`], are not staged.
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
    /// Floats keep a mask of their missing rows ([`ColumnOptions::mask_floats`]).
    mask_floats: bool,
}

impl Table {
    /// No columns yet; `selector` is `fields` (None: keep every column).
    fn new(selector: Option<Selector>, mask_floats: bool) -> Self {
        Table {
            mask_floats,
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
    fn node(&mut self, count: usize) -> Result<(), Refusal> {
        self.nodes = self.nodes.saturating_add(count);
        if self.nodes > MAX_NODES {
            return Err(Refusal::TooLarge);
        }
        Ok(())
    }

    /// The column of a leaf called `name` (created with every earlier row missing), or
    /// [`SKIP`] when `fields` does not select it. Leaves of one name share a column (the
    /// alternatives of a union, say).
    fn register(&mut self, name: String, key: Vec<u32>, kind: Kind) -> Result<usize, Refusal> {
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
        self.cols.push(Buffer::new(name, key, self.row, kind, self.mask_floats));
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
        self.stage(col, row, bits);
    }

    /// Put `bits` (the column's staging kind) in the row block for column `col`, row `row`.
    #[inline(always)]
    fn stage(&mut self, col: usize, row: usize, bits: u64) {
        let block_row = row - self.block_start;
        let Some(hot) = self.hot.get_mut(col) else { return };
        if hot.staged == 0 {
            hot.start = block_row;
        }
        hot.staged += 1;
        hot.filled += 1;
        // In range: staging is only on for columns < width, and block_row < BLOCK_ROWS.
        if let Some(slot) = self.block.get_mut(block_row * self.width + col) {
            *slot = bits;
        }
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
        self.stage(col, row, bits);
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
        self.width = self.cols.len().min(MAX_STAGED_COLUMNS);
        self.block.resize(BLOCK_ROWS * self.width, 0);
        let (expected, width) = (self.expected_rows, self.width);
        for (col, (column, hot)) in self.cols.iter_mut().zip(&mut self.hot).enumerate() {
            if let Some(rows) = expected {
                column.reserve_total(rows);
            }
            hot.staging = if col < width { column.stageable() } else { Kind::Null };
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
        if self.row - self.block_start >= BLOCK_ROWS || self.width < self.cols.len().min(MAX_STAGED_COLUMNS) {
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

    /// Every column with the rows completed so far, in schema order; the table keeps its
    /// columns (empty, with their storage) and starts again at row 0. Called between rows.
    fn take(&mut self) -> Vec<Column> {
        for col in 0..self.cols.len() {
            self.flush(col);
        }
        let mut order: Vec<usize> = (0..self.cols.len()).collect();
        // Stable: leaves sharing a key keep their first-seen order.
        order.sort_by(|&a, &b| {
            let key = |i: usize| self.cols.get(i).map(|c| c.key.as_slice());
            key(a).cmp(&key(b))
        });
        let columns = order.iter().filter_map(|&i| self.cols.get_mut(i).map(Buffer::take)).collect();
        self.row = 0;
        self.block_start = 0;
        self.written = 0;
        self.expected_rows = None;
        let width = self.width;
        for (col, (column, hot)) in self.cols.iter().zip(&mut self.hot).enumerate() {
            *hot = Hot {
                filled: 0,
                start: 0,
                staged: 0,
                staging: if col < width { column.stageable() } else { Kind::Null },
            };
        }
        columns
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
    cols: &mut Table,
    options: Options,
    out: &mut Vec<Op>,
) -> Result<(), Refusal> {
    cols.node(1)?;
    match schema {
        Schema::Null if in_union => {}
        Schema::Enum { underlying, items } => {
            let under = scalar(underlying)
                .filter(|ty| matches!(ty, Ty::Int(_) | Ty::UInt(_) | Ty::VarInt | Ty::VarUInt))
                .ok_or_else(|| {
                    Refusal::Unsupported(format!("the enum '{name}' does not have an integer underlying type"))
                })?;
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
            let count =
                usize::try_from(*count).map_err(|_| Refusal::Unsupported("a fixed array is too large".to_string()))?;
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
            let ty = scalar(scalar_schema)
                .ok_or_else(|| Refusal::Unsupported(format!("unexpected schema type at '{name}'")))?;
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
    Limit(Refusal),
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
    /// Values left to decode (see `rtloop_tlog::value::decode`): bounds the work on zero-width items.
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
    cols: &mut Table,
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

/// Builds one record's columns from items handed to it, a chunk of rows at a time: what
/// [`read`] and [`read_chunks`] walk a log with, and what a caller that walks the log itself
/// (one pass feeding several records, as the Parquet export does) uses directly.
///
/// Feed it items with [`push`](Self::push) (items of other records are ignored) and reader
/// errors with [`note_read_error`](Self::note_read_error); [`take`](Self::take) returns the
/// rows completed so far and starts the next chunk, with the columns, their storage and the
/// decoder kept. Memory is that of the rows not yet taken. Chunks concatenated are what one
/// [`read`] gives (a column that first appears in a later chunk has no rows in the earlier
/// ones; one that widened in a later chunk has its earlier rows in the narrower storage).
pub struct ColumnBuilder {
    name: String,
    /// The log's records of this name (a log may register a name twice).
    records: Vec<crate::reader::RecordInfo>,
    options: Options,
    fields: Option<Vec<String>>,
    table: Table,
    /// The decoder of each record id met (None: its schema does not parse).
    plans: HashMap<u64, Option<Vec<Op>>>,
    problems: Problems,
    timestamps_us: Vec<i64>,
    item_offsets: Vec<u64>,
    /// Collisions already handed out with earlier chunks.
    collisions_taken: u64,
    /// Offset of the chunk's first item, for the guess of how many rows to reserve.
    chunk_first_offset: Option<u64>,
    /// Reserve column memory ahead (not when the read stops at a time bound).
    reserve: bool,
    /// Most rows a chunk is expected to hold (the caller's chunk size): caps the reservation.
    chunk_rows: usize,
    /// Most values (rows × columns) a chunk is expected to hold: caps the reservation too.
    chunk_values: usize,
    file_len: u64,
    /// Rows decoded in all chunks.
    rows_total: u64,
}

impl ColumnBuilder {
    /// A builder of record `record` of `reader`'s columns. Errors: no such record, or its
    /// (first) schema does not parse; other schemas of the same name that do not parse are
    /// problems counted in the first chunk.
    pub fn new(reader: &FileReader, record: &str, options: &ColumnOptions) -> Result<Self, ColumnsError> {
        let name = record;
        let Some(info) = reader.record(name) else {
            return Err(ColumnsError::NoRecord { record: name.to_string() });
        };
        if info.schema.is_none() {
            return Err(ColumnsError::SchemaUnreadable {
                record: name.to_string(),
                offset: info.schema_offset,
                error: info.schema_error.unwrap_or_else(|| "unknown error".to_string()),
            });
        }
        let records: Vec<_> = reader.records().into_iter().filter(|r| r.name == name).collect();
        let mut problems = Problems::default();
        for record in &records {
            if let Some(error) = &record.schema_error {
                problems.schema_unreadable(record.id, &record.name, record.schema_offset, error);
            }
        }
        let fields = options.fields.clone();
        Ok(ColumnBuilder {
            name: name.to_string(),
            records,
            options: Options { enum_names: options.enum_names },
            table: Table::new(fields.as_deref().map(Selector::new), options.mask_floats),
            fields,
            plans: HashMap::new(),
            problems,
            timestamps_us: Vec::new(),
            item_offsets: Vec::new(),
            collisions_taken: 0,
            chunk_first_offset: None,
            reserve: options.to_us.is_none(),
            chunk_rows: usize::MAX,
            chunk_values: usize::MAX,
            file_len: reader.len(),
            rows_total: 0,
        })
    }

    /// Expect chunks of about `rows` rows: column memory is reserved for no more.
    pub fn with_chunk_rows(mut self, rows: usize) -> Self {
        self.chunk_rows = rows.max(1);
        self
    }

    /// Expect chunks of about `values` values (rows × columns): column memory is reserved
    /// for no more.
    pub fn with_chunk_values(mut self, values: usize) -> Self {
        self.chunk_values = values.max(1);
        self
    }

    /// The record's name.
    pub fn record(&self) -> &str {
        &self.name
    }

    /// The id of the record (the first, when the log registers its name twice).
    pub fn record_id(&self) -> Option<u64> {
        self.records.first().map(|r| r.id)
    }

    /// Whether items of record id `id` are this record's.
    pub fn wants(&self, id: u64) -> bool {
        self.records.iter().any(|r| r.id == id)
    }

    /// Rows completed and not taken yet.
    pub fn rows(&self) -> usize {
        self.table.row
    }

    /// Columns so far (a record with arrays or maps grows them as items show new indices
    /// and keys).
    pub fn columns(&self) -> usize {
        self.table.cols.len()
    }

    /// Count a reader error (a corrupt block, or the cut at the end) with the damage.
    pub fn note_read_error(&mut self, error: &Error) {
        note_read_error(&mut self.problems, error);
    }

    /// Decode one item into the next row (an item of another record is ignored). An item
    /// that does not decode is counted in the problems and makes no row; the only errors
    /// are those that make the whole read impossible (a record too large for columns).
    pub fn push(&mut self, item: &crate::reader::Item) -> Result<(), ColumnsError> {
        if !self.wants(item.record_id) {
            return Ok(());
        }
        let name = self.name.as_str();
        if let std::collections::hash_map::Entry::Vacant(entry) = self.plans.entry(item.record_id) {
            let plan = match self.records.iter().find(|r| r.id == item.record_id).and_then(|r| r.schema.as_ref()) {
                Some(schema) => {
                    let mut steps = Vec::new();
                    compile(schema, "", &[], false, &mut self.table, self.options, &mut steps)
                        .map_err(|e| e.for_record(name))?;
                    Some(steps)
                }
                None => None,
            };
            entry.insert(plan);
        }
        let Some(Some(plan)) = self.plans.get_mut(&item.record_id) else {
            if let Some(record) = self.records.iter().find(|r| r.id == item.record_id) {
                // Noted again in case an earlier chunk took the first note away.
                let what = record.schema_error.as_deref().unwrap_or("unknown error");
                self.problems.schema_unreadable(record.id, &record.name, record.schema_offset, what);
            }
            self.problems.data_without_readable_schema(item.record_id);
            return Ok(());
        };
        let columns = &mut self.table;
        if columns.row == BLOCK_ROWS && self.reserve {
            // Rows per byte of file so far, times the bytes left: reserving the columns once
            // spares the copies of growing them (a guess; capped, and only ever reserved).
            let first = *self.chunk_first_offset.get_or_insert(item.offset);
            let walked = item.offset.saturating_sub(first).max(1);
            let total = self.file_len.saturating_sub(first);
            let guess = (BLOCK_ROWS as u64).saturating_mul(total) / walked;
            let chunk_rows = self.chunk_rows.min(self.chunk_values / columns.cols.len().max(1));
            let cap = MAX_RESERVED_ROWS.min(u64::try_from(chunk_rows).unwrap_or(u64::MAX));
            columns.expected_rows = Some(usize::try_from(guess.min(cap)).unwrap_or(0) + BLOCK_ROWS);
        }
        self.chunk_first_offset.get_or_insert(item.offset);
        let mut payload = Payload::new(&item.data);
        match decode(plan, &mut payload, columns, self.options).map_err(|e| *e) {
            Ok(()) => {
                columns.finish_row();
                // Items without a timestamp stay visible as such (numpy's NaT).
                self.timestamps_us.push(item.timestamp_us.unwrap_or(NO_TIMESTAMP));
                self.item_offsets.push(item.offset);
                self.rows_total += 1;
            }
            Err(DecodeError::Bad(e)) => {
                columns.abandon_row();
                self.problems.note(ProblemKind::Undecodable, Some(item.record_id), Some(name), item.offset, || {
                    format!("payload of record '{name}' does not decode: {e}")
                });
            }
            Err(DecodeError::Limit(e)) => return Err(e.for_record(name)),
        }
        Ok(())
    }

    /// The rows completed so far, with the problems and collisions met since the last
    /// chunk; the next chunk starts empty. Before any item was pushed the chunk still has
    /// the columns the record's schema fixes (no arrays or maps), empty, with their types.
    pub fn take(&mut self) -> Result<Columns, ColumnsError> {
        if self.plans.is_empty() && self.table.cols.is_empty() {
            // No item: the record's fixed columns still come back, empty, with their types.
            if let Some(schema) = self.records.first().and_then(|r| r.schema.as_ref()) {
                compile(schema, "", &[], false, &mut self.table, self.options, &mut Vec::new())
                    .map_err(|e| e.for_record(&self.name))?;
            }
        }
        let collisions = self.table.collisions - self.collisions_taken;
        self.collisions_taken = self.table.collisions;
        self.chunk_first_offset = None;
        Ok(Columns {
            columns: self.table.take(),
            timestamps_us: std::mem::take(&mut self.timestamps_us),
            item_offsets: std::mem::take(&mut self.item_offsets),
            problems: std::mem::take(&mut self.problems),
            collisions,
        })
    }

    /// Whether the problems or collisions met since the last chunk are worth a chunk of
    /// their own (at the end of a read, with no rows left).
    pub fn has_news(&self) -> bool {
        !self.problems.is_empty() || self.table.collisions != self.collisions_taken
    }

    /// The last chunk ([`take`](Self::take)), after checking that every
    /// [`ColumnOptions::fields`] pattern matched a column once an item was read.
    pub fn finish(&mut self) -> Result<Columns, ColumnsError> {
        let unmatched: Vec<String> = match (&self.table.selector, &self.fields) {
            (Some(selector), Some(fields)) if self.rows_total > 0 => fields
                .iter()
                .zip(&selector.hits)
                .filter(|(_, hit)| !**hit)
                .map(|(pattern, _)| pattern.clone())
                .collect(),
            _ => Vec::new(),
        };
        if !unmatched.is_empty() {
            return Err(ColumnsError::NoMatch {
                record: self.name.clone(),
                patterns: unmatched,
                sample: std::mem::take(&mut self.table.seen_sample),
                columns: self.table.seen,
            });
        }
        self.take()
    }
}

/// Read record `record` of `reader` into columns: every item the reader yields for it
/// (within [`ColumnOptions::from_us`] and [`ColumnOptions::to_us`]) that decodes is one row;
/// see the module docs for names, types and damage.
///
/// Errors ([`ColumnsError`]) are only for what makes the whole read impossible; a corrupt
/// block, a cut or an item that does not decode is counted in [`Columns::problems`] and the
/// read goes on. Several records of one name (a log registering a name twice) are read
/// together, each item by its own schema. Memory is that of the whole table: for a log too
/// big for that, [`read_chunks`].
pub fn read(reader: &FileReader, record: &str, options: &ColumnOptions) -> Result<Columns, ColumnsError> {
    let mut builder = ColumnBuilder::new(reader, record, options)?;
    let filter = ItemFilter { record: Some(record.to_string()), from_us: options.from_us, to_us: options.to_us };
    for item in reader.items(filter) {
        match item {
            Ok(item) => builder.push(&item)?,
            Err(error) => builder.note_read_error(&error),
        }
    }
    builder.finish()
}

/// [`read`] a chunk of at most `rows` rows at a time (at least one), so that memory is that
/// of one chunk, not of the log. Every chunk has rows, except: a record without a row gives
/// one empty chunk (with its fixed columns, as [`read`]), and damage met after the last full
/// chunk comes in a last chunk of its own. Each chunk carries the problems and collisions
/// met while it was read; an error ends the iteration. Chunks concatenated are what [`read`]
/// gives (see [`ColumnBuilder`]).
pub fn read_chunks<'r>(
    reader: &'r FileReader,
    record: &str,
    options: &ColumnOptions,
    rows: usize,
) -> Result<ColumnChunks<'r>, ColumnsError> {
    let rows = rows.max(1);
    let builder = ColumnBuilder::new(reader, record, options)?.with_chunk_rows(rows);
    let filter = ItemFilter { record: Some(record.to_string()), from_us: options.from_us, to_us: options.to_us };
    Ok(ColumnChunks { items: reader.items(filter), builder: Some(builder), rows, yielded: false })
}

/// The chunks of [`read_chunks`].
pub struct ColumnChunks<'r> {
    items: crate::reader::Items<'r>,
    /// None once the last chunk (or an error) was given.
    builder: Option<ColumnBuilder>,
    rows: usize,
    yielded: bool,
}

impl Iterator for ColumnChunks<'_> {
    type Item = Result<Columns, ColumnsError>;

    fn next(&mut self) -> Option<Self::Item> {
        let builder = self.builder.as_mut()?;
        for item in self.items.by_ref() {
            match item {
                Ok(item) => {
                    if let Err(error) = builder.push(&item) {
                        self.builder = None;
                        return Some(Err(error));
                    }
                }
                Err(error) => builder.note_read_error(&error),
            }
            if builder.rows() >= self.rows {
                self.yielded = true;
                return Some(builder.take());
            }
        }
        let mut builder = self.builder.take()?;
        if self.yielded && builder.rows() == 0 && !builder.has_news() {
            // Nothing since the last chunk; only the final check is left.
            return builder.finish().err().map(Err);
        }
        Some(builder.finish())
    }
}
