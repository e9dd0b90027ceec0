//! The parts of NCCL's profiler ABI that every version shares: the function table, the
//! event-type bits, the state numbers, and the descriptor union members whose layout did not
//! change between versions. Written from the documented offsets (x86-64 Linux), never from
//! NCCL's headers; every size and offset is pinned by a test so a typo cannot ship.

use std::ffi::{c_char, c_int, c_void};

/// `ncclResult_t` values the plugin returns.
pub const NCCL_SUCCESS: c_int = 0;
pub const NCCL_INTERNAL_ERROR: c_int = 3;

/// Event type bits (`ncclProfileGroup` ... `ncclProfileKernelPhase`).
pub mod event {
    pub const GROUP: u32 = 1 << 0;
    pub const COLL: u32 = 1 << 1;
    pub const P2P: u32 = 1 << 2;
    pub const PROXY_OP: u32 = 1 << 3;
    pub const PROXY_STEP: u32 = 1 << 4;
    pub const PROXY_CTRL: u32 = 1 << 5;
    pub const KERNEL_CH: u32 = 1 << 6;
    pub const NET_PLUGIN: u32 = 1 << 7;
    pub const GROUP_API: u32 = 1 << 8;
    pub const COLL_API: u32 = 1 << 9;
    pub const P2P_API: u32 = 1 << 10;
    pub const KERNEL_LAUNCH: u32 = 1 << 11;
    pub const CE_COLL: u32 = 1 << 12;
    pub const CE_SYNC: u32 = 1 << 13;
    pub const CE_BATCH: u32 = 1 << 14;
    pub const KERNEL_PHASE: u32 = 1 << 15;

    /// Event bits each ABI version defines (index = version).
    pub const fn supported(version: u32) -> u32 {
        match version {
            1 | 2 => 0x3f,
            3 | 4 => 0xff,
            5 => 0xfff,
            6 => 0x7fff,
            _ => 0xffff,
        }
    }
}

/// `ncclProfilerEventState_t` values the plugin interprets.
pub mod state {
    pub const PROXY_CTRL_IDLE: u32 = 13;
    pub const PROXY_CTRL_APPEND_END: u32 = 18;
    pub const NET_PLUGIN_UPDATE: u32 = 21;
    pub const KERNEL_CH_STOP: u32 = 22;
    pub const KERNEL_PHASE_STOP: u32 = 31;
}

/// `ncclProfiler_vN_t`: a name and five entry points, 48 bytes in every version. Only the init
/// signature and the descriptor/state-args types differ.
#[repr(C)]
pub struct ProfilerTable<Init, Descr, Args> {
    pub name: *const c_char,
    pub init: Init,
    pub start_event: unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut Descr) -> c_int,
    pub stop_event: unsafe extern "C" fn(*mut c_void) -> c_int,
    pub record_event_state: unsafe extern "C" fn(*mut c_void, c_int, *mut Args) -> c_int,
    pub finalize: unsafe extern "C" fn(*mut c_void) -> c_int,
}

// SAFETY: the table is immutable static data (a pointer to a static string and fn pointers).
unsafe impl<I, D, A> Sync for ProfilerTable<I, D, A> {}

/// v1-v3: `init(void** ctx, int* eActivationMask)`.
pub type InitV1 = unsafe extern "C" fn(*mut *mut c_void, *mut c_int) -> c_int;
/// v4: `init(ctx, mask, commName, commHash, nNodes, nranks, rank, logfn)`.
pub type InitV4 = unsafe extern "C" fn(
    *mut *mut c_void,
    *mut c_int,
    *const c_char,
    u64,
    c_int,
    c_int,
    c_int,
    *const c_void,
) -> c_int;
/// v5-v7: `init(ctx, commId, mask, commName, nNodes, nranks, rank, logfn)`.
pub type InitV5 = unsafe extern "C" fn(
    *mut *mut c_void,
    u64,
    *mut c_int,
    *const c_char,
    c_int,
    c_int,
    c_int,
    *const c_void,
) -> c_int;

// ---- union members shared by several versions (offsets relative to the union at 24) ----

/// proxyOp (v1-v7): `pid` tells an event of another process's proxy (PXN) apart.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyOp {
    pub pid: c_int,
    pub channel_id: u8,
    pub peer: c_int,
    pub n_steps: c_int,
    pub chunk_size: c_int,
    pub is_send: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyStep {
    pub step: c_int,
}

/// kernelCh v4+: GPU %globaltimer at the channel's start.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelCh {
    pub channel_id: u8,
    pub p_timer: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetPlugin {
    pub id: i64,
    pub data: *mut c_void,
}

/// v5+ API events.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GroupApi {
    pub graph_captured: bool,
    pub group_depth: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollApiV5 {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub root: c_int,
    pub stream: *mut c_void,
    pub graph_captured: bool,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pApiV5 {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub stream: *mut c_void,
    pub graph_captured: bool,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelLaunch {
    pub stream: *mut c_void,
}

/// coll v5/v6 (v4 is the same without `parent_group`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV5 {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
    pub parent_group: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV5 {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub n_channels: u8,
    pub parent_group: *mut c_void,
}

/// v6+ copy-engine collectives.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeColl {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub sync_strategy: *const c_char,
    pub intra_batch_sync: bool,
    pub batch_size: u32,
    pub num_batches: u32,
    pub ce_seq_num: u32,
    pub stream: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeSync {
    pub is_complete: bool,
    pub n_ranks: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeBatch {
    pub num_ops: c_int,
    pub total_bytes: usize,
    pub use_intra_sync: bool,
}

/// v1-v3 state args (16 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StateArgsV1ProxyOp {
    pub trans_size: usize,
    pub steps: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union StateArgsV1 {
    pub proxy_op: StateArgsV1ProxyOp,
    pub appended_proxy_ops: c_int,
}

/// v4-v7 state args (8 bytes): proxyStep.transSize | proxyCtrl.appendedProxyOps |
/// netPlugin.data | kernelCh.pTimer.
#[repr(C)]
#[derive(Clone, Copy)]
pub union StateArgsV4 {
    pub trans_size: usize,
    pub appended_proxy_ops: c_int,
    pub data: *mut c_void,
    pub p_timer: u64,
}

/// The value a state record keeps, read from the member that `state` selects (the other
/// members may be uninitialized bytes). `args` may be NULL (GroupApi states).
///
/// # Safety
/// `args` is NULL or points to a readable `StateArgsV4`.
pub unsafe fn state_value_v4(state: u32, args: *const StateArgsV4) -> u64 {
    if args.is_null() {
        return 0;
    }
    // SAFETY: non-null and readable per the contract; each arm reads the member NCCL fills
    // for that state (nccl-facts §1.5).
    unsafe {
        match state {
            state::PROXY_CTRL_IDLE..=state::PROXY_CTRL_APPEND_END => {
                (*args).appended_proxy_ops as u32 as u64
            }
            state::NET_PLUGIN_UPDATE => (*args).data as u64,
            state::KERNEL_CH_STOP | state::KERNEL_PHASE_STOP => (*args).p_timer,
            _ => (*args).trans_size as u64,
        }
    }
}

/// v1-v3: (value, second value) = (transSize, steps) or (appendedProxyOps, 0).
///
/// # Safety
/// `args` is NULL or points to a readable `StateArgsV1`.
pub unsafe fn state_value_v1(state: u32, args: *const StateArgsV1) -> (u64, u64) {
    if args.is_null() {
        return (0, 0);
    }
    // SAFETY: as above.
    unsafe {
        if (state::PROXY_CTRL_IDLE..=state::PROXY_CTRL_APPEND_END).contains(&state) {
            ((*args).appended_proxy_ops as u32 as u64, 0)
        } else {
            let p = (*args).proxy_op;
            (p.trans_size as u64, p.steps as u32 as u64)
        }
    }
}

/// Defines one ABI version's `start_event` (reads the descriptor's event type — a `u8` before v5,
/// a `u64` from v5 — and hands the descriptor to `core`, whose hot path reads it through the
/// version's [`HotDescr`](crate::hot::HotDescr) and whose general path through `$translate`)
/// and its exported `ncclProfiler_vN` table. Every version shares `core`'s stop, state and
/// finalize entry points; the version's module supplies `init` (argument order differs per
/// version) and the translation.
macro_rules! profiler_entry_points {
    ($table:ident, $version:literal, $init:ty, $args:ty, $record_state:path,
     |$d:ident, $s:ident| $translate:expr) => {
        unsafe extern "C" fn start_event(
            ctx: *mut c_void,
            eh: *mut *mut c_void,
            $d: *mut Descr,
        ) -> c_int {
            // SAFETY: NCCL's arguments for this ABI; `type_` is the descriptor's first field and
            // the readers read only the union member that matches it.
            unsafe {
                let ty = if $d.is_null() {
                    0
                } else {
                    u64::from(std::ptr::addr_of!((*$d).type_).read())
                };
                core::start_event(ctx, eh, ty, $d, |$s| $translate)
            }
        }

        #[doc = concat!("The v", $version, " entry table.")]
        #[allow(non_upper_case_globals)]
        #[no_mangle]
        pub static $table: ProfilerTable<$init, Descr, $args> = ProfilerTable {
            name: c"ncclshim".as_ptr(),
            init,
            start_event,
            stop_event: core::stop_event,
            record_event_state: $record_state,
            finalize: core::finalize,
        };
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    // Union members are checked at offset (absolute - 24).
    #[test]
    fn function_table_is_48_bytes() {
        type T = ProfilerTable<InitV5, u8, u8>;
        assert_eq!(size_of::<T>(), 48);
        assert_eq!(offset_of!(T, init), 8);
        assert_eq!(offset_of!(T, start_event), 16);
        assert_eq!(offset_of!(T, stop_event), 24);
        assert_eq!(offset_of!(T, record_event_state), 32);
        assert_eq!(offset_of!(T, finalize), 40);
    }

    #[test]
    fn proxy_and_kernel_members() {
        assert_eq!(offset_of!(ProxyOp, pid), 24 - 24);
        assert_eq!(offset_of!(ProxyOp, channel_id), 28 - 24);
        assert_eq!(offset_of!(ProxyOp, peer), 32 - 24);
        assert_eq!(offset_of!(ProxyOp, n_steps), 36 - 24);
        assert_eq!(offset_of!(ProxyOp, chunk_size), 40 - 24);
        assert_eq!(offset_of!(ProxyOp, is_send), 44 - 24);
        assert_eq!(offset_of!(KernelCh, channel_id), 0);
        assert_eq!(offset_of!(KernelCh, p_timer), 32 - 24);
        assert_eq!(offset_of!(NetPlugin, id), 0);
        assert_eq!(offset_of!(NetPlugin, data), 32 - 24);
    }

    #[test]
    fn api_members() {
        assert_eq!(offset_of!(GroupApi, graph_captured), 0);
        assert_eq!(offset_of!(GroupApi, group_depth), 28 - 24);
        assert_eq!(offset_of!(CollApiV5, func), 0);
        assert_eq!(offset_of!(CollApiV5, count), 32 - 24);
        assert_eq!(offset_of!(CollApiV5, datatype), 40 - 24);
        assert_eq!(offset_of!(CollApiV5, root), 48 - 24);
        assert_eq!(offset_of!(CollApiV5, stream), 56 - 24);
        assert_eq!(offset_of!(CollApiV5, graph_captured), 64 - 24);
        assert_eq!(offset_of!(P2pApiV5, count), 32 - 24);
        assert_eq!(offset_of!(P2pApiV5, datatype), 40 - 24);
        assert_eq!(offset_of!(P2pApiV5, stream), 48 - 24);
        assert_eq!(offset_of!(P2pApiV5, graph_captured), 56 - 24);
    }

    #[test]
    fn coll_and_p2p_v5_members() {
        assert_eq!(offset_of!(CollV5, seq_number), 0);
        assert_eq!(offset_of!(CollV5, func), 32 - 24);
        assert_eq!(offset_of!(CollV5, send_buff), 40 - 24);
        assert_eq!(offset_of!(CollV5, recv_buff), 48 - 24);
        assert_eq!(offset_of!(CollV5, count), 56 - 24);
        assert_eq!(offset_of!(CollV5, root), 64 - 24);
        assert_eq!(offset_of!(CollV5, datatype), 72 - 24);
        assert_eq!(offset_of!(CollV5, n_channels), 80 - 24);
        assert_eq!(offset_of!(CollV5, n_warps), 81 - 24);
        assert_eq!(offset_of!(CollV5, algo), 88 - 24);
        assert_eq!(offset_of!(CollV5, proto), 96 - 24);
        assert_eq!(offset_of!(CollV5, parent_group), 104 - 24);
        assert_eq!(size_of::<CollV5>(), 112 - 24);
        assert_eq!(offset_of!(P2pV5, buff), 32 - 24);
        assert_eq!(offset_of!(P2pV5, datatype), 40 - 24);
        assert_eq!(offset_of!(P2pV5, count), 48 - 24);
        assert_eq!(offset_of!(P2pV5, peer), 56 - 24);
        assert_eq!(offset_of!(P2pV5, n_channels), 60 - 24);
        assert_eq!(offset_of!(P2pV5, parent_group), 64 - 24);
    }

    #[test]
    fn ce_members() {
        assert_eq!(offset_of!(CeColl, func), 32 - 24);
        assert_eq!(offset_of!(CeColl, count), 56 - 24);
        assert_eq!(offset_of!(CeColl, root), 64 - 24);
        assert_eq!(offset_of!(CeColl, datatype), 72 - 24);
        assert_eq!(offset_of!(CeColl, sync_strategy), 80 - 24);
        assert_eq!(offset_of!(CeColl, intra_batch_sync), 88 - 24);
        assert_eq!(offset_of!(CeColl, batch_size), 92 - 24);
        assert_eq!(offset_of!(CeColl, num_batches), 96 - 24);
        assert_eq!(offset_of!(CeColl, ce_seq_num), 100 - 24);
        assert_eq!(offset_of!(CeColl, stream), 104 - 24);
        assert_eq!(size_of::<CeColl>(), 112 - 24);
        assert_eq!(offset_of!(CeSync, n_ranks), 28 - 24);
        assert_eq!(offset_of!(CeBatch, total_bytes), 32 - 24);
        assert_eq!(offset_of!(CeBatch, use_intra_sync), 40 - 24);
    }

    #[test]
    fn state_args_sizes() {
        assert_eq!(size_of::<StateArgsV1>(), 16);
        assert_eq!(offset_of!(StateArgsV1ProxyOp, steps), 8);
        assert_eq!(size_of::<StateArgsV4>(), 8);
    }

    #[test]
    fn state_values_read_the_member_the_state_selects() {
        let a = StateArgsV4 { p_timer: 12345 };
        // SAFETY: `a` is a valid StateArgsV4.
        unsafe {
            assert_eq!(state_value_v4(state::KERNEL_CH_STOP, &a), 12345);
            assert_eq!(state_value_v4(state::KERNEL_CH_STOP, std::ptr::null()), 0);
            let c = StateArgsV4 { trans_size: 0 };
            let mut c = c;
            c.appended_proxy_ops = 7;
            assert_eq!(state_value_v4(state::PROXY_CTRL_IDLE + 4, &c), 7);
            let v1 = StateArgsV1 {
                proxy_op: StateArgsV1ProxyOp {
                    trans_size: 4096,
                    steps: 3,
                },
            };
            assert_eq!(state_value_v1(0, &v1), (4096, 3));
        }
    }

    #[test]
    fn supported_bits_grow_with_the_version() {
        assert_eq!(event::supported(1) & event::KERNEL_CH, 0);
        assert_ne!(event::supported(3) & event::KERNEL_CH, 0);
        assert_eq!(event::supported(4) & event::COLL_API, 0);
        assert_ne!(event::supported(5) & event::COLL_API, 0);
        assert_eq!(event::supported(5) & event::CE_COLL, 0);
        assert_ne!(event::supported(7) & event::KERNEL_PHASE, 0);
    }
}
