//! Groups, collectives and point-to-point exports. See `super` for what every export does.

#![allow(clippy::missing_safety_doc)] // C callers: the contract is NCCL's own (nccl.h).

use super::shape::{p, s};
use crate::nccl::call::{self, boundary, enter, forward, missing};
use crate::nccl::coll_config;
use crate::nccl::comms;
use crate::nccl::ffi::*;
use crate::nccl::resolve::real;
use crate::runtime::recorder::record;
use ncclshim_dump::schema::{args, ArgView};
use ncclshim_dump::{arg_index, CallId, CommEntryWriter, Entry, RecordKind};
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

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
        let real = real!("ncclGroupEnd", unsafe extern "C" fn() -> NcclResult);
        group_end(CallId::NcclGroupEnd, real, |f| f(), out);
    })
}

/// `ncclGroupSimulateEnd(ncclSimInfo_t*)` (NCCL 2.29+): ends the group as `ncclGroupEnd` does,
/// estimating instead of launching.
#[no_mangle]
pub unsafe extern "C" fn ncclGroupSimulateEnd(sim_info: *mut c_void) -> NcclResult {
    boundary(|out| {
        type F = unsafe extern "C" fn(*mut c_void) -> NcclResult;
        let real = real!("ncclGroupSimulateEnd", F);
        group_end(CallId::NcclGroupSimulateEnd, real, |f| f(sim_info), out);
    })
}

/// Records a call that closes a group around `fwd`.
#[inline(always)]
fn group_end<F>(
    call: CallId,
    real: Option<F>,
    fwd: impl FnOnce(F) -> NcclResult,
    out: &mut Option<NcclResult>,
) {
    let Some(f) = real else {
        *out = Some(missing(call));
        return;
    };
    let nested = call::nested();
    let depth = call::group_depth();
    let args = args::Group {
        depth: u64::from(depth),
    }
    .to_args();
    let a = enter(call, null_mut(), args);
    // The group is closed from the caller's view whatever the call returns (NCCL resets it).
    if !nested {
        call::set_group_depth(depth.saturating_sub(1));
    }
    let rc = forward(|| fwd(f));
    *out = Some(rc);
    a.finish(rc, null_mut(), |_| {});
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
    config: *const c_void,
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
    // A per-collective configuration (2.31): its record goes just before the call's own, with
    // the same comm and seq (NCCL reads the struct before anything else; so do we).
    if !config.is_null() {
        coll_config(comm, config, seq);
    }
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

/// Writes the `collConfig` record of a configured collective into the calling thread's ring
/// (the collective's own record follows it there). Off the plain collectives' path.
#[cold]
unsafe fn coll_config(comm: NcclComm, config: *const c_void, seq: u64) {
    let flags = call::context_flags();
    record(|_, w| {
        // SAFETY: NCCL reads the same struct within its declared size; so do we.
        let Some(c) = (unsafe { coll_config::read(config, seq) }) else {
            return;
        };
        let mut e = Entry::new(RecordKind::Event, CallId::CollConfig);
        e.comm = comm as u64;
        e.flags = flags;
        e.args = c.to_args();
        w.instant(&e);
    });
}

/// Defines a collective or p2p export: its C signature (`args`), forwarded as it is, and which
/// of those arguments fill the operation record's fields (`config`: the trailing
/// `ncclCollConfig_t*` of the 2.31 calls).
macro_rules! op_export {
    ($fn_name:ident, $name:literal, $call:expr,
     ($($arg:ident : $ty:ty),*),
     count = $count:expr, dt = $dt:expr, op = $op:expr, root = $root:expr,
     send = $send:expr, recv = $recv:expr, comm = $comm:ident, stream = $stream:ident) => {
        op_export!($fn_name, $name, $call, ($($arg : $ty),*),
            count = $count, dt = $dt, op = $op, root = $root, send = $send, recv = $recv,
            comm = $comm, stream = $stream, config = std::ptr::null());
    };
    ($fn_name:ident, $name:literal, $call:expr,
     ($($arg:ident : $ty:ty),*),
     count = $count:expr, dt = $dt:expr, op = $op:expr, root = $root:expr,
     send = $send:expr, recv = $recv:expr, comm = $comm:ident, stream = $stream:ident,
     config = $config:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $fn_name($($arg: $ty),*) -> NcclResult {
            boundary(|out| {
                type F = unsafe extern "C" fn($($ty),*) -> NcclResult;
                let real = real!($name, F);
                let fwd = |f: F| f($($arg),*);
                operation(real, $call, $comm, $count, $dt, $op, $root, $send, $recv, $stream,
                    $config, fwd, out);
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

// ------------------------------------- collectives with a per-call configuration (NCCL 2.31)

// `nccl<Collective>Config` (nccl.h v2.32.3): the collective with a trailing
// `const ncclCollConfig_t*` (channels, algorithm selection, a profiler tag). Recorded as the
// collective it is, under that collective's id: NCCL counts it in the same sequence, and so do
// the diagnosis's per-function positions. A non-NULL config is also recorded, as a `collConfig`
// event just before the call (`coll_config`: its tuning fields and the profiler tag).
op_export!(ncclAllReduceConfig, "ncclAllReduceConfig", CallId::NcclAllReduce,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, op: c_int, comm: NcclComm, stream: Stream, config: *const c_void),
    count = count, dt = datatype, op = op, root = -1, send = sendbuff, recv = recvbuff, comm = comm, stream = stream, config = config);
op_export!(ncclBroadcastConfig, "ncclBroadcastConfig", CallId::NcclBroadcast,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream, config: *const c_void),
    count = count, dt = datatype, op = -1, root = root, send = sendbuff, recv = recvbuff, comm = comm, stream = stream, config = config);
op_export!(ncclReduceConfig, "ncclReduceConfig", CallId::NcclReduce,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, op: c_int, root: c_int, comm: NcclComm, stream: Stream, config: *const c_void),
    count = count, dt = datatype, op = op, root = root, send = sendbuff, recv = recvbuff, comm = comm, stream = stream, config = config);
op_export!(ncclAllGatherConfig, "ncclAllGatherConfig", CallId::NcclAllGather,
    (sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: c_int, comm: NcclComm, stream: Stream, config: *const c_void),
    count = sendcount, dt = datatype, op = -1, root = -1, send = sendbuff, recv = recvbuff, comm = comm, stream = stream, config = config);
op_export!(ncclReduceScatterConfig, "ncclReduceScatterConfig", CallId::NcclReduceScatter,
    (sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: c_int, op: c_int, comm: NcclComm, stream: Stream, config: *const c_void),
    count = recvcount, dt = datatype, op = op, root = -1, send = sendbuff, recv = recvbuff, comm = comm, stream = stream, config = config);
op_export!(ncclAlltoAllConfig, "ncclAlltoAllConfig", CallId::NcclAlltoAll,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, comm: NcclComm, stream: Stream, config: *const c_void),
    count = count, dt = datatype, op = -1, root = -1, send = sendbuff, recv = recvbuff, comm = comm, stream = stream, config = config);
op_export!(ncclGatherConfig, "ncclGatherConfig", CallId::NcclGather,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream, config: *const c_void),
    count = count, dt = datatype, op = -1, root = root, send = sendbuff, recv = recvbuff, comm = comm, stream = stream, config = config);
op_export!(ncclScatterConfig, "ncclScatterConfig", CallId::NcclScatter,
    (sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: NcclComm, stream: Stream, config: *const c_void),
    count = count, dt = datatype, op = -1, root = root, send = sendbuff, recv = recvbuff, comm = comm, stream = stream, config = config);
