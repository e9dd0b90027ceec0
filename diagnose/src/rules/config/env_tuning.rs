//! Catalog C26: NCCL tuning variables (protocol, algorithm, buffer and chunk sizes, channels, threads)
//! set differently across ranks — typically set on the launching node only — make peers
//! disagree about message sizes: "message truncated" (Socket) or "collective mismatch error" (IB).

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, Finding};
use crate::model::JobModel;
use crate::rules::text::text_is_case;
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
        // Borrowed values, owned only for a key that differs (an allocation per process and
        // key was most of this at 16,384 ranks, where nothing differs).
        let mut vals: BTreeMap<Option<&str>, Vec<usize>> = BTreeMap::new();
        for &p in &with_env {
            vals.entry(job.processes[p].env_var(k)).or_default().push(p);
        }
        if vals.len() > 1 {
            let owned = vals
                .into_iter()
                .map(|(v, ps)| (v.map(str::to_owned), ps))
                .collect();
            out.insert((*k).to_owned(), owned);
        }
    }
    out
}

/// One evidence item per value of `key` (unset included), each with the processes that had it.
pub fn values_evidence(
    job: &JobModel,
    key: &str,
    vals: &BTreeMap<Option<String>, Vec<usize>>,
) -> Vec<Evidence> {
    vals.iter()
        .map(|(v, ps)| Evidence::env(key, v.as_deref(), "").of_all(job, ps))
        .collect()
}

pub fn check(job: &JobModel) -> Vec<Finding> {
    let diffs = differing(job, TUNING);
    if diffs.is_empty() {
        return Vec::new();
    }
    let mut f = Finding::new(&registry::NCCL_TUNING_ENV_DIFFERS,
        "NCCL tuning variables differ across ranks",
        Confidence::Medium,
    )
    .remedy(
        "Give every rank one NCCL environment (mpirun -x, srun --export, the launcher's env config) \
         and remove debugging knobs that were set on one node only.",
    );
    let mut involved = BTreeSet::new();
    for (k, vals) in &diffs {
        values_evidence(job, k, vals)
            .into_iter()
            .for_each(|e| f.fact(e));
        involved.extend(vals.values().flatten().copied());
    }
    for p in involved {
        f.involve(job, p);
    }
    for (p, pm) in job.processes.iter().enumerate() {
        for (i, c) in pm.error_calls() {
            if text_is_case(c, "C26") {
                f.explain(p, i);
                f.fact(Evidence::call(c).of(job, p));
                f.confidence = Confidence::High;
            }
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
    fn proto_set_on_one_node_only_with_truncation() {
        let (_, fs) = analyze(&["a", "b"], |s| {
            s.snapshot_all(22005);
            s.ranks[0].env(&[("NCCL_PROTO", "Simple"), ("RANK", "0")]);
            s.ranks[1].env(&[("RANK", "1")]);
            let comms = s.init_world(22005);
            s.ranks[0].coll(
                CallId::NcclAllReduce,
                comms[0],
                0,
                1 << 20,
                7,
                0,
                0,
                0,
                None,
            );
            s.ranks[1].coll(CallId::NcclAllReduce, comms[1], 0, 1 << 20, 7, 0, 0, 5,
                Some("NET/Socket : peer 10.0.0.1<4312> message truncated : receiving 696320 bytes instead of 32768."));
        });
        let f = find(&fs, registry::NCCL_TUNING_ENV_DIFFERS.id()).expect("C26");
        let ids: Vec<(&str, Severity)> = fs.iter().map(|f| (f.id(), f.severity)).collect();
        assert_eq!(f.severity, Severity::Primary, "{ids:?}");
        // One item per value, each with the ranks that had it.
        let value_of = |rank: u32| {
            f.evidence
                .iter()
                .find(|e| e.values["name"] == "NCCL_PROTO" && e.ranks == [rank])
                .map(|e| e.values["value"].clone())
        };
        assert_eq!(value_of(0), Some("Simple".into()), "{:?}", f.evidence);
        assert_eq!(
            value_of(1),
            Some(serde_json::Value::Null),
            "{:?}",
            f.evidence
        );
        assert!(f
            .evidence
            .iter()
            .any(|e| e.text == "rank 1 (b pid 10001): NCCL_PROTO unset"));
    }
}
