//! Memory allocation, buffer registration and window exports. See `super` for what every
//! export does.

#![allow(clippy::missing_safety_doc)] // C callers: the contract is NCCL's own (nccl.h).

use super::shape::{export, p, recorded, s};
use crate::nccl::call::boundary;
use crate::nccl::ffi::*;
use crate::nccl::resolve::real;
use ncclshim_dump::schema::{args, ArgView};
use ncclshim_dump::{arg_index, CallId};
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

export!(ncclMemAlloc, "ncclMemAlloc", CallId::NcclMemAlloc,
    (ptr: *mut *mut c_void, size: usize),
    comm = null_mut(), args = args::NcclMemAlloc { ptr: 0, size: size as u64 },
    on_success = |pc| if !ptr.is_null() { pc.set_arg(arg_index!(NcclMemAlloc, ptr), p(*ptr)) });

export!(ncclMemFree, "ncclMemFree", CallId::NcclMemFree,
    (ptr: *mut c_void),
    comm = null_mut(), args = args::NcclMemFree { ptr: p(ptr) });

export!(ncclCommRegister, "ncclCommRegister", CallId::NcclCommRegister,
(comm: NcclComm, buff: *mut c_void, size: usize, handle: *mut *mut c_void),
comm = comm, args = args::NcclCommRegister { buff: p(buff), size: size as u64, handle: 0 },
on_success = |pc| if !handle.is_null() {
    pc.set_arg(arg_index!(NcclCommRegister, handle), p(*handle))
});

export!(ncclCommDeregister, "ncclCommDeregister", CallId::NcclCommDeregister,
    (comm: NcclComm, handle: *mut c_void),
    comm = comm, args = args::NcclCommDeregister { handle: p(handle) });

export!(ncclCommWindowRegister, "ncclCommWindowRegister", CallId::NcclCommWindowRegister,
(comm: NcclComm, buff: *mut c_void, size: usize, win: *mut *mut c_void, win_flags: c_int),
comm = comm,
args = args::NcclCommWindowRegister { buff: p(buff), size: size as u64, window: 0, flags: s(win_flags) },
on_success = |pc| if !win.is_null() {
    pc.set_arg(arg_index!(NcclCommWindowRegister, window), p(*win))
});

export!(ncclCommWindowDeregister, "ncclCommWindowDeregister", CallId::NcclCommWindowDeregister,
    (comm: NcclComm, win: *mut c_void),
    comm = comm, args = args::NcclCommWindowDeregister { window: p(win) });
