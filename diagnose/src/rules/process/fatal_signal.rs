//! A fatal signal reached a rank: it crashed, and everything the other ranks report afterwards
//! is a consequence. A request to stop (SIGTERM, SIGINT, SIGHUP) is a failure only when the job
//! went on without the rank (the model decides, as for a rank that vanished); the launcher's
//! timeout stopping ranks that waited is not one.

use crate::finding::evidence::{name_refs, ProcessRef};
use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use crate::names::signal_name;
use crate::story::ending::Ending;
use crate::story::{NodeKind, Story};
use std::collections::{BTreeMap, HashSet};

pub fn check(job: &JobModel, story: &Story) -> Vec<Finding> {
    // signal → the processes it reached, in process order: one finding for the job, its title
    // naming each signal with the ranks it reached ("ranks 3-5 on node2 received SIGSEGV"), since
    // one crash sweeping several ranks is one cause, not one finding per rank.
    let mut by_signal: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    // The story's signal nodes: every fault signal, and a request to stop only where the job
    // went on without the process (the model decides, as for a rank that vanished). Its first
    // per process: the one that ended it.
    let mut seen: HashSet<usize> = HashSet::new();
    for n in &story.nodes {
        let NodeKind::Signal(signo) = n.kind else {
            continue;
        };
        // A framework that gave up (aborted its communicator, then SIGABRT) did not crash:
        // its end follows from what it gave up on.
        if matches!(story.ends[n.process], Ending::Aborted { .. }) || !seen.insert(n.process) {
            continue;
        }
        by_signal.entry(signo).or_default().push(n.process);
    }
    // In process order within each signal, as the title lists them.
    by_signal.values_mut().for_each(|ps| ps.sort_unstable());
    if by_signal.is_empty() {
        return Vec::new();
    }
    let title = by_signal
        .iter()
        .map(|(&signo, ps)| {
            let refs: Vec<ProcessRef> = ps.iter().map(|&p| ProcessRef::of(job, p)).collect();
            format!("{} received {}", name_refs(&refs), signal_name(signo))
        })
        .collect::<Vec<_>>()
        .join("; ");
    let mut f = Finding::new(&registry::FATAL_SIGNAL,
        title,
        Confidence::High,
    )
    .remedy("Read the stderr and core dump / dmesg of the crashed ranks for the crashing frame; the errors of other ranks follow from it.");
    for (&signo, ps) in &by_signal {
        for &p in ps {
            f.involve(job, p);
            f.fact(
                Evidence::new(
                    EvidenceKind::Lifecycle,
                    format!("fatal signal {signo} ({})", signal_name(signo)),
                )
                .value("signal", signo)
                .value("signal_name", signal_name(signo))
                .of(job, p),
            );
            if let Some((_, c)) = job.processes[p].in_flight_calls().last() {
                f.fact(
                    Evidence::new(
                        EvidenceKind::Lifecycle,
                        format!("inside {} when it happened", c.name),
                    )
                    .value("call", c.name.as_ref())
                    .of(job, p),
                );
            }
        }
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    use crate::rules::testutil::{analyze, find};

    #[test]
    fn segfault_is_primary() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(22005);
            s.init_world(22005);
            s.ranks[0].fatal_signal(11);
        });
        let f = find(&fs, registry::FATAL_SIGNAL.id()).expect("signal");
        assert!(f.title.contains("SIGSEGV"));
    }

    #[test]
    fn one_finding_for_ranks_crashed_alike() {
        let (_, fs) = analyze(&["n0", "n1", "n1", "n1"], |s| {
            s.snapshot_all(22005);
            s.init_world(22005);
            for r in &s.ranks[1..] {
                r.fatal_signal(11);
            }
        });
        let crashes: Vec<_> = fs
            .iter()
            .filter(|f| f.id() == registry::FATAL_SIGNAL.id())
            .collect();
        assert_eq!(crashes.len(), 1, "{crashes:?}");
        assert_eq!(crashes[0].ranks, vec![1, 2, 3]);
        assert!(
            crashes[0].title.contains("ranks 1-3"),
            "{}",
            crashes[0].title
        );
    }
}
