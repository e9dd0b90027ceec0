//! Catalog cases recognised by NCCL's or CUDA's own words alone: the error text (or CUresult)
//! is specific enough that no cross-rank evidence is needed. One table row per case; the rule
//! quotes the matching call and adds the environment values the case depends on.

use super::{text_has, who, Confidence, Finding, Severity};
use crate::model::JobModel;

/// One recognisable signature.
pub struct Signature {
    pub catalog: &'static str,
    pub id: &'static str,
    pub title: &'static str,
    /// Any of these (case-insensitive) in NCCL's error text.
    pub texts: &'static [&'static str],
    /// Or a driver call returning one of these CUresults.
    pub cu_results: &'static [i32],
    /// Environment variables worth quoting as evidence.
    pub env: &'static [&'static str],
    pub remedy: &'static str,
    pub confidence: Confidence,
}

pub const SIGNATURES: &[Signature] = &[
    Signature {
        catalog: "C15",
        id: "fabric-manager-not-running",
        title: "CUDA is not initialised: Fabric Manager not running on an NVSwitch system",
        texts: &["system not yet initialized"],
        cu_results: &[802],
        env: &[],
        remedy: "Install nvidia-fabricmanager matching the driver, `systemctl enable --now nvidia-fabricmanager`, reboot if needed.",
        confidence: Confidence::High,
    },
    Signature {
        catalog: "C17",
        id: "nvls-multicast-bind-failed",
        title: "NVLS multicast setup refused by the Fabric Manager / NVSwitch state",
        texts: &["cannot be performed in the present state", "Failed to bind NVLink SHARP"],
        cu_results: &[401],
        env: &["NCCL_NVLS_ENABLE"],
        remedy: "Check `nvidia-smi -q` fabric state, restart the Fabric Manager or power-cycle the node; workaround NCCL_NVLS_ENABLE=0.",
        confidence: Confidence::Medium,
    },
    Signature {
        catalog: "C21",
        id: "illegal-memory-access",
        title: "A CUDA kernel made an illegal memory access (sticky error surfacing through NCCL)",
        texts: &["illegal memory access"],
        cu_results: &[700],
        env: &["CUDA_LAUNCH_BLOCKING"],
        remedy: "Rerun the failing rank with CUDA_LAUNCH_BLOCKING=1 or under compute-sanitizer to find the kernel; NCCL only reports the sticky error.",
        confidence: Confidence::Medium,
    },
    Signature {
        catalog: "C24",
        id: "init-during-graph-capture",
        title: "Communicator created while a CUDA graph was being captured",
        texts: &["operation not permitted when stream is capturing"],
        cu_results: &[900],
        env: &[],
        remedy: "Create the communicator eagerly before any capture (init_process_group(..., device_id=...)) and run a warm-up collective first.",
        confidence: Confidence::Medium,
    },
    Signature {
        catalog: "C29",
        id: "shm-removed-by-systemd",
        title: "NCCL's shared-memory file disappeared (systemd RemoveIPC)",
        texts: &["unlink shared memory"],
        cu_results: &[],
        env: &[],
        remedy: "Set RemoveIPC=no in /etc/systemd/logind.conf and restart systemd-logind (or run jobs as a system user).",
        confidence: Confidence::Medium,
    },
    Signature {
        catalog: "C32",
        id: "cumem-host-peer-unsupported",
        title: "cuMem host shared memory needs peer access the GPUs do not support",
        texts: &["peer access is not supported between these two devices"],
        cu_results: &[217],
        env: &["NCCL_CUMEM_HOST_ENABLE"],
        remedy: "Set NCCL_CUMEM_HOST_ENABLE=0 (SHM falls back to /dev/shm), or use an NCCL/driver with the fix.",
        confidence: Confidence::Medium,
    },
    Signature {
        catalog: "C33",
        id: "malformed-topology-xml",
        title: "The topology XML NCCL was given is missing mandatory attributes",
        texts: &["of node cpu not found", "of node nic not found", "of node pci not found", "of node gpu not found"],
        cu_results: &[],
        env: &["NCCL_TOPO_FILE"],
        remedy: "Fix the XML (or unset NCCL_TOPO_FILE; NCCL_TOPO_DUMP_FILE writes a valid one to start from).",
        confidence: Confidence::High,
    },
    Signature {
        catalog: "C11",
        id: "ibv-create-qp-failed",
        title: "Creating an InfiniBand queue pair failed (locked-memory limit)",
        texts: &["Call to ibv_create_qp failed"],
        cu_results: &[],
        env: &["NCCL_IB_DISABLE"],
        remedy: "Raise the locked-memory limit (docker --ulimit memlock=-1, limits.conf, Slurm PropagateResourceLimits); workaround NCCL_IB_DISABLE=1.",
        confidence: Confidence::Medium,
    },
];

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut out = Vec::new();
    for sig in SIGNATURES {
        let mut f = Finding::new(
            sig.id,
            Some(sig.catalog),
            sig.title,
            Severity::Primary,
            sig.confidence,
        )
        .remedy(sig.remedy);
        for (p, pm) in job.processes.iter().enumerate() {
            for (i, c) in pm.calls.iter().enumerate() {
                let hit = c.reports_error()
                    && (text_has(c, sig.texts) || (c.is_cuda && sig.cu_results.contains(&c.rc)));
                if !hit {
                    continue;
                }
                f.involve(job, p);
                f.explain(p, i);
                f.evidence(format!("{}: {}", who(job, p), c.describe()));
                for k in sig.env {
                    match pm.env_var(k) {
                        Some(v) => f.evidence(format!("{}: {k}={v}", who(job, p))),
                        None => f.evidence(format!("{}: {k} unset", who(job, p))),
                    }
                }
                if sig.catalog == "C11" {
                    if let Some(h) = &pm.host_facts {
                        match (h.memlock_unlimited, h.memlock_soft_bytes) {
                            (Some(false), Some(b)) => {
                                f.evidence(format!("{}: RLIMIT_MEMLOCK {} KiB", pm.host, b >> 10))
                            }
                            (Some(true), _) => f.evidence(format!(
                                "{}: RLIMIT_MEMLOCK unlimited (the limit is not the cause)",
                                pm.host
                            )),
                            _ => {}
                        }
                    }
                }
            }
        }
        if !f.process_ids.is_empty() {
            out.push(f);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testutil::{analyze, find};
    use crate::synth::WORLD_UID;
    use ncclshim_dump::CallId;

    #[test]
    fn every_signature_matches_its_own_text() {
        for sig in SIGNATURES {
            let text = sig.texts[0].to_owned();
            let (_, fs) = analyze(&["n0"], move |s| {
                s.snapshot_all(22703);
                s.ranks[0].init_rank(
                    1,
                    0,
                    WORLD_UID,
                    0,
                    1,
                    Some(&format!("NCCL WARN something: {text}")),
                    22703,
                );
                s.ranks[0].clean_exit();
            });
            let f = find(&fs, sig.id).unwrap_or_else(|| panic!("{} not found", sig.catalog));
            assert_eq!(f.catalog, Some(sig.catalog));
            assert_eq!(f.explains.len(), 1);
            assert!(find(&fs, "unexplained-error").is_none());
        }
    }

    #[test]
    fn cuda_result_alone_matches() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(22703);
            s.ranks[0].raw_call(CallId::CuMulticastAddDevice, 0, &[1, 0, 1], 401, None);
            s.ranks[0].clean_exit();
        });
        let f = find(&fs, "nvls-multicast-bind-failed").expect("C17");
        assert!(f
            .evidence
            .iter()
            .any(|e| e.contains("CUDA_ERROR_ILLEGAL_STATE")));
        assert!(f
            .evidence
            .iter()
            .any(|e| e.contains("NCCL_NVLS_ENABLE unset")));
    }

    #[test]
    fn unrelated_text_does_not_match() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(22703);
            s.ranks[0].init_rank(
                1,
                0,
                WORLD_UID,
                0,
                3,
                Some("something else entirely"),
                22703,
            );
            s.ranks[0].clean_exit();
        });
        assert!(SIGNATURES.iter().all(|sig| find(&fs, sig.id).is_none()));
    }
}
