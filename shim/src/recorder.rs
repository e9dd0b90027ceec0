//! The shim's process-wide recorder and the guard every exported hook runs its recording in:
//! reentrancy guard (NCCL calls its own API through the PLT, and our own helpers may reach
//! hooked functions), errno preserved, panics caught and turned into "recording disabled".

use ncclshim_dump::process::ProcessRecorder;
use ncclshim_dump::{Recorder, RingWriter, WriterKind};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The shim's dump (`*.shim.ncclshim`), created by the first [`record`].
pub static SHIM: ProcessRecorder = ProcessRecorder::new(WriterKind::Shim, 0);

thread_local! {
    /// Depth of recording work on this thread; > 0 means we are inside our own code.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// The once-per-file work, done by the `record` call that created the file, in its frame (under
/// its reentrancy guard, errno save and panic catch) before its own record.
#[cold]
fn on_create(recorder: &'static Recorder, ring: &RingWriter) {
    crate::signals::install(recorder);
    crate::nccl::on_recorder_created(recorder, ring);
    crate::driver::on_recorder_created(recorder);
}

/// Whether the calling thread is already inside shim code (a nested hook must only forward).
#[inline]
pub fn in_shim() -> bool {
    DEPTH.try_with(|d| d.get() > 0).unwrap_or(true)
}

struct DepthGuard;

impl DepthGuard {
    #[inline]
    fn enter() -> Option<Self> {
        DEPTH
            .try_with(|d| {
                let v = d.get();
                d.set(v + 1);
                (v == 0).then_some(Self)
            })
            .ok()
            .flatten()
            .or_else(|| {
                // Nested: undo our increment (only when the TLS was reachable).
                let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
                None
            })
    }
}

impl Drop for DepthGuard {
    #[inline]
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// As [`record`], with the keep ring instead of the thread's own ring (where a file has one):
/// for rare records that must survive any number of hot calls.
#[inline]
pub fn record_keep<R>(f: impl FnOnce(&'static Recorder, &RingWriter) -> R) -> Option<R> {
    record(|r, w| f(r, &r.keep_writer_or(w)))
}

/// Runs recording work `f` with this thread's ring: not at all when nested or not recording,
/// with errno saved and restored, and with any panic caught (recording is then disabled for
/// the rest of the process). Returns `None` whenever nothing was recorded.
#[inline]
pub fn record<R>(f: impl FnOnce(&'static Recorder, &RingWriter) -> R) -> Option<R> {
    let _guard = DepthGuard::enter()?;
    // SAFETY: __errno_location always returns the calling thread's valid errno pointer.
    let errno_ptr = unsafe { libc::__errno_location() };
    // SAFETY: as above; reading an int.
    let saved = unsafe { *errno_ptr };
    let out = catch_unwind(AssertUnwindSafe(|| {
        SHIM.with_ring_noting_creation(|r, w, created| {
            if created {
                on_create(r, w);
            }
            f(r, w)
        })
    }));
    // SAFETY: as above; restoring the caller's errno.
    unsafe { *errno_ptr = saved };
    match out {
        Ok(v) => v,
        Err(_) => {
            SHIM.disable("internal panic while recording");
            None
        }
    }
}
