//! The defensive reader: decodes a dump into typed records without trusting a single byte.
//!
//! Every offset and length is checked against the real file size before it is used, so
//! allocations are bounded by the file itself; problems that leave the rest readable (a torn
//! slot, a truncated tail, a bad blob) become warnings, and only an unusable header is an error.
//! A file that is still being written is read with a seqlock check: slots whose commit word
//! changed while they were copied are counted as torn instead of returned half-updated.

use crate::layout::*;
use crate::liveness::writer_may_be_alive;
use crate::schema::{ArgView, BlobKind, CallId, RecordKind, SlotRef};
use crate::timebase::TimeCursor;
use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

mod stream;
pub use stream::{open_stream, DumpStream};

/// Why a file could not be read as a dump at all. Always names the file and the offset.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: {len} bytes is too short for a dump header (needs {HEADER_SIZE})")]
    TooShort { path: PathBuf, len: u64 },
    #[error("{path}: not an ncclshim dump (offset 0: magic {found:02x?})")]
    NotADump { path: PathBuf, found: [u8; 8] },
    #[error("{path}: the header is not written yet (offset 0: no magic); the writer was starting when it stopped or is starting now")]
    Incomplete { path: PathBuf, major: u16 },
    #[error("{path}: format {major}.{minor} is newer than this reader understands ({FORMAT_MAJOR}.x); upgrade ncclshim")]
    UnsupportedVersion {
        path: PathBuf,
        major: u16,
        minor: u16,
    },
    #[error("{path}: written on a machine of the other byte order (offset 12: {marker:#010x})")]
    WrongEndian { path: PathBuf, marker: u32 },
    #[error("{path}: corrupt header at offset {offset}: {what}")]
    BadHeader {
        path: PathBuf,
        offset: u64,
        what: String,
    },
}

/// Something wrong in one part of a file that did not stop the rest from being read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Warning {
    pub offset: u64,
    pub message: String,
}

/// The decoded header.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HeaderInfo {
    pub major: u16,
    pub minor: u16,
    pub writer_kind: Option<WriterKind>,
    pub writer_kind_raw: u32,
    pub writer_version: String,
    pub pid: u32,
    pub ppid: u32,
    pub pid_start_ticks: u64,
    /// The inode of the writer's PID namespace (format 2.2; 0: unknown).
    pub pid_namespace: u64,
    pub boot_id: String,
    pub hostname: String,
    pub clocksource: String,
    pub clock: ClockPair,
    pub ring_count: u32,
    pub slots_per_ring: u32,
    pub file_size: u64,
    pub arena_size: u64,
    pub flags: u32,
    pub clean_exit: bool,
    pub disabled: bool,
    pub nccl_static: bool,
    pub rings_claimed: u32,
    pub arena_used: u64,
    pub dropped_blobs: u64,
    pub counters: [u64; HEADER_COUNTERS],
    pub exit_monotonic_ns: Option<u64>,
    /// Time base of the records as written: `monotonic` or `tsc` (the reader converts TSC
    /// ticks, so every record time it returns is CLOCK_MONOTONIC nanoseconds).
    pub clock_kind: String,
    /// TSC ticks per second measured at creation (TSC dumps).
    pub tsc_hz: Option<u64>,
    /// Clock anchors found (TSC dumps).
    pub clock_anchors: usize,
    /// The writing process may still be running (same boot, pid and start time, no clean exit).
    pub writer_alive: bool,
    /// Latest sign of life that left no record (CLOCK_MONOTONIC ns; minor >= 1).
    pub last_alive_ns: Option<u64>,
    /// The first fatal signal the process received, when the shim's handler caught one.
    pub signal: Option<SignalInfo>,
    /// Communicators created beyond the table's capacity (not in `Dump::comms`).
    pub comms_not_kept: u32,
    /// Per-thread rings whose slots exist in the file (format 2 allocates a ring when a thread
    /// claims it; format 1 had every ring from the start, so this is the rings claimed).
    pub rings_materialized: u32,
    /// Threads whose ring could not be allocated (they wrote to the overflow ring).
    pub ring_alloc_failed: u32,
    /// The run the launcher put the process in (format 2; empty for older files).
    pub run: RunInfo,
    /// The last `exit` / `_exit` / `_Exit` call the process made (format 2.1, shim dumps).
    pub exit: Option<ExitInfo>,
}

/// How the process asked to end: which function, with which status, when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ExitInfo {
    pub via: ExitVia,
    /// The status passed (the process's exit status is its low 8 bits).
    pub status: i32,
    /// CLOCK_MONOTONIC ns.
    pub t_ns: u64,
}

/// The launcher's name for the run a process belonged to.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunInfo {
    /// `slurm`, `torchelastic`, `openmpi`, `pmix`, `lsf`, `pbs`, `flux`, `ncclshim` (empty: none).
    pub source: String,
    /// The id as the launcher gave it (empty: none).
    pub id: String,
    /// The launcher's rank for this process (-1: unknown).
    pub launcher_rank: i32,
}

/// A fatal signal recorded in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SignalInfo {
    pub signo: u32,
    /// `si_code`: > 0 raised by the kernel (a fault), <= 0 sent by a process (`kill`, `raise`).
    pub code: i32,
    pub tid: u32,
    pub sender_pid: u32,
    pub addr: u64,
    /// CLOCK_MONOTONIC ns.
    pub t_ns: u64,
    /// Fatal-class signals received in all.
    pub count: u32,
    /// Times the program's own handler for such a signal returned to the interrupted code
    /// (format 2.2; 0 before).
    pub handler_returns: u32,
}

/// One entry of the communicator table: a communicator this process created, and its progress.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CommInfo {
    pub index: u32,
    /// `layout::comm_state` value.
    pub state: u32,
    #[serde(serialize_with = "call_name")]
    pub created_by: Option<CallId>,
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
    /// CLOCK_MONOTONIC ns.
    pub created_ns: u64,
    pub ended_ns: Option<u64>,
    /// Operations issued (the last one's `seq` + 1).
    pub issued: u64,
    /// Operations whose call returned.
    pub completed: u64,
    #[serde(serialize_with = "call_name")]
    pub last_call: Option<CallId>,
    pub last_rc: i32,
    pub last_count: u64,
    pub last_datatype: Option<u8>,
    pub last_redop: Option<u8>,
    pub last_peer: i32,
    pub last_issued_ns: Option<u64>,
}

fn call_name<S: serde::Serializer>(c: &Option<CallId>, s: S) -> Result<S::Ok, S::Error> {
    match c {
        Some(c) => s.serialize_str(c.name()),
        None => s.serialize_none(),
    }
}

impl CommInfo {
    pub fn state_name(&self) -> &'static str {
        match self.state {
            comm_state::PENDING => "pending",
            comm_state::LIVE => "live",
            comm_state::DESTROYED => "destroyed",
            comm_state::ABORTED => "aborted",
            _ => "unknown",
        }
    }
}

/// One thread's ring.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RingInfo {
    pub index: u32,
    pub tid: u32,
    pub thread_name: String,
    pub shared: bool,
    pub head: u64,
    pub records: u64,
    pub torn: u64,
    pub lost: u64,
}

impl RingInfo {
    /// A ring's line before its slots are read: its identity from its directory entry `e`.
    fn from_dir_entry(index: u32, e: &[u8], shared: bool) -> Self {
        RingInfo {
            index,
            tid: u32_at(e, 0),
            thread_name: fixed_str(&e[16..32]),
            shared,
            head: u64_at(e, 8),
            records: 0,
            torn: 0,
            lost: 0,
        }
    }
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub ring: u32,
    pub seq: u64,
    pub tid: u32,
    pub kind_raw: u16,
    pub call_raw: u16,
    pub t_enter_ns: u64,
    /// `None` while the call is in flight (or was when the process died).
    pub t_exit_ns: Option<u64>,
    pub rc: i32,
    pub flags: u32,
    pub comm: u64,
    pub blob: u64,
    pub args: [u64; SLOT_ARGS],
}

impl Record {
    pub fn kind(&self) -> Option<RecordKind> {
        RecordKind::from_u16(self.kind_raw)
    }

    pub fn call(&self) -> Option<CallId> {
        CallId::from_u16(self.call_raw)
    }

    pub fn in_flight(&self) -> bool {
        self.t_exit_ns.is_none()
    }

    pub fn slot_ref(&self) -> SlotRef {
        SlotRef {
            ring: self.ring,
            seq: self.seq,
        }
    }

    /// The call's name, or `call_0x....` for an id this reader does not know.
    pub fn call_name(&self) -> String {
        self.call()
            .map(|c| c.name().to_owned())
            .unwrap_or_else(|| format!("call_{:#06x}", self.call_raw))
    }

    /// An argument by its schema name.
    pub fn arg(&self, name: &str) -> Option<u64> {
        let names = self.call()?.arg_names();
        let i = names.iter().position(|n| *n == name)?;
        self.args.get(i).copied()
    }

    /// The record's arguments as the typed view `V` ([`crate::schema::args`]), when `V` is the
    /// view of this record: its call's view for calls, events and profiler starts,
    /// `ProfStop` for a stop record, `ProfState` or `ProfGpuDone` for a state record. None for
    /// any other view and for an id this reader does not know.
    pub fn view<V: ArgView>(&self) -> Option<V> {
        let fits = match self.kind() {
            Some(RecordKind::ProfStop) => V::VIEW == "ProfStop",
            Some(RecordKind::ProfState) => matches!(V::VIEW, "ProfState" | "ProfGpuDone"),
            _ => self.call().is_some_and(|c| c.view_name() == V::VIEW),
        };
        fits.then(|| V::from_args(&self.args))
    }

    /// The operation's GPU span, when this is a `prof_state`
    /// [`PROF_STATE_GPU_DONE`](crate::schema::PROF_STATE_GPU_DONE) record.
    pub fn gpu_done(&self) -> Option<GpuDone> {
        let v = self.view::<crate::schema::args::ProfGpuDone>()?;
        (v.state == crate::schema::PROF_STATE_GPU_DONE).then_some(GpuDone {
            op: v.handle,
            gpu_start: v.gpu_start,
            gpu_stop: v.gpu_stop,
            channels: v.channels,
            clocked: self.flags & crate::schema::slot_flags::TIME_OF_NAMED == 0,
        })
    }
}

/// A profiler operation's GPU span over its kernel channels, from its GPU-done record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuDone {
    /// The operation's start record (`SlotRef::encode`).
    pub op: u64,
    /// Earliest channel start and latest channel stop, GPU %globaltimer ns.
    pub gpu_start: u64,
    pub gpu_stop: u64,
    pub channels: u64,
    /// The record read the clock (its time is when the plugin saw the last channel stop);
    /// otherwise it carries its operation's start time (`TIME_OF_NAMED`).
    pub clocked: bool,
}

/// One blob from the arena.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub offset: u64,
    pub kind_raw: u16,
    pub bytes: Vec<u8>,
}

impl Blob {
    pub fn kind(&self) -> Option<BlobKind> {
        BlobKind::from_u16(self.kind_raw)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// Counts over the whole file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub records: u64,
    pub torn: u64,
    pub lost: u64,
    pub in_flight: u64,
}

/// A decoded dump.
#[derive(Debug, Clone)]
pub struct Dump {
    pub path: PathBuf,
    pub header: HeaderInfo,
    pub rings: Vec<RingInfo>,
    /// Per ring in sequence order, rings in index order.
    pub records: Vec<Record>,
    /// Committed blobs by file offset.
    pub blobs: BTreeMap<u64, Blob>,
    pub summary: Summary,
    pub warnings: Vec<Warning>,
    /// The communicator table (format minor >= 1): identity and progress that never wrap.
    pub comms: Vec<CommInfo>,
}

impl Dump {
    /// Records lost to ring wrap per thread ring, for "raise NCCLSHIM_RING_SLOTS" notes.
    pub fn lost_by_ring(&self) -> impl Iterator<Item = &RingInfo> {
        self.rings.iter().filter(|r| r.lost > 0)
    }

    pub fn blob(&self, offset: u64) -> Option<&Blob> {
        self.blobs.get(&offset)
    }

    /// Records sorted by entry time (ties by ring and sequence).
    pub fn records_by_time(&self) -> Vec<&Record> {
        let mut v: Vec<&Record> = self.records.iter().collect();
        v.sort_by_key(|r| (r.t_enter_ns, r.ring, r.seq));
        v
    }
}

/// Random access to the bytes of a dump: a file (read with `pread`, so a file that shrinks
/// under us gives an error instead of SIGBUS) or a byte slice (tests, fuzzing).
pub trait Source {
    fn size(&self) -> io::Result<u64>;
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
}

impl Source for std::fs::File {
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_exact_at(buf, offset)
    }
}

impl Source for [u8] {
    fn size(&self) -> io::Result<u64> {
        Ok(<[u8]>::len(self) as u64)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let end = start
            .checked_add(buf.len())
            .filter(|&e| e <= <[u8]>::len(self))
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(&self[start..end]);
        Ok(())
    }
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// A field of one slot (`o` is a constant offset inside it, so the check folds away).
#[inline(always)]
fn slot_u64(s: &[u8; SLOT_SIZE], o: usize) -> u64 {
    u64::from_le_bytes(s[o..o + 8].try_into().expect("8 bytes inside the slot"))
}

#[inline(always)]
fn slot_u32(s: &[u8; SLOT_SIZE], o: usize) -> u32 {
    u32::from_le_bytes(s[o..o + 4].try_into().expect("4 bytes inside the slot"))
}

fn i32_at(b: &[u8], o: usize) -> i32 {
    u32_at(b, o) as i32
}

/// Reads a dump file from disk.
pub fn read_dump(path: &Path) -> Result<Dump, DumpError> {
    let file = open_dump_file(path)?;
    decode(&file, path)
}

/// Opens a dump for reading: a regular file only, and without waiting on a FIFO.
fn open_dump_file(path: &Path) -> Result<std::fs::File, DumpError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| DumpError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Non-blocking: opening a FIFO named like a dump would otherwise wait forever for a writer.
    // O_NONBLOCK is 0o4000 on every Linux architecture this builds for (asm-generic/fcntl.h).
    const O_NONBLOCK: i32 = 0o4000;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    if !file.metadata().map_err(io)?.is_file() {
        return Err(io(io::Error::other(
            "not a regular file (a FIFO, socket or device is never read)",
        )));
    }
    Ok(file)
}

/// Decodes a dump from bytes in memory (`path` is only used in messages).
pub fn decode_bytes(bytes: &[u8], path: &Path) -> Result<Dump, DumpError> {
    decode(bytes, path)
}

struct Geo {
    time_base: crate::timebase::TimeBase,
    /// Bytes actually present: every read is clipped to this, so a header that claims a huge
    /// geometry on a small file cannot make the reader allocate more than the file holds.
    len: u64,
    ring_dir_offset: u64,
    rings_offset: u64,
    arena_offset: u64,
    arena_size: u64,
    keep_offset: u64,
    keep_slots: u32,
    comm_offset: u64,
    /// Entries handed out and present (at most the table's size).
    comm_entries: u32,
    /// The keep ring's directory entry, copied from the header.
    keep_dir: Vec<u8>,
    /// Format 2: rings and blobs are extents of a growing tail from `arena_offset` to `tail_end`.
    grows: bool,
    overflow_slots: u32,
    tail_end: u64,
}

/// Decodes any `Source`.
pub fn decode<S: Source + ?Sized>(src: &S, path: &Path) -> Result<Dump, DumpError> {
    let (mut dump, g) = decode_header(src, path)?;
    read_rings(src, &g, &mut dump);
    read_blobs(src, &g, &mut dump);
    read_comm_table(src, &g, &mut dump);
    Ok(dump)
}

/// The header checked and decoded, and the file's geometry: a `Dump` with no records, blobs or
/// communicators yet (`decode` and the streaming reader fill those in).
fn decode_header<S: Source + ?Sized>(src: &S, path: &Path) -> Result<(Dump, Geo), DumpError> {
    let p = || path.to_path_buf();
    let io_err = |source| DumpError::Io { path: p(), source };
    let len = src.size().map_err(io_err)?;
    if len < HEADER_SIZE as u64 {
        return Err(DumpError::TooShort { path: p(), len });
    }
    let mut h = vec![0u8; HEADER_SIZE];
    src.read_at(0, &mut h).map_err(io_err)?;
    let magic: [u8; 8] = h[0..8].try_into().expect("8 bytes");
    let major = u16_at(&h, 8);
    let minor = u16_at(&h, 10);
    if magic != MAGIC {
        // A writer fills the header and stores the magic last.
        if magic == [0; 8]
            && ((OLDEST_MAJOR..=FORMAT_MAJOR).contains(&major) || h[..16].iter().all(|&b| b == 0))
        {
            return Err(DumpError::Incomplete { path: p(), major });
        }
        return Err(DumpError::NotADump {
            path: p(),
            found: magic,
        });
    }
    let endian = u32_at(&h, 12);
    if endian != ENDIAN_MARKER {
        if endian.swap_bytes() == ENDIAN_MARKER {
            return Err(DumpError::WrongEndian {
                path: p(),
                marker: endian,
            });
        }
        return bad(path, 12, format!("endian marker {endian:#x}"));
    }
    if !(OLDEST_MAJOR..=FORMAT_MAJOR).contains(&major) {
        return Err(DumpError::UnsupportedVersion {
            path: p(),
            major,
            minor,
        });
    }
    let (header_size, slot_size) = (u32_at(&h, 16), u32_at(&h, 20));
    if header_size as usize != HEADER_SIZE || slot_size as usize != SLOT_SIZE {
        return bad(
            path,
            16,
            format!("header size {header_size} / slot size {slot_size}"),
        );
    }
    let ring_count = u32_at(&h, 216);
    let slots_per_ring = u32_at(&h, 220);
    let claimed = (
        u64_at(&h, 224),
        u64_at(&h, 232),
        u64_at(&h, 240),
        u64_at(&h, 248),
    );
    let file_size = u64_at(&h, 256);
    let x = HEADER_EXT_OFFSET;
    let grows = major >= 2;
    // Minor 0 files have zeros in the extension (it was reserved space).
    let (keep_slots, comm_entries) = if minor >= 1 || grows {
        (u32_at(&h, x), u32_at(&h, x + 4))
    } else {
        (0, 0)
    };
    let (keep_offset, comm_offset) = (u64_at(&h, x + 8), u64_at(&h, x + 16));
    let x2 = HEADER_EXT2_OFFSET;
    let (overflow_slots, tail_max) = (u32_at(&h, x2), u64_at(&h, x2 + 16));
    // The geometry is recomputed from the counts, never taken on trust.
    let geo = if grows {
        Geometry::grown(
            ring_count,
            slots_per_ring,
            claimed.3,
            keep_slots,
            comm_entries,
            overflow_slots,
        )
        .filter(|g| g.tail_max == tail_max && overflow_slots.is_power_of_two())
    } else {
        Geometry::with_extras(
            ring_count,
            slots_per_ring,
            claimed.3,
            keep_slots,
            comm_entries,
        )
    }
    .filter(|g| {
        (g.ring_dir_offset, g.rings_offset, g.arena_offset, g.arena_size, g.file_size)
            == (claimed.0, claimed.1, claimed.2, claimed.3, file_size)
            && (minor == 0 || (g.keep_offset, g.comm_offset) == (keep_offset, comm_offset))
            && (keep_slots == 0 || keep_slots.is_power_of_two())
    })
        .ok_or_else(|| DumpError::BadHeader {
            path: p(),
            offset: 216,
            what: format!(
                "inconsistent geometry: {ring_count} rings x {slots_per_ring} slots, offsets {claimed:?}, size {file_size}"
            ),
        })?;
    let mut warnings = Vec::new();
    if len < file_size {
        warnings.push(Warning {
            offset: len,
            message: format!("file truncated: {len} of {file_size} bytes present"),
        });
    }
    let flags_v = u32_at(&h, 264);
    let counters: [u64; HEADER_COUNTERS] = std::array::from_fn(|i| u64_at(&h, 288 + 8 * i));
    let exit_ns = u64_at(&h, 352);
    let boot_id = fixed_str(&h[64..104]);
    let pid = u32_at(&h, 48);
    let pid_start_ticks = u64_at(&h, 56);
    let clean_exit = flags_v & flags::CLEAN_EXIT != 0;
    let pid_namespace = if grows { u64_at(&h, x2 + 24) } else { 0 };
    let writer_alive =
        !clean_exit && writer_may_be_alive(&boot_id, pid_namespace, pid, pid_start_ticks);
    let writer_kind_raw = u32_at(&h, 28);
    let clock_kind = u32_at(&h, 360);
    let tsc_hz = u64_at(&h, 368);
    let anchors: Vec<(u64, u64)> = (0..crate::timebase::ANCHORS)
        .map(|i| 376 + 24 * i)
        .filter(|&o| u64_at(&h, o) != 0)
        .map(|o| (u64_at(&h, o + 8), u64_at(&h, o + 16)))
        .collect();
    let time_base = crate::timebase::TimeBase::new(clock_kind, tsc_hz, &anchors);
    if time_base.is_none() {
        warnings.push(Warning {
            offset: 360,
            message: format!(
                "record times are in an unknown time base (kind {clock_kind}, rate {tsc_hz}); shown raw"
            ),
        });
    }
    let tb = time_base
        .clone()
        .unwrap_or(crate::timebase::TimeBase::Monotonic);
    let last_alive = u64_at(&h, x + 24);
    let sig = x + 40;
    let signo = u32_at(&h, sig);
    let signal = ((minor >= 1 || grows) && signo != 0 && signo < 65).then(|| SignalInfo {
        signo,
        code: i32_at(&h, sig + 4),
        tid: u32_at(&h, sig + 8),
        sender_pid: u32_at(&h, sig + 12),
        addr: u64_at(&h, sig + 16),
        t_ns: tb.to_monotonic_ns(u64_at(&h, sig + 24)),
        count: u32_at(&h, sig + 32),
        handler_returns: if grows { u32_at(&h, x2 + 140) } else { 0 },
    });
    let ext1 = minor >= 1 || grows;
    let comm_next = if ext1 { u32_at(&h, x + 32) } else { 0 };
    let tail_reserved = if grows { u64_at(&h, x2 + 8) } else { 0 };
    let header = HeaderInfo {
        last_alive_ns: (ext1 && last_alive != 0).then(|| tb.to_monotonic_ns(last_alive)),
        rings_materialized: if grows {
            u32_at(&h, x2 + 4).min(ring_count)
        } else {
            u32_at(&h, 268).min(ring_count)
        },
        ring_alloc_failed: if grows { u32_at(&h, x2 + 32) } else { 0 },
        run: if grows {
            RunInfo {
                source: fixed_str(&h[x2 + 40..x2 + 64]),
                id: fixed_str(&h[x2 + 64..x2 + 128]),
                launcher_rank: i32_at(&h, x2 + 128),
            }
        } else {
            RunInfo::default()
        },
        signal,
        exit: if grows {
            ExitVia::from_u32(u32_at(&h, x2 + 132)).map(|via| ExitInfo {
                via,
                status: i32_at(&h, x2 + 136),
                t_ns: u64_at(&h, x2 + 144),
            })
        } else {
            None
        },
        comms_not_kept: comm_next.saturating_sub(geo.comm_entries),
        major,
        minor,
        writer_kind: WriterKind::from_u32(writer_kind_raw),
        writer_kind_raw,
        writer_version: fixed_str(&h[32..48]),
        pid,
        ppid: u32_at(&h, 52),
        pid_start_ticks,
        pid_namespace,
        boot_id,
        hostname: fixed_str(&h[104..168]),
        clocksource: fixed_str(&h[168..184]),
        clock: ClockPair {
            monotonic_ns: u64_at(&h, 184),
            realtime_ns: u64_at(&h, 192),
            boottime_ns: u64_at(&h, 200),
            uncertainty_ns: u64_at(&h, 208),
        },
        ring_count,
        slots_per_ring,
        file_size,
        arena_size: geo.arena_size,
        flags: flags_v,
        clean_exit,
        disabled: flags_v & flags::DISABLED != 0,
        nccl_static: flags_v & flags::NCCL_STATIC != 0,
        rings_claimed: u32_at(&h, 268).min(ring_count),
        arena_used: u64_at(&h, 272).min(geo.arena_size),
        dropped_blobs: u64_at(&h, 280),
        counters,
        exit_monotonic_ns: (clean_exit && exit_ns != 0).then_some(exit_ns),
        clock_kind: match clock_kind {
            0 => "monotonic".into(),
            1 => "tsc".into(),
            k => format!("unknown({k})"),
        },
        tsc_hz: (clock_kind == 1 && tsc_hz != 0).then_some(tsc_hz),
        clock_anchors: anchors.len(),
        writer_alive,
    };
    let g = Geo {
        time_base: time_base.unwrap_or(crate::timebase::TimeBase::Monotonic),
        len,
        ring_dir_offset: geo.ring_dir_offset,
        rings_offset: geo.rings_offset,
        arena_offset: geo.arena_offset,
        arena_size: geo.arena_size,
        keep_offset: geo.keep_offset,
        keep_slots: geo.keep_slots,
        comm_offset: geo.comm_offset,
        comm_entries: geo.comm_entries.min(comm_next),
        keep_dir: h[x + 80..x + 144].to_vec(),
        grows,
        overflow_slots: geo.overflow_slots,
        tail_end: geo
            .arena_offset
            .saturating_add(tail_reserved.min(geo.tail_max)),
    };
    let dump = Dump {
        comms: Vec::new(),
        path: p(),
        header,
        rings: Vec::new(),
        records: Vec::new(),
        blobs: BTreeMap::new(),
        summary: Summary::default(),
        warnings,
    };
    Ok((dump, g))
}

fn bad<T>(path: &Path, offset: u64, what: String) -> Result<T, DumpError> {
    Err(DumpError::BadHeader {
        path: path.to_path_buf(),
        offset,
        what,
    })
}

fn read_rings<S: Source + ?Sized>(src: &S, g: &Geo, dump: &mut Dump) {
    let ring_count = dump.header.ring_count;
    let cap = u64::from(dump.header.slots_per_ring);
    let live = dump.header.writer_alive;
    let dir_len = (u64::from(ring_count) + 1) * RING_DIR_ENTRY_SIZE as u64;
    if g.ring_dir_offset + dir_len > g.len {
        dump.warnings.push(Warning {
            offset: g.ring_dir_offset,
            message: "ring directory cut off by truncation; no records readable".into(),
        });
        return;
    }
    let mut dir = vec![0u8; dir_len as usize];
    if let Err(e) = src.read_at(g.ring_dir_offset, &mut dir) {
        dump.warnings.push(Warning {
            offset: g.ring_dir_offset,
            message: format!("ring directory unreadable: {e}"),
        });
        return;
    }
    for ring in 0..=ring_count {
        let e = &dir[ring as usize * RING_DIR_ENTRY_SIZE..][..RING_DIR_ENTRY_SIZE];
        if g.grows {
            read_grown_ring(src, g, dump, ring, e);
            continue;
        }
        let ring_offset = g.rings_offset + u64::from(ring) * cap * SLOT_SIZE as u64;
        read_ring(
            src,
            g,
            dump,
            ring,
            e,
            ring_offset,
            cap,
            ring == ring_count,
            live,
        );
    }
    if g.keep_slots > 0 && g.keep_dir.len() == RING_DIR_ENTRY_SIZE {
        let e = g.keep_dir.clone();
        let keep = ring_count + 1;
        read_ring(
            src,
            g,
            dump,
            keep,
            &e,
            g.keep_offset,
            u64::from(g.keep_slots),
            true,
            live,
        );
        drop_kept_copies(dump);
    }
}

/// Format 2: a ring's slots are where its directory entry says (the overflow ring's at
/// `rings_offset`); a ring whose allocation failed or is under way has none.
fn read_grown_ring<S: Source + ?Sized>(src: &S, g: &Geo, dump: &mut Dump, ring: u32, e: &[u8]) {
    let overflow = ring == dump.header.ring_count;
    if overflow {
        let cap = u64::from(g.overflow_slots);
        read_ring(
            src,
            g,
            dump,
            ring,
            e,
            g.rings_offset,
            cap,
            true,
            dump.header.writer_alive,
        );
        return;
    }
    if u32_at(e, 4) != ring_state::CLAIMED {
        return;
    }
    let (offset, slots) = (u64_at(e, 40), u32_at(e, 48));
    let fits = offset >= g.arena_offset
        && offset.is_multiple_of(4096)
        && slots == dump.header.slots_per_ring
        && offset
            .checked_add(u64::from(slots) * SLOT_SIZE as u64)
            .is_some_and(|end| end <= g.tail_end.max(g.arena_offset));
    if !fits {
        dump.warnings.push(Warning {
            offset: g.ring_dir_offset + u64::from(ring) * RING_DIR_ENTRY_SIZE as u64,
            message: format!(
                "ring {ring}: slots at offset {offset} ({slots} slots) lie outside the file's tail"
            ),
        });
        return;
    }
    let live = dump.header.writer_alive;
    read_ring(src, g, dump, ring, e, offset, u64::from(slots), false, live);
}

/// A keep-ring copy of a failed call (`KEEP_COPY`) stands in for its original only once the
/// thread's ring overwrote the original: while both are there, readers see the original alone.
fn drop_kept_copies(dump: &mut Dump) {
    use crate::schema::slot_flags::KEEP_COPY;
    if !dump.records.iter().any(|r| r.flags & KEEP_COPY != 0) {
        return;
    }
    let key = |r: &Record| (r.tid, r.t_enter_ns, r.call_raw);
    // The copies are few (the keep ring is small) and the originals are every record of the
    // dump: look each original up among the sorted copies instead of hashing them all.
    let mut copies: Vec<(u32, u64, u16)> = dump
        .records
        .iter()
        .filter(|r| r.flags & KEEP_COPY != 0)
        .map(key)
        .collect();
    copies.sort_unstable();
    let mut copied: Vec<(u32, u64, u16)> = dump
        .records
        .iter()
        .filter(|r| r.flags & KEEP_COPY == 0 && copies.binary_search(&key(r)).is_ok())
        .map(key)
        .collect();
    copied.sort_unstable();
    let before = dump.records.len();
    dump.records
        .retain(|r| r.flags & KEEP_COPY == 0 || copied.binary_search(&key(r)).is_err());
    let dropped = (before - dump.records.len()) as u64;
    dump.summary.records = dump.summary.records.saturating_sub(dropped);
}

/// A scratch buffer larger than this (a ring of unusual size) is freed after use, not kept.
const SCRATCH_KEPT_MAX: usize = 16 << 20;

thread_local! {
    /// One ring's slot bytes while they are decoded (see `read_ring`).
    static RING_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Reads one ring whose directory entry is `e` and whose slots start at `ring_offset`.
#[allow(clippy::too_many_arguments)] // one ring's coordinates, all needed
fn read_ring<S: Source + ?Sized>(
    src: &S,
    g: &Geo,
    dump: &mut Dump,
    ring: u32,
    e: &[u8],
    ring_offset: u64,
    cap: u64,
    shared: bool,
    live: bool,
) {
    {
        let (state, head) = (u32_at(e, 4), u64_at(e, 8));
        if state == 0 && head == 0 {
            return;
        }
        // A slot one past the published head may hold a committed record whose head store was
        // cut off, or a torn one: read it too. The overflow ring's head is a reservation count.
        let mut used = head.saturating_add(1).min(cap);
        let present = g.len.saturating_sub(ring_offset) / SLOT_SIZE as u64;
        if present < used {
            dump.warnings.push(Warning {
                offset: ring_offset + present * SLOT_SIZE as u64,
                message: format!(
                    "ring {ring} cut off by truncation after {present} of {used} slots"
                ),
            });
            used = present;
        }
        // The slots are copied into this thread's scratch buffer, reused from ring to ring and
        // dump to dump: a fresh zeroed buffer per ring cost page faults on every dump.
        // It only ever grows: zeroing it again for each ring (a small ring, then a large one)
        // cost a memset of the whole ring per dump.
        let mut scratch = RING_SCRATCH.with_borrow_mut(std::mem::take);
        let ring_bytes = used as usize * SLOT_SIZE;
        if scratch.len() < ring_bytes {
            scratch.resize(ring_bytes, 0);
        }
        let buf = &mut scratch[..ring_bytes];
        if let Err(err) = src.read_at(ring_offset, buf) {
            dump.warnings.push(Warning {
                offset: ring_offset,
                message: format!("ring {ring} unreadable: {err}"),
            });
            RING_SCRATCH.set(scratch);
            return;
        }
        let recheck = if live {
            let mut again = vec![0u8; buf.len()];
            src.read_at(ring_offset, &mut again).ok().map(|_| again)
        } else {
            None
        };
        let mut info = RingInfo::from_dir_entry(ring, e, shared);
        // The ring's records go straight to the end of the dump's list (one copy of each slot's
        // fields instead of two: this loop runs for every slot of every dump of a job).
        let first = dump.records.len();
        let used = used as usize;
        dump.records.reserve(used);
        // In slot order a wrapped ring is two runs of rising numbers (the newest lap, then the
        // rest of the previous one). Reading from the slot with the lowest number reads them in
        // order, so they need no sort (sorting moved every 128-byte record around).
        // Whole slots as arrays: every field below is at a fixed offset inside one, so the
        // decoding carries no bounds checks (per slot of every dump of a job, they were most of
        // its instructions).
        let (slots, _) = buf.as_chunks::<SLOT_SIZE>();
        let mut clock = g.time_base.cursor();
        let start = slots
            .iter()
            .enumerate()
            .filter_map(|(idx, s)| {
                let commit = slot_u64(s, 0);
                (commit & 1 == 1).then_some((commit >> 1, idx))
            })
            .min()
            .map_or(0, |(_, idx)| idx);
        for idx in (start..used).chain(0..start) {
            let s = &slots[idx];
            let commit = slot_u64(s, 0);
            if commit == 0 {
                continue;
            }
            let changed = recheck
                .as_ref()
                .is_some_and(|a| u64_at(a, idx * SLOT_SIZE) != commit);
            let seq = commit >> 1;
            if commit & 1 == 0 || changed {
                info.torn += 1;
                continue;
            }
            if seq == 0 || (seq - 1) % cap != idx as u64 || seq > head.saturating_add(1) {
                dump.warnings.push(Warning {
                    offset: ring_offset + (idx * SLOT_SIZE) as u64,
                    message: format!(
                        "ring {ring} slot {idx}: commit word {commit:#x} does not belong here"
                    ),
                });
                continue;
            }
            dump.records
                .push(record_from_slot(&mut clock, ring, seq, s));
        }
        if scratch.capacity() <= SCRATCH_KEPT_MAX {
            RING_SCRATCH.set(scratch);
        }
        let max_seq = dump.records[first..]
            .iter()
            .map(|r| r.seq)
            .max()
            .unwrap_or(0);
        // Only a damaged ring (a slot left from an older lap among newer ones) is out of order.
        let ring_records = &mut dump.records[first..];
        if !ring_records.is_sorted_by_key(|r| r.seq) {
            ring_records.sort_by_key(|r| r.seq);
        }
        // Slots older than one lap were overwritten by a newer lap: they sort first.
        let stale = dump.records[first..].partition_point(|r| r.seq.saturating_add(cap) <= max_seq);
        dump.records.drain(first..first + stale);
        let kept = &dump.records[first..];
        info.lost = max_seq.saturating_sub(cap);
        info.records = kept.len() as u64;
        // A corrupt head can claim up to 2^64 lost records per ring, so the totals saturate
        // instead of overflowing (found by the `decode` fuzz target).
        let in_flight = kept
            .iter()
            .filter(|r| r.in_flight() && r.kind() == Some(RecordKind::Call))
            .count() as u64;
        dump.summary.records = dump.summary.records.saturating_add(info.records);
        dump.summary.torn = dump.summary.torn.saturating_add(info.torn);
        dump.summary.lost = dump.summary.lost.saturating_add(info.lost);
        dump.summary.in_flight = dump.summary.in_flight.saturating_add(in_flight);
        dump.rings.push(info);
    }
}

/// One committed slot's fields as a record (`seq` from its commit word, checked by the caller).
/// Always inlined: a call returned the 160-byte record through a `memcpy` per slot.
#[inline(always)]
fn record_from_slot(clock: &mut TimeCursor, ring: u32, seq: u64, s: &[u8; SLOT_SIZE]) -> Record {
    // Every field is at a fixed offset inside the slot array: no bounds checks (this runs for
    // every slot of every dump of a job).
    let t_exit = slot_u64(s, 16);
    Record {
        ring,
        seq,
        tid: slot_u32(s, 36),
        kind_raw: u16::from_le_bytes([s[24], s[25]]),
        call_raw: u16::from_le_bytes([s[26], s[27]]),
        t_enter_ns: clock.to_monotonic_ns(slot_u64(s, 8)),
        t_exit_ns: (t_exit != IN_FLIGHT).then(|| clock.to_monotonic_ns(t_exit)),
        rc: slot_u32(s, 28) as i32,
        flags: slot_u32(s, 32),
        comm: slot_u64(s, 40),
        blob: slot_u64(s, 48),
        args: std::array::from_fn(|i| slot_u64(s, 56 + 8 * i)),
    }
}

/// Reads the communicator table's claimed entries (format minor >= 1).
fn read_comm_table<S: Source + ?Sized>(src: &S, g: &Geo, dump: &mut Dump) {
    if g.comm_entries == 0 {
        return;
    }
    let bytes = u64::from(g.comm_entries) * COMM_ENTRY_SIZE as u64;
    if g.comm_offset.saturating_add(bytes) > g.len {
        dump.warnings.push(Warning {
            offset: g.comm_offset,
            message: "communicator table cut off by truncation".into(),
        });
        return;
    }
    let mut buf = vec![0u8; bytes as usize];
    if let Err(e) = src.read_at(g.comm_offset, &mut buf) {
        dump.warnings.push(Warning {
            offset: g.comm_offset,
            message: format!("communicator table unreadable: {e}"),
        });
        return;
    }
    let tb = &g.time_base;
    let t = |v: u64| (v != 0).then(|| tb.to_monotonic_ns(v));
    for (i, e) in buf.chunks_exact(COMM_ENTRY_SIZE).enumerate() {
        let state = u32_at(e, 0);
        if state == comm_state::FREE || state > comm_state::ABORTED {
            continue;
        }
        let dtype_op = u32_at(e, 112);
        let small = |v: u32| (v & 0xff != 0xff).then_some((v & 0xff) as u8);
        dump.comms.push(CommInfo {
            index: i as u32,
            state,
            created_by: CallId::from_u16(u32_at(e, 4) as u16),
            comm: u64_at(e, 8),
            comm_hash: u64_at(e, 16),
            uid_hash: u64_at(e, 24),
            nranks: i32_at(e, 32),
            rank: i32_at(e, 36),
            cuda_dev: i32_at(e, 40),
            nccl_version: i32_at(e, 44),
            parent_hash: u64_at(e, 48),
            split_color: i32_at(e, 56),
            split_key: i32_at(e, 60),
            created_ns: t(u64_at(e, 64)).unwrap_or(0),
            ended_ns: t(u64_at(e, 72)),
            issued: u64_at(e, 80),
            completed: u64_at(e, 88),
            last_call: CallId::from_u16(u32_at(e, 96) as u16).filter(|_| u32_at(e, 96) != 0),
            last_rc: i32_at(e, 100),
            last_count: u64_at(e, 104),
            last_datatype: small(dtype_op),
            last_redop: small(dtype_op >> 8),
            last_peer: i32_at(e, 116),
            last_issued_ns: t(u64_at(e, 120)),
        });
    }
}

fn read_blobs<S: Source + ?Sized>(src: &S, g: &Geo, dump: &mut Dump) {
    if g.grows {
        read_tail(src, g, dump);
        return;
    }
    let mut used = dump.header.arena_used;
    let present = g.len.saturating_sub(g.arena_offset);
    if present < used {
        dump.warnings.push(Warning {
            offset: g.arena_offset + present,
            message: format!("blob arena cut off by truncation after {present} of {used} bytes"),
        });
        used = present;
    }
    if used == 0 {
        return;
    }
    let mut arena = vec![0u8; used as usize];
    if let Err(e) = src.read_at(g.arena_offset, &mut arena) {
        dump.warnings.push(Warning {
            offset: g.arena_offset,
            message: format!("blob arena unreadable: {e}"),
        });
        return;
    }
    let mut at = 0usize;
    while at + BLOB_HEADER_SIZE <= arena.len() {
        let len = u32_at(&arena, at) as usize;
        let kind = u16_at(&arena, at + 4);
        let commit = u32_at(&arena, at + 8);
        let file_offset = g.arena_offset + at as u64;
        if len == 0 && commit == 0 {
            // Reserved but never written (the writer died between reserving and writing):
            // the size is unknown, so nothing after it can be walked to.
            dump.warnings.push(Warning {
                offset: file_offset,
                message: "blob arena ends in an unwritten blob; later blobs unreachable".into(),
            });
            break;
        }
        let end = at + BLOB_HEADER_SIZE + len;
        if end > arena.len() || len as u64 > g.arena_size {
            dump.warnings.push(Warning {
                offset: file_offset,
                message: format!("blob length {len} runs past the arena"),
            });
            break;
        }
        if commit == BLOB_COMMITTED {
            dump.blobs.insert(
                file_offset,
                Blob {
                    offset: file_offset,
                    kind_raw: kind,
                    bytes: arena[at + BLOB_HEADER_SIZE..end].to_vec(),
                },
            );
        }
        at = (end + 7) & !7;
    }
}

/// Format 2: walks the tail's extents (blobs, ring slots, padding), keeping the blobs. An
/// extent that is not written (an allocation under way, or cut off by a crash or a full disk)
/// stops the walk; blobs that records point to past it are then read one by one.
fn read_tail<S: Source + ?Sized>(src: &S, g: &Geo, dump: &mut Dump) {
    let end = g.tail_end.min(g.len);
    let mut at = g.arena_offset;
    let mut stopped = None;
    while at + BLOB_HEADER_SIZE as u64 <= end {
        match read_extent(src, g, at, end) {
            Extent::Blob(b) => {
                at = (at + BLOB_HEADER_SIZE as u64 + b.bytes.len() as u64 + 7) & !7;
                dump.blobs.insert(b.offset, b);
            }
            Extent::Skip(next) => at = next,
            Extent::Bad(why) => {
                stopped = Some((at, why));
                break;
            }
        }
    }
    if let Some((offset, why)) = stopped {
        let wanted: Vec<u64> = dump
            .records
            .iter()
            .map(|r| r.blob)
            .filter(|&b| b > offset && !dump.blobs.contains_key(&b))
            .collect();
        for b in wanted {
            if let Extent::Blob(blob) = read_extent(src, g, b, end) {
                dump.blobs.insert(b, blob);
            }
        }
        if !dump.header.writer_alive {
            dump.warnings.push(Warning {
                offset,
                message: format!(
                    "file tail: {why}; blobs after it are read only where a record points to them"
                ),
            });
        }
    }
}

enum Extent {
    Blob(Blob),
    /// Not a blob (ring slots, padding, an uncommitted blob): the offset of the next extent.
    Skip(u64),
    Bad(String),
}

fn read_extent<S: Source + ?Sized>(src: &S, g: &Geo, at: u64, end: u64) -> Extent {
    let mut hdr = [0u8; BLOB_HEADER_SIZE];
    // `at` may come from a record's blob field: any u64, so the sum is checked.
    let header_end = at.checked_add(BLOB_HEADER_SIZE as u64);
    if at < g.arena_offset || !at.is_multiple_of(8) || header_end.is_none_or(|e| e > end) {
        return Extent::Bad(format!("extent offset {at} outside the tail"));
    }
    if let Err(e) = src.read_at(at, &mut hdr) {
        return Extent::Bad(format!("unreadable: {e}"));
    }
    let (len, kind, commit) = (u32_at(&hdr, 0), u16_at(&hdr, 4), u32_at(&hdr, 8));
    if len == 0 && commit == 0 {
        return Extent::Bad("an extent is not written (allocation under way, or cut off)".into());
    }
    let payload = at + BLOB_HEADER_SIZE as u64;
    let next = (payload + u64::from(len) + 7) & !7;
    if payload + u64::from(len) > end {
        return Extent::Bad(format!("extent length {len} runs past the end of the file"));
    }
    let kind_v = BlobKind::from_u16(kind);
    if commit != BLOB_COMMITTED || matches!(kind_v, Some(BlobKind::RingSlots | BlobKind::Pad)) {
        return Extent::Skip(next);
    }
    let mut bytes = vec![0u8; len as usize];
    if let Err(e) = src.read_at(payload, &mut bytes) {
        return Extent::Bad(format!("unreadable: {e}"));
    }
    Extent::Blob(Blob {
        offset: at,
        kind_raw: kind,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{args, PROF_STATE_GPU_DONE};

    fn record(kind: RecordKind, call: CallId, args: [u64; SLOT_ARGS]) -> Record {
        Record {
            ring: 0,
            seq: 1,
            tid: 1,
            kind_raw: kind as u16,
            call_raw: call as u16,
            t_enter_ns: 10,
            t_exit_ns: Some(20),
            rc: 0,
            flags: 0,
            comm: 0,
            blob: 0,
            args,
        }
    }

    #[test]
    fn a_record_reads_only_through_its_own_view() {
        let words = [5, 7, 1, u64::MAX, 0xa0, 0xb0, 0x10, 42, 42];
        let r = record(RecordKind::Call, CallId::NcclBroadcast, words);
        let c = r
            .view::<args::Collective>()
            .expect("a broadcast is a collective");
        assert_eq!((c.count, c.datatype, c.root, c.seq), (5, 7, u64::MAX, 42));
        assert_eq!(r.view::<args::PointToPoint>(), None);
        assert_eq!(r.view::<args::CommInitRank>(), None);
        let send = record(RecordKind::Call, CallId::NcclSend, words);
        assert_eq!(send.view::<args::PointToPoint>().unwrap().peer, u64::MAX);

        // Stop and state records are read by their own layout, whatever event they name.
        let stop = record(
            RecordKind::ProfStop,
            CallId::ProfColl,
            [9, 0, 0, 0, 0, 0, 0, 0, 0],
        );
        assert_eq!(stop.view::<args::ProfStop>().unwrap().handle, 9);
        assert_eq!(stop.view::<args::ProfColl>(), None);
        let done = args::ProfGpuDone {
            handle: 9,
            state: PROF_STATE_GPU_DONE,
            gpu_start: 100,
            gpu_stop: 250,
            channels: 2,
        };
        let state = record(RecordKind::ProfState, CallId::ProfColl, done.to_args());
        let g = state.gpu_done().expect("a GPU-done state");
        assert_eq!(
            (g.op, g.gpu_start, g.gpu_stop, g.channels),
            (9, 100, 250, 2)
        );
    }
}
