//! NCCL API interposition: every exported `nccl*` wrapper ([`exports`]) records its call into the
//! shim's dump and forwards to NCCL's real `pnccl*` entry point ([`resolve`]), returning
//! exactly what NCCL returned. Around that: the uniqueId / commHash hash ([`hash`]), the
//! per-communicator counters ([`comms`]), the library slots ([`libs`]) and handle-lookup
//! bindings ([`handles`]), the `ncclConfig_t` and `ncclCollConfig_t` readers ([`config`], [`coll_config`]) and the environment / library /
//! host snapshots ([`snapshot`]). Never imports `crate::driver`: the two are siblings over
//! `crate::runtime` and `crate::symbols`.

pub mod call;
pub mod coll_config;
pub mod comms;
pub mod config;
pub mod exports;
pub mod ffi;
pub mod handles;
pub mod hash;
pub mod libs;
pub mod resolve;
pub mod snapshot;

/// Called once when the shim's dump file is created (first NCCL event), on the creating
/// thread inside `record`, with the ring its pending record will use: take the snapshots.
pub fn on_recorder_created(r: &'static ncclshim_dump::Recorder, w: &ncclshim_dump::RingWriter) {
    snapshot::take(r, &r.keep_writer_or(w), snapshot::Reason::FirstEvent, true);
}
