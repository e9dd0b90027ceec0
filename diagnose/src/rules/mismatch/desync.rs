//! Catalog C19: collective desync. Ranks of one communicator issue different collectives at the same
//! sequence number (op, count, datatype, reduction, root), or in a different order; NCCL cannot
//! tell and hangs. Compared per communicator from the shim's calls and the profiler's Coll events.
//!
//! Each source is compared in its own numbering: the shim counts a communicator's collectives;
//! NCCL's profiler counts per communicator *and function* (`knowledge/profiler.toml`), so its
//! events are compared at equal (function, number), never an AllReduce of one rank against a
//! Broadcast of another that happen to carry the same number.

use crate::model::JobModel;
use crate::names::{datatype_name, redop_name};
use crate::rules::{Confidence, Evidence, EvidenceKind, Finding};
use crate::story::progress::reduction_and_root;
use ncclshim_format::CallId;
use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry;
use std::collections::BTreeMap;
use std::hash::Hash;

/// What must agree across ranks for one collective.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Sig {
    op: String,
    count: u64,
    datatype: String,
    redop: Option<u64>,
    root: Option<u64>,
}

impl Sig {
    fn text(&self) -> String {
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

/// The smallest number at which two ranks disagree. The first rank seen at a number sets the
/// reference, every other rank is compared with it; the members are compared in parallel, each
/// share with its own references, merged after (the one serial pass over every collective of
/// every rank was a large part of the rules at 16,384 ranks). `N` is the source's numbering: a
/// bare sequence number (the shim's), or (function, number) for a profiler that counts per
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

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut out = Vec::new();
    for (&comm, view) in &job.comms {
        let members: Vec<(u32, usize)> = view
            .members
            .iter()
            .flat_map(|(r, ps)| ps.iter().map(move |p| (*r, *p)))
            .collect();
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
        // The shim's and the profiler's sequence numbers are counted by different code and are
        // only compared with their own kind; the profiler's only between ranks whose NCCL
        // numbers alike (a job mixing releases is C03's to report).
        let shim_div = first_divergence(&members, |p| {
            shim_ops(p).map(|o| {
                (
                    o.seq,
                    shim_key(o.call, o.count, o.datatype, o.op, o.root_or_peer),
                )
            })
        });
        let one_numbering = members.windows(2).all(|w| {
            job.processes[w[0].1].profiler_era().coll_seq
                == job.processes[w[1].1].profiler_era().coll_seq
        });
        // Ordered by number first, then function: the earliest divergence of any function.
        let prof_div = one_numbering
            .then(|| {
                first_divergence(&members, |p| {
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
                })
            })
            .flatten();
        let (seq, prof_func, source) = match (shim_div, prof_div) {
            (Some(s), _) => (s, None, ""),
            (None, Some((s, func))) => (s, Some(func), " (profiler)"),
            (None, None) => continue,
        };
        let mut groups: BTreeMap<Sig, Vec<u32>> = BTreeMap::new();
        for &(rank, p) in &members {
            let sig = if source.is_empty() {
                shim_ops(p)
                    .find(|o| o.seq == seq)
                    .map(|o| shim_sig(o.call, o.count, o.datatype, o.op, o.root_or_peer))
            } else {
                prof_ops(p)
                    .find(|(k, _)| *k == (prof_func.flatten(), seq))
                    .map(|(_, o)| Sig {
                        op: crate::profnames::func_name(o.func),
                        count: o.count,
                        datatype: crate::profnames::datatype_name(o.datatype),
                        redop: None,
                        root: None,
                    })
            };
            if let Some(sig) = sig {
                groups.entry(sig).or_default().push(rank);
            }
        }
        // Where the profiler numbers per function, "number 5" is the function's own count.
        let numbered = match prof_func.flatten() {
            Some(func) => format!(
                "{} number {seq} (the profiler numbers each function separately)",
                crate::profnames::func_name(func)
            ),
            None => format!("sequence number {seq}"),
        };
        let mut f = Finding::new(
            "collective-desync",
            Some("C19"),
            format!("Ranks issued different collectives at {numbered} on one communicator"),
            Confidence::High,
        )
        .remedy(
            "Make the sequence of collectives identical on every rank: no rank-dependent branches \
             around collectives, identical metric keys, padded uneven batches. PyTorch: \
             TORCH_DISTRIBUTED_DEBUG=DETAIL names the Python call sites.",
        );
        for (sig, rs) in &groups {
            let ps: Vec<usize> = members
                .iter()
                .filter(|(r, _)| rs.contains(r))
                .map(|&(_, p)| p)
                .collect();
            f.fact(
                Evidence::new(
                    EvidenceKind::Progress,
                    match prof_func.flatten() {
                        Some(func) => format!(
                            "comm {comm:#x} {} #{seq}{source}: issued {}",
                            crate::profnames::func_name(func),
                            sig.text()
                        ),
                        None => format!("comm {comm:#x} seq {seq}{source}: issued {}", sig.text()),
                    },
                )
                .value("comm", format!("{comm:#x}"))
                .value("seq", seq)
                .value(
                    "source",
                    if source.is_empty() {
                        "shim"
                    } else {
                        "profiler"
                    },
                )
                .value("op", &sig.op)
                .value("count", sig.count)
                .value("datatype", &sig.datatype)
                .value("redop", sig.redop)
                .value("root", sig.root)
                .of_all(job, &ps),
            );
        }
        // The finding names the ranks that deviate: the minority; in a tie, the side without
        // the lowest rank (the story's mismatches decide alike). The evidence shows every side.
        let majority = groups
            .iter()
            .max_by_key(|(_, rs)| {
                (
                    rs.len(),
                    std::cmp::Reverse(rs.iter().min().copied().unwrap_or(u32::MAX)),
                )
            })
            .map(|(sig, _)| sig);
        let odd: Vec<u32> = groups
            .iter()
            .filter(|(sig, _)| Some(*sig) != majority)
            .flat_map(|(_, rs)| rs.iter().copied())
            .collect();
        for &(rank, p) in &members {
            if odd.is_empty() || odd.contains(&rank) {
                f.involve(job, p);
            }
        }
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testutil::{analyze, find};

    #[test]
    fn count_differs_at_one_seq() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22203);
            let comms = s.init_world(22203);
            for (r, c) in s.ranks.iter().zip(&comms) {
                r.coll(CallId::NcclAllReduce, *c, 0, 1000, 7, 0, 0, 0, None);
                let n = if r.rank == 1 { 51_123_456 } else { 195_812_480 };
                r.coll(CallId::NcclAllReduce, *c, 1, n, 7, 0, 0, 0, None);
            }
        });
        let f = find(&fs, "collective-desync").expect("C19");
        assert!(f.title.contains("sequence number 1"));
        assert!(f.evidence.iter().any(|e| e.ranks == [1]
            && e.values["count"] == 51_123_456
            && e.contains("issued ncclAllReduce count=51123456 float32 op=sum")));
    }

    /// The finding names the rank that deviates, not every rank (the real H100 capture
    /// `op-mismatch`: two ranks all-reduce, the third broadcasts); in a tie, the side without
    /// the lowest rank.
    #[test]
    fn the_odd_rank_is_named() {
        let (_, fs) = analyze(&["n0", "n0", "n0"], |s| {
            s.snapshot_all(22203);
            let comms = s.init_world(22203);
            for (r, c) in s.ranks.iter().zip(&comms) {
                r.coll(CallId::NcclAllReduce, *c, 0, 1000, 7, 0, 0, 0, None);
                let call = if r.rank == 2 {
                    CallId::NcclBroadcast
                } else {
                    CallId::NcclAllReduce
                };
                r.coll(call, *c, 1, 1000, 7, 0, 0, 0, None);
            }
        });
        let f = find(&fs, "collective-desync").expect("C19");
        assert_eq!(f.ranks, [2]);
        assert_eq!(f.evidence.len(), 2, "both sides stay in the evidence");

        let (_, fs) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22203);
            let comms = s.init_world(22203);
            for (r, c) in s.ranks.iter().zip(&comms) {
                let call = if r.rank == 0 {
                    CallId::NcclBroadcast
                } else {
                    CallId::NcclAllReduce
                };
                r.coll(call, *c, 0, 1000, 7, 0, 0, 0, None);
            }
        });
        let f = find(&fs, "collective-desync").expect("C19");
        assert_eq!(f.ranks, [1], "a tie names the side without rank 0");
    }

    #[test]
    fn identical_sequences_are_fine() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22203);
            let comms = s.init_world(22203);
            for (r, c) in s.ranks.iter().zip(&comms) {
                r.coll(CallId::NcclAllReduce, *c, 0, 1000, 7, 0, 0, 0, None);
            }
        });
        assert!(find(&fs, "collective-desync").is_none());
    }

    fn func(name: &[u8]) -> u64 {
        u64::from(ncclshim_format::profnames::NameTable::Func.code_of(name))
    }

    /// NCCL's profiler numbers each function from 0 (`knowledge/profiler.toml`): two ranks that
    /// issue AllReduce, AllGather and Broadcast in the same order carry "seq 0" three times each.
    /// Compared by bare number, AllReduce #0 would differ from AllGather #0.
    #[test]
    fn the_profilers_per_function_numbers_are_compared_per_function() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            for r in s.ranks.iter_mut() {
                r.prof_init(ncclshim_fixtures::synth::WORLD_UID, 2, u64::from(r.rank));
                for round in 0..3 {
                    for (name, count) in [
                        (&b"AllReduce"[..], 1024),
                        (b"AllGather", 8192),
                        (b"Broadcast", 4096),
                    ] {
                        r.prof_coll(
                            ncclshim_fixtures::synth::WORLD_UID,
                            round,
                            func(name),
                            count,
                            7,
                            0,
                            true,
                            true,
                        );
                    }
                }
            }
        });
        assert!(find(&fs, "collective-desync").is_none(), "{fs:#?}");
    }

    /// The same per-function numbering still finds a real desync: the second AllGather has a
    /// different size on rank 1, named by its function and its number.
    #[test]
    fn a_difference_at_one_functions_number_is_a_desync() {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            for r in s.ranks.iter_mut() {
                r.prof_init(ncclshim_fixtures::synth::WORLD_UID, 2, u64::from(r.rank));
                for round in 0..3 {
                    let gather = if r.rank == 1 && round == 1 {
                        4096
                    } else {
                        8192
                    };
                    r.prof_coll(
                        ncclshim_fixtures::synth::WORLD_UID,
                        round,
                        func(b"AllReduce"),
                        1024,
                        7,
                        0,
                        true,
                        true,
                    );
                    r.prof_coll(
                        ncclshim_fixtures::synth::WORLD_UID,
                        round,
                        func(b"AllGather"),
                        gather,
                        7,
                        0,
                        true,
                        true,
                    );
                }
            }
        });
        let f = find(&fs, "collective-desync").expect("C19");
        assert!(f.title.contains("AllGather number 1"), "{}", f.title);
        assert!(
            f.evidence.iter().any(|e| e.ranks == [1]
                && e.values["count"] == 4096
                && e.values["source"] == "profiler"),
            "{:#?}",
            f.evidence
        );
    }
}
