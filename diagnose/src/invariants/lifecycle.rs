//! Lifecycle: each communicator handle on each rank lives in the order NCCL's API allows:
//! created by an init that succeeded, used, then finalized and destroyed (or aborted); nothing
//! but `ncclCommDestroy` after `ncclCommFinalize`, nothing at all after destroy or abort. (That
//! the ranks of a communicator make the same collective calls together is the story's
//! comparison, judged by the mismatch rules.)

use super::contract::{Family, Invariant, Violation};
use crate::finding::words::name_processes;
use crate::finding::Evidence;
use crate::model::JobModel;
use crate::story::Story;
use std::collections::{BTreeMap, BTreeSet};

pub static NO_USE_AFTER_DESTROY: Invariant = Invariant {
    id: "no-use-after-destroy",
    family: Family::Lifecycle,
    statement: "a communicator is not used after ncclCommDestroy or ncclCommAbort, and after ncclCommFinalize only destroyed",
    reads: &["every call's communicator handle in order per process", "init calls that returned a handle"],
    remedy: "Do not call NCCL on a communicator after ncclCommDestroy / ncclCommAbort (its memory is freed), nor anything but ncclCommDestroy after ncclCommFinalize: check the teardown order (a watchdog or a second owner of the handle still using it).",
    source: "NCCL API, ncclCommFinalize / ncclCommDestroy / ncclCommAbort (\"frees resources\"; the handle is invalid afterwards)",
    standalone: false,
    check: no_use_after_destroy,
};

pub static NO_CALL_AFTER_FAILED_INIT: Invariant = Invariant {
    id: "no-call-after-failed-init",
    family: Family::Lifecycle,
    statement: "a communicator whose init failed does not exist: no operation is issued on it",
    reads: &["init calls' results per process", "later calls and their communicator handle"],
    remedy: "Stop at the failed init (check its result) instead of issuing operations: the later errors only echo the missing communicator; fix what made the init fail.",
    source: "NCCL API: an init that does not return ncclSuccess (or ncclInProgress) creates no communicator",
    standalone: false,
    check: no_call_after_failed_init,
};

/// Calls that may follow a finalize on the same handle.
fn allowed_after_finalize(name: &str) -> bool {
    matches!(
        name,
        "ncclCommDestroy" | "ncclCommAbort" | "ncclCommGetAsyncError" | "ncclCommFinalize"
    )
}

fn no_use_after_destroy(job: &JobModel, _: &Story) -> Vec<Violation> {
    let mut out = Vec::new();
    for (p, pm) in job.processes.iter().enumerate() {
        // A handle created later at the same address is a new communicator.
        let created_at: BTreeMap<usize, u64> = pm
            .memberships
            .iter()
            .filter_map(|m| Some((m.init_call?, m.comm_ptr)))
            .filter(|&(_, ptr)| ptr != 0)
            .collect();
        // handle → (the call that ended it, whether it was a finalize).
        let mut ended: BTreeMap<u64, (usize, bool)> = BTreeMap::new();
        let mut first_misuse: Option<(usize, usize)> = None;
        for (i, c) in pm.calls.iter().enumerate() {
            if let Some(ptr) = created_at.get(&i) {
                ended.remove(ptr);
            }
            if c.is_cuda || c.comm == 0 || c.is_init() {
                continue;
            }
            if let Some(&(end, finalize)) = ended.get(&c.comm) {
                // Strictly after the end returned (a record read twice is no second use).
                let done = pm.calls[end].t_exit.unwrap_or(u64::MAX);
                if c.t_enter > done && (!finalize || !allowed_after_finalize(&c.name)) {
                    first_misuse = Some((end, i));
                    break;
                }
            }
            match c.name.as_ref() {
                "ncclCommDestroy" | "ncclCommAbort" => {
                    ended.insert(c.comm, (i, false));
                }
                "ncclCommFinalize" => {
                    ended.entry(c.comm).or_insert((i, true));
                }
                _ => {}
            }
        }
        let Some((end, used)) = first_misuse else {
            continue;
        };
        let (e, u) = (&pm.calls[end], &pm.calls[used]);
        let title = format!(
            "{} used communicator {:#x} after {}: {} {:.1} ms later",
            name_processes(job, &[p]),
            u.comm,
            e.name,
            u.name,
            u.t_enter.saturating_sub(e.t_enter) as f64 / 1e6
        );
        out.push(
            Violation::new(&NO_USE_AFTER_DESTROY, title, vec![p])
                .since(u.t_enter)
                .fact(Evidence::call(e).of(job, p))
                .fact(Evidence::call(u).of(job, p)),
        );
    }
    out
}

fn no_call_after_failed_init(job: &JobModel, _: &Story) -> Vec<Violation> {
    let mut out = Vec::new();
    for (p, pm) in job.processes.iter().enumerate() {
        // Handles this process was ever given (a NULL handle is never one).
        let handles: BTreeSet<u64> = pm.memberships.iter().map(|m| m.comm_ptr).collect();
        // Only a complete record can say a handle was never created.
        if pm.comms_not_kept > 0 || pm.lost > 0 || pm.pruned > 0 {
            continue;
        }
        let mut failed_init = None;
        for (i, c) in pm.calls.iter().enumerate() {
            if c.is_cuda {
                continue;
            }
            if c.is_init() {
                if c.failed() && c.rc != 7 {
                    failed_init.get_or_insert(i);
                } else if c.rc == 0 {
                    failed_init = None;
                }
                continue;
            }
            let Some(fi) = failed_init else { continue };
            // An operation on no communicator this process was given.
            if c.operation().is_some() && (c.comm == 0 || !handles.contains(&c.comm)) {
                let f = &pm.calls[fi];
                let title = format!(
                    "{} issued {} on a communicator that does not exist: its {} had failed ({})",
                    name_processes(job, &[p]),
                    c.name,
                    f.name,
                    f.rc_name()
                );
                out.push(
                    Violation::new(&NO_CALL_AFTER_FAILED_INIT, title, vec![p])
                        .since(c.t_enter)
                        .fact(Evidence::call(f).of(job, p))
                        .fact(Evidence::call(c).of(job, p)),
                );
                break;
            }
        }
    }
    out
}
