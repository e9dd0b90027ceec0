//! Clock anchors: TSC/monotonic pairs stored in the header on rare paths, so a TSC dump's times
//! can be converted to nanoseconds however long the job runs.

use crate::clock;
use ncclshim_format::layout::*;
use std::ptr;
use std::sync::atomic::{fence, Ordering};

/// A ring adds a clock anchor every this many records (a mask: every 16,384th), so a long job's
/// TSC-to-nanosecond conversion is refreshed without a clock_gettime on the ordinary path.
pub(super) const ANCHOR_EVERY_MASK: u64 = (1 << 14) - 1;

pub(super) fn add_anchor(h: &FileHeader, a: ncclshim_format::layout::ClockAnchor) {
    let n = h.next_anchor.fetch_add(1, Ordering::Relaxed);
    let slot = &h.anchors[n as usize % CLOCK_ANCHORS];
    // SAFETY: anchor slots are reserved by the fetch_add above; the one writer of this slot
    // invalidates it, fills it and publishes it (a writer 32 anchors later could collide only
    // after 32 more refreshes during these few stores; the reader drops implausible pairs).
    unsafe {
        let p = (slot as *const ncclshim_format::layout::ClockAnchor).cast_mut();
        (*p).seq.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        ptr::addr_of_mut!((*p).tsc).write(a.tsc);
        ptr::addr_of_mut!((*p).monotonic_ns).write(a.monotonic_ns);
        (*p).seq.store(u64::from(n) + 1, Ordering::Release);
    }
}

/// Adds an anchor to a TSC dump (rare paths only: ring claims, blobs, every 16,384 records),
/// out of line. `extern "C"` tells the compiler that no panic can unwind out of it into the
/// record path, which the profiler's unguarded hot path needs proven (`no_panic` there);
/// `no_panic` here proves the other half: nothing in it can panic, so the abort that an
/// unwinding `extern "C"` function would cause cannot happen.
#[cfg_attr(not(debug_assertions), no_panic::no_panic)]
#[cold]
#[inline(never)]
pub(super) extern "C" fn refresh_anchor(h: &FileHeader) {
    if h.clock_kind == clock::ClockKind::Tsc as u32 {
        add_anchor(h, clock::anchor());
    }
}
