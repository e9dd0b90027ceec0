//! Golden reports from the lab: a scenario with `golden = true` keeps its `ncclshim report
//! --json` as a reviewed insta snapshot (`tests/lab/snapshots/`), so a change in wording,
//! evidence or remedy of a real capture's report shows up in review. These replace the goldens
//! the CLI once took from its synthetic writer for the same cases. What differs from run to
//! run (pids and thread ids, by the field they are in; times; the lab's paths; this tool's
//! version) is redacted first.

use serde_json::Value;
use std::path::Path;

/// The report with its volatile values replaced by placeholders.
pub fn redact(report: &Value, lab_dir: &Path) -> Value {
    let mut v = report.clone();
    walk(&mut v, &lab_dir.display().to_string());
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

/// Redacts by field, never by value: a number is a pid because of where it is (a `pid` field,
/// the text after `pid `, the pid part of a dump's file name), not because it equals one. A
/// boot id, a count or a port that happens to equal a pid of the run (pids are small numbers,
/// reused within a run on a busy machine) stays as it is.
fn walk(v: &mut Value, lab_dir: &str) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match k.as_str() {
                    "pid" if x.is_number() => *x = "[pid]".into(),
                    "most_on_thread" if x.is_number() => *x = "[tid]".into(),
                    "tool_version" => *x = "[version]".into(),
                    "t_unix_ns" | "after_first_ms" if !x.is_null() => *x = "[time]".into(),
                    // GPU time the scripted double measured with the clock (unless a scenario
                    // scripts each kernel's time), and the bandwidths derived from it.
                    "gpu_ns" | "busbw_gbps" if !x.is_null() => *x = "[measured]".into(),
                    _ => walk(x, lab_dir),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| walk(x, lab_dir)),
        Value::String(s) => *s = redact_text(s, lab_dir),
        _ => {}
    }
}

/// In a text: the number after `pid ` (`node-a pid 4242`, `from pid 77`) becomes `[pid]`, the
/// one after `thread ` (`most on thread 4243`) `[tid]`, the pid in a dump's file name
/// (`node-a.4242.9.shim.ncclshim`) `[pid]`, durations (`2483 ms`) `[n] ms`, the lab's
/// directory `[lab]`. Every other number stays.
fn redact_text(s: &str, lab_dir: &str) -> String {
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
        let whole = !out.ends_with(|c: char| c.is_alphanumeric());
        if out.ends_with("pid ") || (out.ends_with('.') && dump_name_after_pid(after)) {
            out.push_str("[pid]");
        } else if out.ends_with("thread ") {
            out.push_str("[tid]");
        } else if after.starts_with(" ms") && whole {
            out.push_str("[n]");
        } else {
            out.push_str(num);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Whether `after` is what follows the pid in a dump's file name
/// (`<host>.<pid>.<start>.<kind>.ncclshim`): `.<start>.<kind>.ncclshim`.
fn dump_name_after_pid(after: &str) -> bool {
    let Some(rest) = after.strip_prefix('.') else {
        return false;
    };
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let Some(rest) = rest[digits..].strip_prefix('.').filter(|_| digits > 0) else {
        return false;
    };
    let kind = rest.len()
        - rest
            .trim_start_matches(|c: char| c.is_ascii_lowercase())
            .len();
    kind > 0 && rest[kind..].starts_with(".ncclshim")
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
            "findings": [{"processes": [{"pid": 4242, "rank": 1}], "values": {"most_on_thread": 4243, "seq": 42},
                          "text": "rank 1 (node-a pid 4242) in /lab/x/dumps/node-a.4242.9.shim.ncclshim, seq 42, most on thread 4243 (lab_rank): 7, stopped by SIGTERM from pid 77 2483 ms after"}],
        });
        let v = redact(&r, Path::new("/lab/x"));
        assert_eq!(
            v,
            json!({
                "tool_version": "[version]",
                "first_failure": "[the earliest in failure_order]",
                "findings": [{"processes": [{"pid": "[pid]", "rank": 1}], "values": {"most_on_thread": "[tid]", "seq": 42},
                              "text": "rank 1 (node-a pid [pid]) in [lab]/dumps/node-a.[pid].9.shim.ncclshim, seq 42, most on thread [tid] (lab_rank): 7, stopped by SIGTERM from pid [pid] [n] ms after"}],
            })
        );
    }

    /// A number that equals a pid of the run is not a pid for that: a boot id holding `4000`
    /// while a rank had pid 4000 (c04-cumem-containers once), a count, a rank, a port.
    #[test]
    fn a_number_equal_to_a_pid_elsewhere_stays() {
        let r = json!({
            "processes": [{"pid": 4000, "rank": 0}, {"pid": 42, "rank": 1}],
            "values": {"boot_id": "c0400000-0000-4000-8000-000000000001", "seq": 4000, "port": 42},
            "text": "rank 0 (pod-a pid 4000): boot id c0400000-0000-4000-8000-000000000001, 4000 records, seq 42, file node-a.4000.x.ncclshim",
        });
        let v = redact(&r, Path::new("/lab/x"));
        assert_eq!(
            v,
            json!({
                "processes": [{"pid": "[pid]", "rank": 0}, {"pid": "[pid]", "rank": 1}],
                "values": {"boot_id": "c0400000-0000-4000-8000-000000000001", "seq": 4000, "port": 42},
                "text": "rank 0 (pod-a pid [pid]): boot id c0400000-0000-4000-8000-000000000001, 4000 records, seq 42, file node-a.4000.x.ncclshim",
            })
        );
    }
}
