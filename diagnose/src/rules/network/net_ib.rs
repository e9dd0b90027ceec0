//! Catalog C01: `NCCL_NET` forces a network (usually IB) that cannot initialise (no libibverbs, no HCA),
//! so communicator init fails with ncclInvalidUsage. NCCL's WARN changed in 2.27: "network IB
//! not found" (2.15–2.26) became "Failed to initialize any NET plugin".

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use crate::rules::text::text_has;
use ncclshim_format::NcclResult;

const OLD_TEXT: &str = "network IB not found";
const NEW_TEXT: &str = "Failed to initialize any NET plugin";

/// The version fact: the release that reworded the WARN (knowledge/nccl-versions.toml).
const REWORDED: &str = "net-init-warn-reworded";

/// The WARN this NCCL version prints when the forced network is missing.
pub fn expected_text(nccl_version: Option<u64>) -> Option<&'static str> {
    let since = crate::knowledge::bugs::introduced_code(REWORDED);
    nccl_version.map(|v| if v >= since { NEW_TEXT } else { OLD_TEXT })
}

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut f = Finding::new(
        &registry::NCCL_NET_UNAVAILABLE,
        "NCCL_NET forces a network that cannot initialise on this host",
        Confidence::High,
    )
    .remedy(
        "Unset NCCL_NET (or set NCCL_NET=Socket) so NCCL falls back to a network that exists; if \
         InfiniBand is wanted, install rdma-core/libibverbs1 in the image and pass /dev/infiniband \
         into the container.",
    );
    let mut strong = false;
    for (p, pm) in job.processes.iter().enumerate() {
        let net = pm.env_var("NCCL_NET");
        let host = pm.host_facts.as_ref();
        let no_verbs = host.and_then(|h| h.libibverbs_dlopen) == Some(false);
        let no_hca =
            host.is_some_and(|h| h.infiniband.is_empty() && h.dev_infiniband == Some(false));
        for (i, c) in pm.failed_calls() {
            if !(c.is_init() || c.call == Some(ncclshim_format::CallId::NcclGroupEnd)) {
                continue;
            }
            let by_text = text_has(c, &[OLD_TEXT, NEW_TEXT]);
            let by_facts =
                c.returned(NcclResult::InvalidUsage) && net.is_some() && (no_verbs || no_hca);
            if !by_text && !by_facts {
                continue;
            }
            strong |= by_text && net.is_some();
            f.involve(job, p);
            f.explain(p, i);
            f.fact(Evidence::call(c).of(job, p));
            if let Some(n) = net {
                f.fact(Evidence::env("NCCL_NET", Some(n), "").of(job, p));
            }
            if no_verbs {
                f.fact(
                    Evidence::new(
                        EvidenceKind::Host,
                        "libibverbs.so.1 cannot be found by the loader",
                    )
                    .value("libibverbs_found", false)
                    .on_host(&pm.host),
                );
            }
            if no_hca {
                f.fact(
                    Evidence::new(
                        EvidenceKind::Host,
                        "no InfiniBand HCA (/sys/class/infiniband empty, no /dev/infiniband)",
                    )
                    .value("infiniband_devices", 0)
                    .on_host(&pm.host),
                );
            }
            if let (Some(exp), Some(v)) = (expected_text(pm.nccl_version), pm.nccl_version_text()) {
                if by_text && !text_has(c, &[exp]) {
                    f.fact(
                        Evidence::new(
                            EvidenceKind::Inference,
                            format!(
                                "NCCL {v} normally words this \"{exp}\"; the text recorded differs"
                            ),
                        )
                        .value("nccl_version", &v)
                        .value("expected_text", exp),
                    );
                }
            }
        }
    }
    if f.process_ids.is_empty() {
        return Vec::new();
    }
    if !strong {
        f.confidence = Confidence::Medium;
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::{host_facts_json, WORLD_UID};

    fn scenario(version: u64, text: &str) -> Vec<Finding> {
        let text = text.to_owned();
        analyze(&["gpu-a", "gpu-a"], move |s| {
            s.snapshot_all(version as i32);
            for r in &mut s.ranks {
                r.env(&[("NCCL_NET", "IB"), ("LOCAL_RANK", "0")]);
                let mut h = host_facts_json(&r.host);
                h["libibverbs_dlopen"] = false.into();
                h["infiniband"] = serde_json::json!([]);
                h["dev_infiniband"] = false.into();
                r.host_facts(&h);
                r.get_version(version);
                let rank = u64::from(r.rank);
                r.init_rank(2, rank, WORLD_UID, rank, 5, Some(&text), version);
                r.clean_exit();
            }
        })
        .1
    }

    #[test]
    fn old_and_new_wording_both_match() {
        let old = scenario(21605, "Error: network IB not found.");
        let f = find(&old, registry::NCCL_NET_UNAVAILABLE.id()).expect("C01 on 2.16");
        assert_eq!(f.ranks, vec![0, 1]);
        assert_eq!(f.confidence, Confidence::High);
        assert!(f.evidence.iter().any(|e| e.contains("NCCL_NET=IB")));
        let new = scenario(22703, "Failed to initialize any NET plugin");
        assert!(find(&new, registry::NCCL_NET_UNAVAILABLE.id()).is_some());
    }

    #[test]
    fn version_mismatched_wording_is_noted() {
        let f = scenario(22703, "Error: network IB not found.");
        let f = find(&f, registry::NCCL_NET_UNAVAILABLE.id()).unwrap();
        assert!(f.evidence.iter().any(|e| e.contains("normally words this")));
    }

    #[test]
    fn expected_text_by_version() {
        assert_eq!(expected_text(Some(22602)), Some(OLD_TEXT));
        // 2.27.3 is the first 2.27 release (knowledge: net-init-warn-reworded).
        assert_eq!(expected_text(Some(22703)), Some(NEW_TEXT));
        assert_eq!(expected_text(None), None);
    }
}
