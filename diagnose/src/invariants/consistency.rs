//! Consistency across the ranks of one communicator: the paths NCCL's init takes through the
//! driver must be the same on every rank, since the ranks exchange descriptors of the buffers
//! they made and each reads its peers' as its own kind (`knowledge/driver-paths.toml`). The
//! NCCL version, the settings that must agree and the call sequences are judged by the rules
//! that compare them (C03, C26, the story's mismatches).

use super::contract::{Family, Invariant, Scope, Violation};
use crate::finding::words::name_processes;
use crate::finding::{Evidence, EvidenceKind};
use crate::knowledge::driver_paths;
use crate::model::JobModel;
use crate::story::{comms_of, Story};
use std::collections::{BTreeMap, BTreeSet};

pub static DRIVER_PATHS_AGREE: Invariant = Invariant {
    id: "driver-paths-agree",
    family: Family::Consistency,
    statement: "the driver calls NCCL makes while building a communicator succeed or fail alike on every rank (all ranks take one path)",
    reads: &["driver calls NCCL made inside each rank's init, with their CUresult", "communicator membership (uniqueId, commHash)"],
    remedy: "Make every rank take the same path (the variable that turns the feature off on all ranks), then find why the call fails on some ranks only.",
    source: "knowledge/driver-paths.toml (per path: NVIDIA/nccl#2190, #2077, the user guide)",
    standalone: false,
    check: driver_paths_agree,
};

/// Per process, driver function → (succeeded at least once, first failure's CUresult), for the
/// driver calls NCCL made inside the process's inits.
fn init_driver_outcomes(job: &JobModel, p: usize) -> BTreeMap<String, (bool, Option<i32>)> {
    let pm = &job.processes[p];
    let windows: Vec<(u32, u64, u64)> = pm
        .calls
        .iter()
        .filter(|c| c.is_init() && !c.is_cuda)
        .map(|c| (c.tid, c.t_enter, c.t_exit.unwrap_or(u64::MAX)))
        .collect();
    let mut out: BTreeMap<String, (bool, Option<i32>)> = BTreeMap::new();
    for c in pm.calls.iter().filter(|c| c.is_cuda && c.nested) {
        let inside = windows
            .iter()
            .any(|&(tid, a, b)| tid == c.tid && c.t_enter >= a && c.t_enter <= b);
        if !inside {
            continue;
        }
        let e = out.entry(c.name.to_string()).or_default();
        if c.rc == 0 {
            e.0 = true;
        } else if e.1.is_none() {
            e.1 = Some(c.rc);
        }
    }
    out
}

fn driver_paths_agree(job: &JobModel, _: &Story) -> Vec<Violation> {
    // Communicator (uniqueId or commHash) → its processes.
    let mut groups: BTreeMap<u64, BTreeSet<usize>> = BTreeMap::new();
    for p in 0..job.processes.len() {
        for c in comms_of(job, p) {
            groups.entry(c).or_default().insert(p);
        }
    }
    let outcomes: Vec<BTreeMap<String, (bool, Option<i32>)>> = (0..job.processes.len())
        .map(|p| init_driver_outcomes(job, p))
        .collect();
    let mut out = Vec::new();
    let mut reported: BTreeSet<(String, Vec<usize>)> = BTreeSet::new();
    for members in groups.values().filter(|m| m.len() >= 2) {
        let functions: BTreeSet<&String> =
            members.iter().flat_map(|&p| outcomes[p].keys()).collect();
        for f in functions {
            let Some(path) = driver_paths::of_function(f) else {
                continue;
            };
            let mut ok = Vec::new();
            let mut failed: Vec<(usize, i32)> = Vec::new();
            for &p in members {
                match outcomes[p].get(f) {
                    Some((_, Some(rc))) => failed.push((p, *rc)),
                    Some((true, None)) => ok.push(p),
                    _ => {}
                }
            }
            if ok.is_empty() || failed.is_empty() {
                continue;
            }
            let bad: Vec<usize> = failed.iter().map(|x| x.0).collect();
            if !reported.insert((f.clone(), bad.clone())) {
                continue;
            }
            let rc = failed[0].1;
            let title = format!(
                "ranks of one communicator took different paths through the driver: {f} ({}) succeeded on {} and failed with {rc} {} on {}, inconsistent across the ranks",
                path.path,
                name_processes(job, &ok),
                crate::names::rc_name(rc, true),
                name_processes(job, &bad),
            );
            let mut v = Violation::new(&DRIVER_PATHS_AGREE, title, bad.clone())
                .reaching(Scope::Communicator, members.iter().copied())
                .remedy(path.remedy.clone());
            v = v.fact(
                Evidence::new(
                    EvidenceKind::Inference,
                    format!("{f} inside init succeeded"),
                )
                .value("function", f)
                .of_all(job, &ok),
            );
            for &(p, rc) in &failed {
                v = v.fact(
                    Evidence::new(
                        EvidenceKind::Inference,
                        format!(
                            "{f} inside init failed with {rc} {}",
                            crate::names::rc_name(rc, true)
                        ),
                    )
                    .value("function", f)
                    .value("cu_result", rc)
                    .of(job, p),
                );
                // What else the failing ranks skipped that their peers did (the path not taken).
                let skipped: Vec<&String> = outcomes[ok[0]]
                    .iter()
                    .filter(|(g, (s, _))| *s && *g != f && !outcomes[p].contains_key(*g))
                    .map(|(g, _)| g)
                    .collect();
                if !skipped.is_empty() {
                    v = v.fact(
                        Evidence::new(
                            EvidenceKind::Inference,
                            format!(
                                "made none of the calls its peers made next ({})",
                                skipped
                                    .iter()
                                    .map(|s| s.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )
                        .of(job, p),
                    );
                }
            }
            v = v.fact(Evidence::new(
                EvidenceKind::Inference,
                format!("knowledge: {} ({})", path.path, path.source),
            ));
            out.push(v);
        }
    }
    out
}
