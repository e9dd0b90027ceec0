//! Catalog C19: collective desync. Ranks of one communicator issued different collectives at the
//! same point (op, count, datatype, reduction, root), or in a different order; NCCL cannot tell
//! and hangs. The story finds the point (`story::sequence`: the first divergence in the shim's
//! numbering, else in the profiler's per-function numbering; else, where records were lost, the
//! stalled collective its behind ranks answered with another): this rule says it, one finding
//! per communicator naming the ranks that deviate, every side in the evidence.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use crate::story::sequence::{Divergence, Numbering};
use crate::story::Story;

fn finding(title: String) -> Finding {
    Finding::new(&registry::COLLECTIVE_DESYNC, title, Confidence::High).remedy(
        "Make the sequence of collectives identical on every rank: no rank-dependent branches \
         around collectives, identical metric keys, padded uneven batches. PyTorch: \
         TORCH_DISTRIBUTED_DEBUG=DETAIL names the Python call sites.",
    )
}

/// The finding of one communicator's divergence.
fn divergence_finding(job: &JobModel, comm: u64, d: &Divergence) -> Finding {
    let seq = d.seq;
    let (function, source) = match d.numbering {
        Numbering::Shim => (None, ""),
        Numbering::Profiler { function } => (function, " (profiler)"),
    };
    // Where the profiler numbers per function, "number 5" is the function's own count.
    let numbered = match function {
        Some(func) => format!(
            "{} number {seq} (the profiler numbers each function separately)",
            crate::profnames::func_name(func)
        ),
        None => format!("sequence number {seq}"),
    };
    let mut f = finding(format!(
        "Ranks issued different collectives at {numbered} on one communicator"
    ));
    for g in &d.groups {
        let sig = &g.sig;
        f.fact(
            Evidence::new(
                EvidenceKind::Progress,
                match function {
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
                match d.numbering {
                    Numbering::Shim => "shim",
                    Numbering::Profiler { .. } => "profiler",
                },
            )
            .value("op", &sig.op)
            .value("count", sig.count)
            .value("datatype", &sig.datatype)
            .value("redop", sig.redop)
            .value("root", sig.root)
            .of_all(job, &g.processes),
        );
    }
    // The finding names the ranks that deviate; the evidence shows every side.
    for g in &d.groups {
        for (&rank, &p) in g.ranks.iter().zip(&g.processes) {
            if d.odd.is_empty() || d.odd.contains(&rank) {
                f.involve(job, p);
            }
        }
    }
    f
}

pub fn check(job: &JobModel, story: &Story) -> Vec<Finding> {
    let mut out = Vec::new();
    for c in &story.comms {
        if let Some(d) = &c.divergence {
            out.push(divergence_finding(job, c.comm, d));
            continue;
        }
        // No divergence in any numbering the records still hold (a ring wrapped over them),
        // yet the stalled collective's behind ranks issued another one: the story's mismatch.
        let Some(m) = c.mismatches.iter().find(|m| m.field == "collective") else {
            continue;
        };
        let mut f = finding(format!(
            "Ranks issued different collectives at the same point on communicator {:#x}",
            c.comm
        ));
        for &(r, p, call) in &m.sides {
            if m.odd.contains(&r) {
                f.involve(job, p);
            }
            f.fact(Evidence::call(&job.processes[p].calls[call]).of(job, p));
        }
        f.fact(
            Evidence::new(EvidenceKind::Progress, m.text.clone())
                .value("comm", format!("{:#x}", c.comm))
                .value("source", "communicator_table"),
        );
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_format::CallId;

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
        let f = find(&fs, registry::COLLECTIVE_DESYNC.id()).expect("C19");
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
        let f = find(&fs, registry::COLLECTIVE_DESYNC.id()).expect("C19");
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
        let f = find(&fs, registry::COLLECTIVE_DESYNC.id()).expect("C19");
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
        assert!(find(&fs, registry::COLLECTIVE_DESYNC.id()).is_none());
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
        assert!(
            find(&fs, registry::COLLECTIVE_DESYNC.id()).is_none(),
            "{fs:#?}"
        );
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
        let f = find(&fs, registry::COLLECTIVE_DESYNC.id()).expect("C19");
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
