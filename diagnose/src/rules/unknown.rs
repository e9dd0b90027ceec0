//! Failures no catalog rule explains still get a finding: the call, its return code and NCCL's
//! own text, laid out per rank. When the message knowledge (`knowledge/messages.toml`)
//! classifies the text, the finding says what it means, which subsystem printed it, and the
//! candidate causes ranked by the recorded facts that tell them apart (environment, host facts,
//! the errno or CUDA error in the text), so a failure never seen before still gets a meaning and
//! a remedy. A classified consequence (a peer closed the connection, teardown noise) is marked
//! as such, so it never outranks the failure that caused it. Identical failures on several
//! ranks are one finding.

use crate::finding::registry::{self, Role};
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::knowledge::messages::{self, Fit, Match};
use crate::message_facts::ProcessFacts;
use crate::model::{FailureWhat, JobModel};
use std::collections::{BTreeMap, HashMap, HashSet};

/// (call name, return code, error text): failures alike in all three are one finding.
type Key = (String, i32, String);

pub fn check(job: &JobModel, found: &[Finding]) -> Vec<Finding> {
    // A condition (a known change of the version, a library that differs) explaining a failure
    // does not say what the failure is: its text still gets read.
    // The processes with an explained failure (any covers the rest of their errors).
    let explained_processes: HashSet<usize> = found
        .iter()
        .filter(|f| f.role() != Role::Condition)
        .flat_map(|f| f.explains.iter().map(|&(p, _)| p))
        .collect();
    let signalled: HashSet<usize> = found
        .iter()
        .filter(|f| f.id() == registry::FATAL_SIGNAL.id())
        .flat_map(|f| f.process_ids.iter().copied())
        .collect();
    // (call, rc, text) → (process, call index, description), in order of first occurrence.
    let mut order: Vec<(String, i32, String)> = Vec::new();
    let mut groups: BTreeMap<Key, Vec<(usize, usize, String)>> = BTreeMap::new();
    // The first failure of each process, where a driver call NCCL made is read through the
    // NCCL failure it belongs to (the outer call and NCCL's text drive the diagnosis).
    // Per process, the latest time one of its NCCL calls failed: a nested driver failure at or
    // before it belongs to an NCCL failure (looked up, not searched: a 16k-rank job can have a
    // failure per rank).
    let mut latest_nccl_failure: HashMap<usize, u64> = HashMap::new();
    for g in &job.failures {
        if job.failure_call(g).is_some_and(|c| !c.is_cuda) {
            let t = latest_nccl_failure.entry(g.process).or_insert(g.t);
            *t = (*t).max(g.t);
        }
    }
    let part_of_nccl_failure = |fl: &crate::model::JobFailure| {
        job.failure_call(fl).is_some_and(|c| c.is_cuda && c.nested)
            && latest_nccl_failure
                .get(&fl.process)
                .is_some_and(|&t| t >= fl.t)
    };
    let mut seen = std::collections::BTreeSet::new();
    let firsts: Vec<crate::model::JobFailure> = job
        .failures
        .iter()
        .filter(|fl| !part_of_nccl_failure(fl))
        .filter(|fl| seen.insert(fl.process))
        .copied()
        .collect();
    for fl in firsts {
        let idx = match fl.what {
            FailureWhat::Call(i) | FailureWhat::AsyncError(i) => i,
            FailureWhat::Signal(_) | FailureWhat::Died => continue,
        };
        // Any explained failure of the same process covers the rest of its errors. A fatal
        // signal covers the process's errors only when it came first: an error recorded before
        // the crash (an async CUDA error, then the abort's SIGABRT) is the failure to explain.
        let signal_first = signalled.contains(&fl.process)
            && job.processes[fl.process]
                .signals
                .iter()
                .any(|&(_, t)| t <= fl.t);
        if signal_first || explained_processes.contains(&fl.process) {
            continue;
        }
        let c = &job.processes[fl.process].calls[idx];
        // An async error's result is what the poll reported, not the poll's own return code.
        let rc = match fl.what {
            FailureWhat::AsyncError(_) => c.args[0] as i32,
            _ => c.rc,
        };
        let key = (
            c.name.to_string(),
            rc,
            text_shape(c.error_text.as_deref().unwrap_or_default()),
        );
        if !groups.contains_key(&key) {
            order.push(key.clone());
        }
        groups
            .entry(key)
            .or_default()
            .push((fl.process, idx, job.describe(&fl)));
    }
    let mut out = Vec::new();
    for key in order {
        let members = &groups[&key];
        let (p0, i0, _) = members[0];
        let c = &job.processes[p0].calls[i0];
        let (rc, rc_name) = (key.1, crate::names::rc_name(key.1, c.is_cuda));
        let classified = c.error_text.as_deref().and_then(messages::classify);
        let mut f = match &classified {
            Some(m) => explained_by_knowledge(job, c.name.as_ref(), rc, &rc_name, m, p0),
            None => Finding::new(&registry::UNEXPLAINED_ERROR,
                format!("{} failed with {rc} {rc_name} (no known cause matches)", c.name),
                Confidence::Low,
            )
            .remedy(
                "No rule matches this evidence. Rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET on the \
                 failing rank and compare NCCL's WARN lines with the error text above.",
            ),
        };
        // Added as one batch each: the group can hold every rank of a large job.
        let mut facts = Vec::with_capacity(2 * members.len());
        for (p, i, _) in members {
            let pm = &job.processes[*p];
            f.involve(job, *p);
            facts.push(Evidence::call(&pm.calls[*i]).of(job, *p));
            if let Some(v) = pm.nccl_version_text() {
                facts.push(
                    Evidence::new(EvidenceKind::Library, format!("NCCL {v}"))
                        .value("nccl_version", &v)
                        .of(job, *p),
                );
            }
        }
        f.explain_all(members.iter().map(|&(p, i, _)| (p, i)));
        f.facts(facts);
        out.push(f);
    }
    out
}

/// An error text with every word that holds a digit (a rank, a segment name, an address, a
/// hash, a pid) replaced by `#`: ranks that failed alike print texts that differ only there
/// (`nccl-shm-recv-b7948f40-0-3-0` on rank 3), and they are one failure, not one per rank.
fn text_shape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.bytes().any(|b| b.is_ascii_digit()) {
            out.push('#');
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for ch in text.chars() {
        if ch.is_ascii_alphanumeric() {
            word.push(ch);
        } else {
            flush(&mut word, &mut out);
            out.push(ch);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// A finding for a failure whose text the message knowledge classifies: the meaning and
/// subsystem from the entry, the likeliest cause for the first member's facts as the remedy,
/// the other candidates and the facts that told them apart as evidence.
fn explained_by_knowledge(
    job: &JobModel,
    call: &str,
    rc: i32,
    rc_name: &str,
    m: &Match,
    p: usize,
) -> Finding {
    let e = m.entry;
    let facts = ProcessFacts(&job.processes[p]);
    let ranked = e.assess(m, &facts);
    let best = &ranked[0];
    let consequence = e.role.is_consequence();
    let headline = e
        .headline
        .as_deref()
        .map(|h| format!("{h}: "))
        .unwrap_or_default();
    let title = format!(
        "{headline}{call} failed with {rc} {rc_name}: {} ({}{})",
        m.message,
        e.subsystem,
        if consequence {
            ", a consequence of another failure"
        } else {
            ""
        }
    );
    let confidence = if best.fit == Fit::Supported {
        Confidence::Medium
    } else {
        Confidence::Low
    };
    let catalog = best
        .cause
        .catalog
        .first()
        .or(e.catalog.first())
        .and_then(|c| catalog_id(c));
    // What a text is, read from the message table: a generic reading (never `specific`),
    // which a rule that reasons over the recorded facts outranks; an echo of a failure
    // elsewhere is a consequence.
    let member = registry::NCCL_MESSAGE.member(&e.id).catalog(catalog);
    let member = if consequence {
        member.role(Role::Consequence)
    } else {
        member
    };
    let mut f = Finding::of_member(member, title, confidence).remedy(&best.cause.remedy);
    f.evidence(format!("meaning: {}", e.meaning));
    for c in &m.captures {
        f.evidence(format!("in the text: {} = {}", c.name, c.value));
    }
    for a in &ranked {
        let verdict = match a.fit {
            Fit::Supported => "likely",
            Fit::Possible => "possible",
            Fit::RuledOut => "ruled out",
        };
        let facts: Vec<String> = a
            .facts
            .iter()
            .map(|(fact, _)| fact.clone())
            .filter(|s| !s.is_empty())
            .collect();
        let facts = if facts.is_empty() {
            String::new()
        } else {
            format!(" ({})", facts.join(", "))
        };
        f.evidence(format!("cause {}: {verdict}{facts}", a.cause.id));
    }
    f
}

/// The catalog ids are `&'static str` in findings: map a knowledge id onto the static table.
fn catalog_id(id: &str) -> Option<&'static str> {
    const IDS: [&str; 35] = [
        "C01", "C02", "C03", "C04", "C05", "C06", "C07", "C08", "C09", "C10", "C11", "C12", "C13",
        "C14", "C15", "C16", "C17", "C18", "C19", "C20", "C21", "C22", "C23", "C24", "C25", "C26",
        "C27", "C28", "C29", "C30", "C31", "C32", "C33", "C34", "C35",
    ];
    IDS.into_iter().find(|c| *c == id)
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    /// Texts that differ only in numbers and identifiers are one failure; other words tell
    /// failures apart.
    #[test]
    fn texts_alike_but_for_identifiers_have_one_shape() {
        let shape = super::text_shape;
        assert_eq!(
            shape("Error while creating shared memory segment nccl-shm-recv-b7948f40-0-3-0 (size 4460544)"),
            shape("Error while creating shared memory segment nccl-shm-recv-c1148f41-0-1-0 (size 4460544)")
        );
        assert_eq!(shape("peer 10.0.0.2<45763>"), "peer #.#.#.#<#>");
        assert_ne!(shape("Connection refused"), shape("Connection reset"));
    }

    use crate::finding::Severity;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::WORLD_UID;

    #[test]
    fn unknown_error_is_laid_out_and_primary_when_first() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(22005);
            s.ranks[0].init_rank(
                1,
                0,
                WORLD_UID,
                0,
                3,
                Some("something nobody has seen before"),
                22005,
            );
            s.ranks[0].clean_exit();
        });
        let f = find(&fs, registry::UNEXPLAINED_ERROR.id()).expect("unknown");
        assert_eq!(f.severity, Severity::Primary);
        assert!(f.evidence[0].contains("something nobody has seen before"));
        assert!(f.title.contains("ncclInternalError"));
    }

    #[test]
    fn a_message_never_seen_by_a_rule_gets_meaning_and_ranked_causes() {
        // A RoCE queue-pair failure: no catalog rule covers it (C12), the knowledge does.
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(22703);
            s.ranks[0].init_rank(
                1,
                0,
                WORLD_UID,
                0,
                2,
                Some("Call to ibv_modify_qp failed with error Connection timed out"),
                22703,
            );
            s.ranks[0].clean_exit();
        });
        let f = find(&fs, "nccl-message-ib-verbs-call-failed").unwrap_or_else(|| panic!("{fs:#?}"));
        assert!(f.evidence.iter().any(|e| e.text.starts_with("meaning: ")));
        assert!(f
            .evidence
            .iter()
            .any(|e| e.contains("errno_text = Connection timed out")));
        // The call named in the text rules out the memlock cause and points at RoCE addressing.
        assert!(f
            .evidence
            .iter()
            .any(|e| e.text.starts_with("cause memlock-limit: ruled out")));
        assert!(f
            .evidence
            .iter()
            .any(|e| e.text.starts_with("cause roce-gid: likely")));
        assert_eq!(f.catalog(), Some("C12"));
        assert!(f.remedy.contains("NCCL_IB_GID_INDEX"));
        assert!(find(&fs, registry::UNEXPLAINED_ERROR.id()).is_none());
    }

    #[test]
    fn a_consequence_message_does_not_outrank_the_root_cause() {
        // Rank 1 reports its communicator already in error first; rank 0's CUDA error, the
        // root cause, is recorded later.
        let (_, fs) = analyze(&["n0", "n1"], |s| {
            s.snapshot_all(22703);
            s.ranks[1].init_rank(
                2,
                1,
                WORLD_UID,
                0,
                5,
                Some("Attempt to use communicator before the previous operation returned ncclSuccess"),
                22703,
            );
            s.ranks[0].init_rank(
                2,
                0,
                WORLD_UID,
                0,
                1,
                Some("Cuda failure 'unspecified launch failure'"),
                22703,
            );
            s.ranks[0].clean_exit();
            s.ranks[1].clean_exit();
        });
        let primary: Vec<_> = fs
            .iter()
            .filter(|f| f.severity == Severity::Primary)
            .collect();
        assert_eq!(primary.len(), 1, "{fs:#?}");
        assert_eq!(primary[0].id(), "nccl-message-cuda-error");
        let closed = fs
            .iter()
            .find(|f| f.id() == "nccl-message-socket-peer-closed");
        assert!(closed.is_none_or(|f| f.consequence && f.severity == Severity::Contributing));
    }
}
