//! NCCL's contract as declared invariants: what every well-formed NCCL job satisfies, one
//! declaration per invariant ([`INVARIANTS`]), each with the facts it reads, the remedy when it
//! is broken and where the rule comes from (NCCL's documentation, headers or release notes; how
//! launchers and hosts are set up).
//!
//! A violated invariant is a candidate cause even when no knowledge entry knows the error text:
//! the diagnosis of a failure it has never seen starts from what the job did that NCCL does not
//! allow. Each check reads the job model and the story and returns [`Violation`]s; [`findings`]
//! turns them into findings (`invariant-<id>`) that explain the failures of the processes in the
//! violation's scope. The verdict ranks them after the specific rules (a named mechanism) and
//! before generic findings (a call NCCL rejected, ranks stuck inside NCCL), nearest scope first
//! (the failing process itself, then its communicator, its host, the job).
//!
//! The families, one module each:
//! - [`identity`]: uniqueIds, ranks and nranks against communicators, processes and the
//!   launcher's own variables;
//! - [`lifecycle`]: each communicator handle's life on each rank, in the order NCCL's API
//!   allows;
//! - [`consistency`]: what the ranks of one communicator must agree on (the paths NCCL's init
//!   chose through the driver);
//! - [`endpoints`]: every address in a recorded text belongs to this job; the route NCCL uses
//!   is unambiguous;
//! - [`devices`]: one physical GPU per rank unless sharing is declared;
//! - [`resources`]: limits against what the job's transports need;
//! - [`plugins`]: the plugins the job asked for are the ones NCCL loaded; the launcher's layout
//!   is what NCCL was told.

pub mod consistency;
pub mod contract;
pub mod devices;
pub mod endpoints;
pub mod identity;
pub mod lifecycle;
pub mod links;
pub mod plugins;
pub mod resources;

use crate::finding::{Evidence, Finding};
use crate::model::JobModel;
use crate::story::{NodeClass, Story};

pub use contract::{launcher_facts, launcher_number, Family, Invariant, Scope, Violation};

/// Every invariant, by family.
pub const INVARIANTS: &[&Invariant] = &[
    &identity::RANK_WITHIN_NRANKS,
    &identity::ONE_PROCESS_PER_RANK,
    &identity::UNIQUE_ID_SINGLE_USE,
    &lifecycle::NO_USE_AFTER_DESTROY,
    &lifecycle::NO_CALL_AFTER_FAILED_INIT,
    &consistency::DRIVER_PATHS_AGREE,
    &links::LINK_MTU_AGREES,
    &links::GID_INDEX_SELECTS_ALIKE,
    &endpoints::PEER_ADDRESS_IN_JOB,
    &endpoints::ROUTE_UNAMBIGUOUS,
    &devices::ONE_PHYSICAL_GPU_PER_RANK,
    &resources::MEMLOCK_FOR_RDMA,
    &resources::DEV_SHM_ROOM,
    &resources::DEV_SHM_WRITABLE,
    &plugins::REQUESTED_PLUGIN_LOADED,
    &plugins::LAUNCHER_LAYOUT_MATCHES,
];

/// Every violation in the job.
pub fn violations(job: &JobModel, story: &Story) -> Vec<Violation> {
    use rayon::prelude::*;
    INVARIANTS
        .par_iter()
        .map(|inv| (inv.check)(job, story))
        .collect::<Vec<_>>()
        .into_iter()
        .flatten()
        .collect()
}

/// The violations as findings: each explains the failures of the processes it reaches (their
/// failed calls; their hangs, departures and deaths through the story's nodes).
pub fn findings(job: &JobModel, story: &Story) -> Vec<Finding> {
    violations(job, story)
        .into_iter()
        .map(|v| to_finding(job, v))
        .collect()
}

fn to_finding(job: &JobModel, v: Violation) -> Finding {
    let inv = v.invariant;
    // A violation that names the calls it explains (a latent limit) claims no hang, departure
    // or signal besides them.
    let member = crate::finding::registry::INVARIANT
        .member(inv.id)
        .standalone(inv.standalone)
        .covering(if v.calls.is_some() {
            &[]
        } else {
            REACHED_NODES
        });
    let mut f = Finding::of_member(member, v.title, v.confidence);
    f.remedy = v.remedy.unwrap_or_else(|| inv.remedy.to_owned());
    f.invariant_scope = Some(v.scope);
    for &p in &v.processes {
        f.involve(job, p);
    }
    f.facts(v.facts);
    f.fact(
        Evidence::new(
            crate::finding::EvidenceKind::Inference,
            format!("NCCL's contract: {} ({})", inv.statement, inv.source),
        )
        .value("invariant", inv.id)
        .value("family", inv.family),
    );
    // What it may explain: the failed calls of every process it reaches; the story's other
    // nodes of those processes through `reach` (see `Finding::reach`).
    if let Some(calls) = &v.calls {
        f.explain_all(calls.iter().copied());
    }
    for &p in v.reach.iter().filter(|_| v.calls.is_none()) {
        let calls: Vec<usize> = job.processes[p]
            .error_calls()
            .filter(|(_, c)| c.fail_time() >= v.since)
            .map(|(i, _)| i)
            .collect();
        f.explain_all(calls.into_iter().map(|i| (p, i)));
    }
    f.reach = v.reach.into_iter().collect();
    f.reach_since = v.since;
    f
}

/// The story's nodes an invariant's finding explains on the processes it reaches, besides
/// their failed calls: their hangs, departures, deaths and signals (a mismatch or desync is the
/// mismatch rules' to explain).
const REACHED_NODES: &[NodeClass] = &[
    NodeClass::Signal,
    NodeClass::Vanished,
    NodeClass::LeftEarly,
    NodeClass::Behind,
    NodeClass::StuckInside,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_every_family_has_one() {
        let mut ids: Vec<&str> = INVARIANTS.iter().map(|i| i.id).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(n, ids.len());
        for fam in [
            Family::Identity,
            Family::Lifecycle,
            Family::Consistency,
            Family::Endpoints,
            Family::Devices,
            Family::Resources,
            Family::Plugins,
        ] {
            assert!(INVARIANTS.iter().any(|i| i.family == fam), "{fam:?}");
        }
        for i in INVARIANTS {
            assert!(!i.source.is_empty() && !i.remedy.is_empty() && !i.reads.is_empty());
        }
    }
}
