//! # rtloop-tlog — mjlib TLOG0003 telemetry logs
//!
//! Files this crate writes open in mjlib's own tools (C++ `FileReader`, `file_json_dump`,
//! `tplot2`, Python `file_reader.py`), and it reads theirs.
//!
//! * [`format`](mod@format) — wire constants, varuints, CRC, the error type.
//! * [`schema`] — the binary schema model and [`schema::schema_of`] for serde types.
//! * [`ser`] — the data encoding matching those schemas.
//! * [`writer`] — blocks, flags, seek markers and the index, onto any `Write`.
//! * [`realtime`] — a wait-free hand-off so the real-time thread never waits on logging (and a
//!   waiting one for runs without a deadline).
//! * [`reader`], [`value`], [`export`], [`plot`] — reading, decoding, exporting, plotting.
//! * [`columns`] — a record read into typed column buffers (what `rtloop.tlog` hands numpy),
//!   whole or a chunk at a time.
//! * Parquet tables are the `rtloop-parquet` crate's, on top of [`columns`] and [`reader`].
//! * [`survey`] — what a log holds and every kind of damage in it, counted with offsets.
//!
//! The simulated servo's diagnostic console uses the telemetry encoding (`format`, `schema`,
//! `ser`, `value`) to answer `tel schema` / `tel get` with the bytes a log carries — one
//! implementation. The crate has no optional features: whatever the cargo command
//! (`-p rtloop-sim`, `--workspace`), it is built once, the same way.
//!
//! Must never: write anything an mjlib reader cannot open unless the caller opted in to an
//! extension (zstd), or make the real-time side allocate, lock or block.

#![forbid(unsafe_code)]

pub mod columns;
pub mod export;
pub mod format;
pub mod plot;
pub mod reader;
pub mod realtime;
pub mod schema;
pub mod ser;
pub mod survey;
pub mod value;
pub mod writer;
