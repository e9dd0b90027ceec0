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

/// Checks the finding a scenario is about (its primary, or a healthy job's advisory) against
/// the expected ranks and facts.
fn check_subject(expect: &Expect, f: &Value, what: &str, misses: &mut Vec<String>) {
    if let Some(want) = &expect.ranks {
        let got: Vec<u64> = f["ranks"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        let want: Vec<u64> = want.iter().map(|&r| u64::from(r)).collect();
        if got != want {
            misses.push(format!(
                "{what} finding names ranks {got:?}, expected {want:?}"
            ));
        }
    }
    let text = f.to_string().to_lowercase();
    for fact in &expect.facts {
        // The finding's JSON escapes quotes; compare against the escaped form too.
        let fl = fact.to_lowercase();
        let escaped = serde_json::to_string(&fl).unwrap_or_default();
        let escaped = escaped.trim_matches('"');
        if !text.contains(&fl) && !text.contains(escaped) {
            misses.push(format!("{what} finding does not name {fact:?}"));
        }
    }
}

pub fn judge(expect: &Expect, report: &Value) -> Result<(), Vec<String>> {
    let mut misses = Vec::new();
    let findings = report["findings"].as_array().cloned().unwrap_or_default();
    if expect.primary == "none" {
        // A healthy job: nothing, or only the advisory the scenario expects (never primary).
        let is_advisory = |f: &Value| {
            expect
                .advisory
                .as_deref()
                .is_some_and(|a| f["id"] == a && f["severity"] == "advisory")
        };
        if findings.iter().any(|f| !is_advisory(f)) {
            misses.push(format!(
                "expected no findings{}, the report has: {}",
                match &expect.advisory {
                    Some(a) => format!(" but the advisory {a}"),
                    None => String::new(),
                },
                summary(report)
            ));
        }
        if let Some(a) = &expect.advisory {
            match findings.iter().find(|f| is_advisory(f)) {
                None => misses.push(format!(
                    "expected the advisory {a}, the report has: {}",
                    summary(report)
                )),
                Some(f) => check_subject(expect, f, "advisory", &mut misses),
            }
        }
    } else {
        // `any`: the case's expectation judges the primary (the first finding if none is).
        let any = expect.primary == "any";
        let subject = primary(report).or_else(|| any.then(|| findings.first()).flatten());
        match subject {
            None => misses.push(format!(
                "expected primary {}, the report has none ({})",
                expect.primary,
                summary(report)
            )),
            Some(p) => {
                if !any && p["id"] != expect.primary.as_str() {
                    misses.push(format!(
                        "expected primary {}, the report says {}",
                        expect.primary,
                        summary(report)
                    ));
                }
                check_subject(expect, p, "primary", &mut misses);
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
    // With `any`, the primary the report has stands for the expected one.
    let expected = if expect.primary == "any" {
        primary(report)
            .or_else(|| report["findings"].get(0))
            .and_then(|p| p["id"].as_str())
            .unwrap_or("any")
            .to_owned()
    } else {
        expect.primary.clone()
    };
    let other = if expected == "rank-ended-abruptly" {
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
        e.absent.push(expected.clone());
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
        if expect.advisory.is_some() {
            let mut e = expect.clone();
            e.facts.push("a fact no report names: zq-lab-9".into());
            out.push(("an unnamed fact".into(), e, report.clone()));
            let mut e = expect.clone();
            let mut r = expect.ranks.clone().unwrap_or_default();
            r.push(999);
            e.ranks = Some(r);
            out.push(("other ranks".into(), e, report.clone()));
            let mut e = expect.clone();
            e.advisory = Some("a-finding-no-rule-makes".into());
            out.push(("another advisory".into(), e, report.clone()));
        }
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
            case: None,
            ranks: Some(vec![0, 1]),
            facts: vec!["NCCL_NET=IB".into()],
            absent: vec!["unexplained-error".into()],
            also: vec!["nccl-env-differs".into()],
            advisory: None,
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
            case: None,
            ranks: None,
            facts: vec![],
            absent: vec![],
            also: vec![],
            advisory: None,
        };
        assert_eq!(judge(&e, &healthy), Ok(()));
        for (what, m, r) in mutations(&e, &healthy) {
            assert!(judge(&m, &r).is_err(), "judge accepted {what}");
        }
        // A healthy job with one advisory finding about a late rank.
        let advised = serde_json::json!({"findings": [
            {"id": "late-rank", "severity": "advisory", "ranks": [0, 1, 2],
             "title": "Rank 2 is late", "evidence": [], "remedy": ""}
        ]});
        let e = Expect {
            advisory: Some("late-rank".into()),
            ranks: Some(vec![0, 1, 2]),
            facts: vec!["rank 2 is late".into()],
            ..e
        };
        assert_eq!(judge(&e, &advised), Ok(()));
        assert!(judge(
            &Expect {
                advisory: None,
                ..e.clone()
            },
            &advised
        )
        .is_err());
        for (what, m, r) in mutations(&e, &advised) {
            assert!(judge(&m, &r).is_err(), "judge accepted {what}");
        }
    }

    #[test]
    fn any_primary_takes_the_reports_own() {
        let e = Expect {
            primary: "any".into(),
            case: Some("HO-05".into()),
            ranks: None,
            facts: vec![],
            absent: vec![],
            also: vec![],
            advisory: None,
        };
        assert_eq!(judge(&e, &report()), Ok(()));
        // No primary marked: the first finding stands for it; no finding at all is a miss.
        let unmarked = serde_json::json!({"findings": [
            {"id": "x", "severity": "contributing", "ranks": [0], "title": "t", "evidence": [], "remedy": ""}
        ]});
        assert_eq!(judge(&e, &unmarked), Ok(()));
        assert!(judge(&e, &serde_json::json!({"findings": []})).is_err());
        for (what, m, r) in mutations(&e, &report()) {
            assert!(judge(&m, &r).is_err(), "judge accepted {what}");
        }
    }
}
