//! Identity: how uniqueIds, ranks and nranks relate to communicators and processes, and to the
//! launcher's own variables.
//!
//! NCCL's API documents (`ncclCommInitRank`): "rank must be between 0 and nranks-1 and unique
//! within a communicator clique"; a uniqueId "should be called once when creating a
//! communicator", each communicator from its own id (the id names the root's bootstrap listener,
//! which closes once the communicator is built: NVIDIA/nccl#1038, #206).

use super::contract::{launcher_facts, launcher_number, Family, Invariant, Scope, Violation};
use crate::finding::words::{name_processes, rank_list};
use crate::finding::{Evidence, EvidenceKind};
use crate::knowledge::launchers::Role;
use crate::model::{CallEvent, JobModel};
use crate::story::Story;
use std::collections::{BTreeMap, BTreeSet};

pub static RANK_WITHIN_NRANKS: Invariant = Invariant {
    id: "rank-within-nranks",
    family: Family::Identity,
    statement: "every rank passed to a communicator's init lies in 0..nranks-1",
    reads: &["init calls' rank and nranks", "the launcher's world size and node variables", "processes per uniqueId and host"],
    remedy: "Pass every rank a rank below nranks: nranks is the number of ranks of the whole communicator (the job's world size for the world communicator), not of one node.",
    source: "NCCL API, ncclCommInitRank: \"rank must be between 0 and nranks-1\"",
    standalone: false,
    check: rank_within_nranks,
};

pub static ONE_PROCESS_PER_RANK: Invariant = Invariant {
    id: "one-process-per-rank",
    family: Family::Identity,
    statement: "each rank of a communicator is held by exactly one process",
    reads: &["init calls' rank, nranks and uniqueId per process", "the launcher's rank variables"],
    remedy: "Give every process its own rank (RANK / OMPI_COMM_WORLD_RANK / SLURM_PROCID as the launcher sets it): two processes that claim one rank of one communicator wait for peers that never come.",
    source: "NCCL API, ncclCommInitRank: rank \"unique within a communicator clique\"",
    standalone: false,
    check: one_process_per_rank,
};

pub static UNIQUE_ID_SINGLE_USE: Invariant = Invariant {
    id: "unique-id-single-use",
    family: Family::Identity,
    statement: "a uniqueId creates one communicator: a process never initialises a second communicator with the id of one it already built",
    reads: &["init calls' uniqueId hash in order per process", "ncclGetUniqueId calls", "destroy/finalize calls in between"],
    remedy: "Create a fresh uniqueId (ncclGetUniqueId on one rank, then broadcast it) for every communicator, or derive new communicators from an existing one with ncclCommSplit: a uniqueId names the root's bootstrap listener, which is gone once its communicator is built.",
    source: "NCCL API, ncclGetUniqueId (\"called once when creating a communicator\"); NVIDIA/nccl#1038, #206, #239",
    standalone: false,
    check: unique_id_single_use,
};

/// Init calls of process `p` that name a uniqueId: (call index, call, uid hash).
fn inits(job: &JobModel, p: usize) -> impl Iterator<Item = (usize, &CallEvent, u64)> {
    job.processes[p]
        .calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.is_init() && !c.is_cuda)
        .filter_map(|(i, c)| Some((i, c, c.arg("uid_hash").filter(|&h| h != 0)?)))
}

/// Processes that called init with uniqueId `uid` (any rank), per uid, across the job.
fn processes_per_uid(job: &JobModel) -> BTreeMap<u64, BTreeSet<usize>> {
    let mut m: BTreeMap<u64, BTreeSet<usize>> = BTreeMap::new();
    for p in 0..job.processes.len() {
        for (_, _, uid) in inits(job, p) {
            m.entry(uid).or_default().insert(p);
        }
    }
    m
}

fn hosts_of(job: &JobModel, ps: &BTreeSet<usize>) -> BTreeSet<String> {
    ps.iter().map(|&p| job.processes[p].host.clone()).collect()
}

fn rank_within_nranks(job: &JobModel, _: &Story) -> Vec<Violation> {
    // (uid, nranks) → offending (process, rank, call index).
    type Offender = (usize, u64, usize);
    let mut bad: BTreeMap<(u64, u64), Vec<Offender>> = BTreeMap::new();
    for p in 0..job.processes.len() {
        for (i, c, uid) in inits(job, p) {
            let (Some(n), Some(r)) = (c.arg("nranks"), c.arg("rank")) else {
                continue;
            };
            // u64::MAX marks an unknown value; a negative rank reads as a huge one.
            if n == 0 || n == u64::MAX || r == u64::MAX || r < n {
                continue;
            }
            bad.entry((uid, n)).or_default().push((p, r, i));
        }
    }
    let per_uid = processes_per_uid(job);
    let mut out = Vec::new();
    for ((uid, n), offenders) in bad {
        let ps: Vec<usize> = offenders.iter().map(|o| o.0).collect();
        let joined = per_uid.get(&uid).cloned().unwrap_or_default();
        let hosts = hosts_of(job, &joined);
        let bad_ranks: Vec<u32> = offenders.iter().map(|o| o.1 as u32).collect();
        let world = launcher_number(job, ps[0], Role::WorldSize);
        let mut title = format!(
            "{} joined a communicator of nranks {n} with rank{} {} (out of range: every rank must be below nranks)",
            name_processes(job, &ps),
            if bad_ranks.len() == 1 { "" } else { "s" },
            rank_list(&bad_ranks),
        );
        let mut remedy = RANK_WITHIN_NRANKS.remedy.to_owned();
        if let Some((var, w)) = world.filter(|(_, w)| *w == n) {
            let m = joined.len();
            if m as u64 > n {
                let per_node = if hosts.is_empty() {
                    n as usize
                } else {
                    m.div_ceil(hosts.len())
                };
                title.push_str(&format!(
                    "; {var}={w} is too small: {m} processes on {} joined it, so {var} looks like the per-node count",
                    crate::finding::words::count(hosts.len(), "host", "hosts")
                ));
                remedy = format!(
                    "Set {var} to the total number of ranks of the job ({m} = {} nodes x {per_node} ranks per node), not the per-node count (let the launcher set it: torchrun --nnodes/--nproc-per-node, Slurm --ntasks, Lightning num_nodes x devices); nranks is global.",
                    hosts.len()
                );
            }
        }
        let mut v = Violation::new(&RANK_WITHIN_NRANKS, title, ps.clone())
            .reaching(Scope::Communicator, joined.iter().copied())
            .remedy(remedy);
        for &(p, r, i) in &offenders {
            let c = &job.processes[p].calls[i];
            v = v.fact(
                Evidence::new(
                    EvidenceKind::Communicator,
                    format!("{} called with rank {r}, nranks {n}", c.name),
                )
                .value("rank", r)
                .value("nranks", n)
                .value("uid_hash", format!("{uid:#x}"))
                .of(job, p),
            );
            for (k, val) in launcher_facts(job, p) {
                v = v.fact(Evidence::env(&k, Some(&val), "").of(job, p));
            }
        }
        v = v.fact(
            Evidence::new(
                EvidenceKind::Communicator,
                format!(
                    "{} processes on {} joined uniqueId {uid:#x} (nranks {n})",
                    joined.len(),
                    hosts.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            )
            .value("processes", joined.len())
            .value("nranks", n),
        );
        out.push(v);
    }
    out
}

fn one_process_per_rank(job: &JobModel, _: &Story) -> Vec<Violation> {
    // (uid, rank) → processes.
    let mut claims: BTreeMap<(u64, u64), BTreeSet<usize>> = BTreeMap::new();
    for p in 0..job.processes.len() {
        for (_, c, uid) in inits(job, p) {
            if let Some(r) = c.arg("rank").filter(|&r| r != u64::MAX) {
                claims.entry((uid, r)).or_default().insert(p);
            }
        }
    }
    let per_uid = processes_per_uid(job);
    // One violation per uniqueId, listing every doubly-held rank.
    let mut by_uid: BTreeMap<u64, Vec<(u64, BTreeSet<usize>)>> = BTreeMap::new();
    for ((uid, r), ps) in claims {
        if ps.len() > 1 {
            by_uid.entry(uid).or_default().push((r, ps));
        }
    }
    let mut out = Vec::new();
    for (uid, doubles) in by_uid {
        let ps: Vec<usize> = doubles
            .iter()
            .flat_map(|(_, ps)| ps.iter().copied())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let ranks: Vec<u32> = doubles.iter().map(|d| d.0 as u32).collect();
        let title = format!(
            "{} processes claim the same rank{} {} of one communicator (uniqueId {uid:#x}): each rank must be held by one process",
            ps.len(),
            if ranks.len() == 1 { "" } else { "s" },
            rank_list(&ranks)
        );
        let mut v = Violation::new(&ONE_PROCESS_PER_RANK, title, ps.clone()).reaching(
            Scope::Communicator,
            per_uid.get(&uid).into_iter().flatten().copied(),
        );
        for (r, holders) in &doubles {
            for &p in holders {
                let pm = &job.processes[p];
                v = v.fact(
                    Evidence::new(
                        EvidenceKind::Communicator,
                        format!("{} pid {} claims rank {r}", pm.host, pm.pid),
                    )
                    .value("rank", r)
                    .of(job, p),
                );
                for (k, val) in launcher_facts(job, p) {
                    v = v.fact(Evidence::env(&k, Some(&val), "").of(job, p));
                }
            }
        }
        out.push(v);
    }
    out
}

/// Whether an init call built its communicator (returned success, or was still building it
/// when a non-blocking init returned ncclInProgress and later polls reported success).
fn built(c: &CallEvent) -> bool {
    c.rc == 0 && !c.in_flight()
}

fn unique_id_single_use(job: &JobModel, _: &Story) -> Vec<Violation> {
    // uid → (process, first init that built a communicator, the later init with the same id).
    let mut reuse: BTreeMap<u64, Vec<(usize, usize, usize)>> = BTreeMap::new();
    for p in 0..job.processes.len() {
        let mut built_with: BTreeMap<u64, usize> = BTreeMap::new();
        for (i, c, uid) in inits(job, p) {
            if let Some(&first) = built_with.get(&uid) {
                // Strictly after the first one returned (a record read twice is no second use).
                let done = job.processes[p].calls[first].t_exit.unwrap_or(u64::MAX);
                if c.t_enter > done {
                    reuse.entry(uid).or_default().push((p, first, i));
                }
                continue;
            }
            if built(c) {
                built_with.insert(uid, i);
            }
        }
    }
    let per_uid = processes_per_uid(job);
    let mut out = Vec::new();
    for (uid, uses) in reuse {
        let ps: Vec<usize> = uses
            .iter()
            .map(|u| u.0)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let made: usize = job
            .processes
            .iter()
            .flat_map(|pm| pm.calls.iter())
            .filter(|c| c.name == "ncclGetUniqueId" && c.arg("uid_hash") == Some(uid))
            .count();
        let title = format!(
            "uniqueId reused: {} initialised a second communicator with the same uniqueId {uid:#x} as one already built{}",
            name_processes(job, &ps),
            match made {
                0 => String::new(),
                1 => " (ncclGetUniqueId made it once; a uniqueId is single-use)".into(),
                n => format!(" (ncclGetUniqueId returned it {n} times)"),
            }
        );
        let mut v = Violation::new(&UNIQUE_ID_SINGLE_USE, title, ps).reaching(
            Scope::Communicator,
            per_uid.get(&uid).into_iter().flatten().copied(),
        );
        for &(p, first, second) in &uses {
            let pm = &job.processes[p];
            let (a, b) = (&pm.calls[first], &pm.calls[second]);
            let between: Vec<&str> = pm.calls[first + 1..second]
                .iter()
                .filter(|c| {
                    matches!(
                        c.name.as_ref(),
                        "ncclCommDestroy" | "ncclCommFinalize" | "ncclCommAbort"
                    )
                })
                .map(|c| c.name.as_ref())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let ms = b.t_enter.saturating_sub(a.t_enter) as f64 / 1e6;
            v = v.fact(
                Evidence::new(
                    EvidenceKind::Communicator,
                    format!(
                        "{} with uniqueId {uid:#x} built a communicator; {ms:.0} ms later{} {} used the same id: {}",
                        a.name,
                        if between.is_empty() {
                            String::new()
                        } else {
                            format!(", after {},", between.join(" and "))
                        },
                        b.name,
                        b.describe()
                    ),
                )
                .value("uid_hash", format!("{uid:#x}"))
                .value("ms_between", ms)
                .of(job, p),
            );
        }
        out.push(v);
    }
    out
}
