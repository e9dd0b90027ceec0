//! The story's reasoning, one capability per test, on synthetic dumps written by the real writer
//! (`ncclshim_fixtures::synth`); the lab (`tests/scenarios/`) proves the same through the real shim.

use super::ending::Ending;
use super::{NodeKind, Story};
use crate::finding::registry;
use crate::finding::Severity;
use crate::rules::diagnose_story;
use crate::rules::options::Options;
use crate::rules::testutil::analyze;
use ncclshim_fixtures::synth::WORLD_UID;
use ncclshim_format::CallId;

const V: u64 = 22809;
const AR: CallId = CallId::NcclAllReduce;

/// The primary findings' (id, ranks).
fn primaries(job: &crate::model::JobModel, story: &Story) -> Vec<(String, Vec<u32>)> {
    let opts = Options::at(u64::MAX / 2);
    diagnose_story(job, story, &opts)
        .into_iter()
        .filter(|f| f.severity == Severity::Primary)
        .map(|f| (f.id().to_owned(), f.ranks))
        .collect()
}

#[test]
fn a_laggard_explains_the_aborts_of_the_ranks_that_waited_for_it() {
    let (job, _) = analyze(&["n0", "n0", "n1"], |s| {
        s.snapshot_all(V as i32);
        let comms = s.init_world(V);
        for seq in 0..5 {
            for (r, &comm) in comms.iter().enumerate() {
                s.rank(r).coll(AR, comm, seq, 1024, 7, 0, 0, 0, None);
            }
        }
        // Ranks 0 and 1 issue #5; rank 2 never does. Their watchdog aborts them.
        for (r, &comm) in comms.iter().enumerate().take(2) {
            s.rank(r).coll(AR, comm, 5, 1024, 7, 0, 0, 0, None);
        }
        s.step();
        for (r, &comm) in comms.iter().enumerate().take(2) {
            s.rank(r)
                .raw_call(CallId::NcclCommAbort, comm, &[0; 9], 0, None);
            s.rank(r).fatal_signal(6);
        }
    });
    let story = Story::build(&job);
    assert!(
        matches!(story.ends[0], Ending::Aborted { .. }),
        "{:?}",
        story.ends[0]
    );
    let roots = story.roots();
    assert_eq!(roots.len(), 1, "{:#?}", story.nodes);
    let root = &story.nodes[roots[0]];
    assert_eq!(root.kind, NodeKind::Behind(WORLD_UID));
    assert_eq!(job.processes[root.process].world_rank(), Some(2));
    assert_eq!(
        primaries(&job, &story),
        vec![(registry::STUCK_OUTSIDE_NCCL.id().to_owned(), vec![2])]
    );
}

#[test]
fn a_rank_that_exits_while_its_peers_wait_has_failed_the_job_whatever_its_status() {
    for status in [0, 1] {
        let (mut job, _) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(V as i32);
            let comms = s.init_world(V);
            for seq in 0..3 {
                for (r, &comm) in comms.iter().enumerate() {
                    s.rank(r).coll(AR, comm, seq, 8, 7, 0, 0, 0, None);
                }
            }
            s.rank(0).coll(AR, comms[0], 3, 8, 7, 0, 0, 0, None);
            s.rank(1).clean_exit();
        });
        let p1 = (0..2)
            .find(|&p| job.processes[p].world_rank() == Some(1))
            .unwrap();
        job.processes[p1].exit_status = Some(status);
        let story = Story::build(&job);
        assert!(matches!(story.ends[p1], Ending::Exited { status: Some(s), .. } if s == status));
        assert_eq!(
            primaries(&job, &story),
            vec![(registry::RANK_LEFT_EARLY.id().to_owned(), vec![1])],
            "status {status}"
        );
    }
}

#[test]
fn a_crash_explains_the_remote_errors_and_aborts_that_follow_it() {
    let (job, _) = analyze(&["n0", "n1"], |s| {
        s.snapshot_all(V as i32);
        let comms = s.init_world(V);
        for seq in 0..3 {
            for (r, &comm) in comms.iter().enumerate() {
                s.rank(r).coll(AR, comm, seq, 8, 7, 0, 0, 0, None);
            }
        }
        s.rank(1).fatal_signal(11);
        s.step();
        s.rank(0).async_error(
            comms[0],
            6,
            Some("socketProgress: Connection closed by remote peer n1<40000>"),
        );
        s.rank(0)
            .raw_call(CallId::NcclCommAbort, comms[0], &[0; 9], 0, None);
        s.rank(0).fatal_signal(6);
    });
    let story = Story::build(&job);
    let roots = story.roots();
    assert_eq!(roots.len(), 1, "{:#?}", story.nodes);
    assert_eq!(story.nodes[roots[0]].kind, NodeKind::Signal(11));
    assert_eq!(
        primaries(&job, &story),
        vec![(registry::FATAL_SIGNAL.id().to_owned(), vec![1])]
    );
}

#[test]
fn a_count_mismatch_claims_the_truncation_it_causes_on_the_peer() {
    let (job, _) = analyze(&["n0", "n1"], |s| {
        s.snapshot_all(V as i32);
        let comms = s.init_world(V);
        s.rank(0).coll(AR, comms[0], 0, 1024, 7, 0, 0, 0, None);
        s.rank(1).coll(AR, comms[1], 0, 512, 7, 0, 0, 0, None);
        s.step();
        s.rank(0).async_error(
            comms[0],
            5,
            Some("NET/Socket : peer 10.0.0.2<40000> message truncated : receiving 4096 bytes instead of 2048"),
        );
    });
    let story = Story::build(&job);
    let roots = story.roots();
    assert_eq!(roots.len(), 1, "{:#?}", story.nodes);
    assert!(matches!(
        story.nodes[roots[0]].kind,
        NodeKind::Mismatch { .. }
    ));
    let p = primaries(&job, &story);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].0, registry::COLLECTIVE_SIZE_MISMATCH.id());
}

/// `ncclBcast` (the older name of `ncclBroadcast`) is rooted like it: ranks that broadcast from
/// different roots mismatch on the root, as C19 compares them.
#[test]
fn a_root_mismatch_of_nccl_bcast_is_a_mismatch() {
    let (job, _) = analyze(&["n0", "n0", "n0"], |s| {
        s.snapshot_all(V as i32);
        let comms = s.init_world(V);
        for (r, &comm) in comms.iter().enumerate() {
            let root = if r == 2 { 1 } else { 0 };
            s.rank(r)
                .coll(CallId::NcclBcast, comm, 0, 1024, 7, 0, root, 0, None);
        }
    });
    let story = Story::build(&job);
    let m = &story.comm(WORLD_UID).unwrap().mismatches;
    assert_eq!(m.len(), 1, "{m:#?}");
    assert_eq!(m[0].field, "root");
    assert_eq!(m[0].odd, [2]);
}

#[test]
fn a_p2p_size_mismatch_names_both_sizes() {
    let (job, _) = analyze(&["n0", "n1"], |s| {
        s.snapshot_all(V as i32);
        let comms = s.init_world(V);
        s.rank(0)
            .coll(CallId::NcclSend, comms[0], 0, 1 << 18, 7, 0, 1, 0, None);
        s.rank(1)
            .coll(CallId::NcclRecv, comms[1], 0, 1 << 17, 7, 0, 0, 0, None);
    });
    let story = Story::build(&job);
    let m = &story.comm(WORLD_UID).unwrap().mismatches;
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].field, "size");
    assert!(m[0].text.contains("1048576 bytes") && m[0].text.contains("524288 bytes"));
    assert!(m[0].text.contains("count=262144") && m[0].text.contains("count=131072"));
    let p = primaries(&job, &story);
    // The receiver is named; the sender's side is in the evidence.
    assert_eq!(
        p,
        vec![(registry::P2P_SIZE_MISMATCH.id().to_owned(), vec![1])]
    );
}

#[test]
fn a_process_that_ended_through_underscore_exit_ended_cleanly() {
    let (mut job, _) = analyze(&["n0"], |s| {
        s.snapshot_all(V as i32);
        s.init_world(V);
    });
    job.processes[0].clean_exit = true;
    job.processes[0].exit_via = Some(ncclshim_format::ExitVia::UnderscoreExit);
    job.processes[0].exit_status = Some(0);
    let story = Story::build(&job);
    assert!(matches!(
        story.ends[0],
        Ending::Exited {
            underscore: true,
            status: Some(0),
            ..
        }
    ));
    assert!(story.roots().is_empty());
    assert!(primaries(&job, &story).is_empty());
}

#[test]
fn a_lone_process_killed_without_a_mark_is_no_healthy_job() {
    let (job, _) = analyze(&["n0"], |s| {
        s.snapshot_all(V as i32);
        let comms = s.init_world(V);
        for seq in 0..10 {
            s.rank(0).coll(AR, comms[0], seq, 8, 7, 0, 0, 0, None);
        }
    });
    let story = Story::build(&job);
    assert!(matches!(story.ends[0], Ending::Vanished { .. }));
    assert_eq!(
        primaries(&job, &story),
        vec![(registry::RANK_ENDED_ABRUPTLY.id().to_owned(), vec![0])]
    );
}
