//! Differential analysis: what the failing processes have that the healthy ones do not.
//!
//! When some ranks fail and others run fine, the cause is usually something only the failing
//! ones have: a host, an NCCL version or library path, an environment value, a limit, a
//! missing device, a GPU model. Each recorded fact of every process becomes a feature; a feature
//! value held by every failing process and by no healthy one separates them perfectly and is
//! named. This is how an expert reads a job they have never seen, so it runs when no rule
//! explains the failure with high confidence, as a low-confidence lead, not a verdict.

use crate::finding::registry;
use crate::finding::registry::Role;
use crate::finding::words::name_processes;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::{FailureWhat, JobFailure, JobModel, ProcessModel};
use ncclshim_format::NcclResult;
use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// Variables that differ per rank by design: they separate nothing.
const PER_RANK: &[&str] = &[
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_TASK_PID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK",
    "PMIX_RANK",
    "CUDA_VISIBLE_DEVICES",
    "TORCHELASTIC_RESTART_COUNT",
];

/// At most this many separating facts are named (the strongest first).
const MAX_FACTS: usize = 5;

/// The features of one process: (feature, value) pairs.
fn features(pm: &ProcessModel) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    out.insert(("host".to_owned(), pm.host.clone()));
    if let Some(v) = pm.nccl_version_text() {
        out.insert(("NCCL version".to_owned(), v));
    }
    if let Some(l) = &pm.libs {
        for p in &l.nccl_paths {
            out.insert(("libnccl".to_owned(), p.clone()));
        }
        if let Some(d) = l.cuda_driver {
            out.insert(("CUDA driver".to_owned(), d.to_string()));
        }
        for p in &l.plugins {
            out.insert(("NCCL plugin".to_owned(), p.clone()));
        }
    }
    if let Some(env) = &pm.env {
        for (k, v) in env {
            let relevant = k.starts_with("NCCL_") || k.starts_with("CUDA_") || k.starts_with("FI_");
            if relevant && !PER_RANK.contains(&k.as_str()) {
                out.insert((format!("env {k}"), v.clone()));
            }
        }
    }
    if let Some(h) = &pm.host_facts {
        if let Some(c) = &h.container_runtime {
            out.insert(("container".to_owned(), c.clone()));
        }
        if let Some(b) = h.dev_shm_bytes {
            out.insert(("/dev/shm bytes".to_owned(), b.to_string()));
        }
        if let Some(u) = h.memlock_unlimited {
            out.insert(("memlock unlimited".to_owned(), u.to_string()));
        }
        if let Some(v) = h.libibverbs_dlopen {
            out.insert(("libibverbs loadable".to_owned(), v.to_string()));
        }
        if let Some(v) = h.dev_infiniband {
            out.insert(("/dev/infiniband present".to_owned(), v.to_string()));
        }
        if let Some(d) = &h.nvidia_driver {
            out.insert((
                "NVIDIA driver".to_owned(),
                d.clone().unwrap_or_else(|| "none".into()),
            ));
        }
    }
    if let Some(g) = pm.gpu().and_then(|g| g.name.clone()) {
        out.insert(("GPU".to_owned(), g));
    }
    out
}

/// A failure by the process itself: an error, an abort or a death that is not a peer's error
/// echoed (ncclRemoteError, 6) or a stop request at the end of the job.
fn by_itself(job: &JobModel, f: &JobFailure) -> bool {
    let p = f.process;
    match f.what {
        FailureWhat::Call(i) => !job.processes[p].calls[i].returned(NcclResult::RemoteError),
        FailureWhat::AsyncError(i) => {
            job.processes[p].calls[i].async_result() != Some(NcclResult::RemoteError)
        }
        FailureWhat::Signal(_) | FailureWhat::Died => true,
    }
}

pub fn check(job: &JobModel, found: &[Finding]) -> Vec<Finding> {
    let clear = found
        .iter()
        .any(|f| f.role() == Role::Cause && f.specific() && f.confidence == Confidence::High);
    if clear {
        return Vec::new();
    }
    // Per process: whether it failed at all, and by itself (one pass over the failures; a
    // scan of all of them per process was ranks x ranks).
    let mut failed = vec![false; job.processes.len()];
    let mut failed_by_itself = vec![false; job.processes.len()];
    for f in &job.failures {
        failed[f.process] = true;
        failed_by_itself[f.process] |= by_itself(job, f);
    }
    let failing: Vec<usize> = (0..job.processes.len())
        .filter(|&p| failed_by_itself[p])
        .collect();
    let healthy: Vec<usize> = (0..job.processes.len()).filter(|&p| !failed[p]).collect();
    if failing.is_empty() || healthy.is_empty() {
        return Vec::new();
    }
    let feats: Vec<BTreeSet<(String, String)>> = job.processes.par_iter().map(features).collect();
    // Values every failing process holds.
    let mut common = feats[failing[0]].clone();
    for &p in &failing[1..] {
        common = common.intersection(&feats[p]).cloned().collect();
    }
    // ... that no healthy process holds, where the healthy ones recorded that feature at all
    // (a feature nobody healthy recorded separates nothing we know).
    let mut separators: Vec<(String, String, BTreeMap<String, usize>)> = Vec::new();
    for (name, value) in common {
        if healthy
            .iter()
            .any(|&q| feats[q].contains(&(name.clone(), value.clone())))
        {
            continue;
        }
        let mut theirs: BTreeMap<String, usize> = BTreeMap::new();
        for &q in &healthy {
            for (n, v) in &feats[q] {
                if *n == name {
                    *theirs.entry(v.clone()).or_default() += 1;
                }
            }
        }
        if theirs.is_empty() && !name.starts_with("env ") {
            continue;
        }
        separators.push((name, value, theirs));
    }
    if separators.is_empty() {
        return Vec::new();
    }
    let mut f = Finding::new(
        &registry::FAILING_RANKS_DIFFER,
        format!(
            "What only the failing processes have ({} of {})",
            name_processes(job, &failing),
            job.processes.len()
        ),
        Confidence::Low,
    )
    .remedy(
        "Compare the failing processes with the healthy ones on the facts below: each holds on \
         every failing process and on no healthy one, so the cause most likely lies there.",
    );
    for &p in &failing {
        f.involve(job, p);
    }
    for (name, value, theirs) in separators.into_iter().take(MAX_FACTS) {
        let others: Vec<String> = if theirs.is_empty() {
            vec!["unset".to_owned()]
        } else {
            theirs.keys().cloned().collect()
        };
        f.fact(
            Evidence::new(
                EvidenceKind::Inference,
                format!(
                    "{name} = {value} on every failing process; the healthy ones: {}",
                    others.join(", ")
                ),
            )
            .value("feature", &name)
            .value("failing_value", &value)
            .value("healthy_values", &others)
            .of_all(job, &failing),
        );
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::WORLD_UID;

    /// Four ranks on two hosts; the two on host b fail with a text no rule knows and have
    /// NCCL_IB_HCA set; the others finish cleanly.
    #[test]
    fn the_failing_ranks_host_and_variable_are_named() {
        let (_, fs) = analyze(&["a", "a", "b", "b"], |s| {
            s.snapshot_all(22105);
            for r in 2..4 {
                s.ranks[r].env(&[("NCCL_IB_HCA", "mlx5_3")]);
            }
            for r in 0..4 {
                let (rc, text) = if r >= 2 {
                    (3, Some("something nobody has seen before"))
                } else {
                    (0, None)
                };
                s.ranks[r].init_rank(4, r as u64, WORLD_UID, 0, rc, text, 22105);
                if r < 2 {
                    s.ranks[r].clean_exit();
                }
            }
        });
        let f = find(&fs, registry::FAILING_RANKS_DIFFER.id()).unwrap_or_else(|| panic!("{fs:#?}"));
        let texts: Vec<&str> = f.evidence.iter().map(|e| e.text.as_str()).collect();
        assert!(texts.iter().any(|t| t.contains("host = b")), "{texts:?}");
        assert!(
            texts
                .iter()
                .any(|t| t.contains("env NCCL_IB_HCA = mlx5_3") && t.contains("unset")),
            "{texts:?}"
        );
    }
}
