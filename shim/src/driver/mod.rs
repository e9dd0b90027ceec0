//! CUDA driver interposition: how NCCL's cuMem / multicast / legacy IPC driver calls get
//! recorded although NCCL only ever reaches them through function pointers.
//!
//! NCCL's static cudart (and NCCL ≤ 2.20 itself) does `dlopen("libcuda.so.1")` and one
//! `dlsym(h, "cuGetProcAddress[_v2]")`, then asks that function for `cuGetProcAddress` again
//! and makes every further lookup through the answer. So: the `dlsym` trampoline
//! (`crate::symbols::dlsym`, which keeps `RTLD_NEXT` right for everyone else) asks
//! [`lookup::decide_cu`] and hands out our wrapper for `cuGetProcAddress[_v2]` and for watched
//! `cu*` names asked for directly (the DOCA path); [`lookup`] wraps the lookups, including the
//! self-lookup; the wrappers of [`exports`], one table row each in the shape of [`calls`], record
//! the watched calls
//! with their arguments, CUresult, caller and device identity ([`device`]). Nothing here
//! initializes CUDA or changes what the driver returns, and a process that never loads libcuda
//! pays one two-byte compare per `dlsym`.
//!
//! Lookups are counted in process-wide atomics ([`counters`]) and flushed into the dump header
//! (`SHIM_DRIVER_LOOKUPS` / `SHIM_DRIVER_WRAPPED`) only once a dump exists: a lookup alone
//! never creates the file.
//!
//! x86_64 Linux only (the trampoline and the caller-capturing stubs are x86_64 assembly);
//! elsewhere nothing is interposed and driver calls are simply not recorded.

// Elsewhere the counters and slot table have no users.
#![cfg_attr(
    not(all(target_os = "linux", target_arch = "x86_64")),
    allow(dead_code)
)]

pub mod cuda;
pub mod watch;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod calls;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod device;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod errtext;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod exports;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) mod lookup;

pub mod counters;
pub use counters::{flush_counters, lookup_counts};

/// Called when the shim's dump is created: flushes the lookup counts.
pub fn on_recorder_created(rec: &'static ncclshim_dump::Recorder) {
    counters::flush_counters(rec);
}
