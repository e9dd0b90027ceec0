//! `libnccl-profiler-ncclshim.so`: an NCCL profiler plugin that records per-collective and
//! per-p2p events (with GPU kernel times) into a crash-safe ncclshim dump, for every profiler
//! ABI NCCL has shipped (`ncclProfiler_v1` ... `ncclProfiler_v7`).
//!
//! Each `vN` module only translates its version's descriptor: for the default mask's
//! straight-line [`hot`] path (through [`hot::HotDescr`]), and into one normalized
//! [`state::Start`] for the general path; [`core`] writes the records, makes allocation-free [`handle`]s, resolves per-communicator
//! [`ctx`]s and keeps the running [`agg`]regates in the dump. [`mask`] reads `NCCLSHIM_PROFILE`;
//! [`state`] holds what they all share (the recorder, the mask, the normalized event), below
//! them, so the modules import one way (`profiler-plugin/tests/import_layers.rs` keeps it so).
//! The library is linked `-z nodelete` (NCCL dlcloses and reloads it) and all global state is
//! initialized lazily and idempotently. `docs/profiler.md` describes the records and the
//! aggregate layout.

#[macro_use]
pub mod abi;
pub mod agg;
pub mod core;
pub mod ctx;
pub mod handle;
#[macro_use]
pub mod hot;
pub mod mask;
pub mod names;
#[cfg(feature = "reader")]
pub mod reader;
pub mod state;
pub mod translate;
pub mod v1;
pub mod v2;
pub mod v3;
pub mod v4;
pub mod v5;
pub mod v6;
pub mod v7;
