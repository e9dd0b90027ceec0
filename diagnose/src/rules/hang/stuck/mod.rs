//! Hang analysis per communicator, from the shim's calls and the profiler's events together:
//! a rank is stuck INSIDE NCCL when a call on the communicator never returned or a collective's
//! profiler record never stopped (or its kernel never ended); it is stuck OUTSIDE NCCL when its
//! last call returned and it issued fewer collectives than the others — the rank everybody waits
//! for, usually the one to debug. The profiler's running aggregates (operations started and
//! completed per rank, never lost to wrap) are a third source of progress, and each hang
//! finding states every rank's counts, so the rank with fewer operations than its peers is
//! named by a number that covers the whole job.
//!
//! The profiler's events are read as NCCL emits them (`knowledge/profiler.toml`): Coll events
//! are numbered per function, so a rank's progress is the count of its numbered collectives, not
//! the highest number; P2p events carry no number; a send/recv to the rank itself never reports
//! a GPU end, so its missing end is no hang; and a collective whose kernel ended on a peer did
//! not hang on this rank either (the peer could not have finished it alone).

mod findings;
mod own_hang;
mod ranks;

use crate::finding::Finding;
use crate::model::JobModel;
use crate::story::Story;

/// How long live ranks must have recorded nothing before an unfinished operation is a hang,
/// unless the user chose otherwise (`ncclshim report --stall-after`): long enough that a slow
/// step (a big all-reduce, a data-loader pause) of a job read while it runs is not called hung.
pub const DEFAULT_STALL_NS: u64 = 10_000_000_000;

/// The hang findings at the instant `now_ns`; `stall_ns`: how long live ranks must have been
/// quiet (see [`DEFAULT_STALL_NS`]).
pub fn check(job: &JobModel, story: &Story, now_ns: u64, stall_ns: u64) -> Vec<Finding> {
    job.comms
        .keys()
        .filter_map(|&comm| comm_hang(job, story, comm, now_ns, stall_ns))
        .collect()
}

/// The hang finding of communicator `comm`, when it is stalled and the hang is its own.
fn comm_hang(
    job: &JobModel,
    story: &Story,
    comm: u64,
    now_ns: u64,
    stall_ns: u64,
) -> Option<Finding> {
    let told = story.comm(comm)?;
    // Ranks that never arrived explain why the others wait (`missing_ranks`).
    if told.members.len() < 2 || !job.comms[&comm].missing().is_empty() {
        return None;
    }
    // Read while the job runs: an operation in progress is not a hang until the
    // communicator's ranks have recorded nothing for a while.
    // Hang analysis runs whatever else failed: the verdict decides whether the hang is the
    // cause (a laggard the others' aborts follow from) or a consequence (ranks blocked
    // after a peer crashed).
    if !story.stalled_at(job, comm, now_ns, stall_ns) {
        return None;
    }
    let states = ranks::states(job, told);
    let max = ranks::highest_issued(&states);
    let laggards = ranks::laggards(story, comm, told.stall.as_ref(), &states, max);
    if !own_hang::is_own_hang(story, comm, told, &states, &laggards) {
        return None;
    }
    Some(findings::hang(job, comm, &states, &laggards, max))
}

#[cfg(test)]
mod tests;
