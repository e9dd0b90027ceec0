//! What the diagnosis finds, below every stage that makes or reads it: a [`Finding`] (made from
//! its declaration in [`registry`], with its [`evidence`]), its severity and confidence, what it
//! may reach in the failure graph ([`reach`]), and how the report names processes and ranks
//! ([`words`]). It imports only the model and the knowledge: the story, the rules, the
//! invariants, the Flight Recorder join and the report all import it, never the reverse.

pub mod evidence;
pub mod reach;
pub mod registry;
pub mod words;

pub use evidence::{Evidence, EvidenceKind, ProcessRef};
pub use reach::{NodeClass, Scope};

use crate::model::JobModel;
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
    /// The verdict's word ([`crate::rules::verdict::decide`]): the failures it explains echo a failure
    /// elsewhere (a peer closed the connection, teardown noise), or its role is a consequence.
    /// No rule sets it: a rule says that through the role it declares.
    pub consequence: bool,
    /// Its role in the job's story (declared in [`registry`], or from the knowledge entry
    /// that made it): what the verdict may make of it.
    #[serde(skip)]
    role: registry::Role,
    /// The failure-graph nodes it explains besides its calls (declared in [`registry`]).
    #[serde(skip)]
    covers: &'static [reach::NodeClass],
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
    pub invariant_scope: Option<reach::Scope>,
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
    /// ([`crate::rules::verdict::decide`]).
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
            &'static [reach::NodeClass],
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

    pub fn covers(&self) -> &'static [reach::NodeClass] {
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
    pub fn covers_node(&self, class: reach::NodeClass, p: usize, t: u64) -> bool {
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
