//! Catalog C09, C10: connection failures explained by what the peer's address *is* in this job.
//!
//! A failed connect names its peer (`Connect to 10.0.0.2<45763> failed : Connection refused`).
//! Resolved against every host's recorded interfaces ([`crate::model::endpoints`]), the address
//! tells the cause NCCL's words cannot:
//! - link-local, on an interface that exists only inside its host (a container or VM bridge,
//!   a host-side veth: `knowledge/sockets.toml`), or carried by several hosts at once (a
//!   private bridge such as docker0): NCCL picked an interface that is not routable between
//!   hosts (catalog C09);
//! - a loopback address on a multi-host job: the root's hostname resolves to loopback, or
//!   MASTER_ADDR says localhost;
//! - a device interface of another recorded host whose processes were running, in a subnet this
//!   host shares, yet refused or dropped: something on the path blocks NCCL's ports (C10);
//! - the same, but no interface of this host is in that subnet: no route between the hosts on
//!   the chosen interface;
//! - no recorded host has it: a host without dumps, a stale address, or NAT.
//!
//! Errors that say the peer went away ("Connection reset by peer") are consequences of the
//! peer's own failure and left to the dead-peer rule. What each strerror text means comes from
//! `knowledge/sockets.toml`.

use crate::finding::registry;
use crate::finding::words::who;
use crate::finding::{Confidence, Finding, Severity};
use crate::knowledge::sockets::{self, PathOutcome};
use crate::model::endpoints::{
    self, address_kind, local_route, owners, shared_routable_interface, AddressKind, Endpoint,
};
use crate::model::JobModel;
use crate::story::Story;

/// What the peer's address turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Loopback,
    Unroutable,
    Blocked,
    NoRoute,
    UnknownHost,
}

impl Verdict {
    /// Its finding's declaration (which says its catalog case).
    fn declared(self) -> &'static registry::Declared {
        match self {
            Verdict::Loopback => &registry::PEER_ADDRESS_IS_LOOPBACK,
            Verdict::Unroutable => &registry::PEER_ADDRESS_NOT_ROUTABLE,
            Verdict::Blocked => &registry::CONNECTION_BLOCKED_BETWEEN_HOSTS,
            Verdict::NoRoute => &registry::NO_ROUTE_BETWEEN_HOSTS,
            Verdict::UnknownHost => &registry::PEER_ADDRESS_OF_NO_RECORDED_HOST,
        }
    }

    fn title(self) -> &'static str {
        match self {
            Verdict::Loopback => {
                "Ranks on different hosts were told to connect to a loopback address"
            }
            Verdict::Unroutable => {
                "NCCL connected over an interface that is not routable between hosts"
            }
            Verdict::Blocked => {
                "Connections between hosts that share a subnet were refused or dropped (firewall)"
            }
            Verdict::NoRoute => {
                "The peer's address is in a subnet the connecting host has no interface in"
            }
            Verdict::UnknownHost => "A connection failed to an address that no recorded host has",
        }
    }

    fn confidence(self) -> Confidence {
        match self {
            Verdict::Loopback | Verdict::Unroutable => Confidence::High,
            Verdict::Blocked | Verdict::NoRoute => Confidence::Medium,
            Verdict::UnknownHost => Confidence::Low,
        }
    }

    fn remedy(self, shared_if: Option<&str>) -> String {
        let ifname = match shared_if {
            Some(i) => format!(
                "`NCCL_SOCKET_IFNAME={i}` (the device interface every host has in one subnet)"
            ),
            None => "`NCCL_SOCKET_IFNAME=<the interface that connects the hosts>`".to_owned(),
        };
        match self {
            Verdict::Loopback => format!(
                "Give every rank the root host's routable address: set MASTER_ADDR to it (not \
                 localhost), and make the root's hostname resolve to that address (remove the \
                 `127.0.1.1 <hostname>` line from /etc/hosts). {ifname} keeps NCCL's own sockets \
                 on the right interface."
            ),
            Verdict::Unroutable => format!(
                "Set {ifname}, or exclude the virtual ones: \
                 `NCCL_SOCKET_IFNAME=^docker,lo,veth,virbr,br-`."
            ),
            Verdict::Blocked => "Open the traffic between the job's hosts: NCCL connects on \
                 ephemeral ports, so allow the whole range (or narrow it with \
                 `net.ipv4.ip_local_port_range` and open exactly that) in ufw/iptables/the cloud \
                 security group; check with `nc -l <port>` on one host and `nc <host> <port>` on \
                 the other."
                .to_owned(),
            Verdict::NoRoute => format!(
                "Set {ifname} on every host, so the address NCCL advertises is one the other \
                 hosts can reach."
            ),
            Verdict::UnknownHost => "Check which host has that address: a host whose ranks left \
                 no dump, a stale MASTER_ADDR or hostfile entry, or an address translated by NAT \
                 (NCCL needs direct connectivity between all hosts)."
                .to_owned(),
        }
    }
}

/// Whether every process on the peer's machine had ended (failed, died, exited) by `t`, as the
/// story tells each one's end and failures: then the connection failed because the peer was
/// gone, not because of the path.
fn peer_gone_by(story: &Story, peers: &[usize], t: u64) -> bool {
    !peers.is_empty()
        && peers.iter().all(|&q| {
            story.ends[q].time().is_some_and(|e| e <= t)
                || story.nodes.iter().any(|n| n.process == q && n.t < t)
        })
}

/// Judges endpoint `e` named by process `p` at time `t`; `what` says what the address is to
/// that process ("peer address", "the uniqueId's root address").
fn judge(
    job: &JobModel,
    story: &Story,
    p: usize,
    t: u64,
    e: &Endpoint,
    outcome: Option<PathOutcome>,
    what: &str,
) -> Option<(Verdict, String)> {
    let me = &job.processes[p];
    let multi_host = endpoints::machines_with_interfaces(job).len() >= 2
        || job.processes.iter().any(|q| q.machine() != me.machine());
    let shown = e.shown();
    match address_kind(&e.addr) {
        AddressKind::Unspecified => return None,
        AddressKind::Loopback => {
            return multi_host.then(|| {
                (
                    Verdict::Loopback,
                    format!(
                        "{}: {what} {shown} is loopback, on a job spanning several hosts",
                        who(job, p)
                    ),
                )
            })
        }
        AddressKind::LinkLocal => {
            return Some((
                Verdict::Unroutable,
                format!(
                    "{}: {what} {shown} is link-local (valid on one link only)",
                    who(job, p)
                ),
            ))
        }
        AddressKind::Other => {}
    }
    let found = owners(job, &e.addr);
    if found.len() >= 2 {
        let hosts: Vec<&str> = found.iter().map(|o| o.host.as_str()).collect();
        return Some((
            Verdict::Unroutable,
            format!(
                "{}: {what} {shown} is carried by {} hosts at once ({}: `{}`), a private \
                 address not routable between them",
                who(job, p),
                found.len(),
                hosts.join(", "),
                found[0].interface
            ),
        ));
    }
    let Some(owner) = found.first() else {
        if outcome == Some(PathOutcome::PeerGone)
            || endpoints::machines_with_interfaces(job).is_empty()
        {
            return None;
        }
        let hosts: Vec<String> = endpoints::machines_with_interfaces(job)
            .iter()
            .map(|&q| job.processes[q].host.clone())
            .collect();
        return Some((
            Verdict::UnknownHost,
            format!(
                "{}: {what} {shown} belongs to none of the recorded hosts ({})",
                who(job, p),
                hosts.join(", ")
            ),
        ));
    };
    if owner.local_only {
        return Some((
            Verdict::Unroutable,
            format!(
                "{}: {what} {shown} is on {}'s `{}`, an interface that exists only inside that host (a container or VM bridge)",
                who(job, p),
                owner.host,
                owner.interface
            ),
        ));
    }
    if owner.machine == me.machine() || outcome == Some(PathOutcome::PeerGone) {
        return None;
    }
    if peer_gone_by(story, &owner.processes, t) {
        return None;
    }
    let peer = format!("{}'s `{}`", owner.host, owner.interface);
    match local_route(job, p, &e.addr) {
        Some(via) if outcome.is_some() => Some((
            Verdict::Blocked,
            format!(
                "{}: connecting to {shown} ({peer}, whose processes were running) from `{}` \
                 {}/{}, in the same subnet, failed",
                who(job, p),
                via.interface,
                via.addr,
                via.prefix
            ),
        )),
        Some(_) => None,
        None => me.host_facts.as_ref()?.netifs.as_ref().map(|_| {
            (
                Verdict::NoRoute,
                format!(
                    "{}: {what} {shown} ({peer}/{}) is in no subnet of {}'s interfaces",
                    who(job, p),
                    owner.prefix,
                    me.host
                ),
            )
        }),
    }
}

/// The finding of `verdict`, made on first use: one finding per cause, however many failures
/// and ranks it covers.
fn finding_for<'a>(
    findings: &'a mut Vec<(Verdict, Finding)>,
    verdict: Verdict,
    _severity: Severity,
    shared_if: Option<&str>,
) -> &'a mut Finding {
    let k = match findings.iter().position(|(v, _)| *v == verdict) {
        Some(k) => k,
        None => {
            let f = Finding::new(verdict.declared(), verdict.title(), verdict.confidence())
                .remedy(&verdict.remedy(shared_if));
            findings.push((verdict, f));
            findings.len() - 1
        }
    };
    &mut findings[k].1
}

pub fn check(job: &JobModel, story: &Story) -> Vec<Finding> {
    let shared_if = shared_routable_interface(job);
    let mut findings: Vec<(Verdict, Finding)> = Vec::new();
    for (p, i, t) in job.failures_with_text() {
        let call = &job.processes[p].calls[i];
        let text = call.error_text.as_deref().unwrap_or_default();
        // Only a failed connection is about the path; an address in another message (a peer
        // named in "message truncated", a peer that went away) says nothing about reachability.
        let outcome = sockets::outcome_in(text);
        if !outcome.is_some_and(|o| o.path != PathOutcome::PeerGone) {
            continue;
        }
        for e in endpoints::endpoints_in(text) {
            let Some((verdict, fact)) = judge(
                job,
                story,
                p,
                t,
                &e,
                outcome.map(|o| o.path),
                "peer address",
            ) else {
                continue;
            };
            let f = finding_for(
                &mut findings,
                verdict,
                Severity::Contributing,
                shared_if.as_deref(),
            );
            f.involve(job, p);
            // An address no host has is a fact about the failure, not its cause: the failure
            // stays unexplained (and so reported as such) unless another rule explains it.
            if verdict != Verdict::UnknownHost {
                f.explain(p, i);
            }
            f.evidence(fact);
            f.evidence(format!("{}: {}", who(job, p), call.describe()));
            if let Some(o) = outcome {
                f.evidence(format!("`{}` ({}): {}", o.text, o.errno, o.meaning));
            }
            if verdict == Verdict::Loopback {
                if let Some(m) = job.processes[p].env_var("MASTER_ADDR") {
                    f.evidence(format!("{}: MASTER_ADDR={m}", who(job, p)));
                }
            }
        }
    }
    // Communicator creation that failed or never returned: the bootstrap root address in the
    // uniqueId every rank joined with must be reachable from every host. NCCL's own texts
    // often say nothing here (ranks on other hosts just wait in init).
    let job_failed = !job.failures.is_empty();
    for (p, pm) in job.processes.iter().enumerate() {
        for (i, c) in pm.calls.iter().enumerate() {
            if !c.is_init() || !(c.failed() || c.in_flight()) {
                continue;
            }
            let Some(root) = endpoints::call_uid_root(c) else {
                continue;
            };
            let Some((verdict, fact)) = judge(
                job,
                story,
                p,
                pm.last_t,
                &root,
                None,
                "the uniqueId's root address",
            ) else {
                continue;
            };
            if verdict == Verdict::UnknownHost {
                continue;
            }
            // An init hang has no failure to order by: this is then the cause.
            let severity = if job_failed {
                Severity::Contributing
            } else {
                Severity::Primary
            };
            let f = finding_for(&mut findings, verdict, severity, shared_if.as_deref());
            f.involve(job, p);
            f.explain(p, i);
            f.evidence(fact);
            f.evidence(format!("{}: {}", who(job, p), c.describe()));
        }
    }
    findings.sort_by_key(|(v, _)| *v);
    findings.into_iter().map(|(_, f)| f).collect()
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    use crate::finding::Severity;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::{host_facts_json, Scenario};
    use serde_json::json;

    /// Host facts of `host` with the given interfaces: (name, address, prefix, virtual).
    fn host_with(host: &str, ifs: &[(&str, &str, u8, bool)]) -> serde_json::Value {
        let mut v = host_facts_json(host);
        let mut list = vec![json!({"name": "lo", "up": true, "loopback": true,
            "addrs": ["127.0.0.1"], "prefix_lens": [8], "virtual_if": true})];
        for (name, addr, prefix, virt) in ifs {
            list.push(
                json!({"name": name, "up": true, "loopback": false, "addrs": [addr],
                "prefix_lens": [prefix], "mtu": 1500, "virtual_if": virt}),
            );
        }
        v["netifs"] = json!(list);
        v
    }

    /// Two hosts, two ranks each; rank 0 fails init with `text`, the others wait in init.
    fn two_hosts(
        a_ifs: &[(&str, &str, u8, bool)],
        b_ifs: &[(&str, &str, u8, bool)],
        text: &str,
    ) -> Vec<crate::finding::Finding> {
        let (_, fs) = analyze(&["a", "a", "b", "b"], |s: &mut Scenario| {
            s.snapshot_all(22105);
            for r in 0..4 {
                let ifs = if r < 2 { a_ifs } else { b_ifs };
                let host = if r < 2 { "a" } else { "b" };
                s.ranks[r].host_facts(&host_with(host, ifs));
            }
            s.ranks[0].init_rank(4, 0, 0x77, 0, 2, Some(text), 22105);
            for r in 1..4 {
                s.ranks[r].init_rank_in_flight(4, r as u64, 0x77, r as u64 % 2);
            }
        });
        fs
    }

    #[test]
    fn same_subnet_refused_is_a_blocked_path() {
        let fs = two_hosts(
            &[("eth0", "10.0.0.1", 24, false)],
            &[("eth0", "10.0.0.2", 24, false)],
            "socketStartConnect: Connect to 10.0.0.2<45763> failed : Connection refused",
        );
        let f = find(&fs, registry::CONNECTION_BLOCKED_BETWEEN_HOSTS.id()).expect("C10");
        assert_eq!(f.catalog(), Some("C10"));
        assert_eq!(f.severity, Severity::Primary);
        assert!(
            f.evidence.iter().any(|e| e.contains("b's `eth0`")),
            "{:?}",
            f.evidence
        );
        assert!(f.evidence.iter().any(|e| e.contains("ECONNREFUSED")));
    }

    #[test]
    fn no_shared_subnet_is_no_route_and_names_the_shared_interface() {
        let fs = two_hosts(
            &[
                ("eth0", "10.0.0.1", 24, false),
                ("ib0", "192.168.5.1", 16, false),
            ],
            &[
                ("eth0", "10.9.0.2", 24, false),
                ("ib0", "192.168.7.2", 16, false),
            ],
            "Connect to 10.9.0.2<45763> failed : No route to host",
        );
        let f = find(&fs, registry::NO_ROUTE_BETWEEN_HOSTS.id()).expect("no route");
        assert!(f.remedy.contains("NCCL_SOCKET_IFNAME=ib0"), "{}", f.remedy);
    }

    #[test]
    fn an_address_on_several_hosts_or_virtual_is_unroutable() {
        let fs = two_hosts(
            &[
                ("docker0", "172.17.0.1", 16, true),
                ("eth0", "10.0.0.1", 24, false),
            ],
            &[
                ("docker0", "172.17.0.1", 16, true),
                ("eth0", "10.0.0.2", 24, false),
            ],
            "Connect to 172.17.0.1<40000> failed : Connection timed out",
        );
        let f = find(&fs, registry::PEER_ADDRESS_NOT_ROUTABLE.id()).expect("C09");
        assert!(f.evidence.iter().any(|e| e.contains("carried by 2 hosts")));
        assert!(f.remedy.contains("NCCL_SOCKET_IFNAME=eth0"), "{}", f.remedy);
        let fs = two_hosts(
            &[("eth0", "10.0.0.1", 24, false)],
            &[("eth0", "10.0.0.2", 24, false)],
            "Connect to fe80::42:acff:fe11:2%veth3a<5000> failed : Network is unreachable",
        );
        assert!(find(&fs, registry::PEER_ADDRESS_NOT_ROUTABLE.id()).is_some());
    }

    #[test]
    fn loopback_on_a_multi_host_job() {
        let fs = two_hosts(
            &[("eth0", "10.0.0.1", 24, false)],
            &[("eth0", "10.0.0.2", 24, false)],
            "Connect to 127.0.1.1<29500> failed : Connection refused",
        );
        assert!(find(&fs, registry::PEER_ADDRESS_IS_LOOPBACK.id()).is_some());
    }

    #[test]
    fn a_peer_that_went_away_is_left_to_the_dead_peer_rule() {
        let fs = two_hosts(
            &[("eth0", "10.0.0.1", 24, false)],
            &[("eth0", "10.0.0.2", 24, false)],
            "socketProgress: Connection closed by remote peer 10.0.0.2<45763>",
        );
        for id in [
            registry::CONNECTION_BLOCKED_BETWEEN_HOSTS.id(),
            registry::NO_ROUTE_BETWEEN_HOSTS.id(),
            registry::PEER_ADDRESS_NOT_ROUTABLE.id(),
        ] {
            assert!(find(&fs, id).is_none(), "{id}");
        }
    }

    /// A uniqueId whose root sockaddr is `addr`:`port` (IPv4), as the shim records it.
    fn uid_with_root(addr: [u8; 4], port: u16) -> [u64; 5] {
        let mut b = [0u8; 40];
        b[..8].copy_from_slice(&0x564a_b9f2_fc4b_9d6cu64.to_le_bytes());
        b[8..10].copy_from_slice(&2u16.to_le_bytes());
        b[10..12].copy_from_slice(&port.to_be_bytes());
        b[12..16].copy_from_slice(&addr);
        let mut w = [0u64; 5];
        for (i, x) in w.iter_mut().enumerate() {
            *x = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        }
        w
    }

    /// Every rank waits in init (no error text anywhere) for a root on host a's docker0.
    #[test]
    fn an_init_hang_on_a_bridge_root_address() {
        let a: &[(&str, &str, u8, bool)] = &[
            ("docker0", "172.17.0.1", 16, true),
            ("eth0", "10.0.0.1", 24, false),
        ];
        let b: &[(&str, &str, u8, bool)] = &[("eth0", "10.0.0.2", 24, false)];
        let w = uid_with_root([172, 17, 0, 1], 41000);
        let (_, fs) = analyze(&["a", "a", "b", "b"], |s: &mut Scenario| {
            s.snapshot_all(22105);
            for r in 0..4 {
                let (host, ifs) = if r < 2 { ("a", a) } else { ("b", b) };
                s.ranks[r].host_facts(&host_with(host, ifs));
                s.ranks[r].in_flight(
                    ncclshim_format::CallId::NcclCommInitRank,
                    0,
                    &[4, r as u64, 0x77, w[0], w[1], w[2], w[3], w[4], 0],
                );
            }
        });
        let f = find(&fs, registry::PEER_ADDRESS_NOT_ROUTABLE.id()).expect("C09 from the uniqueId");
        assert_eq!(f.severity, Severity::Primary);
        assert!(
            f.evidence
                .iter()
                .any(|e| e
                    .contains("uniqueId's root address 172.17.0.1 port 41000 is on a's `docker0`")),
            "{:?}",
            f.evidence
        );
        assert!(f.remedy.contains("NCCL_SOCKET_IFNAME=eth0"), "{}", f.remedy);
    }

    #[test]
    fn an_unknown_address_is_named_but_never_primary() {
        let fs = two_hosts(
            &[("eth0", "10.0.0.1", 24, false)],
            &[("eth0", "10.0.0.2", 24, false)],
            "Connect to 10.5.5.5<45763> failed : Connection timed out",
        );
        let f = find(&fs, registry::PEER_ADDRESS_OF_NO_RECORDED_HOST.id()).expect("unknown");
        assert_eq!(f.severity, Severity::Contributing);
    }
}
