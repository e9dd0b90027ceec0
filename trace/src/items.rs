//! The trace's items of one dump, small: where each slice or instant goes, when, and which
//! record it draws ([`What`]), without its JSON body. The body is made from the record only when
//! the event is written ([`render`]), so a process's million records cost a million small
//! items, not a million JSON maps (`ncclshim trace` once took ~7 KB per record).

use super::record::{
    failure_of, in_place, named_args, slice_name, Group, KERNEL_CH_STOP, KERNEL_PHASE_STOP,
};
use ncclshim_diagnose::names::{rc_name, signal_name};
use ncclshim_format::reader::{Dump, GpuDone, Record};
use ncclshim_format::schema::slot_flags;
use ncclshim_format::SlotRef;
use ncclshim_format::{args, ArgView, CallId, RecordKind};
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// What an item draws; record indices are into its dump's `records`.
#[derive(Debug, Clone, Copy)]
pub(super) enum What {
    /// An intercepted call (`unfinished`: it never returned).
    Call {
        rec: usize,
    },
    /// The failure marker of a call.
    Failure {
        rec: usize,
    },
    FatalSignal {
        rec: usize,
    },
    /// An event, communicator-info or snapshot record.
    Event {
        rec: usize,
    },
    /// One operation's GPU span from its GPU-done record.
    GpuOp {
        start: usize,
        done: usize,
    },
    /// A kernel channel (or phase) slice, and how it was timed.
    Kernel {
        rec: usize,
        timing: KernelTiming,
    },
    /// A profiler event.
    Profiler {
        rec: usize,
        unfinished: bool,
    },
    /// The process ended without a clean exit (not from a record).
    ProcessEnded,
}

impl What {
    /// The record an item draws (the start record of a GPU span), if any.
    pub(super) fn record(self) -> Option<usize> {
        match self {
            What::Call { rec }
            | What::Failure { rec }
            | What::FatalSignal { rec }
            | What::Event { rec }
            | What::Kernel { rec, .. }
            | What::Profiler { rec, .. } => Some(rec),
            What::GpuOp { start, .. } => Some(start),
            What::ProcessEnded => None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) enum KernelTiming {
    /// GPU %globaltimer start and stop.
    Gpu(u64, u64),
    /// Only the CPU saw it stop.
    Cpu,
    Unfinished,
}

/// A slice (`dur: Some`) or instant before layout; times in ns on the trace's clock.
#[derive(Debug, Clone)]
pub(super) struct Item {
    /// Index of the item's dump among its process's dumps.
    pub dump: usize,
    pub group: Group,
    pub ts: i128,
    pub dur: Option<i128>,
    pub what: What,
    /// An instant of process scope (`"s": "p"`): on the process track, not a thread's.
    pub process_scope: bool,
    /// Unfinished at the end of the dump: drawn up to the end of everything shown for its
    /// process (`dur` is set once that is known).
    pub open_end: bool,
}

/// GPU-done records of one dump by operation (the last one per operation wins), and the dump's
/// GPU-to-record-clock offset: the smallest (record time - GPU stop) over the records that read
/// the clock, i.e. the plugin's polling delay at its best. `None` when no record read the clock.
fn gpu_done_records(d: &Dump) -> (HashMap<SlotRef, (GpuDone, usize)>, Option<i128>) {
    let mut done = HashMap::new();
    let mut offset: Option<i128> = None;
    for (i, r) in d.records.iter().enumerate() {
        let Some(g) = r.gpu_done().filter(|g| g.gpu_stop >= g.gpu_start) else {
            continue;
        };
        let Some(op) = SlotRef::decode(g.op) else {
            continue;
        };
        if g.clocked {
            let o = i128::from(r.t_enter_ns) - i128::from(g.gpu_stop);
            offset = Some(offset.map_or(o, |m| m.min(o)));
        }
        done.insert(op, (g, i));
    }
    (done, offset)
}

/// Every item of dump `d` (number `dump` of its process) in the order the trace has always
/// made them (slices, then instants), handed to `emit` one at a time; `at` puts a record time
/// on the trace's clock. Unfinished slices get `dur: Some(0)` and `open_end` (the process's end
/// is known only once all its dumps are read). Also names the groups it draws on in `names`.
pub(super) fn dump_items(
    d: &Dump,
    dump: usize,
    at: &dyn Fn(u64) -> i128,
    names: &mut HashMap<Group, String>,
    emit: &mut dyn FnMut(Item),
) {
    let scan = DumpScan {
        d,
        dump,
        writer: d.header.writer_kind.map_or(0, |k| k as u8),
        at,
    };
    scan.name_threads(names);
    let starts = profiler_starts(d);
    let (stops, instants) = scan.record_items(emit);
    let gpu_ends = scan.gpu_op_items(&starts, names, emit);
    scan.profiler_items(&starts, &stops, &gpu_ends, names, emit);
    for i in instants {
        emit(i);
    }
}

/// The profiler's start records of dump `d` by their slot.
fn profiler_starts(d: &Dump) -> HashMap<SlotRef, usize> {
    d.records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.kind() == Some(RecordKind::ProfStart))
        .map(|(i, r)| (r.slot_ref(), i))
        .collect()
}

/// When the dump's profiler operations stopped, by the slot of their start record.
struct Stops {
    /// By a stop record of their own, on the trace's clock.
    stopped: HashMap<SlotRef, i128>,
    /// Kernel stop times: filled into the start record in place (the plugin's usual form), or in
    /// a state record of their own (its fallback form).
    kernel: HashMap<SlotRef, u64>,
}

/// The kernel stop times filled into their start records in place (see [`Stops::kernel`]).
fn in_place_kernel_stops(d: &Dump) -> HashMap<SlotRef, u64> {
    d.records
        .iter()
        .filter(|r| r.kind() == Some(RecordKind::ProfStart) && in_place(r))
        .filter_map(|r| Some((r.slot_ref(), r.arg("gpu_stop_ns").filter(|&g| g != 0)?)))
        .collect()
}

/// One dump as its items are made: the dump, its number among its process's dumps, the writer
/// whose threads its records are on, and the trace's clock.
struct DumpScan<'a> {
    d: &'a Dump,
    dump: usize,
    writer: u8,
    at: &'a dyn Fn(u64) -> i128,
}

impl DumpScan<'_> {
    fn thread(&self, tid: u32) -> Group {
        Group::Thread {
            writer: self.writer,
            tid,
        }
    }

    fn item(&self, group: Group, ts: i128, dur: Option<i128>, what: What) -> Item {
        Item {
            dump: self.dump,
            group,
            ts,
            dur,
            what,
            process_scope: false,
            open_end: false,
        }
    }

    fn slice(&self, group: Group, ts: i128, end: i128, what: What) -> Item {
        self.item(group, ts, Some((end - ts).max(0)), what)
    }

    fn open(&self, group: Group, ts: i128, what: What) -> Item {
        Item {
            open_end: true,
            ..self.item(group, ts, Some(0), what)
        }
    }

    /// Names each thread's group after the thread (its name when it has one) and the writer.
    fn name_threads(&self, names: &mut HashMap<Group, String>) {
        let tag = self
            .d
            .header
            .writer_kind
            .map(|k| k.file_tag())
            .unwrap_or("dump");
        for ring in &self.d.rings {
            let name = if ring.thread_name.is_empty() {
                format!("{tag} tid {}", ring.tid)
            } else {
                format!("{} ({tag} tid {})", ring.thread_name, ring.tid)
            };
            names.entry(self.thread(ring.tid)).or_insert(name);
        }
    }

    /// Walks the records in order: each call's slice is emitted; its failure, fatal signals and
    /// events are returned as instants (drawn after every slice); profiler and kernel stops are
    /// returned for the profiler's slices ([`Self::profiler_items`]).
    fn record_items(&self, emit: &mut dyn FnMut(Item)) -> (Stops, Vec<Item>) {
        let mut stops = Stops {
            stopped: HashMap::new(),
            kernel: in_place_kernel_stops(self.d),
        };
        let mut instants: Vec<Item> = Vec::new();
        for (rec, r) in self.d.records.iter().enumerate() {
            let t = (self.at)(r.t_enter_ns);
            match r.kind() {
                Some(RecordKind::Call) => {
                    let is_cuda = call_is_cuda(r);
                    match r.t_exit_ns {
                        Some(x) => {
                            let exit = (self.at)(x).max(t);
                            if failure_of(r, is_cuda).is_some() {
                                instants.push(self.item(
                                    self.thread(r.tid),
                                    exit,
                                    None,
                                    What::Failure { rec },
                                ));
                            }
                            emit(self.slice(self.thread(r.tid), t, exit, What::Call { rec }));
                        }
                        None => emit(self.open(self.thread(r.tid), t, What::Call { rec })),
                    }
                }
                Some(RecordKind::ProfStop) => {
                    let stop = args::ProfStop::from_args(&r.args);
                    if let Some(start) = SlotRef::decode(stop.handle) {
                        stops.stopped.insert(start, t);
                    }
                }
                Some(RecordKind::ProfState) => {
                    let s = args::ProfState::from_args(&r.args);
                    if s.state != KERNEL_CH_STOP && s.state != KERNEL_PHASE_STOP {
                        continue;
                    }
                    if let Some(start) = SlotRef::decode(s.handle) {
                        stops.kernel.insert(start, s.value);
                    }
                }
                Some(RecordKind::Event) if r.call() == Some(CallId::FatalSignal) => {
                    instants.push(Item {
                        process_scope: true,
                        ..self.item(self.thread(r.tid), t, None, What::FatalSignal { rec })
                    });
                }
                Some(RecordKind::Event | RecordKind::CommInfo | RecordKind::Snapshot) => {
                    instants.push(self.item(self.thread(r.tid), t, None, What::Event { rec }));
                }
                _ => {}
            }
        }
        (stops, instants)
    }

    /// Operations whose channels were summarized: one GPU slice each, placed on the record clock
    /// through the dump's GPU clock offset (else where its GPU-done record says). In operation
    /// order, so the trace does not depend on a hash map's order. Returns where each one's GPU
    /// span ended, by the slot of its start record.
    fn gpu_op_items(
        &self,
        starts: &HashMap<SlotRef, usize>,
        names: &mut HashMap<Group, String>,
        emit: &mut dyn FnMut(Item),
    ) -> HashMap<SlotRef, i128> {
        let d = self.d;
        let (gpu_done, gpu_offset) = gpu_done_records(d);
        let mut gpu_done: Vec<(SlotRef, (GpuDone, usize))> = gpu_done.into_iter().collect();
        gpu_done.sort_by_key(|(s, _)| (s.ring, s.seq));
        let mut gpu_ends: HashMap<SlotRef, i128> = HashMap::new();
        for (sref, (g, done)) in &gpu_done {
            let Some(&start) = starts.get(sref) else {
                continue;
            };
            let t_record = d.records[*done].t_enter_ns;
            let end_mono = match (g.clocked, gpu_offset) {
                (true, _) => Some(t_record),
                (false, Some(o)) => Some((i128::from(g.gpu_stop) + o).max(0) as u64),
                // No record read the clock: the span is drawn ending where its operation started.
                (false, None) => None,
            };
            let dur = i128::from(g.gpu_stop - g.gpu_start);
            let gpu_end = (self.at)(end_mono.unwrap_or(d.records[start].t_enter_ns));
            gpu_ends.insert(*sref, gpu_end);
            names
                .entry(Group::GpuOps)
                .or_insert_with(|| "GPU (operations)".to_owned());
            emit(self.slice(
                Group::GpuOps,
                gpu_end - dur,
                gpu_end,
                What::GpuOp { start, done: *done },
            ));
        }
        gpu_ends
    }

    /// One slice per profiler start record, in slot order: kernel channels (and phases) on
    /// their channel's track ([`Self::kernel_item`]), other operations on their thread's or the
    /// operations' track ([`Self::operation_item`]).
    fn profiler_items(
        &self,
        starts: &HashMap<SlotRef, usize>,
        stops: &Stops,
        gpu_ends: &HashMap<SlotRef, i128>,
        names: &mut HashMap<Group, String>,
        emit: &mut dyn FnMut(Item),
    ) {
        let mut starts: Vec<(&SlotRef, &usize)> = starts.iter().collect();
        starts.sort_by_key(|(s, _)| (s.ring, s.seq));
        for (sref, &rec) in starts {
            let start = &self.d.records[rec];
            let t = (self.at)(start.t_enter_ns);
            // Stopped in place (the start record's exit time) or by a separate stop record.
            let stop = stops
                .stopped
                .get(sref)
                .copied()
                .or(start.t_exit_ns.filter(|_| in_place(start)).map(self.at));
            emit(
                if matches!(
                    start.call(),
                    Some(CallId::ProfKernelCh | CallId::ProfKernelPhase)
                ) {
                    self.kernel_item(rec, t, stop, stops.kernel.get(sref).copied(), names)
                } else {
                    self.operation_item(rec, t, stop, gpu_ends.get(sref).copied(), names)
                },
            );
        }
    }

    /// GPU work: on its channel's track, timed by the GPU when it reported its stop
    /// (`gpu_stop`), else by the CPU's `stop`, else unfinished.
    fn kernel_item(
        &self,
        rec: usize,
        t: i128,
        stop: Option<i128>,
        gpu_stop: Option<u64>,
        names: &mut HashMap<Group, String>,
    ) -> Item {
        let start = &self.d.records[rec];
        let channel = start.arg("channel").unwrap_or(0);
        let group = Group::GpuChannel(channel);
        names
            .entry(group.clone())
            .or_insert_with(|| format!("GPU channel {channel}"));
        let gpu_start = start.arg("gpu_start_ns").filter(|&g| g != 0);
        match (gpu_start, gpu_stop) {
            // GPU %globaltimer is its own time base: the slice sits where the proxy thread
            // saw the kernel channel start, with the GPU-measured duration.
            (Some(a), Some(b)) if b >= a => self.slice(
                group,
                t,
                t + i128::from(b - a),
                What::Kernel {
                    rec,
                    timing: KernelTiming::Gpu(a, b),
                },
            ),
            _ => match stop {
                Some(s) => self.slice(
                    group,
                    t,
                    s.max(t),
                    What::Kernel {
                        rec,
                        timing: KernelTiming::Cpu,
                    },
                ),
                None => self.open(
                    group,
                    t,
                    What::Kernel {
                        rec,
                        timing: KernelTiming::Unfinished,
                    },
                ),
            },
        }
    }

    /// A profiler operation: on its thread's track until it stopped (`stop`), or, when its
    /// channels were summarized, on the operations' track until its kernel ended (`gpu_end`).
    fn operation_item(
        &self,
        rec: usize,
        t: i128,
        stop: Option<i128>,
        gpu_end: Option<i128>,
        names: &mut HashMap<Group, String>,
    ) -> Item {
        let start = &self.d.records[rec];
        // Channels summarized: the operation lasts until its kernel ended.
        let ends_at_gpu_done = start.flags & slot_flags::ENDS_AT_GPU_DONE != 0;
        let (group, stop) = if ends_at_gpu_done {
            names
                .entry(Group::Operations)
                .or_insert_with(|| "operations (until GPU done)".to_owned());
            (Group::Operations, gpu_end)
        } else {
            (self.thread(start.tid), stop)
        };
        match stop {
            Some(s) => self.slice(
                group,
                t,
                s.max(t),
                What::Profiler {
                    rec,
                    unfinished: false,
                },
            ),
            None => self.open(
                group,
                t,
                What::Profiler {
                    rec,
                    unfinished: true,
                },
            ),
        }
    }
}

/// What a process's last sign of life was: the trace draws work in flight at the end up to it
/// and says which it was (`drawn_to`), so a reader knows how far the slice's end can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum LifeSign {
    /// Its latest record (a call's entry or exit, an event).
    Record,
    /// The shim's liveness stamp (`last_alive`), written while the process was still polling
    /// NCCL without leaving a record (a hung job's async-error polls).
    Heartbeat,
    /// It called `exit` / `_exit` (the time of the call).
    ExitCall,
    /// The fatal signal the shim's handler caught (a SIGTERM of the launcher, a crash).
    Signal,
    /// Its clean exit.
    CleanExit,
}

impl LifeSign {
    pub(super) fn describe(self) -> &'static str {
        match self {
            LifeSign::Record => "the process's last record",
            LifeSign::Heartbeat => "the process's last liveness stamp",
            LifeSign::ExitCall => "the process's exit call",
            LifeSign::Signal => "the fatal signal the process received",
            LifeSign::CleanExit => "the process's clean exit",
        }
    }
}

/// The last sign of life of `d` on the record clock: its latest record time (entry or exit),
/// its liveness stamp, the fatal signal its handler caught, its exit call or its clean exit,
/// whichever is latest (at a tie, the one that says most of how the process ended).
pub(super) fn last_sign_of_life(d: &Dump) -> Option<(u64, LifeSign)> {
    let h = &d.header;
    d.records
        .iter()
        .map(|r| {
            (
                r.t_exit_ns.unwrap_or(r.t_enter_ns).max(r.t_enter_ns),
                LifeSign::Record,
            )
        })
        .chain(h.last_alive_ns.map(|t| (t, LifeSign::Heartbeat)))
        .chain(h.exit.map(|e| (e.t_ns, LifeSign::ExitCall)))
        .chain(h.signal.map(|s| (s.t_ns, LifeSign::Signal)))
        .chain(h.exit_monotonic_ns.map(|t| (t, LifeSign::CleanExit)))
        .max()
}

fn call_is_cuda(r: &Record) -> bool {
    r.flags & slot_flags::RC_IS_CUDA != 0 || r.call().is_some_and(CallId::is_cuda)
}

fn body(name: String, cat: &str, args: Map<String, Value>) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("name".into(), json!(name));
    m.insert("cat".into(), json!(cat));
    m.insert("args".into(), Value::Object(args));
    m
}

/// An operation still running at the end of the dump: drawn up to the process's end, named and
/// marked so.
fn unfinished(name: String, args: &mut Map<String, Value>) -> String {
    args.insert("unfinished".into(), json!(true));
    format!("{name} (unfinished)")
}

/// The event's name, category and arguments (no ph/ts/dur/pid/tid). `d` is the item's dump
/// (none for [`What::ProcessEnded`]); `signals` the process's fatal signals.
pub(super) fn render(what: What, d: Option<&Dump>, signals: &[(u64, u64)]) -> Map<String, Value> {
    let record = |rec: usize| &d.expect("a record's item has its dump").records[rec];
    match what {
        What::Call { rec } => {
            let r = record(rec);
            let d = d.expect("a record's item has its dump");
            let mut args = named_args(r);
            let is_cuda = call_is_cuda(r);
            let text = (r.blob != 0)
                .then(|| d.blob(r.blob))
                .flatten()
                .map(|b| b.text());
            let mut name = slice_name(r);
            if r.t_exit_ns.is_some() {
                args.insert("rc".into(), json!(r.rc));
                args.insert("rc_name".into(), json!(rc_name(r.rc, is_cuda)));
            } else {
                args.insert("in_flight".into(), json!(true));
                name = unfinished(name, &mut args);
            }
            if let Some(text) = text {
                args.insert("text".into(), json!(text));
            }
            body(name, "call", args)
        }
        What::Failure { rec } => {
            let r = record(rec);
            let d = d.expect("a record's item has its dump");
            let is_cuda = call_is_cuda(r);
            let (name, rc) = failure_of(r, is_cuda).expect("a failure item is a failed call");
            let mut fargs = Map::new();
            fargs.insert("call".into(), json!(r.call_name()));
            fargs.insert("rc".into(), json!(rc));
            fargs.insert("rc_name".into(), json!(rc_name(rc, is_cuda)));
            if r.blob != 0 && r.flags & slot_flags::HAS_ERROR_TEXT != 0 {
                if let Some(b) = d.blob(r.blob) {
                    fargs.insert("error_text".into(), json!(b.text()));
                }
            }
            if r.comm != 0 {
                fargs.insert("comm".into(), json!(format!("{:#x}", r.comm)));
            }
            body(name, "failure", fargs)
        }
        What::FatalSignal { rec } => {
            let r = record(rec);
            let signo = r.arg("signo").unwrap_or(0);
            body(
                format!("fatal signal {}", signal_name(signo)),
                "failure",
                named_args(r),
            )
        }
        What::Event { rec } => {
            let r = record(rec);
            body(r.call_name(), "event", named_args(r))
        }
        What::GpuOp { start, done } => {
            let g = record(done)
                .gpu_done()
                .expect("a GPU span item is drawn from a GPU-done record");
            let mut args = Map::new();
            args.insert("gpu_start_ns".into(), json!(g.gpu_start));
            args.insert("gpu_stop_ns".into(), json!(g.gpu_stop));
            args.insert("channels".into(), json!(g.channels));
            let placed_by = if g.clocked {
                "its own clock read"
            } else {
                "the dump's GPU clock offset"
            };
            args.insert("placed_by".into(), json!(placed_by));
            body(slice_name(record(start)), "gpu", args)
        }
        What::Kernel { rec, timing } => {
            let mut args = named_args(record(rec));
            let mut name = "kernel".to_owned();
            match timing {
                KernelTiming::Gpu(a, b) => {
                    args.insert("gpu_start_ns".into(), json!(a));
                    args.insert("gpu_stop_ns".into(), json!(b));
                }
                KernelTiming::Cpu => {
                    args.insert("timed_by".into(), json!("cpu"));
                }
                KernelTiming::Unfinished => name = unfinished(name, &mut args),
            }
            body(name, "gpu", args)
        }
        What::Profiler {
            rec,
            unfinished: open,
        } => {
            let start = record(rec);
            let mut args = named_args(start);
            let mut name = slice_name(start);
            if open {
                name = unfinished(name, &mut args);
            }
            body(name, "profiler", args)
        }
        What::ProcessEnded => {
            let mut args = Map::new();
            args.insert("clean_exit".into(), json!(false));
            args.insert("alive".into(), json!(false));
            let signals: Vec<String> = signals.iter().map(|(s, _)| signal_name(*s)).collect();
            args.insert("fatal_signals".into(), json!(signals));
            body(
                "process ended without a clean exit (last sign of life)".into(),
                "failure",
                args,
            )
        }
    }
}
