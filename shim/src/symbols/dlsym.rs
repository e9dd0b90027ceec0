//! The `dlsym` interposer. cudart (static inside libnccl) and NCCL ≤ 2.20 reach the driver with
//! `dlsym(libcuda, "cuGetProcAddress[_v2]")`; a `dlsym` on a handle never searches LD_PRELOAD
//! objects, so the only way to see it is to be `dlsym`.
//!
//! glibc answers `dlsym(RTLD_NEXT, …)` relative to its caller's *return address*. A wrapper that
//! calls the real `dlsym` from its own frame answers "next after the shim" instead, and a
//! library that wraps `puts` with `dlsym(RTLD_NEXT, "puts")` gets itself back and recurses. So
//! the export is a naked trampoline: it asks a decider (plain Rust, non-exported) whether the
//! lookup is one of ours and, if not, *jumps* to the real `dlsym` with the caller's arguments
//! and return address untouched.
//!
//! Two name families are ours: `cu*` (the driver lookups, `crate::driver`) and `nc*` (NCCL's
//! API looked up through a library handle, `crate::nccl::handles`). Every other name costs a
//! two-byte test. This layer knows neither: `lib.rs` hands it the two deciders through
//! [`dlsym_export!`], which writes the exported trampoline where both are in view. They are
//! given at compile time, not registered at run time, because `dlsym` can be called before
//! any constructor of ours has run, and so the hot path stays one inlined two-byte match.

use std::ffi::{c_char, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

/// glibc's `dlsym` signature.
pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// What a decider returns for "there is no such symbol": the trampoline then returns NULL to the
/// caller, and the decider has left `dlerror` set by a lookup that failed as glibc's would.
pub const NOT_FOUND: *mut c_void = std::ptr::without_provenance_mut(1);

/// A family's decider: our answer for the lookup ([`NOT_FOUND`] for none), or NULL to let glibc
/// answer. `extern "C"`: a
/// decider catches its own panics, and the ABI says so, so the trampoline's call into it needs
/// no unwind landing pad and can be a tail call.
pub type Decider = extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// glibc's `dlsym`, resolved at the first lookup (other libraries' constructors may call
/// `dlsym` before ours runs, so no constructor sets it). The trampoline jumps through it.
pub(crate) static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(null_mut());

/// Defines the exported `dlsym` trampoline (and its `decide`), dispatching `cu*` names to
/// `$cu` and `nc*` names to `$nc` (each `fn(*mut c_void, *const c_char) -> *mut c_void`,
/// returning NULL for "not ours"). Invoked once, by `lib.rs`.
macro_rules! dlsym_export {
    (cu => $cu:path, nc => $nc:path $(,)?) => {
        /// Exported, unversioned: it binds both `dlsym@GLIBC_2.2.5` (libnccl, older programs) and
        /// `dlsym@GLIBC_2.34` references.
        ///
        /// # Safety
        /// Same contract as glibc's `dlsym`.
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn dlsym(
            handle: *mut ::std::ffi::c_void,
            symbol: *const ::std::ffi::c_char,
        ) -> *mut ::std::ffi::c_void {
            // Entry: rsp ≡ 8 (mod 16). Two pushes and 8 bytes realign it for the call; rdi/rsi
            // are caller-saved, so they are kept across `decide` for the jump.
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
                // NOT_FOUND (1): the answer is "no such symbol" (dlerror already set).
                "cmp rax, 1",
                "jne 3f",
                "xor eax, eax",
                "3:",
                "ret",
                "2:",
                "jmp qword ptr [rip + {real}]",
                ".cfi_endproc",
                decide = sym decide,
                real = sym $crate::symbols::dlsym::REAL_DLSYM,
            )
        }

        /// The trampoline's question: our answer for this lookup, or NULL. Cannot panic (the
        /// deciders catch their own).
        extern "C" fn decide(
            handle: *mut ::std::ffi::c_void,
            symbol: *const ::std::ffi::c_char,
        ) -> *mut ::std::ffi::c_void {
            // SAFETY: the trampoline passes its caller's arguments, under dlsym's contract.
            unsafe { $crate::symbols::dlsym::decide_with(handle, symbol, dlsym, $cu, $nc) }
        }
    };
}
pub(crate) use dlsym_export;

/// Stands in for glibc's `dlsym` if it cannot be found (never expected): lookups fail rather
/// than jumping to address 0.
unsafe extern "C" fn dlsym_unavailable(_: *mut c_void, _: *const c_char) -> *mut c_void {
    null_mut()
}

/// Resolves glibc's `dlsym` into [`REAL_DLSYM`]. `own` is the address of our trampoline when the
/// caller knows it (0 otherwise): an answer equal to it would jump to ourselves forever. (From
/// our own frame `RTLD_NEXT` starts after the shim, so that answer is not expected either way.)
#[cold]
fn resolve_real_dlsym(own: usize) {
    // Our own frame asks, so RTLD_NEXT means "after the shim": libc (glibc ≥ 2.34) or libdl.
    let mut p = null_mut();
    for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
        // SAFETY: valid NUL-terminated strings; dlvsym has no other precondition.
        p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
        if !p.is_null() {
            break;
        }
    }
    if p.is_null() || (own != 0 && p as usize == own) {
        p = dlsym_unavailable as *const () as *mut c_void;
    }
    REAL_DLSYM.store(p, Ordering::Release);
}

/// The real `dlsym`, for the shim's own lookups (they must not come back through the hook).
pub fn real_dlsym() -> DlsymFn {
    if REAL_DLSYM.load(Ordering::Acquire).is_null() {
        resolve_real_dlsym(0);
    }
    // SAFETY: REAL_DLSYM holds glibc's dlsym or `dlsym_unavailable`, both with this signature.
    unsafe { std::mem::transmute::<*mut c_void, DlsymFn>(REAL_DLSYM.load(Ordering::Acquire)) }
}

/// Returns our wrapper for a watched name (or an NCCL name through a handle), or NULL to let
/// the trampoline jump to the real `dlsym`. Runs on every `dlsym` in the process: no allocation,
/// no lock, no `dlsym`/`dlopen` of its own for names that are not watched, and a two-byte test
/// first. `own` is the trampoline's address; `cu` and `nc` are the deciders for the two
/// families (see [`dlsym_export!`]).
///
/// # Safety
/// `symbol` is null or a NUL-terminated string (`dlsym`'s contract).
#[inline(always)]
pub(crate) unsafe fn decide_with(
    handle: *mut c_void,
    symbol: *const c_char,
    own: DlsymFn,
    cu: Decider,
    nc: Decider,
) -> *mut c_void {
    if REAL_DLSYM.load(Ordering::Relaxed).is_null() {
        resolve_real_dlsym(own as usize);
    }
    if symbol.is_null() {
        return null_mut();
    }
    // SAFETY: `symbol` is a NUL-terminated string (checked non-null above; the caller's
    // contract); byte 1 is read only when byte 0 is not the terminator.
    let (b0, b1) = unsafe {
        let b0 = *symbol as u8;
        (b0, if b0 == 0 { 0 } else { *symbol.add(1) as u8 })
    };
    match (b0, b1) {
        (b'c', b'u') => cu(handle, symbol),
        // `dlsym(handle, "ncclX")`: a wrapper bound to that library (nccl/handles.rs).
        (b'n', b'c') => nc(handle, symbol),
        _ => null_mut(),
    }
}
