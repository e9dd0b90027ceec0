//! What a long history may lose: [`ProcessModel::compact`] keeps of each thread's successful
//! collectives only the last few (and of the profiler's finished Coll events the last few per
//! communicator), and keeps of a failure repeated thousands of times only its first and last.
//! [`calls_beyond_keep`] makes the same choice on a dump's records, so the calls `compact` would
//! drop are never built.

use super::{prunable, record_is_cuda, ProcessModel};
use ncclshim_format::reader::Record;
use ncclshim_format::schema::slot_flags;
use ncclshim_format::{CallId, RecordKind};
// Per-record maps keyed by the dump's integers: FxHash (see the workspace Cargo.toml).
use rustc_hash::FxHashMap;

impl ProcessModel {
    /// Drops what no diagnosis reads from a long history, so a 16k-rank job's model stays
    /// small: of each thread's successful, completed collectives (thousands per ring) only the
    /// last `keep` stay, and of the profiler's
    /// finished Coll events the last `keep` per communicator. Failed, in-flight and
    /// non-operation calls (init, destroy, async-error polls, driver calls) all stay, as do the
    /// communicator table's progress counters that never wrap. `pruned` counts the calls
    /// dropped.
    pub fn compact(&mut self, keep: usize) {
        self.error_index = Default::default();
        let mut seen_per_tid: FxHashMap<u32, usize> = FxHashMap::default();
        let mut keep_call = vec![true; self.calls.len()];
        for (i, c) in self.calls.iter().enumerate().rev() {
            if c.prunable() {
                let n = seen_per_tid.entry(c.tid).or_default();
                *n += 1;
                keep_call[i] = *n <= keep;
            }
        }
        let pruned_collectives = keep_call.iter().filter(|k| !**k).count();
        self.repeated_failures += self.collapse_repeated_failures(&mut keep_call);
        let dropped = keep_call.iter().filter(|k| !**k).count();
        if dropped > 0 {
            // Old index -> new index, for the indices the model holds into `calls`.
            let mut new_index = vec![usize::MAX; self.calls.len()];
            let mut next = 0;
            for (i, k) in keep_call.iter().enumerate() {
                if *k {
                    new_index[i] = next;
                    next += 1;
                }
            }
            let mut i = 0;
            self.calls.retain(|_| {
                i += 1;
                keep_call[i - 1]
            });
            self.calls.shrink_to_fit();
            self.ops.retain_mut(|op| {
                op.call_index = new_index[op.call_index];
                op.call_index != usize::MAX
            });
            self.ops.shrink_to_fit();
            for m in &mut self.memberships {
                m.init_call = m
                    .init_call
                    .map(|i| new_index[i])
                    .filter(|&i| i != usize::MAX);
            }
            self.pruned += pruned_collectives as u64;
        }
        let mut seen_per_comm: FxHashMap<Option<u64>, usize> = FxHashMap::default();
        let mut keep_op = vec![true; self.prof_ops.len()];
        for (i, o) in self.prof_ops.iter().enumerate().rev() {
            if !o.p2p && o.stopped && o.kernel_stopped {
                let n = seen_per_comm.entry(o.comm_hash).or_default();
                *n += 1;
                keep_op[i] = *n <= keep;
            }
        }
        if keep_op.iter().any(|k| !*k) {
            let mut i = 0;
            self.prof_ops.retain(|_| {
                i += 1;
                keep_op[i - 1]
            });
        }
        // Also when nothing was dropped: `add_dump` reserved room for every profiler record.
        self.prof_ops.shrink_to_fit();
    }

    /// Marks in `keep_call` the failures that only repeat another: the same call failing with
    /// the same return code, communicator and NCCL text (a rank retrying its rendezvous
    /// thousands of times). The first and the last of each kind stay (when it began, that it
    /// was still failing at the end); the others are dropped before any rule reads them, and
    /// counted (the return value). Every rule reads one failure where it read thousands.
    fn collapse_repeated_failures(&self, keep_call: &mut [bool]) -> u64 {
        type Kind<'a> = (Option<CallId>, i32, bool, u64, Option<&'a str>);
        let mut span: FxHashMap<Kind, (usize, usize)> = FxHashMap::default();
        for (i, c) in self.calls.iter().enumerate().filter(|(_, c)| c.failed()) {
            let kind = (c.call, c.rc, c.is_cuda, c.comm, c.error_text.as_deref());
            span.entry(kind).and_modify(|s| s.1 = i).or_insert((i, i));
        }
        let mut collapsed = 0;
        for (i, c) in self.calls.iter().enumerate().filter(|(_, c)| c.failed()) {
            let kind = (c.call, c.rc, c.is_cuda, c.comm, c.error_text.as_deref());
            let (first, last) = span[&kind];
            if i != first && i != last {
                keep_call[i] = false;
                collapsed += 1;
            }
        }
        collapsed
    }
}

/// Per record (in `records`' order): a call that [`ProcessModel::compact`]`(keep)` would drop,
/// i.e. a [`CallEvent::prunable`] one older than its thread's last `keep` such calls. Walked
/// from the newest, as `compact` walks the built calls, so both choose the same calls.
pub(super) fn calls_beyond_keep(records: &[&Record], keep: usize) -> Vec<bool> {
    let mut skip = vec![false; records.len()];
    if keep == usize::MAX {
        return skip;
    }
    let mut seen_per_tid: FxHashMap<u32, usize> = FxHashMap::default();
    for (j, r) in records.iter().enumerate().rev() {
        if r.kind() != Some(RecordKind::Call) {
            continue;
        }
        let call = r.call();
        let nested = r.flags & slot_flags::NESTED != 0;
        if prunable(call, r.in_flight(), record_is_cuda(r, call), r.rc, nested) {
            let n = seen_per_tid.entry(r.tid).or_default();
            *n += 1;
            skip[j] = *n > keep;
        }
    }
    skip
}
