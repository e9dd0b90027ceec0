//! Each rank of a stalled communicator as the hang analysis compares it ([`RankState`]): its
//! progress in the one numbering every rank has, and which ranks are behind the others (the
//! laggards, stuck outside NCCL).

use crate::model::JobModel;
use crate::story::ending::Ending;
use crate::story::position::Inside;
use crate::story::progress::{CommStory, Stall};
use crate::story::{NodeKind, Story};

/// One rank as the hang analysis compares it: the story's position of it, with `issued` the
/// position in the one numbering every rank of the communicator has (see [`in_one_numbering`]).
#[derive(Debug)]
pub(super) struct RankState<'s> {
    pub(super) rank: u32,
    pub(super) process: usize,
    pub(super) issued: Option<u64>,
    pub(super) shim_seq: Option<u64>,
    pub(super) prof_seq: Option<u64>,
    pub(super) agg: Option<(u64, u64)>,
    pub(super) inside: Option<&'s Inside>,
    pub(super) last_call: Option<&'s str>,
}

/// Every member of the communicator `told`, with `issued` in one numbering.
pub(super) fn states<'s>(job: &JobModel, told: &'s CommStory) -> Vec<RankState<'s>> {
    let mut states: Vec<RankState> = told
        .members
        .iter()
        .map(|m| {
            let at = &m.position;
            RankState {
                // Titles name ranks as the rest of the report does, by their place in
                // the job; a subgroup's own numbering would name another process.
                rank: job.processes[m.process].world_rank().unwrap_or(m.rank),
                process: m.process,
                issued: at.shim.max(at.profiler),
                shim_seq: at.shim,
                prof_seq: at.profiler,
                agg: at.aggregates,
                inside: at.inside.as_ref(),
                last_call: at.last_call.as_deref(),
            }
        })
        .collect();
    in_one_numbering(&mut states);
    states
}

/// The shim's and the profiler's sequence numbers are counted separately: compare ranks on
/// one source when every rank has it.
fn in_one_numbering(states: &mut [RankState]) {
    if states.iter().all(|s| s.shim_seq.is_some()) {
        states.iter_mut().for_each(|s| s.issued = s.shim_seq);
    } else if states.iter().all(|s| s.prof_seq.is_some()) {
        states.iter_mut().for_each(|s| s.issued = s.prof_seq);
    } else if states.iter().all(|s| s.agg.is_some_and(|a| a.0 > 0)) {
        // Only the aggregates cover every rank (records lost to wrap, v1-v3 plugins).
        states
            .iter_mut()
            .for_each(|s| s.issued = s.agg.map(|a| a.0 - 1));
    }
}

/// The highest position any rank reached in the one numbering.
pub(super) fn highest_issued(states: &[RankState]) -> Option<u64> {
    states.iter().filter_map(|s| s.issued).max()
}

/// The ranks behind the others on `comm`, stuck outside NCCL; `max`: [`highest_issued`].
///
/// The story's stall (collectives compared per function, as NCCL numbers them) names the
/// ranks behind, and only those still in the job (a rank that left or crashed is its own
/// finding); without one, the sequence numbers of the one source all ranks have.
pub(super) fn laggards<'a, 's>(
    story: &Story,
    comm: u64,
    stall: Option<&Stall>,
    states: &'a [RankState<'s>],
    max: Option<u64>,
) -> Vec<&'a RankState<'s>> {
    let blocked = &story.blocked_on;
    match stall {
        Some(st) => states
            .iter()
            // A rank inside another operation that never completed is stuck inside NCCL
            // (a desync: each side waits in its own collective), not outside it.
            .filter(|s| {
                s.inside.is_none()
                    && !blocked.contains_key(&s.process)
                    && st.behind.iter().any(|b| b.1 == s.process)
                    && story
                        .nodes
                        .iter()
                        .any(|n| n.process == s.process && n.kind == NodeKind::Behind(comm))
            })
            .collect(),
        None => states
            .iter()
            .filter(|s| s.inside.is_none() && !blocked.contains_key(&s.process) && s.issued < max)
            .filter(|s| !matches!(story.ends[s.process], Ending::Exited { .. }))
            .collect(),
    }
}
