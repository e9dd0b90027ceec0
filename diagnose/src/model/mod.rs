//! The diagnosis model: one [`ProcessModel`] per process (its shim and profiler dumps joined by
//! host, boot id, pid and start time), its communicator memberships, calls, errors with NCCL's
//! text, snapshots and profiler events, all on one wall-clock time base; and a [`JobModel`] that
//! joins processes into communicators by commHash / uniqueId hash and orders every failure in
//! time so the first failing rank can be named.
//!
//! This file holds the model's types, what they answer, and the top of the flow
//! ([`JobModel::from_processes`]); the steps are their own files: one dump read into a part of a
//! process (`dump`, its profiler events in `profiler_events`), a long history made small
//! (`compact`), the parts of a process joined on one clock (`parts`), and the job's failures in
//! time (`failures`).

pub mod aggregates;
mod compact;
mod dump;
pub mod endpoints;
pub mod facts;
mod failures;
mod parts;
mod profiler_events;
pub mod references;
pub mod serial;

use crate::names::{nccl_version_string, rc_name};
use facts::{GpuFacts, HostFacts, LibFacts};
use ncclshim_format::reader::{Dump, Record};
use ncclshim_format::schema::slot_flags;
use ncclshim_format::{args, ArgView, CallId, ExitVia, NcclResult};
use rayon::prelude::*;
// Per-record maps keyed by the dump's integers: FxHash (see the workspace Cargo.toml).
use rustc_hash::FxHashMap;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

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

/// A record time (CLOCK_MONOTONIC) on the wall clock, through the dump's calibration pair.
pub fn to_wall(d: &Dump, mono: u64) -> u64 {
    let c = &d.header.clock;
    (i128::from(mono) - i128::from(c.monotonic_ns) + i128::from(c.realtime_ns))
        .clamp(0, u64::MAX as i128) as u64
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
        let (mut processes, identity_clashes) = Self::join_parts(parts);
        // Processes of one boot share CLOCK_MONOTONIC: convert all of them with the best
        // calibration among them, so their order does not depend on each file's calibration
        // jitter. Across machines the wall clock (NTP/PTP) is all there is.
        let best = Self::best_calibration_per_boot(&processes);
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
        let comms = comm_views(&processes);
        let mut failures = Self::own_failures(&processes);
        Self::add_ended_processes(&processes, &mut failures);
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

    /// The earliest failure of each process, earliest process first.
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

/// What every process said about each communicator it is a member of, by commHash;
/// `processes` in their final order.
fn comm_views(processes: &[ProcessModel]) -> BTreeMap<u64, CommView> {
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
    comms
}

/// Whether a return code is an error: a CUresult other than success, or an `ncclResult_t`
/// error (`ncclInProgress` is not one).
fn rc_is_error(is_cuda: bool, rc: i32) -> bool {
    if is_cuda {
        rc != 0
    } else {
        NcclResult::from_i32(rc).is_error()
    }
}

/// [`CallEvent::prunable`] from the fields it reads, shared with [`compact::calls_beyond_keep`], which
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
