//! The report contract, checked on every report the lab produces (the property tests of the
//! diagnosis: whatever the scenario, these hold):
//! - one finding per cause: no finding id appears twice;
//! - a primary finding explains a failure, unless nothing failed (a hang, a condition);
//! - every failure in `failure_order` is accounted for by some finding (none silently dropped);
//! - a finding states each distinct fact once (evidence texts are unique within a finding);
//! - a consequence never outranks its cause: the job's first failure is explained by a primary
//!   finding, or by a finding that says it is a consequence (a peer's error that reached the
//!   recorder before the cause did, across unsynchronised clocks); a consequence is never primary;
//! - a report that finds nothing says so only with complete evidence, else it lists the gaps
//!   (an empty `findings` with a damaged file must still name it under `problems` or gaps).

use serde_json::Value;
use std::collections::BTreeSet;

/// Pending scenarios whose report breaks the contract through an engine gap not fixed yet, with
/// the gap in words: the lab reports them as pending instead of failing (and says when the
/// contract holds again, so the entry can go). Only for a scenario marked `pending`.
pub const KNOWN_GAPS: &[(&str, &str)] = &[];

/// Every broken clause of the contract, in words; empty when the report keeps it.
pub fn violations(report: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let findings = report["findings"].as_array().cloned().unwrap_or_default();
    let failures = report["failure_order"].as_array().map_or(0, Vec::len);
    let mut ids = BTreeSet::new();
    for f in &findings {
        let id = f["id"].as_str().unwrap_or("?");
        if !ids.insert(id.to_owned()) {
            out.push(format!(
                "finding {id} appears twice (one finding per cause)"
            ));
        }
        let explains: Vec<u64> = f["explains_failures"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        if f["severity"] == "primary" && failures > 0 && explains.is_empty() {
            out.push(format!(
                "primary finding {id} explains none of the {failures} failure(s)"
            ));
        }
        let mut texts = BTreeSet::new();
        for e in f["evidence"].as_array().into_iter().flatten() {
            let t = e["text"].as_str().unwrap_or_default();
            if !texts.insert(t) {
                out.push(format!("finding {id} states one fact twice: {t}"));
            }
        }
    }
    // A failed job always has a primary: a cause, or what failed first and which fact would
    // decide its cause (issue: never a report of a failed job without a primary).
    if failures > 0 && !findings.iter().any(|f| f["severity"] == "primary") {
        out.push(format!(
            "{failures} failure(s) and no primary finding: the report names no cause"
        ));
    }
    for i in 0..failures as u64 {
        let covered = findings.iter().any(|f| {
            f["explains_failures"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x.as_u64() == Some(i)))
        });
        if !covered {
            out.push(format!(
                "failure {i} ({}) is explained by no finding",
                report["failure_order"][i as usize]["what"]
            ));
        }
    }
    let explains_first = |f: &&Value| {
        f["explains_failures"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x.as_u64() == Some(0)))
    };
    let any_primary_explains = findings.iter().any(|f| {
        f["severity"] == "primary"
            && f["explains_failures"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
    });
    if any_primary_explains
        && !findings
            .iter()
            .filter(explains_first)
            .any(|f| f["severity"] == "primary" || f["consequence"] == true)
    {
        out.push("no primary finding explains the job's first failure".to_owned());
    }
    for f in &findings {
        if f["severity"] == "primary" && f["consequence"] == true {
            out.push(format!("finding {} is a consequence but primary", f["id"]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn finding(id: &str, severity: &str, explains: &[u64], evidence: &[&str]) -> Value {
        json!({
            "id": id, "severity": severity, "explains_failures": explains, "consequence": false,
            "evidence": evidence.iter().map(|t| json!({"text": t})).collect::<Vec<_>>(),
        })
    }

    fn report(failures: usize, findings: Vec<Value>) -> Value {
        let order: Vec<Value> = (0..failures)
            .map(|i| json!({"what": format!("f{i}")}))
            .collect();
        json!({"failure_order": order, "findings": findings})
    }

    #[test]
    fn a_report_that_keeps_the_contract() {
        let r = report(
            2,
            vec![
                finding("a", "primary", &[0], &["x"]),
                finding("b", "contributing", &[1], &["y"]),
            ],
        );
        assert!(violations(&r).is_empty(), "{:?}", violations(&r));
        // A hang: nothing failed, a primary explains nothing.
        assert!(violations(&report(0, vec![finding("stuck", "primary", &[], &["z"])])).is_empty());
    }

    #[test]
    fn every_clause_can_fail() {
        let twice = report(
            1,
            vec![
                finding("a", "primary", &[0], &[]),
                finding("a", "contributing", &[0], &[]),
            ],
        );
        assert!(violations(&twice)[0].contains("appears twice"));
        let idle = report(
            1,
            vec![
                finding("a", "primary", &[0], &[]),
                finding("b", "primary", &[], &[]),
            ],
        );
        assert!(violations(&idle)
            .iter()
            .any(|v| v.contains("explains none")));
        let dropped = report(2, vec![finding("a", "primary", &[0], &[])]);
        assert!(violations(&dropped)
            .iter()
            .any(|v| v.contains("explained by no finding")));
        let repeated = report(1, vec![finding("a", "primary", &[0], &["x", "x"])]);
        assert!(violations(&repeated).iter().any(|v| v.contains("twice: x")));
        let late = report(
            2,
            vec![
                finding("a", "primary", &[1], &[]),
                finding("b", "contributing", &[0], &[]),
            ],
        );
        assert!(violations(&late)
            .iter()
            .any(|v| v.contains("first failure")));
    }
}
