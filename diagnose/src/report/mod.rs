//! The report: the JSON document (`--json`, versioned) and the terminal rendering of it. Both are
//! built from one [`Report`] so the text never says something the JSON does not.
//!
//! - this file: the report's structures and [`Report::build`], which makes it once from the
//!   job's model, story and findings and what [`Context`] brings; nothing edits it after;
//! - [`gaps`]: the evidence gaps, what the dumps could not tell;
//! - [`text`]: the terminal rendering, as the reader's [`text::TextOptions`] ask.

mod gaps;
pub mod text;

use crate::finding::{Evidence, Finding, Severity};
use crate::load::Problem;
use crate::model::{FailureWhat, JobModel};
use crate::story::Story;
use serde::Serialize;

/// Bumped when a field is removed or changes meaning; additions keep it. The contract is
/// `docs/schema/report.schema.json` (described in `docs/report-json.md`). 2: evidence items and
/// processes are objects (were lines and `host pid N` strings).
pub const FORMAT_VERSION: u32 = 2;

pub use crate::finding::words::{count, human_bytes};

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
        let evidence_gaps = gaps::evidence_gaps(
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
        }
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
