//! Endpoints: every address a recorded text names resolves to a process, host and interface of
//! this job (or is named as not part of it), and the interfaces of each host make the route
//! NCCL uses unambiguous. Addresses are read and resolved by `model::endpoints`, as every rule
//! reads them.

use super::contract::{Family, Invariant, Scope, Violation};
use crate::finding::words::name_processes;
use crate::finding::{Evidence, EvidenceKind};
use crate::knowledge::{bugs, messages};
use crate::model::endpoints::{
    address_kind, call_uid_root, endpoints_in, host_addresses, same_subnet, AddressKind,
};
use crate::model::JobModel;
use crate::story::{comms_of, Story};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

pub static PEER_ADDRESS_IN_JOB: Invariant = Invariant {
    id: "peer-address-in-job",
    family: Family::Endpoints,
    statement: "every address NCCL talks to or hears from is an address of a host of this job",
    reads: &["addresses in recorded error texts", "every host's interfaces and addresses", "the uniqueIds' root addresses"],
    remedy: "Find what owns that address: a client outside the job (a scanner, a health probe) connecting to NCCL's ports, or a wrong address handed to the job (MASTER_ADDR, NCCL_COMM_ID, a uniqueId of another job).",
    source: "NCCL's bootstrap: every rank connects only to the root named by the uniqueId and to the listening addresses its peers published (NVIDIA/nccl src/bootstrap.cc); NVIDIA/nccl#1612",
    standalone: false,
    check: peer_address_in_job,
};

pub static ROUTE_UNAMBIGUOUS: Invariant = Invariant {
    id: "route-unambiguous",
    family: Family::Endpoints,
    statement: "no host has two interfaces in one subnet, so the kernel's route to a peer is the interface NCCL chose",
    reads: &["every host's interfaces, addresses and prefix lengths", "NCCL_SOCKET_IFNAME", "addresses in recorded error texts"],
    remedy: "Give each interface its own subnet (e.g. a /24 each instead of one shared /20) or set route metrics so the interface NCCL uses wins on every node: NCCL binds its listeners to the interface it chose but its outgoing connections follow the kernel's routes.",
    source: "NVIDIA/nccl#1581 (maintainer: outgoing connections follow the routing table; two NICs in one subnet with a different route order per node)",
    standalone: false,
    check: route_unambiguous,
};

/// Whether every machine of the job recorded its interfaces: only then does "no host has this
/// address" mean "not part of the job".
fn every_machine_recorded(job: &JobModel) -> bool {
    let mut any = false;
    for (p, pm) in job.processes.iter().enumerate() {
        if !pm.has_shim {
            continue;
        }
        if host_addresses(job, p).is_empty() {
            return false;
        }
        any = true;
    }
    any
}

/// `node-a 10.0.0.1, node-b 10.0.0.2`: the job's hosts and their routable addresses.
fn job_addresses(job: &JobModel) -> String {
    let mut by_host: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in 0..job.processes.len() {
        for h in host_addresses(job, p) {
            if !h.loopback && address_kind(&h.addr) == AddressKind::Other {
                by_host
                    .entry(job.processes[p].host.clone())
                    .or_default()
                    .insert(h.addr.to_string());
            }
        }
    }
    by_host
        .into_iter()
        .map(|(h, a)| format!("{h} {}", a.into_iter().collect::<Vec<_>>().join(" ")))
        .collect::<Vec<_>>()
        .join(", ")
}

fn peer_address_in_job(job: &JobModel, _: &Story) -> Vec<Violation> {
    if !every_machine_recorded(job) {
        return Vec::new();
    }
    // Every address a recorded host has, gathered once (a lookup per address in the texts was
    // a scan of every process: ranks x failures).
    let owned: std::collections::HashSet<IpAddr> = (0..job.processes.len())
        .flat_map(|p| host_addresses(job, p).into_iter().map(|h| h.addr))
        .collect();
    let roots: BTreeSet<IpAddr> = job
        .processes
        .iter()
        .flat_map(|pm| pm.calls.iter())
        .filter_map(call_uid_root)
        .map(|e| e.addr)
        .collect();
    // address → (process, call index) of the first failure naming it, per process.
    let mut named: BTreeMap<IpAddr, Vec<(usize, usize)>> = BTreeMap::new();
    for (p, pm) in job.processes.iter().enumerate() {
        let mut seen = BTreeSet::new();
        for (i, c) in pm.error_calls() {
            let Some(text) = c.error_text.as_deref() else {
                continue;
            };
            for e in endpoints_in(text) {
                if address_kind(&e.addr) != AddressKind::Other
                    || roots.contains(&e.addr)
                    || owned.contains(&e.addr)
                    || !seen.insert(e.addr)
                {
                    continue;
                }
                named.entry(e.addr).or_default().push((p, i));
            }
        }
    }
    let mut out = Vec::new();
    for (addr, uses) in named {
        let ps: Vec<usize> = uses.iter().map(|u| u.0).collect();
        let (p0, i0) = uses[0];
        let c = &job.processes[p0].calls[i0];
        // NCCL's word that the other end closed or reset the connection: something at that
        // address connected to (or accepted from) this rank and went away.
        let inbound = c
            .error_text
            .as_deref()
            .and_then(messages::classify)
            .is_some_and(|m| m.entry.role.is_consequence());
        let hosts = job_addresses(job);
        let (title, remedy) = if inbound {
            let change = bugs::change("foreign-connection-fails-bootstrap");
            let affected = job.processes[p0]
                .nccl_release()
                .is_some_and(|v| change.applies_to(v))
                && change.symptoms.call_admitted(&c.name);
            (
                format!(
                    "{}'s peer {addr} is not part of this job (no host of the job has that address: {hosts}): a client outside the job connected to NCCL's port and closed the connection{}",
                    name_processes(job, &ps),
                    if affected {
                        format!(
                            ", which NCCL {} treats as a fatal peer error",
                            job.processes[p0].nccl_version_text().unwrap_or_default()
                        )
                    } else {
                        String::new()
                    }
                ),
                if affected {
                    change.remedy.clone()
                } else {
                    format!("Find what at {addr} connects to the job's ports and exempt them from it (a scanner or health probe: network policy, allowlist), or bind NCCL to a private interface with NCCL_SOCKET_IFNAME.")
                },
            )
        } else {
            (
                format!(
                    "{} talked to {addr}, which is not part of this job (no host of the job has that address: {hosts}): a wrong or stale address",
                    name_processes(job, &ps)
                ),
                format!("Point the job at an address of one of its hosts: check MASTER_ADDR, NCCL_COMM_ID and how the uniqueId reached this rank ({addr} belongs to no host of the job)."),
            )
        };
        let reach: BTreeSet<usize> = {
            let mine: BTreeSet<u64> = ps.iter().flat_map(|&p| comms_of(job, p)).collect();
            (0..job.processes.len())
                .filter(|&q| !comms_of(job, q).is_disjoint(&mine))
                .collect()
        };
        let mut v = Violation::new(&PEER_ADDRESS_IN_JOB, title, ps.clone())
            .reaching(Scope::Communicator, reach)
            .remedy(remedy);
        for &(p, i) in &uses {
            v = v.fact(Evidence::call(&job.processes[p].calls[i]).of(job, p));
        }
        v = v.fact(
            Evidence::new(
                EvidenceKind::Reference,
                format!("{addr} resolves to no process, host or interface of this job; the job's addresses: {hosts}"),
            )
            .value("address", addr.to_string())
            .value("status", "absent"),
        );
        out.push(v);
    }
    out
}

/// One host's two interfaces whose subnets overlap.
struct Overlap {
    machine: String,
    host: String,
    a: (String, IpAddr, u8),
    b: (String, IpAddr, u8),
}

fn overlaps(job: &JobModel) -> Vec<Overlap> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for (p, pm) in job.processes.iter().enumerate() {
        if !seen.insert(pm.machine().to_owned()) {
            continue;
        }
        let addrs: Vec<_> = host_addresses(job, p)
            .into_iter()
            .filter(|h| h.up && !h.loopback && address_kind(&h.addr) == AddressKind::Other)
            .collect();
        for (i, a) in addrs.iter().enumerate() {
            for b in &addrs[i + 1..] {
                if a.interface != b.interface
                    && same_subnet(&a.addr, &b.addr, a.prefix.min(b.prefix))
                {
                    out.push(Overlap {
                        machine: pm.machine().to_owned(),
                        host: pm.host.clone(),
                        a: (a.interface.to_owned(), a.addr, a.prefix),
                        b: (b.interface.to_owned(), b.addr, b.prefix),
                    });
                }
            }
        }
    }
    out
}

fn route_unambiguous(job: &JobModel, _: &Story) -> Vec<Violation> {
    let ov = overlaps(job);
    if ov.is_empty() {
        return Vec::new();
    }
    let ambiguous: BTreeMap<IpAddr, (&Overlap, &str)> = ov
        .iter()
        .flat_map(|o| [(o.a.1, (o, o.a.0.as_str())), (o.b.1, (o, o.b.0.as_str()))])
        .collect();
    // It matters where a failure names an address on one of those interfaces.
    let mut named: Vec<(usize, usize, IpAddr)> = Vec::new();
    for (p, pm) in job.processes.iter().enumerate() {
        for (i, c) in pm.error_calls() {
            for e in c
                .error_text
                .as_deref()
                .map(endpoints_in)
                .unwrap_or_default()
            {
                if ambiguous.contains_key(&e.addr) {
                    named.push((p, i, e.addr));
                }
            }
        }
    }
    if named.is_empty() {
        return Vec::new();
    }
    let machines: BTreeSet<&str> = ov.iter().map(|o| o.machine.as_str()).collect();
    let on_them: Vec<usize> = (0..job.processes.len())
        .filter(|&p| machines.contains(job.processes[p].machine()))
        .collect();
    let ifname = job
        .processes
        .iter()
        .find_map(|pm| pm.env_var("NCCL_SOCKET_IFNAME"))
        .map(str::to_owned);
    let hosts: BTreeSet<&str> = ov.iter().map(|o| o.host.as_str()).collect();
    let o0 = &ov[0];
    let chosen_note = match &ifname {
        Some(v) => format!(" than the one NCCL_SOCKET_IFNAME={v} chose"),
        None => " than the one NCCL chose".into(),
    };
    let title = format!(
        "{} {} two interfaces in one subnet ({} {}/{} and {} {}/{}): the route to a peer is ambiguous, so NCCL's connections leave from or arrive at another interface{chosen_note}",
        hosts.iter().copied().collect::<Vec<_>>().join(" and "),
        if hosts.len() == 1 { "has" } else { "each have" },
        o0.a.0,
        o0.a.1,
        o0.a.2,
        o0.b.0,
        o0.b.1,
        o0.b.2
    );
    let failing: BTreeSet<usize> = named.iter().map(|n| n.0).collect();
    let mut v = Violation::new(&ROUTE_UNAMBIGUOUS, title, on_them.clone())
        .reaching(Scope::Host, on_them.iter().copied().chain(failing))
        .confidence(crate::finding::Confidence::Medium);
    for o in &ov {
        v = v.fact(
            Evidence::new(
                EvidenceKind::Host,
                format!(
                    "{}: {} {}/{} and {} {}/{} share a subnet",
                    o.host, o.a.0, o.a.1, o.a.2, o.b.0, o.b.1, o.b.2
                ),
            )
            .on_host(&o.host),
        );
    }
    for (p, i, addr) in named.iter().take(4) {
        let (o, iface) = ambiguous[addr];
        let pm = &job.processes[*p];
        v = v.fact(
            Evidence::new(
                EvidenceKind::Reference,
                format!(
                    "{} names {addr}, interface {iface} of {}{}",
                    pm.calls[*i].name,
                    o.host,
                    match &ifname {
                        Some(n) if n != iface => format!(", not {n} named by NCCL_SOCKET_IFNAME"),
                        _ => String::new(),
                    }
                ),
            )
            .value("address", addr.to_string())
            .value("interface", iface)
            .of(job, *p),
        );
    }
    vec![v]
}
