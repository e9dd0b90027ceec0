//! One dump file read into a part of a process ([`ProcessModel::from_dump`]): the header's
//! facts (how the process ended, what the dump lost), the communicator table, the profiler's
//! totals and the snapshots, then the records in time order: calls and the shim's events here,
//! the profiler's events in [`super::profiler_events`].

use super::compact::calls_beyond_keep;
use super::profiler_events::ProfilerEvents;
use super::{
    aggregates, facts, record_is_cuda, to_wall, CallEvent, CommProgress, LostOn, Membership,
    OpCall, ProcessModel, SignalFact,
};
use ncclshim_format::reader::{Dump, Record};
use ncclshim_format::schema::slot_flags;
use ncclshim_format::{
    args, ArgView, BlobKind, CallId, ExitVia, NcclResult, RecordKind, WriterKind,
};
// Per-record maps keyed by the dump's integers: FxHash (see the workspace Cargo.toml).
use rustc_hash::FxHashMap;
use std::borrow::Cow;

impl ProcessModel {
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

    /// Adds one dump's facts; of the calls [`CallEvent::prunable`], only the last `keep` per
    /// thread are built (the others are only counted in `pruned`).
    fn add_dump(&mut self, d: &Dump, shown_path: String, keep: usize) {
        self.add_file_facts(d, shown_path);
        self.add_ending(d);
        let h = &d.header;
        self.comms_not_kept += h.comms_not_kept;
        if self.run_id.is_empty() && !h.run.id.is_empty() {
            self.run_source = h.run.source.clone();
            self.run_id = h.run.id.clone();
        }
        self.add_comm_table(d);
        for a in aggregates::from_dump(d) {
            self.add_aggregate(a);
        }
        self.add_snapshots(d);
        self.add_records(d, keep);
    }

    /// What the file is and what it lost: the reader's warnings, its writer, its flags, the
    /// records lost to ring wrap.
    fn add_file_facts(&mut self, d: &Dump, shown_path: String) {
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
    }

    /// How the process ended, as the header tells: its exit, its last sign of life, the fatal
    /// signal the shim's handler recorded.
    fn add_ending(&mut self, d: &Dump) {
        let h = &d.header;
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
    }

    /// The communicator table: a membership and a progress entry per communicator.
    fn add_comm_table(&mut self, d: &Dump) {
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
    }

    /// The JSON snapshots: environment, libraries, host facts, GPUs, command line.
    fn add_snapshots(&mut self, d: &Dump) {
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
    }

    /// The records in time order; of the calls [`CallEvent::prunable`], only the last `keep`
    /// per thread are built.
    fn add_records(&mut self, d: &Dump, keep: usize) {
        let mut profiler = ProfilerEvents::default();
        let mut configs = CollConfigs::default();
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
        profiler.read_inits(self, &records);

        for (j, r) in records.into_iter().enumerate() {
            let t = to_wall(d, r.t_enter_ns);
            if self.first_t == 0 || t < self.first_t {
                self.first_t = t;
            }
            let t_exit = r.t_exit_ns.map(|x| to_wall(d, x));
            self.last_t = self.last_t.max(t_exit.unwrap_or(t)).max(t);
            let Some(kind) = r.kind() else { continue };
            match kind {
                RecordKind::Call if skip_call[j] => {}
                RecordKind::Call => {
                    if let Some(tag) = configs.tag_of_call(r) {
                        self.coll_tags.insert((r.tid, t), tag);
                    }
                    let mut ev = call_event(r, t, t_exit);
                    ev.error_text = text_of(d, r);
                    self.add_call(ev);
                }
                RecordKind::CommInfo | RecordKind::Event | RecordKind::Snapshot => {
                    self.add_event(d, r, t, &mut configs)
                }
                RecordKind::ProfStart => profiler.start(self, r, t),
                RecordKind::ProfStop => profiler.stop(self, r),
                RecordKind::ProfState => profiler.state(self, r),
            }
        }
    }

    /// One of the shim's event records at wall time `t`: a communicator created, a
    /// collective's configuration, a fatal signal, a note of the recorder's.
    fn add_event(&mut self, d: &Dump, r: &Record, t: u64, configs: &mut CollConfigs) {
        match r.call() {
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
            Some(CallId::CollConfig) => configs.note(r),
            Some(CallId::FatalSignal) => {
                let signal = args::FatalSignal::from_args(&r.args);
                self.signals.push((signal.signo, t));
            }
            Some(CallId::RecorderNote) => {
                if let Some(s) = text_of(d, r) {
                    self.notes.push(s);
                }
            }
            _ => {}
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
}

/// Each thread's last `collConfig` record with a tag, until its collective: (comm, seq, tag).
#[derive(Default)]
struct CollConfigs(FxHashMap<u32, (u64, u64, u64)>);

impl CollConfigs {
    /// A `collConfig` record: the tag the thread's next collective is configured with.
    fn note(&mut self, r: &Record) {
        let c = args::CollConfig::from_args(&r.args);
        // u64::MAX: the struct did not reach the tag (or was not NCCL's).
        if c.user_tag != 0 && c.user_tag != u64::MAX {
            self.0.insert(r.tid, (r.comm, c.seq, c.user_tag));
        }
    }

    /// The tag of call record `r`, when it is the thread's configured collective: its config
    /// record came just before. Any operation call of the thread ends the wait.
    fn tag_of_call(&mut self, r: &Record) -> Option<u64> {
        let &(comm, seq, tag) = self.0.get(&r.tid)?;
        let op_seq = r
            .call()
            .filter(|c| c.is_nccl_operation())
            .map(|_| args::Collective::from_args(&r.args).seq);
        if op_seq.is_some() {
            self.0.remove(&r.tid);
        }
        (op_seq == Some(seq) && r.comm == comm).then_some(tag)
    }
}

/// The text blob a record points to (an error text, a note), when it is not a JSON snapshot.
fn text_of(d: &Dump, r: &Record) -> Option<String> {
    (r.blob != 0)
        .then(|| d.blob(r.blob))
        .flatten()
        .filter(|b| !b.kind().is_some_and(BlobKind::is_json))
        .map(|b| b.text())
}

fn sign_extend(v: u64) -> i64 {
    v as i64
}

/// A call record as an event (without its error text, which [`ProcessModel::add_records`] adds).
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
