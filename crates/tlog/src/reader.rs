//! Reading TLOG0003 files: listing records, walking data blocks, seeking by time, walking one
//! record backwards, and recovering from truncated or corrupted files.
//!
//! The reader exists for offline tools (dumps, exports, plots, post-mortems after a crash), so
//! it treats every byte of the file as untrusted: it must never panic, never allocate based on
//! a length that does not fit in the file, and never give up on a whole file because one block
//! is bad. Bad blocks are reported (with their offset) and skipped; a file cut anywhere yields
//! every complete block before the cut. It never writes, and never opens anything but a
//! regular file ([`open_file`]): `/dev/zero` or a FIFO is refused with what it is, not read
//! as an empty log or waited on.
//!
//! **I/O strategy.** [`FileReader::open`] (or [`FileReader::from_file`] on a file the caller
//! opened and checked) keeps the `File` and uses positioned reads (`FileExt::read_at`, i.e.
//! `pread`) through a small sliding buffer, so seeking in a 1 GiB log touches a few hundred KiB
//! instead of reading the whole file; [`FileReader::from_bytes`] reads from memory (what fuzz
//! targets use). The file length is taken once at open: bytes appended later are not seen.
//!
//! **Damage accounting.** [`FileReader::survey`] walks the file once and counts every kind of
//! damage (see [`crate::survey`]); the exporters count what they skip the same way.
//!
//! **Resynchronisation.** After a bad block (CRC mismatch, unknown flags, malformed body) the
//! walk continues at the block's declared end when that is *plausible* (end of file, or a
//! well-formed block header of a known type starts there) and no valid seek marker starts
//! inside the bad block's claimed extent; otherwise it continues at the next valid seek
//! marker. Until a block proves itself again (a matching CRC), blocks that cannot (CRC-less
//! data, dictionaries, schema blocks whose schema does not parse) count as more garbage, and
//! a second failure jumps to the first marker after where the trouble began. A block whose
//! declared length runs past the end of the file is a truncation (the end of the walk),
//! unless a valid seek marker follows, in which case its length was corrupt.
//!
//! **Seek markers.** A marker's body starts with the 8 magic bytes, then a u32 CRC, then a u8
//! `header_len` = the number of bytes its type and size varuints took. So from a magic found at
//! byte `m` the block starts at `m - header_len` (equivalently 7 + header_len before the magic's
//! last byte); a candidate is accepted only if a block header parsed there is of type 5, ends
//! exactly at `m`, and the block's CRC (computed with the CRC field zeroed) matches.

pub use crate::format::error_offset;
pub use crate::survey::ScanReport;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::OnceLock;

use crate::format::{
    block_type, data_flags, read_i64, read_string, read_u32, read_u64, read_varuint, TlogError, FILE_MAGIC,
    INDEX_TRAILER, MAX_VARUINT_LEN, SEEK_MARKER_MAGIC,
};
use crate::schema::Schema;
use crate::survey::{IndexState, ProblemKind, Problems, RecordSurvey, Span, Survey};
use crate::value::{decode, Value};

/// The binary search over byte offsets stops once the window is this small; the rest is a
/// linear walk (cheaper than more probes that each scan for a marker).
const SEEK_LINEAR_WINDOW: u64 = 64 * 1024;

/// How much a file-backed reader fetches per positioned read.
const READ_CHUNK: usize = 256 * 1024;

/// Largest decompressed payload accepted; a corrupt or hostile length header must not make
/// the reader allocate without bound.
const MAX_PAYLOAD: usize = 256 * 1024 * 1024;

/// With a `to_us` bound the walk stops at the first seek marker this much later than `to_us`.
/// The slack tolerates records whose timestamps run a little behind the marker clock.
const TO_BOUND_SLACK_US: i64 = 1_000_000;

/// Seek marker body: magic u64 + crc u32 + header_len u8 + flags + timestamp i64 + count.
const SEEK_MARKER_MIN_BODY: u64 = 8 + 4 + 1 + 1 + 8 + 1;

/// One record (named stream) of the log, from the index or from a scan.
#[derive(Debug, Clone)]
pub struct RecordInfo {
    pub id: u64,
    pub name: String,
    /// `None` when the schema bytes do not parse (see `schema_error`); the record is still
    /// listed and its items can still be read raw.
    pub schema: Option<Schema>,
    /// The binary schema exactly as stored.
    pub schema_bytes: Vec<u8>,
    pub schema_error: Option<String>,
    pub schema_offset: u64,
    /// Start of the record's last data block, if it has any.
    pub last_data_offset: Option<u64>,
}

/// One data block, with its payload decompressed.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub record_id: u64,
    /// Start of the data block in the file.
    pub offset: u64,
    pub timestamp_us: Option<i64>,
    pub data: Vec<u8>,
}

/// Which items [`FileReader::items`] yields. Items without a timestamp are only yielded when
/// neither time bound is set.
#[derive(Debug, Clone, Default)]
pub struct ItemFilter {
    pub record: Option<String>,
    /// Inclusive lower bound (µs since the epoch); the walk starts at [`FileReader::seek`].
    pub from_us: Option<i64>,
    /// Inclusive upper bound (µs since the epoch).
    pub to_us: Option<i64>,
}

/// A decoded seek marker.
#[derive(Debug, Clone, PartialEq)]
pub struct SeekMarker {
    pub offset: u64,
    pub timestamp_us: i64,
    /// `(record id, marker start − start of that record's latest data block)`.
    pub back_offsets: Vec<(u64, u64)>,
}

impl ScanReport {
    /// Count one block of the walk.
    fn count(&mut self, event: &Event) {
        match event {
            Event::Error(TlogError::Truncated { offset }) => self.truncated_at = Some(*offset),
            Event::Error(error) => {
                self.blocks += 1;
                self.corrupt.push((error_offset(error).unwrap_or(0), error.to_string()));
            }
            Event::Data(_) => {
                self.blocks += 1;
                self.data_blocks += 1;
            }
            Event::Schema(_) => {
                self.blocks += 1;
                self.schemas += 1;
            }
            Event::SeekMarker(_) => {
                self.blocks += 1;
                self.seek_markers += 1;
            }
            Event::Index | Event::Other => self.blocks += 1,
        }
    }
}

/// Reader over one TLOG0003 file (see the module docs).
pub struct FileReader {
    source: Source,
    /// First byte after the file header.
    data_start: u64,
    directory: OnceLock<Directory>,
}

struct Directory {
    records: Vec<RecordInfo>,
    from_index: bool,
}

/// Open `path` for reading as a log, refusing anything but a regular file (links followed)
/// with [`TlogError::NotAFile`] — before opening it: opening a FIFO blocks until a writer
/// comes, and opening a device can act on it. The open itself does not block either
/// (`O_NONBLOCK`, in case the path changes in between), and what was opened is checked again.
pub fn open_file(path: &Path) -> Result<File, TlogError> {
    if let Some(kind) = rtloop_output::file::not_a_regular_file(std::fs::metadata(path)?.file_type()) {
        return Err(TlogError::NotAFile { kind });
    }
    // O_NONBLOCK changes nothing for a regular file's reads.
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    if let Some(kind) = rtloop_output::file::not_a_regular_file(file.metadata()?.file_type()) {
        return Err(TlogError::NotAFile { kind });
    }
    Ok(file)
}

impl FileReader {
    /// Open a file for positioned reads ([`open_file`]); only the header is read now.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TlogError> {
        Self::from_file(open_file(path.as_ref())?)
    }

    /// Read an already opened file (positioned reads; only the header is read now). Lets a
    /// caller check what it opened (e.g. its device and inode) before reading. Anything but
    /// a regular file is refused ([`TlogError::NotAFile`]).
    pub fn from_file(file: File) -> Result<Self, TlogError> {
        let metadata = file.metadata()?;
        if let Some(kind) = rtloop_output::file::not_a_regular_file(metadata.file_type()) {
            return Err(TlogError::NotAFile { kind });
        }
        Self::new(Source::File { file, len: metadata.len() })
    }

    /// Read a log held in memory (a `Vec<u8>`, or a copy of a `&[u8]`): every reader entry
    /// point then works without touching a file, which is what fuzz targets need.
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Result<Self, TlogError> {
        Self::new(Source::Memory(bytes.into()))
    }

    fn new(source: Source) -> Result<Self, TlogError> {
        let mut window = Window::default();
        let head = window.peek(&source, 0, FILE_MAGIC.len() + MAX_VARUINT_LEN)?;
        if head.is_empty() {
            return Err(TlogError::Empty);
        }
        let magic_len = head.len().min(FILE_MAGIC.len());
        if head[..magic_len] != FILE_MAGIC[..magic_len] {
            return Err(TlogError::BadMagic);
        }
        let mut pos = FILE_MAGIC.len();
        let header_flags = match read_varuint(head, &mut pos) {
            Ok(flags) => flags,
            Err(TlogError::Truncated { .. }) => {
                return Err(malformed(
                    0,
                    format!(
                        "the file is only {} bytes long, shorter than the TLOG0003 header: it was cut before \
                         anything was logged",
                        head.len()
                    ),
                ))
            }
            Err(e) => return Err(e),
        };
        if header_flags != 0 {
            return Err(TlogError::UnknownFlags { offset: FILE_MAGIC.len() as u64, flags: header_flags });
        }
        Ok(FileReader { source, data_start: pos as u64, directory: OnceLock::new() })
    }

    /// File length in bytes (as of open).
    pub fn len(&self) -> u64 {
        self.source.len()
    }

    /// True for a file that holds nothing but its header.
    pub fn is_empty(&self) -> bool {
        self.len() <= self.data_start
    }

    /// Offset of the first block (just after the file header).
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    /// Every record with a schema block, by id. Uses the index when the file ends with a valid
    /// one (reading only the index and the schema blocks), else walks the whole file once.
    /// The result is cached.
    pub fn records(&self) -> Vec<RecordInfo> {
        self.directory().records.clone()
    }

    /// The record called `name`, if the log has one.
    pub fn record(&self, name: &str) -> Option<RecordInfo> {
        self.directory().records.iter().find(|r| r.name == name).cloned()
    }

    /// True when the file ends with a valid index block.
    pub fn has_index(&self) -> bool {
        self.directory().from_index
    }

    fn directory(&self) -> &Directory {
        self.directory.get_or_init(|| match self.directory_from_index() {
            Some(records) => Directory { records, from_index: true },
            None => Directory { records: self.directory_from_scan(), from_index: false },
        })
    }

    fn directory_from_index(&self) -> Option<Vec<RecordInfo>> {
        let entries = self.read_index()?;
        let mut window = Window::default();
        let mut records = Vec::with_capacity(entries.len());
        for (id, schema_offset, last_data_offset) in entries {
            let Ok(Parsed { event: Event::Schema(schema_block), .. }) = self.parse_block_at(&mut window, schema_offset)
            else {
                return None;
            };
            if schema_block.id != id || last_data_offset.is_some_and(|o| o >= self.len()) {
                return None;
            }
            records.push(schema_block.into_record(last_data_offset));
        }
        Some(records)
    }

    /// `(id, schema offset, last data offset)` from a valid trailing index block.
    fn read_index(&self) -> Option<Vec<(u64, u64, Option<u64>)>> {
        let len = self.len();
        let mut window = Window::default();
        let tail_start = len.checked_sub(12)?;
        let tail = window.exact(&self.source, tail_start, 12).ok()?;
        if &tail[4..] != INDEX_TRAILER {
            return None;
        }
        let total = u64::from(u32::from_le_bytes(tail[..4].try_into().ok()?));
        let start = len.checked_sub(total).filter(|&s| s >= self.data_start)?;
        let (header, body) = self.block_bytes(&mut window, start).ok()?;
        if header.block_type != block_type::INDEX || header.end != len {
            return None;
        }
        let mut pos = 0;
        let flags = read_varuint(&body, &mut pos).ok()?;
        let count = read_varuint(&body, &mut pos).ok()?;
        // Each entry takes at least 1 + 8 + 8 bytes: bound the count before reserving.
        if flags != 0 || count > body.len() as u64 / 17 {
            return None;
        }
        let mut entries = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let id = read_varuint(&body, &mut pos).ok()?;
            let schema_offset = read_u64(&body, &mut pos).ok()?;
            let last = read_u64(&body, &mut pos).ok()?;
            entries.push((id, schema_offset, (last != u64::MAX).then_some(last)));
        }
        (pos + 12 == body.len()).then_some(entries)
    }

    fn directory_from_scan(&self) -> Vec<RecordInfo> {
        let mut records: Vec<RecordInfo> = Vec::new();
        let mut by_id: HashMap<u64, usize> = HashMap::new();
        let mut last_data: HashMap<u64, u64> = HashMap::new();
        for event in Walker::new(self, self.data_start) {
            match event {
                // The first schema for an id wins; mjlib writes each exactly once.
                Event::Schema(schema_block) => {
                    by_id.entry(schema_block.id).or_insert_with(|| {
                        records.push(schema_block.into_record(None));
                        records.len() - 1
                    });
                }
                Event::Data(block) => {
                    last_data.insert(block.item.record_id, block.item.offset);
                }
                _ => {}
            }
        }
        for record in &mut records {
            record.last_data_offset = last_data.get(&record.id).copied();
        }
        records
    }

    /// Data items in file order, filtered. Bad blocks come out as `Err` (with their offset)
    /// and the walk continues after them; a cut-off last block ends the walk with
    /// `Err(Truncated)`.
    pub fn items(&self, filter: ItemFilter) -> Items<'_> {
        let mut pending_error = None;
        let start = match filter.from_us {
            Some(from_us) => self.seek(from_us).unwrap_or_else(|e| {
                pending_error = Some(e);
                self.data_start
            }),
            None => self.data_start,
        };
        // Schema blocks before `start` are not walked, so take ids from the directory then;
        // from the beginning, ids are learnt from schema blocks as they pass (one pass only).
        let mut wanted_ids = HashSet::new();
        if let (Some(name), true) = (&filter.record, start > self.data_start) {
            wanted_ids.extend(self.directory().records.iter().filter(|r| &r.name == name).map(|r| r.id));
        }
        Items { walker: Walker::new(self, start), filter, wanted_ids, pending_error }
    }

    /// [`items`](Self::items) with damaged blocks skipped and counted: what every exporter
    /// reads ([`SurvivingItems`]).
    pub fn surviving_items(&self, filter: ItemFilter) -> SurvivingItems<'_> {
        SurvivingItems::new(self.items(filter), Problems::default())
    }

    /// An offset to start walking from so that no item with `timestamp ≥ timestamp_us` that
    /// follows the last earlier seek marker is missed: the start of the first data block at or
    /// after `timestamp_us` (or the end of the file when there is none).
    ///
    /// Binary search over byte offsets: probe the middle of the window, scan forward for the
    /// next valid seek marker, and keep the half that must contain the answer; once the window
    /// is at most 64 KiB, walk blocks linearly. Assumes seek-marker timestamps do not decrease
    /// through the file (the writer stamps them from the data it is writing).
    pub fn seek(&self, timestamp_us: i64) -> Result<u64, TlogError> {
        let len = self.len();
        // Invariant: `lo` is a block start no later than the answer; every valid marker at or
        // after `hi` has a timestamp ≥ the target.
        let mut lo = self.data_start;
        let mut hi = len;
        while hi.saturating_sub(lo) > SEEK_LINEAR_WINDOW {
            let mid = lo + (hi - lo) / 2;
            match self.find_seek_marker(mid, hi)? {
                Some(marker) if marker.timestamp_us < timestamp_us && marker.offset > lo => lo = marker.offset,
                _ => hi = mid,
            }
        }
        let mut walker = Walker::new(self, lo);
        for event in walker.by_ref() {
            if let Event::Data(block) = event {
                if block.item.timestamp_us.is_some_and(|t| t >= timestamp_us) {
                    return Ok(block.item.offset);
                }
            }
        }
        Ok(walker.pos.min(len))
    }

    /// The items of one record from its last data block back to its first, following each
    /// block's previous-offset field (starting from the index when there is one). Where the
    /// chain breaks (a bad block, a block without the field), the error is reported and the
    /// remaining earlier items are found by a forward walk instead.
    pub fn backwards(&self, record_id: u64) -> Backwards<'_> {
        let start = self.directory().records.iter().find(|r| r.id == record_id).and_then(|r| r.last_data_offset);
        Backwards { reader: self, record_id, next: start, window: Window::default(), fallback: None }
    }

    /// Decode an item's payload with its record's schema.
    pub fn decode_item(&self, item: &Item) -> Result<Value, TlogError> {
        let directory = self.directory();
        let Some(record) = directory.records.iter().find(|r| r.id == item.record_id) else {
            return Err(TlogError::Malformed {
                offset: item.offset,
                what: format!("no schema for record id {}", item.record_id),
            });
        };
        let Some(schema) = &record.schema else {
            return Err(TlogError::Malformed {
                offset: record.schema_offset,
                what: format!(
                    "schema of record '{}' does not parse: {}",
                    record.name,
                    record.schema_error.as_deref().unwrap_or("unknown error")
                ),
            });
        };
        decode(schema, &item.data).map_err(|e| TlogError::Malformed {
            offset: item.offset,
            what: format!("payload of record '{}' does not decode: {e}", record.name),
        })
    }

    /// Walk the whole file and count what is there, collecting every problem.
    pub fn scan_report(&self) -> ScanReport {
        let mut report = ScanReport { has_index: self.read_index().is_some(), ..ScanReport::default() };
        for event in Walker::new(self, self.data_start) {
            report.count(&event);
        }
        report
    }

    /// Walk the whole file once: block counts, every record's item count and time range, and
    /// every problem (corrupt blocks, a cut, data without a schema, schemas that do not
    /// parse, items that do not decode). Decodes every item, so it costs a full read.
    pub fn survey(&self) -> Survey {
        let directory = self.directory();
        let mut report = ScanReport { has_index: self.read_index().is_some(), ..ScanReport::default() };
        let mut problems = Problems::default();
        let mut records: Vec<RecordSurvey> = Vec::with_capacity(directory.records.len());
        let mut by_id: HashMap<u64, usize> = HashMap::new();
        for (i, record) in directory.records.iter().enumerate() {
            by_id.entry(record.id).or_insert(i);
            records.push(RecordSurvey {
                id: record.id,
                name: record.name.clone(),
                items: 0,
                first_us: None,
                last_us: None,
            });
            if let Some(error) = &record.schema_error {
                problems.schema_unreadable(record.id, &record.name, record.schema_offset, error);
            }
        }
        let (mut data_span, mut all_span) = (Span::default(), Span::default());
        for event in Walker::new(self, self.data_start) {
            report.count(&event);
            match event {
                Event::Error(TlogError::Truncated { offset }) => {
                    problems.note(ProblemKind::Truncated, None, None, offset, || "cut".into());
                }
                Event::Error(error) => {
                    let offset = error_offset(&error).unwrap_or(0);
                    problems.note(ProblemKind::CorruptBlock, None, None, offset, || error.to_string());
                }
                Event::Data(block) => {
                    let item = block.item;
                    if let Some(t) = item.timestamp_us {
                        all_span.add(t);
                        let bookkeeping = by_id
                            .get(&item.record_id)
                            .is_some_and(|&i| directory.records[i].name == crate::realtime::STATS_RECORD);
                        if !bookkeeping {
                            data_span.add(t);
                        }
                    }
                    let Some(&i) = by_id.get(&item.record_id) else {
                        problems.note(ProblemKind::NoSchema, Some(item.record_id), None, item.offset, || {
                            "no schema block for this record id".into()
                        });
                        continue;
                    };
                    let (record, survey) = (&directory.records[i], &mut records[i]);
                    survey.items += 1;
                    if let Some(t) = item.timestamp_us {
                        survey.first_us = Some(survey.first_us.map_or(t, |f| f.min(t)));
                        survey.last_us = Some(survey.last_us.map_or(t, |l| l.max(t)));
                    }
                    match &record.schema {
                        None => problems.data_without_readable_schema(record.id),
                        Some(schema) => {
                            if let Err(e) = decode(schema, &item.data) {
                                problems.note(
                                    ProblemKind::Undecodable,
                                    Some(record.id),
                                    Some(&record.name),
                                    item.offset,
                                    || e.to_string(),
                                );
                            }
                        }
                    }
                }
                Event::Schema(_) | Event::SeekMarker(_) | Event::Index | Event::Other => {}
            }
        }
        let index = match (report.has_index, report.truncated_at) {
            (true, _) => IndexState::Present,
            (false, Some(at)) => IndexState::Cut { at },
            (false, None) => IndexState::Absent {
                closed: records.iter().any(|r| r.name == crate::realtime::STATS_RECORD && r.items > 0),
            },
        };
        let data_span_us = data_span.get().or(all_span.get());
        Survey { scan: report, records, problems: problems.into_vec(), index, data_span_us }
    }

    /// Every valid seek marker, in file order (a full walk).
    pub fn seek_markers(&self) -> Vec<SeekMarker> {
        Walker::new(self, self.data_start)
            .filter_map(|event| match event {
                Event::SeekMarker(marker) => Some(marker),
                _ => None,
            })
            .collect()
    }

    /// The first valid seek marker whose magic starts in `[from, to)`.
    fn find_seek_marker(&self, from: u64, to: u64) -> Result<Option<SeekMarker>, TlogError> {
        const SCAN_CHUNK: u64 = 64 * 1024;
        let magic = SEEK_MARKER_MAGIC.to_le_bytes();
        let to = to.min(self.len());
        let mut scan_window = Window::default();
        let mut check_window = Window::default();
        let mut chunk_start = from;
        while chunk_start < to {
            let chunk_end = to.min(chunk_start.saturating_add(SCAN_CHUNK));
            // Read 7 bytes past the chunk so a magic straddling the boundary is still seen.
            let want = (chunk_end - chunk_start) as usize + magic.len() - 1;
            let bytes = match scan_window.peek(&self.source, chunk_start, want) {
                Ok(bytes) => bytes,
                Err(TlogError::Io(e)) => return Err(TlogError::Io(e)),
                Err(_) => return Ok(None),
            };
            let candidates: Vec<u64> = bytes
                .windows(magic.len())
                .enumerate()
                .filter(|(i, w)| *w == magic && chunk_start + (*i as u64) < chunk_end)
                .map(|(i, _)| chunk_start + i as u64)
                .collect();
            for magic_at in candidates {
                if let Some(marker) = self.seek_marker_with_magic_at(&mut check_window, magic_at) {
                    return Ok(Some(marker));
                }
            }
            chunk_start = chunk_end;
        }
        Ok(None)
    }

    /// Validate a seek-marker candidate whose magic begins at `magic_at`.
    fn seek_marker_with_magic_at(&self, window: &mut Window, magic_at: u64) -> Option<SeekMarker> {
        let header_len = *window.exact(&self.source, magic_at.checked_add(12)?, 1).ok()?.first()?;
        let start = magic_at.checked_sub(u64::from(header_len)).filter(|&s| s >= self.data_start)?;
        match self.parse_block_at(window, start) {
            Ok(Parsed { event: Event::SeekMarker(marker), .. }) => Some(marker),
            _ => None,
        }
    }

    /// Read the framing and body of the block at `offset`.
    fn block_bytes(&self, window: &mut Window, offset: u64) -> Result<(BlockHeader, Vec<u8>), Failure> {
        let header = self.block_header(window, offset)?;
        let body = window
            .exact(&self.source, offset + header.header_len as u64, header.body_len as usize)
            .map_err(|error| Failure { error, declared_end: None })?
            .to_vec();
        Ok((header, body))
    }

    /// Parse the type and size varuints at `offset`; fails with `Truncated` when the block
    /// does not fit in the file.
    fn block_header(&self, window: &mut Window, offset: u64) -> Result<BlockHeader, Failure> {
        let truncated = Failure { error: TlogError::Truncated { offset }, declared_end: None };
        let head = window.peek(&self.source, offset, 2 * MAX_VARUINT_LEN).map_err(Failure::io)?;
        let mut pos = 0;
        let block_type = read_varuint(head, &mut pos).map_err(|e| Failure::framing(e, offset))?;
        let body_len = read_varuint(head, &mut pos).map_err(|e| Failure::framing(e, offset))?;
        let end = (offset + pos as u64).checked_add(body_len).filter(|&end| end <= self.len());
        match end {
            Some(end) => Ok(BlockHeader { block_type, header_len: pos, body_len, end }),
            None => Err(truncated),
        }
    }

    /// Parse and fully validate the block at `offset`.
    fn parse_block_at(&self, window: &mut Window, offset: u64) -> Result<Parsed, Failure> {
        let header = self.block_header(window, offset)?;
        let declared_end = Some(header.end);
        let fail = |error: TlogError| Failure { error, declared_end };
        let raw = window
            .exact(&self.source, offset, header.header_len + header.body_len as usize)
            .map_err(|error| Failure { error, declared_end: None })?;
        let body = &raw[header.header_len..];
        let mut verified = false;
        let event = match header.block_type {
            block_type::DATA => {
                let (block, had_crc) = parse_data(offset, header.header_len, raw).map_err(fail)?;
                verified = had_crc;
                Event::Data(block)
            }
            block_type::SCHEMA => Event::Schema(parse_schema(offset, body).map_err(fail)?),
            block_type::SEEK_MARKER => {
                verified = true;
                Event::SeekMarker(parse_seek_marker(offset, header.header_len, raw).map_err(fail)?)
            }
            block_type::INDEX => {
                if !body.ends_with(INDEX_TRAILER) {
                    return Err(fail(malformed(offset, "index block without TLOGIDEX trailer")));
                }
                verified = header.end == self.len();
                Event::Index
            }
            block_type::DICTIONARY => Event::Other,
            other => return Err(fail(malformed(offset, format!("unknown block type {other}")))),
        };
        Ok(Parsed { event, end: header.end, verified })
    }

    /// Whether a walk may trust a bad block's declared end: the file ends there or a header
    /// of a known block type starts there.
    fn plausible_block_start(&self, window: &mut Window, offset: u64) -> bool {
        if offset >= self.len() {
            return offset == self.len();
        }
        match self.block_header(window, offset) {
            Ok(header) => (block_type::SCHEMA..=block_type::SEEK_MARKER).contains(&header.block_type),
            Err(Failure { error: TlogError::Truncated { .. }, .. }) => true,
            Err(_) => false,
        }
    }
}

/// Iterator returned by [`FileReader::items`].
pub struct Items<'r> {
    walker: Walker<'r>,
    filter: ItemFilter,
    wanted_ids: HashSet<u64>,
    pending_error: Option<TlogError>,
}

impl Items<'_> {
    /// Offset the walk has reached (for progress bars).
    pub fn position(&self) -> u64 {
        self.walker.pos
    }
}

impl Iterator for Items<'_> {
    type Item = Result<Item, TlogError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(error) = self.pending_error.take() {
            return Some(Err(error));
        }
        let time_bounded = self.filter.from_us.is_some() || self.filter.to_us.is_some();
        loop {
            match self.walker.next()? {
                Event::Data(block) => {
                    let item = block.item;
                    if self.filter.record.is_some() && !self.wanted_ids.contains(&item.record_id) {
                        continue;
                    }
                    if time_bounded {
                        let Some(t) = item.timestamp_us else { continue };
                        if self.filter.from_us.is_some_and(|from| t < from)
                            || self.filter.to_us.is_some_and(|to| t > to)
                        {
                            continue;
                        }
                    }
                    return Some(Ok(item));
                }
                Event::Schema(schema_block) => {
                    if self.filter.record.as_deref() == Some(schema_block.name.as_str()) {
                        self.wanted_ids.insert(schema_block.id);
                    }
                }
                Event::SeekMarker(marker) => {
                    if self.filter.to_us.is_some_and(|to| marker.timestamp_us > to.saturating_add(TO_BOUND_SLACK_US)) {
                        self.walker.done = true;
                        return None;
                    }
                }
                Event::Error(error) => return Some(Err(error)),
                Event::Index | Event::Other => {}
            }
        }
    }
}

/// The items of a log that survived, for exporters: [`Items`] with every damaged block (and
/// the cut at the end of a log) skipped and counted in [`problems`](Self::problems), so
/// that an export of a damaged log writes what survived and says what did not. Returned by
/// [`FileReader::surviving_items`].
///
/// The caller counts its own kinds of damage (items that do not decode, data without a
/// schema) in the same [`Problems`], between items: `while let Some(item) = items.next()`
/// leaves `items.problems` free inside the loop, and the problems keep the order met.
pub struct SurvivingItems<'r> {
    items: Items<'r>,
    /// What was skipped so far (and what the caller noted).
    pub problems: Problems,
}

impl<'r> SurvivingItems<'r> {
    /// The items of `items`, damage counted in `problems` (which may already hold some:
    /// schemas that do not parse, say).
    pub fn new(items: Items<'r>, problems: Problems) -> Self {
        SurvivingItems { items, problems }
    }

    /// Offset the walk has reached (for progress bars).
    pub fn position(&self) -> u64 {
        self.items.position()
    }
}

impl Iterator for SurvivingItems<'_> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        loop {
            match self.items.next()? {
                Ok(item) => return Some(item),
                Err(error) => self.problems.note_read_error(&error),
            }
        }
    }
}

/// Iterator returned by [`FileReader::backwards`].
pub struct Backwards<'r> {
    reader: &'r FileReader,
    record_id: u64,
    /// The next block of the previous-offset chain to read.
    next: Option<u64>,
    window: Window,
    /// Once the chain breaks: the remaining items' offsets, latest last.
    fallback: Option<Vec<Result<Item, TlogError>>>,
}

impl Backwards<'_> {
    /// Collect, by a forward walk, this record's items that start before `before`.
    fn fall_back(&mut self, before: u64) {
        let mut found = Vec::new();
        let mut walker = Walker::new(self.reader, self.reader.data_start);
        walker.stop_at = Some(before);
        for event in walker {
            match event {
                Event::Data(block) if block.item.record_id == self.record_id => found.push(Ok(block.item)),
                // Errors already reported on the chain itself (at `before`) are not repeated.
                Event::Error(error) if error_offset(&error).is_some_and(|o| o < before) => found.push(Err(error)),
                _ => {}
            }
        }
        self.fallback = Some(found);
    }
}

impl Iterator for Backwards<'_> {
    type Item = Result<Item, TlogError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(rest) = &mut self.fallback {
            return rest.pop();
        }
        let offset = self.next.take()?;
        match self.reader.parse_block_at(&mut self.window, offset) {
            Ok(Parsed { event: Event::Data(block), .. }) if block.item.record_id == self.record_id => {
                match block.previous_offset {
                    Some(0) => {}
                    Some(back) if back <= offset && offset - back >= self.reader.data_start => {
                        self.next = Some(offset - back);
                    }
                    // No chain to follow (or a nonsensical one): find the rest the slow way.
                    _ => self.fall_back(offset),
                }
                Some(Ok(block.item))
            }
            Ok(_) => {
                self.fall_back(offset);
                Some(Err(malformed(offset, format!("expected a data block of record {} here", self.record_id))))
            }
            Err(failure) => {
                self.fall_back(offset);
                Some(Err(failure.error))
            }
        }
    }
}

/// What the walker found at one position.
enum Event {
    Data(DataBlock),
    Schema(SchemaBlock),
    SeekMarker(SeekMarker),
    Index,
    /// Reserved block types that carry nothing for a reader (compression dictionary).
    Other,
    /// A block that was reported and skipped, or the final truncation.
    Error(TlogError),
}

struct DataBlock {
    item: Item,
    previous_offset: Option<u64>,
}

struct SchemaBlock {
    offset: u64,
    id: u64,
    name: String,
    schema_bytes: Vec<u8>,
}

impl SchemaBlock {
    fn into_record(self, last_data_offset: Option<u64>) -> RecordInfo {
        let (schema, schema_error) = match Schema::parse_binary(&self.schema_bytes) {
            Ok(schema) => (Some(schema), None),
            Err(e) => (None, Some(e.to_string())),
        };
        RecordInfo {
            id: self.id,
            name: self.name,
            schema,
            schema_bytes: self.schema_bytes,
            schema_error,
            schema_offset: self.offset,
            last_data_offset,
        }
    }
}

struct BlockHeader {
    block_type: u64,
    header_len: usize,
    body_len: u64,
    end: u64,
}

struct Parsed {
    event: Event,
    end: u64,
    /// The block carried a CRC that matched (data with a checksum, seek marker) or is the
    /// index that ends the file: it cannot be garbage that merely looks like a block.
    verified: bool,
}

/// A block that could not be used, and where its framing says it ends (if it fits the file).
struct Failure {
    error: TlogError,
    declared_end: Option<u64>,
}

impl Failure {
    fn io(error: TlogError) -> Self {
        Failure { error, declared_end: None }
    }

    /// A varuint in the block header failed: running out of bytes means the file ends there.
    fn framing(error: TlogError, offset: u64) -> Self {
        let error = match error {
            TlogError::Truncated { .. } => TlogError::Truncated { offset },
            other => malformed(offset, format!("bad block header: {other}")),
        };
        Failure { error, declared_end: None }
    }
}

/// Walks blocks in file order from a block boundary, resynchronising after bad blocks.
///
/// After a bad block the walk is *suspect* until a block that proves itself (a matching CRC)
/// is read: the declared length of the first bad block is trusted only if a plausible block
/// header follows it, blocks that cannot prove themselves (schema blocks whose schema does
/// not parse, data blocks without a CRC, dictionaries) are treated as more garbage, and a
/// second failure jumps to the first valid seek marker after where the trouble began.
struct Walker<'r> {
    reader: &'r FileReader,
    window: Window,
    probe_window: Window,
    pos: u64,
    /// Stop before the block starting at or after this offset.
    stop_at: Option<u64>,
    /// Offset of the first bad block since the last verified one.
    suspect_since: Option<u64>,
    done: bool,
}

impl<'r> Walker<'r> {
    fn new(reader: &'r FileReader, start: u64) -> Self {
        Walker {
            reader,
            window: Window::default(),
            probe_window: Window::default(),
            pos: start,
            stop_at: None,
            suspect_since: None,
            done: false,
        }
    }

    fn next_seek_marker_after(&mut self, offset: u64) -> Option<u64> {
        match self.reader.find_seek_marker(offset + 1, self.reader.len()) {
            Ok(marker) => marker.map(|m| m.offset).filter(|&m| m > offset),
            Err(_) => None,
        }
    }

    /// A valid seek marker starting strictly inside `(offset, end)`: proof that a block
    /// claiming that extent is garbage (real blocks never contain one).
    fn marker_inside(&mut self, offset: u64, end: u64) -> Option<u64> {
        match self.reader.find_seek_marker(offset + 1, end) {
            Ok(Some(marker)) if marker.offset > offset && marker.offset < end => Some(marker.offset),
            _ => None,
        }
    }

    /// Decide where to continue after the block at `offset` failed, and what to report.
    fn recover(&mut self, offset: u64, error: TlogError, declared_end: Option<u64>) -> Event {
        if let TlogError::Io(_) = error {
            self.done = true;
            return Event::Error(error);
        }
        let first_failure = self.suspect_since.is_none();
        let origin = *self.suspect_since.get_or_insert(offset);
        if let TlogError::Truncated { .. } = error {
            // Either the file was cut inside this block, or its length field is corrupt;
            // only in the second case can a valid marker follow.
            return match self.next_seek_marker_after(origin) {
                Some(marker) => {
                    self.pos = marker;
                    Event::Error(malformed(offset, "block length runs past the end of the file"))
                }
                None => {
                    self.done = true;
                    Event::Error(TlogError::Truncated { offset })
                }
            };
        }
        let trust_length = first_failure
            && declared_end.is_some_and(|end| self.reader.plausible_block_start(&mut self.probe_window, end));
        let swallowed_marker = declared_end.and_then(|end| self.marker_inside(offset, end));
        let resume = if swallowed_marker.is_some() {
            swallowed_marker
        } else if trust_length {
            declared_end
        } else {
            // A marker found after `origin` may lie behind `offset` (garbage was walked over
            // it); going back to it is right, and it ends the episode, so this cannot loop.
            self.next_seek_marker_after(origin).or(declared_end.filter(|&end| end > offset))
        };
        match resume {
            Some(resume) => self.pos = resume,
            None => self.done = true,
        }
        Event::Error(error)
    }
}

impl Iterator for Walker<'_> {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        let len = self.reader.len();
        if self.done || self.pos >= len || self.stop_at.is_some_and(|s| self.pos >= s) {
            self.done = true;
            return None;
        }
        let offset = self.pos;
        match self.reader.parse_block_at(&mut self.window, offset) {
            Ok(parsed) if parsed.verified => {
                self.suspect_since = None;
                self.pos = parsed.end;
                Some(parsed.event)
            }
            Ok(parsed) if self.marker_inside(offset, parsed.end).is_some() => Some(self.recover(
                offset,
                malformed(offset, "block extends over a valid seek marker (corrupt length)"),
                Some(parsed.end),
            )),
            Ok(parsed) if self.suspect_since.is_none() || proves_itself(&parsed.event) => {
                self.pos = parsed.end;
                Some(parsed.event)
            }
            Ok(parsed) => Some(self.recover(
                offset,
                malformed(offset, "unverifiable block right after a corrupt one"),
                Some(parsed.end),
            )),
            Err(Failure { error, declared_end }) => Some(self.recover(offset, error, declared_end)),
        }
    }
}

/// Whether an unverified block is believable while the walk is suspect: only a schema block
/// whose schema parses.
fn proves_itself(event: &Event) -> bool {
    match event {
        Event::Schema(schema_block) => Schema::parse_binary(&schema_block.schema_bytes).is_ok(),
        _ => false,
    }
}

/// Parse a data block; also says whether a CRC was present (and matched).
fn parse_data(offset: u64, header_len: usize, raw: &[u8]) -> Result<(DataBlock, bool), TlogError> {
    let body = &raw[header_len..];
    let inner = |e: TlogError| malformed(offset, format!("data block: {e}"));
    let mut pos = 0;
    let record_id = read_varuint(body, &mut pos).map_err(inner)?;
    let flags = read_varuint(body, &mut pos).map_err(inner)?;
    if flags & !data_flags::KNOWN != 0 {
        return Err(TlogError::UnknownFlags { offset, flags });
    }
    let previous_offset = if flags & data_flags::PREVIOUS_OFFSET != 0 {
        Some(read_varuint(body, &mut pos).map_err(inner)?)
    } else {
        None
    };
    let timestamp_us =
        if flags & data_flags::TIMESTAMP != 0 { Some(read_i64(body, &mut pos).map_err(inner)?) } else { None };
    let has_crc = flags & data_flags::CHECKSUM != 0;
    if has_crc {
        let crc_at = header_len + pos;
        let stored = read_u32(body, &mut pos).map_err(inner)?;
        if crc_with_field_zeroed(raw, crc_at) != stored {
            return Err(TlogError::BadCrc { offset });
        }
    }
    let stored = &body[pos..];
    let data = match (flags & data_flags::SNAPPY != 0, flags & data_flags::ZSTD != 0) {
        (false, false) => stored.to_vec(),
        (true, false) => {
            let len = snap::raw::decompress_len(stored).map_err(|e| malformed(offset, format!("snappy: {e}")))?;
            if len > MAX_PAYLOAD {
                return Err(malformed(offset, format!("snappy payload claims {len} bytes")));
            }
            snap::raw::Decoder::new().decompress_vec(stored).map_err(|e| malformed(offset, format!("snappy: {e}")))?
        }
        (false, true) => {
            let mut data = Vec::new();
            let decoder =
                zstd::stream::read::Decoder::new(stored).map_err(|e| malformed(offset, format!("zstd: {e}")))?;
            decoder
                .take(MAX_PAYLOAD as u64 + 1)
                .read_to_end(&mut data)
                .map_err(|e| malformed(offset, format!("zstd: {e}")))?;
            if data.len() > MAX_PAYLOAD {
                return Err(malformed(offset, "zstd payload too large"));
            }
            data
        }
        (true, true) => return Err(malformed(offset, "both snappy and zstd flags set")),
    };
    Ok((DataBlock { item: Item { record_id, offset, timestamp_us, data }, previous_offset }, has_crc))
}

fn parse_schema(offset: u64, body: &[u8]) -> Result<SchemaBlock, TlogError> {
    let inner = |e: TlogError| malformed(offset, format!("schema block: {e}"));
    let mut pos = 0;
    let id = read_varuint(body, &mut pos).map_err(inner)?;
    let flags = read_varuint(body, &mut pos).map_err(inner)?;
    if flags != 0 {
        return Err(TlogError::UnknownFlags { offset, flags });
    }
    let name = read_string(body, &mut pos).map_err(inner)?.to_string();
    Ok(SchemaBlock { offset, id, name, schema_bytes: body[pos..].to_vec() })
}

fn parse_seek_marker(offset: u64, header_len: usize, raw: &[u8]) -> Result<SeekMarker, TlogError> {
    let body = &raw[header_len..];
    if (body.len() as u64) < SEEK_MARKER_MIN_BODY {
        return Err(malformed(offset, "seek marker too short"));
    }
    let inner = |e: TlogError| malformed(offset, format!("seek marker: {e}"));
    let mut pos = 0;
    if read_u64(body, &mut pos).map_err(inner)? != SEEK_MARKER_MAGIC {
        return Err(malformed(offset, "seek marker without magic"));
    }
    let crc_at = header_len + pos;
    let stored = read_u32(body, &mut pos).map_err(inner)?;
    if crc_with_field_zeroed(raw, crc_at) != stored {
        return Err(TlogError::BadCrc { offset });
    }
    let declared_header_len = body[pos];
    pos += 1;
    if usize::from(declared_header_len) != header_len {
        return Err(malformed(offset, format!("seek marker header_len {declared_header_len}, actual {header_len}")));
    }
    let flags = read_varuint(body, &mut pos).map_err(inner)?;
    if flags != 0 {
        return Err(TlogError::UnknownFlags { offset, flags });
    }
    let timestamp_us = read_i64(body, &mut pos).map_err(inner)?;
    let count = read_varuint(body, &mut pos).map_err(inner)?;
    if count > (body.len() - pos) as u64 / 2 {
        return Err(malformed(offset, format!("seek marker claims {count} entries")));
    }
    let mut back_offsets = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let id = read_varuint(body, &mut pos).map_err(inner)?;
        let back = read_varuint(body, &mut pos).map_err(inner)?;
        back_offsets.push((id, back));
    }
    Ok(SeekMarker { offset, timestamp_us, back_offsets })
}

/// CRC-32 of a whole block with the 4-byte CRC field at `crc_at` taken as zeros.
fn crc_with_field_zeroed(raw: &[u8], crc_at: usize) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&raw[..crc_at]);
    hasher.update(&[0; 4]);
    hasher.update(raw.get(crc_at + 4..).unwrap_or(&[]));
    hasher.finalize()
}

fn malformed(offset: u64, what: impl Into<String>) -> TlogError {
    TlogError::Malformed { offset, what: what.into() }
}

enum Source {
    Memory(Vec<u8>),
    File { file: File, len: u64 },
}

impl Source {
    fn len(&self) -> u64 {
        match self {
            Source::Memory(bytes) => bytes.len() as u64,
            Source::File { len, .. } => *len,
        }
    }
}

/// A cached run of file bytes for positioned reads; memory sources are sliced directly.
#[derive(Default)]
struct Window {
    start: u64,
    buf: Vec<u8>,
}

impl Window {
    /// Up to `len` bytes at `offset`: fewer only where the file ends.
    fn peek<'a>(&'a mut self, source: &'a Source, offset: u64, len: usize) -> Result<&'a [u8], TlogError> {
        let available = source.len().saturating_sub(offset).min(len as u64) as usize;
        match source {
            Source::Memory(bytes) => {
                let start = offset.min(bytes.len() as u64) as usize;
                Ok(&bytes[start..start + available])
            }
            Source::File { file, len: file_len } => {
                let cached_end = self.start + self.buf.len() as u64;
                if offset < self.start || offset + available as u64 > cached_end {
                    let fetch = (available.max(READ_CHUNK) as u64).min(file_len.saturating_sub(offset)) as usize;
                    self.buf.resize(fetch, 0);
                    let mut filled = 0;
                    while filled < fetch {
                        match file.read_at(&mut self.buf[filled..], offset + filled as u64) {
                            Ok(0) => break,
                            Ok(n) => filled += n,
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(e) => {
                                self.buf.clear();
                                return Err(TlogError::Io(e));
                            }
                        }
                    }
                    // A file that shrank after open reads short: that is a truncation.
                    self.buf.truncate(filled);
                    self.start = offset;
                }
                let from = (offset - self.start) as usize;
                let to = (from + available).min(self.buf.len());
                Ok(&self.buf[from..to])
            }
        }
    }

    /// Exactly `len` bytes at `offset`, or `Truncated`.
    fn exact<'a>(&'a mut self, source: &'a Source, offset: u64, len: usize) -> Result<&'a [u8], TlogError> {
        let bytes = self.peek(source, offset, len)?;
        if bytes.len() < len {
            return Err(TlogError::Truncated { offset });
        }
        Ok(bytes)
    }
}
