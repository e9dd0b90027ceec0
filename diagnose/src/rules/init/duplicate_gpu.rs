//! Catalog C06: several ranks of one communicator on the same GPU. NCCL ≤ 2.29 says "Duplicate GPU
//! detected : rank X and rank Y both on CUDA device ..."; 2.30 rewords it ("Multiple ranks ...
//! same GPU ... NCCL_MULTI_RANK_GPU_ENABLE") and allows it only on opt-in. ncclInvalidUsage.

use crate::knowledge::launchers::{lookup, Role};
use crate::knowledge::visible_devices::VisibleDevices;
use crate::model::JobModel;
use crate::rules::{text_is_case, Confidence, Evidence, EvidenceKind, Finding};
use ncclshim_format::NcclResult;

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut f = Finding::new(
        "duplicate-gpu",
        Some("C06"),
        "Several ranks use the same GPU",
        Confidence::High,
    )
    .remedy(
        "Set the device from LOCAL_RANK before creating the communicator (torch.cuda.set_device, or \
         device_id= in init_process_group); fix the launcher's GPU assignment; run no more processes \
         per node than GPUs. Only if sharing is intended, on NCCL ≥ 2.30: NCCL_MULTI_RANK_GPU_ENABLE=1.",
    );
    // Ranks on different MIG instances of one GPU are not this case: the devices invariant
    // (`invariants::devices`) names them.
    let partitioned: std::collections::BTreeSet<usize> =
        crate::invariants::devices::partitioned_groups(job)
            .into_iter()
            .flat_map(|g| g.2)
            .collect();
    // (machine, pci bus id) → processes.
    let by_gpu = crate::invariants::devices::processes_by_gpu(job);
    for ((_, bus), ps) in &by_gpu {
        if ps.len() < 2 || ps.iter().all(|p| partitioned.contains(p)) {
            continue;
        }
        // Only ranks of one job communicator matter (two jobs may time-share a GPU).
        let share_comm = ps.iter().any(|&a| {
            ps.iter().any(|&b| {
                a != b
                    && job.processes[a].memberships.iter().any(|m| {
                        job.processes[b]
                            .memberships
                            .iter()
                            .any(|n| n.comm_hash == m.comm_hash)
                    })
            })
        });
        if !share_comm {
            continue;
        }
        f.fact(
            Evidence::new(
                EvidenceKind::Gpu,
                format!("all use the GPU at PCI bus id {bus}"),
            )
            .value("pci_bus_id", bus)
            .of_all(job, ps),
        );
        for &p in ps {
            f.involve(job, p);
            let pm = &job.processes[p];
            // The launcher's local rank (whichever variable carries it) and the physical GPU the
            // device ordinal resolves to through CUDA_VISIBLE_DEVICES.
            let lr = pm
                .env
                .as_ref()
                .and_then(|e| lookup(e, Role::LocalRank))
                .map_or_else(|| "no local rank variable".to_owned(), |v| v.shown());
            let cvd = pm.env_var("CUDA_VISIBLE_DEVICES");
            let visible = VisibleDevices::parse(cvd);
            let ord = pm.gpu().and_then(|g| g.ordinal);
            let physical = ord
                .and_then(|o| usize::try_from(o).ok())
                .and_then(|o| visible.device(o));
            f.fact(
                Evidence::new(
                    EvidenceKind::Gpu,
                    format!(
                        "{lr}, {}, device ordinal {}{}",
                        visible.describe(),
                        ord.map_or("?".to_owned(), |o| o.to_string()),
                        physical
                            .as_ref()
                            .map(|d| format!(" = {d}"))
                            .unwrap_or_default()
                    ),
                )
                .value("local_rank", lr.as_str())
                .value("CUDA_VISIBLE_DEVICES", cvd)
                .value("ordinal", ord)
                .value("physical_device", physical.map(|d| d.to_string()))
                .of(job, p),
            );
        }
    }
    for (p, pm) in job.processes.iter().enumerate() {
        if partitioned.contains(&p) {
            continue;
        }
        for (i, c) in pm.failed_calls() {
            if text_is_case(c, "C06")
                || (f.process_ids.contains(&p)
                    && c.is_init()
                    && c.returned(NcclResult::InvalidUsage))
            {
                f.involve(job, p);
                f.explain(p, i);
                f.fact(Evidence::call(c).of(job, p));
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

    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::WORLD_UID;

    #[test]
    fn same_bus_id_on_one_machine() {
        let (_, fs) = analyze(&["n0", "n0", "n0"], |s| {
            s.snapshot_all(22005);
            for r in &mut s.ranks {
                r.gpu(0, "0000:0f:00.0", "GPU-same");
                let rank = u64::from(r.rank);
                r.init_rank(
                    3,
                    rank,
                    WORLD_UID,
                    0,
                    5,
                    Some("Duplicate GPU detected : rank 1 and rank 0 both on CUDA device f000"),
                    22005,
                );
                r.clean_exit();
            }
        });
        let f = find(&fs, "duplicate-gpu").expect("C06");
        assert_eq!(f.ranks, vec![0, 1, 2]);
        assert_eq!(f.explains.len(), 3);
        assert!(f.evidence[0].contains("0000:0f:00.0"));
    }

    #[test]
    fn distinct_gpus_are_fine() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22005);
            s.init_world(22005);
        });
        assert!(find(&fs, "duplicate-gpu").is_none());
    }
}
