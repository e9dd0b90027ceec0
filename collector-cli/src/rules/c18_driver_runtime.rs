//! C18: the CUDA driver is older than the CUDA runtime NCCL / the framework was built with:
//! "CUDA driver version is insufficient for CUDA runtime version" → ncclUnhandledCudaError.

use super::{text_has, who, Confidence, Finding, Severity};
use crate::model::JobModel;
use crate::names::cuda_version_string;

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut f = Finding::new(
        "cuda-driver-older-than-runtime",
        Some("C18"),
        "The CUDA driver is older than the CUDA runtime in use",
        Severity::Primary,
        Confidence::High,
    )
    .remedy(
        "Upgrade the NVIDIA driver, or install a CUDA/NCCL build that matches the driver (for \
         datacenter GPUs the cuda-compat package also works).",
    );
    let mut any_failure = false;
    for (p, pm) in job.processes.iter().enumerate() {
        let libs = pm.libs.as_ref();
        let (drv, rt) = (
            libs.and_then(|l| l.cuda_driver),
            libs.and_then(|l| l.cuda_runtime),
        );
        let older = matches!((drv, rt), (Some(d), Some(r)) if d > 0 && d < r);
        let mut hit = false;
        for (i, c) in pm.calls.iter().enumerate() {
            if c.failed() && text_has(c, &["driver version is insufficient"]) {
                f.explain(p, i);
                f.evidence(format!("{}: {}", who(job, p), c.describe()));
                hit = true;
                any_failure = true;
            }
        }
        if older {
            f.evidence(format!(
                "{}: CUDA driver API {} < CUDA runtime {}",
                who(job, p),
                cuda_version_string(drv.unwrap_or(0)),
                cuda_version_string(rt.unwrap_or(0))
            ));
            hit = true;
        }
        if hit {
            f.involve(job, p);
        }
    }
    if f.process_ids.is_empty() {
        return Vec::new();
    }
    if !any_failure {
        f.severity = Severity::Contributing;
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testutil::{analyze, find};
    use crate::synth::{libraries_json, WHEEL_NCCL, WORLD_UID};

    #[test]
    fn driver_11_7_runtime_12_4() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(22005);
            let r = &mut s.ranks[0];
            r.libraries(&libraries_json(WHEEL_NCCL, 22005, 11070, 12040));
            r.init_rank(
                1,
                0,
                WORLD_UID,
                0,
                1,
                Some("Cuda failure 'CUDA driver version is insufficient for CUDA runtime version'"),
                22005,
            );
            r.clean_exit();
        });
        let f = find(&fs, "cuda-driver-older-than-runtime").expect("C18");
        assert_eq!(f.severity, Severity::Primary);
        assert!(f
            .evidence
            .iter()
            .any(|e| e.contains("11.7 < CUDA runtime 12.4")));
    }
}
