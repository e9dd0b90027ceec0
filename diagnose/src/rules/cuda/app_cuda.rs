//! The application's own CUDA driver call failed: a driver call the shim recorded outside any
//! NCCL call (not flagged as made by NCCL) returned an error — a CUDA IPC or cuMem import the
//! framework or the user's code made itself (sharing tensors between processes), not NCCL's
//! transport setup. Named as the application's, with the driver's own text.
//!
//! Not where the process's NCCL never reached the shim (linked statically or renamed,
//! [`crate::visibility`]): there every driver call is "outside any NCCL call" the shim saw, NCCL's
//! own included, so who made it is unknown and the call is left to the rules that do not ask.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    for (p, pm) in job.processes.iter().enumerate() {
        if crate::visibility::of_process(pm, p).is_some() {
            continue;
        }
        for (i, c) in pm.failed_calls() {
            if !c.is_cuda || c.nested {
                continue;
            }
            let mut f = Finding::new(
                &registry::APPLICATION_CUDA_CALL_FAILED,
                format!(
                    "The application's own {} failed with {} (outside any NCCL call)",
                    c.name,
                    c.rc_name()
                ),
                Confidence::High,
            )
            .remedy(
                "This driver call was made by the application or its framework (e.g. sharing a \
                 CUDA tensor between processes through CUDA IPC), not by NCCL: check the handle's \
                 origin (exported by a live process on the same machine, same device visible), \
                 CUDA_VISIBLE_DEVICES in both processes, and that the exporter still holds the \
                 memory.",
            );
            f.involve(job, p);
            f.explain(p, i);
            f.fact(Evidence::call(c).of(job, p));
            f.fact(
                Evidence::new(
                    EvidenceKind::Inference,
                    format!(
                        "{} was called outside any NCCL call (not made by NCCL)",
                        c.name
                    ),
                )
                .value("call", c.name.as_ref())
                .value("nested", false)
                .of(job, p),
            );
            out.push(f);
        }
    }
    out
}
