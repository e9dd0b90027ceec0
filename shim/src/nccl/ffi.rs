//! The few NCCL C types the wrappers need, written from the documented ABI (no bindgen, no
//! vendored header): result codes, the 128-byte uniqueId passed by value, opaque handles.

use std::ffi::{c_int, c_void};

pub type NcclResult = c_int;
pub const NCCL_SUCCESS: NcclResult = 0;
pub const NCCL_INTERNAL_ERROR: NcclResult = 3;
pub const NCCL_IN_PROGRESS: NcclResult = 7;

/// `ncclComm_t`: an opaque pointer.
pub type NcclComm = *mut c_void;
/// `cudaStream_t`: an opaque pointer.
pub type Stream = *mut c_void;

/// `ncclUniqueId`: 128 opaque bytes, passed by value (in memory, per the SysV ABI).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NcclUniqueId {
    pub internal: [u8; 128],
}

/// Whether `rc` is a failure whose text `ncclGetLastError` holds (InProgress is not a failure).
#[inline]
pub fn is_failure(rc: NcclResult) -> bool {
    rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS
}
