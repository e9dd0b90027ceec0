//! Per-communicator contexts: the `void*` the plugin returns from `init`. They come from a
//! fixed static table, are never freed (a shared proxy thread may use a context after its
//! communicator was finalized, and the library stays mapped across NCCL's dlclose), and are
//! looked up by address range before use, so a pointer NCCL copied from another process (PXN)
//! or a stale value is recognised instead of dereferenced.

use crate::agg::AggTable;
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Communicator inits one process can profile; later ones get no context (NCCL then sends
/// them no events) and are counted in the dump header.
pub const MAX_COMMS: usize = 1024;

pub const FREE: u32 = 0;
pub const LIVE: u32 = 1;
pub const FINALIZED: u32 = 2;

/// One cache line each, so `lookup`'s range check divides by a power of two.
#[repr(C, align(64))]
pub struct CommCtx {
    pub state: AtomicU32,
    pub abi: AtomicU32,
    /// commId (= NCCL's commHash). v1-v3 inits do not pass it: learned from the first Coll/P2p.
    pub comm_id: AtomicU64,
    pub rank: AtomicI32,
    pub nranks: AtomicI32,
    pub nnodes: AtomicI32,
    pub agg: AtomicPtr<AggTable>,
    /// File offset of the aggregate blob (0 = none), for the init records.
    pub agg_blob: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: CommCtx = CommCtx {
    state: AtomicU32::new(FREE),
    abi: AtomicU32::new(0),
    comm_id: AtomicU64::new(0),
    rank: AtomicI32::new(-1),
    nranks: AtomicI32::new(0),
    nnodes: AtomicI32::new(0),
    agg: AtomicPtr::new(std::ptr::null_mut()),
    agg_blob: AtomicU64::new(0),
};

static CTXS: [CommCtx; MAX_COMMS] = [EMPTY; MAX_COMMS];
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Takes a fresh context (rare path: `init`).
pub fn claim() -> Option<(u32, &'static CommCtx)> {
    let i = NEXT.fetch_add(1, Ordering::Relaxed);
    let c = CTXS.get(i)?;
    Some((i as u32, c))
}

/// The context at `p`, if `p` is one of ours and initialized.
#[inline]
pub fn lookup(p: *mut c_void) -> Option<(u32, &'static CommCtx)> {
    let base = CTXS.as_ptr() as usize;
    let size = std::mem::size_of::<CommCtx>();
    let off = (p as usize).checked_sub(base)?;
    if off % size != 0 {
        return None;
    }
    let i = off / size;
    let c = CTXS.get(i)?;
    (c.state.load(Ordering::Acquire) != FREE).then_some((i as u32, c))
}

/// The context with index `i` (from an in-flight entry).
#[inline]
pub fn by_index(i: u32) -> Option<&'static CommCtx> {
    CTXS.get(i as usize)
        .filter(|c| c.state.load(Ordering::Acquire) != FREE)
}

impl CommCtx {
    pub fn as_ptr(&'static self) -> *mut c_void {
        (self as *const CommCtx).cast_mut().cast()
    }

    #[inline]
    pub fn agg(&self) -> Option<&'static AggTable> {
        // SAFETY: `agg` is null or a table in a never-unmapped mapping (agg::create).
        unsafe { self.agg.load(Ordering::Acquire).as_ref() }
    }

    /// The commId, once known (v4+ init passes it; v1-v3 learn it from the first Coll/P2p).
    #[inline]
    pub fn known_comm_id(&self) -> Option<u64> {
        match self.comm_id.load(Ordering::Relaxed) {
            0 => None,
            id => Some(id),
        }
    }

    /// v1-v3: the first Coll/P2p that names the communicator fills in what init could not.
    /// Returns true for the one caller that made the change.
    #[inline]
    pub fn learn(&self, comm_hash: u64, rank: i32) -> bool {
        if comm_hash == 0 || self.comm_id.load(Ordering::Relaxed) != 0 {
            return false;
        }
        if self
            .comm_id
            .compare_exchange(0, comm_hash, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.rank.store(rank, Ordering::Relaxed);
        if let Some(t) = self.agg() {
            t.comm_id.store(comm_hash, Ordering::Relaxed);
            t.rank.store(rank as u32, Ordering::Relaxed);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_accepts_only_live_contexts_of_this_table() {
        let (i, c) = claim().expect("table has room");
        assert!(lookup(c.as_ptr()).is_none(), "not live yet");
        c.state.store(LIVE, Ordering::Release);
        assert_eq!(lookup(c.as_ptr()).map(|x| x.0), Some(i));
        let inside = (c.as_ptr() as usize + 8) as *mut c_void;
        assert!(lookup(inside).is_none());
        assert!(lookup(std::ptr::null_mut()).is_none());
        assert!(lookup(0xdead_0000usize as *mut c_void).is_none());
        assert!(by_index(i).is_some());
        assert!(c.learn(0x77, 3));
        assert!(!c.learn(0x88, 4));
        assert_eq!(c.comm_id.load(Ordering::Relaxed), 0x77);
    }
}
