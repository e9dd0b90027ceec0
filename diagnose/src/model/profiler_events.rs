//! The profiler plugin's records of one dump as [`ProfOp`]s: its init records name the
//! communicators, a Coll or P2p start record is an operation (tagged through its CollApi or
//! P2pApi parent), a KernelCh record or a GPU-done state says its kernel started and ended, a
//! stop record ends the operation or its kernel. Records name each other by slot or by handle;
//! [`ProfilerEvents`] keeps those names while one dump is read in time order.

use super::{Membership, ProcessModel, ProfOp};
use ncclshim_format::reader::Record;
use ncclshim_format::schema::slot_flags;
use ncclshim_format::{args, ArgView, CallId};
// Per-record maps keyed by the dump's integers: FxHash (see the workspace Cargo.toml).
use rustc_hash::FxHashMap;

/// What the profiler records of one dump name each other by, while they are read.
#[derive(Default)]
pub(super) struct ProfilerEvents {
    /// The `prof_ops` index of each Coll or P2p event, by its slot and by its handle.
    prof_index: FxHashMap<u64, usize>,
    /// The `prof_ops` index of the operation each kernel-channel event belongs to, by the
    /// kernel event's slot and handle (its stop record names one of them).
    kernel_parent: FxHashMap<u64, usize>,
    /// Non-zero user tags of CollApi / P2pApi events, by their handle and slot: the Coll or
    /// P2p under one names it as its parent.
    api_tags: FxHashMap<u64, u64>,
    /// (ctx comm field, comm_hash) of each init record.
    prof_comms: Vec<(u64, u64)>,
}

impl ProfilerEvents {
    /// Reads the init records of `records` (all of them before any event, so events can be
    /// attributed to a communicator): the ABI version NCCL loaded the plugin as, and a
    /// membership per communicator.
    pub(super) fn read_inits(&mut self, p: &mut ProcessModel, records: &[&Record]) {
        for r in records {
            if let Some(init) = r.view::<args::ProfInit>() {
                if let Ok(abi) = u32::try_from(init.abi_version) {
                    p.prof_abi.get_or_insert(abi);
                }
                let comm_hash = init.comm_hash;
                // v1-v3 inits carry no communicator facts (hash 0, rank -1).
                if comm_hash == 0 || init.rank as u32 == u32::MAX {
                    continue;
                }
                self.prof_comms.push((r.comm, comm_hash));
                p.merge_membership(Membership {
                    comm_hash,
                    nranks: init.nranks as u32,
                    rank: init.rank as u32,
                    established: true,
                    ..Membership::default()
                });
            }
        }
    }

    /// The communicator (hash) of a record's comm field: an init's context or hash, else the
    /// only communicator the plugin saw.
    fn comm(&self, c: u64) -> Option<u64> {
        if let Some((_, h)) = self.prof_comms.iter().find(|(ctx, h)| *h == c || *ctx == c) {
            return Some(*h);
        }
        (self.prof_comms.len() == 1).then(|| self.prof_comms[0].1)
    }

    /// A `ProfStart` record at wall time `t`: an operation, an API event or a kernel channel.
    pub(super) fn start(&mut self, p: &mut ProcessModel, r: &Record, t: u64) {
        match r.call() {
            Some(CallId::ProfColl | CallId::ProfP2p) => self.operation(p, r, t),
            Some(CallId::ProfCollApi | CallId::ProfP2pApi) => self.api_event(r),
            Some(CallId::ProfKernelCh) => self.kernel_channel(p, r),
            _ => {}
        }
    }

    /// A Coll or P2p event: a new [`ProfOp`].
    fn operation(&mut self, p: &mut ProcessModel, r: &Record, t: u64) {
        let p2p = r.call() == Some(CallId::ProfP2p);
        // The plugin completes a start record in place when the event stops on
        // the thread that started it; otherwise a ProfStop record follows.
        let stopped_in_place = completed_in_place(r);
        // Channels summarized (the default mask): NCCL starts the event after
        // the kernel launch, and the record stays open until a GPU-done record
        // says the kernel ended.
        let launched = r.flags & slot_flags::ENDS_AT_GPU_DONE != 0;
        // The two kinds differ only in where the fields lie and in NCCL's sequence number
        // (collectives have one, point-to-point operations do not).
        let (seq, func, count, datatype, root_or_peer, parent, handle) = if p2p {
            let a = args::ProfP2p::from_args(&r.args);
            (
                None, a.func, a.count, a.datatype, a.peer, a.parent, a.handle,
            )
        } else {
            let a = args::ProfColl::from_args(&r.args);
            (
                Some(a.seq),
                a.func,
                a.count,
                a.datatype,
                a.root,
                a.parent,
                a.handle,
            )
        };
        let op = ProfOp {
            comm_hash: self.comm(r.comm),
            p2p,
            seq,
            func,
            count,
            datatype,
            root_or_peer,
            t_start: t,
            stopped: stopped_in_place,
            kernel_started: launched,
            kernel_stopped: false,
            user_tag: self.api_tags.get(&parent).copied().unwrap_or(0),
        };
        p.prof_ops.push(op);
        let i = p.prof_ops.len() - 1;
        self.prof_index.insert(r.slot_ref().encode(), i);
        if handle != 0 {
            self.prof_index.insert(handle, i);
        }
    }

    /// A CollApi or P2pApi event: the application's tag, for the operations under it.
    fn api_event(&mut self, r: &Record) {
        let (handle, tag) = if r.call() == Some(CallId::ProfCollApi) {
            let a = args::ProfCollApi::from_args(&r.args);
            (a.handle, a.user_tag)
        } else {
            let a = args::ProfP2pApi::from_args(&r.args);
            (a.handle, a.user_tag)
        };
        if tag != 0 {
            self.api_tags.insert(r.slot_ref().encode(), tag);
            if handle != 0 {
                self.api_tags.insert(handle, tag);
            }
        }
    }

    /// A kernel-channel event: its operation's kernel started (and stopped, when the record
    /// was completed in place).
    fn kernel_channel(&mut self, p: &mut ProcessModel, r: &Record) {
        let k = args::ProfKernelCh::from_args(&r.args);
        if let Some(&i) = self.prof_index.get(&k.parent) {
            p.prof_ops[i].kernel_started = true;
            // Stopped in place: an exit time, or the GPU stop time.
            if completed_in_place(r)
                || (r.flags & slot_flags::COMPLETES_IN_PLACE != 0 && k.gpu_stop_ns != 0)
            {
                p.prof_ops[i].kernel_stopped = true;
            }
            self.kernel_parent.insert(r.slot_ref().encode(), i);
            if k.handle != 0 {
                self.kernel_parent.insert(k.handle, i);
            }
        }
    }

    /// A `ProfStop` record: the end of a kernel channel, or of an operation.
    pub(super) fn stop(&self, p: &mut ProcessModel, r: &Record) {
        let handle = args::ProfStop::from_args(&r.args).handle;
        if let Some(&i) = self.kernel_parent.get(&handle) {
            p.prof_ops[i].kernel_stopped = true;
        } else if let Some(&i) = self.prof_index.get(&handle) {
            p.prof_ops[i].stopped = true;
        }
    }

    /// A `ProfState` record: a GPU-done state ends its operation and the operation's kernel.
    pub(super) fn state(&self, p: &mut ProcessModel, r: &Record) {
        if let Some(&i) = r.gpu_done().and_then(|g| self.prof_index.get(&g.op)) {
            let op = &mut p.prof_ops[i];
            op.kernel_started = true;
            op.kernel_stopped = true;
            op.stopped = true;
        }
    }
}

/// A profiler start record the plugin completed in place (its exit time is the event's stop).
/// Start records without the flag (older plugins, other generators) are instants whose exit
/// time says nothing; their stop is a separate `ProfStop` record.
fn completed_in_place(r: &Record) -> bool {
    r.flags & slot_flags::COMPLETES_IN_PLACE != 0 && r.t_exit_ns.is_some()
}
