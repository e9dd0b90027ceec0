//! Byte layout of a dump file: the header page, the ring directory, the 128-byte slots and the
//! blob arena. These types are the contract between the in-process writers and the reader, so
//! every field has a fixed offset (pinned by tests below) and the file is little-endian.
//!
//! ```text
//! [0, 4096)                      FileHeader (one page)
//! [ring_dir_offset, +n*64)       RingDirEntry per ring (rings 0..n-1 are per-thread, ring n is the
//!                                shared overflow ring used when every per-thread ring is claimed)
//! [rings_offset, +(n+1)*cap*128) Slot arrays, ring after ring
//! [arena_offset, +arena_size)    Blob arena: BlobHeader + payload, 8-byte aligned, append-only
//! [keep_offset, +keep_slots*128) Keep ring (minor >= 1): the rare records (communicator lifecycle,
//!                                snapshots, configs, async errors, copies of failed calls), shared
//!                                by every thread, so that hot calls never overwrite them
//! [comm_offset, +entries*128)    Communicator table (minor >= 1): one `CommTableEntry` per
//!                                communicator the process created, with its progress
//! ```
//!
//! Minor 1 added the two regions after the arena and the `HeaderExt` (liveness, fatal signal,
//! keep ring directory, region offsets) taken from the header's reserved space. A minor-0 file
//! has zeros there and no regions after its arena.
//!
//! Major 2 makes a file as large as what its process uses: the fixed part (header, ring
//! directory, keep ring, communicator table, a small overflow ring) is allocated at creation,
//! and everything else is appended to a growing **tail** when it is needed: a thread's ring
//! when the thread claims it, a blob when it is written. Each tail extent starts with a
//! `BlobHeader`; a ring's slots are an extent of kind `RingSlots` (page-aligned, found through
//! its ring directory entry's `slots_offset`).
//!
//! ```text
//! [0, 4096)                      FileHeader (HeaderExt2 at 1288: tail, materialized rings, run id)
//! [4096, +(n+1)*64)              RingDirEntry per ring (ring n: the overflow ring)
//! [keep_offset, +keep*128)       Keep ring
//! [comm_offset, +entries*128)    Communicator table
//! [rings_offset, +overflow*128)  Overflow ring (shared; where a thread goes when no ring is left
//!                                or its ring could not be allocated)
//! [arena_offset, file end)       Tail: BlobHeader + payload extents, appended with a CAS on
//!                                `tail_reserved` and allocated with posix_fallocate
//! ```
//!
//! Format 2.1 added the exit record (`HeaderExt2::exit_via`, `exit_status`,
//! `exit_call_monotonic_ns`) in what was reserved space: a 2.0 file reads as "no exit call seen".
//! Format 2.2 added the writer's PID namespace (`HeaderExt2::pid_namespace`), also in reserved
//! space: an older file reads as "namespace unknown", which is taken to be the reader's.
//!
//! Format changes are additive: a new record kind, call id or header field taken from reserved
//! space bumps the minor version; anything else bumps the major version, which readers refuse.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64};

/// First eight bytes of every dump.
pub const MAGIC: [u8; 8] = *b"NCCLSHIM";
/// The major version written. Readers decode majors `OLDEST_MAJOR..=FORMAT_MAJOR` and refuse
/// newer ones with a message telling to upgrade.
pub const FORMAT_MAJOR: u16 = 2;
/// Readers accept any minor version; unknown kinds written by newer writers are skipped.
pub const FORMAT_MINOR: u16 = 2;
/// The oldest major version this reader still decodes (1.0 and 1.1: everything allocated up front).
pub const OLDEST_MAJOR: u16 = 1;
/// Written as a native `u32`; reads back as these bytes only on a little-endian writer.
pub const ENDIAN_MARKER: u32 = 0x0102_0304;
pub const HEADER_SIZE: usize = 4096;
pub const SLOT_SIZE: usize = 128;
pub const RING_DIR_ENTRY_SIZE: usize = 64;
pub const BLOB_HEADER_SIZE: usize = 16;
/// `Slot::t_exit_ns` of a call that has not returned yet (or never will: the process died in it).
pub const IN_FLIGHT: u64 = u64::MAX;
/// `BlobHeader::commit` once the payload is complete.
pub const BLOB_COMMITTED: u32 = 0xB10B_C0DE;
/// Number of generic counters in the header; their meaning depends on the writer kind.
pub const HEADER_COUNTERS: usize = 8;

/// Which component wrote a file.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "reader", derive(serde::Serialize))]
#[cfg_attr(feature = "reader", serde(rename_all = "snake_case"))]
pub enum WriterKind {
    /// `libncclshim.so`, the LD_PRELOAD interposer.
    Shim = 1,
    /// `libnccl-profiler-ncclshim.so`, the NCCL profiler plugin.
    Profiler = 2,
    /// Written by a test or a tool, not by a real process (labelled synthetic in reports).
    Synthetic = 3,
}

impl WriterKind {
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::Shim),
            2 => Some(Self::Profiler),
            3 => Some(Self::Synthetic),
            _ => None,
        }
    }

    /// The tag used in file names (`<host>.<pid>.<start>.<tag>.ncclshim`).
    pub fn file_tag(self) -> &'static str {
        match self {
            Self::Shim => "shim",
            Self::Profiler => "prof",
            Self::Synthetic => "synth",
        }
    }
}

/// Bits of `FileHeader::flags`.
pub mod flags {
    /// The process reached `exit()` normally (set from an atexit handler; `_exit` and signals skip it).
    pub const CLEAN_EXIT: u32 = 1 << 0;
    /// Recording was turned off after an internal failure (a caught panic, say).
    pub const DISABLED: u32 = 1 << 1;
    /// NCCL is linked statically into another library, so its calls are invisible to LD_PRELOAD.
    pub const NCCL_STATIC: u32 = 1 << 2;
    /// The blob arena filled up; later blobs were dropped (early ones, env and versions, are kept).
    pub const ARENA_FULL: u32 = 1 << 3;
    /// Every per-thread ring was claimed; later threads share the overflow ring.
    pub const RINGS_EXHAUSTED: u32 = 1 << 4;
    /// Format 2: a ring or a blob could not be allocated (disk full, file moved); that thread
    /// writes to the overflow ring, the blob was dropped.
    pub const ALLOC_FAILED: u32 = 1 << 5;
}

/// One pair of clock readings taken back to back, so a reader can map CLOCK_MONOTONIC record
/// times to wall-clock time (and, across hosts, align ranks to within NTP/PTP quality).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "reader", derive(serde::Serialize))]
pub struct ClockPair {
    pub monotonic_ns: u64,
    pub realtime_ns: u64,
    pub boottime_ns: u64,
    /// Width of the reading window (MONOTONIC read before and after REALTIME); smaller is better.
    pub uncertainty_ns: u64,
}

/// The header page. Fields before `flags` are written once at creation, before the file is
/// published under its final name, and never change; the atomics after it are live.
#[repr(C)]
pub struct FileHeader {
    pub magic: [u8; 8],
    pub major: u16,
    pub minor: u16,
    pub endian: u32,
    pub header_size: u32,
    pub slot_size: u32,
    pub page_size: u32,
    pub writer_kind: u32,
    /// Writer crate version, NUL-padded UTF-8.
    pub writer_version: [u8; 16],
    pub pid: u32,
    pub ppid: u32,
    /// Field 22 of `/proc/self/stat` (clock ticks since boot): with `boot_id` it tells a reused pid apart.
    pub pid_start_ticks: u64,
    /// `/proc/sys/kernel/random/boot_id`, NUL-padded.
    pub boot_id: [u8; 40],
    /// `gethostname`, NUL-padded (truncated at 63 bytes).
    pub hostname: [u8; 64],
    /// `/sys/devices/system/clocksource/clocksource0/current_clocksource`, NUL-padded.
    pub clocksource: [u8; 16],
    /// The best of three back-to-back readings at creation.
    pub clock: ClockPair,
    // -- geometry --
    pub ring_count: u32,
    pub slots_per_ring: u32,
    pub ring_dir_offset: u64,
    pub rings_offset: u64,
    pub arena_offset: u64,
    pub arena_size: u64,
    pub file_size: u64,
    // -- live state (offset 256) --
    pub flags: AtomicU32,
    /// Next per-thread ring to hand out (may exceed `ring_count`: the excess shared the overflow ring).
    pub next_ring: AtomicU32,
    /// Bytes of the arena handed out so far (may exceed `arena_size`: those blobs were dropped).
    /// Format 2: blob bytes (headers and padding included) counted against `arena_size`; the
    /// blobs themselves are tail extents.
    pub arena_tail: AtomicU64,
    pub dropped_blobs: AtomicU64,
    /// Generic counters; see `counters` for each writer kind's meaning.
    pub counters: [AtomicU64; HEADER_COUNTERS],
    /// Exit time (CLOCK_MONOTONIC) written with CLEAN_EXIT.
    pub exit_monotonic_ns: AtomicU64,
    /// Time base of the slots' timestamps: 0 CLOCK_MONOTONIC ns, 1 TSC ticks (`clock::ClockKind`).
    pub clock_kind: u32,
    /// Anchors handed out so far; anchor `i` lives in `anchors[i % CLOCK_ANCHORS]`.
    pub next_anchor: AtomicU32,
    /// TSC ticks per second measured at creation (0 for a CLOCK_MONOTONIC dump).
    pub tsc_hz: u64,
    /// (TSC, CLOCK_MONOTONIC) pairs taken at creation and now and then afterwards.
    pub anchors: [ClockAnchor; CLOCK_ANCHORS],
    /// Minor 1: what lives outside the wrapping rings (offset `HEADER_EXT_OFFSET`).
    pub ext: HeaderExt,
    /// Major 2: the growing tail and the run identity (offset `HEADER_EXT2_OFFSET`).
    pub ext2: HeaderExt2,
    pub _reserved: [u8; HEADER_SIZE - HEADER_EXT2_OFFSET - HEADER_EXT2_SIZE],
}

/// Offset of [`HeaderExt2`] in the header page.
pub const HEADER_EXT2_OFFSET: usize = HEADER_EXT_OFFSET + HEADER_EXT_SIZE;
pub const HEADER_EXT2_SIZE: usize = 192;

/// The header fields of format 2: where the file grows, and which run the process belongs to.
#[repr(C)]
pub struct HeaderExt2 {
    /// Slots of the overflow ring (a power of two).
    pub overflow_slots: u32,
    /// Per-thread rings whose slots were allocated (each is a `RingSlots` tail extent).
    pub rings_materialized: AtomicU32,
    /// Bytes of the tail handed out; the file grows to `arena_offset + tail_reserved` (a
    /// reader may find it shorter while an allocation is under way, or after a crash in one).
    pub tail_reserved: AtomicU64,
    /// The most the tail may grow to (the writer's address-space reservation).
    pub tail_max: u64,
    /// Minor 2: the inode of the writer's PID namespace (`/proc/self/ns/pid`; 0: unknown or a
    /// 2.0/2.1 file). Containers sharing a host name and boot id hand out the same small pids;
    /// this keeps their processes apart.
    pub pid_namespace: u64,
    /// Ring claims whose allocation failed (that thread writes to the overflow ring).
    pub ring_alloc_failed: AtomicU32,
    pub _pad: u32,
    /// Which launcher named the run (`slurm`, `torchelastic`, `openmpi`, ...; empty: none).
    pub run_source: [u8; 24],
    /// The run's id as the launcher gave it (`12345.0` for a Slurm job step), NUL-padded.
    pub run_id: [u8; 64],
    /// The launcher's id for this process within the run (`RANK`, `SLURM_PROCID`, ...; -1: unknown).
    pub launcher_rank: i32,
    /// Minor 1: how the process asked to end (`exit_via::*`; 0: no exit call was seen). Written
    /// last, with Release, after `exit_status` and `exit_call_monotonic_ns`; a later exit call
    /// (an atexit handler that calls `_exit`) overwrites an earlier one: the last one decides.
    pub exit_via: AtomicU32,
    /// The status passed to `exit` / `_exit` / `_Exit` (the process's exit status is its low 8 bits).
    pub exit_status: AtomicI32,
    /// Minor 2: how many times a handler the program installed for a watched fatal signal
    /// (chained to by the shim's) returned to the interrupted code. With later records it says
    /// the process recovered from the signal recorded in `HeaderExt::signal`.
    pub signal_handler_returns: AtomicU32,
    /// When that call was made (CLOCK_MONOTONIC ns).
    pub exit_call_monotonic_ns: AtomicU64,
    pub _reserved: [u8; 40],
}

/// How a process ended, as far as its own exit call says (`HeaderExt2::exit_via`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "reader", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "reader", serde(rename_all = "snake_case"))]
pub enum ExitVia {
    /// `exit(status)`: atexit handlers ran after it (`CLEAN_EXIT` once ours did).
    Exit,
    /// `_exit(status)` / `_Exit(status)`: the process ended at once, skipping atexit handlers
    /// (how forked children and Python's `os._exit` end).
    UnderscoreExit,
}

impl ExitVia {
    /// The header value as a variant (`None` for 0, "no exit call seen", and unknown values).
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            exit_via::EXIT => Some(Self::Exit),
            exit_via::UNDERSCORE_EXIT => Some(Self::UnderscoreExit),
            _ => None,
        }
    }

    pub fn as_u32(self) -> u32 {
        match self {
            Self::Exit => exit_via::EXIT,
            Self::UnderscoreExit => exit_via::UNDERSCORE_EXIT,
        }
    }

    /// The C function's name, for people.
    pub fn function_name(self) -> &'static str {
        match self {
            Self::Exit => "exit",
            Self::UnderscoreExit => "_exit",
        }
    }
}

/// Values of `HeaderExt2::exit_via`: which libc function the process called to end.
pub mod exit_via {
    /// None was seen (killed, crashed, still running, or a writer that does not record it).
    pub const NONE: u32 = 0;
    /// `exit` (also a return from `main`, Python's `sys.exit`): atexit handlers run after it.
    pub const EXIT: u32 = 1;
    /// `_exit` or `_Exit` (forked children, Python's `os._exit`): no atexit handler runs.
    pub const UNDERSCORE_EXIT: u32 = 2;
}

/// Offset of [`HeaderExt`] in the header page.
pub const HEADER_EXT_OFFSET: usize = 376 + CLOCK_ANCHORS * 24;
pub const HEADER_EXT_SIZE: usize = 144;

/// The header fields of format minor 1: facts that must survive any number of hot records.
/// All zero in a minor-0 file.
#[repr(C)]
pub struct HeaderExt {
    /// Slots of the keep ring (a power of two; 0: none).
    pub keep_slots: u32,
    /// Entries of the communicator table (0: none).
    pub comm_entries: u32,
    pub keep_offset: u64,
    pub comm_offset: u64,
    /// Latest sign of life (record time base) that left no record of its own: a deduplicated
    /// async-error poll, say. Raised with a plain store, never lowered by much.
    pub last_alive: AtomicU64,
    /// Communicator-table entries handed out (may exceed `comm_entries`: those were not kept).
    pub comm_next: AtomicU32,
    /// Records that went to the keep ring (it wraps too, but only rare records go there).
    pub keep_written: AtomicU32,
    pub signal: SignalRecord,
    /// The keep ring's directory entry (shared by every thread, like the overflow ring).
    pub keep_dir: RingDirEntry,
}

/// The first fatal signal the process received (written from the signal handler: atomics and
/// plain stores into the mapping only).
#[repr(C)]
pub struct SignalRecord {
    /// The signal number once the record is complete (0: none). Written last, with Release.
    pub signo: AtomicU32,
    /// `si_code` (> 0: raised by the kernel for a fault; <= 0: sent by a process).
    pub code: AtomicI32,
    /// Kernel thread id that received it.
    pub tid: AtomicU32,
    /// `si_pid` of the sender when a process sent it.
    pub sender_pid: AtomicU32,
    /// `si_addr` (faulting address) for SIGSEGV/SIGBUS/SIGILL/SIGFPE.
    pub addr: AtomicU64,
    /// When (record time base).
    pub time: AtomicU64,
    /// Fatal-class signals received in all (a handled SIGINT, then the real one, say).
    pub count: AtomicU32,
    /// Claimed (1) by the handler that writes the record, before `signo`.
    pub claimed: AtomicU32,
}

/// One communicator the process created, in the communicator table. Identity fields are written
/// once when the entry is claimed (before `state` turns live); the progress fields are updated
/// by the thread that issues an operation with plain atomic stores.
#[repr(C)]
pub struct CommTableEntry {
    /// `comm_state::*`.
    pub state: AtomicU32,
    /// The `CallId` that created it (init, split, shrink, grow).
    pub created_by: u32,
    pub comm: u64,
    pub comm_hash: u64,
    pub uid_hash: u64,
    pub nranks: i32,
    pub rank: i32,
    pub cuda_dev: i32,
    pub nccl_version: i32,
    pub parent_hash: u64,
    pub split_color: i32,
    pub split_key: i32,
    /// Record time base.
    pub created_t: u64,
    /// When it was destroyed or aborted (0: still live).
    pub ended_t: AtomicU64,
    /// Operations issued on it (`seq` of the last one + 1).
    pub issued: AtomicU64,
    /// Operations whose call returned (`seq` + 1 of the last completed).
    pub completed: AtomicU64,
    /// `CallId` of the last operation issued, and its return code once it returned.
    pub last_call: AtomicU32,
    pub last_rc: AtomicI32,
    pub last_count: AtomicU64,
    /// datatype | redop << 8 (each as NCCL's small enum value; 0xff: none).
    pub last_dtype_op: AtomicU32,
    /// Root or peer (-1: none).
    pub last_peer: AtomicI32,
    /// When the last operation was issued (record time base).
    pub last_t: AtomicU64,
}

/// Values of `CommTableEntry::state`.
pub mod comm_state {
    pub const FREE: u32 = 0;
    /// Created, not known to be ready (a non-blocking init in progress).
    pub const PENDING: u32 = 1;
    pub const LIVE: u32 = 2;
    pub const DESTROYED: u32 = 3;
    pub const ABORTED: u32 = 4;
}

pub const COMM_ENTRY_SIZE: usize = 128;
/// Default keep-ring slots: 1,024 x 128 B = 128 KiB.
pub const DEFAULT_KEEP_SLOTS: u32 = 1024;
/// Default communicator-table entries: 256 x 128 B = 32 KiB.
pub const DEFAULT_COMM_ENTRIES: u32 = 256;
/// Default overflow-ring slots (format 2): 1,024 x 128 B = 128 KiB, allocated at creation so a
/// thread whose ring cannot be allocated always has somewhere to write.
pub const DEFAULT_OVERFLOW_SLOTS: u32 = 1024;

/// Anchor slots in the header.
pub const CLOCK_ANCHORS: usize = 32;

/// One (TSC, CLOCK_MONOTONIC) pair for converting a TSC dump's timestamps. `seq` is 0 while
/// the pair is being written and the anchor's number + 1 once it is complete.
#[repr(C)]
#[derive(Debug, Default)]
pub struct ClockAnchor {
    pub seq: AtomicU64,
    pub tsc: u64,
    pub monotonic_ns: u64,
}

/// Meaning of `FileHeader::counters` per writer kind.
pub mod counters {
    /// Shim: driver lookups (`cuGetProcAddress*` or `dlsym` of a `cu*` name) that passed through the hooks.
    pub const SHIM_DRIVER_LOOKUPS: usize = 0;
    /// Shim: lookups of watched driver functions that were answered with a recording wrapper.
    pub const SHIM_DRIVER_WRAPPED: usize = 1;
    /// Any writer: events not recorded because the recorder was still being created or was busy.
    pub const EVENTS_SKIPPED: usize = 2;
    /// Shim: `ncclCommGetAsyncError` polls that returned the same value as the previous poll (not recorded).
    pub const SHIM_ASYNC_POLLS: usize = 3;
    /// Profiler: events dropped because the activation mask did not ask for them or the handle was unknown.
    pub const PROF_EVENTS_DROPPED: usize = 4;
}

/// Per-ring bookkeeping. Only the owning thread writes `head` (overflow ring: `fetch_add` by anyone).
#[repr(C)]
pub struct RingDirEntry {
    /// Kernel thread id of the owner; 0 while unclaimed.
    pub tid: AtomicU32,
    /// 1 once claimed (for the overflow ring: 1 from creation).
    pub state: AtomicU32,
    /// Sequence number of the next slot to write; slot index is `seq % slots_per_ring`.
    pub head: AtomicU64,
    /// Thread name (`pthread_getname_np`), NUL-padded; refreshed by the owner now and then.
    pub name: [u8; 16],
    /// CLOCK_MONOTONIC time of the claim.
    pub claimed_ns: u64,
    /// Format 2: file offset of the ring's slots (0: not allocated; the overflow ring's is
    /// `rings_offset`), and their number.
    pub slots_offset: u64,
    pub slots: u32,
    pub _reserved: [u8; 12],
}

/// Values of `RingDirEntry::state`.
pub mod ring_state {
    pub const FREE: u32 = 0;
    pub const CLAIMED: u32 = 1;
    /// Format 2: the thread claimed this ring but its allocation failed; it writes to the
    /// overflow ring (counted in `HeaderExt2::ring_alloc_failed`).
    pub const ALLOC_FAILED: u32 = 2;
}

/// One record. `commit` is `seq << 1` while the slot is being filled and `(seq << 1) | 1` once
/// it is complete; a reader keeps a slot only when the commit is odd and `seq` maps to this index.
/// A call's completion (`rc`, result args, then `t_exit_ns`) is written in place later by the
/// same thread; until then `t_exit_ns == IN_FLIGHT`.
#[repr(C)]
pub struct Slot {
    pub commit: AtomicU64,
    pub t_enter_ns: u64,
    pub t_exit_ns: AtomicU64,
    /// `schema::RecordKind`.
    pub kind: u16,
    /// `schema::CallId` (an API function, or a profiler event type).
    pub call: u16,
    /// Return code (ncclResult_t or CUresult) once complete.
    pub rc: i32,
    /// Per-kind bits (`schema::slot_flags`).
    pub flags: u32,
    /// Kernel thread id of the writer (useful in the shared overflow ring).
    pub tid: u32,
    /// The communicator (or other handle) the record is about; 0 when none.
    pub comm: u64,
    /// File offset of a blob (error text, snapshot, config); 0 when none.
    pub blob: u64,
    /// Arguments; their names depend on `call` (see `schema::arg_names`).
    pub args: [u64; SLOT_ARGS],
}

pub const SLOT_ARGS: usize = 9;

/// Header of one blob in the arena; the payload follows and is padded to 8 bytes.
#[repr(C)]
pub struct BlobHeader {
    /// Payload length in bytes, written before the payload.
    pub len: u32,
    /// `schema::BlobKind`.
    pub kind: u16,
    pub _pad: u16,
    /// `BLOB_COMMITTED` once the payload is complete (written last, with Release).
    pub commit: AtomicU32,
    pub _reserved: u32,
}

/// Where each part of a file lives, derived from the ring count, ring size and arena size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub ring_count: u32,
    pub slots_per_ring: u32,
    pub ring_dir_offset: u64,
    pub rings_offset: u64,
    pub arena_offset: u64,
    pub arena_size: u64,
    /// Minor 1: the keep ring and the communicator table after the arena (0 slots/entries: none).
    pub keep_slots: u32,
    pub keep_offset: u64,
    pub comm_entries: u32,
    pub comm_offset: u64,
    /// Major 1: the whole file. Major 2: the fixed part allocated at creation (the tail starts
    /// at `arena_offset`, which equals it).
    pub file_size: u64,
    /// Major 2: slots of the overflow ring (major 1: `slots_per_ring`).
    pub overflow_slots: u32,
    /// Major 2: the most the tail may grow to (0 for major 1, which does not grow).
    pub tail_max: u64,
}

impl Geometry {
    /// Lays out `ring_count` per-thread rings plus the overflow ring, each of `slots_per_ring`
    /// slots, and an arena of `arena_size` bytes. `None` when a size overflows.
    pub fn new(ring_count: u32, slots_per_ring: u32, arena_size: u64) -> Option<Self> {
        if ring_count == 0 || slots_per_ring == 0 {
            return None;
        }
        let page = 4096u64;
        let total_rings = u64::from(ring_count) + 1;
        let ring_dir_offset = HEADER_SIZE as u64;
        let dir_bytes = total_rings.checked_mul(RING_DIR_ENTRY_SIZE as u64)?;
        let rings_offset = round_up(ring_dir_offset.checked_add(dir_bytes)?, page)?;
        let ring_bytes = total_rings
            .checked_mul(u64::from(slots_per_ring))?
            .checked_mul(SLOT_SIZE as u64)?;
        let arena_offset = round_up(rings_offset.checked_add(ring_bytes)?, page)?;
        let arena_size = round_up(arena_size.max(page), page)?;
        let file_size = arena_offset.checked_add(arena_size)?;
        Some(Self {
            ring_count,
            slots_per_ring,
            ring_dir_offset,
            rings_offset,
            arena_offset,
            arena_size,
            keep_slots: 0,
            keep_offset: file_size,
            comm_entries: 0,
            comm_offset: file_size,
            file_size,
            overflow_slots: slots_per_ring,
            tail_max: 0,
        })
    }

    /// Format 2: a fixed part (ring directory, keep ring, communicator table, overflow ring)
    /// followed by a tail that grows to at most `tail_max`: `arena_size` bytes of blobs plus
    /// one page-aligned extent per per-thread ring. `arena_offset` is where the tail starts.
    pub fn grown(
        ring_count: u32,
        slots_per_ring: u32,
        arena_size: u64,
        keep_slots: u32,
        comm_entries: u32,
        overflow_slots: u32,
    ) -> Option<Self> {
        if ring_count == 0 || slots_per_ring == 0 || overflow_slots == 0 {
            return None;
        }
        let page = 4096u64;
        let total_rings = u64::from(ring_count) + 1;
        let ring_dir_offset = HEADER_SIZE as u64;
        let dir_bytes = total_rings.checked_mul(RING_DIR_ENTRY_SIZE as u64)?;
        let keep_offset = round_up(ring_dir_offset.checked_add(dir_bytes)?, page)?;
        let keep_bytes = u64::from(keep_slots).checked_mul(SLOT_SIZE as u64)?;
        let comm_offset = round_up(keep_offset.checked_add(keep_bytes)?, page)?;
        let comm_bytes = u64::from(comm_entries).checked_mul(COMM_ENTRY_SIZE as u64)?;
        let rings_offset = round_up(comm_offset.checked_add(comm_bytes)?, page)?;
        let overflow_bytes = u64::from(overflow_slots).checked_mul(SLOT_SIZE as u64)?;
        let arena_offset = round_up(rings_offset.checked_add(overflow_bytes)?, page)?;
        let arena_size = round_up(arena_size.max(page), page)?;
        let ring_extent = ring_extent_bytes(slots_per_ring)?;
        let tail_max = u64::from(ring_count)
            .checked_mul(ring_extent)?
            .checked_add(arena_size)?;
        // The whole reservation must be addressable.
        arena_offset.checked_add(tail_max)?;
        Some(Self {
            ring_count,
            slots_per_ring,
            ring_dir_offset,
            rings_offset,
            arena_offset,
            arena_size,
            keep_slots,
            keep_offset,
            comm_entries,
            comm_offset,
            file_size: arena_offset,
            overflow_slots,
            tail_max,
        })
    }

    /// The largest the file can become (major 2; the whole file for major 1).
    pub fn max_file_size(&self) -> u64 {
        self.file_size + self.tail_max
    }

    /// As [`new`](Self::new), plus (format minor 1) a keep ring of `keep_slots` slots and a
    /// communicator table of `comm_entries` entries after the arena.
    pub fn with_extras(
        ring_count: u32,
        slots_per_ring: u32,
        arena_size: u64,
        keep_slots: u32,
        comm_entries: u32,
    ) -> Option<Self> {
        let mut g = Self::new(ring_count, slots_per_ring, arena_size)?;
        let page = 4096u64;
        g.keep_slots = keep_slots;
        g.keep_offset = g.file_size;
        let keep_bytes = u64::from(keep_slots).checked_mul(SLOT_SIZE as u64)?;
        g.comm_entries = comm_entries;
        g.comm_offset = round_up(g.keep_offset.checked_add(keep_bytes)?, page)?;
        let comm_bytes = u64::from(comm_entries).checked_mul(COMM_ENTRY_SIZE as u64)?;
        g.file_size = round_up(g.comm_offset.checked_add(comm_bytes)?, page)?;
        Some(g)
    }

    pub fn keep_slot_offset(&self, index: u32) -> u64 {
        self.keep_offset + u64::from(index) * SLOT_SIZE as u64
    }

    pub fn comm_entry_offset(&self, index: u32) -> u64 {
        self.comm_offset + u64::from(index) * COMM_ENTRY_SIZE as u64
    }

    /// Number of rings including the overflow ring.
    pub fn total_rings(&self) -> u32 {
        self.ring_count + 1
    }

    pub fn overflow_ring(&self) -> u32 {
        self.ring_count
    }

    pub fn ring_dir_entry_offset(&self, ring: u32) -> u64 {
        self.ring_dir_offset + u64::from(ring) * RING_DIR_ENTRY_SIZE as u64
    }

    pub fn slot_offset(&self, ring: u32, index: u32) -> u64 {
        self.rings_offset
            + (u64::from(ring) * u64::from(self.slots_per_ring) + u64::from(index))
                * SLOT_SIZE as u64
    }
}

/// The most tail bytes one ring's extent takes: its slots, its header, and the padding that
/// puts the slots on a page boundary (a `Pad` extent of at least a header before it).
pub fn ring_extent_bytes(slots_per_ring: u32) -> Option<u64> {
    u64::from(slots_per_ring)
        .checked_mul(SLOT_SIZE as u64)?
        .checked_add(4096 + 2 * BLOB_HEADER_SIZE as u64)
}

pub fn round_up(v: u64, to: u64) -> Option<u64> {
    Some(v.checked_add(to - 1)? / to * to)
}

/// Copies `s` into a fixed NUL-padded field, truncating at a UTF-8 boundary.
pub fn fill_fixed(dst: &mut [u8], s: &[u8]) {
    let mut n = s.len().min(dst.len().saturating_sub(1));
    while n > 0 && n < s.len() && (s[n] & 0xC0) == 0x80 {
        n -= 1;
    }
    dst[..n].copy_from_slice(&s[..n]);
    dst[n..].fill(0);
}

/// The text of a NUL-padded field (lossy: the reader never trusts the bytes).
pub fn fixed_str(src: &[u8]) -> String {
    let end = src.iter().position(|&b| b == 0).unwrap_or(src.len());
    String::from_utf8_lossy(&src[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn sizes_are_pinned() {
        assert_eq!(size_of::<FileHeader>(), HEADER_SIZE);
        assert_eq!(size_of::<Slot>(), SLOT_SIZE);
        assert_eq!(size_of::<RingDirEntry>(), RING_DIR_ENTRY_SIZE);
        assert_eq!(size_of::<BlobHeader>(), BLOB_HEADER_SIZE);
        assert_eq!(size_of::<ClockPair>(), 32);
        assert_eq!(size_of::<HeaderExt>(), HEADER_EXT_SIZE);
        assert_eq!(size_of::<SignalRecord>(), 40);
        assert_eq!(size_of::<CommTableEntry>(), COMM_ENTRY_SIZE);
    }

    #[test]
    fn extension_offsets_are_pinned() {
        assert_eq!(offset_of!(FileHeader, ext), HEADER_EXT_OFFSET);
        assert_eq!(HEADER_EXT_OFFSET, 1144);
        assert_eq!(offset_of!(HeaderExt, keep_slots), 0);
        assert_eq!(offset_of!(HeaderExt, comm_entries), 4);
        assert_eq!(offset_of!(HeaderExt, keep_offset), 8);
        assert_eq!(offset_of!(HeaderExt, comm_offset), 16);
        assert_eq!(offset_of!(HeaderExt, last_alive), 24);
        assert_eq!(offset_of!(HeaderExt, comm_next), 32);
        assert_eq!(offset_of!(HeaderExt, keep_written), 36);
        assert_eq!(offset_of!(HeaderExt, signal), 40);
        assert_eq!(offset_of!(HeaderExt, keep_dir), 80);
        assert_eq!(offset_of!(SignalRecord, signo), 0);
        assert_eq!(offset_of!(SignalRecord, code), 4);
        assert_eq!(offset_of!(SignalRecord, tid), 8);
        assert_eq!(offset_of!(SignalRecord, sender_pid), 12);
        assert_eq!(offset_of!(SignalRecord, addr), 16);
        assert_eq!(offset_of!(SignalRecord, time), 24);
        assert_eq!(offset_of!(SignalRecord, count), 32);
        assert_eq!(offset_of!(CommTableEntry, state), 0);
        assert_eq!(offset_of!(CommTableEntry, created_by), 4);
        assert_eq!(offset_of!(CommTableEntry, comm), 8);
        assert_eq!(offset_of!(CommTableEntry, comm_hash), 16);
        assert_eq!(offset_of!(CommTableEntry, uid_hash), 24);
        assert_eq!(offset_of!(CommTableEntry, nranks), 32);
        assert_eq!(offset_of!(CommTableEntry, rank), 36);
        assert_eq!(offset_of!(CommTableEntry, cuda_dev), 40);
        assert_eq!(offset_of!(CommTableEntry, nccl_version), 44);
        assert_eq!(offset_of!(CommTableEntry, parent_hash), 48);
        assert_eq!(offset_of!(CommTableEntry, split_color), 56);
        assert_eq!(offset_of!(CommTableEntry, split_key), 60);
        assert_eq!(offset_of!(CommTableEntry, created_t), 64);
        assert_eq!(offset_of!(CommTableEntry, ended_t), 72);
        assert_eq!(offset_of!(CommTableEntry, issued), 80);
        assert_eq!(offset_of!(CommTableEntry, completed), 88);
        assert_eq!(offset_of!(CommTableEntry, last_call), 96);
        assert_eq!(offset_of!(CommTableEntry, last_rc), 100);
        assert_eq!(offset_of!(CommTableEntry, last_count), 104);
        assert_eq!(offset_of!(CommTableEntry, last_dtype_op), 112);
        assert_eq!(offset_of!(CommTableEntry, last_peer), 116);
        assert_eq!(offset_of!(CommTableEntry, last_t), 120);
    }

    #[test]
    fn format2_offsets_are_pinned() {
        assert_eq!(offset_of!(FileHeader, ext2), HEADER_EXT2_OFFSET);
        assert_eq!(HEADER_EXT2_OFFSET, 1288);
        assert_eq!(size_of::<HeaderExt2>(), HEADER_EXT2_SIZE);
        assert_eq!(offset_of!(HeaderExt2, overflow_slots), 0);
        assert_eq!(offset_of!(HeaderExt2, rings_materialized), 4);
        assert_eq!(offset_of!(HeaderExt2, tail_reserved), 8);
        assert_eq!(offset_of!(HeaderExt2, tail_max), 16);
        assert_eq!(offset_of!(HeaderExt2, pid_namespace), 24);
        assert_eq!(offset_of!(HeaderExt2, ring_alloc_failed), 32);
        assert_eq!(offset_of!(HeaderExt2, run_source), 40);
        assert_eq!(offset_of!(HeaderExt2, run_id), 64);
        assert_eq!(offset_of!(HeaderExt2, launcher_rank), 128);
        assert_eq!(offset_of!(HeaderExt2, exit_via), 132);
        assert_eq!(offset_of!(HeaderExt2, exit_status), 136);
        assert_eq!(offset_of!(HeaderExt2, signal_handler_returns), 140);
        assert_eq!(offset_of!(HeaderExt2, exit_call_monotonic_ns), 144);
        assert_eq!(offset_of!(RingDirEntry, claimed_ns), 32);
        assert_eq!(offset_of!(RingDirEntry, slots_offset), 40);
        assert_eq!(offset_of!(RingDirEntry, slots), 48);
    }

    #[test]
    fn format2_fixed_part_is_small_and_the_tail_bounded() {
        let g = Geometry::grown(64, 2048, 4 << 20, 1024, 256, 1024).unwrap();
        assert_eq!(g.keep_offset, 12288);
        assert_eq!(g.comm_offset % 4096, 0);
        assert!(g.rings_offset >= g.comm_offset + 256 * 128);
        assert_eq!(g.arena_offset, g.rings_offset + 1024 * 128);
        assert_eq!(g.file_size, g.arena_offset);
        assert!(g.file_size < 320 << 10, "{}", g.file_size);
        assert_eq!(g.tail_max, 64 * (2048 * 128 + 4096 + 32) + (4 << 20));
        assert!(Geometry::grown(u32::MAX, u32::MAX, u64::MAX, 1, 1, 1).is_none());
        assert!(Geometry::grown(4, 16, 100, 8, 3, 0).is_none());
    }

    #[test]
    fn extras_follow_the_arena() {
        let g = Geometry::with_extras(4, 16, 100, 8, 3).unwrap();
        let plain = Geometry::new(4, 16, 100).unwrap();
        assert_eq!(g.arena_offset, plain.arena_offset);
        assert_eq!(g.keep_offset, plain.file_size);
        assert_eq!(g.comm_offset % 4096, 0);
        assert!(g.comm_offset >= g.keep_slot_offset(8));
        assert_eq!(g.file_size, g.comm_offset + 4096);
        assert_eq!(plain.keep_slots, 0);
    }

    #[test]
    fn header_offsets_are_pinned() {
        assert_eq!(offset_of!(FileHeader, magic), 0);
        assert_eq!(offset_of!(FileHeader, major), 8);
        assert_eq!(offset_of!(FileHeader, endian), 12);
        assert_eq!(offset_of!(FileHeader, writer_kind), 28);
        assert_eq!(offset_of!(FileHeader, writer_version), 32);
        assert_eq!(offset_of!(FileHeader, pid), 48);
        assert_eq!(offset_of!(FileHeader, pid_start_ticks), 56);
        assert_eq!(offset_of!(FileHeader, boot_id), 64);
        assert_eq!(offset_of!(FileHeader, hostname), 104);
        assert_eq!(offset_of!(FileHeader, clocksource), 168);
        assert_eq!(offset_of!(FileHeader, clock), 184);
        assert_eq!(offset_of!(FileHeader, ring_count), 216);
        assert_eq!(offset_of!(FileHeader, file_size), 256);
        assert_eq!(offset_of!(FileHeader, flags), 264);
        assert_eq!(offset_of!(FileHeader, arena_tail), 272);
        assert_eq!(offset_of!(FileHeader, counters), 288);
        assert_eq!(offset_of!(FileHeader, exit_monotonic_ns), 352);
        assert_eq!(offset_of!(FileHeader, clock_kind), 360);
        assert_eq!(offset_of!(FileHeader, next_anchor), 364);
        assert_eq!(offset_of!(FileHeader, tsc_hz), 368);
        assert_eq!(offset_of!(FileHeader, anchors), 376);
        assert_eq!(size_of::<ClockAnchor>(), 24);
    }

    #[test]
    fn slot_offsets_are_pinned() {
        assert_eq!(offset_of!(Slot, commit), 0);
        assert_eq!(offset_of!(Slot, t_enter_ns), 8);
        assert_eq!(offset_of!(Slot, t_exit_ns), 16);
        assert_eq!(offset_of!(Slot, kind), 24);
        assert_eq!(offset_of!(Slot, call), 26);
        assert_eq!(offset_of!(Slot, rc), 28);
        assert_eq!(offset_of!(Slot, flags), 32);
        assert_eq!(offset_of!(Slot, tid), 36);
        assert_eq!(offset_of!(Slot, comm), 40);
        assert_eq!(offset_of!(Slot, blob), 48);
        assert_eq!(offset_of!(Slot, args), 56);
    }

    #[test]
    fn geometry_is_page_aligned_and_ordered() {
        let g = Geometry::new(4, 16, 100).unwrap();
        assert_eq!(g.rings_offset % 4096, 0);
        assert_eq!(g.arena_offset % 4096, 0);
        assert!(g.arena_offset >= g.slot_offset(4, 16));
        assert_eq!(g.file_size, g.arena_offset + 4096);
        assert!(Geometry::new(u32::MAX, u32::MAX, u64::MAX).is_none());
        assert!(Geometry::new(0, 16, 100).is_none());
    }

    #[test]
    fn fixed_fields_truncate_on_char_boundaries() {
        let mut buf = [0xffu8; 6];
        fill_fixed(&mut buf, "abcdé".as_bytes());
        assert_eq!(fixed_str(&buf), "abcd");
        fill_fixed(&mut buf, b"ab");
        assert_eq!(&buf, b"ab\0\0\0\0");
    }
}
