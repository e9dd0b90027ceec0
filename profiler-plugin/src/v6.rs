//! ABI v6 (NCCL 2.29.2+): v5 plus copy-engine collectives (CeColl, CeSync, CeBatch). Init,
//! state args and every v5 member are unchanged, byte for byte (112-byte descriptor).

use crate::abi::*;
use crate::core::{self, InitFacts, Start};
use crate::hot::{HotDescr, OpStart};
use crate::translate::{self as t, ty};
use crate::v5;
use std::ffi::{c_char, c_int, c_void};
use std::ptr::addr_of;

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnion {
    pub v5: v5::DescrUnion,
    pub ce_coll: CeColl,
    pub ce_sync: CeSync,
    pub ce_batch: CeBatch,
}

#[repr(C)]
pub struct Descr {
    pub type_: u64,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnion,
}

/// # Safety
/// `d` is NULL or a v6-layout descriptor (or a later one with the same shared members).
pub unsafe fn translate(d: *const Descr, version: u32, s: &mut Start) -> bool {
    if d.is_null() {
        return false;
    }
    // SAFETY: header and the member matching `type_`; v5 members sit at the same offsets.
    unsafe {
        let Some(ty) = core::wanted_type(addr_of!((*d).type_).read()) else {
            return false;
        };
        if !matches!(ty, ty::CE_COLL | ty::CE_SYNC | ty::CE_BATCH) {
            return v5::translate(d.cast(), version, s);
        }
        s.reset(
            ty,
            addr_of!((*d).parent_obj).read(),
            addr_of!((*d).rank).read(),
        );
        match ty {
            ty::CE_COLL => t::ce_coll(s, &addr_of!((*d).u.ce_coll).read()),
            ty::CE_SYNC => t::ce_sync(s, &addr_of!((*d).u.ce_sync).read()),
            _ => t::ce_batch(s, &addr_of!((*d).u.ce_batch).read()),
        }
        true
    }
}

impl HotDescr for *mut Descr {
    #[inline(always)]
    unsafe fn kernel_ch(self) -> Option<(*mut c_void, u64)> {
        // SAFETY: forwarded contract; v6 keeps v5's KernelCh.
        unsafe { v5::kernel_ch_parent_and_timer(self) }
    }

    #[inline(always)]
    unsafe fn op(self, ty: u64) -> Option<OpStart> {
        // SAFETY: forwarded contract; v6 keeps v5's Coll and P2p byte for byte.
        unsafe { v5::hot_op(self.cast(), ty) }
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
    // SAFETY: NCCL's init arguments (v6 = v5 order).
    unsafe { core::init(6, ctx, mask, facts) }
}

profiler_entry_points!(
    ncclProfiler_v6,
    "6",
    InitV5,
    StateArgsV4,
    core::record_state_v4,
    |d, s| translate(d, 6, s)
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn descriptor_layout() {
        assert_eq!(size_of::<Descr>(), 112);
        assert_eq!(offset_of!(Descr, u), 24);
        assert_eq!(size_of::<Descr>(), size_of::<v5::Descr>());
    }
}
