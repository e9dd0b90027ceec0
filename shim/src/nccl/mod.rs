//! NCCL API interposition. Placeholder.

/// Called once when the shim's dump file is created (first NCCL event): take the snapshots.
pub fn on_recorder_created(_recorder: &'static ncclshim_dump::Recorder) {}
