//! Descriptor members → [`Start`]: the pieces the per-version modules share. Each function
//! takes one union member (already selected by the descriptor's `type`) and the strings NCCL
//! passed, and fills the slot arguments in the order `schema.rs` names them.

use crate::abi::{self, event};
use crate::names::{self, Lookup};
use crate::state::{Op, Start};
use ncclshim_dump::layout::SLOT_ARGS;
use ncclshim_dump::profnames::{payload_bytes, NameTable};
use std::ffi::c_char;

/// Bit indices of the event types.
pub mod ty {
    pub const GROUP: u8 = 0;
    pub const COLL: u8 = 1;
    pub const P2P: u8 = 2;
    pub const PROXY_OP: u8 = 3;
    pub const PROXY_STEP: u8 = 4;
    pub const PROXY_CTRL: u8 = 5;
    pub const KERNEL_CH: u8 = 6;
    pub const NET_PLUGIN: u8 = 7;
    pub const GROUP_API: u8 = 8;
    pub const COLL_API: u8 = 9;
    pub const P2P_API: u8 = 10;
    pub const KERNEL_LAUNCH: u8 = 11;
    pub const CE_COLL: u8 = 12;
    pub const CE_SYNC: u8 = 13;
    pub const CE_BATCH: u8 = 14;
    pub const KERNEL_PHASE: u8 = 15;
}

/// A string argument: a C string (v2+) or a v1 enum value.
#[derive(Clone, Copy)]
pub enum Name {
    Str(*const c_char),
    Enum(u8),
}

impl Name {
    /// # Safety
    /// A `Str` is NULL or one of NCCL's static NUL-terminated literals.
    #[inline(always)]
    unsafe fn code(self, table: NameTable, field: &'static str, s: &mut Start) -> u8 {
        match self {
            Name::Enum(v) => names::v1_enums::code(table, v),
            Name::Str(p) => {
                if let Some(code) = names::cached(table, p) {
                    return code;
                }
                // SAFETY: forwarded contract.
                let Lookup { code, unknown_text } = unsafe { names::uncached(table, p) };
                if let (Some(t), None) = (unknown_text, s.unknown) {
                    s.unknown = Some((field, t));
                }
                code
            }
        }
    }
}

/// Fields of a Coll descriptor, across versions.
pub struct Coll {
    pub seq: u64,
    pub func: Name,
    pub count: u64,
    pub root: i32,
    pub datatype: Name,
    pub channels: u8,
    pub warps: u8,
    pub algo: Name,
    pub proto: Name,
    /// Bit 0: symmetric kernel (v7).
    pub flags: u8,
    pub comm_hash: u64,
    /// The ABI reports KernelCh GPU times (v4+).
    pub timed: bool,
}

/// # Safety
/// Every `Name::Str` in `c` is NULL or a static NCCL literal.
pub unsafe fn coll(s: &mut Start, c: &Coll) {
    // SAFETY: forwarded contract.
    let (func, dt, algo, proto) = unsafe {
        (
            c.func.code(NameTable::Func, "func", s),
            c.datatype.code(NameTable::Datatype, "datatype", s),
            c.algo.code(NameTable::Algo, "algo", s),
            c.proto.code(NameTable::Proto, "proto", s),
        )
    };
    s.args = coll_args(c, [func, dt, algo, proto]);
    s.comm_hint = c.comm_hash;
    s.op = Some(Op {
        func,
        bytes: payload_bytes(c.count, u64::from(dt)),
        channels: c.channels,
        timed: c.timed,
    });
}

/// Fields of a P2p descriptor, across versions.
pub struct P2p {
    pub func: Name,
    pub buff: u64,
    pub datatype: Name,
    pub count: u64,
    pub peer: i32,
    pub channels: u8,
    pub comm_hash: u64,
    pub timed: bool,
}

/// # Safety
/// As [`coll`].
pub unsafe fn p2p(s: &mut Start, p: P2p) {
    // SAFETY: forwarded contract.
    let (func, dt) = unsafe {
        (
            p.func.code(NameTable::Func, "func", s),
            p.datatype.code(NameTable::Datatype, "datatype", s),
        )
    };
    s.args = p2p_args(&p, [func, dt]);
    s.comm_hint = p.comm_hash;
    s.op = Some(Op {
        func,
        bytes: payload_bytes(p.count, u64::from(dt)),
        channels: p.channels,
        timed: p.timed,
    });
}

/// A Coll start record's arguments (`schema.rs` order; 0 and 1, handle and parent, are the
/// writer's), given the codes of `[func, datatype, algo, proto]`. Shared with the hot path, so
/// both write the same record.
#[inline(always)]
pub fn coll_args(c: &Coll, [func, dt, algo, proto]: [u8; 4]) -> [u64; SLOT_ARGS] {
    [
        0,
        0,
        c.seq,
        u64::from(func),
        c.count,
        u64::from(dt),
        c.root as u32 as u64,
        u64::from(algo) | u64::from(proto) << 8,
        u64::from(c.channels) | u64::from(c.warps) << 8 | u64::from(c.flags) << 16,
    ]
}

/// A P2p start record's arguments, given the codes of `[func, datatype]` (see [`coll_args`]).
#[inline(always)]
pub fn p2p_args(p: &P2p, [func, dt]: [u8; 2]) -> [u64; SLOT_ARGS] {
    [
        0,
        0,
        u64::from(func),
        p.count,
        u64::from(dt),
        p.peer as u32 as u64,
        u64::from(p.channels),
        p.buff,
        0,
    ]
}

pub fn proxy_op(s: &mut Start, p: &abi::ProxyOp, our_pid: u32) {
    s.args[2] = p.pid as u32 as u64;
    s.args[3] = u64::from(p.channel_id);
    s.args[4] = p.peer as u32 as u64;
    s.args[5] = p.n_steps as u32 as u64;
    s.args[6] = p.chunk_size as u32 as u64;
    s.args[7] = p.is_send as u32 as u64;
    if p.pid as u32 != our_pid {
        s.foreign_pid = Some(p.pid as u32);
    }
}

pub fn proxy_step(s: &mut Start, p: &abi::ProxyStep) {
    s.args[2] = p.step as u32 as u64;
}

pub fn kernel_ch(s: &mut Start, channel: u8, p_timer: Option<u64>) {
    s.args[2] = u64::from(channel);
    s.args[3] = p_timer.unwrap_or(0);
    s.gpu_start = p_timer;
}

/// NetPlugin: copies the net plugin's own event (valid only during this call).
///
/// # Safety
/// `n.data` is NULL or points to the net plugin's event struct for `n.id`.
pub unsafe fn net_plugin(s: &mut Start, n: &abi::NetPlugin) {
    s.args[2] = n.id as u64;
    let version = n.id as u64 & 0xffff;
    let kind = n.id as u64 & 0xffff_0000;
    let d = n.data.cast::<u8>();
    if !d.is_null() && version == 1 {
        // SAFETY: IB v1 (40 bytes) and socket v1 (24 bytes) layouts, nccl-facts §1.8; the
        // struct is valid during the callback (contract). Unaligned reads: never trust alignment.
        unsafe {
            let rd32 = |o: usize| d.add(o).cast::<u32>().read_unaligned();
            let rd64 = |o: usize| d.add(o).cast::<u64>().read_unaligned();
            if kind == 1 << 16 {
                s.args[3] = u64::from(rd32(8)) | u64::from(rd32(24)) << 32;
                s.args[4] = rd64(16);
                s.args[5] = rd64(32);
            } else if kind == 2 << 16 {
                s.args[3] = u64::from(rd32(8)) | u64::from(rd32(12)) << 32;
                s.args[5] = rd64(16);
            }
        }
    }
}

pub fn group_api(s: &mut Start, g: &abi::GroupApi) {
    s.args[2] = g.group_depth as u32 as u64;
    s.args[3] = u64::from(g.graph_captured);
}

/// # Safety
/// `func`/`datatype` are NULL or static NCCL literals.
#[allow(clippy::too_many_arguments)]
pub unsafe fn coll_api(
    s: &mut Start,
    func: *const c_char,
    count: usize,
    datatype: *const c_char,
    root: i32,
    stream: u64,
    graph: bool,
    user_tag: u64,
) {
    // SAFETY: forwarded contract.
    let (f, d) = unsafe {
        (
            Name::Str(func).code(NameTable::Func, "func", s),
            Name::Str(datatype).code(NameTable::Datatype, "datatype", s),
        )
    };
    s.args[2..9].copy_from_slice(&[
        u64::from(f),
        count as u64,
        u64::from(d),
        root as u32 as u64,
        stream,
        u64::from(graph),
        user_tag,
    ]);
}

/// # Safety
/// As [`coll_api`].
pub unsafe fn p2p_api(
    s: &mut Start,
    func: *const c_char,
    count: usize,
    datatype: *const c_char,
    stream: u64,
    graph: bool,
    user_tag: u64,
) {
    // SAFETY: forwarded contract.
    let (f, d) = unsafe {
        (
            Name::Str(func).code(NameTable::Func, "func", s),
            Name::Str(datatype).code(NameTable::Datatype, "datatype", s),
        )
    };
    s.args[2..8].copy_from_slice(&[
        u64::from(f),
        count as u64,
        u64::from(d),
        stream,
        u64::from(graph),
        user_tag,
    ]);
}

pub fn kernel_launch(s: &mut Start, k: &abi::KernelLaunch) {
    s.args[2] = k.stream as u64;
}

/// # Safety
/// `c.func`/`c.datatype` are NULL or static NCCL literals.
pub unsafe fn ce_coll(s: &mut Start, c: &abi::CeColl) {
    // SAFETY: forwarded contract.
    let (f, d) = unsafe {
        (
            Name::Str(c.func).code(NameTable::Func, "func", s),
            Name::Str(c.datatype).code(NameTable::Datatype, "datatype", s),
        )
    };
    s.args[2..8].copy_from_slice(&[
        c.seq_number,
        u64::from(f),
        c.count as u64,
        u64::from(d),
        c.root as u32 as u64,
        c.stream as u64,
    ]);
}

pub fn ce_sync(s: &mut Start, c: &abi::CeSync) {
    s.args[2] = u64::from(c.is_complete);
    s.args[3] = c.n_ranks as u32 as u64;
}

pub fn ce_batch(s: &mut Start, c: &abi::CeBatch) {
    s.args[2] = c.num_ops as u32 as u64;
    s.args[3] = c.total_bytes as u64;
    s.args[4] = u64::from(c.use_intra_sync);
}

/// Whether the ABI version's KernelCh carries GPU times, and KernelCh is asked for.
pub fn timed(version: u32) -> bool {
    version >= 4 && event::supported(version) & event::KERNEL_CH != 0
}
