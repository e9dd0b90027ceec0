//! The init family of exports: version, uniqueId and communicator creation. Each one: resolve the real `pncclX` (or return
//! ncclInternalError with a note when the loaded NCCL lacks it), record the entry, forward,
//! complete the record, return NCCL's result untouched. Argument layouts follow
//! `ncclshim_dump::schema`; signed integers are stored sign-extended (so -1, "not
//! applicable", reads as u64::MAX).
//!
//! Every export is `#[no_mangle] pub unsafe extern "C"` with NCCL's exact C signature (from
//! nccl.h; see nccl-facts §4.1–4.2) and runs inside `call::boundary`, so no panic unwinds into C.
//!
//! SAFETY (for the raw-pointer reads in these bodies): the shim reads a caller's pointer only
//! where NCCL itself reads or writes it under the same contract, and only after a null check:
//! out-pointers (`newcomm`, `version`, `id`, `ptr`, `handle`, `win`) after NCCL returned success
//! or InProgress, in-arrays (`devlist`, `exclude`, `ids`) within the counts the caller passed,
//! `ncclConfig_t` within its declared size (`config.rs`).

#![allow(clippy::missing_safety_doc)] // C callers: the contract is NCCL's own (nccl.h).

use super::created::*;
use super::shape::{export, p, recorded, s};
use crate::nccl::call::{self, boundary, enter, forward, missing, Active};
use crate::nccl::comms;
use crate::nccl::ffi::*;
use crate::nccl::hash::{get_hash, split_hash};
use crate::nccl::resolve::real;
use ncclshim_dump::layout::SLOT_ARGS;
use ncclshim_dump::schema::{args, ArgView};
use ncclshim_dump::{arg_index, CallId, PendingCall};
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

// ---------------------------------------------------------------- version, uniqueId

/// The dump whose keep ring has a copy of a successful `ncclGetVersion` (null: none yet).
static VERSION_KEPT_IN: AtomicPtr<ncclshim_dump::Recorder> = AtomicPtr::new(null_mut());

// Routine (recorded in the thread's ring); the first success is also kept, for the version fact.
export!(ncclGetVersion, "ncclGetVersion", CallId::NcclGetVersion,
(version: *mut c_int),
comm = null_mut(), args = args::NcclGetVersion::default(),
on_success = |pc| if !version.is_null() {
    pc.set_arg(arg_index!(NcclGetVersion, version), s(*version));
    call::keep_first_success(pc, &VERSION_KEPT_IN);
});

export!(ncclGetUniqueId, "ncclGetUniqueId", CallId::NcclGetUniqueId,
    (id: *mut NcclUniqueId),
    comm = null_mut(), args = args::NcclGetUniqueId::default(),
    on_success = |pc| unique_id_result(pc, id));

/// ncclGetUniqueId's result arguments: the new id's hash (also remembered for the comms that
/// ncclCommInitAll creates on this thread) and its words.
unsafe fn unique_id_result(pc: &PendingCall, id: *const NcclUniqueId) {
    if id.is_null() {
        return;
    }
    let (h, w) = uid_args(&*id);
    let _ = LAST_UID.try_with(|c| c.set(h));
    pc.set_arg(arg_index!(NcclGetUniqueId, uid_hash), h);
    for (i, v) in w.iter().enumerate() {
        pc.set_arg(arg_index!(NcclGetUniqueId, uid0) + i, *v);
    }
}

// ---------------------------------------------------------------- communicator creation

/// The real `$name` (of C type `$ty`), or, when the loaded NCCL lacks it, the caller gets
/// `missing`'s ncclInternalError through `$out` and the export's body returns.
macro_rules! real_or_return {
    ($out:ident, $name:literal, $ty:ty, $call:expr) => {
        match real!($name, $ty) {
            Some(f) => f,
            None => {
                *$out = Some(missing($call));
                return;
            }
        }
    };
}

/// What every call that creates a communicator does first (the InitRank family, Split, Shrink,
/// Grow): the init snapshot, the `ncclConfig_t` (`cfg`, may be null) as an event, the entry
/// record on `parent` (null for a fresh communicator), the forwarded call, whose result goes
/// to the caller at once (`out`). Returns the record to finish, NCCL's result and the new
/// communicator: null unless NCCL made one (ncclSuccess, or ncclInProgress for a non-blocking
/// init), so a non-null one is always to be registered.
unsafe fn create(
    call: CallId,
    parent: NcclComm,
    cfg: *const c_void,
    args: [u64; SLOT_ARGS],
    newcomm: *mut NcclComm,
    fwd: impl FnOnce() -> NcclResult,
    out: &mut Option<NcclResult>,
) -> (Active, NcclResult, NcclComm) {
    snapshot_at_init();
    record_config(call, parent, cfg);
    let a = enter(call, parent, args);
    let rc = forward(fwd);
    *out = Some(rc);
    // A failed init may have loaded plugins or set variables (NCCL's env plugin, a net plugin
    // that then failed) that the snapshot above could not see: take it again (an unchanged
    // snapshot costs a hash and writes nothing, see `snapshot::take`).
    if rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS {
        snapshot_at_init();
    }
    (a, rc, out_comm(newcomm, rc))
}

/// The commHash of the communicator `comm` derives from (0: unknown to the shim).
fn parent_hash(comm: NcclComm) -> u64 {
    comms::find(comm).map_or(0, |e| e.comm_hash.load(Ordering::Relaxed))
}

/// The InitRank family: `args` is the entry record (its view's `cuda_dev` is filled once the
/// comm is ready), `uid_hash` the comm's join hash (NCCL derives commHash from the same id).
#[allow(clippy::too_many_arguments)] // the C call's own arguments plus the forwarding closure
unsafe fn init_rank_common(
    call: CallId,
    newcomm: *mut NcclComm,
    nranks: c_int,
    rank: c_int,
    uid_hash: u64,
    args: [u64; SLOT_ARGS],
    cfg: *const c_void,
    fwd: impl FnOnce() -> NcclResult,
    out: &mut Option<NcclResult>,
) {
    let (a, rc, comm) = create(call, null_mut(), cfg, args, newcomm, fwd, out);
    let ready = rc == NCCL_SUCCESS;
    let created = !comm.is_null();
    a.finish(rc, comm, |pc| {
        if created {
            pc.set_comm(comm as u64);
            if ready {
                pc.set_arg(INIT_CUDA_DEV, cuda_dev(comm) as u64);
            }
        }
    });
    if created {
        comm_created(
            comm,
            nranks,
            rank,
            uid_hash,
            uid_hash,
            ready,
            call,
            (0, -1, -1),
        );
    }
}

/// Where every init view keeps the device, filled in place once the comm is ready.
const INIT_CUDA_DEV: usize = arg_index!(CommInitRank, cuda_dev);
const _: () = assert!(INIT_CUDA_DEV == arg_index!(NcclCommInitRankScalable, cuda_dev));

/// Entry arguments of ncclCommInitRank / ncclCommInitRankConfig.
fn init_rank_args(nranks: c_int, rank: c_int, id: &NcclUniqueId) -> (u64, [u64; SLOT_ARGS]) {
    let (h, w) = uid_args(id);
    let args = args::CommInitRank {
        nranks: s(nranks),
        rank: s(rank),
        uid_hash: h,
        uid0: w[0],
        uid1: w[1],
        uid2: w[2],
        uid3: w[3],
        uid4: w[4],
        cuda_dev: u64::MAX,
    };
    (h, args.to_args())
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRank(
    newcomm: *mut NcclComm,
    nranks: c_int,
    id: NcclUniqueId,
    rank: c_int,
) -> NcclResult {
    boundary(|out| {
        type F = unsafe extern "C" fn(*mut NcclComm, c_int, NcclUniqueId, c_int) -> NcclResult;
        let f = real_or_return!(out, "ncclCommInitRank", F, CallId::NcclCommInitRank);
        let (h, args) = init_rank_args(nranks, rank, &id);
        init_rank_common(
            CallId::NcclCommInitRank,
            newcomm,
            nranks,
            rank,
            h,
            args,
            std::ptr::null(),
            || f(newcomm, nranks, id, rank),
            out,
        );
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    newcomm: *mut NcclComm,
    nranks: c_int,
    id: NcclUniqueId,
    rank: c_int,
    cfg: *mut c_void,
) -> NcclResult {
    boundary(|out| {
        type F = unsafe extern "C" fn(
            *mut NcclComm,
            c_int,
            NcclUniqueId,
            c_int,
            *mut c_void,
        ) -> NcclResult;
        let f = real_or_return!(
            out,
            "ncclCommInitRankConfig",
            F,
            CallId::NcclCommInitRankConfig
        );
        let (h, args) = init_rank_args(nranks, rank, &id);
        init_rank_common(
            CallId::NcclCommInitRankConfig,
            newcomm,
            nranks,
            rank,
            h,
            args,
            cfg,
            || f(newcomm, nranks, id, rank, cfg),
            out,
        );
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRankScalable(
    newcomm: *mut NcclComm,
    nranks: c_int,
    myrank: c_int,
    n_id: c_int,
    ids: *mut NcclUniqueId,
    cfg: *mut c_void,
) -> NcclResult {
    boundary(|out| {
        type F = unsafe extern "C" fn(
            *mut NcclComm,
            c_int,
            c_int,
            c_int,
            *mut NcclUniqueId,
            *mut c_void,
        ) -> NcclResult;
        let call = CallId::NcclCommInitRankScalable;
        let f = real_or_return!(out, "ncclCommInitRankScalable", F, call);
        // NCCL hashes the first id into commHash.
        let (h, w) = if n_id > 0 && !ids.is_null() {
            uid_args(&*ids)
        } else {
            (0, [0; 5])
        };
        let args = args::NcclCommInitRankScalable {
            nranks: s(nranks),
            rank: s(myrank),
            uid_hash: h,
            uid0: w[0],
            uid1: w[1],
            uid2: w[2],
            uid3: w[3],
            n_ids: s(n_id),
            cuda_dev: u64::MAX,
        }
        .to_args();
        let fwd = || f(newcomm, nranks, myrank, n_id, ids, cfg);
        init_rank_common(call, newcomm, nranks, myrank, h, args, cfg, fwd, out);
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitAll(
    comms_out: *mut NcclComm,
    ndev: c_int,
    devlist: *const c_int,
) -> NcclResult {
    boundary(|out| {
        type F = unsafe extern "C" fn(*mut NcclComm, c_int, *const c_int) -> NcclResult;
        let call = CallId::NcclCommInitAll;
        let f = real_or_return!(out, "ncclCommInitAll", F, call);
        snapshot_at_init();
        // The first four devices (NULL devlist means devices 0..ndev-1; u64::MAX past ndev).
        let dev = |i: usize| -> u64 {
            if devlist.is_null() {
                // NULL devlist means devices 0..ndev-1.
                if (i as c_int) < ndev {
                    i as u64
                } else {
                    u64::MAX
                }
            } else if (i as c_int) < ndev {
                s(*devlist.add(i))
            } else {
                u64::MAX
            }
        };
        let args = args::NcclCommInitAll {
            ndev: s(ndev),
            dev0: dev(0),
            dev1: dev(1),
            dev2: dev(2),
            dev3: dev(3),
            first_comm: 0,
        }
        .to_args();
        let _ = LAST_UID.try_with(|c| c.set(0));
        let a = enter(call, null_mut(), args);
        let rc = forward(|| f(comms_out, ndev, devlist));
        *out = Some(rc);
        let first = if rc == NCCL_SUCCESS && !comms_out.is_null() && ndev > 0 {
            *comms_out
        } else {
            null_mut()
        };
        a.finish(rc, first, |pc| {
            pc.set_arg(arg_index!(NcclCommInitAll, first_comm), p(first))
        });
        if rc == NCCL_SUCCESS && !comms_out.is_null() {
            let uid = LAST_UID.try_with(Cell::get).unwrap_or(0);
            for i in 0..ndev.max(0) as usize {
                let c = *comms_out.add(i);
                comm_created(c, ndev, i as c_int, uid, uid, true, call, (0, -1, -1));
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommSplit(
    comm: NcclComm,
    color: c_int,
    key: c_int,
    newcomm: *mut NcclComm,
    cfg: *mut c_void,
) -> NcclResult {
    boundary(|out| {
        type F =
            unsafe extern "C" fn(NcclComm, c_int, c_int, *mut NcclComm, *mut c_void) -> NcclResult;
        let call = CallId::NcclCommSplit;
        let f = real_or_return!(out, "ncclCommSplit", F, call);
        let parent = comms::find(comm);
        let args = args::NcclCommSplit {
            color: s(color),
            key: s(key),
            rank: u64::MAX,
            ..Default::default()
        }
        .to_args();
        let fwd = || f(comm, color, key, newcomm, cfg);
        let (a, rc, child) = create(call, comm, cfg, args, newcomm, fwd, out);
        // Every split call, with or without a resulting comm, is one child of the parent.
        let child_count =
            parent.map_or(0, |e| e.children.fetch_add(1, Ordering::Relaxed) as i32 + 1);
        let parent_comm_hash = parent.map_or(0, |e| e.comm_hash.load(Ordering::Relaxed));
        let hash = if parent_comm_hash != 0 {
            split_hash(parent_comm_hash, child_count, color)
        } else {
            0
        };
        let ready = rc == NCCL_SUCCESS;
        let (n, r) = if ready && !child.is_null() {
            count_and_rank(child)
        } else {
            (0, -1)
        };
        a.finish(rc, comm, |pc| {
            pc.set_arg(arg_index!(NcclCommSplit, new_comm), p(child));
            pc.set_arg(arg_index!(NcclCommSplit, comm_hash), hash);
            pc.set_arg(arg_index!(NcclCommSplit, nranks), s(n));
            pc.set_arg(arg_index!(NcclCommSplit, rank), s(r));
        });
        if !child.is_null() {
            let uid = parent.map_or(0, |e| e.uid_hash.load(Ordering::Relaxed));
            let origin = (parent_comm_hash, color, key);
            comm_created(child, n, r, uid, hash, ready, call, origin);
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommShrink(
    comm: NcclComm,
    exclude: *mut c_int,
    exclude_count: c_int,
    newcomm: *mut NcclComm,
    cfg: *mut c_void,
    shrink_flags: c_int,
) -> NcclResult {
    boundary(|out| {
        type F = unsafe extern "C" fn(
            NcclComm,
            *mut c_int,
            c_int,
            *mut NcclComm,
            *mut c_void,
            c_int,
        ) -> NcclResult;
        let call = CallId::NcclCommShrink;
        let f = real_or_return!(out, "ncclCommShrink", F, call);
        // The first four excluded ranks; u64::MAX where there is none.
        let excluded = |i: usize| -> u64 {
            if !exclude.is_null() && (i as c_int) < exclude_count {
                s(*exclude.add(i))
            } else {
                u64::MAX
            }
        };
        let mut args = args::NcclCommShrink {
            exclude_count: s(exclude_count),
            shrink_flags: s(shrink_flags),
            new_comm: 0,
            exclude0: excluded(0),
            exclude1: excluded(1),
            exclude2: excluded(2),
            exclude3: excluded(3),
        }
        .to_args();
        // Words past the view stay u64::MAX, as they always were.
        args[args::NcclCommShrink::NAMES.len()..].fill(u64::MAX);
        let fwd = || f(comm, exclude, exclude_count, newcomm, cfg, shrink_flags);
        let (a, rc, child) = create(call, comm, cfg, args, newcomm, fwd, out);
        a.finish(rc, comm, |pc| {
            pc.set_arg(arg_index!(NcclCommShrink, new_comm), p(child))
        });
        if !child.is_null() {
            // The shrunk comm's commHash formula needs NCCL's internal child count; 0 = unknown.
            let uid = comms::find(comm).map_or(0, |e| e.uid_hash.load(Ordering::Relaxed));
            let origin = (parent_hash(comm), -1, -1);
            comm_created(child, 0, -1, uid, 0, rc == NCCL_SUCCESS, call, origin);
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommGrow(
    comm: NcclComm,
    nranks: c_int,
    id: *const NcclUniqueId,
    rank: c_int,
    newcomm: *mut NcclComm,
    cfg: *mut c_void,
) -> NcclResult {
    boundary(|out| {
        type F = unsafe extern "C" fn(
            NcclComm,
            c_int,
            *const NcclUniqueId,
            c_int,
            *mut NcclComm,
            *mut c_void,
        ) -> NcclResult;
        let call = CallId::NcclCommGrow;
        let f = real_or_return!(out, "ncclCommGrow", F, call);
        let h = if id.is_null() {
            0
        } else {
            get_hash(&(*id).internal)
        };
        let args = args::NcclCommGrow {
            nranks: s(nranks),
            rank: s(rank),
            uid_hash: h,
            new_comm: 0,
        }
        .to_args();
        let fwd = || f(comm, nranks, id, rank, newcomm, cfg);
        let (a, rc, child) = create(call, comm, cfg, args, newcomm, fwd, out);
        a.finish(rc, comm, |pc| {
            pc.set_arg(arg_index!(NcclCommGrow, new_comm), p(child))
        });
        if !child.is_null() {
            let origin = (parent_hash(comm), -1, -1);
            comm_created(child, nranks, rank, h, 0, rc == NCCL_SUCCESS, call, origin);
        }
    })
}
