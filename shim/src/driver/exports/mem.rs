//! The cuMem wrappers: shareable-handle export and import, physical allocations, mappings,
//! access, virtual address ranges. One `cu_export!` row each (see `crate::driver::calls`).

use crate::driver::calls::{cu_export, out, recorded};
use crate::driver::calls::{identity, read_shareable};
use crate::driver::cuda::*;
use crate::driver::device::UNKNOWN;
use crate::driver::watch::W;
use ncclshim_dump::schema::{args, ArgView};
use ncclshim_dump::{arg_index, CallId};
use std::ffi::{c_int, c_uint, c_void};

cu_export! {
    /// cuMemExportToShareableHandle(void* shareable, handle, CUmemAllocationHandleType, u64 flags)
    mem_export = MemExport as CuMemExportToShareableHandle,
        fn(*mut c_void, CuMemHandle, c_uint, u64) <- (shareable, handle, ty, flags, _, _; caller),
        forward(shareable as *mut c_void, handle, ty as c_uint, flags),
        record |rec, ring| {
            let id = identity(rec, ring);
            args::CuMemExportToShareableHandle {
                shareable_handle: UNKNOWN,
                handle,
                handle_type: (ty as c_uint).into(),
                flags,
                device: id.ordinal,
                pci_bus_id: id.pci_bus_id,
                caller: caller as u64,
            }
        },
        // SAFETY: on success the driver wrote a handle of type `ty` at `shareable`.
        outs |p| p.set_arg(arg_index!(CuMemExportToShareableHandle, shareable_handle), unsafe {
            read_shareable(shareable as *const c_void, ty as c_uint)
        });

    /// cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* h, void* osHandle, type)
    mem_import = MemImport as CuMemImportFromShareableHandle,
        fn(*mut CuMemHandle, *mut c_void, c_uint) <- (handle, os_handle, ty, _, _, _; caller),
        forward(handle as *mut CuMemHandle, os_handle as *mut c_void, ty as c_uint),
        record |rec, ring| {
            let id = identity(rec, ring);
            // POSIX_FD passes the fd itself cast to a pointer: keep the int.
            let os = if ty as c_uint == HANDLE_TYPE_POSIX_FD {
                os_handle as c_int as u32 as u64
            } else {
                os_handle
            };
            args::CuMemImportFromShareableHandle {
                handle: UNKNOWN,
                os_handle: os,
                handle_type: (ty as c_uint).into(),
                device: id.ordinal,
                pci_bus_id: id.pci_bus_id,
                uuid_hi: id.uuid_hi,
                uuid_lo: id.uuid_lo,
                caller: caller as u64,
            }
        },
        // SAFETY: on success the driver wrote the new handle.
        outs |p| p.set_arg(arg_index!(CuMemImportFromShareableHandle, handle), unsafe {
            out(handle as *const CuMemHandle)
        });

    /// cuMemCreate(CUmemGenericAllocationHandle* h, size_t size, const CUmemAllocationProp*, u64 flags)
    mem_create = MemCreate as CuMemCreate,
        fn(*mut CuMemHandle, usize, *const c_void, u64) <- (handle, size, prop, flags, _, _; caller),
        forward(handle as *mut CuMemHandle, size as usize, prop as *const c_void, flags),
        record |_, _| {
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
            args::CuMemCreate {
                handle: UNKNOWN,
                size,
                prop_type: t,
                location_type: lt,
                location_id: lid,
                handle_types: ht,
                flags,
                caller: caller as u64,
            }
        },
        // SAFETY: on success the driver wrote the handle.
        outs |p| p.set_arg(arg_index!(CuMemCreate, handle), unsafe {
            out(handle as *const CuMemHandle)
        });

    /// cuMemRelease(handle)
    mem_release = MemRelease as CuMemRelease,
        fn(CuMemHandle) <- (handle, _, _, _, _, _; caller),
        forward(handle),
        record |_, _| args::CuMemRelease { handle, caller: caller as u64 },
        outs |_| {};

    /// cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, handle, u64 flags)
    mem_map = MemMap as CuMemMap,
        fn(CuDevicePtr, usize, usize, CuMemHandle, u64) <- (ptr, size, offset, handle, flags, _; caller),
        forward(ptr, size as usize, offset as usize, handle, flags),
        record |_, _| args::CuMemMap { ptr, size, offset, handle, flags, caller: caller as u64 },
        outs |_| {};

    /// cuMemUnmap(CUdeviceptr ptr, size_t size)
    mem_unmap = MemUnmap as CuMemUnmap,
        fn(CuDevicePtr, usize) <- (ptr, size, _, _, _, _; caller),
        forward(ptr, size as usize),
        record |_, _| args::CuMemUnmap { ptr, size, caller: caller as u64 },
        outs |_| {};

    /// cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count)
    mem_set_access = MemSetAccess as CuMemSetAccess,
        fn(CuDevicePtr, usize, *const CuMemAccessDesc, usize) <- (ptr, size, desc, count, _, _; caller),
        forward(ptr, size as usize, desc as *const CuMemAccessDesc, count as usize),
        record |_, _| {
            let d = desc as *const CuMemAccessDesc;
            let (lt, lid, fl) = if d.is_null() || count == 0 {
                (UNKNOWN, UNKNOWN, UNKNOWN)
            } else {
                // SAFETY: the driver requires `count` valid descriptors; the first is read.
                let d = unsafe { &*d };
                (d.location_type.into(), d.location_id as i64 as u64, d.flags.into())
            };
            args::CuMemSetAccess {
                ptr,
                size,
                count,
                location_type: lt,
                location_id: lid,
                access_flags: fl,
                caller: caller as u64,
            }
        },
        outs |_| {};

    /// cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr, u64 flags)
    mem_address_reserve = MemAddressReserve as CuMemAddressReserve,
        fn(*mut CuDevicePtr, usize, usize, CuDevicePtr, u64) <- (ptr, size, alignment, addr, flags, _; caller),
        forward(ptr as *mut CuDevicePtr, size as usize, alignment as usize, addr, flags),
        record |_, _| args::CuMemAddressReserve {
            ptr: UNKNOWN,
            size,
            alignment,
            addr,
            flags,
            caller: caller as u64,
        },
        // SAFETY: on success the driver wrote the reserved address.
        outs |p| p.set_arg(arg_index!(CuMemAddressReserve, ptr), unsafe {
            out(ptr as *const CuDevicePtr)
        });

    /// cuMemAddressFree(CUdeviceptr ptr, size_t size)
    mem_address_free = MemAddressFree as CuMemAddressFree,
        fn(CuDevicePtr, usize) <- (ptr, size, _, _, _, _; caller),
        forward(ptr, size as usize),
        record |_, _| args::CuMemAddressFree { ptr, size, caller: caller as u64 },
        outs |_| {};

    /// cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* h, void* addr)
    mem_retain = MemRetain as CuMemRetainAllocationHandle,
        fn(*mut CuMemHandle, *mut c_void) <- (handle, addr, _, _, _, _; caller),
        forward(handle as *mut CuMemHandle, addr as *mut c_void),
        record |_, _| args::CuMemRetainAllocationHandle {
            handle: UNKNOWN,
            addr,
            caller: caller as u64,
        },
        // SAFETY: on success the driver wrote the handle.
        outs |p| p.set_arg(arg_index!(CuMemRetainAllocationHandle, handle), unsafe {
            out(handle as *const CuMemHandle)
        });

    /// cuMemGetHandleForAddressRange(void* handle, CUdeviceptr dptr, size_t size, CUmemRangeHandleType, u64 flags)
    mem_get_handle_for_range = MemGetHandleForRange as CuMemGetHandleForAddressRange,
        fn(*mut c_void, CuDevicePtr, usize, c_uint, u64) <- (handle, ptr, size, ty, flags, _; caller),
        forward(handle as *mut c_void, ptr, size as usize, ty as c_uint, flags),
        record |_, _| args::CuMemGetHandleForAddressRange {
            handle: UNKNOWN,
            ptr,
            size,
            handle_type: (ty as c_uint).into(),
            flags,
            caller: caller as u64,
        },
        outs |p| if ty as c_uint == RANGE_HANDLE_TYPE_DMA_BUF_FD {
            // SAFETY: on success the driver wrote the dma-buf fd (an int).
            p.set_arg(arg_index!(CuMemGetHandleForAddressRange, handle), unsafe {
                read_shareable(handle as *const c_void, HANDLE_TYPE_POSIX_FD)
            });
        };
}
