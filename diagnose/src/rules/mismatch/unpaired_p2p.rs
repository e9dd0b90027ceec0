//! Catalog C02: point-to-point operations that do not pair up (rank A sends to B more often, or more
//! data, than B receives from A) deadlock; the proxy-thread WARNs seen at abort ("Could not
//! receive type from localRank", "Connection closed by localRank") are teardown noise.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::knowledge::messages::Role;
use crate::model::{CommView, JobModel};
use crate::rules::text::text_has_role;
use ncclshim_format::CallId;
use std::collections::BTreeMap;

/// Operations posted, and their elements in all.
#[derive(Default, Clone, Copy)]
struct Tally {
    ops: u64,
    elems: u64,
}

/// The point-to-point operations posted on one communicator, per (from, to) pair of its ranks.
#[derive(Default)]
struct Pairs {
    /// (from, to) → sends posted by `from`.
    sends: BTreeMap<(u32, u32), Tally>,
    /// (from, to) → receives posted by `to`.
    recvs: BTreeMap<(u32, u32), Tally>,
    /// The process of each rank in the dumps.
    procs: BTreeMap<u32, usize>,
}

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut out = Vec::new();
    for (&comm, view) in &job.comms {
        // A ring that wrapped lost its oldest records: counts are then no evidence (a lost send
        // would look unpaired, and windows cut at different points on different ranks).
        if view
            .members
            .values()
            .flatten()
            .any(|&p| job.processes[p].lost > 0)
        {
            continue;
        }
        let pairs = pairs(job, comm, view);
        let mut f = Finding::new(&registry::UNPAIRED_P2P,
            "Point-to-point sends and receives do not pair up between ranks",
            Confidence::Medium,
        )
        .remedy(
            "Pair every send with a receive of the same count and datatype on the peer and issue \
             them inside one group (batch_isend_irecv / ncclGroupStart..ncclGroupEnd); set the CUDA \
             device from LOCAL_RANK before creating the communicator.",
        );
        unpaired_facts(job, comm, &pairs, &mut f);
        if f.process_ids.is_empty() {
            continue;
        }
        teardown_noise(job, &mut f);
        out.push(f);
    }
    out
}

/// The sends and receives each member of `comm` (`view`) posted.
fn pairs(job: &JobModel, comm: u64, view: &CommView) -> Pairs {
    let mut pairs = Pairs::default();
    for (&rank, ps) in &view.members {
        for &p in ps {
            pairs.procs.insert(rank, p);
            let pm = &job.processes[p];
            for op in pm.ops.iter().filter(|o| o.comm_hash == Some(comm)) {
                let peer = op.root_or_peer as u32;
                let (map, key) = match op.call {
                    CallId::NcclSend => (&mut pairs.sends, (rank, peer)),
                    CallId::NcclRecv => (&mut pairs.recvs, (peer, rank)),
                    _ => continue,
                };
                let t = map.entry(key).or_default();
                t.ops += 1;
                t.elems += op.count;
            }
        }
    }
    pairs
}

/// One fact per pair of ranks whose sends and receives differ in number or elements, with both
/// ranks involved.
fn unpaired_facts(job: &JobModel, comm: u64, pairs: &Pairs, f: &mut Finding) {
    let Pairs {
        sends,
        recvs,
        procs,
    } = pairs;
    let mut keys: Vec<(u32, u32)> = sends.keys().chain(recvs.keys()).copied().collect();
    keys.sort_unstable();
    keys.dedup();
    for (from, to) in keys {
        let s = sends.get(&(from, to)).copied().unwrap_or_default();
        let r = recvs.get(&(from, to)).copied().unwrap_or_default();
        // Only pairs where both ends are in the dumps can be compared.
        let (Some(&ps), Some(&pr)) = (procs.get(&from), procs.get(&to)) else {
            continue;
        };
        if s.ops == r.ops && s.elems == r.elems {
            continue;
        }
        f.involve(job, ps);
        f.involve(job, pr);
        // Named by their ranks in the job: on a subgroup's communicator its rank 0 may be
        // global rank 2 (the communicator's own ranks are the map's keys).
        let global = |r: u32, p: usize| job.processes[p].world_rank().unwrap_or(r);
        let (from, to) = (global(from, ps), global(to, pr));
        f.fact(
            Evidence::new(
                EvidenceKind::Progress,
                format!(
                    "comm {comm:#x}: rank {from} posted {} ncclSend to rank {to} ({} elements); rank {to} posted {} ncclRecv from rank {from} ({} elements)",
                    s.ops, s.elems, r.ops, r.elems
                ),
            )
            .value("comm", format!("{comm:#x}"))
            .value("from_rank", from)
            .value("to_rank", to)
            .value("sends", s.ops)
            .value("send_elements", s.elems)
            .value("recvs", r.ops)
            .value("recv_elements", r.elems)
            .of_all(job, &[ps, pr]),
        );
    }
}

/// The calls of the involved processes that failed after their first ncclCommAbort/Destroy
/// with a teardown message (or the abort or destroy itself): explained as teardown noise.
fn teardown_noise(job: &JobModel, f: &mut Finding) {
    for &p in &f.process_ids.clone() {
        let pm = &job.processes[p];
        let abort_t = pm
            .calls
            .iter()
            .filter(|c| {
                matches!(
                    c.call,
                    Some(CallId::NcclCommAbort | CallId::NcclCommDestroy)
                )
            })
            .map(|c| c.t_enter)
            .min();
        for (i, c) in pm.calls.iter().enumerate() {
            // The abort or destroy itself failing is teardown too, whether or not its text
            // survived (a truncated dump keeps the return code without the WARN).
            let teardown_call = matches!(
                c.call,
                Some(CallId::NcclCommAbort | CallId::NcclCommDestroy)
            );
            if c.failed()
                && (teardown_call || text_has_role(c, Role::Teardown))
                && abort_t.is_some_and(|t| t <= c.t_enter)
            {
                f.explain(p, i);
                f.fact(
                    Evidence::call_worded(
                        c,
                        "",
                        " came after ncclCommAbort/Destroy: proxy teardown noise, not the cause",
                    )
                    .value("teardown_noise", true)
                    .of(job, p),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testutil::{analyze, find};

    #[test]
    fn an_extra_send_is_reported_with_both_sides() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22203);
            let comms = s.init_world(22203);
            s.ranks[0].coll(CallId::NcclSend, comms[0], 0, 1024, 7, 0, 1, 0, None);
            s.ranks[0].coll(CallId::NcclSend, comms[0], 1, 1024, 7, 0, 1, 0, None);
            s.ranks[1].coll(CallId::NcclRecv, comms[1], 0, 1024, 7, 0, 0, 0, None);
        });
        let f = find(&fs, registry::UNPAIRED_P2P.id()).expect("C02");
        assert_eq!(f.ranks, vec![0, 1]);
        assert!(
            f.evidence[0].contains("posted 2 ncclSend"),
            "{:?}",
            f.evidence
        );
        assert!(f.evidence[0].contains("posted 1 ncclRecv"));
    }

    #[test]
    fn paired_traffic_is_not_reported() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22203);
            let comms = s.init_world(22203);
            s.ranks[0].coll(CallId::NcclSend, comms[0], 0, 1024, 7, 0, 1, 0, None);
            s.ranks[1].coll(CallId::NcclRecv, comms[1], 0, 1024, 7, 0, 0, 0, None);
            for r in &s.ranks {
                r.clean_exit();
            }
        });
        assert!(find(&fs, registry::UNPAIRED_P2P.id()).is_none());
    }
}

#[cfg(test)]
mod wrap_tests {
    use crate::load::{find_dumps, load_files};
    use crate::model::JobModel;
    use ncclshim_fixtures::synth::{Geometry, Scenario};
    use ncclshim_format::CallId;

    #[test]
    fn wrapped_rings_are_not_counted() {
        let dir = tempfile::tempdir().unwrap();
        let g = Geometry {
            rings: 1,
            slots_per_ring: 16,
            arena_bytes: 16 << 10,
        };
        let mut s = Scenario::with_geometry(dir.path(), &["n0", "n0"], g).unwrap();
        s.snapshot_all(22203);
        let comms = s.init_world(22203);
        for i in 0..40 {
            s.ranks[0].coll(CallId::NcclSend, comms[0], i, 8, 7, 0, 1, 0, None);
            s.ranks[1].coll(CallId::NcclRecv, comms[1], i, 8, 7, 0, 0, 0, None);
        }
        drop(s);
        let files = find_dumps(dir.path()).unwrap();
        let job = JobModel::build(&load_files(dir.path(), &files, None).dumps, |d| {
            d.path.display().to_string()
        });
        assert!(
            job.processes.iter().all(|p| p.lost > 0),
            "the rings must have wrapped"
        );
        assert!(super::check(&job).is_empty());
    }
}
