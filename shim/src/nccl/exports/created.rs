//! The communicator-created record and the facts it needs (device, count, rank, NCCL version),
//! shared by the init family (a communicator came up) and `ncclCommGetAsyncError` (a
//! non-blocking init finished).

use crate::nccl::call::{self, forward};
use crate::nccl::comms;
use crate::nccl::config;
use crate::nccl::ffi::*;
use crate::nccl::hash::{get_hash, uid_words};
use crate::nccl::resolve::real;
use crate::nccl::snapshot;
use crate::runtime::recorder::{record_keep, record_keep_heavy, SHIM};
use ncclshim_dump::schema::{args, ArgView};
use ncclshim_dump::{BlobKind, CallId, CommEntryWriter, Entry, RecordKind};
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicI32, Ordering};

use super::shape::s;

thread_local! {
    /// uid hash of the last successful ncclGetUniqueId on this thread (InitAll makes one inside).
    pub(super) static LAST_UID: Cell<u64> = const { Cell::new(0) };
}

/// Version of the NCCL the wrappers forward to (0 until known).
pub(super) static NCCL_VERSION: AtomicI32 = AtomicI32::new(0);

pub(super) fn nccl_version() -> i32 {
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
pub(super) unsafe fn cuda_dev(comm: NcclComm) -> i64 {
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
pub(super) unsafe fn count_and_rank(comm: NcclComm) -> (c_int, c_int) {
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
pub(super) fn snapshot_at_init() {
    record_keep_heavy(|r, w| snapshot::take(r, w, snapshot::Reason::CommInit, false));
}

/// Stores the ncclConfig_t as an `event` record of `call` ahead of the call itself (the call's
/// own blob slot is reserved for NCCL's error text).
pub(super) unsafe fn record_config(call: CallId, comm: NcclComm, cfg: *const c_void) {
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
pub(super) unsafe fn comm_created(
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

pub(super) unsafe fn write_comm_created(comm: NcclComm, e: &comms::CommEntry) {
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
pub(super) unsafe fn out_comm(newcomm: *mut NcclComm, rc: NcclResult) -> NcclComm {
    if newcomm.is_null() || (rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS) {
        null_mut()
    } else {
        *newcomm
    }
}

pub(super) fn uid_args(id: &NcclUniqueId) -> (u64, [u64; 5]) {
    (get_hash(&id.internal), uid_words(&id.internal))
}
