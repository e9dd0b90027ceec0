//! Ranks that meant to form one communicator but were handed different uniqueIds (two roots,
//! a stale id from a previous run): each group waits in init for ranks that joined the other.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use std::collections::BTreeMap;

pub fn check(job: &JobModel) -> Vec<Finding> {
    // nranks → uid → processes, for inits that never completed.
    let mut groups: BTreeMap<u32, BTreeMap<u64, Vec<usize>>> = BTreeMap::new();
    for (p, pm) in job.processes.iter().enumerate() {
        for c in &pm.calls {
            if c.is_init() && c.in_flight() {
                if let (Some(uid), Some(n)) = (c.arg("uid_hash"), c.arg("nranks")) {
                    groups
                        .entry(n as u32)
                        .or_default()
                        .entry(uid)
                        .or_default()
                        .push(p);
                }
            }
        }
    }
    let mut out = Vec::new();
    for (n, by_uid) in groups {
        if by_uid.len() < 2 || by_uid.values().any(|ps| ps.len() as u32 >= n) {
            continue;
        }
        let mut f = Finding::new(&registry::UNIQUE_ID_SPLIT,
            format!("Ranks waiting to form a {n}-rank communicator hold {} different uniqueIds", by_uid.len()),
            Confidence::Medium,
        )
        .remedy("Make every rank receive the uniqueId from the same root for the same communicator (one MASTER_ADDR/port, one ncclGetUniqueId per communicator, no stale ids).");
        for (uid, ps) in &by_uid {
            f.fact(
                Evidence::new(
                    EvidenceKind::Communicator,
                    format!("hold uniqueId hash {uid:#x} ({} of {n})", ps.len()),
                )
                .value("uid_hash", format!("{uid:#x}"))
                .value("nranks", n)
                .of_all(job, ps),
            );
            for &p in ps {
                f.involve(job, p);
            }
        }
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    use crate::rules::testutil::{analyze, find};

    #[test]
    fn two_roots_two_halves() {
        let (_, fs) = analyze(&["a", "a", "b", "b"], |s| {
            s.snapshot_all(22005);
            for r in &s.ranks {
                let uid = if r.rank < 2 { 0x1111 } else { 0x2222 };
                r.init_rank_in_flight(4, u64::from(r.rank), uid, u64::from(r.rank % 2));
            }
        });
        let f = find(&fs, registry::UNIQUE_ID_SPLIT.id()).expect("uid split");
        assert_eq!(f.evidence.len(), 2);
        assert!(f.evidence[0].contains("0x1111") && f.evidence[0].contains("ranks 0-1"));
    }
}
