//! Keeps a dump file that shrinks under a live process from killing that process.
//!
//! A dump is a `MAP_SHARED` mapping: when someone truncates the file while the job runs (a
//! cleanup script, `truncate -s 0`, a quota enforcer), the next store into a page past the new
//! end raises SIGBUS, whose default action kills the training process (exit 135). The recorder
//! must never take its host down, so every recorder's mapping is registered here and a SIGBUS
//! handler, installed when the first dump is created, checks the fault address:
//! - inside a registered mapping: the whole mapping is replaced in place (`mmap MAP_FIXED`) by
//!   anonymous zero pages, so the faulting store re-executes into memory nobody reads; the
//!   recorder is switched off for good and one line goes to stderr. The host goes on.
//! - anywhere else (or a SIGBUS sent by `kill`): it does what the previous disposition would
//!   have done (the previous handler is called the way the kernel would have, or the default
//!   action is restored so the fault re-executes and kills exactly as before).
//!
//! The handler is async-signal-safe: atomics, `mmap`, `write(2)`, `sigaction`, `tgkill`. It
//! preserves errno. A disposition of SIG_IGN is left alone, and a handler the host installs
//! later without chaining replaces this one (as with the shim's fatal-signal capture).
//!
//! This file sits under the writer and the process lifecycle and never names them: the
//! lifecycle ([`process`](crate::process)) hands it, once, the function that turns a lost
//! mapping's recorder off ([`when_lost`]); the handler calls it through a function pointer held
//! in an atomic (no lock, no allocation).

use crate::signal_chain::Chained;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Mappings guarded per process image (a process has one or two dumps; a forked child adds
/// its own). Beyond this, a mapping is simply not guarded.
const SLOTS: usize = 16;

static BASES: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static LENS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static LOST: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];
static NEXT: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);
static SAID: AtomicBool = AtomicBool::new(false);

/// The SIGBUS disposition replaced by ours.
static PREVIOUS: Chained = Chained::new();

/// The `fn(usize)` that [`when_lost`] registered, as an address (0: none yet). An atomic word,
/// so the signal handler reads it without a lock.
static ON_LOST: AtomicUsize = AtomicUsize::new(0);

/// Registers what to call, inside the SIGBUS handler, with the base of a mapping that was just
/// lost to a truncated file (after it is replaced by anonymous memory). `on_lost` must be
/// async-signal-safe (atomics only). A later registration replaces an earlier one.
pub fn when_lost(on_lost: fn(usize)) {
    ON_LOST.store(on_lost as usize, Ordering::Release);
}

/// Guards the mapping `[base, base + len)`; returns its slot (for [`is_lost`]), or `None` when
/// every slot is taken.
pub fn guard(base: *mut u8, len: usize) -> Option<usize> {
    let slot = NEXT.fetch_add(1, Ordering::AcqRel);
    if slot >= SLOTS {
        return None;
    }
    LENS[slot].store(len, Ordering::Relaxed);
    BASES[slot].store(base as usize, Ordering::Release);
    install_once();
    Some(slot)
}

/// Whether the mapping in `slot` was lost to a truncated file (and is now anonymous memory).
pub fn is_lost(slot: usize) -> bool {
    LOST.get(slot).is_some_and(|l| l.load(Ordering::Acquire))
}

fn install_once() {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    PREVIOUS.install(libc::SIGBUS, on_sigbus);
}

/// If `info` is a kernel-raised SIGBUS on a guarded mapping, swaps that mapping for anonymous
/// memory, turns its recorder off and returns true: returning from the handler then
/// re-executes the store harmlessly. Async-signal-safe; other handlers (the shim's
/// fatal-signal capture) call it first.
///
/// # Safety
/// `info` is null or the `siginfo_t` the kernel passed to the signal handler calling this.
pub unsafe fn recover(info: *const libc::siginfo_t) -> bool {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler (or null, checked).
    let Some(info) = (unsafe { info.as_ref() }) else {
        return false;
    };
    if info.si_signo != libc::SIGBUS || info.si_code <= 0 {
        return false; // sent by a process: not a fault of ours
    }
    // SAFETY: for a kernel-raised SIGBUS, si_addr is the faulting address.
    let addr = unsafe { info.si_addr() } as usize;
    let used = NEXT.load(Ordering::Acquire).min(SLOTS);
    for slot in 0..used {
        let base = BASES[slot].load(Ordering::Acquire);
        let len = LENS[slot].load(Ordering::Relaxed);
        if base == 0 || addr < base || addr - base >= len {
            continue;
        }
        LOST[slot].store(true, Ordering::Release);
        // SAFETY: replaces our own mapping (never unmapped, never handed to the host) with
        // anonymous memory of the same size at the same address; pointers into it stay valid
        // and every later access succeeds.
        let p = unsafe {
            libc::mmap(
                base as *mut c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return false; // cannot make the store succeed: let the fault take its course
        }
        let on_lost = ON_LOST.load(Ordering::Acquire);
        if on_lost != 0 {
            // SAFETY: ON_LOST is written only by `when_lost`, from a `fn(usize)`, so a non-zero
            // value is the address of such a function, valid for the life of the program
            // (functions are never unloaded from a process that still runs our handler).
            let on_lost = unsafe { std::mem::transmute::<usize, fn(usize)>(on_lost) };
            on_lost(base);
        }
        if !SAID.swap(true, Ordering::AcqRel) {
            const MSG: &str = "ncclshim: recording disabled: a dump file was truncated while this process was writing it (SIGBUS on the recorder's own pages); the program continues unaffected\n";
            // SAFETY: writing a static buffer to fd 2; a short or failed write is acceptable.
            unsafe { libc::write(2, MSG.as_ptr().cast(), MSG.len()) };
        }
        return true;
    }
    false
}

extern "C" fn on_sigbus(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: __errno_location is the calling thread's errno; restored before returning.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: `info` is the kernel's argument to this handler.
    if !unsafe { recover(info) } {
        // SAFETY: `info` is the kernel's (null checked); a SIGBUS with no siginfo or a
        // non-positive code was sent by a process, any other is a fault.
        let sent = unsafe { info.as_ref() }.is_none_or(|i| i.si_code <= 0);
        // SAFETY: our handler for SIGBUS, forwarding the kernel's own arguments.
        unsafe { PREVIOUS.forward(sig, info, ctx, sent) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}
