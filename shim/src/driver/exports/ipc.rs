//! The legacy CUDA IPC wrappers: `cuIpcGetMemHandle` and `cuIpcCloseMemHandle` as
//! `cu_export!` rows (see `crate::driver::calls`); `cuIpcOpenMemHandle` (both ABIs) written
//! out, because its 64-byte handle is passed in memory rather than in registers.

use crate::driver::calls::{cu_export, out, recorded};
use crate::driver::calls::{identity, ipc_words, stub};
use crate::driver::cuda::*;
use crate::driver::device::UNKNOWN;
use crate::driver::watch::W;
use ncclshim_dump::schema::{args, ArgView};
use ncclshim_dump::{arg_index, CallId};
use std::ffi::c_uint;

cu_export! {
    /// cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr)
    ipc_get = IpcGet as CuIpcGetMemHandle,
        fn(*mut CuIpcMemHandle, CuDevicePtr) <- (handle, ptr, _, _, _, _; caller),
        forward(handle as *mut CuIpcMemHandle, ptr),
        record |rec, ring| {
            let id = identity(rec, ring);
            args::CuIpcGetMemHandle {
                ptr,
                handle_w0: UNKNOWN,
                handle_w1: UNKNOWN,
                device: id.ordinal,
                caller: caller as u64,
            }
        },
        outs |p| {
            let h = handle as *const CuIpcMemHandle;
            if !h.is_null() {
                // SAFETY: on success the driver filled the 64-byte handle.
                let (w0, w1) = ipc_words(unsafe { &*h });
                p.set_arg(arg_index!(CuIpcGetMemHandle, handle_w0), w0);
                p.set_arg(arg_index!(CuIpcGetMemHandle, handle_w1), w1);
            }
        };

    /// cuIpcCloseMemHandle(CUdeviceptr dptr)
    ipc_close = IpcClose as CuIpcCloseMemHandle,
        fn(CuDevicePtr) <- (ptr, _, _, _, _, _; caller),
        forward(ptr),
        record |_, _| args::CuIpcCloseMemHandle { ptr, caller: caller as u64 },
        outs |_| {};
}

// ---- cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags)
// The 64-byte handle is passed in memory: after the stub's push it sits above `caller` and the
// original return address, which the body declares as its 8th argument to reach it.
type IpcOpenFn = unsafe extern "C" fn(*mut CuDevicePtr, CuIpcMemHandle, c_uint) -> CuResult;
stub!(ipc_open_v1 => ipc_open_v1_body);
stub!(ipc_open_v2 => ipc_open_v2_body);

unsafe extern "C" fn ipc_open_v1_body<const S: usize>(
    pdptr: u64,
    flags: u64,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    caller: usize,
    _ret: usize,
    handle: CuIpcMemHandle,
) -> CuResult {
    // SAFETY: forwarding the caller's arguments.
    unsafe { ipc_open(W::IpcOpenV1, S, 1, pdptr, flags as c_uint, caller, handle) }
}

unsafe extern "C" fn ipc_open_v2_body<const S: usize>(
    pdptr: u64,
    flags: u64,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    caller: usize,
    _ret: usize,
    handle: CuIpcMemHandle,
) -> CuResult {
    // SAFETY: forwarding the caller's arguments.
    unsafe { ipc_open(W::IpcOpenV2, S, 2, pdptr, flags as c_uint, caller, handle) }
}

#[inline(always)]
unsafe fn ipc_open(
    w: W,
    s: usize,
    abi: u64,
    pdptr: u64,
    flags: c_uint,
    caller: usize,
    handle: CuIpcMemHandle,
) -> CuResult {
    recorded::<IpcOpenFn>(
        w,
        s,
        CallId::CuIpcOpenMemHandle,
        |a, rec, ring| {
            let id = identity(rec, ring);
            let (w0, w1) = ipc_words(&handle);
            *a = args::CuIpcOpenMemHandle {
                ptr: UNKNOWN,
                handle_w0: w0,
                handle_w1: w1,
                flags: flags.into(),
                abi,
                device: id.ordinal,
                pci_bus_id: id.pci_bus_id,
                caller: caller as u64,
            }
            .to_args();
        },
        // SAFETY: forwarded unchanged (the handle by value, as received).
        |real| unsafe { real(pdptr as *mut CuDevicePtr, handle, flags) },
        // SAFETY: on success the driver wrote the mapped address.
        |p| {
            p.set_arg(arg_index!(CuIpcOpenMemHandle, ptr), unsafe {
                out(pdptr as *const CuDevicePtr)
            })
        },
    )
}
