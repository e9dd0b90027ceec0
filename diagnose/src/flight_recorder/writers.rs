//! Which writer wrote a Flight Recorder entry, and which NCCL calls the entry became
//! (`knowledge/flight-recorder-writers.toml`, [`crate::knowledge::fr_writers`]).
//!
//! Why it matters to the join: the shim records NCCL calls, numbered per communicator. The
//! legacy ProcessGroupNCCL issues one NCCL call per entry, with the entry's number less one.
//! PyTorch 2.15's `nccl2` does not: a list all_gather is N ncclBroadcast, an all_to_all grouped
//! send/recv, and `split` / `new_window` take a sequence number without any NCCL collective.
//! An entry turned into the wrong calls, or numbered as the legacy backend numbers it, makes a
//! rank known from its Flight Recorder dump alone disagree with the shim's ranks where nothing
//! differed. torchcomms writes the legacy prefix with its own numbering and rank lists;
//! [`normalize`] reads it into the shape the rest of the reader expects.

use super::dumps::{ProcessGroup, RankDump};
use super::format::{FrEntry, FrFile, Ranks};
use crate::knowledge::fr_writers::{self, Count, Repeat, Writer};
use ncclshim_format::CallId;
use std::collections::{BTreeMap, HashMap};

/// The writer of a whole dump when its entries' prefix does not tell it (torchcomms writes
/// "nccl:" like the legacy backend; its `pg_config` ranks are "0,1", without brackets).
pub fn of_file(f: &FrFile) -> Option<&'static Writer> {
    let bare = f
        .pg_config
        .values()
        .any(|c| matches!(&c.ranks, Ranks::Text(t) if !t.trim_start().starts_with('[')));
    bare.then(|| {
        fr_writers::writers()
            .iter()
            .find(|w| w.detect.as_deref() == Some("bare_ranks"))
    })
    .flatten()
}

/// The writer of entry `e` of dump `d`: the dump's own, else the one its profiling name's
/// prefix names (None for a backend no writer lowers, read as the legacy one).
pub fn of_entry(d: &RankDump, e: &FrEntry) -> Option<&'static Writer> {
    d.writer.or_else(|| fr_writers::by_prefix(e.backend()))
}

/// Whether entries of this writer are one NCCL call each, numbered collective_seq_id - 1.
fn legacy(w: Option<&Writer>) -> bool {
    w.is_none_or(|w| w.id == "nccl" || w.id == "torchcomms")
}

/// One NCCL call an entry became; `root_or_peer` in the group's own ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    pub id: CallId,
    pub count: u64,
    pub root_or_peer: Option<u32>,
}

impl Call {
    pub fn is_p2p(&self) -> bool {
        matches!(self.id, CallId::NcclSend | CallId::NcclRecv)
    }
}

fn numel(dims: &[i64]) -> u64 {
    dims.iter().map(|d| (*d).max(0) as u64).product()
}

/// The peer of a send or receive in the group's ranks: from the profiling name ("send 0->1";
/// the legacy backend writes them), else the other rank of a 2-rank group (nccl2 writes no
/// peers; a pair group of `nccl-lazy` has one).
fn p2p_peer(e: &FrEntry, id: CallId, me: u32, size: usize) -> Option<u32> {
    let named = e
        .p2p_peers()
        .map(|(from, to)| if id == CallId::NcclSend { to } else { from });
    let peer = named.or_else(|| (size == 2).then_some(1 - me.min(1)))?;
    ((peer as usize) < size).then_some(peer)
}

/// The NCCL calls entry `e` became under writer `w`, in a group of `size` ranks where this
/// rank is `me`. Empty for an entry that issued none (`split`, a name NCCL has no call for).
pub fn lower(w: Option<&Writer>, e: &FrEntry, size: usize, me: u32) -> Vec<Call> {
    let op = e.op_name();
    let rule = w.and_then(|w| fr_writers::lowering(&w.id, op));
    let one = |id: CallId, count: u64| {
        let root_or_peer = match id {
            CallId::NcclSend | CallId::NcclRecv => p2p_peer(e, id, me, size),
            _ => None,
        };
        Call {
            id,
            count,
            root_or_peer,
        }
    };
    let Some(rule) = rule else {
        return call_id(op)
            .map(|id| vec![one(id, e.input_count())])
            .unwrap_or_default();
    };
    let ids = rule.call_ids();
    let tensors = match rule.repeat {
        Repeat::PerOutput => Some(&e.output_sizes),
        Repeat::PerInput => Some(&e.input_sizes),
        _ => None,
    };
    // One tensor on the repeated side: the one-call form (all_gather_into_tensor).
    if tensors.is_some_and(|t| t.len() <= 1) {
        return call_id(op)
            .map(|id| vec![one(id, e.input_count())])
            .unwrap_or_default();
    }
    let count_of = |i: usize| match rule.count {
        Count::Input => e.input_count(),
        Count::OutputEach => e.output_sizes.get(i).map_or(0, |d| numel(d)),
        Count::InputEach => e.input_sizes.get(i).map_or(0, |d| numel(d)),
        Count::InputPerRank => e.input_count() / size.max(1) as u64,
        Count::One => 1,
    };
    let times = match rule.repeat {
        Repeat::Once => 1,
        Repeat::PerOutput | Repeat::PerInput => tensors.map_or(1, Vec::len),
        Repeat::PerRank => size,
    };
    let mut out = Vec::with_capacity(times * ids.len());
    for i in 0..times {
        for &id in &ids {
            let root_or_peer = (rule.repeat != Repeat::Once).then_some(i as u32);
            out.push(Call {
                id,
                count: count_of(i),
                root_or_peer,
            });
        }
    }
    out
}

/// The shim's sequence number of the first NCCL collective each collective entry of group `g`
/// in dump `d` became (None: it became none), by the entry's index in the dump.
///
/// Legacy entries: collective_seq_id - 1. Others: counted from the first entry the ring still
/// holds (taken as numbered like the legacy backend: what the ring dropped is unknown), each
/// entry advancing the count by the collectives it became.
pub fn collective_seqs(d: &RankDump, g: &ProcessGroup) -> BTreeMap<usize, Option<u64>> {
    let me = g.ranks.iter().position(|r| *r == d.rank).unwrap_or(0) as u32;
    let mut out = BTreeMap::new();
    let mut next: Option<u64> = None;
    for (i, e) in d.entries.iter().enumerate() {
        if e.is_p2p || d.group_of(e).is_none_or(|x| x.name != g.name) {
            continue;
        }
        let w = of_entry(d, e);
        let from_entry = e.collective_seq_id.saturating_sub(1).max(0) as u64;
        if legacy(w) {
            out.insert(i, Some(from_entry));
            continue;
        }
        let at = *next.get_or_insert(from_entry);
        let n = lower(w, e, g.ranks.len(), me)
            .iter()
            .filter(|c| !c.is_p2p())
            .count() as u64;
        out.insert(i, (n > 0).then_some(at));
        next = Some(at + n);
    }
    out
}

/// How the evidence numbers an entry with the shim's sequence number beside PyTorch's.
pub fn shim_seq_text(d: &RankDump, g: &ProcessGroup, e: &FrEntry) -> String {
    // The legacy numbering needs no walk of the dump (a report quotes one entry per rank of
    // every group: a walk each was ranks x entries on a large job).
    if legacy(of_entry(d, e)) {
        return format!("shim seq {}", e.collective_seq_id.saturating_sub(1));
    }
    let seqs = collective_seqs(d, g);
    let at = d
        .entries
        .iter()
        .position(|x| std::ptr::eq(x, e))
        .and_then(|i| seqs.get(&i).copied());
    match at {
        Some(Some(s)) => format!("shim seq {s}"),
        Some(None) => format!(
            "no NCCL collective: {} counts {} in the sequence",
            of_entry(d, e).map_or("PyTorch", |w| w.id.as_str()),
            e.op_name()
        ),
        None => format!("shim seq {}", e.collective_seq_id.saturating_sub(1)),
    }
}

/// torchcomms' dump in the shape the reader expects: one collective_seq_id over every group of
/// the process, from 0, becomes each group's own from 1; its sends and receives (written as
/// collectives, `is_p2p` false) become point-to-point entries numbered per group.
pub fn normalize(w: Option<&Writer>, entries: &mut [FrEntry]) {
    if !w.is_some_and(|w| w.seq_per_process) {
        return;
    }
    let mut coll: HashMap<i64, i64> = HashMap::new();
    let mut p2p: HashMap<i64, i64> = HashMap::new();
    for e in entries.iter_mut() {
        if matches!(e.op_name(), "send" | "recv") {
            e.is_p2p = true;
            let n = p2p.entry(e.pg_id).or_default();
            *n += 1;
            e.p2p_seq_id = *n;
            // As the legacy backend writes a p2p entry: its group's last collective number.
            e.collective_seq_id = coll.get(&e.pg_id).copied().unwrap_or(0);
        } else {
            let n = coll.entry(e.pg_id).or_default();
            *n += 1;
            e.collective_seq_id = *n;
        }
    }
}

/// Sends and receives of a writer whose p2p entries can be missing (`nccl-lazy`) that do not
/// pair up between two ranks that both dumped: the sender's dump holds `sends` to `to`, the
/// receiver's holds `recvs` from `from` (global ranks), and the numbers differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unpaired {
    /// The process group's name, and its label for the report.
    pub group: String,
    pub label: String,
    pub writer: &'static str,
    pub from: u32,
    pub to: u32,
    pub sends: usize,
    pub recvs: usize,
}

/// Every [`Unpaired`] pair of the dumps read. Such entries are missing records, not a desync:
/// the k-th send no longer faces the k-th receive, so none of the pair's entries is compared.
pub fn unpaired_p2p(fr: &super::dumps::FlightRecorder) -> Vec<Unpaired> {
    type Key = (String, u32, u32);
    let mut counts: BTreeMap<Key, (usize, usize, &ProcessGroup, &'static str)> = BTreeMap::new();
    let dumped: std::collections::BTreeSet<u32> = fr.dumps.iter().map(|d| d.rank).collect();
    for d in &fr.dumps {
        for e in d.entries.iter().filter(|e| e.is_p2p) {
            let Some(w) = of_entry(d, e).filter(|w| !w.p2p_entries_complete) else {
                continue;
            };
            let Some(g) = d.group_of(e) else { continue };
            let Some(me) = g.ranks.iter().position(|r| *r == d.rank) else {
                continue;
            };
            for c in lower(Some(w), e, g.ranks.len(), me as u32) {
                let Some(peer) = c.root_or_peer.and_then(|p| g.ranks.get(p as usize)) else {
                    continue;
                };
                let (key, send) = match c.id {
                    CallId::NcclSend => ((g.name.clone(), d.rank, *peer), true),
                    CallId::NcclRecv => ((g.name.clone(), *peer, d.rank), false),
                    _ => continue,
                };
                let n = counts.entry(key).or_insert((0, 0, g, w.id.as_str()));
                if send {
                    n.0 += 1;
                } else {
                    n.1 += 1;
                }
            }
        }
    }
    counts
        .into_iter()
        .filter(|((_, from, to), (s, r, _, _))| {
            s != r && dumped.contains(from) && dumped.contains(to)
        })
        .map(|((group, from, to), (sends, recvs, g, writer))| Unpaired {
            group,
            label: g.label(),
            writer,
            from,
            to,
            sends,
            recvs,
        })
        .collect()
}

/// NCCL's function for a PyTorch collective name (`fr_trace`'s `COLLECTIVES` and `P2P`
/// names; `barrier` is an all-reduce of one element in ProcessGroupNCCL).
pub fn call_id(op: &str) -> Option<CallId> {
    Some(match op {
        "all_reduce" | "allreduce" | "allreduce_coalesced" | "barrier" => CallId::NcclAllReduce,
        "broadcast" | "_broadcast_oop" => CallId::NcclBroadcast,
        "reduce" | "_reduce_oop" => CallId::NcclReduce,
        "all_gather"
        | "_allgather_base"
        | "allgather_into_tensor_coalesced"
        | "all_gather_into_tensor_coalesced"
        | "_all_gather_base"
        | "allgather" => CallId::NcclAllGather,
        "reduce_scatter" | "_reduce_scatter_base" | "reduce_scatter_tensor_coalesced" => {
            CallId::NcclReduceScatter
        }
        "all_to_all" | "alltoall" | "alltoall_base" | "all_to_all_single" => CallId::NcclAlltoAll,
        "gather" => CallId::NcclGather,
        "scatter" => CallId::NcclScatter,
        "send" => CallId::NcclSend,
        "recv" => CallId::NcclRecv,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, inputs: Vec<Vec<i64>>, outputs: Vec<Vec<i64>>) -> FrEntry {
        FrEntry {
            profiling_name: name.into(),
            input_sizes: inputs,
            output_sizes: outputs,
            ..FrEntry::default()
        }
    }

    #[test]
    fn nccl2_lowers_as_its_table_says() {
        let nccl2 = fr_writers::writer("nccl2");
        let ids = |e: &FrEntry| -> Vec<(CallId, u64, Option<u32>)> {
            lower(nccl2, e, 4, 0)
                .iter()
                .map(|c| (c.id, c.count, c.root_or_peer))
                .collect()
        };
        let bcast = entry("nccl2:broadcast", vec![vec![8]], vec![vec![8]]);
        assert_eq!(ids(&bcast), [(CallId::NcclBcast, 8, None)]);
        let list = entry("nccl2:all_gather", vec![vec![8]], vec![vec![8]; 4]);
        assert_eq!(
            ids(&list),
            (0..4)
                .map(|r| (CallId::NcclBroadcast, 8, Some(r)))
                .collect::<Vec<_>>()
        );
        let into = entry("nccl2:all_gather", vec![vec![8]], vec![vec![32]]);
        assert_eq!(ids(&into), [(CallId::NcclAllGather, 8, None)]);
        let barrier = entry("nccl2:barrier", vec![], vec![]);
        assert_eq!(ids(&barrier), [(CallId::NcclAllReduce, 1, None)]);
        assert!(ids(&entry("nccl2:split", vec![], vec![])).is_empty());
        let a2a = entry("nccl2:all_to_all", vec![vec![16]], vec![vec![16]]);
        assert_eq!(ids(&a2a).len(), 8, "a send and a receive per rank");
        // The legacy backend: one call whatever the tensors.
        let legacy = entry("nccl:all_gather", vec![vec![8]], vec![vec![8]; 4]);
        assert_eq!(lower(None, &legacy, 4, 0).len(), 1);
    }

    #[test]
    fn nccl2_p2p_peers_are_the_other_rank_of_a_pair_or_the_named_one() {
        let w = fr_writers::writer("nccl2");
        let send = entry("nccl2:send", vec![vec![8]], vec![vec![8]]);
        assert_eq!(lower(w, &send, 2, 0)[0].root_or_peer, Some(1));
        assert_eq!(lower(w, &send, 2, 1)[0].root_or_peer, Some(0));
        assert_eq!(lower(w, &send, 4, 0)[0].root_or_peer, None);
        let named = entry("nccl2:send 0->3", vec![vec![8]], vec![vec![8]]);
        assert_eq!(lower(w, &named, 4, 0)[0].root_or_peer, Some(3));
    }

    #[test]
    fn split_takes_a_number_and_no_shim_seq() {
        let g = ProcessGroup {
            id: "0".into(),
            name: "0".into(),
            desc: "default_pg".into(),
            ranks: vec![0, 1],
        };
        let e = |name: &str, seq: i64| FrEntry {
            pg_id: 0,
            process_group: vec!["0".into(), "default_pg".into()],
            collective_seq_id: seq,
            profiling_name: name.into(),
            input_sizes: vec![vec![4]],
            output_sizes: vec![vec![4]],
            ..FrEntry::default()
        };
        let d = RankDump {
            rank: 0,
            groups: vec![g.clone()],
            entries: vec![
                e("nccl2:all_reduce", 1),
                e("nccl2:split", 2),
                e("nccl2:all_reduce", 3),
            ],
            ..RankDump::default()
        };
        let seqs: Vec<Option<u64>> = collective_seqs(&d, &g).into_values().collect();
        assert_eq!(seqs, [Some(0), None, Some(1)]);
        assert_eq!(shim_seq_text(&d, &g, &d.entries[2]), "shim seq 1");
    }

    #[test]
    fn torchcomms_numbers_become_per_group() {
        let w = fr_writers::writer("torchcomms");
        let e = |pg: i64, name: &str, seq: i64| FrEntry {
            pg_id: pg,
            collective_seq_id: seq,
            profiling_name: name.into(),
            ..FrEntry::default()
        };
        let mut es = vec![
            e(0, "nccl:all_reduce", 0),
            e(1, "nccl:all_reduce", 1),
            e(0, "nccl:send", 2),
            e(0, "nccl:all_reduce", 3),
        ];
        normalize(w, &mut es);
        let got: Vec<(i64, bool, i64, i64)> = es
            .iter()
            .map(|e| (e.pg_id, e.is_p2p, e.collective_seq_id, e.p2p_seq_id))
            .collect();
        assert_eq!(
            got,
            [
                (0, false, 1, 0),
                (1, false, 1, 0),
                (0, true, 1, 1),
                (0, false, 2, 0)
            ]
        );
    }
}
