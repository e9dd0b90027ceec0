//! Catalog C18: the CUDA driver is older than the CUDA runtime NCCL / the framework was built with:
//! "CUDA driver version is insufficient for CUDA runtime version" → ncclUnhandledCudaError.
//! CUDA says exactly the same when there is no driver at all (a container started without GPUs,
//! a login node): the host facts tell the two apart, and the finding says which.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use crate::names::cuda_version_string;
use crate::rules::text::text_is_entry;

/// What one process shows: the calls that failed with CUDA's "insufficient driver" text, the
/// driver and runtime versions when the driver is older, and whether the host has no driver.
struct Hit {
    process: usize,
    calls: Vec<usize>,
    older: Option<(String, String)>,
    no_driver: bool,
}

fn hits(job: &JobModel) -> Vec<Hit> {
    let mut out = Vec::new();
    for (p, pm) in job.processes.iter().enumerate() {
        let libs = pm.libs.as_ref();
        let (drv, rt) = (
            libs.and_then(|l| l.cuda_driver),
            libs.and_then(|l| l.cuda_runtime),
        );
        let older = matches!((drv, rt), (Some(d), Some(r)) if d > 0 && d < r);
        let calls: Vec<usize> = pm
            .error_calls()
            .filter(|(_, c)| text_is_entry(c, &["cuda-driver-too-old"]))
            .map(|(i, _)| i)
            .collect();
        if calls.is_empty() && !older {
            continue;
        }
        let h = pm.host_facts.as_ref();
        let driver_absent = h.is_some_and(|h| matches!(h.nvidia_driver, Some(None)));
        let no_devices = h
            .and_then(|h| h.nvidia_devices.as_ref())
            .is_some_and(|d| d.is_empty());
        out.push(Hit {
            process: p,
            calls,
            older: older.then(|| {
                (
                    cuda_version_string(drv.unwrap_or(0)),
                    cuda_version_string(rt.unwrap_or(0)),
                )
            }),
            no_driver: driver_absent && no_devices && !older,
        });
    }
    out
}

pub fn check(job: &JobModel) -> Vec<Finding> {
    let hits = hits(job);
    if hits.is_empty() {
        return Vec::new();
    }
    // Every process that says so has no driver at all: the same words, another finding.
    let missing = hits.iter().all(|h| h.no_driver);
    let mut f = if missing {
        Finding::new(
            &registry::CUDA_DRIVER_MISSING,
            "No NVIDIA driver is available to the process: CUDA reports it as an insufficient driver",
            Confidence::High,
        )
        .remedy(
            "Run the job where the NVIDIA driver is loaded and the GPUs are visible: on a GPU node, and \
             in containers with the GPUs passed in (`docker run --gpus all` / the NVIDIA container \
             toolkit, Kubernetes `nvidia.com/gpu` resources).",
        )
    } else {
        Finding::new(
            &registry::CUDA_DRIVER_OLDER_THAN_RUNTIME,
            "The CUDA driver is older than the CUDA runtime in use",
            Confidence::High,
        )
        .remedy(
            "Upgrade the NVIDIA driver, or install a CUDA/NCCL build that matches the driver (for \
             datacenter GPUs the cuda-compat package also works).",
        )
    };
    for h in &hits {
        let (p, pm) = (h.process, &job.processes[h.process]);
        for &i in &h.calls {
            f.explain(p, i);
            f.fact(Evidence::call(&pm.calls[i]).of(job, p));
        }
        if let Some((drv, rt)) = &h.older {
            f.fact(
                Evidence::new(
                    EvidenceKind::Library,
                    format!("CUDA driver API {drv} < CUDA runtime {rt}"),
                )
                .value("cuda_driver", drv)
                .value("cuda_runtime", rt)
                .of(job, p),
            );
        }
        f.involve(job, p);
    }
    if missing {
        for h in &hits {
            f.fact(
                Evidence::new(
                    EvidenceKind::Host,
                    "/proc/driver/nvidia/version absent (no NVIDIA kernel driver loaded) and no /dev/nvidia<N> device",
                )
                .value("nvidia_driver", Option::<String>::None)
                .value("nvidia_devices", 0)
                .of(job, h.process),
            );
        }
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Severity;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::{host_facts_json, libraries_json, WHEEL_NCCL, WORLD_UID};

    fn insufficient_driver(host: serde_json::Value) -> Vec<Finding> {
        analyze(&["n0"], move |s| {
            s.snapshot_all(22005);
            let r = &mut s.ranks[0];
            r.host_facts(&host);
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
        })
        .1
    }

    #[test]
    fn no_driver_at_all_is_told_apart_from_an_old_one() {
        let mut h = host_facts_json("n0");
        h["nvidia_driver"] = serde_json::Value::Null;
        h["nvidia_devices"] = serde_json::json!([]);
        let fs = insufficient_driver(h);
        let f = find(&fs, registry::CUDA_DRIVER_MISSING.id()).expect("no-driver variant");
        assert_eq!(f.catalog(), Some("C18"));
        assert!(f
            .evidence
            .iter()
            .any(|e| e.contains("/proc/driver/nvidia/version absent")));

        // A host with a driver loaded keeps the old-driver verdict; so does a dump that did not
        // record the driver facts (older shims).
        let mut h = host_facts_json("n0");
        h["nvidia_driver"] =
            serde_json::json!("NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.82.01");
        h["nvidia_devices"] = serde_json::json!(["nvidia0"]);
        assert!(find(
            &insufficient_driver(h),
            registry::CUDA_DRIVER_OLDER_THAN_RUNTIME.id()
        )
        .is_some());
        assert!(find(
            &insufficient_driver(host_facts_json("n0")),
            registry::CUDA_DRIVER_OLDER_THAN_RUNTIME.id()
        )
        .is_some());
    }

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
        let f = find(&fs, registry::CUDA_DRIVER_OLDER_THAN_RUNTIME.id()).expect("C18");
        assert_eq!(f.severity, Severity::Primary);
        assert!(f
            .evidence
            .iter()
            .any(|e| e.contains("11.7 < CUDA runtime 12.4")));
    }
}
