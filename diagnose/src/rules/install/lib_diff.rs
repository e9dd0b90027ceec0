//! Library differences across ranks that are not an NCCL version mismatch (C03): NCCL plugins
//! present on some ranks only (a net plugin on some hosts makes them pick another transport and
//! hang), different libnccl paths with the same version, different CUDA driver or runtime.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use crate::names::cuda_version_string;
use std::collections::BTreeMap;

fn groups<F: Fn(usize) -> Option<String>>(job: &JobModel, key: F) -> BTreeMap<String, Vec<usize>> {
    let mut m: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for p in 0..job.processes.len() {
        if job.processes[p].libs.is_some() {
            if let Some(k) = key(p) {
                m.entry(k).or_default().push(p);
            }
        }
    }
    m
}

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut f = Finding::new(&registry::LIBRARY_DIFFERS,
        "Ranks load different NCCL plugins or CUDA libraries",
        Confidence::Low,
    )
    .remedy("Run every rank from one software image: same NCCL plugins (NCCL_NET_PLUGIN, libnccl-net*.so on the path), same CUDA driver and runtime.");
    let plugins = groups(job, |p| {
        let l = job.processes[p].libs.as_ref()?;
        let mut v: Vec<String> = l
            .plugins
            .iter()
            .map(|s| s.rsplit('/').next().unwrap_or(s).to_owned())
            .collect();
        v.sort();
        Some(if v.is_empty() {
            "no NCCL plugin".into()
        } else {
            v.join(", ")
        })
    });
    let paths = groups(job, |p| {
        job.processes[p].libs.as_ref()?.nccl_paths.first().cloned()
    });
    let same_version = job
        .processes
        .iter()
        .filter_map(|p| p.nccl_version)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        <= 1;
    let driver = groups(job, |p| {
        job.processes[p]
            .libs
            .as_ref()?
            .cuda_driver
            .map(cuda_version_string)
    });
    let runtime = groups(job, |p| {
        job.processes[p]
            .libs
            .as_ref()?
            .cuda_runtime
            .map(cuda_version_string)
    });
    let mut add = |what: &str, g: &BTreeMap<String, Vec<usize>>| {
        if g.len() < 2 {
            return;
        }
        for (v, ps) in g {
            f.fact(
                Evidence::new(EvidenceKind::Library, format!("{what} {v}"))
                    .value("library", what)
                    .value("value", v)
                    .of_all(job, ps),
            );
        }
        if let Some((_, ps)) = g.iter().min_by_key(|(_, ps)| ps.len()) {
            for &p in ps {
                f.involve(job, p);
            }
        }
    };
    add("NCCL plugins:", &plugins);
    if same_version {
        add("libnccl", &paths);
    }
    add("CUDA driver API", &driver);
    add("CUDA runtime", &runtime);
    if f.evidence.is_empty() {
        return Vec::new();
    }
    if plugins.len() > 1 {
        f.confidence = Confidence::Medium;
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    use crate::rules::testutil::{analyze, find};
    use serde_json::json;

    #[test]
    fn net_plugin_on_one_host_only() {
        let (_, fs) = analyze(&["a", "b"], |s| {
            s.snapshot_all(22703);
            let mut l = ncclshim_fixtures::synth::libraries_json(
                ncclshim_fixtures::synth::WHEEL_NCCL,
                22703,
                12080,
                12040,
            );
            l["libs"]
                .as_array_mut()
                .unwrap()
                .push(json!({"kind": "nccl_net", "path": "/opt/aws-ofi-nccl/lib/libnccl-net.so", "version": null}));
            s.ranks[1].libraries(&l);
            s.init_world(22005);
            for r in &s.ranks {
                r.clean_exit();
            }
        });
        let f = find(&fs, registry::LIBRARY_DIFFERS.id()).expect("lib diff");
        assert!(
            f.evidence
                .iter()
                .any(|e| e.ranks == [1] && e.contains("libnccl-net.so")),
            "{:?}",
            f.evidence
        );
        assert_eq!(f.confidence, crate::finding::Confidence::Medium);
    }
}
