//! C28: LOCAL_RANK (or the global rank used as a device index) is not below the number of GPUs
//! the process can see: "invalid device ordinal" before or at communicator init, and the other
//! ranks hang waiting for it.

use super::{text_has, Confidence, Evidence, EvidenceKind, Finding, Severity};
use crate::model::JobModel;

/// Number of devices `CUDA_VISIBLE_DEVICES` leaves visible (None when unset: all of them).
pub fn visible_count(cvd: Option<&str>) -> Option<usize> {
    let v = cvd?.trim();
    if v.is_empty() {
        return Some(0);
    }
    Some(v.split(',').filter(|s| !s.trim().is_empty()).count())
}

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut f = Finding::new(
        "local-rank-beyond-visible-gpus",
        Some("C28"),
        "A process was asked to use a GPU it cannot see (LOCAL_RANK ≥ visible GPUs)",
        Severity::Primary,
        Confidence::High,
    )
    .remedy("Launch no more processes per node than visible GPUs (nproc_per_node) and pick the device from LOCAL_RANK, not the global rank.");
    for (p, pm) in job.processes.iter().enumerate() {
        let Some(lr) = pm
            .env_var("LOCAL_RANK")
            .and_then(|v| v.trim().parse::<usize>().ok())
        else {
            continue;
        };
        let Some(n) = visible_count(pm.env_var("CUDA_VISIBLE_DEVICES")) else {
            continue;
        };
        let failing: Vec<usize> = pm
            .calls
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                c.failed()
                    && ((c.is_cuda && c.rc == 101) || text_has(c, &["invalid device ordinal"]))
            })
            .map(|(i, _)| i)
            .collect();
        if lr < n {
            continue;
        }
        f.involve(job, p);
        let cvd = pm.env_var("CUDA_VISIBLE_DEVICES");
        f.fact(
            Evidence::new(
                EvidenceKind::Gpu,
                format!(
                    "LOCAL_RANK={lr} but CUDA_VISIBLE_DEVICES={} leaves {n} {}",
                    cvd.unwrap_or(""),
                    if n == 1 { "GPU" } else { "GPUs" }
                ),
            )
            .value("LOCAL_RANK", lr)
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
    use crate::synth::WORLD_UID;

    #[test]
    fn visible_device_counting() {
        assert_eq!(visible_count(Some("0,1,2")), Some(3));
        assert_eq!(visible_count(Some("")), Some(0));
        assert_eq!(visible_count(None), None);
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
        let f = find(&fs, "local-rank-beyond-visible-gpus").expect("C28");
        assert_eq!(f.explains.len(), 1);
    }
}
