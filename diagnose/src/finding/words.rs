//! How findings, evidence and the report name processes, ranks and amounts: one wording
//! everywhere (`rank 3 (host pid 12)`, `ranks 0-3,5`, `12.0 MiB`).

use crate::model::JobModel;

/// `rank 3 (host pid 12)` for evidence lines.
pub fn who(job: &JobModel, p: usize) -> String {
    job.processes[p].label()
}

/// Compact rank list: `0-3,5`.
pub fn rank_list(ranks: &[u32]) -> String {
    let mut v = ranks.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let start = v[i];
        let mut end = start;
        while i + 1 < v.len() && v[i + 1] == end + 1 {
            i += 1;
            end = v[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

/// `rank 2`, `ranks 0-1`, `ranks 0,3,5`, `ranks 0-31,33-63`: the noun by the number given, the
/// list in runs (a group of every rank of a large job is one line).
pub fn ranks_named(ranks: &[u32]) -> String {
    match ranks {
        [r] => format!("rank {r}"),
        _ => format!("ranks {}", rank_list(ranks)),
    }
}

/// Names processes by world rank where known, else by host/pid.
pub fn name_processes(job: &JobModel, ps: &[usize]) -> String {
    let ranks: Vec<u32> = ps
        .iter()
        .filter_map(|&p| job.processes[p].world_rank())
        .collect();
    let unranked: Vec<String> = ps
        .iter()
        .filter(|&&p| job.processes[p].world_rank().is_none())
        .map(|&p| format!("{} pid {}", job.processes[p].host, job.processes[p].pid))
        .collect();
    let mut parts = Vec::new();
    if !ranks.is_empty() {
        parts.push(ranks_named(&ranks));
    }
    parts.extend(unranked);
    parts.join(", ")
}

/// `1 rank`, `3 ranks`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `12.0 MiB`, `512 B`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
