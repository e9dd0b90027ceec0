//! Catalog C27: processes disagree on the number of ranks of one communicator (same uniqueId, different
//! `nranks`): "Bootstrap Root : mismatch in rank count" / "mismatch in info from procs".

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use crate::rules::text::text_is_entry;

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut out = Vec::new();
    for (&comm, view) in &job.comms {
        let texts: Vec<(usize, usize)> = job
            .processes
            .iter()
            .enumerate()
            .flat_map(|(p, pm)| {
                pm.failed_calls()
                    .filter(|(_, c)| text_is_entry(c, &["bootstrap-rank-count-mismatch"]))
                    .filter(move |(_, c)| c.arg("uid_hash") == Some(comm))
                    .map(move |(i, _)| (p, i))
            })
            .collect();
        if view.nranks_claims.len() < 2 && texts.is_empty() {
            continue;
        }
        let mut f = Finding::new(
            &registry::NRANKS_DISAGREEMENT,
            "Processes disagree on the number of ranks of one communicator",
            Confidence::High,
        )
        .remedy(
            "Make WORLD_SIZE / nranks consistent with the number of processes actually launched.",
        );
        for (n, ps) in &view.nranks_claims {
            f.fact(
                Evidence::new(
                    EvidenceKind::Communicator,
                    format!("comm {comm:#x}: called init with nranks={n}"),
                )
                .value("comm", format!("{comm:#x}"))
                .value("nranks", n)
                .of_all(job, ps),
            );
            for &p in ps {
                f.involve(job, p);
                if let Some(ws) = job.processes[p].env_var("WORLD_SIZE") {
                    f.fact(Evidence::env("WORLD_SIZE", Some(ws), "").of(job, p));
                }
            }
        }
        for (p, i) in texts {
            f.involve(job, p);
            f.explain(p, i);
            f.fact(Evidence::call(&job.processes[p].calls[i]).of(job, p));
        }
        // Every failed or stuck init on this communicator is this problem.
        for ps in view.nranks_claims.values() {
            for &p in ps {
                for (i, c) in job.processes[p].failed_calls() {
                    if c.is_init() && c.arg("uid_hash") == Some(comm) {
                        f.explain(p, i);
                    }
                }
            }
        }
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;

    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::WORLD_UID;

    #[test]
    fn six_versus_three() {
        let (_, fs) = analyze(&["n0", "n0", "n0"], |s| {
            s.snapshot_all(22005);
            s.ranks[0].init_rank_in_flight(6, 0, WORLD_UID, 0);
            s.ranks[1].init_rank_in_flight(3, 1, WORLD_UID, 1);
            s.ranks[2].init_rank_in_flight(3, 2, WORLD_UID, 2);
        });
        let f = find(&fs, registry::NRANKS_DISAGREEMENT.id()).expect("C27");
        assert!(f.evidence.iter().any(|e| e.ranks == [1, 2]
            && e.contains("ranks 1-2 on n0: comm ")
            && e.contains("called init with nranks=3")));
        assert!(f
            .evidence
            .iter()
            .any(|e| e.ranks == [0] && e.values["nranks"] == 6));
    }
}
