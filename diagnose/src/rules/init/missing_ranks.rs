//! Ranks that never arrived: a communicator's nranks says N, but fewer ranks left any trace of
//! it. They never started, never reached NCCL, or their dumps were not collected; the ranks that
//! did arrive wait in init (RANK_NOT_JOIN in NCCLX's terms).
//!
//! When every root of the job's story is a reaction (a peer closed the connection, an abort, a
//! request to stop) and a rank of the communicator left no dump, the rank without a dump is
//! where the job failed first: the finding is then `failing-rank-left-no-dump` ("rank 0 left no
//! dump; the others saw it fail"), explaining the survivors' errors, instead of an echo being
//! taken for the cause. The verdict decides its severity like any other.

use crate::finding::registry;
use crate::finding::words::{name_processes, rank_list};
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use crate::story::progress::Place;
use crate::story::{NodeKind, Story};
use std::collections::BTreeSet;

pub fn check(job: &JobModel, story: &Story) -> Vec<Finding> {
    // The story's roots when every one is a reaction to something the dumps do not show: the
    // failures on ranks that left a dump are echoes (a vanished rank is a failure of its own).
    let roots = story.roots();
    let echo_roots: Vec<usize> = if !roots.is_empty()
        && roots
            .iter()
            .all(|&i| story.nodes[i].kind != NodeKind::Vanished && story.is_reaction(job, i))
    {
        roots
    } else {
        Vec::new()
    };
    // (finding, nranks, present processes, missing count) per communicator missing ranks.
    let mut out: Vec<(Finding, u32, BTreeSet<usize>, usize)> = Vec::new();
    for (&comm, view) in &job.comms {
        let missing = view.missing();
        if missing.is_empty() || view.nranks_claims.len() > 1 {
            continue; // nranks disagreement is C27's finding
        }
        let n = view.nranks();
        let present: Vec<(u32, usize)> = job.comm_members(comm);
        // The ranks the story places inside this communicator's init, still waiting for the
        // ranks that never came.
        let waiting: Vec<u32> = story
            .comm(comm)
            .map(|c| {
                c.members
                    .iter()
                    .filter(|m| matches!(m.place, Place::InInit { .. }))
                    .map(|m| m.rank)
                    .collect()
            })
            .unwrap_or_default();
        let mut f = Finding::new(
            &registry::RANKS_NEVER_ARRIVED,
            format!(
                "{} of {n} ranks of communicator {comm:#x} left no trace",
                missing.len()
            ),
            if waiting.is_empty() {
                Confidence::Low
            } else {
                Confidence::Medium
            },
        )
        .remedy(&missing_remedy(job, &present, &waiting));
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
        let present_ps: Vec<usize> = present.iter().map(|&(_, p)| p).collect();
        let echoes: Vec<usize> = echo_roots
            .iter()
            .copied()
            .filter(|&i| present_ps.contains(&story.nodes[i].process))
            .collect();
        let f = if echoes.is_empty() {
            f
        } else {
            left_no_dump(job, story, comm, f, &missing, &present_ps, &echoes)
        };
        out.push((f, n, present_ps.into_iter().collect(), missing.len()));
    }
    one_absence(out)
}

/// One finding per absence, not per communicator: a process that left no dump is missing from
/// every communicator it belonged to (the world and each sub-communicator split from it). A
/// smaller communicator missing no more ranks than a larger one whose present processes include
/// all of its own is told inside the larger one's finding, as one more communicator fact.
fn one_absence(mut found: Vec<(Finding, u32, BTreeSet<usize>, usize)>) -> Vec<Finding> {
    found.sort_by_key(|(_, n, _, _)| std::cmp::Reverse(*n));
    let mut kept: Vec<(Finding, u32, BTreeSet<usize>, usize)> = Vec::new();
    for (f, n, present, missing) in found {
        let host = kept.iter_mut().find(|(k, kn, kp, km)| {
            k.id() == f.id() && *kn >= n && *km >= missing && present.is_subset(kp)
        });
        match host {
            Some((k, ..)) => {
                for e in f.evidence.into_iter().filter(|e| {
                    e.values.contains_key("ranks_missing")
                        || e.values.contains_key("waiting_in_init")
                }) {
                    k.fact(e);
                }
                k.process_ids.extend(f.process_ids);
                k.explains.extend(f.explains);
            }
            None => kept.push((f, n, present, missing)),
        }
    }
    kept.into_iter().map(|(f, ..)| f).collect()
}

/// `never_arrived` (the missing-ranks finding of `comm`) told as the failure of the ranks
/// without a dump: its facts, plus each echo (a root of the story on a present rank) it explains.
fn left_no_dump(
    job: &JobModel,
    story: &Story,
    comm: u64,
    never_arrived: Finding,
    missing: &[u32],
    present: &[usize],
    echoes: &[usize],
) -> Finding {
    // A communicator whose init returned on a present rank was complete: the missing ranks did
    // join it; only their dumps are missing.
    let joined = present.iter().any(|&p| {
        job.processes[p].calls.iter().any(|c| {
            c.is_init() && !c.in_flight() && !c.failed() && c.arg("uid_hash") == Some(comm)
        })
    });
    let missing_noun = format!(
        "{} {}",
        if missing.len() == 1 { "rank" } else { "ranks" },
        rank_list(missing)
    );
    let survivors: Vec<usize> = echoes.iter().map(|&i| story.nodes[i].process).collect();
    let mut f = Finding::new(
        &registry::FAILING_RANK_LEFT_NO_DUMP,
        format!(
            "{missing_noun} of communicator {comm:#x} left no dump; {} saw it fail: its cause cannot be seen here",
            name_processes(job, &survivors)
        ),
        Confidence::Medium,
    )
    .remedy(&format!(
        "Collect {missing_noun}'s dump (the same NCCLSHIM_DIR on every node, copied from every \
         node) and its stderr / launcher log (exit status, dmesg / OOM-killer messages): its own \
         error is the cause; the errors listed here follow from it."
    ));
    f.ranks = never_arrived.ranks;
    f.process_ids = never_arrived.process_ids;
    f.evidence = never_arrived.evidence;
    f.fact(
        Evidence::new(
            EvidenceKind::Inference,
            if joined {
                format!("{missing_noun} joined the communicator (its init completed on the other ranks) but left no dump")
            } else {
                format!("no dump of {missing_noun}: it never arrived, or its dump was not collected")
            },
        )
        .value("comm", format!("{comm:#x}"))
        .value("ranks_missing", missing)
        .value("joined", joined),
    );
    let firsts: std::collections::HashMap<usize, crate::model::JobFailure> = job
        .first_failure_per_process()
        .into_iter()
        .map(|e| (e.process, e))
        .collect();
    for &i in echoes {
        let node = &story.nodes[i];
        let Some(failure) = firsts.get(&node.process) else {
            continue;
        };
        if let NodeKind::Error(c) | NodeKind::AsyncError(c) = node.kind {
            f.explain(node.process, c);
        }
        f.fact(
            Evidence::new(
                EvidenceKind::Inference,
                format!("saw it fail: {}", job.describe(failure)),
            )
            .value("echo", job.describe(failure))
            .of(job, node.process),
        );
    }
    f
}

/// What to look at for ranks that never reached init. When the present ranks wait inside init,
/// they got the uniqueId and the missing ones did not call NCCL at all: how the launcher's
/// programs usually hand the id around (`knowledge/launchers.toml`, `id_exchange`) says what
/// keeps it from arriving.
fn missing_remedy(job: &JobModel, present: &[(u32, usize)], waiting: &[u32]) -> String {
    const PLAIN: &str =
        "Find out why these ranks did not reach NCCL: did the launcher start them (all nodes, \
         right nproc_per_node)? Did they crash before init (their stderr)? Were their dumps \
         collected (same NCCLSHIM_DIR on every node)?";
    if waiting.is_empty() {
        return PLAIN.to_owned();
    }
    let exchange = present.iter().find_map(|&(_, p)| {
        let env = job.processes[p].env.as_ref()?;
        crate::knowledge::launchers::detected(env)
            .into_iter()
            .find_map(|l| l.id_exchange.clone())
    });
    match exchange {
        Some(how) => format!(
            "The other ranks got the uniqueId and wait inside init; these never called NCCL. Under this launcher {how}. Also check that the launcher started them and their stderr, and that their dumps were collected (same NCCLSHIM_DIR on every node)."
        ),
        None => format!(
            "The other ranks got the uniqueId and wait inside init; these never called NCCL: check how the uniqueId reaches every rank (the application's broadcast or store must complete on all of them before init), that the launcher started them, and their stderr. {}",
            "Were their dumps collected (same NCCLSHIM_DIR on every node)?"
        ),
    }
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    use crate::finding::Severity;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::WORLD_UID;

    #[test]
    fn two_of_four_waiting_in_init() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22005);
            s.ranks[0].init_rank_in_flight(4, 0, WORLD_UID, 0);
            s.ranks[1].init_rank_in_flight(4, 1, WORLD_UID, 1);
        });
        let f = find(&fs, registry::RANKS_NEVER_ARRIVED.id()).expect("missing");
        assert_eq!(f.ranks, vec![2, 3]);
        assert_eq!(f.severity, Severity::Primary);
    }

    /// One process without a dump is missing from the world and from the sub-communicator it
    /// belonged to: one finding, the sub-communicator a fact of it (NCCL's NVLS jobs split
    /// dozens of communicators; one finding each was the same absence told dozens of times).
    #[test]
    fn one_absence_is_one_finding_across_sub_communicators() {
        const SUB_A: u64 = 0x5eed_0000_0000_00a0;
        const SUB_B: u64 = 0x5eed_0000_0000_00b0;
        let (_, fs) = analyze(&["n0", "n0", "n1"], |s| {
            s.snapshot_all(22005);
            for (i, r) in s.ranks.iter_mut().enumerate() {
                r.init_rank_in_flight(4, i as u64, WORLD_UID, i as u64);
            }
            // World ranks 0-1 in one pair, 2-3 in the other; rank 3 left no dump.
            s.ranks[0].init_rank_in_flight(2, 0, SUB_A, 0);
            s.ranks[1].init_rank_in_flight(2, 1, SUB_A, 1);
            s.ranks[2].init_rank_in_flight(2, 0, SUB_B, 2);
        });
        let never: Vec<_> = fs
            .iter()
            .filter(|f| f.id() == registry::RANKS_NEVER_ARRIVED.id())
            .collect();
        assert_eq!(never.len(), 1, "{never:#?}");
        assert_eq!(never[0].ranks, vec![3], "the world's numbering");
        assert!(
            never[0].evidence.iter().any(|e| e
                .values
                .get("comm")
                .is_some_and(|c| c == &format!("{SUB_B:#x}"))),
            "the sub-communicator stays a fact: {:#?}",
            never[0].evidence
        );
    }

    #[test]
    fn echoes_of_a_rank_without_dump_make_it_the_primary_story() {
        // Ranks 1-2 of 3 left dumps; rank 0 (no dump) failed: the survivors only saw their
        // peer close the connection, which is a consequence, never the cause.
        let (_, fs) = analyze(&["b", "c"], |s| {
            for (i, r) in s.ranks.iter_mut().enumerate() {
                r.get_version(22105);
                let comm = r.init_rank(3, i as u64 + 1, WORLD_UID, 0, 0, None, 22105);
                r.async_error(
                    comm,
                    6,
                    Some("socketProgress: Connection closed by remote peer 10.0.0.1<33759>"),
                );
            }
        });
        let f = find(&fs, registry::FAILING_RANK_LEFT_NO_DUMP.id())
            .expect("the rank without a dump is the story");
        assert!(
            find(&fs, registry::RANKS_NEVER_ARRIVED.id()).is_none(),
            "one finding for the missing rank"
        );
        assert_eq!(f.severity, Severity::Primary);
        assert_eq!(f.ranks, vec![0]);
        assert_eq!(f.explains.len(), 2, "{:?}", f.explains);
        assert!(f.title.contains("left no dump"), "{}", f.title);
        let echo = find(&fs, registry::PEER_FAILURE_SEEN_BY_SURVIVORS.id()).expect("C20");
        assert_eq!(echo.severity, Severity::Contributing);
        assert!(fs
            .iter()
            .all(|f| !(f.consequence && f.severity == Severity::Primary)));
    }
}
