//! Wrappers of `cuGetProcAddress` (v1 ABI, 4 arguments) and `cuGetProcAddress_v2` (5). cudart
//! asks the pointer it got from `dlsym` for `cuGetProcAddress` itself and makes its ~415 lookups
//! through *that* answer, so the wrapper swaps in a wrapper for the self-lookup too (ABI chosen
//! by the requested version) as well as for every watched function. The real function always
//! runs first; rc and `symbolStatus` are the driver's, untouched; unknown names are untouched.
//!
//! Also the other way a wrapper is handed out: the `dlsym` decider for `cu*` names
//! ([`decide_cu`], registered with the trampoline by `lib.rs`), and the table of wrapper copies
//! both hand out ([`wrapper`]).

use super::counters::{count_lookup, count_wrapped};
use super::cuda::*;
use super::exports::{ipc, mem, multicast};
use super::watch::{self, W};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;

/// Returned if a wrapper runs before its slot is set (cannot happen: the slot is stored before
/// the wrapper is handed out). `CUDA_ERROR_UNKNOWN`.
const NO_TARGET: CuResult = 999;

pub unsafe extern "C" fn gpa_v1<const S: usize>(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CuResult {
    let p = watch::real(W::GpaV1, S);
    if p.is_null() {
        return NO_TARGET;
    }
    // SAFETY: the slot holds the driver's v1 cuGetProcAddress; the caller's arguments are
    // forwarded unchanged.
    let rc = unsafe {
        std::mem::transmute::<*mut c_void, GetProcAddressV1>(p)(symbol, pfn, version, flags)
    };
    after_lookup(symbol, pfn, version, rc);
    rc
}

pub unsafe extern "C" fn gpa_v2<const S: usize>(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuResult {
    let p = watch::real(W::GpaV2, S);
    if p.is_null() {
        return NO_TARGET;
    }
    // SAFETY: as in gpa_v1, v2 ABI.
    let rc = unsafe {
        std::mem::transmute::<*mut c_void, GetProcAddressV2>(p)(symbol, pfn, version, flags, status)
    };
    after_lookup(symbol, pfn, version, rc);
    rc
}

/// Counts the lookup and, for a successful lookup of a watched name, replaces `*pfn` with the
/// wrapper that calls it.
#[inline]
fn after_lookup(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, rc: CuResult) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        count_lookup();
        if rc != CUDA_SUCCESS || symbol.is_null() || pfn.is_null() {
            return;
        }
        // SAFETY: the driver just wrote *pfn through this pointer and returned success.
        let got = unsafe { *pfn };
        if got.is_null() {
            return;
        }
        // SAFETY: the driver accepted `symbol` as a NUL-terminated name.
        let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
        let Some(w) = watch::by_gpa_name(name, version) else {
            return;
        };
        if let Some(wrapper) = watch::claim(w, got, wrapper) {
            // SAFETY: as above; same pointer the driver wrote.
            unsafe { *pfn = wrapper };
            count_wrapped();
        }
    }));
}

/// The `dlsym` decider for names starting with `cu`: our wrapper for a watched name, or NULL to
/// let glibc answer. Runs inside `dlsym` (see `crate::symbols::dlsym`); catches its own panics
/// (`extern "C"`, so the trampoline's decider knows it cannot unwind and tail-calls it).
#[cold]
#[inline(never)]
pub extern "C" fn decide_cu(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `symbol` is non-null and NUL-terminated (dlsym's contract; checked by the caller).
        let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
        // The shim's own lookups (library version probes in snapshots) are not the host's.
        if name.get(2).is_some_and(u8::is_ascii_uppercase) && !crate::runtime::recorder::in_shim() {
            count_lookup();
        }
        let Some(w) = watch::by_dlsym_name(name) else {
            return null_mut();
        };
        // RTLD_NEXT depends on who asks; only the jump keeps that right, so no wrapper for it.
        if handle == libc::RTLD_NEXT {
            return null_mut();
        }
        // SAFETY: the real dlsym with the caller's own arguments. For a handle the answer does
        // not depend on the caller; for RTLD_DEFAULT it is the global scope's answer, and a
        // miss falls through to the caller-relative lookup.
        let real = unsafe { crate::symbols::dlsym::real_dlsym()(handle, symbol) };
        if real.is_null() {
            return null_mut();
        }
        match watch::claim(w, real, wrapper) {
            Some(wrapper) => {
                count_wrapped();
                wrapper
            }
            None => real,
        }
    }))
    .unwrap_or(null_mut())
}

/// Wrapper copy `s` of watched ABI `w` (see `watch`), as the pointer handed to the host.
pub(crate) fn wrapper(w: watch::W, s: usize) -> *mut std::ffi::c_void {
    use watch::W;
    macro_rules! pick {
        ($m:ident :: $f:ident) => {
            match s {
                0 => $m::$f::<0> as *const () as usize,
                1 => $m::$f::<1> as *const () as usize,
                2 => $m::$f::<2> as *const () as usize,
                3 => $m::$f::<3> as *const () as usize,
                4 => $m::$f::<4> as *const () as usize,
                5 => $m::$f::<5> as *const () as usize,
                6 => $m::$f::<6> as *const () as usize,
                7 => $m::$f::<7> as *const () as usize,
                _ => 0,
            }
        };
    }
    const _: () = assert!(watch::SLOTS == 8, "pick! lists one arm per slot");
    let p = match w {
        W::GpaV1 => pick!(self::gpa_v1),
        W::GpaV2 => pick!(self::gpa_v2),
        W::MemExport => pick!(mem::mem_export),
        W::MemImport => pick!(mem::mem_import),
        W::MemCreate => pick!(mem::mem_create),
        W::MemRelease => pick!(mem::mem_release),
        W::MemMap => pick!(mem::mem_map),
        W::MemUnmap => pick!(mem::mem_unmap),
        W::MemSetAccess => pick!(mem::mem_set_access),
        W::MemAddressReserve => pick!(mem::mem_address_reserve),
        W::MemAddressFree => pick!(mem::mem_address_free),
        W::MemRetain => pick!(mem::mem_retain),
        W::MemGetHandleForRange => pick!(mem::mem_get_handle_for_range),
        W::McCreate => pick!(multicast::mc_create),
        W::McAddDevice => pick!(multicast::mc_add_device),
        W::McBindMem => pick!(multicast::mc_bind_mem),
        W::McBindAddr => pick!(multicast::mc_bind_addr),
        W::McUnbind => pick!(multicast::mc_unbind),
        W::IpcGet => pick!(ipc::ipc_get),
        W::IpcOpenV1 => pick!(ipc::ipc_open_v1),
        W::IpcOpenV2 => pick!(ipc::ipc_open_v2),
        W::IpcClose => pick!(ipc::ipc_close),
    };
    p as *mut std::ffi::c_void
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_wrapper_copy_is_distinct() {
        let mut seen = HashSet::new();
        for &w in watch::W::ALL {
            for s in 0..watch::SLOTS {
                let p = wrapper(w, s);
                assert!(!p.is_null());
                assert!(seen.insert(p as usize), "{w:?}/{s} shares a pointer");
            }
        }
    }

    #[test]
    fn claim_reuses_a_copy_per_pointer_and_refuses_our_own() {
        use watch::{claim, real, W};
        let a = 0x1000 as *mut std::ffi::c_void;
        let b = 0x2000 as *mut std::ffi::c_void;
        let wa = claim(W::McUnbind, a, wrapper).unwrap();
        assert_eq!(claim(W::McUnbind, a, wrapper), Some(wa));
        let wb = claim(W::McUnbind, b, wrapper).unwrap();
        assert_ne!(wa, wb);
        assert_eq!(real(W::McUnbind, 0), a);
        assert_eq!(real(W::McUnbind, 1), b);
        // A wrapper looked up again through a wrapped cuGetProcAddress is not wrapped twice.
        assert_eq!(claim(W::McUnbind, wa, wrapper), None);
        for i in 2..watch::SLOTS {
            assert!(claim(W::McUnbind, (0x3000 + i * 16) as *mut _, wrapper).is_some());
        }
        // All copies taken by other pointers: pass through.
        assert_eq!(claim(W::McUnbind, 0x9000 as *mut _, wrapper), None);
        assert_eq!(claim(W::McUnbind, std::ptr::null_mut(), wrapper), None);
    }
}
