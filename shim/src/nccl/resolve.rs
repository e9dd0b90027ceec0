//! Finding NCCL's real entry points. Each wrapper forwards to the `pncclX` alias (libnccl
//! exports `ncclX` WEAK and `pnccl*` GLOBAL; we never export `pnccl*`, so we cannot find
//! ourselves). Lookup order, once per symbol, on the first call:
//! 1. `dlsym(RTLD_NEXT)`: libnccl in the global scope (linked in, or dlopened `RTLD_GLOBAL`);
//! 2. `dlopen("libnccl.so.2", RTLD_NOLOAD)`: loaded `RTLD_LOCAL` (Python, `ctypes`, torch);
//! 3. the first `libnccl.so*` the loader has mapped (`dl_iterate_phdr`), by its path, NOLOAD.
//!
//! The lookup runs on the recorder's own stack (`ncclshim_dump::own_stack`): the first call of a
//! function may come from a thread with a small stack. Only successes are cached: a symbol the loaded NCCL lacks is looked up again on each call
//! (a program can only call it by mistake, and it gets `ncclInternalError`). The NOLOAD
//! handle is kept, so the library stays mapped while we hold pointers into it.

use crate::nccl::libs::Slots;
use ncclshim_dump::own_stack::run_on_own_stack;
use std::ffi::{c_char, c_void, CStr};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The NOLOAD handle of the libnccl found by steps 2–3 (null until needed).
static LIB: AtomicPtr<c_void> = AtomicPtr::new(null_mut());

/// Returns the real function for `pname` (`"pncclX\0"`), `name` (`"ncclX\0"`) being the fallback
/// for an NCCL built without the `pnccl` aliases. Null when the loaded NCCL has neither.
#[inline]
pub fn lookup(slot: &AtomicPtr<c_void>, pname: &'static str, name: &'static str) -> *mut c_void {
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    resolve(slot, pname, name)
}

#[cold]
#[inline(never)]
fn resolve(slot: &AtomicPtr<c_void>, pname: &'static str, name: &'static str) -> *mut c_void {
    debug_assert!(pname.ends_with('\0') && name.ends_with('\0'));
    // A failed dlopen/dlsym may set errno; the caller's errno must survive us.
    // SAFETY: __errno_location returns this thread's errno.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let saved = unsafe { *errno };
    // The loader's lookups (dlopen NOLOAD walks its maps) take more stack than a small host
    // thread may have left for this first call of a function.
    let p = run_on_own_stack(|| resolve_inner(slot, pname, name));
    // SAFETY: as above.
    unsafe { *errno = saved };
    p
}

fn resolve_inner(slot: &AtomicPtr<c_void>, pname: &'static str, name: &'static str) -> *mut c_void {
    let pn = pname.as_ptr().cast::<c_char>();
    // SAFETY: pname is NUL-terminated (the macro appends "\0"); RTLD_NEXT searches the objects
    // loaded after this one. This is never called from inside a dlsym hook.
    let mut p = unsafe { libc::dlsym(libc::RTLD_NEXT, pn) };
    if p.is_null() {
        let h = library();
        if !h.is_null() {
            // SAFETY: h is a live handle; both names are NUL-terminated. A handle lookup searches
            // libnccl's own scope, which never contains this preloaded library.
            p = unsafe { libc::dlsym(h, pn) };
            if p.is_null() {
                // SAFETY: as above; an NCCL built without the pnccl aliases exports only ncclX.
                p = unsafe { libc::dlsym(h, name.as_ptr().cast()) };
            }
        }
    }
    if !p.is_null() {
        slot.store(p, Ordering::Release);
        crate::nccl::libs::note_slot0(p);
    }
    p
}

/// As [`lookup`], from a per-call-site table with one entry per library slot: the slot of the
/// call this thread is in (a call through a bound stub uses that stub's library, see
/// `handles`, slots in `libs`), else slot 0 (the library found here).
#[inline]
pub fn lookup_in(slots: &Slots, pname: &'static str, name: &'static str) -> *mut c_void {
    match crate::runtime::thread::current_lib() {
        0 => lookup(&slots[0], pname, name),
        k => crate::nccl::libs::lookup(slots, k, pname, name),
    }
}

/// The libnccl handle for steps 2–3, found once.
pub fn library() -> *mut c_void {
    let h = LIB.load(Ordering::Acquire);
    if !h.is_null() {
        return h;
    }
    // SAFETY: RTLD_NOLOAD never loads or initializes anything; it only returns a handle to an
    // object already mapped.
    let mut h = unsafe {
        libc::dlopen(
            c"libnccl.so.2".as_ptr(),
            libc::RTLD_NOLOAD | libc::RTLD_LAZY,
        )
    };
    if h.is_null() {
        h = first_mapped_nccl();
    }
    if !h.is_null()
        && LIB
            .compare_exchange(null_mut(), h, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        // Another thread stored its handle first; drop our extra reference.
        // SAFETY: h came from dlopen above and is released once.
        unsafe { libc::dlclose(h) };
        return LIB.load(Ordering::Acquire);
    }
    h
}

fn first_mapped_nccl() -> *mut c_void {
    unsafe extern "C" fn cb(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> i32 {
        // SAFETY: info is valid during the callback; dlpi_name is NULL or NUL-terminated; data
        // is the &mut *mut c_void passed below.
        let name = (*info).dlpi_name;
        if name.is_null() {
            return 0;
        }
        let path = CStr::from_ptr(name);
        let base = path.to_bytes().rsplit(|&b| b == b'/').next().unwrap_or(&[]);
        if base.starts_with(b"libnccl.so") {
            let h = libc::dlopen(name, libc::RTLD_NOLOAD | libc::RTLD_LAZY);
            if !h.is_null() {
                *data.cast::<*mut c_void>() = h;
                return 1;
            }
        }
        0
    }
    let mut out: *mut c_void = null_mut();
    // SAFETY: the callback only writes `out`, which outlives the call. dlopen(NOLOAD) inside
    // dl_iterate_phdr is allowed: glibc's load lock is recursive.
    unsafe { libc::dl_iterate_phdr(Some(cb), (&mut out as *mut *mut c_void).cast()) };
    out
}

/// `real!("ncclX", fn type)`: the real function as `Option<fn type>`, resolved once per
/// library slot (the library of the call this thread is in, see `lookup_in`).
macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static SLOTS: $crate::nccl::libs::Slots =
            [const { std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()) };
                $crate::nccl::libs::LIBS + 1];
        let p = $crate::nccl::resolve::lookup_in(
            &SLOTS,
            concat!("p", $name, "\0"),
            concat!($name, "\0"),
        );
        if p.is_null() {
            None
        } else {
            // SAFETY: `p` is NCCL's exported function of this name, whose C signature is `$ty`
            // (nccl.h, checked per function in hooks.rs).
            Some(unsafe { std::mem::transmute::<*mut std::ffi::c_void, $ty>(p) })
        }
    }};
}
pub(crate) use real;
