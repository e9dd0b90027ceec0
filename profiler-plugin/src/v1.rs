//! ABI v1 (NCCL 2.23.4, the first profiler API): func/datatype/algo/proto are `uint8_t` enums
//! (mapped through `names::v1_enums`). Events: Group, Coll, P2p, ProxyOp, ProxyStep, ProxyCtrl.
//! Init `(ctx, mask)`. Descriptor: 120 bytes; 16-byte state args.

use crate::abi::*;
use crate::core::{self, InitFacts, Start};
use crate::translate::{self as t, ty, Coll, Name, P2p};
use std::ffi::{c_char, c_int, c_void};
use std::ptr::addr_of;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV1 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub seq_number: u64,
    pub func: u8,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: u8,
    pub op: u32,
    pub traffic_bytes: usize,
    pub n_max_channels: u8,
    pub n_warps: u8,
    pub algo: u8,
    pub proto: u8,
    pub is_collnet: c_int,
    pub is_nvls: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV1 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub func: u8,
    pub buff: *mut c_void,
    pub datatype: u8,
    pub count: usize,
    pub peer: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnion {
    pub coll: CollV1,
    pub p2p: P2pV1,
    pub proxy_op: ProxyOp,
    pub proxy_step: ProxyStep,
}

#[repr(C)]
pub struct Descr {
    pub type_: u8,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnion,
}

/// # Safety
/// `d` is NULL or NCCL's v1 descriptor, valid for the call.
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
                        func: Name::Enum(c.func),
                        count: c.count as u64,
                        root: c.root,
                        datatype: Name::Enum(c.datatype),
                        channels: c.n_max_channels,
                        warps: c.n_warps,
                        algo: Name::Enum(c.algo),
                        proto: Name::Enum(c.proto),
                        flags: (c.is_collnet != 0) as u8 | ((c.is_nvls != 0) as u8) << 1,
                        comm_hash: c.comm_hash,
                        timed: false,
                    },
                )
            }
            ty::P2P => {
                let p = addr_of!((*d).u.p2p).read();
                t::p2p(
                    s,
                    P2p {
                        func: Name::Enum(p.func),
                        buff: p.buff as u64,
                        datatype: Name::Enum(p.datatype),
                        count: p.count as u64,
                        peer: p.peer,
                        channels: 1,
                        comm_hash: p.comm_hash,
                        timed: false,
                    },
                )
            }
            ty::PROXY_OP => t::proxy_op(s, &addr_of!((*d).u.proxy_op).read(), core::our_pid()),
            ty::PROXY_STEP => t::proxy_step(s, &addr_of!((*d).u.proxy_step).read()),
            _ => return false,
        }
        true
    }
}

unsafe extern "C" fn init(ctx: *mut *mut c_void, mask: *mut c_int) -> c_int {
    // SAFETY: NCCL's init arguments (v1-v3 order).
    unsafe { core::init(1, ctx, mask, InitFacts::NONE) }
}

no_hot_path!(Descr);

profiler_entry_points!(
    ncclProfiler_v1,
    "1",
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
        assert_eq!(offset_of!(CollV1, comm_hash), 32 - 24);
        assert_eq!(offset_of!(CollV1, seq_number), 40 - 24);
        assert_eq!(offset_of!(CollV1, func), 48 - 24);
        assert_eq!(offset_of!(CollV1, send_buff), 56 - 24);
        assert_eq!(offset_of!(CollV1, count), 72 - 24);
        assert_eq!(offset_of!(CollV1, root), 80 - 24);
        assert_eq!(offset_of!(CollV1, datatype), 84 - 24);
        assert_eq!(offset_of!(CollV1, op), 88 - 24);
        assert_eq!(offset_of!(CollV1, traffic_bytes), 96 - 24);
        assert_eq!(offset_of!(CollV1, n_max_channels), 104 - 24);
        assert_eq!(offset_of!(CollV1, n_warps), 105 - 24);
        assert_eq!(offset_of!(CollV1, algo), 106 - 24);
        assert_eq!(offset_of!(CollV1, proto), 107 - 24);
        assert_eq!(offset_of!(CollV1, is_collnet), 108 - 24);
        assert_eq!(offset_of!(CollV1, is_nvls), 112 - 24);
        assert_eq!(offset_of!(P2pV1, func), 40 - 24);
        assert_eq!(offset_of!(P2pV1, buff), 48 - 24);
        assert_eq!(offset_of!(P2pV1, datatype), 56 - 24);
        assert_eq!(offset_of!(P2pV1, count), 64 - 24);
        assert_eq!(offset_of!(P2pV1, peer), 72 - 24);
    }
}
