//! Version awareness: for each process's recorded NCCL version, the known bugs and behaviour
//! changes of that version (knowledge/nccl-versions.toml) whose conditions hold and whose
//! symptoms the recording shows are named, with the release that fixed them and the remedy.
//!
//! How strongly an entry is claimed follows what matched:
//! - its text symptom, on an entry marked `specific` (the text identifies it): high confidence, and
//!   primary when no other primary finding already explains those failures;
//! - a text or CUDA-code symptom on a process meeting the entry's conditions (env, features, GPU):
//!   medium, contributing;
//! - only a return code, a fatal signal or a hang: the version *may* be the cause; all such entries
//!   of one impact (crash, hang...) are one low-confidence finding, so an old NCCL that segfaulted
//!   reads as "known crash bugs fixed in later releases", not as twenty findings; and only for
//!   processes no primary finding explains already.
//!
//! Informational entries (a reworded message, another return code) are version facts other rules
//! read; they are never findings here.

use crate::finding::registry::{self, Role};
use crate::finding::words::name_processes;
use crate::finding::{Confidence, Finding};
use crate::knowledge::bugs::{self, Change, EnvCondition, Feature, Impact, Kind, NcclVersion};
use crate::knowledge::codes::cuda_error_in_text;
use crate::knowledge::thresholds::thresholds;
use crate::model::{JobModel, ProcessModel};
use crate::rules::options::Options;
use crate::story::{NodeClass, Story};
use ncclshim_format::NcclResult;
use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// What matched, strongest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Strength {
    Strong,
    Medium,
    Weak,
}

/// One entry matched on one process.
struct Hit {
    process: usize,
    strength: Strength,
    /// Failing calls the entry explains (text / code / result matches).
    explains: Vec<usize>,
    /// What matched, for the evidence.
    why: Vec<String>,
}

pub fn check(job: &JobModel, story: &Story, options: &Options, found: &[Finding]) -> Vec<Finding> {
    let machines: BTreeSet<&str> = job.processes.iter().map(ProcessModel::machine).collect();
    let gpu_models: BTreeSet<&str> = job
        .processes
        .iter()
        .filter_map(|p| p.gpu()?.name.as_deref())
        .collect();
    let largest = job.comms.values().map(|c| c.nranks()).max().unwrap_or(0);
    // Ranks per machine, over the processes that joined a communicator.
    let mut per_machine: BTreeMap<&str, usize> = BTreeMap::new();
    for pm in job
        .processes
        .iter()
        .filter(|pm| pm.calls.iter().any(|c| c.is_init()))
    {
        *per_machine.entry(pm.machine()).or_default() += 1;
    }
    let counts: BTreeSet<usize> = per_machine.values().copied().collect();
    let job_features = JobFeatures {
        multi_node: machines.len() > 1,
        heterogeneous: gpu_models.len() > 1,
        large_scale: largest >= thresholds().large_scale.min_ranks,
        uneven_ranks_per_host: counts.len() > 1,
    };
    // The entries that describe a version, worked out once per version of the job: a job has
    // one or two, and parsing every entry's bounds for each of 16k processes was most of this
    // rule's time.
    let mut entries_of: BTreeMap<NcclVersion, Vec<usize>> = BTreeMap::new();
    for v in job
        .processes
        .iter()
        .filter_map(|pm| pm.nccl_version.and_then(NcclVersion::from_code))
    {
        entries_of.entry(v).or_insert_with(|| {
            bugs::changes()
                .iter()
                .enumerate()
                .filter(|(_, c)| !c.informational && c.applies_to(v))
                .map(|(i, _)| i)
                .collect()
        });
    }
    // The processes a hang holds, as the story tells it (inside NCCL on a communicator that
    // stopped, or behind the operation the others wait in).
    let stuck_processes = story.hung_processes(job, options.now_ns, options.stall_after_ns);
    // Each process is matched on its own (side by side: this rule runs after the others, on
    // one core, for every process of the job), then the hits are gathered per entry in
    // process order, as one loop over the processes would have.
    let per_process: Vec<Vec<(usize, Hit)>> = job
        .processes
        .par_iter()
        .enumerate()
        .map(|(p, pm)| {
            let Some(v) = pm.nccl_version.and_then(NcclVersion::from_code) else {
                return Vec::new();
            };
            let entries = &entries_of[&v];
            if entries.is_empty() {
                return Vec::new();
            }
            let features = features(pm, v, &job_features);
            let held = stuck_processes.contains(&p) || story.ends[p].is_abnormal();
            entries
                .iter()
                .filter(|&&i| conditions_hold(&bugs::changes()[i], pm, &features))
                .filter_map(|&i| Some((i, symptoms_match(&bugs::changes()[i], pm, p, held)?)))
                .collect()
        })
        .collect();
    // entry id → hits, in file order.
    let mut hits: BTreeMap<usize, Vec<Hit>> = BTreeMap::new();
    for (i, h) in per_process.into_iter().flatten() {
        hits.entry(i).or_default().push(h);
    }
    let primary_explained: BTreeSet<(usize, usize)> = found
        .iter()
        .filter(|f| f.role() == Role::Cause && f.specific())
        .flat_map(|f| f.explains.iter().copied())
        .collect();
    // A process another rule already explains as primary gets no "may be a known bug" guess: a
    // weak match under a clear cause would only blur it.
    let explained_processes: BTreeSet<usize> = found
        .iter()
        .filter(|f| f.role() == Role::Cause && f.specific())
        .flat_map(|f| f.process_ids.iter().copied())
        .collect();
    let mut out = Vec::new();
    let mut weak: BTreeMap<Impact, Vec<(&Change, Vec<Hit>)>> = BTreeMap::new();
    for (i, hs) in hits {
        let c = &bugs::changes()[i];
        let best = hs
            .iter()
            .map(|h| h.strength)
            .min()
            .unwrap_or(Strength::Weak);
        if best == Strength::Weak {
            let hs: Vec<Hit> = hs
                .into_iter()
                .filter(|h| !explained_processes.contains(&h.process))
                .collect();
            if !hs.is_empty() {
                weak.entry(c.impact).or_default().push((c, hs));
            }
            continue;
        }
        out.push(entry_finding(job, c, &hs, best, &primary_explained));
    }
    // "The version may be the cause" is worth saying only when nothing else explains the job:
    // beside a primary finding it would only blur the cause.
    let job_has_primary = found
        .iter()
        .chain(&out)
        .any(|f| f.role() == Role::Cause && !f.explains.is_empty());
    if !job_has_primary {
        for (impact, entries) in weak {
            out.push(weak_finding(job, impact, &entries));
        }
    }
    out
}

struct JobFeatures {
    multi_node: bool,
    heterogeneous: bool,
    large_scale: bool,
    uneven_ranks_per_host: bool,
}

fn env_is(pm: &ProcessModel, k: &str, v: &str) -> bool {
    pm.env_var(k)
        .is_some_and(|x| x.trim().eq_ignore_ascii_case(v))
}

fn any_text(pm: &ProcessModel, needle: &str) -> bool {
    pm.calls
        .iter()
        .any(|c| c.error_text.as_deref().is_some_and(|t| t.contains(needle)))
}

/// The features of a process, from what was recorded (calls, environment, libraries, host).
fn features(pm: &ProcessModel, v: NcclVersion, job: &JobFeatures) -> BTreeSet<Feature> {
    let calls: BTreeSet<&str> = pm.calls.iter().map(|c| c.name.as_ref()).collect();
    let called = |names: &[&str]| names.iter().any(|n| calls.contains(n));
    let libs = pm.libs.as_ref();
    let driver = libs.and_then(|l| l.cuda_driver);
    let runtime = libs.and_then(|l| l.cuda_runtime);
    let since = |id: &str| bugs::change(id).introduced().is_some_and(|i| i <= v);
    let mut f = BTreeSet::new();
    let mut add = |yes: bool, feat: Feature| {
        if yes {
            f.insert(feat);
        }
    };
    add(
        calls.iter().any(|n| n.starts_with("cuMem"))
            || env_is(pm, "NCCL_CUMEM_ENABLE", "1")
            || (!env_is(pm, "NCCL_CUMEM_ENABLE", "0")
                && since("cumem-default-on")
                && driver.is_none_or(|d| d >= 12000)),
        Feature::Cumem,
    );
    add(
        env_is(pm, "NCCL_CUMEM_HOST_ENABLE", "1")
            || (!env_is(pm, "NCCL_CUMEM_HOST_ENABLE", "0")
                && since("cumem-host-default-on")
                && driver.is_some_and(|d| d >= 12060)),
        Feature::CumemHost,
    );
    add(
        calls.iter().any(|n| n.starts_with("cuMulticast"))
            || env_is(pm, "NCCL_NVLS_ENABLE", "1")
            || any_text(pm, "NVLS"),
        Feature::Nvls,
    );
    add(
        env_is(pm, "NCCL_MNNVL_ENABLE", "1") || any_text(pm, "MNNVL"),
        Feature::Mnnvl,
    );
    let host = pm.host_facts.as_ref();
    add(
        env_is(pm, "NCCL_NET", "IB")
            || host.is_some_and(|h| !h.infiniband.is_empty() || h.dev_infiniband == Some(true))
            || any_text(pm, "NET/IB"),
        Feature::Ib,
    );
    add(env_is(pm, "NCCL_COLLNET_ENABLE", "1"), Feature::Collnet);
    add(called(&["ncclCommSplit", "ncclCommShrink"]), Feature::Split);
    add(
        pm.calls.iter().any(|c| c.returned(NcclResult::InProgress)),
        Feature::Nonblocking,
    );
    add(called(&["ncclSend", "ncclRecv"]), Feature::P2pOps);
    add(
        called(&["ncclCommRegister", "ncclCommWindowRegister"]),
        Feature::Registration,
    );
    let plugin_set = |k: &str| {
        pm.env_var(k)
            .is_some_and(|x| !x.trim().is_empty() && !x.trim().eq_ignore_ascii_case("none"))
    };
    add(
        pm.has_prof || plugin_set("NCCL_PROFILER_PLUGIN"),
        Feature::ProfilerPlugin,
    );
    add(
        plugin_set("NCCL_NET_PLUGIN")
            || libs.is_some_and(|l| l.plugins.iter().any(|p| p.contains("nccl-net"))),
        Feature::NetPlugin,
    );
    add(
        host.is_some_and(|h| h.container_runtime.is_some() || h.dockerenv),
        Feature::Container,
    );
    add(job.multi_node, Feature::MultiNode);
    add(job.large_scale, Feature::LargeScale);
    add(libs.is_some_and(|l| l.nccl_static), Feature::NcclStatic);
    add(job.heterogeneous, Feature::HeterogeneousGpus);
    add(job.uneven_ranks_per_host, Feature::UnevenRanksPerHost);
    add(
        matches!((driver, runtime), (Some(d), Some(r)) if d < r),
        Feature::DriverOlderThanRuntime,
    );
    add(
        host.is_some_and(|h| {
            h.peermem_exists("/sys/module/nvidia_peermem/version") == Some(true)
                && h.peermem_exists("memory_peers/nv_mem/version") == Some(false)
        }),
        Feature::PeermemModuleOnly,
    );
    add(
        called(&["ncclCommDestroy", "ncclCommAbort"]),
        Feature::DestroyedComm,
    );
    f
}

fn conditions_hold(c: &Change, pm: &ProcessModel, features: &BTreeSet<Feature>) -> bool {
    let env_ok = c.when.env.iter().all(|e| {
        EnvCondition::parse(e).is_some_and(|cond| {
            // Without a recorded environment nothing about it is known.
            pm.env.is_some() && cond.holds(pm.env_var(cond.name()))
        })
    });
    let gpu_ok = c.when.gpu_names.is_empty()
        || pm.gpus.iter().any(|g| {
            g.name
                .as_deref()
                .is_some_and(|n| c.when.gpu_names.iter().any(|x| n.contains(x.as_str())))
        });
    env_ok && gpu_ok && c.when.features.iter().all(|f| features.contains(f))
}

/// `held`: a hang holds the process, or it ended without choosing to (the story's word for
/// both), so a call of it that never returned is where it hung.
fn symptoms_match(c: &Change, pm: &ProcessModel, p: usize, held: bool) -> Option<Hit> {
    let s = &c.symptoms;
    let has_conditions =
        !c.when.env.is_empty() || !c.when.features.is_empty() || !c.when.gpu_names.is_empty();
    let mut hit = Hit {
        process: p,
        strength: Strength::Weak,
        explains: Vec::new(),
        why: Vec::new(),
    };
    let mut best: Option<Strength> = None;
    let mut note = |hit: &mut Hit, st: Strength, why: String| {
        best = Some(best.map_or(st, |b| b.min(st)));
        if !hit.why.contains(&why) {
            hit.why.push(why);
        }
    };
    for (i, call) in pm.calls.iter().enumerate() {
        if !call.failed() || !s.call_admitted(&call.name) {
            continue;
        }
        let text = call.error_text.as_deref().unwrap_or("");
        let by_text = !text.is_empty() && s.text_matches(text);
        let code = if call.is_cuda {
            Some(call.rc)
        } else {
            cuda_error_in_text(text).map(|e| e.number as i32)
        };
        let by_code = code.is_some_and(|n| s.cu_results.contains(&n));
        let by_result = !call.is_cuda && s.nccl_results.contains(&call.rc);
        if by_text {
            let st = if c.specific {
                Strength::Strong
            } else if has_conditions {
                Strength::Medium
            } else {
                Strength::Weak
            };
            note(&mut hit, st, call.describe());
            if st != Strength::Weak {
                hit.explains.push(i);
            }
        } else if by_code {
            let st = if has_conditions {
                Strength::Medium
            } else {
                Strength::Weak
            };
            note(&mut hit, st, call.describe());
            if st == Strength::Medium {
                hit.explains.push(i);
            }
        } else if by_result {
            note(&mut hit, Strength::Weak, call.describe());
        }
    }
    let made_calls = s.calls.is_empty() || pm.calls.iter().any(|x| s.call_admitted(&x.name));
    if made_calls {
        for &(signo, _) in &pm.signals {
            if s.signals.contains(&signo) {
                note(
                    &mut hit,
                    // A fatal signal the entry names, on a process meeting specific conditions.
                    if c.specific {
                        Strength::Medium
                    } else {
                        Strength::Weak
                    },
                    format!("fatal signal {}", crate::names::signal_name(signo)),
                );
            }
        }
    }
    if s.hang && held {
        if let Some((_, call)) = pm.in_flight_calls().find(|(_, x)| s.call_admitted(&x.name)) {
            // A specific entry whose job-level conditions hold (a layout, a feature) names the
            // hang's mechanism; without such conditions a hang only fits it.
            note(
                &mut hit,
                if c.specific && !c.when.features.is_empty() {
                    Strength::Strong
                } else if c.specific {
                    Strength::Medium
                } else {
                    Strength::Weak
                },
                format!("{} never returned", call.name),
            );
        }
    }
    hit.strength = best?;
    Some(hit)
}

fn version_line(job: &JobModel, hs: &[Hit]) -> Vec<String> {
    let mut by_version: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for h in hs {
        if let Some(v) = job.processes[h.process].nccl_version {
            by_version.entry(v).or_default().push(h.process);
        }
    }
    by_version
        .iter()
        .map(|(v, ps)| {
            format!(
                "NCCL {} on {}",
                crate::names::nccl_version_string(*v),
                name_processes(job, ps)
            )
        })
        .collect()
}

/// What the variables the entry depends on are set to, or default to in this version.
fn env_lines(job: &JobModel, c: &Change, hs: &[Hit]) -> Vec<String> {
    let mut vars: Vec<&str> = c
        .when
        .env
        .iter()
        .filter_map(|e| EnvCondition::parse(e).map(|x| x.name()))
        .collect();
    vars.extend(c.workaround.iter().filter_map(|w| w.split('=').next()));
    vars.sort_unstable();
    vars.dedup();
    let mut out = Vec::new();
    for var in vars {
        // value (or the version's default) → processes.
        let mut by_value: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for h in hs {
            let pm = &job.processes[h.process];
            let shown = match pm.env_var(var) {
                Some(x) => format!("{var}={x}"),
                None => {
                    let v = pm.nccl_version.and_then(NcclVersion::from_code);
                    match v.and_then(|v| bugs::default_for(var, v)) {
                        Some((d, _)) => format!("{var} unset (this version's default: {d})"),
                        None => format!("{var} unset"),
                    }
                }
            };
            by_value.entry(shown).or_default().push(h.process);
        }
        for (shown, ps) in by_value {
            out.push(format!("{shown} on {}", name_processes(job, &ps)));
        }
    }
    out
}

fn remedy(c: &Change) -> String {
    if c.workaround.is_empty() || c.workaround.iter().all(|w| c.remedy.contains(w.as_str())) {
        c.remedy.clone()
    } else {
        format!("{} Workaround: {}.", c.remedy, c.workaround.join(" "))
    }
}

fn entry_finding(
    job: &JobModel,
    c: &Change,
    hs: &[Hit],
    best: Strength,
    primary_explained: &BTreeSet<(usize, usize)>,
) -> Finding {
    let versions: BTreeSet<String> = hs
        .iter()
        .filter_map(|h| job.processes[h.process].nccl_version_text())
        .collect();
    let versions: Vec<String> = versions.into_iter().collect();
    let what = match c.kind {
        Kind::Bug => "a known bug",
        Kind::BehaviourChange => "a behaviour change",
        Kind::DefaultChange => "a changed default",
        Kind::Removal => "a removed feature",
    };
    let fixed = c
        .fixed_in
        .as_deref()
        .map(|f| format!(" (fixed in {f})"))
        .unwrap_or_default();
    let explains: Vec<(usize, usize)> = hs
        .iter()
        .flat_map(|h| h.explains.iter().map(move |&i| (h.process, i)))
        .collect();
    let already = !explains.is_empty() && explains.iter().all(|k| primary_explained.contains(k));
    // A strong match of a hang explains the ranks stuck in it (no call failed).
    let hang_cause = best == Strength::Strong && c.symptoms.hang && explains.is_empty();
    let primary = (best == Strength::Strong && !explains.is_empty() && !already) || hang_cause;
    // A strong match of the failing call is a cause; anything vaguer only a condition, never
    // primary over a cause. A strong match of a hang explains the ranks stuck in it.
    let member = registry::KNOWN_BUG.member(&c.id).role(if primary {
        Role::Cause
    } else {
        Role::Condition
    });
    let member = if hang_cause {
        member
            .covering(&[NodeClass::StuckInside, NodeClass::Behind])
            .specific()
    } else {
        member
    };
    let mut f = Finding::of_member(
        member,
        format!("NCCL {}: {what}: {}{fixed}", versions.join("/"), c.title),
        if best == Strength::Strong {
            Confidence::High
        } else {
            Confidence::Medium
        },
    )
    .remedy(&remedy(c));
    f.fixed_in = c.fixed_in.clone();
    for line in version_line(job, hs) {
        f.evidence(line);
    }
    for h in hs {
        f.involve(job, h.process);
        for w in &h.why {
            f.evidence(format!(
                "{}: {w}",
                crate::finding::words::who(job, h.process)
            ));
        }
    }
    for line in env_lines(job, c, hs) {
        f.evidence(line);
    }
    f.evidence(format!("source: {}", c.source));
    for (p, i) in explains {
        f.explain(p, i);
    }
    f
}

fn weak_finding(job: &JobModel, impact: Impact, entries: &[(&Change, Vec<Hit>)]) -> Finding {
    let all: Vec<&Hit> = entries.iter().flat_map(|(_, hs)| hs.iter()).collect();
    let mut versions: Vec<String> = all
        .iter()
        .filter_map(|h| job.processes[h.process].nccl_version_text())
        .collect();
    versions.sort();
    versions.dedup();
    let newest_fix = entries.iter().filter_map(|(c, _)| c.fixed_in()).max();
    let what = match impact {
        Impact::Crash => "crash",
        Impact::Hang => "hang",
        Impact::Corruption => "data-corruption",
        Impact::Error => "error",
        Impact::Leak => "leak",
        Impact::Performance => "performance",
        Impact::Info => "behaviour",
    };
    let mut f = Finding::of_member(
        registry::KNOWN_BUG
            .member(&format!("{what}-bugs"))
            .role(Role::Condition),
        format!(
            "NCCL {} has {} known {what} bug(s) that fit what was recorded{}",
            versions.join("/"),
            entries.len(),
            newest_fix
                .map(|v| format!(" (all fixed by {v})"))
                .filter(|_| entries.iter().all(|(c, _)| c.fixed_in.is_some()))
                .unwrap_or_default()
        ),
        Confidence::Low,
    )
    .remedy(&match newest_fix {
        Some(v) => format!(
            "If the failure is not explained otherwise, upgrade NCCL to {v} or newer; each entry below names its own workaround."
        ),
        None => "If the failure is not explained otherwise, try the workarounds of the entries below.".to_owned(),
    });
    if let Some(v) = newest_fix {
        f.fixed_in = Some(v.to_string());
    }
    let hs: Vec<Hit> = all
        .iter()
        .map(|h| Hit {
            process: h.process,
            strength: h.strength,
            explains: Vec::new(),
            why: h.why.clone(),
        })
        .collect();
    for line in version_line(job, &hs) {
        f.evidence(line);
    }
    for h in &all {
        f.involve(job, h.process);
        for w in &h.why {
            f.evidence(format!(
                "{}: {w}",
                crate::finding::words::who(job, h.process)
            ));
        }
    }
    for (c, _) in entries {
        f.evidence(format!(
            "{}: {}{} — {}",
            c.id,
            c.title,
            c.fixed_in
                .as_deref()
                .map(|v| format!(" (fixed in {v})"))
                .unwrap_or_default(),
            c.source
        ));
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{find_dumps, load_files};
    use crate::rules::diagnose;
    use std::path::Path;

    /// A model built from a real capture under tests/fixtures/real.
    fn real(name: &str) -> JobModel {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/real")
            .join(name);
        let files = find_dumps(&dir).expect("list");
        let loaded = load_files(&dir, &files, None);
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        JobModel::build(&loaded.dumps, |d| d.path.display().to_string())
    }

    /// The two real captures of one failure (no socket interface) under 2.21.5 and 2.32.3 return
    /// different codes; the version fact predicts which, from the version each recorded.
    #[test]
    fn the_version_fact_predicts_each_real_return_code() {
        let change = bugs::change("socket-missing-interface-rc");
        for (fixture, expect) in [("socket-ifname-cu11", 3), ("socket-ifname-cu12", 5)] {
            let job = real(fixture);
            let p = &job.processes[0];
            let v = NcclVersion::from_code(p.nccl_version.expect("version recorded")).unwrap();
            let c = p
                .calls
                .iter()
                .find(|c| c.failed())
                .expect("the failing ncclGetUniqueId");
            assert!(change
                .symptoms
                .text_matches(c.error_text.as_deref().unwrap()));
            let predicted = if change.applies_to(v) { 5 } else { 3 };
            assert_eq!((c.rc, predicted), (expect, expect), "{fixture} ({v})");
        }
    }

    /// Real failures that are no NCCL bug (no GPU / driver, a NULL communicator, no interface):
    /// the known-bug check stays quiet, though many entries apply to 2.21.5.
    #[test]
    fn real_failures_that_are_no_nccl_bug_name_none() {
        for fixture in [
            "init-no-gpu-cu11",
            "null-comm-cu12",
            "socket-ifname-cu11",
            "socket-ifname-cu12",
        ] {
            let job = real(fixture);
            let v = NcclVersion::from_code(job.processes[0].nccl_version.unwrap()).unwrap();
            let found = diagnose(&job);
            assert!(
                !found.iter().any(|f| registry::KNOWN_BUG.has(f.id())),
                "{fixture}: {:?}",
                found.iter().map(|f| f.id()).collect::<Vec<_>>()
            );
            if fixture.ends_with("cu11") {
                assert!(bugs::applying_to(v).filter(|c| !c.informational).count() > 20);
            }
        }
    }

    /// The real 2.21.5 capture, on a host whose kernel has only /sys/module/nvidia_peermem (the
    /// peermem bug's condition) and InfiniBand: the version-aware check names the bug and its
    /// fixed-in release through the same facts the dump records, while 2.32.3 is past the fix.
    #[test]
    fn a_real_2_21_capture_meets_the_peermem_bug_conditions() {
        let mut job = real("init-no-gpu-cu11");
        let h = job.processes[0]
            .host_facts
            .get_or_insert_with(Default::default);
        h.peermem = vec![
            ("/sys/module/nvidia_peermem/version".into(), true),
            ("/sys/kernel/mm/memory_peers/nv_mem/version".into(), false),
        ];
        h.infiniband = vec!["mlx5_0".into()];
        let v = NcclVersion::from_code(job.processes[0].nccl_version.unwrap()).unwrap();
        let feats = features(
            &job.processes[0],
            v,
            &JobFeatures {
                multi_node: false,
                heterogeneous: false,
                large_scale: false,
                uneven_ranks_per_host: false,
            },
        );
        let c = bugs::change("peermem-kernel-6.6");
        assert!(c.applies_to(v) && conditions_hold(c, &job.processes[0], &feats));
        assert!(!c.applies_to(NcclVersion::parse("2.32.3").unwrap()));
    }

    #[test]
    fn the_cuda_error_inside_the_real_text_is_found() {
        let job = real("init-no-gpu-cu11");
        let c = job.processes[0].calls.iter().find(|c| c.failed()).unwrap();
        let e = cuda_error_in_text(c.error_text.as_deref().unwrap()).unwrap();
        assert_eq!(e.name, "cudaErrorInsufficientDriver");
    }
}
