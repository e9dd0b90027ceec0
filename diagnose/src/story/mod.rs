//! The job's story, computed once from the model and read by every rule and by the verdict.
//!
//! - [`ending`]: how each process ended (clean exit with status, crash, stopped by another
//!   process, aborted by its framework, vanished, still running).
//! - [`progress`]: where each rank was on each communicator, the operation some ranks waited in
//!   and who was behind it and why, and the collectives or p2p pairs issued differently.
//! - the failure graph ([`Node`]): every recorded failure (error, async error, signal, abnormal
//!   end) and every located cause without an error (a laggard, a rank that left, a mismatch, a
//!   transport hang) is a node; each node names the earlier node that explains it (`cause`) and
//!   why. Nodes without a cause are the roots: what the verdict must explain.
//!
//! Causal direction: a node is explained by (1) an earlier node of the same process (an abort
//! after its error); (2) a mismatch on a communicator it belongs to; (3) the rank that was
//! behind the operation it waited in (a laggard, a rank that left, crashed or vanished); (4) a
//! transport hang it was killed in; (5) a failure of a linked process (sharing a communicator)
//! that certainly came before it — a silent death counts only against a reaction and only when
//! the dead process was busy until its end. Nodes are ordered by time and a node may only name
//! an earlier one, so the graph has no cycles. A rank that vanished while behind, whose peers saw
//! no sign of its departure (no closed connection, only their own timeouts and aborts), is
//! located as a laggard: its death came later, when the launcher cleaned up.

pub mod ending;
pub mod position;
pub mod progress;
pub mod render;
pub mod sequence;

use crate::knowledge::messages;
use crate::model::{FailureWhat, JobModel};
use ending::Ending;
use ncclshim_format::NcclResult;
use progress::{Behind, CommStory, Member, Place};
use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeSet;

/// What a node of the failure graph is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// A call that returned an error (index into the process's calls).
    Error(usize),
    /// `ncclCommGetAsyncError` reported an error.
    AsyncError(usize),
    /// A fatal signal, or a request to stop that the job outlived.
    Signal(u64),
    /// The process ended without any mark while the job went on.
    Vanished,
    /// It exited (any status) while its peers still waited for it.
    LeftEarly,
    /// It never issued the operation its peers waited in (communicator hash).
    Behind(u64),
    /// Index into the communicator's mismatches: the ranks issued one operation differently
    /// (`desync`: a different collective altogether, not different arguments).
    Mismatch {
        comm: u64,
        index: usize,
        desync: bool,
    },
    /// Every rank entered the same operation and it never completed (communicator hash).
    StuckInside(u64),
}

impl NodeKind {
    /// The class a finding declares it covers (see `rules::registry`).
    pub fn class(self) -> NodeClass {
        match self {
            NodeKind::Error(_) | NodeKind::AsyncError(_) => NodeClass::Call,
            NodeKind::Signal(_) => NodeClass::Signal,
            NodeKind::Vanished => NodeClass::Vanished,
            NodeKind::LeftEarly => NodeClass::LeftEarly,
            NodeKind::Behind(_) => NodeClass::Behind,
            NodeKind::Mismatch { desync: true, .. } => NodeClass::Desync,
            NodeKind::Mismatch { .. } => NodeClass::Mismatch,
            NodeKind::StuckInside(_) => NodeClass::StuckInside,
        }
    }
}

pub use crate::finding::reach::NodeClass;

/// One failure (or located cause) of the job.
#[derive(Debug, Clone)]
pub struct Node {
    pub process: usize,
    pub t: u64,
    pub kind: NodeKind,
    /// The earlier node that explains this one, and why.
    pub cause: Option<(usize, String)>,
    /// A driver call NCCL made: the node of the NCCL failure it is part of (its cause too).
    /// What explains this call explains that failure.
    pub part_of: Option<usize>,
}

impl Node {
    /// A node at instant `t` whose cause is not yet known.
    fn located(process: usize, t: u64, kind: NodeKind) -> Self {
        Node {
            process,
            t,
            kind,
            cause: None,
            part_of: None,
        }
    }
}

/// The whole story.
#[derive(Debug, Clone, Default)]
pub struct Story {
    pub ends: Vec<Ending>,
    pub comms: Vec<CommStory>,
    /// Ordered by time; a node's cause always precedes it.
    pub nodes: Vec<Node>,
    /// The communicators on which each process is blocked inside a call that never returned
    /// (its members' positions): a rank blocked on one communicator is not a laggard of another.
    pub blocked_on: FxHashMap<usize, Vec<u64>>,
}

impl Story {
    pub fn build(job: &JobModel) -> Story {
        let ends: Vec<Ending> = job.processes.par_iter().map(ending::of).collect();
        let comms = progress::build(job);
        let mut blocked_on: FxHashMap<usize, Vec<u64>> = FxHashMap::default();
        for c in &comms {
            for m in c.members.iter().filter(|m| m.position.inside.is_some()) {
                blocked_on.entry(m.process).or_default().push(c.comm);
            }
        }
        let mut s = Story {
            ends,
            comms,
            nodes: Vec::new(),
            blocked_on,
        };
        s.add_nodes(job);
        s.link(job);
        s
    }

    /// Indices of the nodes nothing explains.
    pub fn roots(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].cause.is_none())
            .collect()
    }

    /// The root a node's explanations lead to.
    pub fn root_of(&self, mut i: usize) -> usize {
        // Bounded: the graph has no cycles (see the module header); the bound keeps a defect
        // from hanging the report.
        for _ in 0..self.nodes.len() {
            match &self.nodes[i].cause {
                Some((c, _)) => i = *c,
                None => break,
            }
        }
        i
    }

    /// Whether process `p` failed in any way (a node of its own).
    pub fn has_node(&self, p: usize) -> bool {
        self.nodes.iter().any(|n| n.process == p)
    }

    /// Whether node `i` is a reaction to something else (a remote error, a closed connection,
    /// an abort, a request to stop, a death) rather than a fault of its own process.
    pub fn is_reaction(&self, job: &JobModel, i: usize) -> bool {
        is_reaction(job, &self.ends, &self.nodes[i])
    }

    /// Whether communicator `comm` had stopped making progress at instant `now`: every member's
    /// process is gone, or no member issued, finished or started an operation on it for
    /// `quiet_ns` (a job read while it runs is in a slow step, not hung, until the communicator
    /// has been quiet a while). Progress on the communicator, not any record: a hung PyTorch
    /// rank's watchdog keeps polling NCCL ([`crate::model::ProcessModel::comm_progress_t`]); seen live on an
    /// H200, where the exporter never called such a hang stalled. Members with no operation
    /// on it at all (an init that hangs) are read by their newest record.
    pub fn stalled_at(&self, job: &JobModel, comm: u64, now: u64, quiet_ns: u64) -> bool {
        let Some(c) = self.comm(comm) else {
            return false;
        };
        let processes = || c.members.iter().map(|m| &job.processes[m.process]);
        if !processes().any(|pm| pm.alive) {
            return true;
        }
        let newest = processes()
            .filter_map(|pm| pm.comm_progress_t(comm))
            .max()
            .unwrap_or_else(|| processes().map(|pm| pm.last_t).max().unwrap_or(0));
        now.saturating_sub(newest) >= quiet_ns
    }

    /// The processes a hang holds at instant `now` (see [`Story::stalled_at`]): inside NCCL on a
    /// communicator that stopped, or behind the operation its other ranks wait in.
    pub fn hung_processes(&self, job: &JobModel, now: u64, quiet_ns: u64) -> FxHashSet<usize> {
        let mut out = FxHashSet::default();
        let mut stalled = FxHashSet::default();
        for c in &self.comms {
            if c.members.len() < 2 || !self.stalled_at(job, c.comm, now, quiet_ns) {
                continue;
            }
            stalled.insert(c.comm);
            out.extend(
                c.members
                    .iter()
                    .filter(|m| m.position.inside.is_some())
                    .map(|m| m.process),
            );
        }
        out.extend(self.nodes.iter().filter_map(|n| match n.kind {
            NodeKind::Behind(comm) if stalled.contains(&comm) => Some(n.process),
            _ => None,
        }));
        out
    }

    /// The node of each failed call and async error, by (process, call index): how a rule
    /// that found a failure in a call finds what the story says about it.
    pub fn call_nodes(&self) -> FxHashMap<(usize, usize), usize> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(j, n)| match n.kind {
                NodeKind::Error(c) | NodeKind::AsyncError(c) => Some(((n.process, c), j)),
                _ => None,
            })
            .collect()
    }

    /// Node `i` in one line: the call and its text, the signal, or the located cause (the
    /// story's graph, the verdict's consequences and the dead-peer rule's culprit say it alike).
    pub fn describe_node(&self, job: &JobModel, i: usize) -> String {
        let n = &self.nodes[i];
        let pm = &job.processes[n.process];
        match n.kind {
            NodeKind::Error(c) | NodeKind::AsyncError(c) => pm.calls[c].describe(),
            NodeKind::Signal(s) => format!("fatal signal {}", crate::names::signal_name(s)),
            NodeKind::Vanished => "its dump ends without a clean exit".into(),
            NodeKind::LeftEarly => self.ends[n.process].describe(),
            NodeKind::Behind(comm) => format!("it stopped issuing collectives on comm {comm:#x}"),
            NodeKind::Mismatch { comm, index, .. } => self
                .comm(comm)
                .and_then(|c| c.mismatches.get(index))
                .map(|m| m.text.clone())
                .unwrap_or_default(),
            NodeKind::StuckInside(comm) => {
                format!("every rank of comm {comm:#x} is stuck inside one operation")
            }
        }
    }

    /// The stall of communicator `comm`, if any.
    pub fn comm(&self, comm: u64) -> Option<&CommStory> {
        self.comms.iter().find(|c| c.comm == comm)
    }

    /// The failure graph's nodes, ordered by time: every recorded failure, then what explains
    /// one without an error of its own (ranks behind a stall, mismatches, transport hangs, a
    /// lone vanished process). Which node explains which is [`Story::link`]'s.
    fn add_nodes(&mut self, job: &JobModel) {
        let mut nodes: Vec<Node> = job
            .failures
            .iter()
            .map(|f| {
                let kind = match f.what {
                    FailureWhat::Call(i) => NodeKind::Error(i),
                    FailureWhat::AsyncError(i) => NodeKind::AsyncError(i),
                    FailureWhat::Signal(s) => NodeKind::Signal(s),
                    FailureWhat::Died => NodeKind::Vanished,
                };
                Node::located(f.process, f.t, kind)
            })
            .collect();
        self.add_behind(job, &mut nodes);
        for c in &self.comms {
            add_mismatches(c, &mut nodes);
            add_stuck_inside(c, &mut nodes);
        }
        self.add_lone_vanished(job, &mut nodes);
        after_own_failure(job.processes.len(), &mut nodes);
        // At one instant: what explains before what it explains, whichever process it is on (a
        // mismatch on rank 1 before rank 0 stuck inside the collective it could not match).
        nodes.sort_by_key(|n| (n.t, precedence(n.kind), n.process));
        self.nodes = nodes;
    }

    /// Ranks behind a stalled operation: a laggard (alive, or stopped later) or one that left.
    fn add_behind(&self, job: &JobModel, nodes: &mut Vec<Node>) {
        // Which (process, kind) nodes exist, looked up rather than searched (a stall on a
        // 16k-rank communicator adds a node per rank).
        let mut listed: FxHashSet<(usize, NodeKind)> =
            nodes.iter().map(|n| (n.process, n.kind)).collect();
        for c in &self.comms {
            let Some(stall) = &c.stall else { continue };
            self.add_behind_stall(job, c, stall, &mut listed, nodes);
        }
    }

    /// The ranks behind `stall` on communicator `c` that explain it, each once (`listed`).
    fn add_behind_stall(
        &self,
        job: &JobModel,
        c: &CommStory,
        stall: &progress::Stall,
        listed: &mut FxHashSet<(usize, NodeKind)>,
        nodes: &mut Vec<Node>,
    ) {
        let member_of: FxHashMap<usize, &Member> =
            c.members.iter().rev().map(|m| (m.process, m)).collect();
        let waiters: Vec<usize> = stall.waiting.iter().map(|w| w.1).collect();
        let departure_seen = waiters.iter().any(|&w| saw_peer_leave(job, w));
        // A vanished rank lived on behind the stall when it showed signs of life (its
        // framework's async-error polls) well after the waiters issued the operation;
        // otherwise it ended there (a departure), unless the peers saw no sign of it.
        let lived_on = |p: usize| match self.ends[p] {
            Ending::Vanished { last_seen } => {
                last_seen > stall.since.saturating_add(1_000_000_000)
                    || (!departure_seen && job.processes[p].busy_spacing().is_none())
            }
            _ => true,
        };
        let departed = |p: usize| {
            matches!(self.ends[p], Ending::Exited { .. } | Ending::Crashed { .. }) || !lived_on(p)
        };
        // A rank that left, crashed or died explains the stall: ranks behind it that are
        // still alive are not located as laggards (they may wait on it elsewhere).
        let any_departed = stall.behind.iter().any(|b| departed(b.1));
        for &(_, p, why) in &stall.behind {
            if why != Behind::NeverIssued {
                continue;
            }
            if any_departed && !departed(p) {
                continue;
            }
            // A rank that never issued the operation here because it is blocked inside NCCL
            // on another communicator (a receive that never matched, a subgroup's
            // collective) did not stop on its own: what blocks it there explains it, and
            // its peers here wait on it through that.
            let blocked_elsewhere = self
                .blocked_on
                .get(&p)
                .is_some_and(|cs| cs.iter().any(|&other| other != c.comm));
            if blocked_elsewhere && !departed(p) {
                continue;
            }
            let last = member_of
                .get(&p)
                .and_then(|m| m.last_coll.values().map(|x| x.t).max())
                .unwrap_or(stall.since);
            let kind = match self.ends[p] {
                Ending::Exited { .. } => NodeKind::LeftEarly,
                Ending::Crashed { .. } => continue,
                Ending::Vanished { .. } if !lived_on(p) => continue,
                Ending::Running
                | Ending::Stopped { .. }
                | Ending::Aborted { .. }
                | Ending::Vanished { .. } => NodeKind::Behind(c.comm),
            };
            let t = match kind {
                NodeKind::LeftEarly => self.ends[p].time().unwrap_or(last),
                _ => last,
            };
            if listed.insert((p, kind)) {
                nodes.push(Node::located(p, t, kind));
            }
        }
    }

    /// A process that vanished where nobody outlived it to say so (a one-rank job killed, the
    /// only vanished process of a job whose other ranks exited): no clean exit rules out
    /// "no problem found".
    fn add_lone_vanished(&self, job: &JobModel, nodes: &mut Vec<Node>) {
        let vanished: Vec<usize> = (0..job.processes.len())
            .filter(|&p| matches!(self.ends[p], Ending::Vanished { .. }))
            .collect();
        let any_stall = self.comms.iter().any(|c| c.stall.is_some());
        if vanished.len() == 1 && !any_stall {
            let p = vanished[0];
            let blocked = job.processes[p].in_flight_calls().next().is_some();
            if !blocked && !nodes.iter().any(|n| n.process == p) {
                nodes.push(Node::located(
                    p,
                    self.ends[p].time().unwrap_or(0),
                    NodeKind::Vanished,
                ));
            }
        }
    }

    fn link(&mut self, job: &JobModel) {
        let tol = |a: usize, b: usize| {
            job.processes[a]
                .clock_uncertainty
                .max(job.processes[b].clock_uncertainty)
                .max(1_000_000)
        };
        // Per process and per node, side by side (each a scan of a process's calls).
        let memberships: Vec<BTreeSet<u64>> = (0..job.processes.len())
            .into_par_iter()
            .map(|p| comms_of(job, p))
            .collect();
        // A reaction (a closed connection, an abort) explains nothing on another process.
        let reactions: Vec<bool> = self
            .nodes
            .par_iter()
            .map(|n| is_reaction(job, &self.ends, n))
            .collect();
        // A driver call NCCL made inside one of its calls belongs to that call's failure: the
        // outer call and NCCL's text drive the diagnosis.
        let outer: Vec<Option<usize>> = (0..self.nodes.len())
            .into_par_iter()
            .map(|i| self.enclosing_failure(job, i))
            .collect();
        // Indexes for the searches below, each the same answer as a scan of the earlier nodes
        // (at 16k failing ranks, those scans were quadratic: seconds).
        let index = LinkIndex::new(self, &outer, &reactions);
        for i in 0..self.nodes.len() {
            let n = self.nodes[i].clone();
            let p = n.process;
            let reaction = reactions[i];
            let mut cause: Option<(usize, String)> = None;
            if let Some(o) = outer[i] {
                self.nodes[i].cause = Some((o, "a driver call NCCL made inside that call".into()));
                self.nodes[i].part_of = Some(o);
                continue;
            }
            // (1) An earlier node of the same process (not one nested in a later call).
            if let Some(j) = index.first_plain[p].filter(|&j| j < i) {
                cause = Some((j, "an earlier failure of the same process".into()));
            }
            // (2) A mismatch on one of its communicators, before it.
            if cause.is_none() && !matches!(n.kind, NodeKind::Mismatch { .. }) {
                if let Some(j) = earlier_on_comms(&index.mismatches, i, &memberships[p]) {
                    cause = Some((j, "the ranks issued an operation differently".into()));
                }
            }
            // (3) The rank behind the operation it waited in.
            if cause.is_none() && !matches!(n.kind, NodeKind::Behind(_) | NodeKind::LeftEarly) {
                for &c in index.waiting_in.get(&p).map_or(&[][..], Vec::as_slice) {
                    let Some(stall) = &self.comms[c].stall else {
                        continue;
                    };
                    // A reaction (its abort, its death while waiting) may follow a departure
                    // recorded later than it (a rank that left after the waiter's last record):
                    // reactions explain nothing across processes, so this makes no cycle.
                    let upto = if reaction { self.nodes.len() } else { i };
                    // The nodes of the ranks behind that may explain a peer, in order.
                    // A later node only when it is the first of its process: a later one
                    // follows from that process's own earlier failure, which may itself follow
                    // from this node (a cycle).
                    if let Some(j) = index.behind_causes[&c]
                        .iter()
                        .copied()
                        .take_while(|&j| j < upto)
                        .find(|&j| {
                            self.nodes[j].process != p
                                && (j < i || index.first_plain[self.nodes[j].process] == Some(j))
                        })
                    {
                        cause = Some((
                            j,
                            format!(
                                "it waited in {} #{} for that rank",
                                stall.function.name(),
                                stall.op_seq
                            ),
                        ));
                        break;
                    }
                }
            }
            // (4) A transport hang it was stopped in.
            if cause.is_none() {
                if let Some(j) = earlier_on_comms(&index.stuck, i, &memberships[p]) {
                    cause = Some((j, "it was stuck in the same operation".into()));
                }
            }
            // (5) A failure of a linked process that certainly came before.
            if cause.is_none() {
                let fault = matches!(n.kind, NodeKind::Signal(s) if matches!(s, 4 | 7 | 8 | 11));
                // Only nodes at least the smallest tolerance (1 ms) before it can qualify: the
                // nodes are in time order, so the search stops there (identical failures of
                // thousands of ranks at one instant search nothing).
                let before =
                    self.nodes[..i].partition_point(|m| m.t.saturating_add(1_000_000) < n.t);
                if let Some(j) = (0..before).find(|&j| {
                    let m = &self.nodes[j];
                    m.process != p
                        && (!reactions[j] || m.kind == NodeKind::Vanished)
                        && self.root_of(j) != i
                        && outer[j].is_none()
                        && !memberships[p].is_disjoint(&memberships[m.process])
                        && n.t > m.t.saturating_add(tol(p, m.process))
                        && match m.kind {
                            // A silent death is a lower bound: it explains a peer's error saying
                            // a peer left, or a later reaction when it was busy until its end.
                            NodeKind::Vanished => {
                                !fault
                                    && (reports_remote_error(job, &n)
                                        || job.processes[m.process]
                                            .busy_spacing()
                                            .is_some_and(|gap| n.t - m.t > gap.saturating_mul(20)))
                            }
                            _ => true,
                        }
                }) {
                    cause = Some((j, "an earlier failure of a linked rank".into()));
                }
            }
            // Defensive: a cause whose explanations lead back to this node would make a cycle.
            self.nodes[i].cause = cause.filter(|(c, _)| self.root_of(*c) != i);
        }
    }
}

/// What [`Story::link`] looks up for every node, gathered once.
struct LinkIndex {
    /// Per process, its first node not nested in a later call.
    first_plain: Vec<Option<usize>>,
    /// The mismatch nodes and the transport-hang nodes, each with its communicator, in order.
    mismatches: Vec<(usize, u64)>,
    stuck: Vec<(usize, u64)>,
    /// Per waiting process, the stalled communicators (indices into `comms`, in order) it waits in.
    waiting_in: FxHashMap<usize, Vec<usize>>,
    /// Per stalled communicator, the nodes (in order) of its ranks behind that can explain a
    /// peer: not a reaction, or a silent death.
    behind_causes: FxHashMap<usize, Vec<usize>>,
}

impl LinkIndex {
    fn new(story: &Story, outer: &[Option<usize>], reactions: &[bool]) -> Self {
        let nodes = &story.nodes;
        let mut first_plain = vec![None; nodes.iter().map(|n| n.process + 1).max().unwrap_or(0)];
        let (mut mismatches, mut stuck) = (Vec::new(), Vec::new());
        for (j, n) in nodes.iter().enumerate() {
            if outer[j].is_none() {
                first_plain[n.process].get_or_insert(j);
            }
            match n.kind {
                NodeKind::Mismatch { comm, .. } => mismatches.push((j, comm)),
                NodeKind::StuckInside(comm) => stuck.push((j, comm)),
                _ => {}
            }
        }
        let mut waiting_in: FxHashMap<usize, Vec<usize>> = FxHashMap::default();
        let mut behind_causes = FxHashMap::default();
        for (c, comm) in story.comms.iter().enumerate() {
            let Some(stall) = &comm.stall else { continue };
            for w in &stall.waiting {
                let list = waiting_in.entry(w.1).or_default();
                if list.last() != Some(&c) {
                    list.push(c);
                }
            }
            let behind: FxHashSet<usize> = stall.behind.iter().map(|b| b.1).collect();
            let causes: Vec<usize> = (0..nodes.len())
                .filter(|&j| {
                    behind.contains(&nodes[j].process)
                        && (!reactions[j] || nodes[j].kind == NodeKind::Vanished)
                })
                .collect();
            behind_causes.insert(c, causes);
        }
        LinkIndex {
            first_plain,
            mismatches,
            stuck,
            waiting_in,
            behind_causes,
        }
    }
}

/// The first of `nodes` (node, communicator; in order) before node `i` on one of `comms`.
fn earlier_on_comms(nodes: &[(usize, u64)], i: usize, comms: &BTreeSet<u64>) -> Option<usize> {
    nodes
        .iter()
        .take_while(|(j, _)| *j < i)
        .find(|(_, comm)| comms.contains(comm))
        .map(|(j, _)| *j)
}

impl Story {
    /// For a failed driver call NCCL made (nested), the node of the NCCL call it was made in.
    fn enclosing_failure(&self, job: &JobModel, i: usize) -> Option<usize> {
        let n = &self.nodes[i];
        let NodeKind::Error(c) = n.kind else {
            return None;
        };
        let pm = &job.processes[n.process];
        let inner = &pm.calls[c];
        if !inner.is_cuda || !inner.nested {
            return None;
        }
        let nccl_failure = |m: &Node| match m.kind {
            NodeKind::Error(o) | NodeKind::AsyncError(o) => {
                m.process == n.process && !pm.calls[o].is_cuda
            }
            _ => false,
        };
        // The NCCL call it was made in, when that call failed; else the NCCL failure the
        // process reported next (an init that failed later, an async error).
        self.nodes
            .iter()
            .position(|m| {
                nccl_failure(m)
                    && match m.kind {
                        NodeKind::Error(o) | NodeKind::AsyncError(o) => {
                            let outer = &pm.calls[o];
                            outer.tid == inner.tid
                                && outer.t_enter <= inner.t_enter
                                && outer.t_exit.is_none_or(|x| x >= inner.t_enter)
                        }
                        _ => false,
                    }
            })
            .or_else(|| {
                self.nodes
                    .iter()
                    .position(|m| nccl_failure(m) && m.t >= n.t)
            })
    }
}

/// Each operation communicator `c`'s ranks issued differently, on the first odd rank.
fn add_mismatches(c: &CommStory, nodes: &mut Vec<Node>) {
    for (index, m) in c.mismatches.iter().enumerate() {
        let Some(&(_, p, _)) = m.sides.iter().find(|s| m.odd.contains(&s.0)) else {
            continue;
        };
        let kind = NodeKind::Mismatch {
            comm: c.comm,
            index,
            desync: m.field == "collective",
        };
        nodes.push(Node::located(p, m.t, kind));
    }
}

/// Every rank of communicator `c` inside an operation (a call that never returned, or a kernel
/// that never ended: `position`), none behind: the transport hang.
fn add_stuck_inside(c: &CommStory, nodes: &mut Vec<Node>) {
    if c.stall.is_none()
        && c.members.len() >= 2
        && c.members.iter().all(|m| {
            matches!(m.place, Place::InOp { .. })
                || (m.place == Place::Outside && m.position.inside.is_some())
        })
    {
        let first = &c.members[0];
        let t = first.position.inside.as_ref().map_or(0, |i| i.since);
        nodes.push(Node::located(
            first.process,
            t,
            NodeKind::StuckInside(c.comm),
        ));
    }
}

/// A rank that stopped issuing or left after a failure of its own did so because of it: its
/// Behind / LeftEarly node comes after that failure.
fn after_own_failure(processes: usize, nodes: &mut [Node]) {
    // One pass over the nodes: a scan of all nodes per process was ranks x ranks.
    let mut own_failure: Vec<Option<u64>> = vec![None; processes];
    for n in nodes.iter() {
        if matches!(
            n.kind,
            NodeKind::Error(_) | NodeKind::AsyncError(_) | NodeKind::Signal(_)
        ) {
            let first = &mut own_failure[n.process];
            *first = Some(first.map_or(n.t, |t| t.min(n.t)));
        }
    }
    for n in nodes.iter_mut() {
        if matches!(n.kind, NodeKind::Behind(_) | NodeKind::LeftEarly) {
            if let Some(t) = own_failure[n.process] {
                n.t = n.t.max(t.saturating_add(1));
            }
        }
    }
}

/// Order of nodes at the same instant: located causes before what they explain.
fn precedence(k: NodeKind) -> u8 {
    match k {
        NodeKind::Mismatch { .. } => 0,
        NodeKind::Behind(_) | NodeKind::LeftEarly | NodeKind::StuckInside(_) => 1,
        NodeKind::Error(_) | NodeKind::AsyncError(_) => 2,
        NodeKind::Signal(_) => 3,
        NodeKind::Vanished => 4,
    }
}

/// Every communicator (or uniqueId being joined) process `p` belongs to.
pub fn comms_of(job: &JobModel, p: usize) -> BTreeSet<u64> {
    job.processes[p].communicator_ids()
}

/// Whether process `p` recorded an error saying a peer left (a closed or reset connection, a
/// remote error): the peer's departure was seen.
fn saw_peer_leave(job: &JobModel, p: usize) -> bool {
    job.processes[p].error_calls().any(|(_, c)| {
        c.returned(NcclResult::RemoteError)
            || c.async_result() == Some(NcclResult::RemoteError)
            || c.error_text
                .as_deref()
                .and_then(messages::classify)
                .is_some_and(|m| m.entry.role == messages::Role::Consequence)
    })
}

/// Whether a node is a reaction to something else (a remote error, a closed connection, an
/// abort, a request to stop) rather than a fault of its own process.
fn is_reaction(job: &JobModel, ends: &[Ending], n: &Node) -> bool {
    let pm = &job.processes[n.process];
    match n.kind {
        NodeKind::Error(i) | NodeKind::AsyncError(i) => {
            let c = &pm.calls[i];
            c.returned(NcclResult::RemoteError)
                || c.async_result() == Some(NcclResult::RemoteError)
                || c.error_text
                    .as_deref()
                    .and_then(messages::classify)
                    .is_some_and(|m| m.entry.role.is_consequence())
        }
        NodeKind::Signal(_) => matches!(
            ends[n.process],
            Ending::Aborted { .. } | Ending::Stopped { .. }
        ),
        NodeKind::Vanished => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests;

/// Whether a node is an NCCL call that reported `ncclRemoteError`: NCCL's word that a peer
/// went away.
fn reports_remote_error(job: &JobModel, n: &Node) -> bool {
    match n.kind {
        NodeKind::Error(i) | NodeKind::AsyncError(i) => {
            let c = &job.processes[n.process].calls[i];
            c.returned(NcclResult::RemoteError) || c.async_result() == Some(NcclResult::RemoteError)
        }
        _ => false,
    }
}
