//! Where one rank stood on one communicator, by every source that counts its progress, and
//! where it is stuck inside NCCL. Read once for the story (`Member::position`); the hang rule
//! and the known-bug rule read it from there.
//!
//! Sources: the shim numbers every operation of a communicator (`seq`), and its communicator
//! table keeps the last operation issued even when the thread's ring wrapped over every record
//! of it; NCCL's profiler numbers collectives per function (`knowledge/profiler.toml`), so a
//! rank's position there is the count of its numbered collectives, not the highest number; the
//! profiler's running aggregates (operations started and ended, never lost to wrap) cover
//! every rank even when no per-operation record survived.
//!
//! Stuck inside NCCL: a call on the communicator that never returned, else a profiler record
//! that never stopped or whose kernel never ended. A send/recv to the rank itself never reports
//! a GPU end, so its missing end is no hang; a collective whose kernel ended on a peer did not
//! hang on this rank (the peer could not have finished it alone); and a communicator's kernels
//! end in issue order, so an operation started before one whose kernel ended is not where the
//! rank is stuck, even when its own end was lost.

use crate::model::ProcessModel;
use ncclshim_format::CallId;
use rustc_hash::{FxHashMap, FxHashSet};

/// Where a rank is stuck inside NCCL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inside {
    /// `ncclAllReduce seq 5 never returned`, `collective seq 5 (AllReduce) its kernel never ended
    /// (profiler)` (the profiler's number of that function), `Send to/from peer 3 ...`.
    pub text: String,
    /// The call or the profiler's function name.
    pub op: String,
    pub seq: Option<u64>,
    /// `call_never_returned`, `kernel_never_ended` or `never_completed`.
    pub state: &'static str,
    /// When it entered the call, or the profiler's operation started.
    pub since: u64,
}

/// One rank's progress on one communicator, per source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Position {
    /// The shim's number of its last operation (records and communicator table together).
    pub shim: Option<u64>,
    /// The profiler's position of its last collective (numbered per function: the sum over
    /// functions of their highest number + 1, minus one), comparable with a peer's.
    pub profiler: Option<u64>,
    /// The profiler's running totals: operations started, and those whose kernel ended.
    pub aggregates: Option<(u64, u64)>,
    /// Its last operation in words (`ncclAllReduce seq 7`).
    pub last_call: Option<String>,
    /// What it is stuck in, when inside NCCL.
    pub inside: Option<Inside>,
}

/// A collective as NCCL's profiler numbers it on a communicator (see `ProcessModel::prof_seq_key`).
pub type NumberedColl = (Option<u64>, u64);

/// The collectives of `comm` whose kernel ended on some member (`processes`).
pub fn ended_somewhere<'a>(
    processes: impl Iterator<Item = &'a ProcessModel>,
    comm: u64,
) -> FxHashSet<NumberedColl> {
    let mut ended = FxHashSet::default();
    for pm in processes {
        ended.extend(
            pm.prof_ops
                .iter()
                .filter(|o| o.comm_hash == Some(comm) && !o.p2p && o.kernel_stopped)
                .filter_map(|o| pm.prof_seq_key(o)),
        );
    }
    ended
}

/// The profiler's position (see [`Position::profiler`]); None without numbered events.
fn profiler_position(pm: &ProcessModel, comm: u64) -> Option<u64> {
    let mut highest: FxHashMap<Option<u64>, u64> = FxHashMap::default();
    for o in pm.prof_ops.iter().filter(|o| o.comm_hash == Some(comm)) {
        if let Some((func, seq)) = pm.prof_seq_key(o) {
            let h = highest.entry(func).or_default();
            *h = (*h).max(seq + 1);
        }
    }
    (!highest.is_empty()).then(|| highest.values().sum::<u64>() - 1)
}

/// The call `pm.calls[call]` that never returned, as the place the rank is stuck.
fn inside_call(pm: &ProcessModel, call: usize) -> Inside {
    let c = &pm.calls[call];
    let seq = c
        .arg("seq")
        .filter(|_| c.call.is_some_and(CallId::is_nccl_operation));
    // The application's own name for the operation, when it tagged it (NCCL 2.31+).
    let tag = crate::profnames::user_tag_text(pm.coll_tag(c));
    Inside {
        text: match seq {
            Some(s) => format!("{} seq {s}{tag} never returned", c.name),
            None => format!("{}{tag} never returned", c.name),
        },
        op: c.name.to_string(),
        seq,
        state: "call_never_returned",
        since: c.t_enter,
    }
}

/// The profiler's operation the rank is stuck in, when no call of it is (see the module header).
fn inside_profiler(
    pm: &ProcessModel,
    comm: u64,
    ended: &FxHashSet<NumberedColl>,
) -> Option<Inside> {
    // Issue order is start order: the profiler's numbers restart per function.
    let newest_ended = pm
        .prof_ops
        .iter()
        .filter(|o| o.comm_hash == Some(comm) && o.kernel_stopped)
        .map(|o| o.t_start)
        .max();
    let o = pm
        .prof_ops
        .iter()
        .filter(|o| {
            o.comm_hash == Some(comm) && (!o.stopped || (o.kernel_started && !o.kernel_stopped))
        })
        .filter(|o| !pm.gpu_end_never_reported(o))
        .filter(|o| newest_ended.is_none_or(|n| o.t_start > n))
        .filter(|o| pm.prof_seq_key(o).is_none_or(|k| !ended.contains(&k)))
        .min_by_key(|o| o.t_start)?;
    let (what, state) = if o.kernel_started && !o.kernel_stopped {
        ("its kernel never ended", "kernel_never_ended")
    } else {
        ("never completed", "never_completed")
    };
    let func = crate::profnames::func_name(o.func);
    // The application's own name for the operation, when it tagged it (NCCL 2.31+).
    let tag = crate::profnames::user_tag_text(o.user_tag);
    Some(Inside {
        text: match (o.p2p, o.seq) {
            (true, _) => format!(
                "{func}{tag} to/from peer {} {what} (profiler)",
                o.root_or_peer
            ),
            // Per-function numbering: "seq 5 (AllReduce)" is the fifth AllReduce.
            (false, Some(s)) => format!("collective seq {s} ({func}{tag}) {what} (profiler)"),
            (false, None) => format!("collective ({func}{tag}) {what} (profiler)"),
        },
        op: func.to_string(),
        seq: o.seq,
        state,
        since: o.t_start,
    })
}

/// Process `pm`'s position on `comm`; `in_call`: the call of it that never returned, if any
/// (the member's place); `ended`: [`ended_somewhere`] for the communicator.
pub fn of(
    pm: &ProcessModel,
    comm: u64,
    in_call: Option<usize>,
    ended: &FxHashSet<NumberedColl>,
) -> Position {
    let shim_seq = pm
        .ops
        .iter()
        // All ones: an operation the recorder could not number (ncclBroadcast inside ncclBcast).
        .filter(|o| o.comm_hash == Some(comm) && o.seq != u64::MAX)
        .map(|o| o.seq)
        .max();
    let inside = match in_call {
        Some(call) => Some(inside_call(pm, call)),
        None => inside_profiler(pm, comm, ended),
    };
    let table = pm
        .progress
        .iter()
        .filter(|c| c.comm_hash == comm && c.issued > 0)
        .max_by_key(|c| c.issued);
    let table_seq = table.map(|c| c.issued - 1);
    let last_call = pm
        .ops
        .iter()
        .filter(|o| o.comm_hash == Some(comm))
        .max_by_key(|o| o.seq)
        .map(|o| (o.call.name(), o.seq))
        .filter(|(_, s)| table_seq.is_none_or(|t| *s >= t))
        .or_else(|| table.and_then(|c| Some((c.last_call?.name(), c.issued - 1))))
        .map(|(name, seq)| format!("{name} seq {seq}"));
    Position {
        shim: shim_seq.max(table_seq),
        profiler: profiler_position(pm, comm),
        aggregates: pm
            .aggregate(comm)
            .map(|a| (a.totals.count, a.totals.timed_count)),
        last_call,
        inside,
    }
}
