//! ABI v5 (NCCL 2.28.3+): 64-bit `type`, API events (GroupApi, CollApi, P2pApi, KernelLaunch),
//! Coll/P2p gain `parentGroup`, init takes `commId` second. Descriptor: 112 bytes.

use crate::abi::*;
use crate::core::{self, InitFacts, Start};
use crate::hot::{self, HotDescr, OpStart};
use crate::translate::{self as t, ty, Coll, Name, P2p};
use std::ffi::{c_char, c_int, c_void};
use std::ptr::addr_of;

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnion {
    pub group_api: GroupApi,
    pub coll_api: CollApiV5,
    pub p2p_api: P2pApiV5,
    pub kernel_launch: KernelLaunch,
    pub coll: CollV5,
    pub p2p: P2pV5,
    pub proxy_op: ProxyOp,
    pub proxy_step: ProxyStep,
    pub kernel_ch: KernelCh,
    pub net_plugin: NetPlugin,
}

#[repr(C)]
pub struct Descr {
    pub type_: u64,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnion,
}

/// Reads the member `type_` selects; the others may be uninitialized (NCCL's adapters).
///
/// # Safety
/// `d` is NULL or NCCL's descriptor for this ABI (v5, or a later one whose shared members sit
/// at the same offsets), valid for the call.
pub unsafe fn translate(d: *const Descr, version: u32, s: &mut Start) -> bool {
    if d.is_null() {
        return false;
    }
    // SAFETY: every read below is of the header or of the union member matching `type_`,
    // inside the descriptor NCCL passed (contract).
    unsafe {
        let Some(ty) = core::wanted_type(addr_of!((*d).type_).read()) else {
            return false;
        };
        s.reset(
            ty,
            addr_of!((*d).parent_obj).read(),
            addr_of!((*d).rank).read(),
        );
        match ty {
            ty::GROUP | ty::PROXY_CTRL => {}
            ty::GROUP_API => t::group_api(s, &addr_of!((*d).u.group_api).read()),
            ty::COLL_API => {
                let a = addr_of!((*d).u.coll_api).read();
                t::coll_api(
                    s,
                    a.func,
                    a.count,
                    a.datatype,
                    a.root,
                    a.stream as u64,
                    a.graph_captured,
                    0,
                )
            }
            ty::P2P_API => {
                let a = addr_of!((*d).u.p2p_api).read();
                t::p2p_api(
                    s,
                    a.func,
                    a.count,
                    a.datatype,
                    a.stream as u64,
                    a.graph_captured,
                    0,
                )
            }
            ty::KERNEL_LAUNCH => t::kernel_launch(s, &addr_of!((*d).u.kernel_launch).read()),
            ty::COLL => {
                let c = addr_of!((*d).u.coll).read();
                t::coll(s, &coll_fields(&c, 0, t::timed(version)))
            }
            ty::P2P => t::p2p(
                s,
                p2p_fields(&addr_of!((*d).u.p2p).read(), t::timed(version)),
            ),
            ty::PROXY_OP => t::proxy_op(s, &addr_of!((*d).u.proxy_op).read(), core::our_pid()),
            ty::PROXY_STEP => t::proxy_step(s, &addr_of!((*d).u.proxy_step).read()),
            ty::KERNEL_CH => {
                let k = addr_of!((*d).u.kernel_ch).read();
                t::kernel_ch(s, k.channel_id, Some(k.p_timer))
            }
            ty::NET_PLUGIN => t::net_plugin(s, &addr_of!((*d).u.net_plugin).read()),
            _ => return false,
        }
        true
    }
}

pub(crate) fn coll_fields(c: &CollV5, flags: u8, timed: bool) -> Coll {
    Coll {
        seq: c.seq_number,
        func: Name::Str(c.func),
        count: c.count as u64,
        root: c.root,
        datatype: Name::Str(c.datatype),
        channels: c.n_channels,
        warps: c.n_warps,
        algo: Name::Str(c.algo),
        proto: Name::Str(c.proto),
        flags,
        comm_hash: 0,
        timed,
    }
}

pub(crate) fn p2p_fields(p: &P2pV5, timed: bool) -> P2p {
    P2p {
        func: Name::Str(p.func),
        buff: p.buff as u64,
        datatype: Name::Str(p.datatype),
        count: p.count as u64,
        peer: p.peer,
        channels: p.n_channels,
        comm_hash: 0,
        timed,
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn init(
    ctx: *mut *mut c_void,
    comm_id: u64,
    mask: *mut c_int,
    name: *const c_char,
    nnodes: c_int,
    nranks: c_int,
    rank: c_int,
    _log: *const c_void,
) -> c_int {
    let facts = InitFacts {
        comm_id,
        name,
        nnodes,
        nranks,
        rank,
    };
    // SAFETY: NCCL's init arguments (v5 order).
    unsafe { core::init(5, ctx, mask, facts) }
}

/// A KernelCh descriptor's parent and GPU start time, for the hot path. Serves v4 to v7: their
/// descriptors keep `parentObj` at 8 and the union at 24 (pinned by each version's layout
/// test), and their KernelCh member is `abi::KernelCh`; the type field, whose width differs
/// (v4: `u8`), is not read.
///
/// # Safety
/// `d` is NULL or NCCL's descriptor, of one of those versions, whose `type_` says KernelCh.
#[inline(always)]
pub(crate) unsafe fn kernel_ch_parent_and_timer<D>(d: *mut D) -> Option<(*mut c_void, u64)> {
    let d = d.cast::<Descr>();
    // SAFETY: the header and the KernelCh member, at the offsets above, of the descriptor NCCL
    // passed (contract).
    (!d.is_null()).then(|| unsafe {
        (
            addr_of!((*d).parent_obj).read(),
            addr_of!((*d).u.kernel_ch.p_timer).read(),
        )
    })
}

/// The hot path's Coll/P2p reader for the v5 members, which v6 keeps byte for byte.
///
/// # Safety
/// `d` is NULL or NCCL's v5 or v6 descriptor whose type is `ty`.
#[inline(always)]
pub(crate) unsafe fn hot_op(d: *mut Descr, ty: u64) -> Option<OpStart> {
    if d.is_null() {
        return None;
    }
    // SAFETY: the header and the member `ty` selects (contract).
    unsafe {
        let parent = addr_of!((*d).parent_obj).read();
        match ty as u32 {
            event::COLL => hot::coll(parent, &coll_fields(&addr_of!((*d).u.coll).read(), 0, true)),
            event::P2P => hot::p2p(parent, &p2p_fields(&addr_of!((*d).u.p2p).read(), true)),
            _ => None,
        }
    }
}

impl HotDescr for *mut Descr {
    #[inline(always)]
    unsafe fn kernel_ch(self) -> Option<(*mut c_void, u64)> {
        // SAFETY: forwarded contract.
        unsafe { kernel_ch_parent_and_timer(self) }
    }

    #[inline(always)]
    unsafe fn op(self, ty: u64) -> Option<OpStart> {
        // SAFETY: forwarded contract.
        unsafe { hot_op(self, ty) }
    }
}

profiler_entry_points!(
    ncclProfiler_v5,
    "5",
    InitV5,
    StateArgsV4,
    core::record_state_v4,
    |d, s| translate(d, 5, s)
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn descriptor_layout() {
        assert_eq!(size_of::<Descr>(), 112);
        assert_eq!(offset_of!(Descr, type_), 0);
        assert_eq!(offset_of!(Descr, parent_obj), 8);
        assert_eq!(offset_of!(Descr, rank), 16);
        assert_eq!(offset_of!(Descr, u), 24);
    }
}
