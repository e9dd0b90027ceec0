//! The judge: does `ncclshim report --json` reach the scenario's expected diagnosis? Returns
//! every miss in words, so a failing scenario says what the report said instead.

use crate::scenario::Expect;
use serde_json::Value;

/// The primary finding of a report (the first finding marked primary).
pub fn primary(report: &Value) -> Option<&Value> {
    report["findings"]
        .as_array()?
        .iter()
        .find(|f| f["severity"] == "primary")
}

/// What a report says, in one line (for tables and miss messages).
pub fn summary(report: &Value) -> String {
    let ids: Vec<String> = report["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| {
                    format!(
                        "{}{} ranks {}",
                        f["id"].as_str().unwrap_or("?"),
                        if f["severity"] == "primary" {
                            " (primary)"
                        } else {
                            ""
                        },
                        f["ranks"]
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if ids.is_empty() {
        "no findings".into()
    } else {
        ids.join("; ")
    }
}

pub fn judge(expect: &Expect, report: &Value) -> Result<(), Vec<String>> {
    let mut misses = Vec::new();
    let findings = report["findings"].as_array().cloned().unwrap_or_default();
    if expect.primary == "none" {
        if !findings.is_empty() {
            misses.push(format!(
                "expected no findings, the report has: {}",
                summary(report)
            ));
        }
    } else {
        match primary(report) {
            None => misses.push(format!(
                "expected primary {}, the report has none ({})",
                expect.primary,
                summary(report)
            )),
            Some(p) => {
                if p["id"] != expect.primary.as_str() {
                    misses.push(format!(
                        "expected primary {}, the report says {}",
                        expect.primary,
                        summary(report)
                    ));
                }
                if let Some(want) = &expect.ranks {
                    let got: Vec<u64> = p["ranks"]
                        .as_array()
                        .map(|a| a.iter().filter_map(Value::as_u64).collect())
                        .unwrap_or_default();
                    let want: Vec<u64> = want.iter().map(|&r| u64::from(r)).collect();
                    if got != want {
                        misses.push(format!(
                            "primary finding names ranks {got:?}, expected {want:?}"
                        ));
                    }
                }
                let text = p.to_string().to_lowercase();
                for fact in &expect.facts {
                    // The finding's JSON escapes quotes; compare against the escaped form too.
                    let f = fact.to_lowercase();
                    let escaped = serde_json::to_string(&f).unwrap_or_default();
                    let escaped = escaped.trim_matches('"');
                    if !text.contains(&f) && !text.contains(escaped) {
                        misses.push(format!("primary finding does not name {fact:?}"));
                    }
                }
            }
        }
    }
    for id in &expect.also {
        if !findings.iter().any(|f| f["id"] == id.as_str()) {
            misses.push(format!("finding {id} is missing ({})", summary(report)));
        }
    }
    for id in &expect.absent {
        if findings.iter().any(|f| f["id"] == id.as_str()) {
            misses.push(format!(
                "finding {id} must not appear ({})",
                summary(report)
            ));
        }
    }
    if misses.is_empty() {
        Ok(())
    } else {
        Err(misses)
    }
}

/// Wrong diagnoses the judge must reject for a scenario whose report it accepted: a different
/// primary, a fact the report never names, its own primary declared absent, other ranks, and
/// (for a healthy job) a finding injected into the report.
pub fn mutations(expect: &Expect, report: &Value) -> Vec<(String, Expect, Value)> {
    let mut out = Vec::new();
    let other = if expect.primary == "rank-ended-abruptly" {
        "fatal-signal"
    } else {
        "rank-ended-abruptly"
    };
    let mut e = expect.clone();
    e.primary = other.into();
    out.push((format!("primary {other}"), e, report.clone()));
    if expect.primary != "none" {
        let mut e = expect.clone();
        e.facts.push("a fact no report names: zq-lab-9".into());
        out.push(("an unnamed fact".into(), e, report.clone()));
        let mut e = expect.clone();
        e.absent.push(expect.primary.clone());
        out.push(("its primary declared absent".into(), e, report.clone()));
        let mut e = expect.clone();
        e.also.push("a-finding-no-rule-makes".into());
        out.push(("a missing finding".into(), e, report.clone()));
        let mut e = expect.clone();
        let mut r = expect.ranks.clone().unwrap_or_default();
        r.push(999);
        e.ranks = Some(r);
        out.push(("other ranks".into(), e, report.clone()));
    } else {
        let mut r = report.clone();
        r["findings"] = serde_json::json!([{
            "id": "rank-ended-abruptly", "severity": "primary", "ranks": [0],
            "title": "injected wrong diagnosis", "evidence": [], "remedy": ""
        }]);
        out.push(("an injected finding".into(), expect.clone(), r));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect(primary: &str) -> Expect {
        Expect {
            primary: primary.into(),
            ranks: Some(vec![0, 1]),
            facts: vec!["NCCL_NET=IB".into()],
            absent: vec!["unexplained-error".into()],
            also: vec!["nccl-env-differs".into()],
        }
    }

    fn report() -> Value {
        serde_json::json!({"findings": [
            {"id": "nccl-net-unavailable", "severity": "primary", "ranks": [0, 1],
             "title": "t", "evidence": ["rank 0: NCCL_NET=IB"], "remedy": "unset NCCL_NET"},
            {"id": "nccl-env-differs", "severity": "contributing", "ranks": [1],
             "title": "t", "evidence": [], "remedy": ""}
        ]})
    }

    #[test]
    fn accepts_the_right_diagnosis() {
        assert_eq!(judge(&expect("nccl-net-unavailable"), &report()), Ok(()));
    }

    #[test]
    fn rejects_every_mutation() {
        let e = expect("nccl-net-unavailable");
        for (what, m, r) in mutations(&e, &report()) {
            assert!(judge(&m, &r).is_err(), "judge accepted {what}");
        }
        let healthy = serde_json::json!({"findings": []});
        let e = Expect {
            primary: "none".into(),
            ranks: None,
            facts: vec![],
            absent: vec![],
            also: vec![],
        };
        assert_eq!(judge(&e, &healthy), Ok(()));
        for (what, m, r) in mutations(&e, &healthy) {
            assert!(judge(&m, &r).is_err(), "judge accepted {what}");
        }
    }
}
