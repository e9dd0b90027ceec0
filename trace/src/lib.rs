//! The trace builder of `ncclshim trace` (crate `ncclshim-trace`; the CLI parses the arguments,
//! calls [`input::trace_files`] and prints): the dumps of a job as a Chrome / Perfetto trace (JSON "Trace Event Format"),
//! one process per rank, one track per thread and writer, intercepted calls and profiler events
//! as slices with their arguments, profiler operations that outlive their CPU call on a track of
//! their own, GPU kernel time on tracks of their own (per channel when the plugin recorded
//! channels, else one slice per operation on a "GPU" track). Work in flight at the end of the
//! dump is drawn to the last sign of life of its process and marked; failures, fatal signals and
//! unclean process ends are instant markers.
//!
//! Valid for Perfetto's JSON importer by construction (the tests' validator,
//! `tests/support/trace_validate.rs`, states and checks the rules): track ids are small and named by metadata, and every track's slices nest strictly
//! (`layout` moves a slice that would overlap another to a second track of the same group).
//!
//! Clocks: one alignment for the report and the trace, the model's ([`JobModel`]): each
//! process's CLOCK_MONOTONIC times go on the wall clock with the best calibration pair of its
//! machine (the smallest uncertainty among the processes of one boot), so the trace orders
//! events exactly as the report's failure order does; across machines the wall clock (NTP/PTP)
//! is all there is, and the report says when two failures are too close to order.

pub mod flight_recorder;
pub mod input;
mod items;
mod record;

use flight_recorder::{NamedGroup, TraceFlightRecorder};
use items::{Item, LifeSign, What};
use ncclshim_diagnose::flight_recorder::format::FrEntry;
use ncclshim_diagnose::model::{JobModel, ProcessKey};
use ncclshim_format::reader::Dump;
use record::Group;
use serde_json::{json, Map, Value};
use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;

/// How long a slice still in flight at the end is drawn when nothing of its process came after
/// its start (a rank killed the moment it entered a call): never a 0-length slice, which a
/// viewer shows as nothing at all. Marked so in its `drawn_to` argument.
const NO_LATER_SIGN_NS: i128 = 1_000;
/// The `state` argument of every slice still in flight at the end of its dump.
pub const IN_FLIGHT_STATE: &str = "in flight at end";

fn process_key(d: &Dump) -> ProcessKey {
    ncclshim_diagnose::model::header_key(&d.header)
}

/// One process of the trace, in the model's rank order: its trace pid, label, the model's
/// calibration of its clock (one clock alignment for report and trace), and how it ended.
struct TraceProcess {
    pid: u64,
    label: String,
    clock_offset: i128,
    died: bool,
    signals: Vec<(u64, u64)>,
    /// Names of the process's communicators as its framework knows them (PyTorch's process
    /// group name and description, from the Flight Recorder dumps beside the shim's), by the
    /// communicator value its records carry (`comm`): drawn as each slice's `process_group`
    /// argument.
    process_groups: HashMap<u64, NamedGroup>,
}

fn trace_processes(job: &JobModel, fr: &TraceFlightRecorder) -> Vec<TraceProcess> {
    job.processes
        .iter()
        .enumerate()
        .map(|(i, p)| TraceProcess {
            pid: i as u64 + 1,
            label: p.label(),
            clock_offset: p.clock_offset,
            died: p.died(),
            signals: p.signals.clone(),
            process_groups: fr.groups_of(p),
        })
        .collect()
}

/// What the trace needs of one dump before its records are drawn: the earliest time of any
/// item it draws and its last sign of life, both on its record clock (the process's clock
/// offset is added later). Read while the dump is in memory for the model, so the trace's
/// origin is known before any event is written.
#[derive(Debug, Clone, Copy, Default)]
pub struct DumpExtent {
    earliest: Option<i128>,
    last: Option<u64>,
}

impl DumpExtent {
    pub fn of(d: &Dump) -> Self {
        let mut earliest: Option<i128> = None;
        let mut names = HashMap::new();
        items::dump_items(d, 0, &i128::from, &mut names, &mut |i| {
            earliest = Some(earliest.map_or(i.ts, |e| e.min(i.ts)));
        });
        Self {
            earliest,
            last: items::last_sign_of_life(d).map(|(t, _)| t),
        }
    }
}

/// The trace's time zero: its earliest item, over every dump and every process's end marker.
fn origin(processes: &[TraceProcess], extents: &[Vec<DumpExtent>]) -> i128 {
    let mut origin: Option<i128> = None;
    let mut see = |t: i128| origin = Some(origin.map_or(t, |o| o.min(t)));
    for (p, extents) in processes.iter().zip(extents) {
        for t in extents.iter().filter_map(|e| e.earliest) {
            see(t + p.clock_offset);
        }
        // A process that died gets a marker at its last sign of life.
        if let Some(last) = extents
            .iter()
            .filter_map(|e| e.last)
            .max()
            .filter(|_| p.died)
        {
            see(i128::from(last) + p.clock_offset);
        }
    }
    origin.unwrap_or(0)
}

/// The items of one process from its dumps, laid out and written as trace events (its
/// metadata first), each preceded by a comma unless it is the trace's first.
struct EventWriter<'w> {
    out: &'w mut dyn Write,
    fr: &'w TraceFlightRecorder,
    job: &'w JobModel,
    origin: i128,
    first: bool,
}

impl EventWriter<'_> {
    fn event(&mut self, e: &Value) -> std::io::Result<()> {
        if !std::mem::take(&mut self.first) {
            self.out.write_all(b",")?;
        }
        serde_json::to_writer(&mut *self.out, e).map_err(std::io::Error::from)
    }

    /// Writes process `p` (`job.processes[i]`) from its `dumps`: its items laid out on tracks,
    /// the metadata naming the process and its tracks first, then one event per item.
    fn process<D: Borrow<Dump>>(
        &mut self,
        i: usize,
        p: &TraceProcess,
        dumps: &[D],
    ) -> std::io::Result<()> {
        // This process's Flight Recorder collectives, by (group, collective_seq_id).
        let (fr, job) = (self.fr, self.job);
        let fr_collectives = fr.collectives_of(&job.processes[i]);
        let mut names: HashMap<Group, String> = HashMap::new();
        let (mut items, life_end) = process_items(p, dumps, &mut names);
        let drawn_end = draw_open_ends(&mut items, life_end);
        let pid = p.pid;
        self.event(&json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": p.label}}))?;
        self.event(&json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}))?;
        let (tracks, tids) = layout(&mut items, &names);
        for (tid, name) in &tracks {
            self.event(&json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}))?;
            self.event(&json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}))?;
        }
        let events = ProcessEvents {
            p,
            life_end,
            drawn_end,
            fr_collectives: &fr_collectives,
            origin: self.origin,
        };
        for (item, tid) in items.iter().zip(tids) {
            let d = match item.what {
                What::ProcessEnded => None,
                _ => Some(dumps[item.dump].borrow()),
            };
            self.event(&Value::Object(events.event(item, d, tid)))?;
        }
        Ok(())
    }
}

/// The items of process `p` from its `dumps` (naming the groups they draw on in `names`), with
/// a marker of its end when it died, and its last sign of life on the trace's clock.
fn process_items<D: Borrow<Dump>>(
    p: &TraceProcess,
    dumps: &[D],
    names: &mut HashMap<Group, String>,
) -> (Vec<Item>, Option<(i128, LifeSign)>) {
    let mut items: Vec<Item> = Vec::new();
    let mut life_end: Option<(i128, LifeSign)> = None;
    for (i, d) in dumps.iter().enumerate() {
        let d = d.borrow();
        let at = |mono: u64| i128::from(mono) + p.clock_offset;
        items::dump_items(d, i, &at, names, &mut |item| items.push(item));
        if let Some(sign) = items::last_sign_of_life(d).map(|(t, s)| (at(t), s)) {
            life_end = Some(life_end.map_or(sign, |e| e.max(sign)));
        }
    }
    // A process that neither exited cleanly nor is still running ended at its last sign
    // of life.
    if let Some((t, _)) = life_end.filter(|_| p.died) {
        items.push(Item {
            dump: 0,
            group: Group::Thread { writer: 0, tid: 0 },
            ts: t,
            dur: None,
            what: What::ProcessEnded,
            process_scope: true,
            open_end: false,
        });
    }
    (items, life_end)
}

/// Sets the length of every unfinished item: unfinished work lasts at least until the last
/// sign of life of its process (its liveness stamp, fatal signal or exit call, which come
/// after its last record when it hung), and as long as anything else drawn for it (GPU spans
/// are placed by their GPU-measured durations). Returns where they are drawn to and what that
/// end is.
fn draw_open_ends(
    items: &mut [Item],
    life_end: Option<(i128, LifeSign)>,
) -> Option<(i128, &'static str)> {
    let drawn_end = items
        .iter()
        .filter(|i| !i.open_end)
        .map(|i| {
            (
                i.ts + i.dur.unwrap_or(0),
                "the end of the process's other work",
            )
        })
        .chain(life_end.map(|(t, s)| (t, s.describe())))
        .max_by_key(|(t, _)| *t);
    for i in items.iter_mut().filter(|i| i.open_end) {
        let end = drawn_end.map_or(i.ts, |(t, _)| t);
        i.dur = Some(if end > i.ts {
            end - i.ts
        } else {
            NO_LATER_SIGN_NS
        });
    }
    drawn_end
}

/// What the events of one process's items draw on besides the item: the process, how far its
/// unfinished work is drawn and why ([`draw_open_ends`]), its last sign of life, its Flight
/// Recorder collectives by (group, collective_seq_id), and the trace's origin.
struct ProcessEvents<'a> {
    p: &'a TraceProcess,
    life_end: Option<(i128, LifeSign)>,
    drawn_end: Option<(i128, &'static str)>,
    fr_collectives: &'a HashMap<(&'a str, i64), &'a FrEntry>,
    origin: i128,
}

impl ProcessEvents<'_> {
    /// The trace event of `item` on track `tid`; `d` is its dump (none for the process's end).
    fn event(&self, item: &Item, d: Option<&Dump>, tid: u64) -> Map<String, Value> {
        let mut e = items::render(item.what, d, &self.p.signals);
        if let Some(Value::Object(args)) = e.get_mut("args") {
            self.annotate(item, d, args);
        }
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
        let us = |t: i128| (t - self.origin) as f64 / 1000.0;
        e.insert("ts".into(), json!(us(item.ts)));
        e.insert("pid".into(), json!(self.p.pid));
        e.insert("tid".into(), json!(tid));
        e
    }

    /// What the item's arguments say beyond its record: how far unfinished work is drawn, the
    /// process's last sign of life on its end marker, and the framework's process group of the
    /// record's communicator with the Flight Recorder entry of the same collective.
    fn annotate(&self, item: &Item, d: Option<&Dump>, args: &mut Map<String, Value>) {
        if item.open_end {
            args.insert("state".into(), json!(IN_FLIGHT_STATE));
            let reaches = self.drawn_end.filter(|(t, _)| *t > item.ts);
            args.insert(
                "drawn_to".into(),
                json!(reaches.map_or("no later sign of life: drawn 1 µs long", |(_, w)| w)),
            );
        }
        if let What::ProcessEnded = item.what {
            if let Some((_, sign)) = self.life_end {
                args.insert("last_sign_of_life".into(), json!(sign.describe()));
            }
        }
        let record = item
            .what
            .record()
            .and_then(|rec| d.map(|d| &d.records[rec]));
        if let Some((r, group)) =
            record.and_then(|r| Some((r, self.p.process_groups.get(&r.comm)?)))
        {
            args.insert("process_group".into(), json!(group.label));
            // The Flight Recorder entry of the same collective: the shim's seq N is
            // PyTorch's collective_seq_id N + 1.
            let entry = match (item.what, r.call(), r.arg("seq")) {
                (What::Call { .. }, Some(call), Some(seq))
                    if flight_recorder::is_numbered_collective(call) =>
                {
                    self.fr_collectives.get(&(group.name(), seq as i64 + 1))
                }
                _ => None,
            };
            if let Some(e) = entry {
                args.insert("flight_recorder".into(), flight_recorder::entry_arg(e));
            }
        }
    }
}

/// Writes the trace of `job` to `out`, one process at a time: `dumps_of(i)` gives the dumps of
/// `job.processes[i]` (in listing order) and `extents[i]` theirs ([`DumpExtent`]). Only one
/// process's records and small items are in memory at once.
///
/// The trace is valid for Perfetto's JSON importer by construction (`tests/support/trace_validate.rs`
/// checks it): every track has a small synthetic `tid` (named by `thread_name` metadata, which
/// comes before the process's events), the slices of a track nest strictly (slices that would
/// overlap on one track go to a second track of the same name, marked "overlapping"), and each
/// process's events are sorted by time.
pub fn write_trace_json<D: Borrow<Dump>>(
    out: &mut dyn Write,
    job: &JobModel,
    fr: &TraceFlightRecorder,
    extents: &[Vec<DumpExtent>],
    mut dumps_of: impl FnMut(usize) -> Vec<D>,
) -> std::io::Result<()> {
    let processes = trace_processes(job, fr);
    let origin = origin(&processes, extents);
    // The keys in the order serde_json has always written them (sorted).
    write!(
        out,
        "{{\"displayTimeUnit\":\"ns\",\"otherData\":{},\"traceEvents\":[",
        json!({
            "generator": concat!("ncclshim ", env!("CARGO_PKG_VERSION")),
            "origin_unix_ns": origin as i64,
        })
    )?;
    let mut w = EventWriter {
        out,
        fr,
        job,
        origin,
        first: true,
    };
    for (i, p) in processes.iter().enumerate() {
        let dumps = dumps_of(i);
        w.process(i, p, &dumps)?;
    }
    out.write_all(b"]}")?;
    Ok(())
}

/// Builds the whole trace in memory from loaded dumps (tests and small jobs); `job` supplies
/// the rank labels and clocks. The same events as `ncclshim trace` writes
/// ([`write_trace_json`]); a dump of a process the model does not know is left out.
pub fn build_trace(dumps: &[Dump], job: &JobModel) -> Value {
    let index: HashMap<ProcessKey, usize> = job
        .processes
        .iter()
        .enumerate()
        .map(|(i, p)| (p.key(), i))
        .collect();
    let mut by_process: Vec<Vec<&Dump>> = vec![Vec::new(); job.processes.len()];
    for d in dumps {
        if let Some(&i) = index.get(&process_key(d)) {
            by_process[i].push(d);
        }
    }
    let extents: Vec<Vec<DumpExtent>> = by_process
        .iter()
        .map(|ds| ds.iter().map(|d| DumpExtent::of(d)).collect())
        .collect();
    let mut bytes = Vec::new();
    let no_fr = TraceFlightRecorder::default();
    write_trace_json(&mut bytes, job, &no_fr, &extents, |i| by_process[i].clone())
        .expect("writing to memory");
    serde_json::from_slice(&bytes).expect("the trace is JSON")
}

/// Where `ncclshim trace -o` writes: `-` is stdout, a name ending in `.gz` gets gzip, anything
/// else plain JSON; `write` writes the trace.
pub fn write_trace_to(
    output: &std::path::Path,
    write: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let to = |w: &mut dyn Write| -> anyhow::Result<()> {
        write(&mut *w)?;
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

/// Writes a trace built in memory ([`build_trace`]) where `-o` says.
pub fn write_trace(trace: &Value, output: &std::path::Path) -> anyhow::Result<()> {
    write_trace_to(output, |w| Ok(serde_json::to_writer(w, trace)?))
}

/// Lays one process's items out on tracks: sorts them by time (longer first at a tie, so a
/// parent precedes its children; stable, so equal items keep the order they were made in);
/// each group's slices go to the first of its tracks where they nest strictly (inside the
/// innermost open slice, or after it ended), else to a new track of the group. Instants stay
/// on the group's first track (a zero-length slice always nests). Returns the named tracks by
/// `tid` (small, in group then lane order; 0 is the process itself) and each item's `tid`.
fn layout(items: &mut [Item], names: &HashMap<Group, String>) -> (BTreeMap<u64, String>, Vec<u64>) {
    items.sort_by(|a, b| {
        (a.ts, std::cmp::Reverse(a.dur.unwrap_or(0)))
            .cmp(&(b.ts, std::cmp::Reverse(b.dur.unwrap_or(0))))
    });
    // Per group: each lane's stack of open slice ends.
    let mut lanes: BTreeMap<Group, Vec<Vec<i128>>> = BTreeMap::new();
    let mut assigned: Vec<u32> = Vec::with_capacity(items.len());
    for item in items.iter() {
        let stacks = lanes.entry(item.group.clone()).or_default();
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
        assigned.push(lane as u32);
    }
    let mut first_tid: BTreeMap<&Group, u64> = BTreeMap::new();
    let mut tracks: BTreeMap<u64, String> = BTreeMap::new();
    let mut next = 0u64;
    for (group, stacks) in &lanes {
        first_tid.insert(group, next + 1);
        for lane in 0..stacks.len() {
            next += 1;
            let base = names.get(group).cloned().unwrap_or_else(|| match group {
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
            tracks.insert(next, name);
        }
    }
    let tids = items
        .iter()
        .zip(assigned)
        .map(|(item, lane)| {
            if item.process_scope {
                0
            } else {
                first_tid[&item.group] + u64::from(lane)
            }
        })
        .collect();
    (tracks, tids)
}

/// Perfetto's importer's rules, checked by the tests below (test support shared with the CLI's
/// tests and the lab; `trace/tests/validate.rs` tests it).
#[cfg(test)]
#[allow(dead_code)]
#[path = "../../tests/support/trace_validate.rs"]
mod validate;

#[cfg(test)]
mod tests {
    use super::record::KERNEL_CH_STOP;
    use super::*;
    use ncclshim_dump::config::RecorderConfig;
    use ncclshim_dump::identity::ProcessIdentity;
    use ncclshim_dump::{Entry, Recorder};
    use ncclshim_format::profnames::NameTable;
    use ncclshim_format::reader::read_dump;
    use ncclshim_format::CallId;
    use ncclshim_format::{RecordKind, SlotRef, WriterKind};

    fn rank_dump(dir: &std::path::Path, host: &str, pid: u32, rank: u64) -> Dump {
        let mut c = RecorderConfig::defaults(WriterKind::Synthetic, dir.to_path_buf());
        c.rings = 2;
        c.slots_per_ring = 64;
        c.arena_bytes = 4096;
        let id = ProcessIdentity {
            pid,
            ppid: 1,
            start_ticks: 7,
            pid_namespace: 0,
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

    /// A rank hung in a call: the call is drawn up to the rank's liveness stamp (a sign of life
    /// that left no record), marked in flight; a rank with no sign of life after entering its
    /// call still gets a visible slice, said to be of unknown length.
    #[test]
    fn a_call_in_flight_reaches_the_last_sign_of_life_and_is_never_empty() {
        let dir = tempfile::tempdir().unwrap();
        let hung_rank = |pid: u32, heartbeat: bool| {
            let mut c = RecorderConfig::defaults(WriterKind::Synthetic, dir.path().to_path_buf());
            c.rings = 2;
            c.slots_per_ring = 64;
            c.arena_bytes = 4096;
            let id = ProcessIdentity {
                pid,
                ppid: 1,
                start_ticks: 7,
                pid_namespace: 0,
                boot_id: "boot".into(),
                hostname: "h".into(),
                clocksource: "tsc".into(),
                run: Default::default(),
            };
            let rec = Recorder::create_with_identity(&c.normalized(), &id).unwrap();
            let ring = rec.claim_ring();
            let mut created = Entry::new(RecordKind::CommInfo, CallId::CommCreated);
            created.args[..3].copy_from_slice(&[0xabc, 2, u64::from(pid % 2)]);
            ring.instant(&created);
            let _in_flight = ring.begin(&Entry::new(RecordKind::Call, CallId::NcclAllReduce));
            if heartbeat {
                // Ordering only: the stamp must come after the call's entry on the clock.
                std::thread::sleep(std::time::Duration::from_millis(2));
                rec.note_alive();
            }
            let d = read_dump(rec.path()).unwrap();
            let t_enter = d
                .records
                .iter()
                .find(|r| r.call() == Some(CallId::NcclAllReduce))
                .map(|r| r.t_enter_ns)
                .unwrap();
            (d, t_enter)
        };
        let (alive, alive_enter) = hung_rank(10, true);
        let (silent, _) = hung_rank(11, false);
        let stamp = alive
            .header
            .last_alive_ns
            .expect("the liveness stamp was written");
        assert!(stamp > alive_enter);
        let dumps = vec![alive, silent];
        let job = JobModel::build(&dumps, |d| d.path.display().to_string());
        let trace = build_trace(&dumps, &job);
        validate::validate(&trace).unwrap();
        let events = trace["traceEvents"].as_array().unwrap();
        let hung: Vec<&Value> = events
            .iter()
            .filter(|e| e["args"]["state"] == IN_FLIGHT_STATE)
            .collect();
        assert_eq!(hung.len(), 2, "{hung:?}");
        let of_pid = |pid: u64| *hung.iter().find(|e| e["pid"] == pid).unwrap();
        let (a, s) = (of_pid(1), of_pid(2));
        assert_eq!(a["name"], "ncclAllReduce (unfinished)");
        let dur_ns = (a["dur"].as_f64().unwrap() * 1000.0).round() as u64;
        assert_eq!(dur_ns, stamp - alive_enter, "{a}");
        assert_eq!(a["args"]["drawn_to"], "the process's last liveness stamp");
        assert_eq!(s["dur"], json!(NO_LATER_SIGN_NS as f64 / 1000.0), "{s}");
        assert!(
            s["args"]["drawn_to"]
                .as_str()
                .unwrap()
                .starts_with("no later sign of life"),
            "{s}"
        );
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
