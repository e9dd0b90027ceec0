//! Hang analysis per communicator, from the shim's calls and the profiler's events together:
//! a rank is stuck INSIDE NCCL when a call on the communicator never returned or a collective's
//! profiler record never stopped (or its kernel never ended); it is stuck OUTSIDE NCCL when its
//! last call returned and it issued fewer collectives than the others — the rank everybody waits
//! for, usually the one to debug. The profiler's running aggregates (operations started and
//! completed per rank, never lost to wrap) are a third source of progress, and each hang
//! finding states every rank's counts, so the rank with fewer operations than its peers is
//! named by a number that covers the whole job.
//!
//! The profiler's events are read as NCCL emits them (`knowledge/profiler.toml`): Coll events
//! are numbered per function, so a rank's progress is the count of its numbered collectives, not
//! the highest number; P2p events carry no number; a send/recv to the rank itself never reports
//! a GPU end, so its missing end is no hang; and a collective whose kernel ended on a peer did
//! not hang on this rank either (the peer could not have finished it alone).

use crate::finding::registry;
use crate::finding::words::rank_list;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use crate::story::ending::Ending;
use crate::story::position::Inside;
use crate::story::progress::{Behind, Place};
use crate::story::{NodeKind, Story};

/// One rank as the hang analysis compares it: the story's position of it, with `issued` the
/// position in the one numbering every rank of the communicator has (see `check`).
#[derive(Debug)]
struct RankState<'s> {
    rank: u32,
    process: usize,
    issued: Option<u64>,
    shim_seq: Option<u64>,
    prof_seq: Option<u64>,
    agg: Option<(u64, u64)>,
    inside: Option<&'s Inside>,
    last_call: Option<&'s str>,
}

/// Every rank's operation counts from the profiler's aggregates, one fact per distinct count
/// (ranks with equal counts share it), when every rank has them and they differ or a rank is
/// stuck: the rank that started fewer operations than the others is the one they wait for.
fn aggregate_facts(job: &JobModel, comm: u64, states: &[RankState], f: &mut Finding) {
    if states.is_empty() || states.iter().any(|s| s.agg.is_none()) {
        return;
    }
    let most = states
        .iter()
        .filter_map(|s| s.agg)
        .map(|a| a.0)
        .max()
        .unwrap_or(0);
    for s in states {
        let Some((started, ended)) = s.agg else {
            continue;
        };
        let behind = most - started;
        let text = if behind > 0 {
            format!(
                "comm {comm:#x}: the profiler counted {started} operations started ({ended} ended on the GPU), {behind} fewer than the others"
            )
        } else {
            format!(
                "comm {comm:#x}: the profiler counted {started} operations started ({ended} ended on the GPU)"
            )
        };
        f.fact(
            Evidence::new(EvidenceKind::Progress, text)
                .value("comm", format!("{comm:#x}"))
                .value("source", "profiler_aggregates")
                .value("ops_started", started)
                .value("ops_ended", ended)
                .value("ops_behind", behind)
                .of(job, s.process),
        );
    }
}

/// How long live ranks must have recorded nothing before an unfinished operation is a hang,
/// unless the user chose otherwise (`ncclshim report --stall-after`): long enough that a slow
/// step (a big all-reduce, a data-loader pause) of a job read while it runs is not called hung.
pub const DEFAULT_STALL_NS: u64 = 10_000_000_000;

/// The hang findings at the instant `now_ns`; `stall_ns`: how long live ranks must have been
/// quiet (see [`DEFAULT_STALL_NS`]).
pub fn check(job: &JobModel, story: &Story, now_ns: u64, stall_ns: u64) -> Vec<Finding> {
    let mut out = Vec::new();
    let blocked = &story.blocked_on;
    for &comm in job.comms.keys() {
        let Some(told) = story.comm(comm) else {
            continue;
        };
        // Ranks that never arrived explain why the others wait (`missing_ranks`).
        if told.members.len() < 2 || !job.comms[&comm].missing().is_empty() {
            continue;
        }
        // Read while the job runs: an operation in progress is not a hang until the
        // communicator's ranks have recorded nothing for a while.
        // Hang analysis runs whatever else failed: the verdict decides whether the hang is the
        // cause (a laggard the others' aborts follow from) or a consequence (ranks blocked
        // after a peer crashed).
        if !story.stalled_at(job, comm, now_ns, stall_ns) {
            continue;
        }
        let stall = told.stall.as_ref();
        let mut states: Vec<RankState> = told
            .members
            .iter()
            .map(|m| {
                let at = &m.position;
                RankState {
                    // Titles name ranks as the rest of the report does, by their place in
                    // the job; a subgroup's own numbering would name another process.
                    rank: job.processes[m.process].world_rank().unwrap_or(m.rank),
                    process: m.process,
                    issued: at.shim.max(at.profiler),
                    shim_seq: at.shim,
                    prof_seq: at.profiler,
                    agg: at.aggregates,
                    inside: at.inside.as_ref(),
                    last_call: at.last_call.as_deref(),
                }
            })
            .collect();
        // The shim's and the profiler's sequence numbers are counted separately: compare ranks on
        // one source when every rank has it.
        if states.iter().all(|s| s.shim_seq.is_some()) {
            states.iter_mut().for_each(|s| s.issued = s.shim_seq);
        } else if states.iter().all(|s| s.prof_seq.is_some()) {
            states.iter_mut().for_each(|s| s.issued = s.prof_seq);
        } else if states.iter().all(|s| s.agg.is_some_and(|a| a.0 > 0)) {
            // Only the aggregates cover every rank (records lost to wrap, v1-v3 plugins).
            states
                .iter_mut()
                .for_each(|s| s.issued = s.agg.map(|a| a.0 - 1));
        }
        let max = states.iter().filter_map(|s| s.issued).max();
        let any_inside = states.iter().any(|s| s.inside.is_some());
        // The story's stall (collectives compared per function, as NCCL numbers them) names
        // the ranks behind, and only those still in the job (a rank that left or crashed is
        // its own finding); without one, the sequence numbers of the one source all ranks have.
        let laggards: Vec<&RankState> = match stall {
            Some(st) => states
                .iter()
                // A rank inside another operation that never completed is stuck inside NCCL
                // (a desync: each side waits in its own collective), not outside it.
                .filter(|s| {
                    s.inside.is_none()
                        && !blocked.contains_key(&s.process)
                        && st.behind.iter().any(|b| b.1 == s.process)
                        && story
                            .nodes
                            .iter()
                            .any(|n| n.process == s.process && n.kind == NodeKind::Behind(comm))
                })
                .collect(),
            None => states
                .iter()
                .filter(|s| {
                    s.inside.is_none() && !blocked.contains_key(&s.process) && s.issued < max
                })
                .filter(|s| !matches!(story.ends[s.process], Ending::Exited { .. }))
                .collect(),
        };
        // The ranks behind the stall left the job, crashed or vanished: their own findings
        // tell it, and the waiters are no transport hang. (Ranks inside a different operation
        // keep the finding: where each is stuck is the desync's evidence.)
        // Ranks waiting in communicator init while a member failed (its init returned an
        // error) wait for that member: its own finding tells why; this is no transport hang.
        let waiting_in_init = told
            .members
            .iter()
            .any(|m| matches!(m.place, Place::InInit { .. }))
            && told
                .members
                .iter()
                .all(|m| matches!(m.place, Place::InInit { .. }) || story.has_node(m.process))
            && told.members.iter().any(|m| story.has_node(m.process));
        if waiting_in_init {
            continue;
        }
        // A rank behind here because it is blocked inside NCCL on another communicator (a
        // receive whose send never matched, a collective of a subgroup) is not outside NCCL:
        // that communicator's findings say why it is blocked, and the ranks waiting for it here
        // are neither a transport hang nor a desync of this communicator.
        let behind_blocked_elsewhere = stall.is_some_and(|st| {
            !st.behind.is_empty()
                && st.behind.iter().all(|b| {
                    blocked
                        .get(&b.1)
                        .is_some_and(|cs| cs.iter().any(|&c| c != comm))
                        && states
                            .iter()
                            .any(|s| s.process == b.1 && s.inside.is_none())
                })
        });
        if behind_blocked_elsewhere && laggards.is_empty() {
            continue;
        }
        let behind_inside = stall.is_some_and(|st| {
            states
                .iter()
                .any(|s| s.inside.is_some() && st.behind.iter().any(|b| b.1 == s.process))
        });
        if stall.is_some_and(|st| st.behind.iter().all(|b| b.2 == Behind::NeverIssued))
            && laggards.is_empty()
            && !behind_inside
        {
            continue;
        }
        let not_finished = told
            .members
            .iter()
            .any(|m| !matches!(story.ends[m.process], Ending::Exited { .. }));
        if !(any_inside || (!laggards.is_empty() && not_finished)) {
            continue;
        }
        let inside: Vec<&RankState> = states.iter().filter(|s| s.inside.is_some()).collect();
        let mut f = if !laggards.is_empty() {
            let rs: Vec<u32> = laggards.iter().map(|s| s.rank).collect();
            let (noun, them) = if rs.len() == 1 {
                ("rank", "it")
            } else {
                ("ranks", "them")
            };
            let mut f = Finding::new(&registry::STUCK_OUTSIDE_NCCL,
                format!(
                    "Hang: {noun} {} stopped issuing collectives (stuck outside NCCL); the others wait for {them}",
                    rank_list(&rs)
                ),
                Confidence::High,
            )
            .remedy(
                "Look at what the lagging rank(s) do instead of the next collective: a py-spy/gdb stack \
                 of that process, a data-dependent branch or an exception swallowed on that rank, \
                 uneven data so it ran out of batches, or a slow step (I/O, checkpoint).",
            );
            for s in &laggards {
                f.involve(job, s.process);
                let last = s
                    .last_call
                    .map(str::to_owned)
                    .unwrap_or_else(|| match s.issued {
                        Some(q) => format!("seq {q}"),
                        None => "no collective at all".into(),
                    });
                f.fact(
                    Evidence::new(
                        EvidenceKind::Progress,
                        format!(
                            "comm {comm:#x}: last issued {last}, which completed; the others reached seq {}",
                            max.map(|m| m.to_string()).unwrap_or("?".into())
                        ),
                    )
                    .value("comm", format!("{comm:#x}"))
                    .value("last_issued_seq", s.issued)
                    .value("last_call", s.last_call)
                    .value("others_reached_seq", max)
                    .of(job, s.process),
                );
            }
            f
        } else {
            let same_seq = inside.iter().all(|s| s.issued == max);
            // One operation: every rank inside the same function (a desync puts ranks in
            // different ones even where the shim's per-communicator numbers agree).
            let one_operation = inside.windows(2).all(|w| {
                w[0].inside.as_ref().map(|i| &i.op) == w[1].inside.as_ref().map(|i| &i.op)
            });
            let all = inside.len() == states.len();
            let mut f = Finding::new(&registry::STUCK_INSIDE_NCCL,
                if all {
                    format!("Hang: every rank of communicator {comm:#x} is stuck inside NCCL")
                } else {
                    let rs: Vec<u32> = inside.iter().map(|s| s.rank).collect();
                    let (noun, verb) = if rs.len() == 1 { ("rank", "is") } else { ("ranks", "are") };
                    format!("Hang: {noun} {} {verb} stuck inside NCCL", rank_list(&rs))
                },
                if all && same_seq { Confidence::Medium } else { Confidence::Low },
            )
            .remedy(if one_operation {
                "All ranks entered the same operation and it never completed: suspect the transport. \
                 Bisect with NCCL_P2P_DISABLE=1 (PCIe ACS/IOMMU, consumer-GPU P2P), NCCL_SHM_DISABLE=1, \
                 NCCL_NET=Socket / NCCL_IB_DISABLE=1 (RoCE GID, link errors, firewall), and read NCCL_DEBUG=INFO \
                 of the first run that hangs."
            } else {
                "The ranks wait inside different operations: each waits for peers that issued \
                 something else. Make the sequence of collectives identical on every rank (a \
                 rank-dependent branch around a collective); TORCH_DISTRIBUTED_DEBUG=DETAIL names \
                 the Python call sites."
            });
            for s in &inside {
                f.involve(job, s.process);
            }
            f
        };
        // Ranks stuck in the same place are one item (`Finding::fact` joins equal facts).
        for s in &inside {
            f.process_ids.insert(s.process);
            let Some(i) = s.inside else { continue };
            f.fact(
                Evidence::new(
                    EvidenceKind::Progress,
                    format!("comm {comm:#x}: {}", i.text),
                )
                .value("comm", format!("{comm:#x}"))
                .value("op", &i.op)
                .value("seq", i.seq)
                .value("state", i.state)
                .of(job, s.process),
            );
        }
        aggregate_facts(job, comm, &states, &mut f);
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    use crate::rules::testutil::{analyze, find};

    #[test]
    fn live_ranks_must_be_quiet_before_a_hang_is_called() {
        let (mut job, _) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22203);
            s.init_world(22203);
        });
        let comm = ncclshim_fixtures::synth::WORLD_UID;
        let newest = job.processes.iter().map(|p| p.last_t).max().unwrap();
        let stall = super::DEFAULT_STALL_NS;
        let story = crate::story::Story::build(&job);
        assert!(
            story.stalled_at(&job, comm, newest, stall),
            "dead ranks: always stalled"
        );
        job.processes[0].alive = true;
        assert!(!story.stalled_at(&job, comm, newest + 1_000_000_000, stall));
        assert!(story.stalled_at(&job, comm, newest + stall, stall));
        // A shorter threshold chosen by the user calls the same quiet period a hang.
        assert!(story.stalled_at(&job, comm, newest + 1_000_000_000, 1_000_000_000));
    }
    use ncclshim_format::CallId;

    /// A live hang under PyTorch: the ranks' watchdogs keep polling NCCL (fresh records every
    /// moment) while nothing moves on the communicator. Quiet means no operation issued,
    /// returned or started on it, not no record (the exporter missed the H200 laggard so).
    #[test]
    fn polls_by_a_watchdog_are_no_progress() {
        let (mut job, _) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22803);
            let comms = s.init_world(22803);
            for (r, c) in s.ranks.iter_mut().zip(&comms) {
                r.coll(CallId::NcclAllReduce, *c, 0, 4096, 7, 0, 0, 0, None);
            }
            s.step();
            for (r, c) in s.ranks.iter_mut().zip(&comms) {
                r.async_error(*c, 0, None);
            }
        });
        let comm = ncclshim_fixtures::synth::WORLD_UID;
        let progress = job
            .processes
            .iter()
            .filter_map(|p| p.comm_progress_t(comm))
            .max()
            .expect("the all-reduce is progress");
        let polled = job.processes.iter().map(|p| p.last_t).max().unwrap();
        assert!(polled > progress, "the poll came after the all-reduce");
        for p in &mut job.processes {
            p.alive = true;
        }
        let story = crate::story::Story::build(&job);
        let quiet = polled - progress;
        assert!(story.stalled_at(&job, comm, polled, quiet));
        assert!(!story.stalled_at(&job, comm, polled, quiet + 1));
    }

    #[test]
    fn one_rank_never_issues_the_collective() {
        let (_, fs) = analyze(&["n0", "n0", "n1", "n1"], |s| {
            s.snapshot_all(22203);
            let comms = s.init_world(22203);
            for (r, c) in s.ranks.iter_mut().zip(&comms) {
                r.coll(CallId::NcclAllReduce, *c, 0, 4096, 7, 0, 0, 0, None);
                r.prof_init(ncclshim_fixtures::synth::WORLD_UID, 4, u64::from(r.rank));
                r.prof_coll(
                    ncclshim_fixtures::synth::WORLD_UID,
                    0,
                    2,
                    4096,
                    7,
                    0,
                    true,
                    true,
                );
                if r.rank != 2 {
                    r.coll(CallId::NcclAllReduce, *c, 1, 4096, 7, 0, 0, 0, None);
                    r.prof_coll(
                        ncclshim_fixtures::synth::WORLD_UID,
                        1,
                        2,
                        4096,
                        7,
                        0,
                        false,
                        false,
                    );
                }
            }
        });
        let f = find(&fs, registry::STUCK_OUTSIDE_NCCL.id()).expect("stuck outside");
        assert_eq!(f.ranks, vec![2]);
        assert!(
            f.evidence.iter().any(|e| e.ranks == [0, 1, 3]
                && e.values["seq"] == 1
                && e.text.contains("collective seq 1")),
            "{:?}",
            f.evidence
        );
    }

    /// Only the profiler's aggregates cover every rank (no per-operation records survived):
    /// their operation counts name the rank the others wait for, and every rank's counts are
    /// evidence.
    #[test]
    fn the_aggregates_op_counts_name_the_lagging_rank() {
        let (_, fs) = analyze(&["n0", "n0", "n1"], |s| {
            s.snapshot_all(22803);
            s.init_world(22803);
            for r in s.ranks.iter_mut() {
                let ops = if r.rank == 1 { 250 } else { 251 };
                r.prof_aggregates(
                    ncclshim_fixtures::synth::WORLD_UID,
                    3,
                    r.rank as i32,
                    ops,
                    250,
                    4096,
                    10_000,
                );
            }
        });
        let f = find(&fs, registry::STUCK_OUTSIDE_NCCL.id()).expect("stuck outside");
        assert_eq!(f.ranks, vec![1]);
        let counted = |rank: u32| {
            f.evidence
                .iter()
                .find(|e| {
                    e.ranks.contains(&rank)
                        && e.values
                            .get("source")
                            .is_some_and(|v| v == "profiler_aggregates")
                })
                .unwrap_or_else(|| panic!("rank {rank}'s counts: {:?}", f.evidence))
        };
        assert_eq!(counted(1).values["ops_started"], 250);
        assert_eq!(counted(1).values["ops_behind"], 1);
        assert_eq!(counted(0).values["ops_started"], 251);
        assert_eq!(counted(0).ranks, vec![0, 2], "equal counts are one fact");
    }

    #[test]
    fn everyone_inside_the_same_collective() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22203);
            s.init_world(22203);
            for r in s.ranks.iter_mut() {
                r.prof_init(ncclshim_fixtures::synth::WORLD_UID, 2, u64::from(r.rank));
                r.prof_coll(
                    ncclshim_fixtures::synth::WORLD_UID,
                    0,
                    2,
                    4096,
                    7,
                    0,
                    false,
                    false,
                );
            }
        });
        let f = find(&fs, registry::STUCK_INSIDE_NCCL.id()).expect("stuck inside");
        assert_eq!(f.ranks, vec![0, 1]);
        assert!(find(&fs, registry::STUCK_OUTSIDE_NCCL.id()).is_none());
    }

    /// The diagnosis is a function of the job and the instant of analysis: the same dumps of
    /// live ranks inside one collective are "still running" a second after the last record and
    /// a hang once the stall threshold has passed.
    #[test]
    fn the_instant_of_analysis_is_an_input() {
        let (mut job, _) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22203);
            s.init_world(22203);
            for r in s.ranks.iter_mut() {
                r.prof_init(ncclshim_fixtures::synth::WORLD_UID, 2, u64::from(r.rank));
                r.prof_coll(
                    ncclshim_fixtures::synth::WORLD_UID,
                    0,
                    2,
                    4096,
                    7,
                    0,
                    false,
                    false,
                );
            }
        });
        for p in &mut job.processes {
            p.alive = true;
        }
        let newest = job.processes.iter().map(|p| p.last_t).max().unwrap();
        let at = |now_ns| crate::rules::diagnose_with(&job, &crate::rules::Options::at(now_ns));
        assert!(find(
            &at(newest + 1_000_000_000),
            registry::STUCK_INSIDE_NCCL.id()
        )
        .is_none());
        let later = at(newest + super::DEFAULT_STALL_NS);
        assert_eq!(
            find(&later, registry::STUCK_INSIDE_NCCL.id())
                .expect("hang")
                .ranks,
            vec![0, 1]
        );
    }

    /// Kernels of one communicator end in issue order: an operation whose end was not recorded
    /// (in-flight entry reused, end record overwritten) but which has a newer ended operation
    /// after it is not where the ranks are stuck.
    #[test]
    fn an_older_operation_with_a_lost_end_is_not_the_stuck_one() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22203);
            s.init_world(22203);
            for r in s.ranks.iter_mut() {
                r.prof_init(ncclshim_fixtures::synth::WORLD_UID, 2, u64::from(r.rank));
                r.prof_coll(
                    ncclshim_fixtures::synth::WORLD_UID,
                    0,
                    2,
                    4096,
                    7,
                    0,
                    true,
                    false,
                );
                r.prof_coll(
                    ncclshim_fixtures::synth::WORLD_UID,
                    1,
                    2,
                    4096,
                    7,
                    0,
                    true,
                    true,
                );
                r.prof_coll(
                    ncclshim_fixtures::synth::WORLD_UID,
                    2,
                    2,
                    4096,
                    7,
                    0,
                    true,
                    false,
                );
            }
        });
        let f = find(&fs, registry::STUCK_INSIDE_NCCL.id()).expect("stuck inside");
        assert!(
            f.evidence
                .iter()
                .any(|e| e.text.contains("collective seq 2")),
            "{:?}",
            f.evidence
        );
        assert!(
            !f.evidence
                .iter()
                .any(|e| e.text.contains("collective seq 0")),
            "{:?}",
            f.evidence
        );
    }

    #[test]
    fn a_finished_job_is_not_a_hang() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22203);
            let comms = s.init_world(22203);
            for (r, c) in s.ranks.iter().zip(&comms) {
                r.coll(CallId::NcclAllReduce, *c, 0, 4096, 7, 0, 0, 0, None);
                r.clean_exit();
            }
        });
        assert!(fs.is_empty(), "{fs:?}");
    }

    fn func(name: &[u8]) -> u64 {
        u64::from(ncclshim_format::profnames::NameTable::Func.code_of(name))
    }

    /// Two ranks that ran AllReduces and an all-to-all (whose send/recv to the rank itself
    /// never reports a GPU end on a real NCCL) and then died: the self pair is no hang.
    /// `other_peer_ends`: whether the send/recv pair with the other rank got its GPU end.
    fn all_to_all_then_death(other_peer_ends: bool) -> Vec<crate::finding::Finding> {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            for r in s.ranks.iter_mut() {
                let me = u64::from(r.rank);
                r.prof_init(ncclshim_fixtures::synth::WORLD_UID, 2, me);
                for seq in 0..3 {
                    r.prof_coll(
                        ncclshim_fixtures::synth::WORLD_UID,
                        seq,
                        func(b"AllReduce"),
                        1024,
                        7,
                        0,
                        true,
                        true,
                    );
                }
                for f in [&b"Send"[..], b"Recv"] {
                    r.prof_p2p_summarized(
                        ncclshim_fixtures::synth::WORLD_UID,
                        f,
                        512,
                        1 - me,
                        other_peer_ends,
                    );
                    r.prof_p2p_summarized(ncclshim_fixtures::synth::WORLD_UID, f, 512, me, false);
                }
            }
        });
        fs
    }

    #[test]
    fn a_self_send_recv_without_gpu_end_is_no_hang() {
        let fs = all_to_all_then_death(true);
        assert!(
            find(&fs, registry::STUCK_INSIDE_NCCL.id()).is_none(),
            "{fs:#?}"
        );
        // The same dumps with the pair to the other rank unfinished: a hang, so the test above
        // is not blind.
        let fs = all_to_all_then_death(false);
        let f = find(&fs, registry::STUCK_INSIDE_NCCL.id()).expect("the other pair never ended");
        assert!(
            f.evidence.iter().any(|e| e.text.contains("to/from peer")),
            "{:#?}",
            f.evidence
        );
    }

    /// Rank 1 issued a Broadcast where rank 0 issued its sixth AllReduce: both kernels hang.
    /// The profiler numbers the Broadcast 0, below the AllReduces' 4 that ended, so only start
    /// order (not the number) says it is rank 1's newest operation.
    #[test]
    fn a_hang_in_a_functions_first_collective_after_others_ended_is_found() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            for r in s.ranks.iter_mut() {
                r.prof_init(ncclshim_fixtures::synth::WORLD_UID, 2, u64::from(r.rank));
                for seq in 0..5 {
                    r.prof_coll(
                        ncclshim_fixtures::synth::WORLD_UID,
                        seq,
                        func(b"AllReduce"),
                        1024,
                        7,
                        0,
                        true,
                        true,
                    );
                }
                if r.rank == 0 {
                    r.prof_coll(
                        ncclshim_fixtures::synth::WORLD_UID,
                        5,
                        func(b"AllReduce"),
                        1024,
                        7,
                        0,
                        true,
                        false,
                    );
                } else {
                    r.prof_coll(
                        ncclshim_fixtures::synth::WORLD_UID,
                        0,
                        func(b"Broadcast"),
                        4096,
                        7,
                        0,
                        true,
                        false,
                    );
                }
            }
        });
        let f = find(&fs, registry::STUCK_INSIDE_NCCL.id()).expect("stuck inside");
        assert!(
            f.evidence.iter().any(|e| e.ranks == [1]
                && e.text
                    .contains("collective seq 0 (Broadcast) its kernel never ended")),
            "{:#?}",
            f.evidence
        );
    }

    /// Rank 0's record of AllReduce #3 lacks its end, but rank 1's AllReduce #3 ended: a
    /// collective cannot end on one rank while another still runs it, so nothing hung.
    #[test]
    fn a_collective_that_ended_on_a_peer_is_no_hang() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            for r in s.ranks.iter_mut() {
                r.prof_init(ncclshim_fixtures::synth::WORLD_UID, 2, u64::from(r.rank));
                for seq in 0..4 {
                    let ended = !(r.rank == 0 && seq == 3);
                    r.prof_coll(
                        ncclshim_fixtures::synth::WORLD_UID,
                        seq,
                        func(b"AllReduce"),
                        1024,
                        7,
                        0,
                        true,
                        ended,
                    );
                }
            }
        });
        assert!(
            find(&fs, registry::STUCK_INSIDE_NCCL.id()).is_none(),
            "{fs:#?}"
        );
    }

    /// Rank 0 issued AllReduce, Broadcast; rank 1 AllReduce, AllReduce. Per-function numbers
    /// top out at 0 and 1: compared as bare numbers rank 0 would look one collective behind.
    /// Both issued two collectives.
    #[test]
    fn progress_counts_collectives_across_functions() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            for r in s.ranks.iter_mut() {
                r.prof_init(ncclshim_fixtures::synth::WORLD_UID, 2, u64::from(r.rank));
                r.prof_coll(
                    ncclshim_fixtures::synth::WORLD_UID,
                    0,
                    func(b"AllReduce"),
                    1024,
                    7,
                    0,
                    true,
                    true,
                );
                if r.rank == 0 {
                    r.prof_coll(
                        ncclshim_fixtures::synth::WORLD_UID,
                        0,
                        func(b"Broadcast"),
                        1024,
                        7,
                        0,
                        true,
                        true,
                    );
                } else {
                    r.prof_coll(
                        ncclshim_fixtures::synth::WORLD_UID,
                        1,
                        func(b"AllReduce"),
                        1024,
                        7,
                        0,
                        true,
                        true,
                    );
                }
            }
        });
        assert!(
            find(&fs, registry::STUCK_OUTSIDE_NCCL.id()).is_none(),
            "{fs:#?}"
        );
    }
}
