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
pub mod generic;
pub mod message_facts;
pub mod signatures;

use crate::model::{CallEvent, JobModel};
use serde::Serialize;
use std::collections::BTreeSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The root cause, or the first failure when no cause is known.
    Primary,
    /// A consequence of the primary failure, or a condition that made it likelier.
    Contributing,
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
    /// `host pid N` of every process involved (ranks alone are ambiguous across communicators).
    pub processes: Vec<String>,
    pub evidence: Vec<String>,
    pub remedy: String,
    pub confidence: Confidence,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixed_in: Option<String>,
    /// (process, call index) of the failures this finding accounts for.
    #[serde(skip)]
    pub explains: Vec<(usize, usize)>,
    #[serde(skip)]
    pub process_ids: BTreeSet<usize>,
    /// The failures it explains echo a failure elsewhere (a peer closed the connection,
    /// teardown noise): such a finding is never chosen as primary while another explains a
    /// failure, and sorts after its equals.
    #[serde(skip)]
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
            if !self.ranks.contains(&r) {
                self.ranks.push(r);
                self.ranks.sort_unstable();
            }
        }
        self.processes.push(format!("{} pid {}", pm.host, pm.pid));
    }

    pub fn evidence(&mut self, line: impl Into<String>) {
        let l = line.into();
        if !self.evidence.contains(&l) {
            self.evidence.push(l);
        }
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

type RuleFn = fn(&JobModel) -> Vec<Finding>;

/// Every rule, in the order their findings are listed when equally ranked.
pub const RULES: &[(&str, RuleFn)] = &[
    ("C01", c01_net_ib::check),
    ("C02", c02_unpaired_p2p::check),
    ("C03", c03_version_mismatch::check),
    ("C04", c04_cumem_import::check),
    ("C05", c05_gdr_peermem::check),
    ("C06", c06_duplicate_gpu::check),
    ("C07", c07_dev_shm::check),
    ("C08", c08_socket_ifname::check),
    ("C18", c18_driver_runtime::check),
    ("C19", c19_desync::check),
    ("C20", c20_dead_peer::check),
    ("C23", c23_two_libnccl::check),
    ("C26", c26_env_tuning::check),
    ("C27", c27_nranks::check),
    ("C28", c28_local_rank::check),
    ("C35", c35_no_libnccl::check),
    ("signatures", signatures::check),
    ("signal", generic::fatal_signal::check),
    ("invalid-arg", generic::invalid_argument::check),
    ("abrupt", generic::abrupt_end::check),
    ("missing", generic::missing_ranks::check),
    ("network", generic::network_path::check),
    ("threads", generic::concurrent_comm::check),
    ("uid", generic::uid_split::check),
    ("stuck", generic::stuck::check),
    ("env", generic::env_diff::check),
    ("libs", generic::lib_diff::check),
];

/// Runs every rule and orders the findings: primary first, then by confidence.
pub fn diagnose(job: &JobModel) -> Vec<Finding> {
    let mut findings: Vec<Finding> = RULES.iter().flat_map(|(_, f)| f(job)).collect();
    findings.extend(generic::unknown::check(job, &findings));
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
        let chosen = job
            .failures
            .iter()
            .filter_map(explaining)
            .find(|&i| !findings[i].consequence)
            .or_else(|| job.failures.first().and_then(explaining));
        if let Some(i) = chosen {
            findings[i].severity = Severity::Primary;
        }
    }
    findings.sort_by_key(|f| (f.severity, f.consequence, f.confidence));
    findings
}

#[cfg(test)]
pub mod testutil {
    use super::*;
    use crate::load::{find_dumps, load_files};
    use crate::synth::Scenario;

    /// Builds a scenario in a fresh directory and returns its model and findings.
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
