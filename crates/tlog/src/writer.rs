//! Writes TLOG0003 files: header, schema blocks, data blocks (previous-offset, timestamp,
//! CRC, Snappy), seek markers about once per interval of the timestamps, and the index on
//! close — so the result opens in mjlib's `FileReader`, `file_json_dump`, `tplot2` and
//! `file_reader.py`.
//!
//! This is the slow, allocating, blocking side of logging: it runs on a writer thread (see
//! [`crate::realtime`]), never on the real-time thread. It must never emit anything an mjlib
//! reader rejects unless the caller opted in (zstd), never record an offset that differs
//! from where the bytes actually go (offsets count the bytes accepted, into its buffer or the
//! destination, and buffered bytes are never dropped or reordered), never claim bytes are in
//! the file before the destination took them ([`FileWriter::landed_bytes`]), and never
//! overwrite a file: [`FileWriter::create`] creates exclusively.
//!
//! **Buffering.** The writer buffers by itself ([`FileWriter::with_buffer`]; `create` uses
//! [`FILE_BUFFER_BYTES`]) so that it knows exactly which bytes reached the destination and
//! which still wait in memory: with a full disk, blocks can be accepted into the buffer and
//! never reach the file, and counting them as written would hide the loss. Hand it an
//! unbuffered destination (a `File`, a `Vec`, a socket): bytes in a `BufWriter` given as the
//! destination count as landed although they are not in the file yet.
//!
//! Layout facts (checked against mjlib's writer and golden test bytes):
//! * data block: `02, size, id, flags, [prev_offset varuint], [ts i64], [crc u32], payload`;
//!   the CRC covers the whole block from its type byte, with the CRC field zeroed.
//! * seek marker: written right after a timestamped data block once at least the interval
//!   has passed since the previous marker (the first timestamp only starts the clock). Its
//!   CRC covers the whole block (type and size varuints included) with the CRC field zeroed
//!   and the header-length byte already filled in; it lists, in id order, every record that
//!   has data so far with `marker start − last data block start`.
//! * index: in id order, every record with a schema; the u32 before `TLOGIDEX` is the size
//!   of the whole index block.

use crate::format::{self, block_type, data_flags, write_string, write_varuint, TlogError, FILE_MAGIC};
use crate::schema::schema_of;
use crate::ser::to_bytes;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::marker::PhantomData;
use std::path::Path;

/// What goes into each data block and which extra blocks are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterOptions {
    /// Compress payloads with raw Snappy when that makes them smaller (mjlib default).
    pub snappy: bool,
    /// rtloop extension: compress with zstd at this level when smaller. Opt-in: mjlib's
    /// readers cannot open such blocks. Takes precedence over Snappy.
    pub zstd_level: Option<i32>,
    /// CRC-32 in every data block.
    pub checksum: bool,
    /// Back-pointer to the previous block of the same record in every data block.
    pub previous_offset: bool,
    /// Write a seek marker when the timestamps advanced this much since the last one.
    pub seek_marker_interval_us: Option<i64>,
    /// Write the index block on close.
    pub index: bool,
}

impl Default for WriterOptions {
    /// mjlib's writer defaults.
    fn default() -> Self {
        WriterOptions {
            snappy: true,
            zstd_level: None,
            checksum: true,
            previous_offset: true,
            seek_marker_interval_us: Some(1_000_000),
            index: true,
        }
    }
}

/// A registered record whose values are `T`; returned by [`FileWriter::register`].
pub struct RecordHandle<T> {
    id: u64,
    _value: PhantomData<fn(&T)>,
}

impl<T> RecordHandle<T> {
    /// The record id in the file.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl<T> Clone for RecordHandle<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for RecordHandle<T> {}
impl<T> std::fmt::Debug for RecordHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordHandle").field("id", &self.id).finish()
    }
}

/// What the writer remembers per record id.
#[derive(Debug)]
struct RecordState {
    name: String,
    schema_offset: Option<u64>,
    schema: Vec<u8>,
    last_data_offset: Option<u64>,
}

/// A TLOG0003 file being written to `W`.
pub struct FileWriter<W: Write> {
    /// The destination behind the writer's own buffer (capacity 0: unbuffered). Its buffer
    /// holds exactly the accepted bytes that have not reached the destination.
    out: BufWriter<W>,
    options: WriterOptions,
    /// Bytes accepted (in the buffer or the destination): the offset the next block starts at.
    position: u64,
    /// The latest data-block timestamp written so far.
    latest_timestamp_us: Option<i64>,
    ids_by_name: HashMap<String, u64>,
    records: BTreeMap<u64, RecordState>,
    next_id: u64,
    /// Timestamp of the last seek marker, or of the first timestamped block before any.
    seek_clock_us: Option<i64>,
    /// Scratch: the block being built.
    block: Vec<u8>,
    /// Scratch: a compressed payload.
    compressed: Vec<u8>,
    /// Scratch: a serialized payload (typed layer).
    payload: Vec<u8>,
    snappy: snap::raw::Encoder,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    closed: bool,
}

/// The write buffer of a file-backed writer. What a crash can lose is bounded by flushing
/// (see [`crate::realtime::FLUSH_INTERVAL`]), not by this size.
pub const FILE_BUFFER_BYTES: usize = 1 << 16;

impl FileWriter<File> {
    /// Create a new file with the default options (see [`create_with`](Self::create_with)).
    pub fn create(path: impl AsRef<Path>) -> Result<Self, TlogError> {
        Self::create_with(path, WriterOptions::default())
    }

    /// Create a new file with these options. The file is created exclusively (`O_EXCL`,
    /// which also refuses a symbolic link at `path`): a log never overwrites anything, be it
    /// an earlier log or whatever a link points at.
    pub fn create_with(path: impl AsRef<Path>, options: WriterOptions) -> Result<Self, TlogError> {
        let path = path.as_ref();
        let file = std::fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "{} already exists, and a log never overwrites a file: remove it or choose another path",
                        path.display()
                    ),
                )
            } else {
                e
            }
        })?;
        FileWriter::with_buffer(file, options, FILE_BUFFER_BYTES)
    }
}

impl<W: Write> FileWriter<W> {
    /// Start a log on `out`, unbuffered (every block goes to `out` as it is written): writes
    /// the header (`TLOG0003`, flags 0).
    pub fn new(out: W, options: WriterOptions) -> Result<Self, TlogError> {
        Self::with_buffer(out, options, 0)
    }

    /// Start a log on `out` through a buffer of `capacity` bytes (0: unbuffered), flushed
    /// when full and by [`flush`](Self::flush). `out` should not buffer itself (see the
    /// module docs).
    pub fn with_buffer(out: W, options: WriterOptions, capacity: usize) -> Result<Self, TlogError> {
        let zstd = match options.zstd_level {
            Some(level) => Some(zstd::bulk::Compressor::new(level)?),
            None => None,
        };
        let mut writer = FileWriter {
            out: BufWriter::with_capacity(capacity, out),
            options,
            position: 0,
            latest_timestamp_us: None,
            ids_by_name: HashMap::new(),
            records: BTreeMap::new(),
            next_id: 1,
            seek_clock_us: None,
            block: Vec::with_capacity(4096),
            compressed: Vec::new(),
            payload: Vec::new(),
            snappy: snap::raw::Encoder::new(),
            zstd,
            closed: false,
        };
        let mut header = Vec::with_capacity(9);
        header.extend_from_slice(FILE_MAGIC);
        write_varuint(&mut header, 0);
        writer.emit(&header)?;
        Ok(writer)
    }

    /// The options in effect.
    pub fn options(&self) -> &WriterOptions {
        &self.options
    }

    /// Bytes written so far (accepted into the buffer or the destination), = the next
    /// block's offset.
    pub fn bytes_written(&self) -> u64 {
        self.position
    }

    /// Bytes the destination has taken: every byte of the log before this offset is in the
    /// file (for a `File`: with the OS, so a crash of this process no longer loses it).
    pub fn landed_bytes(&self) -> u64 {
        self.position - self.unflushed_bytes()
    }

    /// Bytes accepted that still wait in the buffer, out of the file: a crash would lose
    /// them, and so would a destination that keeps refusing them (a full disk).
    pub fn unflushed_bytes(&self) -> u64 {
        self.out.buffer().len() as u64
    }

    /// The latest timestamp of any data block written so far.
    pub fn latest_timestamp_us(&self) -> Option<i64> {
        self.latest_timestamp_us
    }

    /// The destination (what it holds excludes [`unflushed_bytes`](Self::unflushed_bytes)).
    pub fn get_ref(&self) -> &W {
        self.out.get_ref()
    }

    /// The id for a record name: the existing one if the name has one, else the next free
    /// id (ids start at 1, as in mjlib).
    pub fn allocate_id(&mut self, name: &str) -> u64 {
        if let Some(&id) = self.ids_by_name.get(name) {
            return id;
        }
        while self.records.contains_key(&self.next_id) {
            self.next_id += 1;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.ids_by_name.insert(name.to_string(), id);
        self.records.insert(
            id,
            RecordState { name: name.to_string(), schema_offset: None, schema: Vec::new(), last_data_offset: None },
        );
        id
    }

    /// Write the schema block of an allocated id: `id, flags 0, name, schema bytes`.
    /// Writing the same schema again is a no-op; a different one is an error.
    pub fn write_schema(&mut self, id: u64, schema_binary: &[u8]) -> Result<(), TlogError> {
        self.check_open()?;
        let record = self.records.get(&id).ok_or_else(|| unknown_id(id))?;
        if record.schema_offset.is_some() {
            if record.schema == schema_binary {
                return Ok(());
            }
            return Err(TlogError::Unsupported(format!("record '{}' already has a different schema", record.name)));
        }
        let mut body = Vec::with_capacity(schema_binary.len() + record.name.len() + 8);
        write_varuint(&mut body, id);
        write_varuint(&mut body, 0); // schema block flags
        write_string(&mut body, &record.name);
        body.extend_from_slice(schema_binary);
        let start = self.position;
        self.emit_block(block_type::SCHEMA, &body)?;
        let record = self.records.get_mut(&id).ok_or_else(|| unknown_id(id))?;
        record.schema_offset = Some(start);
        record.schema = schema_binary.to_vec();
        Ok(())
    }

    /// Write one data block for `id` (whose schema must already be written) and, when due,
    /// a seek marker after it. Returns the offset of the data block.
    ///
    /// If the data block was written but the seek marker after it failed, the error is
    /// returned even though the data is in the file.
    pub fn write_data(&mut self, id: u64, timestamp_us: Option<i64>, payload: &[u8]) -> Result<u64, TlogError> {
        self.check_open()?;
        let record = self.records.get(&id).ok_or_else(|| unknown_id(id))?;
        if record.schema_offset.is_none() {
            return Err(TlogError::Unsupported(format!("record '{}' has data before its schema", record.name)));
        }
        let start = self.position;
        let previous_offset = record.last_data_offset.map_or(0, |last| start - last);

        let mut flags = 0;
        let mut compressed = std::mem::take(&mut self.compressed);
        let body_payload: &[u8] = match self.compress(payload, &mut compressed)? {
            Some(flag) => {
                flags |= flag;
                &compressed
            }
            None => payload,
        };

        let mut optional_len = 0;
        if self.options.previous_offset {
            flags |= data_flags::PREVIOUS_OFFSET;
            optional_len += format::varuint_len(previous_offset);
        }
        if timestamp_us.is_some() {
            flags |= data_flags::TIMESTAMP;
            optional_len += 8;
        }
        if self.options.checksum {
            flags |= data_flags::CHECKSUM;
            optional_len += 4;
        }
        let body_len = format::varuint_len(id) + format::varuint_len(flags) + optional_len + body_payload.len();

        let mut block = std::mem::take(&mut self.block);
        block.clear();
        write_varuint(&mut block, block_type::DATA);
        write_varuint(&mut block, body_len as u64);
        write_varuint(&mut block, id);
        write_varuint(&mut block, flags);
        if flags & data_flags::PREVIOUS_OFFSET != 0 {
            write_varuint(&mut block, previous_offset);
        }
        if let Some(ts) = timestamp_us {
            block.extend_from_slice(&ts.to_le_bytes());
        }
        let crc_at = block.len();
        if flags & data_flags::CHECKSUM != 0 {
            block.extend_from_slice(&[0; 4]);
        }
        block.extend_from_slice(body_payload);
        if flags & data_flags::CHECKSUM != 0 {
            let crc = format::crc32(&block);
            block[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
        }
        let result = self.emit(&block);
        self.block = block;
        self.compressed = compressed;
        result?;

        if let Some(record) = self.records.get_mut(&id) {
            record.last_data_offset = Some(start);
        }
        if let Some(ts) = timestamp_us {
            self.latest_timestamp_us = Some(self.latest_timestamp_us.map_or(ts, |latest| latest.max(ts)));
            self.maybe_write_seek_marker(ts)?;
        }
        Ok(start)
    }

    /// Allocate an id for `name`, derive the schema of `T` and write it.
    pub fn register<T: Serialize + Default>(&mut self, name: &str) -> Result<RecordHandle<T>, TlogError> {
        let schema = schema_of::<T>()?;
        let id = self.allocate_id(name);
        self.write_schema(id, &schema.to_binary())?;
        Ok(RecordHandle { id, _value: PhantomData })
    }

    /// Serialize `value` (into a reused buffer) and write it as a data block.
    pub fn write<T: Serialize>(
        &mut self,
        handle: &RecordHandle<T>,
        timestamp_us: i64,
        value: &T,
    ) -> Result<u64, TlogError> {
        let mut payload = std::mem::take(&mut self.payload);
        payload.clear();
        let result =
            to_bytes(value, &mut payload).and_then(|()| self.write_data(handle.id, Some(timestamp_us), &payload));
        self.payload = payload;
        result
    }

    /// Flush the buffer and the destination: every block written so far reaches the file
    /// (the OS), so a crash of this process no longer loses it. On an error, what did reach
    /// it is in [`landed_bytes`](Self::landed_bytes); the rest stays buffered, in order, for
    /// the next attempt.
    pub fn flush(&mut self) -> Result<(), TlogError> {
        self.out.flush()?;
        Ok(())
    }

    /// Write the index (if enabled) and flush. Later writes fail; returns the file size.
    pub fn finish(&mut self) -> Result<u64, TlogError> {
        self.check_open()?;
        self.closed = true;
        if self.options.index {
            self.write_index()?;
        }
        self.flush()?;
        Ok(self.position)
    }

    /// [`finish`](Self::finish), then hand back the destination.
    pub fn close(mut self) -> Result<W, TlogError> {
        if !self.closed {
            self.finish()?;
        }
        Ok(self.into_parts().0)
    }

    /// Give up on the log: the destination, and the bytes accepted that never reached it
    /// (no further attempt is made to write them, not even when this is dropped).
    pub fn into_parts(self) -> (W, Vec<u8>) {
        let (out, unwritten) = self.out.into_parts();
        // `Err` only if a write panicked; the buffer is then of no use anyway.
        (out, unwritten.unwrap_or_default())
    }

    /// Compress into `out` if enabled and smaller; returns the flag to set.
    fn compress(&mut self, payload: &[u8], out: &mut Vec<u8>) -> Result<Option<u64>, TlogError> {
        if payload.is_empty() {
            return Ok(None);
        }
        if let Some(zstd) = self.zstd.as_mut() {
            out.clear();
            out.reserve(zstd::zstd_safe::compress_bound(payload.len()));
            zstd.compress_to_buffer(payload, out).map_err(|e| TlogError::Compression(e.into()))?;
            // Only worth a flag that costs readers anything when it actually saves bytes.
            return Ok((out.len() < payload.len()).then_some(data_flags::ZSTD));
        }
        if self.options.snappy {
            out.resize(snap::raw::max_compress_len(payload.len()), 0);
            let len = self.snappy.compress(payload, out).map_err(|e| TlogError::Compression(e.into()))?;
            out.truncate(len);
            return Ok((len < payload.len()).then_some(data_flags::SNAPPY));
        }
        Ok(None)
    }

    fn maybe_write_seek_marker(&mut self, timestamp_us: i64) -> Result<(), TlogError> {
        let Some(interval) = self.options.seek_marker_interval_us else { return Ok(()) };
        match self.seek_clock_us {
            None => self.seek_clock_us = Some(timestamp_us),
            Some(last) if timestamp_us.saturating_sub(last) >= interval => {
                self.write_seek_marker(timestamp_us)?;
                self.seek_clock_us = Some(timestamp_us);
            }
            Some(_) => {}
        }
        Ok(())
    }

    fn write_seek_marker(&mut self, timestamp_us: i64) -> Result<(), TlogError> {
        let start = self.position;
        let mut body = Vec::with_capacity(32 + 4 * self.records.len());
        body.extend_from_slice(&format::SEEK_MARKER_MAGIC.to_le_bytes());
        let crc_in_body = body.len();
        body.extend_from_slice(&[0; 4]); // CRC, filled in below
        let header_len_in_body = body.len();
        body.push(0); // header length, filled in below
        write_varuint(&mut body, 0); // flags
        body.extend_from_slice(&timestamp_us.to_le_bytes());
        let with_data: Vec<(u64, u64)> =
            self.records.iter().filter_map(|(&id, r)| r.last_data_offset.map(|last| (id, start - last))).collect();
        write_varuint(&mut body, with_data.len() as u64);
        for (id, back) in with_data {
            write_varuint(&mut body, id);
            write_varuint(&mut body, back);
        }

        let mut block = Vec::with_capacity(body.len() + 4);
        write_varuint(&mut block, block_type::SEEK_MARKER);
        write_varuint(&mut block, body.len() as u64);
        let header_len = block.len();
        block.extend_from_slice(&body);
        // header_len lets a reader that found the magic back up to the block start.
        block[header_len + header_len_in_body] = header_len as u8;
        let crc = format::crc32(&block);
        block[header_len + crc_in_body..header_len + crc_in_body + 4].copy_from_slice(&crc.to_le_bytes());
        self.emit(&block)
    }

    fn write_index(&mut self) -> Result<(), TlogError> {
        let mut body = Vec::with_capacity(16 + 20 * self.records.len());
        write_varuint(&mut body, 0); // flags
        let with_schema: Vec<(u64, u64, u64)> = self
            .records
            .iter()
            .filter_map(|(&id, r)| r.schema_offset.map(|s| (id, s, r.last_data_offset.unwrap_or(u64::MAX))))
            .collect();
        write_varuint(&mut body, with_schema.len() as u64);
        for (id, schema_offset, last_data) in with_schema {
            write_varuint(&mut body, id);
            body.extend_from_slice(&schema_offset.to_le_bytes());
            body.extend_from_slice(&last_data.to_le_bytes());
        }
        let body_len = body.len() + 4 + format::INDEX_TRAILER.len();
        let total = format::varuint_len(block_type::INDEX) + format::varuint_len(body_len as u64) + body_len;
        body.extend_from_slice(&(total as u32).to_le_bytes());
        body.extend_from_slice(format::INDEX_TRAILER);
        self.emit_block(block_type::INDEX, &body)
    }

    fn emit_block(&mut self, kind: u64, body: &[u8]) -> Result<(), TlogError> {
        let mut block = Vec::with_capacity(body.len() + 12);
        write_varuint(&mut block, kind);
        write_varuint(&mut block, body.len() as u64);
        block.extend_from_slice(body);
        self.emit(&block)
    }

    /// Write all of `bytes`, counting exactly what was accepted (into the buffer or the
    /// destination) even on failure, so later offsets stay true to the file.
    fn emit(&mut self, bytes: &[u8]) -> Result<(), TlogError> {
        let mut done = 0;
        while done < bytes.len() {
            match self.out.write(&bytes[done..]) {
                Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into()),
                Ok(n) => {
                    done += n;
                    self.position += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn check_open(&self) -> Result<(), TlogError> {
        if self.closed {
            return Err(TlogError::Unsupported("the log is already closed".into()));
        }
        Ok(())
    }
}

fn unknown_id(id: u64) -> TlogError {
    TlogError::Unsupported(format!("record id {id} was never allocated"))
}
