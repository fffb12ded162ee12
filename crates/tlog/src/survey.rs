//! What a log holds and what is wrong with it, counted: the basis of `info`, and of the
//! warnings every reading tool (dump, export, plot) prints.
//!
//! Damage is never silent: a corrupt block, a cut, data blocks whose record has no schema, a
//! schema that does not parse, items that do not decode against their schema, values a CSV
//! header has no column for — each kind becomes one [`Problem`] per record with a count, the
//! first and last byte offsets and the first description, and [`Problem`]'s `Display` is one
//! sentence a user can act on. This module only describes; it never reads or writes files.

use serde::Serialize;
use std::fmt;

/// What kind of damage a [`Problem`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// Blocks the reader could not use (bad CRC, unknown flags, malformed); each was skipped.
    CorruptBlock,
    /// The file ends inside a block (count 1; the offset is where that block starts).
    Truncated,
    /// Data blocks whose record id has no schema block: nothing can decode them.
    NoSchema,
    /// A schema block whose schema does not parse; `count` is how many of the record's data
    /// blocks therefore cannot be decoded, the offsets are the schema block's.
    SchemaUnreadable,
    /// Items that do not decode against their record's schema.
    Undecodable,
    /// Items with values the export's columns have no place for: the CSV header is taken
    /// from the first item, a Parquet file's columns and types from its first row group, so
    /// a later item with a longer array (or a value of another type) does not fit. The row was
    /// written without them.
    ValuesWithoutColumn,
}

/// One kind of damage in one record (or in the file), aggregated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub kind: ProblemKind,
    /// The record id concerned, when the damage belongs to one.
    pub record_id: Option<u64>,
    /// Its name, when the log has a schema block for it.
    pub record: Option<String>,
    pub count: u64,
    /// Byte offset of the first block concerned.
    pub first_offset: u64,
    /// Byte offset of the last block concerned.
    pub last_offset: u64,
    /// What went wrong the first time.
    pub what: String,
}

impl Problem {
    /// True when the blocks or items counted were left out of the output entirely (as opposed
    /// to written without some of their values).
    pub fn skips_items(&self) -> bool {
        self.kind != ProblemKind::ValuesWithoutColumn
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

fn span(problem: &Problem) -> String {
    if problem.count > 1 && problem.last_offset != problem.first_offset {
        format!("first at byte {}, last at byte {}", problem.first_offset, problem.last_offset)
    } else {
        format!("at byte {}", problem.first_offset)
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let record = match (&self.record, self.record_id) {
            (Some(name), _) => format!("record '{name}'"),
            (None, Some(id)) => format!("record id {id}"),
            // Occurrences past MAX_RECORDS_PER_KIND distinct records, counted together.
            (None, None) => "further record ids".to_string(),
        };
        match self.kind {
            ProblemKind::CorruptBlock => write!(
                f,
                "{} skipped ({}; the first: {})",
                plural(self.count, "corrupt block", "corrupt blocks"),
                span(self),
                self.what
            ),
            ProblemKind::Truncated => write!(
                f,
                "the file is cut at byte {}: the incomplete block there was skipped, every complete block before \
                 it was read",
                self.first_offset
            ),
            ProblemKind::NoSchema => write!(
                f,
                "{} of {record} have no schema ({}): they cannot be decoded; a damaged schema block is the likely \
                 cause",
                plural(self.count, "data block", "data blocks"),
                span(self)
            ),
            ProblemKind::SchemaUnreadable => write!(
                f,
                "the schema of {record} (block at byte {}) does not parse, so its {} cannot be decoded: {}",
                self.first_offset,
                plural(self.count, "data block", "data blocks"),
                self.what
            ),
            ProblemKind::Undecodable => write!(
                f,
                "{} of {record} do not decode against its schema and were skipped ({}; the first: {})",
                plural(self.count, "item", "items"),
                span(self),
                self.what
            ),
            ProblemKind::ValuesWithoutColumn => write!(
                f,
                "{} of {record} have values the export has no column for (its columns are fixed by its first \
                 rows), written without them ({}; the first: {})",
                plural(self.count, "item", "items"),
                span(self),
                self.what
            ),
        }
    }
}

/// Distinct record ids one kind of problem lists separately; the occurrences of any further
/// ids are counted together (a hostile file could otherwise make one entry per block).
pub const MAX_RECORDS_PER_KIND: usize = 32;

/// Collects problems, one entry per (kind, record id), in the order first seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems {
    list: Vec<Problem>,
    /// Where each (kind, record id) is in `list`.
    index: std::collections::HashMap<(ProblemKind, Option<u64>), usize>,
    /// Distinct record ids listed so far, per kind.
    records_per_kind: std::collections::HashMap<ProblemKind, usize>,
}

impl Problems {
    /// Count a reader error: the cut at the end of a log ([`ProblemKind::Truncated`]) or a
    /// corrupt block, at the offset the error names.
    pub fn note_read_error(&mut self, error: &crate::format::TlogError) {
        let kind = match error {
            crate::format::TlogError::Truncated { .. } => ProblemKind::Truncated,
            _ => ProblemKind::CorruptBlock,
        };
        self.note(kind, None, None, crate::format::error_offset(error).unwrap_or(0), || error.to_string());
    }

    /// Count one occurrence at `offset`. `what` is only built for the first occurrence.
    pub fn note(
        &mut self,
        kind: ProblemKind,
        record_id: Option<u64>,
        record: Option<&str>,
        offset: u64,
        what: impl FnOnce() -> String,
    ) {
        let (mut record_id, mut record) = (record_id, record);
        if record_id.is_some() && !self.index.contains_key(&(kind, record_id)) {
            let listed = self.records_per_kind.entry(kind).or_insert(0);
            if *listed >= MAX_RECORDS_PER_KIND {
                (record_id, record) = (None, None);
            } else {
                *listed += 1;
            }
        }
        if let Some(p) = self.index.get(&(kind, record_id)).and_then(|&i| self.list.get_mut(i)) {
            p.count += 1;
            p.first_offset = p.first_offset.min(offset);
            p.last_offset = p.last_offset.max(offset);
            return;
        }
        self.index.insert((kind, record_id), self.list.len());
        self.list.push(Problem {
            kind,
            record_id,
            record: record.map(str::to_string),
            count: 1,
            first_offset: offset,
            last_offset: offset,
            what: what(),
        });
    }

    /// Record a schema that does not parse (count 0 until data blocks of it are seen with
    /// [`Problems::note`]).
    pub fn schema_unreadable(&mut self, record_id: u64, record: &str, schema_offset: u64, what: &str) {
        let key = (ProblemKind::SchemaUnreadable, Some(record_id));
        if self.index.contains_key(&key) {
            return;
        }
        self.index.insert(key, self.list.len());
        self.list.push(Problem {
            kind: ProblemKind::SchemaUnreadable,
            record_id: Some(record_id),
            record: Some(record.to_string()),
            count: 0,
            first_offset: schema_offset,
            last_offset: schema_offset,
            what: what.to_string(),
        });
    }

    /// Count one more data block of a record whose schema does not parse.
    pub fn data_without_readable_schema(&mut self, record_id: u64) {
        let key = (ProblemKind::SchemaUnreadable, Some(record_id));
        if let Some(p) = self.index.get(&key).and_then(|&i| self.list.get_mut(i)) {
            p.count += 1;
        }
    }

    /// Add the problems of a later part of the same walk (a later chunk of a read): counts
    /// add up, offsets widen, the first description stays; kinds and records not seen yet
    /// are appended in their order, within [`MAX_RECORDS_PER_KIND`] as [`Problems::note`].
    pub fn merge(&mut self, later: Problems) {
        for problem in later.list {
            let Problem { kind, record_id, record, count, first_offset, last_offset, what } = problem;
            if count == 0 {
                // A schema that does not parse, before any of its data: noted as such.
                if let (ProblemKind::SchemaUnreadable, Some(id), Some(name)) = (kind, record_id, &record) {
                    self.schema_unreadable(id, name, first_offset, &what);
                }
                continue;
            }
            let mut what = Some(what);
            self.note(kind, record_id, record.as_deref(), first_offset, || what.take().unwrap_or_default());
            let key = self.key_of(kind, record_id);
            if let Some(p) = self.index.get(&key).and_then(|&i| self.list.get_mut(i)) {
                p.count += count - 1;
                p.last_offset = p.last_offset.max(last_offset);
            }
        }
    }

    /// Where [`Problems::note`] counts `(kind, record_id)`: under `None` once the kind lists
    /// [`MAX_RECORDS_PER_KIND`] other records.
    fn key_of(&self, kind: ProblemKind, record_id: Option<u64>) -> (ProblemKind, Option<u64>) {
        if self.index.contains_key(&(kind, record_id)) {
            (kind, record_id)
        } else {
            (kind, None)
        }
    }

    /// The problems found, in the order first seen.
    pub fn list(&self) -> &[Problem] {
        &self.list
    }

    /// Consume into the list.
    pub fn into_vec(self) -> Vec<Problem> {
        self.list
    }

    /// Blocks and items left out entirely (see [`Problem::skips_items`]).
    pub fn skipped(&self) -> u64 {
        self.list.iter().filter(|p| p.skips_items()).map(|p| p.count).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// One record of a [`Survey`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordSurvey {
    pub id: u64,
    pub name: String,
    /// Data blocks of this record that read intact.
    pub items: u64,
    /// Earliest and latest item timestamps, µs since the UNIX epoch.
    pub first_us: Option<i64>,
    pub last_us: Option<i64>,
}

/// Whether and why a log has an index block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexState {
    /// The file ends with a valid index: the writer closed it.
    Present,
    /// No index because the file is cut inside a block at this offset: the writer was
    /// stopped (killed, crashed, out of disk) before it could close the file.
    Cut { at: u64 },
    /// No index and the file ends on a complete block. `closed` is true when the file holds
    /// the record rtloop's writer writes last when it closes a log
    /// ([`crate::realtime::STATS_RECORD`]): then it was closed without an index. Otherwise the
    /// writer either wrote no index or was stopped between two blocks; nothing tells which.
    Absent { closed: bool },
}

impl IndexState {
    /// One sentence for `info`.
    pub fn describe(self) -> String {
        match self {
            IndexState::Present => "present".to_string(),
            IndexState::Cut { at } => {
                format!("absent: the file is cut at byte {at}, so the writer did not close it (read by scanning)")
            }
            IndexState::Absent { closed: true } => {
                "absent: the log was written without an index and closed properly (read by scanning)".to_string()
            }
            IndexState::Absent { closed: false } => "absent: the file ends on a complete block, so it was written \
                                                     without an index or stopped between two blocks (read by \
                                                     scanning)"
                .to_string(),
        }
    }
}

/// Everything a full walk of a log found: block counts, records with their item counts and
/// time ranges, and every problem.
#[derive(Debug, Clone, PartialEq)]
pub struct Survey {
    pub scan: ScanReport,
    /// Every record with a schema block, in the reader's order.
    pub records: Vec<RecordSurvey>,
    pub problems: Vec<Problem>,
    pub index: IndexState,
    /// Earliest and latest timestamps of the data: of every intact data block (those
    /// without a schema included) except the bookkeeping record a writer adds when it closes
    /// ([`crate::realtime::STATS_RECORD`]) — unless that is all there is.
    pub data_span_us: Option<(i64, i64)>,
}

/// Earliest and latest of the timestamps seen.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Span(Option<(i64, i64)>);

impl Span {
    pub(crate) fn add(&mut self, t: i64) {
        self.0 = Some(self.0.map_or((t, t), |(first, last)| (first.min(t), last.max(t))));
    }

    pub(crate) fn get(self) -> Option<(i64, i64)> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_aggregate_per_kind_and_record() {
        let mut problems = Problems::default();
        for offset in [500, 100, 900] {
            problems.note(ProblemKind::NoSchema, Some(1), None, offset, || "no schema".into());
        }
        problems.note(ProblemKind::CorruptBlock, None, None, 42, || "CRC mismatch".into());
        assert_eq!(problems.list().len(), 2);
        let orphan = &problems.list()[0];
        assert_eq!((orphan.count, orphan.first_offset, orphan.last_offset), (3, 100, 900));
        assert_eq!(
            orphan.to_string(),
            "3 data blocks of record id 1 have no schema (first at byte 100, last at byte 900): they cannot be \
             decoded; a damaged schema block is the likely cause"
        );
        assert_eq!(problems.list()[1].to_string(), "1 corrupt block skipped (at byte 42; the first: CRC mismatch)");
        assert_eq!(problems.skipped(), 4);
    }

    #[test]
    fn a_flood_of_record_ids_is_folded_into_one_entry() {
        let mut problems = Problems::default();
        for id in 0..10_000u64 {
            problems.note(ProblemKind::NoSchema, Some(id), None, id, || "no schema".into());
        }
        assert_eq!(problems.list().len(), MAX_RECORDS_PER_KIND + 1);
        let rest = problems.list().last().unwrap();
        assert_eq!((rest.record_id, rest.count), (None, 10_000 - MAX_RECORDS_PER_KIND as u64));
        assert!(rest.to_string().starts_with("9968 data blocks of further record ids have no schema"), "{rest}");
    }
}

/// What a full walk of the file found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScanReport {
    /// Blocks whose framing could be read (good or bad).
    pub blocks: u64,
    /// Data blocks that passed every check.
    pub data_blocks: u64,
    pub schemas: u64,
    pub seek_markers: u64,
    /// True when the file ends with a valid index block.
    pub has_index: bool,
    /// Start of the incomplete block at the end of the file, if it was cut.
    pub truncated_at: Option<u64>,
    /// `(block offset, description)` of every block that was reported and skipped.
    pub corrupt: Vec<(u64, String)>,
}
