//! The driver's own words for a failed call: `cuGetErrorString(rc)` ("invalid device ordinal"),
//! attached to the record as its error text, the way NCCL prints `Cuda failure 101 'invalid
//! device ordinal'`. One blob per distinct CUresult per dump, so a call failing in a loop cannot
//! fill the arena.

use super::cuda::CuResult;
use super::device;
use ncclshim_dump::schema::slot_flags;
use ncclshim_dump::{BlobKind, PendingCall, Recorder};
use std::sync::atomic::{AtomicU64, Ordering};

/// CUresult values that get a cached text (all the driver defines are below 1000).
const CACHED: usize = 1024;
/// Per CUresult: `tag << 48 | blob offset` of the text in the dump whose tag it is (0: none).
static BLOB: [AtomicU64; CACHED] = [const { AtomicU64::new(0) }; CACHED];
const OFFSET_BITS: u32 = 48;

/// A 16-bit tag of the dump (a forked child writes a new dump; an offset into the parent's is
/// meaningless there). Never 0, so a zero entry means "not cached".
fn tag(rec: &Recorder) -> u64 {
    let a = rec as *const Recorder as u64;
    ((a >> 4) ^ (a >> 20) ^ (a >> 36)) & 0xffff | 1
}

/// Attaches the driver's text for `rc` to the pending record (when the driver has one).
pub fn attach(rec: &Recorder, pending: &PendingCall, rc: CuResult) {
    let Some(i) = usize::try_from(rc).ok().filter(|&i| i > 0 && i < CACHED) else {
        return;
    };
    let t = tag(rec);
    let cached = BLOB[i].load(Ordering::Acquire);
    let off = if cached >> OFFSET_BITS == t {
        cached & ((1 << OFFSET_BITS) - 1)
    } else {
        let Some(text) = device::error_string(rc) else {
            return;
        };
        let off = rec.append_blob(BlobKind::ErrorText, text.to_bytes());
        if off == 0 || off >> OFFSET_BITS != 0 {
            return;
        }
        // Two threads may both append the first time; either blob is right.
        BLOB[i].store(t << OFFSET_BITS | off, Ordering::Release);
        off
    };
    pending.set_blob(off, slot_flags::HAS_ERROR_TEXT);
}
