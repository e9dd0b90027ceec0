//! The plugin's shared state, below every other module that records: the process recorder
//! ([`PROF`]), the activation mask read once from `NCCLSHIM_PROFILE` ([`process_mask`]), our
//! pid, and the normalized event every ABI module translates into ([`Start`], [`Op`]). `core`
//! (the general path), `hot` (the default mask's straight-line path) and `translate` all read
//! it; it reads none of them, so they need not read each other to share it.

use crate::mask;
use ncclshim_dump::layout::SLOT_ARGS;
use ncclshim_dump::process::ProcessRecorder;
use ncclshim_dump::WriterKind;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The plugin's dump (`*.prof.ncclshim`). TLS slot 1, so the shim's recorder (slot 0) and this
/// one can share a library if the two are ever linked together (STATIC_PLUGIN).
pub static PROF: ProcessRecorder = ProcessRecorder::new(WriterKind::Profiler, 1);

/// The process's activation mask: 0 (nothing) until the first init has read the environment.
/// One relaxed load answers every "is this wanted" question on the hot path.
static MASK: AtomicU32 = AtomicU32::new(0);
/// The first init's reading of `NCCLSHIM_PROFILE`, which every later init reuses.
static MASK_FROM_ENV: OnceLock<u32> = OnceLock::new();
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

/// The process mask (0 before the first init).
#[inline(always)]
pub fn process_mask() -> u32 {
    MASK.load(Ordering::Relaxed)
}

/// Whether the process mask asks for event type bit `bit`.
#[inline(always)]
pub fn wants(bit: u32) -> bool {
    process_mask() & bit != 0
}

/// Our pid as the last init saw it (0 before the first init).
pub fn our_pid() -> u32 {
    PID.load(Ordering::Relaxed)
}

/// The process mask from the environment, read by the first init and reused by every later one.
pub fn ensure_mask() -> u32 {
    *MASK_FROM_ENV.get_or_init(|| {
        let (mask, why) = mask::from_env();
        ncclshim_dump::config::warn(why);
        MASK.store(mask, Ordering::Release);
        mask
    })
}

/// Notes our pid (every init: a forked child's inits see the child's).
pub fn note_our_pid() {
    // SAFETY: getpid has no preconditions.
    PID.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
}

/// Whether kernel channels are folded into one GPU-done record per operation (the default)
/// rather than recorded one by one (`NCCLSHIM_PROFILE=...,channels`).
#[inline(always)]
pub fn summarizing_channels() -> bool {
    !wants(mask::CHANNEL_RECORDS)
}
