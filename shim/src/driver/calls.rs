//! The shape of the recording wrappers of the watched cuMem / multicast / legacy IPC driver
//! functions, and [`cu_export!`], which writes one wrapper per row of the tables in
//! `super::exports` (each row: the call, its C signature, its argument view, what is recorded
//! at entry and after success). Each wrapper records the call with its arguments at entry (so a call that never returns reads as
//! in flight in the dump), calls the real function with the caller's arguments unchanged, then
//! writes the out-values and the CUresult in place.
//!
//! The caller's return address goes into every record (which library made the call: NCCL,
//! PyTorch's allocator...). Stable Rust cannot read it, so each wrapper is entered through a
//! naked stub that copies it into a seventh argument slot on the stack and calls the Rust body
//! declared with six register arguments plus `caller`. The body ignores register arguments
//! the C function does not have and truncates 32-bit ones, exactly as the C callee would.

use super::cuda::*;
use super::device::{self, DeviceIdentity, UNKNOWN};
use super::watch::{self, W};
use crate::runtime::recorder;
use ncclshim_dump::layout::SLOT_ARGS;
use ncclshim_dump::schema::slot_flags;
use ncclshim_dump::{CallId, Entry, PendingCall, RecordKind, Recorder, RingWriter};
use std::ffi::{c_int, c_uint, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// `CUDA_ERROR_UNKNOWN`, returned only if a wrapper had no target (cannot happen, see
/// lookup.rs).
pub(super) const NO_TARGET: CuResult = 999;

/// Defines the naked entry stub `$stub::<S>` for the body `$body::<S>`.
macro_rules! stub {
    ($stub:ident => $($body:ident)::+) => {
        #[unsafe(naked)]
        pub unsafe extern "C" fn $stub<const S: usize>() {
            // Entry rsp ≡ 8 (mod 16); pushing a copy of the return address realigns it and
            // becomes the body's 7th (first stack) argument.
            core::arch::naked_asm!(
                ".cfi_startproc",
                "push qword ptr [rsp]",
                ".cfi_adjust_cfa_offset 8",
                "call {body}",
                "add rsp, 8",
                ".cfi_adjust_cfa_offset -8",
                "ret",
                ".cfi_endproc",
                body = sym $($body)::+::<S>,
            )
        }
    };
}

/// Records the entry of `call`; `fill` runs only when recording (inside the shim's guard).
#[inline]
pub(super) fn begin(
    call: CallId,
    fill: impl FnOnce(&mut [u64; SLOT_ARGS], &Recorder, &RingWriter),
) -> Option<PendingCall> {
    recorder::record(|rec, ring| {
        super::counters::flush_counters(rec);
        let mut e = Entry::new(RecordKind::Call, call);
        // NESTED: NCCL itself made this driver call (from inside an intercepted nccl* call);
        // without it the caller is the application or another library (PyTorch's allocator).
        e.flags = slot_flags::RC_IS_CUDA
            | if crate::runtime::thread::nested() {
                slot_flags::NESTED
            } else {
                0
            };
        fill(&mut e.args, rec, ring);
        ring.begin(&e)
    })
}

/// Writes the out-values (only after success: on failure the driver may not have written them)
/// and completes the record.
#[inline]
pub(super) fn finish(pending: Option<PendingCall>, rc: CuResult, outs: impl FnOnce(&PendingCall)) {
    if let Some(p) = pending {
        let _ = catch_unwind(AssertUnwindSafe(move || {
            if rc == CUDA_SUCCESS {
                outs(&p);
            } else if let Some(rec) = recorder::SHIM.existing() {
                // This asks the driver for its text outside the recorder's guard: keep the
                // errno the failed call left for the caller.
                // SAFETY: __errno_location returns this thread's errno.
                let errno = unsafe { libc::__errno_location() };
                // SAFETY: as above.
                let saved = unsafe { *errno };
                super::errtext::attach(rec, &p, rc);
                // SAFETY: as above.
                unsafe { *errno = saved };
            }
            p.complete(rc);
        }));
    }
}

#[inline]
pub(super) fn target<F: Copy>(w: W, s: usize) -> Option<F> {
    let p = watch::real(w, s);
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: the slot of `w` only ever holds the driver's function of the ABI `F` describes,
    // stored by `watch::claim` before this wrapper was handed out.
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// One recorded driver call, the shape every wrapper shares: find the real function of `w`
/// (stub instance `s`), record the entry of `call` with the arguments `fill` writes, make the
/// call through `forward`, then complete the record with the out-values `outs` writes (see
/// `finish`) and hand the driver's CUresult back unchanged.
#[inline(always)]
pub(super) fn recorded<F: Copy>(
    w: W,
    s: usize,
    call: CallId,
    fill: impl FnOnce(&mut [u64; SLOT_ARGS], &Recorder, &RingWriter),
    forward: impl FnOnce(F) -> CuResult,
    outs: impl FnOnce(&PendingCall),
) -> CuResult {
    let Some(real) = target::<F>(w, s) else {
        return NO_TARGET;
    };
    let pending = begin(call, fill);
    let rc = forward(real);
    finish(pending, rc, outs);
    rc
}

/// The current device, noted in the dump the first time it is seen.
pub(super) fn identity(rec: &Recorder, ring: &RingWriter) -> DeviceIdentity {
    let id = device::current();
    device::note_gpu(rec, ring, &id);
    id
}

/// Reads an out-handle of `handle_type` written by the driver: an `int` fd for POSIX_FD, the
/// first 8 bytes otherwise (a FABRIC handle is 64 bytes, WIN32 a pointer).
///
/// # Safety
/// `p` is null or points to a shareable handle of that type.
pub(super) unsafe fn read_shareable(p: *const c_void, handle_type: c_uint) -> u64 {
    if p.is_null() {
        return UNKNOWN;
    }
    match handle_type {
        // SAFETY: per the driver's contract for these handle types.
        HANDLE_TYPE_POSIX_FD | HANDLE_TYPE_WIN32_KMT => unsafe {
            p.cast::<c_int>().read_unaligned() as u32 as u64
        },
        // SAFETY: as above.
        HANDLE_TYPE_WIN32 | HANDLE_TYPE_FABRIC => unsafe { p.cast::<u64>().read_unaligned() },
        _ => UNKNOWN,
    }
}

/// # Safety
/// `p` is null or valid for reading a `T`.
#[inline]
pub(super) unsafe fn out<T: Copy + Into<u64>>(p: *const T) -> u64 {
    if p.is_null() {
        UNKNOWN
    } else {
        // SAFETY: per the caller.
        unsafe { p.read_unaligned() }.into()
    }
}

pub(crate) use stub;

/// The first two 8-byte words of an IPC handle (little-endian), enough to match an export
/// with its import across processes.
pub(super) fn ipc_words(h: &CuIpcMemHandle) -> (u64, u64) {
    let mut w0 = [0u8; 8];
    let mut w1 = [0u8; 8];
    w0.copy_from_slice(&h.reserved[0..8]);
    w1.copy_from_slice(&h.reserved[8..16]);
    (u64::from_le_bytes(w0), u64::from_le_bytes(w1))
}

/// Defines one recorded driver wrapper per row (the table is in `super::exports`). A row:
///
/// ```text
/// name = WatchedAbi as CallId,
///     fn(C argument types) <- (the six register arguments, `_` for unused; caller),
///     forward(the C call's arguments, from the registers),
///     record |rec, ring| the call's `schema::args` view at entry (result fields UNKNOWN),
///     outs |pending| the result arguments written after CUDA_SUCCESS;
/// ```
///
/// and makes the naked entry stub `name::<S>` (which passes the caller's return address) and its
/// body `name::body::<S>`, the shape [`recorded`] describes. The body ignores register arguments
/// the C function does not have and truncates 32-bit ones, exactly as the C callee would.
macro_rules! cu_export {
    ($(
        $(#[$doc:meta])*
        $name:ident = $w:ident as $call:ident,
        fn($($cty:ty),* $(,)?) <- ($($reg:tt),*; $caller:ident),
        forward($($fwd:expr),* $(,)?),
        record |$rec:pat_param, $ring:pat_param| $view:expr,
        outs |$p:pat_param| $outs:expr;
    )*) => {$(
        $crate::driver::calls::stub!($name => $name::body);

        $(#[$doc])*
        #[allow(clippy::unnecessary_cast)] // a row's casts say what the C signature is
        mod $name {
            use super::*;

            pub(super) unsafe extern "C" fn body<const S: usize>(
                $($reg: u64,)*
                $caller: usize,
            ) -> CuResult {
                type F = unsafe extern "C" fn($($cty),*) -> CuResult;
                recorded::<F>(
                    W::$w,
                    S,
                    CallId::$call,
                    |a, $rec, $ring| *a = ArgView::to_args(&$view),
                    // SAFETY: the caller's arguments, forwarded unchanged to the driver's
                    // function of this signature (the row's `fn(...)`).
                    |real| unsafe { real($($fwd),*) },
                    |$p| $outs,
                )
            }
        }
    )*};
}
pub(crate) use cu_export;

#[cfg(test)]
mod tests {
    use super::*;

    /// The positions the wrappers write must be the schema's names for them.
    #[test]
    fn argument_positions_match_the_schema() {
        let expect: &[(CallId, &[&str])] = &[
            (
                CallId::CuMemExportToShareableHandle,
                &[
                    "shareable_handle",
                    "handle",
                    "handle_type",
                    "flags",
                    "device",
                    "pci_bus_id",
                    "caller",
                ],
            ),
            (
                CallId::CuMemImportFromShareableHandle,
                &[
                    "handle",
                    "os_handle",
                    "handle_type",
                    "device",
                    "pci_bus_id",
                    "uuid_hi",
                    "uuid_lo",
                    "caller",
                ],
            ),
            (
                CallId::CuMemCreate,
                &[
                    "handle",
                    "size",
                    "prop_type",
                    "location_type",
                    "location_id",
                    "handle_types",
                    "flags",
                    "caller",
                ],
            ),
            (CallId::CuMemRelease, &["handle", "caller"]),
            (
                CallId::CuMemMap,
                &["ptr", "size", "offset", "handle", "flags", "caller"],
            ),
            (CallId::CuMemUnmap, &["ptr", "size", "caller"]),
            (
                CallId::CuMemSetAccess,
                &[
                    "ptr",
                    "size",
                    "count",
                    "location_type",
                    "location_id",
                    "access_flags",
                    "caller",
                ],
            ),
            (
                CallId::CuMemAddressReserve,
                &["ptr", "size", "alignment", "addr", "flags", "caller"],
            ),
            (CallId::CuMemAddressFree, &["ptr", "size", "caller"]),
            (
                CallId::CuMemRetainAllocationHandle,
                &["handle", "addr", "caller"],
            ),
            (
                CallId::CuMemGetHandleForAddressRange,
                &["handle", "ptr", "size", "handle_type", "flags", "caller"],
            ),
            (
                CallId::CuMulticastCreate,
                &[
                    "handle",
                    "size",
                    "num_devices",
                    "handle_types",
                    "flags",
                    "caller",
                ],
            ),
            (
                CallId::CuMulticastAddDevice,
                &["mc_handle", "device", "caller"],
            ),
            (
                CallId::CuMulticastBindMem,
                &[
                    "mc_handle",
                    "mc_offset",
                    "mem_handle",
                    "mem_offset",
                    "size",
                    "flags",
                    "caller",
                ],
            ),
            (
                CallId::CuMulticastBindAddr,
                &["mc_handle", "mc_offset", "ptr", "size", "flags", "caller"],
            ),
            (
                CallId::CuMulticastUnbind,
                &["mc_handle", "device", "mc_offset", "size", "caller"],
            ),
            (
                CallId::CuIpcGetMemHandle,
                &["ptr", "handle_w0", "handle_w1", "device", "caller"],
            ),
            (
                CallId::CuIpcOpenMemHandle,
                &[
                    "ptr",
                    "handle_w0",
                    "handle_w1",
                    "flags",
                    "abi",
                    "device",
                    "pci_bus_id",
                    "caller",
                ],
            ),
            (CallId::CuIpcCloseMemHandle, &["ptr", "caller"]),
        ];
        for (call, names) in expect {
            assert_eq!(call.arg_names(), *names, "{call:?}");
        }
    }
}
