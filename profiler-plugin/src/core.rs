//! The version-independent plugin: every ABI module translates NCCL's descriptor into one
//! [`Start`] (or a state value) and calls in here. This is where records are written, handles
//! are made, contexts are resolved and aggregates are updated.
//!
//! The entry points try the default mask's unguarded [`hot`] path first (proven
//! panic-free at link time) and fall back to the general path here, which runs under a guard
//! that catches panics (recording is then disabled for the process, NCCL keeps running) and
//! keeps errno while the recorder may still be created. Neither allocates, locks or makes a
//! syscall once the calling thread has its ring: one clock read, one 128-byte slot, a few
//! relaxed atomics. Every entry point returns `ncclSuccess`; only `init` may return an error.

use crate::abi::{self, event, NCCL_SUCCESS};
use crate::agg;
use crate::ctx::{self, CommCtx};
use crate::handle::Handle;
use crate::hot::{self, HotDescr};
use crate::state::{self, wants};
pub use crate::state::{our_pid, process_mask, summarizing_channels, Op, Start, PROF};
use crate::translate::ty;
use ncclshim_dump::layout::counters;
use ncclshim_dump::schema::slot_flags;
use ncclshim_dump::{BlobKind, CallId, Entry, RecordKind, Recorder, RingWriter};
use ncclshim_format::aggregates::TableHeader;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

/// Runs `f` with errno preserved and panics caught; `None` after a panic.
///
/// Once the recorder exists, nothing on the record path can change errno: the clock is read
/// through the vDSO, and a thread's first ring claim makes only calls that cannot fail
/// (`gettid`, `prctl(PR_GET_NAME)` via `pthread_getname_np` on itself). So errno is saved and
/// restored only while the recorder may still be created (file, mmap: syscalls that can fail),
/// which keeps two libc calls off every hot callback.
#[inline]
fn guard<R>(f: impl FnOnce() -> R) -> Option<R> {
    if PROF.existing().is_none() {
        return guard_saving_errno(f);
    }
    finish(catch_unwind(AssertUnwindSafe(f)))
}

#[cold]
fn guard_saving_errno<R>(f: impl FnOnce() -> R) -> Option<R> {
    // SAFETY: __errno_location returns the calling thread's errno, valid for the thread's life.
    let errno_ptr = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let saved = unsafe { *errno_ptr };
    let out = catch_unwind(AssertUnwindSafe(f));
    // SAFETY: as above.
    unsafe { *errno_ptr = saved };
    finish(out)
}

#[inline]
fn finish<R>(out: std::thread::Result<R>) -> Option<R> {
    match out {
        Ok(v) => Some(v),
        Err(_) => {
            PROF.disable("internal panic in the NCCL profiler plugin");
            None
        }
    }
}

/// The recorder, waiting briefly if another thread is creating it right now (init runs on
/// several NCCL threads at once for grouped inits; a transient "busy" must not read as
/// "disabled").
fn recorder_for_init() -> Option<&'static Recorder> {
    for _ in 0..2000 {
        if let Some(r) = PROF.get() {
            return Some(r);
        }
        if PROF.is_disabled() {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_micros(500));
    }
    None
}

/// What `init` learned about the communicator (v1-v3 pass none of it).
#[derive(Debug, Clone, Copy)]
pub struct InitFacts {
    pub comm_id: u64,
    pub name: *const c_char,
    pub nnodes: c_int,
    pub nranks: c_int,
    pub rank: c_int,
}

impl InitFacts {
    /// v1-v3: init names nothing.
    pub const NONE: Self = Self {
        comm_id: 0,
        name: std::ptr::null(),
        nnodes: 0,
        nranks: 0,
        rank: -1,
    };
}

/// `init` for every version.
///
/// # Safety
/// `ctx_out` and `mask_out` are NULL or NCCL's valid out-pointers; `facts.name` is NULL or a
/// NUL-terminated string.
pub unsafe fn init(
    abi: u32,
    ctx_out: *mut *mut c_void,
    mask_out: *mut c_int,
    facts: InitFacts,
) -> c_int {
    // Init opens and maps files even after the recorder exists: always keep errno.
    let result = guard_saving_errno(|| {
        if !ctx_out.is_null() {
            // SAFETY: NCCL's out-pointer (contract).
            unsafe { *ctx_out = std::ptr::null_mut() };
        }
        let mask = state::ensure_mask() & event::supported(abi);
        state::note_our_pid();
        let Some(rec) = recorder_for_init() else {
            // Recording is off for this process: ask NCCL for nothing, succeed.
            write_mask(mask_out, 0);
            return NCCL_SUCCESS;
        };
        let Some((index, c)) = ctx::claim() else {
            rec.add_counter(counters::PROF_EVENTS_DROPPED, 1);
            write_mask(mask_out, mask as c_int);
            return NCCL_SUCCESS;
        };
        c.abi.store(abi, Ordering::Relaxed);
        c.comm_id.store(facts.comm_id, Ordering::Relaxed);
        c.rank
            .store(if abi >= 4 { facts.rank } else { -1 }, Ordering::Relaxed);
        c.nranks.store(facts.nranks, Ordering::Relaxed);
        c.nnodes.store(facts.nnodes, Ordering::Relaxed);
        let header = TableHeader {
            abi,
            comm_id: facts.comm_id,
            rank: c.rank.load(Ordering::Relaxed),
            nranks: facts.nranks,
            nnodes: facts.nnodes,
            ctx: index,
        };
        if let Some((table, off)) = agg::create(rec, &header) {
            c.agg.store(
                (table as *const agg::AggTable).cast_mut(),
                Ordering::Release,
            );
            c.agg_blob.store(off, Ordering::Relaxed);
        }
        let name_blob = if facts.name.is_null() {
            0
        } else {
            // SAFETY: NUL-terminated per contract.
            let bytes = unsafe { CStr::from_ptr(facts.name) }.to_bytes();
            if bytes.is_empty() {
                0
            } else {
                rec.append_blob(BlobKind::Name, bytes)
            }
        };
        c.state.store(ctx::LIVE, Ordering::Release);
        write_init_record(c, index, mask, name_blob);
        if !ctx_out.is_null() {
            // SAFETY: NCCL's out-pointer (contract).
            unsafe { *ctx_out = c.as_ptr() };
        }
        write_mask(mask_out, mask as c_int);
        NCCL_SUCCESS
    });
    // A panic during init: tell NCCL to go on without us for this communicator.
    result.unwrap_or(abi::NCCL_INTERNAL_ERROR)
}

fn write_mask(mask_out: *mut c_int, mask: c_int) {
    if !mask_out.is_null() {
        // SAFETY: NCCL's process-global activation mask; NCCL reads it with relaxed loads.
        unsafe { mask_out.write_volatile(mask) };
    }
}

fn write_init_record(c: &CommCtx, index: u32, mask: u32, name_blob: u64) {
    let comm = c.comm_id.load(Ordering::Relaxed);
    let mut e = Entry::new(RecordKind::CommInfo, CallId::ProfInit);
    e.comm = comm;
    e.blob = name_blob;
    e.args[..8].copy_from_slice(&[
        comm,
        c.nnodes.load(Ordering::Relaxed) as u32 as u64,
        c.nranks.load(Ordering::Relaxed) as u32 as u64,
        c.rank.load(Ordering::Relaxed) as u32 as u64,
        u64::from(c.abi.load(Ordering::Relaxed)),
        u64::from(mask),
        c.agg_blob.load(Ordering::Relaxed),
        u64::from(index),
    ]);
    PROF.with_ring(|_, w| w.instant(&e));
}

/// `finalize` for every version.
///
/// # Safety
/// None beyond NCCL's contract: `ctx` is looked up, never trusted.
pub unsafe extern "C" fn finalize(ctx: *mut c_void) -> c_int {
    guard(|| {
        let Some((index, c)) = ctx::lookup(ctx) else {
            return;
        };
        // The context stays valid: a shared proxy thread may still report ProxyCtrl events.
        c.state.store(ctx::FINALIZED, Ordering::Release);
        let comm = c.comm_id.load(Ordering::Relaxed);
        let mut e = Entry::new(RecordKind::Event, CallId::ProfFinalize);
        e.comm = comm;
        e.args[0] = comm;
        e.args[1] = c.agg().map_or(0, |t| t.total_count());
        e.args[2] = u64::from(index);
        PROF.with_ring(|_, w| w.instant(&e));
    });
    NCCL_SUCCESS
}

/// `startEvent` for every version: `ty` is the descriptor's `type` (0 for a NULL descriptor);
/// `build` reads the descriptor and returns false for an event the mask does not ask for
/// (NCCL then gets a NULL handle and skips its stop/state).
///
/// The default mask's events take the unguarded [`hot`] path first: the ancestors NCCL starts
/// whatever the mask says (answered NULL), kernel channels joining their operation, and
/// Coll/P2p starts. Everything else, and whatever the hot path declines, takes the guarded
/// general path.
///
/// # Safety
/// `ehandle` is NULL or NCCL's out-pointer; `descr` and `build` read only what NCCL passed.
#[inline(always)]
pub unsafe fn start_event<D: HotDescr>(
    ctx: *mut c_void,
    ehandle: *mut *mut c_void,
    ty: u64,
    descr: D,
    build: impl FnOnce(&mut Start) -> bool,
) -> c_int {
    if ehandle.is_null() {
        return NCCL_SUCCESS;
    }
    // SAFETY: forwarded contract (`ty` is `descr`'s type).
    match unsafe { hot_start(ty, descr) } {
        // SAFETY: NCCL's out-pointer (checked non-null above).
        HotStart::Answered(h) => unsafe { answer(ehandle, h) },
        // SAFETY: forwarded contract.
        HotStart::Op => unsafe { op_start_event(ctx, ehandle, ty, descr, build) },
        // SAFETY: forwarded contract.
        HotStart::Declined => unsafe { start_event_recorded(ctx, ehandle, build) },
    }
}

/// Hands NCCL the handle `h` (0: NULL, the event is not wanted).
///
/// # Safety
/// `ehandle` is NCCL's non-null out-pointer.
#[inline(always)]
unsafe fn answer(ehandle: *mut *mut c_void, h: u64) -> c_int {
    // SAFETY: per the contract.
    unsafe { *ehandle = h as *mut c_void };
    NCCL_SUCCESS
}

/// What the hot path made of a start: a handle for NCCL (0 for an event the mask does not
/// want), a Coll/P2p for [`op_start_event`], or nothing, for the general path to handle.
enum HotStart {
    Answered(u64),
    Op,
    Declined,
}

/// The early answers, which most of an all-reduce's starts get: inlined into the exported
/// function, and small, so that they run before any register is saved for the record paths.
///
/// # Safety
/// `descr` is NULL or NCCL's descriptor for this call, whose type is `ty`.
#[inline(always)]
#[cfg_attr(not(debug_assertions), no_panic::no_panic)]
unsafe fn hot_start<D: HotDescr>(ty: u64, descr: D) -> HotStart {
    // NCCL starts the ancestors of every wanted event whether or not the mask names them
    // (GroupApi, CollApi, KernelLaunch under the default mask).
    if wanted_type(ty).is_none() {
        return HotStart::Answered(0);
    }
    match ty as u32 {
        // SAFETY: forwarded contract; the reader reads the KernelCh member.
        event::KERNEL_CH => unsafe { descr.kernel_ch() }
            .and_then(|(parent, gpu_start)| hot::channel_join(parent, gpu_start))
            .map_or(HotStart::Declined, HotStart::Answered),
        event::COLL | event::P2P if hot::summarizing_timed_ops() => HotStart::Op,
        _ => HotStart::Declined,
    }
}

/// The hot path's Coll/P2p start, descriptor reading included (it runs unguarded too).
///
/// # Safety
/// `descr` is NULL or NCCL's descriptor for this call, whose type is `ty`.
#[inline(always)]
#[cfg_attr(not(debug_assertions), no_panic::no_panic)]
unsafe fn hot_op_start<D: HotDescr>(ctx: *mut c_void, ty: u64, descr: D) -> Option<u64> {
    // SAFETY: forwarded contract; the reader reads the member `ty` selects.
    unsafe { descr.op(ty) }.and_then(|op| hot::op_start(ctx, &op))
}

/// A Coll/P2p start: the hot path's record when it can, else the general path's.
///
/// # Safety
/// As [`start_event`].
#[inline(never)]
unsafe fn op_start_event<D: HotDescr>(
    ctx: *mut c_void,
    ehandle: *mut *mut c_void,
    ty: u64,
    descr: D,
    build: impl FnOnce(&mut Start) -> bool,
) -> c_int {
    // SAFETY: forwarded contract.
    match unsafe { hot_op_start(ctx, ty, descr) } {
        // SAFETY: NCCL's out-pointer (checked non-null by the caller).
        Some(h) => unsafe { answer(ehandle, h) },
        None => {
            hot::note_general_path();
            // SAFETY: forwarded contract.
            unsafe { start_event_recorded(ctx, ehandle, build) }
        }
    }
}

/// The general path of `start_event`, out of line so the hot answers above stay a few
/// instructions (no register saves for the record path).
#[inline(never)]
unsafe fn start_event_recorded(
    ctx: *mut c_void,
    ehandle: *mut *mut c_void,
    build: impl FnOnce(&mut Start) -> bool,
) -> c_int {
    let h = guard(|| {
        let mut ev = Start::EMPTY;
        if build(&mut ev) {
            start(ctx, &ev)
        } else {
            None
        }
    })
    .flatten();
    // SAFETY: NCCL's out-pointer (checked non-null above).
    unsafe { *ehandle = h.map_or(std::ptr::null_mut(), |v| v as *mut c_void) };
    NCCL_SUCCESS
}

/// The GPU-done record of an operation whose hot path found no ring on this thread (its first
/// record): claims the ring under the guard, then writes the same record.
#[cold]
fn gpu_done_claiming_ring(op_ref: u64, inflight: u16, done: agg::GpuDone) {
    hot::note_general_path();
    guard(|| {
        PROF.with_ring(|_, _| ());
        hot::gpu_done(op_ref, inflight, &done);
    });
}

#[inline]
fn start(ctx_ptr: *mut c_void, ev: &Start) -> Option<u64> {
    let call = prof_call(ev.type_index)?;
    let parent = Handle::decode(ev.parent);
    let foreign = ev.foreign_pid.is_some() || parent.is_some_and(|p| p.foreign);
    let found = if foreign { None } else { ctx::lookup(ctx_ptr) };
    let mut comm = ev.comm_hint;
    if let Some((index, c)) = found {
        if let Some(known) = c.known_comm_id() {
            comm = known;
        } else if c.learn(ev.comm_hint, ev.rank) {
            let mask = process_mask() & event::supported(c.abi.load(Ordering::Relaxed));
            write_init_record(c, index, mask, 0);
        }
    }
    // An operation whose kernel channels will report its GPU span gets an in-flight entry.
    let agg_table = found.and_then(|(_, c)| c.agg());
    let tracked =
        agg_table.is_some() && ev.op.is_some_and(|op| op.timed) && wants(event::KERNEL_CH);
    let mut e = Entry::new(RecordKind::ProfStart, call);
    e.flags = slot_flags::COMPLETES_IN_PLACE;
    if tracked && summarizing_channels() {
        e.flags |= slot_flags::ENDS_AT_GPU_DONE;
    }
    e.comm = comm;
    e.args = ev.args;
    e.args[0] = 0;
    e.args[1] = parent.map_or(0, Handle::record_ref);
    if foreign {
        e.flags |= slot_flags::FOREIGN;
        // A foreign parent is the originating process's handle: keep it for a cross-dump join.
        e.args[1] = crate::handle::parent_ref(ev.parent);
    }
    // A KernelCh joins its parent's in-flight entry (GPU time across channels).
    let mut inflight = None;
    if let (Some(t), Some(p)) = (ev.gpu_start, parent) {
        if let Some(i) = p.inflight {
            if let Some(entry) = agg::owned_by(i, p.record_ref()) {
                entry.channel_start(t);
                inflight = Some(i);
            }
        }
    }
    // In flight until its stop completes it in place (or a `ProfStop` record names it), or,
    // `ENDS_AT_GPU_DONE`, until its GPU-done record.
    let (slot, t_start) = PROF.with_ring(|rec, w| {
        if let Some((field, text)) = ev.unknown {
            e.blob = unknown_name_blob(rec, field, text);
        }
        let p = w.begin(&e);
        (p.slot_ref(), p.t_enter())
    })?;
    let mut h = Handle {
        slot,
        inflight,
        type_index: ev.type_index,
        foreign,
    };
    if let (Some(op), Some((index, _)), Some(t)) = (ev.op, found, agg_table) {
        let cell = agg::cell_index(op.func, op.bytes);
        t.add_op(cell, op.bytes);
        if tracked {
            h.inflight = Some(agg::claim(agg::InflightOp {
                tag: h.record_ref(),
                op_type: ev.type_index,
                ctx_index: index,
                cell,
                bytes: op.bytes,
                channels: op.channels,
                t_start,
            }));
        }
    }
    Some(h.encode())
}

/// `stopEvent` for every version.
///
/// # Safety
/// None: the handle is decoded as an integer, never dereferenced.
pub unsafe extern "C" fn stop_event(ehandle: *mut c_void) -> c_int {
    // Summarized channels: a channel's stop says nothing its state 22 did not, and an
    // operation's record stays open until its GPU-done record (`ENDS_AT_GPU_DONE`).
    let raw = ehandle as u64;
    if hot::ends_without_stop(raw) {
        return NCCL_SUCCESS;
    }
    match Handle::decode(raw) {
        Some(h) => stop_recorded(h),
        None => NCCL_SUCCESS,
    }
}

#[inline(never)]
fn stop_recorded(h: Handle) -> c_int {
    guard(|| {
        PROF.with_ring(|_, w| match w.reopen(h.slot) {
            // Stopped on the thread that started it: the start record gets its exit time.
            Some(p) => p.complete(0),
            None => stop_record(w, h),
        });
    });
    NCCL_SUCCESS
}

/// The stop of an event whose start record this thread cannot complete (another thread's
/// ring, the shared overflow ring, or overwritten): a separate `ProfStop` record names it.
#[cold]
fn stop_record(w: &RingWriter, h: Handle) {
    let Some(call) = prof_call(h.type_index) else {
        return;
    };
    let mut e = Entry::new(RecordKind::ProfStop, call);
    e.args[0] = h.record_ref();
    if h.foreign {
        e.flags |= slot_flags::FOREIGN;
    }
    w.instant(&e);
}

/// The text of a string argument no code table knows (first sighting only): `field=text`.
#[cold]
fn unknown_name_blob(rec: &Recorder, field: &str, text: &[u8]) -> u64 {
    let mut b = Vec::with_capacity(field.len() + 1 + text.len());
    b.extend_from_slice(field.as_bytes());
    b.push(b'=');
    b.extend_from_slice(text);
    rec.append_blob(BlobKind::Name, &b)
}

/// `recordEventState` for every version, once the ABI module has read the args.
#[inline]
pub fn record_state(ehandle: *mut c_void, state: u32, value: impl FnOnce() -> (u64, u64)) -> c_int {
    let raw = ehandle as u64;
    // A summarized channel: only its GPU stop matters, and it writes at most the GPU-done record.
    if hot::is_joined_channel(raw) {
        if let Some((op_ref, i, done)) = hot::channel_state(raw, state, || value().0) {
            gpu_done_claiming_ring(op_ref, i, done);
        }
        return NCCL_SUCCESS;
    }
    match Handle::decode(raw) {
        Some(h) => record_state_recorded(h, state, value),
        None => NCCL_SUCCESS,
    }
}

#[inline(never)]
fn record_state_recorded(h: Handle, state: u32, value: impl FnOnce() -> (u64, u64)) -> c_int {
    guard(|| {
        let (v, v2) = value();
        // A kernel stop time goes into the start record itself when this thread can reach
        // it (NCCL calls stopEvent right after, which then completes the record).
        let in_place = match (state, h.type_index) {
            (abi::state::KERNEL_CH_STOP, ty::KERNEL_CH) => Some(KERNEL_CH_GPU_STOP),
            (abi::state::KERNEL_PHASE_STOP, ty::KERNEL_PHASE) => Some(KERNEL_PHASE_GPU_STOP),
            _ => None,
        };
        PROF.with_ring(
            |_, w| match in_place.and_then(|arg| Some((arg, w.reopen(h.slot)?))) {
                Some((arg, p)) => p.set_arg(arg, v),
                None => state_record(w, h, state, v, v2),
            },
        );
        if state == abi::state::KERNEL_CH_STOP {
            // Per-channel records: the channel's own record holds its GPU times, so only the
            // aggregates learn about the operation's end.
            if let Some(done) = h
                .inflight
                .and_then(agg::entry)
                .and_then(|x| x.channel_stop(v))
            {
                hot::add_timed(&done);
            }
        }
    });
    NCCL_SUCCESS
}

/// Argument index of `gpu_stop_ns` in a KernelCh / KernelPhase start record (schema.rs).
const KERNEL_CH_GPU_STOP: usize = 4;
const KERNEL_PHASE_GPU_STOP: usize = 5;

/// A state as its own `ProfState` record: every state but a kernel stop, and a kernel stop
/// whose start record this thread cannot reach.
fn state_record(w: &RingWriter, h: Handle, state: u32, v: u64, v2: u64) {
    let Some(call) = prof_call(h.type_index) else {
        return;
    };
    let mut e = Entry::new(RecordKind::ProfState, call);
    e.args[..4].copy_from_slice(&[h.record_ref(), u64::from(state), v, v2]);
    if h.foreign {
        e.flags |= slot_flags::FOREIGN;
    }
    w.instant(&e);
}

/// `recordEventState` for v4-v7 (8-byte state args).
///
/// # Safety
/// `args` is NULL or NCCL's state args for this call.
pub unsafe extern "C" fn record_state_v4(
    ehandle: *mut c_void,
    state: c_int,
    args: *mut abi::StateArgsV4,
) -> c_int {
    let state = state as u32;
    // SAFETY: forwarded contract.
    record_state(ehandle, state, || {
        (unsafe { abi::state_value_v4(state, args) }, 0)
    })
}

/// `recordEventState` for v1-v3 (16-byte state args).
///
/// # Safety
/// `args` is NULL or NCCL's state args for this call.
pub unsafe extern "C" fn record_state_v1(
    ehandle: *mut c_void,
    state: c_int,
    args: *mut abi::StateArgsV1,
) -> c_int {
    let state = state as u32;
    // SAFETY: forwarded contract.
    record_state(ehandle, state, || unsafe {
        abi::state_value_v1(state, args)
    })
}

/// The call id of an event type bit index, without `CallId::from_u16`'s big match.
#[inline]
fn prof_call(type_index: u8) -> Option<CallId> {
    const CALLS: [CallId; 16] = [
        CallId::ProfGroup,
        CallId::ProfColl,
        CallId::ProfP2p,
        CallId::ProfProxyOp,
        CallId::ProfProxyStep,
        CallId::ProfProxyCtrl,
        CallId::ProfKernelCh,
        CallId::ProfNetPlugin,
        CallId::ProfGroupApi,
        CallId::ProfCollApi,
        CallId::ProfP2pApi,
        CallId::ProfKernelLaunch,
        CallId::ProfCeColl,
        CallId::ProfCeSync,
        CallId::ProfCeBatch,
        CallId::ProfKernelPhase,
    ];
    CALLS.get(usize::from(type_index)).copied()
}

/// The bit index of a descriptor's `type`, when it is exactly one known bit the mask wants.
#[inline(always)]
pub fn wanted_type(ty: u64) -> Option<u8> {
    (ty <= 0xffff && wants(ty as u32) && ty.is_power_of_two()).then_some(ty.trailing_zeros() as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_caught_and_turns_recording_off() {
        assert_eq!(guard_saving_errno(|| 7), Some(7));
        let r: Option<()> = guard(|| panic!("deliberate test panic"));
        assert!(r.is_none());
        assert!(PROF.is_disabled());
    }

    #[test]
    fn prof_call_table_matches_the_schema() {
        for i in 0..16u8 {
            assert_eq!(prof_call(i), CallId::from_profiler_bit_index(u32::from(i)));
        }
        assert_eq!(prof_call(16), None);
    }
}
