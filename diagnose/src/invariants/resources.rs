//! Resources: the process limits and host sizes against what the job's transports need
//! (`knowledge/thresholds.toml`): locked memory for RDMA registration, `/dev/shm` for the
//! shared-memory transport between ranks of one host. Judged on processes that failed, whatever
//! NCCL's text said (catalog rules C07 and C11 read the texts).

use super::contract::{Family, Invariant, Violation};
use crate::finding::words::human_bytes;
use crate::finding::words::name_processes;
use crate::finding::{Confidence, Evidence, EvidenceKind};
use crate::knowledge::thresholds::thresholds;
use crate::model::JobModel;
use crate::story::{comms_of, Story};

pub static MEMLOCK_FOR_RDMA: Invariant = Invariant {
    id: "memlock-for-rdma",
    family: Family::Resources,
    statement: "a process that may use InfiniBand/RoCE has an unlimited locked-memory limit (NCCL pins its buffers to register them with the HCA)",
    reads: &["RLIMIT_MEMLOCK", "HCAs and libibverbs on the host", "NCCL_IB_DISABLE / NCCL_NET"],
    remedy: "Raise the locked-memory limit to unlimited for the processes the launcher starts (limits.conf memlock unlimited and a new login, docker --ulimit memlock=-1, Slurm PropagateResourceLimits, mpirun's daemons started with it), or NCCL_IB_DISABLE=1 if the job should not use RDMA.",
    source: "knowledge/thresholds.toml [memlock] (NCCL troubleshooting guide: soft and hard memlock unlimited)",
    standalone: false,
    check: memlock_for_rdma,
};

pub static DEV_SHM_WRITABLE: Invariant = Invariant {
    id: "dev-shm-writable",
    family: Family::Resources,
    statement: "a process that shares its host with other ranks of its communicator may create files in /dev/shm (NCCL's shared-memory transport creates its segments there)",
    reads: &["/dev/shm mode and owner", "whether the process may create files there (its effective ids)", "ranks per host and communicator", "NCCL_SHM_DISABLE"],
    remedy: "Make /dev/shm writable by every user (chmod 1777 /dev/shm, or the tmpfs mount's mode=1777), or give the container its own (docker --ipc=private, a Kubernetes emptyDir with medium: Memory); workaround NCCL_SHM_DISABLE=1 (slower).",
    source: "NVIDIA/nccl#328 (shm_open: Permission denied, fixed by chmod 1777 /dev/shm); NCCL's shm transport: shm_open under /dev/shm",
    standalone: false,
    check: dev_shm_writable,
};

pub static DEV_SHM_ROOM: Invariant = Invariant {
    id: "dev-shm-room",
    family: Family::Resources,
    statement: "a host with several ranks of one communicator has /dev/shm large enough for NCCL's shared-memory transport",
    reads: &["/dev/shm size", "ranks per host and communicator", "NCCL_SHM_DISABLE"],
    remedy: "Give /dev/shm room (docker --shm-size=1g or more, a Kubernetes emptyDir with medium: Memory, a larger tmpfs), or NCCL_SHM_DISABLE=1 to use other transports between local ranks.",
    source: "knowledge/thresholds.toml [dev_shm] (NCCL troubleshooting guide, Docker: --shm-size=1g)",
    standalone: false,
    check: dev_shm_room,
};

/// The failed calls of process `p` a latent limit can explain: those whose text NCCL's message
/// knowledge does not classify (nothing says what they are), or classifies with one of `causes`
/// still possible for the recorded facts (`knowledge/messages.toml`). A failure the knowledge
/// explains otherwise (a fatal HCA event, a missing device) is not the limit's doing.
fn failures_it_may_cause(job: &JobModel, p: usize, causes: &[&str]) -> Vec<(usize, usize)> {
    use crate::knowledge::messages::{self, Fit};
    let pm = &job.processes[p];
    let facts = crate::message_facts::ProcessFacts(pm);
    pm.error_calls()
        .filter(|(_, c)| !c.is_cuda)
        .filter(|(_, c)| {
            let Some(text) = c.error_text.as_deref() else {
                return true;
            };
            let matches = messages::classify_all(text);
            matches.is_empty()
                || matches.iter().any(|m| {
                    m.entry
                        .assess(m, &facts)
                        .iter()
                        .any(|a| causes.contains(&a.cause.id.as_str()) && a.fit != Fit::RuledOut)
                })
        })
        .map(|(i, _)| (p, i))
        .collect()
}

fn memlock_for_rdma(job: &JobModel, _: &Story) -> Vec<Violation> {
    if !thresholds().memlock.require_unlimited {
        return Vec::new();
    }
    let mut bad = Vec::new();
    for (p, pm) in job.processes.iter().enumerate() {
        let Some(h) = &pm.host_facts else { continue };
        let Some(limit) = h.memlock_soft_bytes else {
            continue;
        };
        let rdma_here = !h.infiniband.is_empty() || !h.ib_ports.is_empty();
        let verbs = h.libibverbs_dlopen == Some(true)
            || pm
                .libs
                .as_ref()
                .is_some_and(|l| l.libs.iter().any(|(k, _)| k == "ibverbs"));
        let ib_off = pm.env_var("NCCL_IB_DISABLE") == Some("1")
            || pm
                .env_var("NCCL_NET")
                .is_some_and(|n| n.eq_ignore_ascii_case("socket"));
        if h.memlock_unlimited != Some(true) && rdma_here && verbs && !ib_off {
            let calls = failures_it_may_cause(
                job,
                p,
                &["memlock-limit", "out-of-memory", "memlock-or-memory"],
            );
            if !calls.is_empty() {
                bad.push((p, limit, calls));
            }
        }
    }
    if bad.is_empty() {
        return Vec::new();
    }
    let ps: Vec<usize> = bad.iter().map(|b| b.0).collect();
    let calls: Vec<(usize, usize)> = bad.iter().flat_map(|b| b.2.iter().copied()).collect();
    let h = job.processes[ps[0]].host_facts.as_ref();
    let hcas = h.map(|h| h.infiniband.join(", ")).unwrap_or_default();
    let title = format!(
        "{} may lock only {} of memory (RLIMIT_MEMLOCK) while NCCL's InfiniBand/RoCE transport pins and registers its buffers with the HCA ({hcas})",
        name_processes(job, &ps),
        human_bytes(bad[0].1)
    );
    let mut v = Violation::new(&MEMLOCK_FOR_RDMA, title, ps)
        .confidence(Confidence::Medium)
        .explaining(calls);
    for &(p, limit, _) in &bad {
        v = v.fact(
            Evidence::new(
                EvidenceKind::Host,
                format!("RLIMIT_MEMLOCK soft limit {}", human_bytes(limit)),
            )
            .value("memlock_soft_bytes", limit)
            .of(job, p),
        );
    }
    vec![v]
}

/// Members per (machine, communicator), counted once when first needed (a scan of every process
/// per failing one was ranks x ranks): whether a process shares its host with another rank of
/// one of its communicators, so NCCL's shared-memory transport is in play for it.
struct LocalPeers<'j>(std::collections::HashMap<(&'j str, u64), usize>);

impl<'j> LocalPeers<'j> {
    fn of(job: &'j JobModel) -> Self {
        let mut m = std::collections::HashMap::new();
        for (q, qm) in job.processes.iter().enumerate() {
            for c in comms_of(job, q) {
                *m.entry((qm.machine(), c)).or_default() += 1;
            }
        }
        LocalPeers(m)
    }

    fn has(&self, job: &JobModel, p: usize) -> bool {
        let machine = job.processes[p].machine();
        comms_of(job, p)
            .into_iter()
            .any(|c| self.0.get(&(machine, c)).is_some_and(|&n| n >= 2))
    }
}

fn dev_shm_writable(job: &JobModel, _: &Story) -> Vec<Violation> {
    let mut local_peers: Option<LocalPeers> = None;
    let mut bad = Vec::new();
    for (p, pm) in job.processes.iter().enumerate() {
        let Some(h) = &pm.host_facts else { continue };
        if h.dev_shm_writable != Some(false) || pm.env_var("NCCL_SHM_DISABLE") == Some("1") {
            continue;
        }
        let calls = failures_it_may_cause(job, p, &["dev-shm-not-writable", "shm-permission"]);
        if calls.is_empty()
            || !local_peers
                .get_or_insert_with(|| LocalPeers::of(job))
                .has(job, p)
        {
            continue;
        }
        bad.push((p, h.dev_shm_mode, h.dev_shm_uid, calls));
    }
    if bad.is_empty() {
        return Vec::new();
    }
    let ps: Vec<usize> = bad.iter().map(|b| b.0).collect();
    let calls: Vec<(usize, usize)> = bad.iter().flat_map(|b| b.3.iter().copied()).collect();
    let title = format!(
        "{} may not create files in /dev/shm ({}) while sharing a host with other ranks of their communicator: NCCL's shared-memory transport creates its segments there",
        name_processes(job, &ps),
        match (bad[0].1, bad[0].2) {
            (Some(mode), Some(owner)) => format!("mode {mode:04o}, owned by uid {owner}"),
            _ => "not writable".to_owned(),
        },
    );
    let mut v = Violation::new(&DEV_SHM_WRITABLE, title, ps).explaining(calls);
    for &(p, mode, owner, _) in &bad {
        v = v.fact(
            Evidence::new(
                EvidenceKind::Host,
                match (mode, owner) {
                    (Some(m), Some(o)) => format!(
                        "/dev/shm mode {m:04o}, owner uid {o}, not writable by this process"
                    ),
                    _ => "/dev/shm not writable by this process".to_owned(),
                },
            )
            .value("dev_shm_mode", mode.map(|m| format!("{m:04o}")))
            .value("dev_shm_uid", owner)
            .value("dev_shm_writable", false)
            .of(job, p),
        );
    }
    vec![v]
}

fn dev_shm_room(job: &JobModel, _: &Story) -> Vec<Violation> {
    let min = thresholds().dev_shm.min_bytes;
    let mut bad = Vec::new();
    let mut local_peers: Option<LocalPeers> = None;
    for (p, pm) in job.processes.iter().enumerate() {
        let Some(size) = pm.host_facts.as_ref().and_then(|h| h.dev_shm_bytes) else {
            continue;
        };
        if size >= min || pm.env_var("NCCL_SHM_DISABLE") == Some("1") {
            continue;
        }
        let calls = failures_it_may_cause(job, p, &["dev-shm-too-small", "dev-shm-full"]);
        if calls.is_empty() {
            continue;
        }
        // Another rank of one of its communicators on the same machine: SHM is in play.
        let local_peer = local_peers
            .get_or_insert_with(|| LocalPeers::of(job))
            .has(job, p);
        if local_peer {
            bad.push((p, size, calls));
        }
    }
    if bad.is_empty() {
        return Vec::new();
    }
    let ps: Vec<usize> = bad.iter().map(|b| b.0).collect();
    let calls: Vec<(usize, usize)> = bad.iter().flat_map(|b| b.2.iter().copied()).collect();
    let title = format!(
        "/dev/shm holds only {} where {} share a host with other ranks of their communicator (NCCL's shared-memory transport needs about {})",
        human_bytes(bad[0].1),
        name_processes(job, &ps),
        human_bytes(min)
    );
    let mut v = Violation::new(&DEV_SHM_ROOM, title, ps)
        .confidence(Confidence::Medium)
        .explaining(calls);
    for &(p, size, _) in &bad {
        v = v.fact(
            Evidence::new(
                EvidenceKind::Host,
                format!("/dev/shm size {}", human_bytes(size)),
            )
            .value("dev_shm_bytes", size)
            .of(job, p),
        );
    }
    vec![v]
}
