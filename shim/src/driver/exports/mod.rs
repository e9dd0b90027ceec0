//! The recorded driver wrappers, as tables of `cu_export!` rows (see `super::calls`), by family:
//! [`mem`] (cuMem virtual memory and shareable handles), [`multicast`] (NVLS multicast objects)
//! and [`ipc`] (legacy CUDA IPC). `super::lookup` hands their entry stubs out.

pub mod ipc;
pub mod mem;
pub mod multicast;
