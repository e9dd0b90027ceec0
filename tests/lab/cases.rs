//! Case collections judged by their own notion of a right diagnosis: a scenario's
//! `[expect] case = "HO-05"` makes the lab also apply that case's entry of a
//! `tests/scenarios/*expectations.json` file (`ho-expectations.json`: the multi-host cases,
//! copied from the case collection `multi-host-2026-11`, whose README defines "right"):
//!
//! - `ncclshim report` exits 1;
//! - its primary finding (the first finding if none is primary), in its **own words** — every
//!   field of the finding but `evidence` (title, remedy, id, confidence, processes, ...), with
//!   NCCL's error texts of the case removed (every `error` the scenario's scripts play, also
//!   where a finding quotes one cut short or sentence by sentence: echoing NCCL is not a
//!   diagnosis) — matches every `cause` regex and the `remedy` regex, case-insensitive;
//! - `keep`: a regex the primary must also match, but where NCCL's text may supply it (the
//!   finding without its evidence, NCCL's texts left in): HO-06's "No such device" is a fact
//!   the diagnosis should keep, not a cause it must find words of its own for;
//! - `ranks`: one of them is among the primary's `ranks`, or `ranks_text` (a host name such as
//!   `node3`) is named anywhere in the primary (evidence included);
//! - `also`: matches anywhere in the primary, evidence included;
//! - `reject`: neither the primary nor a finding listed before it has a title that matches it
//!   but not every `cause` (a distractor named as the cause, or ahead of the right one).
//!
//! The own words include the processes' host names: a scenario's hosts get neutral names
//! (`node-a`, not `a100-mig`), so no cause is found in a name the scenario chose.

use regex::{Regex, RegexBuilder};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// One case's expectation, as the collection's `expectations.json` writes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseExpect {
    pub id: String,
    #[serde(default)]
    pub cause: Vec<String>,
    pub remedy: Option<String>,
    pub reject: Option<String>,
    pub ranks: Option<Vec<u64>>,
    pub ranks_text: Option<String>,
    pub also: Option<String>,
    pub keep: Option<String>,
}

/// A case's expectation with the NCCL texts its scenario plays (removed from the own words).
#[derive(Debug, Clone)]
pub struct CaseCheck {
    pub expect: CaseExpect,
    pub nccl_texts: Vec<String>,
}

/// Every case of every `*expectations.json` in `dir`, by id.
pub fn load_all(dir: &Path) -> Result<BTreeMap<String, CaseExpect>, String> {
    let mut out = BTreeMap::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with("expectations.json"))
        })
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        let cases: BTreeMap<String, CaseExpect> =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", f.display()))?;
        for (id, c) in cases {
            for r in c.regexes() {
                re(r).map_err(|e| format!("{}: {id}: {e}", f.display()))?;
            }
            if out.insert(id.clone(), c).is_some() {
                return Err(format!("{}: case {id} is defined twice", f.display()));
            }
        }
    }
    Ok(out)
}

impl CaseExpect {
    fn regexes(&self) -> impl Iterator<Item = &String> {
        self.cause
            .iter()
            .chain(&self.remedy)
            .chain(&self.reject)
            .chain(&self.ranks_text)
            .chain(&self.also)
            .chain(&self.keep)
    }
}

fn re(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(pattern)
        .case_insensitive(true)
        .build()
        .map_err(|e| format!("regex /{pattern}/: {e}"))
}

fn matches(pattern: &str, text: &str) -> bool {
    re(pattern).is_ok_and(|r| r.is_match(text))
}

/// Every string and number in `v`, one per line.
fn leaves(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Number(n) => {
            out.push_str(&n.to_string());
            out.push('\n');
        }
        Value::Array(a) => a.iter().for_each(|x| leaves(x, out)),
        Value::Object(o) => o.values().for_each(|x| leaves(x, out)),
        _ => {}
    }
}

/// The whole finding as text, evidence included.
fn full_text(f: &Value) -> String {
    let mut s = String::new();
    leaves(f, &mut s);
    s
}

/// The finding without its evidence, as text, NCCL's texts left in.
fn without_evidence(f: &Value) -> String {
    let mut g = f.clone();
    if let Some(o) = g.as_object_mut() {
        o.remove("evidence");
    }
    full_text(&g)
}

/// Pieces of an NCCL text a finding may quote: the whole text, its sentences and lines of 20
/// characters or more, longest first.
fn quotable(text: &str) -> Vec<String> {
    let mut out = vec![text.trim().to_owned()];
    for piece in text.split(['.', ';', '\n']) {
        let p = piece.trim();
        if p.chars().count() >= 20 && !out.iter().any(|o| o == p) {
            out.push(p.to_owned());
        }
    }
    out.sort_by_key(|p| std::cmp::Reverse(p.len()));
    out
}

/// Removes `text` from `s` (case-insensitive), and a quote of it cut short: the longest prefix
/// of 20 characters or more that `s` holds (a title ending in "…").
fn remove_text(s: &str, text: &str) -> String {
    let mut s = s.to_owned();
    for piece in quotable(text) {
        if piece.is_empty() {
            continue;
        }
        let r = re(&regex::escape(&piece)).expect("escaped");
        s = r.replace_all(&s, " ").into_owned();
    }
    let chars: Vec<(usize, char)> = text.trim().char_indices().collect();
    let t = text.trim();
    for n in (20..chars.len()).rev() {
        let prefix = &t[..chars[n].0];
        let r = re(&regex::escape(prefix)).expect("escaped");
        if r.is_match(&s) {
            s = r.replace_all(&s, " ").into_owned();
            break;
        }
    }
    s
}

/// A finding in its own words: without its evidence, NCCL's texts of the case removed.
pub fn own_words(f: &Value, nccl_texts: &[String]) -> String {
    let mut s = without_evidence(f);
    for t in nccl_texts {
        s = remove_text(&s, t);
    }
    s
}

fn describe(f: &Value) -> String {
    format!(
        "{} ({:?})",
        f["id"].as_str().unwrap_or("?"),
        f["title"].as_str().unwrap_or("")
    )
}

/// Every way the report misses the case (empty: it is right).
pub fn check(c: &CaseCheck, report: &Value, exit: Option<i32>) -> Vec<String> {
    let e = &c.expect;
    let mut misses = Vec::new();
    if exit != Some(1) {
        misses.push(format!(
            "{}: `ncclshim report` exits {}, a found failure exits 1",
            e.id,
            exit.map_or("by a signal".into(), |x| x.to_string())
        ));
    }
    let findings = report["findings"].as_array().cloned().unwrap_or_default();
    let Some(idx) = findings
        .iter()
        .position(|f| f["severity"] == "primary")
        .or_else(|| (!findings.is_empty()).then_some(0))
    else {
        misses.push(format!("{}: the report has no finding", e.id));
        return misses;
    };
    let p = &findings[idx];
    let words = own_words(p, &c.nccl_texts);
    for cause in &e.cause {
        if !matches(cause, &words) {
            misses.push(format!(
                "{}: primary {} does not say /{cause}/ in its own words",
                e.id,
                describe(p)
            ));
        }
    }
    if let Some(r) = &e.remedy {
        if !matches(r, &words) {
            misses.push(format!(
                "{}: primary {}'s own words give no remedy /{r}/",
                e.id,
                describe(p)
            ));
        }
    }
    if let Some(k) = &e.keep {
        if !matches(k, &without_evidence(p)) {
            misses.push(format!(
                "{}: primary {} does not keep /{k}/",
                e.id,
                describe(p)
            ));
        }
    }
    let full = full_text(p);
    if let Some(want) = &e.ranks {
        let named = p["ranks"].as_array().is_some_and(|a| {
            a.iter()
                .filter_map(Value::as_u64)
                .any(|r| want.contains(&r))
        });
        let by_text = e.ranks_text.as_deref().is_some_and(|t| matches(t, &full));
        if !named && !by_text {
            misses.push(format!(
                "{}: primary {} names ranks {}, none of {want:?}{}",
                e.id,
                describe(p),
                p["ranks"],
                e.ranks_text
                    .as_deref()
                    .map(|t| format!(" (nor /{t}/)"))
                    .unwrap_or_default()
            ));
        }
    }
    if let Some(a) = &e.also {
        if !matches(a, &full) {
            misses.push(format!(
                "{}: primary {} does not mention /{a}/ anywhere",
                e.id,
                describe(p)
            ));
        }
    }
    if let Some(rej) = &e.reject {
        for f in &findings[..=idx] {
            let title = f["title"].as_str().unwrap_or("");
            if matches(rej, title) && !e.cause.iter().all(|c| matches(c, title)) {
                misses.push(format!(
                    "{}: {} {} and its title is the distractor /{rej}/",
                    e.id,
                    describe(f),
                    if std::ptr::eq(f, p) {
                        "is the primary"
                    } else {
                        "comes before the primary"
                    }
                ));
            }
        }
    }
    misses
}

/// Wrong reports and wrong expectations the case judge must reject once it accepted a report:
/// (what, check, report, exit).
pub fn mutations(c: &CaseCheck, report: &Value) -> Vec<(String, CaseCheck, Value, Option<i32>)> {
    let mut out = vec![(
        "an exit status of 0".to_string(),
        c.clone(),
        report.clone(),
        Some(0),
    )];
    let mut e = c.clone();
    e.expect.cause.push("zq-lab-9".into());
    out.push(("a cause no report names".into(), e, report.clone(), Some(1)));
    let idx = report["findings"]
        .as_array()
        .and_then(|a| a.iter().position(|f| f["severity"] == "primary"))
        .unwrap_or(0);
    let mut r = report.clone();
    let ranks = r["findings"][idx]["ranks"].clone();
    r["findings"][idx] = serde_json::json!({
        "id": "rank-ended-abruptly", "severity": "primary", "ranks": ranks,
        "title": "injected wrong diagnosis", "evidence": [], "remedy": ""
    });
    out.push((
        "an injected wrong primary".into(),
        c.clone(),
        r.clone(),
        Some(1),
    ));
    if !c.nccl_texts.is_empty() {
        // A primary that only echoes NCCL.
        let echo = c.nccl_texts.join(". ");
        r["findings"][idx]["title"] = Value::String(echo.clone());
        r["findings"][idx]["remedy"] = Value::String(echo);
        out.push((
            "a primary echoing NCCL's texts".into(),
            c.clone(),
            r,
            Some(1),
        ));
    }
    if c.expect.ranks.is_some() {
        let mut e = c.clone();
        e.expect.ranks = Some(vec![999]);
        e.expect.ranks_text = None;
        out.push(("other ranks".into(), e, report.clone(), Some(1)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn case() -> CaseCheck {
        CaseCheck {
            expect: CaseExpect {
                id: "HO-05".into(),
                cause: vec!["unique\\s*-?id|uniqueid".into(), "reus|same|twice".into()],
                remedy: Some(
                    "(new|fresh)[^.]{0,60}(unique\\s*-?id|uniqueid)|ncclGetUniqueId".into(),
                ),
                reject: Some("firewall|connection refused".into()),
                ranks: Some(vec![0, 1]),
                ranks_text: None,
                also: Some("10\\.0\\.0\\.1".into()),
                keep: None,
            },
            nccl_texts: vec!["socketStartConnect: exceeded retries (20000)".into()],
        }
    }

    fn finding(id: &str, sev: &str, title: &str, remedy: &str) -> Value {
        json!({"id": id, "severity": sev, "ranks": [0, 1], "title": title, "remedy": remedy,
               "confidence": "high",
               "evidence": [{"kind": "communicator", "text": "root 10.0.0.1:50421"}]})
    }

    #[test]
    fn accepts_the_right_diagnosis() {
        let r = json!({"findings": [
            finding("uid-reused", "primary", "The same uniqueId was used twice",
                    "Generate a fresh uniqueId for every communicator (ncclGetUniqueId)"),
            finding("connection-blocked-between-hosts", "contributing", "A firewall blocks the port", ""),
        ]});
        assert_eq!(check(&case(), &r, Some(1)), Vec::<String>::new());
        for (what, c, r, exit) in mutations(&case(), &r) {
            assert!(!check(&c, &r, exit).is_empty(), "accepted {what}");
        }
    }

    #[test]
    fn rejects_wrong_or_echoing_diagnoses() {
        // The cause only in NCCL's words (the title quotes NCCL, cut short), not its own.
        let echo = json!({"findings": [finding("unexplained-error", "primary",
            "ncclCommInitRank failed: socketStartConnect: exceeded retries (2…",
            "Generate a fresh uniqueId for every communicator")]});
        let c = CaseCheck {
            expect: CaseExpect {
                cause: vec!["exceeded retries".into()],
                ..case().expect
            },
            ..case()
        };
        let m = check(&c, &echo, Some(1));
        assert!(m.iter().any(|m| m.contains("exceeded retries")), "{m:?}");
        // A distractor before the primary; the wrong exit status; ranks not named.
        let r = json!({"findings": [
            finding("connection-blocked-between-hosts", "advisory", "A firewall blocks the port", ""),
            {"id": "uid-reused", "severity": "primary", "ranks": [5],
             "title": "The same uniqueId was used twice", "evidence": [],
             "remedy": "call ncclGetUniqueId for each communicator"},
        ]});
        let m = check(&case(), &r, Some(0));
        assert!(m.iter().any(|m| m.contains("exits 0")), "{m:?}");
        assert!(m.iter().any(|m| m.contains("distractor")), "{m:?}");
        assert!(m.iter().any(|m| m.contains("names ranks")), "{m:?}");
        assert!(m.iter().any(|m| m.contains("10\\.0\\.0\\.1")), "{m:?}");
        // The distractor as the primary, even with the cause's words elsewhere in it.
        let r = json!({"findings": [finding("blocked", "primary",
            "A firewall blocks the uniqueId's port",
            "the same uniqueId was reused: make a fresh uniqueId per communicator")]});
        let m = check(&case(), &r, Some(1));
        assert!(m.iter().any(|m| m.contains("is the primary")), "{m:?}");
        // No finding is primary: the first one is judged.
        let r = json!({"findings": [finding("uid-reused", "contributing",
            "The same uniqueId was used twice", "a fresh uniqueId per communicator")]});
        assert_eq!(check(&case(), &r, Some(1)), Vec::<String>::new());
        assert!(!check(&case(), &json!({"findings": []}), Some(1)).is_empty());
    }

    #[test]
    fn keep_and_ranks_text_may_come_from_elsewhere() {
        let c = CaseCheck {
            expect: CaseExpect {
                id: "HO-06".into(),
                cause: vec!["\\bhca\\b".into()],
                remedy: Some("NCCL_IB_HCA".into()),
                reject: None,
                ranks: Some(vec![12]),
                ranks_text: Some("node3".into()),
                also: None,
                keep: Some("no such device".into()),
            },
            nccl_texts: vec!["Call to ibv_modify_qp failed with error No such device".into()],
        };
        let r = json!({"findings": [{"id": "ib-device-unusable", "severity": "primary",
            "ranks": [0], "title": "The HCA mlx5_3 is unusable: Call to ibv_modify_qp failed with error No such device",
            "remedy": "Exclude it with NCCL_IB_HCA=^mlx5_3",
            "evidence": [{"text": "ranks 0-3 on node3"}]}]});
        assert_eq!(check(&c, &r, Some(1)), Vec::<String>::new());
        let mut r2 = r.clone();
        r2["findings"][0]["title"] = json!("The HCA mlx5_3 is unusable");
        assert!(check(&c, &r2, Some(1)).iter().any(|m| m.contains("keep")));
        let mut r3 = r.clone();
        r3["findings"][0]["evidence"] = json!([]);
        assert!(check(&c, &r3, Some(1))
            .iter()
            .any(|m| m.contains("names ranks")));
    }

    #[test]
    fn the_repository_expectations_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let all = load_all(&dir).unwrap();
        assert!(
            all.contains_key("HO-01") && all.contains_key("HO-18"),
            "{:?}",
            all.keys()
        );
        assert!(all.iter().all(|(k, v)| *k == v.id));
    }
}
