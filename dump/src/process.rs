//! The process-wide recorder of one writer kind: created lazily at the first event, one ring per
//! thread cached in a const thread-local, a new file in a forked child, a clean-exit mark from
//! `atexit`, and a one-way switch to "disabled" (with one line on stderr) when anything fails.
//!
//! State machine: `UNINIT → CREATING → READY`, or `→ DISABLED` (final for this process image;
//! a forked child starts again at `UNINIT`). Events that arrive while another thread is creating
//! the file are skipped and counted, never waited for: the host's threads never block on us.
//!
//! Creation calls nothing back: the one call that created the file is told so
//! ([`with_ring_noting_creation`](ProcessRecorder::with_ring_noting_creation)), and the recorder's
//! owner does its once-per-file work (signal handlers, first snapshot) there, in its own frame,
//! under its own reentrancy and panic guards.

use crate::config::{disabled_by_env, RecorderConfig};
use crate::fault_guard;
use crate::writer::{Recorder, RingWriter};
use ncclshim_format::layout::{counters, flags, WriterKind};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};

const UNINIT: u8 = 0;
const CREATING: u8 = 1;
const READY: u8 = 2;
const DISABLED: u8 = 3;

/// How many `ProcessRecorder`s one shared object may define (the shim's own, and the profiler's
/// when both live in one library); each gets a thread-local ring cache slot.
pub const MAX_RECORDERS: usize = 2;

/// A lazily created recorder for one writer kind; meant to live in a `static`.
pub struct ProcessRecorder {
    kind: WriterKind,
    tls_index: usize,
    state: AtomicU8,
    recorder: AtomicPtr<Recorder>,
    /// Bumped in a forked child so thread-local ring caches from the parent are ignored.
    generation: AtomicU64,
    skipped: AtomicU64,
}

/// A thread's ring for one recorder. `generation` 0 means none yet (recorder generations start
/// at 1), and `writer` is then a detached placeholder that is never used.
struct CachedRing {
    generation: u64,
    writer: RingWriter,
}

#[allow(clippy::declare_interior_mutable_const)]
const NO_RING: UnsafeCell<CachedRing> = UnsafeCell::new(CachedRing {
    generation: 0,
    writer: RingWriter::DETACHED,
});

thread_local! {
    static RINGS: [UnsafeCell<CachedRing>; MAX_RECORDERS] = const { [NO_RING, NO_RING] };
}

static REGISTERED: [AtomicPtr<ProcessRecorder>; MAX_RECORDERS] = [
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
];
static HOOKS_INSTALLED: AtomicBool = AtomicBool::new(false);

impl ProcessRecorder {
    /// `tls_index` must be distinct for each recorder in one shared object (< `MAX_RECORDERS`).
    /// `on_create` runs once, on the thread that created the file (snapshots go there).
    pub const fn new(kind: WriterKind, tls_index: usize) -> Self {
        assert!(tls_index < MAX_RECORDERS);
        Self {
            kind,
            tls_index,
            state: AtomicU8::new(UNINIT),
            recorder: AtomicPtr::new(std::ptr::null_mut()),
            generation: AtomicU64::new(1),
            skipped: AtomicU64::new(0),
        }
    }

    /// The recorder if it exists (never creates one).
    #[inline]
    pub fn existing(&self) -> Option<&'static Recorder> {
        if self.state.load(Ordering::Acquire) != READY {
            return None;
        }
        let p = self.recorder.load(Ordering::Acquire);
        // SAFETY: a READY state means `recorder` holds a leaked Box that is never freed.
        unsafe { p.as_ref() }
    }

    /// The recorder, created on first use. `None` while another thread creates it, when
    /// disabled, or when creation failed.
    #[inline]
    pub fn get(&'static self) -> Option<&'static Recorder> {
        self.acquire().map(|(recorder, _)| recorder)
    }

    /// As [`get`](Self::get), with whether this very call created the file (true exactly once
    /// per file: the caller that sees it does the once-per-file work).
    #[inline]
    pub fn acquire(&'static self) -> Option<(&'static Recorder, bool)> {
        match self.state.load(Ordering::Acquire) {
            READY => self.existing().map(|r| (r, false)),
            UNINIT => self.create(),
            _ => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Creates the file; `(recorder, true)` for the call that did.
    #[cold]
    fn create(&'static self) -> Option<(&'static Recorder, bool)> {
        if self
            .state
            .compare_exchange(UNINIT, CREATING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another thread got there first: it is the one told "created".
            return self.existing().map(|r| (r, false));
        }
        if disabled_by_env() {
            self.state.store(DISABLED, Ordering::Release);
            return None;
        }
        let config = RecorderConfig::from_env(self.kind);
        // Before the mapping exists (the writer guards it as it maps it), so a truncated file
        // switches this recorder off; the guard sits below us and is handed the function.
        fault_guard::when_lost(disable_mapping);
        match Recorder::create(&config) {
            Ok(r) => {
                let r: &'static Recorder = Box::leak(Box::new(r));
                r.add_counter(
                    counters::EVENTS_SKIPPED,
                    self.skipped.swap(0, Ordering::Relaxed),
                );
                self.recorder
                    .store((r as *const Recorder).cast_mut(), Ordering::Release);
                self.register();
                self.state.store(READY, Ordering::Release);
                Some((r, true))
            }
            Err(e) => {
                self.state.store(DISABLED, Ordering::Release);
                say_once(&format!(
                    "ncclshim: recording disabled ({} dump): {e}; the program continues unaffected\n",
                    self.kind.file_tag()
                ));
                None
            }
        }
    }

    fn register(&'static self) {
        let me = (self as *const Self).cast_mut();
        for slot in &REGISTERED {
            let cur = slot.load(Ordering::Acquire);
            if cur == me {
                break;
            }
            if cur.is_null()
                && slot
                    .compare_exchange(
                        std::ptr::null_mut(),
                        me,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
            {
                break;
            }
        }
        if !HOOKS_INSTALLED.swap(true, Ordering::AcqRel) {
            // SAFETY: both handlers are plain extern "C" functions valid for the process
            // lifetime; they touch only atomics and the never-unmapped mapping.
            unsafe {
                libc::pthread_atfork(None, None, Some(after_fork_in_child));
                libc::atexit(at_exit);
            }
        }
    }

    /// Runs `f` with the recorder and this thread's ring; `None` when not recording.
    ///
    /// The ring is lent by reference from the thread-local cache: copying it out (as a `Cell`
    /// would) cost a profiler callback a store-forwarding stall on every call.
    #[inline]
    pub fn with_ring<R>(
        &'static self,
        f: impl FnOnce(&'static Recorder, &RingWriter) -> R,
    ) -> Option<R> {
        self.with_ring_noting_creation(|r, w, _| f(r, w))
    }

    /// As [`with_ring`](Self::with_ring), telling `f` whether this call created the file
    /// (`true` once per file, on the creating thread, with the ring its own record will use).
    #[inline]
    pub fn with_ring_noting_creation<R>(
        &'static self,
        f: impl FnOnce(&'static Recorder, &RingWriter, bool) -> R,
    ) -> Option<R> {
        let (recorder, created) = self.acquire()?;
        let generation = self.generation.load(Ordering::Relaxed);
        RINGS
            .try_with(|rings| {
                let cell = rings[self.tls_index].get();
                // SAFETY: the cell belongs to this thread alone. It is written only here, while
                // no reference into it is alive: `f` gets its reference below, after the write,
                // and a nested `with_ring` from `f` finds the entry current and only reads it.
                // (No recorder records from a signal handler.) Generations change only in a
                // forked child, whose sole thread is the one that forked, outside this function.
                unsafe {
                    if (*cell).generation != generation {
                        let writer = recorder.claim_ring();
                        *cell = CachedRing { generation, writer };
                    }
                    f(recorder, &(*cell).writer, created)
                }
            })
            .ok()
    }

    /// Whether a [`with_ring`](Self::with_ring) on this thread now would do the heavy work:
    /// create the file (nothing decided yet) or claim this thread's ring (the file is ready, this
    /// thread has not recorded into it). False when recording is off or another thread is
    /// creating the file (those calls skip), so a process that does not record never pays for
    /// the heavy path. Callers run the heavy path on the recorder's own stack
    /// ([`own_stack`](crate::own_stack)).
    #[inline]
    pub fn needs_setup_here(&'static self) -> bool {
        match self.state.load(Ordering::Acquire) {
            UNINIT => true,
            READY => {
                let generation = self.generation.load(Ordering::Relaxed);
                RINGS
                    .try_with(|rings| {
                        rings.get(self.tls_index).is_some_and(|cell| {
                            // SAFETY: the cell belongs to this thread alone; read only.
                            unsafe { (*cell.get()).generation != generation }
                        })
                    })
                    .unwrap_or(false)
            }
            _ => false,
        }
    }

    /// Runs `f` with this thread's ring when the recorder is ready and this thread has claimed
    /// its ring already; `None` otherwise. Unlike [`with_ring`](Self::with_ring) it never
    /// creates the file or claims a ring (both allocate and make syscalls), so nothing on its
    /// path can panic: for hot paths that run without a panic guard and take the guarded
    /// general path on `None`.
    #[inline]
    pub fn with_current_ring<R>(&'static self, f: impl FnOnce(&RingWriter) -> R) -> Option<R> {
        if self.state.load(Ordering::Acquire) != READY {
            return None;
        }
        let generation = self.generation.load(Ordering::Relaxed);
        RINGS
            .try_with(|rings| {
                let cell = rings.get(self.tls_index)?.get();
                // SAFETY: the cell belongs to this thread alone and is only read here; a
                // current generation means `with_ring` filled it for the recorder that is
                // READY now (a fork bumps the generation before the child records again).
                unsafe { ((*cell).generation == generation).then(|| f(&(*cell).writer)) }
            })
            .ok()
            .flatten()
    }

    /// Turns recording off for good in this process, marks the dump, and says why once.
    #[cold]
    pub fn disable(&self, why: &str) {
        let was = self.state.swap(DISABLED, Ordering::AcqRel);
        if was == READY {
            if let Some(r) =
                // SAFETY: the pointer was published under READY and is never freed.
                unsafe { self.recorder.load(Ordering::Acquire).as_ref() }
            {
                r.set_flag(flags::DISABLED);
            }
        }
        if was != DISABLED {
            say_once(&format!(
                "ncclshim: recording disabled ({} dump): {why}; the program continues unaffected\n",
                self.kind.file_tag()
            ));
        }
    }

    pub fn is_disabled(&self) -> bool {
        self.state.load(Ordering::Acquire) == DISABLED
    }
}

/// Writes one line to stderr without std's lock or buffering (safe inside any host state).
fn say_once(msg: &str) {
    // SAFETY: writing a valid buffer to fd 2; a short or failed write is acceptable.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

/// Turns off, for good, the recorder whose mapping starts at `base` (the file under it was
/// truncated: see [`fault_guard`]). Runs inside a signal handler: atomics only; the fault guard
/// says why on stderr. Registered with the guard ([`fault_guard::when_lost`]) before each file is
/// created.
fn disable_mapping(base: usize) {
    for slot in &REGISTERED {
        // SAFETY: registered pointers are 'static ProcessRecorders, and a recorder pointer
        // published under them is a leaked, never-freed Recorder.
        if let Some(r) = unsafe { slot.load(Ordering::Acquire).as_ref() } {
            let rec = r.recorder.load(Ordering::Acquire);
            // SAFETY: as above: null, or a leaked Recorder that is never freed.
            if unsafe { rec.as_ref() }.is_some_and(|rec| rec.mapping_base() == base) {
                r.state.store(DISABLED, Ordering::Release);
            }
        }
    }
}

extern "C" fn after_fork_in_child() {
    for slot in &REGISTERED {
        // SAFETY: registered pointers are 'static ProcessRecorders.
        if let Some(r) = unsafe { slot.load(Ordering::Acquire).as_ref() } {
            // The parent's mapping stays (it is the parent's file); the child makes its own.
            r.recorder.store(std::ptr::null_mut(), Ordering::Release);
            r.generation.fetch_add(1, Ordering::AcqRel);
            let s = r.state.load(Ordering::Acquire);
            if s == READY || s == CREATING {
                r.state.store(UNINIT, Ordering::Release);
            }
        }
    }
}

extern "C" fn at_exit() {
    for slot in &REGISTERED {
        // SAFETY: as above.
        if let Some(r) = unsafe { slot.load(Ordering::Acquire).as_ref() } {
            if let Some(rec) = r.existing() {
                rec.mark_clean_exit();
            }
        }
    }
}
