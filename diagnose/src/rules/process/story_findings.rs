//! Findings read straight off the job's story: a rank that left the job (exited, any status)
//! while its peers still waited for it, and one operation issued with different arguments
//! (catalog C19: collective and point-to-point size mismatches).

use crate::finding::registry;
use crate::finding::words::rank_list;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use crate::story::{NodeKind, Story};

/// Ranks that exited while their peers waited in an operation they never issued.
pub fn left_early(job: &JobModel, story: &Story) -> Vec<Finding> {
    let left: Vec<usize> = story
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::LeftEarly)
        .map(|n| n.process)
        .collect();
    if left.is_empty() {
        return Vec::new();
    }
    let ranks: Vec<u32> = left
        .iter()
        .filter_map(|&p| job.processes[p].world_rank())
        .collect();
    let statuses: Vec<String> = left
        .iter()
        .map(|&p| story.ends[p].describe())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let noun = if left.len() == 1 { "rank" } else { "ranks" };
    let mut f = Finding::new(
        &registry::RANK_LEFT_EARLY,
        format!(
            "{noun} {} left the job ({}) while the other ranks still waited for {}",
            rank_list(&ranks),
            statuses.join(", "),
            if left.len() == 1 { "it" } else { "them" }
        ),
        Confidence::High,
    )
    .remedy(
        "A rank must stay in the job until every rank is done with the communicators it belongs \
         to: find why it returned early (an exception caught and turned into an exit, a data \
         loader that ran out of batches first, a condition true on one rank only); call \
         destroy_process_group() / ncclCommDestroy on every rank at the same point.",
    );
    for &p in &left {
        f.involve(job, p);
        f.fact(
            Evidence::new(EvidenceKind::Lifecycle, story.ends[p].describe())
                .value("ending", story.ends[p].describe())
                .of(job, p),
        );
        for c in &story.comms {
            let Some(s) = &c.stall else { continue };
            if !s.behind.iter().any(|b| b.1 == p) {
                continue;
            }
            let waiting: Vec<u32> = s.waiting.iter().map(|w| w.0).collect();
            f.fact(
                Evidence::new(
                    EvidenceKind::Progress,
                    format!(
                        "comm {:#x}: it never issued {} #{}, which rank(s) {} issued and waited in",
                        c.comm,
                        s.function.name(),
                        s.op_seq,
                        rank_list(&waiting)
                    ),
                )
                .value("comm", format!("{:#x}", c.comm))
                .value("op", s.function.name())
                .value("op_seq", s.op_seq)
                .of(job, p),
            );
        }
    }
    vec![f]
}

/// One operation issued with different arguments (a collective's count, datatype, reduction or
/// root; a send and its receive of different sizes): the odd ranks are the subject, the other
/// side is in the evidence.
pub fn size_mismatch(job: &JobModel, story: &Story) -> Vec<Finding> {
    let mut out = Vec::new();
    for c in &story.comms {
        for m in c.mismatches.iter().filter(|m| m.field != "collective") {
            let p2p = m.field == "size";
            let (id, title) = if p2p {
                (
                    &registry::P2P_SIZE_MISMATCH,
                    format!(
                        "A send and its receive differ in count on communicator {:#x}: {}",
                        c.comm, m.text
                    ),
                )
            } else {
                (
                    &registry::COLLECTIVE_SIZE_MISMATCH,
                    format!(
                        "{} issued a collective with a different {} than the other ranks on communicator {:#x}",
                        if m.odd.len() == 1 { "A rank" } else { "Ranks" },
                        m.field,
                        c.comm
                    ),
                )
            };
            let mut f = Finding::new(id, title, Confidence::High).remedy(
                "Make every rank issue the operation with the same count, datatype, reduction \
                 and root, and every receive match its send (buffer sizes computed from a shape \
                 one rank changed, uneven last batches, rank-dependent padding); NCCL reports the \
                 resulting truncation on a peer, or hangs.",
            );
            for &(r, p, call) in &m.sides {
                if m.odd.contains(&r) {
                    f.involve(job, p);
                }
                f.fact(Evidence::call(&job.processes[p].calls[call]).of(job, p));
            }
            f.fact(
                Evidence::new(
                    EvidenceKind::Inference,
                    format!("{} differs: {}", m.field, m.text),
                )
                .value("field", m.field)
                .value("odd_ranks", rank_list(&m.odd)),
            );
            out.push(f);
        }
    }
    out
}
