//! How a reader learns that a profiler event finished, in both record shapes the plugin writes:
//! in place (the start record got an exit time, a KernelCh/KernelPhase start record got its
//! `gpu_stop_ns`) or through a separate record that names the start (`prof_stop`, or a
//! `prof_state` 22/31 when the kernel stop was reported on a thread that could not reach it).
//! Only start records flagged `COMPLETES_IN_PLACE` are read for the in-place form. Under the
//! default mask an operation's kernel channels have no records of their own: one `prof_state`
//! GPU-done record names the operation.

#![allow(dead_code)]

use ncclshim_dump::schema::slot_flags;
use ncclshim_dump::{CallId, RecordKind};
use ncclshim_format::reader::{Dump, GpuDone, Record};
use std::collections::{HashMap, HashSet};

/// Argument index of `gpu_stop_ns` in KernelCh / KernelPhase start records.
pub const KERNEL_CH_GPU_STOP: usize = 4;
pub const KERNEL_PHASE_GPU_STOP: usize = 5;

#[derive(Default)]
pub struct Completion {
    /// Start record refs whose event was stopped.
    pub stopped: HashSet<u64>,
    /// Start record ref → GPU stop time (KernelCh state 22 / KernelPhase state 31).
    pub kernel_stop: HashMap<u64, u64>,
    /// How many stops / kernel stops were recorded in place vs. as separate records.
    pub stops_in_place: usize,
    pub stop_records: usize,
    pub kernel_stops_in_place: usize,
    pub kernel_stop_records: usize,
    /// Operation start record ref → its GPU-done record (channels summarized, the default).
    pub gpu_done: HashMap<u64, GpuDone>,
}

impl Completion {
    pub fn of(d: &Dump) -> Self {
        let mut c = Self::default();
        for r in &d.records {
            if let Some(g) = r.gpu_done() {
                // The end of an operation whose record stayed open (`ENDS_AT_GPU_DONE`).
                c.stopped.insert(g.op);
                c.gpu_done.insert(g.op, g);
                continue;
            }
            match r.kind() {
                Some(RecordKind::ProfStart) if r.flags & slot_flags::COMPLETES_IN_PLACE != 0 => {
                    let me = r.slot_ref().encode();
                    if r.t_exit_ns.is_some() {
                        c.stopped.insert(me);
                        c.stops_in_place += 1;
                    }
                    let gpu_stop = match r.call() {
                        Some(CallId::ProfKernelCh) => r.args[KERNEL_CH_GPU_STOP],
                        Some(CallId::ProfKernelPhase) => r.args[KERNEL_PHASE_GPU_STOP],
                        _ => 0,
                    };
                    if gpu_stop != 0 {
                        c.kernel_stop.insert(me, gpu_stop);
                        c.kernel_stops_in_place += 1;
                    }
                }
                Some(RecordKind::ProfStop) => {
                    c.stopped.insert(r.args[0]);
                    c.stop_records += 1;
                }
                Some(RecordKind::ProfState) if matches!(r.args[1], 22 | 31) => {
                    c.kernel_stop.insert(r.args[0], r.args[2]);
                    c.kernel_stop_records += 1;
                }
                _ => {}
            }
        }
        c
    }

    pub fn stopped(&self, start: &Record) -> bool {
        self.stopped.contains(&start.slot_ref().encode())
    }

    pub fn gpu_done(&self, start: &Record) -> Option<GpuDone> {
        self.gpu_done.get(&start.slot_ref().encode()).copied()
    }

    pub fn kernel_stop(&self, start: &Record) -> Option<u64> {
        self.kernel_stop.get(&start.slot_ref().encode()).copied()
    }
}
