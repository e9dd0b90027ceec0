//! Recording wrappers of the watched cuMem / multicast / legacy IPC driver functions. Each
//! wrapper records the call with its arguments at entry (so a call that never returns reads as
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
use crate::recorder;
use ncclshim_dump::layout::SLOT_ARGS;
use ncclshim_dump::schema::{args, slot_flags, ArgView};
use ncclshim_dump::{arg_index, CallId, Entry, PendingCall, RecordKind, Recorder, RingWriter};
use std::ffi::{c_int, c_uint, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// `CUDA_ERROR_UNKNOWN`, returned only if a wrapper had no target (cannot happen, see gpa.rs).
const NO_TARGET: CuResult = 999;

/// Defines the naked entry stub `$stub::<S>` for the body `$body::<S>`.
macro_rules! stub {
    ($stub:ident => $body:ident) => {
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
                body = sym $body::<S>,
            )
        }
    };
}

/// Records the entry of `call`; `fill` runs only when recording (inside the shim's guard).
#[inline]
fn begin(
    call: CallId,
    fill: impl FnOnce(&mut [u64; SLOT_ARGS], &Recorder, &RingWriter),
) -> Option<PendingCall> {
    recorder::record(|rec, ring| {
        super::flush_counters(rec);
        let mut e = Entry::new(RecordKind::Call, call);
        // NESTED: NCCL itself made this driver call (from inside an intercepted nccl* call);
        // without it the caller is the application or another library (PyTorch's allocator).
        e.flags = slot_flags::RC_IS_CUDA
            | if crate::nccl::call::nested() {
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
fn finish(pending: Option<PendingCall>, rc: CuResult, outs: impl FnOnce(&PendingCall)) {
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
fn target<F: Copy>(w: W, s: usize) -> Option<F> {
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
fn recorded<F: Copy>(
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
fn identity(rec: &Recorder, ring: &RingWriter) -> DeviceIdentity {
    let id = device::current();
    device::note_gpu(rec, ring, &id);
    id
}

/// Reads an out-handle of `handle_type` written by the driver: an `int` fd for POSIX_FD, the
/// first 8 bytes otherwise (a FABRIC handle is 64 bytes, WIN32 a pointer).
///
/// # Safety
/// `p` is null or points to a shareable handle of that type.
unsafe fn read_shareable(p: *const c_void, handle_type: c_uint) -> u64 {
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
unsafe fn out<T: Copy + Into<u64>>(p: *const T) -> u64 {
    if p.is_null() {
        UNKNOWN
    } else {
        // SAFETY: per the caller.
        unsafe { p.read_unaligned() }.into()
    }
}

// ---- cuMemExportToShareableHandle(void* shareable, handle, CUmemAllocationHandleType, u64 flags)
type ExportFn = unsafe extern "C" fn(*mut c_void, CuMemHandle, c_uint, u64) -> CuResult;
stub!(mem_export => mem_export_body);
unsafe extern "C" fn mem_export_body<const S: usize>(
    shareable: u64,
    handle: u64,
    ty: u64,
    flags: u64,
    _: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    let ty = ty as c_uint;
    recorded::<ExportFn>(
        W::MemExport,
        S,
        CallId::CuMemExportToShareableHandle,
        |a, rec, ring| {
            let id = identity(rec, ring);
            *a = args::CuMemExportToShareableHandle {
                shareable_handle: UNKNOWN,
                handle,
                handle_type: ty.into(),
                flags,
                device: id.ordinal,
                pci_bus_id: id.pci_bus_id,
                caller: caller as u64,
            }
            .to_args();
        },
        // SAFETY: the caller's arguments, forwarded unchanged to the driver's function.
        |real| unsafe { real(shareable as *mut c_void, handle, ty, flags) },
        // SAFETY: on success the driver wrote a handle of type `ty` at `shareable`.
        |p| {
            p.set_arg(
                arg_index!(CuMemExportToShareableHandle, shareable_handle),
                unsafe { read_shareable(shareable as *const c_void, ty) },
            )
        },
    )
}

// ---- cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* h, void* osHandle, type)
type ImportFn = unsafe extern "C" fn(*mut CuMemHandle, *mut c_void, c_uint) -> CuResult;
stub!(mem_import => mem_import_body);
unsafe extern "C" fn mem_import_body<const S: usize>(
    handle: u64,
    os_handle: u64,
    ty: u64,
    _: u64,
    _: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    let ty = ty as c_uint;
    recorded::<ImportFn>(
        W::MemImport,
        S,
        CallId::CuMemImportFromShareableHandle,
        |a, rec, ring| {
            let id = identity(rec, ring);
            // POSIX_FD passes the fd itself cast to a pointer: keep the int.
            let os = if ty == HANDLE_TYPE_POSIX_FD {
                os_handle as c_int as u32 as u64
            } else {
                os_handle
            };
            *a = args::CuMemImportFromShareableHandle {
                handle: UNKNOWN,
                os_handle: os,
                handle_type: ty.into(),
                device: id.ordinal,
                pci_bus_id: id.pci_bus_id,
                uuid_hi: id.uuid_hi,
                uuid_lo: id.uuid_lo,
                caller: caller as u64,
            }
            .to_args();
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe { real(handle as *mut CuMemHandle, os_handle as *mut c_void, ty) },
        // SAFETY: on success the driver wrote the new handle.
        |p| {
            p.set_arg(arg_index!(CuMemImportFromShareableHandle, handle), unsafe {
                out(handle as *const CuMemHandle)
            })
        },
    )
}

// ---- cuMemCreate(CUmemGenericAllocationHandle* h, size_t size, const CUmemAllocationProp*, u64 flags)
type CreateFn = unsafe extern "C" fn(*mut CuMemHandle, usize, *const c_void, u64) -> CuResult;
stub!(mem_create => mem_create_body);
unsafe extern "C" fn mem_create_body<const S: usize>(
    handle: u64,
    size: u64,
    prop: u64,
    flags: u64,
    _: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    recorded::<CreateFn>(
        W::MemCreate,
        S,
        CallId::CuMemCreate,
        |a, _, _| {
            let pp = prop as *const CuMemAllocationPropHead;
            let (t, lt, lid, ht) = if pp.is_null() {
                (UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN)
            } else {
                // SAFETY: the driver requires a valid CUmemAllocationProp; only its head is read.
                let h = unsafe { &*pp };
                (
                    h.alloc_type.into(),
                    h.location_type.into(),
                    h.location_id as i64 as u64,
                    h.requested_handle_types.into(),
                )
            };
            *a = args::CuMemCreate {
                handle: UNKNOWN,
                size,
                prop_type: t,
                location_type: lt,
                location_id: lid,
                handle_types: ht,
                flags,
                caller: caller as u64,
            }
            .to_args();
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe {
            real(
                handle as *mut CuMemHandle,
                size as usize,
                prop as *const c_void,
                flags,
            )
        },
        // SAFETY: on success the driver wrote the handle.
        |p| {
            p.set_arg(arg_index!(CuMemCreate, handle), unsafe {
                out(handle as *const CuMemHandle)
            })
        },
    )
}

// ---- cuMemRelease(handle)
type ReleaseFn = unsafe extern "C" fn(CuMemHandle) -> CuResult;
stub!(mem_release => mem_release_body);
unsafe extern "C" fn mem_release_body<const S: usize>(
    handle: u64,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    recorded::<ReleaseFn>(
        W::MemRelease,
        S,
        CallId::CuMemRelease,
        |a, _, _| {
            *a = args::CuMemRelease {
                handle,
                caller: caller as u64,
            }
            .to_args()
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe { real(handle) },
        |_| {},
    )
}

// ---- cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, handle, u64 flags)
type MapFn = unsafe extern "C" fn(CuDevicePtr, usize, usize, CuMemHandle, u64) -> CuResult;
stub!(mem_map => mem_map_body);
unsafe extern "C" fn mem_map_body<const S: usize>(
    ptr: u64,
    size: u64,
    offset: u64,
    handle: u64,
    flags: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    recorded::<MapFn>(
        W::MemMap,
        S,
        CallId::CuMemMap,
        |a, _, _| {
            *a = args::CuMemMap {
                ptr,
                size,
                offset,
                handle,
                flags,
                caller: caller as u64,
            }
            .to_args()
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe { real(ptr, size as usize, offset as usize, handle, flags) },
        |_| {},
    )
}

// ---- cuMemUnmap(CUdeviceptr ptr, size_t size)
type UnmapFn = unsafe extern "C" fn(CuDevicePtr, usize) -> CuResult;
stub!(mem_unmap => mem_unmap_body);
unsafe extern "C" fn mem_unmap_body<const S: usize>(
    ptr: u64,
    size: u64,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    recorded::<UnmapFn>(
        W::MemUnmap,
        S,
        CallId::CuMemUnmap,
        |a, _, _| {
            *a = args::CuMemUnmap {
                ptr,
                size,
                caller: caller as u64,
            }
            .to_args()
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe { real(ptr, size as usize) },
        |_| {},
    )
}

// ---- cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count)
type SetAccessFn =
    unsafe extern "C" fn(CuDevicePtr, usize, *const CuMemAccessDesc, usize) -> CuResult;
stub!(mem_set_access => mem_set_access_body);
unsafe extern "C" fn mem_set_access_body<const S: usize>(
    ptr: u64,
    size: u64,
    desc: u64,
    count: u64,
    _: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    let d = desc as *const CuMemAccessDesc;
    recorded::<SetAccessFn>(
        W::MemSetAccess,
        S,
        CallId::CuMemSetAccess,
        |a, _, _| {
            let (lt, lid, fl) = if d.is_null() || count == 0 {
                (UNKNOWN, UNKNOWN, UNKNOWN)
            } else {
                // SAFETY: the driver requires `count` valid descriptors; the first is read.
                let d = unsafe { &*d };
                (
                    d.location_type.into(),
                    d.location_id as i64 as u64,
                    d.flags.into(),
                )
            };
            *a = args::CuMemSetAccess {
                ptr,
                size,
                count,
                location_type: lt,
                location_id: lid,
                access_flags: fl,
                caller: caller as u64,
            }
            .to_args();
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe { real(ptr, size as usize, d, count as usize) },
        |_| {},
    )
}

// ---- cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr, u64 flags)
type ReserveFn = unsafe extern "C" fn(*mut CuDevicePtr, usize, usize, CuDevicePtr, u64) -> CuResult;
stub!(mem_address_reserve => mem_address_reserve_body);
unsafe extern "C" fn mem_address_reserve_body<const S: usize>(
    ptr: u64,
    size: u64,
    alignment: u64,
    addr: u64,
    flags: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    recorded::<ReserveFn>(
        W::MemAddressReserve,
        S,
        CallId::CuMemAddressReserve,
        |a, _, _| {
            *a = args::CuMemAddressReserve {
                ptr: UNKNOWN,
                size,
                alignment,
                addr,
                flags,
                caller: caller as u64,
            }
            .to_args()
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe {
            real(
                ptr as *mut CuDevicePtr,
                size as usize,
                alignment as usize,
                addr,
                flags,
            )
        },
        // SAFETY: on success the driver wrote the reserved address.
        |p| {
            p.set_arg(arg_index!(CuMemAddressReserve, ptr), unsafe {
                out(ptr as *const CuDevicePtr)
            })
        },
    )
}

// ---- cuMemAddressFree(CUdeviceptr ptr, size_t size)
type AddressFreeFn = unsafe extern "C" fn(CuDevicePtr, usize) -> CuResult;
stub!(mem_address_free => mem_address_free_body);
unsafe extern "C" fn mem_address_free_body<const S: usize>(
    ptr: u64,
    size: u64,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    recorded::<AddressFreeFn>(
        W::MemAddressFree,
        S,
        CallId::CuMemAddressFree,
        |a, _, _| {
            *a = args::CuMemAddressFree {
                ptr,
                size,
                caller: caller as u64,
            }
            .to_args()
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe { real(ptr, size as usize) },
        |_| {},
    )
}

// ---- cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* h, void* addr)
type RetainFn = unsafe extern "C" fn(*mut CuMemHandle, *mut c_void) -> CuResult;
stub!(mem_retain => mem_retain_body);
unsafe extern "C" fn mem_retain_body<const S: usize>(
    handle: u64,
    addr: u64,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    recorded::<RetainFn>(
        W::MemRetain,
        S,
        CallId::CuMemRetainAllocationHandle,
        |a, _, _| {
            *a = args::CuMemRetainAllocationHandle {
                handle: UNKNOWN,
                addr,
                caller: caller as u64,
            }
            .to_args()
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe { real(handle as *mut CuMemHandle, addr as *mut c_void) },
        // SAFETY: on success the driver wrote the handle.
        |p| {
            p.set_arg(arg_index!(CuMemRetainAllocationHandle, handle), unsafe {
                out(handle as *const CuMemHandle)
            })
        },
    )
}

// ---- cuMemGetHandleForAddressRange(void* handle, CUdeviceptr dptr, size_t size, CUmemRangeHandleType, u64 flags)
type RangeFn = unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize, c_uint, u64) -> CuResult;
stub!(mem_get_handle_for_range => mem_get_handle_for_range_body);
unsafe extern "C" fn mem_get_handle_for_range_body<const S: usize>(
    handle: u64,
    ptr: u64,
    size: u64,
    ty: u64,
    flags: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    let ty = ty as c_uint;
    recorded::<RangeFn>(
        W::MemGetHandleForRange,
        S,
        CallId::CuMemGetHandleForAddressRange,
        |a, _, _| {
            *a = args::CuMemGetHandleForAddressRange {
                handle: UNKNOWN,
                ptr,
                size,
                handle_type: ty.into(),
                flags,
                caller: caller as u64,
            }
            .to_args()
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe { real(handle as *mut c_void, ptr, size as usize, ty, flags) },
        |p| {
            if ty == RANGE_HANDLE_TYPE_DMA_BUF_FD {
                // SAFETY: on success the driver wrote the dma-buf fd (an int).
                p.set_arg(arg_index!(CuMemGetHandleForAddressRange, handle), unsafe {
                    read_shareable(handle as *const c_void, HANDLE_TYPE_POSIX_FD)
                });
            }
        },
    )
}

// ---- cuMulticastCreate(CUmemGenericAllocationHandle* mc, const CUmulticastObjectProp* prop)
type McCreateFn = unsafe extern "C" fn(*mut CuMemHandle, *const CuMulticastObjectProp) -> CuResult;
stub!(mc_create => mc_create_body);
unsafe extern "C" fn mc_create_body<const S: usize>(
    handle: u64,
    prop: u64,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    let pp = prop as *const CuMulticastObjectProp;
    recorded::<McCreateFn>(
        W::McCreate,
        S,
        CallId::CuMulticastCreate,
        |a, _, _| {
            let (size, n, ht, fl) = if pp.is_null() {
                (UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN)
            } else {
                // SAFETY: the driver requires a valid CUmulticastObjectProp.
                let p = unsafe { &*pp };
                (p.size as u64, p.num_devices.into(), p.handle_types, p.flags)
            };
            *a = args::CuMulticastCreate {
                handle: UNKNOWN,
                size,
                num_devices: n,
                handle_types: ht,
                flags: fl,
                caller: caller as u64,
            }
            .to_args();
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe { real(handle as *mut CuMemHandle, pp) },
        // SAFETY: on success the driver wrote the handle.
        |p| {
            p.set_arg(arg_index!(CuMulticastCreate, handle), unsafe {
                out(handle as *const CuMemHandle)
            })
        },
    )
}

// ---- cuMulticastAddDevice(mc, CUdevice dev)
type McAddDeviceFn = unsafe extern "C" fn(CuMemHandle, CuDevice) -> CuResult;
stub!(mc_add_device => mc_add_device_body);
unsafe extern "C" fn mc_add_device_body<const S: usize>(
    mc: u64,
    dev: u64,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    let dev = dev as CuDevice;
    recorded::<McAddDeviceFn>(
        W::McAddDevice,
        S,
        CallId::CuMulticastAddDevice,
        |a, _, _| {
            *a = args::CuMulticastAddDevice {
                mc_handle: mc,
                device: dev as i64 as u64,
                caller: caller as u64,
            }
            .to_args()
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe { real(mc, dev) },
        |_| {},
    )
}

// ---- cuMulticastBindMem(mc, size_t mcOffset, memHandle, size_t memOffset, size_t size, u64 flags)
type McBindMemFn =
    unsafe extern "C" fn(CuMemHandle, usize, CuMemHandle, usize, usize, u64) -> CuResult;
stub!(mc_bind_mem => mc_bind_mem_body);
unsafe extern "C" fn mc_bind_mem_body<const S: usize>(
    mc: u64,
    mc_offset: u64,
    mem: u64,
    mem_offset: u64,
    size: u64,
    flags: u64,
    caller: usize,
) -> CuResult {
    recorded::<McBindMemFn>(
        W::McBindMem,
        S,
        CallId::CuMulticastBindMem,
        |a, _, _| {
            *a = args::CuMulticastBindMem {
                mc_handle: mc,
                mc_offset,
                mem_handle: mem,
                mem_offset,
                size,
                flags,
                caller: caller as u64,
            }
            .to_args()
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe {
            real(
                mc,
                mc_offset as usize,
                mem,
                mem_offset as usize,
                size as usize,
                flags,
            )
        },
        |_| {},
    )
}

// ---- cuMulticastBindAddr(mc, size_t mcOffset, CUdeviceptr memptr, size_t size, u64 flags)
type McBindAddrFn = unsafe extern "C" fn(CuMemHandle, usize, CuDevicePtr, usize, u64) -> CuResult;
stub!(mc_bind_addr => mc_bind_addr_body);
unsafe extern "C" fn mc_bind_addr_body<const S: usize>(
    mc: u64,
    mc_offset: u64,
    ptr: u64,
    size: u64,
    flags: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    recorded::<McBindAddrFn>(
        W::McBindAddr,
        S,
        CallId::CuMulticastBindAddr,
        |a, _, _| {
            *a = args::CuMulticastBindAddr {
                mc_handle: mc,
                mc_offset,
                ptr,
                size,
                flags,
                caller: caller as u64,
            }
            .to_args()
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe { real(mc, mc_offset as usize, ptr, size as usize, flags) },
        |_| {},
    )
}

// ---- cuMulticastUnbind(mc, CUdevice dev, size_t mcOffset, size_t size)
type McUnbindFn = unsafe extern "C" fn(CuMemHandle, CuDevice, usize, usize) -> CuResult;
stub!(mc_unbind => mc_unbind_body);
unsafe extern "C" fn mc_unbind_body<const S: usize>(
    mc: u64,
    dev: u64,
    mc_offset: u64,
    size: u64,
    _: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    let dev = dev as CuDevice;
    recorded::<McUnbindFn>(
        W::McUnbind,
        S,
        CallId::CuMulticastUnbind,
        |a, _, _| {
            *a = args::CuMulticastUnbind {
                mc_handle: mc,
                device: dev as i64 as u64,
                mc_offset,
                size,
                caller: caller as u64,
            }
            .to_args()
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe { real(mc, dev, mc_offset as usize, size as usize) },
        |_| {},
    )
}

/// The first two 8-byte words of an IPC handle (little-endian), enough to match an export
/// with its import across processes.
fn ipc_words(h: &CuIpcMemHandle) -> (u64, u64) {
    let mut w0 = [0u8; 8];
    let mut w1 = [0u8; 8];
    w0.copy_from_slice(&h.reserved[0..8]);
    w1.copy_from_slice(&h.reserved[8..16]);
    (u64::from_le_bytes(w0), u64::from_le_bytes(w1))
}

// ---- cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr)
type IpcGetFn = unsafe extern "C" fn(*mut CuIpcMemHandle, CuDevicePtr) -> CuResult;
stub!(ipc_get => ipc_get_body);
unsafe extern "C" fn ipc_get_body<const S: usize>(
    handle: u64,
    ptr: u64,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    recorded::<IpcGetFn>(
        W::IpcGet,
        S,
        CallId::CuIpcGetMemHandle,
        |a, rec, ring| {
            let id = identity(rec, ring);
            *a = args::CuIpcGetMemHandle {
                ptr,
                handle_w0: UNKNOWN,
                handle_w1: UNKNOWN,
                device: id.ordinal,
                caller: caller as u64,
            }
            .to_args();
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe { real(handle as *mut CuIpcMemHandle, ptr) },
        |p| {
            let h = handle as *const CuIpcMemHandle;
            if !h.is_null() {
                // SAFETY: on success the driver filled the 64-byte handle.
                let (w0, w1) = ipc_words(unsafe { &*h });
                p.set_arg(arg_index!(CuIpcGetMemHandle, handle_w0), w0);
                p.set_arg(arg_index!(CuIpcGetMemHandle, handle_w1), w1);
            }
        },
    )
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

// ---- cuIpcCloseMemHandle(CUdeviceptr dptr)
type IpcCloseFn = unsafe extern "C" fn(CuDevicePtr) -> CuResult;
stub!(ipc_close => ipc_close_body);
unsafe extern "C" fn ipc_close_body<const S: usize>(
    ptr: u64,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    caller: usize,
) -> CuResult {
    recorded::<IpcCloseFn>(
        W::IpcClose,
        S,
        CallId::CuIpcCloseMemHandle,
        |a, _, _| {
            *a = args::CuIpcCloseMemHandle {
                ptr,
                caller: caller as u64,
            }
            .to_args()
        },
        // SAFETY: forwarded unchanged.
        |real| unsafe { real(ptr) },
        |_| {},
    )
}

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
