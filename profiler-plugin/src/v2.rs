//! ABI v2 (NCCL 2.24.3+): func/datatype/algo/proto become `const char*`; Coll has
//! `trafficBytes`. Events: Group, Coll, P2p, ProxyOp, ProxyStep, ProxyCtrl. Init `(ctx, mask)`.
//! Descriptor: 128 bytes; 16-byte state args.

use crate::abi::*;
use crate::core::{self, InitFacts, Start};
use crate::translate::{self as t, ty, Coll, Name};
use crate::v3::{self, P2pV2};
use std::ffi::{c_char, c_int, c_void};
use std::ptr::addr_of;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV2 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub traffic_bytes: usize,
    pub n_max_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnion {
    pub coll: CollV2,
    pub p2p: P2pV2,
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
/// `d` is NULL or NCCL's v2 descriptor, valid for the call.
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
            ty::P2P => t::p2p(s, v3::p2p_fields(&addr_of!((*d).u.p2p).read())),
            ty::PROXY_OP => t::proxy_op(s, &addr_of!((*d).u.proxy_op).read(), core::our_pid()),
            ty::PROXY_STEP => t::proxy_step(s, &addr_of!((*d).u.proxy_step).read()),
            _ => return false,
        }
        true
    }
}

unsafe extern "C" fn init(ctx: *mut *mut c_void, mask: *mut c_int) -> c_int {
    // SAFETY: NCCL's init arguments (v1-v3 order).
    unsafe { core::init(2, ctx, mask, InitFacts::NONE) }
}

no_hot_path!(Descr);

profiler_entry_points!(
    ncclProfiler_v2,
    "2",
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
        assert_eq!(size_of::<Descr>(), 128);
        assert_eq!(offset_of!(Descr, u), 24);
        assert_eq!(offset_of!(CollV2, datatype), 88 - 24);
        assert_eq!(offset_of!(CollV2, traffic_bytes), 96 - 24);
        assert_eq!(offset_of!(CollV2, n_max_channels), 104 - 24);
        assert_eq!(offset_of!(CollV2, n_warps), 105 - 24);
        assert_eq!(offset_of!(CollV2, algo), 112 - 24);
        assert_eq!(offset_of!(CollV2, proto), 120 - 24);
    }
}
