//! The version-independent plugin: every ABI module translates NCCL's descriptor into one
//! [`Start`] (or a state value) and calls in here. This is where records are written, handles
//! are made, contexts are resolved and aggregates are updated.
//!
//! Hot path (start/stop/state): no allocation, no lock, no syscall once the calling thread has
//! its ring: one clock read, one 128-byte slot, a few relaxed atomics. Every entry point saves
//! and restores errno, catches panics (recording is then disabled for the process, NCCL keeps
//! running) and returns `ncclSuccess`; only `init` may return an error.

use crate::abi::{self, event, NCCL_SUCCESS};
use crate::agg;
use crate::ctx::{self, CommCtx};
use crate::handle::Handle;
use crate::mask;
use crate::translate::ty;
use ncclshim_dump::layout::{counters, SLOT_ARGS};
use ncclshim_dump::process::ProcessRecorder;
use ncclshim_dump::schema::{slot_flags, PROF_STATE_GPU_DONE};
use ncclshim_dump::{BlobKind, CallId, Entry, RecordKind, Recorder, RingWriter, WriterKind};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};

/// The plugin's dump (`*.prof.ncclshim`). TLS slot 1, so the shim's recorder (slot 0) and this
/// one can share a library if the two are ever linked together (STATIC_PLUGIN).
pub static PROF: ProcessRecorder = ProcessRecorder::new(WriterKind::Profiler, 1, None);

const MASK_UNSET: u32 = u32::MAX;
/// The process's activation mask (read from the environment at the first init).
static MASK: AtomicU32 = AtomicU32::new(MASK_UNSET);
/// Our pid, to recognise ProxyOps from another process's proxy (PXN). Set at every init.
static PID: AtomicU32 = AtomicU32::new(0);

/// What a Coll/P2p contributes to the aggregates.
#[derive(Debug, Clone, Copy)]
pub struct Op {
    pub func: u8,
    pub bytes: u64,
    pub channels: u8,
    /// The ABI delivers KernelCh GPU times (v4+), so an in-flight entry is worth keeping.
    pub timed: bool,
}

/// One started event, normalized across ABI versions.
#[derive(Debug, Clone, Copy)]
pub struct Start {
    /// Event type bit index (0 = Group ... 15 = KernelPhase).
    pub type_index: u8,
    /// NCCL's `parentObj`, as an integer (one of our handles, or NULL).
    pub parent: u64,
    /// Slot arguments; `args[0]` (handle) and `args[1]` (parent) are filled in here.
    pub args: [u64; SLOT_ARGS],
    /// v1-v3 Coll/P2p name their communicator in the descriptor.
    pub comm_hint: u64,
    pub rank: i32,
    pub op: Option<Op>,
    /// KernelCh (v4+) / KernelPhase: GPU start time.
    pub gpu_start: Option<u64>,
    /// A ProxyOp whose pid is not ours (PXN): its context and parent belong to another process.
    pub foreign_pid: Option<u32>,
    /// A string argument no code table knows, seen for the first time: (field, text).
    pub unknown: Option<(&'static str, &'static [u8])>,
}

impl Start {
    pub const EMPTY: Self = Self {
        type_index: 0,
        parent: 0,
        args: [0; SLOT_ARGS],
        comm_hint: 0,
        rank: 0,
        op: None,
        gpu_start: None,
        foreign_pid: None,
        unknown: None,
    };

    /// Starts filling a fresh (`EMPTY`) value for an event of type `type_index`.
    #[inline]
    pub fn reset(&mut self, type_index: u8, parent: *mut c_void, rank: c_int) {
        self.type_index = type_index;
        self.parent = parent as u64;
        self.rank = rank;
    }
}

/// Whether the process mask asks for event type bit `bit`.
#[inline]
pub fn wants(bit: u32) -> bool {
    let m = MASK.load(Ordering::Relaxed);
    m != MASK_UNSET && m & bit != 0
}

/// The process mask (after the first init).
pub fn process_mask() -> u32 {
    match MASK.load(Ordering::Relaxed) {
        MASK_UNSET => 0,
        m => m,
    }
}

pub fn our_pid() -> u32 {
    PID.load(Ordering::Relaxed)
}

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

fn say(msg: &str) {
    // SAFETY: writing a valid buffer to fd 2; a short write is acceptable.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

fn ensure_mask() -> u32 {
    let m = MASK.load(Ordering::Acquire);
    if m != MASK_UNSET {
        return m;
    }
    let (mask, unknown) = mask::from_env();
    if MASK
        .compare_exchange(MASK_UNSET, mask, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
        && !unknown.is_empty()
    {
        say(&format!(
            "ncclshim: NCCLSHIM_PROFILE: ignoring unknown event name(s) {}; profiling {}\n",
            unknown.join(","),
            mask::describe(mask)
        ));
    }
    MASK.load(Ordering::Acquire)
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
        let mask = ensure_mask() & event::supported(abi);
        // SAFETY: getpid has no preconditions.
        PID.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
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
        if let Some((table, off)) = agg::create(rec, c, index) {
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
/// # Safety
/// `ehandle` is NULL or NCCL's out-pointer; `build` reads only what NCCL passed.
#[inline]
pub unsafe fn start_event(
    ctx: *mut c_void,
    ehandle: *mut *mut c_void,
    ty: u64,
    kernel_ch: impl FnOnce() -> Option<(*mut c_void, u64)>,
    build: impl FnOnce(&mut Start) -> bool,
) -> c_int {
    if ehandle.is_null() {
        return NCCL_SUCCESS;
    }
    // NCCL starts the ancestors of every wanted event whether or not the mask names them
    // (GroupApi, CollApi, KernelLaunch under the default mask): answer those before anything
    // else. An integer compare and a relaxed load cannot panic, so no guard is needed.
    if wanted_type(ty).is_none() {
        // SAFETY: NCCL's out-pointer (checked non-null above).
        unsafe { *ehandle = std::ptr::null_mut() };
        return NCCL_SUCCESS;
    }
    // A kernel channel whose operation is in flight (channels summarized, the default) only
    // joins that operation's entry: read its parent and GPU start, and nothing else. Reading
    // NCCL's descriptor, integer decoding and relaxed atomics cannot panic: no guard needed.
    if ty == u64::from(event::KERNEL_CH) && summarizing_channels() {
        if let Some(h) =
            kernel_ch().and_then(|(parent, gpu_start)| join_parent_channels(parent, gpu_start))
        {
            // SAFETY: NCCL's out-pointer (checked non-null above).
            unsafe { *ehandle = h as *mut c_void };
            return NCCL_SUCCESS;
        }
    }
    start_event_recorded(ctx, ehandle, build)
}

/// The part of `start_event` that writes a record, out of line so the early answers above stay
/// a few instructions (no register saves for the record path).
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

/// The KernelCh reader of ABI versions whose KernelCh carries no GPU time (v1-v3): no fast path.
pub fn no_kernel_ch_timer<D>(_: *mut D) -> Option<(*mut c_void, u64)> {
    None
}

/// Whether kernel channels are folded into one GPU-done record per operation (the default)
/// rather than recorded one by one (`NCCLSHIM_PROFILE=...,channels`).
#[inline]
fn summarizing_channels() -> bool {
    !wants(mask::CHANNEL_RECORDS)
}

/// A kernel channel of an operation that has an in-flight entry, when channels are summarized:
/// its GPU start joins the entry and no record is written (no clock read: the GPU time is the
/// channel's own). The handle names the *parent's* record and entry, so the channel's stop can
/// complete the operation. `None` when there is no entry to join (v3 has no GPU times; an
/// entry reused by a newer operation): the channel then gets a record of its own.
#[inline]
fn join_parent_channels(parent: *mut c_void, gpu_start: u64) -> Option<u64> {
    let parent = Handle::decode(parent as u64)?;
    let i = parent.inflight?;
    agg::owned_by(i, parent.record_ref())?.channel_start(gpu_start);
    Some(
        Handle {
            slot: parent.slot,
            inflight: Some(i),
            type_index: ty::KERNEL_CH,
            foreign: false,
        }
        .encode(),
    )
}

/// A handle made by [`join_parent_channels`]: a KernelCh that names its parent's record.
#[inline]
fn is_joined_channel(h: &Handle) -> bool {
    h.type_index == ty::KERNEL_CH && h.inflight.is_some() && summarizing_channels()
}

/// A Coll/P2p whose record ends at its GPU-done record (`slot_flags::ENDS_AT_GPU_DONE`): every
/// operation with an in-flight entry, when channels are summarized.
#[inline]
fn ends_at_gpu_done(h: &Handle) -> bool {
    matches!(h.type_index, ty::COLL | ty::P2P) && h.inflight.is_some() && summarizing_channels()
}

/// One operation in this many reads the clock for its GPU-done record (see
/// `slot_flags::TIME_OF_NAMED`); the others carry their operation's start time.
const GPU_DONE_CLOCK_EVERY: u16 = 64;

/// The last kernel channel of a summarized operation stopped: one `prof_state` GPU-done record
/// (on the calling thread's ring, naming the operation's start record) and the timed aggregates.
///
/// Most GPU-done records read no clock: a clock read costs as much as the rest of an
/// all-reduce's callbacks together on some machines, and the operation's GPU span is in its
/// args already. The sampled ones are real (time, GPU stop) pairs a reader can align the
/// GPU clock with.
fn gpu_done(op_ref: u64, inflight: u16, done: agg::GpuDone) {
    if let Some(call) = prof_call(done.op_type) {
        let mut e = Entry::new(RecordKind::ProfState, call);
        e.args[..5].copy_from_slice(&[
            op_ref,
            PROF_STATE_GPU_DONE,
            done.gpu_start,
            done.gpu_stop,
            u64::from(done.channels),
        ]);
        if inflight.is_multiple_of(GPU_DONE_CLOCK_EVERY) || done.t_start == 0 {
            PROF.with_ring(|_, w| w.instant(&e));
        } else {
            e.flags = slot_flags::TIME_OF_NAMED;
            PROF.with_ring(|_, w| w.instant_at(&e, done.t_start));
        }
    }
    add_timed(done);
}

/// The operation's GPU span joins its communicator's timed aggregates.
fn add_timed(done: agg::GpuDone) {
    if let Some(t) = ctx::by_index(done.ctx_index).and_then(CommCtx::agg) {
        t.add_timed(done.cell, done.bytes, done.gpu_ns());
    }
}

#[inline]
fn start(ctx_ptr: *mut c_void, ev: &Start) -> Option<u64> {
    let call = prof_call(ev.type_index)?;
    let parent = Handle::decode(ev.parent);
    let foreign = ev.foreign_pid.is_some() || parent.is_some_and(|p| p.foreign);
    let found = if foreign { None } else { ctx::lookup(ctx_ptr) };
    let mut comm = ev.comm_hint;
    if let Some((index, c)) = found {
        let known = c.comm_id.load(Ordering::Relaxed);
        if known != 0 {
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
    // Integer decoding and a relaxed load cannot panic: no guard needed before the record path.
    let Some(h) = Handle::decode(ehandle as u64) else {
        return NCCL_SUCCESS;
    };
    // Summarized channels: a channel's stop says nothing its state 22 did not, and an
    // operation's record stays open until its GPU-done record (`ENDS_AT_GPU_DONE`).
    if is_joined_channel(&h) || ends_at_gpu_done(&h) {
        return NCCL_SUCCESS;
    }
    stop_recorded(h)
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
    // Integer decoding, reading NCCL's state args and relaxed atomics cannot panic: a summarized
    // channel's stop is handled before the guard, which only the GPU-done record needs.
    let Some(h) = Handle::decode(ehandle as u64) else {
        return NCCL_SUCCESS;
    };
    if is_joined_channel(&h) {
        if let (abi::state::KERNEL_CH_STOP, Some(i)) = (state, h.inflight) {
            let (gpu_stop, _) = value();
            if let Some(done) =
                agg::owned_by(i, h.record_ref()).and_then(|x| x.channel_stop(gpu_stop))
            {
                guard(|| gpu_done(h.record_ref(), i, done));
            }
        }
        return NCCL_SUCCESS;
    }
    record_state_recorded(h, state, value)
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
                add_timed(done);
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
#[inline]
pub fn wanted_type(ty: u64) -> Option<u8> {
    if ty == 0 || ty & (ty - 1) != 0 || ty > 1 << 15 {
        return None;
    }
    wants(ty as u32).then_some(ty.trailing_zeros() as u8)
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
