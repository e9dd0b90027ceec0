//! NCCL environment differences across ranks other than the tuning variables C26 covers,
//! ignoring variables that legitimately differ per node or per rank (interface and HCA names,
//! debug file names, host ids).

use crate::finding::registry;
use crate::finding::{Confidence, Finding};
use crate::model::JobModel;
use crate::rules::config::env_tuning::{differing, values_evidence, TUNING};
use std::collections::BTreeSet;

/// NCCL variables whose value may differ per node or per rank without harm.
pub const PER_NODE: &[&str] = &[
    "NCCL_SOCKET_IFNAME",
    "NCCL_IB_HCA",
    "NCCL_HOSTID",
    "NCCL_DEBUG_FILE",
    "NCCL_TOPO_DUMP_FILE",
    "NCCL_GRAPH_DUMP_FILE",
    "NCCL_COMM_ID",
    "NCCL_LAUNCH_ORDER_IMPLICIT",
];

pub fn check(job: &JobModel) -> Vec<Finding> {
    let keys: BTreeSet<String> = job
        .processes
        .iter()
        .filter_map(|p| p.env.as_ref())
        .flat_map(|e| e.keys().cloned())
        .filter(|k| {
            k.starts_with("NCCL_")
                && !PER_NODE.contains(&k.as_str())
                && !TUNING.contains(&k.as_str())
        })
        .collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let diffs = differing(job, &keys);
    if diffs.is_empty() {
        return Vec::new();
    }
    let mut f = Finding::new(
        &registry::NCCL_ENV_DIFFERS,
        "NCCL environment variables differ across ranks",
        Confidence::Low,
    )
    .remedy(
        "Unless a difference is intended per node, launch every rank with one NCCL environment.",
    );
    let mut involved = BTreeSet::new();
    for (k, vals) in &diffs {
        values_evidence(job, k, vals)
            .into_iter()
            .for_each(|e| f.fact(e));
        // The minority holds the odd value out.
        if let Some((_, ps)) = vals.iter().min_by_key(|(_, ps)| ps.len()) {
            involved.extend(ps.iter().copied());
        }
    }
    for p in involved {
        f.involve(job, p);
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    use crate::rules::testutil::{analyze, find};

    #[test]
    fn per_node_variables_are_ignored_and_others_reported() {
        let (_, fs) = analyze(&["a", "b"], |s| {
            s.snapshot_all(22005);
            s.ranks[0].env(&[("NCCL_SOCKET_IFNAME", "eth0"), ("NCCL_IB_DISABLE", "1")]);
            s.ranks[1].env(&[("NCCL_SOCKET_IFNAME", "ens5")]);
            s.init_world(22005);
            for r in &s.ranks {
                r.clean_exit();
            }
        });
        let f = find(&fs, registry::NCCL_ENV_DIFFERS.id()).expect("env diff");
        // NCCL_IB_DISABLE: one item per value (set on rank 0, unset on rank 1).
        assert_eq!(f.evidence.len(), 2, "{:?}", f.evidence);
        assert!(f
            .evidence
            .iter()
            .all(|e| e.values["name"] == "NCCL_IB_DISABLE"));
        assert!(f
            .evidence
            .iter()
            .any(|e| e.ranks == [0] && e.contains("NCCL_IB_DISABLE=1")));
    }
}
