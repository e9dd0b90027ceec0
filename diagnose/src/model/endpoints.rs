//! Network endpoints named in recorded texts, resolved against the recorded hosts.
//!
//! NCCL names the peer of a failed connection in its own form (`10.0.0.2<45763>`,
//! `fe80::1%veth3a<5000>`), PyTorch and launchers in theirs (`10.0.0.2:29500`, `[fe80::1]:29500`).
//! An address alone says little; what it *is* in this job says a lot: the interface of which
//! host, a software interface (veth, bridge) or a device, an address several hosts share (a
//! private bridge), a loopback address on a multi-host job, or an address no recorded host has.
//! This module finds endpoints in any text and answers those questions from the interfaces every
//! process's host facts recorded, so every rule reasons about addresses the same way.

use super::{CallEvent, JobModel};
use crate::knowledge::sockets::local_only_interface as local_only;
use ncclshim_format::{args, ArgView, CallId};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One address (with port and IPv6 scope when written) found in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub addr: IpAddr,
    pub port: Option<u16>,
    /// The `%scope` of a link-local IPv6 address: the interface the sender used.
    pub scope: Option<String>,
}

impl Endpoint {
    /// `10.0.0.2 port 45763`, as shown in evidence.
    pub fn shown(&self) -> String {
        let mut s = self.addr.to_string();
        if let Some(sc) = &self.scope {
            s.push('%');
            s.push_str(sc);
        }
        if let Some(p) = self.port {
            s.push_str(&format!(" port {p}"));
        }
        s
    }
}

/// Characters an address token can contain (address, scope, port in NCCL's or URL form).
fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '%' | '_' | '-' | '[' | ']')
}

/// A port written right after the address: `<45763>` (NCCL).
fn angle_port(rest: &str) -> Option<u16> {
    let inner = rest.strip_prefix('<')?;
    let end = inner.find('>')?;
    inner[..end].parse().ok()
}

/// Parses one token as an address with optional `%scope`, `:port` or `[v6]:port`.
fn parse_token(tok: &str) -> Option<(IpAddr, Option<String>, Option<u16>)> {
    let tok = tok.trim_matches(|c: char| matches!(c, '.' | ':' | '-' | '_'));
    if let Some(inner) = tok.strip_prefix('[') {
        let (addr, after) = inner.split_once(']')?;
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok());
        let (a, scope) = split_scope(addr);
        return Some((a.parse().ok()?, scope, port));
    }
    let (a, scope) = split_scope(tok);
    if let Ok(ip) = a.parse::<IpAddr>() {
        return Some((ip, scope, None));
    }
    // IPv4 with `:port`.
    let (host, port) = a.rsplit_once(':')?;
    let ip: std::net::Ipv4Addr = host.parse().ok()?;
    Some((IpAddr::V4(ip), scope, port.parse().ok()))
}

fn split_scope(s: &str) -> (&str, Option<String>) {
    match s.split_once('%') {
        Some((a, sc)) if !sc.is_empty() => (a, Some(sc.to_owned())),
        Some((a, _)) => (a, None),
        None => (s, None),
    }
}

/// Every address written in `text`, in order, without repeats. Version numbers (`2.21.5`) and
/// times (`12:30:01`) are not addresses: an IPv4 address has four parts and an IPv6 one parses
/// as such.
pub fn endpoints_in(text: &str) -> Vec<Endpoint> {
    let mut out: Vec<Endpoint> = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(token_char) {
        let after_start = &rest[start..];
        let len = after_start
            .find(|c: char| !token_char(c))
            .unwrap_or(after_start.len());
        let (tok, tail) = after_start.split_at(len);
        rest = tail;
        let looks_like_address = tok.contains('.') || tok.matches(':').count() >= 2;
        if !looks_like_address {
            continue;
        }
        let Some((addr, scope, port)) = parse_token(tok) else {
            continue;
        };
        let e = Endpoint {
            addr,
            port: port.or_else(|| angle_port(tail)),
            scope,
        };
        if !out.contains(&e) {
            out.push(e);
        }
    }
    out
}

/// The bootstrap root's address inside a uniqueId, from the first 40 bytes the shim records as
/// five little-endian words (`uid0..uid4`). NCCL's `struct ncclBootstrapHandle` is
/// `{ uint64_t magic; union ncclSocketAddress addr; ... }` in every release from 2.18 to 2.30
/// (src/include/bootstrap.h): bytes 8.. hold a `sockaddr_in` or `sockaddr_in6`, family in host
/// order, port in network order. None for an all-zero or foreign id.
pub fn uid_root(words: [u64; 5]) -> Option<Endpoint> {
    let mut b = [0u8; 40];
    for (i, w) in words.iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    let family = u16::from_le_bytes([b[8], b[9]]);
    let port = u16::from_be_bytes([b[10], b[11]]);
    let (addr, scope) = match i32::from(family) {
        libc::AF_INET => (IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15])), None),
        libc::AF_INET6 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[16..32]);
            let scope_id = u32::from_le_bytes([b[32], b[33], b[34], b[35]]);
            (
                IpAddr::V6(Ipv6Addr::from(a)),
                (scope_id != 0).then(|| format!("if{scope_id}")),
            )
        }
        _ => return None,
    };
    Some(Endpoint {
        addr,
        port: (port != 0).then_some(port),
        scope,
    })
}

/// The bootstrap root named by the uniqueId a call carried (ncclGetUniqueId's result, or the id
/// an InitRank-family call joined with).
pub fn call_uid_root(c: &CallEvent) -> Option<Endpoint> {
    // The id's first words, as each call's view names them (the scalable init keeps four).
    let w = match c.call? {
        CallId::NcclGetUniqueId => {
            let a = args::NcclGetUniqueId::from_args(&c.args);
            [a.uid0, a.uid1, a.uid2, a.uid3, a.uid4]
        }
        CallId::NcclCommInitRank | CallId::NcclCommInitRankConfig => {
            let a = args::CommInitRank::from_args(&c.args);
            [a.uid0, a.uid1, a.uid2, a.uid3, a.uid4]
        }
        CallId::NcclCommInitRankScalable => {
            // Its fifth word is the id count, read as the old code did: the root address
            // sits in the first words.
            let a = args::NcclCommInitRankScalable::from_args(&c.args);
            [a.uid0, a.uid1, a.uid2, a.uid3, a.n_ids]
        }
        _ => return None,
    };
    uid_root(w)
}

/// What kind of address it is, before looking at who owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressKind {
    Loopback,
    /// 169.254/16 or fe80::/10: valid on one link only.
    LinkLocal,
    Unspecified,
    Other,
}

pub fn address_kind(a: &IpAddr) -> AddressKind {
    match a {
        IpAddr::V4(v4) if v4.is_loopback() => AddressKind::Loopback,
        IpAddr::V4(v4) if v4.is_link_local() => AddressKind::LinkLocal,
        IpAddr::V4(v4) if v4.is_unspecified() => AddressKind::Unspecified,
        IpAddr::V6(v6) if v6.is_loopback() => AddressKind::Loopback,
        IpAddr::V6(v6) if v6.is_unspecified() => AddressKind::Unspecified,
        IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => AddressKind::LinkLocal,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => address_kind(&IpAddr::V4(v4)),
            None => AddressKind::Other,
        },
        IpAddr::V4(_) => AddressKind::Other,
    }
}

/// Whether `a` and `b` lie in the same subnet of `prefix` bits (false across families).
pub fn same_subnet(a: &IpAddr, b: &IpAddr, prefix: u8) -> bool {
    a.is_ipv4() == b.is_ipv4() && masked(a, prefix) == masked(b, prefix)
}

/// `a` with the bits past `prefix` cleared: the network it is in.
pub fn masked(a: &IpAddr, prefix: u8) -> IpAddr {
    match a {
        IpAddr::V4(x) => {
            let bits = u32::from(prefix.min(32));
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            IpAddr::V4((u32::from(*x) & mask).into())
        }
        IpAddr::V6(x) => {
            let bits = u32::from(prefix.min(128));
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            IpAddr::V6((u128::from(*x) & mask).into())
        }
    }
}

/// One recorded host's interface that carries an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The machine key ([`super::ProcessModel::machine`]) and the hostname shown.
    pub machine: String,
    pub host: String,
    pub interface: String,
    pub prefix: u8,
    /// The interface exists only inside its host (a container/VM bridge, a host-side veth):
    /// its addresses are not reachable from other hosts.
    pub local_only: bool,
    pub up: bool,
    /// Processes on that machine.
    pub processes: Vec<usize>,
}

/// One address of a recorded interface of a process's host.
pub struct HostAddress<'a> {
    pub interface: &'a str,
    pub addr: IpAddr,
    pub prefix: u8,
    pub virtual_if: bool,
    pub up: bool,
    pub loopback: bool,
}

/// Every address of process `p`'s recorded interfaces.
pub fn host_addresses(job: &JobModel, p: usize) -> Vec<HostAddress<'_>> {
    let Some(ifs) = job.processes[p]
        .host_facts
        .as_ref()
        .and_then(|h| h.netifs.as_ref())
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for n in ifs {
        for (i, a) in n.addrs.iter().enumerate() {
            let Ok(addr) = a.parse::<IpAddr>() else {
                continue;
            };
            let default_prefix = if addr.is_ipv4() { 32 } else { 128 };
            out.push(HostAddress {
                interface: &n.name,
                addr,
                prefix: n
                    .prefix_lens
                    .get(i)
                    .copied()
                    .filter(|&p| p > 0)
                    .unwrap_or(default_prefix),
                virtual_if: n.virtual_if,
                up: n.up,
                loopback: n.loopback,
            });
        }
    }
    out
}

/// The recorded hosts that have `addr` on one of their interfaces, one entry per machine.
pub fn owners(job: &JobModel, addr: &IpAddr) -> Vec<Owner> {
    let mut out: Vec<Owner> = Vec::new();
    for (p, pm) in job.processes.iter().enumerate() {
        let machine = pm.machine().to_owned();
        if let Some(o) = out.iter_mut().find(|o| o.machine == machine) {
            if !o.processes.contains(&p) {
                o.processes.push(p);
            }
            continue;
        }
        if let Some(h) = host_addresses(job, p).into_iter().find(|h| h.addr == *addr) {
            out.push(Owner {
                machine,
                host: pm.host.clone(),
                interface: h.interface.to_owned(),
                prefix: h.prefix,
                local_only: crate::knowledge::sockets::local_only_interface(h.interface),
                up: h.up,
                processes: vec![p],
            });
        }
    }
    // Processes on an owner's machine recorded before it was found.
    for o in &mut out {
        for (p, pm) in job.processes.iter().enumerate() {
            if pm.machine() == o.machine && !o.processes.contains(&p) {
                o.processes.push(p);
            }
        }
        o.processes.sort_unstable();
    }
    out
}

/// An interface of process `p`'s host whose subnet contains `addr` (the direct path to it).
pub fn local_route<'a>(job: &'a JobModel, p: usize, addr: &IpAddr) -> Option<HostAddress<'a>> {
    host_addresses(job, p)
        .into_iter()
        .filter(|h| !h.loopback && h.up)
        .find(|h| same_subnet(&h.addr, addr, h.prefix))
}

/// Machines with recorded interfaces, one process each.
pub fn machines_with_interfaces(job: &JobModel) -> Vec<usize> {
    // A set: a list scanned per process was processes x machines (2,048 machines of 8 ranks).
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (p, pm) in job.processes.iter().enumerate() {
        if seen.contains(pm.machine()) || host_addresses(job, p).is_empty() {
            continue;
        }
        seen.insert(pm.machine());
        out.push(p);
    }
    out
}

/// An interface name that every recorded machine has up, not loopback and not host-local (a
/// bridge or host-side veth), with an address in a subnet all of them share: what
/// `NCCL_SOCKET_IFNAME` should name. None when the job has fewer than two machines with interfaces or none qualifies.
pub fn shared_routable_interface(job: &JobModel) -> Option<String> {
    let hosts = machines_with_interfaces(job);
    if hosts.len() < 2 {
        return None;
    }
    let first = host_addresses(job, hosts[0]);
    let candidates = first
        .iter()
        .filter(|h| !h.loopback && !local_only(h.interface) && h.up)
        .filter(|h| address_kind(&h.addr) == AddressKind::Other);
    for c in candidates {
        let everywhere = hosts[1..].iter().all(|&p| {
            host_addresses(job, p).iter().any(|h| {
                h.interface == c.interface
                    && h.up
                    && !local_only(h.interface)
                    && same_subnet(&h.addr, &c.addr, c.prefix.min(h.prefix))
            })
        });
        if everywhere {
            return Some(c.interface.to_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(text: &str) -> Vec<String> {
        endpoints_in(text).iter().map(Endpoint::shown).collect()
    }

    #[test]
    fn nccl_and_url_forms_are_found() {
        assert_eq!(
            addrs("socketStartConnect: Connect to 10.0.0.2<45763> failed : Software caused connection abort"),
            ["10.0.0.2 port 45763"]
        );
        assert_eq!(
            addrs("NCCL WARN Connect to fe80::42:acff:fe11:2%veth3a1b<50611> failed : Network is unreachable"),
            ["fe80::42:acff:fe11:2%veth3a1b port 50611"]
        );
        assert_eq!(
            addrs("The client socket has failed to connect to [node-1]:29500 (errno: 110) and 10.1.2.3:29500."),
            ["10.1.2.3 port 29500"]
        );
        assert_eq!(
            addrs("connect to [fe80::1%eth0]:29500"),
            ["fe80::1%eth0 port 29500"]
        );
    }

    #[test]
    fn versions_times_and_words_are_not_addresses() {
        assert!(addrs("NCCL version 2.21.5+cuda12.4 at 12:30:01, retcode 2").is_empty());
        assert!(addrs("transport/net_ib.cc:1295 NCCL WARN NET/IB").is_empty());
        assert!(addrs("Socket recv failed while polling for opId=0x7f3a").is_empty());
    }

    /// A uniqueId as NCCL lays it out: magic, then a sockaddr (family in host order, port in
    /// network order), as the shim's five words.
    fn uid_words_of(sockaddr: &[u8]) -> [u64; 5] {
        let mut b = [0u8; 40];
        b[..8].copy_from_slice(&0x564a_b9f2_fc4b_9d6cu64.to_le_bytes());
        b[8..8 + sockaddr.len()].copy_from_slice(sockaddr);
        let mut w = [0u64; 5];
        for (i, x) in w.iter_mut().enumerate() {
            *x = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        }
        w
    }

    #[test]
    fn uid_root_decodes_both_families() {
        let mut v4 = vec![2u8, 0];
        v4.extend_from_slice(&29500u16.to_be_bytes());
        v4.extend_from_slice(&[10, 1, 2, 3]);
        let e = uid_root(uid_words_of(&v4)).unwrap();
        assert_eq!(e.shown(), "10.1.2.3 port 29500");
        let mut v6 = vec![10u8, 0];
        v6.extend_from_slice(&5000u16.to_be_bytes());
        v6.extend_from_slice(&[0; 4]);
        v6.extend_from_slice(&"fe80::1".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend_from_slice(&3u32.to_le_bytes());
        let e = uid_root(uid_words_of(&v6)).unwrap();
        assert_eq!(e.shown(), "fe80::1%if3 port 5000");
        assert!(uid_root([0; 5]).is_none());
    }

    #[test]
    fn address_kinds_and_subnets() {
        let ll: IpAddr = "fe80::1".parse().unwrap();
        assert_eq!(address_kind(&ll), AddressKind::LinkLocal);
        assert_eq!(
            address_kind(&"169.254.3.4".parse().unwrap()),
            AddressKind::LinkLocal
        );
        assert_eq!(
            address_kind(&"127.0.1.1".parse().unwrap()),
            AddressKind::Loopback
        );
        assert_eq!(
            address_kind(&"::ffff:127.0.0.1".parse().unwrap()),
            AddressKind::Loopback
        );
        let a: IpAddr = "10.1.2.3".parse().unwrap();
        assert!(same_subnet(&a, &"10.1.9.9".parse().unwrap(), 16));
        assert!(!same_subnet(&a, &"10.1.9.9".parse().unwrap(), 24));
        assert!(!same_subnet(&a, &ll, 0));
    }
}
