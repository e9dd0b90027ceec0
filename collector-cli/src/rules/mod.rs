//! The rule set: one small module per failure-catalog case whose evidence the recorders capture
//! (`cNN_*`), plus generic cross-rank checks (`generic`). Each rule reads the [`JobModel`] and
//! returns findings that quote what was recorded; [`diagnose`] runs them all, gives every
//! failure no rule explains an evidence-only finding, and decides which finding is primary
//! (the one that explains the earliest failure in the job when no rule claims it outright).

pub mod c01_net_ib;
pub mod c02_unpaired_p2p;
pub mod c03_version_mismatch;
pub mod c04_cumem_import;
pub mod c05_gdr_peermem;
pub mod c06_duplicate_gpu;
pub mod c07_dev_shm;
pub mod c08_socket_ifname;
pub mod c18_driver_runtime;
pub mod c19_desync;
pub mod c20_dead_peer;
pub mod c23_two_libnccl;
pub mod c26_env_tuning;
pub mod c27_nranks;
pub mod c28_local_rank;
pub mod c35_no_libnccl;
pub mod evidence;
pub mod generic;
pub mod message_facts;
pub mod signatures;

use crate::model::{CallEvent, JobModel};
pub use crate::rules::evidence::{Evidence, EvidenceKind, ProcessRef};
use serde::Serialize;
use std::collections::BTreeSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The root cause, or the first failure when no cause is known.
    Primary,
    /// A consequence of the primary failure, or a condition that made it likelier.
    Contributing,
    /// Worth knowing but not a failure (a rank that arrives late to every collective of a job
    /// that ran): it explains no failure and does not make the report fail.
    Advisory,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    High,
    Medium,
    Low,
}

/// One verdict with its evidence.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catalog: Option<&'static str>,
    pub title: String,
    pub severity: Severity,
    pub ranks: Vec<u32>,
    /// Every process involved (ranks alone are ambiguous across communicators).
    pub processes: Vec<ProcessRef>,
    /// What was recorded, one item per distinct fact with the processes it holds for.
    pub evidence: Vec<Evidence>,
    pub remedy: String,
    pub confidence: Confidence,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixed_in: Option<String>,
    /// (process, call index) of the failures this finding accounts for.
    /// Indices into the report's `failure_order` of the failures this finding accounts for
    /// (filled by the report).
    pub explains_failures: Vec<usize>,
    #[serde(skip)]
    pub explains: Vec<(usize, usize)>,
    #[serde(skip)]
    pub process_ids: BTreeSet<usize>,
    /// The failures it explains echo a failure elsewhere (a peer closed the connection,
    /// teardown noise): such a finding is never chosen as primary while another explains a
    /// failure, and sorts after its equals.
    pub consequence: bool,
}

impl Finding {
    pub fn new(
        id: &str,
        catalog: Option<&'static str>,
        title: impl Into<String>,
        severity: Severity,
        confidence: Confidence,
    ) -> Self {
        Self {
            id: id.to_owned(),
            catalog,
            title: title.into(),
            severity,
            ranks: Vec::new(),
            processes: Vec::new(),
            evidence: Vec::new(),
            remedy: String::new(),
            confidence,
            fixed_in: None,
            explains_failures: Vec::new(),
            explains: Vec::new(),
            process_ids: BTreeSet::new(),
            consequence: false,
        }
    }

    /// Adds a process (and its world rank) to the finding.
    pub fn involve(&mut self, job: &JobModel, p: usize) {
        if !self.process_ids.insert(p) {
            return;
        }
        let pm = &job.processes[p];
        if let Some(r) = pm.world_rank() {
            // Kept sorted by inserting in place (a scan and a sort per rank was ranks x ranks
            // for a finding that involves a whole large job).
            if let Err(at) = self.ranks.binary_search(&r) {
                self.ranks.insert(at, r);
            }
        }
        self.processes.push(ProcessRef::of(job, p));
    }

    /// Adds a free-text evidence line (kind `note`, no structured values). Prefer [`Self::fact`]:
    /// this stays for rules not yet converted to structured evidence.
    pub fn evidence(&mut self, line: impl Into<String>) {
        evidence::add(&mut self.evidence, Evidence::note(line));
    }

    /// Adds a recorded fact; one already present (same kind, values and wording) gains this
    /// item's processes and hosts instead of a second line.
    pub fn fact(&mut self, e: Evidence) {
        evidence::add(&mut self.evidence, e);
    }

    /// [`Self::fact`] for each item, in order, with the same result; for a fact added once per
    /// rank of a large job (each joined item's rank list is written once, not once per rank).
    pub fn facts(&mut self, es: impl IntoIterator<Item = Evidence>) {
        evidence::add_all(&mut self.evidence, es);
    }

    pub fn remedy(mut self, r: &str) -> Self {
        self.remedy = r.to_owned();
        self
    }

    pub fn explain(&mut self, p: usize, call: usize) {
        if !self.explains.contains(&(p, call)) {
            self.explains.push((p, call));
        }
    }
}

/// Case-insensitive substring test on NCCL's error text.
pub fn text_has(c: &CallEvent, needles: &[&str]) -> bool {
    c.error_text.as_deref().is_some_and(|t| {
        let t = t.to_ascii_lowercase();
        needles.iter().any(|n| t.contains(&n.to_ascii_lowercase()))
    })
}

/// `rank 3 (host pid 12)` for evidence lines.
pub fn who(job: &JobModel, p: usize) -> String {
    job.processes[p].label()
}

/// Compact rank list: `0-3,5`.
pub fn rank_list(ranks: &[u32]) -> String {
    let mut v = ranks.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let start = v[i];
        let mut end = start;
        while i + 1 < v.len() && v[i + 1] == end + 1 {
            i += 1;
            end = v[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

/// Names processes by world rank where known, else by host/pid.
pub fn name_processes(job: &JobModel, ps: &[usize]) -> String {
    let ranks: Vec<u32> = ps
        .iter()
        .filter_map(|&p| job.processes[p].world_rank())
        .collect();
    let unranked: Vec<String> = ps
        .iter()
        .filter(|&&p| job.processes[p].world_rank().is_none())
        .map(|&p| format!("{} pid {}", job.processes[p].host, job.processes[p].pid))
        .collect();
    let mut parts = Vec::new();
    if !ranks.is_empty() {
        parts.push(format!(
            "{} {}",
            if ranks.len() == 1 { "rank" } else { "ranks" },
            rank_list(&ranks)
        ));
    }
    parts.extend(unranked);
    parts.join(", ")
}

/// Choices a user makes about the analysis (`ncclshim report --stall-after`), passed to the
/// rules that depend on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// How long the live ranks of a communicator must have recorded nothing before an operation
    /// that has not completed is called a hang ([`generic::stuck::DEFAULT_STALL_NS`] by default).
    pub stall_after_ns: u64,
    /// The time of the analysis (ns since the Unix epoch): the diagnosis is a pure function of
    /// the job and this instant, so a test can replay "read while running" and "read later".
    pub now_ns: u64,
}

impl Options {
    /// The default options at the instant `now_ns`.
    pub fn at(now_ns: u64) -> Self {
        Self {
            stall_after_ns: generic::stuck::DEFAULT_STALL_NS,
            now_ns,
        }
    }
}

impl Default for Options {
    /// The default options now: the one place the diagnosis reads the clock.
    fn default() -> Self {
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        Self::at(now_ns)
    }
}

type RuleFn = fn(&JobModel, &Options) -> Vec<Finding>;

/// Every rule, in the order their findings are listed when equally ranked.
pub const RULES: &[(&str, RuleFn)] = &[
    ("C01", |j, _| c01_net_ib::check(j)),
    ("C02", |j, _| c02_unpaired_p2p::check(j)),
    ("C03", |j, _| c03_version_mismatch::check(j)),
    ("C04", |j, _| c04_cumem_import::check(j)),
    ("C05", |j, _| c05_gdr_peermem::check(j)),
    ("C06", |j, _| c06_duplicate_gpu::check(j)),
    ("C07", |j, _| c07_dev_shm::check(j)),
    ("C08", |j, _| c08_socket_ifname::check(j)),
    ("C18", |j, _| c18_driver_runtime::check(j)),
    ("C19", |j, _| c19_desync::check(j)),
    ("C20", |j, _| c20_dead_peer::check(j)),
    ("C23", |j, _| c23_two_libnccl::check(j)),
    ("C26", |j, _| c26_env_tuning::check(j)),
    ("C27", |j, _| c27_nranks::check(j)),
    ("C28", |j, _| c28_local_rank::check(j)),
    ("C35", |j, _| c35_no_libnccl::check(j)),
    ("signatures", |j, _| signatures::check(j)),
    ("signal", |j, _| generic::fatal_signal::check(j)),
    ("invalid-arg", |j, _| generic::invalid_argument::check(j)),
    ("abrupt", |j, _| generic::abrupt_end::check(j)),
    ("missing", |j, _| generic::missing_ranks::check(j)),
    ("network", |j, _| generic::network_path::check(j)),
    ("threads", |j, _| generic::concurrent_comm::check(j)),
    ("waiting", |j, _| generic::waiting_ranks::check(j)),
    ("uid", |j, _| generic::uid_split::check(j)),
    ("stuck", |j, o| {
        generic::stuck::check(j, o.now_ns, o.stall_after_ns)
    }),
    ("late", |j, _| generic::late_rank::check(j)),
    ("env", |j, _| generic::env_diff::check(j)),
    ("libs", |j, _| generic::lib_diff::check(j)),
];

/// Runs every rule with the default [`Options`]; see [`diagnose_with`].
pub fn diagnose(job: &JobModel) -> Vec<Finding> {
    diagnose_with(job, &Options::default())
}

/// Runs every rule and orders the findings: primary first, then by confidence.
pub fn diagnose_with(job: &JobModel, options: &Options) -> Vec<Finding> {
    let mut findings: Vec<Finding> = RULES.iter().flat_map(|(_, f)| f(job, options)).collect();
    // What the identifiers in a failure's text are, where no rule explains that failure.
    let xref = generic::cross_reference::check(job, &findings);
    findings.extend(xref);
    // Version awareness reads what the other rules concluded (a known bug is primary only where
    // no primary finding explains the failure already).
    let known = generic::known_bug::check(job, &findings);
    findings.extend(known);
    findings.extend(generic::unknown::check(job, &findings));
    // What only the failing processes have, when nothing explains the failure clearly.
    let differential = generic::differential::check(job, &findings);
    findings.extend(differential);
    // A desync, or threads racing on one communicator, explains the hang it causes: the hang
    // is then a consequence.
    const HANG_CAUSES: &[&str] = &[
        "collective-desync",
        "communicator-used-from-several-threads",
    ];
    if findings
        .iter()
        .any(|f| HANG_CAUSES.contains(&f.id.as_str()))
    {
        for f in findings.iter_mut().filter(|f| f.id.starts_with("stuck-")) {
            f.severity = Severity::Contributing;
        }
    }
    // A finding that explains the very calls a hang is stuck in (an init waiting for an
    // unreachable root) is its cause: the hang is then a consequence.
    let explains_stuck_call = |f: &Finding, p: usize| {
        f.explains
            .iter()
            .any(|&(fp, i)| fp == p && job.processes[p].calls.get(i).is_some_and(|c| c.in_flight()))
    };
    let hang_explained: Vec<bool> = findings
        .iter()
        .map(|s| {
            s.id.starts_with("stuck-")
                && !s.process_ids.is_empty()
                && s.process_ids.iter().all(|&p| {
                    findings.iter().any(|f| {
                        !f.id.starts_with("stuck-")
                            && f.severity == Severity::Primary
                            && explains_stuck_call(f, p)
                    })
                })
        })
        .collect();
    for (f, explained) in findings.iter_mut().zip(hang_explained) {
        if explained {
            f.severity = Severity::Contributing;
        }
    }
    demote_later_failures(job, &mut findings);
    // What every identifier in an explained failure's text is in this job.
    for f in findings.iter_mut() {
        generic::cross_reference::annotate(job, f);
    }
    for f in findings.iter_mut().filter(|f| f.id == "stuck-inside-nccl") {
        generic::transport_hang::annotate(job, f);
    }
    generic::missing_ranks::adopt_echoes(job, &mut findings);
    demote_primaries_explaining_nothing(job, &mut findings);
    if !findings.iter().any(|f| f.severity == Severity::Primary) {
        // Nobody claimed the root cause: the finding covering the earliest failure is primary,
        // unless that finding is a consequence (a peer's closed connection, teardown noise):
        // then the earliest failure explained by a finding that is not.
        let explaining = |first: &crate::model::JobFailure| {
            let key = match first.what {
                crate::model::FailureWhat::Call(i) | crate::model::FailureWhat::AsyncError(i) => {
                    Some((first.process, i))
                }
                crate::model::FailureWhat::Signal(_) | crate::model::FailureWhat::Died => None,
            };
            // The finding that explains that failure; for a death or signal (no call to
            // explain), the first finding about that process.
            match key {
                Some(k) => findings.iter().position(|f| f.explains.contains(&k)),
                None => findings
                    .iter()
                    .position(|f| f.process_ids.contains(&first.process)),
            }
        };
        // Never a consequence: when only echoes explain the failures (their cause lies in a
        // damaged dump or outside what was recorded), the report has no primary rather than a
        // teardown message as the cause; the echo's own finding says where to look.
        let chosen = job
            .failures
            .iter()
            .filter_map(explaining)
            .find(|&i| !findings[i].consequence);
        if let Some(i) = chosen {
            findings[i].severity = Severity::Primary;
        }
    }
    findings.sort_by_key(|f| (f.severity, f.consequence, f.confidence));
    findings
}

/// A finding that explains no failure is never primary while something failed: a condition
/// (ranks that never arrived, a hang elsewhere) that accounts for none of the job's failures is
/// context, and the failure's own explanation leads the report.
fn demote_primaries_explaining_nothing(job: &JobModel, findings: &mut [Finding]) {
    let firsts = job.first_failure_per_process();
    if firsts.is_empty() {
        return;
    }
    for f in findings
        .iter_mut()
        .filter(|f| f.severity == Severity::Primary)
    {
        if !firsts.iter().any(|e| explains_failure(f, e)) {
            f.severity = Severity::Contributing;
        }
    }
}

/// When a finding's story starts: the earliest failure it explains, or (a finding about a
/// death or signal, which explains no call) its processes' earliest such failure.
fn onset(job: &JobModel, f: &Finding) -> Option<(u64, usize)> {
    let explained = f
        .explains
        .iter()
        .filter_map(|&(p, i)| {
            let c = job.processes.get(p)?.calls.get(i)?;
            c.reports_error().then(|| (c.fail_time(), p))
        })
        .min();
    explained.or_else(|| {
        job.failures
            .iter()
            .filter(|fl| f.process_ids.contains(&fl.process))
            .filter(|fl| {
                matches!(
                    fl.what,
                    crate::model::FailureWhat::Signal(_) | crate::model::FailureWhat::Died
                )
            })
            .map(|fl| (fl.t, fl.process))
            .min()
    })
}

/// Whether a failure of process `p` can be a consequence of one of process `q`: the same
/// process (an abort after an error), or processes that share a communicator (or the uniqueId
/// they were joining), through which a failure propagates.
fn causally_linked(job: &JobModel, p: usize, q: usize) -> bool {
    if p == q {
        return true;
    }
    let comms = |x: usize| -> BTreeSet<u64> {
        let pm = &job.processes[x];
        pm.memberships
            .iter()
            .map(|m| m.comm_hash)
            .chain(
                pm.calls
                    .iter()
                    .filter(|c| c.is_init())
                    .filter_map(|c| c.arg("uid_hash")),
            )
            .filter(|&h| h != 0)
            .collect()
    };
    !comms(p).is_disjoint(&comms(q))
}

/// How well the end of a process that died without a mark (SIGKILL, no record of its own) is
/// known: its last record is only a lower bound of the death. A process that was busy until
/// then (calls every few microseconds) died right after it; one that was idle may have died any
/// time later. Returns the typical spacing of its last calls when it was busy.
fn busy_until_the_end(pm: &crate::model::ProcessModel) -> Option<u64> {
    pm.busy_spacing()
}

/// Whether failure `e` certainly happened before time `t` (beyond the clocks' uncertainty
/// `tolerance`): a recorded failure by its time. A silent death's time is only a lower bound,
/// so it counts only against a later *reaction* (an abort, an NCCL error), not against a fault
/// of the later process's own (`later_is_fault`), and only when the dead process was busy until
/// its last record and `t` is far past it: a rank OOM-killed mid-training, whose peers abort
/// afterwards, came first; a crash of another rank while a silent one may have been idle did not
/// necessarily come second.
fn certainly_before(
    job: &JobModel,
    e: &crate::model::JobFailure,
    t: u64,
    tolerance: u64,
    later_is_fault: bool,
) -> bool {
    if t <= e.t.saturating_add(tolerance) {
        return false;
    }
    match e.what {
        crate::model::FailureWhat::Died => {
            !later_is_fault
                && busy_until_the_end(&job.processes[e.process])
                    .is_some_and(|gap| t - e.t > gap.saturating_mul(20))
        }
        _ => true,
    }
}

/// A signal the kernel raises for a fault of the process itself (not a reaction to others).
fn is_fault_signal(signo: u64) -> bool {
    matches!(signo, 4 | 7 | 8 | 11) // SIGILL, SIGBUS, SIGFPE, SIGSEGV
}

/// Consequences never outrank the failure that caused them: a primary finding whose story
/// starts after an earlier failure of the job, on the same process or one linked to it through
/// a communicator, is demoted to contributing and says after what. Failures closer than the
/// clocks can order stay primary (they may be independent, e.g. every rank's init), and a rank
/// that went silent is not assumed dead before an explicit error unless it was busy until then.
fn demote_later_failures(job: &JobModel, findings: &mut [Finding]) {
    for f in findings
        .iter_mut()
        .filter(|f| f.severity == Severity::Primary)
    {
        let Some((t, p)) = onset(job, f) else {
            continue;
        };
        let later_is_fault = job.failures.iter().any(|e| {
            e.process == p
                && e.t == t
                && matches!(e.what, crate::model::FailureWhat::Signal(s) if is_fault_signal(s))
        });
        let earlier = job.failures.iter().find(|e| {
            let tolerance = job.processes[p]
                .clock_uncertainty
                .max(job.processes[e.process].clock_uncertainty);
            !f.process_ids.contains(&e.process)
                && certainly_before(job, e, t, tolerance, later_is_fault)
                && causally_linked(job, p, e.process)
                || e.process == p
                    && !matches!(e.what, crate::model::FailureWhat::Died)
                    && e.t < t
                    && !explains_failure(f, e)
        });
        if let Some(e) = earlier {
            f.severity = Severity::Contributing;
            f.consequence = true;
            f.evidence(format!(
                "after an earlier failure ({}: {}), {} ms before: likely a consequence of it",
                who(job, e.process),
                job.describe(e),
                (t - e.t) / 1_000_000
            ));
        }
    }
}

/// Whether finding `f` accounts for failure `e`: it explains that call, or (a death or signal,
/// which is no call) it is about that process.
pub fn explains_failure(f: &Finding, e: &crate::model::JobFailure) -> bool {
    match e.what {
        crate::model::FailureWhat::Call(i) | crate::model::FailureWhat::AsyncError(i) => {
            f.explains.contains(&(e.process, i))
        }
        _ => f.process_ids.contains(&e.process),
    }
}

/// The JSON contract check the integration tests use (`tests/support/schema.rs`).
#[cfg(test)]
#[path = "../../tests/support/schema.rs"]
#[allow(dead_code)]
pub mod schema_support;

#[cfg(test)]
pub mod testutil {
    use super::*;
    use crate::load::{find_dumps, load_files};
    use crate::synth::Scenario;

    /// Builds a scenario in a fresh directory and returns its model and findings (whose report
    /// is held to the JSON contract, `docs/schema/report.schema.json`).
    pub fn analyze(hosts: &[&str], build: impl FnOnce(&mut Scenario)) -> (JobModel, Vec<Finding>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Scenario::new(dir.path(), hosts).expect("scenario");
        build(&mut s);
        drop(s);
        let files = find_dumps(dir.path()).expect("list");
        let loaded = load_files(dir.path(), &files, None);
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        let job = JobModel::build(&loaded.dumps, |d| d.path.display().to_string());
        let findings = diagnose(&job);
        let report = crate::report::Report::build(&job, findings.clone(), Vec::new());
        super::schema_support::report_json(&report);
        (job, findings)
    }

    pub fn find<'a>(fs: &'a [Finding], id: &str) -> Option<&'a Finding> {
        fs.iter().find(|f| f.id == id)
    }

    #[test]
    fn rank_lists_compact() {
        assert_eq!(rank_list(&[3, 0, 1, 2, 5]), "0-3,5");
        assert_eq!(rank_list(&[]), "");
    }
}
