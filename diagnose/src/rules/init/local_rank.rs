//! Catalog C28: the local rank (LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK... whichever the
//! launcher set) is not below the number of GPUs the process can see: "invalid device ordinal"
//! before or at communicator init, and the other ranks hang waiting for it. Which variable carries
//! the local rank comes from knowledge/launchers.toml, how many GPUs `CUDA_VISIBLE_DEVICES`
//! leaves from its parser (knowledge/visible_devices.rs: `-1`, `NoDevFiles` or a repeated index
//! end the list).

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::knowledge::launchers::{lookup, Role};
use crate::knowledge::visible_devices::VisibleDevices;
use crate::model::JobModel;
use crate::rules::text::text_is_entry;

/// Number of devices `CUDA_VISIBLE_DEVICES` leaves visible (None when unset: all of them).
pub fn visible_count(cvd: Option<&str>) -> Option<usize> {
    VisibleDevices::parse(cvd).count(None)
}

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut f = Finding::new(&registry::LOCAL_RANK_BEYOND_VISIBLE_GPUS,
        "A process was asked to use a GPU it cannot see (local rank ≥ visible GPUs)",
        Confidence::High,
    )
    .remedy("Launch no more processes per node than visible GPUs (nproc_per_node) and pick the device from LOCAL_RANK, not the global rank.");
    for (p, pm) in job.processes.iter().enumerate() {
        let Some(env) = pm.env.as_ref() else {
            continue;
        };
        let Some(local) = lookup(env, Role::LocalRank) else {
            continue;
        };
        let Some(lr) = local.number().and_then(|n| usize::try_from(n).ok()) else {
            continue;
        };
        let visible = VisibleDevices::parse(pm.env_var("CUDA_VISIBLE_DEVICES"));
        let Some(n) = visible.count(None) else {
            continue;
        };
        let failing: Vec<usize> = pm
            .failed_calls()
            .filter(|(_, c)| {
                (c.is_cuda && c.rc == 101) || text_is_entry(c, &["cuda-invalid-device"])
            })
            .map(|(i, _)| i)
            .collect();
        if lr < n {
            continue;
        }
        // A process that ran on a device it can see, with no invalid-device failure, did not
        // take its local rank as the ordinal (one MIG instance per process, a device picked by
        // the application): the local rank is only a number here.
        let ordinal = pm
            .gpu()
            .and_then(|g| g.ordinal)
            .or_else(|| pm.world().and_then(|m| m.cuda_dev));
        if failing.is_empty() && ordinal.is_some_and(|o| o >= 0 && (o as u64) < n as u64) {
            continue;
        }
        f.involve(job, p);
        let cvd = pm.env_var("CUDA_VISIBLE_DEVICES");
        f.fact(
            Evidence::new(
                EvidenceKind::Gpu,
                format!("{} but {}", local.shown(), visible.describe()),
            )
            .value("local_rank", lr)
            .value("local_rank_variable", local.shown())
            .value("CUDA_VISIBLE_DEVICES", cvd)
            .value("visible_gpus", n)
            .of(job, p),
        );
        for i in failing {
            f.explain(p, i);
            f.fact(Evidence::call(&pm.calls[i]).of(job, p));
        }
        if let Some(dev) = pm.world().and_then(|m| m.cuda_dev) {
            f.fact(
                Evidence::new(
                    EvidenceKind::Communicator,
                    format!("communicator init asked for CUDA device {dev}"),
                )
                .value("cuda_device", dev)
                .of(job, p),
            );
        }
    }
    if f.process_ids.is_empty() {
        return Vec::new();
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::WORLD_UID;

    #[test]
    fn visible_device_counting() {
        assert_eq!(visible_count(Some("0,1,2")), Some(3));
        assert_eq!(visible_count(Some("")), Some(0));
        assert_eq!(visible_count(Some("0,-1,1")), Some(1));
        assert_eq!(visible_count(None), None);
    }

    #[test]
    fn slurm_local_id_beyond_a_truncated_list() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(22005);
            let r = &mut s.ranks[0];
            r.env(&[
                ("SLURM_JOB_ID", "7"),
                ("SLURM_PROCID", "1"),
                ("SLURM_LOCALID", "1"),
                ("CUDA_VISIBLE_DEVICES", "0,-1,1"),
            ]);
            r.init_rank(
                2,
                1,
                WORLD_UID,
                1,
                1,
                Some("Cuda failure 101 'invalid device ordinal'"),
                22005,
            );
            r.clean_exit();
        });
        let f = find(&fs, registry::LOCAL_RANK_BEYOND_VISIBLE_GPUS.id())
            .expect("C28 from SLURM_LOCALID");
        assert!(f
            .evidence
            .iter()
            .any(|e| e.contains("SLURM_LOCALID=1") && e.contains("ends at \"-1\"")));
    }

    #[test]
    fn local_rank_two_with_two_gpus() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(22005);
            let r = &mut s.ranks[0];
            r.env(&[("LOCAL_RANK", "2"), ("CUDA_VISIBLE_DEVICES", "0,1")]);
            r.init_rank(
                3,
                2,
                WORLD_UID,
                2,
                1,
                Some("Cuda failure 101 'invalid device ordinal'"),
                22005,
            );
            r.clean_exit();
        });
        let f = find(&fs, registry::LOCAL_RANK_BEYOND_VISIBLE_GPUS.id()).expect("C28");
        assert_eq!(f.explains.len(), 1);
    }
}
