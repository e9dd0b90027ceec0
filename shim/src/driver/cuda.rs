//! The few CUDA driver types and constants the wrappers need, written from the driver API's
//! documented C signatures (no headers at build time, no `cudarc`: its loader would open and
//! initialize libcuda inside the shim, which the shim must never do).

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `CUresult`.
pub type CuResult = c_int;
/// `CUdevice`: an ordinal.
pub type CuDevice = c_int;
/// `CUdeviceptr` (64-bit since CUDA 3.2).
pub type CuDevicePtr = u64;
/// `CUmemGenericAllocationHandle`.
pub type CuMemHandle = u64;

pub const CUDA_SUCCESS: CuResult = 0;

/// `CUmemAllocationHandleType` values whose shareable handle we decode.
pub const HANDLE_TYPE_POSIX_FD: c_uint = 0x1;
pub const HANDLE_TYPE_WIN32: c_uint = 0x2;
pub const HANDLE_TYPE_WIN32_KMT: c_uint = 0x4;
pub const HANDLE_TYPE_FABRIC: c_uint = 0x8;
/// `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`.
pub const RANGE_HANDLE_TYPE_DMA_BUF_FD: c_uint = 0x1;

/// `CUipcMemHandle`: 64 opaque bytes, passed by value (in memory on x86_64 SysV).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CuIpcMemHandle {
    pub reserved: [u8; 64],
}

/// `CUuuid`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct CuUuid {
    pub bytes: [u8; 16],
}

/// The start of `CUmemAllocationProp` (type, requestedHandleTypes, location{type,id}); only
/// these leading 16 bytes are read, the struct is larger.
#[repr(C)]
pub struct CuMemAllocationPropHead {
    pub alloc_type: c_uint,
    pub requested_handle_types: c_uint,
    pub location_type: c_uint,
    pub location_id: c_int,
}

/// `CUmemAccessDesc`: location {type, id} and access flags.
#[repr(C)]
pub struct CuMemAccessDesc {
    pub location_type: c_uint,
    pub location_id: c_int,
    pub flags: c_uint,
}

/// `CUmulticastObjectProp`.
#[repr(C)]
pub struct CuMulticastObjectProp {
    pub num_devices: c_uint,
    pub size: usize,
    pub handle_types: u64,
    pub flags: u64,
}

/// `cuGetProcAddress` as declared since CUDA 11.3 (requested version < 12000).
pub type GetProcAddressV1 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CuResult;
/// `cuGetProcAddress_v2` (CUDA 12.0+): adds `CUdriverProcAddressQueryResult* symbolStatus`.
pub type GetProcAddressV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CuResult;

pub type CtxGetDeviceFn = unsafe extern "C" fn(*mut CuDevice) -> CuResult;
pub type DeviceGetPciBusIdFn = unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult;
pub type GetErrorStringFn = unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult;
pub type DeviceGetNameFn = unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult;
pub type DeviceGetUuidFn = unsafe extern "C" fn(*mut CuUuid, CuDevice) -> CuResult;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_the_c_definitions() {
        assert_eq!(size_of::<CuIpcMemHandle>(), 64);
        assert_eq!(size_of::<CuUuid>(), 16);
        assert_eq!(offset_of!(CuMemAllocationPropHead, location_id), 12);
        assert_eq!(size_of::<CuMemAccessDesc>(), 12);
        assert_eq!(offset_of!(CuMulticastObjectProp, size), 8);
        assert_eq!(offset_of!(CuMulticastObjectProp, handle_types), 16);
        assert_eq!(offset_of!(CuMulticastObjectProp, flags), 24);
    }
}
