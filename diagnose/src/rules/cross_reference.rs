//! Every identifier an error text names, resolved against the recorded facts of every host
//! ([`crate::model::references`]): a bus id becomes "GPU 2 on node1, used by rank 5", a peer rank
//! becomes "host node2, pid 77, whose dump shows ...", an HCA becomes "present on node3 (port 1:
//! ACTIVE)" or "not present (present: mlx5_0, mlx5_1)".
//!
//! Two uses:
//! - [`check`]: where the answer changes the diagnosis of a failure no rule explains, a finding
//!   that explains it: the text names an HCA or interface the printing host does not have, a
//!   rank beyond the communicator's nranks, a CUDA device beyond those the process can see. NCCL's words alone
//!   ("port error", "invalid rank") do not say that; the recorded facts do.
//! - [`annotate`]: every finding that explains a failure gets, as structured evidence (kind
//!   `reference`), what each identifier in that failure's text is; and a launcher or NCCL
//!   variable of a failing process that names a device its host does not have.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::knowledge::references::{self as know, RefKind};
use crate::model::references::{self, Resolution, Status};
use crate::model::JobModel;

/// More reference items than this on one finding are summarized in one line (a job of 1,000
/// ranks each naming its own peer would otherwise list 1,000 peers).
const MAX_ITEMS: usize = 12;

/// The evidence item of one resolution, about process `p` (the one whose text named it).
pub fn evidence_of(job: &JobModel, p: usize, r: &Resolution) -> Evidence {
    let mut e = Evidence::new(EvidenceKind::Reference, r.fact.clone());
    for (k, v) in &r.values {
        e = e.value(k, v);
    }
    e.of(job, p)
}

/// The resolutions of every identifier in the text of call `i` of process `p`, failed at `t`.
pub fn resolutions(job: &JobModel, p: usize, i: usize, t: u64) -> Vec<Resolution> {
    let c = &job.processes[p].calls[i];
    let Some(text) = c.error_text.as_deref() else {
        return Vec::new();
    };
    references::references_in(text)
        .iter()
        .filter_map(|r| references::resolve(job, p, c.comm, t, r))
        .collect()
}

/// What changes the diagnosis, keyed so that one cause is one finding.
fn verdict(r: &Resolution) -> Option<(&'static registry::Declared, String, String, Confidence)> {
    let kind = r.reference.kind;
    let written = &r.reference.written;
    match (r.status, kind) {
        (Status::Absent, RefKind::IbDevice | RefKind::NetInterface) => Some((
            &registry::NAMED_DEVICE_ABSENT,
            format!(
                "The error names {} `{}` that the host it ran on does not have",
                know::what(kind),
                r.values
                    .get("device")
                    .or_else(|| r.values.get("interface"))
                    .and_then(|v| v.as_str())
                    .unwrap_or(written)
            ),
            "Name only devices every host has: check `NCCL_IB_HCA` / `NCCL_SOCKET_IFNAME` (and \
             the HCAs and interfaces each node exposes to the container: `ibv_devices`, `ip \
             link`), or leave them unset so NCCL picks what is present."
                .to_owned(),
            Confidence::Medium,
        )),
        (Status::OutOfRange, RefKind::Rank | RefKind::PeerRank) => Some((
            &registry::NAMED_RANK_OUT_OF_RANGE,
            format!(
                "The error names rank {}, which does not exist in a communicator of {} ranks",
                r.values
                    .get("rank")
                    .map(|v| v.to_string())
                    .unwrap_or_default(),
                r.values
                    .get("nranks")
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            ),
            "Every rank must lie in [0, nranks): check the rank and world size each process \
             passes to ncclCommInitRank (RANK / WORLD_SIZE or the launcher's equivalents) and \
             that all processes of the job agree on nranks."
                .to_owned(),
            Confidence::Medium,
        )),
        (Status::OutOfRange, RefKind::CudaDevice) => Some((
            &registry::NAMED_DEVICE_NOT_VISIBLE,
            format!(
                "The error names CUDA device {}, beyond the GPUs the process can see",
                r.values
                    .get("cuda_device")
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            ),
            "Select a device below the number of visible GPUs: compare the device each rank \
             selects (LOCAL_RANK) with CUDA_VISIBLE_DEVICES and the GPUs of the node."
                .to_owned(),
            Confidence::Medium,
        )),
        _ => None,
    }
}

/// Findings for the failures no other finding explains (except as a consequence) whose text
/// names something that does not exist where it was named. Where a rule already explains the
/// failure, the same answers reach it as evidence ([`annotate`]) instead of a second finding
/// for one cause.
pub fn check(job: &JobModel, found: &[Finding]) -> Vec<Finding> {
    // One set over every finding: scanning each finding's list per failure was failures x
    // explained calls (a million retries of one failing call took CPU-hours).
    let explained_calls: std::collections::HashSet<(usize, usize)> = found
        .iter()
        .filter(|f| f.role() != registry::Role::Consequence)
        .flat_map(|f| f.explains.iter().copied())
        .collect();
    let explained = |p: usize, i: usize| explained_calls.contains(&(p, i));
    let mut findings: Vec<(String, Finding)> = Vec::new();
    for (p, i, t) in job.failures_with_text() {
        if explained(p, i) {
            continue;
        }
        for r in resolutions(job, p, i, t) {
            let Some((id, title, remedy, confidence)) = verdict(&r) else {
                continue;
            };
            let key = format!("{}\u{0}{title}", id.id());
            let k = match findings.iter().position(|(x, _)| *x == key) {
                Some(k) => k,
                None => {
                    let f = Finding::new(id, title, confidence).remedy(&remedy);
                    findings.push((key, f));
                    findings.len() - 1
                }
            };
            let f = &mut findings[k].1;
            f.involve(job, p);
            f.explain(p, i);
            f.fact(evidence_of(job, p, &r));
            f.fact(Evidence::call(&job.processes[p].calls[i]).of(job, p));
        }
    }
    findings.into_iter().map(|(_, f)| f).collect()
}

/// Adds what the identifiers in each explained failure's text are to `f`, and the variables
/// of its processes that name absent devices.
pub fn annotate(job: &JobModel, f: &mut Finding) {
    let mut items: Vec<Evidence> = Vec::new();
    for &(p, i) in &f.explains {
        let Some(c) = job.processes.get(p).and_then(|pm| pm.calls.get(i)) else {
            continue;
        };
        if !c.reports_error() {
            continue;
        }
        for r in resolutions(job, p, i, c.fail_time()) {
            crate::finding::evidence::add(&mut items, evidence_of(job, p, &r));
        }
    }
    // Variables only for the processes whose failure the finding explains: a condition that
    // explains nothing (an environment difference) gains no more lines.
    let mut failed: Vec<usize> = f.explains.iter().map(|&(p, _)| p).collect();
    failed.sort_unstable();
    failed.dedup();
    for p in failed {
        for (var, _, r) in references::absent_in_variables(job, p) {
            // A variable the finding already quotes is its own subject: said once.
            let quoted = f.evidence.iter().any(|e| {
                e.kind == EvidenceKind::Env
                    && e.values.get("name").and_then(|v| v.as_str()) == Some(var.as_str())
            });
            if quoted {
                continue;
            }
            crate::finding::evidence::add(&mut items, evidence_of(job, p, &r));
        }
    }
    let extra = items.len().saturating_sub(MAX_ITEMS);
    for e in items.into_iter().take(MAX_ITEMS) {
        f.fact(e);
    }
    if extra > 0 {
        f.fact(
            Evidence::new(
                EvidenceKind::Reference,
                format!("{extra} more identifiers named by these errors are not listed"),
            )
            .value("not_listed", extra),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::{host_facts_json, Scenario};
    use ncclshim_format::CallId;
    use serde_json::json;

    fn with_hcas(host: &str, hcas: &[&str]) -> serde_json::Value {
        let mut v = host_facts_json(host);
        v["infiniband"] = json!(hcas);
        v["dev_infiniband"] = json!(true);
        v
    }

    #[test]
    fn an_hca_the_host_does_not_have_is_named_with_what_is_present() {
        let (_, fs) = analyze(&["node3", "node3"], |s: &mut Scenario| {
            s.snapshot_all(22203);
            for r in 0..2 {
                s.ranks[r].host_facts(&with_hcas("node3", &["mlx5_0", "mlx5_1"]));
            }
            s.ranks[0].init_rank(
                2,
                0,
                0x77,
                0,
                2,
                Some("NET/IB : mlx5_2:1 Got async error event: port error"),
                22203,
            );
            s.ranks[1].init_rank(2, 1, 0x77, 1, 0, None, 22203);
        });
        // The port error is explained by the IB rules; the absent HCA is evidence on that finding.
        let f = fs
            .iter()
            .find(|f| f.explains.iter().any(|&(p, _)| p == 0))
            .expect("a finding explains rank 0's failure");
        assert!(
            f.evidence
                .iter()
                .any(|e| e.contains("mlx5_2 is not present on node3 (present: mlx5_0, mlx5_1)")),
            "{:?}",
            f.evidence
        );
    }

    #[test]
    fn a_rank_beyond_nranks_and_a_peer_that_failed_first() {
        let (_, fs) = analyze(&["node1", "node2"], |s: &mut Scenario| {
            s.snapshot_all(22203);
            let c0 = s.ranks[0].init_rank(2, 0, 0x77, 0, 0, None, 22203);
            let c1 = s.ranks[1].init_rank(2, 1, 0x77, 1, 0, None, 22203);
            s.step();
            s.ranks[1].coll(
                CallId::NcclAllReduce,
                c1,
                1,
                1024,
                7,
                0,
                0,
                1,
                Some("Cuda failure 'an illegal memory access was encountered'"),
            );
            s.step();
            s.ranks[0].coll(
                CallId::NcclAllReduce,
                c0,
                1,
                1024,
                7,
                0,
                0,
                6,
                Some("Rank 0 has no transport for P2P peer 1 on channel 0/2; peer 5 unknown"),
            );
        });
        let f = find(&fs, registry::NAMED_RANK_OUT_OF_RANGE.id()).expect("rank 5 of 2");
        assert!(f.title.contains("rank 5"), "{}", f.title);
        let all: Vec<String> = fs
            .iter()
            .flat_map(|f| f.evidence.iter().map(|e| e.text.clone()))
            .collect();
        assert!(
            all.iter()
                .any(|t| t.contains("peer 1 is on host node2") && t.contains("before this error")),
            "{all:#?}"
        );
    }
}
