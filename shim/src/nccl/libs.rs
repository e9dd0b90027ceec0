//! NCCL library slots: which libnccl each slot stands for, and the real functions of a slot's
//! library. Slot 0 is the library the exports forward to (found by `super::resolve`, which notes
//! it here); slots 1..=[`LIBS`] are libraries reached through `dlsym(handle, "ncclX")` and
//! claimed by `super::handles` when it hands out a bound stub. The layer below both the
//! resolver and the handle lookups, so neither has to name the other: it knows nothing of the
//! export list.
//!
//! Nothing here allocates or locks: real `dlsym` / `dladdr` calls and compare-and-swaps on
//! fixed tables. A slot's NOLOAD handle (keeping its library mapped while we hold pointers into
//! it) is taken at its first call, never inside a `dlsym` hook.

use crate::nccl::snapshot;
use crate::runtime::recorder::record_heavy;
use ncclshim_dump::own_stack::run_on_own_stack;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// Library slots for handle-bound wrappers (slot 0, the exports' own library, comes on top).
pub const LIBS: usize = 4;

/// Per-call-site table of resolved real functions, one entry per library slot (`real!`).
pub type Slots = [AtomicPtr<c_void>; LIBS + 1];

/// Load base of each slot's library (`dli_fbase`); 0 while free. Slot 0's is noted by the
/// resolver when it first finds a function.
static BASE: [AtomicUsize; LIBS + 1] = [const { AtomicUsize::new(0) }; LIBS + 1];
/// A function a handle lookup answered in each slot's library (the first one): the anchor that
/// finds the library's path at its first call.
static ANCHOR: [AtomicPtr<c_void>; LIBS + 1] = [const { AtomicPtr::new(null_mut()) }; LIBS + 1];
/// Each bound slot's NOLOAD handle, taken at its first call (keeps the library mapped).
static HANDLE: [AtomicPtr<c_void>; LIBS + 1] = [const { AtomicPtr::new(null_mut()) }; LIBS + 1];
/// Whether the slot's first call took its library snapshot.
static SNAPSHOT_TAKEN: [AtomicBool; LIBS + 1] = [const { AtomicBool::new(false) }; LIBS + 1];
/// A handle lookup answered `p` (a function of slot `k`'s library).
pub fn note_lookup(k: usize, p: *mut c_void) {
    if let Some(anchor) = ANCHOR.get(k) {
        let _ = anchor.compare_exchange(null_mut(), p, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// Load base of slot 0's library (0 until the resolver found a function).
pub fn slot0_base() -> usize {
    BASE[0].load(Ordering::Relaxed)
}

/// The real function `pname` (`"pncclX\0"`, `name` the fallback) of slot `k`'s library, cached
/// in `slots[k]`. Null when `k` is not a bound slot or its library lacks the function.
#[inline]
pub fn lookup(slots: &Slots, k: usize, pname: &'static str, name: &'static str) -> *mut c_void {
    let Some(slot) = slots.get(k) else {
        return null_mut();
    };
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    resolve_bound(slot, k, pname, name)
}

#[cold]
#[inline(never)]
fn resolve_bound(
    slot: &AtomicPtr<c_void>,
    k: usize,
    pname: &'static str,
    name: &'static str,
) -> *mut c_void {
    debug_assert!(pname.ends_with('\0') && name.ends_with('\0'));
    // SAFETY: __errno_location returns this thread's errno; a failed dlopen/dlsym may set it
    // and the caller's errno must survive us.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let saved = unsafe { *errno };
    // On the recorder's own stack: `dladdr` and `dlopen` NOLOAD walk the loader's maps, more
    // stack than a small host thread may have left for this first call of a function.
    let p = run_on_own_stack(|| {
        let h = library(k);
        let mut p = null_mut();
        if !h.is_null() {
            // SAFETY: h is a live NOLOAD handle we hold; both names are NUL-terminated. A handle
            // lookup searches that library's scope (not the preload); `pnccl`/plain names that
            // are not ours pass through our dlsym untouched.
            p = unsafe { libc::dlsym(h, pname.as_ptr().cast()) };
            if p.is_null() {
                // SAFETY: as above; an NCCL built without the pnccl aliases exports only ncclX.
                p = unsafe { libc::dlsym(h, name.as_ptr().cast()) };
            }
        }
        p
    });
    if !p.is_null() {
        slot.store(p, Ordering::Release);
    }
    // SAFETY: as above.
    unsafe { *errno = saved };
    p
}

/// Slot `k`'s library handle: `dlopen(its path, RTLD_NOLOAD)`, the path found with `dladdr`
/// on a function a handle lookup answered. Taken once (never in a `dlsym` hook).
fn library(k: usize) -> *mut c_void {
    let Some(cell) = HANDLE.get(k) else {
        return null_mut();
    };
    let h = cell.load(Ordering::Acquire);
    if !h.is_null() || k == 0 {
        return h;
    }
    let anchor = ANCHOR[k].load(Ordering::Acquire);
    if anchor.is_null() {
        return null_mut();
    }
    // SAFETY: Dl_info is plain data; all-zero is a valid value for dladdr to overwrite.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: anchor is a function address; info is a valid out-pointer.
    if unsafe { real_dladdr(anchor, &mut info) } == 0 || info.dli_fname.is_null() {
        return null_mut();
    }
    // SAFETY: dli_fname is the loader's NUL-terminated name of a mapped object (the string
    // the object was opened by, which NOLOAD matches); NOLOAD never loads or initializes.
    let h = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if h.is_null() {
        return null_mut();
    }
    match cell.compare_exchange(null_mut(), h, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => h,
        Err(other) => {
            // SAFETY: h came from dlopen above and is released once; `other` is kept.
            unsafe { libc::dlclose(h) };
            other
        }
    }
}

/// The first call made through slot `k`'s stubs records a library snapshot (stored only if the
/// loaded libraries changed since the last one: a second libnccl shows up there).
pub fn first_call(k: usize) {
    if let Some(done) = SNAPSHOT_TAKEN.get(k) {
        if !done.swap(true, Ordering::Relaxed) {
            record_heavy(|r, w| snapshot::take(r, w, snapshot::Reason::NewLibrary, false));
        }
    }
}

/// The resolver found `p` in slot 0's library: remember which library that is.
pub fn note_slot0(p: *mut c_void) {
    if BASE[0].load(Ordering::Relaxed) == 0 {
        if let Some(base) = object_base(p) {
            BASE[0].store(base, Ordering::Relaxed);
        }
    }
}

/// Load base of the object holding `addr`.
pub(crate) fn object_base(addr: *const c_void) -> Option<usize> {
    // SAFETY: Dl_info is plain data; all-zero is a valid value for dladdr to overwrite.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr accepts any address; info is a valid out-pointer.
    let ok = unsafe { real_dladdr(addr, &mut info) } != 0;
    (ok && !info.dli_fbase.is_null()).then_some(info.dli_fbase as usize)
}

type DladdrFn = unsafe extern "C" fn(*const c_void, *mut libc::Dl_info) -> i32;

static REAL_DLADDR: AtomicPtr<c_void> = AtomicPtr::new(null_mut());

/// glibc's function `name` (the one after the shim), cached in `cell`; null if none.
pub fn real_fn(cell: &AtomicPtr<c_void>, name: &std::ffi::CStr) -> *mut c_void {
    let p = cell.load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    // SAFETY: the real dlsym, from our own frame: RTLD_NEXT means "after the shim" (libc).
    let p = unsafe { crate::symbols::dlsym::real_dlsym()(libc::RTLD_NEXT, name.as_ptr()) };
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    // SAFETY: as above (no dlsym interposer on this target).
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    cell.store(p, Ordering::Release);
    p
}

/// glibc's `dladdr` (0, "not found", if it cannot be found).
///
/// # Safety
/// As glibc's `dladdr`.
pub unsafe fn real_dladdr(addr: *const c_void, info: *mut libc::Dl_info) -> i32 {
    let p = real_fn(&REAL_DLADDR, c"dladdr");
    if p.is_null() {
        return 0;
    }
    // SAFETY: p is glibc's dladdr, of this signature; the caller keeps dladdr's contract.
    unsafe { std::mem::transmute::<*mut c_void, DladdrFn>(p)(addr, info) }
}

/// The slot holding library `base`, claiming a free one if none does.
pub fn claim(base: usize) -> Option<usize> {
    (1..=LIBS).find(|&k| {
        match BASE[k].compare_exchange(0, base, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(cur) => cur == base,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_reuses_a_slot_per_library_and_runs_out() {
        let bases: Vec<usize> = (1..=LIBS).map(|k| 0x7000_0000 + k * 0x1000).collect();
        let slots: Vec<usize> = bases.iter().map(|&b| claim(b).unwrap()).collect();
        assert_eq!(slots, (1..=LIBS).collect::<Vec<_>>());
        assert_eq!(claim(bases[2]), Some(3));
        assert_eq!(claim(0x6000_0000), None);
    }
}
