//! Golden reports from the lab: a scenario with `golden = true` keeps its `ncclshim report
//! --json` as a reviewed insta snapshot (`tests/lab/snapshots/`), so a change in wording,
//! evidence or remedy of a real capture's report shows up in review. These replace the goldens
//! the CLI once took from its synthetic writer for the same cases. What differs from run to
//! run (pids, times, the lab's paths, this tool's version) is redacted first.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

/// The report with its volatile values replaced by placeholders.
pub fn redact(report: &Value, lab_dir: &Path) -> Value {
    let mut pids = BTreeSet::new();
    collect_pids(report, &mut pids);
    let mut v = report.clone();
    walk(&mut v, &pids, &lab_dir.display().to_string());
    // Which of several ranks failing at once came first is a race between processes: the
    // order is kept by rank, and the first failure only as "one of them" (the judge checks
    // the diagnosis itself).
    if let Some(order) = v.get_mut("failure_order").and_then(Value::as_array_mut) {
        order.sort_by_key(|f| (f["rank"].as_u64(), f["what"].as_str().map(str::to_owned)));
    }
    if v.get("first_failure").is_some_and(|f| !f.is_null()) {
        v["first_failure"] = "[the earliest in failure_order]".into();
    }
    v
}

fn collect_pids(v: &Value, pids: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("pid", Value::Number(n)) => {
                        pids.insert(n.to_string());
                    }
                    _ => collect_pids(x, pids),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_pids(x, pids)),
        _ => {}
    }
}

fn walk(v: &mut Value, pids: &BTreeSet<String>, lab_dir: &str) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match k.as_str() {
                    "pid" if x.is_number() => *x = "[pid]".into(),
                    // A thread id (`most_on_thread`): a process's main thread has its pid.
                    _ if x.as_u64().is_some_and(|n| pids.contains(&n.to_string())) => {
                        *x = "[pid]".into()
                    }
                    "tool_version" => *x = "[version]".into(),
                    "t_unix_ns" | "after_first_ms" if !x.is_null() => *x = "[time]".into(),
                    // GPU time the scripted double measured with the clock (unless a scenario
                    // scripts each kernel's time), and the bandwidths derived from it.
                    "gpu_ns" | "busbw_gbps" if !x.is_null() => *x = "[measured]".into(),
                    _ => walk(x, pids, lab_dir),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| walk(x, pids, lab_dir)),
        Value::String(s) => *s = redact_text(s, pids, lab_dir),
        _ => {}
    }
}

/// Whole numbers that are pids (a rank's, or any after `pid `, e.g. the launcher that sent a
/// signal) become `[pid]`, durations (`2483 ms`) `[n] ms`, the lab's directory `[lab]`.
fn redact_text(s: &str, pids: &BTreeSet<String>, lab_dir: &str) -> String {
    let s = s.replace(lab_dir, "[lab]");
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (num, after) = rest.split_at(len);
        if pids.contains(num) || out.ends_with("pid ") {
            out.push_str("[pid]");
        } else if after.starts_with(" ms") && !out.ends_with(|c: char| c.is_alphanumeric()) {
            out.push_str("[n]");
        } else {
            out.push_str(num);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pids_times_and_paths_are_redacted_and_nothing_else() {
        let r = json!({
            "tool_version": "0.1.0",
            "first_failure": {"t_unix_ns": 17, "after_first_ms": 3, "rank": 1},
            "findings": [{"processes": [{"pid": 4242, "rank": 1}], "values": {"most_on_thread": 4242, "seq": 42},
                          "text": "rank 1 (pid 4242) in /lab/x/dumps/node-a.4242.9.shim.ncclshim, seq 42, stopped by SIGTERM from pid 77 2483 ms after"}],
        });
        let v = redact(&r, Path::new("/lab/x"));
        assert_eq!(
            v,
            json!({
                "tool_version": "[version]",
                "first_failure": "[the earliest in failure_order]",
                "findings": [{"processes": [{"pid": "[pid]", "rank": 1}], "values": {"most_on_thread": "[pid]", "seq": 42},
                              "text": "rank 1 (pid [pid]) in [lab]/dumps/node-a.[pid].9.shim.ncclshim, seq 42, stopped by SIGTERM from pid [pid] [n] ms after"}],
            })
        );
    }
}
