//! The hang finding of a stalled communicator: the ranks behind, stuck outside NCCL (the ranks
//! everybody waits for), or with none behind the ranks stuck inside it; and the facts every
//! hang finding states (where each rank inside NCCL is stuck, every rank's operation counts).

use super::ranks::RankState;
use crate::finding::registry;
use crate::finding::words::rank_list;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;

/// The hang finding of `comm`: stuck outside NCCL when there are `laggards`, inside it
/// otherwise; `max`: the highest position any rank reached (see [`super::ranks`]).
pub(super) fn hang(
    job: &JobModel,
    comm: u64,
    states: &[RankState],
    laggards: &[&RankState],
    max: Option<u64>,
) -> Finding {
    let inside: Vec<&RankState> = states.iter().filter(|s| s.inside.is_some()).collect();
    let mut f = if !laggards.is_empty() {
        stuck_outside(job, comm, laggards, max)
    } else {
        stuck_inside(job, comm, &inside, states.len(), max)
    };
    where_inside_facts(job, comm, &inside, &mut f);
    aggregate_facts(job, comm, states, &mut f);
    f
}

/// The laggards stopped issuing collectives: each one's last call is a fact.
fn stuck_outside(job: &JobModel, comm: u64, laggards: &[&RankState], max: Option<u64>) -> Finding {
    let rs: Vec<u32> = laggards.iter().map(|s| s.rank).collect();
    let (noun, them) = if rs.len() == 1 {
        ("rank", "it")
    } else {
        ("ranks", "them")
    };
    let mut f = Finding::new(&registry::STUCK_OUTSIDE_NCCL,
        format!(
            "Hang: {noun} {} stopped issuing collectives (stuck outside NCCL); the others wait for {them}",
            rank_list(&rs)
        ),
        Confidence::High,
    )
    .remedy(
        "Look at what the lagging rank(s) do instead of the next collective: a py-spy/gdb stack \
         of that process, a data-dependent branch or an exception swallowed on that rank, \
         uneven data so it ran out of batches, or a slow step (I/O, checkpoint).",
    );
    for s in laggards {
        f.involve(job, s.process);
        let last = s
            .last_call
            .map(str::to_owned)
            .unwrap_or_else(|| match s.issued {
                Some(q) => format!("seq {q}"),
                None => "no collective at all".into(),
            });
        f.fact(
            Evidence::new(
                EvidenceKind::Progress,
                format!(
                    "comm {comm:#x}: last issued {last}, which completed; the others reached seq {}",
                    max.map(|m| m.to_string()).unwrap_or("?".into())
                ),
            )
            .value("comm", format!("{comm:#x}"))
            .value("last_issued_seq", s.issued)
            .value("last_call", s.last_call)
            .value("others_reached_seq", max)
            .of(job, s.process),
        );
    }
    f
}

/// No rank is behind: the ranks `inside` (of `members` in all) are stuck inside NCCL, in one
/// operation (suspect the transport) or in different ones (a desync).
fn stuck_inside(
    job: &JobModel,
    comm: u64,
    inside: &[&RankState],
    members: usize,
    max: Option<u64>,
) -> Finding {
    let same_seq = inside.iter().all(|s| s.issued == max);
    // One operation: every rank inside the same function (a desync puts ranks in
    // different ones even where the shim's per-communicator numbers agree).
    let one_operation = inside
        .windows(2)
        .all(|w| w[0].inside.as_ref().map(|i| &i.op) == w[1].inside.as_ref().map(|i| &i.op));
    let all = inside.len() == members;
    let mut f = Finding::new(&registry::STUCK_INSIDE_NCCL,
        if all {
            format!("Hang: every rank of communicator {comm:#x} is stuck inside NCCL")
        } else {
            let rs: Vec<u32> = inside.iter().map(|s| s.rank).collect();
            let (noun, verb) = if rs.len() == 1 { ("rank", "is") } else { ("ranks", "are") };
            format!("Hang: {noun} {} {verb} stuck inside NCCL", rank_list(&rs))
        },
        if all && same_seq { Confidence::Medium } else { Confidence::Low },
    )
    .remedy(if one_operation {
        "All ranks entered the same operation and it never completed: suspect the transport. \
         Bisect with NCCL_P2P_DISABLE=1 (PCIe ACS/IOMMU, consumer-GPU P2P), NCCL_SHM_DISABLE=1, \
         NCCL_NET=Socket / NCCL_IB_DISABLE=1 (RoCE GID, link errors, firewall), and read NCCL_DEBUG=INFO \
         of the first run that hangs."
    } else {
        "The ranks wait inside different operations: each waits for peers that issued \
         something else. Make the sequence of collectives identical on every rank (a \
         rank-dependent branch around a collective); TORCH_DISTRIBUTED_DEBUG=DETAIL names \
         the Python call sites."
    });
    for s in inside {
        f.involve(job, s.process);
    }
    f
}

/// Where each rank `inside` NCCL is stuck. Ranks stuck in the same place are one item
/// (`Finding::fact` joins equal facts).
fn where_inside_facts(job: &JobModel, comm: u64, inside: &[&RankState], f: &mut Finding) {
    for s in inside {
        f.process_ids.insert(s.process);
        let Some(i) = s.inside else { continue };
        f.fact(
            Evidence::new(
                EvidenceKind::Progress,
                format!("comm {comm:#x}: {}", i.text),
            )
            .value("comm", format!("{comm:#x}"))
            .value("op", &i.op)
            .value("seq", i.seq)
            .value("state", i.state)
            .of(job, s.process),
        );
    }
}

/// Every rank's operation counts from the profiler's aggregates, one fact per distinct count
/// (ranks with equal counts share it), when every rank has them and they differ or a rank is
/// stuck: the rank that started fewer operations than the others is the one they wait for.
fn aggregate_facts(job: &JobModel, comm: u64, states: &[RankState], f: &mut Finding) {
    if states.is_empty() || states.iter().any(|s| s.agg.is_none()) {
        return;
    }
    let most = states
        .iter()
        .filter_map(|s| s.agg)
        .map(|a| a.0)
        .max()
        .unwrap_or(0);
    for s in states {
        let Some((started, ended)) = s.agg else {
            continue;
        };
        let behind = most - started;
        let text = if behind > 0 {
            format!(
                "comm {comm:#x}: the profiler counted {started} operations started ({ended} ended on the GPU), {behind} fewer than the others"
            )
        } else {
            format!(
                "comm {comm:#x}: the profiler counted {started} operations started ({ended} ended on the GPU)"
            )
        };
        f.fact(
            Evidence::new(EvidenceKind::Progress, text)
                .value("comm", format!("{comm:#x}"))
                .value("source", "profiler_aggregates")
                .value("ops_started", started)
                .value("ops_ended", ended)
                .value("ops_behind", behind)
                .of(job, s.process),
        );
    }
}
