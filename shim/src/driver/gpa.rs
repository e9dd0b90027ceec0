//! Wrappers of `cuGetProcAddress` (v1 ABI, 4 arguments) and `cuGetProcAddress_v2` (5). cudart
//! asks the pointer it got from `dlsym` for `cuGetProcAddress` itself and makes its ~415 lookups
//! through *that* answer, so the wrapper swaps in a wrapper for the self-lookup too (ABI chosen
//! by the requested version) as well as for every watched function. The real function always
//! runs first; rc and `symbolStatus` are the driver's, untouched; unknown names are untouched.

use super::cuda::*;
use super::watch::{self, W};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

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
        super::count_lookup();
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
        if let Some(wrapper) = watch::claim(w, got, super::wrapper) {
            // SAFETY: as above; same pointer the driver wrote.
            unsafe { *pfn = wrapper };
            super::count_wrapped();
        }
    }));
}
