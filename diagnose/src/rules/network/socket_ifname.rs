//! Catalog C08: `NCCL_SOCKET_IFNAME` matches no interface. NCCL says "Bootstrap : no socket interface
//! found" (ncclInternalError ≤ 2.23, ncclInvalidUsage from 2.24), or, on some versions, fails
//! later with a garbage address family — the same text as a version mismatch (C03), which is why
//! this rule compares the value with the recorded interfaces instead of trusting the message.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::facts::NetIf;
use crate::model::JobModel;
use crate::rules::text::text_is_entry;

/// Whether NCCL's interface filter (`^` excludes, `=` exact, comma list, else prefix) selects
/// at least one of `ifs` that is up.
pub fn filter_matches(value: &str, ifs: &[NetIf]) -> bool {
    let (exclude, rest) = match value.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, value),
    };
    let (exact, rest) = match rest.strip_prefix('=') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let pats: Vec<&str> = rest
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let hit = |name: &str| {
        pats.iter().any(|p| {
            if exact {
                name == *p
            } else {
                name.starts_with(p)
            }
        })
    };
    ifs.iter().filter(|i| i.up).any(|i| {
        if exclude {
            !hit(&i.name) && !i.loopback
        } else {
            hit(&i.name)
        }
    })
}

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut f = Finding::new(&registry::SOCKET_IFNAME_NO_MATCH,
        "NCCL_SOCKET_IFNAME matches no network interface",
        Confidence::High,
    )
    .remedy(
        "Fix NCCL_SOCKET_IFNAME to name an interface that exists on every node (a prefix list such as \
         eno1,eth0 for heterogeneous nodes, or per-node /etc/nccl.conf), or unset it.",
    );
    for (p, pm) in job.processes.iter().enumerate() {
        let Some(value) = pm.env_var("NCCL_SOCKET_IFNAME") else {
            continue;
        };
        let Some(ifs) = pm.host_facts.as_ref().and_then(|h| h.netifs.as_ref()) else {
            continue;
        };
        if filter_matches(value, ifs) {
            continue;
        }
        no_match_facts(job, p, value, ifs, &mut f);
    }
    if f.process_ids.is_empty() {
        message_alone(job, &mut f);
    }
    if f.process_ids.is_empty() {
        return Vec::new();
    }
    vec![f]
}

/// Process `p`'s `NCCL_SOCKET_IFNAME` (`value`) selects none of its interfaces `ifs`: the value
/// and the interfaces, the interface it most likely meant, how its NCCL reports it, and the
/// calls that failed of it.
fn no_match_facts(job: &JobModel, p: usize, value: &str, ifs: &[NetIf], f: &mut Finding) {
    let pm = &job.processes[p];
    f.involve(job, p);
    let names: Vec<&str> = ifs.iter().map(|i| i.name.as_str()).collect();
    f.fact(
        Evidence::new(
            EvidenceKind::Env,
            format!(
                "NCCL_SOCKET_IFNAME={value}, interfaces on {}: {}",
                pm.host,
                names.join(", ")
            ),
        )
        .value("name", "NCCL_SOCKET_IFNAME")
        .value("value", value)
        .value("interfaces", &names)
        .of(job, p),
    );
    if let Some((edits, asked, interface)) = closest_interface(value, &names) {
        f.fact(
            Evidence::new(
                EvidenceKind::Inference,
                format!("`{asked}` is {edits} edit(s) from the interface `{interface}`: a typo?"),
            )
            .value("asked", asked)
            .value("closest_interface", interface)
            .of(job, p),
        );
    }
    if let Some(v) = pm.nccl_version {
        // The release that changed the return code (knowledge/nccl-versions.toml).
        let since = crate::knowledge::bugs::introduced_code("socket-missing-interface-rc");
        let (rc, name) = if v >= since {
            (5, "ncclInvalidUsage")
        } else {
            (3, "ncclInternalError")
        };
        f.fact(
            Evidence::new(
                EvidenceKind::Inference,
                format!(
                    "NCCL {} reports a missing interface as {rc} {name} (ncclInternalError up to 2.23, ncclInvalidUsage from 2.24)",
                    crate::names::nccl_version_string(v)
                ),
            )
            .value("nccl_version", crate::names::nccl_version_string(v))
            .value("rc", rc)
            .value("rc_name", name)
            .of(job, p),
        );
    }
    for (i, c) in pm.failed_calls() {
        if !c.is_cuda
            && (text_is_entry(c, &["socket-no-interface", "socket-address-family"])
                || c.call == Some(ncclshim_format::CallId::NcclGetUniqueId)
                || c.is_init())
        {
            f.explain(p, i);
            f.fact(Evidence::call(c).of(job, p));
        }
    }
}

/// A typo of an existing name (`eht0` for `eth0`): the interface of `names` the filter `value`
/// most likely meant, as (edits, the name asked for, the interface). NCCL's syntax: `^`
/// excludes, `=` asks for exact names, commas separate.
fn closest_interface<'a>(value: &'a str, names: &[&'a str]) -> Option<(usize, &'a str, &'a str)> {
    let wanted = value.trim_start_matches('^').trim_start_matches('=');
    wanted
        .split(',')
        .filter(|w| !w.is_empty())
        .flat_map(|w| {
            // NCCL matches names by prefix (`eth` selects `eth0`): compare with the
            // whole name and with its prefix of the asked length.
            names.iter().filter(move |n| **n != "lo").map(move |n| {
                let prefix: String = n.chars().take(w.chars().count()).collect();
                let d =
                    strsim::damerau_levenshtein(w, n).min(strsim::damerau_levenshtein(w, &prefix));
                (d, w, *n)
            })
        })
        .filter(|(d, w, _)| *d > 0 && *d <= 2 && *d < w.len())
        .min()
}

/// The message alone, without the facts to check it against: every call that failed with
/// NCCL's "no socket interface found".
fn message_alone(job: &JobModel, f: &mut Finding) {
    for (p, pm) in job.processes.iter().enumerate() {
        for (i, c) in pm.failed_calls() {
            if text_is_entry(c, &["socket-no-interface"]) {
                f.involve(job, p);
                f.explain(p, i);
                f.confidence = Confidence::Medium;
                f.fact(Evidence::call(c).of(job, p));
                f.fact(
                    Evidence::env(
                        "NCCL_SOCKET_IFNAME",
                        pm.env_var("NCCL_SOCKET_IFNAME"),
                        "; no usable interface found by NCCL's default filter",
                    )
                    .of(job, p),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testutil::{analyze, find};

    fn ifs(names: &[&str]) -> Vec<NetIf> {
        names
            .iter()
            .map(|n| NetIf {
                name: (*n).into(),
                up: true,
                loopback: *n == "lo",
                addrs: vec![],
                ..NetIf::default()
            })
            .collect()
    }

    #[test]
    fn nccl_filter_syntax() {
        let i = ifs(&["lo", "eth0", "ib0"]);
        assert!(filter_matches("eth", &i));
        assert!(filter_matches("eth2,ib", &i));
        assert!(!filter_matches("eth2", &i));
        assert!(!filter_matches("=eth", &i));
        assert!(filter_matches("=eth0", &i));
        assert!(filter_matches("^docker,lo", &i));
        assert!(!filter_matches("^eth,ib,lo", &i));
    }

    #[test]
    fn typo_in_ifname_with_bootstrap_error() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(22703);
            let r = &s.ranks[0];
            r.env(&[("NCCL_SOCKET_IFNAME", "eth2")]);
            r.get_unique_id(0, 5, Some("Bootstrap : no socket interface found"));
            r.clean_exit();
        });
        let f = find(&fs, registry::SOCKET_IFNAME_NO_MATCH.id()).expect("C08");
        assert_eq!(f.confidence, Confidence::High);
        assert!(f.evidence[0].contains("eth2") && f.evidence[0].contains("eth0"));
        assert_eq!(f.explains.len(), 1);
        // eth2 is one edit from eth0: named as the likely typo.
        assert!(
            f.evidence
                .iter()
                .any(|e| e.text.contains("interface `eth0`: a typo?")),
            "{:?}",
            f.evidence
        );
    }

    #[test]
    fn a_name_far_from_every_interface_is_not_called_a_typo() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(22703);
            let r = &s.ranks[0];
            r.env(&[("NCCL_SOCKET_IFNAME", "ib")]);
            r.get_unique_id(0, 5, Some("Bootstrap : no socket interface found"));
            r.clean_exit();
        });
        let f = find(&fs, registry::SOCKET_IFNAME_NO_MATCH.id()).expect("C08");
        assert!(
            !f.evidence.iter().any(|e| e.text.contains("a typo?")),
            "{:?}",
            f.evidence
        );
    }
}
