//! The report: the JSON document (`--json`, versioned) and the terminal rendering of it. Both are
//! built from one [`Report`] so the text never says something the JSON does not.

use crate::finding::evidence;
use crate::finding::words::rank_list;
use crate::finding::{Evidence, EvidenceKind, Finding, Severity};
use crate::load::Problem;
use crate::model::{FailureWhat, JobModel, LostOn};
use crate::story::ending::Ending;
use crate::story::Story;
use crate::terminal::Styles;
use serde::Serialize;
use std::collections::BTreeSet;

/// Bumped when a field is removed or changes meaning; additions keep it. The contract is
/// `docs/schema/report.schema.json` (described in `docs/report-json.md`). 2: evidence items and
/// processes are objects (were lines and `host pid N` strings).
pub const FORMAT_VERSION: u32 = 2;

pub use crate::finding::words::{count, human_bytes};

fn ranks_named(ranks: &[u32]) -> String {
    format!(
        "{} {}",
        if ranks.len() == 1 { "rank" } else { "ranks" },
        rank_list(ranks)
    )
}

#[derive(Debug, Clone, Serialize)]
pub struct CommSummary {
    pub comm_hash: String,
    pub nranks: u32,
    pub ranks_present: Vec<u32>,
    pub ranks_missing: Vec<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nranks_disagreement: Vec<u32>,
    /// What the profiler's running aggregates say about the traffic (absent without them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traffic: Option<CommTraffic>,
    /// PyTorch's name for it (`0:default_pg`), from the Flight Recorder dumps joined with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_group: Option<String>,
}

/// A communicator's operations, bytes and bandwidth over the ranks whose profiler kept running
/// totals: a summary whose size does not grow with the ranks (min / median / max, each extreme
/// with the rank that holds it).
#[derive(Debug, Clone, Serialize)]
pub struct CommTraffic {
    /// Ranks with totals.
    pub ranks_reporting: usize,
    /// Operations started per rank.
    pub ops_min: u64,
    pub ops_max: u64,
    /// A rank with the fewest operations (when they differ).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_min_rank: Option<u32>,
    /// Bytes per rank (the largest).
    pub bytes_max: u64,
    /// Operations whose kernel ended, summed over the ranks, and their GPU time.
    pub ops_timed: u64,
    pub gpu_ns: u64,
    /// Bus bandwidth per rank in GB/s (nccl-tests' busbw over GPU time), when kernels were timed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busbw_gbps: Option<Spread>,
}

/// The spread of a per-rank value.
#[derive(Debug, Clone, Serialize)]
pub struct Spread {
    pub min: f64,
    pub min_rank: u32,
    pub median: f64,
    pub max: f64,
    pub max_rank: u32,
}

fn traffic(job: &JobModel, comm: u64) -> Option<CommTraffic> {
    let aggs = job.comm_aggregates(comm);
    if aggs.is_empty() {
        return None;
    }
    let ops_min = aggs.iter().map(|a| a.2.totals.count).min()?;
    let ops_max = aggs.iter().map(|a| a.2.totals.count).max()?;
    let mut bw: Vec<(f64, u32)> = aggs
        .iter()
        .filter_map(|(r, _, a)| Some((a.busbw_gbps()?, *r)))
        .collect();
    bw.sort_by(|a, b| a.0.total_cmp(&b.0));
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    let busbw_gbps = match (bw.first(), bw.last()) {
        (Some(lo), Some(hi)) => Some(Spread {
            min: round(lo.0),
            min_rank: lo.1,
            median: round(bw[bw.len() / 2].0),
            max: round(hi.0),
            max_rank: hi.1,
        }),
        _ => None,
    };
    Some(CommTraffic {
        ranks_reporting: aggs.len(),
        ops_min,
        ops_max,
        ops_min_rank: (ops_min < ops_max)
            .then(|| {
                aggs.iter()
                    .find(|a| a.2.totals.count == ops_min)
                    .map(|a| a.0)
            })
            .flatten(),
        bytes_max: aggs.iter().map(|a| a.2.totals.bytes).max().unwrap_or(0),
        ops_timed: aggs.iter().map(|a| a.2.totals.timed_count).sum(),
        gpu_ns: aggs.iter().map(|a| a.2.totals.gpu_ns_sum).sum(),
        busbw_gbps,
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct JobSummary {
    /// World size: the largest communicator's nranks (0 when no communicator was seen).
    pub ranks: u32,
    pub processes: usize,
    pub hosts: Vec<String>,
    pub dumps: usize,
    pub synthetic: bool,
    pub communicators: Vec<CommSummary>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FailureLine {
    pub rank: Option<u32>,
    pub host: String,
    pub pid: u32,
    pub what: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rc: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rc_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_text: Option<String>,
    /// Wall-clock time of the failure (nanoseconds since the Unix epoch).
    pub t_unix_ns: u64,
    /// Milliseconds after the job's first failure.
    pub after_first_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub format_version: u32,
    pub tool_version: String,
    pub job: JobSummary,
    /// The earliest failure across all ranks and hosts, if anything failed.
    pub first_failure: Option<FailureLine>,
    /// Each process's first failure, earliest first.
    pub failure_order: Vec<FailureLine>,
    /// Set when the first two failures are on different machines and closer in time than
    /// clock synchronisation between machines can be trusted to separate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ordering_note: Option<String>,
    pub findings: Vec<Finding>,
    pub problems: Vec<Problem>,
    /// What the dumps could not tell: records lost to ring wrap, communicators the table could not
    /// hold, processes that ended without any mark, damaged files. Empty when the evidence is
    /// complete. Items of kind `gap`, `values.gap` naming which.
    pub evidence_gaps: Vec<Evidence>,
    /// The runs found in the directory when it holds more than one (or `--run` chose one);
    /// `reported` marks the one this report is about.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<crate::runs::RunSummary>,
    /// "this directory holds N runs: ...; reporting on run X; use --run ID to choose".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_note: Option<String>,
    /// Which PyTorch backend ran (`nccl2`, the legacy `nccl`...), when the Flight Recorder's
    /// profiling names or `TORCH_DIST_USE_NCCL2` tell ([`crate::backend`]); absent otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pytorch_backend: Vec<crate::backend::PytorchBackend>,
    /// What the PyTorch Flight Recorder dumps beside the shim's said (absent when there were none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flight_recorder: Option<crate::flight_recorder::Summary>,
    /// The job's story in words (`report --story`; `story::render`): text only, not part of
    /// the JSON contract.
    #[serde(skip)]
    pub story: Vec<String>,
    /// The text report lists every finding (`report --all`), not only the primary and the few
    /// that add to it ([`Report::shown_findings`]).
    #[serde(skip)]
    pub show_all: bool,
}

/// How many findings besides the primaries the text report shows (the rest behind `--all`).
pub const SHOWN_BESIDE_PRIMARY: usize = 3;

/// The gaps in the evidence, one item per process and kind (records lost on threads are summed
/// per process; the thread with the most losses is named); the same gap on many processes
/// (every rank of a job killed at once) is one item with their ranks.
fn evidence_gaps(
    job: &JobModel,
    story: &Story,
    findings: &[Finding],
    stand_ins: Option<&BTreeSet<usize>>,
) -> Vec<Evidence> {
    let mut out = Vec::new();
    let gap = |what: &str, fact: String| Evidence::new(EvidenceKind::Gap, fact).value("gap", what);
    let vanished: Vec<usize> = (0..job.processes.len())
        .filter(|&i| matches!(story.ends[i], Ending::Vanished { .. }))
        .collect();
    // Ranks known from their Flight Recorder dump only have no end mark because the Flight
    // Recorder records none, not because they were killed: when every process without a mark
    // is one, say that instead of "SIGKILL, the OOM killer".
    let mut flight_recorder_only = stand_ins
        .filter(|s| !vanished.is_empty() && vanished.iter().all(|p| s.contains(p)))
        .map(|_| {
            let mut ranks: Vec<u32> = vanished
                .iter()
                .filter_map(|&p| job.processes[p].world_rank())
                .collect();
            ranks.sort_unstable();
            ranks.dedup();
            let shown: Vec<String> = ranks.iter().map(u32::to_string).collect();
            Evidence::new(
                EvidenceKind::Gap,
                format!(
                    "ranks {}: known from their PyTorch Flight Recorder dumps only: alive when the watchdog wrote them, how they ended is not recorded",
                    shown.join(", ")
                ),
            )
            .value("gap", "flight_recorder_only")
            .value("ranks", &ranks)
        });
    let stand_ins_only = flight_recorder_only.is_some();
    // Gathered first and joined in one pass: most of these facts hold for every rank of a
    // large job alike (see `evidence::add_all`).
    let mut per_process = Vec::new();
    for (i, p) in job.processes.iter().enumerate() {
        if p.lost > 0 {
            let worst = p.lost_by_thread.iter().max_by_key(|(_, _, n)| *n);
            let worst_text = worst
                .map(|(on, name, n)| match on {
                    LostOn::Thread(tid) if name.is_empty() => {
                        format!(", most on thread {tid}: {n}")
                    }
                    LostOn::Thread(tid) => format!(", most on thread {tid} ({name}): {n}"),
                    LostOn::OverflowRing => format!(
                        ", most on the shared overflow ring (threads beyond the dump's own \
                         rings): {n}"
                    ),
                    LostOn::KeepRing => format!(
                        ", most on the keep ring (failures and communicator events, kept apart \
                         from routine calls): {n}"
                    ),
                })
                .unwrap_or_default();
            // Rings the dump could not grow to hold send their threads to the small shared
            // overflow ring: the loss is then the full disk's, and more slots would not help.
            let text = if p.ring_alloc_failed > 0 {
                format!(
                    "{} older records lost{worst_text}: the dump file could not grow (the disk or quota was full, or a file size limit was reached), so {} wrote to the small shared overflow ring, which wrapped; communicator identity, progress and failures are kept apart, but older calls are not (free space where NCCLSHIM_DIR points, or point it at a filesystem with room; raising NCCLSHIM_RING_SLOTS would not help)",
                    p.lost,
                    count(p.ring_alloc_failed as usize, "thread", "threads")
                )
            } else {
                format!(
                    "{} older records lost to ring wrap{worst_text}; communicator identity, progress and failures are kept apart, but older calls are not (raise NCCLSHIM_RING_SLOTS to keep more)",
                    p.lost
                )
            };
            let mut item = gap("records_lost", text)
                .value("dump_could_not_grow", p.ring_alloc_failed > 0)
                .value("records_lost", p.lost)
                .value(
                    "most_on_thread",
                    worst.and_then(|(on, _, _)| match on {
                        LostOn::Thread(tid) => Some(*tid),
                        _ => None,
                    }),
                );
            match worst.map(|(on, _, _)| on) {
                Some(LostOn::OverflowRing) => item = item.value("most_on_ring", "overflow"),
                Some(LostOn::KeepRing) => item = item.value("most_on_ring", "keep"),
                _ => {}
            }
            per_process.push(item.of(job, i));
        }
        if p.alloc_failed && p.lost == 0 {
            per_process.push(
                gap(
                    "dump_could_not_grow",
                    format!(
                        "the dump file could not grow (the disk or quota was full, or a file size limit was reached){}; some records or error texts may be missing (free space where NCCLSHIM_DIR points, or point it at a filesystem with room)",
                        if p.ring_alloc_failed > 0 {
                            format!(
                                ": {} wrote to the shared overflow ring",
                                count(p.ring_alloc_failed as usize, "thread", "threads")
                            )
                        } else {
                            String::new()
                        }
                    ),
                )
                .value("threads_without_ring", p.ring_alloc_failed)
                .of(job, i),
            );
        }
        for (file, warnings) in &p.damaged {
            let more = match warnings.len() {
                0 | 1 => String::new(),
                n => format!(
                    " (and {})",
                    count(n - 1, "more reader warning", "more reader warnings")
                ),
            };
            per_process.push(
                gap(
                    "damaged_file",
                    format!(
                        "{file} is damaged: {}{more}; what it held past that point is not in this report (`ncclshim dump {file}` lists every warning)",
                        warnings.first().map(String::as_str).unwrap_or("unreadable parts")
                    ),
                )
                .value("file", file)
                .value("reader_warnings", warnings)
                .of(job, i),
            );
        }
        if p.comms_not_kept > 0 {
            per_process.push(
                gap(
                    "communicators_not_kept",
                    format!(
                        "{} beyond the communicator table's capacity known only from ring records",
                        count(p.comms_not_kept as usize, "communicator", "communicators")
                    ),
                )
                .value("communicators", p.comms_not_kept)
                .of(job, i),
            );
        }
        if matches!(story.ends[i], Ending::Vanished { .. }) {
            if stand_ins_only {
                // Said once, where the first unmarked process's gap would stand.
                per_process.extend(flight_recorder_only.take());
            } else {
                per_process.push(
                    gap(
                        "no_end_mark",
                        "ended without a clean exit and without a recorded signal (SIGKILL, the OOM killer, or a node loss); its end is known only as after its last sign of life".to_owned(),
                    )
                    .of(job, i),
                );
            }
        }
    }
    // NCCL the shim could not see (linked statically or renamed): the rest of the report on
    // those processes stands on the profiler plugin's and the driver's records alone.
    for v in crate::visibility::invisible(job) {
        per_process.push(
            gap("nccl_calls_invisible", v.text.clone())
                .value("plugin_saw_nccl", v.plugin_saw_nccl)
                .value("nccl_object", &v.object)
                .value("remedy", crate::visibility::remedy())
                .of(job, v.process),
        );
    }
    evidence::add_all(&mut out, per_process);
    if let Some(g) = launcher_ranks_without_dump(job) {
        evidence::add(&mut out, g);
    }
    // A job stopped from outside (SIGTERM/SIGINT from a launcher or a user) while no rank was
    // inside NCCL, nothing failed and no finding speaks of the rank: it did not finish, yet
    // nothing NCCL-side shows why. Say so,
    // so a silent report is never read as "all was well".
    if job.failures.is_empty() {
        let stopped: Vec<usize> = job
            .processes
            .iter()
            .enumerate()
            .filter(|(i, p)| {
                matches!(story.ends[*i], Ending::Stopped { .. })
                    && p.in_flight_calls().next().is_none()
                    && !findings.iter().any(|f| f.process_ids.contains(i))
            })
            .map(|(i, _)| i)
            .collect();
        if !stopped.is_empty() {
            evidence::add(
                &mut out,
                gap(
                    "stopped_outside_nccl",
                    "stopped by a termination signal while outside NCCL (its last calls had returned): the job did not finish, and nothing recorded in NCCL shows why (a GPU-side hang is visible only with the profiler plugin; a hang outside NCCL needs a stack of the process)".to_owned(),
                )
                .of_all(job, &stopped),
            );
        }
    }
    out
}

/// Ranks the launcher's world size (WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE... whichever
/// `knowledge/launchers.toml` knows) promises but no dump shows, neither by its launcher rank nor
/// as a communicator member, and no communicator already lists as missing: a rank that never
/// reached NCCL (or whose dump was not collected) is otherwise invisible to the report.
fn launcher_ranks_without_dump(job: &JobModel) -> Option<Evidence> {
    use crate::knowledge::launchers::{lookup, Role};
    let mut world: Option<(u64, String)> = None;
    let mut seen: BTreeSet<u64> = BTreeSet::new();
    for p in &job.processes {
        if let Some(r) = p.world_rank() {
            seen.insert(u64::from(r));
        }
        let Some(env) = p.env.as_ref() else {
            continue;
        };
        if let Some(r) = lookup(env, Role::GlobalRank).and_then(|v| v.number()) {
            seen.insert(r);
        }
        if let Some(v) = lookup(env, Role::WorldSize) {
            if let Some(n) = v.number() {
                if world.as_ref().is_none_or(|(m, _)| n > *m) {
                    world = Some((n, v.shown()));
                }
            }
        }
    }
    let (n, shown) = world?;
    let listed: BTreeSet<u64> = job
        .comms
        .values()
        .flat_map(|c| c.missing())
        .map(u64::from)
        .collect();
    // A bound on what is listed, so a garbled variable cannot make the report enumerate billions.
    let absent: Vec<u32> = (0..n.min(1 << 20))
        .filter(|r| !seen.contains(r) && !listed.contains(r))
        .filter_map(|r| u32::try_from(r).ok())
        .collect();
    if absent.is_empty() {
        return None;
    }
    Some(
        Evidence::new(
            EvidenceKind::Gap,
            format!(
                "the launcher's {shown} names ranks 0-{}; no dump shows {} {} (never started, failed before reaching NCCL, or its dump was not collected)",
                n - 1,
                if absent.len() == 1 { "rank" } else { "ranks" },
                rank_list(&absent)
            ),
        )
        .value("gap", "launcher_ranks_without_dump")
        .value("world_size", n)
        .value("ranks_missing", &absent),
    )
}

/// How far apart two failures on different machines must be to trust their order (typical NTP
/// accuracy within a data centre; PTP does better).
pub const CROSS_HOST_MARGIN_NS: u64 = 1_000_000;

/// What the report says besides the job's model, story and findings, all made before it is
/// built: nothing edits a report after [`Report::build`].
#[derive(Debug, Default)]
pub struct Context {
    /// The files that could not be read.
    pub problems: Vec<Problem>,
    /// What the PyTorch Flight Recorder dumps add ([`crate::flight_recorder::quote`]).
    pub flight_recorder: Option<crate::flight_recorder::Quotes>,
    pub pytorch_backend: Vec<crate::backend::PytorchBackend>,
    /// The story in words (`report --story`).
    pub story: Vec<String>,
    /// The directory's runs, when the report lists them, and the note that says which one.
    pub runs: Vec<crate::runs::RunSummary>,
    pub run_note: Option<String>,
}

impl Report {
    pub fn build(
        job: &JobModel,
        story: &Story,
        mut findings: Vec<Finding>,
        context: Context,
    ) -> Self {
        let Context {
            mut problems,
            flight_recorder,
            pytorch_backend,
            story: story_lines,
            runs,
            run_note,
        } = context;
        problems.extend(job.identity_clashes.iter().map(|c| Problem {
            file: c.file.clone(),
            error: format!(
                "names the same process as {} (host {}, pid {}, same start time) and was read as \
                 another process: two processes of different PID namespaces (containers sharing \
                 a host name), or a copy of that dump",
                c.first, c.host, c.pid
            ),
        }));
        let firsts = job.first_failure_per_process();
        for f in &mut findings {
            let cover = crate::finding::FailureCover::of(f);
            let explained: Vec<usize> = firsts
                .iter()
                .enumerate()
                .filter(|(_, e)| cover.explains(e))
                .map(|(i, _)| i)
                .collect();
            f.explains_failures = explained;
        }
        let t0 = firsts.first().map(|f| f.t).unwrap_or(0);
        let failure_order: Vec<FailureLine> = firsts
            .iter()
            .map(|f| {
                let p = &job.processes[f.process];
                let call = job.failure_call(f);
                let is_async = matches!(f.what, FailureWhat::AsyncError(_));
                FailureLine {
                    rank: p.world_rank(),
                    host: p.host.clone(),
                    pid: p.pid,
                    what: job.describe(f),
                    call: call.map(|c| c.name.to_string()),
                    rc: call.map(|c| match c.async_result() {
                        Some(r) if is_async => r.as_i32(),
                        _ => c.rc,
                    }),
                    rc_name: call.map(|c| match c.async_result() {
                        Some(r) if is_async => crate::names::rc_name(r.as_i32(), false),
                        _ => c.rc_name(),
                    }),
                    error_text: call.and_then(|c| c.error_text.clone()),
                    t_unix_ns: f.t,
                    after_first_ms: (f.t.saturating_sub(t0)) as f64 / 1e6,
                }
            })
            .collect();
        let communicators = job
            .comms
            .values()
            .map(|c| CommSummary {
                comm_hash: format!("{:#018x}", c.comm_hash),
                nranks: c.nranks(),
                ranks_present: c.members.keys().copied().collect(),
                ranks_missing: c.missing(),
                nranks_disagreement: if c.nranks_claims.len() > 1 {
                    c.nranks_claims.keys().copied().collect()
                } else {
                    Vec::new()
                },
                traffic: traffic(job, c.comm_hash),
                process_group: flight_recorder
                    .as_ref()
                    .and_then(|q| q.groups_of_comm.get(&c.comm_hash).cloned()),
            })
            .collect();
        let dumps = job.processes.iter().map(|p| p.files.len()).sum();
        let evidence_gaps = evidence_gaps(
            job,
            story,
            &findings,
            flight_recorder.as_ref().map(|q| &q.stand_ins),
        );
        let flight_recorder = flight_recorder.map(|q| {
            // The Flight Recorder's lines are quotes, not new facts about the first problem's
            // processes: appended after its own evidence.
            if let Some(f) = findings
                .iter_mut()
                .find(|f| f.severity != Severity::Advisory)
            {
                f.evidence.extend(q.quoted);
            }
            problems.extend(q.problems);
            problems.sort_by(|a, b| a.file.cmp(&b.file));
            q.summary
        });
        let ordering_note = match firsts.as_slice() {
            [a, b, ..] => {
                let (pa, pb) = (&job.processes[a.process], &job.processes[b.process]);
                (pa.machine() != pb.machine() && b.t.saturating_sub(a.t) < CROSS_HOST_MARGIN_NS).then(|| {
                    format!(
                        "the first two failures ({} and {}) are on different machines less than 1 ms apart: their order is only as good as the clock sync between {} and {}",
                        pa.label(),
                        pb.label(),
                        pa.host,
                        pb.host
                    )
                })
            }
            _ => None,
        };
        Self {
            format_version: FORMAT_VERSION,
            tool_version: env!("CARGO_PKG_VERSION").to_owned(),
            job: JobSummary {
                ranks: job.comms.values().map(|c| c.nranks()).max().unwrap_or(0),
                processes: job.processes.len(),
                hosts: job.hosts().into_iter().map(str::to_owned).collect(),
                dumps,
                synthetic: job.synthetic(),
                communicators,
            },
            first_failure: failure_order.first().cloned(),
            failure_order,
            ordering_note,
            findings,
            problems,
            evidence_gaps,
            runs,
            run_note,
            pytorch_backend,
            flight_recorder,
            story: story_lines,
            show_all: false,
        }
    }

    /// The findings the text report shows, in order, and how many it leaves out: every primary,
    /// then up to [`SHOWN_BESIDE_PRIMARY`] that add something (causes and conditions before
    /// advisories, consequences last); all of them with `show_all`.
    pub fn shown_findings(&self) -> (Vec<&Finding>, usize) {
        if self.show_all {
            return (self.findings.iter().collect(), 0);
        }
        let mut shown: Vec<&Finding> = self
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Primary)
            .collect();
        let mut rest: Vec<&Finding> = self
            .findings
            .iter()
            .filter(|f| f.severity != Severity::Primary)
            .collect();
        // Stable: the verdict's order within each group.
        rest.sort_by_key(|f| (f.consequence, f.severity == Severity::Advisory));
        let room = if shown.is_empty() {
            SHOWN_BESIDE_PRIMARY + 1
        } else {
            SHOWN_BESIDE_PRIMARY
        };
        let hidden = rest.len().saturating_sub(room);
        shown.extend(rest.into_iter().take(room));
        (shown, hidden)
    }

    /// 0 nothing wrong found, 1 a failure (or a condition that causes one) was found.
    /// 1 when the report found a problem; advisories alone (a late rank in a job that ran)
    /// leave it 0, like a healthy job.
    pub fn exit_code(&self) -> i32 {
        i32::from(self.problem_findings().next().is_some())
    }

    /// The findings about a problem: every one but the advisories.
    pub fn problem_findings(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.severity != Severity::Advisory)
    }

    /// The terminal rendering.
    pub fn to_text(&self, color: bool) -> String {
        let mut o = String::new();
        let paint = |s: &str, f: fn(&str) -> String| if color { f(s) } else { s.to_owned() };
        let bold = |s: &str| paint(s, |x| x.bold().to_string());
        let red = |s: &str| paint(s, |x| x.red().bold().to_string());
        let yellow = |s: &str| paint(s, |x| x.yellow().bold().to_string());
        let dim = |s: &str| paint(s, |x| x.dimmed().to_string());
        // Every value below may quote the dumps (error texts, environment, run ids, files):
        // each goes through `safe`, so no recorded control character reaches the terminal.
        let safe = crate::terminal::escape_controls;
        let j = &self.job;
        // A job whose processes never joined a communicator has no ranks to count.
        let ranks = if j.ranks == 0 {
            String::new()
        } else {
            format!("{}, ", count(j.ranks as usize, "rank", "ranks"))
        };
        // Processes known only from Flight Recorder dumps name no host.
        let hosts = if j.hosts.is_empty() {
            "(hosts not recorded)".to_owned()
        } else {
            format!("on {}", count(j.hosts.len(), "host", "hosts"))
        };
        o.push_str(&bold(&format!(
            "ncclshim report: {ranks}{} {hosts}, {}{}",
            count(j.processes, "process", "processes"),
            count(j.dumps, "dump", "dumps"),
            if j.synthetic {
                " [SYNTHETIC dumps, not a real capture]"
            } else {
                ""
            }
        )));
        o.push('\n');
        if let Some(n) = &self.run_note {
            o.push_str(&yellow(&format!("note: {}", safe(n))));
            o.push('\n');
        }
        for b in &self.pytorch_backend {
            o.push_str(&format!("PyTorch backend: {}\n", safe(&b.text)));
        }
        match &self.first_failure {
            Some(f) => {
                let who = match f.rank {
                    Some(r) => format!("rank {r} ({} pid {})", safe(&f.host), f.pid),
                    None => format!("{} pid {}", safe(&f.host), f.pid),
                };
                o.push_str(&format!(
                    "{} {who}: {}\n",
                    red("first failure:"),
                    safe(&f.what)
                ));
                if let Some(n) = &self.ordering_note {
                    o.push_str(&format!("  {}\n", yellow(&format!("note: {}", safe(n)))));
                }
                if self.failure_order.len() > 1 {
                    o.push_str(&dim("then:"));
                    o.push('\n');
                    // The same failure on many ranks is one line: (first offset, what, ranks, others).
                    let mut groups: Vec<(f64, &str, Vec<u32>, Vec<String>)> = Vec::new();
                    for l in self.failure_order.iter().skip(1) {
                        let g = match groups.iter_mut().find(|g| g.1 == l.what) {
                            Some(g) => g,
                            None => {
                                groups.push((l.after_first_ms, &l.what, Vec::new(), Vec::new()));
                                groups.last_mut().expect("just pushed")
                            }
                        };
                        match l.rank {
                            Some(r) => g.2.push(r),
                            None => g.3.push(format!("{} pid {}", safe(&l.host), l.pid)),
                        }
                    }
                    for (ms, what, ranks, others) in groups.iter().take(8) {
                        let mut who = Vec::new();
                        if !ranks.is_empty() {
                            let noun = if ranks.len() == 1 { "rank" } else { "ranks" };
                            who.push(format!("{noun} {}", rank_list(ranks)));
                        }
                        who.extend(others.iter().cloned());
                        o.push_str(&format!(
                            "  +{ms:.1} ms {}: {}\n",
                            who.join(", "),
                            safe(what)
                        ));
                    }
                    if groups.len() > 8 {
                        o.push_str(&format!(
                            "  ... {} more kinds of failure\n",
                            groups.len() - 8
                        ));
                    }
                }
            }
            None => o.push_str("no call returned an error\n"),
        }
        o.push('\n');
        if !self.evidence_gaps.is_empty() {
            o.push_str(&bold("Evidence gaps"));
            o.push('\n');
            for g in self.evidence_gaps.iter().take(8) {
                o.push_str(&format!("  {}\n", safe(&g.text)));
            }
            if self.evidence_gaps.len() > 8 {
                o.push_str(&format!("  ... {} more\n", self.evidence_gaps.len() - 8));
            }
            o.push('\n');
        }
        if let Some(fr) = &self.flight_recorder {
            o.push_str(&crate::flight_recorder::render_text(fr, &bold));
        }
        if self.problem_findings().next().is_none() {
            let verdict =
                match (self.evidence_gaps.is_empty(), self.problems.is_empty()) {
                    (true, true) => "No problem found.".to_owned(),
                    (false, true) => {
                        "No problem found in what was recorded (the evidence has gaps: see above)."
                            .to_owned()
                    }
                    (gaps, false) => format!(
                    "No problem found in the {} that could be read ({} could not: see below{}).",
                    count(j.dumps, "dump", "dumps"),
                    count(self.problems.len(), "file", "files"),
                    if gaps { "; the evidence has gaps: see above" } else { "" }
                ),
                };
            o.push_str(&bold(&verdict));
            o.push('\n');
        }
        let (shown, hidden) = self.shown_findings();
        for f in shown {
            let sev = match f.severity {
                Severity::Primary => red("PRIMARY"),
                Severity::Contributing => yellow("CONTRIBUTING"),
                Severity::Advisory => bold("ADVISORY"),
            };
            let cat = f.catalog().map(|c| format!("[{c}] ")).unwrap_or_default();
            let conf = format!("{:?}", f.confidence).to_lowercase();
            o.push_str(&format!(
                "{sev} {cat}{} {}\n",
                bold(&safe(&f.title)),
                dim(&format!("(confidence {conf})"))
            ));
            if !f.ranks.is_empty() {
                o.push_str(&format!("  {}\n", ranks_named(&f.ranks)));
            }
            o.push_str("  evidence:\n");
            for e in &f.evidence {
                o.push_str(&format!("    - {}\n", safe(&e.text)));
            }
            o.push_str(&format!("  {} {}\n", bold("remedy:"), safe(&f.remedy)));
            if let Some(v) = &f.fixed_in {
                o.push_str(&format!("  fixed in NCCL {}\n", safe(v)));
            }
            o.push('\n');
        }
        if hidden > 0 {
            o.push_str(&dim(&format!(
                "{} more (consequences, conditions, echoes): `ncclshim report --all` lists them; --json has every finding\n",
                count(hidden, "finding", "findings")
            )));
            o.push('\n');
        }
        if !j.communicators.is_empty() {
            o.push_str(&bold("communicators:"));
            o.push('\n');
            for c in &j.communicators {
                let mut line = format!(
                    "  {}{}: {}",
                    c.comm_hash,
                    c.process_group
                        .as_ref()
                        .map(|g| format!(" ({})", safe(g)))
                        .unwrap_or_default(),
                    count(c.nranks as usize, "rank", "ranks")
                );
                if c.ranks_missing.is_empty() {
                    line.push_str(if c.nranks == 1 {
                        ", present"
                    } else {
                        ", all present"
                    });
                } else {
                    line.push_str(&format!(
                        "; present: {}; missing: {}",
                        if c.ranks_present.is_empty() {
                            "none".to_owned()
                        } else {
                            ranks_named(&c.ranks_present)
                        },
                        ranks_named(&c.ranks_missing)
                    ));
                }
                if let Some(t) = &c.traffic {
                    line.push_str(&format!(
                        "; {} operations{}, {} per rank",
                        if t.ops_min == t.ops_max {
                            t.ops_max.to_string()
                        } else {
                            format!("{}-{}", t.ops_min, t.ops_max)
                        },
                        if t.ops_min < t.ops_max {
                            " (ranks differ)"
                        } else {
                            ""
                        },
                        human_bytes(t.bytes_max)
                    ));
                    // A bandwidth of 0 means no kernel time was measured: say nothing.
                    if let Some(b) = t.busbw_gbps.as_ref().filter(|b| b.max > 0.0) {
                        // Small test jobs move a few KiB per operation, and a hang stretches an
                        // operation to seconds: in GB/s those read 0.00. One unit for the line,
                        // the largest in which its fastest rank is at least 1.
                        let (scale, unit) = [(1.0, "GB/s"), (1e3, "MB/s"), (1e6, "KB/s")]
                            .into_iter()
                            .find(|(scale, _)| b.max * scale >= 1.0)
                            .unwrap_or((1e9, "B/s"));
                        line.push_str(&format!(
                            ", busbw {:.2} {unit} median ({:.2} on rank {}, {:.2} on rank {})",
                            b.median * scale,
                            b.min * scale,
                            b.min_rank,
                            b.max * scale,
                            b.max_rank
                        ));
                    }
                }
                o.push_str(&line);
                o.push('\n');
            }
        }
        if !self.problems.is_empty() {
            o.push_str(&yellow(&format!(
                "{} could not be read:",
                count(self.problems.len(), "file", "files")
            )));
            o.push('\n');
            for p in &self.problems {
                o.push_str(&format!("  {}: {}\n", safe(&p.file), safe(&p.error)));
            }
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use crate::rules::testutil::analyze;
    use ncclshim_dump::CallId;
    use ncclshim_fixtures::synth::WORLD_UID;

    /// Two ranks finish their collectives, then hang outside NCCL until the launcher SIGTERMs
    /// both: nothing failed and no rule speaks, yet the job did not finish; the report says so.
    #[test]
    fn a_job_stopped_outside_nccl_is_an_evidence_gap() {
        let (job, findings) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22703);
            let comms = s.init_world(22703);
            for (r, c) in s.ranks.iter().zip(&comms) {
                r.coll(CallId::NcclAllReduce, *c, 0, 1024, 7, 0, 0, 0, None);
            }
            s.step();
            for r in &s.ranks {
                r.fatal_signal(15);
            }
        });
        assert!(findings.is_empty(), "{findings:?}");
        let r = super::Report::build(
            &job,
            &crate::story::Story::build(&job),
            findings,
            super::Context::default(),
        );
        let gap = r
            .evidence_gaps
            .iter()
            .find(|g| {
                g.text
                    .contains("stopped by a termination signal while outside NCCL")
            })
            .unwrap_or_else(|| panic!("{:?}", r.evidence_gaps));
        assert_eq!(gap.ranks, vec![0, 1]);
    }

    /// The launcher says three ranks, two left dumps and none joined a communicator: the third
    /// is named as an evidence gap (and no gap when the launcher's count is met).
    #[test]
    fn a_rank_the_launcher_promised_without_a_dump_is_an_evidence_gap() {
        let gaps = |world: &'static str| {
            let (job, findings) = analyze(&["n0", "n1"], |s| {
                for (i, r) in s.ranks.iter_mut().enumerate() {
                    let rank = i.to_string();
                    r.env(&[("RANK", rank.as_str()), ("WORLD_SIZE", world)]);
                    r.get_version(22703);
                }
            });
            super::Report::build(
                &job,
                &crate::story::Story::build(&job),
                findings,
                super::Context::default(),
            )
            .evidence_gaps
        };
        let missing = gaps("3");
        let g = missing
            .iter()
            .find(|g| g.text.contains("WORLD_SIZE=3"))
            .unwrap_or_else(|| panic!("{missing:?}"));
        assert!(g.text.contains("no dump shows rank 2 "), "{}", g.text);
        assert!(!gaps("2").iter().any(|g| g.text.contains("WORLD_SIZE")));
    }

    fn report(step: bool) -> super::Report {
        let (job, findings) = analyze(&["host-a", "host-b"], |s| {
            s.snapshot_all(22703);
            s.ranks[0].init_rank(2, 0, WORLD_UID, 0, 3, Some("boom"), 22703);
            if step {
                s.step();
            }
            s.ranks[1].init_rank(2, 1, WORLD_UID, 0, 3, Some("boom"), 22703);
        });
        super::Report::build(
            &job,
            &crate::story::Story::build(&job),
            findings,
            super::Context::default(),
        )
    }

    #[test]
    fn close_failures_on_two_hosts_get_an_ordering_note() {
        let r = report(false);
        assert!(
            r.ordering_note
                .as_deref()
                .is_some_and(|n| n.contains("host-a and host-b")),
            "{:?}",
            r.ordering_note
        );
        assert!(r.to_text(false).contains("note: the first two failures"));
        assert!(report(true).ordering_note.is_none());
    }
}
