//! The ncclshim dump format: the contract between the in-process recorders (`libncclshim.so`,
//! the NCCL profiler plugin) and the `ncclshim` CLI, shared by both sides.
//!
//! One file per writing component per process, laid out in [`layout`]: a header page, one
//! single-writer ring of 128-byte slots per thread, an append-only blob arena, the keep ring and
//! the communicator table. [`schema`] and [`profnames`] say what the numbers in a slot mean,
//! [`aggregates`] how the profiler's running totals are laid out, [`timebase`] how its timestamps map to CLOCK_MONOTONIC, [`liveness`] whether its writer may
//! still be running. The [`reader`] (feature `reader`) decodes any file, including corrupt,
//! truncated and still-growing ones, without panicking. The writer and the process runtime
//! around it are `ncclshim-dump`; `docs/format.md` describes the format field by field.

pub mod aggregates;
pub mod layout;
pub mod liveness;
pub mod profnames;
#[cfg(feature = "reader")]
pub mod reader;
pub mod result;
pub mod schema;
pub mod timebase;

pub use layout::{ExitVia, WriterKind};
pub use result::NcclResult;
pub use schema::{args, ArgView, BlobKind, CallId, RecordKind, SlotRef};
