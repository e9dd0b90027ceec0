//! The `dlsym` interposer. cudart (static inside libnccl) and NCCL ≤ 2.20 reach the driver with
//! `dlsym(libcuda, "cuGetProcAddress[_v2]")`; a `dlsym` on a handle never searches LD_PRELOAD
//! objects, so the only way to see it is to be `dlsym`.
//!
//! glibc answers `dlsym(RTLD_NEXT, …)` relative to its caller's *return address*. A wrapper that
//! calls the real `dlsym` from its own frame answers "next after the shim" instead, and a
//! library that wraps `puts` with `dlsym(RTLD_NEXT, "puts")` gets itself back and recurses. So
//! the export is a naked trampoline: it asks [`decide`] (plain Rust, non-exported) whether the
//! lookup is one of ours and, if not, *jumps* to the real `dlsym` with the caller's arguments
//! and return address untouched.
//!
//! Two name families are ours: `cu*` (the driver lookups, here) and `nc*` (NCCL's API looked up
//! through a library handle, `crate::nccl::handles`). Every other name costs a two-byte test.

use super::watch;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// glibc's `dlsym`, resolved at the first lookup (other libraries' constructors may call
/// `dlsym` before ours runs, so no constructor sets it). The trampoline jumps through it.
static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(null_mut());

/// Exported, unversioned: it binds both `dlsym@GLIBC_2.2.5` (libnccl, older programs) and
/// `dlsym@GLIBC_2.34` references.
///
/// # Safety
/// Same contract as glibc's `dlsym`.
#[unsafe(no_mangle)]
#[unsafe(naked)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // Entry: rsp ≡ 8 (mod 16). Two pushes and 8 bytes realign it for the call; rdi/rsi are
    // caller-saved, so they are kept across `decide` for the jump.
    core::arch::naked_asm!(
        ".cfi_startproc",
        "push rdi",
        ".cfi_adjust_cfa_offset 8",
        "push rsi",
        ".cfi_adjust_cfa_offset 8",
        "sub rsp, 8",
        ".cfi_adjust_cfa_offset 8",
        "call {decide}",
        "add rsp, 8",
        ".cfi_adjust_cfa_offset -8",
        "pop rsi",
        ".cfi_adjust_cfa_offset -8",
        "pop rdi",
        ".cfi_adjust_cfa_offset -8",
        "test rax, rax",
        "jz 2f",
        "ret",
        "2:",
        "jmp qword ptr [rip + {real}]",
        ".cfi_endproc",
        decide = sym decide,
        real = sym REAL_DLSYM,
    )
}

/// Stands in for glibc's `dlsym` if it cannot be found (never expected): lookups fail rather
/// than jumping to address 0.
unsafe extern "C" fn dlsym_unavailable(_: *mut c_void, _: *const c_char) -> *mut c_void {
    null_mut()
}

#[cold]
fn resolve_real_dlsym() {
    // Our own frame asks, so RTLD_NEXT means "after the shim": libc (glibc ≥ 2.34) or libdl.
    let mut p = null_mut();
    for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
        // SAFETY: valid NUL-terminated strings; dlvsym has no other precondition.
        p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
        if !p.is_null() {
            break;
        }
    }
    if p.is_null() || p == dlsym as *const () as *mut c_void {
        p = dlsym_unavailable as *const () as *mut c_void;
    }
    REAL_DLSYM.store(p, Ordering::Release);
}

/// The real `dlsym`, for the shim's own lookups (they must not come back through the hook).
pub fn real_dlsym() -> DlsymFn {
    if REAL_DLSYM.load(Ordering::Acquire).is_null() {
        resolve_real_dlsym();
    }
    // SAFETY: REAL_DLSYM holds glibc's dlsym or `dlsym_unavailable`, both with this signature.
    unsafe { std::mem::transmute::<*mut c_void, DlsymFn>(REAL_DLSYM.load(Ordering::Acquire)) }
}

/// Returns our wrapper for a watched name (or an NCCL name through a handle), or NULL to let
/// the trampoline jump to the real `dlsym`. Runs on every `dlsym` in the process: no allocation, no lock, no `dlsym`/`dlopen`
/// of its own for names that are not watched, and a two-byte test first.
extern "C" fn decide(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    if REAL_DLSYM.load(Ordering::Relaxed).is_null() {
        resolve_real_dlsym();
    }
    if symbol.is_null() {
        return null_mut();
    }
    // SAFETY: `symbol` is a NUL-terminated string (dlsym's contract); byte 1 is read only when
    // byte 0 is not the terminator.
    let (b0, b1) = unsafe {
        let b0 = *symbol as u8;
        (b0, if b0 == 0 { 0 } else { *symbol.add(1) as u8 })
    };
    match (b0, b1) {
        (b'c', b'u') => decide_cu(handle, symbol),
        // `dlsym(handle, "ncclX")`: a wrapper bound to that library (nccl/handles.rs).
        (b'n', b'c') => crate::nccl::handles::decide(handle, symbol),
        _ => null_mut(),
    }
}

#[cold]
#[inline(never)]
fn decide_cu(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: as in `decide`.
        let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
        // The shim's own lookups (library version probes in snapshots) are not the host's.
        if name.get(2).is_some_and(u8::is_ascii_uppercase) && !crate::recorder::in_shim() {
            super::count_lookup();
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
        let real = unsafe { real_dlsym()(handle, symbol) };
        if real.is_null() {
            return null_mut();
        }
        match watch::claim(w, real, super::wrapper) {
            Some(wrapper) => {
                super::count_wrapped();
                wrapper
            }
            None => real,
        }
    }))
    .unwrap_or(null_mut())
}
