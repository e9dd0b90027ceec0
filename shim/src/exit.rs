//! How a process that used NCCL ended: the shim interposes `exit`, `_exit` and `_Exit` and, in a
//! process that already has a shim dump, writes the function and its status into the dump header
//! (`HeaderExt2::exit_via` / `exit_status` / `exit_call_monotonic_ns`) before calling the real
//! function with the same status. Without it, a process that ends through `_exit` (forked
//! children, Python multiprocessing workers, `os._exit`) reads as "stopped without a clean exit",
//! and no dump says which status any process ended with.
//!
//! Why interpose `exit` rather than read its status in an `on_exit` handler: the record is
//! written when `exit` is called, before any atexit handler runs, so a process that hangs in its
//! exit handlers (an NCCL teardown that never returns) still says "exit(1) was called" next to
//! the missing clean-exit mark.
//!
//! Transparency:
//! - Inert in a process without a dump (never used NCCL): one atomic load, then the real call.
//! - Records only in the process that owns the dump: a `vfork` child (which shares its parent's
//!   memory, and calls `_exit` when its `exec` fails) must not mark its parent's file, so the
//!   writer's pid is compared with `getpid()` (a plain system call). A `fork` child has no dump
//!   until its own first NCCL call (`ncclshim_dump::process`), so it is inert too.
//! - `_exit` may run in a forked child of a multithreaded process, where any lock may be held
//!   forever: the record is a vDSO clock read and atomic stores into the never-unmapped mapping,
//!   with no allocation, no lock and no `dlsym`. The real functions are resolved by a load-time
//!   constructor (single-threaded, before `main`); should that not have run, `_exit` / `_Exit`
//!   make glibc's own `exit_group` system call, and `exit` resolves the real one then (it runs in
//!   an ordinary context, where `dlsym` is allowed).
//! - The status, the atexit handlers, stdio flushing: all are the real function's, untouched.
//! - No panic can leave a hook (`catch_unwind` around the recording).
//!
//! `quick_exit` is not interposed: glibc has two versions of it (2.10 and 2.24) whose handler
//! semantics differ, and one unversioned export would bind both to one of them. A process that
//! ends through it reads as before (no exit call seen).

use crate::runtime::recorder::SHIM;
use crate::symbols::dlsym::real_dlsym;
use ncclshim_dump::layout::exit_via;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::catch_unwind;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

type ExitFn = unsafe extern "C" fn(c_int) -> !;

/// The real `exit`, `_exit` and `_Exit` (null until resolved).
static REAL_EXIT: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
static REAL_UNDERSCORE_EXIT: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
static REAL_CAPITAL_EXIT: AtomicPtr<c_void> = AtomicPtr::new(null_mut());

/// Runs when the loader maps the shim: the only place `_exit`'s real address is looked up (a
/// `dlsym` inside `_exit` could deadlock in a forked child).
#[used]
#[link_section = ".init_array"]
static RESOLVE_AT_LOAD: extern "C" fn() = resolve_at_load;

extern "C" fn resolve_at_load() {
    // A panic must not unwind into the loader; a failed lookup leaves the fallbacks in place.
    let _ = catch_unwind(|| {
        resolve(&REAL_EXIT, c"exit", exit as *const ());
        resolve(&REAL_UNDERSCORE_EXIT, c"_exit", _exit as *const ());
        resolve(&REAL_CAPITAL_EXIT, c"_Exit", _Exit as *const ());
    });
}

/// Stores the next definition of `name` after the shim (libc's), unless it is our own hook.
fn resolve(slot: &AtomicPtr<c_void>, name: &CStr, ours: *const ()) {
    let lookup = real_dlsym();
    // SAFETY: glibc's dlsym with a valid NUL-terminated name; called from this frame, RTLD_NEXT
    // means "after the object this code is in".
    let p = unsafe { lookup(libc::RTLD_NEXT, name.as_ptr() as *const c_char) };
    if !p.is_null() && p.cast_const().cast::<()>() != ours {
        slot.store(p, Ordering::Release);
    }
}

/// Writes the exit call into this process's shim dump, if it has one and it is its own.
fn note(via: u32, status: c_int) {
    let _ = catch_unwind(|| {
        let Some(r) = SHIM.existing() else { return };
        // SAFETY: getpid has no preconditions (a system call since glibc 2.25, never cached).
        let pid = unsafe { libc::getpid() } as u32;
        if pid == r.header().pid {
            r.mark_exit_call(via, status);
        }
    });
}

/// Calls the real `_exit`-like function in `slot`, or does what glibc's `_exit` does.
fn end_now(slot: &AtomicPtr<c_void>, status: c_int) -> ! {
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: `resolve` stored libc's `_exit` / `_Exit`, which have this signature.
        unsafe { std::mem::transmute::<*mut c_void, ExitFn>(p)(status) }
    }
    loop {
        // SAFETY: exit_group ends every thread of the process with `status`; it does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// # Safety
/// Same contract as libc's `exit` (it runs the atexit handlers and does not return).
#[no_mangle]
pub unsafe extern "C" fn exit(status: c_int) -> ! {
    note(exit_via::EXIT, status);
    if REAL_EXIT.load(Ordering::Acquire).is_null() {
        // Not resolved at load (never expected): `exit` runs in an ordinary context, where a
        // lookup is allowed.
        let _ = catch_unwind(|| resolve(&REAL_EXIT, c"exit", exit as *const ()));
    }
    end_now(&REAL_EXIT, status)
}

/// # Safety
/// Same contract as libc's `_exit` (async-signal-safe, does not return).
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    note(exit_via::UNDERSCORE_EXIT, status);
    end_now(&REAL_UNDERSCORE_EXIT, status)
}

/// # Safety
/// Same contract as libc's `_Exit` (the C99 name of `_exit`).
#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    note(exit_via::UNDERSCORE_EXIT, status);
    end_now(&REAL_CAPITAL_EXIT, status)
}
