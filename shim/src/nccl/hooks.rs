//! The exported `nccl*` functions. Each one: resolve the real `pncclX` (or return
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

use crate::nccl::call::{self, boundary, enter, forward, missing};
use crate::nccl::comms;
use crate::nccl::config;
use crate::nccl::ffi::*;
use crate::nccl::hash::{get_hash, split_hash, uid_words};
use crate::nccl::resolve::real;
use crate::nccl::snapshot;
use crate::recorder::{record_keep, SHIM};
use ncclshim_dump::layout::{counters, SLOT_ARGS};
use ncclshim_dump::schema::{args, ArgView};
use ncclshim_dump::{arg_index, BlobKind, CallId, CommEntryWriter, Entry, PendingCall, RecordKind};
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

/// Sign-extends a C int into an argument word.
#[inline(always)]
fn s(v: c_int) -> u64 {
    i64::from(v) as u64
}

#[inline(always)]
fn p<T>(ptr: *const T) -> u64 {
    ptr as usize as u64
}

thread_local! {
    /// uid hash of the last successful ncclGetUniqueId on this thread (InitAll makes one inside).
    static LAST_UID: Cell<u64> = const { Cell::new(0) };
}

/// Version of the NCCL the wrappers forward to (0 until known).
static NCCL_VERSION: AtomicI32 = AtomicI32::new(0);

fn nccl_version() -> i32 {
    let v = NCCL_VERSION.load(Ordering::Relaxed);
    if v != 0 {
        return v;
    }
    let mut out: c_int = 0;
    if let Some(f) = real!(
        "ncclGetVersion",
        unsafe extern "C" fn(*mut c_int) -> NcclResult
    ) {
        // SAFETY: out is a valid int out-pointer.
        if forward(|| unsafe { f(&mut out) }) == NCCL_SUCCESS {
            NCCL_VERSION.store(out, Ordering::Relaxed);
        }
    }
    out
}

/// `ncclCommCuDevice` of a ready communicator (-1 when unknown).
unsafe fn cuda_dev(comm: NcclComm) -> i64 {
    let mut dev: c_int = -1;
    match real!(
        "ncclCommCuDevice",
        unsafe extern "C" fn(NcclComm, *mut c_int) -> NcclResult
    ) {
        Some(f) if forward(|| f(comm, &mut dev)) == NCCL_SUCCESS => i64::from(dev),
        _ => -1,
    }
}

/// ncclCommCount / ncclCommUserRank of a ready communicator.
unsafe fn count_and_rank(comm: NcclComm) -> (c_int, c_int) {
    let (mut n, mut r): (c_int, c_int) = (0, -1);
    type F = unsafe extern "C" fn(NcclComm, *mut c_int) -> NcclResult;
    if let Some(f) = real!("ncclCommCount", F) {
        forward(|| f(comm, &mut n));
    }
    if let Some(f) = real!("ncclCommUserRank", F) {
        forward(|| f(comm, &mut r));
    }
    (n, r)
}

/// Refreshes the environment and library snapshots as a communicator is being created.
fn snapshot_at_init() {
    record_keep(|r, w| snapshot::take(r, w, snapshot::Reason::CommInit, false));
}

/// Stores the ncclConfig_t as an `event` record of `call` ahead of the call itself (the call's
/// own blob slot is reserved for NCCL's error text).
unsafe fn record_config(call: CallId, comm: NcclComm, cfg: *const c_void) {
    if cfg.is_null() {
        return;
    }
    let flags = call::context_flags();
    record_keep(|r, w| {
        // SAFETY: NCCL reads the same struct within its declared size; so do we.
        let v = unsafe { config::read_config(cfg) };
        let json = serde_json::to_vec(&v).unwrap_or_default();
        let mut e = Entry::new(RecordKind::Event, call);
        e.comm = comm as u64;
        e.flags = flags;
        e.blob = r.append_blob(BlobKind::CommConfig, &json);
        w.instant(&e);
    });
}

/// A communicator came up: remember its join facts and, once it is ready, write `commCreated`.
/// `ready` is false for a non-blocking init still in progress (querying it then has side
/// effects); the record is written when ncclCommGetAsyncError first reports success.
/// `origin` is the call that made it and, for a split, the parent's hash, color and key.
#[allow(clippy::too_many_arguments)] // the communicator's identity, as the init call knew it
unsafe fn comm_created(
    comm: NcclComm,
    nranks: c_int,
    rank: c_int,
    uid_hash: u64,
    comm_hash: u64,
    ready: bool,
    origin: CallId,
    parent: (u64, i32, i32),
) {
    if comm.is_null() {
        return;
    }
    let Some(e) = comms::get_or_insert(comm) else {
        return;
    };
    e.reset();
    e.nranks.store(nranks, Ordering::Relaxed);
    e.rank.store(rank, Ordering::Relaxed);
    e.uid_hash.store(uid_hash, Ordering::Relaxed);
    e.comm_hash.store(comm_hash, Ordering::Relaxed);
    // Identity outside the rings: the table entry survives any number of hot records.
    if let Some(t) = SHIM.existing().and_then(|r| r.claim_comm_entry()) {
        t.publish(
            origin,
            comm as u64,
            comm_hash,
            uid_hash,
            nranks,
            rank,
            parent,
            false,
        );
        e.set_table(t);
    }
    if ready {
        write_comm_created(comm, e);
    } else {
        e.pending_init.store(1, Ordering::Relaxed);
    }
}

unsafe fn write_comm_created(comm: NcclComm, e: &comms::CommEntry) {
    let dev = cuda_dev(comm);
    let version = nccl_version();
    let (mut n, mut rank) = (
        e.nranks.load(Ordering::Relaxed),
        e.rank.load(Ordering::Relaxed),
    );
    if n <= 0 || rank < 0 {
        (n, rank) = count_and_rank(comm);
        e.nranks.store(n, Ordering::Relaxed);
        e.rank.store(rank, Ordering::Relaxed);
    }
    if let Some(t) = e.table() {
        t.ready(n, rank, dev as i32, version);
    }
    let flags = call::context_flags();
    record_keep(|_, w| {
        let mut r = Entry::new(RecordKind::CommInfo, CallId::CommCreated);
        r.comm = comm as u64;
        r.flags = flags;
        r.args = args::CommCreated {
            comm_hash: e.comm_hash.load(Ordering::Relaxed),
            nranks: s(n),
            rank: s(rank),
            cuda_dev: dev as u64,
            uid_hash: e.uid_hash.load(Ordering::Relaxed),
            nccl_version: s(version),
        }
        .to_args();
        w.instant(&r);
    });
}

/// The communicator NCCL wrote to `newcomm`, read only when it reports one was made.
unsafe fn out_comm(newcomm: *mut NcclComm, rc: NcclResult) -> NcclComm {
    if newcomm.is_null() || (rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS) {
        null_mut()
    } else {
        *newcomm
    }
}

fn uid_args(id: &NcclUniqueId) -> (u64, [u64; 5]) {
    (get_hash(&id.internal), uid_words(&id.internal))
}

/// The shape most wrappers share. Without the real function the caller gets `missing`'s
/// ncclInternalError; otherwise the entry of `call` on `comm` is recorded with the arguments
/// `args` makes (only now, so a missing function takes no sequence number), `fwd` makes the
/// real call, its result goes to the caller at once (`out`) and the record is completed;
/// `on_success` fills the result arguments, only when NCCL returned ncclSuccess (it may not
/// have written its out-values otherwise). Returns the caller's result.
#[inline(always)]
fn recorded<F>(
    out: &mut Option<NcclResult>,
    real: Option<F>,
    call: CallId,
    comm: NcclComm,
    args: impl FnOnce() -> [u64; SLOT_ARGS],
    fwd: impl FnOnce(F) -> NcclResult,
    on_success: impl FnOnce(&PendingCall),
) -> NcclResult {
    let Some(f) = real else {
        let rc = missing(call);
        *out = Some(rc);
        return rc;
    };
    let a = enter(call, comm, args());
    let rc = forward(|| fwd(f));
    *out = Some(rc);
    a.finish(rc, comm, |pc| {
        if rc == NCCL_SUCCESS {
            on_success(pc);
        }
    });
    rc
}

/// Defines an export of the common shape (see `recorded`): its C signature, forwarded as it
/// is, the comm its record is on, the entry arguments (the call's `schema::args` view, result
/// fields left 0), and the result arguments `on_success` fills (after ncclSuccess,
/// out-pointers only once checked non-null) at their `arg_index!`.
macro_rules! export {
    ($fn_name:ident, $name:literal, $call:expr, ($($arg:ident : $ty:ty),*),
     comm = $comm:expr, args = $args:expr, on_success = |$pc:ident| $fill:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $fn_name($($arg: $ty),*) -> NcclResult {
            boundary(|out| {
                type F = unsafe extern "C" fn($($ty),*) -> NcclResult;
                let fwd = |f: F| f($($arg),*);
                let entry = || ArgView::to_args(&$args);
                recorded(out, real!($name, F), $call, $comm, entry, fwd, |$pc| $fill);
            })
        }
    };
    // A call with no result arguments.
    ($fn_name:ident, $name:literal, $call:expr, ($($arg:ident : $ty:ty),*),
     comm = $comm:expr, args = $args:expr) => {
        export!($fn_name, $name, $call, ($($arg: $ty),*),
            comm = $comm, args = $args, on_success = |_pc| ());
    };
}

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
    snapshot_at_init();
    record_config(call, null_mut(), cfg);
    let a = enter(call, null_mut(), args);
    let rc = forward(fwd);
    *out = Some(rc);
    let comm = out_comm(newcomm, rc);
    let ready = rc == NCCL_SUCCESS;
    let created = (ready || rc == NCCL_IN_PROGRESS) && !comm.is_null();
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
        let Some(f) = real!("ncclCommInitRank", F) else {
            *out = Some(missing(CallId::NcclCommInitRank));
            return;
        };
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
        let Some(f) = real!("ncclCommInitRankConfig", F) else {
            *out = Some(missing(CallId::NcclCommInitRankConfig));
            return;
        };
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
        let Some(f) = real!("ncclCommInitRankScalable", F) else {
            *out = Some(missing(call));
            return;
        };
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
        let Some(f) = real!("ncclCommInitAll", F) else {
            *out = Some(missing(call));
            return;
        };
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
        let Some(f) = real!("ncclCommSplit", F) else {
            *out = Some(missing(call));
            return;
        };
        snapshot_at_init();
        record_config(call, comm, cfg);
        let parent = comms::find(comm);
        let args = args::NcclCommSplit {
            color: s(color),
            key: s(key),
            rank: u64::MAX,
            ..Default::default()
        }
        .to_args();
        let a = enter(call, comm, args);
        let rc = forward(|| f(comm, color, key, newcomm, cfg));
        *out = Some(rc);
        let child = out_comm(newcomm, rc);
        // Every split call, with or without a resulting comm, is one child of the parent.
        let child_count =
            parent.map_or(0, |e| e.children.fetch_add(1, Ordering::Relaxed) as i32 + 1);
        let parent_hash = parent.map_or(0, |e| e.comm_hash.load(Ordering::Relaxed));
        let hash = if parent_hash != 0 {
            split_hash(parent_hash, child_count, color)
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
        if (ready || rc == NCCL_IN_PROGRESS) && !child.is_null() {
            let uid = parent.map_or(0, |e| e.uid_hash.load(Ordering::Relaxed));
            let origin = (parent_hash, color, key);
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
        let Some(f) = real!("ncclCommShrink", F) else {
            *out = Some(missing(call));
            return;
        };
        snapshot_at_init();
        record_config(call, comm, cfg);
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
        let a = enter(call, comm, args);
        let rc = forward(|| f(comm, exclude, exclude_count, newcomm, cfg, shrink_flags));
        *out = Some(rc);
        let child = out_comm(newcomm, rc);
        a.finish(rc, comm, |pc| {
            pc.set_arg(arg_index!(NcclCommShrink, new_comm), p(child))
        });
        if (rc == NCCL_SUCCESS || rc == NCCL_IN_PROGRESS) && !child.is_null() {
            // The shrunk comm's commHash formula needs NCCL's internal child count; 0 = unknown.
            let uid = comms::find(comm).map_or(0, |e| e.uid_hash.load(Ordering::Relaxed));
            let parent_hash = comms::find(comm).map_or(0, |e| e.comm_hash.load(Ordering::Relaxed));
            let origin = (parent_hash, -1, -1);
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
        let Some(f) = real!("ncclCommGrow", F) else {
            *out = Some(missing(call));
            return;
        };
        snapshot_at_init();
        record_config(call, comm, cfg);
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
        let a = enter(call, comm, args);
        let rc = forward(|| f(comm, nranks, id, rank, newcomm, cfg));
        *out = Some(rc);
        let child = out_comm(newcomm, rc);
        a.finish(rc, comm, |pc| {
            pc.set_arg(arg_index!(NcclCommGrow, new_comm), p(child))
        });
        if (rc == NCCL_SUCCESS || rc == NCCL_IN_PROGRESS) && !child.is_null() {
            let parent_hash = comms::find(comm).map_or(0, |e| e.comm_hash.load(Ordering::Relaxed));
            let origin = (parent_hash, -1, -1);
            comm_created(child, nranks, rank, h, 0, rc == NCCL_SUCCESS, call, origin);
        }
    })
}

// ---------------------------------------------------------------- teardown

macro_rules! comm_only {
    ($(#[$m:meta])* $fn_name:ident, $name:literal, $call:expr, forget = $forget:expr) => {
        $(#[$m])*
        #[no_mangle]
        pub unsafe extern "C" fn $fn_name(comm: NcclComm) -> NcclResult {
            boundary(|out| {
                type F = unsafe extern "C" fn(NcclComm) -> NcclResult;
                let real = real!($name, F);
                let entry = || args::NoArgs {}.to_args();
                let rc = recorded(out, real, $call, comm, entry, |f| f(comm), |_| {});
                if $forget && rc == NCCL_SUCCESS {
                    if let Some(t) = comms::find(comm).and_then(|e| e.table()) {
                        t.end($call == CallId::NcclCommAbort);
                    }
                    comms::remove(comm);
                }
            })
        }
    };
}

comm_only!(
    ncclCommFinalize,
    "ncclCommFinalize",
    CallId::NcclCommFinalize,
    forget = false
);
comm_only!(
    ncclCommDestroy,
    "ncclCommDestroy",
    CallId::NcclCommDestroy,
    forget = true
);
comm_only!(
    ncclCommAbort,
    "ncclCommAbort",
    CallId::NcclCommAbort,
    forget = true
);

export!(ncclCommRevoke, "ncclCommRevoke", CallId::NcclCommRevoke,
    (comm: NcclComm, flags: c_int),
    comm = comm, args = args::NcclCommRevoke { flags: s(flags) });

/// Polled constantly by framework watchdogs: recorded only when the value (or rc) changes per
/// comm; unchanged polls only bump a header counter.
#[no_mangle]
pub unsafe extern "C" fn ncclCommGetAsyncError(
    comm: NcclComm,
    async_error: *mut NcclResult,
) -> NcclResult {
    boundary(|out| {
        type F = unsafe extern "C" fn(NcclComm, *mut NcclResult) -> NcclResult;
        let Some(f) = real!("ncclCommGetAsyncError", F) else {
            *out = Some(missing(CallId::NcclCommGetAsyncError));
            return;
        };
        let rc = forward(|| f(comm, async_error));
        *out = Some(rc);
        let value = if rc == NCCL_SUCCESS && !async_error.is_null() {
            *async_error
        } else {
            rc
        };
        let entry = comms::get_or_insert(comm);
        let changed = match entry {
            Some(e) => e.async_changed(value),
            None => Some(i32::MIN),
        };
        match changed {
            None if rc == NCCL_SUCCESS => {
                if let Some(r) = SHIM.existing() {
                    r.add_counter(counters::SHIM_ASYNC_POLLS, 1);
                    // A watchdog polling a hung comm is alive: say so without a record.
                    r.note_alive();
                }
            }
            prev => {
                let flags = call::context_flags();
                record_keep(|r, w| {
                    let mut e = Entry::new(RecordKind::Call, CallId::NcclCommGetAsyncError);
                    e.comm = comm as u64;
                    e.flags = flags;
                    e.rc = rc;
                    e.args = args::NcclCommGetAsyncError {
                        async_error: s(value),
                        previous: s(prev.unwrap_or(value)),
                    }
                    .to_args();
                    if call::is_failure_value(rc, value) {
                        // SAFETY: NCCL's static buffer or null.
                        if let Some(t) = unsafe { call::last_error(comm) } {
                            let off = r.append_blob(BlobKind::ErrorText, t.to_bytes());
                            if off != 0 {
                                e.blob = off;
                                e.flags |= ncclshim_dump::schema::slot_flags::HAS_ERROR_TEXT;
                            }
                        }
                    }
                    w.instant(&e);
                });
                // A non-blocking init that just finished: the comm can now be asked its device.
                if value == NCCL_SUCCESS {
                    if let Some(e) = entry {
                        if e.pending_init.swap(0, Ordering::Relaxed) == 1 {
                            write_comm_created(comm, e);
                        }
                    }
                }
            }
        }
    })
}

// ---------------------------------------------------------------- groups

#[no_mangle]
pub unsafe extern "C" fn ncclGroupStart() -> NcclResult {
    boundary(|out| {
        let Some(f) = real!("ncclGroupStart", unsafe extern "C" fn() -> NcclResult) else {
            *out = Some(missing(CallId::NcclGroupStart));
            return;
        };
        let nested = call::nested();
        let depth = call::group_depth();
        let args = args::Group {
            depth: u64::from(depth + 1),
        }
        .to_args();
        let a = enter(CallId::NcclGroupStart, null_mut(), args);
        let rc = forward(|| f());
        *out = Some(rc);
        if rc == NCCL_SUCCESS && !nested {
            call::set_group_depth(depth + 1);
        }
        a.finish(rc, null_mut(), |_| {});
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGroupEnd() -> NcclResult {
    boundary(|out| {
        let Some(f) = real!("ncclGroupEnd", unsafe extern "C" fn() -> NcclResult) else {
            *out = Some(missing(CallId::NcclGroupEnd));
            return;
        };
        let nested = call::nested();
        let depth = call::group_depth();
        let args = args::Group {
            depth: u64::from(depth),
        }
        .to_args();
        let a = enter(CallId::NcclGroupEnd, null_mut(), args);
        // The group is closed from the caller's view whatever GroupEnd returns (NCCL resets it).
        if !nested {
            call::set_group_depth(depth.saturating_sub(1));
        }
        let rc = forward(|| f());
        *out = Some(rc);
        a.finish(rc, null_mut(), |_| {});
    })
}

// ---------------------------------------------------------------- collectives and p2p

/// Records one operation around `fwd`. `op`/`root` are -1 where the call has none.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn operation<F>(
    real: Option<F>,
    call: CallId,
    comm: NcclComm,
    count: usize,
    datatype: c_int,
    op: c_int,
    root: c_int,
    send: *const c_void,
    recv: *const c_void,
    stream: Stream,
    fwd: impl FnOnce(F) -> NcclResult,
    out: &mut Option<NcclResult>,
) {
    // Bcast is NCCL's Broadcast: one counter for both.
    let idx = if call == CallId::NcclBcast {
        CallId::NcclBroadcast
    } else {
        call
    } as usize
        - CallId::NcclAllReduce as usize;
    let Some(f) = real else {
        *out = Some(missing(call));
        return;
    };
    let mut table = None;
    let (seq, op_seq) = if call::nested() {
        (u64::MAX, u64::MAX)
    } else {
        match comms::get_or_insert(comm) {
            Some(e) => {
                table = e.table();
                e.next_seq(idx)
            }
            None => (u64::MAX, u64::MAX),
        }
    };
    // Send/recv's `PointToPoint` view is the same words with `peer` in `root`'s slot.
    const _: () = assert!(arg_index!(Collective, root) == arg_index!(PointToPoint, peer));
    let entry = args::Collective {
        count: count as u64,
        datatype: s(datatype),
        op: s(op),
        root: s(root),
        sendbuff: p(send),
        recvbuff: p(recv),
        stream: p(stream),
        seq,
        op_seq,
    }
    .to_args();
    let a = enter(call, comm, entry);
    // Progress outside the rings: the last operation issued on this comm, with its arguments.
    if let Some(t) = table {
        t.issue(seq, call, count as u64, datatype, op, root, a.t_enter());
    }
    let rc = forward(|| fwd(f));
    *out = Some(rc);
    a.finish(rc, comm, |_| {});
    if let Some(t) = table {
        t.complete(seq, rc);
    }
}

/// Defines a collective or p2p export: its C signature (`args`), forwarded as it is, and which
/// of those arguments fill the operation record's fields.
macro_rules! op_export {
    ($fn_name:ident, $name:literal, $call:expr,
     ($($arg:ident : $ty:ty),*),
     count = $count:expr, dt = $dt:expr, op = $op:expr, root = $root:expr,
     send = $send:expr, recv = $recv:expr, comm = $comm:ident, stream = $stream:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $fn_name($($arg: $ty),*) -> NcclResult {
            boundary(|out| {
                type F = unsafe extern "C" fn($($ty),*) -> NcclResult;
                let real = real!($name, F);
                let fwd = |f: F| f($($arg),*);
                operation(real, $call, $comm, $count, $dt, $op, $root, $send, $recv, $stream, fwd, out);
            })
        }
    };
}

op_export!(ncclAllReduce, "ncclAllReduce", CallId::NcclAllReduce,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, op: c_int, comm: NcclComm, stream: Stream),
    count = count, dt = datatype, op = op, root = -1, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclBroadcast, "ncclBroadcast", CallId::NcclBroadcast,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream),
    count = count, dt = datatype, op = -1, root = root, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclBcast, "ncclBcast", CallId::NcclBcast,
    (buff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream),
    count = count, dt = datatype, op = -1, root = root, send = buff, recv = buff, comm = comm, stream = stream);
op_export!(ncclReduce, "ncclReduce", CallId::NcclReduce,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, op: c_int, root: c_int, comm: NcclComm, stream: Stream),
    count = count, dt = datatype, op = op, root = root, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclAllGather, "ncclAllGather", CallId::NcclAllGather,
    (sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: c_int, comm: NcclComm, stream: Stream),
    count = sendcount, dt = datatype, op = -1, root = -1, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclReduceScatter, "ncclReduceScatter", CallId::NcclReduceScatter,
    (sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: c_int, op: c_int, comm: NcclComm, stream: Stream),
    count = recvcount, dt = datatype, op = op, root = -1, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclAlltoAll, "ncclAlltoAll", CallId::NcclAlltoAll,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, comm: NcclComm, stream: Stream),
    count = count, dt = datatype, op = -1, root = -1, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclGather, "ncclGather", CallId::NcclGather,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream),
    count = count, dt = datatype, op = -1, root = root, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclScatter, "ncclScatter", CallId::NcclScatter,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream),
    count = count, dt = datatype, op = -1, root = root, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclSend, "ncclSend", CallId::NcclSend,
    (sendbuff: *const c_void, count: usize, datatype: c_int, peer: c_int, comm: NcclComm, stream: Stream),
    count = count, dt = datatype, op = -1, root = peer, send = sendbuff, recv = std::ptr::null(), comm = comm, stream = stream);
op_export!(ncclRecv, "ncclRecv", CallId::NcclRecv,
    (recvbuff: *mut c_void, count: usize, datatype: c_int, peer: c_int, comm: NcclComm, stream: Stream),
    count = count, dt = datatype, op = -1, root = peer, send = std::ptr::null(), recv = recvbuff, comm = comm, stream = stream);

// ---------------------------------------------------------------- memory and registration

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
