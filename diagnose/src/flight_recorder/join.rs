//! Joining Flight Recorder dumps with the shim's processes, per rank, process group and
//! sequence number.
//!
//! - A rank with both: its process groups are matched to its communicators (same size, same
//!   place of the rank in it; among equals, the one whose operation count matches the group's
//!   last sequence number), which names each communicator by its PyTorch group (`0:default_pg`).
//! - A rank with only a Flight Recorder dump: its collectives become a [`ProcessModel`] of their
//!   own (one membership per group, one call per entry, in flight unless completed), so the
//!   same story and rules (desync C19, hang, missing rank) judge it like a shim's. PyTorch does
//!   not record the reduction op or root: those compare equal across such ranks.
//! - In every case the evidence quotes each rank's last collective per group with the user's
//!   Python line, and the first sequence number where ranks disagree (type, sizes, dtypes).

use super::dumps::{FlightRecorder, ProcessGroup, RankDump};
use super::format::FrEntry;
use super::lazy::Cover;
use crate::finding::words::ranks_named;
use crate::finding::{Evidence, EvidenceKind};
use crate::model::{CallEvent, CommProgress, Membership, OpCall, ProcessModel};
use ncclshim_format::{args, ArgView, CallId};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// `ncclDataType_t` for a PyTorch dtype name as the Flight Recorder writes it (`c10::ScalarType`
/// names, NCCL's `nccl.h` numbering). Unknown names get a stable number of their own, so two
/// ranks that disagree still compare different.
pub fn nccl_datatype(name: &str) -> u64 {
    match name {
        "Char" => 0,
        "Byte" | "Bool" => 1,
        "Int" => 2,
        "UInt32" => 3,
        "Long" => 4,
        "UInt64" => 5,
        "Half" => 6,
        "Float" => 7,
        "Double" => 8,
        "BFloat16" => 9,
        "Float8_e4m3fn" | "Float8_e4m3fnuz" => 10,
        "Float8_e5m2" | "Float8_e5m2fnuz" => 11,
        other => 1000 + fnv1a(other.as_bytes()) % 1000,
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The communicator hash given to a process group no shim dump names: stable per group name,
/// never 0.
pub fn group_hash(g: &ProcessGroup) -> u64 {
    fnv1a(format!("flight-recorder process group {}", g.name).as_bytes()) | 1
}

/// An NCCL version code from "2.28.9" (what `nccl_version_string` prints back).
fn nccl_version_code(v: &str) -> Option<u64> {
    let mut it = v.split('.').map(|p| p.trim().parse::<u64>().ok());
    let (a, b, c) = (it.next()??, it.next()??, it.next().flatten().unwrap_or(0));
    Some(a * 10000 + b * 100 + c)
}

/// Collectives (not p2p) of one group in a rank's dump, in sequence order.
fn collectives<'a>(d: &'a RankDump, g: &'a ProcessGroup) -> impl Iterator<Item = &'a FrEntry> {
    d.entries
        .iter()
        .filter(move |e| !e.is_p2p && d.group_of(e).is_some_and(|x| x.name == g.name))
}

/// Every process group named by any dump, once (by name), with the ranks that dumped.
fn groups(fr: &FlightRecorder) -> BTreeMap<String, ProcessGroup> {
    let mut out = BTreeMap::new();
    for d in &fr.dumps {
        for g in &d.groups {
            out.entry(g.name.clone()).or_insert_with(|| g.clone());
        }
    }
    out
}

/// Process group name → communicator hash, from ranks that have both dumps (`parts`: the
/// per-file process models before they are joined into a job).
pub fn comms_of_groups(parts: &[ProcessModel], fr: &FlightRecorder) -> BTreeMap<String, u64> {
    let mut votes: BTreeMap<String, BTreeMap<u64, usize>> = BTreeMap::new();
    // By rank (a scan of the dumps per part was ranks x ranks when every dump is read).
    let dump_of: HashMap<u32, &RankDump> = fr.dumps.iter().rev().map(|d| (d.rank, d)).collect();
    for p in parts.iter().filter(|p| super::dumps::has_shim_records(p)) {
        let Some(rank) = p.world_rank() else { continue };
        let Some(d) = dump_of.get(&rank) else {
            continue;
        };
        for g in &d.groups {
            let Some(pos) = g.ranks.iter().position(|r| *r == rank) else {
                continue;
            };
            // As the shim counts: NCCL collectives, which an nccl2 entry is none or several of.
            let last_seq = super::writers::collective_seqs(d, g)
                .into_values()
                .flatten()
                .max()
                .map_or(0, |s| s + 1);
            let best = p
                .memberships
                .iter()
                .filter(|m| m.nranks as usize == g.ranks.len() && m.rank as usize == pos)
                .min_by_key(|m| {
                    let issued = p
                        .progress
                        .iter()
                        .find(|c| c.comm_hash == m.comm_hash)
                        .map(|c| c.issued)
                        .unwrap_or(0);
                    issued.abs_diff(last_seq)
                });
            if let Some(m) = best {
                *votes
                    .entry(g.name.clone())
                    .or_default()
                    .entry(m.comm_hash)
                    .or_default() += 1;
            }
        }
    }
    votes
        .into_iter()
        .filter_map(|(g, v)| Some((g, v.into_iter().max_by_key(|(_, n)| *n)?.0)))
        .collect()
}

/// Process models for the ranks that have a Flight Recorder dump but no shim dump.
pub fn stand_ins(
    job_ranks: &BTreeSet<u32>,
    fr: &FlightRecorder,
    comm_of: &BTreeMap<String, u64>,
) -> Vec<ProcessModel> {
    let fired = watchdog_fired(fr);
    // Sends and receives whose partner entries are missing (nccl-lazy) are not compared.
    let unpaired: HashSet<(String, u32, u32)> = super::writers::unpaired_p2p(fr)
        .into_iter()
        .map(|u| (u.group, u.from, u.to))
        .collect();
    fr.dumps
        .iter()
        .filter(|d| !job_ranks.contains(&d.rank))
        .map(|d| stand_in(d, comm_of, fired, &unpaired))
        .collect()
}

/// When a watchdog timed out: the latest (creation + timeout) of an operation that never
/// completed, over every dump. PyTorch writes the dumps then (the rank that timed out, and the
/// others on its signal), so every rank that wrote one was alive at that instant.
fn watchdog_fired(fr: &FlightRecorder) -> Option<u64> {
    fr.dumps
        .iter()
        .flat_map(|d| d.entries.iter())
        .filter(|e| !e.completed())
        .filter_map(|e| {
            let t = e.time_created_ns?.max(0) as u64;
            Some(t.saturating_add(e.timeout_ms?.max(0) as u64 * 1_000_000))
        })
        .max()
}

/// Where a stand-in's calls go: each group's communicator (pointer, hash), and the pair
/// communicators of writers that run point-to-point on one per peer pair.
#[derive(Default)]
struct Comms<'a> {
    of_group: HashMap<&'a str, (u64, u64)>,
    of_pair: HashMap<(String, u32, u32), (u64, u64)>,
}

/// The communicator hash of the 2-rank communicator `nccl-lazy` makes for global ranks `a`, `b`
/// of group `g` (no shim dump names it: stable per group and pair, never 0).
fn pair_hash(g: &ProcessGroup, a: u32, b: u32) -> u64 {
    let (lo, hi) = (a.min(b), a.max(b));
    fnv1a(format!("flight-recorder pair {} {lo} {hi}", g.name).as_bytes()) | 1
}

/// One rank's Flight Recorder entries as a process model.
fn stand_in(
    d: &RankDump,
    comm_of: &BTreeMap<String, u64>,
    fired: Option<u64>,
    unpaired: &HashSet<(String, u32, u32)>,
) -> ProcessModel {
    let mut p = ProcessModel {
        host: d.file.clone(),
        pid: 0,
        // The key of a process is (host, boot id, pid, start): the file keeps ranks apart.
        start_ticks: u64::from(d.rank) + 1,
        files: vec![d.file.clone()],
        flight_recorder_only: true,
        nccl_version: nccl_version_code(&d.nccl_version),
        ..ProcessModel::default()
    };
    p.notes.push(format!(
        "rank {} is known from its PyTorch Flight Recorder dump only (no ncclshim dump)",
        d.rank
    ));
    // Each group gets a communicator pointer of its own (1, 2, ...), which `finish` resolves.
    let mut comms = Comms::default();
    for (i, g) in d.groups.iter().enumerate() {
        let Some(pos) = g.ranks.iter().position(|r| *r == d.rank) else {
            continue;
        };
        let hash = comm_of
            .get(&g.name)
            .copied()
            .unwrap_or_else(|| group_hash(g));
        let ptr = 0x0f00_0000 + i as u64;
        comms.of_group.insert(g.name.as_str(), (ptr, hash));
        p.memberships
            .push(membership(hash, g.ranks.len(), pos, ptr, p.nccl_version));
    }
    let mut first_t = u64::MAX;
    let mut numbering = Numbering::default();
    for g in &d.groups {
        numbering
            .collective
            .extend(super::writers::collective_seqs(d, g));
    }
    for (i, e) in d.entries.iter().enumerate() {
        let Some(g) = d.group_of(e) else { continue };
        let Some(&(ptr, hash)) = comms.of_group.get(g.name.as_str()) else {
            continue;
        };
        let me = g.ranks.iter().position(|r| *r == d.rank).unwrap_or(0) as u32;
        let w = super::writers::of_entry(d, e);
        let calls = super::writers::lower(w, e, g.ranks.len(), me);
        let t_enter = e.time_created_ns.unwrap_or(0).max(0) as u64;
        let t_exit = e
            .completed()
            .then(|| e.time_discovered_completed_ns.unwrap_or(0).max(0) as u64)
            .map(|t| t.max(t_enter));
        let mut coll_seq = numbering.collective.get(&i).copied().flatten();
        for c in calls {
            let (ptr, hash, peer) = if c.is_p2p() {
                let Some(peer) = c.root_or_peer else { continue };
                let global = g.ranks.get(peer as usize).copied().unwrap_or(peer);
                if unpaired.contains(&p2p_key(g, c.id, d.rank, global)) {
                    continue;
                }
                if w.is_some_and(|w| w.pair_communicators) && g.ranks.len() > 2 {
                    let (ptr, hash, local) = pair_comm(&mut p, &mut comms, g, d.rank, global);
                    (ptr, hash, local)
                } else {
                    (ptr, hash, peer)
                }
            } else {
                (ptr, hash, c.root_or_peer.unwrap_or(0))
            };
            let seq = if c.is_p2p() {
                numbering.p2p(hash, w, e)
            } else {
                let s = coll_seq.unwrap_or(0);
                coll_seq = Some(s + 1);
                s
            };
            first_t = first_t.min(t_enter);
            p.last_t = p.last_t.max(t_exit.unwrap_or(t_enter));
            let op_seq = numbering.op_seq(hash, c.id);
            let datatype = e.input_dtypes.first().map_or(7, |t| nccl_datatype(t));
            push_call(
                &mut p,
                ptr,
                hash,
                c.id,
                c.count,
                datatype,
                peer,
                seq,
                op_seq,
                (t_enter, t_exit),
            );
        }
    }
    p.first_t = if first_t == u64::MAX { 0 } else { first_t };
    // Its dump is a sign of life at the watchdog's timeout: how it ended after is not recorded
    // (neither alive nor a clean exit; the story calls it vanished after that instant).
    p.last_alive = fired.filter(|t| *t >= p.last_t);
    p.progress = progress_of(&p);
    p
}

/// A membership of a stand-in rank.
fn membership(hash: u64, nranks: usize, rank: usize, ptr: u64, version: Option<u64>) -> Membership {
    Membership {
        comm_hash: hash,
        nranks: nranks as u32,
        rank: rank as u32,
        comm_ptr: ptr,
        established: true,
        nccl_version: version,
        ..Membership::default()
    }
}

/// The pair communicator of global ranks `me` and `peer` in group `g` (created on first use,
/// as `nccl-lazy` creates it): (pointer, hash, the peer's rank in it).
fn pair_comm(
    p: &mut ProcessModel,
    comms: &mut Comms<'_>,
    g: &ProcessGroup,
    me: u32,
    peer: u32,
) -> (u64, u64, u32) {
    let key = (g.name.clone(), me.min(peer), me.max(peer));
    let next = 0x0f80_0000 + comms.of_pair.len() as u64;
    let version = p.nccl_version;
    let (ptr, hash) = *comms.of_pair.entry(key).or_insert_with(|| {
        let hash = pair_hash(g, me, peer);
        p.memberships
            .push(membership(hash, 2, usize::from(me > peer), next, version));
        (next, hash)
    });
    (ptr, hash, u32::from(peer > me))
}

/// The key of a directed send/recv between global ranks of a group: (group, from, to).
fn p2p_key(g: &ProcessGroup, id: CallId, me: u32, peer: u32) -> (String, u32, u32) {
    if id == CallId::NcclSend {
        (g.name.clone(), me, peer)
    } else {
        (g.name.clone(), peer, me)
    }
}

/// A stand-in's sequence numbers: the collectives' from [`super::writers::collective_seqs`]
/// (by entry index), the rest counted here.
#[derive(Default)]
struct Numbering {
    collective: BTreeMap<usize, Option<u64>>,
    /// `op_seq`: NCCL's own number, per communicator and function (what its profiler counts).
    per_function: HashMap<(u64, CallId), u64>,
    /// Point-to-point calls per communicator, for writers that number no p2p entry.
    p2p: HashMap<u64, u64>,
}

impl Numbering {
    fn op_seq(&mut self, comm: u64, id: CallId) -> u64 {
        let n = self.per_function.entry((comm, id)).or_default();
        *n += 1;
        *n - 1
    }

    /// The legacy backend numbers its p2p entries (`p2p_seq_id`, from 1); a send or receive
    /// another writer lowered a collective into is counted per communicator.
    fn p2p(
        &mut self,
        comm: u64,
        w: Option<&crate::knowledge::fr_writers::Writer>,
        e: &FrEntry,
    ) -> u64 {
        let n = self.p2p.entry(comm).or_default();
        *n += 1;
        if e.is_p2p && w.is_none_or(|w| w.id == "nccl") {
            e.p2p_seq_id.saturating_sub(1).max(0) as u64
        } else {
            *n - 1
        }
    }
}

/// Adds one NCCL call (and its operation) to a stand-in.
#[allow(clippy::too_many_arguments)]
fn push_call(
    p: &mut ProcessModel,
    ptr: u64,
    hash: u64,
    id: CallId,
    count: u64,
    datatype: u64,
    peer: u32,
    seq: u64,
    op_seq: u64,
    (t_enter, t_exit): (u64, Option<u64>),
) {
    let a = args::Collective {
        count,
        datatype,
        op: 0,
        root: u64::from(peer),
        sendbuff: 0,
        recvbuff: 0,
        stream: 0,
        seq,
        op_seq,
    }
    .to_args();
    p.calls.push(CallEvent {
        call: Some(id),
        name: Cow::Borrowed(id.name()),
        rc: 0,
        is_cuda: false,
        t_enter,
        t_exit,
        comm: ptr,
        args: a,
        error_text: None,
        tid: 0,
        nested: false,
    });
    p.ops.push(OpCall {
        comm_hash: Some(hash),
        seq,
        call: id,
        count,
        datatype,
        op: 0,
        root_or_peer: u64::from(peer),
        call_index: p.calls.len() - 1,
    });
}

/// Each membership's progress, from the stand-in's own collectives.
fn progress_of(p: &ProcessModel) -> Vec<CommProgress> {
    p.memberships
        .iter()
        .map(|m| {
            let mine: Vec<&OpCall> = p
                .ops
                .iter()
                .filter(|o| {
                    o.comm_hash == Some(m.comm_hash)
                        && !matches!(o.call, CallId::NcclSend | CallId::NcclRecv)
                })
                .collect();
            let last = mine.last().map(|o| &p.calls[o.call_index]);
            CommProgress {
                comm_hash: m.comm_hash,
                comm_ptr: m.comm_ptr,
                nranks: m.nranks as i32,
                rank: m.rank as i32,
                issued: mine.last().map_or(0, |o| o.seq + 1),
                completed: mine
                    .iter()
                    .filter(|o| !p.calls[o.call_index].in_flight())
                    .map(|o| o.seq + 1)
                    .max()
                    .unwrap_or(0),
                last_call: last.and_then(|c| c.call),
                last_count: mine.last().map_or(0, |o| o.count),
                last_t: last.map(|c| c.t_enter),
                state: "live",
                parent_hash: 0,
            }
        })
        .collect()
}

/// What fr_trace compares between ranks at one sequence number: type, input sizes, input
/// dtypes, output sizes, output dtypes.
type Signature = (
    String,
    Vec<Vec<i64>>,
    Vec<Arc<str>>,
    Vec<Vec<i64>>,
    Vec<Arc<str>>,
);

/// [`Signature`] of one entry.
fn signature(e: &FrEntry) -> Signature {
    (
        e.op_name().to_owned(),
        e.input_sizes.clone(),
        e.input_dtypes.clone(),
        e.output_sizes.clone(),
        e.output_dtypes.clone(),
    )
}

/// How the evidence writes a Flight Recorder entry's number, the one place it is worded:
/// PyTorch's `collective_seq_id` counts from 1 and the shim's `seq` (which the rest of the
/// report quotes) from 0, so the Flight Recorder's #11 is the shim's seq 10. Both are named so
/// that a reader sees one collective, not two a step apart. `shim` is the shim's number as
/// the entry's writer numbers it ([`super::writers::shim_seq_text`]: under nccl2 a `split`
/// takes a number and issues no collective, a list all_gather takes one and issues N).
fn numbered(seq: i64, shim: &str) -> String {
    format!("#{seq} (Flight Recorder collective_seq_id; {shim})")
}

/// An entry at a sequence number the line has already named ([`numbered`]): type, sizes,
/// dtypes and the user's line.
fn describe_entry(e: &FrEntry) -> String {
    let mut s = format!(
        "{} {:?} {}",
        e.op_name(),
        e.input_sizes,
        e.input_dtypes.join(",")
    );
    if let Some(site) = e.site() {
        s.push_str(&format!(" at {site}"));
    }
    s
}

/// Ranks of group `g` without a read dump that a read member stands for (rank → member), on
/// communicator `comm` (the group's, when a rank with both dumps matched it).
fn stood_for(
    g: &ProcessGroup,
    members: &[&RankDump],
    comm: Option<u64>,
    cover: &Cover,
) -> BTreeMap<u32, u32> {
    let Some(comm) = comm else {
        return BTreeMap::new();
    };
    let read: HashSet<u32> = members.iter().map(|d| d.rank).collect();
    g.ranks
        .iter()
        .filter(|r| !read.contains(r))
        .filter_map(|r| {
            let rep = cover.representative(comm, *r)?;
            read.contains(&rep).then_some((*r, rep))
        })
        .collect()
}

/// The read dumps that hold group `g`.
fn members_of<'a>(fr: &'a FlightRecorder, g: &ProcessGroup) -> Vec<&'a RankDump> {
    // As a set: a scan of the group per dump was ranks x ranks for a job of Flight Recorder
    // dumps only.
    let ranks: HashSet<u32> = g.ranks.iter().copied().collect();
    fr.dumps
        .iter()
        .filter(|d| ranks.contains(&d.rank) && d.groups.iter().any(|x| x.name == g.name))
        .collect()
}

/// Each sequence number of group `g`'s collectives with the (rank, entry) of each member there.
fn by_seq<'a>(
    members: &[&'a RankDump],
    g: &ProcessGroup,
) -> BTreeMap<i64, Vec<(u32, &'a FrEntry)>> {
    let mut out: BTreeMap<i64, Vec<(u32, &FrEntry)>> = BTreeMap::new();
    for d in members {
        for e in d
            .entries
            .iter()
            .filter(|e| !e.is_p2p && d.group_of(e).is_some_and(|x| x.name == g.name))
        {
            out.entry(e.collective_seq_id)
                .or_default()
                .push((d.rank, e));
        }
    }
    out
}

/// The entries of one [`Signature`] at a sequence number, by rank.
type SameKind<'a> = Vec<(u32, &'a FrEntry)>;

/// The first sequence number where ranks disagree, with the ranks of each kind, the most
/// common kind first.
fn first_disagreement<'a>(
    by_seq: &BTreeMap<i64, Vec<(u32, &'a FrEntry)>>,
) -> Option<(i64, Vec<SameKind<'a>>)> {
    for (seq, at) in by_seq {
        let mut kinds: BTreeMap<Signature, SameKind<'a>> = BTreeMap::new();
        for (r, e) in at {
            kinds.entry(signature(e)).or_default().push((*r, e));
        }
        if kinds.len() < 2 {
            continue;
        }
        let mut groups: Vec<SameKind<'a>> = kinds.into_values().collect();
        groups.sort_by_key(|v| std::cmp::Reverse(v.len()));
        return Some((*seq, groups));
    }
    None
}

/// The listed-only ranks ([`super::lazy`]) the evidence needs read: in each group of the dumps
/// read so far, a rank no read member stands for, and every rank of a group whose read members
/// disagree on a collective (fr_trace's culprit is the minority against every rank).
pub fn ranks_to_read(
    fr: &FlightRecorder,
    comm_of: &BTreeMap<String, u64>,
    cover: &Cover,
    listed_only: &[(std::path::PathBuf, u32)],
) -> BTreeSet<u32> {
    let listed: BTreeSet<u32> = listed_only.iter().map(|(_, r)| *r).collect();
    let mut out = BTreeSet::new();
    for g in groups(fr).values() {
        let unread: Vec<u32> = g
            .ranks
            .iter()
            .copied()
            .filter(|r| listed.contains(r))
            .collect();
        if unread.is_empty() {
            continue;
        }
        let members = members_of(fr, g);
        let stood_for = stood_for(g, &members, comm_of.get(&g.name).copied(), cover);
        if first_disagreement(&by_seq(&members, g)).is_some() {
            out.extend(unread);
        } else {
            out.extend(unread.into_iter().filter(|r| !stood_for.contains_key(r)));
        }
    }
    out
}

/// One line per process group with something to say: where each rank's last collective was
/// (with the user's line), the first sequence number where ranks disagree, ranks without a
/// dump. A group whose ranks all completed the same last collective says nothing.
pub fn evidence(fr: &FlightRecorder, comm_of: &BTreeMap<String, u64>) -> Vec<Evidence> {
    evidence_covering(fr, comm_of, &Cover::default())
}

/// As [`evidence`], where a rank whose dump was only listed counts as the read rank that stands
/// for it ([`Cover`]; [`ranks_to_read`] has read every rank none stands for).
pub fn evidence_covering(
    fr: &FlightRecorder,
    comm_of: &BTreeMap<String, u64>,
    cover: &Cover,
) -> Vec<Evidence> {
    let mut out = Vec::new();
    for g in groups(fr).values() {
        let group = GroupRead::of(fr, g, comm_of.get(&g.name).copied(), cover);
        out.extend(group.last_collectives_evidence());
        out.extend(group.disagreement_evidence());
        out.extend(group.missing_dumps_evidence());
    }
    out.extend(unpaired_evidence(fr));
    out
}

/// Where ranks stopped in a group: (last seq, op, state, site, the shim's number) → ranks.
type LastCollectives = BTreeMap<(i64, String, String, String, String), Vec<u32>>;

/// One process group as its read dumps tell it, for its evidence.
struct GroupRead<'a> {
    g: &'a ProcessGroup,
    /// `process group 0:default_pg (communicator 0x...)`.
    label: String,
    /// The read dumps that hold the group.
    members: Vec<&'a RankDump>,
    /// Ranks without a read dump that a read member stands for (rank → member).
    stood_for: BTreeMap<u32, u32>,
}

impl<'a> GroupRead<'a> {
    fn of(fr: &'a FlightRecorder, g: &'a ProcessGroup, comm: Option<u64>, cover: &Cover) -> Self {
        let label = match comm {
            Some(h) => format!("process group {} (communicator {h:#018x})", g.label()),
            None => format!("process group {}", g.label()),
        };
        let members = members_of(fr, g);
        let stood_for = stood_for(g, &members, comm, cover);
        GroupRead {
            g,
            label,
            members,
            stood_for,
        }
    }

    /// Each member's last collective in the group, with the ranks that stopped there (a member
    /// and the ranks its dump stands for).
    fn last_collectives(&self) -> LastCollectives {
        let g = self.g;
        let mut stands_for: HashMap<u32, Vec<u32>> = HashMap::new();
        for (r, rep) in &self.stood_for {
            stands_for.entry(*rep).or_default().push(*r);
        }
        let mut last = LastCollectives::new();
        for d in &self.members {
            let mut mine = collectives(d, g).peekable();
            if mine.peek().is_none() {
                continue;
            }
            let mut latest: Option<&FrEntry> = None;
            for e in mine {
                if latest.is_none_or(|l| e.collective_seq_id >= l.collective_seq_id) {
                    latest = Some(e);
                }
            }
            if let Some(e) = latest {
                let key = (
                    e.collective_seq_id,
                    e.op_name().to_owned(),
                    e.state.to_string(),
                    e.site().unwrap_or_default(),
                    super::writers::shim_seq_text(d, g, e),
                );
                // The ranks its dump stands for stopped where it did.
                let ranks = last.entry(key).or_default();
                ranks.push(d.rank);
                ranks.extend(stands_for.get(&d.rank).into_iter().flatten());
            }
        }
        for ranks in last.values_mut() {
            ranks.sort_unstable();
        }
        last
    }

    /// Where each rank's last collective was, unless they all completed the same one.
    fn last_collectives_evidence(&self) -> Option<Evidence> {
        let last = self.last_collectives();
        let all_done = last.len() == 1 && last.keys().all(|k| k.2 == "completed");
        if all_done || last.is_empty() {
            return None;
        }
        let parts: Vec<String> = last
            .iter()
            .map(|((seq, op, state, site, shim), ranks)| {
                let at = if site.is_empty() {
                    String::new()
                } else {
                    format!(" at {site}")
                };
                let at = if at.is_empty() { at } else { format!(",{at}") };
                let n = numbered(*seq, shim);
                if state == "completed" {
                    format!("{} last issued {op} {n}, completed{at}", ranks_named(ranks))
                } else {
                    let wait = if ranks.len() == 1 { "waits" } else { "wait" };
                    format!("{} {wait} in {op} {n}, {state}{at}", ranks_named(ranks))
                }
            })
            .collect();
        let mut ranks: Vec<u32> = self.members.iter().map(|d| d.rank).collect();
        ranks.extend(self.stood_for.keys());
        ranks.sort_unstable();
        let hung: Vec<serde_json::Value> = last
            .iter()
            .map(|((seq, op, state, site, _), ranks)| {
                serde_json::json!({"ranks": ranks, "seq": seq, "op": op, "state": state, "site": site})
            })
            .collect();
        Some(
            Evidence::new(
                EvidenceKind::Progress,
                format!("Flight Recorder, {}: {}", self.label, parts.join("; ")),
            )
            .value("source", "flight_recorder")
            .value("process_group", self.g.label())
            .value("last_collectives", hung)
            .value("ranks_with_dump", &ranks),
        )
    }

    /// The first sequence number where ranks disagree, with the odd rank named when the
    /// others agree (fr_trace's "culprit").
    fn disagreement_evidence(&self) -> Option<Evidence> {
        let g = self.g;
        let (seq, groups) = first_disagreement(&by_seq(&self.members, g))?;
        let seq = &seq;
        // The shim's number as the most common kind's first rank numbers it.
        let (r0, e0) = groups[0][0];
        let shim = self.members.iter().find(|d| d.rank == r0).map_or_else(
            || format!("shim seq {}", seq.saturating_sub(1)),
            |d| super::writers::shim_seq_text(d, g, e0),
        );
        let parts: Vec<String> = groups
            .iter()
            .map(|v| {
                let rs: Vec<u32> = v.iter().map(|(r, _)| *r).collect();
                format!("{} issued {}", ranks_named(&rs), describe_entry(v[0].1))
            })
            .collect();
        let culprit: Vec<u32> = if groups.len() == 2 && groups[0].len() > groups[1].len() {
            groups[1].iter().map(|(r, _)| *r).collect()
        } else {
            Vec::new()
        };
        let what = {
            let (a, b) = (signature(groups[0][0].1), signature(groups[1][0].1));
            if a.0 != b.0 {
                "collective type"
            } else if a.1 != b.1 || a.3 != b.3 {
                "sizes"
            } else {
                "dtypes"
            }
        };
        Some(
            Evidence::new(
                EvidenceKind::Progress,
                format!(
                    "Flight Recorder, {}: ranks disagree on the {what} of collective {}: {}",
                    self.label,
                    numbered(*seq, &shim),
                    parts.join("; ")
                ),
            )
            .value("source", "flight_recorder")
            .value("process_group", g.label())
            .value("seq", seq)
            .value("mismatch", what)
            .value("culprit_ranks", &culprit),
        )
    }

    /// The group's ranks without a dump (read, or stood for by a read one), when some member's
    /// was read.
    fn missing_dumps_evidence(&self) -> Option<Evidence> {
        let read: HashSet<u32> = self.members.iter().map(|d| d.rank).collect();
        let missing: Vec<u32> = self
            .g
            .ranks
            .iter()
            .copied()
            .filter(|r| !read.contains(r) && !self.stood_for.contains_key(r))
            .collect();
        if missing.is_empty() || self.members.is_empty() {
            return None;
        }
        Some(
            Evidence::new(
                EvidenceKind::Gap,
                format!(
                    "Flight Recorder, {}: no dump from {} (a rank killed, crashed or exited before its watchdog wrote one)",
                    self.label,
                    ranks_named(&missing)
                ),
            )
            .value("gap", "flight_recorder_dump_missing")
            .value("process_group", self.g.label())
            .value("ranks_missing", &missing),
        )
    }
}

/// One line per pair of ranks whose send/recv entries do not pair up under a writer whose
/// point-to-point entries can be missing (`nccl-lazy`): missing records, said as such, never a
/// mismatch ([`super::writers::unpaired_p2p`]; their entries are not compared).
fn unpaired_evidence(fr: &FlightRecorder) -> Vec<Evidence> {
    super::writers::unpaired_p2p(fr)
        .into_iter()
        .map(|u| {
            Evidence::new(
                EvidenceKind::Gap,
                format!(
                    "Flight Recorder, process group {}: rank {}'s dump holds {} sends to rank {}, rank {}'s {} receives from rank {}: {} records point-to-point operations on one lazily created communicator per peer pair and can miss entries; the missing ones are missing records, not a mismatch, and this pair's entries are not compared",
                    u.label, u.from, u.sends, u.to, u.to, u.recvs, u.from, u.writer
                ),
            )
            .value("gap", "flight_recorder_p2p_entries_missing")
            .value("process_group", &u.label)
            .value("from", u.from)
            .value("to", u.to)
            .value("sends", u.sends)
            .value("recvs", u.recvs)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_types() {
        assert_eq!(nccl_version_code("2.28.9"), Some(22809));
        assert_eq!(
            crate::flight_recorder::writers::call_id("all_reduce"),
            Some(CallId::NcclAllReduce)
        );
        assert_eq!(crate::flight_recorder::writers::call_id("coalesced"), None);
        assert_ne!(nccl_datatype("Float"), nccl_datatype("Half"));
        assert_ne!(nccl_datatype("Foo"), nccl_datatype("Bar"));
    }

    /// "nccl:send 0->1" in a process group of global ranks 4-7 is group rank 0 sending to
    /// group rank 1 (global 5): its peer in the communicator is 1.
    #[test]
    fn p2p_peers_in_a_subgroup_are_the_groups_own_ranks() {
        use crate::flight_recorder::format::FrEntry;
        use crate::flight_recorder::{ProcessGroup, RankDump};
        let group = ProcessGroup {
            id: "1".into(),
            name: "1".into(),
            desc: "pipeline".into(),
            ranks: vec![4, 5, 6, 7],
        };
        let entry = |name: &str, seq: i64| FrEntry {
            pg_id: 1,
            process_group: vec!["1".into(), "pipeline".into()],
            p2p_seq_id: seq,
            profiling_name: name.into(),
            input_sizes: vec![vec![8]],
            input_dtypes: vec!["Float".into()],
            state: "completed".into(),
            time_created_ns: Some(1_000 + seq),
            time_discovered_completed_ns: Some(2_000 + seq),
            is_p2p: true,
            ..FrEntry::default()
        };
        let dump = RankDump {
            file: "fr/rank_4".into(),
            rank: 4,
            version: "2.10".into(),
            groups: vec![group],
            entries: vec![entry("nccl:send 0->1", 1), entry("nccl:recv 0<-3", 2)],
            ..RankDump::default()
        };
        let comm_of = BTreeMap::from([("1".to_owned(), 0xabc_u64)]);
        let p = stand_in(&dump, &comm_of, None, &HashSet::new());
        let peers: Vec<(CallId, u64)> = p.ops.iter().map(|o| (o.call, o.root_or_peer)).collect();
        assert_eq!(peers, [(CallId::NcclSend, 1), (CallId::NcclRecv, 3)]);
        assert_eq!(p.memberships[0].rank, 0, "rank 4 is the group's rank 0");
    }

    fn nccl2_entry(name: &str, seq: i64, outputs: usize) -> FrEntry {
        FrEntry {
            pg_id: 0,
            process_group: vec!["0".into(), "default_pg".into()],
            collective_seq_id: seq,
            profiling_name: name.into(),
            input_sizes: vec![vec![8]],
            input_dtypes: vec!["Float".into()],
            output_sizes: vec![vec![8]; outputs],
            state: "completed".into(),
            time_created_ns: Some(1_000 + seq),
            time_discovered_completed_ns: Some(2_000 + seq),
            ..FrEntry::default()
        }
    }

    /// Under nccl2 a `split` takes a number and issues nothing, and a list all_gather is one
    /// ncclBroadcast per rank: the stand-in issues what the shim would have recorded, numbered
    /// as the shim numbers it.
    #[test]
    fn an_nccl2_stand_in_issues_the_lowered_calls_at_the_shims_numbers() {
        let dump = RankDump {
            file: "fr/rank_1".into(),
            rank: 1,
            version: "2.10".into(),
            groups: vec![ProcessGroup {
                id: "0".into(),
                name: "0".into(),
                desc: "default_pg".into(),
                ranks: vec![0, 1],
            }],
            entries: vec![
                nccl2_entry("nccl2:all_reduce", 1, 1),
                nccl2_entry("nccl2:split", 2, 1),
                nccl2_entry("nccl2:all_gather", 3, 2),
                nccl2_entry("nccl2:all_reduce", 4, 1),
            ],
            ..RankDump::default()
        };
        let p = stand_in(&dump, &BTreeMap::new(), None, &HashSet::new());
        let ops: Vec<(CallId, u64, u64)> = p
            .ops
            .iter()
            .map(|o| (o.call, o.seq, o.root_or_peer))
            .collect();
        assert_eq!(
            ops,
            [
                (CallId::NcclAllReduce, 0, 0),
                (CallId::NcclBroadcast, 1, 0),
                (CallId::NcclBroadcast, 2, 1),
                (CallId::NcclAllReduce, 3, 0),
            ]
        );
        assert_eq!(p.progress[0].issued, 4);
    }

    /// nccl-lazy runs a pipeline group's sends and receives on one 2-rank communicator per
    /// peer pair: a stand-in's p2p lands there, with the peer's rank in that pair.
    #[test]
    fn nccl_lazy_p2p_runs_on_a_pair_communicator() {
        let group = ProcessGroup {
            id: "1".into(),
            name: "1".into(),
            desc: "pp".into(),
            ranks: vec![0, 1, 2, 3],
        };
        let send = FrEntry {
            pg_id: 1,
            process_group: vec!["1".into(), "pp".into()],
            p2p_seq_id: 1,
            profiling_name: "nccl-lazy:send 2->3".into(),
            input_sizes: vec![vec![8]],
            input_dtypes: vec!["Float".into()],
            state: "completed".into(),
            is_p2p: true,
            ..FrEntry::default()
        };
        let dump = RankDump {
            file: "fr/rank_2".into(),
            rank: 2,
            groups: vec![group.clone()],
            entries: vec![send],
            ..RankDump::default()
        };
        let p = stand_in(&dump, &BTreeMap::new(), None, &HashSet::new());
        let pair = pair_hash(&group, 2, 3);
        let m = p
            .memberships
            .iter()
            .find(|m| m.comm_hash == pair)
            .expect("a pair comm");
        assert_eq!((m.nranks, m.rank), (2, 0));
        assert_eq!(p.ops[0].comm_hash, Some(pair));
        assert_eq!(p.ops[0].root_or_peer, 1, "rank 3 is the pair's rank 1");
    }

    #[test]
    fn rank_ranges() {
        assert_eq!(ranks_named(&[2]), "rank 2");
        assert_eq!(ranks_named(&[0, 1]), "ranks 0-1");
        assert_eq!(ranks_named(&[0, 2]), "ranks 0,2");
        assert_eq!(ranks_named(&[0, 1, 2, 4, 5, 6]), "ranks 0-2,4-6");
    }
}
