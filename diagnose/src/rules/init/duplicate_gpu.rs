//! Catalog C06: several ranks of one communicator on the same GPU. NCCL ≤ 2.29 says "Duplicate GPU
//! detected : rank X and rank Y both on CUDA device ..."; 2.30.3 rewords it ("Multiple ranks
//! detected using the same GPU on this node ...") and 2.30.7 again ("Multiple Ranks are using the
//! same GPU/Partition ..."), allowing it only on opt-in (NCCL_MULTI_RANK_GPU_ENABLE).
//! ncclInvalidUsage. The wordings and the remedy are knowledge (`messages.toml`,
//! `init-duplicate-gpu`); this rule adds what the recorded GPUs and launcher variables show.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::knowledge::launchers::{lookup, Role};
use crate::knowledge::visible_devices::VisibleDevices;
use crate::model::JobModel;
use crate::rules::text::text_is_case;
use ncclshim_format::NcclResult;

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut f = Finding::new(
        &registry::DUPLICATE_GPU,
        "Several ranks use the same GPU",
        Confidence::High,
    )
    .remedy(remedy());
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

/// The remedy of the knowledge entry's device-selection cause (PyTorch's device_id, the nccl2
/// backend's `rank % device count` fallback, NCCL_MULTI_RANK_GPU_ENABLE), so the finding and a
/// classified text never give two different remedies.
fn remedy() -> &'static str {
    crate::knowledge::messages::entry("init-duplicate-gpu")
        .and_then(|e| e.causes.iter().find(|c| c.id == "device-selection"))
        .map(|c| c.remedy.as_str())
        .unwrap_or("Give each rank its own GPU (set the device from LOCAL_RANK before init).")
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;

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
        let f = find(&fs, registry::DUPLICATE_GPU.id()).expect("C06");
        assert_eq!(f.ranks, vec![0, 1, 2]);
        assert_eq!(f.explains.len(), 3);
        assert!(f.evidence[0].contains("0000:0f:00.0"));
    }

    /// NCCL 2.30.7's wording (also 2.32.3's), with no GPU identity recorded: the text alone
    /// names the case, and the remedy names PyTorch's device_id.
    #[test]
    fn the_2_30_7_wording_alone_names_the_case() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(23007);
            for r in &mut s.ranks {
                let rank = u64::from(r.rank);
                r.init_rank(
                    2,
                    rank,
                    WORLD_UID,
                    0,
                    5,
                    Some("Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration."),
                    23007,
                );
                r.clean_exit();
            }
        });
        let f = find(&fs, registry::DUPLICATE_GPU.id()).expect("C06");
        assert_eq!(f.ranks, vec![0, 1]);
        assert!(f.remedy.contains("device_id"), "{}", f.remedy);
    }

    #[test]
    fn distinct_gpus_are_fine() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22005);
            s.init_world(22005);
        });
        assert!(find(&fs, registry::DUPLICATE_GPU.id()).is_none());
    }
}
