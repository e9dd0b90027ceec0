//! The diagnosis model: one [`ProcessModel`] per process (its shim and profiler dumps joined by
//! host, boot id, pid and start time), its communicator memberships, calls, errors with NCCL's
//! text, snapshots and profiler events, all on one wall-clock time base; and a [`JobModel`] that
//! joins processes into communicators by commHash / uniqueId hash and orders every failure in
//! time so the first failing rank can be named.

pub mod aggregates;
pub mod endpoints;
pub mod facts;
pub mod references;
pub mod serial;

use crate::names::{nccl_version_string, rc_name};
use facts::{GpuFacts, HostFacts, LibFacts};
use ncclshim_format::reader::{Dump, Record};
use ncclshim_format::schema::slot_flags;
use ncclshim_format::{
    args, ArgView, BlobKind, CallId, ExitVia, NcclResult, RecordKind, WriterKind,
};
use rayon::prelude::*;
// Per-record maps keyed by the dump's integers: FxHash (see the workspace Cargo.toml).
use rustc_hash::FxHashMap;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One intercepted call (NCCL or CUDA driver).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CallEvent {
    #[serde(with = "serial::optional_call_id")]
    pub call: Option<CallId>,
    /// The call's name (borrowed from the schema for every known id: millions of calls).
    /// Written to a summary only for calls the schema does not know; read back from the schema.
    #[serde(default, with = "serial::call_name")]
    pub name: Cow<'static, str>,
    pub rc: i32,
    pub is_cuda: bool,
    /// Wall-clock nanoseconds (converted with the dump's clock pair).
    pub t_enter: u64,
    pub t_exit: Option<u64>,
    pub comm: u64,
    pub args: [u64; 9],
    pub error_text: Option<String>,
    pub tid: u32,
    pub nested: bool,
}

impl CallEvent {
    pub fn arg(&self, name: &str) -> Option<u64> {
        let i = self.call?.arg_names().iter().position(|n| *n == name)?;
        Some(self.args[i])
    }

    /// The arguments as the typed view `V`, when `V` is this call's view (see
    /// `ncclshim_format::reader::Record::view`).
    pub fn view<V: ArgView>(&self) -> Option<V> {
        (self.call?.view_name() == V::VIEW).then(|| V::from_args(&self.args))
    }

    /// Count, datatype, op, root or peer and sequence numbers of a collective or p2p call
    /// (send/recv store their peer where a collective stores its root).
    pub fn operation(&self) -> Option<args::Collective> {
        self.view::<args::Collective>().or_else(|| {
            let p = self.view::<args::PointToPoint>()?;
            Some(args::Collective {
                count: p.count,
                datatype: p.datatype,
                op: p.op,
                root: p.peer,
                sendbuff: p.sendbuff,
                recvbuff: p.recvbuff,
                stream: p.stream,
                seq: p.seq,
                op_seq: p.op_seq,
            })
        })
    }

    pub fn in_flight(&self) -> bool {
        self.t_exit.is_none()
    }

    /// The call's `ncclResult_t` (None for a CUDA driver call, whose rc is a CUresult).
    pub fn nccl_result(&self) -> Option<NcclResult> {
        (!self.is_cuda).then(|| NcclResult::from_i32(self.rc))
    }

    /// Whether this is an NCCL call (not a driver call) that returned `r`.
    pub fn returned(&self, r: NcclResult) -> bool {
        self.nccl_result() == Some(r)
    }

    /// A completed call that returned an error (`ncclInProgress` is not one).
    pub fn failed(&self) -> bool {
        !self.in_flight() && rc_is_error(self.is_cuda, self.rc)
    }

    /// What [`ProcessModel::compact`] may drop from a long history: a completed, successful
    /// collective made by the application (point-to-point calls stay: pairing sends with
    /// receives needs all of them).
    pub fn prunable(&self) -> bool {
        prunable(
            self.call,
            self.in_flight(),
            self.is_cuda,
            self.rc,
            self.nested,
        )
    }

    /// A failed call, or an `ncclCommGetAsyncError` that reported an error: everything that
    /// carries NCCL's failure text (an asynchronous CUDA error reaches the job only this way).
    pub fn reports_error(&self) -> bool {
        self.failed() || self.async_error().is_some()
    }

    /// The error an `ncclCommGetAsyncError` call reported (not success, not in progress).
    pub fn async_error(&self) -> Option<NcclResult> {
        let r = self.async_result()?;
        (!self.in_flight() && r.is_error()).then_some(r)
    }

    /// What an `ncclCommGetAsyncError` call reported (any value; None for other calls).
    pub fn async_result(&self) -> Option<NcclResult> {
        (self.call == Some(CallId::NcclCommGetAsyncError)).then(|| {
            NcclResult::from_arg(args::NcclCommGetAsyncError::from_args(&self.args).async_error)
        })
    }

    pub fn rc_name(&self) -> String {
        rc_name(self.rc, self.is_cuda)
    }

    /// When the failure became visible (an async error: when it was polled; a call: its return).
    pub fn fail_time(&self) -> u64 {
        if self.call == Some(CallId::NcclCommGetAsyncError) {
            self.t_enter
        } else {
            self.t_exit.unwrap_or(self.t_enter)
        }
    }

    /// `ncclCommInitRank returned 5 ncclInvalidUsage` plus the error text, for evidence lines.
    pub fn describe(&self) -> String {
        let mut s = if let Some(v) = self.view::<args::NcclCommGetAsyncError>() {
            format!(
                "ncclCommGetAsyncError reported {} {}",
                v.async_error,
                rc_name(v.async_error as i32, false)
            )
        } else if self.in_flight() {
            format!("{} never returned (in flight)", self.name)
        } else {
            format!("{} returned {} {}", self.name, self.rc, self.rc_name())
        };
        if let Some(t) = &self.error_text {
            s.push_str(&format!(": \"{}\"", t.trim()));
        }
        s
    }

    pub fn is_init(&self) -> bool {
        matches!(
            self.call,
            Some(
                CallId::NcclCommInitRank
                    | CallId::NcclCommInitRankConfig
                    | CallId::NcclCommInitRankScalable
                    | CallId::NcclCommInitAll
                    | CallId::NcclCommSplit
                    | CallId::NcclCommShrink
                    | CallId::NcclCommGrow
            )
        )
    }
}

/// A process's place in one communicator.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Membership {
    pub comm_hash: u64,
    pub nranks: u32,
    pub rank: u32,
    pub cuda_dev: Option<i64>,
    pub comm_ptr: u64,
    /// The communicator came up (init returned success, `commCreated`, or the profiler saw it).
    pub established: bool,
    /// Index into `calls` of the init call, when the shim saw it.
    pub init_call: Option<usize>,
    pub nccl_version: Option<u64>,
}

/// One collective or point-to-point call seen by the shim, with its communicator resolved.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct OpCall {
    pub comm_hash: Option<u64>,
    pub seq: u64,
    #[serde(with = "serial::call_id")]
    pub call: CallId,
    pub count: u64,
    pub datatype: u64,
    pub op: u64,
    pub root_or_peer: u64,
    pub call_index: usize,
}

/// One profiler Coll/P2p event.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ProfOp {
    pub comm_hash: Option<u64>,
    pub p2p: bool,
    pub seq: Option<u64>,
    pub func: u64,
    pub count: u64,
    pub datatype: u64,
    pub root_or_peer: u64,
    pub t_start: u64,
    pub stopped: bool,
    /// Its kernel was seen starting (per-channel KernelCh records), or was launched and will
    /// report its end in a GPU-done record (`ENDS_AT_GPU_DONE`: channels summarized, the
    /// default mask).
    pub kernel_started: bool,
    /// Its kernel reported its end (every channel's stop, or the GPU-done record).
    pub kernel_stopped: bool,
    /// The application's profiler tag (NCCL 2.31's `ncclCollConfig_t::userProfilerTag`, profiler
    /// ABI v7 `userTag`), from the CollApi / P2pApi event that is this operation's parent; 0
    /// when untagged or when the profile did not record API events.
    pub user_tag: u64,
}

/// The ring that lost records: a thread's own, or one of the two that no single thread owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LostOn {
    Thread(u32),
    /// Threads beyond the dump's rings share it.
    OverflowRing,
    /// Failures and communicator events, kept apart from every thread's routine calls.
    KeepRing,
}

/// A process's identity across its dumps ([`ProcessModel::key`]): host, boot id, PID
/// namespace, pid, start ticks.
pub type ProcessKey = (String, String, u64, u32, u64);

/// The [`ProcessKey`] a dump's header names (the same as its part's [`ProcessModel::key`]).
pub fn header_key(h: &ncclshim_format::reader::HeaderInfo) -> ProcessKey {
    (
        h.hostname.clone(),
        h.boot_id.clone(),
        h.pid_namespace,
        h.pid,
        h.pid_start_ticks,
    )
}

/// Everything recorded about one process.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ProcessModel {
    pub host: String,
    pub boot_id: String,
    pub pid: u32,
    pub start_ticks: u64,
    /// The inode of the PID namespace `pid` is counted in (0: unknown, a dump before format 2.2).
    pub pid_namespace: u64,
    pub files: Vec<String>,
    pub synthetic: bool,
    /// Known only from a PyTorch Flight Recorder dump (no ncclshim dump): its host is unknown
    /// (`host` holds the dump's path, which keeps the ranks apart).
    pub flight_recorder_only: bool,
    pub has_shim: bool,
    pub has_prof: bool,
    pub clean_exit: bool,
    pub alive: bool,
    pub disabled: bool,
    pub lost: u64,
    /// Completed collectives dropped from `calls` by [`ProcessModel::compact`].
    pub pruned: u64,
    /// The profiler tags the application gave configured collectives (NCCL 2.31
    /// `ncclCollConfig_t::userProfilerTag`, the shim's `collConfig` records), by the call's
    /// (thread, entry time): stable across [`ProcessModel::absorb`] and `compact`, and shared by
    /// a failure's keep-ring copy. Untagged operations are not listed.
    pub coll_tags: FxHashMap<(u32, u64), u64>,
    /// Failures dropped from `calls` by [`ProcessModel::compact`] because they repeated an
    /// earlier one exactly (call, return code, communicator, text); the first and the last of
    /// each stay.
    pub repeated_failures: u64,
    pub torn: u64,
    pub first_t: u64,
    pub last_t: u64,
    pub env: Option<BTreeMap<String, String>>,
    pub libs: Option<LibFacts>,
    pub host_facts: Option<HostFacts>,
    pub gpus: Vec<GpuFacts>,
    pub cmdline: Vec<String>,
    pub calls: Vec<CallEvent>,
    pub memberships: Vec<Membership>,
    pub ops: Vec<OpCall>,
    pub prof_ops: Vec<ProfOp>,
    /// (signal number, time).
    pub signals: Vec<(u64, u64)>,
    /// The fatal signal the shim's handler recorded in the dump header, with its details
    /// (`None` when the process went on after it: see `survived_signals`).
    pub signal: Option<SignalFact>,
    /// Faults (signal number, wall time) the process recovered from: its own handler returned
    /// or jumped away, and it went on recording ([`Self::settle_signals`]). Not how it ended.
    pub survived_signals: Vec<(u64, u64)>,
    /// Clean-exit time (wall clock), when the process exited normally (its atexit handlers ran,
    /// or it ended through `_exit`).
    pub exit_t: Option<u64>,
    /// The status the process passed to its last `exit` / `_exit` / `_Exit` call (shim dumps,
    /// format 2.1); the process's exit status is its low 8 bits.
    pub exit_status: Option<i32>,
    /// Which of those functions it called. `Exit` without `clean_exit`: it called `exit` but its
    /// atexit handlers never finished (it hung or died while exiting).
    pub exit_via: Option<ExitVia>,
    /// When it made that call (wall clock).
    pub exit_call_t: Option<u64>,
    /// Latest sign of life that left no record (a deduplicated async-error poll), wall clock.
    pub last_alive: Option<u64>,
    /// Records lost to ring wrap, per ring: (whose ring, thread name, lost).
    pub lost_by_thread: Vec<(LostOn, String, u64)>,
    /// Per-communicator progress from the dump's communicator table (never lost to wrap).
    pub progress: Vec<CommProgress>,
    /// The profiler's running totals per communicator (never lost to wrap).
    pub aggregates: Vec<aggregates::CommAggregate>,
    /// Communicators created beyond the communicator table's capacity.
    pub comms_not_kept: u32,
    /// Threads whose ring the dump could not grow to hold (they shared the small overflow
    /// ring): the header's `ring_alloc_failed`.
    pub ring_alloc_failed: u32,
    /// The dump could not grow at some point (disk full, a file size limit, a moved file):
    /// rings or blobs were not allocated (the header's `ALLOC_FAILED` flag).
    pub alloc_failed: bool,
    /// What the reader could not read in this process's files (truncation, a torn directory):
    /// (file as shown, the reader's warnings for it).
    pub damaged: Vec<(String, Vec<String>)>,
    pub notes: Vec<String>,
    pub nccl_version: Option<u64>,
    /// The profiler ABI version NCCL loaded the plugin as (its init record), which fixes how the
    /// profiler numbers events (`knowledge::profiler`).
    pub prof_abi: Option<u32>,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC used for this process's times (from its dump header).
    pub clock_offset: i128,
    /// How precisely that offset was measured (the calibration window).
    pub clock_uncertainty: u64,
    /// The launcher's name for the run (`slurm`, `12345.0`; both empty when none named it).
    pub run_source: String,
    pub run_id: String,
    /// Indices of the calls that report an error, made on first use by [`Self::error_calls`]
    /// (emptied by whatever changes `calls`).
    #[serde(skip)]
    pub(crate) error_index: std::sync::OnceLock<Vec<u32>>,
}

/// A fatal signal as the shim's handler recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SignalFact {
    pub signo: u64,
    /// `si_code`: > 0 a fault the kernel raised, <= 0 sent by a process.
    pub code: i32,
    pub sender_pid: u32,
    pub addr: u64,
    pub tid: u32,
    /// Wall clock.
    pub t: u64,
    /// Fatal-class signals received in all.
    pub count: u32,
    /// Times the program's own handler for such a signal returned to the interrupted code.
    pub handler_returns: u32,
}

impl SignalFact {
    /// A signal that means "stop" (sent by a launcher, a user or a scheduler) rather than a
    /// crash of the process itself.
    pub fn is_termination_request(&self) -> bool {
        is_termination_signal(self.signo)
    }
}

/// SIGTERM, SIGINT, SIGHUP: a request to stop, not a crash.
pub fn is_termination_signal(signo: u64) -> bool {
    matches!(signo, 1 | 2 | 15)
}

/// One communicator's progress as the communicator table kept it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommProgress {
    pub comm_hash: u64,
    pub comm_ptr: u64,
    pub nranks: i32,
    pub rank: i32,
    /// Operations issued on it (the last `seq` + 1).
    pub issued: u64,
    /// Operations whose call returned.
    pub completed: u64,
    #[serde(with = "serial::optional_call_id")]
    pub last_call: Option<CallId>,
    pub last_count: u64,
    /// Wall clock of the last operation issued.
    pub last_t: Option<u64>,
    /// `live`, `pending`, `destroyed`, `aborted`.
    #[serde(with = "serial::comm_state")]
    pub state: serial::StaticName,
    pub parent_hash: u64,
}

fn shift_t(t: u64, delta: i128) -> u64 {
    (i128::from(t) + delta).clamp(0, u64::MAX as i128) as u64
}

/// A record time (CLOCK_MONOTONIC) on the wall clock, through the dump's calibration pair.
pub fn to_wall(d: &Dump, mono: u64) -> u64 {
    let c = &d.header.clock;
    (i128::from(mono) - i128::from(c.monotonic_ns) + i128::from(c.realtime_ns))
        .clamp(0, u64::MAX as i128) as u64
}

fn sign_extend(v: u64) -> i64 {
    v as i64
}

impl ProcessModel {
    /// It ended through `_exit` / `_Exit` (fork children, `os._exit`): atexit handlers did not run.
    pub fn exit_underscore(&self) -> bool {
        self.exit_via == Some(ExitVia::UnderscoreExit)
    }

    /// The membership in the largest communicator: the rank a user thinks of as "rank N".
    pub fn world(&self) -> Option<&Membership> {
        self.memberships
            .iter()
            .max_by_key(|m| (m.nranks, m.established, std::cmp::Reverse(m.comm_hash)))
    }

    /// The typical spacing of this process's last calls when it was busy until its end (calls
    /// every few microseconds): its last record is then a tight bound of its end. `None` for a
    /// process with too few calls to tell (it may have been idle long before it ended).
    pub fn busy_spacing(&self) -> Option<u64> {
        const RECENT: usize = 8;
        let n = self.calls.len();
        if n < RECENT {
            return None;
        }
        let span = self.last_t.saturating_sub(self.calls[n - RECENT].t_enter);
        Some((span / RECENT as u64).max(1_000))
    }

    /// The communicator (hash) operation `o` was issued on: its own once the process is
    /// finished ([`JobModel::from_processes`]), else through this part's memberships (what a
    /// plan made before the parts are joined sees).
    pub fn comm_of_op(&self, o: &OpCall) -> Option<u64> {
        o.comm_hash.or_else(|| {
            let ptr = self.calls.get(o.call_index)?.comm;
            self.memberships
                .iter()
                .find(|m| m.comm_ptr != 0 && m.comm_ptr == ptr)
                .map(|m| m.comm_hash)
        })
    }

    /// The `ncclComm_t` this process used for communicator `comm` (0 when unknown).
    pub fn comm_ptr(&self, comm: u64) -> u64 {
        self.memberships
            .iter()
            .find(|m| m.comm_hash == comm)
            .map(|m| m.comm_ptr)
            .unwrap_or(0)
    }

    /// Every communicator this process belongs to or was joining: the commHashes it joined and
    /// the uniqueIds it called init with (an init that never completed names its communicator
    /// only by its uniqueId). The story, the run splitter and the invariants read it alike.
    pub fn communicator_ids(&self) -> std::collections::BTreeSet<u64> {
        self.memberships
            .iter()
            .map(|m| m.comm_hash)
            .chain(
                self.calls
                    .iter()
                    .filter(|c| c.is_init())
                    .filter_map(|c| c.arg("uid_hash")),
            )
            .filter(|&h| h != 0)
            .collect()
    }

    pub fn world_rank(&self) -> Option<u32> {
        self.world().map(|m| m.rank)
    }

    /// `rank 3 (node1 pid 1234)` or `node1 pid 1234`.
    pub fn label(&self) -> String {
        match self.world_rank() {
            Some(r) => format!("rank {r} ({} pid {})", self.host, self.pid),
            None => format!("{} pid {}", self.host, self.pid),
        }
    }

    pub fn env_var(&self, k: &str) -> Option<&str> {
        self.env.as_ref()?.get(k).map(String::as_str)
    }

    pub fn gpu(&self) -> Option<&GpuFacts> {
        self.gpus.last()
    }

    /// NCCL version from `ncclGetVersion`, `commCreated` or the library snapshot.
    pub fn nccl_version_text(&self) -> Option<String> {
        self.nccl_version.map(nccl_version_string)
    }

    /// The NCCL release this process ran, when recorded.
    pub fn nccl_release(&self) -> Option<crate::knowledge::bugs::NcclVersion> {
        self.nccl_version
            .and_then(crate::knowledge::bugs::NcclVersion::from_code)
    }

    /// How this process's NCCL numbered its profiler events (by the ABI the plugin was loaded
    /// as, else by the NCCL release).
    pub fn profiler_era(&self) -> &'static crate::knowledge::profiler::Era {
        crate::knowledge::profiler::era(self.nccl_release(), self.prof_abi)
    }

    /// The key a profiler Coll event is numbered under, per this process's NCCL: (function,
    /// seq) where NCCL counts per function, (None, seq) where it counts per communicator; None
    /// for an event without a number (P2p). Ranks compare equal keys, never bare numbers.
    pub fn prof_seq_key(&self, o: &ProfOp) -> Option<(Option<u64>, u64)> {
        use crate::knowledge::profiler::SeqScope;
        let seq = o.seq?;
        let scope = if o.p2p {
            self.profiler_era().p2p_seq
        } else {
            self.profiler_era().coll_seq
        };
        match scope {
            SeqScope::CommunicatorFunction => Some((Some(o.func), seq)),
            SeqScope::Communicator | SeqScope::CommunicatorCe => Some((None, seq)),
            SeqScope::None => None,
        }
    }

    /// Whether NCCL never reports the GPU end of this profiler event, so its missing end says
    /// nothing about a hang: a send/recv to the rank itself (no proxy op, so no kernel-channel
    /// event; `knowledge/profiler.toml`, `self-p2p-no-gpu-end`).
    pub fn gpu_end_never_reported(&self, o: &ProfOp) -> bool {
        use crate::knowledge::profiler::{has_blind_spot, SELF_P2P_NO_GPU_END};
        let own_rank = |comm: u64| {
            self.memberships
                .iter()
                .find(|m| m.comm_hash == comm)
                .map(|m| u64::from(m.rank))
        };
        o.p2p
            && o.comm_hash.and_then(own_rank) == Some(o.root_or_peer)
            && has_blind_spot(SELF_P2P_NO_GPU_END, self.nccl_release())
    }

    /// The physical host: the boot id when known (containers on one machine share it).
    pub fn machine(&self) -> &str {
        if self.boot_id.is_empty() {
            &self.host
        } else {
            &self.boot_id
        }
    }

    /// The dump ended without a clean exit while the writer is gone: killed or crashed.
    pub fn died(&self) -> bool {
        !self.clean_exit && !self.alive
    }

    /// The calls that report an error ([`CallEvent::reports_error`]: a failed call, or an
    /// async-error poll that returned one), in call order with their indices. Indexed on first
    /// use: rule after rule asks for them, and a scan of every call of every process per rule
    /// was most of the rules' time at 16,384 ranks.
    pub fn error_calls(&self) -> impl Iterator<Item = (usize, &CallEvent)> {
        self.error_index
            .get_or_init(|| {
                self.calls
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.reports_error())
                    .map(|(i, _)| i as u32)
                    .collect()
            })
            .iter()
            .map(|&i| (i as usize, &self.calls[i as usize]))
    }

    /// The calls that returned an error ([`CallEvent::failed`]), in call order with their
    /// indices (from [`Self::error_calls`]' index).
    pub fn failed_calls(&self) -> impl Iterator<Item = (usize, &CallEvent)> {
        self.error_calls().filter(|(_, c)| c.failed())
    }

    /// The application's profiler tag of operation call `c` (0: untagged or not configured).
    pub fn coll_tag(&self, c: &CallEvent) -> u64 {
        if !c.call.is_some_and(CallId::is_nccl_operation) {
            return 0;
        }
        self.coll_tags
            .get(&(c.tid, c.t_enter))
            .copied()
            .unwrap_or(0)
    }

    /// [`CallEvent::describe`] of `calls[i]`, naming its profiler tag when it has one.
    pub fn describe_call(&self, i: usize) -> String {
        let c = &self.calls[i];
        let s = c.describe();
        match self.coll_tag(c) {
            0 => s,
            tag => s.replacen(&*c.name, &format!("{} (tag {tag:#x})", c.name), 1),
        }
    }

    pub fn in_flight_calls(&self) -> impl Iterator<Item = (usize, &CallEvent)> {
        self.calls
            .iter()
            .enumerate()
            .filter(|(_, c)| c.in_flight() && !c.nested)
    }

    /// The part of a process one dump file tells (the shim's or the profiler's); merge the
    /// parts of one process with [`ProcessModel::absorb`], then call [`JobModel::from_processes`].
    pub fn from_dump(d: &Dump, shown_path: String) -> Self {
        Self::from_dump_keeping(d, shown_path, usize::MAX)
    }

    /// [`Self::from_dump`] followed by [`Self::compact`]`(keep)`, with the same result, but
    /// the calls `compact` would drop are never built: of a long history (thousands of
    /// collectives per thread, per dump of a 16k-rank job) only the last `keep` become events.
    pub fn from_dump_compacted(d: &Dump, shown_path: String, keep: usize) -> Self {
        let mut p = Self::from_dump_keeping(d, shown_path, keep);
        p.compact(keep);
        p
    }

    fn from_dump_keeping(d: &Dump, shown_path: String, keep: usize) -> Self {
        let h = &d.header;
        let mut p = ProcessModel {
            host: h.hostname.clone(),
            boot_id: h.boot_id.clone(),
            pid: h.pid,
            start_ticks: h.pid_start_ticks,
            pid_namespace: h.pid_namespace,
            clock_offset: i128::from(h.clock.realtime_ns) - i128::from(h.clock.monotonic_ns),
            clock_uncertainty: h.clock.uncertainty_ns,
            ..ProcessModel::default()
        };
        p.add_dump(d, shown_path, keep);
        p
    }

    /// Drops what no diagnosis reads from a long history, so a 16k-rank job's model stays
    /// small: of each thread's successful, completed collectives (thousands per ring) only the
    /// last `keep` stay, and of the profiler's
    /// finished Coll events the last `keep` per communicator. Failed, in-flight and
    /// non-operation calls (init, destroy, async-error polls, driver calls) all stay, as do the
    /// communicator table's progress counters that never wrap. `pruned` counts the calls
    /// dropped.
    pub fn compact(&mut self, keep: usize) {
        self.error_index = Default::default();
        let mut seen_per_tid: FxHashMap<u32, usize> = FxHashMap::default();
        let mut keep_call = vec![true; self.calls.len()];
        for (i, c) in self.calls.iter().enumerate().rev() {
            if c.prunable() {
                let n = seen_per_tid.entry(c.tid).or_default();
                *n += 1;
                keep_call[i] = *n <= keep;
            }
        }
        let pruned_collectives = keep_call.iter().filter(|k| !**k).count();
        self.repeated_failures += self.collapse_repeated_failures(&mut keep_call);
        let dropped = keep_call.iter().filter(|k| !**k).count();
        if dropped > 0 {
            // Old index -> new index, for the indices the model holds into `calls`.
            let mut new_index = vec![usize::MAX; self.calls.len()];
            let mut next = 0;
            for (i, k) in keep_call.iter().enumerate() {
                if *k {
                    new_index[i] = next;
                    next += 1;
                }
            }
            let mut i = 0;
            self.calls.retain(|_| {
                i += 1;
                keep_call[i - 1]
            });
            self.calls.shrink_to_fit();
            self.ops.retain_mut(|op| {
                op.call_index = new_index[op.call_index];
                op.call_index != usize::MAX
            });
            self.ops.shrink_to_fit();
            for m in &mut self.memberships {
                m.init_call = m
                    .init_call
                    .map(|i| new_index[i])
                    .filter(|&i| i != usize::MAX);
            }
            self.pruned += pruned_collectives as u64;
        }
        let mut seen_per_comm: FxHashMap<Option<u64>, usize> = FxHashMap::default();
        let mut keep_op = vec![true; self.prof_ops.len()];
        for (i, o) in self.prof_ops.iter().enumerate().rev() {
            if !o.p2p && o.stopped && o.kernel_stopped {
                let n = seen_per_comm.entry(o.comm_hash).or_default();
                *n += 1;
                keep_op[i] = *n <= keep;
            }
        }
        if keep_op.iter().any(|k| !*k) {
            let mut i = 0;
            self.prof_ops.retain(|_| {
                i += 1;
                keep_op[i - 1]
            });
        }
        // Also when nothing was dropped: `add_dump` reserved room for every profiler record.
        self.prof_ops.shrink_to_fit();
    }

    /// Marks in `keep_call` the failures that only repeat another: the same call failing with
    /// the same return code, communicator and NCCL text (a rank retrying its rendezvous
    /// thousands of times). The first and the last of each kind stay (when it began, that it
    /// was still failing at the end); the others are dropped before any rule reads them, and
    /// counted (the return value). Every rule reads one failure where it read thousands.
    fn collapse_repeated_failures(&self, keep_call: &mut [bool]) -> u64 {
        type Kind<'a> = (Option<CallId>, i32, bool, u64, Option<&'a str>);
        let mut span: FxHashMap<Kind, (usize, usize)> = FxHashMap::default();
        for (i, c) in self.calls.iter().enumerate().filter(|(_, c)| c.failed()) {
            let kind = (c.call, c.rc, c.is_cuda, c.comm, c.error_text.as_deref());
            span.entry(kind).and_modify(|s| s.1 = i).or_insert((i, i));
        }
        let mut collapsed = 0;
        for (i, c) in self.calls.iter().enumerate().filter(|(_, c)| c.failed()) {
            let kind = (c.call, c.rc, c.is_cuda, c.comm, c.error_text.as_deref());
            let (first, last) = span[&kind];
            if i != first && i != last {
                keep_call[i] = false;
                collapsed += 1;
            }
        }
        collapsed
    }

    fn add_aggregate(&mut self, a: aggregates::CommAggregate) {
        match self
            .aggregates
            .iter_mut()
            .find(|x| x.comm_hash == a.comm_hash && x.rank == a.rank)
        {
            Some(x) => x.merge(&a),
            None => self.aggregates.push(a),
        }
    }

    /// The newest sign that communicator `comm` moved on in this process (wall clock): an
    /// operation issued on it (the communicator table, or its call's record) or returned, or
    /// started by the profiler. Routine calls that only poll it are no progress: PyTorch's
    /// watchdog asks `ncclCommGetAsyncError` many times a second while the job hangs.
    /// `None` when nothing says this process used the communicator.
    pub fn comm_progress_t(&self, comm: u64) -> Option<u64> {
        let table = self
            .progress
            .iter()
            .filter(|c| c.comm_hash == comm)
            .filter_map(|c| c.last_t);
        let calls = self
            .ops
            .iter()
            .filter(|o| o.comm_hash == Some(comm))
            .filter_map(|o| self.calls.get(o.call_index))
            .map(|c| c.t_exit.unwrap_or(c.t_enter));
        let profiled = self
            .prof_ops
            .iter()
            .filter(|o| o.comm_hash == Some(comm))
            .map(|o| o.t_start);
        table.chain(calls).chain(profiled).max()
    }

    /// The profiler's totals for communicator `comm`, when it kept them.
    pub fn aggregate(&self, comm: u64) -> Option<&aggregates::CommAggregate> {
        self.aggregates.iter().find(|a| a.comm_hash == comm)
    }

    /// Moves every time by `delta` ns (re-basing on another calibration of the same clock).
    pub fn shift(&mut self, delta: i128) {
        if delta == 0 {
            return;
        }
        for c in &mut self.calls {
            c.t_enter = shift_t(c.t_enter, delta);
            c.t_exit = c.t_exit.map(|t| shift_t(t, delta));
        }
        for o in &mut self.prof_ops {
            o.t_start = shift_t(o.t_start, delta);
        }
        for s in &mut self.signals {
            s.1 = shift_t(s.1, delta);
        }
        if let Some(s) = &mut self.signal {
            s.t = shift_t(s.t, delta);
        }
        self.exit_t = self.exit_t.map(|t| shift_t(t, delta));
        self.exit_call_t = self.exit_call_t.map(|t| shift_t(t, delta));
        self.last_alive = self.last_alive.map(|t| shift_t(t, delta));
        for c in &mut self.progress {
            c.last_t = c.last_t.map(|t| shift_t(t, delta));
        }
        if self.first_t != 0 {
            self.first_t = shift_t(self.first_t, delta);
        }
        self.last_t = shift_t(self.last_t, delta);
        self.clock_offset += delta;
    }

    /// Puts this process on another calibration of CLOCK_MONOTONIC → wall clock.
    pub fn rebase(&mut self, offset: i128, uncertainty: u64) {
        self.shift(offset - self.clock_offset);
        self.clock_uncertainty = uncertainty;
    }

    /// Which process a part belongs to: host, boot id, PID namespace, pid and start time.
    pub fn key(&self) -> ProcessKey {
        (
            self.host.clone(),
            self.boot_id.clone(),
            self.pid_namespace,
            self.pid,
            self.start_ticks,
        )
    }

    /// Merges another part of the same process (its other dump file) into this one.
    pub fn absorb(&mut self, mut o: ProcessModel) {
        // One process, one CLOCK_MONOTONIC: put the other part on this part's calibration.
        o.rebase(self.clock_offset, self.clock_uncertainty);
        self.error_index = Default::default();
        let off = self.calls.len();
        self.files.extend(o.files);
        self.synthetic |= o.synthetic;
        self.has_shim |= o.has_shim;
        self.has_prof |= o.has_prof;
        self.clean_exit |= o.clean_exit;
        self.alive |= o.alive;
        self.disabled |= o.disabled;
        self.lost += o.lost;
        self.pruned += o.pruned;
        self.repeated_failures += o.repeated_failures;
        self.torn += o.torn;
        self.damaged.extend(o.damaged);
        if o.first_t != 0 && (self.first_t == 0 || o.first_t < self.first_t) {
            self.first_t = o.first_t;
        }
        self.last_t = self.last_t.max(o.last_t);
        self.env = self.env.take().or(o.env);
        self.libs = self.libs.take().or(o.libs);
        self.host_facts = self.host_facts.take().or(o.host_facts);
        for g in o.gpus {
            if !self.gpus.contains(&g) {
                self.gpus.push(g);
            }
        }
        if self.cmdline.is_empty() {
            self.cmdline = o.cmdline;
        }
        self.calls.extend(o.calls);
        self.coll_tags.extend(o.coll_tags);
        self.ops.extend(o.ops.into_iter().map(|mut op| {
            op.call_index += off;
            op
        }));
        for mut m in o.memberships {
            m.init_call = m.init_call.map(|i| i + off);
            self.merge_membership(m);
        }
        self.prof_ops.extend(o.prof_ops);
        self.signals.extend(o.signals);
        self.survived_signals.extend(o.survived_signals);
        self.signal = self.signal.or(o.signal);
        self.exit_t = self.exit_t.max(o.exit_t);
        if o.exit_call_t > self.exit_call_t {
            self.exit_status = o.exit_status;
            self.exit_via = o.exit_via;
            self.exit_call_t = o.exit_call_t;
        }
        self.last_alive = self.last_alive.max(o.last_alive);
        self.lost_by_thread.extend(o.lost_by_thread);
        self.progress.extend(o.progress);
        for a in o.aggregates {
            self.add_aggregate(a);
        }
        self.comms_not_kept += o.comms_not_kept;
        self.ring_alloc_failed += o.ring_alloc_failed;
        self.alloc_failed |= o.alloc_failed;
        self.notes.extend(o.notes);
        self.nccl_version = self.nccl_version.or(o.nccl_version);
        self.prof_abi = self.prof_abi.or(o.prof_abi);
        if self.run_id.is_empty() {
            self.run_source = o.run_source;
            self.run_id = o.run_id;
        }
    }

    /// Adds one dump's facts; of the calls [`CallEvent::prunable`], only the last `keep` per
    /// thread are built (the others are only counted in `pruned`).
    fn add_dump(&mut self, d: &Dump, shown_path: String, keep: usize) {
        if !d.warnings.is_empty() {
            let ws = d.warnings.iter().map(|w| w.message.clone()).collect();
            self.damaged.push((shown_path.clone(), ws));
        }
        self.files.push(shown_path);
        let h = &d.header;
        self.synthetic |= h.writer_kind == Some(WriterKind::Synthetic);
        self.has_shim |= h.writer_kind == Some(WriterKind::Shim);
        self.has_prof |= h.writer_kind == Some(WriterKind::Profiler);
        self.clean_exit |= h.clean_exit;
        self.alive |= h.writer_alive;
        self.disabled |= h.disabled;
        self.lost += d.summary.lost;
        self.torn += d.summary.torn;
        self.ring_alloc_failed += h.ring_alloc_failed;
        self.alloc_failed |= h.flags & ncclshim_format::layout::flags::ALLOC_FAILED != 0;
        for r in d.lost_by_ring() {
            let on = if !r.shared {
                LostOn::Thread(r.tid)
            } else if r.index > h.ring_count {
                LostOn::KeepRing
            } else {
                LostOn::OverflowRing
            };
            self.lost_by_thread
                .push((on, r.thread_name.clone(), r.lost));
        }
        if let Some(x) = h.exit_monotonic_ns {
            self.exit_t = Some(to_wall(d, x));
        }
        if let Some(e) = h.exit {
            let t = to_wall(d, e.t_ns);
            self.exit_status = Some(e.status);
            self.exit_via = Some(e.via);
            self.exit_call_t = Some(t);
            if e.via == ExitVia::UnderscoreExit {
                // `_exit` ends the process at once, skipping atexit handlers: a clean end.
                self.clean_exit = true;
                self.exit_t = Some(self.exit_t.map_or(t, |x| x.max(t)));
            }
        }
        if let Some(a) = h.last_alive_ns {
            let t = to_wall(d, a);
            self.last_alive = Some(self.last_alive.map_or(t, |v| v.max(t)));
            self.last_t = self.last_t.max(t);
        }
        if let Some(sg) = h.signal {
            let t = to_wall(d, sg.t_ns);
            self.signal = Some(SignalFact {
                signo: u64::from(sg.signo),
                code: sg.code,
                sender_pid: sg.sender_pid,
                addr: sg.addr,
                tid: sg.tid,
                t,
                count: sg.count,
                handler_returns: sg.handler_returns,
            });
            self.signals.push((u64::from(sg.signo), t));
            self.last_t = self.last_t.max(t);
        }
        self.comms_not_kept += h.comms_not_kept;
        if self.run_id.is_empty() && !h.run.id.is_empty() {
            self.run_source = h.run.source.clone();
            self.run_id = h.run.id.clone();
        }
        // Identity that never wraps: every communicator of the table is a membership, even
        // when the records of its creation were overwritten long ago.
        for c in &d.comms {
            if c.comm_hash != 0 && c.nranks > 0 && c.rank >= 0 {
                let v = u64::try_from(c.nccl_version).unwrap_or(0);
                if v != 0 {
                    self.nccl_version.get_or_insert(v);
                }
                self.merge_membership(Membership {
                    comm_hash: c.comm_hash,
                    nranks: c.nranks as u32,
                    rank: c.rank as u32,
                    cuda_dev: (c.cuda_dev >= 0).then_some(i64::from(c.cuda_dev)),
                    comm_ptr: c.comm,
                    established: c.state != ncclshim_format::layout::comm_state::PENDING,
                    init_call: None,
                    nccl_version: (v != 0).then_some(v),
                });
            }
            self.progress.push(CommProgress {
                comm_hash: c.comm_hash,
                comm_ptr: c.comm,
                nranks: c.nranks,
                rank: c.rank,
                issued: c.issued,
                completed: c.completed,
                last_call: c.last_call,
                last_count: c.last_count,
                last_t: c.last_issued_ns.map(|t| to_wall(d, t)),
                state: c.state_name(),
                parent_hash: c.parent_hash,
            });
        }

        for a in aggregates::from_dump(d) {
            self.add_aggregate(a);
        }

        // Latest snapshot of each kind wins (later ones are taken at communicator init).
        for b in d.blobs.values() {
            let Some(kind) = b.kind() else { continue };
            if !kind.is_json() {
                continue;
            }
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&b.bytes) else {
                continue;
            };
            match kind {
                BlobKind::Environment => self.env = Some(facts::parse_env(&v)),
                BlobKind::Libraries => self.libs = Some(facts::parse_libs(&v)),
                BlobKind::HostFacts => self.host_facts = Some(facts::parse_host(&v)),
                BlobKind::Gpu => {
                    let g = facts::parse_gpu(&v);
                    if !self.gpus.contains(&g) {
                        self.gpus.push(g);
                    }
                }
                BlobKind::Process => self.cmdline = facts::parse_cmdline(&v),
                _ => {}
            }
        }

        let text_of = |r: &Record| -> Option<String> {
            (r.blob != 0)
                .then(|| d.blob(r.blob))
                .flatten()
                .filter(|b| !b.kind().is_some_and(BlobKind::is_json))
                .map(|b| b.text())
        };

        let mut prof_index: FxHashMap<u64, usize> = FxHashMap::default();
        let mut kernel_parent: FxHashMap<u64, usize> = FxHashMap::default();
        // Non-zero user tags of CollApi / P2pApi events, by their handle and slot: the Coll or
        // P2p under one names it as its parent.
        let mut api_tags: FxHashMap<u64, u64> = FxHashMap::default();
        // A thread's last `collConfig` record with a tag, until its collective: (comm, seq, tag).
        let mut configs: FxHashMap<u32, (u64, u64, u64)> = FxHashMap::default();
        let mut prof_comms: Vec<(u64, u64)> = Vec::new(); // (ctx comm field, comm_hash)
        let records = d.records_by_time();
        let skip_call = calls_beyond_keep(&records, keep);
        // Room for every call and profiler event up front: growing these
        // vectors one push at a time copied them about a dozen times per dump (`compact`
        // gives the room back).
        let calls = records
            .iter()
            .filter(|r| r.kind() == Some(RecordKind::Call))
            .count();
        let skipped = skip_call.iter().filter(|s| **s).count();
        self.calls.reserve(calls - skipped);
        self.prof_ops.reserve(records.len() - calls);
        self.pruned += skipped as u64;
        // ProfInit first, so events can be attributed to a communicator.
        for r in &records {
            if let Some(init) = r.view::<args::ProfInit>() {
                if let Ok(abi) = u32::try_from(init.abi_version) {
                    self.prof_abi.get_or_insert(abi);
                }
                let comm_hash = init.comm_hash;
                // v1-v3 inits carry no communicator facts (hash 0, rank -1).
                if comm_hash == 0 || init.rank as u32 == u32::MAX {
                    continue;
                }
                prof_comms.push((r.comm, comm_hash));
                self.merge_membership(Membership {
                    comm_hash,
                    nranks: init.nranks as u32,
                    rank: init.rank as u32,
                    established: true,
                    ..Membership::default()
                });
            }
        }
        let prof_comm = |c: u64| -> Option<u64> {
            if let Some((_, h)) = prof_comms.iter().find(|(ctx, h)| *h == c || *ctx == c) {
                return Some(*h);
            }
            (prof_comms.len() == 1).then(|| prof_comms[0].1)
        };

        for (j, r) in records.into_iter().enumerate() {
            let t = to_wall(d, r.t_enter_ns);
            if self.first_t == 0 || t < self.first_t {
                self.first_t = t;
            }
            let t_exit = r.t_exit_ns.map(|x| to_wall(d, x));
            self.last_t = self.last_t.max(t_exit.unwrap_or(t)).max(t);
            let Some(kind) = r.kind() else { continue };
            let call = r.call();
            match kind {
                RecordKind::Call if skip_call[j] => {}
                RecordKind::Call => {
                    // The thread's configured collective: its config record came just before.
                    if let Some(&(comm, seq, tag)) = configs.get(&r.tid) {
                        let op_seq = call
                            .filter(|c| c.is_nccl_operation())
                            .map(|_| args::Collective::from_args(&r.args).seq);
                        if op_seq.is_some() {
                            configs.remove(&r.tid);
                        }
                        if op_seq == Some(seq) && r.comm == comm {
                            self.coll_tags.insert((r.tid, t), tag);
                        }
                    }
                    let mut ev = call_event(r, t, t_exit);
                    ev.error_text = text_of(r);
                    self.add_call(ev);
                }
                RecordKind::CommInfo | RecordKind::Event | RecordKind::Snapshot => match call {
                    Some(CallId::CommCreated) => {
                        let c = args::CommCreated::from_args(&r.args);
                        let v = c.nccl_version;
                        if v != 0 {
                            self.nccl_version.get_or_insert(v);
                        }
                        self.merge_membership(Membership {
                            comm_hash: c.comm_hash,
                            nranks: c.nranks as u32,
                            rank: c.rank as u32,
                            cuda_dev: Some(sign_extend(c.cuda_dev)),
                            comm_ptr: r.comm,
                            established: true,
                            init_call: None,
                            nccl_version: (v != 0).then_some(v),
                        });
                    }
                    Some(CallId::CollConfig) => {
                        let c = args::CollConfig::from_args(&r.args);
                        // u64::MAX: the struct did not reach the tag (or was not NCCL's).
                        if c.user_tag != 0 && c.user_tag != u64::MAX {
                            configs.insert(r.tid, (r.comm, c.seq, c.user_tag));
                        }
                    }
                    Some(CallId::FatalSignal) => {
                        let signal = args::FatalSignal::from_args(&r.args);
                        self.signals.push((signal.signo, t));
                    }
                    Some(CallId::RecorderNote) => {
                        if let Some(s) = text_of(r) {
                            self.notes.push(s);
                        }
                    }
                    _ => {}
                },
                RecordKind::ProfStart => match call {
                    Some(CallId::ProfColl | CallId::ProfP2p) => {
                        let p2p = call == Some(CallId::ProfP2p);
                        // The plugin completes a start record in place when the event stops on
                        // the thread that started it; otherwise a ProfStop record follows.
                        let stopped_in_place = completed_in_place(r);
                        // Channels summarized (the default mask): NCCL starts the event after
                        // the kernel launch, and the record stays open until a GPU-done record
                        // says the kernel ended.
                        let launched = r.flags & slot_flags::ENDS_AT_GPU_DONE != 0;
                        let (op, handle) = if p2p {
                            let a = args::ProfP2p::from_args(&r.args);
                            let op = ProfOp {
                                comm_hash: prof_comm(r.comm),
                                p2p,
                                seq: None,
                                func: a.func,
                                count: a.count,
                                datatype: a.datatype,
                                root_or_peer: a.peer,
                                t_start: t,
                                stopped: stopped_in_place,
                                kernel_started: launched,
                                kernel_stopped: false,
                                user_tag: api_tags.get(&a.parent).copied().unwrap_or(0),
                            };
                            (op, a.handle)
                        } else {
                            let a = args::ProfColl::from_args(&r.args);
                            let op = ProfOp {
                                comm_hash: prof_comm(r.comm),
                                p2p,
                                seq: Some(a.seq),
                                func: a.func,
                                count: a.count,
                                datatype: a.datatype,
                                root_or_peer: a.root,
                                t_start: t,
                                stopped: stopped_in_place,
                                kernel_started: launched,
                                kernel_stopped: false,
                                user_tag: api_tags.get(&a.parent).copied().unwrap_or(0),
                            };
                            (op, a.handle)
                        };
                        self.prof_ops.push(op);
                        let i = self.prof_ops.len() - 1;
                        prof_index.insert(r.slot_ref().encode(), i);
                        if handle != 0 {
                            prof_index.insert(handle, i);
                        }
                    }
                    Some(CallId::ProfCollApi | CallId::ProfP2pApi) => {
                        let (handle, tag) = if call == Some(CallId::ProfCollApi) {
                            let a = args::ProfCollApi::from_args(&r.args);
                            (a.handle, a.user_tag)
                        } else {
                            let a = args::ProfP2pApi::from_args(&r.args);
                            (a.handle, a.user_tag)
                        };
                        if tag != 0 {
                            api_tags.insert(r.slot_ref().encode(), tag);
                            if handle != 0 {
                                api_tags.insert(handle, tag);
                            }
                        }
                    }
                    Some(CallId::ProfKernelCh) => {
                        let k = args::ProfKernelCh::from_args(&r.args);
                        if let Some(&i) = prof_index.get(&k.parent) {
                            self.prof_ops[i].kernel_started = true;
                            // Stopped in place: an exit time, or the GPU stop time.
                            if completed_in_place(r)
                                || (r.flags & slot_flags::COMPLETES_IN_PLACE != 0
                                    && k.gpu_stop_ns != 0)
                            {
                                self.prof_ops[i].kernel_stopped = true;
                            }
                            kernel_parent.insert(r.slot_ref().encode(), i);
                            if k.handle != 0 {
                                kernel_parent.insert(k.handle, i);
                            }
                        }
                    }
                    _ => {}
                },
                RecordKind::ProfStop => {
                    let handle = args::ProfStop::from_args(&r.args).handle;
                    if let Some(&i) = kernel_parent.get(&handle) {
                        self.prof_ops[i].kernel_stopped = true;
                    } else if let Some(&i) = prof_index.get(&handle) {
                        self.prof_ops[i].stopped = true;
                    }
                }
                RecordKind::ProfState => {
                    if let Some(&i) = r.gpu_done().and_then(|g| prof_index.get(&g.op)) {
                        let op = &mut self.prof_ops[i];
                        op.kernel_started = true;
                        op.kernel_stopped = true;
                        op.stopped = true;
                    }
                }
            }
        }
    }

    fn add_call(&mut self, ev: CallEvent) {
        let idx = self.calls.len();
        match ev.call {
            Some(CallId::NcclGetVersion)
                if ev.returned(NcclResult::Success)
                    && !ev.in_flight()
                    && args::NcclGetVersion::from_args(&ev.args).version != 0 =>
            {
                self.nccl_version = Some(args::NcclGetVersion::from_args(&ev.args).version);
            }
            Some(
                CallId::NcclCommInitRank
                | CallId::NcclCommInitRankConfig
                | CallId::NcclCommInitRankScalable,
            ) => {
                let ok = ev.returned(NcclResult::Success) && !ev.in_flight();
                // The scalable init stores its id count where the others store uid4; the
                // fields read here sit in the same slots in both views.
                let init = ev.view::<args::CommInitRank>().unwrap_or_else(|| {
                    let s = args::NcclCommInitRankScalable::from_args(&ev.args);
                    args::CommInitRank {
                        nranks: s.nranks,
                        rank: s.rank,
                        uid_hash: s.uid_hash,
                        cuda_dev: s.cuda_dev,
                        ..args::CommInitRank::default()
                    }
                });
                self.merge_membership(Membership {
                    comm_hash: init.uid_hash,
                    nranks: init.nranks as u32,
                    rank: init.rank as u32,
                    cuda_dev: Some(sign_extend(init.cuda_dev)),
                    comm_ptr: if ok { ev.comm } else { 0 },
                    established: ok,
                    init_call: Some(idx),
                    nccl_version: None,
                });
            }
            // A rank that split with NCCL_SPLIT_NOCOLOR gets no communicator (a NULL newcomm):
            // it is no member of the others' child (PyTorch's new_group on the ranks outside it).
            Some(CallId::NcclCommSplit)
                if ev.returned(NcclResult::Success)
                    && !ev.in_flight()
                    && args::NcclCommSplit::from_args(&ev.args).comm_hash != 0
                    && args::NcclCommSplit::from_args(&ev.args).new_comm != 0 =>
            {
                let split = args::NcclCommSplit::from_args(&ev.args);
                self.merge_membership(Membership {
                    comm_hash: split.comm_hash,
                    nranks: split.nranks as u32,
                    rank: split.rank as u32,
                    comm_ptr: split.new_comm,
                    established: true,
                    init_call: Some(idx),
                    ..Membership::default()
                });
            }
            Some(c) if c.is_nccl_operation() => {
                let o = ev.operation().unwrap_or_default();
                self.ops.push(OpCall {
                    comm_hash: None,
                    seq: o.seq,
                    call: c,
                    count: o.count,
                    datatype: o.datatype,
                    op: o.op,
                    root_or_peer: o.root,
                    call_index: idx,
                });
            }
            _ => {}
        }
        self.calls.push(ev);
    }

    fn merge_membership(&mut self, m: Membership) {
        if let Some(e) = self
            .memberships
            .iter_mut()
            .find(|e| e.comm_hash == m.comm_hash && (e.rank == m.rank || !e.established))
        {
            e.established |= m.established;
            e.nranks = if m.nranks != 0 { m.nranks } else { e.nranks };
            e.rank = m.rank;
            if m.comm_ptr != 0 {
                e.comm_ptr = m.comm_ptr;
            }
            e.cuda_dev = e.cuda_dev.or(m.cuda_dev);
            e.init_call = e.init_call.or(m.init_call);
            e.nccl_version = e.nccl_version.or(m.nccl_version);
        } else {
            self.memberships.push(m);
        }
    }

    fn finish(&mut self) {
        if self.nccl_version.is_none() {
            self.nccl_version = self
                .libs
                .as_ref()
                .and_then(|l| l.nccl_version)
                .filter(|v| *v > 0)
                .map(|v| v as u64);
        }
        let ptr_to_hash: FxHashMap<u64, u64> = self
            .memberships
            .iter()
            .filter(|m| m.comm_ptr != 0)
            .map(|m| (m.comm_ptr, m.comm_hash))
            .collect();
        for op in &mut self.ops {
            op.comm_hash = ptr_to_hash.get(&self.calls[op.call_index].comm).copied();
        }
        self.settle_signals();
    }

    /// A fault is how a process ended only if it did not go on: the JVM, Julia, Go and
    /// `sigsetjmp` probes handle SIGSEGV themselves and carry on. It went on when the signal's
    /// own thread made a call after it (its handler returned or jumped away), or when the
    /// program's own handler returned (counted by the shim's) and any call followed. Those
    /// faults move to `survived_signals`. Other threads' calls alone prove nothing: they run
    /// on while a crashing thread's handlers write tracebacks, or hang. A request to stop
    /// (SIGTERM, SIGINT) is never moved: a program that handles it and cleans up (destroying
    /// its communicators) was still asked to stop.
    fn settle_signals(&mut self) {
        let header = self.signal;
        let returned = header.is_some_and(|s| s.handler_returns > 0);
        let calls = &self.calls;
        let went_on = |signo: u64, t: u64| {
            if is_termination_signal(signo) {
                return false;
            }
            let own_thread = header
                .filter(|h| h.signo == signo && h.t == t)
                .map(|h| h.tid);
            calls
                .iter()
                .any(|c| c.t_enter > t && (returned || Some(c.tid) == own_thread))
        };
        let (survived, fatal): (Vec<_>, Vec<_>) = self
            .signals
            .iter()
            .partition(|&&(signo, t)| went_on(signo, t));
        if header.is_some_and(|h| went_on(h.signo, h.t)) {
            self.signal = None;
        }
        self.signals = fatal;
        self.survived_signals.extend(survived);
    }

    /// Failed calls, async errors and fatal signals of this process, as (time, what).
    pub fn failures(&self) -> Vec<FailureEvent> {
        let mut out = Vec::new();
        for (i, c) in self.calls.iter().enumerate() {
            if c.failed() {
                out.push(FailureEvent {
                    t: c.fail_time(),
                    what: FailureWhat::Call(i),
                });
            } else if c.async_error().is_some() {
                out.push(FailureEvent {
                    t: c.t_enter,
                    what: FailureWhat::AsyncError(i),
                });
            }
        }
        // A crash is a failure at once; a request to stop (SIGTERM, SIGINT) is one only when
        // the job went on without this process (decided across the job, like `Died`).
        for &(signo, t) in &self.signals {
            if !is_termination_signal(signo) {
                out.push(FailureEvent {
                    t,
                    what: FailureWhat::Signal(signo),
                });
            }
        }
        out.sort_by_key(|f| f.t);
        out
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureWhat {
    /// Index into `calls`: a call that returned an error.
    Call(usize),
    /// Index into `calls`: `ncclCommGetAsyncError` reported an error.
    AsyncError(usize),
    Signal(u64),
    /// The process's dump ends without a clean exit while the job went on (time: its last record).
    Died,
}

#[derive(Debug, Clone, Copy)]
pub struct FailureEvent {
    pub t: u64,
    pub what: FailureWhat,
}

/// A failure anywhere in the job.
#[derive(Debug, Clone, Copy)]
pub struct JobFailure {
    pub process: usize,
    pub t: u64,
    pub what: FailureWhat,
}

/// More ranks than any NCCL job has run with; larger claims are treated as corrupt.
pub const MAX_PLAUSIBLE_RANKS: u32 = 1 << 20;

/// What every rank of one communicator said about it.
#[derive(Debug, Clone, Default)]
pub struct CommView {
    pub comm_hash: u64,
    /// nranks as claimed by each process (several values = disagreement).
    pub nranks_claims: BTreeMap<u32, Vec<usize>>,
    /// rank → processes claiming it.
    pub members: BTreeMap<u32, Vec<usize>>,
}

impl CommView {
    pub fn nranks(&self) -> u32 {
        self.nranks_claims.keys().copied().max().unwrap_or(0)
    }

    /// Ranks nobody claimed. A corrupt or hostile dump can claim any nranks: beyond
    /// [`MAX_PLAUSIBLE_RANKS`] the list is not built.
    pub fn missing(&self) -> Vec<u32> {
        let n = self.nranks();
        if n > MAX_PLAUSIBLE_RANKS {
            return Vec::new();
        }
        (0..n).filter(|r| !self.members.contains_key(r)).collect()
    }
}

/// The whole job.
#[derive(Debug, Clone, Default)]
pub struct JobModel {
    pub processes: Vec<ProcessModel>,
    pub comms: BTreeMap<u64, CommView>,
    /// Every failure, earliest first.
    pub failures: Vec<JobFailure>,
    /// Dumps that named a process another dump of the same kind already named: read as
    /// processes of their own, and said in the report.
    pub identity_clashes: Vec<IdentityClash>,
}

/// Two dumps of the same writer (two shim dumps, say) claiming one process identity (host,
/// boot, PID namespace, pid, start time). One process writes one dump per writer, so they are
/// two processes: containers that share a host name and boot id hand out the same small pids,
/// and a writer before format 2.2 did not record its PID namespace. Never merged silently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityClash {
    /// The dump read as a process of its own.
    pub file: String,
    /// The dump of the same identity read first.
    pub first: String,
    pub host: String,
    pub pid: u32,
}

/// Which writer a per-dump part came from; a process has at most one part of each. Synthetic
/// dumps (tests, tools) may split one process over several files: never a clash.
fn part_writer(p: &ProcessModel) -> Option<u8> {
    match (p.has_shim, p.has_prof) {
        (true, _) => Some(0),
        (_, true) => Some(1),
        _ => None,
    }
}

/// The parts of one identity as processes: each process takes at most one part per writer; a
/// second part of a writer starts another process and is recorded as a clash.
fn split_identity_clashes(
    group: Vec<ProcessModel>,
    clashes: &mut Vec<IdentityClash>,
) -> Vec<Vec<ProcessModel>> {
    let mut processes: Vec<Vec<ProcessModel>> = Vec::new();
    for part in group {
        let writer = part_writer(&part);
        let home = processes
            .iter()
            .position(|parts| writer.is_none() || parts.iter().all(|q| part_writer(q) != writer));
        match (home, processes.first()) {
            (Some(i), _) => processes[i].push(part),
            (None, None) => processes.push(vec![part]),
            (None, Some(first)) => {
                let first = first[0].files.first().cloned().unwrap_or_default();
                clashes.push(IdentityClash {
                    file: part.files.first().cloned().unwrap_or_default(),
                    first,
                    host: part.host.clone(),
                    pid: part.pid,
                });
                processes.push(vec![part]);
            }
        }
    }
    processes
}

impl JobModel {
    /// Builds the model from readable dumps; `shown` gives each dump's display path.
    pub fn build(dumps: &[Dump], shown: impl Fn(&Dump) -> String + Sync) -> Self {
        let parts: Vec<ProcessModel> = dumps
            .par_iter()
            .map(|d| ProcessModel::from_dump(d, shown(d)))
            .collect();
        Self::from_processes(parts)
    }

    /// Builds the model from per-dump parts (see [`ProcessModel::from_dump`]); parts of one
    /// process (shim and profiler dumps) are merged here.
    pub fn from_processes(parts: Vec<ProcessModel>) -> Self {
        // The parts of each process (its shim and profiler dumps, in the order given), merged
        // per process side by side: merging moves and re-times every event of a part.
        let mut by_key: BTreeMap<ProcessKey, Vec<ProcessModel>> = BTreeMap::new();
        for part in parts {
            by_key.entry(part.key()).or_default().push(part);
        }
        let mut identity_clashes = Vec::new();
        let groups: Vec<Vec<ProcessModel>> = by_key
            .into_values()
            .flat_map(|group| split_identity_clashes(group, &mut identity_clashes))
            .collect();
        let mut processes: Vec<ProcessModel> = groups
            .into_par_iter()
            .filter_map(|group| {
                let mut parts = group.into_iter();
                let mut process = parts.next()?;
                parts.for_each(|part| process.absorb(part));
                Some(process)
            })
            .collect();
        // Processes of one boot share CLOCK_MONOTONIC: convert all of them with the best
        // calibration among them, so their order does not depend on each file's calibration
        // jitter. Across machines the wall clock (NTP/PTP) is all there is.
        let mut best: HashMap<String, (u64, i128)> = HashMap::new();
        for p in processes.iter().filter(|p| !p.boot_id.is_empty()) {
            let e = best
                .entry(p.boot_id.clone())
                .or_insert((p.clock_uncertainty, p.clock_offset));
            if p.clock_uncertainty < e.0 {
                *e = (p.clock_uncertainty, p.clock_offset);
            }
        }
        processes.par_iter_mut().for_each(|p| {
            if let Some(&(u, off)) = best.get(&p.boot_id) {
                p.rebase(off, u);
            }
            p.finish();
        });
        // Sort by world rank where known so output reads rank 0, 1, 2...
        // (Compared by reference: a cloned host name per comparison was n log n allocations.)
        fn order(p: &ProcessModel) -> (bool, Option<u32>, &str, u32) {
            let rank = p.world_rank();
            (rank.is_none(), rank, p.host.as_str(), p.pid)
        }
        processes.sort_by(|a, b| order(a).cmp(&order(b)));
        let mut comms: BTreeMap<u64, CommView> = BTreeMap::new();
        for (i, p) in processes.iter().enumerate() {
            for m in &p.memberships {
                if m.comm_hash == 0 {
                    continue;
                }
                let c = comms.entry(m.comm_hash).or_insert_with(|| CommView {
                    comm_hash: m.comm_hash,
                    ..CommView::default()
                });
                // Processes come in order, so `i` is already listed only as the last entry (a
                // `contains` scan here made a 16k-rank communicator cost ranks x ranks).
                let claims = c.nranks_claims.entry(m.nranks).or_default();
                if claims.last() != Some(&i) {
                    claims.push(i);
                }
                let mem = c.members.entry(m.rank).or_default();
                if mem.last() != Some(&i) {
                    mem.push(i);
                }
            }
        }
        // Each process's own failures side by side (a scan of all its calls), then in process
        // order as one loop would list them.
        let per_process: Vec<Vec<FailureEvent>> =
            processes.par_iter().map(ProcessModel::failures).collect();
        let mut failures: Vec<JobFailure> = per_process
            .into_iter()
            .enumerate()
            .flat_map(|(i, fs)| {
                fs.into_iter().map(move |f| JobFailure {
                    process: i,
                    t: f.t,
                    what: f.what,
                })
            })
            .collect();
        // A process that vanished while others went on is a failure at its last record — a lower
        // bound, so only when its peers outlived it: a whole job killed at once is a hang, and a
        // rank blocked in communicator init was waiting, not failing.
        // Per process: whether it failed and its latest failure time, kept up to date as
        // failures are added below (scanning `failures` per process was ranks x ranks).
        let mut failed = vec![false; processes.len()];
        let mut last_failure_t: Vec<Option<u64>> = vec![None; processes.len()];
        for f in &failures {
            failed[f.process] = true;
            last_failure_t[f.process] = last_failure_t[f.process].max(Some(f.t));
        }
        for (i, p) in processes.iter().enumerate() {
            let stop_signal = p
                .signals
                .iter()
                .find(|(signo, _)| is_termination_signal(*signo))
                .copied();
            let crashed = p.signals.iter().any(|(s, _)| !is_termination_signal(*s));
            let vanished = p.died() && p.signals.is_empty();
            if crashed || !(vanished || stop_signal.is_some()) || failed[i] {
                continue;
            }
            // A rank blocked in communicator init was waiting for its peers, not failing.
            if p.in_flight_calls().any(|(_, c)| c.is_init()) {
                continue;
            }
            let end = stop_signal.map_or(p.last_t, |(_, t)| t);
            // Peers that exited cleanly or failed after this process's end went on without it.
            let outlived_by_events = processes.iter().enumerate().any(|(j, q)| {
                j != i
                    && ((q.clean_exit && q.exit_t.is_none_or(|x| x > end))
                        || last_failure_t[j].is_some_and(|t| t >= end))
            });
            // Blocked in a call when it ended (init, a collective's enqueue, a group end) while
            // the rest of the job merely lives on: it was waiting on its peers, not failing; the
            // stuck-rank checks say on what.
            let blocked = p.in_flight_calls().next().is_some();
            // A process busy until its last record (calls every few microseconds) ended there:
            // peers that entered NCCL calls well after that went on without it, even when they
            // were stopped later themselves (blocked in a collective that needed it).
            let outlived_by_calls = !blocked
                && vanished
                && p.busy_spacing().is_some_and(|gap| {
                    processes.iter().enumerate().any(|(j, q)| {
                        let margin = gap
                            .saturating_mul(20)
                            .max(1_000_000)
                            .saturating_add(p.clock_uncertainty.max(q.clock_uncertainty));
                        j != i
                            && q.calls
                                .iter()
                                .any(|c| c.t_enter > end.saturating_add(margin))
                    })
                });
            let outlived = outlived_by_events
                || outlived_by_calls
                || (!blocked && processes.iter().enumerate().any(|(j, q)| j != i && q.alive));
            if outlived {
                failed[i] = true;
                last_failure_t[i] = last_failure_t[i].max(Some(end));
                failures.push(JobFailure {
                    process: i,
                    t: end,
                    what: match stop_signal {
                        Some((signo, _)) => FailureWhat::Signal(signo),
                        None => FailureWhat::Died,
                    },
                });
            }
        }
        failures.sort_by_key(|f| (f.t, f.process));
        Self {
            processes,
            comms,
            failures,
            identity_clashes,
        }
    }

    /// The hosts the processes ran on, as recorded (processes known only from a Flight
    /// Recorder dump name none).
    pub fn hosts(&self) -> BTreeSet<&str> {
        self.processes
            .iter()
            .filter(|p| !p.flight_recorder_only)
            .map(|p| p.host.as_str())
            .collect()
    }

    pub fn synthetic(&self) -> bool {
        !self.processes.is_empty() && self.processes.iter().all(|p| p.synthetic)
    }

    /// The earliest failure of each process, earliest process first.
    /// Every failure with NCCL's or CUDA's text: (process, call index, time), in failure order.
    pub fn failures_with_text(&self) -> Vec<(usize, usize, u64)> {
        self.failures
            .iter()
            .filter_map(|fl| match fl.what {
                FailureWhat::Call(i) | FailureWhat::AsyncError(i) => Some((fl.process, i, fl.t)),
                FailureWhat::Signal(_) | FailureWhat::Died => None,
            })
            .filter(|&(p, i, _)| self.processes[p].calls[i].error_text.is_some())
            .collect()
    }

    pub fn first_failure_per_process(&self) -> Vec<JobFailure> {
        let mut seen = BTreeSet::new();
        self.failures
            .iter()
            .filter(|f| seen.insert(f.process))
            .copied()
            .collect()
    }

    /// A one-line description of a failure.
    pub fn describe(&self, f: &JobFailure) -> String {
        let p = &self.processes[f.process];
        match f.what {
            FailureWhat::Call(i) => p.describe_call(i),
            FailureWhat::AsyncError(i) => p.calls[i].describe(),
            FailureWhat::Signal(s) => format!("fatal signal {}", crate::names::signal_name(s)),
            FailureWhat::Died => match p.in_flight_calls().last() {
                Some((_, c)) => format!("its dump ends without a clean exit, inside {}", c.name),
                None => "its dump ends without a clean exit".to_owned(),
            },
        }
    }

    /// The call behind a failure, if it was one.
    pub fn failure_call(&self, f: &JobFailure) -> Option<&CallEvent> {
        match f.what {
            FailureWhat::Call(i) | FailureWhat::AsyncError(i) => {
                self.processes[f.process].calls.get(i)
            }
            FailureWhat::Signal(_) | FailureWhat::Died => None,
        }
    }

    /// Each member's profiler totals for communicator `comm`, in rank order: (rank, process,
    /// totals); members whose profiler kept none are left out.
    pub fn comm_aggregates(&self, comm: u64) -> Vec<(u32, usize, &aggregates::CommAggregate)> {
        self.comm_members(comm)
            .into_iter()
            .filter_map(|(r, p)| Some((r, p, self.processes[p].aggregate(comm)?)))
            .collect()
    }

    /// Processes that are members of a communicator, in rank order.
    pub fn comm_members(&self, comm_hash: u64) -> Vec<(u32, usize)> {
        self.comms
            .get(&comm_hash)
            .map(|c| {
                c.members
                    .iter()
                    .flat_map(|(r, ps)| ps.iter().map(move |p| (*r, *p)))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A profiler start record the plugin completed in place (its exit time is the event's stop).
/// Start records without the flag (older plugins, other generators) are instants whose exit
/// time says nothing; their stop is a separate `ProfStop` record.
/// A call record as an event (without its error text, which [`ProcessModel::add_dump`] adds).
/// Whether a return code is an error: a CUresult other than success, or an `ncclResult_t`
/// error (`ncclInProgress` is not one).
fn rc_is_error(is_cuda: bool, rc: i32) -> bool {
    if is_cuda {
        rc != 0
    } else {
        NcclResult::from_i32(rc).is_error()
    }
}

/// [`CallEvent::prunable`] from the fields it reads, shared with [`calls_beyond_keep`], which
/// decides on records before any event is built. An operation is never
/// `ncclCommGetAsyncError`, so only its own return code can report an error.
fn prunable(call: Option<CallId>, in_flight: bool, is_cuda: bool, rc: i32, nested: bool) -> bool {
    call.is_some_and(|id| {
        id.is_nccl_operation() && !matches!(id, CallId::NcclSend | CallId::NcclRecv)
    }) && !in_flight
        && !rc_is_error(is_cuda, rc)
        && !nested
}

/// Whether a call record's return code is a CUresult (a driver call).
fn record_is_cuda(r: &Record, call: Option<CallId>) -> bool {
    r.flags & slot_flags::RC_IS_CUDA != 0 || call.is_some_and(CallId::is_cuda)
}

fn call_event(r: &Record, t_enter: u64, t_exit: Option<u64>) -> CallEvent {
    let call = r.call();
    CallEvent {
        call,
        name: match call {
            Some(c) => Cow::Borrowed(c.name()),
            None => Cow::Owned(r.call_name()),
        },
        rc: r.rc,
        is_cuda: record_is_cuda(r, call),
        t_enter,
        t_exit,
        comm: r.comm,
        args: r.args,
        error_text: None,
        tid: r.tid,
        nested: r.flags & slot_flags::NESTED != 0,
    }
}

/// Per record (in `records`' order): a call that [`ProcessModel::compact`]`(keep)` would drop,
/// i.e. a [`CallEvent::prunable`] one older than its thread's last `keep` such calls. Walked
/// from the newest, as `compact` walks the built calls, so both choose the same calls.
fn calls_beyond_keep(records: &[&Record], keep: usize) -> Vec<bool> {
    let mut skip = vec![false; records.len()];
    if keep == usize::MAX {
        return skip;
    }
    let mut seen_per_tid: FxHashMap<u32, usize> = FxHashMap::default();
    for (j, r) in records.iter().enumerate().rev() {
        if r.kind() != Some(RecordKind::Call) {
            continue;
        }
        let call = r.call();
        let nested = r.flags & slot_flags::NESTED != 0;
        if prunable(call, r.in_flight(), record_is_cuda(r, call), r.rc, nested) {
            let n = seen_per_tid.entry(r.tid).or_default();
            *n += 1;
            skip[j] = *n > keep;
        }
    }
    skip
}

fn completed_in_place(r: &Record) -> bool {
    r.flags & slot_flags::COMPLETES_IN_PLACE != 0 && r.t_exit_ns.is_some()
}
