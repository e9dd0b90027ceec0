//! Catalog C25: one communicator used by several threads at once.
//!
//! NCCL communicators are not thread-safe: operations on one communicator must be issued by one
//! thread at a time, in the same order on every rank. The shim records the thread and the
//! entry/exit time of every call, so two operations on the same communicator whose calls overlap
//! in time on different threads are direct evidence of concurrent use, whatever error or hang
//! followed. Threads that take turns (one returns before the other enters) are legal and not
//! reported.

use crate::finding::registry;
use crate::finding::words::who;
use crate::finding::{Confidence, Finding};
use crate::model::{CallEvent, JobModel};
use ncclshim_format::CallId;
use std::collections::BTreeMap;

/// Two calls on one communicator from different threads whose windows overlap.
struct Overlap {
    first: usize,
    second: usize,
}

/// Whether `a` (entered first) was still inside NCCL when `b` entered.
fn overlaps(a: &CallEvent, b: &CallEvent) -> bool {
    a.tid != b.tid && a.t_exit.is_none_or(|x| x > b.t_enter)
}

fn issues_on_comm(c: &CallEvent) -> bool {
    !c.nested
        && c.comm != 0
        && c.call.is_some_and(|id| {
            id.is_nccl_operation() || matches!(id, CallId::NcclCommDestroy | CallId::NcclCommAbort)
        })
}

/// The overlapping pairs of one process, per communicator pointer (first found per comm).
fn overlaps_in(calls: &[CallEvent]) -> Vec<Overlap> {
    let mut by_comm: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, c) in calls.iter().enumerate() {
        if issues_on_comm(c) {
            by_comm.entry(c.comm).or_default().push(i);
        }
    }
    let mut out = Vec::new();
    for idx in by_comm.values_mut() {
        idx.sort_by_key(|&i| calls[i].t_enter);
        // The call with the latest exit so far, for each thread seen: a later call of another
        // thread overlaps it when it enters before that exit.
        let mut open: Vec<usize> = Vec::new();
        'calls: for &j in idx.iter() {
            for &i in &open {
                if overlaps(&calls[i], &calls[j]) {
                    out.push(Overlap {
                        first: i,
                        second: j,
                    });
                    break 'calls;
                }
            }
            let tid = calls[j].tid;
            open.retain(|&i| calls[i].tid != tid);
            open.push(j);
        }
    }
    out
}

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut f = Finding::new(
        &registry::COMMUNICATOR_USED_FROM_SEVERAL_THREADS,
        "One communicator was used by two threads at the same time",
        Confidence::High,
    )
    .remedy(
        "Issue the operations of each communicator from one thread at a time (a lock around \
         them, or one thread per communicator), in the same order on every rank; threads that \
         need to communicate concurrently each need their own communicator.",
    );
    let mut comms = std::collections::BTreeSet::new();
    for (p, pm) in job.processes.iter().enumerate() {
        for o in overlaps_in(&pm.calls) {
            let (a, b) = (&pm.calls[o.first], &pm.calls[o.second]);
            f.involve(job, p);
            f.explain(p, o.second);
            let a_end = match a.t_exit {
                Some(x) => format!("returned {} µs later", x.saturating_sub(b.t_enter) / 1000),
                None => "never returned".to_owned(),
            };
            // The communicator as every rank knows it (its hash), else the process's pointer.
            let comm = pm
                .memberships
                .iter()
                .find(|m| m.comm_ptr == b.comm)
                .map_or(b.comm, |m| m.comm_hash);
            // The race scrambles the communicator's order on every rank: the ranks that look
            // behind on it wait because of it (their hang is this finding's to explain).
            comms.insert(comm);
            f.evidence(format!(
                "{}: thread {} entered {} on comm {comm:#x} while thread {} was inside {} (which {a_end})",
                who(job, p),
                b.tid,
                b.name,
                a.tid,
                a.name,
            ));
        }
    }
    if f.process_ids.is_empty() {
        return Vec::new();
    }
    for comm in comms {
        for (_, p) in job.comm_members(comm) {
            f.process_ids.insert(p);
        }
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(tid: u32, comm: u64, t_enter: u64, t_exit: Option<u64>) -> CallEvent {
        CallEvent {
            call: Some(CallId::NcclAllReduce),
            name: "ncclAllReduce".into(),
            rc: 0,
            is_cuda: false,
            t_enter,
            t_exit,
            comm,
            args: [0; 9],
            error_text: None,
            tid,
            nested: false,
        }
    }

    #[test]
    fn overlapping_calls_of_two_threads_on_one_comm() {
        let calls = [
            call(1, 0xa, 100, Some(200)),
            call(2, 0xa, 150, Some(300)),
            call(1, 0xa, 400, Some(500)),
        ];
        let o = overlaps_in(&calls);
        assert_eq!(o.len(), 1);
        assert_eq!((o[0].first, o[0].second), (0, 1));
    }

    #[test]
    fn threads_taking_turns_or_separate_comms_are_fine() {
        let turns = [
            call(1, 0xa, 100, Some(200)),
            call(2, 0xa, 250, Some(300)),
            call(1, 0xa, 350, Some(400)),
        ];
        assert!(overlaps_in(&turns).is_empty());
        let separate = [call(1, 0xa, 100, Some(200)), call(2, 0xb, 150, Some(300))];
        assert!(overlaps_in(&separate).is_empty());
        let same_thread = [call(1, 0xa, 100, None), call(1, 0xa, 150, Some(300))];
        assert!(overlaps_in(&same_thread).is_empty());
    }

    #[test]
    fn a_call_that_never_returned_overlaps_every_later_one() {
        let calls = [call(1, 0xa, 100, None), call(2, 0xa, 10_000, Some(10_100))];
        assert_eq!(overlaps_in(&calls).len(), 1);
    }
}
