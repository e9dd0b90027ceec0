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
//! ```
//!
//! Format changes are additive: a new record kind, call id or header field taken from reserved
//! space bumps the minor version; anything else bumps the major version, which readers refuse.

use std::sync::atomic::{AtomicU32, AtomicU64};

/// First eight bytes of every dump.
pub const MAGIC: [u8; 8] = *b"NCCLSHIM";
/// Readers refuse files with another major version.
pub const FORMAT_MAJOR: u16 = 1;
/// Readers accept any minor version; unknown kinds written by newer writers are skipped.
pub const FORMAT_MINOR: u16 = 0;
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
    pub _reserved: [u8; HEADER_SIZE - 376 - CLOCK_ANCHORS * 24],
}

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
    pub _reserved: [u8; 24],
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
    pub file_size: u64,
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
            file_size,
        })
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

fn round_up(v: u64, to: u64) -> Option<u64> {
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
