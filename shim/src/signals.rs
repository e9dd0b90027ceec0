//! Fatal-signal capture: when a process that uses NCCL dies of SIGSEGV, SIGBUS, SIGFPE, SIGILL,
//! SIGABRT, SIGTERM or SIGINT, the dump's header records the signal, its code, the faulting
//! address or sender and the thread, so the report can tell "crashed" and "killed by the
//! launcher" from "hung" and from "vanished" (SIGKILL, which no one can catch).
//!
//! Transparency is the whole design: the host must see no difference.
//! - Installed lazily, at the first NCCL event (never at load time), once per process image,
//!   only over a disposition that is not SIG_IGN (an ignored signal stays ignored, and exec'd
//!   children still inherit it).
//! - Chained (`ncclshim_dump::signal_chain`, shared with the dump's SIGBUS guard): our handler carries the previous handler's mask and flags (SA_RESTART, SA_ONSTACK,
//!   SA_NODEFER, SA_RESETHAND), so interrupted system calls, the alternate stack and one-shot
//!   handlers behave as before; after recording it calls the previous handler exactly as the
//!   kernel would have (with or without SA_SIGINFO), or, for the default action, restores it and
//!   lets the signal take effect: a fault re-executes and faults again (same core dump, same
//!   exit status), a sent signal is sent again to the same thread.
//! - A handler installed later replaces ours and is never touched (Python's `faulthandler`,
//!   PyTorch's, the program's own); one installed earlier is what we chain to.
//! - The handler is async-signal-safe: atomics and stores into the never-unmapped mapping, a
//!   vDSO clock read, `gettid`, `sigaction` and `tgkill`. It preserves errno.
//! - `NCCLSHIM_SIGNALS=0` (or `false`/`no`/`off`) turns it off; an unknown value leaves it on
//!   with one line on stderr (`ncclshim_dump::settings::SIGNALS`).
//! - A SIGBUS on the recorder's own pages (its dump truncated under it) is not the host's: it
//!   goes to `ncclshim_dump::fault_guard` first, which recovers it, and is neither recorded nor
//!   chained.

use ncclshim_dump::signal_chain::{Chained, Forwarded};
use ncclshim_dump::Recorder;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

/// The signals whose arrival ends (or may end) a rank.
const WATCHED: [c_int; 7] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGABRT,
    libc::SIGTERM,
    libc::SIGINT,
];

/// The recorder whose header the handler writes (the current one: a forked child's own).
static RECORDER: AtomicPtr<Recorder> = AtomicPtr::new(std::ptr::null_mut());
/// Set once the handlers are installed in this process image (a forked child inherits both the
/// handlers and this flag, so it never chains to itself).
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The dispositions we replaced, one per watched signal (`ncclshim_dump::signal_chain`).
static PREVIOUS: [Chained; WATCHED.len()] = [const { Chained::new() }; 7];

/// Points the handlers at `recorder` and installs them the first time (called when the dump is
/// created: the first NCCL event of this process image).
pub fn install(recorder: &'static Recorder) {
    if !ncclshim_dump::config::signals_enabled() {
        return;
    }
    RECORDER.store((recorder as *const Recorder).cast_mut(), Ordering::Release);
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    for (previous, &sig) in PREVIOUS.iter().zip(&WATCHED) {
        previous.install(sig, on_signal);
    }
}

/// Whether the kernel raised `sig` for a fault in the interrupted instruction (returning
/// re-executes it, so it faults again under the restored disposition).
fn is_fault(sig: c_int, code: c_int) -> bool {
    code > 0
        && matches!(
            sig,
            libc::SIGSEGV | libc::SIGBUS | libc::SIGFPE | libc::SIGILL
        )
}

extern "C" fn on_signal(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: __errno_location is the calling thread's errno; restored before returning.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: `info` is the kernel's argument to this handler.
    if sig == libc::SIGBUS && unsafe { ncclshim_dump::fault_guard::recover(info) } {
        // A fault on the recorder's own pages (its file was truncated): the guard replaced
        // them, recording is off, and the store re-executes harmlessly. Not the host's crash.
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        return;
    }
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler (or null, checked).
    let code = unsafe { info.as_ref() }.map_or(0, |i| i.si_code);
    note(sig, info, code);
    if let Some(i) = WATCHED.iter().position(|&s| s == sig) {
        // SAFETY: our handler for `sig`, forwarding the kernel's own arguments; a signal the
        // kernel raised for the interrupted instruction re-executes, any other was sent.
        let forwarded = unsafe { PREVIOUS[i].forward(sig, info, ctx, !is_fault(sig, code)) };
        if forwarded == Forwarded::HandlerReturned {
            // The program handled it and comes back (a JVM's or Julia's fault handling, a
            // probe): what the report needs to not call a recovered signal a crash.
            // SAFETY: the pointer is a leaked recorder whose mapping is never unmapped.
            if let Some(r) = unsafe { RECORDER.load(Ordering::Acquire).as_ref() } {
                r.note_signal_handler_returned();
            }
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Writes the first signal into the header (later ones only count).
fn note(sig: c_int, info: *mut libc::siginfo_t, code: c_int) {
    // SAFETY: the pointer is a leaked recorder whose mapping is never unmapped.
    let Some(r) = (unsafe { RECORDER.load(Ordering::Acquire).as_ref() }) else {
        return;
    };
    let s = r.signal_record();
    s.count.fetch_add(1, Ordering::Relaxed);
    if s.claimed
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    // SAFETY: `info` comes from the kernel (null checked); si_addr is meaningful for faults,
    // si_pid for signals a process sent; each accessor only reads the union.
    let (addr, sender) = match unsafe { info.as_ref() } {
        Some(i) if is_fault(sig, code) => (unsafe { i.si_addr() } as u64, 0),
        Some(i) if code <= 0 => (0, unsafe { i.si_pid() } as u32),
        _ => (0, 0),
    };
    s.code.store(code, Ordering::Relaxed);
    s.tid.store(tid, Ordering::Relaxed);
    s.sender_pid.store(sender, Ordering::Relaxed);
    s.addr.store(addr, Ordering::Relaxed);
    s.time.store(ncclshim_dump::clock::now(), Ordering::Relaxed);
    s.signo.store(sig as u32, Ordering::Release);
}
