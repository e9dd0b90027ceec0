//! Which Flight Recorder dumps a report reads (issue 25: 16,384 dumps of 2,000 entries are 7 GB
//! of pickles, minutes to read in full; BENCHMARKS.md "Reading PyTorch Flight Recorder dumps").
//! Every dump is listed (cheap); a dump is read only where it can change what the report says:
//!
//! - a rank without a shim dump, or whose shim dump holds no communicator (the shim cannot
//!   place it): its Flight Recorder dump is all the report knows of it;
//! - on each communicator, the ranks' shim records fall into classes (same operations issued
//!   and completed, same last call and count, same state); one rank per class is read and
//!   stands for the others of its class ([`Cover`]);
//! - every rank of a communicator whose ranks' shim records disagree on any operation they all
//!   still hold (function, count, datatype, op, root or peer): fr_trace's mismatch verdict and
//!   its culprit (the odd ranks against the majority) need every rank's entries;
//! - later, in [`super::annotate`]: the ranks the report's findings name (to quote their own
//!   Python lines), and every rank of a group whose read dumps disagree where the shim's did
//!   not, or that no read rank stands for.
//!
//! Why a rank stood for gives the same verdict: fr_trace's verdicts compare, per group, each
//! rank's collectives (type, sizes, dtypes) and where each rank stopped. Each Flight Recorder
//! collective became the same NCCL calls on every rank (one, with the same sequence number + 1,
//! under the legacy backend; as [`super::writers`] lowers it under nccl2), so two ranks whose
//! shim records agree on every operation and on how far they got have the same Flight Recorder
//! verdict; the one read quotes the Python line. What the shim does not see (a tensor of the
//! same element count and another shape; entries older than the shim's rings hold) is checked
//! on the ranks read: a disagreement there reads the whole group (`annotate`).

use crate::model::ProcessModel;

/// Set (to anything), every dump is read as before this module: what the tests compare the
/// planned reading with (`tests/flight_recorder_lazy.rs`), and a way out should a report ever
/// need a dump this plan left unread.
pub const READ_ALL_VAR: &str = "NCCLSHIM_FLIGHT_RECORDER_READ_ALL";
use ncclshim_format::CallId;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

/// For each communicator (by hash), the rank whose dump stands for each other rank of its class.
#[derive(Debug, Clone, Default)]
pub struct Cover {
    by_comm: HashMap<u64, HashMap<u32, u32>>,
}

impl Cover {
    /// The rank whose Flight Recorder dump stands for `rank` on communicator `comm`.
    pub fn representative(&self, comm: u64, rank: u32) -> Option<u32> {
        self.by_comm.get(&comm)?.get(&rank).copied()
    }
}

/// The dumps to read before the model is built, the ones only listed so far, and who stands for
/// whom.
#[derive(Debug, Default)]
pub struct Plan {
    pub read: Vec<(PathBuf, u32)>,
    pub listed_only: Vec<(PathBuf, u32)>,
    pub cover: Cover,
}

/// What a rank's shim record says about one communicator; ranks with equal keys are one class.
type ClassKey = (u64, u64, Option<CallId>, u64, &'static str);

/// Where a rank got on communicator `comm`, from its own records (the writer's progress
/// records are not in every dump): collectives issued and returned, the last one's function and
/// count, and the communicator's state when the dump says it.
fn class_key(p: &ProcessModel, comm: u64) -> ClassKey {
    let mine = || {
        p.ops
            .iter()
            .filter(move |o| p.comm_of_op(o) == Some(comm))
            .filter(|o| !matches!(o.call, CallId::NcclSend | CallId::NcclRecv))
    };
    let issued = mine().map(|o| o.seq.saturating_add(1)).max().unwrap_or(0);
    let completed = mine()
        .filter(|o| p.calls.get(o.call_index).is_some_and(|c| !c.in_flight()))
        .map(|o| o.seq.saturating_add(1))
        .max()
        .unwrap_or(0);
    let last = mine().max_by_key(|o| o.seq);
    let state = p
        .progress
        .iter()
        .find(|c| c.comm_hash == comm)
        .map_or("", |c| c.state);
    (
        issued,
        completed,
        last.map(|o| o.call),
        last.map_or(0, |o| o.count),
        state,
    )
}

/// Plans which of `files` ((path, rank), every Flight Recorder dump listed) to read, from the
/// per-file process models `parts` (before they are joined into a job).
pub fn plan(parts: &[ProcessModel], files: Vec<(PathBuf, u32)>) -> Plan {
    let listed: BTreeSet<u32> = files.iter().map(|(_, r)| *r).collect();
    let mut must: BTreeSet<u32> = BTreeSet::new();
    let mut shim_parts_of: BTreeMap<u32, usize> = BTreeMap::new();
    // Communicator → its ranks' (rank, class key, the process model).
    let mut per_comm: BTreeMap<u64, Vec<(u32, ClassKey, &ProcessModel)>> = BTreeMap::new();
    // Each rank's process: its dump with the most operations (a profiler dump of the same
    // process, written by the same synthetic writer, holds none); two processes for one rank
    // are left to the full read.
    let mut process_of: BTreeMap<u32, Vec<&ProcessModel>> = BTreeMap::new();
    for p in parts.iter().filter(|p| super::dumps::has_shim_records(p)) {
        if let Some(rank) = p.world_rank() {
            process_of.entry(rank).or_default().push(p);
        }
    }
    for (rank, ps) in &process_of {
        let keys: BTreeSet<_> = ps.iter().map(|p| p.key()).collect();
        let Some(p) = ps.iter().max_by_key(|p| p.ops.len()) else {
            continue;
        };
        if keys.len() == 1 {
            shim_parts_of.insert(*rank, 1);
        }
        if p.memberships.is_empty() {
            must.insert(*rank);
        }
        for m in &p.memberships {
            per_comm
                .entry(m.comm_hash)
                .or_default()
                .push((*rank, class_key(p, m.comm_hash), p));
        }
    }
    // No shim dump, or two for one rank (which one to trust is not this module's call).
    must.extend(
        listed
            .iter()
            .filter(|r| shim_parts_of.get(r).is_none_or(|n| *n != 1)),
    );
    let mut cover = Cover::default();
    for (comm, members) in &per_comm {
        if !records_agree(*comm, members) {
            must.extend(members.iter().map(|(r, _, _)| *r));
            continue;
        }
        let mut classes: BTreeMap<ClassKey, Vec<u32>> = BTreeMap::new();
        for (rank, key, _) in members {
            if listed.contains(rank) {
                classes.entry(*key).or_default().push(*rank);
            }
        }
        let stand_ins = cover.by_comm.entry(*comm).or_default();
        for ranks in classes.values() {
            // A rank read anyway stands for its class, else the lowest.
            let rep = ranks
                .iter()
                .copied()
                .find(|r| must.contains(r))
                .unwrap_or_else(|| ranks.iter().copied().min().unwrap_or_default());
            must.insert(rep);
            stand_ins.extend(ranks.iter().map(|r| (*r, rep)));
        }
    }
    let (read, listed_only) = files.into_iter().partition(|(_, r)| must.contains(r));
    Plan {
        read,
        listed_only,
        cover,
    }
}

/// One collective as the shim recorded it: (seq, function, count, datatype, op, root or peer).
type Collective = (u64, u64, u64, u64, u64, u64);

/// Whether the ranks of communicator `comm` recorded the same collectives (function, count,
/// datatype, op, root) at every sequence number all their shim rings still hold. A communicator
/// with operations but no sequence number held by all cannot be checked: it counts as
/// disagreeing (its ranks are all read).
fn records_agree(comm: u64, members: &[(u32, ClassKey, &ProcessModel)]) -> bool {
    let collectives = |p: &'_ ProcessModel| {
        p.ops
            .iter()
            .filter(|o| p.comm_of_op(o) == Some(comm))
            .filter(|o| !matches!(o.call, CallId::NcclSend | CallId::NcclRecv))
            .map(|o| {
                (
                    o.seq,
                    o.call as u64,
                    o.count,
                    o.datatype,
                    o.op,
                    o.root_or_peer,
                )
            })
            .collect::<Vec<_>>()
    };
    let (mut lo, mut hi) = (0u64, u64::MAX);
    let mut any = false;
    let held: Vec<Vec<Collective>> = members
        .iter()
        .map(|(_, _, p)| {
            let ops = collectives(p);
            let first = ops.iter().map(|o| o.0).min();
            let last = ops.iter().map(|o| o.0).max();
            if let (Some(a), Some(b)) = (first, last) {
                any = true;
                lo = lo.max(a);
                hi = hi.min(b);
            } else {
                hi = 0;
                lo = lo.max(1);
            }
            ops
        })
        .collect();
    if !any {
        // Nothing issued on it by any rank: nothing to disagree on.
        return true;
    }
    if lo > hi {
        return false;
    }
    let window = |ops: &[Collective]| -> Vec<Collective> {
        let mut w: Vec<_> = ops
            .iter()
            .filter(|o| (lo..=hi).contains(&o.0))
            .copied()
            .collect();
        w.sort_unstable();
        w.dedup();
        w
    };
    let mut it = held.iter();
    let first = window(it.next().map_or(&[][..], Vec::as_slice));
    it.all(|ops| window(ops) == first)
}
