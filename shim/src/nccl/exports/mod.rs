//! The exported `nccl*` functions, by family: [`init`] (version, uniqueId, communicator
//! creation), [`ops`] (groups, collectives, p2p), [`teardown`] (finalize, destroy, abort,
//! revoke, the async-error poll), [`lifecycle`] (suspend, resume, a communicator's unique id,
//! custom reduction operators) and [`memory`] (allocation, registration, windows); the shape
//! they share is [`shape`], the communicator-created record [`created`]. Each one: resolve the real `pncclX` (or return
//! ncclInternalError with a note when the loaded NCCL lacks it), record the entry, forward,
//! complete the record, return NCCL's result untouched. Argument layouts follow
//! `ncclshim_dump::schema`; signed integers are stored sign-extended (so -1, "not
//! applicable", reads as u64::MAX).
//!
//! Every export is `#[no_mangle] pub unsafe extern "C"` with NCCL's exact C signature (from
//! nccl.h; see nccl-facts §4.1–4.2) and runs inside `call::boundary`, so no panic unwinds into C.
//!
//! SAFETY (for the raw-pointer reads in these bodies): the shim reads a caller's pointer only
//! where NCCL itself reads or writes it under the same contract, and only after a null check:
//! out-pointers (`newcomm`, `version`, `id`, `ptr`, `handle`, `win`) after NCCL returned success
//! or InProgress, in-arrays (`devlist`, `exclude`, `ids`) within the counts the caller passed,
//! `ncclConfig_t` within its declared size (`config.rs`).
//!
//! Every family module re-exports here, so the export list (`super::handles`) names
//! `crate::nccl::exports::ncclX` whichever file defines it.

mod created;
mod shape;

pub mod init;
pub mod lifecycle;
pub mod memory;
pub mod ops;
pub mod teardown;

pub use init::*;
pub use lifecycle::*;
pub use memory::*;
pub use ops::*;
pub use teardown::*;
