//! Catalog C04: containers on one machine that each see their GPU as device 0: NCCL treats the ranks as
//! P2P peers and `cuMemImportFromShareableHandle` fails with CUDA 101 'invalid device ordinal'
//! (a user-mode driver bug, R570), surfacing as ncclUnhandledCudaError.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use crate::names::cuda_version_string;
use ncclshim_format::{CallId, NcclResult};

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut f = Finding::new(&registry::CUMEM_IMPORT_INVALID_DEVICE,
        "CUDA IPC import of a peer GPU's memory failed with 'invalid device ordinal'",
        Confidence::Medium,
    )
    .remedy(
        "Upgrade the NVIDIA driver (the R570 user-mode driver fails to import a cuMem handle for a \
         GPU the container cannot enumerate). Workarounds: expose both GPUs to both containers, or \
         keep NCCL off the P2P/cuMem path (NCCL_P2P_DISABLE=1, or NCCL_CUMEM_ENABLE=0 for legacy IPC).",
    );
    let mut importers = Vec::new();
    for (p, pm) in job.processes.iter().enumerate() {
        let Some((i, c)) = pm.failed_calls().find(|(_, c)| {
            matches!(
                c.call,
                Some(CallId::CuMemImportFromShareableHandle | CallId::CuIpcOpenMemHandle)
            ) && c.rc == 101
        }) else {
            continue;
        };
        importers.push(p);
        f.involve(job, p);
        f.explain(p, i);
        f.fact(Evidence::call(c).of(job, p));
        // The NCCL call that failed because of it (ncclUnhandledCudaError) is the same failure.
        for (j, n) in pm.calls.iter().enumerate().skip(i + 1) {
            if n.failed() && n.returned(NcclResult::UnhandledCudaError) {
                f.explain(p, j);
                f.fact(Evidence::call_worded(n, "then ", "").of(job, p));
                break;
            }
        }
        f.fact(
            Evidence::env(
                "NCCL_CUMEM_ENABLE",
                pm.env_var("NCCL_CUMEM_ENABLE"),
                " (cuMem on by default)",
            )
            .of(job, p),
        );
        if let Some(d) = pm.libs.as_ref().and_then(|l| l.cuda_driver) {
            f.fact(
                Evidence::new(
                    EvidenceKind::Library,
                    format!("CUDA driver API {}", cuda_version_string(d)),
                )
                .value("cuda_driver", cuda_version_string(d))
                .of(job, p),
            );
        }
    }
    if importers.is_empty() {
        return Vec::new();
    }
    // The container signature: same machine (boot id), different hostnames, GPU 0 everywhere,
    // distinct PCI bus ids.
    for &p in &importers {
        let pm = &job.processes[p];
        for (q, qm) in job.processes.iter().enumerate() {
            // Each pair once; an importer pairs with any same-machine rank.
            if q == p
                || (importers.contains(&q) && q < p)
                || qm.machine() != pm.machine()
                || qm.boot_id.is_empty()
            {
                continue;
            }
            let (Some(g1), Some(g2)) = (pm.gpu(), qm.gpu()) else {
                continue;
            };
            if g1.pci_bus_id.is_some()
                && g1.pci_bus_id != g2.pci_bus_id
                && g1.ordinal == Some(0)
                && g2.ordinal == Some(0)
            {
                f.involve(job, q);
                f.confidence = Confidence::High;
                let containers = if pm.host != qm.host {
                    format!(
                        "different hostnames {} and {} (containers) on one machine (boot id {})",
                        pm.host, qm.host, pm.boot_id
                    )
                } else {
                    format!("the same host {}", pm.host)
                };
                f.fact(
                    Evidence::new(
                        EvidenceKind::Gpu,
                        format!(
                            "{containers}; each sees its GPU as device 0 but the PCI bus ids differ ({} vs {})",
                            g1.pci_bus_id.as_deref().unwrap_or("?"),
                            g2.pci_bus_id.as_deref().unwrap_or("?")
                        ),
                    )
                    .value("boot_id", &pm.boot_id)
                    .value("ordinal", 0)
                    .value("pci_bus_ids", [&g1.pci_bus_id, &g2.pci_bus_id])
                    .of_all(job, &[p, q]),
                );
            }
        }
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testutil::{analyze, find};

    #[test]
    fn two_containers_one_machine_high_confidence() {
        let (_, fs) = analyze(&["ctr-a@m1", "ctr-b@m1"], |s| {
            s.snapshot_all(22602);
            for r in &mut s.ranks {
                r.gpu(
                    0,
                    &format!("0000:{}:00.0", if r.rank == 0 { "18" } else { "2a" }),
                    "GPU-x",
                );
            }
            let comms = s.init_world(22602);
            s.ranks[1].raw_call(
                CallId::CuMemImportFromShareableHandle,
                0,
                &[0, 42, 1, 0, 0x2a00, 0, 0, 1],
                101,
                None,
            );
            s.ranks[1].coll(
                CallId::NcclAllReduce,
                comms[1],
                0,
                1 << 20,
                7,
                0,
                0,
                1,
                Some("Cuda failure 101 'invalid device ordinal'"),
            );
        });
        let f = find(&fs, registry::CUMEM_IMPORT_INVALID_DEVICE.id()).expect("C04");
        assert_eq!(f.ranks, vec![0, 1]);
        assert_eq!(f.confidence, Confidence::High);
        assert_eq!(f.explains.len(), 2, "the import and the NCCL call it broke");
        assert!(f
            .evidence
            .iter()
            .any(|e| e.contains("CUDA_ERROR_INVALID_DEVICE")));
    }
}
