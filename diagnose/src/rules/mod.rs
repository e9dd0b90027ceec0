//! The rule set. Each rule reads the [`JobModel`] (and the job's [`Story`]) and returns findings
//! that quote what was recorded; [`diagnose`] runs them all, gives every failure no rule explains
//! an evidence-only finding ([`unknown`]), and lets the verdict ([`verdict`]) decide which finding
//! is primary (the one that explains the earliest failure in the job when no rule claims it
//! outright).
//!
//! The rules are grouped by topic, one folder each, whose `mod.rs` says what the topic covers and
//! which failure-catalog cases its rules implement:
//! - [`init`]: communicator init (versions, duplicate GPUs, nranks, local rank, uniqueIds, ranks
//!   that never arrived);
//! - [`install`]: libnccl missing or twice, driver vs runtime, library differences, known bugs of
//!   the recorded version;
//! - [`network`]: a network NCCL cannot initialise, interface filters, peer addresses, survivors
//!   of a dead peer;
//! - [`cuda`]: cuMem imports, GPUDirect RDMA, `/dev/shm`, the application's own CUDA calls;
//! - [`hang`]: stuck inside or outside NCCL, transport hangs, waiting and late ranks, one
//!   communicator used from several threads;
//! - [`mismatch`]: unpaired send/recv, collective desync;
//! - [`config`]: NCCL variables differing across ranks, refused arguments, what only the failing
//!   processes have;
//! - [`process`]: how processes ended (fatal signal, abrupt end, left early) and size mismatches
//!   read off the story.
//!
//! The catalog case is metadata, not a file name: the label in [`RULES`], `catalog` in the
//! finding registry ([`registry`]), and "Catalog CNN" in the rule module's `//!` header. Besides
//! the topics, at this level: checks that read every other rule's findings and belong to no one
//! topic ([`cross_reference`]: the identifiers an error text names; [`unknown`]: the
//! evidence-only finding), the error-signature rules read from the knowledge files
//! ([`signatures`]), how rules read NCCL's texts ([`text`]), the user's [`options`], and the
//! [`verdict`]. The checks that read the others' findings run after them in the order
//! [`META_RULES`] declares. What the rules make (findings, evidence, the registry) is
//! `crate::finding`'s, below them.

pub mod config;
pub mod cross_reference;
pub mod cuda;
pub mod hang;
pub mod init;
pub mod install;
pub mod mismatch;
pub mod network;
pub mod options;
pub mod process;
pub mod signatures;
pub mod text;
pub mod unknown;
pub mod verdict;

// What the rules make lives below them (`crate::finding`): named here too for the callers of
// the rule set (the rules themselves import it from there).
pub use crate::finding::registry;
pub use crate::finding::words::{name_processes, rank_list, who};
pub use crate::finding::{Confidence, Evidence, EvidenceKind, Finding, ProcessRef, Severity};
pub use options::Options;

use crate::model::JobModel;
use crate::story::Story;
use rayon::prelude::*;

type RuleFn = fn(&JobModel, &Story, &Options) -> Vec<Finding>;

/// Every rule, in the order their findings are listed when equally ranked. The label is the
/// failure-catalog case the rule implements (`docs/catalog.md`), or a short name for a rule that
/// is not one case: the case is the rule's metadata here and in its module header, not its file
/// name (the modules are grouped by topic).
pub const RULES: &[(&str, RuleFn)] = &[
    ("C01", |j, _, _| network::net_ib::check(j)),
    ("C02", |j, _, _| mismatch::unpaired_p2p::check(j)),
    ("C03", |j, _, _| init::version_mismatch::check(j)),
    ("C04", |j, _, _| cuda::cumem_import::check(j)),
    ("C05", |j, _, _| cuda::gdr_peermem::check(j)),
    ("C06", |j, _, _| init::duplicate_gpu::check(j)),
    ("C07", |j, _, _| cuda::dev_shm::check(j)),
    ("C08", |j, _, _| network::socket_ifname::check(j)),
    ("C18", |j, _, _| install::driver_runtime::check(j)),
    ("C19", |j, s, _| mismatch::desync::check(j, s)),
    ("C19", |j, s, _| {
        process::story_findings::size_mismatch(j, s)
    }),
    ("app-cuda", |j, _, _| cuda::app_cuda::check(j)),
    ("C20", |j, s, _| network::dead_peer::check(j, s)),
    ("C23", |j, _, _| install::two_libnccl::check(j)),
    ("C26", |j, _, _| config::env_tuning::check(j)),
    ("C27", |j, _, _| init::nranks::check(j)),
    ("C28", |j, _, _| init::local_rank::check(j)),
    ("C35", |j, _, _| install::no_libnccl::check(j)),
    ("signatures", |j, _, _| signatures::check(j)),
    ("signal", |j, s, _| process::fatal_signal::check(j, s)),
    ("invalid-arg", |j, _, _| config::invalid_argument::check(j)),
    ("abrupt", |j, s, _| process::abrupt_end::check(j, s)),
    ("left-early", |j, s, _| {
        process::story_findings::left_early(j, s)
    }),
    ("missing", |j, s, _| init::missing_ranks::check(j, s)),
    ("C09-C10", |j, s, _| network::network_path::check(j, s)),
    ("C25", |j, _, _| hang::concurrent_comm::check(j)),
    ("waiting", |j, s, _| hang::waiting_ranks::check(j, s)),
    ("uid", |j, _, _| init::uid_split::check(j)),
    ("stuck", |j, s, o| {
        hang::stuck::check(j, s, o.now_ns, o.stall_after_ns)
    }),
    ("late", |j, _, _| hang::late_rank::check(j)),
    ("env", |j, _, _| config::env_diff::check(j)),
    ("libs", |j, _, _| install::lib_diff::check(j)),
];

type MetaRuleFn = fn(&JobModel, &Story, &Options, &[Finding]) -> Vec<Finding>;

/// The checks that read the candidates made before them (what they explain, never their
/// severity), in this order: each sees every finding of [`RULES`] and of the meta-rules above
/// it. The identifiers in an unexplained failure's text; known bugs of the version where the
/// failing call matches them; every failure still unexplained; what only the failing processes
/// have when no clear cause covers them.
pub const META_RULES: &[(&str, MetaRuleFn)] = &[
    ("identifiers", |j, _, _, fs| cross_reference::check(j, fs)),
    ("bugs", install::known_bug::check),
    ("unexplained", |j, _, _, fs| unknown::check(j, fs)),
    ("differential", |j, _, _, fs| {
        config::differential::check(j, fs)
    }),
];

type AnnotateFn = fn(&JobModel, &mut Finding);

/// Evidence added to every finding once alike findings are merged, before the verdict: what
/// every identifier in an explained failure's text is in this job; which transport a transport
/// hang was in.
pub const ANNOTATIONS: &[(&str, AnnotateFn)] = &[
    ("identifiers", cross_reference::annotate),
    ("transport", |j, f| {
        if f.covers().contains(&crate::story::NodeClass::StuckInside) {
            hang::transport_hang::annotate(j, f);
        }
    }),
];

/// Runs every rule with the default [`Options`]; see [`diagnose_with`].
pub fn diagnose(job: &JobModel) -> Vec<Finding> {
    diagnose_with(job, &Options::default())
}

/// Tells the job's story once ([`Story::build`]), runs every rule over it and lets the verdict
/// ([`verdict::decide`]) choose what is primary; see [`diagnose_story`].
pub fn diagnose_with(job: &JobModel, options: &Options) -> Vec<Finding> {
    let story = Story::build(job);
    diagnose_story(job, &story, options)
}

/// The candidates of every rule ([`RULES`]) over `story`, then of the meta-rules
/// ([`META_RULES`], in their declared order), the violated invariants, alike findings merged,
/// the [`ANNOTATIONS`], then the verdict.
pub fn diagnose_story(job: &JobModel, story: &Story, options: &Options) -> Vec<Finding> {
    // The rules read the job and the story and nothing else, so they run side by side (each
    // walks every process: at 16k ranks, one after another they were seconds of one core);
    // their findings are gathered in the table's order, as before.
    let per_rule: Vec<Vec<Finding>> = RULES
        .par_iter()
        .map(|(_, f)| f(job, story, options))
        .collect();
    let mut findings: Vec<Finding> = per_rule.into_iter().flatten().collect();
    for (_, meta) in META_RULES {
        let more = meta(job, story, options, &findings);
        findings.extend(more);
    }
    // The violated invariants come last: they read no other finding, and no check above reads
    // theirs (a message's meaning stays readable beside the invariant that explains it).
    findings.extend(crate::invariants::findings(job, story));
    let mut findings = merge_alike(job, findings);
    findings.par_iter_mut().for_each(|f| {
        for (_, annotate) in ANNOTATIONS {
            annotate(job, f);
        }
    });
    verdict::decide(job, story, &mut findings);
    // A failed job always has a primary: when no finding explains a root of the story, one
    // that says what failed first and which fact would decide its cause.
    if let Some(f) = verdict::cause_not_recorded(job, story, &findings) {
        findings.push(f);
        verdict::decide(job, story, &mut findings);
    }
    // A violated invariant that explains none of the job's failures is no finding.
    findings.retain(|f| {
        f.invariant_scope.is_none() || f.severity == Severity::Primary || !f.accounts.is_empty()
    });
    findings
}

/// One finding per fact: findings alike in id, title and remedy (the same conclusion reached
/// for several ranks) become one, with every rank, its evidence and what it explains.
fn merge_alike(job: &JobModel, findings: Vec<Finding>) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::with_capacity(findings.len());
    let mut index: std::collections::HashMap<(String, String, String), usize> =
        std::collections::HashMap::new();
    for f in findings {
        let key = (f.id().to_owned(), f.title.clone(), f.remedy.clone());
        match index.get(&key) {
            Some(&i) => out[i].absorb(job, f),
            None => {
                index.insert(key, out.len());
                out.push(f);
            }
        }
    }
    out
}

/// The JSON contract check the CLI's integration tests use (`tests/support/schema.rs`).
#[cfg(test)]
#[path = "../../../tests/support/schema.rs"]
#[allow(dead_code)]
pub mod schema_support;

#[cfg(test)]
pub mod testutil {
    use super::*;
    use crate::load::{find_dumps, load_files};
    use ncclshim_fixtures::synth::Scenario;

    /// Builds a scenario in a fresh directory and returns its model and findings (whose report
    /// is held to the JSON contract, `docs/schema/report.schema.json`).
    pub fn analyze(hosts: &[&str], build: impl FnOnce(&mut Scenario)) -> (JobModel, Vec<Finding>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Scenario::new(dir.path(), hosts).expect("scenario");
        build(&mut s);
        drop(s);
        let files = find_dumps(dir.path()).expect("list");
        let loaded = load_files(dir.path(), &files, None);
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        let job = JobModel::build(&loaded.dumps, |d| d.path.display().to_string());
        let findings = diagnose(&job);
        let report = crate::report::Report::build(
            &job,
            &Story::build(&job),
            findings.clone(),
            Default::default(),
        );
        super::schema_support::report_json(&report);
        (job, findings)
    }

    pub fn find<'a>(fs: &'a [Finding], id: &str) -> Option<&'a Finding> {
        fs.iter().find(|f| f.id() == id)
    }

    #[test]
    fn rank_lists_compact() {
        assert_eq!(rank_list(&[3, 0, 1, 2, 5]), "0-3,5");
        assert_eq!(rank_list(&[]), "");
    }
}
