//! Whether a stalled communicator is a hang of its own: not when its ranks wait for a member
//! whose own finding tells why (an init that failed, a rank blocked on another communicator,
//! ranks that left the job), nor when no rank is stuck at all.

use super::ranks::RankState;
use crate::story::ending::Ending;
use crate::story::progress::{Behind, CommStory, Place, Stall};
use crate::story::Story;

/// Whether the stall of `comm` (`told`) is a hang to report on it, given its ranks `states`
/// and the `laggards` among them.
pub(super) fn is_own_hang(
    story: &Story,
    comm: u64,
    told: &CommStory,
    states: &[RankState],
    laggards: &[&RankState],
) -> bool {
    let stall = told.stall.as_ref();
    if waiting_in_init(story, told) {
        return false;
    }
    if behind_blocked_elsewhere(story, comm, stall, states) && laggards.is_empty() {
        return false;
    }
    // The ranks behind the stall left the job, crashed or vanished: their own findings
    // tell it, and the waiters are no transport hang. (Ranks inside a different operation
    // keep the finding: where each is stuck is the desync's evidence.)
    if stall.is_some_and(|st| st.behind.iter().all(|b| b.2 == Behind::NeverIssued))
        && laggards.is_empty()
        && !behind_inside(stall, states)
    {
        return false;
    }
    let any_inside = states.iter().any(|s| s.inside.is_some());
    let not_finished = told
        .members
        .iter()
        .any(|m| !matches!(story.ends[m.process], Ending::Exited { .. }));
    any_inside || (!laggards.is_empty() && not_finished)
}

/// Ranks waiting in communicator init while a member failed (its init returned an error) wait
/// for that member: its own finding tells why; this is no transport hang.
fn waiting_in_init(story: &Story, told: &CommStory) -> bool {
    told.members
        .iter()
        .any(|m| matches!(m.place, Place::InInit { .. }))
        && told
            .members
            .iter()
            .all(|m| matches!(m.place, Place::InInit { .. }) || story.has_node(m.process))
        && told.members.iter().any(|m| story.has_node(m.process))
}

/// A rank behind here because it is blocked inside NCCL on another communicator (a receive
/// whose send never matched, a collective of a subgroup) is not outside NCCL: that
/// communicator's findings say why it is blocked, and the ranks waiting for it here are
/// neither a transport hang nor a desync of this communicator.
fn behind_blocked_elsewhere(
    story: &Story,
    comm: u64,
    stall: Option<&Stall>,
    states: &[RankState],
) -> bool {
    stall.is_some_and(|st| {
        !st.behind.is_empty()
            && st.behind.iter().all(|b| {
                story
                    .blocked_on
                    .get(&b.1)
                    .is_some_and(|cs| cs.iter().any(|&c| c != comm))
                    && states
                        .iter()
                        .any(|s| s.process == b.1 && s.inside.is_none())
            })
    })
}

/// Whether a rank behind the stall is stuck inside NCCL (in another operation).
fn behind_inside(stall: Option<&Stall>, states: &[RankState]) -> bool {
    stall.is_some_and(|st| {
        states
            .iter()
            .any(|s| s.inside.is_some() && st.behind.iter().any(|b| b.1 == s.process))
    })
}
