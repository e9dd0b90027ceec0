//! What the hosts' recorded facts say about a hang in which every rank is inside NCCL.
//!
//! When all ranks entered the same operation and none completed, with no error anywhere, the
//! transport never delivered. NCCL says nothing (no WARN), so the only evidence is the platform:
//! for ranks on one host, the PCIe peer-to-peer path (an IOMMU translating peer writes, C13;
//! consumer GPUs whose driver advertises P2P that does not work, C31); across hosts, the network
//! ports (a port that is not ACTIVE, C30; RoCE without GID auto-selection, C12). This module adds
//! those facts to the hang finding and leads its remedy with the best-supported suspect, so the
//! user starts with the bisection step the evidence points to. Knowledge from
//! `knowledge/hardware.toml`.

use crate::finding::Finding;
use crate::knowledge::hardware;
use crate::model::JobModel;
use std::collections::BTreeSet;

/// One suspect with the facts for it and the first thing to try.
struct Suspect {
    facts: Vec<String>,
    try_first: &'static str,
}

fn intra_host_suspects(job: &JobModel, procs: &BTreeSet<usize>) -> Vec<Suspect> {
    let hw = hardware::get();
    let mut out = Vec::new();
    let first = procs.iter().next().map(|&p| &job.processes[p]);
    let Some(pm) = first else { return out };
    let p2p_env: Vec<String> = ["NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"]
        .iter()
        .filter_map(|k| pm.env_var(k).map(|v| format!("{k}={v}")))
        .collect();
    if let Some(h) = &pm.host_facts {
        if hw.iommu_translating(&h.kernel_iommu_options) {
            out.push(Suspect {
                facts: vec![format!(
                    "{}: the kernel boots with {} and no IOMMU pass-through: peer-to-peer PCIe writes are translated and can be dropped (C13)",
                    pm.host,
                    h.kernel_iommu_options.join(" ")
                )],
                try_first: "NCCL_P2P_DISABLE=1 (then fix the platform: `iommu=pt` on the kernel command line, or ACS off on the PCIe switches)",
            });
        }
        let notes: Vec<String> = h
            .driver_gpus
            .iter()
            .filter_map(|g| {
                let m = g.model.as_deref()?;
                hw.p2p_unreliable(m)
                    .map(|n| format!("{}: GPU {} ({m}): {n}", pm.host, g.bus_id))
            })
            .collect();
        if !notes.is_empty() {
            out.push(Suspect {
                facts: notes,
                try_first:
                    "NCCL_P2P_DISABLE=1 (or a driver that no longer advertises P2P on these GPUs)",
            });
        }
    }
    if !out.is_empty() && !p2p_env.is_empty() {
        out[0]
            .facts
            .push(format!("{}: {}", pm.host, p2p_env.join(" ")));
    }
    out
}

fn network_suspects(job: &JobModel, procs: &BTreeSet<usize>) -> Vec<Suspect> {
    let hw = hardware::get();
    let mut out = Vec::new();
    let mut seen_hosts = BTreeSet::new();
    let mut down = Vec::new();
    let mut roce_v1 = Vec::new();
    for &p in procs {
        let pm = &job.processes[p];
        if !seen_hosts.insert(pm.machine().to_owned()) {
            continue;
        }
        let Some(h) = &pm.host_facts else { continue };
        for port in &h.ib_ports {
            let state = port.state.as_deref().unwrap_or("");
            if !state.is_empty() && !state.contains("ACTIVE") {
                down.push(format!(
                    "{}: {} port {} is {state}",
                    pm.host, port.device, port.port
                ));
            }
        }
        let roce = h
            .ib_ports
            .iter()
            .any(|port| port.link_layer.as_deref() == Some("Ethernet"));
        let old = pm
            .nccl_version
            .is_some_and(|v| v < hw.roce.gid_auto_selection_since);
        if roce && old && pm.env_var("NCCL_IB_GID_INDEX").is_none() {
            roce_v1.push(format!(
                "{}: RoCE ports, NCCL {} (GID index 0 by default before 2.21), NCCL_IB_GID_INDEX unset",
                pm.host,
                pm.nccl_version_text().unwrap_or_default()
            ));
        }
    }
    if !down.is_empty() {
        out.push(Suspect {
            facts: down,
            try_first: "the host whose port is not ACTIVE: check the link (`ibstat`, cables, switch port), exclude it with NCCL_IB_HCA=^<device>",
        });
    }
    if !roce_v1.is_empty() {
        out.push(Suspect {
            facts: roce_v1,
            try_first: "NCCL_IB_GID_INDEX set to the RoCE v2 GID of each host's routable address (`show_gids`), or NCCL >= 2.21 (C12)",
        });
    }
    out
}

/// Adds the platform facts to a `stuck-inside-nccl` finding and leads its remedy with them.
pub fn annotate(job: &JobModel, f: &mut Finding) {
    let machines: BTreeSet<&str> = f
        .process_ids
        .iter()
        .map(|&p| job.processes[p].machine())
        .collect();
    let suspects = if machines.len() <= 1 {
        intra_host_suspects(job, &f.process_ids)
    } else {
        network_suspects(job, &f.process_ids)
    };
    let Some(best) = suspects.first() else { return };
    for s in &suspects {
        for fact in &s.facts {
            f.evidence(fact.clone());
        }
    }
    f.remedy = format!("Try first: {}. {}", best.try_first, f.remedy);
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::host_facts_json;
    use serde_json::json;

    /// Two ranks on one host, both inside the same collective, with `facts` added to the host.
    fn hang_on_one_host(facts: serde_json::Value) -> crate::finding::Finding {
        let (_, fs) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22203);
            let mut h = host_facts_json("n0");
            for (k, v) in facts.as_object().unwrap() {
                h[k] = v.clone();
            }
            for r in s.ranks.iter_mut() {
                r.host_facts(&h);
            }
            s.init_world(22203);
            for r in s.ranks.iter_mut() {
                r.prof_init(ncclshim_fixtures::synth::WORLD_UID, 2, u64::from(r.rank));
                r.prof_coll(
                    ncclshim_fixtures::synth::WORLD_UID,
                    0,
                    2,
                    4096,
                    7,
                    0,
                    false,
                    false,
                );
            }
        });
        find(&fs, registry::STUCK_INSIDE_NCCL.id())
            .expect("stuck inside")
            .clone()
    }

    #[test]
    fn a_translating_iommu_leads_the_remedy() {
        let f = hang_on_one_host(json!({"kernel_iommu_options": ["intel_iommu=on"]}));
        assert!(
            f.remedy.starts_with("Try first: NCCL_P2P_DISABLE=1"),
            "{}",
            f.remedy
        );
        assert!(
            f.evidence.iter().any(|e| e.contains("C13")),
            "{:?}",
            f.evidence
        );
        let pt = hang_on_one_host(json!({"kernel_iommu_options": ["intel_iommu=on", "iommu=pt"]}));
        assert!(!pt.remedy.starts_with("Try first"), "{}", pt.remedy);
    }

    #[test]
    fn consumer_gpus_with_advertised_p2p() {
        let f = hang_on_one_host(json!({"driver_gpus": [
            {"bus_id": "0000:17:00.0", "model": "NVIDIA GeForce RTX 4090"},
            {"bus_id": "0000:65:00.0", "model": "NVIDIA GeForce RTX 4090"}
        ]}));
        assert!(
            f.evidence.iter().any(|e| e.contains("C31")),
            "{:?}",
            f.evidence
        );
        assert!(f.remedy.starts_with("Try first: NCCL_P2P_DISABLE=1"));
    }

    #[test]
    fn no_platform_fact_leaves_the_generic_remedy() {
        let f = hang_on_one_host(json!({}));
        assert!(!f.remedy.starts_with("Try first"), "{}", f.remedy);
    }
}
