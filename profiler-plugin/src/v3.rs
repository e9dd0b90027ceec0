//! ABI v3 (NCCL 2.26.2+): adds KernelCh (channel id only, no GPU timer) and NetPlugin; Coll
//! drops `trafficBytes`. Init is `(ctx, mask)`: the communicator is learned from the first
//! Coll/P2p descriptor's `commHash` and header `rank`. Descriptor: 120 bytes; 16-byte state args.

use crate::abi::*;
use crate::core::{self, InitFacts, Start};
use crate::translate::{self as t, ty, Coll, Name, P2p};
use std::ffi::{c_char, c_int, c_void};
use std::ptr::addr_of;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV3 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_max_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
}

/// p2p of v2 and v3.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV2 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelChV3 {
    pub channel_id: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnion {
    pub coll: CollV3,
    pub p2p: P2pV2,
    pub proxy_op: ProxyOp,
    pub proxy_step: ProxyStep,
    pub kernel_ch: KernelChV3,
    pub net_plugin: NetPlugin,
}

/// Header shared by v1-v3 (and v4): `uint8_t type`.
#[repr(C)]
pub struct Descr {
    pub type_: u8,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnion,
}

pub(crate) fn p2p_fields(p: &P2pV2) -> P2p {
    P2p {
        func: Name::Str(p.func),
        buff: p.buff as u64,
        datatype: Name::Str(p.datatype),
        count: p.count as u64,
        peer: p.peer,
        channels: 1,
        comm_hash: p.comm_hash,
        timed: false,
    }
}

/// # Safety
/// `d` is NULL or NCCL's v3 descriptor, valid for the call.
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
            ty::COLL => {
                let c = addr_of!((*d).u.coll).read();
                t::coll(
                    s,
                    &Coll {
                        seq: c.seq_number,
                        func: Name::Str(c.func),
                        count: c.count as u64,
                        root: c.root,
                        datatype: Name::Str(c.datatype),
                        channels: c.n_max_channels,
                        warps: c.n_warps,
                        algo: Name::Str(c.algo),
                        proto: Name::Str(c.proto),
                        flags: 0,
                        comm_hash: c.comm_hash,
                        timed: false,
                    },
                )
            }
            ty::P2P => t::p2p(s, p2p_fields(&addr_of!((*d).u.p2p).read())),
            ty::PROXY_OP => t::proxy_op(s, &addr_of!((*d).u.proxy_op).read(), core::our_pid()),
            ty::PROXY_STEP => t::proxy_step(s, &addr_of!((*d).u.proxy_step).read()),
            ty::KERNEL_CH => t::kernel_ch(s, addr_of!((*d).u.kernel_ch).read().channel_id, None),
            ty::NET_PLUGIN => t::net_plugin(s, &addr_of!((*d).u.net_plugin).read()),
            _ => return false,
        }
        true
    }
}

unsafe extern "C" fn init(ctx: *mut *mut c_void, mask: *mut c_int) -> c_int {
    // SAFETY: NCCL's init arguments (v1-v3 order).
    unsafe { core::init(3, ctx, mask, InitFacts::NONE) }
}

no_hot_path!(Descr);

profiler_entry_points!(
    ncclProfiler_v3,
    "3",
    InitV1,
    StateArgsV1,
    core::record_state_v1,
    |d, s| translate(d, s)
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn descriptor_layout() {
        assert_eq!(size_of::<Descr>(), 120);
        assert_eq!(offset_of!(Descr, u), 24);
        assert_eq!(offset_of!(CollV3, comm_hash), 32 - 24);
        assert_eq!(offset_of!(CollV3, seq_number), 40 - 24);
        assert_eq!(offset_of!(CollV3, func), 48 - 24);
        assert_eq!(offset_of!(CollV3, count), 72 - 24);
        assert_eq!(offset_of!(CollV3, root), 80 - 24);
        assert_eq!(offset_of!(CollV3, datatype), 88 - 24);
        assert_eq!(offset_of!(CollV3, n_max_channels), 96 - 24);
        assert_eq!(offset_of!(CollV3, n_warps), 97 - 24);
        assert_eq!(offset_of!(CollV3, algo), 104 - 24);
        assert_eq!(offset_of!(CollV3, proto), 112 - 24);
        assert_eq!(offset_of!(P2pV2, comm_hash), 32 - 24);
        assert_eq!(offset_of!(P2pV2, func), 40 - 24);
        assert_eq!(offset_of!(P2pV2, buff), 48 - 24);
        assert_eq!(offset_of!(P2pV2, datatype), 56 - 24);
        assert_eq!(offset_of!(P2pV2, count), 64 - 24);
        assert_eq!(offset_of!(P2pV2, peer), 72 - 24);
    }
}
