//! The ncclshim dump format: the contract between the in-process recorders (`libncclshim.so`,
//! the NCCL profiler plugin) and the `ncclshim` CLI.
//!
//! One file per writing component per process, laid out in [`layout`]: a header page, one
//! single-writer ring of 128-byte slots per thread, and an append-only blob arena. The
//! [`writer`] makes every record durable the moment it is stored (the file is `MAP_SHARED`), so a
//! SIGKILLed or crashed process leaves a readable dump; [`process`] wraps it in the lazy,
//! fork-aware, never-failing lifecycle the recorders need. The [`reader`] (feature `reader`)
//! decodes any file, including corrupt, truncated and still-growing ones, without panicking.
//! `docs/format.md` describes the format field by field.

pub mod clock;
pub mod config;
pub mod identity;
pub mod layout;
pub mod process;
pub mod profnames;
#[cfg(feature = "reader")]
pub mod reader;
pub mod run;
pub mod schema;
pub mod writer;

pub use layout::WriterKind;
pub use schema::{BlobKind, CallId, RecordKind};
pub use writer::{Entry, PendingCall, Recorder, RingWriter, SlotRef};
