//! Exports of NCCL's newer communicator calls and its custom reduction operators: suspend and
//! resume (2.29: `ncclCommSuspend` releases a communicator's dynamic GPU memory with
//! `NCCL_SUSPEND_MEM`), a communicator's own unique id (`ncclCommGetUniqueId`, 2.29, what a
//! grow or a rebuild hands to new ranks), and `ncclRedOpCreatePreMulSum` / `ncclRedOpDestroy`
//! (PyTorch's `ReduceOp.PREMUL_SUM` and averaging). Signatures from nccl.h (v2.30.7-1,
//! `src/nccl.h.in`). See `super` for what every export does; a loaded NCCL that lacks one
//! answers through `missing`, and `dlsym(RTLD_DEFAULT)` does not offer it (`handles`).

#![allow(clippy::missing_safety_doc)] // C callers: the contract is NCCL's own (nccl.h).

use super::created::uid_args;
use super::shape::{export, recorded, s};
use crate::nccl::call::boundary;
use crate::nccl::ffi::*;
use crate::nccl::resolve::real;
use ncclshim_dump::schema::{args, ArgView};
use ncclshim_dump::{arg_index, CallId};
use std::ffi::{c_int, c_void};

export!(ncclCommSuspend, "ncclCommSuspend", CallId::NcclCommSuspend,
    (comm: NcclComm, flags: c_int),
    comm = comm, args = args::NcclCommSuspend { flags: s(flags) });

export!(ncclCommResume, "ncclCommResume", CallId::NcclCommResume,
    (comm: NcclComm),
    comm = comm, args = args::NoArgs {});

export!(ncclCommGetUniqueId, "ncclCommGetUniqueId", CallId::NcclCommGetUniqueId,
(comm: NcclComm, unique_id: *mut NcclUniqueId),
comm = comm, args = args::NcclCommGetUniqueId { uid_hash: 0 },
on_success = |pc| if !unique_id.is_null() {
    pc.set_arg(arg_index!(NcclCommGetUniqueId, uid_hash), uid_args(&*unique_id).0)
});

export!(ncclRedOpCreatePreMulSum, "ncclRedOpCreatePreMulSum", CallId::NcclRedOpCreatePreMulSum,
// `scalar` is NCCL's to read (host or device memory, by `residence`), never the shim's.
(op: *mut c_int, scalar: *mut c_void, datatype: c_int, residence: c_int, comm: NcclComm),
comm = comm,
args = args::NcclRedOpCreatePreMulSum { op: 0, datatype: s(datatype), residence: s(residence) },
on_success = |pc| if !op.is_null() {
    pc.set_arg(arg_index!(NcclRedOpCreatePreMulSum, op), s(*op))
});

export!(ncclRedOpDestroy, "ncclRedOpDestroy", CallId::NcclRedOpDestroy,
    (op: c_int, comm: NcclComm),
    comm = comm, args = args::NcclRedOpDestroy { op: s(op) });
