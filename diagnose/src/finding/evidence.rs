//! Evidence as data: each item of a finding is one recorded fact (`kind`, `values` by name) and
//! the processes, ranks and hosts it holds for, plus `text`, the line the terminal report shows.
//!
//! Why objects rather than lines: a program reading `report --json` should not parse English to
//! learn which rank returned which code. Why grouping: a job of 64 ranks that all saw the same
//! remote error is one fact held by 64 ranks, so an item that adds a fact already present (same
//! kind, same values, same wording) joins the existing item's subjects instead of repeating the
//! line 63 times; its text then names the ranks compactly (`ranks 8-15 on node1: ...`).

use crate::finding::words::rank_list;
use crate::model::{CallEvent, JobModel};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// What kind of fact an evidence item records (the `kind` field of the JSON contract,
/// `docs/report-json.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceKind {
    /// An intercepted call and what it returned (`call`, `rc`, `rc_name`, `error_text`).
    Call,
    /// An environment variable's value as the process saw it (`name`, `value`: null when unset).
    Env,
    /// A fact about a machine or container (`/dev/shm`, memlock, interfaces, HCAs, driver).
    Host,
    /// A GPU's identity as the process saw it (ordinal, PCI bus id).
    Gpu,
    /// Libraries and versions loaded in the process (NCCL, CUDA runtime and driver).
    Library,
    /// A communicator's membership as the processes declared it (nranks, ranks present).
    Communicator,
    /// Collective progress: sequence numbers issued, operations that never completed.
    Progress,
    /// How a process ended (clean exit mark, last record, fatal signal).
    Lifecycle,
    /// Something the dumps cannot tell (`values.gap`: `records_lost`, `damaged_file`,
    /// `communicators_not_kept`, `no_end_mark`, `stopped_outside_nccl`, `nccl_calls_invisible`);
    /// only in the report's `evidence_gaps`.
    Gap,
    /// A conclusion drawn from several facts (ordering across ranks, version knowledge).
    Inference,
    /// An identifier named by an error text or a variable (PCI bus id, CUDA device, rank, peer,
    /// HCA, interface) resolved against the recorded facts (`reference_kind`, `written`,
    /// `status`: `resolved`/`absent`/`out_of_range`, and what it resolved to).
    Reference,
    /// Free text without structured values (the compatibility path [`crate::finding::Finding::evidence`]).
    Note,
}

/// One process of the job as the report names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ProcessRef {
    /// World rank (the rank in the process's largest communicator); null when it joined none.
    pub rank: Option<u32>,
    pub host: String,
    pub pid: u32,
    /// The launcher's job id seen in the process's environment (Slurm, Open MPI, torchrun);
    /// null when none was recorded.
    pub job: Option<String>,
}

/// Environment variables that name the job a process belongs to, first match wins (Slurm's
/// `SLURM_JOB_ID`, Open MPI's `OMPI_MCA_ess_base_jobid`, torchrun's `TORCHELASTIC_RUN_ID`).
const JOB_ID_VARS: &[&str] = &[
    "SLURM_JOB_ID",
    "OMPI_MCA_ess_base_jobid",
    "TORCHELASTIC_RUN_ID",
];

impl ProcessRef {
    pub fn of(job: &JobModel, p: usize) -> Self {
        let pm = &job.processes[p];
        Self {
            rank: pm.world_rank(),
            host: pm.host.clone(),
            pid: pm.pid,
            job: JOB_ID_VARS
                .iter()
                .find_map(|k| pm.env_var(k))
                .map(str::to_owned),
        }
    }

    /// `rank 3 (node1 pid 1234)` or `node1 pid 1234`, as [`crate::model::ProcessModel::label`].
    pub fn label(&self) -> String {
        match self.rank {
            Some(r) => format!("rank {r} ({} pid {})", self.host, self.pid),
            None => format!("{} pid {}", self.host, self.pid),
        }
    }
}

/// One evidence item.
#[derive(Debug, Clone, Serialize)]
pub struct Evidence {
    pub kind: EvidenceKind,
    /// World ranks of `processes` (sorted, without the processes that have no rank).
    pub ranks: Vec<u32>,
    /// Hosts the fact holds for: those of `processes`, or the machines a host fact is about.
    pub hosts: Vec<String>,
    pub processes: Vec<ProcessRef>,
    /// The recorded values by name (which names depend on `kind`; see `docs/report-json.md`).
    pub values: BTreeMap<String, Value>,
    /// The line as the text report shows it: subjects, then the fact.
    pub text: String,
    /// The fact without its subjects: part of what makes two items "the same fact".
    #[serde(skip)]
    pub(crate) fact: String,
    /// Hosts named explicitly (a host fact), as opposed to those of `processes`.
    #[serde(skip)]
    host_subjects: Vec<String>,
}

/// Above this many hosts, a multi-host rank list names the host count rather than each host.
const HOSTS_NAMED: usize = 3;

impl Evidence {
    pub fn new(kind: EvidenceKind, fact: impl Into<String>) -> Self {
        let fact = fact.into();
        Self {
            kind,
            ranks: Vec::new(),
            hosts: Vec::new(),
            processes: Vec::new(),
            values: BTreeMap::new(),
            text: fact.clone(),
            fact,
            host_subjects: Vec::new(),
        }
    }

    /// A free-text note (no structured values).
    pub fn note(text: impl Into<String>) -> Self {
        Self::new(EvidenceKind::Note, text)
    }

    /// An intercepted call: its name, return code and NCCL's / CUDA's text.
    pub fn call(c: &CallEvent) -> Self {
        let (rc_value, rc_name) = match c.async_result() {
            Some(r) => (r.as_i32(), crate::names::rc_name(r.as_i32(), false)),
            None => (c.rc, c.rc_name()),
        };
        let mut e = Self::new(EvidenceKind::Call, c.describe())
            .value("call", c.name.as_ref())
            .value("in_flight", c.in_flight());
        if !c.in_flight() {
            e = e.value("rc", rc_value).value("rc_name", rc_name);
        }
        if let Some(t) = &c.error_text {
            e = e.value("error_text", t.trim());
        }
        e
    }

    /// An intercepted call with a word on it (`then ...`, `... teardown noise`): the call's
    /// values, the fact worded as `prefix` + call + `suffix`.
    pub fn call_worded(c: &CallEvent, prefix: &str, suffix: &str) -> Self {
        let mut e = Self::call(c);
        e.fact = format!("{prefix}{}{suffix}", e.fact);
        e.text = e.fact.clone();
        e
    }

    /// An environment variable as the process saw it (`NAME=value`, or `NAME unset` + `unset`).
    pub fn env(name: &str, value: Option<&str>, unset: &str) -> Self {
        let fact = match value {
            Some(v) => format!("{name}={v}"),
            None if unset.is_empty() => format!("{name} unset"),
            None => format!("{name} unset{unset}"),
        };
        Self::new(EvidenceKind::Env, fact)
            .value("name", name)
            .value("value", value)
    }

    /// Adds a named value.
    pub fn value(mut self, name: &str, v: impl Serialize) -> Self {
        self.values.insert(
            name.to_owned(),
            serde_json::to_value(v).unwrap_or(Value::Null),
        );
        self
    }

    /// The fact holds for process `p`.
    pub fn of(self, job: &JobModel, p: usize) -> Self {
        self.of_all(job, &[p])
    }

    /// The fact holds for (or relates) every process in `ps`.
    pub fn of_all(mut self, job: &JobModel, ps: &[usize]) -> Self {
        self.processes
            .extend(ps.iter().map(|&p| ProcessRef::of(job, p)));
        self.render();
        self
    }

    /// The fact is about the machine `host` (no particular process).
    pub fn on_host(mut self, host: &str) -> Self {
        if !self.host_subjects.iter().any(|h| h == host) {
            self.host_subjects.push(host.to_owned());
        }
        self.render();
        self
    }

    /// Whether the rendered line contains `needle` (for tests written against evidence lines).
    pub fn contains(&self, needle: &str) -> bool {
        self.text.contains(needle)
    }

    /// The same fact worded the same way with the same values, about the same kind of subject.
    fn same_fact(&self, other: &Self) -> bool {
        self.kind == other.kind
            && self.fact == other.fact
            && self.values == other.values
            && self.processes.is_empty() == other.processes.is_empty()
            && self.host_subjects.is_empty() == other.host_subjects.is_empty()
    }

    /// Takes `other`'s subjects (same fact, more ranks or hosts).
    fn absorb(&mut self, other: Self) {
        self.take_subjects(other);
        self.render();
    }

    /// Takes `other`'s subjects without rendering (see [`add_all`]).
    fn take_subjects(&mut self, other: Self) {
        self.processes.extend(other.processes);
        for h in other.host_subjects {
            if !self.host_subjects.contains(&h) {
                self.host_subjects.push(h);
            }
        }
    }

    /// Recomputes `ranks`, `hosts` and `text` from the subjects (and puts the processes in
    /// order without repeats).
    fn render(&mut self) {
        self.processes.sort();
        self.processes.dedup();
        let mut ranks: Vec<u32> = self.processes.iter().filter_map(|p| p.rank).collect();
        ranks.sort_unstable();
        ranks.dedup();
        self.ranks = ranks;
        let mut hosts: Vec<String> = self
            .processes
            .iter()
            .map(|p| p.host.clone())
            .chain(self.host_subjects.iter().cloned())
            .collect();
        hosts.sort();
        hosts.dedup();
        self.hosts = hosts;
        let subject = if !self.processes.is_empty() {
            name_refs(&self.processes)
        } else {
            self.host_subjects.join(", ")
        };
        self.text = if subject.is_empty() {
            self.fact.clone()
        } else {
            format!("{subject}: {}", self.fact)
        };
    }
}

/// Names a set of processes compactly: one process by its label; several by rank list per host
/// (`ranks 0-7 on node1, rank 9 on node2`), or per host count beyond `HOSTS_NAMED` hosts;
/// processes without a rank by host and pid.
pub fn name_refs(ps: &[ProcessRef]) -> String {
    if let [one] = ps {
        return one.label();
    }
    let mut by_host: BTreeMap<&str, (Vec<u32>, Vec<u32>)> = BTreeMap::new();
    for p in ps {
        let e = by_host.entry(p.host.as_str()).or_default();
        match p.rank {
            Some(r) => e.0.push(r),
            None => e.1.push(p.pid),
        }
    }
    let ranked_noun = |rs: &[u32]| {
        let mut v = rs.to_vec();
        v.sort_unstable();
        v.dedup();
        format!(
            "{} {}",
            if v.len() == 1 { "rank" } else { "ranks" },
            rank_list(&v)
        )
    };
    let all_ranked = by_host.values().all(|(_, pids)| pids.is_empty());
    if all_ranked && by_host.len() > HOSTS_NAMED {
        let ranks: Vec<u32> = ps.iter().filter_map(|p| p.rank).collect();
        return format!("{} on {} hosts", ranked_noun(&ranks), by_host.len());
    }
    let mut parts = Vec::new();
    for (host, (ranks, pids)) in &by_host {
        if !ranks.is_empty() {
            parts.push(format!("{} on {host}", ranked_noun(ranks)));
        }
        if !pids.is_empty() {
            let noun = if pids.len() == 1 { "pid" } else { "pids" };
            let list: Vec<String> = pids.iter().map(u32::to_string).collect();
            parts.push(format!("{host} {noun} {}", list.join(",")));
        }
    }
    parts.join(", ")
}

/// Adds `e` to `items`, joining an existing item that records the same fact.
pub fn add(items: &mut Vec<Evidence>, e: Evidence) {
    match items.iter_mut().find(|x| x.same_fact(&e)) {
        Some(x) => x.absorb(e),
        None => items.push(e),
    }
}

/// Adds every item of `new` as [`add`] would, one after the other, with the same result; but
/// each joined item is rendered once at the end rather than once per subject it gains, and
/// items are matched through an index on their wording. Why: a fact held by every rank of a
/// 16k-rank job (`records_lost`) added rank by rank re-rendered its whole rank list each time,
/// ranks x ranks.
pub fn add_all(items: &mut Vec<Evidence>, new: impl IntoIterator<Item = Evidence>) {
    let mut by_fact: BTreeMap<(EvidenceKind, String), Vec<usize>> = BTreeMap::new();
    for (i, x) in items.iter().enumerate() {
        by_fact.entry((x.kind, x.fact.clone())).or_default().push(i);
    }
    let mut touched = vec![false; items.len()];
    for e in new {
        let candidates = by_fact.entry((e.kind, e.fact.clone())).or_default();
        match candidates.iter().copied().find(|&i| items[i].same_fact(&e)) {
            Some(i) => {
                items[i].take_subjects(e);
                touched[i] = true;
            }
            None => {
                candidates.push(items.len());
                items.push(e);
                touched.push(false);
            }
        }
    }
    for (x, touched) in items.iter_mut().zip(touched) {
        if touched {
            x.render();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(rank: Option<u32>, host: &str, pid: u32) -> ProcessRef {
        ProcessRef {
            rank,
            host: host.into(),
            pid,
            job: None,
        }
    }

    #[test]
    fn subjects_are_named_compactly() {
        assert_eq!(
            name_refs(&[p(Some(3), "n1", 10)]),
            "rank 3 (n1 pid 10)",
            "one process: its label"
        );
        let many: Vec<ProcessRef> = (8..16).map(|r| p(Some(r), "node1", 100 + r)).collect();
        assert_eq!(name_refs(&many), "ranks 8-15 on node1");
        assert_eq!(
            name_refs(&[p(Some(0), "a", 1), p(Some(1), "a", 2), p(Some(5), "b", 3)]),
            "ranks 0-1 on a, rank 5 on b"
        );
        assert_eq!(name_refs(&[p(None, "a", 1), p(None, "a", 2)]), "a pids 1,2");
        let spread: Vec<ProcessRef> = (0..8)
            .map(|r| p(Some(r), &format!("h{}", r / 2), r))
            .collect();
        assert_eq!(name_refs(&spread), "ranks 0-7 on 4 hosts");
    }

    #[test]
    fn the_same_fact_on_many_ranks_is_one_item() {
        let mut items = Vec::new();
        for r in 0..64u32 {
            let mut e = Evidence::new(EvidenceKind::Call, "ncclAllReduce returned 6")
                .value("rc", 6)
                .on_host("x");
            // Pretend subjects without a job model: processes set directly.
            e.host_subjects.clear();
            e.processes
                .push(p(Some(r), &format!("node{}", r / 8), 1000 + r));
            e.render();
            add(&mut items, e);
        }
        add(
            &mut items,
            Evidence::new(EvidenceKind::Call, "ncclAllReduce returned 6").value("rc", 5),
        );
        assert_eq!(items.len(), 2, "different values stay apart");
        assert_eq!(items[0].ranks.len(), 64);
        assert_eq!(items[0].hosts.len(), 8);
        assert_eq!(
            items[0].text,
            "ranks 0-63 on 8 hosts: ncclAllReduce returned 6"
        );
    }

    #[test]
    fn adding_all_at_once_gives_what_adding_one_by_one_gives() {
        // Facts in an interleaved order, repeated subjects, host facts, a pre-existing item.
        let item = |i: u32| {
            let (fact, rc) = match i % 3 {
                0 => ("ncclAllReduce returned 6", 6),
                1 => ("ncclAllReduce returned 6", 5),
                _ => ("lost records", 0),
            };
            let mut e = Evidence::new(EvidenceKind::Call, fact).value("rc", rc);
            if i % 5 == 4 {
                e = e.on_host(&format!("h{}", i % 7));
            } else {
                e.processes
                    .push(p(Some(i % 40), &format!("node{}", i % 6), 1000 + i % 40));
                e.render();
            }
            e
        };
        let first = Evidence::new(EvidenceKind::Call, "lost records").value("rc", 0);
        let mut one_by_one = vec![first.clone()];
        (0..200).for_each(|i| add(&mut one_by_one, item(i)));
        let mut at_once = vec![first];
        add_all(&mut at_once, (0..200).map(item));
        let show = |v: &[Evidence]| {
            v.iter()
                .map(|e| format!("{:?} {:?} {:?} {}", e.ranks, e.hosts, e.processes, e.text))
                .collect::<Vec<_>>()
        };
        assert_eq!(show(&at_once), show(&one_by_one));
        // 3 facts x (about processes, about hosts), plus the subjectless item it began with.
        assert_eq!(one_by_one.len(), 7);
    }
}
