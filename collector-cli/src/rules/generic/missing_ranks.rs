//! Ranks that never arrived: a communicator's nranks says N, but fewer ranks left any trace of
//! it. They never started, never reached NCCL, or their dumps were not collected; the ranks that
//! did arrive wait in init (RANK_NOT_JOIN in NCCLX's terms).

use crate::model::JobModel;
use crate::rules::{rank_list, Confidence, Evidence, EvidenceKind, Finding, Severity};

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut out = Vec::new();
    for (&comm, view) in &job.comms {
        let missing = view.missing();
        if missing.is_empty() || view.nranks_claims.len() > 1 {
            continue; // nranks disagreement is C27's finding
        }
        let n = view.nranks();
        let present: Vec<(u32, usize)> = job.comm_members(comm);
        let waiting: Vec<u32> = present
            .iter()
            .filter(|(_, p)| {
                job.processes[*p]
                    .calls
                    .iter()
                    .any(|c| c.is_init() && c.in_flight() && c.arg("uid_hash") == Some(comm))
            })
            .map(|(r, _)| *r)
            .collect();
        let mut f = Finding::new(
            "ranks-never-arrived",
            None,
            format!(
                "{} of {n} ranks of communicator {comm:#x} left no trace",
                missing.len()
            ),
            if waiting.is_empty() {
                Severity::Contributing
            } else {
                Severity::Primary
            },
            if waiting.is_empty() {
                Confidence::Low
            } else {
                Confidence::Medium
            },
        )
        .remedy(
            "Find out why these ranks did not reach NCCL: did the launcher start them (all nodes, \
             right nproc_per_node)? Did they crash before init (their stderr)? Were their dumps \
             collected (same NCCLSHIM_DIR on every node)?",
        );
        f.ranks = missing.clone();
        let ranks_noun = |rs: &[u32]| {
            format!(
                "{} {}",
                if rs.len() == 1 { "rank" } else { "ranks" },
                rank_list(rs)
            )
        };
        f.fact(
            Evidence::new(
                EvidenceKind::Communicator,
                format!(
                    "comm {comm:#x}: nranks={n}; no dump mentions {}",
                    ranks_noun(&missing)
                ),
            )
            .value("comm", format!("{comm:#x}"))
            .value("nranks", n)
            .value("ranks_missing", &missing),
        );
        if !waiting.is_empty() {
            let ps: Vec<usize> = present
                .iter()
                .filter(|(r, _)| waiting.contains(r))
                .map(|&(_, p)| p)
                .collect();
            f.fact(
                Evidence::new(
                    EvidenceKind::Communicator,
                    format!("comm {comm:#x}: still inside communicator init, waiting for the missing ranks"),
                )
                .value("comm", format!("{comm:#x}"))
                .value("waiting_in_init", true)
                .of_all(job, &ps),
            );
        }
        let present_ranks: Vec<u32> = present.iter().map(|(r, _)| *r).collect();
        f.fact(
            Evidence::new(
                EvidenceKind::Communicator,
                format!("comm {comm:#x}: present: {}", ranks_noun(&present_ranks)),
            )
            .value("comm", format!("{comm:#x}"))
            .value("ranks_present", &present_ranks),
        );
        for (_, p) in &present {
            f.process_ids.insert(*p);
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
    fn two_of_four_waiting_in_init() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22005);
            s.ranks[0].init_rank_in_flight(4, 0, WORLD_UID, 0);
            s.ranks[1].init_rank_in_flight(4, 1, WORLD_UID, 1);
        });
        let f = find(&fs, "ranks-never-arrived").expect("missing");
        assert_eq!(f.ranks, vec![2, 3]);
        assert_eq!(f.severity, Severity::Primary);
    }
}
