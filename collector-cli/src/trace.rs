//! `ncclshim trace`: the dumps of a job as a Chrome / Perfetto trace (JSON "Trace Event Format"),
//! one process per rank, one track per thread, intercepted calls and profiler events as slices
//! with their arguments, GPU kernel time on tracks of their own (per channel when the plugin
//! recorded channels, else one slice per operation on a "GPU" track).
//!
//! Clocks: each dump's CLOCK_MONOTONIC times are put on the wall clock with the dump's own
//! calibration pair (so hosts line up to NTP/PTP quality), then each host is shifted by the
//! median offset of the communicator-creation anchors it shares with the reference host:
//! `ncclCommInitRank` returns on every rank right after a bootstrap allgather, so those moments
//! are simultaneous to within network latency.

use crate::model::JobModel;
use ncclshim_dump::profnames::{self, NameTable};
use ncclshim_dump::reader::{Dump, GpuDone, Record};
use ncclshim_dump::writer::SlotRef;
use ncclshim_dump::{CallId, RecordKind};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};

/// Profiler state carrying a KernelCh's GPU stop time (`ncclProfilerKernelChStop`).
const KERNEL_CH_STOP: u64 = 22;
/// v7 `ncclProfilerKernelPhaseStop`.
const KERNEL_PHASE_STOP: u64 = 31;
/// Thread ids for the per-channel GPU tracks, well above any kernel tid.
const GPU_TRACK_BASE: u64 = 1 << 40;
/// The track of per-operation GPU slices (channels summarized), after any channel's.
const GPU_OPS_TRACK: u64 = GPU_TRACK_BASE + 0x1_0000;

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

/// Per-host clock shifts (ns) from shared communicator-creation anchors.
fn host_shifts(dumps: &[Dump]) -> HashMap<String, i128> {
    // comm hash → host → creation times (wall clock).
    let mut anchors: BTreeMap<u64, BTreeMap<String, Vec<i128>>> = BTreeMap::new();
    for d in dumps {
        for r in &d.records {
            let hash = match r.call() {
                Some(CallId::CommCreated) | Some(CallId::ProfInit) => r.args[0],
                _ => continue,
            };
            if hash == 0 {
                continue;
            }
            anchors
                .entry(hash)
                .or_default()
                .entry(d.header.boot_id.clone())
                .or_default()
                .push(wall(d, r.t_enter_ns));
        }
    }
    let Some(reference) = dumps.iter().map(|d| d.header.boot_id.clone()).min() else {
        return HashMap::new();
    };
    let mut diffs: HashMap<String, Vec<i128>> = HashMap::new();
    for hosts in anchors.values() {
        let Some(base) = hosts.get(&reference).and_then(|v| v.iter().min().copied()) else {
            continue;
        };
        for (host, times) in hosts {
            if *host != reference {
                if let Some(t) = times.iter().min() {
                    diffs.entry(host.clone()).or_default().push(t - base);
                }
            }
        }
    }
    diffs
        .into_iter()
        .map(|(h, mut v)| {
            v.sort_unstable();
            (h, v[v.len() / 2])
        })
        .collect()
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
            let (a, p) = profnames::unpack_algo_proto(r.args[7]);
            let (ch, warps, _) = profnames::unpack_channels_warps(r.args[8]);
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

/// Builds the trace for every readable dump; `job` supplies the rank labels.
pub fn build_trace(dumps: &[Dump], job: &JobModel) -> Value {
    let shifts = host_shifts(dumps);
    let at = |d: &Dump, mono: u64| -> i128 {
        wall(d, mono) - shifts.get(&d.header.boot_id).copied().unwrap_or(0)
    };
    let origin = dumps
        .iter()
        .flat_map(|d| d.records.iter().map(move |r| at(d, r.t_enter_ns)))
        .min()
        .unwrap_or(0);
    let us = |t: i128| (t - origin) as f64 / 1000.0;

    // Trace pid per process, in the model's rank order.
    let mut pids: HashMap<(String, String, u32, u64), (u64, String)> = HashMap::new();
    for (i, p) in job.processes.iter().enumerate() {
        pids.insert(
            (p.host.clone(), p.boot_id.clone(), p.pid, p.start_ticks),
            (i as u64 + 1, p.label()),
        );
    }
    let mut events: Vec<Value> = Vec::new();
    let mut named_threads: BTreeMap<(u64, u64), String> = BTreeMap::new();
    for (pid, label) in pids.values() {
        events
            .push(json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": label}}));
        events.push(json!({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}}));
    }

    for d in dumps {
        let Some(&(pid, _)) = pids.get(&process_key(d)) else {
            continue;
        };
        let end = d
            .records
            .iter()
            .map(|r| at(d, r.t_exit_ns.unwrap_or(r.t_enter_ns).max(r.t_enter_ns)))
            .max()
            .unwrap_or(0);
        let tag = d.header.writer_kind.map(|k| k.file_tag()).unwrap_or("dump");
        for ring in &d.rings {
            let name = if ring.thread_name.is_empty() {
                format!("{tag} tid {}", ring.tid)
            } else {
                format!("{} ({tag})", ring.thread_name)
            };
            named_threads
                .entry((pid, u64::from(ring.tid)))
                .or_insert(name);
        }
        let by_ref: HashMap<SlotRef, &Record> = d
            .records
            .iter()
            .filter(|r| r.kind() == Some(RecordKind::ProfStart))
            .map(|r| (r.slot_ref(), r))
            .collect();
        let mut stopped: HashMap<SlotRef, i128> = HashMap::new();
        // Kernel stop times: filled into the start record in place (the plugin's usual form),
        // or in a state record of their own (its fallback form, handled in the loop below).
        let mut kernel_stops: Vec<(&Record, u64)> = d
            .records
            .iter()
            .filter(|r| r.kind() == Some(RecordKind::ProfStart) && in_place(r))
            .filter_map(|r| Some((r, r.arg("gpu_stop_ns").filter(|&g| g != 0)?)))
            .collect();
        for r in &d.records {
            let t = at(d, r.t_enter_ns);
            let tid = u64::from(r.tid);
            match r.kind() {
                Some(RecordKind::Call) => {
                    let mut args = named_args(r);
                    args.insert("rc".into(), json!(r.rc));
                    if let Some(b) = (r.blob != 0).then(|| d.blob(r.blob)).flatten() {
                        args.insert("text".into(), json!(b.text()));
                    }
                    let exit = match r.t_exit_ns {
                        Some(x) => at(d, x),
                        None => {
                            args.insert("in_flight".into(), json!(true));
                            end
                        }
                    };
                    events.push(json!({
                        "ph": "X", "name": slice_name(r), "cat": "call", "pid": pid, "tid": tid,
                        "ts": us(t), "dur": ((exit - t).max(0) as f64) / 1000.0, "args": args,
                    }));
                }
                Some(RecordKind::ProfStop) => {
                    if let Some(start) = SlotRef::decode(r.args[0]) {
                        stopped.insert(start, t);
                    }
                }
                Some(RecordKind::ProfState) => {
                    let state = r.args[1];
                    if state != KERNEL_CH_STOP && state != KERNEL_PHASE_STOP {
                        continue;
                    }
                    if let Some(start) = SlotRef::decode(r.args[0]).and_then(|s| by_ref.get(&s)) {
                        kernel_stops.push((start, r.args[2]));
                    }
                }
                Some(RecordKind::Event | RecordKind::CommInfo | RecordKind::Snapshot) => {
                    events.push(json!({
                        "ph": "i", "s": "t", "name": r.call_name(), "cat": "event", "pid": pid,
                        "tid": tid, "ts": us(t), "args": named_args(r),
                    }));
                }
                _ => {}
            }
        }
        for (start, gpu_stop) in kernel_stops {
            let (channel, gpu_start) =
                (start.arg("channel").unwrap_or(0), start.arg("gpu_start_ns"));
            let Some(gpu_start) = gpu_start.filter(|&g| g != 0 && gpu_stop >= g) else {
                continue;
            };
            let gpu_tid = GPU_TRACK_BASE + channel;
            named_threads
                .entry((pid, gpu_tid))
                .or_insert_with(|| format!("GPU channel {channel}"));
            // GPU %globaltimer is its own time base: the slice sits where the proxy
            // thread saw the kernel channel start, with the GPU-measured duration.
            events.push(json!({
                "ph": "X", "name": "kernel", "cat": "gpu", "pid": pid, "tid": gpu_tid,
                "ts": us(at(d, start.t_enter_ns)),
                "dur": (gpu_stop - gpu_start) as f64 / 1000.0,
                "args": {"gpu_start_ns": gpu_start, "gpu_stop_ns": gpu_stop, "channel": channel},
            }));
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
            let end = end_mono.map_or(at(d, start.t_enter_ns), |m| at(d, m));
            gpu_ends.insert(*sref, end);
            named_threads
                .entry((pid, GPU_OPS_TRACK))
                .or_insert_with(|| "GPU (operations)".to_owned());
            events.push(json!({
                "ph": "X", "name": slice_name(start), "cat": "gpu", "pid": pid,
                "tid": GPU_OPS_TRACK, "ts": us(end - dur), "dur": dur as f64 / 1000.0,
                "args": {"gpu_start_ns": g.gpu_start, "gpu_stop_ns": g.gpu_stop,
                         "placed_by": if g.clocked { "its own clock read" } else { "the dump's GPU clock offset" }},
            }));
        }
        for (sref, start) in &by_ref {
            let t = at(d, start.t_enter_ns);
            let mut args = named_args(start);
            // Stopped in place (the start record's exit time) or by a separate stop record.
            let in_place_stop = start.t_exit_ns.filter(|_| in_place(start));
            // Channels summarized: the operation lasts until its kernel ended.
            let ends_at_gpu_done =
                start.flags & ncclshim_dump::schema::slot_flags::ENDS_AT_GPU_DONE != 0;
            let stop = if ends_at_gpu_done {
                gpu_ends.get(sref).copied()
            } else {
                stopped
                    .get(sref)
                    .copied()
                    .or(in_place_stop.map(|x| at(d, x)))
            };
            let stop = match stop {
                Some(s) => s,
                None => {
                    args.insert("unfinished".into(), json!(true));
                    end
                }
            };
            events.push(json!({
                "ph": "X", "name": slice_name(start), "cat": "profiler", "pid": pid,
                "tid": u64::from(start.tid), "ts": us(t), "dur": ((stop - t).max(0) as f64) / 1000.0,
                "args": args,
            }));
        }
    }
    for ((pid, tid), name) in named_threads {
        events.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}));
    }
    let shifts_json: Map<String, Value> = shifts
        .into_iter()
        .map(|(h, s)| (h, json!(s as i64)))
        .collect();
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "generator": concat!("ncclshim ", env!("CARGO_PKG_VERSION")),
            "origin_unix_ns": origin as i64,
            "host_clock_shifts_ns": shifts_json,
        },
    })
}

/// A profiler start record the plugin completes in place: its exit time is the event's stop and
/// `gpu_stop_ns` its kernel stop. Without the flag (older plugins, other generators) only
/// separate stop/state records say so.
fn in_place(r: &Record) -> bool {
    r.flags & ncclshim_dump::schema::slot_flags::COMPLETES_IN_PLACE != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use ncclshim_dump::config::RecorderConfig;
    use ncclshim_dump::identity::ProcessIdentity;
    use ncclshim_dump::reader::read_dump;
    use ncclshim_dump::{Entry, Recorder, WriterKind};

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
        assert!(trace["otherData"]["host_clock_shifts_ns"]
            .get("boot-b")
            .is_some());
        for e in events.iter().filter(|e| e["ph"] == "X") {
            assert!(e["dur"].as_f64().unwrap() >= 0.0);
            assert!(e["ts"].as_f64().unwrap() >= 0.0);
        }
    }

    /// The default plugin shape: Coll records open until their kernel ends, one GPU-done record
    /// per operation (one read the clock, one carries its operation's start time), and a Coll
    /// whose kernel never ended.
    #[test]
    fn summarized_operations_get_one_gpu_slice_each_placed_by_the_gpu_clock_offset() {
        use ncclshim_dump::schema::{slot_flags, PROF_STATE_GPU_DONE};
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
        assert_eq!(ga["tid"], json!(GPU_OPS_TRACK));
        // B has no clock read of its own: it ends (2_010_000 - 1_005_000) ns after A ends.
        let end = |e: &Value| f(e, "ts") + f(e, "dur");
        assert!((end(gb) - end(ga) - 1005.0).abs() < 0.01, "{ga} {gb}");
        // The Coll slices last until their GPU end; the third never ended.
        let colls: Vec<&Value> = events
            .iter()
            .filter(|e| e["cat"] == "profiler" && e["name"] == "Coll AllReduce")
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
        assert!(coll(0)["args"].get("unfinished").is_none());
    }
}
