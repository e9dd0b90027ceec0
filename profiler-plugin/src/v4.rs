//! ABI v4 (NCCL 2.27.3+): richer init `(ctx, mask, commName, commHash, nNodes, nranks, rank,
//! logfn)`, Coll/P2p lose name/commHash, KernelCh gains `pTimer`, 8-byte state args. The
//! `type` field is still a `uint8_t`. Descriptor: 104 bytes.

use crate::abi::*;
use crate::core::{self, InitFacts, Start};
use crate::hot::{self, HotDescr, OpStart};
use crate::translate::{self as t, ty, Coll, Name, P2p};
use std::ffi::{c_char, c_int, c_void};
use std::ptr::addr_of;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV4 {
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
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV4 {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub n_channels: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnion {
    pub coll: CollV4,
    pub p2p: P2pV4,
    pub proxy_op: ProxyOp,
    pub proxy_step: ProxyStep,
    pub kernel_ch: KernelCh,
    pub net_plugin: NetPlugin,
}

#[repr(C)]
pub struct Descr {
    pub type_: u8,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnion,
}

/// # Safety
/// `d` is NULL or NCCL's v4 descriptor, valid for the call.
pub unsafe fn translate(d: *const Descr, s: &mut Start) -> bool {
    if d.is_null() {
        return false;
    }
    // SAFETY: header and the union member matching `type_` (contract).
    unsafe {
        let Some(ty) = core::wanted_type(u64::from(addr_of!((*d).type_).read())) else {
            return false;
        };
        s.reset(
            ty,
            addr_of!((*d).parent_obj).read(),
            addr_of!((*d).rank).read(),
        );
        match ty {
            ty::GROUP | ty::PROXY_CTRL => {}
            ty::COLL => t::coll(s, &coll_fields(&addr_of!((*d).u.coll).read())),
            ty::P2P => t::p2p(s, p2p_fields(&addr_of!((*d).u.p2p).read())),
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

fn coll_fields(c: &CollV4) -> Coll {
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
        flags: 0,
        comm_hash: 0,
        timed: true,
    }
}

fn p2p_fields(p: &P2pV4) -> P2p {
    P2p {
        func: Name::Str(p.func),
        buff: p.buff as u64,
        datatype: Name::Str(p.datatype),
        count: p.count as u64,
        peer: p.peer,
        channels: p.n_channels,
        comm_hash: 0,
        timed: true,
    }
}

impl HotDescr for *mut Descr {
    #[inline(always)]
    unsafe fn kernel_ch(self) -> Option<(*mut c_void, u64)> {
        // SAFETY: forwarded contract; v4's KernelCh sits where v5's does.
        unsafe { crate::v5::kernel_ch_parent_and_timer(self) }
    }

    #[inline(always)]
    unsafe fn op(self, ty: u64) -> Option<OpStart> {
        if self.is_null() {
            return None;
        }
        // SAFETY: the header and the member `ty` selects (contract).
        unsafe {
            let parent = addr_of!((*self).parent_obj).read();
            match ty as u32 {
                event::COLL => hot::coll(parent, &coll_fields(&addr_of!((*self).u.coll).read())),
                event::P2P => hot::p2p(parent, &p2p_fields(&addr_of!((*self).u.p2p).read())),
                _ => None,
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init(
    ctx: *mut *mut c_void,
    mask: *mut c_int,
    name: *const c_char,
    comm_hash: u64,
    nnodes: c_int,
    nranks: c_int,
    rank: c_int,
    _log: *const c_void,
) -> c_int {
    let facts = InitFacts {
        comm_id: comm_hash,
        name,
        nnodes,
        nranks,
        rank,
    };
    // SAFETY: NCCL's init arguments (v4 order).
    unsafe { core::init(4, ctx, mask, facts) }
}

profiler_entry_points!(
    ncclProfiler_v4,
    "4",
    InitV4,
    StateArgsV4,
    core::record_state_v4,
    |d, s| translate(d, s)
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn descriptor_layout() {
        assert_eq!(size_of::<Descr>(), 104);
        assert_eq!(offset_of!(Descr, type_), 0);
        assert_eq!(offset_of!(Descr, parent_obj), 8);
        assert_eq!(offset_of!(Descr, rank), 16);
        assert_eq!(offset_of!(Descr, u), 24);
        // Same member offsets as v5 without parentGroup.
        assert_eq!(offset_of!(CollV4, count), 56 - 24);
        assert_eq!(offset_of!(CollV4, n_channels), 80 - 24);
        assert_eq!(offset_of!(CollV4, proto), 96 - 24);
        assert_eq!(size_of::<CollV4>(), 104 - 24);
        assert_eq!(offset_of!(P2pV4, peer), 56 - 24);
        assert_eq!(offset_of!(P2pV4, n_channels), 60 - 24);
    }
}
