//! The ncclshim recorder runtime: the crash-safe writer of the dump format
//! (`ncclshim-format`) and the process lifecycle the in-process recorders need.
//!
//! The [`writer`] makes every record durable the moment it is stored (the file is
//! `MAP_SHARED`), so a SIGKILLed or crashed process leaves a readable dump; [`process`] wraps
//! it in the lazy, fork-aware, never-failing lifecycle (atexit mark, disable-on-failure);
//! [`clock`] picks and calibrates the time base, [`settings`] defines every `NCCLSHIM_*` variable and [`config`] reads the sizes, [`dumpdir`] opens the
//! dump directory safely, [`fault_guard`] keeps a truncated dump from killing the host,
//! [`identity`] and [`run`] say who is writing, [`own_stack`] keeps the rare heavy work off the
//! host thread's stack. The format's vocabulary is re-exported so a
//! recorder names one crate; readers depend on `ncclshim-format` alone.

pub mod clock;
pub mod config;
pub mod dumpdir;
pub mod fault_guard;
pub mod identity;
pub mod own_stack;
pub mod process;
pub mod run;
pub mod settings;
pub mod signal_chain;
pub mod writer;

pub use ncclshim_format::{arg_index, layout, profnames, schema};
pub use ncclshim_format::{BlobKind, CallId, RecordKind, SlotRef, WriterKind};
pub use writer::{CommEntryWriter, Entry, PendingCall, Recorder, RingWriter};
