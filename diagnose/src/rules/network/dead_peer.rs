//! Catalog C20: a peer died and the survivors report ncclRemoteError / "Connection closed by remote
//! peer" / "Connection reset by peer". Those errors are secondary: the primary failure is on the
//! rank that died or failed first, which this rule names (its own finding comes from the rule
//! that explains it, or from `abrupt_end`).

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::knowledge::messages::Role;
use crate::model::JobModel;
use crate::rules::text::text_has_role;
use crate::story::{NodeKind, Story};
use ncclshim_format::NcclResult;
use rustc_hash::FxHashSet;

pub fn check(job: &JobModel, story: &Story) -> Vec<Finding> {
    // (process, call index) of every remote-looking error.
    let mut remote = Vec::new();
    for (p, pm) in job.processes.iter().enumerate() {
        // A failed call or an async error: both are error reports.
        for (i, c) in pm.error_calls() {
            let async_remote = c.async_result() == Some(NcclResult::RemoteError);
            if (c.failed()
                && !c.is_cuda
                && (c.returned(NcclResult::RemoteError) || text_has_role(c, Role::Consequence)))
                || async_remote
            {
                remote.push((p, i));
            }
        }
    }
    if remote.is_empty() {
        return Vec::new();
    }
    let mut f = Finding::new(&registry::PEER_FAILURE_SEEN_BY_SURVIVORS,
        "Remote errors on surviving ranks: a peer failed first",
        Confidence::High,
    )
    .remedy(
        "These errors are a consequence. Diagnose the rank that failed first (its own finding, its \
         stderr, dmesg / OOM-killer logs, NIC health).",
    );
    // Identical errors on many ranks are one item (a 1,024-rank job has 1,023 survivors):
    // `Finding::facts` joins equal facts.
    let mut calls = Vec::with_capacity(remote.len());
    for &(p, i) in &remote {
        f.involve(job, p);
        calls.push(Evidence::call(&job.processes[p].calls[i]).of(job, p));
    }
    f.explain_all(remote.iter().copied());
    f.facts(calls);
    // The culprit is what the story says explains the survivors' errors: the root each leads
    // to, the earliest of them that is not itself one of these errors (the story orders and
    // links every failure of the job: a rank that failed, crashed or vanished before them).
    let nodes = story.call_nodes();
    let remote_nodes: FxHashSet<usize> = remote
        .iter()
        .filter_map(|pi| nodes.get(pi).copied())
        .collect();
    let culprit = remote_nodes
        .iter()
        .map(|&j| story.root_of(j))
        .filter(|r| !remote_nodes.contains(r))
        .min_by_key(|&r| (story.nodes[r].t, r))
        .map(|r| {
            let n = &story.nodes[r];
            let what = match n.kind {
                NodeKind::Vanished => {
                    let inside = job.processes[n.process]
                        .in_flight_calls()
                        .last()
                        .map(|(_, c)| format!(", inside {}", c.name))
                        .unwrap_or_default();
                    format!("its dump ends without a clean exit{inside}")
                }
                _ => story.describe_node(job, r),
            };
            (n.process, what)
        });
    match culprit {
        Some((p, what)) => {
            f.fact(
                Evidence::new(EvidenceKind::Inference, format!("first failure: {what}"))
                    .value("first_failure", &what)
                    .of(job, p),
            );
        }
        None => {
            f.confidence = Confidence::Medium;
            // Say what the dumps show: ranks missing from a communicator, or every rank present
            // and none failing first (the cause is then outside what the recorders see).
            let missing = job.comms.values().any(|c| !c.missing().is_empty());
            let what = if missing {
                "the rank that failed first left no dump here (a rank of the communicator has no dump)"
            } else {
                "every rank left a dump and none failed before these errors: the peer's failure is \
                 outside what was recorded (the network path or NIC between them, or a rank that \
                 stopped without any mark)"
            };
            f.fact(
                Evidence::new(EvidenceKind::Inference, what)
                    .value("first_failure", Option::<String>::None)
                    .value("ranks_missing", missing),
            );
        }
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;

    use crate::finding::Severity;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_format::CallId;

    #[test]
    fn survivors_point_at_the_rank_that_died() {
        let (_, fs) = analyze(&["a", "b", "b"], |s| {
            s.snapshot_all(22105);
            let comms = s.init_world(22105);
            for (r, c) in s.ranks.iter().zip(&comms) {
                r.coll(CallId::NcclAllReduce, *c, 0, 1024, 7, 0, 0, 0, None);
            }
            // Rank 0 dies inside its next collective (no clean exit).
            s.ranks[0].coll_in_flight(CallId::NcclAllReduce, comms[0], 1, 1024, 7, 0, 0);
            s.step();
            for (r, c) in s.ranks.iter().zip(&comms).skip(1) {
                r.async_error(*c, 6, Some("socketProgressOpt: Call to recv from 10.0.0.1<33759> failed : Connection reset by peer"));
                r.clean_exit();
            }
        });
        let f = find(&fs, registry::PEER_FAILURE_SEEN_BY_SURVIVORS.id()).expect("C20");
        assert_eq!(f.severity, Severity::Contributing);
        assert_eq!(f.ranks, vec![1, 2]);
        assert!(
            f.evidence.iter().any(|e| e.ranks == [0]
                && e.text.starts_with("rank 0 (")
                && e.contains("first failure")),
            "{:?}",
            f.evidence
        );
        let dead =
            find(&fs, registry::RANK_ENDED_ABRUPTLY.id()).expect("primary for the dead rank");
        assert_eq!(dead.severity, Severity::Primary);
        assert_eq!(dead.ranks, vec![0]);
    }
}
