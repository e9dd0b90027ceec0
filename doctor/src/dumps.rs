//! `doctor DIR`: what a job's dumps say about the recorder itself. A process whose NCCL never
//! reached the shim (linked statically or renamed) is named with the report's own words
//! (`ncclshim_diagnose::visibility`), so the host check and the report agree.

use crate::check::{Check, Status};
use std::path::Path;

/// The checks of a job's dump directory: `nccl-visible`, one per kind of process whose NCCL
/// calls the shim could not see (the report's `nccl_calls_invisible` gaps: the same sentence,
/// the same processes), or one `ok` when every process that ran NCCL called it through the shim.
pub fn dump_checks(dir: &Path) -> anyhow::Result<Vec<Check>> {
    let report = ncclshim_diagnose::analyze_dir(dir, None)?;
    let invisible: Vec<Check> = report
        .evidence_gaps
        .iter()
        .filter(|g| g.values.get("gap").and_then(|v| v.as_str()) == Some("nccl_calls_invisible"))
        .map(|g| {
            let mut c = Check::new("nccl-visible", Status::Warn, g.text.clone())
                .value("dir", dir.display().to_string())
                .value("processes", &g.processes);
            for p in &g.processes {
                c = c.evidence(p.label());
            }
            if let Some(o) = g.values.get("nccl_object").and_then(|v| v.as_str()) {
                c = c.evidence(format!("NCCL is in {o}"));
            }
            match g.values.get("remedy").and_then(|v| v.as_str()) {
                Some(r) => c.remedy(r),
                None => c,
            }
        })
        .collect();
    if invisible.is_empty() {
        return Ok(vec![Check::ok(
            "nccl-visible",
            format!(
                "every process in {} that ran NCCL called it through the shim",
                dir.display()
            ),
        )
        .value("dir", dir.display().to_string())]);
    }
    Ok(invisible)
}
