//! Catalog C03: different NCCL versions in one job. Bootstrap wire formats differ between releases, so
//! one side decodes the other's socket address as garbage ("family 0 is neither AF_INET(2) nor
//! AF_INET6(10)", ncclInternalError) or hangs. NCCL's own version check runs only after a
//! successful bootstrap, so it never gets to say so.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use crate::names::{cuda_version_string, nccl_version_string};
use crate::rules::text::text_is_entry;
use ncclshim_format::NcclResult;
use std::collections::BTreeMap;

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut by_version: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (p, pm) in job.processes.iter().enumerate() {
        if let Some(v) = pm.nccl_version {
            by_version.entry(v).or_default().push(p);
        }
    }
    if by_version.len() < 2 {
        return Vec::new();
    }
    let mut f = Finding::new(
        &registry::NCCL_VERSION_MISMATCH,
        "Ranks run different NCCL versions",
        Confidence::High,
    )
    .remedy(
        "Run the identical NCCL on every node (same container image, or the same nvidia-nccl-cuXX \
         wheel); remove stray LD_LIBRARY_PATH entries that point at a system libnccl.",
    );
    for (v, ps) in &by_version {
        let paths: Vec<String> = {
            let mut x: Vec<String> = ps
                .iter()
                .filter_map(|&p| job.processes[p].libs.as_ref()?.nccl_paths.first().cloned())
                .collect();
            x.sort();
            x.dedup();
            x
        };
        let mut line = format!("NCCL {}", nccl_version_string(*v));
        if !paths.is_empty() {
            line.push_str(&format!(" (libnccl: {})", paths.join(", ")));
        }
        f.fact(
            Evidence::new(EvidenceKind::Library, line)
                .value("nccl_version", nccl_version_string(*v))
                .value("libnccl_paths", &paths)
                .of_all(job, ps),
        );
        for &p in ps {
            f.involve(job, p);
        }
        let runtimes: Vec<String> = {
            let mut x: Vec<String> = ps
                .iter()
                .filter_map(|&p| job.processes[p].libs.as_ref()?.cuda_runtime)
                .map(cuda_version_string)
                .collect();
            x.sort();
            x.dedup();
            x
        };
        if !runtimes.is_empty() {
            f.fact(
                Evidence::new(
                    EvidenceKind::Library,
                    format!(
                        "CUDA runtime {} with NCCL {}",
                        runtimes.join("/"),
                        nccl_version_string(*v)
                    ),
                )
                .value("cuda_runtime", &runtimes)
                .value("nccl_version", nccl_version_string(*v))
                .of_all(job, ps),
            );
        }
    }
    for (p, pm) in job.processes.iter().enumerate() {
        for (i, c) in pm.calls.iter().enumerate() {
            if c.is_init() && c.in_flight() {
                f.fact(Evidence::call(c).of(job, p));
            }
            // A peer's address decoded in another release's wire format, or NCCL's own check.
            if c.failed()
                && (text_is_entry(c, &["socket-address-family", "init-version-mismatch"])
                    || (c.is_init() && c.returned(NcclResult::InternalError)))
            {
                f.explain(p, i);
                f.fact(Evidence::call(c).of(job, p));
            }
        }
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    use crate::finding::Severity;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::{libraries_json, WORLD_UID};

    #[test]
    fn two_versions_are_a_primary_finding_with_both_paths() {
        let (_, fs) = analyze(&["node-a", "node-b"], |s| {
            s.snapshot_all(21403);
            s.ranks[1].libraries(&libraries_json(
                "/usr/lib/x86_64-linux-gnu/libnccl.so.2.19.3",
                21903,
                12030,
                12030,
            ));
            s.ranks[0].get_version(21403);
            s.ranks[1].get_version(21903);
            s.ranks[0].init_rank(2, 0, WORLD_UID, 0, 3, Some("ncclSocketInit: connecting to address with family 0 is neither AF_INET(2) nor AF_INET6(10)"), 21403);
            s.ranks[1].init_rank_in_flight(2, 1, WORLD_UID, 0);
        });
        let f = find(&fs, registry::NCCL_VERSION_MISMATCH.id()).expect("C03");
        assert_eq!(f.severity, Severity::Primary);
        assert!(f
            .evidence
            .iter()
            .any(|e| e.ranks == [0] && e.values["nccl_version"] == "2.14.3"));
        assert!(f
            .evidence
            .iter()
            .any(|e| e.contains("2.19.3") && e.contains("/usr/lib")));
        assert_eq!(f.explains.len(), 1);
    }

    #[test]
    fn one_version_is_silent() {
        let (_, fs) = analyze(&["a", "b"], |s| {
            s.snapshot_all(22005);
            s.init_world(22005);
        });
        assert!(find(&fs, registry::NCCL_VERSION_MISMATCH.id()).is_none());
    }
}
