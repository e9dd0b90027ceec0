//! A rank whose dump stops without a clean exit, with no error of its own and no fatal signal
//! recorded: it was killed (SIGKILL, OOM-killer, node failure) or crashed where the recorder
//! could not see it. When other ranks failed only after it stopped, it is the first failure.
//! Every such rank is one finding ("ranks 8-15 on node1"): a lost node or an OOM sweep kills
//! many ranks at once, and one finding per rank would repeat one cause.

use crate::finding::evidence::{name_refs, ProcessRef};
use crate::finding::registry;
use crate::finding::words::who;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use crate::story::{NodeKind, Story};

pub fn check(job: &JobModel, story: &Story) -> Vec<Finding> {
    let first = job.failures.first().map(|f| f.process);
    // Every process the story found vanished (its dump ends with no mark while it mattered).
    let mut dead: Vec<usize> = story
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Vanished)
        .map(|n| n.process)
        .collect();
    dead.sort_unstable();
    dead.dedup();
    if dead.is_empty() {
        return Vec::new();
    }
    let is_first = first.is_some_and(|p| dead.contains(&p));
    let refs: Vec<ProcessRef> = dead.iter().map(|&p| ProcessRef::of(job, p)).collect();
    let mut f = Finding::new(
        &registry::RANK_ENDED_ABRUPTLY,
        format!(
            "{} stopped without a clean exit and without an error of its own",
            name_refs(&refs)
        ),
        Confidence::Medium,
    )
    .remedy(
        "Check how this process ended: the launcher's exit status, dmesg / OOM-killer messages \
             (`dmesg -T | grep -i -e oom -e killed`), the node's health, its stderr.",
    );
    for &p in &dead {
        let pm = &job.processes[p];
        f.involve(job, p);
        f.fact(
            Evidence::new(
                EvidenceKind::Lifecycle,
                "the dump has no clean-exit mark and the process is gone",
            )
            .value("clean_exit", false)
            .value("alive", false)
            .of(job, p),
        );
        match pm.in_flight_calls().last() {
            Some((_, c)) => f.fact(
                Evidence::new(
                    EvidenceKind::Lifecycle,
                    format!("last record: {} still in flight", c.name),
                )
                .value("last_call", c.name.as_ref())
                .value("in_flight", true)
                .of(job, p),
            ),
            None => {
                if let Some(c) = pm.calls.last() {
                    f.fact(
                        Evidence::new(
                            EvidenceKind::Lifecycle,
                            format!("last call recorded: {} (returned)", c.name),
                        )
                        .value("last_call", c.name.as_ref())
                        .value("in_flight", false)
                        .of(job, p),
                    );
                }
            }
        }
    }
    if let (true, Some(p)) = (is_first, first) {
        if job.failures.len() > dead.len() {
            let whose = if dead.len() == 1 {
                "this rank's".to_owned()
            } else {
                format!("{}'s", who(job, p))
            };
            f.fact(Evidence::new(
                EvidenceKind::Inference,
                format!("every other rank's failure comes after {whose} last record"),
            ));
        }
    }
    vec![f]
}
