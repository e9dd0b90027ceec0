//! Consistency of the links between the job's hosts: what NCCL reads from the local side of a
//! connection must match the remote side, or the two ends disagree without either knowing.
//! - One MTU per network the hosts share: NCCL's RoCE queue pairs take their path MTU from the
//!   local port (its netdev's MTU), and from NCCL 2.20.3 a receiver no longer clamps it to the
//!   peer's (NVIDIA/nccl#1524), so hosts with different MTUs on one subnet fail their transfers
//!   (completion errors, hangs); TCP over such a link stalls on large segments too.
//! - One `NCCL_IB_GID_INDEX` for the whole job selects a GID per host: GID tables are not
//!   portable between hosts and containers, so the index must select, on every host, a GID of
//!   the same RoCE version whose address lies in a network all hosts share.
//!
//! Both explain only the network failures of the processes on the hosts involved: a failed
//! call whose text NCCL's message knowledge does not know, or places in a network subsystem.

use super::contract::{Family, Invariant, Scope, Violation};
use crate::finding::words::name_processes;
use crate::finding::{Confidence, Evidence, EvidenceKind};
use crate::message_facts::is_roce;
use crate::model::endpoints::{host_addresses, masked, same_subnet};
use crate::model::JobModel;
use crate::story::Story;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv6Addr};

pub static LINK_MTU_AGREES: Invariant = Invariant {
    id: "link-mtu-agrees",
    family: Family::Consistency,
    statement: "the interfaces through which the job's hosts share a network have one MTU on every host",
    reads: &["each host's interfaces: addresses, prefix lengths, MTU, state", "the hosts of the job's processes"],
    remedy: "Set one MTU on every host's interface in the shared network, and on the switch ports between them (ip link set dev IF mtu N; a RoCE port's MTU follows its netdev's). NCCL from 2.20.3 no longer clamps an IB/RoCE queue pair's MTU to its peer's (NVIDIA/nccl#1524; negotiation proposed in #2135).",
    source: "NVIDIA/nccl#1524 (bisected to 2.20.3), NVIDIA/nccl#2135; RoCE's path MTU follows the netdev MTU (the RDMA core's iboe MTU)",
    standalone: false,
    check: link_mtu_agrees,
};

pub static GID_INDEX_SELECTS_ALIKE: Invariant = Invariant {
    id: "gid-index-selects-alike",
    family: Family::Consistency,
    statement: "one NCCL_IB_GID_INDEX selects, on every host, a RoCE GID of the same version whose address is in a network all hosts share",
    reads: &["NCCL_IB_GID_INDEX", "each host's RoCE ports and their GID tables (address and type per index)", "each host's interfaces and subnets"],
    remedy: "Leave NCCL_IB_GID_INDEX unset so NCCL (2.21 and later) selects the GID by address family and RoCE version (NCCL_IB_ADDR_FAMILY, NCCL_IB_ROCE_VERSION_NUM), or set it per host to the index of the RoCE v2 GID of that host's address in the shared network (show_gids); make the GID tables alike.",
    source: "NVIDIA/nccl#890, NVIDIA/nccl#1427 (GID auto-selection, 2.21); GID tables are per port and per network namespace",
    standalone: false,
    check: gid_index_selects_alike,
};

/// Subsystems of NCCL's messages a link between hosts can make fail.
const NETWORK_SUBSYSTEMS: &[&str] = &[
    "ib",
    "transport/net",
    "transport",
    "socket",
    "proxy",
    "bootstrap",
];

/// The failed calls of process `p` a broken link can explain: a text the message knowledge does
/// not know, or one it places in a network subsystem.
fn network_failures(job: &JobModel, p: usize) -> Vec<(usize, usize)> {
    use crate::knowledge::messages;
    job.processes[p]
        .error_calls()
        .filter(|(_, c)| !c.is_cuda)
        .filter(|(_, c)| {
            let Some(text) = c.error_text.as_deref() else {
                return true;
            };
            let found = messages::classify_all(text);
            found.is_empty()
                || found
                    .iter()
                    .any(|m| NETWORK_SUBSYSTEMS.contains(&m.entry.subsystem.as_str()))
        })
        .map(|(i, _)| (p, i))
        .collect()
}

/// Per machine, its processes (machine key → processes), and one process per machine whose
/// host facts were recorded.
fn machines(job: &JobModel) -> (BTreeMap<&str, Vec<usize>>, Vec<usize>) {
    let mut all: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let mut one = Vec::new();
    for (p, pm) in job.processes.iter().enumerate() {
        let list = all.entry(pm.machine()).or_default();
        let first_with_facts =
            pm.host_facts.is_some() && !list.iter().any(|&q| job.processes[q].host_facts.is_some());
        list.push(p);
        if first_with_facts {
            one.push(p);
        }
    }
    (all, one)
}

/// The hosts in the minority of `groups` (value → hosts): the hosts whose value most hosts do not
/// share; every host when no value is held by more hosts than another.
fn odd_hosts<K: Ord>(groups: &BTreeMap<K, Vec<usize>>) -> Vec<usize> {
    let most = groups.values().map(Vec::len).max().unwrap_or(0);
    let leaders = groups.values().filter(|v| v.len() == most).count();
    if leaders > 1 {
        return groups.values().flatten().copied().collect();
    }
    groups
        .values()
        .filter(|v| v.len() < most)
        .flatten()
        .copied()
        .collect()
}

/// The processes of the machines of `hosts` (each a process standing for its machine).
fn processes_of(job: &JobModel, all: &BTreeMap<&str, Vec<usize>>, hosts: &[usize]) -> Vec<usize> {
    let mut out: Vec<usize> = hosts
        .iter()
        .flat_map(|&h| all[job.processes[h].machine()].iter().copied())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// A violation over `hosts` (one process each): names the processes of `odd`, reaches those of
/// every host, explains their network failures; None when none of them failed that way.
fn violation(
    job: &JobModel,
    all: &BTreeMap<&str, Vec<usize>>,
    inv: &'static Invariant,
    title: String,
    hosts: &[usize],
    odd: &[usize],
) -> Option<Violation> {
    let reach = processes_of(job, all, hosts);
    let calls: Vec<(usize, usize)> = reach
        .iter()
        .flat_map(|&p| network_failures(job, p))
        .collect();
    if calls.is_empty() {
        return None;
    }
    Some(
        Violation::new(inv, title, processes_of(job, all, odd))
            .reaching(Scope::Host, reach)
            .explaining(calls)
            .confidence(Confidence::Medium),
    )
}

/// A host's interface on one network: (the process standing for the host, interface, MTU).
type OnNetwork = (usize, String, u32);

/// The GID an index selects: its address and its type (`RoCE v2`).
type SelectedGid = (IpAddr, Option<String>);

fn link_mtu_agrees(job: &JobModel, _: &Story) -> Vec<Violation> {
    let (all, hosts) = machines(job);
    if hosts.len() < 2 {
        return Vec::new();
    }
    // Network (address masked to its prefix, prefix) → (host, interface, MTU), one per host.
    let mut networks: BTreeMap<(IpAddr, u8), Vec<OnNetwork>> = BTreeMap::new();
    for &h in &hosts {
        let Some(ifs) = job.processes[h]
            .host_facts
            .as_ref()
            .and_then(|f| f.netifs.as_ref())
        else {
            continue;
        };
        let mtu_of = |name: &str| ifs.iter().find(|i| i.name == name).and_then(|i| i.mtu);
        for a in host_addresses(job, h) {
            // A bridge or host-side veth exists only inside its host (`knowledge/sockets.toml`):
            // no link to another host runs through it.
            if a.loopback || !a.up || crate::knowledge::sockets::local_only_interface(a.interface) {
                continue;
            }
            let Some(mtu) = mtu_of(a.interface) else {
                continue;
            };
            // Link-local addresses name no network between hosts (every link has fe80::/64).
            if is_link_local(&a.addr) {
                continue;
            }
            let key = (masked(&a.addr, a.prefix), a.prefix);
            let on = networks.entry(key).or_default();
            if !on.iter().any(|(q, ..)| *q == h) {
                on.push((h, a.interface.to_owned(), mtu));
            }
        }
    }
    let mut out = Vec::new();
    // One violation per set of interfaces (an IPv4 and an IPv6 network on the same NICs are
    // one link).
    let mut told: BTreeSet<Vec<(usize, String)>> = BTreeSet::new();
    for ((net, prefix), on) in networks.iter().filter(|(_, on)| on.len() >= 2) {
        let sides: Vec<(usize, String)> = on.iter().map(|(h, i, _)| (*h, i.clone())).collect();
        let mut by_mtu: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (h, _, mtu) in on {
            by_mtu.entry(*mtu).or_default().push(*h);
        }
        if by_mtu.len() < 2 || !told.insert(sides) {
            continue;
        }
        let hs: Vec<usize> = on.iter().map(|x| x.0).collect();
        let odd = odd_hosts(&by_mtu);
        let sides = on
            .iter()
            .map(|(h, name, mtu)| format!("{} `{name}` {mtu}", job.processes[*h].host))
            .collect::<Vec<_>>()
            .join(", ");
        let title = format!(
            "the hosts' shared network {net}/{prefix} has {} MTUs ({sides}): packets one host sends at its MTU do not fit the other's, and NCCL's connections between them fail or stall",
            by_mtu.len()
        );
        let Some(mut v) = violation(job, &all, &LINK_MTU_AGREES, title, &hs, &odd) else {
            continue;
        };
        for (h, name, mtu) in on {
            v = v.fact(
                Evidence::new(
                    EvidenceKind::Host,
                    format!("`{name}` in {net}/{prefix}: MTU {mtu}"),
                )
                .value("interface", name)
                .value("network", format!("{net}/{prefix}"))
                .value("mtu", *mtu)
                .of_all(job, &all[job.processes[*h].machine()]),
            );
        }
        out.push(v);
    }
    out
}

/// An IPv6 link-local address (fe80::/10): valid on one link only.
fn is_link_local(a: &IpAddr) -> bool {
    matches!(a, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

/// The GID a host's RoCE ports have at `index`: (its address, its type), from the first active
/// Ethernet port that has one.
fn selected_gid(job: &JobModel, h: usize, index: u32) -> Option<SelectedGid> {
    let facts = job.processes[h].host_facts.as_ref()?;
    facts
        .ib_ports
        .iter()
        .filter(|p| is_roce(p))
        .filter(|p| p.state.as_deref().is_none_or(|s| s.contains("ACTIVE")))
        .find_map(|p| {
            let g = p.gids.iter().find(|g| g.index == index)?;
            let v6: Ipv6Addr = g.gid.parse().ok()?;
            let addr = match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            };
            Some((addr, g.kind.clone()))
        })
}

fn gid_index_selects_alike(job: &JobModel, _: &Story) -> Vec<Violation> {
    let (all, hosts) = machines(job);
    // One global index: the value the hosts' processes were given, when they agree.
    let indices: BTreeSet<&str> = hosts
        .iter()
        .filter_map(|&h| job.processes[h].env_var("NCCL_IB_GID_INDEX"))
        .collect();
    let [index] = indices.into_iter().collect::<Vec<_>>()[..] else {
        return Vec::new();
    };
    let Ok(index) = index.trim().parse::<u32>() else {
        return Vec::new();
    };
    // Hosts with RoCE ports: what the index selects on each (None: nothing at that index).
    let roce: Vec<(usize, Option<SelectedGid>)> = hosts
        .iter()
        .filter(|&&h| {
            job.processes[h]
                .host_facts
                .as_ref()
                .is_some_and(|f| f.ib_ports.iter().any(is_roce))
        })
        .map(|&h| (h, selected_gid(job, h, index)))
        .collect();
    if roce.len() < 2 {
        return Vec::new();
    }
    // Networks every RoCE host has an address in (its interfaces' subnets).
    let subnets = |h: usize| -> Vec<(IpAddr, u8)> {
        host_addresses(job, h)
            .into_iter()
            .filter(|a| !a.loopback && a.up && !is_link_local(&a.addr))
            .map(|a| (a.addr, a.prefix))
            .collect()
    };
    let mut shared: Vec<(IpAddr, u8)> = subnets(roce[0].0)
        .into_iter()
        .filter(|(a, prefix)| {
            roce[1..]
                .iter()
                .all(|(h, _)| subnets(*h).iter().any(|(b, _)| same_subnet(a, b, *prefix)))
        })
        .map(|(a, prefix)| (masked(&a, prefix), prefix))
        .collect();
    shared.sort_unstable();
    shared.dedup();
    // Per host, what is wrong with its selection (None: it fits).
    let kinds: BTreeMap<Option<String>, usize> = roce
        .iter()
        .filter_map(|(_, g)| g.as_ref().map(|g| g.1.clone()))
        .fold(BTreeMap::new(), |mut m, k| {
            *m.entry(k).or_default() += 1;
            m
        });
    let usual_kind = kinds
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(k, _)| k.clone());
    let mut odd: BTreeMap<usize, String> = BTreeMap::new();
    for (h, g) in &roce {
        let problem = match g {
            None => Some(format!("has no GID at index {index}")),
            Some((addr, _)) if is_link_local(addr) => Some(format!(
                "selects the link-local GID {addr}, not routable between hosts"
            )),
            Some((addr, _))
                if !shared.is_empty() && !shared.iter().any(|(s, p)| same_subnet(s, addr, *p)) =>
            {
                Some(format!(
                    "selects {addr}, outside the network the hosts share ({})",
                    shared
                        .iter()
                        .map(|(s, p)| format!("{s}/{p}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }
            Some((addr, kind)) if kinds.len() > 1 && Some(kind) != usual_kind.as_ref() => {
                Some(format!(
                    "selects {addr} of type {}, while the other hosts' GID at that index is {}",
                    kind.as_deref().unwrap_or("unknown"),
                    usual_kind
                        .clone()
                        .flatten()
                        .unwrap_or_else(|| "unknown".into())
                ))
            }
            _ => None,
        };
        if let Some(p) = problem {
            odd.insert(*h, p);
        }
    }
    // Alike everywhere, even if wrong everywhere (catalog C12 tells a uniformly wrong index).
    if odd.is_empty() || odd.len() == roce.len() {
        return Vec::new();
    }
    let hs: Vec<usize> = roce.iter().map(|r| r.0).collect();
    let bad: Vec<usize> = odd.keys().copied().collect();
    let title = format!(
        "one NCCL_IB_GID_INDEX={index} does not select a GID of the hosts' shared network on every host: on {} it {}",
        name_processes(job, &processes_of(job, &all, &bad)),
        odd.values().next().cloned().unwrap_or_default()
    );
    let Some(mut v) = violation(job, &all, &GID_INDEX_SELECTS_ALIKE, title, &hs, &bad) else {
        return Vec::new();
    };
    for (h, g) in &roce {
        let text = match g {
            Some((addr, kind)) => format!(
                "GID index {index}: {addr} ({})",
                kind.as_deref().unwrap_or("type not recorded")
            ),
            None => format!("GID index {index}: none"),
        };
        v = v.fact(
            Evidence::new(EvidenceKind::Host, text)
                .value("gid_index", index)
                .value("gid", g.as_ref().map(|g| g.0.to_string()))
                .of_all(job, &all[job.processes[*h].machine()]),
        );
    }
    vec![v]
}
