//! Eight emulated ranks, eight processes, eight dumps: rank 3 stops issuing collectives at
//! seq N while the others enter collective N and hang in its kernel; all are then SIGKILLed.
//! The dumps must show exactly that, per rank, from the records and from the aggregates.

mod emulator;
mod records;

use emulator::{prof_dumps, Job};
use nccl_profiler_ncclshim::agg;
use ncclshim_dump::{BlobKind, CallId, RecordKind};
use ncclshim_format::reader::read_dump;
use records::Completion;

#[test]
fn eight_ranks_one_stops_at_n() {
    if emulator::rank_main_if_child().is_some() {
        unreachable!();
    }
    let dir = tempfile::tempdir().unwrap();
    let job = Job {
        ranks: 8,
        collectives: 8,
        stop_rank: 3,
        stop_at: 5,
        abi: 6,
        comm_id: 0xfeed_0000_0000_0008,
        kill: true,
    };
    let exe = std::env::current_exe().unwrap();
    let outs = job.run(
        &exe,
        &["eight_ranks_one_stops_at_n", "--exact", "--nocapture"],
        dir.path(),
        &[],
    );
    use std::os::unix::process::ExitStatusExt;
    for o in &outs {
        assert_eq!(
            o.status.signal(),
            Some(libc::SIGKILL),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let dumps = prof_dumps(dir.path());
    assert_eq!(dumps.len(), 8, "one dump per rank: {dumps:?}");
    let mut seen_ranks = Vec::new();
    let mut pids = std::collections::BTreeSet::new();
    for p in &dumps {
        let d = read_dump(p).unwrap();
        assert!(
            !d.header.clean_exit,
            "killed ranks leave no clean-exit mark"
        );
        pids.insert(d.header.pid);
        let init = d
            .records
            .iter()
            .find(|r| r.call() == Some(CallId::ProfInit))
            .expect("init record");
        assert_eq!(init.args[0], job.comm_id);
        assert_eq!(init.args[2], 8);
        let rank = init.args[3] as i32;
        seen_ranks.push(rank);
        let colls: Vec<_> = d
            .records
            .iter()
            .filter(|r| {
                r.kind() == Some(RecordKind::ProfStart) && r.call() == Some(CallId::ProfColl)
            })
            .collect();
        let seqs: Vec<u64> = colls.iter().map(|r| r.args[2]).collect();
        let done = Completion::of(&d);
        // Default mask: an operation's kernel channels have no records; its GPU-done record
        // (both channels' span) says the kernel ended.
        let finished = |c: &&ncclshim_format::reader::Record| {
            let kernels = d.records.iter().filter(|k| {
                k.call() == Some(CallId::ProfKernelCh)
                    && k.kind() == Some(RecordKind::ProfStart)
                    && k.args[1] == c.slot_ref().encode()
            });
            assert_eq!(kernels.count(), 0, "channels are summarized");
            done.gpu_done(c)
                .map(|g| {
                    assert_eq!(g.channels, 2, "both channels in the GPU span");
                    assert!(g.gpu_stop >= g.gpu_start);
                })
                .is_some()
        };
        let table = d
            .blobs
            .values()
            .filter(|b| b.kind() == Some(BlobKind::ProfAggregates))
            .find_map(|b| agg::decode(&b.bytes))
            .expect("aggregates");
        let count: u64 = table.cells.iter().map(|c| c.count).sum();
        let timed: u64 = table.cells.iter().map(|c| c.timed_count).sum();
        if rank == job.stop_rank {
            assert_eq!(
                seqs,
                (0..job.stop_at).collect::<Vec<_>>(),
                "rank {rank} stopped before seq N"
            );
            assert!(colls.iter().all(finished));
            assert_eq!((count, timed), (job.stop_at, job.stop_at));
        } else {
            assert_eq!(
                seqs,
                (0..=job.stop_at).collect::<Vec<_>>(),
                "rank {rank} entered seq N"
            );
            let (last, earlier) = colls.split_last().unwrap();
            assert!(earlier.iter().all(finished));
            assert!(
                !finished(last),
                "rank {rank}: collective N still running on the GPU"
            );
            assert!(
                last.flags & ncclshim_dump::schema::slot_flags::ENDS_AT_GPU_DONE != 0
                    && last.in_flight(),
                "rank {rank}: collective N stays open until its kernel ends"
            );
            assert_eq!((count, timed), (job.stop_at + 1, job.stop_at));
        }
    }
    seen_ranks.sort();
    assert_eq!(seen_ranks, (0..8).collect::<Vec<_>>());
    assert_eq!(pids.len(), 8, "separate processes");
}

/// The checked-in synthetic fixture (see its README) still reads as "rank 3 is behind".
#[test]
fn synthetic_fixture_shows_rank_3_behind() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/synthetic/hang-8ranks");
    let dumps = prof_dumps(&dir);
    assert_eq!(dumps.len(), 8);
    let mut last_by_rank = std::collections::BTreeMap::new();
    for p in dumps {
        let d = read_dump(&p).unwrap();
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
        let init = d
            .records
            .iter()
            .find(|r| r.call() == Some(CallId::ProfInit))
            .unwrap();
        let last = d
            .records
            .iter()
            .filter(|r| {
                r.kind() == Some(RecordKind::ProfStart) && r.call() == Some(CallId::ProfColl)
            })
            .map(|r| r.args[2])
            .max()
            .unwrap();
        last_by_rank.insert(init.args[3], last);
    }
    let expect: std::collections::BTreeMap<u64, u64> =
        (0..8).map(|r| (r, if r == 3 { 4 } else { 5 })).collect();
    assert_eq!(last_by_rank, expect);
}
