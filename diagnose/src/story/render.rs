//! The story in words (`ncclshim report --story`): how each process ended, where each rank was on
//! each communicator, the operation some ranks waited in and who was behind it, the mismatches,
//! and the failure graph with each node's explanation. It shows what the verdict reasoned over,
//! so a reader can check the diagnosis against the facts, and it is the worked example of
//! `docs/internals.md`. Times are seconds after the job's first record.
//!
//! Long lists are cut: a 16k-rank job's endings are grouped by how they ended, and at most
//! `MAX_NODES` graph nodes and `MAX_MEMBERS` places per communicator are listed.

use super::ending::Ending;
use super::progress::{Behind, CommStory, Place};
use super::Story;
use crate::finding::words::rank_list;
use crate::model::JobModel;
use std::collections::BTreeMap;

const MAX_NODES: usize = 40;
const MAX_MEMBERS: usize = 16;

/// The story as text lines (no trailing newlines).
pub fn lines(job: &JobModel, story: &Story) -> Vec<String> {
    let t0 = job
        .processes
        .iter()
        .map(|p| p.first_t)
        .filter(|&t| t != 0)
        .min()
        .unwrap_or(0);
    let at = |t: u64| format!("+{:.3} s", t.saturating_sub(t0) as f64 / 1e9);
    let who = |p: usize| job.processes[p].label();
    let mut out = vec!["story:".to_owned(), "  how each process ended:".to_owned()];

    // Endings, grouped by what happened (a large job has few distinct endings).
    let mut by_end: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (p, end) in story.ends.iter().enumerate() {
        by_end.entry(end.describe()).or_default().push(p);
    }
    for (what, ps) in &by_end {
        let ranks: Vec<u32> = ps
            .iter()
            .filter_map(|&p| job.processes[p].world_rank())
            .collect();
        let subject = if ps.len() == 1 {
            who(ps[0])
        } else if ranks.len() == ps.len() {
            format!("ranks {}", rank_list(&ranks))
        } else {
            format!("{} processes", ps.len())
        };
        let when = match ps.iter().filter_map(|&p| story.ends[p].time()).min() {
            Some(t) if !matches!(story.ends[ps[0]], Ending::Running) => format!(" at {}", at(t)),
            _ => String::new(),
        };
        out.push(format!("    {subject}: {what}{when}"));
    }

    for c in &story.comms {
        comm_lines(job, c, &at, &mut out);
    }

    out.push("  failure graph (a node names the earlier node that explains it):".to_owned());
    if story.nodes.is_empty() {
        out.push("    (no failure)".to_owned());
    }
    for (i, n) in story.nodes.iter().enumerate().take(MAX_NODES) {
        let what = story.describe_node(job, i);
        let why = match (&n.cause, n.part_of) {
            (_, Some(outer)) => format!("part of [{outer}]"),
            (Some((c, reason)), None) => format!("explained by [{c}]: {reason}"),
            (None, None) => "ROOT".to_owned(),
        };
        out.push(format!(
            "    [{i}] {} {}: {what} -- {why}",
            at(n.t),
            who(n.process)
        ));
    }
    if story.nodes.len() > MAX_NODES {
        out.push(format!(
            "    ... {} more nodes",
            story.nodes.len() - MAX_NODES
        ));
    }
    out
}

fn comm_lines(job: &JobModel, c: &CommStory, at: &dyn Fn(u64) -> String, out: &mut Vec<String>) {
    out.push(format!(
        "  communicator {:#x} ({} ranks):",
        c.comm,
        c.members.len()
    ));
    // Places grouped: "ranks 0-1: inside ncclAllReduce".
    let mut by_place: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for m in &c.members {
        let pm = &job.processes[m.process];
        let name = |i: usize| {
            pm.calls
                .get(i)
                .map(|c| c.name.to_string())
                .unwrap_or_default()
        };
        let place = match &m.place {
            Place::InInit { call } => {
                format!("in communicator init ({} never returned)", name(*call))
            }
            Place::InOp { call } => format!("inside {} (never returned)", name(*call)),
            Place::InCall { call } => format!("inside {} (never returned)", name(*call)),
            Place::Outside => "no NCCL call in progress (its last one returned)".to_owned(),
            Place::Left => "left the communicator (destroy / abort)".to_owned(),
        };
        by_place.entry(place).or_default().push(m.rank);
    }
    for (place, ranks) in by_place.iter().take(MAX_MEMBERS) {
        let noun = if ranks.len() == 1 { "rank" } else { "ranks" };
        out.push(format!("    {noun} {}: {place}", rank_list(ranks)));
    }
    if let Some(s) = &c.stall {
        let waiting: Vec<u32> = s.waiting.iter().map(|w| w.0).collect();
        let behind: Vec<String> = s
            .behind
            .iter()
            .map(|(r, _, why)| {
                format!(
                    "rank {r} ({})",
                    match why {
                        Behind::NeverIssued => "never issued it",
                        Behind::Different => "issued it with different arguments",
                    }
                )
            })
            .collect();
        out.push(format!(
            "    stall: {} {} waited in {} #{} (the function's own number) since {}; behind: {}",
            if waiting.len() == 1 { "rank" } else { "ranks" },
            rank_list(&waiting),
            s.function.name(),
            s.op_seq,
            at(s.since),
            if behind.is_empty() {
                "none".to_owned()
            } else {
                behind.join(", ")
            }
        ));
    }
    for m in &c.mismatches {
        out.push(format!(
            "    mismatch ({}): {}; odd: {}",
            m.field,
            m.text,
            if m.odd.len() == 1 {
                format!("rank {}", m.odd[0])
            } else {
                format!("ranks {}", rank_list(&m.odd))
            }
        ));
    }
}
