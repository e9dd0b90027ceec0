//! `ncclshim trace`: the dumps of a job as a Chrome / Perfetto trace (JSON "Trace Event Format"),
//! one process per rank, one track per thread and writer, intercepted calls and profiler events
//! as slices with their arguments, profiler operations that outlive their CPU call on a track of
//! their own, GPU kernel time on tracks of their own (per channel when the plugin recorded
//! channels, else one slice per operation on a "GPU" track). Work in flight at the end of the
//! dump is drawn to the last sign of life of its process and marked; failures, fatal signals and
//! unclean process ends are instant markers.
//!
//! Valid for Perfetto's JSON importer by construction ([`validate`] states and checks the
//! rules): track ids are small and named by metadata, and every track's slices nest strictly
//! (`layout` moves a slice that would overlap another to a second track of the same group).
//!
//! Clocks: one alignment for the report and the trace, the model's ([`JobModel`]): each
//! process's CLOCK_MONOTONIC times go on the wall clock with the best calibration pair of its
//! machine (the smallest uncertainty among the processes of one boot), so the trace orders
//! events exactly as the report's failure order does; across machines the wall clock (NTP/PTP)
//! is all there is, and the report says when two failures are too close to order.

pub mod validate;

use crate::model::JobModel;
use crate::names::{rc_name, signal_name};
use ncclshim_format::profnames::{self, NameTable};
use ncclshim_format::reader::{Dump, GpuDone, Record};
use ncclshim_format::schema::slot_flags;
use ncclshim_format::SlotRef;
use ncclshim_format::{args, ArgView, CallId, NcclResult, RecordKind};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};

/// Profiler state carrying a KernelCh's GPU stop time (`ncclProfilerKernelChStop`).
const KERNEL_CH_STOP: u64 = 22;
/// v7 `ncclProfilerKernelPhaseStop`.
const KERNEL_PHASE_STOP: u64 = 31;

/// GPU-done records of one dump by operation, and the dump's GPU-to-record-clock offset: the
/// smallest (record time - GPU stop) over the records that read the clock, i.e. the plugin's
/// polling delay at its best. `None` when no record read the clock.
fn gpu_done_records(d: &Dump) -> (HashMap<SlotRef, (GpuDone, u64)>, Option<i128>) {
    let mut done = HashMap::new();
    let mut offset: Option<i128> = None;
    for r in &d.records {
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
        done.insert(op, (g, r.t_enter_ns));
    }
    (done, offset)
}

fn wall(d: &Dump, mono: u64) -> i128 {
    i128::from(crate::model::to_wall(d, mono))
}

fn process_key(d: &Dump) -> (String, String, u32, u64) {
    let h = &d.header;
    (
        h.hostname.clone(),
        h.boot_id.clone(),
        h.pid,
        h.pid_start_ticks,
    )
}

fn named_args(r: &Record) -> Map<String, Value> {
    let mut m = Map::new();
    if let Some(call) = r.call() {
        for (name, v) in call.arg_names().iter().zip(r.args) {
            m.insert((*name).to_owned(), json!(v));
        }
        if matches!(
            call,
            CallId::ProfColl | CallId::ProfP2p | CallId::ProfCollApi | CallId::ProfP2pApi
        ) {
            if let Some(f) = r.arg("func").and_then(|c| NameTable::Func.name_of(c)) {
                m.insert("func".into(), json!(f));
            }
            if let Some(dt) = r
                .arg("datatype")
                .and_then(|c| NameTable::Datatype.name_of(c))
            {
                m.insert("datatype".into(), json!(dt));
            }
        }
        if call == CallId::ProfColl {
            let coll = args::ProfColl::from_args(&r.args);
            let (a, p) = profnames::unpack_algo_proto(coll.algo_proto);
            let (ch, warps, _) = profnames::unpack_channels_warps(coll.channels_warps);
            m.insert("algo".into(), json!(NameTable::Algo.name_of(a)));
            m.insert("proto".into(), json!(NameTable::Proto.name_of(p)));
            m.insert("channels".into(), json!(ch));
            m.insert("warps".into(), json!(warps));
        }
    }
    if r.comm != 0 {
        m.insert("comm".into(), json!(format!("{:#x}", r.comm)));
    }
    m
}

fn slice_name(r: &Record) -> String {
    let base = r.call_name();
    match r.call() {
        Some(CallId::ProfColl | CallId::ProfP2p | CallId::ProfCollApi | CallId::ProfP2pApi) => {
            match r.arg("func").and_then(|c| NameTable::Func.name_of(c)) {
                Some(f) => format!("{base} {f}"),
                None => base,
            }
        }
        _ => base,
    }
}

/// Where a slice or instant is drawn before tracks are laid out: one group per kind of track,
/// ordered as the tracks are shown. Each group becomes one track or, where its slices overlap
/// without nesting, several (`layout`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Group {
    /// A thread's own slices and instants, per writer (shim calls and profiler events apart:
    /// a profiler Coll can start inside a call and stop after it returned).
    Thread { writer: u8, tid: u32 },
    /// Profiler operations that outlive the CPU call that started them (they end at their
    /// kernel's end: `ENDS_AT_GPU_DONE`).
    Operations,
    /// One GPU kernel channel (KernelCh / KernelPhase events).
    GpuChannel(u64),
    /// One GPU slice per operation whose channels the plugin summarized.
    GpuOps,
}

/// A slice (`dur: Some`) or instant before layout; times in ns since the trace origin.
struct Item {
    pid: u64,
    group: Group,
    ts: i128,
    dur: Option<i128>,
    /// The event without ph/ts/dur/pid/tid.
    body: Map<String, Value>,
    /// An instant of process scope (`"s": "p"`): on the process track, not a thread's.
    process_scope: bool,
    /// Unfinished at the end of the dump: drawn up to the end of everything shown for its
    /// process (`dur` is set once that is known).
    open_end: bool,
}

fn body(name: String, cat: &str, args: Map<String, Value>) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("name".into(), json!(name));
    m.insert("cat".into(), json!(cat));
    m.insert("args".into(), Value::Object(args));
    m
}

/// An operation still running at the end of the dump: drawn up to `life_end`, named and marked so.
fn unfinished(name: String, args: &mut Map<String, Value>) -> String {
    args.insert("unfinished".into(), json!(true));
    format!("{name} (unfinished)")
}

/// Builds the trace for every readable dump; `job` supplies the rank labels.
///
/// The result is valid for Perfetto's JSON importer by construction ([`validate::validate`]
/// checks it): every track has a small synthetic `tid` (named by `thread_name` metadata), the
/// slices of a track nest strictly (slices that would overlap on one track go to a second
/// track of the same name, marked "overlapping"), and events are sorted by time.
pub fn build_trace(dumps: &[Dump], job: &JobModel) -> Value {
    // The model's calibration of each process (one clock alignment for report and trace); a
    // dump the model does not know keeps its own pair.
    let offsets: HashMap<(String, String, u32, u64), i128> = job
        .processes
        .iter()
        .map(|p| (p.key(), p.clock_offset))
        .collect();
    let at = |d: &Dump, mono: u64| -> i128 {
        match offsets.get(&process_key(d)) {
            Some(off) => i128::from(mono) + off,
            None => wall(d, mono),
        }
    };

    // Trace pid per process, in the model's rank order.
    let mut pids: HashMap<(String, String, u32, u64), u64> = HashMap::new();
    let mut process_meta: Vec<(u64, String)> = Vec::new();
    for (i, p) in job.processes.iter().enumerate() {
        let pid = i as u64 + 1;
        pids.insert(
            (p.host.clone(), p.boot_id.clone(), p.pid, p.start_ticks),
            pid,
        );
        process_meta.push((pid, p.label()));
    }
    // The last sign of life of each process: the latest time in any record of any of its
    // dumps (entry or exit), or its clean exit.
    let mut life_end: HashMap<u64, i128> = HashMap::new();
    for d in dumps {
        let Some(&pid) = pids.get(&process_key(d)) else {
            continue;
        };
        let last = d
            .records
            .iter()
            .map(|r| at(d, r.t_exit_ns.unwrap_or(r.t_enter_ns).max(r.t_enter_ns)))
            .chain(d.header.exit_monotonic_ns.map(|x| at(d, x)))
            .max();
        if let Some(t) = last {
            let e = life_end.entry(pid).or_insert(t);
            *e = (*e).max(t);
        }
    }

    let mut items: Vec<Item> = Vec::new();
    let mut group_names: HashMap<(u64, Group), String> = HashMap::new();
    for d in dumps {
        let Some(&pid) = pids.get(&process_key(d)) else {
            continue;
        };
        let end = life_end.get(&pid).copied().unwrap_or(0);
        let writer = d.header.writer_kind.map_or(0, |k| k as u8);
        let tag = d.header.writer_kind.map(|k| k.file_tag()).unwrap_or("dump");
        let thread = |tid: u32| Group::Thread { writer, tid };
        for ring in &d.rings {
            let name = if ring.thread_name.is_empty() {
                format!("{tag} tid {}", ring.tid)
            } else {
                format!("{} ({tag} tid {})", ring.thread_name, ring.tid)
            };
            group_names.entry((pid, thread(ring.tid))).or_insert(name);
        }
        let mut slice = |group: Group, ts: i128, end: i128, body: Map<String, Value>| {
            let open_end = body["args"].get("unfinished").is_some();
            items.push(Item {
                pid,
                group,
                ts,
                dur: Some((end - ts).max(0)),
                body,
                process_scope: false,
                open_end,
            });
        };
        let by_ref: HashMap<SlotRef, &Record> = d
            .records
            .iter()
            .filter(|r| r.kind() == Some(RecordKind::ProfStart))
            .map(|r| (r.slot_ref(), r))
            .collect();
        let mut stopped: HashMap<SlotRef, i128> = HashMap::new();
        // Kernel stop times: filled into the start record in place (the plugin's usual form),
        // or in a state record of their own (its fallback form).
        let mut kernel_stops: HashMap<SlotRef, u64> = d
            .records
            .iter()
            .filter(|r| r.kind() == Some(RecordKind::ProfStart) && in_place(r))
            .filter_map(|r| Some((r.slot_ref(), r.arg("gpu_stop_ns").filter(|&g| g != 0)?)))
            .collect();
        let mut instants: Vec<Item> = Vec::new();
        for r in &d.records {
            let t = at(d, r.t_enter_ns);
            match r.kind() {
                Some(RecordKind::Call) => {
                    let mut args = named_args(r);
                    let is_cuda = r.flags & slot_flags::RC_IS_CUDA != 0
                        || r.call().is_some_and(CallId::is_cuda);
                    let text = (r.blob != 0)
                        .then(|| d.blob(r.blob))
                        .flatten()
                        .map(|b| b.text());
                    let mut name = slice_name(r);
                    let exit = match r.t_exit_ns {
                        Some(x) => {
                            args.insert("rc".into(), json!(r.rc));
                            args.insert("rc_name".into(), json!(rc_name(r.rc, is_cuda)));
                            at(d, x).max(t)
                        }
                        None => {
                            args.insert("in_flight".into(), json!(true));
                            name = unfinished(name, &mut args);
                            end.max(t)
                        }
                    };
                    if let Some(text) = &text {
                        args.insert("text".into(), json!(text));
                    }
                    if let Some(failure) = failure_of(r, is_cuda) {
                        let mut fargs = Map::new();
                        fargs.insert("call".into(), json!(r.call_name()));
                        fargs.insert("rc".into(), json!(failure.1));
                        fargs.insert("rc_name".into(), json!(rc_name(failure.1, is_cuda)));
                        if let Some(text) =
                            text.filter(|_| r.flags & slot_flags::HAS_ERROR_TEXT != 0)
                        {
                            fargs.insert("error_text".into(), json!(text));
                        }
                        if r.comm != 0 {
                            fargs.insert("comm".into(), json!(format!("{:#x}", r.comm)));
                        }
                        instants.push(Item {
                            pid,
                            group: thread(r.tid),
                            ts: exit,
                            dur: None,
                            body: body(failure.0, "failure", fargs),
                            process_scope: false,
                            open_end: false,
                        });
                    }
                    slice(thread(r.tid), t, exit, body(name, "call", args));
                }
                Some(RecordKind::ProfStop) => {
                    let stop = args::ProfStop::from_args(&r.args);
                    if let Some(start) = SlotRef::decode(stop.handle) {
                        stopped.insert(start, t);
                    }
                }
                Some(RecordKind::ProfState) => {
                    let s = args::ProfState::from_args(&r.args);
                    if s.state != KERNEL_CH_STOP && s.state != KERNEL_PHASE_STOP {
                        continue;
                    }
                    if let Some(start) = SlotRef::decode(s.handle) {
                        kernel_stops.insert(start, s.value);
                    }
                }
                Some(RecordKind::Event) if r.call() == Some(CallId::FatalSignal) => {
                    let signo = r.arg("signo").unwrap_or(0);
                    instants.push(Item {
                        pid,
                        group: thread(r.tid),
                        ts: t,
                        dur: None,
                        body: body(
                            format!("fatal signal {}", signal_name(signo)),
                            "failure",
                            named_args(r),
                        ),
                        process_scope: true,
                        open_end: false,
                    });
                }
                Some(RecordKind::Event | RecordKind::CommInfo | RecordKind::Snapshot) => {
                    instants.push(Item {
                        pid,
                        group: thread(r.tid),
                        ts: t,
                        dur: None,
                        body: body(r.call_name(), "event", named_args(r)),
                        process_scope: false,
                        open_end: false,
                    });
                }
                _ => {}
            }
        }
        // Operations whose channels were summarized: one GPU slice each, placed on the record
        // clock through the dump's GPU clock offset (else where its GPU-done record says).
        let (gpu_done, gpu_offset) = gpu_done_records(d);
        let mut gpu_ends: HashMap<SlotRef, i128> = HashMap::new();
        for (sref, (g, t_record)) in &gpu_done {
            let Some(start) = by_ref.get(sref) else {
                continue;
            };
            let end_mono = match (g.clocked, gpu_offset) {
                (true, _) => Some(*t_record),
                (false, Some(o)) => Some((i128::from(g.gpu_stop) + o).max(0) as u64),
                // No record read the clock: the span is drawn ending where its operation started.
                (false, None) => None,
            };
            let dur = i128::from(g.gpu_stop - g.gpu_start);
            let gpu_end = end_mono.map_or(at(d, start.t_enter_ns), |m| at(d, m));
            gpu_ends.insert(*sref, gpu_end);
            group_names
                .entry((pid, Group::GpuOps))
                .or_insert_with(|| "GPU (operations)".to_owned());
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
            slice(
                Group::GpuOps,
                gpu_end - dur,
                gpu_end,
                body(slice_name(start), "gpu", args),
            );
        }
        let mut starts: Vec<(&SlotRef, &&Record)> = by_ref.iter().collect();
        starts.sort_by_key(|(s, _)| (s.ring, s.seq));
        for (sref, start) in starts {
            let t = at(d, start.t_enter_ns);
            let mut args = named_args(start);
            // Stopped in place (the start record's exit time) or by a separate stop record.
            let stop = stopped.get(sref).copied().or(start
                .t_exit_ns
                .filter(|_| in_place(start))
                .map(|x| at(d, x)));
            if matches!(
                start.call(),
                Some(CallId::ProfKernelCh | CallId::ProfKernelPhase)
            ) {
                // GPU work: on its channel's track, timed by the GPU when it reported its stop.
                let channel = start.arg("channel").unwrap_or(0);
                group_names
                    .entry((pid, Group::GpuChannel(channel)))
                    .or_insert_with(|| format!("GPU channel {channel}"));
                let gpu_start = start.arg("gpu_start_ns").filter(|&g| g != 0);
                let gpu_stop = kernel_stops.get(sref).copied();
                let name = "kernel".to_owned();
                let (name, cat, end_at) = match (gpu_start, gpu_stop) {
                    // GPU %globaltimer is its own time base: the slice sits where the proxy
                    // thread saw the kernel channel start, with the GPU-measured duration.
                    (Some(a), Some(b)) if b >= a => {
                        args.insert("gpu_start_ns".into(), json!(a));
                        args.insert("gpu_stop_ns".into(), json!(b));
                        (name, "gpu", t + i128::from(b - a))
                    }
                    _ => match stop {
                        Some(s) => {
                            args.insert("timed_by".into(), json!("cpu"));
                            (name, "gpu", s.max(t))
                        }
                        None => (unfinished(name, &mut args), "gpu", end.max(t)),
                    },
                };
                slice(Group::GpuChannel(channel), t, end_at, body(name, cat, args));
                continue;
            }
            // Channels summarized: the operation lasts until its kernel ended.
            let ends_at_gpu_done = start.flags & slot_flags::ENDS_AT_GPU_DONE != 0;
            let (group, stop) = if ends_at_gpu_done {
                group_names
                    .entry((pid, Group::Operations))
                    .or_insert_with(|| "operations (until GPU done)".to_owned());
                (Group::Operations, gpu_ends.get(sref).copied())
            } else {
                (thread(start.tid), stop)
            };
            let mut name = slice_name(start);
            let stop = match stop {
                Some(s) => s.max(t),
                None => {
                    name = unfinished(name, &mut args);
                    end.max(t)
                }
            };
            slice(group, t, stop, body(name, "profiler", args));
        }
        items.append(&mut instants);
    }
    // A process that neither exited cleanly nor is still running ended at its last sign of life.
    for p in &job.processes {
        let Some(&pid) = pids.get(&(p.host.clone(), p.boot_id.clone(), p.pid, p.start_ticks))
        else {
            continue;
        };
        let Some(&t) = life_end.get(&pid).filter(|_| p.died()) else {
            continue;
        };
        let mut args = Map::new();
        args.insert("clean_exit".into(), json!(false));
        args.insert("alive".into(), json!(false));
        let signals: Vec<String> = p.signals.iter().map(|(s, _)| signal_name(*s)).collect();
        args.insert("fatal_signals".into(), json!(signals));
        items.push(Item {
            pid,
            group: Group::Thread { writer: 0, tid: 0 },
            ts: t,
            dur: None,
            body: body(
                "process ended without a clean exit (last sign of life)".into(),
                "failure",
                args,
            ),
            process_scope: true,
            open_end: false,
        });
    }

    // Unfinished work lasts at least until the last sign of life of its process, and as long
    // as anything else drawn for it (GPU spans are placed by their GPU-measured durations).
    let mut shown_end: HashMap<u64, i128> = life_end;
    for i in items.iter().filter(|i| !i.open_end) {
        let e = shown_end.entry(i.pid).or_insert(i.ts);
        *e = (*e).max(i.ts + i.dur.unwrap_or(0));
    }
    for i in items.iter_mut().filter(|i| i.open_end) {
        let end = shown_end.get(&i.pid).copied().unwrap_or(i.ts).max(i.ts);
        i.dur = Some(end - i.ts);
    }
    let origin = items.iter().map(|i| i.ts).min().unwrap_or(0);
    let us = |t: i128| (t - origin) as f64 / 1000.0;
    let (tracks, placed) = layout(&mut items, &group_names);
    let mut events: Vec<Value> = Vec::new();
    process_meta.sort();
    for (pid, label) in &process_meta {
        events.push(json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}}));
        events.push(json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}));
    }
    for ((pid, tid), name) in &tracks {
        events.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}));
        events.push(json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}));
    }
    for (item, tid) in placed {
        let mut e = item.body;
        match item.dur {
            Some(dur) => {
                e.insert("ph".into(), json!("X"));
                e.insert("dur".into(), json!(dur as f64 / 1000.0));
            }
            None => {
                e.insert("ph".into(), json!("i"));
                e.insert(
                    "s".into(),
                    json!(if item.process_scope { "p" } else { "t" }),
                );
            }
        }
        e.insert("ts".into(), json!(us(item.ts)));
        e.insert("pid".into(), json!(item.pid));
        e.insert("tid".into(), json!(tid));
        events.push(Value::Object(e));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "generator": concat!("ncclshim ", env!("CARGO_PKG_VERSION")),
            "origin_unix_ns": origin as i64,
        },
    })
}

/// Where `ncclshim trace -o` writes: `-` is stdout, a name ending in `.gz` gets gzip, anything
/// else plain JSON.
pub fn write_trace(trace: &Value, output: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Write;
    let to = |w: &mut dyn Write| -> anyhow::Result<()> {
        serde_json::to_writer(&mut *w, trace)?;
        w.flush()?;
        Ok(())
    };
    if output == std::path::Path::new("-") {
        let stdout = std::io::stdout();
        return to(&mut std::io::BufWriter::new(stdout.lock()));
    }
    let f = std::fs::File::create(output)
        .map_err(|e| anyhow::anyhow!("{}: cannot create: {e}", output.display()))?;
    let w = std::io::BufWriter::new(f);
    if output.extension().is_some_and(|e| e == "gz") {
        let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
        to(&mut gz)?;
        gz.finish()?.flush()?;
        Ok(())
    } else {
        to(&mut { w })
    }
}

/// A call that failed: its instant's name and return code. A call returning an error, or an
/// `ncclCommGetAsyncError` that reported one (the call itself succeeded); `ncclInProgress` is
/// not a failure.
fn failure_of(r: &Record, is_cuda: bool) -> Option<(String, i32)> {
    r.t_exit_ns?;
    let failed = if is_cuda {
        r.rc != 0
    } else {
        NcclResult::from_i32(r.rc).is_error()
    };
    if failed {
        return Some((
            format!("{} failed: {}", r.call_name(), rc_name(r.rc, is_cuda)),
            r.rc,
        ));
    }
    if r.call() == Some(CallId::NcclCommGetAsyncError) {
        let reported = args::NcclCommGetAsyncError::from_args(&r.args).async_error;
        let e = i32::try_from(reported).ok()?;
        return NcclResult::from_i32(e)
            .is_error()
            .then(|| (format!("async error: {}", rc_name(e, false)), e));
    }
    None
}

/// Lays the items out on tracks: sorted by time (longer first at a tie, so a parent precedes
/// its children), each group's slices go to the first of its tracks where they nest strictly
/// (inside the innermost open slice, or after it ended), else to a new track of the group.
/// Instants stay on the group's first track (a zero-length slice always nests). Returns the
/// named tracks and every item with its track's `tid`, in output order.
#[allow(clippy::type_complexity)]
fn layout(
    items: &mut Vec<Item>,
    names: &HashMap<(u64, Group), String>,
) -> (BTreeMap<(u64, u64), String>, Vec<(Item, u64)>) {
    items.sort_by(|a, b| {
        (a.ts, std::cmp::Reverse(a.dur.unwrap_or(0)))
            .cmp(&(b.ts, std::cmp::Reverse(b.dur.unwrap_or(0))))
    });
    // Per (pid, group): each lane's stack of open slice ends.
    let mut lanes: BTreeMap<(u64, Group), Vec<Vec<i128>>> = BTreeMap::new();
    let mut assigned: Vec<usize> = Vec::with_capacity(items.len());
    for item in items.iter() {
        let stacks = lanes.entry((item.pid, item.group.clone())).or_default();
        if item.process_scope {
            assigned.push(0);
            continue;
        }
        let (start, end) = (item.ts, item.ts + item.dur.unwrap_or(0));
        let lane = if item.dur.is_none() {
            0
        } else {
            let mut found = None;
            for (i, stack) in stacks.iter_mut().enumerate() {
                while stack.last().is_some_and(|&e| e <= start) {
                    stack.pop();
                }
                if stack.last().is_none_or(|&e| end <= e) {
                    stack.push(end);
                    found = Some(i);
                    break;
                }
            }
            found.unwrap_or_else(|| {
                stacks.push(vec![end]);
                stacks.len() - 1
            })
        };
        if stacks.is_empty() {
            stacks.push(Vec::new());
        }
        assigned.push(lane);
    }
    // Small tids per process, in group then lane order (tid 0 is the process itself).
    let mut tids: BTreeMap<(u64, Group, usize), u64> = BTreeMap::new();
    let mut tracks: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let mut next: HashMap<u64, u64> = HashMap::new();
    for ((pid, group), stacks) in &lanes {
        for lane in 0..stacks.len() {
            let n = next.entry(*pid).or_insert(0);
            *n += 1;
            tids.insert((*pid, group.clone(), lane), *n);
            let base = names
                .get(&(*pid, group.clone()))
                .cloned()
                .unwrap_or_else(|| match group {
                    Group::Thread { tid, .. } => format!("tid {tid}"),
                    Group::Operations => "operations".into(),
                    Group::GpuChannel(c) => format!("GPU channel {c}"),
                    Group::GpuOps => "GPU (operations)".into(),
                });
            let name = if lane == 0 {
                base
            } else {
                format!("{base} (overlapping {lane})")
            };
            tracks.insert((*pid, *n), name);
        }
    }
    let placed = std::mem::take(items)
        .into_iter()
        .zip(assigned)
        .map(|(item, lane)| {
            let tid = if item.process_scope {
                0
            } else {
                tids[&(item.pid, item.group.clone(), lane)]
            };
            (item, tid)
        })
        .collect();
    (tracks, placed)
}

/// A profiler start record the plugin completes in place: its exit time is the event's stop and
/// `gpu_stop_ns` its kernel stop. Without the flag (older plugins, other generators) only
/// separate stop/state records say so.
fn in_place(r: &Record) -> bool {
    r.flags & slot_flags::COMPLETES_IN_PLACE != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use ncclshim_dump::config::RecorderConfig;
    use ncclshim_dump::identity::ProcessIdentity;
    use ncclshim_dump::{Entry, Recorder};
    use ncclshim_format::reader::read_dump;
    use ncclshim_format::WriterKind;

    fn rank_dump(dir: &std::path::Path, host: &str, pid: u32, rank: u64) -> Dump {
        let mut c = RecorderConfig::defaults(WriterKind::Synthetic, dir.to_path_buf());
        c.rings = 2;
        c.slots_per_ring = 64;
        c.arena_bytes = 4096;
        let id = ProcessIdentity {
            pid,
            ppid: 1,
            start_ticks: 7,
            boot_id: format!("boot-{host}"),
            hostname: host.into(),
            clocksource: "tsc".into(),
            run: Default::default(),
        };
        let rec = Recorder::create_with_identity(&c.normalized(), &id).unwrap();
        let ring = rec.claim_ring();
        let mut created = Entry::new(RecordKind::CommInfo, CallId::CommCreated);
        created.args[..3].copy_from_slice(&[0xabc, 2, rank]);
        ring.instant(&created);
        let mut e = Entry::new(RecordKind::Call, CallId::NcclAllReduce);
        e.args[0] = 1024;
        ring.begin(&e).complete(0);
        let mut coll = Entry::new(RecordKind::ProfStart, CallId::ProfColl);
        coll.args[3] = u64::from(NameTable::Func.code_of(b"AllReduce"));
        let start = ring.instant(&coll);
        let mut kch = Entry::new(RecordKind::ProfStart, CallId::ProfKernelCh);
        kch.args[2] = 3;
        kch.args[3] = 1_000_000;
        let kstart = ring.instant(&kch);
        let mut st = Entry::new(RecordKind::ProfState, CallId::ProfKernelCh);
        st.args[..3].copy_from_slice(&[kstart.encode(), KERNEL_CH_STOP, 1_005_000]);
        ring.instant(&st);
        let mut stop = Entry::new(RecordKind::ProfStop, CallId::ProfColl);
        stop.args[0] = start.encode();
        ring.instant(&stop);
        drop(ring.begin(&Entry::new(RecordKind::Call, CallId::NcclGroupEnd)));
        read_dump(rec.path()).unwrap()
    }

    #[test]
    fn one_process_per_rank_with_calls_profiler_and_gpu_slices() {
        let dir = tempfile::tempdir().unwrap();
        let dumps = vec![
            rank_dump(dir.path(), "a", 10, 0),
            rank_dump(dir.path(), "b", 20, 1),
        ];
        let job = JobModel::build(&dumps, |d| d.path.display().to_string());
        let trace = build_trace(&dumps, &job);
        let events = trace["traceEvents"].as_array().unwrap();
        let names: Vec<&str> = events
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 2);
        assert!(names.iter().any(|n| n.starts_with("rank 0")), "{names:?}");
        let slice = |name: &str| events.iter().filter(|e| e["name"] == name).count();
        assert_eq!(slice("ncclAllReduce"), 2);
        assert_eq!(slice("Coll AllReduce"), 2);
        let gpu: Vec<_> = events.iter().filter(|e| e["cat"] == "gpu").collect();
        assert_eq!(gpu.len(), 2);
        assert_eq!(gpu[0]["dur"], json!(5.0));
        let in_flight: Vec<_> = events
            .iter()
            .filter(|e| e["args"]["in_flight"] == json!(true))
            .collect();
        assert_eq!(
            in_flight.len(),
            2,
            "ncclGroupEnd never returned on either rank"
        );
        for e in events.iter().filter(|e| e["ph"] == "X") {
            assert!(e["dur"].as_f64().unwrap() >= 0.0);
            assert!(e["ts"].as_f64().unwrap() >= 0.0);
        }
        validate::validate(&trace).unwrap();
    }

    /// The default plugin shape: Coll records open until their kernel ends, one GPU-done record
    /// per operation (one read the clock, one carries its operation's start time), and a Coll
    /// whose kernel never ended.
    #[test]
    fn summarized_operations_get_one_gpu_slice_each_placed_by_the_gpu_clock_offset() {
        use ncclshim_format::schema::{slot_flags, PROF_STATE_GPU_DONE};
        let dir = tempfile::tempdir().unwrap();
        let mut c = RecorderConfig::defaults(WriterKind::Profiler, dir.path().to_path_buf());
        c.rings = 2;
        c.slots_per_ring = 64;
        c.arena_bytes = 4096;
        let rec = Recorder::create(&c.normalized()).unwrap();
        let ring = rec.claim_ring();
        let mut init = Entry::new(RecordKind::CommInfo, CallId::ProfInit);
        init.args[..4].copy_from_slice(&[0xabc, 1, 2, 0]);
        ring.instant(&init);
        let op = |seq: u64| {
            let mut coll = Entry::new(RecordKind::ProfStart, CallId::ProfColl);
            coll.flags = slot_flags::COMPLETES_IN_PLACE | slot_flags::ENDS_AT_GPU_DONE;
            coll.comm = 0xabc;
            coll.args[2] = seq;
            coll.args[3] = u64::from(NameTable::Func.code_of(b"AllReduce"));
            let p = ring.begin(&coll);
            (p.slot_ref(), p.t_enter())
        };
        let done = |sref: SlotRef, gpu: (u64, u64)| {
            let mut e = Entry::new(RecordKind::ProfState, CallId::ProfColl);
            e.args[..5].copy_from_slice(&[sref.encode(), PROF_STATE_GPU_DONE, gpu.0, gpu.1, 2]);
            e
        };
        let (a, _) = op(0);
        ring.instant(&done(a, (1_000_000, 1_005_000)));
        let (b, b_start) = op(1);
        let mut late = done(b, (2_000_000, 2_010_000));
        late.flags = slot_flags::TIME_OF_NAMED;
        ring.instant_at(&late, b_start);
        let _hung = op(2);
        let d = read_dump(rec.path()).unwrap();
        let dumps = vec![d];
        let job = JobModel::build(&dumps, |d| d.path.display().to_string());
        let trace = build_trace(&dumps, &job);
        let events = trace["traceEvents"].as_array().unwrap();
        let f = |e: &Value, k: &str| e[k].as_f64().unwrap();
        let gpu: Vec<&Value> = events.iter().filter(|e| e["cat"] == "gpu").collect();
        assert_eq!(gpu.len(), 2, "one GPU slice per finished operation");
        let by_start = |g: u64| {
            *gpu.iter()
                .find(|e| e["args"]["gpu_start_ns"] == json!(g))
                .unwrap()
        };
        let (ga, gb) = (by_start(1_000_000), by_start(2_000_000));
        assert_eq!(f(ga, "dur"), 5.0);
        assert_eq!(f(gb, "dur"), 10.0);
        let track_name = |e: &Value| {
            events
                .iter()
                .find(|m| {
                    m["name"] == "thread_name" && m["pid"] == e["pid"] && m["tid"] == e["tid"]
                })
                .map(|m| m["args"]["name"].clone())
        };
        assert_eq!(track_name(ga), Some(json!("GPU (operations)")));
        // B has no clock read of its own: it ends (2_010_000 - 1_005_000) ns after A ends.
        let end = |e: &Value| f(e, "ts") + f(e, "dur");
        assert!((end(gb) - end(ga) - 1005.0).abs() < 0.01, "{ga} {gb}");
        // The Coll slices last until their GPU end; the third never ended.
        let colls: Vec<&Value> = events
            .iter()
            .filter(|e| {
                e["cat"] == "profiler"
                    && e["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("Coll AllReduce"))
            })
            .collect();
        assert_eq!(colls.len(), 3);
        let coll = |seq: u64| {
            *colls
                .iter()
                .find(|e| e["args"]["seq"] == json!(seq))
                .unwrap()
        };
        assert!((end(coll(0)) - end(ga)).abs() < 0.01);
        assert!((end(coll(1)) - end(gb)).abs() < 0.01);
        assert_eq!(coll(2)["args"]["unfinished"], json!(true));
        assert_eq!(coll(2)["name"], "Coll AllReduce (unfinished)");
        // They outlive their CPU call: a track of their own.
        assert_eq!(
            track_name(coll(0)),
            Some(json!("operations (until GPU done)"))
        );
        validate::validate(&trace).unwrap();
        assert!(coll(0)["args"].get("unfinished").is_none());
    }
}
