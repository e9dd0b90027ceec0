//! Catalog C35: the framework cannot load libnccl at all (JAX/XLA "Unable to load NCCL library"): no
//! libnccl is mapped, although the process tried to use NCCL.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use crate::rules::text::text_is_entry;

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut f = Finding::new(
        &registry::LIBNCCL_NOT_LOADED,
        "No libnccl could be loaded in the process",
        Confidence::Medium,
    )
    .remedy(
        "Install the CUDA extra that brings NCCL (e.g. jax[cuda12], nvidia-nccl-cu12) or put a \
         compatible libnccl.so.2 on the library path.",
    );
    for (p, pm) in job.processes.iter().enumerate() {
        let texts: Vec<usize> = pm
            .failed_calls()
            .filter(|(_, c)| text_is_entry(c, &["libnccl-not-loadable"]))
            .map(|(i, _)| i)
            .collect();
        let note = pm.notes.iter().find(|n| {
            let l = n.to_ascii_lowercase();
            l.contains("libnccl")
                && (l.contains("not found") || l.contains("not loaded") || l.contains("no libnccl"))
        });
        let unmapped = pm
            .libs
            .as_ref()
            .is_some_and(|l| l.nccl_paths.is_empty() && !l.nccl_static);
        if texts.is_empty() && note.is_none() && !(unmapped && pm.failed_calls().next().is_some()) {
            continue;
        }
        f.involve(job, p);
        if unmapped {
            f.fact(
                Evidence::new(EvidenceKind::Library, "no libnccl is mapped in the process")
                    .value("libnccl_paths", Vec::<String>::new())
                    .of(job, p),
            );
        }
        if let Some(n) = note {
            f.fact(
                Evidence::new(EvidenceKind::Note, format!("recorder note: {n}"))
                    .value("recorder_note", n)
                    .of(job, p),
            );
        }
        for i in texts {
            f.explain(p, i);
            f.fact(Evidence::call(&pm.calls[i]).of(job, p));
        }
        f.fact(Evidence::env("LD_LIBRARY_PATH", pm.env_var("LD_LIBRARY_PATH"), "").of(job, p));
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
    fn nothing_mapped_and_a_failed_call() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(0);
            let r = &s.ranks[0];
            r.libraries(
                &json!({"libs": [], "nccl_paths": [], "nccl_version": null, "nccl_static": false}),
            );
            r.get_unique_id(
                0,
                3,
                Some("Unable to load NCCL library. Multi-GPU collectives will not work."),
            );
            r.clean_exit();
        });
        let f = find(&fs, registry::LIBNCCL_NOT_LOADED.id()).expect("C35");
        assert_eq!(f.explains.len(), 1);
        assert!(f
            .evidence
            .iter()
            .any(|e| e.contains("no libnccl is mapped")));
    }
}
