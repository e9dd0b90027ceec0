//! ABI v7 (NCCL 2.31+, NVIDIA's header): v6 plus `userTag` appended to CollApi, P2pApi, Coll,
//! P2p and CeColl, Coll's `kernelVariant`/`isSymColl`, and the KernelPhase event (bit 15,
//! state 31). Same init and function table as v6; the descriptor grows to 136 bytes.

use crate::abi::*;
use crate::core::{self, InitFacts, Start};
use crate::hot::{self, HotDescr, OpStart};
use crate::translate::{self as t, ty, Coll};
use crate::{v5, v6};
use std::ffi::{c_char, c_int, c_void};
use std::ptr::addr_of;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollApiV7 {
    pub base: CollApiV5,
    pub user_tag: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pApiV7 {
    pub base: P2pApiV5,
    pub user_tag: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV7 {
    pub base: CollV5,
    pub kernel_variant: *const c_char,
    pub is_sym_coll: bool,
    pub user_tag: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV7 {
    pub base: P2pV5,
    pub user_tag: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeCollV7 {
    pub base: CeColl,
    pub user_tag: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelPhase {
    pub channel_id: u8,
    /// 0 initial_sync, 1 compute, 2 final_sync.
    pub phase_id: u8,
    pub phase_name: *const c_char,
    pub p_timer: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnion {
    pub v6: v6::DescrUnion,
    pub coll_api: CollApiV7,
    pub p2p_api: P2pApiV7,
    pub coll: CollV7,
    pub p2p: P2pV7,
    pub ce_coll: CeCollV7,
    pub kernel_phase: KernelPhase,
}

#[repr(C)]
pub struct Descr {
    pub type_: u64,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnion,
}

/// # Safety
/// `d` is NULL or NCCL's v7 descriptor, valid for the call.
pub unsafe fn translate(d: *const Descr, s: &mut Start) -> bool {
    if d.is_null() {
        return false;
    }
    // SAFETY: header and the member matching `type_`, inside the 136-byte descriptor; members
    // shared with v6 sit at the same offsets, so v6 reads them.
    unsafe {
        let Some(ty) = core::wanted_type(addr_of!((*d).type_).read()) else {
            return false;
        };
        if !matches!(
            ty,
            ty::COLL_API | ty::P2P_API | ty::COLL | ty::P2P | ty::CE_COLL | ty::KERNEL_PHASE
        ) {
            return v6::translate(d.cast(), 7, s);
        }
        s.reset(
            ty,
            addr_of!((*d).parent_obj).read(),
            addr_of!((*d).rank).read(),
        );
        match ty {
            ty::COLL_API => {
                let a = addr_of!((*d).u.coll_api).read();
                let b = a.base;
                t::coll_api(
                    s,
                    b.func,
                    b.count,
                    b.datatype,
                    b.root,
                    b.stream as u64,
                    b.graph_captured,
                    a.user_tag,
                )
            }
            ty::P2P_API => {
                let a = addr_of!((*d).u.p2p_api).read();
                let b = a.base;
                t::p2p_api(
                    s,
                    b.func,
                    b.count,
                    b.datatype,
                    b.stream as u64,
                    b.graph_captured,
                    a.user_tag,
                )
            }
            ty::COLL => t::coll(s, &coll_fields(&addr_of!((*d).u.coll).read())),
            ty::P2P => t::p2p(s, v5::p2p_fields(&addr_of!((*d).u.p2p).read().base, true)),
            ty::CE_COLL => t::ce_coll(s, &addr_of!((*d).u.ce_coll).read().base),
            _ => {
                let k = addr_of!((*d).u.kernel_phase).read();
                s.args[2] = u64::from(k.channel_id);
                s.args[3] = u64::from(k.phase_id);
                s.args[4] = k.p_timer;
            }
        }
        true
    }
}

fn coll_fields(c: &CollV7) -> Coll {
    v5::coll_fields(&c.base, u8::from(c.is_sym_coll), true)
}

impl HotDescr for *mut Descr {
    #[inline(always)]
    unsafe fn kernel_ch(self) -> Option<(*mut c_void, u64)> {
        // SAFETY: forwarded contract; v7 keeps v5's KernelCh.
        unsafe { v5::kernel_ch_parent_and_timer(self) }
    }

    #[inline(always)]
    unsafe fn op(self, ty: u64) -> Option<OpStart> {
        if self.is_null() {
            return None;
        }
        // SAFETY: the header and the member `ty` selects, inside the 136-byte descriptor.
        unsafe {
            let parent = addr_of!((*self).parent_obj).read();
            match ty as u32 {
                event::COLL => hot::coll(parent, &coll_fields(&addr_of!((*self).u.coll).read())),
                event::P2P => hot::p2p(
                    parent,
                    &v5::p2p_fields(&addr_of!((*self).u.p2p).read().base, true),
                ),
                _ => None,
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init(
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
    // SAFETY: NCCL's init arguments (v7 = v5 order).
    unsafe { core::init(7, ctx, mask, facts) }
}

profiler_entry_points!(
    ncclProfiler_v7,
    "7",
    InitV5,
    StateArgsV4,
    core::record_state_v4,
    |d, s| translate(d, s)
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    // Absolute offsets from nccl-facts §1.9 minus the union's 24.
    #[test]
    fn descriptor_layout() {
        assert_eq!(size_of::<Descr>(), 136);
        assert_eq!(offset_of!(Descr, u), 24);
        assert_eq!(offset_of!(CollApiV7, user_tag), 72 - 24);
        assert_eq!(offset_of!(P2pApiV7, user_tag), 64 - 24);
        assert_eq!(offset_of!(CollV7, kernel_variant), 112 - 24);
        assert_eq!(offset_of!(CollV7, is_sym_coll), 120 - 24);
        assert_eq!(offset_of!(CollV7, user_tag), 128 - 24);
        assert_eq!(offset_of!(P2pV7, user_tag), 72 - 24);
        assert_eq!(offset_of!(CeCollV7, user_tag), 112 - 24);
        assert_eq!(offset_of!(KernelPhase, channel_id), 0);
        assert_eq!(offset_of!(KernelPhase, phase_id), 25 - 24);
        assert_eq!(offset_of!(KernelPhase, phase_name), 32 - 24);
        assert_eq!(offset_of!(KernelPhase, p_timer), 40 - 24);
    }
}
