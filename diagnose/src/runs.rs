//! Telling apart the runs that share a dump directory (a job resubmitted into the same
//! `NCCLSHIM_DIR`, two `srun` steps of one allocation). A finding from one run must never
//! become the primary of another, so the report is about one run: the most recent unless
//! `--run` names another, and it says so.
//!
//! A run is named by its launcher (`slurm 812.0`, `torchelastic <id>`, ...: the dump header's
//! run id). Processes no launcher named join a run by what they share with its processes: a
//! communicator (the uniqueId hash every rank of it has) while their lifetimes overlap, or,
//! without any communicator, an overlapping lifetime. Processes with different launcher ids
//! are never joined. An id ncclshim gave (`ncclshim run` names the processes it starts when no
//! launcher did) names a wrapper, and one wrapper per rank is common (a hand-written launcher):
//! processes so named join by a communicator shared at the same time, as unnamed ones do.
//!
//! A launcher that restarts the job (torchrun `--max-restarts`, a requeued Slurm job) names
//! every attempt with the same id and reuses its ranks; the restart counters it sets
//! (`restart_count` in `knowledge/launchers.toml`) tell the attempts apart, and processes of two
//! attempts are never one run. `--run ID` then means the latest attempt of ID, `ID@N` attempt N.

use crate::model::{ProcessKey, ProcessModel};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One run found in the directory.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RunSummary {
    /// What `--run` takes: the launcher's id, or `unnamed-N` (N: order of start) without one.
    pub id: String,
    /// `slurm`, `torchelastic`, ... (empty for an unnamed run).
    pub source: String,
    pub processes: usize,
    pub hosts: usize,
    /// Earliest record of the run (wall clock, ns since the epoch; 0 if none).
    pub first_t_unix_ns: u64,
    /// Latest record or sign of life (wall clock).
    pub last_t_unix_ns: u64,
    /// This is the run the report is about.
    pub reported: bool,
    /// Which attempt of a restarted job (the launchers' restart counters added up), when a
    /// launcher counts restarts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u64>,
}

impl RunSummary {
    /// `slurm 812.0`, `torchelastic job-42 (restart 1)`, or `unnamed-1 (no launcher id)`.
    pub fn label(&self) -> String {
        let restart = self
            .attempt
            .map(|n| format!(" (restart {n})"))
            .unwrap_or_default();
        if self.source.is_empty() {
            format!("{}{restart} (no launcher id)", self.id)
        } else {
            format!("{} {}{restart}", self.source, self.id)
        }
    }

    /// What `--run` takes to name this run alone: `ID`, or `ID@N` for attempt N of a job
    /// restarted under one id.
    pub fn choice(&self) -> String {
        match self.attempt {
            Some(n) => format!("{}@{n}", self.id),
            None => self.id.clone(),
        }
    }
}

/// The processes (per-dump parts) of one run.
pub struct RunParts {
    pub summary: RunSummary,
    pub parts: Vec<ProcessModel>,
}

/// Union-find over per-dump parts, with the launcher ranks each set holds: one run has each
/// launcher rank (RANK, SLURM_PROCID, ...) once, so two sets holding the same rank by different
/// processes are two runs however close in time they ran.
struct Sets(
    /// Parent of each part.
    Vec<usize>,
    /// Per root: the (launcher rank, process) pairs its set holds.
    Vec<BTreeSet<(u64, ProcessKey)>>,
    /// Per root: the launcher run id of its set, if any part has one.
    Vec<Option<String>>,
);

/// The launcher's global rank of a process, from its recorded environment.
fn launcher_rank(p: &ProcessModel) -> Option<u64> {
    let env = p.env.as_ref()?;
    crate::knowledge::launchers::lookup(env, crate::knowledge::launchers::Role::GlobalRank)?
        .number()
}

impl Sets {
    fn new(parts: &[ProcessModel]) -> Self {
        Sets(
            (0..parts.len()).collect(),
            parts
                .iter()
                .map(|p| launcher_rank(p).map(|r| (r, p.key())).into_iter().collect())
                .collect(),
            parts
                .iter()
                .map(|p| (!p.run_id.is_empty()).then(|| p.run_id.clone()))
                .collect(),
        )
    }

    /// The launcher run id of the set holding `i`, if any of its parts has one.
    fn named(&mut self, i: usize) -> Option<String> {
        let r = self.find(i);
        self.2[r].clone()
    }

    /// Whether joining the sets of `a` and `b` would give one launcher rank to two processes.
    fn rank_clash(&mut self, a: usize, b: usize) -> bool {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra == rb {
            return false;
        }
        // Each of the smaller set's ranks looked up in the larger one: a run of 16k unnamed
        // processes joins one process at a time, and all pairs would be quadratic.
        let (small, large) = if self.1[ra].len() <= self.1[rb].len() {
            (&self.1[ra], &self.1[rb])
        } else {
            (&self.1[rb], &self.1[ra])
        };
        small.iter().any(|(r, k)| {
            large
                .range((*r, ProcessKey::default())..)
                .take_while(|(r2, _)| r2 == r)
                .any(|(_, k2)| k2 != k)
        })
    }

    fn find(&mut self, i: usize) -> usize {
        let mut r = i;
        while self.0[r] != r {
            r = self.0[r];
        }
        let mut j = i;
        while self.0[j] != r {
            let next = self.0[j];
            self.0[j] = r;
            j = next;
        }
        r
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            let (keep, gone) = (ra.min(rb), ra.max(rb));
            self.0[gone] = keep;
            let mut moved = std::mem::take(&mut self.1[gone]);
            // The smaller set moves into the larger (each element moves O(log n) times).
            if moved.len() > self.1[keep].len() {
                std::mem::swap(&mut moved, &mut self.1[keep]);
            }
            self.1[keep].extend(moved);
            if self.2[keep].is_none() {
                self.2[keep] = self.2[gone].take();
            }
        }
    }
}

/// The header's run source of an id given by ncclshim itself (`NCCLSHIM_RUN_ID`, which
/// `ncclshim run` sets when no launcher named the job), as `dump/src/run.rs` writes it.
const WRAPPER_RUN_SOURCE: &str = "ncclshim";

/// Whether a part is unnamed or named by ncclshim rather than by a scheduler or launcher: such
/// a name may be one wrapper's, so a communicator shared at the same time joins it to others.
/// A scheduler's id (a Slurm step, a torchelastic run) names the job and is never bridged.
fn wrapper_named(p: &ProcessModel) -> bool {
    p.run_id.is_empty() || p.run_source == WRAPPER_RUN_SOURCE
}

/// The attempt of a restarted job a part belongs to: the restart counters its launchers set
/// (torchrun's, Slurm's), added up; `None` when no launcher counts restarts.
fn own_attempt(p: &ProcessModel) -> Option<u64> {
    let env = p.env.as_ref()?;
    let counts =
        crate::knowledge::launchers::all(env, crate::knowledge::launchers::Role::RestartCount);
    (!counts.is_empty()).then(|| counts.iter().filter_map(|v| v.number()).sum())
}

/// Each part's attempt, read from whichever part of its process recorded the environment (a
/// profiler dump has none of its own).
fn attempts(parts: &[ProcessModel]) -> Vec<Option<u64>> {
    let mut by_process: HashMap<ProcessKey, u64> = HashMap::new();
    for p in parts {
        if let Some(a) = own_attempt(p) {
            by_process.insert(p.key(), a);
        }
    }
    parts
        .iter()
        .map(|p| by_process.get(&p.key()).copied())
        .collect()
}

fn span(p: &ProcessModel) -> (u64, u64) {
    let last = p
        .last_t
        .max(p.last_alive.unwrap_or(0))
        .max(p.exit_t.unwrap_or(0));
    (p.first_t, last.max(p.first_t))
}

/// Ranks of one run live at the same time, up to the spread of their starts and ends (a rank
/// that finished its work before another was started by a slow launcher): lifetimes within
/// this of each other count as overlapping. Two runs written one after the other into one
/// directory are normally minutes apart.
const SAME_RUN_SLACK_NS: u64 = 1_000_000_000;

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 <= b.1.saturating_add(SAME_RUN_SLACK_NS) && b.0 <= a.1.saturating_add(SAME_RUN_SLACK_NS)
}

/// Splits per-dump parts into runs, oldest first.
pub fn split(parts: Vec<ProcessModel>) -> Vec<RunParts> {
    let mut sets = Sets::new(&parts);
    let attempt = attempts(&parts);
    join_by_process_and_launcher(&parts, &attempt, &mut sets);
    join_unnamed(&parts, &attempt, &mut sets);
    runs_of(parts, &attempt, &mut sets)
}

/// Parts of one process (shim and profiler dumps), and one launcher id, are one run. Keyed
/// lookups, not pairs: a 16k-rank job is 16k parts.
fn join_by_process_and_launcher(parts: &[ProcessModel], attempt: &[Option<u64>], sets: &mut Sets) {
    let mut by_process: HashMap<ProcessKey, usize> = HashMap::new();
    let mut by_run: HashMap<(String, String, Option<u64>), usize> = HashMap::new();
    for (i, p) in parts.iter().enumerate() {
        if let Some(&j) = by_process.get(&p.key()) {
            sets.union(i, j);
        } else {
            by_process.insert(p.key(), i);
        }
        if !p.run_id.is_empty() {
            let key = (p.run_source.clone(), p.run_id.clone(), attempt[i]);
            match by_run.get(&key) {
                Some(&j) => sets.union(i, j),
                None => {
                    by_run.insert(key, i);
                }
            }
        }
    }
}

/// Unnamed parts join, in start order, the closest earlier part of the same communicator (or,
/// without any communicator, the part started just before) while their lifetimes overlap; never
/// across two launcher ids, and never when the join would give one launcher rank to two
/// processes (the same job launched twice in a row).
fn join_unnamed(parts: &[ProcessModel], attempt: &[Option<u64>], sets: &mut Sets) {
    // The communicators of each part: those it joined, and the uniqueIds it called init with
    // (an init that never completed names its communicator only by its uniqueId).
    let comms: Vec<BTreeSet<u64>> = parts.iter().map(ProcessModel::communicator_ids).collect();
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by_key(|&i| (parts[i].first_t, i));
    let mut last_of_comm: HashMap<u64, usize> = HashMap::new();
    let mut last_without_comm: Option<usize> = None;
    let mut previous: Option<usize> = None;
    for &i in &order {
        // A part without a communicator can belong with anything that ran beside it: the part
        // that started just before it. One with communicators: the latest part of each of them,
        // and the latest part without any.
        let candidates: Vec<usize> = if comms[i].is_empty() {
            previous.into_iter().collect()
        } else {
            comms[i]
                .iter()
                .filter_map(|c| last_of_comm.get(c).copied())
                .chain(last_without_comm)
                .collect()
        };
        for j in candidates {
            if joins(parts, attempt, &comms, sets, i, j) {
                sets.union(i, j);
            }
        }
        if comms[i].is_empty() {
            last_without_comm = Some(i);
        }
        for &c in &comms[i] {
            last_of_comm.insert(c, i);
        }
        previous = Some(i);
    }
}

/// Whether part `i` joins the run of `j`, an earlier part it may belong with ([`join_unnamed`]);
/// `comms`: each part's communicators.
fn joins(
    parts: &[ProcessModel],
    attempt: &[Option<u64>],
    comms: &[BTreeSet<u64>],
    sets: &mut Sets,
    i: usize,
    j: usize,
) -> bool {
    if !overlaps(span(&parts[i]), span(&parts[j])) {
        return false;
    }
    // Two attempts of a restarted job are two runs, however close in time.
    if attempt[i].is_some() && attempt[j].is_some() && attempt[i] != attempt[j] {
        return false;
    }
    // Two processes in one communicator at the same time are one job even when their
    // launcher ranks repeat (ranks computed per node: the identity invariant's case),
    // and even when each was named by its own wrapper: `ncclshim run` around each rank
    // (a hand-written launcher, `srun ncclshim run` without a Slurm job id) names each
    // wrapper's process, not the job.
    let one_comm = !comms[i].is_disjoint(&comms[j]);
    if one_comm && wrapper_named(&parts[i]) && wrapper_named(&parts[j]) {
        return true;
    }
    let unnamed = parts[i].run_id.is_empty() || parts[j].run_id.is_empty();
    if !unnamed {
        return false;
    }
    let (a, b) = (sets.named(i), sets.named(j));
    !(a.is_some() && b.is_some() && a != b || (!one_comm && sets.rank_clash(i, j)))
}

/// The runs `sets` makes of `parts`, oldest first; the unnamed ones are numbered in that order.
fn runs_of(parts: Vec<ProcessModel>, attempt: &[Option<u64>], sets: &mut Sets) -> Vec<RunParts> {
    let mut groups: BTreeMap<usize, (Option<u64>, Vec<ProcessModel>)> = Default::default();
    for (i, p) in parts.into_iter().enumerate() {
        let root = sets.find(i);
        let group = groups.entry(root).or_default();
        group.0 = group.0.or(attempt[i]);
        group.1.push(p);
    }
    let mut runs: Vec<RunParts> = groups
        .into_values()
        .map(|(attempt, parts)| RunParts {
            summary: summary(attempt, &parts),
            parts,
        })
        .collect();
    runs.sort_by_key(|r| (r.summary.first_t_unix_ns, r.summary.id.clone()));
    let mut unnamed = 0;
    for r in &mut runs {
        if r.summary.id.is_empty() {
            unnamed += 1;
            r.summary.id = format!("unnamed-{unnamed}");
        }
    }
    runs
}

/// The summary of the run of `parts` (attempt `attempt`), not yet reported on; an unnamed run's
/// id is empty until [`runs_of`] numbers it.
fn summary(attempt: Option<u64>, parts: &[ProcessModel]) -> RunSummary {
    let named = parts.iter().find(|p| !p.run_id.is_empty());
    let mut keys: Vec<_> = parts.iter().map(ProcessModel::key).collect();
    keys.sort();
    keys.dedup();
    let mut hosts: Vec<&str> = parts.iter().map(|p| p.host.as_str()).collect();
    hosts.sort();
    hosts.dedup();
    let first = parts
        .iter()
        .map(|p| p.first_t)
        .filter(|&t| t != 0)
        .min()
        .unwrap_or(0);
    let last = parts.iter().map(|p| span(p).1).max().unwrap_or(0);
    RunSummary {
        id: named.map(|p| p.run_id.clone()).unwrap_or_default(),
        source: named.map(|p| p.run_source.clone()).unwrap_or_default(),
        processes: keys.len(),
        hosts: hosts.len(),
        first_t_unix_ns: first,
        last_t_unix_ns: last,
        reported: false,
        attempt,
    }
}

/// Of the runs `candidates`, the one that started last.
fn latest(runs: &[RunParts], candidates: impl Iterator<Item = usize>) -> Option<usize> {
    candidates.max_by_key(|&i| {
        let r = &runs[i].summary;
        (r.first_t_unix_ns, r.last_t_unix_ns)
    })
}

/// Which run to report on: the one `wanted` names (its id, `source:id`, or a unique prefix of
/// the id), else the most recent. `Err` names the runs there are.
pub fn choose(runs: &[RunParts], wanted: Option<&str>) -> Result<usize, String> {
    let Some(w) = wanted else {
        return runs
            .iter()
            .enumerate()
            .max_by_key(|(_, r)| (r.summary.first_t_unix_ns, r.summary.last_t_unix_ns))
            .map(|(i, _)| i)
            .ok_or_else(|| "no runs".to_owned());
    };
    let ids = || {
        runs.iter()
            .map(|r| r.summary.choice())
            .collect::<Vec<_>>()
            .join(", ")
    };
    // `ID@N`: attempt N of a job restarted under one id.
    if let Some(i) = runs.iter().position(|r| r.summary.choice() == w) {
        return Ok(i);
    }
    // Several attempts under one id: the latest, the one that ended the job.
    let exact = latest(
        runs,
        (0..runs.len()).filter(|&i| {
            let r = &runs[i].summary;
            r.id == w || format!("{}:{}", r.source, r.id) == w
        }),
    );
    if let Some(i) = exact {
        return Ok(i);
    }
    // The name of one wrapper of a run joined from several ([`wrapper_named`]).
    if let Some(i) = runs
        .iter()
        .position(|r| r.parts.iter().any(|p| p.run_id == w))
    {
        return Ok(i);
    }
    let prefixed: Vec<usize> = (0..runs.len())
        .filter(|&i| runs[i].summary.id.starts_with(w))
        .collect();
    match prefixed.as_slice() {
        [i] => Ok(*i),
        [] => Err(format!("no run {w:?} in this directory (runs: {})", ids())),
        _ => Err(format!("{w:?} names more than one run (runs: {})", ids())),
    }
}

/// The run of the processes one `ncclshim run` started: those whose dump headers carry `source`
/// and `id` (the run id the wrapper gave its job, or the launcher's it was started under), else
/// the one run of that launcher whose id is a step of `id` (`812` → `812.3`: a wrapper in a Slurm
/// batch script whose job calls `srun`). `None` when no run matches, or several steps do: the
/// caller then reports on none rather than on another run's processes.
pub fn choose_own(runs: &[RunParts], source: &str, id: &str) -> Option<usize> {
    if id.is_empty() {
        return None;
    }
    let of_source = |r: &RunParts| r.summary.source == source;
    // The latest attempt when the job restarted under the wrapper (torchrun --max-restarts).
    let named = (0..runs.len()).filter(|&i| of_source(&runs[i]) && runs[i].summary.id == id);
    if let Some(i) = latest(runs, named) {
        return Some(i);
    }
    // A run joined from several wrappers' processes by their communicators carries one of
    // their names; each wrapper finds it by its own.
    let joined = (0..runs.len()).filter(|&i| {
        runs[i]
            .parts
            .iter()
            .any(|p| p.run_source == source && p.run_id == id)
    });
    if let Some(i) = latest(runs, joined) {
        return Some(i);
    }
    let step = format!("{id}.");
    let mut steps =
        (0..runs.len()).filter(|&i| of_source(&runs[i]) && runs[i].summary.id.starts_with(&step));
    match (steps.next(), steps.next()) {
        (Some(i), None) => Some(i),
        _ => None,
    }
}

/// `2025-11-25 20:50:01 UTC` for a wall-clock time in ns since the epoch.
pub fn utc_text(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant, "chrono-Compatible Low-Level Date Algorithms").
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The report's note when the directory holds more than one run.
pub fn note(runs: &[RunSummary]) -> Option<String> {
    if runs.len() < 2 {
        return None;
    }
    let list: Vec<String> = runs
        .iter()
        .map(|r| {
            format!(
                "{} ({} {}, started {})",
                r.label(),
                r.processes,
                if r.processes == 1 {
                    "process"
                } else {
                    "processes"
                },
                utc_text(r.first_t_unix_ns)
            )
        })
        .collect();
    let chosen = runs.iter().find(|r| r.reported)?;
    let latest = runs
        .iter()
        .max_by_key(|r| (r.first_t_unix_ns, r.last_t_unix_ns))
        .is_some_and(|r| r.choice() == chosen.choice());
    Some(format!(
        "this directory holds {} runs: {}; reporting on run {}{}; use --run ID to choose",
        runs.len(),
        list.join(", "),
        chosen.choice(),
        if latest { " (the most recent)" } else { "" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Membership;

    fn part(pid: u32, run: &str, comm: u64, t: (u64, u64)) -> ProcessModel {
        let mut p = ProcessModel {
            host: "h".into(),
            pid,
            first_t: t.0,
            last_t: t.1,
            run_id: run.into(),
            run_source: if run.is_empty() { "" } else { "slurm" }.into(),
            ..ProcessModel::default()
        };
        if comm != 0 {
            p.memberships.push(Membership {
                comm_hash: comm,
                ..Membership::default()
            });
        }
        p
    }

    fn ids(runs: &[RunParts]) -> Vec<(String, Vec<u32>)> {
        runs.iter()
            .map(|r| {
                let mut pids: Vec<u32> = r.parts.iter().map(|p| p.pid).collect();
                pids.sort();
                (r.summary.id.clone(), pids)
            })
            .collect()
    }

    #[test]
    fn launcher_ids_separate_runs_even_with_one_communicator_hash() {
        let runs = split(vec![
            part(1, "7.0", 0xaa, (10, 20)),
            part(2, "7.0", 0xaa, (11, 21)),
            part(3, "8.0", 0xaa, (15, 40)),
            part(4, "", 0xaa, (16, 30)),
        ]);
        // pid 4 overlaps both; it shares the communicator with both too, so it joins the
        // first it meets and never bridges the two launcher ids.
        let got = ids(&runs);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].0, "7.0");
        assert_eq!(got[1].0, "8.0");
        assert_eq!(got.iter().map(|g| g.1.len()).sum::<usize>(), 4);
        assert_eq!(choose(&runs, None), Ok(1));
        assert_eq!(choose(&runs, Some("7")), Ok(0));
        assert_eq!(choose(&runs, Some("slurm:8.0")), Ok(1));
        assert!(choose(&runs, Some("9"))
            .unwrap_err()
            .contains("runs: 7.0, 8.0"));
    }

    /// The same 2-rank job launched twice in a row within a second, without launcher ids or
    /// communicators (both failed before creating one): the launcher ranks repeat, so the
    /// processes form two runs, each with ranks 0 and 1.
    #[test]
    fn a_launcher_rank_seen_twice_means_two_runs() {
        let ranked = |pid: u32, rank: &str, t: (u64, u64)| {
            let mut p = part(pid, "", 0, t);
            p.env = Some([("RANK".to_owned(), rank.to_owned())].into_iter().collect());
            p
        };
        let runs = split(vec![
            ranked(1, "0", (10, 30)),
            ranked(2, "1", (11, 31)),
            ranked(3, "0", (40, 60)),
            ranked(4, "1", (41, 61)),
        ]);
        assert_eq!(
            ids(&runs),
            vec![
                ("unnamed-1".to_owned(), vec![1, 2]),
                ("unnamed-2".to_owned(), vec![3, 4])
            ]
        );
    }

    /// Two nodes that each started ranks 0-1 (RANK computed per node) into one communicator at
    /// the same time: one job whose ranks repeat (what the identity invariant names), not two
    /// runs that would each look healthy.
    #[test]
    fn repeated_launcher_ranks_in_one_communicator_at_once_are_one_run() {
        let ranked = |pid: u32, rank: &str, t: (u64, u64)| {
            let mut p = part(pid, "", 7, t);
            p.env = Some([("RANK".to_owned(), rank.to_owned())].into_iter().collect());
            p
        };
        let runs = split(vec![
            ranked(1, "0", (10, 30)),
            ranked(2, "1", (11, 31)),
            ranked(3, "0", (12, 32)),
            ranked(4, "1", (13, 33)),
        ]);
        assert_eq!(ids(&runs), vec![("unnamed-1".to_owned(), vec![1, 2, 3, 4])]);
    }

    #[test]
    fn unnamed_processes_split_by_communicator_and_lifetime() {
        let runs = split(vec![
            part(1, "", 0xaa, (10, 20)),
            part(2, "", 0xaa, (12, 22)),
            part(3, "", 0xaa, (5_000_000_050, 5_000_000_060)),
            part(4, "", 0xaa, (5_000_000_061, 5_000_000_070)),
            part(5, "", 0, (5_000_000_055, 5_000_000_056)),
        ]);
        assert_eq!(
            ids(&runs),
            vec![
                ("unnamed-1".to_owned(), vec![1, 2]),
                ("unnamed-2".to_owned(), vec![3, 4, 5])
            ]
        );
        let mut sums: Vec<RunSummary> = runs.iter().map(|r| r.summary.clone()).collect();
        sums[1].reported = true;
        let n = note(&sums).unwrap();
        assert!(n.starts_with("this directory holds 2 runs: unnamed-1 (no launcher id) (2 processes, started 1970-01-01 00:00:00 UTC)"), "{n}");
        assert!(
            n.ends_with("reporting on run unnamed-2 (the most recent); use --run ID to choose"),
            "{n}"
        );
    }

    /// torchrun --max-restarts: every attempt has the same run id and the same ranks; the
    /// restart counter keeps the attempts apart (the profiler's part of a process, which
    /// records no environment, goes with its process), the report is about the latest, and
    /// `ID@N` names an earlier one.
    #[test]
    fn restarted_attempts_under_one_id_are_separate_runs() {
        let attempt = |pid: u32, rank: &str, restart: &str, t: (u64, u64)| {
            let mut p = part(pid, "job-42", 0xaa, t);
            p.run_source = "torchelastic".into();
            p.env = Some(
                [
                    ("RANK", rank),
                    ("TORCHELASTIC_RUN_ID", "job-42"),
                    ("TORCHELASTIC_RESTART_COUNT", restart),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            );
            p
        };
        let mut profiler_part = part(3, "job-42", 0xaa, (21, 30));
        profiler_part.run_source = "torchelastic".into();
        let runs = split(vec![
            attempt(1, "0", "0", (10, 20)),
            attempt(2, "1", "0", (10, 20)),
            attempt(3, "0", "1", (21, 30)),
            attempt(4, "1", "1", (21, 30)),
            profiler_part,
        ]);
        let got = ids(&runs);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].1, vec![1, 2]);
        assert_eq!(got[1].1, vec![3, 3, 4]);
        assert_eq!(runs[1].summary.attempt, Some(1));
        assert_eq!(runs[1].summary.label(), "torchelastic job-42 (restart 1)");
        assert_eq!(choose(&runs, None), Ok(1));
        assert_eq!(choose(&runs, Some("job-42")), Ok(1), "the latest attempt");
        assert_eq!(choose(&runs, Some("job-42@0")), Ok(0));
        assert_eq!(choose_own(&runs, "torchelastic", "job-42"), Some(1));
    }

    /// One `ncclshim run` around each rank (no launcher id): each wrapper names its own process,
    /// and the communicator they share at the same time makes them one run, which each
    /// wrapper's own report and `--run` with any of the names find. Two wrappers without a
    /// shared communicator stay two runs, and scheduler ids are never bridged this way.
    #[test]
    fn wrappers_of_one_job_are_one_run_by_their_communicator() {
        let wrapped = |pid: u32, run: &str, comm: u64, t: (u64, u64)| {
            let mut p = part(pid, run, comm, t);
            p.run_source = "ncclshim".into();
            p
        };
        let runs = split(vec![
            wrapped(1, "w-1", 0xaa, (10, 30)),
            wrapped(2, "w-2", 0xaa, (11, 31)),
            wrapped(3, "w-3", 0xaa, (12, 29)),
            wrapped(4, "w-4", 0xbb, (12, 29)),
        ]);
        let got = ids(&runs);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].1, vec![1, 2, 3]);
        assert_eq!(got[1].1, vec![4]);
        for w in ["w-1", "w-2", "w-3"] {
            assert_eq!(choose_own(&runs, "ncclshim", w), Some(0), "{w}");
            assert_eq!(choose(&runs, Some(w)), Ok(0), "{w}");
        }
        assert_eq!(choose_own(&runs, "ncclshim", "w-4"), Some(1));
    }

    /// `ncclshim run` reports on the run its processes named: its own id, never the most
    /// recent run of the directory; a step of the launcher's job it was started under when the
    /// job called the launcher again (`srun` in a batch script); none when nothing matches.
    #[test]
    fn a_wrapper_reports_on_its_own_run_or_a_single_step_of_it() {
        let mut runs = split(vec![
            part(1, "a", 0, (10, 20)),
            part(2, "b", 0, (11, 21)),
            part(3, "812.0", 0, (12, 22)),
            part(4, "900.1", 0, (13, 23)),
            part(5, "900.2", 0, (14, 24)),
        ]);
        for r in &mut runs[..2] {
            r.summary.source = "ncclshim".into();
            for p in &mut r.parts {
                p.run_source = "ncclshim".into();
            }
        }
        let id_of = |i: Option<usize>| i.map(|i| runs[i].summary.id.clone());
        assert_eq!(
            id_of(choose_own(&runs, "ncclshim", "a")).as_deref(),
            Some("a")
        );
        assert_eq!(
            id_of(choose_own(&runs, "ncclshim", "b")).as_deref(),
            Some("b")
        );
        assert_eq!(
            choose_own(&runs, "slurm", "a"),
            None,
            "another launcher's id"
        );
        assert_eq!(choose_own(&runs, "ncclshim", "c"), None);
        assert_eq!(
            id_of(choose_own(&runs, "slurm", "812")).as_deref(),
            Some("812.0")
        );
        assert_eq!(
            choose_own(&runs, "slurm", "81"),
            None,
            "a prefix is not a step"
        );
        assert_eq!(
            choose_own(&runs, "slurm", "900"),
            None,
            "two steps: which one?"
        );
        assert_eq!(choose_own(&runs, "ncclshim", ""), None);
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc_text(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            utc_text(1_764_103_801_000_000_000),
            "2025-11-25 20:50:01 UTC"
        );
        assert_eq!(utc_text(951_782_400_000_000_000), "2000-02-29 00:00:00 UTC");
    }
}
