//! The metrics of one scrape, computed from the node's process models with the diagnosis' own
//! notion of a stall: the models are joined into a [`JobModel`] and its [`Story`] is told (as
//! `report` does), then per communicator [`Story::stalled_at`] says whether its live ranks have
//! been quiet for `--stall-after`, and a rank is stalled when the story finds it inside NCCL
//! there or behind the operation the others wait in ([`Story::hung_processes`]'s rule, per
//! communicator). The rules and the verdict are not run: they explain a failure, which a
//! gauge does not need, and they are most of a report's time.
//!
//! Labels: `job` (the run id the launcher gave, empty when none), `host`, `pid`, `rank` (the
//! rank in the process's largest communicator, empty before it joined one) and `comm` (the
//! communicator hash in hex). `code` is an `ncclResult_t` name from the knowledge files or
//! `unknown`: a bounded set. No label names an operation, so the series of a job are bounded by
//! its processes times their communicators.

use super::cache::{FailedCalls, Parsed};
use super::text::{Family, Kind};
use ncclshim_diagnose::model::{JobModel, ProcessKey, ProcessModel};
use ncclshim_diagnose::story::{NodeKind, Story};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::Arc;

/// What a scrape needs besides the models.
#[derive(Debug, Clone, Copy)]
pub struct Instant {
    /// Wall clock of the scrape, ns since the Unix epoch.
    pub now_ns: u64,
    /// How long a communicator's live ranks must be quiet before it is stalled.
    pub stall_after_ns: u64,
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The labels naming process `pm`.
fn process_labels(pm: &ProcessModel) -> Vec<(&'static str, String)> {
    vec![
        ("job", pm.run_id.clone()),
        ("host", pm.host.clone()),
        ("pid", pm.pid.to_string()),
        (
            "rank",
            pm.world_rank().map(|r| r.to_string()).unwrap_or_default(),
        ),
    ]
}

fn with(
    mut labels: Vec<(&'static str, String)>,
    k: &'static str,
    v: String,
) -> Vec<(&'static str, String)> {
    labels.push((k, v));
    labels
}

/// Every metric family, in the order `/metrics` lists them.
struct Families {
    alive: Family,
    last_record: Family,
    failed: Family,
    issued: Family,
    completed: Family,
    last_progress: Family,
    in_flight: Family,
    collectives: Family,
    bytes: Family,
    gpu: Family,
    stalled: Family,
    waiting_for: Family,
}

impl Families {
    fn new() -> Self {
        use Kind::{Counter, Gauge};
        Self {
            alive: Family::new("ncclshim_process_alive", Gauge, "1 while the process that wrote the dump runs, 0 once it ended."),
            last_record: Family::new("ncclshim_process_last_record_age_seconds", Gauge, "Seconds since the process's newest record or sign of life."),
            failed: Family::new("ncclshim_failed_calls_total", Counter, "NCCL calls that returned an error, by ncclResult_t name (in the records the dump still holds)."),
            issued: Family::new("ncclshim_comm_ops_issued_total", Counter, "Operations issued on the communicator (its last seq + 1)."),
            completed: Family::new("ncclshim_comm_ops_completed_total", Counter, "Operations on the communicator whose call returned."),
            last_progress: Family::new("ncclshim_comm_last_progress_age_seconds", Gauge, "Seconds since the last operation was issued on the communicator."),
            in_flight: Family::new("ncclshim_comm_in_flight_age_seconds", Gauge, "Age of the operation in flight on the communicator (a call not returned, or a kernel not ended); 0 when none."),
            collectives: Family::new("ncclshim_comm_collectives_total", Counter, "Operations started on the communicator (profiler plugin aggregates)."),
            bytes: Family::new("ncclshim_comm_bytes_total", Counter, "Bytes of the operations started on the communicator (profiler plugin aggregates)."),
            gpu: Family::new("ncclshim_comm_gpu_seconds_total", Counter, "GPU time of the operations whose kernel ended (profiler plugin aggregates)."),
            stalled: Family::new("ncclshim_comm_stalled", Gauge, "1 when the rank is held by a stall of the communicator (inside NCCL or behind the operation its peers wait in, the communicator quiet for --stall-after), as `ncclshim report` calls a hang."),
            waiting_for: Family::new("ncclshim_comm_stalled_waiting_for_rank", Gauge, "While stalled: the rank of the communicator the stall waits for (the first rank behind; the rank itself when it is the one behind). Absent when this node's dumps do not tell."),
        }
    }

    fn into_vec(self) -> Vec<Family> {
        vec![
            self.alive,
            self.last_record,
            self.failed,
            self.issued,
            self.completed,
            self.last_progress,
            self.in_flight,
            self.collectives,
            self.bytes,
            self.gpu,
            self.stalled,
            self.waiting_for,
        ]
    }
}

/// The node's processes joined, with what the metrics read besides the model.
pub struct Joined {
    pub job: JobModel,
    pub story: Story,
    /// Failed NCCL calls per process (its dumps' counts added).
    pub failed: HashMap<ProcessKey, FailedCalls>,
}

/// The metric families of the `joined` processes at `at`.
pub fn compute(joined: &Joined, at: Instant) -> Vec<Family> {
    let Joined { job, story, failed } = joined;
    let mut f = Families::new();
    // A communicator of two ranks or more, as its members claim, not as this node sees it: the
    // node may hold one rank of a communicator that spans nodes, and that rank can wait too.
    let stalled_comms: Vec<u64> = story
        .comms
        .iter()
        .filter(|c| job.comms.get(&c.comm).is_some_and(|v| v.nranks() >= 2))
        .filter(|c| story.stalled_at(job, c.comm, at.now_ns, at.stall_after_ns))
        .map(|c| c.comm)
        .collect();
    for (i, pm) in job.processes.iter().enumerate() {
        let labels = process_labels(pm);
        f.alive.push(labels.clone(), f64::from(u8::from(pm.alive)));
        f.last_record
            .push(labels.clone(), secs(at.now_ns.saturating_sub(pm.last_t)));
        failed_calls(failed.get(&pm.key()), &labels, &mut f.failed);
        comm_metrics(job, story, i, &labels, &stalled_comms, at, &mut f);
    }
    f.into_vec()
}

/// Process `pm`'s failed NCCL calls, by result name.
fn failed_calls(failed: Option<&FailedCalls>, labels: &[(&'static str, String)], out: &mut Family) {
    for (code, n) in failed.into_iter().flatten() {
        out.push(with(labels.to_vec(), "code", code.to_string()), *n as f64);
    }
}

/// The per-communicator series of process `i`.
fn comm_metrics(
    job: &JobModel,
    story: &Story,
    i: usize,
    labels: &[(&'static str, String)],
    stalled_comms: &[u64],
    at: Instant,
    f: &mut Families,
) {
    let pm = &job.processes[i];
    // One entry per communicator: a process that initialized one twice keeps the later table.
    let mut progress: BTreeMap<u64, &ncclshim_diagnose::model::CommProgress> = BTreeMap::new();
    for c in &pm.progress {
        let e = progress.entry(c.comm_hash).or_insert(c);
        if c.issued >= e.issued {
            *e = c;
        }
    }
    let mut comms: std::collections::BTreeSet<u64> = progress.keys().copied().collect();
    comms.extend(pm.aggregates.iter().map(|a| a.comm_hash));
    comms.extend(
        pm.memberships
            .iter()
            .map(|m| m.comm_hash)
            .filter(|&h| h != 0),
    );
    for comm in comms {
        let l = with(labels.to_vec(), "comm", format!("{comm:#x}"));
        let member = story
            .comm(comm)
            .and_then(|c| c.members.iter().find(|m| m.process == i));
        if let Some(c) = progress.get(&comm) {
            f.issued.push(l.clone(), c.issued as f64);
            f.completed.push(l.clone(), c.completed as f64);
            if let Some(t) = c.last_t {
                f.last_progress
                    .push(l.clone(), secs(at.now_ns.saturating_sub(t)));
            }
        }
        // The story's position says what the rank is inside; the table's counts say a call
        // has not returned when the records that would tell were lost.
        let since = member
            .and_then(|m| m.position.inside.as_ref())
            .map(|x| x.since)
            .or_else(|| {
                progress
                    .get(&comm)
                    .filter(|c| pm.alive && c.issued > c.completed)
                    .and_then(|c| c.last_t)
            });
        let age = since.map_or(0.0, |t| secs(at.now_ns.saturating_sub(t)));
        f.in_flight.push(l.clone(), age);
        let mut agg: Option<ncclshim_format::aggregates::AggTotals> = None;
        for a in pm.aggregates.iter().filter(|a| a.comm_hash == comm) {
            agg.get_or_insert_with(Default::default).merge(&a.totals);
        }
        if let Some(t) = agg {
            f.collectives.push(l.clone(), t.count as f64);
            f.bytes.push(l.clone(), t.bytes as f64);
            f.gpu.push(l.clone(), secs(t.gpu_ns_sum));
        }
        let (stalled, waiting_for) = stall_of(story, comm, i, stalled_comms, pm.alive);
        f.stalled.push(l.clone(), f64::from(u8::from(stalled)));
        if let Some(r) = waiting_for {
            f.waiting_for.push(l, f64::from(r));
        }
    }
}

/// Whether process `i` is held by a stall of `comm`, and the rank that stall waits for.
fn stall_of(
    story: &Story,
    comm: u64,
    i: usize,
    stalled_comms: &[u64],
    alive: bool,
) -> (bool, Option<u32>) {
    if !alive || !stalled_comms.contains(&comm) {
        return (false, None);
    }
    let Some(c) = story.comm(comm) else {
        return (false, None);
    };
    let inside = c
        .members
        .iter()
        .any(|m| m.process == i && m.position.inside.is_some());
    let behind = story
        .nodes
        .iter()
        .any(|n| n.process == i && n.kind == NodeKind::Behind(comm));
    if !(inside || behind) {
        return (false, None);
    }
    let waiting_for = c.stall.as_ref().and_then(|s| s.behind.first()).map(|b| b.0);
    (true, waiting_for)
}

/// The job model and story of the dumps read, and their failed calls per process: every
/// scrape where a dump changed joins them again (the models are shared with the cache; only
/// their join is new).
pub fn join(parsed: &[Arc<Parsed>]) -> Joined {
    let mut failed: HashMap<ProcessKey, FailedCalls> = HashMap::new();
    for p in parsed.iter().filter(|p| !p.failed.is_empty()) {
        let mine = failed.entry(p.model.key()).or_default();
        for (code, n) in &p.failed {
            *mine.entry(code).or_default() += n;
        }
    }
    let job = JobModel::from_processes(parsed.iter().map(|p| p.model.clone()).collect());
    let story = Story::build(&job);
    Joined { job, story, failed }
}
