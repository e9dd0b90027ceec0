//! The shim's process-wide recorder and the guard every exported hook runs its recording in:
//! reentrancy guard (NCCL calls its own API through the PLT, and our own helpers may reach
//! hooked functions), errno preserved, panics caught and turned into "recording disabled".
//!
//! The once-per-file setup (fatal-signal handlers, first snapshots, driver lookup counts) belongs
//! to the layers above; `lib.rs` registers it as one function pointer ([`register_setup`]) from
//! the library's constructor, so this layer never calls them by name. A file created before the
//! constructor ran (another library's constructor calling NCCL first) gets its setup when the
//! registration comes: the creator and the registrar agree, through two sequentially consistent
//! flags, on which of them runs it, exactly once.
//!
//! That setup, the file's creation and a thread's first ring are the heavy work (paths, `/proc`,
//! JSON, `getifaddrs`); it runs on the recorder's own stack ([`ncclshim_dump::own_stack`]), never
//! on the host thread's, which may be small. The hot path stays on the caller's stack.

use ncclshim_dump::own_stack::catch_unwind_on_own_stack;
use ncclshim_dump::process::ProcessRecorder;
use ncclshim_dump::{Recorder, RingWriter, WriterKind};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The shim's dump (`*.shim.ncclshim`), created by the first [`record`].
pub static SHIM: ProcessRecorder = ProcessRecorder::new(WriterKind::Shim, 0);

thread_local! {
    /// Depth of recording work on this thread; > 0 means we are inside our own code.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// The once-per-file work the layers above do when the shim's dump is created.
pub type Setup = fn(&'static Recorder, &RingWriter);

/// The registered [`Setup`] as an address (0: none registered yet).
static SETUP: AtomicUsize = AtomicUsize::new(0);
/// A file was created while no setup was registered: the registration runs it.
static SETUP_OWED: AtomicBool = AtomicBool::new(false);

/// Registers the once-per-file setup (`lib.rs`, from the library constructor). If a file was
/// created before this, its setup runs now, on this thread, under [`record`]'s guard.
pub fn register_setup(setup: Setup) {
    SETUP.store(setup as usize, Ordering::SeqCst);
    if SETUP_OWED.swap(false, Ordering::SeqCst) {
        record_heavy(setup);
    }
}

/// The once-per-file work, done by the `record` call that created the file, in its frame (under
/// its reentrancy guard, errno save and panic catch) before its own record. Never inlined: it
/// runs once per file, and the hot wrappers that inline `record` should not carry it.
#[cold]
#[inline(never)]
fn on_create(recorder: &'static Recorder, ring: &RingWriter) {
    // Owed first, then look: whichever of this and `register_setup` comes second sees the
    // other's store, and the swap lets exactly one of them run the setup.
    SETUP_OWED.store(true, Ordering::SeqCst);
    let setup = SETUP.load(Ordering::SeqCst);
    if setup != 0 && SETUP_OWED.swap(false, Ordering::SeqCst) {
        // SAFETY: SETUP only ever holds 0 or a `Setup` stored by `register_setup`.
        let setup = unsafe { std::mem::transmute::<usize, Setup>(setup) };
        setup(recorder, ring);
    }
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

/// As [`record_keep`], always on the recorder's own stack: for rare work that needs more stack
/// than a host thread may have (snapshots: JSON, `/proc`, the loaded libraries).
pub fn record_keep_heavy<R>(f: impl FnOnce(&'static Recorder, &RingWriter) -> R) -> Option<R> {
    guarded(|r, w| f(r, &r.keep_writer_or(w)), true)
}

/// As [`record`], always on the recorder's own stack (see [`record_keep_heavy`]).
pub fn record_heavy<R>(f: impl FnOnce(&'static Recorder, &RingWriter) -> R) -> Option<R> {
    guarded(f, true)
}

/// Runs recording work `f` with this thread's ring: not at all when nested or not recording,
/// with errno saved and restored, and with any panic caught (recording is then disabled for
/// the rest of the process). Returns `None` whenever nothing was recorded.
///
/// The call that creates the file (and runs the once-per-file setup) and a thread's first call
/// (which claims its ring) run on the recorder's own stack, not the caller's: a host thread with
/// a small stack then needs no more of it for its first call than for any other.
#[inline]
pub fn record<R>(f: impl FnOnce(&'static Recorder, &RingWriter) -> R) -> Option<R> {
    guarded(f, false)
}

/// [`record`]'s body; `heavy` runs the work on the recorder's own stack whatever the state.
#[inline]
fn guarded<R>(f: impl FnOnce(&'static Recorder, &RingWriter) -> R, heavy: bool) -> Option<R> {
    let _guard = DepthGuard::enter()?;
    // SAFETY: __errno_location always returns the calling thread's valid errno pointer.
    let errno_ptr = unsafe { libc::__errno_location() };
    // SAFETY: as above; reading an int.
    let saved = unsafe { *errno_ptr };
    let work = || {
        SHIM.with_ring_noting_creation(|r, w, created| {
            if created {
                on_create(r, w);
            }
            f(r, w)
        })
    };
    let out = if heavy || SHIM.needs_setup_here() {
        on_own_stack(work)
    } else {
        catch_unwind(AssertUnwindSafe(work))
    };
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

/// The heavy path out of line, so the hot wrappers that inline [`record`] carry none of it (nor
/// its frame).
#[cold]
#[inline(never)]
fn on_own_stack<R>(work: impl FnOnce() -> R) -> std::thread::Result<R> {
    catch_unwind_on_own_stack(work)
}
