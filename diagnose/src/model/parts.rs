//! The parts of one process joined into one: a process's shim and profiler dumps are read apart
//! ([`ProcessModel::from_dump`]), grouped by their identity ([`super::ProcessKey`]), kept apart
//! where two dumps of one writer claim the same identity ([`IdentityClash`]), and merged on one
//! clock ([`ProcessModel::absorb`]); then every process of a boot is put on that boot's best
//! calibration of CLOCK_MONOTONIC.

use super::{IdentityClash, JobModel, ProcessKey, ProcessModel};
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};

fn shift_t(t: u64, delta: i128) -> u64 {
    (i128::from(t) + delta).clamp(0, u64::MAX as i128) as u64
}

impl ProcessModel {
    /// Moves every time by `delta` ns (re-basing on another calibration of the same clock).
    pub fn shift(&mut self, delta: i128) {
        if delta == 0 {
            return;
        }
        for c in &mut self.calls {
            c.t_enter = shift_t(c.t_enter, delta);
            c.t_exit = c.t_exit.map(|t| shift_t(t, delta));
        }
        for o in &mut self.prof_ops {
            o.t_start = shift_t(o.t_start, delta);
        }
        for s in &mut self.signals {
            s.1 = shift_t(s.1, delta);
        }
        if let Some(s) = &mut self.signal {
            s.t = shift_t(s.t, delta);
        }
        self.exit_t = self.exit_t.map(|t| shift_t(t, delta));
        self.exit_call_t = self.exit_call_t.map(|t| shift_t(t, delta));
        self.last_alive = self.last_alive.map(|t| shift_t(t, delta));
        for c in &mut self.progress {
            c.last_t = c.last_t.map(|t| shift_t(t, delta));
        }
        if self.first_t != 0 {
            self.first_t = shift_t(self.first_t, delta);
        }
        self.last_t = shift_t(self.last_t, delta);
        self.clock_offset += delta;
    }

    /// Puts this process on another calibration of CLOCK_MONOTONIC → wall clock.
    pub fn rebase(&mut self, offset: i128, uncertainty: u64) {
        self.shift(offset - self.clock_offset);
        self.clock_uncertainty = uncertainty;
    }

    /// Merges another part of the same process (its other dump file) into this one.
    pub fn absorb(&mut self, mut o: ProcessModel) {
        // One process, one CLOCK_MONOTONIC: put the other part on this part's calibration.
        o.rebase(self.clock_offset, self.clock_uncertainty);
        self.error_index = Default::default();
        let off = self.calls.len();
        self.files.extend(o.files);
        self.synthetic |= o.synthetic;
        self.has_shim |= o.has_shim;
        self.has_prof |= o.has_prof;
        self.clean_exit |= o.clean_exit;
        self.alive |= o.alive;
        self.disabled |= o.disabled;
        self.lost += o.lost;
        self.pruned += o.pruned;
        self.repeated_failures += o.repeated_failures;
        self.torn += o.torn;
        self.damaged.extend(o.damaged);
        if o.first_t != 0 && (self.first_t == 0 || o.first_t < self.first_t) {
            self.first_t = o.first_t;
        }
        self.last_t = self.last_t.max(o.last_t);
        self.env = self.env.take().or(o.env);
        self.libs = self.libs.take().or(o.libs);
        self.host_facts = self.host_facts.take().or(o.host_facts);
        for g in o.gpus {
            if !self.gpus.contains(&g) {
                self.gpus.push(g);
            }
        }
        if self.cmdline.is_empty() {
            self.cmdline = o.cmdline;
        }
        self.calls.extend(o.calls);
        self.coll_tags.extend(o.coll_tags);
        self.ops.extend(o.ops.into_iter().map(|mut op| {
            op.call_index += off;
            op
        }));
        for mut m in o.memberships {
            m.init_call = m.init_call.map(|i| i + off);
            self.merge_membership(m);
        }
        self.prof_ops.extend(o.prof_ops);
        self.signals.extend(o.signals);
        self.survived_signals.extend(o.survived_signals);
        self.signal = self.signal.or(o.signal);
        self.exit_t = self.exit_t.max(o.exit_t);
        if o.exit_call_t > self.exit_call_t {
            self.exit_status = o.exit_status;
            self.exit_via = o.exit_via;
            self.exit_call_t = o.exit_call_t;
        }
        self.last_alive = self.last_alive.max(o.last_alive);
        self.lost_by_thread.extend(o.lost_by_thread);
        self.progress.extend(o.progress);
        for a in o.aggregates {
            self.add_aggregate(a);
        }
        self.comms_not_kept += o.comms_not_kept;
        self.ring_alloc_failed += o.ring_alloc_failed;
        self.alloc_failed |= o.alloc_failed;
        self.notes.extend(o.notes);
        self.nccl_version = self.nccl_version.or(o.nccl_version);
        self.prof_abi = self.prof_abi.or(o.prof_abi);
        if self.run_id.is_empty() {
            self.run_source = o.run_source;
            self.run_id = o.run_id;
        }
    }
}

/// Which writer a per-dump part came from; a process has at most one part of each. Synthetic
/// dumps (tests, tools) may split one process over several files: never a clash.
fn part_writer(p: &ProcessModel) -> Option<u8> {
    match (p.has_shim, p.has_prof) {
        (true, _) => Some(0),
        (_, true) => Some(1),
        _ => None,
    }
}

/// The parts of one identity as processes: each process takes at most one part per writer; a
/// second part of a writer starts another process and is recorded as a clash.
fn split_identity_clashes(
    group: Vec<ProcessModel>,
    clashes: &mut Vec<IdentityClash>,
) -> Vec<Vec<ProcessModel>> {
    let mut processes: Vec<Vec<ProcessModel>> = Vec::new();
    for part in group {
        let writer = part_writer(&part);
        let home = processes
            .iter()
            .position(|parts| writer.is_none() || parts.iter().all(|q| part_writer(q) != writer));
        match (home, processes.first()) {
            (Some(i), _) => processes[i].push(part),
            (None, None) => processes.push(vec![part]),
            (None, Some(first)) => {
                let first = first[0].files.first().cloned().unwrap_or_default();
                clashes.push(IdentityClash {
                    file: part.files.first().cloned().unwrap_or_default(),
                    first,
                    host: part.host.clone(),
                    pid: part.pid,
                });
                processes.push(vec![part]);
            }
        }
    }
    processes
}

impl JobModel {
    /// The processes the parts make, and the identity clashes met joining them.
    pub(super) fn join_parts(parts: Vec<ProcessModel>) -> (Vec<ProcessModel>, Vec<IdentityClash>) {
        // The parts of each process (its shim and profiler dumps, in the order given), merged
        // per process side by side: merging moves and re-times every event of a part.
        let mut by_key: BTreeMap<ProcessKey, Vec<ProcessModel>> = BTreeMap::new();
        for part in parts {
            by_key.entry(part.key()).or_default().push(part);
        }
        let mut identity_clashes = Vec::new();
        let groups: Vec<Vec<ProcessModel>> = by_key
            .into_values()
            .flat_map(|group| split_identity_clashes(group, &mut identity_clashes))
            .collect();
        let processes: Vec<ProcessModel> = groups
            .into_par_iter()
            .filter_map(|group| {
                let mut parts = group.into_iter();
                let mut process = parts.next()?;
                parts.for_each(|part| process.absorb(part));
                Some(process)
            })
            .collect();
        (processes, identity_clashes)
    }

    /// The best calibration of each boot's CLOCK_MONOTONIC among its processes (the smallest
    /// uncertainty): (uncertainty, offset) by boot id, for [`JobModel::from_processes`].
    pub(super) fn best_calibration_per_boot(
        processes: &[ProcessModel],
    ) -> HashMap<String, (u64, i128)> {
        let mut best: HashMap<String, (u64, i128)> = HashMap::new();
        for p in processes.iter().filter(|p| !p.boot_id.is_empty()) {
            let e = best
                .entry(p.boot_id.clone())
                .or_insert((p.clock_uncertainty, p.clock_offset));
            if p.clock_uncertainty < e.0 {
                *e = (p.clock_uncertainty, p.clock_offset);
            }
        }
        best
    }
}
