//! The job's failures in time: each process's own (failed calls, async errors, the signals that
//! ended it, once [`ProcessModel::settle_signals`] has told those from the faults it survived),
//! and the processes that ended while the job went on without them.

use super::{is_termination_signal, FailureEvent, FailureWhat, JobFailure, JobModel, ProcessModel};
use rayon::prelude::*;

impl ProcessModel {
    /// A fault is how a process ended only if it did not go on: the JVM, Julia, Go and
    /// `sigsetjmp` probes handle SIGSEGV themselves and carry on. It went on when the signal's
    /// own thread made a call after it (its handler returned or jumped away), or when the
    /// program's own handler returned (counted by the shim's) and any call followed. Those
    /// faults move to `survived_signals`. Other threads' calls alone prove nothing: they run
    /// on while a crashing thread's handlers write tracebacks, or hang. A request to stop
    /// (SIGTERM, SIGINT) is never moved: a program that handles it and cleans up (destroying
    /// its communicators) was still asked to stop.
    pub(super) fn settle_signals(&mut self) {
        let header = self.signal;
        let returned = header.is_some_and(|s| s.handler_returns > 0);
        let calls = &self.calls;
        let went_on = |signo: u64, t: u64| {
            if is_termination_signal(signo) {
                return false;
            }
            let own_thread = header
                .filter(|h| h.signo == signo && h.t == t)
                .map(|h| h.tid);
            calls
                .iter()
                .any(|c| c.t_enter > t && (returned || Some(c.tid) == own_thread))
        };
        let (survived, fatal): (Vec<_>, Vec<_>) = self
            .signals
            .iter()
            .partition(|&&(signo, t)| went_on(signo, t));
        if header.is_some_and(|h| went_on(h.signo, h.t)) {
            self.signal = None;
        }
        self.signals = fatal;
        self.survived_signals.extend(survived);
    }

    /// Failed calls, async errors and fatal signals of this process, as (time, what).
    pub fn failures(&self) -> Vec<FailureEvent> {
        let mut out = Vec::new();
        for (i, c) in self.calls.iter().enumerate() {
            if c.failed() {
                out.push(FailureEvent {
                    t: c.fail_time(),
                    what: FailureWhat::Call(i),
                });
            } else if c.async_error().is_some() {
                out.push(FailureEvent {
                    t: c.t_enter,
                    what: FailureWhat::AsyncError(i),
                });
            }
        }
        // A crash is a failure at once; a request to stop (SIGTERM, SIGINT) is one only when
        // the job went on without this process (decided across the job, like `Died`).
        for &(signo, t) in &self.signals {
            if !is_termination_signal(signo) {
                out.push(FailureEvent {
                    t,
                    what: FailureWhat::Signal(signo),
                });
            }
        }
        out.sort_by_key(|f| f.t);
        out
    }
}

impl JobModel {
    /// Every process's own failures ([`ProcessModel::failures`]), in process order.
    pub(super) fn own_failures(processes: &[ProcessModel]) -> Vec<JobFailure> {
        // Each process's own failures side by side (a scan of all its calls), then in process
        // order as one loop would list them.
        let per_process: Vec<Vec<FailureEvent>> =
            processes.par_iter().map(ProcessModel::failures).collect();
        per_process
            .into_iter()
            .enumerate()
            .flat_map(|(i, fs)| {
                fs.into_iter().map(move |f| JobFailure {
                    process: i,
                    t: f.t,
                    what: f.what,
                })
            })
            .collect()
    }

    /// Adds to `failures` the processes that ended while the job went on without them
    /// ([`ended_while_job_went_on`]), in process order: each one added counts as a failure of
    /// its own for the processes after it.
    pub(super) fn add_ended_processes(processes: &[ProcessModel], failures: &mut Vec<JobFailure>) {
        // A process that vanished while others went on is a failure at its last record — a lower
        // bound, so only when its peers outlived it: a whole job killed at once is a hang, and a
        // rank blocked in communicator init was waiting, not failing.
        // Per process: whether it failed and its latest failure time, kept up to date as
        // failures are added below (scanning `failures` per process was ranks x ranks).
        let mut failed = vec![false; processes.len()];
        let mut last_failure_t: Vec<Option<u64>> = vec![None; processes.len()];
        for f in failures.iter() {
            failed[f.process] = true;
            last_failure_t[f.process] = last_failure_t[f.process].max(Some(f.t));
        }
        for i in 0..processes.len() {
            if failed[i] {
                continue;
            }
            if let Some(f) = ended_while_job_went_on(processes, i, &last_failure_t) {
                failed[i] = true;
                last_failure_t[i] = last_failure_t[i].max(Some(f.t));
                failures.push(f);
            }
        }
    }
}

/// Process `i`'s end as a failure, when it vanished (or was asked to stop) and the job went on
/// without it; `last_failure_t`: each process's latest failure so far.
fn ended_while_job_went_on(
    processes: &[ProcessModel],
    i: usize,
    last_failure_t: &[Option<u64>],
) -> Option<JobFailure> {
    let p = &processes[i];
    let stop_signal = p
        .signals
        .iter()
        .find(|(signo, _)| is_termination_signal(*signo))
        .copied();
    let crashed = p.signals.iter().any(|(s, _)| !is_termination_signal(*s));
    let vanished = p.died() && p.signals.is_empty();
    if crashed || !(vanished || stop_signal.is_some()) {
        return None;
    }
    // A rank blocked in communicator init was waiting for its peers, not failing.
    if p.in_flight_calls().any(|(_, c)| c.is_init()) {
        return None;
    }
    let end = stop_signal.map_or(p.last_t, |(_, t)| t);
    // Blocked in a call when it ended (init, a collective's enqueue, a group end) while
    // the rest of the job merely lives on: it was waiting on its peers, not failing; the
    // stuck-rank checks say on what.
    let blocked = p.in_flight_calls().next().is_some();
    let outlived = outlived_by_events(processes, i, end, last_failure_t)
        || (!blocked && vanished && outlived_by_calls(processes, i, end))
        || (!blocked && processes.iter().enumerate().any(|(j, q)| j != i && q.alive));
    outlived.then_some(JobFailure {
        process: i,
        t: end,
        what: match stop_signal {
            Some((signo, _)) => FailureWhat::Signal(signo),
            None => FailureWhat::Died,
        },
    })
}

/// Peers that exited cleanly or failed after process `i`'s `end` went on without it.
fn outlived_by_events(
    processes: &[ProcessModel],
    i: usize,
    end: u64,
    last_failure_t: &[Option<u64>],
) -> bool {
    processes.iter().enumerate().any(|(j, q)| {
        j != i
            && ((q.clean_exit && q.exit_t.is_none_or(|x| x > end))
                || last_failure_t[j].is_some_and(|t| t >= end))
    })
}

/// A process busy until its last record (calls every few microseconds) ended there: peers
/// that entered NCCL calls well after that went on without it, even when they were stopped
/// later themselves (blocked in a collective that needed it).
fn outlived_by_calls(processes: &[ProcessModel], i: usize, end: u64) -> bool {
    let p = &processes[i];
    p.busy_spacing().is_some_and(|gap| {
        processes.iter().enumerate().any(|(j, q)| {
            let margin = gap
                .saturating_mul(20)
                .max(1_000_000)
                .saturating_add(p.clock_uncertainty.max(q.clock_uncertainty));
            j != i
                && q.calls
                    .iter()
                    .any(|c| c.t_enter > end.saturating_add(margin))
        })
    })
}
