//! What one record draws as, whatever track it lands on: its slice name, its arguments, whether
//! it failed, whether the profiler completed it in place, and the groups of tracks
//! ([`Group`]). Under both the items of a dump (`items`) and the writer of the trace (`lib.rs`).

use ncclshim_diagnose::names::rc_name;
use ncclshim_format::profnames::{self, NameTable};
use ncclshim_format::reader::Record;
use ncclshim_format::schema::slot_flags;
use ncclshim_format::{args, ArgView, CallId, NcclResult};
use serde_json::{json, Map, Value};

/// Profiler state carrying a KernelCh's GPU stop time (`ncclProfilerKernelChStop`).
pub(crate) const KERNEL_CH_STOP: u64 = 22;
/// v7 `ncclProfilerKernelPhaseStop`.
pub(crate) const KERNEL_PHASE_STOP: u64 = 31;

pub(crate) fn named_args(r: &Record) -> Map<String, Value> {
    let mut m = Map::new();
    if let Some(call) = r.call() {
        for (name, v) in call.arg_names().iter().zip(r.args) {
            m.insert((*name).to_owned(), json!(v));
        }
        if matches!(
            call,
            CallId::ProfColl | CallId::ProfP2p | CallId::ProfCollApi | CallId::ProfP2pApi
        ) {
            if let Some(f) = r.arg("func").and_then(|c| NameTable::Func.name_of(c)) {
                m.insert("func".into(), json!(f));
            }
            if let Some(dt) = r
                .arg("datatype")
                .and_then(|c| NameTable::Datatype.name_of(c))
            {
                m.insert("datatype".into(), json!(dt));
            }
        }
        // The application's tag (profiler ABI v7), as the hex it is written in.
        if let Some(tag) = user_tag(r) {
            m.insert("user_tag".into(), json!(format!("{tag:#x}")));
        }
        if call == CallId::ProfColl {
            let coll = args::ProfColl::from_args(&r.args);
            let (a, p) = profnames::unpack_algo_proto(coll.algo_proto);
            let (ch, warps, _) = profnames::unpack_channels_warps(coll.channels_warps);
            m.insert("algo".into(), json!(NameTable::Algo.name_of(a)));
            m.insert("proto".into(), json!(NameTable::Proto.name_of(p)));
            m.insert("channels".into(), json!(ch));
            m.insert("warps".into(), json!(warps));
        }
    }
    if r.comm != 0 {
        m.insert("comm".into(), json!(format!("{:#x}", r.comm)));
    }
    m
}

/// The non-zero `user_tag` of a CollApi / P2pApi event or of the shim's `collConfig` record (0
/// is NCCL's "untagged"; u64::MAX, a config too short to hold one).
pub(crate) fn user_tag(r: &Record) -> Option<u64> {
    matches!(
        r.call(),
        Some(CallId::ProfCollApi | CallId::ProfP2pApi | CallId::CollConfig)
    )
    .then(|| r.arg("user_tag"))
    .flatten()
    .filter(|&t| t != 0 && t != u64::MAX)
}

pub(crate) fn slice_name(r: &Record) -> String {
    let base = r.call_name();
    match r.call() {
        Some(CallId::ProfColl | CallId::ProfP2p | CallId::ProfCollApi | CallId::ProfP2pApi) => {
            let name = match r.arg("func").and_then(|c| NameTable::Func.name_of(c)) {
                Some(f) => format!("{base} {f}"),
                None => base,
            };
            match user_tag(r) {
                Some(tag) => format!("{name} tag {tag:#x}"),
                None => name,
            }
        }
        _ => base,
    }
}

/// Where a slice or instant is drawn before tracks are laid out: one group per kind of track,
/// ordered as the tracks are shown. Each group becomes one track or, where its slices overlap
/// without nesting, several (`layout`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Group {
    /// A thread's own slices and instants, per writer (shim calls and profiler events apart:
    /// a profiler Coll can start inside a call and stop after it returned).
    Thread { writer: u8, tid: u32 },
    /// Profiler operations that outlive the CPU call that started them (they end at their
    /// kernel's end: `ENDS_AT_GPU_DONE`).
    Operations,
    /// One GPU kernel channel (KernelCh / KernelPhase events).
    GpuChannel(u64),
    /// One GPU slice per operation whose channels the plugin summarized.
    GpuOps,
}

/// A call that failed: its instant's name and return code. A call returning an error, or an
/// `ncclCommGetAsyncError` that reported one (the call itself succeeded); `ncclInProgress` is
/// not a failure.
pub(crate) fn failure_of(r: &Record, is_cuda: bool) -> Option<(String, i32)> {
    r.t_exit_ns?;
    let failed = if is_cuda {
        r.rc != 0
    } else {
        NcclResult::from_i32(r.rc).is_error()
    };
    if failed {
        return Some((
            format!("{} failed: {}", r.call_name(), rc_name(r.rc, is_cuda)),
            r.rc,
        ));
    }
    if r.call() == Some(CallId::NcclCommGetAsyncError) {
        let reported = args::NcclCommGetAsyncError::from_args(&r.args).async_error;
        let e = i32::try_from(reported).ok()?;
        return NcclResult::from_i32(e)
            .is_error()
            .then(|| (format!("async error: {}", rc_name(e, false)), e));
    }
    None
}

/// A profiler start record the plugin completes in place: its exit time is the event's stop and
/// `gpu_stop_ns` its kernel stop. Without the flag (older plugins, other generators) only
/// separate stop/state records say so.
pub(crate) fn in_place(r: &Record) -> bool {
    r.flags & slot_flags::COMPLETES_IN_PLACE != 0
}
