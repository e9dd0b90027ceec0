//! Catalog C05: GPUDirect RDMA silently off. NCCL before 2.23.4 looks for peermem only under
//! `/sys/kernel/mm/memory_peers/...`, which kernels ≥ 6.4 / new OFED no longer create; with
//! `nvidia_peermem` loaded it still decides GDR is unsupported and stages through host memory.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use crate::names::nccl_version_string;

/// The known bug (knowledge/nccl-versions.toml) whose fixed-in release also checks
/// `/sys/module/nvidia_peermem/version`.
pub const BUG: &str = "peermem-kernel-6.6";

/// First NCCL release that also checks `/sys/module/nvidia_peermem/version`.
pub fn fixed_in() -> u64 {
    crate::knowledge::bugs::fixed_in_code(BUG)
}

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut f = Finding::new(&registry::GDR_PEERMEM_UNDETECTED,
        "GPUDirect RDMA is disabled: this NCCL does not detect the loaded nvidia_peermem module",
        Confidence::High,
    )
    .remedy(
        "Upgrade NCCL to 2.23.4 or newer; or use DMA-BUF (NCCL_DMABUF_ENABLE=1, kernel ≥ 5.12 and a \
         supporting driver); keep nvidia_peermem loaded.",
    );
    f.fixed_in = Some(nccl_version_string(fixed_in()));
    for (p, pm) in job.processes.iter().enumerate() {
        let (Some(h), Some(v)) = (pm.host_facts.as_ref(), pm.nccl_version) else {
            continue;
        };
        let module = h.peermem_exists("/sys/module/nvidia_peermem/version");
        let legacy = h.peermem_exists("memory_peers/nv_mem/version");
        let has_ib = h.libibverbs_dlopen == Some(true) || !h.infiniband.is_empty();
        if module == Some(true) && legacy == Some(false) && v < fixed_in() && has_ib {
            f.involve(job, p);
            f.fact(
                Evidence::new(
                    EvidenceKind::Host,
                    format!(
                        "NCCL {}; /sys/module/nvidia_peermem/version exists but /sys/kernel/mm/memory_peers/nv_mem/version does not",
                        nccl_version_string(v)
                    ),
                )
                .value("nccl_version", nccl_version_string(v))
                .value("nvidia_peermem_module", true)
                .value("nv_mem_legacy_file", false)
                .of(job, p),
            );
            if let Some(l) = pm.env_var("NCCL_NET_GDR_LEVEL") {
                f.fact(
                    Evidence::new(
                        EvidenceKind::Env,
                        format!("NCCL_NET_GDR_LEVEL={l} has no effect while GDR is undetected"),
                    )
                    .value("name", "NCCL_NET_GDR_LEVEL")
                    .value("value", l)
                    .of(job, p),
                );
            }
        }
    }
    if f.process_ids.is_empty() {
        return Vec::new();
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    use crate::finding::Severity;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::host_facts_json;
    use serde_json::json;

    fn run(version: u64) -> Vec<super::Finding> {
        analyze(&["ib-node"], move |s| {
            s.snapshot_all(version as i32);
            let r = &mut s.ranks[0];
            let mut h = host_facts_json("ib-node");
            h["peermem"] = json!([
                {"path": "/sys/kernel/mm/memory_peers/nv_mem/version", "exists": false, "content": null},
                {"path": "/sys/module/nvidia_peermem/version", "exists": true, "content": "555.42.02"}
            ]);
            r.host_facts(&h);
            r.get_version(version);
            r.clean_exit();
        })
        .1
    }

    #[test]
    fn old_nccl_with_new_peermem_layout() {
        let fs = run(21904);
        let f = find(&fs, registry::GDR_PEERMEM_UNDETECTED.id()).expect("C05");
        assert_eq!(f.fixed_in.as_deref(), Some("2.23.4"));
        assert_eq!(f.severity, Severity::Primary);
    }

    #[test]
    fn fixed_nccl_is_fine() {
        assert!(find(&run(22304), registry::GDR_PEERMEM_UNDETECTED.id()).is_none());
    }
}
