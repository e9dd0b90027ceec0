//! Plugins and launchers: the plugins a job asked NCCL for are the ones NCCL loaded, and the
//! launcher's layout (ranks per node, local ranks) is what NCCL was told. A plugin NCCL could
//! not load is a silent fallback (NCCL uses its internal transports) or a failed init; two
//! processes of one host with one local rank pick the same GPU.

use super::contract::{launcher_facts, launcher_number, Family, Invariant, Scope, Violation};
use crate::finding::words::name_processes;
use crate::finding::{Confidence, Evidence, EvidenceKind};
use crate::knowledge::launchers::{lookup, Role};
use crate::model::JobModel;
use crate::story::{comms_of, Story};
use std::collections::{BTreeMap, BTreeSet};

pub static REQUESTED_PLUGIN_LOADED: Invariant = Invariant {
    id: "requested-plugin-loaded",
    family: Family::Plugins,
    statement: "a net or tuner plugin named by NCCL_NET_PLUGIN / NCCL_TUNER_PLUGIN is loaded in the process",
    reads: &["NCCL_NET_PLUGIN, NCCL_TUNER_PLUGIN", "the libraries mapped in the process (read again after a failed init)"],
    remedy: "Make the plugin loadable on every node: libnccl-net-<name>.so (or the absolute path given) and the libraries it needs, in the versions it was built for, on the loader's path; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET prints the dlopen error. Set NCCL_NET to the plugin's network name to fail fast instead of falling back silently.",
    source: "NCCL user guide env.rst NCCL_NET_PLUGIN / NCCL_TUNER_PLUGIN (\"libnccl-net-<suffix>.so\"; falls back to the internal implementation when none loads); aws-ofi-nccl silent Socket fallback (awslabs/awsome-distributed-ai#292)",
    standalone: true,
    check: requested_plugin_loaded,
};

pub static LAUNCHER_LAYOUT_MATCHES: Invariant = Invariant {
    id: "launcher-layout-matches",
    family: Family::Plugins,
    statement: "the processes of one host that share a communicator have distinct local ranks, no more of them than the launcher's per-node count",
    reads: &["the launcher's local rank and local world size (knowledge/launchers.toml)", "processes per host and communicator"],
    remedy: "Start each process of a node with its own local rank (the launcher's --nproc-per-node / --ntasks-per-node / -npernode matching the GPUs used), and derive the GPU from it: two processes of one node with one local rank take the same GPU and the same rank slot.",
    source: "torchrun / Open MPI / Slurm set LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID per process of a node (knowledge/launchers.toml)",
    standalone: false,
    check: launcher_layout_matches,
};

/// The plugin variables NCCL reads and the file-name prefix NCCL looks for.
const PLUGIN_VARS: &[(&str, &str)] = &[
    ("NCCL_NET_PLUGIN", "libnccl-net"),
    ("NCCL_TUNER_PLUGIN", "libnccl-tuner"),
];

/// Whether a mapped library is the plugin `value` names.
fn is_the_plugin(path: &str, value: &str, prefix: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    let wanted = value.rsplit('/').next().unwrap_or(value);
    base == wanted
        || base.starts_with(&format!("{prefix}-{wanted}.so"))
        || base.starts_with(&format!("{prefix}-{wanted}"))
        || (wanted.starts_with(prefix) && base.starts_with(wanted.trim_end_matches(".so")))
}

fn requested_plugin_loaded(job: &JobModel, _: &Story) -> Vec<Violation> {
    // (variable, value) → processes that asked for it and do not have it.
    let mut missing: BTreeMap<(&str, String), Vec<usize>> = BTreeMap::new();
    for (p, pm) in job.processes.iter().enumerate() {
        let Some(libs) = &pm.libs else { continue };
        // Only a process that called NCCL can have loaded a plugin.
        if !pm.calls.iter().any(|c| c.is_init()) {
            continue;
        }
        for &(var, prefix) in PLUGIN_VARS {
            let Some(value) = pm.env_var(var).map(str::trim) else {
                continue;
            };
            if value.is_empty() || value.eq_ignore_ascii_case("none") || value == "0" {
                continue;
            }
            // A path whose file is not a plugin name cannot be checked by name.
            if value.contains('/')
                && !value
                    .rsplit('/')
                    .next()
                    .is_some_and(|b| b.starts_with(prefix))
            {
                continue;
            }
            if !libs
                .libs
                .iter()
                .any(|(_, path)| is_the_plugin(path, value, prefix))
            {
                missing.entry((var, value.to_owned())).or_default().push(p);
            }
        }
    }
    missing
        .into_iter()
        .map(|((var, value), ps)| {
            let failed: Vec<usize> = ps
                .iter()
                .copied()
                .filter(|&p| job.processes[p].error_calls().next().is_some())
                .collect();
            let title = format!(
                "{var}={value} names a plugin NCCL did not load in {}: NCCL {}",
                name_processes(job, &ps),
                if failed.is_empty() {
                    "fell back to its internal transports without saying so"
                } else {
                    "could not use it, and failed"
                }
            );
            let mut v = Violation::new(&REQUESTED_PLUGIN_LOADED, title, ps.clone())
                .confidence(Confidence::Medium);
            v = v.fact(Evidence::env(var, Some(&value), "").of_all(job, &ps));
            let loaded: BTreeSet<String> = ps
                .iter()
                .filter_map(|&p| job.processes[p].libs.as_ref())
                .flat_map(|l| l.plugins.iter().cloned())
                .collect();
            v = v.fact(Evidence::new(
                EvidenceKind::Library,
                if loaded.is_empty() {
                    "no NCCL plugin is mapped in these processes".to_owned()
                } else {
                    format!(
                        "NCCL plugins mapped: {}",
                        loaded.into_iter().collect::<Vec<_>>().join(", ")
                    )
                },
            ));
            v
        })
        .collect()
}

fn launcher_layout_matches(job: &JobModel, _: &Story) -> Vec<Violation> {
    // (run, node, local rank) → processes. A node is what one launcher agent sees: a hostname
    // on a machine (two containers of one machine are two nodes, each with local rank 0).
    type Slot<'a> = (&'a str, (&'a str, &'a str), u64);
    let mut by_local: BTreeMap<Slot, Vec<usize>> = BTreeMap::new();
    for (p, pm) in job.processes.iter().enumerate() {
        let Some(env) = &pm.env else { continue };
        let Some(lr) = lookup(env, Role::LocalRank).and_then(|v| v.number()) else {
            continue;
        };
        by_local
            .entry((pm.run_id.as_str(), (pm.machine(), pm.host.as_str()), lr))
            .or_default()
            .push(p);
    }
    let mut out = Vec::new();
    let mut twice: Vec<(u64, Vec<usize>)> = Vec::new();
    for ((_, _, lr), ps) in by_local {
        if ps.len() < 2 {
            continue;
        }
        // Only processes of one communicator (two jobs may share a machine): a process counts
        // when one of its communicators has another member in the group (counted per
        // communicator: a pairwise comparison was quadratic in the group's size).
        let comms: Vec<std::collections::BTreeSet<u64>> =
            ps.iter().map(|&p| comms_of(job, p)).collect();
        let mut members: BTreeMap<u64, usize> = BTreeMap::new();
        for c in comms.iter().flatten() {
            *members.entry(*c).or_default() += 1;
        }
        let shared: Vec<usize> = ps
            .iter()
            .zip(&comms)
            .filter(|(_, cs)| cs.iter().any(|c| members[c] >= 2))
            .map(|(&p, _)| p)
            .collect();
        if shared.len() >= 2 {
            twice.push((lr, shared));
        }
    }
    if !twice.is_empty() {
        let ps: Vec<usize> = twice.iter().flat_map(|t| t.1.iter().copied()).collect();
        let host = job.processes[ps[0]].host.clone();
        let title = format!(
            "{} share a host ({host}) and a communicator with the same local rank{} {}: the launcher started them as one slot of the node",
            name_processes(job, &ps),
            if twice.len() == 1 { "" } else { "s" },
            twice
                .iter()
                .map(|t| t.0.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        let mine: BTreeSet<u64> = ps.iter().flat_map(|&p| comms_of(job, p)).collect();
        let reach: Vec<usize> = (0..job.processes.len())
            .filter(|&q| !comms_of(job, q).is_disjoint(&mine))
            .collect();
        let mut v = Violation::new(&LAUNCHER_LAYOUT_MATCHES, title, ps.clone())
            .reaching(Scope::Communicator, reach);
        for &p in &ps {
            for (k, val) in launcher_facts(job, p) {
                v = v.fact(Evidence::env(&k, Some(&val), "").of(job, p));
            }
        }
        out.push(v);
    }
    // More processes of one communicator on a host than the launcher's per-node count.
    let mut per_host: BTreeMap<(&str, (&str, &str)), Vec<usize>> = BTreeMap::new();
    for (p, pm) in job.processes.iter().enumerate() {
        if !comms_of(job, p).is_empty() {
            per_host
                .entry((pm.run_id.as_str(), (pm.machine(), pm.host.as_str())))
                .or_default()
                .push(p);
        }
    }
    for ps in per_host.values() {
        let Some((var, n)) = launcher_number(job, ps[0], Role::LocalWorldSize) else {
            continue;
        };
        if n == 0 || ps.len() as u64 <= n {
            continue;
        }
        let host = job.processes[ps[0]].host.clone();
        let title = format!(
            "{} processes on {host} joined NCCL communicators while the launcher's {var}={n} says the node runs {n}: processes of another launch or a second launcher on the node",
            ps.len()
        );
        out.push(
            Violation::new(&LAUNCHER_LAYOUT_MATCHES, title, ps.clone())
                .reaching(Scope::Host, ps.iter().copied())
                .confidence(Confidence::Medium)
                .fact(Evidence::env(&var, Some(&n.to_string()), "").of_all(job, ps)),
        );
    }
    out
}
