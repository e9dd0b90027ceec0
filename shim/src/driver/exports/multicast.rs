//! The NVLS multicast-object wrappers. One `cu_export!` row each (see `crate::driver::calls`).

use crate::driver::calls::{cu_export, out, recorded};
use crate::driver::cuda::*;
use crate::driver::device::UNKNOWN;
use crate::driver::watch::W;
use ncclshim_dump::schema::{args, ArgView};
use ncclshim_dump::{arg_index, CallId};

cu_export! {
    /// cuMulticastCreate(CUmemGenericAllocationHandle* mc, const CUmulticastObjectProp* prop)
    mc_create = McCreate as CuMulticastCreate,
        fn(*mut CuMemHandle, *const CuMulticastObjectProp) <- (handle, prop, _, _, _, _; caller),
        forward(handle as *mut CuMemHandle, prop as *const CuMulticastObjectProp),
        record |_, _| {
            let pp = prop as *const CuMulticastObjectProp;
            let (size, n, ht, fl) = if pp.is_null() {
                (UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN)
            } else {
                // SAFETY: the driver requires a valid CUmulticastObjectProp.
                let p = unsafe { &*pp };
                (p.size as u64, p.num_devices.into(), p.handle_types, p.flags)
            };
            args::CuMulticastCreate {
                handle: UNKNOWN,
                size,
                num_devices: n,
                handle_types: ht,
                flags: fl,
                caller: caller as u64,
            }
        },
        // SAFETY: on success the driver wrote the handle.
        outs |p| p.set_arg(arg_index!(CuMulticastCreate, handle), unsafe {
            out(handle as *const CuMemHandle)
        });

    /// cuMulticastAddDevice(mc, CUdevice dev)
    mc_add_device = McAddDevice as CuMulticastAddDevice,
        fn(CuMemHandle, CuDevice) <- (mc, dev, _, _, _, _; caller),
        forward(mc, dev as CuDevice),
        record |_, _| args::CuMulticastAddDevice {
            mc_handle: mc,
            device: dev as CuDevice as i64 as u64,
            caller: caller as u64,
        },
        outs |_| {};

    /// cuMulticastBindMem(mc, size_t mcOffset, memHandle, size_t memOffset, size_t size, u64 flags)
    mc_bind_mem = McBindMem as CuMulticastBindMem,
        fn(CuMemHandle, usize, CuMemHandle, usize, usize, u64)
            <- (mc, mc_offset, mem, mem_offset, size, flags; caller),
        forward(mc, mc_offset as usize, mem, mem_offset as usize, size as usize, flags),
        record |_, _| args::CuMulticastBindMem {
            mc_handle: mc,
            mc_offset,
            mem_handle: mem,
            mem_offset,
            size,
            flags,
            caller: caller as u64,
        },
        outs |_| {};

    /// cuMulticastBindAddr(mc, size_t mcOffset, CUdeviceptr memptr, size_t size, u64 flags)
    mc_bind_addr = McBindAddr as CuMulticastBindAddr,
        fn(CuMemHandle, usize, CuDevicePtr, usize, u64) <- (mc, mc_offset, ptr, size, flags, _; caller),
        forward(mc, mc_offset as usize, ptr, size as usize, flags),
        record |_, _| args::CuMulticastBindAddr {
            mc_handle: mc,
            mc_offset,
            ptr,
            size,
            flags,
            caller: caller as u64,
        },
        outs |_| {};

    /// cuMulticastUnbind(mc, CUdevice dev, size_t mcOffset, size_t size)
    mc_unbind = McUnbind as CuMulticastUnbind,
        fn(CuMemHandle, CuDevice, usize, usize) <- (mc, dev, mc_offset, size, _, _; caller),
        forward(mc, dev as CuDevice, mc_offset as usize, size as usize),
        record |_, _| args::CuMulticastUnbind {
            mc_handle: mc,
            device: dev as CuDevice as i64 as u64,
            mc_offset,
            size,
            caller: caller as u64,
        },
        outs |_| {};
}
