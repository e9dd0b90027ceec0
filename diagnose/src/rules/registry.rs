//! Every finding the rules can make, declared once: its id, catalog case, role in the job's
//! story, what kind of failure-graph node it explains, and one line for the docs
//! (`docs/report-json.md`'s id table is checked against this list). Findings whose id comes from
//! the knowledge files (error signatures, known bugs, NCCL messages) take their role from that
//! data when they are made.
//!
//! Roles: a `Cause` may be primary when it explains a root of the story; a `Condition` (two
//! libraries, an environment that differs) only when no cause explains that root; a
//! `Consequence` never is; an `Advisory` never makes the report fail.

use crate::story::NodeClass;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Cause,
    Condition,
    Consequence,
    Advisory,
}

/// One declared finding.
#[derive(Debug, Clone, Copy)]
pub struct Declared {
    pub id: &'static str,
    pub catalog: Option<&'static str>,
    pub role: Role,
    /// The failure-graph nodes it explains besides the calls it names (`Finding::explain`).
    pub covers: &'static [NodeClass],
    /// A failure in its own right even when nothing else failed (a hang, a silent fallback).
    pub standalone: bool,
    /// Names a specific mechanism (beats a generic finding on the same root).
    pub specific: bool,
    pub doc: &'static str,
}

macro_rules! declare_findings {
    ($( $id:literal, $catalog:expr, $role:ident, [$($cover:ident),*], standalone $sa:literal, specific $sp:literal, $doc:literal; )*) => {
        /// Every finding a rule of this crate makes.
        pub const DECLARED: &[Declared] = &[
            $( Declared {
                id: $id,
                catalog: $catalog,
                role: Role::$role,
                covers: &[$(NodeClass::$cover),*],
                standalone: $sa,
                specific: $sp,
                doc: $doc,
            }, )*
        ];
    };
}

declare_findings! {
    "nccl-net-unavailable", Some("C01"), Cause, [], standalone false, specific true, "`NCCL_NET` forces a network that cannot initialise here";
    "unpaired-p2p", Some("C02"), Cause, [Mismatch], standalone true, specific true, "sends and receives do not pair up between ranks";
    "nccl-version-mismatch", Some("C03"), Cause, [], standalone true, specific true, "ranks run different NCCL versions";
    "cumem-import-invalid-device", Some("C04"), Cause, [], standalone false, specific true, "cuMem import fails with 101 across containers";
    "gdr-peermem-undetected", Some("C05"), Cause, [], standalone true, specific true, "NCCL < 2.23.4 does not find `nvidia_peermem`";
    "duplicate-gpu", Some("C06"), Cause, [], standalone true, specific true, "several ranks of one communicator on one GPU";
    "dev-shm-too-small", Some("C07"), Cause, [], standalone false, specific true, "`/dev/shm` too small for the shared-memory transport";
    "socket-ifname-no-match", Some("C08"), Cause, [], standalone false, specific true, "`NCCL_SOCKET_IFNAME` matches no interface";
    "cuda-driver-older-than-runtime", Some("C18"), Cause, [], standalone true, specific true, "CUDA driver older than the runtime";
    "cuda-driver-missing", Some("C18"), Cause, [], standalone false, specific true, "no NVIDIA driver available to the process (CUDA calls it an insufficient driver)";
    "collective-desync", Some("C19"), Cause, [Desync], standalone true, specific true, "ranks issued different collectives at one point of the communicator's collective order";
    "collective-size-mismatch", Some("C19"), Cause, [Mismatch], standalone true, specific true, "one collective issued with a different count, datatype, reduction or root on some ranks (the odd ranks are the finding's ranks; evidence `field`, `odd_ranks`)";
    "p2p-size-mismatch", Some("C19"), Cause, [Mismatch], standalone true, specific true, "a send and the receive it pairs with (k-th send from A to B, k-th receive at B from A) have different counts (the receiver is the finding's rank)";
    "peer-failure-seen-by-survivors", Some("C20"), Consequence, [], standalone false, specific false, "remote errors on ranks that survived a peer's failure";
    "two-libnccl-in-process", Some("C23"), Condition, [], standalone true, specific true, "two libnccl mapped in one process";
    "nccl-tuning-env-differs", Some("C26"), Cause, [], standalone true, specific true, "NCCL tuning variables differ across ranks";
    "nranks-disagreement", Some("C27"), Cause, [], standalone true, specific true, "ranks called init with different nranks";
    "local-rank-beyond-visible-gpus", Some("C28"), Cause, [], standalone false, specific true, "`LOCAL_RANK` ≥ the GPUs `CUDA_VISIBLE_DEVICES` leaves";
    "libnccl-not-loaded", Some("C35"), Cause, [], standalone true, specific true, "no libnccl could be loaded";
    "fatal-signal", None, Cause, [Signal], standalone true, specific false, "a rank received a fatal signal";
    "invalid-argument", None, Cause, [], standalone false, specific false, "NCCL rejected an argument (e.g. a NULL communicator)";
    "rank-ended-abruptly", None, Cause, [Vanished], standalone true, specific false, "a rank stopped without a clean exit and without an error of its own";
    "rank-left-early", None, Cause, [LeftEarly], standalone true, specific false, "a rank exited (any status, `exit` or `_exit`) while its peers still waited in an operation it never issued";
    "ranks-never-arrived", None, Cause, [], standalone true, specific false, "ranks of a communicator left no trace";
    "failing-rank-left-no-dump", None, Cause, [], standalone false, specific false, "every failure the dumps show echoes a failure on a rank that left no dump: that rank failed first, its cause cannot be seen";
    "communicator-used-from-several-threads", Some("C25"), Cause, [Behind, StuckInside], standalone true, specific true, "two threads inside calls on one communicator at once";
    "ranks-waiting-when-stopped", None, Consequence, [], standalone false, specific false, "after a failure, ranks without an error of their own that waited (inside or outside NCCL) until stopped, and how each ended";
    "unique-id-split", None, Cause, [], standalone true, specific true, "ranks waiting to form one communicator hold different uniqueIds";
    "stuck-outside-nccl", None, Cause, [Behind], standalone true, specific false, "hang: ranks stopped issuing collectives; the others wait for them";
    "stuck-inside-nccl", None, Cause, [StuckInside], standalone true, specific false, "hang: ranks stuck inside an NCCL operation";
    "late-rank", None, Advisory, [], standalone false, specific false, "advisory (contributing, explains no failure): ranks late to a communicator's collectives in the profiler's running aggregates: the SHORTEST GPU time per operation, since the others wait inside the collective for them (values `mean_gpu_ns`, `others_median_gpu_ns`, `ops_timed`, `busbw_gbps`; the waiting ranks as one fact: `median_gpu_ns`, `min_gpu_ns`, `max_gpu_ns`)";
    "nccl-env-differs", None, Condition, [], standalone false, specific false, "other NCCL variables differ across ranks";
    "library-differs", None, Condition, [], standalone false, specific false, "different NCCL plugins or CUDA libraries across ranks";
    "failing-ranks-differ", None, Condition, [], standalone false, specific false, "when no rule explains the failure with high confidence: the facts (host, NCCL version and path, environment, limits, devices, GPU) every failing process has and no healthy one has";
    "application-cuda-call-failed", None, Cause, [], standalone false, specific true, "a CUDA driver call the application made itself, outside any NCCL call, failed (e.g. a CUDA IPC import)";
    "peer-address-not-routable", Some("C09"), Cause, [], standalone true, specific true, "a connection or the bootstrap root used a link-local, virtual (veth/bridge) or several-hosts address";
    "no-route-between-hosts", Some("C09"), Cause, [], standalone true, specific true, "the peer's address is in no subnet of the connecting host's interfaces";
    "connection-blocked-between-hosts", Some("C10"), Cause, [], standalone true, specific true, "connections between hosts sharing a subnet were refused or dropped (firewall)";
    "peer-address-is-loopback", None, Cause, [], standalone true, specific false, "ranks on several hosts were told to connect to a loopback address";
    "peer-address-of-no-recorded-host", None, Cause, [], standalone true, specific false, "a connection failed to an address no recorded host has";
    "named-device-absent", None, Cause, [], standalone true, specific false, "the error names an HCA or network interface the host that printed it does not have (the present ones are listed)";
    "named-rank-out-of-range", None, Cause, [], standalone true, specific false, "the error names a rank or peer at or beyond the communicator's nranks";
    "named-device-not-visible", None, Cause, [], standalone true, specific false, "the error names a CUDA device ordinal beyond the GPUs the process can see (CUDA_VISIBLE_DEVICES, the driver's GPU list)";
    "unexplained-error", None, Cause, [], standalone false, specific false, "a failure no rule explains: the recorded call and NCCL's text, no invented cause";
    "cause-not-recorded", None, Cause, [Signal, Vanished, LeftEarly, Behind, Mismatch, Desync, StuckInside], standalone false, specific false, "the earliest failure of a failed job that no finding explains: what failed first, that its cause was not recorded, and which fact would decide it (never a report of a failed job without a primary)";
}

/// The declaration of `id`, when a rule of this crate declares it.
pub fn declared(id: &str) -> Option<&'static Declared> {
    DECLARED.iter().find(|d| d.id == id)
}

/// Ids made from a knowledge file's entry: `prefix<entry>`.
pub const FAMILIES: &[(&str, &str)] = &[
    (
        "known-<entry>",
        "a known bug or behaviour change of the recorded NCCL version matches the symptom (`<entry>`: its id in `diagnose/knowledge/nccl-versions.toml`; `known-crash-bugs`, `known-hang-bugs`... group weak matches of one impact)",
    ),
    (
        "invariant-<id>",
        "a violated invariant of NCCL's contract (`<id>`: its declaration in `diagnose/src/invariants/`, with its family, statement, the facts it reads and its source), a candidate cause even when no knowledge entry knows the error text; ranked after the specific rules, nearest scope first",
    ),
    (
        "nccl-message-<entry>",
        "a failure no catalog rule explains whose text NCCL's message knowledge classifies (`<entry>`: its id in `diagnose/knowledge/messages.toml`): meaning, subsystem, causes ranked by the recorded facts",
    ),
];

/// The id table of `docs/report-json.md` ("Finding ids"), made from the declarations, the error
/// signatures and the id families: catalog cases in catalog order, then the rest as declared.
pub fn id_table() -> String {
    let mut rows: Vec<(Option<&str>, &str, &str)> = DECLARED
        .iter()
        .map(|d| (d.catalog, d.id, d.doc))
        .chain(
            super::signatures::SIGNATURES
                .iter()
                .map(|s| (Some(s.catalog), s.id, s.doc)),
        )
        .collect();
    // Stable: within a case, and for ids without one, the declaration order stays.
    rows.sort_by_key(|r| match r.0 {
        Some(c) => (0, c[1..].parse::<u32>().unwrap_or(u32::MAX)),
        None => (1, 0),
    });
    let mut out = String::from("| `id` | `catalog` | what |\n|---|---|---|\n");
    for (catalog, id, doc) in rows {
        match catalog {
            Some(c) => out.push_str(&format!("| `{id}` | {c} | {doc} |\n")),
            None => out.push_str(&format!("| `{id}` | | {doc} |\n")),
        }
    }
    for (family, doc) in FAMILIES {
        out.push_str(&format!("| `{family}` | | {doc} |\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/report-json.md`'s id table is this registry's (`UPDATE_DOCS=1` rewrites it).
    #[test]
    fn the_docs_id_table_is_generated_from_the_registry() {
        const BEGIN: &str = "<!-- finding-ids:begin (generated from diagnose/src/rules/registry.rs: UPDATE_DOCS=1 cargo test -p ncclshim-diagnose --lib registry) -->\n";
        const END: &str = "<!-- finding-ids:end -->";
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/report-json.md");
        let doc = std::fs::read_to_string(&path).expect("docs/report-json.md");
        let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
            panic!("docs/report-json.md has no finding-ids markers");
        };
        let table = id_table();
        if std::env::var_os("UPDATE_DOCS").is_some() {
            let new = format!("{}{}{}", &doc[..b + BEGIN.len()], table, &doc[e..]);
            std::fs::write(&path, new).expect("write docs/report-json.md");
            return;
        }
        assert_eq!(
            &doc[b + BEGIN.len()..e],
            table,
            "docs/report-json.md's id table is not the registry's: UPDATE_DOCS=1 cargo test -p ncclshim-diagnose --lib registry"
        );
    }

    #[test]
    fn signature_ids_are_not_declared_twice() {
        for s in super::super::signatures::SIGNATURES {
            assert!(
                declared(s.id).is_none(),
                "{} is a signature and declared",
                s.id
            );
        }
    }

    #[test]
    fn ids_are_unique() {
        let mut ids: Vec<&str> = DECLARED.iter().map(|d| d.id).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(n, ids.len());
    }
}
