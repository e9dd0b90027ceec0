//! What the dumps could not tell, as the report's `evidence_gaps`: records lost to ring wrap,
//! dump files that could not grow or are damaged, communicators the table could not hold,
//! processes that ended without any mark, NCCL the shim could not see, ranks the launcher
//! promised that no dump shows, a job stopped while outside NCCL. Each gap is one fact, made by
//! its own function; [`evidence_gaps`] gathers them in the report's order.

use crate::finding::evidence;
use crate::finding::words::{count, rank_list};
use crate::finding::{Evidence, EvidenceKind, Finding};
use crate::model::{JobModel, LostOn, ProcessModel};
use crate::story::ending::Ending;
use crate::story::Story;
use std::collections::BTreeSet;

/// A gap of kind `what` (`values.gap`) saying `fact`.
fn gap(what: &str, fact: String) -> Evidence {
    Evidence::new(EvidenceKind::Gap, fact).value("gap", what)
}

/// The gaps in the evidence, one item per process and kind (records lost on threads are summed
/// per process; the thread with the most losses is named); the same gap on many processes
/// (every rank of a job killed at once) is one item with their ranks.
pub(super) fn evidence_gaps(
    job: &JobModel,
    story: &Story,
    findings: &[Finding],
    stand_ins: Option<&BTreeSet<usize>>,
) -> Vec<Evidence> {
    let mut out = Vec::new();
    let vanished: Vec<usize> = (0..job.processes.len())
        .filter(|&i| matches!(story.ends[i], Ending::Vanished { .. }))
        .collect();
    let mut flight_recorder_only = flight_recorder_only(job, &vanished, stand_ins);
    let stand_ins_only = flight_recorder_only.is_some();
    // Gathered first and joined in one pass: most of these facts hold for every rank of a
    // large job alike (see `evidence::add_all`).
    let mut per_process = Vec::new();
    for (i, p) in job.processes.iter().enumerate() {
        per_process.extend(records_lost(p).map(|g| g.of(job, i)));
        per_process.extend(dump_could_not_grow(p).map(|g| g.of(job, i)));
        per_process.extend(damaged_files(p).map(|g| g.of(job, i)));
        per_process.extend(communicators_not_kept(p).map(|g| g.of(job, i)));
        if matches!(story.ends[i], Ending::Vanished { .. }) {
            if stand_ins_only {
                // Said once, where the first unmarked process's gap would stand.
                per_process.extend(flight_recorder_only.take());
            } else {
                per_process.push(no_end_mark().of(job, i));
            }
        }
    }
    per_process.extend(nccl_calls_invisible(job));
    evidence::add_all(&mut out, per_process);
    if let Some(g) = launcher_ranks_without_dump(job) {
        evidence::add(&mut out, g);
    }
    if let Some(g) = stopped_outside_nccl(job, story, findings) {
        evidence::add(&mut out, g);
    }
    out
}

/// Ranks known from their Flight Recorder dump only have no end mark because the Flight
/// Recorder records none, not because they were killed: when every process without a mark
/// (`vanished`) is one, that is said instead of "SIGKILL, the OOM killer".
fn flight_recorder_only(
    job: &JobModel,
    vanished: &[usize],
    stand_ins: Option<&BTreeSet<usize>>,
) -> Option<Evidence> {
    stand_ins
        .filter(|s| !vanished.is_empty() && vanished.iter().all(|p| s.contains(p)))
        .map(|_| {
            let mut ranks: Vec<u32> = vanished
                .iter()
                .filter_map(|&p| job.processes[p].world_rank())
                .collect();
            ranks.sort_unstable();
            ranks.dedup();
            let shown: Vec<String> = ranks.iter().map(u32::to_string).collect();
            Evidence::new(
                EvidenceKind::Gap,
                format!(
                    "ranks {}: known from their PyTorch Flight Recorder dumps only: alive when the watchdog wrote them, how they ended is not recorded",
                    shown.join(", ")
                ),
            )
            .value("gap", "flight_recorder_only")
            .value("ranks", &ranks)
        })
}

/// Records a process lost to ring wrap, with the ring (or thread) that lost the most.
fn records_lost(p: &ProcessModel) -> Option<Evidence> {
    if p.lost == 0 {
        return None;
    }
    let worst = p.lost_by_thread.iter().max_by_key(|(_, _, n)| *n);
    let worst_text = worst
        .map(|(on, name, n)| match on {
            LostOn::Thread(tid) if name.is_empty() => {
                format!(", most on thread {tid}: {n}")
            }
            LostOn::Thread(tid) => format!(", most on thread {tid} ({name}): {n}"),
            LostOn::OverflowRing => format!(
                ", most on the shared overflow ring (threads beyond the dump's own \
                 rings): {n}"
            ),
            LostOn::KeepRing => format!(
                ", most on the keep ring (failures and communicator events, kept apart \
                 from routine calls): {n}"
            ),
        })
        .unwrap_or_default();
    // Rings the dump could not grow to hold send their threads to the small shared
    // overflow ring: the loss is then the full disk's, and more slots would not help.
    let text = if p.ring_alloc_failed > 0 {
        format!(
            "{} older records lost{worst_text}: the dump file could not grow (the disk or quota was full, or a file size limit was reached), so {} wrote to the small shared overflow ring, which wrapped; communicator identity, progress and failures are kept apart, but older calls are not (free space where NCCLSHIM_DIR points, or point it at a filesystem with room; raising NCCLSHIM_RING_SLOTS would not help)",
            p.lost,
            count(p.ring_alloc_failed as usize, "thread", "threads")
        )
    } else {
        format!(
            "{} older records lost to ring wrap{worst_text}; communicator identity, progress and failures are kept apart, but older calls are not (raise NCCLSHIM_RING_SLOTS to keep more)",
            p.lost
        )
    };
    let item = gap("records_lost", text)
        .value("dump_could_not_grow", p.ring_alloc_failed > 0)
        .value("records_lost", p.lost)
        .value(
            "most_on_thread",
            worst.and_then(|(on, _, _)| match on {
                LostOn::Thread(tid) => Some(*tid),
                _ => None,
            }),
        );
    Some(match worst.map(|(on, _, _)| on) {
        Some(LostOn::OverflowRing) => item.value("most_on_ring", "overflow"),
        Some(LostOn::KeepRing) => item.value("most_on_ring", "keep"),
        _ => item,
    })
}

/// The dump file could not grow, and no record was lost for it (else [`records_lost`] says so).
fn dump_could_not_grow(p: &ProcessModel) -> Option<Evidence> {
    if !p.alloc_failed || p.lost != 0 {
        return None;
    }
    Some(
        gap(
            "dump_could_not_grow",
            format!(
                "the dump file could not grow (the disk or quota was full, or a file size limit was reached){}; some records or error texts may be missing (free space where NCCLSHIM_DIR points, or point it at a filesystem with room)",
                if p.ring_alloc_failed > 0 {
                    format!(
                        ": {} wrote to the shared overflow ring",
                        count(p.ring_alloc_failed as usize, "thread", "threads")
                    )
                } else {
                    String::new()
                }
            ),
        )
        .value("threads_without_ring", p.ring_alloc_failed),
    )
}

/// A process's damaged dump files, each with the reader's first warning.
fn damaged_files(p: &ProcessModel) -> impl Iterator<Item = Evidence> + '_ {
    p.damaged.iter().map(|(file, warnings)| {
        let more = match warnings.len() {
            0 | 1 => String::new(),
            n => format!(
                " (and {})",
                count(n - 1, "more reader warning", "more reader warnings")
            ),
        };
        gap(
            "damaged_file",
            format!(
                "{file} is damaged: {}{more}; what it held past that point is not in this report (`ncclshim dump {file}` lists every warning)",
                warnings.first().map(String::as_str).unwrap_or("unreadable parts")
            ),
        )
        .value("file", file)
        .value("reader_warnings", warnings)
    })
}

/// Communicators beyond the dump's communicator table.
fn communicators_not_kept(p: &ProcessModel) -> Option<Evidence> {
    if p.comms_not_kept == 0 {
        return None;
    }
    Some(
        gap(
            "communicators_not_kept",
            format!(
                "{} beyond the communicator table's capacity known only from ring records",
                count(p.comms_not_kept as usize, "communicator", "communicators")
            ),
        )
        .value("communicators", p.comms_not_kept),
    )
}

/// A process that ended without any mark.
fn no_end_mark() -> Evidence {
    gap(
        "no_end_mark",
        "ended without a clean exit and without a recorded signal (SIGKILL, the OOM killer, or a node loss); its end is known only as after its last sign of life".to_owned(),
    )
}

/// NCCL the shim could not see (linked statically or renamed): the rest of the report on
/// those processes stands on the profiler plugin's and the driver's records alone.
fn nccl_calls_invisible(job: &JobModel) -> impl Iterator<Item = Evidence> + '_ {
    crate::visibility::invisible(job).into_iter().map(|v| {
        gap("nccl_calls_invisible", v.text.clone())
            .value("plugin_saw_nccl", v.plugin_saw_nccl)
            .value("nccl_object", &v.object)
            .value("remedy", crate::visibility::remedy())
            .of(job, v.process)
    })
}

/// A job stopped from outside (SIGTERM/SIGINT from a launcher or a user) while no rank was
/// inside NCCL, nothing failed and no finding speaks of the rank: it did not finish, yet
/// nothing NCCL-side shows why. Said, so a silent report is never read as "all was well".
fn stopped_outside_nccl(job: &JobModel, story: &Story, findings: &[Finding]) -> Option<Evidence> {
    if !job.failures.is_empty() {
        return None;
    }
    let stopped: Vec<usize> = job
        .processes
        .iter()
        .enumerate()
        .filter(|(i, p)| {
            matches!(story.ends[*i], Ending::Stopped { .. })
                && p.in_flight_calls().next().is_none()
                && !findings.iter().any(|f| f.process_ids.contains(i))
        })
        .map(|(i, _)| i)
        .collect();
    if stopped.is_empty() {
        return None;
    }
    Some(
        gap(
            "stopped_outside_nccl",
            "stopped by a termination signal while outside NCCL (its last calls had returned): the job did not finish, and nothing recorded in NCCL shows why (a GPU-side hang is visible only with the profiler plugin; a hang outside NCCL needs a stack of the process)".to_owned(),
        )
        .of_all(job, &stopped),
    )
}

/// Ranks the launcher's world size (WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE... whichever
/// `knowledge/launchers.toml` knows) promises but no dump shows, neither by its launcher rank nor
/// as a communicator member, and no communicator already lists as missing: a rank that never
/// reached NCCL (or whose dump was not collected) is otherwise invisible to the report.
fn launcher_ranks_without_dump(job: &JobModel) -> Option<Evidence> {
    use crate::knowledge::launchers::{lookup, Role};
    let mut world: Option<(u64, String)> = None;
    let mut seen: BTreeSet<u64> = BTreeSet::new();
    for p in &job.processes {
        if let Some(r) = p.world_rank() {
            seen.insert(u64::from(r));
        }
        let Some(env) = p.env.as_ref() else {
            continue;
        };
        if let Some(r) = lookup(env, Role::GlobalRank).and_then(|v| v.number()) {
            seen.insert(r);
        }
        if let Some(v) = lookup(env, Role::WorldSize) {
            if let Some(n) = v.number() {
                if world.as_ref().is_none_or(|(m, _)| n > *m) {
                    world = Some((n, v.shown()));
                }
            }
        }
    }
    let (n, shown) = world?;
    let listed: BTreeSet<u64> = job
        .comms
        .values()
        .flat_map(|c| c.missing())
        .map(u64::from)
        .collect();
    // A bound on what is listed, so a garbled variable cannot make the report enumerate billions.
    let absent: Vec<u32> = (0..n.min(1 << 20))
        .filter(|r| !seen.contains(r) && !listed.contains(r))
        .filter_map(|r| u32::try_from(r).ok())
        .collect();
    if absent.is_empty() {
        return None;
    }
    Some(
        Evidence::new(
            EvidenceKind::Gap,
            format!(
                "the launcher's {shown} names ranks 0-{}; no dump shows {} {} (never started, failed before reaching NCCL, or its dump was not collected)",
                n - 1,
                if absent.len() == 1 { "rank" } else { "ranks" },
                rank_list(&absent)
            ),
        )
        .value("gap", "launcher_ranks_without_dump")
        .value("world_size", n)
        .value("ranks_missing", &absent),
    )
}
