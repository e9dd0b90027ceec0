//! Failures no rule explains still get a finding: the call, its return code and NCCL's own
//! text, laid out per rank with no invented cause. Identical failures on several ranks are one
//! finding.

use crate::model::{FailureWhat, JobModel};
use crate::rules::{Confidence, Evidence, EvidenceKind, Finding, Severity};
use std::collections::{BTreeMap, HashSet};

/// (call name, return code, error text): failures alike in all three are one finding.
type Key = (String, i32, String);

pub fn check(job: &JobModel, found: &[Finding]) -> Vec<Finding> {
    let explained: HashSet<(usize, usize)> = found
        .iter()
        .flat_map(|f| f.explains.iter().copied())
        .collect();
    let signalled: HashSet<usize> = found
        .iter()
        .filter(|f| f.id == "fatal-signal")
        .flat_map(|f| f.process_ids.iter().copied())
        .collect();
    // (call, rc, text) → (process, call index, description), in order of first occurrence.
    let mut order: Vec<(String, i32, String)> = Vec::new();
    let mut groups: BTreeMap<Key, Vec<(usize, usize, String)>> = BTreeMap::new();
    for fl in job.first_failure_per_process() {
        let idx = match fl.what {
            FailureWhat::Call(i) | FailureWhat::AsyncError(i) => i,
            FailureWhat::Signal(_) | FailureWhat::Died => continue,
        };
        // Any explained failure of the same process covers the rest of its errors.
        if signalled.contains(&fl.process) || explained.iter().any(|(p, _)| *p == fl.process) {
            continue;
        }
        let c = &job.processes[fl.process].calls[idx];
        let key = (
            c.name.to_string(),
            c.rc,
            c.error_text.clone().unwrap_or_default(),
        );
        if !groups.contains_key(&key) {
            order.push(key.clone());
        }
        groups
            .entry(key)
            .or_default()
            .push((fl.process, idx, job.describe(&fl)));
    }
    let mut out = Vec::new();
    for key in order {
        let members = &groups[&key];
        let (p0, i0, _) = members[0];
        let c = &job.processes[p0].calls[i0];
        let mut f = Finding::new(
            "unexplained-error",
            None,
            format!("{} failed with {} {} (no known cause matches)", c.name, c.rc, c.rc_name()),
            Severity::Contributing,
            Confidence::Low,
        )
        .remedy(
            "No rule matches this evidence. Rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET on the \
             failing rank and compare NCCL's WARN lines with the error text above.",
        );
        for (p, i, _) in members {
            let pm = &job.processes[*p];
            f.involve(job, *p);
            f.explain(*p, *i);
            f.fact(Evidence::call(&pm.calls[*i]).of(job, *p));
            if let Some(v) = pm.nccl_version_text() {
                f.fact(
                    Evidence::new(EvidenceKind::Library, format!("NCCL {v}"))
                        .value("nccl_version", &v)
                        .of(job, *p),
                );
            }
        }
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::rules::testutil::{analyze, find};
    use crate::rules::Severity;
    use crate::synth::WORLD_UID;

    #[test]
    fn unknown_error_is_laid_out_and_primary_when_first() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(22005);
            s.ranks[0].init_rank(
                1,
                0,
                WORLD_UID,
                0,
                3,
                Some("something nobody has seen before"),
                22005,
            );
            s.ranks[0].clean_exit();
        });
        let f = find(&fs, "unexplained-error").expect("unknown");
        assert_eq!(f.severity, Severity::Primary);
        assert!(f.evidence[0].contains("something nobody has seen before"));
        assert!(f.title.contains("ncclInternalError"));
    }
}
