//! One verdict: which findings are primary, which contributing, which advisory.
//!
//! Rules return candidates; this pass alone sets their severity, from the story's failure graph
//! and each finding's declared role ([`super::registry`]):
//! 1. a finding *covers* a node when it explains that call (`Finding::explain`) or a driver
//!    call NCCL made inside it, or, for a node
//!    that is no call (a signal, a vanished or departed rank, a laggard, a mismatch, a transport
//!    hang), when the node's process is one of its processes and its declaration covers that
//!    kind of node;
//! 2. the candidates for primary are the causes and conditions that cover a root of the story,
//!    ordered by precedence: a specific mechanism before a generic symptom, causes before
//!    conditions, higher confidence first, then the earliest root. Going down that list, a finding
//!    is primary when it covers a root no primary covers yet — so the mechanism absorbs its
//!    symptom, and identical simultaneous failures explained by one finding are one cause;
//! 3. a job without roots (nothing failed) can still have a standalone cause (a silent
//!    fallback, a hang with no error): those are primary;
//! 4. everything else is contributing (a consequence when it covers only explained nodes), and
//!    advisories stay advisory.

use crate::finding::registry;
use crate::finding::registry::Role;
use crate::finding::{Evidence, EvidenceKind, Finding, Severity};
use crate::model::JobModel;
use crate::story::{NodeKind, Story};
use std::collections::{BTreeSet, HashSet};

/// The nodes finding `f` covers, ascending: those it covers directly and those whose parts
/// (the driver calls NCCL made inside a call, `parts[i]`) it covers directly.
fn covered_nodes(story: &Story, parts: &[Vec<usize>], f: &Finding) -> Vec<usize> {
    // A set: a finding about every rank of a large job explains one call per rank.
    let explains: HashSet<(usize, usize)> = f.explains.iter().copied().collect();
    let direct = |i: usize| covers_directly(story, f, &explains, i);
    (0..story.nodes.len())
        .filter(|&i| direct(i) || parts[i].iter().any(|&j| direct(j)))
        .collect()
}

/// For each node, the nodes that are part of it (built once: a scan per finding and node made
/// the verdict quadratic in the story's size).
fn parts_index(story: &Story) -> Vec<Vec<usize>> {
    let mut parts = vec![Vec::new(); story.nodes.len()];
    for (j, n) in story.nodes.iter().enumerate() {
        if let Some(i) = n.part_of {
            parts[i].push(j);
        }
    }
    parts
}

/// Whether finding `f` covers node `i` directly (not through the driver calls it is made of).
fn covers_directly(
    story: &Story,
    f: &Finding,
    explains: &HashSet<(usize, usize)>,
    i: usize,
) -> bool {
    let n = &story.nodes[i];
    match n.kind {
        NodeKind::Error(c) | NodeKind::AsyncError(c) => explains.contains(&(n.process, c)),
        k => f.covers_node(k.class(), n.process, n.t),
    }
}

/// Sets every finding's severity and orders them: primary first.
pub fn decide(job: &JobModel, story: &Story, findings: &mut [Finding]) {
    let roots: BTreeSet<usize> = story.roots().into_iter().collect();
    let parts = parts_index(story);
    let covered: Vec<Vec<usize>> = findings
        .iter()
        .map(|f| covered_nodes(story, &parts, f))
        .collect();
    let mut order: Vec<usize> = (0..findings.len())
        .filter(|&i| matches!(findings[i].role(), Role::Cause | Role::Condition))
        .filter(|&i| covered[i].iter().any(|n| roots.contains(n)))
        .collect();
    let first_root_t = |i: usize| {
        covered[i]
            .iter()
            .filter(|n| roots.contains(n))
            .map(|&n| story.nodes[n].t)
            .min()
            .unwrap_or(u64::MAX)
    };
    order.sort_by_key(|&i| {
        let f = &findings[i];
        // A specific cause, then a specific condition (two libraries: the mechanism of a
        // failure a text only names), then the violated invariants (nearest scope first), then
        // generic causes and conditions.
        let tier = if f.specific() {
            0
        } else if f.invariant_scope.is_some() {
            1
        } else {
            2
        };
        (
            tier,
            f.role(),
            f.invariant_scope,
            f.confidence,
            first_root_t(i),
            i,
        )
    });
    let mut explained_roots: BTreeSet<usize> = BTreeSet::new();
    let mut primary = vec![false; findings.len()];
    for &i in &order {
        let new: Vec<usize> = covered[i]
            .iter()
            .copied()
            .filter(|n| roots.contains(n) && !explained_roots.contains(n))
            .collect();
        if !new.is_empty() {
            primary[i] = true;
            explained_roots.extend(new);
        }
    }
    if roots.is_empty() {
        for (i, f) in findings.iter().enumerate() {
            if f.role() == Role::Cause && f.standalone() {
                primary[i] = true;
            }
        }
    }
    // What each finding accounts for: the nodes it covers, and for a primary every node whose
    // root it covers (the consequences of its cause).
    let root_of: Vec<usize> = (0..story.nodes.len()).map(|n| story.root_of(n)).collect();
    for (i, f) in findings.iter_mut().enumerate() {
        // `covered[i]` is ascending (built by a filter over the node indices).
        let covers = |n: usize| covered[i].binary_search(&n).is_ok();
        f.account_all(story.nodes.iter().enumerate().filter_map(|(n, node)| {
            let mine = covers(n) || (primary[i] && covers(root_of[n]));
            mine.then(|| Some((node.process, failure_what(node.kind)?)))
                .flatten()
        }));
    }
    for (i, f) in findings.iter_mut().enumerate() {
        f.severity = if primary[i] {
            Severity::Primary
        } else if f.role() == Role::Advisory {
            Severity::Advisory
        } else {
            Severity::Contributing
        };
        let explains_only_consequences =
            !covered[i].is_empty() && covered[i].iter().all(|n| !roots.contains(n));
        f.consequence =
            !primary[i] && (f.role() == Role::Consequence || explains_only_consequences);
        if f.consequence && explains_only_consequences {
            // Say what it follows from: the root of its earliest node.
            let n = covered[i][0];
            let r = story.root_of(n);
            let (root, why) = (&story.nodes[r], story.nodes[n].cause.as_ref());
            if r != n {
                let line = format!(
                    "a consequence of {}: {}{}",
                    crate::finding::words::who(job, root.process),
                    story.describe_node(job, r),
                    why.map(|(_, w)| format!(" ({w})")).unwrap_or_default()
                );
                f.fact(Evidence::new(EvidenceKind::Inference, line));
            }
        }
    }
    findings.sort_by_key(|f| (f.severity, f.consequence, f.confidence));
}

/// The job failure a node stands for, when it is one (laggards and mismatches are causes the
/// story located, not recorded failures).
fn failure_what(k: NodeKind) -> Option<crate::model::FailureWhat> {
    use crate::model::FailureWhat;
    match k {
        NodeKind::Error(c) => Some(FailureWhat::Call(c)),
        NodeKind::AsyncError(c) => Some(FailureWhat::AsyncError(c)),
        NodeKind::Signal(s) => Some(FailureWhat::Signal(s)),
        NodeKind::Vanished => Some(FailureWhat::Died),
        _ => None,
    }
}

/// When nothing explains a root of the story (no finding is primary while something failed):
/// a finding that names the earliest root, says its cause was not recorded, and which fact would
/// decide it. None when the job has no root or already has a primary.
pub fn cause_not_recorded(job: &JobModel, story: &Story, findings: &[Finding]) -> Option<Finding> {
    let roots = story.roots();
    let &r = roots.first()?;
    if findings.iter().any(|f| f.severity == Severity::Primary) {
        return None;
    }
    let n = &story.nodes[r];
    let p = n.process;
    let who = crate::finding::words::who(job, p);
    let pm = &job.processes[p];
    let decide = match n.kind {
        NodeKind::Error(c) | NodeKind::AsyncError(c) => {
            let text = pm.calls[c].error_text.as_deref().unwrap_or("");
            let peers: Vec<String> = crate::model::endpoints::endpoints_in(text)
                .into_iter()
                .map(|e| {
                    let owners = crate::model::endpoints::owners(job, &e.addr);
                    match owners.first() {
                        Some(o) => format!(
                            "the dump and log of {} ({}), which owns {}: whether it failed or left before this",
                            o.host,
                            crate::finding::words::name_processes(job, &o.processes),
                            e.addr
                        ),
                        None => format!(
                            "what owns {}: no recorded host of this job has that address",
                            e.addr
                        ),
                    }
                })
                .collect();
            if peers.is_empty() {
                format!("NCCL's own log of {who} (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET: the WARN lines before the failure)")
            } else {
                peers.join("; ")
            }
        }
        NodeKind::Signal(s) => format!(
            "the stack where {} was raised in {who} (a core dump, PYTHONFAULTHANDLER=1, or gdb)",
            crate::names::signal_name(s)
        ),
        NodeKind::Vanished => format!(
            "the kernel log of {} at that time (dmesg: the OOM killer, a node loss) and the launcher's log: the dump ends without a mark",
            pm.host
        ),
        NodeKind::LeftEarly => {
            format!("the program's own log of {who}: why it exited while its peers waited")
        }
        NodeKind::Behind(_) => format!(
            "a stack of {who} while its peers waited (py-spy dump --pid {}): where it was instead of NCCL",
            pm.pid
        ),
        NodeKind::StuckInside(_) => "NCCL_DEBUG=INFO logs of the transport (NET/IB, P2P) and a GPU stack (cuda-gdb): a network stall or a device hang".to_owned(),
        NodeKind::Mismatch { .. } => {
            "the application's code path on the odd ranks (TORCH_DISTRIBUTED_DEBUG=DETAIL)".to_owned()
        }
    };
    let mut f = Finding::new(
        &registry::CAUSE_NOT_RECORDED,
        format!(
            "{who} failed first ({}); what caused it was not recorded",
            story.describe_node(job, r)
        ),
        crate::finding::Confidence::Low,
    )
    .remedy(&format!(
        "The dumps show where the job failed first but not why. What would decide it: {decide}."
    ));
    f.involve(job, p);
    if let NodeKind::Error(c) | NodeKind::AsyncError(c) = n.kind {
        f.explain(p, c);
        f.fact(Evidence::call(&pm.calls[c]).of(job, p));
    }
    f.fact(Evidence::new(
        EvidenceKind::Inference,
        format!("no rule and no invariant of NCCL's contract explains it; what would decide it: {decide}"),
    ));
    Some(f)
}
