//! The ranks that did not fail but waited: after a failure, the other ranks of a job block in
//! their next collective (or somewhere outside NCCL) until the launcher's timeout stops them.
//! They are not causes, and no hang finding should send the user to debug them; but a user
//! reading the report must see what each was doing and how it ended, so "which died how and
//! when, and which were alive and waiting until killed" is answered for every rank.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::{JobModel, ProcessModel};
use crate::names::signal_name;
use crate::story::ending::Ending;
use crate::story::Story;
use ncclshim_format::CallId;

/// What a waiting process was doing at its end.
fn waiting_in(pm: &ProcessModel) -> String {
    let inside = pm
        .in_flight_calls()
        .filter(|(_, c)| c.call != Some(CallId::NcclCommGetAsyncError))
        .last();
    match inside {
        Some((_, c)) => match c
            .arg("seq")
            .filter(|_| c.call.is_some_and(CallId::is_nccl_operation))
        {
            Some(s) => format!("blocked inside {} seq {s}", c.name),
            None => format!("blocked inside {}", c.name),
        },
        None => match pm.calls.iter().rev().find(|c| !c.nested) {
            Some(c) => format!("outside NCCL since {} returned", c.name),
            None => "outside NCCL".to_owned(),
        },
    }
}

/// How a waiting process ended, as the story tells it, timed from the first failure.
fn ended_by(end: Ending, first_t: u64) -> String {
    let after = |t: u64| t.saturating_sub(first_t) / 1_000_000;
    match end {
        Ending::Stopped { signo, t, sender } => {
            let by = sender.map(|pid| format!(" from pid {pid}")).unwrap_or_default();
            format!(
                "stopped by {}{by} {} ms after the first failure",
                signal_name(signo),
                after(t)
            )
        }
        Ending::Running => "still running when the dumps were read".to_owned(),
        Ending::Vanished { last_seen } => format!(
            "ended without a mark (SIGKILL?) after its last sign of life, {} ms after the first failure",
            after(last_seen)
        ),
        other => format!(
            "{} {} ms after the first failure",
            other.describe(),
            after(other.time().unwrap_or(first_t))
        ),
    }
}

/// The ranks the story gives no node of their own (no failure, not behind, not departed, not
/// stuck or mismatched): a rank the story located as the cause (a laggard, a rank that left) is
/// never listed here as one that only waited.
pub fn check(job: &JobModel, story: &Story) -> Vec<Finding> {
    let Some(first) = job.failures.first() else {
        return Vec::new();
    };
    let located: std::collections::HashSet<usize> = story
        .nodes
        .iter()
        .map(|n| n.process)
        .chain(job.failures.iter().map(|x| x.process))
        .collect();
    let mut f = Finding::new(
        &registry::RANKS_WAITING_WHEN_STOPPED,
        "Ranks without an error of their own waited until they were stopped",
        Confidence::High,
    )
    .remedy(
        "Nothing to fix on these ranks: they waited for the failure above (a collective cannot \
         complete without every rank). Debug the primary finding's rank.",
    );
    for (p, pm) in job.processes.iter().enumerate() {
        let failed = located.contains(&p);
        let seen = pm.last_t.max(pm.last_alive.unwrap_or(0));
        if failed
            || matches!(story.ends[p], Ending::Exited { .. })
            || seen < first.t
            || pm.calls.is_empty()
        {
            continue;
        }
        f.involve(job, p);
        let what = waiting_in(pm);
        let end = ended_by(story.ends[p], first.t);
        f.fact(
            Evidence::new(EvidenceKind::Lifecycle, format!("{what}; {end}"))
                .value("waiting_in", &what)
                .value("ended", &end)
                .of(job, p),
        );
    }
    if f.process_ids.is_empty() {
        return Vec::new();
    }
    vec![f]
}
