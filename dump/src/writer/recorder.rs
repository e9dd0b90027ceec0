//! One open, mapped dump file ([`Recorder`]): what it holds, and the header's live fields it
//! updates (liveness, flags, counters, exit marks, the signal record).

use crate::clock;
use ncclshim_format::layout::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// One open, mapped dump file. Lives for the rest of the process (its mapping is never unmapped).
pub struct Recorder {
    pub(super) base: *mut u8,
    pub(super) geometry: Geometry,
    /// Absolute, so that growing the file still finds it after the host changes directory.
    pub(super) path: PathBuf,
    /// `(st_dev, st_ino)` of the file: growth reopens `path` and refuses any other file there.
    pub(super) file_id: (u64, u64),
    /// The mapping's slot in [`fault_guard`](crate::fault_guard) (`None`: not guarded).
    pub(super) guard_slot: Option<usize>,
}

// SAFETY: the mapping is shared memory; all concurrent access goes through atomics (header live
// fields, ring heads, commit words) or through slots that exactly one thread owns at a time.
unsafe impl Send for Recorder {}

// SAFETY: as above.
unsafe impl Sync for Recorder {}

impl Recorder {
    /// Whether the file was truncated under the live mapping (now anonymous memory; see
    /// [`fault_guard`](crate::fault_guard)).
    pub fn mapping_lost(&self) -> bool {
        self.guard_slot.is_some_and(crate::fault_guard::is_lost)
    }

    /// The mapping's start address (to match a fault address against).
    pub(crate) fn mapping_base(&self) -> usize {
        self.base as usize
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    pub fn header(&self) -> &FileHeader {
        // SAFETY: the header page is mapped for the recorder's lifetime and its mutable fields
        // are atomics.
        unsafe { &*self.base.cast::<FileHeader>() }
    }

    /// Notes a sign of life that writes no record (a deduplicated poll): raises `last_alive`.
    #[inline]
    pub fn note_alive(&self) {
        let t = clock::now();
        let alive = &self.header().ext.last_alive;
        if alive.load(Ordering::Relaxed) < t {
            alive.store(t, Ordering::Relaxed);
        }
    }

    /// The header's fatal-signal record (written by the shim's signal handler).
    pub fn signal_record(&self) -> &SignalRecord {
        &self.header().ext.signal
    }

    /// Counts a return of the program's own handler for a watched fatal signal (the shim's
    /// handler chained to it, and it came back: the process goes on).
    pub fn note_signal_handler_returned(&self) {
        self.header()
            .ext2
            .signal_handler_returns
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Sets header flag bits (`layout::flags`).
    pub fn set_flag(&self, bits: u32) {
        self.header().flags.fetch_or(bits, Ordering::Release);
    }

    pub fn add_counter(&self, index: usize, n: u64) {
        if let Some(c) = self.header().counters.get(index) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Records that the process called `exit` / `_exit` / `_Exit` with `status` (`via`:
    /// `layout::exit_via`). Async-signal-safe and allocation-free (a vDSO clock read and atomic
    /// stores into the never-unmapped mapping), so it may run inside `_exit` in a forked child.
    /// The last call wins: an atexit handler that calls `_exit` replaces `exit`'s record.
    pub fn mark_exit_call(&self, via: u32, status: i32) {
        let x = &self.header().ext2;
        x.exit_status.store(status, Ordering::Relaxed);
        x.exit_call_monotonic_ns
            .store(clock::monotonic_ns(), Ordering::Relaxed);
        x.exit_via.store(via, Ordering::Release);
    }

    /// Marks a normal exit (from an atexit handler).
    pub fn mark_clean_exit(&self) {
        let h = self.header();
        h.exit_monotonic_ns
            .store(clock::monotonic_ns(), Ordering::Relaxed);
        h.flags.fetch_or(flags::CLEAN_EXIT, Ordering::Release);
    }
}
