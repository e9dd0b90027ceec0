//! What the reader gives: the decoded dump ([`Dump`]) and its parts (header, rings, records,
//! blobs, communicators), the warnings about what could not be read, and the errors that make a
//! file unreadable as a whole.

use super::bytes::*;
use crate::layout::*;
use crate::schema::{ArgView, BlobKind, CallId, RecordKind, SlotRef};
use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;

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
    pub(super) fn from_dir_entry(index: u32, e: &[u8], shared: bool) -> Self {
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
