//! Catalog C07: `/dev/shm` too small (Docker's default 64 MiB) for NCCL's SHM transport buffers:
//! ncclSystemError at init with a shared-memory WARN whose wording depends on the version.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use crate::rules::text::text_is_case;
use ncclshim_format::NcclResult;

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut f = Finding::new(&registry::DEV_SHM_TOO_SMALL,
        "/dev/shm is too small for NCCL's shared-memory transport",
        Confidence::High,
    )
    .remedy(
        "Give the container a bigger /dev/shm (docker run --shm-size=1g or --ipc=host; Kubernetes: a \
         memory-backed emptyDir at /dev/shm); workaround NCCL_SHM_DISABLE=1.",
    );
    // Processes per machine, counted once (counting per process was ranks x ranks).
    let mut per_machine: std::collections::HashMap<&str, usize> = Default::default();
    for q in &job.processes {
        *per_machine.entry(q.machine()).or_default() += 1;
    }
    for (p, pm) in job.processes.iter().enumerate() {
        let shm = pm.host_facts.as_ref().and_then(|h| h.dev_shm_bytes);
        // The same threshold `doctor` warns at (knowledge/thresholds.toml).
        let small = shm.is_some_and(crate::knowledge::thresholds::dev_shm_too_small);
        let local = per_machine[pm.machine()];
        for (i, c) in pm.failed_calls() {
            if c.is_cuda {
                continue;
            }
            // A /dev/shm recorded as large contradicts this case whatever the text says (a
            // fallback rank reading a peer's cuMem descriptor prints the same WARN: NVIDIA/nccl#2190).
            let by_text = text_is_case(c, "C07") && (small || shm.is_none());
            let by_facts =
                c.returned(NcclResult::SystemError) && small && local > 1 && c.error_text.is_none();
            if !by_text && !by_facts {
                continue;
            }
            f.involve(job, p);
            f.explain(p, i);
            f.fact(Evidence::call(c).of(job, p));
            if let Some(b) = shm {
                f.fact(
                    Evidence::new(EvidenceKind::Host, format!("/dev/shm is {} MiB", b >> 20))
                        .value("dev_shm_bytes", b)
                        .on_host(&pm.host),
                );
            }
            f.fact(
                Evidence::new(EvidenceKind::Host, format!("{local} ranks on this machine"))
                    .value("local_ranks", local)
                    .on_host(&pm.host),
            );
            if let Some(rt) = pm
                .host_facts
                .as_ref()
                .and_then(|h| h.container_runtime.clone())
            {
                f.fact(
                    Evidence::new(EvidenceKind::Host, format!("running in a {rt} container"))
                        .value("container_runtime", &rt)
                        .on_host(&pm.host),
                );
            }
            if !by_text {
                f.confidence = Confidence::Medium;
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
    use super::*;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::{host_facts_json, WORLD_UID};

    #[test]
    fn shm_segment_warn_with_64_mib() {
        let (_, fs) = analyze(&["c0", "c0"], |s| {
            s.snapshot_all(21805);
            for r in &mut s.ranks {
                let mut h = host_facts_json("c0");
                h["dev_shm_bytes"] = (64u64 << 20).into();
                r.host_facts(&h);
                let rank = u64::from(r.rank);
                r.init_rank(2, rank, WORLD_UID, rank, 2, Some("Error while creating shared memory segment /dev/shm/nccl-AbC123 (size 9637888)"), 21805);
                r.clean_exit();
            }
        });
        let f = find(&fs, registry::DEV_SHM_TOO_SMALL.id()).expect("C07");
        assert!(f.evidence.iter().any(|e| e.contains("/dev/shm is 64 MiB")));
        assert_eq!(f.confidence, Confidence::High);
    }
}
