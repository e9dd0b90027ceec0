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
use crate::recorder::{record, SHIM};
use ncclshim_dump::layout::{counters, SLOT_ARGS};
use ncclshim_dump::{BlobKind, CallId, Entry, RecordKind};
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};

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
    record(|r, w| snapshot::take(r, w, snapshot::Reason::CommInit, false));
}

/// Stores the ncclConfig_t as an `event` record of `call` ahead of the call itself (the call's
/// own blob slot is reserved for NCCL's error text).
unsafe fn record_config(call: CallId, comm: NcclComm, cfg: *const c_void) {
    if cfg.is_null() {
        return;
    }
    let flags = call::context_flags();
    record(|r, w| {
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
unsafe fn comm_created(
    comm: NcclComm,
    nranks: c_int,
    rank: c_int,
    uid_hash: u64,
    comm_hash: u64,
    ready: bool,
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
    let flags = call::context_flags();
    record(|_, w| {
        let mut r = Entry::new(RecordKind::CommInfo, CallId::CommCreated);
        r.comm = comm as u64;
        r.flags = flags;
        r.args[..6].copy_from_slice(&[
            e.comm_hash.load(Ordering::Relaxed),
            s(n),
            s(rank),
            dev as u64,
            e.uid_hash.load(Ordering::Relaxed),
            s(version),
        ]);
        w.instant(&r);
    });
}

/// The communicator NCCL wrote to `newcomm`, read only when it reports one was made.
unsafe fn out_comm(newcomm: *mut NcclComm, rc: NcclResult) -> NcclComm {
    if newcomm.is_null() || (rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS) {
        std::ptr::null_mut()
    } else {
        *newcomm
    }
}

fn uid_args(id: &NcclUniqueId) -> (u64, [u64; 5]) {
    (get_hash(&id.internal), uid_words(&id.internal))
}

// ---------------------------------------------------------------- version, uniqueId

#[no_mangle]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> NcclResult {
    boundary(|out| {
        let Some(f) = real!(
            "ncclGetVersion",
            unsafe extern "C" fn(*mut c_int) -> NcclResult
        ) else {
            *out = Some(missing(CallId::NcclGetVersion));
            return;
        };
        let a = enter(CallId::NcclGetVersion, std::ptr::null_mut(), [0; SLOT_ARGS]);
        let rc = forward(|| f(version));
        *out = Some(rc);
        a.finish(rc, std::ptr::null_mut(), |pc| {
            if rc == NCCL_SUCCESS && !version.is_null() {
                pc.set_arg(0, s(*version));
            }
        });
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetUniqueId(id: *mut NcclUniqueId) -> NcclResult {
    boundary(|out| {
        let Some(f) = real!(
            "ncclGetUniqueId",
            unsafe extern "C" fn(*mut NcclUniqueId) -> NcclResult
        ) else {
            *out = Some(missing(CallId::NcclGetUniqueId));
            return;
        };
        let a = enter(
            CallId::NcclGetUniqueId,
            std::ptr::null_mut(),
            [0; SLOT_ARGS],
        );
        let rc = forward(|| f(id));
        *out = Some(rc);
        a.finish(rc, std::ptr::null_mut(), |pc| {
            if rc == NCCL_SUCCESS && !id.is_null() {
                let (h, w) = uid_args(&*id);
                let _ = LAST_UID.try_with(|c| c.set(h));
                pc.set_arg(0, h);
                for (i, v) in w.iter().enumerate() {
                    pc.set_arg(1 + i, *v);
                }
            }
        });
    })
}

// ---------------------------------------------------------------- communicator creation

#[allow(clippy::too_many_arguments)] // the C call's own arguments plus the forwarding closure
unsafe fn init_rank_common(
    call: CallId,
    newcomm: *mut NcclComm,
    nranks: c_int,
    id: NcclUniqueId,
    rank: c_int,
    cfg: *const c_void,
    fwd: impl FnOnce() -> NcclResult,
    out: &mut Option<NcclResult>,
) {
    snapshot_at_init();
    record_config(call, std::ptr::null_mut(), cfg);
    let (h, w) = uid_args(&id);
    let args = [
        s(nranks),
        s(rank),
        h,
        w[0],
        w[1],
        w[2],
        w[3],
        w[4],
        u64::MAX,
    ];
    let a = enter(call, std::ptr::null_mut(), args);
    let rc = forward(fwd);
    *out = Some(rc);
    let comm = out_comm(newcomm, rc);
    let ready = rc == NCCL_SUCCESS;
    let created = (ready || rc == NCCL_IN_PROGRESS) && !comm.is_null();
    a.finish(rc, comm, |pc| {
        if created {
            pc.set_comm(comm as u64);
            if ready {
                pc.set_arg(8, cuda_dev(comm) as u64);
            }
        }
    });
    if created {
        comm_created(comm, nranks, rank, h, h, ready);
    }
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
        init_rank_common(
            CallId::NcclCommInitRank,
            newcomm,
            nranks,
            id,
            rank,
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
        init_rank_common(
            CallId::NcclCommInitRankConfig,
            newcomm,
            nranks,
            id,
            rank,
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
        snapshot_at_init();
        record_config(call, std::ptr::null_mut(), cfg);
        // NCCL hashes the first id into commHash.
        let (h, w) = if n_id > 0 && !ids.is_null() {
            uid_args(&*ids)
        } else {
            (0, [0; 5])
        };
        let args = [
            s(nranks),
            s(myrank),
            h,
            w[0],
            w[1],
            w[2],
            w[3],
            s(n_id),
            u64::MAX,
        ];
        let a = enter(call, std::ptr::null_mut(), args);
        let rc = forward(|| f(newcomm, nranks, myrank, n_id, ids, cfg));
        *out = Some(rc);
        let comm = out_comm(newcomm, rc);
        let ready = rc == NCCL_SUCCESS;
        let created = (ready || rc == NCCL_IN_PROGRESS) && !comm.is_null();
        a.finish(rc, comm, |pc| {
            if created {
                pc.set_comm(comm as u64);
                if ready {
                    pc.set_arg(8, cuda_dev(comm) as u64);
                }
            }
        });
        if created {
            comm_created(comm, nranks, myrank, h, h, ready);
        }
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
        let mut args = [0u64; SLOT_ARGS];
        args[0] = s(ndev);
        for i in 0..4usize {
            args[1 + i] = if devlist.is_null() {
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
            };
        }
        let _ = LAST_UID.try_with(|c| c.set(0));
        let a = enter(call, std::ptr::null_mut(), args);
        let rc = forward(|| f(comms_out, ndev, devlist));
        *out = Some(rc);
        let first = if rc == NCCL_SUCCESS && !comms_out.is_null() && ndev > 0 {
            *comms_out
        } else {
            std::ptr::null_mut()
        };
        a.finish(rc, first, |pc| pc.set_arg(5, p(first)));
        if rc == NCCL_SUCCESS && !comms_out.is_null() {
            let uid = LAST_UID.try_with(Cell::get).unwrap_or(0);
            for i in 0..ndev.max(0) as usize {
                comm_created(*comms_out.add(i), ndev, i as c_int, uid, uid, true);
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
        let args = [s(color), s(key), 0, 0, 0, u64::MAX, 0, 0, 0];
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
            pc.set_arg(2, p(child));
            pc.set_arg(3, hash);
            pc.set_arg(4, s(n));
            pc.set_arg(5, s(r));
        });
        if (ready || rc == NCCL_IN_PROGRESS) && !child.is_null() {
            let uid = parent.map_or(0, |e| e.uid_hash.load(Ordering::Relaxed));
            comm_created(child, n, r, uid, hash, ready);
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
        let mut args = [u64::MAX; SLOT_ARGS];
        args[0] = s(exclude_count);
        args[1] = s(shrink_flags);
        args[2] = 0;
        for i in 0..4usize {
            if !exclude.is_null() && (i as c_int) < exclude_count {
                args[3 + i] = s(*exclude.add(i));
            }
        }
        let a = enter(call, comm, args);
        let rc = forward(|| f(comm, exclude, exclude_count, newcomm, cfg, shrink_flags));
        *out = Some(rc);
        let child = out_comm(newcomm, rc);
        a.finish(rc, comm, |pc| pc.set_arg(2, p(child)));
        if (rc == NCCL_SUCCESS || rc == NCCL_IN_PROGRESS) && !child.is_null() {
            // The shrunk comm's commHash formula needs NCCL's internal child count; 0 = unknown.
            let uid = comms::find(comm).map_or(0, |e| e.uid_hash.load(Ordering::Relaxed));
            comm_created(child, 0, -1, uid, 0, rc == NCCL_SUCCESS);
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
        let args = [s(nranks), s(rank), h, 0, 0, 0, 0, 0, 0];
        let a = enter(call, comm, args);
        let rc = forward(|| f(comm, nranks, id, rank, newcomm, cfg));
        *out = Some(rc);
        let child = out_comm(newcomm, rc);
        a.finish(rc, comm, |pc| pc.set_arg(3, p(child)));
        if (rc == NCCL_SUCCESS || rc == NCCL_IN_PROGRESS) && !child.is_null() {
            comm_created(child, nranks, rank, h, 0, rc == NCCL_SUCCESS);
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
                let Some(f) = real!($name, unsafe extern "C" fn(NcclComm) -> NcclResult) else {
                    *out = Some(missing($call));
                    return;
                };
                let a = enter($call, comm, [0; SLOT_ARGS]);
                let rc = forward(|| f(comm));
                *out = Some(rc);
                a.finish(rc, comm, |_| {});
                if $forget && rc == NCCL_SUCCESS {
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

#[no_mangle]
pub unsafe extern "C" fn ncclCommRevoke(comm: NcclComm, flags: c_int) -> NcclResult {
    boundary(|out| {
        let Some(f) = real!(
            "ncclCommRevoke",
            unsafe extern "C" fn(NcclComm, c_int) -> NcclResult
        ) else {
            *out = Some(missing(CallId::NcclCommRevoke));
            return;
        };
        let mut args = [0; SLOT_ARGS];
        args[0] = s(flags);
        let a = enter(CallId::NcclCommRevoke, comm, args);
        let rc = forward(|| f(comm, flags));
        *out = Some(rc);
        a.finish(rc, comm, |_| {});
    })
}

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
                }
            }
            prev => {
                let flags = call::context_flags();
                record(|r, w| {
                    let mut e = Entry::new(RecordKind::Call, CallId::NcclCommGetAsyncError);
                    e.comm = comm as u64;
                    e.flags = flags;
                    e.rc = rc;
                    e.args[0] = s(value);
                    e.args[1] = s(prev.unwrap_or(value));
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
        let mut args = [0; SLOT_ARGS];
        args[0] = u64::from(depth + 1);
        let a = enter(CallId::NcclGroupStart, std::ptr::null_mut(), args);
        let rc = forward(|| f());
        *out = Some(rc);
        if rc == NCCL_SUCCESS && !nested {
            call::set_group_depth(depth + 1);
        }
        a.finish(rc, std::ptr::null_mut(), |_| {});
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
        let mut args = [0; SLOT_ARGS];
        args[0] = u64::from(depth);
        let a = enter(CallId::NcclGroupEnd, std::ptr::null_mut(), args);
        // The group is closed from the caller's view whatever GroupEnd returns (NCCL resets it).
        if !nested {
            call::set_group_depth(depth.saturating_sub(1));
        }
        let rc = forward(|| f());
        *out = Some(rc);
        a.finish(rc, std::ptr::null_mut(), |_| {});
    })
}

// ---------------------------------------------------------------- collectives and p2p

/// Records one operation around `fwd`. `op`/`root` are -1 where the call has none.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn operation(
    call: CallId,
    comm: NcclComm,
    count: usize,
    datatype: c_int,
    op: c_int,
    root: c_int,
    send: *const c_void,
    recv: *const c_void,
    stream: Stream,
    fwd: impl FnOnce() -> NcclResult,
    out: &mut Option<NcclResult>,
) {
    // Bcast is NCCL's Broadcast: one counter for both.
    let idx = if call == CallId::NcclBcast {
        CallId::NcclBroadcast
    } else {
        call
    } as usize
        - CallId::NcclAllReduce as usize;
    let (seq, op_seq) = if call::nested() {
        (u64::MAX, u64::MAX)
    } else {
        comms::get_or_insert(comm).map_or((u64::MAX, u64::MAX), |e| e.next_seq(idx))
    };
    let args = [
        count as u64,
        s(datatype),
        s(op),
        s(root),
        p(send),
        p(recv),
        p(stream),
        seq,
        op_seq,
    ];
    let a = enter(call, comm, args);
    let rc = forward(fwd);
    *out = Some(rc);
    a.finish(rc, comm, |_| {});
}

macro_rules! op_export {
    ($fn_name:ident, $name:literal, $call:expr,
     ($($arg:ident : $ty:ty),*), |$f:ident| $invoke:expr,
     count = $count:expr, dt = $dt:expr, op = $op:expr, root = $root:expr,
     send = $send:expr, recv = $recv:expr, comm = $comm:ident, stream = $stream:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $fn_name($($arg: $ty),*) -> NcclResult {
            boundary(|out| {
                type F = unsafe extern "C" fn($($ty),*) -> NcclResult;
                let Some($f) = real!($name, F) else {
                    *out = Some(missing($call));
                    return;
                };
                operation($call, $comm, $count, $dt, $op, $root, $send, $recv, $stream, || $invoke, out);
            })
        }
    };
}

op_export!(ncclAllReduce, "ncclAllReduce", CallId::NcclAllReduce,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, op: c_int, comm: NcclComm, stream: Stream),
    |f| f(sendbuff, recvbuff, count, datatype, op, comm, stream),
    count = count, dt = datatype, op = op, root = -1, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclBroadcast, "ncclBroadcast", CallId::NcclBroadcast,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream),
    |f| f(sendbuff, recvbuff, count, datatype, root, comm, stream),
    count = count, dt = datatype, op = -1, root = root, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclBcast, "ncclBcast", CallId::NcclBcast,
    (buff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream),
    |f| f(buff, count, datatype, root, comm, stream),
    count = count, dt = datatype, op = -1, root = root, send = buff, recv = buff, comm = comm, stream = stream);
op_export!(ncclReduce, "ncclReduce", CallId::NcclReduce,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, op: c_int, root: c_int, comm: NcclComm, stream: Stream),
    |f| f(sendbuff, recvbuff, count, datatype, op, root, comm, stream),
    count = count, dt = datatype, op = op, root = root, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclAllGather, "ncclAllGather", CallId::NcclAllGather,
    (sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: c_int, comm: NcclComm, stream: Stream),
    |f| f(sendbuff, recvbuff, sendcount, datatype, comm, stream),
    count = sendcount, dt = datatype, op = -1, root = -1, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclReduceScatter, "ncclReduceScatter", CallId::NcclReduceScatter,
    (sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: c_int, op: c_int, comm: NcclComm, stream: Stream),
    |f| f(sendbuff, recvbuff, recvcount, datatype, op, comm, stream),
    count = recvcount, dt = datatype, op = op, root = -1, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclAlltoAll, "ncclAlltoAll", CallId::NcclAlltoAll,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, comm: NcclComm, stream: Stream),
    |f| f(sendbuff, recvbuff, count, datatype, comm, stream),
    count = count, dt = datatype, op = -1, root = -1, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclGather, "ncclGather", CallId::NcclGather,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream),
    |f| f(sendbuff, recvbuff, count, datatype, root, comm, stream),
    count = count, dt = datatype, op = -1, root = root, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclScatter, "ncclScatter", CallId::NcclScatter,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream),
    |f| f(sendbuff, recvbuff, count, datatype, root, comm, stream),
    count = count, dt = datatype, op = -1, root = root, send = sendbuff, recv = recvbuff, comm = comm, stream = stream);
op_export!(ncclSend, "ncclSend", CallId::NcclSend,
    (sendbuff: *const c_void, count: usize, datatype: c_int, peer: c_int, comm: NcclComm, stream: Stream),
    |f| f(sendbuff, count, datatype, peer, comm, stream),
    count = count, dt = datatype, op = -1, root = peer, send = sendbuff, recv = std::ptr::null(), comm = comm, stream = stream);
op_export!(ncclRecv, "ncclRecv", CallId::NcclRecv,
    (recvbuff: *mut c_void, count: usize, datatype: c_int, peer: c_int, comm: NcclComm, stream: Stream),
    |f| f(recvbuff, count, datatype, peer, comm, stream),
    count = count, dt = datatype, op = -1, root = peer, send = std::ptr::null(), recv = recvbuff, comm = comm, stream = stream);

// ---------------------------------------------------------------- memory and registration

#[no_mangle]
pub unsafe extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> NcclResult {
    boundary(|out| {
        let Some(f) = real!(
            "ncclMemAlloc",
            unsafe extern "C" fn(*mut *mut c_void, usize) -> NcclResult
        ) else {
            *out = Some(missing(CallId::NcclMemAlloc));
            return;
        };
        let mut args = [0; SLOT_ARGS];
        args[1] = size as u64;
        let a = enter(CallId::NcclMemAlloc, std::ptr::null_mut(), args);
        let rc = forward(|| f(ptr, size));
        *out = Some(rc);
        a.finish(rc, std::ptr::null_mut(), |pc| {
            if rc == NCCL_SUCCESS && !ptr.is_null() {
                pc.set_arg(0, p(*ptr));
            }
        });
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclMemFree(ptr: *mut c_void) -> NcclResult {
    boundary(|out| {
        let Some(f) = real!(
            "ncclMemFree",
            unsafe extern "C" fn(*mut c_void) -> NcclResult
        ) else {
            *out = Some(missing(CallId::NcclMemFree));
            return;
        };
        let mut args = [0; SLOT_ARGS];
        args[0] = p(ptr);
        let a = enter(CallId::NcclMemFree, std::ptr::null_mut(), args);
        let rc = forward(|| f(ptr));
        *out = Some(rc);
        a.finish(rc, std::ptr::null_mut(), |_| {});
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommRegister(
    comm: NcclComm,
    buff: *mut c_void,
    size: usize,
    handle: *mut *mut c_void,
) -> NcclResult {
    boundary(|out| {
        type F = unsafe extern "C" fn(NcclComm, *mut c_void, usize, *mut *mut c_void) -> NcclResult;
        let Some(f) = real!("ncclCommRegister", F) else {
            *out = Some(missing(CallId::NcclCommRegister));
            return;
        };
        let mut args = [0; SLOT_ARGS];
        args[0] = p(buff);
        args[1] = size as u64;
        let a = enter(CallId::NcclCommRegister, comm, args);
        let rc = forward(|| f(comm, buff, size, handle));
        *out = Some(rc);
        a.finish(rc, comm, |pc| {
            if rc == NCCL_SUCCESS && !handle.is_null() {
                pc.set_arg(2, p(*handle));
            }
        });
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommDeregister(comm: NcclComm, handle: *mut c_void) -> NcclResult {
    boundary(|out| {
        let Some(f) = real!(
            "ncclCommDeregister",
            unsafe extern "C" fn(NcclComm, *mut c_void) -> NcclResult
        ) else {
            *out = Some(missing(CallId::NcclCommDeregister));
            return;
        };
        let mut args = [0; SLOT_ARGS];
        args[0] = p(handle);
        let a = enter(CallId::NcclCommDeregister, comm, args);
        let rc = forward(|| f(comm, handle));
        *out = Some(rc);
        a.finish(rc, comm, |_| {});
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommWindowRegister(
    comm: NcclComm,
    buff: *mut c_void,
    size: usize,
    win: *mut *mut c_void,
    win_flags: c_int,
) -> NcclResult {
    boundary(|out| {
        type F = unsafe extern "C" fn(
            NcclComm,
            *mut c_void,
            usize,
            *mut *mut c_void,
            c_int,
        ) -> NcclResult;
        let Some(f) = real!("ncclCommWindowRegister", F) else {
            *out = Some(missing(CallId::NcclCommWindowRegister));
            return;
        };
        let mut args = [0; SLOT_ARGS];
        args[0] = p(buff);
        args[1] = size as u64;
        args[3] = s(win_flags);
        let a = enter(CallId::NcclCommWindowRegister, comm, args);
        let rc = forward(|| f(comm, buff, size, win, win_flags));
        *out = Some(rc);
        a.finish(rc, comm, |pc| {
            if rc == NCCL_SUCCESS && !win.is_null() {
                pc.set_arg(2, p(*win));
            }
        });
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommWindowDeregister(comm: NcclComm, win: *mut c_void) -> NcclResult {
    boundary(|out| {
        let Some(f) = real!(
            "ncclCommWindowDeregister",
            unsafe extern "C" fn(NcclComm, *mut c_void) -> NcclResult
        ) else {
            *out = Some(missing(CallId::NcclCommWindowDeregister));
            return;
        };
        let mut args = [0; SLOT_ARGS];
        args[0] = p(win);
        let a = enter(CallId::NcclCommWindowDeregister, comm, args);
        let rc = forward(|| f(comm, win));
        *out = Some(rc);
        a.finish(rc, comm, |_| {});
    })
}
