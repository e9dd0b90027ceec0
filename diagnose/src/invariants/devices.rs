//! Devices: one physical GPU per rank of a communicator, unless sharing is declared. Two ranks
//! on one PCI device with different instance UUIDs are on partitions of it (MIG instances):
//! NCCL releases without MIG support key their duplicate check on the PCI bus id and have no
//! peer-to-peer path between instances. (Ranks on the very same device are catalog case C06.)

use super::contract::{Family, Invariant, Scope, Violation};
use crate::finding::words::name_processes;
use crate::finding::{Evidence, EvidenceKind};
use crate::model::JobModel;
use crate::story::{comms_of, Story};
use std::collections::BTreeMap;

pub static ONE_PHYSICAL_GPU_PER_RANK: Invariant = Invariant {
    id: "one-physical-gpu-per-rank",
    family: Family::Devices,
    statement: "the ranks of one communicator on one host run on distinct physical GPUs (distinct PCI devices), unless sharing is declared",
    reads: &["each rank's GPU: PCI bus id, UUID", "CUDA_VISIBLE_DEVICES", "communicator membership"],
    remedy: "Give each rank of a communicator a whole physical GPU (MIG disabled, or one MIG instance per physical GPU per communicator), or use an NCCL release with MIG support (SHM and network transports only between MIG instances).",
    source: "NCCL init's duplicate-GPU check keys on the host and PCI bus id (\"Duplicate GPU detected\", src/init.cc); NVIDIA MIG user guide (no P2P between instances); NVIDIA/nccl#431, #1716; pytorch/pytorch#130181",
    standalone: false,
    check: one_physical_gpu_per_rank,
};

/// The GPU instance a process runs on, when it is a MIG instance: the UUID CUDA reported, or
/// the `MIG-` entry of CUDA_VISIBLE_DEVICES.
pub fn mig_instance(job: &JobModel, p: usize) -> Option<String> {
    let pm = &job.processes[p];
    if let Some(g) = pm.gpu() {
        // The driver's MIG UUID, or a UUID of a device CUDA names as a MIG instance (some
        // recorders print every UUID as `GPU-...`).
        let mig_name = g.name.as_deref().is_some_and(|n| n.contains(" MIG "));
        if let Some(u) = g
            .uuid
            .as_ref()
            .filter(|u| u.starts_with("MIG-") || mig_name)
        {
            return Some(u.clone());
        }
    }
    let cvd = pm.env_var("CUDA_VISIBLE_DEVICES")?;
    let first = cvd.split(',').next()?.trim();
    first.starts_with("MIG-").then(|| first.to_owned())
}

/// The processes on each physical GPU: (machine, PCI bus id) → processes, for the ranks whose
/// GPU identity was recorded (the devices invariant and catalog case C06 read it alike).
pub fn processes_by_gpu(job: &JobModel) -> BTreeMap<(String, String), Vec<usize>> {
    let mut by_gpu: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (p, pm) in job.processes.iter().enumerate() {
        if let Some(bus) = pm.gpu().and_then(|g| g.pci_bus_id.clone()) {
            by_gpu
                .entry((pm.machine().to_owned(), bus))
                .or_default()
                .push(p);
        }
    }
    by_gpu
}

/// Groups of processes of one communicator on one host and PCI device, on different MIG
/// instances: (host, PCI bus id, processes).
pub fn partitioned_groups(job: &JobModel) -> Vec<(String, String, Vec<usize>)> {
    let by_gpu = processes_by_gpu(job);
    let mut out = Vec::new();
    for ((_, bus), ps) in by_gpu {
        if ps.len() < 2 {
            continue;
        }
        let mut instances: Vec<(usize, String)> = ps
            .iter()
            .filter_map(|&p| Some((p, mig_instance(job, p)?)))
            .collect();
        instances.sort_by(|a, b| a.1.cmp(&b.1));
        instances.dedup_by(|a, b| a.1 == b.1);
        if instances.len() < 2 {
            continue;
        }
        let members: Vec<usize> = instances.iter().map(|i| i.0).collect();
        let shares_comm = members.iter().any(|&a| {
            let ca = comms_of(job, a);
            members
                .iter()
                .any(|&b| a != b && !ca.is_disjoint(&comms_of(job, b)))
        });
        if shares_comm {
            out.push((job.processes[members[0]].host.clone(), bus, members));
        }
    }
    out
}

fn one_physical_gpu_per_rank(job: &JobModel, _: &Story) -> Vec<Violation> {
    partitioned_groups(job)
        .into_iter()
        .map(|(host, bus, ps)| {
            let title = format!(
                "{} run on different MIG instances of one physical GPU ({bus} on {host}) in one communicator: NCCL without MIG support takes them for one device, and MIG instances have no peer-to-peer path",
                name_processes(job, &ps)
            );
            let mut v = Violation::new(&ONE_PHYSICAL_GPU_PER_RANK, title, ps.clone())
                .reaching(Scope::Communicator, ps.iter().copied());
            for &p in &ps {
                let pm = &job.processes[p];
                v = v.fact(
                    Evidence::new(
                        EvidenceKind::Gpu,
                        format!(
                            "GPU instance {} on PCI device {bus}{}",
                            mig_instance(job, p).unwrap_or_default(),
                            pm.env_var("CUDA_VISIBLE_DEVICES")
                                .map(|v| format!(", CUDA_VISIBLE_DEVICES={v}"))
                                .unwrap_or_default()
                        ),
                    )
                    .value("pci_bus_id", &bus)
                    .value("instance", mig_instance(job, p))
                    .of(job, p),
                );
            }
            v
        })
        .collect()
}
