//! Where each rank was on each communicator when the job ended, and who waited for whom.
//!
//! Numbering follows the source's own: the shim numbers every operation of a communicator
//! (`seq`) and every collective per function (`op_seq`, NCCL's `coll.seqNumber`). Point-to-point
//! operations pair two ranks only, so ranks legitimately differ in `seq`; collectives involve
//! every rank, so the collectives a rank issued per function are what the ranks must agree on.
//! A rank that issued fewer collectives of a function than its peers is behind; peers that
//! issued the next one wait for it. The same collective (function, `op_seq`) issued with a
//! different count, datatype, reduction or root is a mismatch; the k-th send from A to B and the
//! k-th receive at B from A with different sizes is an unpaired p2p size.

use super::position::{self, NumberedColl, Position};
use crate::model::{JobModel, ProcessModel};
use crate::names::datatype_size;
use ncclshim_format::CallId;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeMap;

/// Where one rank was on one communicator at its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Its communicator init never returned.
    InInit { call: usize },
    /// Inside an operation that never returned (index into the process's calls).
    InOp { call: usize },
    /// Inside another call on the communicator (group end, finalize, destroy…).
    InCall { call: usize },
    /// Outside NCCL, its last operation on the communicator returned.
    Outside,
    /// It destroyed or aborted the communicator.
    Left,
}

/// One collective as a rank issued it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IssuedColl {
    pub call: CallId,
    pub op_seq: u64,
    pub count: u64,
    pub datatype: u64,
    pub redop: u64,
    pub root: u64,
    pub call_index: usize,
    pub t: u64,
}

impl IssuedColl {
    /// What every rank must agree on for this collective (the reduction and root only where
    /// the function has them).
    fn key(&self) -> CollKey {
        let (redop, root) = super::sequence::reduction_and_root(self.call, self.redop, self.root);
        (self.count, self.datatype, redop, root)
    }
}

/// `ncclBcast` is numbered with `ncclBroadcast` (NCCL counts both as Broadcast).
fn function(c: CallId) -> CallId {
    if c == CallId::NcclBcast {
        CallId::NcclBroadcast
    } else {
        c
    }
}

/// What ranks must agree on for one collective (see [`IssuedColl::key`]).
type CollKey = (u64, u64, Option<u64>, Option<u64>);

/// One member of a communicator.
#[derive(Debug, Clone)]
pub struct Member {
    pub rank: u32,
    pub process: usize,
    pub place: Place,
    /// Per collective function, the newest one it issued.
    pub last_coll: BTreeMap<CallId, IssuedColl>,
    /// Operations issued per the communicator table (all kinds; survives ring wrap).
    pub issued: Option<u64>,
    /// Whether records of this rank were lost (wrap, pruning): absent ops are then no evidence.
    pub lossy: bool,
    /// Its progress per source, and where it is stuck inside NCCL (see [`super::position`]).
    pub position: Position,
}

impl Place {
    /// The call that never returned, when the rank is inside one.
    pub fn call(&self) -> Option<usize> {
        match *self {
            Place::InInit { call } | Place::InOp { call } | Place::InCall { call } => Some(call),
            Place::Outside | Place::Left => None,
        }
    }
}

/// Why a rank did not take part in an operation its peers waited in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behind {
    /// It never issued the operation (it was elsewhere, outside NCCL or in another call).
    NeverIssued,
    /// It issued the same collective with different arguments.
    Different,
}

/// An operation some ranks waited in and others did not join.
#[derive(Debug, Clone)]
pub struct Stall {
    pub comm: u64,
    pub function: CallId,
    /// The collective's number per function (from 0) the waiters issued.
    pub op_seq: u64,
    /// Ranks that issued it: (rank, process).
    pub waiting: Vec<(u32, usize)>,
    /// Ranks that did not: (rank, process, why).
    pub behind: Vec<(u32, usize, Behind)>,
    /// When the first waiter issued it.
    pub since: u64,
}

/// The same collective issued differently, or a send and its receive of different sizes.
#[derive(Debug, Clone)]
pub struct Mismatch {
    pub comm: u64,
    /// `count`, `datatype`, `reduction`, `root`, `collective`, `size`.
    pub field: &'static str,
    /// Every side: (rank, process, call index).
    pub sides: Vec<(u32, usize, usize)>,
    /// The ranks that differ from the majority (for a pair, the later rank of a collective, or
    /// the receiver of a p2p).
    pub odd: Vec<u32>,
    pub t: u64,
    pub text: String,
}

/// One communicator's story.
#[derive(Debug, Clone)]
pub struct CommStory {
    pub comm: u64,
    pub members: Vec<Member>,
    pub stall: Option<Stall>,
    pub mismatches: Vec<Mismatch>,
    /// The first point at which its ranks issued their collectives differently, in one
    /// source's numbering (see [`super::sequence`]).
    pub divergence: Option<super::sequence::Divergence>,
}

/// Every collective (not send/recv) process `pm` issued on `comm` that its records still hold.
fn collectives(pm: &ProcessModel, comm: u64) -> impl Iterator<Item = IssuedColl> + '_ {
    pm.ops
        .iter()
        .filter(move |o| o.comm_hash == Some(comm))
        .filter(|o| !matches!(o.call, CallId::NcclSend | CallId::NcclRecv))
        .filter_map(|o| {
            let c = pm.calls.get(o.call_index)?;
            let v = c.operation()?;
            // All ones: the recorder could not number it (no per-function counter for it).
            if v.op_seq == u64::MAX {
                return None;
            }
            Some(IssuedColl {
                call: o.call,
                op_seq: v.op_seq,
                count: o.count,
                datatype: o.datatype,
                redop: o.op,
                root: o.root_or_peer,
                call_index: o.call_index,
                t: c.t_enter,
            })
        })
}

fn member(
    job: &JobModel,
    comm: u64,
    rank: u32,
    p: usize,
    ended: &FxHashSet<NumberedColl>,
) -> Member {
    let pm = &job.processes[p];
    let ptr = pm.comm_ptr(comm);
    let mut place = Place::Outside;
    for (i, c) in pm.calls.iter().enumerate() {
        if !c.in_flight() || c.nested || c.call == Some(CallId::NcclCommGetAsyncError) {
            continue;
        }
        if c.is_init() && c.arg("uid_hash") == Some(comm) {
            place = Place::InInit { call: i };
        } else if ptr != 0 && c.comm == ptr {
            place = if c.call.is_some_and(CallId::is_nccl_operation) {
                Place::InOp { call: i }
            } else {
                Place::InCall { call: i }
            };
        }
    }
    if place == Place::Outside && left(pm, comm, ptr) {
        place = Place::Left;
    }
    let mut last_coll: BTreeMap<CallId, IssuedColl> = BTreeMap::new();
    for issued in collectives(pm, comm) {
        let e = last_coll.entry(function(issued.call)).or_insert(issued);
        if issued.op_seq >= e.op_seq {
            *e = issued;
        }
    }
    let issued = pm
        .progress
        .iter()
        .filter(|c| c.comm_hash == comm)
        .map(|c| c.issued)
        .max();
    let position = position::of(pm, comm, place.call(), ended);
    Member {
        rank,
        process: p,
        place,
        last_coll,
        issued,
        lossy: pm.lost > 0 || pm.pruned > 0,
        position,
    }
}

/// Whether the process destroyed, finalized or aborted communicator `ptr`.
fn left(pm: &ProcessModel, comm: u64, ptr: u64) -> bool {
    pm.calls.iter().any(|c| {
        matches!(
            c.call,
            Some(CallId::NcclCommDestroy | CallId::NcclCommAbort | CallId::NcclCommFinalize)
        ) && ptr != 0
            && c.comm == ptr
    }) || pm
        .progress
        .iter()
        .any(|c| c.comm_hash == comm && matches!(c.state, "destroyed" | "aborted"))
}

/// The stall of a communicator: the earliest collective (by time) some members issued and
/// others never did.
fn stall(comm: u64, members: &[Member]) -> Option<Stall> {
    let functions: std::collections::BTreeSet<CallId> = members
        .iter()
        .flat_map(|m| m.last_coll.keys().copied())
        .collect();
    let mut best: Option<Stall> = None;
    for f in functions {
        let newest = members
            .iter()
            .filter_map(|m| m.last_coll.get(&f).map(|c| c.op_seq))
            .max()?;
        let waiting: Vec<&Member> = members
            .iter()
            .filter(|m| m.last_coll.get(&f).is_some_and(|c| c.op_seq == newest))
            .collect();
        let behind: Vec<(u32, usize, Behind)> = members
            .iter()
            .filter(|m| match m.last_coll.get(&f) {
                Some(c) => c.op_seq < newest,
                // A rank with no collective of this function at all: behind only when none of
                // its records were lost (else the ones it issued may have been overwritten).
                None => !m.lossy,
            })
            .map(|m| (m.rank, m.process, Behind::NeverIssued))
            .collect();
        if behind.is_empty() {
            continue;
        }
        let since = waiting
            .iter()
            .filter_map(|m| m.last_coll.get(&f).map(|c| c.t))
            .min()
            .unwrap_or(0);
        if best.as_ref().is_none_or(|b| since < b.since) {
            best = Some(Stall {
                comm,
                function: f,
                op_seq: newest,
                waiting: waiting.iter().map(|m| (m.rank, m.process)).collect(),
                behind,
                since,
            });
        }
    }
    best
}

/// Collectives issued with different arguments at the same (function, op_seq), earliest first.
fn coll_mismatches(job: &JobModel, comm: u64) -> Vec<Mismatch> {
    // (function, op_seq) → every rank's issue of it.
    type Issues = Vec<(u32, usize, IssuedColl)>;
    let members = job.comm_members(comm);
    let disputed = disputed_collectives(job, comm, &members);
    if disputed.is_empty() {
        return Vec::new();
    }
    let mut at: BTreeMap<(CallId, u64), Issues> = BTreeMap::new();
    for &(rank, p) in &members {
        let pm = &job.processes[p];
        for c in collectives(pm, comm) {
            let at_key = (function(c.call), c.op_seq);
            if disputed.contains(&at_key) {
                at.entry(at_key).or_default().push((rank, p, c));
            }
        }
    }
    let mut out = Vec::new();
    for ((f, seq), sides) in at {
        if sides.len() < 2 {
            continue;
        }
        let reference = sides[0].2.key();
        if sides.iter().all(|s| s.2.key() == reference) {
            continue;
        }
        // The odd ranks: the minority; in a tie, the side without the lowest rank (one rule
        // with the divergence, `sequence::odd_ranks`).
        let mut groups: BTreeMap<CollKey, Vec<u32>> = BTreeMap::new();
        for s in &sides {
            groups.entry(s.2.key()).or_default().push(s.0);
        }
        let odd = super::sequence::odd_ranks(groups.values().map(Vec::as_slice));
        let majority = sides
            .iter()
            .find(|s| !odd.contains(&s.0))
            .map(|s| s.2.key())
            .unwrap_or(reference);
        let odd_one = sides.iter().find(|s| s.2.key() != majority).map(|s| s.2);
        let field = match odd_one {
            Some(o) if o.count != majority.0 => "count",
            Some(o) if o.datatype != majority.1 => "datatype",
            Some(o) if o.key().2 != majority.2 => "reduction",
            _ => "root",
        };
        let name = f.name();
        let text = sides
            .iter()
            .map(|(r, _, c)| {
                format!(
                    "rank {r} {name} #{seq} count={} {}",
                    c.count,
                    crate::names::datatype_name(c.datatype)
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        out.push(Mismatch {
            comm,
            field,
            sides: sides.iter().map(|s| (s.0, s.1, s.2.call_index)).collect(),
            odd,
            t: sides.iter().map(|s| s.2.t).min().unwrap_or(0),
            text,
        });
    }
    out.sort_by_key(|m| m.t);
    out
}

/// The (function, op_seq) at which members issued collectives with different arguments. Every
/// member's collectives are compared in parallel against the first arguments seen at each
/// number (a map of sides per number for every rank was the story's largest serial cost at
/// 16,384 ranks); [`coll_mismatches`] gathers the sides of these alone.
fn disputed_collectives(
    job: &JobModel,
    comm: u64,
    members: &[(u32, usize)],
) -> FxHashSet<(CallId, u64)> {
    use rayon::prelude::*;
    // Per number: the first arguments seen, and whether any other differed.
    type Seen = FxHashMap<(CallId, u64), (CollKey, bool)>;
    let note = |seen: &mut Seen, at: (CallId, u64), key: CollKey, differs: bool| {
        seen.entry(at)
            .and_modify(|e| e.1 |= differs || e.0 != key)
            .or_insert((key, differs));
    };
    members
        .par_iter()
        .fold(Seen::default, |mut seen, &(_, p)| {
            for c in collectives(&job.processes[p], comm) {
                note(&mut seen, (function(c.call), c.op_seq), c.key(), false);
            }
            seen
        })
        .reduce(Seen::default, |mut a, b| {
            for (at, (key, differs)) in b {
                note(&mut a, at, key, differs);
            }
            a
        })
        .into_iter()
        .filter(|(_, (_, differs))| *differs)
        .map(|(at, _)| at)
        .collect()
}

/// Sends and receives that pair up (k-th send from A to B, k-th receive at B from A) with
/// different byte sizes.
fn p2p_mismatches(job: &JobModel, comm: u64) -> Vec<Mismatch> {
    type Side = (u32, usize, usize, u64, u64, u64);
    // (from, to) → sends (rank, process, call, bytes, t) in order; receives likewise.
    let mut sends: BTreeMap<(u32, u32), Vec<Side>> = BTreeMap::new();
    let mut recvs: BTreeMap<(u32, u32), Vec<Side>> = BTreeMap::new();
    for (rank, p) in job.comm_members(comm) {
        let pm = &job.processes[p];
        if pm.lost > 0 || pm.pruned > 0 {
            return Vec::new();
        }
        for o in pm.ops.iter().filter(|o| o.comm_hash == Some(comm)) {
            let peer = o.root_or_peer as u32;
            let bytes = o
                .count
                .saturating_mul(datatype_size(o.datatype).unwrap_or(1));
            let t = pm.calls[o.call_index].t_enter;
            match o.call {
                CallId::NcclSend => sends.entry((rank, peer)).or_default().push((
                    rank,
                    p,
                    o.call_index,
                    bytes,
                    t,
                    o.count,
                )),
                CallId::NcclRecv => recvs.entry((peer, rank)).or_default().push((
                    rank,
                    p,
                    o.call_index,
                    bytes,
                    t,
                    o.count,
                )),
                _ => {}
            }
        }
    }
    // The text names each side by its rank in the job (a send on a subgroup's communicator
    // from its rank 0 to its rank 1 is global rank 2's to global rank 3 when the subgroup holds
    // ranks 2-3); the sides and odd ranks stay the communicator's, as the story's are.
    let global: BTreeMap<u32, u32> = job
        .comm_members(comm)
        .into_iter()
        .map(|(r, p)| (r, job.processes[p].world_rank().unwrap_or(r)))
        .collect();
    let g = |r: u32| global.get(&r).copied().unwrap_or(r);
    let mut out = Vec::new();
    for (pair, ss) in &sends {
        let Some(rs) = recvs.get(pair) else { continue };
        if let Some((s, r)) = ss.iter().zip(rs).find(|(s, r)| s.3 != r.3) {
            out.push(Mismatch {
                comm,
                field: "size",
                sides: vec![(s.0, s.1, s.2), (r.0, r.1, r.2)],
                odd: vec![r.0],
                t: s.4.min(r.4),
                text: format!(
                    "rank {} sends count={} ({} bytes) to rank {}; rank {} receives count={} ({} bytes) from rank {}",
                    g(s.0),
                    s.5,
                    s.3,
                    g(pair.1),
                    g(r.0),
                    r.5,
                    r.3,
                    g(pair.0)
                ),
            });
        }
    }
    out
}

/// Every communicator's story.
pub fn build(job: &JobModel) -> Vec<CommStory> {
    job.comms
        .keys()
        .map(|&comm| {
            // Each member's place is its own records' (in parallel: a walk of every rank's
            // calls, serial, was a second of a 16,384-rank job).
            let members: Vec<Member> = {
                use rayon::prelude::*;
                let ranks = job.comm_members(comm);
                let ended =
                    position::ended_somewhere(ranks.iter().map(|&(_, p)| &job.processes[p]), comm);
                ranks
                    .into_par_iter()
                    .map(|(r, p)| member(job, comm, r, p, &ended))
                    .collect()
            };
            let divergence = super::sequence::first(job, comm, &job.comm_members(comm));
            let mut mismatches = coll_mismatches(job, comm);
            mismatches.extend(p2p_mismatches(job, comm));
            let mut stall = if members.len() >= 2 {
                stall(comm, &members)
            } else {
                None
            };
            // A behind rank that issued as many collectives in all as the waiters issued a
            // different collective at that point: a mismatch, not a laggard.
            if let Some(s) = stall.as_ref() {
                if let Some(m) = different_collective(&members, s) {
                    mismatches.push(m);
                }
            }
            // A rank that issued the stalled collective with other arguments took part
            // differently, not never.
            if let Some(s) = stall.as_mut() {
                for m in &mismatches {
                    for b in s.behind.iter_mut() {
                        if m.odd.contains(&b.0) {
                            b.2 = Behind::Different;
                        }
                    }
                }
            }
            CommStory {
                comm,
                members,
                stall,
                mismatches,
                divergence,
            }
        })
        .collect()
}

/// Collectives a member issued in all (every function), when known.
fn total_colls(m: &Member) -> u64 {
    m.last_coll
        .values()
        .fold(0u64, |n, c| n.saturating_add(c.op_seq.saturating_add(1)))
}

/// The stall's behind ranks that issued as many collectives as the waiters, but another one:
/// the ranks disagree on which collective comes next.
fn different_collective(members: &[Member], s: &Stall) -> Option<Mismatch> {
    let first = s.waiting.first()?.1;
    let waiter = members.iter().find(|m| m.process == first)?;
    let wc = waiter.last_coll.get(&s.function)?;
    let total = total_colls(waiter);
    let others: Vec<&Member> = s
        .behind
        .iter()
        .filter_map(|b| members.iter().find(|m| m.process == b.1))
        // Totals come from NCCL's own numbers, which ring wrap and pruning do not change.
        .filter(|m| total_colls(m) >= total)
        .collect();
    let other = others.first()?;
    // What it issued instead: its newest collective of another function.
    let instead = other
        .last_coll
        .iter()
        .filter(|(f, _)| **f != s.function)
        .map(|(_, c)| *c)
        .max_by_key(|c| c.t)?;
    // The minority is odd; in a tie, the side without the lowest rank.
    let lowest_waiting = s.waiting.iter().map(|w| w.0).min().unwrap_or(u32::MAX);
    let lowest_other = others.iter().map(|m| m.rank).min().unwrap_or(u32::MAX);
    let odd: Vec<u32> = if others.len() * 2 > members.len()
        || (others.len() * 2 == members.len() && lowest_other < lowest_waiting)
    {
        s.waiting.iter().map(|w| w.0).collect()
    } else {
        others.iter().map(|m| m.rank).collect()
    };
    let mut sides: Vec<(u32, usize, usize)> = s
        .waiting
        .iter()
        .map(|w| (w.0, w.1, wc.call_index))
        .collect();
    sides.extend(
        others
            .iter()
            .map(|m| (m.rank, m.process, instead.call_index)),
    );
    Some(Mismatch {
        comm: s.comm,
        field: "collective",
        text: format!(
            "{} issued {} #{} count={} while {} issued {} count={} at the same point",
            rank_words(&s.waiting.iter().map(|w| w.0).collect::<Vec<_>>()),
            wc.call.name(),
            wc.op_seq,
            wc.count,
            rank_words(&others.iter().map(|m| m.rank).collect::<Vec<_>>()),
            instead.call.name(),
            instead.count
        ),
        sides,
        odd,
        t: wc.t.min(instead.t),
    })
}

fn rank_words(rs: &[u32]) -> String {
    let noun = if rs.len() == 1 { "rank" } else { "ranks" };
    format!("{noun} {}", crate::finding::words::rank_list(rs))
}
