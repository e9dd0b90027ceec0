//! What an invariant is: its declaration ([`Invariant`], by [`Family`]) and a violation of it
//! ([`Violation`], reaching a [`Scope`]), with the launcher facts the checks quote. Below the
//! checks (one file per family) and the table of every invariant (`super::INVARIANTS`).

use crate::finding::{Confidence, Evidence};
use crate::model::JobModel;
use crate::story::Story;
use serde::Serialize;

/// The families of invariants (the list; `docs/internals.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    Identity,
    Lifecycle,
    Consistency,
    Endpoints,
    Devices,
    Resources,
    Plugins,
}

pub use crate::finding::reach::Scope;

/// One declared invariant.
pub struct Invariant {
    /// Stable id; the finding is `invariant-<id>`.
    pub id: &'static str,
    pub family: Family,
    /// What a well-formed job satisfies, in one sentence.
    pub statement: &'static str,
    /// The recorded facts it reads.
    pub reads: &'static [&'static str],
    /// What to change when it is broken (a violation may word it for its facts).
    pub remedy: &'static str,
    /// Where the rule comes from.
    pub source: &'static str,
    /// A failure in its own right even when nothing else failed (a silent fallback); otherwise
    /// a violation matters only for the failures it explains.
    pub standalone: bool,
    pub check: fn(&JobModel, &Story) -> Vec<Violation>,
}

/// One broken invariant, with the facts that show it.
pub struct Violation {
    pub invariant: &'static Invariant,
    /// What is wrong, in the diagnosis' own words (never NCCL's text alone).
    pub title: String,
    /// The processes that broke it (the finding's ranks).
    pub processes: Vec<usize>,
    pub scope: Scope,
    /// The processes whose failures it may explain (by `scope`; the violating ones included).
    pub reach: Vec<usize>,
    pub facts: Vec<Evidence>,
    /// The remedy worded for these facts; the declaration's when None.
    pub remedy: Option<String>,
    pub confidence: Confidence,
    /// Failures before this instant are not its doing (a misuse after a failure explains what
    /// followed it, not the failure itself).
    pub since: u64,
    /// The failed calls (process, call index) it explains, when not every failure of the
    /// processes it reaches (a latent limit explains only the failures it can cause).
    pub calls: Option<Vec<(usize, usize)>>,
}

impl Violation {
    pub fn new(invariant: &'static Invariant, title: String, processes: Vec<usize>) -> Self {
        Self {
            invariant,
            title,
            reach: processes.clone(),
            processes,
            scope: Scope::Process,
            facts: Vec::new(),
            remedy: None,
            confidence: Confidence::High,
            since: 0,
            calls: None,
        }
    }

    /// Explains exactly these failed calls (process, call index).
    pub fn explaining(mut self, calls: Vec<(usize, usize)>) -> Self {
        self.calls = Some(calls);
        self
    }

    /// Explains only failures from `t` on.
    pub fn since(mut self, t: u64) -> Self {
        self.since = t;
        self
    }

    /// Widens what it may explain to `reach` (a communicator's members, a host's processes).
    pub fn reaching(mut self, scope: Scope, reach: impl IntoIterator<Item = usize>) -> Self {
        self.scope = scope;
        let mut all = self.processes.clone();
        all.extend(reach);
        all.sort_unstable();
        all.dedup();
        self.reach = all;
        self
    }

    pub fn fact(mut self, e: Evidence) -> Self {
        self.facts.push(e);
        self
    }

    pub fn remedy(mut self, r: impl Into<String>) -> Self {
        self.remedy = Some(r.into());
        self
    }

    pub fn confidence(mut self, c: Confidence) -> Self {
        self.confidence = c;
        self
    }
}

/// The launcher's variables a process carries (`knowledge/launchers.toml`: torchrun, Open MPI,
/// Slurm, PMI...), as (variable, value), for the evidence of identity and layout violations.
pub fn launcher_facts(job: &JobModel, p: usize) -> Vec<(String, String)> {
    use crate::knowledge::launchers::{lookup, Role};
    let Some(env) = job.processes[p].env.as_ref() else {
        return Vec::new();
    };
    [
        Role::WorldSize,
        Role::GlobalRank,
        Role::NodeRank,
        Role::LocalRank,
        Role::LocalWorldSize,
        Role::NodeCount,
        Role::MasterAddr,
    ]
    .into_iter()
    .filter_map(|r| lookup(env, r))
    .map(|v| (v.var.to_owned(), v.value.to_owned()))
    .collect()
}

/// A launcher role's numeric value as a process sees it, with the variable that says it.
pub fn launcher_number(
    job: &JobModel,
    p: usize,
    role: crate::knowledge::launchers::Role,
) -> Option<(String, u64)> {
    let env = job.processes[p].env.as_ref()?;
    let v = crate::knowledge::launchers::lookup(env, role)?;
    Some((v.var.to_owned(), v.number()?))
}
