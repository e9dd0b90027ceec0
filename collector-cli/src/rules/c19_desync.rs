//! C19: collective desync. Ranks of one communicator issue different collectives at the same
//! sequence number (op, count, datatype, reduction, root), or in a different order; NCCL cannot
//! tell and hangs. Compared per communicator from the shim's calls and the profiler's Coll events.

use super::{rank_list, Confidence, Finding, Severity};
use crate::model::JobModel;
use crate::names::{datatype_name, redop_name};
use ncclshim_dump::CallId;
use std::collections::BTreeMap;

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
    let reduces = matches!(
        c,
        CallId::NcclAllReduce | CallId::NcclReduce | CallId::NcclReduceScatter
    );
    let rooted = matches!(
        c,
        CallId::NcclBroadcast
            | CallId::NcclBcast
            | CallId::NcclReduce
            | CallId::NcclGather
            | CallId::NcclScatter
    );
    Sig {
        op: c.name().to_owned(),
        count,
        datatype: datatype_name(dt),
        redop: reduces.then_some(op),
        root: rooted.then_some(root),
    }
}

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut out = Vec::new();
    for (&comm, view) in &job.comms {
        // seq → rank → signature, one table per source: the shim's and the profiler's sequence
        // numbers are counted by different code and are only compared with their own kind.
        let mut table: BTreeMap<u64, BTreeMap<u32, (Sig, usize)>> = BTreeMap::new();
        let mut prof_table: BTreeMap<u64, BTreeMap<u32, (Sig, usize)>> = BTreeMap::new();
        for (&rank, ps) in &view.members {
            for &p in ps {
                let pm = &job.processes[p];
                for o in pm.ops.iter().filter(|o| o.comm_hash == Some(comm)) {
                    if matches!(o.call, CallId::NcclSend | CallId::NcclRecv) {
                        continue;
                    }
                    table.entry(o.seq).or_default().insert(
                        rank,
                        (
                            shim_sig(o.call, o.count, o.datatype, o.op, o.root_or_peer),
                            p,
                        ),
                    );
                }
                for o in pm
                    .prof_ops
                    .iter()
                    .filter(|o| o.comm_hash == Some(comm) && !o.p2p)
                {
                    let Some(seq) = o.seq else { continue };
                    let sig = Sig {
                        op: crate::profnames::func_name(o.func),
                        count: o.count,
                        datatype: crate::profnames::datatype_name(o.datatype),
                        redop: None,
                        root: None,
                    };
                    prof_table.entry(seq).or_default().insert(rank, (sig, p));
                }
            }
        }
        for (source, (seq, ranks)) in table
            .iter()
            .map(|e| ("", e))
            .chain(prof_table.iter().map(|e| (" (profiler)", e)))
        {
            let mut groups: BTreeMap<&Sig, Vec<u32>> = BTreeMap::new();
            for (r, (sig, _)) in ranks {
                groups.entry(sig).or_default().push(*r);
            }
            if groups.len() < 2 {
                continue;
            }
            let mut f = Finding::new(
                "collective-desync",
                Some("C19"),
                format!("Ranks issued different collectives at sequence number {seq} on one communicator"),
                Severity::Primary,
                Confidence::High,
            )
            .remedy(
                "Make the sequence of collectives identical on every rank: no rank-dependent branches \
                 around collectives, identical metric keys, padded uneven batches. PyTorch: \
                 TORCH_DISTRIBUTED_DEBUG=DETAIL names the Python call sites.",
            );
            for (sig, rs) in &groups {
                let noun = if rs.len() == 1 { "rank" } else { "ranks" };
                f.evidence(format!(
                    "comm {comm:#x} seq {seq}{source}: {noun} {} issued {}",
                    rank_list(rs),
                    sig.text()
                ));
            }
            for (_, p) in ranks.values() {
                f.involve(job, *p);
            }
            out.push(f);
            break; // The first divergence explains the rest.
        }
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
        assert!(f
            .evidence
            .iter()
            .any(|e| e.contains("rank 1 issued ncclAllReduce count=51123456 float32 op=sum")));
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
}
