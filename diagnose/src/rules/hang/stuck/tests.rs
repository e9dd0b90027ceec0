//! The hang analysis's reasoning, one capability per test, on synthetic dumps written by the real
//! writer (`ncclshim_fixtures::synth`).

use crate::finding::registry;
use crate::rules::testutil::{analyze, find};
use ncclshim_format::CallId;

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
