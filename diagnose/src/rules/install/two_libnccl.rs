//! Catalog C23: two different libnccl builds mapped in one process (import order decides which one the
//! framework binds to; missing symbols or an unexpected version follow).

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut f = Finding::new(
        &registry::TWO_LIBNCCL_IN_PROCESS,
        "More than one libnccl is loaded in one process",
        Confidence::High,
    )
    .remedy(
        "Keep one NCCL per environment: import the framework that needs the newest NCCL first, or \
         LD_PRELOAD the intended libnccl; align the NCCL versions of CuPy / PyTorch / JAX.",
    );
    for (p, pm) in job.processes.iter().enumerate() {
        let Some(l) = &pm.libs else { continue };
        let mut paths = l.nccl_paths.clone();
        paths.dedup();
        if paths.len() < 2 {
            continue;
        }
        f.involve(job, p);
        f.fact(
            Evidence::new(
                EvidenceKind::Library,
                format!("libnccl mapped from {}", paths.join(" and ")),
            )
            .value("libnccl_paths", &paths)
            .of(job, p),
        );
        if let Some(v) = pm.nccl_version_text() {
            f.fact(
                Evidence::new(
                    EvidenceKind::Library,
                    format!("the NCCL in use reports {v}"),
                )
                .value("nccl_version", &v)
                .of(job, p),
            );
        }
        if let Some(lp) = pm.env_var("LD_LIBRARY_PATH") {
            f.fact(Evidence::env("LD_LIBRARY_PATH", Some(lp), "").of(job, p));
        }
        // A process that failed with two NCCLs mapped: the mix is the likeliest cause of its
        // failures (a call bound to the other build's symbols, an older NCCL than expected), so
        // the finding explains them (and is primary) rather than sitting beside them.
        for (i, _) in pm.calls.iter().enumerate().filter(|(_, c)| c.failed()) {
            f.explain(p, i);
            f.confidence = Confidence::Medium;
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

    use crate::rules::testutil::{analyze, find};
    use serde_json::json;

    #[test]
    fn two_paths_in_one_process() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(21602);
            s.ranks[0].libraries(&json!({
                "libs": [{"kind": "nccl", "path": "/usr/lib/x86_64-linux-gnu/libnccl.so.2.16.2", "version": 21602},
                         {"kind": "nccl", "path": "/venv/nvidia/nccl/lib/libnccl.so.2", "version": 22005}],
                "nccl_paths": ["/usr/lib/x86_64-linux-gnu/libnccl.so.2.16.2", "/venv/nvidia/nccl/lib/libnccl.so.2"],
                "nccl_version": 21602
            }));
            s.ranks[0].clean_exit();
        });
        let f = find(&fs, registry::TWO_LIBNCCL_IN_PROCESS.id()).expect("C23");
        assert!(f.evidence[0].contains("libnccl.so.2.16.2 and /venv"));
    }
}
