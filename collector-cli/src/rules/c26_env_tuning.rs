//! C26: NCCL tuning variables (protocol, algorithm, buffer and chunk sizes, channels, threads)
//! set differently across ranks — typically set on the launching node only — make peers
//! disagree about message sizes: "message truncated" (Socket) or "collective mismatch error" (IB).

use super::{text_has, who, Confidence, Finding, Severity};
use crate::model::JobModel;
use std::collections::{BTreeMap, BTreeSet};

/// Variables that must be identical on every rank.
pub const TUNING: &[&str] = &[
    "NCCL_PROTO",
    "NCCL_ALGO",
    "NCCL_BUFFSIZE",
    "NCCL_LL_BUFFSIZE",
    "NCCL_LL128_BUFFSIZE",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_CTAS",
    "NCCL_MAX_CTAS",
    "NCCL_NTHREADS",
    "NCCL_P2P_NET_CHUNKSIZE",
    "NCCL_P2P_NVL_CHUNKSIZE",
    "NCCL_P2P_PCI_CHUNKSIZE",
    "NCCL_CROSS_NIC",
];

const TEXTS: &[&str] = &["message truncated", "collective mismatch error"];

/// For each key, value → processes (None = unset), over processes that recorded an environment.
pub fn differing(
    job: &JobModel,
    keys: &[&str],
) -> BTreeMap<String, BTreeMap<Option<String>, Vec<usize>>> {
    let with_env: Vec<usize> = (0..job.processes.len())
        .filter(|&p| job.processes[p].env.is_some())
        .collect();
    let mut out = BTreeMap::new();
    for k in keys {
        let mut vals: BTreeMap<Option<String>, Vec<usize>> = BTreeMap::new();
        for &p in &with_env {
            vals.entry(job.processes[p].env_var(k).map(str::to_owned))
                .or_default()
                .push(p);
        }
        if vals.len() > 1 {
            out.insert((*k).to_owned(), vals);
        }
    }
    out
}

pub fn describe_values(
    job: &JobModel,
    key: &str,
    vals: &BTreeMap<Option<String>, Vec<usize>>,
) -> String {
    let parts: Vec<String> = vals
        .iter()
        .map(|(v, ps)| {
            let v = v
                .as_deref()
                .map(|v| format!("{key}={v}"))
                .unwrap_or_else(|| format!("{key} unset"));
            format!("{v} on {}", super::name_processes(job, ps))
        })
        .collect();
    parts.join("; ")
}

pub fn check(job: &JobModel) -> Vec<Finding> {
    let diffs = differing(job, TUNING);
    if diffs.is_empty() {
        return Vec::new();
    }
    let mut f = Finding::new(
        "nccl-tuning-env-differs",
        Some("C26"),
        "NCCL tuning variables differ across ranks",
        Severity::Contributing,
        Confidence::Medium,
    )
    .remedy(
        "Give every rank one NCCL environment (mpirun -x, srun --export, the launcher's env config) \
         and remove debugging knobs that were set on one node only.",
    );
    let mut involved = BTreeSet::new();
    for (k, vals) in &diffs {
        f.evidence(describe_values(job, k, vals));
        involved.extend(vals.values().flatten().copied());
    }
    for p in involved {
        f.involve(job, p);
    }
    for (p, pm) in job.processes.iter().enumerate() {
        for (i, c) in pm.calls.iter().enumerate() {
            if c.reports_error() && text_has(c, TEXTS) {
                f.explain(p, i);
                f.evidence(format!("{}: {}", who(job, p), c.describe()));
                f.severity = Severity::Primary;
                f.confidence = Confidence::High;
            }
        }
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_dump::CallId;

    #[test]
    fn proto_set_on_one_node_only_with_truncation() {
        let (_, fs) = analyze(&["a", "b"], |s| {
            s.snapshot_all(22005);
            s.ranks[0].env(&[("NCCL_PROTO", "Simple"), ("RANK", "0")]);
            s.ranks[1].env(&[("RANK", "1")]);
            let comms = s.init_world(22005);
            s.ranks[1].coll(CallId::NcclAllReduce, comms[1], 0, 1 << 20, 7, 0, 0, 5,
                Some("NET/Socket : peer 10.0.0.1<4312> message truncated : receiving 696320 bytes instead of 32768."));
        });
        let f = find(&fs, "nccl-tuning-env-differs").expect("C26");
        assert_eq!(f.severity, Severity::Primary);
        assert!(
            f.evidence[0].contains("NCCL_PROTO unset on rank 1; NCCL_PROTO=Simple on rank 0"),
            "{:?}",
            f.evidence
        );
    }
}
