//! The rule set. Each rule reads the [`JobModel`] (and the job's [`Story`]) and returns findings
//! that quote what was recorded; [`diagnose`] runs them all, gives every failure no rule explains
//! an evidence-only finding ([`unknown`]), and lets the verdict ([`verdict`]) decide which finding
//! is primary (the one that explains the earliest failure in the job when no rule claims it
//! outright).
//!
//! The rules are grouped by topic, one folder each, whose `mod.rs` says what the topic covers and
//! which failure-catalog cases its rules implement:
//! - [`init`]: communicator init (versions, duplicate GPUs, nranks, local rank, uniqueIds, ranks
//!   that never arrived);
//! - [`install`]: libnccl missing or twice, driver vs runtime, library differences, known bugs of
//!   the recorded version;
//! - [`network`]: a network NCCL cannot initialise, interface filters, peer addresses, survivors
//!   of a dead peer;
//! - [`cuda`]: cuMem imports, GPUDirect RDMA, `/dev/shm`, the application's own CUDA calls;
//! - [`hang`]: stuck inside or outside NCCL, transport hangs, waiting and late ranks, one
//!   communicator used from several threads;
//! - [`mismatch`]: unpaired send/recv, collective desync;
//! - [`config`]: NCCL variables differing across ranks, refused arguments, what only the failing
//!   processes have;
//! - [`process`]: how processes ended (fatal signal, abrupt end, left early) and size mismatches
//!   read off the story.
//!
//! The catalog case is metadata, not a file name: the label in [`RULES`], `catalog` in the
//! finding registry ([`registry`]), and "Catalog CNN" in the rule module's `//!` header. Besides
//! the topics, at this level: checks that read every other rule's findings and belong to no one
//! topic ([`cross_reference`]: the identifiers an error text names; [`unknown`]: the
//! evidence-only finding), the error-signature rules read from the knowledge files
//! ([`signatures`]), and the infrastructure (findings' [`evidence`], [`message_facts`],
//! [`registry`], [`verdict`]).

pub mod config;
pub mod cross_reference;
pub mod cuda;
pub mod evidence;
pub mod hang;
pub mod init;
pub mod install;
pub mod message_facts;
pub mod mismatch;
pub mod network;
pub mod process;
pub mod registry;
pub mod signatures;
pub mod unknown;
pub mod verdict;

use crate::model::{CallEvent, JobModel};
pub use crate::rules::evidence::{Evidence, EvidenceKind, ProcessRef};
use crate::story::Story;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{BTreeSet, HashSet};

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
    /// Its declaration's id ([`registry`]): set when it is made, never changed.
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    catalog: Option<&'static str>,
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
    /// Indices into the report's `failure_order` of the failures this finding accounts for
    /// (filled by the report).
    pub explains_failures: Vec<usize>,
    /// (process, call index) of the failed calls this finding explains, in the order explained.
    #[serde(skip)]
    pub explains: Vec<(usize, usize)>,
    /// `explains` as a set, so that [`Self::explain`] stays constant-time when a finding
    /// explains a failure on every rank of a large job (a list scan per call was ranks x ranks
    /// in every rule that explains its calls one by one).
    #[serde(skip)]
    explained: HashSet<(usize, usize)>,
    #[serde(skip)]
    pub process_ids: BTreeSet<usize>,
    /// The verdict's word ([`verdict::decide`]): the failures it explains echo a failure
    /// elsewhere (a peer closed the connection, teardown noise), or its role is a consequence.
    /// No rule sets it: a rule says that through the role it declares.
    pub consequence: bool,
    /// Its role in the job's story (declared in [`registry`], or from the knowledge entry
    /// that made it): what the verdict may make of it.
    #[serde(skip)]
    role: registry::Role,
    /// The failure-graph nodes it explains besides its calls (declared in [`registry`]).
    #[serde(skip)]
    covers: &'static [crate::story::NodeClass],
    /// A failure in its own right even when nothing else failed.
    #[serde(skip)]
    standalone: bool,
    /// Names a specific mechanism (beats a generic finding on the same root).
    #[serde(skip)]
    specific: bool,
    /// The job's failures it accounts for through the story (a primary accounts for the
    /// consequences of the roots it explains).
    #[serde(skip)]
    pub accounts: Vec<(usize, crate::model::FailureWhat)>,
    /// A violated invariant's finding (`crate::invariants`): how far it reaches. The verdict
    /// ranks these after specific rules and before generic findings, nearest scope first.
    #[serde(skip)]
    pub invariant_scope: Option<crate::invariants::Scope>,
    /// Processes whose story nodes (of the classes in `covers`) it explains besides its own
    /// processes, from `reach_since` on (an invariant reaching a communicator or host).
    #[serde(skip)]
    pub reach: BTreeSet<usize>,
    #[serde(skip)]
    pub reach_since: u64,
}

impl Finding {
    /// A candidate finding of declaration `declared` ([`registry`]): its id, catalog case,
    /// role and what it covers are the declaration's; its severity is the verdict's to decide
    /// ([`verdict::decide`]).
    pub fn new(
        declared: &'static registry::Declared,
        title: impl Into<String>,
        confidence: Confidence,
    ) -> Self {
        Self::made(
            (
                declared.id().to_owned(),
                declared.catalog(),
                declared.role(),
                declared.covers(),
                declared.standalone(),
                declared.specific(),
            ),
            title.into(),
            confidence,
        )
    }

    /// A candidate finding named by a knowledge entry: a member of a declared family
    /// ([`registry::Family::member`]).
    pub fn of_member(
        member: registry::Member,
        title: impl Into<String>,
        confidence: Confidence,
    ) -> Self {
        Self::made(member.into_parts(), title.into(), confidence)
    }

    fn made(
        (id, catalog, role, covers, standalone, specific): (
            String,
            Option<&'static str>,
            registry::Role,
            &'static [crate::story::NodeClass],
            bool,
            bool,
        ),
        title: String,
        confidence: Confidence,
    ) -> Self {
        Self {
            id,
            catalog,
            title,
            severity: Severity::Contributing,
            ranks: Vec::new(),
            processes: Vec::new(),
            evidence: Vec::new(),
            remedy: String::new(),
            confidence,
            fixed_in: None,
            explains_failures: Vec::new(),
            explains: Vec::new(),
            explained: HashSet::new(),
            process_ids: BTreeSet::new(),
            consequence: false,
            role,
            covers,
            standalone,
            specific,
            accounts: Vec::new(),
            invariant_scope: None,
            reach: BTreeSet::new(),
            reach_since: 0,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether it is the finding `declared` declares.
    pub fn is(&self, declared: &registry::Declared) -> bool {
        self.id == declared.id()
    }

    pub fn catalog(&self) -> Option<&'static str> {
        self.catalog
    }

    pub fn role(&self) -> registry::Role {
        self.role
    }

    pub fn covers(&self) -> &'static [crate::story::NodeClass] {
        self.covers
    }

    pub fn standalone(&self) -> bool {
        self.standalone
    }

    pub fn specific(&self) -> bool {
        self.specific
    }

    /// Whether it covers a story node of process `p` at time `t` that is no call (a signal, a
    /// hang, a departure), given the node's class.
    pub fn covers_node(&self, class: crate::story::NodeClass, p: usize, t: u64) -> bool {
        self.covers.contains(&class)
            && (self.process_ids.contains(&p) || (self.reach.contains(&p) && t >= self.reach_since))
    }

    /// Folds `other` (the same finding about other processes) into this one: its processes,
    /// evidence and what it explains.
    pub fn absorb(&mut self, job: &JobModel, other: Finding) {
        for &p in &other.process_ids {
            self.involve(job, p);
        }
        self.facts(other.evidence);
        self.explain_all(other.explains);
        self.reach.extend(other.reach);
    }

    /// Records that this finding accounts for each of these failures of the job, in order and
    /// once each (set by the verdict for what its roots explain; a primary can account for a
    /// failure on every rank of a large job, so a scan per failure would be quadratic).
    pub fn account_all(
        &mut self,
        failures: impl IntoIterator<Item = (usize, crate::model::FailureWhat)>,
    ) {
        let mut listed: HashSet<(usize, crate::model::FailureWhat)> =
            self.accounts.iter().copied().collect();
        for failure in failures {
            if listed.insert(failure) {
                self.accounts.push(failure);
            }
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
        if self.explained.insert((p, call)) {
            self.explains.push((p, call));
        }
    }

    /// [`Self::explain`] for each pair, in order.
    pub fn explain_all(&mut self, pairs: impl IntoIterator<Item = (usize, usize)>) {
        for (p, call) in pairs {
            self.explain(p, call);
        }
    }
}

/// Whether NCCL's message knowledge (`knowledge/messages.toml`) classifies a message of the
/// call's error text as an entry of failure-catalog case `case`: the rules recognise NCCL's
/// texts through that one table, never through word lists of their own.
pub fn text_is_case(c: &CallEvent, case: &str) -> bool {
    text_classified_as(c, |m| m.entry.catalog.iter().any(|x| x == case))
}

/// Whether a message of the call's error text is classified as one of the message-knowledge
/// entries `ids` (`knowledge/messages.toml`): for a rule that relies on particular messages of a
/// case, named by their entries, never by words of its own.
pub fn text_is_entry(c: &CallEvent, ids: &[&str]) -> bool {
    text_classified_as(c, |m| ids.contains(&m.entry.id.as_str()))
}

/// Whether a message of the call's error text is classified with role `role` (an echo of a
/// failure elsewhere, teardown noise...).
pub fn text_has_role(c: &CallEvent, role: crate::knowledge::messages::Role) -> bool {
    text_classified_as(c, |m| m.entry.role == role)
}

/// Whether any message of the call's error text classifies as an entry `wanted` accepts.
fn text_classified_as(
    c: &CallEvent,
    wanted: impl Fn(&crate::knowledge::messages::Match) -> bool,
) -> bool {
    c.error_text.as_deref().is_some_and(|t| {
        crate::knowledge::messages::classify_all(t)
            .iter()
            .any(wanted)
    })
}

/// Case-insensitive substring test on NCCL's error text: left for C01 alone, which tells the two
/// wordings of one message apart by the version that prints each (`network::net_ib::expected_text`,
/// from the version facts); both wordings are one entry of the message knowledge.
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
    /// that has not completed is called a hang ([`hang::stuck::DEFAULT_STALL_NS`] by default).
    pub stall_after_ns: u64,
    /// The time of the analysis (ns since the Unix epoch): the diagnosis is a pure function of
    /// the job and this instant, so a test can replay "read while running" and "read later".
    pub now_ns: u64,
}

impl Options {
    /// The default options at the instant `now_ns`.
    pub fn at(now_ns: u64) -> Self {
        Self {
            stall_after_ns: hang::stuck::DEFAULT_STALL_NS,
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

type RuleFn = fn(&JobModel, &Story, &Options) -> Vec<Finding>;

/// Every rule, in the order their findings are listed when equally ranked. The label is the
/// failure-catalog case the rule implements (`docs/catalog.md`), or a short name for a rule that
/// is not one case: the case is the rule's metadata here and in its module header, not its file
/// name (the modules are grouped by topic).
pub const RULES: &[(&str, RuleFn)] = &[
    ("C01", |j, _, _| network::net_ib::check(j)),
    ("C02", |j, _, _| mismatch::unpaired_p2p::check(j)),
    ("C03", |j, _, _| init::version_mismatch::check(j)),
    ("C04", |j, _, _| cuda::cumem_import::check(j)),
    ("C05", |j, _, _| cuda::gdr_peermem::check(j)),
    ("C06", |j, _, _| init::duplicate_gpu::check(j)),
    ("C07", |j, _, _| cuda::dev_shm::check(j)),
    ("C08", |j, _, _| network::socket_ifname::check(j)),
    ("C18", |j, _, _| install::driver_runtime::check(j)),
    ("C19", |j, s, _| mismatch::desync::check(j, s)),
    ("C19", |j, s, _| {
        process::story_findings::size_mismatch(j, s)
    }),
    ("app-cuda", |j, _, _| cuda::app_cuda::check(j)),
    ("C20", |j, s, _| network::dead_peer::check(j, s)),
    ("C23", |j, _, _| install::two_libnccl::check(j)),
    ("C26", |j, _, _| config::env_tuning::check(j)),
    ("C27", |j, _, _| init::nranks::check(j)),
    ("C28", |j, _, _| init::local_rank::check(j)),
    ("C35", |j, _, _| install::no_libnccl::check(j)),
    ("signatures", |j, _, _| signatures::check(j)),
    ("signal", |j, s, _| process::fatal_signal::check(j, s)),
    ("invalid-arg", |j, _, _| config::invalid_argument::check(j)),
    ("abrupt", |j, s, _| process::abrupt_end::check(j, s)),
    ("left-early", |j, s, _| {
        process::story_findings::left_early(j, s)
    }),
    ("missing", |j, s, _| init::missing_ranks::check(j, s)),
    ("C09-C10", |j, s, _| network::network_path::check(j, s)),
    ("C25", |j, _, _| hang::concurrent_comm::check(j)),
    ("waiting", |j, s, _| hang::waiting_ranks::check(j, s)),
    ("uid", |j, _, _| init::uid_split::check(j)),
    ("stuck", |j, s, o| {
        hang::stuck::check(j, s, o.now_ns, o.stall_after_ns)
    }),
    ("late", |j, _, _| hang::late_rank::check(j)),
    ("env", |j, _, _| config::env_diff::check(j)),
    ("libs", |j, _, _| install::lib_diff::check(j)),
];

/// Runs every rule with the default [`Options`]; see [`diagnose_with`].
pub fn diagnose(job: &JobModel) -> Vec<Finding> {
    diagnose_with(job, &Options::default())
}

/// Tells the job's story once ([`Story::build`]), runs every rule over it and lets the verdict
/// ([`verdict::decide`]) choose what is primary; see [`diagnose_story`].
pub fn diagnose_with(job: &JobModel, options: &Options) -> Vec<Finding> {
    let story = Story::build(job);
    diagnose_story(job, &story, options)
}

/// The candidates of every rule over `story`, then the verdict. Four checks read what the other
/// candidates explain (never their severity): the identifiers in an unexplained failure's text,
/// known bugs of the version where the failing call matches them, every failure still
/// unexplained, and what only the failing processes have when no clear cause covers them.
pub fn diagnose_story(job: &JobModel, story: &Story, options: &Options) -> Vec<Finding> {
    // The rules read the job and the story and nothing else, so they run side by side (each
    // walks every process: at 16k ranks, one after another they were seconds of one core);
    // their findings are gathered in the table's order, as before.
    let per_rule: Vec<Vec<Finding>> = RULES
        .par_iter()
        .map(|(_, f)| f(job, story, options))
        .collect();
    let mut findings: Vec<Finding> = per_rule.into_iter().flatten().collect();
    let xref = cross_reference::check(job, &findings);
    findings.extend(xref);
    let known = install::known_bug::check(job, story, options, &findings);
    findings.extend(known);
    findings.extend(unknown::check(job, &findings));
    let differential = config::differential::check(job, &findings);
    findings.extend(differential);
    // The violated invariants come last: they read no other finding, and no check above reads
    // theirs (a message's meaning stays readable beside the invariant that explains it).
    findings.extend(crate::invariants::findings(job, story));
    let mut findings = merge_alike(job, findings);
    // What every identifier in an explained failure's text is in this job; which transport a
    // transport hang was in.
    findings.par_iter_mut().for_each(|f| {
        cross_reference::annotate(job, f);
        if f.covers().contains(&crate::story::NodeClass::StuckInside) {
            hang::transport_hang::annotate(job, f);
        }
    });
    verdict::decide(job, story, &mut findings);
    // A failed job always has a primary: when no finding explains a root of the story, one
    // that says what failed first and which fact would decide its cause.
    if let Some(f) = verdict::cause_not_recorded(job, story, &findings) {
        findings.push(f);
        verdict::decide(job, story, &mut findings);
    }
    // A violated invariant that explains none of the job's failures is no finding.
    findings.retain(|f| {
        f.invariant_scope.is_none() || f.severity == Severity::Primary || !f.accounts.is_empty()
    });
    findings
}

/// One finding per fact: findings alike in id, title and remedy (the same conclusion reached
/// for several ranks) become one, with every rank, its evidence and what it explains.
fn merge_alike(job: &JobModel, findings: Vec<Finding>) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::with_capacity(findings.len());
    let mut index: std::collections::HashMap<(String, String, String), usize> =
        std::collections::HashMap::new();
    for f in findings {
        let key = (f.id.clone(), f.title.clone(), f.remedy.clone());
        match index.get(&key) {
            Some(&i) => out[i].absorb(job, f),
            None => {
                index.insert(key, out.len());
                out.push(f);
            }
        }
    }
    out
}

/// What a finding accounts for, as sets, for asking about many failures of one finding (a
/// report names each finding's share of every rank's first failure).
pub struct FailureCover<'a> {
    finding: &'a Finding,
    accounts: HashSet<(usize, crate::model::FailureWhat)>,
    explains: HashSet<(usize, usize)>,
}

impl<'a> FailureCover<'a> {
    pub fn of(finding: &'a Finding) -> Self {
        FailureCover {
            finding,
            accounts: finding.accounts.iter().copied().collect(),
            explains: finding.explains.iter().copied().collect(),
        }
    }

    /// Whether the finding accounts for failure `e`: it explains that call, or (a death or
    /// signal, which is no call) it is about that process.
    pub fn explains(&self, e: &crate::model::JobFailure) -> bool {
        if self.accounts.contains(&(e.process, e.what)) {
            return true;
        }
        match e.what {
            crate::model::FailureWhat::Call(i) | crate::model::FailureWhat::AsyncError(i) => {
                self.explains.contains(&(e.process, i))
            }
            _ => self.finding.process_ids.contains(&e.process),
        }
    }
}

/// The JSON contract check the CLI's integration tests use (`tests/support/schema.rs`).
#[cfg(test)]
#[path = "../../../tests/support/schema.rs"]
#[allow(dead_code)]
pub mod schema_support;

#[cfg(test)]
pub mod testutil {
    use super::*;
    use crate::load::{find_dumps, load_files};
    use ncclshim_fixtures::synth::Scenario;

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
        let report =
            crate::report::Report::build(&job, &Story::build(&job), findings.clone(), Vec::new());
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
