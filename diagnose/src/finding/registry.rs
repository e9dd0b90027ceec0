//! Every finding the rules can make, declared once: its id, catalog case, role in the job's
//! story, what kind of failure-graph node it explains, and one line for the docs
//! (`docs/report-json.md`'s id table is generated from this list). Each declaration is a
//! `static` ([`DUPLICATE_GPU`], ...): a rule makes its finding from that handle
//! (`Finding::new(&DUPLICATE_GPU, ...)`), never from a string, so an id cannot be misspelt,
//! undeclared or renamed after the finding is made.
//!
//! Findings whose id comes from the knowledge files (known bugs, NCCL messages) and from the
//! invariants are members of a declared [`Family`] (`known-<entry>`...): the family says the
//! prefix and the defaults, the entry comes from the data and is checked here
//! ([`Family::member`]), and the knowledge entry decides what differs (a known bug's match
//! strength its role, an invariant whether it is a failure on its own).
//!
//! Roles: a `Cause` may be primary when it explains a root of the story; a `Condition` (two
//! libraries, an environment that differs) only when no cause explains that root; a
//! `Consequence` never is; an `Advisory` never makes the report fail.

use crate::finding::reach::NodeClass;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Cause,
    Condition,
    Consequence,
    Advisory,
}

/// One declared finding. Its fields are read through its methods: a declaration is made here
/// and nowhere else.
#[derive(Debug)]
pub struct Declared {
    id: &'static str,
    catalog: Option<&'static str>,
    role: Role,
    /// The failure-graph nodes it explains besides the calls it names (`Finding::explain`).
    covers: &'static [NodeClass],
    /// A failure in its own right even when nothing else failed (a hang, a silent fallback).
    standalone: bool,
    /// Names a specific mechanism (beats a generic finding on the same root).
    specific: bool,
    doc: &'static str,
}

impl Declared {
    pub fn id(&self) -> &'static str {
        self.id
    }
    pub fn catalog(&self) -> Option<&'static str> {
        self.catalog
    }
    pub fn role(&self) -> Role {
        self.role
    }
    pub fn covers(&self) -> &'static [NodeClass] {
        self.covers
    }
    pub fn standalone(&self) -> bool {
        self.standalone
    }
    pub fn specific(&self) -> bool {
        self.specific
    }
    pub fn doc(&self) -> &'static str {
        self.doc
    }
}

macro_rules! declare_findings {
    ($( $name:ident = $id:literal, $catalog:expr, $role:ident, [$($cover:ident),*], standalone $sa:literal, specific $sp:literal, $doc:literal; )*) => {
        $(
            #[doc = $doc]
            pub static $name: Declared = Declared {
                id: $id,
                catalog: $catalog,
                role: Role::$role,
                covers: &[$(NodeClass::$cover),*],
                standalone: $sa,
                specific: $sp,
                doc: $doc,
            };
        )*
        /// Every finding a rule of this crate makes, in declaration order.
        pub static DECLARED: &[&Declared] = &[ $( &$name, )* ];
    };
}

declare_findings! {
    NCCL_NET_UNAVAILABLE = "nccl-net-unavailable", Some("C01"), Cause, [], standalone false, specific true, "`NCCL_NET` forces a network that cannot initialise here";
    UNPAIRED_P2P = "unpaired-p2p", Some("C02"), Cause, [Mismatch], standalone true, specific true, "sends and receives do not pair up between ranks";
    NCCL_VERSION_MISMATCH = "nccl-version-mismatch", Some("C03"), Cause, [], standalone true, specific true, "ranks run different NCCL versions";
    CUMEM_IMPORT_INVALID_DEVICE = "cumem-import-invalid-device", Some("C04"), Cause, [], standalone false, specific true, "cuMem import fails with 101 across containers";
    GDR_PEERMEM_UNDETECTED = "gdr-peermem-undetected", Some("C05"), Cause, [], standalone true, specific true, "NCCL < 2.23.4 does not find `nvidia_peermem`";
    DUPLICATE_GPU = "duplicate-gpu", Some("C06"), Cause, [], standalone true, specific true, "several ranks of one communicator on one GPU";
    DEV_SHM_TOO_SMALL = "dev-shm-too-small", Some("C07"), Cause, [], standalone false, specific true, "`/dev/shm` too small for the shared-memory transport";
    SOCKET_IFNAME_NO_MATCH = "socket-ifname-no-match", Some("C08"), Cause, [], standalone false, specific true, "`NCCL_SOCKET_IFNAME` matches no interface";
    CUDA_DRIVER_OLDER_THAN_RUNTIME = "cuda-driver-older-than-runtime", Some("C18"), Cause, [], standalone true, specific true, "CUDA driver older than the runtime";
    CUDA_DRIVER_MISSING = "cuda-driver-missing", Some("C18"), Cause, [], standalone false, specific true, "no NVIDIA driver available to the process (CUDA calls it an insufficient driver)";
    COLLECTIVE_DESYNC = "collective-desync", Some("C19"), Cause, [Desync], standalone true, specific true, "ranks issued different collectives at one point of the communicator's collective order";
    COLLECTIVE_SIZE_MISMATCH = "collective-size-mismatch", Some("C19"), Cause, [Mismatch], standalone true, specific true, "one collective issued with a different count, datatype, reduction or root on some ranks (the odd ranks are the finding's ranks; evidence `field`, `odd_ranks`)";
    P2P_SIZE_MISMATCH = "p2p-size-mismatch", Some("C19"), Cause, [Mismatch], standalone true, specific true, "a send and the receive it pairs with (k-th send from A to B, k-th receive at B from A) have different counts (the receiver is the finding's rank)";
    PEER_FAILURE_SEEN_BY_SURVIVORS = "peer-failure-seen-by-survivors", Some("C20"), Consequence, [], standalone false, specific false, "remote errors on ranks that survived a peer's failure";
    TWO_LIBNCCL_IN_PROCESS = "two-libnccl-in-process", Some("C23"), Condition, [], standalone true, specific true, "two libnccl mapped in one process";
    NCCL_TUNING_ENV_DIFFERS = "nccl-tuning-env-differs", Some("C26"), Cause, [], standalone true, specific true, "NCCL tuning variables differ across ranks";
    NRANKS_DISAGREEMENT = "nranks-disagreement", Some("C27"), Cause, [], standalone true, specific true, "ranks called init with different nranks";
    LOCAL_RANK_BEYOND_VISIBLE_GPUS = "local-rank-beyond-visible-gpus", Some("C28"), Cause, [], standalone false, specific true, "`LOCAL_RANK` ≥ the GPUs `CUDA_VISIBLE_DEVICES` leaves";
    LIBNCCL_NOT_LOADED = "libnccl-not-loaded", Some("C35"), Cause, [], standalone true, specific true, "no libnccl could be loaded";
    FATAL_SIGNAL = "fatal-signal", None, Cause, [Signal], standalone true, specific false, "a rank received a fatal signal";
    INVALID_ARGUMENT = "invalid-argument", None, Cause, [], standalone false, specific false, "NCCL rejected an argument (e.g. a NULL communicator)";
    RANK_ENDED_ABRUPTLY = "rank-ended-abruptly", None, Cause, [Vanished], standalone true, specific false, "a rank stopped without a clean exit and without an error of its own";
    RANK_LEFT_EARLY = "rank-left-early", None, Cause, [LeftEarly], standalone true, specific false, "a rank exited (any status, `exit` or `_exit`) while its peers still waited in an operation it never issued";
    RANKS_NEVER_ARRIVED = "ranks-never-arrived", None, Cause, [], standalone true, specific false, "ranks of a communicator left no trace";
    FAILING_RANK_LEFT_NO_DUMP = "failing-rank-left-no-dump", None, Cause, [], standalone false, specific false, "every failure the dumps show echoes a failure on a rank that left no dump: that rank failed first, its cause cannot be seen";
    COMMUNICATOR_USED_FROM_SEVERAL_THREADS = "communicator-used-from-several-threads", Some("C25"), Cause, [Behind, StuckInside], standalone true, specific true, "two threads inside calls on one communicator at once";
    RANKS_WAITING_WHEN_STOPPED = "ranks-waiting-when-stopped", None, Consequence, [], standalone false, specific false, "after a failure, ranks without an error of their own that waited (inside or outside NCCL) until stopped, and how each ended";
    UNIQUE_ID_SPLIT = "unique-id-split", None, Cause, [], standalone true, specific true, "ranks waiting to form one communicator hold different uniqueIds";
    STUCK_OUTSIDE_NCCL = "stuck-outside-nccl", None, Cause, [Behind], standalone true, specific false, "hang: ranks stopped issuing collectives; the others wait for them";
    STUCK_INSIDE_NCCL = "stuck-inside-nccl", None, Cause, [StuckInside], standalone true, specific false, "hang: ranks stuck inside an NCCL operation";
    LATE_RANK = "late-rank", None, Advisory, [], standalone false, specific false, "advisory (contributing, explains no failure): ranks late to a communicator's collectives in the profiler's running aggregates: the SHORTEST GPU time per operation, since the others wait inside the collective for them (values `mean_gpu_ns`, `others_median_gpu_ns`, `ops_timed`, `busbw_gbps`; the waiting ranks as one fact: `median_gpu_ns`, `min_gpu_ns`, `max_gpu_ns`)";
    NCCL_ENV_DIFFERS = "nccl-env-differs", None, Condition, [], standalone false, specific false, "other NCCL variables differ across ranks";
    LIBRARY_DIFFERS = "library-differs", None, Condition, [], standalone false, specific false, "different NCCL plugins or CUDA libraries across ranks";
    FAILING_RANKS_DIFFER = "failing-ranks-differ", None, Condition, [], standalone false, specific false, "when no rule explains the failure with high confidence: the facts (host, NCCL version and path, environment, limits, devices, GPU) every failing process has and no healthy one has";
    APPLICATION_CUDA_CALL_FAILED = "application-cuda-call-failed", None, Cause, [], standalone false, specific true, "a CUDA driver call the application made itself, outside any NCCL call, failed (e.g. a CUDA IPC import)";
    PEER_ADDRESS_NOT_ROUTABLE = "peer-address-not-routable", Some("C09"), Cause, [], standalone true, specific true, "a connection or the bootstrap root used a link-local, virtual (veth/bridge) or several-hosts address";
    NO_ROUTE_BETWEEN_HOSTS = "no-route-between-hosts", Some("C09"), Cause, [], standalone true, specific true, "the peer's address is in no subnet of the connecting host's interfaces";
    CONNECTION_BLOCKED_BETWEEN_HOSTS = "connection-blocked-between-hosts", Some("C10"), Cause, [], standalone true, specific true, "connections between hosts sharing a subnet were refused or dropped (firewall)";
    PEER_ADDRESS_IS_LOOPBACK = "peer-address-is-loopback", None, Cause, [], standalone true, specific false, "ranks on several hosts were told to connect to a loopback address";
    PEER_ADDRESS_OF_NO_RECORDED_HOST = "peer-address-of-no-recorded-host", None, Cause, [], standalone true, specific false, "a connection failed to an address no recorded host has";
    NAMED_DEVICE_ABSENT = "named-device-absent", None, Cause, [], standalone true, specific false, "the error names an HCA or network interface the host that printed it does not have (the present ones are listed)";
    NAMED_RANK_OUT_OF_RANGE = "named-rank-out-of-range", None, Cause, [], standalone true, specific false, "the error names a rank or peer at or beyond the communicator's nranks";
    NAMED_DEVICE_NOT_VISIBLE = "named-device-not-visible", None, Cause, [], standalone true, specific false, "the error names a CUDA device ordinal beyond the GPUs the process can see (CUDA_VISIBLE_DEVICES, the driver's GPU list)";
    UNEXPLAINED_ERROR = "unexplained-error", None, Cause, [], standalone false, specific false, "a failure no rule explains: the recorded call and NCCL's text, no invented cause";
    CAUSE_NOT_RECORDED = "cause-not-recorded", None, Cause, [Signal, Vanished, LeftEarly, Behind, Mismatch, Desync, StuckInside], standalone false, specific false, "the earliest failure of a failed job that no finding explains: what failed first, that its cause was not recorded, and which fact would decide it (never a report of a failed job without a primary)";
    // Recognised by NCCL's or CUDA's own words alone (`crate::rules::signatures`: which message
    // causes and CUresults make each).
    FABRIC_MANAGER_NOT_RUNNING = "fabric-manager-not-running", Some("C15"), Cause, [], standalone true, specific true, "CUDA not initialised: Fabric Manager not running";
    NVLS_MULTICAST_BIND_FAILED = "nvls-multicast-bind-failed", Some("C17"), Cause, [], standalone true, specific true, "NVLS multicast setup refused";
    ILLEGAL_MEMORY_ACCESS = "illegal-memory-access", Some("C21"), Cause, [], standalone true, specific true, "a kernel's illegal memory access surfacing through NCCL";
    INIT_DURING_GRAPH_CAPTURE = "init-during-graph-capture", Some("C24"), Cause, [], standalone true, specific true, "communicator created during CUDA graph capture";
    SHM_REMOVED_BY_SYSTEMD = "shm-removed-by-systemd", Some("C29"), Cause, [], standalone true, specific true, "NCCL's shared-memory file removed (systemd RemoveIPC)";
    CUMEM_HOST_PEER_UNSUPPORTED = "cumem-host-peer-unsupported", Some("C32"), Cause, [], standalone true, specific true, "cuMem host memory needs unsupported peer access";
    MALFORMED_TOPOLOGY_XML = "malformed-topology-xml", Some("C33"), Cause, [], standalone true, specific true, "the topology XML lacks mandatory attributes";
    IBV_CREATE_QP_FAILED = "ibv-create-qp-failed", Some("C11"), Cause, [], standalone true, specific true, "`ibv_create_qp` failed (locked-memory limit)";
    ROCE_GID_NOT_ROUTABLE = "roce-gid-not-routable", Some("C12"), Cause, [], standalone true, specific true, "RoCE retry-exceeded (status 12) with a link-local GID selected (`NCCL_IB_GID_INDEX`, or index 0 before NCCL 2.21) in the recorded GID table";
    GDR_LOCAL_PROTECTION = "gdr-local-protection", Some("C14"), Cause, [], standalone true, specific true, "IB local protection error (status 4) with GPUDirect RDMA (peermem loaded): ACS / IOMMU on the PCIe path";
    NVLS_FABRIC_MANAGER_RESTARTED = "nvls-fabric-manager-restarted", Some("C16"), Cause, [], standalone true, specific true, "NVLS multicast setup (`cuMulticast*`) fails with 'invalid argument' on an NVSwitch node with ≥ 3 GPUs: Fabric Manager restarted without a GPU reset";
    OFI_DEVICES_NOT_EXPOSED = "ofi-devices-not-exposed", Some("C22"), Cause, [], standalone true, specific true, "the OFI network plugin (aws-ofi-nccl) is loaded but the host has no `/dev/infiniband`";
    IB_LINK_FAILED = "ib-link-failed", Some("C30"), Cause, [], standalone true, specific true, "an IB/RoCE link failed mid-run: port error event, or retry-exceeded after a long healthy history or with a port not ACTIVE";
    NET_PLUGIN_INCOMPATIBLE = "net-plugin-incompatible", Some("C34"), Cause, [], standalone true, specific true, "the loaded network plugin (`libnccl-net*.so`) does not fit this NCCL / libfabric";
}

/// The declaration of `id`, when a rule of this crate declares it.
pub fn declared(id: &str) -> Option<&'static Declared> {
    DECLARED.iter().copied().find(|d| d.id == id)
}

/// Findings named by a knowledge entry: `<prefix><entry>`, with the family's defaults.
#[derive(Debug)]
pub struct Family {
    /// `known-<entry>`, as the docs show it.
    pattern: &'static str,
    prefix: &'static str,
    role: Role,
    standalone: bool,
    doc: &'static str,
}

/// A known bug or behaviour change of the recorded NCCL version (`diagnose/knowledge/nccl-versions.toml`).
pub static KNOWN_BUG: Family = Family {
    pattern: "known-<entry>",
    prefix: "known-",
    role: Role::Condition,
    standalone: true,
    doc: "a known bug or behaviour change of the recorded NCCL version matches the symptom (`<entry>`: its id in `diagnose/knowledge/nccl-versions.toml`; `known-crash-bugs`, `known-hang-bugs`... group weak matches of one impact)",
};

/// A violated invariant of NCCL's contract (`crate::invariants`).
pub static INVARIANT: Family = Family {
    pattern: "invariant-<id>",
    prefix: "invariant-",
    role: Role::Cause,
    standalone: true,
    doc: "a violated invariant of NCCL's contract (`<id>`: its declaration in `diagnose/src/invariants/`, with its family, statement, the facts it reads and its source), a candidate cause even when no knowledge entry knows the error text; ranked after the specific rules, nearest scope first",
};

/// A failure whose text NCCL's message knowledge classifies (`diagnose/knowledge/messages.toml`).
pub static NCCL_MESSAGE: Family = Family {
    pattern: "nccl-message-<entry>",
    prefix: "nccl-message-",
    role: Role::Cause,
    standalone: true,
    doc: "a failure no catalog rule explains whose text NCCL's message knowledge classifies (`<entry>`: its id in `diagnose/knowledge/messages.toml`): meaning, subsystem, causes ranked by the recorded facts",
};

/// Every family, in the order the docs list them.
pub static FAMILIES: &[&Family] = &[&KNOWN_BUG, &INVARIANT, &NCCL_MESSAGE];

/// Whether `entry` can name a member: a knowledge id, lowercase words of letters, digits and
/// dots joined by `-` (`init-failure-double-free-2.16`).
fn is_entry_id(entry: &str) -> bool {
    !entry.is_empty()
        && entry.split('-').all(|w| {
            !w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.')
        })
}

impl Family {
    pub fn pattern(&self) -> &'static str {
        self.pattern
    }

    /// The member named by knowledge entry `entry`, with the family's defaults. An entry that
    /// is not a knowledge id, or whose id is a declared finding's, is a fault of the data
    /// (checked over every entry by this module's tests) and panics in debug builds.
    pub fn member(&'static self, entry: &str) -> Member {
        let id = format!("{}{entry}", self.prefix);
        debug_assert!(is_entry_id(entry), "{id}: not a knowledge id");
        debug_assert!(
            declared(&id).is_none(),
            "{id}: a member's id is a declared finding's"
        );
        Member {
            id,
            catalog: None,
            role: self.role,
            covers: &[],
            standalone: self.standalone,
            specific: false,
        }
    }

    /// Whether `id` names a member of this family.
    pub fn has(&self, id: &str) -> bool {
        id.strip_prefix(self.prefix).is_some_and(is_entry_id)
    }
}

/// A family member's declaration, made from its knowledge entry (`Family::member`): what the
/// entry says that the family leaves open.
#[derive(Debug, Clone)]
pub struct Member {
    id: String,
    catalog: Option<&'static str>,
    role: Role,
    covers: &'static [NodeClass],
    standalone: bool,
    specific: bool,
}

impl Member {
    /// The catalog case the entry names.
    pub fn catalog(mut self, catalog: Option<&'static str>) -> Self {
        self.catalog = catalog;
        self
    }
    /// Its role, as the entry and the match decide it.
    pub fn role(mut self, role: Role) -> Self {
        self.role = role;
        self
    }
    /// The failure-graph nodes it explains besides its calls (an invariant: what it reaches;
    /// a known hang bug matched strongly: the ranks stuck in it).
    pub fn covering(mut self, covers: &'static [NodeClass]) -> Self {
        self.covers = covers;
        self
    }
    /// It names a specific mechanism (beats a generic finding on the same root).
    pub fn specific(mut self) -> Self {
        self.specific = true;
        self
    }
    /// Whether it is a failure on its own.
    pub fn standalone(mut self, standalone: bool) -> Self {
        self.standalone = standalone;
        self
    }
    /// The parts a finding is made of: id, catalog, role, covers, standalone, specific.
    pub(crate) fn into_parts(
        self,
    ) -> (
        String,
        Option<&'static str>,
        Role,
        &'static [NodeClass],
        bool,
        bool,
    ) {
        (
            self.id,
            self.catalog,
            self.role,
            self.covers,
            self.standalone,
            self.specific,
        )
    }
}

/// Whether some rule of this crate can make a finding with id `id`: a declared one, or a
/// member of a family.
pub fn is_known_id(id: &str) -> bool {
    declared(id).is_some() || FAMILIES.iter().any(|f| f.has(id))
}

/// The id table of `docs/report-json.md` ("Finding ids"), made from the declarations and the
/// id families: catalog cases in catalog order, then the rest as declared.
pub fn id_table() -> String {
    let mut rows: Vec<&Declared> = DECLARED.to_vec();
    // Stable: within a case, and for ids without one, the declaration order stays.
    rows.sort_by_key(|d| match d.catalog {
        Some(c) => (0, c[1..].parse::<u32>().unwrap_or(u32::MAX)),
        None => (1, 0),
    });
    let mut out = String::from("| `id` | `catalog` | what |\n|---|---|---|\n");
    for d in rows {
        match d.catalog {
            Some(c) => out.push_str(&format!("| `{}` | {c} | {} |\n", d.id, d.doc)),
            None => out.push_str(&format!("| `{}` | | {} |\n", d.id, d.doc)),
        }
    }
    for f in FAMILIES {
        out.push_str(&format!("| `{}` | | {} |\n", f.pattern, f.doc));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/report-json.md`'s id table is this registry's (`UPDATE_DOCS=1` rewrites it).
    #[test]
    fn the_docs_id_table_is_generated_from_the_registry() {
        const BEGIN: &str = "<!-- finding-ids:begin (generated from diagnose/src/finding/registry.rs: UPDATE_DOCS=1 cargo test -p ncclshim-diagnose --lib registry) -->\n";
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
    fn ids_are_unique_and_well_formed() {
        let mut ids: Vec<&str> = DECLARED.iter().map(|d| d.id).collect();
        assert!(ids.iter().all(|id| is_entry_id(id)), "{ids:?}");
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(n, ids.len());
        for d in DECLARED {
            assert!(
                !FAMILIES.iter().any(|f| f.has(d.id)),
                "{} is declared and a family member's id",
                d.id
            );
        }
    }

    /// Every knowledge entry that names a finding makes a valid member id that no declared
    /// finding has: the ids from the data are checked against this one registry.
    #[test]
    fn every_knowledge_entry_names_a_valid_member() {
        let messages = crate::knowledge::messages::messages()
            .entries
            .iter()
            .map(|e| e.id.clone());
        let known = crate::knowledge::bugs::changes()
            .iter()
            .map(|c| c.id.clone());
        let invariants = crate::invariants::INVARIANTS
            .iter()
            .map(|i| i.id.to_owned());
        for (family, entries) in [
            (&NCCL_MESSAGE, messages.collect::<Vec<_>>()),
            (&KNOWN_BUG, known.collect()),
            (&INVARIANT, invariants.collect()),
        ] {
            assert!(!entries.is_empty(), "{}: no entries read", family.pattern);
            for entry in entries {
                let m = family.member(&entry);
                assert!(family.has(&m.id), "{}: not a member id", m.id);
                assert!(declared(&m.id).is_none(), "{} is declared too", m.id);
            }
        }
    }
}
