//! The first point at which the ranks of one communicator issued their collectives differently:
//! a different collective, or the same one with a different count, datatype, reduction or root
//! (catalog C19). NCCL cannot tell and hangs, or corrupts data.
//!
//! Each source is compared in its own numbering: the shim counts a communicator's operations
//! (`seq`); NCCL's profiler counts per communicator *and function* (`knowledge/profiler.toml`),
//! so its events are compared at equal (function, number), never an AllReduce of one rank
//! against a Broadcast of another that happen to carry the same number. The profiler's numbers
//! are compared only between ranks whose NCCL numbers alike (a job mixing releases is C03's).

use crate::model::JobModel;
use crate::names::{datatype_name, redop_name};
use ncclshim_format::CallId;
use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry;
use std::collections::BTreeMap;
use std::hash::Hash;

/// What must agree across ranks for one collective, in words.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sig {
    pub op: String,
    pub count: u64,
    pub datatype: String,
    pub redop: Option<u64>,
    pub root: Option<u64>,
}

impl Sig {
    /// `ncclAllReduce count=1024 float32 op=sum`.
    pub fn text(&self) -> String {
        let mut s = format!("{} count={} {}", self.op, self.count, self.datatype);
        if let Some(r) = self.redop {
            s.push_str(&format!(" op={}", redop_name(r)));
        }
        if let Some(r) = self.root {
            s.push_str(&format!(" root={r}"));
        }
        s
    }
}

/// Which numbering the divergence was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbering {
    /// The shim's number of the communicator's operations.
    Shim,
    /// The profiler's number of one function's collectives (its code, when the era names it).
    Profiler { function: Option<u64> },
}

/// The ranks that issued one signature at the divergence.
#[derive(Debug, Clone)]
pub struct IssuedGroup {
    pub sig: Sig,
    pub ranks: Vec<u32>,
    pub processes: Vec<usize>,
}

/// The first point of divergence on one communicator.
#[derive(Debug, Clone)]
pub struct Divergence {
    pub seq: u64,
    pub numbering: Numbering,
    /// Every signature issued there with its ranks, ordered by signature.
    pub groups: Vec<IssuedGroup>,
    /// The ranks that deviate (see [`odd_ranks`]).
    pub odd: Vec<u32>,
}

/// The ranks that deviate from the others: the minority; in a tie, the side without the lowest
/// rank (PyTorch's analyzer names the later rank of a pair too). Groups are rank lists.
pub fn odd_ranks<'a>(groups: impl Iterator<Item = &'a [u32]> + Clone) -> Vec<u32> {
    let majority = groups.clone().enumerate().max_by_key(|(_, rs)| {
        (
            rs.len(),
            std::cmp::Reverse(rs.iter().min().copied().unwrap_or(u32::MAX)),
        )
    });
    let Some((keep, _)) = majority else {
        return Vec::new();
    };
    groups
        .enumerate()
        .filter(|(k, _)| *k != keep)
        .flat_map(|(_, rs)| rs.iter().copied())
        .collect()
}

/// A signature without allocation, for the pass over every collective of every rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    op: u64,
    count: u64,
    datatype: u64,
    redop: Option<u64>,
    root: Option<u64>,
}

fn shim_key(c: CallId, count: u64, dt: u64, op: u64, root: u64) -> Key {
    let (redop, root) = reduction_and_root(c, op, root);
    Key {
        op: c as u64,
        count,
        datatype: dt,
        redop,
        root,
    }
}

fn shim_sig(c: CallId, count: u64, dt: u64, op: u64, root: u64) -> Sig {
    let (redop, root) = reduction_and_root(c, op, root);
    Sig {
        op: c.name().to_owned(),
        count,
        datatype: datatype_name(dt),
        redop,
        root,
    }
}

/// The smallest number at which two ranks disagree. The first rank seen at a number sets the
/// reference, every other rank is compared with it; the members are compared in parallel, each
/// share with its own references, merged after (one serial pass over every collective of every
/// rank was a large part of the analysis at 16,384 ranks). `N` is the source's numbering: a
/// bare sequence number (the shim's), or (number, function) for a profiler that counts per
/// function; numbers order by their sequence number first.
fn first_divergence<N, I>(
    members: &[(u32, usize)],
    entries_of: impl Fn(usize) -> I + Sync,
) -> Option<N>
where
    N: Copy + Ord + Hash + Send,
    I: Iterator<Item = (N, Key)>,
{
    use rayon::prelude::*;
    type Share<N> = (FxHashMap<N, Key>, Option<N>);
    let earliest = |a: Option<N>, b: Option<N>| match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    };
    let note = |share: &mut Share<N>, seq: N, key: Key| {
        if share.1.is_some_and(|f| seq >= f) {
            return;
        }
        match share.0.entry(seq) {
            Entry::Vacant(v) => {
                v.insert(key);
            }
            Entry::Occupied(o) => {
                if *o.get() != key {
                    share.1 = Some(seq);
                }
            }
        }
    };
    let (_, first) = members
        .par_iter()
        .fold(Share::<N>::default, |mut share, &(_, p)| {
            for (seq, key) in entries_of(p) {
                note(&mut share, seq, key);
            }
            share
        })
        .reduce(Share::<N>::default, |mut a, b| {
            a.1 = earliest(a.1, b.1);
            for (seq, key) in b.0 {
                note(&mut a, seq, key);
            }
            a
        });
    first
}

/// The first divergence of communicator `comm` among `members` (rank, process): the shim's
/// numbering first, the profiler's where the shim's agree.
pub fn first(job: &JobModel, comm: u64, members: &[(u32, usize)]) -> Option<Divergence> {
    let shim_ops = |p: usize| {
        job.processes[p].ops.iter().filter(move |o| {
            // All ones: an operation the recorder could not number (nested in another).
            o.comm_hash == Some(comm)
                && o.seq != u64::MAX
                && !matches!(o.call, CallId::NcclSend | CallId::NcclRecv)
        })
    };
    let prof_ops = |p: usize| {
        let pm = &job.processes[p];
        pm.prof_ops
            .iter()
            .filter(move |o| o.comm_hash == Some(comm) && !o.p2p)
            .filter_map(move |o| Some((pm.prof_seq_key(o)?, o)))
    };
    let shim_div = first_divergence(members, |p| {
        shim_ops(p).map(|o| {
            (
                o.seq,
                shim_key(o.call, o.count, o.datatype, o.op, o.root_or_peer),
            )
        })
    });
    let (seq, numbering) = match shim_div {
        Some(seq) => (seq, Numbering::Shim),
        None => {
            let one_numbering = members.windows(2).all(|w| {
                job.processes[w[0].1].profiler_era().coll_seq
                    == job.processes[w[1].1].profiler_era().coll_seq
            });
            if !one_numbering {
                return None;
            }
            // Ordered by number first, then function: the earliest divergence of any function.
            let (seq, function) = first_divergence(members, |p| {
                prof_ops(p).map(|((func, seq), o)| {
                    (
                        (seq, func),
                        Key {
                            op: o.func,
                            count: o.count,
                            datatype: o.datatype,
                            redop: None,
                            root: None,
                        },
                    )
                })
            })?;
            (seq, Numbering::Profiler { function })
        }
    };
    let mut by_sig: BTreeMap<Sig, IssuedGroup> = BTreeMap::new();
    for &(rank, p) in members {
        let sig = match numbering {
            Numbering::Shim => shim_ops(p)
                .find(|o| o.seq == seq)
                .map(|o| shim_sig(o.call, o.count, o.datatype, o.op, o.root_or_peer)),
            Numbering::Profiler { function } => prof_ops(p)
                .find(|(k, _)| *k == (function, seq))
                .map(|(_, o)| Sig {
                    op: crate::profnames::func_name(o.func),
                    count: o.count,
                    datatype: crate::profnames::datatype_name(o.datatype),
                    redop: None,
                    root: None,
                }),
        };
        if let Some(sig) = sig {
            let g = by_sig.entry(sig.clone()).or_insert_with(|| IssuedGroup {
                sig,
                ranks: Vec::new(),
                processes: Vec::new(),
            });
            g.ranks.push(rank);
            g.processes.push(p);
        }
    }
    let groups: Vec<IssuedGroup> = by_sig.into_values().collect();
    let odd = odd_ranks(groups.iter().map(|g| g.ranks.as_slice()));
    Some(Divergence {
        seq,
        numbering,
        groups,
        odd,
    })
}
/// The reduction and the root of a collective, where its function has them (None where it has
/// not: another rank's value there is no disagreement). The one classification for the story's
/// mismatches and C19's comparison of what ranks issued; `ncclBcast` is `ncclBroadcast` under
/// its older name, rooted alike.
pub fn reduction_and_root(call: CallId, redop: u64, root: u64) -> (Option<u64>, Option<u64>) {
    let reduces = matches!(
        call,
        CallId::NcclAllReduce | CallId::NcclReduce | CallId::NcclReduceScatter
    );
    let rooted = matches!(
        call,
        CallId::NcclBroadcast
            | CallId::NcclBcast
            | CallId::NcclReduce
            | CallId::NcclGather
            | CallId::NcclScatter
    );
    (reduces.then_some(redop), rooted.then_some(root))
}
