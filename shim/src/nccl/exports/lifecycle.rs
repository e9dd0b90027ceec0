//! Exports of NCCL's newer communicator calls and its custom reduction operators: suspend and
//! resume (2.29: `ncclCommSuspend` releases a communicator's dynamic GPU memory with
//! `NCCL_SUSPEND_MEM`), a communicator's own unique id (`ncclCommGetUniqueId`, 2.29, what a
//! grow or a rebuild hands to new ranks), and `ncclRedOpCreatePreMulSum` / `ncclRedOpDestroy`
//! (PyTorch's `ReduceOp.PREMUL_SUM` and averaging); and the 2.29-2.32 memory statistics, window
//! pointer and one-sided signal calls, and device communicators (`ncclGroupSimulateEnd` closes a group: `ops`). Signatures from nccl.h (v2.30.7-1
//! `src/nccl.h.in`; v2.32.3 of the PyPI wheel for the later calls). See `super` for what every export does; a loaded NCCL that lacks one
//! answers through `missing`, and `dlsym(RTLD_DEFAULT)` does not offer it (`handles`).

#![allow(clippy::missing_safety_doc)] // C callers: the contract is NCCL's own (nccl.h).

use super::created::uid_args;
use super::shape::{export, p, recorded, s};
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

// ---------------------------------------------------- NCCL 2.29-2.32: stats, windows, signals

export!(ncclCommMemStats, "ncclCommMemStats", CallId::NcclCommMemStats,
(comm: NcclComm, stat: c_int, value: *mut u64),
comm = comm, args = args::NcclCommMemStats { stat: s(stat), value: 0 },
on_success = |pc| if !value.is_null() {
    pc.set_arg(arg_index!(NcclCommMemStats, value), *value)
});

export!(ncclWinGetUserPtr, "ncclWinGetUserPtr", CallId::NcclWinGetUserPtr,
(comm: NcclComm, win: *mut c_void, out_user_ptr: *mut *mut c_void),
comm = comm, args = args::NcclWinGetUserPtr { window: p(win), user_ptr: 0 },
on_success = |pc| if !out_user_ptr.is_null() {
    pc.set_arg(arg_index!(NcclWinGetUserPtr, user_ptr), p(*out_user_ptr))
});

export!(ncclPutSignal, "ncclPutSignal", CallId::NcclPutSignal,
(localbuff: *const c_void, count: usize, datatype: c_int, peer: c_int, peer_win: *mut c_void,
 peer_win_offset: usize, sig_idx: c_int, ctx: c_int, flags: u32, comm: NcclComm, stream: Stream),
comm = comm,
args = args::NcclPutSignal {
    count: count as u64, datatype: s(datatype), peer: s(peer), window: p(peer_win),
    offset: peer_win_offset as u64, sig_idx: s(sig_idx), ctx: s(ctx), flags: u64::from(flags),
    stream: p(stream),
});

export!(ncclSignal, "ncclSignal", CallId::NcclSignal,
(peer: c_int, sig_idx: c_int, ctx: c_int, flags: u32, comm: NcclComm, stream: Stream),
comm = comm,
args = args::NcclSignal {
    peer: s(peer), sig_idx: s(sig_idx), ctx: s(ctx), flags: u64::from(flags), stream: p(stream),
});

/// `ncclWaitSignalDesc_t` (nccl.h v2.32.3): how many signals to wait for, from whom.
#[repr(C)]
pub struct WaitSignalDesc {
    pub op_cnt: c_int,
    pub peer: c_int,
    pub sig_idx: c_int,
    pub ctx: c_int,
}

export!(ncclWaitSignal, "ncclWaitSignal", CallId::NcclWaitSignal,
(n_desc: c_int, signal_descs: *mut WaitSignalDesc, comm: NcclComm, stream: Stream),
comm = comm,
args = {
    // The caller's array holds `n_desc` descriptors (NCCL reads them under the same
    // contract); only the first is kept.
    let first = if n_desc > 0 && !signal_descs.is_null() { Some(&*signal_descs) } else { None };
    args::NcclWaitSignal {
        n_desc: s(n_desc),
        peer0: first.map_or(u64::MAX, |d| s(d.peer)),
        op_cnt0: first.map_or(u64::MAX, |d| s(d.op_cnt)),
        stream: p(stream),
    }
});

// ------------------------------------------ device communicators (2.28+, nccl_device/core.h)

export!(ncclDevCommCreate, "ncclDevCommCreate", CallId::NcclDevCommCreate,
    (comm: NcclComm, reqs: *const c_void, out_dev_comm: *mut c_void),
    comm = comm, args = args::NcclDevCommCreate { dev_comm: p(out_dev_comm) });

export!(ncclDevCommDestroy, "ncclDevCommDestroy", CallId::NcclDevCommDestroy,
    (comm: NcclComm, dev_comm: *const c_void),
    comm = comm, args = args::NcclDevCommCreate { dev_comm: p(dev_comm) });
