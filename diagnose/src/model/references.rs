//! Identifiers named in error texts and launcher variables, resolved against the recorded facts
//! of every host: a PCI bus id is a GPU of some host used by some rank, a peer rank is a process
//! on some host that did (or did not) fail first, an HCA or interface is present on the printing
//! host or not, a rank is inside the communicator or beyond its nranks.
//!
//! The forms tokens are printed in come from `knowledge/references.toml`
//! ([`crate::knowledge::references`]); this module reads them out of any text ([`references_in`])
//! and answers what each one is in this job ([`resolve`]). Rules turn the answers into evidence
//! and, where an answer changes the diagnosis (a device the host does not have, a rank that does
//! not exist), into findings (`rules/cross_reference.rs`). Addresses and the uniqueId's
//! root are resolved by [`super::endpoints`].

use super::{FailureWhat, JobModel, Membership, ProcessModel};
use crate::knowledge::references::{self as know, ListForm, RefKind, ValueForm};
use crate::knowledge::visible_devices::{Device, VisibleDevices};
use std::collections::BTreeMap;

/// The identifier a token names, normalized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefValue {
    Number(u64),
    /// A PCI address in canonical form `dddd:bb:dd.f` (lower case, 4-digit domain).
    Pci(String),
    Name {
        name: String,
        port: Option<u32>,
    },
}

/// One identifier found in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub kind: RefKind,
    pub value: RefValue,
    /// As written in the text (`busId 1a000`, `mlx5_2:1`).
    pub written: String,
}

/// `0000:1a:00.0` from NCCL's int64 form (`1a000`): the hex digits of the text form without
/// its separators (NCCL's busIdToInt64).
pub fn pci_from_int(hex: &str) -> Option<String> {
    let v = u64::from_str_radix(hex, 16).ok()?;
    Some(format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        v >> 20,
        (v >> 12) & 0xff,
        (v >> 4) & 0xff,
        v & 0xf
    ))
}

/// `0000:1a:00.0` from any text form (`00000000:1A:00.0`, `0000:1a:00.0`).
pub fn pci_canonical(text: &str) -> Option<String> {
    let (domain, rest) = text.trim().split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let n = |s: &str| u64::from_str_radix(s, 16).ok();
    Some(format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        n(domain)?,
        n(bus)?,
        n(dev)?,
        n(func)?
    ))
}

/// Every identifier in `text`, in order of appearance; a span claimed by an earlier kind or
/// form of the knowledge file is not read twice.
pub fn references_in(text: &str) -> Vec<Reference> {
    let mut claimed: Vec<(usize, usize)> = Vec::new();
    let mut found: Vec<(usize, Reference)> = Vec::new();
    for form in know::forms() {
        for caps in form.regex.captures_iter(text) {
            let Some(v) = caps.name("v") else { continue };
            if claimed.iter().any(|&(s, e)| v.start() < e && s < v.end()) {
                continue;
            }
            let value = match form.value {
                ValueForm::Decimal => v.as_str().parse().ok().map(RefValue::Number),
                ValueForm::BusInt => pci_from_int(v.as_str()).map(RefValue::Pci),
                ValueForm::BusText => pci_canonical(v.as_str()).map(RefValue::Pci),
                ValueForm::Name => Some(RefValue::Name {
                    name: v.as_str().to_owned(),
                    port: caps.name("port").and_then(|p| p.as_str().parse().ok()),
                }),
            };
            let Some(value) = value else { continue };
            let whole = caps
                .name("w")
                .or_else(|| caps.get(0))
                .map_or(v.range(), |m| m.range());
            claimed.push((v.start(), v.end()));
            let r = Reference {
                kind: form.kind,
                value,
                written: text[whole].trim().to_owned(),
            };
            if !found
                .iter()
                .any(|(_, x)| x.kind == r.kind && x.value == r.value)
            {
                found.push((v.start(), r));
            }
        }
    }
    found.sort_by_key(|(at, _)| *at);
    found.into_iter().map(|(_, r)| r).collect()
}

/// What resolving a reference found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// It is a known thing of this job (a GPU, a process, a present device).
    Resolved,
    /// The host it was named on does not have it, or no recorded host does.
    Absent,
    /// A number beyond the range it must be in (rank ≥ nranks, ordinal ≥ visible GPUs).
    OutOfRange,
}

impl Status {
    pub fn id(self) -> &'static str {
        match self {
            Status::Resolved => "resolved",
            Status::Absent => "absent",
            Status::OutOfRange => "out_of_range",
        }
    }
}

/// A reference and what it is in this job.
#[derive(Debug, Clone)]
pub struct Resolution {
    pub reference: Reference,
    pub status: Status,
    /// The fact in words, without the subject (`busId 1a000 (0000:1a:00.0) is GPU 2 on node1,
    /// used by rank 5 (node1 pid 123)`).
    pub fact: String,
    /// The processes it resolved to (the owner of a GPU, the peer rank).
    pub processes: Vec<usize>,
    /// The named rank's process had failed or died before the naming process's failure.
    pub peer_failed_first: bool,
    /// Structured values for evidence.
    pub values: BTreeMap<String, serde_json::Value>,
}

/// The communicator a call of process `p` ran in (`comm` pointer), or its world.
fn membership_of(job: &JobModel, p: usize, comm: u64) -> Option<&Membership> {
    let pm = &job.processes[p];
    pm.memberships
        .iter()
        .find(|m| comm != 0 && m.comm_ptr == comm)
        .or_else(|| pm.world())
}

/// The processes on `p`'s machine.
fn same_machine(job: &JobModel, p: usize) -> Vec<usize> {
    let m = job.processes[p].machine();
    (0..job.processes.len())
        .filter(|&q| job.processes[q].machine() == m)
        .collect()
}

/// When process `q` first failed or died: its first recorded failure, else its last sign of
/// life when it ended without a clean exit.
fn ended_badly_at(job: &JobModel, q: usize) -> Option<u64> {
    job.failures
        .iter()
        .filter(|f| f.process == q)
        .map(|f| f.t)
        .min()
        .or_else(|| {
            let pm = &job.processes[q];
            pm.died().then_some(pm.last_t)
        })
}

/// What process `q`'s dump shows about its end, in a few words.
fn fate(job: &JobModel, q: usize) -> String {
    let pm = &job.processes[q];
    if let Some(f) = job.failures.iter().find(|f| f.process == q) {
        return match f.what {
            FailureWhat::Call(i) | FailureWhat::AsyncError(i) => {
                format!("its dump shows {}", pm.calls[i].describe())
            }
            FailureWhat::Signal(s) => format!("its dump shows fatal signal {s}"),
            FailureWhat::Died => "its dump ends without a clean exit".to_owned(),
        };
    }
    if pm.clean_exit {
        "its dump shows a clean exit".to_owned()
    } else if pm.died() {
        "its dump ends without a clean exit".to_owned()
    } else {
        "its dump shows no failure".to_owned()
    }
}

fn names_list(names: &[String]) -> String {
    if names.is_empty() {
        "none recorded".to_owned()
    } else {
        names.join(", ")
    }
}

impl Resolution {
    /// A structured value for evidence.
    fn set(&mut self, k: &str, v: serde_json::Value) {
        self.values.insert(k.to_owned(), v);
    }
}

/// Resolves `r`, named by process `p` in a call on communicator pointer `comm` that failed at
/// time `t`. None when the facts needed were not recorded (nothing can be said either way).
pub fn resolve(job: &JobModel, p: usize, comm: u64, t: u64, r: &Reference) -> Option<Resolution> {
    let mut out = Resolution {
        reference: r.clone(),
        status: Status::Resolved,
        fact: String::new(),
        processes: Vec::new(),
        peer_failed_first: false,
        values: BTreeMap::new(),
    };
    let me = &job.processes[p];
    out.set("reference_kind", r.kind.id().into());
    out.set("written", r.written.clone().into());
    match (&r.kind, &r.value) {
        (RefKind::PciDevice, RefValue::Pci(addr)) => resolve_pci_device(job, p, r, addr, &mut out)?,
        (RefKind::CudaDevice, RefValue::Number(n)) => resolve_cuda_device(job, p, *n, &mut out)?,
        (RefKind::Rank | RefKind::PeerRank, RefValue::Number(n)) => {
            resolve_rank(job, p, comm, t, r, *n, &mut out)?
        }
        (RefKind::LocalRank, RefValue::Number(n)) => {
            resolve_local_rank(job, p, comm, t, *n, &mut out)?
        }
        (RefKind::Nranks, RefValue::Number(n)) => resolve_nranks(job, p, comm, *n, &mut out)?,
        (RefKind::IbDevice, RefValue::Name { name, port }) => {
            resolve_ib_device(me, name, *port, &mut out)?
        }
        (RefKind::NetInterface, RefValue::Name { name, .. }) => {
            resolve_net_interface(me, name, &mut out)?
        }
        _ => return None,
    }
    let status = out.status.id();
    out.set("status", status.into());
    Some(out)
}

/// Whether a recorded bus id (any text form) is the canonical `addr`.
fn is_bus(bus_id: Option<&str>, addr: &str) -> bool {
    bus_id.and_then(pci_canonical).as_deref() == Some(addr)
}

/// The processes whose GPU has PCI address `addr`.
fn gpu_users(job: &JobModel, addr: &str) -> Vec<usize> {
    (0..job.processes.len())
        .filter(|&q| {
            job.processes[q]
                .gpus
                .iter()
                .any(|g| is_bus(g.pci_bus_id.as_deref(), addr))
        })
        .collect()
}

/// The hosts whose driver lists a GPU at PCI address `addr`, sorted.
fn hosts_listing_gpu(job: &JobModel, addr: &str) -> Vec<String> {
    let mut hosts: Vec<String> = job
        .processes
        .iter()
        .filter(|q| {
            q.host_facts.as_ref().is_some_and(|h| {
                h.driver_gpus
                    .iter()
                    .any(|g| is_bus(Some(g.bus_id.as_str()), addr))
            })
        })
        .map(|q| q.host.clone())
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// A PCI address: the GPU of the processes that used it (on the naming process's machine
/// when it has one), else a GPU some host's driver lists, else absent when any GPU was
/// recorded.
fn resolve_pci_device(
    job: &JobModel,
    p: usize,
    r: &Reference,
    addr: &str,
    out: &mut Resolution,
) -> Option<()> {
    let me = &job.processes[p];
    out.set("pci_bus_id", addr.to_owned().into());
    let users = gpu_users(job, addr);
    let listed_on = hosts_listing_gpu(job, addr);
    let anything_recorded = job.processes.iter().any(|q| {
        q.gpus.iter().any(|g| g.pci_bus_id.is_some())
            || q.host_facts
                .as_ref()
                .is_some_and(|h| !h.driver_gpus.is_empty())
    });
    // A bus id is only unique within one machine: prefer the naming process's.
    let mine: Vec<usize> = users
        .iter()
        .copied()
        .filter(|&q| job.processes[q].machine() == me.machine())
        .collect();
    let owners = if mine.is_empty() { users } else { mine };
    if let Some(&first) = owners.first() {
        let o = &job.processes[first];
        let ordinal = o
            .gpus
            .iter()
            .find(|g| is_bus(g.pci_bus_id.as_deref(), addr))
            .and_then(|g| g.ordinal);
        let who: Vec<String> = owners.iter().map(|&q| job.processes[q].label()).collect();
        out.fact = format!(
            "{} ({addr}) is {} on {}, used by {}",
            r.written,
            ordinal.map_or("a GPU".to_owned(), |o| format!("CUDA device {o}")),
            o.host,
            who.join(", ")
        );
        out.set("host", o.host.clone().into());
        out.processes = owners;
    } else if !listed_on.is_empty() {
        out.fact = format!(
            "{} ({addr}) is a GPU of {} (driver list), used by no recorded process",
            r.written,
            listed_on.join(", ")
        );
        out.set("host", listed_on.join(",").into());
    } else if anything_recorded {
        out.status = Status::Absent;
        out.fact = format!("no recorded host has PCI device {addr} ({})", r.written);
    } else {
        return None;
    }
    Some(())
}

/// A CUDA device ordinal of the naming process: beyond the GPUs it can see, or the physical
/// GPU it is (through `CUDA_VISIBLE_DEVICES`) and who else on the machine used it.
fn resolve_cuda_device(job: &JobModel, p: usize, n: u64, out: &mut Resolution) -> Option<()> {
    let me = &job.processes[p];
    out.set("cuda_device", n.into());
    let cvd = VisibleDevices::parse(me.env_var("CUDA_VISIBLE_DEVICES"));
    let installed = me
        .host_facts
        .as_ref()
        .map(|h| h.driver_gpus.len())
        .filter(|&k| k > 0);
    let visible = cvd.count(installed).or(installed);
    if let Some(v) = visible.filter(|&v| n as usize >= v) {
        out.status = Status::OutOfRange;
        out.set("visible_gpus", v.into());
        out.fact = format!(
            "CUDA device {n} named by the error is beyond the {v} GPU(s) {} can see ({})",
            me.label(),
            cvd.describe()
        );
        return Some(());
    }
    let physical = match cvd.device(n as usize) {
        Some(Device::Index(i)) => format!("physical GPU {i}"),
        Some(d) => d.to_string(),
        None if cvd.is_set() => return None,
        None => format!("physical GPU {n}"),
    };
    let sharing: Vec<usize> = same_machine(job, p)
        .into_iter()
        .filter(|&q| {
            let qm = &job.processes[q];
            qm.gpu().and_then(|g| g.ordinal) == Some(n as i64)
                && qm.env_var("CUDA_VISIBLE_DEVICES") == me.env_var("CUDA_VISIBLE_DEVICES")
        })
        .collect();
    let who: Vec<String> = sharing.iter().map(|&q| job.processes[q].label()).collect();
    out.fact = format!(
        "CUDA device {n} of {} is {physical}{}",
        me.label(),
        if who.is_empty() {
            String::new()
        } else {
            format!(", used by {}", who.join(", "))
        }
    );
    out.processes = sharing;
    Some(())
}

/// Whether process `q`, named by process `p`'s failure at `t`, had failed or died before it.
/// A peer that failed with the very text of this failure reports the same event: which of the
/// two wrote first says nothing.
fn peer_failed_first(job: &JobModel, p: usize, q: usize, t: u64) -> bool {
    let same_text = |x: usize| {
        job.failures
            .iter()
            .find(|f| f.process == x)
            .and_then(|f| match f.what {
                FailureWhat::Call(i) | FailureWhat::AsyncError(i) => {
                    job.processes[x].calls[i].error_text.clone()
                }
                _ => None,
            })
    };
    ended_badly_at(job, q).is_some_and(|e| e < t)
        && (same_text(q).is_none() || same_text(q) != same_text(p))
}

/// A rank (or peer) of the failing call's communicator: beyond its nranks, or the process
/// that holds it and how that one ended.
fn resolve_rank(
    job: &JobModel,
    p: usize,
    comm: u64,
    t: u64,
    r: &Reference,
    n: u64,
    out: &mut Resolution,
) -> Option<()> {
    let m = membership_of(job, p, comm)?;
    let view = job.comms.get(&m.comm_hash);
    let nranks = view.map_or(m.nranks, |v| v.nranks().max(m.nranks));
    let noun = if r.kind == RefKind::PeerRank {
        "peer"
    } else {
        "rank"
    };
    out.set("rank", n.into());
    out.set("nranks", nranks.into());
    out.set("comm", format!("{:#018x}", m.comm_hash).into());
    if n >= u64::from(nranks) {
        out.status = Status::OutOfRange;
        out.fact = format!(
            "{noun} {n} named by the error is >= nranks {nranks} of communicator {:#x}",
            m.comm_hash
        );
        return Some(());
    }
    let holders: Vec<usize> = view
        .and_then(|v| v.members.get(&(n as u32)))
        .cloned()
        .unwrap_or_default();
    match holders.first() {
        // The naming process itself: nothing to add.
        Some(&q) if q == p => return None,
        Some(&q) => {
            let qm = &job.processes[q];
            out.peer_failed_first = peer_failed_first(job, p, q, t);
            out.set("host", qm.host.clone().into());
            out.set("pid", qm.pid.into());
            let first = out.peer_failed_first;
            out.set("failed_first", first.into());
            out.fact = format!(
                "{noun} {n} is on host {} (pid {}) and {}{}",
                qm.host,
                qm.pid,
                fate(job, q),
                if out.peer_failed_first {
                    ", before this error"
                } else {
                    ""
                }
            );
            out.processes = vec![q];
        }
        None => {
            out.fact = format!("{noun} {n} of communicator {:#x} left no dump", m.comm_hash);
        }
    }
    Some(())
}

/// A local rank: the process of the naming process's machine that holds it in the failing
/// call's communicator, and how it ended.
fn resolve_local_rank(
    job: &JobModel,
    p: usize,
    comm: u64,
    t: u64,
    n: u64,
    out: &mut Resolution,
) -> Option<()> {
    let me = &job.processes[p];
    let m = membership_of(job, p, comm)?;
    let mut local: Vec<(u32, usize)> = same_machine(job, p)
        .into_iter()
        .filter_map(|q| {
            job.processes[q]
                .memberships
                .iter()
                .find(|x| x.comm_hash == m.comm_hash)
                .map(|x| (x.rank, q))
        })
        .collect();
    local.sort_unstable();
    local.dedup_by_key(|(r, _)| *r);
    out.set("local_rank", n.into());
    out.set("local_ranks", local.len().into());
    let &(rank, q) = local.get(n as usize)?;
    out.fact = format!(
        "local rank {n} on {} is rank {rank} (pid {}) and {}",
        me.host,
        job.processes[q].pid,
        fate(job, q)
    );
    out.peer_failed_first = q != p && ended_badly_at(job, q).is_some_and(|e| e < t);
    out.processes = vec![q];
    Some(())
}

/// A rank count other than the failing call's communicator's own.
fn resolve_nranks(job: &JobModel, p: usize, comm: u64, n: u64, out: &mut Resolution) -> Option<()> {
    let m = membership_of(job, p, comm)?;
    let seen = job.comms.get(&m.comm_hash).map_or(0, |v| v.members.len());
    // The count NCCL prints is the communicator's own: only a different one says something.
    if u64::from(m.nranks) == n {
        return None;
    }
    out.set("nranks_named", n.into());
    out.set("nranks", m.nranks.into());
    out.set("ranks_with_dumps", seen.into());
    out.fact = format!(
        "nranks {n} named by the error differs from communicator {:#x}'s {} ({seen} rank(s) recorded)",
        m.comm_hash, m.nranks
    );
    Some(())
}

/// An HCA (and port) named on process `me`'s host: present there (with its port's state), or
/// absent.
fn resolve_ib_device(
    me: &ProcessModel,
    name: &str,
    port: Option<u32>,
    out: &mut Resolution,
) -> Option<()> {
    let h = me.host_facts.as_ref()?;
    let mut present: Vec<String> = h.infiniband.clone();
    present.extend(h.ib_ports.iter().map(|x| x.device.clone()));
    present.sort();
    present.dedup();
    if present.is_empty() && h.dev_infiniband != Some(true) {
        // No HCA recorded at all: a device absent everywhere is still a fact, but only
        // when the recorder looked (host facts with an empty list).
    }
    out.set("device", name.to_owned().into());
    out.set("host", me.host.clone().into());
    if present.iter().any(|d| d == name) {
        let p_state = port.and_then(|pt| {
            h.ib_ports
                .iter()
                .find(|x| x.device == name && x.port == pt)
                .map(|x| {
                    format!(
                        "port {pt}: {}{}",
                        x.state.as_deref().unwrap_or("state not recorded"),
                        x.link_layer
                            .as_deref()
                            .map(|l| format!(", {l}"))
                            .unwrap_or_default()
                    )
                })
        });
        out.fact = format!(
            "{name} is an HCA of {}{}",
            me.host,
            p_state.map(|s| format!(" ({s})")).unwrap_or_default()
        );
    } else {
        out.status = Status::Absent;
        out.set("present", present.clone().into());
        out.fact = format!(
            "{name} is not present on {} (present: {})",
            me.host,
            names_list(&present)
        );
    }
    Some(())
}

/// A network interface named on process `me`'s host: present there (up or down, its
/// addresses), or absent.
fn resolve_net_interface(me: &ProcessModel, name: &str, out: &mut Resolution) -> Option<()> {
    let ifs = me.host_facts.as_ref()?.netifs.as_ref()?;
    out.set("interface", name.to_owned().into());
    out.set("host", me.host.clone().into());
    match ifs.iter().find(|i| i.name == name) {
        Some(i) => {
            out.fact = format!(
                "{name} is an interface of {} ({}{}{})",
                me.host,
                if i.up { "up" } else { "down" },
                if i.virtual_if { ", virtual" } else { "" },
                if i.addrs.is_empty() {
                    String::new()
                } else {
                    format!(", {}", i.addrs.join(" "))
                }
            );
        }
        None => {
            let present: Vec<String> = ifs.iter().map(|i| i.name.clone()).collect();
            out.status = Status::Absent;
            out.set("present", present.clone().into());
            out.fact = format!(
                "interface {name} is not present on {} (present: {})",
                me.host,
                names_list(&present)
            );
        }
    }
    Some(())
}

/// A variable (`NCCL_IB_HCA=mlx5_2:1`) that names devices process `p`'s host does not have:
/// one resolution per entry that matches nothing present. Exclusion lists (`^...`) name
/// what not to use and are not checked.
pub fn absent_in_variables(job: &JobModel, p: usize) -> Vec<(String, String, Resolution)> {
    let me = &job.processes[p];
    let mut out = Vec::new();
    for var in know::variables() {
        let Some(value) = me.env_var(&var.name) else {
            continue;
        };
        let (exact, list) = match var.list {
            ListForm::NcclPrefixList if value.starts_with('^') => continue,
            ListForm::NcclPrefixList => match value.strip_prefix('=') {
                Some(rest) => (true, rest),
                None => (false, value),
            },
            ListForm::CommaList => (true, value),
        };
        let present: Option<Vec<String>> = me.host_facts.as_ref().and_then(|h| match var.kind {
            RefKind::IbDevice => {
                let mut v = h.infiniband.clone();
                v.extend(h.ib_ports.iter().map(|x| x.device.clone()));
                v.sort();
                v.dedup();
                Some(v)
            }
            RefKind::NetInterface => h
                .netifs
                .as_ref()
                .map(|ifs| ifs.iter().map(|i| i.name.clone()).collect()),
            _ => None,
        });
        let Some(present) = present else { continue };
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let name = entry.split(':').next().unwrap_or(entry);
            let matches = present.iter().any(|d| {
                if exact {
                    d == name
                } else {
                    d.starts_with(name)
                }
            });
            if matches {
                continue;
            }
            let mut values = BTreeMap::new();
            values.insert("reference_kind".into(), var.kind.id().into());
            values.insert("variable".into(), var.name.clone().into());
            values.insert("value".into(), value.into());
            values.insert("device".into(), name.into());
            values.insert("present".into(), present.clone().into());
            values.insert("status".into(), Status::Absent.id().into());
            let fact = format!(
                "{}={value} names {name}, which {} does not have (present: {})",
                var.name,
                me.host,
                names_list(&present)
            );
            out.push((
                var.name.clone(),
                value.to_owned(),
                Resolution {
                    reference: Reference {
                        kind: var.kind,
                        value: RefValue::Name {
                            name: name.to_owned(),
                            port: None,
                        },
                        written: format!("{}={value}", var.name),
                    },
                    status: Status::Absent,
                    fact,
                    processes: Vec::new(),
                    peer_failed_first: false,
                    values,
                },
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(text: &str) -> Vec<(RefKind, RefValue)> {
        references_in(text)
            .into_iter()
            .map(|r| (r.kind, r.value))
            .collect()
    }

    fn name(n: &str, port: Option<u32>) -> RefValue {
        RefValue::Name {
            name: n.into(),
            port,
        }
    }

    #[test]
    fn bus_ids_in_every_form_are_one_canonical_address() {
        assert_eq!(pci_from_int("1a000").as_deref(), Some("0000:1a:00.0"));
        assert_eq!(pci_from_int("f000").as_deref(), Some("0000:0f:00.0"));
        assert_eq!(pci_from_int("1001b1").as_deref(), Some("0001:00:1b.1"));
        assert_eq!(
            pci_canonical("00000000:1A:00.0").as_deref(),
            Some("0000:1a:00.0")
        );
        assert_eq!(
            refs("comm 0x55d rank 5 nRanks 16 cudaDev 3 busId 1a000 commId 0x1 - Abort START"),
            [
                (RefKind::Rank, RefValue::Number(5)),
                (RefKind::Nranks, RefValue::Number(16)),
                (RefKind::CudaDevice, RefValue::Number(3)),
                (RefKind::PciDevice, RefValue::Pci("0000:1a:00.0".into())),
            ]
        );
        assert_eq!(
            refs("GPU 00000000:3B:00.0 fell off the bus"),
            [(RefKind::PciDevice, RefValue::Pci("0000:3b:00.0".into()))]
        );
    }

    /// Texts of the signature corpus (collector-cli/tests/signatures), as NCCL printed them.
    #[test]
    fn corpus_texts() {
        let corpus = |f: &str| {
            std::fs::read_to_string(format!(
                "{}/../collector-cli/tests/signatures/{f}",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
        };
        assert_eq!(
            refs(&corpus("duplicate-gpu-pytorch.txt")),
            [
                (RefKind::Rank, RefValue::Number(3)),
                (RefKind::Rank, RefValue::Number(0)),
                (RefKind::PciDevice, RefValue::Pci("0000:0f:00.0".into())),
            ]
        );
        assert_eq!(
            refs(&corpus("cuda-initialization-error.txt")),
            [(RefKind::CudaDevice, RefValue::Number(6))]
        );
        assert_eq!(
            refs(&corpus("proxy-connect-retcode6.txt")),
            [(RefKind::Rank, RefValue::Number(9))]
        );
        assert_eq!(
            refs(&corpus("proxy-could-not-receive-type.txt")),
            [(RefKind::LocalRank, RefValue::Number(0))]
        );
        assert_eq!(
            refs(&corpus("shm-create-no-space.txt")),
            [(RefKind::CudaDevice, RefValue::Number(0))]
        );
        // No identifier in an address, a size, a line number or an errno.
        assert!(refs(&corpus("net-connect-no-route.txt")).is_empty());
        assert!(refs(&corpus("shm-extend-no-errno.txt"))
            .iter()
            .all(|(k, _)| *k == RefKind::CudaDevice));
    }

    #[test]
    fn hcas_ports_peers_and_interfaces() {
        assert_eq!(
            refs("NET/IB : mlx5_2:1 Got async error event: port error"),
            [(RefKind::IbDevice, name("mlx5_2", Some(1)))]
        );
        assert_eq!(
            refs("NET/IB : Attempted to connect incompatible devices: [0]mlx5_0:1/IB and [1]mlx5_3:1/RoCE."),
            [
                (RefKind::IbDevice, name("mlx5_0", Some(1))),
                (RefKind::IbDevice, name("mlx5_3", Some(1))),
            ]
        );
        assert_eq!(
            refs("Rank 3 has no transport for P2P peer 7 on channel 0/2"),
            [
                (RefKind::Rank, RefValue::Number(3)),
                (RefKind::PeerRank, RefValue::Number(7)),
            ]
        );
        assert_eq!(
            refs("RMA/Socket : accepted invalid peer rank 17 local rank 1 nranks 16"),
            [
                (RefKind::PeerRank, RefValue::Number(17)),
                (RefKind::LocalRank, RefValue::Number(1)),
                (RefKind::Nranks, RefValue::Number(16)),
            ]
        );
        assert!(
            refs("socketProgress: Connection closed by remote peer 10.0.0.2<52341>").is_empty(),
            "an address is not a peer rank"
        );
        assert_eq!(
            refs("Connect to fe80::42:acff:fe11:2%veth3a1b<50611> failed"),
            [(RefKind::NetInterface, name("veth3a1b", None))]
        );
        assert_eq!(
            refs("Bootstrap : Using [0]ib0:192.168.5.1<0>"),
            [(RefKind::NetInterface, name("ib0", None))]
        );
    }
}
