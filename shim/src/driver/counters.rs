//! How many driver lookups went through the hooks and how many were answered with a recording
//! wrapper: process-wide atomics, added to the dump header (`SHIM_DRIVER_LOOKUPS` /
//! `SHIM_DRIVER_WRAPPED`) only once a dump exists, so a lookup alone never creates the file.

use ncclshim_dump::layout::counters;
use ncclshim_dump::Recorder;
use std::sync::atomic::{AtomicU64, Ordering};

/// Lookups / wrapped lookups since the process started (never reset).
static LOOKUPS: AtomicU64 = AtomicU64::new(0);
static WRAPPED: AtomicU64 = AtomicU64::new(0);
/// Not yet added to a dump header.
static LOOKUPS_PENDING: AtomicU64 = AtomicU64::new(0);
static WRAPPED_PENDING: AtomicU64 = AtomicU64::new(0);

/// Driver lookups that went through the hooks, and how many of them were answered with a
/// recording wrapper, since the process started.
pub fn lookup_counts() -> (u64, u64) {
    (
        LOOKUPS.load(Ordering::Relaxed),
        WRAPPED.load(Ordering::Relaxed),
    )
}

#[inline]
pub(crate) fn count_lookup() {
    LOOKUPS.fetch_add(1, Ordering::Relaxed);
    LOOKUPS_PENDING.fetch_add(1, Ordering::Relaxed);
    flush_if_recording();
}

#[inline]
pub(crate) fn count_wrapped() {
    WRAPPED.fetch_add(1, Ordering::Relaxed);
    WRAPPED_PENDING.fetch_add(1, Ordering::Relaxed);
    flush_if_recording();
}

#[inline]
fn flush_if_recording() {
    if let Some(rec) = crate::runtime::recorder::SHIM.existing() {
        flush_counters(rec);
    }
}

/// Adds the lookups counted so far to `rec`'s header. Also meant for the recorder's creation
/// hook, so counts from before the first event land in the file at once.
#[inline]
pub fn flush_counters(rec: &Recorder) {
    // Plain loads first: every recorded driver call comes here, and the pending counts are
    // almost always zero by then; a locked swap each time would cost more than the record.
    for (pending, index) in [
        (&LOOKUPS_PENDING, counters::SHIM_DRIVER_LOOKUPS),
        (&WRAPPED_PENDING, counters::SHIM_DRIVER_WRAPPED),
    ] {
        if pending.load(Ordering::Relaxed) != 0 {
            let n = pending.swap(0, Ordering::Relaxed);
            rec.add_counter(index, n);
        }
    }
}
