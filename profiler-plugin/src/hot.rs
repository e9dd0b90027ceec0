//! The default mask's hot path: what an all-reduce's callbacks do under the default
//! `NCCLSHIM_PROFILE` (a Coll/P2p start record, its kernel channels joining its in-flight
//! entry, one GPU-done record), straight-line and written directly into the ring slot, without
//! `core`'s normalized [`Start`](crate::state::Start) or its panic guard.
//!
//! Why without the guard: `catch_unwind` outlines its closure, so everything the record path
//! needs went through the stack, and with the generic translation the default all-reduce cost
//! ~90 ns here against ~55 ns now (BENCHMARKS.md). Instead nothing here can panic, and release
//! builds prove it: the functions that run unguarded carry `no_panic`, which fails the link
//! when the compiler cannot show that no panic is reachable (the plugin links `-z defs`, so
//! this holds for the shared object too; debug builds skip the proof, which needs
//! optimization). A panic would otherwise unwind into NCCL through an `extern "C"` function,
//! which aborts the process.
//!
//! Every function answers `None` (or `false`) for anything out of the ordinary — a name seen
//! for the first time, a communicator that v1-v3 must still learn, a parent from another
//! process, a thread that has no ring yet, recording off, a mask that asks for per-channel
//! records — and has then changed nothing: the caller takes `core`'s general, guarded path,
//! which handles all of it and writes the same records.

use crate::abi::event;
use crate::agg::{self, InflightOp};
use crate::ctx;
use crate::handle::{raw, Handle};
use crate::mask::CHANNEL_RECORDS;
use crate::names;
use crate::state::{process_mask, summarizing_channels, PROF};
use crate::translate::{self, ty, Coll, Name, P2p};
use ncclshim_dump::layout::SLOT_ARGS;
use ncclshim_dump::profnames::{payload_bytes, NameTable};
use ncclshim_dump::schema::{slot_flags, PROF_STATE_GPU_DONE};
use ncclshim_dump::{CallId, Entry, RecordKind};
#[cfg(not(debug_assertions))]
use no_panic::no_panic;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

/// How the hot path reads one ABI version's descriptor; implemented on each version's
/// descriptor pointer.
pub trait HotDescr: Copy {
    /// A KernelCh's parent and GPU start time; `None` when this version's KernelCh carries no
    /// GPU time (v1-v3).
    ///
    /// # Safety
    /// `self` is NULL or NCCL's descriptor for this call, whose type says KernelCh.
    unsafe fn kernel_ch(self) -> Option<(*mut c_void, u64)>;

    /// A Coll (`ty` = its type bit) or P2p start, read and translated; `None` for other
    /// types, for a name not in the name cache yet, and for versions without GPU times.
    ///
    /// # Safety
    /// `self` is NULL or NCCL's descriptor for this call, whose type is `ty`.
    unsafe fn op(self, ty: u64) -> Option<OpStart>;
}

/// v1-v3: no GPU times, so no in-flight entries, so nothing for the hot path.
macro_rules! no_hot_path {
    ($descr:ty) => {
        impl $crate::hot::HotDescr for *mut $descr {
            #[inline(always)]
            unsafe fn kernel_ch(self) -> Option<(*mut c_void, u64)> {
                None
            }
            #[inline(always)]
            unsafe fn op(self, _: u64) -> Option<$crate::hot::OpStart> {
                None
            }
        }
    };
}

/// Coll/P2p starts and GPU-done records the hot path handed to the general path, so tests can
/// tell which path wrote a record. A plain load and store, not a locked add: under a mask the
/// hot path never serves, every Coll start comes here, and an exact count across threads is
/// not worth a locked instruction on each.
static GENERAL_PATH: AtomicU64 = AtomicU64::new(0);

#[cold]
pub fn note_general_path() {
    GENERAL_PATH.store(
        GENERAL_PATH.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

/// How many Coll/P2p starts and GPU-done records took the general path so far.
pub fn general_path_count() -> u64 {
    GENERAL_PATH.load(Ordering::Relaxed)
}

/// A Coll or P2p start as the hot path writes it.
pub struct OpStart {
    /// `ty::COLL` or `ty::P2P`.
    pub type_index: u8,
    /// NCCL's `parentObj` as an integer.
    pub parent: u64,
    /// Slot arguments, 0 and 1 (handle, parent) still to be filled.
    pub args: [u64; SLOT_ARGS],
    pub func: u8,
    pub bytes: u64,
    pub channels: u8,
}

/// The cached code of a name; `None` on a cache miss (or a v1 enum, which never comes here).
#[inline(always)]
fn cached(table: NameTable, name: Name) -> Option<u8> {
    match name {
        Name::Str(p) => names::cached(table, p),
        Name::Enum(_) => None,
    }
}

/// A Coll start, when its four names are cached.
#[inline(always)]
pub fn coll(parent: *mut c_void, c: &Coll) -> Option<OpStart> {
    let func = cached(NameTable::Func, c.func)?;
    let dt = cached(NameTable::Datatype, c.datatype)?;
    let algo = cached(NameTable::Algo, c.algo)?;
    let proto = cached(NameTable::Proto, c.proto)?;
    Some(OpStart {
        type_index: ty::COLL,
        parent: parent as u64,
        args: translate::coll_args(c, [func, dt, algo, proto]),
        func,
        bytes: payload_bytes(c.count, u64::from(dt)),
        channels: c.channels,
    })
}

/// A P2p start, when its two names are cached.
#[inline(always)]
pub fn p2p(parent: *mut c_void, p: &P2p) -> Option<OpStart> {
    let func = cached(NameTable::Func, p.func)?;
    let dt = cached(NameTable::Datatype, p.datatype)?;
    Some(OpStart {
        type_index: ty::P2P,
        parent: parent as u64,
        args: translate::p2p_args(p, [func, dt]),
        func,
        bytes: payload_bytes(p.count, u64::from(dt)),
        channels: p.channels,
    })
}

/// Whether operations get an in-flight entry and their channels are summarized: the process
/// mask asks for KernelCh and not for per-channel records (the default). False before init.
#[inline(always)]
pub fn summarizing_timed_ops() -> bool {
    process_mask() & (event::KERNEL_CH | CHANNEL_RECORDS) == event::KERNEL_CH
}

/// Event types whose handle, with an in-flight entry, gets no stop record when channels are
/// summarized: Coll, P2p (they end at their GPU-done record) and joined kernel channels.
const ENDS_WITHOUT_STOP: u32 = 1 << ty::COLL | 1 << ty::P2P | 1 << ty::KERNEL_CH;

/// A Coll/P2p start: its record (left open until its GPU-done record), the aggregates' count
/// and bytes, and an in-flight entry for its channels. Returns the handle for NCCL.
#[inline(always)]
#[cfg_attr(not(debug_assertions), no_panic)]
pub fn op_start(ctx: *mut c_void, op: &OpStart) -> Option<u64> {
    if !summarizing_timed_ops() {
        return None;
    }
    let parent_ref = match op.parent {
        0 => 0,
        p if raw::is_handle(p) && !raw::is_foreign(p) => raw::record_ref(p),
        // Not one of ours, or another process's: the general path decides.
        _ => return None,
    };
    let (ctx_index, c) = ctx::lookup(ctx)?;
    let comm = c.known_comm_id()?;
    let table = c.agg()?;
    let call = if op.type_index == ty::COLL {
        CallId::ProfColl
    } else {
        CallId::ProfP2p
    };
    let mut e = Entry::new(RecordKind::ProfStart, call);
    e.flags = slot_flags::COMPLETES_IN_PLACE | slot_flags::ENDS_AT_GPU_DONE;
    e.comm = comm;
    e.args = op.args;
    e.args[1] = parent_ref;
    // Before the record: see `agg::reserve`. An entry reserved for a record that is then not
    // written (no ring yet) only goes unused for a round.
    let inflight = agg::reserve();
    let (slot, t_start) = PROF.with_current_ring(|w| w.begin_ref(&e))?;
    let cell = agg::cell_index(op.func, op.bytes);
    table.add_op(cell, op.bytes);
    let h = Handle {
        slot,
        inflight: Some(inflight),
        type_index: op.type_index,
        foreign: false,
    };
    agg::fill(
        inflight,
        InflightOp {
            tag: h.record_ref(),
            op_type: op.type_index,
            ctx_index,
            cell,
            bytes: op.bytes,
            channels: op.channels,
            t_start,
        },
    );
    Some(h.encode())
}

/// A kernel channel of an operation that has an in-flight entry, when channels are summarized:
/// its GPU start joins the entry and no record is written (no clock read: the GPU time is the
/// channel's own). The handle names the *parent's* record and entry, so the channel's stop
/// can complete the operation. `None` when there is no entry to join (an entry reused by a
/// newer operation, a per-channel mask): the channel then gets a record of its own.
#[inline(always)]
#[cfg_attr(not(debug_assertions), no_panic)]
pub fn channel_join(parent: *mut c_void, gpu_start: u64) -> Option<u64> {
    let parent = parent as u64;
    if !summarizing_channels() || !raw::is_handle(parent) || raw::is_foreign(parent) {
        return None;
    }
    let i = raw::inflight(parent)?;
    agg::owned_by(i, raw::record_ref(parent))?.channel_start(gpu_start);
    Some(raw::with_type(parent, ty::KERNEL_CH))
}

/// Whether a handle's stop (and, for a channel, its states other than the GPU stop) writes
/// nothing: not one of our handles; or, when channels are summarized, a joined channel (its
/// state 22 says everything) or an operation that ends at its GPU-done record.
#[inline(always)]
#[cfg_attr(not(debug_assertions), no_panic)]
pub fn ends_without_stop(raw: u64) -> bool {
    if !raw::is_handle(raw) {
        return true;
    }
    raw::inflight(raw).is_some()
        && 1u32 << raw::type_index(raw) & ENDS_WITHOUT_STOP != 0
        && summarizing_channels()
}

/// A kernel channel that joined its operation's in-flight entry ([`channel_join`]).
#[inline(always)]
#[cfg_attr(not(debug_assertions), no_panic)]
pub fn is_joined_channel(raw: u64) -> bool {
    raw::is_handle(raw) && raw::type_index(raw) == ty::KERNEL_CH && ends_without_stop(raw)
}

/// A joined channel's state ([`is_joined_channel`]): on its
/// GPU stop (state 22) the channel's stop time joins the entry, and the last channel's writes
/// the operation's GPU-done record. `gpu_stop` reads NCCL's state args (only for state 22).
/// Returns the operation's GPU span when the GPU-done record is still to be written: this
/// thread has no ring yet, so the guarded general path must.
#[inline(always)]
#[cfg_attr(not(debug_assertions), no_panic)]
pub fn channel_state(
    raw: u64,
    state: u32,
    gpu_stop: impl FnOnce() -> u64,
) -> Option<(u64, u16, agg::GpuDone)> {
    if state != crate::abi::state::KERNEL_CH_STOP {
        return None;
    }
    let i = raw::inflight(raw)?;
    let op_ref = raw::record_ref(raw);
    let done = agg::owned_by(i, op_ref)?.channel_stop(gpu_stop())?;
    if gpu_done(op_ref, i, &done) {
        None
    } else {
        Some((op_ref, i, done))
    }
}

/// One operation in this many reads the clock for its GPU-done record (see
/// `slot_flags::TIME_OF_NAMED`); the others carry their operation's start time.
pub const GPU_DONE_CLOCK_EVERY: u16 = 64;

/// The last kernel channel of a summarized operation stopped: one `prof_state` GPU-done record
/// (on the calling thread's ring, naming the operation's start record) and the timed
/// aggregates. False, having done nothing, when this thread has no ring yet.
///
/// Most GPU-done records read no clock: a clock read costs as much as the rest of the channel
/// callbacks together on some machines, and the operation's GPU span is in the args already.
/// The sampled ones are real (time, GPU stop) pairs a reader aligns the GPU clock with.
#[inline(always)]
#[cfg_attr(not(debug_assertions), no_panic)]
pub fn gpu_done(op_ref: u64, inflight: u16, done: &agg::GpuDone) -> bool {
    let call = if done.op_type == ty::P2P {
        CallId::ProfP2p
    } else {
        CallId::ProfColl
    };
    let mut e = Entry::new(RecordKind::ProfState, call);
    e.args[..5].copy_from_slice(&[
        op_ref,
        PROF_STATE_GPU_DONE,
        done.gpu_start,
        done.gpu_stop,
        u64::from(done.channels),
    ]);
    let clocked = inflight.is_multiple_of(GPU_DONE_CLOCK_EVERY) || done.t_start == 0;
    if !clocked {
        e.flags = slot_flags::TIME_OF_NAMED;
    }
    let written = PROF.with_current_ring(|w| {
        if clocked {
            w.instant(&e)
        } else {
            w.instant_at(&e, done.t_start)
        }
    });
    if written.is_none() {
        return false;
    }
    add_timed(done);
    true
}

/// The operation's GPU span joins its communicator's timed aggregates.
#[inline(always)]
pub fn add_timed(done: &agg::GpuDone) {
    if let Some(t) = ctx::by_index(done.ctx_index).and_then(ctx::CommCtx::agg) {
        t.add_timed(done.cell, done.bytes, done.gpu_ns());
    }
}
